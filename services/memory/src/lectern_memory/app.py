"""Memory app: distils ended sessions, records turns and quiz attempts, answers recall
requests."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from faststream.nats import NatsMessage, PullSub
from nats.js.api import ConsumerConfig

from lectern_common.broker import QUEUE_GROUPS, answer_errors, create_broker, stream_for
from lectern_common.db import ReadPools
from lectern_common.embeddings import LOCAL_MODEL_NAME, LocalEmbedder, build_embedder
from lectern_common.events import MemoryRecallReply, MemoryRecallRequest, Subjects
from lectern_common.service import ServiceState, create_service_app
from lectern_memory.config import Settings
from lectern_memory.erasure import unless_erased
from lectern_memory.gemini_distiller import build_model_distiller
from lectern_memory.handlers import (
    handle_quiz_attempted,
    handle_session_ended,
    handle_turn,
    handle_user_erased,
)
from lectern_memory.service import MemoryService

TURNS_DURABLE = "lectern-memory-turns"
SESSIONS_DURABLE = "lectern-memory-sessions"
QUIZZES_DURABLE = "lectern-memory-quizzes"
USERS_DURABLE = "lectern-memory-users"


def create_app(settings: Settings) -> FastAPI:
    """Build the broker, the subscribers and the health app."""
    broker = create_broker(
        settings.nats_url,
        service_name=settings.service_name,
        credentials=settings.nats_credentials,
    )
    holder: dict[str, MemoryService] = {}

    def service() -> MemoryService:
        return holder["service"]

    async def startup(state: ServiceState) -> None:
        embedder = build_embedder(settings)
        # the struggle classifier was fitted on the packaged MiniLM's float vectors: it keeps
        # them whichever model and precision the index uses (int8 vectors missed one more
        # confusion of the 68 in bench/memory/messages/check.jsonl)
        local = (
            embedder
            if isinstance(embedder, LocalEmbedder)
            and embedder.name == LOCAL_MODEL_NAME
            and embedder.document_precision == "float32"
            else LocalEmbedder(query_precision="float32", document_precision="float32")
        )
        holder["service"] = MemoryService(
            settings=settings, embedder=embedder, model_distiller=build_model_distiller(settings),
            encode=local.embed_documents,
        )  # fmt: skip
        await embedder.embed_query("warm-up")
        await holder["service"].embedder.sync(state.pool)

    app = create_service_app(
        settings=settings,
        broker=broker,
        title="Lectern memory",
        on_startup=startup,
        outbox="memory",
        consumers=[
            (stream_for(Subjects.CHAT_TURN_COMPLETED).name, TURNS_DURABLE),
            (stream_for(Subjects.CHAT_SESSION_ENDED).name, SESSIONS_DURABLE),
            (stream_for(Subjects.QUIZ_ATTEMPTED).name, QUIZZES_DURABLE),
            (stream_for(Subjects.USERS_ERASED).name, USERS_DURABLE),
        ],
    )
    state: ServiceState = app.state.lectern
    consumer = ConsumerConfig(max_deliver=settings.max_deliveries, ack_wait=60.0)

    @broker.subscriber(
        Subjects.CHAT_TURN_COMPLETED,
        stream=stream_for(Subjects.CHAT_TURN_COMPLETED),
        durable=TURNS_DURABLE,
        pull_sub=PullSub(batch_size=10, timeout=5.0),
        config=consumer,
    )
    async def on_turn(body: dict[str, Any], message: NatsMessage) -> None:
        """Record a completed turn's signals."""
        await unless_erased(
            state.pool, body, lambda: handle_turn(service(), state.pool, body, message, broker)
        )

    @broker.subscriber(
        Subjects.CHAT_SESSION_ENDED,
        stream=stream_for(Subjects.CHAT_SESSION_ENDED),
        durable=SESSIONS_DURABLE,
        pull_sub=PullSub(batch_size=1, timeout=5.0),
        config=consumer,
    )
    async def on_session_ended(body: dict[str, Any], message: NatsMessage) -> None:
        """Distil an ended session into long-term memories."""
        await unless_erased(
            state.pool,
            body,
            lambda: handle_session_ended(
                service(), state.pool, broker, body, message, max_deliveries=settings.max_deliveries
            ),
        )

    @broker.subscriber(
        Subjects.QUIZ_ATTEMPTED,
        stream=stream_for(Subjects.QUIZ_ATTEMPTED),
        durable=QUIZZES_DURABLE,
        pull_sub=PullSub(batch_size=10, timeout=5.0),
        config=consumer,
    )
    async def on_quiz_attempted(body: dict[str, Any], message: NatsMessage) -> None:
        """Turn a checked quiz attempt into struggles and mastered topics."""
        await unless_erased(
            state.pool,
            body,
            lambda: handle_quiz_attempted(service(), state.pool, broker, body, message),
        )

    @broker.subscriber(
        Subjects.USERS_ERASED,
        stream=stream_for(Subjects.USERS_ERASED),
        durable=USERS_DURABLE,
        pull_sub=PullSub(batch_size=10, timeout=5.0),
        config=consumer,
    )
    async def on_user_erased(body: dict[str, Any], message: NatsMessage) -> None:
        """Erase every row kept about a user (``erasure``)."""
        await handle_user_erased(state.pool, broker, body, message)

    async def recall(request: MemoryRecallRequest) -> MemoryRecallReply:
        async def from_pool(pool: Any) -> MemoryRecallReply:
            return await service().recall(pool=pool, request=request)

        # recall only reads: the read replica serves it when one is configured and healthy
        reads = state.reads if state.reads is not None else ReadPools(primary=state.pool)
        return await reads.run(from_pool)

    @broker.subscriber(Subjects.MEMORY_RECALL, queue=QUEUE_GROUPS[Subjects.MEMORY_RECALL])
    async def on_recall(body: dict[str, Any]) -> dict[str, Any]:
        """Top memories of a student for a query."""
        return await answer_errors(MemoryRecallRequest, MemoryRecallReply, recall)(body)

    return app
