"""Structure-aware chunking: sections, then paragraphs, then sentences, under a token cap."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Literal

from lectern_common.text import SentenceRules, sentences
from lectern_ingest.extract.headings import (
    CONTENTS_TITLES,
    is_chapter_label,
    is_contents_title,
    section_number,
)
from lectern_ingest.extract.model import Block, Unit

ChunkKind = Literal["text", "table", "references", "contents", "index"]
TokenCounter = Callable[[str], int]

#: section titles whose text is apparatus, not content (compared case-folded, numbering off)
_SECTION_TITLES: tuple[tuple[ChunkKind, str], ...] = (
        ("references", "references|reference list|bibliography|works cited|literature cited|"
         "citations|cited literature|literature|literatur|literaturverzeichnis|quellen|"
         "quellenverzeichnis|bibliographie|références|referencias|bibliografía"),
        ("contents", "|".join(sorted(CONTENTS_TITLES))),
        ("index", "index|subject index|author index|general index|register|"
         "stichwortverzeichnis|sachverzeichnis|sachregister|namensregister"),
)  # fmt: skip
_SECTION_KINDS: dict[str, ChunkKind] = {
    name: kind for kind, names in _SECTION_TITLES for name in names.split("|")
}
_SECTION_NUMBERING = re.compile(r"^(?:(?:\d+|[ivxlc]+|[a-z])[.)]?\s+)+", re.IGNORECASE)
#: a citation's marks: "2006;91:3897", "1998;83", "(2004)", "et al", "doi"
_YEAR_MARK = re.compile(r"\b(?:19|20)\d{2}[a-z]?\s*[;:.,)]")
_VOLUME_MARK = re.compile(r"\b\d+\s*(?:\(\d+\))?\s*:\s*\d+(?:\s*[–-]\s*\d+)?")
_ET_AL = re.compile(r"\bet al\b|\bdoi\b|\bpp\.\s*\d|\bvol\.\s*\d", re.IGNORECASE)
_LEADER_PAGE = re.compile(r"(?:\.\s?){3,}\s*\d{1,4}\b|…\s*\d{1,4}\b|(?:\.\s){6,}|\.{6,}")
#: an index entry: a word, a comma, page numbers ("Torus, iii, 5, 38", "affine, 107")
_INDEX_ENTRY = re.compile(
    r"[^\W\d_]{2,}[)\]]?,\s*(?:\d{1,4}|[ivxl]{1,5})(?:\s*[–-]\s*\d{1,4})?(?=[\s,;]|$)"
)


_LEAF_SECTIONS = frozenset(
    "abstract|summary|zusammenfassung|résumé|keywords|key words|schlüsselwörter|"
    "acknowledgements|acknowledgments|acknowledgement|acknowledgment|danksagung|"
    "conflict of interest|conflicts of interest|conflict of interest statement|funding|"
    "author contributions".split("|")
)


def _is_leaf_section(title: str) -> bool:
    return _SECTION_NUMBERING.sub("", title.strip()).strip(" .:").casefold() in _LEAF_SECTIONS


def section_kind(section_path: list[str]) -> ChunkKind | None:
    """The kind of apparatus a section holds (its own or an enclosing title says), or None."""
    for title in reversed(section_path):
        key = _SECTION_NUMBERING.sub("", title.strip()).strip(" .:").casefold()
        if key in _SECTION_KINDS:
            return _SECTION_KINDS[key]
    return None


def text_kind(text: str) -> ChunkKind:
    """``text``, or the apparatus it plainly is by its own marks: a reference list (citation
    marks at least every ~90 characters), a table of contents (dot leaders to page numbers)
    or an index (entries ending in page numbers)."""
    length = max(len(text), 1)
    citations = len(_YEAR_MARK.findall(text)) + len(_VOLUME_MARK.findall(text))
    citations += len(_ET_AL.findall(text))
    if citations >= 5 and citations * 90 >= length:
        return "references"
    leaders = len(_LEADER_PAGE.findall(text))
    if leaders >= 3 and leaders * 120 >= length:
        return "contents"
    entries = len(_INDEX_ENTRY.findall(text))
    if entries >= 8 and entries * 30 >= length:
        return "index"
    return "text"


def chunk_kind(text: str, section_path: list[str]) -> ChunkKind:
    """What a text chunk is: content (``text``), or a reference list, contents or index."""
    return section_kind(section_path) or text_kind(text)


#: a chunk's sentences (``lectern_common.text``'s splitter): besides a stop, "…" and the stops
#: of Chinese and Japanese (whatever follows them) end one, with the closing quotes after
#: them; a capital of any script (Greek, Cyrillic, Arabic, Hebrew ...) may open the next;
#: "e.g.", "Dr." and initials end none, since a cut there would part a chunk mid-sentence
SENTENCES = SentenceRules(
    stop=r"[.!?…]+",
    closers=r"[\"'”’)\]]",
    start=r"[\"'“‘(\[]?[A-Z0-9À-ÖØ-ÞΑ-ΩА-Я\u0600-\u06ff\u0590-\u05ff]",
    hard=r"[。！？]+[」』”’)]*\s*",
    abbreviations=frozenset(
        "e.g i.e etc vs cf al fig figs eq eqs no nos dr mr mrs ms prof st jr sr inc ltd co "
        "corp approx ca resp vol pp p ch sec art z.b bzw ggf usw vgl d.h u.a s".split()
    ),
    initials=True,
)


#: a sentence ended by a stop of Chinese or Japanese: the next one follows it with no space
_HARD_END = re.compile(r"[。！？]+[」』”’)]*$")


@dataclass(frozen=True, slots=True)
class ChunkingConfig:
    """Token sizes of chunks (counted with the embedder's tokenizer, special tokens included)."""

    target_tokens: int = 200
    overlap_tokens: int = 30
    min_tokens: int = 40
    max_tokens: int = 256

    def __post_init__(self) -> None:
        if not 0 < self.min_tokens <= self.target_tokens <= self.max_tokens:
            raise ValueError("need 0 < min_tokens <= target_tokens <= max_tokens")
        if not 0 <= self.overlap_tokens < self.target_tokens:
            raise ValueError("need 0 <= overlap_tokens < target_tokens")


@dataclass(slots=True)
class ChunkDraft:
    """A chunk ready to embed and store (everything but the embedding and ids)."""

    index: int
    kind: ChunkKind
    text: str
    section_path: list[str]
    chapter: str | None
    page_start: int | None
    page_end: int | None
    slide: int | None
    time_start: float | None
    time_end: float | None
    token_count: int
    #: where the chunk sits ("Title > Chapter > Section"): embedded and indexed with its text
    context_prefix: str | None = None


MAX_PREFIX_CHARS = 300


def structural_prefix(title: str | None, section_path: list[str]) -> str | None:
    """ "Title > Chapter > Section" of a chunk, so that a question naming its document or
    section finds it (headings are not in the chunk's own text); the innermost titles are
    kept when it is long."""
    parts: list[str] = []
    for part in ([title] if title else []) + section_path:
        part = " ".join(part.split())[:120]
        if part and not any(part.casefold() == p.casefold() for p in parts):
            parts.append(part)
    while len(parts) > 1 and len(" > ".join(parts)) > MAX_PREFIX_CHARS:
        parts.pop(1 if len(parts) > 2 else 0)
    return " > ".join(parts)[:MAX_PREFIX_CHARS] or None


@dataclass(slots=True)
class _Piece:
    """A sentence (or a word-boundary slice of an over-long one) with where it came from."""

    text: str
    tokens: int
    paragraph: int
    page: int | None
    slide: int | None
    time_start: float | None
    time_end: float | None


@dataclass(slots=True)
class _Parts:
    kind: ChunkKind
    pieces: list[_Piece]
    section_path: list[str]
    text: str | None = None


#: WordPiece reads a longer "word" as one [UNK] token, so counts of such text are meaningless
MAX_WORD_CHARS = 100
_LONG_WORD = re.compile(rf"\S{{{MAX_WORD_CHARS + 1},}}")
MAX_HEADING_CHARS = 300
_SOME_WORD = re.compile(r"[^\W_]")


def break_long_words(text: str) -> str:
    """``text`` with every run of more than ``MAX_WORD_CHARS`` non-space characters cut into
    pieces of that size, so that token counts are exact and no chunk can hold an unbounded
    token (a 5-million-character "word" would otherwise count as one token)."""
    if len(text) <= MAX_WORD_CHARS:
        return text
    return _LONG_WORD.sub(
        lambda m: " ".join(
            m.group(0)[i : i + MAX_WORD_CHARS] for i in range(0, len(m.group(0)), MAX_WORD_CHARS)
        ),
        text,
    )


class Chunker:
    """Turns a stream of extracted units into chunk drafts, lazily (bounded memory)."""

    def __init__(self, *, config: ChunkingConfig, count_tokens: TokenCounter) -> None:
        self.config = config
        self._count = count_tokens
        self._overhead = count_tokens("")
        if config.max_tokens - self._overhead < 8:
            raise ValueError("max_tokens leaves no room for text after the special tokens")
        self._limit = config.max_tokens - self._overhead  # content tokens a chunk may hold
        self._budget = max(1, config.target_tokens - self._overhead)
        self._index = 0
        self._path: list[tuple[int, str]] = []
        self._buf: list[_Piece] = []
        self._overlap = 0
        self._pending: _Parts | None = None
        self._paragraph = 0
        #: what the text being read is: content, or a table of contents (its blocks, or the
        #: paragraphs under a "Contents" heading up to the next heading), outside any section
        self._kind: ChunkKind = "text"
        self._contents_to_heading = False

    # ---- public -------------------------------------------------------------------------

    def chunks(self, units: Iterable[Unit]) -> Iterator[ChunkDraft]:
        """Yield chunk drafts in document order."""
        slide: int | None = None
        for unit in units:
            if unit.slide is not None and unit.slide != slide:
                yield from self._end_section()
                slide = unit.slide
            for block in unit.blocks:
                yield from self._block(block, unit)
        yield from self._end_section()

    # ---- structure ----------------------------------------------------------------------

    @property
    def _section_path(self) -> list[str]:
        if self._kind == "contents":
            return []
        return [title for _, title in self._path]

    def _switch_kind(self, block: Block) -> Iterator[ChunkDraft]:
        """Enter or leave a table of contents; its title and entries never join the path."""
        contents_title = block.kind == "heading" and is_contents_title(block.text)
        if block.kind == "contents" or contents_title:
            if self._kind != "contents" or contents_title:
                yield from self._end_section()
                self._kind = "contents"
                self._contents_to_heading = contents_title
        elif self._kind == "contents" and (
            block.kind == "heading" or not self._contents_to_heading
        ):
            yield from self._end_section()
            self._kind = "text"

    def _pop_by_number(self, title: str, level: int) -> int:
        """Numbering outranks type sizes: "2.1.6" closes "1.2" and "Chapter 1" whatever
        their levels, and sits under "2.1" even when set in the same size. Returns the
        heading's level, deeper than a numbered parent it has."""
        number = section_number(title)
        if number is None:
            return level
        while self._path:
            other = section_number(self._path[-1][1])
            if other is None:
                return level
            if len(other) < len(number) and number[: len(other)] == other:
                return max(level, self._path[-1][0] + 1)
            if len(number) == 1 and is_chapter_label(self._path[-1][1]):
                return level  # a chapter's sections numbered from 1: levels decide
            self._path.pop()
        return level

    def _block(self, block: Block, unit: Unit) -> Iterator[ChunkDraft]:
        text = break_long_words(block.text)
        if block.kind == "heading":
            text = text[:MAX_HEADING_CHARS]
        caption = break_long_words(block.caption) if block.caption else block.caption
        if text is not block.text or caption is not block.caption:
            block = Block(block.kind, text, level=block.level, caption=caption)
        yield from self._switch_kind(block)
        if block.kind == "heading" and self._kind != "contents":
            yield from self._end_section()
            level = block.level or 1
            if self._path and _is_leaf_section(self._path[-1][1]):
                # "Abstract" or "Keywords" set larger than the sections that follow them
                # holds none of them: "Background" is not a part of the abstract
                self._path.pop()
            level = self._pop_by_number(block.text, level)
            while self._path and self._path[-1][0] >= level:
                self._path.pop()
            self._path.append((level, block.text))
            return
        if block.kind == "table":
            new = self._buf[self._overlap :]
            if (
                block.caption is None
                and new
                and len({p.paragraph for p in new}) == 1
                and sum(p.tokens for p in new) + self._overhead < self.config.min_tokens
            ):
                # A short line right before a table ("A uniform table") is its caption.
                block = Block("table", block.text, caption=" ".join(p.text for p in new))
                self._buf = self._buf[: self._overlap]
            yield from self._flush_text()
            for parts in self._table_parts(block, unit):
                yield from self._push(parts)
            return
        self._paragraph += 1
        for sentence in sentences(block.text, rules=SENTENCES):
            tokens = self._count(sentence) - self._overhead
            slices = [(sentence, tokens)] if tokens <= self._limit else self._split_words(sentence)
            for text, n in slices:
                self._buf.append(
                    _Piece(
                        text,
                        n,
                        self._paragraph,
                        unit.page,
                        unit.slide,
                        unit.time_start,
                        unit.time_end,
                    )
                )
        while self._buf_tokens() > self._budget and len(self._buf) > self._overlap + 1:
            yield from self._emit_one()

    def _end_section(self) -> Iterator[ChunkDraft]:
        yield from self._flush_text()
        if self._pending is not None:
            yield from self._finalize(self._pending)
            self._pending = None

    # ---- text chunks --------------------------------------------------------------------

    def _buf_tokens(self) -> int:
        return sum(p.tokens for p in self._buf)

    def _take(self) -> int:
        """How many pieces of the buffer make the next chunk (at least one new piece)."""
        total, k, para_cut = 0, 0, 0
        for i, piece in enumerate(self._buf):
            if i > self._overlap and total + piece.tokens > self._budget:
                break
            total += piece.tokens
            k = i + 1
            nxt = self._buf[i + 1] if i + 1 < len(self._buf) else None
            if nxt is not None and nxt.paragraph != piece.paragraph and total >= 0.6 * self._budget:
                para_cut = k
        if k < len(self._buf) and self._buf[k].paragraph == self._buf[k - 1].paragraph:
            k = max(k if para_cut <= self._overlap else para_cut, self._overlap + 1)
        return k

    def _emit_one(self) -> Iterator[ChunkDraft]:
        k = self._take()
        if sum(p.tokens for p in self._buf[:k]) > self._limit:
            # The overlap and the next sentence do not fit together: drop the overlap.
            self._buf = self._buf[self._overlap :]
            self._overlap = 0
            k = self._take()
        parts = _Parts(self._kind, self._buf[:k], self._section_path)
        rest = self._buf[k:]
        overlap: list[_Piece] = []
        total = 0
        for piece in reversed(parts.pieces[self._overlap :]):
            if total + piece.tokens > self.config.overlap_tokens:
                break
            overlap.insert(0, piece)
            total += piece.tokens
        if len(overlap) == len(parts.pieces):
            overlap = overlap[1:]
        self._buf = overlap + rest
        self._overlap = len(overlap)
        yield from self._push(parts)

    def _flush_text(self) -> Iterator[ChunkDraft]:
        while len(self._buf) > self._overlap and self._buf_tokens() > self._budget:
            yield from self._emit_one()
        if len(self._buf) > self._overlap:
            tail = _Parts(self._kind, self._buf, self._section_path)
            new_tokens = sum(p.tokens for p in self._buf[self._overlap :])
            pending = self._pending
            if (
                new_tokens + self._overhead < self.config.min_tokens
                and pending is not None
                and pending.kind == tail.kind != "table"
                and pending.section_path == tail.section_path
                and sum(p.tokens for p in pending.pieces) + new_tokens <= self._limit
            ):
                pending.pieces = pending.pieces + self._buf[self._overlap :]
            else:
                yield from self._push(tail)
        self._buf = []
        self._overlap = 0

    def _push(self, parts: _Parts) -> Iterator[ChunkDraft]:
        if self._pending is not None:
            yield from self._finalize(self._pending)
        self._pending = parts

    def _split_words(self, sentence: str) -> list[tuple[str, int]]:
        """Slices of an over-long sentence at word boundaries, each within the limit."""
        out: list[tuple[str, int]] = []
        current: list[str] = []
        current_tokens = 0
        for word in sentence.split():
            n = self._count(word) - self._overhead
            if n > self._limit:
                if current:
                    out.append((" ".join(current), current_tokens))
                    current, current_tokens = [], 0
                out.extend(self._split_chars(word))
                continue
            if current and current_tokens + n > self._limit:
                out.append((" ".join(current), current_tokens))
                current, current_tokens = [], 0
            current.append(word)
            current_tokens += n
        if current:
            out.append((" ".join(current), current_tokens))
        # Summed word counts can differ from the joined count: verify and halve if needed.
        verified: list[tuple[str, int]] = []
        for text, _ in out:
            verified.extend(self._verified(text))
        return verified

    def _verified(self, text: str) -> list[tuple[str, int]]:
        n = self._count(text) - self._overhead
        if n <= self._limit:
            return [(text, n)]
        words = text.split()
        if len(words) == 1:
            return self._split_chars(text)
        half = len(words) // 2
        return self._verified(" ".join(words[:half])) + self._verified(" ".join(words[half:]))

    def _split_chars(self, word: str) -> list[tuple[str, int]]:
        out: list[tuple[str, int]] = []
        while word:
            lo, hi = 1, len(word)
            while lo < hi:  # longest prefix within the limit
                mid = (lo + hi + 1) // 2
                if self._count(word[:mid]) - self._overhead <= self._limit:
                    lo = mid
                else:
                    hi = mid - 1
            out.append((word[:lo], self._count(word[:lo]) - self._overhead))
            word = word[lo:]
        return out

    # ---- tables -------------------------------------------------------------------------

    def _table_parts(self, block: Block, unit: Unit) -> Iterator[_Parts]:
        rows = [r for r in block.text.split("\n") if r.strip()]
        if not rows:
            return
        caption = block.caption

        def parts(text: str) -> _Parts:
            piece = _Piece(text, 0, 0, unit.page, unit.slide, unit.time_start, unit.time_end)
            return _Parts("table", [piece], self._section_path, text=text)

        whole = "\n".join(([caption] if caption else []) + rows)
        if self._count(whole) <= self.config.max_tokens:
            yield parts(whole)
            return
        header, body = rows[0], rows[1:] or [""]
        prefix = ([caption] if caption else []) + [header]
        if self._count("\n".join(prefix)) > self._limit // 2:
            prefix = [header] if self._count(header) <= self._limit // 2 else []
        prefix_tokens = self._count("\n".join(prefix)) - self._overhead if prefix else 0
        room = self._limit - prefix_tokens
        current: list[str] = []
        current_tokens = 0
        for row in body:
            n = self._count(row) - self._overhead
            pieces = [(row, n)] if n <= room else self._split_to(row, room)
            for text, tokens in pieces:
                if current and current_tokens + tokens > room:
                    yield from self._table_chunks(prefix, current, parts)
                    current, current_tokens = [], 0
                current.append(text)
                current_tokens += tokens
        if current:
            yield from self._table_chunks(prefix, current, parts)

    def _table_chunks(
        self, prefix: list[str], rows: list[str], parts: Callable[[str], _Parts]
    ) -> Iterator[_Parts]:
        text = "\n".join(prefix + rows)
        if self._count(text) <= self.config.max_tokens or len(rows) == 1:
            yield parts(text)
            return
        half = len(rows) // 2
        yield from self._table_chunks(prefix, rows[:half], parts)
        yield from self._table_chunks(prefix, rows[half:], parts)

    def _split_to(self, text: str, room: int) -> list[tuple[str, int]]:
        saved = self._limit
        self._limit = max(8, room)
        try:
            return self._split_words(text)
        finally:
            self._limit = saved

    # ---- output -------------------------------------------------------------------------

    def _finalize(self, parts: _Parts) -> Iterator[ChunkDraft]:
        if parts.text is None:
            chunks: list[str] = []
            for i, piece in enumerate(parts.pieces):
                if i and piece.paragraph != parts.pieces[i - 1].paragraph:
                    chunks.append("\n\n")
                elif i and not _HARD_END.search(parts.pieces[i - 1].text):
                    chunks.append(" ")  # after "。" or "！" a sentence follows with no space
                chunks.append(piece.text)
            text = "".join(chunks)
        else:
            text = parts.text
        if not _SOME_WORD.search(text):
            return  # "®", "•", a lone page furniture symbol: nothing anyone could ask about
        tokens = self._count(text)
        if tokens > self.config.max_tokens and parts.kind != "table" and len(parts.pieces) > 1:
            # Rare: the joined text tokenises longer than its sentences did. Re-split.
            half = len(parts.pieces) // 2
            yield from self._finalize(_Parts(parts.kind, parts.pieces[:half], parts.section_path))
            yield from self._finalize(_Parts(parts.kind, parts.pieces[half:], parts.section_path))
            return
        kind: ChunkKind = parts.kind
        if kind == "text":
            kind = chunk_kind(text, parts.section_path)
        pages = [p.page for p in parts.pieces if p.page is not None]
        starts = [p.time_start for p in parts.pieces if p.time_start is not None]
        ends = [p.time_end for p in parts.pieces if p.time_end is not None]
        slides = [p.slide for p in parts.pieces if p.slide is not None]
        path = list(parts.section_path)
        draft = ChunkDraft(
            index=self._index,
            kind=kind,
            text=text,
            section_path=path,
            chapter=path[0] if path else None,
            page_start=min(pages) if pages else None,
            page_end=max(pages) if pages else None,
            slide=slides[0] if slides else None,
            time_start=min(starts) if starts else None,
            time_end=max(ends) if ends else None,
            token_count=tokens,
        )
        self._index += 1
        yield draft


def chunk_units(
    units: Iterable[Unit], *, config: ChunkingConfig, count_tokens: TokenCounter
) -> Iterator[ChunkDraft]:
    """Chunk a stream of extracted units (see ``Chunker``); lazy, in document order."""
    return Chunker(config=config, count_tokens=count_tokens).chunks(units)
