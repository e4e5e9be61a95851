"""The gateway app: the only public HTTP entry (auth, documents, search, chat)."""

from __future__ import annotations

from fastapi import FastAPI
from opentelemetry import trace

from lectern_common.service import ServiceState, create_service_app
from lectern_gateway import runtime
from lectern_gateway.auth import TokenVerifier
from lectern_gateway.chat import routes as chat
from lectern_gateway.classes import routes as classes
from lectern_gateway.config import Settings
from lectern_gateway.documents import chunks, lifecycle, outcomes
from lectern_gateway.documents import routes as documents
from lectern_gateway.feedback import flags, gaps
from lectern_gateway.keys import routes as api_keys
from lectern_gateway.lti import routes as lti
from lectern_gateway.memories import routes as memories
from lectern_gateway.personas import routes as personas
from lectern_gateway.privacy import routes as privacy
from lectern_gateway.problems import RejectNulBytes, install_problem_handlers
from lectern_gateway.quality import routes as quality
from lectern_gateway.review import routes as review
from lectern_gateway.search import routes as search
from lectern_gateway.sessions import routes as sessions
from lectern_gateway.study import curriculum
from lectern_gateway.study import routes as study
from lectern_gateway.tenant import routes as tenant
from lectern_gateway.web import dev
from lectern_gateway.web import routes as ui
from lectern_gateway.webhooks import routes as webhooks

DESCRIPTION = """Lectern's public API: upload course material, search it, and chat with a tutor
that answers from it with citations. Authenticate with `Authorization: Bearer <JWT>`, or
with `X-API-Key: <key>` (machine clients; admins create keys at `POST /v1/api-keys`)."""


def create_app(
    settings: Settings, *, tracer_provider: trace.TracerProvider | None = None
) -> FastAPI:
    """Build the broker and the FastAPI app with every route (HTTP only: the background
    loops run in the worker process, ``lectern_gateway.worker``).

    HTTP requests and the NATS requests made while serving them share one trace, recorded by
    ``tracer_provider`` (tests pass their own) or else the global provider.
    """
    broker = runtime.broker_for(settings, tracer_provider=tracer_provider)

    async def startup(state: ServiceState) -> None:
        await runtime.start(state, settings)

    async def shutdown(state: ServiceState) -> None:
        await runtime.stop(state)

    app = create_service_app(
        settings=settings,
        broker=broker,
        title="Lectern gateway",
        description=DESCRIPTION,
        on_startup=startup,
        on_shutdown=shutdown,
        docs=True,
        tracer_provider=tracer_provider,
        outbox="gateway",
        consumers=outcomes.consumers(),
    )
    # every gateway process writes ingest's outcomes to its documents (one shared consumer)
    outcomes.subscribe(broker, app.state.lectern)
    app.state.authenticator = TokenVerifier(
        secret=settings.effective_jwt_secret,
        jwks_url=settings.jwks_url,
        audience=settings.jwt_audience,
        issuer=settings.jwt_issuer,
        jwks_cache_s=settings.jwks_cache_s,
    )
    install_problem_handlers(app)
    app.add_middleware(RejectNulBytes)
    app.include_router(documents.router)
    app.include_router(lifecycle.router)
    app.include_router(search.router)
    app.include_router(chat.router)
    app.include_router(memories.router)
    app.include_router(privacy.router)
    app.include_router(sessions.router)
    app.include_router(flags.router)
    app.include_router(gaps.router)
    app.include_router(chunks.router)
    app.include_router(api_keys.router)
    app.include_router(classes.router)
    app.include_router(tenant.router)
    app.include_router(personas.router)
    app.include_router(quality.router)
    app.include_router(review.router)
    app.include_router(study.router)
    app.include_router(curriculum.router)
    app.include_router(webhooks.router)
    app.include_router(lti.router)
    app.include_router(dev.router)
    app.include_router(ui.router)
    return app
