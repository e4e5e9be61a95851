"""A document's printed table of contents: told by its title ("Contents", "Inhalt") or by
rows that end in page numbers, so that its rows are typed as contents and never become
headings themselves. The entries it lists then map the heading tree: their titles are looked
for in the text (``entry_map``)."""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from typing import NamedTuple

from lectern_ingest.cleaning import clean_inline
from lectern_ingest.extract.headings import is_contents_title, is_figures_title, numbering_depth
from lectern_ingest.extract.model import OutlineEntry
from lectern_ingest.extract.pdf_layout import PBlock, in_margin_band, letters_key

_LEADERS = re.compile(r"(?:\.\s?){2,}\.?|…+|_{3,}|·{2,}")
#: a row's closing page number: arabic, or lower-case roman for front matter
_PAGE_AT_END = re.compile(r"(?:^|[\s.…])(\d{1,4}|[ivxlcdm]{1,7})$")
_SECTION_AT_START = re.compile(
    r"^(?:(?:chapter|part|section|appendix|kapitel|teil|anhang)\s+)?"
    r"(?:\d{1,3}(?:[.\-]\d{1,3})*|[IVXLC]{1,6}|[A-Z])[.:)]?\s+",
    re.IGNORECASE,
)
#: a figure standing on its own (not a name's digits: "RV32I", "B12")
_DIGIT_GROUP = re.compile(r"(?<![^\W\d_])\d(?:[\d.,/\-]*\d)?(?![^\W\d_])")
_ROMAN = {"i": 1, "v": 5, "x": 10, "l": 50, "c": 100, "d": 500, "m": 1000}

#: a page without a contents title is one when this many rows, and this share of its rows
#: with letters, are entries whose page numbers mostly rise (a contents page of the shared
#: documents has 15-40 entries; a page of body text or a table has almost none)
MIN_ENTRIES = 6
MIN_ENTRY_SHARE = 0.5
MIN_RISING_SHARE = 0.8
#: a page right after a contents page continues it with fewer entries (the tail of a list)
MIN_CONTINUED_ENTRIES = 3
#: a page whose rows name this share of the outline's titles for other pages lists them
MIN_OUTLINE_SHARE = 0.5
#: a contents page where fewer of its rows (before any list of figures) end in a number lists
#: titles without pages (the IRS manual's: 2 rows of about 150 end in a number, the manual's
#: own "2.3.59"; the other shared contents pages 0.75 and more): those numbers are no pages
#: and its rows no entries to place
MIN_PAGED_SHARE = 0.25


@dataclass(slots=True)
class Row:
    """One visual row of a page (lines of any block on the same baseline), left to right."""

    y0: float
    y1: float
    text: str


def page_rows(blocks: list[PBlock]) -> list[Row]:
    """The page's rows: a contents entry's number, title, leader and page are often set as
    separate blocks, so lines are regrouped by baseline across blocks."""
    pieces = sorted(
        ((line.y0, line.y1, line.x0, line.text) for b in blocks if b.table is None
         for line in b.lines),
        key=lambda p: ((p[0] + p[1]) / 2, p[2]),
    )  # fmt: skip
    rows: list[tuple[float, float, list[tuple[float, str]]]] = []
    for y0, y1, x0, text in pieces:
        if rows:
            ry0, ry1, parts = rows[-1]
            overlap = min(y1, ry1) - max(y0, ry0)
            if overlap > 0.5 * max(min(y1 - y0, ry1 - ry0), 0.1):
                rows[-1] = (min(y0, ry0), max(y1, ry1), [*parts, (x0, text)])
                continue
        rows.append((y0, y1, [(x0, text)]))
    out = [
        Row(y0, y1, " ".join(text for _, text in sorted(parts, key=lambda p: p[0])))
        for y0, y1, parts in rows
    ]
    for b in blocks:
        if b.table is not None:
            rows_text = b.table.text.split("\n")
            out.extend(Row(b.bbox[1], b.bbox[3], r.replace(" | ", " ")) for r in rows_text)
    out.sort(key=lambda r: r.y0)
    return out


