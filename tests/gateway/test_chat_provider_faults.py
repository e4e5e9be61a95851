"""The model provider failing, stalling or cutting off mid-stream, through the real
google-genai SDK against the local fake Gemini: the student gets a fallback answer or an SSE
``error`` within the configured model timeout, and a partial answer is never stored as an
assistant message (the history holds only what was completed)."""

from __future__ import annotations

import threading
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from lectern_testing.chat import (
    Gateway,
    Responders,
    ask,
    hosted_model_settings,
    new_session,
    run_responders,
    seed_document,
    serve_gateway,
)
from lectern_testing.gemini_fake import Behaviour, FakeGemini, FakeOpenAI
from lectern_testing.metrics import sample_total

pytestmark = pytest.mark.integration

LLM_TIMEOUT_S = 2.0
ANSWER = "Photosynthesis turns light into chemical energy [T1]. " * 6


@pytest.fixture(scope="module")
async def fakes() -> AsyncIterator[tuple[FakeGemini, FakeOpenAI]]:
    async with FakeGemini() as gemini, FakeOpenAI(default_text="Fallback answer [T1].") as oai:
        yield gemini, oai


@pytest.fixture(scope="module")
async def gateway(
    nats_url: str, database_url: str, db_pool: Any, fakes: tuple[FakeGemini, FakeOpenAI]
) -> AsyncIterator[Gateway]:
    gemini, oai = fakes
    settings = hosted_model_settings(
        nats_url, database_url, gemini, oai, llm_timeout_s=LLM_TIMEOUT_S
    )
    async with run_responders(nats_url, Responders(pool=db_pool)), serve_gateway(settings) as gw:
        yield gw


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=60) as c:
        yield c


async def _history(client: httpx.AsyncClient, gateway: Gateway, session: Any, headers: Any) -> Any:
    response = await client.get(
        f"{gateway.url}/v1/sessions/{session['id']}/messages", headers=headers
    )
    assert response.status_code == 200, response.text
    return [(m["role"], m["content"]) for m in response.json()]


@pytest.mark.parametrize(
    "fault",
    [
        pytest.param(Behaviour(text=ANSWER, words_per_chunk=3, cut_after=2), id="cut-mid-stream"),
        pytest.param(
            # the first chunk, then nothing until long after the read timeout
            Behaviour(text=ANSWER, words_per_chunk=3, gate=threading.Event()),
            id="stalls-mid-stream",
        ),
    ],
)
async def test_a_stream_broken_after_it_began_is_an_error_and_not_stored(
    gateway: Gateway,
    client: httpx.AsyncClient,
    db_pool: Any,
    tenant_id: str,
    fakes: tuple[FakeGemini, FakeOpenAI],
    fault: Behaviour,
) -> None:
    gemini, _ = fakes
    gemini.reset()
    await seed_document(db_pool, tenant_id=tenant_id)
    gemini.enqueue(fault, endpoint="generate")
    headers = gateway.token(tenant_id, "stu-1")
    session = await new_session(client, gateway, headers)
    started = time.monotonic()
    got = await ask(client, gateway, session["id"], "What is photosynthesis?", headers)
    took = time.monotonic() - started
    assert got.status == 200
    assert [e.type for e in got.events][-1] == "error", got.events
    assert not got.of("done")
    model_text = "".join(t.text for t in got.of("token") if t.origin == "model")
    assert model_text and model_text in ANSWER  # part of the answer had been streamed
    assert took < LLM_TIMEOUT_S + 6, f"the error came after {took:.1f} s"
    # the question is kept; the half answer is not stored as if it were complete
    assert await _history(client, gateway, session, headers) == [
        ("user", "What is photosynthesis?")
    ]
    # and the next question in the same session is answered normally
    gemini.enqueue(Behaviour(text="Light is turned into sugar [T1]."), endpoint="generate")
    again = await ask(client, gateway, session["id"], "What is photosynthesis?", headers)
    assert again.done.answered_by == "gemini"
    assert [r for r, _ in await _history(client, gateway, session, headers)] == [
        "user", "user", "assistant",
    ]  # fmt: skip


