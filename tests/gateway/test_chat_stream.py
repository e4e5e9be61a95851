"""Chat over SSE against the real gateway (real NATS + Postgres), offline generator."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from lectern_testing.chat import (
    Gateway,
    Responders,
    ask,
    gateway_settings,
    new_session,
    published,
    run_responders,
    seed_document,
    serve_gateway,
)

from lectern_answerer import NO_SUPPORT_TEXT
from lectern_common.events import Subjects
from lectern_gateway.chat.decision import FITTED_ANSWER_MARGIN

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
async def responders(nats_url: str, db_pool: Any) -> AsyncIterator[Responders]:
    """Retriever and re-ranker stand-ins."""
    async with run_responders(nats_url, Responders(pool=db_pool)) as running:
        yield running


@pytest.fixture(scope="module")
async def gateway(
    nats_url: str, database_url: str, responders: Responders
) -> AsyncIterator[Gateway]:
    """The gateway with the offline answerer."""
    async with serve_gateway(gateway_settings(nats_url, database_url)) as running:
        yield running


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    """An HTTP client."""
    async with httpx.AsyncClient(timeout=30) as c:
        yield c


@pytest.fixture(autouse=True)
def _reset(responders: Responders) -> None:
    responders.band = "high"
    responders.leak = False
    responders.spans = {}


async def test_answer_streams_typed_events_and_is_stored(
    gateway: Gateway, client: httpx.AsyncClient, db_pool: Any, tenant_id: str, jetstream: Any
) -> None:
    seeded = await seed_document(db_pool, tenant_id=tenant_id)
    headers = gateway.token(tenant_id, "stu-1")
    session = await new_session(client, gateway, headers, mode="tutor", subject="biology")
    got = await ask(client, gateway, session["id"], "What does the Calvin cycle fix?", headers)
    assert got.status == 200
    kinds = [e.type for e in got.events]
    assert kinds[0] == "sources" and kinds[-1] == "done" and "token" in kinds
    assert kinds.index("confidence") > max(i for i, k in enumerate(kinds) if k == "token")
    sources = got.of("sources")[0].sources
    assert [s.label for s in sources][:1] == ["T1"]
    assert sources[0].chunk_id == seeded.chunk_ids[1]  # the Calvin cycle chunk ranks first
    assert sources[0].section == "Photosynthesis > Calvin cycle"
    assert "carbon dioxide" in got.text and "[T1]" in got.text
    done = got.done
    assert done.answered_by == "offline" and done.band == "high" and not done.knowledge_gap
    cited = [c for c in done.citations if c.label == "T1"]
    assert cited and cited[0].valid and cited[0].supported and cited[0].support >= 0.9
    assert cited[0].chunk_id == seeded.chunk_ids[1]
    assert got.of("citation"), "citations are streamed as sentences finish"
    confidence = got.of("confidence")[0]
    assert not confidence.grounding_is_prior and confidence.grounding > 0.5
    # stored: both messages, the assistant one with citations and confidence
    listed = await client.get(
        f"{gateway.url}/v1/sessions/{session['id']}/messages", headers=headers
    )
    messages = listed.json()
    assert [m["role"] for m in messages] == ["user", "assistant"]
    assert messages[1]["id"] == str(done.message_id)
    assert messages[1]["content"] == got.text
    assert messages[1]["citations"][0]["label"] == "T1"
    assert messages[1]["confidence_band"] == "high"
    turns = await published(jetstream, Subjects.CHAT_TURN_COMPLETED, tenant_id)
    assert [t["assistant_message_id"] for t in turns] == [str(done.message_id)]
    assert turns[0]["mode"] == "tutor" and turns[0]["answered_by"] == "offline"


async def test_history_memories_and_filters_reach_retrieval(
    gateway: Gateway,
    client: httpx.AsyncClient,
    db_pool: Any,
    tenant_id: str,
    responders: Responders,
) -> None:
    await seed_document(db_pool, tenant_id=tenant_id)
    headers = gateway.token(tenant_id, "stu-1", role="teacher")
    session = await new_session(
        client, gateway, headers, subject="biology", module="unit-3", grade_level=9
    )
    await ask(client, gateway, session["id"], "What is photosynthesis?", headers)
    await ask(client, gateway, session["id"], "Where does it happen?", headers)
    last = responders.requests[-1]
    assert last.tenant_id == tenant_id
    # even staff chat draws on the educational collection only
    assert last.filters.collections == ["educational"]
    assert last.filters.subject == "biology" and last.filters.module_tag == "unit-3"
    assert last.filters.grade_level == 9 and last.filters.grade_within_one
    assert [t.text for t in last.history][:1] == ["What is photosynthesis?"]
    # chat takes the fused order whole: a cap per document would put a course book's
    # 4th-best chunk behind every other document's top three
    assert last.max_per_document is None


async def test_medium_and_low_bands_open_with_fixed_wording(
    gateway: Gateway,
    client: httpx.AsyncClient,
    db_pool: Any,
    tenant_id: str,
    responders: Responders,
) -> None:
    await seed_document(db_pool, tenant_id=tenant_id)
    headers = gateway.token(tenant_id, "stu-1")
    session = await new_session(client, gateway, headers)
    responders.band = "medium"
    got = await ask(client, gateway, session["id"], "What does chlorophyll absorb?", headers)
    first = got.of("token")[0]
    assert first.origin == "gateway" and first.text.startswith("Based on the available materials")
    assert got.done.band in ("medium", "low")
    responders.band = "low"
    got = await ask(client, gateway, session["id"], "What does chlorophyll absorb?", headers)
    assert "check this answer with your teacher" in got.of("token")[0].text
    assert got.done.band == "low"


async def test_an_answer_the_sources_do_not_support_is_said_in_one_voice(
    gateway: Gateway,
    client: httpx.AsyncClient,
    db_pool: Any,
    tenant_id: str,
    responders: Responders,
    jetstream: Any,
) -> None:
    """A medium band opens with "Based on the available materials ..." only when the answer
    follows: when the answerer finds its sources do not answer, it speaks alone (no opening,
    no closing caveat) and the turn counts as not answered. The question is a knowledge gap
    as much as one the retrieval finds: in the teacher's report, on ``knowledge_gap.detected``
    and on ``chat.turn.completed`` (the student's memory)."""
    await seed_document(db_pool, tenant_id=tenant_id)
    headers = gateway.token(tenant_id, "stu-1")
    session = await new_session(client, gateway, headers)
    question = "Which football team plays its home games in the stroma?"
    for band in ("medium", "low"):
        responders.band = band
        got = await ask(client, gateway, session["id"], question, headers)
        assert got.text.strip() == NO_SUPPORT_TEXT, got.text
        assert all(t.origin != "gateway" for t in got.of("token"))
        assert got.done.band == "low" and got.done.citations == []
        assert got.done.knowledge_gap and got.done.answered_by == "offline"
    gaps = await published(jetstream, Subjects.KNOWLEDGE_GAP_DETECTED, tenant_id)
    assert [g["question"] for g in gaps] == [question, question]
    turns = await published(jetstream, Subjects.CHAT_TURN_COMPLETED, tenant_id)
    assert [(t["knowledge_gap"], t["band"]) for t in turns] == [(True, "low"), (True, "low")]
    teacher = gateway.token(tenant_id, "teacher-1", role="teacher")
    listed = await client.get(f"{gateway.url}/v1/knowledge-gaps", headers=teacher)
    assert [g["questions"] for g in listed.json()] == [[question, question]]
    # an answered question is no gap
    got = await ask(client, gateway, session["id"], "What does chlorophyll absorb?", headers)
    assert got.done.citations and not got.done.knowledge_gap


async def test_knowledge_gap(
    gateway: Gateway, client: httpx.AsyncClient, db_pool: Any, tenant_id: str, jetstream: Any
) -> None:
    await seed_document(db_pool, tenant_id=tenant_id)
    headers = gateway.token(tenant_id, "stu-1")
    session = await new_session(client, gateway, headers, subject="biology")
    got = await ask(client, gateway, session["id"], "Explain quantum entanglement", headers)
    assert got.of("sources")[0].sources == []
    assert "flagged this topic for your teacher" in got.text
    assert "general explanation" in got.text
    assert "photosynthesis" in got.text  # related topics it has material on
    assert got.done.knowledge_gap and got.done.band == "gap" and got.done.answered_by == "gap"
    assert got.done.citations == []
    gaps = await published(jetstream, Subjects.KNOWLEDGE_GAP_DETECTED, tenant_id)
    assert [g["question"] for g in gaps] == ["Explain quantum entanglement"]
    teacher = gateway.token(tenant_id, "teacher-1", role="teacher")
    listed = await client.get(f"{gateway.url}/v1/knowledge-gaps", headers=teacher)
    assert listed.status_code == 200
    (group,) = listed.json()
    assert group["count"] == 1 and group["questions"] == ["Explain quantum entanglement"]
    assert group["topic"] == gaps[0]["topic"]
    denied = await client.get(f"{gateway.url}/v1/knowledge-gaps", headers=headers)
    assert denied.status_code == 403
    # accepting the offer gives a general answer, not another gap
    again = await ask(client, gateway, session["id"], "yes, explain it generally", headers)
    assert not again.done.knowledge_gap
    assert again.text.startswith("This general explanation is not based on your course")
    assert again.done.citations == []


async def test_rate_limit_is_atomic_under_concurrency(
    gateway: Gateway, client: httpx.AsyncClient, db_pool: Any, tenant_id: str
) -> None:
    await seed_document(db_pool, tenant_id=tenant_id)
    headers = gateway.token(tenant_id, "free-1", plan="free")
    session = await new_session(client, gateway, headers)
    results = await asyncio.gather(
        *(
            ask(client, gateway, session["id"], "What is photosynthesis?", headers)
            for _ in range(10)
        )
    )
    ok = [r for r in results if r.status == 200]
    limited = [r for r in results if r.status == 429]
    assert len(ok) == 4 and len(limited) == 6
    for r in limited:
        retry_after = int(r.headers["retry-after"])
        assert 0 < retry_after <= 86400
        assert r.problem is not None and r.problem["status"] == 429
    delayed = [r for r in ok if "rate_limit_delay_ms" in r.done.timings_ms]
    assert len(delayed) == 2  # the 3rd and 4th messages of the day wait
    count = await db_pool.fetchval(
        "SELECT messages FROM usage_counters WHERE tenant_id = $1 AND user_id = 'free-1'",
        tenant_id,
    )
    assert count == 4
    pro = gateway.token(tenant_id, "pro-1", plan="pro")
    pro_session = await new_session(client, gateway, pro)
    for _ in range(5):
        got = await ask(client, gateway, pro_session["id"], "What is photosynthesis?", pro)
        assert got.status == 200


async def test_sessions_flags_and_source_viewer(
    gateway: Gateway, client: httpx.AsyncClient, db_pool: Any, tenant_id: str, jetstream: Any
) -> None:
    seeded = await seed_document(db_pool, tenant_id=tenant_id)
    student = gateway.token(tenant_id, "stu-1", classes=["7B"])
    teacher = gateway.token(tenant_id, "teacher-1", role="teacher")
    session = await new_session(
        client, gateway, student, mode="chat", learning_style="visual", **{"class": "7B"}
    )
    assert session["class_id"] == "7B" and session["status"] == "active"
    got = await ask(client, gateway, session["id"], "What does RuBisCO catalyse?", student)
    message_id = got.done.message_id
    # the source viewer marks the cited span
    view = await client.get(
        f"{gateway.url}/v1/chunks/{seeded.chunk_ids[1]}",
        params={"message_id": str(message_id)},
        headers=student,
    )
    assert view.status_code == 200, view.text
    body = view.json()
    assert body["document_title"] == "Biology notes" and body["page_start"] == 2
    assert body["section"] == "Photosynthesis > Calvin cycle"
    highlights = body["highlights"]  # each cited sentence of the chunk
    assert any("RuBisCO" in h["text"] for h in highlights)
    for highlight in highlights:
        assert body["text"][highlight["start"] : highlight["end"]] == highlight["text"]
    # flags
    flagged = await client.post(
        f"{gateway.url}/v1/messages/{message_id}/flags",
        json={"reason": "unclear", "details": "too short"},
        headers=student,
    )
    assert flagged.status_code == 201, flagged.text
    flag = flagged.json()
    events = await published(jetstream, Subjects.FEEDBACK_FLAGGED, tenant_id)
    assert [e["flag_id"] for e in events] == [flag["id"]]
    assert (await client.get(f"{gateway.url}/v1/flags", headers=student)).status_code == 403
    listed = (await client.get(f"{gateway.url}/v1/flags", headers=teacher)).json()
    assert [f["id"] for f in listed] == [flag["id"]]
    resolved = await client.post(
        f"{gateway.url}/v1/flags/{flag['id']}/resolve",
        json={"resolution": "reworded"},
        headers=teacher,
    )
    assert resolved.json()["status"] == "resolved"
    assert (await client.get(f"{gateway.url}/v1/flags", headers=teacher)).json() == []
    # sessions: list, end (publishes), no more questions
    mine = (await client.get(f"{gateway.url}/v1/sessions", headers=student)).json()
    assert [s["id"] for s in mine] == [session["id"]]
    assert mine[0]["title"] == "What does RuBisCO catalyse?"
    ended = await client.post(f"{gateway.url}/v1/sessions/{session['id']}/end", headers=student)
    assert ended.json()["ended"] is True and ended.json()["session"]["end_reason"] == "explicit"
    again = await client.post(f"{gateway.url}/v1/sessions/{session['id']}/end", headers=student)
    assert again.json()["ended"] is False
    closed = await ask(client, gateway, session["id"], "More?", student)
    assert closed.status == 409
    ends = await published(jetstream, Subjects.CHAT_SESSION_ENDED, tenant_id)
    # the flagged answer is counted: memory waits for that many flags before distilling
    assert [
        (e["session_id"], e["reason"], e["message_count"], e["flagged_messages"]) for e in ends
    ] == [(session["id"], "explicit", 2, 1)]


async def test_sessions_validate_input(
    gateway: Gateway, client: httpx.AsyncClient, tenant_id: str
) -> None:
    headers = gateway.token(tenant_id, "stu-1")
    bad = await client.post(f"{gateway.url}/v1/sessions", json={"mode": "exam"}, headers=headers)
    assert bad.status_code == 422
    assert bad.headers["content-type"].startswith("application/problem+json")
    missing = await client.get(
        f"{gateway.url}/v1/sessions/{uuid.uuid4()}/messages", headers=headers
    )
    assert missing.status_code == 404
    anonymous = await client.get(f"{gateway.url}/v1/sessions")
    assert anonymous.status_code == 401


async def test_lectern_ask_streams_to_the_terminal(
    gateway: Gateway, db_pool: Any, tenant_id: str
) -> None:
    import io

    from lectern_cli.ask_cmd import ask as cli_ask

    await seed_document(db_pool, tenant_id=tenant_id)
    token = gateway.token(tenant_id, "stu-1")["Authorization"].split()[1]
    out = io.StringIO()
    code = await cli_ask(
        url=gateway.url,
        token=token,
        question="What does the Calvin cycle fix?",
        session_id=None,
        mode="tutor",
        subject=None,
        out=out,
    )
    printed = out.getvalue()
    assert code == 0
    assert "carbon dioxide" in printed and "[T1]" in printed
    assert "Sources:\n  [T1] Biology notes (p. 2, Photosynthesis > Calvin cycle)" in printed
    assert "Confidence: high" in printed and "answered by offline" in printed


async def test_the_readers_answer_span_is_marked_and_its_absence_refuses(
    gateway: Gateway, client: httpx.AsyncClient, db_pool: Any, tenant_id: str,
    responders: Responders, nats_url: str, database_url: str,
) -> None:  # fmt: skip
    seeded = await seed_document(db_pool, tenant_id=tenant_id)
    student = gateway.token(tenant_id, "stu-1")
    session = await new_session(client, gateway, student, mode="chat")
    phrase = "the first step of carbon fixation"
    responders.spans = {phrase: FITTED_ANSWER_MARGIN + 5}
    got = await ask(client, gateway, session["id"], "What does RuBisCO catalyse?", student)
    assert got.status == 200 and not got.done.knowledge_gap
    marked = [s for s in got.of("sources")[0].sources if s.answer is not None]
    assert [s.chunk_id for s in marked] == [seeded.chunk_ids[1]]
    view = await client.get(
        f"{gateway.url}/v1/chunks/{seeded.chunk_ids[1]}",
        params={"message_id": str(got.done.message_id)}, headers=student,
    )  # fmt: skip
    body = view.json()
    answer = marked[0].answer
    assert answer is not None and body["text"][answer.start : answer.end] == phrase
    # the answer's sentence says the span: its citation carries it, the viewer marks it
    cited = [c.citation for c in got.of("citation") if c.citation.answer is not None]
    assert [c.answer for c in cited] == [answer]
    assert [h["text"] for h in body["highlights"] if h["kind"] == "answer"] == [phrase]
    # the reader finds no answer in any source: by default the band decides, and a
    # deployment that refuses on the fitted margin calls it a knowledge gap
    responders.spans = {"RuBisCO": FITTED_ANSWER_MARGIN - 3}
    answered = await ask(client, gateway, session["id"], "What does RuBisCO catalyse?", student)
    assert not answered.done.knowledge_gap
    settings = gateway_settings(nats_url, database_url, answer_margin=FITTED_ANSWER_MARGIN)
    async with serve_gateway(settings) as strict:
        refused = await ask(client, strict, session["id"], "What does RuBisCO catalyse?", student)
    assert refused.done.knowledge_gap and refused.done.band == "gap"
    assert not refused.of("citation")
