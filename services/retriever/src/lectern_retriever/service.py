"""Hybrid retrieval: rewrite, embed, dense + BM25 search per query, RRF fusion, candidates."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from lectern_common import metrics
from lectern_common.bm25 import (
    K1,
    idf,
    ts_config_for,
    tsqueries_two_of,
    tsquery_all_then_any,
    tsquery_or,
)
from lectern_common.db.types import Pool
from lectern_common.embeddings import Embedder
from lectern_common.events import Candidate, RetrievalFilters, RetrieveReply, RetrieveRequest
from lectern_common.index import guard
from lectern_retriever import repository
from lectern_retriever.fusion import Fused, Hit, RankedList, rrf_fuse
from lectern_retriever.rewrite import (
    RewriteContext,
    Rewritten,
    normalise,
    rule_rewrite,
    split_multi_hop,
)

log = logging.getLogger(__name__)

Vector = np.ndarray[Any, Any]
LlmRewriter = Callable[[RetrieveRequest, Rewritten], Awaitable[Rewritten]]


#: a filter the planner expects to pass this many times ``exact_search_below`` chunks is
#: searched on HNSW without counting them (its estimates of a class filter were a third of
#: the real count at a million chunks: a margin, so that a set small enough for exact search
#: is not sent to HNSW on a wrong estimate)
ESTIMATE_MARGIN = 8


@dataclass(frozen=True)
class SearchDefaults:
    """Service-wide defaults a request may override."""

    dense_weight: float = 1.0
    sparse_weight: float = 1.0
    rrf_k: int = 60
    exact_search_below: int = 2000
    tag_boost: float = 0.2
    cited_boost: float = 0.2
    maxscore_postings: int = 1000
    #: queries with 2..this many terms look at chunks holding two terms first (the tsquery
    #: clauses grow with the square of the terms)
    pair_terms_max: int = 12
    #: the most OR'ed clauses the second BM25 pass may use before it settles for "any two"
    pass_two_clauses_max: int = 32
    #: a tenant of more than ``ef_search_large_above`` chunks is searched at this ef_search
    #: when the request names none: recall@20 against exact search on a 300,000-chunk tenant's
    #: own graph 0.941 at 200, 0.946 at 400, 0.978 at 800 (HNSW p95 17, 20, 37 ms; another
    #: build of the graph 0.928 at 200, 0.964 at 400), `make bench-scale`; a 108,710-chunk
    #: tenant's 0.984 at 200 (0.994 at 800, 10 ms more at p95) keeps the default
    ef_search_large: int = 800
    ef_search_large_above: int = 200_000


class QueryBatcher:
    """Coalesces concurrent query embeddings into one embedder call (one hand-off to the
    encoding thread for all of them; the int8 query model then encodes them one by one)."""

    def __init__(self, embedder: Embedder, *, max_batch: int = 32) -> None:
        self.embedder = embedder
        self.max_batch = max_batch
        self._pending: list[tuple[str, asyncio.Future[Vector]]] = []
        self._task: asyncio.Task[None] | None = None

    async def embed(self, texts: Sequence[str]) -> list[Vector]:
        """Vectors of these queries, batched with whatever else is waiting."""
        loop = asyncio.get_running_loop()
        futures = [loop.create_future() for _ in texts]
        self._pending.extend(zip(texts, futures, strict=True))
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._drain())
        return list(await asyncio.gather(*futures))

    async def _drain(self) -> None:
        while self._pending:
            batch = self._pending[: self.max_batch]
            del self._pending[: self.max_batch]
            try:
                vectors = await self.embedder.embed_queries([text for text, _ in batch])
            except Exception as exc:
                for _, future in batch:
                    if not future.done():
                        future.set_exception(exc)
                continue
            for (_, future), vector in zip(batch, vectors, strict=True):
                if not future.done():
                    future.set_result(np.asarray(vector, dtype=np.float32))


def plan_queries(request: RetrieveRequest) -> Rewritten:
    """The rule-based rewrite, or just normalisation (and multi-hop split) when it is off."""
    filters = request.filters
    if request.rewrite:
        context = RewriteContext(
            subject=filters.subject, module_tag=filters.module_tag, topic_tags=request.boost_tags
        )
        earlier = [turn.text for turn in request.history if turn.role == "user"]
        return rule_rewrite(
            request.query, context=context, multi_hop=request.multi_hop, earlier_questions=earlier
        )
    main = normalise(request.query)
    if not request.multi_hop:
        return Rewritten(main=main)
    kind, parts = split_multi_hop(main)
    return Rewritten(main=main, sub_queries=parts, kind=kind)


def has_selective_filter(filters: RetrievalFilters) -> bool:
    """Whether the filters go beyond tenant and collection."""
    scalars = (filters.subject, filters.grade_level, filters.module_tag, filters.class_id,
               filters.language)  # fmt: skip
    return any(v is not None for v in scalars) or bool(
        filters.content_types
        or filters.document_ids
        or filters.class_ids is not None
        or filters.scope is not None
    )


def query_weights(stats: repository.TermStats) -> dict[int, float]:
    """Term id -> idf for the query's lexemes present in the tenant (live statistics)."""
    weights: dict[int, float] = {}
    for term in stats.terms:
        if term.term_id is not None and term.df > 0:
            weights[term.term_id] = idf(chunk_count=stats.chunk_count, df=term.df)
    return weights


