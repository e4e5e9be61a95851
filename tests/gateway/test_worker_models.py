"""The worker's models load on their first use (a gap closure answering), not at its start,
and answer as the HTTP replica's, loaded at start, do."""

from __future__ import annotations

import numpy as np

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
