"""What a heading's text says about the tree: its section number, or that it titles a table
of contents (pure text functions, shared by the extractors and the chunker)."""

from __future__ import annotations

import re

from lectern_ingest.cleaning import clean_inline

#: titles of lists of figures, tables and the like, whose entries are captions, not sections
FIGURES_TITLES = frozenset(
    "list of figures|list of tables|list of illustrations|illustrations|list of plates|"
    "abbildungsverzeichnis|tabellenverzeichnis".split("|")
)
#: titles of a table of contents (and of its siblings, lists of figures and tables),
#: compared case-folded with numbering and a trailing colon off
CONTENTS_TITLES = (
    frozenset(
        "contents|table of contents|contents page|inhalt|inhaltsverzeichnis|"
        "table des matières|sommaire|índice|indice".split("|")
    )
    | FIGURES_TITLES
)
_CHAPTER = re.compile(r"^(?:chapter|kapitel|chapitre)\s+\d", re.IGNORECASE)
_TITLE_NUMBERING = re.compile(r"^(?:(?:\d+|[ivxlc]+)[.)]?\s+)+", re.IGNORECASE)
#: a heading's own number: at most three digits a part (not a year), then a word
_HEADING_NUMBER = re.compile(
    r"^(?:(?:chapter|kapitel|chapitre)\s+)?(\d{1,3}(?:\.\d{1,3})*)\.?:?\s+(?=[^\W\d_])",
    re.IGNORECASE,
)


def _list_title_key(text: str) -> str | None:
    """A short title case-folded, its numbering and trailing colon off (None when long)."""
    if len(text) > 40:
        return None
    return _TITLE_NUMBERING.sub("", clean_inline(text)).strip(" .:").casefold()


def is_contents_title(text: str) -> bool:
    """Whether ``text`` is the title of a table of contents ("Contents", "Inhalt" ...)."""
    return _list_title_key(text) in CONTENTS_TITLES


def is_figures_title(text: str) -> bool:
    """Whether ``text`` is the title of a list of figures, tables or illustrations."""
    return _list_title_key(text) in FIGURES_TITLES


def section_number(text: str) -> tuple[int, ...] | None:
    """A heading's section number ("3.2.1 Title": (3, 2, 1); "Chapter 4 Title": (4,))."""
    match = _HEADING_NUMBER.match(text)
    return tuple(int(part) for part in match.group(1).split(".")) if match else None


def is_chapter_label(text: str) -> bool:
    """Whether a heading opens with "Chapter N" (its sections may number from 1 again)."""
    return bool(_CHAPTER.match(text))


def numbering_depth(text: str) -> int | None:
    """How deep a heading's section number is ("3.2.1 Title": 3), None when unnumbered."""
    number = section_number(text)
    return len(number) if number else None
