"""Re-ranking domain logic: educational signals, near-duplicates, token budget, confidence.

Everything here is plain Python over the event contracts. The semantic score comes from a
``SemanticScorer`` (cross-encoder or bi-encoder, see ``scorers.py``), injected by the caller,
so the whole pipeline runs in unit tests with any scorer and in ``lectern eval`` without NATS.

Missing data gives neutral values (``NEUTRAL`` = 0.5) so that it neither helps nor hurts a
chunk: unknown grade on either side, a student with no subject/standards, unknown source,
no freshness date, no learning-style preference. The one exception is the issue's rule that a
chunk with no curriculum tags scores 0 for curriculum when the student has a curriculum.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

# re-exported: the band definition is shared with the gateway (lectern_common.education)
from lectern_common import metrics, reading
from lectern_common.bm25 import idf_weights
from lectern_common.education import BI_ENCODER_CALIBRATION as BI_ENCODER_CALIBRATION
from lectern_common.education import STYLE_CONTENT_TYPES as STYLE_CONTENT_TYPES
from lectern_common.education import BandThresholds as BandThresholds
from lectern_common.education import Calibration as Calibration
from lectern_common.education import ConfidenceWeights as ConfidenceWeights
from lectern_common.education import band_for as band_for
from lectern_common.events import (
    AnswerSpan,
    Candidate,
    Confidence,
    RankedChunk,
    RerankReply,
    RerankRequest,
    StudentContext,
)
from lectern_common.text import embedding_text, split_sentences, terms

ScorerName = Literal["cross-encoder", "bi-encoder"]

NEUTRAL = 0.5


class SemanticScorer(Protocol):
    """Query-passage relevance in 0..1, one score per text, in input order."""

    @property
    def name(self) -> ScorerName:
        """Which scorer this is, reported in the reply."""
        ...

    async def score(self, query: str, texts: Sequence[str]) -> list[float]:
        """Relevance of each text to the query, 0..1."""
        ...

    def count_tokens(self, text: str) -> int:
        """Tokens of a text with the scorer's tokenizer."""
        ...


@runtime_checkable
class SpanReader(Protocol):
    """What a scorer with a span head offers beside ``score`` (``scorers.ReaderScorer``): one
    read of each pair that also says where the answer is."""

    @property
    def spans(self) -> bool:
        """Whether its reads carry answer spans."""
        ...

    async def read(self, query: str, texts: Sequence[str]) -> Sequence[reading.Reading]:
        """One read of each (query, text) pair."""
        ...


@dataclass(frozen=True)
class SignalWeights:
    """Weights of the combined score (they need not sum to 1; the score is normalised)."""

    semantic: float = 0.40
    grade: float = 0.15
    curriculum: float = 0.15
    source_priority: float = 0.15
    freshness: float = 0.10
    content_type: float = 0.05

    def as_dict(self) -> dict[str, float]:
        """Signal name -> weight."""
        return {
            "semantic": self.semantic,
            "grade": self.grade,
            "curriculum": self.curriculum,
            "source_priority": self.source_priority,
            "freshness": self.freshness,
            "content_type": self.content_type,
        }


# The packaged reader's best probability over the candidates it read: below the midpoint the
# band is gap. bioasq-dev (bench/fit_rerank.py, 16 candidates read at 192 word pieces): at
# 0.05, 92% of bench/data/offtopic_questions.txt in the gap band against 0.9% of the answerable
# questions (0.10: 100% / 1.5%). The answer set's development split read again: at 0.05, 47%
# of its off-topic questions against 1.1% of its answerable ones, at 0.01 2.8% against 0.6%.
# But on the frozen test split, 0.05 refused 10% of the answerable questions (table-only
# documents: the reader was trained on no table) against 4% before the reader, so by the
# set's rule (a change that lowers test is reverted) the reader's gap stays where it refuses
# almost nothing answerable, and the answerer's fitted refusal decides the rest. The 3-layer
# reader (the re-ranker's since issue 58) is less sure at the far end: a question of nothing
# in the material reads ~0.013 where the 6-layer one read ~0.003, so at 0.01 it banded
# "How do I bake sourdough bread?" medium against a physics lesson. At 0.015 such questions
# gap again; the answer set's development split reads the same at 0.01, 0.015 and 0.02
# (key-fact 0.811, answerable refused 0.006), 0.02 refuses more of the test split's
# answerable questions (0.034 -> 0.041; test key-fact 0.700 at 0.01, 0.693 at 0.015, 0.679 at
# 0.02, make bench-answers 2026-12-02).
CROSS_ENCODER_CALIBRATION = Calibration(midpoint=0.015, scale=0.05)
# The bi-encoder's cosine misses what it cannot read ("the QCRTAUT system value",
# "Sierpińskiraum"): a kept chunk with one sentence that holds (idf-weighted) nearly all of
# the question's terms is evidence of its own. On the answer set (bench/answers) off-topic
# questions reach at most 0.55 of their terms in a sentence of the final context; answerable
# questions refused as gaps held 0.67-1.0.
LEXICAL_CALIBRATION = Calibration(midpoint=0.75, scale=0.03)


