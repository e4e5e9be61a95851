"""The supervisor's own logic with real child processes: backoff, crash loops, stopping."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from pydantic import SecretStr

from lectern_cli.runtime.children import Child, preferred_or_free_port, probe_ready
from lectern_cli.runtime.processes import GATEWAY_WORKER, PROCESSES, SERVICES
from lectern_cli.runtime.settings import (
    LOCAL_EMBEDDING_DIM,
    LOCAL_EMBEDDING_MODEL,
    embedding_identity,
)
from lectern_cli.runtime.state import STATE_FILE, process_alive
from lectern_cli.runtime.supervisor import Supervisor
from lectern_common.errors import ConfigurationError
from lectern_common.runtime.nats import free_port, port_is_free
from lectern_common.settings import BaseServiceSettings


def test_embedding_identity_without_loading_models(tmp_path: Path) -> None:
    assert embedding_identity(BaseServiceSettings()) == (LOCAL_EMBEDDING_MODEL, LOCAL_EMBEDDING_DIM)
    gemini = BaseServiceSettings(
        embedding_provider="gemini", gemini_api_key=SecretStr("k"), gemini_embedding_dim=1536,
        gemini_embedding_model="gemini-embedding-001",
    )  # fmt: skip
    assert embedding_identity(gemini) == ("gemini-embedding-001", 1536)
    model = tmp_path / "my-model"
    (model / "1_Pooling").mkdir(parents=True)
    (model / "1_Pooling" / "config.json").write_text(json.dumps({"word_embedding_dimension": 512}))
    assert embedding_identity(BaseServiceSettings(local_embedding_model=str(model))) == (
        str(model), 512,
    )  # fmt: skip
    with pytest.raises(ConfigurationError, match="dimension"):
        embedding_identity(BaseServiceSettings(local_embedding_model=str(tmp_path / "nothing")))


def test_the_supervisor_never_imports_torch() -> None:
    code = (
        "import sys\n"
        "from lectern_cli.runtime.settings import embedding_identity\n"
        "from lectern_cli.runtime.supervisor import Supervisor\n"
        "from lectern_common.settings import BaseServiceSettings\n"
        "embedding_identity(BaseServiceSettings())\n"
        "print(sorted(m for m in ('torch', 'sentence_transformers') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_ports_prefer_the_default_when_free() -> None:
    import socket

    port = free_port()
    assert port_is_free(port)
    assert preferred_or_free_port(port) == port
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", port))
        busy.listen()
        assert not port_is_free(port)
        other = preferred_or_free_port(port)
        assert other != port
        assert port_is_free(other)


def _supervisor(tmp_path: Path, script: str, messages: list[str], **kwargs: float) -> Supervisor:
    return Supervisor(
        data_dir=tmp_path, services=("memory",), report=messages.append,
        command=lambda name: [sys.executable, "-c", script, name], **kwargs,  # type: ignore[arg-type]
    )  # fmt: skip


def _child(supervisor: Supervisor, tmp_path: Path) -> Child:
    child = Child(name="memory", port=free_port(), log_path=tmp_path / "memory.log")
    supervisor.children = {"memory": child}
    supervisor.spawn(child)
    return child


def test_a_crash_looping_service_is_given_up_with_a_clear_message(tmp_path: Path) -> None:
    messages: list[str] = []
    crash = "import sys; print('boom from', sys.argv[1], flush=True); sys.exit(3)"
    supervisor = _supervisor(
        tmp_path, crash, messages, crash_loop_limit=3, backoff_initial_s=0.05, backoff_max_s=0.2
    )
    child = _child(supervisor, tmp_path)
    deadline = time.monotonic() + 20
    while not child.failed and time.monotonic() < deadline:
        supervisor.poll()
        time.sleep(0.02)
    assert child.failed
    assert child.state == "failed"
    assert child.starts == 3
    assert child.last_exit == 3
    text = "\n".join(messages)
    assert "memory exited with code 3" in text
    assert "restarting in" in text
    assert "crash-looping (3 crashes in a row, last exit code 3)" in text
    assert "boom from memory" in messages[-1], "the give-up message shows the log's last lines"
    assert (tmp_path / "memory.log").read_text().count("boom from memory") == 3
    supervisor.poll()
    assert child.starts == 3, "a failed service is not restarted again"


def test_a_service_that_ran_long_enough_is_always_restarted(tmp_path: Path) -> None:
    messages: list[str] = []
    supervisor = _supervisor(
        tmp_path, "raise SystemExit(1)", messages, crash_loop_limit=2, stable_after_s=0.0,
        backoff_initial_s=0.01,
    )  # fmt: skip
    child = _child(supervisor, tmp_path)
    deadline = time.monotonic() + 20
    while child.starts < 4 and time.monotonic() < deadline:
        supervisor.poll()
        time.sleep(0.02)
    assert child.starts >= 4
    assert not child.failed


def test_stop_escalates_to_sigkill_after_the_grace_period(tmp_path: Path) -> None:
    messages: list[str] = []
    stubborn = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "print('up', flush=True); time.sleep(120)"
    )
    supervisor = _supervisor(tmp_path, stubborn, messages)
    supervisor.kill_after_s = 1.0
    child = _child(supervisor, tmp_path)
    assert child.process is not None
    pid = child.process.pid
    deadline = time.monotonic() + 20
    while "up" not in child.log_path.read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    began = time.monotonic()
    supervisor.stop()
    assert time.monotonic() - began < 10
    assert child.process.returncode == -9
    assert not process_alive(pid)
    assert any("did not stop in time; killing it" in m for m in messages)


def test_stop_is_graceful_first(tmp_path: Path) -> None:
    messages: list[str] = []
    polite = (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *a: (print('bye', flush=True), sys.exit(0)))\n"
        "print('up', flush=True)\ntime.sleep(120)\n"
    )
    supervisor = _supervisor(tmp_path, polite, messages)
    child = _child(supervisor, tmp_path)
    deadline = time.monotonic() + 20
    while "up" not in child.log_path.read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    supervisor.stop()
    assert child.process is not None
    assert child.process.returncode == 0
    assert "bye" in child.log_path.read_text()
    assert not any("killing" in m for m in messages)


def test_a_second_supervisor_on_a_running_data_dir_is_refused(tmp_path: Path) -> None:
    # this test process plays the running supervisor recorded in stack.json
    import os

    import psutil

    me = psutil.Process(os.getpid())
    (tmp_path / STATE_FILE).write_text(
        json.dumps({"running": True, "pid": me.pid, "pid_create_time": me.create_time()})
    )
    supervisor = Supervisor(data_dir=tmp_path, report=lambda m: None)
    with pytest.raises(ConfigurationError, match="already runs"):
        supervisor.start()
    assert json.loads((tmp_path / STATE_FILE).read_text())["pid"] == me.pid, "left untouched"


def test_leftovers_of_a_killed_supervisor_are_stopped(tmp_path: Path) -> None:
    import psutil

    orphan = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        created = psutil.Process(orphan.pid).create_time()
        (tmp_path / STATE_FILE).write_text(json.dumps({
            "running": True, "pid": 2**22 + 7, "pid_create_time": 1.0,
            "services": {"memory": {"pid": orphan.pid, "pid_create_time": created}},
        }))  # fmt: skip
        messages: list[str] = []
        supervisor = Supervisor(data_dir=tmp_path, gateway_port=free_port(), report=messages.append)
        supervisor._check_not_running()
        assert orphan.wait(5) is not None
        assert any(f"service memory (pid {orphan.pid}) left over" in m for m in messages)
    finally:
        if orphan.poll() is None:
            orphan.kill()
            orphan.wait()


def test_a_busy_gateway_port_is_refused_before_anything_starts(tmp_path: Path) -> None:
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        supervisor = Supervisor(data_dir=tmp_path, gateway_port=port, report=lambda m: None)
        with pytest.raises(ConfigurationError, match=f"port {port} .* is in use"):
            supervisor.start()
    assert supervisor.postgres is None
    assert not (tmp_path / STATE_FILE).exists()


def test_postgres_url_goes_only_to_the_processes_with_a_database(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The re-ranker's reads of the index are the retriever's: it gets no database URL."""
    monkeypatch.delenv("LECTERN_DATABASE_URL", raising=False)
    supervisor = Supervisor(data_dir=tmp_path, gateway_port=0, report=lambda m: None)
    supervisor._add_children()
    monkeypatch.setattr(supervisor, "postgres", SimpleNamespace(dsn="postgresql://here/db"))
    with_database = {
        name: "LECTERN_DATABASE_URL" in supervisor.child_env(child)
        for name, child in supervisor.children.items()
    }
    assert with_database == {name: name != "reranker" for name in PROCESSES}


