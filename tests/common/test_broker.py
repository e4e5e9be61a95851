"""Broker wiring against a real NATS server with JetStream."""

import asyncio
import contextlib
import logging
import subprocess
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar, cast

import nats
import pytest
from faststream.nats import NatsBroker, PullSub

from lectern_common.broker import (
    DOCUMENTS_BUCKET,
    STREAMS,
    answer,
    answer_errors,
    create_broker,
    durable_subscriber,
    ensure_streams,
    request,
    stream_for,
)
from lectern_common.broker_startup import declare_streams, start_broker
from lectern_common.errors import NotFoundError, UpstreamError
from lectern_common.events import (
    DocumentUploaded,
    MemoryRecallReply,
    MemoryRecallRequest,
    Subjects,
)
from lectern_common.events.base import Reply, Request
from lectern_common.runtime.nats import EmbeddedNats, free_port, nats_server_binary, port_is_free

pytestmark = pytest.mark.integration


async def test_streams_and_bucket_are_created_idempotently(nats_url: str) -> None:
    nc = await nats.connect(nats_url)
    try:
        js = nc.jetstream()
        await ensure_streams(js)
        await ensure_streams(js)
        for spec in STREAMS:
            info = await js.stream_info(spec.name)
            assert sorted(info.config.subjects or []) == sorted(spec.subjects)
        store = await js.object_store(DOCUMENTS_BUCKET)
        await store.put("probe", b"bytes")
        assert (await store.get("probe")).data == b"bytes"
        await store.delete("probe")
    finally:
        await nc.close()


async def test_event_published_is_consumed_by_a_durable_pull_consumer(
    nats_url: str, tenant_id: str
) -> None:
    received: asyncio.Queue[DocumentUploaded] = asyncio.Queue()
    broker = create_broker(nats_url, service_name="test")
    durable = f"test-{uuid.uuid4().hex[:8]}"
    subject = Subjects.DOCUMENTS_UPLOADED
    # A work-queue stream admits one consumer per subject: an ingest service an earlier test
    # of this session ran leaves its durable behind, so take it out first.
    nc = await nats.connect(nats_url)
    try:
        js = nc.jetstream()
        await ensure_streams(js)
        for info in await js.consumers_info("LECTERN_DOCUMENTS"):
            config = info.config
            if subject in (config.filter_subject, *(config.filter_subjects or [])):
                await js.delete_consumer("LECTERN_DOCUMENTS", info.name)
    finally:
        await nc.close()

    # a filtered durable on the work-queue stream: only this test's tenant reaches it
    @broker.subscriber(
        subject,
        stream=stream_for(subject),
        durable=durable,
        pull_sub=PullSub(batch_size=1, timeout=1.0),
    )
    async def handle(body: dict[str, Any]) -> None:
        event = DocumentUploaded.model_validate(body)
        if event.tenant_id == tenant_id:
            await received.put(event)

    event = DocumentUploaded(
        tenant_id=tenant_id,
        document_id=uuid.uuid4(),
        version=1,
        object_name="x/1",
        filename="a.pdf",
        mime_type="application/pdf",
        size_bytes=3,
        file_sha256="abc",
        uploaded_by="teacher-1",
    )
    async with broker:
        await broker.start()
        await broker.publish(event.model_dump(mode="json"), subject, stream="LECTERN_DOCUMENTS")
        got = await asyncio.wait_for(received.get(), 10)
        js = broker.config.connection_state.stream
        await js.delete_consumer("LECTERN_DOCUMENTS", durable)
    assert got.document_id == event.document_id
    assert got.event_id == event.event_id


