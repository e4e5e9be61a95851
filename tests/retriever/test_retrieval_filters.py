"""Filters apply before vector math: tenant, collection, grade, status, selective filters."""

from __future__ import annotations

import json
from typing import Any

import pytest

from lectern_common.embeddings import Embedder
from lectern_common.events import RetrievalFilters, RetrieveRequest
from lectern_retriever import repository
from lectern_retriever.config import Settings
from lectern_retriever.handlers import Retriever

pytestmark = pytest.mark.integration

PHOTO = "Photosynthesis turns light, water and carbon dioxide into glucose and oxygen."


def ask(tenant_id: str, query: str = "how does photosynthesis work", **kw: Any) -> RetrieveRequest:
    """A request with both sides and no per-document cap."""
    kw.setdefault("max_per_document", None)
    return RetrieveRequest(tenant_id=tenant_id, query=query, **kw)


async def test_tenant_isolation_and_assessment_excluded(
    db_pool: Any,
    retriever: Any,
    embedder: Embedder,
    tenant_id: str,
    add_doc: Any,
) -> None:
    mine = await add_doc(db_pool, tenant_id=tenant_id, texts=[PHOTO], embedder=embedder)
    exam = await add_doc(
        db_pool, tenant_id=tenant_id, texts=[PHOTO + " Exam answer key."], embedder=embedder,
        collection="assessment",
    )  # fmt: skip
    await add_doc(db_pool, tenant_id=tenant_id + "x", texts=[PHOTO], embedder=embedder)
    reply = await retriever.retrieve(ask(tenant_id))
    assert [c.document_id for c in reply.candidates] == [mine]
    top = reply.candidates[0]
    assert top.dense_rank == 1 and top.sparse_rank == 1
    assert top.dense_score is not None and top.dense_score > 0.5
    assert top.fused_score == pytest.approx(2 / 61)
    assert set(reply.timings_ms) >= {"rewrite", "embed", "dense", "sparse", "fuse", "total"}
    staff = await retriever.retrieve(
        ask(tenant_id, filters=RetrievalFilters(collections=["educational", "assessment"]))
    )
    assert {c.document_id for c in staff.candidates} == {mine, exam}


async def test_only_indexed_documents_are_searched(
    db_pool: Any,
    retriever: Any,
    embedder: Embedder,
    tenant_id: str,
    add_doc: Any,
    set_doc_status: Any,
) -> None:
    live = await add_doc(db_pool, tenant_id=tenant_id, texts=[PHOTO], embedder=embedder)
    for status in ("archived", "deleted", "superseded", "processing"):
        await add_doc(db_pool, tenant_id=tenant_id, texts=[PHOTO], embedder=embedder, status=status)
    reply = await retriever.retrieve(ask(tenant_id))
    assert [c.document_id for c in reply.candidates] == [live]
    # archiving takes a document out of both searches at once; restoring brings it back
    await set_doc_status(db_pool, live, "archived")
    assert (await retriever.retrieve(ask(tenant_id))).candidates == []
    await set_doc_status(db_pool, live, "indexed")
    reply = await retriever.retrieve(ask(tenant_id))
    assert [c.document_id for c in reply.candidates] == [live]
    assert {c.dense_rank for c in reply.candidates} == {1}
    assert {c.sparse_rank for c in reply.candidates} == {1}


async def test_grade_exact_and_within_one(
    db_pool: Any,
    retriever: Any,
    embedder: Embedder,
    tenant_id: str,
    add_doc: Any,
) -> None:
    by_grade = {
        grade: await add_doc(
            db_pool, tenant_id=tenant_id, texts=[PHOTO], embedder=embedder, grade_level=grade,
            subject="biology",
        )
        for grade in (5, 6, 7, 9)
    }  # fmt: skip
    exact = await retriever.retrieve(ask(tenant_id, filters=RetrievalFilters(grade_level=6)))
    assert {c.document_id for c in exact.candidates} == {by_grade[6]}
    near = await retriever.retrieve(
        ask(tenant_id, filters=RetrievalFilters(grade_level=6, grade_within_one=True))
    )
    assert {c.document_id for c in near.candidates} == {by_grade[5], by_grade[6], by_grade[7]}
    other_subject = await retriever.retrieve(
        ask(tenant_id, filters=RetrievalFilters(subject="history"))
    )
    assert other_subject.candidates == []