@dataclass(frozen=True)
class RelevanceModel:
    """How relevant a candidate is, from what the cross-encoder read and what retrieval
    found: a logistic model over the cross-encoder's logit, the retriever's fused order
    (``rank_prior``) and its best sentence's share of the question's terms
    (``sentence_match``). Fitted by ``bench/tune_rerank.py`` on bioasq-dev's training
    questions (listwise, the held-out fifth never seen) and shipped as
    ``relevance_model.json``."""

    reader: float
    prior: float
    match: float
    bias: float

    def __call__(self, probability: float, prior: float, match: float) -> float:
        """The relevance (0..1) of a candidate the cross-encoder scored ``probability``."""
        p = min(max(probability, 1e-9), 1 - 1e-9)
        z = self.reader * math.log(p / (1 - p)) + self.prior * prior + self.match * match
        return 1.0 / (1.0 + math.exp(-max(min(z + self.bias, 50.0), -50.0)))

    @classmethod
    def load(cls, path: Path) -> RelevanceModel:
        """Read a model written by ``bench/tune_rerank.py``."""
        data = json.loads(path.read_text())
        weights = data["weights"]
        return cls(
            float(weights["reader"]), float(weights["prior"]), float(weights["match"]),
            float(data["bias"]),
        )  # fmt: skip


RELEVANCE_MODEL_PATH = Path(__file__).with_name("relevance_model.json")
#: a cross-encoder's first candidates are enough when one reads at least this relevant
READ_ENOUGH = 0.5


def packaged_relevance() -> RelevanceModel | None:
    """The fitted relevance model shipped with the re-ranker (None before one is fitted)."""
    if not RELEVANCE_MODEL_PATH.is_file():
        return None
    return RelevanceModel.load(RELEVANCE_MODEL_PATH)


