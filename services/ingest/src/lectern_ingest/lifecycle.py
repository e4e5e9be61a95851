"""A document's chunks kept in step with the document after it was indexed.

The gateway owns ``documents`` and ingest owns ``chunks`` and the BM25 statistics (issue 61):
a teacher's change reaches the chunks as the event the gateway wrote to its outbox in the
change's own transaction (``documents.updated`` / ``archived`` / ``restored`` /
``deleted``), and ingest applies it here, so ingest alone writes the rows whose invariant it
keeps: the statistics count exactly the indexed chunks of indexed documents.

Applying an event is idempotent and independent of order: ``settle`` brings the chunks to
what the document's row says *now* (searchable while it is ``indexed``, out of retrieval and
of the statistics while archived or superseded, gone once deleted), so a redelivered, late or
reordered event changes nothing more. A metadata edit copies the changed columns that chunks
carry for retrieval's filters, from the row as it is now (never the event's copy of the
value), and re-embeds nothing: the indexed text did not change.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable

from lectern_common.db.types import Connection, Pool
from lectern_ingest.repository import FILTER_COLUMNS, sync_index_documents

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
        f"UPDATE chunks c SET {sets} FROM documents d "  # noqa: S608 - names from CARRIED
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
        "SELECT status FROM documents WHERE id = $1", document_id
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


async def settle(pool: Pool, document_id: uuid.UUID, *, columns: Iterable[str] = ()) -> str | None:
    """Apply a document's change to its chunks in one transaction: the changed carried
    ``columns`` copied, then the chunks brought to the status. Idempotent."""
    async with pool.acquire() as conn, conn.transaction():
        await _lock(conn, document_id)
        await copy_columns(conn, document_id, columns)
        status = await settle_status(conn, document_id)
    log.debug("document %s settled: %s", document_id, status)
    return status
