"""The embedded stack started for an evaluation (``lectern eval``, ``eval-answers``,
``eval-memory``, the soak and retrieval benchmarks): the supervisor in a thread, in a data
directory of its own, until the evaluation is done. ``lectern_eval`` drives what runs; it is
given these (it never imports the CLI)."""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from lectern_cli.runtime.state import read_state, stack_nats_url
from lectern_cli.runtime.supervisor import Supervisor
from lectern_eval.retrieval import RunningSystem

log = logging.getLogger(__name__)

Report = Callable[[str], None]


@contextlib.contextmanager
def embedded_stack(
    *,
    data_dir: Path | None = None,
    report: Report | None = None,
    ready_timeout_s: float = 300.0,
    worker: bool = True,
) -> Iterator[tuple[str, str]]:
    """Start NATS, Postgres and the five services (as processes, the way ``lectern up`` does)
    in ``data_dir`` (a temporary directory by default); yields (gateway URL, JWT secret).

    With the gateway's worker by default, as users run it: its gap closures answer a
    student's knowledge gap once material for it is indexed, and what memory learns of the
    student follows (docs/benchmarks.md, nineteenth session).
    ``worker=False`` for what no chat goes through (``lectern eval``'s retrieval)."""
    say: Report = report or log.info
    with contextlib.ExitStack() as stack:
        if data_dir is None:
            data_dir = Path(
                stack.enter_context(tempfile.TemporaryDirectory(prefix="lectern-eval-"))
            )
            # our own fresh directory: the embedded Postgres's account (``nobody`` as root)
            # must be able to traverse it
            data_dir.chmod(0o711)
        ready = threading.Event()
        supervisor = Supervisor(
            data_dir=data_dir, gateway_port=0, nats_port=0, nats_monitor_port=0,
            report=lambda message: say(f"stack: {message}"),
            on_ready=lambda _: ready.set(), worker=worker,
        )  # fmt: skip
        failure: list[BaseException] = []

        def run() -> None:
            try:
                supervisor.run(install_signal_handlers=False)
            except BaseException as exc:
                failure.append(exc)
                ready.set()

        thread = threading.Thread(target=run, name="lectern-eval-stack", daemon=True)
        thread.start()
        try:
            if not ready.wait(ready_timeout_s) or failure:
                raise RuntimeError(
                    f"the embedded stack did not become ready: {failure[0] if failure else ''} "
                    f"(logs in {data_dir / 'logs'})"
                )
            yield supervisor.children["gateway"].url, supervisor.settings.effective_jwt_secret
        finally:
            supervisor.stop_requested.set()
            thread.join(timeout=120)


@contextlib.contextmanager
def embedded_system(say: Callable[[str], None]) -> Iterator[RunningSystem]:
    """The embedded stack as processes in a temporary directory (ingest taking 4 uploads at
    once: a corpus of short documents hides each one's round trips)."""
    with tempfile.TemporaryDirectory(prefix="lectern-eval-") as tmp:
        data_dir = Path(tmp)
        data_dir.chmod(0o711)  # the embedded Postgres's account must traverse it
        saved = os.environ.get("LECTERN_INGEST_CONCURRENCY")
        os.environ.setdefault("LECTERN_INGEST_CONCURRENCY", "4")
        try:
            # no gateway worker: its sweeps and gap closures follow chats, and none is asked
            with embedded_stack(data_dir=data_dir, report=say, worker=False) as (url, secret):
                state = read_state(data_dir) or {}
                yield RunningSystem(url, secret, stack_nats_url(state), state["postgres"]["dsn"])
        finally:
            if saved is None:
                os.environ.pop("LECTERN_INGEST_CONCURRENCY", None)
