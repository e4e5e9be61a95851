"""The contents page and the outline as a map of the heading tree.

Each entry's title is looked for as a line of the text (or two or three lines: a chapter label,
a title broken in two) on or near the page the entry gives; printed page numbers may be offset
from the PDF's pages, and the offset may drift (front matter in roman numbers, a sample of a
longer book). The lines found become the tree's headings at the entries' levels; entries no
line matches are reported, never guessed.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from lectern_ingest.cleaning import clean_inline, join_lines
from lectern_ingest.extract.contents import is_contents_row
from lectern_ingest.extract.headings import numbering_depth, section_number
from lectern_ingest.extract.model import OutlineEntry
from lectern_ingest.extract.pdf_layout import (
    MAX_HEADING_CHARS,
    Line,
    PBlock,
    in_margin_band,
    title_key,
)

#: a title's own number, the label before it and a revision date after it ("Chapter 2",
#: "2.3", "IV.", "A.1", the IRS manual's "Exhibit 2.3.59-1 (07-01-2019)"), which a contents
#: page and the text often set differently ("I. The Sun-seeker" and "CHAPTER I THE
#: SUN-SEEKER"); left out of the key on both sides. A letter or roman numeral without a
#: label needs its stop ("A.", "IV."): "N Extension Instructions" and "C Programming" are
#: words
_NUMBERING = re.compile(
    r"^(?:(?i:chapter|part|section|appendix|exhibit|lecture|unit|kapitel|teil|anhang|chapitre)"
    r"\s+(?:\d{1,3}(?:[.\-]\d{1,3})*|[IVXLC]{1,6}|[A-Z](?:\.\d{1,3})*)[.:)]?"
    r"|\d{1,3}(?:[.\-]\d{1,3})*[.:)]?|(?:[IVXLC]{1,6}|[A-Z])[.:)]|[A-Z](?:\.\d{1,3})+[.:)]?)"
    r"(?:\s+\(\d[\d.\-/]*\))?\s+(?=\S)"
)
#: a title set on at most this many lines: the Redbook's "Chapter 1." / "Securing and
#: protecting IBM DB2" / "data" is the longest of the shared documents
MAX_TITLE_LINES = 3
#: shorter keys ("A", "Q&A") match too much of any text to place an entry
MIN_KEY_CHARS = 3
#: a printed page plus the document's offset finds the title this many pages either way (a
#: section opening at the foot of the page before its number's page, a blank page left out
#: of the count): the shared documents' anchors land on it, the Redbook sample's one page off
ANCHOR_PAGES = 1
#: an entry between placed ones may be this many more pages from its placed neighbour than
#: their printed pages are apart (plates or blank pages set between numbered pages); fewer
#: pages are always allowed (the Redbook sample lands 6 fewer, the reflowed EPUB up to 19).
#: No shared document needs more; 3 still refuses the Redbook's "Chapter 3. Row and Column
#: Access Control" on its back cover, 10 pages further
FILL_PAGES = 3
#: the contents page maps the tree when this share of its entries (and at least
#: ``MIN_TRUSTED``) are placed: the Redbook sample, whose contents lists a whole book, places
#: 0.3; the other shared documents 0.9 and more
TRUSTED_SHARE = 0.5
#: two entries placed could be chance (and a two-entry contents page tells little of a tree)
MIN_TRUSTED = 3

Source = Literal["outline", "contents"]
#: an entry as the placing sees it: the key to look for (None: not to place, its page only
#: guiding its neighbours) and the page it gives
Hint = tuple[str | None, int | None]


def entry_key(text: str) -> str:
    """What a title is matched by: its letters and digits, lower-cased, without its own number
    and label ("2.3 Matrix Multiplication" and "MATRIX MULTIPLICATION" share one key)."""
    return title_key(_NUMBERING.sub("", clean_inline(text), count=1))


def number_key(text: str) -> str | None:
    """A title's section number as a key ("2.3 Matrix Products": "§2.3"), if it has one."""
    number = section_number(clean_inline(text))
    return "§" + ".".join(map(str, number)) if number else None


