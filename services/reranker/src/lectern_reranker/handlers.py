"""The re-ranker's request handler: holds the loaded scorer and runs the pipeline."""

from __future__ import annotations

import logging

from faststream.nats import NatsBroker

from lectern_common.errors import ConfigurationError
from lectern_common.events import RerankReply, RerankRequest
from lectern_common.service import ServiceState
from lectern_reranker.config import Settings
from lectern_reranker.index import StoredVectors
from lectern_reranker.scorers import BiEncoderScorer, load_scorer
from lectern_reranker.service import RerankConfig, SemanticScorer, rerank, scoring_text

log = logging.getLogger(__name__)


class Reranker:
    """Loads the scorer once at start-up and answers rerank requests with it."""

    def __init__(
        self,
        *,
        settings: Settings,
        scorer: SemanticScorer | None = None,
        broker: NatsBroker | None = None,
    ) -> None:
        self._settings = settings
        self._config: RerankConfig = settings.rerank_config()
        #: ``scorer`` given: used as it is (tests), else loaded by ``start``
        self._scorer: SemanticScorer | None = scorer
        #: the index's stored vectors, asked of the retriever over ``broker`` (None: the
        #: bi-encoder embeds every candidate)
        self._stored: StoredVectors | None = None
        if broker is not None and settings.reuse_index_vectors:
            self._stored = StoredVectors(broker, timeout_s=settings.index_vectors_timeout_s)

    @property
    def scorer(self) -> SemanticScorer | None:
        """The loaded scorer (None before start-up)."""
        return self._scorer

    async def start(self, state: ServiceState) -> None:
        """Load the models (once per process)."""
        if self._scorer is None:
            self._scorer = load_scorer(self._settings)
        state.deps = self
        log.info("reranker scorer: %s", self._scorer.name)

    async def readiness(self) -> str | None:
        """None when a scorer is loaded, else the problem."""
        return None if self._scorer is not None else "scorer not loaded"

    async def _scorer_for(self, request: RerankRequest, scorer: SemanticScorer) -> SemanticScorer:
        """The bi-encoder reuses the index's stored vectors when the index used the same model."""
        if not isinstance(scorer, BiEncoderScorer) or self._stored is None:
            return scorer
        model = scorer.embedder_name
        if model is None or not request.candidates:
            return scorer
        stored = await self._stored.of(
            tenant_id=request.tenant_id,
            chunk_ids=[c.chunk_id for c in request.candidates],
            model=model,
        )
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
