"""Lectern's Python client: the gateway's HTTP API with typed models, typed errors, retries
that honour ``Retry-After``, and an answer stream that resumes by itself.

```python
from lectern_client import LecternClient

with LecternClient("http://127.0.0.1:8000", token) as lectern:
    session = lectern.create_session(mode="chat")
    for event in lectern.ask(session.id, "What does mitosis produce?"):
        ...
```
"""

from lectern_client._core import DEFAULT_URL, Options
from lectern_client.async_client import AsyncAnswerStream, AsyncLecternClient
from lectern_client.client import AnswerStream, LecternClient
from lectern_client.errors import (
    BadRequest,
    Conflict,
    ConnectionFailed,
    DocumentNotIndexed,
    Forbidden,
    LecternError,
    NotFound,
    PayloadTooLarge,
    RateLimited,
    RetryableError,
    ServerError,
    Unauthorized,
    Unavailable,
    UnsupportedMediaType,
    ValidationError,
)
from lectern_client.events import (
    Answer,
    AnswerEvent,
    CheckEvent,
    CitationEvent,
    ConfidenceEvent,
    DocumentEvent,
    DocumentProgress,
    DocumentStatus,
    DoneEvent,
    ErrorEvent,
    RestartEvent,
    Source,
    SourcesEvent,
    TokenEvent,
    UnknownEvent,
)

__all__ = [
    "DEFAULT_URL",
    "Answer",
    "AnswerEvent",
    "AnswerStream",
    "AsyncAnswerStream",
    "AsyncLecternClient",
    "BadRequest",
    "CheckEvent",
    "CitationEvent",
    "ConfidenceEvent",
    "Conflict",
    "ConnectionFailed",
    "DocumentEvent",
    "DocumentNotIndexed",
    "DocumentProgress",
    "DocumentStatus",
    "DoneEvent",
    "ErrorEvent",
    "Forbidden",
    "LecternClient",
    "LecternError",
    "NotFound",
    "Options",
    "PayloadTooLarge",
    "RateLimited",
    "RestartEvent",
    "RetryableError",
    "ServerError",
    "Source",
    "SourcesEvent",
    "TokenEvent",
    "Unauthorized",
    "Unavailable",
    "UnknownEvent",
    "UnsupportedMediaType",
    "ValidationError",
]
