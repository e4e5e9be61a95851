"""Ingest throughput through the real worker vs the raw embedder, and the worker's peak RSS.

Starts an embedded NATS (JetStream) and Postgres, runs the ingest app in this process with the
packaged MiniLM, and for each document: puts the bytes in the object store, inserts the
pending row and publishes ``documents.uploaded`` (what the gateway does), then times until
``documents.indexed``. The raw embedder is then timed on the very chunk texts the run stored
(same batch size) right after each document; ``ratio_to_raw`` = pipeline chunks/s ÷ raw
chunks/s. Peak RSS is this process's (the worker runs in it), sampled every 50 ms while the
worker ingests. The last line is one JSON object with
the 400-page manual's figures at the top level and every document's under ``documents``.

Then the many-small-documents part (``--small N``, 2,000 by default, 0 to skip): N passages of
the BioASQ BEIR corpus (``../shared/data/eval/bioasq-dev``, a few sentences each) written as
``.txt`` files, stored and inserted as pending rows first, then every ``documents.uploaded``
published at once and timed from the first publish to the last outcome event. It runs three
times in the same run, each time in a fresh process and stack: with the defaults (small
uploads indexed together, 32 in a list, ``lectern_ingest.small``), one upload at a time
(``LECTERN_INGEST_BATCH_DOCUMENTS=1``), and with the defaults before lists (one at a time, two
embedding threads), and prints the documents/s of each, the ratios of the defaults to the
others and the raw embedder's passages/s one at a time right after (``small`` in the JSON
line). Each document must end with exactly one outcome event and its
chunks stored once.

Usage: .venv/bin/python bench/bench_ingest.py [--docs DIR] [--small N] [--large/--no-large]
[FILE ...]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import nats
import psutil

from lectern_common import filetype
from lectern_common.broker import ensure_streams
from lectern_common.db import create_pool, migrate
from lectern_common.embeddings import LocalEmbedder
from lectern_common.events import DocumentFailed, DocumentIndexed, DocumentUploaded
from lectern_common.objects import object_name, put_file
from lectern_common.runtime import EmbeddedNats, EmbeddedPostgres
from lectern_gateway.documents import repository as docs
from lectern_ingest.app import create_app
from lectern_ingest.config import Settings

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO.parent / "shared" / "data" / "docs"
DEFAULT_FILES = ("irs-manual-400p.pdf", "textbook-ch2-induction-48p.pdf")
CORPUS = REPO.parent / "shared" / "data" / "eval" / "bioasq-dev" / "corpus.jsonl"
HEADLINE = "irs-manual-400p.pdf"


class RssSampler:
    """Peak resident set size of this process, sampled in a thread."""

    def __init__(self, interval_s: float = 0.05) -> None:
        self.process = psutil.Process()
        self.interval_s = interval_s
        self.peak = self.process.memory_info().rss
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.process.memory_info().rss)
            time.sleep(self.interval_s)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


async def ingest_one(
    *, path: Path, nc: Any, pool: Any, tenant: str, timeout_s: float
) -> dict[str, Any]:
    """Upload one file the gateway's way and time it until indexed."""
    document_id = uuid.uuid4()
    name = object_name(document_id, 1)
    mime = filetype.detect_mime_path(path, path.name)
    await put_file(nc.jetstream(), name=name, path=path)
    data = await asyncio.to_thread(path.read_bytes)
    digest = hashlib.sha256(data).hexdigest()
    async with pool.acquire() as conn:
        await docs.insert_document(
            conn,
            docs.NewDocument(
                id=document_id, tenant_id=tenant, title=path.stem, filename=path.name,
                mime_type=mime, size_bytes=len(data), file_sha256=digest,
                subject=None, grade_level=None, module_tag=None, class_id=None,
                content_type="textbook", language=None, collection="educational",
                curriculum_standards=[], topic_tags=[], source_priority=0.7,
                freshness_date=None, version=1, previous_version_id=None, object_name=name,
                uploaded_by="bench", uploader_role="teacher", metadata={},
            ),
        )  # fmt: skip
    outcome: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()

    async def on_outcome(msg: Any) -> None:
        data = json.loads(msg.data)
        if data.get("document_id") == str(document_id) and not outcome.done():
            outcome.set_result({"subject": msg.subject, **data})

    subs = [
        await nc.subscribe(DocumentIndexed.subject, cb=on_outcome),
        await nc.subscribe(DocumentFailed.subject, cb=on_outcome),
    ]
    event = DocumentUploaded(
        tenant_id=tenant, document_id=document_id, version=1, object_name=name,
        filename=path.name, mime_type=mime, size_bytes=len(data),
        file_sha256=digest, uploaded_by="bench",
    )  # fmt: skip
    started = time.perf_counter()
    await nc.jetstream().publish(event.subject, event.model_dump_json().encode())
    result = await asyncio.wait_for(outcome, timeout_s)
    elapsed = time.perf_counter() - started
    for sub in subs:
        await sub.unsubscribe()
    if result["subject"] != DocumentIndexed.subject:
        raise SystemExit(f"{path.name} failed: {result.get('reason')}: {result.get('message')}")
    rows = await pool.fetch(
        "SELECT text, context_prefix FROM chunks WHERE document_id = $1 ORDER BY kind, chunk_index",
        document_id,
    )
    texts = [f"{r['context_prefix']}\n{r['text']}" if r["context_prefix"] else r["text"]
             for r in rows]  # fmt: skip
    return {
        "file": path.name, "pages": result["page_count"], "chunks": len(texts),
        "seconds": elapsed, "texts": texts,
    }  # fmt: skip


