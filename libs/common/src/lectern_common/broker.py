"""NATS wiring: the broker factory, JetStream streams, the object store, request/reply."""

from __future__ import annotations

import json
import logging
import time
import traceback
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import quote

from faststream import BaseMiddleware, StreamMessage
from faststream.context import ContextRepo
from faststream.exceptions import RejectMessage
from faststream.nats import JStream, NatsBroker, NatsMessage, NatsUserPassword, PullSub
from faststream.nats.opentelemetry import NatsTelemetryMiddleware
from nats import errors as nats_errors
from nats.js import JetStreamContext
from nats.js import errors as js_errors
from nats.js.api import (
    AckPolicy,
    ConsumerConfig,
    DeliverPolicy,
    DiscardPolicy,
    RetentionPolicy,
    StorageType,
    StreamConfig,
)
from nats.js.errors import BadRequestError, NotFoundError
from opentelemetry import trace
from pydantic import ValidationError

from lectern_common import metrics
from lectern_common.errors import (
    LecternError,
    NatsUnavailableError,
    RetryableError,
    UpstreamError,
)
from lectern_common.events.base import ALL_REQUESTS, Event, Reply, Request, Subjects
from lectern_common.events.deadletter import (
    MAX_PARKED_PAYLOAD,
    MessageParked,
    ParkReason,
    parked_event_id,
)
from lectern_common.hedged import NoReplyYet, NoResponders, hedged_request

log = logging.getLogger(__name__)

DOCUMENTS_BUCKET = "lectern-documents"
INGEST_DURABLE = "lectern-ingest"
MAX_INGEST_DELIVERIES = 5

DAY = 24 * 3600.0

#: queue group of each request/reply subject (one responder per request, any replica count)
QUEUE_GROUPS = {
    Subjects.RETRIEVE: "lectern-retriever",
    Subjects.INDEX_CHUNKS: "lectern-retriever",
    Subjects.INDEX_TOPICS: "lectern-retriever",
    Subjects.INDEX_COUNT: "lectern-retriever",
    Subjects.INDEX_MATERIAL: "lectern-retriever",
    Subjects.INDEX_OUTLINE: "lectern-retriever",
    Subjects.INDEX_VECTORS: "lectern-retriever",
    Subjects.RERANK: "lectern-reranker",
    Subjects.MEMORY_RECALL: "lectern-memory",
    Subjects.MEMORY_LIST: "lectern-memory",
    Subjects.MEMORY_FORGET: "lectern-memory",
    Subjects.MEMORY_TOPICS: "lectern-memory",
    Subjects.MEMORY_EXPORT: "lectern-memory",
    Subjects.CHUNKS_CURRICULUM: "lectern-ingest",
}


@dataclass(frozen=True)
class StreamSpec:
    """A JetStream stream Lectern owns."""

    name: str
    subjects: list[str]
    retention: RetentionPolicy = RetentionPolicy.LIMITS
    max_age_s: float = 30 * DAY
    description: str = ""
    max_msg_size: int = 1024 * 1024
    extra: dict[str, Any] = field(default_factory=dict)


STREAMS: list[StreamSpec] = [
    StreamSpec(
        "LECTERN_DOCUMENTS",
        [Subjects.DOCUMENTS_UPLOADED],
        retention=RetentionPolicy.WORK_QUEUE,
        max_age_s=7 * DAY,
        description="uploads waiting for the ingest workers (work queue)",
    ),
    StreamSpec(
        "LECTERN_DOCUMENT_EVENTS",
        [
            Subjects.DOCUMENTS_INDEXED,
            Subjects.DOCUMENTS_FAILED,
            Subjects.DOCUMENTS_DELETED,
            Subjects.DOCUMENTS_UPDATED,
            Subjects.DOCUMENTS_ARCHIVED,
            Subjects.DOCUMENTS_RESTORED,
            Subjects.DOCUMENTS_CONFLICTS,
        ],
        description="document outcomes, a teacher's changes and conflicts found, for anyone",
    ),
    StreamSpec(
        "LECTERN_DOCUMENT_PROGRESS",
        [Subjects.DOCUMENTS_PROGRESS],
        max_age_s=3600.0,
        description="progress of ingestion; short-lived",
    ),
    StreamSpec(
        "LECTERN_CHAT",
        [Subjects.CHAT_TURN_COMPLETED, Subjects.CHAT_SESSION_ENDED, Subjects.CHAT_SESSIONS_EXPIRED],
        description="chat turns, ended sessions and sessions deleted past their retention",
    ),
    StreamSpec("LECTERN_MEMORY", [Subjects.MEMORY_DISTILLED], description="distilled memories"),
    StreamSpec(
        "LECTERN_FEEDBACK",
        [Subjects.FEEDBACK_FLAGGED, Subjects.KNOWLEDGE_GAP_DETECTED],
        max_age_s=365 * DAY,
        description="flags and knowledge gaps for teachers",
    ),
    StreamSpec(
        "LECTERN_STUDY",
        [Subjects.QUIZ_ATTEMPTED],
        max_age_s=365 * DAY,
        description="quiz attempts, for memory and gradebooks",
    ),
    StreamSpec(
        "LECTERN_USERS",
        [Subjects.USERS_ERASED],
        description="erasure requests: every service deletes what it keeps about the user",
    ),
    StreamSpec(
        "LECTERN_DEADLETTER",
        [Subjects.DEAD_LETTER],
        max_age_s=30 * DAY,
        description="messages that exhausted their deliveries",
    ),
]


