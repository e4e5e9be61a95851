"""NATS users and permissions, against a real nats-server configured the way the embedded
stack configures it: nobody connects without a password, and each service's user reaches
only the subjects that service needs (no retrieve requests from the re-ranker's user, no
memory recalls or stored files from the retriever's)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.errors import Error as NatsError

from lectern_common.broker import DOCUMENTS_BUCKET, create_broker, ensure_streams
from lectern_common.events import Subjects
from lectern_common.nats_auth import (
    ADMIN_USER,
    SERVICE_PERMISSIONS,
    authorization_config,
    nats_user,
    new_credentials,
)
from lectern_common.runtime.nats import EmbeddedNats

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def secured(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[EmbeddedNats, dict[str, str]]]:
    passwords = new_credentials(list(SERVICE_PERMISSIONS))
    server = EmbeddedNats(
        tmp_path_factory.mktemp("nats-auth"), authorization=authorization_config(passwords)
    )
    server.start()
    try:
        yield server, passwords
    finally:
        server.stop()


async def connect(server: EmbeddedNats, passwords: dict[str, str], service: str) -> Any:
    async def on_error(exc: Exception) -> None:
        return None  # violations are the point here; nats-py would otherwise log each

    user = ADMIN_USER if service == "admin" else nats_user(service)
    nc = await nats.connect(
        server.url, user=user, password=passwords[user], error_cb=on_error,
        max_reconnect_attempts=0, connect_timeout=2,
    )  # fmt: skip
    return nc


@pytest.fixture(scope="module")
async def streams(secured: tuple[EmbeddedNats, dict[str, str]]) -> None:
    """Lectern's streams and bucket, declared by a service's own user (as at start-up)."""
    server, passwords = secured
    nc = await connect(server, passwords, "gateway")
    try:
        await ensure_streams(nc.jetstream())
        store = await nc.jetstream().object_store(DOCUMENTS_BUCKET)
        await store.put("t-a/secret.txt", b"assessment answers")
    finally:
        await nc.close()


async def test_nobody_connects_without_the_password(
    secured: tuple[EmbeddedNats, dict[str, str]],
) -> None:
    server, _ = secured
    for credentials in [{}, {"user": nats_user("retriever"), "password": "guess"}]:
        with pytest.raises((NatsError, OSError)):
            await nats.connect(
                server.url, max_reconnect_attempts=0, connect_timeout=2,
                allow_reconnect=False, **credentials,
            )  # fmt: skip


def test_the_configuration_has_no_password_on_the_command_line(
    secured: tuple[EmbeddedNats, dict[str, str]],
) -> None:
    server, passwords = secured
    assert server.process is not None
    cmdline = Path(f"/proc/{server.process.pid}/cmdline").read_bytes().decode()
    assert not any(p in cmdline for p in passwords.values())
    conf = server.data_dir / "nats-server.conf"
    assert conf.stat().st_mode & 0o077 == 0


async def _request_allowed(nc: Any, subject: str) -> bool:
    """Whether a request on ``subject`` reaches a responder (one is always listening)."""
    try:
        await nc.request(subject, b"{}", timeout=1.0)
    except NatsError:
        return False
    return True


async def test_each_service_reaches_only_its_own_subjects(
    secured: tuple[EmbeddedNats, dict[str, str]], streams: None
) -> None:
    server, passwords = secured
    admin = await connect(server, passwords, "admin")
    subjects = [Subjects.RETRIEVE, Subjects.RERANK, Subjects.MEMORY_RECALL, Subjects.INDEX_VECTORS]

    async def echo(msg: Any) -> None:
        await msg.respond(b"{}")

    for subject in subjects:  # an echo responder per request subject
        await admin.subscribe(subject, cb=echo)
    await admin.flush()
    expected = {
        "gateway": set(subjects) - {Subjects.INDEX_VECTORS},
        "ingest": set(),
        "retriever": set(),
        # the index's stored vectors of its candidates, which the retriever reads for it
        "reranker": {Subjects.INDEX_VECTORS},
        "memory": set(),
    }

    async def reached_by(service: str) -> set[str]:
        # the requests at once: each refused one waits out its own 1 s time-out
        nc = await connect(server, passwords, service)
        try:
            answered = await asyncio.gather(*(_request_allowed(nc, s) for s in subjects))
        finally:
            await nc.close()
        return {s for s, ok in zip(subjects, answered, strict=True) if ok}

    try:
        reached = await asyncio.gather(*(reached_by(service) for service in expected))
        assert dict(zip(expected, reached, strict=True)) == expected
    finally:
        await admin.close()


async def test_only_gateway_and_ingest_read_stored_files(
    secured: tuple[EmbeddedNats, dict[str, str]], streams: None
) -> None:
    server, passwords = secured

    async def read_by(service: str) -> bytes | None:
        nc = await connect(server, passwords, service)
        try:
            async with asyncio.timeout(2):
                store = await nc.jetstream().object_store(DOCUMENTS_BUCKET)
                data: bytes | None = (await store.get("t-a/secret.txt")).data
        except (NatsError, TimeoutError):
            data = None
        finally:
            await nc.close()
        return data

    # every service at once: each refused one waits out its own 2 s
    services = list(SERVICE_PERMISSIONS)
    for service, data in zip(
        services, await asyncio.gather(*(read_by(s) for s in services)), strict=True
    ):
        if service in {"gateway", "ingest"}:
            assert data == b"assessment answers", service
        else:
            assert data is None, f"{service} read a stored file"


async def test_ingest_lists_the_stored_files_for_its_garbage_collection(
    secured: tuple[EmbeddedNats, dict[str, str]], streams: None
) -> None:
    from lectern_common.gc import stored_objects

    server, passwords = secured
    nc = await connect(server, passwords, "ingest")
    try:
        async with asyncio.timeout(5):
            names = {info.name for info in await stored_objects(nc.jetstream())}
    finally:
        await nc.close()
    assert "t-a/secret.txt" in names


async def test_only_memory_hears_recall_and_only_retriever_hears_retrieve(
    secured: tuple[EmbeddedNats, dict[str, str]],
) -> None:
    server, passwords = secured
    gateway = await connect(server, passwords, "gateway")
    try:
        for service in ["memory", "retriever", "ingest"]:
            nc = await connect(server, passwords, service)
            heard: list[str] = []

            async def hear(msg: Any, heard: list[str] = heard) -> None:
                heard.append(msg.subject)

            try:
                for subject in [Subjects.RETRIEVE, Subjects.MEMORY_RECALL]:
                    await nc.subscribe(subject, cb=hear)
                await nc.flush()
                await asyncio.sleep(0.2)
                for subject in [Subjects.RETRIEVE, Subjects.MEMORY_RECALL]:
                    await gateway.publish(subject, b"{}")
                await gateway.flush()
                await asyncio.sleep(0.3)
            finally:
                await nc.close()
            want = {"memory": [Subjects.MEMORY_RECALL], "retriever": [Subjects.RETRIEVE]}
            assert heard == want.get(service, []), service
    finally:
        await gateway.close()


async def test_a_service_broker_authenticates_with_its_user(
    secured: tuple[EmbeddedNats, dict[str, str]], streams: None
) -> None:
    server, passwords = secured
    user = nats_user("retriever")
    broker = create_broker(
        server.url, service_name=f"test-{uuid.uuid4().hex[:6]}",
        credentials=(user, passwords[user]),
    )  # fmt: skip

    @broker.subscriber(Subjects.RETRIEVE)
    async def answer(body: dict[str, Any]) -> dict[str, Any]:
        return {"ok": True}

    await broker.start()
    try:
        gateway = await connect(server, passwords, "gateway")
        try:
            reply = await gateway.request(Subjects.RETRIEVE, b"{}", timeout=5)
        finally:
            await gateway.close()
        assert reply.data == b'{"ok":true}'
    finally:
        await broker.stop()


async def test_memory_consumes_the_flags_and_the_retriever_may_not(
    secured: tuple[EmbeddedNats, dict[str, str]], streams: None
) -> None:
    """The memory service learns flags from ``feedback.flagged`` (durable
    ``lectern-memory-flags`` on ``LECTERN_FEEDBACK``); a service that does not consume that
    stream cannot create a consumer on it."""
    server, passwords = secured
    gateway = await connect(server, passwords, "gateway")
    try:
        await gateway.jetstream().publish(Subjects.FEEDBACK_FLAGGED, b'{"flag": 1}')
    finally:
        await gateway.close()

    async def fetched_by(service: str) -> list[bytes]:
        nc = await connect(server, passwords, service)
        try:
            async with asyncio.timeout(3):
                sub = await nc.jetstream().pull_subscribe(
                    Subjects.FEEDBACK_FLAGGED, durable=f"auth-{service}", stream="LECTERN_FEEDBACK"
                )
                messages = await sub.fetch(1, timeout=2)
                for message in messages:
                    await message.ack()
                return [m.data for m in messages]
        except (NatsError, TimeoutError):
            return []
        finally:
            await nc.close()

    fetched = await asyncio.gather(fetched_by("memory"), fetched_by("retriever"))
    assert list(fetched) == [[b'{"flag": 1}'], []]
