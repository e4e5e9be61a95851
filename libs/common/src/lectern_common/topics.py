"""What a student's message is about, in the material's own words.

A message's *topics* are the runs of its words that the retrieved material also uses ("the
first law of motion", "meiosis", "chromosome number"), ranked by the sum of their words'
weights: each word's idf in the whole library (the BM25 statistics), so that the most
specific phrase comes first; without the library's statistics, ``log(1 + occurrences in the
material)``, so that a word the passages keep repeating outranks a verb they use once.
Function words may sit inside a run ("law of motion") but never start or end one. Two topics
joined by "and", "or" or "vs" after "between" or "difference" are one topic, the pair
("mitosis and meiosis").

The gateway computes them (it holds the material) and sends them on ``chat.turn.completed``;
the memory service names a struggle or a check's topic with them, never with the answer's
module tag. Without material, :func:`plain_topics` falls back to the message's content words.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence

from lectern_common.text import ANAPHORS, words

#: an apostrophe joins a word, a hyphen none: "pair-bonds" and "pair bonds" are the same topic
_APOSTROPHES = "'’"
#: may sit inside a topic ("law of motion", "rate of reaction"), never at its edge
_INNER = frozenset("of the a an in on for to and de des du la le der die das".split())
#: words that are never part of a topic: question and function words, talk about learning
#: and understanding (the vocabulary of a tutoring chat, not of any subject)
NOT_TOPICAL = (
    frozenset(
        """what which who whom whose when where why how does do did is are was were be been being
    can could should would will shall may might must has have had having i me my we our you
    your he she they them their it its this that these those there here a an the of in on at
    to for from by with about and or but not no so as if then than also just only very too
    please tell explain explained explaining again still really get got getting understand
    understood understanding know knew mean means meaning confused confusing confusion lost
    sense hard difficult help simpler simply simple say said saying sorry thanks thank okay
    ok yes yeah bit little more most much many lot lots something anything everything thing
    things stuff way ways part parts one some any all other another same different difference
    differences between find found make makes made give show want need like example examples
    step steps time again why whats what's dont don't doesnt doesn't isnt isn't im i'm ive
    i've cant can't wait bit kind sort quite rather even already yet though although""".split()
    )
    | ANAPHORS
)
_NEVER = NOT_TOPICAL
_MAX_RUN = 5
#: two topics at most this many words apart, spanning at most _MAX_SPAN, are named together
_MAX_GAP = 3
_MAX_SPAN = 8
#: with the library's idf, a word below this share of the message's rarest word's idf is too
#: common to be part of a topic ("good", "called", "try")
COMMON_SHARE = 0.5
_PAIR = re.compile(r"\b(?:between|difference|differences|versus|vs\.?|compare|comparing)\b", re.I)
_JOINERS = frozenset({"and", "or", "vs", "vs.", "versus"})


def words_of(text: str) -> list[str]:
    """The words topics are made of: case-folded, one kind of apostrophe."""
    return [w.casefold().replace("’", "'") for w in words(text, joined_by=_APOSTROPHES)]


def acronyms(message: str) -> frozenset[str]:
    """The message's short words written in capitals ("VP", "AI", "GC"), case-folded: too
    short to be a topic as lower-case words ("in", "of"), they name one when capitalised."""
    found = words(message, joined_by=_APOSTROPHES)
    return frozenset(w.casefold() for w in found if len(w) == 2 and w.isupper())


def _runs(
    words: Sequence[str],
    common: frozenset[str] = frozenset(),
    short: frozenset[str] = frozenset(),
) -> list[tuple[int, int]]:
    """Spans [start, end) of candidate runs: no word from ``_NEVER`` or ``common`` (words too
    frequent in the library to name a topic) except inner ones; a word under three letters
    only when it is a number or one of ``short`` (the message's acronyms)."""
    never = _NEVER | common
    spans = []
    for start, word in enumerate(words):
        if (
            word in never
            or word in _INNER
            or (len(word) < 3 and not word.isdigit() and word not in short)
        ):
            continue
        for end in range(start + 1, min(len(words), start + _MAX_RUN) + 1):
            last = words[end - 1]
            if last in never and last not in _INNER:
                break
            if last in _INNER:
                continue
            spans.append((start, end))
    return spans


def candidate_words(message: str) -> list[str]:
    """The words of ``message`` that may be part of a topic (for looking up their idf)."""
    return list(dict.fromkeys(w for w in words_of(message) if w not in _NEVER))


def topics(
    message: str,
    material: Sequence[str],
    *,
    idf: Mapping[str, float] | None = None,
    limit: int = 5,
) -> list[str]:
    """The message's topics found in ``material`` (passages), best first. With ``idf`` (the
    words' inverse document frequencies in the whole library), a word's weight is its idf
    and a word far more common than the message's rarest is no part of a topic: the most
    specific phrase comes first, never a common word the passages happen to use ("good",
    "called"). Without it, a word weighs ``log(1 + occurrences in the passages)``."""
    words = words_of(message)
    if not words or not material:
        return []
    text = " " + " ".join(" ".join(words_of(m)) for m in material) + " "
    counts = Counter(text.split())
    common: frozenset[str] = frozenset()
    if idf:
        rarest = max(idf.values())
        common = frozenset(w for w, v in idf.items() if v < COMMON_SHARE * rarest)

    def weight(word: str) -> float:
        return idf.get(word, 0.0) if idf else math.log1p(counts[word])

    scored: dict[str, tuple[float, int]] = {}
    for start, end in _runs(words, common, acronyms(message)):
        phrase = " ".join(words[start:end])
        if f" {phrase} " not in text:
            continue
        score = sum(weight(w) for w in words[start:end] if w not in _INNER)
        if score <= 0.0:
            continue
        if phrase not in scored or scored[phrase][0] < score:
            scored[phrase] = (score, start)
    # a run inside a better-scoring one is the same topic, said less fully
    ranked = sorted(scored.items(), key=lambda kv: (-kv[1][0], kv[1][1]))
    kept: list[tuple[str, int]] = []
    for phrase, (_, start) in ranked:
        if any(f" {phrase} " in f" {other} " for other, _ in kept):
            continue
        kept.append((phrase, start))
    pair = _paired(message, [p for p, _ in kept]) or (_spanning(words, kept) if idf else None)
    out = ([pair] if pair else []) + [p for p, _ in kept]
    return list(dict.fromkeys(out))[:limit]


def _spanning(words: Sequence[str], kept: Sequence[tuple[str, int]]) -> str | None:
    """The message's words from its best topic to its second when only a few content words
    part them ("oestrogen usually started to induce puberty"): a subject the material keeps
    repeating is outranked by a rarer phrase beside it, and the two together say what was
    asked. Never across a question or function word ("velocity of the ball | when it | hits
    the ground" stays two topics), and only with the library's idf: with counts alone a word
    the passages use once ("usually") weighs as much as a subject term."""
    if len(kept) < 2:
        return None
    spans = sorted((start, start + len(phrase.split())) for phrase, start in kept[:2])
    (first, first_end), (second, end) = spans
    between = words[first_end:second]
    if second < first_end or len(between) > _MAX_GAP or end - first > _MAX_SPAN:
        return None
    if any(w in _NEVER and w not in _INNER for w in between):
        return None
    return " ".join(words[first:end])


def _paired(message: str, found: Sequence[str]) -> str | None:
    """ "X and Y" when the message contrasts two of its topics ("between X and Y")."""
    if not _PAIR.search(message) or len(found) < 2:
        return None
    flat = " " + " ".join(words_of(message)) + " "
    for first in found:
        for second in found:
            if first == second:
                continue
            for joiner in _JOINERS:
                if f" {first} {joiner} {second} " in flat or f" {first} {joiner} the {second} " in (
                    flat
                ):
                    return f"{first} and {second}"
    return None


def plain_topics(message: str, *, limit: int = 3) -> list[str]:
    """Without material: the message's content-word runs, longest first."""
    words = words_of(message)
    spans = sorted(_runs(words, short=acronyms(message)), key=lambda s: (-(s[1] - s[0]), s[0]))
    out: list[str] = []
    for start, end in spans:
        phrase = " ".join(words[start:end])
        if any(f" {phrase} " in f" {o} " for o in out):
            continue
        out.append(phrase)
    return out[:limit]