@dataclass(frozen=True)
class RerankConfig:
    """Everything the re-ranking pipeline is tuned by."""

    weights: SignalWeights = field(default_factory=SignalWeights)
    bands: BandThresholds = field(default_factory=BandThresholds)
    confidence: ConfidenceWeights = field(default_factory=ConfidenceWeights)
    calibrations: Mapping[str, Calibration] = field(
        default_factory=lambda: {
            "bi-encoder": BI_ENCODER_CALIBRATION,
            "cross-encoder": CROSS_ENCODER_CALIBRATION,
        }
    )
    #: retrieval confidence from the kept chunks' best ``sentence_match`` (None: cosine only)
    lexical_calibration: Calibration | None = LEXICAL_CALIBRATION
    #: grounding is assumed until the gateway measures it: the band an answer opens in
    #: (and its preamble) says what retrieval found; checking the answer can only lower it
    grounding_prior: float = 1.0
    duplicate_overlap: float = 0.80
    # The bi-encoder is the retriever's own dense model: its cosine is a signal the fused
    # hybrid order already holds, and weighing it again tilts that order back towards dense
    # alone (bioasq-dev nDCG@10 through `lectern eval`, hybrid 0.8479: share of the fused
    # order 0.9 -> 0.8465, and 0.5 -> 0.830 in bench/tune_rerank.py). With the bi-encoder the
    # relevance is therefore the fused order; educational signals still move chunks, and the
    # cosine drives the calibrated retrieval confidence. A cross-encoder reads query and
    # chunk together, a signal of its own, so it ranks alone.
    rank_prior_weight: Mapping[str, float] = field(
        default_factory=lambda: {"bi-encoder": 1.0, "cross-encoder": 0.0}
    )
    # A long chunk that holds the answer in one sentence among many scores like its
    # neighbours on the whole-chunk signals; its best sentence's share of the question's
    # terms finds it (``sentence_match``). Share of it in the relevance, per scorer: with the
    # bi-encoder, 0.25 of it and 0.75 of the fused order (bench/tune_rerank.py, bioasq-dev
    # nDCG@10: fused order 0.8415, 0.2 -> 0.8491, 0.25 -> 0.8487, 0.5 -> 0.8356; on the
    # answer set a fact-holding chunk came first for 77 of 102 questions instead of 67). A
    # cross-encoder reads the sentences itself.
    sentence_match_weight: Mapping[str, float] = field(
        default_factory=lambda: {"bi-encoder": 0.25, "cross-encoder": 0.0}
    )
    #: a cross-encoder's relevance from its logit, the fused order and the sentence match
    #: (None: its probability alone, as for a cross-encoder the model was not fitted with)
    relevance: RelevanceModel | None = field(default_factory=packaged_relevance)
    #: how many candidates, first of the fused order, a cross-encoder reads (None: all);
    #: the others follow them in the fused order. What a turn costs is what is read: about
    #: 0.1 ms of a core a word piece with the 6-layer reader (0.05 with the shipped 3-layer
    #: one), so 16 candidates at 192 pieces were 0.25 s of CPU a turn, more than the rest of
    #: the turn together (issue 58). bioasq-dev's held-out questions (bench/fit_rerank.py,
    #: nDCG@10; the fused order 0.850), 3-layer reader at 192 pieces: 4 read 0.867, 6 0.869,
    #: 8 0.872, 10 0.872 (the 6-layer one: 6 read 0.872, 8 0.876, 16 0.887); shorter reads
    #: cost less but lose the answer of a course chunk (~150 words): 8 at 96 pieces gave
    #: 0.872 on bioasq's abstracts, yet refused answerable questions of the answer set whose
    #: gold chunk it read first (dev 0.011 -> 0.028): the reader scores a cut chunk as not
    #: answering
    cross_encoder_candidates: int | None = 8
    #: of those, a cross-encoder may read the first ``cross_encoder_read_first`` and the
    #: others only when none of the first reads as relevant (a probability under
    #: ``READ_ENOUGH``, even odds, set before measuring); unread, they follow in the fused
    #: order (None, the default: all at once). 4 read 0.52 of bioasq's candidates, held-out
    #: nDCG@10 0.8689 -> 0.8641, and cost the answer set's dev split key-fact 0.814 -> 0.788
    #: (test 0.672 -> 0.679): a setting for a platform that would rather pay that for the CPU
    #: (docs/benchmarks.md, "Thirty-seventh session")
    cross_encoder_read_first: int | None = None
    #: a cross-encoder reads each candidate's ``reading_window`` at its length (the sentences
    #: around the question's terms) rather than the candidate's opening: a chunk longer than
    #: the length is read where the question's words are, not cut at its opening.
    #: bioasq-dev held-out nDCG@10, 6 read at 192: 0.872 against 0.871 for openings (its
    #: abstracts state their subject first); at 64 pieces, 4 read: 0.865 against 0.859
    reading_window: bool = True


# --- educational signals -------------------------------------------------------------------


def grade_match(chunk_grade: int | None, student_grade: int | None) -> float:
    """1.0 same grade, 0.7 one away, 0.3 two away, 0 beyond; neutral when either is unknown."""
    if chunk_grade is None or student_grade is None:
        return NEUTRAL
    distance = abs(chunk_grade - student_grade)
    return {0: 1.0, 1: 0.7, 2: 0.3}.get(distance, 0.0)


def _norm(value: str) -> str:
    return " ".join(value.lower().replace("_", " ").replace("-", " ").split())


def curriculum_match(
    *,
    chunk_standards: Sequence[str],
    chunk_subject: str | None,
    student_standards: Sequence[str],
    student_subject: str | None,
) -> float:
    """1.0 a shared standard, 0.5 same subject, 0 untagged or unrelated; neutral if no target."""
    if not student_standards and not student_subject:
        return NEUTRAL
    wanted = {s.strip().lower() for s in student_standards}
    if wanted and wanted & {s.strip().lower() for s in chunk_standards}:
        return 1.0
    if student_subject and chunk_subject and _norm(student_subject) == _norm(chunk_subject):
        return 0.5
    return 0.0


SOURCE_TIERS: dict[str, float] = {
    "official": 0.5,
    "official textbook": 0.5,
    "textbook": 0.5,
    "supplementary": 0.3,
    "web": 0.1,
}
TEACHER_ROLES = frozenset({"teacher", "instructor"})