def _roman(text: str) -> int | None:
    values = [_ROMAN[ch] for ch in text]
    following = [*values[1:], 0]
    total = sum(-v if v < after else v for v, after in zip(values, following, strict=True))
    return total if 0 < total < 100 else None


class Entry(NamedTuple):
    """One entry of a printed contents page."""

    title: str
    page: int
    leader: bool


def entry(text: str) -> Entry | None:
    """The row as a contents entry ("2.1 Roles . . . . 8"), if it is one: a title in words
    closed by a page number; front matter's roman numbers count as pages before 1."""
    text = clean_inline(text)
    match = _PAGE_AT_END.search(text)
    if match is None:
        return None
    number = match.group(1)
    page = int(number) if number.isdigit() else _roman(number)
    if page is None:
        return None
    if not number.isdigit():
        page -= 1000  # front matter comes before page 1
    body = text[: match.start(1)]
    leader = bool(_LEADERS.search(body))
    title = _LEADERS.sub(" ", body).strip(" .")
    words = _SECTION_AT_START.sub("", title, count=1)
    letters = sum(ch.isalpha() for ch in words)
    if letters < 3 or letters < 0.6 * len(words.replace(" ", "")):
        return None
    if len(_DIGIT_GROUP.findall(words)) > (2 if leader else 1):
        return None  # a table's row of figures, or a citation, not an entry
    return Entry(" ".join(title.split()), page, leader)


def is_contents_row(text: str) -> bool:
    """Whether a line is a contents entry set with dot leaders ("2.1 Roles . . . . 8"): never
    a heading of the text, though its title matches one."""
    return bool(_LEADERS.search(text)) and (row := entry(text)) is not None and row.leader


def _lists_pages(entries: list[Entry], *, continued: bool) -> bool:
    """Whether entries point at pages as a contents page does: mostly rising, to several
    different pages; on a page of its own (not continuing one) mostly with dot leaders, so
    that a table's column of small figures is no contents."""
    pages = [e.page for e in entries]
    pairs = list(itertools.pairwise(pages))
    rising = sum(b >= a for a, b in pairs) / len(pairs) if pairs else 1.0
    if continued:
        return rising >= 0.7 and len(set(pages)) >= 2
    leaders = sum(e.leader for e in entries)
    return rising >= MIN_RISING_SHARE and len(set(pages)) >= 4 and leaders >= 0.3 * len(entries)


@dataclass(slots=True)
class ContentsRegion:
    """The part of a page that is a table of contents, and the entries read from it."""

    top: float
    bottom: float
    rows: list[Row]
    entries: list[OutlineEntry]
    #: the region ends in a list of figures (or tables, illustrations), whose entries are
    #: captions, not sections: a page continuing it lists no sections either
    figures: bool = False

    def holds(self, block: PBlock) -> bool:
        middle = (block.bbox[1] + block.bbox[3]) / 2
        return self.top - 1 <= middle <= self.bottom + 1

    @property
    def text(self) -> str:
        """The region's rows, one a line, dot leaders shortened."""
        return "\n".join(
            " ".join(_LEADERS.sub(" … ", r.text).split())
            for r in self.rows
            if self.top - 1 <= (r.y0 + r.y1) / 2 <= self.bottom + 1
        )


