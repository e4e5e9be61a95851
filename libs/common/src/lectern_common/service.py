"""What every service process shares: start-up, health, readiness and graceful shutdown.

A service is a FastAPI app (health endpoints for workers, the whole API for the gateway)
served by uvicorn, with a FastStream broker started in its lifespan. Start-up order:
telemetry -> NATS (streams declared idempotently) -> Postgres (schema present) -> the
service's own resources (models) -> subscribers start taking work. On SIGTERM uvicorn runs
the shutdown half: subscribers stop, in-flight handlers finish (FastStream's graceful
timeout), then the pool closes.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import asyncpg
import uvicorn
from fastapi import FastAPI
from fastapi.responses import JSONResponse, Response
from faststream.nats import NatsBroker
from opentelemetry import trace
from prometheus_client import start_http_server

from lectern_common import metrics
from lectern_common.broker_startup import declare_streams, start_broker
from lectern_common.db import ReadPools, create_pool
from lectern_common.db.migrate import applied_migrations, load_migrations
from lectern_common.db.pool import close_pool
from lectern_common.db.types import Pool
from lectern_common.errors import ConfigurationError
from lectern_common.outbox import OutboxRelay, publishable_subjects
from lectern_common.settings import ServiceHttpSettings
from lectern_common.telemetry import (
    Telemetry,
    configure_logging,
    instrument_http_app,
    prometheus_scrape,
    setup_telemetry,
)

log = logging.getLogger(__name__)

ReadinessCheck = Callable[[], Awaitable[str | None]]


@dataclass
class ServiceState:
    """Resources of a running service, kept on ``app.state.lectern``."""

    settings: ServiceHttpSettings
    broker: NatsBroker
    #: whether the service connects to Postgres at all (the re-ranker does not)
    database: bool = True
    #: the primary's pool, once started (``db()`` in code that runs after start-up)
    pool: Pool | None = None
    #: the pool reads that a read replica may serve use (``LECTERN_DATABASE_READ_URL``)
    reads: ReadPools | None = None
    telemetry: Telemetry | None = None
    #: the service's typed dependencies or domain object (the gateway's ``GatewayDeps``,
    #: ingest's ``IngestWorker``), set by its start-up hook for its routes and tests
    deps: object = None
    #: loops started with ``spawn``, cancelled at shutdown before ``on_shutdown`` runs
    background: dict[str, asyncio.Task[None]] = field(default_factory=dict)
    checks: dict[str, ReadinessCheck] = field(default_factory=dict)
    started_at: float = field(default_factory=time.monotonic)
    accepting: bool = False
    #: the relay publishing this service's outbox (``outbox=`` of ``create_service_app``)
    outbox: OutboxRelay | None = None
    #: the app is its process's only service (``run_service``): start-up may tune the
    #: process-wide garbage collector (not when tests host several apps in one process)
    own_process: bool = False

    def db(self) -> Pool:
        """The primary's pool (the service has started)."""
        if self.pool is None:
            raise RuntimeError("the service has not connected to its database")
        return self.pool

    def spawn(self, name: str, work: Coroutine[Any, Any, None]) -> None:
        """Run ``work`` in the background until the service stops."""
        self.background[name] = asyncio.create_task(work, name=name)

    async def stop_background(self) -> None:
        """Cancel every loop ``spawn`` started and wait for each to end."""
        tasks = list(self.background.values())
        self.background.clear()
        await cancel_and_wait(tasks)


async def cancel_and_wait(tasks: Sequence[asyncio.Task[Any]], *, again_s: float = 1.0) -> None:
    """Cancel ``tasks`` and wait for each to end. A task still running ``again_s`` later has
    swallowed its cancellation (``asyncio.wait_for`` before Python 3.12 returns the result of
    a future that completed as it was cancelled) and is cancelled again, rather than the
    shutdown waiting for it for ever."""
    pending = {task for task in tasks if not task.done()}
    while pending:
        for task in pending:
            task.cancel()
        _, pending = await asyncio.wait(pending, timeout=again_s)
    await asyncio.gather(*tasks, return_exceptions=True)


Hook = Callable[[ServiceState], Awaitable[None]]


#: young-generation collections at 700 allocations (CPython's default) traverse the
#: objects of every request in flight, again and again; most of them die by reference
#: counting before a larger threshold is reached (the retriever under load: collections in
#: 6 s fell from ~170 taking 120 ms to 1-2 taking 4-23 ms)
GC_YOUNG_THRESHOLD = 10_000


