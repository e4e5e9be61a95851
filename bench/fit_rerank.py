"""Fit how the re-ranker weighs the reader against retrieval, on bioasq-dev's training
questions, and measure it on the held-out fifth (``reading_data.bioasq_split``).

1. ``records`` (once, ~10 minutes): bioasq-dev through the real ingest service into an
   embedded stack, then every question (and every question of
   ``bench/data/offtopic_questions.txt``) through the real retriever (hybrid, as chat asks
   it); each question's fused order of documents is kept, with the scoring text (the chunk
   with its contextual prefix, as the re-ranker reads it) and the best sentence's term
   match of its first ``DEPTH`` candidates.
2. ``fit`` (offline, minutes): every (question, candidate) read by the packaged reader at
   each max length, exactly as the re-ranker runs it; the relevance model
   (``RelevanceModel``: reader logit, fused-order prior, sentence match) fitted listwise on
   the training questions; held-out nDCG@10 printed for the fused order, the reader alone
   and the fitted model at each depth (candidates read) and length, with the confidence
   calibration (gap band shares of answerable and off-topic questions by midpoint).
   ``--write`` stores the model fitted at ``--depth``/``--max-length`` as
   ``lectern_reranker/relevance_model.json``.

    python bench/fit_rerank.py records --out /tmp/lectern-rerank-records.json
    python bench/fit_rerank.py fit --records /tmp/lectern-rerank-records.json [--write]
    python bench/fit_rerank.py first-reads --records /tmp/lectern-rerank-records.json

3. ``first-reads``: held-out nDCG@10 when the re-ranker reads its first candidates and the
   others only when none of those answers (``LECTERN_RERANKER_CROSS_ENCODER_READ_FIRST``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from fit_answerer import _fit_listwise
from numpy.typing import NDArray
from reading_data import BIOASQ, bioasq_split

from lectern_eval.retrieval import document_ranking, load_beir, query_metrics

ROOT = Path(__file__).resolve().parents[1]
DEPTH = 30
DEPTHS = (8, 10, 12, 16, 20, 30)
LENGTHS = (128, 192, 256)
MIDPOINTS = (0.02, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5)
SCALE = 0.05


async def records(args: argparse.Namespace) -> None:
    """Ingest bioasq-dev for real and keep every question's hybrid candidates."""
    from inprocess import (
        embedded_stack,
        in_process_gateway,
        in_process_ingest,
        in_process_retriever,
    )

    from lectern_common.broker import create_broker, request
    from lectern_common.db import create_pool
    from lectern_common.embeddings import LocalEmbedder
    from lectern_common.events import RetrieveReply, RetrieveRequest
    from lectern_eval.retrieval import ingest_corpus
    from lectern_reranker.service import scoring_text, sentence_match

    dataset = load_beir(BIOASQ)
    offtopic = [
        q for q in (ROOT / "bench" / "data" / "offtopic_questions.txt").read_text().splitlines()
        if q.strip()
    ]  # fmt: skip
    embedder = LocalEmbedder()
    out: dict[str, Any] = {"questions": [], "offtopic": []}
    started = time.monotonic()
    async with embedded_stack() as servers:
        pool = await create_pool(servers.database_url, min_size=1, max_size=4)
        print(f"uploading {len(dataset.corpus)} documents", flush=True)
        async with (
            in_process_ingest(servers, embedder),
            in_process_gateway(servers, "fit") as client,
        ):
            loaded = await ingest_corpus(
                client=client, pool=pool, tenant_id="fit", corpus=dataset.corpus
            )
        await pool.execute("SELECT lectern_bm25_reweight('fit')")
        await pool.execute("ANALYZE chunks")
        print(f"ingested in {time.monotonic() - started:.0f} s", flush=True)
        async with in_process_retriever(servers, embedder):
            broker = create_broker(servers.nats_url, service_name="fit")
            await broker.connect()

            async def ask(text: str) -> dict[str, Any]:
                reply = await request(
                    broker,
                    RetrieveRequest(tenant_id="fit", query=text, k=100, k_dense=100,
                                    k_sparse=100, max_per_document=None),
                    RetrieveReply, timeout=60,
                )  # fmt: skip
                head = reply.candidates[:DEPTH]
                return {
                    "question": text,
                    "docs": [loaded.externals[c.document_id] for c in reply.candidates],
                    "texts": [scoring_text(c) for c in head],
                    "match": sentence_match(text, [c.text for c in head]),
                }

            for qid in sorted(dataset.queries):
                entry = await ask(dataset.queries[qid])
                out["questions"].append({"qid": qid, "split": bioasq_split(qid), **entry})
            for text in offtopic:
                out["offtopic"].append(await ask(text))
            await broker.stop()
        await pool.close()
    args.out.write_text(json.dumps(out))
    print(f"wrote {args.out} ({time.monotonic() - started:.0f} s)")


