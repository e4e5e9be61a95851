"""pytest plugin: real NATS (JetStream) and Postgres (pgvector) for the whole session.

By default both are the embedded ones (the same code ``lectern up`` runs). When a Docker
engine is reachable, or ``LECTERN_TEST_BACKEND=docker`` is set, testcontainers starts
``pgvector/pgvector`` and ``nats`` (with JetStream) instead. ``LECTERN_TEST_BACKEND=embedded``
forces the embedded ones. Migrations run once per session. Tests isolate themselves with
the ``tenant_id`` fixture (a fresh tenant each) and unique subjects / durable names; each
module starts with an empty uploads queue (the ingest consumer's work queue).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

LOCAL_EMBEDDING_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
LOCAL_EMBEDDING_DIM = 384


@dataclass(frozen=True)
class Servers:
    """Where the session's servers listen."""

    nats_url: str
    database_url: str
    backend: str


#: the session's servers while they run (one entry), for the module-start clean-up below
_RUNNING: list[Servers] = []


def _docker_available() -> bool:
    try:
        import docker

        client = docker.from_env(timeout=2)
        client.ping()
        return True
    except Exception:
        return False


def shared_data_dir() -> Path:
    """``../shared/data`` beside the repository (present in CI)."""
    here = Path(__file__).resolve()
    for parent in here.parents:
        candidate = parent.parent / "shared" / "data"
        if (parent / ".git").exists() or (parent / "Makefile").exists():
            return candidate
    return Path.cwd().parent / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The shared test material; skips the test with a clear message where it is absent."""
    path = shared_data_dir()
    if not path.is_dir():
        pytest.skip(f"shared test material not found at {path} (CI provides ../shared/data)")
    return path


def _start_docker(stack: list[Any]) -> Servers:
    from testcontainers.core.container import DockerContainer
    from testcontainers.core.waiting_utils import wait_for_logs
    from testcontainers.postgres import PostgresContainer

    pg = PostgresContainer("pgvector/pgvector:pg17", driver=None)
    pg.start()
    stack.append(pg)
    nats = DockerContainer("nats:2.11").with_command("-js").with_exposed_ports(4222)
    nats.start()
    stack.append(nats)
    wait_for_logs(nats, "Server is ready", timeout=30)
    nats_url = f"nats://{nats.get_container_host_ip()}:{nats.get_exposed_port(4222)}"
    return Servers(nats_url=nats_url, database_url=pg.get_connection_url(), backend="docker")


def _start_embedded(stack: list[Any], base: Path) -> Servers:
    from lectern_common.runtime import EmbeddedNats, EmbeddedPostgres

    pg = EmbeddedPostgres(base / "pg", run_as=os.environ.get("LECTERN_EMBEDDED_PG_USER"))
    pg.start()
    stack.append(pg)
    nats = EmbeddedNats(base / "nats")
    nats.start()
    stack.append(nats)
    return Servers(nats_url=nats.url, database_url=pg.dsn, backend="embedded")


@pytest.fixture(scope="session")
def lectern_servers() -> Iterator[Servers]:
    """Session-wide NATS + Postgres, migrated."""
    import asyncio

    from lectern_common.db import migrate

    choice = os.environ.get("LECTERN_TEST_BACKEND", "auto")
    use_docker = choice == "docker" or (choice == "auto" and _docker_available())
    stack: list[Any] = []
    base = Path(tempfile.mkdtemp(prefix="lectern-test-"))
    os.chmod(base, 0o755)  # noqa: S103 - the unprivileged Postgres account must traverse it
    try:
        servers = _start_docker(stack) if use_docker else _start_embedded(stack, base)
        asyncio.run(
            migrate(
                servers.database_url,
                embedding_model=LOCAL_EMBEDDING_MODEL,
                embedding_dim=LOCAL_EMBEDDING_DIM,
            )
        )
        _RUNNING.append(servers)
        yield servers
    finally:
        _RUNNING.clear()
        for item in reversed(stack):
            item.stop()
        shutil.rmtree(base, ignore_errors=True)


async def _drop_uploads(nats_url: str) -> None:
    """Empty the uploads' work queue (the stream of ``documents.uploaded``), if declared."""
    import nats
    from nats.js.errors import NotFoundError

    from lectern_common.broker import stream_for
    from lectern_common.events.base import Subjects

    nc = await nats.connect(nats_url)
    try:
        await nc.jetstream().purge_stream(stream_for(Subjects.DOCUMENTS_UPLOADED).name)
    except NotFoundError:
        pass  # no module has declared the streams yet
    finally:
        await nc.close()


