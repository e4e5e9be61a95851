"""Pure re-ranking logic: every educational signal, dedup, budget, confidence and bands."""

import math
import re
import uuid
from collections.abc import Sequence
from datetime import date, timedelta
from typing import Any

import pytest

from lectern_common.events import Candidate, RerankRequest, StudentContext
from lectern_common.events.chat import band_shares
from lectern_reranker.config import Settings
from lectern_reranker.service import (
    NEUTRAL,
    BandThresholds,
    Calibration,
    RelevanceModel,
    RerankConfig,
    ScorerName,
    SignalWeights,
    band_for,
    combined_score,
    confidence_of,
    content_type_preference,
    curriculum_match,
    drop_near_duplicates,
    educational_signals,
    fit_budget,
    freshness,
    grade_match,
    overlap,
    packaged_relevance,
    rank_prior,
    reading_window,
    rerank,
    sentence_match,
    shingles,
    source_priority,
    subject_category,
    with_grounding,
)

TODAY = date(2026, 1, 1)


def candidate(text: str, **metadata: Any) -> Candidate:
    return Candidate(
        chunk_id=uuid.uuid4(), document_id=uuid.uuid4(), title="t", text=text, metadata=metadata
    )


class LexicalScorer:
    """A real (if crude) relevance: the share of query words found in the text."""

    def __init__(self, name: ScorerName = "cross-encoder") -> None:
        self._name: ScorerName = name
        self.calls: list[int] = []

    @property
    def name(self) -> ScorerName:
        return self._name

    async def score(self, query: str, texts: Sequence[str]) -> list[float]:
        self.calls.append(len(texts))
        words = set(re.findall(r"\w+", query.lower()))
        return [len(words & set(re.findall(r"\w+", t.lower()))) / len(words) for t in texts]

    def count_tokens(self, text: str) -> int:
        return len(text.split())


@pytest.mark.parametrize(
    ("chunk", "student", "expected"),
    [
        (7, 7, 1.0),
        (6, 7, 0.7),
        (9, 7, 0.3),
        (10, 7, 0.0),
        (1, 12, 0.0),
        (None, 7, NEUTRAL),
        (7, None, NEUTRAL),
    ],
)
def test_grade_match_scale(chunk: int | None, student: int | None, expected: float) -> None:
    assert grade_match(chunk, student) == expected


def test_curriculum_match_scale() -> None:
    def match(
        chunk_std: list[str], chunk_subject: str | None, std: list[str], subj: str | None
    ) -> float:
        return curriculum_match(
            chunk_standards=chunk_std,
            chunk_subject=chunk_subject,
            student_standards=std,
            student_subject=subj,
        )

    assert match(["NGSS.HS-PS1-1"], "Chemistry", ["ngss.hs-ps1-1"], "Chemistry") == 1.0
    assert match(["NGSS.HS-PS1-2"], "chemistry", ["NGSS.HS-PS1-1"], "Chemistry") == 0.5
    assert match([], "Physics", ["NGSS.HS-PS1-1"], "Chemistry") == 0.0
    assert match([], None, ["NGSS.HS-PS1-1"], "Chemistry") == 0.0  # untagged
    assert match(["X"], "Chemistry", [], None) == NEUTRAL  # nothing to match against


def test_source_priority_scale() -> None:
    student = StudentContext(class_id="c1", teacher_ids=["t1"])
    own = {"uploaded_by": "t1", "uploader_role": "teacher", "class_id": "c1"}
    assert source_priority(own, student) == 1.0
    assert (
        source_priority(
            {"uploaded_by": "t9", "uploader_role": "teacher", "class_id": "c1"}, student
        )
        == 1.0
    )
    assert source_priority({"uploaded_by": "t1", "class_id": "c2"}, student) == 0.7
    assert source_priority({"uploaded_by": "t9", "uploader_role": "teacher"}, student) == 0.7
    assert source_priority({"source_priority": "official_textbook"}, student) == 0.5
    assert source_priority({"source_type": "supplementary"}, student) == 0.3
    assert source_priority({"source_priority": "web"}, student) == 0.1
    assert source_priority({"source_priority": 0.9}, student) == 0.9
    assert source_priority({"source_priority": 7}, student) == 1.0  # clipped
    assert source_priority({"uploaded_by": "a1", "uploader_role": "admin"}, student) == NEUTRAL
    assert source_priority({}, student) == NEUTRAL
    # the highest applicable value wins: a teacher's web link is still the teacher's
    assert source_priority({"uploader_role": "teacher", "source_priority": "web"}, student) == 0.7