def raw_embed_rate(embedder: LocalEmbedder, texts: list[str], batch_size: int) -> float:
    """Chunks per second of the embedder alone on the same texts and batch size."""
    started = time.perf_counter()
    for start in range(0, len(texts), batch_size):
        embedder.embed_documents_sync(texts[start : start + batch_size])
    return len(texts) / (time.perf_counter() - started)


def small_passages(count: int, corpus: Path = CORPUS) -> list[tuple[str, str]]:
    """The first ``count`` passages of the BEIR corpus that have text: (id, text)."""
    passages: list[tuple[str, str]] = []
    with corpus.open(encoding="utf-8") as lines:
        for line in lines:
            row = json.loads(line)
            text = " ".join(part for part in (row.get("title"), row.get("text")) if part)
            if text.strip():
                passages.append((str(row["_id"]), text))
            if len(passages) >= count:
                break
    return passages


async def upload_small(
    *, passages: list[tuple[str, str]], directory: Path, nc: Any, pool: Any, tenant: str
) -> list[DocumentUploaded]:
    """Store each passage as a .txt file and its pending row (untimed); the events to send."""
    await asyncio.to_thread(directory.mkdir, parents=True, exist_ok=True)
    js = nc.jetstream()
    limit = asyncio.Semaphore(16)

    async def upload(passage_id: str, text: str) -> DocumentUploaded:
        document_id = uuid.uuid4()
        name = object_name(document_id, 1)
        path = directory / f"pmid-{passage_id}.txt"
        data = text.encode("utf-8")
        path.write_bytes(data)
        digest = hashlib.sha256(data).hexdigest()
        async with limit:
            await put_file(js, name=name, path=path)
            async with pool.acquire() as conn:
                await docs.insert_document(
                    conn,
                    docs.NewDocument(
                        id=document_id, tenant_id=tenant, title=path.stem, filename=path.name,
                        mime_type="text/plain", size_bytes=len(data), file_sha256=digest,
                        subject=None, grade_level=None, module_tag=None, class_id=None,
                        content_type="textbook", language=None, collection="educational",
                        curriculum_standards=[], topic_tags=[], source_priority=0.7,
                        freshness_date=None, version=1, previous_version_id=None,
                        object_name=name, uploaded_by="bench", uploader_role="teacher",
                        metadata={},
                    ),
                )  # fmt: skip
        return DocumentUploaded(
            tenant_id=tenant, document_id=document_id, version=1, object_name=name,
            filename=path.name, mime_type="text/plain", size_bytes=len(data),
            file_sha256=digest, uploaded_by="bench",
        )  # fmt: skip

    return list(await asyncio.gather(*(upload(i, t) for i, t in passages)))


