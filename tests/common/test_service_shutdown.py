"""A service's shutdown ends its loops even when one swallows its cancellation.

``asyncio.wait_for`` before Python 3.12 returns the result of a future that completed in the
same turn as the task awaiting it was cancelled: a loop waiting on an event with it, woken as
the shutdown cancels it (an outbox NOTIFY as the service stops), runs on, and a shutdown that
cancels once and waits never ends. A fresh-clone suite hung 600 s in the memory service's
teardown that way, and the half-stopped service's subscriptions then swallowed the requests
of the tests after it."""

from __future__ import annotations

import asyncio
import contextlib
import sys

import pytest

from lectern_common.service import cancel_and_wait


async def _waits_with_wait_for(wake: asyncio.Event, rounds: list[int]) -> None:
    """A loop waiting on ``wake`` the way the relay and the webhook dispatcher used to."""
    while True:
        rounds.append(1)
        wake.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(wake.wait(), timeout=30)


async def _waits_with_timeout(wake: asyncio.Event, rounds: list[int]) -> None:
    """... and the way they wait now."""
    while True:
        rounds.append(1)
        wake.clear()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(30):
                await wake.wait()


async def _set_and_cancel(task: asyncio.Task[None], wake: asyncio.Event) -> None:
    await asyncio.sleep(0.05)  # the loop is waiting
    wake.set()
    task.cancel()  # in the same turn: the event's waiter completes first


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="wait_for no longer swallows it")
async def test_wait_for_swallows_a_cancellation_that_comes_with_the_event() -> None:
    """The race itself: cancelled once, the loop goes on (what hung the suite)."""
    wake, rounds = asyncio.Event(), list[int]()
    task = asyncio.create_task(_waits_with_wait_for(wake, rounds))
    await _set_and_cancel(task, wake)
    await asyncio.sleep(0.1)
    assert not task.done() and len(rounds) == 2, "the cancellation was swallowed"
    await cancel_and_wait([task])
    assert task.cancelled()


async def test_a_loop_waiting_with_a_timeout_ends_when_cancelled_as_it_is_woken() -> None:
    wake, rounds = asyncio.Event(), list[int]()
    task = asyncio.create_task(_waits_with_timeout(wake, rounds))
    await _set_and_cancel(task, wake)
    async with asyncio.timeout(2):
        await asyncio.gather(task, return_exceptions=True)
    assert task.cancelled() and len(rounds) == 1


async def test_the_shutdown_cancels_again_a_task_that_swallowed_its_cancellation() -> None:
    swallowed: list[int] = []

    async def stubborn() -> None:
        while True:
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                if swallowed:
                    raise
                swallowed.append(1)  # the first one, as wait_for's race does

    task = asyncio.create_task(stubborn())
    await asyncio.sleep(0.01)
    async with asyncio.timeout(5):
        await cancel_and_wait([task], again_s=0.1)
    assert task.cancelled() and swallowed == [1]
