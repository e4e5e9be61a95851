"""A question through the real retriever and re-ranker apps (local MiniLM) and the gateway."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from lectern_common.embeddings import LocalEmbedder
from lectern_common.testing import LOCAL_EMBEDDING_DIM
from lectern_gateway.chat.testing import (
    PHOTOSYNTHESIS,
    Gateway,
    ask,
    gateway_settings,
    new_session,
    seed_document,
    serve_gateway,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

lectern_retriever_app = pytest.importorskip("lectern_retriever.app")
lectern_reranker_app = pytest.importorskip("lectern_reranker.app")


@pytest.fixture(scope="module")
async def stack(nats_url: str, database_url: str) -> AsyncIterator[tuple[Gateway, LocalEmbedder]]:
    """Real retriever + re-ranker (local models) and the gateway."""
    from lectern_reranker.config import Settings as RerankerSettings
    from lectern_retriever.config import Settings as RetrieverSettings

    common: dict[str, Any] = {
        "nats_url": nats_url,
        "database_url": database_url,
        "http_port": 0,
        "log_json": False,
    }
    embedder = LocalEmbedder(RetrieverSettings(**common))
    assert embedder.dimension == LOCAL_EMBEDDING_DIM
    retriever = lectern_retriever_app.create_app(RetrieverSettings(**common), embedder=embedder)
    reranker = lectern_reranker_app.create_app(RerankerSettings(**common))
    async with (
        retriever.router.lifespan_context(retriever),
        reranker.router.lifespan_context(reranker),
        serve_gateway(gateway_settings(nats_url, database_url)) as gateway,
    ):
        yield gateway, embedder


async def test_answer_from_real_retrieval_and_reranking(
    stack: tuple[Gateway, LocalEmbedder], db_pool: Any, tenant_id: str
) -> None:
    gateway, embedder = stack
    seeded = await seed_document(db_pool, tenant_id=tenant_id)
    vectors = await embedder.embed_documents([text for text, _, _ in PHOTOSYNTHESIS])
    for chunk_id, vector in zip(seeded.chunk_ids, vectors, strict=True):
        await db_pool.execute("UPDATE chunks SET embedding = $2 WHERE id = $1", chunk_id, vector)
    other = f"other-{uuid.uuid4().hex[:8]}"
    foreign = await seed_document(db_pool, tenant_id=other, title="Other tenant")
    headers = gateway.token(tenant_id, "stu-1")
    async with httpx.AsyncClient(timeout=60) as client:
        session = await new_session(client, gateway, headers)
        got = await ask(
            client, gateway, session["id"], "Which enzyme catalyses carbon fixation?", headers
        )
    assert got.status == 200, got.problem
    sources = got.of("sources")[0].sources
    assert sources, got.events
    assert sources[0].chunk_id == seeded.chunk_ids[1]  # the RuBisCO chunk
    assert not {s.chunk_id for s in sources} & set(foreign.chunk_ids)
    assert "RuBisCO" in got.text
    assert got.done.answered_by == "offline"
    assert got.done.band in ("high", "medium", "low")
    assert any(c.label == "T1" and c.supported for c in got.done.citations)
