"""The short-answer checker: number words, the rules, the fitted model and its agreement with
the labelled sets (``bench/fit_grading.py`` fits on ``short_answers_fit.jsonl`` only; the
check part, other subjects and the demo course, is held out)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from lectern_common.embeddings import LocalEmbedder
from lectern_gateway.config import Settings
from lectern_gateway.study import grading

DATA = Path(__file__).parent / "data"
#: agreement with the labels measured by ``bench/fit_grading.py`` (context fit) when the
#: model was fitted; a refit that loses more than ``MARGIN`` fails
CHECK_AGREEMENT = 0.929
FIT_AGREEMENT = 0.901
MARGIN = 0.02
#: the demo quiz's right answers the rules-and-cosine checker rejected
PROBES = [("46", "forty-six"), ("97", "ninety-seven"), ("cancer", "a malignant tumour"),
          ("limiting factor", "a factor that limits the rate")]  # fmt: skip


def _rows(name: str) -> list[dict[str, Any]]:
    path = DATA / f"{name}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def embedder() -> LocalEmbedder:
    return LocalEmbedder(Settings(), query_precision="float32")


async def _verdicts(embedder: LocalEmbedder, rows: Sequence[dict[str, Any]]) -> list[bool]:
    """The checker's verdicts as the gateway reaches them, with the embedder's cosines."""
    items = [(r["reference"], r["answer"], r["question"]) for r in rows]
    found = await grading.embed_similarities(embedder, items)
    return [
        grading.short_answer_is_right(
            [r["reference"]], r["answer"], question=r["question"], evidence=r["evidence"],
            similarities=s,
        )
        for r, s in zip(rows, found, strict=True)
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("phrase", "value"),
    [
        ("forty-six", 46), ("ninety seven", 97), ("two hundred and five", 205), ("a dozen", 12),
        ("half a dozen", 6), ("twelve dozen", 144), ("three point five", 3.5),
        ("three point one four", 3.14), ("two and a half", 2.5), ("third", 3), ("3rd", 3),
        ("twenty-first", 21), ("fourteenth", 14), ("zero", 0), ("a hundred and eighteen", 118),
        ("one thousand two hundred", 1200), ("three hundred thousand", 300000),
        ("300 thousand", 300000), ("1.5 million", 1500000), ("nineteen eighty-nine", 1989),
        ("sixteen eighty seven", 1687), ("quarante-six", 46), ("quatre-vingt-dix-sept", 97),
        ("soixante et onze", 71), ("trois cent soixante-cinq", 365), ("vingt et un", 21),
        ("sechsundvierzig", 46), ("dreißig", 30), ("fünf", 5), ("cuarenta y seis", 46),
        ("veintiséis", 26), ("1,000", 1000), ("300 000", 300000), ("2,5", 2.5), ("3.50", 3.5),
    ],
)  # fmt: skip
def test_number_words_are_read_as_numbers(phrase: str, value: float) -> None:
    assert grading.number_value(phrase) == value


def test_texts_that_are_no_single_number_give_none_and_their_numbers_stay_apart() -> None:
    assert grading.number_value("mitosis") is None
    assert grading.number_value("two three") is None
    reading = grading.read("forty six chromosomes in 23 pairs, ninety seven per cent")
    assert reading.text == "46 chromosomes in 23 pairs 97 %"
    assert reading.numbers == {"46", "23", "97"}
    assert grading.read("C6H12O6 and O2").numbers == frozenset()


def test_one_and_second_count_only_when_the_other_side_states_the_number() -> None:
    reading = grading.read("each case implies the next one")
    assert reading.numbers == frozenset() and reading.maybe == {"1"}
    assert grading.rule_verdict("1", "one") is True
    assert grading.rule_verdict("5", "5 metres per second squared") is True


@pytest.mark.parametrize(
    ("reference", "answer", "right"),
    [
        ("46", "forty-six", True), ("46", "46 chromosomes", True), ("46", "47", False),
        ("46", "46 or 47", False), ("97", "ninety seven per cent", True), ("97", "79", False),
        ("fourteenth", "the 14th", True), ("fourteenth", "15th", False), ("1918", "1914", False),
        ("cancer", "not cancer", False), ("unreactive", "not reactive", True),
        ("central processing unit", "CPU", True), ("RAM", "random access memory", True),
        ("mitosis", "Mitosis.", True),
    ],
)  # fmt: skip
def test_the_rules_decide_numbers_negations_and_acronyms(
    reference: str, answer: str, right: bool
) -> None:
    assert grading.rule_verdict(reference, answer) is right


def test_numbers_the_question_shows_may_be_repeated_but_do_not_answer() -> None:
    question = (
        "Fill in the blank: Each daughter cell has the same number of chromosomes as the "
        "parent: in humans, _____ chromosomes in 23 pairs."
    )
    assert grading.rule_verdict("46", "46 chromosomes in 23 pairs", question=question) is True
    assert grading.rule_verdict("46", "23", question=question) is False


@pytest.mark.parametrize(
    ("reference", "answer", "hedge"),
    [
        ("approach", "require and approach", True), ("mitosis", "mitosis or meiosis", True),
        ("limiting factor", "limiting factor, carbon dioxide", True),
        ("mitosis", "mitosis, I think", False), ("red and blue", "blue and red", False),
        ("7", "seven regions, 7", False), ("2.5", "two and a half", False),
        ("180", "one hundred and eighty", False),
        ("the cell wall", "the cell wall, not the membrane", False),
        ("Newton", "Isaac Newton and his laws of motion in 1687", False),
    ],
)  # fmt: skip
def test_a_hedge_names_the_answer_beside_another_and_is_not_right(
    reference: str, answer: str, hedge: bool
) -> None:
    """Two candidates offered together are no answer (a teacher marks it partly right)."""
    assert grading.hedged(reference, answer) is hedge
    if hedge:
        assert grading.rule_verdict(reference, answer) is False


def test_a_word_of_the_question_may_be_the_other_candidate() -> None:
    """A hedge may borrow its second candidate from the cloze sentence; the words right
    beside the blank only say where the answer goes."""
    question = (
        "Fill in the blank: TableFormer increases the training time, which would _____ a "
        "scoped approach for very long tables."
    )
    assert grading.hedged("require", "require and approach", question=question)
    assert grading.hedged("require", "tables or require", question=question)
    assert not grading.hedged("require", "require, a scoped approach", question=question)
    assert not grading.hedged("require", "would require", question=question)
    assert grading.rule_verdict("require", "require and approach", question=question) is False


def test_a_contrast_is_no_negation() -> None:
    assert grading.rule_verdict("the cell wall", "the cell wall, not the membrane") is None


def test_the_shipped_model_has_this_checkers_signals() -> None:
    model = grading.GradingModel.load(grading.MODEL_PATH)
    assert set(model.fits) == set(grading.MODEL_SIGNALS)
    assert 0 < model.slip_rate < 0.5 and 0.5 < model.match_cosine < 1


def test_the_labelled_sets_are_split_by_subject_and_large_enough() -> None:
    fit, check = _rows("short_answers_fit"), _rows("short_answers_check")
    assert len(fit) + len(check) >= 250
    fitted_subjects = {r["subject"] for r in fit}
    assert all(r["source"] == "written" for r in fit)
    # held out: the demo course's lessons, and subjects the fit part has none of
    assert all(r["source"].startswith("demo:") or r["subject"] not in fitted_subjects
               for r in check)  # fmt: skip
    for rows in (fit, check):
        assert 0.4 < sum(r["correct"] for r in rows) / len(rows) < 0.6
        assert {"number_word", "paraphrase", "spelling", "related", "negation",
                "restatement", "partial"} <= {r["case"] for r in rows}  # fmt: skip


async def test_the_demo_quiz_probes_are_right(embedder: LocalEmbedder) -> None:
    check = {(r["reference"], r["answer"]): r for r in _rows("short_answers_check")}
    rows = [check[probe] for probe in PROBES]
    assert await _verdicts(embedder, rows) == [True] * len(PROBES)


async def test_wrong_but_related_answers_stay_wrong(embedder: LocalEmbedder) -> None:
    mitosis = "Fill in the blank: _____ is a type of cell division that makes two identical cells."
    glucose = "Fill in the blank: With the energy of sunlight a plant builds _____, a sugar."
    cancer = (
        "Fill in the blank: The uncontrolled mass of cells that results is a tumour, and a "
        "tumour that invades other tissues is called _____."
    )
    limiting = "Fill in the blank: Whichever factor is in shortest supply is called the _____."
    wrong = [
        ("mitosis", "meiosis", mitosis), ("mitosis", "not mitosis", mitosis),
        ("mitosis", "cell division", mitosis), ("glucose", "oxygen", glucose),
        ("glucose", "sugar", glucose), ("cancer", "tumour", cancer),
        ("cancer", "a tumour that invades other tissues", cancer), ("cancer", "not cancer", cancer),
        ("limiting factor", "shortest supply", limiting),
        ("limiting factor", "light intensity", limiting),
    ]  # fmt: skip
    rows = [
        {"reference": r, "answer": a, "question": q, "evidence": q.replace("_____", r)}
        for r, a, q in wrong
    ]
    assert await _verdicts(embedder, rows) == [False] * len(rows)
    # ... and so without the question's cosines, or without an embedder
    for reference, answer, question in wrong:
        assert not grading.short_answer_is_right([reference], answer, question=question)
        assert not grading.short_answer_is_right([reference], answer, similarity=0.6)
    assert grading.short_answer_is_right(["mitosis"], "mitosys", question=mitosis)


async def test_agreement_on_the_held_out_check_part(embedder: LocalEmbedder) -> None:
    rows = _rows("short_answers_check")
    verdicts = await _verdicts(embedder, rows)
    agreement = sum(v == r["correct"] for v, r in zip(verdicts, rows, strict=True)) / len(rows)
    assert agreement >= CHECK_AGREEMENT - MARGIN


async def test_agreement_on_the_fit_part(embedder: LocalEmbedder) -> None:
    rows = _rows("short_answers_fit")
    verdicts = await _verdicts(embedder, rows)
    agreement = sum(v == r["correct"] for v, r in zip(verdicts, rows, strict=True)) / len(rows)
    assert agreement >= FIT_AGREEMENT - MARGIN