@pytest.mark.parametrize("exact_below", [0, 2000], ids=["hnsw-iterative", "exact"])
async def test_selective_filter_still_yields_k(
    db_pool: Any,
    embedder: Embedder,
    nats_url: str,
    database_url: str,
    tenant_id: str,
    exact_below: int,
    add_doc: Any,
    unit_vectors: Any,
) -> None:
    # 1,500 chunks in one document's worth of noise; 25 of them carry the rare module tag
    vectors = unit_vectors(1500, seed=7)
    texts = [f"filler chunk {i} about nothing in particular" for i in range(1500)]
    tags = ["rare" if i % 60 == 0 else "common" for i in range(1500)]
    for start in range(0, 1500, 500):
        for tag in ("rare", "common"):
            idx = [i for i in range(start, start + 500) if tags[i] == tag]
            await add_doc(
                db_pool, tenant_id=tenant_id, texts=[texts[i] for i in idx],
                vectors=vectors[idx], module_tag=tag,
            )  # fmt: skip
    request = ask(
        tenant_id,
        query="filler chunk",
        k=20,
        k_dense=20,
        k_sparse=0,
        methods=["dense"],
        filters=RetrievalFilters(module_tag="rare"),
        ef_search=40,
    )

    async def search(below: int) -> list[Any]:
        settings = Settings(
            nats_url=nats_url, database_url=database_url, http_port=0, exact_search_below=below
        )
        retriever = Retriever(settings=settings, embedder=embedder)
        await retriever.start()
        try:
            return list((await retriever.retrieve(request)).candidates)
        finally:
            await retriever.close()

    candidates = await search(exact_below)
    assert len(candidates) == 20
    assert all(c.metadata["module_tag"] == "rare" for c in candidates)
    scores = [c.dense_score for c in candidates]
    assert scores == sorted(scores, reverse=True)
    if exact_below == 0:
        # the nearest 20 of the 25, as exact search finds them: an iterative scan in relaxed
        # order hands rows over as it meets them, so the search asks for more, keeps the best
        assert {c.text for c in candidates} == {c.text for c in await search(2000)}


async def test_max_per_document_and_boosts(
    db_pool: Any,
    retriever: Any,
    embedder: Embedder,
    tenant_id: str,
    add_doc: Any,
) -> None:
    texts = [PHOTO, PHOTO + " Chlorophyll.", PHOTO + " Stomata.", PHOTO + " Calvin cycle."]
    big = await add_doc(db_pool, tenant_id=tenant_id, texts=texts, embedder=embedder)
    other = await add_doc(
        db_pool, tenant_id=tenant_id, texts=["Plants make glucose from light."],
        embedder=embedder, topic_tags=["plants"],
    )  # fmt: skip
    capped = await retriever.retrieve(ask(tenant_id, max_per_document=3))
    documents = [c.document_id for c in capped.candidates]
    # three of the big document, then the other one, then the rest of the big one
    assert documents[:4].count(big) == 3 and other in documents[:4]
    assert documents.count(big) == 4
    # rewrite off: boost tags would otherwise also join the query text as context keywords
    plain = await retriever.retrieve(ask(tenant_id, rewrite=False))
    boosted = await retriever.retrieve(ask(tenant_id, rewrite=False, boost_tags=["Plants"]))
    score = {c.document_id: c.fused_score for c in plain.candidates}
    boosted_score = {c.document_id: c.fused_score for c in boosted.candidates}
    assert boosted_score[other] == pytest.approx(score[other] * 1.2)
    cited = await retriever.retrieve(ask(tenant_id, rewrite=False, cited_document_ids=[other]))
    cited_score = {c.document_id: c.fused_score for c in cited.candidates}
    assert cited_score[other] == pytest.approx(score[other] * 1.2)
    assert cited_score[big] == pytest.approx(score[big])


async def test_request_settings_do_not_outlive_the_request(
    nats_url: str, database_url: str, embedder: Embedder, tenant_id: str
) -> None:
    """Connections go back to the pool without a reset query: a request's ef_search (SET
    LOCAL) and a transaction left open must not reach the next user of the connection."""
    settings = Settings(
        nats_url=nats_url, database_url=database_url, http_port=0, pool_size=2, ef_search=64
    )
    retriever = Retriever(settings=settings, embedder=embedder)
    await retriever.start()
    try:
        await retriever.retrieve(ask(tenant_id, methods=["dense"], ef_search=300))
        async with retriever.db().acquire() as conn:
            assert await conn.fetchval("SHOW hnsw.ef_search") == "64"
            assert await conn.fetchval("SHOW hnsw.iterative_scan") == "relaxed_order"
            left_open: Any = conn.transaction()  # asyncpg's Transaction: start() by hand
            await left_open.start()
            await conn.execute("SET LOCAL hnsw.ef_search = 500")
        # the pool holds two connections: take both, the one left in a transaction among them
        async with retriever.db().acquire() as one, retriever.db().acquire() as two:
            for conn in (one, two):
                assert not conn.is_in_transaction()
                assert await conn.fetchval("SHOW hnsw.ef_search") == "64"
    finally:
        await retriever.close()


