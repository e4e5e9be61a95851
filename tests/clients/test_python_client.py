"""lectern-client against a real gateway (offline answerer, retriever and re-ranker stand-ins
on the real NATS, real Postgres) and a real ingest worker: uploads followed to indexed, search,
pagination, answers streamed and resumed after a cut connection, typed problems, and retries
that honour Retry-After. Only the faults are simulated, by transports wrapping the real one."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from lectern_testing.chat import (
    STUDY_MATERIAL,
    Gateway,
    memory_service,
    offline_gateway,
    seed_document,
)

from lectern_client import (
    AsyncLecternClient,
    DocumentProgress,
    DocumentStatus,
    DoneEvent,
    LecternClient,
    NotFound,
    RateLimited,
    SourcesEvent,
    TokenEvent,
    Unauthorized,
    UnsupportedMediaType,
    ValidationError,
    models,
)
from lectern_common.embeddings import LocalEmbedder
from lectern_ingest.app import create_app as create_ingest
from lectern_ingest.config import Settings as IngestSettings

pytestmark = pytest.mark.integration

NOTES = """# Plant cells

## Chloroplasts

Chloroplasts capture light energy with chlorophyll. The light reactions split water and
release oxygen, storing energy in ATP and NADPH.

## Cell walls

The cell wall is made of cellulose and keeps the plant cell rigid under water pressure.
"""
QUESTION = "What does mitosis produce?"


@pytest.fixture(scope="module")
async def gateway(nats_url: str, database_url: str, db_pool: Any) -> AsyncIterator[Gateway]:
    """The real gateway on a port, one real ingest worker and the real memory service."""
    settings = IngestSettings(
        nats_url=nats_url, database_url=database_url, http_port=0, log_json=False,
        progress_interval_s=0.0, progress_after_s=0.0,
    )  # fmt: skip
    ingest = create_ingest(settings, embedder=LocalEmbedder(settings))
    async with (
        ingest.router.lifespan_context(ingest),
        memory_service(nats_url, database_url),
        offline_gateway(nats_url, database_url, db_pool) as running,
    ):
        yield running


def bearer(gateway: Gateway, tenant_id: str, user: str, **claims: Any) -> str:
    return gateway.token(tenant_id, user, **claims)["Authorization"].split()[1]


class CutOnce(httpx.AsyncBaseTransport):
    """The real transport, but the first answer stream breaks after ``after`` events (in the
    middle of the next one), as a dropped connection would."""

    def __init__(self, after: int) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.after = after
        self.cuts = 0
        self.sent: list[httpx.Request] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.sent.append(request)
        response = await self.inner.handle_async_request(request)
        if self.cuts or not request.url.path.endswith("/messages") or request.method != "POST":
            return response
        self.cuts += 1
        return httpx.Response(
            response.status_code, headers=response.headers, extensions=response.extensions,
            stream=_CutStream(response, self.after),
        )  # fmt: skip

    async def aclose(self) -> None:
        await self.inner.aclose()


class _CutStream(httpx.AsyncByteStream):
    def __init__(self, response: httpx.Response, after: int) -> None:
        self.response = response
        self.after = after

    async def __aiter__(self) -> AsyncIterator[bytes]:
        seen = b""
        async for chunk in self.response.aiter_raw():
            seen += chunk
            frames = seen.replace(b"\r\n", b"\n").split(b"\n\n")
            if len(frames) > self.after + 1:
                yield b"\n\n".join(frames[: self.after]) + b"\n\n" + frames[self.after][:12]
                raise httpx.ReadError("connection reset by peer (simulated)")
        yield seen

    async def aclose(self) -> None:
        await self.response.aclose()


class FailFirst(httpx.AsyncBaseTransport):
    """The real transport, but the first ``times`` requests to ``path`` get ``status`` with
    ``Retry-After`` (problem+json), as a busy or rate-limiting gateway answers."""

    def __init__(self, path: str, *, status: int, retry_after: str, times: int = 1) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.path, self.status, self.retry_after, self.times = path, status, retry_after, times
        self.refused: list[float] = []
        self.passed: list[float] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith(self.path) and len(self.refused) < self.times:
            self.refused.append(time.monotonic())
            body = {"type": "about:blank", "title": "Busy", "status": self.status,
                    "detail": "try again shortly", "instance": request.url.path}  # fmt: skip
            return httpx.Response(
                self.status, json=body, headers={"Retry-After": self.retry_after,
                                                 "Content-Type": "application/problem+json"},
            )  # fmt: skip
        self.passed.append(time.monotonic())
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


async def test_upload_is_followed_until_indexed_then_found(
    gateway: Gateway, tenant_id: str, tmp_path: Path
) -> None:
    notes = tmp_path / "plant-cells.md"
    notes.write_text(NOTES)
    sent: list[tuple[int, int | None]] = []
    teacher = bearer(gateway, tenant_id, "ms-lee", role="teacher")
    async with AsyncLecternClient(gateway.url, teacher) as lectern:
        accepted = await lectern.upload(
            notes, subject="biology", grade_level=9, topic_tags=["cells", "plants"],
            on_progress=lambda done, total: sent.append((done, total)),
        )  # fmt: skip
        assert isinstance(accepted, models.UploadAccepted) and not accepted.duplicate
        assert sent and sent[-1] == (len(NOTES.encode()), len(NOTES.encode()))

        events = [e async for e in lectern.document_events(accepted.id, timeout=60)]
        assert isinstance(events[0], DocumentStatus) and events[0].type == "status"
        assert isinstance(events[-1], DocumentStatus) and events[-1].type == "indexed"
        assert all(isinstance(e, DocumentProgress | DocumentStatus) for e in events)
        indexed = await lectern.wait_until_indexed(accepted.id, timeout=30)
        assert indexed.status == "indexed" and indexed.chunk_count
        assert indexed.subject == "biology" and indexed.topic_tags == ["cells", "plants"]

        again = await lectern.upload(NOTES.encode(), filename="copy.md")
        assert again.duplicate and again.id == accepted.id

        found = await lectern.search("chlorophyll light energy", k=5)
        assert isinstance(found, models.SearchResponse)
        assert found.candidates and found.candidates[0].document_id == accepted.id

        deleted = await lectern.delete_document(accepted.id)
        assert deleted.status == "deleted"


async def test_documents_are_listed_page_after_page(
    gateway: Gateway, db_pool: Any, tenant_id: str
) -> None:
    seeded = [
        (await seed_document(db_pool, tenant_id=tenant_id, title=f"Unit {n}")).document_id
        for n in range(5)
    ]
    teacher = bearer(gateway, tenant_id, "ms-lee", role="teacher")
    transport = CountingTransport()
    async with AsyncLecternClient(gateway.url, teacher, transport=transport) as lectern:
        listed = [d async for d in lectern.list_documents(page_size=2)]
        first = await lectern.documents_page(limit=2)
    assert sorted(d.id for d in listed) == sorted(seeded)
    assert len({d.id for d in listed}) == 5
    # three pages (2, 2 and the last 1, without a next cursor), then documents_page's one
    assert transport.paths.count("/v1/documents") == 3 + 1
    assert first.next_cursor and [d.id for d in first.items] == [d.id for d in listed[:2]]


class CountingTransport(httpx.AsyncBaseTransport):
    """The real transport, noting each request's path."""

    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.paths: list[str] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.paths.append(request.url.path)
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


