"""Reranker app: answers ``lectern.rerank.v1`` in the ``lectern-reranker`` queue group; asks
the retriever for the index's stored vectors (``lectern.index.vectors.v1``)."""

from __future__ import annotations

from fastapi import FastAPI
from faststream.nats import NatsBroker

from lectern_common.broker import QUEUE_GROUPS, answer, create_broker
from lectern_common.events import RerankReply, RerankRequest, Subjects
from lectern_common.service import ServiceState, create_service_app
from lectern_reranker.config import Settings
from lectern_reranker.handlers import Reranker


def create_app(settings: Settings) -> FastAPI:
    """Build the broker, the subscriber and the health app."""
    broker = create_broker(
        settings.nats_url,
        service_name=settings.service_name,
        credentials=settings.nats_credentials,
    )
    reranker = Reranker(settings=settings, broker=broker)

    async def startup(state: ServiceState) -> None:
        await reranker.start(state)
        state.checks["models"] = reranker.readiness

    # no database: the index's vectors come from the retriever (``lectern_reranker.index``)
    app = create_service_app(
        settings=settings, broker=broker, title="Lectern reranker", on_startup=startup,
        database=False,
    )  # fmt: skip

    subscribe(broker, reranker)
    return app


def subscribe(broker: NatsBroker, reranker: Reranker) -> None:
    """Register the re-ranker's responder on ``broker`` (an undecodable request is answered
    ``bad_input`` by the broker's ``InvalidMessages``)."""

    @broker.subscriber(Subjects.RERANK, queue=QUEUE_GROUPS[Subjects.RERANK])
    async def on_rerank(request: RerankRequest) -> RerankReply:
        """Final context for a question: ranked chunks, scorer and confidence."""
        return await answer(request, RerankReply, reranker.rerank)
