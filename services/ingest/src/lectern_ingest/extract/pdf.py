"""PDF and EPUB extraction with PyMuPDF, page by page."""

from __future__ import annotations

import functools
import glob
import logging
import math
import os
import re
import shutil
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pymupdf as _pymupdf

from lectern_common.errors import BadInputError
from lectern_ingest.cleaning import (
    clean_inline,
    furniture_key,
    is_page_number,
    join_lines,
    normalize_unicode,
    normalize_whitespace,
    repeated_furniture,
)
from lectern_ingest.extract.model import (
    Block,
    BlockKind,
    Extraction,
    ExtractionSummary,
    OutlineEntry,
    Unit,
)

log = logging.getLogger(__name__)
# PyMuPDF is only partly typed; its objects are handled as Any here.
pymupdf: Any = _pymupdf

_TEXT_FLAGS = (pymupdf.TEXTFLAGS_DICT & ~pymupdf.TEXT_PRESERVE_IMAGES) | pymupdf.TEXT_MEDIABOX_CLIP
_BOLD = 16
_SAMPLE_PAGES = 120
_EDGE_BLOCKS = 2
_HEADING_RATIO = 1.12
_MAX_HEADING_CHARS = 200
#: a sideways or top/bottom line on this share of the sampled pages (and at least 4) is
#: furniture, even where it shares a baseline with other text
_REPEATED_LINE_SHARE = 0.3
#: the top and bottom share of a page where running headers and footers sit
_MARGIN_BAND = 0.08
_MIN_REPEATED_CHARS = 16
_CAPTION = re.compile(r"^(?:table|tab\.|figure|fig\.)\s*[\dIVXivx]+[\w.\-]*", re.IGNORECASE)
_TABLE_CAPTION = re.compile(r"^(?:table|tab\.)\s*[\dIVXivx]+", re.IGNORECASE)
_CHAPTER_LABEL = re.compile(
    r"^(?:chapter|part|unit|kapitel|chapitre|teil)\s+\w{1,6}\.?$", re.IGNORECASE
)
_KEY_CHARS = re.compile(r"[\W_]+", re.UNICODE)
#: a longer PDF or EPUB is refused before any page is read (a 400-page manual is typical;
#: a file claiming 100,000 pages is an attack or a broken page tree)
MAX_PAGES = 5000
#: OCR: render at _OCR_DPI, but never above _OCR_MAX_PIXELS (about A4 at 200 dpi): scanners
#: often declare one point per pixel, and such a page at 200 dpi would keep Tesseract busy for
#: minutes. A document stops being OCRed once _OCR_BUDGET_S is spent.
OCR_LANGUAGE = "eng"
_OCR_DPI = 200
_OCR_MIN_DPI = 24
_OCR_MAX_PIXELS = 4_500_000
_OCR_BUDGET_S = 300.0
_TESSDATA_GLOBS = (
    "/usr/share/tesseract-ocr/*/tessdata",
    "/usr/share/tessdata",
    "/usr/local/share/tessdata",
    "/usr/local/share/tesseract-ocr/*/tessdata",
    "/opt/homebrew/share/tessdata",
)


@dataclass(slots=True)
class _Line:
    text: str
    size: float
    bold: bool


@dataclass(slots=True)
class _PBlock:
    bbox: tuple[float, float, float, float]
    lines: list[_Line]
    kind: BlockKind = "paragraph"
    level: int | None = None
    table: Block | None = None

    @property
    def text(self) -> str:
        return " ".join(line.text for line in self.lines)

    @property
    def size(self) -> float:
        weights: Counter[float] = Counter()
        for line in self.lines:
            weights[line.size] += len(line.text)
        return weights.most_common(1)[0][0] if weights else 0.0


