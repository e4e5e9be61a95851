"""Cross-document batching for many small documents.

A school syncing a question bank sends thousands of uploads of a few sentences each. One at a
time, each spends most of its time waiting on round trips (the object store, Postgres, the
outcome event) and pays a whole embedding call for one or two chunks. With batching on, the
worker takes up to ``LECTERN_INGEST_BATCH_DOCUMENTS`` small uploads at once, each still in its
own task with its own transaction, outcome event and message settlement (so exactly-once and
failure isolation are those of one document). With ``LECTERN_INGEST_BATCH_EMBED`` the chunks
that these documents want embedded at the same moment go to the embedder in one call
(``EmbedBatcher``); it is off by default because MiniLM on this project's CPUs embeds short
passages faster one at a time than in a padded batch (docs/benchmarks.md, ingestion).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

Vectors = np.ndarray[Any, Any]
EmbedFn = Callable[[Sequence[str]], Awaitable[Vectors]]


class EmbedBatcher:
    """Joins the embedding requests of concurrent documents into shared embedder calls.

    Requests that arrive while a call runs wait for the next one, which takes them all (up to
    ``max_texts`` texts; one request is never split). When a joint call fails, each request
    of it is embedded alone, so a text the embedder rejects fails only its own document.
    """

    def __init__(self, embed: EmbedFn, *, max_texts: int) -> None:
        self._embed = embed
        self.max_texts = max(1, max_texts)
        self._pending: list[tuple[list[str], asyncio.Future[Vectors]]] = []
        self._runner: asyncio.Task[None] | None = None
        #: embedder calls made (for logs and tests)
        self.calls = 0

    async def embed(self, texts: Sequence[str]) -> Vectors:
        """The vectors of ``texts``, embedded together with other documents' waiting texts."""
        future: asyncio.Future[Vectors] = asyncio.get_running_loop().create_future()
        self._pending.append((list(texts), future))
        if self._runner is None or self._runner.done():
            self._runner = asyncio.create_task(self._run(), name="lectern-embed-batcher")
        return await future

    def _take(self) -> list[tuple[list[str], asyncio.Future[Vectors]]]:
        taken: list[tuple[list[str], asyncio.Future[Vectors]]] = []
        size = 0
        while self._pending:
            texts, future = self._pending[0]
            if taken and size + len(texts) > self.max_texts:
                break
            self._pending.pop(0)
            if future.done():  # its document gave up (timeout, shutdown)
                continue
            taken.append((texts, future))
            size += len(texts)
        return taken

    async def _run(self) -> None:
        # one turn of the event loop: documents handed over together join the first call
        await asyncio.sleep(0)
        while self._pending:
            batch = self._take()
            if not batch:
                continue
            try:
                vectors = await self._call([t for texts, _ in batch for t in texts])
            except Exception as exc:
                if len(batch) == 1:
                    _settle(batch[0][1], exc)
                    continue
                log.info("a joint embedding call of %d documents failed (%s); embedding each "
                         "alone", len(batch), exc)  # fmt: skip
                for texts, future in batch:
                    try:
                        _settle(future, await self._call(texts))
                    except Exception as alone:
                        _settle(future, alone)
                continue
            start = 0
            for texts, future in batch:
                _settle(future, vectors[start : start + len(texts)])
                start += len(texts)

    async def _call(self, texts: list[str]) -> Vectors:
        self.calls += 1
        return await self._embed(texts)


def _settle(future: asyncio.Future[Vectors], outcome: Vectors | BaseException) -> None:
    if future.done():
        return
    if isinstance(outcome, BaseException):
        future.set_exception(outcome)
    else:
        future.set_result(outcome)


async def wait_with_keepalive(
    gate: asyncio.Semaphore,
    keepalive: Callable[[], Awaitable[None]] | None,
    every_s: float,
) -> None:
    """Acquire ``gate``, telling JetStream the message is alive while waiting for it."""
    if keepalive is None or not gate.locked():
        await gate.acquire()
        return

    async def beat() -> None:
        while True:
            await asyncio.sleep(every_s)
            try:
                await keepalive()
            except Exception as exc:
                log.warning("in-progress ack failed: %s", exc)

    beating = asyncio.create_task(beat())
    try:
        await gate.acquire()
    finally:
        beating.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await beating
