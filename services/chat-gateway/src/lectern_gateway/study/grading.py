"""Checking a student's answer against a question's reference and its source.

Multiple choice and true/false compare the chosen option. A typed (short) answer is judged by
rules first, then by a fitted model.

The rules work on both texts normalised (case, accents, punctuation, articles) with number
words read as numbers ("forty-six", "ninety seven per cent", "two hundred and five", "a
dozen", "three point five", "third"/"3rd", "nineteen eighty-nine", and the units and tens of
French, German and Spanish: "quarante-six", "sechsundvierzig", "cuarenta y seis"):

- the same text, or an acronym of the reference ("CPU"), is right;
- when the reference states numbers the answer must state the same ones, else it is wrong
  (numbers the question shows may be repeated: "46 chromosomes in 23 pairs"; "one" and
  "second" count only when the other side has that number); a reference that is only a
  number is then right ("46 chromosomes" for "46");
- a negation on one side only is wrong ("not cancer"; "not reactive" reads as "unreactive",
  and a contrast such as ", not absorbed" negates nothing);
- the answer offered beside another candidate is a hedge, not right ("mitosis or meiosis").

Otherwise a logistic model combines the ``SIGNALS`` of the pair into the probability that the
answer means the reference: how many of the reference's words that the question lacks the
answer carries (by stem, and by spelling: each within ``slip_rate`` edits per letter), how
much of the answer is the reference's or only restates the question or its source, and the
local embedding model's cosines: answer and reference; the answer's own words (those the
question lacks) and the reference, with a cut-off ``match_cosine`` above which an answer
sharing no word means the reference ("a malignant tumour" for "cancer": "malignant" is at
0.79); the question with the answer in its blank against the question with the reference,
over the blank left empty. The cosine alone is weak evidence (MiniLM puts "meiosis" at 0.60
from "mitosis" and "tumour", a restatement, at 0.79 from "cancer"). Three fits take the
signals at hand: ``context`` (``embed_similarities``), ``reply`` (only the answer-to-reference
cosine: a caller passing ``similarity``), ``lexical`` (no embedder).

The weights, the two cut-offs and the thresholds are in ``grading_model.json`` beside this
module, written by ``bench/fit_grading.py`` from ``tests/gateway/data/short_answers_fit.jsonl``
only (344 answers: biology, chemistry, history, computing). Agreement with the labels
(context fit): 0.901 on the fit part (0.898 cross-validated by subject), 0.929 on the
held-out ``short_answers_check.jsonl`` (324 answers: the demo course's lessons, maths,
physics), 0.942 on the older ``short_answers.jsonl``; the rules-and-cosine checker before it
had 0.776, 0.765 and 0.981. See docs/study.md.
"""

from __future__ import annotations

import functools
import json
import math
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from lectern_common.text import terms

if TYPE_CHECKING:
    from lectern_common.embeddings import Embedder, Vectors

#: the blank of a generated fill-in question, and the words that introduce one
BLANK = "_____"
FILL_IN = "Fill in the blank:"

_ARTICLES = re.compile(r"\b(?:a|an|the)\b")
#: narrower than ``lectern_common.text.STOPWORDS`` on purpose: in an answer being graded,
#: "not", "no", "more", "all", "only", "same" are often the answer itself
_STOP = frozenset(
    "a an the of in on at to for and or but is are was were be been it its this that these "
    "those with by from as which who what when where why how do does did can could should "
    "would will there their they them he she his her we you i".split()
)

# ---------------------------------------------------------------------------- numbers

