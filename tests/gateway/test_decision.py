"""The policy of ``chat.decision``, as tables: the re-ranker's evidence, the persona's cut-offs
and the answerer's support in; answer, refuse or explain generally, the band and the reason
out. The default cut-offs are the documented ones (0.80 / 0.60 / 0.40, retrieval gap 0.50)."""

from __future__ import annotations

import pytest

from lectern_common.education import BandThresholds
from lectern_common.events import Confidence
from lectern_common.events.chat import ConfidenceBand
from lectern_gateway.chat.decision import (
    FITTED_ANSWER_MARGIN,
    GENERAL_SCORE,
    Action,
    Decision,
    Evidence,
    Policy,
    Reason,
    Support,
    decide,
    no_material,
    settle,
)

DEPLOYMENT = BandThresholds()
#: a stricter persona (its own band_high/medium/low)
STRICT = BandThresholds(high=0.90, medium=0.70, low=0.50)


def verdict(
    score: float, retrieval: float, band: ConfidenceBand, grounding: float = 0.5
) -> Confidence:
    """A re-ranker's verdict."""
    return Confidence(
        score=score, band=band, retrieval=retrieval, source_quality=0.5, grounding=grounding,
        grounding_is_prior=True,
    )  # fmt: skip


def policy(thresholds: BandThresholds = DEPLOYMENT, *, persona: bool = False) -> Policy:
    return Policy(thresholds=thresholds, persona_cuts=persona, grounding_weight=0.3)


#: a deployment that refuses on the reader's evidence (the fitted margin)
MARGIN = Policy(DEPLOYMENT, answer_margin=FITTED_ANSWER_MARGIN)
ANSWER_MARGIN = FITTED_ANSWER_MARGIN


