"""A streaming read replica of the embedded Postgres, and reads that fall back to the primary.

One primary and a replica made with ``pg_basebackup -R`` from the packaged binaries (what
``lectern up --cluster`` runs): rows written on the primary reach the replica; ``ReadPools``
reads from the replica while it is healthy, from the primary while it is stopped or lagging
beyond the bound (no read fails), and from the replica again once it is back; the retriever's
real search path reads from the replica when ``LECTERN_DATABASE_READ_URL`` is set.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from lectern_common.db import ReadPools, create_pool, migrate
from lectern_common.embeddings import LocalEmbedder
from lectern_common.events import RetrieveRequest
from lectern_common.runtime import EmbeddedPostgres, EmbeddedReplica
from lectern_retriever.config import Settings as RetrieverSettings
from lectern_retriever.handlers import Retriever

pytestmark = pytest.mark.integration

MODEL = "sentence-transformers/all-MiniLM-L6-v2"


class Pair:
    """A primary and its streaming replica."""

    def __init__(self, base: Path) -> None:
        run_as = os.environ.get("LECTERN_EMBEDDED_PG_USER")
        self.primary = EmbeddedPostgres(base / "primary", run_as=run_as)
        self.replica = EmbeddedReplica(base / "replica", primary=self.primary, run_as=run_as)


@pytest.fixture(scope="module")
def pair() -> Iterator[Pair]:
    base = Path(tempfile.mkdtemp(prefix="lectern-replica-"))
    os.chmod(base, 0o755)  # noqa: S103 - the unprivileged Postgres account must traverse it
    servers = Pair(base)
    try:
        servers.primary.start()
        asyncio.run(migrate(servers.primary.dsn, embedding_model=MODEL, embedding_dim=384))
        started = time.monotonic()
        servers.replica.start()
        print(f"\nreplica made and started in {time.monotonic() - started:.2f} s")
        yield servers
    finally:
        servers.replica.stop()
        servers.primary.stop()
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
async def pools(pair: Pair) -> AsyncIterator[tuple[Any, Any]]:
    primary = await create_pool(pair.primary.dsn, min_size=1, max_size=4)
    replica = await create_pool(pair.replica.dsn, min_size=0, max_size=4, timeout=2.0)
    yield primary, replica
    await replica.close()
    await primary.close()


async def wait_until(predicate: Any, *, timeout: float = 10.0, every: float = 0.05) -> float:
    """Seconds until ``await predicate()`` is true (fails after ``timeout``)."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if await predicate():
            return time.monotonic() - started
        await asyncio.sleep(every)
    raise AssertionError(f"not true within {timeout} s")


async def test_a_row_written_on_the_primary_is_read_on_the_replica(pair: Pair) -> None:
    tenant = f"t-{uuid.uuid4().hex[:12]}"
    primary = await asyncpg.connect(pair.primary.dsn)
    replica = await asyncpg.connect(pair.replica.dsn)
    try:
        assert await replica.fetchval("SELECT pg_is_in_recovery()") is True
        await primary.execute("CREATE TABLE IF NOT EXISTS replica_probe (id text PRIMARY KEY)")
        await primary.execute("INSERT INTO replica_probe (id) VALUES ($1)", tenant)

        async def replicated() -> bool:
            try:
                found = await replica.fetchval("SELECT 1 FROM replica_probe WHERE id = $1", tenant)
            except asyncpg.UndefinedTableError:  # the CREATE TABLE is not replayed yet
                return False
            return bool(found == 1)

        took = await wait_until(replicated)
        print(f"\nrow visible on the replica {took * 1000:.0f} ms after the commit")
        with pytest.raises(asyncpg.ReadOnlySQLTransactionError):
            await replica.execute("INSERT INTO replica_probe (id) VALUES ('nope')")
    finally:
        await replica.close()
        await primary.close()


async def test_reads_move_to_the_primary_while_the_replica_is_stopped_and_return(
    pair: Pair, pools: tuple[Any, Any]
) -> None:
    primary, replica = pools
    reads = ReadPools(primary=primary, replica=replica, max_lag_s=5.0, check_every_s=0.2)

    async def served_by(pool: Any) -> bool:
        return bool(await pool.fetchval("SELECT pg_is_in_recovery()"))

    assert await reads.run(served_by) is True
    assert reads.last_target == "replica"

    # reads without pause while the replica stops and starts again: none may fail
    failures: list[BaseException] = []
    targets: list[tuple[float, str]] = []
    longest = 0.0
    stop = asyncio.Event()

    async def reader() -> None:
        nonlocal longest
        while not stop.is_set():
            began = time.monotonic()
            try:
                on_standby = await reads.run(served_by)
                longest = max(longest, time.monotonic() - began)
                assert reads.last_target == ("replica" if on_standby else "primary")
                targets.append((time.monotonic(), reads.last_target))
            except Exception as exc:
                failures.append(exc)
            await asyncio.sleep(0.01)

    task = asyncio.create_task(reader())
    await asyncio.sleep(0.3)
    stopped_at = time.monotonic()
    await asyncio.to_thread(pair.replica.stop)
    stop_took = time.monotonic() - stopped_at
    await asyncio.sleep(1.0)
    on_primary = [t for at, t in targets if at > stopped_at + stop_took]
    assert on_primary
    assert set(on_primary) == {"primary"}
    restarted_at = time.monotonic()
    await asyncio.to_thread(pair.replica.start)
    start_took = time.monotonic() - restarted_at
    back = await wait_until(lambda: _async(targets[-1][1] == "replica"), timeout=10.0)
    stop.set()
    await task
    assert not failures, failures
    assert reads.served["replica"] > 0
    assert reads.served["primary"] > 0
    print(
        f"\n{len(targets)} reads, 0 failed; replica stopped in {stop_took:.2f} s, started in "
        f"{start_took:.2f} s; longest read {longest * 1000:.0f} ms; reads back on the replica "
        f"{back:.2f} s after it was ready "
        f"(served: {dict(reads.served)})"
    )


