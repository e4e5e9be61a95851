"""GeminiEmbedder through the real google-genai SDK against the local fake Gemini server."""

import socket
import time
from collections.abc import Iterator

import numpy as np
import pytest
from lectern_testing.gemini_fake import Behaviour, FakeGemini, hashed_embedding, iter_texts

from lectern_common.embeddings import (
    GEMINI_MAX_BATCH,
    GeminiEmbedder,
    build_embedder,
    l2_normalise,
)
from lectern_common.errors import BadInputError, ConfigurationError, UpstreamError
from lectern_common.settings import BaseServiceSettings


@pytest.fixture(scope="module")
def fake_server() -> Iterator[FakeGemini]:
    """One server per module (start/stop costs ~0.3 s)."""
    with FakeGemini() as server:
        yield server


@pytest.fixture
def fake(fake_server: FakeGemini) -> FakeGemini:
    """A fake Gemini server for the module, reset for each test."""
    fake_server.reset()
    return fake_server


def settings_for(fake: FakeGemini, **overrides: object) -> BaseServiceSettings:
    """Settings with a key and the fake's URL, built by keyword."""
    values: dict[str, object] = {
        "gemini_api_key": "test-key",
        "gemini_base_url": fake.base_url,
        "embedding_provider": "gemini",
        **overrides,
    }
    return BaseServiceSettings(**values)  # type: ignore[arg-type]


def fast_retrying(fake: FakeGemini, **kwargs: object) -> GeminiEmbedder:
    """An embedder whose backoff is milliseconds, so retry tests stay fast."""
    options: dict[str, object] = {"initial_backoff_s": 0.01, "max_backoff_s": 0.02, **kwargs}
    return GeminiEmbedder(settings_for(fake), **options)  # type: ignore[arg-type]


async def test_documents_are_embedded_as_retrieval_documents_in_768_dims(
    fake: FakeGemini,
) -> None:
    embedder = build_embedder(settings_for(fake))
    assert isinstance(embedder, GeminiEmbedder)
    assert (embedder.name, embedder.dimension, embedder.max_input_tokens) == (
        "gemini-embedding-001",
        768,
        2048,
    )
    vectors = await embedder.embed_documents(["Cells divide by mitosis.", "Plants need light."])
    assert vectors.shape == (2, 768) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-5)
    (request,) = fake.requests_to("embed")
    assert request.path == "/v1beta/models/gemini-embedding-001:batchEmbedContents"
    assert request.headers["x-goog-api-key"] == "test-key"
    items = request.body["requests"]
    assert [item["taskType"] for item in items] == ["RETRIEVAL_DOCUMENT"] * 2
    assert [item["outputDimensionality"] for item in items] == [768, 768]
    assert [item["model"] for item in items] == ["models/gemini-embedding-001"] * 2
    assert list(iter_texts([request])) == ["Cells divide by mitosis.", "Plants need light."]


async def test_queries_use_the_query_task_type(fake: FakeGemini) -> None:
    embedder = GeminiEmbedder(settings_for(fake))
    one = await embedder.embed_query("why do cells divide")
    many = await embedder.embed_queries(["why do cells divide", "what is light"])
    assert one.shape == (768,) and many.shape == (2, 768)
    np.testing.assert_allclose(one, many[0], rtol=1e-6)
    task_types = {
        item["taskType"]
        for request in fake.requests_to("embed")
        for item in request.body["requests"]
    }
    assert task_types == {"RETRIEVAL_QUERY"}


async def test_vectors_are_the_servers_values_normalised_so_overlap_means_closeness(
    fake: FakeGemini,
) -> None:
    embedder = GeminiEmbedder(settings_for(fake))
    texts = ["cells divide by mitosis", "mitosis is how cells divide", "the french revolution"]
    vectors = await embedder.embed_documents(texts)
    expected = l2_normalise(np.array([hashed_embedding(t, 768) for t in texts]))
    np.testing.assert_allclose(vectors, expected, rtol=1e-5, atol=1e-6)
    assert float(vectors[0] @ vectors[1]) > float(vectors[0] @ vectors[2])