def stream_for(subject: str) -> JStream:
    """The FastStream handle of the stream holding ``subject`` (declared by ``ensure_streams``)."""
    for spec in STREAMS:
        if subject in spec.subjects:
            return JStream(spec.name, declare=False)
    raise KeyError(subject)


#: the logger FastStream writes to (handler errors, subscribers starting and stopping)
BROKER_LOGGER = "lectern.broker"


class IdleFetchTimeouts(logging.Filter):
    """Lowers to DEBUG FastStream's "raised an exception, retrying" when the exception is a
    pull fetch's timeout that found nothing: nats-py's ``fetch`` raises a bare
    ``asyncio.TimeoutError`` when its deadline runs out between its two pull requests, not the
    ``nats.errors.TimeoutError`` FastStream's consume loop suppresses, so the loop's task
    ends and its supervisor restarts it (nothing is lost: the next fetch asks again). Logged
    at ERROR it paged on a queue that was simply idle (issue 61)."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Keep every record; an idle fetch's timeout only at DEBUG."""
        if record.levelno >= logging.ERROR and _idle_fetch_timeout(record.exc_info):
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            record.exc_info, record.exc_text = None, None
            return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)
        return True


def durable_subscriber(
    broker: NatsBroker, subject: str, *, durable: str, max_deliver: int, batch_size: int = 10
) -> Callable[[Callable[..., Any]], object]:
    """The subscriber decorator of one durable pull consumer of ``subject``, shared by every
    replica of the service that names it: from the stream's start (events stored while no
    replica ran count), each message acked explicitly, redelivered after a minute without an
    ack and at most ``max_deliver`` times."""
    return broker.subscriber(
        subject,
        stream=stream_for(subject),
        durable=durable,
        pull_sub=PullSub(batch_size=batch_size, timeout=5.0),
        config=ConsumerConfig(
            durable_name=durable,
            filter_subject=subject,
            ack_policy=AckPolicy.EXPLICIT,
            deliver_policy=DeliverPolicy.ALL,
            max_deliver=max_deliver,
            ack_wait=60.0,
        ),
    )


def _idle_fetch_timeout(exc_info: Any) -> bool:
    """Whether a record's exception is a timeout raised inside nats-py's JetStream fetch."""
    if not exc_info or not isinstance(exc_info, tuple) or exc_info[1] is None:
        return False
    error = exc_info[1]
    if not isinstance(error, TimeoutError) or isinstance(error, nats_errors.TimeoutError):
        return False
    frames = traceback.extract_tb(error.__traceback__)
    return any(
        f.filename.replace("\\", "/").endswith("nats/js/client.py")
        and f.name in {"fetch", "_fetch_n", "_fetch_one"}
        for f in frames
    )


