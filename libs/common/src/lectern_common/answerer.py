"""The offline extractive answerer: answers a question from its sources alone, no model.

Every sentence, list item and table row of the sources is a unit. Each unit is described by
a few signals (``SIGNALS``: term overlap by BM25, cosine similarity to the question with the
local embedding model, the rank and re-ranker score of its chunk, whether it states a
number for a number question, defines the subject of a definition question, gives a cause
for a why/how question, is a table row naming what is asked, follows a matching heading,
the similarity of its neighbours ...), and a logistic model fitted on the development
split's labelled sentences (``answerer_model.json``, ``bench/fit_answerer.py``) combines
them into the probability that the unit states the answer. The answer is the best units
within a share of the best one (near-repeats dropped; another source is cited only when it
nearly ties and adds a term of the question the answer lacks), grouped by source in reading
order; the best sentence brings the next one of its paragraph (an answer is a passage), a
sentence goes on with the next when that one refers back to it, and a sentence a line break
cut is completed. A second fitted model decides whether the sources answer the question at
all (``QUESTION_SIGNALS``: how well the best unit answers, how close anything comes, the
question's terms and names no source holds, the re-ranker's best score), under a floor: no
best unit further in meaning from the question than any answerable development question's
was. When they do not answer, the answer says so plainly. Deterministic, so everything runs
and is testable offline.
"""

from __future__ import annotations

import asyncio
import functools
import json
import math
import re
from collections import Counter, OrderedDict
from collections.abc import Callable, Container, Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

import numpy as np

from lectern_common.bm25 import idf_weights
from lectern_common.text import (
    PREFIX_LETTERS,
    STOPWORDS,
    ends_clause,
    prefix_stem,
    prefix_stems,
    resolve_follow_up,
    split_units,
    stem,
    terms,
    words,
)

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from lectern_common.embeddings import Embedder
    from lectern_common.generation import (
        GenerationRequest,
        GenerationStream,
        SourceText,
    )

QuestionForm = Literal["list", "number", "comparison", "definition", "general"]

_NUMBER = re.compile(
    r"\d|%|\b(?:one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|twenty|"
    r"thirty|forty|fifty|hundred|thousand|million|billion|half|third|quarter|once|twice|"
    r"ein|zwei|drei|vier|fünf|sechs|sieben|acht|neun|zehn)\b",
    re.IGNORECASE,
)
_PIECE = re.compile(r"\S+\s*")
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


#: "... is the starting position of the car": a sentence that names what it says by the
#: question's subject, after its copula
_POSSESSIVE = re.compile(r"^[A-Z][\w-]*(?:'s|’s|s'|s’)$")

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


NO_SUPPORT_TEXT = "I could not find anything in the provided material that answers this question."

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


@dataclass(frozen=True)
class SourceUnit:
    """A sentence or list item of a source, with where it is."""

    source_index: int
    position: int
    paragraph: int
    text: str
    item: bool
    introduces_list: bool
    depth: int = 0  # 1 for an item, 2 for an item of an item (another bullet), ...
    context: str = ""  # a table row's caption and header


def source_units(sources: Sequence[SourceText]) -> list[SourceUnit]:
    """Every unit worth quoting: sentences of 3+ words, and list items of any length."""
    out: list[SourceUnit] = []
    for source_index, source in enumerate(sources):
        units = split_units(source.text)
        markers: list[str] = []  # the bullets of the list under way, outermost first
        for position, (paragraph, text, marker, context) in enumerate(units):
            if not marker:
                markers = []
            elif marker in markers:
                del markers[markers.index(marker) + 1 :]
            else:
                markers.append(marker)
            if not marker and len(text.split()) < 3:
                continue
            following = units[position + 1] if position + 1 < len(units) else None
            introduces = text.rstrip().endswith(":") or (
                not marker and following is not None and bool(following[2])
            )
            out.append(
                SourceUnit(
                    source_index,
                    position,
                    paragraph,
                    text,
                    bool(marker),
                    introduces,
                    len(markers),
                    context,
                )
            )
    return out


def candidate_sentences(sources: Sequence[SourceText]) -> list[tuple[int, int, str]]:
    """(source index, position, text) of every unit worth quoting."""
    return [(u.source_index, u.position, u.text) for u in source_units(sources)]


@dataclass(frozen=True)
class ScoredSentence:
    """A unit of a source, with its position there and its scores."""

    label: str
    source_index: int
    position: int
    text: str
    lexical: float
    semantic: float | None
    score: float
    item: bool = False
    #: for a definition question: the unit states what the subject is ("X is ...", "X says
    #: that ...", "X is called ... if ...")
    defines: bool = False


@dataclass(frozen=True)
class ExtractiveAnswer:
    """The units chosen to answer, in reading order; empty when nothing supports one."""

    sentences: list[ScoredSentence]
    form: QuestionForm = "general"

    @property
    def supported(self) -> bool:
        """Whether any unit was found."""
        return bool(self.sentences)

    @property
    def cited(self) -> list[str]:
        """Distinct labels cited, in order."""
        return list(dict.fromkeys(s.label for s in self.sentences))

    def render(self) -> str:
        """The answer text: sentences each followed by its citation, list items as a list."""
        if not self.sentences:
            return NO_SUPPORT_TEXT
        out: list[str] = []
        for s, following in zip(self.sentences, [*self.sentences[1:], None], strict=True):
            text = s.text
            if following is not None and following.item and not s.item:
                # "you should be able to . . ." before its items
                text = _TRAILING_ELLIPSIS.sub(":", text)
            cited = _cite(text, s.label)
            if s.item:
                out.append(f"\n- {cited}")
            else:
                out.append(("\n" if out and out[-1].startswith("\n- ") else " ") + cited)
        return "".join(out).strip()


_TRAILING_ELLIPSIS = re.compile(r"\s*(?:\.\s*){3}$|\s*…$")


def _cite(sentence: str, label: str) -> str:
    """The sentence with its citation before its final stop (one is added where it has none,
    so that the next sentence is a sentence of its own; an introduction keeps its colon)."""
    sentence = _FOOTNOTE_END.sub("", sentence.rstrip())
    if sentence[-1:] in ".!?":
        return f"{sentence[:-1]} [{label}]{sentence[-1]}"
    if sentence[-1:] == ":":
        return f"{sentence[:-1]} [{label}]:"
    return f"{sentence} [{label}]."


def _jaccard(a: set[str], b: set[str]) -> float:
    return len(a & b) / len(a | b) if a and b else 0.0