def _tier_value(raw: Any) -> float | None:
    if isinstance(raw, bool):
        return None
    if isinstance(raw, int | float):
        return min(max(float(raw), 0.0), 1.0)
    if isinstance(raw, str):
        return SOURCE_TIERS.get(_norm(raw))
    return None


def source_priority(metadata: Mapping[str, Any], student: StudentContext) -> float:
    """1.0 the student's teacher for this class, 0.7 a teacher, else the source tier.

    Tiers: official textbook 0.5, supplementary 0.3, web 0.1, from ``source_priority``
    (a number in 0..1 or a tier name) or ``source_type``. The highest applicable value wins;
    with nothing known the value is neutral.
    """
    uploader = metadata.get("uploaded_by")
    role = str(metadata.get("uploader_role") or "").lower()
    chunk_class = metadata.get("class_id")
    own_teacher = uploader is not None and str(uploader) in student.teacher_ids
    is_teacher = own_teacher or role in TEACHER_ROLES
    same_class = student.class_id is not None and chunk_class == student.class_id
    values: list[float] = []
    if (own_teacher and (chunk_class is None or same_class)) or (is_teacher and same_class):
        values.append(1.0)
    elif is_teacher:
        values.append(0.7)
    for key in ("source_priority", "source_type"):
        tier = _tier_value(metadata.get(key))
        if tier is not None:
            values.append(tier)
    return max(values) if values else NEUTRAL


_CATEGORY_SUBJECTS: dict[str, tuple[str, ...]] = {
    "mathematics": (
        "mathematics", "math", "maths", "algebra", "geometry", "calculus", "statistics",
        "trigonometry", "arithmetic",
    ),
    "stem": (
        "science", "biology", "chemistry", "physics", "computer science", "computing",
        "engineering", "technology", "medicine", "biomedical", "health", "earth science",
        "astronomy", "environmental science", "stem",
    ),
    "humanities": (
        "history", "literature", "english", "philosophy", "art", "arts", "music", "religion",
        "languages", "language arts", "geography", "social studies", "humanities", "economics",
    ),
    "current events": ("current events", "news", "civics", "politics", "current affairs"),
}  # fmt: skip
SUBJECT_CATEGORIES: dict[str, str] = {
    subject: category for category, names in _CATEGORY_SUBJECTS.items() for subject in names
}
HORIZON_MONTHS: dict[str, float] = {
    "stem": 48.0,
    "humanities": 72.0,
    "mathematics": 120.0,
    "current events": 6.0,
    "default": 60.0,
}
FRESHNESS_FLOOR = 0.05
DAYS_PER_MONTH = 30.4375


def subject_category(subject: str | None) -> str:
    """The freshness category of a subject ("default" when unknown)."""
    if not subject:
        return "default"
    return SUBJECT_CATEGORIES.get(_norm(subject), "default")


def _as_date(value: Any) -> date | None:
    if isinstance(value, datetime):
        return value.date()
    if isinstance(value, date):
        return value
    if isinstance(value, str) and value:
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00")).date()
        except ValueError:
            return None
    return None


def freshness(freshness_date: Any, subject: str | None, *, today: date) -> float:
    """Linear decay from 1.0 to the floor over the subject's horizon; neutral without a date."""
    when = _as_date(freshness_date)
    if when is None:
        return NEUTRAL
    age_months = max((today - when).days, 0) / DAYS_PER_MONTH
    horizon = HORIZON_MONTHS[subject_category(subject)]
    return max(FRESHNESS_FLOOR, 1.0 - age_months / horizon)


def content_type_preference(content_type: str | None, student: StudentContext) -> float:
    """1.0 a preferred content type, 0.2 another one; neutral without a type or a preference."""
    preferred = {_norm(t) for t in student.preferred_content_types}
    if student.learning_style:
        preferred |= STYLE_CONTENT_TYPES.get(_norm(student.learning_style), frozenset())
    if not content_type or not preferred:
        return NEUTRAL
    return 1.0 if _norm(content_type) in preferred else 0.2


def _grade(value: Any) -> int | None:
    try:
        return None if value is None or isinstance(value, bool) else int(value)
    except (TypeError, ValueError):
        return None


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list | tuple):
        return [str(v) for v in value]
    return []