_CARDINALS: dict[str, int] = {
    **dict.fromkeys(("zero", "nought", "cero"), 0),
    **dict.fromkeys(("one", "un", "une", "uno", "una", "ein", "eine", "eins"), 1),
    **dict.fromkeys(("two", "deux", "zwei", "dos"), 2),
    **dict.fromkeys(("three", "trois", "drei", "tres"), 3),
    **dict.fromkeys(("four", "quatre", "vier", "cuatro"), 4),
    **dict.fromkeys(("five", "cinq", "funf", "cinco"), 5),
    **dict.fromkeys(("six", "sechs", "seis"), 6),
    **dict.fromkeys(("seven", "sept", "sieben", "siete"), 7),
    **dict.fromkeys(("eight", "huit", "acht", "ocho"), 8),
    **dict.fromkeys(("nine", "neuf", "neun", "nueve"), 9),
    **dict.fromkeys(("ten", "dix", "zehn", "diez"), 10),
    # Spanish "once" (11) is left out: it is an English word far more often
    **dict.fromkeys(("eleven", "onze", "elf"), 11),
    **dict.fromkeys(("twelve", "douze", "zwolf", "doce"), 12),
    **dict.fromkeys(("thirteen", "treize", "dreizehn", "trece"), 13),
    **dict.fromkeys(("fourteen", "quatorze", "vierzehn", "catorce"), 14),
    **dict.fromkeys(("fifteen", "quinze", "funfzehn", "quince"), 15),
    **dict.fromkeys(("sixteen", "seize", "sechzehn", "dieciseis"), 16),
    **dict.fromkeys(("seventeen", "siebzehn", "diecisiete"), 17),
    **dict.fromkeys(("eighteen", "achtzehn", "dieciocho"), 18),
    **dict.fromkeys(("nineteen", "neunzehn", "diecinueve"), 19),
    **dict.fromkeys(("twenty", "vingt", "vingts", "zwanzig", "veinte"), 20),
    **dict.fromkeys(("thirty", "trente", "dreissig", "treinta"), 30),
    **dict.fromkeys(("forty", "quarante", "vierzig", "cuarenta"), 40),
    **dict.fromkeys(("fifty", "cinquante", "funfzig", "cincuenta"), 50),
    **dict.fromkeys(("sixty", "soixante", "sechzig", "sesenta"), 60),
    **dict.fromkeys(("seventy", "siebzig", "setenta"), 70),
    **dict.fromkeys(("eighty", "achtzig", "ochenta"), 80),
    **dict.fromkeys(("ninety", "neunzig", "noventa"), 90),
    **{f"veinti{unit}": 20 + value for unit, value in (
        ("uno", 1), ("un", 1), ("dos", 2), ("tres", 3), ("cuatro", 4), ("cinco", 5), ("seis", 6),
        ("siete", 7), ("ocho", 8), ("nueve", 9))},
}  # fmt: skip
_ORDINALS: dict[str, int] = {
    "first": 1, "second": 2, "third": 3, "fourth": 4, "fifth": 5, "sixth": 6, "seventh": 7,
    "eighth": 8, "ninth": 9, "tenth": 10, "eleventh": 11, "twelfth": 12, "thirteenth": 13,
    "fourteenth": 14, "fifteenth": 15, "sixteenth": 16, "seventeenth": 17, "eighteenth": 18,
    "nineteenth": 19, "twentieth": 20, "thirtieth": 30, "fortieth": 40, "fiftieth": 50,
    "sixtieth": 60, "seventieth": 70, "eightieth": 80, "ninetieth": 90,
}  # fmt: skip
_HUNDREDS = frozenset(("hundred", "hundredth", "cent", "cents", "hundert", "cien", "ciento"))
_SCALES: dict[str, int] = {
    **dict.fromkeys(("thousand", "thousandth", "mille", "mil", "tausend"), 1000),
    **dict.fromkeys(("million", "millions", "millionth", "millon", "millones"), 10**6),
    **dict.fromkeys(("billion", "billions"), 10**9),
}
#: words that are a number only sometimes ("one of them", "metres per second"): alone, they
#: count only when the other text states that number
_AMBIGUOUS = frozenset(("one", "un", "une", "uno", "una", "ein", "eine", "eins", "first", "second"))
_MULTIPLIERS = frozenset((*_HUNDREDS, *_SCALES, "dozen"))
_JOINS = frozenset(("and", "et", "y", "und"))
_POINTS = frozenset(("point", "virgule", "coma", "komma"))
_GERMAN_TENS = re.compile(
    r"^(ein|zwei|drei|vier|funf|sechs|sieben|acht|neun)und"
    r"(zwanzig|dreissig|vierzig|funfzig|sechzig|siebzig|achtzig|neunzig)$"
)
_PER_CENT = re.compile(r"\b(?:per ?cent|pour cent|por ciento|prozent)\b")
_GROUPED = re.compile(r"(?<![\d.])(\d{1,3})((?:[ ,]\d{3})+)(?![\d.,])")
_DIGITS = re.compile(r"\d+(?:\.\d+)?")
_NUMERIC_TOKEN = re.compile(r"[\d./]*\d[a-z]{0,3}%?")  # "46", "1/2500", "3rd", "40%", "5kg"


