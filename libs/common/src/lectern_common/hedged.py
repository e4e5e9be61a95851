"""Request/reply to a queue group that survives a dead replica and a lost NATS server.

A core NATS request goes to one member of a queue group. When that member dies while it
holds the request (SIGKILLed, or its NATS server killed), nothing tells the caller: the
reply never comes, and the caller used to wait for its whole timeout. With two replicas in a
queue group, one of them SIGKILLed while it handled a request, the next answer came 10.2 s
after the kill (the 10 s request timeout, then an ``upstream`` error; issue 49).

So a request not answered within the subject's usual reply time (the 95th percentile of its
recent replies, at most ``HEDGE_MAX_S``) is sent again: the dead member's subscription left
with its connection, so the queue group gives the copy to a live member, and whichever reply
comes first is taken (the earlier copies still count: a slow reply is never thrown away).
Copies are bounded (``MAX_IN_FLIGHT`` per request, and a budget the requests earn), so
replicas that are slow rather than dead are not buried under them. "No responders" (nobody
subscribed: a replica restarting, or every member's server lost) fails at once and is tried
again after a short backoff. The attempts are one tenacity loop
bounded by the caller's deadline. Only for idempotent requests: retrieval, re-ranking and
memory recall are reads.
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception_type,
    wait_exponential_jitter,
)

#: replies remembered per subject to judge what "usually" means
REPLY_SAMPLES = 100
#: fewer replies than this seen (a gateway's first requests, replicas warming their
#: models): hedge after ``HEDGE_INITIAL_S``, the ceiling below. Two replicas, one SIGKILLed
#: holding a request: answered 1.2 s after the kill from a gateway with no reply seen yet,
#: 0.2-0.4 s from one that had seen a dozen
MIN_SAMPLES = 10
HEDGE_INITIAL_S = 1.0
#: never sooner than this: the memory recall, the fastest request, is given up after 0.3 s
#: (``memory_timeout_s``); a copy at 0.1 s still has time to be answered, and copies much
#: sooner would mostly duplicate work simply under way
HEDGE_MIN_S = 0.1
#: never later than this, however slow the replies have been: the turn after a replica is
#: killed must be answered within 2 s of the kill (issue 49; ``make chaos`` asserts it)
HEDGE_MAX_S = 1.0
#: copies of one request in flight at most (the first and two hedges): bounds the extra
#: work when every reply is slow, e.g. a replica overloaded rather than dead
MAX_IN_FLIGHT = 3
#: a retry budget (Finagle's, gRPC's retry throttling): each request earns a tenth of a
#: copy, each copy spends one, up to ten saved. The requests a dead replica held are all
#: copied at once, while replicas merely overloaded get at most 10% more requests from
#: copies, not two more per slow request
BUDGET_PER_REQUEST = 0.1
BUDGET_MAX = 10.0
#: after "no responders": 50 ms, doubling to 1 s (a restarting replica subscribes within
#: a second or two of its start; the previous hand-written loop waited the same)
NO_RESPONDERS_BACKOFF = wait_exponential_jitter(initial=0.05, max=1.0, jitter=0.05)
#: no copy is sent again with less than this left of the deadline: it would not be heard
#: back, and the request would end "no reply in time" where every copy sent had found
#: nobody ("no service answers"; seen on a loaded AVX2 machine, 2026-12-04)
LAST_COPY_S = 0.2


@dataclass
class ReplyTimes:
    """The recent reply times of one subject: a request not answered within their 95th
    percentile is presumed lost and sent again."""

    samples: deque[float] = field(default_factory=lambda: deque(maxlen=REPLY_SAMPLES))
    #: copies that may be sent now (``BUDGET_PER_REQUEST``)
    budget: float = BUDGET_MAX

    def earn(self) -> None:
        """A request was sent: a little more budget for copies."""
        self.budget = min(BUDGET_MAX, self.budget + BUDGET_PER_REQUEST)

    def spend(self) -> bool:
        """Whether a copy may be sent now (and, if so, its cost taken)."""
        if self.budget < 1.0 - 1e-9:  # ten tenths make one, rounding aside
            return False
        self.budget -= 1.0
        return True

    def add(self, seconds: float) -> None:
        """Remember one reply's time (from its copy's send to its arrival)."""
        self.samples.append(seconds)

    def hedge_after(self) -> float:
        """How long to wait for a reply before sending a copy."""
        if len(self.samples) < MIN_SAMPLES:
            return HEDGE_INITIAL_S
        ordered = sorted(self.samples)
        p95 = ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
        return min(max(p95, HEDGE_MIN_S), HEDGE_MAX_S)


#: reply times per broker (a process's gateway, or each test's own broker) and subject
_TIMES: weakref.WeakKeyDictionary[Any, dict[str, ReplyTimes]] = weakref.WeakKeyDictionary()


def reply_times(broker: Any, subject: str) -> ReplyTimes:
    """The reply times of ``subject`` through ``broker``."""
    try:
        per_subject = _TIMES.setdefault(broker, {})
    except TypeError:  # a stand-in that takes no weak reference: nothing remembered
        per_subject = {}
    return per_subject.setdefault(subject, ReplyTimes())


class NoReplyYet(Exception):
    """No copy of the request was answered within the attempt's wait."""