async def test_an_answer_streams_and_resumes_after_a_cut_without_repeating(
    gateway: Gateway, db_pool: Any, tenant_id: str
) -> None:
    await seed_document(db_pool, tenant_id=tenant_id, title="Cells", chunks=STUDY_MATERIAL)
    student = bearer(gateway, tenant_id, "sam")
    async with AsyncLecternClient(gateway.url, student) as lectern:
        session = await lectern.create_session(mode="chat")
        whole = [e async for e in lectern.ask(session.id, QUESTION)]
    kinds = [e.type for e in whole]
    assert kinds[0] == "sources" and kinds[-1] == "done" and "token" in kinds
    assert isinstance(whole[0], SourcesEvent) and whole[0].sources[0].title == "Cells"
    done = whole[-1]
    assert isinstance(done, DoneEvent) and done.citations and done.band != "gap"
    text = "".join(e.text for e in whole if isinstance(e, TokenEvent))
    assert "[T1]" in text

    cutter = CutOnce(after=3)
    async with AsyncLecternClient(gateway.url, student, transport=cutter) as lectern:
        session = await lectern.create_session(mode="chat")
        stream = lectern.ask(session.id, QUESTION)
        resumed = [e async for e in stream]
    assert cutter.cuts == 1 and stream.resumes == 1
    posts = [r for r in cutter.sent if r.url.path.endswith("/messages")]
    assert len(posts) == 2
    assert posts[0].headers["idempotency-key"] == posts[1].headers["idempotency-key"]
    assert "last-event-id" not in posts[0].headers
    assert posts[1].headers["last-event-id"] == f"{stream.turn_id}:3"
    assert [e.type for e in resumed] == kinds
    assert "".join(e.text for e in resumed if isinstance(e, TokenEvent)) == text
    assert stream.last_event_id == f"{stream.turn_id}:{len(kinds)}"
    messages = [m for m in (await _messages(gateway, student, session.id)) if m.role == "user"]
    assert len(messages) == 1  # resuming replayed the turn; it did not ask twice


