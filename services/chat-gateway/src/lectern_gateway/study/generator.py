"""Quiz questions from course material without a model: deterministic and grounded.

Every question comes from one sentence of one content chunk (its ``evidence``), so that the
chunk a question cites always holds its answer:

- a definition ("A prime number is a natural number greater than 1 that ...") gives a
  multiple-choice question (which term is described; the other options are terms the same
  material defines), a cloze short answer (the term blanked) or a true/false statement (the
  definition, or the definition with a sibling term swapped in);
- a sentence stating a number ("Turner syndrome affects 1 in 2500 live female births") gives
  a true/false statement (as written, or with the number changed), a multiple-choice question
  on the number, or a cloze short answer;
- a question/answer pair extracted at ingest (``qa`` chunks) is used first, as a short answer.

Questions are spread over the sections of the material (round robin, sections the student
struggles with first), so that ten questions never all come from one paragraph.
"""

from __future__ import annotations

import re
import uuid
import zlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from lectern_common.text import prefix_stem, split_sentences, stem, words
from lectern_common.topics import NOT_TOPICAL

QuestionKind = Literal["multiple_choice", "short_answer", "true_false"]
Difficulty = Literal["easy", "medium", "hard"]
KINDS: tuple[QuestionKind, ...] = ("multiple_choice", "short_answer", "true_false")
OPTIONS_BY_DIFFICULTY: dict[Difficulty, int] = {"easy": 3, "medium": 4, "hard": 5}

_ARTICLE = r"(?:(?:A|An|The)\s+)?"
_TERM = r"(?P<term>[^\W\d_][\w'’-]*(?:\s+[\w'’-]+){0,3}?)"
#: "A prime number is a natural number ...": the term, then what it is
_IS_A = re.compile(
    rf"^{_ARTICLE}{_TERM}\s+(?:is|are)\s+(?P<rest>(?:a|an|one of the|any)\s+.{{15,}})$"
)
#: "... is called / known as induction."
_CALLED = re.compile(
    r"^(?P<rest>.{15,}?)\s+(?:is|are)\s+(?:called|known as|named|termed)\s+"
    r"(?:an?\s+|the\s+)?(?P<term>[^,.;:()]{2,40}?)[.]?$"
)
_NOT_A_TERM = frozenset(
    "this that these those it they there he she we you i here which what who one each "
    "such its their his her our all some many most another other both".split()
)
_NUMBER = re.compile(r"(?<![\w.,/#])(\d{1,3}(?:,\d{3})+|\d+(?:\.\d+)?)(%?)(?![\w])")
#: a number that counts or measures something: "24 hours", "1 in 2500 live births", "40%"
_QUANTITY_AFTER = re.compile(r"^(?:%|\s*(?:in\s+[\d,]+\s+)?[^\W\d_]{3,})")
_MATH = re.compile(r"[=×≥≤<>+∑∏√^]|\b[a-z]\s*[−-]\s*\d|\b[nkmxy]\b")
#: instructions and exercises, not statements ("Prove that ...", "Draw a line ...")
_IMPERATIVE = re.compile(
    r"^(?:prove|show|let|draw|imagine|consider|suppose|find|compute|calculate|determine|"
    r"explain|describe|write|use|try|look|think|recall|note|see|take|assume|define|give|"
    r"make|list|compare|read|check|verify)\b",
    re.IGNORECASE,
)
_LABEL_BEFORE = re.compile(
    r"(?:table|tab|fig|figure|section|chapter|page|p|pp|no|step|eq|equation|exercise|"
    r"question|move|part|example|theorem|lemma|definition|line)\.?\s*$",
    re.IGNORECASE,
)
_SECTION_NUMBER = re.compile(r"^\s*(?:\d+(?:\.\d+)*\.?|[A-Z]\.|[IVX]+\.)\s+")
_QA = re.compile(r"^Q:\s*(?P<q>.+?)\s*\nA:\s*(?P<a>.+)$", re.DOTALL)
_BLANK = "_____"


@dataclass(frozen=True)
class SourceChunk:
    """A content chunk the quiz may draw from, with its provenance."""

    id: uuid.UUID
    document_id: uuid.UUID
    document_title: str
    kind: str
    text: str
    section_path: tuple[str, ...]
    page_start: int | None
    page_end: int | None
    parent_chunk_id: uuid.UUID | None = None

    @classmethod
    def from_row(cls, row: Any) -> SourceChunk:
        """From a row of ``study.repository.quiz_material``."""
        return cls(
            id=row["id"], document_id=row["document_id"], document_title=row["document_title"],
            kind=row["kind"], text=row["text"], section_path=tuple(row["section_path"] or ()),
            page_start=row["page_start"], page_end=row["page_end"],
            parent_chunk_id=row["parent_chunk_id"],
        )  # fmt: skip