@pytest.fixture(scope="module", autouse=True)
def _no_uploads_of_another_module() -> None:
    """Each test module starts with an empty uploads queue. Uploads a module left undone (its
    ingest consumer stopped first, or it had none) went to the next module's consumer in the
    same xdist worker: in a CI run (2026-12-05) a test's 4-page PDF waited over 60 s, never
    started, behind two such uploads, redelivered. Nothing of the previous module runs by now;
    the session's servers are not started for this."""
    import asyncio

    if _RUNNING:
        asyncio.run(_drop_uploads(_RUNNING[0].nats_url))


@pytest.fixture(scope="session")
def nats_url(lectern_servers: Servers) -> str:
    """URL of the session's NATS server (JetStream on)."""
    return lectern_servers.nats_url


@pytest.fixture
async def postgres_proxy(database_url: str) -> AsyncIterator[tuple[Any, str]]:
    """A TCP proxy in front of the session's Postgres (``lectern_testing.pgproxy``), for
    outage tests, and the DSN through it."""
    from lectern_testing.pgproxy import postgres_proxy as running

    async with running(database_url) as proxy:
        yield proxy


@pytest.fixture(scope="session")
def database_url(lectern_servers: Servers) -> str:
    """DSN of the session's migrated Postgres."""
    return lectern_servers.database_url


@pytest.fixture
async def fresh_database(database_url: str) -> AsyncIterator[str]:
    """DSN of an empty database of its own on the session's server, dropped afterwards (for
    tests that migrate from scratch or change what every table holds, like a re-index)."""
    from urllib.parse import urlsplit, urlunsplit

    import asyncpg

    async def admin(sql: str) -> None:
        conn = await asyncpg.connect(database_url)
        try:
            await conn.execute(sql)
        finally:
            await conn.close()

    name = f"lectern_fresh_{uuid.uuid4().hex[:12]}"
    await admin(f"CREATE DATABASE {name}")
    try:
        yield urlunsplit(urlsplit(database_url)._replace(path=f"/{name}"))
    finally:
        await admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture
async def fresh_pool(fresh_database: str) -> AsyncIterator[Any]:
    """A pool on a migrated database of the test's own (``fresh_database``): for a test whose
    outcome depends on all of a table (the planner's statistics, the outbox's pending rows),
    which the suite's shared database fills with every other test's rows."""
    from lectern_common.db import create_pool, migrate

    await migrate(
        fresh_database, embedding_model=LOCAL_EMBEDDING_MODEL, embedding_dim=LOCAL_EMBEDDING_DIM
    )
    pool = await create_pool(fresh_database, min_size=1, max_size=4)
    try:
        yield pool
    finally:
        await pool.close()


@pytest.fixture(scope="session")
async def db_pool(database_url: str) -> AsyncIterator[Any]:
    """A session-wide asyncpg pool with the pgvector codecs."""
    from lectern_common.db import create_pool

    pool = await create_pool(database_url, min_size=1, max_size=20)
    yield pool
    await pool.close()


@pytest.fixture(scope="session")
async def jetstream(nats_url: str) -> AsyncIterator[Any]:
    """A raw nats-py JetStream context with Lectern's streams declared."""
    import nats

    from lectern_common.broker import ensure_streams

    nc = await nats.connect(nats_url)
    js = nc.jetstream()
    await ensure_streams(js)
    yield js
    await nc.drain()


@pytest.fixture
def tenant_id() -> str:
    """A tenant no other test uses."""
    return f"t-{uuid.uuid4().hex[:12]}"
