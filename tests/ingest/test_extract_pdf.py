"""PDF extraction on documents built here with PyMuPDF (headings, columns, tables, furniture)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pymupdf as _pymupdf
import pytest

from lectern_common.errors import BadInputError
from lectern_common.filetype import PDF
from lectern_ingest.chunking import ChunkingConfig, chunk_units
from lectern_ingest.extract import Block, extract

pymupdf: Any = _pymupdf

LOREM = (
    "Cells are the basic units of life. Every organism is made of one or more cells. "
    "The cell membrane controls what enters and leaves. Inside, the cytoplasm holds the "
    "organelles that keep the cell alive."
)


def _body(page: Any, rect: tuple[float, float, float, float], text: str, size: float = 10) -> None:
    assert page.insert_textbox(pymupdf.Rect(*rect), text, fontsize=size, fontname="helv") >= 0


def _furniture(page: Any, number: int) -> None:
    page.insert_text((72, 40), "Biology 101 - Course Reader", fontsize=8, fontname="helv")
    page.insert_text((300, 810), str(number), fontsize=8, fontname="helv")


def _textbook(path: Path) -> None:
    doc = pymupdf.open()
    for n in range(1, 7):
        page = doc.new_page(width=595, height=842)
        _furniture(page, n)
        if n == 1:
            page.insert_text((72, 100), "Chapter 1 Cells", fontsize=22, fontname="hebo")
        title = ["Membranes", "Organelles", "Transport", "Energy", "Division", "Signals"][n - 1]
        page.insert_text((72, 140), f"1.{n} {title}", fontsize=15, fontname="hebo")
        _body(
            page,
            (72, 160, 520, 400),
            f"Section {n} text. " + LOREM + " The mito-\nchondria make energy.",
        )
        _body(page, (72, 420, 520, 700), LOREM)
    doc.save(path)


def _two_columns(path: Path) -> None:
    doc = pymupdf.open()
    page = doc.new_page(width=595, height=842)
    page.insert_text((72, 80), "A Two Column Article", fontsize=20, fontname="hebo")
    left = " ".join(f"Left column sentence {i}." for i in range(1, 31))
    right = " ".join(f"Right column sentence {i}." for i in range(1, 31))
    _body(page, (72, 120, 290, 420), left[: len(left) // 2])
    _body(page, (72, 430, 290, 780), left[len(left) // 2 :])
    _body(page, (310, 120, 525, 420), right[: len(right) // 2])
    _body(page, (310, 430, 525, 780), right[len(right) // 2 :])
    doc.save(path)


def _table(path: Path) -> None:
    doc = pymupdf.open()
    page = doc.new_page(width=595, height=842)
    _body(page, (72, 60, 520, 120), "The measurements below were taken in spring. " + LOREM)
    page.insert_text((72, 150), "Table 1: Pond measurements", fontsize=10, fontname="helv")
    rows = [("Pond", "Depth", "Ducks")] + [(f"Pond {i}", f"{i}.5 m", str(i * 3)) for i in range(6)]
    x = [72, 222, 372, 522]
    y0, h = 160, 22
    for r, row in enumerate(rows):
        for c, cell in enumerate(row):
            page.insert_text((x[c] + 4, y0 + r * h + 15), cell, fontsize=10, fontname="helv")
    for r in range(len(rows) + 1):
        page.draw_line((x[0], y0 + r * h), (x[-1], y0 + r * h))
    for xc in x:
        page.draw_line((xc, y0), (xc, y0 + len(rows) * h))
    _body(page, (72, 360, 520, 500), "After the table the text goes on. " + LOREM)
    doc.save(path)


@pytest.mark.timeout(60)
def test_headings_pages_furniture_and_dehyphenation(tmp_path: Path) -> None:
    path = tmp_path / "book.pdf"
    _textbook(path)
    with extract(path, mime=PDF, password=None) as ex:
        assert ex.page_count == ex.total_units == 6
        units = list(ex.units())
    assert [u.page for u in units] == [1, 2, 3, 4, 5, 6]
    headings = [(b.level, b.text) for u in units for b in u.blocks if b.kind == "heading"]
    assert headings[0] == (1, "Chapter 1 Cells")
    assert (2, "1.3 Transport") in headings
    text = "\n".join(b.text for u in units for b in u.blocks)
    assert "Course Reader" not in text
    assert not any(b.text.strip().isdigit() for u in units for b in u.blocks)
    assert "mitochondria make energy" in text


@pytest.mark.timeout(60)
def test_section_paths_reach_the_chunks(tmp_path: Path, count_tokens: Any) -> None:
    path = tmp_path / "book.pdf"
    _textbook(path)
    with extract(path, mime=PDF, password=None) as ex:
        chunks = list(chunk_units(ex.units(), config=ChunkingConfig(), count_tokens=count_tokens))
    third = [c for c in chunks if "Section 3 text." in c.text]
    assert third and third[0].section_path == ["Chapter 1 Cells", "1.3 Transport"]
    assert third[0].page_start == 3 and third[0].chapter == "Chapter 1 Cells"


@pytest.mark.timeout(60)
def test_two_columns_are_read_left_then_right(tmp_path: Path) -> None:
    path = tmp_path / "columns.pdf"
    _two_columns(path)
    with extract(path, mime=PDF, password=None) as ex:
        text = " ".join(b.text for u in ex.units() for b in u.blocks)
    positions = [text.index(f"Left column sentence {i}.") for i in (1, 15, 30)]
    positions += [text.index(f"Right column sentence {i}.") for i in (1, 15, 30)]
    assert positions == sorted(positions)
    assert text.index("A Two Column Article") < positions[0]


@pytest.mark.timeout(60)
def test_table_is_kept_whole_with_its_caption_and_out_of_the_text(tmp_path: Path) -> None:
    path = tmp_path / "table.pdf"
    _table(path)
    with extract(path, mime=PDF, password=None) as ex:
        blocks: list[Block] = [b for u in ex.units() for b in u.blocks]
    tables = [b for b in blocks if b.kind == "table"]
    assert len(tables) == 1
    assert tables[0].caption == "Table 1: Pond measurements"
    assert tables[0].text.split("\n")[0] == "Pond | Depth | Ducks"
    assert tables[0].text.split("\n")[3] == "Pond 2 | 2.5 m | 6"
    others = " ".join(b.text for b in blocks if b.kind != "table")
    assert "Pond 2" not in others and "Table 1" not in others
    kinds = [b.kind for b in blocks]
    assert kinds.index("table") < max(i for i, b in enumerate(blocks) if "goes on" in b.text)


@pytest.mark.timeout(60)
def test_passwords(tmp_path: Path) -> None:
    doc = pymupdf.open()
    _body(doc.new_page(), (72, 72, 500, 300), LOREM)
    locked, owner_only = tmp_path / "locked.pdf", tmp_path / "owner.pdf"
    doc.save(locked, encryption=pymupdf.PDF_ENCRYPT_AES_256, user_pw="secret", owner_pw="boss")
    doc.save(
        owner_only,
        encryption=pymupdf.PDF_ENCRYPT_AES_256,
        owner_pw="boss",
        permissions=pymupdf.PDF_PERM_PRINT,
    )
    for password, reason in [(None, "encrypted"), ("wrong", "wrong_password")]:
        with pytest.raises(BadInputError) as err:
            extract(locked, mime=PDF, password=password)
        assert err.value.reason == reason
    for path, password in [(locked, "secret"), (owner_only, None)]:
        with extract(path, mime=PDF, password=password) as ex:
            assert "basic units of life" in " ".join(b.text for u in ex.units() for b in u.blocks)


@pytest.mark.timeout(60)
def test_image_only_pages_are_counted_not_silently_empty(tmp_path: Path) -> None:
    pixmap = pymupdf.Pixmap(pymupdf.csGRAY, pymupdf.IRect(0, 0, 40, 40), False)
    pixmap.clear_with(200)
    doc = pymupdf.open()
    _body(doc.new_page(), (72, 72, 500, 300), LOREM)
    doc.new_page().insert_image(pymupdf.Rect(50, 50, 500, 700), pixmap=pixmap)
    path = tmp_path / "scan.pdf"
    doc.save(path)
    with extract(path, mime=PDF, password=None, ocr=False) as ex:
        units = list(ex.units())
        assert ex.summary.skipped_pages == [2]
    assert units[0].blocks and not units[1].blocks

    only_scan = tmp_path / "only-scan.pdf"
    doc.delete_page(0)
    doc.save(only_scan)
    with (
        extract(only_scan, mime=PDF, password=None, ocr=False) as ex,
        pytest.raises(BadInputError) as err,
    ):
        list(ex.units())
    assert err.value.reason == "no_text"


@pytest.mark.timeout(60)
def test_broken_files(tmp_path: Path) -> None:
    empty, garbage = tmp_path / "empty.pdf", tmp_path / "garbage.pdf"
    empty.write_bytes(b"")
    garbage.write_bytes(b"%PDF-1.4\n" + bytes(range(256)) * 20)
    with pytest.raises(BadInputError) as err:
        extract(empty, mime=PDF, password=None)
    assert err.value.reason == "empty_file"
    with pytest.raises(BadInputError) as err, extract(garbage, mime=PDF, password=None) as ex:
        list(ex.units())
    assert err.value.reason in {"corrupt", "no_text"}