@dataclass(frozen=True)
class Question:
    """A question with its answer, the sentence that holds it and where it came from."""

    kind: QuestionKind
    prompt: str
    answer: str
    evidence: str
    chunk: SourceChunk
    options: list[str] = field(default_factory=list)
    accepted: list[str] = field(default_factory=list)
    explanation: str = ""

    @property
    def id(self) -> str:
        """Stable per chunk, kind and prompt."""
        return str(uuid.uuid5(self.chunk.id, f"{self.kind}:{self.prompt}"))

    @property
    def section(self) -> str | None:
        """The innermost heading of the chunk, or None."""
        return self.chunk.section_path[-1] if self.chunk.section_path else None

    @property
    def topic(self) -> str:
        """What the question is about, for memory: the section heading without its number,
        else the document title."""
        return topic_of(self.chunk)

    @property
    def pages(self) -> list[int]:
        """The pages of the cited chunk."""
        start, end = self.chunk.page_start, self.chunk.page_end
        if start is None:
            return []
        return list(range(start, (end or start) + 1))


def topic_of(chunk: SourceChunk) -> str:
    """A chunk's topic: its innermost heading without a section number, else its title."""
    if chunk.section_path:
        heading = _SECTION_NUMBER.sub("", chunk.section_path[-1]).strip()
        if heading:
            return heading
    return chunk.document_title


@dataclass(frozen=True)
class Fact:
    """A sentence worth asking about: a definition or a stated number."""

    kind: Literal["definition", "number"]
    sentence: str
    chunk: SourceChunk
    term: str = ""
    rest: str = ""
    number: str = ""
    number_at: int = -1

    @property
    def score(self) -> float:
        """How good a question it makes: a definition, then a sentence about its section."""
        base = 2.0 if self.kind == "definition" else 1.0
        heading = set(_content_words(topic_of(self.chunk)))
        shared = len(heading & set(_content_words(self.sentence)))
        return base + 0.5 * min(shared, 2)


def _content_words(text: str) -> list[str]:
    found = words(text.casefold(), digits=False)
    return [w for w in found if len(w) >= 4 and w not in _NOT_A_TERM]


def _clean(sentence: str) -> str:
    return " ".join(sentence.split())


def _usable(sentence: str) -> bool:
    words = sentence.split()
    return (
        8 <= len(words) <= 45
        and sentence[:1].isupper()
        and sentence.rstrip()[-1:] == "."
        and "?" not in sentence
        and sentence.count("|") == 0
        and not _IMPERATIVE.match(sentence)
        and not _MATH.search(sentence)
    )


def definition(sentence: str) -> tuple[str, str] | None:
    """(term, what it is) when ``sentence`` defines a term, else None."""
    for pattern in (_IS_A, _CALLED):
        match = pattern.match(sentence.rstrip())
        if match is None:
            continue
        term = match.group("term").strip(" \"'“”")
        first = term.split()[0].casefold() if term else ""
        if not term or first in _NOT_A_TERM or len(term) > 40 or term.casefold() in _NOT_A_TERM:
            continue
        rest = match.group("rest").strip().rstrip(".")
        return term, rest
    return None


def stated_number(sentence: str) -> tuple[str, int] | None:
    """The first number a sentence states (not a label such as "Table 2"), and where."""
    for match in _NUMBER.finditer(sentence):
        if _LABEL_BEFORE.search(sentence[: match.start()]):
            continue
        if not _QUANTITY_AFTER.match(sentence[match.end() :]):
            continue  # an index or a label ("n = 1", "Domino 3"), not a quantity
        return match.group(0), match.start()
    return None


def facts_of(chunk: SourceChunk) -> list[Fact]:
    """The definitions and numeric statements of a chunk, in reading order."""
    out: list[Fact] = []
    for raw in split_sentences(chunk.text):
        sentence = _clean(raw)
        if not _usable(sentence):
            continue
        defined = definition(sentence)
        if defined is not None:
            out.append(Fact("definition", sentence, chunk, term=defined[0], rest=defined[1]))
            continue
        number = stated_number(sentence)
        if number is not None:
            out.append(Fact("number", sentence, chunk, number=number[0], number_at=number[1]))
    return out


