"""The span benchmark's and the margin fit's arithmetic (bench/bench_spans.py,
bench/fit_margin.py): SQuAD's F1, ROUGE-L, and the margin that refuses at most a share of
the answerable questions, with its figures."""

from __future__ import annotations

import math
from collections.abc import Callable
from types import ModuleType

import pytest


@pytest.fixture(scope="module")
def bench(bench_import: Callable[[str], ModuleType]) -> tuple[ModuleType, ModuleType]:
    return bench_import("bench_spans"), bench_import("fit_margin")


def test_squad_f1_and_rouge_l(bench: tuple[ModuleType, ModuleType]) -> None:
    spans, _ = bench
    assert spans.normalise("The Eiffel Tower!") == ["eiffel", "tower"]
    assert spans.f1("the Eiffel Tower", "Eiffel Tower") == 1.0
    assert spans.f1("Tower of London", "Eiffel Tower") == pytest.approx(0.4)
    assert spans.f1("", "x") == 0.0
    # the longest common subsequence: "fox jumped" of 3 and 4 words
    assert spans.rouge_l("a fox quickly jumped", "fox jumped high over") == pytest.approx(
        2 * (2 / 3) * (2 / 4) / (2 / 3 + 2 / 4)
    )
    assert spans.rouge_l("nothing alike", "fox") == 0.0


def test_the_benchmark_judges_at_a_margin_even_when_chat_refuses_on_none(
    bench: tuple[ModuleType, ModuleType],
) -> None:
    """Chat's margin refusal is off by default (``ANSWER_MARGIN`` None): has-answer and
    no-answer accuracy are then judged at SQuAD 2.0's own 0, not at None (which crashed
    ``make bench-reader``)."""
    spans, _ = bench
    from lectern_gateway.chat.decision import ANSWER_MARGIN

    assert (0.0 if ANSWER_MARGIN is None else ANSWER_MARGIN) == spans.JUDGED_MARGIN
    assert isinstance(spans.JUDGED_MARGIN, float)


def test_the_margin_refuses_at_most_the_share(bench: tuple[ModuleType, ModuleType]) -> None:
    _, margin = bench
    answerable = [5.0, -1.0, 3.0, 0.5, 2.0, 4.0, 6.0, 7.0, 8.0, 9.0]
    assert margin.fit(answerable, 0.0) == -1.0  # refuses none (below the lowest)
    assert margin.fit(answerable, 0.1) == 0.5  # refuses the lowest one
    assert margin.fit([], 0.1) == -math.inf
    rows = [
        {"margin": m, "answerable": True, "group": "a", "near": False, "gap": False}
        for m in answerable
    ] + [
        {"margin": -3.0, "answerable": False, "group": "a", "near": True, "gap": False},
        {"margin": 4.0, "answerable": False, "group": "b", "near": False, "gap": False},
        {"margin": 9.0, "answerable": False, "group": "b", "near": False, "gap": True},
    ]
    got = margin.figures(rows, {"*": 0.5})
    assert got == {"answerable": 10, "answerable_refused": 0.1, "offtopic_refused": 0.667,
                   "near_miss_refused": 1.0}  # fmt: skip
    assert margin.best_margin([{"answer": {"score": 3, "null_score": 5}}, {}]) == -2.0
    assert margin.best_margin([{}]) == -math.inf
