"""Retriever app: answers ``lectern.retrieve.v1`` in the ``lectern-retriever`` queue group."""

from __future__ import annotations

from fastapi import FastAPI
from faststream.nats import NatsBroker

from lectern_common.broker import QUEUE_GROUPS, answer, create_broker
from lectern_common.embeddings import Embedder
from lectern_common.events import (
    IndexChunksReply,
    IndexChunksRequest,
    IndexCountReply,
    IndexCountRequest,
    IndexMaterialReply,
    IndexMaterialRequest,
    IndexOutlineReply,
    IndexOutlineRequest,
    IndexTopicsReply,
    IndexTopicsRequest,
    IndexVectorsReply,
    IndexVectorsRequest,
    RetrieveReply,
    RetrieveRequest,
    Subjects,
)
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

    subscribe(broker, retriever)
    return app


def subscribe(broker: NatsBroker, retriever: Retriever) -> None:
    """Register the retriever's responders on ``broker``: search and the index's reads
    (``lectern.index.*``); an undecodable request is answered ``bad_input`` by the broker's
    ``InvalidMessages``."""

    @broker.subscriber(
        Subjects.RETRIEVE,
        queue=QUEUE_GROUPS[Subjects.RETRIEVE],
        max_workers=retriever.settings.concurrency,
    )
    async def on_retrieve(request: RetrieveRequest) -> RetrieveReply:
        """Ranked candidate chunks for a question."""
        return await answer(request, RetrieveReply, retriever.retrieve)

    @broker.subscriber(
        Subjects.INDEX_CHUNKS,
        queue=QUEUE_GROUPS[Subjects.INDEX_CHUNKS],
        max_workers=retriever.settings.concurrency,
    )
    async def on_chunks(request: IndexChunksRequest) -> IndexChunksReply:
        """Chunks by id (the source viewer; a turn's visible candidates)."""
        return await answer(request, IndexChunksReply, retriever.chunks)

    @broker.subscriber(Subjects.INDEX_COUNT, queue=QUEUE_GROUPS[Subjects.INDEX_COUNT])
    async def on_count(request: IndexCountRequest) -> IndexCountReply:
        """How many searchable chunks a persona's scope matches."""
        return await answer(request, IndexCountReply, retriever.count)

    @broker.subscriber(Subjects.INDEX_MATERIAL, queue=QUEUE_GROUPS[Subjects.INDEX_MATERIAL])
    async def on_material(request: IndexMaterialRequest) -> IndexMaterialReply:
        """A page of a quiz's, a drill's or a syllabus's material."""
        return await answer(request, IndexMaterialReply, retriever.material)

    @broker.subscriber(Subjects.INDEX_OUTLINE, queue=QUEUE_GROUPS[Subjects.INDEX_OUTLINE])
    async def on_outline(request: IndexOutlineRequest) -> IndexOutlineReply:
        """A document's outline in vectors (the curriculum proposals)."""
        return await answer(request, IndexOutlineReply, retriever.outline)

    @broker.subscriber(Subjects.INDEX_TOPICS, queue=QUEUE_GROUPS[Subjects.INDEX_TOPICS])
    async def on_topics(request: IndexTopicsRequest) -> IndexTopicsReply:
        """The tenant's common topic tags (a refusal's suggestions)."""
        return await answer(request, IndexTopicsReply, retriever.topics)

    @broker.subscriber(
        Subjects.INDEX_VECTORS,
        queue=QUEUE_GROUPS[Subjects.INDEX_VECTORS],
        max_workers=retriever.settings.concurrency,
    )
    async def on_vectors(request: IndexVectorsRequest) -> IndexVectorsReply:
        """Chunks' stored embeddings (the re-ranker's bi-encoder reuses them)."""
        return await answer(request, IndexVectorsReply, retriever.vectors)
