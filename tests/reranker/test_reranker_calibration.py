"""The bi-encoder calibration on real questions: off-topic is a gap, answerable is not."""

import json
from pathlib import Path

import numpy as np
import pytest

from lectern_common.embeddings import LocalEmbedder
from lectern_common.events.chat import band_shares
from lectern_reranker.config import Settings
from lectern_reranker.service import NEUTRAL, confidence_of

pytestmark = [pytest.mark.slow, pytest.mark.shared_data]

REPO = Path(__file__).resolve().parents[2]
OFFTOPIC = REPO / "bench" / "data" / "offtopic_questions.txt"
SAMPLE = 80


def test_offtopic_questions_land_in_the_gap_band(shared_data: Path, minilm: LocalEmbedder) -> None:
    root = shared_data / "eval" / "pubmedqa-pqal"
    with (root / "queries.jsonl").open() as f:
        queries = [json.loads(line) for _, line in zip(range(SAMPLE), f, strict=False)]
    corpus = {}
    with (root / "corpus.jsonl").open() as f:
        for line in f:
            row = json.loads(line)
            corpus[row["_id"]] = row["text"]
    # each pubmedqa question's relevant abstract has the question's id without the "q"
    abstracts = [corpus[q["_id"].removeprefix("q")] for q in queries]
    offtopic = [line.strip() for line in OFFTOPIC.read_text().splitlines() if line.strip()]
    assert len(offtopic) >= 50

    docs = minilm.embed_documents_sync(abstracts)
    config = Settings().rerank_config()
    neutral = [{"source_priority": NEUTRAL, "freshness": NEUTRAL}]

    def bands(questions: list[str]) -> dict[str, float]:
        top = (minilm.embed_documents_sync(questions) @ docs.T).max(axis=1)
        verdicts = [
            confidence_of(
                top_semantic=float(np.clip(s, 0, 1)), kept_signals=neutral,
                scorer="bi-encoder", config=config,
            ).band
            for s in top
        ]  # fmt: skip
        return band_shares(verdicts)

    answerable = bands([q["text"] for q in queries])
    off = bands(offtopic)
    assert off["gap"] >= 0.9, off
    assert answerable["gap"] < 0.1, answerable
    # grounding is assumed until measured: well-retrieved answerable questions open high
    assert answerable["high"] > 0.5, answerable
