"""Settings of the reranker service (env prefix LECTERN_RERANKER_, shared values from LECTERN_*)."""

from __future__ import annotations

from pydantic_settings import SettingsConfigDict

from lectern_common.settings import ServiceHttpSettings, shared


class Settings(ServiceHttpSettings):
    """Re-ranker settings."""

    model_config = SettingsConfigDict(env_prefix="LECTERN_RERANKER_")

    service_name: str = shared("service_name", "lectern-reranker", "name in logs and traces")
    http_port: int = 8003