def _word_value(token: str) -> int | None:
    """The value of one number word below 100 (a cardinal or an ordinal), else None."""
    if token in _CARDINALS:
        return _CARDINALS[token]
    if token in _ORDINALS:
        return _ORDINALS[token]
    german = _GERMAN_TENS.match(token)
    if german:
        return _CARDINALS[german.group(2)] + _CARDINALS[german.group(1)]
    return None


def _adds(last: int, value: int, group: int) -> bool:
    """Whether ``value`` goes on the number that ended with ``last`` ("forty" "six",
    "hundred" "five", "soixante" "dix" "sept")."""
    if last >= 100:
        return value < 100
    if last >= 20 and last % 10 == 0:
        return value < 10 or (last in (60, 80) and value < 20)
    return last == 10 and group % 100 in (70, 90) and 0 < value < 10


def _read_number(words: Sequence[str], start: int) -> tuple[Decimal, int] | None:
    """The number spelled out from ``words[start]`` on, and where it ends; None if none."""
    total = Decimal(0)
    group = Decimal(0)  # the part below the last thousand/million
    last: int | None = None  # the last value added to the group; None: nothing may follow
    seen = False
    k = start
    while k < len(words):
        word = words[k]
        following = words[k + 1] if k + 1 < len(words) else ""
        value = _word_value(word)
        if value is not None:
            if not seen:
                group, last = Decimal(value), value
            elif last is not None and _adds(last, value, int(group)):
                group, last = group + value, value
            elif last == 4 and value == 20 and group % 100 == 4:  # quatre-vingt(s)
                group, last = group + 76, 80
            elif last is not None and group == last and 11 <= last <= 20 and value >= 10:
                group, last = group * 100 + value, value  # a year: "nineteen eighty"
            else:
                break
            seen, k = True, k + 1
            if word in _ORDINALS:
                break
            continue
        if word in _HUNDREDS and group < 100:
            group, last, seen, k = (group or Decimal(1)) * 100, 100, True, k + 1
            if word.endswith("th"):
                break
            continue
        if word in _SCALES and (total == 0 or total >= _SCALES[word] * 1000):
            last = _SCALES[word]
            total, group, seen, k = total + (group or Decimal(1)) * last, Decimal(0), True, k + 1
            continue
        if word in ("dozen", "dozens") and group < 100:
            group, last, seen, k = (group or Decimal(1)) * 12, None, True, k + 1
            continue
        if not seen and following == "dozen" and word == "half":
            group, last, seen, k = Decimal(6), None, True, k + 2
            continue
        if not seen and _DIGITS.fullmatch(word) and following in _MULTIPLIERS:
            group, last, seen, k = Decimal(word), None, True, k + 1
            continue
        if seen and word in _JOINS:
            if following == "half":  # "two and a half"
                group, k = group + Decimal("0.5"), k + 2
                break
            after = _word_value(following)
            if after is not None and last is not None and _adds(last, after, int(group)):
                k += 1
                continue
            break
        if word in _POINTS:
            digits, k_after = _decimals(words, k + 1)
            if digits:
                group, seen, k = group + Decimal(f"0.{digits}"), True, k_after
        break
    if not seen:
        return None
    return total + group, k


