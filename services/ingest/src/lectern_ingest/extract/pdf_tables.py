"""Tables on a PDF page: ruled grids found by PyMuPDF, and tables without a grid (booktabs
rules, or columns aligned with white space) read by row and column from the words'
positions; all kept only when they look like tables."""

from __future__ import annotations

import re
from bisect import bisect
from collections import Counter
from dataclasses import dataclass, field
from itertools import pairwise
from statistics import median
from typing import Any

import pymupdf as _pymupdf

from lectern_ingest.cleaning import (
    clean_inline,
)
from lectern_ingest.extract.pdf_layout import TEXT_FLAGS

# PyMuPDF is only partly typed; its objects are handled as Any here.
pymupdf: Any = _pymupdf

Box = tuple[float, float, float, float]
#: x0, y0, x1, y1, text, text block and line numbers of one word on the page
Word = tuple[float, float, float, float, str, int, int]

#: a cell "is a number": digits with at most a unit, a sign, a footnote mark ("14.0%", "(78)",
#: "+7", "1990-96", "110 M")
_LETTERS = re.compile(r"[^\W\d_]")
_NUMBER_START = re.compile(r"[-+±−–~<>≈≤≥(\[$€£¥#*]*\.?\d")
#: cells that stand for a missing value in a column of numbers
_PLACEHOLDERS = frozenset({"-", "–", "—", "−", "n.a.", "n/a", "na", "..", "...", "…", "x", "×"})
_CAPTION_START = re.compile(r"^(?:table|tab\.|figure|fig\.)\s*[\dIVXivx]", re.IGNORECASE)
#: a gap between words this many word heights wide separates cells (a space is ~0.25; the
#: narrowest column gaps in the development papers' tables are ~1.1)
_CELL_GAP = 0.6
#: a run of this many words in one cell is prose, not a table cell (the longest labels and
#: descriptions in the development documents' tables have 5)
_PROSE_WORDS = 7
#: at most this many drawn figure parts (curves, bars) inside a rule-bounded region (the
#: development papers' tables have none; their charts dozens)
_MAX_CLUTTER = 3
#: header lines above a table's first value (two-level headers in the development papers)
_MAX_HEADER_ROWS = 3
#: rules further apart than this share of the page frame it (the IRS manual's header and
#: footer rules: 0.9); the development documents' tables are at most 0.34 tall, and a
#: taller one between rules is left to the white-space reading
_MAX_RULED_HEIGHT = 0.6


@dataclass(slots=True)
class PageTable:
    """A table found on a page: its box and its rows of cell texts, header row first."""

    bbox: Box
    rows: list[list[str | None]]
    #: the first row holds column titles read as such (a table continued from the previous
    #: page has none)
    header: bool = False


@dataclass(slots=True)
class _Drawings:
    """What the page's vector drawings say about tables."""

    spans: Counter[tuple[int, int]] = field(default_factory=Counter)
    verticals: set[int] = field(default_factory=set)
    #: thin horizontal rules: x0, x1, y
    rules: list[tuple[float, float, float]] = field(default_factory=list)
    #: vertical rules: x, y0, y1
    dividers: list[tuple[float, float, float]] = field(default_factory=list)
    #: centres of curves and boxes, parts of figures rather than of tables
    clutter: list[tuple[float, float, float]] = field(default_factory=list)


@dataclass(slots=True)
class _Row:
    words: list[Word]
    y0: float
    y1: float

    def segments(self, gap: float) -> list[list[Word]]:
        """Runs of words separated by less than ``gap``: cells, or prose."""
        out: list[list[Word]] = []
        right = -1e9
        for w in self.words:
            if out and w[0] - right <= gap:
                out[-1].append(w)
            else:
                out.append([w])
            right = max(right, w[2]) if len(out[-1]) > 1 else w[2]
        return out


