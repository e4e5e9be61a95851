"""`lectern inspect FILE`: ingest's reading of a document, offline, for people and machines (the
service's reader runs as a process: its output is read from the file descriptors)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pymupdf as _pymupdf
import pytest

from lectern_cli.main import main

pymupdf: Any = _pymupdf

BODY = (
    "Photosynthesis turns light, water and carbon dioxide into sugar and oxygen. It happens "
    "in the chloroplasts of plant cells, mostly in the leaves."
)


def _notes(path: Path) -> None:
    doc = pymupdf.open()
    first = doc.new_page(width=595, height=842)
    first.insert_text((72, 120), "Plant Biology Notes", fontsize=26, fontname="hebo")
    first.insert_text((72, 200), "Contents", fontsize=16, fontname="hebo")
    for i, (title, page) in enumerate([("1 Light", 2), ("2 Water", 3)]):
        first.insert_text((72, 230 + 20 * i), f"{title} " + ". " * 30 + str(page), fontsize=11)
    for title in ("1 Light", "2 Water"):
        page = doc.new_page(width=595, height=842)
        page.insert_text((72, 100), title, fontsize=16, fontname="hebo")
        page.insert_textbox(pymupdf.Rect(72, 120, 520, 300), BODY, fontsize=10)
    doc.set_metadata({"title": "Microsoft Word - notes.docx"})
    doc.save(path)


@pytest.mark.timeout(60)
def test_inspect_prints_title_tree_and_chunk_kinds(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "notes.pdf"
    _notes(path)
    assert main(["inspect", str(path)]) == 0
    out = capfd.readouterr().out
    assert "title: Plant Biology Notes" in out
    assert "p2    1 Light" in out and "p3    2 Water" in out
    assert "contents page: 2 of 2 entries are headings of the tree" in out
    assert "chunks: " in out and "1 contents" in out

    assert main(["inspect", "--chunks", str(path)]) == 0
    listing = capfd.readouterr().out
    assert "p3 text       Plant Biology Notes > 2 Water" in listing
    assert "Photosynthesis turns light" in listing


@pytest.mark.timeout(60)
def test_inspect_json_for_machines(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "notes.pdf"
    _notes(path)
    assert main(["inspect", "--json", "--chunks", str(path)]) == 0
    body = json.loads(capfd.readouterr().out)
    assert body["title"] == "Plant Biology Notes" and body["pages"] == 3
    assert {"level": 2, "title": "2 Water", "page": 3} in body["headings"]
    assert body["chunks_by_kind"]["contents"] == 1
    contents = next(c for c in body["chunks"] if c["kind"] == "contents")
    assert contents["page_start"] == 1 and contents["section_path"] == []
    assert all(len(c["preview"]) <= 80 for c in body["chunks"])


def test_inspect_reports_what_ingest_would_refuse(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "empty.pdf"
    empty.write_bytes(b"")
    assert main(["inspect", str(empty)]) == 1
    assert "empty_file" in capfd.readouterr().err
    assert main(["inspect", str(tmp_path / "missing.pdf")]) == 1
    assert "no such file" in capfd.readouterr().err
