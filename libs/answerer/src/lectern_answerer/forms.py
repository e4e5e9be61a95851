"""What a question asks and how a sentence says things: the form an answer should take
(list, number, comparison, definition), what a definition question defines, and the
patterns that tell a sentence defines, names, counts, states a number or gives a cause."""

from __future__ import annotations

import re
from collections.abc import Container, Sequence
from typing import Literal

from lectern_common.text import terms

QuestionForm = Literal["list", "number", "comparison", "definition", "general"]

_NUMBER = re.compile(
    r"\d|%|\b(?:one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|twenty|"
    r"thirty|forty|fifty|hundred|thousand|million|billion|half|third|quarter|once|twice|"
    r"ein|zwei|drei|vier|fünf|sechs|sieben|acht|neun|zehn)\b",
    re.IGNORECASE,
)

#: numbers that only label things ("Table 1", "Fig. 2", "Vol. 113") or footnote markers
_LABEL_NUMBER = re.compile(
    r"\b(?:table|tab|fig|figure|vol|volume|chapter|section|eq|equation|page|p|pp|no|abb|"
    r"kapitel|abschnitt|tabelle)\.?\s*\d+(?:\.\d+)*|(?<=[^\W\d_])[.,;]?\d{1,3}(?:[,–-]\d{1,3})*(?=\s|$)",
    re.IGNORECASE,
)

#: "X is / are / means / is called / heißt / ist ...": a sentence that defines what it names
_COPULA = re.compile(
    r"\b(?:is|are|was|were|means|refers to|denotes|is called|are called|says that|states that|"
    r"heißt|hei(?:ß|ss)en|ist|sind|bezeichnet|nennt man|besagt)\b",
    re.IGNORECASE,
)

#: a definition by condition: "X heißt kompakt, wenn ...", "f heißt stetig :⇔ ...", "a space is
#: called compact if ..."; group 1 holds the word(s) being defined
_DEFINES = re.compile(
    r"\b(?:hei(?:ß|ss)t|hei(?:ß|ss)en|(?:is|are) called|(?:is|are) said to be)\s+"
    r"((?:\S+\s+){0,2}?[^\s,:]+)\s*,?\s*(?:\bwenn\b|\bfalls\b|\bif\b|\bwhen\b|:?⇔)",
    re.IGNORECASE,
)

#: a possessive name that may open a definition: "Newton's first law says that ..."
_POSSESSIVE = re.compile(r"^[A-Z][\w-]*(?:'s|’s|s'|s’)$")

#: "... is the starting position of the car": a sentence that names what it says by the
#: question's subject, after its copula
_NAMES = re.compile(r"\b(?:is|are|was|were)\s+(?:the|an?)\s+", re.IGNORECASE)


def names(text: str, subject: Sequence[str]) -> bool:
    """Whether ``text`` says what something is by naming it with the head of ``subject`` (its
    first two terms) right after a copula: "s(0) = -4 is the starting position of the car"
    for "the starting position of the car backing out of the driveway"."""
    head = list(subject[:2])
    if len(head) < 2:
        return False
    return any(terms(text[m.end() :])[:2] == head for m in _NAMES.finditer(text))


#: a phrase that says what a term means, after the term: "Duck is the common name for",
#: "tr(A) is defined to be", "refers to", "denotes", "stands for", "bezeichnet"
_DEFINING = re.compile(
    r"\b(?:is|are)\s+(?:the|an?)\s+(?:[^\W\d_]+\s+){0,2}?(?:name|term|word)\s+(?:for|given to|"
    r"used for)\b|\brefers?\s+to\b|\b(?:is|are)\s+defined\s+(?:as|to\s+be|by)\b|\bdenotes?\b|"
    r"\bstands?\s+for\b|\b(?:is|are)\s+short\s+for\b|\bbezeichnet\b|\bversteht\s+man\b",
    re.IGNORECASE,
)
#: a phrase that gives something its name, before the name: "We call such a sequence of
#: instructions a trace", "is called a", "known as", "nennt man"
_NAMING = re.compile(
    r"\b(?:we|one)\s+calls?\b|\b(?:is|are|be)\s+(?:called|termed|known\s+as|referred\s+to\s+as)\b|"
    r"\bnennt\s+man\b|\bhei(?:ß|ss)(?:t|en)\b",
    re.IGNORECASE,
)


