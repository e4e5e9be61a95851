"""The document API end to end: gateway + ingest worker over real NATS and Postgres."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import nats
import pymupdf as _pymupdf
import pytest
import uvicorn
from lectern_testing.chat import settled
from nats.js.errors import NotFoundError as NatsNotFoundError

from lectern_cli.ingest_cmd import collect_files, ingest, summarise
from lectern_common.broker import DOCUMENTS_BUCKET
from lectern_common.embeddings import Embedder, LocalEmbedder
from lectern_common.errors import UpstreamError
from lectern_common.events import DocumentDeleted, DocumentUploaded
from lectern_common.objects import password_object_name
from lectern_gateway.app import create_app as create_gateway
from lectern_gateway.auth import issue_token
from lectern_gateway.config import Settings as GatewaySettings
from lectern_ingest.app import create_app as create_ingest
from lectern_ingest.config import Settings as IngestSettings

#: PyMuPDF's partial annotations make mypy --strict reject plain calls
pymupdf: Any = _pymupdf

pytestmark = [pytest.mark.integration, pytest.mark.slow]

UPLOAD_LIMIT = 512 * 1024

NOTES = """# Photosynthesis

## Light reactions

Plants capture light energy with chlorophyll in the thylakoid membranes. The light reactions
split water, release oxygen and store energy in ATP and NADPH.

## Calvin cycle

