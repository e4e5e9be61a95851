"""Tune the bi-encoder re-ranker on a BEIR set: rank-prior share, sentence-match share and
calibration midpoint.

Loads the dataset through the eval harness's loader, runs the real retriever (hybrid) and the
real re-ranker (bi-encoder on stored vectors) over NATS once per question, records every
candidate's cosine and text, then recomputes offline what the re-ranker would answer for
each rank-prior share and sentence-match share (order) and calibration midpoint (confidence
band) — valid because the
evaluation data carries no educational metadata, so the other signals are constants.
Prints nDCG@10 per prior and per sentence-match share (with the fused order as the rest of
the relevance) and band shares per midpoint; last line one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
from pathlib import Path
from typing import Any

from inprocess import (
    embedded_stack,
    in_process_gateway,
    in_process_ingest,
    in_process_reranker,
    in_process_retriever,
)

from lectern_common.broker import create_broker, request
from lectern_common.db import create_pool
from lectern_common.embeddings import LocalEmbedder
from lectern_common.events import RerankReply, RerankRequest, RetrieveReply, RetrieveRequest
from lectern_eval.retrieval import (
    document_ranking,
    ingest_corpus,
    load_beir,
    query_metrics,
)
from lectern_reranker.service import sentence_match

ROOT = Path(__file__).resolve().parents[1]
PRIORS = (0.0, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
MATCHES = (0.0, 0.2, 0.35, 0.5, 0.7)
MIDPOINTS = (0.30, 0.32, 0.34, 0.36, 0.38, 0.40)
SCALE = 0.05
DEPTH = 30


def band_of(top_cosine: float, midpoint: float) -> str:
    """Gap when the calibrated retrieval confidence is under 0.5, i.e. cosine < midpoint."""
    retrieval = 1 / (1 + math.exp(-(top_cosine - midpoint) / SCALE))
    return "gap" if retrieval < 0.5 else "answer"


async def main() -> None:
    """Run once, tune offline."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", type=Path, default=ROOT / ".." / "shared" / "data" / "eval"
                        / "bioasq-dev")  # fmt: skip
    parser.add_argument("--limit-queries", type=int, default=600)
    parser.add_argument("--records", type=Path, help="write every query's candidates as JSON")
    args = parser.parse_args()
    dataset = load_beir(args.dataset)
    offtopic = [
        q for q in (ROOT / "bench" / "data" / "offtopic_questions.txt").read_text().splitlines()
        if q.strip()
    ]  # fmt: skip
    query_ids = sorted(dataset.queries)[: args.limit_queries]
    embedder = LocalEmbedder()
    records: list[dict[str, Any]] = []
    off_top: list[float] = []
    async with embedded_stack() as servers:
        pool = await create_pool(servers.database_url, min_size=1, max_size=4)
        print(f"uploading {len(dataset.corpus)} documents", file=sys.stderr, flush=True)
        async with (
            in_process_ingest(servers, embedder),
            in_process_gateway(servers, "tune") as client,
        ):
            loaded = await ingest_corpus(
                client=client, pool=pool, tenant_id="tune", corpus=dataset.corpus
            )
        await pool.execute("SELECT lectern_bm25_reweight('tune')")
        external_of = loaded.externals
        async with (
            in_process_retriever(servers, embedder),
            in_process_reranker(servers),
        ):
            broker = create_broker(servers.nats_url, service_name="tune")
            await broker.connect()

            async def ask(text: str) -> tuple[RetrieveReply, RerankReply]:
                hybrid = await request(
                    broker,
                    RetrieveRequest(tenant_id="tune", query=text, k=100, k_dense=100,
                                    k_sparse=100, max_per_document=None),
                    RetrieveReply, timeout=60,
                )  # fmt: skip
                reranked = await request(
                    broker,
                    RerankRequest(tenant_id="tune", query=text,
                                  candidates=hybrid.candidates[:DEPTH],
                                  top_k=DEPTH, token_budget=10_000_000),
                    RerankReply, timeout=60,
                )  # fmt: skip
                return hybrid, reranked

            for qid in query_ids:
                hybrid, reranked = await ask(dataset.queries[qid])
                cosine = {c.candidate.chunk_id: c.semantic for c in reranked.chunks}
                records.append(
                    {
                        "qid": qid,
                        "docs": [e for c in hybrid.candidates for e in external_of[c.document_id]],
                        "cos": [cosine.get(c.chunk_id) for c in hybrid.candidates[:DEPTH]],
                        "texts": [c.text for c in hybrid.candidates[:DEPTH]],
                        "match": sentence_match(
                            dataset.queries[qid], [c.text for c in hybrid.candidates[:DEPTH]]
                        ),
                    }
                )
            for text in offtopic:
                _, reranked = await ask(text)
                off_top.append(max((c.semantic for c in reranked.chunks), default=0.0))
            await broker.stop()
        await pool.close()

    if args.records:
        args.records.write_text(json.dumps({"records": records, "qrels": {
            r["qid"]: dataset.qrels[r["qid"]] for r in records}}))  # fmt: skip

    def ndcg(prior_weight: float, match_weight: float = 0.0) -> float:
        total = 0.0
        for rec in records:
            head = rec["docs"][:DEPTH]
            n = len(head)
            scored = []
            for i, (doc, cos) in enumerate(zip(head, rec["cos"], strict=True)):
                prior = 1.0 - i / (n - 1) if n > 1 else 1.0
                rel = (1 - prior_weight) * (cos or 0.0) + prior_weight * prior
                rel = (1 - match_weight) * rel + match_weight * rec["match"][i]
                scored.append((-rel, i, doc))
            order = [d for _, _, d in sorted(scored)] + rec["docs"][DEPTH:]
            total += query_metrics(document_ranking(order), dataset.qrels[rec["qid"]])["ndcg@10"]
        return total / len(records)

    hybrid_ndcg = sum(
        query_metrics(document_ranking(r["docs"]), dataset.qrels[r["qid"]])["ndcg@10"]
        for r in records
    ) / len(records)
    by_prior = {str(p): round(ndcg(p), 4) for p in PRIORS}
    by_match = {str(m): round(ndcg(1.0, m), 4) for m in MATCHES}
    answer_top = [max((c for c in r["cos"] if c is not None), default=0.0) for r in records]
    by_midpoint = {
        str(m): {
            "answerable_gap": round(sum(band_of(t, m) == "gap" for t in answer_top)
                                    / len(answer_top), 4),
            "offtopic_gap": round(sum(band_of(t, m) == "gap" for t in off_top) / len(off_top), 4),
        }
        for m in MIDPOINTS
    }  # fmt: skip
    print(f"hybrid nDCG@10 {hybrid_ndcg:.4f}; hybrid+rerank by rank-prior share: {by_prior}")
    print(f"hybrid+rerank by sentence-match share (rest: the fused order): {by_match}")
    print(f"gap shares by midpoint: {by_midpoint}")
    print(json.dumps({"dataset": dataset.name, "queries": len(records), "hybrid_ndcg10":
                      round(hybrid_ndcg, 4), "rerank_ndcg10_by_prior": by_prior,
                      "rerank_ndcg10_by_sentence_match": by_match,
                      "gap_by_midpoint": by_midpoint}))  # fmt: skip


if __name__ == "__main__":
    asyncio.run(main())
