"""What the sync and async clients share, free of I/O: options, request building, the
problem+json error mapping, the retry policy and the answer stream's resume state.

Every API method is a :class:`Call`: the request to send and how to read its answer. The two
clients only differ in how they send it (``httpx.Client`` or ``httpx.AsyncClient``) and wait.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import date
from typing import IO, Any, Generic, TypeVar

import httpx
from pydantic import BaseModel, TypeAdapter

import lectern_client.models as models
from lectern_client._headers import retry_after_seconds
from lectern_client.errors import ConnectionFailed, LecternError, error_class
from lectern_client.events import (
    Answer,
    AnswerEvent,
    CheckEvent,
    CitationEvent,
    ConfidenceEvent,
    DoneEvent,
    ErrorEvent,
    RestartEvent,
    SourcesEvent,
    TokenEvent,
    parse_answer_event,
)

DEFAULT_URL = "http://127.0.0.1:8000"
T = TypeVar("T")
#: statuses retried (after ``Retry-After`` when the gateway sends one)
RETRY_STATUSES = frozenset({429, 503})
#: methods safe to send again after a connection broke mid-request
IDEMPOTENT = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE"})

Body = BaseModel | Mapping[str, Any] | None
Progress = Callable[[int, int | None], None]


@dataclass(frozen=True)
class Options:
    """How a client talks to the gateway.

    ``max_retries``: attempts after the first for 429/503 answers and connection failures;
    ``max_retry_wait``: the longest ``Retry-After`` honoured (a longer one, such as a daily
    limit, raises at once); ``max_resumes``: reconnections of an answer stream in a row
    without a new event before giving up; ``stream_read_timeout``: silence after which a
    stream counts as dropped (the gateway pings every 15 s).
    """

    base_url: str = DEFAULT_URL
    token: str | None = None
    api_key: str | None = None
    timeout: float = 60.0
    max_retries: int = 3
    max_retry_wait: float = 60.0
    backoff: float = 0.5
    max_resumes: int = 5
    stream_read_timeout: float = 60.0

    def headers(self) -> dict[str, str]:
        """The authentication headers."""
        headers = {"User-Agent": "lectern-client/0.1"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        if self.api_key:
            headers["X-API-Key"] = self.api_key
        return headers


def resolve_options(
    base_url: str | None,
    token: str | None,
    api_key: str | None = None,
    **settings: Any,
) -> Options:
    """Options from the arguments, else ``LECTERN_GATEWAY_URL``, ``LECTERN_TOKEN`` and
    ``LECTERN_API_KEY``."""
    url = base_url or os.environ.get("LECTERN_GATEWAY_URL") or DEFAULT_URL
    return Options(
        base_url=url.rstrip("/"),
        token=token if token is not None else os.environ.get("LECTERN_TOKEN"),
        api_key=api_key if api_key is not None else os.environ.get("LECTERN_API_KEY"),
        **{k: v for k, v in settings.items() if v is not None},
    )


@dataclass
class Request:
    """One HTTP request, relative to the base URL."""

    method: str
    path: str
    params: dict[str, Any] | None = None
    json: Any = None
    data: dict[str, Any] | None = None
    files: dict[str, Any] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    timeout: httpx.Timeout | None = None

    def build(self, http: httpx.Client | httpx.AsyncClient) -> httpx.Request:
        """The httpx request on ``http`` (its base URL and headers)."""
        extensions = {}
        if self.timeout is not None:
            extensions["timeout"] = self.timeout.as_dict()
        return http.build_request(
            self.method, self.path, params=self.params, json=self.json, data=self.data,
            files=self.files, headers=self.headers, extensions=extensions or None,
        )  # fmt: skip


@dataclass
class Call(Generic[T]):
    """A request and how to read its (successful) answer."""

    request: Request
    parse: Callable[[httpx.Response], T]


def problem_error(response: httpx.Response) -> LecternError:
    """The typed exception of an error answer (problem+json, or whatever else it sent)."""
    text = response.text
    try:
        body: Any = response.json()
    except ValueError:
        body = None
    fields = body if isinstance(body, dict) else {}
    known = {"type", "title", "status", "detail", "instance"}
    cls = error_class(response.status_code)
    return cls(
        response.status_code,
        str(fields.get("title") or response.reason_phrase or "Error"),
        str(fields["detail"]) if fields.get("detail") is not None else (None if body else text),
        type=str(fields.get("type") or "about:blank"),
        instance=str(fields["instance"]) if fields.get("instance") else None,
        extensions={k: v for k, v in fields.items() if k not in known},
        body=body,
        text=text,
        headers=dict(response.headers),
    )


def retry_delay(options: Options, attempt: int, response: httpx.Response) -> float | None:
    """Seconds to wait before sending again after ``response``; None: do not retry."""
    if response.status_code not in RETRY_STATUSES or attempt >= options.max_retries:
        return None
    asked = retry_after_seconds(response.headers.get("retry-after"))
    if asked is None:
        return backoff(options, attempt)
    return asked if asked <= options.max_retry_wait else None


def transport_retry_delay(
    options: Options, attempt: int, method: str, exc: httpx.TransportError
) -> float | None:
    """Seconds to wait before sending again after a connection failure; None: give up.
    A request that may have reached the gateway is repeated only when it is idempotent."""
    if attempt >= options.max_retries:
        return None
    never_sent = isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout)
    return backoff(options, attempt) if never_sent or method in IDEMPOTENT else None


def backoff(options: Options, attempt: int) -> float:
    """Exponential backoff from ``options.backoff``, at most 10 s."""
    return float(min(10.0, options.backoff * 2**attempt))


def connection_failed(exc: httpx.TransportError) -> ConnectionFailed:
    """A transport error as the client's exception."""
    return ConnectionFailed(f"{type(exc).__name__}: {exc}".rstrip(": "))