def speaks_of_question(query: Sequence[str], bags: Sequence[Iterable[str]]) -> bool:
    """Whether some unit (its terms, ``bags``) holds two of the question's terms, in any form
    (same first five letters), when the question has three or more.

    "What is the offside rule in football?" against a book that only shouts "Offside!" in a
    hockey match, or "What causes the seasons on Earth?" against a sentence on favourable
    seasons, hold one term a unit: the sources speak of something else that bears the word.
    Every answerable question of both splits of bench/answers has a unit holding two of its
    terms or more; three off-topic development questions have none (two of them the fitted
    refusal alone let through), so it is asked before the refusal model is."""
    asked = {prefix_stem(t) for t in query}
    if len(asked) < 3:
        return True  # one term of two may be all a paraphrase keeps
    return any(len(asked & {prefix_stem(t) for t in bag}) >= 2 for bag in bags)


#: the answerer's mechanisms beyond scoring, each serving a class of questions; any can be
#: switched off (``without``) to measure it by ablation (``bench/replay_answers.py``). The
#: per-form rules of earlier versions (a list answer, both sides of a comparison, a number
#: first, a list brought by its introduction, enumerations and nested items) were measured
#: so on the test split and removed: none helped there (docs/benchmarks.md)
MECHANISMS = frozenset(
    {
        "off_topic",  # the fitted refusal: the sources do not answer the question at all
        "speaks",  # ... asked only when a sentence holds two of the question's terms
        "row_context",  # the reader reads a table row after its caption and header
        "followed_on",  # a best sentence brings the next one when it goes on about it
        "passage",  # the best sentence brings the next one of its paragraph
        "completed",  # a sentence a line break cut goes on; a list's introduction brings it
        "answer_first",  # the source holding the reader's best answer span opens the answer
    }
)

#: what a unit is scored by, each a number per unit (see ``unit_signals``); the logistic
#: model that combines them is fitted on the development split's labelled sentences
#: (``bench/fit_answerer.py``, cross-validated by document) and shipped as
#: ``answerer_model.json``, so that a new kind of document moves weights, not code
SIGNALS: tuple[str, ...] = (
    "lexical",  # BM25 share of the question's terms in the unit
    "semantic",  # cosine to the question (the lexical share without an embedder)
    "lexical_x_semantic",
    "log_match",  # log of the mean of the two: scores multiply, as odds do
    "rank",  # log(1 + the rank of the unit's chunk from the re-ranker)
    "source_score",  # the re-ranker's score of the unit's chunk, over the best one's
    "rank_x_full_match",  # the rank, for a unit holding nearly all the question's terms
    "under_heading",  # the lexical share of a heading or caption right before the unit
    "section_match",  # the share of the question's terms in the chunk's section path
    "previous_semantic",  # the cosine of the unit before it in its chunk (0 for the first)
    "next_semantic",  # ... and of the unit after it
    "repeats_question",  # says fewer than two terms the question did not
    "caption_or_short",  # "Table 1 Clinical features ..." or a few words
    "number_stated",  # a number question, and the unit states a quantity
    "number_missing",  # a number question, and it states none
    "defines",  # a definition question, and the unit defines its subject by condition
    "names",  # ... and the unit names it after "is the", "is a"
    "opens_with_subject",  # ... and the unit opens with the subject and a copula
    "copula_near",  # ... and a copula in the unit's first twelve words
    "defining_frame",  # ... and the unit names its subject in a defining frame: "Duck is the
    # common name for ...", "X refers to", "is defined to be", "we call such a sequence a trace"
    "list_unit",  # a list question, and the unit is an item or introduces a list
    "counts_asked",  # a list question, and the unit counts what is asked ("two advantages")
    "asks",  # the unit is a question itself
    "introduction",  # ends with a colon, for a question that is no list
    "table_row",  # a row of a table, as "header: cell; ..."
    "row_match",  # the lexical share, for a table row (names the row and the column)
    "row_label",  # the share of the question's terms in a row's first cell (its label)
    "table_context",  # ... in the caption and header of the row's table
    "explains",  # a why/how question, and the unit gives a cause, purpose or means
    "first_of_source",  # the first unit of its chunk
    "length",  # words / 40, at most 1
    "reader",  # the reader's logit of (question, unit): does it answer, read together
    "answer_span",  # the unit holds the answer span the re-ranker's reader marked in its source
    "answer_margin",  # ... and by how much that span beat "no answer here" (0 for the others)
)
_AT = {name: i for i, name in enumerate(SIGNALS)}
#: reader logits beyond this say no more (and would dominate a linear model)
READER_CLIP = 12.0

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


@dataclass(frozen=True)
class _Asked:
    """What a question asks, in the forms the unit signals compare units with."""

    form: QuestionForm
    query: list[str]
    terms: set[str]
    prefixes: set[str]  # the first five letters of its terms of five letters or more
    stems: set[str]  # the first five letters of every term
    subject_order: list[str]  # a definition question's subject, in order
    subject: set[str]
    head: set[str]  # what a sentence defining the subject must name
    why_how: bool

    @classmethod
    def of(cls, question: str, form: QuestionForm) -> _Asked:
        query = list(dict.fromkeys(terms(question)))
        subject_order = terms(definiendum(question) or "") if form == "definition" else []
        subject = set(subject_order)
        # "the first law of motion": what a sentence defining it must name is its head
        # ("Newton's first law says that ..."); what follows "of" may be left to the context
        of = re.split(r"\s+(?:of|in|for|des|der|von)\s+", definiendum(question) or "")[0]
        head = set(terms(of))
        return cls(
            form=form,
            query=query,
            terms=set(query),
            prefixes={prefix_stem(t) for t in query if len(t) >= PREFIX_LETTERS},
            stems={prefix_stem(t) for t in query},
            subject_order=subject_order,
            subject=subject,
            head=head & subject or subject,
            why_how=bool(_WHY_HOW.search(question)) and form not in ("number", "list"),
        )


def _lexical_scores(
    query: Sequence[str], bags: Sequence[Counter[str]], k1: float, b: float
) -> list[float]:
    """Each bag's BM25 score of ``query`` over the bags, as a share of the best possible."""
    lengths = [sum(bag.values()) for bag in bags]
    average = (sum(lengths) / len(lengths)) or 1.0
    idf = idf_weights(query, bags)
    ceiling = sum(idf.values()) or 1.0
    out = []
    for bag, length in zip(bags, lengths, strict=True):
        norm = k1 * (1 - b + b * max(length, 3) / average)
        bm25 = sum(idf[t] * bag[t] * (k1 + 1) / (bag[t] + norm) for t in query if bag.get(t))
        out.append(min(1.0, bm25 / ceiling))
    return out


