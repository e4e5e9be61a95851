"""`lectern up --cluster`'s supervisor with stand-in services: a 3-server NATS cluster with
every service's user on every server, two processes per service on their own ports, each
given all three NATS URLs and 3 stream replicas; everything stopped at the end."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import nats
import pytest

from lectern_cli.main import build_parser
from lectern_cli.runtime.processes import PROCESSES
from lectern_cli.runtime.state import process_alive, read_state, stack_nats_url
from lectern_cli.runtime.supervisor import Supervisor
from lectern_common.broker import ensure_streams
from lectern_common.runtime.nats import free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]

#: a stand-in service: writes the environment it was given, then waits to be stopped
STAND_IN = (
    "import json, os, sys, time\n"
    "name = sys.argv[1]\n"
    "port = os.environ[f'LECTERN_{name.upper()}_HTTP_PORT']\n"
    "keys = ('LECTERN_NATS_URL', 'LECTERN_NATS_USER', 'LECTERN_NATS_PASSWORD',\n"
    "        'LECTERN_STREAM_REPLICAS', 'LECTERN_SERVICE_NAME')\n"
    "env = {k: os.environ.get(k) for k in keys} | {'service': name, 'port': port}\n"
    "open(f'env-{name}-{port}.json', 'w').write(json.dumps(env))\n"
    "time.sleep(300)\n"
)


@pytest.fixture
def base_dir() -> Iterator[Path]:
    """A directory the unprivileged Postgres account can traverse (tmp_path is 0700)."""
    base = Path("/tmp") / f"lectern-cluster-{uuid.uuid4().hex[:8]}"
    base.mkdir(mode=0o755)
    os.chmod(base, 0o755)  # noqa: S103 - the embedded Postgres account must traverse it
    yield base
    shutil.rmtree(base, ignore_errors=True)


def test_up_takes_cluster_and_keeps_its_default() -> None:
    parser = build_parser()
    assert parser.parse_args(["up"]).cluster is False
    assert parser.parse_args(["up", "--cluster"]).cluster is True
    assert parser.parse_args(["up"]).nats_restart_after == 2.0
    assert parser.parse_args(["up"]).worker is True
    assert parser.parse_args(["up", "--no-worker"]).worker is False
    assert parser.parse_args(["up", "--nats-restart-after", "8"]).nats_restart_after == 8.0


def test_the_cluster_supervisor_runs_two_of_each_on_three_nats_servers(base_dir: Path) -> None:
    messages: list[str] = []
    supervisor = Supervisor(
        data_dir=base_dir / "data", cluster=True, gateway_port=free_port(),
        nats_port=free_port(), nats_monitor_port=free_port(), report=messages.append,
        command=lambda name: [sys.executable, "-c", STAND_IN, name], graceful_timeout_s=2.0,
        nats_restart_after_s=0.5,
    )  # fmt: skip
    try:
        supervisor.start()
        replicas = {f"{s}-2" for s in PROCESSES}
        assert set(supervisor.children) == set(PROCESSES) | replicas  # a worker per gateway
        ports = [child.port for child in supervisor.children.values()]
        assert len(set(ports)) == len(ports), "every replica on its own port"
        state = read_state(supervisor.data_dir)
        assert state is not None
        nodes = state["nats"]["nodes"]
        assert len(nodes) == 3 and state["nats"]["stream_replicas"] == 3
        assert state["nats"]["url"] == ",".join(node["url"] for node in nodes)
        assert all(process_alive(n["pid"], n["pid_create_time"]) for n in nodes)

        envs = _written_envs(supervisor.data_dir, expected=len(ports))
        for child in supervisor.children.values():
            env = envs[(child.service, str(child.port))]
            assert env["LECTERN_SERVICE_NAME"] == child.service_name
            assert env["LECTERN_NATS_URL"] == state["nats"]["url"]
            assert env["LECTERN_STREAM_REPLICAS"] == "3"
            assert env["LECTERN_NATS_USER"] == f"lectern-{child.service}"

        # each service's user is known to every server, and the streams take 3 replicas
        asyncio.run(_streams_at_three_replicas(envs[("gateway", str(ports[0]))], nodes))
        asyncio.run(_admin_reaches_jetstream(stack_nats_url(state)))
        assert _cluster_size(nodes[1]["monitor_url"]) == 3

        # a server that dies is started again on its ports and store, as its pod would be
        dead = nodes[1]
        os.kill(dead["pid"], signal.SIGKILL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            supervisor.poll()
            node = read_state(supervisor.data_dir)["nats"]["nodes"][1]  # type: ignore[index]
            if node["pid"] != dead["pid"] and process_alive(node["pid"], node["pid_create_time"]):
                break
            time.sleep(0.05)
        else:
            pytest.fail(f"{dead['name']} was not started again: {messages[-3:]}")
        assert node["url"] == dead["url"]
        for _ in range(100):  # back in the cluster once its JetStream meta group answers
            with contextlib.suppress(OSError, KeyError, ValueError):
                if _cluster_size(node["monitor_url"]) == 3:
                    break
            time.sleep(0.1)
        else:
            pytest.fail(f"{dead['name']} did not join the cluster again")
        text = "\n".join(messages)
        assert f"NATS server {dead['name']} ({dead['url']}) exited with code -9" in text
        assert f"NATS server {dead['name']} started again on {dead['url']}" in text
    finally:
        supervisor.stop()
    state = read_state(supervisor.data_dir)
    assert state is not None and state["running"] is False
    pids = [(n["pid"], n["pid_create_time"]) for n in state["nats"]["nodes"]]
    pids += [(i["pid"], i["pid_create_time"]) for i in state["services"].values()]
    assert not [pid for pid, created in pids if process_alive(pid, created)]


def _written_envs(data_dir: Path, *, expected: int) -> dict[tuple[str, str], dict[str, str]]:
    for _ in range(300):
        files = list(data_dir.glob("env-*.json"))
        if len(files) == expected:
            break
        time.sleep(0.1)
    envs = [json.loads(f.read_text()) for f in data_dir.glob("env-*.json")]
    assert len(envs) == expected
    return {(env["service"], env["port"]): env for env in envs}


async def _streams_at_three_replicas(env: dict[str, str], nodes: list[dict[str, str]]) -> None:
    for node in nodes:  # one at a time: the user is configured on each server
        nc = await nats.connect(
            node["url"], user=env["LECTERN_NATS_USER"], password=env["LECTERN_NATS_PASSWORD"]
        )
        await nc.close()
    servers = env["LECTERN_NATS_URL"].split(",")
    nc = await nats.connect(
        servers, user=env["LECTERN_NATS_USER"], password=env["LECTERN_NATS_PASSWORD"]
    )
    try:
        await ensure_streams(nc.jetstream(), replicas=int(env["LECTERN_STREAM_REPLICAS"]))
        info = await nc.jetstream().stream_info("LECTERN_DOCUMENTS")
        assert info.config.num_replicas == 3
        assert info.cluster is not None and len(info.cluster.replicas or []) == 2
    finally:
        await nc.close()


async def _admin_reaches_jetstream(admin_url: str) -> None:
    """The operator's URL (every server, with the admin user's password) reaches JetStream."""
    nc = await nats.connect(admin_url.split(","))
    try:
        account = json.loads((await nc.request("$JS.API.INFO", b"", timeout=5.0)).data)
        assert "error" not in account, account
    finally:
        await nc.close()


def _cluster_size(monitor_url: str) -> int:
    """The JetStream meta group's size, as a server's monitoring endpoint reports it."""
    with urllib.request.urlopen(f"{monitor_url}/jsz", timeout=5) as response:
        size: int = json.load(response)["meta_cluster"]["cluster_size"]
        return size
