"""The gateway's start and stop: the models and streamers its answers need and the running
turns, kept in one ``GatewayDeps`` on the service state, and the background loops (idle
sessions, gap closures, retention, webhook deliveries) that only the worker process runs
(``lectern_gateway.worker``): an HTTP replica serves HTTP."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any, Generic, Literal, TypeVar

import numpy as np
from faststream.nats import NatsBroker
from numpy.typing import NDArray
from opentelemetry import trace

from lectern_answerer import OfflineAnswerer, SentenceReader
from lectern_common import reading
from lectern_common.broker import create_broker
from lectern_common.embeddings import LOCAL_MODEL_NAME, Embedder, LocalEmbedder, Vectors
from lectern_common.gc import collect_every
from lectern_common.service import ServiceState
from lectern_gateway.chat.generators import build_generator, build_web_generator
from lectern_gateway.chat.lifecycle import idle_sweeper
from lectern_gateway.chat.streamer import streamer_for
from lectern_gateway.config import Settings
from lectern_gateway.deps import GatewayDeps
from lectern_gateway.lti.scores import ScoreWorker
from lectern_gateway.privacy.retention import retention_sweeper
from lectern_gateway.review.gap_retry import closure_sweeper
from lectern_gateway.study.model_writer import build_quiz_writer
from lectern_gateway.webhooks.dispatcher import DeliveryWorker

log = logging.getLogger(__name__)


def broker_for(
    settings: Settings, *, tracer_provider: trace.TracerProvider | None = None
) -> NatsBroker:
    """The process's NATS broker (HTTP replica or worker): traced, with its NATS user."""
    return create_broker(
        settings.nats_url,
        service_name=settings.service_name,
        tracer_provider=tracer_provider,
        credentials=settings.nats_credentials,
    )


async def start(state: ServiceState, settings: Settings, *, lazy: bool = False) -> GatewayDeps:
    """Build the gateway's dependencies onto ``state`` (the HTTP app's and the worker's).

    The offline answerer, which ends every chain of models, scores the sentences of the
    sources with the packaged reader and the local embedding model as well as by term
    overlap: both are loaded here (off the event loop), the embedder in float precision so
    that a question and the sentences it is compared with are encoded alike. ``lazy`` (the
    worker): each is loaded on its first use instead, as only a gap closure's answer needs
    them, and most worker starts never answer one (~0.5 s of CPU a start saved: the float
    embedder 0.35 s, the reader 0.1 s, measured 2026-11-29)."""
    embedder: Embedder | None
    if lazy and settings.offline_answerer_embeddings:
        embedder = LazyEmbedder(settings)
    else:
        embedder = await _embedder(settings)
    reader = await _reader(settings, lazy=lazy)
    generator = build_generator(
        settings, embedder=embedder, reader=reader,
        read_at_most=settings.offline_answerer_read_at_most or None,
        read_first=settings.offline_answerer_read_first or None,
        from_spans=settings.offline_answerer_from_spans,
    )  # fmt: skip
    web = build_web_generator(settings)
    gateway = GatewayDeps(
        settings=settings,
        pool=state.db(),
        broker=state.broker,
        streamer=streamer_for(generator),
        web_streamer=None if web is None else streamer_for(web),
        embedder=embedder,
        reader=reader,
        quiz_writer=build_quiz_writer(settings),
        # the offline answerer gives the same text for the same inputs; a model may not
        exact_rerun=isinstance(generator, OfflineAnswerer),
    )
    state.deps = gateway
    return gateway


def start_loops(state: ServiceState, gateway: GatewayDeps) -> None:
    """Start the worker's sweeps on ``state`` (cancelled when it stops); the webhook
    deliveries are ``gateway.webhook_worker``, which the worker drains at shutdown."""
    settings = gateway.settings
    if settings.idle_sweep_interval_s > 0:
        state.spawn(
            "lectern-idle-sweep",
            idle_sweeper(
                pool=state.db(),
                idle_s=settings.idle_timeout_s,
                every_s=settings.idle_sweep_interval_s,
                turn_retention_s=settings.turn_retention_s,
            ),
        )
    if settings.gap_closure_interval_s > 0:  # closed gap topics asked again once indexed
        state.spawn(
            "lectern-gap-closures",
            closure_sweeper(gateway.chat(), every_s=settings.gap_closure_interval_s),
        )
    if settings.retention_sweep_interval_s > 0:
        state.spawn(
            "lectern-retention-sweep",
            retention_sweeper(pool=state.db(), every_s=settings.retention_sweep_interval_s),
        )
    if settings.gc_interval_s > 0:  # stored files no document needs (the gateway stores them)
        state.spawn(
            "lectern-gc",
            collect_every(
                state.db(), gateway.broker.config.connection_state.stream,
                every_s=settings.gc_interval_s, grace_s=settings.gc_grace_s,
                objects=True, chunks=False,
            ),
        )  # fmt: skip
    if settings.webhook_dispatch:
        gateway.webhook_worker = DeliveryWorker(pool=state.db(), settings=settings)
        gateway.webhook_worker.start()
    gateway.score_worker = ScoreWorker(pool=state.db(), settings=settings, platforms=gateway.lti)
    gateway.score_worker.start()


