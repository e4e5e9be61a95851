"""Fit the answer margin chat refuses below: SQuAD 2.0's null-score difference, over the
re-ranker's reads of a turn's sources, on the answer set's development split.

A turn's evidence is the best answer span among its sources (``sources[].answer`` of the SSE
``sources`` event: the span's score against the "no answer here" score of the same read).
The margin is the largest that refuses at most ``--most-refused`` of the development split's
answerable questions, so it refuses what the reader finds no answer to while keeping what
it does. Out of sample: each development document's questions (and the off-topic questions
of no document, as one group) are judged by the margin fitted without them; the test split
by the margin fitted on all of dev, read once.

    python bench/fit_margin.py --json RUN.json        # a make bench-answers run

Prints the margin, then dev (out of sample) and test: answerable refused, off-topic refused,
near misses refused; one JSON line last.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lectern_eval.answer_set import load_set

HERE = Path(__file__).resolve().parent


def best_margin(sources: Sequence[dict[str, Any]]) -> float:
    """The best margin of a turn's sources' answer spans (-inf when none was marked)."""
    margins = [
        float(s["answer"]["score"]) - float(s["answer"]["null_score"])
        for s in sources
        if s.get("answer")
    ]
    return max(margins, default=-math.inf)


def fit(answerable: Sequence[float], most_refused: float) -> float:
    """The largest margin under which at most ``most_refused`` of ``answerable`` fall."""
    ordered = sorted(answerable)
    if not ordered:
        return -math.inf
    # refusing below the (k+1)-th lowest refuses at most the k lowest (ties kept)
    return ordered[min(len(ordered) - 1, math.floor(most_refused * len(ordered)))]


def figures(rows: Sequence[dict[str, Any]], margins: dict[str, float]) -> dict[str, float]:
    """Refusal shares of ``rows`` (each with ``margin``, ``answerable``, ``group``, ``near``),
    each judged by the margin of its group (``margins``; ``"*"`` for all)."""

    def refused(row: dict[str, Any]) -> bool:
        if row["gap"]:
            return True
        # no span marked at all: chat.decision has no evidence to refuse on
        least = margins.get(row["group"], margins.get("*", 0))
        return not math.isinf(row["margin"]) and row["margin"] < least

    def share(chosen: list[dict[str, Any]]) -> float:
        return round(sum(refused(r) for r in chosen) / len(chosen), 3) if chosen else 0.0

    return {
        "answerable": sum(1 for r in rows if r["answerable"]),
        "answerable_refused": share([r for r in rows if r["answerable"]]),
        "offtopic_refused": share([r for r in rows if not r["answerable"]]),
        "near_miss_refused": share([r for r in rows if not r["answerable"] and r["near"]]),
    }


def questions(run: dict[str, Any], root: Path) -> list[dict[str, Any]]:
    """Every question of the run with its split, group, best margin and whether the
    re-ranker's band already refused it."""
    split_of = {q: s.name for s in load_set(root) for q in s.ids}
    rows = []
    for result in run["results"]:
        if result["id"] in split_of:
            rows.append({
                "split": split_of[result["id"]], "group": result["document"], "answerable": True,
                "near": False, "margin": best_margin(result.get("sources") or []),
                "gap": result.get("band") == "gap" or not result.get("sources"),
            })  # fmt: skip
    for result in run.get("offtopic", []):
        if result["id"] in split_of:
            rows.append({
                "split": split_of[result["id"]], "group": result.get("document") or "(off-topic)",
                "answerable": False, "near": bool(result.get("document")),
                "margin": best_margin(result.get("sources") or []),
                "gap": result.get("band") == "gap" or not result.get("sources"),
            })  # fmt: skip
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, default=Path("/tmp/lectern-bench-answers.json"))
    parser.add_argument("--set", type=Path, default=HERE / "answers")
    parser.add_argument(
        "--most-refused", type=float, default=0.02,
        help="the share of answerable development questions the margin may refuse (0.02)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    rows = questions(json.loads(args.json.read_text()), args.set)
    if not any(not math.isinf(r["margin"]) for r in rows):
        print("fit-margin: the run's sources carry no answer spans (a reader without a span "
              "head?)", file=sys.stderr)  # fmt: skip
        return 2
    dev = [r for r in rows if r["split"] == "dev"]
    test = [r for r in rows if r["split"] == "test"]

    def fitted(chosen: Sequence[dict[str, Any]]) -> float:
        answerable = [r["margin"] for r in chosen if r["answerable"] and not r["gap"]]
        # those with no span marked are never refused on it, but count in the share
        finite = [m for m in answerable if not math.isinf(m)]
        share = args.most_refused * len(answerable) / max(1, len(finite))
        return fit(finite, share)

    margin = fitted(dev)
    held = {g: fitted([r for r in dev if r["group"] != g]) for g in {r["group"] for r in dev}}
    out = {
        "margin": round(margin, 3), "most_refused": args.most_refused,
        "dev_out_of_sample": figures(dev, held), "dev_in_sample": figures(dev, {"*": margin}),
        "test": figures(test, {"*": margin}),
    }  # fmt: skip
    print(f"margin {margin:.3f} (at most {args.most_refused:.0%} of dev's answerable refused)")
    for name in ("dev_out_of_sample", "dev_in_sample", "test"):
        f = out[name]
        print(f"  {name:18} answerable refused {f['answerable_refused']:.3f} "
              f"({f['answerable']}), off-topic refused {f['offtopic_refused']:.3f}, "
              f"near misses {f['near_miss_refused']:.3f}")  # fmt: skip
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
