"""Retrieval at a million chunks over many tenants of skewed sizes (issue 30, part 3).

    .venv/bin/python bench/bench_scale.py [--chunks 1000000] [--tenants 100]
        [--sequential 300] [--requests 2000] [--concurrency 16] [--replicas 2]
        [--recall-questions 50] [--cache-dir DIR] [--json PATH]

1. Corpus: the 14,449 distinct bioasq-dev and pubmedqa texts, embedded once with the real
   model (``--cache-dir`` keeps the vectors) and replicated with jittered vectors, as
   ``bench_retrieval.py``'s 100k part does, over ``--tenants`` tenants: the largest holds
   ``--big-share`` of the chunks (300,000 of 1M), the others follow a Zipf-like decay (many
   small, none below ``--min-tenant-chunks``). Each tenant reads its own window of the texts;
   documents of 10 chunks, interleaved across tenants in insert order as uploads would be,
   carry a subject and a class (a few per tenant, unevenly used) so that filters select.
2. Load: COPY in batches, BM25-indexed per batch by the SQL functions, each tenant
   re-weighted, VACUUM, then the HNSW index built once, then the own indexes of the tenants of
   ``--tenant-index-min-chunks`` or more (``lectern_retriever.tenant_indexes``); each step
   timed.
3. Sequential latency (one request in flight) through NATS to the retriever processes, by
   group: the big tenant, mid-sized and small tenants (samples), common-word questions
   ("what is the main idea of this chapter"), and requests filtered by subject and class
   on the big tenant and on the others.
   Per stage from the reply's timings (dense, BM25 = ``sparse``, fusion = ``fuse``), the
   reply's total minus its query embedding, and end to end at the client.
4. Recall@k of the dense search the retriever runs (HNSW, ef_search 200, iterative scans
   in relaxed order, the tenant's filters) against exact search under the same filters,
   and, as a diagnostic, without any filter (the graph's own recall over the replicas).
5. Throughput with ``--replicas`` retriever processes, ``--concurrency`` in flight, requests
   spread over tenants by their size.
6. Memory (PSS and RSS of Postgres and the retrievers) and disk (table, index and database
   sizes).

A human-readable summary, then one JSON line (also written to ``--json``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Collection, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np
import psutil
from bench_retrieval import (
    EVAL,
    base_vectors,
    jittered,
    say,
    scale_texts,
    start_retrievers,
    stop_retrievers,
    throughput,
    wait_for_retrievers,
)
from inprocess import embedded_stack

from lectern_common.db.types import Connection
from lectern_common.embeddings import LocalEmbedder
from lectern_common.events import RetrievalFilters, RetrieveReply, RetrieveRequest
from lectern_eval.retrieval import percentile
from lectern_retriever import tenant_indexes
from lectern_retriever.config import Settings as RetrieverSettings
from lectern_retriever.handlers import TS_CONFIG_TTL_S

PER_DOC = 10
#: the recall diagnostic without any filter (not a request the retriever would serve)
WHOLE_TABLE = "whole table"
GROUPS = ("big tenant", "mid tenants", "small tenants", "common-word", "filtered big",
          "filtered others")  # fmt: skip
#: what the retriever sets on every connection (lectern_retriever.handlers, config defaults)
EF_SEARCH = 200  # the retriever's default (LECTERN_RETRIEVER_EF_SEARCH); --ef-search sets both
#: the retriever's default: filtered sets this small are searched exactly
EXACT_SEARCH_BELOW = 2000
#: issue 30's targets at 1M chunks
TARGET_P95_MS = 100.0
TARGET_RECALL = 0.95

SUBJECTS = [
    "biology", "chemistry", "medicine", "genetics", "physiology", "pharmacology",
    "neuroscience", "immunology", "nutrition", "public health", "biochemistry", "anatomy",
]  # fmt: skip

#: questions a student asks of whatever is open, with no topic word: every chunk matches
#: their terms weakly, the hard case for BM25's pruning
COMMON_QUESTIONS = [
    "what is the main idea of this chapter",
    "summarise the key points",
    "what does this section explain",
    "can you explain this again in simpler words",
    "what are the most important things to remember",
    "what is this about",
    "give me an overview of the topic",
    "what should I know for the exam",
]


@dataclass
class Tenant:
    """A tenant's size, its window of texts and the metadata its documents draw from."""

    name: str
    chunks: int
    offset: int
    subjects: list[str]
    subject_weights: np.ndarray[Any, Any]
    classes: list[str]
    class_weights: np.ndarray[Any, Any]
    #: documents inserted so far (the next document's first text)
    written: int = 0


