"""Gathering concurrent deliveries into lists (``Collector``), and waiting (for a list, for a
worker slot) while telling JetStream the message is alive (``with_keepalive``)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

log = logging.getLogger(__name__)

ItemT = TypeVar("ItemT")
ResultT = TypeVar("ResultT")


class Collector(Generic[ItemT, ResultT]):
    """Gathers items submitted by concurrent tasks into lists handed to ``run`` together.

    Up to ``in_flight`` lists run at once, so the next one is collected while the last one is
    being worked on. A list is taken when ``max_items`` are waiting; or, when no other list
    is in flight, once the event loop has handed over what arrived with the first item
    (while each millisecond brings more, ``wait_s`` at most). ``run`` returns
    one result per item, in order (an exception: that item's error); when it raises, every
    item of its list gets the error.
    """

    def __init__(
        self,
        run: Callable[[list[ItemT]], Awaitable[list[ResultT | BaseException]]],
        *,
        max_items: int,
        in_flight: int = 2,
        wait_s: float = 0.02,
    ) -> None:
        self._run_list = run
        self.max_items = max(1, max_items)
        self.wait_s = wait_s
        self._slots = asyncio.Semaphore(max(1, in_flight))
        self._pending: list[tuple[ItemT, asyncio.Future[ResultT]]] = []
        self._runner: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        #: lists in flight, and an event set when an item arrives or a list ends
        self._running = 0
        self._changed = asyncio.Event()
        #: lists run so far (for logs and tests)
        self.lists = 0

    async def submit(self, item: ItemT) -> ResultT:
        """The result of ``item``, computed with the other items collected with it."""
        future: asyncio.Future[ResultT] = asyncio.get_running_loop().create_future()
        self._pending.append((item, future))
        self._changed.set()
        if self._runner is None or self._runner.done():
            self._runner = asyncio.create_task(self._collect(), name="lectern-collector")
        return await future

    async def _collect(self) -> None:
        while self._pending:
            await self._slots.acquire()
            # while another list is in flight, this one fills up until that list is done: a
            # list of a few items would pay a whole list's fixed costs
            while self._running and len(self._pending) < self.max_items:
                self._changed.clear()
                await self._changed.wait()
            # what is being handed over right now (a fetch of uploads) joins this list: wait
            # while each millisecond brings more, up to wait_s
            deadline = asyncio.get_running_loop().time() + self.wait_s
            seen = -1
            while seen < len(self._pending) < self.max_items and (
                asyncio.get_running_loop().time() < deadline
            ):
                seen = len(self._pending)
                await asyncio.sleep(0.001)
            taken = [(i, f) for i, f in self._pending[: self.max_items] if not f.done()]
            del self._pending[: self.max_items]
            if not taken:
                self._slots.release()
                continue
            self.lists += 1
            self._running += 1
            task = asyncio.create_task(self._run(taken), name="lectern-collected")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _run(self, taken: list[tuple[ItemT, asyncio.Future[ResultT]]]) -> None:
        try:
            results = await self._run_list([item for item, _ in taken])
        except BaseException as exc:
            for _, future in taken:
                if not future.done():
                    future.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
        else:
            for (_, future), result in zip(taken, results, strict=True):
                if future.done():
                    continue
                if isinstance(result, BaseException):
                    future.set_exception(result)
                else:
                    future.set_result(result)
        finally:
            self._running -= 1
            self._changed.set()
            self._slots.release()


async def wait_with_keepalive(
    gate: asyncio.Semaphore,
    keepalive: Callable[[], Awaitable[None]] | None,
    every_s: float,
) -> None:
    """Acquire ``gate``, telling JetStream the message is alive while waiting for it."""
    if keepalive is None or not gate.locked():
        await gate.acquire()
        return
    await with_keepalive(gate.acquire(), keepalive, every_s)


async def with_keepalive(
    work: Awaitable[ResultT],
    keepalive: Callable[[], Awaitable[None]] | None,
    every_s: float,
) -> ResultT:
    """``work``'s result, telling JetStream every ``every_s`` seconds meanwhile that the
    message is alive (a failed keep-alive is logged; the work goes on)."""
    if keepalive is None:
        return await work
    beating = asyncio.create_task(keep_alive(keepalive, every_s))
    try:
        return await work
    finally:
        beating.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await beating


async def keep_alive(keepalive: Callable[[], Awaitable[None]], every_s: float) -> None:
    """Tell JetStream every ``every_s`` seconds that the message is alive, until cancelled (a
    failed keep-alive is logged; the next one is tried all the same)."""
    while True:
        await asyncio.sleep(every_s)
        try:
            await keepalive()
        except Exception as exc:
            log.warning("in-progress ack failed: %s", exc)
