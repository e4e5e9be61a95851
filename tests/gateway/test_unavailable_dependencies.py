"""A dependency down for now reaches the client as 503 problem+json with ``Retry-After`` and
a reason naming it, never as a 500 nor as another dependency (issue 49): NATS electing a
stream leader, without a quorum or being reconnected to (``nats_unavailable``), Postgres
away (``database_unavailable``), another service not answering (``upstream``). A chat stream
already open ends with a retryable ``error`` event of the same reason.

Each error is raised where a route meets its dependency: the broker's request (search, a
chat turn's retrieval), the object-store put and the outbox write (uploads), the pool
(sessions). Under a NATS leader kill, uploads had answered ``500 internal`` (a JetStream 503
escaping unmapped) and ``503 database_unavailable`` (NATS's TimeoutError is also Python's,
which was taken for Postgres's)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from types import SimpleNamespace
from typing import Any

import asyncpg
import httpx
import pytest
from lectern_testing.chat import Gateway, ask, gateway_settings, new_session, serve_gateway
from nats import errors as nats_errors
from nats.js import errors as js_errors

from lectern_gateway.deps import get_pool
from lectern_gateway.documents import routes as documents

pytestmark = pytest.mark.integration

ErrorFactory = Callable[[], Exception]

#: NATS failing while a stream elects its leader, the quorum is lost or the client is moved
#: to another server, and the reason a search or a chat turn (core request/reply to the
#: retriever) gives for it: "no responders" and a time-out are retried until the deadline
#: and then say the retriever did not answer (the gateway's connection being up)
NATS_ERRORS: dict[str, tuple[ErrorFactory, str]] = {
    "ServiceUnavailableError": (
        lambda: js_errors.ServiceUnavailableError(code=503, description="JetStream unavailable"),
        "nats_unavailable",
    ),
    "APIError 503 no response from stream": (
        lambda: js_errors.APIError(code=503, description="no response from stream"),
        "nats_unavailable",
    ),
    "ServerError": (lambda: js_errors.ServerError(code=500), "nats_unavailable"),
    "NoStreamResponseError": (js_errors.NoStreamResponseError, "nats_unavailable"),
    "ConnectionReconnectingError": (nats_errors.ConnectionReconnectingError, "nats_unavailable"),
    "ConnectionClosedError": (nats_errors.ConnectionClosedError, "nats_unavailable"),
    "OutboundBufferLimitError": (nats_errors.OutboundBufferLimitError, "nats_unavailable"),
    # the client's socket failing under a write: Python's own error, not Postgres's
    "ConnectionResetError": (ConnectionResetError, "nats_unavailable"),
    "TimeoutError": (nats_errors.TimeoutError, "upstream"),
    "NoRespondersError": (nats_errors.NoRespondersError, "upstream"),
}

#: Postgres refusing, gone or too slow, as asyncpg and the pool raise it
DATABASE_ERRORS: dict[str, ErrorFactory] = {
    "CannotConnectNowError": lambda: asyncpg.CannotConnectNowError("starting up"),
    "ConnectionDoesNotExistError": lambda: asyncpg.ConnectionDoesNotExistError("closed"),
    "TooManyConnectionsError": lambda: asyncpg.TooManyConnectionsError("too many"),
    "ConnectionRefusedError": ConnectionRefusedError,
    "TimeoutError": TimeoutError,
}


class FailingBucket:
    """The documents bucket of a JetStream that cannot take an object now."""

    def __init__(self, error: ErrorFactory) -> None:
        self.error = error

    async def put(self, *args: Any, **kwargs: Any) -> Any:
        raise self.error()


class FailingJetStream:
    """A JetStream context whose object store fails when bound (``at_bind``) or written."""

    def __init__(self, error: ErrorFactory, *, at_bind: bool = False) -> None:
        self.error = error
        self.at_bind = at_bind

    async def object_store(self, bucket: str) -> FailingBucket:
        if self.at_bind:
            raise self.error()
        return FailingBucket(self.error)


class FailingBroker:
    """The gateway's broker as NATS fails: every request raises ``error`` (or, without one,
    is never answered), the object store is a ``FailingJetStream``; ``connected`` is the
    client's own connection state."""

    def __init__(
        self, error: ErrorFactory | None, *, connected: bool = True, at_bind: bool = False
    ) -> None:
        self.error = error
        stream = FailingJetStream(error or nats_errors.TimeoutError, at_bind=at_bind)
        connection = SimpleNamespace(is_connected=connected)
        self.config = SimpleNamespace(
            connection_state=SimpleNamespace(stream=stream, connection=connection)
        )

    async def request(self, payload: Any, subject: str, *, timeout: float) -> Any:
        if self.error is None:  # a responder that took the request and died with it
            await asyncio.sleep(timeout)
            raise nats_errors.TimeoutError
        raise self.error()


