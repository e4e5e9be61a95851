"""How one delivery ends: a document's failure (stage and reason), the message's settlement
(ack or retry after a delay), and the progress events published meanwhile."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from lectern_common.backoff import backoff_delay
from lectern_common.errors import LecternError
from lectern_common.events import (
    DocumentIndexed,
    DocumentProgress,
    DocumentUploaded,
    Event,
    FailureReason,
    IngestStage,
    outcome_event_id,
)
from lectern_common.events.deadletter import ParkReason

log = logging.getLogger(__name__)

Publish = Callable[[Event], Awaitable[None]]
VALID_REASONS = {r.value for r in FailureReason}


class IngestFailure(LecternError):
    """Raised inside the pipeline for a permanent failure with its stage and reason."""

    def __init__(self, message: str, *, stage: IngestStage, reason: FailureReason) -> None:
        super().__init__(message, reason=reason.value)
        self.stage = stage
        self.failure = reason


@dataclass(frozen=True)
class Outcome:
    """How to settle the message: ack (``retry_after`` None) or nack with a delay."""

    status: str
    retry_after: float | None = None
    #: set when the message is given up on after its deliveries: the handler parks a copy
    gave_up: ParkReason | None = None


def retry_delay(*, deliveries: int, base_s: float, max_s: float) -> float:
    """Exponential back-off for the next delivery (base, 2·base, 4·base ... capped)."""
    return backoff_delay(deliveries, first_s=base_s, max_s=max_s)


def failure_reason(error: LecternError, default: FailureReason) -> FailureReason:
    """The event's reason for an error: its own reason when it is a known one."""
    if error.reason in VALID_REASONS:
        return FailureReason(error.reason)
    return default


def similarity_from_distance(distance: int) -> float:
    """SimHash similarity (share of equal bits of 64) from a Hamming distance."""
    return 1.0 - distance / 64.0


@dataclass
class Progress:
    """Throttled ``documents.progress`` events of one document, none before ``after_s``."""

    event: DocumentUploaded
    publish: Publish
    interval_s: float
    stage: IngestStage = IngestStage.FETCH
    #: quiet for this long after the document's start: a short one has its outcome event only
    after_s: float = 0.0
    _started: float = field(default_factory=time.monotonic)
    _last: float = 0.0
    _last_key: tuple[str, int, int] = ("", -1, -1)

    async def report(
        self, stage: IngestStage, done: int, total: int, unit: str = "pages", *, force: bool = False
    ) -> None:
        """Publish progress unless one was sent very recently (stage changes always go out)
        or the document started less than ``after_s`` ago."""
        changed = stage != self.stage
        self.stage = stage
        now = time.monotonic()
        if now - self._started < self.after_s:
            return
        key = (stage.value, done, total)
        if key == self._last_key:
            return
        if not (force or changed or now - self._last >= self.interval_s):
            return
        self._last = now
        self._last_key = key
        try:
            await self.publish(
                DocumentProgress(
                    tenant_id=self.event.tenant_id, document_id=self.event.document_id,
                    stage=stage, done=done, total=max(total, done), unit=unit,  # type: ignore[arg-type]
                )
            )  # fmt: skip
        except Exception as exc:  # progress is best effort; the outcome event is what counts
            log.warning("progress event for %s not published: %s", self.event.document_id, exc)


def default_reason(stage: IngestStage) -> FailureReason:
    return {
        IngestStage.FETCH: FailureReason.OBJECT_MISSING,
        IngestStage.EXTRACT: FailureReason.CORRUPT,
        IngestStage.CHUNK: FailureReason.INTERNAL,
        IngestStage.ENRICH: FailureReason.INTERNAL,
        IngestStage.EMBED: FailureReason.EMBEDDING_FAILED,
        IngestStage.STORE: FailureReason.STORE_FAILED,
    }[stage]


def indexed_event(row: Any, *, duration_ms: float) -> DocumentIndexed:
    """``documents.indexed`` of a stored document (the same id on every publication)."""
    return DocumentIndexed(
        event_id=outcome_event_id(row["id"], row["version"], "indexed"),
        tenant_id=row["tenant_id"], document_id=row["id"], version=row["version"],
        page_count=row["page_count"] or 0, skipped_pages=row["skipped_pages"],
        chunk_count=row["chunk_count"], qa_count=row["qa_count"],
        language=row["language"], enriched=row["enriched"],
        near_duplicate_of=row["near_duplicate_of"], duplicate_of=row["duplicate_of"],
        duration_ms=duration_ms, title=row["title"] or None,
        ts_config=str(row["ts_config"]) if row["ts_config"] else None,
        content_sha256=row["content_sha256"], simhash=row["simhash"],
        near_duplicate_score=row["near_duplicate_score"],
        enrichment_note=row["enrichment_note"],
    )  # fmt: skip
