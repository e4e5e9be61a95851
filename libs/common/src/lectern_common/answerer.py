"""The offline extractive answerer: answers a question from its sources alone, no model.

It reads the form of the question and answers in that form, from the sentences and list
items of the sources that address it:

- "what are the stages of ..." (a list): the list that answers it, item by item, with the
  line that introduces it;
- "how many / how long / what share ..." (a number): sentences that state a number first;
- "how does X differ from Y" (a comparison): the best sentence about each side (when one
  name holds the other, "USER" and "CURRENT_USER", a sentence is about the one it names
  first);
- "what is X" (a definition): the sentence that says what X is ("X is ...", "... is the X",
  "is called X if ...");
- anything else: the best few sentences.

Units are scored by BM25 over the units (term overlap) and, with an embedder, cosine
similarity to the question, and weighed down by their chunk's rank from the re-ranker (half
as much for a unit holding nearly all of the question's terms); a unit that only repeats the
question's words ("Mitosis is different from meiosis.") counts for little, a unit under a
heading or caption that matches the question shares its match, and near-repeats of a chosen
unit are dropped. A sentence that announces a count ("we followed two main steps.") brings
the sentences that enumerate them ("First, ...", "Second, ..."), and an item the items
nested under it; rows of a table that differ in a value are not repeats of each other. Every
sentence is cited with its source's label; another source than the best one's is cited only
when it answers nearly as well and adds a term of the question the answer lacks. When
nothing addresses the question (nothing is eligible, or the sources never hold two of its
terms in a sentence and none is close in meaning) the answer says so plainly. Deterministic,
so everything runs and is testable offline.
"""

from __future__ import annotations

import asyncio
import math
import re
from collections import Counter, OrderedDict
from collections.abc import Container, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Literal

import numpy as np

from lectern_common.text import resolve_follow_up

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from lectern_common.embeddings import Embedder
    from lectern_common.generation import ChatMessage, GenerationStream, SourceText

QuestionForm = Literal["list", "number", "comparison", "definition", "general"]

_STOPWORDS = frozenset(
    """a about above after again against all also am an and any are as at be because been
    before being below between both but by can could did do does doing down during each few
    for from further had has have having he her here hers herself him himself his how i if in
    into is it its itself just me more most my myself no nor not now of off on once only or
    other our ours ourselves out over own same she should so some such than that the their
    theirs them themselves then there these they this those through to too under until up
    very was we were what when where which while who whom why will with would you your yours
    yourself yourselves explain describe tell please give mean means der die das ein eine
    einer eines einem einen und oder ist sind was wie wer wo warum welche welcher welches
    von zu im in den dem des mit auf für nicht auch es sich""".split()
)
_WORDS = re.compile(r"[^\W_]+", re.UNICODE)
_PARAGRAPHS = re.compile(r"\n\s*\n|\n(?=\s*(?:[-•*▪◦–‒—]|\d{1,2}[.)]|\(?[a-z][.)])\s)")
_SENTENCE_END = re.compile(
    r"(?:(?<=[.!?])|(?<=[a-z)][.!?]\d)|(?<=[a-z)][.!?]\d\d)|(?<=[a-z)][.!?]\d\d\d))"
    r"\s+(?=[\"'(\[]?[A-Z0-9ÄÖÜ])"
)  # a sentence ends at its stop, or after the footnote number stuck to it ("growth.31 A")
_ITEM_MARK = re.compile(r"^\s*(?:[-•*▪◦–‒—]|\d{1,2}[.)]|\(?[a-z][.)])\s+")
_INLINE_ITEMS = re.compile(r"\s+[-•▪◦‒]\s+")
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
    r"\b(?:is|are|was|were|means|refers to|denotes|is called|are called|heißt|hei(?:ß|ss)en|"
    r"ist|sind|bezeichnet|nennt man)\b",
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
_NAMES = re.compile(r"\b(?:is|are|was|were)\s+(?:the|an?)\s+", re.IGNORECASE)


