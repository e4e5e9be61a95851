"""A loop the gateway's worker runs in the background until it stops: the webhook deliveries
and the LTI score posts each claim due rows with a lease, are woken when a row is queued, and
stop by claiming nothing more while what is in flight finishes."""

from __future__ import annotations

import abc
import asyncio


class BackgroundLoop(abc.ABC):
    """``start`` runs :meth:`run` as a task; ``stop`` sets ``stopping`` (the loop claims nothing
    more), wakes it and waits ``grace_s`` for what is in flight, then cancels it (a lease left
    runs out, and the row is claimed again)."""

    #: the task's name, in tracebacks and task dumps
    task_name = "lectern-background"

    def __init__(self) -> None:
        self.wake = asyncio.Event()
        self.stopping = False
        self.task: asyncio.Task[None] | None = None

    @abc.abstractmethod
    async def run(self) -> None:
        """Claim and handle due rows until ``stopping`` (or cancelled)."""

    @property
    def running(self) -> bool:
        """Started and not ended."""
        return self.task is not None and not self.task.done()

    def start(self) -> None:
        """Run :meth:`run` in the background until :meth:`stop` (again, after a stop)."""
        self.stopping = False
        self.task = asyncio.create_task(self.run(), name=self.task_name)

    async def stop(self, *, grace_s: float) -> None:
        """Claim nothing more and let the work in flight finish (cancelled after ``grace_s``)."""
        self.stopping = True
        self.wake.set()
        if self.task is None:
            return
        try:
            await asyncio.wait_for(asyncio.shield(self.task), grace_s)
        except TimeoutError:
            self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)
