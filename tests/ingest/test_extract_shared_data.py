"""Every real document in ../shared/data/docs: sensible content or the right failure reason."""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from lectern_testing.shared_reads import shared_read

from lectern_common.errors import BadInputError
from lectern_common.filetype import detect_mime_path
from lectern_ingest.chunking import ChunkDraft, ChunkingConfig, chunk_units
from lectern_ingest.extract import Extraction, Unit, extract
from lectern_ingest.language import detect_language

pytestmark = [pytest.mark.shared_data, pytest.mark.timeout(120)]

Check = Callable[[Path, Any], None]
HAS_TESSERACT = shutil.which("tesseract") is not None


def _open(path: Path, password: str | None = None) -> tuple[Extraction, list[Unit], str]:
    """The document's extraction and units: without a password, as the other shared-document
    tests read it (``lectern_testing.shared_reads``: once for all of them)."""
    if password is None:
        read = shared_read(path)
        ex, units = read.extraction, read.units
    else:
        ex = extract(path, mime=detect_mime_path(path), password=password)
        units = list(ex.units())
        ex.close()
    return ex, units, "\n".join(b.text for u in units for b in u.blocks)


def _chunks(path: Path, count_tokens: Any) -> list[ChunkDraft]:
    units = shared_read(path).units
    return list(chunk_units(iter(units), config=ChunkingConfig(), count_tokens=count_tokens))


def _reason(path: Path, password: str | None = None) -> str:
    with pytest.raises(BadInputError) as err:
        _open(path, password)
    return err.value.reason


def _headings(units: list[Unit]) -> list[tuple[int | None, str]]:
    return [(b.level, b.text) for u in units for b in u.blocks if b.kind == "heading"]


def check_turner(path: Path, count_tokens: Any) -> None:
    ex, units, text = _open(path)
    assert ex.page_count == 14 and [u.page for u in units] == list(range(1, 15))
    assert "Turner syndrome" in text and detect_language(text) == "en"
    assert "Abstract" in [h for _, h in _headings(units)]


def check_fda(path: Path, count_tokens: Any) -> None:
    ex, _, text = _open(path)
    assert ex.page_count == 68 and "Labeling" in text
    # the closing slide is only an image: counted (or OCRed), never silently empty
    assert 68 in (ex.summary.ocr_pages if HAS_TESSERACT else ex.summary.skipped_pages)


def check_textbook(path: Path, count_tokens: Any) -> None:
    ex, units, text = _open(path)
    assert ex.page_count == 48 and [u.page for u in units] == list(range(1, 49))
    headings = _headings(units)
    assert headings[0][0] == 1 and headings[0][1].startswith("Chapter 2: Mathematical Induction")
    titles = [h for _, h in headings]
    assert {"2.1 Introduction", "2.1.1 Objectives", "2.1.3 Motivation"} <= set(titles)
    assert not re.search(r"^\d+ CHAPTER 2\.$", text, re.MULTILINE)  # running header removed
    assert "\ufb01" not in text and "first" in text
    chunks = _chunks(path, count_tokens)
    intro = next(c for c in chunks if "This chapter marks our first big step" in c.text)
    assert intro.page_start == 1 and intro.section_path[-1] == "2.1 Introduction"
    assert intro.chapter is not None and intro.chapter.startswith("Chapter 2")
    motivation = [c for c in chunks if c.section_path[-1:] == ["2.1.3 Motivation"]]
    assert motivation and all(2 <= (c.page_start or 0) <= 4 for c in motivation)
    assert max(c.token_count for c in chunks) <= 256


def check_openstax(path: Path, count_tokens: Any) -> None:
    _, units, text = _open(path)
    assert len(units) == 1 and "EXERCISES" in text


def check_geotopo(path: Path, count_tokens: Any) -> None:
    ex, units, text = _open(path)
    assert ex.page_count == 117 and len(ex.outline) >= 30
    assert "1.1 Topologische Räume" in [h for _, h in _headings(units)]
    assert detect_language(text) == "de"
    assert "\ufb01" not in text and "ü" in text


def check_tracemonkey(path: Path, count_tokens: Any) -> None:
    _, units, text = _open(path)
    assert len(units) == 14
    titles = [h for _, h in _headings(units)]
    assert "Abstract" in titles and "1. Introduction" in titles
    # two columns: the abstract (left column) comes before the introduction
    assert text.index("Abstract") < text.index("1. Introduction")


