"""Small uploads indexed together: one transaction, one COPY and one BM25 update for a list.

A school syncing a question bank or an LMS export sends thousands of uploads of a few
sentences each. Indexed alone, each pays a dozen round trips to Postgres, an extraction
thread, a BM25 statistics update with its temporary table, an outbox row and notification,
and a transaction: about 25 ms of the two cores besides its embedding, which is what stopped
the many-small-documents load near 40 a second (docs/benchmarks.md, ingestion).

With ``LECTERN_INGEST_BATCH_DOCUMENTS`` above 1, the small uploads a fetch brings (up to
``batch_max_bytes``, first deliveries, no password, replacing nothing) are collected into one
list (``Collector``), and the list is indexed with one statement per step: the rows read and
marked, the objects fetched concurrently, every text extracted and chunked in one thread,
every chunk embedded in one embedder call (int8 passages go one at a time inside it, so a
vector does not depend on its list), one content-duplicate and one near-duplicate query, and
one transaction that locks the rows, COPYs every chunk, updates the BM25 statistics once,
marks every document ``indexed`` and writes every ``documents.indexed`` to the outbox.

Exactly-once stays per document: the list commits all its documents with their outcome events
or none of them, and each message is still acked by its own handler after the commit. A
document that leaves the common path (its row gone or no longer pending, a copy of an indexed
text or of another in the list, an empty file, no text, an extraction error) and, when the
list as a whole fails (an embedding or Postgres error, the document timeout), every document
not yet stored is handed to the one-document path (``IngestWorker.process_alone``), which
gives it its usual outcome: ``failed`` with stage and reason, ``duplicate``, or a retry.
Documents in a list publish no ``documents.progress``: they finish within a list's time.
"""

from __future__ import annotations

import asyncio
import logging
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from lectern_common import metrics, objects
from lectern_common.db.types import Pool
from lectern_common.events import DocumentUploaded
from lectern_common.index import FollowingEmbedder, ModelSwitched, guard
from lectern_common.outbox import enqueue_many
from lectern_common.text import embedding_text
from lectern_ingest import language
from lectern_ingest import repository as repo
from lectern_ingest.batching import Collector, with_keepalive
from lectern_ingest.chunking import ChunkingConfig
from lectern_ingest.config import Settings
from lectern_ingest.outcomes import Outcome, indexed_event
from lectern_ingest.pipeline import (
    Produced,
    Producer,
    chunk_record,
    describe,
    given_title,
    near_duplicate,
)

log = logging.getLogger(__name__)

KeepAlive = Callable[[], Awaitable[None]]


class Worker(Protocol):
    """What lists need of the ingest worker (``lectern_ingest.service.IngestWorker``)."""

    settings: Settings
    embedder: FollowingEmbedder
    pool: Pool
    jetstream: Any
    chunking: ChunkingConfig
    count_tokens: Callable[[str], int]

    async def process_alone(
        self,
        *,
        event: DocumentUploaded,
        deliveries: int,
        keepalive: KeepAlive | None = None,
        started: bool = False,
    ) -> Outcome: ...

    async def find_conflicts(self, *document_ids: uuid.UUID) -> None: ...


@dataclass(frozen=True)
class Delivery:
    """One delivery of ``documents.uploaded`` waiting in a list."""

    event: DocumentUploaded
    deliveries: int
    keepalive: KeepAlive | None = None


@dataclass
class _Document:
    """A document of a list on its way through the steps."""

    index: int
    delivery: Delivery
    row: Any
    path: Path
    stats: Produced = field(default_factory=Produced)
    records: list[repo.ChunkRecord] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    language: str = ""
    vectors: np.ndarray[Any, Any] | None = None
    result: repo.IndexedDocument | None = None

    @property
    def id(self) -> uuid.UUID:
        return self.delivery.event.document_id

    @property
    def content_sha256(self) -> str:
        return self.stats.content.hexdigest()