def _form_signals(
    row: NDArray[np.float64], asked: _Asked, unit: SourceUnit, bag: Counter[str]
) -> None:
    """The signals of the question's form: a number stated, a definition's subject, a list."""
    text = unit.text.rstrip()
    words = text.split()
    if asked.form == "number":
        stated = states_number(text)
        row[_AT["number_stated"]] = float(stated)
        row[_AT["number_missing"]] = float(not stated)
    elif asked.form == "definition" and asked.subject:
        row[_AT["defines"]] = float(defines(text, asked.subject_order))
        row[_AT["names"]] = float(names(text, asked.subject_order))
        head = asked.head
        if head <= set(bag):
            # a possessive name may come first: "Newton's first law says that ..."
            start = 1 if words and _POSSESSIVE.search(words[0]) else 0
            opening = " ".join(words[start : start + len(head) + 4])
            first = terms(opening)[:1]
            row[_AT["opens_with_subject"]] = float(
                bool(first)
                and first[0] in head
                and head <= set(terms(opening))
                and bool(_COPULA.search(opening))
            )
        row[_AT["copula_near"]] = float(bool(_COPULA.search(" ".join(words[:12]))))
        row[_AT["defining_frame"]] = float(defining_frame(text, asked.subject_order))
    elif asked.form == "list":
        row[_AT["list_unit"]] = float(unit.item or unit.introduces_list)
        row[_AT["counts_asked"]] = float(_counts_asked(text, asked.terms))


def _shape_signals(
    row: NDArray[np.float64], asked: _Asked, unit: SourceUnit, bag: Counter[str], lexical: float
) -> None:
    """The signals of the unit's own shape: a caption, a question, a table row, its length."""
    text = unit.text.rstrip()
    words = text.split()
    new_terms = {t for t in bag if t not in asked.terms and prefix_stem(t) not in asked.prefixes}
    row[_AT["repeats_question"]] = float(
        len(new_terms) < 2 and not unit.item and not unit.introduces_list
    )
    row[_AT["caption_or_short"]] = float(
        bool(_CAPTION.match(text)) or (len(words) < 6 and not unit.item)
    )
    row[_AT["asks"]] = float(text.endswith("?"))
    row[_AT["introduction"]] = float(asked.form != "list" and text.endswith(":"))
    is_row = _is_table_row(text)
    row[_AT["table_row"]] = float(is_row)
    row[_AT["row_match"]] = lexical if is_row else 0.0
    stems = asked.stems
    if is_row and stems:
        label = text.split("; ", 1)[0].rsplit(": ", 1)[-1]
        row[_AT["row_label"]] = len(stems & prefix_stems(label)) / len(stems)
    if unit.context and stems:
        row[_AT["table_context"]] = len(stems & prefix_stems(unit.context)) / len(stems)
    row[_AT["explains"]] = float(asked.why_how and bool(_EXPLAINS.search(text)))
    row[_AT["first_of_source"]] = float(unit.position == 0)
    row[_AT["length"]] = min(1.0, len(words) / 40)


def unit_signals(
    question: str,
    form: QuestionForm,
    units: Sequence[SourceUnit],
    bags: Sequence[Counter[str]],
    similarities: Sequence[float] | None,
    *,
    sources: Sequence[SourceText] = (),
    readings: Sequence[float] | None = None,
    k1: float = 1.2,
    b: float = 0.75,
    full_match: float = 0.75,
) -> NDArray[np.float64]:
    """The ``SIGNALS`` of every unit, one row per unit (in ``units`` order); ``sources``
    (their re-ranker scores) and ``readings`` (the reader's logits) when known."""
    asked = _Asked.of(question, form)
    out = np.zeros((len(units), len(SIGNALS)), dtype=np.float64)
    if not units:
        return out
    rerank = [s.score for s in sources]
    top_score = max((r for r in rerank if r is not None), default=None)
    lexicals = _lexical_scores(asked.query, bags, k1, b)
    semantics = [
        lexicals[i] if similarities is None else max(0.0, float(similarities[i]))
        for i in range(len(units))
    ]
    sections = [
        len(asked.stems & prefix_stems(s.section or "")) / (len(asked.stems) or 1) for s in sources
    ] + [0.0] * max(0, 1 + max(u.source_index for u in units) - len(sources))
    for index, (unit, bag) in enumerate(zip(units, bags, strict=True)):
        row = out[index]
        lexical, semantic = lexicals[index], semantics[index]
        rank = math.log1p(unit.source_index)
        heading = units[index - 1] if index else None
        row[_AT["lexical"]] = lexical
        row[_AT["semantic"]] = semantic
        row[_AT["lexical_x_semantic"]] = lexical * semantic
        row[_AT["log_match"]] = math.log(0.5 * (lexical + semantic) + 0.01)
        row[_AT["rank"]] = rank
        source_score = rerank[unit.source_index] if unit.source_index < len(rerank) else None
        row[_AT["source_score"]] = (
            1.0 if source_score is None or not top_score else source_score / top_score
        )
        row[_AT["rank_x_full_match"]] = rank if lexical >= full_match else 0.0
        if (
            heading is not None
            and heading.source_index == unit.source_index
            and _is_heading(heading)
        ):
            row[_AT["under_heading"]] = lexicals[index - 1]
        row[_AT["section_match"]] = sections[unit.source_index]
        for name, other in (("previous_semantic", index - 1), ("next_semantic", index + 1)):
            if 0 <= other < len(units) and units[other].source_index == unit.source_index:
                row[_AT[name]] = semantics[other]
        _form_signals(row, asked, unit, bag)
        _shape_signals(row, asked, unit, bag, lexical)
        if readings is not None:
            row[_AT["reader"]] = min(max(float(readings[index]), -READER_CLIP), READER_CLIP)
    for index, margin in answer_holders(sources, units).items():
        out[index, _AT["answer_span"]] = 1.0
        out[index, _AT["answer_margin"]] = min(max(margin, -READER_CLIP), READER_CLIP)
    return out


def _loose(text: str) -> str:
    return " ".join(text.split()).casefold()


