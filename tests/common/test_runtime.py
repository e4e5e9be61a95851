"""The embedded servers: loopback only, no silent system users, data that survives."""

import asyncio
import json
import os
import pwd
import socket
import subprocess
import sys
import urllib.request
import uuid
from pathlib import Path

import asyncpg
import psutil
import pytest

from lectern_common.errors import ConfigurationError
from lectern_common.runtime import EmbeddedNats, EmbeddedPostgres
from lectern_common.runtime.nats import nats_server_binary

pytestmark = pytest.mark.integration


def test_nats_binary_comes_from_the_virtualenv() -> None:
    assert nats_server_binary().exists()


def test_nats_listens_on_loopback_only(tmp_path: Path) -> None:
    server = EmbeddedNats(tmp_path / "nats")
    server.start()
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=1):
            pass
        with urllib.request.urlopen(f"{server.monitor_url}/varz", timeout=2) as response:
            varz = json.load(response)
        assert varz["host"] == "127.0.0.1"
        assert varz["jetstream"]["config"]["store_dir"].startswith(str(tmp_path))
        external = [
            a.address
            for addrs in psutil.net_if_addrs().values()
            for a in addrs
            if a.family == socket.AF_INET and not a.address.startswith("127.")
        ]
        for address in external:
            with pytest.raises(ConnectionRefusedError):
                socket.create_connection((address, server.port), 0.5).close()
    finally:
        server.stop()


@pytest.mark.skipif(os.geteuid() != 0, reason="root-only behaviour")
def test_as_root_a_missing_account_is_refused_not_created(tmp_path: Path) -> None:
    name = f"lectern{uuid.uuid4().hex[:6]}"
    with pytest.raises(ConfigurationError, match="does not exist"):
        EmbeddedPostgres(tmp_path, run_as=name)
    with pytest.raises(KeyError):
        pwd.getpwnam(name)


def test_postgres_data_survives_a_restart(tmp_path: Path) -> None:
    base = Path("/tmp") / f"lectern-rt-{uuid.uuid4().hex[:6]}"
    os.makedirs(base)
    os.chmod(base, 0o755)  # noqa: S103 - the unprivileged Postgres account must traverse it
    server = EmbeddedPostgres(base)
    server.start()
    try:
        asyncio.run(_write(server.dsn))
    finally:
        server.stop()
    again = EmbeddedPostgres(base)
    again.start()
    try:
        assert asyncio.run(_read(again.dsn)) == "kept"
        if os.geteuid() == 0:
            owner = (base / "pgdata").stat().st_uid
            assert pwd.getpwuid(owner).pw_name == "nobody"
    finally:
        again.stop()


async def _write(dsn: str) -> None:
    conn = await asyncpg.connect(dsn)
    await conn.execute("CREATE TABLE probe (v text); INSERT INTO probe VALUES ('kept')")
    await conn.close()


async def _read(dsn: str) -> str:
    conn = await asyncpg.connect(dsn)
    value: str = await conn.fetchval("SELECT v FROM probe")
    await conn.close()
    return value


def test_free_ports_handed_out_in_a_row_are_all_different() -> None:
    # a stack's eight ports are chosen one after the other before any is bound: the kernel
    # giving the same ephemeral port twice put NATS on a service's port once
    from lectern_common.runtime.nats import free_port

    ports = [free_port() for _ in range(1000)]  # without the memory: ~18 repeats
    assert len(set(ports)) == len(ports)


def test_free_ports_are_drawn_below_the_kernels_ephemeral_range() -> None:
    # another process binding port 0 (or the kernel, for an outgoing connection) never gets a
    # port handed out here before its server binds it
    from lectern_common.runtime.nats import _ephemeral_low, free_port

    low = _ephemeral_low()
    ports = [free_port() for _ in range(50)]
    assert all(15000 <= port < low for port in ports), ports


def test_free_ports_of_two_processes_seeded_alike_differ() -> None:
    # Hypothesis seeds `random` per example: two test processes must still not draw alike
    draw = (
        "import random; random.seed(0); from lectern_common.runtime.nats import free_port; "
        "print(' '.join(str(free_port()) for _ in range(20)))"
    )
    first, second = (
        set(subprocess.run([sys.executable, "-c", draw], capture_output=True, text=True,
                           check=True).stdout.split())
        for _ in range(2)
    )  # fmt: skip
    assert len(first) == len(second) == 20
    assert len(first & second) <= 1, first & second