class FailingPool:
    """A pool whose every use raises ``error`` (Postgres away)."""

    def __init__(self, error: ErrorFactory) -> None:
        self.error = error

    @asynccontextmanager
    async def acquire(self) -> AsyncIterator[Any]:
        raise self.error()
        yield  # pragma: no cover

    async def _fail(self, *args: Any, **kwargs: Any) -> Any:
        raise self.error()

    fetch = fetchrow = fetchval = execute = _fail


@pytest.fixture(scope="module")
async def gateway(nats_url: str, database_url: str) -> AsyncIterator[Gateway]:
    # short budgets: a retried request gives up within a second here (10 s by default)
    settings = gateway_settings(
        nats_url,
        database_url,
        request_timeout_s=0.8,
        retrieve_timeout_s=0.8,
        rerank_timeout_s=0.8,
        offline_answerer_embeddings=False,
    )
    async with serve_gateway(settings) as running:
        yield running


@pytest.fixture
def failing_nats(gateway: Gateway) -> Iterator[Callable[[FailingBroker], None]]:
    """Put a failing broker in the gateway's place for one test (routes and chat turns)."""
    state, deps = gateway.app.state.lectern, gateway.deps
    real = state.broker

    def install(broker: FailingBroker) -> None:
        state.broker = deps.broker = broker  # type: ignore[assignment]

    yield install
    state.broker = deps.broker = real


def assert_unavailable(response: httpx.Response, reason: str) -> None:
    """503 problem+json naming ``reason``, with a positive ``Retry-After``."""
    assert response.status_code == 503, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    assert response.json()["reason"] == reason, response.text
    assert int(response.headers["retry-after"]) > 0


def upload(client: httpx.AsyncClient, gateway: Gateway, tenant_id: str) -> Any:
    return client.post(
        f"{gateway.url}/v1/documents",
        headers=gateway.token(tenant_id, "teacher-1", role="teacher"),
        files={"file": ("lesson.md", f"# Mitosis\n\nCells divide. {tenant_id}\n", "text/markdown")},
        data={"title": "Mitosis"},
    )


@pytest.mark.parametrize("at_bind", [False, True], ids=["put", "bind"])
@pytest.mark.parametrize("name", list(NATS_ERRORS))
async def test_an_upload_while_the_object_store_fails_is_503_nats(
    gateway: Gateway,
    failing_nats: Callable[[FailingBroker], None],
    tenant_id: str,
    name: str,
    at_bind: bool,
) -> None:
    """The object store is a JetStream stream: whatever NATS raises under it (its time-out
    too) is NATS being unavailable."""
    failing_nats(FailingBroker(NATS_ERRORS[name][0], at_bind=at_bind))
    async with httpx.AsyncClient(timeout=30) as client:
        response = await upload(client, gateway, tenant_id)
    assert_unavailable(response, "nats_unavailable")
    assert response.headers["retry-after"] == "2"


@pytest.mark.parametrize("name", list(DATABASE_ERRORS))
async def test_an_upload_whose_outbox_write_fails_is_503_database(
    gateway: Gateway, monkeypatch: pytest.MonkeyPatch, tenant_id: str, name: str
) -> None:
    """The bytes are stored; the row and its ``documents.uploaded`` go to Postgres in one
    transaction, which fails: Postgres is named, not NATS."""
    error = DATABASE_ERRORS[name]

    async def enqueue(*args: Any, **kwargs: Any) -> None:
        raise error()

    monkeypatch.setattr(documents, "enqueue", enqueue)
    async with httpx.AsyncClient(timeout=30) as client:
        response = await upload(client, gateway, tenant_id)
    assert_unavailable(response, "database_unavailable")
    assert response.headers["retry-after"] == "5"


@pytest.mark.parametrize("name", list(NATS_ERRORS))
async def test_a_search_while_nats_fails_is_503_naming_the_cause(
    gateway: Gateway, failing_nats: Callable[[FailingBroker], None], tenant_id: str, name: str
) -> None:
    factory, reason = NATS_ERRORS[name]
    failing_nats(FailingBroker(factory))
    async with httpx.AsyncClient(timeout=30) as client:
        response = await client.post(
            f"{gateway.url}/v1/search",
            json={"query": "mitosis"},
            headers=gateway.token(tenant_id, "teacher-1", role="teacher"),
        )
    assert_unavailable(response, reason)


