"""DOCX (python-docx) and PPTX (python-pptx) extraction."""

from __future__ import annotations

import re
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from lectern_common.errors import BadInputError
from lectern_ingest.cleaning import clean_inline, clean_text
from lectern_ingest.extract.model import (
    Block,
    Extraction,
    ExtractionSummary,
    ListExtraction,
    OutlineEntry,
    Unit,
    group_blocks,
)

DOCX_MIME = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
PPTX_MIME = "application/vnd.openxmlformats-officedocument.presentationml.presentation"
_HEADING_STYLE = re.compile(r"^heading\s*(\d)$", re.IGNORECASE)
_W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"


def _docx_cell_text(cell: Any) -> str:
    parts = [p.text for p in cell.paragraphs]
    for nested in cell.tables:
        parts.extend(" ; ".join(_docx_table_rows(nested)).split("\n"))
    return clean_inline(" ".join(parts))


def _docx_table_rows(table: Any) -> list[str]:
    rows = []
    for row in table.rows:
        cells: list[str] = []
        seen: set[int] = set()
        for cell in row.cells:
            # A horizontally merged cell appears once per grid column; keep it once.
            if id(cell._tc) in seen:
                continue
            seen.add(id(cell._tc))
            cells.append(_docx_cell_text(cell))
        if any(cells):
            rows.append(" | ".join(cells))
    return rows


def _docx_heading_level(paragraph: Any) -> int | None:
    style = paragraph.style.name if paragraph.style is not None else ""
    if style.lower() == "title":
        return 1
    match = _HEADING_STYLE.match(style)
    if match:
        return int(match.group(1))
    level = paragraph.paragraph_format.element.pPr
    outline = level.find(f"{_W}outlineLvl") if level is not None else None
    if outline is not None:
        return int(outline.get(f"{_W}val", "0")) + 1
    return None


def open_docx(path: Path) -> Extraction:
    """Headings from Heading N styles, paragraphs and tables in document order."""
    import docx
    from docx.table import Table
    from docx.text.paragraph import Paragraph

    try:
        document = docx.Document(str(path))
    except Exception as exc:
        raise BadInputError(f"unreadable DOCX: {exc}", reason="corrupt") from exc
    blocks: list[Block] = []
    outline: list[OutlineEntry] = []
    pending_caption: str | None = None
    for child in document.element.body.iterchildren():
        if child.tag == f"{_W}p":
            paragraph = Paragraph(child, document)
            text = clean_inline(paragraph.text)
            if not text:
                continue
            style = paragraph.style.name.lower() if paragraph.style is not None else ""
            level = None if style.startswith("toc") else _docx_heading_level(paragraph)
            if style.startswith("toc"):  # Word's table of contents: "TOC Heading", "toc 1" ...
                blocks.append(Block(kind="contents", text=text))
            elif level is not None:
                blocks.append(Block(kind="heading", text=text, level=level))
                outline.append(OutlineEntry(level=level, title=text, page=None))
            elif style == "caption":
                blocks.append(Block(kind="caption", text=text))
                pending_caption = text
                continue
            else:
                blocks.append(Block(kind="paragraph", text=text))
            pending_caption = None
        elif child.tag == f"{_W}tbl":
            rows = _docx_table_rows(Table(child, document))
            if rows:
                if pending_caption and blocks and blocks[-1].text == pending_caption:
                    blocks.pop()
                blocks.append(Block(kind="table", text="\n".join(rows), caption=pending_caption))
            pending_caption = None
    title = clean_inline(document.core_properties.title or "") or None
    return ListExtraction(mime=DOCX_MIME, units=group_blocks(blocks), title=title, outline=outline)


