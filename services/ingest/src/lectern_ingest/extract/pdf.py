"""PDF and EPUB extraction with PyMuPDF, page by page."""

from __future__ import annotations

import logging
import math
import re
import shutil
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pymupdf as _pymupdf

from lectern_common.errors import BadInputError
from lectern_ingest.cleaning import (
    block_key,
    clean_inline,
    furniture_key,
    is_page_number,
    join_lines,
    normalize_unicode,
    normalize_whitespace,
    repeated_blocks,
    repeated_furniture,
)
from lectern_ingest.extract.contents import ContentsRegion, find_contents
from lectern_ingest.extract.entry_map import (
    EntryMap,
    Occurrence,
    broken_titles,
    mark_titles,
    title_windows,
)
from lectern_ingest.extract.headings import is_contents_title, numbering_depth
from lectern_ingest.extract.model import (
    Block,
    BlockKind,
    EntryReport,
    Extraction,
    ExtractionSummary,
    OutlineEntry,
    Unit,
)
from lectern_ingest.extract.ocr import OCR_LANGUAGE, find_tessdata, merge_ocr_blocks, ocr_dpi
from lectern_ingest.extract.pdf_layout import (
    MAX_HEADING_CHARS,
    TEXT_FLAGS,
    FontProfile,
    Line,
    PBlock,
    edge_blocks,
    is_font_heading,
    letters_key,
    levels_from_numbering,
    line_key,
    marginal,
    merge_split_headings,
    order_columns,
    page_blocks,
)
from lectern_ingest.extract.pdf_tables import (
    inside,
    page_tables,
    table_rows,
)
from lectern_ingest.titles import document_title, usable_title

log = logging.getLogger(__name__)
# PyMuPDF is only partly typed; its objects are handled as Any here.
pymupdf: Any = _pymupdf

