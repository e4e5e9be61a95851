"""Daily message limits per plan, counted atomically in Postgres (``usage_counters``)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

from lectern_common.db.types import Pool
from lectern_gateway.chat import repository as repo


@dataclass(frozen=True)
class PlanLimits:
    """Limits of one plan: ``hard`` None is unlimited; past ``soft`` answers wait ``delay_s``."""

    hard: int | None
    soft: int | None = None
    delay_s: float = 0.0


@dataclass(frozen=True)
class Verdict:
    """Whether a message may proceed, its count today, and any delay before answering."""

    allowed: bool
    count: int
    delay_s: float
    retry_after_s: int
    #: the UTC day counted
    day: date | None = None


def seconds_to_utc_midnight(now: datetime) -> int:
    """Whole seconds until the next UTC midnight (at least 1)."""
    now = now.astimezone(UTC)
    midnight = datetime.combine(now.date() + timedelta(days=1), datetime.min.time(), tzinfo=UTC)
    return max(1, int((midnight - now).total_seconds() + 0.999))


def verdict_for(count: int | None, limits: PlanLimits, *, now: datetime) -> Verdict:
    """The verdict for the counter's new value (None: the hard limit refused the increment)."""
    if count is None:
        return Verdict(False, limits.hard or 0, 0.0, seconds_to_utc_midnight(now))
    delay = limits.delay_s if limits.soft is not None and count > limits.soft else 0.0
    return Verdict(True, count, delay, 0)


async def count_message(
    *, pool: Pool, tenant_id: str, user_id: str, limits: PlanLimits, now: datetime | None = None
) -> Verdict:
    """Count one message of today against the plan's limits, atomically.

    The increment and the limit check are one statement: the row lock taken by the upsert
    serialises concurrent requests, so they can never push the count past the hard limit.
    """
    now = now or datetime.now(UTC)
    day: date = now.astimezone(UTC).date()
    count = await repo.increment_message_count(
        pool=pool, tenant_id=tenant_id, user_id=user_id, day=day, hard_limit=limits.hard
    )
    if count is not None and limits.hard is not None and count > limits.hard:
        count = None  # a first insert is never limited by the upsert's WHERE; hard == 0
    return dataclasses.replace(verdict_for(count, limits, now=now), day=day)
