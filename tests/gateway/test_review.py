"""The review queues end to end: documents uploaded through the gateway and indexed by the
real ingest worker, questions answered through the real retriever and re-ranker (local
models), on the real NATS and Postgres.

- two uploads that state different numbers (and a negation) appear as conflicts;
- a question without material is a gap; an upload closes it: the re-try answers it in a
  new session and the student is told;
- flagged answers carry question, answer and sources and are resolved;
- near-duplicates are merged; stale material is listed by its subject's horizon.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from lectern_testing.chat import Gateway, ask, gateway_settings, new_session, serve_gateway

from lectern_common.embeddings import LocalEmbedder

pytestmark = [pytest.mark.integration, pytest.mark.slow]

lectern_retriever_app = pytest.importorskip("lectern_retriever.app")
lectern_reranker_app = pytest.importorskip("lectern_reranker.app")
lectern_ingest_app = pytest.importorskip("lectern_ingest.app")

BOILING_A = """# Properties of water

Water is the most common liquid on Earth and covers most of its surface.

## Boiling

Pure water boils at 100 °C at sea level. At the top of a high mountain the air pressure is
lower and water boils at a lower temperature.

## Ice

A whale is a mammal that breathes air through a blowhole on the top of its head.
"""
BOILING_B = """# Water facts for revision

Water covers most of the Earth's surface and is its most common liquid.

## Boiling point

At sea level pure water boils at 90 °C. High on a mountain the lower air pressure makes it
boil at a lower temperature.

## Animals

A whale is not a mammal that breathes air through a blowhole on the top of its head.
"""
TARDIGRADES = """# Tardigrades

Tardigrades, also called water bears, are microscopic animals with eight legs.

## Surviving in space

Tardigrades survive the vacuum of space by drying out into a dormant state called a tun.
In the tun state a tardigrade replaces the water in its cells with a sugar called trehalose
and can survive radiation, freezing and the vacuum of space for days.
"""
GAP_QUESTION = "How do tardigrades survive the vacuum of space?"
OCTOPUS = """# Cephalopods

Octopuses are cephalopods with eight arms and a soft body.

## Camouflage

