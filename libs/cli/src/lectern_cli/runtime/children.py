"""One service process of the embedded stack: its port, environment hooks, restart backoff,
readiness probe and log tail."""

from __future__ import annotations

import contextlib
import ctypes
import http.client
import json
import os
import signal
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from lectern_common.runtime.nats import free_port, port_is_free


def preferred_or_free_port(preferred: int, host: str = "127.0.0.1") -> int:
    """``preferred`` if it is free, else any free port."""
    return preferred if port_is_free(preferred, host) else free_port(host)


_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:  # pragma: no cover - runs in the forked child
    # A service must not outlive a supervisor killed with SIGKILL (no chance to clean up).
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


@dataclass
class Child:
    """One service process and its restart bookkeeping."""

    #: unique in the stack: the service's name, then ``gateway-2`` ... for more replicas
    name: str
    port: int
    log_path: Path
    process: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    starts: int = 0
    consecutive_crashes: int = 0
    restart_at: float | None = None
    failed: bool = False
    ready: bool = False
    ready_at: float | None = None
    last_exit: int | None = None
    checks: dict[str, str] = field(default_factory=dict)
    #: which service this process runs (``gateway``); empty: the same as ``name``
    service: str = ""
    #: the command's arguments after ``python -m lectern_<service>`` (``("worker",)``)
    args: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.service:
            self.service = self.name

    @property
    def service_name(self) -> str:
        """Its name in logs, traces and metrics: ``lectern-gateway``, ``lectern-gateway-worker``."""
        return "-".join(("lectern", self.service, *self.args))

    @property
    def url(self) -> str:
        """Base HTTP URL."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def state(self) -> str:
        """starting, ready, not ready, restarting, failed or stopped."""
        if self.failed:
            return "failed"
        if self.restart_at is not None:
            return "restarting"
        if self.process is None or self.process.poll() is not None:
            return "stopped"
        if self.ready:
            return "ready"
        return "not ready" if self.ready_at is not None else "starting"


def probe_ready(url: str, *, timeout: float) -> tuple[bool, dict[str, str]]:
    """GET ``url/readyz``: whether it answered 200, and its checks. Whatever else answers on
    the port (nothing, or another server's protocol) is not ready."""
    try:
        with urllib.request.urlopen(f"{url}/readyz", timeout=timeout) as response:  # noqa: S310
            return response.status == 200, readiness_checks(response)
    except urllib.error.HTTPError as exc:
        return False, readiness_checks(exc)
    except (OSError, ValueError, http.client.HTTPException):
        return False, {}


def readiness_checks(response: IO[bytes]) -> dict[str, str]:
    try:
        body = json.loads(response.read() or b"{}")
    except ValueError:
        return {}
    checks = body.get("checks", {}) if isinstance(body, dict) else {}
    return {str(k): str(v) for k, v in checks.items()} if isinstance(checks, dict) else {}


def log_tail(path: Path, lines: int) -> str:
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(handle.tell() - 8192, 0))
            text = handle.read().decode(errors="replace")
    except OSError:
        return ""
    return "\n".join(iter_last(text.splitlines(), lines))


def iter_last(items: list[str], count: int) -> Iterator[str]:
    yield from (f"    {line}" for line in items[-count:])