async def stop(state: ServiceState) -> None:
    """Finish the webhook deliveries in flight (the worker), then stop the turns still
    running (the sweeps stop with the service state)."""
    gateway = state.deps
    if not isinstance(gateway, GatewayDeps):  # None when start-up failed before it
        return
    if gateway.webhook_worker is not None:
        # an attempt ends within its timeout; a moment more to record it
        grace_s = gateway.settings.webhook_timeout_s + 5.0
        await gateway.webhook_worker.stop(grace_s=grace_s)
    if gateway.score_worker is not None:
        await gateway.score_worker.stop(grace_s=gateway.settings.lti_http_timeout_s + 5.0)
    await gateway.lti.close()
    await gateway.turns.stop()


async def _embedder(settings: Settings) -> LocalEmbedder | None:
    if not settings.offline_answerer_embeddings:
        return None
    return await asyncio.to_thread(LocalEmbedder, settings, query_precision="float32")


async def _reader(settings: Settings, *, lazy: bool = False) -> SentenceReader | None:
    if not settings.offline_answerer_reader:
        return None
    name = settings.offline_answerer_reader_model
    folder = reading.folder_of(name)
    if not reading.available(folder):  # a checkout without the model: fitted without it
        log.warning("no reader in %s: the offline answerer reads without it", folder)
        return None
    if lazy:
        return LazyReader(name)
    return await asyncio.to_thread(reading.named, name)


M = TypeVar("M")


class _Lazy(Generic[M]):
    """A model loaded on its first use, once: in a worker thread when awaited."""

    def __init__(self, load: Callable[[], M]) -> None:
        self._load = load
        self._model: M | None = None
        self._lock = threading.Lock()

    def now(self) -> M:
        """The model, loaded here (blocking) if it is not yet."""
        with self._lock:
            if self._model is None:
                self._model = self._load()
            return self._model

    async def model(self) -> M:
        """The model, loaded off the event loop if it is not yet."""
        return self._model if self._model is not None else await asyncio.to_thread(self.now)


class LazyEmbedder:
    """The local embedding model as ``_embedder`` loads it, on its first use."""

    def __init__(self, settings: Settings) -> None:
        self.name: str = settings.local_embedding_model or LOCAL_MODEL_NAME
        self._lazy = _Lazy(lambda: LocalEmbedder(settings, query_precision="float32"))

    # the loaded model's (``__getattr__``)
    dimension: int
    max_input_tokens: int

    def __getattr__(self, attribute: str) -> Any:
        if attribute.startswith("_"):
            raise AttributeError(attribute)
        return getattr(self._lazy.now(), attribute)

    def count_tokens(self, text: str) -> int:
        return self._lazy.now().count_tokens(text)

    async def embed_documents(self, texts: Sequence[str]) -> Vectors:
        return await (await self._lazy.model()).embed_documents(texts)

    async def embed_queries(self, texts: Sequence[str]) -> Vectors:
        return await (await self._lazy.model()).embed_queries(texts)

    async def embed_query(self, text: str) -> Vectors:
        return await (await self._lazy.model()).embed_query(text)


class LazyReader:
    """The reader ``_reader`` loads (``name``: a setting's value), on its first use; with a
    span head (its card says) it reads spans as the loaded reader does."""

    def __init__(self, name: str = reading.PACKAGED_NAME) -> None:
        self._lazy = _Lazy(lambda: reading.named(name))
        #: whether the named reader has a span head (``SpanReader``)
        self.spans = reading.has_span_head(reading.folder_of(name))

    async def score_logits(
        self,
        question: str,
        texts: Sequence[str],
        *,
        kind: Literal["sentence", "passage"] = "sentence",
    ) -> NDArray[np.float32]:
        reader = await self._lazy.model()
        return await reader.score_logits(question, texts, kind=kind)

    async def score_readings(
        self,
        question: str,
        texts: Sequence[str],
        *,
        kind: Literal["sentence", "passage"] = "sentence",
    ) -> list[reading.Reading]:
        reader = await self._lazy.model()
        return await reader.score_readings(question, texts, kind=kind)
