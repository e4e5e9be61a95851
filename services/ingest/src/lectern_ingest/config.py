"""Settings of the ingest service (env prefix LECTERN_INGEST_, shared values from LECTERN_*)."""

from __future__ import annotations

from pydantic_settings import SettingsConfigDict

from lectern_common.settings import ServiceHttpSettings, shared


class Settings(ServiceHttpSettings):
    """Ingest worker settings."""

    model_config = SettingsConfigDict(env_prefix="LECTERN_INGEST_")

    service_name: str = shared("service_name", "lectern-ingest", "name in logs and traces")
    http_port: int = 8001
