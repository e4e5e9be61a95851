"""Signed webhooks through the real gateway, NATS and Postgres, delivered to a local receiver.

The receiver (a Starlette app on 127.0.0.1, which the gateway is allowed to reach through
``url_fetch_allowed_networks``) verifies every delivery with the ``standardwebhooks``
package before answering 2xx. Events come from the real API (a teacher's metadata change,
through the outbox) or are published on JetStream the way the services publish them; the
retry schedule is a fraction of a second and a webhook is disabled after 2 failed
deliveries."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import nats
import pytest
import uvicorn
from faststream.nats import NatsBroker
from lectern_testing.chat import Gateway, Worker, offline_gateway, seed_document
from nats.js.api import ConsumerConfig, DeliverPolicy
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from lectern_common.broker import create_broker, ensure_streams, publish_event, stream_for
from lectern_common.events import Event, FeedbackFlagged, Subjects
from lectern_common.nats_auth import (
    ADMIN_USER,
    SERVICE_PERMISSIONS,
    authorization_config,
    nats_user,
    new_credentials,
)
from lectern_common.runtime.nats import EmbeddedNats
from lectern_gateway.auth import Role
from lectern_gateway.webhooks.dispatcher import WEBHOOK_DURABLE, DeliveryWorker, record_event
from lectern_gateway.webhooks.signing import WEBHOOK_EVENTS, WEBHOOK_STREAMS, new_secret, sign

pytestmark = pytest.mark.integration

TIMEOUT_S = 0.5
SCHEDULE_S = [0.2, 0.4]
DISABLE_AFTER = 2


# --- the receiver ---------------------------------------------------------------------------


@dataclass
class Receiver:
    """Endpoints ``/{name}``: each answers by its plan (``ok``, ``500``, ``slow``, ``lag``),
    one step per request (the last step repeats), and keeps the verified requests."""

    url: str = ""
    secrets: dict[str, str] = field(default_factory=dict)
    plans: dict[str, list[str]] = field(default_factory=dict)
    hits: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    received: dict[str, list[tuple[dict[str, str], dict[str, Any]]]] = field(
        default_factory=lambda: defaultdict(list)
    )
    refused: list[str] = field(default_factory=list)

    def endpoint(self, name: str, *plan: str) -> str:
        """The URL of a new endpoint with this plan (default: always 2xx)."""
        self.plans[name] = list(plan) or ["ok"]
        return f"{self.url}/{name}"

    async def handle(self, request: Request) -> Response:
        name = request.path_params["name"]
        body = await request.body()
        plan = self.plans.get(name, ["ok"])
        step = plan[min(self.hits[name], len(plan) - 1)]
        self.hits[name] += 1
        if step == "slow":
            await asyncio.sleep(TIMEOUT_S * 4)
        if step == "lag":  # answered within the timeout, but late
            await asyncio.sleep(TIMEOUT_S / 2)
        if step == "500":
            return JSONResponse({"error": "down"}, status_code=500)
        headers = dict(request.headers)
        try:
            payload = Webhook(self.secrets[name]).verify(body, headers)
        except (KeyError, WebhookVerificationError) as exc:
            self.refused.append(f"{name}: {exc!r}")
            return JSONResponse({"error": "bad signature"}, status_code=400)
        self.received[name].append((headers, payload))
        return Response(status_code=204)


@pytest.fixture(scope="module")
async def receiver() -> AsyncIterator[Receiver]:
    state = Receiver()
    app = Starlette(routes=[Route("/{name}", state.handle, methods=["POST"])])
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=0, log_config=None, access_log=False)
    )
    task = asyncio.create_task(server.serve())
    for _ in range(1000):
        if server.started:
            break
        await asyncio.sleep(0.01)
    state.url = f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"
    try:
        yield state
    finally:
        server.should_exit = True
        await task


# --- the gateway and a publisher ------------------------------------------------------------


@pytest.fixture(scope="module")
async def gateway(nats_url: str, database_url: str, db_pool: Any) -> AsyncIterator[Gateway]:
    async with offline_gateway(
        nats_url, database_url, db_pool, worker=True,
        url_fetch_allowed_networks=["127.0.0.0/8"],
        webhook_timeout_s=TIMEOUT_S,
        webhook_retry_schedule_s=SCHEDULE_S,
        webhook_disable_after_failures=DISABLE_AFTER,
        webhook_poll_interval_s=0.1,
    ) as running:  # fmt: skip
        yield running


@pytest.fixture(scope="module")
async def broker(nats_url: str) -> AsyncIterator[NatsBroker]:
    publisher = create_broker(nats_url, service_name="webhook-test")
    await publisher.connect()
    yield publisher
    await publisher.stop()


@pytest.fixture
async def client(gateway: Gateway) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=gateway.url, timeout=30) as c:
        yield c


def admin(gateway: Gateway, tenant_id: str) -> dict[str, str]:
    return gateway.token(tenant_id, "root", role="admin")


async def register(
    client: httpx.AsyncClient,
    gateway: Gateway,
    receiver: Receiver,
    tenant_id: str,
    name: str,
    *plan: str,
    events: tuple[str, ...] = (Subjects.FEEDBACK_FLAGGED,),
) -> dict[str, Any]:
    """Register an endpoint of the receiver for ``events``; the created webhook."""
    response = await client.post(
        "/v1/webhooks",
        json={"url": receiver.endpoint(name, *plan), "event_types": list(events)},
        headers=admin(gateway, tenant_id),
    )
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    receiver.secrets[name] = created["secret"]
    return created


def flagged(tenant_id: str) -> FeedbackFlagged:
    return FeedbackFlagged(
        tenant_id=tenant_id, flag_id=uuid.uuid4(), message_id=uuid.uuid4(),
        session_id=uuid.uuid4(), user_id="sam", reason="unclear", details="which phase?",
    )  # fmt: skip


async def until(check: Callable[[], Awaitable[Any]], what: str, timeout: float = 20.0) -> Any:
    """Poll ``check()`` until it returns something truthy."""
    for _ in range(int(timeout / 0.1)):
        found = await check()
        if found:
            return found
        await asyncio.sleep(0.1)
    raise AssertionError(f"not within {timeout} s: {what}")


async def deliveries(
    client: httpx.AsyncClient, gateway: Gateway, tenant_id: str, webhook_id: str
) -> list[dict[str, Any]]:
    response = await client.get(
        f"/v1/webhooks/{webhook_id}/deliveries", headers=admin(gateway, tenant_id)
    )
    assert response.status_code == 200, response.text
    found: list[dict[str, Any]] = response.json()
    return found


async def finished(
    client: httpx.AsyncClient, gateway: Gateway, tenant_id: str, webhook_id: str, n: int = 1
) -> list[dict[str, Any]]:
    """The webhook's deliveries once ``n`` of them are no longer pending."""

    async def check() -> list[dict[str, Any]] | None:
        found = await deliveries(client, gateway, tenant_id, webhook_id)
        done = [d for d in found if d["status"] != "pending"]
        return found if len(done) >= n else None

    result: list[dict[str, Any]] = await until(check, f"{n} finished deliveries")
    return result