def _decimals(words: Sequence[str], start: int) -> tuple[str, int]:
    """The digits read after "point" ("one four" of "three point one four"), and the end."""
    digits = ""
    k = start
    while k < len(words):
        digit = _word_value(words[k])
        if digit is not None and digit < 10 and words[k] not in _ORDINALS:
            digits += str(digit)
        elif words[k].isdigit():
            digits += words[k]
        else:
            break
        k += 1
    return digits, k


def _canonical(value: Decimal) -> str:
    text = format(value.normalize(), "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


def _digits_canonical(text: str) -> str:
    """Digits in one form: "1,000" and "1 000" as "1000", "2,5" as "2.5", "3.50" as "3.5"."""
    text = _GROUPED.sub(lambda m: m[1] + m[2].replace(",", "").replace(" ", ""), text)
    text = re.sub(r"(\d),(\d)", r"\1.\2", text)
    return re.sub(r"(\d+)\.(\d*?)0+(?!\d)", lambda m: m[1] + ("." + m[2] if m[2] else ""), text)


@dataclass(frozen=True)
class Reading:
    """A text normalised, with its number words as numerals and the numbers it states."""

    text: str
    #: the numbers the text states
    numbers: frozenset[str]
    #: numbers only an ambiguous word states ("one", "second"): they count when the other
    #: text states them
    maybe: frozenset[str]


def read(text: str) -> Reading:
    """``text`` normalised (``normalise``) with its numbers read (see the module docstring)."""
    folded = _PER_CENT.sub(" % ", normalise(text))
    tokens = _digits_canonical(folded).split()
    out: list[str] = []
    stated: set[str] = set()
    maybe: set[str] = set()
    k = 0
    while k < len(tokens):
        found = _read_number(tokens, k)
        if found is None:
            token = tokens[k]
            if _NUMERIC_TOKEN.fullmatch(token):
                stated.update(_canonical(Decimal(n)) for n in _DIGITS.findall(token))
            out.append(token)
            k += 1
            continue
        value, end = found
        numeral = _canonical(value)
        if end - k == 1 and tokens[k] in _AMBIGUOUS:
            maybe.add(numeral)
            out.append(tokens[k])  # "one of them" stays a word
        else:
            stated.add(numeral)
            out.append(numeral)
        k = end
    return Reading(" ".join(out), frozenset(stated), frozenset(maybe - stated))


def number_value(phrase: str) -> float | None:
    """The number ``phrase`` states when it is one number ("forty-six" 46.0, "3rd" 3.0)."""
    reading = read(phrase)
    words = reading.text.split()
    if len(words) != 1:
        return None
    found = _DIGITS.findall(words[0])
    return float(found[0]) if len(found) == 1 and _NUMERIC_TOKEN.fullmatch(words[0]) else None


# ---------------------------------------------------------------------------- text


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


def choice_is_right(answer: str, given: str) -> bool:
    """A chosen option (text, or ``true``/``false``) against the right one."""
    return normalise(given) == normalise(answer)


def edit_distance(a: str, b: str) -> int:
    """Edits from ``a`` to ``b``: insertions, deletions, substitutions and swaps of two
    neighbouring letters ("nuetrons"), one each (optimal string alignment)."""
    before: list[int] = []
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        current = [i]
        for j, cb in enumerate(b, 1):
            cost = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ca != cb))
            if i > 1 and j > 1 and ca == b[j - 2] and a[i - 2] == cb:
                cost = min(cost, before[j - 2] + 1)
            current.append(cost)
        before, previous = previous, current
    return previous[-1]


def _likeness(a: str, b: str) -> float:
    """1 for the same string, 0 for nothing in common (edits over the longer length)."""
    longest = max(len(a), len(b))
    return 1.0 - edit_distance(a, b) / longest if longest else 1.0


_NEGATION = re.compile(
    r"\b(?:not|no|never|none|nothing|neither|nor|cannot)\b|n't\b|\b(?:nicht|kein|keine|pas|jamais)\b"
)
_CONTRAST = re.compile(r",\s*(?:but\s+|and\s+)?not\s+[\w-]+")
_NEGATING_PREFIXES = ("un", "non", "in", "im", "ir", "il", "dis")


