"""The re-ranker's request handler: holds the loaded scorer and runs the pipeline."""

from __future__ import annotations

import logging
import time
from typing import Any

from lectern_common.db import ReadPools
from lectern_common.db.types import Pool
from lectern_common.errors import ConfigurationError
from lectern_common.events import RerankReply, RerankRequest
from lectern_common.service import ServiceState
from lectern_reranker import repository
from lectern_reranker.config import Settings
from lectern_reranker.scorers import BiEncoderScorer, load_scorer
from lectern_reranker.service import RerankConfig, SemanticScorer, rerank, scoring_text

log = logging.getLogger(__name__)

#: how long the answer to "was the index built with our bi-encoder?" is trusted
INDEX_MODEL_TTL_S = 60.0


class Reranker:
    """Loads the scorer once at start-up and answers rerank requests with it."""

    def __init__(self, *, settings: Settings, scorer: SemanticScorer | None = None) -> None:
        self._settings = settings
        self._config: RerankConfig = settings.rerank_config()
        #: ``scorer`` given: used as it is (tests), else loaded by ``start``
        self._scorer: SemanticScorer | None = scorer
        #: its reads go to the read replica when one is configured and healthy
        self._reads: ReadPools | None = None
        self._index_checked_at = float("-inf")
        self._index_matches = False

    @property
    def scorer(self) -> SemanticScorer | None:
        """The loaded scorer (None before start-up)."""
        return self._scorer

    async def start(self, state: ServiceState) -> None:
        """Load the models (once per process)."""
        if self._scorer is None:
            self._scorer = load_scorer(self._settings)
        self._reads = state.reads if state.reads is not None else ReadPools(primary=state.db())
        state.deps = self
        log.info("reranker scorer: %s", self._scorer.name)

    async def readiness(self) -> str | None:
        """None when a scorer is loaded, else the problem."""
        return None if self._scorer is not None else "scorer not loaded"

    async def _index_is_ours(self, reads: ReadPools, scorer: BiEncoderScorer) -> bool:
        now = time.monotonic()
        if now - self._index_checked_at > INDEX_MODEL_TTL_S:
            model = await reads.run(repository.index_model)
            self._index_matches = model is not None and model[0] == scorer.embedder_name
            self._index_checked_at = now
        return self._index_matches

    async def _scorer_for(self, request: RerankRequest, scorer: SemanticScorer) -> SemanticScorer:
        """The bi-encoder reuses the index's stored vectors when the index used the same model."""
        reads = self._reads
        if (
            not isinstance(scorer, BiEncoderScorer)
            or not self._settings.reuse_index_vectors
            or reads is None
            or not request.candidates
            or not await self._index_is_ours(reads, scorer)
        ):
            return scorer

        async def stored_vectors(pool: Pool) -> dict[Any, Any]:
            return await repository.chunk_vectors(
                pool,
                tenant_id=request.tenant_id,
                chunk_ids=[c.chunk_id for c in request.candidates],
                model=str(scorer.embedder_name),
            )

        stored = await reads.run(stored_vectors)
        known = {
            scoring_text(c): stored[c.chunk_id] for c in request.candidates if c.chunk_id in stored
        }
        return scorer.with_vectors(known) if known else scorer

    async def rerank(self, request: RerankRequest) -> RerankReply:
        """Final context and confidence for one question."""
        if self._scorer is None:
            raise ConfigurationError("the reranker's models are not loaded yet")
        scorer = await self._scorer_for(request, self._scorer)
        return await rerank(request=request, scorer=scorer, config=self._config)
