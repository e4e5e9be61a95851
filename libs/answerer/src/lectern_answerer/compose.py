"""Composing the answer: every unit scored by the fitted model, the sources' refusal asked,
the best units chosen (near-repeats dropped, another source cited only when it nearly ties
or adds what is asked), grouped by source in reading order, then completed: the best sentence
brings its paragraph's neighbours, a sentence a line break cut goes on, a list's
introduction brings its items. The answer leads with the answer: the best unit's passage
opens its source's part (a table's rows by score, the best one after its caption)."""

from __future__ import annotations

import functools
import re
from collections import Counter
from collections.abc import Callable, Container, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from lectern_answerer.answer import ExtractiveAnswer, ScoredSentence
from lectern_answerer.forms import QuestionForm, question_form
from lectern_answerer.model import AnswerModel, answer_model
from lectern_answerer.signals import (
    SIGNAL_AT,
    question_signals,
    speaks_of_question,
    unit_signals,
)
from lectern_answerer.tables import with_caption
from lectern_answerer.units import (
    SourceUnit,
    answer_source,
    has_answer_spans,
    is_table_row,
    source_units,
)
from lectern_common.text import ends_clause, prefix_stem, terms

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

    from lectern_common.generation import SourceText


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
        "best_first",  # the best unit's passage (a table: its best row) opens its source's part
        "caption",  # the leading table row comes after its table's caption
    }
)

#: the signals that say a unit states what a definition question asks for
_DEFINING_COLUMNS = [SIGNAL_AT[name] for name in ("defines", "names", "opens_with_subject")]


def answers_at_all(
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


def scored_units(
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
        lexical = float(signals[index, SIGNAL_AT["lexical"]])
        lexical = max(lexical, 0.5 * (lexical + float(signals[index, SIGNAL_AT["under_heading"]])))
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
                defines=form == "definition" and bool(signals[index, _DEFINING_COLUMNS].any()),
            )
        )
    return out