def _visual_lines(block: dict[str, Any]) -> list[_Line]:
    """Merge the block's lines that sit on the same baseline (PDFs often split them)."""
    rows: list[tuple[float, float, list[dict[str, Any]]]] = []
    for line in block.get("lines", []):
        x0, y0, x1, y1 = line["bbox"]
        for i, (ry0, ry1, spans) in enumerate(rows):
            overlap = min(y1, ry1) - max(y0, ry0)
            side_by_side = all(x1 <= s["bbox"][0] + 1 or x0 >= s["bbox"][2] - 1 for s in spans)
            if side_by_side and overlap > 0.5 * min(y1 - y0, ry1 - ry0):
                rows[i] = (min(y0, ry0), max(y1, ry1), spans + line["spans"])
                break
        else:
            rows.append((y0, y1, list(line["spans"])))
    out: list[_Line] = []
    for _, _, spans in rows:
        spans.sort(key=lambda s: s["bbox"][0])
        pieces: list[str] = []
        prev_x1 = None
        for span in spans:
            gap_is_space = prev_x1 is not None and span["bbox"][0] - prev_x1 > 0.2 * span["size"]
            if gap_is_space and pieces and not pieces[-1].endswith(" "):
                pieces.append(" ")
            pieces.append(span["text"])
            prev_x1 = span["bbox"][2]
        text = " ".join("".join(pieces).split())
        if not text:
            continue
        sizes: Counter[float] = Counter()
        bold = True
        for s in spans:
            if s["text"].strip():
                sizes[round(s["size"] * 2) / 2] += len(s["text"])
                bold = bold and bool(s["flags"] & _BOLD or "bold" in s["font"].lower())
        out.append(_Line(text=text, size=sizes.most_common(1)[0][0], bold=bold))
    return out


def _marginal(line: dict[str, Any], page_height: float) -> bool:
    """A line set sideways (a margin note) or in the top or bottom band of the page."""
    dx, dy = line.get("dir", (1.0, 0.0))
    if abs(dy) > 0.2 or dx < 0:
        return True
    y0, y1 = float(line["bbox"][1]), float(line["bbox"][3])
    return y1 <= _MARGIN_BAND * page_height or y0 >= (1 - _MARGIN_BAND) * page_height


def _line_key(line: dict[str, Any]) -> str:
    return furniture_key("".join(span["text"] for span in line["spans"]))


def _page_blocks(
    page: Any,
    textpage: Any = None,
    *,
    drop: frozenset[str] = frozenset(),
    data: dict[str, Any] | None = None,
) -> list[_PBlock]:
    """The page's text blocks; marginal lines whose furniture key is in ``drop`` are left out
    before lines on one baseline are merged (a running title beside a margin note stays
    out). ``data``: the page's ``get_text("dict")``, when the caller has it already."""
    if data is None:
        data = page.get_text("dict", flags=_TEXT_FLAGS, sort=True, textpage=textpage)
    blocks = []
    for raw in data["blocks"]:
        if raw.get("type", 0) != 0:
            continue
        if drop:
            raw = dict(raw)
            raw["lines"] = [
                line
                for line in raw.get("lines", [])
                if not _marginal(line, page.rect.height) or _line_key(line) not in drop
            ]
        lines = _visual_lines(raw)
        if lines:
            blocks.append(_PBlock(bbox=tuple(raw["bbox"]), lines=lines))
    return blocks


def _has_languages(folder: str, language: str) -> bool:
    return all(
        os.path.isfile(os.path.join(folder, f"{lang}.traineddata")) for lang in language.split("+")
    )


@functools.cache
def find_tessdata(language: str = OCR_LANGUAGE) -> str | None:
    """The Tesseract data folder holding ``language`` (``eng``, ``eng+deu``), or None."""
    candidates: list[str] = []
    if prefix := os.environ.get("TESSDATA_PREFIX"):
        candidates += [prefix, os.path.join(prefix, "tessdata")]
    for pattern in _TESSDATA_GLOBS:
        candidates += sorted(glob.glob(pattern), reverse=True)
    found = next((c for c in candidates if _has_languages(c, language)), None)
    if found is None:
        # Slow (runs ``tesseract --list-langs``), so only when the usual folders have nothing.
        try:
            asked = pymupdf.get_tessdata()
        except Exception:
            return None
        found = asked if asked and _has_languages(asked, language) else None
    return found


