"""Fit the short-answer checker's model on one labelled set and check it on another.

``tests/gateway/data/short_answers_fit.jsonl`` (biology, chemistry, history, computing) is
the only data the model is fitted on; ``short_answers_check.jsonl`` (the demo course's
lessons, maths, physics: other subjects and sources) and the older ``short_answers.jsonl``
are only scored. Every row is judged as the gateway judges it: the rules of
``lectern_gateway.study.grading`` first, the model for the rows they leave open.

On the fit part's open rows: the two cut-offs (``slip_rate`` under the lexical fit, then
``match_cosine`` under the context fit) are the values under which the fit is most likely;
then for each fit (``context``: every signal; ``reply``: the answer-to-reference cosine
only; ``lexical``: no embedder) a logistic regression with an L2 penalty, both classes
weighted alike, the penalty with the best leave-one-subject-out log loss, and the
probability threshold with the best leave-one-subject-out agreement. The fits and their
figures go to ``lectern_gateway/study/grading_model.json``.

    .venv/bin/python bench/fit_grading.py            # fit, report, write the model
    .venv/bin/python bench/fit_grading.py --dry-run  # fit and report only
    .venv/bin/python bench/fit_grading.py --misses   # also list the check part's misses
    .venv/bin/python bench/fit_grading.py --dry-run --reader  # and the reader's signals

``--reader`` measures the packaged reader (``lectern_common.reading``) as one more signal of
the context fit, fitted the same way beside the fit without it, and prints both (the model
written is never the reader's: ``docs/study.md`` has the figures and why it was not kept).
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from lectern_common.embeddings import LocalEmbedder
from lectern_gateway.config import Settings
from lectern_gateway.study import grading

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "gateway" / "data"
SETS = {
    "fit": DATA / "short_answers_fit.jsonl",
    "check": DATA / "short_answers_check.jsonl",
    "old": DATA / "short_answers.jsonl",
}
#: the four right answers to the demo course's fill-in quiz the rules-and-cosine checker
#: rejected (they are in the check part)
PROBES = (("46", "forty-six"), ("97", "ninety-seven"), ("cancer", "a malignant tumour"),
          ("limiting factor", "a factor that limits the rate"))  # fmt: skip
PENALTIES = (0.03, 0.1, 0.3, 1.0, 3.0, 10.0)
THRESHOLDS = tuple(round(float(t), 2) for t in np.arange(0.2, 0.81, 0.05))

Cuts = tuple[float, float]  # (slip_rate, match_cosine)


@dataclass
class Row:
    """One labelled answer with what the checker computes for it."""

    data: dict[str, Any]
    rule: bool | None
    values: dict[str, float]

    @property
    def correct(self) -> bool:
        """The label: whether a teacher marks the answer right."""
        return bool(self.data["correct"])

    @property
    def group(self) -> str:
        """The subject, the unit of cross-validation."""
        return str(self.data.get("subject", "old"))


def load(path: Path) -> list[dict[str, Any]]:
    """The rows of a JSON-lines file."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def described(rows: list[dict[str, Any]], embedder: LocalEmbedder) -> list[Row]:
    """Each row's rule verdict and signals, with the embedder's cosines."""
    texts = [
        grading.similarity_texts(r["reference"], r["answer"], question=r.get("question", ""))
        for r in rows
    ]
    vectors = embedder.embed_documents_sync([t for group in texts for t in group])
    out: list[Row] = []
    at = 0
    for row, group in zip(rows, texts, strict=True):
        similarities = grading.similarities_of(group, vectors[at : at + len(group)])
        at += len(group)
        question = row.get("question", "")
        rule = grading.rule_verdict(row["reference"], row["answer"], question=question)
        values = grading.signals(
            row["reference"], row["answer"], question=question,
            evidence=row.get("evidence", ""), similarities=similarities,
        )  # fmt: skip
        out.append(Row(row, rule, values))
    return out


def matrix(rows: list[Row], names: tuple[str, ...], cuts: Cuts) -> NDArray[np.float64]:
    """The signals ``names`` of ``rows``, those made with cut-offs from ``cuts``."""
    model = grading.GradingModel({}, *cuts)
    values = [model.completed(r.values) for r in rows]
    return np.asarray([[v[n] for n in names] for v in values], dtype=np.float64)