def defining_frame(text: str, subject: Sequence[str]) -> bool:
    """Whether ``text`` says what its subject (a definition question's terms) means in a
    defining phrase: the subject before "is the name for", "refers to", "is defined to be"
    ..., or its last term within eight words after "we call", "is called", "known as" ...
    ("We call such a sequence of instructions a trace")."""
    if not subject:
        return False
    head, last = set(subject[:2]), subject[-1]
    for match in _DEFINING.finditer(text):
        if head <= set(terms(text[: match.start()])):
            return True
    for match in _NAMING.finditer(text):
        if last in terms(" ".join(text[match.end() :].split()[:8])):
            return True
    return False


def defines(text: str, subject: Sequence[str]) -> bool:
    """Whether ``text`` defines by condition the last word of ``subject`` (its terms)."""
    if not subject:
        return False
    match = _DEFINES.search(text)
    return match is not None and subject[-1] in terms(match.group(1))


_CAPTION = re.compile(
    r"^\s*(?:table|tab\.|figure|fig\.|chart|exhibit|plate|abbildung|abb\.|tabelle)\s*"
    r"[\dIVX]+[\d.\-]*\b(?![^.]*\b(?:is|are|shows?|zeigt)\b)",
    re.IGNORECASE,
)
_FOOTNOTE_END = re.compile(
    r"(?:(?<=[^\W\d_][.!?])|(?<=[)\]\"'][.!?]))\d{1,3}(?:[,–-]\d{1,3})*$"
)  # "growth.31", not "Header 0.2"

#: names with digits in them: "T16", "CFOL041", "3draytrace", "3d-cube" (not "25x", "20mg")
_IDENTIFIER = re.compile(r"\b[^\W\d_]+\d\w*|\b\d+[^\W\d_]{4,}\w*|\b\d+[^\W\d_]+-[^\W\d_][\w-]*")


def states_number(text: str) -> bool:
    """Whether ``text`` states a quantity (not just "Table 1", a footnote marker or a name
    with a digit in it)."""
    return bool(_NUMBER.search(_IDENTIFIER.sub(" ", _LABEL_NUMBER.sub(" ", text))))


def is_caption(text: str) -> bool:
    """Whether ``text`` opens as a table's or a figure's caption ("Table 1 Clinical ...")."""
    return bool(_CAPTION.match(text))


def without_footnote_mark(sentence: str) -> str:
    """``sentence`` without the footnote number stuck to its final stop ("growth.31")."""
    return _FOOTNOTE_END.sub("", sentence)


def has_copula(text: str) -> bool:
    """Whether ``text`` holds a copula ("is", "are", "means", "heißt" ...)."""
    return bool(_COPULA.search(text))


def is_possessive(word: str) -> bool:
    """Whether ``word`` is a capitalised possessive ("Newton's")."""
    return bool(_POSSESSIVE.search(word))


