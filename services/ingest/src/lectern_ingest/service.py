"""The ingest pipeline: fetch -> extract -> chunk -> (enrich) -> embed -> store -> publish.

Extraction and chunking run in a producer thread while the event loop embeds the chunk
batches it hands over, so the CPU-bound stages overlap with the embedder. All chunks of a
document are written in one transaction with deterministic ids, which makes re-delivery of
the same upload harmless; the outcome event (``documents.indexed`` / ``failed``) is written to
the outbox in the transaction that stores the outcome, and the service's relay publishes it
(``lectern_common.outbox``): it can neither be lost nor go out for an outcome that did not
commit.

A document whose cleaned text equals an indexed document's (same tenant and collection) is
not indexed again: it ends ``duplicate``, usually noticed as soon as extraction finishes and
before most of it is embedded, and always re-checked under a lock when storing. After an
outcome is stored, the upload's PDF password, a replaced version's bytes and a duplicate's
own bytes are removed from the object store.

The steps live beside it: ``pipeline`` (extract -> chunk in a thread, records) and
``outcomes`` (failures, settlement, progress).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import hashlib
import logging
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from lectern_common import metrics, objects
from lectern_common.db.types import Pool
from lectern_common.embeddings import Embedder
from lectern_common.errors import NotFoundError, PermanentError, RetryableError
from lectern_common.events import (
    DocumentFailed,
    DocumentIndexed,
    DocumentUploaded,
    FailureReason,
    IngestStage,
    conflicts_found,
    outcome_event_id,
)
from lectern_common.index import FollowingEmbedder, ModelSwitched, guard, live_model
from lectern_common.outbox import enqueue, enqueue_many
from lectern_common.text import embedding_text
from lectern_ingest import language
from lectern_ingest import repository as repo
from lectern_ingest.batching import keep_alive, wait_with_keepalive
from lectern_ingest.chunking import (
    ChunkDraft,
)
from lectern_ingest.config import Settings
from lectern_ingest.enrich import GeminiEnricher, build_enricher
from lectern_ingest.outcomes import (
    VALID_REASONS,
    IngestFailure,
    Outcome,
    Progress,
    Publish,
    default_reason,
    failure_reason,
    indexed_event,
    retry_delay,
)
from lectern_ingest.pipeline import (
    DONE,
    EMBED_TIMER,
    PipelineResult,
    Produced,
    Producer,
    chunk_record,
    chunking_config,
    describe,
    given_title,
    near_duplicate,
    report_embedded,
    report_units,
    thread_safe_counter,
)
from lectern_ingest.small import Delivery, SmallDocuments

log = logging.getLogger(__name__)

KeepAlive = Callable[[], Awaitable[None]]


#: the replaced version's vectors by embedded-text hash, and the count reused so far
REUSABLE: contextvars.ContextVar[tuple[dict[str, np.ndarray[Any, Any]], list[int]]] = (
    contextvars.ContextVar("reusable")
)


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Try:
    """One delivery of an upload that started an attempt: JetStream's delivery count and the
    attempts started so far, this one included (ingest's own count: deliveries can be spent
    without an attempt)."""

    deliveries: int
    attempt: int


@dataclass(frozen=True)
class _Stored:
    """A document's pipeline result as stored: ``indexed``, ``duplicate`` or None (the
    document changed meanwhile), with when its indexing and its storing began."""

    stored: str | None
    result: PipelineResult
    started: float
    store_started: float


@dataclass
class _Drained:
    """What the producer handed over: chunk drafts, the vectors of those embedded so far,
    and whether (and which) an indexed document has the same text."""

    drafts: list[ChunkDraft] = field(default_factory=list)
    vectors: list[np.ndarray[Any, Any]] = field(default_factory=list)
    duplicate_of: uuid.UUID | None = None
    checked: bool = False


def _itself(event: DocumentUploaded) -> list[uuid.UUID]:
    """The upload's document and the version it replaces: never its own duplicate."""
    itself = [event.document_id]
    if event.replaces_document_id is not None:
        itself.append(event.replaces_document_id)
    return itself


