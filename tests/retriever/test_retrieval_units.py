"""Pure parts of the retriever: RRF fusion, caps, boosts, rewriting, multi-hop splitting."""

from __future__ import annotations

import json
import uuid
from typing import cast

import pytest

from lectern_common.db.types import Connection
from lectern_common.events import RetrievalFilters, RetrieveRequest
from lectern_common.events.retrieval import Turn
from lectern_retriever.fusion import Hit, RankedList, cap_per_document, rrf_fuse
from lectern_retriever.repository import build_filter
from lectern_retriever.rewrite import (
    RewriteContext,
    Rewritten,
    build_rewrite_prompt,
    expand,
    normalise,
    parse_llm_rewrite,
    rule_rewrite,
    split_multi_hop,
)
from lectern_retriever.service import plan_queries

A, B, C, D = (uuid.UUID(int=i) for i in range(1, 5))
DOC1, DOC2 = uuid.UUID(int=101), uuid.UUID(int=102)


def hits(*pairs: tuple[uuid.UUID, uuid.UUID]) -> list[Hit]:
    return [Hit(c, d, rank, 1.0 / rank) for rank, (c, d) in enumerate(pairs, start=1)]


def test_rrf_sums_reciprocal_ranks_and_merges_duplicates() -> None:
    dense = RankedList("dense", hits((A, DOC1), (B, DOC1), (C, DOC2)))
    sparse = RankedList("sparse", hits((C, DOC2), (A, DOC1)))
    fused = rrf_fuse([dense, sparse], k=60, limit=10, max_per_document=None)
    by_id = {f.chunk_id: f for f in fused}
    assert by_id[A].fused_score == pytest.approx(1 / 61 + 1 / 62)
    assert by_id[C].fused_score == pytest.approx(1 / 63 + 1 / 61)
    assert by_id[B].fused_score == pytest.approx(1 / 62)
    assert [f.chunk_id for f in fused] == [A, C, B]
    assert (by_id[C].dense_rank, by_id[C].sparse_rank) == (3, 1)
    assert by_id[B].sparse_rank is None


def test_rrf_weights_change_the_order() -> None:
    dense = RankedList("dense", hits((A, DOC1), (B, DOC2)), weight=0.3)
    sparse = RankedList("sparse", hits((B, DOC2), (A, DOC1)), weight=0.7)
    fused = rrf_fuse([dense, sparse], limit=10)
    assert [f.chunk_id for f in fused] == [B, A]
    assert fused[0].fused_score == pytest.approx(0.3 / 62 + 0.7 / 61)
    only_dense = rrf_fuse([dense, RankedList("sparse", sparse.hits, weight=0.0)], limit=10)
    assert [f.chunk_id for f in only_dense] == [A, B]


def test_cap_per_document_and_limit() -> None:
    ranked = RankedList("dense", hits((A, DOC1), (B, DOC1), (C, DOC1), (D, DOC2)))
    assert [f.chunk_id for f in rrf_fuse([ranked], limit=3, max_per_document=2)] == [A, B, D]
    # the cap spreads the top over documents; it never starves a one-document tenant
    assert [f.chunk_id for f in rrf_fuse([ranked], limit=10, max_per_document=2)] == [A, B, D, C]
    one_document = RankedList("dense", hits((A, DOC1), (B, DOC1), (C, DOC1)))
    assert len(rrf_fuse([one_document], limit=10, max_per_document=1)) == 3
    assert [f.chunk_id for f in rrf_fuse([ranked], limit=2, max_per_document=None)] == [A, B]
    assert cap_per_document([], max_per_document=1) == []


def test_boosts_multiply_the_fused_score() -> None:
    tagged = [Hit(A, DOC1, 1, 0.9, topic_tags=("Algebra",)), Hit(B, DOC2, 2, 0.8)]
    fused = rrf_fuse(
        [RankedList("dense", tagged)], limit=5, boost_tags=["algebra"], tag_boost=0.5,
        cited_document_ids=[DOC2], cited_boost=0.25,
    )  # fmt: skip
    by_id = {f.chunk_id: f for f in fused}
    assert by_id[A].fused_score == pytest.approx(1.5 / 61)
    assert by_id[B].fused_score == pytest.approx(1.25 / 62)
    assert by_id[A].boosts == ["tags"] and by_id[B].boosts == ["cited"]


def test_normalise_and_expand() -> None:
    assert normalise("  what\u2019s   ATP\n ") == "what's ATP"
    assert expand("whats the eq for photosynth") == (
        "what is the eq (equation) for photosynth (photosynthesis)"
    )
    assert expand("causes of ww2?") == "causes of ww2 (world war ii)?"
    assert expand("world war ii and ww2") == "world war ii and ww2"  # already spelled out


