"""The answer-quality question set: its file format, loading with clear errors, and scoring.

A question file is JSON Lines, one question per line::

    {"id": "turner-03", "document": "turner-syndrome-review-2col.pdf",
     "question": "How common is Turner syndrome?", "kind": "number", "pages": [2],
     "evidence": "affects ∼1/2500 live female births",
     "facts": [["1/2500", "1 in 2500", "1 in 2,500"]], "follow_up_to": null}

``facts`` are groups of acceptable strings: a group counts as stated when the answer holds
any of them (case, white space, dashes and quotes normalised). ``pages`` are 1-based page
(or slide) numbers of ``document`` where the answer is stated; null for formats without
pages, where ``evidence`` (a verbatim fragment of the passage) locates it instead. A
question with ``follow_up_to`` is asked right after that one, in the same session.

An off-topic file holds questions the material cannot answer, which must be refused: JSON
Lines with ``id`` and ``question``, or plain text with one question per line.
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError, model_validator

QuestionKind = Literal[
    "fact",
    "number",
    "list",
    "definition",
    "comparison",
    "table",
    "why_how",
    "follow_up",
    "offtopic",
]


class DatasetError(ValueError):
    """A question file that cannot be used, with the file and line at fault."""


class AnswerQuestion(BaseModel):
    """One question whose answer the material states."""

    id: str = Field(min_length=1)
    document: str = Field(min_length=1, description="path relative to the documents folder")
    question: str = Field(min_length=1, max_length=4000)
    kind: QuestionKind = "fact"
    pages: list[int] | None = None
    evidence: str | None = None
    facts: list[list[str]] = Field(min_length=1)
    follow_up_to: str | None = None

    @model_validator(mode="after")
    def _usable(self) -> AnswerQuestion:
        if any(not group or not all(a.strip() for a in group) for group in self.facts):
            raise ValueError("every fact group needs at least one non-empty string")
        if self.pages is not None and any(p < 1 for p in self.pages):
            raise ValueError("pages are 1-based")
        if not self.pages and not self.evidence:
            raise ValueError("give the gold pages, or an evidence fragment for unpaged formats")
        return self


class OfftopicQuestion(BaseModel):
    """A question the material cannot answer.

    ``document`` and ``topic_word`` mark a near miss: a question that shares a word with that
    document (in the same sense) but asks what it does not say."""

    id: str
    question: str = Field(min_length=1, max_length=4000)
    document: str | None = None
    topic_word: str | None = None


def _json_lines(path: Path) -> Iterable[tuple[int, dict[str, object]]]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise DatasetError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DatasetError(f"{path}:{number}: not JSON: {exc.msg}") from exc
        if not isinstance(value, dict):
            raise DatasetError(f"{path}:{number}: expected a JSON object")
        yield number, value


def load_questions(path: Path) -> list[AnswerQuestion]:
    """The questions of ``path``; ``DatasetError`` names the line of any fault."""
    questions: list[AnswerQuestion] = []
    seen: dict[str, int] = {}
    for number, value in _json_lines(path):
        try:
            question = AnswerQuestion.model_validate(value)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'line'}: {e['msg']}" for e in exc.errors()
            )
            raise DatasetError(f"{path}:{number}: {problems}") from exc
        if question.id in seen:
            raise DatasetError(
                f"{path}:{number}: id {question.id!r} repeats line {seen[question.id]}"
            )
        if question.follow_up_to is not None and question.follow_up_to not in seen:
            raise DatasetError(
                f"{path}:{number}: follow_up_to {question.follow_up_to!r} must name a question "
                "on an earlier line"
            )
        seen[question.id] = number
        questions.append(question)
    if not questions:
        raise DatasetError(f"{path}: no questions")
    return questions


def load_offtopic(path: Path) -> list[OfftopicQuestion]:
    """Off-topic questions: JSON Lines (``id``, ``question``) or one question per line."""
    if path.suffix in (".jsonl", ".json"):
        out = []
        for number, value in _json_lines(path):
            try:
                out.append(OfftopicQuestion.model_validate(value))
            except ValidationError as exc:
                raise DatasetError(f"{path}:{number}: {exc.errors()[0]['msg']}") from exc
        return out
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise DatasetError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    return [
        OfftopicQuestion(id=f"offtopic-{i:02d}", question=line.strip())
        for i, line in enumerate((ln for ln in lines if ln.strip()), start=1)
    ]


def conversations(questions: Sequence[AnswerQuestion]) -> list[list[AnswerQuestion]]:
    """Questions grouped into sessions: a follow-up joins the session of the one it follows."""
    chains: list[list[AnswerQuestion]] = []
    chain_of: dict[str, int] = {}
    for question in questions:
        parent = question.follow_up_to
        if parent is not None and parent in chain_of and chains[chain_of[parent]][-1].id == parent:
            index = chain_of[parent]
            chains[index].append(question)
        else:
            index = len(chains)
            chains.append([question])
        chain_of[question.id] = index
    return chains


# --- scoring -----------------------------------------------------------------------------

_CITATION = re.compile(r"\s*\[(?:T|W)\d+\]")
_DASHES = str.maketrans(
    {c: "-" for c in "‐‑‒–—―−"} | {c: "'" for c in "‘’‛′"} | {c: '"' for c in "“”„″"}
    | {"∼": "~", "\u00a0": " "}
)  # fmt: skip


def normalise(text: str) -> str:
    """Case-folded, NFKC, dashes and quotes unified, citation labels removed, spaces collapsed."""
    text = _CITATION.sub("", text)
    text = unicodedata.normalize("NFKC", text).translate(_DASHES).casefold()
    return " ".join(text.split())


def _loose(text: str) -> str:
    """``normalise`` without spaces next to punctuation ("45, X" and "45,X" match)."""
    return re.sub(r"\s*([^\w\s])\s*", r"\1", normalise(text))


def holds(text: str, alternatives: Sequence[str]) -> bool:
    """Whether ``text`` states one of ``alternatives``."""
    plain, loose = normalise(text), _loose(text)
    return any(normalise(a) in plain or _loose(a) in loose for a in alternatives)


def fact_recall(answer: str, facts: Sequence[Sequence[str]]) -> float:
    """Share of the fact groups that the answer states."""
    return sum(1 for group in facts if holds(answer, group)) / len(facts)


#: an answer's first cited sentence or list item: up to its first citation mark ("[T1]",
#: "[T1, T2]") and the stop after it
_LEAD = re.compile(r"^.*?\[[TW]\d+(?:\s*,\s*[TW]\d+)*\][.!?:;]?", re.DOTALL)


def answer_lead(answer: str) -> str:
    """What an answer opens with: its text up to its first citation (all of it when it cites
    nothing). Whether the answer leads with the answer is the key-fact recall of this."""
    found = _LEAD.match(answer)
    return found.group(0) if found else answer


def holds_any_fact(text: str, facts: Sequence[Sequence[str]]) -> bool:
    """Whether ``text`` states at least one of the facts."""
    return any(holds(text, group) for group in facts)


@dataclass(frozen=True)
class SourceSeen:
    """A source of the final context, as the SSE ``sources`` event and the chunk API give it."""

    label: str
    chunk_id: str
    document_id: str
    page_start: int | None
    page_end: int | None
    slide: int | None
    text: str
    section: str | None = None
    score: float | None = None  # the re-ranker's
    #: the re-ranker's reader's answer span in ``text`` (``start``, ``end``, ``score``,
    #: ``null_score``), when it marked one
    answer: dict[str, Any] | None = None


def on_gold(source: SourceSeen, question: AnswerQuestion, gold_document_id: str | None) -> bool:
    """Whether a source is the gold passage: the gold document, on a gold page (or, for
    unpaged formats, holding the evidence)."""
    if gold_document_id is not None and source.document_id != gold_document_id:
        return False
    first = source.page_start if source.page_start is not None else source.slide
    last = source.page_end if source.page_end is not None else source.slide
    if question.pages and first is not None and last is not None:
        return any(first <= page <= last for page in question.pages)
    if question.evidence:
        return holds(source.text, [question.evidence])
    return holds_any_fact(source.text, question.facts)


@dataclass
class QuestionResult:
    """What one question got, and its scores."""

    id: str
    document: str
    kind: str
    question: str
    answer: str = ""
    refused: bool = False
    band: str | None = None
    confidence: float | None = None
    answered_by: str | None = None
    context_hit: bool = False
    fact_recall: float = 0.0
    #: key-fact recall of the answer's lead (``answer_lead``): does it open with the answer
    lead_fact_recall: float = 0.0
    cited: int = 0
    cited_precise: int = 0
    cited_gold: bool = False  # a citation is a source on a gold page
    sources: list[dict[str, object]] = field(default_factory=list)
    error: str | None = None
    first_token_ms: float | None = None
    total_ms: float | None = None

    @property
    def citation_precision(self) -> float | None:
        """Share of the cited chunks that hold a key fact (None when nothing was cited)."""
        return self.cited_precise / self.cited if self.cited else None


@dataclass
class Summary:
    """Overall figures of one run."""

    questions: int
    context_recall: float
    fact_recall: float
    citation_precision: float
    citation_on_gold: float
    lead_fact_recall: float
    answered: float
    answerable_refused: float
    offtopic: int
    offtopic_refused: float
    near_miss: int
    near_miss_refused: float
    bands: dict[str, int]
    offtopic_bands: dict[str, int]
    errors: int


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def summarise(results: Sequence[QuestionResult], offtopic: Sequence[QuestionResult]) -> Summary:
    """Overall figures: context recall, key-fact recall, citation precision, refusals.

    Citation precision pools the cited chunks of every answer (a chunk counts as precise
    when it holds a key fact of the question).
    """
    cited = sum(r.cited for r in results)
    near = [r for r in offtopic if r.document]  # near misses name the document they touch
    bands: dict[str, int] = {}
    for r in results:
        bands[r.band or "error"] = bands.get(r.band or "error", 0) + 1
    off_bands: dict[str, int] = {}
    for r in offtopic:
        off_bands[r.band or "error"] = off_bands.get(r.band or "error", 0) + 1
    return Summary(
        questions=len(results),
        context_recall=_mean([1.0 if r.context_hit else 0.0 for r in results]),
        fact_recall=_mean([r.fact_recall for r in results]),
        lead_fact_recall=_mean([r.lead_fact_recall for r in results]),
        citation_precision=sum(r.cited_precise for r in results) / cited if cited else 0.0,
        citation_on_gold=_mean([1.0 if r.cited_gold else 0.0 for r in results]),
        answered=_mean([0.0 if r.refused else 1.0 for r in results]),
        answerable_refused=_mean([1.0 if r.refused else 0.0 for r in results]),
        offtopic=len(offtopic),
        offtopic_refused=_mean([1.0 if r.refused else 0.0 for r in offtopic]),
        near_miss=len(near),
        near_miss_refused=_mean([1.0 if r.refused else 0.0 for r in near]),
        bands=bands,
        offtopic_bands=off_bands,
        errors=sum(1 for r in [*results, *offtopic] if r.error),
    )


def breakdown(results: Sequence[QuestionResult], *, by: str) -> dict[str, dict[str, float]]:
    """Per document (``by="document"``) or per kind: count, context recall, fact recall."""
    groups: dict[str, list[QuestionResult]] = {}
    for r in results:
        groups.setdefault(str(getattr(r, by)), []).append(r)
    return {
        key: {
            "n": len(group),
            "context_recall": _mean([1.0 if r.context_hit else 0.0 for r in group]),
            "fact_recall": _mean([r.fact_recall for r in group]),
            "lead_fact_recall": _mean([r.lead_fact_recall for r in group]),
            "cited_gold": _mean([1.0 if r.cited_gold else 0.0 for r in group]),
            "refused": _mean([1.0 if r.refused else 0.0 for r in group]),
        }
        for key, group in sorted(groups.items())
    }


# --- the development and test splits -------------------------------------------------------


@dataclass
class Split:
    """One part of a question set split by document: its questions, off-topic questions and
    the SHA-256 of its files (the test part's is frozen in ``FROZEN``)."""

    name: str
    questions: list[AnswerQuestion]
    offtopic: list[OfftopicQuestion]
    sha256: str

    @property
    def documents(self) -> set[str]:
        return {q.document for q in self.questions}

    @property
    def ids(self) -> set[str]:
        """The ids of its questions, answerable and off-topic."""
        return {q.id for q in self.questions} | {q.id for q in self.offtopic}


def split_hash(paths: Sequence[Path]) -> str:
    """SHA-256 over the files' names and bytes, in order."""
    digest = hashlib.sha256()
    for path in paths:
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def load_split(folder: Path) -> Split:
    """``folder/questions.jsonl`` and ``folder/offtopic.jsonl`` (the latter optional)."""
    questions_path, offtopic_path = folder / "questions.jsonl", folder / "offtopic.jsonl"
    questions = load_questions(questions_path)
    offtopic = load_offtopic(offtopic_path) if offtopic_path.is_file() else []
    files = [questions_path, *([offtopic_path] if offtopic_path.is_file() else [])]
    return Split(folder.name, questions, offtopic, split_hash(files))


def load_set(root: Path) -> list[Split]:
    """The splits of a question set folder (``dev/`` and ``test/``), checked to be split by
    document: no document has questions in two splits, and no id repeats across them."""
    splits = [load_split(root / name) for name in ("dev", "test") if (root / name).is_dir()]
    if not splits:
        raise DatasetError(f"{root}: no dev/ or test/ folder with a questions.jsonl")
    owner: dict[str, str] = {}
    ids: set[str] = set()
    for split in splits:
        for document in split.documents:
            if document in owner:
                raise DatasetError(
                    f"{root}: {document} has questions in both {owner[document]} and "
                    f"{split.name}: the split is by document"
                )
            owner[document] = split.name
        for qid in split.ids:
            if qid in ids:
                raise DatasetError(f"{root}: id {qid!r} is in two splits")
            ids.add(qid)
    return splits


def frozen_hash(root: Path) -> str | None:
    """The test split's recorded hash (``root/FROZEN``, ``test <sha256>``), if any."""
    path = root / "FROZEN"
    if not path.is_file():
        return None
    for line in path.read_text().splitlines():
        name, _, value = line.partition(" ")
        if name == "test" and value.strip():
            return value.strip()
    return None
