"""The gateway's view of a generator: text deltas, the answerer's verdict, web grounding and
a summary.

``generators`` holds the model clients; :func:`streamer_for` adapts a ``Generator``'s
stream for a turn. Text, verdict and web grounding are the stream's own types
(``lectern_common.generation``: one type per concept); only the end differs: the provider's
``Final`` becomes :class:`Finished`, which says who answered in the gateway's words and carries
the usage the stream reported along the way.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from typing import Any

import anyio
from opentelemetry import trace

from lectern_common.generation import (
    ChatMessage,
    Final,
    GenerationRequest,
    Grounding,
    SourceText,
    TextDelta,
    Usage,
    Verdict,
)
from lectern_gateway.chat.generators import Generator
from lectern_gateway.chat.prompt import Prompt


@dataclass(frozen=True)
class ModelUsage:
    """What the model's stream reported: its token counts (those the provider gave) and the
    provider, model, fallbacks and outcome of its ``Final``."""

    provider: str
    model: str | None
    fallback_from: tuple[str, ...]
    outcome: str
    input_tokens: int | None = None
    output_tokens: int | None = None
    total_tokens: int | None = None

    def as_json(self) -> dict[str, Any]:
        """As stored with the message and shown in ``done``: the counts given, then the rest."""
        counts = {
            "input_tokens": self.input_tokens, "output_tokens": self.output_tokens,
            "total_tokens": self.total_tokens,
        }  # fmt: skip
        return {
            **{k: v for k, v in counts.items() if v is not None},
            "provider": self.provider, "model": self.model,
            "fallback_from": list(self.fallback_from), "outcome": self.outcome,
        }  # fmt: skip


@dataclass(frozen=True)
class Finished:
    """The stream ended: who answered (gemini, fallback, offline) and the reported usage."""

    answered_by: str
    usage: ModelUsage | None = None


_tracer = trace.get_tracer("lectern.llm")

__all__ = [
    "AnswerStreamer",
    "Finished",
    "Grounding",
    "ModelUsage",
    "Piece",
    "TextDelta",
    "Verdict",
]

Piece = TextDelta | Verdict | Grounding | Finished
AnswerStreamer = Callable[[Prompt], AsyncGenerator[Piece, None]]


def answered_by(final: Final) -> str:
    """``gemini``, ``gemini-secondary`` or ``offline`` by provider name; any other provider
    is the OpenAI-compatible ``fallback``."""
    if final.provider in ("gemini", "gemini-secondary", "offline"):
        return final.provider
    return "fallback"


def streamer_for(generator: Generator) -> AnswerStreamer:
    """An answer streamer over a ``generators.Generator`` (web search as the prompt
    says: the tenant's setting, for every kind of turn)."""

    async def stream(prompt: Prompt) -> AsyncGenerator[Piece, None]:
        messages = [ChatMessage(role=t.role, content=t.text) for t in prompt.history]
        messages.append(ChatMessage(role="user", content=prompt.user))
        sources = [
            SourceText(
                label=s.label,
                text=s.text,
                title=s.title,
                score=s.score,
                section=s.section,
                answer=s.answer,
            )
            for s in prompt.sources
        ]
        counts: dict[str, int] = {}
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
            GenerationRequest(
                system=prompt.system,
                messages=messages,
                sources=sources,
                web_search=prompt.web_search,
            )
        )
        try:
            async for chunk in chunks:
                if isinstance(chunk, TextDelta | Verdict | Grounding):
                    yield chunk
                elif isinstance(chunk, Usage):
                    counts.update(chunk.model_dump(exclude={"type"}, exclude_none=True))
                elif isinstance(chunk, Final):
                    usage = ModelUsage(
                        provider=chunk.provider,
                        model=chunk.model,
                        fallback_from=tuple(chunk.fallback_from),
                        outcome=chunk.outcome,
                        input_tokens=counts.get("input_tokens"),
                        output_tokens=counts.get("output_tokens"),
                        total_tokens=counts.get("total_tokens"),
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
