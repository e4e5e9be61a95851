"""BM25 re-weighting: a chunk's weights freeze the tenant's average chunk length (avgdl) when
the chunk is indexed, so as a library grows or shrinks its older chunks' weights drift from
the live average. Ingest, which owns the chunks and the BM25 statistics, recomputes the
weights of every tenant whose chunk count moved by more than a share since its last
re-weighting; a transaction-scoped advisory lock per tenant keeps replicas from doing the same
tenant twice."""

from __future__ import annotations

import asyncio
import logging

from lectern_common.db.types import Pool
from lectern_ingest import repository

log = logging.getLogger(__name__)


async def reweight_stale(pool: Pool, *, drift: float) -> dict[str, int]:
    """Re-weight every tenant whose statistics drifted; returns chunks re-weighted each."""
    done: dict[str, int] = {}
    async with pool.acquire() as conn:
        for tenant_id in await repository.stale_tenants(conn, drift=drift):
            count = await repository.reweight(conn, tenant_id=tenant_id)
            if count is not None:
                done[tenant_id] = count
    return done


async def reweight_every(pool: Pool, *, every_s: float, drift: float) -> None:
    """``reweight_stale`` every ``every_s`` seconds until cancelled (a failed pass is logged
    and tried again at the next interval)."""
    while True:
        await asyncio.sleep(every_s)
        try:
            done = await reweight_stale(pool, drift=drift)
        except Exception:
            log.exception("BM25 re-weighting failed; retrying next interval")
            continue
        if done:
            log.info("re-weighted BM25 for %d tenant(s): %s", len(done), done)
