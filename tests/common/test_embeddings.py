"""LocalEmbedder with the real packaged MiniLM (loaded once for the module), offline."""

import asyncio
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from lectern_testing.plugin import LOCAL_EMBEDDING_DIM, LOCAL_EMBEDDING_MODEL

from lectern_answerer import OfflineAnswerer
from lectern_common.embeddings import (
    Embedder,
    LocalEmbedder,
    Vectors,
    build_embedder,
    l2_normalise,
)
from lectern_common.generation import ChatMessage, GenerationRequest, SourceText, TextDelta
from lectern_common.settings import BaseServiceSettings

pytestmark = pytest.mark.slow  # loading torch + MiniLM takes several seconds


@pytest.fixture(scope="module")
def embedder() -> LocalEmbedder:
    """The packaged MiniLM through the factory, small batches to exercise batching."""
    built = build_embedder(BaseServiceSettings(embedding_batch_size=4))
    assert isinstance(built, LocalEmbedder)
    return built


def test_describes_the_packaged_model(embedder: LocalEmbedder) -> None:
    assert (embedder.name, embedder.dimension) == (LOCAL_EMBEDDING_MODEL, LOCAL_EMBEDDING_DIM)
    assert embedder.max_input_tokens == 256
    assert embedder.batch_size == 4


async def test_vectors_are_normalised_float32(embedder: LocalEmbedder) -> None:
    vectors = await embedder.embed_documents(["Mitochondria make ATP.", "Rome fell in 476."])
    assert vectors.shape == (2, 384) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-5)
    assert (await embedder.embed_documents([])).shape == (0, 384)


async def test_similar_texts_are_closer_than_unrelated_ones(embedder: LocalEmbedder) -> None:
    query = await embedder.embed_query("How do cells produce energy?")
    documents = await embedder.embed_documents(
        [
            "Mitochondria generate most of the cell's chemical energy as ATP.",
            "The Treaty of Versailles was signed in 1919.",
        ]
    )
    related, unrelated = documents @ query
    assert related > unrelated + 0.2


async def test_batches_match_one_by_one(embedder: LocalEmbedder) -> None:
    texts = [f"Sentence {i} about {topic}." for i, topic in enumerate(["cells", "rivers"] * 5)]
    together = await embedder.embed_documents(texts)
    alone = np.concatenate([await embedder.embed_documents([text]) for text in texts])
    np.testing.assert_allclose(together, alone, atol=2e-5)
    queries = await embedder.embed_queries(texts)
    alone = np.stack([await embedder.embed_query(text) for text in texts])
    np.testing.assert_allclose(queries, alone, atol=2e-5)


async def test_int8_queries_and_passages_stay_close_to_the_float_model(
    embedder: LocalEmbedder,
) -> None:
    """Queries and passages go through the int8 copy by default, the same model for both."""
    assert embedder.query_precision == embedder.document_precision == "int8"
    texts = [
        "How do cells produce energy?",
        "What is the difference between weather and climate?",
        "Why did the Roman Empire fall in the west?",
        "solve 3x + 5 = 20",
    ]
    queries = await embedder.embed_queries(texts)
    passages = await embedder.embed_documents(texts)
    np.testing.assert_allclose(queries, passages, atol=2e-5)
    floats = LocalEmbedder(query_precision="float32", document_precision="float32")
    assert floats.query_precision == floats.document_precision == "float32"
    reference = floats.embed_documents_sync(texts)
    assert not np.allclose(passages, reference, atol=1e-4)  # really another model
    cosines = (passages * reference).sum(axis=1)
    assert cosines.min() > 0.98, cosines
    np.testing.assert_allclose(np.linalg.norm(passages, axis=1), 1.0, rtol=1e-5)
    # one int8 session serves both
    assert embedder._onnx_query is embedder._onnx_document


def test_float32_queries_are_the_document_model() -> None:
    embedder = LocalEmbedder(query_precision="float32", document_precision="float32")
    assert embedder.query_precision == "float32"
    texts = ["How do cells produce energy?", "solve 3x + 5 = 20"]
    np.testing.assert_allclose(
        embedder.embed_queries_sync(texts), embedder.embed_documents_sync(texts), atol=2e-5
    )


def test_int8_passages_do_not_depend_on_their_batch(embedder: LocalEmbedder) -> None:
    """The int8 copy quantizes activations with one scale per input: passages go one at a
    time, so a passage's vector is the same whatever is embedded with it."""
    short = "Cells make ATP."
    long = "The mitochondrion is the organelle where aerobic respiration releases energy. " * 6
    np.testing.assert_allclose(
        embedder.embed_documents_sync([short, long])[0],
        embedder.embed_documents_sync([short])[0],
        atol=1e-6,
    )