async def test_request_reply_validates_and_answers_errors(nats_url: str, tenant_id: str) -> None:
    subject = Subjects.MEMORY_RECALL
    responder = create_broker(nats_url, service_name="responder")
    seen: list[str] = []

    async def recall(message: MemoryRecallRequest) -> MemoryRecallReply:
        seen.append(message.query)
        if message.query == "boom":
            raise NotFoundError("no such user")
        return MemoryRecallReply(request_id=message.request_id, took_ms=1.0)

    queue = f"q-{uuid.uuid4().hex[:6]}"
    responder.subscriber(subject, queue=queue)(
        answer_errors(MemoryRecallRequest, MemoryRecallReply, recall)
    )
    client = create_broker(nats_url, service_name="client")
    async with responder, client:
        await responder.start()
        await responder.config.connection_state.connection.flush()
        await client.start()
        ok = await request(
            client,
            MemoryRecallRequest(tenant_id=tenant_id, user_id="u", query="mitosis"),
            MemoryRecallReply,
            timeout=5,
        )
        assert ok.error is None
        with pytest.raises(Exception, match="no such user") as failed:
            await request(
                client,
                MemoryRecallRequest(tenant_id=tenant_id, user_id="u", query="boom"),
                MemoryRecallReply,
                timeout=5,
            )
        assert getattr(failed.value, "reason", None) == "not_found"
        raw = await client.request({"tenant_id": ""}, subject, timeout=5)
        bad = MemoryRecallReply.model_validate_json(raw.body)
        assert bad.error == "bad_input"
    assert seen == ["mitosis", "boom"]


async def test_request_without_responder_is_an_upstream_error(nats_url: str) -> None:
    client = create_broker(nats_url, service_name="client")
    async with client:
        await client.start()
        with pytest.raises(UpstreamError):
            await request(client, Orphan(tenant_id="t"), Reply, timeout=0.5)


class Orphan(Request):
    """A request on a subject nobody serves."""

    subject: ClassVar[str] = f"lectern.test.orphan.{uuid.uuid4().hex[:6]}.v1"


class Late(Request):
    """A request on a subject whose responder subscribes after the request is sent."""

    subject: ClassVar[str] = f"lectern.test.late.{uuid.uuid4().hex[:6]}.v1"


async def test_a_responder_still_starting_is_waited_for_within_the_deadline(
    nats_url: str,
) -> None:
    """The start-up race: the first chat after the gateway is ready must not fail because
    the retriever is still subscribing."""
    client = create_broker(nats_url, service_name="client")
    responder = NatsBroker(nats_url)

    async def answer(body: dict[str, Any]) -> dict[str, Any]:
        return Reply(request_id=body["request_id"]).model_dump(mode="json")

    responder.subscriber(Late.subject, queue="late")(answer)

    async def start_late() -> None:
        await asyncio.sleep(0.6)
        await responder.start()

    async with client, responder:
        await client.start()
        loop = asyncio.get_running_loop()
        started = loop.time()
        late = asyncio.create_task(start_late())
        reply = await request(client, Late(tenant_id="t"), Reply, timeout=5)
        await late
        assert reply.error is None
        assert 0.5 < loop.time() - started < 3.0
        # nobody ever answering still fails, within the deadline
        started = loop.time()
        with pytest.raises(UpstreamError, match="no service answers"):
            await request(client, Orphan(tenant_id="t"), Reply, timeout=0.8)
        assert loop.time() - started < 1.5


async def test_a_request_taken_past_its_deadline_is_answered_expired_unworked(
    nats_url: str,
) -> None:
    """The caller stamps its deadline on the request; a responder that takes it later answers
    ``expired`` without running its handler (its caller stopped waiting)."""
    worked: list[Request] = []

    async def handler(request: Request) -> Reply:
        worked.append(request)
        return Reply(request_id=request.request_id)

    late = await answer(Late(tenant_id="t", deadline=time.time() - 1.5), Reply, handler)
    assert late.error == "expired" and not worked
    assert late.error_message is not None and "past its deadline" in late.error_message
    # in time, late within the grace for another host's clock, and a caller that sets none
    for deadline in (time.time() + 5, time.time() - 0.5, None):
        assert (await answer(Late(tenant_id="t", deadline=deadline), Reply, handler)).error is None
    assert len(worked) == 3

    # ``request`` sets the deadline from its timeout
    client, responder = create_broker(nats_url, service_name="client"), NatsBroker(nats_url)
    seen: list[float] = []

    @responder.subscriber(Late.subject, queue="stamped")
    async def stamped(body: dict[str, Any]) -> dict[str, Any]:
        seen.append(body["deadline"])
        return Reply(request_id=body["request_id"]).model_dump(mode="json")

    async with client, responder:
        await client.start()
        await responder.start()
        sent = time.time()
        await request(client, Late(tenant_id="t"), Reply, timeout=4.0)
    assert len(seen) == 1 and sent + 3.5 < seen[0] < sent + 4.5


