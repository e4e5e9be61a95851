"""Definitions the re-ranker and the gateway must agree on: confidence bands and the content
types each learning style prefers.

The band cut-offs are configured once, as shared settings (``LECTERN_BAND_HIGH``,
``LECTERN_BAND_MEDIUM``, ``LECTERN_BAND_LOW``; see ``BaseServiceSettings.band_thresholds``):
the re-ranker bands its verdict with them and the gateway re-bands the final confidence, after
measuring grounding, with the same ones.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from lectern_common.events.chat import ConfidenceBand


@dataclass(frozen=True)
class BandThresholds:
    """Confidence band cut-offs; below ``retrieval_gap`` retrieval confidence it is a gap.

    ``high`` <= score: high; ``medium`` <= score < ``high``: medium; ``low`` <= score <
    ``medium``: low; below ``low``: knowledge gap.

    The score cut-offs are the documented defaults of ``LECTERN_BAND_HIGH/MEDIUM/LOW``
    (docs/api.md), set by hand, not fitted: they split the re-ranker's weighted score into
    the answer's three voices. ``retrieval_gap`` is the calibrated retrieval confidence at
    which answerable and off-topic questions separate (the re-ranker's calibration midpoints
    are fitted to put it at 0.5: ``bench/tune_rerank.py``, ``bench/fit_rerank.py``). Which
    band a chat turn ends in is decided in one place, the gateway's ``chat.decision``.
    """

    high: float = 0.80
    medium: float = 0.60
    low: float = 0.40
    retrieval_gap: float = 0.50

    def __post_init__(self) -> None:
        if not 0.0 <= self.low <= self.medium <= self.high <= 1.0:
            raise ValueError(
                f"band thresholds must satisfy 0 <= low <= medium <= high <= 1, got "
                f"low={self.low}, medium={self.medium}, high={self.high}"
            )


@dataclass(frozen=True)
class Calibration:
    """Logistic map of the top semantic score to a retrieval confidence in 0..1.

    ``midpoint`` is the semantic score at which on-topic and off-topic questions separate
    (confidence 0.5); ``scale`` is how fast confidence rises around it.
    """

    midpoint: float
    scale: float

    def __call__(self, top_semantic: float) -> float:
        """Retrieval confidence of a top semantic score."""
        z = (top_semantic - self.midpoint) / max(self.scale, 1e-6)
        return 1.0 / (1.0 + math.exp(-max(min(z, 50.0), -50.0)))


@dataclass(frozen=True)
class ConfidenceWeights:
    """Weights of the confidence parts (the re-ranker's verdict; the gateway's own when the
    re-ranker does not answer)."""

    retrieval: float = 0.4
    source_quality: float = 0.3
    grounding: float = 0.3


#: the re-ranker's bi-encoder calibration (the gateway's too, when the re-ranker does not
#: answer and a turn's sources are the retriever's order).
# Chosen with bench/tune_rerank.py on bioasq-dev (600 questions, 13,449 documents) and
# bench/bench_rerank.py on pubmedqa-pqal: with the midpoint at 0.38, 96% of
# bench/data/offtopic_questions.txt fall in the gap band against 1.8% of bioasq's answerable
# questions (0.32: 84% / 0.5%; 0.40: 98% / 2.2%). A large corpus holds more passages that
# resemble an off-topic question by chance, so the midpoint must sit above their top cosine.
BI_ENCODER_CALIBRATION = Calibration(midpoint=0.38, scale=0.05)


def band_for(score: float, retrieval: float, thresholds: BandThresholds) -> ConfidenceBand:
    """The band of a confidence score; weak retrieval alone makes it a knowledge gap."""
    if retrieval < thresholds.retrieval_gap or score < thresholds.low:
        return "gap"
    return answered_band(score, thresholds)


def answered_band(score: float, thresholds: BandThresholds) -> ConfidenceBand:
    """The band of a question that was answered: ``low`` at worst (gap is decided earlier)."""
    if score >= thresholds.high:
        return "high"
    if score >= thresholds.medium:
        return "medium"
    return "low"


#: content types each learning style prefers (the re-ranker's content-type signal)
STYLE_CONTENT_TYPES: dict[str, frozenset[str]] = {
    "visual": frozenset({"diagram", "slides", "video", "image", "figure", "infographic", "table"}),
    "auditory": frozenset({"video", "audio", "lecture", "podcast"}),
    "reading": frozenset({"text", "textbook", "notes", "article", "reading"}),
    "examples": frozenset({"worked example", "example", "exercise", "qa", "problem", "quiz"}),
    "kinesthetic": frozenset({"exercise", "lab", "activity", "simulation", "worksheet"}),
}


def preferred_content_types(learning_style: str | None) -> list[str]:
    """The content types a learning style prefers, sorted (empty for none or an unknown one)."""
    if not learning_style:
        return []
    key = " ".join(learning_style.lower().replace("_", " ").replace("-", " ").split())
    return sorted(STYLE_CONTENT_TYPES.get(key, frozenset()))