@dataclass(slots=True)
class _Line:
    """A row of a table being read: its cells and the top of its last visual line."""

    cells: list[str]
    y0: float
    y1: float

    @property
    def label_only(self) -> bool:
        return bool(self.cells[0]) and not any(self.cells[1:])

    @property
    def lone_text(self) -> int | None:
        """The column of the line's only cell when that cell is text, not a number."""
        filled = [i for i, c in enumerate(self.cells) if c]
        if len(filled) == 1 and not _is_value(self.cells[filled[0]]):
            return filled[0]
        return None


def _drawings(page: Any) -> _Drawings:
    found = _Drawings()
    for path in page.get_cdrawings():
        for item in path["items"]:
            if item[0] == "l":
                (x0, y0), (x1, y1) = item[1], item[2]
                edges = [(min(x0, x1), y0, max(x0, x1), y1)]
                if abs(y1 - y0) < 1.5 and abs(x1 - x0) >= 40:
                    found.rules.append((min(x0, x1), max(x0, x1), (y0 + y1) / 2))
                elif abs(x1 - x0) < 1.5 and abs(y1 - y0) >= 4:
                    found.dividers.append(((x0 + x1) / 2, min(y0, y1), max(y0, y1)))
            elif item[0] == "re":
                x0, y0, x1, y1 = item[1]
                edges = [(x0, y0, x1, y0), (x0, y1, x1, y1), (x0, y0, x0, y1), (x1, y0, x1, y1)]
                if y1 - y0 <= 2 and x1 - x0 >= 40:
                    found.rules.append((x0, x1, (y0 + y1) / 2))
                elif x1 - x0 <= 2 and y1 - y0 >= 4:
                    found.dividers.append(((x0 + x1) / 2, y0, y1))
                elif x1 - x0 > 3 and y1 - y0 > 3:
                    found.clutter.append(((x0 + x1) / 2, (y0 + y1) / 2, x1 - x0))
            else:
                if item[0] == "c":
                    (x0, y0), (x1, y1) = item[1], item[-1]
                    found.clutter.append(((x0 + x1) / 2, (y0 + y1) / 2, 0.0))
                continue
            for ex0, ey0, ex1, ey1 in edges:
                if abs(ey1 - ey0) < 1.5 and ex1 - ex0 >= 40:
                    found.spans[(round(ex0 / 3), round(ex1 / 3))] += 1
                elif abs(ex1 - ex0) < 1.5 and abs(ey1 - ey0) >= 8:
                    found.verticals.add(round(ex0 / 3))
    return found


def _is_grid(drawings: _Drawings) -> bool:
    if not drawings.spans:
        return False
    aligned = drawings.spans.most_common(1)[0][1]
    # A framed box has three or so aligned rules and two sides; a table has more of either.
    verticals = len(drawings.verticals)
    return (aligned >= 4 and verticals >= 2) or (aligned >= 3 and verticals >= 3)


def page_tables(page: Any) -> list[PageTable]:
    """The page's tables: ruled grids by PyMuPDF's finder, then tables drawn without a grid
    (booktabs rules, white-space columns) from the words' positions, outside the grids."""
    drawings = _drawings(page)
    found: list[PageTable] = []
    if _is_grid(drawings):
        tables = page.find_tables(use_layout=False).tables
        sorted_words = page.get_text("words", flags=TEXT_FLAGS, sort=True) if tables else []
        for table in tables:
            raw_rows = cell_texts(table, sorted_words)
            if plausible_table(raw_rows):
                bbox = (table.bbox[0], table.bbox[1], table.bbox[2], table.bbox[3])
                found.append(PageTable(bbox=bbox, rows=raw_rows))
    words: list[Word] = [
        (w[0], w[1], w[2], w[3], w[4], w[5], w[6])
        for w in page.get_text("words", flags=TEXT_FLAGS)
        if w[4].strip()
    ]
    if len(words) < 6:
        return found
    taken = [t.bbox for t in found]
    for table in _unruled_tables(words, drawings, (page.rect.width, page.rect.height), taken):
        found.append(table)
        taken.append(table.bbox)
    return found