async def test_concurrent_calls_all_get_their_own_vectors(embedder: LocalEmbedder) -> None:
    texts = ["photosynthesis", "volcanoes erupt", "fractions and decimals"]
    results = await asyncio.gather(*(embedder.embed_query(t) for t in texts))
    expected = embedder.embed_queries_sync(texts)
    np.testing.assert_allclose(np.stack(results), expected, atol=2e-5)


def test_token_count_is_the_tokenizers_with_special_tokens(embedder: LocalEmbedder) -> None:
    text = "Photosynthesis converts light energy into chemical energy."
    expected = len(embedder.tokenizer(text, add_special_tokens=True)["input_ids"])
    assert embedder.count_tokens(text) == expected
    assert embedder.count_tokens("") == 2  # [CLS] and [SEP]
    long_text = "energy " * 400
    assert embedder.count_tokens(long_text) == 402  # counted, not truncated


def test_normalising_keeps_zero_rows_zero() -> None:
    normalised = l2_normalise(np.array([[3.0, 4.0], [0.0, 0.0]]))
    np.testing.assert_allclose(normalised, [[0.6, 0.8], [0.0, 0.0]])
    assert normalised.dtype == np.float32


def test_local_embedder_satisfies_the_protocol(embedder: LocalEmbedder) -> None:
    as_protocol: Embedder = embedder
    assert as_protocol.dimension == 384


async def test_offline_answerer_uses_similarity_for_paraphrases(embedder: LocalEmbedder) -> None:
    sources = [
        SourceText(
            label="T1",
            text=(
                "Mitochondria generate most of the cell's chemical energy as ATP. "
                "The Golgi apparatus packages proteins."
            ),
        ),
        SourceText(label="T2", text="Rome was founded on seven hills, legend says."),
    ]
    question = "Where does the cell get its energy from?"
    answerer = OfflineAnswerer(embedder=embedder)
    result = await answerer.answer(question=question, sources=sources)
    assert result.supported
    # "get its energy from" is nowhere in the sources: the cosine puts the mitochondria first
    best = max(result.sentences, key=lambda s: s.score)
    assert best.text == "Mitochondria generate most of the cell's chemical energy as ATP."
    assert best.semantic is not None and best.semantic > 0.4
    assert "Rome" not in result.render()
    chunks = [
        chunk
        async for chunk in answerer.stream(
            GenerationRequest(
                system="", messages=[ChatMessage(role="user", content=question)], sources=sources
            )
        )
    ]
    assert "[T1]" in "".join(c.text for c in chunks if isinstance(c, TextDelta))


@pytest.fixture(scope="module")
def torch_embedder() -> LocalEmbedder:
    """The same model through sentence-transformers itself."""
    return LocalEmbedder(BaseServiceSettings(local_embedding_backend="torch"))


async def test_onnx_backend_gives_sentence_transformers_vectors(
    embedder: LocalEmbedder, torch_embedder: LocalEmbedder
) -> None:
    assert (embedder.backend, torch_embedder.backend) == ("onnx", "torch")
    texts = [
        "What does mitochondria do?",
        "Photosynthesis converts light energy into chemical energy stored in glucose. " * 25,
        "x",
        "Les mitochondries produisent l'ATP.",
    ]
    floats = LocalEmbedder(document_precision="float32")
    onnx_vectors = floats.embed_documents_sync(texts)
    torch_vectors = await torch_embedder.embed_documents(texts)
    # the index holds vectors from either backend: they must be interchangeable
    np.testing.assert_allclose(onnx_vectors, torch_vectors, atol=1e-5)
    int8 = await embedder.embed_documents(texts)
    assert (int8 * torch_vectors).sum(axis=1).min() > 0.98
    assert embedder.max_input_tokens == torch_embedder.max_input_tokens == 256
    assert embedder.count_tokens(texts[1]) == torch_embedder.count_tokens(texts[1]) > 256


def test_a_model_onnx_cannot_run_falls_back_to_torch(tmp_path: Path) -> None:
    import shutil

    from lectern_common.embeddings import local_model_path

    model = tmp_path / "cls-pooling"
    shutil.copytree(local_model_path(), model)
    pooling = model / "1_Pooling" / "config.json"
    config = json.loads(pooling.read_text())
    config.update(pooling_mode_mean_tokens=False, pooling_mode_cls_token=True)
    pooling.write_text(json.dumps(config))
    embedder = LocalEmbedder(
        BaseServiceSettings(model_cache_dir=tmp_path / "cache"), model_path=model
    )
    assert embedder.backend == "torch"
    assert not (tmp_path / "cache").exists(), "nothing exported for a layout ONNX cannot run"
    assert embedder.embed_documents_sync(["cells"]).shape == (1, 384)


