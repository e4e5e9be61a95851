"""The retriever's request handler: owns the embedder, its pool and the optional LLM client."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from lectern_common.db import ReadPools, create_pool
from lectern_common.db.types import Pool
from lectern_common.embeddings import Embedder, build_embedder, create_gemini_client
from lectern_common.events import (
    IndexChunksReply,
    IndexChunksRequest,
    IndexCountReply,
    IndexCountRequest,
    IndexMaterialReply,
    IndexMaterialRequest,
    IndexOutlineReply,
    IndexOutlineRequest,
    IndexTopicsReply,
    IndexTopicsRequest,
    IndexVectorsReply,
    IndexVectorsRequest,
    RetrieveReply,
    RetrieveRequest,
)
from lectern_common.index import FollowingEmbedder, with_live_model
from lectern_common.service import ServiceState
from lectern_retriever import index_reads, repository, tenant_indexes
from lectern_retriever.config import Settings
from lectern_retriever.rewrite import Rewritten, llm_rewrite
from lectern_retriever.service import QueryBatcher, SearchDefaults, hybrid_search

log = logging.getLogger(__name__)

R = TypeVar("R")


#: how long a tenant's document languages are cached
TS_CONFIG_TTL_S = 30.0


class Retriever:
    """Answers ``RetrieveRequest``s; ``start`` loads the model and opens the pool."""

    def __init__(self, *, settings: Settings, embedder: Embedder | None = None) -> None:
        self.settings = settings
        self.embedder: FollowingEmbedder | None = (
            None if embedder is None else FollowingEmbedder(settings, embedder)
        )
        self.batcher: QueryBatcher | None = None
        self.pool: Pool | None = None
        #: searches go to the read replica when one is configured and healthy
        self.reads: ReadPools | None = None
        self.llm_client: Any = None
        self._indexer: asyncio.Task[None] | None = None
        #: (expiry, tenants with indexes of their own)
        self._own_indexes: tuple[float, frozenset[str]] = (0.0, frozenset())
        #: tenant -> (expiry, the text search configurations of its documents)
        self._ts_configs: dict[str, tuple[float, list[str]]] = {}
        self.defaults = SearchDefaults(
            dense_weight=settings.dense_weight,
            sparse_weight=settings.sparse_weight,
            rrf_k=settings.rrf_k,
            exact_search_below=settings.exact_search_below,
            tag_boost=settings.tag_boost,
            cited_boost=settings.cited_boost,
            maxscore_postings=settings.maxscore_postings,
            pair_terms_max=settings.pair_terms_max,
            pass_two_clauses_max=settings.pass_two_clauses_max,
            ef_search_large=settings.ef_search_large,
            ef_search_large_above=settings.ef_search_large_above,
        )

    async def start(self, state: ServiceState | None = None) -> None:
        """Load the embedder (once per process) and open a pool with the HNSW settings."""
        if self.embedder is None:
            built = await asyncio.to_thread(build_embedder, self.settings)
            self.embedder = FollowingEmbedder(self.settings, built)
        # session defaults for every connection; a request's ef_search uses SET LOCAL
        server_settings = {
            "hnsw.ef_search": str(self.settings.ef_search),
            "hnsw.iterative_scan": "relaxed_order",
        }
        self.pool = await create_pool(
            self.settings.database_url,
            min_size=2,
            max_size=self.settings.pool_size,
            timeout=self.settings.db_connect_timeout_s,
            command_timeout=self.settings.db_command_timeout_s,
            server_settings=server_settings,
        )
        self.reads = await ReadPools.open(
            primary=self.pool, settings=self.settings, server_settings=server_settings
        )
        await self.embedder.sync(self.pool)
        self.batcher = QueryBatcher(self.embedder.current)
        if self.settings.gemini_enabled and self.settings.llm_rewrite:
            key = self.settings.gemini_api_key
            assert key is not None  # gemini_enabled implies a key
            self.llm_client = create_gemini_client(
                api_key=key.get_secret_value(),
                base_url=self.settings.gemini_base_url,
                timeout_s=self.settings.llm_rewrite_timeout_s,
            )
        if self.settings.tenant_index_interval_s > 0:
            self._indexer = asyncio.create_task(self._index_loop())
        if state is not None:
            state.deps = self

    def db(self) -> Pool:
        """The pool (the retriever has started)."""
        if self.pool is None:
            raise RuntimeError("the retriever has not started")
        return self.pool

    async def index_tenants(self) -> dict[str, float]:
        """Build the indexes of tenants that grew past the threshold and drop those that
        shrank (``tenant_indexes``); returns each built tenant's seconds."""
        done = await tenant_indexes.maintain(
            self.settings.database_url,
            min_chunks=self.settings.tenant_index_min_chunks,
            max_share=self.settings.tenant_index_max_share,
            max_tenants=self.settings.tenant_index_max_tenants,
            memory=self.settings.tenant_index_memory,
            connect_timeout_s=self.settings.db_connect_timeout_s,
        )
        self._own_indexes = (0.0, frozenset())
        return done

    async def _index_loop(self) -> None:
        while True:
            await asyncio.sleep(self.settings.tenant_index_interval_s)
            try:
                await self.index_tenants()
            except Exception:
                log.exception("tenant index maintenance failed; retrying next interval")

    async def own_indexes(self) -> frozenset[str]:
        """Tenants with indexes of their own, looked up at most every ``TS_CONFIG_TTL_S``."""
        expiry, tenants = self._own_indexes
        now = time.monotonic()
        if expiry > now:
            return tenants
        async with self.db().acquire() as conn:
            tenants = frozenset(await tenant_indexes.ready(conn))
        self._own_indexes = (now + TS_CONFIG_TTL_S, tenants)
        return tenants

    async def close(self) -> None:
        """Stop the index maintenance and close the pool."""
        if self._indexer is not None:
            self._indexer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._indexer
            self._indexer = None
        if self.reads is not None:
            await self.reads.close()
            self.reads = None
        if self.pool is not None:
            await self.pool.close()
            self.pool = None

    async def readiness(self) -> str | None:
        """None when ready, else what is missing."""
        if self.embedder is None or self.batcher is None:
            return "embedder not loaded"
        if self.pool is None:
            return "database pool not open"
        return None

    def _batcher(self, embedder: Embedder) -> QueryBatcher:
        """The batcher of this model (a new one after the index moved to another)."""
        if self.batcher is None or self.batcher.embedder is not embedder:
            self.batcher = QueryBatcher(embedder)
        return self.batcher

    async def _llm_rewrite(self, request: RetrieveRequest, plan: Rewritten) -> Rewritten:
        try:
            return await asyncio.wait_for(
                llm_rewrite(
                    self.llm_client,
                    model=self.settings.gemini_chat_model,
                    query=request.query,
                    history=request.history,
                    fallback=plan,
                ),
                timeout=self.settings.llm_rewrite_timeout_s,
            )
        except TimeoutError:
            log.warning("LLM query rewrite timed out; using the rule-based rewrite")
            return plan

    async def retrieve(self, request: RetrieveRequest) -> RetrieveReply:
        """Ranked candidates for one request."""
        if self.pool is None or self.reads is None:
            await self.start()
        configs = [] if request.filters.language else await self._tenant_configs(request.tenant_id)
        own_indexes = request.tenant_id in await self.own_indexes()
        assert self.embedder is not None
        assert self.reads is not None
        reads = self.reads

        async def attempt(embedder: Embedder) -> RetrieveReply:
            async def search(pool: Pool) -> RetrieveReply:
                reply, idf = await asyncio.gather(
                    hybrid_search(
                        pool=pool,
                        embed=self._batcher(embedder).embed,
                        request=request,
                        defaults=self.defaults,
                        llm_rewriter=self._llm_rewrite if self.llm_client is not None else None,
                        ts_configs=configs,
                        model=embedder.name,
                        own_indexes=own_indexes,
                    ),
                    index_reads.word_idf(
                        pool, tenant_id=request.tenant_id, words=request.idf_words
                    ),
                )
                reply.idf = idf
                return reply

            return await reads.run(search)

        return await with_live_model(self.embedder, attempt)

    async def _from_reads(self, read: Callable[[Pool], Awaitable[R]]) -> R:
        """``read`` on the read pools (the replica when one is configured and healthy)."""
        if self.reads is None:
            await self.start()
        assert self.reads is not None
        return await self.reads.run(read)

    async def chunks(self, request: IndexChunksRequest) -> IndexChunksReply:
        """Chunks by id, with the caller's visibility when it gives one."""
        return await self._from_reads(lambda pool: index_reads.answer_chunks(pool, request))

    async def count(self, request: IndexCountRequest) -> IndexCountReply:
        """How many searchable chunks a persona's scope matches."""
        return await self._from_reads(lambda pool: index_reads.answer_count(pool, request))

    async def material(self, request: IndexMaterialRequest) -> IndexMaterialReply:
        """A page of a quiz's, a drill's or a syllabus's material."""
        return await self._from_reads(lambda pool: index_reads.answer_material(pool, request))

    async def topics(self, request: IndexTopicsRequest) -> IndexTopicsReply:
        """The tenant's common topic tags."""
        return await self._from_reads(lambda pool: index_reads.answer_topics(pool, request))

    async def vectors(self, request: IndexVectorsRequest) -> IndexVectorsReply:
        """Chunks' stored embeddings when the index holds the asker's model."""
        return await self._from_reads(lambda pool: index_reads.answer_vectors(pool, request))

    async def outline(self, request: IndexOutlineRequest) -> IndexOutlineReply:
        """A document's outline in vectors, from the primary: one transaction, so a re-index
        cannot switch the vectors between its statements."""
        return await index_reads.answer_outline(self.db(), request)

    async def _tenant_configs(self, tenant_id: str) -> list[str]:
        """The tenant's documents' text search configurations, looked up at most every
        ``TS_CONFIG_TTL_S`` (a new language shows up in BM25 within that)."""
        now = time.monotonic()
        cached = self._ts_configs.get(tenant_id)
        if cached is not None and cached[0] > now:
            return cached[1]
        async with self.db().acquire() as conn:
            configs = await repository.tenant_ts_configs(conn, tenant_id=tenant_id)
        if len(self._ts_configs) > 10_000:
            self._ts_configs.clear()
        self._ts_configs[tenant_id] = (now + TS_CONFIG_TTL_S, configs)
        return configs
