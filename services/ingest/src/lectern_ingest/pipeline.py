"""Extraction and chunking in a producer thread that hands chunk batches to the event loop
(which embeds them), the chunk records with their deterministic ids, and titles."""

from __future__ import annotations

import asyncio
import contextvars
import hashlib
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from lectern_common.embeddings import Embedder
from lectern_common.events import (
    DocumentUploaded,
    FailureReason,
    IngestStage,
)
from lectern_ingest import dedup, language
from lectern_ingest import repository as repo
from lectern_ingest.chunking import (
    ChunkDraft,
    ChunkingConfig,
    chunk_units,
    structural_prefix,
)
from lectern_ingest.config import Settings
from lectern_ingest.extract import Extraction, Unit, extract
from lectern_ingest.outcomes import IngestFailure, Progress, similarity_from_distance
from lectern_ingest.titles import heading_title, usable_title

#: seconds spent embedding the document this task is working on
EMBED_TIMER: contextvars.ContextVar[list[float]] = contextvars.ContextVar("embed_timer")

DONE = object()


def chunk_id(document_id: uuid.UUID, kind: str, index: int) -> uuid.UUID:
    """Deterministic chunk id: the same document, kind and index always give the same id."""
    return uuid.uuid5(document_id, f"{kind}:{index}")


@dataclass
class Produced:
    """What the producer thread learnt besides the chunks."""

    page_count: int | None = None
    total_units: int = 0
    units_done: int = 0
    skipped_pages: int = 0
    content: dedup.TextHasher = field(default_factory=dedup.TextHasher)
    simhash: dedup.SimHasher = field(default_factory=dedup.SimHasher)
    #: every unit was read (content and simhash are final); set by the producer thread
    extracted: bool = False
    sample: list[str] = field(default_factory=list)
    sample_chars: int = 0
    #: the document's own title (real metadata, else its largest or first top heading)
    title: str | None = None


@dataclass
class PipelineResult:
    """A document ready to store."""

    chunks: list[repo.ChunkRecord]
    embeddings: np.ndarray[Any, Any]
    indexed: repo.IndexedDocument
    embed_s: float = 0.0
    #: chunk vectors taken from the replaced version (same embedded text) instead of embedding
    reused_embeddings: int = 0
    #: an indexed document with the same cleaned text, found before embedding everything
    duplicate_of: uuid.UUID | None = None