def _seed(text: str) -> int:
    return zlib.crc32(text.encode("utf-8"))


def changed_number(number: str, seed: int) -> str:
    """A plausible wrong value for ``number`` (deterministic per seed)."""
    percent = number.endswith("%")
    digits = number.rstrip("%").replace(",", "")
    grouped = "," in number
    value = float(digits)
    decimals = len(digits.split(".")[1]) if "." in digits else 0
    if decimals == 0 and 1000 <= value <= 2100:  # a year
        candidates = [value + d for d in (-20, -10, 10, 20, -5, 5)]
    elif value == 0:
        candidates = [1.0, 2.0, 5.0, 10.0]
    else:
        candidates = [value * f for f in (2, 0.5, 3, 1.5, 10)] + [value + 1, value - 1]
    if percent:
        candidates = [c for c in candidates if 0 < c <= 100] or [min(100.0, value + 10)]
    candidates = [c for c in candidates if c != value and c >= 0]
    chosen = candidates[seed % len(candidates)]
    text = f"{chosen:.{decimals}f}" if decimals else str(round(chosen))
    if grouped and decimals == 0:
        text = f"{round(chosen):,}"
    if text.rstrip("%") == digits:
        text = str(round(value) + 1)
    return text + ("%" if percent else "")


def _number_options(fact: Fact, count: int) -> list[str]:
    seed = _seed(fact.sentence)
    options = [fact.number]
    step = 0
    while len(options) < count and step < 20:
        candidate = changed_number(fact.number, seed + step)
        if candidate not in options:
            options.append(candidate)
        step += 1
    return _shuffled(options, seed)


def _shuffled(options: list[str], seed: int) -> list[str]:
    rotation = seed % len(options)
    return options[rotation:] + options[:rotation]


def _with_number(fact: Fact, number: str) -> str:
    end = fact.number_at + len(fact.number)
    return fact.sentence[: fact.number_at] + number + fact.sentence[end:]


def _where(chunk: SourceChunk) -> str:
    place = topic_of(chunk)
    if chunk.page_start is not None:
        place += f", p.{chunk.page_start}"
    return place


def _explained(fact: Fact) -> str:
    return f"{fact.sentence} (See {_where(fact.chunk)}.)"


def question_from(
    fact: Fact,
    kind: QuestionKind,
    *,
    sibling_terms: Sequence[str],
    options: int,
) -> Question | None:
    """A question of ``kind`` about ``fact``, or None when the fact cannot give one."""
    seed = _seed(fact.sentence)
    explanation = _explained(fact)
    if fact.kind == "definition":
        term = fact.term
        others = [t for t in sibling_terms if t.casefold() != term.casefold()]
        if kind == "multiple_choice":
            if len(others) < options - 1:
                return None
            start = seed % len(others)
            picked = (others[start:] + others[:start])[: options - 1]
            return Question(
                kind, f"Which term is described here: “{fact.rest}”?", term, fact.sentence,
                fact.chunk, options=_shuffled([term, *picked], seed), explanation=explanation,
            )  # fmt: skip
        if kind == "short_answer":
            blanked = re.sub(re.escape(term), _BLANK, fact.sentence, count=1)
            if _BLANK not in blanked:
                return None
            return Question(
                kind, f"Fill in the blank: {blanked}", term, fact.sentence, fact.chunk,
                accepted=[term], explanation=explanation,
            )  # fmt: skip
        if seed % 2 == 0 or not others:
            statement, truth = fact.sentence, "true"
        else:
            swapped = re.sub(re.escape(term), others[seed % len(others)], fact.sentence, count=1)
            statement, truth = swapped, "false" if swapped != fact.sentence else "true"
        return Question(
            "true_false", f"True or false: {statement}", truth, fact.sentence, fact.chunk,
            options=["true", "false"], explanation=explanation,
        )  # fmt: skip
    if kind == "multiple_choice":
        choices = _number_options(fact, options)
        if len(choices) < options:
            return None
        prompt = f"Fill in the blank: {_with_number(fact, _BLANK)}"
        return Question(
            kind, prompt, fact.number, fact.sentence, fact.chunk, options=choices,
            explanation=explanation,
        )  # fmt: skip
    if kind == "short_answer":
        return Question(
            kind, f"Fill in the blank: {_with_number(fact, _BLANK)}", fact.number,
            fact.sentence, fact.chunk, accepted=[fact.number], explanation=explanation,
        )  # fmt: skip
    if seed % 2 == 0:
        statement, truth = fact.sentence, "true"
    else:
        statement, truth = _with_number(fact, changed_number(fact.number, seed)), "false"
    return Question(
        "true_false", f"True or false: {statement}", truth, fact.sentence, fact.chunk,
        options=["true", "false"], explanation=explanation,
    )  # fmt: skip


