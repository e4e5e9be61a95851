"""BM25 re-weighting belongs to ingest, which owns the chunks and their statistics (issue 61):
it recomputes the weights of the tenants whose library drifted, and the retriever, which only
reads them, no longer does."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from lectern_common.embeddings import Embedder, LocalEmbedder
from lectern_ingest import repository
from lectern_ingest.app import create_app
from lectern_ingest.config import Settings
from lectern_ingest.reweighting import reweight_stale
from lectern_retriever.config import Settings as RetrieverSettings
from lectern_retriever.handlers import Retriever
from tests.retriever.conftest import add_document
from tests.retriever.test_retrieval_bm25 import CORPUS, load, reference_scores, sparse_scores

pytestmark = pytest.mark.integration

QUERY = "How does light energy drive photosynthesis?"
#: the default share of a tenant's chunk count that makes it due a re-weighting
DRIFT = Settings.model_fields["reweight_drift"].default


@pytest.fixture(scope="module")
def embedder() -> Embedder:
    """The packaged MiniLM, loaded once for the module."""
    return LocalEmbedder(torch_threads=1)


@pytest.fixture(scope="module")
async def retriever(nats_url: str, database_url: str, embedder: Embedder) -> AsyncIterator[Any]:
    """An in-process retriever reading the weights ingest writes."""
    settings = RetrieverSettings(nats_url=nats_url, database_url=database_url, http_port=0)
    instance = Retriever(settings=settings, embedder=embedder)
    await instance.start()
    yield instance
    await instance.close()


async def _reweighted_count(pool: Any, tenant_id: str) -> int | None:
    """The tenant's chunk count at its last re-weighting (None: never re-weighted)."""
    count = await pool.fetchval(
        "SELECT reweighted_chunk_count FROM bm25_collection_stats WHERE tenant_id = $1",
        tenant_id,
    )
    return None if count is None else int(count)


async def _until(check: Callable[[], Awaitable[bool]], *, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)


async def _assert_scores_are_bm25(pool: Any, retriever: Any, tenant_id: str) -> dict[Any, float]:
    """The retriever's sparse scores equal BM25 from the raw counts; returns them."""
    expected = await reference_scores(pool, tenant_id, QUERY)
    got = await sparse_scores(retriever, tenant_id, QUERY)
    assert set(got) == set(expected)
    for chunk_id, score in expected.items():
        assert got[chunk_id] == pytest.approx(score, rel=1e-5)
    return got


async def test_scores_match_reference_after_reweight(
    db_pool: Any, retriever: Any, tenant_id: str
) -> None:
    await load(db_pool, tenant_id, CORPUS, add_document)
    # weights froze avgdl as documents arrived: the first ones are off until re-weighted;
    # ingest's periodic job re-weights tenants whose chunk count drifted
    assert (await reweight_stale(db_pool, drift=DRIFT))[tenant_id] == 6
    assert tenant_id not in await reweight_stale(db_pool, drift=DRIFT)
    got = await _assert_scores_are_bm25(db_pool, retriever, tenant_id)
    expected = await reference_scores(db_pool, tenant_id, QUERY)
    ranked = sorted(got, key=lambda c: -got[c])
    assert ranked == sorted(expected, key=lambda c: -expected[c])


async def test_ingest_reweights_a_drifted_library_and_the_retriever_does_not(
    db_pool: Any,
    nats_url: str,
    database_url: str,
    embedder: Embedder,
    tenant_id: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the retriever's former setting, at a pace that would re-weight within the wait below
    monkeypatch.setenv("LECTERN_RETRIEVER_REWEIGHT_INTERVAL_S", "0.05")
    settings = RetrieverSettings(nats_url=nats_url, database_url=database_url, http_port=0)
    retriever = Retriever(settings=settings, embedder=embedder)
    await retriever.start()
    try:
        await load(db_pool, tenant_id, CORPUS + CORPUS, add_document)
        await asyncio.sleep(0.5)
        assert await _reweighted_count(db_pool, tenant_id) is None
        async with db_pool.acquire() as conn:
            assert tenant_id in await repository.stale_tenants(conn, drift=DRIFT)
        expected = await reference_scores(db_pool, tenant_id, QUERY)
        assert await sparse_scores(retriever, tenant_id, QUERY) != pytest.approx(expected)

        ingest = create_app(
            Settings(
                nats_url=nats_url, database_url=database_url, http_port=0, log_json=False,
                gc_interval_s=0, reweight_interval_s=0.1,
            ),
            embedder=embedder,
        )  # fmt: skip
        async with ingest.router.lifespan_context(ingest):
            assert "lectern-bm25-reweight" in ingest.state.lectern.background
            await _until(lambda: _has_reweighted(db_pool, tenant_id, 12))
            await _assert_scores_are_bm25(db_pool, retriever, tenant_id)
            # one chunk more is under the drift share (1/12 < 10 %): left as it is
            await load(db_pool, tenant_id, [CORPUS[0]], add_document)
            await asyncio.sleep(0.5)
            assert await _reweighted_count(db_pool, tenant_id) == 12
            # a second one is over it (2/12): re-weighted again
            await load(db_pool, tenant_id, [CORPUS[2]], add_document)
            await _until(lambda: _has_reweighted(db_pool, tenant_id, 14))
            await _assert_scores_are_bm25(db_pool, retriever, tenant_id)
        assert not ingest.state.lectern.background
        assert "lectern-bm25-reweight" not in {t.get_name() for t in asyncio.all_tasks()}
    finally:
        await retriever.close()


async def _has_reweighted(pool: Any, tenant_id: str, chunks: int) -> bool:
    return await _reweighted_count(pool, tenant_id) == chunks
