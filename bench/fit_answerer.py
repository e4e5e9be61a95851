"""Fit the offline answerer's scoring model on the development split's labelled sentences.

Each unit (sentence, list item, table row) of the sources of every development question is
labelled by whether it states one of the question's key facts, and described by the
answerer's ``SIGNALS`` (``bench/replay_answers.py --signals`` writes them from a stored
run). A logistic regression combines the signals; it is cross-validated by document (no
document's sentences are both fitted and scored), and the fit on all development documents
is written to ``lectern_answerer/answerer_model.json`` with its cross-validated figures.

    python bench/replay_answers.py --json RUN.json --signals /tmp/signals.npz
    python bench/fit_answerer.py --signals /tmp/signals.npz

(or ``make fit-answerer RUN=RUN.json``). By default it fits the shipped recipe: the unit
model without the signals the seventeenth session's ablation dropped (``DROPPED``: with the
reader in place they lowered the cross-fitted figures), the refusal without the reader's best
logit (``DROPPED_QUESTION``: it lowered the cross-fitted off-topic refusal) and with a floor
on the best unit's similarity (``FLOORED``), C = 1. ``--all-signals`` fits every signal
instead, ``--c`` searches other penalties, ``--floor``/``--no-floors`` choose the floors.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

import lectern_answerer as answerer

#: the unit signals the shipped model goes without: with the reader in place, the definition
#: family (but ``defining_frame``, added since), the list and table families and the
#: products of lexical and semantic lowered the cross-fitted figures (docs/benchmarks.md,
#: seventeenth session)
DROPPED = (
    "lexical_x_semantic", "log_match", "defines", "names", "opens_with_subject", "copula_near",
    "list_unit", "counts_asked", "table_row", "row_match", "row_label", "table_context",
)  # fmt: skip
#: the question signals the shipped refusal goes without: the reader's best logit lowered the
#: cross-fitted off-topic refusal (0.464 -> 0.188 at the same answerable refusals)
DROPPED_QUESTION = ("best_reader",)
#: the question signals the refusal also keeps a floor on: the least value an answerable
#: development question had. A question whose best unit is further in meaning from it than
#: any answerable question's ("What is the capital of Australia?" against a sentence on duck
#: species that names Australia) is refused whatever the logistic refusal says: it weighs a
#: high lexical share against a low similarity, where no answerable question had that low a
#: similarity. A floor on the re-ranker's best score (``--floor rerank_top``) refused more
#: off-topic questions on dev but one answerable one more, and the re-ranker scores table-only
#: documents low (its reader read no table): not kept
FLOORED = ("best_semantic",)


def answerable_questions(data: Any) -> set[str]:
    """The ids of a signals file's answerable questions (its off-topic ones are the rest)."""
    return {
        str(q) for q, row in zip(data["question_ids"], data["question_table"], strict=True)
        if row[0] == 1
    }  # fmt: skip


def _fit_listwise(
    x: NDArray[np.float64], y: NDArray[np.int_], questions: NDArray[np.str_], c: float
) -> tuple[NDArray[np.float64], float]:
    """Weights that rank, within each question, the units stating a fact first: the
    likelihood of those units under a softmax over the question's units (a conditional
    logit), with an L2 penalty of 1/c; a one-signal logistic fit of the resulting logit then
    scales and shifts it into the probability that a unit states a fact."""
    from scipy.optimize import minimize  # type: ignore[import-untyped]

    order = np.argsort(questions, kind="stable")
    x, y, questions = x[order], y[order], questions[order]
    _, starts = np.unique(questions, return_index=True)
    spans = [
        (int(a), int(z)) for a, z in zip(starts, [*starts[1:], len(y)], strict=True) if y[a:z].any()
    ]

    def loss(w: NDArray[np.float64]) -> tuple[float, NDArray[np.float64]]:
        total, grad = 0.5 * float(w @ w) / c, w / c
        logits = x @ w
        for a, z in spans:
            part = np.exp(logits[a:z] - logits[a:z].max())
            p = part / part.sum()
            q = np.where(y[a:z] == 1, p, 0.0)
            mass = q.sum()
            total -= float(np.log(mass))
            grad = grad - x[a:z].T @ (q / mass) + x[a:z].T @ p
        return total, grad

    w = minimize(loss, np.zeros(x.shape[1]), jac=True, method="L-BFGS-B").x
    scale, bias = _fit((x @ w)[:, None], y, 1e6)
    return np.asarray(w * float(scale[0]), dtype=np.float64), float(bias)


def _fit(
    x: NDArray[np.float64], y: NDArray[np.int_], c: float
) -> tuple[NDArray[np.float64], float]:
    from sklearn.linear_model import LogisticRegression  # type: ignore[import-untyped]

    model = LogisticRegression(C=c, max_iter=2000, class_weight="balanced")
    model.fit(x, y)
    return np.asarray(model.coef_[0], dtype=np.float64), float(model.intercept_[0])