@pytest.mark.parametrize(("connected", "reason"), [(True, "upstream"), (False, "nats_unavailable")])
async def test_a_search_nobody_answers_names_the_retriever_or_nats(
    gateway: Gateway,
    failing_nats: Callable[[FailingBroker], None],
    tenant_id: str,
    connected: bool,
    reason: str,
) -> None:
    """No reply by the deadline: the retriever did not answer, unless the gateway's own
    NATS connection is down (then the request never left)."""
    failing_nats(FailingBroker(None, connected=connected))
    async with httpx.AsyncClient(timeout=30) as client:
        response = await client.post(
            f"{gateway.url}/v1/search",
            json={"query": "mitosis"},
            headers=gateway.token(tenant_id, "teacher-1", role="teacher"),
        )
    assert_unavailable(response, reason)


#: routes that ask the memory service (it owns the memories): (method, path, role)
MEMORY_ROUTES = [
    ("GET", "/v1/me/memories", "student"),
    ("DELETE", "/v1/me/memories", "student"),
    ("DELETE", "/v1/me/memories/00000000-0000-0000-0000-000000000001", "student"),
    ("GET", "/v1/users/stu/memories", "admin"),
    ("GET", "/v1/me/export", "student"),
]


@pytest.mark.parametrize(("method", "path", "role"), MEMORY_ROUTES)
@pytest.mark.parametrize(
    ("broken", "reason"),
    [("ConnectionClosedError", "nats_unavailable"), ("no memory replica", "upstream"),
     ("own connection down", "nats_unavailable")],
)  # fmt: skip
async def test_memories_while_the_memory_service_cannot_answer_are_503(
    gateway: Gateway,
    failing_nats: Callable[[FailingBroker], None],
    tenant_id: str,
    method: str,
    path: str,
    role: str,
    broken: str,
    reason: str,
) -> None:
    """The memories are the memory service's, asked over NATS: NATS failing, or no memory
    replica answering by the deadline (none runs here), is 503 naming which."""
    if broken == "ConnectionClosedError":
        failing_nats(FailingBroker(NATS_ERRORS[broken][0]))
    elif broken == "own connection down":
        failing_nats(FailingBroker(None, connected=False))
    headers = gateway.token(tenant_id, "stu", role=role)  # type: ignore[arg-type]
    async with httpx.AsyncClient(timeout=30) as client:
        response = await client.request(method, f"{gateway.url}{path}", headers=headers)
    assert_unavailable(response, reason)


@pytest.mark.parametrize("name", list(DATABASE_ERRORS))
async def test_sessions_while_postgres_fails_are_503_database(
    gateway: Gateway, tenant_id: str, name: str
) -> None:
    """Sessions live in Postgres only: NATS is never named for them."""
    overrides = gateway.app.dependency_overrides
    overrides[get_pool] = lambda: FailingPool(DATABASE_ERRORS[name])
    student = gateway.token(tenant_id, "student-1")
    try:
        async with httpx.AsyncClient(base_url=gateway.url, timeout=30) as client:
            created = await client.post("/v1/sessions", json={}, headers=student)
            listed = await client.get("/v1/sessions", headers=student)
    finally:
        overrides.pop(get_pool)
    assert_unavailable(created, "database_unavailable")
    assert_unavailable(listed, "database_unavailable")


@pytest.mark.parametrize("name", list(NATS_ERRORS))
async def test_a_chat_turn_while_nats_fails_ends_with_a_retryable_error_naming_it(
    gateway: Gateway, failing_nats: Callable[[FailingBroker], None], tenant_id: str, name: str
) -> None:
    """The stream is open (200) before the retrieval meets NATS: its ``error`` event
    carries the reason a search would have, and says the question can be asked again."""
    factory, reason = NATS_ERRORS[name]
    student = gateway.token(tenant_id, "student-1")
    async with httpx.AsyncClient(timeout=30) as client:
        session = await new_session(client, gateway, student)
        failing_nats(FailingBroker(factory))
        answer = await ask(client, gateway, session["id"], "What does mitosis produce?", student)
    assert answer.status == 200, answer.problem
    (error,) = answer.of("error")
    assert error.reason == reason and error.retryable, error
