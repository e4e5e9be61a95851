"""The gateway's view of a generator: text deltas, web grounding and a summary.

``lectern_common.llm`` owns the model clients; :func:`streamer_for` adapts a ``Generator``
into these small types, so the chat pipeline does not depend on provider details.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
from opentelemetry import trace

from lectern_common import llm
from lectern_gateway.chat.prompt import Prompt


@dataclass(frozen=True)
class TextDelta:
    """Text the model produced."""

    text: str


@dataclass(frozen=True)
class Verdict:
    """The answerer's decision before its text: ``no_support`` means it will say the sources
    do not answer (the band's opening is then not said)."""

    outcome: str


@dataclass(frozen=True)
class WebGrounding:
    """Web sources (label, uri, title) and the answer spans (character offsets) they support."""

    sources: list[tuple[str, str, str | None]]
    supports: list[tuple[int, int, str, list[str]]] = field(default_factory=list)


@dataclass(frozen=True)
class Finished:
    """The stream ended: who answered (gemini, fallback, offline) and the reported usage."""

    answered_by: str
    usage: dict[str, Any] = field(default_factory=dict)


_tracer = trace.get_tracer("lectern.llm")

Piece = TextDelta | Verdict | WebGrounding | Finished
AnswerStreamer = Callable[[Prompt], AsyncGenerator[Piece, None]]


def answered_by(final: llm.Final) -> str:
    """``gemini``, ``gemini-secondary`` or ``offline`` by provider name; any other provider
    is the OpenAI-compatible ``fallback``."""
    if final.provider in ("gemini", "gemini-secondary", "offline"):
        return final.provider
    return "fallback"


def streamer_for(generator: llm.Generator) -> AnswerStreamer:
    """An answer streamer over a ``lectern_common.llm`` generator (web search as the prompt
    says: the tenant's setting, for every kind of turn)."""

    async def stream(prompt: Prompt) -> AsyncGenerator[Piece, None]:
        messages = [llm.ChatMessage(role=t.role, content=t.text) for t in prompt.history]
        messages.append(llm.ChatMessage(role="user", content=prompt.user))
        sources = [
            llm.SourceText(
                label=s.label, text=s.text, title=s.title, score=s.score, section=s.section
            )
            for s in prompt.sources
        ]
        usage: dict[str, Any] = {}
        # the model call's span (not made current: this generator yields to its caller)
        span = _tracer.start_span(
            "llm.generate",
            kind=trace.SpanKind.CLIENT,
            attributes={
                "gen_ai.operation.name": "chat",
                "lectern.llm.chain": generator.name,
                "lectern.llm.sources": len(prompt.sources),
                "lectern.llm.web_search": prompt.web_search,
            },
        )
        chunks = generator.stream(
            system=prompt.system,
            messages=messages,
            sources=sources,
            web_search=prompt.web_search,
        )
        try:
            async for chunk in chunks:
                if isinstance(chunk, llm.TextDelta):
                    yield TextDelta(chunk.text)
                elif isinstance(chunk, llm.Verdict):
                    yield Verdict(chunk.outcome)
                elif isinstance(chunk, llm.Grounding):
                    yield WebGrounding(
                        sources=[(s.label, s.uri, s.title) for s in chunk.sources],
                        supports=[
                            (s.start, s.end, s.text, list(s.sources)) for s in chunk.supports
                        ],
                    )
                elif isinstance(chunk, llm.Usage):
                    usage.update(chunk.model_dump(exclude={"type"}, exclude_none=True))
                elif isinstance(chunk, llm.Final):
                    usage.update(
                        provider=chunk.provider,
                        model=chunk.model,
                        fallback_from=list(chunk.fallback_from),
                        outcome=chunk.outcome,
                    )
                    span.set_attributes(
                        {
                            "lectern.answered_by": answered_by(chunk),
                            "gen_ai.request.model": chunk.model or chunk.provider,
                            "lectern.llm.fallback_from": list(chunk.fallback_from),
                            "lectern.llm.outcome": chunk.outcome,
                        }
                    )
                    yield Finished(answered_by=answered_by(chunk), usage=usage)
        except Exception as exc:
            span.record_exception(exc)
            span.set_status(trace.Status(trace.StatusCode.ERROR, str(exc)[:300]))
            raise
        finally:
            span.end()
            # closing the provider's stream closes its HTTP response: the model call stops
            aclose = getattr(chunks, "aclose", None)
            if aclose is not None:
                with anyio.CancelScope(shield=True):
                    await aclose()

    return stream