# --- signing --------------------------------------------------------------------------------


def test_signature_is_the_standard_webhooks_one() -> None:
    secret = new_secret()
    assert secret.startswith("whsec_")
    body = json.dumps({"hello": "world"}).encode()
    msg_id, timestamp = str(uuid.uuid4()), 1_700_000_000
    ours = sign(secret, msg_id=msg_id, timestamp=timestamp, body=body)
    theirs = Webhook(secret).sign(msg_id, _datetime(timestamp), body.decode())
    assert ours == theirs
    assert ours.startswith("v1,")


def _datetime(timestamp: int) -> datetime:
    return datetime.fromtimestamp(timestamp, tz=UTC)


# --- the admin API --------------------------------------------------------------------------


async def test_register_list_get_delete(
    client: httpx.AsyncClient, gateway: Gateway, receiver: Receiver, tenant_id: str
) -> None:
    created = await register(
        client, gateway, receiver, tenant_id, "crud",
        events=(Subjects.DOCUMENTS_INDEXED, Subjects.QUIZ_ATTEMPTED, Subjects.DOCUMENTS_INDEXED),
    )  # fmt: skip
    assert created["secret"].startswith("whsec_")
    assert created["event_types"] == [Subjects.DOCUMENTS_INDEXED, Subjects.QUIZ_ATTEMPTED]
    assert created["enabled"] is True and created["created_by"] == "root"
    headers = admin(gateway, tenant_id)
    listed = (await client.get("/v1/webhooks", headers=headers)).json()
    assert [w["id"] for w in listed] == [created["id"]]
    one = (await client.get(f"/v1/webhooks/{created['id']}", headers=headers)).json()
    assert "secret" not in one and "secret" not in listed[0]
    assert one["url"] == created["url"]
    # another tenant's admin sees nothing of it
    other = admin(gateway, f"{tenant_id}-other")
    assert (await client.get("/v1/webhooks", headers=other)).json() == []
    assert (await client.get(f"/v1/webhooks/{created['id']}", headers=other)).status_code == 404
    assert (await client.delete(f"/v1/webhooks/{created['id']}", headers=other)).status_code == 404
    # deleted
    assert (
        await client.delete(f"/v1/webhooks/{created['id']}", headers=headers)
    ).status_code == 204
    missing = await client.get(f"/v1/webhooks/{created['id']}", headers=headers)
    assert missing.status_code == 404
    assert missing.headers["content-type"] == "application/problem+json"