def in_answer_order(
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
    margins: Sequence[float | None] | None = None,
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
    semantic signal, ``readings`` (the reader's logits, in the same order) the reader's,
    ``margins`` (its span head's, ``UnitReadings.margins``) the span signals.
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
    spans = margins is not None or (readings is None and has_answer_spans(sources))
    model = model or answer_model(reads=readings is not None, spans=spans)
    signals = unit_signals(
        question, form, units, bags, similarities, sources=sources, readings=readings,
        margins=margins, k1=k1, b=b,
    )  # fmt: skip
    probabilities = model.score(signals)
    signals_of_question = functools.partial(
        question_signals, question, query, bags, signals, probabilities, sources, margins
    )
    if "off_topic" not in without and not answers_at_all(
        query, bags, model, similarities, without, signals_of_question
    ):
        return ExtractiveAnswer([], form)
    scored = [
        entry
        for entry in scored_units(form, units, sources, signals, probabilities, similarities)
        if entry.lexical >= min_lexical
        or (entry.semantic is not None and entry.semantic >= min_semantic)
    ]
    if not scored:
        return ExtractiveAnswer([], form)
    ranked = sorted(scored, key=lambda s: (-s.score, s.source_index, s.position))
    best = ranked[0].score
    chosen = in_answer_order(
        leads=None if "answer_first" in without else answer_source(sources),
        chosen=best_units(
            ranked,
            floor=floor * best,
            limit=max_sentences,
            other_floor=other_floor * best,
            asked=asked,
        ),
    )
    return ExtractiveAnswer(
        composed(chosen, units, sources, max_sentences=max_sentences, without=without), form
    )


def composed(
    chosen: list[ScoredSentence],
    units: Sequence[SourceUnit],
    sources: Sequence[SourceText],
    *,
    max_sentences: int,
    without: Container[str] = frozenset(),
) -> list[ScoredSentence]:
    """The chosen units as the answer says them: each best one with what goes on from it
    (``followed_on``), cut sentences and lists completed, and the best passage first
    (``best_first``); ``without`` switches a step off."""
    if "followed_on" not in without:
        chosen = followed_on(
            chosen, units, sources, limit=max_sentences + 2, passage="passage" not in without
        )
    if "completed" not in without:
        chosen = with_list(completed(chosen, units), units, sources)
    if "best_first" not in without:
        chosen = best_first(chosen, units, caption="caption" not in without)
    return chosen


def best_first(
    chosen: Sequence[ScoredSentence], units: Sequence[SourceUnit], *, caption: bool = True
) -> list[ScoredSentence]:
    """The answer leads with the answer: in the best unit's source, its passage (the run of
    chosen units around it, in reading order: what it goes on from and with) comes first,
    the source's other units after it in reading order. A table's rows are facts of their
    own, so they go best first, the best one after its table's caption (``caption``:
    "Table 2 Doses — Drug: A; Dose: 5 mg"). The sources keep their order."""
    if not chosen:
        return []
    best = max(chosen, key=lambda c: c.score)
    group = [c for c in chosen if c.source_index == best.source_index]
    if is_table_row(best.text):
        rows = sorted((c for c in group if is_table_row(c.text)), key=lambda c: -c.score)
        lead = rows + [c for c in group if not is_table_row(c.text)]
        at = (best.source_index, best.position)
        unit = next((u for u in units if (u.source_index, u.position) == at), None)
        if caption and unit is not None and unit.caption:
            lead[0] = replace(lead[0], text=with_caption(lead[0].text, unit.caption))
    else:
        held = {c.position for c in group}
        first = last = best.position
        while first - 1 in held:
            first -= 1
        while last + 1 in held:
            last += 1
        run = [c for c in group if first <= c.position <= last]
        if not _FOLLOW_ON.match(best.text) and not best.item:
            run = [c for c in run if c.position >= best.position] + [
                c for c in run if c.position < best.position
            ]
        lead = run + [c for c in group if not first <= c.position <= last]
    out: list[ScoredSentence] = []
    for c in chosen:
        if c.source_index != best.source_index:
            out.append(c)
        elif c is group[0]:
            out.extend(lead)
    return out


_FOLLOW_ON = re.compile(
    r"^\s*(?:he|she|it|its|they|their|this|these|those|such|that|er|sie|es|dies|diese|"
    r"dieser|dieses)\b",
    re.IGNORECASE,
)


def followed_on(
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
            or is_table_row(lead.text)
            or following.text.rstrip().endswith("?")
            or (not _FOLLOW_ON.match(following.text) and not (passage and lead is best))
        ):
            continue
        out.append(quoted(following, sources))
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
            and not is_table_row(best.text)
            and not before.text.rstrip().endswith("?")
        ):
            out.append(quoted(before, sources))
    groups = {c.source_index: rank for rank, c in reversed(list(enumerate(chosen)))}
    return sorted(out, key=lambda c: (groups[c.source_index], c.position))


def quoted(unit: SourceUnit, sources: Sequence[SourceText]) -> ScoredSentence:
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


def adds_asked(bag: set[str], chosen: Sequence[set[str]], asked: Container[str]) -> bool:
    """Whether ``bag`` holds a term of the question that no chosen unit holds in any form
    (the same first five letters: "topologischen" is there when "topologischer" is)."""
    held = {prefix_stem(t) for other in chosen for t in other}
    return any(t in asked and prefix_stem(t) not in held for t in bag)


def completed(
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


def with_list(
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
                out.append(quoted(unit, sources))
    return out


def best_units(
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
                    and not adds_asked(bag, bags, asked)
                    and not s.defines
                    and s.score < tie * chosen[0].score
                )
            )
        ):
            continue
        repeat = 1.0 if is_table_row(s.text) else 0.6  # rows of a table share their
        # headers; one that differs in a value ("Layoff Temporary") is another fact
        if any(jaccard(bag, other) >= repeat for other in bags):
            continue
        chosen.append(s)
        bags.append(bag)
    return chosen


def jaccard(a: set[str], b: set[str]) -> float:
    return len(a & b) / len(a | b) if a and b else 0.0
