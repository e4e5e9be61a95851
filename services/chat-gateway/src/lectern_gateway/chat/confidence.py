"""The final confidence: the re-ranker's verdict with the measured grounding swapped in."""

from __future__ import annotations

from lectern_common.events import Confidence
from lectern_common.events.chat import ConfidenceBand

#: lower score bounds of the bands an answered question can fall in
BAND_FLOORS: tuple[tuple[float, ConfidenceBand], ...] = ((0.7, "high"), (0.45, "medium"))

MEDIUM_PREAMBLE = "Based on the available materials, here is what I can tell you.\n\n"
LOW_PREAMBLE = (
    "Note: the course material on this is limited, so please check this answer with your "
    "teacher.\n\n"
)


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


def band_for(score: float) -> ConfidenceBand:
    """The band of an answered question (never ``gap``: that is decided before generation)."""
    for floor, band in BAND_FLOORS:
        if score >= floor:
            return band
    return "low"


def final_confidence(prior: Confidence, *, grounding: float, weight: float) -> Confidence:
    """Replace the prior grounding by the measured one, keeping the rest of the verdict."""
    score = prior.score + weight * (grounding - prior.grounding)
    score = round(min(1.0, max(0.0, score)), 3)
    band: ConfidenceBand = "gap" if prior.band == "gap" else band_for(score)
    # measured grounding can lower a band but not promote a weak retrieval past the prior band
    order: list[ConfidenceBand] = ["gap", "low", "medium", "high"]
    if order.index(band) > order.index(prior.band):
        band = prior.band
    return Confidence(
        score=score,
        band=band,
        retrieval=prior.retrieval,
        source_quality=prior.source_quality,
        grounding=round(grounding, 3),
        grounding_is_prior=False,
    )


def preamble(band: ConfidenceBand) -> str:
    """The fixed opening of an answer in this band ('' for high)."""
    if band == "medium":
        return MEDIUM_PREAMBLE
    if band == "low":
        return LOW_PREAMBLE
    return ""
