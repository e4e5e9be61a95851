"""The BEIR harness's pieces run in this process, for benchmarks that need the services'
internals (a shared embedder, no process start-up): bare embedded NATS + Postgres, and the
ingest, gateway, retriever and re-ranker apps in-process. Only ``bench/`` and ``tests/`` may
import service packages; ``lectern eval`` drives the system as processes instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from lectern_common.embeddings import Embedder


@dataclass
class Stack:
    """Where to reach NATS and Postgres."""

    nats_url: str
    database_url: str


@contextlib.asynccontextmanager
async def embedded_stack(directory: Path | None = None) -> AsyncIterator[Stack]:
    """Embedded NATS + Postgres in a temporary directory, migrated, removed afterwards; or in
    ``directory``, kept (a later call on it starts on the same data)."""
    from lectern_common.db import migrate
    from lectern_common.embeddings import LOCAL_DIMENSION, LOCAL_MODEL_NAME
    from lectern_common.runtime import EmbeddedNats, EmbeddedPostgres

    if directory is None:
        base = Path(tempfile.mkdtemp(prefix="lectern-eval-"))
    else:
        base = directory  # an absolute path (relative ones would follow the working directory)
        os.makedirs(base, exist_ok=True)
    os.chmod(base, 0o755)  # noqa: S103 - the unprivileged Postgres account must traverse it
    pg = EmbeddedPostgres(base / "pg", run_as=os.environ.get("LECTERN_EMBEDDED_PG_USER"))
    nats = EmbeddedNats(base / "nats")
    try:
        await asyncio.to_thread(pg.start)
        await asyncio.to_thread(nats.start)
        await migrate(pg.dsn, embedding_model=LOCAL_MODEL_NAME, embedding_dim=LOCAL_DIMENSION)
        yield Stack(nats_url=nats.url, database_url=pg.dsn)
    finally:
        await asyncio.to_thread(nats.stop)
        await asyncio.to_thread(pg.stop)
        if directory is None:
            shutil.rmtree(base, ignore_errors=True)


S = TypeVar("S")


def quiet_settings(settings_type: Callable[..., S], servers: Stack, **extra: Any) -> S:
    """A service's settings on these servers, with no HTTP port and warnings-only logs."""
    return settings_type(
        nats_url=servers.nats_url, database_url=servers.database_url, http_port=0,
        log_json=False, log_level="WARNING", **extra,
    )  # fmt: skip


@contextlib.asynccontextmanager
async def in_process_ingest(servers: Stack, embedder: Embedder) -> AsyncIterator[None]:
    """The ingest service (its durable consumer) in this process, sharing the embedder."""
    from lectern_ingest.app import create_app
    from lectern_ingest.config import Settings

    settings = quiet_settings(
        Settings,
        servers,
        # a corpus of short documents: more of them in flight hides each one's round trips
        concurrency=4,
    )
    app = create_app(settings, embedder=embedder)
    async with app.router.lifespan_context(app):
        yield


@contextlib.asynccontextmanager
async def in_process_gateway(servers: Stack, tenant_id: str) -> AsyncIterator[Any]:
    """The gateway app in this process and an HTTP client on it, signed in as a teacher."""
    import httpx

    from lectern_gateway.app import create_app
    from lectern_gateway.auth import issue_token
    from lectern_gateway.config import Settings

    settings = quiet_settings(Settings, servers)
    app = create_app(settings)
    token = issue_token(
        secret=settings.effective_jwt_secret, tenant_id=tenant_id, user_id="lectern-eval",
        role="teacher", plan="pro",
    )  # fmt: skip
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app),
            base_url="http://lectern-eval",
            headers={"Authorization": f"Bearer {token}"},
            timeout=120.0,
        ) as client,
    ):
        yield client


@contextlib.asynccontextmanager
async def in_process_retriever(servers: Stack, embedder: Embedder) -> AsyncIterator[None]:
    from lectern_retriever.app import create_app
    from lectern_retriever.config import Settings

    settings = quiet_settings(Settings, servers)
    app = create_app(settings, embedder=embedder)
    async with app.router.lifespan_context(app):
        yield


@contextlib.asynccontextmanager
async def in_process_reranker(servers: Stack) -> AsyncIterator[None]:
    """The re-ranker service with its default settings, when it is installed."""
    try:
        from lectern_reranker.app import create_app
        from lectern_reranker.config import Settings
    except ImportError:  # the harness then notes that hybrid+rerank was skipped
        yield
        return
    settings = quiet_settings(Settings, servers)
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        yield