def _top1(scores: NDArray[np.float64], y: NDArray[np.int_], questions: NDArray[np.str_]) -> float:
    """Share of questions (with a labelled unit at all) whose best-scored unit states a fact."""
    hits = total = 0
    for q in np.unique(questions):
        at = questions == q
        if not y[at].any():
            continue
        total += 1
        hits += int(y[at][int(np.argmax(scores[at]))])
    return hits / total if total else 0.0


def _floors(
    qfull: NDArray[np.float64], qy: NDArray[np.int_], names: Sequence[str]
) -> dict[str, float]:
    """The least value of each question signal ``names`` over the answerable questions of
    ``qfull`` (all ``QUESTION_SIGNALS``) that have it (the re-ranker's best score needs
    scored sources)."""
    out = {}
    for name in names:
        at = answerer.QUESTION_SIGNALS.index(name)
        has = np.asarray([answerer.has_signal(row, at) for row in qfull])
        values = qfull[(qy == 1) & has, at]
        if len(values):
            out[name] = float(values.min())
    return out


def _below(qfull: NDArray[np.float64], floors: dict[str, float]) -> NDArray[np.bool_]:
    """Whether each question (a row of all ``QUESTION_SIGNALS``) is below a floor."""
    at = [(answerer.QUESTION_SIGNALS.index(n), value) for n, value in floors.items()]
    return np.asarray([answerer.below_floors(row, at) for row in qfull])


def _question_matrix(
    data: Any, x_all: NDArray[np.float64], w: NDArray[np.float64], b: float,
    columns: list[int],
) -> tuple[NDArray[np.float64], NDArray[np.int_], NDArray[np.str_]]:  # fmt: skip
    """Each question's ``QUESTION_SIGNALS`` under the unit model (w, b over ``columns`` of
    the signals), its label (answerable 1, off-topic 0) and its group (document, or
    off-topic)."""
    probabilities = 1.0 / (1.0 + np.exp(-(x_all[:, columns] @ w + b)))
    semantic, lexical = answerer.SIGNALS.index("semantic"), answerer.SIGNALS.index("lexical")
    rows, labels = [], []
    for qid, (answerable, *static) in zip(
        data["question_ids"], data["question_table"], strict=True
    ):
        at = data["questions"] == qid
        row = list(static)  # in QUESTION_SIGNALS order; the unit model's own are redone
        row[0] = probabilities[at].max()
        row[1], row[2] = x_all[at, semantic].max(), x_all[at, lexical].max()
        rows.append(row)
        labels.append(int(answerable))
    return np.asarray(rows), np.asarray(labels), data["question_groups"]