def educational_signals(
    candidate: Candidate, student: StudentContext, *, today: date
) -> dict[str, float]:
    """Every educational signal of a chunk for a student, from ``candidate.metadata``."""
    meta = candidate.metadata
    subject = meta.get("subject")
    content_type = meta.get("content_type") or (
        candidate.kind if candidate.kind in {"qa", "table"} else None
    )
    return {
        "grade": grade_match(_grade(meta.get("grade_level")), student.grade_level),
        "curriculum": curriculum_match(
            chunk_standards=_strings(meta.get("curriculum_standards")),
            chunk_subject=subject if isinstance(subject, str) else None,
            student_standards=student.curriculum_standards,
            student_subject=student.subject,
        ),
        "source_priority": source_priority(meta, student),
        "freshness": freshness(
            meta.get("freshness_date"),
            subject if isinstance(subject, str) else student.subject,
            today=today,
        ),
        "content_type": content_type_preference(
            content_type if isinstance(content_type, str) else None, student
        ),
    }


def combined_score(semantic: float, signals: Mapping[str, float], weights: SignalWeights) -> float:
    """Weighted mean of the semantic score and the educational signals."""
    parts = weights.as_dict()
    total = sum(parts.values()) or 1.0
    value = parts["semantic"] * semantic + sum(
        w * signals.get(name, NEUTRAL) for name, w in parts.items() if name != "semantic"
    )
    return value / total


def sentence_match(query: str, texts: Sequence[str]) -> list[float]:
    """For each text, the idf-weighted share of the query's terms found in its best sentence
    (0..1; idf over the sentences of all the texts): a long chunk whose one sentence answers
    scores as high as a short one that does."""
    query_terms = list(dict.fromkeys(terms(query)))
    if not query_terms or not texts:
        return [0.0 for _ in texts]
    bags = [[set(terms(s)) for s in (split_sentences(t) or [t])] for t in texts]
    idf = idf_weights(query_terms, [bag for sentences in bags for bag in sentences])
    ceiling = sum(idf.values()) or 1.0
    return [
        max((sum(idf[t] for t in query_terms if t in bag) / ceiling for bag in sentences),
            default=0.0)
        for sentences in bags
    ]  # fmt: skip


#: word pieces per word of English course text with the reader's tokenizer (measured over
#: the demo lessons and bioasq-dev: 1.3-1.5); a window is sized in words with it, and the
#: tokenizer's cut still holds the pair to its length
PIECES_PER_WORD = 1.4


def reading_window(query: str, text: str, *, pieces: int) -> str:
    """What a cross-encoder reads of a scoring text in ``pieces`` word pieces (the question's
    included): the text as it is when it fits, else its first line (the contextual prefix)
    and the run of sentences around the one that holds most of the question's terms, in
    their order. A cut at the length reads the chunk's opening only, and misses an answer
    further in; the window reads where the question's words are."""
    budget = int((pieces - 3) / PIECES_PER_WORD) - len(query.split())
    if len(text.split()) <= budget or budget <= 0:
        return text
    prefix, _, body = text.partition("\n") if "\n" in text else ("", "", text)
    budget -= len(prefix.split())
    sentences = split_sentences(body) or [body]
    if budget <= 0 or len(sentences) == 1:
        return text
    query_terms = list(dict.fromkeys(terms(query)))
    bags = [set(terms(s)) for s in sentences]
    idf = idf_weights(query_terms, bags)
    held = [sum(idf[t] for t in query_terms if t in bag) for bag in bags]
    best = max(range(len(sentences)), key=lambda i: (held[i], -i))
    sizes = [len(s.split()) for s in sentences]
    first = last = best
    used = sizes[best]
    # grow the window a sentence at a time, the following one first (an answer tends to
    # follow the sentence that names its subject), while it fits
    while True:
        grown = False
        for index in (last + 1, first - 1):
            if 0 <= index < len(sentences) and used + sizes[index] <= budget:
                used += sizes[index]
                first, last = min(first, index), max(last, index)
                grown = True
        if not grown:
            break
    window = " ".join(sentences[first : last + 1])
    return f"{prefix}\n{window}" if prefix else window


