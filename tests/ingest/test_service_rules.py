"""Pure rules of the ingest orchestration and the upload API (no servers)."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest

from lectern_common.errors import BadInputError, UpstreamError
from lectern_common.events import DocumentUploaded, FailureReason, IngestStage
from lectern_gateway.documents.routes import _decode_cursor, _encode_cursor, parse_metadata
from lectern_gateway.documents.uploads import MalformedUpload, UploadTooLarge, receive_upload
from lectern_ingest.enrich import sections_of
from lectern_ingest.outcomes import (
    Progress,
    failure_reason,
    retry_delay,
    similarity_from_distance,
)
from lectern_ingest.pipeline import chunk_id
from lectern_ingest.repository import ChunkRecord


def test_chunk_ids_are_deterministic_and_distinct() -> None:
    doc = uuid.uuid4()
    assert chunk_id(doc, "text", 3) == chunk_id(doc, "text", 3)
    ids = {chunk_id(doc, kind, i) for kind in ("text", "qa", "table") for i in range(50)}
    assert len(ids) == 150
    assert chunk_id(uuid.uuid4(), "text", 3) != chunk_id(doc, "text", 3)


def test_retry_delay_doubles_and_is_capped() -> None:
    delays = [retry_delay(deliveries=n, base_s=2.0, max_s=60.0) for n in range(1, 8)]
    assert delays == [2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0]


def test_failure_reason_keeps_known_reasons_only() -> None:
    encrypted = BadInputError("locked", reason="encrypted")
    assert failure_reason(encrypted, FailureReason.CORRUPT) is FailureReason.ENCRYPTED
    odd = BadInputError("odd", reason="bad_input")
    assert failure_reason(odd, FailureReason.CORRUPT) is FailureReason.CORRUPT
    assert failure_reason(UpstreamError("x"), FailureReason.INTERNAL) is FailureReason.INTERNAL


def test_similarity_from_distance() -> None:
    assert similarity_from_distance(0) == 1.0
    assert similarity_from_distance(64) == 0.0
    assert similarity_from_distance(9) > 0.85 > similarity_from_distance(10)


def _progress(sent: list[Any], *, interval_s: float, after_s: float = 0.0) -> Progress:
    """The progress of one small upload, its events appended to ``sent``."""

    async def publish(event: Any) -> None:
        sent.append(event)

    event = DocumentUploaded(
        tenant_id="t", document_id=uuid.uuid4(), version=1, object_name="o", filename="f",
        mime_type="text/plain", size_bytes=1, file_sha256="x", uploaded_by="u",
    )  # fmt: skip
    return Progress(event=event, publish=publish, interval_s=interval_s, after_s=after_s)


async def test_progress_is_throttled_but_stage_changes_go_out() -> None:
    sent: list[Any] = []
    progress = _progress(sent, interval_s=60.0)
    await progress.report(IngestStage.EXTRACT, 1, 10)
    await progress.report(IngestStage.EXTRACT, 2, 10)  # too soon
    await progress.report(IngestStage.EMBED, 2, 10)  # new stage
    await progress.report(IngestStage.EMBED, 10, 10, force=True)
    await progress.report(IngestStage.EMBED, 10, 10, force=True)  # identical
    assert [(p.stage, p.done) for p in sent] == [
        (IngestStage.EXTRACT, 1), (IngestStage.EMBED, 2), (IngestStage.EMBED, 10),
    ]  # fmt: skip


def _record(index: int, section: list[str]) -> ChunkRecord:
    return ChunkRecord(
        id=uuid.uuid4(), chunk_index=index, kind="text", parent_chunk_id=None, text="t",
        context_prefix=None, section_path=section, chapter=None, page_start=1, page_end=1,
        slide=None, time_start=None, time_end=None, token_count=1, content_hash="h",
    )  # fmt: skip


def test_sections_group_consecutive_chunks() -> None:
    chunks = [_record(0, ["A"]), _record(1, ["A"]), _record(2, ["A", "B"]), _record(3, ["A"])]
    assert sections_of(chunks) == [[0, 1], [2], [3]]


def test_metadata_lists_accept_repeats_and_commas() -> None:
    meta = parse_metadata(
        {"topic_tags": ["cells, mitosis", "cells"], "curriculum_standards[]": ["A", "B"],
         "grade_level": ["7"], "collection": ["assessment"], "title": [""]},
        filename="unit 3.pdf",
    )  # fmt: skip
    assert meta.topic_tags == ["cells", "mitosis"]
    assert meta.curriculum_standards == ["A", "B"]
    assert meta.grade_level == 7 and meta.collection == "assessment"
    assert meta.title == "unit 3"


def test_metadata_is_validated() -> None:
    from lectern_gateway.problems import ProblemError

    with pytest.raises(ProblemError) as caught:
        parse_metadata({"grade_level": ["forty"]}, filename="x.pdf")
    assert caught.value.status == 422


def test_cursor_round_trip() -> None:
    from datetime import UTC, datetime

    when = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
    doc = uuid.uuid4()
    assert _decode_cursor(_encode_cursor(when, doc)) == (when, doc)


def _multipart(boundary: str, parts: list[tuple[str, str | None, bytes]]) -> bytes:
    out = b""
    for name, filename, data in parts:
        disposition = f'form-data; name="{name}"'
        if filename is not None:
            disposition += f'; filename="{filename}"'
        out += f"--{boundary}\r\nContent-Disposition: {disposition}\r\n\r\n".encode()
        out += data + b"\r\n"
    return out + f"--{boundary}--\r\n".encode()


async def _chunks(data: bytes, size: int = 7) -> Any:
    for start in range(0, len(data), size):
        await asyncio.sleep(0)
        yield data[start : start + size]


async def test_upload_parser_streams_file_and_fields(tmp_path: Path) -> None:
    body = _multipart("b0und", [("subject", None, b"maths"), ("file", "../x/notes.txt", b"1+1=2")])
    upload = await receive_upload(
        content_type="multipart/form-data; boundary=b0und", body=_chunks(body), max_bytes=100,
        directory=str(tmp_path),
    )  # fmt: skip
    assert upload.filename == "notes.txt"
    assert upload.path.read_bytes() == b"1+1=2" and upload.size == 5
    assert upload.fields == {"subject": ["maths"]}
    upload.discard()
    assert list(tmp_path.iterdir()) == []  # noqa: ASYNC240


async def test_upload_parser_rejects(tmp_path: Path) -> None:
    big = _multipart("b", [("file", "big.txt", b"x" * 1000)])
    with pytest.raises(UploadTooLarge):
        await receive_upload(
            content_type="multipart/form-data; boundary=b", body=_chunks(big, 50), max_bytes=100,
            directory=str(tmp_path),
        )  # fmt: skip
    two = _multipart("b", [("file", "a.txt", b"a"), ("file", "b.txt", b"b")])
    with pytest.raises(MalformedUpload):
        await receive_upload(
            content_type="multipart/form-data; boundary=b", body=_chunks(two), max_bytes=100,
            directory=str(tmp_path),
        )  # fmt: skip
    with pytest.raises(MalformedUpload):
        await receive_upload(
            content_type="application/json", body=_chunks(b"{}"), max_bytes=100,
            directory=str(tmp_path),
        )  # fmt: skip
    assert list(tmp_path.iterdir()) == [], "rejected uploads leave no temporary file"  # noqa: ASYNC240


async def test_a_document_done_within_the_quiet_period_publishes_no_progress() -> None:
    """Progress starts once a document has been worked on ``after_s``: a short one has its
    outcome event only; a long one reports from then on, its current stage first."""
    sent: list[Any] = []
    quiet = _progress(sent, interval_s=0.0, after_s=60.0)
    await quiet.report(IngestStage.FETCH, 0, 1, force=True)
    await quiet.report(IngestStage.EMBED, 1, 1)
    await quiet.report(IngestStage.STORE, 0, 1, force=True)
    assert sent == [] and quiet.stage == IngestStage.STORE  # the stage is still followed
    started = _progress(sent, interval_s=0.0, after_s=0.05)
    await started.report(IngestStage.EXTRACT, 1, 10)
    await asyncio.sleep(0.06)
    await started.report(IngestStage.EMBED, 3, 10)
    assert [(p.stage, p.done) for p in sent] == [(IngestStage.EMBED, 3)]