def _unruled_tables(
    words: list[Word], drawings: _Drawings, page: tuple[float, float], taken: list[Box]
) -> list[PageTable]:
    """Booktabs tables between rules of one extent, then columns of numbers aligned with
    white space; ``page``: the page's width and height."""
    height = median(w[3] - w[1] for w in words)
    gap = max(2.5, _CELL_GAP * height)
    found: list[PageTable] = []
    for box in _rule_regions(words, drawings, gap, height, page):
        if any(_overlaps(box, t) for t in [*taken, *(f.bbox for f in found)]):
            continue
        inner = [r[2] for r in drawings.rules if box[1] + 1 < r[2] < box[3] - 1 and _wide(r, box)]
        dividers = sorted(
            {
                round(x, 1)
                for x, y0, y1 in drawings.dividers
                if box[0] + 2 < x < box[2] - 2 and y0 < box[3] and y1 > box[1]
            }
        )
        table = _read_region(_words_in(words, box), box, inner, dividers, ruled=True)
        if table is not None and not _straddled(table.bbox, words):
            found.append(table)
    if _has_number_rows(words, gap, height):
        for box in _aligned_regions(words, gap, height, page[0]):
            if any(_overlaps(box, t) for t in [*taken, *(f.bbox for f in found)]):
                continue
            if _cluttered(box, drawings):
                continue
            table = _read_region(_words_in(words, box), box, [], [], ruled=False)
            if table is not None and not _straddled(table.bbox, words):
                found.append(table)
    return found


def _straddled(bbox: Box, words: list[Word]) -> bool:
    """A text block partly in the table and partly out: the extractor would either repeat
    the table's words in that block's paragraph or lose the block's other words."""
    x0, y0, x1, y1 = bbox
    inside: dict[int, set[bool]] = {}
    for w in words:
        cx, cy = (w[0] + w[2]) / 2, (w[1] + w[3]) / 2
        inside.setdefault(w[5], set()).add(x0 <= cx <= x1 and y0 <= cy <= y1)
    return any(len(flags) == 2 for flags in inside.values())


def _wide(rule: tuple[float, float, float], box: Box) -> bool:
    """A rule across (nearly) the whole region: a midrule, not a cmidrule under a span."""
    return rule[1] - rule[0] >= 0.9 * (box[2] - box[0])


def _overlaps(a: Box, b: Box) -> bool:
    return min(a[2], b[2]) - max(a[0], b[0]) > 1 and min(a[3], b[3]) - max(a[1], b[1]) > 1


def _words_in(words: list[Word], box: Box) -> list[Word]:
    return [
        w
        for w in words
        if box[0] <= (w[0] + w[2]) / 2 <= box[2] and box[1] <= (w[1] + w[3]) / 2 <= box[3]
    ]


def _rows(words: list[Word]) -> list[_Row]:
    """Words grouped into visual rows by their vertical centres, left to right."""
    rows: list[_Row] = []
    anchor = 0.0
    for w in sorted(words, key=lambda w: w[1] + w[3]):
        centre = (w[1] + w[3]) / 2
        if rows and centre - anchor <= 0.45 * min(rows[-1].y1 - rows[-1].y0, w[3] - w[1]):
            row = rows[-1]
            row.words.append(w)
            row.y0, row.y1 = min(row.y0, w[1]), max(row.y1, w[3])
        else:
            rows.append(_Row(words=[w], y0=w[1], y1=w[3]))
            anchor = centre
    for row in rows:
        row.words.sort(key=lambda w: w[0])
    return rows


def _joined(words: list[Word]) -> str:
    return " ".join(w[4] for w in words)


def _text(words: list[Word]) -> str:
    return clean_inline(" ".join(w[4] for w in words))