def locate_span(text: str, read: str, start: int, end: int) -> tuple[int, int] | None:
    """Where ``read[start:end]`` (a span of what the reader read: a reading window, the
    chunk's contextual prefix before it) lies in the chunk's ``text``: the occurrence that
    follows the same words as in ``read`` when the span's words occur more than once, spaces
    matched loosely (a window joins sentences with one space); None when the span is not in
    the text (it marked the prefix or the title)."""
    piece = read[start:end]
    words = piece.split()
    if not words:
        return None
    lead = len(piece) - len(piece.lstrip())
    pattern = r"\s+".join(re.escape(w) for w in words)
    found = list(re.finditer(pattern, text))
    if not found:
        return None
    if len(found) > 1:  # the one after the same words as in what was read
        before = read[max(0, start - 60) : start + lead].split()[-6:]

        def agreement(m: re.Match[str]) -> int:
            """How many words before the occurrence are those before the span, last first."""
            preceding = text[max(0, m.start() - 80) : m.start()].split()
            same = 0
            while same < min(len(before), len(preceding)) and (
                before[-1 - same] == preceding[-1 - same]
            ):
                same += 1
            return same

        found.sort(key=lambda m: -agreement(m))
    return found[0].start(), found[0].end()


def answer_spans(
    candidates: Sequence[Candidate], read: Sequence[str], readings: Sequence[reading.Reading]
) -> list[AnswerSpan | None]:
    """Each read candidate's best answer span in its chunk text (None: no span head, or the
    span marked what is not the chunk's text)."""
    out: list[AnswerSpan | None] = []
    for candidate, text, found in zip(candidates, read, readings, strict=True):
        where = None
        if found.start is not None and found.end is not None:
            where = locate_span(candidate.text, text, found.start, found.end)
        if where is None or found.span_score is None or found.null_score is None:
            out.append(None)
            continue
        out.append(
            AnswerSpan(
                start=where[0], end=where[1], score=round(found.span_score, 4),
                null_score=round(found.null_score, 4),
            )
        )  # fmt: skip
    return out


def rank_prior(position: int, count: int) -> float:
    """The retriever's order as a 0..1 score: 1 for the first candidate, falling linearly."""
    if count <= 1:
        return 1.0
    return 1.0 - position / (count - 1)


# --- near-duplicates and budget ------------------------------------------------------------

_WORD = re.compile(r"\w+", re.UNICODE)


def shingles(text: str, size: int = 3) -> frozenset[tuple[str, ...]]:
    """Word n-grams of a lower-cased text (the word set when it is shorter than n)."""
    words = _WORD.findall(text.lower())
    if len(words) < size:
        return frozenset((w,) for w in words)
    return frozenset(tuple(words[i : i + size]) for i in range(len(words) - size + 1))


def overlap(a: frozenset[tuple[str, ...]], b: frozenset[tuple[str, ...]]) -> float:
    """Containment of the smaller shingle set in the other (1.0: one repeats the other)."""
    if not a or not b:
        return 0.0
    return len(a & b) / min(len(a), len(b))


def drop_near_duplicates(
    texts: Sequence[str], *, threshold: float
) -> tuple[list[int], dict[int, int]]:
    """Indices to keep from texts in rank order (the first of overlapping texts wins), and
    each dropped index with the kept index it repeats."""
    kept: list[int] = []
    kept_shingles: list[frozenset[tuple[str, ...]]] = []
    twins: dict[int, int] = {}
    for i, text in enumerate(texts):
        sh = shingles(text)
        pairs = zip(kept, kept_shingles, strict=True)
        twin = next((k for k, other in pairs if overlap(sh, other) > threshold), None)
        if twin is not None:
            twins[i] = twin
            continue
        kept.append(i)
        kept_shingles.append(sh)
    return kept, twins


def fit_budget(token_counts: Sequence[int], *, budget: int) -> int:
    """How many of the ranked chunks fit: the lowest-ranked are dropped until the sum fits."""
    keep = len(token_counts)
    while keep > 0 and sum(token_counts[:keep]) > budget:
        keep -= 1
    return keep


# --- confidence ----------------------------------------------------------------------------


