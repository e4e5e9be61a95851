"""A document's title: its metadata's when that is a real title (not a placeholder, nor a file
name such as "06-trees__slides"), else its largest heading (for a slide deck, the largest text
of its first slide)."""

from __future__ import annotations

import re

from lectern_common.text import words
from lectern_ingest.extract.model import Unit

_JUNK_TITLE = re.compile(
    r"^(?:untitled|no title|title|document\d*|powerpoint presentation|slide \d+|"
    r"microsoft (?:word|powerpoint|excel) - .*|.*\.(?:pdf|docx?|pptx?|xlsx?|tex|dvi|indd|qxd|"
    r"rtf|txt|md|html?))$",
    re.IGNORECASE,
)
#: a repository's stamp in a paper's margin ("arXiv:2103.15348v2 [cs.CV] 21 Jun 2021")
_STAMP = re.compile(r"^arxiv:\s*\d|^doi:|^https?://|^www\.", re.IGNORECASE)
_PATH = re.compile(r"^(?:[a-z]:)?[\\/]|[\\/][^\\/\s]+[\\/]", re.IGNORECASE)
#: a file name without its extension, as slide decks' metadata often carry ("06-trees__slides",
#: "week4_notes", "cs229-notes1", "linalg2", "ml-advice"): one token, with an underscore, with
#: digits among its lower-case letters, or all lower-case with a hyphen or dot ("COVID-19",
#: "ISO9001" and "Self-Assessment" stay titles)
_FILE_NAME = re.compile(r"^(?=[\w.\-]+$)(?:.*_|(?=.*\d).*[a-z]|(?=.*[.\-])[^A-Z]+$)")
_FILLER = frozenset("with from that this into over under about their what when which".split())
MAX_TITLE_CHARS = 500


def usable_title(title: str | None) -> str | None:
    """A title as given, unless it is a placeholder ("untitled", a file name or path, a
    template's "PowerPoint Presentation") or a fragment ("Details for:")."""
    if not title:
        return None
    title = " ".join(title.split())
    if (
        len(title) < 4
        or _JUNK_TITLE.match(title)
        or _FILE_NAME.match(title)
        or _PATH.search(title)
        or _STAMP.match(title)
        or sum(ch.isalpha() for ch in title) < 3
        or title.endswith((":", ",", ";"))
    ):
        return None
    return title[:MAX_TITLE_CHARS]


def _mentioned(title: str, text: str) -> bool:
    """Whether the first pages' text names a word of the title (a template's leftover
    metadata, "Packbot-P Summary Design and SOW" on a lecture's slides, names none)."""
    words = {w.casefold() for w in _long_words(title)} - _FILLER
    if not words:
        return True
    found = {w.casefold() for w in _long_words(text)}
    return bool(words & found)


def _long_words(text: str) -> list[str]:
    return [w for w in words(text, digits=False) if len(w) >= 4]


def document_title(metadata: str | None, *, heading: str | None, first_text: str) -> str | None:
    """The metadata title when it is a real one (and, when the first pages have a heading,
    one they mention), else the largest heading of the first pages."""
    given = usable_title(metadata)
    shown = usable_title(heading)
    if given is not None and (shown is None or _mentioned(given, first_text)):
        return given
    return shown or given


def heading_title(unit: Unit) -> str | None:
    """A unit's first top-level heading, when it can be a title (the fallback of formats
    without a title of their own)."""
    return next(
        (
            title
            for b in unit.blocks
            if b.kind == "heading" and (b.level or 1) <= 1 and (title := usable_title(b.text))
        ),
        None,
    )