@dataclass(frozen=True)
class WeightedTerm:
    """A query lexeme with its term id, idf and document frequency."""

    lexeme: str
    term_id: int
    idf: float
    df: int

    @property
    def bound(self) -> float:
        """The most this term can add to a chunk's score (a BM25 weight is below k1 + 1)."""
        return self.idf * (K1 + 1.0)


def weighted_terms(stats: repository.TermStats) -> list[WeightedTerm]:
    """The query's terms present in the tenant, rarest first."""
    weights = query_weights(stats)
    terms = {
        t.term_id: WeightedTerm(t.lexeme, t.term_id, weights[t.term_id], t.df)
        for t in stats.terms
        if t.term_id in weights
    }
    return sorted(terms.values(), key=lambda t: (t.df, t.lexeme))


def first_pass_terms(terms: Sequence[WeightedTerm], *, postings: int) -> list[WeightedTerm]:
    """MaxScore's first pass: the rarest terms, up to about ``postings`` matching chunks."""
    chosen: list[WeightedTerm] = []
    total = 0
    for term in terms:  # rarest first
        if chosen and total + term.df > postings:
            break
        chosen.append(term)
        total += term.df
    return chosen


def essential_terms(terms: Sequence[WeightedTerm], *, threshold: float) -> list[WeightedTerm]:
    """Terms a chunk must contain to possibly beat ``threshold`` (MaxScore).

    The commonest terms whose bounds sum below the threshold cannot lift a chunk that has
    none of the others into the top k, so their postings need not be visited.
    """
    dropped = 0.0
    cut = len(terms)
    for index in range(len(terms) - 1, -1, -1):  # commonest first
        if dropped + terms[index].bound >= threshold:
            break
        dropped += terms[index].bound
        cut = index
    return list(terms[:cut])


def scoring_sets(
    terms: Sequence[WeightedTerm], *, threshold: float, limit: int
) -> list[tuple[list[WeightedTerm], list[WeightedTerm]]] | None:
    """Clauses (every one of ``required``, one of ``any_of``) whose OR matches each chunk
    holding two or more of ``terms`` whose bounds sum above ``threshold``.

    They are the minimal such sets of terms, grouped by all but their last term, found in
    order of falling bound (rarest first, so each clause's GIN scan is driven by a rare
    term). A chunk holding two or more of the terms but outside them scores at most the
    threshold. None when more than ``limit`` clauses would be needed.
    """
    order = sorted(terms, key=lambda t: (-t.bound, t.lexeme))
    # the most the terms from index i on can add
    reach = [0.0] * (len(order) + 1)
    for i in range(len(order) - 1, -1, -1):
        reach[i] = reach[i + 1] + order[i].bound
    clauses: list[tuple[list[WeightedTerm], list[WeightedTerm]]] = []

    def walk(prefix: list[WeightedTerm], total: float, start: int) -> bool:
        any_of: list[WeightedTerm] = []
        for j in range(start, len(order)):
            term = order[j]
            if prefix and total + term.bound > threshold:
                any_of.append(term)  # prefix + term beats the threshold, and is minimal
            elif (
                total + reach[j] > threshold
                and j + 1 < len(order)
                and not walk([*prefix, term], total + term.bound, j + 1)
            ):
                return False
        if any_of:
            clauses.append((prefix, any_of))
        return len(clauses) <= limit

    return clauses if walk([], 0.0, 0) else None


