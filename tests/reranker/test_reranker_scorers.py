"""The real scorers: a CrossEncoder loaded by path, and the MiniLM bi-encoder fallback."""

import uuid
from pathlib import Path

import numpy as np
import pytest
import torch

from lectern_common.embeddings import LocalEmbedder
from lectern_common.events import Candidate, RerankRequest
from lectern_reranker.config import Settings
from lectern_reranker.scorers import (
    BiEncoderScorer,
    CrossEncoderScorer,
    OnnxCrossEncoderScorer,
    ReaderScorer,
    load_scorer,
    sigmoid,
)
from lectern_reranker.service import RerankConfig, rerank

pytestmark = pytest.mark.slow

PASSAGES = [
    "Insulin is a hormone made by the pancreas that lets cells take up glucose from the blood.",
    "The French Revolution began in 1789 with the storming of the Bastille.",
    "Mitochondria produce most of the cell's ATP through oxidative phosphorylation.",
    "A marathon is a long-distance foot race of 42.195 kilometres.",
    "Type 1 diabetes results from autoimmune destruction of insulin-producing beta cells.",
]


def test_sigmoid_maps_logits_to_unit_interval() -> None:
    assert sigmoid([0.0, 1000.0, -1000.0]) == [0.5, pytest.approx(1.0), pytest.approx(0.0)]
    assert sigmoid([2.0])[0] == pytest.approx(1 / (1 + np.exp(-2.0)))


async def test_cross_encoder_loads_by_path_and_scores_in_batches(cross_encoder_dir: Path) -> None:
    small = CrossEncoderScorer.load(str(cross_encoder_dir), max_length=128, batch_size=2)
    large = CrossEncoderScorer.load(str(cross_encoder_dir), max_length=128, batch_size=32)
    assert small.name == "cross-encoder"
    assert small.max_length == 128
    query = "What does insulin do?"
    by_two = await small.score(query, PASSAGES)
    at_once = await large.score(query, PASSAGES)
    assert len(by_two) == len(PASSAGES)
    assert all(0.0 < s < 1.0 for s in by_two)
    np.testing.assert_allclose(by_two, at_once, atol=1e-5)
    # the score is the sigmoid of the model's raw logit
    raw = small._model.predict([(query, p) for p in PASSAGES], activation_fn=torch.nn.Identity())
    np.testing.assert_allclose(by_two, sigmoid(list(raw)), atol=1e-6)
    assert len(set(np.round(by_two, 6))) > 1, "a fresh head still tells passages apart"
    assert await small.score(query, []) == []
    assert small.count_tokens("insulin lowers blood glucose") >= 4


def exports(root: Path) -> dict[str, int]:
    """Files under ``root`` and their modification times."""
    return {str(p): p.stat().st_mtime_ns for p in root.rglob("*") if p.is_file()}


async def test_onnx_export_matches_torch_and_is_cached(
    cross_encoder_dir: Path, tmp_path: Path
) -> None:
    query = "What does insulin do?"
    torch_scores = await CrossEncoderScorer.load(str(cross_encoder_dir), max_length=128).score(
        query, PASSAGES
    )
    fp32 = OnnxCrossEncoderScorer.load(
        str(cross_encoder_dir), max_length=128, batch_size=2, cache_dir=tmp_path, quantize=False
    )
    assert fp32.path.parent.parent == tmp_path and fp32.path.name == "model.onnx"
    assert fp32.name == "cross-encoder" and fp32.max_length == 128
    # same graph, same numbers: the export is faithful (and batching changes nothing)
    np.testing.assert_allclose(await fp32.score(query, PASSAGES), torch_scores, atol=1e-4)
    int8 = OnnxCrossEncoderScorer.load(
        str(cross_encoder_dir), max_length=128, batch_size=32, cache_dir=tmp_path
    )
    assert int8.path.name == "model.int8.onnx"
    assert int8.path.stat().st_size < fp32.path.stat().st_size / 2
    # int8 weights move each logit a little; the scores stay close to the float ones
    np.testing.assert_allclose(await int8.score(query, PASSAGES), torch_scores, atol=0.05)
    exported = exports(tmp_path)
    again = OnnxCrossEncoderScorer.load(str(cross_encoder_dir), max_length=128, cache_dir=tmp_path)
    assert again.path == int8.path
    assert exports(tmp_path) == exported
    assert not any(".tmp" in name for name in exported), "no half-written export is left behind"
    assert await again.score(query, []) == []
    assert again.count_tokens("insulin lowers blood glucose") >= 4


async def test_cross_encoder_scores_order_the_reply(
    cross_encoder_dir: Path, tmp_path: Path
) -> None:
    scorer = load_scorer(
        Settings(cross_encoder_model=str(cross_encoder_dir), cross_encoder_cache_dir=tmp_path)
    )
    assert isinstance(scorer, OnnxCrossEncoderScorer)
    assert scorer.name == "cross-encoder"
    candidates = [
        Candidate(chunk_id=uuid.uuid4(), document_id=uuid.uuid4(), title="t", text=p)
        for p in PASSAGES
    ]
    request = RerankRequest(
        tenant_id="t", query="What does insulin do?", candidates=candidates, top_k=5
    )
    # another cross-encoder than the packaged reader: its probability alone is the relevance
    reply = await rerank(request=request, scorer=scorer, config=RerankConfig(relevance=None))
    assert reply.scorer == "cross-encoder"
    semantic = await scorer.score(request.query, PASSAGES)
    # with neutral educational signals the order is the cross-encoder's order
    expected = [PASSAGES[i] for i in np.argsort(-np.asarray(semantic), kind="stable")]
    assert [c.candidate.text for c in reply.chunks] == expected
    assert [c.semantic for c in reply.chunks] == sorted(semantic, reverse=True)
    assert "retrieval_rank" not in reply.chunks[0].signals