async def test_unknown_event_types_are_refused(
    client: httpx.AsyncClient, gateway: Gateway, receiver: Receiver, tenant_id: str
) -> None:
    for events in (["lectern.nothing.v1"], [], [Subjects.DOCUMENTS_UPLOADED], [Subjects.RETRIEVE]):
        response = await client.post(
            "/v1/webhooks",
            json={"url": receiver.endpoint("never"), "event_types": events},
            headers=admin(gateway, tenant_id),
        )
        assert response.status_code == 422, events
        assert response.headers["content-type"] == "application/problem+json"


async def test_private_addresses_are_refused_unless_allowed(
    client: httpx.AsyncClient, gateway: Gateway, tenant_id: str
) -> None:
    for url in (
        "http://10.1.2.3/hook",
        "http://169.254.169.254/latest/meta-data",
        "http://[::1]:8080/hook",
        "ftp://example.org/hook",
        "http://127.0.0.1:99999/hook",
        "http://[::1/hook",
    ):
        response = await client.post(
            "/v1/webhooks",
            json={"url": url, "event_types": [Subjects.FEEDBACK_FLAGGED]},
            headers=admin(gateway, tenant_id),
        )
        assert response.status_code == 422, url
        assert response.headers["content-type"] == "application/problem+json"
        assert response.json()["reason"] == "url_refused"
    assert (await client.get("/v1/webhooks", headers=admin(gateway, tenant_id))).json() == []


async def test_only_admins_manage_webhooks(
    client: httpx.AsyncClient, gateway: Gateway, receiver: Receiver, tenant_id: str
) -> None:
    created = await register(client, gateway, receiver, tenant_id, "admins-only")
    roles: tuple[Role, ...] = ("student", "teacher")
    for role in roles:
        headers = gateway.token(tenant_id, f"a-{role}", role=role)
        body = {"url": receiver.endpoint("nope"), "event_types": [Subjects.FEEDBACK_FLAGGED]}
        for response in (
            await client.post("/v1/webhooks", json=body, headers=headers),
            await client.get("/v1/webhooks", headers=headers),
            await client.get(f"/v1/webhooks/{created['id']}", headers=headers),
            await client.get(f"/v1/webhooks/{created['id']}/deliveries", headers=headers),
            await client.delete(f"/v1/webhooks/{created['id']}", headers=headers),
        ):
            assert response.status_code == 403, (role, response.request.url)
            assert response.headers["content-type"] == "application/problem+json"