def _shape_blocks(shape: Any) -> Iterator[Block]:
    from pptx.enum.shapes import MSO_SHAPE_TYPE

    if shape.shape_type == MSO_SHAPE_TYPE.GROUP:
        for inner in shape.shapes:
            yield from _shape_blocks(inner)
        return
    if getattr(shape, "has_table", False) and shape.has_table:
        rows = []
        for row in shape.table.rows:
            cells = [clean_inline(cell.text) for cell in row.cells if not cell.is_spanned]
            if any(cells):
                rows.append(" | ".join(cells))
        if rows:
            yield Block(kind="table", text="\n".join(rows))
        return
    if getattr(shape, "has_text_frame", False) and shape.has_text_frame:
        lines = [clean_inline(p.text) for p in shape.text_frame.paragraphs]
        text = "\n".join(line for line in lines if line)
        if text:
            yield Block(kind="paragraph", text=text)


def _slide_title(slide: Any) -> Any | None:
    """The slide's title placeholder. python-pptx's ``shapes.title`` is the placeholder with
    index 0, which a content placeholder without attributes (``<p:ph/>``: type "obj") also
    has: its body would become the heading, out of the indexed text."""
    from pptx.enum.shapes import PP_PLACEHOLDER

    kinds = {PP_PLACEHOLDER.TITLE, PP_PLACEHOLDER.CENTER_TITLE, PP_PLACEHOLDER.VERTICAL_TITLE}
    for shape in slide.placeholders:
        if shape.placeholder_format.type in kinds:
            return shape
    return None


class PptxExtraction(Extraction):
    """One unit per slide: title (heading), body text, tables, speaker notes."""

    def __init__(self, presentation: Any) -> None:
        self._presentation = presentation
        self.mime = PPTX_MIME
        self.page_count = len(presentation.slides)
        self.total_units = self.page_count
        self.title = clean_inline(presentation.core_properties.title or "") or None
        self.outline = []
        self.summary = ExtractionSummary(page_count=self.page_count)

    def _iter_units(self) -> Iterator[Unit]:
        for number, slide in enumerate(self._presentation.slides, start=1):
            try:
                yield Unit(blocks=self._slide_blocks(slide), slide=number)
            except Exception as exc:
                self.summary.failed_pages.append(number)
                self.summary.warnings.append(f"slide {number} unreadable: {exc}")
        if self.page_count and len(self.summary.failed_pages) == self.page_count:
            raise BadInputError("no slide of the presentation could be read", reason="corrupt")

    @staticmethod
    def _slide_blocks(slide: Any) -> list[Block]:
        title_shape = _slide_title(slide)
        blocks: list[Block] = []
        if title_shape is not None and clean_inline(title_shape.text_frame.text):
            blocks.append(
                Block(kind="heading", text=clean_inline(title_shape.text_frame.text), level=1)
            )
        title_id = title_shape.shape_id if title_shape is not None else None
        ordered = sorted(slide.shapes, key=lambda s: ((s.top or 0), (s.left or 0)))
        for shape in ordered:
            if shape.shape_id == title_id:
                continue
            blocks.extend(_shape_blocks(shape))
        if len(blocks) == 1:
            # A title-only slide: its title is all the text there is, so it must be indexed.
            blocks.append(Block(kind="paragraph", text=blocks[0].text))
        if slide.has_notes_slide:
            notes = clean_text(slide.notes_slide.notes_text_frame.text or "")
            if notes:
                blocks.append(Block(kind="paragraph", text=f"Speaker notes: {notes}"))
        return blocks


def open_pptx(path: Path) -> Extraction:
    """Open a PPTX; a package python-pptx cannot read is ``corrupt``."""
    from pptx import Presentation

    try:
        with zipfile.ZipFile(path) as archive:
            if archive.testzip() is not None:
                raise BadInputError("the PPTX package has a damaged member", reason="corrupt")
        presentation = Presentation(str(path))
    except BadInputError:
        raise
    except Exception as exc:
        raise BadInputError(f"unreadable PPTX: {exc}", reason="corrupt") from exc
    return PptxExtraction(presentation)