def labels(rows: list[Row]) -> NDArray[np.float64]:
    """1 for a right answer, 0 for a wrong one."""
    return np.asarray([r.correct for r in rows], dtype=np.float64)


def fit_logistic(
    x: NDArray[np.float64], y: NDArray[np.float64], penalty: float
) -> tuple[NDArray[np.float64], float]:
    """Weights and bias minimising the log loss plus ``penalty``/2 times the squared weights
    (the bias is not penalised); both classes weigh the same in total."""
    from scipy.optimize import minimize  # type: ignore[import-untyped]

    positive = max(float(y.sum()), 1.0)
    negative = max(float(len(y) - y.sum()), 1.0)
    weight = np.where(y == 1, len(y) / (2 * positive), len(y) / (2 * negative))

    def loss(params: NDArray[np.float64]) -> tuple[float, NDArray[np.float64]]:
        w, b = params[:-1], params[-1]
        z = x @ w + b
        p = 1.0 / (1.0 + np.exp(-z))
        value = float(np.sum(weight * (np.logaddexp(0.0, z) - y * z)) + 0.5 * penalty * (w @ w))
        residual = weight * (p - y)
        return value, np.concatenate([x.T @ residual + penalty * w, [residual.sum()]])

    result = minimize(loss, np.zeros(x.shape[1] + 1), jac=True, method="L-BFGS-B")
    return np.asarray(result.x[:-1], dtype=np.float64), float(result.x[-1])


def probabilities(x: NDArray[np.float64], w: NDArray[np.float64], b: float) -> NDArray[np.float64]:
    """The model's probability that each row is right."""
    return np.asarray(1.0 / (1.0 + np.exp(-(x @ w + b))), dtype=np.float64)


def log_loss(p: NDArray[np.float64], y: NDArray[np.float64]) -> float:
    """Mean negative log-likelihood of the labels ``y`` under ``p``."""
    p = np.clip(p, 1e-12, 1 - 1e-12)
    return float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p)))


def cross_validated(
    rows: list[Row], names: tuple[str, ...], penalty: float, cuts: Cuts
) -> NDArray[np.float64]:
    """Each row's probability from a fit on the other subjects' rows."""
    x, y = matrix(rows, names, cuts), labels(rows)
    groups = np.asarray([r.group for r in rows])
    out = np.zeros(len(rows))
    for group in np.unique(groups):
        held = groups == group
        w, b = fit_logistic(x[~held], y[~held], penalty)
        out[held] = probabilities(x[held], w, b)
    return out


def best_cut(
    rows: list[Row], names: tuple[str, ...], candidates: list[float], cuts: Callable[[float], Cuts]
) -> float:
    """The candidate under which the fit on ``rows`` is most likely (``cuts`` makes both
    cut-offs of a candidate); among equally likely ones, the middle."""
    y = labels(rows)
    losses = []
    for candidate in candidates:
        x = matrix(rows, names, cuts(candidate))
        w, b = fit_logistic(x, y, PENALTIES[0])
        losses.append(log_loss(probabilities(x, w, b), y))
    best = min(losses)
    tied = [c for c, v in zip(candidates, losses, strict=True) if v <= best + 1e-9]
    return round((tied[0] + tied[-1]) / 2, 4)


def midpoints(values: list[float], low: float, high: float) -> list[float]:
    """Halfway between consecutive distinct ``values`` within [low, high]."""
    ordered = sorted({v for v in values if low <= v <= high})
    return [(a + b) / 2 for a, b in itertools.pairwise(ordered)]


def fit_cuts(open_rows: list[Row]) -> Cuts:
    """``slip_rate`` under the lexical fit (among the edits per letter of the answers'
    closest words, 0.05 to 0.5), then ``match_cosine`` under the context fit (among the
    new-words cosines of answers without a wanted stem, 0.5 and up)."""
    slip = best_cut(
        open_rows, grading.MODEL_SIGNALS["lexical"],
        midpoints([r.values["slip_rate"] for r in open_rows], 0.05, 0.5), lambda c: (c, 1.0),
    )  # fmt: skip
    cosines = [r.values["new_words_cosine"] for r in open_rows if r.values["term_recall"] == 0]
    match = best_cut(
        open_rows, grading.MODEL_SIGNALS["context"], midpoints(cosines, 0.5, 1.0),
        lambda c: (slip, c),
    )  # fmt: skip
    return slip, match