def confidence_of(
    *,
    top_semantic: float | None,
    kept_signals: Sequence[Mapping[str, float]],
    scorer: str,
    config: RerankConfig,
) -> Confidence:
    """Confidence from the top semantic score, the kept chunks' sources and the grounding prior.

    Retrieval is the calibrated top semantic score, or the calibrated best sentence match of
    the kept chunks when that is higher (where the match was measured: the bi-encoder).
    Source quality is the mean over kept chunks of (source priority + freshness) / 2.
    Grounding is the configured neutral prior until the gateway measures it after generation.
    """
    calibration = config.calibrations.get(scorer, BI_ENCODER_CALIBRATION)
    retrieval = calibration(top_semantic) if top_semantic is not None and kept_signals else 0.0
    matches = [s["sentence_match"] for s in kept_signals if "sentence_match" in s]
    # what the scorer cannot read (the reader was trained on no table): a sentence holding
    # nearly all the question's terms is evidence of its own
    if matches and config.lexical_calibration is not None:
        retrieval = max(retrieval, config.lexical_calibration(max(matches)))
    if kept_signals:
        quality = sum(
            (s.get("source_priority", NEUTRAL) + s.get("freshness", NEUTRAL)) / 2
            for s in kept_signals
        ) / len(kept_signals)
    else:
        quality = 0.0
    grounding = config.grounding_prior
    w = config.confidence
    total = (w.retrieval + w.source_quality + w.grounding) or 1.0
    score = (w.retrieval * retrieval + w.source_quality * quality + w.grounding * grounding) / total
    score = min(max(score, 0.0), 1.0)
    return Confidence(
        score=round(score, 6),
        band=band_for(score, retrieval, config.bands),
        retrieval=round(retrieval, 6),
        source_quality=round(quality, 6),
        grounding=grounding,
        grounding_is_prior=True,
    )


def with_grounding(
    confidence: Confidence,
    *,
    grounding: float,
    weights: ConfidenceWeights | None = None,
    thresholds: BandThresholds | None = None,
) -> Confidence:
    """The verdict again with a measured grounding in place of the prior (for the gateway)."""
    w = weights or ConfidenceWeights()
    total = (w.retrieval + w.source_quality + w.grounding) or 1.0
    score = (
        w.retrieval * confidence.retrieval
        + w.source_quality * confidence.source_quality
        + w.grounding * grounding
    ) / total
    score = min(max(score, 0.0), 1.0)
    return Confidence(
        score=round(score, 6),
        band=band_for(score, confidence.retrieval, thresholds or BandThresholds()),
        retrieval=confidence.retrieval,
        source_quality=confidence.source_quality,
        grounding=grounding,
        grounding_is_prior=False,
    )


# --- the pipeline --------------------------------------------------------------------------


def scoring_text(candidate: Candidate) -> str:
    """The text a scorer sees: the chunk with its contextual prefix, as ingest embedded it
    (``lectern_common.text.embedding_text``: a short chunk without its document's title)."""
    return embedding_text(candidate.text, candidate.context_prefix, candidate.title)


def rank_candidates(
    *,
    query: str = "",
    candidates: Sequence[Candidate],
    semantic: Sequence[float],
    student: StudentContext,
    scorer: str,
    config: RerankConfig,
    today: date,
    answers: Sequence[AnswerSpan | None] = (),
) -> list[RankedChunk]:
    """Every candidate with its signals and combined score (and its answer span, ``answers``
    in candidate order, when the scorer found them), best first (stable on ties)."""
    prior_weight = config.rank_prior_weight.get(scorer, 0.0)
    match_weight = config.sentence_match_weight.get(scorer, 0.0)
    model = config.relevance if scorer == "cross-encoder" else None
    wants_match = match_weight > 0 or model is not None
    matches = sentence_match(query, [c.text for c in candidates]) if wants_match else []
    ranked: list[RankedChunk] = []
    for position, (candidate, sem) in enumerate(zip(candidates, semantic, strict=True)):
        signals = educational_signals(candidate, student, today=today)
        relevance = sem
        if model is not None:
            signals["retrieval_rank"] = prior = rank_prior(position, len(candidates))
            signals["sentence_match"] = matches[position]
            relevance = model(sem, prior, matches[position])
        elif prior_weight > 0:
            prior = rank_prior(position, len(candidates))
            signals["retrieval_rank"] = prior
            relevance = (1 - prior_weight) * sem + prior_weight * prior
        if match_weight > 0:
            signals["sentence_match"] = matches[position]
            relevance = (1 - match_weight) * relevance + match_weight * matches[position]
        signals["relevance"] = relevance
        score = combined_score(relevance, signals, config.weights)
        ranked.append(
            RankedChunk(
                candidate=candidate, semantic=sem, signals=signals, score=round(score, 6),
                answer=answers[position] if position < len(answers) else None,
            )
        )  # fmt: skip
    order = sorted(range(len(ranked)), key=lambda i: -ranked[i].score)
    return [ranked[i] for i in order]


def read_texts(
    query: str, candidates: Sequence[Candidate], scorer: SemanticScorer, config: RerankConfig
) -> list[str]:
    """What the scorer reads of each candidate: its scoring text, or for a cross-encoder of
    a known length reading windows, its reading window at that length."""
    texts = [scoring_text(c) for c in candidates]
    pieces = getattr(scorer, "max_length", None)
    if scorer.name != "cross-encoder" or not config.reading_window or not pieces:
        return texts
    return [reading_window(query, text, pieces=int(pieces)) for text in texts]