async def _messages(gateway: Gateway, token: str, session_id: Any) -> list[models.Message]:
    async with AsyncLecternClient(gateway.url, token) as lectern:
        return await lectern.session_messages(session_id)


async def test_problems_arrive_as_typed_errors(gateway: Gateway, tenant_id: str) -> None:
    student = bearer(gateway, tenant_id, "sam")
    missing = uuid.uuid4()
    async with AsyncLecternClient(gateway.url, student) as lectern:
        with pytest.raises(NotFound) as caught:
            await lectern.get_document(missing)
        with pytest.raises(ValidationError) as invalid:
            await lectern.create_session(mode="exam")
    error = caught.value
    assert error.status == 404 and error.title and str(missing) in (error.detail or "")
    assert error.type == "about:blank" and error.instance == f"/v1/documents/{missing}"
    assert invalid.value.status == 422 and invalid.value.errors
    async with AsyncLecternClient(gateway.url, "not-a-token") as lectern:
        with pytest.raises(Unauthorized):
            await lectern.list_sessions()


async def test_429_and_503_are_retried_after_retry_after(
    gateway: Gateway, db_pool: Any, tenant_id: str
) -> None:
    await seed_document(db_pool, tenant_id=tenant_id, title="Cells", chunks=STUDY_MATERIAL)
    student = bearer(gateway, tenant_id, "sam")
    busy = FailFirst("/v1/sessions", status=503, retry_after="1")
    async with AsyncLecternClient(gateway.url, student, transport=busy) as lectern:
        session = await lectern.create_session(mode="chat")
    assert isinstance(session, models.Session) and len(busy.refused) == 1
    assert busy.passed[0] - busy.refused[0] >= 0.95

    limited = FailFirst("/messages", status=429, retry_after="1", times=2)
    async with AsyncLecternClient(
        gateway.url, student, transport=limited, max_retries=2
    ) as lectern:
        answer = await lectern.ask(session.id, QUESTION).collect()
    assert answer.done is not None and "[T1]" in answer.text
    assert len(limited.refused) == 2 and limited.passed[-1] - limited.refused[0] >= 1.9

    daily = FailFirst("/v1/sessions", status=429, retry_after="3600", times=5)
    async with AsyncLecternClient(gateway.url, student, transport=daily) as lectern:
        started = time.monotonic()
        with pytest.raises(RateLimited) as refused:
            await lectern.create_session()
    assert time.monotonic() - started < 1.0 and len(daily.refused) == 1
    assert refused.value.retry_after == 3600 and refused.value.detail == "try again shortly"


class SyncCutOnce(httpx.BaseTransport):
    """``CutOnce`` for the blocking client."""

    def __init__(self, after: int) -> None:
        self.inner = httpx.HTTPTransport()
        self.after = after
        self.cuts = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self.inner.handle_request(request)
        if self.cuts or not request.url.path.endswith("/messages") or request.method != "POST":
            return response
        self.cuts += 1
        return httpx.Response(
            response.status_code, headers=response.headers, extensions=response.extensions,
            stream=_SyncCutStream(response, self.after),
        )  # fmt: skip

    def close(self) -> None:
        self.inner.close()


class _SyncCutStream(httpx.SyncByteStream):
    def __init__(self, response: httpx.Response, after: int) -> None:
        self.response = response
        self.after = after

    def __iter__(self) -> Iterator[bytes]:
        seen = b""
        for chunk in self.response.iter_raw():
            seen += chunk
            frames = seen.replace(b"\r\n", b"\n").split(b"\n\n")
            if len(frames) > self.after + 1:
                yield b"\n\n".join(frames[: self.after]) + b"\n\n" + frames[self.after][:12]
                raise httpx.ReadError("connection reset by peer (simulated)")
        yield seen

    def close(self) -> None:
        self.response.close()