@pytest.mark.parametrize(
    ("subject", "category", "horizon_months"),
    [
        ("Biology", "stem", 48),
        ("History", "humanities", 72),
        ("Algebra", "mathematics", 120),
        ("current events", "current events", 6),
        ("Underwater basket weaving", "default", 60),
        (None, "default", 60),
    ],
)
def test_freshness_decays_over_the_subject_horizon(
    subject: str | None, category: str, horizon_months: int
) -> None:
    assert subject_category(subject) == category
    half = TODAY - timedelta(days=round(horizon_months / 2 * 30.4375))
    assert freshness(TODAY, subject, today=TODAY) == 1.0
    assert freshness(half.isoformat(), subject, today=TODAY) == pytest.approx(0.5, abs=0.01)
    old = TODAY - timedelta(days=round(horizon_months * 40))
    assert freshness(old, subject, today=TODAY) == 0.05  # floor


def test_freshness_edge_cases() -> None:
    assert freshness(None, "Biology", today=TODAY) == NEUTRAL
    assert freshness("not a date", "Biology", today=TODAY) == NEUTRAL
    assert freshness(TODAY + timedelta(days=30), "Biology", today=TODAY) == 1.0
    assert freshness("2025-10-01T08:00:00Z", "news", today=TODAY) == pytest.approx(
        1 - 92 / 30.4375 / 6, abs=1e-6
    )


def test_content_type_follows_learning_style() -> None:
    visual = StudentContext(learning_style="visual")
    assert content_type_preference("diagram", visual) == 1.0
    assert content_type_preference("text", visual) == 0.2
    assert content_type_preference(None, visual) == NEUTRAL
    assert content_type_preference("diagram", StudentContext()) == NEUTRAL
    explicit = StudentContext(preferred_content_types=["Worked_Example"])
    assert content_type_preference("worked example", explicit) == 1.0


def test_educational_signals_read_candidate_metadata() -> None:
    student = StudentContext(
        grade_level=9,
        subject="Chemistry",
        class_id="c1",
        teacher_ids=["t1"],
        curriculum_standards=["S1"],
        learning_style="examples",
    )
    chunk = candidate(
        "x",
        grade_level=10,
        subject="Chemistry",
        curriculum_standards=["S1"],
        uploaded_by="t1",
        class_id="c1",
        freshness_date=TODAY.isoformat(),
        content_type="worked_example",
    )
    signals = educational_signals(chunk, student, today=TODAY)
    assert signals == {
        "grade": 0.7,
        "curriculum": 1.0,
        "source_priority": 1.0,
        "freshness": 1.0,
        "content_type": 1.0,
    }
    qa = Candidate(chunk_id=uuid.uuid4(), document_id=uuid.uuid4(), title="t", text="q", kind="qa")
    assert educational_signals(qa, student, today=TODAY)["content_type"] == 1.0
    bare = educational_signals(candidate("x"), StudentContext(), today=TODAY)
    assert bare == dict.fromkeys(bare, NEUTRAL)