def _ocr_dpi(page: Any) -> int | None:
    """Resolution for OCR: _OCR_DPI, less on large pages; None if the page is too large."""
    area_in2 = max(page.rect.width * page.rect.height, 1.0) / 72**2
    fitting = int(math.sqrt(_OCR_MAX_PIXELS / area_in2))
    return min(_OCR_DPI, fitting) if fitting >= _OCR_MIN_DPI else None


def _merge_ocr_blocks(blocks: list[_PBlock]) -> list[_PBlock]:
    """Rejoin OCR lines MuPDF split into blocks (word heights vary) when they are one paragraph."""
    merged: list[_PBlock] = []
    for block in sorted(blocks, key=lambda b: (b.bbox[1], b.bbox[0])):
        if merged:
            prev = merged[-1]
            line_height = (prev.bbox[3] - prev.bbox[1]) / len(prev.lines)
            gap = block.bbox[1] - prev.bbox[3]
            overlaps = block.bbox[0] < prev.bbox[2] and prev.bbox[0] < block.bbox[2]
            aligned = abs(block.bbox[0] - prev.bbox[0]) <= 1.5 * line_height
            if overlaps and aligned and -0.2 * line_height <= gap <= 0.8 * line_height:
                x0, y0, x1, y1 = prev.bbox
                bx0, by0, bx1, by1 = block.bbox
                merged[-1] = _PBlock(
                    bbox=(min(x0, bx0), min(y0, by0), max(x1, bx1), max(y1, by1)),
                    lines=prev.lines + block.lines,
                )
                continue
        merged.append(block)
    return merged


def _title_key(text: str) -> str:
    return _KEY_CHARS.sub("", normalize_unicode(text).lower())


def _letters_key(text: str) -> str:
    return "".join(ch for ch in _title_key(text) if not ch.isdigit())


def _edge_blocks(blocks: list[_PBlock]) -> list[_PBlock]:
    by_y = sorted(blocks, key=lambda b: b.bbox[1])
    edges = by_y[:_EDGE_BLOCKS] + by_y[-_EDGE_BLOCKS:]
    return [b for b in edges if len(b.text) <= 150]


_SECTION_NUMBER = re.compile(r"^(\d+(?:\.\d+)*)\.?\s")


def _levels_from_numbering(outline: list[OutlineEntry]) -> list[OutlineEntry]:
    """A flat outline of numbered titles ("2.3.59.1.1 Background") gets levels from the numbers."""
    if not outline or any(e.level != 1 for e in outline):
        return outline
    depths = [
        len(m.group(1).split(".")) if (m := _SECTION_NUMBER.match(e.title)) else None
        for e in outline
    ]
    numbered = [d for d in depths if d is not None]
    if len(numbered) < 3 or len(set(numbered)) < 2:
        return outline
    base = min(numbered) - 1
    return [
        OutlineEntry(level=d - base if d is not None else 1, title=e.title, page=e.page)
        for e, d in zip(outline, depths, strict=True)
    ]


class _FontProfile:
    """Body size and heading levels learnt from a sample of pages."""

    def __init__(self, sizes: Counter[float], heading_sizes: Counter[float]) -> None:
        self.body = sizes.most_common(1)[0][0] if sizes else 10.0
        big = sorted((s for s in heading_sizes if s >= self.body * _HEADING_RATIO), reverse=True)
        self.levels = {size: min(i + 1, 4) for i, size in enumerate(big)}

    def level_for(self, size: float) -> int:
        if size in self.levels:
            return self.levels[size]
        larger = [lvl for s, lvl in self.levels.items() if s <= size]
        return min(larger) if larger else max(self.levels.values(), default=0) + 1


_FOOTNOTE_MARKS = re.compile(r"[†‡§¶*]|\b(?:and|und|et)\b")
_NOT_A_TITLE = re.compile(r"@|\bdoi\b|https?://|www\.", re.IGNORECASE)


