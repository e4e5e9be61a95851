"""Streaming multipart uploads: the file goes to a temporary file while it arrives.

The size limit is enforced on the bytes as they are read, so an oversized upload is cut
off after ``max_bytes`` instead of being buffered whole; the SHA-256 is computed on the way.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from python_multipart.multipart import MultipartParser, parse_options_header

HEAD_BYTES = 8192
MAX_FIELD_BYTES = 64 * 1024
FILE_FIELD = "file"


class UploadTooLarge(Exception):
    """Raised when the body passes the configured size limit."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"upload larger than {limit} bytes")
        self.limit = limit


class MalformedUpload(Exception):
    """Raised when the body is not a multipart form with exactly one file part."""


@dataclass
class ReceivedUpload:
    """A file received to disk plus the form's text fields."""

    path: Path
    filename: str
    size: int
    sha256: str
    head: bytes
    fields: dict[str, list[str]] = field(default_factory=dict)

    def discard(self) -> None:
        """Remove the temporary file."""
        self.path.unlink(missing_ok=True)


@dataclass
class _Part:
    headers: dict[str, str] = field(default_factory=dict)
    name: str = ""
    filename: str | None = None
    value: bytearray = field(default_factory=bytearray)


class _Receiver:
    """Callbacks of the streaming parser; writes the file part to disk."""

    def __init__(self, *, max_bytes: int, directory: str | None) -> None:
        self.max_bytes = max_bytes
        fd, name = tempfile.mkstemp(prefix="lectern-upload-", dir=directory)
        self.path = Path(name)
        self.handle = os.fdopen(fd, "wb")
        self.digest = hashlib.sha256()
        self.size = 0
        self.head = bytearray()
        self.fields: dict[str, list[str]] = {}
        self.filename: str | None = None
        self.files_seen = 0
        self.part = _Part()
        self._header_field = bytearray()
        self._header_value = bytearray()

    def callbacks(self) -> dict[str, Any]:
        return {
            "on_part_begin": self.on_part_begin,
            "on_header_field": self.on_header_field,
            "on_header_value": self.on_header_value,
            "on_header_end": self.on_header_end,
            "on_headers_finished": self.on_headers_finished,
            "on_part_data": self.on_part_data,
            "on_part_end": self.on_part_end,
        }

    def on_part_begin(self) -> None:
        self.part = _Part()

    def on_header_field(self, data: bytes, start: int, end: int) -> None:
        self._header_field += data[start:end]

    def on_header_value(self, data: bytes, start: int, end: int) -> None:
        self._header_value += data[start:end]

    def on_header_end(self) -> None:
        key = self._header_field.decode("latin-1").strip().lower()
        self.part.headers[key] = self._header_value.decode("utf-8", "replace").strip()
        self._header_field.clear()
        self._header_value.clear()

    def on_headers_finished(self) -> None:
        _, options = parse_options_header(self.part.headers.get("content-disposition", ""))
        self.part.name = options.get(b"name", b"").decode("utf-8", "replace")
        raw_filename = options.get(b"filename")
        if raw_filename is not None:
            self.part.filename = raw_filename.decode("utf-8", "replace")
        if self._is_file():
            self.files_seen += 1
            if self.files_seen > 1:
                raise MalformedUpload("send exactly one file per upload")
            self.filename = Path(self.part.filename or "upload").name or "upload"

    def _is_file(self) -> bool:
        return self.part.name == FILE_FIELD or self.part.filename is not None

    def on_part_data(self, data: bytes, start: int, end: int) -> None:
        piece = data[start:end]
        if self._is_file():
            self.size += len(piece)
            if self.size > self.max_bytes:
                raise UploadTooLarge(self.max_bytes)
            if len(self.head) < HEAD_BYTES:
                self.head += piece[: HEAD_BYTES - len(self.head)]
            self.digest.update(piece)
            self.handle.write(piece)
        else:
            self.part.value += piece
            if len(self.part.value) > MAX_FIELD_BYTES:
                raise MalformedUpload(f"form field {self.part.name!r} is too long")

    def on_part_end(self) -> None:
        if not self._is_file() and self.part.name:
            value = self.part.value.decode("utf-8", "replace")
            self.fields.setdefault(self.part.name, []).append(value)

    def close(self) -> None:
        self.handle.close()


async def receive_upload(
    *,
    content_type: str,
    body: AsyncIterator[bytes],
    max_bytes: int,
    directory: str | None = None,
) -> ReceivedUpload:
    """Parse a multipart body as it streams in; the file part lands in a temporary file.

    Raises ``UploadTooLarge`` as soon as the file passes ``max_bytes`` and ``MalformedUpload``
    when the body is not ``multipart/form-data`` with one file part.
    """
    kind, options = parse_options_header(content_type)
    boundary = options.get(b"boundary")
    if kind != b"multipart/form-data" or not boundary:
        raise MalformedUpload("send the file as multipart/form-data (field 'file')")
    receiver = _Receiver(max_bytes=max_bytes, directory=directory)
    # form fields and part headers add a little on top of the file itself
    parser = MultipartParser(
        boundary, cast(Any, receiver.callbacks()), max_size=max_bytes + 1024 * 1024
    )
    try:
        async for piece in body:
            if piece:
                parser.write(piece)
        parser.finalize()
    except (UploadTooLarge, MalformedUpload):
        receiver.close()
        receiver.path.unlink(missing_ok=True)
        raise
    except Exception as exc:
        receiver.close()
        receiver.path.unlink(missing_ok=True)
        raise MalformedUpload(f"the multipart body could not be parsed: {exc}") from exc
    receiver.close()
    if receiver.filename is None and any(v.strip() for v in receiver.fields.get("url", [])):
        # no file but a URL: the gateway fetches it (documents.fetch) into this file
        return ReceivedUpload(
            path=receiver.path, filename="", size=0, sha256="", head=b"", fields=receiver.fields
        )
    if receiver.filename is None:
        receiver.path.unlink(missing_ok=True)
        raise MalformedUpload("the form has no file part (field 'file') nor a 'url' field")
    return ReceivedUpload(
        path=receiver.path,
        filename=receiver.filename,
        size=receiver.size,
        sha256=receiver.digest.hexdigest(),
        head=bytes(receiver.head),
        fields=receiver.fields,
    )