def _no_text(event: DocumentUploaded, stats: Produced) -> IngestFailure:
    """The failure of a document without a chunk of text."""
    skipped = f" ({stats.skipped_pages} pages without a text layer)" if (
        stats.skipped_pages) else ""  # fmt: skip
    return IngestFailure(
        f"{event.filename} has no extractable text{skipped}; upload a text-based version "
        "(or install Tesseract for scanned pages)",
        stage=IngestStage.EXTRACT, reason=FailureReason.NO_TEXT,
    )  # fmt: skip


def _duplicate_result(
    stats: Produced,
    *,
    lang: str | None,
    simhash: int,
    duplicate_of: uuid.UUID,
    embed_s: float,
) -> PipelineResult:
    """The result of a document whose text an indexed one holds: no chunks of its own."""
    duplicate = repo.IndexedDocument(
        page_count=stats.page_count, skipped_pages=stats.skipped_pages, chunk_count=0,
        qa_count=0, language=lang, ts_config=language.ts_config_for(lang),
        content_sha256=stats.content.hexdigest(), simhash=simhash,
        near_duplicate_of=None, near_duplicate_score=None, enriched=False,
        enrichment_note=None,
    )  # fmt: skip
    return PipelineResult(
        chunks=[], embeddings=np.empty((0, 0), dtype=np.float32), indexed=duplicate,
        embed_s=embed_s, duplicate_of=duplicate_of,
    )  # fmt: skip


