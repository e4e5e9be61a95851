"""What Lectern's code asks of a database pool and its connections, as typing Protocols.

asyncpg ships no type hints (it is ``Any`` to mypy), so ``asyncpg.Pool`` would check
nothing. These Protocols name exactly the calls the services make: an ``asyncpg.Pool``
satisfies ``Pool`` and an ``asyncpg.Connection`` satisfies ``Connection``. A function that
only queries takes a ``Queryable`` (a pool or a connection inside a transaction both do).
Rows stay ``Any``: an ``asyncpg.Record`` is read by key, by position and as a mapping.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol


class Queryable(Protocol):
    """A pool or a connection: what a query needs."""

    async def fetch(self, query: str, *args: Any) -> list[Any]:
        """The rows of a query."""
        ...

    async def fetchrow(self, query: str, *args: Any) -> Any:
        """The first row of a query, or None."""
        ...

    async def fetchval(self, query: str, *args: Any) -> Any:
        """The first column of the first row, or None."""
        ...

    async def execute(self, query: str, *args: Any) -> str:
        """Run a statement; its status (``UPDATE 3``)."""
        ...

    async def executemany(self, command: str, args: Iterable[Sequence[Any]]) -> None:
        """Run a statement once per argument tuple."""
        ...


class Connection(Queryable, Protocol):
    """A connection (from ``Pool.acquire``): queries, transactions, bulk copies."""

    def transaction(
        self, *, isolation: str | None = None, readonly: bool = False, deferrable: bool = False
    ) -> AbstractAsyncContextManager[Any]:
        """A transaction block (``async with conn.transaction():``)."""
        ...

    def is_in_transaction(self) -> bool:
        """Whether a transaction is open on the connection."""
        ...

    async def copy_records_to_table(
        self, table_name: str, *, records: Iterable[Sequence[Any]], columns: Sequence[str]
    ) -> str:
        """COPY rows into a table."""
        ...


class Pool(Queryable, Protocol):
    """A connection pool: queries on any connection, or one connection held."""

    def acquire(self) -> AbstractAsyncContextManager[Connection]:
        """Hold one connection (``async with pool.acquire() as conn:``)."""
        ...

    async def close(self) -> None:
        """Close when every connection is released."""
        ...

    def terminate(self) -> None:
        """Close now, whatever is in use."""
        ...