def _features(
    entry: dict[str, Any], logits: NDArray[np.float32], depth: int
) -> NDArray[np.float64]:
    from lectern_reranker.service import rank_prior  # the feature as the product computes it

    n = min(depth, len(entry["texts"]))
    return np.asarray(
        [[float(logits[i]), rank_prior(i, n), float(entry["match"][i])] for i in range(n)],
        dtype=np.float64,
    )


def _ndcg(
    entry: dict[str, Any], qrels: dict[str, int], scores: NDArray[np.float64] | None
) -> float:
    """nDCG@10 of the fused order with its head reordered by ``scores`` (None: as fused)."""
    docs = entry["docs"]
    if scores is None:
        order = list(range(len(docs)))
    else:
        head = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
        order = head + list(range(len(scores), len(docs)))
    ranking = document_ranking([e for i in order for e in docs[i]])
    return query_metrics(ranking, qrels)["ndcg@10"]


def _read(entry: dict[str, Any], length: int, depth: int, window: bool) -> list[str]:
    """What the re-ranker reads of a question's first ``depth`` candidates at ``length``:
    each scoring text (cut at the length by the tokenizer), or its reading window."""
    from lectern_reranker.service import reading_window

    texts: list[str] = entry["texts"][:depth]
    if not window:
        return texts
    return [reading_window(entry["question"], t, pieces=length) for t in texts]


def fit(args: argparse.Namespace) -> None:
    """Read every candidate, fit on the training questions, measure on the held-out ones."""
    from lectern_common.reading import Reader, probability

    data = json.loads(args.records.read_text())
    qrels = load_beir(BIOASQ).qrels
    reader = Reader.load(args.reader)
    questions = data["questions"][: args.limit or None]
    logits: dict[int, list[NDArray[np.float32]]] = {}
    # the model is fitted at --max-length: read there too, whatever --lengths compares
    deepest = max(args.depths)
    for length in sorted({*args.lengths, args.max_length}):
        started = time.monotonic()
        logits[length] = [
            reader.logits(e["question"], _read(e, length, deepest, args.window),
                          kind="passage", max_length=length)
            for e in questions + data["offtopic"]
        ]  # fmt: skip
        pairs = sum(min(deepest, len(e["texts"])) for e in questions + data["offtopic"])
        print(f"read {pairs:,} pairs at {length} word pieces in "
              f"{time.monotonic() - started:.0f} s", flush=True)  # fmt: skip
    train = [i for i, e in enumerate(questions) if e["split"] == "train"]
    held = [i for i, e in enumerate(questions) if e["split"] == "held-out"]
    fused = np.mean([_ndcg(questions[i], qrels[questions[i]["qid"]], None) for i in held])
    print(f"{len(train)} training, {len(held)} held-out questions; held-out nDCG@10 of the "
          f"fused order (hybrid) {fused:.4f}")  # fmt: skip
    table: dict[str, dict[str, float]] = {}
    models: dict[tuple[int, int], tuple[NDArray[np.float64], float]] = {}
    for length in args.lengths:
        for depth in args.depths:
            x, y, group = [], [], []
            for i in train:
                e = questions[i]
                feats = _features(e, logits[length][i], depth)
                relevant = qrels[e["qid"]]
                labels = [int(any(d in relevant for d in e["docs"][j])) for j in range(len(feats))]
                x.append(feats)
                y += labels
                group += [e["qid"]] * len(feats)
            w, b = _fit_listwise(np.vstack(x), np.asarray(y), np.asarray(group), 1.0)
            models[(length, depth)] = (w, b)
            alone = np.mean([
                _ndcg(questions[i], qrels[questions[i]["qid"]],
                      _features(questions[i], logits[length][i], depth)[:, 0])
                for i in held
            ])  # fmt: skip
            fitted = np.mean([
                _ndcg(questions[i], qrels[questions[i]["qid"]],
                      _features(questions[i], logits[length][i], depth) @ w)
                for i in held
            ])  # fmt: skip
            table[f"{length}/{depth}"] = {"reader": round(float(alone), 4),
                                          "fitted": round(float(fitted), 4)}  # fmt: skip
            print(f"max {length:>3} word pieces, {depth:>2} read: held-out nDCG@10 reader alone "
                  f"{alone:.4f}, fitted {fitted:.4f}  (weights {np.round(w, 3).tolist()})",
                  flush=True)  # fmt: skip
    length, depth = args.max_length, args.depth
    top_answerable = [
        float(probability(logits[length][i][:depth]).max()) for i in range(len(questions))
    ]
    top_off = [
        float(probability(logits[length][len(questions) + j][:depth]).max())
        for j in range(len(data["offtopic"]))
    ]
    bands = {}
    for midpoint in MIDPOINTS:
        bands[str(midpoint)] = {
            "answerable_gap": round(float(np.mean([t < midpoint for t in top_answerable])), 4),
            "offtopic_gap": round(float(np.mean([t < midpoint for t in top_off])), 4),
        }
    print(f"gap band shares by calibration midpoint (top reader probability, {depth} read): "
          f"{bands}")  # fmt: skip
    w, b = models[(length, depth)]
    result = {
        "weights": {"reader": round(float(w[0]), 4), "prior": round(float(w[1]), 4),
                    "match": round(float(w[2]), 4)},
        "bias": round(b, 4),
        "fitted_on": f"bioasq-dev training questions ({len(train)}), {depth} candidates read "
                     f"at {length} word pieces" + (
                         ", each read as its reading window "
                         "(lectern_reranker.service.reading_window)" if args.window else ""),
        "held_out": {"questions": len(held), "fused_ndcg10": round(float(fused), 4),
                     **table[f"{length}/{depth}"]},
        "gap_by_midpoint": bands,
    }  # fmt: skip
    print(json.dumps({"table": table, "model": result}))
    if args.write:
        from lectern_reranker.service import RELEVANCE_MODEL_PATH

        RELEVANCE_MODEL_PATH.write_text(json.dumps(result, indent=1) + "\n")
        print(f"wrote {RELEVANCE_MODEL_PATH}")