def answer_holders(sources: Sequence[SourceText], units: Sequence[SourceUnit]) -> dict[int, float]:
    """The unit (index into ``units``) that holds each source's answer span (``answer``, the
    re-ranker's reader's), with the span's margin: of the units whose text holds the span's
    words, the last that opens at or before the span in the source's text (units are in text
    order, a table row rendered as its cells); the first that holds the span when none can be
    placed. A span longer than a unit falls to the unit it starts in."""
    out: dict[int, float] = {}
    for source_index, source in enumerate(sources):
        answer = source.answer
        if answer is None:
            continue
        span = _loose(source.text[answer.start : answer.end])
        if not span:
            continue
        mine = [i for i, u in enumerate(units) if u.source_index == source_index]
        holding = [i for i in mine if span in _loose(units[i].text)]
        if not holding:  # a span across units: the unit it starts in holds its first words
            head = " ".join(span.split()[:3])
            holding = [i for i in mine if head and _loose(units[i].text).endswith(head)] or [
                i for i in mine if head in _loose(units[i].text)
            ]
        if not holding:
            continue
        chosen = holding[0]
        if len(holding) > 1:  # the same words twice: the unit whose text opens before the span
            cursor, opened = 0, {}
            lowered = source.text.casefold()
            for i in mine:
                first = " ".join(units[i].text.split()[:4]).casefold()
                at = lowered.find(first, cursor) if first else -1
                if at >= 0:
                    opened[i], cursor = at, at + 1
            before = [i for i in holding if opened.get(i, answer.start + 1) <= answer.start]
            chosen = before[-1] if before else holding[0]
        out[chosen] = answer.margin
    return out


#: what the decision to answer at all is made on, one number per question (see
#: ``question_signals``): how well the best unit answers, how close in meaning and in terms
#: anything comes, whether any sentence holds two of the question's terms, and how the
#: re-ranker scored the best source
QUESTION_SIGNALS = (
    "best_probability",
    "best_semantic",
    "best_lexical",
    "speaks",
    "rerank_top",
    "rerank_missing",
    "missing_terms",  # the share of the question's terms no source holds in any form
    "missing_name",  # a name the question gives ("SMTP", "Dinah") is in no source
    "missing_longest",  # the length of the longest such term (/12, at most 1): "many" or
    # "kind" a paraphrase drops, "regularization" or "amniocentesis" the material lacks
    "missing_rare",  # how rare in common use the rarest word of the question no source
    # holds is: "kind" or "happen" a paraphrase brings, "SMOTE" or "Herfindahl" a question
    # about something the material does not cover
    "best_reader",  # the reader's best logit over the units: does any of them answer
    "best_margin",  # the best answer span's margin over "no answer here" among the sources
    # the re-ranker's reader read (SQuAD 2.0's null-score difference); -READER_CLIP for none
)
_QUESTION_AT = {name: i for i, name in enumerate(QUESTION_SIGNALS)}
_NAME = re.compile(r"(?<=\w\s)[A-Z][\w.-]*|\b[A-Za-z]*[A-Z][a-z]*[A-Z0-9][\w-]*")


def question_signals(
    question: str,
    query: Sequence[str],
    bags: Sequence[Counter[str]],
    signals: NDArray[np.float64],
    probabilities: NDArray[np.float64],
    sources: Sequence[SourceText],
) -> NDArray[np.float64]:
    """The ``QUESTION_SIGNALS`` of one question over its sources' units."""
    scores = [s.score for s in sources if s.score is not None]
    held = {prefix_stem(t) for bag in bags for t in bag}
    asked = {prefix_stem(t) for t in query}
    missing = len(asked - held) / len(asked) if asked else 0.0
    longest = max((len(t) for t in query if prefix_stem(t) not in held), default=0)
    text = " ".join(s.text for s in sources).casefold()
    return np.asarray(
        [
            float(probabilities.max()) if len(probabilities) else 0.0,
            float(signals[:, _AT["semantic"]].max()) if len(signals) else 0.0,
            float(signals[:, _AT["lexical"]].max()) if len(signals) else 0.0,
            float(speaks_of_question(query, bags)),
            max(scores) if scores else 0.0,
            float(not scores),
            missing,
            float(any(n.casefold().rstrip(".") not in text for n in _NAME.findall(question))),
            min(1.0, longest / 12),
            missing_rarity(question, held),
            float(signals[:, _AT["reader"]].max()) if len(signals) else 0.0,
            best_margin(sources),
        ],
        dtype=np.float64,
    )


def best_margin(sources: Sequence[SourceText]) -> float:
    """The best margin of the sources' answer spans over their null scores, clipped to
    ``READER_CLIP`` (its negative when no source has a span)."""
    margins = [s.answer.margin for s in sources if s.answer is not None]
    return min(max(max(margins, default=-READER_CLIP), -READER_CLIP), READER_CLIP)


#: the languages whose word frequencies say how common a word is (the most common of them
#: counts, so that a word is rare only when it is rare in all of them)
_COMMON_IN = ("en", "de", "fr", "es", "it", "pt", "nl")
#: a word below this Zipf frequency (once per billion words = 0, once per thousand = 6) in
#: every language of ``_COMMON_IN`` is rare: wordfreq's small lists hold the words of 3 or more
_RARE_ZIPF = 4.0


@functools.cache
def _common_words() -> dict[str, float]:
    """The Zipf frequency of every word common in one of ``_COMMON_IN`` (its highest)."""
    from wordfreq import get_frequency_dict

    out: dict[str, float] = {}
    for language in _COMMON_IN:
        for word, frequency in get_frequency_dict(language, wordlist="small").items():
            zipf = math.log10(frequency) + 9
            if zipf > out.get(word, 0.0):
                out[word] = zipf
    return out


def missing_rarity(question: str, held: Container[str]) -> float:
    """How rare in common use the rarest word of ``question`` is whose term (its first five
    letters, ``held``) no source holds: 0 for a common word or none missing, 1 for a word
    rarer than once per million words in every language of ``_COMMON_IN``. A student's
    paraphrase brings common words the material words otherwise ("how often", "kind"); a
    question about something the material does not cover names it ("SMOTE", "amniocentesis",
    "Herfindahl"), and such names are rare words. Words with digits (identifiers, formulas)
    do not count."""
    common = _common_words()
    rarest = _RARE_ZIPF
    for word in words(question.casefold()):
        if len(word) < 3 or word in STOPWORDS or any(c.isdigit() for c in word):
            continue
        if prefix_stem(stem(word)) not in held:
            rarest = min(rarest, common.get(word, 0.0))
    return (_RARE_ZIPF - rarest) / _RARE_ZIPF


