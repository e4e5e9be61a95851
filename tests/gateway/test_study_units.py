"""The study tools' logic on material written here: the offline quiz generator, answer
checking on the labelled set, and the syllabus outline; then the same on a real textbook
chapter (../shared), extracted and chunked by the ingest code."""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from lectern_common.embeddings import LocalEmbedder
from lectern_gateway.config import Settings
from lectern_gateway.study import grading
from lectern_gateway.study.generator import SourceChunk, changed_number, definition, generate
from lectern_gateway.study.syllabus import folded_paths, outline

DOC = uuid.uuid4()
LABELLED = Path(__file__).parent / "data" / "short_answers.jsonl"


def chunk(text: str, *path: str, page: int = 1, kind: str = "text") -> SourceChunk:
    return SourceChunk(uuid.uuid4(), DOC, "Biology", kind, text, tuple(path), page, page)


MATERIAL = [
    chunk("Mitosis is a type of cell division that produces two identical daughter cells. "
          "A full cell cycle takes about 24 hours in human cells.", "1 Cells", "1.1 Mitosis"),
    chunk("Meiosis is a type of cell division that produces four different gametes. "
          "Human gametes carry 23 chromosomes each.", "1 Cells", "1.2 Meiosis", page=2),
    chunk("Photosynthesis is a process that converts light energy into chemical energy. "
          "A leaf can hold about 500000 chloroplasts per square millimetre.",
          "2 Plants", "2.1 Photosynthesis", page=3),
    chunk("Cellular respiration is a process that releases energy from glucose in cells. "
          "One glucose molecule yields about 30 molecules of ATP.", "2 Plants",
          "2.2 Respiration", page=4),
    chunk("A gene is a segment of DNA that codes for one protein or RNA molecule. "
          "The human genome holds about 20000 genes that code for proteins.", "3 Genetics",
          page=5),
]  # fmt: skip


def test_definitions_are_found_and_pronouns_are_not_terms() -> None:
    assert definition("Mitosis is a type of cell division that produces two cells.") == (
        "Mitosis", "a type of cell division that produces two cells")  # fmt: skip
    assert definition("This is a very long sentence about something else entirely.") is None
    assert definition("The idea is the same as before in every single case.") is None


def test_a_changed_number_differs_and_keeps_its_form() -> None:
    for number in ("24", "1,000", "40%", "1938", "0.5", "0"):
        for seed in range(6):
            other = changed_number(number, seed)
            assert other != number
            assert other.endswith("%") == number.endswith("%")


def test_a_quiz_spreads_over_sections_and_cites_the_chunk_that_answers() -> None:
    questions = generate(MATERIAL, num_questions=6)
    assert len(questions) == 6
    assert len({q.section for q in questions}) >= 5
    assert {q.kind for q in questions} == {"multiple_choice", "short_answer", "true_false"}
    for q in questions:
        assert q.evidence in " ".join(q.chunk.text.split())
        if q.kind != "true_false":
            assert q.answer in q.chunk.text
        if q.kind == "multiple_choice":
            assert q.answer in q.options
            assert len(set(q.options)) == len(q.options) == 4
        if q.kind == "true_false":
            statement = q.prompt.removeprefix("True or false: ")
            assert (statement == q.evidence) == (q.answer == "true")


def test_struggle_topics_come_first_and_difficulty_sets_the_options() -> None:
    questions = generate(MATERIAL, num_questions=2, focus_topics=["Respiration"],
                         kinds=["multiple_choice"], difficulty="easy")  # fmt: skip
    assert questions[0].topic == "Respiration"
    assert all(len(q.options) == 3 for q in questions)


def test_qa_pairs_from_ingest_are_used_first() -> None:
    parent = MATERIAL[0]
    qa = SourceChunk(uuid.uuid4(), DOC, "Biology", "qa",
                     "Q: What does mitosis produce?\nA: Two identical daughter cells.",
                     (), None, None, parent_chunk_id=parent.id)  # fmt: skip
    questions = generate([*MATERIAL, qa], num_questions=1, kinds=["short_answer"],
                         focus_topics=["Mitosis"])  # fmt: skip
    assert questions[0].prompt == "What does mitosis produce?"
    assert questions[0].chunk.id == parent.id


def test_a_check_never_blanks_a_word_that_only_frames_the_statement() -> None:
    """ "It is, however, _____ that ..." tests reading, not understanding: the blank falls on
    a word the statement says, not on a connective or a hedge."""
    from lectern_gateway.study.generator import statement_check

    text = "It is, however, noteworthy that most were commenced on oestrogen relatively late."
    made = statement_check(text, chunk(text), asked="When is oestrogen started?")
    assert made is not None
    assert made.answer not in {"however", "noteworthy", "relatively"}, made.prompt


