"""``LecternClient``: the gateway's API over ``httpx.Client`` (blocking)."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Generator, Iterator, Mapping, Sequence
from datetime import date
from pathlib import Path
from types import TracebackType
from typing import IO, Any, TypeVar

import httpx
from httpx_sse import EventSource

import lectern_client._core as _core
import lectern_client.models as models
from lectern_client._core import Body, Call, Options, Progress, Request
from lectern_client.errors import DocumentNotIndexed
from lectern_client.events import (
    Answer,
    AnswerEvent,
    DocumentEvent,
    DocumentStatus,
    parse_document_event,
)

T = TypeVar("T")
FileInput = str | os.PathLike[str] | bytes | IO[bytes]


class LecternClient:
    """The gateway's HTTP API, blocking.

    ``base_url`` and ``token`` default to ``LECTERN_GATEWAY_URL`` and ``LECTERN_TOKEN``
    (``api_key`` to ``LECTERN_API_KEY``). 429 and 503 answers are retried after the
    ``Retry-After`` the gateway sends (``max_retries`` times, waiting at most
    ``max_retry_wait`` seconds); any other error answer raises a
    :class:`~lectern_client.errors.LecternError` subclass. ``transport`` replaces httpx's
    (tests, proxies).
    """

    def __init__(
        self,
        base_url: str | None = None,
        token: str | None = None,
        *,
        api_key: str | None = None,
        timeout: float | None = None,
        max_retries: int | None = None,
        max_retry_wait: float | None = None,
        max_resumes: int | None = None,
        stream_read_timeout: float | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.options: Options = _core.resolve_options(
            base_url, token, api_key, timeout=timeout, max_retries=max_retries,
            max_retry_wait=max_retry_wait, max_resumes=max_resumes,
            stream_read_timeout=stream_read_timeout,
        )  # fmt: skip
        self._http = httpx.Client(
            base_url=self.options.base_url,
            headers=self.options.headers(),
            timeout=self.options.timeout,
            transport=transport,
        )

    def __enter__(self) -> LecternClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the connections."""
        self._http.close()

    # --- sending ---------------------------------------------------------------------

    def send(self, request: Request, *, stream: bool = False) -> httpx.Response:
        """Send ``request``, retrying 429/503 and connection failures; raise on an error."""
        attempt = 0
        while True:
            try:
                response = self._http.send(request.build(self._http), stream=stream)
            except httpx.TransportError as exc:
                delay = _core.transport_retry_delay(self.options, attempt, request.method, exc)
                if delay is None:
                    raise _core.connection_failed(exc) from exc
            else:
                if response.status_code < 400:
                    return response
                delay = _core.retry_delay(self.options, attempt, response)
                if stream:
                    response.read()
                    response.close()
                if delay is None:
                    raise _core.problem_error(response)
            time.sleep(delay)
            attempt += 1

    def call(self, call: Call[T]) -> T:
        """Send a call and read its answer."""
        return call.parse(self.send(call.request))

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        """Any endpoint (``params``, ``json``, ``data``, ``files``): its JSON answer."""
        return self.call(_core.raw_json(method, path, **kwargs))

    # --- documents -------------------------------------------------------------------

    def upload(
        self,
        file: FileInput,
        *,
        filename: str | None = None,
        title: str | None = None,
        subject: str | None = None,
        grade_level: int | None = None,
        module_tag: str | None = None,
        class_id: str | None = None,
        collection: str | None = None,
        content_type: str | None = None,
        language: str | None = None,
        topic_tags: Sequence[str] | None = None,
        curriculum_standards: Sequence[str] | None = None,
        source_priority: float | None = None,
        freshness_date: date | None = None,
        password: str | None = None,
        replaces: str | uuid.UUID | None = None,
        fields: Mapping[str, Any] | None = None,
        on_progress: Progress | None = None,
    ) -> models.UploadAccepted:
        """Upload a file (a path, bytes or a binary file) with its metadata.

        ``on_progress(sent, total)`` is called as the bytes go out. The answer's
        ``duplicate`` is true when the same bytes were already uploaded (that document is
        answered). ``fields``: further form fields, as the API names them.
        """
        metadata = {
            "title": title, "subject": subject, "grade_level": grade_level,
            "module_tag": module_tag, "class_id": class_id, "collection": collection,
            "content_type": content_type, "language": language, "topic_tags": topic_tags,
            "curriculum_standards": curriculum_standards, "source_priority": source_priority,
            "freshness_date": freshness_date, "password": password, "replaces": replaces,
            **(fields or {}),
        }  # fmt: skip
        if isinstance(file, str | os.PathLike):
            path = Path(file)
            with path.open("rb") as handle:
                upload = _core.upload(
                    handle, filename=filename or path.name, fields=metadata,
                    on_progress=on_progress,
                )  # fmt: skip
                return self.call(upload)
        name = filename or Path(str(getattr(file, "name", "upload"))).name
        upload = _core.upload(file, filename=name, fields=metadata, on_progress=on_progress)
        return self.call(upload)

    def get_document(self, document_id: str | uuid.UUID) -> models.DocumentView:
        """A document's status, counts, metadata and error."""
        return self.call(_core.get_document(document_id))

    def delete_document(self, document_id: str | uuid.UUID) -> models.DocumentView:
        """Delete a document (its chunks leave retrieval at once)."""
        return self.call(_core.delete_document(document_id))

    def update_document(self, document_id: str | uuid.UUID, changes: Body) -> models.DocumentView:
        """Change a document's metadata (``DocumentPatch`` or a mapping; None clears)."""
        return self.call(_core.patch_document(document_id, changes))

    def archive_document(self, document_id: str | uuid.UUID) -> models.DocumentView:
        """Take a document out of retrieval (its chunks are kept)."""
        return self.call(_core.document_action(document_id, "archive"))

    def restore_document(self, document_id: str | uuid.UUID) -> models.DocumentView:
        """Put an archived (or superseded) document back."""
        return self.call(_core.document_action(document_id, "restore"))

    def reprocess_document(self, document_id: str | uuid.UUID) -> models.UploadAccepted:
        """Index a document's stored file again (a new version)."""
        return self.call(_core.reprocess_document(document_id))

    def document_audit(self, document_id: str | uuid.UUID) -> list[models.AuditEntry]:
        """Who changed a document, when and how."""
        return self.call(_core.document_audit(document_id))

    def documents_page(
        self, *, limit: int = 50, cursor: str | None = None, **filters: Any
    ) -> models.DocumentPage:
        """One page of documents (``next_cursor`` leads to the next one)."""
        params = _core.document_filters(**filters)
        return self.call(_core.documents_page(limit=limit, cursor=cursor, filters=params))

    def list_documents(
        self,
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
        page_size: int = 50,
    ) -> Iterator[models.DocumentView]:
        """Every matching document, newest first, fetching page after page (``cursor``) as
        the iteration goes."""
        filters = _core.document_filters(
            status=status, subject=subject, collection=collection, module_tag=module_tag,
            class_id=class_id, content_type=content_type, language=language,
            grade_level=grade_level, filename=filename, title=title, mine=mine,
        )  # fmt: skip
        cursor: str | None = None
        while True:
            page = self.call(_core.documents_page(limit=page_size, cursor=cursor, filters=filters))
            yield from page.items
            if not page.next_cursor:
                return
            cursor = page.next_cursor

    def document_events(
        self, document_id: str | uuid.UUID, *, timeout: float = 1800.0
    ) -> Iterator[DocumentEvent]:
        """A document's ``status``, ``progress`` and outcome events (reconnecting when the
        stream closes early) until the outcome or ``timeout`` (``TimeoutError``)."""
        watch = _core.DocumentWatch(str(document_id), time.monotonic() + timeout, self.options)
        late = f"document {document_id}: no outcome within {timeout:.0f} s"
        while True:
            if time.monotonic() >= watch.deadline:
                raise TimeoutError(late)
            try:
                response = self.send(watch.request(time.monotonic()), stream=True)
                try:
                    parser = _core.FrameParser()
                    for line in response.iter_lines():
                        if time.monotonic() >= watch.deadline:
                            raise TimeoutError(late)
                        frame = parser.feed(line)
                        if frame is None:
                            continue
                        event = parse_document_event(frame.event, frame.data)
                        if event is None:
                            continue
                        yield event
                        if isinstance(event, DocumentStatus) and event.final:
                            return
                finally:
                    response.close()
            except httpx.TransportError:
                pass  # a read timeout or a dropped connection: reconnect while time is left
            time.sleep(min(1.0, max(0.0, watch.deadline - time.monotonic())))

    def wait_until_indexed(
        self, document_id: str | uuid.UUID, timeout: float = 600.0
    ) -> models.DocumentView:
        """Follow a document until it is searchable (``indexed``, or ``duplicate`` of an
        indexed one); raises ``DocumentNotIndexed`` when it failed or was deleted, and
        ``TimeoutError`` after ``timeout`` seconds."""
        for event in self.document_events(document_id, timeout=timeout):
            if isinstance(event, DocumentStatus) and event.final:
                if event.document.status in ("indexed", "duplicate"):
                    return event.document
                raise DocumentNotIndexed(event.document)
        raise TimeoutError(f"document {document_id}: no outcome within {timeout:.0f} s")

    # --- search, sessions, answers ---------------------------------------------------

    def search(
        self,
        query: str | models.SearchRequest,
        *,
        k: int | None = None,
        filters: models.RetrievalFilters | Mapping[str, Any] | None = None,
        **options: Any,
    ) -> models.SearchResponse:
        """Hybrid search (a query, or a whole ``SearchRequest``)."""
        return self.call(_core.search(_core.search_body(query, k=k, filters=filters, **options)))

    def create_session(self, body: Body = None, **fields: Any) -> models.Session:
        """Start a session (``SessionCreate`` or its fields: mode, subject, persona ...)."""
        return self.call(_core.create_session(_core.merge(body, fields)))

    def get_session(self, session_id: str | uuid.UUID) -> models.Session:
        """A session."""
        return self.call(_core.get_session(session_id))

    def list_sessions(
        self,
        *,
        status: str | None = None,
        limit: int | None = None,
        user_id: str | None = None,
        all_users: bool | None = None,
    ) -> list[models.Session]:
        """The caller's sessions (staff: ``user_id`` or ``all_users``)."""
        return self.call(
            _core.list_sessions(status=status, limit=limit, user_id=user_id, all_users=all_users)
        )

    def session_messages(self, session_id: str | uuid.UUID) -> list[models.Message]:
        """A session's messages with their citations and confidence."""
        return self.call(_core.session_messages(session_id))

    def end_session(self, session_id: str | uuid.UUID) -> models.Ended:
        """End a session (memory distils it)."""
        return self.call(_core.end_session(session_id))

    def ask(
        self,
        session_id: str | uuid.UUID,
        question: str,
        *,
        idempotency_key: str | None = None,
        last_event_id: str | None = None,
    ) -> AnswerStream:
        """Ask in a session: an iterator of the answer's typed events that resumes by
        itself after a dropped connection (same ``Idempotency-Key``, ``Last-Event-ID`` of
        the last event seen), never yielding an event twice. Pass a ``last_event_id`` to
        resume a stream another process started with ``idempotency_key``."""
        state = _core.AnswerState(str(session_id), question, self.options)
        if idempotency_key is not None:
            state.idempotency_key = idempotency_key
        if last_event_id is not None:
            state.resume_after(last_event_id)
        return AnswerStream(self, state)

    # --- study -----------------------------------------------------------------------

    def create_quiz(self, body: Body = None, **fields: Any) -> models.QuizView:
        """Draw a quiz from the material (``QuizRequest`` or its fields)."""
        return self.call(_core.create_quiz(_core.merge(body, fields)))

    def get_quiz(self, quiz_id: str | uuid.UUID) -> models.QuizView:
        """A quiz (without its answers)."""
        return self.call(_core.get_quiz(quiz_id))

    def attempt_quiz(
        self, quiz_id: str | uuid.UUID, answers: Mapping[str, str]
    ) -> models.AttemptResult:
        """Answer a quiz (question id -> answer): each answer checked, with its passage."""
        return self.call(_core.attempt_quiz(quiz_id, answers))

    def syllabus(
        self,
        *,
        subject: str | None = None,
        module: str | None = None,
        document_id: str | uuid.UUID | None = None,
    ) -> models.Syllabus:
        """The material as modules, documents and sections."""
        return self.call(_core.syllabus(subject=subject, module=module, document_id=document_id))

    def my_memories(self) -> list[models.Memory]:
        """What the tutor remembers about the caller (students)."""
        return self.call(_core.my_memories())

    # --- administration --------------------------------------------------------------

    def list_webhooks(self) -> list[models.Webhook]:
        """The tenant's webhooks (admins)."""
        return self.call(_core.list_webhooks())

    def create_api_key(self, body: Body = None, **fields: Any) -> models.CreatedApiKey:
        """Create an API key (admins); the key is in the answer, once."""
        return self.call(_core.create_api_key(_core.merge(body, fields)))

    def list_api_keys(self) -> list[models.ApiKey]:
        """The tenant's API keys (never the keys)."""
        return self.call(_core.list_api_keys())

    def revoke_api_key(self, key_id: str | uuid.UUID) -> None:
        """Revoke an API key (it stops working at once)."""
        self.call(_core.revoke_api_key(key_id))

    def list_personas(self) -> list[models.Persona]:
        """The personas the caller may use."""
        return self.call(_core.list_personas())

    def get_persona(self, slug: str) -> models.Persona:
        """One persona, with the indexed material its scope matches."""
        return self.call(_core.get_persona(slug))

    def save_persona(self, body: Body, *, slug: str | None = None) -> models.Persona:
        """Define a persona (``slug``: its next version)."""
        return self.call(_core.save_persona(body, slug=slug))

    def quality(
        self,
        *,
        start: date,
        end: date,
        group_by: str = "persona",
        persona: str | None = None,
        subject: str | None = None,
    ) -> models.Quality:
        """Answer quality per day and per persona or subject (staff)."""
        return self.call(
            _core.quality(start=start, end=end, group_by=group_by, persona=persona, subject=subject)
        )


