"""The final confidence: the re-ranker's verdict with the measured grounding swapped in.

Bands come from the shared configuration (``LECTERN_BAND_HIGH/MEDIUM/LOW``, read by
``Settings.band_thresholds()``), the same cut-offs the re-ranker bands its verdict with. The
fixed wording of each band lives here too, so the answer's copy always follows its band.
"""

from __future__ import annotations

from lectern_common.education import BandThresholds, answered_band
from lectern_common.events import Confidence
from lectern_common.events.chat import ConfidenceBand

MEDIUM_PREAMBLE = "Based on the available materials, here is what I can tell you.\n\n"
LOW_PREAMBLE = (
    "Note: the course material on this is limited, so please check this answer with your "
    "teacher.\n\n"
)
#: said after the answer when checking it lowered its band below the one it opened with
MEDIUM_CAVEAT = (
    "\n\nBased on the available materials, parts of this answer could not be fully checked "
    "against the sources."
)
LOW_CAVEAT = (
    "\n\nNote: the course material on this is limited, so please check this answer with your "
    "teacher."
)

_ORDER: tuple[ConfidenceBand, ...] = ("gap", "low", "medium", "high")


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
    if _ORDER.index(band) > _ORDER.index(prior.band):
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
    return band if _ORDER.index(band) <= _ORDER.index(other) else other


def preamble(band: ConfidenceBand) -> str:
    """The fixed opening of an answer in this band ('' for high)."""
    if band == "medium":
        return MEDIUM_PREAMBLE
    if band == "low":
        return LOW_PREAMBLE
    return ""


def caveat(opened: ConfidenceBand, final: ConfidenceBand) -> str:
    """The closing wording when the final band is below the one the answer opened with.

    The opening (``preamble``) is streamed before the answer is checked; when the check lowers
    the band, this says what that band's opening would have said, so the copy follows the
    band the answer ends in ('' when the band held).
    """
    if _ORDER.index(final) >= _ORDER.index(opened):
        return ""
    if final == "medium":
        return MEDIUM_CAVEAT
    if final == "low":
        return LOW_CAVEAT
    return ""
