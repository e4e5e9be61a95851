"""The gateway's worker process (``lectern-gateway worker``): the background work of the
gateway, out of the HTTP replicas.

Same package and image as the HTTP gateway, another command. It builds the same
``GatewayDeps`` (a gap closure answers a question as a turn does, with the same models) and
runs the loops an HTTP replica no longer runs: the idle-session sweep, gap closures, the
retention sweep, and webhook dispatch (the durable consumers of the tenant-event streams
write deliveries to Postgres; its ``DeliveryWorker`` sends them). It also queues the
conflicting sources ingest finds (``review.conflicts``: a durable consumer of
``documents.conflicts``) and, as every gateway process does, writes ingest's outcomes to the
documents (``documents.outcomes``). Each loop claims its rows
``FOR UPDATE SKIP LOCKED`` (or, for deliveries, with a lease), so any number of workers run
side by side. Its HTTP server answers only ``/healthz``, ``/readyz`` (ready while NATS,
Postgres and every loop are alive) and ``/metrics``; on SIGTERM the deliveries in flight are
finished before the pool closes.
"""

from __future__ import annotations

from fastapi import FastAPI
from opentelemetry import trace

from lectern_common.service import ReadinessCheck, ServiceState, create_service_app
from lectern_gateway import runtime
from lectern_gateway.config import Settings
from lectern_gateway.deps import GatewayDeps, gateway_of
from lectern_gateway.documents import outcomes
from lectern_gateway.review import conflicts as review_conflicts
from lectern_gateway.webhooks import dispatcher as webhook_dispatch

WORKER_SERVICE_NAME = "lectern-gateway-worker"


def worker_settings(settings: Settings) -> Settings:
    """``settings`` named as the worker in logs, traces and metrics, unless a name was set."""
    if "service_name" in settings.model_fields_set:
        return settings
    return settings.model_copy(update={"service_name": WORKER_SERVICE_NAME})


def create_worker_app(
    settings: Settings, *, tracer_provider: trace.TracerProvider | None = None
) -> FastAPI:
    """The worker: the gateway's broker, dependencies and background loops, health only."""
    settings = worker_settings(settings)
    broker = runtime.broker_for(settings, tracer_provider=tracer_provider)

    async def startup(state: ServiceState) -> None:
        # the models load on the first gap closure that answers, not at every start
        gateway = await runtime.start(state, settings, lazy=True)
        runtime.start_loops(state, gateway)
        state.checks["loops"] = loops_alive(state, gateway)

    async def shutdown(state: ServiceState) -> None:
        await runtime.stop(state)

    app = create_service_app(
        settings=settings,
        broker=broker,
        title="Lectern gateway worker",
        description=(
            "The gateway's background work: sweeps, gap closures, webhook deliveries, the "
            "conflicting sources ingest finds."
        ),
        on_startup=startup,
        on_shutdown=shutdown,
        tracer_provider=tracer_provider,
        # the sweeps write events (sessions ended, answers of gap closures) to the outbox
        outbox="gateway",
        consumers=[
            *outcomes.consumers(),
            *review_conflicts.consumers(),
            *(webhook_dispatch.consumers() if settings.webhook_dispatch else ()),
        ],
    )
    state: ServiceState = app.state.lectern
    outcomes.subscribe(broker, state)
    review_conflicts.subscribe(broker, state)
    if settings.webhook_dispatch:
        webhook_dispatch.subscribe(broker, state, lambda: gateway_of(state).wake_webhooks())
    return app


def loops_alive(state: ServiceState, gateway: GatewayDeps) -> ReadinessCheck:
    """A readiness check: which of the worker's loops ended (a bug: each runs until stopped)."""

    async def check() -> str | None:
        ended = [name for name, task in state.background.items() if task.done()]
        deliveries = gateway.webhook_worker
        if deliveries is not None and not deliveries.running:
            ended.append("lectern-webhook-deliveries")
        if gateway.score_worker is not None and not gateway.score_worker.running:
            ended.append("lectern-lti-scores")
        return f"ended: {', '.join(ended)}" if ended else None

    return check
