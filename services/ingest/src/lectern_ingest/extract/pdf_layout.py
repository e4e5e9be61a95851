"""PDF page layout: visual lines and blocks, page furniture at the margins, reading
order across columns, and headings told by font size, weight and numbering."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

import pymupdf as _pymupdf

from lectern_ingest.cleaning import (
    furniture_key,
    normalize_unicode,
)
from lectern_ingest.extract.headings import numbering_depth
from lectern_ingest.extract.model import (
    Block,
    BlockKind,
    OutlineEntry,
)

# PyMuPDF is only partly typed; its objects are handled as Any here.
pymupdf: Any = _pymupdf

TEXT_FLAGS = (pymupdf.TEXTFLAGS_DICT & ~pymupdf.TEXT_PRESERVE_IMAGES) | pymupdf.TEXT_MEDIABOX_CLIP


_BOLD = 16


_EDGE_BLOCKS = 2


_HEADING_RATIO = 1.12


MAX_HEADING_CHARS = 200


#: the top and bottom share of a page where running headers and footers sit
_MARGIN_BAND = 0.08


_KEY_CHARS = re.compile(r"[\W_]+", re.UNICODE)


_SECTION_NUMBER = re.compile(r"^(\d+(?:\.\d+)*)\.?\s")
_MAX_LEVEL = 4


_FOOTNOTE_MARKS = re.compile(r"[†‡§¶*]|\b(?:and|und|et)\b")


_NOT_A_TITLE = re.compile(r"@|\bdoi\b|https?://|www\.", re.IGNORECASE)


@dataclass(slots=True)
class Line:
    text: str
    size: float
    bold: bool
    #: where the line sits on the page (its left edge, top and bottom)
    x0: float = 0.0
    y0: float = 0.0
    y1: float = 0.0


@dataclass(slots=True)
class PBlock:
    bbox: tuple[float, float, float, float]
    lines: list[Line]
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


def visual_lines(block: dict[str, Any]) -> list[Line]:
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
    out: list[Line] = []
    for top, bottom, spans in rows:
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
        size = sizes.most_common(1)[0][0]
        out.append(Line(text, size, bold, x0=spans[0]["bbox"][0], y0=top, y1=bottom))
    return out


def marginal(line: dict[str, Any], page_height: float) -> bool:
    """A line set sideways (a margin note) or in the top or bottom band of the page."""
    dx, dy = line.get("dir", (1.0, 0.0))
    if abs(dy) > 0.2 or dx < 0:
        return True
    return in_margin_band(float(line["bbox"][1]), float(line["bbox"][3]), page_height)


def in_margin_band(y0: float, y1: float, page_height: float) -> bool:
    """Whether a line from ``y0`` to ``y1`` sits in the top or bottom band of the page."""
    return y1 <= _MARGIN_BAND * page_height or y0 >= (1 - _MARGIN_BAND) * page_height


def line_key(line: dict[str, Any]) -> str:
    return furniture_key("".join(span["text"] for span in line["spans"]))


def page_blocks(
    page: Any,
    textpage: Any = None,
    *,
    drop: frozenset[str] = frozenset(),
    data: dict[str, Any] | None = None,
) -> list[PBlock]:
    """The page's text blocks; marginal lines whose furniture key is in ``drop`` are left out
    before lines on one baseline are merged (a running title beside a margin note stays
    out). ``data``: the page's ``get_text("dict")``, when the caller has it already."""
    if data is None:
        data = page.get_text("dict", flags=TEXT_FLAGS, sort=True, textpage=textpage)
    blocks = []
    for raw in data["blocks"]:
        if raw.get("type", 0) != 0:
            continue
        if drop:
            raw = dict(raw)
            raw["lines"] = [
                line
                for line in raw.get("lines", [])
                if not marginal(line, page.rect.height) or line_key(line) not in drop
            ]
        lines = visual_lines(raw)
        if lines:
            blocks.append(PBlock(bbox=tuple(raw["bbox"]), lines=lines))
    return blocks


def title_key(text: str) -> str:
    return _KEY_CHARS.sub("", normalize_unicode(text).lower())


def letters_key(text: str) -> str:
    return "".join(ch for ch in title_key(text) if not ch.isdigit())


def edge_blocks(blocks: list[PBlock]) -> list[PBlock]:
    by_y = sorted(blocks, key=lambda b: b.bbox[1])
    edges = by_y[:_EDGE_BLOCKS] + by_y[-_EDGE_BLOCKS:]
    return [b for b in edges if len(b.text) <= 150]


def levels_from_numbering(outline: list[OutlineEntry]) -> list[OutlineEntry]:
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


