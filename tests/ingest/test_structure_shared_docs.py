"""Heading trees of real documents held to what their own printed contents (or outline) say.

For each document, a handful of top-level entries of its contents page were read by hand
and turned into the physical page where that section opens (the printed page plus the
document's front matter; EPUB pages are MuPDF's reflowed ones). The tree must have each
entry as a heading first seen on that page (so no entry of the contents page became a
heading earlier), the contents pages must be typed ``contents`` and no chunk's section
path may start with the contents page's own title.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from lectern_testing.shared_reads import SharedReads

from lectern_ingest.chunking import ChunkingConfig, chunk_units

pytestmark = [pytest.mark.shared_data, pytest.mark.timeout(180)]


@dataclass(frozen=True)
class Expected:
    """What a document's printed contents (or outline) says about its tree."""

    contents_pages: tuple[int, ...]
    #: the contents page's own title ("" where the document has an outline only)
    contents_title: str
    #: (heading, physical page where it opens)
    headings: tuple[tuple[str, int], ...]


DOCUMENTS: dict[str, Expected] = {
    # contents on p. 1; printed page numbers are physical ones
    "docs2/cs229-linear-algebra-review-26p.pdf": Expected((1,), "Contents", (
        ("1 Basic Concepts and Notation", 2),
        ("2 Matrix Multiplication", 3),
        ("3 Operations and Properties", 7),
        ("4 Matrix Calculus", 20),
    )),
    # an 18-page sample of a Redpaper: "Preface xi" is p. 4, "Chapter 1 ... 1" p. 5,
    # "2.2 Separation of duties 10" p. 8
    "docs/ibm-redbook-sampled-18p.pdf": Expected((2,), "Contents", (
        ("Preface", 4),
        ("Chapter 1. Securing and protecting IBM DB2 data", 5),
        ("1.1 Security fundamentals", 6),
        ("2.2 Separation of duties", 8),
    )),
    # "Inhaltsverzeichnis" on pp. 4-5; printed page + 4
    "docs/geotopo-lecture-notes-de-117p.pdf": Expected((4, 5), "Inhaltsverzeichnis", (
        ("1 Topologische Grundbegriffe", 6),
        ("2 Mannigfaltigkeiten und Simplizialkomplexe", 28),
        ("3 Fundamentalgruppe und Überlagerungen", 48),
        ("4 Euklidische und nichteuklidische Geometrie", 68),
        ("5 Krümmung", 91),
    )),
    # "Table of Contents" and its list of exhibits on pp. 3-6, without page numbers
    "docs/irs-manual-400p.pdf": Expected((3, 4, 5, 6), "Table of Contents", (
        ("2.3.59.1 Program Scope and Objectives", 7),
        ("2.3.59.2 Command Code BMFOL Overview", 8),
        ("2.3.59.5 Restoring RRR Tax Modules to Master File", 9),
        ("2.3.59.9 Table of Screen Exhibits", 13),
    )),
    # "CONTENTS" and the list of illustrations on pp. 4-5
    "docs/other/winter-sports-gutenberg.epub": Expected((4, 5), "CONTENTS", (
        ("CHAPTER I THE SUN-SEEKER", 6),
        ("CHAPTER II RINKS AND SKATERS", 20),
        ("CHAPTER IV TOBOGGANING", 80),
        ("CHAPTER VIII FOR PARENTS AND GUARDIANS", 126),
    )),
    # "Contents" on p. 2, chapters without page numbers
    "docs2/alice-in-wonderland-gutenberg.epub": Expected((2,), "Contents", (
        ("Down The Rabbit-Hole", 4),
        ("The Pool Of Tears", 9),
        ("A Mad Tea-Party", 36),
        ("Alice's Evidence", 47),
    )),
    # contents on p. 1 under the title; printed pages are physical ones
    "docs2/network-basics-lecture-handouts-64p.pdf": Expected((1,), "Contents", (
        ("1 Introduction", 5),
        ("2 How The Internet Works", 7),
        ("3 Transport Protocols", 34),
        ("4 Application Layer Protocols", 49),
    )),
    # contents on pp. 7-11 (roman vii-xi); printed page + 12
    "docs2/riscv-isa-spec-v2.2-manual-145p.pdf": Expected((7, 8, 9, 10, 11), "Contents", (
        ("Introduction", 13),
        ("RV32I Base Integer Instruction Set, Version 2.0", 21),
        ("RV64I Base Integer Instruction Set, Version 2.0", 41),
        ('"M" Standard Extension for Integer Multiplication and Division, Version 2.0', 47),
    )),
    # contents on pp. 1-3 (its tail shares p. 3 with the first section)
    "docs2/stats-probability-lecture-notes-qcb508-week4-36p.pdf": Expected(
        (1, 2, 3), "Contents", (
            ("Probability and Statistics", 3),
            ("Probability", 4),
            ("Random Variables", 6),
            ("Discrete RVs", 13),
            ("Likelihood", 31),
        ),
    ),
    # slide decks with an outline (one entry a slide) and no contents page
    "docs2/linux-intro-lecture-slides-glasgow-28p.pdf": Expected((), "", (
        ("Linux is Born", 5),
        ("Getting Started", 12),
        ("Directories", 18),
        ("Logging Out", 27),
    )),
    "docs2/evaluation-metrics-slides-cs229-31p.pdf": Expected((), "", (
        ("Why are metrics important?", 3),
        ("Binary Classification", 4),
        ("Class Imbalance", 26),
        ("Choosing Metrics", 30),
    )),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(DOCUMENTS))
def test_the_tree_matches_the_documents_own_contents(
    name: str, shared_data: Path, count_tokens: Any, read_shared: SharedReads
) -> None:
    expected = DOCUMENTS[name]
    # extracted once for these and the contents-map tests (lectern_testing.shared_reads)
    read = read_shared(shared_data / name)
    contents_pages, units = read.contents_pages, read.units
    chunks = list(chunk_units(units, config=ChunkingConfig(), count_tokens=count_tokens))
    first_seen: dict[str, int | None] = {}
    for unit in units:
        for block in unit.blocks:
            if block.kind == "heading":
                first_seen.setdefault(block.text, unit.page)
    found = {title: first_seen.get(title) for title, _ in expected.headings}
    assert found == dict(expected.headings)

    assert contents_pages == list(expected.contents_pages)
    contents = [c for c in chunks if c.kind == "contents"]
    if expected.contents_pages:
        assert contents and {c.page_start for c in contents} <= set(expected.contents_pages)
        assert contents[0].page_start == expected.contents_pages[0]
        assert all(c.section_path == [] for c in contents)
        title = expected.contents_title.casefold()
        assert not any(c.section_path[:1] and c.section_path[0].casefold() == title
                       for c in chunks)  # fmt: skip
        assert not any(t.casefold() == title for t in first_seen)


def test_at_least_ten_documents_are_held_to_their_contents() -> None:
    assert len(DOCUMENTS) >= 10
    assert sum(bool(e.contents_pages) for e in DOCUMENTS.values()) >= 9
