"""The running gateway's dependencies, typed (``GatewayDeps``), and FastAPI's ways to them.

``app.py`` builds one ``GatewayDeps`` at start-up (``runtime.start``) and keeps it on the
service state; a route asks for it, or for one of its parts, with an ``Annotated`` alias.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated

from fastapi import Depends, Request
from faststream.nats import NatsBroker

from lectern_answerer import SentenceReader
from lectern_common.db.types import Pool
from lectern_common.embeddings import Embedder
from lectern_common.index import FollowingEmbedder
from lectern_common.service import ServiceState
from lectern_gateway.chat.admission import Admission
from lectern_gateway.chat.running_turns import TurnRegistry
from lectern_gateway.chat.streamer import AnswerStreamer
from lectern_gateway.chat.turn_input import ChatDeps
from lectern_gateway.config import Settings
from lectern_gateway.documents.fetch import check_host
from lectern_gateway.lti.platform import PlatformClient
from lectern_gateway.lti.scores import ScoreWorker
from lectern_gateway.study.model_writer import GeminiQuizWriter
from lectern_gateway.webhooks.dispatcher import DeliveryWorker


@dataclass
class GatewayDeps:
    """What the running gateway built at start-up, in one typed place: the pool and broker,
    the answer streamers and the models behind them, the running turns and the workers."""

    settings: Settings
    pool: Pool
    broker: NatsBroker
    streamer: AnswerStreamer
    #: the models that can search the web (Gemini), when configured
    web_streamer: AnswerStreamer | None = None
    #: the local embedding model (offline answerer, typed quiz answers), when loaded
    embedder: Embedder | None = None
    #: the packaged reader the offline answerer reads sentences with, when loaded
    reader: SentenceReader | None = None
    #: writes and judges quiz questions (Gemini), when configured
    quiz_writer: GeminiQuizWriter | None = None
    #: the answerer gives the same text for the same inputs (offline): a turn taken over
    #: continues its stream exactly
    exact_rerun: bool = False
    #: the index's embedding model for curriculum tagging, made on first use
    index_embedder: FollowingEmbedder | None = None
    #: the worker process's webhook delivery worker, when dispatch is on (None in an HTTP
    #: replica: ``lectern_gateway.worker`` runs the background work)
    webhook_worker: DeliveryWorker | None = None
    #: the worker process's LTI score poster (None in an HTTP replica)
    score_worker: ScoreWorker | None = None
    turns: TurnRegistry = field(init=False)
    #: LTI platforms over HTTP: their keys and our access tokens, cached per process
    lti: PlatformClient = field(init=False)

    def __post_init__(self) -> None:
        self.turns = TurnRegistry(
            pool=self.pool,
            flush_s=self.settings.turn_flush_s,
            resume_grace_s=self.settings.resume_grace_s,
            takeover_s=self.settings.turn_takeover_s,
            deps=self.chat,
            exact_rerun=self.exact_rerun,
            admission=Admission(
                target_s=self.settings.admit_first_token_s,
                patience_s=self.settings.admit_patience_s,
                initial=self.settings.admit_initial_turns,
                floor=self.settings.admit_min_turns,
            ),
        )
        networks = self.settings.url_fetch_allowed_networks
        self.lti = PlatformClient(
            settings=self.settings, check_url=lambda url: check_host(url, networks)
        )

    def chat(self) -> ChatDeps:
        """What a turn needs (read when the turn starts: a test may swap the streamer)."""
        return ChatDeps(
            pool=self.pool,
            broker=self.broker,
            settings=self.settings,
            streamer=self.streamer,
            web_streamer=self.web_streamer,
            quiz_writer=self.quiz_writer,
            embedder=self.embedder,
            reader=self.reader,
        )

    def wake_webhooks(self) -> None:
        """New deliveries are due: the worker sends them now rather than at its next poll (in
        an HTTP replica, which has none, the worker finds them at its next poll)."""
        if self.webhook_worker is not None:
            self.webhook_worker.wake.set()


def gateway_of(state: ServiceState) -> GatewayDeps:
    """The gateway's dependencies on its service state (set at start-up)."""
    deps = state.deps
    if not isinstance(deps, GatewayDeps):
        raise RuntimeError("the gateway has not started")
    return deps


def get_state(request: Request) -> ServiceState:
    """The running service's state."""
    state: ServiceState = request.app.state.lectern
    return state


def get_gateway(request: Request) -> GatewayDeps:
    """The running gateway's typed dependencies."""
    return gateway_of(get_state(request))


def get_pool(request: Request) -> Pool:
    """The primary's asyncpg pool."""
    return get_state(request).db()


def get_broker(request: Request) -> NatsBroker:
    """The connected NATS broker."""
    return get_state(request).broker


def get_settings(request: Request) -> Settings:
    """The gateway's settings."""
    settings = get_state(request).settings
    assert isinstance(settings, Settings)
    return settings


StateDep = Annotated[ServiceState, Depends(get_state)]
GatewayDep = Annotated[GatewayDeps, Depends(get_gateway)]
PoolDep = Annotated[Pool, Depends(get_pool)]
BrokerDep = Annotated[NatsBroker, Depends(get_broker)]
SettingsDep = Annotated[Settings, Depends(get_settings)]