@dataclass
class Phases:
    """Wall time of each phase, in seconds."""

    seconds: dict[str, float] = field(default_factory=dict)

    @contextlib.contextmanager
    def time(self, name: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = round(time.perf_counter() - started, 1)
            say(f"-- {name}: {self.seconds[name]:.1f} s")


def tenant_sizes(
    *,
    chunks: int,
    tenants: int,
    big_share: float,
    min_chunks: int,
    exponent: float,
    offset: float,
) -> list[int]:
    """Chunks per tenant, largest first, in whole documents: one of ``big_share`` of all,
    the rest by 1/(rank + offset)**exponent (Zipf-Mandelbrot) over the others, each at
    least ``min_chunks``.

    At 1M chunks and 100 tenants the defaults (2.0, 5) give 300,000, then 109k, 80k ...,
    a median of ~1,600 and the smallest ~660: 57 tenants at or below the retriever's
    exact-search size (2,000), 30 at or below 1,000."""
    docs = chunks // PER_DOC
    big = round(docs * big_share)
    others = tenants - 1
    floor = max(1, min_chunks // PER_DOC)
    spare = docs - big - floor * others
    if others < 1 or spare < 0:
        raise SystemExit(f"{chunks} chunks cannot give {tenants} tenants {min_chunks} each")
    weights = 1.0 / (np.arange(1, others + 1) + offset) ** exponent
    extra = np.floor(spare * weights / weights.sum()).astype(int)
    extra[: spare - int(extra.sum())] += 1  # the rounding's remainder to the largest
    return [big * PER_DOC, *((floor + extra) * PER_DOC).tolist()]


def zipf(n: int) -> np.ndarray[Any, Any]:
    """Weights 1/rank, summing to 1."""
    weights = 1.0 / np.arange(1, n + 1)
    return np.asarray(weights / weights.sum())


def make_tenants(sizes: list[int], texts: int, rng: np.random.Generator) -> list[Tenant]:
    """Tenants with a window of the texts each, a few subjects and classes by their size."""
    tenants = []
    for index, size in enumerate(sizes):
        docs = size // PER_DOC
        subjects = [str(s) for s in rng.choice(SUBJECTS, size=min(len(SUBJECTS), 2 + docs // 2000),
                                                  replace=False)]  # fmt: skip
        classes = [f"class-{index:03d}-{n:02d}" for n in range(min(40, 2 + docs // 800))]
        tenants.append(
            Tenant(
                name=f"bench-t{index:03d}",
                chunks=size,
                offset=int(rng.integers(texts)),
                subjects=subjects,
                subject_weights=zipf(len(subjects)),
                classes=classes,
                class_weights=zipf(len(classes)),
            )
        )
    return tenants


def samples(tenants: list[Tenant], count: int) -> tuple[list[Tenant], list[Tenant]]:
    """Mid-sized tenants (the upper half after the big one) and small ones (the lower half),
    ``count`` of each spread evenly over their ranks."""
    rest = tenants[1:]
    half = len(rest) // 2
    upper, lower = rest[:half] or rest, rest[half:] or rest

    def spread(group: list[Tenant]) -> list[Tenant]:
        picks = np.linspace(0, len(group) - 1, min(count, len(group))).round().astype(int)
        return [group[i] for i in sorted(set(picks.tolist()))]

    return spread(upper), spread(lower)


async def load(
    conn: Any,
    *,
    tenants: list[Tenant],
    texts: list[str],
    base: np.ndarray[Any, Any],
    rng: np.random.Generator,
    batch_docs: int,
    jitter: float,
    blend: float,
) -> None:
    """Documents and chunks by COPY, BM25-indexed batch by batch, tenants interleaved."""
    owners = np.repeat(np.arange(len(tenants)), [t.chunks // PER_DOC for t in tenants])
    rng.shuffle(owners)
    total = len(owners)
    reported = time.perf_counter()
    for start in range(0, total, batch_docs):
        doc_rows: list[tuple[Any, ...]] = []
        chunk_meta: list[tuple[Any, ...]] = []
        rows: list[int] = []
        for owner in owners[start : start + batch_docs].tolist():
            tenant = tenants[owner]
            doc_id = uuid.uuid4()
            subject = tenant.subjects[int(rng.choice(len(tenant.subjects),
                                                     p=tenant.subject_weights))]  # fmt: skip
            class_index = int(rng.choice(len(tenant.classes), p=tenant.class_weights))
            class_id = tenant.classes[class_index]
            grade = 6 + class_index % 7
            first = tenant.offset + tenant.written * PER_DOC
            tenant.written += 1
            doc_rows.append(
                (doc_id, tenant.name, f"{subject} notes {tenant.written}", "notes.txt",
                 "text/plain", 1, doc_id.hex, "bench", "indexed", subject, class_id, grade,
                 "en", PER_DOC)
            )  # fmt: skip
            for i in range(PER_DOC):
                text_index = (first + i) % len(texts)
                rows.append(text_index)
                chunk_meta.append((doc_id, tenant.name, i, subject, class_id, grade, text_index))
        vectors = jittered(base, rows, rng, sigma=jitter)
        if blend:
            # each copy leans towards another text: ~70 copies of a text at 1M chunks would
            # otherwise be near-duplicates, which crowd HNSW's neighbour lists as no real
            # corpus does (the text stays its own, for BM25)
            partners = rng.integers(0, len(base), len(rows))
            vectors = vectors + blend * base[partners]
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        await conn.copy_records_to_table(
            "documents",
            records=doc_rows,
            columns=[
                "id", "tenant_id", "title", "filename", "mime_type", "size_bytes",
                "file_sha256", "uploaded_by", "status", "subject", "class_id", "grade_level",
                "language", "chunk_count",
            ],
        )  # fmt: skip
        records = [
            (uuid.uuid4(), doc_id, tenant_name, index, "text", texts[text_index], 50, "h",
             "educational", vectors[n], subject, class_id, grade, "en", "bench")
            for n, (doc_id, tenant_name, index, subject, class_id, grade, text_index)
            in enumerate(chunk_meta)
        ]  # fmt: skip
        await conn.copy_records_to_table(
            "chunks",
            records=records,
            columns=[
                "id", "document_id", "tenant_id", "chunk_index", "kind", "text",
                "token_count", "content_hash", "collection", "embedding", "subject",
                "class_id", "grade_level", "language", "uploaded_by",
            ],
        )  # fmt: skip
        await conn.execute(
            "SELECT lectern_bm25_index_documents($1::uuid[])", [row[0] for row in doc_rows]
        )
        if time.perf_counter() - reported > 30:
            reported = time.perf_counter()
            say(f"   {min(start + batch_docs, total) * PER_DOC} of {total * PER_DOC} chunks")


@dataclass
class Ask:
    """One request of the benchmark and the group it reports in."""

    group: str
    tenant: Tenant
    question: str
    filters: RetrievalFilters = field(default_factory=RetrievalFilters)

    def request(self) -> RetrieveRequest:
        return RetrieveRequest(tenant_id=self.tenant.name, query=self.question,
                               filters=self.filters)  # fmt: skip


def filters_for(tenant: Tenant, n: int, rng: np.random.Generator) -> RetrievalFilters:
    """A student's filters, in turn: a subject; a class; two classes and a subject.

    Subjects and classes are chosen uniformly, so the rarely used ones (selective filters)
    come up as often as the common ones."""
    subject = tenant.subjects[int(rng.integers(len(tenant.subjects)))]
    classes = [str(c) for c in rng.choice(tenant.classes, size=min(2, len(tenant.classes)),
                                          replace=False)]  # fmt: skip
    kind = n % 3
    if kind == 0:
        return RetrievalFilters(subject=subject)
    if kind == 1:
        return RetrievalFilters(class_id=classes[0])
    return RetrievalFilters(subject=subject, class_ids=classes)


def plan_asks(
    *,
    big: Tenant,
    mid: list[Tenant],
    small: list[Tenant],
    questions: list[str],
    per_group: int,
    rng: np.random.Generator,
) -> list[Ask]:
    """The sequential phase's requests, group by group (bioasq questions in order)."""
    asks: list[Ask] = []
    everyone = [big, *mid, *small]
    position = 0

    def next_question() -> str:
        nonlocal position
        position += 1
        return questions[(position - 1) % len(questions)]

    asks += [Ask("big tenant", big, next_question()) for _ in range(per_group)]
    for group, members in (("mid tenants", mid), ("small tenants", small)):
        for n in range(per_group):
            asks.append(Ask(group, members[n % len(members)], next_question()))
    for n in range(per_group):
        tenant = everyone[n % len(everyone)]
        asks.append(Ask("common-word", tenant, COMMON_QUESTIONS[n % len(COMMON_QUESTIONS)]))
    # filters on the big tenant are where HNSW's iterative scans work hardest (a class of
    # 1% of 300k is 0.3% of the table); on the others they mostly leave few enough chunks
    # for the exact search
    for group, members in (("filtered big", [big]), ("filtered others", [*mid, *small])):
        for n in range(per_group):
            tenant = members[n % len(members)]
            asks.append(Ask(group, tenant, next_question(), filters_for(tenant, n, rng)))
    return asks


def stats(values: list[float]) -> dict[str, float]:
    """p50, p95 and the worst, rounded."""
    return {
        "p50": round(percentile(values, 50), 2),
        "p95": round(percentile(values, 95), 2),
        "max": round(max(values, default=0.0), 2),
    }


async def sequential(client: Any, asks: list[Ask]) -> dict[str, Any]:
    """One request in flight: per group, each stage's p50/p95 and end to end at the client."""
    from lectern_common.broker import request

    samples_ms: dict[str, dict[str, list[float]]] = {}
    by_tenant: dict[str, list[float]] = {}
    sizes: dict[str, int] = {}
    empty: dict[str, int] = {}
    for ask in asks:
        started = time.perf_counter()
        reply = await request(client, ask.request(), RetrieveReply, timeout=60)
        wall = (time.perf_counter() - started) * 1000
        timings = reply.timings_ms
        group = samples_ms.setdefault(ask.group, {})
        measured = {
            "dense": timings.get("dense"),
            "bm25": timings.get("sparse"),
            "fusion": timings.get("fuse"),
            "embed": timings.get("embed"),
            # before the searches, beside the embedding: the count that chooses exact or
            # HNSW, and the query terms' statistics
            "filter_count": timings.get("filter"),
            "terms": timings.get("terms"),
            "total_excl_embed": timings["total"] - timings.get("embed", 0.0),
            "end_to_end": wall,
        }
        for name, value in measured.items():
            if value is not None:
                group.setdefault(name, []).append(value)
        excl_embed = timings["total"] - timings.get("embed", 0.0)
        by_tenant.setdefault(ask.tenant.name, []).append(excl_embed)
        sizes[ask.tenant.name] = ask.tenant.chunks
        if not reply.candidates:
            empty[ask.group] = empty.get(ask.group, 0) + 1
    result: dict[str, Any] = {
        name: {
            "requests": len(group["end_to_end"]),
            "no_candidates": empty.get(name, 0),
            **{stage: stats(values) for stage, values in group.items()},
        }
        for name, group in samples_ms.items()
    }
    # p95 excluding the embedding by tenant, largest first (which tenants make a group slow)
    result["by_tenant"] = {
        f"{name} ({sizes[name]})": round(percentile(values, 95), 1)
        for name, values in sorted(by_tenant.items(), key=lambda kv: -sizes[kv[0]])
    }
    return result


#: the shared HNSW index or a tenant's own (``lectern_retriever.tenant_indexes``)
_HNSW_INDEX = re.compile(r"chunks_embedding_hnsw|chunks_hnsw_t_")


class _Explain:
    """A connection whose ``fetch`` explains the statement instead (for the plan used)."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    async def fetch(self, sql: str, *args: Any) -> list[Any]:
        return list(await self.conn.fetch(f"EXPLAIN (FORMAT JSON) {sql}", *args))


async def recall(
    pool: Any,
    *,
    asks: list[Ask],
    vectors: np.ndarray[Any, Any],
    k: int,
    own_indexes: Collection[str] = (),
    ef_more: int | None = None,
    large: tuple[int, int] | None = None,
) -> dict[str, Any]:
    """Recall@k of the retriever's dense search against exact search under the same filters.

    ``ef_more``: the same HNSW search again at this ef_search (recall and time), to show what
    a wider search would buy. ``large``: (chunks, ef_search): a tenant of more chunks is
    served at that ef_search, as the retriever does (``LECTERN_RETRIEVER_EF_SEARCH_LARGE``).

    ``hnsw`` forces the approximate statement (the planner may still prefer the tenant
    index and sort, which is exact); ``served`` is what the retriever returns, which
    searches exactly when at most ``EXACT_SEARCH_BELOW`` chunks pass the filters.

    A tenant in ``own_indexes`` is searched on its own HNSW index, as the retriever does.

    The ``WHOLE_TABLE`` group (a diagnostic, no tenant filter) tells the graph's own recall
    from what the filters cost: each text's jittered copies (~70 of each at 1M chunks, ~7 at
    100k) crowd each other's neighbour lists, which real corpora do not.
    """
    from lectern_retriever import repository

    groups: dict[str, dict[str, list[float]]] = {}
    for ask, vector in zip(asks, vectors, strict=True):
        where = (
            repository.SqlFilter(clause="c.active")
            if ask.group == WHOLE_TABLE
            else repository.build_filter(tenant_id=ask.tenant.name, filters=ask.filters)
        )
        async with pool.acquire() as conn:
            count = await repository.count_up_to(conn, where=where, limit=EXACT_SEARCH_BELOW)
            started = time.perf_counter()
            graph = (
                ask.tenant.name
                if ask.group != WHOLE_TABLE and ask.tenant.name in own_indexes
                else None
            )
            approximate = await repository.dense_search(
                conn, where=where, embedding=vector, k=k, exact=False, ef_search=None,
                own_indexes=graph,
            )  # fmt: skip
            hnsw_ms = (time.perf_counter() - started) * 1000
            wider, wider_ms = approximate, hnsw_ms
            if ef_more is not None:
                started = time.perf_counter()
                wider = await repository.dense_search(
                    conn, where=where, embedding=vector, k=k, exact=False, ef_search=ef_more,
                    own_indexes=graph,
                )  # fmt: skip
                wider_ms = (time.perf_counter() - started) * 1000
            served = approximate
            if large is not None and ask.tenant.chunks > large[0] and ask.group != WHOLE_TABLE:
                served = await repository.dense_search(
                    conn, where=where, embedding=vector, k=k, exact=False, ef_search=large[1],
                    own_indexes=graph,
                )  # fmt: skip
            shared = approximate
            if graph is not None:
                # the same search on the shared graph, as before the tenant had its own: a
                # generic plan cannot use a partial index
                async with conn.transaction():
                    await conn.execute("SET LOCAL plan_cache_mode = force_generic_plan")
                    shared = await repository.dense_search(
                        conn, where=where, embedding=vector, k=k, exact=False, ef_search=None
                    )
            started = time.perf_counter()
            exact = await repository.dense_search(
                conn, where=where, embedding=vector, k=k, exact=True, ef_search=None
            )
            exact_ms = (time.perf_counter() - started) * 1000
            plan = await repository.dense_search(
                cast(Connection, _Explain(conn)), where=where, embedding=vector, k=k,
                exact=False, ef_search=None,
                own_indexes=graph,
            )  # fmt: skip
        if not exact:
            continue
        truth = {row["chunk_id"] for row in exact}
        found = len(truth & {row["chunk_id"] for row in approximate}) / len(truth)
        found_shared = len(truth & {row["chunk_id"] for row in shared}) / len(truth)
        found_wider = len(truth & {row["chunk_id"] for row in wider}) / len(truth)
        found_served = len(truth & {row["chunk_id"] for row in served}) / len(truth)
        small = count <= EXACT_SEARCH_BELOW
        group = groups.setdefault(ask.group, {})
        for name, value in (
            ("hnsw", found),
            ("hnsw_shared", found_shared),
            ("hnsw_wider", found_wider),
            ("hnsw_wider_ms", wider_ms),
            ("served", 1.0 if small else found_served),
            ("exact_path", 1.0 if small else 0.0),
            ("uses_hnsw_index", 1.0 if _HNSW_INDEX.search(str(plan[0][0])) else 0.0),
            ("short", 1.0 if len(approximate) < len(exact) else 0.0),
            ("hnsw_ms", hnsw_ms),
            ("exact_ms", exact_ms),
        ):
            group.setdefault(name, []).append(value)
    return {
        name: {
            "questions": len(group["hnsw"]),
            f"hnsw_recall@{k}": round(float(np.mean(group["hnsw"])), 4),
            f"hnsw_recall@{k}_min": round(min(group["hnsw"]), 4),
            f"hnsw_recall@{k}_shared_index": round(float(np.mean(group["hnsw_shared"])), 4),
            **(
                {
                    f"hnsw_recall@{k}_ef_{ef_more}": round(float(np.mean(group["hnsw_wider"])), 4),
                    f"hnsw_ms_ef_{ef_more}": stats(group["hnsw_wider_ms"]),
                }
                if ef_more is not None
                else {}
            ),
            f"served_recall@{k}": round(float(np.mean(group["served"])), 4),
            "share_served_exactly": round(float(np.mean(group["exact_path"])), 3),
            "share_planned_on_hnsw": round(float(np.mean(group["uses_hnsw_index"])), 3),
            "share_fewer_than_k": round(float(np.mean(group["short"])), 3),
            "hnsw_ms": stats(group["hnsw_ms"]),
            "exact_ms": stats(group["exact_ms"]),
        }
        for name, group in groups.items()
    }


def process_memory(pids: list[int]) -> dict[str, float]:
    """PSS (shared pages split between the processes: what they use together), and RSS and
    peak RSS summed (each process counting the shared pages it touched), in MB."""
    pss = rss = peak = 0.0
    counted = 0
    for pid in pids:
        try:
            process = psutil.Process(pid)
            info = process.memory_full_info()
            status = Path(f"/proc/{pid}/status").read_text()
        except (psutil.Error, OSError):
            continue
        counted += 1
        pss += info.pss
        rss += info.rss
        for line in status.splitlines():
            if line.startswith("VmHWM:"):
                peak += float(line.split()[1]) * 1024
    mb = 1024 * 1024
    return {"processes": counted, "pss_mb": round(pss / mb, 1),
            "rss_sum_mb": round(rss / mb, 1), "peak_rss_sum_mb": round(peak / mb, 1)}  # fmt: skip


async def postgres_pids(conn: Any) -> list[int]:
    """The postmaster and every process it started (backends, workers, checkpointer...)."""
    backend = psutil.Process(int(await conn.fetchval("SELECT pg_backend_pid()")))
    postmaster = backend.parent()
    if postmaster is None:
        return [backend.pid]
    return [postmaster.pid, *(child.pid for child in postmaster.children())]


@contextlib.asynccontextmanager
async def peak_memory(conn: Any, into: dict[str, float]) -> AsyncIterator[None]:
    """Sample Postgres's PSS every second while the block runs; the peak lands in ``into``."""
    pids = await postgres_pids(conn)
    postmaster = pids[0]

    async def sample() -> None:
        while True:
            children = [c.pid for c in psutil.Process(postmaster).children()]
            pss = await asyncio.to_thread(process_memory, [postmaster, *children])
            into["peak_pss_mb"] = max(into.get("peak_pss_mb", 0.0), pss["pss_mb"])
            await asyncio.sleep(1.0)

    task = asyncio.create_task(sample())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


@contextlib.asynccontextmanager
async def pool_for(dsn: str) -> AsyncIterator[Any]:
    """One connection outside any transaction (``DROP INDEX CONCURRENTLY``)."""
    import asyncpg

    conn = await asyncpg.connect(dsn)
    try:
        yield conn
    finally:
        await conn.close()


async def disk(conn: Any) -> dict[str, float]:
    """Sizes in MB: chunks (heap with TOAST, and with its indexes), the HNSW (shared, and
    the tenants' own) and GIN indexes, the BM25 statistics tables, documents, and the database."""
    row = await conn.fetchrow(
        """SELECT pg_table_size('chunks') AS chunks_table,
                  pg_total_relation_size('chunks') AS chunks_total,
                  pg_relation_size('chunks_embedding_hnsw') AS hnsw_index,
                  (SELECT coalesce(sum(pg_relation_size(to_regclass(n))), 0)
                     FROM tenant_indexes, unnest(index_names) AS n) AS tenant_indexes,
                  pg_relation_size('chunks_tsv_gin') AS tsv_gin_index,
                  pg_indexes_size('chunks') AS chunks_all_indexes,
                  pg_total_relation_size('bm25_vocabulary')
                    + pg_total_relation_size('bm25_term_stats')
                    + pg_total_relation_size('bm25_collection_stats') AS bm25_tables,
                  pg_total_relation_size('documents') AS documents_total,
                  pg_database_size(current_database()) AS database"""
    )
    return {key: round(int(value) / (1024 * 1024), 1) for key, value in row.items()}


def spread_load(
    tenants: list[Tenant], questions: list[str], count: int, rng: np.random.Generator
) -> list[str]:
    """Request bodies for the throughput phase: tenants by their size (a bigger school asks
    more), bioasq questions, one in ten common-word, one in three filtered."""
    sizes = np.array([t.chunks for t in tenants], dtype=float)
    owners = rng.choice(len(tenants), size=count, p=sizes / sizes.sum())
    bodies = []
    for n, owner in enumerate(owners.tolist()):
        tenant = tenants[owner]
        question = (
            COMMON_QUESTIONS[n % len(COMMON_QUESTIONS)]
            if n % 10 == 9
            else questions[(n * 7) % len(questions)]
        )
        filters = filters_for(tenant, n, rng) if n % 3 == 2 else RetrievalFilters()
        bodies.append(
            RetrieveRequest(tenant_id=tenant.name, query=question, filters=filters)
            .model_dump_json()
        )  # fmt: skip
    return bodies


async def build(
    conn: Any,
    args: argparse.Namespace,
    *,
    tenants: list[Tenant],
    texts: list[str],
    base: np.ndarray[Any, Any],
    rng: np.random.Generator,
    phases: Phases,
    build_memory: dict[str, float],
) -> None:
    """Load the corpus without the HNSW index (BM25-indexed), re-weight, then build it once."""
    await conn.execute("DROP INDEX chunks_embedding_hnsw")
    with phases.time("insert_and_bm25_index"):
        await load(conn, tenants=tenants, texts=texts, base=base, rng=rng,
                   batch_docs=args.batch_docs, jitter=args.jitter, blend=args.blend)  # fmt: skip
    with phases.time("bm25_reweight"):
        for tenant in tenants:
            await conn.execute("SELECT lectern_bm25_reweight($1)", tenant.name)
    with phases.time("vacuum_analyze"):
        await conn.execute("VACUUM ANALYZE chunks")
        await conn.execute("VACUUM ANALYZE documents")
    await conn.execute(f"SET maintenance_work_mem = '{args.maintenance_work_mem}'")
    await conn.execute(f"SET max_parallel_maintenance_workers = {int(args.build_workers)}")
    with phases.time("hnsw_build"):
        async with peak_memory(conn, build_memory):
            await conn.execute(
                "CREATE INDEX chunks_embedding_hnsw ON chunks USING hnsw "
                "(embedding vector_cosine_ops) WITH (m = 16, ef_construction = 64)"
            )


async def run(args: argparse.Namespace) -> dict[str, Any]:
    """Every phase on a fresh embedded stack; the results as one dict."""
    from lectern_common.broker import create_broker, request
    from lectern_common.db import create_pool

    phases = Phases()
    rng = np.random.default_rng(args.seed)
    texts, questions = scale_texts(None)
    with phases.time("embed_corpus"):
        base = base_vectors(texts, args.cache_dir)
    sizes = tenant_sizes(
        chunks=args.chunks, tenants=args.tenants, big_share=args.big_share,
        min_chunks=args.min_tenant_chunks, exponent=args.zipf, offset=args.zipf_offset,
    )  # fmt: skip
    tenants = make_tenants(sizes, len(texts), rng)
    big = tenants[0]
    mid, small = samples(tenants, args.sample_tenants)
    say(
        f"== {sum(sizes)} chunks over {len(tenants)} tenants: largest {sizes[0]}, then "
        f"{sizes[1]}, median {int(np.median(sizes))}, smallest {sizes[-1]}"
    )
    memory: dict[str, Any] = {}
    build_memory: dict[str, float] = {}
    corpus = {
        key: getattr(args, key)
        for key in ("chunks", "tenants", "big_share", "min_tenant_chunks", "zipf",
                    "zipf_offset", "jitter", "blend", "seed", "batch_docs")
    }  # fmt: skip
    marker = args.database_dir / "bench-scale-corpus.json" if args.database_dir else None
    reused = marker is not None and marker.is_file() and json.loads(marker.read_text()) == corpus
    if marker is not None and marker.exists() and not reused:
        raise SystemExit(f"{args.database_dir} holds another corpus ({marker}): remove it")
    async with embedded_stack(args.database_dir) as servers:
        pool = await create_pool(servers.database_url, min_size=1, max_size=4)
        async with pool.acquire() as conn:
            if reused:
                say(f"reusing the database in {args.database_dir} (no load, no HNSW build)")
            else:
                await build(conn, args, tenants=tenants, texts=texts, base=base, rng=rng,
                            phases=phases, build_memory=build_memory)  # fmt: skip
                if marker is not None:
                    marker.write_text(json.dumps(corpus))
            own_indexes: dict[str, float] = {}
            if args.tenant_index_min_chunks:
                # what the retrievers' maintenance does on its own (every 5 minutes by default)
                with phases.time("tenant_index_build"):
                    own_indexes = await tenant_indexes.maintain(
                        servers.database_url, min_chunks=args.tenant_index_min_chunks,
                        max_share=RetrieverSettings.model_fields["tenant_index_max_share"].default,
                        max_tenants=RetrieverSettings.model_fields[
                            "tenant_index_max_tenants"
                        ].default,
                        memory=args.maintenance_work_mem,
                    )  # fmt: skip
                say(f"tenant indexes: {len(own_indexes)} built")
                if reused:  # those a former run built count too (no build time)
                    own_indexes = {t: own_indexes.get(t, 0.0)
                                   for t in await tenant_indexes.ready(conn)}  # fmt: skip
            await conn.execute("ANALYZE chunks")
            sizes_mb = await disk(conn)
        await pool.close()
        say(f"disk (MB): {sizes_mb}")

        # the requests' own generator: the same requests whether the corpus was built or reused
        rng = np.random.default_rng([args.seed, 1])
        asks = plan_asks(big=big, mid=mid, small=small, questions=questions,
                         per_group=args.sequential, rng=rng)  # fmt: skip
        # recall: a sample of each group's requests, every kind of filter among them
        recall_asks = [
            a
            for group in GROUPS
            if group != "common-word"
            for a in [x for x in asks if x.group == group][: args.recall_questions]
        ]
        recall_asks += [
            Ask(WHOLE_TABLE, big, a.question) for a in recall_asks if a.group == "big tenant"
        ]
        with phases.time("recall"):
            vectors = await asyncio.to_thread(
                LocalEmbedder().embed_queries_sync, [a.question for a in recall_asks]
            )
            recall_pool = await create_pool(
                servers.database_url,
                min_size=1,
                max_size=2,
                server_settings={
                    "hnsw.ef_search": str(args.ef_search),
                    "hnsw.iterative_scan": "relaxed_order",
                },
            )
            try:
                recalled = await recall(
                    recall_pool, asks=recall_asks, vectors=vectors, k=20, own_indexes=own_indexes,
                    ef_more=2 * args.ef_search,
                    large=(
                        RetrieverSettings.model_fields["ef_search_large_above"].default,
                        RetrieverSettings.model_fields["ef_search_large"].default,
                    ),
                )  # fmt: skip
            finally:
                await recall_pool.close()

        os.environ["LECTERN_RETRIEVER_EF_SEARCH"] = str(args.ef_search)  # the retrievers' too
        processes = await start_retrievers(servers, args.replicas)
        client = create_broker(servers.nats_url, service_name="bench-scale")
        await client.connect()
        try:

            async def ask(question: str) -> RetrieveReply:
                message = RetrieveRequest(tenant_id=big.name, query=question)
                return await request(client, message, RetrieveReply, timeout=60)

            with phases.time("retrievers_ready"):
                await wait_for_retrievers(ask, questions, args.replicas)
            with phases.time("sequential"):
                latency = await sequential(client, asks)
            bodies = spread_load(tenants, questions, args.requests, rng)
            say(f"throughput: {args.requests} requests, {args.concurrency} in flight, "
                f"{args.replicas} retriever processes")  # fmt: skip
            with phases.time("throughput"):
                rps = await throughput(servers.nats_url, bodies, args.concurrency)
            pool = await create_pool(servers.database_url, min_size=1, max_size=1)
            async with pool.acquire() as conn:
                memory["postgres"] = process_memory(await postgres_pids(conn))
                memory["shared_buffers"] = await conn.fetchval("SHOW shared_buffers")
            await pool.close()
            memory["retrievers"] = process_memory([p.pid for p in processes])
            memory["postgres_hnsw_build_peak_pss_mb"] = build_memory.get("peak_pss_mb")
            latency_shared: dict[str, Any] = {}
            if own_indexes and args.shared_pass:
                # the same requests once the tenants' own indexes are gone (the shared
                # indexes alone, as before them): a ratio measured in one run
                async with pool_for(servers.database_url) as conn:
                    for tenant_name in own_indexes:
                        await tenant_indexes.drop(conn, tenant_name)
                await asyncio.sleep(TS_CONFIG_TTL_S + 1)  # the retrievers' cache of them
                with phases.time("warm_shared_indexes"):  # their pages back in the cache
                    await sequential(client, asks)
                with phases.time("sequential_shared_indexes"):
                    latency_shared = await sequential(client, asks)
        finally:
            await client.stop()
            await stop_retrievers(processes)
    return {
        "chunks": sum(sizes),
        "tenants": len(tenants),
        "distinct_texts": len(texts),
        "tenant_chunks": {
            "largest": sizes[0],
            "second": sizes[1],
            "median": int(np.median(sizes)),
            "smallest": sizes[-1],
            "mid_sample": [t.chunks for t in mid],
            "small_sample": [t.chunks for t in small],
        },
        "phases_s": phases.seconds,
        "latency_ms": latency,
        "latency_ms_shared_indexes": latency_shared,
        "recall": recalled,
        "tenant_indexes": {
            "min_chunks": args.tenant_index_min_chunks,
            "build_s": {name: round(v, 1) for name, v in own_indexes.items()},
        },
        "rps": round(rps, 1),
        "concurrency": args.concurrency,
        "retriever_processes": args.replicas,
        "memory": memory,
        "disk_mb": sizes_mb,
        "jitter": args.jitter,
        "blend": args.blend,
        "hnsw": {
            "m": 16,
            "ef_construction": 64,
            "ef_search": args.ef_search,
            "iterative_scan": "relaxed_order",
            "maintenance_work_mem": args.maintenance_work_mem,
            "parallel_workers": args.build_workers,
        },
    }


def verdicts(result: dict[str, Any]) -> dict[str, bool]:
    """The issue's targets in every group: p95 excluding the query embedding, and the
    recall of what the retriever serves under the tenant's (and the request's) filters."""
    worst_p95 = max(
        g["total_excl_embed"]["p95"]
        for name, g in result["latency_ms"].items()
        if name != "by_tenant"
    )
    worst_recall = min(
        g["served_recall@20"] for name, g in result["recall"].items() if name != WHOLE_TABLE
    )
    return {
        "p95_excl_embed_below_100ms": worst_p95 < TARGET_P95_MS,
        "filtered_recall_at_least_0.95": worst_recall >= TARGET_RECALL,
    }


def summary(result: dict[str, Any]) -> str:
    """The result as a few tables of text."""
    lines = [
        f"{result['chunks']:,} chunks over {result['tenants']} tenants "
        f"(largest {result['tenant_chunks']['largest']:,}, median "
        f"{result['tenant_chunks']['median']:,}, smallest {result['tenant_chunks']['smallest']:,})",
        "",
        "phases (s): " + ", ".join(f"{k} {v}" for k, v in result["phases_s"].items()),
        "",
        f"sequential latency p50 / p95 ms (target: p95 excluding embedding < {TARGET_P95_MS:.0f})",
        f"{'group':<17}{'n':>4}{'dense':>15}{'bm25':>15}{'fusion':>13}{'excl. embed':>15}"
        f"{'end to end':>15}{'embed':>13}",
    ]

    def pair(group: dict[str, Any], stage: str) -> str:
        if stage not in group:
            return "-"
        return f"{group[stage]['p50']:.1f} / {group[stage]['p95']:.1f}"

    for name, group in result["latency_ms"].items():
        if name == "by_tenant":
            continue
        p95 = group["total_excl_embed"]["p95"]
        mark = "ok" if p95 < TARGET_P95_MS else "MISSED"
        lines.append(
            f"{name:<17}{group['requests']:>4}{pair(group, 'dense'):>15}{pair(group, 'bm25'):>15}"
            f"{pair(group, 'fusion'):>13}{pair(group, 'total_excl_embed'):>15}"
            f"{pair(group, 'end_to_end'):>15}{pair(group, 'embed'):>13}  {mark}"
        )
    lines.append(
        "beside the embedding, p50 / p95 ms: the filter's count (exact or HNSW?) "
        + ", ".join(
            f"{name} {pair(group, 'filter_count')}"
            for name, group in result["latency_ms"].items()
            if name != "by_tenant" and "filter_count" in group
        )
    )
    lines += [
        "",
        f"dense recall@20 against exact search under the same filters (target: served "
        f">= {TARGET_RECALL}; served = exact below {EXACT_SEARCH_BELOW} filtered chunks, "
        "else HNSW, at the retrievers' ef_search_large for a tenant past ef_search_large_above "
        "chunks; hnsw = at ef_search)",
        f"{'group':<17}{'n':>4}{'hnsw':>7}{'min':>6}{'served':>8}{'exact path':>12}"
        f"{'on hnsw':>9}{'< k rows':>10}{'hnsw ms p95':>13}{'exact ms p95':>14}",
    ]
    for name, group in result["recall"].items():
        mark = "ok" if group["served_recall@20"] >= TARGET_RECALL else "MISSED"
        mark = "(diagnostic: no tenant filter)" if name == WHOLE_TABLE else mark
        lines.append(
            f"{name:<17}{group['questions']:>4}{group['hnsw_recall@20']:>7.3f}"
            f"{group['hnsw_recall@20_min']:>6.2f}{group['served_recall@20']:>8.3f}"
            f"{group['share_served_exactly']:>12.2f}{group['share_planned_on_hnsw']:>9.2f}"
            f"{group['share_fewer_than_k']:>10.2f}{group['hnsw_ms']['p95']:>13.1f}"
            f"{group['exact_ms']['p95']:>14.1f}  {mark}"
        )
    own = result.get("tenant_indexes", {})
    if own.get("min_chunks"):
        lines += [
            "",
            f"tenants with indexes of their own (>= {own['min_chunks']:,} chunks): "
            f"{len(own['build_s'])}, built in {sum(own['build_s'].values()):.0f} s",
        ]
    shared = result.get("latency_ms_shared_indexes") or {}
    if shared:
        lines += [
            "the same requests on the shared indexes alone (the tenants' own dropped), p95 ms:",
            f"{'group':<17}{'dense own':>11}{'shared':>9}{'bm25 own':>10}{'shared':>9}"
            f"{'excl. embed own':>17}{'shared':>9}{'ratio':>7}",
        ]
        for name, group in result["latency_ms"].items():
            other = shared.get(name)
            if not other or name == "by_tenant":
                continue

            def p95(g: dict[str, Any], stage: str) -> float:
                return float(g[stage]["p95"]) if stage in g else float("nan")

            own_total, shared_total = p95(group, "total_excl_embed"), p95(other, "total_excl_embed")
            lines.append(
                f"{name:<17}{p95(group, 'dense'):>11.1f}{p95(other, 'dense'):>9.1f}"
                f"{p95(group, 'bm25'):>10.1f}{p95(other, 'bm25'):>9.1f}{own_total:>17.1f}"
                f"{shared_total:>9.1f}{own_total / shared_total:>7.2f}"
            )
        own_by, shared_by = result["latency_ms"]["by_tenant"], shared["by_tenant"]
        lines.append(
            "p95 excluding the embedding by tenant (chunks), own / shared: "
            + ", ".join(
                f"{t} {v:.0f}/{shared_by.get(t, float('nan')):.0f}"
                for t, v in list(own_by.items())[:12]
            )
        )
        lines.append(
            "recall@20 on the shared graph for the same searches: "
            + ", ".join(
                f"{name} {g['hnsw_recall@20_shared_index']:.3f}"
                for name, g in result["recall"].items()
                if "hnsw_recall@20_shared_index" in g
            )
        )
    wider = [
        (name, key, g) for name, g in result["recall"].items() for key in g
        if key.startswith("hnsw_recall@20_ef_")
    ]  # fmt: skip
    if wider:
        ef = wider[0][1].removeprefix("hnsw_recall@20_ef_")
        lines.append(
            f"recall@20 / HNSW ms p95 at ef_search {ef} "
            f"(the retrievers': {result['hnsw']['ef_search']}): "
            + ", ".join(
                f"{name} {g[key]:.3f} / {g[f'hnsw_ms_ef_{ef}']['p95']:.1f}"
                for name, key, g in wider
            )
        )
    memory = result["memory"]
    lines += [
        "",
        f"throughput: {result['rps']} requests/s, {result['concurrency']} in flight, "
        f"{result['retriever_processes']} retriever processes",
        f"memory (MB, PSS: shared pages split between processes): postgres "
        f"{memory['postgres']['pss_mb']} over {memory['postgres']['processes']} processes "
        f"(shared_buffers {memory['shared_buffers']}; peak during the HNSW build "
        f"{memory['postgres_hnsw_build_peak_pss_mb']}), retrievers "
        f"{memory['retrievers']['pss_mb']} for {memory['retrievers']['processes']} "
        f"(peak RSS {memory['retrievers']['peak_rss_sum_mb']})",
        "disk (MB): " + ", ".join(f"{k} {v}" for k, v in result["disk_mb"].items()),
        "",
        "targets: "
        + ", ".join(f"{k} {'ok' if v else 'MISSED'}" for k, v in result["targets"].items()),
        "the 100k figures: make bench-retrieval (docs/benchmarks.md)",
    ]
    return "\n".join(lines)


async def main() -> None:
    """Parse the arguments, run, print the summary and the JSON line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=1_000_000)
    parser.add_argument("--tenants", type=int, default=100)
    parser.add_argument("--big-share", type=float, default=0.3, help="the largest tenant's share")
    parser.add_argument("--min-tenant-chunks", type=int, default=300)
    parser.add_argument("--zipf", type=float, default=2.0, help="the other tenants' exponent")
    parser.add_argument("--zipf-offset", type=float, default=5.0, help="and rank offset")
    parser.add_argument("--sample-tenants", type=int, default=8,
                        help="mid-sized and small tenants asked (each)")  # fmt: skip
    parser.add_argument("--sequential", type=int, default=300, help="requests per group")
    parser.add_argument("--recall-questions", type=int, default=50, help="per group")
    parser.add_argument("--requests", type=int, default=2000, help="throughput requests")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--replicas", type=int, default=2, help="retriever processes")
    parser.add_argument("--batch-docs", type=int, default=500, help="documents per COPY")
    parser.add_argument("--maintenance-work-mem", default="3GB", help="for the HNSW build")
    parser.add_argument("--build-workers", type=int, default=1,
                        help="max_parallel_maintenance_workers for the HNSW build")  # fmt: skip
    parser.add_argument(
        "--shared-buffers", default=None,
        help="the embedded Postgres's shared_buffers (default: the runtime's, 1GB)",
    )  # fmt: skip
    parser.add_argument(
        "--jitter", type=float, default=0.02,
        help="standard deviation of each copy's per-dimension noise (0.02: cosine ~0.93 to "
        "the original, as at 100k)",
    )  # fmt: skip
    parser.add_argument(
        "--blend", type=float, default=0.5,
        help="weight of another random text's vector added to each copy (0: copies of one "
        "text differ by the jitter only, as at 100k; 0.5: cosine ~0.85 to its own text)",
    )  # fmt: skip
    parser.add_argument(
        "--ef-search", type=int, default=EF_SEARCH,
        help="HNSW ef_search of the retrievers and of the recall measurement",
    )  # fmt: skip
    parser.add_argument(
        "--tenant-index-min-chunks", type=int,
        default=RetrieverSettings.model_fields["tenant_index_min_chunks"].default,
        help="tenants of this many chunks get HNSW and GIN indexes of their own, as the "
        "retrievers' maintenance gives them (0: none, every tenant on the shared indexes)",
    )  # fmt: skip
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--database-dir", type=lambda value: Path(value).resolve(), default=None,
        help="build the database here and keep it; a later run with the same corpus "
        "arguments reuses it (no load, no HNSW build: for iterating on search, not for the "
        "build figures)",
    )  # fmt: skip
    parser.add_argument(
        "--no-shared-pass", dest="shared_pass", action="store_false",
        help="skip the second pass on the shared indexes alone (it drops the tenants' own)",
    )  # fmt: skip
    parser.add_argument(
        "--cache-dir", type=Path,
        default=Path(tempfile.gettempdir()) / "lectern-bench-cache",
        help="keep the corpus' vectors here (default: a folder in the temp dir)",
    )  # fmt: skip
    parser.add_argument("--json", type=Path, default=None, help="also write the JSON here")
    args = parser.parse_args()
    if not (EVAL / "bioasq-dev").is_dir():
        say(f"shared data not found at {EVAL}")
        sys.exit(2)
    if args.shared_buffers:
        # read by EmbeddedPostgres when the stack starts
        os.environ["LECTERN_EMBEDDED_PG_SHARED_BUFFERS"] = args.shared_buffers
    result = await run(args)
    result["targets"] = verdicts(result)
    print(summary(result), flush=True)
    line = json.dumps(result)
    if args.json is not None:
        args.json.write_text(line + "\n")
    print(line)


if __name__ == "__main__":
    asyncio.run(main())