@dataclass(frozen=True, slots=True)
class Window:
    """One to three consecutive lines of a page (``start``..``end`` in the page's line order)
    that may be a title set alone."""

    start: int
    end: int
    key: str
    size: float
    top: float
    bottom: float
    #: set no larger than the text in the page's top or bottom band: a running header or
    #: footer when its title recurs there on other pages (a table's caption at the top of
    #: the page, the education statistics' "Table 14. ...", is not)
    marginal: bool = False
    #: a one-line window set as a heading, numbered: its number's key ("§2.3")
    number: str | None = None


@dataclass(frozen=True, slots=True)
class Occurrence:
    """Where a window of some key is: its page, place on the page and type size."""

    page: int
    top: float
    bottom: float
    size: float
    marginal: bool = False
    #: a title broken by the page break: the key of its part on this page (the EPUB's
    #: "CHAPTER II" closing a page whose next opens with "RINKS AND SKATERS")
    head: str | None = None


def _eligible(block: PBlock, skip: frozenset[int]) -> bool:
    return block.table is None and block.kind != "contents" and id(block) not in skip


def page_lines(blocks: Sequence[PBlock], skip: frozenset[int] = frozenset()) -> list[Line]:
    """The lines of the page's text blocks in reading order (no table, no contents, nor the
    blocks whose ids are in ``skip``)."""
    return [line for b in blocks if _eligible(b, skip) for line in b.lines]


def _opens_title(lines: list[Line], start: int, firsts: set[int]) -> bool:
    """A title opens its block, or is set larger or bolder than the line before it."""
    if start in firsts:
        return True
    line, before = lines[start], lines[start - 1]
    return line.size > before.size + 0.5 or (line.bold and not before.bold)


def _heading_number(text: str, lines: list[Line], heading_floor: float) -> str | None:
    """The number key of a line set as a numbered heading: large, or bold and numbered two
    deep or more ("1.1", not a numbered list's "1.")."""
    number = number_key(text)
    if number is None:
        return None
    large = all(line.size >= heading_floor for line in lines)
    return number if large or ("." in number and all(line.bold for line in lines)) else None


def title_windows(
    blocks: Sequence[PBlock],
    *,
    heading_floor: float,
    page_height: float,
    skip: frozenset[int] = frozenset(),
) -> list[Window]:
    """The page's windows of one to three lines that could be titles: opening a block or set
    apart by their type, and no contents row with dot leaders."""
    lines = page_lines(blocks, skip)
    firsts: set[int] = set()  # lines opening a block
    gaps: set[int] = set()  # lines opening a block after a table, contents or heading made
    at, after_gap = 0, False
    for b in blocks:
        if not _eligible(b, skip):
            after_gap = True
            continue
        firsts.add(at)
        if after_gap:
            gaps.add(at)
        at, after_gap = at + len(b.lines), False
    out: list[Window] = []
    for start in range(len(lines)):
        if not _opens_title(lines, start, firsts):
            continue
        text = ""
        for end in range(start, min(start + MAX_TITLE_LINES, len(lines))):
            if end > start and end in gaps:
                break
            text = f"{text} {lines[end].text}".strip()
            if len(text) > MAX_HEADING_CHARS or is_contents_row(text):
                break
            part = lines[start : end + 1]
            key = entry_key(text)
            number = _heading_number(text, part, heading_floor) if end == start else None
            if len(key) < MIN_KEY_CHARS:
                if number is None:
                    continue
                key = ""  # "2.8 IP": found by its number alone
            size = max(line.size for line in part)
            top, bottom = min(line.y0 for line in part), max(line.y1 for line in part)
            marginal = size < heading_floor and in_margin_band(top, bottom, page_height)
            out.append(Window(start, end + 1, key, size, top, bottom, marginal, number))
    return out


