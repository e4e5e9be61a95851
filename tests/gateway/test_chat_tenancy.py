"""Tenancy probes: a student of tenant A reaches nothing of tenant B (sessions, chunks,
memories, gaps, flags), nor another student's sessions or cited spans, nor assessment chunks,
through any chat endpoint; auth by JWKS and API keys (created, listed, revoked by admins)."""

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
import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm
from lectern_testing.chat import (
    Gateway,
    Responders,
    ask,
    gateway_settings,
    memory_service,
    new_session,
    published,
    run_responders,
    seed_document,
    serve_gateway,
)
from lectern_testing.plugin import LOCAL_EMBEDDING_DIM

from lectern_common.events import Subjects
from lectern_gateway.auth import (
    authenticate_api_key,
    create_api_key,
    hash_api_key,
    list_api_keys,
)
from lectern_gateway.chat.lifecycle import sweep_idle_sessions

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
    """The gateway, trusting the local JWKS too, and the memory service it asks for memories
    (``lectern.memory.*``)."""
    settings = gateway_settings(nats_url, database_url, jwks_url=jwks_url, jwt_audience="lectern")
    async with memory_service(nats_url, database_url), serve_gateway(settings) as running:
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
    # one stale session has an answer, flagged twice: one flagged message
    answer = uuid.uuid4()
    await db_pool.execute(
        "INSERT INTO chat_messages (id, session_id, tenant_id, user_id, role, content) "
        "VALUES ($1, $2, $3, 'stu-1', 'assistant', 'an answer')",
        answer, uuid.UUID(stale[0]["id"]), tenant_id,
    )  # fmt: skip
    for _ in range(2):
        await db_pool.execute(
            "INSERT INTO feedback_flags (id, tenant_id, message_id, session_id, user_id, reason) "
            "VALUES ($1, $2, $3, $4, 'stu-1', 'unclear')",
            uuid.uuid4(), tenant_id, answer, uuid.UUID(stale[0]["id"]),
        )  # fmt: skip
    # two "replicas" sweeping at once
    counts = await asyncio.gather(
        sweep_idle_sessions(pool=db_pool, idle_s=1800),
        sweep_idle_sessions(pool=db_pool, idle_s=1800),
    )
    events = await published(jetstream, Subjects.CHAT_SESSION_ENDED, tenant_id, expect=5)
    ended = sorted(e["session_id"] for e in events)
    assert ended == sorted(s["id"] for s in stale)  # each exactly once
    assert {e["reason"] for e in events} == {"idle"}
    flagged = {e["session_id"]: e["flagged_messages"] for e in events}
    assert flagged == {s["id"]: int(s is stale[0]) for s in stale}
    assert sum(counts) >= len(stale)
    statuses = dict(
        await db_pool.fetch(
            "SELECT id::text, status FROM chat_sessions WHERE tenant_id = $1", tenant_id
        )
    )
    assert statuses[fresh["id"]] == "active"
    assert all(statuses[s["id"]] == "ended" for s in stale)


async def _seed_memory(pool: Any, *, tenant_id: str, user_id: str, text: str) -> uuid.UUID:
    memory_id = uuid.uuid4()
    await pool.execute(
        "INSERT INTO user_memories (id, tenant_id, user_id, kind, text, topic, embedding) "
        "VALUES ($1, $2, $3, 'struggle', $4, 'photosynthesis', $5)",
        memory_id,
        tenant_id,
        user_id,
        text,
        np.ones(LOCAL_EMBEDDING_DIM, dtype=np.float32),
    )
    return memory_id