@dataclass(frozen=True)
class Logistic:
    """A logistic model over some columns of a signal matrix: the probability of each row."""

    weights: tuple[float, ...]
    bias: float
    #: the columns it reads, in its weights' order (None: all, in order)
    columns: tuple[int, ...] | None = None

    def __call__(self, signals: NDArray[np.float64]) -> NDArray[np.float64]:
        if not len(signals):
            return np.zeros(0)
        x = signals if self.columns is None else signals[:, list(self.columns)]
        logits = x @ np.asarray(self.weights, dtype=np.float64) + self.bias
        return np.asarray(1.0 / (1.0 + np.exp(-logits)), dtype=np.float64)

    @classmethod
    def over(
        cls, names: Sequence[str], weights: Sequence[float], bias: float, known: Sequence[str]
    ) -> Logistic:
        """A model fitted on the signals ``names``, each one of ``known`` (its columns)."""
        unknown = [n for n in names if n not in known]
        if unknown or len(names) != len(weights):
            raise ValueError(f"fitted on signals this answerer does not make: {unknown}")
        at = tuple(list(known).index(n) for n in names)
        return cls(tuple(float(w) for w in weights), float(bias), at)


@dataclass(frozen=True)
class AnswerModel:
    """The answerer's two fitted models: the probability that a unit states the answer
    (over some of ``SIGNALS``), and the probability that the sources answer the question at
    all (over some of ``QUESTION_SIGNALS``), which must reach ``answer_threshold`` for an
    answer. ``reads`` says whether it was fitted with the reader's signals."""

    unit: Logistic
    refusal: Logistic | None = None
    answer_threshold: float = 0.5
    reads: bool = False
    #: fitted with the answer spans the re-ranker's reader marked (``answer_span``, ...)
    spans: bool = False
    #: (column of ``QUESTION_SIGNALS``, least value) pairs an answer needs besides the
    #: refusal's probability: no answerable development question came lower on that signal
    floors: tuple[tuple[int, float], ...] = ()

    def score(self, signals: NDArray[np.float64]) -> NDArray[np.float64]:
        """The probability of every unit (row of ``signals``)."""
        return self.unit(signals)

    def answers(self, signals: NDArray[np.float64]) -> bool:
        """Whether the question's signals say the sources answer it."""
        if below_floors(signals, self.floors):
            return False
        if self.refusal is None:
            return True
        return float(self.refusal(signals[None, :])[0]) >= self.answer_threshold

    @classmethod
    def load(cls, path: Path) -> AnswerModel:
        """Read a model written by ``bench/fit_answerer.py``; its signals must be ours."""
        data = json.loads(path.read_text())
        try:
            unit = Logistic.over(data["signals"], data["weights"], data["bias"], SIGNALS)
            refusal = data.get("refusal")
            spans = bool(set(data["signals"]) & set(SPAN_SIGNALS))
            if refusal is None:
                return cls(unit, reads="reader" in data["signals"], spans=spans)
            judge = Logistic.over(
                refusal["signals"], refusal["weights"], refusal["bias"], QUESTION_SIGNALS
            )
            floors = tuple(
                (QUESTION_SIGNALS.index(name), float(value))
                for name, value in refusal.get("floors", {}).items()
            )
        except ValueError as exc:
            raise ValueError(f"{path}: {exc}") from None
        reads = "reader" in data["signals"] or "best_reader" in refusal["signals"]
        spans = spans or "best_margin" in refusal["signals"]
        return cls(unit, judge, float(refusal["threshold"]), reads, spans, floors)


def has_signal(signals: NDArray[np.float64], at: int) -> bool:
    """Whether a question's signals (``QUESTION_SIGNALS``) hold a value in column ``at``: the
    re-ranker's best score has none when the sources bear no score."""
    return not (at == _QUESTION_AT["rerank_top"] and signals[_QUESTION_AT["rerank_missing"]])


def below_floors(signals: NDArray[np.float64], floors: Iterable[tuple[int, float]]) -> bool:
    """Whether a question's signals fall below one of ``floors`` ((column, least value)
    pairs) in a column they hold a value in."""
    return any(has_signal(signals, at) and signals[at] < floor for at, floor in floors)


#: the model fitted with the reader's signals, the one for an answerer without a reader, and
#: the one for sources the re-ranker's reader marked answer spans in (the answerer reads
#: nothing itself: one read of each candidate, in the re-ranker)
MODEL_PATH = Path(__file__).with_name("answerer_model.json")
NO_READER_MODEL_PATH = Path(__file__).with_name("answerer_model_no_reader.json")
SPANS_MODEL_PATH = Path(__file__).with_name("answerer_model_spans.json")
#: the signals of the re-ranker's answer spans
SPAN_SIGNALS = ("answer_span", "answer_margin")


@functools.cache
def answer_model(reads: bool = True, spans: bool = False) -> AnswerModel:
    """The fitted model shipped with the package: for sources with the re-ranker's answer
    spans (``spans``, when that model is shipped), else for an answerer with or without a
    reader of its own."""
    if spans and SPANS_MODEL_PATH.is_file():
        return AnswerModel.load(SPANS_MODEL_PATH)
    return AnswerModel.load(MODEL_PATH if reads else NO_READER_MODEL_PATH)


def has_answer_spans(sources: Sequence[SourceText]) -> bool:
    """Whether the re-ranker's reader marked an answer span in any of the sources."""
    return any(s.answer is not None for s in sources)


def _answers_at_all(
    query: Sequence[str],
    bags: Sequence[Counter[str]],
    model: AnswerModel,
    similarities: Sequence[float] | None,
    without: Container[str],
    signals_of_question: Callable[[], NDArray[np.float64]],
) -> bool:
    """Whether the sources answer the question at all. They must hold two of the question's
    terms in one sentence (of three or more): "What is the offside rule in football?" against
    a book that only shouts "Offside!" in a hockey match speaks of something else that bears
    the word, however close in meaning the embedder puts it. Beyond that the fitted refusal
    decides, when there is an embedder (without one its semantic signals are missing), over
    the question's ``question_signals``, computed (``signals_of_question``) only then."""
    if "speaks" not in without and not speaks_of_question(query, bags):
        return False
    return similarities is None or model.answers(signals_of_question())


def _scored_units(
    form: QuestionForm,
    units: Sequence[SourceUnit],
    sources: Sequence[SourceText],
    signals: NDArray[np.float64],
    probabilities: NDArray[np.float64],
    similarities: Sequence[float] | None,
) -> list[ScoredSentence]:
    """Every unit with its fitted probability of answering and its match to the question."""
    out = []
    for index, unit in enumerate(units):
        # what follows a heading or a caption is about it ("A uniform table" / its header)
        lexical = float(signals[index, _AT["lexical"]])
        lexical = max(lexical, 0.5 * (lexical + float(signals[index, _AT["under_heading"]])))
        out.append(
            ScoredSentence(
                label=sources[unit.source_index].label,
                source_index=unit.source_index,
                position=unit.position,
                text=unit.text,
                lexical=lexical,
                semantic=None if similarities is None else max(0.0, float(similarities[index])),
                score=float(probabilities[index]),
                item=unit.item,
                defines=form == "definition"
                and bool(
                    signals[index, [_AT["defines"], _AT["names"], _AT["opens_with_subject"]]].any()
                ),
            )
        )
    return out