def check_redbook(path: Path, count_tokens: Any) -> None:
    _, units, _ = _open(path)
    tables = [b for u in units for b in u.blocks if b.kind == "table"]
    assert any(t.caption == "Table 2-1 FUNCTION_USAGE view" for t in tables)
    function_usage = next(t for t in tables if t.caption == "Table 2-1 FUNCTION_USAGE view")
    assert function_usage.text.split("\n")[0] == "Column name | Data type | Description"


def check_ca_warn(path: Path, count_tokens: Any) -> None:
    chunks = _chunks(path, count_tokens)
    tables = [c for c in chunks if c.kind == "table"]
    assert len(tables) >= 16 and {c.page_start for c in tables} == set(range(1, 17))
    header = "Notice Date | Effective | Received | Company | City | No. Of | Layoff/Closure"
    warn = [c for c in tables if c.text.split("\n")[0] == header]
    assert {c.page_start for c in warn} == set(range(1, 16))  # page 16: the monthly summary
    rows = [r for c in warn for r in c.text.split("\n")[1:]]
    assert all(r.count(" | ") == 6 for r in rows)  # rows stay whole, never cut across chunks
    assert any(
        r.startswith("06/22/2015 | 03/25/2016 | 07/01/2015 | Maxim Integrated") for r in rows
    )
    assert all(c.token_count <= 256 for c in tables)


def check_irs(path: Path, count_tokens: Any) -> None:
    read = shared_read(path)
    assert read.extraction.page_count == 400
    start = time.perf_counter()
    chunks = _chunks(path, count_tokens)
    elapsed = read.seconds + time.perf_counter() - start  # extracting, then chunking
    assert elapsed < 60, f"400 pages took {elapsed:.1f}s"  # ~5 s idle on 2 cores
    # page 400 is blank
    assert chunks[-1].page_end == 399 and max(c.token_count for c in chunks) <= 256
    # the flat outline gets its levels from the section numbers
    authority = ["2.3.59.1 Program Scope and Objectives", "2.3.59.1.2 Authority"]
    assert any(c.section_path == authority and c.page_start == 7 for c in chunks)


def check_scanned(path: Path, count_tokens: Any) -> None:
    if HAS_TESSERACT:
        ex, _, text = _open(path)
        assert ex.summary.ocr_pages == [1] and text.strip()
    else:
        assert _reason(path) == "no_text"


def check_garbage_ocr(path: Path, count_tokens: Any) -> None:
    _, units, text = _open(path)
    assert len(units) == 1 and "Foundation" in text


def check_arabic(path: Path, count_tokens: Any) -> None:
    _, _, text = _open(path)
    assert detect_language(text) == "ar"
    assert not re.search(r"[\ufb50-\ufdff\ufe70-\ufefe]", text)  # presentation forms folded


def check_cjk(path: Path, count_tokens: Any) -> None:
    ex, _, text = _open(path)
    assert ex.page_count == 3 and "日" in text and "あ" in text


def check_userpw(path: Path, count_tokens: Any) -> None:
    assert _reason(path) == "encrypted"
    assert _reason(path, "not-it") == "wrong_password"
    _, _, text = _open(path, "openpassword")
    assert "Lorem ipsum" in text


def check_rc4(path: Path, count_tokens: Any) -> None:
    assert _reason(path) == "encrypted"
    _, _, text = _open(path, "foo")
    assert "Secret" in text


def check_owner_only(path: Path, count_tokens: Any) -> None:
    _, units, text = _open(path)
    assert len(units) == 2 and "LayoutParser" in text


def check_empty(path: Path, count_tokens: Any) -> None:
    assert _reason(path) == "empty_file"


def check_broken_xref(path: Path, count_tokens: Any) -> None:
    _, _, text = _open(path)
    assert "Reduced test-case" in text


def check_evil_xobjects(path: Path, count_tokens: Any) -> None:
    start = time.perf_counter()
    _, _, text = _open(path)
    assert "Hello world" in text and time.perf_counter() - start < 10


def check_corrupted(path: Path, count_tokens: Any) -> None:
    _, _, text = _open(path)
    assert "Beautiful is better than ugly." in text


