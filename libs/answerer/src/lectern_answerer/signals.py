"""What a unit and a question are described by: ``SIGNALS``, a few numbers per unit (term
overlap by BM25, cosine to the question, its chunk's rank and score, whether it states a
number, defines the subject, gives a cause, is a table row naming what is asked, the reader's
logit, the re-ranker's answer span ...), and ``QUESTION_SIGNALS``, a few numbers per question
on whether the sources answer it at all (how well the best unit answers, the terms and names
no source holds, how rare the missing words are). The fitted models (``model``) combine them.
"""

from __future__ import annotations

import functools
import math
import re
from collections import Counter
from collections.abc import Container, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from lectern_answerer.forms import (
    QuestionForm,
    asks_why_or_how,
    counts_asked,
    defines,
    definiendum,
    defining_frame,
    gives_cause,
    has_copula,
    is_caption,
    is_possessive,
    names,
    question_names,
    states_number,
)
from lectern_answerer.units import (
    SourceUnit,
    answer_holders,
    is_heading,
    is_table_row,
    read_margins,
)
from lectern_common.bm25 import idf_weights
from lectern_common.text import (
    PREFIX_LETTERS,
    STOPWORDS,
    prefix_stem,
    prefix_stems,
    stem,
    terms,
    words,
)

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from lectern_common.generation import SourceText


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
    # (or, read by the answerer's reader with a span head, its best span beats "no answer")
    "answer_margin",  # ... and by how much that span beat "no answer here" (0 for the others)
)
SIGNAL_AT = {name: i for i, name in enumerate(SIGNALS)}
#: reader logits beyond this say no more (and would dominate a linear model)
READER_CLIP = 12.0
#: the signals of the re-ranker's answer spans
SPAN_SIGNALS = ("answer_span", "answer_margin")


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
            why_how=asks_why_or_how(question) and form not in ("number", "list"),
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
        row[SIGNAL_AT["number_stated"]] = float(stated)
        row[SIGNAL_AT["number_missing"]] = float(not stated)
    elif asked.form == "definition" and asked.subject:
        row[SIGNAL_AT["defines"]] = float(defines(text, asked.subject_order))
        row[SIGNAL_AT["names"]] = float(names(text, asked.subject_order))
        head = asked.head
        if head <= set(bag):
            # a possessive name may come first: "Newton's first law says that ..."
            start = 1 if words and is_possessive(words[0]) else 0
            opening = " ".join(words[start : start + len(head) + 4])
            first = terms(opening)[:1]
            row[SIGNAL_AT["opens_with_subject"]] = float(
                bool(first)
                and first[0] in head
                and head <= set(terms(opening))
                and has_copula(opening)
            )
        row[SIGNAL_AT["copula_near"]] = float(has_copula(" ".join(words[:12])))
        row[SIGNAL_AT["defining_frame"]] = float(defining_frame(text, asked.subject_order))
    elif asked.form == "list":
        row[SIGNAL_AT["list_unit"]] = float(unit.item or unit.introduces_list)
        row[SIGNAL_AT["counts_asked"]] = float(counts_asked(text, asked.terms))


def _shape_signals(
    row: NDArray[np.float64], asked: _Asked, unit: SourceUnit, bag: Counter[str], lexical: float
) -> None:
    """The signals of the unit's own shape: a caption, a question, a table row, its length."""
    text = unit.text.rstrip()
    words = text.split()
    new_terms = {t for t in bag if t not in asked.terms and prefix_stem(t) not in asked.prefixes}
    row[SIGNAL_AT["repeats_question"]] = float(
        len(new_terms) < 2 and not unit.item and not unit.introduces_list
    )
    row[SIGNAL_AT["caption_or_short"]] = float(
        is_caption(text) or (len(words) < 6 and not unit.item)
    )
    row[SIGNAL_AT["asks"]] = float(text.endswith("?"))
    row[SIGNAL_AT["introduction"]] = float(asked.form != "list" and text.endswith(":"))
    is_row = is_table_row(text)
    row[SIGNAL_AT["table_row"]] = float(is_row)
    row[SIGNAL_AT["row_match"]] = lexical if is_row else 0.0
    stems = asked.stems
    if is_row and stems:
        label = text.split("; ", 1)[0].rsplit(": ", 1)[-1]
        row[SIGNAL_AT["row_label"]] = len(stems & prefix_stems(label)) / len(stems)
    if unit.context and stems:
        row[SIGNAL_AT["table_context"]] = len(stems & prefix_stems(unit.context)) / len(stems)
    row[SIGNAL_AT["explains"]] = float(asked.why_how and gives_cause(text))
    row[SIGNAL_AT["first_of_source"]] = float(unit.position == 0)
    row[SIGNAL_AT["length"]] = min(1.0, len(words) / 40)