# before generation: evidence, cut-offs -> action, band, reason
BEFORE: list[tuple[str, Evidence, Policy, bool, Action, ConfidenceBand, Reason]] = [
    ("nothing retrieved", Evidence(no_material(), False), policy(), False,
     "refuse", "gap", "no_material"),
    ("strong evidence", Evidence(verdict(0.85, 0.9, "high"), True), policy(), False,
     "answer", "high", "evidence"),
    ("medium evidence", Evidence(verdict(0.70, 0.8, "medium"), True), policy(), False,
     "answer", "medium", "evidence"),
    ("weak but answerable", Evidence(verdict(0.45, 0.6, "low"), True), policy(), False,
     "answer", "low", "evidence"),
    ("retrieval under the gap cut-off", Evidence(verdict(0.55, 0.3, "gap"), True), policy(),
     False, "refuse", "gap", "weak_retrieval"),
    ("score under the low cut-off", Evidence(verdict(0.30, 0.7, "gap"), True), policy(), False,
     "refuse", "gap", "low_score"),
    ("the re-ranker's own cut-offs", Evidence(verdict(0.70, 0.7, "gap"), True), policy(), False,
     "refuse", "gap", "reranker_gap"),
    ("a strict persona lowers high", Evidence(verdict(0.85, 0.9, "high"), True),
     policy(STRICT, persona=True), False, "answer", "medium", "evidence"),
    ("a strict persona refuses low", Evidence(verdict(0.45, 0.9, "low"), True),
     policy(STRICT, persona=True), False, "refuse", "gap", "low_score"),
    ("a lenient persona answers", Evidence(verdict(0.35, 0.9, "gap"), True),
     policy(BandThresholds(high=0.6, medium=0.45, low=0.3), persona=True), False,
     "answer", "low", "evidence"),
    ("a persona does not re-band nothing", Evidence(no_material(), False),
     policy(BandThresholds(low=0.0, medium=0.0, high=0.0, retrieval_gap=0.0), persona=True),
     False, "refuse", "gap", "no_material"),
    ("a general explanation asked for", Evidence(no_material(), False), policy(), True,
     "explain_generally", "low", "general_request"),
    # the reader's evidence: the best answer span's margin over "no answer here"
    ("a span beats no answer", Evidence(verdict(0.85, 0.9, "high"), True, ANSWER_MARGIN + 2),
     MARGIN, False, "answer", "high", "evidence"),
    ("no span beats no answer", Evidence(verdict(0.85, 0.9, "high"), True, ANSWER_MARGIN - 1),
     MARGIN, False, "refuse", "gap", "no_answer_span"),
    ("no spans read: the band decides", Evidence(verdict(0.85, 0.9, "high"), True, None),
     MARGIN, False, "answer", "high", "evidence"),
    ("the default refuses on no margin", Evidence(verdict(0.70, 0.8, "medium"), True,
     ANSWER_MARGIN - 9), policy(), False, "answer", "medium", "evidence"),
    ("a gap stays the re-ranker's", Evidence(verdict(0.30, 0.7, "gap"), True, ANSWER_MARGIN - 1),
     MARGIN, False, "refuse", "gap", "low_score"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("evidence", "cuts", "general", "action", "band", "reason"),
    [row[1:] for row in BEFORE],
    ids=[row[0] for row in BEFORE],
)
def test_decide(
    evidence: Evidence,
    cuts: Policy,
    general: bool,
    action: Action,
    band: ConfidenceBand,
    reason: Reason,
) -> None:
    decision = decide(evidence, cuts, general=general)
    assert (decision.action, decision.band, decision.reason) == (action, band, reason)
    assert decision.knowledge_gap == (action == "refuse")
    _score_agrees_with_band(decision, cuts.thresholds)


def _opened(score: float, band: ConfidenceBand, grounding: float = 0.5) -> Decision:
    return Decision("answer", verdict(score, 0.9, band, grounding), "evidence")


GENERAL = Decision("explain_generally", no_material().model_copy(
    update={"band": "low", "score": GENERAL_SCORE}), "general_request")  # fmt: skip

# after generation: the opening decision, the answerer's support -> action, band, reason
AFTER: list[tuple[str, Decision, Support, Action, ConfidenceBand, Reason]] = [
    ("well cited holds high", _opened(0.85, "high", 0.8), Support(0.9),
     "answer", "high", "grounded"),
    ("uncited falls to medium", _opened(0.85, "high", 0.8), Support(0.0),
     "answer", "medium", "grounding_lowered"),
    ("never promoted past its opening", _opened(0.70, "medium", 0.2), Support(1.0),
     "answer", "medium", "grounded"),
    ("low at worst once answered", _opened(0.45, "low", 0.9), Support(0.0),
     "answer", "low", "grounded"),
    ("the answerer found no support", _opened(0.85, "high"), Support(0.9, no_support=True),
     "refuse", "low", "no_support"),
    ("a general explanation stays low", GENERAL, Support(0.9),
     "explain_generally", "low", "general_request"),
    ("a general explanation is no gap", GENERAL, Support(0.0, no_support=True),
     "explain_generally", "low", "general_request"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("opened", "support", "action", "band", "reason"),
    [row[1:] for row in AFTER],
    ids=[row[0] for row in AFTER],
)
def test_settle(
    opened: Decision,
    support: Support,
    action: Action,
    band: ConfidenceBand,
    reason: Reason,
) -> None:
    final = settle(opened, support, policy())
    assert (final.action, final.band, final.reason) == (action, band, reason)
    _score_agrees_with_band(final, DEPLOYMENT)


def test_settle_swaps_the_prior_grounding_for_the_measured_one() -> None:
    final = settle(_opened(0.85, "high", 0.8), Support(0.9), policy())
    assert final.confidence.score == pytest.approx(0.85 + 0.3 * (0.9 - 0.8))
    assert final.confidence.grounding == 0.9
    assert not final.confidence.grounding_is_prior


def _score_agrees_with_band(decision: Decision, cuts: BandThresholds) -> None:
    """Score and band never disagree ("medium 0.88"; a zero cut-off leaves a zero score)."""
    ceiling = {"gap": cuts.low, "low": cuts.medium, "medium": cuts.high, "high": 1.01}
    score = decision.confidence.score
    assert score < ceiling[decision.band] or score == 0.0