The Calvin cycle fixes carbon dioxide into sugars using the ATP and NADPH made by the light
reactions. The enzyme RuBisCO catalyses the first step of carbon fixation.
"""


@pytest.fixture(scope="module")
def embedder() -> Embedder:
    """The packaged MiniLM, loaded once for the module."""
    return LocalEmbedder(IngestSettings())


@pytest.fixture(scope="module")
async def stack(
    nats_url: str, database_url: str, embedder: Embedder
) -> AsyncIterator[tuple[Any, GatewaySettings]]:
    """The gateway and one ingest worker, running."""
    gateway_settings = GatewaySettings(
        nats_url=nats_url, database_url=database_url, http_port=0, log_json=False,
        max_upload_bytes=UPLOAD_LIMIT,
    )  # fmt: skip
    gateway = create_gateway(gateway_settings)
    ingest = create_ingest(
        IngestSettings(
            nats_url=nats_url, database_url=database_url, http_port=0, log_json=False,
            progress_interval_s=0.0, progress_after_s=0.0,
        ),
        embedder=embedder,
    )  # fmt: skip
    async with ingest.router.lifespan_context(ingest), gateway.router.lifespan_context(gateway):
        yield gateway, gateway_settings


@pytest.fixture
async def client(stack: tuple[Any, GatewaySettings]) -> AsyncIterator[httpx.AsyncClient]:
    """An HTTP client talking to the in-process gateway."""
    transport = httpx.ASGITransport(app=stack[0])
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as http:
        yield http


def auth(settings: GatewaySettings, tenant: str, user: str, role: str) -> dict[str, str]:
    """Bearer header for a user."""
    token = issue_token(
        secret=settings.effective_jwt_secret,
        tenant_id=tenant,
        user_id=user,
        role=role,  # type: ignore[arg-type]
    )
    return {"Authorization": f"Bearer {token}"}


def pdf_bytes(pages: int, *, password: str | None = None) -> bytes:
    """A small PDF with a different chapter heading and paragraph on every page."""
    topics = ["Cells", "Mitosis", "Meiosis", "Genes"]
    doc = pymupdf.open()
    for number in range(1, pages + 1):
        topic = topics[(number - 1) % len(topics)]
        page = doc.new_page()
        page.insert_text((72, 72), f"Chapter {number}: {topic}", fontsize=20)
        body = " ".join(f"Fact {i} about {topic.lower()} on page {number}." for i in range(10))
        page.insert_textbox(pymupdf.Rect(72, 100, 520, 700), body, fontsize=11)
    if password is None:
        data: bytes = doc.tobytes()
    else:
        data = doc.tobytes(
            encryption=pymupdf.PDF_ENCRYPT_AES_256, user_pw=password, owner_pw=password + "-o"
        )
    doc.close()
    return data


async def stored(nats_url: str, name: str) -> bool:
    """Whether the documents bucket holds the object ``name``."""
    nc = await nats.connect(nats_url)
    try:
        store = await nc.jetstream().object_store(DOCUMENTS_BUCKET)
        await store.get_info(name)
    except NatsNotFoundError:
        return False
    finally:
        await nc.drain()
    return True


async def wait_final(
    client: httpx.AsyncClient, doc_id: str, headers: dict[str, str], *, attempts: int = 300
) -> Any:
    """Poll the document (every 0.1 s) until it leaves pending/processing."""
    for _ in range(attempts):
        body = (await client.get(f"/v1/documents/{doc_id}", headers=headers)).json()
        if body["status"] not in ("pending", "processing"):
            return body
        await asyncio.sleep(0.1)
    raise AssertionError(f"document {doc_id} did not finish: {body}")


async def upload(
    client: httpx.AsyncClient,
    headers: dict[str, str],
    data: bytes,
    filename: str,
    fields: dict[str, Any] | None = None,
    params: dict[str, str] | None = None,
) -> httpx.Response:
    """POST /v1/documents with one file."""
    return await client.post(
        "/v1/documents", files={"file": (filename, data)}, data=fields or {}, headers=headers,
        params=params,
    )  # fmt: skip


async def test_upload_streams_progress_and_indexes(
    client: httpx.AsyncClient,
    stack: tuple[Any, GatewaySettings],
    tenant_id: str,
    db_pool: Any,
) -> None:
    settings = stack[1]
    teacher = auth(settings, tenant_id, "t1", "teacher")
    response = await upload(
        client, teacher, pdf_bytes(3), "cells.pdf",
        {"subject": "biology", "grade_level": "9", "topic_tags": ["cells", "mitosis"],
         "curriculum_standards": "NGSS-LS1-4, NGSS-LS1-1", "module_tag": "m1"},
    )  # fmt: skip
    assert response.status_code == 202, response.text
    body = response.json()
    assert body["status"] == "pending"
    assert body["status_url"] == f"/v1/documents/{body['id']}"
    assert body["events_url"] == f"/v1/documents/{body['id']}/events"
    assert body["document"]["source_priority"] == pytest.approx(0.7)

    events = await client.get(body["events_url"], headers=teacher, timeout=60)
    kinds = [line.split(":", 1)[1].strip() for line in events.text.splitlines()
             if line.startswith("event:")]  # fmt: skip
    assert kinds[0] == "status"
    assert kinds[-1] == "indexed", events.text
    final = await wait_final(client, body["id"], teacher)
    assert final["page_count"] == 3
    assert final["chunk_count"] >= 1
    assert final["mime_type"] == "application/pdf"
    assert final["curriculum_standards"] == ["NGSS-LS1-4", "NGSS-LS1-1"]
    rows = await db_pool.fetch(
        "SELECT subject, grade_level, module_tag, topic_tags, source_priority, page_start, "
        "active, uploaded_by FROM chunks WHERE document_id = $1",
        uuid.UUID(body["id"]),
    )
    assert len(rows) == final["chunk_count"]
    assert {r["subject"] for r in rows} == {"biology"}
    assert {r["grade_level"] for r in rows} == {9}
    assert all(r["topic_tags"] == ["cells", "mitosis"] for r in rows)
    assert all(r["active"] and r["uploaded_by"] == "t1" for r in rows)
    assert {r["page_start"] for r in rows} <= {1, 2, 3}

    # finished documents answer their events stream at once
    again = await client.get(body["events_url"], headers=teacher, timeout=10)
    assert "event: indexed" in again.text


async def test_dedup_role_tenant_and_listing(
    client: httpx.AsyncClient, stack: tuple[Any, GatewaySettings], tenant_id: str
) -> None:
    settings = stack[1]
    teacher = auth(settings, tenant_id, "t1", "teacher")
    other_teacher = auth(settings, tenant_id, "t2", "admin")
    student = auth(settings, tenant_id, "s1", "student")
    stranger = auth(settings, f"{tenant_id}-other", "t9", "teacher")

    first = await upload(client, teacher, NOTES.encode(), "notes.md", {"subject": "bio"})
    assert first.status_code == 202
    doc_id = first.json()["id"]
    again = await upload(client, other_teacher, NOTES.encode(), "copy.md")
    assert again.status_code == 200
    assert again.json()["id"] == doc_id
    assert again.json()["duplicate"] is True
    assert again.json()["document"]["co_owners"] == ["t2"]

    denied = await upload(client, student, b"hello students", "x.txt")
    assert denied.status_code == 403
    assert denied.headers["content-type"].startswith("application/problem+json")

    hidden = await client.get(f"/v1/documents/{doc_id}", headers=stranger)
    assert hidden.status_code == 404
    assert (await client.get("/v1/documents", headers=stranger)).json()["items"] == []

    exam = await upload(
        client, teacher, b"Exam answers: 1) mitosis 2) meiosis", "exam.txt",
        {"collection": "assessment", "subject": "bio"},
    )  # fmt: skip
    assert exam.status_code == 202
    exam_id = exam.json()["id"]
    await wait_final(client, doc_id, teacher)
    await wait_final(client, exam_id, teacher)

    listed = (await client.get("/v1/documents", headers=teacher, params={"limit": 1})).json()
    assert len(listed["items"]) == 1 and listed["next_cursor"]
    rest = (
        await client.get(
            "/v1/documents", headers=teacher, params={"limit": 1, "cursor": listed["next_cursor"]}
        )
    ).json()
    assert {listed["items"][0]["id"], rest["items"][0]["id"]} == {doc_id, exam_id}
    assert rest["next_cursor"] is None
    filtered = (
        await client.get("/v1/documents", headers=teacher, params={"collection": "assessment"})
    ).json()
    assert [d["id"] for d in filtered["items"]] == [exam_id]

    seen_by_student = (await client.get("/v1/documents", headers=student)).json()
    assert [d["id"] for d in seen_by_student["items"]] == [doc_id]
    assert (await client.get(f"/v1/documents/{exam_id}", headers=student)).status_code == 404


async def test_type_and_size_are_checked(
    client: httpx.AsyncClient, stack: tuple[Any, GatewaySettings], tenant_id: str
) -> None:
    settings = stack[1]
    teacher = auth(settings, tenant_id, "t1", "teacher")
    binary = await upload(client, teacher, bytes(range(256)) * 8, "fake.pdf")
    assert binary.status_code == 415
    assert binary.json()["reason"] == "unsupported_type"
    empty = await upload(client, teacher, b"", "empty.pdf")
    assert empty.status_code == 400
    assert empty.json()["reason"] == "empty_file"

    boundary = "lectern-test-boundary"
    sent = 0
    total_chunks = 64
    piece = b"a" * 32 * 1024  # 64 x 32 KB = 2 MB, four times the limit

    async def body() -> AsyncIterator[bytes]:
        nonlocal sent
        yield (
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; '
            'filename="big.txt"\r\nContent-Type: text/plain\r\n\r\n'
        ).encode()
        for _ in range(total_chunks):
            sent += 1
            yield piece
        yield f"\r\n--{boundary}--\r\n".encode()

    too_big = await client.post(
        "/v1/documents", content=body(),
        headers={**teacher, "Content-Type": f"multipart/form-data; boundary={boundary}"},
    )  # fmt: skip
    assert too_big.status_code == 413
    assert too_big.headers["content-type"].startswith("application/problem+json")
    assert sent < total_chunks, "the gateway must stop reading once past the limit"


async def test_delete_removes_chunks_bytes_and_publishes(
    client: httpx.AsyncClient,
    stack: tuple[Any, GatewaySettings],
    tenant_id: str,
    db_pool: Any,
    nats_url: str,
) -> None:
    settings = stack[1]
    teacher = auth(settings, tenant_id, "t1", "teacher")
    student = auth(settings, tenant_id, "s1", "student")
    created = await upload(client, teacher, NOTES.encode(), "photo.md")
    doc_id = created.json()["id"]
    final = await wait_final(client, doc_id, teacher)
    assert final["status"] == "indexed" and final["chunk_count"] > 0

    nc = await nats.connect(nats_url)
    deleted: asyncio.Queue[DocumentDeleted] = asyncio.Queue()

    async def on_deleted(msg: Any) -> None:
        event = DocumentDeleted.model_validate(json.loads(msg.data))
        if str(event.document_id) == doc_id:
            await deleted.put(event)

    await nc.subscribe(DocumentDeleted.subject, cb=on_deleted)
    try:
        # the original file, inline, for whoever may read the document's chunks
        original = await client.get(f"/v1/documents/{doc_id}/file", headers=student)
        assert original.status_code == 200
        assert original.content == NOTES.encode()
        assert original.headers["content-type"].startswith("text/markdown")
        assert original.headers["content-disposition"].startswith("inline")
        assert (await client.delete(f"/v1/documents/{doc_id}", headers=student)).status_code == 403
        response = await client.delete(f"/v1/documents/{doc_id}", headers=teacher)
        assert response.status_code == 200
        assert response.json()["status"] == "deleted"
        # ingest deletes the chunks it owns when it applies documents.deleted
        await settled(db_pool, uuid.UUID(doc_id), active=None)
        event = await asyncio.wait_for(deleted.get(), 10)
        assert event.deleted_by == "t1"
        store = await nc.jetstream().object_store(DOCUMENTS_BUCKET)
        with pytest.raises(NatsNotFoundError):
            await store.get_info(f"{doc_id}/1")
        gone = await client.get(f"/v1/documents/{doc_id}/file", headers=teacher)
        assert gone.status_code == 404
        assert gone.headers["content-type"].startswith("application/problem+json")
    finally:
        await nc.drain()


async def test_new_version_replaces_chunks_atomically(
    client: httpx.AsyncClient,
    stack: tuple[Any, GatewaySettings],
    tenant_id: str,
    db_pool: Any,
    nats_url: str,
) -> None:
    settings = stack[1]
    teacher = auth(settings, tenant_id, "t1", "teacher")
    v1 = await upload(client, teacher, NOTES.encode(), "photo.md", {"subject": "biology"})
    v1_id = v1.json()["id"]
    assert (await wait_final(client, v1_id, teacher))["status"] == "indexed"
    changed = NOTES + "\n## Summary\n\nLight reactions feed the Calvin cycle with ATP.\n"
    v2 = await upload(client, teacher, changed.encode(), "photo.md", params={"replaces": v1_id})
    assert v2.status_code == 202, v2.text
    assert v2.json()["version"] == 2
    v2_id = v2.json()["id"]
    final = await wait_final(client, v2_id, teacher)
    assert final["status"] == "indexed"
    assert final["subject"] == "biology", "a new version keeps the metadata it does not change"
    assert final["previous_version_id"] == v1_id
    old = (await client.get(f"/v1/documents/{v1_id}", headers=teacher)).json()
    assert old["status"] == "superseded"
    active = await db_pool.fetch(
        "SELECT document_id, count(*) AS n FROM chunks WHERE tenant_id = $1 AND active "
        "GROUP BY document_id",
        tenant_id,
    )
    assert {str(r["document_id"]) for r in active} == {v2_id}
    left = await db_pool.fetchval(
        "SELECT count(*) FROM chunks WHERE document_id = $1", uuid.UUID(v1_id)
    )
    assert left == 0, "the superseded version's chunks are deleted"
    assert not await stored(nats_url, f"{v1_id}/1"), "and its bytes removed"
    assert await stored(nats_url, f"{v2_id}/2")
    again = await upload(client, teacher, b"other", "x.txt", params={"replaces": v1_id})
    assert again.status_code == 409


async def test_pdf_password_stays_out_of_the_event(
    client: httpx.AsyncClient, stack: tuple[Any, GatewaySettings], tenant_id: str, nats_url: str
) -> None:
    teacher = auth(stack[1], tenant_id, "t1", "teacher")
    nc = await nats.connect(nats_url)
    published: asyncio.Queue[bytes] = asyncio.Queue()

    async def on_uploaded(msg: Any) -> None:
        await published.put(msg.data)

    await nc.subscribe(DocumentUploaded.subject, cb=on_uploaded)
    try:
        response = await upload(
            client, teacher, pdf_bytes(2, password="pw-in-clear"), "locked.pdf",
            {"password": "pw-in-clear"},
        )  # fmt: skip
        assert response.status_code == 202, response.text
        doc_id = response.json()["id"]
        while True:
            data = await asyncio.wait_for(published.get(), 10)
            payload = json.loads(data)
            if payload["document_id"] == doc_id:
                break
        assert b"pw-in-clear" not in data
        assert payload["has_password"] is True and "pdf_password" not in payload
        final = await wait_final(client, doc_id, teacher)
        assert (final["status"], final["page_count"]) == ("indexed", 2), final
        # removed once the outcome is stored, a moment after the status says indexed
        deadline = asyncio.get_running_loop().time() + 15
        while await stored(nats_url, password_object_name(f"{doc_id}/1")):
            assert asyncio.get_running_loop().time() < deadline, (
                "the password is removed once ingestion finished"
            )
            await asyncio.sleep(0.2)
        assert await stored(nats_url, f"{doc_id}/1")
    finally:
        await nc.drain()


async def test_same_text_in_another_file_is_a_duplicate(
    client: httpx.AsyncClient, stack: tuple[Any, GatewaySettings], tenant_id: str, db_pool: Any
) -> None:
    settings = stack[1]
    teacher = auth(settings, tenant_id, "t1", "teacher")
    colleague = auth(settings, tenant_id, "t2", "teacher")
    first = await upload(client, teacher, NOTES.encode(), "photo.md")
    first_id = first.json()["id"]
    assert (await wait_final(client, first_id, teacher))["status"] == "indexed"
    reexport = NOTES.replace("\n\n", "\n\n\n").replace("sugars using", "sugars\nusing")
    copy = await upload(client, colleague, reexport.encode(), "photo-export.md")
    assert copy.status_code == 202, "other bytes: accepted, compared once its text is read"
    copy_id = copy.json()["id"]
    final = await wait_final(client, copy_id, colleague)
    assert (final["status"], final["duplicate_of"], final["chunk_count"]) == (
        "duplicate", first_id, 0)  # fmt: skip
    events = await client.get(copy.json()["events_url"], headers=colleague, timeout=10)
    assert "event: duplicate" in events.text
    original = (await client.get(f"/v1/documents/{first_id}", headers=teacher)).json()
    assert original["co_owners"] == ["t2"]
    count = await db_pool.fetchval(
        "SELECT count(*) FROM chunks WHERE document_id = $1", uuid.UUID(copy_id)
    )
    assert count == 0
    listed = await client.get("/v1/documents", headers=teacher, params={"status": "duplicate"})
    assert [d["id"] for d in listed.json()["items"]] == [copy_id]


async def test_repeated_delete_finishes_a_failed_clean_up(
    client: httpx.AsyncClient,
    stack: tuple[Any, GatewaySettings],
    tenant_id: str,
    db_pool: Any,
    nats_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from lectern_gateway.documents import routes

    settings = stack[1]
    teacher = auth(settings, tenant_id, "t1", "teacher")
    admin = auth(settings, tenant_id, "a1", "admin")
    created = await upload(client, teacher, NOTES.encode(), "cleanup.md")
    doc_id = created.json()["id"]
    assert (await wait_final(client, doc_id, teacher))["status"] == "indexed"

    nc = await nats.connect(nats_url)
    deleted: asyncio.Queue[DocumentDeleted] = asyncio.Queue()

    async def on_deleted(msg: Any) -> None:
        event = DocumentDeleted.model_validate(json.loads(msg.data))
        if str(event.document_id) == doc_id:
            await deleted.put(event)

    await nc.subscribe(DocumentDeleted.subject, cb=on_deleted)
    real = routes.remove_stored_objects

    async def unavailable(js: Any, *, object_name: str) -> None:
        raise UpstreamError("object store unavailable (injected)")

    try:
        monkeypatch.setattr(routes, "remove_stored_objects", unavailable)
        first = await client.delete(f"/v1/documents/{doc_id}", headers=teacher)
        assert first.status_code == 503
        assert first.json()["reason"] == "cleanup_pending"
        assert "repeat the DELETE" in first.json()["detail"]
        after = (await client.get(f"/v1/documents/{doc_id}", headers=teacher)).json()
        assert after["status"] == "deleted"
        # documents.deleted left through the outbox with the commit, so the chunks went all
        # the same: only the bytes wait for the repeated DELETE
        event = await asyncio.wait_for(deleted.get(), 10)
        assert event.deleted_by == "t1"
        assert event.event_id == uuid.uuid5(uuid.UUID(doc_id), "lectern.documents.deleted")
        await settled(db_pool, uuid.UUID(doc_id), active=None)
        assert await stored(nats_url, f"{doc_id}/1")

        monkeypatch.setattr(routes, "remove_stored_objects", real)
        second = await client.delete(f"/v1/documents/{doc_id}", headers=admin)
        assert second.status_code == 200 and second.json()["status"] == "deleted"
        assert not await stored(nats_url, f"{doc_id}/1")
        again = await asyncio.wait_for(deleted.get(), 10)
        assert again == event, "the event names who deleted, not who repeated"

        third = await client.delete(f"/v1/documents/{doc_id}", headers=teacher)
        assert third.status_code == 200 and third.json() == second.json()
        repeat = await asyncio.wait_for(deleted.get(), 10)
        assert repeat == event, "the same event again: consumers dedupe on event_id"

        # within JetStream's duplicate window the stream keeps one copy (Nats-Msg-Id)
        copies = 0
        sub = await nc.jetstream().subscribe(DocumentDeleted.subject, ordered_consumer=True)
        with contextlib.suppress(nats.errors.TimeoutError):
            while True:
                msg = await sub.next_msg(timeout=1.0)
                copies += json.loads(msg.data)["document_id"] == doc_id
        await sub.unsubscribe()
        assert copies == 1
    finally:
        await nc.drain()


@contextlib.asynccontextmanager
async def serving(gateway: Any) -> AsyncIterator[str]:
    """Serve the (already started) gateway over HTTP on a free port; yields its URL."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    # the app is already started by the fixture: serve it without a second lifespan
    server = uvicorn.Server(uvicorn.Config(gateway, lifespan="off", log_config=None))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        for _ in range(200):
            if server.started:
                break
            await asyncio.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task


