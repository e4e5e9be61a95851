"""The memory benchmark's scripted students: well-formed, split by document like the answer
benchmark, and the test split frozen."""

from __future__ import annotations

import json
from pathlib import Path

from lectern_eval.answer_set import frozen_hash, split_hash
from lectern_eval.memory import load_students

ROOT = Path(__file__).resolve().parents[2] / "bench" / "memory"
ANSWERS = ROOT.parent / "answers"


def test_the_students_are_split_by_document_as_the_answer_set_and_test_is_frozen() -> None:
    dev = load_students(ROOT / "dev" / "students.jsonl")
    test = load_students(ROOT / "test" / "students.jsonl")
    assert len(dev) + len(test) >= 40
    assert sum(len(s.sessions) for s in dev + test) >= 60
    dev_docs, test_docs = {s.document for s in dev}, {s.document for s in test}
    assert not dev_docs & test_docs
    # the same documents on the same side as the answer benchmark's split
    answer_split = {
        json.loads(line)["document"]: split
        for split in ("dev", "test")
        for line in (ANSWERS / split / "questions.jsonl").read_text().splitlines()
        if line.strip()
    }
    assert all(answer_split[d] == "dev" for d in dev_docs)
    assert all(answer_split[d] == "test" for d in test_docs)
    assert frozen_hash(ROOT) == split_hash([ROOT / "test" / "students.jsonl"]), (
        "bench/memory/test changed: the test split is frozen (see bench/memory/README.md)"
    )
    for student in dev + test:
        for expected in [*student.expected.struggles, *student.expected.mastered]:
            assert all(t == t.lower() and t.strip() for t in expected.terms), student.student


def test_the_labelled_messages_are_two_sets_written_apart() -> None:
    def texts(name: str) -> set[str]:
        lines = (ROOT / "messages" / name).read_text().splitlines()
        return {json.loads(line)["text"].casefold() for line in lines if line.strip()}

    fit, check = texts("fit.jsonl"), texts("check.jsonl")
    assert len(fit) >= 300 and len(check) >= 150
    assert not fit & check
