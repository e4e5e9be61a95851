"""asyncpg pool with the pgvector codecs registered on every connection, and a span for
every query made within a trace."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any

import asyncpg
from opentelemetry import trace
from pgvector.asyncpg import register_vector

from lectern_common.db.types import Pool

_tracer = trace.get_tracer("lectern.db")
log = logging.getLogger(__name__)


def trace_query(record: Any) -> None:
    """A ``postgres <OPERATION>`` client span for a query that ran within a trace.

    asyncpg calls its query loggers with ``loop.call_soon`` from the querying task's context,
    so the current span is the caller's; the span is placed at the query's measured time.
    Queries outside any trace (background loops such as the outbox relay) make no span.
    """
    parent = trace.get_current_span()
    if not parent.is_recording():
        return
    end = time.time_ns()
    query = str(record.query or "")
    operation = query.lstrip().split(None, 1)[0].upper() if query.strip() else "QUERY"
    span = _tracer.start_span(
        f"postgres {operation}",
        kind=trace.SpanKind.CLIENT,
        start_time=end - int(record.elapsed * 1e9),
        attributes={
            "db.system.name": "postgresql",
            "db.operation.name": operation,
            "db.query.text": query[:2000],
        },
    )
    if record.exception is not None:
        span.set_status(trace.Status(trace.StatusCode.ERROR, str(record.exception)[:300]))
    span.end(end_time=end)


async def _init_connection(conn: asyncpg.Connection) -> None:
    await register_vector(conn)
    await conn.set_type_codec("jsonb", encoder=json.dumps, decoder=json.loads, schema="pg_catalog")
    conn.add_query_logger(trace_query)


async def keep_session(conn: asyncpg.Connection) -> None:
    """Release a pooled connection without asyncpg's reset query.

    By default asyncpg sends ``SELECT pg_advisory_unlock_all(); CLOSE ALL; UNLISTEN *;
    RESET ALL`` on every release: one more round trip each time a connection goes back to the
    pool (about 7 per ingested document, 4 per retrieval request), costing both processes a
    wake-up. Lectern's code leaves no session state behind: ``SET LOCAL``, transaction-level
    advisory locks and ``ON COMMIT DROP`` temporary tables end with their transaction, and
    asyncpg still rolls back a transaction left open before calling this.
    """


async def create_pool(dsn: str, *, min_size: int = 1, max_size: int = 10, **kwargs: Any) -> Pool:
    """Open a pool whose connections understand ``vector``, ``sparsevec`` and ``jsonb``.

    The ``vector`` extension must exist (``migrate`` creates it) before the pool is opened.
    Connections go back to the pool without a reset query (``keep_session``): code using the
    pool keeps its session state inside transactions (pass ``reset=None`` for asyncpg's).
    """
    kwargs.setdefault("reset", keep_session)
    pool: Pool = await asyncpg.create_pool(
        dsn,
        min_size=min_size,
        max_size=max_size,
        init=_init_connection,
        **kwargs,
    )
    return pool


#: how long closing a pool waits for its connections to be released (the handlers that held
#: them had the broker's graceful timeout already; the pods allow 45 s in all)
CLOSE_TIMEOUT_S = 5.0


async def close_pool(pool: Pool, *, timeout: float = CLOSE_TIMEOUT_S) -> None:
    """Close an asyncpg pool within ``timeout``: ``Pool.close`` waits for every connection
    to be released, so one held by a handler that outlived the broker's graceful stop would
    hold the shutdown for ever (a pod that never ends until it is killed). Past the timeout
    the remaining connections are terminated."""
    try:
        await asyncio.wait_for(pool.close(), timeout)
    except TimeoutError:
        log.warning("database pool: connections still in use after %.0f s; terminated", timeout)
        pool.terminate()
