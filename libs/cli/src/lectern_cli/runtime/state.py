"""The embedded stack's state on disk: ``stack.json`` (pids with their start times, URLs),
what each of its entries holds, the NATS users' passwords, and stopping a process left over
by an earlier run. The supervisor writes it; ``lectern status`` and ``lectern eval`` read it."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil

from lectern_common.nats_auth import ADMIN_USER

if TYPE_CHECKING:
    from lectern_cli.runtime.children import Child
    from lectern_common.runtime.nats import EmbeddedNats, EmbeddedNatsCluster
    from lectern_common.runtime.postgres import EmbeddedPostgres, EmbeddedReplica

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


def write_state(data_dir: Path, state: dict[str, Any]) -> None:
    """Write ``state`` to ``data_dir/stack.json`` atomically."""
    path = data_dir / STATE_FILE
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(state, indent=2))
    tmp.replace(path)


def services_entry(children: Iterable[Child]) -> dict[str, Any]:
    """Each service's entry of ``stack.json``."""
    services: dict[str, Any] = {}
    for child in children:
        child_pid = child.process.pid if child.process is not None else None
        services[child.name] = {
            "url": child.url,
            "port": child.port,
            "pid": child_pid,
            "pid_create_time": create_time(child_pid) if child_pid else None,
            "state": child.state,
            "ready": child.ready,
            "restarts": max(child.starts - 1, 0),
            "last_exit_code": child.last_exit,
            "log": str(child.log_path),
        }
    return services


def nats_entry(
    nats: EmbeddedNats | EmbeddedNatsCluster | None,
    servers: Sequence[EmbeddedNats],
    data_dir: Path,
    *,
    stream_replicas: int | None = None,
) -> dict[str, Any]:
    """NATS's entry of ``stack.json``: the URL of ``nats`` and its first server's pid, with
    every server (``servers``) when it is a cluster (``stream_replicas``); empty before
    start."""
    if nats is None:
        return {}
    nodes = [
        {
            "name": server.server_name,
            "url": server.url,
            "monitor_url": server.monitor_url,
            "pid": server.process.pid if server.process is not None else None,
            "pid_create_time": (
                create_time(server.process.pid) if server.process is not None else None
            ),
        }
        for server in servers
    ]
    entry: dict[str, Any] = {
        "url": nats.url,
        "monitor_url": nats.monitor_url,
        "pid": nodes[0]["pid"],
        "pid_create_time": nodes[0]["pid_create_time"],
        "data_dir": str(data_dir / "nats"),
        "credentials": str(nats_credentials_path(data_dir)),
    }
    if stream_replicas is not None:
        entry["nodes"] = nodes
        entry["stream_replicas"] = stream_replicas
    return entry


def postgres_entry(postgres: EmbeddedPostgres | None) -> dict[str, Any]:
    """Postgres's entry of ``stack.json``; empty before start."""
    if postgres is None:
        return {}
    pg_pid = postgres.process.pid if postgres.process is not None else None
    return {
        "dsn": postgres.dsn,
        "pid": pg_pid,
        "pid_create_time": create_time(pg_pid) if pg_pid else None,
        "data_dir": str(postgres.data_dir),
    }


def replica_entry(replica: EmbeddedReplica | None, services: Sequence[str]) -> dict[str, Any]:
    """The read replica's entry of ``stack.json`` (its pid while it runs, the ``services``
    that read from it); empty without one."""
    if replica is None:
        return {}
    process = replica.process
    replica_pid = process.pid if process is not None and process.poll() is None else None
    return {
        "dsn": replica.dsn,
        "pid": replica_pid,
        "pid_create_time": create_time(replica_pid) if replica_pid else None,
        "data_dir": str(replica.data_dir),
        "services": list(services),
    }


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
