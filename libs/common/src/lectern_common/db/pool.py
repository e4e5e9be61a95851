"""asyncpg pool with the pgvector codecs registered on every connection."""

from __future__ import annotations

import json
from typing import Any

import asyncpg
from pgvector.asyncpg import register_vector


async def _init_connection(conn: asyncpg.Connection) -> None:
    await register_vector(conn)
    await conn.set_type_codec("jsonb", encoder=json.dumps, decoder=json.loads, schema="pg_catalog")


async def keep_session(conn: asyncpg.Connection) -> None:
    """Release a pooled connection without asyncpg's reset query.

    By default asyncpg sends ``SELECT pg_advisory_unlock_all(); CLOSE ALL; UNLISTEN *;
    RESET ALL`` on every release: one more round trip each time a connection goes back to the
    pool (about 7 per ingested document, 4 per retrieval request), costing both processes a
    wake-up. Lectern's code leaves no session state behind: ``SET LOCAL``, transaction-level
    advisory locks and ``ON COMMIT DROP`` temporary tables end with their transaction, and
    asyncpg still rolls back a transaction left open before calling this.
    """


async def create_pool(dsn: str, *, min_size: int = 1, max_size: int = 10, **kwargs: Any) -> Any:
    """Open a pool whose connections understand ``vector``, ``sparsevec`` and ``jsonb``.

    The ``vector`` extension must exist (``migrate`` creates it) before the pool is opened.
    Connections go back to the pool without a reset query (``keep_session``): code using the
    pool keeps its session state inside transactions (pass ``reset=None`` for asyncpg's).
    """
    kwargs.setdefault("reset", keep_session)
    return await asyncpg.create_pool(
        dsn,
        min_size=min_size,
        max_size=max_size,
        init=_init_connection,
        **kwargs,
    )