def settle_garbage_collector() -> None:
    """Once start-up has loaded the models and libraries: move everything alive now out of
    the collector's sight (``gc.freeze``: a full collection no longer walks the ~330k
    objects of the libraries, ~200 ms each time in the retriever), and collect the young
    generation less often."""
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, older, oldest)


async def wait_for_schema(dsn: str, *, timeout: float) -> None:
    """Wait until Postgres answers and every packaged migration is applied."""
    wanted = {m.version for m in load_migrations()}
    deadline = time.monotonic() + timeout
    last_error = "not tried"
    while time.monotonic() < deadline:
        try:
            conn = await asyncpg.connect(dsn, timeout=5)
            try:
                done = set(await applied_migrations(conn))
            finally:
                await conn.close()
            if wanted <= done:
                return
            last_error = f"migrations pending: {sorted(wanted - done)} (run `lectern migrate`)"
        except (OSError, asyncpg.PostgresError, TimeoutError) as exc:
            last_error = str(exc)
        await asyncio.sleep(1.0)
    raise ConfigurationError(f"Postgres not ready within {timeout} s: {last_error}")


def create_service_app(
    *,
    settings: ServiceHttpSettings,
    broker: NatsBroker,
    title: str,
    description: str = "",
    on_startup: Hook | None = None,
    on_shutdown: Hook | None = None,
    startup_timeout: float = 120.0,
    docs: bool = False,
    tracer_provider: trace.TracerProvider | None = None,
    outbox: str | None = None,
    consumers: Sequence[tuple[str, str]] = (),
    database: bool = True,
) -> FastAPI:
    """A FastAPI app with ``/healthz`` and ``/readyz`` whose lifespan runs the broker.

    Every other request gets a server span continuing the caller's W3C trace context (with
    ``tracer_provider``, else the global one), so the broker's requests made while handling
    it belong to the same trace. ``outbox`` names the service (a key of
    ``nats_auth.SERVICE_PERMISSIONS``) whose outbox rows this app's relay publishes;
    ``consumers`` are the (stream, durable) JetStream consumers whose lag it reports.
    Without ``database`` (a service whose data all comes over NATS: the re-ranker) no pool
    is opened, nor the schema waited for, and readiness does not ask Postgres.
    """
    state = ServiceState(settings=settings, broker=broker, database=database)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await _connect(state, startup_timeout=startup_timeout)
        loops: list[asyncio.Task[None]] = []
        try:
            if on_startup is not None:
                await on_startup(state)
            if state.own_process:
                settle_garbage_collector()
            await start_broker(broker, timeout=startup_timeout)
            _start_loops(state, loops, outbox=outbox, consumers=consumers)
            state.accepting = True
            log.info("%s ready", settings.service_name)
            yield
        finally:
            await _shut_down(state, loops, on_shutdown=on_shutdown)

    app = FastAPI(
        title=title,
        description=description,
        version="0.1.0",
        lifespan=lifespan,
        docs_url="/docs" if docs else None,
        redoc_url=None,
        openapi_url="/openapi.json" if docs else None,
    )
    app.state.lectern = state
    _add_health_routes(app, state)
    instrument_http_app(app, tracer_provider=tracer_provider)
    return app


async def _connect(state: ServiceState, *, startup_timeout: float) -> None:
    """Start-up up to the service's own resources: logging, telemetry, NATS, Postgres (when
    the service has a database)."""
    settings = state.settings
    configure_logging(
        level=settings.log_level,
        json_logs=settings.log_json,
        service_name=settings.service_name,
    )
    state.telemetry = setup_telemetry(settings)
    await state.broker.connect()
    await declare_streams(
        state.broker.config.connection_state.stream,
        replicas=settings.stream_replicas,
        timeout=startup_timeout,
    )
    if not state.database:
        return
    await wait_for_schema(settings.database_url, timeout=startup_timeout)
    state.pool = await create_pool(
        settings.database_url,
        min_size=settings.db_pool_min,
        max_size=settings.db_pool_max,
        timeout=settings.db_connect_timeout_s,
        command_timeout=settings.db_command_timeout_s,
    )
    state.reads = await ReadPools.open(primary=state.pool, settings=settings)


def _start_loops(
    state: ServiceState,
    loops: list[asyncio.Task[None]],
    *,
    outbox: str | None,
    consumers: Sequence[tuple[str, str]],
) -> None:
    """Start the outbox relay and the consumer-lag watch (when asked for), into ``loops``."""
    broker = state.broker
    if outbox is not None:
        state.outbox = OutboxRelay(
            pool=state.db(),
            broker=broker,
            database_url=state.settings.database_url,
            subjects=publishable_subjects(outbox),
            poll_s=state.settings.outbox_poll_s,
            first_backoff_s=state.settings.outbox_first_backoff_s,
            max_backoff_s=state.settings.outbox_max_backoff_s,
            publish_timeout_s=state.settings.outbox_publish_timeout_s,
        )
        loops.append(asyncio.create_task(state.outbox.run(), name=f"outbox-{outbox}"))
    if consumers:
        loops.append(
            asyncio.create_task(
                watch_consumers(broker.config.connection_state.stream, consumers),
                name="consumer-lag",
            )
        )