def broken_titles(last: PBlock, first: PBlock) -> list[tuple[str, Occurrence]]:
    """Titles broken by a page break, as (key, occurrence): the last block of a page (a
    chapter label, a title's first line) read on into the first lines of the next page's
    first block. The occurrence is on the first page, whose number the caller sets."""
    if len(last.lines) > MAX_TITLE_LINES - 1:
        return []
    head_text = " ".join(line.text for line in last.lines)
    head = entry_key(head_text)
    out: list[tuple[str, Occurrence]] = []
    for more in range(1, min(len(first.lines), MAX_TITLE_LINES - len(last.lines)) + 1):
        text = " ".join([head_text, *(line.text for line in first.lines[:more])])
        key = entry_key(text)
        if len(key) >= MIN_KEY_CHARS and not is_contents_row(text):
            size = max(line.size for line in last.lines)
            top, bottom = last.lines[0].y0, last.lines[-1].y1
            out.append((key, Occurrence(0, top, bottom, size, head=head)))
    return out


@dataclass(frozen=True, slots=True)
class MapEntry:
    """An entry of the outline or of the printed contents, with the key its title matches."""

    source: Source
    entry: OutlineEntry
    key: str
    #: its section number ("§2.3"), matching a heading with that number and another title
    #: (the network handouts' outline says "1.1 Definition" for "1.1 What's A Computer
    #: Network?")
    number: str | None

    @classmethod
    def of(cls, source: Source, entry: OutlineEntry) -> MapEntry:
        """The entry with its keys ("" for a title too short to look for by its words)."""
        key = entry_key(entry.title)
        key = key if len(key) >= MIN_KEY_CHARS else ""
        return cls(source, entry, key, number_key(entry.title))


@dataclass(frozen=True, slots=True)
class Placement:
    """An entry placed on a page: the heading to make there."""

    index: int
    key: str
    level: int
    #: the heading's text: the outline's title, or None for the line's own text
    title: str | None
    #: an outline entry whose title no line matches: its heading opens the page's text (after
    #: the headings before it) all the same, the outline saying where its section starts
    insert_unfound: bool = False


def _nearest(pages: Sequence[int], target: int, lo: int, hi: int) -> int | None:
    """The page of ``pages`` (sorted) within ``lo``..``hi`` nearest ``target``, earlier first."""
    start, stop = bisect.bisect_left(pages, lo), bisect.bisect_right(pages, hi)
    inside = pages[start:stop]
    return min(inside, key=lambda p: (abs(p - target), p)) if inside else None


def _take(pool: dict[str, list[int]], key: str, page: int) -> None:
    pool[key].remove(page)


def place_outline(hints: Sequence[Hint], pool: dict[str, list[int]]) -> dict[int, int]:
    """Outline entries on their own page, else the page after (an anchor set at the foot of
    the page before its section) or before; ``pool`` (key: the sorted pages of its windows)
    loses the windows taken."""
    placed: dict[int, int] = {}
    for i, (key, hint) in enumerate(hints):
        if key is None or hint is None:
            continue
        pages = pool.get(key, [])
        page = next((p for p in (hint, hint + 1, hint - 1) if p in pages), None)
        if page is not None:
            placed[i] = page
            _take(pool, key, page)
    return placed


def _offsets(hints: Sequence[Hint], pool: Mapping[str, list[int]]) -> dict[bool, int]:
    """The offset from printed to physical pages most entries agree on (each entry's vote
    shared among the pages its title is on), for the front matter's roman numbers (True)
    and the arabic ones (False) apart; the smaller offset wins a tie."""
    votes: dict[tuple[bool, int], float] = {}
    for key, hint in hints:
        if key is None or hint is None:
            continue
        pages = set(pool.get(key, ()))
        for page in pages:
            vote = (hint < 0, page - hint)
            votes[vote] = votes.get(vote, 0.0) + 1 / len(pages)
    best: dict[bool, tuple[float, int]] = {}
    for (roman, offset), weight in votes.items():
        current = best.get(roman)
        if current is None or (weight, -abs(offset)) > (current[0], -abs(current[1])):
            best[roman] = (weight, offset)
    return {roman: offset for roman, (_, offset) in best.items()}