def test_combined_score_uses_the_weights() -> None:
    signals = {
        "grade": 1.0,
        "curriculum": 0.0,
        "source_priority": 1.0,
        "freshness": 0.0,
        "content_type": 1.0,
    }
    expected = 0.40 * 0.5 + 0.15 * 1 + 0.15 * 0 + 0.15 * 1 + 0.10 * 0 + 0.05 * 1
    assert combined_score(0.5, signals, SignalWeights()) == pytest.approx(expected)
    only_semantic = SignalWeights(0.0 + 1, 0, 0, 0, 0, 0)
    assert combined_score(0.37, signals, only_semantic) == pytest.approx(0.37)


def test_rank_prior() -> None:
    assert [rank_prior(i, 5) for i in range(5)] == [1.0, 0.75, 0.5, 0.25, 0.0]
    assert rank_prior(0, 1) == 1.0


ANSWERING = (
    "The Renal system is often affected. Horseshoe kidneys are common. Students should read "
    "the chapter on growth first. Kidney malformations in Turner syndrome include horseshoe "
    "kidneys and malrotations. Hearing loss is frequent in adults. Most women need hormone "
    "therapy."
)
SCATTERED = (
    "Turner syndrome is a chromosomal condition. Malformations of the heart are screened at "
    "diagnosis. The kidney function of adults is checked every year."
)


def test_sentence_match_scores_the_best_sentence_of_a_chunk() -> None:
    query = "Which kidney malformations does Turner syndrome include?"
    long_answer, scattered, unrelated = sentence_match(
        query, [ANSWERING, SCATTERED, "Photosynthesis happens in chloroplasts."]
    )
    assert long_answer == pytest.approx(1.0)  # one sentence holds every term
    assert 0.0 < scattered < 0.7  # the terms are there, in three different sentences
    assert unrelated == 0.0
    assert sentence_match("", [ANSWERING]) == [0.0]
    assert sentence_match(query, []) == []


async def test_sentence_match_lifts_a_long_chunk_that_answers_in_one_sentence() -> None:
    query = "Which kidney malformations does Turner syndrome include?"
    fillers = [f"Growth hormone helps girls in year {n} of treatment." for n in range(18)]
    texts = [SCATTERED, *fillers[:2], ANSWERING, *fillers[2:]]  # 4th of 20 candidates
    request = RerankRequest(
        tenant_id="t", query=query, top_k=4, token_budget=10_000,
        candidates=[candidate(t) for t in texts],
    )  # fmt: skip
    scorer = LexicalScorer("bi-encoder")
    fused_only = RerankConfig(sentence_match_weight={"bi-encoder": 0.0, "cross-encoder": 0.0})
    fused = await rerank(request=request, scorer=scorer, config=fused_only, today=TODAY)
    assert fused.chunks[0].candidate.text == SCATTERED  # the retriever's order alone
    weighed = await rerank(request=request, scorer=scorer, config=RerankConfig(), today=TODAY)
    assert weighed.chunks[0].candidate.text == ANSWERING
    assert weighed.chunks[0].signals["sentence_match"] == pytest.approx(1.0)


def test_overlap_and_near_duplicates() -> None:
    base = "Photosynthesis converts light energy into chemical energy stored in glucose molecules"
    assert overlap(shingles(base), shingles(base.upper())) == 1.0
    contained = base + " in the chloroplasts of plant cells during the day"
    assert overlap(shingles(base), shingles(contained)) == 1.0
    one_word_changed = base.replace("stored", "kept")
    assert 0.6 < overlap(shingles(base), shingles(one_word_changed)) < 0.81
    other = "Mitochondria release energy from glucose by cellular respiration in all cells"
    assert overlap(shingles(base), shingles(other)) < 0.1
    assert overlap(shingles(""), shingles(base)) == 0.0
    keep, twins = drop_near_duplicates([contained, other, base, base], threshold=0.8)
    assert keep == [0, 1]
    assert twins == {2: 0, 3: 0}  # each dropped text points at the kept one it repeats
    keep, twins = drop_near_duplicates([base, one_word_changed], threshold=0.8)
    assert keep == [0, 1]  # 75% overlap is not a near-duplicate
    assert twins == {}


