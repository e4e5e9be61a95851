"""The ERROR lines of the services' logs, for the runs that judge them (``make soak``,
``make chaos``): a platform team pages on ERROR, so a run fails on every one it cannot
explain, and prints it.

The services log JSON lines under ``lectern up`` (``lectern_common.telemetry``): ``time``
(``2026-12-02 04:47:02,123``, the machine's local time), ``level``, ``name``, ``message``
and, for an exception, ``exc_info`` (its traceback).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

LEVELS = ("ERROR", "CRITICAL")


@dataclass(frozen=True)
class LogError:
    """One ERROR (or CRITICAL) line of a service's log."""

    source: str  # the log file's stem: the service (``gateway``, ``ingest-2``, ...)
    at: float | None  # epoch seconds, when the line carries a time
    logger: str
    message: str
    exception: str  # the exception's last line ("" when none)

    def describe(self) -> str:
        """One line to print: where, which logger, what, and the exception's last line."""
        text = f"{self.source}: {self.logger}: {self.message}"
        return (text + (f" [{self.exception}]" if self.exception else ""))[:400]


def parse(source: str, line: str) -> LogError | None:
    """The line as an error, or None when it is below ERROR (or not a log record)."""
    try:
        record = json.loads(line)
    except ValueError:
        record = None
    if not isinstance(record, dict):
        if any(f" {level} " in line for level in LEVELS):  # a plain-text log line
            return LogError(source, None, "?", line.strip()[:300], "")
        return None
    if str(record.get("level", "")).upper() not in LEVELS:
        return None
    trace = str(record.get("exc_info") or record.get("exception") or "").strip().splitlines()
    return LogError(
        source=source,
        at=_epoch(str(record.get("time", ""))),
        logger=str(record.get("name", "?")),
        message=str(record.get("message", "")),
        exception=trace[-1].strip() if trace else "",
    )


def _epoch(text: str) -> float | None:
    try:
        return datetime.strptime(text, "%Y-%m-%d %H:%M:%S,%f").timestamp()
    except ValueError:
        return None


def errors_in(lines: Iterable[str], source: str) -> list[LogError]:
    """The ERROR lines among ``lines`` of one log."""
    return [e for e in (parse(source, line) for line in lines) if e is not None]


def error_lines(folder: Path) -> dict[str, list[LogError]]:
    """Every ``*.log`` of ``folder`` (the stack's ``data/logs``) by its stem, with its ERROR
    lines (an empty list for a clean log)."""
    return {
        log.stem: errors_in(log.read_text(errors="replace").splitlines(), log.stem)
        for log in sorted(folder.glob("*.log"))
    }


#: what an ERROR line says when a NATS server, a stream's quorum or a peer replica is gone
LOST_PEER = (
    "timeout", "timed out", "no responders", "noresponders", "connection closed",
    "connectionclosed", "connection refused", "connection reset", "unexpected eof",
    "disconnected", "stale connection", "service unavailable", "503",
)  # fmt: skip

#: a fault: its name, when it began and when the stack was whole again (epoch seconds)
Fault = tuple[str, float, float]


def explained_by(error: LogError, faults: Sequence[Fault], *, grace_s: float) -> str | None:
    """The injected fault that explains an ERROR line, or None. A line explains itself by a
    lost peer (``LOST_PEER``: a connection closed or refused, a request that timed out or
    found no responder) logged while a fault was on, or at most ``grace_s`` after the stack
    was whole again (a request sent during the fault times out after it). Anything else (a
    handler's own exception, a lost peer with no fault to blame) is a defect a platform team
    would be paged for."""
    text = f"{error.message} {error.exception}".lower()
    if error.at is None or not any(sign in text for sign in LOST_PEER):
        return None
    for name, began, ended in faults:
        if began - 1.0 <= error.at <= ended + grace_s:
            return name
    return None
