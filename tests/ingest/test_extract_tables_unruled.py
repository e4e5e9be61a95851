"""Tables a PDF draws without a grid (booktabs rules, white-space columns), built here with
PyMuPDF: read by row and column, wrapped labels rejoined, prose never taken for a table."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pymupdf as _pymupdf
import pytest

from lectern_common.filetype import PDF
from lectern_ingest.extract import Block, extract

pymupdf: Any = _pymupdf

PROSE = (
    "Models were trained three times with different seeds and the median is reported. "
    "The development split was used to choose the learning rate, and the test split was "
    "read once at the end. Scores differ by less than a point between runs."
)


def _blocks(path: Path) -> list[Block]:
    with extract(path, mime=PDF, password=None) as ex:
        return [b for u in ex.units() for b in u.blocks]


def _cells(table: Block) -> list[list[str]]:
    return [row.split(" | ") for row in table.text.split("\n")]


def _row(page: Any, y: float, cells: list[tuple[float, str]], size: float = 9) -> None:
    for x, text in cells:
        page.insert_text((x, y), text, fontsize=size, fontname="helv")


def _booktabs(path: Path) -> None:
    doc = pymupdf.open()
    page = doc.new_page(width=595, height=842)
    assert page.insert_textbox(pymupdf.Rect(72, 60, 520, 140), PROSE, fontsize=10) >= 0
    page.insert_text((72, 160), "Table 2: Accuracy on the benchmark", fontsize=10, fontname="helv")
    columns = [72, 260, 340, 420]
    page.draw_line((70, 170), (480, 170), width=0.9)
    _row(page, 183, list(zip(columns, ["Model", "Dev", "Test", "F1"], strict=True)))
    page.draw_line((70, 189), (480, 189), width=0.5)
    rows = [
        ("BERT", "78.2", "80.1", "0.71"),
        ("TAPAS", "81.0", "82.4", "0.74"),
        ("TableFormer", "83.9", "84.6", "0.78"),
        ("Majority class", "50.3", "50.1", "0.33"),
    ]
    for i, row in enumerate(rows):
        _row(page, 203 + 14 * i, list(zip(columns, row, strict=True)))
    page.draw_line((70, 252), (480, 252), width=0.9)
    assert page.insert_textbox(pymupdf.Rect(72, 270, 520, 400), PROSE, fontsize=10) >= 0
    doc.save(path)


def _wrapped_labels(path: Path) -> None:
    doc = pymupdf.open()
    page = doc.new_page(width=595, height=842)
    page.insert_text((72, 80), "Table 1: Error rates by method", fontsize=10, fontname="helv")
    columns = [72, 250, 330, 410]
    page.draw_line((70, 90), (470, 90), width=0.9)
    _row(page, 103, list(zip(columns, ["Method", "Train", "Valid", "Test"], strict=True)))
    page.draw_line((70, 109), (470, 109), width=0.5)
    lines = [
        ("Logistic regression", "12.1", "13.4", "13.9"),
        ("with an L2 penalty", "", "", ""),
        ("Gradient boosted", "", "", ""),
        ("decision trees", "8.2", "10.5", "10.8"),
        ("Nearest neighbours", "15.0", "16.2", "16.6"),
        ("Linear SVM", "11.7", "12.9", "13.1"),
    ]
    for i, row in enumerate(lines):
        _row(page, 123 + 12 * i, [(x, t) for x, t in zip(columns, row, strict=True) if t])
    page.draw_line((70, 196), (470, 196), width=0.9)
    doc.save(path)


def _white_space(path: Path) -> None:
    doc = pymupdf.open()
    page = doc.new_page(width=612, height=792)
    assert page.insert_textbox(pymupdf.Rect(72, 60, 540, 130), PROSE, fontsize=11) >= 0
    _row(page, 160, [(180, "Living area (feet2)"), (300, "#bedrooms"), (380, "Price (1000$s)")], 11)
    for i, (area, beds, price) in enumerate(
        [("2104", "3", "400"), ("1600", "3", "330"), ("2400", "3", "369"), ("1416", "2", "232")]
    ):
        _row(page, 178 + 15 * i, [(200, area), (325, beds), (395, price)], 11)
    assert page.insert_textbox(pymupdf.Rect(72, 260, 540, 330), PROSE, fontsize=11) >= 0
    doc.save(path)


def _two_column_article(path: Path) -> None:
    """Two columns of prose with numbers in it, between a running header's rule and a
    footer's rule of the same extent: nothing here is a table."""
    doc = pymupdf.open()
    page = doc.new_page(width=595, height=842)
    page.insert_text((72, 50), "Journal of Tables 12 (2024) 101-114", fontsize=8, fontname="helv")
    page.draw_line((72, 58), (523, 58), width=0.5)
    sentences = [
        f"In trial {i} we measured {i * 7} samples at {20 + i} degrees over {i + 2} days."
        for i in range(1, 40)
    ]
    left, right = " ".join(sentences[:20]), " ".join(sentences[20:])
    assert page.insert_textbox(pymupdf.Rect(72, 70, 290, 770), left, fontsize=10) >= 0
    assert page.insert_textbox(pymupdf.Rect(305, 70, 523, 770), right, fontsize=10) >= 0
    page.draw_line((72, 780), (523, 780), width=0.5)
    page.insert_text((290, 795), "101", fontsize=8, fontname="helv")
    doc.save(path)


