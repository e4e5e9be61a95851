"""The chain of models a chat answer streams from: a ``Generator`` protocol streaming typed
chunks, and its providers.

- ``GeminiGenerator``: Gemini Flash through google-genai, streaming, thinking budget 0 (the
  first token comes without seconds of thinking), optional ``google_search`` grounding
  mapped to web sources [W1].. and the answer segments they support.
- ``OpenAICompatibleGenerator``: any ``/chat/completions`` endpoint that streams SSE
  (DeepSeek, vLLM, Ollama, OpenAI ...), the fallback provider.
- ``OfflineAnswerer`` (``lectern_answerer``): no model at all; answers in the
  question's form from the sentences and list items of the sources, citing them [T#].
- ``FallbackGenerator``: primary (retried once after the wait it asks for), then the
  fallbacks in order: a secondary Gemini model, the OpenAI-compatible provider, offline.

Every stream is text deltas, then at most one grounding chunk and one usage chunk, then
exactly one final chunk naming the provider that answered (``lectern_common.generation``'s
types). Each is asked one ``GenerationRequest``: generators send its ``system`` and
``messages`` as given (the caller's prompt already holds the sources labelled [T1]..[Tn]);
``sources`` is the same material as data, for providers that work on it directly. Only the
gateway answers, so the providers live here (once ``lectern_common.llm``).
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import logging
import re
from collections.abc import Sequence
from contextlib import aclosing
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

import httpx

from lectern_answerer import READ_AT_MOST, READ_FIRST, OfflineAnswerer, SentenceReader
from lectern_common import metrics as telemetry_metrics
from lectern_common.embeddings import create_gemini_client, gemini_call_errors, upstream_error
from lectern_common.errors import (
    BadInputError,
    ConfigurationError,
    LecternError,
    RetryableError,
    UpstreamError,
)
from lectern_common.generation import (
    Final,
    GenerationRequest,
    GenerationStream,
    Grounding,
    GroundingSupport,
    TextDelta,
    Usage,
    WebSource,
)
from lectern_common.settings import BaseServiceSettings

if TYPE_CHECKING:
    # google-genai only where Gemini is called (lectern_common.embeddings says why)
    from google import genai
    from google.genai import types

    from lectern_common.embeddings import Embedder

log = logging.getLogger(__name__)


class Generator(Protocol):
    """Streams an answer to the conversation."""

    name: str

    def stream(self, request: GenerationRequest) -> GenerationStream:
        """Text deltas, optional grounding and usage, then one ``Final`` chunk."""
        ...


_TEXT_CITATION = re.compile(r"\[(T\d+)\]")


def cited_labels(text: str) -> list[str]:
    """The distinct ``T#`` labels cited in ``text``, in order of first citation."""
    return list(dict.fromkeys(_TEXT_CITATION.findall(text)))


def byte_to_char_offset(text: str, byte_offset: int) -> int:
    """Gemini's segment offsets count UTF-8 bytes; this is the matching character offset."""
    return len(text.encode("utf-8")[:byte_offset].decode("utf-8", errors="ignore"))


def map_grounding(metadata: types.GroundingMetadata, answer: str) -> Grounding | None:
    """Our ``Grounding`` for Gemini's grounding metadata over the full ``answer`` text."""
    chunks = metadata.grounding_chunks or []
    sources: list[WebSource] = []
    label_of: dict[int, str] = {}
    for index, chunk in enumerate(chunks):
        if chunk.web is None or not chunk.web.uri:
            continue
        label_of[index] = f"W{len(sources) + 1}"
        sources.append(WebSource(label=label_of[index], uri=chunk.web.uri, title=chunk.web.title))
    supports: list[GroundingSupport] = []
    for support in metadata.grounding_supports or []:
        labels = [label_of[i] for i in support.grounding_chunk_indices or [] if i in label_of]
        segment = support.segment
        if not labels or segment is None:
            continue
        start = byte_to_char_offset(answer, segment.start_index or 0)
        end = byte_to_char_offset(answer, segment.end_index or 0)
        supports.append(
            GroundingSupport(
                start=start, end=end, text=segment.text or answer[start:end], sources=labels
            )
        )
    if not sources:
        return None
    return Grounding(
        sources=sources, supports=supports, queries=list(metadata.web_search_queries or [])
    )