class SmallDocuments:
    """Indexes the small uploads of a worker in lists (see the module's description)."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.collector: Collector[Delivery, Outcome] = Collector(
            self._index, max_items=worker.settings.batch_documents, in_flight=2
        )

    async def process(self, delivery: Delivery) -> Outcome:
        """The outcome of one small upload, indexed with those collected with it. JetStream
        hears that the message is alive from its submission on: a delivery waiting behind the
        lists in flight (slow while NATS elects a leader) would otherwise outlive its ack
        wait and come again, a delivery spent each time, until a good upload failed
        ``too_many_deliveries`` (seen in the cluster test)."""
        interval = self.worker.settings.in_progress_interval_s
        return await with_keepalive(self.collector.submit(delivery), delivery.keepalive, interval)

    async def _index(self, items: list[Delivery]) -> list[Outcome | BaseException]:
        worker = self.worker
        results: list[Outcome | None] = [None] * len(items)
        alone: set[int] = set()
        counted: set[int] = set()  # items whose attempt the list has counted
        try:
            async with asyncio.timeout(worker.settings.document_timeout_s):
                await self._together(items, results, alone, counted)
        except Exception as exc:
            if isinstance(exc, ModelSwitched):
                await worker.embedder.follow(exc.live)
            waiting = [i for i, r in enumerate(results) if r is None]
            log.warning(
                "%d small documents could not be indexed together (%s: %s); indexing each alone",
                len(waiting), type(exc).__name__, exc,
            )  # fmt: skip
            alone.update(waiting)
        order = sorted(alone)
        # (no keep-alive of their own: each delivery's submission tells JetStream it is alive)
        outcomes = await asyncio.gather(
            *(
                worker.process_alone(
                    event=items[i].event, deliveries=items[i].deliveries, started=i in counted
                )
                for i in order
            ),
            return_exceptions=True,
        )
        # (every item has a result or went alone; were one left, its message is redelivered)
        done: list[Outcome | BaseException] = [
            RuntimeError("left without an outcome by its list")
        ] * len(items)
        for i, result in enumerate(results):
            if result is not None:
                done[i] = result
        # an error of the one-document path (Postgres unreachable) is its message's alone
        for i, outcome in zip(order, outcomes, strict=True):
            done[i] = outcome
        return done

    async def _together(
        self,
        items: list[Delivery],
        results: list[Outcome | None],
        alone: set[int],
        counted: set[int],
    ) -> None:
        """Index the list's documents on the common path; those that leave it go to ``alone``."""
        worker = self.worker
        started = time.monotonic()
        async with worker.pool.acquire() as conn:
            await repo.register_uploads(conn, [d.event for d in items])
            rows = await repo.get_documents(conn, [d.event.document_id for d in items])
        candidates = _candidates(items, rows, alone)
        if not candidates:
            return
        async with worker.pool.acquire() as conn:
            await repo.mark_processing_many(conn, [d.event.document_id for _, d, _ in candidates])
        counted.update(i for i, _, _ in candidates)
        documents = await self._fetch_and_extract(candidates, alone)
        if not documents:
            return
        documents = await self._without_copies(documents, alone)
        if not documents:
            return
        model = worker.embedder.name
        embed_s = await self._embed_all(documents)
        await self._describe(documents)
        store_started = time.monotonic()
        stored = await self._store(documents, model=model, started=started, alone=alone)
        _settle(documents, stored, results, alone)
        finished = time.monotonic()
        log.info(
            "indexed %d small documents together (%d chunks) in %.2f s (embedding %.2f s, "
            "store %.2f s); %d of the list indexed alone",
            len(stored), sum(len(d.records) for d in stored), finished - started, embed_s,
            finished - store_started, len(alone),
        )  # fmt: skip
        if stored:
            await worker.find_conflicts(*(d.id for d in stored))

    async def _fetch_and_extract(
        self, candidates: list[tuple[int, Delivery, Any]], alone: set[int]
    ) -> list[_Document]:
        """Fetch every candidate's bytes at once, then extract them all in one thread; those
        whose fetch or extraction fails go to ``alone``."""
        worker = self.worker
        with tempfile.TemporaryDirectory(prefix="lectern-ingest-") as tmp:
            documents = [
                _Document(index=i, delivery=d, row=row, path=Path(tmp) / str(i))
                for i, d, row in candidates
            ]
            fetched = await asyncio.gather(
                *(
                    objects.fetch_to_file(
                        worker.jetstream,
                        name=d.delivery.event.object_name,
                        path=d.path,
                        patience_s=worker.settings.fetch_patience_s,
                    )
                    for d in documents
                ),
                return_exceptions=True,
            )
            documents = _keep(documents, [isinstance(f, int) and f > 0 for f in fetched], alone)
            extracted = await asyncio.to_thread(self._extract, documents)
            return _keep(documents, extracted, alone)

    async def _embed_all(self, documents: list[_Document]) -> float:
        """Embed every document's chunks in one embedder call; the seconds it took."""
        embed_started = time.monotonic()
        vectors = await self.worker.embedder.embed_documents(
            [t for d in documents for t in d.texts]
        )
        embed_s = time.monotonic() - embed_started
        start = 0
        for document in documents:
            document.vectors = vectors[start : start + len(document.texts)]
            start += len(document.texts)
        return embed_s

    def _extract(self, documents: list[_Document]) -> list[bool]:
        """Extract, chunk and detect the language of every document (in a worker thread);
        False for a document the one-document path should take (an error, no text)."""
        worker = self.worker
        kept: list[bool] = []
        for document in documents:
            event = document.delivery.event
            producer = Producer(
                path=document.path, mime=event.mime_type, password=None,
                title=given_title(event), config=worker.chunking,
                count_tokens=worker.count_tokens, batch_size=worker.settings.embed_batch_size,
                loop=None, queue=None, max_chunks=worker.settings.max_chunks_per_document,
            )  # fmt: skip
            try:
                drafts = producer.collect()
            except Exception as exc:  # its failure is classified by the one-document path
                log.info("document %s: %s; indexing it alone", document.id, exc)
                kept.append(False)
                continue
            if not drafts or producer.stats.content.empty:
                kept.append(False)
                continue
            document.stats = producer.stats
            title = producer.title or producer.stats.title
            document.records = [chunk_record(document.id, i, d) for i, d in enumerate(drafts)]
            document.texts = [embedding_text(d.text, d.context_prefix, title) for d in drafts]
            document.language = event.metadata.language or language.detect_language(
                "\n".join(producer.stats.sample)
            )
            kept.append(True)
        return kept

    async def _without_copies(self, documents: list[_Document], alone: set[int]) -> list[_Document]:
        """Leave out, for the one-document path, copies of an indexed document's text (made
        duplicates there before embedding) and later copies of a text within the list."""
        async with self.worker.pool.acquire() as conn:
            originals = await repo.find_content_duplicates(
                conn,
                documents=[
                    (d.row["tenant_id"], d.row["collection"], d.content_sha256) for d in documents
                ],
                exclude=[d.id for d in documents],
            )
        keys: set[tuple[str, str, str]] = set()
        kept: list[bool] = []
        for document, original in zip(documents, originals, strict=True):
            key = (document.row["tenant_id"], document.row["collection"], document.content_sha256)
            kept.append(original is None and key not in keys)
            keys.add(key)
        return _keep(documents, kept, alone)

    async def _describe(self, documents: list[_Document]) -> None:
        """What each document's row will record, near duplicates included (one query)."""
        async with self.worker.pool.acquire() as conn:
            nearest = await repo.nearest_simhashes(
                conn,
                documents=[(d.row["tenant_id"], d.stats.simhash.digest()) for d in documents],
                exclude=[d.id for d in documents],
            )
        threshold = self.worker.settings.near_duplicate_threshold
        for document, nearest_one in zip(documents, nearest, strict=True):
            document.result = describe(
                document.delivery.event, document.stats, document.records,
                lang=document.language, near=near_duplicate(nearest_one, threshold),
            )  # fmt: skip

    async def _store(
        self, documents: list[_Document], *, model: str, started: float, alone: set[int]
    ) -> list[_Document]:
        """One transaction: lock, check for copies again, write every chunk and outcome.
        Returns the documents stored; copies found under the lock go to ``alone``."""
        async with self.worker.pool.acquire() as conn, conn.transaction():
            await guard(conn, model)
            locked = await repo.lock_documents(conn, [d.id for d in documents])
            pending = [
                d for d in documents
                if d.id in locked and locked[d.id]["status"] in ("pending", "processing")
            ]  # fmt: skip
            if not pending:
                return []
            await repo.lock_content_hashes(
                conn, [(d.row["tenant_id"], d.content_sha256) for d in pending]
            )
            originals = await repo.find_content_duplicates(
                conn,
                documents=[
                    (d.row["tenant_id"], d.row["collection"], d.content_sha256) for d in pending
                ],
                exclude=[d.id for d in pending],
            )
            stored = _keep(pending, [o is None for o in originals], alone)
            if not stored:
                return []
            ready: list[repo.Stored] = []
            for document in stored:
                assert document.vectors is not None
                assert document.result is not None
                ready.append(
                    repo.Stored(
                        row=locked[document.id],
                        chunks=document.records,
                        embeddings=document.vectors,
                        result=document.result,
                    )
                )
            await repo.store_documents(conn, ready)
            fresh = await repo.get_documents(conn, [d.id for d in stored])
            duration_ms = (time.monotonic() - started) * 1000.0
            await enqueue_many(
                conn, [indexed_event(fresh[d.id], duration_ms=duration_ms) for d in stored]
            )
        return stored


