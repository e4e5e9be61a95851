"""Garbage collection: stored bytes and chunks that no live document needs any more.

What it removes, each part run by the service that owns its rows (issue 61):

- **objects** in the ``lectern-documents`` bucket that no document row names: an upload
  whose row never committed, bytes a failed clean-up left after a delete, a replaced version
  or a duplicate, and PDF passwords whose document is finished. The gateway stores the
  uploads and owns ``documents``: its worker collects these (``objects=True``);
- **chunks** of documents that are deleted, failed or duplicates (archived and superseded
  documents keep theirs: they can be restored), by ingest's record of each document
  (``ingest_documents``): ingest collects these (``chunks=True``).

Objects younger than ``grace_s`` are never touched (an upload stores its bytes before its row
commits). After removing, it looks again and reports what it found, removed and verified
gone; one collector runs at a time in the cluster (an advisory lock).
"""

from __future__ import annotations

import logging
import re
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from lectern_common import objects
from lectern_common.broker import DOCUMENTS_BUCKET
from lectern_common.db.types import Connection, Pool

log = logging.getLogger(__name__)

GC_LOCK_ID = 0x1EC7E_9C
_NAME = re.compile(r"^(?P<doc>[0-9a-f-]{36})/(?P<version>\d+)(?P<password>\.password)?$")
#: document statuses whose chunks are garbage
DEAD_STATUSES = ("deleted", "failed", "duplicate")
#: document statuses whose stored bytes are still needed (a re-index, a re-fetch, a restore)
LIVE_OBJECT_STATUSES = ("pending", "processing", "indexed", "archived", "superseded")
#: ... and whose PDF password (only while it is being indexed)
PASSWORD_STATUSES = ("pending", "processing")


@dataclass
class GcReport:
    """What one collection found, removed and verified gone."""

    objects_found: int = 0
    objects_removed: int = 0
    objects_left: int = 0
    chunks_found: int = 0
    chunks_removed: int = 0
    chunks_left: int = 0
    skipped_young: int = 0
    dry_run: bool = False
    ran: bool = True
    removed_names: list[str] = field(default_factory=list)

    @property
    def verified(self) -> bool:
        """Nothing that was removed is still there."""
        return self.dry_run or (self.objects_left == 0 and self.chunks_left == 0)


def _mtime(info: Any) -> datetime | None:
    raw = getattr(info, "mtime", None)
    if not raw:
        return None
    try:  # nanoseconds from the server: keep microseconds
        text = str(raw).rstrip("Z")
        whole, _, fraction = text.partition(".")
        return datetime.fromisoformat(f"{whole}.{(fraction + '000000')[:6]}").replace(tzinfo=UTC)
    except ValueError:
        return None


async def stored_objects(js: Any) -> list[Any]:
    """The objects in the documents bucket (``ObjectInfo``), none when it does not exist."""
    from nats.js.errors import NotFoundError as NatsNotFoundError

    bucket = await js.object_store(DOCUMENTS_BUCKET)
    try:
        return [info for info in await bucket.list(ignore_deletes=True) if not info.deleted]
    except NatsNotFoundError:
        return []


async def _needed(conn: Connection, names: list[str]) -> set[str]:
    """The object names among ``names`` a document still needs."""
    parsed = [(n, _NAME.match(n)) for n in names]
    ids = sorted({uuid.UUID(m["doc"]) for _, m in parsed if m})
    rows = await conn.fetch(
        "SELECT id, status, object_name FROM documents WHERE id = ANY($1::uuid[])", ids
    )
    by_id = {r["id"]: r for r in rows}
    needed: set[str] = set()
    for name, match in parsed:
        if match is None:
            needed.add(name)  # not Lectern's naming: not ours to remove
            continue
        row = by_id.get(uuid.UUID(match["doc"]))
        if row is None or row["object_name"] is None:
            continue
        base = name.removesuffix(".password")
        wanted = LIVE_OBJECT_STATUSES if not match["password"] else PASSWORD_STATUSES
        if base == row["object_name"] and row["status"] in wanted:
            needed.add(name)
    return needed


async def _dead_chunks(conn: Connection) -> int:
    return int(
        await conn.fetchval(
            "SELECT count(*) FROM chunks c JOIN ingest_documents d ON d.id = c.document_id "
            "WHERE d.status = ANY($1::text[])",
            list(DEAD_STATUSES),
        )
    )


async def collect(
    pool: Pool,
    js: Any,
    *,
    grace_s: float = 3600.0,
    dry_run: bool = False,
    objects: bool = True,
    chunks: bool = True,
) -> GcReport:
    """Find and remove orphaned ``objects`` and dead ``chunks``; returns verified counts."""
    report = GcReport(dry_run=dry_run)
    # one lock per part: the gateway's worker and ingest collect theirs side by side
    keys = [GC_LOCK_ID + i for i, part in enumerate((objects, chunks)) if part]
    async with pool.acquire() as lock:
        held = []
        try:
            for key in keys:
                if not await lock.fetchval("SELECT pg_try_advisory_lock($1)", key):
                    report.ran = False
                    return report
                held.append(key)
            if objects:
                await _collect_objects(pool, js, report, grace_s=grace_s)
            if chunks:
                await _collect_chunks(pool, report)
            _log(report)
        finally:
            for key in held:
                await lock.execute("SELECT pg_advisory_unlock($1)", key)
    return report


async def collect_every(
    pool: Pool, js: Any, *, every_s: float, grace_s: float, objects: bool, chunks: bool
) -> None:
    """Collect every ``every_s`` seconds (the first after one interval), for ever."""
    import asyncio

    while True:
        await asyncio.sleep(every_s)
        try:
            await collect(pool, js, grace_s=grace_s, objects=objects, chunks=chunks)
        except Exception:
            log.exception("garbage collection failed; retrying next interval")


async def _collect_objects(pool: Pool, js: Any, report: GcReport, *, grace_s: float) -> None:
    cutoff = datetime.now(UTC) - timedelta(seconds=grace_s)
    stored = await stored_objects(js)
    old = [i for i in stored if (_mtime(i) or datetime.now(UTC)) < cutoff]
    report.skipped_young = len(stored) - len(old)
    async with pool.acquire() as conn:
        needed = await _needed(conn, [i.name for i in old])
    orphans = sorted(i.name for i in old if i.name not in needed)
    report.objects_found = len(orphans)
    if report.dry_run:
        report.removed_names = orphans
        return
    for name in orphans:
        if await objects.delete_object(js, name=name):
            report.objects_removed += 1
            report.removed_names.append(name)
    left = {i.name for i in await stored_objects(js)}
    report.objects_left = len(left & set(orphans))


async def _collect_chunks(pool: Pool, report: GcReport) -> None:
    async with pool.acquire() as conn:
        report.chunks_found = await _dead_chunks(conn)
        if report.dry_run:
            return
        status = await conn.execute(
            "DELETE FROM chunks c USING ingest_documents d WHERE d.id = c.document_id "
            "AND d.status = ANY($1::text[])",
            list(DEAD_STATUSES),
        )
        report.chunks_removed = int(status.split()[-1])
        report.chunks_left = await _dead_chunks(conn)


def _log(report: GcReport) -> None:
    if report.dry_run:
        return
    log.info(
        "garbage collection: %d of %d orphaned objects and %d of %d dead chunks removed "
        "(%d objects, %d chunks left; %d young objects skipped)",
        report.objects_removed, report.objects_found, report.chunks_removed, report.chunks_found,
        report.objects_left, report.chunks_left, report.skipped_young,
    )  # fmt: skip
