"""Ingest app: the durable JetStream pull consumer of uploads (``lectern-ingest``) and those of
a teacher's changes to indexed documents (``lectern-ingest-<change>``), shared by all
replicas, the curriculum responder, and the background garbage collection and BM25
re-weighting (``lectern_ingest.reweighting``)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI
from faststream.nats import NatsBroker, PullSub
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from lectern_common.broker import (
    INGEST_DURABLE,
    QUEUE_GROUPS,
    answer,
    create_broker,
    current_message,
    durable_subscriber,
    publish_event,
    stream_for,
)
from lectern_common.db.types import Pool
from lectern_common.embeddings import Embedder, build_embedder
from lectern_common.events import (
    ChunkCurriculumReply,
    ChunkCurriculumRequest,
    DocumentArchived,
    DocumentDeleted,
    DocumentRestored,
    DocumentUpdated,
    DocumentUploaded,
    Event,
    Subjects,
)
from lectern_common.gc import collect_every
from lectern_common.service import ServiceState, create_service_app
from lectern_ingest import language
from lectern_ingest.config import Settings
from lectern_ingest.curriculum import tag_chunks
from lectern_ingest.handlers import handle_document_change, handle_uploaded
from lectern_ingest.reweighting import reweight_every
from lectern_ingest.service import IngestWorker


def create_app(settings: Settings, *, embedder: Embedder | None = None) -> FastAPI:
    """Build the broker, the consumer and the health app (``embedder`` lets tests share one)."""
    broker = create_broker(
        settings.nats_url,
        service_name=settings.service_name,
        graceful_timeout=settings.graceful_timeout_s,
        credentials=settings.nats_credentials,
    )
    holder: dict[str, IngestWorker] = {}
    consumer = consumer_config(settings)

    async def publish(event: Event) -> None:
        await publish_event(broker, event)

    async def startup(state: ServiceState) -> None:
        model = embedder if embedder is not None else build_embedder(settings)
        await model.embed_documents(["warm-up"])
        await asyncio.to_thread(language.load_model)
        holder["worker"] = IngestWorker(
            settings=settings,
            embedder=model,
            pool=state.db(),
            jetstream=broker.config.connection_state.stream,
            publish=publish,
        )
        state.deps = holder["worker"]
        await holder["worker"].embedder.sync(state.db())
        # a consumer created by an earlier release keeps its settings when bound by name:
        # bring its ack wait and delivery limit to this configuration's
        stream = stream_for(Subjects.DOCUMENTS_UPLOADED).name
        await broker.config.connection_state.stream.add_consumer(stream, config=consumer)
        if settings.gc_interval_s > 0:
            state.spawn(
                "lectern-gc",
                collect_every(
                    state.db(), broker.config.connection_state.stream,
                    every_s=settings.gc_interval_s, grace_s=0.0, objects=False, chunks=True,
                ),
            )  # fmt: skip
        if settings.reweight_interval_s > 0:
            state.spawn(
                "lectern-bm25-reweight",
                reweight_every(
                    state.db(), every_s=settings.reweight_interval_s, drift=settings.reweight_drift
                ),
            )

    app = create_service_app(
        settings=settings,
        broker=broker,
        title="Lectern ingest",
        on_startup=startup,
        consumers=[
            (stream_for(Subjects.DOCUMENTS_UPLOADED).name, INGEST_DURABLE),
            *((stream_for(subject).name, durable) for subject, durable in CHANGES.items()),
        ],
        outbox="ingest",
    )

    subscribe(broker, settings=settings, worker=lambda: holder["worker"])
    subscribe_changes(broker, settings=settings, pool=lambda: holder["worker"].pool)
    return app


#: a teacher's changes of a document that reach its chunks, each through a durable consumer
#: of its own on ``LECTERN_DOCUMENT_EVENTS``
CHANGES = {
    Subjects.DOCUMENTS_UPDATED: "lectern-ingest-updated",
    Subjects.DOCUMENTS_ARCHIVED: "lectern-ingest-archived",
    Subjects.DOCUMENTS_RESTORED: "lectern-ingest-restored",
    Subjects.DOCUMENTS_DELETED: "lectern-ingest-deleted",
}


def subscribe_changes(broker: NatsBroker, *, settings: Settings, pool: Callable[[], Pool]) -> None:
    """The consumers that apply a teacher's change of a document to its chunks (ingest owns
    them): the gateway changes the document and writes the event to its outbox in one
    transaction, with the row's state after it; each consumer brings ingest's record of the
    document and its chunks to that state (``lifecycle.apply``), idempotent, so a redelivered
    or reordered event changes nothing."""

    def consumer(subject: str) -> Callable[[Callable[..., Any]], object]:
        return durable_subscriber(
            broker, subject, durable=CHANGES[subject], max_deliver=settings.max_deliveries
        )

    @consumer(Subjects.DOCUMENTS_UPDATED)
    async def on_updated(event: DocumentUpdated) -> None:
        """Changed metadata copied to the chunks; a supersede (a status change) applied."""
        await handle_document_change(pool(), event, current_message(broker))

    @consumer(Subjects.DOCUMENTS_ARCHIVED)
    async def on_archived(event: DocumentArchived) -> None:
        """The chunks leave retrieval and the statistics (kept for a restore)."""
        await handle_document_change(pool(), event, current_message(broker))

    @consumer(Subjects.DOCUMENTS_RESTORED)
    async def on_restored(event: DocumentRestored) -> None:
        """The chunks are back in retrieval and the statistics."""
        await handle_document_change(pool(), event, current_message(broker))

    @consumer(Subjects.DOCUMENTS_DELETED)
    async def on_deleted(event: DocumentDeleted) -> None:
        """The chunks are deleted."""
        await handle_document_change(pool(), event, current_message(broker))


def consumer_config(settings: Settings) -> ConsumerConfig:
    """The durable pull consumer all ingest replicas share."""
    return ConsumerConfig(
        durable_name=INGEST_DURABLE,
        # the subscriber's filter too: created or updated at start-up without it, the consumer
        # would take the whole work-queue stream and refuse any other filtered consumer
        filter_subject=Subjects.DOCUMENTS_UPLOADED,
        ack_policy=AckPolicy.EXPLICIT,
        deliver_policy=DeliverPolicy.ALL,
        max_deliver=settings.delivery_limit,
        ack_wait=settings.ack_wait_s,
        max_ack_pending=1000,
    )


def subscribe(
    broker: NatsBroker, *, settings: Settings, worker: Callable[[], IngestWorker]
) -> None:
    """Register ingest's consumer and responder on ``broker``; ``worker`` gives the started
    worker (an undecodable upload is parked, and an undecodable request answered
    ``bad_input``, by the broker's ``InvalidMessages``)."""

    @broker.subscriber(
        Subjects.DOCUMENTS_UPLOADED,
        stream=stream_for(Subjects.DOCUMENTS_UPLOADED),
        durable=INGEST_DURABLE,
        # with batching on, a fetch takes up to batch_documents uploads at once; the worker
        # indexes small ones together in lists (two lists in flight: one collected while the
        # other is stored) and large ones `concurrency` at a time
        pull_sub=PullSub(batch_size=max(1, settings.batch_documents), timeout=5.0),
        max_workers=(
            settings.concurrency
            if settings.batch_documents <= 1
            else settings.concurrency + 2 * settings.batch_documents
        ),
        config=consumer_config(settings),
    )
    async def on_uploaded(event: DocumentUploaded) -> None:
        """documents.uploaded -> extract, chunk, embed, store -> indexed | failed."""
        await handle_uploaded(worker(), event, current_message(broker), broker)

    @broker.subscriber(Subjects.CHUNKS_CURRICULUM, queue=QUEUE_GROUPS[Subjects.CHUNKS_CURRICULUM])
    async def on_curriculum(request: ChunkCurriculumRequest) -> ChunkCurriculumReply:
        """Confirmed curriculum standards onto a document's chunks."""
        return await answer(request, ChunkCurriculumReply, lambda r: tag_chunks(worker().pool, r))