def create_broker(
    nats_url: str,
    *,
    service_name: str,
    graceful_timeout: float | None = 30.0,
    tracer_provider: trace.TracerProvider | None = None,
    credentials: tuple[str, str] | None = None,
) -> NatsBroker:
    """A FastStream NATS broker with OpenTelemetry tracing (W3C context in message headers),
    authenticated as ``credentials`` (user, password) when given."""
    servers = [s.strip() for s in nats_url.split(",") if s.strip()]
    security = NatsUserPassword(*credentials) if credentials is not None else None
    broker = NatsBroker(
        servers,
        security=security,
        name=service_name,
        graceful_timeout=graceful_timeout,
        middlewares=[NatsTelemetryMiddleware(tracer_provider=tracer_provider)],
        # through the service's own logging (JSON lines on stderr with trace ids): FastStream's
        # default logger writes coloured text to stdout and does not propagate
        logger=logging.getLogger(BROKER_LOGGER),
        # FastStream's per-message "Received"/"Processed" lines at DEBUG: at INFO they would
        # log every request and event; traces and metrics already account for each message
        log_level=logging.DEBUG,
        max_reconnect_attempts=-1,
        reconnect_time_wait=1,
    )
    broker.add_middleware(invalid_messages(broker, service=service_name))
    logger = logging.getLogger(BROKER_LOGGER)
    if not any(isinstance(f, IdleFetchTimeouts) for f in logger.filters):
        logger.addFilter(IdleFetchTimeouts())
    return broker


def _stream_config(spec: StreamSpec, replicas: int) -> StreamConfig:
    return StreamConfig(
        name=spec.name,
        description=spec.description,
        subjects=spec.subjects,
        retention=spec.retention,
        max_age=spec.max_age_s,
        storage=StorageType.FILE,
        num_replicas=replicas,
        discard=DiscardPolicy.OLD,
        max_msg_size=spec.max_msg_size,
        duplicate_window=120.0,
        **spec.extra,
    )


async def ensure_streams(js: JetStreamContext, *, replicas: int = 1) -> None:
    """Create or update every stream and the documents object-store bucket. Idempotent."""
    for spec in STREAMS:
        config = _stream_config(spec, replicas)
        try:
            await js.stream_info(spec.name)
        except NotFoundError:
            try:
                await js.add_stream(config)
                log.info("created stream %s", spec.name)
            except BadRequestError:
                # another replica created it between our look-up and our add
                await js.update_stream(config)
        else:
            await js.update_stream(config)
    try:
        await js.object_store(DOCUMENTS_BUCKET)
    except (NotFoundError, Exception) as exc:  # nats raises BucketNotFoundError (a NotFoundError)
        if not isinstance(exc, NotFoundError) and "not found" not in str(exc).lower():
            raise
        from nats.js.api import ObjectStoreConfig

        await js.create_object_store(
            DOCUMENTS_BUCKET,
            config=ObjectStoreConfig(
                bucket=DOCUMENTS_BUCKET,
                description="uploaded course material",
                storage=StorageType.FILE,
                replicas=replicas,
            ),
        )
        log.info("created object store %s", DOCUMENTS_BUCKET)


#: the attribute that names what an event is about (CloudEvents ``subject``), first found
_CE_SUBJECT_FIELDS = ("document_id", "session_id", "quiz_id", "user_id")


def cloudevent_headers(event: Event) -> dict[str, str]:
    """CloudEvents 1.0 binary-mode attributes of an event, as message headers: ``ce-id`` (the
    event id), ``ce-type`` (its subject, e.g. ``lectern.documents.indexed.v1``),
    ``ce-source`` (``/lectern/tenants/<tenant>``), ``ce-time``, ``ce-subject`` (the document,
    session, quiz or user it is about) and the body's ``content-type``; a subscriber in any
    language reads them with a CloudEvents SDK."""
    headers = {
        "ce-specversion": "1.0",
        "ce-id": str(event.event_id),
        "ce-type": event.subject,
        "ce-source": f"/lectern/tenants/{quote(event.tenant_id, safe='')}",
        "ce-time": event.occurred_at.isoformat(),
        "content-type": "application/json",
    }
    for name in _CE_SUBJECT_FIELDS:
        value = getattr(event, name, None)
        if value is not None:
            headers["ce-subject"] = str(value)
            break
    return headers


def event_headers(event: Event, headers: dict[str, str] | None = None) -> dict[str, str]:
    """The headers every publication of ``event`` carries: ``Nats-Msg-Id`` (its id, unless
    ``headers`` set one), the CloudEvents attributes, then ``headers``."""
    return {"Nats-Msg-Id": str(event.event_id), **cloudevent_headers(event), **(headers or {})}


PUBLISH_TIMEOUT_S = 5.0
PUBLISH_ATTEMPTS = 3


