"""Settings of the memory service (env prefix LECTERN_MEMORY_; shared: LECTERN_*)."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from lectern_common.settings import ServiceHttpSettings, shared


class Settings(ServiceHttpSettings):
    """Memory service settings."""

    model_config = SettingsConfigDict(env_prefix="LECTERN_MEMORY_")

    service_name: str = shared("service_name", "lectern-memory", "name in logs and traces")
    http_port: int = 8004
    merge_threshold: float = Field(
        default=0.85, ge=0.0, le=1.0, description="cosine above which a memory updates a twin"
    )
    replace_threshold: float = Field(
        default=0.70, ge=0.0, le=1.0, description="cosine for 'mastered' to replace a 'struggle'"
    )
    recall_k: int = Field(default=3, ge=1, le=20)
    recall_candidates: int = Field(default=50, ge=3, le=1000)
    weight_similarity: float = 0.70
    weight_recency: float = 0.15
    weight_strength: float = 0.15
    recency_half_life_days: float = 30.0
    max_deliveries: int = 5