async def read_candidates(
    scorer: SemanticScorer, query: str, head: Sequence[Candidate], texts: Sequence[str]
) -> tuple[list[float], list[AnswerSpan | None]]:
    """The scorer's relevance of each text and, for a reader with a span head (one read for
    both), each candidate's answer span ([] without one)."""
    if isinstance(scorer, SpanReader) and scorer.spans:
        readings = await scorer.read(query, texts)
        semantic = [float(p) for p in reading.probability([r.logit for r in readings])]
        return semantic, list(answer_spans(head, texts, readings))
    return list(await scorer.score(query, texts)), []


async def read_head(
    scorer: SemanticScorer,
    query: str,
    head: Sequence[Candidate],
    texts: Sequence[str],
    *,
    first: int | None,
) -> tuple[list[Candidate], list[float], list[AnswerSpan | None]]:
    """Read the first ``first`` of ``head`` (None: all), and the others only when none of
    those reads as relevant; the candidates read, their relevance and answer spans."""
    semantic, answers = await read_candidates(scorer, query, head[:first], texts[:first])
    if first is None or len(head) <= first:
        return list(head), semantic, answers
    if max(semantic) >= READ_ENOUGH:  # the others follow, unread
        return list(head[:first]), semantic, answers
    more, more_answers = await read_candidates(scorer, query, head[first:], texts[first:])
    return list(head), semantic + more, answers + more_answers


async def rerank(
    *,
    request: RerankRequest,
    scorer: SemanticScorer,
    config: RerankConfig,
    today: date | None = None,
    count_tokens: Callable[[str], int] | None = None,
) -> RerankReply:
    """Final context for a question: scored, deduplicated, top-k under the token budget."""
    started = time.perf_counter()
    candidates = request.candidates
    day = today or datetime.now(UTC).date()
    if not candidates:
        return RerankReply(
            request_id=request.request_id,
            scorer=scorer.name,
            confidence=confidence_of(
                top_semantic=None, kept_signals=[], scorer=scorer.name, config=config
            ),
        )
    limit = config.cross_encoder_candidates if scorer.name == "cross-encoder" else None
    head = list(candidates[:limit]) if limit is not None else list(candidates)
    texts = read_texts(request.query, head, scorer, config)
    first = config.cross_encoder_read_first if scorer.name == "cross-encoder" else None
    head, semantic, answers = await read_head(scorer, request.query, head, texts, first=first)
    scored_at = time.perf_counter()
    ranked = rank_candidates(
        query=request.query, candidates=head, semantic=semantic, student=request.student,
        scorer=scorer.name, config=config, today=day, answers=answers,
    )  # fmt: skip
    ranked += [
        RankedChunk(
            candidate=c, semantic=0.0, score=0.0,
            signals={**educational_signals(c, request.student, today=day), "relevance": 0.0},
        )
        for c in candidates[len(head) :]
    ]  # fmt: skip
    keep, twins = drop_near_duplicates(
        [r.candidate.text for r in ranked], threshold=config.duplicate_overlap
    )
    top = [ranked[i] for i in keep][: request.top_k]
    counter = count_tokens or scorer.count_tokens
    tokens = [
        r.candidate.token_count if r.candidate.token_count is not None
        else counter(scoring_text(r.candidate))
        for r in top
    ]  # fmt: skip
    fits = fit_budget(tokens, budget=request.token_budget)
    chunks = top[:fits]
    confidence = confidence_of(
        top_semantic=max(semantic),
        kept_signals=[c.signals for c in chunks],
        scorer=scorer.name,
        config=config,
    )
    done = time.perf_counter()
    timings = {
        "score": round((scored_at - started) * 1000, 3),
        "rank": round((done - scored_at) * 1000, 3),
        "total": round((done - started) * 1000, 3),
    }
    metrics.record_stages("reranker", timings)
    return RerankReply(
        request_id=request.request_id,
        chunks=chunks,
        scorer=scorer.name,
        confidence=confidence,
        dropped_duplicates=len(twins),
        duplicates={
            ranked[dropped].candidate.chunk_id: ranked[kept].candidate.chunk_id
            for dropped, kept in twins.items()
        },
        dropped_for_budget=len(top) - fits,
        timings_ms=timings,
    )
