"""DOCX and PPTX extraction on documents built here with python-docx / python-pptx."""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any

import pytest

from lectern_common.errors import BadInputError
from lectern_common.filetype import DOCX, PPTX, detect_mime_path
from lectern_ingest.chunking import ChunkingConfig, chunk_units
from lectern_ingest.extract import extract


def _docx(path: Path) -> None:
    import docx

    document: Any = docx.Document()
    document.core_properties.title = "Cell Biology Notes"
    document.add_heading("Chapter 5 Cells", level=1)
    document.add_paragraph("Cells are the basic unit of life.")
    document.add_heading("5.3 Mitosis", level=2)
    document.add_paragraph("Mitosis divides one nucleus into two.")
    table = document.add_table(rows=3, cols=3)
    for r, row in enumerate([("Phase", "Event", "Length"), ("Prophase", "Condense", "1 h")]):
        for c, text in enumerate(row):
            table.cell(r, c).text = text
    merged = table.cell(2, 0).merge(table.cell(2, 1))
    merged.text = "Telophase and cytokinesis"
    table.cell(2, 2).text = "2 h"
    document.add_paragraph("After the table.")
    document.add_heading("Chapter 6 Energy", level=1)
    document.add_paragraph("ATP stores energy.")
    document.save(str(path))


def _pptx(path: Path) -> None:
    from pptx import Presentation
    from pptx.util import Inches

    deck: Any = Presentation()
    for n, (title, body, notes) in enumerate(
        [
            ("Photosynthesis", "Light becomes chemical energy", "Ask about chlorophyll."),
            ("Calvin cycle", "Carbon fixation in the stroma", ""),
        ],
        start=1,
    ):
        slide = deck.slides.add_slide(deck.slide_layouts[1])
        slide.shapes.title.text = title
        slide.placeholders[1].text = body
        if notes:
            slide.notes_slide.notes_text_frame.text = notes
        if n == 2:
            shape = slide.shapes.add_table(2, 2, Inches(1), Inches(4), Inches(4), Inches(1))
            for r, row in enumerate([("Input", "Output"), ("CO2", "G3P")]):
                for c, text in enumerate(row):
                    shape.table.cell(r, c).text = text
    title_only = deck.slides.add_slide(deck.slide_layouts[5])
    title_only.shapes.title.text = "Questions?"
    deck.save(str(path))


@pytest.mark.timeout(60)
def test_docx_headings_tables_and_order(tmp_path: Path, count_tokens: Any) -> None:
    path = tmp_path / "notes.docx"
    _docx(path)
    assert detect_mime_path(path) == DOCX
    with extract(path, mime=DOCX, password=None) as ex:
        assert ex.title == "Cell Biology Notes"
        assert [(e.level, e.title) for e in ex.outline] == [
            (1, "Chapter 5 Cells"),
            (2, "5.3 Mitosis"),
            (1, "Chapter 6 Energy"),
        ]
        blocks = [b for u in ex.units() for b in u.blocks]
    kinds = [b.kind for b in blocks]
    assert kinds.index("table") == [b.text for b in blocks].index("After the table.") - 1
    table = next(b for b in blocks if b.kind == "table")
    assert table.text.split("\n") == [
        "Phase | Event | Length",
        "Prophase | Condense | 1 h",
        "Telophase and cytokinesis | 2 h",
    ]
    with extract(path, mime=DOCX, password=None) as ex:
        chunks = list(chunk_units(ex.units(), config=ChunkingConfig(), count_tokens=count_tokens))
    by_text = {c.text.split("\n")[0]: c for c in chunks}
    assert by_text["Mitosis divides one nucleus into two."].section_path == [
        "Chapter 5 Cells",
        "5.3 Mitosis",
    ]
    assert by_text["ATP stores energy."].section_path == ["Chapter 6 Energy"]
    assert [c.kind for c in chunks].count("table") == 1


@pytest.mark.timeout(60)
def test_pptx_slides_titles_notes_and_tables(tmp_path: Path, count_tokens: Any) -> None:
    path = tmp_path / "deck.pptx"
    _pptx(path)
    assert detect_mime_path(path) == PPTX
    with extract(path, mime=PPTX, password=None) as ex:
        assert ex.page_count == ex.total_units == 3
        units = list(ex.units())
    assert [u.slide for u in units] == [1, 2, 3]
    first = [(b.kind, b.text) for b in units[0].blocks]
    assert first[0] == ("heading", "Photosynthesis")
    assert ("paragraph", "Light becomes chemical energy") in first
    assert ("paragraph", "Speaker notes: Ask about chlorophyll.") in first
    assert ("table", "Input | Output\nCO2 | G3P") in [(b.kind, b.text) for b in units[1].blocks]
    with extract(path, mime=PPTX, password=None) as ex:
        chunks = list(chunk_units(ex.units(), config=ChunkingConfig(), count_tokens=count_tokens))
    assert {c.slide for c in chunks} == {1, 2, 3}
    assert all(
        c.section_path in (["Photosynthesis"], ["Calvin cycle"], ["Questions?"]) for c in chunks
    )
    assert [c.text for c in chunks if c.slide == 3] == ["Questions?"]  # title-only slide


@pytest.mark.timeout(60)
def test_pptx_content_placeholder_with_index_0_is_body_not_title(
    tmp_path: Path, count_tokens: Any
) -> None:
    """A content placeholder written as ``<p:ph/>`` (type "obj", index 0, as some exporters
    write it) is what python-pptx calls the slide's title; its lines are the slide's body and
    must be indexed, not hidden in the heading path."""
    from pptx import Presentation

    deck: Any = Presentation()
    slide = deck.slides.add_slide(deck.slide_layouts[1])
    slide.shapes.title.text = ""
    body = slide.placeholders[1]
    body.text = "Code 660: Astrophysics Science Division\nCode 670: Heliophysics Science Division"
    title = slide.shapes.title
    title._element.getparent().remove(title._element)  # no title placeholder at all
    ph = body._element.nvSpPr.nvPr.ph
    for attribute in list(ph.attrib):
        del ph.attrib[attribute]  # <p:ph/>
    path = tmp_path / "org.pptx"
    deck.save(str(path))
    with extract(path, mime=PPTX, password=None) as ex:
        units = list(ex.units())
        assert not any(b.kind == "heading" for b in units[0].blocks)
    with extract(path, mime=PPTX, password=None) as ex:
        chunks = list(chunk_units(ex.units(), config=ChunkingConfig(), count_tokens=count_tokens))
    assert any("Code 670: Heliophysics Science Division" in c.text for c in chunks)


@pytest.mark.timeout(60)
def test_broken_office_files_are_corrupt(tmp_path: Path) -> None:
    good = tmp_path / "deck.pptx"
    _pptx(good)
    broken = tmp_path / "broken.pptx"
    with zipfile.ZipFile(good) as src, zipfile.ZipFile(broken, "w") as dst:
        for item in src.infolist():
            if item.filename != "ppt/presentation.xml":
                dst.writestr(item, src.read(item))
    assert detect_mime_path(broken) == PPTX  # still a PPTX by its members
    with pytest.raises(BadInputError) as err:
        extract(broken, mime=PPTX, password=None)
    assert err.value.reason == "corrupt"
    truncated = tmp_path / "truncated.docx"
    _docx(truncated)
    truncated.write_bytes(truncated.read_bytes()[:2000])
    with pytest.raises(BadInputError) as err:
        extract(truncated, mime=DOCX, password=None)
    assert err.value.reason == "corrupt"