async def test_a_provider_that_never_starts_answering_falls_back_in_bounded_time(
    gateway: Gateway,
    client: httpx.AsyncClient,
    db_pool: Any,
    tenant_id: str,
    fakes: tuple[FakeGemini, FakeOpenAI],
) -> None:
    gemini, _ = fakes
    gemini.reset()
    await seed_document(db_pool, tenant_id=tenant_id)
    # the call and its retry both hang past the timeout before the first byte
    gemini.enqueue(Behaviour(text=ANSWER, delay_s=8), Behaviour(text=ANSWER, delay_s=8),
                   endpoint="generate")  # fmt: skip
    headers = gateway.token(tenant_id, "stu-2")
    session = await new_session(client, gateway, headers)
    started = time.monotonic()
    got = await ask(client, gateway, session["id"], "What is photosynthesis?", headers)
    took = time.monotonic() - started
    assert got.done.answered_by == "fallback"
    assert got.done.usage["fallback_from"] == ["gemini", "gemini"]
    assert took < 2 * LLM_TIMEOUT_S + 6
    roles = [r for r, _ in await _history(client, gateway, session, headers)]
    assert roles == ["user", "assistant"]


async def test_every_hosted_provider_down_ends_with_the_offline_answerer(
    gateway: Gateway,
    client: httpx.AsyncClient,
    db_pool: Any,
    tenant_id: str,
    fakes: tuple[FakeGemini, FakeOpenAI],
) -> None:
    gemini, oai = fakes
    gemini.reset()
    oai.reset()
    await seed_document(db_pool, tenant_id=tenant_id)
    gemini.fail(503, times=2, endpoint="generate")
    oai.fail(500, times=1)
    headers = gateway.token(tenant_id, "stu-3")
    session = await new_session(client, gateway, headers)
    got = await ask(client, gateway, session["id"], "What is photosynthesis?", headers)
    assert not got.of("error")
    assert got.done.answered_by == "offline"
    assert got.done.usage["fallback_from"] == ["gemini", "gemini", "openai-compatible"]
    assert got.done.citations  # still grounded in the course, from the sources alone
    roles = [r for r, _ in await _history(client, gateway, session, headers)]
    assert roles == ["user", "assistant"]


async def test_a_revoked_key_falls_through_to_the_offline_answer_and_is_counted(
    gateway: Gateway,
    client: httpx.AsyncClient,
    db_pool: Any,
    tenant_id: str,
    fakes: tuple[FakeGemini, FakeOpenAI],
) -> None:
    gemini, oai = fakes
    gemini.reset()
    oai.reset()
    await seed_document(db_pool, tenant_id=tenant_id)
    # a revoked Gemini key and a fallback that refuses its key: no retry of either
    gemini.fail(401, times=1, endpoint="generate")
    oai.fail(401, times=1)
    before = await _fallbacks(client, gateway)
    headers = gateway.token(tenant_id, "stu-4")
    session = await new_session(client, gateway, headers)
    got = await ask(client, gateway, session["id"], "What is photosynthesis?", headers)
    assert not got.of("error")
    assert got.done.answered_by == "offline"
    assert got.done.usage["fallback_from"] == ["gemini", "openai-compatible"]
    assert got.done.citations
    assert len(gemini.requests_to("generate")) == 1 and len(oai.requests_to("chat")) == 1
    # the operator's alert: two moves down the chain, visible on the gateway's scrape
    assert await _fallbacks(client, gateway) == before + 2


async def _fallbacks(client: httpx.AsyncClient, gateway: Gateway) -> float:
    response = await client.get(f"{gateway.url}/metrics")
    assert response.status_code == 200
    return sample_total(response.text, "lectern_llm_fallbacks_total")