def _negated(text: str) -> bool:
    """Whether ``text`` negates what it says (", not absorbed" contrasts, it does not negate)."""
    plain = text.casefold().replace("’", "'")
    return bool(_NEGATION.search(_CONTRAST.sub(" ", plain)))


def _unnegated(given: str, reference: str) -> str:
    """ "not reactive" as "unreactive" when that is the reference's word."""
    words = set(normalise(reference).split())

    def swap(match: re.Match[str]) -> str:
        for prefix in _NEGATING_PREFIXES:
            if prefix + match[1] in words:
                return prefix + match[1]
        return match[0]

    return re.sub(r"\bnot\s+(\w+)", swap, given, flags=re.IGNORECASE)


def _stems(text: str) -> set[str]:
    return {t for t in terms(text) if not t.isdigit()}


def _same_stem(a: str, b: str) -> bool:
    """ "limit" and "limiting", "encrypt" and "encryption"; not "chlorine" and "chloride"."""
    common = next(
        (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))
    )
    return a == b or (common >= 4 and common >= min(len(a), len(b)) - 1)


def _found(stems: set[str], among: set[str]) -> set[str]:
    """The ``stems`` that one of ``among`` shares."""
    return {s for s in stems if any(_same_stem(s, o) for o in among)}


def _initials(text: str) -> str:
    return "".join(w[0] for w in normalise(text).split() if w not in _STOP)


def _acronym_of(short: str, long: str) -> bool:
    """ "CPU" for "central processing unit" (and the other way round)."""
    letters = normalise(short).replace(" ", "")
    return 2 <= len(letters) <= 6 and letters.isalpha() and letters == _initials(long)


def new_words(question: str, given: str) -> str:
    """The words of ``given`` that the question does not have ("malignant" of "a malignant
    tumour" in "... a tumour that invades other tissues is called _____")."""
    asked = _stems(question.replace(BLANK, " "))
    return " ".join(
        w for w in normalise(given).split() if not (_stems(w) and _found(_stems(w), asked))
    )


def filled_in(question: str, answer: str) -> str:
    """The question with ``answer`` in its blank (after it, for a question without one)."""
    prompt = question.strip().removeprefix(FILL_IN).strip()
    if BLANK in prompt:
        return " ".join(prompt.replace(BLANK, answer, 1).split())
    return f"{prompt} {answer}".strip()


# ---------------------------------------------------------------------------- rules


def rule_verdict(reference: str, given: str, *, question: str = "") -> bool | None:
    """Right or wrong by the rules of the module docstring; None when they cannot tell."""
    given = _unnegated(given, reference)
    said, expected = read(given), read(reference)
    if not said.text:
        return False
    if said.text == expected.text or _acronym_of(given, reference) or _acronym_of(reference, given):
        return True
    if hedged(reference, given, question=question):
        return False
    asked = read(question).numbers if question else frozenset()
    wanted = expected.numbers | (expected.maybe & said.numbers)
    stated = (said.numbers | (said.maybe & wanted)) - (asked - wanted)
    if wanted and stated != wanted:
        return False
    if _negated(given) != _negated(reference):
        return False
    if wanted and all(_NUMERIC_TOKEN.fullmatch(w) for w in expected.text.split()):
        return True  # the number asked for, with or without its unit
    return None


#: what separates alternatives a student offers together ("meiosis or mitosis", "A and B")
_ALTERNATIVES = re.compile(r"\s*(?:,|/|;|\b(?:and|or|und|oder|et|ou|y|o)\b)\s*", re.IGNORECASE)
#: what a student adds to an answer without offering another one ("mitosis, I think"), or
#: says it is not
_FILLER = re.compile(
    r"^\s*(?:i (?:think|guess|believe|suppose)|maybe|probably|perhaps|(?:i'?m )?not sure|"
    r"right|yes|ok(?:ay)?|i hope|glaube ich|vielleicht|je crois|peut-être|creo)\W*$"
    # a contrast sets nothing beside the answer: "the cell wall, not the membrane"
    r"|^\s*(?:not|never|nicht|kein\w*|pas|non|no)\b",
    re.IGNORECASE,
)