def _is_number(text: str) -> bool:
    """A numeric cell: digits with at most a short unit or mark ("14.0%", "(78)", "110 M"),
    not a name with a digit ("g0", "TC001")."""
    if not _NUMBER_START.match(text):
        return False
    letters = len(_LETTERS.findall(text))
    return letters <= 2 or letters <= 0.25 * len(text.replace(" ", ""))


def _is_value(text: str) -> bool:
    return _is_number(text) or text.lower() in _PLACEHOLDERS


def _is_prose(segment: list[Word]) -> bool:
    if _CAPTION_START.match(_joined(segment[:2])):
        return True
    return len(segment) >= _PROSE_WORDS and (
        sum(1 for w in segment if len(_LETTERS.findall(w[4])) >= 2) >= _PROSE_WORDS
    )


def _line_runs(words: list[Word], gap: float) -> list[list[Word]]:
    """The words of each PyMuPDF line (in the order the page gives them) cut at wide gaps."""
    runs: list[list[Word]] = []
    for w in words:
        last = runs[-1][-1] if runs else None
        if last is not None and last[5:7] == w[5:7] and 0 <= w[0] - last[2] <= gap:
            runs[-1].append(w)
        else:
            runs.append([w])
    return runs


def _has_number_rows(words: list[Word], gap: float, height: float) -> bool:
    """Cheap gate before reading white-space columns: three or more heights on the page with
    two numbers each standing on their own (not inside a sentence)."""
    rows: Counter[int] = Counter()
    for run in _line_runs(words, gap):
        if len(run) <= 2 and _is_number(" ".join(w[4] for w in run)):
            rows[int((run[0][1] + run[0][3]) / height)] += 1
    return sum(1 for count in rows.values() if count >= 2) >= 3


def _rule_regions(
    words: list[Word], drawings: _Drawings, gap: float, height: float, page: tuple[float, float]
) -> list[Box]:
    """Boxes between horizontal rules of one extent (booktabs' top, mid and bottom rules),
    cut where the text between two rules is prose or a caption (page rules, two tables), and
    kept where the rules hug the text inside (not a page's header and footer rules)."""
    groups: list[list[tuple[float, float, float]]] = []
    for rule in sorted(drawings.rules, key=lambda r: r[2]):
        for group in groups:
            if abs(group[0][0] - rule[0]) <= 3 and abs(group[0][1] - rule[1]) <= 3:
                if rule[2] - group[-1][2] > 2:  # a double rule counts once
                    group.append(rule)
                break
        else:
            groups.append([rule])
    boxes: list[Box] = []
    for group in (g for g in groups if len(g) >= 2):
        x0, x1 = min(r[0] for r in group) - 2, max(r[1] for r in group) + 2
        start = group[0][2]
        for upper, lower in pairwise(group):
            if lower[2] - upper[2] > _MAX_RULED_HEIGHT * page[1] or any(
                _is_prose(run)
                for run in _line_runs(_words_in(words, (x0, upper[2], x1, lower[2])), gap)
            ):
                if upper[2] > start:
                    boxes.append((x0, start, x1, upper[2]))
                start = lower[2]
        if group[-1][2] > start:
            boxes.append((x0, start, x1, group[-1][2]))
    return [
        b
        for b in boxes
        if b[3] - b[1] <= _MAX_RULED_HEIGHT * page[1]
        and _hugged(b, words, height)
        and not _cluttered(b, drawings)
    ]


def _hugged(box: Box, words: list[Word], height: float) -> bool:
    """Booktabs rules sit just above the first row and just below the last."""
    inside = _words_in(words, box)
    if not inside:
        return False
    top = min(w[1] for w in inside)
    bottom = max(w[3] for w in inside)
    # at least three lines of text, and no blank band along the rules
    return bottom - top >= 2.5 * height and max(top - box[1], box[3] - bottom) <= 2.5 * height


