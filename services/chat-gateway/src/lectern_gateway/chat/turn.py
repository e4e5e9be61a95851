"""What a turn is given and shares: the gateway's dependencies, the question, the
chosen sources; and the small helpers every step uses."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import asyncpg
from faststream.nats import NatsBroker

from lectern_common.broker import publish_event
from lectern_common.education import BandThresholds
from lectern_common.embeddings import LocalEmbedder
from lectern_common.events import Confidence
from lectern_common.events.base import Event
from lectern_gateway.auth import Principal
from lectern_gateway.chat.decision import no_material
from lectern_gateway.chat.generation import AnswerStreamer
from lectern_gateway.chat.sse import Source
from lectern_gateway.config import Settings
from lectern_gateway.study.model_writer import GeminiQuizWriter


@dataclass
class ChatDeps:
    """What a turn needs from the running gateway."""

    pool: asyncpg.Pool
    broker: NatsBroker
    settings: Settings
    streamer: AnswerStreamer
    #: the models that can search the web (Gemini), when configured
    web_streamer: AnswerStreamer | None = None
    #: judges typed replies to check questions (Gemini), when configured
    quiz_writer: GeminiQuizWriter | None = None
    #: the local embedding model (cosine of a reply and its answer), when loaded
    embedder: LocalEmbedder | None = None


@dataclass
class TurnInput:
    """One question in one session."""

    principal: Principal
    session: dict[str, Any]
    text: str
    delay_s: float = 0.0
    #: the question's message id (also the turn's id); a new one when not given
    message_id: uuid.UUID | None = None
    #: the tenant lets the model search the web (tenant setting, else the gateway default)
    web_search: bool = False
    #: the session's tutor persona (the version it started with), if any
    persona: dict[str, Any] | None = None
    #: the persona's confidence band cut-offs (None: the deployment's)
    thresholds: BandThresholds | None = None
    #: the run answering the turn (its ``chat_turns.owner``): the answer is stored only
    #: while it still owns the turn (None: a turn without a row, e.g. a gap re-try)
    owner: uuid.UUID | None = None
    #: answered again by a replica that took the turn over: the question is stored already
    resumed: bool = False

    def bands(self, settings: Settings) -> BandThresholds:
        """The band cut-offs of this turn: the persona's, else the deployment's."""
        return self.thresholds or settings.band_thresholds()


class TurnTakenOver(Exception):
    """Raised where a run would store its answer after another replica took its turn over
    (this replica was thought dead); the run stops without storing anything."""


@dataclass
class Retrieved:
    """Sources chosen for a turn and the confidence prior."""

    sources: list[Source] = field(default_factory=list)
    texts: dict[str, str] = field(default_factory=dict)
    topic_tags: list[str] = field(default_factory=list)
    confidence: Confidence = field(default_factory=no_material)


async def publish(broker: NatsBroker, event: Event) -> None:
    """Publish an event on its JetStream stream."""
    await publish_event(broker, event)


def elapsed_ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 2)
