"""The offline answerer's own time, reading every unit against reading at most
``answerer.READ_AT_MOST`` (``make bench-offline``).

It answers every question of a ``make bench-answers`` run (its stored final sources, as chat
gave them to the answerer) twice, with the packaged embedder and reader (no cache of the
reader's logits): once reading every unit, once reading only the units the model without the
reader ranks highest. The two settings alternate question by question on one warmed-up
answerer, so the ratio is measured in one run on the same (noisy, 2-core) machine. It prints
each setting's p50 / p95 and the share of questions whose answer text is the same.
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
from replay_answers import _sources  # the stored sources as the answerer gets them

import lectern_answerer as answerer
from lectern_common import reading
from lectern_common.embeddings import LocalEmbedder
from lectern_common.settings import BaseServiceSettings


async def run(data: dict[str, Any], limit: int | None) -> dict[str, Any]:
    asked = [
        (r["question"], _sources(r["sources"]))
        for r in [*data["results"], *data.get("offtopic", [])]
        if r.get("sources") and r.get("band") != "gap"
    ][:limit]
    embedder = LocalEmbedder(BaseServiceSettings())
    reader = reading.packaged()
    offline = answerer.OfflineAnswerer(embedder=embedder, reader=reader)
    for question, sources in asked:  # warm up: unit vectors cached, both paths loaded once
        await offline.answer(question=question, sources=sources)
    times: dict[str, list[float]] = {"all": [], "at_most": []}
    same = 0
    units: list[int] = []
    for index, (question, sources) in enumerate(asked):
        texts: dict[str, str] = {}
        order = ("all", "at_most") if index % 2 == 0 else ("at_most", "all")
        for setting in order:
            offline.read_at_most = None if setting == "all" else answerer.READ_AT_MOST
            started = time.perf_counter()
            result = await offline.answer(question=question, sources=sources)
            times[setting].append((time.perf_counter() - started) * 1000)
            texts[setting] = result.render()
        same += texts["all"] == texts["at_most"]
        units.append(len(answerer.source_units(sources)))
    figures = {
        f"{setting}_{name}_ms": round(float(np.percentile(values, q)), 1)
        for setting, values in times.items()
        for name, q in (("p50", 50), ("p95", 95))
    }
    return {
        "questions": len(asked),
        "read_at_most": answerer.READ_AT_MOST,
        "units_p50": float(np.median(units)),
        "units_p95": float(np.percentile(units, 95)),
        **figures,
        "p95_ratio": round(figures["all_p95_ms"] / figures["at_most_p95_ms"], 2),
        "same_answer": round(same / len(asked), 3),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, default=Path("/tmp/lectern-bench-answers.json"))
    parser.add_argument("--limit", type=int, help="answer only the first N questions")
    args = parser.parse_args()
    if not args.json.is_file():
        print(f"{args.json}: no answer run; `make bench-answers` writes one", file=sys.stderr)
        return 2
    if not reading.available():
        print("the packaged reader is missing", file=sys.stderr)
        return 2
    out = asyncio.run(run(json.loads(args.json.read_text()), args.limit))
    print(
        f"{out['questions']} questions, units per question p50 {out['units_p50']:.0f} / p95 "
        f"{out['units_p95']:.0f}\n"
        f"reading every unit:        p50 {out['all_p50_ms']:7.1f} ms, p95 "
        f"{out['all_p95_ms']:7.1f} ms\n"
        f"reading at most {out['read_at_most']:>2} units: p50 {out['at_most_p50_ms']:7.1f} ms, "
        f"p95 {out['at_most_p95_ms']:7.1f} ms ({out['p95_ratio']}x faster at p95)\n"
        f"the same answer text: {out['same_answer']:.3f} of questions"
    )
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