async def publish_event(
    broker: NatsBroker,
    event: Event,
    *,
    headers: dict[str, str] | None = None,
    timeout: float = PUBLISH_TIMEOUT_S,
    attempts: int = PUBLISH_ATTEMPTS,
) -> None:
    """Publish an event on its JetStream stream and wait for the stream's acknowledgement.

    A missing acknowledgement (a busy or restarting server) is retried with backoff. Every
    attempt carries ``Nats-Msg-Id`` (the event id unless the caller set one), so JetStream
    stores the event once even when an earlier attempt did land. Raises ``NatsUnavailableError``
    when no attempt was acknowledged.
    """
    from nats.errors import NoRespondersError
    from nats.js.errors import NoStreamResponseError
    from tenacity import (
        AsyncRetrying,
        retry_if_exception_type,
        stop_after_attempt,
        wait_exponential_jitter,
    )

    # no ack in time, or no stream answering (a server or stream leader restarting)
    unacknowledged = (TimeoutError, NoRespondersError, NoStreamResponseError)
    stream = stream_for(event.subject).name
    sent_headers = event_headers(event, headers)
    try:
        async for attempt in AsyncRetrying(
            stop=stop_after_attempt(attempts),
            wait=wait_exponential_jitter(initial=0.2, max=2.0),
            retry=retry_if_exception_type(unacknowledged),
            reraise=True,
        ):
            with attempt:
                await broker.publish(
                    event.model_dump(mode="json"), event.subject, headers=sent_headers,
                    stream=stream, timeout=timeout,
                )  # fmt: skip
    except unacknowledged as exc:
        raise NatsUnavailableError(
            f"JetStream did not acknowledge {event.subject} after {attempts} attempts"
        ) from exc


def current_message(broker: NatsBroker) -> NatsMessage:
    """The message a handler of ``broker`` is handling, from FastStream's context. A handler
    that takes it as a parameter instead has it resolved by dependency injection in a worker
    thread: a thread hop for every message (measured on ingest's small uploads)."""
    message: NatsMessage = broker.context.get_local("message")
    return message


async def publish_stored(
    js: Any, event: Event, *, headers: dict[str, str] | None = None, timeout: float
) -> None:
    """``publish_event``'s message (same subject, stream, ``Nats-Msg-Id``, CloudEvents headers
    and JSON body) sent once straight through the JetStream client, for the outbox relay: a
    stored event needs no FastStream publish span of its own (its trace context travels in
    ``headers``), and the relay retries by itself. Raises the client's error."""
    await js.publish(
        event.subject, event.model_dump_json().encode(), timeout=timeout,
        stream=stream_for(event.subject).name, headers=event_headers(event, headers),
    )  # fmt: skip


R = TypeVar("R", bound=Reply)


def _no_responders(exc: BaseException) -> bool:
    return "no responders" in str(exc).lower() or type(exc).__name__ == "NoRespondersError"


#: NATS errors saying the server or a stream cannot answer now (the connection lost or
#: reconnecting, a stream without a leader, no acknowledgement in time), not that the call
#: was wrong; ``nats.errors.TimeoutError`` covers the flush, drain and fetch time-outs too
_NATS_TRANSIENT: tuple[type[BaseException], ...] = (
    nats_errors.TimeoutError,
    nats_errors.NoRespondersError,
    nats_errors.ConnectionClosedError,
    nats_errors.ConnectionReconnectingError,
    nats_errors.ConnectionDrainingError,
    nats_errors.OutboundBufferLimitError,
    nats_errors.StaleConnectionError,
    nats_errors.NoServersError,
    js_errors.NoStreamResponseError,
    js_errors.ServiceUnavailableError,
    js_errors.ServerError,
)
#: JetStream API answers meaning "not now": a request time-out, a server error, no leader
_JS_TRANSIENT_CODES = frozenset({408, 500, 503, 504})


def nats_unavailable(exc: BaseException) -> bool:
    """Whether ``exc``, raised by the NATS client, says NATS cannot answer now (retry later)
    rather than that the request was wrong: what the gateway answers with 503
    ``nats_unavailable``. An election ("no response from stream", JetStream's 503), a lost
    quorum, a server being replaced under the client, a time-out of an acknowledgement."""
    if isinstance(exc, (NatsUnavailableError, *_NATS_TRANSIENT)):
        return True
    return isinstance(exc, js_errors.APIError) and exc.code in _JS_TRANSIENT_CODES


def _connected(broker: Any) -> bool:
    """Whether the broker's NATS connection is up (not reconnecting, not closed)."""
    try:
        return bool(broker.config.connection_state.connection.is_connected)
    except Exception:  # a broker that never connected, or a stand-in
        return True


