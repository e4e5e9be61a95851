"""Retrieval evaluation on BEIR-format datasets: load, query through NATS, per-document metrics.

A dataset directory holds ``corpus.jsonl`` ({"_id", "title", "text"}), ``queries.jsonl``
({"_id", "text"}) and ``qrels/test.tsv`` (query-id, corpus-id, score, with a header).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import math
import statistics
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from lectern_common.db.types import Pool
from lectern_common.events import RerankReply, RerankRequest, RetrieveReply, RetrieveRequest
from lectern_common.events.chat import band_shares

METHODS = ("dense", "sparse", "hybrid", "hybrid+rerank")
METRIC_NAMES = ("ndcg@10", "recall@5", "recall@10", "recall@100", "mrr@10")


# ---------------------------------------------------------------- dataset


@dataclass
class BeirDataset:
    """A BEIR-format dataset in memory."""

    name: str
    corpus: dict[str, tuple[str, str]]  # id -> (title, text)
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]  # query id -> {doc id: relevance}


class DatasetError(ValueError):
    """The directory is not a readable BEIR-format dataset (the message says where)."""


def _jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DatasetError(f"{path}:{number}: not a JSON object ({exc.msg})") from exc
            if not isinstance(record, dict) or "_id" not in record:
                raise DatasetError(f'{path}:{number}: a JSON object with an "_id" is expected')
            yield number, record


def load_beir(directory: Path, *, split: str = "test") -> BeirDataset:
    """Read a BEIR dataset; only queries with at least one positive judgement are kept.

    Raises ``DatasetError`` naming the file (and line) when a part is missing or malformed,
    or when no query has a positive judgement.
    """
    qrels_path = directory / "qrels" / f"{split}.tsv"
    missing = [
        str(path.relative_to(directory))
        for path in (directory / "corpus.jsonl", directory / "queries.jsonl", qrels_path)
        if not path.is_file()
    ]
    if missing:
        raise DatasetError(
            f"{directory} is not a BEIR-format dataset: {', '.join(missing)} not found "
            f"(expected corpus.jsonl, queries.jsonl and qrels/{split}.tsv)"
        )
    corpus = {
        str(d["_id"]): (str(d.get("title") or ""), str(d.get("text") or ""))
        for _, d in _jsonl(directory / "corpus.jsonl")
    }
    qrels: dict[str, dict[str, int]] = {}
    with qrels_path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            parts = line.rstrip("\n").split("\t")
            if not line.strip() or (number == 1 and not parts[-1].strip().lstrip("-").isdigit()):
                continue  # blank, or the header line
            try:
                query_id, doc_id, score = parts[0], parts[1], int(parts[2])
            except (IndexError, ValueError) as exc:
                raise DatasetError(
                    f"{qrels_path}:{number}: expected query-id, corpus-id and an integer "
                    "score separated by tabs"
                ) from exc
            if score > 0:
                qrels.setdefault(query_id, {})[doc_id] = score
    queries: dict[str, str] = {}
    for number, q in _jsonl(directory / "queries.jsonl"):
        if str(q["_id"]) in qrels:
            if not isinstance(q.get("text"), str):
                raise DatasetError(f'{directory / "queries.jsonl"}:{number}: no "text"')
            queries[str(q["_id"])] = q["text"]
    qrels = {q: rel for q, rel in qrels.items() if q in queries}
    if not queries:
        raise DatasetError(
            f"no query of {directory / 'queries.jsonl'} has a positive judgement in {qrels_path}"
        )
    return BeirDataset(directory.name, corpus, queries, qrels)


# ---------------------------------------------------------------- metrics


QuerySplit = Literal["held-out", "train", "all"]


def query_split(query_id: str, *, share: int = 5) -> Literal["held-out", "train"]:
    """The part of a data set a question belongs to: one question in ``share``, by a hash of
    its id, is held out from every fit (the reader's training, the re-ranker's weights), so
    that ``--query-split held-out`` measures on questions nothing was fitted on."""
    return "held-out" if hashlib.sha256(query_id.encode()).digest()[0] % share == 0 else "train"


def document_ranking(doc_ids: Sequence[str]) -> list[str]:
    """Documents in the order of their best chunk (first appearance)."""
    seen: dict[str, None] = {}
    for doc in doc_ids:
        seen.setdefault(doc, None)
    return list(seen)


def ndcg_at(ranking: Sequence[str], relevant: Mapping[str, int], k: int) -> float:
    """nDCG@k with linear gains (trec_eval / BEIR convention)."""
    dcg = sum(relevant.get(doc, 0) / math.log2(i + 2) for i, doc in enumerate(ranking[:k]))
    ideal = sorted(relevant.values(), reverse=True)[:k]
    idcg = sum(rel / math.log2(i + 2) for i, rel in enumerate(ideal))
    return dcg / idcg if idcg > 0 else 0.0


def recall_at(ranking: Sequence[str], relevant: Mapping[str, int], k: int) -> float:
    """Share of the relevant documents in the top k."""
    if not relevant:
        return 0.0
    return sum(1 for doc in ranking[:k] if doc in relevant) / len(relevant)


def mrr_at(ranking: Sequence[str], relevant: Mapping[str, int], k: int) -> float:
    """Reciprocal rank of the first relevant document within the top k (0 if none)."""
    for i, doc in enumerate(ranking[:k]):
        if doc in relevant:
            return 1.0 / (i + 1)
    return 0.0


def rerank_order(
    kept: Sequence[tuple[uuid.UUID, uuid.UUID]],
    duplicates: Mapping[uuid.UUID, uuid.UUID],
    document_of: Mapping[uuid.UUID, uuid.UUID],
) -> list[uuid.UUID]:
    """Documents in re-ranked order, each near-duplicate the re-ranker dropped placed right
    after the chunk it repeats (kept: (chunk id, document id) pairs in order; duplicates:
    dropped chunk id -> kept chunk id).

    A chat answer needs one copy of a passage, but a benchmark's judgements name every
    copy: two BEIR documents with the same text are both relevant, and leaving one out
    of the ranking would count the deduplication as a retrieval miss.
    """
    twins: dict[uuid.UUID, list[uuid.UUID]] = {}
    for dropped, twin in duplicates.items():
        if dropped in document_of:
            twins.setdefault(twin, []).append(document_of[dropped])
    order: list[uuid.UUID] = []
    for chunk_id, document_id in kept:
        order.append(document_id)
        order.extend(twins.get(chunk_id, ()))
    return order


def query_metrics(ranking: Sequence[str], relevant: Mapping[str, int]) -> dict[str, float]:
    """All reported metrics for one query's document ranking."""
    return {
        "ndcg@10": ndcg_at(ranking, relevant, 10),
        "recall@5": recall_at(ranking, relevant, 5),
        "recall@10": recall_at(ranking, relevant, 10),
        "recall@100": recall_at(ranking, relevant, 100),
        "mrr@10": mrr_at(ranking, relevant, 10),
    }


