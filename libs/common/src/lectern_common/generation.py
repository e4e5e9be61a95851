"""What a generator streams: the conversation it is given and the typed chunks it yields.

Shared by the offline answerer and the gateway's model providers
(``lectern_gateway.chat.generators``), which both build on it without importing each other.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import BaseModel, Field

from lectern_common.events.retrieval import AnswerSpan


class ChatMessage(BaseModel):
    """One turn of the conversation sent to the model."""

    role: Literal["user", "assistant"]
    content: str


class SourceText(BaseModel):
    """A source the answer may cite, labelled as in the prompt (``T1`` ..)."""

    label: str
    text: str
    title: str | None = None
    score: float | None = None  # the re-ranker's, when the source came through it
    section: str | None = None  # its section path ("Diagnosis > Karyotype")
    #: where the re-ranker's reader found the answer in ``text``, when it read the source
    answer: AnswerSpan | None = None


@dataclass(frozen=True)
class GenerationRequest:
    """What every generator is asked, as one object (a field added here reaches every
    provider, and a fallback chain passes it on unchanged): the system prompt and the
    conversation, sent as given; ``sources``, the same material as the prompt's [T#] labels,
    as data for providers that work on it directly; and whether the answer may come from a
    web search (providers without one ignore it)."""

    system: str
    messages: Sequence[ChatMessage]
    sources: Sequence[SourceText]
    web_search: bool = False


class TextDelta(BaseModel):
    """The next piece of the answer text."""

    type: Literal["text"] = "text"
    text: str


class Verdict(BaseModel):
    """What the answerer decided before its first word (the offline answerer knows whether
    its sources answer before it writes): the gateway opens the answer in one voice, never
    a band's "here is what I can tell you" before "the material does not answer this"."""

    type: Literal["verdict"] = "verdict"
    outcome: Literal["answered", "no_support"]


class WebSource(BaseModel):
    """A web page found by the model's search tool, cited as ``[W#]``."""

    label: str
    uri: str
    title: str | None = None


class GroundingSupport(BaseModel):
    """A span of the answer and the web sources supporting it (character offsets)."""

    start: int
    end: int
    text: str
    sources: list[str]


class Grounding(BaseModel):
    """Web search grounding of the whole answer (sent after the text)."""

    type: Literal["grounding"] = "grounding"
    sources: list[WebSource]
    supports: list[GroundingSupport]
    queries: list[str] = Field(default_factory=list)


class Usage(BaseModel):
    """Token accounting reported by the provider."""

    type: Literal["usage"] = "usage"
    input_tokens: int | None = None
    output_tokens: int | None = None
    total_tokens: int | None = None


class Final(BaseModel):
    """The end of a stream: who answered, why it stopped, what it cited."""

    type: Literal["final"] = "final"
    provider: str
    model: str | None = None
    finish_reason: str | None = None
    #: ``no_support``: the offline answerer found nothing in the sources that answers
    outcome: Literal["answered", "no_support"] = "answered"
    cited_sources: list[str] = Field(default_factory=list)
    #: providers that failed before this one answered, in order (a retry appears twice)
    fallback_from: list[str] = Field(default_factory=list)


GenerationChunk = Annotated[
    TextDelta | Verdict | Grounding | Usage | Final, Field(discriminator="type")
]
#: an async generator, so callers can ``aclose()`` it (e.g. when the client disconnects)
GenerationStream = AsyncGenerator[GenerationChunk, None]