# --- reading answers ---------------------------------------------------------------------


def _model(model: type[T]) -> Callable[[httpx.Response], T]:
    adapter: TypeAdapter[T] = TypeAdapter(model)
    return lambda response: adapter.validate_json(response.content)


def _list_of(model: type[T]) -> Callable[[httpx.Response], list[T]]:
    adapter: TypeAdapter[list[T]] = TypeAdapter(list[model])  # type: ignore[valid-type]
    return lambda response: adapter.validate_json(response.content)


def _nothing(response: httpx.Response) -> None:
    return None


def _body(body: Body) -> Any:
    if body is None:
        return {}
    if isinstance(body, BaseModel):
        return body.model_dump(mode="json", exclude_unset=True)
    return dict(body)


def _params(**values: Any) -> dict[str, Any]:
    """Query parameters without the unset ones (booleans as ``true``/``false``)."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        if value is None:
            continue
        out[key] = ("true" if value else "false") if isinstance(value, bool) else value
    return out


# --- the calls -----------------------------------------------------------------------------


def get_document(document_id: str | uuid.UUID) -> Call[models.DocumentView]:
    """``GET /v1/documents/{id}``."""
    return Call(Request("GET", f"/v1/documents/{document_id}"), _model(models.DocumentView))


def delete_document(document_id: str | uuid.UUID) -> Call[models.DocumentView]:
    """``DELETE /v1/documents/{id}`` (repeatable: it finishes a failed clean-up)."""
    return Call(Request("DELETE", f"/v1/documents/{document_id}"), _model(models.DocumentView))


def patch_document(document_id: str | uuid.UUID, changes: Body) -> Call[models.DocumentView]:
    """``PATCH /v1/documents/{id}``: metadata changes (``None`` clears a field)."""
    body = (
        changes.model_dump(mode="json", exclude_unset=True)
        if isinstance(changes, BaseModel)
        else dict(changes or {})
    )
    return Call(
        Request("PATCH", f"/v1/documents/{document_id}", json=body), _model(models.DocumentView)
    )


def document_action(document_id: str | uuid.UUID, action: str) -> Call[models.DocumentView]:
    """``POST /v1/documents/{id}/archive`` or ``/restore``."""
    return Call(
        Request("POST", f"/v1/documents/{document_id}/{action}"), _model(models.DocumentView)
    )


def reprocess_document(document_id: str | uuid.UUID) -> Call[models.UploadAccepted]:
    """``POST /v1/documents/{id}/reprocess``: index the stored file again (a new version)."""
    return Call(
        Request("POST", f"/v1/documents/{document_id}/reprocess"), _model(models.UploadAccepted)
    )


def document_audit(document_id: str | uuid.UUID) -> Call[list[models.AuditEntry]]:
    """``GET /v1/documents/{id}/audit``."""
    return Call(Request("GET", f"/v1/documents/{document_id}/audit"), _list_of(models.AuditEntry))


def documents_page(
    *, limit: int, cursor: str | None, filters: Mapping[str, Any]
) -> Call[models.DocumentPage]:
    """One page of ``GET /v1/documents``."""
    params = _params(**filters, limit=limit, cursor=cursor)
    return Call(Request("GET", "/v1/documents", params=params), _model(models.DocumentPage))


def document_filters(
    *,
    status: str | None = None,
    subject: str | None = None,
    collection: str | None = None,
    module_tag: str | None = None,
    class_id: str | None = None,
    content_type: str | None = None,
    language: str | None = None,
    grade_level: int | None = None,
    filename: str | None = None,
    title: str | None = None,
    mine: bool | None = None,
) -> dict[str, Any]:
    """The filters of ``GET /v1/documents`` that are set."""
    return _params(
        status=status, subject=subject, collection=collection, module_tag=module_tag,
        class_id=class_id, content_type=content_type, language=language,
        grade_level=grade_level, filename=filename, title=title, mine=mine,
    )  # fmt: skip


class _ProgressReader:
    """A binary file that reports how many bytes were read (httpx reads uploads in chunks)."""

    def __init__(self, raw: IO[bytes], total: int | None, report: Progress) -> None:
        self._raw, self._total, self._report, self._sent = raw, total, report, 0

    def read(self, size: int = -1) -> bytes:
        chunk = self._raw.read(size)
        self._sent += len(chunk)
        if chunk:
            self._report(self._sent, self._total)
        return chunk

    def seek(self, offset: int, whence: int = 0) -> int:
        position = self._raw.seek(offset, whence)
        if whence == 0 and offset == 0:
            self._sent = 0
        return position

    def tell(self) -> int:
        return self._raw.tell()


def _form_value(value: Any) -> str | list[str]:
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, list | tuple):
        return [str(v) for v in value]
    return str(value)


def upload(
    file: IO[bytes] | bytes,
    *,
    filename: str,
    fields: Mapping[str, Any],
    on_progress: Progress | None,
) -> Call[models.UploadAccepted]:
    """``POST /v1/documents`` (``duplicate`` in the answer: the same bytes as an existing
    document, which is answered instead)."""
    data = {k: _form_value(v) for k, v in fields.items() if v is not None and v != ""}
    if isinstance(file, bytes | bytearray):
        import io

        file = io.BytesIO(bytes(file))
    if on_progress is not None:
        total: int | None
        try:
            here = file.tell()
            total = file.seek(0, 2) - here
            file.seek(here)
        except (OSError, ValueError):
            total = None
        file = _ProgressReader(file, total, on_progress)  # type: ignore[assignment]
    request = Request("POST", "/v1/documents", data=data, files={"file": (filename, file)})
    return Call(request, _model(models.UploadAccepted))


def search(body: Mapping[str, Any] | models.SearchRequest) -> Call[models.SearchResponse]:
    """``POST /v1/search``."""
    return Call(Request("POST", "/v1/search", json=_body(body)), _model(models.SearchResponse))


def create_session(body: Body) -> Call[models.Session]:
    """``POST /v1/sessions``."""
    return Call(Request("POST", "/v1/sessions", json=_body(body)), _model(models.Session))


def get_session(session_id: str | uuid.UUID) -> Call[models.Session]:
    """``GET /v1/sessions/{id}``."""
    return Call(Request("GET", f"/v1/sessions/{session_id}"), _model(models.Session))


def list_sessions(
    *, status: str | None, limit: int | None, user_id: str | None, all_users: bool | None
) -> Call[list[models.Session]]:
    """``GET /v1/sessions``."""
    params = _params(status=status, limit=limit, user_id=user_id, all_users=all_users)
    return Call(Request("GET", "/v1/sessions", params=params), _list_of(models.Session))


def session_messages(session_id: str | uuid.UUID) -> Call[list[models.Message]]:
    """``GET /v1/sessions/{id}/messages``."""
    return Call(Request("GET", f"/v1/sessions/{session_id}/messages"), _list_of(models.Message))


def end_session(session_id: str | uuid.UUID) -> Call[models.Ended]:
    """``POST /v1/sessions/{id}/end``."""
    return Call(Request("POST", f"/v1/sessions/{session_id}/end"), _model(models.Ended))


def create_quiz(body: Body) -> Call[models.QuizView]:
    """``POST /v1/quizzes``: draw a quiz from the material."""
    return Call(Request("POST", "/v1/quizzes", json=_body(body)), _model(models.QuizView))


def get_quiz(quiz_id: str | uuid.UUID) -> Call[models.QuizView]:
    """``GET /v1/quizzes/{id}``."""
    return Call(Request("GET", f"/v1/quizzes/{quiz_id}"), _model(models.QuizView))


def attempt_quiz(
    quiz_id: str | uuid.UUID, answers: Mapping[str, str]
) -> Call[models.AttemptResult]:
    """``POST /v1/quizzes/{id}/attempts``: the answers checked."""
    return Call(
        Request("POST", f"/v1/quizzes/{quiz_id}/attempts", json={"answers": dict(answers)}),
        _model(models.AttemptResult),
    )


def syllabus(
    *, subject: str | None, module: str | None, document_id: str | uuid.UUID | None
) -> Call[models.Syllabus]:
    """``GET /v1/syllabus``."""
    params = _params(subject=subject, module=module, document_id=document_id)
    return Call(Request("GET", "/v1/syllabus", params=params), _model(models.Syllabus))


def my_memories() -> Call[list[models.Memory]]:
    """``GET /v1/me/memories``."""
    return Call(Request("GET", "/v1/me/memories"), _list_of(models.Memory))


def list_webhooks() -> Call[list[models.Webhook]]:
    """``GET /v1/webhooks`` (admins)."""
    return Call(Request("GET", "/v1/webhooks"), _list_of(models.Webhook))


def create_api_key(body: Body) -> Call[models.CreatedApiKey]:
    """``POST /v1/api-keys`` (admins): the key is in the answer, once."""
    return Call(Request("POST", "/v1/api-keys", json=_body(body)), _model(models.CreatedApiKey))


def list_api_keys() -> Call[list[models.ApiKey]]:
    """``GET /v1/api-keys`` (admins)."""
    return Call(Request("GET", "/v1/api-keys"), _list_of(models.ApiKey))


def revoke_api_key(key_id: str | uuid.UUID) -> Call[None]:
    """``DELETE /v1/api-keys/{id}``."""
    return Call(Request("DELETE", f"/v1/api-keys/{key_id}"), _nothing)


def list_personas() -> Call[list[models.Persona]]:
    """``GET /v1/personas``."""
    return Call(Request("GET", "/v1/personas"), _list_of(models.Persona))


def get_persona(slug: str) -> Call[models.Persona]:
    """``GET /v1/personas/{slug}``."""
    return Call(Request("GET", f"/v1/personas/{slug}"), _model(models.Persona))


def save_persona(body: Body, *, slug: str | None = None) -> Call[models.Persona]:
    """``POST /v1/personas`` (a new slug) or ``PUT /v1/personas/{slug}`` (its next version)."""
    if slug is None:
        return Call(Request("POST", "/v1/personas", json=_body(body)), _model(models.Persona))
    return Call(Request("PUT", f"/v1/personas/{slug}", json=_body(body)), _model(models.Persona))


def quality(
    *, start: date, end: date, group_by: str, persona: str | None, subject: str | None
) -> Call[models.Quality]:
    """``GET /v1/metrics/quality``."""
    params = _params(
        **{"from": str(start)}, to=str(end), group_by=group_by, persona=persona, subject=subject
    )
    return Call(Request("GET", "/v1/metrics/quality", params=params), _model(models.Quality))


def raw_json(method: str, path: str, **kwargs: Any) -> Call[Any]:
    """Any other endpoint: the JSON it answers (None for an empty answer)."""
    return Call(
        Request(method, path, **kwargs),
        lambda response: json.loads(response.content) if response.content else None,
    )


# --- the answer stream ---------------------------------------------------------------------


@dataclass
class AnswerState:
    """Where an answer stream is: what to send to (re)connect, and which events were seen.

    Every event's SSE id is ``<turn id>:<n>``; after a dropped connection the same ``POST``
    is sent again with the same ``Idempotency-Key`` and ``Last-Event-ID`` of the last event
    seen, so the gateway replays from the next one. An event at or before that one (a replay
    overlapping what was read) is never yielded twice.
    """

    session_id: str
    content: str
    options: Options
    idempotency_key: str = field(default_factory=lambda: uuid.uuid4().hex)
    last_event_id: str | None = None
    turn_id: str | None = None
    finished: bool = False
    resumes: int = 0
    #: the raw ``data:`` of the last event yielded (the JSON exactly as the gateway sent it)
    last_data: str = ""
    _last_seq: int = 0
    _failures: int = 0
    _drop: str = ""

    def request(self) -> Request:
        """The request that starts (or resumes) the stream."""
        headers = {"Idempotency-Key": self.idempotency_key, "Accept": "text/event-stream"}
        if self.last_event_id is not None:
            headers["Last-Event-ID"] = self.last_event_id
        timeout = httpx.Timeout(self.options.timeout, read=self.options.stream_read_timeout)
        return Request(
            "POST", f"/v1/sessions/{self.session_id}/messages",
            json={"content": self.content}, headers=headers, timeout=timeout,
        )  # fmt: skip

    def resume_after(self, event_id: str) -> None:
        """Start from the event after ``event_id`` (``<turn id>:<n>``) of this key's turn."""
        turn, _, seq = event_id.rpartition(":")
        self.last_event_id = event_id
        self.turn_id = turn or None
        self._last_seq = int(seq) if seq.isdigit() else 0

    def connected(self, response: httpx.Response) -> None:
        """Note the turn the gateway answers with."""
        turn = response.headers.get("x-lectern-turn-id")
        if turn and self.turn_id is not None and turn != self.turn_id:
            # the first turn failed on the server's side: the key asked anew
            self._last_seq = 0
        self.turn_id = turn or self.turn_id

    def accept(self, name: str, data: str, event_id: str | None) -> AnswerEvent | None:
        """The event of one SSE frame, or None when it was already yielded (or a ping)."""
        if not data and not name:
            return None
        if event_id:
            turn, _, seq = event_id.rpartition(":")
            if seq.isdigit():
                if (self.turn_id is None or turn == self.turn_id) and int(seq) <= self._last_seq:
                    return None
                self.turn_id = turn or self.turn_id
                self._last_seq = int(seq)
            self.last_event_id = event_id
        event = parse_answer_event(name, data)
        self.last_data = data
        self._failures = 0
        if isinstance(event, DoneEvent | ErrorEvent):
            self.finished = True
        return event

    def dropped(self, why: str) -> float:
        """The connection broke (or closed early): seconds to wait before resuming.
        Raises ``ConnectionFailed`` after ``max_resumes`` drops in a row without an event."""
        self._failures += 1
        self._drop = why
        if self._failures > self.options.max_resumes:
            raise ConnectionFailed(
                f"the answer stream dropped {self._failures} times in a row ({why}); "
                f"resume it with Idempotency-Key {self.idempotency_key!r} and Last-Event-ID "
                f"{self.last_event_id!r}"
            )
        self.resumes += 1
        return backoff(self.options, self._failures - 1) / 2


