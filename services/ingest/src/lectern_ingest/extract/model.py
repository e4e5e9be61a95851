"""What extractors produce: units (a page, a slide, a stretch of a transcript) made of blocks."""

from __future__ import annotations

import abc
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Literal, Self

from lectern_common.errors import BadInputError

BlockKind = Literal["heading", "paragraph", "table", "caption", "contents"]


@dataclass(frozen=True, slots=True)
class Block:
    """One structural piece of text in reading order.

    Headings carry a ``level`` (1 = chapter). Tables carry their rows in ``text``, one row per
    line with cells joined by `` | `` and the header row first, plus an optional ``caption``.
    ``contents`` is (part of) a printed table of contents, one entry a line: apparatus, whose
    rows never become headings (the entries' titles found in the text do).
    """

    kind: BlockKind
    text: str
    level: int | None = None
    caption: str | None = None


@dataclass(slots=True)
class Unit:
    """A page, slide or transcript stretch: the blocks found there and where it is."""

    blocks: list[Block]
    page: int | None = None
    slide: int | None = None
    time_start: float | None = None
    time_end: float | None = None


@dataclass(frozen=True, slots=True)
class OutlineEntry:
    """One entry of a document's table of contents (1-based page, when known)."""

    level: int
    title: str
    page: int | None


@dataclass(slots=True)
class ExtractionSummary:
    """What happened during extraction; complete once ``units()`` is exhausted."""

    page_count: int | None
    units: int = 0
    skipped_pages: list[int] = field(default_factory=list)
    failed_pages: list[int] = field(default_factory=list)
    ocr_pages: list[int] = field(default_factory=list)
    #: wall time spent OCRing (rendering + Tesseract), summed over ``ocr_pages``
    ocr_seconds: float = 0.0
    text_chars: int = 0
    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class EntryReport:
    """How the entries of a printed contents page and of the outline matched the text."""

    #: the contents page's entries no line of the text matched
    contents_unmatched: list[OutlineEntry]
    #: the outline's entries the heading tree follows, and those no line of the text matched
    outline: list[OutlineEntry]
    outline_unmatched: list[OutlineEntry]


class Extraction(abc.ABC):
    """An opened document; iterate ``units()`` once, then read ``summary``; close when done."""

    mime: str
    #: pages (PDF, EPUB) or slides (PPTX); None for flowing formats (DOCX, HTML, text)
    page_count: int | None
    #: number of units ``units()`` yields (exact; the denominator for progress)
    total_units: int
    title: str | None
    outline: list[OutlineEntry]
    summary: ExtractionSummary
    #: what the document's printed table of contents lists (title, printed page), when it
    #: has one: its entries whose titles are lines of the text make the heading tree
    contents_entries: Sequence[OutlineEntry] = ()

    @abc.abstractmethod
    def _iter_units(self) -> Iterator[Unit]:
        """Yield the units of the document in reading order."""

    def units(self) -> Iterator[Unit]:
        """Yield units lazily; raise ``no_text`` at the end when nothing had any text."""
        for unit in self._iter_units():
            self.summary.units += 1
            self.summary.text_chars += sum(len(b.text) for b in unit.blocks)
            yield unit
        if self.summary.text_chars == 0:
            detail = ""
            if self.summary.skipped_pages:
                skipped = len(self.summary.skipped_pages)
                detail = f"; {skipped} page(s) have no text layer and were not OCRed"
            raise BadInputError(f"no extractable text{detail}", reason="no_text")

    def entry_report(self) -> EntryReport | None:
        """How the contents page's and the outline's entries matched lines of the text, once
        ``units()`` is exhausted; None where the format does not match them."""
        return None

    def close(self) -> None:  # noqa: B027 - most formats hold nothing open
        """Release the underlying file handles."""

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class ListExtraction(Extraction):
    """Extraction of a format whose library parses the whole file anyway (DOCX, HTML, text)."""

    def __init__(
        self,
        *,
        mime: str,
        units: list[Unit],
        title: str | None = None,
        outline: list[OutlineEntry] | None = None,
        page_count: int | None = None,
        warnings: list[str] | None = None,
    ) -> None:
        self.mime = mime
        self._units = units
        self.page_count = page_count
        self.total_units = len(units)
        self.title = title
        self.outline = outline or []
        self.summary = ExtractionSummary(page_count=page_count, warnings=list(warnings or []))

    def _iter_units(self) -> Iterator[Unit]:
        yield from self._units


def group_blocks(blocks: list[Block], *, max_blocks: int = 40) -> list[Unit]:
    """Group a flowing document's blocks into units, starting a new one at top-level headings."""
    units: list[Unit] = []
    current: list[Block] = []
    for block in blocks:
        top_heading = block.kind == "heading" and (block.level or 9) <= 2
        if current and (len(current) >= max_blocks or top_heading):
            units.append(Unit(blocks=current))
            current = []
        current.append(block)
    if current:
        units.append(Unit(blocks=current))
    return units
