"""Reads that a streaming read replica may serve, with the primary as the fallback.

``ReadPools`` holds the primary's pool and, when ``LECTERN_DATABASE_READ_URL`` is set, a
second pool on the replica. Before a read uses the replica it checks, at most once per
``check_every_s``, that the replica answers and that its replay is no more than
``LECTERN_DATABASE_READ_MAX_LAG_S`` behind the primary. Otherwise the read goes to the
primary (logged once per change), and it returns to the replica at the first healthy check.
A read the replica fails to answer (it went away mid-read) is marked down and done again on
the primary, so stopping the replica fails no request.

The lag is measured by WAL position with time: each check samples the primary's flushed
WAL position; the replica's lag is the age of the oldest sample its replay has not reached
(0 when it has replayed them all). An idle primary therefore never makes an up-to-date
replica look old, as ``now() - pg_last_xact_replay_timestamp()`` would.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable
from typing import Any, Literal, TypeVar

import asyncpg

from lectern_common import metrics
from lectern_common.db.pool import close_pool, create_pool
from lectern_common.db.types import Pool
from lectern_common.settings import BaseServiceSettings

log = logging.getLogger(__name__)

T = TypeVar("T")
Target = Literal["replica", "primary"]

#: errors meaning the replica cannot answer now (refused, gone mid-read, shutting down)
REPLICA_DOWN: tuple[type[BaseException], ...] = (
    OSError,
    TimeoutError,
    asyncpg.InterfaceError,  # includes ConnectionDoesNotExistError
    asyncpg.InternalClientError,  # a connection broken in the middle of a protocol step
    asyncpg.PostgresConnectionError,
    asyncpg.CannotConnectNowError,
    asyncpg.exceptions.OperatorInterventionError,  # admin / crash shutdown
    asyncpg.TooManyConnectionsError,
)
#: a standby cancels a read that conflicts with replaying the primary's changes (SQLSTATE
#: 40001, "conflict with recovery"): done again on the primary, the replica stays in use
REPLICA_CONFLICT: tuple[type[BaseException], ...] = (asyncpg.exceptions.SerializationError,)

#: primary WAL positions kept for the lag (one per check: 10 minutes at the default rate)
MAX_SAMPLES = 600


class ReadPools:
    """The pool a read should use: the replica while it is healthy, else the primary."""

    def __init__(
        self,
        *,
        primary: Pool,
        replica: Pool | None = None,
        max_lag_s: float = 5.0,
        check_every_s: float = 1.0,
        probe_timeout_s: float = 1.0,
    ) -> None:
        self.primary = primary
        self.replica = replica
        self.max_lag_s = max_lag_s
        self.check_every_s = check_every_s
        self.probe_timeout_s = probe_timeout_s
        #: reads served per target since start (the ``lectern.db.reads`` counter's values)
        self.served: Counter[str] = Counter()
        self.last_target: Target | None = None
        #: the replica's lag at the last check (None: not measured)
        self.lag_s: float | None = None
        self._healthy: bool | None = None
        self._reason = "not checked"
        self._checked_at = float("-inf")
        self._checking = asyncio.Lock()
        self._samples: deque[tuple[float, int]] = deque(maxlen=MAX_SAMPLES)

    @classmethod
    async def open(
        cls, *, primary: Pool, settings: BaseServiceSettings, **pool_kwargs: Any
    ) -> ReadPools:
        """Read pools for these settings; the replica's pool (``pool_kwargs`` as for the
        primary's) connects lazily, so a replica that is down delays no start-up."""
        replica = None
        if settings.database_read_url:
            replica = await create_pool(
                settings.database_read_url,
                min_size=0,
                max_size=settings.db_pool_max,
                timeout=min(settings.db_connect_timeout_s, 2.0),
                command_timeout=settings.db_command_timeout_s,
                **pool_kwargs,
            )
        return cls(primary=primary, replica=replica, max_lag_s=settings.database_read_max_lag_s)

    async def close(self) -> None:
        """Close the replica's pool (the primary's belongs to its owner)."""
        if self.replica is not None:
            await close_pool(self.replica)

    @property
    def replica_healthy(self) -> bool:
        """Whether the last check found the replica usable."""
        return bool(self._healthy)

    async def choose(self) -> tuple[Target, Pool]:
        """The target and pool for a read now (checking the replica when the last check is
        older than ``check_every_s``; a read arriving during a check uses the last verdict)."""
        if self.replica is None:
            return "primary", self.primary
        if (
            time.monotonic() - self._checked_at >= self.check_every_s
            and not self._checking.locked()
        ):
            async with self._checking:
                if time.monotonic() - self._checked_at >= self.check_every_s:
                    healthy, reason = await self._check()
                    self._checked_at = time.monotonic()
                    self._set_health(healthy, reason)
        return ("replica", self.replica) if self._healthy else ("primary", self.primary)

    async def run(self, read: Callable[[Pool], Awaitable[T]]) -> T:
        """``read(pool)`` on the chosen pool; again on the primary if the replica fails it."""
        target, pool = await self.choose()
        try:
            result = await read(pool)
        except (*REPLICA_DOWN, *REPLICA_CONFLICT) as exc:
            if target != "replica":
                raise
            if isinstance(exc, REPLICA_DOWN):
                self._set_health(False, f"{type(exc).__name__}: {exc}")
                self._checked_at = time.monotonic()
            else:
                log.info("a read conflicted with recovery on the replica; done on the primary")
            target = "primary"
            result = await read(self.primary)
        self._count(target)
        return result

    def _count(self, target: Target) -> None:
        self.served[target] += 1
        self.last_target = target
        metrics.DB_READS.add(1, {"target": target})

    def _set_health(self, healthy: bool, reason: str) -> None:
        if healthy and self._healthy is not True:
            log.info("reads go to the read replica (%s)", reason)
        elif not healthy and self._healthy is not False:
            log.warning("reads go to the primary: the read replica is %s", reason)
        self._healthy = healthy
        self._reason = reason

    async def _check(self) -> tuple[bool, str]:
        """(usable, why) for the replica: it answers and its lag is within the bound."""
        assert self.replica is not None
        now = time.monotonic()
        try:
            async with asyncio.timeout(self.probe_timeout_s):
                primary_lsn = await self._primary_lsn()
                if primary_lsn is not None and (
                    not self._samples or primary_lsn > self._samples[-1][1]
                ):
                    self._samples.append((now, primary_lsn))
                row = await self.replica.fetchrow(
                    "SELECT pg_is_in_recovery() AS standby, "
                    "pg_wal_lsn_diff(pg_last_wal_replay_lsn(), '0/0')::bigint AS replayed"
                )
        except Exception as exc:  # whatever stops the probe makes the replica unusable now
            return False, f"unreachable ({type(exc).__name__}: {exc})"
        if not row["standby"]:
            self._samples.clear()  # a primary (promoted, or the same server): nothing to lag
            self.lag_s = 0.0
            return True, "not in recovery"
        replayed = row["replayed"]
        if replayed is None:
            return False, "not replaying yet"
        while self._samples and self._samples[0][1] <= replayed:
            self._samples.popleft()
        self.lag_s = time.monotonic() - self._samples[0][0] if self._samples else 0.0
        metrics.REPLICA_LAG.set(self.lag_s)
        if self.lag_s > self.max_lag_s:
            return False, f"{self.lag_s:.1f} s behind (bound {self.max_lag_s:g} s)"
        return True, f"{self.lag_s:.1f} s behind"

    async def _primary_lsn(self) -> int | None:
        """The primary's flushed WAL position (None when the primary does not answer: the
        replica is then judged on the positions sampled before)."""
        try:
            value = await self.primary.fetchval(
                "SELECT pg_wal_lsn_diff(pg_current_wal_flush_lsn(), '0/0')::bigint"
            )
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            log.debug("primary WAL position: %s", exc)
            return None
        return None if value is None else int(value)