class IngestWorker:
    """Indexes uploaded documents; one ``process`` call per delivery."""

    def __init__(
        self,
        *,
        settings: Settings,
        embedder: Embedder,
        pool: Pool,
        jetstream: Any,
        publish: Publish,
        enricher: GeminiEnricher | None = None,
    ) -> None:
        self.settings = settings
        #: follows the live index's model (``lectern reindex``)
        self.embedder = (
            embedder
            if isinstance(embedder, FollowingEmbedder)
            else FollowingEmbedder(settings, embedder)
        )
        self.pool = pool
        self.jetstream = jetstream
        self.publish = publish
        self.enricher = enricher if enricher is not None else build_enricher(settings)
        max_tokens = embedder.max_input_tokens
        if settings.chunk_max_tokens is not None:
            max_tokens = min(max_tokens, settings.chunk_max_tokens)
        self.chunking = chunking_config(settings, max_tokens=max_tokens)
        self.count_tokens = thread_safe_counter(embedder)
        #: documents indexed one at a time, in flight at once (``concurrency``)
        self._large = asyncio.Semaphore(settings.concurrency)
        #: small uploads indexed together in lists (``batch_documents`` > 1)
        self.small = SmallDocuments(self) if settings.batch_documents > 1 else None

    def is_small(self, event: DocumentUploaded) -> bool:
        """Whether the upload is indexed with other small ones (batching on, a small file
        with nothing to reuse from an earlier version, no password to fetch, no enrichment)."""
        settings = self.settings
        return (
            settings.batch_documents > 1
            and event.size_bytes <= settings.batch_max_bytes
            and event.replaces_document_id is None
            and not event.has_password
            and self.enricher is None
        )

    async def process(
        self, *, event: DocumentUploaded, deliveries: int, keepalive: KeepAlive | None = None
    ) -> Outcome:
        """Handle one delivery of ``documents.uploaded``; never raises for a document's fault.

        Small uploads are indexed together, up to ``batch_documents`` in a list
        (``lectern_ingest.small``); the others one at a time, ``concurrency`` at once."""
        if self.small is not None and self.is_small(event):
            return await self.small.process(Delivery(event, deliveries, keepalive))
        gate = self._large
        await wait_with_keepalive(gate, keepalive, self.settings.in_progress_interval_s)
        try:
            return await self.process_alone(event=event, deliveries=deliveries, keepalive=keepalive)
        finally:
            gate.release()

    async def process_alone(
        self,
        *,
        event: DocumentUploaded,
        deliveries: int,
        keepalive: KeepAlive | None = None,
        started: bool = False,
    ) -> Outcome:
        """Index one upload by itself: settle what is already decided, else run the pipeline,
        store its outcome and clean up after it. ``started``: a list has already counted this
        delivery's attempt (``repo.mark_processing_many``)."""
        async with self.pool.acquire() as conn:
            await repo.register_uploads(conn, [event])
            row = await repo.get_document(conn, event.document_id)
        earlier = row["attempts"] - (1 if started else 0)
        decided = await self._decided(event, row, deliveries, earlier)
        if decided is not None:
            return decided
        if started:
            tried = Try(deliveries, row["attempts"])
        else:
            async with self.pool.acquire() as conn:
                tried = Try(deliveries, await repo.mark_processing(conn, event.document_id))
        attempt = await self._attempt(event, row, tried=tried, keepalive=keepalive)
        if isinstance(attempt, Outcome):
            return attempt
        return await self._after_store(event, attempt, deliveries=deliveries)

    async def _decided(
        self, event: DocumentUploaded, row: Any, deliveries: int, earlier: int
    ) -> Outcome | None:
        """The outcome when ingest's record already settles the delivery (an outcome stored,
        too many attempts or deliveries); None when it is to be indexed. The record exists: it
        is made from the event before this is asked. ``earlier``: the attempts started before
        this delivery."""
        settings = self.settings
        status = row["status"]
        if status in ("indexed", "duplicate") and row["version"] == event.version:
            # a crash between commit and ack: repair the clean-up; the outcome is in the outbox
            # (enqueued again in case it was published and pruned: consumers dedupe on its id)
            cleaned = await self._clean_up(event, row)
            await self._enqueue(indexed_event(row, duration_ms=0.0))
            return Outcome(status, None if cleaned else self.retry_delay_for(deliveries))
        if status == "failed":
            await self._forget_password(event)
            await self._enqueue(failed_row_event(row))
            return Outcome("failed")
        if status not in ("pending", "processing"):
            log.info("document %s is %s; nothing to do", event.document_id, status)
            return Outcome(status)
        # attempts that started and never finished (a worker killed, a document that kills
        # it); deliveries spent before any attempt began (a replica killed with the upload
        # fetched, a queue outliving the ack wait) count only towards JetStream's own limit
        if earlier >= settings.max_deliveries - 1 and earlier > 0:
            given_up = f"gave up after {earlier} attempts"
        elif deliveries >= settings.delivery_limit:
            given_up = f"delivered {deliveries} times, {earlier} attempts started"
        else:
            return None
        last = row["error_message"] or "the worker stopped before finishing"
        await self._fail(
            event, IngestStage(row["error_stage"] or IngestStage.FETCH.value),
            FailureReason.TOO_MANY_DELIVERIES, f"{given_up}; last error: {last}", earlier,
        )  # fmt: skip
        return Outcome("failed", gave_up="too_many_deliveries")

    async def _attempt(
        self,
        event: DocumentUploaded,
        row: Any,
        *,
        tried: Try,
        keepalive: KeepAlive | None,
    ) -> Outcome | _Stored:
        """Run the pipeline and store its result within the document's time limit; the
        outcome of a failure, or what was stored."""
        settings = self.settings
        progress = Progress(
            event=event, publish=self.publish, interval_s=settings.progress_interval_s,
            after_s=settings.progress_after_s,
        )  # fmt: skip
        started = time.monotonic()
        alive = (
            asyncio.create_task(keep_alive(keepalive, settings.in_progress_interval_s))
            if keepalive
            else None
        )
        model = self.embedder.name
        limit = asyncio.timeout(settings.document_timeout_s)
        try:
            async with limit:
                result = await self._run(event=event, progress=progress)
                await progress.report(
                    IngestStage.STORE, 0, len(result.chunks), "chunks", force=True
                )
                store_started = time.monotonic()
                stored = await self._store(row, result, started=started, model=model)
        except TimeoutError as exc:
            if not limit.expired():
                # a timeout of its own inside, not the document's limit (Postgres lost while
                # storing: asyncpg's connect times out): transient, tried again
                return await self._failed_attempt(event, exc, progress.stage, tried)
            await self._fail(
                event, progress.stage, FailureReason.TIMEOUT,
                f"indexing took longer than the limit of {settings.document_timeout_s:.0f} s; "
                "split the document or raise LECTERN_INGEST_DOCUMENT_TIMEOUT_S", tried.attempt,
            )  # fmt: skip
            return Outcome("failed")
        except IngestFailure as exc:
            await self._fail(event, exc.stage, exc.failure, exc.message, tried.attempt)
            return Outcome("failed")
        except ModelSwitched as exc:
            # re-indexed while this document was embedded: embed it again with the new model
            log.info("document %s: %s; embedding it again", event.document_id, exc.message)
            await self.embedder.follow(exc.live)
            return Outcome("retry", 0.0)
        except PermanentError as exc:
            reason = failure_reason(exc, default_reason(progress.stage))
            await self._fail(event, progress.stage, reason, exc.message, tried.attempt)
            return Outcome("failed")
        except Exception as exc:
            return await self._failed_attempt(event, exc, progress.stage, tried)
        finally:
            if alive is not None:
                alive.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await alive
        return _Stored(stored, result, started=started, store_started=store_started)

    async def _failed_attempt(
        self, event: DocumentUploaded, exc: Exception, stage: IngestStage, tried: Try
    ) -> Outcome:
        """A retry for a transient or unexpected error, or a failure on the last attempt (or
        the delivery before JetStream's last, so that the failure is recorded)."""
        message = exc.message if isinstance(exc, RetryableError) else repr(exc)
        if not isinstance(exc, RetryableError):
            log.exception("ingest of %s failed at %s", event.document_id, stage)
        settings = self.settings
        if (
            tried.attempt + 1 >= settings.max_deliveries
            or tried.deliveries + 1 >= settings.delivery_limit
        ):
            await self._fail(
                event, stage, FailureReason.TOO_MANY_DELIVERIES,
                f"gave up after {tried.attempt} attempts; last error: {message}", tried.attempt,
            )  # fmt: skip
            return Outcome("failed", gave_up="too_many_deliveries")
        async with self.pool.acquire() as conn:
            await repo.record_retry(
                conn, event.document_id, stage=stage.value, message=message[:2000]
            )
        return Outcome("retry", self.retry_delay_for(tried.deliveries))

    async def _after_store(
        self, event: DocumentUploaded, attempt: _Stored, *, deliveries: int
    ) -> Outcome:
        """Log what was stored, look for conflicts and clean up after it."""
        stored, result = attempt.stored, attempt.result
        if stored is None:
            log.info("document %s changed while indexing; result dropped", event.document_id)
            await self._forget_password(event)
            return Outcome("dropped")
        finished = time.monotonic()
        log.info(
            "%s %s: %s pages, %d chunks in %.2f s (embedding %.2f s, store %.2f s)",
            stored, event.document_id, result.indexed.page_count, len(result.chunks),
            finished - attempt.started, result.embed_s, finished - attempt.store_started,
        )  # fmt: skip
        if stored == "indexed":
            await self.find_conflicts(event.document_id)
        async with self.pool.acquire() as conn:
            row = await repo.get_document(conn, event.document_id)
        cleaned = await self._clean_up(event, row)
        metrics.DOCUMENTS_INGESTED.add(1, {"outcome": stored, "mime_type": event.mime_type})
        # a failed clean-up is retried by the re-delivery
        return Outcome(stored, None if cleaned else self.retry_delay_for(deliveries))

    async def _store(
        self, row: Any, result: PipelineResult, *, started: float, model: str
    ) -> str | None:
        """Store the outcome: ``indexed``, ``duplicate`` or None (the document changed), with
        ``documents.indexed`` in the outbox in the same transaction. ``model`` embedded the
        chunks; ``ModelSwitched`` when the live index holds another's vectors now."""
        async with self.pool.acquire() as conn, conn.transaction():
            await guard(conn, model)
            if result.duplicate_of is None:
                stored = await repo.store_document(
                    conn, document=row, chunks=result.chunks, embeddings=result.embeddings,
                    result=result.indexed,
                )  # fmt: skip
            else:
                stored = await repo.store_duplicate(
                    conn, document=row, original_id=result.duplicate_of, result=result.indexed
                )
            if stored == "gone":
                raise RetryableError(
                    f"document {result.duplicate_of}, whose text this one repeats, left the "
                    "index while this one was being read; the next attempt indexes it",
                    reason="duplicate_gone",
                )
            if stored in ("indexed", "duplicate"):
                fresh = await repo.get_document(conn, row["id"])
                duration_ms = (time.monotonic() - started) * 1000.0
                await enqueue(conn, indexed_event(fresh, duration_ms=duration_ms))
        return stored

    async def find_conflicts(self, *document_ids: uuid.UUID) -> None:
        """Announce new documents' conflicts with the library (``documents.conflicts``, through
        the outbox: the gateway's review queue records them); a failure here is logged, never
        the documents'."""
        if self.settings.conflict_neighbours == 0:
            return
        try:
            async with self.pool.acquire() as conn, conn.transaction():
                found = await repo.conflicting_pairs(
                    conn, document_ids=document_ids,
                    neighbours=self.settings.conflict_neighbours,
                    min_similarity=self.settings.conflict_min_similarity,
                )  # fmt: skip
                events = [
                    e for tenant, pairs in found.items() for e in conflicts_found(tenant, pairs)
                ]
                await enqueue_many(conn, events)
        except Exception:
            log.exception("conflict check of %s failed", ", ".join(map(str, document_ids)))
            return
        # the pairs found, known ones included: the review queue drops those it holds
        if detected := sum(map(len, found.values())):
            log.info("documents %s: %d conflicting statement(s) sent for review",
                     ", ".join(map(str, document_ids)), detected)  # fmt: skip

    async def _enqueue(self, event: DocumentIndexed | DocumentFailed) -> None:
        async with self.pool.acquire() as conn:
            await enqueue(conn, event)

    async def _clean_up(self, event: DocumentUploaded, row: Any) -> bool:
        """After a stored outcome: drop the PDF password, a replaced version's bytes and a
        duplicate's own bytes (its text lives in the original). False when something failed.
        """
        names: list[str] = []
        if row["status"] in ("indexed", "duplicate"):
            async with self.pool.acquire() as conn:
                previous = await repo.superseded_object(conn, row["id"])
            if previous:
                names.append(previous)
        if row["status"] == "duplicate" and row["object_name"]:
            names.append(row["object_name"])
        ok = await self._forget_password(event)
        for name in names:
            try:
                await objects.delete_object(self.jetstream, name=name)
            except Exception as exc:
                log.warning("could not remove object %s (retried on re-delivery): %s", name, exc)
                ok = False
        return ok

    async def _forget_password(self, event: DocumentUploaded) -> bool:
        """Remove the upload's stored PDF password (its work is over); False on failure."""
        if not event.has_password:
            return True
        try:
            await objects.delete_password(self.jetstream, name=event.object_name)
        except Exception as exc:
            log.warning("could not remove the password of %s: %s", event.document_id, exc)
            return False
        return True

    def retry_delay_for(self, deliveries: int) -> float:
        """Seconds before redelivering a message delivered ``deliveries`` times."""
        return retry_delay(
            deliveries=deliveries,
            base_s=self.settings.retry_backoff_s,
            max_s=self.settings.retry_backoff_max_s,
        )

    async def _run(self, *, event: DocumentUploaded, progress: Progress) -> PipelineResult:
        with tempfile.TemporaryDirectory(prefix="lectern-ingest-") as tmp:
            path = Path(tmp) / "document"
            await progress.report(IngestStage.FETCH, 0, event.size_bytes, "units", force=True)
            try:
                await objects.fetch_to_file(
                    self.jetstream, name=event.object_name, path=path,
                    patience_s=self.settings.fetch_patience_s,
                )  # fmt: skip
            except NotFoundError as exc:
                raise IngestFailure(
                    f"the uploaded bytes ({event.object_name}) are gone from the object store; "
                    "upload the file again",
                    stage=IngestStage.FETCH, reason=FailureReason.OBJECT_MISSING,
                ) from exc  # fmt: skip
            if path.stat().st_size == 0:
                raise IngestFailure(
                    f"{event.filename} is empty (0 bytes)",
                    stage=IngestStage.EXTRACT, reason=FailureReason.EMPTY_FILE,
                )  # fmt: skip
            password = await self._password(event)
            return await self._extract_and_embed(
                event=event, path=path, password=password, progress=progress
            )

    async def _password(self, event: DocumentUploaded) -> str | None:
        """The PDF password: from the object store (or, from older gateways, the event)."""
        if event.pdf_password is not None or not event.has_password:
            return event.pdf_password
        try:
            return await objects.fetch_password(self.jetstream, name=event.object_name)
        except NotFoundError as exc:
            raise IngestFailure(
                f"the password given for {event.filename} is no longer stored; upload the file "
                "again with its password",
                stage=IngestStage.FETCH, reason=FailureReason.OBJECT_MISSING,
            ) from exc  # fmt: skip

    async def _extract_and_embed(
        self, *, event: DocumentUploaded, path: Path, password: str | None, progress: Progress
    ) -> PipelineResult:
        """Extract and chunk in the producer thread while the chunk batches are embedded (with
        an enricher: once every chunk is enriched); a copy of an indexed text keeps no chunks."""
        # several documents may be in flight in one worker: embedding time is per document
        embed_timer = [0.0]
        EMBED_TIMER.set(embed_timer)
        reused = [0]
        REUSABLE.set((await self._reusable(event.replaces_document_id), reused))
        queue: asyncio.Queue[Any] = asyncio.Queue(maxsize=self.settings.queue_batches)
        producer = Producer(
            path=path, mime=event.mime_type, password=password,
            title=given_title(event), config=self.chunking,
            count_tokens=self.count_tokens, batch_size=self.settings.embed_batch_size,
            loop=asyncio.get_running_loop(), queue=queue,
            max_chunks=self.settings.max_chunks_per_document,
        )  # fmt: skip
        progress.stage = IngestStage.EXTRACT
        producer.start()
        drained = await self._drain(event, producer, queue, progress)
        stats = producer.stats
        final_stage = IngestStage.EXTRACT if self.enricher is not None else IngestStage.EMBED
        await report_units(progress, stats, final_stage, force=True)
        if not drained.drafts:
            raise _no_text(event, stats)
        duplicate_of = drained.duplicate_of
        if not drained.checked:
            duplicate_of = await self._content_duplicate(event, stats)
        # off the event loop, which serves the other documents in flight
        lang = event.metadata.language or await asyncio.to_thread(
            language.detect_language, "\n".join(stats.sample)
        )
        simhash = stats.simhash.digest()
        if duplicate_of is not None:
            return _duplicate_result(
                stats, lang=lang, simhash=simhash, duplicate_of=duplicate_of,
                embed_s=embed_timer[0],
            )  # fmt: skip
        records = [chunk_record(event.document_id, i, d) for i, d in enumerate(drained.drafts)]
        enriched = False
        note: str | None = "no Gemini key"
        vectors = drained.vectors
        if self.enricher is not None:
            records, enriched, note = await self._enrich(event, records, progress, self.enricher)
            title = producer.title or stats.title
            vectors.extend(await self._embed_records(records, title=title, progress=progress))
        embeddings = np.concatenate(vectors, axis=0)
        near = await self._near_duplicate(event, simhash)
        indexed = describe(
            event, stats, records, lang=lang, near=near, enriched=enriched, note=note
        )
        if reused[0]:
            log.info(
                "document %s: %d of %d chunk embeddings reused from version %s",
                event.document_id, reused[0], len(records), event.replaces_document_id,
            )  # fmt: skip
        return PipelineResult(
            chunks=records, embeddings=embeddings, indexed=indexed, embed_s=embed_timer[0],
            reused_embeddings=reused[0],
        )  # fmt: skip

    async def _drain(
        self,
        event: DocumentUploaded,
        producer: Producer,
        queue: asyncio.Queue[Any],
        progress: Progress,
    ) -> _Drained:
        """Take the producer's chunk batches until it is done (or the text is found to copy
        an indexed document's), embedding each unless an enricher is to see them first."""
        drained = _Drained()
        try:
            while True:
                item = await queue.get()
                if item is DONE:
                    break
                if isinstance(item, BaseException):
                    progress.stage = producer.stage
                    raise item
                drained.drafts.extend(item)
                if not drained.checked and producer.stats.extracted:
                    # extraction runs ahead of embedding: once the whole text is read, a copy
                    # of an indexed document is known before most of it would be embedded
                    drained.checked = True
                    drained.duplicate_of = await self._content_duplicate(event, producer.stats)
                    if drained.duplicate_of is not None:
                        break
                if self.enricher is not None:
                    await report_units(progress, producer.stats, IngestStage.EXTRACT)
                    continue
                progress.stage = IngestStage.EMBED
                title = producer.title or producer.stats.title
                drained.vectors.append(
                    await self._embed(
                        [embedding_text(d.text, d.context_prefix, title) for d in item]
                    )
                )
                await report_embedded(progress, producer.stats, item)
        finally:
            producer.stop.set()
        return drained

    async def _enrich(
        self,
        event: DocumentUploaded,
        records: list[repo.ChunkRecord],
        progress: Progress,
        enricher: GeminiEnricher,
    ) -> tuple[list[repo.ChunkRecord], bool, str | None]:
        """The enricher's chunks, whether it enriched them, and its note."""
        progress.stage = IngestStage.ENRICH
        await progress.report(IngestStage.ENRICH, 0, len(records), "chunks", force=True)
        return await enricher.enrich(
            document_id=event.document_id, title=event.metadata.title or event.filename,
            chunks=records, count_tokens=self.count_tokens,
            max_tokens=self.chunking.max_tokens,
        )  # fmt: skip

    async def _embed_records(
        self, records: Sequence[repo.ChunkRecord], *, title: str | None, progress: Progress
    ) -> list[np.ndarray[Any, Any]]:
        """The chunks' vectors, a batch at a time, reporting progress after each batch."""
        progress.stage = IngestStage.EMBED
        texts = [embedding_text(r.text, r.context_prefix, title) for r in records]
        vectors: list[np.ndarray[Any, Any]] = []
        for start in range(0, len(texts), self.settings.embed_batch_size):
            batch = texts[start : start + self.settings.embed_batch_size]
            vectors.append(await self._embed(batch))
            await progress.report(IngestStage.EMBED, start + len(batch), len(texts), "chunks")
        return vectors

    async def _content_duplicate(
        self, event: DocumentUploaded, stats: Produced
    ) -> uuid.UUID | None:
        """An indexed document of the tenant (same collection) with exactly the same text."""
        if stats.content.empty:
            return None
        async with self.pool.acquire() as conn:
            return await repo.find_content_duplicate(
                conn, tenant_id=event.tenant_id, collection=event.metadata.collection,
                content_sha256=stats.content.hexdigest(), exclude=_itself(event),
            )  # fmt: skip

    async def _reusable(self, previous: uuid.UUID | None) -> dict[str, np.ndarray[Any, Any]]:
        """The replaced version's chunk vectors by the hash of what was embedded (only when
        the index holds this embedder's vectors), so unchanged chunks are not embedded again."""
        if previous is None:
            return {}
        async with self.pool.acquire() as conn:
            model = await live_model(conn)
            if model is None or model.name != self.embedder.name:
                return {}
            title = await conn.fetchval(
                "SELECT title FROM ingest_documents WHERE id = $1", previous
            )
            rows = await conn.fetch(
                "SELECT text, context_prefix, embedding FROM chunks WHERE document_id = $1 "
                "AND kind IN ('text', 'table')",
                previous,
            )
        return {
            _digest(embedding_text(r["text"], r["context_prefix"], title)): np.asarray(
                r["embedding"].to_numpy()
                if hasattr(r["embedding"], "to_numpy")
                else r["embedding"],
                dtype=np.float32,
            )
            for r in rows
        }

    async def _embed(self, texts: Sequence[str]) -> np.ndarray[Any, Any]:
        known, reused = REUSABLE.get(({}, [0]))
        keys = [_digest(t) for t in texts] if known else []
        missing = [i for i, key in enumerate(keys) if key not in known] if known else None
        if missing is not None and len(missing) < len(texts):
            fresh = await self._embed_new([texts[i] for i in missing]) if missing else None
            vectors = [known.get(key) for key in keys]
            for position, index in enumerate(missing):
                assert fresh is not None
                vectors[index] = fresh[position]
            reused[0] += len(texts) - len(missing)
            return np.stack([np.asarray(v, dtype=np.float32) for v in vectors])
        return await self._embed_new(texts)

    async def _embed_new(self, texts: Sequence[str]) -> np.ndarray[Any, Any]:
        started = time.monotonic()
        try:
            return await self.embedder.embed_documents(texts)
        except PermanentError as exc:
            raise IngestFailure(
                f"the embedder rejected the text: {exc.message}",
                stage=IngestStage.EMBED, reason=FailureReason.EMBEDDING_FAILED,
            ) from exc  # fmt: skip
        finally:
            EMBED_TIMER.get([0.0])[0] += time.monotonic() - started

    async def _near_duplicate(
        self, event: DocumentUploaded, simhash: int
    ) -> tuple[uuid.UUID, float] | None:
        async with self.pool.acquire() as conn:
            nearest = await repo.nearest_simhash(
                conn, tenant_id=event.tenant_id, simhash=simhash, exclude=_itself(event)
            )
        return near_duplicate(nearest, self.settings.near_duplicate_threshold)

    async def _fail(
        self,
        event: DocumentUploaded,
        stage: IngestStage,
        reason: FailureReason,
        message: str,
        attempts: int,
    ) -> None:
        log.warning("document %s failed at %s (%s): %s", event.document_id, stage, reason, message)
        async with self.pool.acquire() as conn, conn.transaction():
            changed = await repo.mark_failed(
                conn, event.document_id, stage=stage.value, reason=reason.value,
                message=message[:4000], attempts=attempts,
            )  # fmt: skip
            if changed:  # the outbox: documents.failed commits with the status
                await enqueue(conn, failed_event(event, stage, reason, message, attempts))
        await self._forget_password(event)
        if changed:
            metrics.DOCUMENTS_FAILED.add(1, {"stage": stage.value, "reason": reason.value})


def failed_event(
    event: DocumentUploaded,
    stage: IngestStage,
    reason: FailureReason,
    message: str,
    attempts: int,
) -> DocumentFailed:
    """``documents.failed`` of an upload (the same id on every publication)."""
    return DocumentFailed(
        event_id=outcome_event_id(event.document_id, event.version, "failed"),
        tenant_id=event.tenant_id, document_id=event.document_id, stage=stage,
        reason=reason, message=message[:4000], attempts=attempts,
    )  # fmt: skip


def failed_row_event(row: Any) -> DocumentFailed:
    """``documents.failed`` of a document stored as failed."""
    reason = row["error_reason"] if row["error_reason"] in VALID_REASONS else "internal"
    stage = row["error_stage"] if row["error_stage"] in {s.value for s in IngestStage} else (
        IngestStage.FETCH.value)  # fmt: skip
    return DocumentFailed(
        event_id=outcome_event_id(row["id"], row["version"], "failed"),
        tenant_id=row["tenant_id"], document_id=row["id"], stage=IngestStage(stage),
        reason=FailureReason(reason), message=row["error_message"] or "",
        attempts=row["attempts"],
    )  # fmt: skip
