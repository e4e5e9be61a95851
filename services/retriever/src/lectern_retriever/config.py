"""Settings of the retriever service (env prefix LECTERN_RETRIEVER_; shared: LECTERN_*)."""

from __future__ import annotations

from pydantic_settings import SettingsConfigDict

from lectern_common.settings import ServiceHttpSettings, shared


class Settings(ServiceHttpSettings):
    """Retriever settings."""

    model_config = SettingsConfigDict(env_prefix="LECTERN_RETRIEVER_")

    service_name: str = shared("service_name", "lectern-retriever", "name in logs and traces")
    http_port: int = 8002