def names(text: str, subject: Sequence[str]) -> bool:
    """Whether ``text`` says what something is by naming it with the head of ``subject`` (its
    first two terms) right after a copula: "s(0) = -4 is the starting position of the car"
    for "the starting position of the car backing out of the driveway"."""
    head = list(subject[:2])
    if len(head) < 2:
        return False
    return any(terms(text[m.end() :])[:2] == head for m in _NAMES.finditer(text))


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
_TERMINAL = re.compile(r"[.!?:;)\]\"'”]\s*$")
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
_SIDES = (
    re.compile(
        r"(?:how|in what way)s? (?:does|do|is|are) (.+?) (?:differ|different) from (.+)",
        re.IGNORECASE,
    ),
    re.compile(r"differences? between (.+?) and (.+)", re.IGNORECASE),
    re.compile(r"compare (.+?) (?:and|with|to) (.+)", re.IGNORECASE),
    re.compile(r"(.+?) (?:vs\.?|versus) (.+)", re.IGNORECASE),
    re.compile(r"unterschied zwischen (.+?) und (.+)", re.IGNORECASE),
)


def _stem(word: str) -> str:
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if word.endswith("sses"):
        return word[:-2]
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        word = word[:-1]
    for suffix in ("ing", "ed"):
        if len(word) > len(suffix) + 3 and word.endswith(suffix):
            return word[: -len(suffix)]
    return word


def terms(text: str) -> list[str]:
    """Lower-cased, lightly stemmed content words of ``text`` (stopwords removed)."""
    return [_stem(w) for w in _WORDS.findall(text.lower()) if w not in _STOPWORDS]


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


def comparison_sides(question: str) -> list[str]:
    """The two things a comparison question names ("mitosis", "meiosis"), when it names them."""
    text = question.strip().rstrip("?. ")
    for pattern in _SIDES:
        match = pattern.search(text)
        if match:
            sides = [s.strip(" ,") for s in match.groups()]
            if all(terms(s) for s in sides):
                return sides
    return []


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


def table_rows(paragraph: str) -> list[str]:
    """The rows of a table paragraph (lines with cells joined by " | ", header first), each as
    "header: cell; ..." so that a row answers alone; [] when the paragraph is no table."""
    lines = [line.strip() for line in paragraph.split("\n") if line.strip()]
    cells = [[c.strip() for c in line.split(" | ")] for line in lines]
    if len(lines) < 2 or sum(1 for c in cells if len(c) > 1) < len(lines) - 1:
        return []
    first = next(i for i, c in enumerate(cells) if len(c) > 1)
    header = cells[first]
    rows = [" ".join(lines[i].split()) for i in range(first + 1)]  # caption and header
    for row in cells[first + 1 :]:
        if len(row) == len(header) and any(row):
            pairs = [f"{h}: {v}" if h else v for h, v in zip(header, row, strict=True) if v]
            rows.append("; ".join(pairs))
        elif any(row):
            rows.append(" | ".join(c for c in row if c))
    return rows


def _joined_lines(paragraphs: Sequence[str]) -> list[str]:
    """Paragraphs with the lines a PDF set apart put back together: one that stops mid-way
    ("... represents the time") goes on with the next when that one starts in lower case
    ("at which the back of the car ...")."""
    out: list[str] = []
    for paragraph in paragraphs:
        body = paragraph.strip()
        previous = out[-1].rstrip() if out else ""
        if (
            previous
            and body[:1].islower()
            and not _TERMINAL.search(previous)
            and not _ITEM_MARK.match(body)
            and not table_rows(previous)
        ):
            out[-1] = f"{previous} {body}"
        else:
            out.append(paragraph)
    return out


def split_units(text: str) -> list[tuple[int, str, str]]:
    """(paragraph, unit, item marker) of a source text: paragraphs and list items first (a
    line of "- a - b - c" items is split into them), then sentence ends. The marker is ""
    for a sentence, the bullet for an item ("1" for any number, "a" for any letter)."""
    units: list[tuple[int, str, str]] = []
    for paragraph_index, paragraph in enumerate(_joined_lines(_PARAGRAPHS.split(text))):
        rows = table_rows(paragraph)
        if rows:
            units.extend((paragraph_index, row, "") for row in rows)
            continue
        flat = " ".join(paragraph.split())
        if not flat:
            continue
        mark = _ITEM_MARK.match(flat)
        if mark:
            body = flat[mark.end() :]
            pieces = [p for p in _INLINE_ITEMS.split(body) if p.strip()] if (
                flat[0] in "-•▪◦‒") else [body]  # fmt: skip
            bullet = mark.group().strip().lstrip("(")[:1]
            marker = "1" if bullet.isdigit() else "a" if bullet.isalpha() else bullet
            units.extend((paragraph_index, p.strip(), marker) for p in pieces)
            continue
        units.extend(
            (paragraph_index, s.strip(), "") for s in _SENTENCE_END.split(flat) if s.strip()
        )
    return units


