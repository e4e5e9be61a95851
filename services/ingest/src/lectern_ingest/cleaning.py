"""Text normalisation for extracted documents: pure functions, idempotent."""

from __future__ import annotations

import math
import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Sequence

LIGATURES = {
    "\ufb00": "ff",
    "\ufb01": "fi",
    "\ufb02": "fl",
    "\ufb03": "ffi",
    "\ufb04": "ffl",
    "\ufb05": "st",
    "\ufb06": "st",
    "\u0132": "IJ",
    "\u0133": "ij",
    "\u0152": "OE",
    "\u0153": "oe",
}

QUOTES = {
    "\u2018": "'",
    "\u2019": "'",
    "\u201a": "'",
    "\u201b": "'",
    "\u2032": "'",
    "\u2039": "'",
    "\u203a": "'",
    "\u201c": '"',
    "\u201d": '"',
    "\u201e": '"',
    "\u201f": '"',
    "\u2033": '"',
    "\u00ab": '"',
    "\u00bb": '"',
}

# Characters that carry no text: soft hyphen, zero-width spaces/joiners, BOM.
_INVISIBLE = dict.fromkeys(map(ord, "\u00ad\u200b\u200c\u200d\u2060\ufeff"), None)
_SPACES = dict.fromkeys(
    map(
        ord,
        "\u00a0\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007"
        "\u2008\u2009\u200a\u202f\u205f\u3000\t\x0b\x0c",
    ),
    " ",
)
_TRANSLATE = {**_INVISIBLE, **_SPACES, **{ord(k): v for k, v in {**LIGATURES, **QUOTES}.items()}}
_CONTROL = re.compile(r"[\x00-\x08\x0e-\x1f\x7f]")
# Arabic presentation forms (what PDFs often contain) fold to the base letters people search.
_ARABIC_FORMS = re.compile(r"[\ufb50-\ufdff\ufe70-\ufeff]+")
_MULTI_SPACE = re.compile(r" {2,}")
_HYPHEN_END = re.compile(r"(?<=[^\W\d_])[-\u2010\u2011]$")
_PAGE_NUMBER = re.compile(
    r"^(?:page\s+)?(?:\d{1,4}|[ivxlcdm]{1,7})(?:\s*(?:/|of)\s*\d{1,4})?$", re.IGNORECASE
)
# A number with its separators ("2.3.59.1", "12-12-2022", "3/10") counts as one placeholder.
_DIGITS = re.compile(r"\d(?:[\d.,:/\-]*\d)?")


def normalize_unicode(text: str) -> str:
    """Fix ligatures and smart quotes, drop invisible/control characters, then NFC."""
    text = text.translate(_TRANSLATE)
    text = _CONTROL.sub("", text)
    text = _ARABIC_FORMS.sub(lambda m: unicodedata.normalize("NFKC", m.group(0)), text)
    return unicodedata.normalize("NFC", text)


def normalize_whitespace(text: str) -> str:
    """Collapse runs of spaces, trim lines, keep at most one blank line between paragraphs."""
    lines = [_MULTI_SPACE.sub(" ", line).strip() for line in text.replace("\r\n", "\n").split("\n")]
    out: list[str] = []
    for line in lines:
        if not line and (not out or not out[-1]):
            continue
        out.append(line)
    while out and not out[-1]:
        out.pop()
    return "\n".join(out)


def join_lines(lines: Sequence[str]) -> str:
    """Join the lines of one paragraph, rejoining words hyphenated across line ends."""
    parts: list[str] = []
    for raw in lines:
        line = raw.strip()
        if not line:
            continue
        if parts and _HYPHEN_END.search(parts[-1]) and line[0].islower():
            parts[-1] = parts[-1][:-1] + line
        elif parts:
            parts[-1] = parts[-1] + " " + line
        else:
            parts.append(line)
    return parts[0] if parts else ""


def clean_text(text: str) -> str:
    """Full normalisation of a block of text: unicode, dehyphenation and whitespace."""
    text = normalize_unicode(text)
    paragraphs = re.split(r"\n\s*\n", text.replace("\r\n", "\n"))
    joined = [join_lines(p.split("\n")) for p in paragraphs]
    return normalize_whitespace("\n\n".join(p for p in joined if p))


def clean_inline(text: str) -> str:
    """Normalise a single-line string (a heading, a cell): unicode plus one-space separation."""
    return " ".join(normalize_unicode(text).split())


def furniture_key(text: str) -> str:
    """Key under which running headers/footers compare equal across pages (digits ignored)."""
    return _DIGITS.sub("#", " ".join(normalize_unicode(text).lower().split()))


def is_page_number(text: str) -> bool:
    """Whether a short line is only a page number ("12", "xiv", "Page 3 of 10")."""
    return bool(_PAGE_NUMBER.match(text.strip()))


def repeated_furniture(
    page_edges: Iterable[Iterable[str]], *, min_pages: int = 3, min_fraction: float = 0.05
) -> frozenset[str]:
    """Keys of header/footer lines seen on many pages, from each page's top/bottom lines."""
    counts: Counter[str] = Counter()
    pages = 0
    for edges in page_edges:
        pages += 1
        counts.update({furniture_key(line) for line in edges if line.strip()})
    threshold = max(min_pages, int(pages * min_fraction + 0.999))
    return frozenset(key for key, n in counts.items() if n >= threshold and key)


def block_key(text: str) -> str:
    """Key under which a repeated block (a contact box, a disclaimer) compares equal across
    pages: case and spacing ignored, digits kept (rows of a table differ by their figures)."""
    return " ".join(normalize_unicode(text).casefold().split())


#: a block on this share of a document's pages is boilerplate, not content: a contact box
#: or notice printed on every page; a table's recurring labels (12 of 31 slides in the
#: shared evaluation-metrics deck) stay below it
BOILERPLATE_SHARE = 0.5


def repeated_blocks(
    page_blocks: Iterable[Iterable[str]],
    *,
    share: float = BOILERPLATE_SHARE,
    min_pages: int = 3,
    min_chars: int = 12,
    min_words: int = 4,
) -> frozenset[str]:
    """Keys (``block_key``) of blocks found on at least ``share`` of the pages, anywhere on
    the page: repeated boilerplate, kept out of the indexed text. Blocks of fewer than
    ``min_words`` words (a table's column labels) are left to the running-header rules."""
    counts: Counter[str] = Counter()
    pages = 0
    for blocks in page_blocks:
        pages += 1
        counts.update(
            {
                key
                for text in blocks
                if len(key := block_key(text)) >= min_chars and len(key.split()) >= min_words
            }
        )
    if pages < min_pages:
        return frozenset()
    threshold = max(min_pages, math.ceil(pages * share))
    return frozenset(key for key, n in counts.items() if n >= threshold)