async def request(
    broker: NatsBroker,
    message: Request,
    reply_type: type[R],
    *,
    timeout: float,
) -> R:
    """Send a request to a queue group and decode its reply.

    A request lost with a replica that died holding it, or with a NATS server, is sent again
    to the group (a live member takes it), and nobody subscribed (a service still starting, a
    replica restarting) is retried with backoff, all until ``timeout`` is spent
    (``lectern_common.hedged``). Raises ``NatsUnavailableError`` when the gateway's own NATS
    connection is down, ``UpstreamError`` when no member answered in time, and
    ``RetryableError`` when the responder replied with an error.
    """
    if message.deadline is None:
        message = message.model_copy(update={"deadline": time.time() + timeout})
    payload = message.model_dump(mode="json")
    try:
        response = await hedged_request(
            broker, payload, message.subject, timeout=timeout, is_no_responders=_no_responders
        )
    except (NoReplyYet, NoResponders) as exc:
        if not _connected(broker):
            raise NatsUnavailableError(
                f"NATS unreachable: no reply on {message.subject} within {timeout} s"
            ) from exc
        if isinstance(exc, NoResponders):
            raise UpstreamError(f"no service answers {message.subject}") from exc
        raise UpstreamError(f"no reply on {message.subject} within {timeout} s") from exc
    except Exception as exc:
        # under the request there is only the NATS client: a socket error is NATS's (never
        # Postgres's, which the gateway's handlers would take a bare ConnectionError for)
        if nats_unavailable(exc) or isinstance(exc, ConnectionError):
            raise NatsUnavailableError(f"NATS unavailable for {message.subject}: {exc}") from exc
        raise
    reply = reply_type.model_validate_json(response.body)
    if reply.error:
        raise RetryableError(reply.error_message or reply.error, reason=reply.error)
    return reply


def deliveries(message: Any) -> int:
    """How many times JetStream has delivered this message (1 on the first try)."""
    try:
        metadata = getattr(getattr(message, "raw_message", None), "metadata", None)
    except Exception:  # not a JetStream message (nats raises NotJSMessageError)
        return 1
    return int(getattr(metadata, "num_delivered", 1) or 1)


async def park(
    broker: NatsBroker, message: Any, *, service: str, reason: ParkReason, detail: str
) -> None:
    """Copy a JetStream message a consumer is giving up on to the dead-letter stream
    (``MessageParked`` on ``lectern.deadletter.v1``) before it is rejected or acked, so an
    operator can see and replay it. Never raises: a parking failure is logged."""
    raw = getattr(message, "raw_message", message)
    data: bytes = getattr(raw, "data", b"") or b""
    subject = str(getattr(raw, "subject", "") or "")
    try:
        metadata = raw.metadata
        stream, sequence = metadata.stream, metadata.sequence.stream
        consumer, delivered = metadata.consumer, int(metadata.num_delivered or 1)
    except Exception:  # not a JetStream message
        stream = sequence = consumer = None
        delivered = 1
    tenant = "unknown"
    try:
        claimed = json.loads(data).get("tenant_id")
        if isinstance(claimed, str) and 0 < len(claimed) <= 128:
            tenant = claimed
    except (ValueError, AttributeError):
        pass
    try:
        event = MessageParked(
            event_id=parked_event_id(stream, sequence, subject),
            tenant_id=tenant,
            original_subject=subject,
            stream=stream,
            stream_sequence=sequence,
            consumer=consumer,
            service=service,
            deliveries=delivered,
            reason=reason,
            detail=detail[:2000],
            payload=data.decode("utf-8", errors="replace")[:MAX_PARKED_PAYLOAD],
        )
        await publish_event(broker, event)
        log.warning(
            "parked %s message (stream %s seq %s) on %s: %s",
            subject, stream, sequence, Subjects.DEAD_LETTER, reason,
        )  # fmt: skip
    except Exception:
        log.exception("could not park a %s message on %s", subject, Subjects.DEAD_LETTER)


Q = TypeVar("Q", bound=Request)
#: a request is answered ``expired`` only this long past its deadline: the caller's clock is
#: another host's, and a skew larger than a short deadline (memory recall's 0.3 s) must not
#: expire every request on arrival
DEADLINE_GRACE_S = 1.0