def test_rule_rewrite_adds_context_keywords() -> None:
    context = RewriteContext(subject="biology", module_tag="cell_energy", topic_tags=["ATP"])
    rewritten = rule_rewrite("how do cells get energy", context=context)
    assert rewritten.main == "how do cells get energy biology cell energy ATP"
    assert rewritten.all == [rewritten.main]
    mentioned = rule_rewrite("biology of cells", context=RewriteContext(subject="Biology"))
    assert mentioned.main == "biology of cells"


@pytest.mark.parametrize(
    ("question", "kind", "parts"),
    [
        ("Compare mitosis and meiosis", "comparison", ["mitosis", "meiosis"]),
        ("What is the difference between DNA and RNA?", "comparison", ["DNA", "RNA"]),
        ("mitosis vs meiosis", "comparison", ["mitosis", "meiosis"]),
        ("How does a virus differ from a bacterium?", "comparison", ["a virus", "a bacterium"]),
        (
            "How did the Treaty of Versailles lead to World War II?",
            "cause",
            ["the Treaty of Versailles", "World War II"],
        ),
        ("What is the effect of temperature on enzyme activity?", "cause",
         ["temperature", "enzyme activity"]),
        ("What is photosynthesis?", "simple", []),
        ("compare x and x", "simple", []),
    ],
)  # fmt: skip
def test_split_multi_hop(question: str, kind: str, parts: list[str]) -> None:
    assert split_multi_hop(question) == (kind, parts)


def test_multi_hop_rewrite_runs_sub_queries() -> None:
    rewritten = rule_rewrite("compare photosynth and respiration")
    assert rewritten.kind == "comparison"
    assert rewritten.all == [
        "compare photosynth (photosynthesis) and respiration",
        "photosynth (photosynthesis)",
        "respiration",
    ]
    request = RetrieveRequest(tenant_id="t", query="mitosis vs meiosis", rewrite=False)
    assert plan_queries(request).all == ["mitosis vs meiosis", "mitosis", "meiosis"]
    single = RetrieveRequest(tenant_id="t", query="mitosis vs meiosis", multi_hop=False)
    assert plan_queries(single).all == ["mitosis versus meiosis"]


def test_llm_rewrite_parsing_and_prompt() -> None:
    fallback = Rewritten(main="fallback")
    raw = json.dumps({"queries": ["what is mitosis", "mitosis phases"], "kind": "simple"})
    parsed = parse_llm_rewrite(raw, fallback=fallback)
    assert parsed.all == ["what is mitosis", "mitosis phases"] and parsed.by == "llm"
    assert parse_llm_rewrite("not json", fallback=fallback) is fallback
    assert parse_llm_rewrite('{"queries": []}', fallback=fallback) is fallback
    assert parse_llm_rewrite('{"queries": "x"}', fallback=fallback) is fallback
    prompt = build_rewrite_prompt(
        "why does it happen?", [Turn(role="user", text="tell me about mitosis")]
    )
    assert "user: tell me about mitosis" in prompt and "why does it happen?" in prompt


def test_filter_sql_is_parameterised() -> None:
    filters = RetrievalFilters(
        subject="biology", grade_level=7, grade_within_one=True, content_types=["slides"],
        document_ids=[DOC1], module_tag="m'; DROP TABLE chunks; --",
    )  # fmt: skip
    sql = build_filter(tenant_id="t1", filters=filters)
    assert "DROP" not in sql.clause
    assert sql.params == ["t1", ["educational"], ["text", "table", "qa"], "biology", 6, 8,
                          "m'; DROP TABLE chunks; --", ["slides"], [DOC1]]  # fmt: skip
    assert "c.grade_level BETWEEN $5::smallint AND $6::smallint" in sql.clause
    assert "lower(c.subject) = lower($4)" in sql.clause and "IS NULL" not in sql.clause
    untagged = build_filter(
        tenant_id="t1", filters=RetrievalFilters(subject="Biology", include_untagged=True)
    )
    assert "(lower(c.subject) IS NULL OR lower(c.subject) = lower($4))" in untagged.clause
    everything = build_filter(
        tenant_id="t1", filters=RetrievalFilters(kinds=["references", "text"])
    )
    assert everything.params[2] == ["references", "text"]
    # searchability is the chunk's own flag (kept in step with its document by a trigger)
    assert "c.active" in sql.clause and "documents" not in sql.clause


def test_maxscore_term_selection() -> None:
    from lectern_retriever.service import WeightedTerm, essential_terms, first_pass_terms

    rare = WeightedTerm("transposon", 1, 7.0, 9)
    mid = WeightedTerm("insert", 2, 4.0, 40)
    common = WeightedTerm("gene", 3, 0.5, 900)
    commoner = WeightedTerm("use", 4, 0.2, 5000)
    terms = [rare, mid, common, commoner]
    assert first_pass_terms(terms, postings=50) == [rare, mid]
    assert first_pass_terms(terms, postings=1) == [rare]  # at least one term
    # bounds: 0.2 * 1.9 = 0.38, 0.5 * 1.9 = 0.95; together 1.33
    assert essential_terms(terms, threshold=2.0) == [rare, mid]
    assert essential_terms(terms, threshold=1.0) == [rare, mid, common]
    assert essential_terms(terms, threshold=0.0) == terms