def test_a_gateway_worker_runs_beside_each_gateway(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`lectern up` starts `python -m lectern_gateway worker` once per gateway process, named
    as the worker in logs and traces, on a port of its own; a stack without the gateway has
    none."""
    monkeypatch.delenv("LECTERN_GATEWAY_WORKER_HTTP_PORT", raising=False)
    argv = "import sys; print('argv', sys.argv[1:], flush=True)"
    supervisor = Supervisor(
        data_dir=tmp_path, gateway_port=0, report=lambda m: None,
        command=lambda name: [sys.executable, "-c", argv, name],
    )  # fmt: skip
    supervisor.logs_dir.mkdir(parents=True)
    supervisor._add_children()
    assert list(supervisor.children) == [*SERVICES, GATEWAY_WORKER] == list(PROCESSES)
    worker = supervisor.children[GATEWAY_WORKER]
    assert (worker.service, worker.args, worker.service_name) == (
        "gateway", ("worker",), "lectern-gateway-worker",
    )  # fmt: skip
    ports = [child.port for child in supervisor.children.values()]
    assert len(set(ports)) == len(ports)
    env = supervisor.child_env(worker)
    assert env["LECTERN_SERVICE_NAME"] == "lectern-gateway-worker"
    assert env["LECTERN_GATEWAY_HTTP_PORT"] == str(worker.port)
    supervisor.spawn(worker)
    assert worker.process is not None and worker.process.wait(20) == 0
    assert "argv ['gateway', 'worker']" in worker.log_path.read_text()

    cluster = Supervisor(data_dir=tmp_path / "c", gateway_port=0, cluster=True,
                         report=lambda m: None)  # fmt: skip
    cluster._add_children()
    assert [n for n in cluster.children if n.startswith(GATEWAY_WORKER)] == [
        GATEWAY_WORKER, f"{GATEWAY_WORKER}-2",
    ]  # fmt: skip
    alone = Supervisor(data_dir=tmp_path / "m", services=("memory",), report=lambda m: None)
    alone._add_children()
    assert list(alone.children) == ["memory"]
    # the benchmarks' stacks (lectern eval*) leave the background work out
    measuring = Supervisor(data_dir=tmp_path / "e", gateway_port=0, worker=False,
                           report=lambda m: None)  # fmt: skip
    measuring._add_children()
    assert list(measuring.children) == list(SERVICES)


def test_another_protocol_on_a_childs_port_is_not_ready() -> None:
    """A NATS server that took the port a service was given answers the readiness probe with
    its INFO line: the supervisor reads "not ready" rather than crashing."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()

        def speak_nats() -> None:
            connection, _ = listener.accept()
            with connection:
                connection.sendall(b'INFO {"server_id":"N","jetstream":true}\r\n')
                connection.recv(1024)

        thread = threading.Thread(target=speak_nats, daemon=True)
        thread.start()
        port = listener.getsockname()[1]
        assert probe_ready(f"http://127.0.0.1:{port}", timeout=2.0) == (False, {})
        thread.join(5)
