"""Settings of the gateway service (env prefix LECTERN_GATEWAY_, shared values from LECTERN_*)."""

from __future__ import annotations

from pydantic_settings import SettingsConfigDict

from lectern_common.settings import ServiceHttpSettings, shared


class Settings(ServiceHttpSettings):
    """Chat gateway settings."""

    model_config = SettingsConfigDict(env_prefix="LECTERN_GATEWAY_")

    service_name: str = shared("service_name", "lectern-gateway", "name in logs and traces")
    http_port: int = 8000