async def test_memories_gaps_and_flags_of_another_tenant_stay_out_of_reach(
    gateway: Gateway, client: httpx.AsyncClient, db_pool: Any
) -> None:
    tenant_a, tenant_b = f"a-{uuid.uuid4().hex[:8]}", f"b-{uuid.uuid4().hex[:8]}"
    await seed_document(db_pool, tenant_id=tenant_b, title="B notes")
    base = gateway.url
    alice = gateway.token(tenant_a, "alice")
    teacher_a = gateway.token(tenant_a, "teacher-a", role="teacher")
    admin_a = gateway.token(tenant_a, "admin-a", role="admin")
    bob = gateway.token(tenant_b, "bob")
    teacher_b = gateway.token(tenant_b, "teacher-b", role="teacher")
    # tenant B: a memory of bob's (the same user id exists in tenant A too), a flag, a gap
    secret = "Bob struggles with the Calvin cycle"
    bob_memory = await _seed_memory(db_pool, tenant_id=tenant_b, user_id="bob", text=secret)
    await _seed_memory(db_pool, tenant_id=tenant_b, user_id="alice", text=secret)
    bob_session = await new_session(client, gateway, bob)
    answer = await ask(client, gateway, bob_session["id"], "What is photosynthesis?", bob)
    flagged = await client.post(
        f"{base}/v1/messages/{answer.done.message_id}/flags",
        json={"reason": "incorrect", "details": "B's private complaint"},
        headers=bob,
    )
    assert flagged.status_code == 201
    b_flag = flagged.json()["id"]
    await db_pool.execute(
        "INSERT INTO knowledge_gaps (id, tenant_id, session_id, user_id, question, topic, "
        "confidence) VALUES ($1, $2, $3, 'bob', 'What is B-secret chemistry?', 'b-secret', 0.1)",
        uuid.uuid4(),
        tenant_b,
        uuid.UUID(bob_session["id"]),
    )

    # memories: /v1/me is the caller's own tenant and user, whatever another tenant holds
    mine = await client.get(f"{base}/v1/me/memories", headers=alice)
    assert mine.status_code == 200 and mine.json() == []
    assert (
        await client.delete(f"{base}/v1/me/memories/{bob_memory}", headers=alice)
    ).status_code == 404
    # the admin routes: students are refused, admins only see their own tenant
    for method in ("GET", "DELETE"):
        refused = await client.request(method, f"{base}/v1/users/bob/memories", headers=alice)
        assert refused.status_code == 403, method
    listed = await client.get(f"{base}/v1/users/bob/memories", headers=admin_a)
    assert listed.status_code == 200 and listed.json() == []
    assert (
        await client.delete(f"{base}/v1/users/bob/memories/{bob_memory}", headers=admin_a)
    ).status_code == 404
    wiped = await client.delete(f"{base}/v1/users/bob/memories", headers=admin_a)
    assert wiped.status_code == 200 and wiped.json() == {"deleted": 0}
    still = await client.get(f"{base}/v1/me/memories", headers=bob)
    assert [m["text"] for m in still.json()] == [secret]  # untouched in tenant B

    # knowledge gaps and flags: staff only, and only their tenant's
    for path in ("/v1/knowledge-gaps", "/v1/flags"):
        assert (await client.get(base + path, headers=alice)).status_code == 403, path
    gaps = await client.get(f"{base}/v1/knowledge-gaps", headers=teacher_a)
    assert gaps.status_code == 200 and gaps.json() == []
    flags = await client.get(f"{base}/v1/flags", headers=teacher_a)
    assert flags.status_code == 200 and flags.json() == []
    resolved = await client.post(
        f"{base}/v1/flags/{b_flag}/resolve", json={"resolution": "nope"}, headers=teacher_a
    )
    assert resolved.status_code == 404
    # while tenant B's teacher sees them, still open
    b_gaps = (await client.get(f"{base}/v1/knowledge-gaps", headers=teacher_b)).json()
    assert [g["topic"] for g in b_gaps] == ["b-secret"]
    b_flags = (await client.get(f"{base}/v1/flags", headers=teacher_b)).json()
    assert [(f["id"], f["status"]) for f in b_flags] == [(b_flag, "open")]


async def test_source_viewer_does_not_reveal_another_students_cited_span(
    gateway: Gateway, client: httpx.AsyncClient, db_pool: Any, tenant_id: str
) -> None:
    seeded = await seed_document(db_pool, tenant_id=tenant_id)
    base = gateway.url
    alice = gateway.token(tenant_id, "alice")
    mallory = gateway.token(tenant_id, "mallory")
    outsider = gateway.token(f"o-{uuid.uuid4().hex[:8]}", "alice")  # same user id, other tenant
    session = await new_session(client, gateway, alice)
    got = await ask(
        client, gateway, session["id"], "Which enzyme catalyses carbon fixation?", alice
    )
    cited = [c for c in got.done.citations if c.chunk_id is not None]
    assert cited, got.events
    chunk_id, message_id = cited[0].chunk_id, got.done.message_id
    assert chunk_id in seeded.chunk_ids
    own = await client.get(
        f"{base}/v1/chunks/{chunk_id}", params={"message_id": str(message_id)}, headers=alice
    )
    assert own.status_code == 200 and own.json()["highlights"]  # the owner sees the span
    cited_sentence = own.json()["highlights"][0]["cited_sentence"]
    # another student of the tenant may read the chunk, but not alice's answer's span
    plain = await client.get(f"{base}/v1/chunks/{chunk_id}", headers=mallory)
    assert plain.status_code == 200 and plain.json()["highlights"] == []
    probe = await client.get(
        f"{base}/v1/chunks/{chunk_id}", params={"message_id": str(message_id)}, headers=mallory
    )
    assert probe.status_code == 404
    assert cited_sentence not in probe.text and "highlights" not in probe.text
    # nor can anyone of another tenant, even with the same user id
    foreign = await client.get(
        f"{base}/v1/chunks/{chunk_id}", params={"message_id": str(message_id)}, headers=outsider
    )
    assert foreign.status_code == 404 and cited_sentence not in foreign.text


