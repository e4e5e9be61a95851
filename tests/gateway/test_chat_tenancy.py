"""Tenancy probes: a student of tenant A reaches nothing of tenant B, nor another student's
sessions, nor assessment chunks, through any chat endpoint; auth by JWKS and API keys."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

from lectern_common.events import Subjects
from lectern_gateway.auth import create_api_key
from lectern_gateway.chat.service import sweep_idle_sessions
from lectern_gateway.chat.testing import (
    Gateway,
    Responders,
    ask,
    gateway_settings,
    new_session,
    published,
    run_responders,
    seed_document,
    serve_gateway,
)

pytestmark = pytest.mark.integration

PRIVATE_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
KID = "test-key-1"


@pytest.fixture(scope="module")
def jwks_url() -> Iterator[str]:
    """A local identity provider's JWKS endpoint (no internet here)."""
    jwk = json.loads(RSAAlgorithm.to_jwk(PRIVATE_KEY.public_key()))
    jwk.update(kid=KID, use="sig", alg="RS256")
    body = json.dumps({"keys": [jwk]}).encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/.well-known/jwks.json"
    server.shutdown()


@pytest.fixture(scope="module")
async def responders(nats_url: str, db_pool: Any) -> AsyncIterator[Responders]:
    """Retriever and re-ranker stand-ins."""
    async with run_responders(nats_url, Responders(pool=db_pool)) as running:
        yield running


@pytest.fixture(scope="module")
async def gateway(
    nats_url: str, database_url: str, responders: Responders, jwks_url: str
) -> AsyncIterator[Gateway]:
    """The gateway, trusting the local JWKS too."""
    settings = gateway_settings(nats_url, database_url, jwks_url=jwks_url, jwt_audience="lectern")
    async with serve_gateway(settings) as running:
        yield running


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    """An HTTP client."""
    async with httpx.AsyncClient(timeout=30) as c:
        yield c


async def test_student_reaches_nothing_outside_tenant_and_own_sessions(
    gateway: Gateway, client: httpx.AsyncClient, db_pool: Any, responders: Responders
) -> None:
    tenant_a, tenant_b = f"a-{uuid.uuid4().hex[:8]}", f"b-{uuid.uuid4().hex[:8]}"
    a_doc = await seed_document(db_pool, tenant_id=tenant_a)
    a_exam = await seed_document(
        db_pool,
        tenant_id=tenant_a,
        title="Unit test answers",
        collection="assessment",
        chunks=[("Answer key: photosynthesis question 1 is chlorophyll.", ["Key"], ["key"])],
    )
    b_doc = await seed_document(db_pool, tenant_id=tenant_b, title="B notes")
    alice = gateway.token(tenant_a, "alice")
    mallory = gateway.token(tenant_a, "mallory")
    bob = gateway.token(tenant_b, "bob")
    bob_session = await new_session(client, gateway, bob)
    bob_answer = await ask(client, gateway, bob_session["id"], "What is photosynthesis?", bob)
    alice_session = await new_session(client, gateway, alice)
    base = gateway.url
    # tenant B's session, messages, message flags, chunks and documents: all 404 for alice
    for method, path in [
        ("GET", f"/v1/sessions/{bob_session['id']}"),
        ("GET", f"/v1/sessions/{bob_session['id']}/messages"),
        ("POST", f"/v1/sessions/{bob_session['id']}/end"),
        ("GET", f"/v1/chunks/{b_doc.chunk_ids[0]}"),
        ("GET", f"/v1/documents/{b_doc.document_id}"),
    ]:
        response = await client.request(method, base + path, headers=alice)
        assert response.status_code == 404, (path, response.status_code)
    flag = await client.post(
        f"{base}/v1/messages/{bob_answer.done.message_id}/flags",
        json={"reason": "other"},
        headers=alice,
    )
    assert flag.status_code == 404
    asked = await ask(client, gateway, bob_session["id"], "hello", alice)
    assert asked.status == 404
    # another student of the same tenant cannot read alice's session
    assert (
        await client.get(f"{base}/v1/sessions/{alice_session['id']}", headers=mallory)
    ).status_code == 404
    mine = (await client.get(f"{base}/v1/sessions", headers=mallory)).json()
    assert mine == []
    everyone = await client.get(
        f"{base}/v1/sessions", params={"all_users": "true"}, headers=mallory
    )
    assert everyone.json() == []  # all_users is for staff only
    # assessment chunks: hidden from students, visible to teachers of the tenant
    exam_chunk = a_exam.chunk_ids[0]
    assert (await client.get(f"{base}/v1/chunks/{exam_chunk}", headers=alice)).status_code == 404
    teacher = gateway.token(tenant_a, "teacher-a", role="teacher")
    assert (await client.get(f"{base}/v1/chunks/{exam_chunk}", headers=teacher)).status_code == 200
    assert (
        await client.get(f"{base}/v1/chunks/{a_doc.chunk_ids[0]}", headers=alice)
    ).status_code == 200
    # chat: even a retriever that leaks every tenant's and collection's chunks cannot get
    # them into alice's sources or answer
    responders.leak = True
    try:
        got = await ask(client, gateway, alice_session["id"], "photosynthesis chlorophyll", alice)
    finally:
        responders.leak = False
    allowed = set(a_doc.chunk_ids)
    sources = got.of("sources")[0].sources
    assert sources and {s.chunk_id for s in sources} <= allowed
    assert "Answer key" not in got.text
    assert all(c.chunk_id in allowed for c in got.done.citations if c.chunk_id)
    # the chat's retrieval request itself is scoped to alice's tenant and educational only
    last = responders.requests[-1]
    assert last.tenant_id == tenant_a and last.filters.collections == ["educational"]