def split_sentences(text: str) -> list[str]:
    """Sentences and list items of a source text, in order."""
    return [unit for _, unit, _ in split_units(text)]


def source_units(sources: Sequence[SourceText]) -> list[SourceUnit]:
    """Every unit worth quoting: sentences of 3+ words, and list items of any length."""
    out: list[SourceUnit] = []
    for source_index, source in enumerate(sources):
        units = split_units(source.text)
        markers: list[str] = []  # the bullets of the list under way, outermost first
        for position, (paragraph, text, marker) in enumerate(units):
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
                    source_index, position, paragraph, text, bool(marker), introduces, len(markers)
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


def idf_weights(query: Sequence[str], bags: Sequence[Container[str]]) -> dict[str, float]:
    """BM25's idf of each query term over ``bags`` (the terms of each unit)."""
    count = len(bags)
    return {
        term: math.log(1 + (count - df + 0.5) / (df + 0.5))
        for term in query
        for df in [sum(1 for bag in bags if term in bag)]
    }


def speaks_of_question(query: Sequence[str], bags: Sequence[Iterable[str]]) -> bool:
    """Whether some unit (its terms, ``bags``) holds two of the question's terms, in any form
    (same first five letters), when the question has three or more.

    "What is the offside rule in football?" against a book that only shouts "Offside!" in a
    hockey match, or "What causes the seasons on Earth?" against a sentence on favourable
    seasons, hold one term a unit: the sources speak of something else that bears the word.
    Every answerable question of the development set (bench/answers) has a unit holding two
    of its terms or more, and no off-topic question has."""
    asked = {t[:5] for t in query}
    if len(asked) < 3:
        return True  # one term of two may be all a paraphrase keeps
    return any(len(asked & {t[:5] for t in bag}) >= 2 for bag in bags)


