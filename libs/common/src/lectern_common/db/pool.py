"""asyncpg pool with the pgvector codecs registered on every connection."""

from __future__ import annotations

import json
from typing import Any

import asyncpg
from pgvector.asyncpg import register_vector


async def _init_connection(conn: asyncpg.Connection) -> None:
    await register_vector(conn)
    await conn.set_type_codec("jsonb", encoder=json.dumps, decoder=json.loads, schema="pg_catalog")


async def create_pool(dsn: str, *, min_size: int = 1, max_size: int = 10, **kwargs: Any) -> Any:
    """Open a pool whose connections understand ``vector``, ``sparsevec`` and ``jsonb``.

    The ``vector`` extension must exist (``migrate`` creates it) before the pool is opened.
    """
    return await asyncpg.create_pool(
        dsn,
        min_size=min_size,
        max_size=max_size,
        init=_init_connection,
        **kwargs,
    )