async def test_cli_ingests_a_folder_and_reports_failures(
    stack: tuple[Any, GatewaySettings], tenant_id: str, tmp_path: Any
) -> None:
    gateway, settings = stack
    (tmp_path / "unit").mkdir()
    (tmp_path / "unit" / "forces.md").write_text(NOTES)
    (tmp_path / "unit" / "waves.pdf").write_bytes(pdf_bytes(2))
    (tmp_path / "unit" / "junk.pdf").write_bytes(bytes(range(256)) * 4)
    (tmp_path / "unit" / ".hidden").write_text("skip me")
    files = collect_files([tmp_path / "unit"])
    assert [f.name for f in files] == ["forces.md", "junk.pdf", "waves.pdf"]

    token = auth(settings, tenant_id, "t1", "teacher")["Authorization"].split()[1]
    async with serving(gateway) as url:
        outcomes = await ingest(
            url=url, token=token, files=files, fields={"subject": "physics"}, timeout=120
        )
    by_name = {o.path.name: o for o in outcomes}
    assert by_name["forces.md"].status == "indexed"
    assert by_name["waves.pdf"].status == "indexed"
    assert by_name["junk.pdf"].status.startswith("rejected (415")
    code, lines = summarise(outcomes)
    assert code == 1
    assert lines[0] == "2 of 3 documents indexed"
    assert any("junk.pdf" in line for line in lines[1:])