async def test_publish_event_is_acknowledged_once_and_fails_clearly(
    nats_url: str, tenant_id: str
) -> None:
    from lectern_common.broker import publish_event
    from lectern_common.events import ChatSessionEnded

    broker = create_broker(nats_url, service_name="test")
    await broker.connect()
    nc = await nats.connect(nats_url)
    try:
        js = nc.jetstream()
        await ensure_streams(js)
        event = ChatSessionEnded(tenant_id=tenant_id, session_id=uuid.uuid4(), user_id="u1")
        subject = event.subject
        stream = stream_for(subject).name
        before = (await js.stream_info(stream)).state.messages
        # a retried publish (its first attempt landed, the ack was lost) is stored once
        await publish_event(broker, event)
        await publish_event(broker, event)
        assert (await js.stream_info(stream)).state.messages == before + 1
        message = await js.get_last_msg(stream, subject)
        assert message.headers is not None
        assert message.headers["Nats-Msg-Id"] == str(event.event_id)
        # a subject no stream captures is never acknowledged: a clear upstream error
        orphan = event.model_copy(update={"event_id": uuid.uuid4()})
        with pytest.raises(UpstreamError, match="did not acknowledge"):
            await publish_event(
                cast(NatsBroker, _Renamed(broker, "lectern.nowhere.v1")),
                orphan,
                timeout=0.5,
                attempts=2,
            )
    finally:
        await nc.close()
        await broker.stop()


class _Renamed:
    """A broker whose publishes go to another subject (one no stream captures)."""

    def __init__(self, broker: NatsBroker, subject: str) -> None:
        self._broker = broker
        self._subject = subject

    async def publish(self, message: Any, subject: str, **kwargs: Any) -> Any:
        kwargs.pop("stream", None)
        return await self._broker.publish(message, self._subject, stream="LECTERN_CHAT", **kwargs)


