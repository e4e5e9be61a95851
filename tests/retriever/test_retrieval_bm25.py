"""BM25 inside Postgres: scores equal a Python reference; statistics follow documents."""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import numpy as np
import pytest

from lectern_common.bm25 import K1, B, document_weight, idf, tsqueries_two_of, tsquery_or
from lectern_common.events import RetrieveRequest

pytestmark = pytest.mark.integration

CORPUS = [
    ["Photosynthesis converts light energy into chemical energy in chloroplasts."],
    ["Mitochondria produce ATP by cellular respiration.", "Respiration uses oxygen."],
    ["The chloroplast holds chlorophyll, which absorbs light; light drives photosynthesis."],
    ["Cellular respiration and photosynthesis are linked cycles of energy and matter."],
    ["Energy energy energy: a chapter on kinetic and potential energy in physics."],
]


async def chunk_terms(pool: Any, tenant_id: str) -> dict[Any, Counter[str]]:
    """Lexeme counts of the tenant's indexed chunks (Postgres does the tokenising)."""
    rows = await pool.fetch(
        """SELECT c.id, t.lexeme, array_length(t.positions, 1) AS tf
           FROM chunks c, unnest(c.tsv) t
           WHERE c.tenant_id = $1 AND c.doc_length IS NOT NULL""",
        tenant_id,
    )
    terms: dict[Any, Counter[str]] = {}
    for row in rows:
        terms.setdefault(row["id"], Counter())[row["lexeme"]] = row["tf"]
    return terms


async def reference_scores(pool: Any, tenant_id: str, query: str) -> dict[Any, float]:
    """BM25 (k1 0.9, b 0.4) of every chunk for the query, computed here from raw counts."""
    terms = await chunk_terms(pool, tenant_id)
    lexemes = [
        r["lexeme"]
        for r in await pool.fetch("SELECT lexeme FROM unnest(to_tsvector('english', $1))", query)
    ]
    n = len(terms)
    avgdl = sum(sum(c.values()) for c in terms.values()) / n
    df = Counter(lex for counts in terms.values() for lex in counts)
    scores: dict[Any, float] = {}
    for chunk_id, counts in terms.items():
        dl = sum(counts.values())
        score = 0.0
        for lex in lexemes:
            tf = counts.get(lex, 0)
            if tf:
                weight = tf * (K1 + 1) / (tf + K1 * (1 - B + B * dl / avgdl))
                score += math.log(1 + (n - df[lex] + 0.5) / (df[lex] + 0.5)) * weight
        if score > 0:
            scores[chunk_id] = score
    return scores


async def load(pool: Any, tenant_id: str, corpus: list[list[str]], add_doc: Any) -> list[Any]:
    """Each entry a document, with random vectors (only the sparse side is tested here)."""
    ids = []
    for number, texts in enumerate(corpus):
        rng = np.random.default_rng(number)
        vectors = rng.standard_normal((len(texts), 384)).astype(np.float32)
        ids.append(await add_doc(pool, tenant_id=tenant_id, texts=texts, vectors=vectors))
    return ids


async def sparse_scores(retriever: Any, tenant_id: str, query: str) -> dict[Any, float]:
    """The retriever's BM25 scores (sparse side only, no rewriting)."""
    reply = await retriever.retrieve(
        RetrieveRequest(
            tenant_id=tenant_id,
            query=query,
            methods=["sparse"],
            k=50,
            k_sparse=50,
            max_per_document=None,
            rewrite=False,
            multi_hop=False,
        )
    )
    return {c.chunk_id: c.sparse_score for c in reply.candidates}


def test_python_helpers() -> None:
    """The Python formulas are BM25's (hand-computed values)."""
    assert idf(chunk_count=10, df=1) == pytest.approx(math.log(1 + 9.5 / 1.5))
    assert idf(chunk_count=10, df=10) == pytest.approx(math.log(1 + 0.5 / 10.5))
    assert document_weight(tf=2, doc_length=10, avg_length=10) == pytest.approx(3.8 / 2.9)
    assert tsquery_or(["cat", "o'neil"]) == "'cat' | 'o''neil'"
    assert tsqueries_two_of(["a", "b", "c"]) == ["'a' & ('b' | 'c')", "'b' & ('c')"]