def _looks_like_byline(text: str) -> bool:
    """An author line ("A. Smith†, B. Jones‡ and C. Lee*"), e-mail or link: large or bold
    like a heading, but no section starts there."""
    commas = text.count(",")
    return bool(
        _NOT_A_TITLE.search(text) or commas >= 3 or (commas >= 2 and _FOOTNOTE_MARKS.search(text))
    )


def _is_font_heading(block: _PBlock, fonts: _FontProfile) -> int | None:
    text = block.text
    letters = sum(ch.isalpha() for ch in text)
    if len(text) > _MAX_HEADING_CHARS or len(block.lines) > 3 or letters < 2:
        return None
    if _looks_like_byline(text):
        return None
    size = block.size
    if size >= fonts.body * _HEADING_RATIO:
        return fonts.level_for(size)
    words = text.split()
    if (
        len(block.lines) == 1
        and all(line.bold for line in block.lines)
        and size >= fonts.body * 0.95
        and len(words) <= 10
        and text[-1] not in ".,:;"
        and (text[0].isupper() or text[0].isdigit())
    ):
        return min(len(fonts.levels) + 1, 5)
    return None


def _order_columns(blocks: list[_PBlock], page_width: float) -> list[_PBlock]:
    """Reading order: full-width blocks split the page; inside, left column before right."""
    if len(blocks) < 4:
        return sorted(blocks, key=lambda b: (round(b.bbox[1]), b.bbox[0]))
    left_edge = min(b.bbox[0] for b in blocks)
    right_edge = max(b.bbox[2] for b in blocks)
    mid = (left_edge + right_edge) / 2
    slack = 0.04 * page_width
    side: dict[int, str] = {}
    for i, b in enumerate(blocks):
        if b.bbox[2] <= mid + slack:
            side[i] = "L"
        elif b.bbox[0] >= mid - slack:
            side[i] = "R"
        else:
            side[i] = "F"
    left = [i for i, s in side.items() if s == "L"]
    right = [i for i, s in side.items() if s == "R"]
    col_chars = sum(len(blocks[i].text) for i in left + right)
    total_chars = sum(len(b.text) for b in blocks) or 1
    if len(left) < 2 or len(right) < 2 or col_chars < 0.5 * total_chars:
        return sorted(blocks, key=lambda b: (round(b.bbox[1]), b.bbox[0]))
    ordered: list[_PBlock] = []
    segment: list[int] = []

    def flush() -> None:
        seg_left = sorted((i for i in segment if side[i] == "L"), key=lambda i: blocks[i].bbox[1])
        seg_right = sorted((i for i in segment if side[i] == "R"), key=lambda i: blocks[i].bbox[1])
        ordered.extend(blocks[i] for i in seg_left + seg_right)
        segment.clear()

    for i in sorted(range(len(blocks)), key=lambda i: blocks[i].bbox[1]):
        if side[i] == "F":
            flush()
            ordered.append(blocks[i])
        else:
            segment.append(i)
    flush()
    return ordered


def _has_grid(page: Any) -> bool:
    """Cheap gate before the costly table finder: several aligned rules of equal extent."""
    spans: Counter[tuple[int, int]] = Counter()
    verticals: set[int] = set()
    for path in page.get_cdrawings():
        for item in path["items"]:
            if item[0] == "l":
                (x0, y0), (x1, y1) = item[1], item[2]
                edges = [(min(x0, x1), y0, max(x0, x1), y1)]
            elif item[0] == "re":
                x0, y0, x1, y1 = item[1]
                edges = [(x0, y0, x1, y0), (x0, y1, x1, y1), (x0, y0, x0, y1), (x1, y0, x1, y1)]
            else:
                continue
            for ex0, ey0, ex1, ey1 in edges:
                if abs(ey1 - ey0) < 1.5 and ex1 - ex0 >= 40:
                    spans[(round(ex0 / 3), round(ex1 / 3))] += 1
                elif abs(ex1 - ex0) < 1.5 and abs(ey1 - ey0) >= 8:
                    verticals.add(round(ex0 / 3))
    if not spans:
        return False
    aligned = spans.most_common(1)[0][1]
    # A framed box has three or so aligned rules and two sides; a table has more of either.
    return (aligned >= 4 and len(verticals) >= 2) or (aligned >= 3 and len(verticals) >= 3)


