"""Settings: one ``BaseServiceSettings`` shared by every service, one subclass per service.

Shared values are read from ``LECTERN_*`` variables (``LECTERN_NATS_URL``,
``LECTERN_DATABASE_URL`` ...). Each service's own values use its prefix
(``LECTERN_INGEST_*``, ``LECTERN_GATEWAY_*`` ...). Every field can also be passed by name
to the constructor, which is how tests build their own settings without touching the
environment.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import AliasChoices, Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from lectern_common.education import BandThresholds

Environment = Literal["development", "test", "production"]
EmbeddingProvider = Literal["local", "gemini"]

DEV_JWT_SECRET = "lectern-development-secret-not-for-production"  # noqa: S105


def shared(name: str, default: Any, description: str) -> Any:
    """A field read from ``LECTERN_<NAME>`` whatever the subclass's prefix is."""
    return Field(
        default=default,
        validation_alias=AliasChoices(f"LECTERN_{name.upper()}"),
        description=description,
    )


class BaseServiceSettings(BaseSettings):
    """What every Lectern process needs: identity, NATS, Postgres, telemetry, models."""

    model_config = SettingsConfigDict(
        env_prefix="LECTERN_",
        extra="ignore",
        populate_by_name=True,
        case_sensitive=False,
        env_ignore_empty=True,  # LECTERN_GEMINI_API_KEY= (empty) means "not configured"
    )

    service_name: str = shared("service_name", "lectern", "name in logs, traces and metrics")
    environment: Environment = shared(
        "environment",
        "development",
        "only development accepts the built-in JWT secret; test and production need their own",
    )
    nats_url: str = shared(
        "nats_url", "nats://127.0.0.1:4222", "NATS server URL(s), comma-separated"
    )
    nats_user: str | None = shared(
        "nats_user", None, "NATS user of this service (unset: connect without authentication)"
    )
    nats_password: SecretStr | None = shared("nats_password", None, "password of NATS_USER")
    database_url: str = shared(
        "database_url",
        "postgresql://postgres@127.0.0.1:5432/postgres",
        "Postgres DSN (a Unix socket via ?host=/path works); the re-ranker has no database",
    )
    database_read_url: str | None = shared(
        "database_read_url",
        None,
        "Postgres DSN of a streaming read replica (CloudNativePG's -ro service) for the "
        "retriever's searches and the index's reads, and memory recall; unset: the primary",
    )
    database_read_max_lag_s: float = shared(
        "database_read_max_lag_s",
        5.0,
        "reads leave the replica while it is down or this many seconds behind the primary",
    )
    db_pool_min: int = shared("db_pool_min", 1, "asyncpg pool minimum size")
    db_pool_max: int = shared("db_pool_max", 10, "asyncpg pool maximum size")
    db_connect_timeout_s: float = shared(
        "db_connect_timeout_s", 5.0, "opening a Postgres connection gives up after this"
    )
    db_command_timeout_s: float = shared(
        "db_command_timeout_s",
        60.0,
        "a Postgres statement gives up after this (an unreachable server fails, not hangs)",
    )
    stream_replicas: int = shared(
        "stream_replicas", 1, "JetStream stream replicas (3 in a cluster)"
    )
    request_timeout_s: float = shared("request_timeout_s", 10.0, "NATS request/reply timeout")
    outbox_poll_s: float = shared(
        "outbox_poll_s", 2.0, "the outbox relay looks for due rows this often between commits"
    )
    outbox_publish_timeout_s: float = shared(
        "outbox_publish_timeout_s",
        5.0,
        "the outbox relay gives up on a publish JetStream has not acknowledged after this",
    )
    outbox_first_backoff_s: float = shared(
        "outbox_first_backoff_s",
        1.0,
        "an outbox row is tried again this long after its first failed publish, doubling",
    )
    outbox_max_backoff_s: float = shared(
        "outbox_max_backoff_s", 30.0, "the outbox relay's longest wait between retries"
    )
    otlp_endpoint: str | None = shared(
        "otlp_endpoint", None, "OTLP/HTTP endpoint; unset: no export"
    )
    log_level: str = shared("log_level", "INFO", "root log level")
    log_json: bool = shared("log_json", True, "JSON logs with trace ids (false: human-readable)")
    health_host: str = shared("health_host", "127.0.0.1", "address the health/HTTP server binds")

    embedding_provider: EmbeddingProvider = shared(
        "embedding_provider", "local", "local MiniLM (offline) or gemini (needs an API key)"
    )
    embedding_batch_size: int = shared("embedding_batch_size", 64, "texts per embedding call")
    local_embedding_model: str | None = shared(
        "local_embedding_model",
        None,
        "path of a sentence-transformers model; unset: packaged MiniLM",
    )
    local_embedding_backend: Literal["onnx", "torch"] = shared(
        "local_embedding_backend",
        "onnx",
        "onnx: the local model exported once to ONNX (same vectors, ~3x faster per query); torch",
    )
    embedding_threads: int | None = shared(
        "embedding_threads", None, "CPU threads of the local model (unset: CPUs, at most 4)"
    )
    query_embedding_precision: Literal["int8", "float32"] = shared(
        "query_embedding_precision",
        "int8",
        "queries through the local ONNX model with int8 weights (2.3x less CPU; cosine 0.98+ "
        "to float, bioasq-dev nDCG@10 dense -0.003, hybrid -0.001) or float32",
    )
    document_embedding_precision: Literal["int8", "float32"] = shared(
        "document_embedding_precision",
        "int8",
        "passages (chunks, answer sentences) through the int8 copy of the local model, one at "
        "a time: 2-3x less CPU at ingest, bioasq-dev nDCG@10 dense 0.744 against 0.741 with "
        "float passages; or float32",
    )
    model_cache_dir: Path | None = shared(
        "model_cache_dir", None, "where ONNX exports are cached (unset: ~/.cache/lectern)"
    )
    gemini_api_key: SecretStr | None = shared("gemini_api_key", None, "enables Gemini models")
    gemini_base_url: str | None = shared(
        "gemini_base_url", None, "override the Gemini REST endpoint (tests, proxies)"
    )
    gemini_embedding_model: str = shared(
        "gemini_embedding_model", "gemini-embedding-001", "Gemini embedding model"
    )
    gemini_embedding_dim: int = shared("gemini_embedding_dim", 768, "output_dimensionality")
    gemini_chat_model: str = shared("gemini_chat_model", "gemini-2.5-flash", "Gemini chat model")
    gemini_secondary_chat_model: str | None = shared(
        "gemini_secondary_chat_model",
        "gemini-2.5-flash-lite",
        "Gemini model tried when the chat model fails (empty: none)",
    )
    llm_temperature: float = shared("llm_temperature", 0.3, "sampling temperature for answers")
    llm_timeout_s: float = shared(
        "llm_timeout_s", 60.0, "HTTP timeout of a model call (per read while streaming)"
    )
    fallback_llm_base_url: str | None = shared(
        "fallback_llm_base_url",
        None,
        "OpenAI-compatible API base (…/v1) used when Gemini fails or rate-limits; unset: none",
    )
    fallback_llm_api_key: SecretStr | None = shared(
        "fallback_llm_api_key", None, "bearer key of the fallback provider"
    )
    fallback_llm_model: str | None = shared(
        "fallback_llm_model", None, "model name at the fallback provider (e.g. deepseek-chat)"
    )

    jwt_secret: SecretStr | None = shared(
        "jwt_secret", None, "HS256 signing secret for bearer tokens"
    )

    # one definition of the confidence bands, read by the re-ranker and the gateway alike
    band_high: float = shared("band_high", BandThresholds.high, "confidence >= this: high")
    band_medium: float = shared("band_medium", BandThresholds.medium, "confidence >= this: medium")
    band_low: float = shared(
        "band_low", BandThresholds.low, "confidence >= this: low; below: knowledge gap"
    )

    @model_validator(mode="after")
    def _secrets_required_outside_development(self) -> BaseServiceSettings:
        # any environment but development (test and staging deployments too) could be
        # reachable by others: there, tokens signed with the published secret must not pass
        if self.environment != "development":
            secret = self.jwt_secret.get_secret_value() if self.jwt_secret else ""
            if not secret or secret == DEV_JWT_SECRET or len(secret) < 32:
                raise ValueError(
                    "LECTERN_JWT_SECRET must be set to a random value of at least 32 characters "
                    f"outside development (LECTERN_ENVIRONMENT={self.environment}; the built-in "
                    "development secret is refused)"
                )
        if (self.nats_user is None) != (self.nats_password is None):
            raise ValueError("LECTERN_NATS_USER and LECTERN_NATS_PASSWORD go together")
        if self.embedding_provider == "gemini" and self.gemini_api_key is None:
            raise ValueError("LECTERN_EMBEDDING_PROVIDER=gemini needs LECTERN_GEMINI_API_KEY")
        self.band_thresholds()  # raises on cut-offs out of order
        return self

    def band_thresholds(self, *, retrieval_gap: float | None = None) -> BandThresholds:
        """The configured confidence band cut-offs (``LECTERN_BAND_HIGH/MEDIUM/LOW``)."""
        return BandThresholds(
            high=self.band_high,
            medium=self.band_medium,
            low=self.band_low,
            retrieval_gap=BandThresholds.retrieval_gap if retrieval_gap is None else retrieval_gap,
        )

    @property
    def effective_jwt_secret(self) -> str:
        """The HS256 secret: the configured one, or the fixed development secret."""
        if self.jwt_secret is not None:
            return self.jwt_secret.get_secret_value()
        return DEV_JWT_SECRET

    @property
    def nats_credentials(self) -> tuple[str, str] | None:
        """(user, password) for NATS, or None to connect without authentication."""
        if self.nats_user is None:
            return None
        password = self.nats_password.get_secret_value() if self.nats_password else ""
        return self.nats_user, password

    @property
    def gemini_enabled(self) -> bool:
        """Whether a Gemini key is configured."""
        return self.gemini_api_key is not None


class ServiceHttpSettings(BaseServiceSettings):
    """A service that serves HTTP (health for workers, the API for the gateway)."""

    http_port: int = 8080
    graceful_timeout_s: float = 30.0
    keep_alive_s: float = shared(
        "http_keep_alive_s",
        75.0,
        "how long the server keeps an idle HTTP connection open; longer than any client's or "
        "load balancer's idle expiry (httpx 5 s, a cloud load balancer's 60 s), so the server "
        "never closes a connection just as a client sends on it again (a reset, seen as a "
        "failed request with uvicorn's 5 s against httpx's 5 s)",
    )
    metrics_on_http: bool = shared(
        "metrics_on_http",
        True,
        "serve GET /metrics (Prometheus) on the HTTP port; false where that port is public",
    )
    metrics_port: int | None = shared(
        "metrics_port", None, "also serve the Prometheus scrape on this port (all interfaces)"
    )