_SAMPLE_PAGES = 120
#: a sideways or top/bottom line on this share of the sampled pages (and at least 4) is
#: furniture, even where it shares a baseline with other text
_REPEATED_LINE_SHARE = 0.3
_MIN_REPEATED_CHARS = 16
_CAPTION = re.compile(r"^(?:table|tab\.|figure|fig\.)\s*[\dIVXivx]+[\w.\-]*", re.IGNORECASE)
_TABLE_CAPTION = re.compile(r"^(?:table|tab\.)\s*[\dIVXivx]+", re.IGNORECASE)
_CHAPTER_LABEL = re.compile(
    r"^(?:chapter|part|unit|kapitel|chapitre|teil)\s+\w{1,6}\.?$", re.IGNORECASE
)
#: an outline entry that names no section ("Slide Number 7", PowerPoint's placeholder)
_PLACEHOLDER_ENTRY = re.compile(r"^slide(?: number)?\s*\d+$", re.IGNORECASE)
#: the title is looked for on the first pages only
_TITLE_PAGES = 3
_FRONT_MATTER = re.compile(
    r"^(?:preface|foreword|abstract|introduction|acknowledge?ments?|summary|vorwort|"
    r"einleitung|front cover|back cover)\W*$",
    re.IGNORECASE,
)
#: a longer PDF or EPUB is refused before any page is read (a 400-page manual is typical;
#: a file claiming 100,000 pages is an attack or a broken page tree)
MAX_PAGES = 5000
_OCR_BUDGET_S = 300.0


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
        self.metadata_title = clean_inline(meta.get("title") or "") or None
        self.summary = ExtractionSummary(page_count=doc.page_count)
        self._ocr = shutil.which("tesseract") is not None if ocr is None else ocr
        self._ocr_language = ocr_language
        self._ocr_budget_s = ocr_budget_s
        self._tessdata: str | None = None
        self.outline = []
        try:
            for level, title, page in doc.get_toc(simple=True):
                # LaTeX's ``quotes'' survive in many outlines
                cleaned = clean_inline(title.replace("``", '"').replace("''", '"'))
                if cleaned and not _PLACEHOLDER_ENTRY.match(cleaned):
                    self.outline.append(
                        OutlineEntry(level=level, title=cleaned, page=page if page > 0 else None)
                    )
        except Exception as exc:  # a broken outline must not stop the text
            self.summary.warnings.append(f"outline unreadable: {exc}")
        self.outline = levels_from_numbering(self.outline)
        #: the outline's own "Contents" entries point at the contents pages, not at a section
        headings = [e for e in self.outline if not is_contents_title(e.title)]
        self._use_outline = len(headings) >= 3
        self._toc_by_page: dict[int, list[OutlineEntry]] = {}
        for entry in headings:
            if entry.page is not None:
                self._toc_by_page.setdefault(entry.page, []).append(entry)
        self._outline_keys = frozenset(letters_key(e.title) for e in headings)
        self._contents_by_outline = self._outline_contents_pages()
        self.contents_pages: list[int] = []
        self.contents_entries: list[OutlineEntry] = []
        self._contents_figures = False  # the last contents page ended in a list of figures
        self._repeated_lines: frozenset[str] = frozenset()
        self._boilerplate: frozenset[str] = frozenset()
        self._furniture, self._fonts = self._profile()
        self._map = EntryMap(
            headings if self._use_outline else [],
            page_count=self.page_count,
            index=self._title_index,
        )
        self._last_table: tuple[int, str, int] | None = None  # columns, header row, page
        heading, first_text = self._first_pages()
        self.title = document_title(self.metadata_title, heading=heading, first_text=first_text)

    def close(self) -> None:
        """Close the PyMuPDF document."""
        self._doc.close()

    def entry_report(self) -> EntryReport:
        """How the contents page's and the outline's entries matched lines of the text."""
        return EntryReport(
            contents_unmatched=self._map.unmatched("contents"),
            outline=[m.entry for m in self._map.entries if m.source == "outline"],
            outline_unmatched=self._map.unmatched("outline"),
        )

    def _title_index(self) -> dict[str, list[Occurrence]]:
        """Every page's windows of lines that may be titles, by key: where the contents' and
        the outline's entries are looked for (read once, when a document has either)."""
        index: dict[str, list[Occurrence]] = {}
        floor = self._fonts.heading_floor
        last: PBlock | None = None  # the previous page's last block
        for number in range(1, self.page_count + 1):
            try:
                page = self._doc.load_page(number - 1)
                # furniture and boilerplate kept: a block repeated on many pages may be a
                # title all the same (see ``_read_page``)
                blocks = page_blocks(page, drop=self._repeated_lines)
                blocks = order_columns(blocks, page.rect.width)
            except Exception:  # the page is reported when it is read
                last = None
                continue
            height = page.rect.height
            for w in title_windows(blocks, heading_floor=floor, page_height=height):
                found = Occurrence(number, w.top, w.bottom, w.size, w.marginal)
                if w.key:
                    index.setdefault(w.key, []).append(found)
                if w.number is not None:
                    index.setdefault(w.number, []).append(found)
            text = [b for b in blocks if not is_page_number(b.text)]
            if last is not None and text:
                for key, broken in broken_titles(last, text[0]):
                    index.setdefault(key, []).append(replace(broken, page=number - 1))
            last = text[-1] if text else None
        return index

    def _outline_contents_pages(self) -> frozenset[int]:
        """Pages an outline entry titled "Contents" points at (the pages after it continue
        the contents only when they look like it)."""
        return frozenset(
            e.page for e in self.outline if e.page is not None and is_contents_title(e.title)
        )

    def _profile(self) -> tuple[frozenset[str], FontProfile]:
        """First, cheap pass over a sample of pages: running headers/footers, blocks repeated
        on many pages, font sizes and the numbering of headings."""
        n = self.page_count
        step = max(1, n // _SAMPLE_PAGES)
        edges: list[list[str]] = []
        page_texts: list[list[str]] = []
        lines: Counter[str] = Counter()
        sampled = 0
        sizes: Counter[float] = Counter()
        heading_pages: Counter[float] = Counter()
        numbered: list[tuple[int, PBlock]] = []
        for index in range(0, n, step):
            try:
                page = self._doc.load_page(index)
                raw = page.get_text("dict", flags=TEXT_FLAGS, sort=True)
                blocks = page_blocks(page, data=raw)
            except Exception:  # noqa: S112 - the second pass reports broken pages
                continue
            sampled += 1
            edges.append([b.text for b in edge_blocks(blocks)])
            page_texts.append([b.text for b in blocks])
            lines.update(
                {
                    key
                    for block in raw["blocks"]
                    for line in block.get("lines", [])
                    if marginal(line, page.rect.height)
                    and len(key := line_key(line)) >= _MIN_REPEATED_CHARS
                }
            )
            on_page: set[float] = set()
            for block in blocks:
                for line in block.lines:
                    sizes[line.size] += len(line.text)
                letters = sum(ch.isalpha() for ch in block.text)
                if len(block.text) <= MAX_HEADING_CHARS and len(block.lines) <= 3 and letters >= 3:
                    on_page.add(block.size)
                    if (depth := numbering_depth(block.text)) is not None and len(numbered) < 500:
                        numbered.append((depth, block))
            heading_pages.update(on_page)
        furniture = repeated_furniture(edges) if len(edges) >= 4 else frozenset()
        threshold = max(4, math.ceil(_REPEATED_LINE_SHARE * sampled))
        self._repeated_lines = frozenset(k for k, c in lines.items() if c >= threshold)
        self._boilerplate = repeated_blocks(page_texts)
        fonts = FontProfile(sizes, heading_pages, sampled=sampled)
        fonts.learn_numbering(
            [
                (depth, level)
                for depth, block in numbered
                if block_key(block.text) not in self._boilerplate
                and (level := is_font_heading(block, fonts)) is not None
            ]
        )
        return furniture, fonts

    def _first_pages(self) -> tuple[str | None, str]:
        """The title the first pages show (the largest heading of the first page that has
        one; a section such as "Preface" is none) and those pages' text."""
        title: str | None = None
        texts: list[str] = []
        for index in range(min(_TITLE_PAGES, self.page_count)):
            try:
                blocks = self._clean_blocks(self._doc.load_page(index))
            except Exception:  # noqa: S112 - the page is reported when it is read
                continue
            texts.extend(b.text for b in blocks)
            if title is None:
                title = self._largest_heading(blocks)
        return title, "\n".join(texts)

    def _largest_heading(self, blocks: list[PBlock]) -> str | None:
        best: PBlock | None = None
        for block in blocks:
            if (
                block.size < self._fonts.body * 1.12
                or (best is not None and block.size <= best.size)
                or is_font_heading(block, self._fonts) is None
                or is_contents_title(block.text)
                or _FRONT_MATTER.match(block.text)
                or usable_title(block.text) is None
            ):
                continue
            best = block
        if best is None:
            return None
        # a title set on two or three blocks of its size, one right below the other
        same = sorted((b for b in blocks if b.size == best.size), key=lambda b: b.bbox[1])
        at = same.index(best)
        start, end = at, at + 1
        while start > 0 and best.bbox[1] - same[start - 1].bbox[3] <= best.size:
            start -= 1
        while end < len(same) and same[end].bbox[1] - same[end - 1].bbox[3] <= best.size:
            end += 1
        parts = same[max(start, at - 2) : min(end, at + 3)][:3]
        return clean_inline(" ".join(b.text for b in parts))

    def _clean_blocks(self, page: Any) -> list[PBlock]:
        """The page's blocks without running headers, footers, page numbers or boilerplate."""
        return self._drop_furniture(page_blocks(page, drop=self._repeated_lines))

    def _drop_furniture(
        self,
        blocks: list[PBlock],
        *,
        boilerplate: bool = True,
        titles: Callable[[PBlock], bool] | None = None,
    ) -> list[PBlock]:
        """``blocks`` without furniture (and boilerplate); ``titles``: whether a block sets a
        title placed on the page, kept though it repeats (the IRS manual's exhibit titles
        differ in their numbers only)."""
        edges = {id(b) for b in edge_blocks(blocks)}

        def furniture(b: PBlock) -> bool:
            if boilerplate and self._is_boilerplate(b):
                return True
            return id(b) in edges and (
                furniture_key(b.text) in self._furniture or is_page_number(b.text)
            )

        return [b for b in blocks if not furniture(b) or (titles is not None and titles(b))]

    def _is_boilerplate(self, block: PBlock) -> bool:
        return bool(self._boilerplate) and block_key(block.text) in self._boilerplate

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
        keys = self._map.keys_on(number)
        height = page.rect.height

        def titles(block: PBlock) -> bool:
            return bool(keys) and self._names(block, keys, height)

        blocks = page_blocks(page, drop=self._repeated_lines)
        ocred = False
        if not blocks and page.get_images():
            textpage = self._ocr_page(page, number)
            if textpage is None:
                self.summary.skipped_pages.append(number)
                return []
            blocks = merge_ocr_blocks(page_blocks(page, textpage))
            self.summary.ocr_pages.append(number)
            ocred = True
        blocks = self._drop_furniture(blocks, boilerplate=False, titles=titles)
        blocks = self._with_tables(page, blocks, number)
        # after the tables: a label repeated in every table's header stays in its table
        blocks = [
            b for b in blocks if b.table is not None or not self._is_boilerplate(b) or titles(b)
        ]
        blocks = order_columns(blocks, page.rect.width)
        blocks = self._fold_contents(blocks, number, height)
        return self._to_blocks(self._mark_headings(blocks, number, height, ocred=ocred))

    def _names(self, block: PBlock, keys: set[str], height: float) -> bool:
        """Whether the block sets one of the titles whose keys are ``keys``."""
        windows = title_windows(
            [block], heading_floor=self._fonts.heading_floor, page_height=height
        )
        return any((w.key and w.key in keys) or w.number in keys for w in windows)

    def _mark_headings(
        self, blocks: list[PBlock], number: int, height: float, *, ocred: bool
    ) -> list[PBlock]:
        """The page's headings: the outline's entries make the whole tree; a contents page's
        entries make it with the fonts' headings complementing them; else the fonts."""
        placements = self._map.placements(number)
        # OCR text sizes are word-box heights, not fonts: no headings from them
        if not self._use_outline and not ocred:
            stats = self._map.stats
            for block in blocks:
                if block.table is not None or block.kind == "contents":
                    continue
                level = self._fonts.heading_level(block)
                if level is not None:
                    level = stats.font_level(block, level, page=number)
                if level is not None:
                    block.kind, block.level = "heading", level
            blocks = merge_split_headings(blocks)
        if not placements:
            return blocks
        blocks, found = mark_titles(
            blocks, placements, heading_floor=self._fonts.heading_floor, page_height=height
        )
        for placement, hit in zip(placements, found, strict=True):
            self._map.settle(placement.index, found=hit)
        return blocks

    def _fold_contents(self, blocks: list[PBlock], number: int, height: float) -> list[PBlock]:
        """The page's table of contents, if it has one, as one ``contents`` block."""
        outline_keys = self._outline_keys
        if outline_keys and number in self._toc_by_page:
            outline_keys = outline_keys - {letters_key(e.title) for e in self._toc_by_page[number]}
        region: ContentsRegion | None = find_contents(
            blocks,
            page_height=height,
            continued=bool(self.contents_pages) and self.contents_pages[-1] == number - 1,
            figures=self._contents_figures,
            listed=number in self._contents_by_outline,
            outline_titles=outline_keys,
        )
        if region is None:
            return blocks
        inside_region = [b for b in blocks if region.holds(b)]
        if not inside_region:
            return blocks
        self.contents_pages.append(number)
        self._contents_figures = region.figures
        self.contents_entries.extend(region.entries)
        self._map.add_contents(region.entries, page=number, top=region.top, bottom=region.bottom)
        folded = PBlock(
            bbox=inside_region[0].bbox,
            lines=[Line(text=row, size=0.0, bold=False) for row in region.text.split("\n")],
            kind="contents",
        )
        first = blocks.index(inside_region[0])
        rest = [b for b in blocks if not region.holds(b)]
        return [*rest[:first], folded, *rest[first:]]

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
        dpi = ocr_dpi(page)
        if dpi is None:
            self.summary.warnings.append(f"page {number} is too large to OCR")
            return None
        start = time.perf_counter()
        try:
            return page.get_textpage_ocr(
                flags=TEXT_FLAGS,
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

    def _with_tables(self, page: Any, blocks: list[PBlock], number: int) -> list[PBlock]:
        try:
            tables = page_tables(page)
        except Exception as exc:
            self.summary.warnings.append(f"table detection failed on page {number}: {exc}")
            return blocks
        for table in tables:
            raw_rows = table.rows
            rows = table_rows(raw_rows)
            columns = max(len(r) for r in raw_rows)
            rows = self._continue_table(rows, columns, table.bbox[1], blocks, number, table.header)
            bbox = table.bbox
            blocks = [b for b in blocks if not inside(b.bbox, bbox)]
            caption = None
            near = [
                b
                for b in blocks
                if _TABLE_CAPTION.match(b.text)
                and (abs(b.bbox[3] - bbox[1]) < 40 or abs(b.bbox[1] - bbox[3]) < 40)
                and min(b.bbox[2], bbox[2]) > max(b.bbox[0], bbox[0])  # not the next column's
            ]
            if near:
                caption_block = near[0]
                caption = clean_inline(caption_block.text)
                blocks = [b for b in blocks if b is not caption_block]
            blocks.append(
                PBlock(
                    bbox=bbox,
                    lines=[Line(text=rows[0], size=0.0, bold=False)],
                    kind="table",
                    table=Block(kind="table", text="\n".join(rows), caption=caption),
                )
            )
        return blocks

    def _continue_table(
        self,
        rows: list[str],
        columns: int,
        top: float,
        blocks: list[PBlock],
        number: int,
        titled: bool = False,
    ) -> list[str]:
        """A table continued from the previous page gets that page's header row again (one
        with column titles of its own starts a new table)."""
        last = self._last_table
        self._last_table = (columns, rows[0], number)
        starts_page = not any(b.bbox[3] <= top + 1 for b in blocks)
        if last is None or titled or not starts_page or last[2] != number - 1:
            return rows
        if last[0] != columns or rows[0] == last[1]:
            return rows
        self._last_table = (columns, last[1], number)
        return [last[1], *rows]

    def _to_blocks(self, blocks: list[PBlock]) -> list[Block]:
        out: list[Block] = []
        for b in blocks:
            if b.table is not None:
                out.append(b.table)
                continue
            if b.kind == "contents":
                text = "\n".join(clean_inline(line.text) for line in b.lines if line.text.strip())
                if text:
                    out.append(Block(kind="contents", text=text))
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
    """Open a PDF/EPUB (or a PNG/JPEG page image, as a one-page PDF), handling passwords;
    raises BadInputError with a FailureReason code."""
    filetype = "epub" if mime == "application/epub+zip" else "pdf"
    try:
        if mime in ("image/png", "image/jpeg"):
            # a photo or scan of a page: a one-page PDF whose page is the image (then OCR)
            with pymupdf.open(path) as image:
                doc = pymupdf.open(stream=image.convert_to_pdf(), filetype="pdf")
        else:
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
