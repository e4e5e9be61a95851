"""Conflicting statements between two passages: different numbers for the same quantity, or the
same claim negated.

Two sentences make the same statement when their content words (no stop words, numbers or
negations) mostly agree. Between such sentences:

- **number**: apart from their numbers at most a word or two differ, each gives a number with
  the same unit (or none) in the same place, and the numbers differ ("boils at 100 °C" /
  "boils at 90 °C"; "began in 1789" / "began in 1790");
- **negation**: one says it and the other says it is not so ("is a mammal" / "is not a
  mammal").

Rules, not a model: precise on the restatements teachers upload (two editions, two
worksheets), and blind to paraphrases that share few words.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from lectern_common.text import SentenceRules, sentences, words

#: a statement ends at a stop or a semicolon, whatever follows, or at a line break
_STATEMENT = SentenceRules(stop=r"[.!?;]+", start="")
_NUMBER = re.compile(
    r"(?<![\w.])(-?\d{1,3}(?:,\d{3})+(?:\.\d+)?|-?\d+(?:\.\d+)?)\s*(%|°\s?[CF]|[^\W\d_]{1,12})?",
    re.UNICODE,
)
NEGATIONS = frozenset(
    "not no never none cannot neither nor without isn't aren't wasn't weren't doesn't don't "
    "didn't can't won't shouldn't couldn't hasn't haven't hadn't".split()
)
#: narrower than ``lectern_common.text.STOPWORDS`` on purpose: content sets are compared by
#: their overlap with the smaller one, and words such as "if", "all", "only", "same" keep a
#: fragment ("in most, if not all, member states") from matching any sentence that shares two
#: nouns; with the shared list, 20,000 pairs of chunks of bench/answers' documents gave 9 more
#: such false conflicts (and 3 fewer) than the 110 found with this one
_STOP = frozenset(
    "a an the of in on at to for from by with and or as is are was were be been being it its "
    "this that these those which who whom whose what when where why how than then there their "
    "they them he she his her we our you your i also about into over under between after "
    "before during per each every all any some most more less very can may might must should "
    "would could will shall do does did has have had so such only just".split()
)
#: share of content words two sentences must have in common to state the same thing
SAME_STATEMENT = 0.6
#: for a negation, nearly all of them
SAME_CLAIM = 0.8
_MAX_SENTENCE_WORDS = 60


@dataclass(frozen=True)
class Conflict:
    """Two sentences that disagree."""

    kind: Literal["number", "negation"]
    statement_a: str
    statement_b: str
    detail: str


def statements(text: str) -> list[str]:
    """The sentences of a passage (fragments of fewer than four words dropped)."""
    found = sentences(text, rules=_STATEMENT)
    return [s for s in found if 4 <= len(s.split()) <= _MAX_SENTENCE_WORDS]


def _words(sentence: str) -> list[str]:
    return [w.casefold() for w in words(sentence, joined_by="'", digits=False)]


def _content(words: list[str]) -> set[str]:
    return {w for w in words if w not in _STOP and w not in NEGATIONS and len(w) > 1}


@functools.lru_cache(maxsize=8192)
def _parsed(sentence: str) -> tuple[tuple[str, ...], frozenset[str]]:
    """A sentence's words and content words, read once however many pairs it is part of
    (each new chunk meets three neighbours, and a neighbour many new chunks)."""
    words = _words(sentence)
    return tuple(words), frozenset(_content(words))


def _numbers(sentence: str) -> list[tuple[float, str]]:
    """(value, unit as written) of each number; a stop word after it is no unit."""
    found: list[tuple[float, str]] = []
    for match in _NUMBER.finditer(sentence):
        unit = (match[2] or "").replace(" ", "")
        if unit.casefold() in _STOP or unit.casefold() in NEGATIONS:
            unit = ""
        found.append((float(match[1].replace(",", "")), unit))
    return found


def _overlap(a: frozenset[str], b: frozenset[str]) -> float:
    if not a or not b:
        return 0.0
    return len(a & b) / min(len(a), len(b))


def _negated(words: Sequence[str]) -> bool:
    return any(w in NEGATIONS or w.endswith("n't") for w in words)


def _show(value: float, unit: str) -> str:
    number = f"{value:g}" if abs(value) < 1e15 else str(value)
    return f"{number} {unit}".strip()


def compare(sentence_a: str, sentence_b: str) -> Conflict | None:
    """The conflict between two sentences, if they make the same statement differently."""
    (words_a, content_a), (words_b, content_b) = _parsed(sentence_a), _parsed(sentence_b)
    if len(content_a) < 2 or len(content_b) < 2:
        return None
    overlap = _overlap(content_a, content_b)
    if overlap < SAME_STATEMENT:
        return None
    numbers_a, numbers_b = _numbers(sentence_a), _numbers(sentence_b)
    # the same thing measured: apart from the numbers, at most a word or two differ
    # ("chapter 3 covers sound in air" / "chapter 4 covers sound in water" are two things)
    differ = len(content_a ^ content_b) <= max(1, round(0.25 * min(len(content_a), len(content_b))))
    if differ and numbers_a and len(numbers_a) == len(numbers_b):
        for (value_a, unit_a), (value_b, unit_b) in zip(numbers_a, numbers_b, strict=True):
            if unit_a.casefold() == unit_b.casefold() and value_a != value_b:
                return Conflict(
                    "number", sentence_a, sentence_b,
                    f"{_show(value_a, unit_a)} in one, {_show(value_b, unit_b)} in the other",
                )  # fmt: skip
    if overlap >= SAME_CLAIM and _negated(words_a) != _negated(words_b):
        negative = "first" if _negated(words_a) else "second"
        return Conflict(
            "negation", sentence_a, sentence_b,
            f"the {negative} says it is not so",
        )  # fmt: skip
    return None


def find_conflicts(text_a: str, text_b: str, *, limit: int = 3) -> list[Conflict]:
    """Conflicting sentence pairs between two passages (at most ``limit``)."""
    found: list[Conflict] = []
    right = statements(text_b)
    for sentence in statements(text_a):
        for other in right:
            conflict = compare(sentence, other)
            if conflict is not None:
                found.append(conflict)
                if len(found) >= limit:
                    return found
    return found
