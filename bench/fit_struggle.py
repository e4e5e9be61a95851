"""Fit the memory service's struggle classifier on labelled student messages.

The classifier (``lectern_memory.struggle``) reads a message as confusion, a learning
preference, a plain question or other, from the packaged MiniLM embedding and hashed
character n-grams. It is fitted on ``bench/memory/messages/fit.jsonl`` only: the L2 penalty
and the confusion and preference thresholds are chosen by 5-fold cross-validation there;
``check.jsonl`` (written apart, other subjects and phrasings) is scored once, with the
model fitted on the whole fit part, and reported beside the cross-validated figures. The
model is written to ``services/memory/src/lectern_memory/struggle_model.json``.

    .venv/bin/python bench/fit_struggle.py
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from lectern_common.embeddings import LocalEmbedder
from lectern_memory import struggle

HERE = Path(__file__).resolve().parent
MESSAGES = HERE / "memory" / "messages"
OUT = HERE.parent / "services/memory/src/lectern_memory/struggle_model.json"
CONFUSION = struggle.LABELS.index("confusion")
PREFERENCE = struggle.LABELS.index("preference")


def load(path: Path) -> tuple[list[str], NDArray[np.int_]]:
    rows = [json.loads(line) for line in path.read_text("utf-8").splitlines() if line.strip()]
    return [r["text"] for r in rows], np.array([struggle.LABELS.index(r["label"]) for r in rows])


def fit(x: NDArray[np.float64], y: NDArray[np.int_], c: float) -> struggle.StruggleModel:
    """Multinomial logistic regression, L2 penalty 1/c on the weights (not the biases)."""
    from scipy.optimize import minimize  # type: ignore[import-untyped]

    n, d = x.shape
    k = len(struggle.LABELS)
    onehot = np.eye(k)[y]

    def loss(theta: NDArray[np.float64]) -> tuple[float, NDArray[np.float64]]:
        w, b = theta[: d * k].reshape(d, k), theta[d * k :]
        logits = x @ w + b
        logits -= logits.max(axis=1, keepdims=True)
        p = np.exp(logits)
        p /= p.sum(axis=1, keepdims=True)
        value = -np.sum(onehot * np.log(p + 1e-12)) / n + np.sum(w * w) / (2 * c * n)
        grad = p - onehot
        gw = x.T @ grad / n + w / (c * n)
        gb = grad.sum(axis=0) / n
        return float(value), np.concatenate([gw.ravel(), gb])

    result = minimize(loss, np.zeros(d * k + k), jac=True, method="L-BFGS-B",
                      options={"maxiter": 500})  # fmt: skip
    w, b = result.x[: d * k].reshape(d, k), result.x[d * k :]
    return struggle.StruggleModel(weights=w, bias=b)


def folds(y: NDArray[np.int_], k: int = 5) -> list[NDArray[np.int_]]:
    order = np.random.default_rng(7).permutation(len(y))
    return [order[i::k] for i in range(k)]


def cross_validated(x: NDArray[np.float64], y: NDArray[np.int_], c: float) -> NDArray[np.float64]:
    probs = np.zeros((len(y), len(struggle.LABELS)))
    for held in folds(y):
        train = np.setdiff1d(np.arange(len(y)), held)
        probs[held] = fit(x[train], y[train], c).probabilities(x[held])
    return probs


def binary(scores: NDArray[np.float64], truth: NDArray[np.bool_], at: float) -> dict[str, float]:
    said = scores >= at
    tp = float(np.sum(said & truth))
    precision = tp / max(1.0, float(np.sum(said)))
    recall = tp / max(1.0, float(np.sum(truth)))
    f1 = 2 * precision * recall / max(1e-9, precision + recall)
    return {"precision": round(precision, 3), "recall": round(recall, 3), "f1": round(f1, 3)}


def best_threshold(scores: NDArray[np.float64], truth: NDArray[np.bool_]) -> float:
    """The cut-off of the best F1 (a missed struggle and a false one cost alike)."""
    grid = np.round(np.arange(0.2, 0.81, 0.05), 2)
    return float(max(grid, key=lambda t: (binary(scores, truth, t)["f1"], -abs(t - 0.5))))


def report(
    name: str, probs: NDArray[np.float64], y: NDArray[np.int_], model: Any
) -> dict[str, Any]:
    accuracy = float(np.mean(probs.argmax(axis=1) == y))
    out = {
        "accuracy": round(accuracy, 3),
        "confusion": binary(probs[:, CONFUSION], y == CONFUSION, model.confusion_threshold),
        "preference": binary(probs[:, PREFERENCE], y == PREFERENCE, model.preference_threshold),
    }
    print(f"{name:<28} accuracy {out['accuracy']:.3f}  confusion {out['confusion']}  "
          f"preference {out['preference']}")  # fmt: skip
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=Path, default=MESSAGES)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    fit_texts, fit_y = load(args.messages / "fit.jsonl")
    check_texts, check_y = load(args.messages / "check.jsonl")
    embedder = LocalEmbedder(query_precision="float32", document_precision="float32")
    fit_x = struggle.features(embedder.embed_documents_sync(fit_texts), fit_texts)
    check_x = struggle.features(embedder.embed_documents_sync(check_texts), check_texts)
    print(f"fit: {len(fit_y)} messages, check: {len(check_y)} (labels {struggle.LABELS})")
    best: tuple[float, float, NDArray[np.float64]] | None = None
    for c in (1.0, 3.0, 10.0, 30.0, 100.0, 300.0, 1000.0):
        probs = cross_validated(fit_x, fit_y, c)
        loss = float(-np.mean(np.log(probs[np.arange(len(fit_y)), fit_y] + 1e-12)))
        print(f"  c={c:<6} cross-validated log loss {loss:.3f}")
        if best is None or loss < best[0]:
            best = (loss, c, probs)
    assert best is not None
    _, c, cv = best
    model = fit(fit_x, fit_y, c)
    model = struggle.StruggleModel(
        weights=model.weights, bias=model.bias,
        confusion_threshold=best_threshold(cv[:, CONFUSION], fit_y == CONFUSION),
        preference_threshold=best_threshold(cv[:, PREFERENCE], fit_y == PREFERENCE),
    )  # fmt: skip
    print(f"chosen: c={c}, confusion at {model.confusion_threshold}, "
          f"preference at {model.preference_threshold}")  # fmt: skip
    figures = {
        "fit_cross_validated": report("fit (5-fold cross-validated)", cv, fit_y, model),
        "check": report("check (held out)", model.probabilities(check_x), check_y, model),
    }
    payload = model.to_json(c=c, fitted_on=len(fit_y), figures=figures)
    args.out.write_text(json.dumps(payload, separators=(",", ":")) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
