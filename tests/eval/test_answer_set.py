"""The answer benchmark's file format and scoring (pure functions, no server)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from lectern_eval.answer_set import (
    AnswerQuestion,
    DatasetError,
    QuestionResult,
    SourceSeen,
    answer_lead,
    conversations,
    fact_recall,
    frozen_hash,
    holds,
    load_offtopic,
    load_questions,
    load_set,
    on_gold,
    summarise,
)

QUESTION = {
    "id": "t-01", "document": "turner.pdf", "question": "How common is Turner syndrome?",
    "kind": "number", "pages": [2], "evidence": "affects ∼1/2500 live female births",
    "facts": [["1/2500", "1 in 2500"]], "follow_up_to": None,
}  # fmt: skip


def write(path: Path, rows: Sequence[object]) -> Path:
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def test_facts_match_whatever_the_case_spacing_dashes_and_citations() -> None:
    assert holds("It affects ∼1/2500 [T1] births.", ["1/2500"])
    assert holds("a 45, X karyotype", ["45,X"])
    assert holds("Horseshoe  Kidneys and malrotations", ["horseshoe kidneys"])
    assert holds("ages 12–15", ["12-15"])
    assert not holds("1/25000", ["1/2500 births"])
    assert fact_recall("Prophase then metaphase.", [["prophase"], ["metaphase"], ["anaphase"]]) == (
        pytest.approx(2 / 3)
    )


def test_the_gold_passage_is_the_gold_document_on_a_gold_page_or_holding_the_evidence() -> None:
    question = AnswerQuestion.model_validate(QUESTION)
    on_page = SourceSeen("T1", "c1", "d1", 1, 2, None, "text")
    assert on_gold(on_page, question, "d1")
    assert not on_gold(on_page, question, "d2")
    off_page = SourceSeen("T2", "c2", "d1", 3, 3, None, "text")
    assert not on_gold(off_page, question, "d1")
    unpaged = question.model_copy(update={"pages": None})
    holding = SourceSeen(
        "T3", "c3", "d1", None, None, None, "It affects ∼1/2500 live female births"
    )
    assert on_gold(holding, unpaged, "d1")


def test_loading_names_the_line_at_fault(tmp_path: Path) -> None:
    good = write(
        tmp_path / "q.jsonl", [QUESTION, {**QUESTION, "id": "t-02", "follow_up_to": "t-01"}]
    )
    questions = load_questions(good)
    assert [q.id for q in questions] == ["t-01", "t-02"]
    assert [[q.id for q in c] for c in conversations(questions)] == [["t-01", "t-02"]]
    cases = {
        "repeats line 1": [QUESTION, QUESTION],
        "must name a question on an earlier line": [{**QUESTION, "follow_up_to": "nope"}],
        "facts": [{**QUESTION, "facts": []}],
        "give the gold pages": [{**QUESTION, "pages": None, "evidence": None}],
    }
    for expected, rows in cases.items():
        with pytest.raises(DatasetError, match=expected):
            load_questions(write(tmp_path / "bad.jsonl", rows))
    (tmp_path / "broken.jsonl").write_text('{"id": 1\n')
    with pytest.raises(DatasetError, match=r"broken.jsonl:1: not JSON"):
        load_questions(tmp_path / "broken.jsonl")
    plain = tmp_path / "off.txt"
    plain.write_text("Who painted the Mona Lisa?\n\nWhat is the capital of Peru?\n")
    assert [q.question for q in load_offtopic(plain)] == [
        "Who painted the Mona Lisa?",
        "What is the capital of Peru?",
    ]


def test_summary_pools_citations_and_counts_refusals() -> None:
    answered = QuestionResult("a", "d", "fact", "q", context_hit=True, fact_recall=1.0, cited=2,
                              cited_precise=2, band="high")  # fmt: skip
    partial = QuestionResult("b", "d", "fact", "q", context_hit=False, fact_recall=0.5, cited=2,
                             cited_precise=0, band="medium")  # fmt: skip
    refused = QuestionResult("c", "d", "fact", "q", refused=True, band="gap")
    off = [QuestionResult("o", "", "offtopic", "q", refused=True, band="gap")]
    summary = summarise([answered, partial, refused], off)
    assert summary.context_recall == pytest.approx(1 / 3)
    assert summary.fact_recall == pytest.approx(0.5)
    assert summary.citation_precision == pytest.approx(0.5)
    assert summary.answerable_refused == pytest.approx(1 / 3)
    assert summary.offtopic_refused == 1.0
    assert summary.bands == {"high": 1, "medium": 1, "gap": 1}


ROOT = Path(__file__).resolve().parents[2] / "bench" / "answers"


def test_the_repository_question_set_is_split_by_document_and_the_test_split_is_frozen() -> None:
    """The answer set: 300+ questions over 30+ documents, dev and test split by document
    (test at least 40% of the documents), kinds in the shares the set promises, 40+ off-topic
    questions of which 20+ share a word with the material; the test split's bytes match the
    hash recorded when it was committed, before any change was made for it."""
    splits = {s.name: s for s in load_set(ROOT)}
    dev, test = splits["dev"], splits["test"]
    questions = [*dev.questions, *test.questions]
    documents = dev.documents | test.documents
    assert len(questions) >= 300 and len(documents) >= 30
    assert not dev.documents & test.documents
    assert len(test.documents) >= 0.4 * len(documents)
    share = {k: sum(q.kind == k for q in questions) / len(questions) for k in KIND_SHARES}
    assert all(share[k] >= least for k, least in KIND_SHARES.items()), share
    offtopic = [*dev.offtopic, *test.offtopic]
    assert len(offtopic) >= 40 and sum(1 for o in offtopic if o.document) >= 20
    assert all(o.document in documents for o in offtopic if o.document)
    assert frozen_hash(ROOT) == test.sha256, (
        "bench/answers/test changed: the test split is frozen (see bench/answers/README.md)"
    )


def test_a_document_in_two_splits_is_refused(tmp_path: Path) -> None:
    for name in ("dev", "test"):
        (tmp_path / name).mkdir()
        write(tmp_path / name / "questions.jsonl", [{**QUESTION, "id": f"{name}-1"}])
    with pytest.raises(DatasetError, match="split is by document"):
        load_set(tmp_path)


KIND_SHARES = {"table": 0.2, "definition": 0.15, "why_how": 0.15, "number": 0.15}


@pytest.mark.shared_data
@pytest.mark.slow
def test_every_key_fact_is_on_its_gold_pages_as_the_product_extracts_them(
    shared_data: Path,
) -> None:
    """The question set cannot ask for what the documents do not say: each fact group occurs
    on the gold pages of the text ingest extracts (for unpaged formats, the evidence too)."""
    from lectern_testing.shared_reads import shared_read

    questions = [q for split in load_set(ROOT) for q in split.questions]
    problems: list[str] = []
    for document in sorted({q.document for q in questions}):
        path = shared_data / document
        assert path.is_file(), f"{document} is not in {shared_data}"
        pages: dict[int | None, str] = {}
        asked = [q for q in questions if q.document == document]
        # paged questions only: the pages past the last gold page are not read
        last = (
            max(p for q in asked for p in (q.pages or [])) if all(q.pages for q in asked) else None
        )
        # read as the other shared-document tests read it, once for all of them
        for unit in shared_read(path).units:
            key = unit.page if unit.page is not None else unit.slide
            if last is not None and key is not None and key > last:
                break
            text = " ".join(" ".join(filter(None, (b.caption, b.text))) for b in unit.blocks)
            pages[key] = pages.get(key, "") + " " + text  # a table's caption is in its chunks
        for q in asked:
            text = (
                " ".join(pages.get(p, "") for p in q.pages) if q.pages else " ".join(pages.values())
            )
            problems += [f"{q.id}: {group}" for group in q.facts if not holds(text, group)]
            # the evidence locates the passage where there are no pages (HTML, DOCX); a
            # table's cells may be set apart by " | " or by spaces, as extraction improves
            if not q.pages and q.evidence and not holds(_cells(text), [_cells(q.evidence)]):
                problems.append(f"{q.id}: evidence {q.evidence[:40]!r}")
    assert problems == []


def _cells(text: str) -> str:
    return text.replace("|", " ")


def test_an_answers_lead_is_its_text_up_to_its_first_citation() -> None:
    assert answer_lead("The dose is 5 mg [T1]. It is oral [T1].") == "The dose is 5 mg [T1]."
    assert answer_lead("Stages [T1, T2]:\n- Prophase [T1].") == "Stages [T1, T2]:"
    assert answer_lead("Nothing cited here.") == "Nothing cited here."
