"""Tables by cell: a question over a table is answered from a row, read as its cells.

A table row is a unit of its own, rendered as ``text.table_rows`` writes it ("header: cell;
header: cell; ..."), so that it answers alone. Here, what the answer does with one:

- ``asked_cell``: which cell of the row the question asks for. The cell under the column
  whose header shares most of the question's words, among the cells the question does not
  already say, in a row it names ("How many notices were received in December 2015?" names the
  row by its month and asks for the column "Notices"); none when no header is asked about.
- ``cell_span``: where that cell is in the chunk's own text (the row's line, "a | b | c"),
  so that the source viewer marks it.
- ``with_caption``: the row after its table's caption, when the table has a short one (what
  the row's numbers are of).
"""

from __future__ import annotations

import re

from lectern_answerer.units import is_table_row, loose
from lectern_common.text import prefix_stems

#: a caption longer than this is a paragraph the table was cut out of, not a title
CAPTION_WORDS = 24


def row_cells(row: str) -> list[tuple[str, str]]:
    """The (header, cell) pairs of a row as ``text.table_rows`` writes it; a cell under no
    header has an empty one."""
    pairs: list[tuple[str, str]] = []
    for part in row.split("; "):
        header, colon, cell = part.partition(": ")
        pairs.append((header.strip(), cell.strip()) if colon else ("", part.strip()))
    return pairs


def asked_cell(question: str, row: str) -> tuple[str, str] | None:
    """The (header, cell) of ``row`` the question asks for, or None.

    The question must name the row (say one of its cells: its words, or the whole of a
    number); a row it names nothing of is not the one it asks about, and nothing is marked.
    A cell qualifies when its header shares a word with the question (in any form: the first
    five letters) and the question does not already say it. The header sharing most words
    wins, then the one the question says most of (the share of its words), then the first.
    """
    asked = prefix_stems(question)
    if not asked:
        return None
    said = f" {loose(question)} "
    cells = row_cells(row)
    if not any(cell and _names_row(cell, asked, said) for _, cell in cells):
        return None  # the question names no cell of the row: not the row it asks about
    best: tuple[int, float, tuple[str, str]] | None = None
    for header, cell in cells:
        if not header or not cell or _names_row(cell, asked, said):
            continue
        named = prefix_stems(header)
        shared = len(asked & named)
        if shared and (best is None or (shared, shared / len(named)) > best[:2]):
            best = (shared, shared / len(named), (header, cell))
    return best[2] if best else None


def _names_row(cell: str, asked: set[str], said: str) -> bool:
    """Whether the question already says ``cell``: a word of it, or the whole of it."""
    words = {s for s in prefix_stems(cell) if not s[:1].isdigit()}
    return bool(words & asked) or f" {loose(cell)} " in said


def _line_cells(line: str) -> list[tuple[int, int]]:
    """(start, end) of each non-empty cell of a table line ("a | b | c"), spaces trimmed."""
    out: list[tuple[int, int]] = []
    at = 0
    for part in line.split("|"):
        stripped = part.strip()
        if stripped:
            first = at + part.index(stripped[0])
            out.append((first, first + len(stripped)))
        at += len(part) + 1
    return out


def cell_span(chunk_text: str, row: str, cell: str) -> tuple[int, int] | None:
    """Where ``cell`` of ``row`` is in ``chunk_text`` (start, end), or None.

    The row's line is the line of the chunk whose cells are the row's cells (a table is
    stored a row a line, cells between " | "); the cell is taken from that line alone, so a
    value that recurs in other rows is marked in the row that answered.
    """
    wanted = [loose(c) for _, c in row_cells(row) if c]
    target = loose(cell)
    if not wanted or target not in wanted:
        return None
    offset = 0
    for line in chunk_text.split("\n"):
        spans = _line_cells(line)
        if [loose(line[a:b]) for a, b in spans] == wanted:
            a, b = spans[wanted.index(target)]
            return offset + a, offset + b
        offset += len(line) + 1
    return None


def with_caption(row: str, caption: str) -> str:
    """``row`` after its table's caption ("Table 2 Doses — Drug: A; Dose: 5 mg"), or the row
    alone when the caption is missing or too long to be one."""
    caption = " ".join(caption.split()).rstrip(" .:;")
    if not caption or len(caption.split()) > CAPTION_WORDS:
        return row
    return f"{caption} — {row}"


_LABELS = re.compile(r"\s*\[[TW]\d+(?:\s*,\s*[TW]\d+)*\]")


def cited_cell(question: str, sentence: str, chunk_text: str) -> tuple[int, int, str] | None:
    """The cell a cited answer sentence that quotes a table row answers with: (start, end)
    in ``chunk_text`` and its column's header; None when the sentence is no table row or the
    question asks for no column of it. The sentence may carry its citation marks and lead
    with its table's caption (``with_caption``)."""
    row = _LABELS.sub("", sentence).strip().rstrip(".")
    captioned = row.split(" — ", 1)
    if len(captioned) == 2 and is_table_row(captioned[1]):
        row = captioned[1]
    if not is_table_row(row):
        return None
    asked = asked_cell(question, row)
    if asked is None:
        return None
    span = cell_span(chunk_text, row, asked[1])
    return (span[0], span[1], asked[0]) if span else None