def test_fit_budget_drops_the_lowest_ranked() -> None:
    assert fit_budget([100, 200, 300], budget=600) == 3
    assert fit_budget([100, 200, 300], budget=599) == 2
    assert fit_budget([100, 200, 300], budget=299) == 1
    assert fit_budget([700], budget=600) == 0
    assert fit_budget([], budget=600) == 0


def test_calibration_is_a_monotone_logistic() -> None:
    cal = Calibration(midpoint=0.3, scale=0.05)
    assert cal(0.3) == pytest.approx(0.5)
    values = [cal(x / 20) for x in range(21)]
    assert values == sorted(values)
    assert cal(0.0) < 0.01 < 0.99 < cal(0.6)
    assert 0.0 <= cal(-1e9) <= cal(1e9) <= 1.0


@pytest.mark.parametrize(
    ("score", "retrieval", "band"),
    [
        (0.80, 0.9, "high"),
        (0.79, 0.9, "medium"),
        (0.60, 0.9, "medium"),
        (0.59, 0.9, "low"),
        (0.40, 0.9, "low"),
        (0.39, 0.9, "gap"),
        (0.95, 0.49, "gap"),
    ],
)
def test_bands(score: float, retrieval: float, band: str) -> None:
    assert band_for(score, retrieval, BandThresholds()) == band


def test_band_thresholds_are_configurable() -> None:
    strict = BandThresholds(high=0.9, medium=0.7, low=0.5, retrieval_gap=0.2)
    assert band_for(0.85, 0.3, strict) == "medium"
    assert band_for(0.45, 0.3, strict) == "gap"
    settings = Settings(band_high=0.9, band_low=0.5, retrieval_gap=0.2, weight_grade=0.3)
    config = settings.rerank_config()
    assert config.bands == BandThresholds(high=0.9, medium=0.6, low=0.5, retrieval_gap=0.2)
    assert config.weights.grade == 0.3


def test_confidence_combines_retrieval_source_quality_and_prior() -> None:
    config = RerankConfig(calibrations={"bi-encoder": Calibration(0.3, 0.05)})
    signals = [
        {"source_priority": 1.0, "freshness": 1.0},
        {"source_priority": 0.5, "freshness": 0.3},
    ]
    conf = confidence_of(top_semantic=0.9, kept_signals=signals, scorer="bi-encoder", config=config)
    retrieval = 1 / (1 + math.exp(-(0.9 - 0.3) / 0.05))
    quality = (1.0 + 0.4) / 2
    assert conf.retrieval == pytest.approx(retrieval, abs=1e-6)
    assert conf.source_quality == pytest.approx(quality)
    # grounding is assumed (1.0) until the gateway measures it, which can only lower it
    assert conf.grounding == 1.0
    assert conf.grounding_is_prior
    assert conf.score == pytest.approx(0.4 * retrieval + 0.3 * quality + 0.3 * 1.0, abs=1e-6)
    assert conf.band == "high"
    weak = confidence_of(top_semantic=0.1, kept_signals=signals, scorer="bi-encoder", config=config)
    assert weak.band == "gap"
    empty = confidence_of(top_semantic=None, kept_signals=[], scorer="bi-encoder", config=config)
    assert empty.score == pytest.approx(0.3)
    assert empty.band == "gap"


class Unreadable(LexicalScorer):
    """A bi-encoder that reads nothing of the question: the same low cosine for any text."""

    def __init__(self) -> None:
        super().__init__("bi-encoder")

    async def score(self, query: str, texts: Sequence[str]) -> list[float]:
        return [0.2 for _ in texts]