async def test_cli_titles_queues_and_sends_changed_files_as_new_versions(
    client: httpx.AsyncClient, stack: tuple[Any, GatewaySettings], tenant_id: str, tmp_path: Any
) -> None:
    gateway, settings = stack
    teacher = auth(settings, tenant_id, "t1", "teacher")
    token = teacher["Authorization"].split()[1]
    other_token = auth(settings, tenant_id, "t2", "teacher")["Authorization"].split()[1]
    notes = tmp_path / "photo.md"
    notes.write_text(NOTES)
    async with serving(gateway) as url:
        queued = await ingest(
            url=url, token=token, files=[notes], wait=False,
            fields={"title": "Photosynthesis", "freshness_date": "2024-09-01"},
        )  # fmt: skip
        assert [o.status for o in queued] == ["queued"]
        assert summarise(queued) == (0, ["1 of 1 documents queued"])
        v1_id = str(queued[0].document_id)
        v1 = await wait_final(client, v1_id, teacher)
        assert (v1["status"], v1["title"], v1["freshness_date"]) == (
            "indexed", "Photosynthesis", "2024-09-01")  # fmt: skip

        same = await ingest(url=url, token=token, files=[notes], fields={})
        assert (same[0].status, same[0].document_id) == ("duplicate", v1_id)

        notes.write_text(NOTES + "\n## Summary\n\nLight reactions feed the Calvin cycle.\n")
        changed = await ingest(url=url, token=token, files=[notes], fields={}, timeout=120)
        assert changed[0].status == "indexed", changed[0]
        assert f"version 2 of {v1_id}" in changed[0].detail
        v2 = await wait_final(client, str(changed[0].document_id), teacher)
        assert (v2["previous_version_id"], v2["version"], v2["title"]) == (
            v1_id, 2, "Photosynthesis")  # fmt: skip
        old = (await client.get(f"/v1/documents/{v1_id}", headers=teacher)).json()
        assert old["status"] == "superseded"
        for either in (v1_id, v2["id"]):
            versions = await client.get(f"/v1/documents/{either}/versions", headers=teacher)
            assert [(v["id"], v["version"], v["status"]) for v in versions.json()] == [
                (v2["id"], 2, "indexed"), (v1_id, 1, "superseded")
            ]  # fmt: skip

        # a colleague's file of the same name is never taken for a new version of this one
        (tmp_path / "t2").mkdir()
        theirs = tmp_path / "t2" / "photo.md"
        theirs.write_text("# Leaves\n\nStomata open and close to exchange gases with the air.\n")
        separate = await ingest(url=url, token=other_token, files=[theirs], fields={})
        assert separate[0].status == "indexed"
        doc = await wait_final(client, str(separate[0].document_id), teacher)
        assert (doc["previous_version_id"], doc["version"]) == (None, 1)
        assert (await wait_final(client, v2["id"], teacher))["status"] == "indexed"

        # --no-replace: a separate document even though the name matches
        notes.write_text(NOTES + "\n## Quiz\n\nWhich enzyme fixes carbon dioxide?\n")
        fresh = await ingest(
            url=url, token=token, files=[notes], fields={}, auto_replace=False, timeout=120
        )
        assert fresh[0].status == "indexed"
        doc = await wait_final(client, str(fresh[0].document_id), teacher)
        assert doc["previous_version_id"] is None
        # now two of the caller's indexed documents are named photo.md: ask, do not guess
        ambiguous = await ingest(url=url, token=token, files=[notes], fields={})
        assert ambiguous[0].status == "ambiguous" and "--replaces" in ambiguous[0].detail


