"""Memory app: distils ended sessions, records turns and quiz attempts, answers recall
requests."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from fastapi import FastAPI
from faststream.nats import NatsBroker, NatsMessage, PullSub
from nats.js.api import ConsumerConfig

from lectern_common.broker import QUEUE_GROUPS, answer, create_broker, stream_for
from lectern_common.db import ReadPools
from lectern_common.db.types import Pool
from lectern_common.embeddings import LOCAL_MODEL_NAME, LocalEmbedder, build_embedder
from lectern_common.events import (
    ChatSessionEnded,
    ChatSessionsExpired,
    ChatTurnCompleted,
    FeedbackFlagged,
    MemoryExportReply,
    MemoryExportRequest,
    MemoryForgetReply,
    MemoryForgetRequest,
    MemoryListReply,
    MemoryListRequest,
    MemoryRecallReply,
    MemoryRecallRequest,
    MemoryTopicsReply,
    MemoryTopicsRequest,
    QuizAttempted,
    Subjects,
    UserErased,
)
from lectern_common.service import Hook, ServiceState, create_service_app
from lectern_memory import records
from lectern_memory.config import Settings
from lectern_memory.erasure import unless_erased
from lectern_memory.gemini_distiller import build_model_distiller
from lectern_memory.handlers import (
    handle_flagged,
    handle_quiz_attempted,
    handle_session_ended,
    handle_sessions_expired,
    handle_turn,
    handle_user_erased,
)
from lectern_memory.service import MemoryService

TURNS_DURABLE = "lectern-memory-turns"
SESSIONS_DURABLE = "lectern-memory-sessions"
QUIZZES_DURABLE = "lectern-memory-quizzes"
USERS_DURABLE = "lectern-memory-users"
EXPIRIES_DURABLE = "lectern-memory-expiries"
FLAGS_DURABLE = "lectern-memory-flags"

#: the started service, once start-up built it
ServiceOf = Callable[[], MemoryService]


def create_app(settings: Settings) -> FastAPI:
    """Build the broker, the subscribers and the health app."""
    broker = create_broker(
        settings.nats_url,
        service_name=settings.service_name,
        credentials=settings.nats_credentials,
    )
    holder: dict[str, MemoryService] = {}
    app = create_service_app(
        settings=settings,
        broker=broker,
        title="Lectern memory",
        on_startup=_startup(settings, holder),
        outbox="memory",
        consumers=[
            (stream_for(Subjects.CHAT_TURN_COMPLETED).name, TURNS_DURABLE),
            (stream_for(Subjects.CHAT_SESSION_ENDED).name, SESSIONS_DURABLE),
            (stream_for(Subjects.QUIZ_ATTEMPTED).name, QUIZZES_DURABLE),
            (stream_for(Subjects.USERS_ERASED).name, USERS_DURABLE),
            (stream_for(Subjects.CHAT_SESSIONS_EXPIRED).name, EXPIRIES_DURABLE),
            (stream_for(Subjects.FEEDBACK_FLAGGED).name, FLAGS_DURABLE),
        ],
    )
    state: ServiceState = app.state.lectern
    subscribe(broker, settings=settings, state=state, service=lambda: holder["service"])
    return app


def _startup(settings: Settings, holder: dict[str, MemoryService]) -> Hook:
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
        state.deps = holder["service"]
        await embedder.embed_query("warm-up")
        await holder["service"].embedder.sync(state.db())

    return startup


def subscribe(
    broker: NatsBroker, *, settings: Settings, state: ServiceState, service: ServiceOf
) -> None:
    """Register the memory service's consumers and responders on ``broker`` (a message that
    does not decode is parked, or answered ``bad_input``, by the broker's
    ``InvalidMessages``)."""
    subscribe_events(broker, settings=settings, state=state, service=service)
    subscribe_requests(broker, state=state, service=service)


def _consumer(
    broker: NatsBroker, settings: Settings, subject: str, durable: str, batch: int
) -> Callable[[Callable[..., Awaitable[None]]], object]:
    """The subscriber decorator of one durable pull consumer of ``subject``."""
    return broker.subscriber(
        subject,
        stream=stream_for(subject),
        durable=durable,
        pull_sub=PullSub(batch_size=batch, timeout=5.0),
        config=ConsumerConfig(max_deliver=settings.max_deliveries, ack_wait=60.0),
    )


def subscribe_events(
    broker: NatsBroker, *, settings: Settings, state: ServiceState, service: ServiceOf
) -> None:
    """The JetStream consumers: turns, flags on answers, ended sessions, quiz attempts,
    erasures, sessions deleted past their retention."""

    @_consumer(broker, settings, Subjects.CHAT_TURN_COMPLETED, TURNS_DURABLE, 10)
    async def on_turn(event: ChatTurnCompleted, message: NatsMessage) -> None:
        """Record a completed turn's signals."""
        await unless_erased(
            state.db(), event, lambda: handle_turn(service(), state.db(), event, message)
        )

    @_consumer(broker, settings, Subjects.FEEDBACK_FLAGGED, FLAGS_DURABLE, 10)
    async def on_flagged(event: FeedbackFlagged, message: NatsMessage) -> None:
        """Record a flag on an answer in the service's own ``memory_flags``."""
        await unless_erased(state.db(), event, lambda: handle_flagged(state.db(), event, message))

    @_consumer(broker, settings, Subjects.CHAT_SESSION_ENDED, SESSIONS_DURABLE, 1)
    async def on_session_ended(event: ChatSessionEnded, message: NatsMessage) -> None:
        """Distil an ended session into long-term memories."""
        await unless_erased(
            state.db(),
            event,
            lambda: handle_session_ended(
                service(), state.db(), broker, event, message,
                max_deliveries=settings.max_deliveries,
            ),
        )  # fmt: skip

    @_consumer(broker, settings, Subjects.QUIZ_ATTEMPTED, QUIZZES_DURABLE, 10)
    async def on_quiz_attempted(event: QuizAttempted, message: NatsMessage) -> None:
        """Turn a checked quiz attempt into struggles and mastered topics."""
        await unless_erased(
            state.db(), event, lambda: handle_quiz_attempted(service(), state.db(), event, message)
        )

    @_consumer(broker, settings, Subjects.USERS_ERASED, USERS_DURABLE, 10)
    async def on_user_erased(event: UserErased, message: NatsMessage) -> None:
        """Erase every row kept about a user (``erasure``)."""
        await handle_user_erased(state.db(), event, message)

    @_consumer(broker, settings, Subjects.CHAT_SESSIONS_EXPIRED, EXPIRIES_DURABLE, 10)
    async def on_sessions_expired(event: ChatSessionsExpired, message: NatsMessage) -> None:
        """Delete the turn signals of sessions deleted past their retention."""
        await handle_sessions_expired(state.db(), event, message)


