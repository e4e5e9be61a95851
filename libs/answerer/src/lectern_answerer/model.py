"""The answerer's fitted models: a logistic model of the probability that a unit states the
answer (over ``SIGNALS``), and one of the probability that the sources answer the question at
all (over ``QUESTION_SIGNALS``), with its floors; both written by ``bench/fit_answerer.py`` and
shipped beside this module (``answerer_model*.json``)."""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from lectern_answerer.signals import QUESTION_AT, QUESTION_SIGNALS, SIGNALS, SPAN_SIGNALS

if TYPE_CHECKING:
    from numpy.typing import NDArray


@dataclass(frozen=True)
class Logistic:
    """A logistic model over some columns of a signal matrix: the probability of each row."""

    weights: tuple[float, ...]
    bias: float
    #: the columns it reads, in its weights' order (None: all, in order)
    columns: tuple[int, ...] | None = None

    def __call__(self, signals: NDArray[np.float64]) -> NDArray[np.float64]:
        if not len(signals):
            return np.zeros(0)
        x = signals if self.columns is None else signals[:, list(self.columns)]
        logits = x @ np.asarray(self.weights, dtype=np.float64) + self.bias
        return np.asarray(1.0 / (1.0 + np.exp(-logits)), dtype=np.float64)

    @classmethod
    def over(
        cls, names: Sequence[str], weights: Sequence[float], bias: float, known: Sequence[str]
    ) -> Logistic:
        """A model fitted on the signals ``names``, each one of ``known`` (its columns)."""
        unknown = [n for n in names if n not in known]
        if unknown or len(names) != len(weights):
            raise ValueError(f"fitted on signals this answerer does not make: {unknown}")
        at = tuple(list(known).index(n) for n in names)
        return cls(tuple(float(w) for w in weights), float(bias), at)


@dataclass(frozen=True)
class AnswerModel:
    """The answerer's two fitted models: the probability that a unit states the answer
    (over some of ``SIGNALS``), and the probability that the sources answer the question at
    all (over some of ``QUESTION_SIGNALS``), which must reach ``answer_threshold`` for an
    answer. ``reads`` says whether it was fitted with the reader's signals."""

    unit: Logistic
    refusal: Logistic | None = None
    answer_threshold: float = 0.5
    reads: bool = False
    #: fitted with the answer spans the re-ranker's reader marked (``answer_span``, ...)
    spans: bool = False
    #: (column of ``QUESTION_SIGNALS``, least value) pairs an answer needs besides the
    #: refusal's probability: no answerable development question came lower on that signal
    floors: tuple[tuple[int, float], ...] = ()

    def score(self, signals: NDArray[np.float64]) -> NDArray[np.float64]:
        """The probability of every unit (row of ``signals``)."""
        return self.unit(signals)

    def answers(self, signals: NDArray[np.float64]) -> bool:
        """Whether the question's signals say the sources answer it."""
        if below_floors(signals, self.floors):
            return False
        if self.refusal is None:
            return True
        return float(self.refusal(signals[None, :])[0]) >= self.answer_threshold

    @classmethod
    def load(cls, path: Path) -> AnswerModel:
        """Read a model written by ``bench/fit_answerer.py``; its signals must be ours."""
        data = json.loads(path.read_text())
        try:
            unit = Logistic.over(data["signals"], data["weights"], data["bias"], SIGNALS)
            refusal = data.get("refusal")
            spans = bool(set(data["signals"]) & set(SPAN_SIGNALS))
            if refusal is None:
                return cls(unit, reads="reader" in data["signals"], spans=spans)
            judge = Logistic.over(
                refusal["signals"], refusal["weights"], refusal["bias"], QUESTION_SIGNALS
            )
            floors = tuple(
                (QUESTION_SIGNALS.index(name), float(value))
                for name, value in refusal.get("floors", {}).items()
            )
        except ValueError as exc:
            raise ValueError(f"{path}: {exc}") from None
        reads = "reader" in data["signals"] or "best_reader" in refusal["signals"]
        spans = spans or "best_margin" in refusal["signals"]
        return cls(unit, judge, float(refusal["threshold"]), reads, spans, floors)


def has_signal(signals: NDArray[np.float64], at: int) -> bool:
    """Whether a question's signals (``QUESTION_SIGNALS``) hold a value in column ``at``: the
    re-ranker's best score has none when the sources bear no score."""
    return not (at == QUESTION_AT["rerank_top"] and signals[QUESTION_AT["rerank_missing"]])


def below_floors(signals: NDArray[np.float64], floors: Iterable[tuple[int, float]]) -> bool:
    """Whether a question's signals fall below one of ``floors`` ((column, least value)
    pairs) in a column they hold a value in."""
    return any(has_signal(signals, at) and signals[at] < floor for at, floor in floors)


#: the model fitted with the reader's signals, the one for an answerer without a reader, and
#: the one for sources the re-ranker's reader marked answer spans in (the answerer reads
#: nothing itself: one read of each candidate, in the re-ranker)
MODEL_PATH = Path(__file__).with_name("answerer_model.json")
NO_READER_MODEL_PATH = Path(__file__).with_name("answerer_model_no_reader.json")
SPANS_MODEL_PATH = Path(__file__).with_name("answerer_model_spans.json")
#: the one for an answerer whose own reader has a span head (its units' span margins beside
#: their logits), when one is shipped
READ_SPANS_MODEL_PATH = Path(__file__).with_name("answerer_model_read_spans.json")


@functools.cache
def answer_model(reads: bool = True, spans: bool = False) -> AnswerModel:
    """The fitted model shipped with the package: for an answerer whose reader reads spans
    (``reads`` and ``spans``, when that model is shipped; else the reader's model, which
    weighs no span signal), for sources with the re-ranker's answer spans (``spans``, when
    that model is shipped), else for an answerer with or without a reader of its own."""
    if reads and spans:
        found = READ_SPANS_MODEL_PATH if READ_SPANS_MODEL_PATH.is_file() else MODEL_PATH
        return AnswerModel.load(found)
    if spans and SPANS_MODEL_PATH.is_file():
        return AnswerModel.load(SPANS_MODEL_PATH)
    return AnswerModel.load(MODEL_PATH if reads else NO_READER_MODEL_PATH)