async def test_a_sentence_holding_the_questions_terms_is_no_gap_whatever_the_cosine() -> None:
    # the bi-encoder cannot read "QCRTAUT": its cosine says gap, the sentence that holds
    # every term of the question says the material covers it
    query = "What is the default value of the QCRTAUT system value?"
    holder = "The default setting for the public authority (QCRTAUT) system value is *CHANGE."
    texts = [holder, "Row and column access control protects the data."]
    request = RerankRequest(
        tenant_id="t", query=query, top_k=2, token_budget=10_000,
        candidates=[candidate(t) for t in texts],
    )  # fmt: skip
    scorer = Unreadable()
    found = await rerank(request=request, scorer=scorer, config=RerankConfig(), today=TODAY)
    assert found.chunks[0].signals["sentence_match"] == pytest.approx(1.0)
    assert found.confidence is not None and found.confidence.band in ("high", "medium")
    cosine_only = RerankConfig(lexical_calibration=None)
    alone = await rerank(request=request, scorer=scorer, config=cosine_only, today=TODAY)
    assert alone.confidence is not None and alone.confidence.band == "gap"
    # half of the question's terms in a sentence is no evidence: an off-topic question
    # shares a word or two with the material
    half = RerankRequest(
        tenant_id="t", query="What is the default value of the offside rule?", top_k=2,
        token_budget=10_000, candidates=[candidate(t) for t in texts],
    )  # fmt: skip
    off = await rerank(request=half, scorer=scorer, config=RerankConfig(), today=TODAY)
    assert off.chunks[0].signals["sentence_match"] < 0.7
    assert off.confidence is not None and off.confidence.band == "gap"


def test_measured_grounding_replaces_the_prior() -> None:
    config = RerankConfig(calibrations={"bi-encoder": Calibration(0.3, 0.05)})
    signals = [{"source_priority": 1.0, "freshness": 1.0}]
    prior = confidence_of(
        top_semantic=0.9, kept_signals=signals, scorer="bi-encoder", config=config
    )
    assert prior.band == "high"  # 0.4 * ~1 + 0.3 * 1 + 0.3 * 1 (assumed)
    grounded = with_grounding(prior, grounding=0.1)
    assert not grounded.grounding_is_prior
    assert grounded.score == pytest.approx(prior.score - 0.3 * 0.9, abs=1e-5)
    assert grounded.band == "medium"
    assert with_grounding(prior, grounding=1.0).score == pytest.approx(1.0, abs=1e-3)


def test_band_shares() -> None:
    assert band_shares(["gap", "gap", "low", "high"]) == {
        "high": 0.25,
        "medium": 0.0,
        "low": 0.25,
        "gap": 0.5,
    }
    assert band_shares([]) == {"high": 0.0, "medium": 0.0, "low": 0.0, "gap": 0.0}


async def test_rerank_orders_dedups_and_fits_the_budget() -> None:
    query = "how do plants make glucose from light"
    best = "plants make glucose from light by photosynthesis in the leaf"
    texts = [
        "the french revolution began in 1789",
        best + " of the plant",  # near-duplicate of `best`, ranks just below it
        best,
        "plants need light to grow and make food",
        "light travels fast",
    ]
    scorer = LexicalScorer()
    request = RerankRequest(
        tenant_id="t",
        query=query,
        top_k=3,
        token_budget=1000,
        candidates=[candidate(t) for t in texts],
    )
    reply = await rerank(request=request, scorer=scorer, config=RerankConfig(), today=TODAY)
    assert scorer.calls == [5]  # one batch for all candidates
    assert reply.scorer == "cross-encoder"
    assert next(c.candidate.text for c in reply.chunks) in (best, best + " of the plant")
    assert reply.dropped_duplicates == 1
    assert len(reply.chunks) == 3
    scores = [c.score for c in reply.chunks]
    assert scores == sorted(scores, reverse=True)
    assert "the french revolution began in 1789" not in [c.candidate.text for c in reply.chunks]
    assert set(reply.timings_ms) == {"score", "rank", "total"}