def _in_answer_order(
    chosen: list[ScoredSentence], *, leads: int | None = None
) -> list[ScoredSentence]:
    """The chosen units grouped by source (a definition's source first, else the source
    ``leads`` names, the one holding the answer the reader found, then the order the sources
    were chosen in), in document order within each."""
    group_rank: dict[int, int] = {}
    for picked in sorted(chosen, key=lambda c: (not c.defines, c.source_index != leads)):
        group_rank.setdefault(picked.source_index, len(group_rank))
    return sorted(chosen, key=lambda s: (group_rank[s.source_index], s.position))


def extract_answer(
    *,
    question: str,
    sources: Sequence[SourceText],
    similarities: Sequence[float] | None = None,
    readings: Sequence[float] | None = None,
    max_sentences: int = 4,
    min_lexical: float = 0.2,
    min_semantic: float = 0.4,  # MiniLM: answering paraphrases ~0.4+, unrelated text < 0.3
    k1: float = 1.2,
    b: float = 0.75,
    floor: float = 0.5,
    other_floor: float = 0.9,
    model: AnswerModel | None = None,
    without: Container[str] = frozenset(),
) -> ExtractiveAnswer:
    """Pick the units of ``sources`` that answer ``question``, in the question's form.

    ``similarities`` (question-to-unit cosines, in ``candidate_sentences`` order) add a
    semantic signal, ``readings`` (the reader's logits, in the same order) the reader's.
    Each unit's signals (``unit_signals``) are combined by ``model`` (the fitted
    ``answer_model()`` by default) into the probability that it states the answer. A
    unit is eligible with enough lexical overlap or similarity; the best ones within ``floor``
    of the top score are kept (a unit of another source than the best
    one's needs ``other_floor``: it is cited only when it answers nearly as well; see the
    module docstring for each form), grouped by source in document order. Nothing answers
    when the model's refusal part, over the ``question_signals``, says the sources do not
    answer the question at all.
    """
    units = source_units(sources)
    query = list(dict.fromkeys(terms(question)))
    if not units or (not query and similarities is None):
        return ExtractiveAnswer([])
    form = question_form(question)
    bags = [Counter(terms(u.text)) for u in units]
    asked = set(query)
    spans = readings is None and has_answer_spans(sources)
    model = model or answer_model(reads=readings is not None, spans=spans)
    signals = unit_signals(
        question, form, units, bags, similarities, sources=sources, readings=readings, k1=k1, b=b
    )
    probabilities = model.score(signals)
    signals_of_question = functools.partial(
        question_signals, question, query, bags, signals, probabilities, sources
    )
    if "off_topic" not in without and not _answers_at_all(
        query, bags, model, similarities, without, signals_of_question
    ):
        return ExtractiveAnswer([], form)
    scored = [
        entry
        for entry in _scored_units(form, units, sources, signals, probabilities, similarities)
        if entry.lexical >= min_lexical
        or (entry.semantic is not None and entry.semantic >= min_semantic)
    ]
    if not scored:
        return ExtractiveAnswer([], form)
    ranked = sorted(scored, key=lambda s: (-s.score, s.source_index, s.position))
    best = ranked[0].score
    chosen = _in_answer_order(
        leads=None if "answer_first" in without else _answer_source(sources),
        chosen=_best(
            ranked,
            floor=floor * best,
            limit=max_sentences,
            other_floor=other_floor * best,
            asked=asked,
        ),
    )
    if "followed_on" not in without:
        chosen = _followed_on(
            chosen, units, sources, limit=max_sentences + 2, passage="passage" not in without
        )
    if "completed" not in without:
        chosen = _with_list(_completed(chosen, units), units, sources)
    return ExtractiveAnswer(chosen, form)


def _answer_source(sources: Sequence[SourceText]) -> int | None:
    """The source whose answer span beats its null score by most, if any has a span."""
    margins = {i: s.answer.margin for i, s in enumerate(sources) if s.answer is not None}
    return max(margins, key=lambda i: margins[i]) if margins else None


_FOLLOW_ON = re.compile(
    r"^\s*(?:he|she|it|its|they|their|this|these|those|such|that|er|sie|es|dies|diese|"
    r"dieser|dieses)\b",
    re.IGNORECASE,
)


def _followed_on(
    chosen: Sequence[ScoredSentence],
    units: Sequence[SourceUnit],
    sources: Sequence[SourceText],
    *,
    limit: int,
    leads: int = 2,
    passage: bool = True,
) -> list[ScoredSentence]:
    """The best sentences (``leads`` of them) each with the next one of its source when that
    one goes on about it ("Our friend Mojo stands next to the ladder. He is an intelligent
    monkey."): what a pronoun refers to is only in the sentence before, so term overlap never
    finds it. With ``passage``, the best sentence brings the next one of its paragraph
    whatever it opens with: an answer is a passage, and the sentence that matches the
    question best often only names what the next one explains (a why or how question) or
    defines; it also brings the sentence before it in its paragraph, whose point it often goes
    on with. A table row brings nothing (the next row is another fact), nor does a question.
    Past ``limit`` sentences, the weakest other sentence makes room."""
    if not chosen:
        return list(chosen)
    ranked = sorted(chosen, key=lambda c: -c.score)
    best = ranked[0]
    at = {(u.source_index, u.position): u for u in units}
    taken = {(c.source_index, c.position) for c in chosen}
    out = list(chosen)
    for lead in ranked[:leads]:
        following = at.get((lead.source_index, lead.position + 1))
        if (
            following is None
            or following.item
            or following.paragraph != at[(lead.source_index, lead.position)].paragraph
            or (lead.source_index, lead.position + 1) in taken
            or _is_table_row(lead.text)
            or following.text.rstrip().endswith("?")
            or (not _FOLLOW_ON.match(following.text) and not (passage and lead is best))
        ):
            continue
        out.append(_quoted(following, sources))
        taken.add((lead.source_index, lead.position + 1))
        others = [c for c in ranked[leads:] if c in out]
        if len(out) > limit and others:
            out.remove(others[-1])
    if passage:
        # ... and the one before it: the point it goes on with ("A trace tree is ... . It
        # grows as ...") or the definition its figures are about
        before = at.get((best.source_index, best.position - 1))
        if (
            before is not None
            and not before.item
            and before.paragraph == at[(best.source_index, best.position)].paragraph
            and (best.source_index, best.position - 1) not in taken
            and not _is_table_row(best.text)
            and not before.text.rstrip().endswith("?")
        ):
            out.append(_quoted(before, sources))
    groups = {c.source_index: rank for rank, c in reversed(list(enumerate(chosen)))}
    return sorted(out, key=lambda c: (groups[c.source_index], c.position))