class Producer:
    """Extraction and chunking in a thread, handing chunk batches to the event loop."""

    def __init__(
        self,
        *,
        path: Path,
        mime: str,
        password: str | None,
        title: str | None,
        config: ChunkingConfig,
        count_tokens: Callable[[str], int],
        batch_size: int,
        loop: asyncio.AbstractEventLoop | None,
        queue: asyncio.Queue[Any] | None,
        max_chunks: int,
    ) -> None:
        self.path = path
        self.mime = mime
        self.password = password
        #: the title the uploader gave (None: the document's own, when it has one)
        self.title = title
        self.config = config
        self.count_tokens = count_tokens
        self.batch_size = batch_size
        self.max_chunks = max_chunks
        self.loop = loop
        self.queue = queue
        self.stats = Produced()
        self.stop = threading.Event()
        self.stage = IngestStage.EXTRACT
        self.thread = threading.Thread(target=self._run, name="ingest-producer", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def _put(self, item: Any) -> None:
        assert self.loop is not None, "collect() hands nothing over"
        assert self.queue is not None
        while not self.stop.is_set():
            future = asyncio.run_coroutine_threadsafe(self.queue.put(item), self.loop)
            try:
                future.result(timeout=1.0)
                return
            except TimeoutError:
                future.cancel()

    def _units(self, extraction: Extraction) -> Iterator[Unit]:
        self.stats.total_units = extraction.total_units
        units = extraction.units()
        while not self.stop.is_set():
            # the stage is extract while the extractor runs (it raises no_text at its end)
            self.stage = IngestStage.EXTRACT
            unit = next(units, None)
            if unit is None:
                return
            if self.stats.title is None and self.stats.units_done < 3:
                self.stats.title = heading_title(unit)
            text = "\n".join(block.text for block in unit.blocks)
            self.stats.content.update(text)
            self.stats.simhash.update(text)
            if self.stats.sample_chars < 20_000:
                self.stats.sample.append(text)
                self.stats.sample_chars += len(text)
            self.stats.units_done += 1
            self.stage = IngestStage.CHUNK
            yield unit

    def _drafts(self) -> Iterator[ChunkDraft]:
        """Extract and chunk, yielding each chunk with its structural prefix; raises
        ``IngestFailure`` past ``max_chunks``. ``stats`` is final once it is exhausted."""
        with extract(self.path, mime=self.mime, password=self.password) as extraction:
            self.stats.page_count = extraction.page_count
            self.stats.title = usable_title(extraction.title)
            drafts = chunk_units(
                self._units(extraction), config=self.config, count_tokens=self.count_tokens
            )
            for made, draft in enumerate(drafts, start=1):
                if self.stop.is_set():
                    return
                if made > self.max_chunks:
                    raise IngestFailure(
                        f"the document makes more than {self.max_chunks} chunks (stopped "
                        f"at page {draft.page_start or '?'}); split it into parts",
                        stage=IngestStage.CHUNK, reason=FailureReason.TOO_LARGE,
                    )  # fmt: skip
                draft.context_prefix = structural_prefix(
                    self.title or self.stats.title, draft.section_path
                )
                yield draft
            self.stats.skipped_pages = len(extraction.summary.skipped_pages)
            if not self.stop.is_set():
                self.stats.extracted = True

    def collect(self) -> list[ChunkDraft]:
        """Every chunk of the document, extracted in the calling thread (a small document's
        whole text at once, without the hand-over to the event loop)."""
        return list(self._drafts())

    def _run(self) -> None:
        try:
            batch: list[ChunkDraft] = []
            for draft in self._drafts():
                batch.append(draft)
                if len(batch) >= self.batch_size:
                    self._put(batch)
                    batch = []
            if batch:
                self._put(batch)
            self._put(DONE)
        except BaseException as exc:  # handed to the event loop, which decides the outcome
            self._put(exc)


async def report_units(
    progress: Progress, stats: Produced, stage: IngestStage, *, force: bool = False
) -> None:
    unit = "pages" if stats.page_count else "units"
    await progress.report(stage, stats.units_done, stats.total_units, unit, force=force)


async def report_embedded(progress: Progress, stats: Produced, batch: list[ChunkDraft]) -> None:
    """Pages (or slides) whose chunks are embedded so far; extraction runs ahead of this."""
    reached = [d.page_end or d.slide or 0 for d in batch]
    if stats.page_count and max(reached, default=0) > 0:
        await progress.report(IngestStage.EMBED, max(reached), stats.page_count, "pages")
    else:
        await report_units(progress, stats, IngestStage.EMBED)


def thread_safe_counter(embedder: Embedder) -> Callable[[str], int]:
    """The embedder's token count, safe to call while the embedder encodes in another thread.

    A Hugging Face fast tokenizer is mutated by every padded/truncated encode call, so the
    chunker thread counting with the embedder's own instance can fail with "Already
    borrowed"; a clone of the same tokenizer gives identical counts without sharing state.
    """
    backend = getattr(getattr(embedder, "tokenizer", None), "backend_tokenizer", None)
    if backend is None:
        return embedder.count_tokens
    from tokenizers import Tokenizer

    clone = Tokenizer.from_str(backend.to_str())
    clone.no_truncation()
    clone.no_padding()
    return lambda text: len(clone.encode(text).ids)


def chunking_config(settings: Settings, *, max_tokens: int) -> ChunkingConfig:
    values: dict[str, int] = {"max_tokens": max_tokens}
    for name in ("target", "overlap", "min"):
        value = getattr(settings, f"chunk_{name}_tokens")
        if value is not None:
            values[f"{name}_tokens"] = value
    return ChunkingConfig(**values)


def given_title(event: DocumentUploaded) -> str | None:
    """The title the uploader chose; None when it is only the file name (the gateway's
    default), so the document's own title may replace it."""
    title = event.metadata.title
    if not title or title in (event.filename, Path(event.filename).stem):
        return None
    return title


def chunk_record(document_id: uuid.UUID, index: int, draft: ChunkDraft) -> repo.ChunkRecord:
    kind = getattr(draft, "kind", "text") or "text"
    return repo.ChunkRecord(
        id=chunk_id(document_id, kind, index), chunk_index=index, kind=kind,
        parent_chunk_id=None, text=draft.text, context_prefix=draft.context_prefix,
        section_path=list(getattr(draft, "section_path", []) or []),
        chapter=getattr(draft, "chapter", None),
        page_start=getattr(draft, "page_start", None), page_end=getattr(draft, "page_end", None),
        slide=getattr(draft, "slide", None), time_start=getattr(draft, "time_start", None),
        time_end=getattr(draft, "time_end", None),
        token_count=int(getattr(draft, "token_count", 0) or 0),
        content_hash=hashlib.sha256(draft.text.encode("utf-8")).hexdigest(),
    )  # fmt: skip


def near_duplicate(
    nearest: tuple[uuid.UUID, int] | None, threshold: float
) -> tuple[uuid.UUID, float] | None:
    """The nearest document (id, SimHash similarity) when it is similar enough to be flagged."""
    if nearest is None:
        return None
    score = similarity_from_distance(nearest[1])
    return (nearest[0], score) if score > threshold else None


def describe(
    event: DocumentUploaded,
    stats: Produced,
    records: list[repo.ChunkRecord],
    *,
    lang: str | None,
    near: tuple[uuid.UUID, float] | None,
    enriched: bool = False,
    note: str | None = "no Gemini key",
) -> repo.IndexedDocument:
    """What the document's row records once its chunks are stored."""
    return repo.IndexedDocument(
        page_count=stats.page_count, skipped_pages=stats.skipped_pages,
        chunk_count=sum(1 for r in records if r.kind != "qa"),
        qa_count=sum(1 for r in records if r.kind == "qa"),
        language=lang, ts_config=language.ts_config_for(lang),
        content_sha256=stats.content.hexdigest(), simhash=stats.simhash.digest(),
        near_duplicate_of=near[0] if near else None,
        near_duplicate_score=near[1] if near else None,
        enriched=enriched, enrichment_note=note,
        title=None if given_title(event) else stats.title,
    )  # fmt: skip