async def test_the_others_are_read_only_when_none_of_the_first_reads_as_relevant() -> None:
    """A cross-encoder reads the first candidates; the others only when none of those reads
    as relevant (under even odds), else they follow unread, in the fused order."""
    query = "how do plants make glucose from light"
    off = ["the french revolution began in 1789", "rivers flow to the sea", "a poem about snow"]
    answer = "plants make glucose from light by photosynthesis"

    async def reranked(texts: list[str]) -> tuple[list[int], list[str]]:
        scorer = LexicalScorer()
        request = RerankRequest(
            tenant_id="t", query=query, top_k=6, token_budget=1000,
            candidates=[candidate(t) for t in texts],
        )  # fmt: skip
        config = RerankConfig(cross_encoder_read_first=3, duplicate_overlap=1.0)
        reply = await rerank(request=request, scorer=scorer, config=config, today=TODAY)
        return scorer.calls, [c.candidate.text for c in reply.chunks]

    later = "light travels fast"  # after the answer in the fused order, read or not
    calls, order = await reranked([off[0], answer, off[1], later, off[2]])
    assert calls == [3]
    assert order[0] == answer
    assert order[-2:] == [later, off[2]], "unread, in the fused order after those read"
    calls, order = await reranked([*off, later, answer])
    assert calls == [3, 2]  # none of the first three answers: the others are read too
    assert order[0] == answer


def test_the_read_first_setting_reaches_the_pipeline() -> None:
    from lectern_reranker.config import Settings

    assert Settings().rerank_config().cross_encoder_read_first is None  # all at once
    assert Settings(cross_encoder_read_first=4).rerank_config().cross_encoder_read_first == 4


async def test_token_budget_drops_the_lowest_ranked() -> None:
    texts = [f"glucose light plants {w}" for w in ("one", "two three", "four five six")]
    given = [candidate(t) for t in texts]
    for c in given:
        c.token_count = 40
    request = RerankRequest(
        tenant_id="t", query="glucose light plants", candidates=given, token_budget=100
    )
    reply = await rerank(request=request, scorer=LexicalScorer(), config=RerankConfig())
    assert len(reply.chunks) == 2
    assert reply.dropped_for_budget == 1
    # without token_count, the scorer's tokenizer counts (here: 4, 5 and 6 words)
    counted = request.model_copy(
        update={"candidates": [candidate(t) for t in texts], "token_budget": 100}
    )
    reply = await rerank(request=counted, scorer=LexicalScorer(), config=RerankConfig())
    assert (len(reply.chunks), reply.dropped_for_budget) == (3, 0)
    reply = await rerank(
        request=counted,
        scorer=LexicalScorer(),
        config=RerankConfig(),
        count_tokens=lambda text: 45,
    )
    assert (len(reply.chunks), reply.dropped_for_budget) == (2, 1)


async def test_educational_signals_break_semantic_ties() -> None:
    student = StudentContext(grade_level=5, class_id="c", teacher_ids=["t"])
    same = "the water cycle moves water between oceans air and land"
    far = candidate(same + " (university)", grade_level=12, source_priority="web")
    near = candidate(same + " (grade five)", grade_level=5, uploaded_by="t", class_id="c")
    request = RerankRequest(
        tenant_id="t", query="water cycle", candidates=[far, near], student=student
    )
    config = RerankConfig(duplicate_overlap=1.0)
    reply = await rerank(request=request, scorer=LexicalScorer(), config=config, today=TODAY)
    assert [c.candidate.chunk_id for c in reply.chunks] == [near.chunk_id, far.chunk_id]
    assert reply.chunks[0].signals["grade"] == 1.0
    assert reply.chunks[1].signals["source_priority"] == 0.1


