"""`lectern eval` end to end with nothing running: it starts the embedded stack (the five
services as processes), uploads a small BEIR corpus through the gateway, asks over NATS
(with the stack's own NATS user), and reports per-method metrics and latencies."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lectern_cli.main import main

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

CORPUS = {
    "d1": ("Volcanoes", "Volcanoes erupt when magma rises through the crust."),
    "d2": ("Photosynthesis", "Plants turn light into sugar in their chloroplasts."),
    "d3": ("Mitosis", "Mitosis divides one cell into two identical daughter cells."),
    "d4": ("Tides", "The moon's gravity raises the tides of the oceans twice a day."),
}
QUERIES = {"q1": "Why do volcanoes erupt?", "q2": "Where does photosynthesis happen?",
           "q3": "What causes the tides?"}  # fmt: skip
QRELS = {"q1": "d1", "q2": "d2", "q3": "d4"}


def test_lectern_eval_drives_the_stack_as_processes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dataset = tmp_path / "tiny"
    (dataset / "qrels").mkdir(parents=True)
    (dataset / "corpus.jsonl").write_text(
        "".join(
            json.dumps({"_id": k, "title": t, "text": x}) + "\n" for k, (t, x) in CORPUS.items()
        )
    )
    (dataset / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": k, "text": v}) + "\n" for k, v in QUERIES.items())
    )
    (dataset / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t1\n" for q, d in QRELS.items())
    )
    code = main(["eval", "--dataset", str(dataset), "--methods", "dense,hybrid,hybrid+rerank",
                 "--json"])  # fmt: skip
    assert code == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["documents"] == 4 and out["queries"] == 3
    assert out["load_seconds"] > 0 and "notes" not in out, out
    for method in ("dense", "hybrid", "hybrid+rerank"):
        assert out["methods"][method]["mrr@10"] == 1.0, out["methods"]
    assert {"request", "rerank"} <= set(out["latency_ms"])
