"""A re-ranker that does not answer: the turn goes on with the retriever's order and a
verdict from its scores (real gateway, NATS and Postgres; the re-ranker's stand-in takes
requests and never replies)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from lectern_testing.chat import (
    Responders,
    ask,
    gateway_settings,
    new_session,
    run_responders,
    seed_document,
    serve_gateway,
)

from lectern_common.education import BandThresholds
from lectern_common.events import (
    Candidate,
    RerankReply,
    RerankRequest,
    RetrieveReply,
    RetrieveRequest,
    StudentContext,
)
from lectern_gateway.chat.retrieve import retriever_order


def candidate(text: str, cosine: float | None, tokens: int = 100) -> Candidate:
    return Candidate(
        chunk_id=uuid.uuid4(), document_id=uuid.uuid4(), title="Biology notes", text=text,
        dense_score=cosine, token_count=tokens,
    )  # fmt: skip


def asked(candidates: list[Candidate], *, top_k: int = 12, budget: int = 1000) -> RerankRequest:
    return RerankRequest(
        tenant_id="t", query="What is photosynthesis?", candidates=candidates, top_k=top_k,
        token_budget=budget, student=StudentContext(),
    )  # fmt: skip


def test_the_retrievers_order_is_kept_within_top_k_and_the_budget() -> None:
    found = [candidate(f"chunk {i}", 0.6 - i / 100, tokens=300) for i in range(6)]
    chunks, _ = retriever_order(asked(found, top_k=5, budget=1000), BandThresholds())
    assert [c.candidate.text for c in chunks] == ["chunk 0", "chunk 1", "chunk 2"]
    chunks, _ = retriever_order(asked(found, top_k=2, budget=10_000), BandThresholds())
    assert [c.candidate.text for c in chunks] == ["chunk 0", "chunk 1"]
    # a first chunk over the budget on its own is still kept: an answer needs a source
    (only,), _ = retriever_order(asked(found, budget=100), BandThresholds())
    assert only.candidate.text == "chunk 0"


def test_the_verdict_is_the_calibrated_cosine_and_never_above_low() -> None:
    _, close = retriever_order(asked([candidate("a", 0.2), candidate("b", 0.7)]), BandThresholds())
    assert close.band == "low" and close.retrieval > 0.99 and close.score < 0.6
    _, weak = retriever_order(asked([candidate("a", 0.25)]), BandThresholds())
    assert weak.band == "gap" and weak.retrieval < 0.5  # under the calibration's midpoint
    _, unknown = retriever_order(asked([candidate("a", None)]), BandThresholds())
    assert unknown.band == "gap" and unknown.retrieval == 0.0  # no cosine: no evidence


# --- through the gateway -----------------------------------------------------------------


@dataclass
class SilentReranker(Responders):
    """Responders whose re-ranker does not reply while the test runs, and whose retriever
    gives every candidate the cosine ``cosine`` (the real retriever's dense score)."""

    cosine: float = 0.6
    #: set when the test ends: the replies held so far go out (to nobody) and the stand-in
    #: stops at once
    released: asyncio.Event = field(default_factory=asyncio.Event)

    async def retrieve(self, request: RetrieveRequest) -> RetrieveReply:
        reply = await super().retrieve(request)
        for found in reply.candidates:
            found.dense_score = self.cosine
        return reply

    async def rerank(self, request: RerankRequest) -> RerankReply:
        await self.released.wait()
        return await super().rerank(request)


@pytest.fixture
async def silent(nats_url: str, db_pool: Any) -> AsyncIterator[SilentReranker]:
    responders = SilentReranker(pool=db_pool)
    async with run_responders(nats_url, responders):
        yield responders
        responders.released.set()


@pytest.mark.integration
async def test_a_reranker_that_does_not_answer_leaves_the_retrievers_order(
    nats_url: str, database_url: str, silent: SilentReranker, db_pool: Any, tenant_id: str
) -> None:
    await seed_document(db_pool, tenant_id=tenant_id)
    settings = gateway_settings(nats_url, database_url, rerank_timeout_s=1.0)
    async with serve_gateway(settings) as gateway, httpx.AsyncClient(timeout=30) as client:
        headers = gateway.token(tenant_id, "student-1")
        session = await new_session(client, gateway, headers)
        answered = await ask(client, gateway, session["id"], "What is photosynthesis?", headers)
        assert answered.status == 200
        (sources,) = answered.of("sources")
        assert not sources.reranked and sources.sources
        done = answered.done
        assert done.band == "low" and not done.knowledge_gap and done.citations
        assert done.timings_ms["rerank_ms"] >= 1000  # it waited the re-rank deadline
        # a weak match is still a knowledge gap, as the re-ranker's bi-encoder would say
        silent.cosine = 0.2
        refused = await ask(client, gateway, session["id"], "What is photosynthesis?", headers)
        assert refused.done.knowledge_gap and refused.done.band == "gap"
    strict = gateway_settings(nats_url, database_url, rerank_timeout_s=1.0, rerank_fallback=False)
    async with serve_gateway(strict) as gateway, httpx.AsyncClient(timeout=30) as client:
        headers = gateway.token(tenant_id, "student-2")
        session = await new_session(client, gateway, headers)
        failed = await ask(client, gateway, session["id"], "What is photosynthesis?", headers)
        (error,) = failed.of("error")
        assert error.reason == "upstream" and error.retryable
