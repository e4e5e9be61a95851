"""`lectern eval-memory` end to end: the embedded stack started as processes, a small course
PDF built here, scripted students played through the gateway (tutor sessions, replies to
check questions, statements of confusion), and their memories scored against a teacher's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pymupdf as _pymupdf
import pytest

from lectern_cli.main import main

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
pymupdf: Any = _pymupdf  # untyped

TEXT = (
    "Cell division\n\n"
    "Mitosis is a type of cell division that produces two identical daughter cells. Each "
    "daughter cell of mitosis has the same number of chromosomes as the parent cell. Mitosis "
    "lets organisms grow and repair damaged tissue.\n\n"
    "Meiosis is a type of cell division that produces four gametes. Meiosis halves the "
    "number of chromosomes, so that each gamete carries one set. Meiosis happens only in the "
    "cells that make eggs and sperm."
)

MASTERY = {
    "student": "dev-01", "document": "cells.pdf",
    "sessions": [
        [{"ask": "What does mitosis produce?"}, {"check": "right"}],
        [{"ask": "What does mitosis produce?"}, {"check": "right"}],
    ],
    "expected": {"struggles": [], "mastered": [{"topic": "mitosis", "terms": ["mitosis"]}]},
}  # fmt: skip
STRUGGLE = {
    "student": "dev-02", "document": "cells.pdf",
    "sessions": [[
        {"ask": "What does meiosis produce?"}, {"check": "wrong"},
        {"say": "I still find meiosis really confusing, can you explain it again?"},
    ]],
    "expected": {"struggles": [{"topic": "meiosis", "terms": ["meiosis"]}], "mastered": []},
}  # fmt: skip
INTEREST = {
    "student": "test-01", "document": "cells.pdf",
    "sessions": [[{"ask": "What does mitosis produce?"}, {"ask": "Where does meiosis happen?"}]],
    "expected": {"struggles": [], "mastered": []},
}  # fmt: skip


def test_eval_memory_plays_scripted_students_and_scores_their_memories(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    document = pymupdf.open()
    document.new_page().insert_textbox(pymupdf.Rect(72, 72, 523, 770), TEXT, fontsize=12)
    document.save(docs / "cells.pdf")
    root = tmp_path / "set"
    for split, scripted in (("dev", [MASTERY, STRUGGLE]), ("test", [INTEREST])):
        (root / split).mkdir(parents=True)
        (root / split / "students.jsonl").write_text(
            "".join(json.dumps(s) + "\n" for s in scripted)
        )
    report = tmp_path / "report.json"
    code = main(["eval-memory", "--set", str(root), "--documents", str(docs),
                 "--json", str(report)])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0, out
    result = json.loads(report.read_text())
    dev, test = result["splits"]["dev"], result["splits"]["test"]
    students = {s["student"]: s for s in result["students"]}
    assert dev["errors"] == 0 and test["errors"] == 0, students
    assert dev["checks_asked"] == "3/3", students
    # two right checks on mitosis across sessions: mastered, and nothing else claimed
    assert dev["mastered_recall"] == 1.0 and dev["mastered_precision"] == 1.0, students
    # a wrong check and confusion in the student's words: meiosis, named as such
    assert dev["struggle_recall"] == 1.0, students
    # asking is interest, not mastery, and a skipped check is no struggle
    assert not [m for m in students["test-01"]["memories"] if m["kind"] != "takeaway"]
    assert dev["leaks"] == 0 and test["leaks"] == 0
    assert "struggle recall" in out
