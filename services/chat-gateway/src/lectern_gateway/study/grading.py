"""Checking a student's answer against a question's reference and its source.

Multiple choice and true/false compare the chosen option. A short answer is right when, after
normalising case, punctuation and articles, it equals an accepted answer; otherwise:

- a different number, or a negation the reference does not have, makes it wrong;
- against a number, the same number is right ("24 hours" for "24");
- against a short reference (a term, up to three words) a spelling one edit away is right
  (two for words of ten letters or more: "mitosys" for "mitosis", never "meiosis");
- against a longer reference it is right when it carries most of the reference's content
  words that the question does not already give (``TERM_RECALL``), or means the same to the
  local embedding model (``COSINE``) while sharing at least one of those words (an answer
  that restates the question, "menu-based security is effective", is close to any reference).

The thresholds were chosen on the labelled set ``tests/gateway/data/short_answers.jsonl``
(right and wrong answers written for the purpose; see docs/study.md).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence

TERM_RECALL = 0.6
COSINE = 0.6

_ARTICLES = re.compile(r"\b(?:a|an|the)\b")
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
_NEGATION = re.compile(r"\b(?:not|no|never|none|cannot|can't|isn't|aren't|doesn't|don't)\b")
_STOP = frozenset(
    "a an the of in on at to for and or but is are was were be been it its this that these "
    "those with by from as which who what when where why how do does did can could should "
    "would will there their they them he she his her we you i".split()
)


def normalise(text: str) -> str:
    """Case, accents, punctuation and articles removed; spaces collapsed."""
    folded = unicodedata.normalize("NFKD", text.casefold())
    folded = "".join(c for c in folded if not unicodedata.combining(c))
    folded = re.sub(r"[^\w\s%./,-]", " ", folded)
    folded = re.sub(r"(?<!\d)[.,/-]|[.,/-](?!\d)", " ", folded)
    return " ".join(_ARTICLES.sub(" ", folded).split())


def content_words(text: str) -> set[str]:
    """The words of ``text`` that carry meaning (stop words dropped, crude plural folding)."""
    out: set[str] = set()
    for word in normalise(text).split():
        if word in _STOP:
            continue
        out.add(word[:-1] if len(word) > 4 and word.endswith("s") else word)
    return out


def _numbers(text: str) -> set[str]:
    return {n.replace(",", "") for n in _NUMBER.findall(text)}


def choice_is_right(answer: str, given: str) -> bool:
    """A chosen option (text, or ``true``/``false``) against the right one."""
    return normalise(given) == normalise(answer)


def edit_distance(a: str, b: str) -> int:
    """Levenshtein distance (insertions, deletions, substitutions)."""
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        current = [i]
        for j, cb in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ca != cb)))
        previous = current
    return previous[-1]


def short_answer_is_right(
    accepted: Sequence[str],
    given: str,
    *,
    question: str = "",
    similarity: float | None = None,
) -> bool:
    """A typed answer against the accepted ones; ``similarity`` is the embedding cosine of
    the answer and the first accepted answer, when a model is at hand."""
    said = normalise(given)
    if not said:
        return False
    for reference in accepted:
        expected = normalise(reference)
        if said == expected:
            return True
        wanted_numbers = _numbers(expected)
        if wanted_numbers and _numbers(said) != wanted_numbers:
            continue
        if bool(_NEGATION.search(said)) != bool(_NEGATION.search(expected)):
            continue
        if wanted_numbers and all(_NUMBER.fullmatch(w.rstrip("%")) for w in expected.split()):
            return True  # the number asked for, with or without its unit
        if len(expected.split()) <= 3:
            if edit_distance(said, expected) <= (1 if len(expected) < 10 else 2):
                return True
            continue
        wanted = content_words(expected) - content_words(question) or content_words(expected)
        if len(wanted & content_words(said)) / len(wanted) >= TERM_RECALL:
            return True
        shared = {w[:5] for w in wanted} & {w[:5] for w in content_words(said)}
        if similarity is not None and similarity >= COSINE and shared:
            return True  # means the same, and says something the question did not
    return False