async def test_bi_encoder_keeps_the_retrieval_order() -> None:
    texts = ["alpha beta", "alpha beta gamma", "alpha"]
    request = RerankRequest(
        tenant_id="t", query="alpha beta gamma", candidates=[candidate(t) for t in texts]
    )
    # the order alone: the best sentence's match is a signal of its own (tested above)
    no_match = {"bi-encoder": 0.0, "cross-encoder": 0.0}
    # a cross-encoder the relevance model was not fitted for ranks by its own score
    config = RerankConfig(duplicate_overlap=1.0, sentence_match_weight=no_match, relevance=None)
    cross = await rerank(request=request, scorer=LexicalScorer("cross-encoder"), config=config)
    bi = await rerank(request=request, scorer=LexicalScorer("bi-encoder"), config=config)
    assert [c.candidate.text for c in cross.chunks] == ["alpha beta gamma", "alpha beta", "alpha"]
    assert "retrieval_rank" not in cross.chunks[0].signals
    # the bi-encoder is the retriever's own dense signal, already in the fused order: that
    # order stands (the cosine still feeds the confidence)
    assert [c.candidate.text for c in bi.chunks] == texts
    assert bi.chunks[0].signals["retrieval_rank"] == 1.0
    assert [c.semantic for c in bi.chunks] == pytest.approx([2 / 3, 1.0, 1 / 3])
    # a share below 1 lets the cosine move chunks again (configurable)
    blended = await rerank(
        request=request,
        scorer=LexicalScorer("bi-encoder"),
        config=RerankConfig(
            duplicate_overlap=1.0,
            rank_prior_weight={"bi-encoder": 0.5},
            sentence_match_weight=no_match,
        ),
    )
    # 0.5 * (2/3) + 0.5 * 1.0 for the first beats 0.5 * 1.0 + 0.5 * 0.5 for the second
    assert [c.candidate.text for c in blended.chunks] == texts
    shares = await rerank(
        request=request,
        scorer=LexicalScorer("bi-encoder"),
        config=RerankConfig(
            duplicate_overlap=1.0,
            rank_prior_weight={"bi-encoder": 0.0},
            sentence_match_weight=no_match,
        ),
    )
    assert [c.candidate.text for c in shares.chunks] == ["alpha beta gamma", "alpha beta", "alpha"]


async def test_no_candidates_is_a_gap() -> None:
    request = RerankRequest(tenant_id="t", query="anything", candidates=[])
    reply = await rerank(request=request, scorer=LexicalScorer(), config=RerankConfig())
    assert reply.chunks == []
    assert reply.confidence is not None
    assert reply.confidence.band == "gap"


def test_the_scorer_reads_a_chunk_without_the_title_every_chunk_shares() -> None:
    from lectern_reranker.service import scoring_text

    chunk = Candidate(
        chunk_id=uuid.uuid4(), document_id=uuid.uuid4(), title="Turner syndrome review",
        text="doi: 10.1093/bmb/ldu038", context_prefix="Turner syndrome review > Abstract",
    )  # fmt: skip
    assert scoring_text(chunk) == "Abstract\ndoi: 10.1093/bmb/ldu038"
    bare = chunk.model_copy(update={"context_prefix": "Turner syndrome review"})
    assert scoring_text(bare) == "doi: 10.1093/bmb/ldu038"


def test_the_relevance_model_reads_the_reader_the_order_and_the_match(tmp_path: Any) -> None:
    model = RelevanceModel(reader=1.0, prior=2.0, match=1.5, bias=-1.0)
    base = model(0.5, 0.5, 0.5)
    assert model(0.9, 0.5, 0.5) > base and model(0.5, 1.0, 0.5) > base
    assert model(0.5, 0.5, 1.0) > base
    assert 0.0 < model(1.0, 1.0, 1.0) < 1.0 and 0.0 < model(0.0, 0.0, 0.0) < 1.0
    written = tmp_path / "model.json"
    written.write_text('{"weights": {"reader": 1.0, "prior": 2.0, "match": 1.5}, "bias": -1.0}')
    assert RelevanceModel.load(written) == model
    shipped = packaged_relevance()
    assert shipped is not None, "make fit-rerank writes the re-ranker's relevance model"
    assert shipped.reader > 0 and shipped.prior > 0


