"""The error hierarchy shared by every service.

Handlers map these onto broker outcomes (retryable -> nack with backoff, permanent -> reject
and a ``failed`` / dead-letter event) and the gateway maps them onto problem+json responses.
"""

from __future__ import annotations


class LecternError(Exception):
    """Base class of every error Lectern raises on purpose."""

    #: machine-readable reason, stable across versions (used in events and problem+json)
    reason: str = "error"

    def __init__(self, message: str, *, reason: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if reason is not None:
            self.reason = reason


class RetryableError(LecternError):
    """Raised when an operation may succeed if tried again (a dependency is down, a timeout)."""

    reason = "retryable"


class PermanentError(LecternError):
    """Raised when retrying cannot help: the input or the state makes the operation impossible."""

    reason = "permanent"


class BadInputError(PermanentError):
    """Raised when a caller sent something invalid (HTTP 400/422, a rejected message)."""

    reason = "bad_input"


class NotFoundError(PermanentError):
    """Raised when a requested entity does not exist in the caller's tenant."""

    reason = "not_found"


class ForbiddenError(PermanentError):
    """Raised when the caller is authenticated but not allowed to do this."""

    reason = "forbidden"


class ConfigurationError(PermanentError):
    """Raised at start-up when settings are missing or inconsistent."""

    reason = "configuration"


class EmbeddingModelMismatch(ConfigurationError):
    """Raised when the configured embedder is not the model the index was built with.

    Vectors of two models are not comparable, even at the same dimension: switching models
    is a re-index.
    """

    reason = "embedding_model_mismatch"


class EmbeddingDimensionMismatch(EmbeddingModelMismatch):
    """Raised when the configured embedder's dimension differs from the index's recorded one."""

    reason = "embedding_dimension_mismatch"


class UpstreamError(RetryableError):
    """Raised when a hosted model or another service failed or rate-limited us."""

    reason = "upstream"

    def __init__(
        self, message: str, *, reason: str | None = None, retry_after_s: float | None = None
    ) -> None:
        super().__init__(message, reason=reason)
        #: the wait the upstream asked for (HTTP ``Retry-After``, Gemini's ``RetryInfo``)
        self.retry_after_s = retry_after_s


class NatsUnavailableError(UpstreamError):
    """Raised when NATS cannot take or answer a call now: the client is reconnecting, a
    JetStream stream has no leader (a server lost, an election, the quorum lost) or its
    acknowledgement did not come in time. Transient: retry after ``retry_after_s``."""

    reason = "nats_unavailable"