class FontProfile:
    """Body size and heading levels learnt from a sample of pages.

    ``heading_pages`` counts, per font size, the sampled pages where a short block is set in
    it. Sizes that recur are the document's heading levels, largest first. Sizes seen on one
    page only and larger than all of them are the title (level 1) and a cover's or an
    abstract's lines (level 2); a one-off size elsewhere takes no level of its own (ranking
    every size pushed the shared Redbook's chapters, under its cover's five type sizes, to
    the deepest level with their sections).
    """

    def __init__(
        self, sizes: Counter[float], heading_pages: Counter[float], *, sampled: int = 0
    ) -> None:
        self.body = sizes.most_common(1)[0][0] if sizes else 10.0
        big = sorted((s for s in heading_pages if s >= self.body * _HEADING_RATIO), reverse=True)
        recurring = [s for s in big if heading_pages[s] >= 2] if sampled >= 4 else big
        top = recurring[0] if recurring else 0.0
        # one-off sizes above the recurring ones: the largest is the title (1), the others
        # (an "Abstract" set large, a cover's lines) share level 2
        singles = [s for s in big if s > top] if recurring else []
        self.levels = {size: 1 if i == 0 else 2 for i, size in enumerate(singles)}
        first = 1 + min(len(singles), 2)
        deepest = _MAX_LEVEL + first - 1
        self.levels.update({size: min(i + first, deepest) for i, size in enumerate(recurring)})
        #: numbered headings ("3.2.1 Title") are this much deeper than their numbers' depth
        self.numbering_offset: int | None = None

    @property
    def heading_floor(self) -> float:
        """The smallest type size a heading is set in for its size alone."""
        return self.body * _HEADING_RATIO

    def level_for(self, size: float) -> int:
        if size in self.levels:
            return self.levels[size]
        larger = [lvl for s, lvl in self.levels.items() if s <= size]
        return min(larger) if larger else max(self.levels.values(), default=0) + 1

    def learn_numbering(self, headings: list[tuple[int, int]]) -> None:
        """From (numbering depth, font level) of the sampled numbered headings: when they
        form a scheme (three or more, two depths or more), depth decides their level."""
        if len(headings) < 3 or len({depth for depth, _ in headings}) < 2:
            return
        offsets = Counter(level - depth for depth, level in headings)
        self.numbering_offset = max(0, offsets.most_common(1)[0][0])

    def heading_level(self, block: PBlock) -> int | None:
        """The block's heading level, or None when it is no heading; numbering first."""
        level = is_font_heading(block, self)
        if level is None or self.numbering_offset is None:
            return level
        depth = numbering_depth(block.text)
        return level if depth is None else min(depth + self.numbering_offset, _MAX_LEVEL + 2)


def looks_like_byline(text: str) -> bool:
    """An author line ("A. Smith†, B. Jones‡ and C. Lee*"), e-mail or link: large or bold
    like a heading, but no section starts there."""
    commas = text.count(",")
    return bool(
        _NOT_A_TITLE.search(text) or commas >= 3 or (commas >= 2 and _FOOTNOTE_MARKS.search(text))
    )


def is_font_heading(block: PBlock, fonts: FontProfile) -> int | None:
    text = block.text
    letters = sum(ch.isalpha() for ch in text)
    if len(text) > MAX_HEADING_CHARS or len(block.lines) > 3 or letters < 2:
        return None
    if looks_like_byline(text):
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
        return min(max(fonts.levels.values(), default=0) + 1, _MAX_LEVEL + 1)
    return None


def merge_split_headings(blocks: list[PBlock]) -> list[PBlock]:
    """Rejoin a heading set on two blocks ("Trace-based ... for Dynamic" / "Languages"): the
    same level and size, the second right below the first, the first not closed."""
    out: list[PBlock] = []
    for block in blocks:
        prev = out[-1] if out else None
        if (
            prev is not None
            and prev.kind == block.kind == "heading"
            and prev.level == block.level
            and prev.size == block.size
            and 0 <= block.bbox[1] - prev.bbox[3] <= 0.8 * block.size
            and len(prev.lines) + len(block.lines) <= 3
            and not prev.text.rstrip().endswith((".", ":", "!", "?"))
            and numbering_depth(block.text) is None
        ):
            x0, y0, x1, _ = prev.bbox
            out[-1] = PBlock(
                bbox=(min(x0, block.bbox[0]), y0, max(x1, block.bbox[2]), block.bbox[3]),
                lines=prev.lines + block.lines,
                kind="heading",
                level=prev.level,
            )
            continue
        out.append(block)
    return out


def order_columns(blocks: list[PBlock], page_width: float) -> list[PBlock]:
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
    ordered: list[PBlock] = []
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