async def test_more_than_100_texts_go_in_several_ordered_batches(fake: FakeGemini) -> None:
    embedder = GeminiEmbedder(settings_for(fake, embedding_batch_size=500))
    assert embedder.batch_size == GEMINI_MAX_BATCH
    texts = [f"passage number {i} about topic {i % 7}" for i in range(250)]
    vectors = await embedder.embed_documents(texts)
    requests = fake.requests_to("embed")
    assert sorted(len(r.body["requests"]) for r in requests) == [50, 100, 100]
    assert sorted(iter_texts(requests)) == sorted(texts)
    expected = l2_normalise(np.array([hashed_embedding(t, 768) for t in texts]))
    np.testing.assert_allclose(vectors, expected, rtol=1e-5, atol=1e-6)


async def test_rate_limits_and_server_errors_are_retried_then_succeed(fake: FakeGemini) -> None:
    fake.fail(429, times=2, endpoint="embed")
    fake.fail(503, endpoint="embed")
    vectors = await fast_retrying(fake).embed_documents(["retry me"])
    assert vectors.shape == (1, 768)
    assert len(fake.requests_to("embed")) == 4


async def test_the_servers_retry_delay_is_honoured(fake: FakeGemini) -> None:
    fake.enqueue(Behaviour.error(429, retry_delay_s=0.3), endpoint="embed")
    started = time.perf_counter()
    await fast_retrying(fake, max_backoff_s=5.0).embed_query("wait for me")
    assert time.perf_counter() - started >= 0.3
    assert len(fake.requests_to("embed")) == 2


async def test_persistent_rate_limit_becomes_upstream_error(fake: FakeGemini) -> None:
    fake.fail(429, times=10, endpoint="embed")
    with pytest.raises(UpstreamError) as caught:
        await fast_retrying(fake, max_attempts=3).embed_documents(["never"])
    assert caught.value.reason == "rate_limited"
    assert len(fake.requests_to("embed")) == 3


async def test_an_unreachable_server_is_retried_then_upstream_error() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    settings = BaseServiceSettings(
        gemini_api_key="k",  # type: ignore[arg-type]
        gemini_base_url=f"http://127.0.0.1:{closed_port}",
    )
    embedder = GeminiEmbedder(settings, max_attempts=2, initial_backoff_s=0.01)
    with pytest.raises(UpstreamError) as caught:
        await embedder.embed_query("anyone there?")
    assert caught.value.reason == "upstream_unreachable"


async def test_bad_request_is_not_retried(fake: FakeGemini) -> None:
    fake.fail(400, endpoint="embed")
    with pytest.raises(BadInputError):
        await fast_retrying(fake).embed_documents(["rejected"])
    assert len(fake.requests_to("embed")) == 1


async def test_bad_key_is_a_configuration_error(fake: FakeGemini) -> None:
    fake.fail(403, endpoint="embed")
    with pytest.raises(ConfigurationError):
        await fast_retrying(fake).embed_query("forbidden")
    assert len(fake.requests_to("embed")) == 1


async def test_empty_input_makes_no_call(fake: FakeGemini) -> None:
    vectors = await GeminiEmbedder(settings_for(fake)).embed_documents([])
    assert vectors.shape == (0, 768)
    assert fake.requests == []


def test_token_count_is_a_conservative_local_estimate() -> None:
    embedder = GeminiEmbedder(
        BaseServiceSettings(gemini_api_key="k", gemini_base_url="http://127.0.0.1:9")  # type: ignore[arg-type]
    )
    text = "Photosynthesis converts light energy into chemical energy stored in glucose."
    assert embedder.count_tokens(text) >= len(text.split())
    assert embedder.count_tokens(text * 3) > embedder.count_tokens(text)


def test_a_key_is_required() -> None:
    with pytest.raises(ConfigurationError):
        GeminiEmbedder(BaseServiceSettings())
