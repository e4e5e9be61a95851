"""Settings of the reranker service (env prefix LECTERN_RERANKER_, shared values from LECTERN_*)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator
from pydantic_settings import SettingsConfigDict

from lectern_common.onnx_models import default_cache_dir
from lectern_common.reading import PACKAGED_L3_NAME, PACKAGED_NAME
from lectern_common.settings import ServiceHttpSettings, shared
from lectern_reranker.service import (
    BI_ENCODER_CALIBRATION,
    CROSS_ENCODER_CALIBRATION,
    LEXICAL_CALIBRATION,
    BandThresholds,
    Calibration,
    ConfidenceWeights,
    RerankConfig,
    SignalWeights,
)

_W = SignalWeights()
_B = BandThresholds()
_C = ConfidenceWeights()


#: the value of ``cross_encoder_model`` that means no cross-encoder (the bi-encoder scores):
#: an empty variable cannot say it, since settings read an empty variable as unset
NO_CROSS_ENCODER = "none"


class Settings(ServiceHttpSettings):
    """Re-ranker settings."""

    model_config = SettingsConfigDict(env_prefix="LECTERN_RERANKER_")

    service_name: str = shared("service_name", "lectern-reranker", "name in logs and traces")
    http_port: int = 8003

    cross_encoder_model: str | None = Field(
        default=PACKAGED_L3_NAME,
        description=f"{PACKAGED_L3_NAME!r}: the 3-layer reader shipped with Lectern (the "
        f"relevance model is fitted on it); {PACKAGED_NAME!r}: the 6-layer one (twice the "
        "cost); else a reader folder, a CrossEncoder model name (in the local HF cache) or "
        f"path; {NO_CROSS_ENCODER!r}: the bi-encoder",
    )  # fmt: skip
    cross_encoder_max_length: int | None = Field(
        default=192, ge=16,
        description="word pieces per (query, chunk) pair: a reading window of this length "
        "(a course chunk of ~150 words read at 96 pieces lost the answer: the answer set's "
        "answerable questions refused 0.011 -> 0.028 on dev; docs/benchmarks.md 'Under load')",
    )  # fmt: skip
    cross_encoder_candidates: int | None = Field(
        default=8, ge=1,
        description="candidates (first of the fused order) the cross-encoder reads; the others "
        "follow them in the fused order (unset: all)",
    )  # fmt: skip
    cross_encoder_read_first: int = Field(
        default=0, ge=0,
        description="of the candidates read, read the first this many first and the others "
        "only when none of them reads as relevant (even odds); unread, they follow in the "
        "fused order (0: all at once, the default; 4 read 0.52 of bioasq's candidates and 0.67 "
        "of the soak's word pieces, at a cost in answers: docs/benchmarks.md 'Thirty-seventh "
        "session')",
    )  # fmt: skip
    cross_encoder_window: bool = Field(
        default=True,
        description="the cross-encoder reads each candidate's reading window (its first line "
        "and the sentences around the question's terms, sized to the max length) rather than "
        "its opening",
    )
    cross_encoder_batch_size: int = Field(default=32, ge=1)
    cross_encoder_backend: Literal["onnx", "torch"] = Field(
        default="onnx",
        description="onnx: exported once (cached) and run with onnxruntime; torch: as loaded",
    )
    cross_encoder_quantize: bool = Field(
        default=True, description="onnx backend: dynamic int8 quantization of the weights"
    )
    cross_encoder_cache_dir: Path = Field(
        default_factory=lambda: default_cache_dir("cross-encoder"),
        description="where the ONNX export is cached (per model weights)",
    )
    cross_encoder_threads: int | None = Field(
        default=None, ge=1, description="onnxruntime intra-op threads (unset: CPUs, at most 4)"
    )

    reuse_index_vectors: bool = Field(
        default=True,
        description="bi-encoder: use the chunks' stored embeddings when the index has our model "
        "(asked of the retriever, lectern.index.vectors.v1)",
    )
    index_vectors_timeout_s: float = Field(
        default=0.3, gt=0.0,
        description="bi-encoder: the retriever's stored vectors are waited for this long, then "
        "the candidates are embedded here (and for 10 s no more asked for): the retriever's "
        "read is one statement by primary key, embedding 20 course chunks of ~110 words "
        "took 0.5 s of CPU (packaged MiniLM, 2-core test machine)",
    )  # fmt: skip

    weight_semantic: float = Field(default=_W.semantic, ge=0.0)
    weight_grade: float = Field(default=_W.grade, ge=0.0)
    weight_curriculum: float = Field(default=_W.curriculum, ge=0.0)
    weight_source_priority: float = Field(default=_W.source_priority, ge=0.0)
    weight_freshness: float = Field(default=_W.freshness, ge=0.0)
    weight_content_type: float = Field(default=_W.content_type, ge=0.0)
    bi_encoder_rank_prior: float = Field(
        default=1.0, ge=0.0, le=1.0,
        description="bi-encoder only: share of the retriever's order in the relevance signal",
    )  # fmt: skip

    bi_encoder_sentence_match: float = Field(
        default=0.25, ge=0.0, le=1.0,
        description="bi-encoder only: share of the best sentence's match of the question's "
        "terms in the relevance (a long chunk answering in one sentence)",
    )  # fmt: skip

    duplicate_overlap: float = Field(default=0.80, gt=0.0, le=1.0)

    # band_high / band_medium / band_low are shared settings (LECTERN_BAND_*), so the gateway
    # re-bands the final confidence with the very same cut-offs
    retrieval_gap: float = Field(
        default=_B.retrieval_gap, ge=0.0, le=1.0,
        description="retrieval confidence below which the band is gap whatever the rest",
    )  # fmt: skip
    confidence_weight_retrieval: float = Field(default=_C.retrieval, ge=0.0)
    confidence_weight_source_quality: float = Field(default=_C.source_quality, ge=0.0)
    confidence_weight_grounding: float = Field(default=_C.grounding, ge=0.0)
    grounding_prior: float = Field(
        default=1.0, ge=0.0, le=1.0,
        description="grounding assumed until the gateway measures it (which can only lower "
        "the band an answer opened in)",
    )  # fmt: skip
    bi_encoder_midpoint: float = BI_ENCODER_CALIBRATION.midpoint
    bi_encoder_scale: float = Field(default=BI_ENCODER_CALIBRATION.scale, gt=0.0)
    cross_encoder_midpoint: float = CROSS_ENCODER_CALIBRATION.midpoint
    cross_encoder_scale: float = Field(default=CROSS_ENCODER_CALIBRATION.scale, gt=0.0)
    lexical_midpoint: float | None = Field(
        default=LEXICAL_CALIBRATION.midpoint,
        description="bi-encoder: share of the question's terms in one sentence of the kept "
        "chunks at which it alone gives retrieval confidence 0.5 (unset: cosine only)",
    )
    lexical_scale: float = Field(default=LEXICAL_CALIBRATION.scale, gt=0.0)

    @field_validator("cross_encoder_model")
    @classmethod
    def _no_cross_encoder(cls, value: str | None) -> str | None:
        """``none`` (any case) and an explicit empty value mean the bi-encoder."""
        if value is None or value.strip().lower() in {"", NO_CROSS_ENCODER}:
            return None
        return value

    def rerank_config(self) -> RerankConfig:
        """The pipeline's tuning from these settings."""
        return RerankConfig(
            weights=SignalWeights(
                semantic=self.weight_semantic, grade=self.weight_grade,
                curriculum=self.weight_curriculum, source_priority=self.weight_source_priority,
                freshness=self.weight_freshness, content_type=self.weight_content_type,
            ),
            bands=self.band_thresholds(retrieval_gap=self.retrieval_gap),
            confidence=ConfidenceWeights(
                retrieval=self.confidence_weight_retrieval,
                source_quality=self.confidence_weight_source_quality,
                grounding=self.confidence_weight_grounding,
            ),
            calibrations={
                "bi-encoder": Calibration(self.bi_encoder_midpoint, self.bi_encoder_scale),
                "cross-encoder": Calibration(
                    self.cross_encoder_midpoint, self.cross_encoder_scale
                ),
            },
            lexical_calibration=None if self.lexical_midpoint is None
            else Calibration(self.lexical_midpoint, self.lexical_scale),
            grounding_prior=self.grounding_prior,
            duplicate_overlap=self.duplicate_overlap,
            rank_prior_weight={"bi-encoder": self.bi_encoder_rank_prior, "cross-encoder": 0.0},
            sentence_match_weight={
                "bi-encoder": self.bi_encoder_sentence_match, "cross-encoder": 0.0
            },
            cross_encoder_candidates=self.cross_encoder_candidates,
            cross_encoder_read_first=self.cross_encoder_read_first or None,
            reading_window=self.cross_encoder_window,
        )  # fmt: skip