@dataclass
class DocumentWatch:
    """Following ``GET /v1/documents/{id}/events`` until an outcome or a deadline."""

    document_id: str
    deadline: float
    options: Options

    def request(self, now: float) -> Request:
        """The stream request, reading at most until the deadline (the gateway pings)."""
        left = max(0.1, self.deadline - now)
        read = min(left, self.options.stream_read_timeout)
        return Request(
            "GET", f"/v1/documents/{self.document_id}/events",
            headers={"Accept": "text/event-stream"},
            timeout=httpx.Timeout(self.options.timeout, read=read),
        )  # fmt: skip


def merge(body: Body, fields: Mapping[str, Any]) -> dict[str, Any]:
    """A request body from a model or mapping plus keyword fields (the fields win)."""
    return {**_body(body), **fields}


def search_body(
    query: str | models.SearchRequest,
    *,
    k: int | None,
    filters: models.RetrievalFilters | Mapping[str, Any] | None,
    **options: Any,
) -> dict[str, Any]:
    """The body of ``POST /v1/search``."""
    if isinstance(query, models.SearchRequest):
        return {**_body(query), **options}
    body: dict[str, Any] = {"query": query, **options}
    if k is not None:
        body["k"] = k
    if filters is not None:
        body["filters"] = _body(filters)
    return body