async def test_statistics_follow_delete_archive_and_restore(
    db_pool: Any, retriever: Any, tenant_id: str, add_doc: Any, set_doc_status: Any
) -> None:
    ids = await load(db_pool, tenant_id, CORPUS, add_doc)

    async def check() -> None:
        terms = await chunk_terms(db_pool, tenant_id)
        stats = await db_pool.fetchrow(
            "SELECT chunk_count, total_length FROM bm25_collection_stats WHERE tenant_id = $1",
            tenant_id,
        )
        assert stats["chunk_count"] == len(terms)
        assert stats["total_length"] == sum(sum(c.values()) for c in terms.values())
        rows = await db_pool.fetch(
            """SELECT v.term, s.df FROM bm25_term_stats s JOIN bm25_vocabulary v ON v.id = s.term_id
               WHERE s.tenant_id = $1 AND s.df > 0""",
            tenant_id,
        )
        expected = Counter(lex for counts in terms.values() for lex in counts)
        assert {r["term"]: r["df"] for r in rows} == dict(expected)

    await check()
    await db_pool.execute("DELETE FROM chunks WHERE document_id = $1", ids[1])
    await check()
    assert (await db_pool.fetchval(
        "SELECT chunk_count FROM bm25_collection_stats WHERE tenant_id = $1", tenant_id
    )) == 4  # fmt: skip
    await set_doc_status(db_pool, ids[0], "archived")
    await check()
    assert ids[0] not in {
        c for c in (await sparse_scores(retriever, tenant_id, "photosynthesis chloroplasts"))
    }
    await set_doc_status(db_pool, ids[0], "indexed")
    await check()
    await db_pool.execute("SELECT lectern_bm25_unindex_document($1)", ids[2])
    await db_pool.execute("SELECT lectern_bm25_unindex_document($1)", ids[2])  # idempotent
    await check()
    await db_pool.execute("SELECT lectern_bm25_reweight($1)", tenant_id)
    query = "photosynthesis light energy"
    expected = await reference_scores(db_pool, tenant_id, query)
    got = await sparse_scores(retriever, tenant_id, query)
    assert {k: pytest.approx(v, rel=1e-5) for k, v in expected.items()} == got


async def test_statistics_are_per_tenant(
    db_pool: Any, retriever: Any, tenant_id: str, add_doc: Any
) -> None:
    other = tenant_id + "-other"
    await load(db_pool, tenant_id, CORPUS[:2], add_doc)
    await load(db_pool, other, CORPUS, add_doc)
    mine = await db_pool.fetchval(
        "SELECT chunk_count FROM bm25_collection_stats WHERE tenant_id = $1", tenant_id
    )
    assert mine == 3
    got = await sparse_scores(retriever, tenant_id, "photosynthesis chlorophyll")
    assert got  # only the tenant's own chunk matches
    doc_of = await db_pool.fetch("SELECT id, tenant_id FROM chunks WHERE id = ANY($1)", list(got))
    assert {r["tenant_id"] for r in doc_of} == {tenant_id}


async def test_maxscore_cut_keeps_the_exact_top_k(
    db_pool: Any, embedder: Any, nats_url: str, database_url: str, tenant_id: str, add_doc: Any
) -> None:
    from lectern_retriever.config import Settings
    from lectern_retriever.handlers import Retriever

    words = ["energy", "light", "cell", "plant", "water", "sugar", "leaf", "root"]
    corpus = [
        [" ".join(words[(i * j) % len(words)] for j in range(1, 2 + i % 7)) + f" item{i % 5}"]
        for i in range(60)
    ]
    corpus.append(["chlorophyll energy light"])
    # one rare query term alone: found only by the single-term pass of the two-term strategy
    corpus.append(["chlorophyll pigment"])
    await load(db_pool, tenant_id, corpus, add_doc)
    await db_pool.execute("SELECT lectern_bm25_reweight($1)", tenant_id)
    query = "chlorophyll item3 energy light cell"
    expected = await reference_scores(db_pool, tenant_id, query)
    best = sorted(expected.values(), reverse=True)[:5]
    # both strategies, whatever their tuning, find the exact top k: MaxScore (pairs off) and
    # two-term candidates first (pairs on), as the sets of terms that can beat the first
    # pass (clauses > 0) or as any two terms (clauses 0)
    for postings, pairs, clauses in ((0, 0, 32), (1, 0, 32), (1000, 0, 32), (1000, 12, 32),
                                     (0, 12, 32), (0, 2, 32), (1, 12, 0), (1, 12, 1),
                                     # chlorophyll and item3 first (14 chunks): a threshold
                                     (20, 12, 32), (20, 12, 1), (20, 12, 0)):  # fmt: skip
        settings = Settings(
            nats_url=nats_url, database_url=database_url, http_port=0,
            maxscore_postings=postings, pair_terms_max=pairs, pass_two_clauses_max=clauses,
        )  # fmt: skip
        retriever = Retriever(settings=settings, embedder=embedder)
        await retriever.start()
        try:
            reply = await retriever.retrieve(
                RetrieveRequest(
                    tenant_id=tenant_id,
                    query=query,
                    methods=["sparse"],
                    k=5,
                    k_sparse=5,
                    max_per_document=None,
                    rewrite=False,
                    multi_hop=False,
                )
            )
        finally:
            await retriever.close()
        got = [c.sparse_score for c in reply.candidates]
        assert got == [pytest.approx(b, rel=1e-5) for b in best]
        assert "chlorophyll pigment" in [c.text for c in reply.candidates]