async def test_the_blocking_client_does_the_same(
    gateway: Gateway, db_pool: Any, tenant_id: str
) -> None:
    seeded = await seed_document(db_pool, tenant_id=tenant_id, title="Cells", chunks=STUDY_MATERIAL)
    student = bearer(gateway, tenant_id, "sam")
    admin = bearer(gateway, tenant_id, "root", role="admin")

    def tour() -> dict[str, Any]:
        out: dict[str, Any] = {}
        with LecternClient(gateway.url, student) as lectern:
            session = lectern.create_session(mode="tutor", subject="biology")
            out["whole"] = lectern.ask(session.id, QUESTION).collect()
            out["session"] = lectern.get_session(session.id)
            out["sessions"] = lectern.list_sessions()
            out["syllabus"] = lectern.syllabus()
            quiz = lectern.create_quiz(num_questions=2, kinds=["short_answer"])
            out["quiz"] = quiz
            out["attempt"] = lectern.attempt_quiz(
                quiz.id, {q.id: "mitosis" for q in quiz.questions}
            )
            out["memories"] = lectern.my_memories()
            out["documents"] = list(lectern.list_documents(page_size=1))
            with pytest.raises(NotFound):
                lectern.get_session(uuid.uuid4())
        with LecternClient(gateway.url, student, transport=SyncCutOnce(after=2)) as lectern:
            session = lectern.create_session(mode="chat")
            stream = lectern.ask(session.id, QUESTION)
            out["resumed"] = stream.collect()
            out["resumes"] = stream.resumes
        with LecternClient(gateway.url, student) as lectern:
            session = lectern.create_session(mode="chat")
            out["plain"] = lectern.ask(session.id, QUESTION).collect()
        with LecternClient(gateway.url, admin) as lectern:
            out["webhooks"] = lectern.list_webhooks()
            with pytest.raises(UnsupportedMediaType) as junk:
                lectern.upload(bytes(range(256)) * 4, filename="junk.pdf")
            out["junk"] = junk.value
            accepted = lectern.upload(NOTES.encode(), filename="notes.md", subject="botany")
            out["indexed"] = lectern.wait_until_indexed(accepted.id, timeout=60)
        return out

    got = await asyncio.to_thread(tour)
    assert got["whole"].done is not None and got["whole"].checks  # tutor: a check question
    assert got["session"].mode == "tutor" and got["session"].id in {s.id for s in got["sessions"]}
    titles = [d.title for m in got["syllabus"].modules for d in m.documents]
    assert titles == ["Cells"]
    assert len(got["quiz"].questions) == 2 and got["attempt"].total == 2
    assert isinstance(got["memories"], list) and got["webhooks"] == []
    assert [d.id for d in got["documents"]] == [seeded.document_id]
    assert got["resumes"] == 1 and got["resumed"].text == got["plain"].text
    assert got["resumed"].done is not None and json.loads(got["resumed"].model_dump_json())
    assert got["junk"].status == 415 and got["junk"].title
    assert got["indexed"].status == "indexed" and got["indexed"].subject == "botany"


async def test_the_cli_goes_through_the_client(
    gateway: Gateway, db_pool: Any, tenant_id: str, tmp_path: Path
) -> None:
    import io

    from lectern_cli.ask_cmd import ask as cli_ask
    from lectern_cli.ingest_cmd import ingest as cli_ingest
    from lectern_cli.quiz_cmd import show_syllabus

    await seed_document(db_pool, tenant_id=tenant_id, title="Cells", chunks=STUDY_MATERIAL)
    (tmp_path / "plants.md").write_text(NOTES)
    (tmp_path / "junk.pdf").write_bytes(bytes(range(256)) * 4)
    teacher = bearer(gateway, tenant_id, "ms-lee", role="teacher")
    outcomes = await cli_ingest(
        url=gateway.url,
        token=teacher,
        files=[tmp_path / "junk.pdf", tmp_path / "plants.md"],
        fields={},
        timeout=60,
    )
    by_name = {o.path.name: o for o in outcomes}
    assert by_name["plants.md"].status == "indexed"
    assert by_name["junk.pdf"].status == "rejected (415)"

    out = io.StringIO()
    student = bearer(gateway, tenant_id, "sam")
    code = await cli_ask(
        url=gateway.url, token=student, question=QUESTION, session_id=None, mode="chat",
        subject=None, out=out,
    )  # fmt: skip
    printed = out.getvalue()
    assert code == 0 and "[T1]" in printed and "Sources:\n  [T1] Cells (p. 1" in printed
    assert "Confidence: high" in printed and "answered by offline" in printed
    out = io.StringIO()
    assert await show_syllabus(url=gateway.url, token=student, out=out, subject=None,
                               document=None) == 0  # fmt: skip
    assert "  Cells  [" in out.getvalue() and "1.1 Mitosis  p. 1" in out.getvalue()