# --- deliveries -----------------------------------------------------------------------------


async def test_the_worker_consumes_every_stream_of_tenant_events(
    gateway: Gateway, jetstream: Any
) -> None:
    for stream in WEBHOOK_STREAMS:
        info = await jetstream.consumer_info(stream, WEBHOOK_DURABLE)
        assert info.config.durable_name == WEBHOOK_DURABLE, stream
    assert gateway.worker is not None
    assert gateway.worker.deps.webhook_worker is not None
    assert gateway.worker.deps.webhook_worker.running
    # the HTTP replica serves HTTP: no delivery worker, no loops
    assert gateway.deps.webhook_worker is None
    assert gateway.app.state.lectern.background == {}
    async with httpx.AsyncClient() as http:
        ready = await http.get(f"{gateway.worker.url}/readyz")
    assert ready.status_code == 200, ready.text
    assert ready.json()["checks"]["loops"] == "ok"


async def publish(broker: NatsBroker, event: Event) -> Event:
    await publish_event(broker, event)
    return event


async def test_an_event_is_delivered_signed_and_logged(
    client: httpx.AsyncClient,
    gateway: Gateway,
    receiver: Receiver,
    broker: NatsBroker,
    tenant_id: str,
) -> None:
    hook = await register(client, gateway, receiver, tenant_id, "signed")
    event = await publish(broker, flagged(tenant_id))
    (delivery,) = await finished(client, gateway, tenant_id, hook["id"])
    assert delivery["status"] == "succeeded", delivery
    assert delivery["event_id"] == str(event.event_id)
    assert delivery["event_type"] == Subjects.FEEDBACK_FLAGGED
    (attempt,) = delivery["attempts"]
    assert attempt["status_code"] == 204 and attempt["error"] is None
    assert attempt["duration_ms"] >= 0 and attempt["attempted_at"]
    ((headers, payload),) = receiver.received["signed"]
    assert headers["webhook-id"] == str(event.event_id)
    assert headers["webhook-signature"].startswith("v1,")
    assert headers["ce-type"] == Subjects.FEEDBACK_FLAGGED
    assert payload["event_id"] == str(event.event_id) and payload["details"] == "which phase?"
    assert receiver.refused == []


async def test_an_api_change_is_delivered(
    client: httpx.AsyncClient, gateway: Gateway, receiver: Receiver, db_pool: Any, tenant_id: str
) -> None:
    """A teacher's metadata change: the outbox publishes ``documents.updated``, the gateway
    consumes it and delivers it."""
    hook = await register(
        client, gateway, receiver, tenant_id, "api", events=(Subjects.DOCUMENTS_UPDATED,)
    )
    seeded = await seed_document(db_pool, tenant_id=tenant_id)
    response = await client.patch(
        f"/v1/documents/{seeded.document_id}",
        json={"title": "Photosynthesis, revised"},
        headers=gateway.token(tenant_id, "teacher-1", role="teacher"),
    )
    assert response.status_code == 200, response.text
    (delivery,) = await finished(client, gateway, tenant_id, hook["id"])
    assert delivery["status"] == "succeeded"
    ((_, payload),) = receiver.received["api"]
    assert payload["document_id"] == str(seeded.document_id)
    assert payload["changes"]["title"][1] == "Photosynthesis, revised"