An octopus changes colour with chromatophores, small sacs of pigment in its skin that
muscles stretch open or squeeze shut. Octopuses can change colour in a fraction of a second
to hide from predators or to signal to other octopuses.
"""
OCTOPUS_QUESTION = "How does an octopus change colour?"


@pytest.fixture(scope="module")
async def stack(nats_url: str, database_url: str) -> AsyncIterator[Gateway]:
    """Real ingest, retriever and re-ranker (local models) and the gateway."""
    from lectern_ingest.config import Settings as IngestSettings
    from lectern_reranker.config import Settings as RerankerSettings
    from lectern_retriever.config import Settings as RetrieverSettings

    common: dict[str, Any] = {
        "nats_url": nats_url, "database_url": database_url, "http_port": 0, "log_json": False,
    }  # fmt: skip
    embedder = LocalEmbedder(RetrieverSettings(**common))
    retriever = lectern_retriever_app.create_app(RetrieverSettings(**common), embedder=embedder)
    reranker = lectern_reranker_app.create_app(RerankerSettings(**common))
    ingest = lectern_ingest_app.create_app(IngestSettings(**common), embedder=embedder)
    async with (
        retriever.router.lifespan_context(retriever),
        reranker.router.lifespan_context(reranker),
        ingest.router.lifespan_context(ingest),
        serve_gateway(
            gateway_settings(nats_url, database_url, gap_closure_interval_s=0.3), worker=True
        ) as gateway,
    ):
        yield gateway


async def _upload(
    client: httpx.AsyncClient, gateway: Gateway, teacher: Any, text: str, name: str, **fields: Any
) -> str:
    response = await client.post(
        f"{gateway.url}/v1/documents", files={"file": (name, text.encode())},
        data={"subject": "science", **fields}, headers=teacher,
    )  # fmt: skip
    assert response.status_code == 202, response.text
    document_id: str = response.json()["id"]
    for _ in range(600):
        status = await client.get(f"{gateway.url}/v1/documents/{document_id}", headers=teacher)
        if status.json()["status"] in ("indexed", "failed", "duplicate"):
            break
        await asyncio.sleep(0.1)
    assert status.json()["status"] == "indexed", status.json()
    return document_id


async def _conflicts(
    client: httpx.AsyncClient, gateway: Gateway, who: Any, *, expect: int
) -> list[Any]:
    """The review queue's conflicts once ``expect`` are there: ingest records them right
    after a document is indexed, so they may arrive a moment after its status says so."""
    queue: list[Any] = []
    for _ in range(300):
        queue = (await client.get(f"{gateway.url}/v1/review/conflicts", headers=who)).json()
        if len(queue) >= expect:
            break
        await asyncio.sleep(0.1)
    return queue


async def test_two_uploads_that_disagree_appear_side_by_side(
    stack: Gateway, tenant_id: str
) -> None:
    teacher = stack.token(tenant_id, "t-1", role="teacher")
    async with httpx.AsyncClient(timeout=60) as client:
        first = await _upload(client, stack, teacher, BOILING_A, "water.md")
        second = await _upload(client, stack, teacher, BOILING_B, "water-revision.md")
        queue = await _conflicts(client, stack, teacher, expect=2)
        kinds = {c["kind"]: c for c in queue}
        assert set(kinds) == {"number", "negation"}, queue
        number = kinds["number"]
        # the new document is side a, the library's is side b
        assert (number["a"]["document_id"], number["b"]["document_id"]) == (second, first)
        assert "90 °C" in number["a"]["statement"] and "100 °C" in number["b"]["statement"]
        assert number["detail"] == "90 °C in one, 100 °C in the other"
        assert number["a"]["title"] and number["b"]["passage"]
        assert "not a mammal" in kinds["negation"]["a"]["statement"]
        summary = (await client.get(f"{stack.url}/v1/review", headers=teacher)).json()
        assert summary["conflicts"] == 2
        student = stack.token(tenant_id, "stu-1")
        refused = await client.get(f"{stack.url}/v1/review/conflicts", headers=student)
        assert refused.status_code == 403
        other = stack.token(f"other-{uuid.uuid4().hex[:6]}", "t-9", role="teacher")
        assert (await client.get(f"{stack.url}/v1/review/conflicts", headers=other)).json() == []

        resolved = await client.post(
            f"{stack.url}/v1/review/conflicts/{number['id']}/resolve",
            json={"resolution": "archive_a", "note": "the revision sheet is wrong"},
            headers=teacher,
        )
        assert resolved.status_code == 200, resolved.text
        assert resolved.json()["status"] == "resolved"
        archived = await client.get(f"{stack.url}/v1/documents/{second}", headers=teacher)
        assert archived.json()["status"] == "archived"
        # the archived side's other conflict leaves the open queue with it
        assert (await client.get(f"{stack.url}/v1/review/conflicts", headers=teacher)).json() == []
        audit = await client.get(f"{stack.url}/v1/documents/{second}/audit", headers=teacher)
        assert [a["action"] for a in audit.json()] == ["archived"]


async def test_an_upload_closes_a_gap_and_the_student_is_told(
    stack: Gateway, tenant_id: str, db_pool: Any
) -> None:
    teacher = stack.token(tenant_id, "t-1", role="teacher")
    student = stack.token(tenant_id, "stu-7")
    async with httpx.AsyncClient(timeout=60) as client:
        await _upload(client, stack, teacher, BOILING_A, "water.md")
        session = await new_session(client, stack, student)
        gap = await ask(client, stack, session["id"], GAP_QUESTION, student)
        assert gap.done.knowledge_gap, gap.text
        queue = (await client.get(f"{stack.url}/v1/review/gaps", headers=teacher)).json()
        assert len(queue) == 1 and queue[0]["count"] == 1
        topic = queue[0]["topic"]
        assert [q["question"] for q in queue[0]["questions"]] == [GAP_QUESTION]
        # nothing to answer with yet: the re-try leaves it open
        early = await client.post(
            f"{stack.url}/v1/review/gaps/retry", json={"topic": topic}, headers=teacher
        )
        assert [r["outcome"] for r in early.json()] == ["still_gap"]

        material = await _upload(client, stack, teacher, TARDIGRADES, "tardigrades.md")
        retried = await client.post(
            f"{stack.url}/v1/review/gaps/retry", json={"topic": topic}, headers=teacher
        )
        assert retried.status_code == 200, retried.text
        [result] = retried.json()
        assert result["outcome"] == "answered", result
        assert result["document_id"] == material and result["band"] != "gap"
        assert (await client.get(f"{stack.url}/v1/review/gaps", headers=teacher)).json() == []

        notices = (await client.get(f"{stack.url}/v1/notices", headers=student)).json()
        assert len(notices) == 1 and GAP_QUESTION in notices[0]["text"]
        assert notices[0]["session_id"] == result["session_id"]
        messages = await client.get(
            f"{stack.url}/v1/sessions/{result['session_id']}/messages", headers=student
        )
        answer = messages.json()[-1]
        assert answer["role"] == "assistant" and "tun" in answer["content"].lower()
        assert {c["document_id"] for c in answer["citations"]} == {material}
        read = await client.post(f"{stack.url}/v1/notices/{notices[0]['id']}/read", headers=student)
        assert read.json()["read_at"] is not None
        unread = await client.get(f"{stack.url}/v1/notices?unread=true", headers=student)
        assert unread.json() == []
        other_student = stack.token(tenant_id, "stu-8")
        assert (await client.get(f"{stack.url}/v1/notices", headers=other_student)).json() == []
    row = await db_pool.fetchrow(
        "SELECT status, answered_from FROM knowledge_gaps WHERE tenant_id = $1", tenant_id
    )
    assert row["status"] == "answered" and str(row["answered_from"]) == material


async def test_flags_duplicates_and_stale_material(stack: Gateway, tenant_id: str) -> None:
    teacher = stack.token(tenant_id, "t-1", role="teacher")
    student = stack.token(tenant_id, "stu-1")
    async with httpx.AsyncClient(timeout=60) as client:
        original = await _upload(client, stack, teacher, TARDIGRADES, "tardigrades.md")
        session = await new_session(client, stack, student)
        got = await ask(client, stack, session["id"], GAP_QUESTION, student)
        assert not got.done.knowledge_gap
        flagged = await client.post(
            f"{stack.url}/v1/messages/{got.done.message_id}/flags",
            json={"reason": "incorrect", "details": "tuns are not about sugar"}, headers=student,
        )  # fmt: skip
        assert flagged.status_code == 201
        [flag] = (await client.get(f"{stack.url}/v1/review/flags", headers=teacher)).json()
        assert flag["question"] == GAP_QUESTION and flag["answer"] == got.text
        assert flag["reason"] == "incorrect" and flag["details"] == "tuns are not about sugar"
        assert {s["document_id"] for s in flag["sources"]} == {original}
        resolved = await client.post(
            f"{stack.url}/v1/review/flags/{flag['id']}/resolve",
            json={"action": "wrong_source", "document_id": original, "note": "checked"},
            headers=teacher,
        )
        assert resolved.json()["status"] == "resolved"
        assert resolved.json()["action"] == "wrong_source"
        assert (await client.get(f"{stack.url}/v1/review/flags", headers=teacher)).json() == []
        audit = await client.get(f"{stack.url}/v1/documents/{original}/audit", headers=teacher)
        assert [a["action"] for a in audit.json()] == ["flag_wrong_source"]

        # a near-duplicate (one sentence changed) is merged into the original
        edited = TARDIGRADES.replace("for days", "for up to ten days")
        copy = await _upload(client, stack, teacher, edited, "tardigrades-v2.md")
        [pair] = (await client.get(f"{stack.url}/v1/review/duplicates", headers=teacher)).json()
        assert (pair["document"]["id"], pair["duplicate_of"]["id"]) == (copy, original)
        merged = await client.post(
            f"{stack.url}/v1/review/duplicates/{copy}", json={"decision": "merge"},
            headers=teacher,
        )  # fmt: skip
        assert merged.status_code == 200, merged.text
        assert merged.json()["status"] == "superseded"
        assert (await client.get(f"{stack.url}/v1/review/duplicates", headers=teacher)).json() == []

        # stale: dated 2015, and the subject's horizon is a year
        await client.patch(
            f"{stack.url}/v1/documents/{original}", json={"freshness_date": "2015-06-01"},
            headers=teacher,
        )  # fmt: skip
        assert (await client.get(f"{stack.url}/v1/review/stale", headers=teacher)).json()[0][
            "horizon_days"
        ] == 1095  # the gateway's default
        horizon = await client.put(
            f"{stack.url}/v1/review/horizons/science", json={"days": 365}, headers=teacher
        )
        assert horizon.status_code == 200
        [stale] = (await client.get(f"{stack.url}/v1/review/stale", headers=teacher)).json()
        assert stale["document"]["id"] == original and stale["horizon_days"] == 365
        assert stale["dated"] == "2015-06-01" and stale["overdue_days"] > 365 * 9
        summary = (await client.get(f"{stack.url}/v1/review", headers=teacher)).json()
        assert summary["stale"] == 1 and summary["flags"] == 0 and summary["duplicates"] == 0


async def test_teachers_see_their_classes_and_class_less_material_admins_all(
    stack: Gateway, tenant_id: str
) -> None:
    admin = stack.token(tenant_id, "a-1", role="admin")
    uploader = stack.token(tenant_id, "t-1", role="teacher")
    other = stack.token(tenant_id, "t-2", role="teacher")
    async with httpx.AsyncClient(timeout=60) as client:
        await _upload(client, stack, uploader, BOILING_A, "water.md", class_id="c-9")
        await _upload(client, stack, uploader, BOILING_B, "revision.md", class_id="c-9")
        await _conflicts(client, stack, admin, expect=2)
        queues = {}
        for name, who in (("admin", admin), ("uploader", uploader), ("other", other)):
            conflicts = await client.get(f"{stack.url}/v1/review/conflicts", headers=who)
            queues[name] = len(conflicts.json())
        # the uploader teaches c-9 (they upload for it); the other teacher does not
        assert queues == {"admin": 2, "uploader": 2, "other": 0}
        summary = (await client.get(f"{stack.url}/v1/review", headers=other)).json()
        assert summary["conflicts"] == 0
        [conflict, _] = (await client.get(f"{stack.url}/v1/review/conflicts", headers=admin)).json()
        refused = await client.post(
            f"{stack.url}/v1/review/conflicts/{conflict['id']}/resolve",
            json={"resolution": "fixed"}, headers=other,
        )  # fmt: skip
        assert refused.status_code == 404


async def test_a_gap_closed_by_a_document_is_retried_once_it_is_indexed(
    stack: Gateway, tenant_id: str
) -> None:
    teacher = stack.token(tenant_id, "t-1", role="teacher")
    student = stack.token(tenant_id, "stu-3")
    async with httpx.AsyncClient(timeout=60) as client:
        await _upload(client, stack, teacher, BOILING_A, "water.md")
        session = await new_session(client, stack, student)
        assert (
            await ask(client, stack, session["id"], OCTOPUS_QUESTION, student)
        ).done.knowledge_gap
        [gap] = (await client.get(f"{stack.url}/v1/review/gaps", headers=teacher)).json()
        uploaded = await client.post(
            f"{stack.url}/v1/documents", files={"file": ("octopus.md", OCTOPUS.encode())},
            data={"subject": "science"}, headers=teacher,
        )  # fmt: skip
        document_id = uploaded.json()["id"]
        # named at once, while the document is still being indexed
        closed = await client.post(
            f"{stack.url}/v1/review/gaps/close",
            json={"topic": gap["topic"], "document_id": document_id}, headers=teacher,
        )  # fmt: skip
        assert closed.status_code == 202, closed.text
        assert closed.json()["status"] == "waiting"
        for _ in range(600):
            [closure] = (
                await client.get(f"{stack.url}/v1/review/gaps/closures", headers=teacher)
            ).json()
            if closure["status"] in ("done", "failed"):
                break
            await asyncio.sleep(0.1)
        assert (closure["status"], closure["answered"], closure["still_open"]) == ("done", 1, 0)
        assert (await client.get(f"{stack.url}/v1/review/gaps", headers=teacher)).json() == []
        [notice] = (await client.get(f"{stack.url}/v1/notices", headers=student)).json()
        assert OCTOPUS_QUESTION in notice["text"]
        unknown = await client.post(
            f"{stack.url}/v1/review/gaps/close",
            json={"topic": "x", "document_id": str(uuid.uuid4())}, headers=teacher,
        )  # fmt: skip
        assert unknown.status_code == 422