def _cluttered(box: Box, drawings: _Drawings) -> bool:
    """A chart's axes and grid lines look like rules: its bars and curves give it away."""
    width = box[2] - box[0]
    inside = [
        c
        for c in drawings.clutter
        if box[0] <= c[0] <= box[2] and box[1] <= c[1] <= box[3] and c[2] < 0.8 * width
    ]
    return len(inside) > _MAX_CLUTTER


def _aligned_regions(words: list[Word], gap: float, height: float, page_width: float) -> list[Box]:
    """Boxes around runs of rows with two or more numbers set apart by white space, widened
    to their label column and to the header rows just above."""
    rows = _rows(words)
    segments = [row.segments(gap) for row in rows]
    valued = [[s for s in segs if _is_value(_joined(s))] for segs in segments]
    runs: list[list[int]] = []
    chained = False  # no wide vertical gap since the run's last row of numbers
    for i, row in enumerate(rows):
        chained = chained and row.y0 - rows[i - 1].y1 <= 2 * height
        if len(valued[i]) < 2:
            continue
        if chained and i - runs[-1][-1] <= 4:
            runs[-1].append(i)
        elif sum(_is_number(_joined(s)) for s in valued[i]) >= 2:  # placeholders only go on
            runs.append([i])
        else:
            continue
        chained = True
    boxes: list[Box] = []
    for run in runs:
        if len(run) < 3:
            continue
        nx0 = min(s[0][0] for i in run for s in valued[i])
        nx1 = max(max(w[2] for w in s) for i in run for s in valued[i])
        values = (nx0, nx1)
        labels, notes = [], []
        for i in run:
            before = [s for s in segments[i] if max(w[2] for w in s) < valued[i][0][0][0]]
            after = [s for s in segments[i] if s[0][0] > max(w[2] for w in valued[i][-1])]
            labels.extend(before[-1:])
            notes.extend(after[:1])
        x0 = min([nx0, *(s[0][0] for s in _text_column(labels, page_width, gap))])
        nx1 = max([nx1, *(w[2] for s in _text_column(notes, page_width, gap) for w in s)])
        # text wrapping inside the table (a description's second line) stays in it
        for segs in segments[run[0] : run[-1] + 1]:
            nx1 = max([nx1, *(max(w[2] for w in s) for s in segs if x0 <= s[0][0] <= nx1)])
        top, bottom = rows[run[0]].y0, rows[run[-1]].y1
        # the titles may stand a blank line above the numbers, their own lines closer
        allowed = 3.5 * height
        row0 = top
        for i in range(run[0] - 1, max(-1, run[0] - 1 - _MAX_HEADER_ROWS), -1):
            if top - rows[i].y1 > allowed:
                break
            titles = _header_like(segments[i], (x0, nx1), values, gap, widen=top == row0)
            if titles is None:
                break
            top, allowed = rows[i].y0, 1.2 * height
            x0, nx1 = min(x0, titles[0]), max(nx1, titles[1])
        boxes.append((x0 - 1, top - 1, nx1 + 1, bottom + 1))
    return boxes


def _text_column(segments: list[list[Word]], page_width: float, gap: float) -> list[list[Word]]:
    """Short texts beside the numbers starting at one x (labels, descriptions), not the
    other page column nor a mark in the margin; none when they are not such a column."""
    if not segments:
        return []
    widths = [max(w[2] for w in s) - s[0][0] for s in segments]
    if median(len(s) for s in segments) > 6 or median(widths) > 0.3 * page_width:
        return []
    start = median(s[0][0] for s in segments)
    return [s for s in segments if abs(s[0][0] - start) <= 2 * gap]