def hedged(reference: str, given: str, *, question: str = "") -> bool:
    """Whether a short answer names the reference beside another candidate ("approach and
    require" for "approach", "mitosis or meiosis" for "mitosis"): a hedge, not the answer;
    a teacher marks it partly right. Only for short references (up to three words), whose
    own words are never the other candidate, and alternatives of up to three words each.
    Words of the question may be the other candidate ("require and approach" for the blank
    of "would _____ a scoped approach"), except the words right beside a blank, which only
    say where the answer goes ("require, a scoped approach")."""
    expected = read(reference).text
    if not expected or len(expected.split()) > 3:
        return False
    parts = [p for p in _ALTERNATIVES.split(given.strip()) if p.strip() and not _FILLER.match(p)]
    if len(parts) < 2 or any(len(p.split()) > 3 for p in parts):
        return False
    readings = [read(p).text for p in parts]
    named = [
        r == expected or _acronym_of(p, reference) for p, r in zip(parts, readings, strict=True)
    ]
    others = [r for r, hit in zip(readings, named, strict=True) if not hit]
    wanted = set(expected.split())
    numbers = read(reference).numbers
    # "seven regions, 7": both name the reference; "blue and red" for "red and blue": no hedge
    return (
        any(named)
        and bool(others)
        and all(
            r
            and not set(r.split()) <= wanted
            and not (numbers and read(r).numbers == numbers)
            and not _beside_blank(r, question)
            for r in others
        )
    )


def _beside_blank(said: str, question: str) -> bool:
    """Whether ``said`` (read) repeats the words right before or right after the question's
    blank: where the answer goes, not another answer."""
    if BLANK not in question or not said:
        return False
    before, _, after = question.partition(BLANK)
    words = said.split()
    return (
        read(before).text.split()[-len(words) :] == words
        or read(after).text.split()[: len(words)] == words
    )


# ---------------------------------------------------------------------------- signals

#: what a typed answer is described by (``signals``; the weights that combine them are fitted
#: by ``bench/fit_grading.py`` and shipped in ``grading_model.json``). "Wanted" words are the
#: reference's content words that the question lacks (all of them if it has them all).
SIGNALS: tuple[str, ...] = (
    "term_recall",  # share of the wanted stems in the answer ("limits" for "limiting")
    "all_terms",  # 1 when the answer has every wanted stem
    "fuzzy_recall",  # mean likeness of each wanted word to the answer's closest word
    "spelled_match",  # every wanted word is at most the fitted ``slip_rate`` edits per
    # letter from a word of the answer ("mitosys" for "mitosis", not "meiosis")
    "term_precision",  # share of the answer's stems that are the reference's
    "restates",  # share of the answer's stems that the question or source has, the reference not
    "spelling",  # likeness of the two texts (1 - edits / length)
    "reply_cosine",  # cosine of the answer and the reference
    "new_words_cosine",  # cosine of the answer's words the question lacks, and the reference
    "filled_gain",  # how much of the gap to the question filled with the reference the
    # answer closes, over the blank left empty (cosines of the filled-in question)
    "semantic_match",  # no wanted stem, but the new words' cosine reaches the fitted
    # ``match_cosine`` (the embedder says it means the reference: "a malignant tumour")
)
#: the signals of each fit: all (``embed_similarities`` given), without the question's
#: cosines (only the answer-to-reference cosine: older callers), without an embedder
MODEL_SIGNALS: dict[str, tuple[str, ...]] = {
    "context": SIGNALS,
    "reply": SIGNALS[:8],
    "lexical": SIGNALS[:7],
}


@dataclass(frozen=True)
class Similarities:
    """Cosines of the local embedding model for one answer (see ``similarity_texts``)."""

    reply: float  # the answer and the reference
    new_words: float | None = None  # the answer's words the question lacks, and the reference
    filled: float | None = None  # the question filled with the answer, and with the reference
    unfilled: float | None = None  # the question with its blank empty, and with the reference