def _plausible_table(rows: list[list[str | None]]) -> bool:
    """Reject grids found in figures and diagrams: most cells should hold words."""
    cells = [c or "" for row in rows for c in row]
    if len(rows) < 2 or not cells or max(len(r) for r in rows) < 2:
        return False
    filled = [c for c in cells if c.strip()]
    wordy = [c for c in filled if sum(ch.isalnum() for ch in c) >= 2]
    multi = sum(1 for row in rows if sum(1 for c in row if c and c.strip()) >= 2)
    return len(filled) >= 0.5 * len(cells) and len(wordy) >= 0.6 * len(filled) and multi >= 2


def _cell_texts(table: Any, words: list[tuple[Any, ...]]) -> list[list[str | None]]:
    """Cell texts from the page's words (PyMuPDF's own cell text can reorder characters)."""
    rows: list[list[str | None]] = []
    for row in table.rows:
        cells: list[str | None] = []
        for cell in row.cells:
            if cell is None:
                cells.append(None)
                continue
            x0, y0, x1, y1 = cell
            inside = [
                w[4]
                for w in words
                if x0 <= (w[0] + w[2]) / 2 <= x1 and y0 <= (w[1] + w[3]) / 2 <= y1
            ]
            cells.append(" ".join(inside))
        rows.append(cells)
    return rows


def _table_rows(raw_rows: list[list[str | None]]) -> list[str]:
    rows = []
    for raw in raw_rows:
        cells = [clean_inline(c or "") for c in raw]
        if any(cells):
            rows.append(" | ".join(cells))
    return rows


def _inside(inner: tuple[float, ...], outer: tuple[float, ...]) -> bool:
    x0, y0 = max(inner[0], outer[0]), max(inner[1], outer[1])
    x1, y1 = min(inner[2], outer[2]), min(inner[3], outer[3])
    if x1 <= x0 or y1 <= y0:
        return False
    area = (inner[2] - inner[0]) * (inner[3] - inner[1]) or 1.0
    return (x1 - x0) * (y1 - y0) / area > 0.5