async def test_another_tenants_events_are_never_delivered(
    client: httpx.AsyncClient,
    gateway: Gateway,
    receiver: Receiver,
    broker: NatsBroker,
    tenant_id: str,
) -> None:
    hook = await register(client, gateway, receiver, tenant_id, "mine")
    other_tenant = f"{tenant_id}-b"
    other = await register(
        client, gateway, receiver, other_tenant, "theirs", events=(Subjects.QUIZ_ATTEMPTED,)
    )
    theirs = await publish(broker, flagged(other_tenant))  # their tenant, not their type
    ours = await publish(broker, flagged(tenant_id))
    (delivery,) = await finished(client, gateway, tenant_id, hook["id"])
    assert delivery["event_id"] == str(ours.event_id)
    await asyncio.sleep(0.5)
    assert [p["event_id"] for _, p in receiver.received["mine"]] == [str(ours.event_id)]
    assert receiver.received["theirs"] == []
    assert await deliveries(client, gateway, other_tenant, other["id"]) == []
    assert str(theirs.event_id) not in json.dumps(receiver.received)


async def test_a_failing_receiver_gets_the_delivery_on_retry(
    client: httpx.AsyncClient,
    gateway: Gateway,
    receiver: Receiver,
    broker: NatsBroker,
    tenant_id: str,
) -> None:
    hook = await register(client, gateway, receiver, tenant_id, "flaky", "500", "500", "ok")
    await publish(broker, flagged(tenant_id))
    (delivery,) = await finished(client, gateway, tenant_id, hook["id"])
    assert delivery["status"] == "succeeded"
    codes = [a["status_code"] for a in delivery["attempts"]]
    assert codes == [500, 500, 204]
    assert delivery["attempts"][0]["error"] == "HTTP 500"
    assert len(receiver.received["flaky"]) == 1
    webhook = await client.get(f"/v1/webhooks/{hook['id']}", headers=admin(gateway, tenant_id))
    assert webhook.json()["consecutive_failures"] == 0


async def test_a_receiver_that_times_out_is_retried(
    client: httpx.AsyncClient,
    gateway: Gateway,
    receiver: Receiver,
    broker: NatsBroker,
    tenant_id: str,
) -> None:
    hook = await register(client, gateway, receiver, tenant_id, "slow", "slow", "ok")
    await publish(broker, flagged(tenant_id))
    (delivery,) = await finished(client, gateway, tenant_id, hook["id"])
    assert delivery["status"] == "succeeded"
    first, second = delivery["attempts"]
    assert first["status_code"] is None and "timed out" in first["error"]
    assert first["duration_ms"] >= TIMEOUT_S * 1000 * 0.9
    assert second["status_code"] == 204


async def test_a_webhook_failing_n_deliveries_running_is_disabled_and_switched_back_on(
    client: httpx.AsyncClient,
    gateway: Gateway,
    receiver: Receiver,
    broker: NatsBroker,
    tenant_id: str,
) -> None:
    hook = await register(client, gateway, receiver, tenant_id, "dead", "500")
    headers = admin(gateway, tenant_id)
    for n in range(1, DISABLE_AFTER + 1):
        await publish(broker, flagged(tenant_id))
        found = await finished(client, gateway, tenant_id, hook["id"], n=n)
        assert all(len(d["attempts"]) == 1 + len(SCHEDULE_S) for d in found)
    assert {d["status"] for d in found} == {"failed"}
    webhook = (await client.get(f"/v1/webhooks/{hook['id']}", headers=headers)).json()
    assert webhook["enabled"] is False and webhook["disabled_at"]
    assert webhook["consecutive_failures"] == DISABLE_AFTER
    assert f"{DISABLE_AFTER} deliveries in a row failed" in webhook["disabled_reason"]
    assert "HTTP 500" in webhook["disabled_reason"]
    # disabled: new events are not recorded, nor can a delivery be sent again
    await publish(broker, flagged(tenant_id))
    await asyncio.sleep(0.8)
    assert len(await deliveries(client, gateway, tenant_id, hook["id"])) == DISABLE_AFTER
    again = await client.post(
        f"/v1/webhooks/{hook['id']}/deliveries/{found[0]['id']}/redeliver", headers=headers
    )
    assert again.status_code == 409 and again.json()["reason"] == "webhook_disabled"
    # the receiver is back: switched on, the next event arrives
    receiver.plans["dead"] = ["ok"]
    enabled = await client.patch(
        f"/v1/webhooks/{hook['id']}", json={"enabled": True}, headers=headers
    )
    assert enabled.status_code == 200, enabled.text
    assert enabled.json()["enabled"] is True and enabled.json()["disabled_reason"] is None
    assert enabled.json()["consecutive_failures"] == 0
    event = await publish(broker, flagged(tenant_id))
    await until(lambda: _got(receiver, "dead", event), "the delivery after re-enabling")