@pytest.mark.parametrize("configured", [None, "/nonexistent/cross-encoder", "no-such/model"])
def test_fallback_to_the_bi_encoder(configured: str | None, minilm: LocalEmbedder) -> None:
    scorer = load_scorer(Settings(cross_encoder_model=configured), embedder=minilm)
    assert isinstance(scorer, BiEncoderScorer)
    assert scorer.name == "bi-encoder"


@pytest.mark.parametrize("value", ["none", "None", " NONE "])
def test_none_switches_the_reader_off(
    value: str, minilm: LocalEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``none`` means the bi-encoder, from a variable too; an empty variable is unset (the
    settings ignore empty variables), so it cannot say it."""
    monkeypatch.setenv("LECTERN_RERANKER_CROSS_ENCODER_MODEL", value)
    assert Settings().cross_encoder_model is None
    assert isinstance(load_scorer(Settings(), embedder=minilm), BiEncoderScorer)
    monkeypatch.setenv("LECTERN_RERANKER_CROSS_ENCODER_MODEL", "")
    assert Settings().cross_encoder_model == "lectern-reader-l3"


async def test_bi_encoder_scores_relevance(minilm: LocalEmbedder) -> None:
    scorer = BiEncoderScorer(minilm)
    scores = await scorer.score("How does insulin control blood sugar?", PASSAGES)
    assert all(0.0 <= s <= 1.0 for s in scores)
    order = np.argsort(-np.asarray(scores))
    assert set(order[:2].tolist()) == {0, 4}  # the two insulin passages
    assert scores[0] > 0.5 > 0.2 > scores[3]
    assert scorer.count_tokens("insulin") == minilm.count_tokens("insulin")
    assert await scorer.score("anything", []) == []


async def test_bi_encoder_reuses_known_vectors(minilm: LocalEmbedder) -> None:
    query = "How does insulin control blood sugar?"
    plain = await BiEncoderScorer(minilm).score(query, PASSAGES)
    vectors = minilm.embed_documents_sync(PASSAGES)
    same = BiEncoderScorer(minilm).with_vectors({PASSAGES[0]: vectors[0], PASSAGES[2]: vectors[2]})
    np.testing.assert_allclose(await same.score(query, PASSAGES), plain, atol=1e-5)
    # a known vector is taken as it is, not recomputed from the text
    swapped = BiEncoderScorer(minilm).with_vectors({PASSAGES[0]: vectors[3]})
    scores = await swapped.score(query, PASSAGES)
    assert scores[0] == pytest.approx(plain[3], abs=1e-5)
    assert scores[1:] == pytest.approx(plain[1:], abs=1e-5)
    wrong = BiEncoderScorer(minilm).with_vectors({PASSAGES[0]: np.ones(7, dtype=np.float32)})
    np.testing.assert_allclose(await wrong.score(query, PASSAGES), plain, atol=1e-5)


async def test_the_packaged_reader_is_the_default_scorer(minilm: LocalEmbedder) -> None:
    scorer = load_scorer(Settings(), embedder=minilm)
    assert isinstance(scorer, ReaderScorer)
    assert scorer.name == "cross-encoder" and scorer.max_length == 192
    scores = await scorer.score("How does insulin control blood sugar?", PASSAGES)
    assert all(0.0 < s < 1.0 for s in scores)
    assert set(np.argsort(scores)[-2:].tolist()) == {0, 4}  # the two insulin passages
    assert max(scores[1], scores[3]) < 0.05  # the revolution and the marathon answer nothing
    assert scorer.count_tokens("insulin lowers blood glucose") >= 4
    assert await scorer.score("anything", []) == []


def test_the_packaged_readers_are_loaded_by_their_names(minilm: LocalEmbedder) -> None:
    """By default the re-ranker reads with the 3-layer reader its relevance model was fitted
    on; ``lectern-reader`` names the 6-layer one the offline answerer reads sentences with."""
    from lectern_common import reading

    default = load_scorer(Settings(), embedder=minilm)
    assert isinstance(default, ReaderScorer)
    assert default.path == reading.PACKAGED_L3 / "model.onnx"
    six = load_scorer(Settings(cross_encoder_model="lectern-reader"), embedder=minilm)
    assert isinstance(six, ReaderScorer) and six.path == reading.PACKAGED / "model.onnx"


async def test_a_reader_folder_is_loaded_as_a_reader(tmp_path: Path, minilm: LocalEmbedder) -> None:
    import shutil

    from lectern_common import reading

    folder = tmp_path / "reader"
    shutil.copytree(reading.PACKAGED, folder)
    scorer = load_scorer(Settings(cross_encoder_model=str(folder)), embedder=minilm)
    assert isinstance(scorer, ReaderScorer) and scorer.path == folder / "model.onnx"