async def test_rs256_tokens_from_a_jwks(
    gateway: Gateway, client: httpx.AsyncClient, tenant_id: str
) -> None:
    now = int(time.time())
    claims = {
        "tenant": tenant_id,
        "sub": "idp-user",
        "role": "student",
        "plan": "pro",
        "aud": "lectern",
        "iat": now,
        "exp": now + 600,
    }
    token = jwt.encode(claims, PRIVATE_KEY, algorithm="RS256", headers={"kid": KID})
    ok = await client.get(
        f"{gateway.url}/v1/sessions", headers={"Authorization": f"Bearer {token}"}
    )
    assert ok.status_code == 200 and ok.json() == []
    wrong_aud = jwt.encode(
        {**claims, "aud": "other"}, PRIVATE_KEY, algorithm="RS256", headers={"kid": KID}
    )
    other_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    forged = jwt.encode(claims, other_key, algorithm="RS256", headers={"kid": KID})
    unknown_kid = jwt.encode(claims, PRIVATE_KEY, algorithm="RS256", headers={"kid": "nope"})
    for bad in (wrong_aud, forged, unknown_kid):
        response = await client.get(
            f"{gateway.url}/v1/sessions", headers={"Authorization": f"Bearer {bad}"}
        )
        assert response.status_code == 401
        assert response.headers["www-authenticate"].startswith("Bearer")


async def test_api_keys_for_machine_clients(
    gateway: Gateway, client: httpx.AsyncClient, db_pool: Any, tenant_id: str
) -> None:
    key = await create_api_key(pool=db_pool, tenant_id=tenant_id, name="lms-sync")
    stored = await db_pool.fetchval(
        "SELECT key_sha256 FROM api_keys WHERE tenant_id = $1", tenant_id
    )
    assert key not in stored  # only the hash is kept
    ok = await client.get(f"{gateway.url}/v1/knowledge-gaps", headers={"X-API-Key": key})
    assert ok.status_code == 200  # teacher role by default
    await db_pool.execute("UPDATE api_keys SET revoked_at = now() WHERE tenant_id = $1", tenant_id)
    revoked = await client.get(f"{gateway.url}/v1/knowledge-gaps", headers={"X-API-Key": key})
    assert revoked.status_code == 401
    bogus = await client.get(f"{gateway.url}/v1/sessions", headers={"X-API-Key": "lk_nope"})
    assert bogus.status_code == 401


async def test_idle_sweep_ends_each_session_once_across_replicas(
    gateway: Gateway, client: httpx.AsyncClient, db_pool: Any, tenant_id: str, jetstream: Any
) -> None:
    headers = gateway.token(tenant_id, "stu-1")
    stale = [await new_session(client, gateway, headers) for _ in range(5)]
    fresh = await new_session(client, gateway, headers)
    await db_pool.execute(
        "UPDATE chat_sessions SET last_activity_at = now() - interval '2 hours' "
        "WHERE id = ANY($1::uuid[])",
        [uuid.UUID(s["id"]) for s in stale],
    )
    broker = gateway.app.state.lectern.broker
    # two "replicas" sweeping at once
    counts = await asyncio.gather(
        sweep_idle_sessions(pool=db_pool, broker=broker, idle_s=1800),
        sweep_idle_sessions(pool=db_pool, broker=broker, idle_s=1800),
    )
    events = await published(jetstream, Subjects.CHAT_SESSION_ENDED, tenant_id)
    ended = sorted(e["session_id"] for e in events)
    assert ended == sorted(s["id"] for s in stale)  # each exactly once
    assert {e["reason"] for e in events} == {"idle"}
    assert sum(counts) >= len(stale)
    statuses = dict(
        await db_pool.fetch(
            "SELECT id::text, status FROM chat_sessions WHERE tenant_id = $1", tenant_id
        )
    )
    assert statuses[fresh["id"]] == "active"
    assert all(statuses[s["id"]] == "ended" for s in stale)