def extract_answer(
    *,
    question: str,
    sources: Sequence[SourceText],
    similarities: Sequence[float] | None = None,
    max_sentences: int = 4,
    max_items: int = 10,
    min_lexical: float = 0.2,
    min_semantic: float = 0.4,  # MiniLM: answering paraphrases ~0.4+, unrelated text < 0.3
    min_alone: float = 0.6,
    k1: float = 1.2,
    b: float = 0.75,
    rank_decay: float = 0.1,
    full_match: float = 0.75,
    floor: float = 0.5,
    other_floor: float = 0.97,  # another source must tie nearly: at 0.95, two weaker ones got in
) -> ExtractiveAnswer:
    """Pick the units of ``sources`` that answer ``question``, in the question's form.

    ``similarities`` (question-to-unit cosines, in ``candidate_sentences`` order) add a
    semantic signal. A unit is eligible with enough lexical overlap or similarity; the best
    ones within ``floor`` of the top score are kept (a unit of another source than the best
    one's needs ``other_floor``: it is cited only when it answers nearly as well; see the
    module docstring for each form), grouped by source in document order. Nothing answers
    when no unit holds two of the question's terms (of three or more; see
    ``speaks_of_question``) and none is similar enough (``min_alone``) to answer alone.
    """
    units = source_units(sources)
    query = list(dict.fromkeys(terms(question)))
    if not units or (not query and similarities is None):
        return ExtractiveAnswer([])
    form = question_form(question)
    bags = [Counter(terms(u.text)) for u in units]
    if not speaks_of_question(query, bags) and max(similarities or [0.0]) < min_alone:
        return ExtractiveAnswer([], form)  # "What is the offside rule in football?" against
        # a book that only shouts "Offside!" in a hockey match
    lengths = [sum(bag.values()) for bag in bags]
    average = (sum(lengths) / len(lengths)) or 1.0
    idf = idf_weights(query, bags)
    ceiling = sum(idf.values()) or 1.0
    asked = set(query)
    asked_prefixes = {t[:5] for t in query if len(t) >= 5}
    subject_order = terms(definiendum(question) or "") if form == "definition" else []
    subject = set(subject_order)
    scored: list[ScoredSentence] = []
    eligible_at: dict[int, ScoredSentence] = {}
    lexicals: list[float] = []
    for index, bag in enumerate(bags):
        norm = k1 * (1 - b + b * max(lengths[index], 3) / average)
        bm25 = sum(idf[t] * bag[t] * (k1 + 1) / (bag[t] + norm) for t in query if bag.get(t))
        lexicals.append(min(1.0, bm25 / ceiling))  # the share of the question's terms; a
        # repeated term ("the Call duck is a domestic duck breed") does not make a unit answer
        # more
    for index, (unit, bag) in enumerate(zip(units, bags, strict=True)):
        lexical = lexicals[index]
        heading = units[index - 1] if index else None
        if (
            heading is not None
            and heading.source_index == unit.source_index
            and _is_heading(heading)
        ):  # what follows a heading or a caption is about it ("A uniform table" / its header)
            lexical = max(lexical, 0.5 * (lexical + lexicals[index - 1]))
        semantic = None if similarities is None else max(0.0, float(similarities[index]))
        score = lexical if semantic is None else 0.5 * lexical + 0.5 * semantic
        # the sources come best first from the re-ranker, which read them whole; a unit that
        # holds nearly all the question's terms answers wherever the re-ranker put its chunk
        decay = rank_decay if lexical < full_match else 0.5 * rank_decay
        score /= 1 + decay * unit.source_index
        new_terms = {t for t in bag if t not in asked and t[:5] not in asked_prefixes}
        if len(new_terms) < 2 and not unit.item and not unit.introduces_list:
            score *= 0.25  # says nothing the question did not ("Mitosis differs from meiosis.")
        elif _CAPTION.match(unit.text) or (len(unit.text.split()) < 6 and not unit.item):
            score *= 0.4  # a caption or a heading ("Table 1 Clinical features in ...")
        if form == "number":
            score *= 1.25 if states_number(unit.text) else 0.8
        elif form == "definition" and defines(unit.text, subject_order):
            # "X heißt kompakt, wenn ...", "f heißt stetig :⇔", "is called .. if": what it
            # defines is the question's last word, said of whatever the text names it by
            # ("A ⊆ X heißt abgeschlossen, wenn" for "eine Teilmenge A ... abgeschlossen")
            score *= 3.0
        elif form == "definition" and names(unit.text, subject_order):
            score *= 2.0
        elif form == "definition" and subject and subject <= set(bag):
            lead = terms(unit.text)[: len(subject) + 3]
            if subject & set(lead):
                words = unit.text.split()
                opening = " ".join(words[: len(subject) + 4])
                first = terms(opening)[:1]
                if (
                    first
                    and first[0] in subject
                    and subject <= set(terms(opening))
                    and _COPULA.search(opening)
                ):
                    score *= 2.0  # opens with what it defines: "Duck is the common name ..."
                elif _COPULA.search(" ".join(words[:12])):
                    score *= 1.2
        elif form == "list" and (unit.item or unit.introduces_list):
            score *= 1.15
        elif form == "list" and _counts_asked(unit.text, asked):
            score *= 1.3  # counts what is asked for: "Fat bytecodes have two advantages:
            # fewer bytecodes ..., and ...", "we followed two main steps."
        if unit.text.rstrip().endswith("?"):
            score *= 0.3  # a question in the text ("How many regions are there?") asks, it
            # does not answer
        if form != "list" and unit.text.rstrip().endswith(":"):
            score *= 0.5  # an introduction without its items ("... in four stages:")
        eligible = lexical >= min_lexical or (semantic is not None and semantic >= min_semantic)
        entry = ScoredSentence(
            label=sources[unit.source_index].label,
            source_index=unit.source_index,
            position=unit.position,
            text=unit.text,
            lexical=lexical,
            semantic=semantic,
            score=score,
            item=unit.item,
        )
        if eligible:
            scored.append(entry)
            eligible_at[index] = entry
    if not scored:
        return ExtractiveAnswer([], form)
    ranked = sorted(scored, key=lambda s: (-s.score, s.source_index, s.position))
    best = ranked[0].score
    if form == "list":
        chosen = _list_answer(units, bags, ranked, eligible_at, sources, max_items=max_items)
        if not chosen:  # no list addresses the question: the best sentences
            chosen = _best(
                ranked, floor=floor * best, limit=3, other_floor=other_floor * best, asked=asked
            )
    elif form == "comparison":
        chosen = _comparison_answer(question, ranked, max_sentences=max(max_sentences, 4))
    else:
        # the best unit introduces a list ("By the end of this chapter, you should be able
        # to ..."): the list is the answer, whatever the question's form
        chosen = (
            _list_answer(units, bags, ranked[:1], eligible_at, sources, max_items=max_items)
            if form != "number" and not ranked[0].item  # an item alone stays an item
            else []
        ) or _best(
            ranked,
            floor=floor * best,
            limit=max_sentences,
            other_floor=other_floor * best,
            asked=asked,
        )
        if form == "number" and not any(states_number(s.text) for s in chosen):
            stating = [s for s in ranked if states_number(s.text) and s.score >= 0.3 * best]
            if stating:
                chosen = [stating[0], *chosen][:max_sentences]
    group_rank: dict[int, int] = {}
    for picked in chosen:
        group_rank.setdefault(picked.source_index, len(group_rank))
    chosen.sort(key=lambda s: (group_rank[s.source_index], s.position))
    if form != "list":
        chosen = _followed_on(chosen, units, sources, limit=max_sentences + 2)
    chosen = _enumerated(chosen, units, sources)
    if form != "list":
        chosen = _with_sub_items(chosen, units, sources)
    return ExtractiveAnswer(_completed(chosen, units), form)


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
) -> list[ScoredSentence]:
    """The best sentences (``leads`` of them) each with the next one of its source when that
    one goes on about it ("Our friend Mojo stands next to the ladder. He is an intelligent
    monkey."): what a pronoun refers to is only in the sentence before, so term overlap never
    finds it. Past ``limit`` sentences, the weakest other sentence makes room."""
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
            or not _FOLLOW_ON.match(following.text)
        ):
            continue
        out.append(_quoted(following, sources))
        taken.add((lead.source_index, lead.position + 1))
        others = [c for c in ranked[leads:] if c in out]
        if len(out) > limit and others:
            out.remove(others[-1])
    return sorted(out, key=lambda c: (c.source_index != best.source_index, c.source_index,
                                      c.position))  # fmt: skip