def similarity_texts(reference: str, given: str, *, question: str) -> tuple[str, ...]:
    """The texts to embed for ``Similarities``: the answer, the reference, the answer's new
    words (``new_words``), the question filled with the answer, with the reference, and
    with nothing (the last four only with a question)."""
    if not question.strip():
        return (given, reference)
    return (
        given, reference, new_words(question, given), filled_in(question, given),
        filled_in(question, reference), filled_in(question, ""),
    )  # fmt: skip


def similarities_of(texts: Sequence[str], vectors: Vectors) -> Similarities:
    """``Similarities`` from ``similarity_texts`` and their (L2-normalised) vectors."""
    v = np.asarray(vectors, dtype=np.float64)
    reply = float(v[0] @ v[1])
    if len(texts) < 6:
        return Similarities(reply)
    new = float(v[2] @ v[1]) if texts[2].strip() else 0.0
    return Similarities(reply, new, float(v[3] @ v[4]), float(v[5] @ v[4]))


async def embed_similarities(
    embedder: Embedder, items: Sequence[tuple[str, str, str]]
) -> list[Similarities]:
    """``Similarities`` of each (reference, answer, question), in one call to ``embedder``."""
    texts = [similarity_texts(r, g, question=q) for r, g, q in items]
    if not texts:
        return []
    vectors = np.asarray(await embedder.embed_documents([t for group in texts for t in group]))
    out: list[Similarities] = []
    at = 0
    for group in texts:
        out.append(similarities_of(group, vectors[at : at + len(group)]))
        at += len(group)
    return out


def signals(
    reference: str,
    given: str,
    *,
    question: str = "",
    evidence: str = "",
    similarities: Similarities | None = None,
) -> dict[str, float]:
    """The ``SIGNALS`` of an answer but those the model makes with its cut-offs
    (``GradingModel.completed``), cosines as far as ``similarities`` has them."""
    said, expected = read(_unnegated(given, reference)), read(reference)
    asked = _stems(question.replace(BLANK, " "))
    reference_stems = _stems(expected.text)
    wanted = (reference_stems - _found(reference_stems, asked)) or reference_stems
    answer_stems = _stems(said.text)
    answer_words = said.text.split()
    targets = [w for w in expected.text.split() if _stems(w) & wanted]
    closest = [
        min((edit_distance(w, a) / len(w), -_likeness(w, a)) for a in answer_words)
        if answer_words else (1.0, 0.0)
        for w in targets
    ]  # fmt: skip
    found = _found(wanted, answer_stems)
    restated = _found(answer_stems, asked | _stems(evidence)) - _found(
        answer_stems, reference_stems
    )
    out = {
        "term_recall": len(found) / len(wanted) if wanted else 0.0,
        "all_terms": float(bool(wanted) and found == wanted),
        "fuzzy_recall": -sum(c[1] for c in closest) / len(closest) if closest else 0.0,
        # not a signal itself: the most edits per letter of a wanted word (``spelled_match``)
        "slip_rate": max((c[0] for c in closest), default=1.0),
        "term_precision": (
            len(_found(answer_stems, reference_stems)) / len(answer_stems) if answer_stems else 0.0
        ),
        "restates": len(restated) / len(answer_stems) if answer_stems else 0.0,
        "spelling": _likeness(said.text, expected.text),
    }  # fmt: skip
    if similarities is not None:
        out["reply_cosine"] = similarities.reply
        filled, unfilled = similarities.filled, similarities.unfilled
        if similarities.new_words is not None and filled is not None and unfilled is not None:
            out["new_words_cosine"] = similarities.new_words
            out["filled_gain"] = max(-1.0, (filled - unfilled) / max(1.0 - unfilled, 0.05))
    return out


# ---------------------------------------------------------------------------- the model


