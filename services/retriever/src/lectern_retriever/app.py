"""Retriever app: answers ``lectern.retrieve.v1`` in the ``lectern-retriever`` queue group."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

from lectern_common.broker import QUEUE_GROUPS, answer_errors, create_broker
from lectern_common.embeddings import Embedder
from lectern_common.events import RetrieveReply, RetrieveRequest, Subjects
from lectern_common.service import ServiceState, create_service_app
from lectern_retriever.config import Settings
from lectern_retriever.handlers import Retriever


def create_app(settings: Settings, *, embedder: Embedder | None = None) -> FastAPI:
    """Build the broker, the subscriber and the health app (``embedder``: reuse a loaded one)."""
    broker = create_broker(
        settings.nats_url,
        service_name=settings.service_name,
        credentials=settings.nats_credentials,
    )
    retriever = Retriever(settings=settings, embedder=embedder)

    async def startup(state: ServiceState) -> None:
        await retriever.start(state)
        state.checks["embedder"] = retriever.readiness

    async def shutdown(state: ServiceState) -> None:
        await retriever.close()

    app = create_service_app(
        settings=settings,
        broker=broker,
        title="Lectern retriever",
        on_startup=startup,
        on_shutdown=shutdown,
    )

    @broker.subscriber(
        Subjects.RETRIEVE,
        queue=QUEUE_GROUPS[Subjects.RETRIEVE],
        max_workers=settings.concurrency,
    )
    async def on_retrieve(body: dict[str, Any]) -> dict[str, Any]:
        """Ranked candidate chunks for a question."""
        return await answer_errors(RetrieveRequest, RetrieveReply, retriever.retrieve)(body)

    return app