def first_reads(args: argparse.Namespace) -> None:
    """Held-out nDCG@10 with the shipped relevance model when the re-ranker reads the first
    ``--read-first`` candidates and the others only when none of those reads as relevant
    (``lectern_reranker.service.READ_ENOUGH``), beside reading all ``--depth`` at once."""
    from lectern_common.reading import Reader, probability
    from lectern_reranker.service import READ_ENOUGH, packaged_relevance

    data = json.loads(args.records.read_text())
    qrels = load_beir(BIOASQ).qrels
    model = packaged_relevance()
    assert model is not None
    weights = np.asarray([model.reader, model.prior, model.match])
    reader = Reader.load(args.reader)
    held = [e for e in data["questions"] if e["split"] == "held-out"]
    read = [
        reader.logits(e["question"], _read(e, args.max_length, args.depth, True),
                      kind="passage", max_length=args.max_length)
        for e in held
    ]  # fmt: skip
    for first in (None, args.read_first):
        ndcg, share = [], []
        for entry, logits in zip(held, read, strict=True):
            n = len(logits)
            enough = first is not None and probability(logits[:first]).max() >= READ_ENOUGH
            depth = min(first, n) if first is not None and enough else n
            share.append(depth / n)
            scores = _features(entry, logits, depth) @ weights
            ndcg.append(_ndcg(entry, qrels[entry["qid"]], scores))
        print(f"{'all at once' if first is None else f'first {first}'}: held-out nDCG@10 "
              f"{np.mean(ndcg):.4f}, candidates read {np.mean(share):.3f}")  # fmt: skip


def main() -> int:
    """Parse the command line and run a step."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("records")
    run.add_argument("--out", type=Path, default=Path("/tmp/lectern-rerank-records.json"))
    tune = commands.add_parser("fit")
    tune.add_argument("--records", type=Path, default=Path("/tmp/lectern-rerank-records.json"))
    tune.add_argument("--depth", type=int, default=20)
    tune.add_argument("--max-length", type=int, default=256)
    tune.add_argument("--write", action="store_true")
    tune.add_argument(
        "--lengths", type=lambda v: [int(x) for x in v.split(",")], default=list(LENGTHS),
        help="max lengths to read at (128,192,256)",
    )  # fmt: skip
    tune.add_argument(
        "--depths", type=lambda v: [int(x) for x in v.split(",")], default=list(DEPTHS),
        help="candidates read, first of the fused order (8,10,12,16,20,30)",
    )  # fmt: skip
    tune.add_argument(
        "--window", action="store_true",
        help="read each candidate's reading window (the sentences around the question's "
        "terms) instead of its opening, as the re-ranker does",
    )  # fmt: skip
    tune.add_argument("--limit", type=int, default=0, help="the first N questions (a trial)")
    tune.add_argument(
        "--reader", type=Path,
        help="a reader folder to read with (default: the packaged 6-layer one; the re-ranker's "
        "is libs/common/src/lectern_common/reader_l3)",
    )  # fmt: skip
    first = commands.add_parser("first-reads")
    first.add_argument("--records", type=Path, default=Path("/tmp/lectern-rerank-records.json"))
    first.add_argument("--depth", type=int, default=8)
    first.add_argument("--max-length", type=int, default=192)
    first.add_argument("--read-first", type=int, default=4)
    first.add_argument(
        "--reader", type=Path, default=ROOT / "libs/common/src/lectern_common/reader_l3"
    )
    args = parser.parse_args()
    if args.command == "records":
        asyncio.run(records(args))
    elif args.command == "first-reads":
        first_reads(args)
    else:
        fit(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