def find_contents(
    blocks: list[PBlock],
    *,
    page_height: float,
    continued: bool = False,
    figures: bool = False,
    listed: bool = False,
    outline_titles: frozenset[str] = frozenset(),
) -> ContentsRegion | None:
    """The page's table of contents, if it has one: from a contents title (or the top of the
    page) down to its last entry, or to the end of the page when the entries carry no page
    numbers. ``continued``: the previous page was a contents page (``figures``: ending in a
    list of figures). ``listed``: the outline says the page is one (an entry "Contents"
    spans it). ``outline_titles``: the letters of the outline's titles for other pages (a
    page listing many of them is contents too).
    """
    rows = page_rows(blocks)
    if not rows:
        return None
    titles = [b for b in blocks if b.table is None and is_contents_title(b.text)]
    title = next(
        (r for r in rows if is_contents_title(r.text) and any(_beside(r, b) for b in titles)),
        None,
    )
    start = title.y0 if title is not None else 0.0
    lettered = [
        r for r in rows if r.y0 >= start and r is not title and sum(map(str.isalpha, r.text)) >= 3
    ]
    found = _without_footer(
        [(r, e) for r in lettered if (e := entry(r.text)) is not None], page_height
    )
    entries = [e for _, e in found]
    share = len(found) / max(len(lettered), 1)
    if title is not None or listed:
        pass
    elif continued and len(found) >= MIN_CONTINUED_ENTRIES and _continues(lettered, share):
        if not _lists_pages(entries, continued=True):
            return None
    elif len(found) >= MIN_ENTRIES and share >= MIN_ENTRY_SHARE:
        if not _lists_pages(entries, continued=False):
            return None
    elif not _names_outline(lettered, outline_titles):
        return None
    top = title.y0 if title is not None else min(r.y0 for r in rows)
    bottom = max(r.y1 for r, _ in found) if len(found) >= 2 else page_height
    # a list of figures: from its title on, or the whole page continuing one
    in_figures = is_figures_title(title.text) if title is not None else figures
    figures_at = (
        start if in_figures else next((r.y0 for r in lettered if is_figures_title(r.text)), None)
    )
    listed_rows = [r for r in lettered if figures_at is None or r.y0 < figures_at]
    sections = [e for r, e in found if figures_at is None or r.y0 < figures_at]
    if len(sections) < MIN_PAGED_SHARE * len(listed_rows):
        sections = []
    listed_entries = [
        OutlineEntry(level=numbering_depth(e.title) or 1, title=e.title, page=e.page)
        for e in sections
    ]
    return ContentsRegion(
        top=top, bottom=bottom, rows=rows, entries=listed_entries, figures=figures_at is not None
    )


def _without_footer(found: list[tuple[Row, Entry]], page_height: float) -> list[tuple[Row, Entry]]:
    """The entries but a page's footer or header read as one ("© Copyright IBM Corp. 2014.
    All rights reserved. iii" under the Redbook's contents): in the page's top or bottom
    band, pointing before the entries above it."""
    out: list[tuple[Row, Entry]] = []
    furthest: int | None = None
    for row, item in found:
        behind = furthest is not None and item.page < furthest
        if behind and in_margin_band(row.y0, row.y1, page_height):
            continue
        out.append((row, item))
        furthest = item.page if furthest is None else max(furthest, item.page)
    return out


def _continues(rows: list[Row], share: float) -> bool:
    """Whether a page after a contents page goes on listing: entries, or numbered items
    ("XI. A Winter Harvest") among which entries carry the page numbers."""
    if share >= 0.4:
        return True
    numbered = sum(bool(_SECTION_AT_START.match(clean_inline(r.text))) for r in rows)
    return numbered >= 0.5 * len(rows)


def _names_outline(rows: list[Row], outline_titles: frozenset[str]) -> bool:
    """Whether most rows are titles the outline gives for other pages (a contents page
    without page numbers, a list of exhibits)."""
    if not outline_titles or len(rows) < 5:
        return False
    named = sum(
        len(key := letters_key(_strip_page(r.text))) >= 4 and key in outline_titles for r in rows
    )
    return named >= 5 and named >= MIN_OUTLINE_SHARE * len(rows)


def _beside(row: Row, block: PBlock) -> bool:
    """Whether the row is the block's own line (a title set alone, not a word of a text)."""
    return len(block.lines) <= 2 and block.bbox[1] - 1 <= (row.y0 + row.y1) / 2 <= block.bbox[3] + 1


def _strip_page(text: str) -> str:
    parsed = entry(text)
    return parsed.title if parsed else text
