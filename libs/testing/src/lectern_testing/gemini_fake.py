"""Local fake model servers for tests: the Gemini REST protocol and an OpenAI-compatible one.

``FakeGemini`` answers what the real ``google-genai`` SDK sends when pointed at it with
``HttpOptions(base_url=fake.base_url, api_version="v1beta")``: ``:generateContent``,
``:streamGenerateContent?alt=sse`` (``data: {json}\\r\\n\\r\\n`` events, as Google sends),
``:embedContent``, ``:batchEmbedContents`` and ``:countTokens``, all in camelCase JSON (the
SDK silently drops snake_case keys). ``FakeOpenAI`` answers ``POST /v1/chat/completions``
with ``stream: true`` (``data:`` lines ending with ``data: [DONE]``).

Both servers run uvicorn on 127.0.0.1 with a random free port in a background thread, keep
a log of the requests they received, and pop scripted behaviours (errors, delays, canned
text, grounding metadata) from a queue; with the queue empty they answer successfully and
deterministically. Embeddings are hashed bags of words, so texts sharing words are close.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import threading
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal, Self

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

Endpoint = Literal["generate", "embed", "count_tokens", "chat"]

_STATUS_NAMES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}
_WORD = re.compile(r"\w+", re.UNICODE)
_PIECE = re.compile(r"\S+\s*")


@dataclass
class Behaviour:
    """One scripted answer: an HTTP error, or a (possibly delayed, chunked) success."""

    status: int = 200
    error_message: str | None = None
    delay_s: float = 0.0
    text: str | None = None
    chunks: list[str] | None = None
    words_per_chunk: int = 3
    chunk_delay_s: float = 0.0
    #: raw camelCase ``groundingMetadata`` put on the last streamed chunk (see web_grounding)
    grounding: dict[str, Any] | None = None
    #: errors: a ``google.rpc.RetryInfo`` detail asking the client to wait this long
    retry_delay_s: float | None = None
    #: streaming: after the first chunk, wait (up to 10 s) until this event is set
    gate: threading.Event | None = None
    finish_reason: str = "STOP"
    #: streaming: drop the connection after this many chunks (no last chunk, no usage)
    cut_after: int | None = None
    #: extra response headers of an error (e.g. ``Retry-After``)
    headers: dict[str, str] = field(default_factory=dict)

    @classmethod
    def error(
        cls, status: int, message: str | None = None, *, retry_delay_s: float | None = None
    ) -> Behaviour:
        """An HTTP error with Google's error body."""
        return cls(status=status, error_message=message, retry_delay_s=retry_delay_s)

    def pieces(self, default_text: str) -> list[str]:
        """The text chunks this behaviour streams."""
        if self.chunks is not None:
            return list(self.chunks)
        words = _PIECE.findall(self.text if self.text is not None else default_text)
        step = max(1, self.words_per_chunk)
        return ["".join(words[i : i + step]) for i in range(0, len(words), step)] or [""]


@dataclass
class RecordedRequest:
    """A request the fake received."""

    endpoint: Endpoint
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: dict[str, Any]
    model: str | None = None
    action: str | None = None


