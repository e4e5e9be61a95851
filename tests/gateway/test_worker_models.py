"""The worker's models load on their first use (a gap closure answering), not at its start,
and answer as the HTTP replica's, loaded at start, do."""

from __future__ import annotations

import numpy as np
import pytest

from lectern_common import reading
from lectern_common.embeddings import LocalEmbedder
from lectern_gateway.config import Settings
from lectern_gateway.runtime import LazyEmbedder, LazyReader

QUESTION = "What does RuBisCO catalyse?"
TEXTS = ["RuBisCO catalyses the fixation of carbon dioxide.", "Mitosis makes two cells."]


async def test_the_lazy_embedder_loads_on_first_use_and_embeds_as_the_eager_one() -> None:
    settings = Settings(nats_url="nats://127.0.0.1:1", database_url="postgresql://x@127.0.0.1/x")
    lazy = LazyEmbedder(settings)
    eager = LocalEmbedder(settings, query_precision="float32")
    assert lazy._lazy._model is None  # nothing loaded by building it
    assert lazy.name == eager.name
    query = await lazy.embed_query(QUESTION)
    assert lazy._lazy._model is not None
    np.testing.assert_allclose(query, await eager.embed_query(QUESTION), atol=1e-6)
    documents = await lazy.embed_documents(TEXTS)
    np.testing.assert_allclose(documents, await eager.embed_documents(TEXTS), atol=1e-6)
    assert (lazy.dimension, lazy.max_input_tokens) == (eager.dimension, eager.max_input_tokens)
    assert lazy.count_tokens(QUESTION) == eager.count_tokens(QUESTION)


async def test_the_lazy_reader_reads_as_the_packaged_one() -> None:
    lazy = LazyReader()
    got = await lazy.score_logits(QUESTION, TEXTS)
    want = await reading.packaged().score_logits(QUESTION, TEXTS, kind="sentence")
    np.testing.assert_allclose(got, want, atol=1e-6)
    assert got[0] > got[1]


async def test_the_answerer_reads_with_the_reader_its_setting_names(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``LECTERN_GATEWAY_OFFLINE_ANSWERER_READER_MODEL`` names a packaged reader or a folder:
    the answerer (eager or lazy) reads with that one, and with none when the folder holds no
    reader."""
    from lectern_gateway.runtime import _reader

    monkeypatch.setenv("LECTERN_GATEWAY_OFFLINE_ANSWERER_READER_MODEL", reading.PACKAGED_L3_NAME)
    settings = Settings(nats_url="nats://127.0.0.1:1", database_url="postgresql://x@127.0.0.1/x")
    assert settings.offline_answerer_reader_model == reading.PACKAGED_L3_NAME
    eager = await _reader(settings)
    assert isinstance(eager, reading.Reader) and eager.path.parent == reading.PACKAGED_L3
    lazy = await _reader(settings, lazy=True)
    assert isinstance(lazy, LazyReader)
    got = await lazy.score_logits(QUESTION, TEXTS)
    np.testing.assert_allclose(got, await eager.score_logits(QUESTION, TEXTS), atol=1e-6)
    six = await reading.packaged().score_logits(QUESTION, TEXTS, kind="sentence")
    assert not np.allclose(got, six, atol=1e-3)  # another model, not the default one
    monkeypatch.delenv("LECTERN_GATEWAY_OFFLINE_ANSWERER_READER_MODEL")
    default = Settings(nats_url="nats://127.0.0.1:1", database_url="postgresql://x@127.0.0.1/x")
    assert await _reader(default) is reading.packaged()
    missing = Settings(
        nats_url="nats://127.0.0.1:1", database_url="postgresql://x@127.0.0.1/x",
        offline_answerer_reader_model="/nonexistent/reader",
    )  # fmt: skip
    assert await _reader(missing) is None


async def test_a_lazy_reader_with_a_span_head_reads_spans_as_the_loaded_one() -> None:
    """The worker's reader of a span-headed reader (its card lists the head) says so before
    it is loaded, so the answerer reads span margins there as the HTTP replica does."""
    import lectern_answerer as answerer

    lazy = LazyReader(reading.PACKAGED_L3_SPANS_NAME)
    assert lazy.spans and lazy._lazy._model is None
    assert answerer.OfflineAnswerer(reader=lazy).reads_spans
    got = await lazy.score_readings(QUESTION, TEXTS)
    want = await reading.named(reading.PACKAGED_L3_SPANS_NAME).score_readings(QUESTION, TEXTS)
    assert [r.margin for r in got] == pytest.approx([r.margin for r in want], abs=1e-5)
    assert got[0].start is not None and [r.start for r in got] == [r.start for r in want]
    assert not LazyReader(reading.PACKAGED_L3_NAME).spans  # a relevance-only reader
    assert not answerer.OfflineAnswerer(reader=LazyReader()).reads_spans
