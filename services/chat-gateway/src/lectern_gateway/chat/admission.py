"""Admission of chat turns under overload: a short wait in line, then a 503 with
``Retry-After``, in place of a wait that ends in an ``error``.

A stack past its capacity queues turns at the re-ranker and the answerer. On a slow CPU
(2026-12-04: a turn cost ~0.9 s of a core, two cores, 20 students asking without pause) the
queue grew past the re-rank deadline: turns waited ~10 s and half of them ended with an
``error`` event, after the stack had spent CPU on them.

So each gateway replica lets at most ``limit`` turns wait for their first token. A question
over it waits in line (first come, first served) for a place, up to ``patience_s``; one not
admitted by then is refused before anything is stored or counted: 503 problem+json, reason
``overloaded``, with a ``Retry-After`` of about how long the admitted turns wait (spread, so
that the students refused together do not come back together). The line is at most
``room`` times the limit long; a question past it is refused at once.

The limit follows the wait of the admitted turns (additive increase, multiplicative
decrease, as TCP's congestion window):

- a turn whose first token came later than ``target_s`` after it was admitted lowers the
  limit to ``backoff`` times the turns waiting then, at most once per ``target_s`` (the
  turns behind the last cut have not all drained yet);
- a turn that came in time raises it by ``1 / limit`` while the limit is in use (at least
  half of it waiting), so it grows by one a "round" of turns;
- it stays within [``floor``, ``ceiling``].

Under a steady overload the admitted turns wait about ``target_s`` for their first token,
and the limit settles near (turns a second the stack serves) x ``target_s`` (Little's law).
A replica knows only its own turns; the re-ranker they share is seen through the wait.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from lectern_common import metrics

#: the smoothing of the wait a ``Retry-After`` is estimated from (per turn)
_SMOOTHING = 0.2
#: the longest ``Retry-After`` given (a wait past it is no longer a moment's overload)
RETRY_AFTER_MAX_S = 30


def _spread() -> float:
    """A factor around 1 for a ``Retry-After``: students refused together come back apart."""
    return random.uniform(0.5, 1.5)  # noqa: S311 (a spread, not a secret)


@dataclass
class Admission:
    """One replica's limit on turns waiting for their first token, and the line before it."""

    #: a first token later than this lowers the limit; 0 or less: every turn is admitted
    target_s: float
    #: how long a question waits in line for a place before it is refused
    patience_s: float = 10.0
    initial: int = 8
    floor: int = 2
    ceiling: int = 256
    backoff: float = 0.8
    #: the line holds at most this many times the limit
    room: float = 2.0
    clock: Callable[[], float] = time.monotonic
    spread: Callable[[], float] = _spread
    limit: float = field(init=False)
    #: turns admitted and still waiting for their first token
    waiting: int = field(init=False, default=0)
    #: the smoothed wait of recent turns for their first token, in seconds
    wait_s: float = field(init=False, default=0.0)
    _lowered_at: float = field(init=False, default=-math.inf)
    _line: deque[asyncio.Future[Ticket]] = field(init=False, default_factory=deque)

    def __post_init__(self) -> None:
        self.floor = max(1, self.floor)
        self.ceiling = max(self.floor, self.ceiling)
        self.limit = float(min(max(self.initial, self.floor), self.ceiling))

    @property
    def enabled(self) -> bool:
        """Whether questions are ever held or refused."""
        return self.target_s > 0

    @property
    def in_line(self) -> int:
        """Questions waiting in line for a place."""
        return len(self._line)

    def enter(self) -> Ticket | None:
        """A place now, if one is free and nobody is in line before it (else None)."""
        if self.enabled and (self._line or self.waiting >= int(self.limit)):
            return None
        return self._ticket()

    async def admit(self) -> Ticket | None:
        """A place for a question: at once, or after waiting in line up to ``patience_s``;
        None: refuse it (the line is full, or its patience ran out)."""
        ticket = self.enter()
        if ticket is not None or not self.enabled:
            return ticket
        if len(self._line) >= max(1, int(self.limit * self.room)) or self.patience_s <= 0:
            self._refused()
            return None
        place: asyncio.Future[Ticket] = asyncio.get_running_loop().create_future()
        self._line.append(place)
        self._gauge()
        try:
            return await asyncio.wait_for(asyncio.shield(place), self.patience_s)
        except TimeoutError:
            if place.done():  # a place came as its patience ran out: taken
                return place.result()
            self._refused()
            return None
        except asyncio.CancelledError:  # the student went away while in line
            if place.done() and not place.cancelled():
                place.result().release()
            raise
        finally:
            if not place.done():
                place.cancel()
            if place in self._line:
                self._line.remove(place)
            self._gauge()

    def retry_after_s(self) -> int:
        """Whole seconds a refused question should wait: about the admitted turns' wait,
        spread."""
        wanted = max(self.wait_s, self.target_s) * self.spread()
        return int(min(RETRY_AFTER_MAX_S, max(1, math.ceil(round(wanted, 3)))))

    def _ticket(self) -> Ticket:
        self.waiting += 1
        self._gauge()
        return Ticket(self, self.clock())

    def _refused(self) -> None:
        metrics.CHAT_SHED.add(1)

    def _leave(self, wait_s: float | None) -> None:
        """A turn stopped waiting (``wait_s``: for its first token; None: not a measure)."""
        self.waiting = max(0, self.waiting - 1)
        if wait_s is not None:
            self._observe(wait_s)
        # the places now free go to the line, first come first served
        while self._line and self.waiting < int(self.limit):
            place = self._line.popleft()
            if not place.done():
                place.set_result(self._ticket())
        self._gauge()

    def _observe(self, wait_s: float) -> None:
        self.wait_s = (
            wait_s if self.wait_s == 0.0 else (1 - _SMOOTHING) * self.wait_s + _SMOOTHING * wait_s
        )
        if not self.enabled:
            return
        now = self.clock()
        if wait_s > self.target_s:
            if now - self._lowered_at >= self.target_s:
                # the turns waiting then, and this one, were too many
                lowered = min(self.limit, self.waiting + 1) * self.backoff
                self.limit = max(float(self.floor), lowered)
                self._lowered_at = now
        elif self.waiting + 1 >= self.limit / 2:
            self.limit = min(float(self.ceiling), self.limit + 1 / self.limit)

    def _gauge(self) -> None:
        metrics.CHAT_ADMISSION.set(self.limit, figure="limit")
        metrics.CHAT_ADMISSION.set(self.waiting, figure="waiting")
        metrics.CHAT_ADMISSION.set(len(self._line), figure="in_line")


class Ticket:
    """An admitted turn's place among the waiting; given back once (later calls are no-ops)."""

    def __init__(self, admission: Admission, issued: float) -> None:
        self._admission: Admission | None = admission
        self.issued = issued

    def settle(self, *, less_s: float = 0.0) -> None:
        """The turn's first token came (or it ended without one): its wait since it was
        admitted, less ``less_s`` spent on purpose (the plan's pacing), is measured."""
        admission = self._admission
        if admission is not None:
            self._give_back(max(0.0, admission.clock() - self.issued - less_s))

    def release(self) -> None:
        """The turn stopped before its first token for its own reasons (the student went
        away, storing it failed): its place is free, and its wait says nothing of the stack."""
        self._give_back(None)

    def _give_back(self, wait_s: float | None) -> None:
        admission, self._admission = self._admission, None
        if admission is not None:
            admission._leave(wait_s)