_YEAR = re.compile(r"^(?:1[0-9]|20)\d\d$")
_KEY_WORD = re.compile(r"(?<![\w-])[a-z][a-z'’-]{3,}(?![\w-])")
#: words that frame a statement rather than say it (connectives, hedges, evaluations): a
#: blank on one tests reading, not understanding ("It is, however, _____ that ...")
_FRAMING = frozenset(
    """however therefore thus hence moreover furthermore nevertheless nonetheless whereas
    noteworthy notable notably important importantly interesting interestingly remarkable
    indeed rather instead also especially particularly relatively generally usually typically
    often likely possibly probably perhaps clearly simply mainly largely mostly respectively
    accordingly consequently additionally similarly finally first second third""".split()
)
_LABELS = re.compile(r"\s*\[(?:T|W)\d+\]")


def _key(word: str) -> str:
    """A word as the question and the passage are compared by: its stem's first five letters
    ("cells" and "cell", "limiting" and "limits")."""
    return prefix_stem(stem(word.casefold()))


def statement_check(sentence: str, chunk: SourceChunk, *, asked: str) -> Question | None:
    """A check question on the statement an answer rests on (``sentence`` of ``chunk``),
    after the student asked ``asked``: the defined term or the stated quantity blanked when
    the statement is a definition or states an amount (never a year: trivia, not
    understanding), else the statement's key word blanked: the word the passage keeps using
    that the question did not already give ("... unless a resultant _____ acts on it")."""
    text = _clean(_LABELS.sub("", sentence)).strip()
    if text and text[-1] not in ".!":
        text += "."
    if not 6 <= len(text.split()) <= 45 or "?" in text or "|" in text or _IMPERATIVE.match(text):
        return None
    if not text[:1].isupper() or _MATH.search(text):
        return None
    defined = definition(text)
    if defined is not None:
        fact = Fact("definition", text, chunk, term=defined[0], rest=defined[1])
        made = question_from(fact, "short_answer", sibling_terms=(), options=0)
        if made is not None:
            return made
    number = stated_number(text)
    if number is not None and not _YEAR.match(number[0]):
        fact = Fact("number", text, chunk, number=number[0], number_at=number[1])
        return question_from(fact, "short_answer", sibling_terms=(), options=0)
    given = {_key(w) for w in words(asked, digits=False)}
    passage = Counter(_key(w) for w in words(chunk.text, digits=False))
    candidates = [
        m
        for m in _KEY_WORD.finditer(text)
        if m.start() > 0  # not the sentence's first word: its subject, which the question names
        and m.group(0) not in NOT_TOPICAL
        and m.group(0) not in _NOT_A_TERM
        and m.group(0) not in _FRAMING
        and _key(m.group(0)) not in given
    ]
    if not candidates:
        return None
    best = max(candidates, key=lambda m: (passage[_key(m.group(0))], len(m.group(0))))
    word = best.group(0)
    prompt = f"Fill in the blank: {text[: best.start()]}{_BLANK}{text[best.end() :]}"
    return Question(
        "short_answer", prompt, word, text, chunk, accepted=[word],
        explanation=f"{text} (See {_where(chunk)}.)",
    )  # fmt: skip


def qa_question(chunk: SourceChunk, parent: SourceChunk | None) -> Question | None:
    """A short answer from an ingest-time question/answer pair (cites its passage)."""
    match = _QA.match(chunk.text.strip())
    if match is None:
        return None
    answer = _clean(match.group("a"))
    source = parent or chunk
    return Question(
        "short_answer", _clean(match.group("q")), answer, answer, source, accepted=[answer],
        explanation=f"{answer} (See {_where(source)}.)",
    )  # fmt: skip


@dataclass
class _Section:
    key: tuple[uuid.UUID, tuple[str, ...]]
    topic: str
    facts: list[Fact] = field(default_factory=list)
    prepared: list[Question] = field(default_factory=list)