async def _got(receiver: Receiver, name: str, event: Event) -> bool:
    return any(p["event_id"] == str(event.event_id) for _, p in receiver.received[name])


async def test_a_delivery_is_sent_again_on_request(
    client: httpx.AsyncClient,
    gateway: Gateway,
    receiver: Receiver,
    broker: NatsBroker,
    tenant_id: str,
) -> None:
    hook = await register(client, gateway, receiver, tenant_id, "again")
    event = await publish(broker, flagged(tenant_id))
    (delivery,) = await finished(client, gateway, tenant_id, hook["id"])
    url = f"/v1/webhooks/{hook['id']}/deliveries/{delivery['id']}/redeliver"
    response = await client.post(url, headers=admin(gateway, tenant_id))
    assert response.status_code == 202, response.text
    assert response.json()["status"] == "pending"

    async def twice() -> list[dict[str, Any]] | None:
        found = await deliveries(client, gateway, tenant_id, hook["id"])
        return (
            found if found[0]["status"] == "succeeded" and len(found[0]["attempts"]) == 2 else None
        )

    (again,) = await until(twice, "the redelivery")
    assert [h["webhook-id"] for h, _ in receiver.received["again"]] == [str(event.event_id)] * 2
    assert again["id"] == delivery["id"]
    unknown = await client.post(
        f"/v1/webhooks/{hook['id']}/deliveries/{uuid.uuid4()}/redeliver",
        headers=admin(gateway, tenant_id),
    )
    assert unknown.status_code == 404


async def test_replicas_never_send_one_delivery_twice(
    client: httpx.AsyncClient,
    gateway: Gateway,
    receiver: Receiver,
    db_pool: Any,
    tenant_id: str,
) -> None:
    """Three more workers (replicas) race the gateway's own for a burst of deliveries: each
    is sent once."""
    hook = await register(client, gateway, receiver, tenant_id, "burst")
    events = [flagged(tenant_id) for _ in range(30)]
    for event in events + events[:3]:  # a message JetStream delivers again records nothing
        await record_event(
            pool=db_pool, subject=event.subject, body=json.loads(event.model_dump_json()),
            payload=event.model_dump_json().encode(), headers={},
        )  # fmt: skip
    workers = [DeliveryWorker(pool=db_pool, settings=gateway.settings) for _ in range(3)]
    async with httpx.AsyncClient() as http:
        for _ in range(10):
            await asyncio.gather(*(w.send_due(http) for w in workers))
    await finished(client, gateway, tenant_id, hook["id"], n=len(events))
    # an event received twice was sent again because its first attempt failed (on a slow,
    # busy machine an answer can come after the test's 0.5 s timeout: Standard Webhooks is
    # at least once, by webhook-id), never because two workers held it at once: each receipt
    # is one recorded attempt, and every attempt but a delivery's last one failed
    attempts = await db_pool.fetch(
        "SELECT d.event_id::text AS event_id, a.error FROM webhook_attempts a "
        "JOIN webhook_deliveries d ON d.id = a.delivery_id WHERE d.webhook_id = $1 "
        "ORDER BY a.id",
        uuid.UUID(hook["id"]),
    )

    async def all_arrived() -> list[str] | None:
        # an attempt that timed out is still on its way to the receiver (seen: 8 of them
        # arrived after the deliveries had finished, on a loaded machine)
        ids = [p["event_id"] for _, p in receiver.received["burst"]]
        return ids if len(ids) >= len(attempts) else None

    ids = await until(all_arrived, f"{len(attempts)} attempts received")
    assert set(ids) == {str(e.event_id) for e in events}
    assert sorted(ids) == sorted(a["event_id"] for a in attempts)
    for event_id in set(ids):
        errors = [a["error"] for a in attempts if a["event_id"] == event_id]
        assert errors[-1] is None and all(e is not None for e in errors[:-1]), (event_id, errors)
    # finished deliveries are kept LECTERN_GATEWAY_WEBHOOK_RETENTION_DAYS, then pruned
    await db_pool.execute(
        "UPDATE webhook_deliveries SET finished_at = now() - interval '31 days' "
        "WHERE webhook_id = $1",
        uuid.UUID(hook["id"]),
    )
    assert await workers[0].prune() >= len(events)
    assert await deliveries(client, gateway, tenant_id, hook["id"]) == []


