"""The live embedding index: which model's vectors the database holds, and following a switch.

``embedding_models`` names the model whose vectors fill the live ``embedding`` columns
(chunks, student memories, curriculum standards). ``lectern reindex`` moves them to another
model and changes that row in the same transaction that swaps the columns.

A service that embeds text and then reads or writes those columns does so through a
``FollowingEmbedder``: it embeds with the model it last saw, and inside the transaction that
uses the vectors ``guard`` takes a shared advisory lock (which writes nothing) and checks that
the live index is still that model. When it is not,
``ModelSwitched`` says which one is, the embedder loads it, and the work is done again
(``with_live_model``). The switch takes that lock exclusively: it waits for every guarded
transaction in flight, and a guarded transaction that starts during the switch waits for it
to commit, so no query ever compares vectors of two models or of two dimensions.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from lectern_common.db.types import Connection, Pool
from lectern_common.embeddings import (
    LOCAL_MODEL_NAME,
    Embedder,
    GeminiEmbedder,
    LocalEmbedder,
    Vectors,
)
from lectern_common.errors import EmbeddingModelMismatch, RetryableError
from lectern_common.settings import BaseServiceSettings

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True)
class IndexModel:
    """A model as the index records it."""

    name: str
    dimension: int


class ModelSwitched(RetryableError):
    """The live index moved to another model since the caller embedded its text."""

    reason = "embedding_model_switched"

    def __init__(self, live: IndexModel, used: str) -> None:
        super().__init__(f"the index now holds {live.name!r} vectors, not {used!r}")
        self.live = live


async def live_model(conn: Connection) -> IndexModel | None:
    """The model of the live index (None before the first migration)."""
    row = await conn.fetchrow("SELECT name, dimension FROM embedding_models WHERE id = 1")
    return None if row is None else IndexModel(str(row["name"]), int(row["dimension"]))


#: the advisory lock guarded transactions take shared and a re-index's switch exclusively
#: (the constant in ``lectern_live_embedding_model()``, migration 0019)
SWITCH_LOCK_ID = 1955634718


async def guard(conn: Connection, used: str) -> None:
    """Inside a transaction, before touching any table: hold the live model until commit (a
    shared advisory lock); raise ``ModelSwitched`` unless it is ``used`` (the model that
    embedded what the transaction is about to use)."""
    row = await conn.fetchrow("SELECT name, dimension FROM lectern_live_embedding_model()")
    if row is not None and row["name"] != used:
        raise ModelSwitched(IndexModel(str(row["name"]), int(row["dimension"])), used)


def is_local_model(name: str) -> bool:
    """True for the packaged MiniLM or a sentence-transformers folder on disk."""
    return name == LOCAL_MODEL_NAME or Path(name).is_dir()


def load_embedder(settings: BaseServiceSettings, model: IndexModel) -> Embedder:
    """An embedder of ``model`` with these settings' credentials and tuning.

    The packaged MiniLM and sentence-transformers folders run locally; any other name is a
    Gemini embedding model (which needs ``LECTERN_GEMINI_API_KEY``). Raises
    ``EmbeddingModelMismatch`` when the loaded model's dimension is not ``model``'s.
    """
    embedder: Embedder
    if model.name == LOCAL_MODEL_NAME:
        embedder = LocalEmbedder(
            settings.model_copy(
                update={"local_embedding_model": None, "embedding_provider": "local"}
            )
        )
    elif Path(model.name).is_dir():
        embedder = LocalEmbedder(
            settings.model_copy(
                update={"local_embedding_model": model.name, "embedding_provider": "local"}
            )
        )
    else:
        embedder = GeminiEmbedder(settings, model=model.name, dimension=model.dimension)
    if embedder.dimension != model.dimension:
        raise EmbeddingModelMismatch(
            f"{model.name!r} gives {embedder.dimension}-dimensional vectors, not {model.dimension}"
        )
    return embedder


class FollowingEmbedder:
    """An ``Embedder`` that follows the live index's model from one switch to the next.

    ``current`` is the model it embeds with now; ``follow`` loads another (once, in a worker
    thread) and keeps the loaded ones, so a switch back costs nothing.
    """

    def __init__(self, settings: BaseServiceSettings, initial: Embedder) -> None:
        self._settings = settings
        self.current: Embedder = initial
        self._loaded: dict[tuple[str, int], Embedder] = {(initial.name, initial.dimension): initial}
        self._lock = asyncio.Lock()

    @property
    def name(self) -> str:
        """The current model's name."""
        return self.current.name

    @property
    def dimension(self) -> int:
        """The current model's dimension."""
        return self.current.dimension

    @property
    def max_input_tokens(self) -> int:
        """The current model's input limit."""
        return self.current.max_input_tokens

    def count_tokens(self, text: str) -> int:
        """Tokens with the current model's tokenizer."""
        return self.current.count_tokens(text)

    async def embed_documents(self, texts: Sequence[str]) -> Vectors:
        """Passage vectors of the current model."""
        return await self.current.embed_documents(texts)

    async def embed_queries(self, texts: Sequence[str]) -> Vectors:
        """Query vectors of the current model."""
        return await self.current.embed_queries(texts)

    async def embed_query(self, text: str) -> Vectors:
        """One query vector of the current model."""
        return await self.current.embed_query(text)

    async def follow(self, model: IndexModel) -> Embedder:
        """Make ``model`` current (loading it if needed) and return it."""
        async with self._lock:
            key = (model.name, model.dimension)
            if (self.current.name, self.current.dimension) == key:
                return self.current
            loaded = self._loaded.get(key)
            if loaded is None:
                log.warning("the index moved to %s; loading it", model.name)
                loaded = await asyncio.to_thread(load_embedder, self._settings, model)
                self._loaded[key] = loaded
            self.current = loaded
            log.info("embedding with %s (%d dimensions), the live index's model", *key)
            return loaded

    async def sync(self, pool: Pool) -> None:
        """At start-up: follow the live index's model when the configured one is another.

        The configured model is what a fresh database is built with; once the database holds
        another's vectors, serving with the configured one would compare unrelated vectors.
        """
        async with pool.acquire() as conn:
            model = await live_model(conn)
        if model is None or (model.name, model.dimension) == (self.name, self.dimension):
            return
        log.warning(
            "configured embedding model %s, but the index holds %s vectors: serving with %s; "
            "run `lectern reindex --model %s` to move the index to the configured model",
            self.name, model.name, model.name, self.name,
        )  # fmt: skip
        await self.follow(model)


async def with_live_model(
    embedder: FollowingEmbedder,
    attempt: Callable[[Embedder], Awaitable[T]],
    *,
    tries: int = 3,
) -> T:
    """Run ``attempt`` with the current model, again with the live one after a switch.

    ``attempt`` embeds with the embedder it is given and ``guard``s with its name in the
    transaction that uses the vectors."""
    for remaining in range(tries - 1, -1, -1):
        used = embedder.current
        try:
            return await attempt(used)
        except ModelSwitched as switched:
            if remaining == 0:
                raise
            await embedder.follow(switched.live)
    raise AssertionError("unreachable")