async def test_the_cross_encoder_relevance_is_fitted_and_reads_only_its_candidates() -> None:
    texts = [
        "Glaciers carve valleys as they move.",
        "Photosynthesis turns light, water and carbon dioxide into glucose.",
        "Plants make glucose by photosynthesis in their leaves.",
        "The water cycle moves water between the sea, the air and the land.",
    ]
    request = RerankRequest(
        tenant_id="t", query="How do plants make glucose?",
        candidates=[candidate(t) for t in texts], top_k=4,
    )  # fmt: skip
    model = RelevanceModel(reader=1.0, prior=0.5, match=0.5, bias=0.0)
    scorer = LexicalScorer()
    config = RerankConfig(relevance=model, cross_encoder_candidates=3)
    reply = await rerank(request=request, scorer=scorer, config=config, today=TODAY)
    assert scorer.calls == [3], "only the first three of the fused order are read"
    order = [c.candidate.text for c in reply.chunks]
    assert order[-1] == texts[3], "the unread candidate follows the read ones"
    assert order[0] == texts[2]
    read = reply.chunks[0]
    assert {"retrieval_rank", "sentence_match", "relevance"} <= set(read.signals)
    p = read.semantic
    expected = model(p, read.signals["retrieval_rank"], read.signals["sentence_match"])
    assert read.signals["relevance"] == pytest.approx(expected)
    assert reply.chunks[-1].signals["relevance"] == 0.0
    # a bi-encoder reply is not touched by the cross-encoder's model
    bi = await rerank(request=request, scorer=LexicalScorer("bi-encoder"), config=config)
    assert len(bi.chunks) == 4 and "relevance" in bi.chunks[0].signals


LONG_CHUNK = (
    "Lesson 4 > The cell cycle\n"
    "Cells grow between divisions. They copy their DNA in the S phase. "
    "Interphase is the longest part of the cycle. Prophase condenses the chromosomes. "
    "In anaphase the sister chromatids separate and move to opposite poles of the cell. "
    "Telophase rebuilds the two nuclei. Cytokinesis splits the cytoplasm in two. "
    "Plant cells build a cell plate instead of a furrow. The cycle is checked at three points."
)


def test_a_reading_window_reads_where_the_questions_words_are() -> None:
    question = "What happens to the sister chromatids in anaphase?"
    window = reading_window(question, LONG_CHUNK, pieces=48)
    prefix, body = window.split("\n")
    assert prefix == "Lesson 4 > The cell cycle", "the contextual prefix is kept"
    assert "In anaphase the sister chromatids separate" in body
    assert "Cells grow between divisions" not in body, "the opening did not fit"
    # the window is whole sentences of the chunk, in its order, within the budget in words
    assert body in LONG_CHUNK
    words = len(window.split()) + len(question.split())
    assert words * 1.4 <= 48
    # a text that fits is read as it is, and a window never grows past the chunk
    assert reading_window(question, LONG_CHUNK, pieces=512) == LONG_CHUNK
    assert reading_window(question, "Short text.", pieces=16) == "Short text."


async def test_the_reranker_reads_windows_when_configured() -> None:
    seen: list[str] = []

    class Reading(LexicalScorer):
        max_length = 48

        async def score(self, query: str, texts: Sequence[str]) -> list[float]:
            seen.extend(texts)
            return await super().score(query, texts)

    request = RerankRequest(
        tenant_id="t", query="What happens to the sister chromatids in anaphase?",
        candidates=[candidate(LONG_CHUNK.split("\n")[1])], top_k=1,
    )  # fmt: skip
    off = RerankConfig(reading_window=False)
    await rerank(request=request, scorer=Reading(), config=off, today=TODAY)
    assert seen[-1].startswith("Cells grow"), "switched off: the candidate as it is"
    config = RerankConfig()
    await rerank(request=request, scorer=Reading(), config=config, today=TODAY)
    assert "In anaphase the sister chromatids" in seen[-1]
    assert not seen[-1].startswith("Cells grow"), "the opening is not where the answer is"
    await rerank(request=request, scorer=Reading("bi-encoder"), config=config, today=TODAY)
    assert seen[-1].startswith("Cells grow"), "a bi-encoder reads the whole chunk"