@dataclass
class _Script:
    queue: list[tuple[Endpoint | None, Behaviour]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def pop(self, endpoint: Endpoint) -> Behaviour:
        with self.lock:
            for index, (wanted, behaviour) in enumerate(self.queue):
                if wanted is None or wanted == endpoint:
                    del self.queue[index]
                    return behaviour
        return Behaviour()


def hashed_embedding(text: str, dimension: int) -> list[float]:
    """A deterministic pseudo-embedding: a signed hashed bag of lower-cased words (unnormalised)."""
    vector = [0.0] * dimension
    for word in _WORD.findall(text.lower()):
        digest = hashlib.blake2b(word.encode("utf-8"), digest_size=8).digest()
        index = int.from_bytes(digest[:4], "little") % dimension
        vector[index] += 1.0 if digest[4] & 1 else -1.0
    # a constant component keeps empty texts away from the zero vector
    vector[0] += 0.25
    return vector


def web_grounding(
    text: str,
    *,
    sources: Sequence[tuple[str, str]],
    supports: Sequence[tuple[str, Sequence[int]]],
    queries: Sequence[str] = (),
) -> dict[str, Any]:
    """Gemini ``groundingMetadata`` for ``text``: web chunks and supports with byte offsets."""
    encoded = text.encode("utf-8")
    support_objects = []
    for segment, indices in supports:
        start = encoded.find(segment.encode("utf-8"))
        if start < 0:
            raise ValueError(f"segment {segment!r} is not in the text")
        support_objects.append(
            {
                "segment": {
                    "startIndex": start,
                    "endIndex": start + len(segment.encode("utf-8")),
                    "text": segment,
                },
                "groundingChunkIndices": list(indices),
                "confidenceScores": [0.9 for _ in indices],
            }
        )
    return {
        "webSearchQueries": list(queries),
        "groundingChunks": [{"web": {"uri": uri, "title": title}} for uri, title in sources],
        "groundingSupports": support_objects,
    }


class _FakeServer(ABC):
    """uvicorn in a background thread on 127.0.0.1, with a script queue and a request log."""

    def __init__(self) -> None:
        self.requests: list[RecordedRequest] = []
        self._script = _Script()
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>`` (no trailing slash)."""
        return f"http://127.0.0.1:{self.port}"

    def enqueue(self, *behaviours: Behaviour, endpoint: Endpoint | None = None) -> None:
        """Queue behaviours for the next requests (of one endpoint kind, or of any)."""
        with self._script.lock:
            self._script.queue.extend((endpoint, behaviour) for behaviour in behaviours)

    def fail(self, status: int, *, times: int = 1, endpoint: Endpoint | None = None) -> None:
        """Answer the next ``times`` requests with HTTP ``status``."""
        self.enqueue(*(Behaviour.error(status) for _ in range(times)), endpoint=endpoint)

    def reset(self) -> None:
        """Forget the scripted behaviours and the request log (reuse one server across tests)."""
        with self._script.lock:
            self._script.queue.clear()
        self.requests.clear()

    def requests_to(self, endpoint: Endpoint) -> list[RecordedRequest]:
        """The logged requests of one endpoint kind."""
        return [r for r in list(self.requests) if r.endpoint == endpoint]

    @abstractmethod
    def _routes(self) -> list[Route]:
        """The server's HTTP routes (each fake defines its own)."""

    async def _record(
        self, request: Request, endpoint: Endpoint, model: str | None, action: str | None
    ) -> RecordedRequest:
        raw = await request.body()
        body = json.loads(raw) if raw else {}
        recorded = RecordedRequest(
            endpoint=endpoint,
            method=request.method,
            path=request.url.path,
            query=dict(request.query_params),
            headers={k.lower(): v for k, v in request.headers.items()},
            body=body,
            model=model,
            action=action,
        )
        self.requests.append(recorded)
        return recorded

    def start(self) -> None:
        """Start serving; returns once the port is bound."""
        config = uvicorn.Config(
            Starlette(routes=self._routes()),
            host="127.0.0.1",
            port=0,
            log_level="warning",
            access_log=False,
            lifespan="off",
            ws="none",
            timeout_graceful_shutdown=1,
        )
        server = uvicorn.Server(config)
        thread = threading.Thread(target=server.run, name=type(self).__name__, daemon=True)
        thread.start()
        for _ in range(1000):
            if server.started or not thread.is_alive():
                break
            threading.Event().wait(0.01)
        if not server.started:
            raise RuntimeError(f"{type(self).__name__} did not start")
        self.port = server.servers[0].sockets[0].getsockname()[1]
        self._server, self._thread = server, thread

    def stop(self) -> None:
        """Stop serving and join the thread."""
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(timeout=5)
        self._server = self._thread = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    async def __aenter__(self) -> Self:
        await asyncio.to_thread(self.start)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await asyncio.to_thread(self.stop)


def _google_error(behaviour: Behaviour) -> JSONResponse:
    status_name = _STATUS_NAMES.get(behaviour.status, "UNKNOWN")
    message = behaviour.error_message or f"fake {behaviour.status} {status_name}"
    error: dict[str, Any] = {"code": behaviour.status, "message": message, "status": status_name}
    if behaviour.retry_delay_s is not None:
        error["details"] = [
            {
                "@type": "type.googleapis.com/google.rpc.RetryInfo",
                "retryDelay": f"{behaviour.retry_delay_s}s",
            }
        ]
    return JSONResponse({"error": error}, status_code=behaviour.status)


def _user_text(body: dict[str, Any]) -> str:
    texts = [
        part.get("text", "")
        for content in body.get("contents", [])
        if content.get("role", "user") == "user"
        for part in content.get("parts", [])
    ]
    return texts[-1] if texts else ""


class FakeGemini(_FakeServer):
    """A fake Gemini Developer API (``/v1beta/models/{model}:{action}``)."""

    def __init__(
        self,
        *,
        default_text: str | None = None,
        default_dimension: int = 3072,
        respond: Callable[[dict[str, Any]], str | None] | None = None,
    ) -> None:
        super().__init__()
        self.default_text = default_text
        self.default_dimension = default_dimension
        #: a stand-in for the model's judgement: the answer to a request body (None: the
        #: default), e.g. answering in the form the system instruction asks for
        self.respond = respond

    def _routes(self) -> list[Route]:
        return [Route("/{version}/models/{target:path}", self._handle, methods=["POST"])]

    def _answer_text(self, body: dict[str, Any]) -> str:
        if self.respond is not None and (answer := self.respond(body)) is not None:
            return answer
        if self.default_text is not None:
            return self.default_text
        return f"Fake answer to: {_user_text(body)}"

    async def _handle(self, request: Request) -> Response:
        model, _, action = request.path_params["target"].partition(":")
        endpoint: Endpoint
        if action in {"generateContent", "streamGenerateContent"}:
            endpoint = "generate"
        elif action in {"embedContent", "batchEmbedContents"}:
            endpoint = "embed"
        elif action == "countTokens":
            endpoint = "count_tokens"
        else:
            return JSONResponse({"error": {"code": 404, "message": action}}, status_code=404)
        recorded = await self._record(request, endpoint, model, action)
        behaviour = self._script.pop(endpoint)
        if behaviour.delay_s:
            await asyncio.sleep(behaviour.delay_s)
        if behaviour.status != 200:
            return _google_error(behaviour)
        body = recorded.body
        if action == "batchEmbedContents":
            return JSONResponse({"embeddings": [self._embedding(r) for r in body["requests"]]})
        if action == "embedContent":
            return JSONResponse({"embedding": self._embedding(body)})
        if action == "countTokens":
            words = sum(
                len(_WORD.findall(part.get("text", "")))
                for content in body.get("contents", [])
                for part in content.get("parts", [])
            )
            return JSONResponse({"totalTokens": words})
        pieces = behaviour.pieces(self._answer_text(body))
        if action == "generateContent":
            return JSONResponse(self._response(model, "".join(pieces), behaviour, last=True))
        return StreamingResponse(
            self._stream(model, pieces, behaviour), media_type="text/event-stream"
        )

    def _embedding(self, request: dict[str, Any]) -> dict[str, Any]:
        dimension = int(request.get("outputDimensionality") or self.default_dimension)
        text = " ".join(part.get("text", "") for part in request["content"].get("parts", []))
        return {"values": hashed_embedding(text, dimension)}

    def _response(
        self, model: str, text: str, behaviour: Behaviour, *, last: bool
    ) -> dict[str, Any]:
        candidate: dict[str, Any] = {
            "content": {"role": "model", "parts": [{"text": text}]},
            "index": 0,
        }
        response: dict[str, Any] = {"candidates": [candidate], "modelVersion": model}
        if last:
            candidate["finishReason"] = behaviour.finish_reason
            if behaviour.grounding is not None:
                candidate["groundingMetadata"] = behaviour.grounding
            output_tokens = len(_WORD.findall(text))
            response["usageMetadata"] = {
                "promptTokenCount": 7,
                "candidatesTokenCount": output_tokens,
                "totalTokenCount": 7 + output_tokens,
            }
        return response

    async def _stream(
        self, model: str, pieces: list[str], behaviour: Behaviour
    ) -> AsyncIterator[bytes]:
        total = "".join(pieces)
        for index, piece in enumerate(pieces):
            if behaviour.cut_after is not None and index >= behaviour.cut_after:
                # an exception in a streaming body makes the server abort the connection
                raise ConnectionAbortedError("fake Gemini cut the stream")
            last = index == len(pieces) - 1
            response = self._response(model, piece, behaviour, last=last)
            if last:
                output_tokens = len(_WORD.findall(total))
                response["usageMetadata"]["candidatesTokenCount"] = output_tokens
                response["usageMetadata"]["totalTokenCount"] = 7 + output_tokens
            yield f"data: {json.dumps(response)}\r\n\r\n".encode()
            if index == 0 and behaviour.gate is not None:
                await asyncio.to_thread(behaviour.gate.wait, 10.0)
            if behaviour.chunk_delay_s and not last:
                await asyncio.sleep(behaviour.chunk_delay_s)


class FakeOpenAI(_FakeServer):
    """A fake OpenAI-compatible ``POST /v1/chat/completions`` (streaming and not)."""

    def __init__(self, *, default_text: str = "Fallback answer.") -> None:
        super().__init__()
        self.default_text = default_text

    @property
    def api_base(self) -> str:
        """The base URL a client appends ``/chat/completions`` to."""
        return f"{self.base_url}/v1"

    def _routes(self) -> list[Route]:
        return [Route("/v1/chat/completions", self._handle, methods=["POST"])]

    async def _handle(self, request: Request) -> Response:
        recorded = await self._record(request, "chat", None, None)
        model = str(recorded.body.get("model", "fake"))
        behaviour = self._script.pop("chat")
        if behaviour.delay_s:
            await asyncio.sleep(behaviour.delay_s)
        if behaviour.status != 200:
            message = behaviour.error_message or f"fake {behaviour.status}"
            return JSONResponse(
                {"error": {"message": message, "type": "fake_error", "code": behaviour.status}},
                status_code=behaviour.status,
                headers=behaviour.headers,
            )
        pieces = behaviour.pieces(self.default_text)
        if not recorded.body.get("stream"):
            text = "".join(pieces)
            return JSONResponse(
                {
                    "id": "chatcmpl-fake",
                    "object": "chat.completion",
                    "model": model,
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": text},
                            "finish_reason": "stop",
                        }
                    ],
                }
            )
        return StreamingResponse(
            self._stream(model, pieces, behaviour), media_type="text/event-stream"
        )

    async def _stream(
        self, model: str, pieces: list[str], behaviour: Behaviour
    ) -> AsyncIterator[bytes]:
        for index, piece in enumerate(pieces):
            delta: dict[str, Any] = {"content": piece}
            if index == 0:
                delta["role"] = "assistant"
            yield _openai_event(model, {"index": 0, "delta": delta, "finish_reason": None})
            if behaviour.chunk_delay_s:
                await asyncio.sleep(behaviour.chunk_delay_s)
        yield _openai_event(model, {"index": 0, "delta": {}, "finish_reason": "stop"})
        words = len(_WORD.findall("".join(pieces)))
        usage = {"prompt_tokens": 9, "completion_tokens": words, "total_tokens": 9 + words}
        yield _openai_event(model, None, usage=usage)
        yield b"data: [DONE]\n\n"


def _openai_event(
    model: str, choice: dict[str, Any] | None, *, usage: dict[str, int] | None = None
) -> bytes:
    payload: dict[str, Any] = {
        "id": "chatcmpl-fake",
        "object": "chat.completion.chunk",
        "model": model,
        "choices": [choice] if choice is not None else [],
    }
    if usage is not None:
        payload["usage"] = usage
    return f"data: {json.dumps(payload)}\n\n".encode()


def iter_texts(requests: Sequence[RecordedRequest]) -> Iterator[str]:
    """Every text embedded by a list of recorded ``batchEmbedContents`` requests, in order."""
    for recorded in requests:
        for item in recorded.body.get("requests", [recorded.body]):
            for part in item.get("content", {}).get("parts", []):
                yield part.get("text", "")
