"""The errors the client raises: every problem+json answer of the gateway as a typed exception.

Each class's docstring says when it is raised. All HTTP ones carry the RFC 9457 fields
(``status``, ``type``, ``title``, ``detail``, ``instance``) and the gateway's extensions
(``reason``, ``errors``, ``retry_after_s`` ...) in ``extensions``.
"""

from __future__ import annotations

from typing import Any

from lectern_client._headers import retry_after_seconds
from lectern_client.models import DocumentView


class LecternError(Exception):
    """Base of every error the client raises for an answer of the gateway."""

    def __init__(
        self,
        status: int,
        title: str,
        detail: str | None = None,
        *,
        type: str = "about:blank",
        instance: str | None = None,
        extensions: dict[str, Any] | None = None,
        body: Any = None,
        text: str = "",
        headers: dict[str, str] | None = None,
    ) -> None:
        self.status = status
        self.title = title
        self.detail = detail
        self.type = type
        self.instance = instance
        self.extensions = dict(extensions or {})
        #: the parsed JSON body (None when it was not JSON) and the raw text
        self.body = body
        self.text = text
        self.headers = dict(headers or {})
        super().__init__(f"{status} {title}" + (f": {detail}" if detail else ""))

    @property
    def reason(self) -> str | None:
        """The gateway's machine-readable ``reason`` extension, when it gave one."""
        reason = self.extensions.get("reason")
        return str(reason) if reason is not None else None


class BadRequest(LecternError):
    """400: malformed input the gateway refused (a NUL character, a cursor it did not give)."""


class Unauthorized(LecternError):
    """401: no token or API key, or an expired, revoked or invalid one."""


class Forbidden(LecternError):
    """403: the caller's role or classes do not allow this."""


class NotFound(LecternError):
    """404: no such resource in the caller's tenant (or not visible to the caller)."""


class Conflict(LecternError):
    """409: the resource is in a state that forbids this (an ended session, in progress)."""


class PayloadTooLarge(LecternError):
    """413: an upload over the size limit, or a JSON body over 1 MB."""


class UnsupportedMediaType(LecternError):
    """415: an upload of a type Lectern does not index."""


class ValidationError(LecternError):
    """422: the body or a parameter failed validation; ``errors`` lists the fields at fault."""

    @property
    def errors(self) -> list[dict[str, Any]]:
        """The fields at fault, as the gateway listed them."""
        found = self.extensions.get("errors")
        return list(found) if isinstance(found, list) else []


class RetryableError(LecternError):
    """Base of the answers worth repeating later (``retry_after``: seconds the gateway asked)."""

    @property
    def retry_after(self) -> float | None:
        """The ``Retry-After`` the gateway sent, in seconds, when it sent one."""
        return retry_after_seconds(self.headers.get("retry-after"))


class RateLimited(RetryableError):
    """429: a rate or daily limit; raised once the client's retries are used up or the wait
    the gateway asks for is longer than ``max_retry_wait``."""


class ServerError(LecternError):
    """5xx other than 503: the gateway failed (``reason: internal``; details are in its log)."""


class Unavailable(RetryableError, ServerError):
    """503: a dependency is away (the object store, a clean-up to repeat); raised once the
    client's retries are used up."""


class ConnectionFailed(LecternError):
    """No answer: the gateway could not be reached, or the connection broke and could not be
    resumed (``status`` 0)."""

    def __init__(self, detail: str) -> None:
        super().__init__(0, "Connection failed", detail)


class DocumentNotIndexed(Exception):
    """``wait_until_indexed``: the document ended ``failed``, ``deleted`` or ``superseded``
    (``document`` is its last view, with the error's stage, reason and message)."""

    def __init__(self, document: DocumentView) -> None:
        self.document = document
        error = document.error
        why = f": [{error.stage}/{error.reason}] {error.message}" if error is not None else ""
        super().__init__(f"document {document.id} is {document.status}{why}")


_BY_STATUS: dict[int, type[LecternError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    413: PayloadTooLarge,
    415: UnsupportedMediaType,
    422: ValidationError,
    429: RateLimited,
    503: Unavailable,
}


def error_class(status: int) -> type[LecternError]:
    """The exception class of an HTTP status."""
    if status in _BY_STATUS:
        return _BY_STATUS[status]
    return ServerError if status >= 500 else LecternError
