"""The contents pages and outlines of the shared documents as maps of their heading trees.

Each document's entries must be found as lines of its text (then headings of the tree) for at
least 0.9 of them; the printed contents pages must do so on their own too, with the outline
hidden, their printed page numbers offset from the PDF's (geotopo: +4; RISC-V: +12 and roman
front matter). Slide decks take their first slide's largest text for a title where their
metadata title is a file's name.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pymupdf as _pymupdf
import pytest
from lectern_testing.shared_reads import SharedReads

from lectern_common.filetype import detect_mime_path
from lectern_ingest.extract import Unit, extract
from lectern_ingest.extract.model import EntryReport

pymupdf: Any = _pymupdf

pytestmark = [pytest.mark.shared_data, pytest.mark.timeout(300)]

#: the least share of entries that must be lines of the text
MIN_SHARE = 0.9

#: documents with a printed contents page: its entry count
CONTENTS = {
    "docs/geotopo-lecture-notes-de-117p.pdf": 35,
    "docs/other/winter-sports-gutenberg.epub": 8,  # the list of illustrations left out
    "docs2/cs229-linear-algebra-review-26p.pdf": 27,
    "docs2/network-basics-lecture-handouts-64p.pdf": 27,
    "docs2/riscv-isa-spec-v2.2-manual-145p.pdf": 104,
    "docs2/stats-probability-lecture-notes-qcb508-week4-36p.pdf": 109,
}
#: documents with an outline (the education statistics' points all six tables at page 1,
#: so it is left out): its entry count
OUTLINES = {
    "docs/fda-cder-drug-labeling-slides-68p.pdf": 52,
    "docs/geotopo-lecture-notes-de-117p.pdf": 35,
    "docs/irs-manual-400p.pdf": 133,
    "docs/other/winter-sports-gutenberg.epub": 27,
    "docs2/alice-in-wonderland-gutenberg.epub": 11,
    "docs2/evaluation-metrics-slides-cs229-31p.pdf": 29,
    "docs2/linux-intro-lecture-slides-glasgow-28p.pdf": 27,
    "docs2/ml-advice-slides-andrew-ng-30p.pdf": 26,
    "docs2/network-basics-lecture-handouts-64p.pdf": 28,
    "docs2/riscv-isa-spec-v2.2-manual-145p.pdf": 105,
    "docs2/stats-probability-lecture-notes-qcb508-week4-36p.pdf": 109,
}
#: with the outline hidden: (heading, physical page) the printed contents page must give
PRINTED_ONLY = {
    "docs/geotopo-lecture-notes-de-117p.pdf": (
        ("1 Topologische Grundbegriffe", 6),
        ("2 Mannigfaltigkeiten und Simplizialkomplexe", 28),
        ("5 Krümmung", 91),
    ),
    "docs2/riscv-isa-spec-v2.2-manual-145p.pdf": (
        ("Introduction", 13),
        ("RV32I Base Integer Instruction Set, Version 2.0", 21),
    ),
    "docs2/stats-probability-lecture-notes-qcb508-week4-36p.pdf": (
        ("Probability and Statistics", 3),
        ("Likelihood", 31),
    ),
}
#: the Redbook sample: 18 pages of a book whose contents page lists 43 sections; these are
#: the ones its pages hold, each of which must be found
REDBOOK_SECTIONS = {
    "DB2 for i Center of Excellence", "Preface", "Authors",
    "Chapter 1. Securing and protecting IBM DB2 data", "1.1 Security fundamentals",
    "1.2 Current state of IBM i security", "1.3.1 Existing row and column control",
    "2.1.6 Change Function Usage CL command",
    "2.1.7 Verifying function usage IDs for RCAC with the FUNCTION_USAGE view",
    "2.2 Separation of duties", "3.2.2 Built-in global variables",
    "3.3 VERIFY_GROUP_FOR_USER function", "3.6.6 Activating RCAC",
}  # fmt: skip


def _read(path: Path) -> tuple[Any, list[Unit], EntryReport]:
    with extract(path, mime=detect_mime_path(path), password=None) as ex:
        units = list(ex.units())
        report = ex.entry_report()
    assert report is not None
    return ex, units, report


def _share(total: int, unmatched: int) -> float:
    return 1 - unmatched / total


@pytest.mark.parametrize("name", sorted(CONTENTS))
def test_contents_entries_are_lines_of_the_text(
    name: str, shared_data: Path, read_shared: SharedReads
) -> None:
    # a document read once for the shared-document tests (lectern_testing.shared_reads);
    # the test that hides the outline reads its own
    read = read_shared(shared_data / name)
    ex, report = read.extraction, read.report
    assert report is not None
    assert len(ex.contents_entries) == CONTENTS[name]
    missing = [e.title for e in report.contents_unmatched]
    assert _share(CONTENTS[name], len(missing)) >= MIN_SHARE, missing


@pytest.mark.parametrize("name", sorted(OUTLINES))
def test_outline_entries_are_lines_of_the_text(
    name: str, shared_data: Path, read_shared: SharedReads
) -> None:
    report = read_shared(shared_data / name).report
    assert report is not None
    assert len(report.outline) == OUTLINES[name]
    missing = [e.title for e in report.outline_unmatched]
    assert _share(OUTLINES[name], len(missing)) >= MIN_SHARE, missing


@pytest.mark.parametrize("name", sorted(PRINTED_ONLY))
def test_a_printed_contents_page_alone_makes_the_tree(
    name: str, shared_data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pymupdf.Document, "get_toc", lambda self, simple=True: [])
    ex, units, report = _read(shared_data / name)
    assert report.outline == []
    missing = [e.title for e in report.contents_unmatched]
    assert _share(len(ex.contents_entries), len(missing)) >= MIN_SHARE, missing
    first_seen: dict[str, int | None] = {}
    for unit in units:
        for block in unit.blocks:
            if block.kind == "heading":
                first_seen.setdefault(block.text, unit.page)
    expected = dict(PRINTED_ONLY[name])
    assert {title: first_seen.get(title) for title in expected} == expected


def test_the_redbook_sample_finds_every_section_it_holds(
    shared_data: Path, read_shared: SharedReads
) -> None:
    read = read_shared(shared_data / "docs/ibm-redbook-sampled-18p.pdf")
    ex, units, report = read.extraction, read.units, read.report
    unmatched = {e.title for e in report.contents_unmatched}
    found = {e.title for e in ex.contents_entries} - unmatched
    assert found == REDBOOK_SECTIONS
    headings = {b.text for u in units for b in u.blocks if b.kind == "heading"}
    assert headings >= REDBOOK_SECTIONS


@pytest.mark.parametrize(
    ("name", "metadata", "title"),
    [
        ("docs2/evaluation-metrics-slides-cs229-31p.pdf", "evaluation_metrics_spring2020",
         "Evaluation Metrics"),
        ("docs2/linux-intro-lecture-slides-glasgow-28p.pdf", "linux-lecture-01",
         "C Programming under Linux"),
        ("docs2/ml-advice-slides-andrew-ng-30p.pdf", "ML-advice_2018",
         "Advice for applying Machine Learning"),
        ("docs/fda-cder-drug-labeling-slides-68p.pdf", "06-labeling__slides",
         "Consistency in Labeling and Methods to Optimize Communication in Labeling"),
    ],
)  # fmt: skip
def test_a_slide_decks_file_name_gives_way_to_its_first_slide(
    name: str, metadata: str, title: str, shared_data: Path, tmp_path: Path
) -> None:
    path = tmp_path / Path(name).name
    shutil.copy(shared_data / name, path)
    with pymupdf.open(path) as doc:
        doc.set_metadata({**doc.metadata, "title": metadata})
        doc.save(tmp_path / "renamed.pdf")
    with extract(tmp_path / "renamed.pdf", mime=detect_mime_path(path), password=None) as ex:
        assert ex.title == title