async def test_a_stopping_worker_finishes_the_deliveries_in_flight(
    client: httpx.AsyncClient,
    gateway: Gateway,
    receiver: Receiver,
    broker: NatsBroker,
    tenant_id: str,
) -> None:
    """SIGTERM's path: the worker claims nothing more, and the attempt in flight (a receiver
    answering late, within the timeout) is finished and recorded before it ends."""
    assert gateway.worker is not None
    deliveries_worker = gateway.worker.deps.webhook_worker
    assert deliveries_worker is not None
    hook = await register(client, gateway, receiver, tenant_id, "draining", "lag")
    event = await publish(broker, flagged(tenant_id))
    await until(lambda: _hit(receiver, "draining"), "the delivery under way")
    try:
        await deliveries_worker.stop(grace_s=TIMEOUT_S * 4)
        assert not deliveries_worker.running
        (delivery,) = await deliveries(client, gateway, tenant_id, hook["id"])
        assert delivery["status"] == "succeeded", delivery
        assert delivery["event_id"] == str(event.event_id)
        assert len(delivery["attempts"]) == 1
        assert len(receiver.received["draining"]) == 1
    finally:
        _restart(gateway.worker)


async def _hit(receiver: Receiver, name: str) -> bool:
    return receiver.hits[name] > 0


def _restart(worker: Worker) -> None:
    deliveries_worker = worker.deps.webhook_worker
    assert deliveries_worker is not None
    deliveries_worker.start()
    assert deliveries_worker.running


async def test_the_gateways_nats_user_may_consume_the_webhook_streams(
    tmp_path: Path,
) -> None:
    """With NATS users on (the embedded stack, Kubernetes), the gateway's user creates the
    durable consumers and fetches from them."""
    passwords = new_credentials(list(SERVICE_PERMISSIONS))
    server = EmbeddedNats(tmp_path / "nats", authorization=authorization_config(passwords))
    server.start()
    try:
        user = nats_user("gateway")
        nc = await nats.connect(server.url, user=user, password=passwords[user])
        try:
            js = nc.jetstream()
            await ensure_streams(js)
            for stream in WEBHOOK_STREAMS:
                sub = await js.pull_subscribe(
                    "lectern.>",
                    durable=WEBHOOK_DURABLE,
                    stream=stream,
                    config=ConsumerConfig(deliver_policy=DeliverPolicy.NEW),
                )
                subject = next(s for s in WEBHOOK_EVENTS if stream_for(s).name == stream)
                admin_nc = await nats.connect(
                    server.url, user=ADMIN_USER, password=passwords[ADMIN_USER]
                )
                await admin_nc.jetstream().publish(subject, b"{}")
                await admin_nc.close()
                (message,) = await sub.fetch(1, timeout=5)
                await message.ack()
                assert message.subject == subject
        finally:
            await nc.close()
    finally:
        server.stop()