async def ingest_small(
    *, settings: Settings, embedder: LocalEmbedder, events: list[DocumentUploaded], nc: Any,
    pool: Any, timeout_s: float,
) -> dict[str, Any]:  # fmt: skip
    """Run a worker with ``settings``, publish every upload at once, time until the last
    outcome; check each document has one outcome event and its chunks once."""
    wanted = {str(e.document_id) for e in events}
    outcomes: dict[str, str] = {}
    event_ids: dict[str, int] = {}
    finished = asyncio.Event()
    last = [0.0]

    async def on_outcome(msg: Any) -> None:
        data = json.loads(msg.data)
        document = data.get("document_id")
        if document not in wanted:
            return
        event_ids[data["event_id"]] = event_ids.get(data["event_id"], 0) + 1
        if document not in outcomes:
            outcomes[document] = msg.subject
            last[0] = time.perf_counter()
            if len(outcomes) == len(wanted):
                finished.set()

    subs = [
        await nc.subscribe(DocumentIndexed.subject, cb=on_outcome),
        await nc.subscribe(DocumentFailed.subject, cb=on_outcome),
    ]
    app = create_app(settings, embedder=embedder)
    js = nc.jetstream()
    lifespan = app.router.lifespan_context(app)
    await lifespan.__aenter__()
    try:
        started = time.perf_counter()
        for start in range(0, len(events), 100):
            await asyncio.gather(
                *(
                    js.publish(e.subject, e.model_dump_json().encode())
                    for e in events[start : start + 100]
                )
            )
        await asyncio.wait_for(finished.wait(), timeout_s)
        elapsed = last[0] - started
    finally:
        # the measurement is over; a shutdown that lingers (seen on this loaded machine)
        # must not hold the run: this process ends after the part anyway
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(lifespan.__aexit__(None, None, None), 30)
    for sub in subs:
        await sub.unsubscribe()
    ids = [e.document_id for e in events]
    counts = await pool.fetchrow(
        "SELECT count(*) AS chunks, count(DISTINCT id) AS distinct_ids, "
        "count(DISTINCT document_id) AS documents FROM chunks WHERE document_id = ANY($1::uuid[])",
        ids,
    )
    failed = sum(1 for subject in outcomes.values() if subject == DocumentFailed.subject)
    return {
        "documents": len(events), "seconds": elapsed, "docs_per_s": len(events) / elapsed,
        "failed": failed, "chunks": counts["chunks"],
        "duplicate_chunks": counts["chunks"] - counts["distinct_ids"],
        "documents_with_chunks": counts["documents"],
        "outcome_events_per_document": sum(event_ids.values()) / len(events),
    }  # fmt: skip


@contextlib.asynccontextmanager
async def bench_stack() -> AsyncIterator[tuple[Path, EmbeddedPostgres, EmbeddedNats]]:
    """An embedded Postgres (migrated) and NATS in a temporary folder, removed afterwards."""
    base = Path(tempfile.mkdtemp(prefix="lectern-bench-"))
    os.chmod(base, 0o755)  # noqa: S103 - the unprivileged Postgres account must traverse it
    pg = EmbeddedPostgres(base / "pg", run_as=os.environ.get("LECTERN_EMBEDDED_PG_USER"))
    broker_server = EmbeddedNats(base / "nats")
    pg.start()
    broker_server.start()
    try:
        await migrate(pg.dsn, embedding_model="sentence-transformers/all-MiniLM-L6-v2",
                      embedding_dim=384)  # fmt: skip
        yield base, pg, broker_server
    finally:
        broker_server.stop()
        pg.stop()
        shutil.rmtree(base, ignore_errors=True)


async def run_small_part(*, count: int, batch: int, threads: int) -> dict[str, Any]:
    """One configuration of the small-documents part on its own embedded stack."""
    async with bench_stack() as (base, pg, broker_server):
        settings = Settings(
            nats_url=broker_server.url, database_url=pg.dsn, http_port=0, log_json=False,
            log_level="WARNING", batch_documents=batch, embedding_threads=threads,
        )  # fmt: skip
        embedder = LocalEmbedder(settings)
        pool = await create_pool(pg.dsn, min_size=1, max_size=4)
        nc = await nats.connect(broker_server.url)
        try:
            await ensure_streams(nc.jetstream())
            events = await upload_small(
                passages=small_passages(count), directory=base / "small", nc=nc, pool=pool,
                tenant="bench-small",
            )  # fmt: skip
            measured = await ingest_small(
                settings=settings, embedder=embedder, events=events, nc=nc, pool=pool,
                timeout_s=1800,
            )  # fmt: skip
        finally:
            await nc.close()
            await pool.close()
        raw = await asyncio.to_thread(
            raw_embed_rate, embedder, [t for _, t in small_passages(min(count, 300))], 1
        )
        measured.update(batch_documents=batch, embedding_threads=threads,
                        raw_embed_docs_per_s=raw)  # fmt: skip
        return measured


