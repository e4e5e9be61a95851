"""`lectern status` against the session's real NATS and Postgres and a real service app."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import uvicorn

from lectern_cli.main import main
from lectern_cli.runtime.state import STATE_FILE
from lectern_cli.status import (
    SERVICES,
    Targets,
    collect_status,
    env_prefix,
    redact,
    render,
    resolve_targets,
)
from lectern_common.runtime.nats import free_port


@pytest.fixture(scope="module")
def probe_service(nats_url: str, database_url: str) -> Iterator[str]:
    """A real service process's app (create_service_app) served on a free port, in a thread."""
    from lectern_common.broker import create_broker
    from lectern_common.service import create_service_app
    from lectern_common.settings import ServiceHttpSettings

    settings = ServiceHttpSettings(
        nats_url=nats_url, database_url=database_url, http_port=free_port(),
        service_name="lectern-status-probe", log_json=False,
    )  # fmt: skip
    app = create_service_app(
        settings=settings,
        broker=create_broker(nats_url, service_name=settings.service_name),
        title="probe",
    )
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=settings.http_port, log_config=None)
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{settings.http_port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(f"{url}/readyz", timeout=1) as response:
                if response.status == 200:
                    break
        except OSError:
            pass
        assert time.monotonic() < deadline, "probe service not ready"
        time.sleep(0.1)
    yield url
    server.should_exit = True
    thread.join(30)


def _closed_url() -> str:
    return f"http://127.0.0.1:{free_port()}"


async def _backlog(nats_url: str, durable: str, count: int) -> None:
    import nats
    from nats.js.api import ConsumerConfig, DeliverPolicy

    nc = await nats.connect(nats_url)
    try:
        js = nc.jetstream()
        await js.add_consumer(
            "LECTERN_DEADLETTER",
            ConsumerConfig(durable_name=durable, deliver_policy=DeliverPolicy.NEW,
                           inactive_threshold=300.0),
        )  # fmt: skip
        for i in range(count):
            await js.publish("lectern.deadletter.v1", f"status test {i}".encode())
    finally:
        await nc.close()


async def _document(database_url: str, tenant: str, status: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute(
            """INSERT INTO documents (id, tenant_id, title, filename, mime_type, size_bytes,
                   file_sha256, status, uploaded_by)
               VALUES ($1, $2, 't', 't.txt', 'text/plain', 1, 'x', $3, 'u')""",
            uuid.uuid4(), tenant, status,
        )  # fmt: skip
    finally:
        await conn.close()


@pytest.mark.integration
def test_status_reports_services_streams_consumers_and_documents(
    probe_service: str, nats_url: str, database_url: str, tenant_id: str
) -> None:
    durable = f"status-{uuid.uuid4().hex[:8]}"
    asyncio.run(_backlog(nats_url, durable, 2))
    asyncio.run(_document(database_url, tenant_id, "failed"))
    targets = Targets(
        services={"retriever": probe_service, "gateway": _closed_url()},
        nats_url=nats_url, database_url=database_url, source="test",
    )  # fmt: skip
    status = asyncio.run(collect_status(targets, timeout=3.0))
    json.dumps(status)  # one JSON object, nothing exotic inside

    retriever = status["services"]["retriever"]
    assert retriever["ready"] is True
    assert retriever["checks"]["nats"] == "ok"
    assert retriever["checks"]["postgres"] == "ok"
    gateway = status["services"]["gateway"]
    assert gateway["ready"] is False
    assert "Connect" in gateway["error"]

    assert status["nats"]["ok"] is True
    assert "LECTERN_DOCUMENTS" in status["streams"]
    assert status["streams"]["LECTERN_DEADLETTER"]["messages"] >= 2
    assert status["consumers"]["LECTERN_DEADLETTER"][durable]["pending"] == 2
    assert status["postgres"]["ok"] is True
    assert 1 in status["postgres"]["migrations"]
    assert status["documents"]["failed"] >= 1
    assert status["documents"]["total"] == sum(
        v for k, v in status["documents"].items() if k != "total"
    )
    assert set(status["chunks"]) == {"active", "inactive", "total"}
    assert status["healthy"] is False
    assert status["problems"] == ["gateway is not ready"]
    text = render(status)
    assert "UNHEALTHY" in text
    assert durable in text


@pytest.mark.integration
def test_status_command_is_healthy_when_everything_answers(
    probe_service: str, nats_url: str, database_url: str,
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path,
) -> None:  # fmt: skip
    monkeypatch.chdir(tmp_path)  # no ./.lectern here: the environment is used
    monkeypatch.setenv("LECTERN_NATS_URL", nats_url)
    monkeypatch.setenv("LECTERN_DATABASE_URL", database_url)
    for name in SERVICES:  # every service URL points at the one real service app
        monkeypatch.setenv(f"{env_prefix(name)}_URL", probe_service)
    assert main(["status", "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["healthy"] is True
    assert status["source"] == "environment"
    assert status["stack"] is None
    assert set(status["services"]) == set(SERVICES)
    assert all(info["ready"] for info in status["services"].values())
    assert main(["status"]) == 0
    assert capsys.readouterr().out.rstrip().endswith("healthy")


@pytest.mark.integration
def test_status_exit_code_is_1_when_nothing_answers(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LECTERN_NATS_URL", f"nats://127.0.0.1:{free_port()}")
    monkeypatch.setenv("LECTERN_DATABASE_URL", f"postgresql://postgres@127.0.0.1:{free_port()}/x")
    for name in SERVICES:
        monkeypatch.setenv(f"{env_prefix(name)}_URL", _closed_url())
    assert main(["status", "--json", "--timeout", "1"]) == 1
    status = json.loads(capsys.readouterr().out)
    assert status["healthy"] is False
    assert status["nats"]["ok"] is False
    assert status["postgres"]["ok"] is False
    assert len(status["problems"]) == len(SERVICES) + 2


def test_targets_from_the_environment_default_to_the_standard_ports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # no ./.lectern of a developer's `make run` here
    targets = resolve_targets(None, {"LECTERN_RETRIEVER_HTTP_PORT": "9102",
                                     "LECTERN_GATEWAY_URL": "http://gw.example:80/"})  # fmt: skip
    assert targets.source == "environment"
    assert targets.services["gateway"] == "http://gw.example:80"
    assert targets.services["retriever"] == "http://127.0.0.1:9102"
    assert targets.services["memory"] == "http://127.0.0.1:8004"
    assert targets.services["gateway-worker"] == "http://127.0.0.1:8005"
    worker = resolve_targets(None, {"LECTERN_GATEWAY_WORKER_URL": "http://worker:8000"})
    assert worker.services["gateway-worker"] == "http://worker:8000"
    assert targets.nats_url == "nats://127.0.0.1:4222"


def test_targets_from_a_stack_that_is_not_running(tmp_path: Path) -> None:
    dead = psutil.Popen(["true"])
    dead.wait()
    state: dict[str, Any] = {
        "running": True, "pid": dead.pid, "pid_create_time": 1.0,
        "services": {"gateway": {"url": "http://127.0.0.1:1"}},
        "nats": {"url": "nats://127.0.0.1:2"}, "postgres": {"dsn": "postgresql://p@/x?host=/s"},
    }  # fmt: skip
    (tmp_path / STATE_FILE).write_text(json.dumps(state))
    targets = resolve_targets(tmp_path, {})
    assert targets.services == {"gateway": "http://127.0.0.1:1"}
    assert targets.nats_url == "nats://127.0.0.1:2"
    assert targets.database_url == "postgresql://p@/x?host=/s"
    assert targets.problems == [f"the embedded stack in {tmp_path.resolve()} is not running"]
    missing = resolve_targets(tmp_path / "nowhere", {})
    assert missing.problems
    assert "no embedded stack state" in missing.problems[0]


def test_passwords_are_not_printed() -> None:
    assert (
        redact("postgresql://app:s3cret@db:5432/lectern") == "postgresql://app:***@db:5432/lectern"
    )
    assert (
        redact("postgresql://postgres@/postgres?host=/x")
        == "postgresql://postgres@/postgres?host=/x"
    )