_COMPARISON = re.compile(
    r"\b(?:differ\w*|difference\w*|different|compare\w*|comparison|contrast\w*|versus|vs\.?|"
    r"distinguish\w*|unterschied\w*|unterscheid\w*|vergleich\w*)\b",
    re.IGNORECASE,
)
_NUMBER_QUESTION = re.compile(
    r"^\s*(?:how (?:many|much|long|old|often|far|big|large|high|common|likely|fast|"
    r"frequent(?:ly)?|soon)|(?:what|which) (?:percentage|percent|proportion|share|fraction|"
    r"number|amount|year|age|rate|risk|size|prevalence|incidence|speedup|cost|date|"
    r"deadline)|when\b|in what year|at what age|by how much|wie (?:viele?|lange|oft|alt|"
    r"groß|hoch)|wann(?! hei(?:ß|ss)t))|\b(?:what|which) is the (?:risk|rate|prevalence|incidence|"
    r"percentage|proportion|number|speedup|cost|amount|age|frequency|threshold|limit)\b",
    re.IGNORECASE,
)
_LIST_NOUNS = (
    r"stages|steps|phases|types|kinds|sorts|features|symptoms|causes|signs|components|parts|"
    r"factors|examples|advantages|disadvantages|benefits|risks|problems|complications|"
    r"methods|ways|reasons|categories|classes|properties|characteristics|elements|"
    r"requirements|conditions|rules|criteria|options|tools|functions|roles|areas|issues|"
    r"effects|principles|ingredients|members|events|arten|schritte|eigenschaften|beispiele"
)
_LIST_QUESTION = re.compile(
    rf"^\s*(?:list|name|enumerate|give)\b|\b(?:{_LIST_NOUNS})\b|^\s*(?:what|which) "
    r"(?:are|were)\b|^\s*(?:what|which) (?:[^\W\d_]+ )?[^\W\d_]{3,}s (?:do|does|did|are|were|"
    r"can|could|should|must|will|would|have|has)\b",
    re.IGNORECASE,
)
_DEFINITION = re.compile(
    r"^\s*(?:what(?: i|')s (?:a |an |the )?(?P<a>[^?]{1,60}?)\??$|define (?P<b>[^?]+)|"
    r"what does (?P<c>[^?]+?) mean|what is meant by (?P<d>[^?]+)|was (?:ist|sind|bedeutet)"
    r" (?:ein |eine |der |die |das )?(?P<e>[^?]+)|wann hei(?:ß|ss)t (?:ein |eine |der |die |das )?"
    r"(?P<f>[^?]+)|was versteht man unter (?P<g>[^?]+)|what counts as (?:a |an )?(?P<h>[^?]+))"
    r"\s*\??\s*$",
    re.IGNORECASE,
)


def question_form(question: str) -> QuestionForm:
    """The form an answer to ``question`` should take."""
    if _COMPARISON.search(question):
        return "comparison"
    if _NUMBER_QUESTION.search(question):
        return "number"
    if _LIST_QUESTION.search(question):
        return "list"
    if _DEFINITION.match(question):
        return "definition"
    return "general"


def definiendum(question: str) -> str | None:
    """What a definition question asks about ("a trace tree" in "What is a trace tree?")."""
    match = _DEFINITION.match(question)
    if match is None:
        return None
    return next((g for g in match.groups() if g), None)


_WHY_HOW = re.compile(
    r"^\s*(?:why\b|how\s+(?:do|does|did|is|are|was|were|can|could|should|would|must|to)\b|"
    r"what\s+(?:causes|makes|happens|is the (?:reason|purpose|role|effect)))|"
    r"\b(?:why|warum|wieso|weshalb)\b",
    re.IGNORECASE,
)
_EXPLAINS = re.compile(
    r"\b(?:because|since|so that|in order to|so as to|due to|owing to|therefore|thus|hence|"
    r"as a result|results? in|leads? to|causes?|caused by|allows?|enables?|lets|means that|"
    r"by (?:\w+ing)|which (?:makes|gives|means)|the reason|the purpose|in order|weil|da\b|"
    r"damit|deshalb|daher|sodass)\b",
    re.IGNORECASE,
)


def asks_why_or_how(question: str) -> bool:
    """Whether ``question`` asks for a cause, a purpose or a means (why, how does ...)."""
    return bool(_WHY_HOW.search(question))


def gives_cause(text: str) -> bool:
    """Whether ``text`` gives a cause, a purpose or a means ("because", "so that", "by ...ing")."""
    return bool(_EXPLAINS.search(text))


_COUNT_WORD = re.compile(
    r"\b(?:two|three|four|five|six|seven|eight|nine|ten|zwei|drei|vier|fünf|sechs|sieben|"
    r"acht|neun|zehn|[2-9]|1\d)\s+((?:[^\W\d_][\w-]*\s+){0,2}[^\W\d_][\w-]*)",
    re.IGNORECASE,
)


def counts_asked(text: str, asked: Container[str]) -> bool:
    """Whether ``text`` counts a thing the question asks for ("two advantages", "four main
    stages"): it announces the list that answers."""
    return any(
        any(t in asked for t in terms(match.group(1))) for match in _COUNT_WORD.finditer(text)
    )


_NAME = re.compile(r"(?<=\w\s)[A-Z][\w.-]*|\b[A-Za-z]*[A-Z][a-z]*[A-Z0-9][\w-]*")


def question_names(question: str) -> list[str]:
    """The names ``question`` gives: capitalised words not at its start, and words with
    capitals inside ("SMTP", "iPhone", "Dinah")."""
    return _NAME.findall(question)