def kth_score(rows: Sequence[Any], *, k: int) -> float:
    """The score a chunk must beat to enter a top k of ``rows`` (0 while fewer than k)."""
    return float(rows[-1]["score"]) if len(rows) >= k else 0.0


def merge_top(first: Sequence[Any], second: Sequence[Any], *, k: int) -> list[Any]:
    """The k best of two exactly scored result lists (a chunk in both counts once)."""
    best: dict[Any, Any] = {row["chunk_id"]: row for row in first}
    for row in second:
        best.setdefault(row["chunk_id"], row)
    ranked = sorted(best.values(), key=lambda r: (-float(r["score"]), str(r["chunk_id"])))
    return ranked[:k]


def to_hits(rows: Sequence[Any]) -> list[Hit]:
    """Ranked hits (1-based) from result rows."""
    return [
        Hit(
            chunk_id=row["chunk_id"],
            document_id=row["document_id"],
            rank=rank,
            score=float(row["score"]),
            row=row,
            topic_tags=tuple(row["topic_tags"] or ()),
        )
        for rank, row in enumerate(rows, start=1)
    ]


def to_candidate(fused: Fused, row: Any) -> Candidate:
    """The wire form of a fused hit, with its chunk's candidate columns."""
    metadata: dict[str, Any] = {
        key: row[key]
        for key in (
            "subject", "grade_level", "module_tag", "class_id", "content_type", "language",
            "collection", "topic_tags", "curriculum_standards", "source_priority", "chapter",
            "uploaded_by", "uploader_role",
        )
        if row[key] not in (None, [], "")
    }  # fmt: skip
    if row["freshness_date"] is not None:
        metadata["freshness_date"] = row["freshness_date"].isoformat()
    if row["document_metadata"] and len(json.dumps(row["document_metadata"])) <= MAX_FIELD_CHARS:
        metadata["document"] = row["document_metadata"]
    if fused.boosts:
        metadata["boosts"] = fused.boosts
    return Candidate(
        chunk_id=fused.chunk_id,
        document_id=fused.document_id,
        title=row["title"][:MAX_FIELD_CHARS],
        text=row["text"][:MAX_CANDIDATE_TEXT_CHARS],
        kind=row["kind"],
        context_prefix=_clip(row["context_prefix"], MAX_FIELD_CHARS),
        section_path=_clip(" > ".join(row["section_path"]), MAX_FIELD_CHARS)
        if row["section_path"]
        else None,
        page_start=row["page_start"],
        page_end=row["page_end"],
        slide=row["slide"],
        time_start=row["time_start"],
        token_count=row["token_count"],
        metadata=metadata,
        dense_rank=fused.dense_rank,
        dense_score=fused.dense_score,
        sparse_rank=fused.sparse_rank,
        sparse_score=fused.sparse_score,
        fused_score=fused.fused_score,
    )


#: what one candidate may carry, whatever is stored: a reply (and the re-rank request that
#: echoes it) must stay under NATS's 1 MB payload limit
MAX_CANDIDATE_TEXT_CHARS = 8000
MAX_FIELD_CHARS = 2000
REPLY_BUDGET_BYTES = 768 * 1024


def _clip(text: str | None, limit: int) -> str | None:
    return text if text is None or len(text) <= limit else text[:limit]


def within_payload(
    candidates: list[Candidate], budget: int = REPLY_BUDGET_BYTES
) -> list[Candidate]:
    """The best candidates whose JSON fits in ``budget`` bytes (the rest are dropped)."""
    kept: list[Candidate] = []
    used = 0
    for candidate in candidates:
        size = len(candidate.model_dump_json())
        if used + size > budget:
            log.warning("retrieve reply capped at %d of %d candidates", len(kept), len(candidates))
            break
        kept.append(candidate)
        used += size
    return kept


