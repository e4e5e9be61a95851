"""The bi-encoder's reuse of the index's stored vectors, asked of the retriever
(``lectern.index.vectors.v1``) over the session's real NATS, answered by the retriever's own
reply (``lectern_testing.chat.INDEX_READS``): a vector the index does not give (another
model's index, no retriever answering in time) is embedded by the re-ranker itself, and the
re-rank never fails for it."""

from __future__ import annotations

import asyncio
import copy
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from faststream.nats import NatsBroker
from lectern_testing.chat import INDEX_READS, store_candidate_chunk

from lectern_common.broker import QUEUE_GROUPS, create_broker
from lectern_common.embeddings import LocalEmbedder
from lectern_common.events import Candidate, RerankRequest, Subjects
from lectern_reranker.config import Settings
from lectern_reranker.handlers import Reranker
from lectern_reranker.scorers import BiEncoderScorer

pytestmark = pytest.mark.integration

QUERY = "How do plants make glucose?"
PHOTOSYNTHESIS = "Photosynthesis turns carbon dioxide and water into glucose and oxygen."
DECOY = "The stock market fell sharply on Monday."


@asynccontextmanager
async def index_answering(
    nats_url: str, pool: Any, *, asked: list[dict[str, Any]], delay_s: float = 0.0
) -> AsyncIterator[None]:
    """The retriever's reply to ``lectern.index.vectors.v1`` in its queue group, after
    ``delay_s``; each request's body is added to ``asked``."""
    broker = NatsBroker(nats_url)
    request_type, answer = INDEX_READS[Subjects.INDEX_VECTORS]

    @broker.subscriber(Subjects.INDEX_VECTORS, queue=QUEUE_GROUPS[Subjects.INDEX_VECTORS])
    async def on_vectors(body: dict[str, Any]) -> dict[str, Any]:
        asked.append(body)
        await asyncio.sleep(delay_s)
        reply = await answer(pool, request_type.model_validate(body))
        return reply.model_dump(mode="json")

    await broker.start()
    try:
        yield
    finally:
        await broker.stop()


@asynccontextmanager
async def reranker_on(nats_url: str, embedder: Any) -> AsyncIterator[Reranker]:
    """A bi-encoder re-ranker whose requests go over its own connection to ``nats_url``."""
    broker = create_broker(nats_url, service_name="lectern-reranker")
    await broker.connect()
    try:
        yield Reranker(
            settings=Settings(cross_encoder_model="", index_vectors_timeout_s=0.3),
            scorer=BiEncoderScorer(embedder),
            broker=broker,
        )
    finally:
        await broker.stop()


async def store_decoy(pool: Any, *, tenant_id: str, embedder: LocalEmbedder) -> Candidate:
    """An indexed chunk about photosynthesis whose stored vector is another sentence's: a
    score from it shows the stored vector was used."""
    candidate = Candidate(
        chunk_id=uuid.uuid4(), document_id=uuid.uuid4(), title="Biology", text=PHOTOSYNTHESIS
    )
    await store_candidate_chunk(
        pool, tenant_id=tenant_id, candidate=candidate,
        embedding=embedder.embed_documents_sync([DECOY])[0],
    )  # fmt: skip
    return candidate


def cosine(embedder: LocalEmbedder, text: str) -> float:
    """The bi-encoder's score of ``text`` for ``QUERY``, embedded here."""
    vector = embedder.embed_documents_sync([text])[0]
    return max(float(vector @ embedder.embed_queries_sync([QUERY])[0]), 0.0)


async def semantic_of(reranker: Reranker, candidate: Candidate, tenant_id: str) -> float:
    """The semantic score the re-ranker gives ``candidate`` for ``QUERY``."""
    reply = await reranker.rerank(
        RerankRequest(tenant_id=tenant_id, query=QUERY, candidates=[candidate])
    )
    assert reply.error is None and reply.confidence is not None
    (ranked,) = reply.chunks
    return ranked.semantic


async def test_the_index_vectors_are_used_when_the_index_holds_the_model(
    nats_url: str, db_pool: Any, tenant_id: str, minilm: LocalEmbedder
) -> None:
    candidate = await store_decoy(db_pool, tenant_id=tenant_id, embedder=minilm)
    asked: list[dict[str, Any]] = []
    async with (
        index_answering(nats_url, db_pool, asked=asked),
        reranker_on(nats_url, minilm) as reranker,
    ):
        stored = await semantic_of(reranker, candidate, tenant_id)
        # another tenant's request does not see this tenant's vectors
        others = await semantic_of(reranker, candidate, f"{tenant_id}-other")
    assert stored == pytest.approx(cosine(minilm, DECOY), abs=1e-4)
    assert others == pytest.approx(cosine(minilm, PHOTOSYNTHESIS), abs=1e-4)
    assert stored < 0.3 < others
    assert [body["model"] for body in asked] == [minilm.name, minilm.name]


async def test_an_index_of_another_model_is_embedded_here_and_not_asked_again(
    nats_url: str, db_pool: Any, tenant_id: str, minilm: LocalEmbedder
) -> None:
    candidate = await store_decoy(db_pool, tenant_id=tenant_id, embedder=minilm)
    renamed = copy.copy(minilm)
    renamed.name = "another-model"
    asked: list[dict[str, Any]] = []
    async with (
        index_answering(nats_url, db_pool, asked=asked),
        reranker_on(nats_url, renamed) as reranker,
    ):
        first = await semantic_of(reranker, candidate, tenant_id)
        again = await semantic_of(reranker, candidate, tenant_id)
    assert first == again == pytest.approx(cosine(minilm, PHOTOSYNTHESIS), abs=1e-4)
    assert len(asked) == 1, "the index's model is trusted for a while, not asked every time"


async def test_the_reranker_ranks_when_no_retriever_answers_in_time(
    nats_url: str, db_pool: Any, tenant_id: str, minilm: LocalEmbedder
) -> None:
    candidate = await store_decoy(db_pool, tenant_id=tenant_id, embedder=minilm)
    expected = cosine(minilm, PHOTOSYNTHESIS)
    # nobody answers the subject at all
    async with reranker_on(nats_url, minilm) as reranker:
        alone = await semantic_of(reranker, candidate, tenant_id)
    assert alone == pytest.approx(expected, abs=1e-4)
    # a retriever too slow for the timeout (0.3 s): waited for once, then not for a while
    asked: list[dict[str, Any]] = []
    async with (
        index_answering(nats_url, db_pool, asked=asked, delay_s=1.0),
        reranker_on(nats_url, minilm) as reranker,
    ):
        started = time.monotonic()
        slow = await semantic_of(reranker, candidate, tenant_id)
        waited = time.monotonic() - started
        started = time.monotonic()
        after = await semantic_of(reranker, candidate, tenant_id)
        next_wait = time.monotonic() - started
    assert slow == after == pytest.approx(expected, abs=1e-4)
    assert waited < 0.9, "the rerank did not wait for the slow retriever's answer"
    assert next_wait < waited and len(asked) == 1