def resumable(exc: BaseException) -> bool:
    """Whether a failure to (re)connect an answer stream is worth another resume."""
    return isinstance(exc, ConnectionFailed)


class Collector:
    """Gathers an answer's events into one :class:`Answer`."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.answer = Answer(text="")

    def add(self, event: AnswerEvent) -> None:
        """Take one event."""
        if isinstance(event, TokenEvent):
            self.parts.append(event.text)
        elif isinstance(event, SourcesEvent):
            self.answer.sources = list(event.sources)
        elif isinstance(event, CitationEvent):
            self.answer.citations.append(event.citation)
        elif isinstance(event, CheckEvent):
            self.answer.checks.append(event)
        elif isinstance(event, ConfidenceEvent):
            self.answer.confidence = event
        elif isinstance(event, DoneEvent):
            self.answer.done = event
            self.answer.citations = list(event.citations)
        elif isinstance(event, ErrorEvent):
            self.answer.error = event
        elif isinstance(event, RestartEvent):  # answered again from the start
            self.parts = []
            self.answer = Answer(text="")

    def result(self) -> Answer:
        """The answer so far."""
        self.answer.text = "".join(self.parts)
        return self.answer


def collect(events: Iterable[AnswerEvent]) -> Answer:
    """Read every event of a (sync) stream into one answer."""
    collector = Collector()
    for event in events:
        collector.add(event)
    return collector.result()


@dataclass
class Frame:
    """One Server-Sent Event: its ``event`` name, ``data`` and ``id``."""

    event: str
    data: str
    id: str | None


class FrameParser:
    """Server-Sent Events from a stream's lines, one line at a time, so a reader can check
    its deadline on every line, the gateway's ``: ping`` comments included."""

    def __init__(self) -> None:
        self._event = ""
        self._data: list[str] = []
        self._id: str | None = None

    def feed(self, line: str) -> Frame | None:
        """Take one line (without its end); the frame a blank line completes, if any."""
        if not line:
            if not self._data and not self._event:
                return None
            frame = Frame(self._event or "message", "\n".join(self._data), self._id)
            self._event, self._data = "", []
            return frame
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
        elif name == "id":
            self._id = value
        return None