@pytest.mark.timeout(60)
def test_booktabs_table_is_read_by_row_and_column(tmp_path: Path) -> None:
    path = tmp_path / "booktabs.pdf"
    _booktabs(path)
    blocks = _blocks(path)
    tables = [b for b in blocks if b.kind == "table"]
    assert len(tables) == 1
    assert tables[0].caption == "Table 2: Accuracy on the benchmark"
    assert _cells(tables[0]) == [
        ["Model", "Dev", "Test", "F1"],
        ["BERT", "78.2", "80.1", "0.71"],
        ["TAPAS", "81.0", "82.4", "0.74"],
        ["TableFormer", "83.9", "84.6", "0.78"],
        ["Majority class", "50.3", "50.1", "0.33"],
    ]
    others = " ".join(b.text for b in blocks if b.kind != "table")
    assert "TAPAS" not in others and "Table 2" not in others and "82.4" not in others
    assert others.count("Scores differ by less than a point") == 2


@pytest.mark.timeout(60)
def test_labels_wrapped_over_two_lines_are_one_cell(tmp_path: Path) -> None:
    path = tmp_path / "wrapped.pdf"
    _wrapped_labels(path)
    tables = [b for b in _blocks(path) if b.kind == "table"]
    assert len(tables) == 1 and tables[0].caption == "Table 1: Error rates by method"
    assert _cells(tables[0]) == [
        ["Method", "Train", "Valid", "Test"],
        ["Logistic regression with an L2 penalty", "12.1", "13.4", "13.9"],
        ["Gradient boosted decision trees", "8.2", "10.5", "10.8"],
        ["Nearest neighbours", "15.0", "16.2", "16.6"],
        ["Linear SVM", "11.7", "12.9", "13.1"],
    ]


@pytest.mark.timeout(60)
def test_columns_aligned_with_white_space_make_a_table(tmp_path: Path) -> None:
    path = tmp_path / "aligned.pdf"
    _white_space(path)
    blocks = _blocks(path)
    tables = [b for b in blocks if b.kind == "table"]
    assert len(tables) == 1
    assert _cells(tables[0]) == [
        ["Living area (feet2)", "#bedrooms", "Price (1000$s)"],
        ["2104", "3", "400"],
        ["1600", "3", "330"],
        ["2400", "3", "369"],
        ["1416", "2", "232"],
    ]
    assert "1416" not in " ".join(b.text for b in blocks if b.kind != "table")


@pytest.mark.timeout(60)
def test_two_column_prose_with_numbers_is_not_a_table(tmp_path: Path) -> None:
    path = tmp_path / "article.pdf"
    _two_column_article(path)
    blocks = _blocks(path)
    assert [b for b in blocks if b.kind == "table"] == []
    text = " ".join(b.text for b in blocks)
    first, last = text.index("In trial 1 we"), text.index("In trial 39 we")
    assert first < text.index("In trial 20 we") < text.index("In trial 21 we") < last


@pytest.mark.shared_data
@pytest.mark.timeout(120)
def test_tableformer_results_by_row_and_column(shared_data: Path) -> None:
    blocks = _blocks(shared_data / "docs2" / "tableformer-acl-paper-2col-10p.pdf")
    tables = {(b.caption or "").split(":")[0]: _cells(b) for b in blocks if b.kind == "table"}

    def cell(table: str, row: str, column: str) -> str:
        header, *rows = tables[table]
        line = next(r for r in rows if r[0] == row)
        return line[header.index(column)]

    assert cell("Table 1", "TAPASLARGE", "After Perturb V P") == "15.1%"
    assert cell("Table 1", "TABLEFORMERBASE", "Before Perturb SEQ") == "39.7"
    assert cell("Table 1", "TABLEFORMERLARGE inter", "Before Perturb ALLd") == "75.9"
    assert cell("Table 2", "TAPASBASE", "After Perturb testcomplex") == "65.2"
    assert cell("Table 2", "TABLEFORMERLARGE inter", "Before Perturb dev") == "82.0"
    assert cell("Table 3", "TAPASLARGE inter-sqa", "test") == "50.4"
    assert cell("Table 5", "TABLEFORMERBASE-SO", "gp") == "59.8"
    paragraphs = " ".join(b.text for b in blocks if b.kind == "paragraph")
    assert "TAPASLARGE inter 70.6" not in paragraphs