def _candidates(
    items: list[Delivery], rows: dict[uuid.UUID, Any], alone: set[int]
) -> list[tuple[int, Delivery, Any]]:
    """The list's first deliveries of pending new documents, each once, with their rows; the
    others' indexes go to ``alone``."""
    candidates: list[tuple[int, Delivery, Any]] = []
    seen: set[uuid.UUID] = set()
    for i, delivery in enumerate(items):
        row = rows.get(delivery.event.document_id)
        if (
            row is None
            or row["status"] not in ("pending", "processing")
            or row["previous_version_id"] is not None
            or delivery.deliveries > 1
            or delivery.event.document_id in seen
        ):
            # absent, finished, a new version or a redelivery: the one-document path
            # knows each case (retry, re-published outcome, clean-up, give up)
            alone.add(i)
            continue
        seen.add(delivery.event.document_id)
        candidates.append((i, delivery, row))
    return candidates


def _settle(
    documents: list[_Document],
    stored: list[_Document],
    results: list[Outcome | None],
    alone: set[int],
) -> None:
    """The stored documents' outcomes ``indexed``; the others not sent alone ``dropped``."""
    for document in stored:
        results[document.index] = Outcome("indexed")
        metrics.DOCUMENTS_INGESTED.add(
            1, {"outcome": "indexed", "mime_type": document.delivery.event.mime_type}
        )
    for document in documents:
        if results[document.index] is None and document.index not in alone:
            # no longer pending work when locked (deleted, or another delivery did it)
            log.info("document %s changed while indexing; result dropped", document.id)
            results[document.index] = Outcome("dropped")


def _keep(documents: list[_Document], kept: list[bool], alone: set[int]) -> list[_Document]:
    """The documents marked kept; the others go to ``alone`` (the one-document path)."""
    for document, keep in zip(documents, kept, strict=True):
        if not keep:
            alone.add(document.index)
    return [d for d, keep in zip(documents, kept, strict=True) if keep]
