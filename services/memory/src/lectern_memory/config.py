"""Settings of the memory service (env prefix LECTERN_MEMORY_, shared values from LECTERN_*)."""

from __future__ import annotations

from pydantic_settings import SettingsConfigDict

from lectern_common.settings import ServiceHttpSettings, shared


class Settings(ServiceHttpSettings):
    """Memory settings."""

    model_config = SettingsConfigDict(env_prefix="LECTERN_MEMORY_")

    service_name: str = shared("service_name", "lectern-memory", "name in logs and traces")
    http_port: int = 8004
