"""The contents page and the outline as a map of the heading tree, on PDFs built here: their
entries' titles found as lines of the text (printed pages offset from the PDF's, numbering,
case and spacing set differently, a title broken over two lines) become the tree's headings;
an entry not in the text is reported; a pull quote or a running header is no heading. And a
slide deck's file-name-like metadata title gives way to its first slide's largest text."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pymupdf as _pymupdf
import pytest

from lectern_common.filetype import PDF
from lectern_ingest.chunking import ChunkingConfig
from lectern_ingest.extract import extract
from lectern_ingest.extract.entry_map import entry_key, place_contents
from lectern_ingest.extract.model import Unit
from lectern_ingest.structure import DocumentStructure, inspect_document
from lectern_ingest.titles import usable_title

pymupdf: Any = _pymupdf

BODY = (
    "Cells are the basic units of life. Every organism is made of one or more cells. The "
    "membrane controls what enters and leaves, and the cytoplasm holds the organelles."
)
PULL_QUOTE = "Every cell comes from a cell."
#: (as the contents page prints it, printed page)
CONTENTS = [
    ("1 Cells", 1),
    ("1.1 Membranes", 1),
    ("1.2 ORGANELLES", 2),  # the text sets it "1.2 Organelles"
    ("2 Energy", 3),
    ("2.1 Respiration", 3),
    ("2.2 Photosynthesis and the Light Reactions", 4),  # two lines in the text
    ("3 Glossary", 5),  # no such section
]
#: printed page 1 is the PDF's page 3 (a cover and the contents page come first)
OFFSET = 2


def _text(page: Any, y: float, text: str, size: float = 10, font: str = "helv") -> None:
    page.insert_text((72, y), text, fontsize=size, fontname=font)


def _body(page: Any, y: float, text: str = BODY) -> None:
    assert page.insert_textbox(pymupdf.Rect(72, y, 520, y + 80), text, fontsize=10) >= 0


def _notes(path: Path) -> None:
    """Six pages: a cover, a contents page with dot leaders, then four pages whose printed
    numbers are two less than the PDF's; "1.1 Membranes" is set like the text around it (only
    the contents page says it is a heading), a running header repeats each chapter's title,
    and a pull quote is set larger than any heading."""
    doc = pymupdf.open()
    cover = doc.new_page(width=595, height=842)
    _text(cover, 200, "Cell Biology Notes", size=26, font="hebo")
    _text(cover, 240, "For the first year")
    contents = doc.new_page(width=595, height=842)
    _text(contents, 100, "Contents", size=16, font="hebo")
    for i, (title, printed) in enumerate(CONTENTS):
        _text(contents, 130 + 22 * i, f"{title} " + ". " * (38 - len(title) // 2) + str(printed))
    for _ in range(4):
        doc.new_page(width=595, height=842)
    p3, p4, p5, p6 = (doc[i] for i in range(2, 6))
    _text(p3, 110, "1 Cells", size=14, font="hebo")
    _body(p3, 125)
    _text(p3, 230, "1.1 Membranes")
    _body(p3, 245, "Membranes are made of lipids. " + BODY)
    _text(p4, 110, "1.2 Organelles", size=14, font="hebo")
    _body(p4, 125, "Organelles are the cell's organs. " + BODY)
    _text(p4, 260, PULL_QUOTE, size=20, font="heit")
    _body(p4, 290)
    _text(p5, 110, "2 Energy", size=14, font="hebo")
    _body(p5, 125)
    _text(p5, 230, "2.1 Respiration", size=12, font="hebo")
    _body(p5, 245, "Respiration releases energy. " + BODY)
    _text(p6, 110, "2.2 Photosynthesis and the", size=12, font="hebo")
    _text(p6, 125, "Light Reactions", size=12, font="hebo")
    _body(p6, 140, "Light is captured by chlorophyll. " + BODY)
    for page, header in ((p3, "1 Cells"), (p4, "1 Cells"), (p5, "2 Energy"), (p6, "2 Energy")):
        _text(page, 40, header, size=8)  # the running header: the chapter's title
        _text(page, 815, str(page.number + 1 - OFFSET), size=8)  # the printed page number
    doc.set_metadata({"title": "notes_v2"})
    doc.save(path)


def _inspect(path: Path, count_tokens: Any) -> DocumentStructure:
    return inspect_document(path, config=ChunkingConfig(), count_tokens=count_tokens, mime=PDF)


def _headings(units: list[Unit]) -> list[tuple[str, int | None, int | None]]:
    return [(b.text, b.level, u.page) for u in units for b in u.blocks if b.kind == "heading"]


@pytest.mark.timeout(60)
def test_contents_entries_found_in_the_text_become_the_tree(
    tmp_path: Path, count_tokens: Any
) -> None:
    path = tmp_path / "notes.pdf"
    _notes(path)
    with extract(path, mime=PDF) as ex:
        units = list(ex.units())
        report = ex.entry_report()
    assert getattr(ex, "contents_pages", None) == [2]
    # printed page + 2; the title heads the tree; each entry's level from its numbering
    assert _headings(units) == [
        ("Cell Biology Notes", 1, 1),
        ("1 Cells", 2, 3),
        ("1.1 Membranes", 3, 3),  # set like the text: the contents page alone makes it one
        ("1.2 Organelles", 3, 4),  # the text's own casing
        ("2 Energy", 2, 5),
        ("2.1 Respiration", 3, 5),
        ("2.2 Photosynthesis and the Light Reactions", 3, 6),  # one heading of two lines
    ]
    assert report is not None
    assert [e.title for e in report.contents_unmatched] == ["3 Glossary"]
    assert report.outline == [] and report.outline_unmatched == []


@pytest.mark.timeout(60)
def test_a_pull_quote_and_a_running_header_are_no_headings(
    tmp_path: Path, count_tokens: Any
) -> None:
    path = tmp_path / "notes.pdf"
    _notes(path)
    structure = _inspect(path, count_tokens)
    titles = [h.title for h in structure.headings]
    assert PULL_QUOTE not in titles
    assert titles.count("1 Cells") == 1 and titles.count("2 Energy") == 1
    quote = next(c for c in structure.chunks if PULL_QUOTE in c.text)
    assert quote.kind == "text" and quote.section_path[-1] == "1.2 Organelles"
    membranes = next(c for c in structure.chunks if "made of lipids" in c.text)
    assert membranes.section_path == ["Cell Biology Notes", "1 Cells", "1.1 Membranes"]


@pytest.mark.timeout(60)
def test_inspect_reports_the_share_of_entries_matched(tmp_path: Path, count_tokens: Any) -> None:
    path = tmp_path / "notes.pdf"
    _notes(path)
    structure = _inspect(path, count_tokens)
    assert len(structure.contents_entries) == 7
    assert [e.title for e in structure.unmatched_entries] == ["3 Glossary"]
    text = structure.to_text()
    assert "contents page: 6 of 7 entries are headings of the tree (86% matched" in text
    assert "not found: 3 Glossary (p. 5)" in text
    assert '"contents_entries_matched_share": 0.857' in structure.to_json()


def _paper(path: Path) -> None:
    """Four pages and an outline: numbering and spacing set otherwise in the text, a title
    the outline points at the page before, and an entry named nowhere in the text."""
    doc = pymupdf.open()
    for _ in range(4):
        doc.new_page(width=595, height=842)
    pages = [doc[i] for i in range(4)]
    _text(pages[0], 100, "Introduction", size=14, font="hebo")
    _body(pages[0], 115)
    _text(pages[1], 100, "METHODS AND  MATERIALS", size=14, font="hebo")
    _body(pages[1], 115)
    _text(pages[1], 220, "Sampling", size=12, font="hebo")
    _body(pages[1], 235, "Samples were taken weekly. " + BODY)
    _body(pages[2], 100, "The samples were counted twice. " + BODY)
    _text(pages[3], 80, "Results", size=14, font="hebo")
    _body(pages[3], 95, "Most cells divided. " + BODY)
    doc.set_toc([
        [1, "1. Introduction", 1],
        [1, "2. Methods and Materials", 2],
        [2, "2.1 Sampling", 2],
        [1, "3. Results", 3],  # the anchor sits at the foot of page 3
        [1, "4. Discussion", 4],  # named nowhere in the text
    ])  # fmt: skip
    doc.save(path)


@pytest.mark.timeout(60)
def test_an_outline_places_its_titles_where_they_are_lines(
    tmp_path: Path, count_tokens: Any
) -> None:
    path = tmp_path / "paper.pdf"
    _paper(path)
    with extract(path, mime=PDF) as ex:
        units = list(ex.units())
        report = ex.entry_report()
    assert _headings(units) == [
        ("1. Introduction", 1, 1),
        ("2. Methods and Materials", 1, 2),
        ("2.1 Sampling", 2, 2),
        ("3. Results", 1, 4),
        ("4. Discussion", 1, 4),  # the outline says its section starts on page 4
    ]
    text = "\n".join(b.text for u in units for b in u.blocks)
    assert "METHODS AND" not in text  # the line became the heading
    assert report is not None and [e.title for e in report.outline_unmatched] == ["4. Discussion"]
    structure = _inspect(path, count_tokens)
    assert "outline: 4 of 5 entries are lines of the text" in structure.to_text()


def test_entry_keys_ignore_numbering_case_spacing_and_labels() -> None:
    assert entry_key("2.3  Matrix-Matrix Products") == entry_key("MATRIX-MATRIX PRODUCTS")
    assert entry_key("I. The Sun-seeker") == entry_key("CHAPTER I THE SUN-SEEKER")
    assert entry_key("Exhibit 2.3.59-1 (07-01-2019) Command Code Input") == entry_key(
        "2.3.59-1 Command Code Input"
    )
    # a letter without its stop is a word
    assert entry_key("18.4 N Extension Instructions") == entry_key("N Extension Instructions")
    assert entry_key("A Mad Tea-Party") != entry_key("Mad Tea-Party")
    assert entry_key("RV32I Base Integer") != entry_key("RV64I Base Integer")


def test_printed_pages_are_placed_with_a_drifting_offset() -> None:
    # printed pages 1, 5, 9, 12 (and front matter ii): two pages of front matter, then a
    # plate before the last section; a second "b" much later is another section's
    hints = [("pref", -998), ("a", 1), ("b", 5), ("c", 9), ("d", 12), ("z", 20)]
    pool = {"pref": [2], "a": [3], "b": [7, 15], "c": [11], "d": [16]}
    placed = place_contents(hints, pool, fixed={}, first=1, last=30)
    assert placed == {0: 2, 1: 3, 2: 7, 3: 11, 4: 16}
    assert pool["b"] == [15]


def _slides(path: Path, metadata_title: str) -> None:
    """A three-slide deck whose metadata title is its file's name."""
    doc = pymupdf.open()
    first = doc.new_page(width=720, height=540)
    first.insert_text((60, 200), "Binary Search Trees", fontsize=40, fontname="hebo")
    first.insert_text((60, 260), "CS 61B, Lecture 6", fontsize=24, fontname="helv")
    for title, bullets in (
        ("Searching a Tree", ["Start at the root", "Go left when smaller", "Go right else"]),
        ("Inserting a Key", ["Search for the key", "Add a leaf where the search ends"]),
    ):
        slide = doc.new_page(width=720, height=540)
        slide.insert_text((60, 80), title, fontsize=32, fontname="hebo")
        for i, bullet in enumerate(bullets):
            slide.insert_text((80, 160 + 40 * i), f"• {bullet}", fontsize=20, fontname="helv")
    doc.set_metadata({"title": metadata_title})
    doc.save(path)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("metadata", ["06-trees__slides", "cs61b-lecture6", "trees-slides"])
def test_a_slide_decks_title_is_its_first_slides_largest_text(
    tmp_path: Path, count_tokens: Any, metadata: str
) -> None:
    assert usable_title(metadata) is None
    path = tmp_path / "slides.pdf"
    _slides(path, metadata)
    assert _inspect(path, count_tokens).title == "Binary Search Trees"


def test_file_name_like_titles_are_refused_and_real_ones_kept() -> None:
    for name in ("week4_notes", "cs229-notes1", "linalg2", "ml-advice", "lecture.notes"):
        assert usable_title(name) is None
    for title in ("COVID-19", "Self-Assessment", "ISO9001", "Evaluation Metrics (Classifiers)"):
        assert usable_title(title) == title