def choose(
    open_rows: list[Row], names: tuple[str, ...], cuts: Cuts
) -> tuple[float, float, NDArray[np.float64]]:
    """The penalty with the best cross-validated log loss, the probability threshold with
    the best cross-validated agreement (the nearest to 0.5 among equals), and the
    cross-validated probabilities."""
    y = labels(open_rows)
    runs = [(p, cross_validated(open_rows, names, p, cuts)) for p in PENALTIES]
    penalty, cv = min(runs, key=lambda run: log_loss(run[1], y))
    threshold = max(THRESHOLDS, key=lambda t: (float(np.mean((cv >= t) == y)), -abs(t - 0.5)))
    return penalty, threshold, cv


def agreement(rows: list[Row], verdicts: list[bool]) -> float:
    """Share of rows whose verdict is the label."""
    return sum(v == r.correct for v, r in zip(verdicts, rows, strict=True)) / len(rows)


def judged(rows: list[Row], model: grading.GradingModel, prefer: str) -> list[bool]:
    """The checker's verdicts: the rule's, else the model's (``prefer`` fit when a row has
    its signals)."""
    return [r.rule if r.rule is not None else model.is_right(r.values, prefer=prefer) for r in rows]


#: the reader's signals ``--reader`` measures, each the logistic of a reader logit: whether
#: the answer answers the question; the answer against the question with the reference
#: given; the question with the answer in its blank; and the last against the question
#: filled with the reference (``tanh`` of the logits' difference over 4)
READER_SIGNALS = ("reader_answer", "reader_with_reference", "reader_filled", "reader_filled_gain")


def add_reader_signals(rows: list[Row]) -> None:
    """Each row's ``READER_SIGNALS`` (a question without a blank asks for the answer as is)."""
    from lectern_common import reading

    reader = reading.packaged()
    for row in rows:
        data = row.data
        question = data.get("question", "")
        asked = question.strip().removeprefix(grading.FILL_IN).strip()
        filled = [grading.filled_in(question, t) for t in (data["answer"], data["reference"])]
        logits = reader.logits(asked, [data["answer"], *filled], kind="sentence")
        given = reader.logits(f"{asked} {data['reference']}", [data["answer"]], kind="sentence")
        p = reading.probability([logits[0], given[0], logits[1]])
        row.values.update(zip(READER_SIGNALS[:3], (float(v) for v in p), strict=True))
        row.values["reader_filled_gain"] = float(np.tanh((logits[1] - logits[2]) / 4))


def compare_reader(rows: dict[str, list[Row]], cuts: Cuts) -> None:
    """Print the context fit's agreement without and with each reader signal: on the fit
    part (and cross-validated by subject), the held-out check part and the old set."""
    for part in rows.values():
        add_reader_signals(part)
    fit_rows = rows["fit"]
    open_rows = [r for r in fit_rows if r.rule is None]
    shipped = grading.grading_model()
    context = grading.MODEL_SIGNALS["context"]
    for extra in ((), *((name,) for name in READER_SIGNALS)):
        names = context + extra
        penalty, threshold, cv = choose(open_rows, names, cuts)
        verdicts = iter(cv >= threshold)
        cross = agreement(
            fit_rows, [r.rule if r.rule is not None else bool(next(verdicts)) for r in fit_rows]
        )
        w, b = fit_logistic(matrix(open_rows, names, cuts), labels(open_rows), penalty)
        fit = grading.Logistic(names, tuple(float(v) for v in w), b, threshold)
        model = grading.GradingModel({"context": fit}, *cuts)

        def verdict(
            row: Row, fit: grading.Logistic = fit, model: grading.GradingModel = model
        ) -> bool:
            values = model.completed(row.values)
            if row.rule is not None:
                return row.rule
            if all(n in values for n in fit.signals):
                return fit.probability(values) >= fit.threshold
            return shipped.is_right(row.values)  # no question: the shipped reply fit

        figures = {name: agreement(part, [verdict(r) for r in part]) for name, part in rows.items()}
        weight = f", weight {w[-1]:+.2f}" if extra else ""
        print(
            f"context{' + ' + extra[0] if extra else '':28} fit {figures['fit']:.3f} (cross-"
            f"validated by subject {cross:.3f}), check {figures['check']:.3f}, old "
            f"{figures['old']:.3f}{weight}"
        )