async def answer(request: Q, reply_type: type[R], handler: Callable[[Q], Awaitable[R]]) -> R:
    """Run a request handler, turning its failure into an error reply of ``reply_type``.

    A responder must always answer (the caller is waiting), so a failure answers its reason
    instead of raising into the broker. (A body that does not decode into the request never
    reaches the handler: ``InvalidMessages`` answers ``bad_input`` for it.) A request taken
    past its ``deadline`` (by more than ``DEADLINE_GRACE_S``) is answered ``expired`` without
    running the handler: its caller has stopped waiting, and an overloaded responder that
    worked through such requests spent its CPU on answers nobody read while the requests
    behind them expired in turn (2026-12-04: half of 20 chats' turns ended at the re-rank
    deadline on a 2-core AVX2 machine).
    """
    if request.deadline is not None and (late := time.time() - request.deadline) > DEADLINE_GRACE_S:
        metrics.REQUESTS_EXPIRED.add(1, {"request": type(request).__name__})
        log.info("%s taken %.1f s past its deadline: answered expired", type(request).__name__,
                 late)  # fmt: skip
        return _error_reply(
            reply_type, request.request_id, "expired", f"taken {late:.1f} s past its deadline"
        )
    try:
        return await handler(request)
    except LecternError as exc:
        log.warning("%s failed: %s", type(request).__name__, exc.message)
        return _error_reply(reply_type, request.request_id, exc.reason, exc.message)
    except Exception as exc:
        log.exception("%s failed", type(request).__name__)
        return _error_reply(reply_type, request.request_id, "internal", str(exc))


def answer_errors(
    request_type: type[Q],
    reply_type: type[R],
    handler: Callable[[Q], Awaitable[R]],
) -> Callable[[Q], Awaitable[R]]:
    """A typed responder for ``broker.subscriber(...)``: ``handler`` under ``answer``. Its
    annotations name ``request_type`` and ``reply_type``, so FastStream decodes the body into
    the request (and documents both)."""

    async def wrapped(request: Q) -> R:
        return await answer(request, reply_type, handler)

    wrapped.__annotations__ = {"request": request_type, "return": reply_type}
    wrapped.__name__ = f"answer_{request_type.__name__}"
    return wrapped


def _error_reply(reply_type: type[R], request_id: Any, reason: str, message: str) -> R:
    try:
        rid = uuid.UUID(str(request_id))
    except ValueError:
        rid = uuid.UUID(int=0)
    return reply_type(request_id=rid, error=reason, error_message=message[:2000])


def _request_subjects() -> dict[str, type[Reply]]:
    return {request.subject: reply for request, reply in ALL_REQUESTS}


class InvalidMessages(BaseMiddleware[Any, Any]):
    """Settles a message whose body does not decode into its handler's pydantic event or
    request, so a bad message is never retried for ever nor lost without trace.

    FastStream validates a handler's arguments before it runs; its ``ValidationError`` comes
    out here (a handler settles its own failures, so no other reaches this). A request (a
    registered request subject, or any message with a reply subject) is answered
    ``bad_input``; an event is parked on the dead-letter stream (``park``) and rejected.
    """

    def __init__(
        self, msg: Any, /, *, context: ContextRepo, broker: NatsBroker, service: str
    ) -> None:
        super().__init__(msg, context=context)
        self._broker = broker
        self._service = service

    async def consume_scope(
        self, call_next: Callable[[Any], Awaitable[Any]], msg: StreamMessage[Any]
    ) -> Any:
        """Run the handler; settle a message it could not decode."""
        try:
            return await call_next(msg)
        except ValidationError as exc:
            raw = getattr(msg, "raw_message", None)
            subject = str(getattr(raw, "subject", "") or "")
            reply_type = _request_subjects().get(subject)
            if reply_type is not None or msg.reply_to:
                log.warning("answering bad_input to an invalid %s request: %s", subject, exc)
                return _error_reply(
                    reply_type or Reply, _claimed_request_id(msg.body), "bad_input", str(exc)
                ).model_dump(mode="json")
            log.error("rejecting an invalid %s message: %s", subject, exc)
            await park(self._broker, msg, service=self._service, reason="invalid_message",
                       detail=str(exc))  # fmt: skip
            raise RejectMessage() from exc


def _claimed_request_id(body: bytes) -> Any:
    try:
        return json.loads(body).get("request_id")
    except (ValueError, AttributeError):
        return None


def invalid_messages(broker: NatsBroker, *, service: str) -> Callable[..., InvalidMessages]:
    """The broker middleware (``broker.add_middleware``) that settles undecodable messages
    of ``broker``'s handlers for ``service`` (``InvalidMessages``)."""

    def build(msg: Any, /, *, context: ContextRepo) -> InvalidMessages:
        return InvalidMessages(msg, context=context, broker=broker, service=service)

    return build
