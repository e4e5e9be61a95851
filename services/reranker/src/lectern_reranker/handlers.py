"""The re-ranker's request handler: holds the loaded scorer and runs the pipeline."""

from __future__ import annotations

import logging

from lectern_common.errors import ConfigurationError
from lectern_common.events import RerankReply, RerankRequest
from lectern_common.service import ServiceState
from lectern_reranker.config import Settings
from lectern_reranker.scorers import load_scorer
from lectern_reranker.service import RerankConfig, SemanticScorer, rerank

log = logging.getLogger(__name__)


class Reranker:
    """Loads the scorer once at start-up and answers rerank requests with it."""

    def __init__(self, *, settings: Settings) -> None:
        self._settings = settings
        self._config: RerankConfig = settings.rerank_config()
        self._scorer: SemanticScorer | None = None

    @property
    def scorer(self) -> SemanticScorer | None:
        """The loaded scorer (None before start-up)."""
        return self._scorer

    async def start(self, state: ServiceState) -> None:
        """Load the models (once per process)."""
        self._scorer = load_scorer(self._settings)
        state.resources["scorer"] = self._scorer
        log.info("reranker scorer: %s", self._scorer.name)

    async def readiness(self) -> str | None:
        """None when a scorer is loaded, else the problem."""
        return None if self._scorer is not None else "scorer not loaded"

    async def rerank(self, request: RerankRequest) -> RerankReply:
        """Final context and confidence for one question."""
        if self._scorer is None:
            raise ConfigurationError("the reranker's models are not loaded yet")
        return await rerank(request=request, scorer=self._scorer, config=self._config)