def subscribe_requests(broker: NatsBroker, *, state: ServiceState, service: ServiceOf) -> None:
    """The request/reply responders (queue group ``lectern-memory``): recall for a turn,
    and the gateway's reads and deletions of the rows this service owns (``records``)."""

    def reads() -> ReadPools:
        # reads only: the read replica serves them when one is configured and healthy
        return state.reads if state.reads is not None else ReadPools(primary=state.db())

    async def recall(request: MemoryRecallRequest) -> MemoryRecallReply:
        async def from_pool(pool: Pool) -> MemoryRecallReply:
            return await service().recall(pool=pool, request=request)

        return await reads().run(from_pool)

    @broker.subscriber(Subjects.MEMORY_RECALL, queue=QUEUE_GROUPS[Subjects.MEMORY_RECALL])
    async def on_recall(request: MemoryRecallRequest) -> MemoryRecallReply:
        """Top memories of a student for a query."""
        return await answer(request, MemoryRecallReply, recall)

    @broker.subscriber(Subjects.MEMORY_LIST, queue=QUEUE_GROUPS[Subjects.MEMORY_LIST])
    async def on_list(request: MemoryListRequest) -> MemoryListReply:
        """A user's memories, newest first (from the primary: a forgotten one is gone)."""
        return await answer(
            request, MemoryListReply, lambda r: records.list_memories(state.db(), r)
        )

    @broker.subscriber(Subjects.MEMORY_FORGET, queue=QUEUE_GROUPS[Subjects.MEMORY_FORGET])
    async def on_forget(request: MemoryForgetRequest) -> MemoryForgetReply:
        """Forget one memory of a user, or all."""
        return await answer(request, MemoryForgetReply, lambda r: records.forget(state.db(), r))

    @broker.subscriber(Subjects.MEMORY_TOPICS, queue=QUEUE_GROUPS[Subjects.MEMORY_TOPICS])
    async def on_topics(request: MemoryTopicsRequest) -> MemoryTopicsReply:
        """Topics over a set of users, never naming them."""
        return await answer(
            request, MemoryTopicsReply, lambda r: reads().run(lambda p: records.topics(p, r))
        )

    @broker.subscriber(Subjects.MEMORY_EXPORT, queue=QUEUE_GROUPS[Subjects.MEMORY_EXPORT])
    async def on_export(request: MemoryExportRequest) -> MemoryExportReply:
        """Every row kept about a user, for their data export (from the primary: an export
        made right after a change holds it)."""
        return await answer(request, MemoryExportReply, lambda r: records.export(state.db(), r))
