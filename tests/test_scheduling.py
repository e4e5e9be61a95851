"""How the suite is dealt to xdist workers (``lectern_testing.scheduling``): the files that read
the shared documents are one scope, so they run on one worker and share each document's read
(``lectern_testing.shared_reads``); the costliest scopes go first."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from lectern_testing.scheduling import SECONDS, costliest_first, scope_of
from lectern_testing.shared_reads import SCOPE, SHARED_READERS, SharedReads

ROOT = Path(__file__).resolve().parents[1]

PAGE = "<html><body><h1>Cells</h1><p>Mitosis makes two cells.</p></body></html>"

#: a test that records the worker it ran on and the reads it found already made
_RECORDER = """
import json, os
from pathlib import Path

def test_records(read_shared, tmp_path):
    made_before = len(read_shared)
    page = tmp_path / "page.html"
    page.write_text("<html><body><h1>Cells</h1><p>Mitosis makes two cells.</p></body></html>")
    read_shared(page)
    record = {{"file": "{name}", "worker": os.environ.get("PYTEST_XDIST_WORKER"),
               "made_before": made_before}}
    with open(os.environ["RECORDS"], "a") as out:
        out.write(json.dumps(record) + "\\n")
"""


def test_the_files_that_read_shared_documents_are_one_scope() -> None:
    assert {scope_of(f"{name}::test_x[a]") for name in SHARED_READERS} == {SCOPE}
    assert scope_of("tests/ingest/test_chunking.py::test_x") == "tests/ingest/test_chunking.py"
    assert all((ROOT / name).is_file() for name in SHARED_READERS)


def test_the_costliest_scopes_are_dealt_first() -> None:
    scopes = {
        "tests/a/test_many.py": [1, 2, 3, 4, 5],
        "tests/e2e/test_stack.py": [1],
        "tests/b/test_few.py": [1, 2],
        SCOPE: [1, 2, 3],
        "tests/ingest/test_service_shared_docs.py": [1],
    }
    assert SECONDS[SCOPE] >= SECONDS["tests/ingest/test_service_shared_docs.py"]
    assert costliest_first(scopes) == [
        "tests/e2e/test_stack.py", SCOPE, "tests/ingest/test_service_shared_docs.py",
        "tests/a/test_many.py", "tests/b/test_few.py",
    ]  # fmt: skip
    assert all(s == SCOPE or (ROOT / s).is_file() for s in SECONDS), "a file was renamed"


def test_a_document_is_read_once_until_cleared(tmp_path: Path) -> None:
    path = tmp_path / "one.html"
    path.write_text(PAGE)
    reads = SharedReads()
    first = reads(path)
    assert reads(tmp_path / "." / "one.html") is first and len(reads) == 1
    assert "Mitosis" in " ".join(b.text for u in first.units for b in u.blocks)
    reads.clear()
    assert len(reads) == 0 and reads(path) is not first


#: a test that takes no reads and records the worker it ran on
_OTHER = """
import json, os

def test_records():
    with open(os.environ["RECORDS"], "a") as out:
        out.write(json.dumps({{"file": "{name}", "worker": os.environ.get("PYTEST_XDIST_WORKER")}}))
        out.write("\\n")
"""


def _project(tmp_path: Path, files: list[str], others: Sequence[str] = ()) -> Path:
    for name in [*files, *others]:
        target = tmp_path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text((_RECORDER if name in files else _OTHER).format(name=name))
    (tmp_path / "pytest.ini").write_text("[pytest]\naddopts = --import-mode=importlib\n")
    return tmp_path


def _run(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    records = project / "records.jsonl"
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
        cwd=project, capture_output=True, text=True, timeout=120,
        env={**_environ(), "RECORDS": str(records)},
    )  # fmt: skip


def _environ() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}


def test_under_loadfile_they_run_on_one_worker_and_share_the_reads(tmp_path: Path) -> None:
    # the other files sort between the readers: as files they would be dealt between them
    others = [f"tests/f{i}/test_other.py" for i in range(4)]
    project = _project(tmp_path, sorted(SHARED_READERS), others)
    done = _run(project, "-n", "2", "--dist", "loadfile", "tests")
    assert done.returncode == 0, done.stdout + done.stderr
    records = [json.loads(line) for line in (project / "records.jsonl").read_text().splitlines()]
    readers = [r for r in records if r["file"] in SHARED_READERS]
    assert len(readers) == len(SHARED_READERS) and len({r["worker"] for r in readers}) == 1
    # the reads kept from one file of the scope to the next: each found those before it
    assert sorted(r["made_before"] for r in readers) == list(range(len(SHARED_READERS)))
    assert {r["file"] for r in records} == SHARED_READERS | set(others)


def test_a_file_outside_the_scope_cannot_take_the_reads(tmp_path: Path) -> None:
    project = _project(tmp_path, ["tests/ingest/test_stray.py"])
    done = _run(project, "tests")
    assert done.returncode != 0
    assert "tests/ingest/test_stray.py take read_shared but are not in" in done.stdout + done.stderr


def test_under_loadfile_the_costliest_file_runs_first(tmp_path: Path) -> None:
    costly = max((s for s in SECONDS if s != SCOPE), key=SECONDS.__getitem__)
    # the others sort before it: in xdist's own order (by number of tests, then as
    # collected) they would run first
    others = [f"tests/a{i}/test_other.py" for i in range(3)]
    assert all(other < costly for other in others)
    project = _project(tmp_path, [], [*others, costly])
    done = _run(project, "-n", "1", "--dist", "loadfile", "tests")
    assert done.returncode == 0, done.stdout + done.stderr
    records = [json.loads(line) for line in (project / "records.jsonl").read_text().splitlines()]
    assert records[0]["file"] == costly and len(records) == 4