def check_epub(path: Path, count_tokens: Any) -> None:
    ex, units, text = _open(path)
    assert ex.title == "Winter Sports in Switzerland"
    assert ex.page_count is not None and len(units) == ex.page_count > 100
    assert "CHAPTER I THE SUN-SEEKER" in [h for _, h in _headings(units)]
    assert "skating" in text.lower()


def check_docx(path: Path, count_tokens: Any) -> None:
    _, units, _ = _open(path)
    tables = [b.text.split("\n") for u in units for b in u.blocks if b.kind == "table"]
    assert len(tables) == 5
    assert tables[1][1] == "Cell 1.0 | Merged Cell 1.1 1.2"  # horizontal merge kept once
    assert tables[3][1:3] == [
        "Cell 1.0 | Merged Cell 1.1 2.1 | Cell 1.2",
        "Cell 2.0 | Merged Cell 1.1 2.1 | Cell 2.2",
    ]


def check_nasa_pptx(path: Path, count_tokens: Any) -> None:
    ex, units, text = _open(path)
    assert ex.page_count == 1 and [u.slide for u in units] == [1]
    assert "Sciences and Exploration Directorate" in text
    assert all(c.slide == 1 for c in _chunks(path, count_tokens))


def check_malformed_pptx(path: Path, count_tokens: Any) -> None:
    # The "malformed" fixture is a placeholder its layout lacks: python-pptx reads it, so
    # its text is indexed rather than the file being rejected as corrupt.
    _, units, _ = _open(path)
    assert [u.slide for u in units] == [1]
    assert _headings(units) == [(1, "Test Slide")]


def check_wikipedia(path: Path, count_tokens: Any) -> None:
    _, units, text = _open(path)
    titles = [h for _, h in _headings(units)]
    assert {"Etymology", "Taxonomy", "Behaviour"} <= set(titles)
    assert "common name for numerous species of waterfowl" in text
    assert "Jump to" not in text and "Main page" not in text
    chunks = _chunks(path, count_tokens)
    assert any(c.section_path[-1:] == ["Taxonomy"] for c in chunks)


CHECKS: dict[str, Check] = {
    "turner-syndrome-review-2col.pdf": check_turner,
    "fda-cder-drug-labeling-slides-68p.pdf": check_fda,
    "textbook-ch2-induction-48p.pdf": check_textbook,
    "openstax-calculus-p273.pdf": check_openstax,
    "geotopo-lecture-notes-de-117p.pdf": check_geotopo,
    "tracemonkey-paper-2col-14p.pdf": check_tracemonkey,
    "ibm-redbook-sampled-18p.pdf": check_redbook,
    "ca-warn-report-table-16p.pdf": check_ca_warn,
    "irs-manual-400p.pdf": check_irs,
    "scanned-no-textlayer.pdf": check_scanned,
    "scanned-with-garbage-ocr.pdf": check_garbage_ocr,
    "arabic-rtl.pdf": check_arabic,
    "cjk-vertical-3p.pdf": check_cjk,
    "encrypted-userpw-openpassword.pdf": check_userpw,
    "encrypted-rc4-40-foo.pdf": check_rc4,
    "owner-pw-copy-protected-2p.pdf": check_owner_only,
    "empty-0-bytes.pdf": check_empty,
    "broken-xref-missing.pdf": check_broken_xref,
    "evil-recursive-xobjects.pdf": check_evil_xobjects,
    "corrupted-recoverable.pdf": check_corrupted,
    "other/winter-sports-gutenberg.epub": check_epub,
    "other/word-tables.docx": check_docx,
    "other/nasa-science-org-1p.pptx": check_nasa_pptx,
    "other/malformed.pptx": check_malformed_pptx,
    "other/wikipedia-duck.html": check_wikipedia,
}


def test_every_shared_document_has_a_check(shared_data: Path) -> None:
    docs = shared_data / "docs"
    files = [p for p in docs.rglob("*") if p.is_file() and p.name != "MANIFEST.tsv"]
    present = {str(p.relative_to(docs)) for p in files}
    assert present == set(CHECKS)


@pytest.mark.parametrize("name", sorted(CHECKS))
def test_shared_document(name: str, shared_data: Path, count_tokens: Any) -> None:
    CHECKS[name](shared_data / "docs" / name, count_tokens)
