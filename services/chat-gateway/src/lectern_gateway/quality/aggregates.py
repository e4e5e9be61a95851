"""The quality dashboard's daily aggregates, updated as turns complete and answers are
flagged (inside the caller's transaction), so the dashboard reads a few rows per day.

Latencies are kept as counts per bucket (``BUCKETS_MS``): percentiles come from the
cumulative counts, reported as the bucket's upper bound.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any

from lectern_common.db.types import Connection
from lectern_gateway.quality import repository as repo

#: upper bounds of the latency buckets, in milliseconds (the last one is open)
BUCKETS_MS: tuple[float, ...] = (
    50, 100, 200, 300, 500, 750, 1000, 1500, 2000, 3000, 5000, 7500, 10000, 15000, 30000,
    float("inf"),
)  # fmt: skip


def bucket_counts(value_ms: float | None) -> list[int]:
    """One count in the bucket of ``value_ms`` (all zeros for None)."""
    counts = [0] * len(BUCKETS_MS)
    if value_ms is not None:
        counts[next(i for i, bound in enumerate(BUCKETS_MS) if value_ms <= bound)] = 1
    return counts


def percentile(counts: Sequence[int], q: float) -> float | None:
    """The bucket bound at quantile ``q`` of bucketed counts (None without any)."""
    total = sum(counts)
    if total == 0:
        return None
    wanted = q * total
    seen = 0
    for bound, count in zip(BUCKETS_MS, counts, strict=False):
        seen += count
        if seen >= wanted and count:
            return bound if bound != float("inf") else BUCKETS_MS[-2]
    return BUCKETS_MS[-2]


@dataclass(frozen=True)
class Dimensions:
    """Where a turn counts: its day, persona, subject and class ('' for none)."""

    tenant_id: str
    day: date
    persona: str = ""
    subject: str = ""
    class_id: str = ""

    @classmethod
    def of(
        cls, tenant_id: str, *, persona: str | None, subject: str | None, class_id: str | None
    ) -> Dimensions:
        """Today's dimensions of a session's persona, subject and class."""
        return cls(
            tenant_id=tenant_id,
            day=datetime.now(UTC).date(),
            persona=persona or "",
            subject=(subject or "").lower(),
            class_id=class_id or "",
        )

    @classmethod
    def of_session(cls, tenant_id: str, session: dict[str, Any]) -> Dimensions:
        """Today's dimensions of a ``chat_sessions`` row."""
        return cls.of(
            tenant_id, persona=session.get("persona_slug"), subject=session.get("subject"),
            class_id=session.get("class_id"),
        )  # fmt: skip

    def key(self) -> list[Any]:
        return [self.tenant_id, self.day, self.persona, self.subject, self.class_id]


async def record_turn(
    conn: Connection,
    where: Dimensions,
    *,
    band: str,
    cited_documents: Sequence[uuid.UUID],
    fallback: bool,
    ttft_ms: float | None,
    retrieval_ms: float | None,
    gap_topic: str | None = None,
) -> None:
    """Count one answered question (call inside the transaction that stores it)."""
    bands = [int(band == b) for b in ("high", "medium", "low", "gap")]
    await repo.count_turn(
        pool=conn, key=where.key(), bands=bands, with_citations=int(bool(cited_documents)),
        fallback=int(fallback), ttft_buckets=bucket_counts(ttft_ms),
        retrieval_buckets=bucket_counts(retrieval_ms),
    )  # fmt: skip
    if band == "gap" and gap_topic:
        await repo.count_gap_topic(pool=conn, key=where.key(), topic=gap_topic[:200])
    for document_id, count in _counted(cited_documents).items():
        await repo.count_citations(
            pool=conn, key=where.key(), document_id=document_id, citations=count
        )


async def record_flag(conn: Connection, where: Dimensions) -> None:
    """Count one flagged answer."""
    await repo.count_flag(pool=conn, key=where.key())


def _counted(documents: Sequence[uuid.UUID]) -> dict[uuid.UUID, int]:
    counts: dict[uuid.UUID, int] = {}
    for document_id in documents:
        counts[document_id] = counts.get(document_id, 0) + 1
    return counts
