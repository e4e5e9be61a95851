"""A question through the real retriever and re-ranker apps (local MiniLM) and the gateway."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from lectern_testing.chat import (
    PHOTOSYNTHESIS,
    Gateway,
    ask,
    gateway_settings,
    new_session,
    seed_document,
    serve_gateway,
)
from lectern_testing.plugin import LOCAL_EMBEDDING_DIM

from lectern_common.embeddings import LocalEmbedder

pytestmark = [pytest.mark.integration, pytest.mark.slow]

lectern_retriever_app = pytest.importorskip("lectern_retriever.app")
lectern_reranker_app = pytest.importorskip("lectern_reranker.app")


@pytest.fixture(scope="module")
async def stack(nats_url: str, database_url: str) -> AsyncIterator[tuple[Gateway, LocalEmbedder]]:
    """Real retriever + re-ranker (local models) and the gateway."""
    from lectern_reranker.config import Settings as RerankerSettings
    from lectern_retriever.config import Settings as RetrieverSettings

    common: dict[str, Any] = {
        "nats_url": nats_url,
        "database_url": database_url,
        "http_port": 0,
        "log_json": False,
    }
    embedder = LocalEmbedder(RetrieverSettings(**common))
    assert embedder.dimension == LOCAL_EMBEDDING_DIM
    retriever = lectern_retriever_app.create_app(RetrieverSettings(**common), embedder=embedder)
    reranker = lectern_reranker_app.create_app(RerankerSettings(**common))
    async with (
        retriever.router.lifespan_context(retriever),
        reranker.router.lifespan_context(reranker),
        serve_gateway(gateway_settings(nats_url, database_url)) as gateway,
    ):
        yield gateway, embedder


async def test_answer_from_real_retrieval_and_reranking(
    stack: tuple[Gateway, LocalEmbedder], db_pool: Any, tenant_id: str
) -> None:
    gateway, embedder = stack
    seeded = await seed_document(db_pool, tenant_id=tenant_id)
    vectors = await embedder.embed_documents([text for text, _, _ in PHOTOSYNTHESIS])
    for chunk_id, vector in zip(seeded.chunk_ids, vectors, strict=True):
        await db_pool.execute("UPDATE chunks SET embedding = $2 WHERE id = $1", chunk_id, vector)
    other = f"other-{uuid.uuid4().hex[:8]}"
    foreign = await seed_document(db_pool, tenant_id=other, title="Other tenant")
    headers = gateway.token(tenant_id, "stu-1")
    async with httpx.AsyncClient(timeout=60) as client:
        session = await new_session(client, gateway, headers)
        got = await ask(
            client, gateway, session["id"], "Which enzyme catalyses carbon fixation?", headers
        )
    assert got.status == 200, got.problem
    sources = got.of("sources")[0].sources
    assert sources, got.events
    assert sources[0].chunk_id == seeded.chunk_ids[1]  # the RuBisCO chunk
    assert not {s.chunk_id for s in sources} & set(foreign.chunk_ids)
    assert "RuBisCO" in got.text
    assert got.done.answered_by == "offline"
    assert got.done.band in ("high", "medium", "low")
    assert any(c.label == "T1" and c.supported for c in got.done.citations)


VOLCANO = (
    "When a volcano erupts, magma rises through the crust and leaves the vent as lava, ash "
    "and volcanic gases. Pressure from dissolved gases drives explosive eruptions."
)
FILLER = [
    "The French Revolution began in 1789 with the storming of the Bastille.",
    "Shakespeare wrote Hamlet, a tragedy about the prince of Denmark.",
    "A right triangle satisfies the Pythagorean theorem: a squared plus b squared.",
    "The mitochondrion is the site of cellular respiration in eukaryotic cells.",
    "Supply and demand set the price of goods in a competitive market.",
    "Photosynthesis turns light energy into chemical energy stored in glucose.",
    "The Roman Empire was divided into eastern and western halves in 395.",
    "Newton's second law states that force equals mass times acceleration.",
    "Prime numbers have exactly two divisors: one and themselves.",
    "Rivers erode valleys and deposit sediment where they slow down.",
    "The water cycle moves water through evaporation, condensation and precipitation.",
    "DNA carries genetic information in sequences of four nucleotide bases.",
    "A sonnet is a poem of fourteen lines with a fixed rhyme scheme.",
    "Electric current is the flow of charge, measured in amperes.",
    "Plate tectonics explains earthquakes at the boundaries of moving plates.",
]


async def _seed(
    pool: Any, embedder: LocalEmbedder, *, tenant_id: str, texts: list[str], **kwargs: Any
) -> list[uuid.UUID]:
    kwargs.setdefault("subject", None)
    seeded = await seed_document(
        pool, tenant_id=tenant_id, chunks=[(t, ["Notes"], []) for t in texts], **kwargs
    )
    for chunk_id, vector in zip(
        seeded.chunk_ids, await embedder.embed_documents(texts), strict=True
    ):
        await pool.execute("UPDATE chunks SET embedding = $2 WHERE id = $1", chunk_id, vector)
    return seeded.chunk_ids


async def test_the_class_teachers_material_outranks_an_equal_chunk_from_elsewhere(
    stack: tuple[Gateway, LocalEmbedder], db_pool: Any, tenant_id: str
) -> None:
    gateway, embedder = stack
    # t-7b teaches class 7B: they uploaded the class's worksheet as a teacher
    await _seed(
        db_pool, embedder, tenant_id=tenant_id, texts=[FILLER[0]], title="7B worksheet",
        uploaded_by="t-7b", uploader_role="teacher", class_id="7B",
    )  # fmt: skip
    # the same volcano notes, assigned to no class, from t-7b and from another teacher; the
    # other teacher's chunk id sorts first, so the retriever ranks it first on the tie
    (elsewhere,) = await _seed(
        db_pool, embedder, tenant_id=tenant_id, texts=[VOLCANO], title="Volcano notes",
        uploaded_by="t-other", uploader_role="teacher",
        chunk_ids=[uuid.UUID(int=uuid.uuid4().int >> 8)],
    )  # fmt: skip
    (own,) = await _seed(
        db_pool, embedder, tenant_id=tenant_id, texts=[VOLCANO], title="Volcano notes",
        uploaded_by="t-7b", uploader_role="teacher",
        chunk_ids=[uuid.UUID(int=(0xFF << 120) | uuid.uuid4().int >> 8)],
    )  # fmt: skip
    assert str(elsewhere) < str(own)
    for start in range(1, len(FILLER), 3):  # at most 3 chunks a document reach the re-ranker
        await _seed(db_pool, embedder, tenant_id=tenant_id, texts=FILLER[start : start + 3])
    question = "What happens when a volcano erupts?"
    headers = gateway.token(tenant_id, "stu-1", classes=["7B"])
    async with httpx.AsyncClient(timeout=60) as client:
        unassigned = await new_session(client, gateway, headers)
        in_class = await new_session(client, gateway, headers, class_id="7B")
        control = await ask(client, gateway, unassigned["id"], question, headers)
        got = await ask(client, gateway, in_class["id"], question, headers)
        # the retriever passes the uploader's role on to the re-ranker (and to search)
        teacher = gateway.token(tenant_id, "t-7b", role="teacher")
        searched = await client.post(
            f"{gateway.url}/v1/search",
            json={"query": question, "rewrite": False, "cited_document_ids": [str(uuid.uuid4())],
                  "boost_tags": ["volcanoes"]},
            headers=teacher,
        )  # fmt: skip
    assert control.status == 200 and got.status == 200, (control.problem, got.problem)
    # no class: two teachers' equal chunks tie on every signal, the retriever's order stands
    assert control.of("sources")[0].sources[0].chunk_id == elsewhere
    # in class 7B: t-7b is the student's teacher, so their chunk comes first
    sources = got.of("sources")[0].sources
    assert sources[0].chunk_id == own, [s.chunk_id for s in sources]
    assert elsewhere not in {s.chunk_id for s in sources}  # its near-duplicate was dropped
    assert searched.status_code == 200, searched.text
    by_id = {c["chunk_id"]: c for c in searched.json()["candidates"]}
    assert by_id[str(own)]["metadata"]["uploader_role"] == "teacher"
    assert by_id[str(own)]["metadata"]["uploaded_by"] == "t-7b"


ERUPTION_7B = (
    "During an eruption a volcano ejects lava flows and ash; viscous magma traps gas and "
    "erupts explosively."
)
ERUPTION_SHARED = (
    "A volcano erupts when pressure from gas-rich magma breaks through the crust at a vent."
)


async def test_a_student_is_kept_to_their_own_classes_material(
    stack: tuple[Gateway, LocalEmbedder], db_pool: Any, tenant_id: str
) -> None:
    gateway, embedder = stack
    (class_7a,) = await _seed(
        db_pool, embedder, tenant_id=tenant_id, texts=[VOLCANO], title="7A volcano sheet",
        uploaded_by="t-7a", uploader_role="teacher", class_id="7A",
    )  # fmt: skip
    (class_7b,) = await _seed(
        db_pool, embedder, tenant_id=tenant_id, texts=[ERUPTION_7B], title="7B sheet",
        uploaded_by="t-7b", uploader_role="teacher", class_id="7B",
    )  # fmt: skip
    (everyone,) = await _seed(
        db_pool, embedder, tenant_id=tenant_id, texts=[ERUPTION_SHARED], title="Shared",
    )  # fmt: skip
    question = "What happens when a volcano erupts?"
    student = gateway.token(tenant_id, "stu-7b", classes=["7B"])  # the IdP's claim
    teacher = gateway.token(tenant_id, "t-7a", role="teacher")
    async with httpx.AsyncClient(timeout=60) as client:
        url = gateway.url
        # naming another class is refused; no class means the student's own and shared material
        refused = await client.post(f"{url}/v1/sessions", json={"class": "7A"}, headers=student)
        assert refused.status_code == 403 and refused.json()["reason"] == "not_in_class"
        session = await new_session(client, gateway, student)
        got = await ask(client, gateway, session["id"], question, student)
        seen = {s.chunk_id for s in got.of("sources")[0].sources}
        assert seen == {class_7b, everyone}, got.of("sources")
        # search: the same limits, whatever the filters say
        found = await client.post(
            f"{url}/v1/search", json={"query": question, "rewrite": False}, headers=student
        )
        assert {c["chunk_id"] for c in found.json()["candidates"]} == {
            str(class_7b), str(everyone)
        }  # fmt: skip
        forbidden = await client.post(
            f"{url}/v1/search",
            json={"query": question, "filters": {"class_id": "7A"}},
            headers=student,
        )
        assert forbidden.status_code == 403
        sneaky = await client.post(
            f"{url}/v1/search",
            json={"query": question, "filters": {"class_ids": ["7A", "7B"]}},
            headers=student,
        )
        assert str(class_7a) not in {c["chunk_id"] for c in sneaky.json()["candidates"]}
        # the 7A material itself is not there for them
        chunk = await client.get(f"{url}/v1/chunks/{class_7a}", headers=student)
        assert chunk.status_code == 404
        listed = await client.get(f"{url}/v1/documents", headers=student)
        assert "7A volcano sheet" not in {d["title"] for d in listed.json()["items"]}

        # the 7A teacher puts the student on the 7A roster: 7A opens up
        added = await client.put(f"{url}/v1/classes/7A/students/stu-7b", headers=teacher)
        assert added.status_code == 200, added.text
        mine = await client.get(f"{url}/v1/classes/mine", headers=student)
        assert mine.json()["classes"] == ["7A", "7B"]
        roster = await client.get(f"{url}/v1/classes/7A/students", headers=teacher)
        assert [m["user_id"] for m in roster.json()] == ["stu-7b"]
        assert (
            await client.get(f"{url}/v1/classes/7A/students", headers=student)
        ).status_code == 403
        in_7a = await new_session(client, gateway, student, **{"class": "7A"})
        got = await ask(client, gateway, in_7a["id"], question, student)
        assert {s.chunk_id for s in got.of("sources")[0].sources} == {class_7a, everyone}
        removed = await client.delete(f"{url}/v1/classes/7A/students/stu-7b", headers=teacher)
        assert removed.status_code == 204
        # taken off the roster: the old 7A session no longer reaches 7A's material
        got = await ask(client, gateway, in_7a["id"], question, student)
        assert class_7a not in {s.chunk_id for s in got.of("sources")[0].sources}


async def test_a_persona_retrieves_only_its_scope_through_the_real_retriever(
    stack: tuple[Gateway, LocalEmbedder], db_pool: Any, tenant_id: str
) -> None:
    gateway, embedder = stack
    (geology,) = await _seed(
        db_pool, embedder, tenant_id=tenant_id, texts=[VOLCANO], title="Geology notes",
        subject="geology",
    )  # fmt: skip
    (history,) = await _seed(
        db_pool, embedder, tenant_id=tenant_id, texts=[ERUPTION_SHARED], title="Pompeii",
        subject="history",
    )  # fmt: skip
    teacher = gateway.token(tenant_id, "t-1", role="teacher")
    student = gateway.token(tenant_id, "stu-1")
    async with httpx.AsyncClient(timeout=60) as client:
        created = await client.post(
            f"{gateway.url}/v1/personas",
            json={"slug": "geo", "display_name": "Geo", "scope": {"subjects": ["Geology"]}},
            headers=teacher,
        )
        assert created.status_code == 201 and created.json()["indexed_chunks"] == 1
        plain = await new_session(client, gateway, student)
        scoped = await new_session(client, gateway, student, persona="geo")
        question = "What happens when a volcano erupts?"
        everything = await ask(client, gateway, plain["id"], question, student)
        geo = await ask(client, gateway, scoped["id"], question, student)
    assert {s.chunk_id for s in everything.of("sources")[0].sources} >= {geology, history}
    assert {s.chunk_id for s in geo.of("sources")[0].sources} == {geology}
