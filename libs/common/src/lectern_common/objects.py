"""Uploaded bytes in the JetStream object store (bucket ``lectern-documents``)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import io
import uuid
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from nats.js.errors import NotFoundError as NatsNotFoundError
from nats.js.errors import ObjectNotFoundError
from tenacity import (
    AsyncRetrying,
    retry_if_exception_type,
    stop_after_delay,
    wait_exponential_jitter,
)

from lectern_common.broker import DOCUMENTS_BUCKET, nats_unavailable
from lectern_common.errors import LecternError, NatsUnavailableError, NotFoundError, UpstreamError


def object_name(document_id: uuid.UUID, version: int) -> str:
    """The object key of one version of a document."""
    return f"{document_id}/{version}"


def password_object_name(name: str) -> str:
    """The key of the short-lived object holding the PDF password of the upload ``name``.

    The password travels next to the bytes instead of inside ``documents.uploaded`` (which
    stays in the stream); the worker removes it once the document's outcome is stored.
    """
    return f"{name}.password"


#: the bucket's handle per JetStream context (binding one asks the server for its stream)
_BUCKETS: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


@contextlib.contextmanager
def _nats_failures(what: str, *, name: str | None = None) -> Iterator[None]:
    """NATS failing under ``what`` as Lectern's errors: ``NatsUnavailableError`` when it
    cannot answer now (the bucket is a JetStream stream: an election, a lost quorum or a
    reconnecting client leave it without a leader, and the gateway answers 503
    ``nats_unavailable``), ``NotFoundError`` when the object ``name`` is absent, else
    ``UpstreamError``. Lectern's own errors pass through."""
    try:
        yield
    except LecternError:
        raise
    except (ObjectNotFoundError, NatsNotFoundError) as exc:
        if name is None:  # the bucket itself is missing: not the caller's object
            raise UpstreamError(f"{what} failed: {exc!r}") from exc
        raise NotFoundError(f"object {name} is not in {DOCUMENTS_BUCKET}") from exc
    except Exception as exc:
        # nothing else under these calls waits or talks to a server: a bare TimeoutError
        # or a socket error is the NATS client's too
        if nats_unavailable(exc) or isinstance(exc, (TimeoutError, ConnectionError)):
            raise NatsUnavailableError(f"{what}: NATS unavailable ({exc!r})") from exc
        raise UpstreamError(f"{what} failed: {exc!r}") from exc


async def _bucket(js: Any) -> Any:
    with contextlib.suppress(TypeError):
        if (bound := _BUCKETS.get(js)) is not None:
            return bound
    with _nats_failures(f"object store {DOCUMENTS_BUCKET}"):
        bucket = await js.object_store(DOCUMENTS_BUCKET)
    with contextlib.suppress(TypeError):  # a context that takes no weak reference
        _BUCKETS[js] = bucket
    return bucket


async def _read_one_chunk(js: Any, info: Any) -> bytes:
    """The bytes of an object stored in one chunk, read with one direct get of its chunk
    message (instead of an ordered consumer created and deleted for it); digest checked."""
    message = await js.get_last_msg(
        f"OBJ_{DOCUMENTS_BUCKET}", f"$O.{DOCUMENTS_BUCKET}.C.{info.nuid}"
    )
    data = bytes(message.data or b"")
    digest = str(info.digest or "")
    expected = base64.urlsafe_b64decode(digest.split("=", 1)[1] + "==") if "=" in digest else None
    if len(data) != info.size or (
        expected is not None and hashlib.sha256(data).digest() != expected
    ):
        raise UpstreamError(f"object {info.name} came back damaged (size or digest differ)")
    return data


async def put_file(js: Any, *, name: str, path: Path) -> int:
    """Stream a file into the bucket; returns its size."""
    bucket = await _bucket(js)
    with path.open("rb") as handle, _nats_failures(f"storing object {name}"):
        info = await bucket.put(name, handle)
    return int(info.size or 0)


async def put_bytes(js: Any, *, name: str, data: bytes) -> None:
    """Store small bytes (the PDF password, tests, benchmarks)."""
    bucket = await _bucket(js)
    with _nats_failures(f"storing object {name}"):
        await bucket.put(name, io.BytesIO(data))


#: how an unavailable object store is waited out by a fetch given patience: soon after an
#: election ends (a new leader came 4-8 s after its leader's SIGKILL in the cluster tests)
PATIENCE_BACKOFF = wait_exponential_jitter(initial=0.25, max=2.0, jitter=0.1)


async def fetch_to_file(js: Any, *, name: str, path: Path, patience_s: float = 0.0) -> int:
    """Write an object into ``path`` chunk by chunk; raises ``NotFoundError`` when absent.

    With ``patience_s``, a bucket without a leader (an election, NATS reconnecting) is asked
    again with a short backoff for that long before ``NatsUnavailableError`` is raised: a
    worker waits out an election in its attempt instead of giving the message back, whose
    redelivery delay grows with every delivery an election spoils."""
    async for attempt in AsyncRetrying(
        stop=stop_after_delay(patience_s),
        wait=PATIENCE_BACKOFF,
        retry=retry_if_exception_type(NatsUnavailableError),
        reraise=True,
    ):
        with attempt:
            return await _fetch_to_file(js, name=name, path=path)
    raise AssertionError("unreachable: tenacity returns or re-raises")  # pragma: no cover


async def _fetch_to_file(js: Any, *, name: str, path: Path) -> int:
    bucket = await _bucket(js)
    with _nats_failures(f"fetching object {name}", name=name):
        info = await bucket.get_info(name)
        if info.chunks == 1 and info.size and not info.is_link():
            data = await _read_one_chunk(js, info)
            await asyncio.to_thread(path.write_bytes, data)
            return len(data)
        with path.open("wb") as handle:
            await bucket.get(name, writeinto=handle)
    return int(await asyncio.to_thread(lambda: path.stat().st_size))


async def delete_object(js: Any, *, name: str) -> bool:
    """Remove an object; False when it was not there."""
    bucket = await _bucket(js)
    try:
        with _nats_failures(f"deleting object {name}", name=name):
            await bucket.delete(name)
    except NotFoundError:
        return False
    return True


async def put_password(js: Any, *, name: str, password: str) -> None:
    """Store the PDF password of the upload ``name`` (see ``password_object_name``)."""
    await put_bytes(js, name=password_object_name(name), data=password.encode("utf-8"))


async def fetch_password(js: Any, *, name: str) -> str:
    """The PDF password stored for the upload ``name``; raises ``NotFoundError`` when gone."""
    bucket = await _bucket(js)
    key = password_object_name(name)
    with _nats_failures(f"fetching object {key}", name=key):
        result = await bucket.get(key)
    return bytes(result.data or b"").decode("utf-8")


async def delete_password(js: Any, *, name: str) -> bool:
    """Remove the PDF password stored for the upload ``name``; False when there was none."""
    return await delete_object(js, name=password_object_name(name))