def _fit_refusal(
    data: Any, x_all: NDArray[np.float64], w: NDArray[np.float64], b: float, *,
    most_refused: float, columns: list[int], names: list[str], floor: Sequence[str],
) -> dict[str, Any]:  # fmt: skip
    """The refusal model over the question signals ``names``: answerable against off-topic
    development questions, its threshold the highest that refuses at most ``most_refused``
    of the answerable ones when each document's questions are scored by a model fitted
    without them."""
    qfull, qy, qgroups = _question_matrix(data, x_all, w, b, columns)
    qx = qfull[:, [answerer.QUESTION_SIGNALS.index(n) for n in names]]
    held, floored = np.zeros(len(qy)), np.zeros(len(qy), dtype=bool)
    for group in np.unique(qgroups):
        fit_on = qgroups != group
        rw, rb = _fit(qx[fit_on], qy[fit_on], 1.0)
        held[~fit_on] = 1.0 / (1.0 + np.exp(-(qx[~fit_on] @ rw + rb)))
        floored[~fit_on] = _below(qfull[~fit_on], _floors(qfull[fit_on], qy[fit_on], floor))
    answerable = np.sort(held[qy == 1])
    allowed = int(np.floor(most_refused * len(answerable)))
    threshold = float(answerable[allowed]) if len(answerable) else 0.5
    refused = (held < threshold) | floored
    offtopic_refused = float(refused[qy == 0].mean()) if (qy == 0).any() else 0.0
    answerable_refused = float(refused[qy == 1].mean())
    print(
        f"refusal: {int((qy == 1).sum())} answerable, {int((qy == 0).sum())} off-topic questions "
        f"with sources; leave-one-document-out at threshold {threshold:.3f} and floors on "
        f"{', '.join(floor) or 'nothing'}: answerable refused {answerable_refused:.3f}, "
        f"off-topic refused {offtopic_refused:.3f} (the floors alone: "
        f"{float(floored[qy == 1].mean()):.3f}, {float(floored[qy == 0].mean()):.3f})"
    )
    rw, rb = _fit(qx, qy, 1.0)
    floors = _floors(qfull, qy, floor)
    for name, value in zip(names, rw, strict=True):
        print(f"  {name:22} {value:+.3f}")
    return {
        "signals": list(names),
        "weights": [round(float(v), 4) for v in rw],
        "bias": round(rb, 4),
        "threshold": round(threshold, 4),
        "floors": {name: round(value, 4) for name, value in floors.items()},
        "leave_one_document_out": {
            "answerable_refused": round(answerable_refused, 3),
            "offtopic_refused": round(offtopic_refused, 3),
        },
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--signals", type=Path, required=True)
    parser.add_argument(
        "--c", type=float, nargs="*", default=[1.0],
        help="L2 penalties to try (1/C), the best by leave-one-document-out top-1 kept; the "
        "shipped model's is 1 (try 0.03 0.1 0.3 1 3)",
    )  # fmt: skip
    parser.add_argument("--out", type=Path, default=answerer.MODEL_PATH)
    parser.add_argument(
        "--keep-unit", action="store_true",
        help="keep the shipped unit model and fit the refusal only (a unit refit that lowers "
        "the test split is not kept)",
    )  # fmt: skip
    parser.add_argument(
        "--most-refused", type=float, default=0.01,
        help="the share of answerable development questions the refusal may refuse (0.01)",
    )  # fmt: skip
    parser.add_argument("--drop", action="append", choices=answerer.SIGNALS,
                        help="fit the unit model without this signal (repeatable; default: "
                        "the shipped recipe's DROPPED)")  # fmt: skip
    parser.add_argument(
        "--all-signals", action="store_true",
        help="fit every unit and question signal (no DROPPED, no DROPPED_QUESTION)",
    )  # fmt: skip
    parser.add_argument(
        "--drop-question", action="append", choices=answerer.QUESTION_SIGNALS,
        help="fit the refusal without this question signal (repeatable; default: the shipped "
        "recipe's DROPPED_QUESTION)",
    )  # fmt: skip
    parser.add_argument(
        "--floor", dest="floors", action="append", choices=answerer.QUESTION_SIGNALS,
        help=f"keep a floor on this question signal (repeatable; default: {', '.join(FLOORED)})",
    )  # fmt: skip
    parser.add_argument(
        "--no-floors", dest="floors", action="store_const", const=[],
        help="fit the refusal without floors",
    )  # fmt: skip
    parser.add_argument(
        "--cross-fit", type=Path, metavar="DIR",
        help="also write, for each development document (and the off-topic questions of no "
        "document), the model fitted without it: replay_answers.py --cross-fitted DIR then "
        "answers every development question with a model that never saw its document",
    )  # fmt: skip
    args = parser.parse_args()
    if args.drop is None:
        args.drop = [] if args.all_signals else list(DROPPED)
    if args.floors is None:
        args.floors = list(FLOORED)
    if args.drop_question is None:
        args.drop_question = [] if args.all_signals else list(DROPPED_QUESTION)
    data = np.load(args.signals)
    names = tuple(str(n) for n in data["names"])
    if names != answerer.SIGNALS:
        print("the signals file was written with other signals: replay again", file=sys.stderr)
        return 2
    x_all, y_all = data["signals"].astype(np.float64), data["labels"].astype(np.int_)
    kept = [n for n in answerer.SIGNALS if n not in args.drop]
    columns = [answerer.SIGNALS.index(n) for n in kept]
    asked = [n for n in answerer.QUESTION_SIGNALS if n not in args.drop_question]
    answerable_ids = answerable_questions(data)
    answerable_units = np.asarray([str(q) in answerable_ids for q in data["questions"]])
    full, y = x_all[answerable_units], y_all[answerable_units]
    x = full[:, columns]
    groups, questions = data["groups"][answerable_units], data["questions"][answerable_units]
    documents = np.unique(groups)
    print(f"{len(y)} units ({int(y.sum())} state a fact) of {len(np.unique(questions))} "
          f"questions over {len(documents)} documents")  # fmt: skip
    from sklearn.metrics import roc_auc_score  # type: ignore[import-untyped]

    current = answerer.answer_model().score(full)  # the shipped unit model
    print(f"shipped model: AUC {roc_auc_score(y, current):.3f}, "
          f"top-1 {_top1(current, y, questions):.3f}")  # fmt: skip
    best: tuple[float, float] | None = None
    for c in args.c:
        held = np.zeros(len(y))
        for document in documents:  # leave one document out
            fit_on = groups != document
            if y[fit_on].min() == y[fit_on].max():
                continue
            w, b = _fit_listwise(x[fit_on], y[fit_on], questions[fit_on], c)
            held[~fit_on] = x[~fit_on] @ w + b
        auc, top1 = roc_auc_score(y, held), _top1(held, y, questions)
        print(f"C={c:<6} leave-one-document-out: AUC {auc:.3f}, top-1 {top1:.3f}")
        if best is None or top1 > best[1]:
            best = (c, top1)
    assert best is not None
    c, top1 = best
    if args.keep_unit:  # refit the refusal only, over the shipped unit model
        shipped = json.loads(answerer.MODEL_PATH.read_text())
        w, b = np.asarray(shipped["weights"], dtype=np.float64), float(shipped["bias"])
        c, top1 = shipped["c"], shipped["leave_one_document_out_top1"]
        kept = list(shipped["signals"])
        columns = [answerer.SIGNALS.index(n) for n in kept]
        print("kept the shipped unit model")
    else:
        w, b = _fit_listwise(x, y, questions, c)
    refusal = _fit_refusal(
        data,
        x_all,
        w,
        b,
        most_refused=args.most_refused,
        columns=columns,
        names=asked,
        floor=args.floors,
    )
    args.out.write_text(
        json.dumps(
            {
                "signals": kept,
                "weights": [round(float(v), 4) for v in w],
                "bias": round(b, 4),
                "fitted_on": f"bench/answers/dev: {int(answerable_units.sum())} units, "
                f"{len(documents)} documents"
                if not args.keep_unit
                else json.loads(answerer.MODEL_PATH.read_text())["fitted_on"],
                "c": c,
                "leave_one_document_out_top1": round(top1, 3),
                "refusal": refusal,
            },
            indent=1,
        )
        + "\n"
    )
    for name, value in sorted(zip(kept, w, strict=True), key=lambda p: -abs(p[1])):
        print(f"  {name:22} {value:+.3f}")
    print(f"wrote {args.out} (C={c})")
    if args.cross_fit is not None:
        _cross_fit(
            args.cross_fit, data, x_all, columns, kept, asked, c, args.most_refused, args.floors
        )
    return 0


def _cross_fit(
    folder: Path, data: Any, x_all: NDArray[np.float64], columns: list[int], kept: list[str],
    asked: list[str], c: float, most_refused: float, floor: Sequence[str],
) -> None:  # fmt: skip
    """One model per group of development questions (a document, or the off-topic questions
    of none), each fitted without that group: its unit model without the group's units, its
    refusal without the group's questions, the threshold the one that refuses at most
    ``most_refused`` of the answerable questions over all groups' held-out probabilities."""
    answerable_ids = answerable_questions(data)
    answerable = np.asarray([str(q) in answerable_ids for q in data["questions"]])
    x, y = x_all[answerable][:, columns], data["labels"][answerable].astype(np.int_)
    groups, questions = data["groups"][answerable], data["questions"][answerable]
    qgroups = data["question_groups"]
    fits: dict[str, tuple[Any, ...]] = {}
    held, floored = np.zeros(len(qgroups)), np.zeros(len(qgroups), dtype=bool)
    for group in np.unique(np.concatenate([np.unique(groups), np.unique(qgroups)])):
        fit_on = groups != group
        w, b = _fit_listwise(x[fit_on], y[fit_on], questions[fit_on], c)
        qfull, qy, _ = _question_matrix(data, x_all, w, b, columns)
        qx = qfull[:, [answerer.QUESTION_SIGNALS.index(n) for n in asked]]
        rw, rb = _fit(qx[qgroups != group], qy[qgroups != group], 1.0)
        floors = _floors(qfull[qgroups != group], qy[qgroups != group], floor)
        at = qgroups == group
        held[at] = 1.0 / (1.0 + np.exp(-(qx[at] @ rw + rb)))
        floored[at] = _below(qfull[at], floors)
        fits[str(group)] = (w, b, rw, rb, floors)
    qy = np.asarray([int(row[0]) for row in data["question_table"]])
    ranked = np.sort(held[qy == 1])
    threshold = float(ranked[int(np.floor(most_refused * len(ranked)))])
    refused = (held < threshold) | floored
    folder.mkdir(parents=True, exist_ok=True)
    for index, (group, (w, b, rw, rb, floors)) in enumerate(sorted(fits.items())):
        model = {
            "group": group, "signals": kept, "weights": [float(v) for v in w], "bias": b,
            "fitted_on": f"bench/answers/dev without {group}",
            "refusal": {"signals": asked, "weights": [float(v) for v in rw], "bias": rb,
                        "threshold": threshold, "floors": floors},
        }  # fmt: skip
        (folder / f"{index:02d}.json").write_text(json.dumps(model))
    print(f"wrote {len(fits)} cross-fitted models into {folder} (threshold {threshold:.3f}): "
          f"answerable refused {float(refused[qy == 1].mean()):.3f}, off-topic "
          f"refused {float(refused[qy == 0].mean()):.3f} (held out)")  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
