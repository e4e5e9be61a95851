"""Hostile and careless input at the HTTP edge: NUL characters, odd values, blank queries,
oversized JSON and broken cursors get problem+json 4xx, never a 500 or Postgres's words,
and a chat message refused this way does not count against the quota."""

from __future__ import annotations

import base64
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import jwt
import pytest
from lectern_testing.chat import (
    Gateway,
    Responders,
    gateway_settings,
    run_responders,
    serve_gateway,
)

from lectern_gateway.problems import MAX_JSON_BODY_BYTES

pytestmark = pytest.mark.integration

NUL = "a\u0000b"


@pytest.fixture(scope="module")
async def gateway(nats_url: str, database_url: str, db_pool: Any) -> AsyncIterator[Gateway]:
    """The gateway with retriever and re-ranker stand-ins."""
    async with (
        run_responders(nats_url, Responders(pool=db_pool)),
        serve_gateway(
            gateway_settings(nats_url, database_url, jwt_issuer="https://lectern.example")
        ) as running,
    ):
        yield running


@pytest.fixture
async def client(gateway: Gateway) -> AsyncIterator[httpx.AsyncClient]:
    """An HTTP client of the gateway."""
    async with httpx.AsyncClient(base_url=gateway.url, timeout=30) as c:
        yield c


def assert_problem(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    body: dict[str, Any] = response.json()
    assert body["status"] == status
    assert "postgres" not in response.text.lower() and "byte sequence" not in response.text
    return body


async def test_nul_characters_anywhere_are_a_clear_400(
    gateway: Gateway, client: httpx.AsyncClient, tenant_id: str
) -> None:
    student = gateway.token(tenant_id, "sam")
    teacher = gateway.token(tenant_id, "ms-lee", role="teacher")
    admin = gateway.token(tenant_id, "root", role="admin")
    probes = [
        ("POST", "/v1/sessions", student, {"subject": NUL}),
        ("POST", "/v1/search", student, {"query": NUL}),
        ("POST", "/v1/search", student, {"query": "mitosis", "filters": {"subject": NUL}}),
        ("POST", "/v1/api-keys", admin, {"name": NUL, "role": "teacher"}),
    ]
    for method, path, headers, body in probes:
        response = await client.request(method, path, headers=headers, json=body)
        assert_problem(response, 400)
    listed = await client.get("/v1/documents", params={"subject": NUL}, headers=teacher)
    assert_problem(listed, 400)
    # a NUL in a chat message is refused before it is stored or counted
    session = await client.post("/v1/sessions", headers=student, json={"mode": "chat"})
    assert session.status_code == 201, session.text
    url = f"/v1/sessions/{session.json()['id']}/messages"
    assert_problem(await client.post(url, headers=student, json={"content": NUL}), 400)
    history = await client.get(url, headers=student)
    assert history.status_code == 200 and history.json() == []
    # the text "\u0000" (an escaped backslash) is ordinary text
    fine = await client.post(
        "/v1/search", headers=student, json={"query": "what does \\u0000 mean in C"}
    )
    assert fine.status_code == 200, fine.text


async def test_an_upload_with_a_nul_in_its_name_or_fields_is_refused(
    gateway: Gateway, client: httpx.AsyncClient, tenant_id: str
) -> None:
    teacher = gateway.token(tenant_id, "ms-lee", role="teacher")
    body = b"Mitosis produces two identical cells. " * 20
    # written by hand: httpx would percent-encode the NUL of the file name
    raw = (
        b'--B\r\nContent-Disposition: form-data; name="file"; filename="no\x00tes.txt"\r\n'
        b"Content-Type: text/plain\r\n\r\n" + body + b"\r\n--B--\r\n"
    )
    named = await client.post(
        "/v1/documents", content=raw,
        headers={**teacher, "content-type": "multipart/form-data; boundary=B"},
    )  # fmt: skip
    assert_problem(named, 400)
    titled = await client.post(
        "/v1/documents", headers=teacher, files={"file": ("notes.txt", body, "text/plain")},
        data={"title": NUL},
    )  # fmt: skip
    assert_problem(titled, 400)
    tags = await client.post(
        "/v1/documents", headers=teacher, files={"file": ("notes.txt", body, "text/plain")},
        data={"topic_tags": ",".join(f"tag{i}" for i in range(200))},
    )  # fmt: skip
    assert_problem(tags, 422)
    listed = await client.get("/v1/documents", headers=teacher)
    assert listed.status_code == 200 and listed.json()["items"] == []


async def test_odd_values_blank_queries_big_bodies_and_cursors_are_4xx(
    gateway: Gateway, client: httpx.AsyncClient, tenant_id: str
) -> None:
    student = gateway.token(tenant_id, "sam")
    teacher = gateway.token(tenant_id, "ms-lee", role="teacher")
    huge = {"query": "mitosis", "filters": {"grade_level": 1099511627776}}
    assert_problem(await client.post("/v1/search", headers=student, json=huge), 422)
    blank = await client.post("/v1/search", headers=student, json={"query": "   "})
    assert_problem(blank, 422)
    cursor = base64.urlsafe_b64encode(b"{}").decode()
    assert_problem(await client.get(f"/v1/documents?cursor={cursor}", headers=teacher), 400)
    big = {"query": "x" * (MAX_JSON_BODY_BYTES + 10)}
    assert_problem(await client.post("/v1/search", headers=student, json=big), 413)
    malformed = await client.post(
        "/v1/search", headers={**student, "content-type": "application/json"}, content=b"{"
    )
    assert_problem(malformed, 422)
    bad_id = await client.get("/v1/documents/not-a-uuid", headers=teacher)
    assert_problem(bad_id, 422)


async def test_tokens_must_carry_usable_claims(
    gateway: Gateway, client: httpx.AsyncClient, tenant_id: str
) -> None:
    secret = gateway.settings.effective_jwt_secret
    now = int(time.time())
    good = {"tenant": tenant_id, "sub": "sam", "role": "student", "iat": now, "exp": now + 600}

    def sign(claims: dict[str, Any]) -> dict[str, str]:
        return {"Authorization": f"Bearer {jwt.encode(claims, secret, algorithm='HS256')}"}

    ok = await client.get("/v1/sessions", headers=sign(good))
    assert ok.status_code == 200, ok.text
    bad_claims: list[dict[str, Any]] = [
        good | {"tenant": ""},
        good | {"tenant": []},
        good | {"tenant": {}},
        good | {"tenant": 5},
        good | {"tenant": "x" * 200},
        good | {"tenant": "a b"},
        good | {"sub": ""},
        good | {"exp": str(now + 600)},
        good | {"exp": 253402300799},  # year 9999: no token lives that long
        good | {"iss": "https://evil.example"},
        {k: v for k, v in good.items() if k != "tenant"},
        good | {"exp": now - 10},
    ]
    for claims in bad_claims:
        response = await client.get("/v1/sessions", headers=sign(claims))
        assert_problem(response, 401)
    forged = jwt.encode(good, "another-secret-of-at-least-32-chars!", algorithm="HS256")
    refused = await client.get("/v1/sessions", headers={"Authorization": f"Bearer {forged}"})
    assert_problem(refused, 401)
    unsigned = jwt.encode(good, "", algorithm="none")
    refused = await client.get("/v1/sessions", headers={"Authorization": f"Bearer {unsigned}"})
    assert_problem(refused, 401)
    huge = sign(good | {"pad": "x" * 20_000})
    assert_problem(await client.get("/v1/sessions", headers=huge), 401)