_ORDINAL = re.compile(
    r"^\s*(?:first(?:ly)?|second(?:ly)?|third(?:ly)?|fourth(?:ly)?|fifth(?:ly)?|sixth|"
    r"finally|lastly|erstens|zweitens|drittens|viertens|schließlich|\(?[ivx]{1,4}\))\b",
    re.IGNORECASE,
)
_OPENS_ENUMERATION = re.compile(r"^\s*(?:first(?:ly)?|erstens|zunächst|\(?i\))\b", re.IGNORECASE)


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
    held = {t[:5] for other in chosen for t in other}
    return any(t in asked and t[:5] not in held for t in bag)


def _with_sub_items(
    chosen: Sequence[ScoredSentence],
    units: Sequence[SourceUnit],
    sources: Sequence[SourceText],
    *,
    most: int = 6,
) -> list[ScoredSentence]:
    """A chosen item with the items nested under it ("Proprietary name should appear in
    UPPER CASE in 3 places" / "- Twice in Highlights" / "- Once in product title"): they say
    what it announces."""
    index_of = {(u.source_index, u.position): i for i, u in enumerate(units)}
    taken = {(c.source_index, c.position) for c in chosen}
    out: list[ScoredSentence] = []
    for picked in chosen:
        out.append(picked)
        at = index_of.get((picked.source_index, picked.position))
        if at is None or not units[at].item:
            continue
        depth = units[at].depth
        for unit in units[at + 1 : at + 1 + most]:
            if unit.source_index != picked.source_index or not unit.item or unit.depth <= depth:
                break
            if (unit.source_index, unit.position) in taken:
                continue
            taken.add((unit.source_index, unit.position))
            out.append(_quoted(unit, sources))
    return out


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
    """A table row as ``table_rows`` writes it: "header: cell; header: cell; ..."."""
    return text.count("; ") >= 2 and text.count(": ") >= 3


