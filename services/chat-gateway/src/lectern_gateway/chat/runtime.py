"""Chat resources of a running gateway: the answer streamer, the running turns and the
idle-session sweep."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from lectern_common.llm import OfflineAnswerer, build_generator, build_web_generator
from lectern_common.service import ServiceState
from lectern_gateway.chat.generation import streamer_for
from lectern_gateway.chat.lifecycle import idle_sweeper
from lectern_gateway.chat.turn import ChatDeps
from lectern_gateway.chat.turns import TurnRegistry
from lectern_gateway.config import Settings

log = logging.getLogger(__name__)

STREAMER = "answer_streamer"
SWEEPER = "idle_sweeper"
EMBEDDER = "embedder"
READER = "reader"
TURNS = "chat_turns"
WEB_STREAMER = "web_answer_streamer"
QUIZ_WRITER = "quiz_writer"
CLOSURES = "gap_closures"


async def start_chat(state: ServiceState, settings: Settings) -> None:
    """Build the answer streamer and start the idle-session sweep.

    The offline answerer, which ends every chain of models, scores the sentences of the
    sources with the packaged reader and the local embedding model as well as by term
    overlap: both are loaded here (off the event loop), the embedder in float precision so
    that a question and the sentences it is compared with are encoded alike."""
    embedder = None
    if settings.offline_answerer_embeddings:
        from lectern_common.embeddings import LocalEmbedder

        embedder = await asyncio.to_thread(LocalEmbedder, settings, query_precision="float32")
    state.resources[EMBEDDER] = embedder  # also checks typed quiz answers (study)
    reader = None
    if settings.offline_answerer_reader:
        from lectern_common import reading

        if reading.available():
            reader = await asyncio.to_thread(reading.packaged)
        else:  # a checkout without the model file: the answerer's model fitted without it
            log.warning("no reader in %s: the offline answerer reads without it", reading.PACKAGED)
    state.resources[READER] = reader
    generator = build_generator(settings, embedder=embedder, reader=reader)
    state.resources[STREAMER] = streamer_for(generator)
    web = build_web_generator(settings)
    state.resources[WEB_STREAMER] = None if web is None else streamer_for(web)
    state.resources[TURNS] = TurnRegistry(
        pool=state.pool,
        flush_s=settings.turn_flush_s,
        resume_grace_s=settings.resume_grace_s,
        takeover_s=settings.turn_takeover_s,
        deps=lambda: chat_deps(state, settings),
        # the offline answerer gives the same text for the same inputs; a model may not
        exact_rerun=isinstance(generator, OfflineAnswerer),
    )
    if settings.idle_sweep_interval_s > 0:
        state.resources[SWEEPER] = asyncio.create_task(
            idle_sweeper(
                pool=state.pool,
                idle_s=settings.idle_timeout_s,
                every_s=settings.idle_sweep_interval_s,
                turn_retention_s=settings.turn_retention_s,
            ),
            name="lectern-idle-sweep",
        )


def chat_deps(state: ServiceState, settings: Settings) -> ChatDeps:
    """What a turn needs from this running gateway."""
    return ChatDeps(
        pool=state.pool,
        broker=state.broker,
        settings=settings,
        streamer=state.resources[STREAMER],
        web_streamer=state.resources.get(WEB_STREAMER),
        quiz_writer=state.resources.get(QUIZ_WRITER),
        embedder=state.resources.get(EMBEDDER),
    )


def start_gap_closures(state: ServiceState, settings: Settings) -> None:
    """Re-try closed gap topics once their material is indexed (``review.gaps``)."""
    from lectern_gateway.review.gaps import closure_sweeper

    if settings.gap_closure_interval_s > 0:
        state.resources[CLOSURES] = asyncio.create_task(
            closure_sweeper(chat_deps(state, settings), every_s=settings.gap_closure_interval_s),
            name="lectern-gap-closures",
        )


async def stop_chat(state: ServiceState) -> None:
    """Stop the idle-session sweep and the turns still running."""
    turns = state.resources.get(TURNS)
    if isinstance(turns, TurnRegistry):
        await turns.stop()
    for name in (SWEEPER, CLOSURES):
        task = state.resources.pop(name, None)
        if isinstance(task, asyncio.Task):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