class _Clock:
    """Per-stage wall times in milliseconds (the longest of concurrent runs of a stage)."""

    def __init__(self) -> None:
        self.timings: dict[str, float] = {}

    async def time(self, stage: str, awaitable: Awaitable[Any]) -> Any:
        start = time.perf_counter()
        try:
            return await awaitable
        finally:
            elapsed = (time.perf_counter() - start) * 1000
            self.timings[stage] = max(self.timings.get(stage, 0.0), round(elapsed, 3))


def _timed_since(start: float) -> float:
    """Milliseconds since ``start`` (a ``time.perf_counter`` reading), to the microsecond."""
    return round((time.perf_counter() - start) * 1000, 3)


def _stemming_configs(request: RetrieveRequest, ts_configs: Sequence[str]) -> Sequence[str]:
    """The text search configurations that stem the question for BM25."""
    if request.filters.language:
        return [ts_config_for(request.filters.language)]
    # chat sets no language: stem the question as each of the tenant's languages is
    return ts_configs or [ts_config_for(None)]


async def _sparse_top_k(
    top: Callable[[Sequence[str]], Awaitable[list[Any]]],
    terms: Sequence[WeightedTerm],
    *,
    k: int,
    defaults: SearchDefaults,
) -> list[Any]:
    """Exact top k of a BM25 query without scoring every chunk that holds one common word.

    1: the rarest terms' chunks (short postings), scored in full; the k-th score is the
    threshold. 2: chunks holding two or more of the other terms whose bounds sum above it.
    Every chunk left holds one of those terms at most, so it scores at most that term's
    bound: 3: only terms whose bound beats the k-th score so far need their chunks looked at.
    """

    def any_of(chosen: Sequence[WeightedTerm]) -> list[str]:
        return [tsquery_or(t.lexeme for t in chosen)]

    first = first_pass_terms(terms, postings=defaults.maxscore_postings)
    rows = await top(any_of(first))
    scored = {t.term_id for t in first}
    rest = [t for t in terms if t.term_id not in scored]
    threshold = kth_score(rows, k=k)
    if len(rest) > max(defaults.pair_terms_max, 1):
        # too many terms for sets of them (their number grows fast): MaxScore
        new = [t for t in essential_terms(terms, threshold=threshold) if t.term_id not in scored]
        return merge_top(rows, await top(any_of(new)), k=k) if new else rows
    if len(rest) >= 2:
        sets = scoring_sets(rest, threshold=threshold, limit=defaults.pass_two_clauses_max)
        clauses = (
            tsqueries_two_of([t.lexeme for t in rest])
            if sets is None
            else [
                tsquery_all_then_any([t.lexeme for t in required], [t.lexeme for t in more])
                for required, more in sets
            ]
        )
        if clauses:
            rows = merge_top(rows, await top(clauses), k=k)
    threshold = kth_score(rows, k=k)
    singles = [t for t in rest if t.bound > threshold]
    return merge_top(rows, await top(any_of(singles)), k=k) if singles else rows


