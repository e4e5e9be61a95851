"""`lectern eval-answers` end to end: the embedded stack started as processes, a small
course PDF built here uploaded through the gateway, questions asked over SSE, and the
report's figures checked against what the document states."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pymupdf as _pymupdf
import pytest
from lectern_testing.gemini_fake import FakeGemini

from lectern_cli.main import main

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
pymupdf: Any = _pymupdf  # untyped

PAGES = [
    (
        "Cell Biology for Beginners",
        [
            "Chapter 1 Cell division",
            "Cells divide so that organisms can grow and repair damaged tissue. Mitosis "
            "produces two identical daughter cells, each with the same number of chromosomes "
            "as the parent cell.",
            "Mitosis proceeds through four stages:",
            "1. Prophase, when the chromosomes condense.",
            "2. Metaphase, when the chromosomes line up at the middle of the cell.",
            "3. Anaphase, when the sister chromatids are pulled apart.",
            "4. Telophase, when two new nuclei form.",
        ],
    ),
    (
        None,
        [
            "Chapter 2 Meiosis",
            "Meiosis produces four daughter cells that are not identical, each with half the "
            "number of chromosomes of the parent cell. It happens only in the cells that make "
            "eggs and sperm.",
            "A human cell cycle takes about 24 hours, of which mitosis itself lasts about one "
            "hour.",
        ],
    ),
    (
        None,
        [
            "References",
            "1. Alberts B, Johnson A. Molecular Biology of the Cell: mitosis, meiosis, "
            "prophase, metaphase, anaphase and telophase. Garland Science; 2014.",
            "2. Morgan DO. The Cell Cycle: mitosis and meiosis in four stages. New Science "
            "Press; 2007.",
        ],
    ),
]

QUESTIONS = [
    {"id": "cell-01", "document": "cells.pdf", "question": "What are the stages of mitosis?",
     "kind": "list", "pages": [1], "evidence": "Mitosis proceeds through four stages",
     "facts": [["prophase"], ["metaphase"], ["anaphase"], ["telophase"]]},
    {"id": "cell-02", "document": "cells.pdf", "question": "How long does mitosis last?",
     "kind": "number", "pages": [2], "evidence": "mitosis itself lasts about one hour",
     "facts": [["one hour"]]},
    {"id": "cell-03", "document": "cells.pdf",
     "question": "How many daughter cells does meiosis produce?", "kind": "number",
     "pages": [2], "evidence": "Meiosis produces four daughter cells",
     "facts": [["four daughter cells"]]},
    {"id": "cell-04", "document": "cells.pdf", "question": "Where does it happen?",
     "kind": "follow_up", "pages": [2], "evidence": "It happens only in the cells that make",
     "facts": [["eggs and sperm"]], "follow_up_to": "cell-03"},
]  # fmt: skip

OFFTOPIC = [
    {"id": "off-01", "question": "How do I bake sourdough bread at home?"},
    {"id": "off-02", "question": "Who won the football world cup in 1998?"},
]


def _course_pdf(path: Path) -> None:
    document = pymupdf.open()
    for title, lines in PAGES:
        page = document.new_page()
        y = 72.0
        if title:
            page.insert_text((72, y), title, fontsize=20)
            y += 40
        for line in lines:
            heading = line.startswith(("Chapter", "References"))
            size = 15 if heading else 11
            box = pymupdf.Rect(72, y, 523, y + 200)
            used = page.insert_textbox(box, line, fontsize=size)
            y += 200 - used + 10
    document.set_metadata({"title": "Cell Biology for Beginners"})
    document.save(path)


@pytest.fixture
def question_files(tmp_path: Path) -> tuple[Path, Path, Path]:
    docs = tmp_path / "docs"
    docs.mkdir()
    _course_pdf(docs / "cells.pdf")
    questions = tmp_path / "questions.jsonl"
    questions.write_text("".join(json.dumps(q) + "\n" for q in QUESTIONS))
    offtopic = tmp_path / "offtopic.jsonl"
    offtopic.write_text("".join(json.dumps(q) + "\n" for q in OFFTOPIC))
    return docs, questions, offtopic


PLANT_QUESTIONS = [
    {"id": "plant-01", "document": "plants.pdf", "question": "Where does photosynthesis happen?",
     "kind": "fact", "pages": [1], "evidence": "Photosynthesis happens in the chloroplasts",
     "facts": [["chloroplasts"]]},
]  # fmt: skip


@pytest.fixture
def question_set(question_files: tuple[Path, Path, Path], tmp_path: Path) -> tuple[Path, Path]:
    """A set split by document: dev (cells.pdf) and test (plants.pdf), the test split frozen."""
    docs, questions, offtopic = question_files
    document = pymupdf.open()
    page = document.new_page()
    page.insert_textbox(
        pymupdf.Rect(72, 72, 523, 400),
        "Plant biology\n\nPhotosynthesis happens in the chloroplasts of leaf cells, where "
        "chlorophyll absorbs red and blue light and the plant makes sugar from carbon dioxide "
        "and water.",
        fontsize=12,
    )
    document.save(docs / "plants.pdf")
    root = tmp_path / "set"
    (root / "dev").mkdir(parents=True)
    (root / "test").mkdir()
    (root / "dev" / "questions.jsonl").write_text(questions.read_text())
    (root / "dev" / "offtopic.jsonl").write_text(offtopic.read_text())
    (root / "test" / "questions.jsonl").write_text(
        "".join(json.dumps(q) + "\n" for q in PLANT_QUESTIONS)
    )
    from lectern_eval.answer_set import load_split

    (root / "FROZEN").write_text(f"test {load_split(root / 'test').sha256}\n")
    return docs, root


def test_eval_answers_runs_the_real_path_and_scores_it(
    question_files: tuple[Path, Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    docs, questions, offtopic = question_files
    report = tmp_path / "report.json"
    code = main(
        ["eval-answers", "--questions", str(questions), "--offtopic", str(offtopic),
         "--documents", str(docs), "--json", str(report)]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0, out
    result = json.loads(report.read_text())
    summary = result["summary"]
    assert summary["questions"] == 4 and summary["offtopic"] == 2 and summary["errors"] == 0
    assert result["documents"]["cells.pdf"]["status"] == "indexed"
    # the title comes from the PDF's metadata, not the file name
    assert result["documents"]["cells.pdf"]["title"] == "Cell Biology for Beginners"
    by_id = {r["id"]: r for r in result["results"]}
    # the reference list names every stage too, but content wins and the list is answered
    assert by_id["cell-01"]["fact_recall"] == 1.0, by_id["cell-01"]
    assert all(s["pages"] != [3, 3] for s in by_id["cell-01"]["sources"])
    assert by_id["cell-02"]["fact_recall"] == 1.0, by_id["cell-02"]
    assert by_id["cell-04"]["context_hit"], by_id["cell-04"]  # "it" resolved to meiosis
    assert summary["context_recall"] == 1.0
    assert summary["answerable_refused"] == 0.0
    assert summary["offtopic_refused"] == 1.0
    assert summary["citation_precision"] >= 0.5
    assert "key-fact recall" in out


class CourseGemini(FakeGemini):
    """A fake Gemini that answers the mitosis question from its source, and nothing else."""

    def _answer_text(self, body: dict[str, Any]) -> str:
        text = json.dumps(body)
        if "stages of mitosis" in text and "Prophase" in text:
            return "Mitosis has four stages: prophase, metaphase, anaphase and telophase [T1]."
        return "The sources do not say."


def test_eval_answers_runs_through_a_configured_model(
    question_set: tuple[Path, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The same benchmark, split by document, through a model (the fake Gemini server): the
    context the model got is scored by the same gold-page figures, dev beside test."""
    docs, root = question_set
    report = tmp_path / "report.json"
    with CourseGemini() as gemini:
        # the services are processes: they read the key and endpoint from the environment
        monkeypatch.setenv("LECTERN_GEMINI_API_KEY", "fake-key")
        monkeypatch.setenv("LECTERN_GEMINI_BASE_URL", gemini.base_url)
        code = main(
            ["eval-answers", "--set", str(root), "--documents", str(docs), "--json", str(report)]
        )  # fmt: skip
        asked = [r for r in gemini.requests if r.path.endswith(":streamGenerateContent")]
    captured = capsys.readouterr()
    out = captured.out
    assert code == 0, out
    assert "test split: 1 questions over 1 documents" in captured.err + out
    assert "(frozen: matches)" in out
    result = json.loads(report.read_text())
    splits = result["splits"]
    assert splits["dev"]["questions"] == 4 and splits["test"]["questions"] == 1
    assert splits["test"]["context_recall"] == 1.0  # the model's context held the gold page
    assert splits["test"]["fact_recall"] == 0.0  # and its answer is what gets scored
    assert "a citation on the gold page" in out
    by_id = {r["id"]: r for r in result["results"]}
    first = by_id["cell-01"]
    assert first["answered_by"] not in (None, "offline"), first
    assert first["fact_recall"] == 1.0, first
    assert by_id["cell-02"]["fact_recall"] == 0.0  # the model's answer is what gets scored
    assert result["summary"]["offtopic_refused"] == 1.0
    # every answerable question reached the model, with its sources in the prompt
    assert len(asked) >= 4
    assert any("Prophase" in json.dumps(r.body) for r in asked)