async def _shut_down(
    state: ServiceState, loops: Sequence[asyncio.Task[None]], *, on_shutdown: Hook | None
) -> None:
    """The shutdown half: stop taking work, end the loops, drain the broker, close pools."""
    state.accepting = False
    await state.stop_background()
    await cancel_and_wait(loops)
    try:
        await state.broker.stop()
    except Exception as exc:  # NATS unreachable: nothing left to drain
        log.warning("broker stop: %s", exc)
    if on_shutdown is not None:
        await on_shutdown(state)
    if state.reads is not None:
        await state.reads.close()
    if state.pool is not None:
        await close_pool(state.pool)
    if state.telemetry is not None:
        state.telemetry.shutdown()


def _add_health_routes(app: FastAPI, state: ServiceState) -> None:
    """``/healthz``, ``/readyz`` and (when the settings ask) ``/metrics``."""
    settings = state.settings

    @app.get("/healthz", tags=["health"], summary="Liveness: the process is alive")
    async def healthz() -> dict[str, str]:
        return {"status": "alive", "service": settings.service_name}

    @app.get("/readyz", tags=["health"], summary="Readiness: NATS, Postgres and models ready")
    async def readyz() -> JSONResponse:
        checks = await readiness(state)
        ok = all(v == "ok" for v in checks.values())
        return JSONResponse(
            {"status": "ready" if ok else "not ready", "service": settings.service_name,
             "checks": checks},
            status_code=200 if ok else 503,
        )  # fmt: skip

    if settings.metrics_on_http:

        @app.get("/metrics", tags=["health"], summary="Prometheus scrape of the service's metrics")
        async def prometheus_metrics() -> Response:
            body, content_type = prometheus_scrape()
            return Response(body, media_type=content_type)


async def watch_consumers(
    jetstream: Any, consumers: Sequence[tuple[str, str]], *, every_s: float = 10.0
) -> None:
    """Report the lag of durable consumers (``lectern.consumer.pending`` / ``ack_pending``)
    every ``every_s``, until cancelled."""
    while True:
        for stream, durable in consumers:
            try:
                info = await jetstream.consumer_info(stream, durable)
            except Exception as exc:  # not created yet, NATS away: the next round retries
                log.debug("consumer %s/%s: %s", stream, durable, exc)
                continue
            labels = {"stream": stream, "consumer": durable}
            metrics.CONSUMER_PENDING.set(float(info.num_pending or 0), **labels)
            metrics.CONSUMER_ACK_PENDING.set(float(info.num_ack_pending or 0), **labels)
        await asyncio.sleep(every_s)


async def _postgres_check(pool: Pool | None) -> str:
    """``ok`` when the pool answers a query within 2 s, else why not."""
    if pool is None:
        return "not connected"
    try:
        async with asyncio.timeout(2.0):
            await pool.fetchval("SELECT 1")
    except Exception as exc:
        return f"error: {exc}"
    return "ok"


async def readiness(state: ServiceState) -> dict[str, str]:
    """Run every readiness check; each gives ``ok`` or a reason."""
    results: dict[str, str] = {}
    if not state.accepting:
        results["service"] = "starting or stopping"
    try:
        results["nats"] = "ok" if await state.broker.ping(timeout=1.0) else "unreachable"
    except Exception as exc:
        results["nats"] = f"error: {exc}"
    if state.database:
        results["postgres"] = await _postgres_check(state.pool)
    for name, check in state.checks.items():
        try:
            problem = await check()
        except Exception as exc:
            problem = f"error: {exc}"
        results[name] = problem or "ok"
    return results


def run_service(app: FastAPI, settings: ServiceHttpSettings) -> None:
    """Serve the app until SIGTERM/SIGINT, then shut down gracefully (and the Prometheus
    scrape on ``metrics_port``, when set, from a thread of its own)."""
    app.state.lectern.own_process = True
    if settings.metrics_port is not None:
        start_http_server(settings.metrics_port)
    uvicorn.run(
        app,
        host=settings.health_host,
        port=settings.http_port,
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=int(settings.graceful_timeout_s),
        timeout_keep_alive=int(settings.keep_alive_s),
    )
