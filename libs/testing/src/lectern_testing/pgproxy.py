"""A loopback TCP proxy in front of a real Postgres, for outage tests: cut every connection,
refuse or black-hole new ones, restore. The outage is real sockets, not a patched pool."""

from __future__ import annotations

import asyncio
import contextlib
import urllib.parse
from collections.abc import AsyncIterator
from dataclasses import dataclass, field


@dataclass
class PostgresProxy:
    """A loopback TCP proxy to Postgres: ``cut`` closes every connection and, while cut,
    either refuses new ones (closes them at once) or black-holes them (accepts and never
    answers, like a partitioned network); ``restore`` lets connections through again."""

    upstream: tuple[str, int] | str
    mode: str = "up"  # up | refuse | blackhole
    port: int = 0
    _server: asyncio.base_events.Server | None = None
    _links: set[asyncio.StreamWriter] = field(default_factory=set)

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        self.cut("refuse")
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    def cut(self, mode: str) -> None:
        self.mode = mode
        for writer in list(self._links):
            writer.transport.abort()
        self._links.clear()

    def restore(self) -> None:
        self.mode = "up"

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.mode == "refuse":
            writer.transport.abort()
            return
        self._links.add(writer)
        if self.mode == "blackhole":
            with contextlib.suppress(Exception):
                await reader.read()  # hold the socket until cut or closed
            return
        if isinstance(self.upstream, str):
            up_reader, up_writer = await asyncio.open_unix_connection(self.upstream)
        else:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        self._links.add(up_writer)

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(Exception):
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            dst.transport.abort()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        self._links.discard(writer)
        self._links.discard(up_writer)


def proxied(database_url: str) -> tuple[tuple[str, int] | str, str]:
    """The upstream address of ``database_url`` and a DSN pointing at the proxy
    (``{port}`` left to fill in)."""
    url = urllib.parse.urlsplit(database_url)
    query = urllib.parse.parse_qs(url.query)
    upstream: tuple[str, int] | str
    if "host" in query:  # a Unix socket directory
        upstream = f"{query['host'][0]}/.s.PGSQL.{url.port or 5432}"
    else:
        upstream = (url.hostname or "127.0.0.1", url.port or 5432)
    rest = {k: v for k, v in query.items() if k != "host"}
    userinfo = url.netloc.rsplit("@", 1)[0] + "@" if "@" in url.netloc else ""
    dsn = urllib.parse.urlunsplit(
        (url.scheme, f"{userinfo}127.0.0.1:{{port}}", url.path,
         urllib.parse.urlencode(rest, doseq=True), "")
    )  # fmt: skip
    return upstream, dsn


@contextlib.asynccontextmanager
async def postgres_proxy(database_url: str) -> AsyncIterator[tuple[PostgresProxy, str]]:
    """A running proxy in front of ``database_url`` and the DSN that goes through it."""
    upstream, dsn = proxied(database_url)
    running = PostgresProxy(upstream)
    await running.start()
    try:
        yield running, dsn.format(port=running.port)
    finally:
        await running.stop()