async def test_broker_logs_go_through_the_service_logging_not_stdout(
    nats_url: str, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    """FastStream's own logger prints coloured text on stdout, which breaks a deployment's
    JSON log pipeline: the broker logs through the standard ``logging`` tree instead."""
    import logging

    from lectern_common.broker import BROKER_LOGGER

    broker = create_broker(nats_url, service_name="test")
    subject = f"lectern.test.logs.{uuid.uuid4().hex[:8]}"
    handled = asyncio.Event()

    @broker.subscriber(subject)
    async def handle(body: dict[str, Any]) -> None:
        handled.set()
        raise ValueError("a handler that fails")

    capfd.readouterr()
    with caplog.at_level(logging.INFO):
        async with broker:
            await broker.start()
            await broker.publish({"n": 1}, subject)
            await asyncio.wait_for(handled.wait(), 5.0)
            for _ in range(50):  # the error is logged after the handler returns
                if any(r.exc_info for r in caplog.records if r.name == BROKER_LOGGER):
                    break
                await asyncio.sleep(0.05)
    failures = [r for r in caplog.records if r.name == BROKER_LOGGER and r.exc_info]
    assert failures and "a handler that fails" in str(failures[0].exc_info[1])  # type: ignore[index]
    assert capfd.readouterr().out == ""


def _raised_in(filename: str, function: str, error: BaseException) -> BaseException:
    """``error`` raised from a function compiled as if it were in ``filename``: a traceback
    through that file, as nats-py's own fetch gives."""
    namespace: dict[str, Any] = {}
    code = f"def {function}(error):\n    raise error\n"
    exec(compile(code, filename, "exec"), namespace)  # noqa: S102 - a test's own code
    try:
        namespace[function](error)
    except BaseException as raised:
        return raised
    raise AssertionError("not raised")


def test_an_idle_pull_fetch_timeout_is_not_an_error(caplog: pytest.LogCaptureFixture) -> None:
    """nats-py's fetch raises a bare ``asyncio.TimeoutError`` when its deadline runs out
    between its two pull requests; FastStream's consume loop suppresses only nats' own
    ``TimeoutError``, so its supervisor logged "raised an exception, retrying" at ERROR on an
    idle queue. That record is DEBUG; any other exception stays ERROR."""
    import logging

    from lectern_common.broker import BROKER_LOGGER

    logger = logging.getLogger(BROKER_LOGGER)
    create_broker("nats://127.0.0.1:4222", service_name="test")  # installs the filter once
    create_broker("nats://127.0.0.1:4222", service_name="test")
    assert sum(type(f).__name__ == "IdleFetchTimeouts" for f in logger.filters) == 1
    idle = _raised_in("/site-packages/nats/js/client.py", "_fetch_n", TimeoutError())
    other = _raised_in("/app/handler.py", "handle", TimeoutError())
    nats_own = _raised_in("/site-packages/nats/js/client.py", "fetch", ValueError("bad"))
    with caplog.at_level(logging.INFO, logger=BROKER_LOGGER):
        for error in (idle, other, nats_own):
            logger.log(logging.ERROR, "Task-18 raised an exception, retrying...", exc_info=error)
    levels = [(r.levelname, type(r.exc_info[1]).__name__) for r in caplog.records if r.exc_info]
    assert levels == [("ERROR", "TimeoutError"), ("ERROR", "ValueError")]
    with caplog.at_level(logging.DEBUG, logger=BROKER_LOGGER):
        logger.log(logging.ERROR, "Task-19 raised an exception, retrying...", exc_info=idle)
    assert caplog.records[-1].levelname == "DEBUG" and caplog.records[-1].exc_info is None


@contextlib.contextmanager
def nats_without_jetstream(port: int) -> Iterator[subprocess.Popen[bytes]]:
    """A bare nats-server on ``port``: it takes connections, and no JetStream answers."""
    bare = subprocess.Popen(
        [str(nats_server_binary()), "-a", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10.0
        while port_is_free(port) and time.monotonic() < deadline:
            time.sleep(0.05)
        yield bare
    finally:
        bare.kill()
        bare.wait(10)


async def retried_then_stopped(
    caplog: pytest.LogCaptureFixture,
    step: asyncio.Task[None],
    what: str,
    bare: subprocess.Popen[bytes],
) -> None:
    """Wait until ``what`` was retried (its WARNING logged), ``step`` not done meanwhile, then
    stop the server without JetStream."""
    while not any(what in r.message for r in caplog.records):
        assert not step.done(), f"{what}: done on a server without JetStream"
        await asyncio.sleep(0.05)
    bare.terminate()
    await asyncio.to_thread(bare.wait, 10)


async def test_a_service_started_before_jetstream_answers_starts_once_it_does(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A service whose subscribers start while its server has no JetStream to answer (a
    cluster still electing, a server still starting) starts them again until it does, then
    consumes; a bare ``broker.start()`` failed the service's whole start-up."""
    port = free_port()
    server = EmbeddedNats(tmp_path / "nats", port=port)
    received: asyncio.Queue[bytes] = asyncio.Queue()
    broker = create_broker(f"nats://127.0.0.1:{port}", service_name="test")

    @durable_subscriber(broker, Subjects.DOCUMENTS_INDEXED, durable="test-starting", max_deliver=3)
    async def handle(body: bytes) -> None:
        await received.put(body)

    try:
        with (
            nats_without_jetstream(port) as bare,
            caplog.at_level(logging.WARNING, logger="lectern_common.broker_startup"),
        ):
            await broker.connect()
            start = asyncio.create_task(start_broker(broker, timeout=60.0))
            await retried_then_stopped(caplog, start, "starting the subscribers", bare)
        await asyncio.to_thread(server.start)
        nc = await nats.connect(server.url)
        try:
            await ensure_streams(nc.jetstream())
            await asyncio.wait_for(start, 30.0)
            await nc.jetstream().publish(Subjects.DOCUMENTS_INDEXED, b"after the start")
            assert await asyncio.wait_for(received.get(), 10.0) == b"after the start"
        finally:
            await nc.close()
    finally:
        await broker.stop()
        server.stop()


async def test_a_start_retried_after_one_subscriber_failed_leaves_every_subscriber_consuming(
    tmp_path: Path,
) -> None:
    """A start that fails at one subscriber (its consumer request timed out, as a cluster
    electing a leader answers) is run again, and every subscriber then handles what it
    fetches. A concurrent pull subscriber started before the failure used to take messages it
    never handled: FastStream's second start swapped its queue under its running consumer."""
    server = EmbeddedNats(tmp_path / "nats", port=free_port())
    await asyncio.to_thread(server.start)
    broker = create_broker(server.url, service_name="test")
    subjects = [Subjects.DOCUMENTS_INDEXED, Subjects.DOCUMENTS_FAILED]
    received: dict[str, asyncio.Queue[bytes]] = {s: asyncio.Queue() for s in subjects}

    def handler(queue: asyncio.Queue[bytes]) -> Callable[[bytes], Awaitable[None]]:
        async def handle(body: bytes) -> None:
            await queue.put(body)

        return handle

    for subject in subjects:
        broker.subscriber(
            subject, stream=stream_for(subject), durable=f"test-{subject.split('.')[2]}",
            pull_sub=PullSub(batch_size=5, timeout=1.0), max_workers=4,
        )(handler(received[subject]))  # fmt: skip
    # the last subscriber to start fails its first start; those before it have started
    last = broker.subscribers[-1]
    real_start = last.start
    failed: list[bool] = []

    async def fails_once() -> None:
        if not failed:
            failed.append(True)
            raise nats.errors.TimeoutError
        await real_start()

    cast("Any", last).start = fails_once
    nc = await nats.connect(server.url)
    try:
        await ensure_streams(nc.jetstream())
        await start_broker(broker, timeout=30.0)
        assert failed
        sent = {s: {f"{s} {i}".encode() for i in range(12)} for s in subjects}
        for subject, bodies in sent.items():
            for body in bodies:
                await nc.jetstream().publish(subject, body)
        for subject, bodies in sent.items():
            got = {await asyncio.wait_for(received[subject].get(), 10.0) for _ in bodies}
            assert got == bodies, subject
    finally:
        await nc.close()
        await broker.stop()
        await asyncio.to_thread(server.stop)


async def test_streams_declared_before_jetstream_answers_are_declared_once_it_does(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A service's start declares the streams again while no JetStream answers, and goes on
    once one does: the streams are there, no ERROR logged."""
    port = free_port()
    server = EmbeddedNats(tmp_path / "nats", port=port)
    try:
        with nats_without_jetstream(port) as bare, caplog.at_level(logging.WARNING):
            nc = await nats.connect(f"nats://127.0.0.1:{port}", max_reconnect_attempts=-1)
            declare = asyncio.create_task(declare_streams(nc.jetstream(), replicas=1, timeout=60.0))
            await retried_then_stopped(caplog, declare, "declaring the streams", bare)
            await asyncio.to_thread(server.start)
            await asyncio.wait_for(declare, 30.0)
        try:
            for spec in STREAMS:
                assert (await nc.jetstream().stream_info(spec.name)).config.name == spec.name
        finally:
            await nc.close()
        # (nats-py's own client logs the swap of servers; Lectern's logs are the service's)
        assert not [
            r for r in caplog.records if r.name.startswith("lectern") and r.levelno >= logging.ERROR
        ]
    finally:
        server.stop()