class _Search:
    """One request's searches against one tenant: the SQL filter and what is read once."""

    def __init__(
        self,
        *,
        pool: Pool,
        request: RetrieveRequest,
        defaults: SearchDefaults,
        clock: _Clock,
        configs: Sequence[str],
        model: str | None,
        own_indexes: bool,
    ) -> None:
        self.pool = pool
        self.request = request
        self.defaults = defaults
        self.clock = clock
        self.configs = configs
        self.model = model
        self.where = repository.build_filter(tenant_id=request.tenant_id, filters=request.filters)
        # named as a literal in both searches
        self.own = request.tenant_id if own_indexes else None
        self.selective = has_selective_filter(request.filters)
        self.terms_job: asyncio.Future[list[repository.TermStats]] | None = None
        self.tenant_chunks: int | None = None

    async def term_stats(self, queries: Sequence[str]) -> list[repository.TermStats]:
        """Each query's BM25 term statistics."""
        async with self.pool.acquire() as conn:
            return [
                await repository.query_terms(
                    conn, tenant_id=self.request.tenant_id, ts_configs=self.configs, text=q
                )
                for q in queries
            ]

    def start_term_stats(self, queries: Sequence[str]) -> None:
        """Read the term statistics in the background (they also carry the tenant's size)."""
        self.terms_job = asyncio.ensure_future(self.clock.time("terms", self.term_stats(queries)))

    async def tenant_size(self) -> int:
        """The tenant's chunk count, read once."""
        # the term statistics carry it; without them, one row of the same table
        if self.tenant_chunks is None:
            if self.terms_job is not None:
                self.tenant_chunks = (await self.terms_job)[0].chunk_count
            else:
                async with self.pool.acquire() as conn:
                    self.tenant_chunks = await repository.tenant_chunk_count(
                        conn, tenant_id=self.request.tenant_id
                    )
        return self.tenant_chunks

    async def is_small(self) -> bool:
        """Whether the filtered set is small enough for exact dense search."""
        below = self.defaults.exact_search_below
        # tenant + collection only: the tenant's size bounds the filtered set
        if not self.selective and await self.tenant_size() > below:
            return False
        async with self.pool.acquire() as conn:
            if (
                self.selective
                and await repository.estimated_rows(conn, where=self.where)
                > below * ESTIMATE_MARGIN
            ):
                # far more than exact search takes, as the planner's statistics say: no count
                # (a count's bitmap reads every matching index entry, whatever its limit: 12-22
                # ms for a subject or class holding a quarter of a 300,000-chunk tenant)
                return False
            count = await repository.count_up_to(conn, where=self.where, limit=below)
        return count <= below

    async def ef_search(self, *, small: bool) -> int | None:
        """The HNSW ef_search: the request's, or a larger one for a large tenant."""
        if (
            not small
            and self.request.ef_search is None
            and await self.tenant_size() > self.defaults.ef_search_large_above
        ):
            return self.defaults.ef_search_large
        return self.request.ef_search

    async def dense(self, vector: Vector, *, small: bool, ef_search: int | None) -> list[Any]:
        """The dense side's top k for one query vector."""
        async with self.pool.acquire() as conn, conn.transaction():
            if self.model is not None:
                await guard(conn, self.model)
            return await repository.dense_search(
                conn,
                where=self.where,
                embedding=vector,
                k=self.request.k_dense,
                exact=small,
                ef_search=ef_search,
                own_indexes=self.own,
            )

    async def sparse(self, term_stats: repository.TermStats) -> list[Any]:
        """The BM25 side's exact top k for one query's terms."""
        terms = weighted_terms(term_stats)
        if not terms:
            return []
        vector = repository.sparse_query_vector({t.term_id: t.idf for t in terms})
        k = self.request.k_sparse
        async with self.pool.acquire() as conn:

            async def top(tsqueries: Sequence[str]) -> list[Any]:
                return await repository.sparse_search(
                    conn, where=self.where, tsqueries=tsqueries, query_vector=vector, k=k,
                    own_indexes=self.own,
                )  # fmt: skip

            return await _sparse_top_k(top, terms, k=k, defaults=self.defaults)


def _ranked_lists(
    sides: Sequence[str],
    results: Sequence[list[Any]],
    *,
    request: RetrieveRequest,
    defaults: SearchDefaults,
) -> list[RankedList]:
    """Each side's result rows as a weighted ranked list for fusion."""
    dense_weight = (
        request.dense_weight if request.dense_weight is not None else defaults.dense_weight
    )
    sparse_weight = (
        request.sparse_weight if request.sparse_weight is not None else defaults.sparse_weight
    )
    return [
        RankedList(
            side="dense" if side == "dense" else "sparse",
            hits=to_hits(rows),
            weight=dense_weight if side == "dense" else sparse_weight,
        )
        for side, rows in zip(sides, results, strict=True)
    ]


