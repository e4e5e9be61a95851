"""The one place that decides whether a turn answers or refuses, and in which band.

A turn is decided twice, because its opening is said before the answer is checked:

1. :func:`decide`, before generation: the re-ranker's evidence (its verdict and whether any
   source survived), banded with the persona's cut-offs when the session has a persona, says
   ``answer`` (in a band), ``refuse`` (a knowledge gap: no material good enough) or
   ``explain_generally`` (the student asked for a general explanation after a gap).
   A drill with no practice material is decided here too (no material: a refusal).
2. :func:`settle`, after generation: the answerer's support (the measured grounding of the
   cited sentences, and whether the answerer said its sources do not answer) replaces the
   prior grounding in the score; the band may fall, never rise; an answerer's ``no_support``
   turns the answer into a refusal (a knowledge gap) in the ``low`` band at most.

Every decision carries its confidence (score and band agree: see :func:`in_band`) and a
reason a person can read. Where the numbers come from:

- ``retrieval_gap`` (0.50, the re-ranker's ``LECTERN_RERANKER_RETRIEVAL_GAP``) is where the
  re-ranker's calibrated retrieval confidence separates answerable from off-topic questions:
  its calibration midpoints are fitted so (``bench/tune_rerank.py`` for the bi-encoder,
  ``bench/fit_rerank.py`` for the reader; the measurements are beside
  ``lectern_reranker.service.BI_ENCODER_CALIBRATION``);
- the score cut-offs are the documented shared settings ``LECTERN_BAND_HIGH/MEDIUM/LOW``
  (0.80/0.60/0.40, ``lectern_common.education.BandThresholds``, docs/api.md), the same ones
  the re-ranker bands its verdict with, or a persona's own (its ``band_high/medium/low``,
  read by ``personas.service.thresholds``). No script fits them: they split the weighted
  score into the copy's three voices, and a deployment or persona sets its own;
- the weight of measured grounding is ``LECTERN_GATEWAY_GROUNDING_WEIGHT`` (0.3), the weight
  the re-ranker's ``ConfidenceWeights`` give grounding, so the final score swaps the prior
  for the measurement at the same weight;
- :data:`FITTED_ANSWER_MARGIN`, the least margin by which some source's answer span must beat
  the reader's "no answer here" score (SQuAD 2.0's null-score difference, over the
  re-ranker's one read of each candidate), is fitted by ``bench/fit_margin.py`` on the answer
  set's development split; off by default (``LECTERN_GATEWAY_ANSWER_MARGIN`` sets it);
- the answerer's own refusal (``no_support``) is fitted by ``bench/fit_answerer.py``;
- :data:`GENERAL_SCORE` is set by hand (see there).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from lectern_common.education import BandThresholds, answered_band, band_for
from lectern_common.events import Confidence
from lectern_common.events.chat import ConfidenceBand

Action = Literal["answer", "refuse", "explain_generally"]
Reason = Literal[
    # before generation
    "no_material",  # nothing retrieved, or nothing the caller may see
    "weak_retrieval",  # retrieval confidence under the cut-offs' retrieval_gap
    "low_score",  # the verdict's score under the low cut-off
    "reranker_gap",  # the re-ranker's own cut-offs said gap
    "no_answer_span",  # the reader found no span in any source that beats "no answer here"
    "evidence",  # good enough to answer, in the verdict's band
    "general_request",  # a general explanation asked for after a gap
    # after generation
    "grounded",  # the answer's citations held its band
    "grounding_lowered",  # the measured grounding lowered the band
    "no_support",  # the answerer said its sources do not answer
]

#: bands from worst to best
ORDER: tuple[ConfidenceBand, ...] = ("gap", "low", "medium", "high")
#: the score of a general explanation (not from the course material). Hand-set, and no
#: benchmark measures it: it is a label, under the low cut-off, while the band is set to
#: ``low`` explicitly, so the turn is answered (its copy says "not based on your course
#: materials") and is no knowledge gap.
GENERAL_SCORE = 0.2
#: the least margin of the best answer span over its null score among a turn's sources for
#: an answer, fitted by bench/fit_margin.py on the answer set's development split (at most 2%
#: of its answerable questions refused) for the shipped 3-layer span reader. It is not on by
#: default (``ANSWER_MARGIN``): out of sample it refused 0.022 of dev's answerable questions
#: and only 0.139 of its off-topic ones, and beside the answerer's own refusal it lowered
#: key-fact recall (dev 0.788 -> 0.772); the span head tells "answers" from "names the
#: subject" too weakly yet (SQuAD 2.0 held-out margin AUC 0.585), docs/benchmarks.md
FITTED_ANSWER_MARGIN = -7.493
#: chat's default: no refusal on the margin (a deployment may set the fitted one)
ANSWER_MARGIN: float | None = None


@dataclass(frozen=True)
class Evidence:
    """What the re-ranker found: its verdict, and whether any source survived visibility."""

    verdict: Confidence
    has_sources: bool
    #: the best margin of the sources' answer spans over their null scores (None: the
    #: re-ranker's reader marked none, having no span head)
    answer_margin: float | None = None


@dataclass(frozen=True)
class Policy:
    """The cut-offs a turn is banded with and how measured grounding weighs."""

    thresholds: BandThresholds
    #: the thresholds are a persona's: they re-band the re-ranker's verdict (which was banded
    #: with the deployment's)
    persona_cuts: bool = False
    grounding_weight: float = 0.3
    #: refuse when the best answer span's margin is under this (None: never on spans)
    answer_margin: float | None = ANSWER_MARGIN


@dataclass(frozen=True)
class Support:
    """What the answerer's text showed: measured grounding of its citations, and whether it
    said its sources do not answer (the offline answerer's ``no_support`` verdict)."""

    grounding: float
    no_support: bool = False


@dataclass(frozen=True)
class Decision:
    """Answer, refuse or explain generally; in which band (``confidence.band``), and why."""

    action: Action
    confidence: Confidence
    reason: Reason

    @property
    def band(self) -> ConfidenceBand:
        """The decision's band."""
        return self.confidence.band

    @property
    def knowledge_gap(self) -> bool:
        """Whether the turn is recorded as a knowledge gap."""
        return self.action == "refuse"


def no_material() -> Confidence:
    """The verdict when nothing was retrieved at all."""
    return Confidence(
        score=0.0,
        band="gap",
        retrieval=0.0,
        source_quality=0.0,
        grounding=0.0,
        grounding_is_prior=True,
    )


def general_prior() -> Confidence:
    """The verdict a general explanation opens with."""
    return no_material().model_copy(update={"band": "low", "score": GENERAL_SCORE})


def decide(evidence: Evidence, policy: Policy, *, general: bool = False) -> Decision:
    """Before generation: answer (in a band), refuse (a knowledge gap), or explain generally."""
    if general:
        return Decision("explain_generally", general_prior(), "general_request")
    verdict = evidence.verdict
    if policy.persona_cuts and evidence.has_sources:
        band = band_for(verdict.score, verdict.retrieval, policy.thresholds)
        verdict = verdict.model_copy(update={"band": band})
    if verdict.band != "gap":
        margin, least = evidence.answer_margin, policy.answer_margin
        if margin is not None and least is not None and margin < least:
            refused = verdict.model_copy(update={"band": "gap"})
            return Decision("refuse", in_band(refused, policy.thresholds), "no_answer_span")
        return Decision("answer", verdict, "evidence")
    return Decision("refuse", in_band(verdict, policy.thresholds), _gap_reason(evidence, policy))


def _gap_reason(evidence: Evidence, policy: Policy) -> Reason:
    verdict, cuts = evidence.verdict, policy.thresholds
    if not evidence.has_sources:
        return "no_material"
    if verdict.retrieval < cuts.retrieval_gap:
        return "weak_retrieval"
    if verdict.score < cuts.low:
        return "low_score"
    return "reranker_gap"


def settle(opened: Decision, support: Support, policy: Policy) -> Decision:
    """After generation: the final decision of an answered turn (``opened`` is
    :func:`decide`'s), its band lowered by the measured grounding or the answerer's
    ``no_support``, never raised."""
    general = opened.action == "explain_generally"
    grounding = 0.0 if general else support.grounding
    confidence = final_confidence(
        opened.confidence,
        grounding=grounding,
        weight=policy.grounding_weight,
        thresholds=policy.thresholds,
    )
    if support.no_support:
        # the answerer found nothing in the sources that answers: say so in the band too
        confidence = confidence.model_copy(update={"band": lower_band(confidence.band, "low")})
    confidence = in_band(confidence, policy.thresholds)
    if support.no_support and not general:
        return Decision("refuse", confidence, "no_support")
    if general:
        return Decision("explain_generally", confidence, "general_request")
    held = ORDER.index(confidence.band) >= ORDER.index(opened.band)
    return Decision("answer", confidence, "grounded" if held else "grounding_lowered")


def final_confidence(
    prior: Confidence,
    *,
    grounding: float,
    weight: float,
    thresholds: BandThresholds | None = None,
) -> Confidence:
    """Replace the prior grounding by the measured one, keeping the rest of the verdict.

    The band is the configured band of the new score, except that measured grounding can
    lower a band but never promote a weak retrieval past the band it was answered in, and an
    answered question stays ``low`` at worst (its answer has been given by then).
    """
    score = prior.score + weight * (grounding - prior.grounding)
    score = round(min(1.0, max(0.0, score)), 3)
    band: ConfidenceBand = (
        "gap" if prior.band == "gap" else answered_band(score, thresholds or BandThresholds())
    )
    if ORDER.index(band) > ORDER.index(prior.band):
        band = prior.band
    return Confidence(
        score=score,
        band=band,
        retrieval=prior.retrieval,
        source_quality=prior.source_quality,
        grounding=round(grounding, 3),
        grounding_is_prior=False,
    )


def in_band(confidence: Confidence, thresholds: BandThresholds | None = None) -> Confidence:
    """The verdict with its score inside its band's range, so score and band never disagree
    ("medium 0.88"): a band lowered by a check or capped at the opening band caps the score
    just below the next band's cut-off."""
    t = thresholds or BandThresholds()
    ceiling = {"gap": t.low, "low": t.medium, "medium": t.high}.get(confidence.band)
    if ceiling is None or confidence.score < ceiling:
        return confidence
    return confidence.model_copy(update={"score": round(max(0.0, ceiling - 0.001), 3)})


def lower_band(band: ConfidenceBand, other: ConfidenceBand) -> ConfidenceBand:
    """The lower of two bands."""
    return band if ORDER.index(band) <= ORDER.index(other) else other