def unit_signals(
    question: str,
    form: QuestionForm,
    units: Sequence[SourceUnit],
    bags: Sequence[Counter[str]],
    similarities: Sequence[float] | None,
    *,
    sources: Sequence[SourceText] = (),
    readings: Sequence[float] | None = None,
    margins: Sequence[float | None] | None = None,
    k1: float = 1.2,
    b: float = 0.75,
    full_match: float = 0.75,
) -> NDArray[np.float64]:
    """The ``SIGNALS`` of every unit, one row per unit (in ``units`` order); ``sources``
    (their re-ranker scores) and ``readings`` (the reader's logits) when known. The span
    signals come from ``margins`` when the answerer's reader read the units with a span head
    (a unit holds an answer when its best span beats "no answer here"), else from the answer
    spans the re-ranker's reader marked in the sources."""
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
        row[SIGNAL_AT["lexical"]] = lexical
        row[SIGNAL_AT["semantic"]] = semantic
        row[SIGNAL_AT["lexical_x_semantic"]] = lexical * semantic
        row[SIGNAL_AT["log_match"]] = math.log(0.5 * (lexical + semantic) + 0.01)
        row[SIGNAL_AT["rank"]] = rank
        source_score = rerank[unit.source_index] if unit.source_index < len(rerank) else None
        row[SIGNAL_AT["source_score"]] = (
            1.0 if source_score is None or not top_score else source_score / top_score
        )
        row[SIGNAL_AT["rank_x_full_match"]] = rank if lexical >= full_match else 0.0
        if (
            heading is not None
            and heading.source_index == unit.source_index
            and is_heading(heading)
        ):
            row[SIGNAL_AT["under_heading"]] = lexicals[index - 1]
        row[SIGNAL_AT["section_match"]] = sections[unit.source_index]
        for name, other in (("previous_semantic", index - 1), ("next_semantic", index + 1)):
            if 0 <= other < len(units) and units[other].source_index == unit.source_index:
                row[SIGNAL_AT[name]] = semantics[other]
        _form_signals(row, asked, unit, bag)
        _shape_signals(row, asked, unit, bag, lexical)
        if readings is not None:
            row[SIGNAL_AT["reader"]] = min(max(float(readings[index]), -READER_CLIP), READER_CLIP)
    read = margins is not None  # the answerer's own reads, else the re-ranker's spans
    held = read_margins(margins) if margins is not None else answer_holders(sources, units)
    for index, margin in held.items():
        out[index, SIGNAL_AT["answer_span"]] = float(margin > 0) if read else 1.0
        out[index, SIGNAL_AT["answer_margin"]] = min(max(margin, -READER_CLIP), READER_CLIP)
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
    # the re-ranker's reader read, or the units the answerer's read with a span head (SQuAD
    # 2.0's null-score difference); -READER_CLIP for none
)
QUESTION_AT = {name: i for i, name in enumerate(QUESTION_SIGNALS)}


def question_signals(
    question: str,
    query: Sequence[str],
    bags: Sequence[Counter[str]],
    signals: NDArray[np.float64],
    probabilities: NDArray[np.float64],
    sources: Sequence[SourceText],
    margins: Sequence[float | None] | None = None,
) -> NDArray[np.float64]:
    """The ``QUESTION_SIGNALS`` of one question over its sources' units (``margins``: the
    answerer's reader's span margins of the units, when it has a span head)."""
    scores = [s.score for s in sources if s.score is not None]
    held = {prefix_stem(t) for bag in bags for t in bag}
    asked = {prefix_stem(t) for t in query}
    missing = len(asked - held) / len(asked) if asked else 0.0
    longest = max((len(t) for t in query if prefix_stem(t) not in held), default=0)
    text = " ".join(s.text for s in sources).casefold()
    return np.asarray(
        [
            float(probabilities.max()) if len(probabilities) else 0.0,
            float(signals[:, SIGNAL_AT["semantic"]].max()) if len(signals) else 0.0,
            float(signals[:, SIGNAL_AT["lexical"]].max()) if len(signals) else 0.0,
            float(speaks_of_question(query, bags)),
            max(scores) if scores else 0.0,
            float(not scores),
            missing,
            float(any(n.casefold().rstrip(".") not in text for n in question_names(question))),
            min(1.0, longest / 12),
            missing_rarity(question, held),
            float(signals[:, SIGNAL_AT["reader"]].max()) if len(signals) else 0.0,
            best_margin(sources, margins),
        ],
        dtype=np.float64,
    )


def best_margin(
    sources: Sequence[SourceText], margins: Sequence[float | None] | None = None
) -> float:
    """The best margin of the answer spans over their null scores, clipped to
    ``READER_CLIP`` (its negative when there is no span): of the units' own reads
    (``margins``) when the answerer's reader has a span head, else of the spans the
    re-ranker's reader marked in the sources."""
    if margins is not None:
        found = [m for m in margins if m is not None]
    else:
        found = [s.answer.margin for s in sources if s.answer is not None]
    return min(max(max(found, default=-READER_CLIP), -READER_CLIP), READER_CLIP)


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
