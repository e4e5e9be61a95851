"""Garbage collection of stored files and chunks no live document needs, on the real NATS
object store and Postgres, through the function the gateway's worker (files) and ingest
(chunks) schedule and through `lectern gc`."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from lectern_common import objects
from lectern_common.broker import DOCUMENTS_BUCKET, ensure_streams
from lectern_common.gc import collect

pytestmark = pytest.mark.integration


async def _document(pool: Any, tenant_id: str, status: str) -> uuid.UUID:
    document_id = uuid.uuid4()
    name = objects.object_name(document_id, 1)
    await pool.execute(
        "INSERT INTO documents (id, tenant_id, title, filename, mime_type, size_bytes, "
        "file_sha256, uploaded_by, status, object_name) "
        "VALUES ($1, $2, 't', 'f.txt', 'text/plain', 1, 'x', 'u', $3, $4)",
        document_id, tenant_id, status, name,
    )  # fmt: skip
    # and ingest's record of it (the chunks are collected by it; the files by the row)
    await pool.execute(
        "INSERT INTO ingest_documents (id, tenant_id, status, object_name) VALUES ($1, $2, $3, $4)",
        document_id, tenant_id, status, name,
    )  # fmt: skip
    return document_id


async def _chunks(pool: Any, tenant_id: str, document_id: uuid.UUID, count: int) -> None:
    """Chunks left behind by a document that is no longer live (a crash, an old release)."""
    for index in range(count):
        await pool.execute(
            "INSERT INTO chunks (id, document_id, tenant_id, chunk_index, text, token_count, "
            "embedding, content_hash) VALUES ($1, $2, $3, $4, 'left over', 2, $5, 'h')",
            uuid.uuid4(), document_id, tenant_id, index, np.ones(384, dtype=np.float32),
        )  # fmt: skip


async def _names(js: Any) -> set[str]:
    bucket = await js.object_store(DOCUMENTS_BUCKET)
    return {i.name for i in await bucket.list(ignore_deletes=True) if not i.deleted}


async def test_orphaned_files_and_dead_chunks_are_removed_and_verified(
    db_pool: Any, jetstream: Any, tenant_id: str, nats_url: str, database_url: str
) -> None:
    await ensure_streams(jetstream)
    live = await _document(db_pool, tenant_id, "indexed")
    archived = await _document(db_pool, tenant_id, "archived")
    deleted = await _document(db_pool, tenant_id, "deleted")
    failed = await _document(db_pool, tenant_id, "failed")
    keep = [objects.object_name(live, 1), objects.object_name(archived, 1)]
    orphans = [
        objects.object_name(uuid.uuid4(), 1),  # an upload whose row never committed
        objects.object_name(deleted, 1),  # a delete whose clean-up failed
        objects.object_name(live, 1) + ".password",  # a finished document's password
        objects.object_name(failed, 1),
    ]
    foreign = f"not-lectern-{uuid.uuid4().hex}"
    for name in [*keep, *orphans, foreign]:
        await objects.put_bytes(jetstream, name=name, data=b"bytes")

    young = await collect(db_pool, jetstream, grace_s=3600.0)
    assert young.objects_found == 0 and young.skipped_young >= len(keep) + len(orphans)
    assert set(orphans) <= await _names(jetstream)
    await _chunks(db_pool, tenant_id, failed, 3)

    dry = await _cli(nats_url, database_url, "--dry-run", "--grace-minutes", "0", "--json")
    assert set(orphans) <= set(dry["removed_names"]) and dry["dry_run"]
    assert not set(keep) & set(dry["removed_names"]) and dry["chunks_found"] >= 3
    assert set(orphans) <= await _names(jetstream)

    report = await collect(db_pool, jetstream, grace_s=0.0)
    assert report.verified and report.objects_left == 0 and report.chunks_left == 0
    assert set(orphans) <= set(report.removed_names)
    assert report.chunks_removed >= 3
    left = await _names(jetstream)
    assert not set(orphans) & left
    assert set(keep) | {foreign} <= left
    assert await db_pool.fetchval("SELECT count(*) FROM chunks WHERE document_id = $1", failed) == 0

    again = await _cli(nats_url, database_url, "--grace-minutes", "0", "--json")
    assert not set(orphans) & set(again["removed_names"]) and again["verified"]


async def _cli(nats_url: str, database_url: str, *args: str) -> dict[str, Any]:
    lectern = Path(sys.executable).with_name("lectern")
    env = {**os.environ, "LECTERN_NATS_URL": nats_url, "LECTERN_DATABASE_URL": database_url}
    process = await asyncio.create_subprocess_exec(
        str(lectern), "gc", *args, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(process.communicate(), timeout=120)
    assert process.returncode == 0, err.decode()
    parsed: dict[str, Any] = json.loads(out)
    return parsed