async def test_candidate_columns_come_from_one_fetch_of_the_fused_top_k(
    db_pool: Any, embedder: Embedder, tenant_id: str, add_doc: Any, set_doc_status: Any
) -> None:
    """Searches return ids and scores; the candidates' columns are fetched once after fusion,
    for the tenant only and only while the chunk's document is still searchable."""
    from lectern_retriever import repository

    mine = await add_doc(
        db_pool, tenant_id=tenant_id, texts=[PHOTO], embedder=embedder, title="Plants",
        subject="biology", topic_tags=["photosynthesis"],
    )  # fmt: skip
    theirs = await add_doc(db_pool, tenant_id=tenant_id + "x", texts=[PHOTO], embedder=embedder)
    ids = {
        row["document_id"]: row["id"]
        for row in await db_pool.fetch(
            "SELECT id, document_id FROM chunks WHERE document_id = ANY($1::uuid[])",
            [mine, theirs],
        )
    }
    async with db_pool.acquire() as conn:
        rows = await repository.candidate_rows(
            conn, tenant_id=tenant_id, chunk_ids=[ids[mine], ids[theirs]]
        )
        assert list(rows) == [ids[mine]]  # another tenant's chunk id yields nothing
        row = rows[ids[mine]]
        assert (row["title"], row["text"], row["subject"]) == ("Plants", PHOTO, "biology")
        # a document archived between the search and the fetch drops out of the reply
        await set_doc_status(conn, mine, "archived")
        assert (
            await repository.candidate_rows(conn, tenant_id=tenant_id, chunk_ids=[ids[mine]]) == {}
        )


async def test_the_planner_knows_how_many_chunks_a_subject_filter_passes(
    db_pool: Any, tenant_id: str, add_doc: Any, unit_vectors: Any
) -> None:
    """The subject filter is on lower(subject); statistics on that expression (migration
    0026) let the planner see that it passes many chunks (without them it guessed 0.5% of
    the table and planned a scan and sort of a large tenant instead of the HNSW index)."""
    import uuid

    subject = f"Subject-{uuid.uuid4().hex[:8]}"
    await add_doc(
        db_pool, tenant_id=tenant_id, texts=[f"passage {i}" for i in range(400)],
        vectors=unit_vectors(400, seed=3), subject=subject,
    )  # fmt: skip
    async with db_pool.acquire() as conn:
        await conn.execute("ANALYZE chunks")
        plan = await conn.fetchval(
            "EXPLAIN (FORMAT JSON) SELECT 1 FROM chunks c WHERE lower(c.subject) = $1",
            subject.lower(),
        )
    estimate = json.loads(plan)[0]["Plan"]["Plan Rows"]
    assert 200 <= estimate <= 800


async def test_a_large_tenant_is_searched_with_a_wider_hnsw_search_unless_the_request_says(
    db_pool: Any,
    database_url: str,
    nats_url: str,
    embedder: Embedder,
    tenant_id: str,
    add_doc: Any,
    unit_vectors: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    await add_doc(
        db_pool, tenant_id=tenant_id, texts=[f"chunk {i}" for i in range(30)],
        vectors=unit_vectors(30, seed=3),
    )  # fmt: skip
    seen: list[int | None] = []
    search = repository.dense_search

    async def spy(conn: Any, **kwargs: Any) -> list[Any]:
        seen.append(kwargs["ef_search"])
        return await search(conn, **kwargs)

    monkeypatch.setattr(repository, "dense_search", spy)

    async def ef_used(above: int, **request: Any) -> int | None:
        settings = Settings(
            nats_url=nats_url, database_url=database_url, http_port=0, exact_search_below=0,
            ef_search_large=300, ef_search_large_above=above,
        )  # fmt: skip
        retriever = Retriever(settings=settings, embedder=embedder)
        await retriever.start()
        try:
            reply = await retriever.retrieve(ask(tenant_id, query="chunk", **request))
        finally:
            await retriever.close()
        assert reply.candidates
        return seen.pop()

    assert await ef_used(29) == 300  # 30 chunks: more than the bound
    assert await ef_used(30) is None  # the connection's default (ef_search)
    assert await ef_used(29, ef_search=50) == 50
    assert await ef_used(29, methods=["dense"]) == 300  # the size without BM25's statistics