async def _async(value: bool) -> bool:
    return value


async def test_a_replica_lagging_beyond_the_bound_is_left_until_it_catches_up(
    pair: Pair, pools: tuple[Any, Any]
) -> None:
    primary, replica = pools
    reads = ReadPools(primary=primary, replica=replica, max_lag_s=0.5, check_every_s=0.1)
    assert (await reads.choose())[0] == "replica"
    # an idle primary does not make an up-to-date replica look old
    await asyncio.sleep(1.0)
    assert (await reads.choose())[0] == "replica"
    assert reads.lag_s is not None
    assert reads.lag_s < 0.5
    await replica.execute("SELECT pg_wal_replay_pause()")
    try:
        tenant = f"t-{uuid.uuid4().hex[:12]}"
        await primary.execute("CREATE TABLE IF NOT EXISTS replica_probe (id text PRIMARY KEY)")
        await primary.execute("INSERT INTO replica_probe (id) VALUES ($1)", tenant)
        await primary.execute("SELECT pg_switch_wal()")  # the commit is flushed and sent

        async def on_primary() -> bool:
            return (await reads.choose())[0] == "primary"

        left_after = await wait_until(on_primary, timeout=5.0)
    finally:
        await replica.execute("SELECT pg_wal_replay_resume()")

    async def on_replica() -> bool:
        return (await reads.choose())[0] == "replica"

    back_after = await wait_until(on_replica, timeout=5.0)
    print(
        f"\nreplay paused: reads left the replica after {left_after:.2f} s (bound 0.5 s); "
        f"back {back_after:.2f} s after replay resumed"
    )


async def test_the_retriever_searches_the_replica(pair: Pair) -> None:
    from tests.retriever.conftest import add_document

    tenant = f"t-{uuid.uuid4().hex[:12]}"
    embedder = LocalEmbedder(torch_threads=1)
    primary = await create_pool(pair.primary.dsn, min_size=1, max_size=2)
    try:
        await add_document(
            primary,
            tenant_id=tenant,
            texts=["Mitosis produces two identical daughter cells.", "Rain falls from clouds."],
            embedder=embedder,
        )
    finally:
        await primary.close()
    settings = RetrieverSettings(
        nats_url="nats://127.0.0.1:1",
        database_url=pair.primary.dsn,
        database_read_url=pair.replica.dsn,
        http_port=0,
    )
    retriever = Retriever(settings=settings, embedder=embedder)
    await retriever.start()
    try:
        assert retriever.reads is not None
        request = RetrieveRequest(
            tenant_id=tenant, query="what does mitosis produce?", k=2, rewrite=False
        )

        async def found() -> bool:
            reply = await retriever.retrieve(request)
            return bool(reply.candidates) and "Mitosis" in reply.candidates[0].text

        await wait_until(found, timeout=10.0)
        assert retriever.reads.last_target == "replica"
        assert retriever.reads.served["primary"] == 0
    finally:
        await retriever.close()


def test_lectern_up_cluster_runs_a_replica_and_gives_its_url_to_the_readers() -> None:
    from lectern_cli.runtime.processes import READ_REPLICA_SERVICES
    from lectern_cli.runtime.supervisor import Supervisor

    base = Path(tempfile.mkdtemp(prefix="lectern-upc-"))
    os.chmod(base, 0o755)  # noqa: S103 - the unprivileged Postgres account must traverse it
    show_env = (
        "import os, sys, time; print('READ_URL=' + os.environ.get('LECTERN_DATABASE_READ_URL', "
        "'-'), flush=True); time.sleep(60)"
    )
    messages: list[str] = []
    supervisor = Supervisor(
        data_dir=base,
        services=("gateway", "retriever"),
        gateway_port=0,
        nats_port=0,
        nats_monitor_port=0,
        report=messages.append,
        command=lambda name: [sys.executable, "-c", show_env, name],
        graceful_timeout_s=1.0,
        cluster=True,
    )
    try:
        started = time.monotonic()
        supervisor.start()
        took = time.monotonic() - started
        replica = supervisor.postgres_replica
        assert replica is not None
        state = supervisor.state()
        assert state["postgres_replica"]["dsn"] == replica.dsn
        assert state["postgres_replica"]["pid"]
        assert "retriever" in READ_REPLICA_SERVICES
        assert "gateway" not in READ_REPLICA_SERVICES

        def logged(name: str) -> str:
            path = supervisor.children[name].log_path
            deadline = time.monotonic() + 15
            while "READ_URL=" not in path.read_text() and time.monotonic() < deadline:
                time.sleep(0.05)
            return path.read_text()

        for name in ("retriever", "retriever-2"):
            assert f"READ_URL={replica.dsn}" in logged(name)
        for name in ("gateway", "gateway-2"):
            assert "READ_URL=-" in logged(name)

        async def in_recovery() -> bool:
            conn = await asyncpg.connect(replica.dsn)
            try:
                return bool(await conn.fetchval("SELECT pg_is_in_recovery()"))
            finally:
                await conn.close()

        assert asyncio.run(in_recovery())
        print(f"\nlectern up --cluster: NATS, Postgres, migrations and the replica in {took:.1f} s")
    finally:
        supervisor.stop()
        shutil.rmtree(base, ignore_errors=True)
