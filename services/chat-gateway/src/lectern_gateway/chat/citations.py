"""Citation parsing and checking: labels in the answer, cited sentences, their support.

Support is lexical: the share of a sentence's content words (lower-cased, crudely stemmed,
stopwords removed) that occur in the cited source. It is cheap, deterministic and works
with any generator; a sentence whose support is under the threshold is flagged.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

LABEL_RE = re.compile(r"\[([TW])(\d{1,3})\]")
_WORD_RE = re.compile(r"[^\W_]+", re.UNICODE)
_TERMINAL = ".!?"
_STOPWORDS = frozenset(
    "a an the and or but if then else of to in on at by for with from as is are was were be been "
    "being it its this that these those there here which who whom whose what when where why how "
    "not no nor so than too very can could may might must shall should will would do does did "
    "done has have had having i you he she we they them their our your his her my me us also "
    "into onto about over under between through during before after above below up down out "
    "such each both all any some more most other same only own just because while".split()
)


@dataclass(frozen=True)
class CitedSentence:
    """A finished sentence of the answer and the labels it cites."""

    start: int
    end: int
    text: str
    labels: tuple[str, ...]


def content_terms(text: str) -> set[str]:
    """Content words of ``text``: lower-cased, crude plural stemming, no stopwords or labels."""
    text = LABEL_RE.sub(" ", text)
    terms: set[str] = set()
    for word in _WORD_RE.findall(text.lower()):
        if word in _STOPWORDS or (len(word) < 3 and not word.isdigit()):
            continue
        terms.add(_stem(word))
    return terms


def _stem(word: str) -> str:
    for suffix in ("ies", "es", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)] + ("y" if suffix == "ies" else "")
    return word


def support(sentence: str, source_text: str) -> float:
    """Share of the sentence's content words found in the source (0..1; 0 when it has none)."""
    terms = content_terms(sentence)
    if not terms:
        return 0.0
    return len(terms & content_terms(source_text)) / len(terms)


def labels_in(text: str) -> list[str]:
    """Citation labels in order of first appearance, e.g. ``["T1", "W2"]``."""
    seen: dict[str, None] = {}
    for kind, number in LABEL_RE.findall(text):
        seen.setdefault(f"{kind}{int(number)}", None)
    return list(seen)


def _boundary(text: str, i: int) -> int | None:
    """If a sentence ends at ``text[i]``, the index just past it (trailing labels included)."""
    char = text[i]
    if char == "\n":
        return i + 1
    if char not in _TERMINAL:
        return None
    j = i + 1
    while True:
        k = j
        while k < len(text) and text[k] in " \t":
            k += 1
        match = LABEL_RE.match(text, k)
        if match is None:
            break
        j = match.end()
    return j


def split_sentences(text: str, *, final: bool = True) -> tuple[list[CitedSentence], int]:
    """Sentences of ``text`` and where the unfinished rest starts.

    A sentence ends at ``.``/``!``/``?`` (plus labels written right after it) followed by
    whitespace, or at a newline. With ``final`` the rest counts as a sentence too.
    """
    sentences: list[CitedSentence] = []
    start = 0
    i = 0
    while i < len(text):
        end = _boundary(text, i)
        if end is not None:
            # a period inside "3.5" or "e.g." needs the next char: whitespace or end-of-text
            if end < len(text) and not text[end].isspace() and text[i] != "\n":
                i += 1
                continue
            if not final and _may_continue(text, end):
                break
            _append(sentences, text, start, end)
            start = end
            i = end
            continue
        i += 1
    if final and start < len(text):
        _append(sentences, text, start, len(text))
        start = len(text)
    return sentences, start


_PARTIAL_LABEL = re.compile(r"\[(?:[TW]\d{0,3})?")


def _may_continue(text: str, end: int) -> bool:
    """Whether more streamed text could still extend the sentence ending at ``end``."""
    k = end
    while k < len(text) and text[k] in " \t":
        k += 1
    return k == len(text) or _PARTIAL_LABEL.fullmatch(text, k) is not None


def _append(out: list[CitedSentence], text: str, start: int, end: int) -> None:
    raw = text[start:end]
    stripped = raw.strip()
    if not stripped:
        return
    offset = start + (len(raw) - len(raw.lstrip()))
    out.append(
        CitedSentence(
            start=offset, end=offset + len(stripped), text=stripped, labels=tuple(labels_in(raw))
        )
    )


@dataclass
class SentenceTracker:
    """Feeds streamed text and yields each sentence as soon as it is finished."""

    text: str = ""
    _done: int = 0

    def feed(self, delta: str) -> list[CitedSentence]:
        """Add a delta; return the sentences it finished."""
        self.text += delta
        return self._take(final=False)

    def finish(self) -> list[CitedSentence]:
        """The last, unterminated sentence (if any)."""
        return self._take(final=True)

    def _take(self, *, final: bool) -> list[CitedSentence]:
        sentences, rest = split_sentences(self.text[self._done :], final=final)
        shifted = [
            CitedSentence(s.start + self._done, s.end + self._done, s.text, s.labels)
            for s in sentences
        ]
        self._done += rest
        return shifted


@dataclass(frozen=True)
class CheckedCitation:
    """One [T#] citation of one sentence, checked against the given sources."""

    label: str
    sentence: CitedSentence
    valid: bool
    support: float
    supported: bool


@dataclass
class CitationReport:
    """Every checked textbook citation and the measured grounding of the answer."""

    checked: list[CheckedCitation] = field(default_factory=list)
    grounding: float = 0.0
    uncited_answer: bool = False

    @property
    def flagged(self) -> list[str]:
        """Labels cited invalidly or without support, in order, once each."""
        return list(dict.fromkeys(c.label for c in self.checked if not c.supported))


def check_sentence(
    sentence: CitedSentence, sources: dict[str, str], *, threshold: float
) -> list[CheckedCitation]:
    """Check every [T#] label of a sentence against the source texts (by label)."""
    out: list[CheckedCitation] = []
    for label in sentence.labels:
        if not label.startswith("T"):
            continue
        source = sources.get(label)
        if source is None:
            out.append(CheckedCitation(label, sentence, valid=False, support=0.0, supported=False))
            continue
        score = round(support(sentence.text, source), 3)
        out.append(CheckedCitation(label, sentence, True, score, supported=score >= threshold))
    return out


def grounding_of(
    checked: Sequence[CheckedCitation], *, sentences: Iterable[CitedSentence]
) -> float:
    """Measured grounding: mean support of cited sentences, scaled by the share of cited ones.

    Sentences with substance (three or more content words) that cite nothing count against
    the answer; short connective sentences do not.
    """
    substantive = [s for s in sentences if len(content_terms(s.text)) >= 3]
    if not checked:
        return 0.0
    best: dict[tuple[int, int], float] = {}
    for c in checked:
        key = (c.sentence.start, c.sentence.end)
        best[key] = max(best.get(key, 0.0), c.support if c.valid else 0.0)
    mean_support = sum(best.values()) / len(best)
    cited_share = min(1.0, len(best) / max(1, len(substantive))) if substantive else 1.0
    return round(mean_support * (0.5 + 0.5 * cited_share), 3)