def _header_like(
    segments: list[list[Word]],
    span: tuple[float, float],
    values: tuple[float, float],
    gap: float,
    *,
    widen: bool,
) -> tuple[float, float] | None:
    """The x-extent of a short row of column titles over the run, or None: titles next to
    the numbers (``widen``) may reach a little past the columns they head, titles above them
    stay inside; no text runs in from beside the table (a sentence, the other page column),
    and no prose or caption; a lone title must stand over the columns of numbers."""
    reach = max(3 * gap, 0.5 * (span[1] - span[0])) if widen else gap
    lo, hi = span[0] - reach, span[1] + reach
    near = [s for s in segments if s[0][0] < hi and max(w[2] for w in s) > lo]
    if not near or any(s[0][0] < lo or max(w[2] for w in s) > hi for s in near):
        return None
    words = [w for s in near for w in s]
    if any(_is_prose(s) for s in near) or (words[-1][4].endswith(".") and len(words) >= 3):
        return None  # prose, a caption, or the end of a sentence
    if len(near) < 2 and not values[0] - gap <= near[0][0][0] < values[1]:
        return None  # a sentence or a heading at the left, a description's line at the right
    return near[0][0][0], max(w[2] for w in words)


def _read_region(
    words: list[Word], box: Box, inner_rules: list[float], dividers: list[float], *, ruled: bool
) -> PageTable | None:
    """Rows and columns of the words in ``box``, or None when they do not make a table;
    ``inner_rules``: heights of full-width rules inside, ``dividers``: x of vertical rules."""
    if len(words) < 6:
        return None
    height = median(w[3] - w[1] for w in words)
    gap = max(2.5, _CELL_GAP * height)
    rows = _rows(words)
    segments = [row.segments(gap) for row in rows]
    valued = [any(_is_value(_joined(s)) for s in segs) for segs in segments]
    body_start = next((i for i, v in enumerate(valued) if v), None)
    if body_start is None:
        return None
    midrules = [y for y in inner_rules if y < rows[body_start].y0]
    if midrules:  # the header ends at the last full rule above the first value
        body_start = next((i for i, row in enumerate(rows) if row.y0 > max(midrules)), body_start)
    if body_start > _MAX_HEADER_ROWS:
        return None
    sample = [rows[i] for i in range(body_start, len(rows)) if len(segments[i]) >= 2 and valued[i]]
    if len(sample) < 2:
        return None
    separators = _separators(sample, gap)
    columns = len(separators) + 1
    if columns < 2:
        return None
    extents = _extents(sample, separators, columns)
    header: list[str] = [""] * columns
    for segs in segments[:body_start]:
        for col, text in _header_cells(segs, separators, extents, dividers):
            header[col] = f"{header[col]} {text}".strip()
    body: list[_Line] = []
    for i in range(body_start, len(rows)):
        cells: list[list[str]] = [[] for _ in range(columns)]
        for seg in segments[i]:
            cols = [bisect(separators, (w[0] + w[2]) / 2) for w in seg]
            if valued[i] or min(cols) == max(cols):
                for col, w in zip(cols, seg, strict=True):
                    cells[col].append(w[4])
            else:  # a long label running past its column: it stays whole
                cells[cols[0]].extend(w[4] for w in seg)
        # the caller cleans cell texts (table_rows), as for ruled tables
        body.append(_Line(cells=[" ".join(c) for c in cells], y0=rows[i].y0, y1=rows[i].y1))
    body = _join_wrapped(body, inner_rules)
    if not _tabular(header, body, ruled=ruled):
        return None
    x0 = min(w[0] for w in words)
    x1 = max(w[2] for w in words)
    bbox = (min(x0, box[0]) if ruled else x0, box[1], max(x1, box[2]) if ruled else x1, box[3])
    raw: list[list[str | None]] = [list(line.cells) for line in body]
    if any(header):
        raw.insert(0, list(header))
    return PageTable(bbox=bbox, rows=raw, header=any(header))