def _sections(chunks: Sequence[SourceChunk]) -> list[_Section]:
    by_key: dict[tuple[uuid.UUID, tuple[str, ...]], _Section] = {}
    by_id = {c.id: c for c in chunks}
    for chunk in chunks:
        if chunk.kind == "qa":
            continue
        key = (chunk.document_id, chunk.section_path)
        section = by_key.setdefault(key, _Section(key, topic_of(chunk)))
        section.facts.extend(facts_of(chunk))
    for chunk in chunks:
        if chunk.kind != "qa":
            continue
        parent = by_id.get(chunk.parent_chunk_id) if chunk.parent_chunk_id else None
        question = qa_question(chunk, parent)
        if question is None:
            continue
        key = (question.chunk.document_id, question.chunk.section_path)
        by_key.setdefault(key, _Section(key, topic_of(question.chunk))).prepared.append(question)
    for section in by_key.values():
        section.facts.sort(key=lambda f: -f.score)  # stable: reading order among equals
    return [s for s in by_key.values() if s.facts or s.prepared]


def _spread(sections: list[_Section], focus: Sequence[str]) -> list[_Section]:
    """Sections in the order to draw from: those on a focus topic first, then the others
    interleaved from both ends of the material (so a short quiz still spans it)."""
    wanted = {t.casefold() for t in focus}
    first = [s for s in sections if s.topic.casefold() in wanted]
    rest = [s for s in sections if s.topic.casefold() not in wanted]
    if len(rest) <= 2:
        return first + rest
    stride = max(1, len(rest) // 2)
    order: list[_Section] = []
    seen: set[int] = set()
    for offset in range(stride):
        for index in range(offset, len(rest), stride):
            if index not in seen:
                seen.add(index)
                order.append(rest[index])
    return first + order


def generate(
    chunks: Sequence[SourceChunk],
    *,
    num_questions: int,
    kinds: Sequence[QuestionKind] = KINDS,
    difficulty: Difficulty = "medium",
    focus_topics: Sequence[str] = (),
) -> list[Question]:
    """Up to ``num_questions`` questions over ``chunks`` (see the module docstring)."""
    sections = _spread(_sections(chunks), focus_topics)
    if not sections or num_questions <= 0:
        return []
    options = OPTIONS_BY_DIFFICULTY[difficulty]
    terms = list(dict.fromkeys(f.term for s in sections for f in s.facts if f.kind == "definition"))
    questions: list[Question] = []
    prompts: set[str] = set()
    evidence: set[str] = set()
    cursor = {id(s): 0 for s in sections}
    slot = 0
    idle_rounds = 0
    while len(questions) < num_questions and idle_rounds < 2:
        progressed = False
        for section in sections:
            if len(questions) >= num_questions:
                break
            kind = kinds[slot % len(kinds)]
            made = _next_question(section, kind, kinds, cursor, terms, options, evidence)
            if made is None or made.prompt in prompts:
                continue
            slot += 1
            questions.append(made)
            prompts.add(made.prompt)
            evidence.add(made.evidence)
            progressed = True
        idle_rounds = 0 if progressed else idle_rounds + 1
    return questions


def _next_question(
    section: _Section,
    kind: QuestionKind,
    kinds: Sequence[QuestionKind],
    cursor: dict[int, int],
    terms: Sequence[str],
    options: int,
    evidence: set[str],
) -> Question | None:
    """The section's next unused question, of ``kind`` if it can, else of another kind."""
    while section.prepared:
        prepared = section.prepared.pop(0)
        if prepared.kind in kinds and prepared.evidence not in evidence:
            return prepared
    while cursor[id(section)] < len(section.facts):
        fact = section.facts[cursor[id(section)]]
        cursor[id(section)] += 1
        if fact.sentence in evidence:
            continue
        for candidate in (kind, *[k for k in kinds if k != kind]):
            made = question_from(fact, candidate, sibling_terms=terms, options=options)
            if made is not None:
                return made
    return None


def passages(
    chunks: Sequence[SourceChunk], *, count: int, focus_topics: Sequence[str] = ()
) -> list[SourceChunk]:
    """Up to ``count`` chunks for a model to write questions from: one per section (the one
    stating most), sections spread over the material as ``generate`` spreads them."""
    out: list[SourceChunk] = []
    for section in _spread(_sections(chunks), focus_topics):
        if len(out) >= count:
            break
        if not section.facts:
            continue
        tally: dict[uuid.UUID, int] = {}
        for fact in section.facts:
            tally[fact.chunk.id] = tally.get(fact.chunk.id, 0) + 1
        best = max(tally, key=lambda chunk_id: tally[chunk_id])
        out.append(next(f.chunk for f in section.facts if f.chunk.id == best))
    return out