async def test_documents_in_flight_together_keep_their_own_chunks(
    client: httpx.AsyncClient,
    stack: tuple[Any, GatewaySettings],
    tenant_id: str,
    db_pool: Any,
) -> None:
    """The worker takes several documents at once (concurrency 2): nothing mixes between them."""
    headers = auth(stack[1], tenant_id, "t1", "teacher")
    files = {f"set-{n}.pdf": pdf_bytes(n) for n in range(1, 7)}
    responses = await asyncio.gather(
        *(upload(client, headers, data, name) for name, data in files.items())
    )
    assert {r.status_code for r in responses} == {202}
    bodies = [await wait_final(client, r.json()["id"], headers) for r in responses]
    assert {b["status"] for b in bodies} == {"indexed"}
    for body, pages in zip(bodies, range(1, 7), strict=True):
        assert body["page_count"] == pages
        rows = await db_pool.fetch(
            "SELECT chunk_index, page_start, page_end FROM chunks WHERE document_id = $1 "
            "ORDER BY chunk_index",
            uuid.UUID(body["id"]),
        )
        assert (
            [r["chunk_index"] for r in rows]
            == list(range(len(rows)))
            == list(range(body["chunk_count"]))
        )
        assert all(1 <= r["page_start"] <= r["page_end"] <= pages for r in rows)