def _is_heading(unit: SourceUnit) -> bool:
    """A heading or a caption: a few words without a stop, not a list item."""
    return not unit.item and len(unit.text.split()) < 6 and unit.text.rstrip()[-1:] not in ".!?:;"


def _enumerated(
    chosen: Sequence[ScoredSentence],
    units: Sequence[SourceUnit],
    sources: Sequence[SourceText],
    *,
    most: int = 6,
) -> list[ScoredSentence]:
    """A chosen sentence that announces a count ("we followed two main steps.") with the
    sentences of its source that enumerate them ("First, ...", "Second, ..."): the steps are
    the answer, and they rarely repeat the question's words."""
    if not chosen:
        return list(chosen)
    at = {(u.source_index, u.position): u for u in units}
    taken = {(c.source_index, c.position) for c in chosen}
    for announcing in sorted(chosen, key=lambda c: -c.score):
        following = at.get((announcing.source_index, announcing.position + 1))
        if (
            following is None
            or not _COUNT_WORD.search(announcing.text)
            or not _OPENS_ENUMERATION.match(following.text)
        ):
            continue
        extra: list[ScoredSentence] = []
        position, last = following.position, following.position
        while position - last <= 3 and len(extra) < most:
            unit = at.get((announcing.source_index, position))
            if unit is None:
                break
            if (position == following.position or _ORDINAL.match(unit.text)) and (
                announcing.source_index,
                position,
            ) not in taken:
                extra.append(_quoted(unit, sources))
                last = position
            position += 1
        out = [*chosen, *extra]
        order = {c.source_index: i for i, c in reversed(list(enumerate(chosen)))}
        return sorted(out, key=lambda c: (order[c.source_index], c.position))
    return list(chosen)


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
            if picked.item or _TERMINAL.search(text):
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


def _best(
    ranked: Sequence[ScoredSentence],
    *,
    floor: float,
    limit: int,
    other_floor: float | None = None,
    asked: Container[str] | None = None,
) -> list[ScoredSentence]:
    """The best units above ``floor``, skipping near-repeats of one already chosen. A unit of
    another source than the best one's needs ``other_floor`` and must hold a term of the
    question (``asked``) that no chosen unit holds: an answer cites what answers, not
    everything near it."""
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
            and (s.score < other_floor or (asked is not None and not _adds_asked(bag, bags, asked)))
        ):
            continue
        repeat = 1.0 if _is_table_row(s.text) else 0.6  # rows of a table share their
        # headers; one that differs in a value ("Layoff Temporary") is another fact
        if any(_jaccard(bag, other) >= repeat for other in bags):
            continue
        chosen.append(s)
        bags.append(bag)
    return chosen


def _list_answer(
    units: Sequence[SourceUnit],
    bags: Sequence[Counter[str]],
    ranked: Sequence[ScoredSentence],
    eligible_at: dict[int, ScoredSentence],
    sources: Sequence[SourceText],
    *,
    max_items: int,
) -> list[ScoredSentence]:
    """The list that answers: the best-scoring unit that introduces a list or is an item,
    with its sibling items; [] when no list addresses the question."""
    best = ranked[0].score
    index_of = {(u.source_index, u.position): i for i, u in enumerate(units)}
    for anchor in ranked:
        if anchor.score < 0.75 * best:  # a list well below the best unit answers something else
            break
        i = index_of[(anchor.source_index, anchor.position)]
        unit = units[i]
        if not (unit.item or unit.introduces_list):
            continue
        start = i
        if unit.item:  # back to the list's first item, and its introduction
            while (
                start > 0
                and units[start - 1].source_index == unit.source_index
                and (units[start - 1].item)
            ):
                start -= 1
            if (
                start > 0
                and units[start - 1].source_index == unit.source_index
                and (units[start - 1].introduces_list)
            ):
                start -= 1
        picked: list[ScoredSentence] = []
        j = start
        while (
            j < len(units)
            and units[j].source_index == unit.source_index
            and len(picked) <= (max_items)
        ):
            u = units[j]
            if j > start and not u.item:
                break
            entry = eligible_at.get(j) or _quoted(u, sources)
            picked.append(entry)
            j += 1
        if sum(1 for p in picked if p.item) >= 2:
            return picked
    return []