def test_material_without_facts_gives_no_questions() -> None:
    plain = chunk("Hello there, and welcome to the course.", "Intro")
    assert generate([plain], num_questions=5) == []


async def test_answer_checking_on_the_labelled_set() -> None:
    rows = [json.loads(line) for line in LABELLED.read_text().splitlines() if line.strip()]
    assert len(rows) >= 50
    assert sum(r["correct"] for r in rows) >= 20 and sum(not r["correct"] for r in rows) >= 20
    embedder = LocalEmbedder(Settings(), query_precision="float32")
    right = 0
    for row in rows:
        vectors = np.asarray(await embedder.embed_documents([row["reference"], row["answer"]]))
        similarity = float(vectors[0] @ vectors[1])
        got = grading.short_answer_is_right(
            [row["reference"]], row["answer"], question=row.get("question", ""),
            similarity=similarity,
        )  # fmt: skip
        right += got == row["correct"]
    assert right / len(rows) >= 0.9


def test_choices_compare_normalised() -> None:
    assert grading.choice_is_right("true", "True")
    assert grading.choice_is_right("Tower of Hanoi", "tower of hanoi")
    assert not grading.choice_is_right("24", "12")


def test_figure_labels_among_numbered_headings_fold_into_the_section_before() -> None:
    paths = [("2 Induction", "2.2 Examples", "2.2.2 Lines"), ("2 Induction", "2.2 Examples",
             "Region 1 split"), ("2 Induction", "2.2 Examples", "2.2.3 Exercises"),
             ("2 Induction", "2.3 Analogies", "Mojo the Monkey")]  # fmt: skip
    folded = folded_paths(paths)
    assert folded[1] == paths[0]
    assert folded[2] == paths[2]
    assert folded[3] == paths[3]  # unnumbered among unnumbered siblings: a real heading


def _rows(chunks: list[SourceChunk]) -> list[dict[str, Any]]:
    return [{"id": c.id, "section_path": list(c.section_path), "page_start": c.page_start,
             "page_end": c.page_end, "text": c.text, "topic_tags": []} for c in chunks]  # fmt: skip


def test_outline_lists_sections_with_headings_and_rolled_up_pages() -> None:
    sections = outline(_rows(MATERIAL))
    assert [s.title for s in sections] == [
        "1 Cells", "1.1 Mitosis", "1.2 Meiosis", "2 Plants", "2.1 Photosynthesis",
        "2.2 Respiration", "3 Genetics"]  # fmt: skip
    cells = sections[0]
    assert (cells.page_start, cells.page_end, cells.chunk_count) == (1, 2, 2)
    assert sections[1].overview.startswith("Mitosis is a type of cell division")


def _textbook(shared_data: Path) -> list[SourceChunk]:
    from lectern_ingest.chunking import ChunkingConfig, chunk_units
    from lectern_ingest.extract import extract

    path = shared_data / "docs" / "textbook-ch2-induction-48p.pdf"
    embedder = LocalEmbedder(Settings())
    drafts = chunk_units(extract(path, mime="application/pdf").units(),
                         config=ChunkingConfig(), count_tokens=embedder.count_tokens)  # fmt: skip
    return [SourceChunk(uuid.uuid4(), DOC, "Induction", d.kind, d.text, tuple(d.section_path),
                        d.page_start, d.page_end) for d in drafts
            if d.kind in ("text", "table")]  # fmt: skip


@pytest.mark.shared_data
def test_a_textbook_quiz_covers_five_sections_and_every_cited_chunk_holds_its_answer(
    shared_data: Path,
) -> None:
    questions = generate(_textbook(shared_data), num_questions=10)
    assert len(questions) == 10
    assert len({q.section for q in questions}) >= 5
    for q in questions:
        assert q.evidence in " ".join(q.chunk.text.split()), q
        assert q.kind == "true_false" or q.answer in " ".join(q.chunk.text.split()), q


@pytest.mark.shared_data
def test_the_textbook_syllabus_lists_its_sections_in_order_with_their_pages(
    shared_data: Path,
) -> None:
    sections = outline(_rows(_textbook(shared_data)))
    top = [(s.title, s.page_start, s.page_end) for s in sections if s.level == 2]
    assert top == [
        ("2.1 Introduction", 1, 3), ("2.2 Examples and Discussion", 4, 18),
        ("2.3 Defining Induction", 19, 28), ("2.4 Two More (Different) Examples", 29, 37),
        ("2.5 Applications", 37, 43), ("2.6 Summary", 44, 44),
        ("2.7 Chapter Exercises", 44, 47), ("2.8 Lookahead", 48, 48),
    ]  # fmt: skip
    numbered = [s.title.split()[0] for s in sections if re.match(r"\d+(?:\.\d+)+ ", s.title)]
    assert numbered == sorted(numbered, key=lambda n: [int(p) for p in n.split(".")])
    assert "Region 1 split" not in {s.title for s in sections}
