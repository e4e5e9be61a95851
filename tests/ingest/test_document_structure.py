"""Structure of long documents, on PDFs built here: a contents page is typed and never makes
headings, boilerplate repeated on every page is dropped, numbering and type sizes make the
heading tree, and the title comes from real metadata or the largest heading."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pymupdf as _pymupdf
import pytest

from lectern_common.filetype import PDF
from lectern_ingest.chunking import ChunkDraft, ChunkingConfig, chunk_units
from lectern_ingest.cleaning import repeated_blocks
from lectern_ingest.extract import extract
from lectern_ingest.extract.contents import entry
from lectern_ingest.extract.headings import is_contents_title, section_number
from lectern_ingest.extract.model import Block, Unit
from lectern_ingest.structure import inspect_document
from lectern_ingest.titles import document_title, usable_title

pymupdf: Any = _pymupdf

BODY = (
    "Cells are the basic units of life. Every organism is made of one or more cells. The "
    "membrane controls what enters and leaves, and the cytoplasm holds the organelles."
)
SECTIONS = [  # (title, level, page)
    ("1 Cells", 1, 3),
    ("1.1 Membranes", 2, 3),
    ("1.2 Organelles", 2, 4),
    ("2 Energy", 1, 5),
    ("2.1 Respiration", 2, 5),
    ("2.2 Photosynthesis", 2, 6),
]
CONTACT = "For information & support, call 1800 555 0199 or write to help@example.org"


def _text(page: Any, y: float, text: str, size: float = 10, font: str = "helv") -> None:
    page.insert_text((72, y), text, fontsize=size, fontname=font)


def _body(page: Any, y: float, text: str) -> None:
    assert page.insert_textbox(pymupdf.Rect(72, y, 520, y + 120), text, fontsize=10) >= 0


def _guide(
    path: Path,
    *,
    contents_title: str | None = "Contents",
    contact: bool = False,
    metadata_title: str | None = None,
) -> None:
    """A 6-page guide: a cover, a contents page whose entries are set bold and large (as in
    the 76-page guide whose entries became headings), then numbered sections."""
    doc = pymupdf.open()
    cover = doc.new_page(width=595, height=842)
    _text(cover, 200, "A Guide to the Cell", size=28, font="hebo")
    _text(cover, 240, "Published by the Biology Department", size=12)
    contents = doc.new_page(width=595, height=842)
    y = 100.0
    if contents_title:
        _text(contents, y, contents_title, size=18, font="hebo")
    for title, level, page in SECTIONS:
        y += 30
        size = 16 if level == 1 else 13
        dots = " " + ". " * (30 - len(title) // 2)
        _text(contents, y, f"{title}{dots}{page}", size=size, font="hebo")
    for title, level, page_number in SECTIONS:
        while doc.page_count < page_number:
            doc.new_page(width=595, height=842)
        page = doc[page_number - 1]
        top = 100 if level == 1 else 420
        _text(page, top, title, size=16 if level == 1 else 13, font="hebo")
        _body(page, top + 20, f"{title} text. {BODY}")
    topics = ["ribosomes", "vacuoles", "lysosomes", "centrioles", "plastids", "vesicles"]
    for page in doc:
        _text(page, 815, str(page.number + 1), size=8)
        if contact:
            # mid-page, between the page's own lines: no running header or footer
            assert page.insert_textbox(pymupdf.Rect(72, 330, 400, 370), CONTACT, fontsize=9) >= 0
            topic = topics[page.number]
            _text(page, 60, f"Margin note on {topic}", size=9)
            _text(page, 75, f"See also the {topic} chart", size=9)
            _text(page, 700, f"Question: what do {topic} do?", size=9)
            _text(page, 720, f"Answer: {topic} are organelles", size=9)
    if metadata_title is not None:
        doc.set_metadata({"title": metadata_title})
    doc.save(path)


def _read(path: Path, count_tokens: Any) -> tuple[Any, list[Unit], list[ChunkDraft]]:
    with extract(path, mime=PDF, password=None) as ex:
        units = list(ex.units())
    chunks = list(chunk_units(units, config=ChunkingConfig(), count_tokens=count_tokens))
    return ex, units, chunks


def _headings(units: list[Unit]) -> list[tuple[int | None, str, int | None]]:
    return [(b.level, b.text, u.page) for u in units for b in u.blocks if b.kind == "heading"]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("contents_title", ["Contents", None])
def test_a_contents_page_is_typed_and_never_makes_headings(
    tmp_path: Path, count_tokens: Any, contents_title: str | None
) -> None:
    path = tmp_path / "guide.pdf"
    _guide(path, contents_title=contents_title)
    ex, units, chunks = _read(path, count_tokens)
    assert ex.contents_pages == [2]
    assert [b.kind for b in units[1].blocks] == ["contents"]
    headings = _headings(units)
    assert all(page != 2 for _, _, page in headings)
    assert [(t, p) for _, t, p in headings if t[0].isdigit()] == [(t, p) for t, _, p in SECTIONS]
    # numbering decides the tree: "1.1" under "1", "2" closes "1.2"
    level = {t: lvl or 0 for lvl, t, _ in headings}
    assert level["1.1 Membranes"] > level["1 Cells"] == level["2 Energy"]
    contents = [c for c in chunks if c.page_start == 2]
    assert contents and all(c.kind == "contents" and c.section_path == [] for c in contents)
    assert not any(c.section_path[:1] == ["Contents"] for c in chunks)
    organelles = next(c for c in chunks if "1.2 Organelles text." in c.text)
    assert organelles.kind == "text" and organelles.section_path[-2:] == [
        "1 Cells",
        "1.2 Organelles",
    ]
    photosynthesis = next(c for c in chunks if "2.2 Photosynthesis text." in c.text)
    assert photosynthesis.section_path[-2:] == ["2 Energy", "2.2 Photosynthesis"]
    # the entries it lists check the tree: every one is a heading on its page
    assert [(e.title, e.page) for e in ex.contents_entries] == [(t, p) for t, _, p in SECTIONS]


@pytest.mark.timeout(60)
def test_a_contact_block_on_every_page_is_boilerplate(tmp_path: Path, count_tokens: Any) -> None:
    path = tmp_path / "guide.pdf"
    _guide(path, contact=True)
    _, units, chunks = _read(path, count_tokens)
    text = "\n".join(b.text for u in units for b in u.blocks)
    assert "For information & support" not in text
    assert not any("1800 555 0199" in c.text for c in chunks)
    assert "2.1 Respiration text. Cells are the basic units" in text


def test_repeated_blocks_need_a_large_share_of_pages() -> None:
    contact = "Call 1800 555 0199 for support and advice"
    pages = [[contact, f"Page {n} says something of its own"] for n in range(10)]
    pages[3] = ["Total occupied housing units", "Page 3 says something of its own"]
    found = repeated_blocks(pages)
    assert found == {contact.casefold()}
    assert not repeated_blocks([[contact]] * 2)  # two pages tell nothing


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("metadata", "title"),
    [
        ("Microsoft Word - cell_guide_final.doc", "A Guide to the Cell"),
        ("untitled", "A Guide to the Cell"),
        ("", "A Guide to the Cell"),
        # a template's leftover title, named nowhere on the first pages
        ("Packbot-P Summary Design and SOW", "A Guide to the Cell"),
        ("The Cell: A Short Guide for Year 9", "The Cell: A Short Guide for Year 9"),
    ],
)
def test_the_title_is_real_metadata_or_the_largest_heading(
    tmp_path: Path, count_tokens: Any, metadata: str, title: str
) -> None:
    path = tmp_path / "guide.pdf"
    _guide(path, metadata_title=metadata)
    structure = inspect_document(path, config=ChunkingConfig(), count_tokens=count_tokens, mime=PDF)
    assert structure.title == title
    assert structure.kinds["contents"] >= 1 and structure.unmatched_entries == []


def test_placeholder_and_fragment_titles_are_refused() -> None:
    assert usable_title("Environmental Category & Description XRT83L30IV Details for:") is None
    assert usable_title("/Users/me/Downloads/.texpadtmp/linalg2.dvi") is None
    assert usable_title("arXiv:2103.15348v2 [cs.CV] 21 Jun 2021") is None
    assert usable_title("PowerPoint Presentation") is None
    assert document_title(None, heading="Cell Biology", first_text="") == "Cell Biology"
    assert document_title("Cell Biology", heading="Cells", first_text="cell biology") == (
        "Cell Biology"
    )


def test_contents_titles_entries_and_section_numbers() -> None:
    assert is_contents_title("Table of Contents") and is_contents_title("INHALTSVERZEICHNIS")
    assert not is_contents_title("Contents of the cell") and not is_contents_title("Cells")
    parsed = entry("2.1 Roles . . . . . . . . . . . . 8")
    assert parsed is not None and (parsed.title, parsed.page, parsed.leader) == (
        "2.1 Roles",
        8,
        True,
    )
    assert entry("Preface . . . . . . . . xi") is not None
    assert entry("Alabama 45,233 46,123 47,100") is None  # a table's row of figures
    assert entry("The membrane controls what enters.") is None
    assert section_number("3.2.1 Title") == (3, 2, 1)
    assert section_number("Chapter 4: Energy") == (4,)
    assert section_number("2014 Annual report") is None


def test_a_contents_heading_in_a_flowing_document_opens_no_section(count_tokens: Any) -> None:
    units = [
        Unit(blocks=[
            Block("heading", "A Guide to the Cell", level=1),
            Block("heading", "Contents", level=1),
            Block("paragraph", "Introduction 1\nMembranes 4\nOrganelles 9"),
            Block("heading", "Introduction", level=2),
            Block("paragraph", BODY),
        ]),
    ]  # fmt: skip
    chunks = list(chunk_units(units, config=ChunkingConfig(), count_tokens=count_tokens))
    contents = next(c for c in chunks if "Membranes 4" in c.text)
    assert contents.kind == "contents" and contents.section_path == []
    body = next(c for c in chunks if "basic units of life" in c.text)
    assert body.kind == "text" and body.section_path == ["A Guide to the Cell", "Introduction"]


def test_numbering_outranks_type_sizes_in_the_section_path(count_tokens: Any) -> None:
    units = [
        Unit(page=1, blocks=[
            Block("heading", "Chapter 1. Securing data", level=2),
            Block("heading", "1.2 Current state", level=3),
            Block("paragraph", BODY),
            # set in the same size as its parent, and after a page the sample skipped
            Block("heading", "2.1 Roles", level=3),
            Block("heading", "2.1.6 Change function usage", level=3),
            Block("paragraph", "Function usage is changed with a CL command. " + BODY),
        ]),
    ]  # fmt: skip
    chunks = list(chunk_units(units, config=ChunkingConfig(), count_tokens=count_tokens))
    usage = next(c for c in chunks if "CL command" in c.text)
    assert usage.section_path == ["2.1 Roles", "2.1.6 Change function usage"]


def test_words_table_of_contents_is_contents(tmp_path: Path, count_tokens: Any) -> None:
    import docx
    from docx.enum.style import WD_STYLE_TYPE

    document: Any = docx.Document()
    document.styles.add_style("toc 1", WD_STYLE_TYPE.PARAGRAPH)
    document.add_paragraph("Contents", style="TOC Heading")
    document.add_paragraph("Introduction\t1", style="toc 1")
    document.add_paragraph("Membranes\t4", style="toc 1")
    document.add_heading("Introduction", level=1)
    document.add_paragraph(BODY)
    path = tmp_path / "guide.docx"
    document.save(str(path))
    structure = inspect_document(path, config=ChunkingConfig(), count_tokens=count_tokens)
    assert [h.title for h in structure.headings] == ["Introduction"]
    contents = [c for c in structure.chunks if c.kind == "contents"]
    assert len(contents) == 1 and "Membranes" in contents[0].text
    assert contents[0].section_path == []
    body = next(c for c in structure.chunks if "basic units of life" in c.text)
    assert body.kind == "text" and body.section_path == ["Introduction"]