def _quoted(unit: SourceUnit, sources: Sequence[SourceText]) -> ScoredSentence:
    """A unit quoted for the one it goes with (unscored: it was not chosen on its own)."""
    return ScoredSentence(
        label=sources[unit.source_index].label,
        source_index=unit.source_index,
        position=unit.position,
        text=unit.text,
        lexical=0.0,
        semantic=None,
        score=0.0,
        item=unit.item,
    )


def _adds_asked(bag: set[str], chosen: Sequence[set[str]], asked: Container[str]) -> bool:
    """Whether ``bag`` holds a term of the question that no chosen unit holds in any form
    (the same first five letters: "topologischen" is there when "topologischer" is)."""
    held = {prefix_stem(t) for other in chosen for t in other}
    return any(t in asked and prefix_stem(t) not in held for t in bag)


_COUNT_WORD = re.compile(
    r"\b(?:two|three|four|five|six|seven|eight|nine|ten|zwei|drei|vier|fünf|sechs|sieben|"
    r"acht|neun|zehn|[2-9]|1\d)\s+((?:[^\W\d_][\w-]*\s+){0,2}[^\W\d_][\w-]*)",
    re.IGNORECASE,
)


def _counts_asked(text: str, asked: Container[str]) -> bool:
    """Whether ``text`` counts a thing the question asks for ("two advantages", "four main
    stages"): it announces the list that answers."""
    return any(
        any(t in asked for t in terms(match.group(1))) for match in _COUNT_WORD.finditer(text)
    )


def _is_table_row(text: str) -> bool:
    """A table row as ``text.table_rows`` writes it: "header: cell; header: cell; ..."."""
    return text.count("; ") >= 2 and text.count(": ") >= 3


def _is_heading(unit: SourceUnit) -> bool:
    """A heading or a caption: a few words without a stop, not a list item."""
    return not unit.item and len(unit.text.split()) < 6 and unit.text.rstrip()[-1:] not in ".!?:;"


def _completed(
    chosen: Sequence[ScoredSentence], units: Sequence[SourceUnit], *, most: int = 2
) -> list[ScoredSentence]:
    """Chosen sentences that stop mid-way (a line break of the PDF cut them: "X heißt kompakt,
    wenn jede offene Überdeckung von X") carry on with the next units of their source."""
    at = {(u.source_index, u.position): u for u in units}
    taken = {(c.source_index, c.position) for c in chosen}
    out: list[ScoredSentence] = []
    for picked in chosen:
        text = picked.text
        position = picked.position
        for _ in range(most):
            if picked.item or ends_clause(text):
                break
            following = at.get((picked.source_index, position + 1))
            if following is None or following.item or (picked.source_index, position + 1) in taken:
                break
            if "," not in text and not following.text[:1].islower():
                break  # a caption or a heading, not a sentence cut by a line break
            position += 1
            text = f"{text} {following.text}"
        out.append(replace(picked, text=text) if text != picked.text else picked)
    return out


def _with_list(
    chosen: Sequence[ScoredSentence],
    units: Sequence[SourceUnit],
    sources: Sequence[SourceText],
    *,
    most: int = 10,
) -> list[ScoredSentence]:
    """A chosen sentence that introduces a list ("Mitosis is usually described in four
    stages:") is incomplete without it, as a sentence a line break cut is: it brings the
    items that follow it (those already chosen stay where they are). An item that ends with a
    colon ("• remove all annotations from PI:") brings the items nested under it."""
    index_of = {(u.source_index, u.position): i for i, u in enumerate(units)}
    taken = {(c.source_index, c.position) for c in chosen}
    out: list[ScoredSentence] = []
    for picked in chosen:
        out.append(picked)
        at = index_of.get((picked.source_index, picked.position))
        if at is None or not units[at].introduces_list:
            continue
        head = units[at]
        if head.item and not head.text.rstrip().endswith(":"):
            continue
        for unit in units[at + 1 : at + 1 + most]:
            if unit.source_index != picked.source_index or not unit.item:
                break
            if head.item and unit.depth <= head.depth:
                break
            if (unit.source_index, unit.position) not in taken:
                taken.add((unit.source_index, unit.position))
                out.append(_quoted(unit, sources))
    return out


def _best(
    ranked: Sequence[ScoredSentence],
    *,
    floor: float,
    limit: int,
    other_floor: float | None = None,
    asked: Container[str] | None = None,
    tie: float = 0.98,
) -> list[ScoredSentence]:
    """The best units above ``floor``, skipping near-repeats of one already chosen. A unit of
    another source than the best one's needs ``other_floor`` and must hold a term of the
    question (``asked``) that no chosen unit holds, state what a definition question asks
    for, or score within ``tie`` of the best (two sources that answer equally well are both
    cited: which one holds the fact, the model cannot tell): an answer cites what answers,
    not everything near it."""
    chosen: list[ScoredSentence] = []
    bags: list[set[str]] = []
    for s in ranked:
        if s.score < floor or len(chosen) >= limit:
            break
        bag = set(terms(s.text))
        if (
            chosen
            and other_floor is not None
            and s.source_index != chosen[0].source_index
            and (
                s.score < other_floor
                or (
                    asked is not None
                    and not _adds_asked(bag, bags, asked)
                    and not s.defines
                    and s.score < tie * chosen[0].score
                )
            )
        ):
            continue
        repeat = 1.0 if _is_table_row(s.text) else 0.6  # rows of a table share their
        # headers; one that differs in a value ("Layoff Temporary") is another fact
        if any(_jaccard(bag, other) >= repeat for other in bags):
            continue
        chosen.append(s)
        bags.append(bag)
    return chosen


def reader_texts(units: Sequence[SourceUnit], *, without: Container[str] = ()) -> list[str]:
    """What the reader reads of each unit: a table row after its table's caption and header
    (what the row's cells are), any other unit as it is."""
    if "row_context" in without:
        return [u.text for u in units]
    return [f"{u.context}\n{u.text}" if u.context else u.text for u in units]


