"""Citation parsing and checking: labels in the answer, cited sentences, their support.

Support is lexical: the share of a sentence's content words (``lectern_common.text``'s words,
stopwords and stems, as the answerer's) that occur in the cited source. It is cheap,
deterministic and works with any generator; a sentence whose support is under the threshold
is flagged.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from lectern_common.text import STOPWORDS, SentenceRules, sentence_spans, stem, words

LABEL_RE = re.compile(r"\[([TW])(\d{1,3})\]")
#: a model's answer is split as it streams: a stop ends a sentence whatever follows it (a model
#: may start the next in lower case), the labels written right after the stop belong to it,
#: and a label not yet complete ("[T") keeps the sentence open
_ANSWER = SentenceRules(
    stop=r"[.!?]+",
    closers=rf"[ \t]*{LABEL_RE.pattern}",
    start="",
    pending=r"\[(?:[TW]\d{0,3})?",
)


@dataclass(frozen=True)
class CitedSentence:
    """A finished sentence of the answer and the labels it cites."""

    start: int
    end: int
    text: str
    labels: tuple[str, ...]


def content_terms(text: str) -> set[str]:
    """Content words of ``text``: the answerer's terms, less labels and words under three
    letters (numbers excepted)."""
    text = LABEL_RE.sub(" ", text)
    return {
        stem(word)
        for word in words(text.lower())
        if word not in STOPWORDS and (len(word) >= 3 or word.isdigit())
    }


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


def split_cited_sentences(text: str, *, final: bool = True) -> tuple[list[CitedSentence], int]:
    """Sentences of ``text`` and where the unfinished rest starts.

    A sentence ends at ``.``/``!``/``?`` (plus labels written right after it) followed by
    whitespace, or at a newline. With ``final`` the rest counts as a sentence too.
    """
    spans, rest = sentence_spans(text, rules=_ANSWER, final=final)
    return [
        CitedSentence(start, end, text[start:end], tuple(labels_in(text[start:end])))
        for start, end in spans
    ], rest


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
        sentences, rest = split_cited_sentences(self.text[self._done :], final=final)
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