def insert_labels(text: str, marks: Sequence[tuple[int, Sequence[str]]]) -> str:
    """``text`` with ``[label]`` markers inserted at character offsets (each label once per
    offset, offsets clamped to the text)."""
    inserts: dict[int, list[str]] = {}
    for end, labels in marks:
        at = inserts.setdefault(min(max(end, 0), len(text)), [])
        at.extend(label for label in labels if label not in at)
    out, previous = [], 0
    for position in sorted(inserts):
        out.append(text[previous:position])
        out.append("".join(f"[{label}]" for label in inserts[position]))
        previous = position
    out.append(text[previous:])
    return "".join(out)


class GeminiGenerator:
    """Gemini Flash, streamed, with optional ``google_search`` grounding."""

    def __init__(
        self,
        *,
        client: genai.Client,
        model: str = "gemini-2.5-flash",
        temperature: float = 0.3,
        thinking_budget: int = 0,
        name: str = "gemini",
    ) -> None:
        self.name = name
        self.client = client
        self.model = model
        self.temperature = temperature
        self.thinking_budget = thinking_budget

    def _config(self, system: str, web_search: bool) -> types.GenerateContentConfig:
        from google.genai import types

        tools: list[types.ToolUnion] | None = (
            [types.Tool(google_search=types.GoogleSearch())] if web_search else None
        )
        return types.GenerateContentConfig(
            system_instruction=system or None,
            temperature=self.temperature,
            thinking_config=types.ThinkingConfig(thinking_budget=self.thinking_budget),
            tools=tools,
        )

    async def stream(self, request: GenerationRequest) -> GenerationStream:
        """Stream Gemini's answer; errors become ``UpstreamError`` (429: ``rate_limited``)."""
        from google.genai import types

        contents = [
            types.Content(
                role="model" if m.role == "assistant" else "user",
                parts=[types.Part(text=m.content)],
            )
            for m in request.messages
        ]
        answer: list[str] = []
        metadata: types.GroundingMetadata | None = None
        usage: types.GenerateContentResponseUsageMetadata | None = None
        finish_reason: str | None = None
        try:
            response_stream = await self.client.aio.models.generate_content_stream(
                model=self.model,
                contents=contents,
                config=self._config(request.system, request.web_search),
            )
            try:
                async for response in response_stream:
                    usage = response.usage_metadata or usage
                    feedback = response.prompt_feedback
                    if feedback is not None and feedback.block_reason is not None:
                        finish_reason = f"PROMPT_{_enum_text(feedback.block_reason)}"
                    for candidate in (response.candidates or [])[:1]:
                        if candidate.grounding_metadata is not None:
                            metadata = candidate.grounding_metadata
                        if candidate.finish_reason is not None:
                            finish_reason = _enum_text(candidate.finish_reason)
                        parts = candidate.content.parts if candidate.content else None
                        for part in parts or []:
                            if part.text and not part.thought:
                                answer.append(part.text)
                                yield TextDelta(text=part.text)
            finally:
                # releases the HTTP response when the caller stops reading early
                close = getattr(response_stream, "aclose", None)
                if close is not None:
                    await close()
        except gemini_call_errors() as exc:
            raise upstream_error(exc, what="Gemini generation") from exc
        full = "".join(answer)
        if metadata is not None and (grounding := map_grounding(metadata, full)) is not None:
            yield grounding
        used = None
        if usage is not None:
            used = Usage(
                input_tokens=usage.prompt_token_count,
                output_tokens=usage.candidates_token_count,
                total_tokens=usage.total_token_count,
            )
        for event in closing_events(self.name, self.model, finish_reason, full, used):
            yield event


def closing_events(
    provider: str, model: str, finish_reason: str | None, answer: str, usage: Usage | None
) -> list[Usage | Final]:
    """A provider's last events: its token usage when it reported one, then ``Final`` with
    the source labels the answer cites."""
    final = Final(
        provider=provider,
        model=model,
        finish_reason=finish_reason,
        cited_sources=cited_labels(answer),
    )
    return [usage, final] if usage is not None else [final]