def run_small(count: int) -> dict[str, Any]:
    """The many-small-documents part: the defaults (lists of 32, one embedding thread), one
    upload at a time, and the defaults before lists (one at a time, two embedding threads),
    each in a fresh process and stack, one after the other in the same run."""
    defaults = Settings()
    runs: dict[str, dict[str, Any]] = {}
    for label, size, threads in (
        ("default", defaults.batch_documents, defaults.embedding_threads or 1),
        ("one_at_a_time", 1, defaults.embedding_threads or 1),
        ("before", 1, 2),
    ):  # fmt: skip
        child = subprocess.run(
            [sys.executable, __file__, "--no-large", "--small", str(count),
             "--small-part", str(size), "--small-threads", str(threads)],
            check=True, capture_output=True, text=True, timeout=3600,
        )  # fmt: skip
        runs[label] = json.loads(child.stdout.strip().splitlines()[-1])
        run_ = runs[label]
        print(
            f"small documents, {label:<13} (list of {size:>2}, {threads} embedding "
            f"thread{'s' if threads > 1 else ''}): {count} in {run_['seconds']:.1f} s = "
            f"{run_['docs_per_s']:.1f} docs/s ({run_['failed']} failed, {run_['chunks']} "
            f"chunks, {run_['duplicate_chunks']} duplicated; raw embedder one passage at a "
            f"time {run_['raw_embed_docs_per_s']:.1f}/s)",
            flush=True,
        )
    rate = runs["default"]["docs_per_s"]
    return {
        "documents": count, "docs_per_s": round(rate, 1),
        "one_at_a_time_docs_per_s": round(runs["one_at_a_time"]["docs_per_s"], 1),
        "before_docs_per_s": round(runs["before"]["docs_per_s"], 1),
        "ratio_to_one_at_a_time": round(rate / runs["one_at_a_time"]["docs_per_s"], 2),
        "ratio_to_before": round(rate / runs["before"]["docs_per_s"], 2),
        "runs": {
            label: {k: round(v, 3) if isinstance(v, float) else v for k, v in r.items()}
            for label, r in runs.items()
        },
    }  # fmt: skip


async def run(files: list[Path]) -> dict[str, Any]:
    """Start the stack, ingest the files, measure."""
    async with bench_stack() as (_, pg, broker_server):
        settings = Settings(
            nats_url=broker_server.url, database_url=pg.dsn, http_port=0, log_json=False,
            log_level="WARNING",
        )  # fmt: skip
        embedder = LocalEmbedder(settings)
        # the float model, as ingest embedded before int8 passages (the reference of
        # ratio_to_raw_float)
        # (two threads, its best here and ingest's default then)
        floats = LocalEmbedder(
            settings.model_copy(update={"embedding_threads": 2}), document_precision="float32"
        )
        app = create_app(settings, embedder=embedder)
        pool = await create_pool(pg.dsn, min_size=1, max_size=4)
        nc = await nats.connect(broker_server.url)
        results: list[dict[str, Any]] = []
        started_rss = psutil.Process().memory_info().rss / 2**20
        try:
            with RssSampler() as rss:
                async with app.router.lifespan_context(app):
                    # the worker logs each document's embedding and store times
                    logging.getLogger("lectern_ingest.service").setLevel(logging.INFO)
                    started_rss = psutil.Process().memory_info().rss / 2**20
                    for path in files:
                        measured = await ingest_one(
                            path=path, nc=nc, pool=pool, tenant="bench", timeout_s=1800
                        )
                        measured["peak_rss_mb"] = rss.peak / 2**20
                        # the raw embedder right after, on the same texts, so both see the
                        # same machine (other processes' load changes over minutes)
                        texts = measured.pop("texts")
                        raw = await asyncio.to_thread(
                            raw_embed_rate, embedder, texts, settings.embed_batch_size
                        )
                        raw_float = await asyncio.to_thread(
                            raw_embed_rate, floats, texts, settings.embed_batch_size
                        )
                        pipeline = measured["chunks"] / measured["seconds"]
                        measured.update(
                            pages_per_min=measured["pages"] / measured["seconds"] * 60.0,
                            chunks_per_s=pipeline, raw_embed_chunks_per_s=raw,
                            ratio_to_raw=pipeline / raw, raw_float_chunks_per_s=raw_float,
                            ratio_to_raw_float=pipeline / raw_float,
                        )  # fmt: skip
                        results.append(measured)
        finally:
            await nc.drain()
            await pool.close()
        headline = next((r for r in results if r["file"] == HEADLINE), results[0])
        return {
            "pages_per_min": round(headline["pages_per_min"], 1),
            "chunks_per_s": round(headline["chunks_per_s"], 2),
            "raw_embed_chunks_per_s": round(headline["raw_embed_chunks_per_s"], 2),
            "ratio_to_raw": round(headline["ratio_to_raw"], 3),
            "ratio_to_raw_float": round(headline["ratio_to_raw_float"], 3),
            # peak while the worker ingested (the raw runs after each document use the same
            # batch size, so they do not raise it)
            "peak_rss_mb": round(max(r["peak_rss_mb"] for r in results), 1),
            "rss_after_start_mb": round(started_rss, 1),
            "file": headline["file"],
            "documents": [
                {k: round(v, 3) if isinstance(v, float) else v for k, v in r.items()}
                for r in results
            ],
        }


