"""The shared documents read once per test run, not once per test file.

Four test files check what extraction makes of the shared documents (``../shared/data``): the
answer set's key facts on their gold pages, the extraction checks, the contents maps and the
heading trees. Reading a long PDF is most of their time, and they read the same documents
(the RISC-V manual, 145 pages, three times). So under pytest-xdist's ``--dist loadfile`` the
four files are one scheduling scope (``lectern_testing.scheduling``): they run on one worker,
one after another, and the ``read_shared`` fixture reads each document once for all of them,
forgetting the reads after the last of them. A test file that takes ``read_shared`` must be
listed in ``SHARED_READERS`` (checked at collection): elsewhere its reads would not be shared.

Registered as a pytest plugin (``pytest11`` entry point ``lectern-shared-reads``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

#: the test files that share the reads (paths as pytest's node ids give them)
SHARED_READERS = frozenset(
    {
        "tests/eval/test_answer_set.py",
        "tests/ingest/test_contents_map_shared_docs.py",
        "tests/ingest/test_extract_shared_data.py",
        "tests/ingest/test_structure_shared_docs.py",
    }
)
#: their one scheduling scope (``lectern_testing.scheduling``)
SCOPE = "shared documents, read once"


def file_of(nodeid: str) -> str:
    """The test file of a pytest node id."""
    return nodeid.split("::", 1)[0]


@dataclass(frozen=True)
class SharedRead:
    """A shared document as extraction reads it (no password): the closed extraction (its
    summary complete), its units, its contents/outline report, the pages of its printed
    contents, and the seconds the read took."""

    extraction: Any
    units: list[Any]
    report: Any
    contents_pages: list[int]
    seconds: float


def read_document(path: Path) -> SharedRead:
    """``path`` extracted now, every unit read."""
    from lectern_common.filetype import detect_mime_path
    from lectern_ingest.extract import extract

    began = time.perf_counter()
    with extract(path, mime=detect_mime_path(path), password=None) as ex:
        units = list(ex.units())
        report = ex.entry_report()
        contents_pages = list(getattr(ex, "contents_pages", []))
    return SharedRead(ex, units, report, contents_pages, time.perf_counter() - began)


class SharedReads:
    """``read_document`` once per document until ``clear``."""

    def __init__(self) -> None:
        self._reads: dict[Path, SharedRead] = {}

    def __call__(self, path: Path) -> SharedRead:
        key = path.resolve()
        found = self._reads.get(key)
        if found is None:
            found = self._reads[key] = read_document(path)
        return found

    def __len__(self) -> int:
        return len(self._reads)

    def clear(self) -> None:
        """Forget every read."""
        self._reads.clear()


_READS = SharedReads()


def shared_read(path: Path) -> SharedRead:
    """``path`` as the ``read_shared`` fixture gives it (for helpers that take no fixture)."""
    return _READS(path)


@pytest.fixture(scope="session")
def read_shared() -> SharedReads:
    """Each shared document read once for the ``SHARED_READERS`` files."""
    return _READS


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test outside ``SHARED_READERS`` that takes ``read_shared`` is an error: its reads
    would be shared with nothing, and kept for the rest of the run."""
    strays = sorted(
        {
            file_of(item.nodeid)
            for item in items
            if "read_shared" in getattr(item, "fixturenames", ())
            and file_of(item.nodeid) not in SHARED_READERS
        }
    )
    if strays:
        raise pytest.UsageError(
            f"{', '.join(strays)} take read_shared but are not in "
            "lectern_testing.shared_reads.SHARED_READERS"
        )


def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """After the last test of the scope, the reads are forgotten (hundreds of pages)."""
    if nextitem is None or file_of(nextitem.nodeid) not in SHARED_READERS:
        _READS.clear()