async def test_admins_create_list_and_revoke_api_keys(
    gateway: Gateway, client: httpx.AsyncClient, db_pool: Any, tenant_id: str
) -> None:
    base = gateway.url
    admin = gateway.token(tenant_id, "admin-1", role="admin")
    created = await client.post(
        f"{base}/v1/api-keys", json={"name": "lms-sync", "role": "teacher"}, headers=admin
    )
    assert created.status_code == 201, created.text
    body = created.json()
    key = body["key"]
    assert key.startswith("lk_") and body["plan"] == "pro" and body["role"] == "teacher"
    assert body["created_by"] == "admin-1" and body["revoked_at"] is None
    stored = await db_pool.fetchval("SELECT key_sha256 FROM api_keys WHERE id = $1", body["id"])
    assert stored == hash_api_key(key) and key not in stored
    listed = await client.get(f"{base}/v1/api-keys", headers=admin)
    assert listed.status_code == 200
    (row,) = listed.json()
    assert row["id"] == body["id"] and "key" not in row and key not in listed.text
    with_key = {"X-API-Key": key}
    assert (await client.get(f"{base}/v1/knowledge-gaps", headers=with_key)).status_code == 200
    # revoked: the very next request with it is refused
    revoked = await client.delete(f"{base}/v1/api-keys/{body['id']}", headers=admin)
    assert revoked.status_code == 204
    assert (await client.get(f"{base}/v1/knowledge-gaps", headers=with_key)).status_code == 401
    (row,) = (await client.get(f"{base}/v1/api-keys", headers=admin)).json()
    assert row["revoked_at"] is not None
    # revoking again is harmless; an unknown id is not found
    assert (
        await client.delete(f"{base}/v1/api-keys/{body['id']}", headers=admin)
    ).status_code == 204
    missing = await client.delete(f"{base}/v1/api-keys/{uuid.uuid4()}", headers=admin)
    assert missing.status_code == 404
    # the creator chooses the plan
    free = await client.post(
        f"{base}/v1/api-keys", json={"name": "kiosk", "role": "student", "plan": "free"},
        headers=admin,
    )  # fmt: skip
    assert free.status_code == 201 and free.json()["plan"] == "free"
    principal = await authenticate_api_key(pool=db_pool, key=free.json()["key"])
    assert (principal.role, principal.plan) == ("student", "free")
    bad = await client.post(
        f"{base}/v1/api-keys", json={"name": "x", "plan": "enterprise"}, headers=admin
    )
    assert bad.status_code == 422


async def test_only_admins_manage_api_keys(
    gateway: Gateway, client: httpx.AsyncClient, db_pool: Any, tenant_id: str
) -> None:
    base = gateway.url
    existing = await create_api_key(pool=db_pool, tenant_id=tenant_id, name="lms")
    (key_id,) = [r["id"] for r in await list_api_keys(pool=db_pool, tenant_id=tenant_id)]
    callers = {
        "teacher": gateway.token(tenant_id, "teacher-1", role="teacher"),
        "student": gateway.token(tenant_id, "stu-1"),
        "teacher key": {"X-API-Key": existing},
    }
    for who, headers in callers.items():
        made = await client.post(f"{base}/v1/api-keys", json={"name": "mine"}, headers=headers)
        assert made.status_code == 403, who
        assert (await client.get(f"{base}/v1/api-keys", headers=headers)).status_code == 403
        gone = await client.delete(f"{base}/v1/api-keys/{key_id}", headers=headers)
        assert gone.status_code == 403, who
    assert len(await list_api_keys(pool=db_pool, tenant_id=tenant_id)) == 1
    assert (await client.post(f"{base}/v1/api-keys", json={"name": "x"})).status_code == 401


async def test_an_api_key_of_tenant_a_cannot_reach_tenant_b(
    gateway: Gateway, client: httpx.AsyncClient, db_pool: Any
) -> None:
    tenant_a, tenant_b = f"a-{uuid.uuid4().hex[:8]}", f"b-{uuid.uuid4().hex[:8]}"
    base = gateway.url
    b_doc = await seed_document(db_pool, tenant_id=tenant_b, title="B notes")
    bob = gateway.token(tenant_b, "bob")
    bob_session = await new_session(client, gateway, bob)
    admin_b = gateway.token(tenant_b, "admin-b", role="admin")
    b_key = (
        await client.post(f"{base}/v1/api-keys", json={"name": "b-sync"}, headers=admin_b)
    ).json()
    admin_a = gateway.token(tenant_a, "admin-a", role="admin")
    a_key = (
        await client.post(
            f"{base}/v1/api-keys", json={"name": "a-admin", "role": "admin"}, headers=admin_a
        )
    ).json()
    as_a = {"X-API-Key": a_key["key"]}
    for path in (
        f"/v1/sessions/{bob_session['id']}",
        f"/v1/sessions/{bob_session['id']}/messages",
        f"/v1/documents/{b_doc.document_id}",
        f"/v1/chunks/{b_doc.chunk_ids[0]}",
    ):
        assert (await client.get(base + path, headers=as_a)).status_code == 404, path
    sessions = await client.get(f"{base}/v1/sessions", params={"all_users": "true"}, headers=as_a)
    assert sessions.status_code == 200 and sessions.json() == []
    # tenant A's admin key neither lists nor revokes tenant B's keys
    listed = (await client.get(f"{base}/v1/api-keys", headers=as_a)).json()
    assert [k["id"] for k in listed] == [a_key["id"]]
    assert (
        await client.delete(f"{base}/v1/api-keys/{b_key['id']}", headers=as_a)
    ).status_code == 404
    still = await client.get(f"{base}/v1/knowledge-gaps", headers={"X-API-Key": b_key["key"]})
    assert still.status_code == 200