def test_scoring_sets_cover_every_set_that_can_beat_the_threshold() -> None:
    import itertools
    import random

    from lectern_retriever.service import WeightedTerm, scoring_sets

    a, b, c, d = (WeightedTerm(x, i, w, 10 * i) for i, (x, w) in
                  enumerate([("a", 4.0), ("b", 3.0), ("c", 2.0), ("d", 1.0)], start=1))  # fmt: skip
    # no threshold yet: any two terms (one clause per term but the last)
    assert scoring_sets([a, b, c, d], threshold=0.0, limit=32) == [
        ([a], [b, c, d]),
        ([b], [c, d]),
        ([c], [d]),
    ]
    # bounds 7.6, 5.7, 3.8, 1.9: above 11 takes a with b or c, or all of b, c and d
    assert scoring_sets([a, b, c, d], threshold=11.0, limit=32) == [([a], [b, c]), ([b, c], [d])]
    # above 14: a and b with c or d
    assert scoring_sets([a, b, c, d], threshold=14.0, limit=32) == [([a, b], [c, d])]
    assert scoring_sets([a, b, c, d], threshold=19.5, limit=32) == []  # all four: 19.0
    assert scoring_sets([a, b, c, d], threshold=0.0, limit=2) is None

    rng = random.Random(7)
    for _ in range(200):
        count = rng.randint(2, 8)
        terms = [WeightedTerm(f"t{i}", i, rng.uniform(0.2, 6.0), i) for i in range(count)]
        threshold = rng.uniform(0.0, sum(t.bound for t in terms))
        sets = scoring_sets(terms, threshold=threshold, limit=10_000)
        assert sets is not None
        for required, any_of in sets:  # every clause is a set that beats the threshold
            assert sum(t.bound for t in required) + min(t.bound for t in any_of) > threshold
        for size in range(2, len(terms) + 1):  # every set that beats it meets a clause
            for held in itertools.combinations(terms, size):
                if sum(t.bound for t in held) > threshold:
                    assert any(set(required) <= set(held) and set(any_of) & set(held)
                               for required, any_of in sets), (held, threshold)  # fmt: skip


def test_selective_filters() -> None:
    from lectern_retriever.service import has_selective_filter

    assert not has_selective_filter(RetrievalFilters())
    assert not has_selective_filter(RetrievalFilters(collections=["educational", "assessment"]))
    assert has_selective_filter(RetrievalFilters(grade_level=0))
    assert has_selective_filter(RetrievalFilters(content_types=["slides"]))


def test_merge_top_keeps_the_best_once() -> None:
    from lectern_retriever.service import merge_top

    a, b, c, d = (uuid.UUID(int=i) for i in range(1, 5))
    first = [{"chunk_id": a, "score": 9.0}, {"chunk_id": b, "score": 5.0}]
    second = [
        {"chunk_id": c, "score": 7.0},
        {"chunk_id": b, "score": 5.0},
        {"chunk_id": d, "score": 5.0},
    ]
    merged = merge_top(first, second, k=3)
    assert [r["chunk_id"] for r in merged] == [a, c, b]  # ties broken by chunk id, like SQL
    assert len(merge_top(first, [], k=10)) == 2


async def test_an_approximate_dense_search_asks_for_more_than_k_and_keeps_the_nearest_k() -> None:
    """An iterative HNSW scan in relaxed order hands rows over as it meets them past the
    filter, not strictly nearest first: the statement asks it for twice k (its inner LIMIT)
    and keeps the nearest k; an exact search asks for k."""
    import re
    from typing import Any

    import numpy as np

    from lectern_retriever.repository import dense_search

    class Statements:
        def __init__(self) -> None:
            self.sql: list[str] = []

        async def fetch(self, sql: str, *params: Any) -> list[Any]:
            self.sql.append(sql)
            return []

    where = build_filter(tenant_id="t", filters=RetrievalFilters())
    statements = Statements()
    conn = cast(Connection, statements)  # records the statements it is given
    vector = np.zeros(4, dtype=np.float32)
    await dense_search(conn, where=where, embedding=vector, k=20, exact=False, ef_search=None)
    await dense_search(conn, where=where, embedding=vector, k=20, exact=True, ef_search=None)
    limits = [re.findall(r"LIMIT (\d+)", sql) for sql in statements.sql]
    assert limits == [["40", "20"], ["20", "20"]]
