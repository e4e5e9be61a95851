"""The answer span the re-ranker's reader marked reaches the client: on the sources event, on
a citation whose sentence says it, and in the source viewer as an ``answer`` highlight."""

from __future__ import annotations

import uuid

from lectern_common.events import AnswerSpan
from lectern_gateway.chat.citations import CheckedCitation, CitedSentence
from lectern_gateway.chat.service import said_in, textbook_citation
from lectern_gateway.chat.sse import Source
from lectern_gateway.documents.chunks import highlights_for

CHUNK = "The Bastille was stormed on 14 July 1789. Crowds gathered at dawn."
AT = CHUNK.index("14 July 1789")
SPAN = AnswerSpan(start=AT, end=AT + len("14 July 1789"), score=7.0, null_score=1.0)


def source(answer: AnswerSpan | None = SPAN) -> Source:
    return Source(
        label="T1", chunk_id=uuid.uuid4(), document_id=uuid.uuid4(), title="France",
        answer=answer,
    )  # fmt: skip


def checked(text: str) -> CheckedCitation:
    return CheckedCitation("T1", CitedSentence(0, len(text), text, ("T1",)), True, 0.9, True)


def test_said_in_ignores_case_spacing_and_punctuation() -> None:
    assert said_in("14 July 1789", "It fell on 14 July, 1789 [T1].")
    assert not said_in("14 July 1789", "It fell in July [T1].")
    assert not said_in("", "anything")


def test_a_citation_carries_the_answer_its_sentence_says() -> None:
    by_label = {"T1": source()}
    texts = {"T1": CHUNK}
    said = textbook_citation(checked("The Bastille fell on 14 July 1789 [T1]."), by_label, texts)
    assert said.answer == SPAN
    other = textbook_citation(checked("Crowds gathered at dawn [T1]."), by_label, texts)
    assert other.answer is None
    assert (
        textbook_citation(checked("On 14 July 1789 [T1]."), {"T1": source(None)}, texts).answer
        is None
    )


def test_the_viewer_marks_the_answer_inside_the_cited_sentence() -> None:
    chunk_id = uuid.uuid4()
    citation = {
        "chunk_id": str(chunk_id), "label": "T1", "text": "It was stormed on 14 July 1789.",
        "answer": SPAN.model_dump(),
    }  # fmt: skip
    marks = highlights_for(chunk_id, CHUNK, [citation])
    assert [m.kind for m in marks] == ["sentence", "answer"]
    sentence, answer = marks
    assert answer.text == "14 July 1789"
    assert sentence.start <= answer.start < answer.end <= sentence.end
    # a stale or foreign span is not marked
    broken = {**citation, "answer": {"start": 0, "end": 10_000}}
    assert [m.kind for m in highlights_for(chunk_id, CHUNK, [broken])] == ["sentence"]


TABLE = (
    "Table 2 Recommended adult doses\n"
    "Drug | Dose | Route\n"
    "Aspirin | 75 mg | oral\n"
    "Heparin | 5000 units | injection"
)


def test_a_cited_table_row_marks_the_cell_the_question_asks_for() -> None:
    """The offline answer quotes a row as header: cell pairs after its caption; the citation
    carries the cell under the header the question names, in the chunk's own text."""
    row = "Table 2 Recommended adult doses — Drug: Heparin; Dose: 5000 units; Route: injection"
    citation = textbook_citation(
        checked(f"{row} [T1]."), {"T1": source(None)}, {"T1": TABLE},
        question="What dose of heparin is given?",
    )  # fmt: skip
    assert citation.cell is not None
    assert TABLE[citation.cell.start : citation.cell.end] == "5000 units"
    assert citation.cell.header == "Dose"
    # without the question, or for prose, no cell
    unasked = textbook_citation(checked(f"{row} [T1]."), {"T1": source(None)}, {"T1": TABLE})
    assert unasked.cell is None
    prose = textbook_citation(
        checked("The Bastille was stormed [T1]."), {"T1": source(None)}, {"T1": CHUNK},
        question="What dose of heparin is given?",
    )  # fmt: skip
    assert prose.cell is None


def test_the_viewer_marks_the_cell_inside_the_cited_row() -> None:
    chunk_id = uuid.uuid4()
    at = TABLE.index("5000 units")
    citation = {
        "chunk_id": str(chunk_id), "label": "T1",
        "text": "Drug: Heparin; Dose: 5000 units; Route: injection [T1].",
        "cell": {"start": at, "end": at + len("5000 units"), "header": "Dose"},
    }  # fmt: skip
    marks = highlights_for(chunk_id, TABLE, [citation])
    assert [m.kind for m in marks] == ["sentence", "cell"]
    row, cell = marks
    assert cell.text == "5000 units"
    assert row.start <= cell.start < cell.end <= row.end