def _separators(sample: list[_Row], gap: float) -> list[float]:
    """Middles of the white-space rivers that run down the sampled rows: column boundaries."""
    events: list[tuple[float, int]] = []
    for row in sample:  # each row's inked spans, merged so that a row counts once
        start, end = row.words[0][0], row.words[0][2]
        for w in row.words[1:]:
            if w[0] > end:
                events += [(start, 1), (end, -1)]
                start = w[0]
            end = max(end, w[2])
        events += [(start, 1), (end, -1)]
    events.sort()
    # no row may cross a river: tolerating a few lets the ragged ends of a text column
    # (descriptions of different lengths) pass for a column of their own
    separators: list[float] = []
    depth = 0
    opened: float | None = None  # where the current river began, right of some column
    for x, step in events:
        depth += step
        if depth == 1 and step == 1:
            if opened is not None and x - opened >= gap:
                separators.append((opened + x) / 2)
            opened = None
        elif depth == 0:
            opened = x
    return separators


def _extents(
    sample: list[_Row], separators: list[float], columns: int
) -> list[tuple[float, float]]:
    spans: list[tuple[float, float]] = [(1e9, -1e9)] * columns
    for row in sample:
        for w in row.words:
            col = bisect(separators, (w[0] + w[2]) / 2)
            lo, hi = spans[col]
            spans[col] = (min(lo, w[0]), max(hi, w[2]))
    return spans


def _header_cells(
    segs: list[list[Word]],
    separators: list[float],
    extents: list[tuple[float, float]],
    dividers: list[float],
) -> list[tuple[int, str]]:
    """A header row's titles by column; a title spanning several columns heads each of them
    (all the value columns between the vertical rules around it, where there are such)."""
    out: list[tuple[int, str]] = []
    for seg in segs:
        x0, x1 = seg[0][0], max(w[2] for w in seg)
        text = _text(seg)
        spanned = [
            col
            for col, (lo, hi) in enumerate(extents)
            if hi > lo and min(x1, hi) - max(x0, lo) > 0.25 * min(hi - lo, x1 - x0)
        ]
        if len(spanned) < 2 or len({bisect(separators, (w[0] + w[2]) / 2) for w in seg}) < 2:
            out.append((bisect(separators, (x0 + x1) / 2), text))
            continue
        left = max((d for d in dividers if d <= x0), default=None)
        right = min((d for d in dividers if d >= x1), default=None)
        if left is not None or right is not None:
            lo_x = left if left is not None else -1e9
            hi_x = right if right is not None else 1e9
            spanned = [
                col
                for col, (lo, hi) in enumerate(extents)
                if hi > lo and lo_x <= (lo + hi) / 2 <= hi_x and (col > 0 or 0 in spanned)
            ]
        out.extend((col, text) for col in spanned)
    return out


def _join_wrapped(body: list[_Line], rules: list[float]) -> list[_Line]:
    """Rejoin cells a PDF split over lines: a line with one text cell only (a label, a
    description) goes up into the row above, and a line whose label starts in lower case
    continues a label-only line above it; never across a rule or a wider gap than rows have."""
    if len(body) < 2:
        return body
    pitch = median(b.y0 - a.y0 for a, b in pairwise(body))

    def ruled_between(a: _Line, b: _Line) -> bool:
        return any(a.y1 <= y <= b.y0 for y in rules)

    def continued_below(i: int) -> bool:
        """A label whose row goes on in lower case on the next line (values there)."""
        line = body[i]
        after = body[i + 1] if i + 1 < len(body) else None
        return (
            line.label_only
            and after is not None
            and after.cells[0][:1].islower()
            and not ruled_between(line, after)
        )

    joined: list[_Line] = [body[0]]
    for i, line in enumerate(body[1:], start=1):
        prev = joined[-1]
        if ruled_between(prev, line) or continued_below(i):
            joined.append(line)
        elif prev.label_only and line.cells[0][:1].islower():
            cells = [f"{prev.cells[0]} {line.cells[0]}", *line.cells[1:]]
            joined[-1] = _Line(cells=cells, y0=line.y0, y1=line.y1)
        elif (col := line.lone_text) is not None and _continues(prev, col, line, pitch):
            cells = list(prev.cells)
            cells[col] = f"{cells[col]} {line.cells[col]}"
            joined[-1] = _Line(cells=cells, y0=line.y0, y1=line.y1)
        else:
            joined.append(line)
    return joined