def _enum_text(value: object) -> str:
    return str(getattr(value, "value", value))


def retry_after_seconds(value: str | None) -> float | None:
    """An HTTP ``Retry-After`` in seconds (delta-seconds or an HTTP date), else ``None``."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def _http_error(
    status: int, body: str, *, what: str, retry_after: str | None = None
) -> LecternError:
    detail = f"{what}: HTTP {status} {body[:300]}"
    wait = retry_after_seconds(retry_after)
    if status == 429:
        return UpstreamError(detail, reason="rate_limited", retry_after_s=wait)
    if status >= 500:
        return UpstreamError(detail, reason="upstream_unavailable", retry_after_s=wait)
    if status in (401, 403):
        return ConfigurationError(detail, reason="upstream_auth")
    return BadInputError(detail, reason="upstream_rejected")


class OpenAICompatibleGenerator:
    """Streams from an OpenAI-compatible ``/chat/completions`` endpoint (no web search)."""

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str | None = None,
        temperature: float = 0.3,
        timeout_s: float = 60.0,
        name: str = "openai-compatible",
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        self.api_key = api_key
        self.temperature = temperature
        self.timeout_s = timeout_s
        self.name = name
        self.transport = transport

    async def stream(self, request: GenerationRequest) -> GenerationStream:
        """Stream the completion; ``web_search`` is ignored (no such tool here)."""
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [
                *([{"role": "system", "content": request.system}] if request.system else []),
                *({"role": m.role, "content": m.content} for m in request.messages),
            ],
            "stream": True,
            "stream_options": {"include_usage": True},
            "temperature": self.temperature,
        }
        headers = {"Accept": "text/event-stream"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        answer: list[str] = []
        usage: dict[str, Any] | None = None
        finish_reason: str | None = None
        what = f"{self.name} generation"
        try:
            async with (
                httpx.AsyncClient(timeout=self.timeout_s, transport=self.transport) as client,
                client.stream("POST", self.url, json=body, headers=headers) as response,
            ):
                if response.status_code != 200:
                    await response.aread()
                    raise _http_error(
                        response.status_code,
                        response.text,
                        what=what,
                        retry_after=response.headers.get("retry-after"),
                    )
                async for line in response.aiter_lines():
                    if not line.startswith("data:"):
                        continue
                    data = line[len("data:") :].strip()
                    if data == "[DONE]":
                        break
                    event = json.loads(data)
                    usage = event.get("usage") or usage
                    for choice in event.get("choices") or []:
                        finish_reason = choice.get("finish_reason") or finish_reason
                        text = (choice.get("delta") or {}).get("content")
                        if text:
                            answer.append(text)
                            yield TextDelta(text=text)
        except (httpx.TransportError, json.JSONDecodeError) as exc:
            raise UpstreamError(f"{what}: {exc!r}", reason="upstream_unreachable") from exc
        used = None
        if usage is not None:
            used = Usage(
                input_tokens=usage.get("prompt_tokens"),
                output_tokens=usage.get("completion_tokens"),
                total_tokens=usage.get("total_tokens"),
            )
        for event in closing_events(self.name, self.model, finish_reason, "".join(answer), used):
            yield event


class FallbackGenerator:
    """The primary provider, then each fallback in order, while nothing was streamed.

    Any failure before the first chunk moves on: rate limits, server errors, an unreachable
    host, and also a 400/401/403 (a revoked key, a bad model name), so a misconfigured model
    degrades to the next in line instead of failing every answer. A retryable failure of
    the primary is retried once after the wait it asked for (``Retry-After`` /
    ``RetryInfo``, at least ``retry_delay_s``); a wait longer than ``max_retry_wait_s``
    skips the retry. A failure after the first chunk was streamed is re-raised, since the
    caller already showed text. Every move to the next provider counts in
    ``lectern.llm.fallbacks``.
    """

    def __init__(
        self,
        primary: Generator,
        fallbacks: Sequence[Generator],
        *,
        retry_delay_s: float = 0.5,
        max_retry_wait_s: float = 5.0,
    ) -> None:
        self.primary = primary
        self.fallbacks = list(fallbacks)
        self.retry_delay_s = retry_delay_s
        self.max_retry_wait_s = max_retry_wait_s
        self.name = primary.name

    def _retry_wait(self, exc: Exception) -> float | None:
        """Seconds to wait before retrying the primary, or ``None``: do not retry."""
        if not isinstance(exc, RetryableError):
            return None
        hinted = exc.retry_after_s if isinstance(exc, UpstreamError) else None
        wait = max(self.retry_delay_s, hinted or 0.0)
        return wait if wait <= self.max_retry_wait_s else None

    async def stream(self, request: GenerationRequest) -> GenerationStream:
        """Stream from the first provider that starts answering."""
        queue: list[Generator] = [self.primary, *self.fallbacks]
        failed: list[str] = []
        last_error: Exception | None = None
        retried = False
        while queue:
            generator = queue.pop(0)
            emitted = False
            inner = generator.stream(request)
            try:
                async with aclosing(inner):
                    async for chunk in inner:
                        emitted = True
                        if isinstance(chunk, Final):
                            chunk = chunk.model_copy(update={"fallback_from": list(failed)})
                        yield chunk
                return
            except Exception as exc:
                if emitted:
                    raise
                reason = exc.reason if isinstance(exc, LecternError) else type(exc).__name__
                log.warning("%s failed before answering (%s): %s", generator.name, reason, exc)
                failed.append(generator.name)
                last_error = exc
                wait = self._retry_wait(exc) if generator is self.primary else None
                if wait is not None and not retried:
                    retried = True
                    queue.insert(0, generator)
                    await asyncio.sleep(wait)
                    continue
                if queue:
                    telemetry_metrics.LLM_FALLBACKS.add(
                        1, {"provider": generator.name, "reason": reason, "next": queue[0].name}
                    )
        assert last_error is not None  # the queue is never empty at the start
        raise last_error


def build_web_generator(settings: BaseServiceSettings) -> Generator | None:
    """The Gemini models alone (the providers that can search the web), or None without a
    key: for answers that must come from a web search or not at all."""
    chain = _gemini_chain(settings)
    if not chain:
        return None
    return FallbackGenerator(chain[0], chain[1:]) if len(chain) > 1 else chain[0]


def _gemini_chain(settings: BaseServiceSettings) -> list[Generator]:
    if settings.gemini_api_key is None:
        return []
    client = create_gemini_client(
        api_key=settings.gemini_api_key.get_secret_value(),
        base_url=settings.gemini_base_url,
        timeout_s=settings.llm_timeout_s,
    )
    chain: list[Generator] = [
        GeminiGenerator(
            client=client, model=settings.gemini_chat_model, temperature=settings.llm_temperature
        )
    ]
    secondary = settings.gemini_secondary_chat_model
    if secondary and secondary != settings.gemini_chat_model:
        chain.append(
            GeminiGenerator(
                client=client,
                model=secondary,
                temperature=settings.llm_temperature,
                name="gemini-secondary",
            )
        )
    return chain


def build_generator(
    settings: BaseServiceSettings,
    *,
    embedder: Embedder | None = None,
    reader: SentenceReader | None = None,
    read_at_most: int | None = READ_AT_MOST,
    read_first: int | None = READ_FIRST,
    from_spans: bool = False,
) -> Generator:
    """Gemini (when a key is set) and the fallback provider (when set), ending offline (whose
    reader reads at most ``read_at_most`` units of a turn's sources, ``read_first`` of them
    first, none when ``from_spans`` and the re-ranker marked answer spans)."""
    chain = _gemini_chain(settings)
    if settings.fallback_llm_base_url and settings.fallback_llm_model:
        key = settings.fallback_llm_api_key
        chain.append(
            OpenAICompatibleGenerator(
                base_url=settings.fallback_llm_base_url,
                model=settings.fallback_llm_model,
                api_key=key.get_secret_value() if key else None,
                temperature=settings.llm_temperature,
                timeout_s=settings.llm_timeout_s,
            )
        )
    offline = OfflineAnswerer(
        embedder=embedder, reader=reader, read_at_most=read_at_most, read_first=read_first,
        from_spans=from_spans,
    )  # fmt: skip
    if not chain:
        return offline
    return FallbackGenerator(chain[0], [*chain[1:], offline])