_EXPORT_INT8 = """
import sys
from pathlib import Path
from lectern_common import onnx_models
from lectern_common.embeddings import local_model_path
cache = Path(sys.argv[1])
print(onnx_models.export(local_model_path(), cache_dir=cache, head="encoder", quantize=True))
"""


def test_replicas_quantizing_at_once_each_get_the_graph(
    embedder: LocalEmbedder, tmp_path: Path
) -> None:
    """Processes quantizing into one empty cache both succeed (quantize_dynamic writes a
    shape-inferred file beside its input under a fixed name: shared, one replica deleted the
    other's and fell back to sentence-transformers)."""
    import shutil
    import subprocess
    import sys

    assert embedder._onnx is not None
    graph = embedder._onnx.path  # the float graph, exported once already
    folder = tmp_path / graph.parent.name
    folder.mkdir()
    shutil.copyfile(graph, folder / graph.name)
    # Separate interpreters, as replicas are: started together, each quantizing at once.
    command = [sys.executable, "-c", _EXPORT_INT8, str(tmp_path)]
    for _ in range(2):  # the collision is a matter of timing: try it more than once
        (folder / "model.s8.onnx").unlink(missing_ok=True)
        replicas = [
            subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for _ in range(3)
        ]
        outputs = [replica.communicate(timeout=300) for replica in replicas]
        for replica, (_, stderr) in zip(replicas, outputs, strict=True):
            assert replica.returncode == 0, stderr
        paths = {stdout.strip().splitlines()[-1] for stdout, _ in outputs}
        assert paths == {str(folder / "model.s8.onnx")}
        assert {p.name for p in folder.iterdir()} == {"model.onnx", "model.s8.onnx"}


async def test_the_offline_answerer_embeds_a_sentence_once_across_questions(
    embedder: LocalEmbedder,
) -> None:
    embedded: list[str] = []

    class Counting(LocalEmbedder):
        """The packaged model, counting the passages it is asked to embed."""

        def __init__(self) -> None:  # shares the loaded model: no second load
            self.__dict__.update(embedder.__dict__)

        async def embed_documents(self, texts: Sequence[str]) -> Vectors:
            embedded.extend(texts)
            return await super().embed_documents(texts)

    sources = [
        SourceText(label="T1", text="Mitosis produces two identical cells. It has four stages."),
        SourceText(label="T2", text="Meiosis produces four haploid cells."),
    ]
    answerer = OfflineAnswerer(embedder=Counting(), cache_floats=LOCAL_EMBEDDING_DIM * 3)
    first = await answerer.answer(question="What does mitosis produce?", sources=sources)
    assert sorted(embedded) == sorted(
        ["Mitosis produces two identical cells.", "It has four stages.",
         "Meiosis produces four haploid cells."]
    )  # fmt: skip
    again = await answerer.answer(question="What does meiosis produce?", sources=sources)
    assert len(embedded) == 3  # every sentence was met before
    assert first.cited == ["T1"] and again.cited == ["T2"]
    # the same vectors as embedding afresh
    fresh = await OfflineAnswerer(embedder=embedder).answer(
        question="What does meiosis produce?", sources=sources
    )
    assert [s.semantic for s in fresh.sentences] == pytest.approx(
        [s.semantic for s in again.sentences], abs=1e-5
    )
    # past its size the least recently used go: a new sentence evicts one
    await answerer.answer(
        question="What does mitosis produce?",
        sources=[SourceText(label="T1", text="Mitosis makes two cells.")],
    )
    await answerer.answer(question="What does mitosis produce?", sources=sources)
    assert len(embedded) == 5


async def test_concurrent_answers_share_the_sentence_cache_while_it_evicts(
    embedder: LocalEmbedder,
) -> None:
    # each answer meets sentences another one evicts while it waits for the model
    answerer = OfflineAnswerer(embedder=embedder, cache_floats=LOCAL_EMBEDDING_DIM * 2)
    topics = ["mitosis", "meiosis", "osmosis", "diffusion", "photosynthesis", "respiration"]
    sources = [
        [SourceText(label="T1", text=f"{t.capitalize()} is a process of cells. It has stages.")]
        for t in topics
    ]
    for s in sources:  # every sentence met once, most of them evicted since
        await answerer.answer(question="What is it?", sources=s)
    answers = await asyncio.gather(
        *(
            answerer.answer(question=f"What is {t}?", sources=[*s, *sources[(i + 1) % 6]])
            for i, (t, s) in enumerate(zip(topics, sources, strict=True))
        )
    )
    assert [a.cited for a in answers] == [["T1"]] * 6