class SentenceReader(Protocol):
    """What the answerer needs of ``lectern_common.reading.Reader``."""

    async def score_logits(
        self, question: str, texts: Sequence[str], *, kind: Literal["sentence", "passage"] = ...
    ) -> NDArray[np.float32]:
        """The reader's logit of each (question, text) pair."""
        ...


#: the units the offline answerer reads at most, those the model without the reader ranks
#: highest (docs/benchmarks.md: on the development split its top 8 hold the full model's best
#: unit for 0.996 of the questions, its top 16 for all, its top 4 for 0.955). Each read is
#: ~5 ms of a core: 16 were two thirds of the gateway's CPU a turn under load (issue 58)
READ_AT_MOST = 8


class OfflineAnswerer:
    """Answers from the sources alone: the units that answer, cited, streamed."""

    name = "offline"

    def __init__(
        self,
        *,
        embedder: Embedder | None = None,
        reader: SentenceReader | None = None,
        max_sentences: int = 4,
        words_per_chunk: int = 4,
        cache_floats: int = 8_000_000,  # 32 MB of vectors: 20,000 sentences of MiniLM
        read_at_most: int | None = READ_AT_MOST,
        from_spans: bool = False,
    ) -> None:
        self.embedder = embedder
        self.reader = reader
        #: sources with the re-ranker's answer spans are scored from those spans, not read
        #: again (cheaper; a 3-layer span head scores answers worse than the 6-layer reader
        #: reads sentences: docs/benchmarks.md, twenty-sixth session)
        self.from_spans = from_spans
        self.read_at_most = read_at_most
        self.max_sentences = max_sentences
        self.words_per_chunk = max(1, words_per_chunk)
        # unit vectors by (model, text), least recently used first: a course's questions
        # keep meeting the same chunks, and embedding their sentences is most of an answer's
        # time on a CPU
        self._vectors: OrderedDict[tuple[str, str], NDArray[np.float32]] = OrderedDict()
        self.cache_floats = cache_floats

    async def answer(
        self, *, question: str, sources: Sequence[SourceText], **options: Any
    ) -> ExtractiveAnswer:
        """The extractive answer (unit similarity from the embedder and the reader's logits
        when they are set); ``options`` go to ``extract_answer`` (measurements: ``without``,
        ``model``)."""
        units = source_units(sources)
        similarities = await self.similarities(question, [u.text for u in units])
        readings = await self.unit_readings(
            question, sources, units, similarities, without=options.get("without", frozenset())
        )
        return extract_answer(
            question=question,
            sources=sources,
            similarities=similarities,
            readings=readings,
            max_sentences=self.max_sentences,
            **options,
        )

    async def unit_readings(
        self,
        question: str,
        sources: Sequence[SourceText],
        units: Sequence[SourceUnit],
        similarities: Sequence[float] | None,
        *,
        without: Container[str] = frozenset(),
    ) -> list[float] | None:
        """The reader's logit of each unit (None without a reader, or when the answerer
        scores ``from_spans`` and the re-ranker's reader marked answer spans in the sources:
        it read them once already). Of more than
        ``read_at_most`` units only those the model without the reader ranks highest are
        read; the others get the lowest logit read: they rank below the read ones on every
        other signal, and reading them is most of an answer's time on a CPU."""
        texts = reader_texts(units, without=without)
        if self.reader is None or not texts or not question.strip():
            return None
        if self.from_spans and has_answer_spans(sources):
            return None
        at_most = self.read_at_most
        if at_most is None or len(texts) <= at_most:
            return await self.readings(question, texts)
        bags = [Counter(terms(u.text)) for u in units]
        cheap = answer_model(reads=False).score(
            unit_signals(
                question, question_form(question), units, bags, similarities, sources=sources
            )
        )
        read = sorted(int(i) for i in np.argsort(-cheap, kind="stable")[:at_most])
        logits = await self.readings(question, [texts[i] for i in read])
        assert logits is not None
        out = [min(logits)] * len(texts)
        for index, logit in zip(read, logits, strict=True):
            out[index] = logit
        return out

    async def readings(self, question: str, texts: Sequence[str]) -> list[float] | None:
        """The reader's logit of each (question, text) pair (None without a reader)."""
        if self.reader is None or not texts or not question.strip():
            return None
        logits = await self.reader.score_logits(question, texts, kind="sentence")
        return [float(v) for v in logits]

    async def similarities(self, question: str, texts: Sequence[str]) -> list[float] | None:
        """Cosine of the question to each text (None without an embedder)."""
        if self.embedder is None or not texts or not question.strip():
            return None
        query = await self.embedder.embed_query(question)
        vectors = await self._unit_vectors(self.embedder, texts)
        return [float(v) for v in np.asarray(vectors @ query).ravel()]

    async def _unit_vectors(self, embedder: Embedder, texts: Sequence[str]) -> NDArray[np.float32]:
        """The vectors of ``texts``, embedding only those not met lately."""
        cache = self._vectors
        # taken before the model is awaited: meanwhile other answers may evict them
        known = {t: cache[(embedder.name, t)] for t in texts if (embedder.name, t) in cache}
        missing = [t for t in dict.fromkeys(texts) if t not in known]
        if missing:
            fresh = np.asarray(await embedder.embed_documents(missing), dtype=np.float32)
            known.update(zip(missing, fresh, strict=True))
        for text in dict.fromkeys(texts):
            cache[(embedder.name, text)] = known[text]
            cache.move_to_end((embedder.name, text))
        out = np.stack([known[t] for t in texts])
        most = max(len(known), self.cache_floats // max(1, out.shape[1]))
        while len(cache) > most:
            cache.popitem(last=False)
        return out

    async def stream(self, request: GenerationRequest) -> GenerationStream:
        """Stream the answer to the last user message (a follow-up takes the topic of the
        questions before it), a few words at a time."""
        from lectern_common.generation import Final, TextDelta, Verdict

        asked = [m.content for m in request.messages if m.role == "user"]
        question = resolve_follow_up(asked[-1], asked[:-1]) if asked else ""
        result = await self.answer(question=question, sources=request.sources)
        yield Verdict(outcome="answered" if result.supported else "no_support")
        pieces = _PIECE.findall(result.render())
        for start in range(0, len(pieces), self.words_per_chunk):
            yield TextDelta(text="".join(pieces[start : start + self.words_per_chunk]))
            await asyncio.sleep(0)
        yield Final(
            provider=self.name,
            finish_reason="stop",
            outcome="answered" if result.supported else "no_support",
            cited_sources=result.cited,
        )