def mean_metrics(per_query: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """Mean of each metric over queries (rounded to 4 places)."""
    if not per_query:
        return {name: 0.0 for name in METRIC_NAMES}
    return {name: round(statistics.fmean(m[name] for m in per_query), 4) for name in METRIC_NAMES}


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100) by linear interpolation."""
    if not values:
        return 0.0
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100.0
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def latency_summary(samples: Mapping[str, Sequence[float]]) -> dict[str, dict[str, float]]:
    """p50 and p95 per stage, in milliseconds."""
    return {
        stage: {"p50": round(percentile(v, 50), 3), "p95": round(percentile(v, 95), 3)}
        for stage, v in samples.items()
        if v
    }


# ---------------------------------------------------------------- loading


@dataclass
class LoadedCorpus:
    """How a corpus landed: the external ids each document holds, and what did not load."""

    externals: dict[uuid.UUID, list[str]]
    failures: list[str]
    statuses: dict[str, int]


async def ingest_corpus(
    *,
    client: Any,
    pool: Pool,
    tenant_id: str,
    corpus: Mapping[str, tuple[str, str]],
    concurrency: int = 8,
    timeout_s: float | None = None,
    stall_s: float = 120.0,
    progress: Callable[[str], None] | None = None,
) -> LoadedCorpus:
    """Upload every document through the gateway's ``POST /v1/documents`` and wait for ingest.

    ``client`` is an ``httpx.AsyncClient`` on a gateway, authenticated as a teacher of
    ``tenant_id``. Each BEIR document becomes a text file (its title as the first line), so
    it is type-checked, stored, extracted, cleaned, chunked, embedded and BM25-indexed by the
    real pipeline. Identical uploads and identical cleaned texts become one document (the
    product's deduplication); all their external ids map to it.

    Waiting ends with ``TimeoutError`` when no document finished for ``stall_s`` seconds, or
    after ``timeout_s`` in all (by default an hour, or half a second a document for larger
    corpora: ~10x the measured pace, so only a stuck ingest reaches it).
    """
    say = progress or (lambda _msg: None)
    loaded = LoadedCorpus(externals={}, failures=[], statuses={})
    await _upload_corpus(client, corpus, loaded, concurrency=concurrency, say=say)
    if timeout_s is None:
        timeout_s = max(3600.0, 0.5 * len(corpus))
    loaded.statuses = await _wait_for_ingest(
        pool, tenant_id, documents=len(corpus), timeout_s=timeout_s, stall_s=stall_s, say=say
    )
    await _settle_unindexed(pool, tenant_id, loaded)
    return loaded


async def _upload_corpus(
    client: Any,
    corpus: Mapping[str, tuple[str, str]],
    loaded: LoadedCorpus,
    *,
    concurrency: int,
    say: Callable[[str], None],
) -> None:
    """Upload each document as a text file, ``concurrency`` at a time, into ``loaded``."""
    semaphore = asyncio.Semaphore(concurrency)
    uploaded = 0

    async def upload(external_id: str) -> None:
        nonlocal uploaded
        title, text = corpus[external_id]
        body = f"{title}\n\n{text}".strip() if title else text.strip()
        if not body:
            loaded.failures.append(f"{external_id}: empty document, not uploaded")
            return
        async with semaphore:
            response = await client.post(
                "/v1/documents",
                files={"file": (f"{external_id}.txt", body.encode("utf-8"), "text/plain")},
                data={"title": (title or external_id)[:500], "content_type": "text"},
            )
        if response.status_code not in (200, 202):
            loaded.failures.append(f"{external_id}: upload answered {response.status_code}")
            return
        loaded.externals.setdefault(uuid.UUID(response.json()["id"]), []).append(external_id)
        uploaded += 1
        if uploaded % 1000 == 0:
            say(f"uploaded {uploaded}/{len(corpus)}")

    await asyncio.gather(*(upload(external_id) for external_id in corpus))


async def _wait_for_ingest(
    pool: Pool,
    tenant_id: str,
    *,
    documents: int,
    timeout_s: float,
    stall_s: float,
    say: Callable[[str], None],
) -> dict[str, int]:
    """Poll the tenant's documents until none is pending or processing; their statuses."""
    deadline = time.monotonic() + timeout_s
    least_waiting, last_progress = documents + 1, time.monotonic()
    while True:
        rows = await pool.fetch(
            "SELECT status, count(*) AS n FROM documents WHERE tenant_id = $1 GROUP BY status",
            tenant_id,
        )
        statuses = {str(r["status"]): int(r["n"]) for r in rows}
        waiting = statuses.get("pending", 0) + statuses.get("processing", 0)
        if not waiting:
            return statuses
        if waiting < least_waiting:
            least_waiting, last_progress = waiting, time.monotonic()
        if time.monotonic() - last_progress > stall_s:
            raise TimeoutError(
                f"ingest made no progress for {stall_s:.0f} s ({statuses}): is an ingest "
                "service consuming documents.uploaded on this NATS?"
            )
        if time.monotonic() > deadline:
            raise TimeoutError(f"ingest did not finish within {timeout_s} s: {statuses}")
        say(f"ingesting: {statuses}")
        await asyncio.sleep(2.0)


async def _settle_unindexed(pool: Pool, tenant_id: str, loaded: LoadedCorpus) -> None:
    """Move a duplicate's external ids to its original; the rest that did not index fail."""
    # a duplicate holds no chunks: its external ids count as its original's
    for row in await pool.fetch(
        """SELECT id, duplicate_of, status, error_reason FROM documents
           WHERE tenant_id = $1 AND status <> 'indexed'""",
        tenant_id,
    ):
        ids = loaded.externals.pop(row["id"], [])
        if row["status"] == "duplicate" and row["duplicate_of"] is not None:
            loaded.externals.setdefault(row["duplicate_of"], []).extend(ids)
        else:
            loaded.failures += [f"{i}: {row['status']} ({row['error_reason']})" for i in ids]


# ---------------------------------------------------------------- querying


@dataclass
class EvalResult:
    """Metrics per method, latency per stage, and notes."""

    dataset: str
    queries: int
    methods: dict[str, dict[str, float]]
    latency_ms: dict[str, dict[str, float]]
    notes: list[str] = field(default_factory=list)
    load_seconds: float | None = None
    documents: int = 0
    #: share of each confidence band, for the dataset's questions and off-topic ones
    bands: dict[str, dict[str, float]] | None = None

    def to_json(self) -> dict[str, Any]:
        """The issue's JSON shape (plus load time, corpus size and notes)."""
        out: dict[str, Any] = {
            "dataset": self.dataset,
            "queries": self.queries,
            "methods": self.methods,
            "latency_ms": self.latency_ms,
            "documents": self.documents,
        }
        if self.bands is not None:
            out["bands"] = self.bands
        if self.load_seconds is not None:
            out["load_seconds"] = round(self.load_seconds, 1)
        if self.notes:
            out["notes"] = self.notes
        return out


async def run_queries(
    *,
    broker: Any,
    dataset: BeirDataset,
    tenant_id: str,
    external_of: Mapping[uuid.UUID, Sequence[str]],
    methods: Sequence[str],
    query_ids: Sequence[str],
    concurrency: int = 4,
    timeout: float = 30.0,
    rerank_depth: int = 30,
    offtopic: Sequence[str] = (),
    bands: dict[str, list[str]] | None = None,
) -> tuple[dict[str, dict[str, float]], dict[str, list[float]], list[str]]:
    """Ask the retriever (and the re-ranker) over NATS; metrics per method and stage times.

    With the re-ranker answering, the confidence band of every question goes to
    ``bands["answerable"]``, and each ``offtopic`` question (one the corpus cannot answer)
    is retrieved and re-ranked like a chat question, its band going to ``bands["offtopic"]``.
    """
    notes: list[str] = []
    wanted = [m for m in methods if m in METHODS]
    if "hybrid+rerank" in wanted:
        silence = await _reranker_silence(broker, tenant_id)
        if silence is not None:
            wanted.remove("hybrid+rerank")
            notes.append(f"hybrid+rerank skipped: the re-ranker did not answer ({silence})")
    asker = _Asker(
        broker=broker,
        tenant_id=tenant_id,
        external_of=external_of,
        wanted=wanted,
        timeout=timeout,
        rerank_depth=rerank_depth,
        bands=bands,
        semaphore=asyncio.Semaphore(concurrency),
        per_method={m: [] for m in wanted},
    )
    await asyncio.gather(*(asker.question(dataset.queries[q], dataset.qrels[q]) for q in query_ids))
    if "hybrid+rerank" in wanted and offtopic:
        await asyncio.gather(*(asker.offtopic(q) for q in offtopic))
    return {m: mean_metrics(asker.per_method[m]) for m in wanted}, asker.stages, notes


async def _reranker_silence(broker: Any, tenant_id: str) -> str | None:
    """Why the re-ranker does not answer a probe within 3 s (None: it answers)."""
    from lectern_common.broker import request
    from lectern_common.errors import LecternError

    probe = RerankRequest(tenant_id=tenant_id, query="probe", candidates=[], top_k=1)
    try:
        await request(broker, probe, RerankReply, timeout=3.0)
    except LecternError as exc:
        return exc.message
    return None


#: the retriever's sides each evaluated method asks for
_SIDES: dict[str, list[Literal["dense", "sparse"]]] = {
    "dense": ["dense"],
    "sparse": ["sparse"],
    "hybrid": ["dense", "sparse"],
}


@dataclass
class _Asker:
    """One evaluation's questions to the retriever and the re-ranker, and what they measured."""

    broker: Any
    tenant_id: str
    external_of: Mapping[uuid.UUID, Sequence[str]]
    wanted: list[str]
    timeout: float
    rerank_depth: int
    bands: dict[str, list[str]] | None
    semaphore: asyncio.Semaphore
    per_method: dict[str, list[dict[str, float]]]
    stages: dict[str, list[float]] = field(default_factory=dict)

    def ranking_of(self, document_ids: Sequence[uuid.UUID]) -> list[str]:
        """The corpus ids in the order of ``document_ids``."""
        # a document standing for several identical corpus entries ranks all of them
        return document_ranking(
            [e for d in document_ids for e in self.external_of.get(d, [str(d)])]
        )

    async def retrieve(self, message: RetrieveRequest) -> RetrieveReply:
        """The retriever's reply to ``message``."""
        from lectern_common.broker import request

        return await request(self.broker, message, RetrieveReply, timeout=self.timeout)

    async def rerank(self, message: RerankRequest) -> RerankReply:
        """The re-ranker's reply to ``message``."""
        from lectern_common.broker import request

        return await request(self.broker, message, RerankReply, timeout=self.timeout)

    async def question(self, text: str, relevant: Mapping[str, int]) -> None:
        """Score one question with every wanted method (hybrid once, also for re-ranking)."""
        async with self.semaphore:
            hybrid_reply: RetrieveReply | None = None
            for method in ("dense", "sparse", "hybrid"):
                rerank_wanted = method == "hybrid" and "hybrid+rerank" in self.wanted
                if method not in self.wanted and not rerank_wanted:
                    continue
                message = RetrieveRequest(
                    tenant_id=self.tenant_id, query=text, k=100, k_dense=100, k_sparse=100,
                    max_per_document=None, methods=_SIDES[method],
                )  # fmt: skip
                start = time.perf_counter()
                reply = await self.retrieve(message)
                elapsed = (time.perf_counter() - start) * 1000
                if method == "hybrid":
                    hybrid_reply = reply
                    for stage, ms in reply.timings_ms.items():
                        self.stages.setdefault(stage, []).append(ms)
                    self.stages.setdefault("request", []).append(elapsed)
                if method in self.wanted:
                    ranking = self.ranking_of([c.document_id for c in reply.candidates])
                    self.per_method[method].append(query_metrics(ranking, relevant))
            if "hybrid+rerank" in self.wanted and hybrid_reply is not None:
                await self.reranked(text, hybrid_reply, relevant)

    async def reranked(
        self, text: str, hybrid_reply: RetrieveReply, relevant: Mapping[str, int]
    ) -> None:
        """Score the re-ranked head of the hybrid candidates (the rest after it, in order)."""
        head = hybrid_reply.candidates[: self.rerank_depth]
        start = time.perf_counter()
        reranked = await self.rerank(
            RerankRequest(
                tenant_id=self.tenant_id,
                query=text,
                candidates=head,
                top_k=max(1, len(head)),
                token_budget=10_000_000,
            )
        )
        self.stages.setdefault("rerank", []).append((time.perf_counter() - start) * 1000)
        if self.bands is not None and reranked.confidence is not None:
            self.bands.setdefault("answerable", []).append(reranked.confidence.band)
        order = rerank_order(
            [(c.candidate.chunk_id, c.candidate.document_id) for c in reranked.chunks],
            reranked.duplicates,
            {c.chunk_id: c.document_id for c in head},
        )
        rest = [c.document_id for c in hybrid_reply.candidates]
        ranking = self.ranking_of(order + rest)
        self.per_method["hybrid+rerank"].append(query_metrics(ranking, relevant))

    async def offtopic(self, text: str) -> None:
        """Retrieve and re-rank a question the corpus cannot answer; record its band."""
        async with self.semaphore:
            reply = await self.retrieve(
                RetrieveRequest(tenant_id=self.tenant_id, query=text, k=self.rerank_depth)
            )
            reranked = await self.rerank(
                RerankRequest(tenant_id=self.tenant_id, query=text, candidates=reply.candidates)
            )
            if self.bands is not None and reranked.confidence is not None:
                self.bands.setdefault("offtopic", []).append(reranked.confidence.band)


# ---------------------------------------------------------------- orchestration


async def evaluate(
    *,
    dataset_dir: Path,
    gateway_url: str | None = None,
    secret: str | None = None,
    nats_url: str | None = None,
    database_url: str | None = None,
    methods: Sequence[str] = METHODS,
    limit_queries: int | None = None,
    split: QuerySplit = "all",
    concurrency: int = 4,
    progress: Callable[[str], None] | None = None,
    offtopic: Sequence[str] = (),
    dataset: BeirDataset | None = None,
    start_stack: StackStarter | None = None,
) -> EvalResult:
    """Load ``dataset_dir`` into a fresh tenant and evaluate the retriever on it, through
    the system's public contracts only: documents are uploaded to the gateway over HTTP and
    indexed by the ingest service; questions go to ``lectern.retrieve.v1`` and
    ``lectern.rerank.v1`` over NATS.

    ``split`` keeps the held-out or the training questions only (``query_split``).
    ``dataset`` is ``dataset_dir`` already read by ``load_beir`` (it is read here otherwise).
    With ``gateway_url``, ``secret`` (the JWT signing secret), ``nats_url`` and
    ``database_url`` it uses that running system; otherwise the one ``start_stack`` starts
    (``lectern_cli.runtime.embedded.embedded_system``: the embedded stack, as processes).
    """
    from lectern_common.broker import create_broker
    from lectern_common.db import create_pool

    say = progress or (lambda _msg: None)
    if dataset is None:
        dataset = load_beir(dataset_dir)
    query_ids = _chosen_questions(dataset, split=split, limit=limit_queries)
    tenant_id = f"eval-{dataset.name}-{uuid.uuid4().hex[:8]}"
    async with contextlib.AsyncExitStack() as stack:
        running = _system(
            stack, (gateway_url, secret, nats_url, database_url), say=say, start=start_stack
        )
        pool = await create_pool(running.database_url, min_size=1, max_size=4)
        stack.push_async_callback(pool.close)
        client = await stack.enter_async_context(_teacher(running, tenant_id))
        started = time.perf_counter()
        loaded = await _load_corpus(client, pool, tenant_id, dataset.corpus, say=say)
        load_seconds = time.perf_counter() - started
        say(f"ingested in {load_seconds:.0f} s: {loaded.statuses}")
        broker = create_broker(running.nats_url, service_name="lectern-eval")
        await broker.connect()
        stack.push_async_callback(broker.stop)
        say(f"querying {len(query_ids)} questions")
        verdicts: dict[str, list[str]] = {}
        metrics, stages, notes = await run_queries(
            broker=broker,
            dataset=dataset,
            tenant_id=tenant_id,
            external_of=loaded.externals,
            methods=methods,
            query_ids=query_ids,
            concurrency=concurrency,
            offtopic=offtopic,
            bands=verdicts,
        )
        if loaded.failures:
            notes.append(
                f"{len(loaded.failures)} documents did not index, e.g. {loaded.failures[:3]}"
            )
    return EvalResult(
        dataset=dataset.name,
        queries=len(query_ids),
        methods=metrics,
        latency_ms=latency_summary(stages),
        notes=notes,
        load_seconds=load_seconds,
        documents=len(dataset.corpus),
        bands=(
            {kind: band_shares(verdicts.get(kind, [])) for kind in ("answerable", "offtopic")}
            if verdicts
            else None
        ),
    )


def _system(
    stack: contextlib.AsyncExitStack,
    given: tuple[str | None, str | None, str | None, str | None],
    *,
    say: Callable[[str], None],
    start: StackStarter | None,
) -> RunningSystem:
    """The running system named by gateway URL, secret, NATS and Postgres URLs when all are
    given, else the one ``start`` starts for the length of ``stack``."""
    gateway_url, secret, nats_url, database_url = given
    if gateway_url and secret and nats_url and database_url:
        return RunningSystem(gateway_url, secret, nats_url, database_url)
    if start is None:
        raise ValueError(
            "no running system given (gateway, secret, NATS and Postgres URLs) and none to start"
        )
    say("starting the embedded stack (NATS, Postgres, five services as processes)")
    return stack.enter_context(start(say))


def _chosen_questions(dataset: BeirDataset, *, split: QuerySplit, limit: int | None) -> list[str]:
    """The ids of the questions to ask: the split's, sorted, the first ``limit`` of them."""
    query_ids = sorted(q for q in dataset.queries if split == "all" or query_split(q) == split)
    return query_ids if limit is None else query_ids[:limit]


async def _load_corpus(
    client: Any,
    pool: Pool,
    tenant_id: str,
    corpus: Mapping[str, tuple[str, str]],
    *,
    say: Callable[[str], None],
) -> LoadedCorpus:
    """Ingest the corpus into the tenant, then re-weight its BM25 and analyse the chunks."""
    say(f"uploading {len(corpus)} documents into tenant {tenant_id} (real ingest)")
    loaded = await ingest_corpus(
        client=client, pool=pool, tenant_id=tenant_id, corpus=corpus, progress=say
    )
    async with pool.acquire() as conn:
        # what ingest's periodic re-weighting would do after a bulk upload
        await conn.execute("SELECT lectern_bm25_reweight($1)", tenant_id)
        await conn.execute("ANALYZE chunks")
    return loaded


@dataclass
class RunningSystem:
    """Where a running Lectern answers: its gateway, JWT secret, NATS and Postgres."""

    gateway_url: str
    secret: str
    nats_url: str
    database_url: str


#: starts a system for an evaluation and stops it when the context ends, reporting progress
#: to its argument (``lectern_cli.runtime.embedded.embedded_system``)
StackStarter = Callable[[Callable[[str], None]], AbstractContextManager[RunningSystem]]


@contextlib.asynccontextmanager
async def _teacher(running: RunningSystem, tenant_id: str) -> AsyncIterator[Any]:
    """An HTTP client of the gateway, signed in as a teacher of ``tenant_id``."""
    import httpx

    from lectern_common.tokens import make_token

    token = make_token(
        secret=running.secret, tenant=tenant_id, user="lectern-eval", role="teacher",
        plan="pro", ttl_s=24 * 3600,
    )  # fmt: skip
    async with httpx.AsyncClient(
        base_url=running.gateway_url,
        headers={"Authorization": f"Bearer {token}"},
        timeout=120.0,
    ) as client:
        yield client
