"""Assignment and Grade Services: the worker posts queued scores (``lti_score_outbox``) to
their line items (``<lineitem>/scores``, ``application/vnd.ims.lis.v1.score+json``) with an
access token for the score scope. A platform that is away (a network error, 5xx, 408, 429)
gets the score again later, backing off along ``lti_score_retry_schedule_s``; only a refusal
(another 4xx) or ``lti_score_give_up_s`` ends it as failed, and failed scores stay listed for
the tenant's admins (``GET /v1/lti/scores``)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from lectern_common.db.types import Pool
from lectern_gateway.background import BackgroundLoop
from lectern_gateway.config import Settings
from lectern_gateway.lti import claims
from lectern_gateway.lti import repository as repo
from lectern_gateway.lti.platform import PlatformClient, PlatformError

log = logging.getLogger(__name__)

BATCH = 20


def scores_url(lineitem_url: str) -> str:
    """The line item's scores endpoint: ``/scores`` after its path, its query kept."""
    parts = urlsplit(lineitem_url)
    return urlunsplit(parts._replace(path=parts.path.rstrip("/") + "/scores"))


def retry_delay(attempts: int, schedule: list[float]) -> float:
    """The wait after the ``attempts``-th failed attempt (the schedule's last repeats)."""
    if not schedule:
        return 60.0
    return schedule[min(attempts, len(schedule)) - 1] if attempts > 0 else schedule[0]


class ScoreWorker(BackgroundLoop):
    """Posts due scores until stopped (one per gateway worker process; rows are claimed
    ``FOR UPDATE SKIP LOCKED`` with a lease, so workers never post one score at once)."""

    task_name = "lectern-lti-scores"

    def __init__(self, *, pool: Pool, settings: Settings, platforms: PlatformClient) -> None:
        super().__init__()
        self.pool = pool
        self.settings = settings
        self.platforms = platforms

    async def run(self) -> None:
        """Post due scores, then wait for the next poll (or a wake)."""
        while not self.stopping:
            claimed = 0
            try:
                claimed = await self.post_due()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("posting LTI scores failed; retrying next interval")
            if claimed < BATCH and not self.stopping:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.settings.lti_score_poll_interval_s):
                        await self.wake.wait()
                self.wake.clear()

    async def post_due(self) -> int:
        """Claim due scores and post them; how many were claimed."""
        async with self.pool.acquire() as conn, conn.transaction():
            rows = await repo.claim_scores(
                conn, limit=BATCH, lease_s=self.settings.lti_http_timeout_s * 3 + 30
            )
        await asyncio.gather(*(self.attempt(row) for row in rows), return_exceptions=True)
        return len(rows)

    async def attempt(self, row: dict[str, Any]) -> None:
        """One try at one score, and its outcome recorded."""
        try:
            await self.post(row)
        except PlatformError as exc:
            age_s = (datetime.now(UTC) - row["created_at"]).total_seconds()
            if not exc.retryable or age_s > self.settings.lti_score_give_up_s:
                log.warning("score %s for %s failed: %s", row["id"], row["lineitem_url"], exc)
                await repo.score_failed(self.pool, score_id=row["id"], error=exc.message)
                return
            delay = retry_delay(int(row["attempts"]) + 1, self.settings.lti_score_retry_schedule_s)
            await repo.score_retry(self.pool, score_id=row["id"], delay_s=delay, error=exc.message)
            return
        await repo.score_sent(self.pool, score_id=row["id"])

    async def post(self, row: dict[str, Any]) -> None:
        """POST the score (a refused token is fetched again once)."""
        registration = await repo.registration_by_id(self.pool, row["registration_id"])
        if registration is None:  # deleted meanwhile: its rows went with it
            return
        url = scores_url(row["lineitem_url"])
        for fresh in (False, True):
            token = await self.platforms.access_token(self.pool, registration, claims.SCOPE_SCORE)
            response = await self.platforms.send(
                "POST",
                url,
                json=row["score"],
                headers={
                    "Content-Type": claims.SCORE_MEDIA_TYPE,
                    "Authorization": f"Bearer {token}",
                },
            )
            if response.status_code == 401 and not fresh:
                self.platforms.forget_token(registration["id"], claims.SCOPE_SCORE)
                continue
            if 200 <= response.status_code < 300:
                return
            status = response.status_code
            raise PlatformError(
                f"{url} answered HTTP {status}: {response.text[:200]}",
                retryable=status >= 500 or status in (401, 408, 429),
                status=status,
            )