class AnswerStream:
    """The events of one answer, resuming by itself after a dropped connection.

    Iterate it once. ``turn_id`` and ``last_event_id`` say where it is, ``resumes`` how
    often it reconnected; ``collect()`` reads the rest into an :class:`Answer`.
    """

    def __init__(self, client: LecternClient, state: _core.AnswerState) -> None:
        self._client = client
        self.state = state
        self._events = self._run()

    @property
    def turn_id(self) -> str | None:
        """The turn's id (the question's message id), once the gateway answered."""
        return self.state.turn_id

    @property
    def last_event_id(self) -> str | None:
        """The id of the last event yielded."""
        return self.state.last_event_id

    @property
    def last_data(self) -> str:
        """The raw JSON ``data`` of the last event yielded, as the gateway sent it."""
        return self.state.last_data

    @property
    def idempotency_key(self) -> str:
        """The key every (re)connection of this answer sends."""
        return self.state.idempotency_key

    @property
    def resumes(self) -> int:
        """How many times the stream reconnected."""
        return self.state.resumes

    def __iter__(self) -> Iterator[AnswerEvent]:
        return self._events

    def __next__(self) -> AnswerEvent:
        return next(self._events)

    def __enter__(self) -> AnswerStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop reading (the gateway finishes and stores the answer anyway)."""
        self._events.close()

    def collect(self) -> Answer:
        """Read the rest of the stream into one answer."""
        return _core.collect(self)

    def _run(self) -> Generator[AnswerEvent, None, None]:
        state = self.state
        while not state.finished:
            try:
                response = self._client.send(state.request(), stream=True)
            except Exception as exc:
                if not _core.resumable(exc):
                    raise
                time.sleep(state.dropped(str(exc)))
                continue
            try:
                state.connected(response)
                for sse in EventSource(response).iter_sse():
                    event = state.accept(sse.event, sse.data, sse.id)
                    if event is not None:
                        yield event
                    if state.finished:
                        return
                why = "the stream closed before the answer ended"
            except httpx.TransportError as exc:
                why = f"{type(exc).__name__}: {exc}"
            finally:
                response.close()
            time.sleep(state.dropped(why))