async def _candidates(
    pool: Pool, fused: Sequence[Fused], *, tenant_id: str, clock: _Clock
) -> list[Candidate]:
    """The fused hits' candidates, read from their chunks and capped to the reply's budget."""
    rows: dict[Any, Any] = {}
    if fused:
        fetch_start = time.perf_counter()
        async with pool.acquire() as conn:
            rows = await repository.candidate_rows(
                conn, tenant_id=tenant_id, chunk_ids=[f.chunk_id for f in fused]
            )
        clock.timings["fetch"] = _timed_since(fetch_start)
    return within_payload([to_candidate(f, rows[f.chunk_id]) for f in fused if f.chunk_id in rows])


async def _search_sides(
    search: _Search,
    queries: Sequence[str],
    embed: Callable[[Sequence[str]], Awaitable[list[Vector]]],
) -> tuple[list[str], list[list[Any]]]:
    """Both sides' result rows for every query, and which side each list is."""
    request, clock = search.request, search.clock
    use_dense = "dense" in request.methods and request.k_dense > 0
    use_sparse = "sparse" in request.methods and request.k_sparse > 0
    if use_sparse:
        search.start_term_stats(queries)
    embed_task = clock.time("embed", embed(queries)) if use_dense else _none()
    small_task = clock.time("filter", search.is_small()) if use_dense else _none()
    terms_task = search.terms_job if search.terms_job is not None else _none()
    vectors, stats, small = await asyncio.gather(embed_task, terms_task, small_task)
    small = bool(small)
    ef_search = await search.ef_search(small=small) if use_dense else request.ef_search
    jobs: list[Awaitable[list[Any]]] = []
    sides: list[str] = []
    for index in range(len(queries)):
        if use_dense:
            dense = search.dense(vectors[index], small=small, ef_search=ef_search)
            jobs.append(clock.time("dense", dense))
            sides.append("dense")
        if stats is not None:  # read exactly when the sparse side is used
            jobs.append(clock.time("sparse", search.sparse(stats[index])))
            sides.append("sparse")
    return sides, list(await asyncio.gather(*jobs))


async def hybrid_search(
    *,
    pool: Pool,
    embed: Callable[[Sequence[str]], Awaitable[list[Vector]]],
    request: RetrieveRequest,
    defaults: SearchDefaults,
    llm_rewriter: LlmRewriter | None = None,
    ts_configs: Sequence[str] = (),
    model: str | None = None,
    own_indexes: bool = False,
) -> RetrieveReply:
    """Candidates for a question: both sides per (sub-)query, fused by weighted RRF.

    ``own_indexes``: the tenant has HNSW and GIN indexes of its own (``tenant_indexes``).

    ``model``: the embedding model ``embed`` uses; each dense search checks, under a share
    lock, that the live index still holds its vectors (``lectern_common.index.guard``).

    ``ts_configs``: the text search configurations of the tenant's documents, which stem the
    question for BM25 when the request names no language (English when empty).
    """
    started = time.perf_counter()
    clock = _Clock()
    plan = plan_queries(request)
    if llm_rewriter is not None and request.rewrite:
        plan = await llm_rewriter(request, plan)
    clock.timings["rewrite"] = _timed_since(started)
    queries = plan.all
    search = _Search(
        pool=pool,
        request=request,
        defaults=defaults,
        clock=clock,
        configs=_stemming_configs(request, ts_configs),
        model=model,
        own_indexes=own_indexes,
    )
    sides, results = await _search_sides(search, queries, embed)

    fuse_start = time.perf_counter()
    fused = rrf_fuse(
        _ranked_lists(sides, results, request=request, defaults=defaults),
        k=defaults.rrf_k,
        limit=request.k,
        max_per_document=request.max_per_document,
        boost_tags=request.boost_tags,
        tag_boost=defaults.tag_boost,
        cited_document_ids=request.cited_document_ids,
        cited_boost=defaults.cited_boost,
    )
    clock.timings["fuse"] = _timed_since(fuse_start)
    candidates = await _candidates(pool, fused, tenant_id=request.tenant_id, clock=clock)
    clock.timings["total"] = _timed_since(started)
    metrics.record_stages("retriever", clock.timings)
    return RetrieveReply(
        request_id=request.request_id,
        candidates=candidates,
        queries=queries,
        timings_ms=clock.timings,
    )


async def _none() -> None:
    return None