@dataclass(frozen=True)
class Logistic:
    """A fitted logistic model over named signals, and the probability that means right."""

    signals: tuple[str, ...]
    weights: tuple[float, ...]
    bias: float
    threshold: float = 0.5

    def probability(self, values: dict[str, float]) -> float:
        """The probability that an answer with these signal ``values`` is right."""
        pairs = zip(self.signals, self.weights, strict=True)
        logit = self.bias + sum(w * values[s] for s, w in pairs)
        return 1.0 / (1.0 + math.exp(-max(-50.0, min(50.0, logit))))


@dataclass(frozen=True)
class GradingModel:
    """The fits of ``MODEL_SIGNALS`` by name and the two fitted cut-offs: the edits per
    letter up to which a word is misspelt rather than another word (``spelled_match``), and
    the cosine from which the answer's new words mean the reference (``semantic_match``)."""

    fits: dict[str, Logistic]
    slip_rate: float
    match_cosine: float

    def completed(self, values: dict[str, float]) -> dict[str, float]:
        """``values`` with the signals made with the cut-offs (``semantic_match`` only when
        they have the cosine it needs)."""
        out = {**values, "spelled_match": float(values["slip_rate"] <= self.slip_rate)}
        if "new_words_cosine" in values:
            match = values["term_recall"] == 0 and values["new_words_cosine"] >= self.match_cosine
            out["semantic_match"] = float(match)
        return out

    def fit_for(self, values: dict[str, float]) -> Logistic:
        """The richest fit whose signals are all in ``values`` (``completed``)."""
        for name in ("context", "reply", "lexical"):
            fit = self.fits.get(name)
            if fit is not None and all(s in values for s in fit.signals):
                return fit
        raise ValueError("no fit of the grading model takes these signals")

    def is_right(self, values: dict[str, float], *, prefer: str = "context") -> bool:
        """The verdict on an answer's ``signals``: the ``prefer`` fit if they have its
        signals, else the richest fit they have."""
        values = self.completed(values)
        fit = self.fits.get(prefer)
        if fit is None or not all(s in values for s in fit.signals):
            fit = self.fit_for(values)
        return fit.probability(values) >= fit.threshold

    @classmethod
    def load(cls, path: Path) -> GradingModel:
        """Read a model written by ``bench/fit_grading.py``; its signals must be ours."""
        data = json.loads(path.read_text())
        fits: dict[str, Logistic] = {}
        for name, fit in data["fits"].items():
            if name not in MODEL_SIGNALS or tuple(fit["signals"]) != MODEL_SIGNALS[name]:
                raise ValueError(f"{path}: fit {name!r} has other signals than this checker's")
            fits[name] = Logistic(
                tuple(fit["signals"]), tuple(float(w) for w in fit["weights"]),
                float(fit["bias"]), float(fit["threshold"]),
            )  # fmt: skip
        return cls(fits, float(data["slip_rate"]), float(data["match_cosine"]))


MODEL_PATH = Path(__file__).with_name("grading_model.json")


@functools.cache
def grading_model() -> GradingModel:
    """The fitted model shipped with the package."""
    return GradingModel.load(MODEL_PATH)


def short_answer_is_right(
    accepted: Sequence[str],
    given: str,
    *,
    question: str = "",
    similarity: float | None = None,
    evidence: str = "",
    similarities: Similarities | None = None,
    model: GradingModel | None = None,
) -> bool:
    """A typed answer against the accepted ones: the rules, then the fitted model.

    ``similarities`` (``embed_similarities``) are those of the first accepted answer; an
    older caller may pass only ``similarity``, the cosine of the answer and that answer;
    without either the model judges by the words alone. ``evidence`` is the source sentence."""
    if similarities is None and similarity is not None:
        similarities = Similarities(similarity)
    model = model or grading_model()
    for index, reference in enumerate(accepted):
        verdict = rule_verdict(reference, given, question=question)
        if verdict is None:
            values = signals(
                reference, given, question=question, evidence=evidence,
                similarities=similarities if index == 0 else None,
            )  # fmt: skip
            verdict = model.is_right(values)
        if verdict:
            return True
    return False
