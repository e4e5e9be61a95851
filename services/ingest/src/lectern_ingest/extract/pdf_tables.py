"""Tables on a PDF page: ruled grids found by PyMuPDF, kept when they look like tables,
their cells read from the words inside."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pymupdf as _pymupdf

from lectern_ingest.cleaning import (
    clean_inline,
)

# PyMuPDF is only partly typed; its objects are handled as Any here.
pymupdf: Any = _pymupdf


def has_grid(page: Any) -> bool:
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


def plausible_table(rows: list[list[str | None]]) -> bool:
    """Reject grids found in figures and diagrams: most cells should hold words."""
    cells = [c or "" for row in rows for c in row]
    if len(rows) < 2 or not cells or max(len(r) for r in rows) < 2:
        return False
    filled = [c for c in cells if c.strip()]
    wordy = [c for c in filled if sum(ch.isalnum() for ch in c) >= 2]
    multi = sum(1 for row in rows if sum(1 for c in row if c and c.strip()) >= 2)
    return len(filled) >= 0.5 * len(cells) and len(wordy) >= 0.6 * len(filled) and multi >= 2


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
    rows = []
    for raw in raw_rows:
        cells = [clean_inline(c or "") for c in raw]
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