def _rising(items: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The longest run of (entry, page) items, in entry order, whose pages never fall."""
    tails: list[int] = []  # the smallest last page of a run of each length
    ends: list[int] = []  # the item closing that run
    back: list[int] = []  # each item's predecessor in its run
    for n, (_, page) in enumerate(items):
        k = bisect.bisect_right(tails, page)
        back.append(ends[k - 1] if k else -1)
        if k == len(tails):
            tails.append(page)
            ends.append(n)
        else:
            tails[k], ends[k] = page, n
    run: list[tuple[int, int]] = []
    n = ends[-1] if ends else -1
    while n >= 0:
        run.append(items[n])
        n = back[n]
    return run[::-1]


def _fits(i: int, page: int, placed: Mapping[int, int]) -> bool:
    """Whether entry ``i`` on ``page`` keeps the placed entries in page order."""
    return all(p <= page if j < i else p >= page for j, p in placed.items())


def _target(
    i: int, hints: Sequence[Hint], placed: Mapping[int, int], base: Mapping[bool, int]
) -> tuple[int, int, int] | None:
    """Where entry ``i`` is expected, and the pages it may be on: between the placed entries
    around it, and no further from its nearest placed neighbours of the same numbering
    (roman or arabic) than their printed pages are, give or take ``FILL_PAGES`` (a sample
    of a longer book has fewer pages between two sections, never many more); None when
    nothing places it."""
    hint = hints[i][1] or 0
    roman = hint < 0
    before = [j for j in placed if j < i]
    after = [j for j in placed if j > i]
    lo = max((placed[j] for j in before), default=0)
    hi = min((placed[j] for j in after), default=1 << 30)
    kin_before = [j for j in sorted(before, reverse=True) if ((hints[j][1] or 0) < 0) == roman]
    kin_after = [j for j in sorted(after) if ((hints[j][1] or 0) < 0) == roman]
    aim: int | None = None
    if kin_after:
        j = kin_after[0]
        aim = placed[j] - ((hints[j][1] or 0) - hint)
        lo = max(lo, aim - FILL_PAGES)
    if kin_before:
        j = kin_before[0]
        aim = placed[j] + hint - (hints[j][1] or 0)
        hi = min(hi, aim + FILL_PAGES)
    if aim is None:
        if roman not in base:
            return None
        aim = hint + base[roman]
        lo, hi = max(lo, aim - FILL_PAGES), min(hi, aim + FILL_PAGES)
    return aim, lo, hi


def place_contents(
    hints: Sequence[Hint],
    pool: dict[str, list[int]],
    *,
    fixed: Mapping[int, int],
    first: int,
    last: int,
) -> dict[int, int]:
    """Printed contents entries (key, printed page) on physical pages.

    Anchors first: entries whose title is on their printed page plus the offset most entries
    agree on, kept where they rise with the entries' order. Then each other entry between
    the anchors around it, nearest the page its neighbour's offset gives. ``fixed``: entries
    placed before (on pages already read); ``pool`` loses the windows taken."""
    base = _offsets(hints, pool)
    trial = {key: list(pages) for key, pages in pool.items()}
    anchors: list[tuple[int, int]] = []
    for i, (key, hint) in enumerate(hints):
        if key is None or hint is None or i in fixed or (roman := hint < 0) not in base:
            continue
        aim = hint + base[roman]
        page = _nearest(trial.get(key, []), aim, aim - ANCHOR_PAGES, aim + ANCHOR_PAGES)
        if page is not None and _fits(i, page, fixed):
            anchors.append((i, page))
            _take(trial, key, page)
    placed = dict(fixed)
    for i, page in _rising(anchors):
        placed[i] = page
        _take(pool, hints[i][0] or "", page)
    for i, (key, hint) in enumerate(hints):
        if key is None or hint is None or i in placed or not pool.get(key):
            continue
        target = _target(i, hints, placed, base)
        if target is None:
            continue
        aim, lo, hi = target
        page = _nearest(pool[key], aim, max(lo, first), min(hi, last))
        if page is not None:
            placed[i] = page
            _take(pool, key, page)
    return {i: p for i, p in placed.items() if i not in fixed}


class EntryMap:
    """The outline's entries and the printed contents' entries, placed on the pages where
    their titles are lines, as the pages are read in order.

    ``index()`` reads every page once for its title windows (key: occurrences), when the map
    is first asked; the entries are placed again whenever a contents page adds to them, the
    entries of pages already read staying where they were.
    """

    def __init__(
        self,
        outline: Sequence[OutlineEntry],
        *,
        page_count: int,
        index: Callable[[], dict[str, list[Occurrence]]],
    ) -> None:
        self.entries = [MapEntry.of("outline", e) for e in outline]
        self._page_count = page_count
        self._read_index = index
        self._index: dict[str, list[Occurrence]] | None = None
        #: contents pages: the part of the page the contents take (top, bottom)
        self._regions: dict[int, tuple[float, float]] = {}
        self._placed: dict[int, int] = {}
        #: the key each placed entry was found by: its title's, or its section number; and
        #: for a title broken by a page break, the key of its part on the page
        self._via: dict[int, str] = {}
        self._heads: dict[int, str] = {}
        self._found: dict[int, bool] = {}
        self._dirty = bool(self.entries)
        self.stats = MapStats()

    def add_contents(
        self, entries: Sequence[OutlineEntry], *, page: int, top: float, bottom: float
    ) -> None:
        """A contents page's entries, and the part of its page they take."""
        self.entries += [MapEntry.of("contents", e) for e in entries]
        self._regions[page] = (top, bottom)
        self._dirty = True

    def keys_on(self, page: int) -> set[str]:
        """The keys of the entries placed on ``page`` so far (a contents page read there may
        still move them)."""
        if self._dirty:
            self._place(page)
            self._dirty = False
        return {self._heads.get(i, self._via[i]) for i, on in self._placed.items() if on == page}

    def placements(self, page: int) -> list[Placement]:
        """The headings to make on ``page`` (read after every page before it)."""
        if self._dirty:
            self._place(page)
            self._dirty = False
        out: list[Placement] = []
        for i, item in enumerate(self.entries):
            on = self._placed.get(i)
            outline = item.source == "outline"
            if on == page or (on is None and outline and item.entry.page == page):
                level = item.entry.level + (0 if outline else self.stats.offset)
                # a title broken by the page break: only its first part is here to name it
                title = item.entry.title if outline or i in self._heads else None
                key = self._heads.get(i, self._via.get(i, item.key))
                out.append(Placement(i, key, level, title, insert_unfound=outline))
        return out

    def settle(self, index: int, *, found: bool) -> None:
        """Whether the placed entry's title was found as a line where it was placed."""
        self._found[index] = found

    def unmatched(self, source: Source) -> list[OutlineEntry]:
        """The entries no line of the text matched (a contents entry whose title an outline
        entry shares is matched as that entry is)."""
        outline_found = {
            m.key
            for i, m in enumerate(self.entries)
            if m.source == "outline" and self._found.get(i)
        }
        return [
            m.entry
            for i, m in enumerate(self.entries)
            if m.source == source and not (self._found.get(i) or (m.key and m.key in outline_found))
        ]

    def _place(self, page: int) -> None:
        """Place the entries not yet settled on the pages from ``page`` on: the outline's by
        their titles, then by their numbers; then the contents' (those no outline entry
        shares a title with) likewise."""
        if self._index is None:
            self._index = self._read_index()
        done = {i for i in range(len(self.entries)) if i in self._found
                or self._placed.get(i, page) < page}  # fmt: skip
        pool = self._pool(page)
        placed = {i: p for i, p in self._placed.items() if i in done}
        via = {i: k for i, k in self._via.items() if i in placed}
        outline_keys = {m.key for m in self.entries if m.source == "outline" and m.key}
        for by_number in (False, True):
            hints = [self._hint(i, "outline", by_number, placed) for i in range(len(self.entries))]
            found = place_outline(hints, pool)
            placed.update(found)
            via.update({i: hints[i][0] or "" for i in found})
        for by_number in (False, True):
            hints = [
                self._hint(i, "contents", by_number, placed)
                if self.entries[i].key not in outline_keys
                else (None, self.entries[i].entry.page)
                for i in range(len(self.entries))
            ]
            fixed = {i: p for i, p in placed.items() if self.entries[i].source == "contents"}
            found = place_contents(hints, pool, fixed=fixed, first=page, last=self._page_count)
            placed.update(found)
            via.update({i: hints[i][0] or "" for i in found})
        self._placed, self._via = placed, via
        self._heads = {}
        for i, on in placed.items():
            here = [o for o in self._index.get(via[i], ()) if o.page == on]
            if here and all(o.head for o in here):
                self._heads[i] = here[0].head or ""
        self.stats = self._stats()

    def _hint(self, i: int, source: Source, by_number: bool, placed: Mapping[int, int]) -> Hint:
        """Entry ``i`` as ``place_*`` sees it: its title's key (or its number), or None when
        it is of the other source or placed already."""
        item = self.entries[i]
        if item.source != source:
            return None, None
        key = item.number if by_number else item.key
        return (None if i in placed or not key else key), item.entry.page

    def _pool(self, page: int) -> dict[str, list[int]]:
        """Key: the sorted pages from ``page`` on where a window of that key is, outside the
        contents pages' own lists."""
        assert self._index is not None
        pool: dict[str, list[int]] = {}
        keys = {m.key for m in self.entries if m.key} | {m.number for m in self.entries if m.number}
        for key in keys:
            found = self._index.get(key, [])
            running = len({o.page for o in found if o.marginal}) >= 2
            pages = [
                o.page
                for o in found
                if o.page >= page and not self._listed(o) and not (running and o.marginal)
            ]
            if pages:
                pool[key] = sorted(pages)
        return pool

    def _listed(self, occurrence: Occurrence) -> bool:
        region = self._regions.get(occurrence.page)
        return region is not None and (
            region[0] - 1 <= (occurrence.top + occurrence.bottom) / 2 <= region[1] + 1
        )

    def _size(self, i: int) -> float:
        assert self._index is not None
        page = self._placed[i]
        return next(o.size for o in self._index[self._via[i]] if o.page == page)

    def _stats(self) -> MapStats:
        """How far the contents entries map the tree (see ``MapStats``)."""
        assert self._index is not None
        contents = [i for i, m in enumerate(self.entries) if m.source == "contents"]
        placed = [i for i in contents if i in self._placed]
        if not placed:
            return MapStats()
        sizes = [self._size(i) for i in placed]
        front = min(self._regions)
        front_size = max(
            (o.size for found in self._index.values() for o in found
             if o.page <= front and not self._listed(o)),
            default=0.0,
        )  # fmt: skip
        offset = 1 if front_size > max(sizes) + 0.5 else 0
        return MapStats(
            trusted=len(placed) >= max(MIN_TRUSTED, TRUSTED_SHARE * len(contents)),
            offset=offset,
            front_page=front,
            smallest=min(sizes),
            largest=max(sizes),
            deepest=max(self.entries[i].entry.level for i in placed) + offset,
            numbered_depth=max((numbering_depth(self.entries[i].entry.title) or 0
                                for i in contents), default=0),
        )  # fmt: skip


@dataclass(frozen=True, slots=True)
class MapStats:
    """What the placed contents entries say about the rest of the tree."""

    #: enough entries are placed for the map to make the tree (the fonts only complement it)
    trusted: bool = False
    #: the document's title heads the tree above the contents' first level: 1, else 0
    offset: int = 0
    #: the first contents page: the title and front matter come before it or on it
    front_page: int = 0
    #: the smallest and largest type sizes the entries' titles are set in (a heading set
    #: smaller is a level the contents does not list; the title is set larger)
    smallest: float = 0.0
    largest: float = 0.0
    #: the deepest level of a placed entry, the title's level above them included
    deepest: int = 0
    #: the deepest section number of an entry ("3.2.1": 3; 0 when none are numbered)
    numbered_depth: int = 0

    def font_level(self, block: PBlock, level: int, *, page: int) -> int | None:
        """The level of a heading told by its type (``level`` from the fonts) beside the
        map's, or None when it is none: the title and front matter's headings set larger
        than every entry keep their level; headings set smaller or numbered deeper than
        every entry go below the entries; a pull quote, or a title the contents does not
        list, is no heading."""
        if not self.trusted:
            return level
        if page <= self.front_page and block.size > self.largest + 0.5:
            return level
        depth = numbering_depth(block.text) or 0
        if block.size < self.smallest - 0.25 or depth > self.numbered_depth > 0:
            return max(level, self.deepest + 1)
        return None


def mark_titles(
    blocks: list[PBlock],
    placements: Sequence[Placement],
    *,
    heading_floor: float,
    page_height: float,
) -> tuple[list[PBlock], list[bool]]:
    """The page's blocks with each placed entry's title lines made a heading of its level
    (an outline entry not found opens the page's text after the headings before it all the
    same), and whether each entry's title was found."""
    blocks = list(blocks)
    made: set[int] = set()
    cursor = 0
    found: list[bool] = []
    for placement in placements:
        skip = frozenset(made)
        windows = [
            w
            for w in title_windows(
                blocks, heading_floor=heading_floor, page_height=page_height, skip=skip
            )
            if placement.key in (w.key, w.number)
        ]
        where = [(bi, li) for bi, b in enumerate(blocks) if _eligible(b, skip)
                 for li in range(len(b.lines))]  # fmt: skip
        # in reading order from the last heading made; a running header's copy of the title
        # only where the title is nowhere else on the page
        windows.sort(key=lambda w: (w.marginal, where[w.start][0] < cursor))
        window = windows[0] if windows else None
        found.append(window is not None)
        if window is not None:
            blocks, cursor = _split(blocks, where, window, placement)
        elif placement.insert_unfound:
            blocks.insert(cursor, _heading(placement.title or "", placement.level, None))
        else:
            continue
        made.add(id(blocks[cursor]))
        cursor += 1
    return blocks, found


def _heading(text: str, level: int, window: Window | None, x0: float = 0.0) -> PBlock:
    if window is None:
        return PBlock(bbox=(0, 0, 0, 0), lines=[Line(text, 0.0, True)], kind="heading",
                      level=level)  # fmt: skip
    line = Line(text, window.size, True, x0=x0, y0=window.top, y1=window.bottom)
    return PBlock(
        bbox=(x0, window.top, x0, window.bottom), lines=[line], kind="heading", level=level
    )


def _split(
    blocks: list[PBlock], where: list[tuple[int, int]], window: Window, placement: Placement
) -> tuple[list[PBlock], int]:
    """``blocks`` with the window's lines made one heading block (the lines before and after
    it in their blocks kept as they were); the heading's index."""
    (b0, l0), (b1, l1) = where[window.start], where[window.end - 1]
    lines = [blocks[bi].lines[li] for bi, li in where[window.start : window.end]]
    text = placement.title or join_lines([line.text for line in lines])
    heading = _heading(text, placement.level, window, lines[0].x0)
    # the blocks between the first and the last are the window's own (windows stop at
    # tables, contents and headings made)
    first, last = blocks[b0], blocks[b1]
    before = _part(first, first.lines[:l0])
    after = _part(last, last.lines[l1 + 1 :])
    parts = [*([before] if before else []), heading, *([after] if after else [])]
    return [*blocks[:b0], *parts, *blocks[b1 + 1 :]], b0 + (1 if before else 0)


def _part(block: PBlock, lines: list[Line]) -> PBlock | None:
    """The block cut down to ``lines`` (None when none are left)."""
    if not lines:
        return None
    x0, _, x1, _ = block.bbox
    top, bottom = min(line.y0 for line in lines), max(line.y1 for line in lines)
    return PBlock(bbox=(x0, top, x1, bottom), lines=lines, kind=block.kind, level=block.level)