class NoResponders(Exception):
    """Every copy in flight failed at once: nobody subscribed to the subject when it was
    sent ("no responders"), or it timed out before the deadline."""


@dataclass
class _Flight:
    """The copies of one request in flight, each with the time it was sent."""

    broker: Any
    subject: str
    payload: Any
    deadline: float
    times: ReplyTimes
    copies: dict[asyncio.Task[Any], float] = field(default_factory=dict)
    #: copies sent so far
    sent: int = 0
    #: waits that ended without a reply: each next one is twice as long
    silent_waits: int = 0

    def send(self, loop: asyncio.AbstractEventLoop) -> None:
        """Send the request, or a copy of it: not when ``MAX_IN_FLIGHT`` copies are waiting
        already, and a copy next to one in flight only within the budget. A copy sent after
        "no responders" is free: its predecessor reached nobody. The first is always sent;
        another not in the last ``LAST_COPY_S`` of the deadline."""
        remaining = self.deadline - loop.time()
        if remaining <= 0 or len(self.copies) >= MAX_IN_FLIGHT:
            return
        if self.sent and remaining < LAST_COPY_S:
            return
        if self.copies and not self.times.spend():
            return
        task = asyncio.create_task(self._request(remaining))
        self.copies[task] = loop.time()
        self.sent += 1

    async def _request(self, timeout: float) -> Any:
        return await self.broker.request(self.payload, self.subject, timeout=timeout)

    def window(self) -> float:
        """How long the next attempt waits for a reply before a copy is sent: the usual
        reply time, doubled after each silent wait, so that a reply that is slow rather than
        lost (an overloaded replica) is not copied again and again."""
        return self.times.hedge_after() * 2.0**self.silent_waits

    async def wait(
        self, loop: asyncio.AbstractEventLoop, window: float, is_no_responders: Callable[..., bool]
    ) -> Any:
        """The first reply of any copy within ``window``; ``NoReplyYet`` when none came,
        ``NoResponders`` when every copy found nobody; another error as it was raised."""
        ends = min(loop.time() + window, self.deadline)
        while self.copies:
            remaining = ends - loop.time()
            if remaining <= 0:
                self.silent_waits += 1
                raise NoReplyYet
            done, _ = await asyncio.wait(
                self.copies, timeout=remaining, return_when=asyncio.FIRST_COMPLETED
            )
            # a reply first, should one copy have failed in the same instant
            for task in sorted(done, key=lambda t: t.cancelled() or t.exception() is not None):
                sent_at = self.copies.pop(task)
                if task.cancelled():  # its connection closed under it: as if unanswered
                    continue
                error = task.exception()
                if error is None:
                    self.times.add(loop.time() - sent_at)
                    return task.result()
                if not isinstance(error, TimeoutError) and not is_no_responders(error):
                    raise error
                if isinstance(error, TimeoutError) and loop.time() >= self.deadline - 0.05:
                    raise NoReplyYet from error  # the deadline: no copy was answered
                # this copy reached nobody (or gave up early): the others may still answer
        raise NoResponders

    def cancel(self) -> None:
        """Stop waiting for the copies still in flight."""
        for task in self.copies:
            task.cancel()


async def hedged_request(
    broker: Any,
    payload: Any,
    subject: str,
    *,
    timeout: float,
    is_no_responders: Callable[[BaseException], bool],
) -> Any:
    """``broker.request(payload, subject)`` sent again to the queue group when it is not
    answered in the subject's usual time, or nobody listened; the first reply of any copy
    within ``timeout``. Raises ``NoResponders`` or ``NoReplyYet`` when ``timeout`` is spent
    (the last outcome), and any other error of a copy as it was raised."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    times = reply_times(broker, subject)
    times.earn()
    flight = _Flight(broker, subject, payload, deadline, times)

    def stop(state: RetryCallState) -> bool:
        return loop.time() >= deadline

    def wait(state: RetryCallState) -> float:
        outcome = state.outcome
        if outcome is not None and isinstance(outcome.exception(), NoResponders):
            return min(NO_RESPONDERS_BACKOFF(state), max(0.0, deadline - loop.time()))
        return 0.0  # the attempt's own wait for a reply was the pause

    try:
        async for attempt in AsyncRetrying(
            stop=stop,
            wait=wait,
            retry=retry_if_exception_type((NoReplyYet, NoResponders)),
            reraise=True,
        ):
            with attempt:
                flight.send(loop)
                return await flight.wait(loop, flight.window(), is_no_responders)
    finally:
        flight.cancel()
        with contextlib.suppress(Exception):
            await asyncio.gather(*flight.copies, return_exceptions=True)
    raise AssertionError("unreachable: tenacity returns or re-raises")  # pragma: no cover
