"""A document's record and chunks kept in step with the gateway's changes of it.

The gateway owns ``documents``; ingest owns its record of each upload (``ingest_documents``),
``chunks`` and the BM25 statistics (issue 61). A teacher's change reaches ingest as the event
the gateway wrote to its outbox in the change's own transaction (``documents.updated`` /
``archived`` / ``restored`` / ``deleted``), carrying the row's state after the change and its
revision; ingest applies it here, so ingest alone writes the rows whose invariant it keeps:
the statistics count exactly the indexed chunks of indexed documents.

Applying an event is idempotent and independent of order: a state replaces the record's only
when its revision is newer (a late or repeated event changes nothing; a deletion is final),
and ``settle`` then brings the chunks to what the record says *now* (searchable while it is
``indexed``, out of retrieval and of the statistics while archived or superseded, gone once
deleted). A metadata edit copies the changed columns that chunks carry for retrieval's
filters, and re-embeds nothing: the indexed text did not change. A change that arrives
before its upload makes the record, which the upload then completes.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable
from typing import Any

from pydantic import TypeAdapter

from lectern_common.db.types import Connection, Pool
from lectern_common.events import (
    DocumentArchived,
    DocumentDeleted,
    DocumentRestored,
    DocumentState,
    DocumentUpdated,
)
from lectern_common.events.documents import STATE_COLUMNS
from lectern_ingest.repository import FILTER_COLUMNS, sync_index_documents

DocumentChange = DocumentUpdated | DocumentArchived | DocumentRestored | DocumentDeleted

log = logging.getLogger(__name__)

#: the document columns chunks carry a copy of (retrieval filters on them, written with the
#: chunks at upload): the only names ``copy_columns`` puts into its statement
CARRIED = frozenset(FILTER_COLUMNS)


async def _lock(conn: Connection, document_id: uuid.UUID) -> None:
    """Serialise the settling of one document (transaction-scoped, ingest's own lock)."""
    await conn.execute(
        "SELECT pg_advisory_xact_lock(hashtextextended($1::text, 61))", str(document_id)
    )


async def copy_columns(conn: Connection, document_id: uuid.UUID, names: Iterable[str]) -> int:
    """Copy the document's ``names`` (carried columns; others are ignored) onto its chunks
    where they differ; chunks updated."""
    carried = sorted(set(names) & CARRIED)
    if not carried:
        return 0
    sets = ", ".join(f"{n} = d.{n}" for n in carried)
    differs = " OR ".join(f"c.{n} IS DISTINCT FROM d.{n}" for n in carried)
    status: str = await conn.execute(
        f"UPDATE chunks c SET {sets} FROM ingest_documents d "  # noqa: S608 - names from CARRIED
        f"WHERE d.id = $1 AND c.document_id = d.id AND ({differs})",
        document_id,
    )
    return int(status.split()[-1])


async def settle_status(conn: Connection, document_id: uuid.UUID) -> str | None:
    """Bring the document's chunks to its status now; the status (None: no such row).

    ``indexed``: every chunk active and in the BM25 statistics (a restored document's
    chunks are indexed again). Deleted or gone: the chunks are deleted (the statement trigger
    on ``chunks`` takes the indexed ones out of the statistics). Any other status (archived,
    superseded; failed, a duplicate, pending and processing have none, their chunks being
    written with ``indexed``): chunks kept, inactive, out of the statistics. The index's
    record of the document (``index_documents``) follows in the same transaction.
    """
    status: str | None = await conn.fetchval(
        "SELECT status FROM ingest_documents WHERE id = $1", document_id
    )
    if status is None or status == "deleted":
        await conn.execute("DELETE FROM chunks WHERE document_id = $1", document_id)
    elif status == "indexed":
        await conn.execute(
            "UPDATE chunks SET active = true WHERE document_id = $1 AND NOT active", document_id
        )
        if await _has_chunks(conn, document_id, indexed=False):
            await conn.execute("SELECT lectern_bm25_index_document($1)", document_id)
    else:
        await conn.execute(
            "UPDATE chunks SET active = false WHERE document_id = $1 AND active", document_id
        )
        if await _has_chunks(conn, document_id, indexed=True):
            await conn.execute("SELECT lectern_bm25_unindex_document($1)", document_id)
    await sync_index_documents(conn, [document_id])
    return status


async def _has_chunks(conn: Connection, document_id: uuid.UUID, *, indexed: bool) -> bool:
    """Whether the document has chunks in (``indexed``) or out of the BM25 statistics."""
    found: bool = await conn.fetchval(
        "SELECT EXISTS (SELECT 1 FROM chunks WHERE document_id = $1 "
        "AND (doc_length IS NOT NULL) = $2)",
        document_id,
        indexed,
    )
    return found


#: the statuses a teacher moves an indexed document between (the others are ingest's own)
SHELVED = ("indexed", "archived", "superseded")


def next_status(current: str, wanted: str) -> str:
    """The record's status once the gateway's status ``wanted`` is applied: a deletion is
    final; archive, supersede and restore move an indexed document (or one ingest indexed and
    the gateway shelved); the gateway's view of a document ingest is still working on, or
    has failed, changes nothing of ingest's outcome."""
    if wanted == "deleted" or current == "deleted":
        return "deleted"
    if current in SHELVED and wanted in SHELVED:
        return wanted
    return current


def _legacy_state(event: DocumentChange) -> dict[str, Any]:
    """What an event without a state (from an older gateway) says of the row: the new values
    of the changed columns, or the status an archive or restore leads to."""
    if isinstance(event, DocumentArchived):
        return {"status": "archived"}
    if isinstance(event, DocumentRestored):
        return {"status": "indexed"}
    if isinstance(event, DocumentDeleted):
        return {"status": "deleted"}
    fields = DocumentState.model_fields
    return {
        name: TypeAdapter[Any](fields[name].annotation or Any).validate_python(change[-1])
        for name, change in event.changes.items()
        if name in STATE_COLUMNS and isinstance(change, list) and change
    }


async def record(conn: Connection, event: DocumentChange) -> list[str]:
    """Apply the change to ingest's record of the document (made if the upload has not
    arrived yet); the carried columns whose value changed."""
    document_id = event.document_id
    state = None if isinstance(event, DocumentDeleted) else event.state
    if state is None:
        values, revision = _legacy_state(event), None
    else:
        values, revision = state.model_dump(exclude={"revision"}), state.revision
    row = await conn.fetchrow(
        f"SELECT revision, {', '.join(STATE_COLUMNS)} "  # noqa: S608
        "FROM ingest_documents WHERE id = $1 FOR UPDATE",
        document_id,
    )
    if row is None:
        values["status"] = "deleted" if values.get("status") == "deleted" else "pending"
        values.setdefault("title", "")
        names = ["id", "tenant_id", "revision", "uploaded", *values]
        await conn.execute(
            f"INSERT INTO ingest_documents ({', '.join(names)}) "  # noqa: S608
            f"VALUES ({', '.join(f'${i + 1}' for i in range(len(names)))}) "
            "ON CONFLICT (id) DO NOTHING",
            document_id, event.tenant_id, revision or 0, False, *values.values(),
        )  # fmt: skip
        return []
    if revision is not None and revision <= row["revision"] and values.get("status") != "deleted":
        return []  # a state as new as this one is already applied
    values["status"] = next_status(row["status"], values.get("status", row["status"]))
    changed = [n for n in values if n != "status" and values[n] != row[n]]
    names = list(values)
    assignments = [f"{n} = ${i + 2}" for i, n in enumerate(names)]
    if revision is not None:
        assignments.append(f"revision = greatest(revision, ${len(names) + 2})")
    if values["status"] == "deleted":
        assignments.append("deleted_at = coalesce(deleted_at, now())")
    await conn.execute(
        f"UPDATE ingest_documents SET {', '.join(assignments)}, updated_at = now() "  # noqa: S608
        "WHERE id = $1",
        document_id, *values.values(), *([revision] if revision is not None else []),
    )  # fmt: skip
    return [n for n in changed if n in CARRIED]


async def apply(pool: Pool, event: DocumentChange) -> str | None:
    """Apply a teacher's change of a document in one transaction: ingest's record brought to
    the change, the changed carried columns copied onto the chunks, then the chunks brought to
    the record's status. Idempotent, and independent of the order events arrive in."""
    async with pool.acquire() as conn, conn.transaction():
        await _lock(conn, event.document_id)
        columns = await record(conn, event)
        await copy_columns(conn, event.document_id, columns)
        status = await settle_status(conn, event.document_id)
    log.debug("document %s settled: %s", event.document_id, status)
    return status