class PdfExtraction(Extraction):
    """PDF or EPUB opened with PyMuPDF; units are pages (1-based numbers)."""

    def __init__(
        self,
        doc: Any,
        *,
        mime: str,
        ocr: bool | None = None,
        ocr_language: str = OCR_LANGUAGE,
        ocr_budget_s: float = _OCR_BUDGET_S,
    ) -> None:
        self._doc = doc
        self.mime = mime
        self.page_count: int = doc.page_count
        self.total_units = doc.page_count
        meta = doc.metadata or {}
        self.title = clean_inline(meta.get("title") or "") or None
        self.summary = ExtractionSummary(page_count=doc.page_count)
        self._ocr = shutil.which("tesseract") is not None if ocr is None else ocr
        self._ocr_language = ocr_language
        self._ocr_budget_s = ocr_budget_s
        self._tessdata: str | None = None
        self.outline = []
        try:
            for level, title, page in doc.get_toc(simple=True):
                cleaned = clean_inline(title)
                if cleaned:
                    self.outline.append(
                        OutlineEntry(level=level, title=cleaned, page=page if page > 0 else None)
                    )
        except Exception as exc:  # a broken outline must not stop the text
            self.summary.warnings.append(f"outline unreadable: {exc}")
        self.outline = _levels_from_numbering(self.outline)
        self._use_outline = len(self.outline) >= 3
        self._toc_by_page: dict[int, list[OutlineEntry]] = {}
        for entry in self.outline:
            if entry.page is not None:
                self._toc_by_page.setdefault(entry.page, []).append(entry)
        self._repeated_lines: frozenset[str] = frozenset()
        self._furniture, self._fonts = self._profile()
        self._last_table: tuple[int, str, int] | None = None  # columns, header row, page

    def close(self) -> None:
        """Close the PyMuPDF document."""
        self._doc.close()

    def _profile(self) -> tuple[frozenset[str], _FontProfile]:
        """First, cheap pass over a sample of pages: running headers/footers and font sizes."""
        n = self.page_count
        step = max(1, n // _SAMPLE_PAGES)
        edges: list[list[str]] = []
        lines: Counter[str] = Counter()
        sampled = 0
        sizes: Counter[float] = Counter()
        heading_sizes: Counter[float] = Counter()
        for index in range(0, n, step):
            try:
                page = self._doc.load_page(index)
                raw = page.get_text("dict", flags=_TEXT_FLAGS, sort=True)
                blocks = _page_blocks(page, data=raw)
            except Exception:  # noqa: S112 - the second pass reports broken pages
                continue
            sampled += 1
            edges.append([b.text for b in _edge_blocks(blocks)])
            lines.update(
                {
                    key
                    for block in raw["blocks"]
                    for line in block.get("lines", [])
                    if _marginal(line, page.rect.height)
                    and len(key := _line_key(line)) >= _MIN_REPEATED_CHARS
                }
            )
            for block in blocks:
                for line in block.lines:
                    sizes[line.size] += len(line.text)
                letters = sum(ch.isalpha() for ch in block.text)
                if len(block.text) <= _MAX_HEADING_CHARS and len(block.lines) <= 3 and letters >= 3:
                    heading_sizes[block.size] += 1
        furniture = repeated_furniture(edges) if len(edges) >= 4 else frozenset()
        threshold = max(4, math.ceil(_REPEATED_LINE_SHARE * sampled))
        self._repeated_lines = frozenset(k for k, c in lines.items() if c >= threshold)
        return furniture, _FontProfile(sizes, heading_sizes)

    def _iter_units(self) -> Iterator[Unit]:
        for index in range(self.page_count):
            number = index + 1
            try:
                page = self._doc.load_page(index)
                blocks = self._read_page(page, number)
            except Exception as exc:
                log.warning("page %d unreadable: %s", number, exc)
                self.summary.failed_pages.append(number)
                self.summary.warnings.append(f"page {number} unreadable: {exc}")
                continue
            yield Unit(blocks=blocks, page=number)
        if self.page_count and len(self.summary.failed_pages) == self.page_count:
            raise BadInputError("no page of the document could be read", reason="corrupt")

    def _read_page(self, page: Any, number: int) -> list[Block]:
        blocks = _page_blocks(page, drop=self._repeated_lines)
        ocred = False
        if not blocks and page.get_images():
            textpage = self._ocr_page(page, number)
            if textpage is None:
                self.summary.skipped_pages.append(number)
                return []
            blocks = _merge_ocr_blocks(_page_blocks(page, textpage))
            self.summary.ocr_pages.append(number)
            ocred = True
        edges = {id(b) for b in _edge_blocks(blocks)}
        blocks = [
            b
            for b in blocks
            if id(b) not in edges
            or not (furniture_key(b.text) in self._furniture or is_page_number(b.text))
        ]
        blocks = self._with_tables(page, blocks, number)
        blocks = _order_columns(blocks, page.rect.width)
        if self._use_outline:
            self._mark_outline_headings(blocks, number)
        elif not ocred:  # OCR text sizes are word-box heights, not fonts: no headings from them
            for block in blocks:
                if block.table is None and (level := _is_font_heading(block, self._fonts)):
                    block.kind, block.level = "heading", level
        return self._to_blocks(blocks)

    def _ocr_page(self, page: Any, number: int) -> Any:
        """A TextPage OCRed from the rendered page, or None (OCR off, unavailable, over budget)."""
        if not self._ocr:
            return None
        if self._tessdata is None:
            self._tessdata = find_tessdata(self._ocr_language)
            if self._tessdata is None:
                self._ocr = False
                self.summary.warnings.append(
                    f"OCR unavailable: no Tesseract data for {self._ocr_language!r} "
                    "(install tesseract-ocr or set TESSDATA_PREFIX)"
                )
                return None
        if self.summary.ocr_seconds >= self._ocr_budget_s:
            if not any(w.startswith("OCR time budget") for w in self.summary.warnings):
                self.summary.warnings.append(
                    f"OCR time budget ({self._ocr_budget_s:.0f}s) used up at page {number}; "
                    "later pages without a text layer are skipped"
                )
            return None
        dpi = _ocr_dpi(page)
        if dpi is None:
            self.summary.warnings.append(f"page {number} is too large to OCR")
            return None
        start = time.perf_counter()
        try:
            return page.get_textpage_ocr(
                flags=_TEXT_FLAGS,
                language=self._ocr_language,
                dpi=dpi,
                full=True,
                tessdata=self._tessdata,
            )
        except Exception as exc:
            log.warning("OCR failed on page %d: %s", number, exc)
            self.summary.warnings.append(f"OCR failed on page {number}: {exc}")
            return None
        finally:
            elapsed = time.perf_counter() - start
            self.summary.ocr_seconds += elapsed
            log.debug("OCR of page %d took %.2fs", number, elapsed)

    def _with_tables(self, page: Any, blocks: list[_PBlock], number: int) -> list[_PBlock]:
        if not _has_grid(page):
            return blocks
        try:
            tables = page.find_tables(use_layout=False).tables
        except Exception as exc:
            self.summary.warnings.append(f"table detection failed on page {number}: {exc}")
            return blocks
        words = page.get_text("words", flags=_TEXT_FLAGS, sort=True) if tables else []
        for table in tables:
            raw_rows = _cell_texts(table, words)
            if not _plausible_table(raw_rows):
                continue
            rows = _table_rows(raw_rows)
            columns = max(len(r) for r in raw_rows)
            rows = self._continue_table(rows, columns, table.bbox[1], blocks, number)
            bbox = (table.bbox[0], table.bbox[1], table.bbox[2], table.bbox[3])
            blocks = [b for b in blocks if not _inside(b.bbox, bbox)]
            caption = None
            near = [
                b
                for b in blocks
                if _TABLE_CAPTION.match(b.text)
                and (abs(b.bbox[3] - bbox[1]) < 40 or abs(b.bbox[1] - bbox[3]) < 40)
            ]
            if near:
                caption_block = near[0]
                caption = clean_inline(caption_block.text)
                blocks = [b for b in blocks if b is not caption_block]
            blocks.append(
                _PBlock(
                    bbox=bbox,
                    lines=[_Line(text=rows[0], size=0.0, bold=False)],
                    kind="table",
                    table=Block(kind="table", text="\n".join(rows), caption=caption),
                )
            )
        return blocks

    def _continue_table(
        self, rows: list[str], columns: int, top: float, blocks: list[_PBlock], number: int
    ) -> list[str]:
        """A table continued from the previous page gets that page's header row again."""
        last = self._last_table
        self._last_table = (columns, rows[0], number)
        starts_page = not any(b.bbox[3] <= top + 1 for b in blocks)
        if last is None or not starts_page or last[2] != number - 1 or last[0] != columns:
            return rows
        if rows[0] == last[1]:
            return rows
        self._last_table = (columns, last[1], number)
        return [last[1], *rows]

    def _mark_outline_headings(self, blocks: list[_PBlock], number: int) -> None:
        """Turn the outline's titles for this page into heading blocks where they appear."""
        entries = self._toc_by_page.get(number, [])
        cursor = 0
        for entry in entries:
            key = _title_key(entry.title)
            heading = _PBlock(
                bbox=(0, 0, 0, 0),
                lines=[_Line(text=entry.title, size=0.0, bold=True)],
                kind="heading",
                level=entry.level,
            )
            match = self._find_title(blocks, key, cursor)
            if match is None:
                blocks.insert(cursor, heading)
                cursor += 1
                continue
            start, end = match
            consumed = "".join(_title_key(b.text) for b in blocks[start:end])
            if len(consumed) <= len(key) * 1.3 + 12:
                blocks[start:end] = [heading]
            else:
                blocks.insert(start, heading)
            cursor = start + 1

    @staticmethod
    def _find_title(blocks: list[_PBlock], key: str, cursor: int) -> tuple[int, int] | None:
        if not key:
            return None
        found = PdfExtraction._find_key(blocks, key, cursor, _title_key)
        if found is None and len(letters := _letters_key(key)) >= 6:
            # Numbered headings often have a date or label between number and title.
            found = PdfExtraction._find_key(blocks, letters, cursor, _letters_key)
            if found is not None and len(_letters_key(blocks[found[0]].text)) > 2 * len(letters):
                found = None
        return found

    @staticmethod
    def _find_key(
        blocks: list[_PBlock], key: str, cursor: int, keyer: Callable[[str], str]
    ) -> tuple[int, int] | None:
        for i in range(cursor, len(blocks)):
            if blocks[i].table is not None:
                continue
            acc = keyer(blocks[i].text)
            if key in acc:
                return i, i + 1
            j = i + 1
            while len(acc) >= 2 and key.startswith(acc) and acc != key and j < len(blocks):
                acc += keyer(blocks[j].text)
                j += 1
            if acc == key or (len(acc) > len(key) and acc.startswith(key)):
                return i, j
        return None

    def _to_blocks(self, blocks: list[_PBlock]) -> list[Block]:
        out: list[Block] = []
        for b in blocks:
            if b.table is not None:
                out.append(b.table)
                continue
            if b.kind == "heading":
                text = clean_inline(b.text)
                if out and out[-1].kind == "heading" and _CHAPTER_LABEL.match(out[-1].text):
                    prev = out.pop()
                    text = f"{prev.text}: {text}"
                    level = min(prev.level or 1, b.level or 1)
                    out.append(Block(kind="heading", text=text, level=level))
                elif text:
                    out.append(Block(kind="heading", text=text, level=b.level))
                continue
            text = normalize_whitespace(join_lines([normalize_unicode(ln.text) for ln in b.lines]))
            if not text:
                continue
            kind: BlockKind = "caption" if _CAPTION.match(text) and len(text) < 400 else "paragraph"
            out.append(Block(kind=kind, text=text))
        return out


def open_pymupdf(
    path: Path,
    *,
    mime: str,
    password: str | None,
    ocr: bool | None = None,
    ocr_language: str = OCR_LANGUAGE,
) -> PdfExtraction:
    """Open a PDF/EPUB, handling passwords; raises BadInputError with a FailureReason code."""
    filetype = "epub" if mime == "application/epub+zip" else "pdf"
    try:
        doc = pymupdf.open(path, filetype=filetype)
    except pymupdf.EmptyFileError as exc:
        raise BadInputError("the file is empty", reason="empty_file") from exc
    except Exception as exc:
        raise BadInputError(f"unreadable {filetype.upper()}: {exc}", reason="corrupt") from exc
    if doc.needs_pass:
        if not password:
            doc.close()
            raise BadInputError("the document is password protected", reason="encrypted")
        if not doc.authenticate(password):
            doc.close()
            raise BadInputError("the password does not open the document", reason="wrong_password")
    try:
        # MuPDF reads the page tree's claimed /Count; an impossible one raises here
        pages = doc.page_count
    except Exception as exc:
        doc.close()
        raise BadInputError(
            f"unreadable {filetype.upper()} page tree: {exc}", reason="corrupt"
        ) from exc
    if pages == 0:
        doc.close()
        raise BadInputError("the document has no pages", reason="corrupt")
    if pages > MAX_PAGES:
        doc.close()
        raise BadInputError(
            f"the document has {pages} pages; at most {MAX_PAGES} are accepted", reason="too_large"
        )
    return PdfExtraction(doc, mime=mime, ocr=ocr, ocr_language=ocr_language)