def _comparison_answer(
    question: str, ranked: Sequence[ScoredSentence], *, max_sentences: int
) -> list[ScoredSentence]:
    """Both sides: the best unit about each thing compared (one about both counts for both)."""
    named = [terms(side) for side in comparison_sides(question)]
    best = ranked[0].score
    chosen = _best(ranked, floor=0.5 * best, limit=2, other_floor=0.9 * best)
    if len(named) == 2:
        for side, other in ((named[0], named[1]), (named[1], named[0])):
            about = [s for s in ranked if _speaks_of(terms(s.text), side, other)]
            if about and not any(s in chosen for s in about) and about[0].score >= 0.25 * best:
                chosen.append(about[0])
    return chosen[:max_sentences]


def _speaks_of(words: list[str], side: list[str], other: list[str]) -> bool:
    """Whether ``words`` are about ``side`` of a comparison. When one side's name holds the
    other's ("USER" and "CURRENT_USER special registers", "force" and "net force"), a unit
    is about the side it names first, and "CURRENT USER" does not name "USER"."""
    if not side:
        return False
    if set(side) < set(other):
        first, rival = _first_named(words, side, other)
    elif set(other) < set(side):
        rival, first = _first_named(words, other, side)
    else:
        return bool(set(side) & set(words))
    return first is not None and (rival is None or first < rival)


def _first_named(
    words: list[str], short: list[str], long: list[str]
) -> tuple[int | None, int | None]:
    """Where ``words`` first name ``short`` alone, and where they first name ``long`` by the
    word that sets it apart ("current user" for "user" and "current user special register")."""
    n = len(short)
    at = next((i for i in range(len(long) - n + 1) if long[i : i + n] == short), None)
    if at is None:  # the short name's words are scattered in the long one
        alone = next((i for i, w in enumerate(words) if w in short), None)
        return alone, None
    marked, shift = (long[at - 1 : at + n], 1) if at else (long[: n + 1], 0)
    alone = whole = None
    for i in range(len(words) - n + 1):
        if words[i : i + n] != short:
            continue
        start = i - shift
        if start >= 0 and words[start : start + len(marked)] == marked:
            whole = start if whole is None else whole
        elif alone is None:
            alone = i
    return alone, whole


class OfflineAnswerer:
    """Answers from the sources alone: the units that answer, cited, streamed."""

    name = "offline"

    def __init__(
        self,
        *,
        embedder: Embedder | None = None,
        max_sentences: int = 4,
        words_per_chunk: int = 4,
        cache_floats: int = 8_000_000,  # 32 MB of vectors: 20,000 sentences of MiniLM
    ) -> None:
        self.embedder = embedder
        self.max_sentences = max_sentences
        self.words_per_chunk = max(1, words_per_chunk)
        # unit vectors by (model, text), least recently used first: a course's questions
        # keep meeting the same chunks, and embedding their sentences is most of an answer's
        # time on a CPU
        self._vectors: OrderedDict[tuple[str, str], NDArray[np.float32]] = OrderedDict()
        self.cache_floats = cache_floats

    async def answer(self, *, question: str, sources: Sequence[SourceText]) -> ExtractiveAnswer:
        """The extractive answer (unit similarity from the embedder when one is set)."""
        similarities: list[float] | None = None
        candidates = candidate_sentences(sources)
        if self.embedder is not None and candidates and question.strip():
            query = await self.embedder.embed_query(question)
            vectors = await self._unit_vectors(self.embedder, [c[2] for c in candidates])
            similarities = [float(v) for v in np.asarray(vectors @ query).ravel()]
        return extract_answer(
            question=question,
            sources=sources,
            similarities=similarities,
            max_sentences=self.max_sentences,
        )

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

    async def stream(
        self,
        *,
        system: str,
        messages: Sequence[ChatMessage],
        sources: Sequence[SourceText],
        web_search: bool = False,
    ) -> GenerationStream:
        """Stream the answer to the last user message (a follow-up takes the topic of the
        questions before it), a few words at a time."""
        from lectern_common.generation import Final, TextDelta, Verdict

        asked = [m.content for m in messages if m.role == "user"]
        question = resolve_follow_up(asked[-1], asked[:-1]) if asked else ""
        result = await self.answer(question=question, sources=sources)
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