def main() -> None:
    """Parse arguments, run, print a table and the JSON line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("files", nargs="*", type=Path)
    parser.add_argument("--docs", type=Path, default=DOCS)
    parser.add_argument(
        "--small", type=int, default=2000, metavar="N",
        help="short BEIR passages for the many-small-documents part (0: skip it)",
    )  # fmt: skip
    parser.add_argument(
        "--large", action=argparse.BooleanOptionalAction, default=True,
        help="run the large documents' part (--no-large: only the small documents)",
    )  # fmt: skip
    parser.add_argument("--small-part", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--small-threads", type=int, default=1, help=argparse.SUPPRESS)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    files = (args.files or [args.docs / name for name in DEFAULT_FILES]) if args.large else []
    if args.small and not CORPUS.is_file():
        print(f"missing the small documents' corpus: {CORPUS}", file=sys.stderr)
        raise SystemExit(2)
    missing = [f for f in files if not f.is_file()]
    if missing:
        print(f"missing benchmark documents: {', '.join(map(str, missing))}", file=sys.stderr)
        raise SystemExit(2)
    if args.small_part is not None:
        part = asyncio.run(
            run_small_part(count=args.small, batch=args.small_part, threads=args.small_threads)
        )
        print(json.dumps(part), flush=True)
        # a lingering shutdown thread must not keep the child alive; the stack is stopped
        os._exit(0)
    summary: dict[str, Any] = asyncio.run(run(files)) if files else {}
    if args.small:
        summary["small"] = run_small(args.small)
    for doc in summary.get("documents", []):
        print(
            f"{doc['file']:<40} {doc['pages']:>4} pages {doc['chunks']:>5} chunks "
            f"{doc['seconds']:>7.1f} s  {doc['pages_per_min']:>7.1f} pages/min  "
            f"{doc['chunks_per_s']:>6.1f} chunks/s  raw {doc['raw_embed_chunks_per_s']:>6.1f}/s  "
            f"ratio {doc['ratio_to_raw']:.2f}; raw float {doc['raw_float_chunks_per_s']:>6.1f}/s, "
            f"ratio {doc['ratio_to_raw_float']:.2f}"
        )
    small = summary.get("small")
    if small:
        print(
            f"{small['documents']} small documents: {small['docs_per_s']:.1f} docs/s with the "
            f"defaults; {small['one_at_a_time_docs_per_s']:.1f} one at a time (ratio "
            f"{small['ratio_to_one_at_a_time']:.2f}), {small['before_docs_per_s']:.1f} with the "
            f"defaults before lists (ratio {small['ratio_to_before']:.2f}); target >= 100 docs/s"
        )
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
