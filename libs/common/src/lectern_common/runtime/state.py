"""The embedded stack's state on disk: ``stack.json`` (pids with their start times, URLs),
the NATS users' passwords, and stopping a process left over by an earlier run."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import psutil

from lectern_common.nats_auth import (
    ADMIN_USER,
)

STATE_FILE = "stack.json"


def nats_credentials_path(data_dir: Path) -> Path:
    """Where the embedded stack keeps its NATS users' passwords (mode 0600)."""
    return data_dir / "nats" / "credentials.json"


def write_nats_credentials(data_dir: Path, passwords: dict[str, str]) -> None:
    """Write the NATS passwords readable by this account only."""
    path = nats_credentials_path(data_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(mode=0o600, exist_ok=True)
    path.chmod(0o600)
    path.write_text(json.dumps(passwords, indent=2))


def stack_nats_url(state: dict[str, Any]) -> str:
    """The NATS URL of an embedded stack (from its ``stack.json`` state) carrying the admin
    user's credentials, for operator tools (``lectern status``, ``lectern eval``); keep it
    out of logs (``lectern_cli.status.redact``)."""
    nats = state.get("nats", {})
    url: str = nats.get("url", "")
    path = nats.get("credentials")
    if not url or not path or not Path(path).exists():
        return url
    password = json.loads(Path(path).read_text()).get(ADMIN_USER)
    if not password:
        return url
    with_credentials = []
    for server in url.split(","):  # a cluster's servers, comma-separated
        scheme, _, rest = server.strip().partition("://")
        with_credentials.append(f"{scheme}://{ADMIN_USER}:{password}@{rest}")
    return ",".join(with_credentials)


def read_state(data_dir: Path) -> dict[str, Any] | None:
    """The state a supervisor wrote to ``data_dir/stack.json``, if any."""
    path = data_dir / STATE_FILE
    if not path.exists():
        return None
    try:
        state: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return state


def process_alive(pid: int | None, create_time: float | None = None) -> bool:
    """Whether ``pid`` runs (not a zombie) and, if given, was created at ``create_time``."""
    if not pid:
        return False
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        return create_time is None or abs(proc.create_time() - create_time) < 1.0
    except psutil.Error:
        return False


def create_time(pid: int) -> float | None:
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


def terminate_pid(pid: int, *, timeout: float) -> None:
    try:
        proc = psutil.Process(pid)
        proc.terminate()
        proc.wait(timeout)
    except psutil.TimeoutExpired:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    except psutil.Error:
        pass