def main() -> int:
    """Fit, report and (unless --dry-run) write ``grading_model.json``."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="do not write the model")
    parser.add_argument("--misses", action="store_true", help="list the check part's misses")
    parser.add_argument(
        "--reader", action="store_true", help="also fit the reader's signals and compare"
    )
    args = parser.parse_args()
    embedder = LocalEmbedder(Settings(), query_precision="float32")
    rows = {name: described(load(path), embedder) for name, path in SETS.items()}
    fit_rows = rows["fit"]
    open_rows = [r for r in fit_rows if r.rule is None]
    print(f"fit part: {len(fit_rows)} rows, {len(open_rows)} left open by the rules")
    cuts = fit_cuts(open_rows)
    print(f"slip_rate {cuts[0]}, match_cosine {cuts[1]}")
    fits: dict[str, grading.Logistic] = {}
    cv_agreement: dict[str, float] = {}
    penalties: dict[str, float] = {}
    for name, names in grading.MODEL_SIGNALS.items():
        penalty, threshold, cv = choose(open_rows, names, cuts)
        verdicts = iter(cv >= threshold)
        cv_agreement[name] = agreement(
            fit_rows, [r.rule if r.rule is not None else bool(next(verdicts)) for r in fit_rows]
        )
        w, b = fit_logistic(matrix(open_rows, names, cuts), labels(open_rows), penalty)
        fits[name] = grading.Logistic(
            names, tuple(round(float(v), 6) for v in w), round(b, 6), round(threshold, 2)
        )
        penalties[name] = penalty
    model = grading.GradingModel(fits, *cuts)
    figures: dict[str, dict[str, float]] = {}
    for name, fit in fits.items():
        figures[name] = {
            "penalty": penalties[name],
            "fit": round(agreement(fit_rows, judged(fit_rows, model, name)), 4),
            "fit_cross_validated": round(cv_agreement[name], 4),
            "check": round(agreement(rows["check"], judged(rows["check"], model, name)), 4),
            "old": round(agreement(rows["old"], judged(rows["old"], model, name)), 4),
        }
        print(
            f"{name:8} penalty {penalties[name]:<5} threshold {fit.threshold:.2f}  agreement: "
            f"fit {figures[name]['fit']:.3f} (cross-validated by subject "
            f"{figures[name]['fit_cross_validated']:.3f}), check {figures[name]['check']:.3f}, "
            f"old {figures[name]['old']:.3f}"
        )
        weights = zip(fit.signals, fit.weights, strict=True)
        print("   " + ", ".join(f"{n} {v:+.2f}" for n, v in weights) + f", bias {fit.bias:+.2f}")
    print(f"rows: fit {len(fit_rows)}, check {len(rows['check'])}, old {len(rows['old'])}")
    by_text = {(r.data["reference"], r.data["answer"]): r for r in rows["check"]}
    for reference, answer in PROBES:
        verdict = judged([by_text[(reference, answer)]], model, "context")[0]
        print(f"probe: {answer!r} for {reference!r}: {'right' if verdict else 'wrong'}")
    if args.misses:
        check_verdicts = judged(rows["check"], model, "context")
        for row, verdict in zip(rows["check"], check_verdicts, strict=True):
            if verdict != row.correct:
                by = "rules" if row.rule is not None else "model"
                label = "right" if row.correct else "wrong"
                print(f"  miss ({by}): {row.data['answer']!r} for {row.data['reference']!r}, "
                      f"labelled {label} ({row.data['case']})")  # fmt: skip
    if args.reader:
        compare_reader(rows, cuts)
    if not args.dry_run:
        document = {
            "written_by": "bench/fit_grading.py",
            "fitted_on": "tests/gateway/data/short_answers_fit.jsonl",
            "slip_rate": cuts[0],
            "match_cosine": cuts[1],
            "figures": figures,
            "fits": {
                name: {"signals": list(f.signals), "weights": list(f.weights), "bias": f.bias,
                       "threshold": f.threshold}
                for name, f in fits.items()
            },
        }  # fmt: skip
        grading.MODEL_PATH.write_text(json.dumps(document, indent=1) + "\n")
        print(f"wrote {grading.MODEL_PATH.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