def _continues(prev: _Line, col: int, line: _Line, pitch: float) -> bool:
    others = [c for i, c in enumerate(prev.cells) if c and i != col]
    return bool(prev.cells[col]) and bool(others) and line.y0 - prev.y0 <= 1.25 * pitch


def _tabular(header: list[str], body: list[_Line], *, ruled: bool) -> bool:
    """Conservative: several rows of short cells, columns of numbers, rows filled alike."""
    columns = len(header)
    if len(body) < 3:
        return False
    cells = [c for line in body for c in line.cells if c]
    if not cells or sum(len(c.split()) >= 2 * _PROSE_WORDS for c in cells) > 0.1 * len(cells):
        return False  # paragraphs set side by side
    if sum(len(c) for c in cells) / len(cells) > 30:
        return False
    numeric_columns = []
    for col in range(columns):
        filled = [line.cells[col] for line in body if line.cells[col]]
        if len(filled) >= 0.5 * len(body) and sum(map(_is_value, filled)) >= 0.6 * len(filled):
            numeric_columns.append(col)
    per_row = 1 if ruled else 2
    with_numbers = sum(1 for line in body if sum(map(_is_number, line.cells)) >= per_row)
    if with_numbers < max(3, 0.6 * len(body)) or not [c for c in numeric_columns if c > 0]:
        return False
    if ruled:
        return True
    # white space alone is weak evidence: two value columns, rows filled alike, and titles
    # (a header row or a text column) that a question can name: not a matrix of numbers
    counts = Counter(sum(1 for c in line.cells if c) for line in body)
    titled = any(h and not _is_number(h) for h in header) or len(numeric_columns) < columns
    return len(numeric_columns) >= 2 and counts.most_common(1)[0][1] >= 0.6 * len(body) and titled


def plausible_table(rows: list[list[str | None]]) -> bool:
    """Reject grids found in figures and diagrams: most cells should hold words."""
    columns = [i for i in range(max((len(r) for r in rows), default=0)) if _filled_column(rows, i)]
    rows = [[row[i] if i < len(row) else None for i in columns] for row in rows]
    cells = [c or "" for row in rows for c in row]
    if len(rows) < 2 or not cells or max(len(r) for r in rows) < 2:
        return False
    filled = [c for c in cells if c.strip()]
    wordy = [c for c in filled if sum(ch.isalnum() for ch in c) >= 2]
    multi = sum(1 for row in rows if sum(1 for c in row if c and c.strip()) >= 2)
    return len(filled) >= 0.5 * len(cells) and len(wordy) >= 0.6 * len(filled) and multi >= 2


def _filled_column(rows: list[list[str | None]], index: int) -> bool:
    return any(index < len(row) and (row[index] or "").strip() for row in rows)


def cell_texts(table: Any, words: list[tuple[Any, ...]]) -> list[list[str | None]]:
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


def table_rows(raw_rows: list[list[str | None]]) -> list[str]:
    """Rows as text, cells joined by " | "; columns empty in every row are left out."""
    width = max((len(r) for r in raw_rows), default=0)
    keep = [i for i in range(width) if _filled_column(raw_rows, i)]
    rows = []
    for raw in raw_rows:
        cells = [clean_inline(raw[i] or "") if i < len(raw) else "" for i in keep]
        if any(cells):
            rows.append(" | ".join(cells))
    return rows


def inside(inner: tuple[float, ...], outer: tuple[float, ...]) -> bool:
    x0, y0 = max(inner[0], outer[0]), max(inner[1], outer[1])
    x1, y1 = min(inner[2], outer[2]), min(inner[3], outer[3])
    if x1 <= x0 or y1 <= y0:
        return False
    area = (inner[2] - inner[0]) * (inner[3] - inner[1]) or 1.0
    return (x1 - x0) * (y1 - y0) / area > 0.5
