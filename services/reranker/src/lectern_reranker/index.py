"""The index's stored vectors of the candidates, asked of the retriever (issue 61): the
retriever owns every read of ``chunks`` and ``embedding_models``, so the re-ranker holds no
database connection. A vector the index does not give (another model's index, a chunk not
found, no retriever answering in time) is simply embedded by the bi-encoder itself: a
re-rank never waits long on, nor fails for, the index."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Sequence

import numpy as np
from faststream.nats import NatsBroker
from numpy.typing import NDArray
from pydantic import ValidationError

from lectern_common.broker import request
from lectern_common.errors import NatsUnavailableError, RetryableError, UpstreamError
from lectern_common.events import IndexVectorsReply, IndexVectorsRequest

log = logging.getLogger(__name__)

#: how long "the index holds another model's vectors" is trusted before asking again
INDEX_MODEL_TTL_S = 60.0
#: after the retriever did not answer in time, re-ranks embed for themselves this long
#: rather than each waiting out the timeout again
UNANSWERED_PAUSE_S = 10.0


class StoredVectors:
    """Asks the retriever for candidates' stored embeddings (``lectern.index.vectors.v1``),
    and stops asking for a while when the index holds another model's vectors or the
    retriever did not answer."""

    def __init__(self, broker: NatsBroker, *, timeout_s: float) -> None:
        self._broker = broker
        self._timeout_s = timeout_s
        #: no request before this (monotonic clock): another model's index, or no answer
        self._quiet_until = float("-inf")

    async def of(
        self, *, tenant_id: str, chunk_ids: Sequence[uuid.UUID], model: str
    ) -> dict[uuid.UUID, NDArray[np.float32]]:
        """The stored vectors of the tenant's ``chunk_ids`` (the first 500) when the index
        holds ``model``'s; an id left out is one to embed."""
        wanted = list(dict.fromkeys(chunk_ids))[:500]
        if not wanted or time.monotonic() < self._quiet_until:
            return {}
        asked = IndexVectorsRequest(tenant_id=tenant_id, chunk_ids=wanted, model=model)
        try:
            reply = await request(self._broker, asked, IndexVectorsReply, timeout=self._timeout_s)
        except (UpstreamError, RetryableError, NatsUnavailableError, ValidationError) as exc:
            log.warning("the index's vectors are unavailable (%s); embedding the candidates", exc)
            self._quiet_until = time.monotonic() + UNANSWERED_PAUSE_S
            return {}
        if reply.model != model:
            self._quiet_until = time.monotonic() + INDEX_MODEL_TTL_S
            return {}
        return {found.chunk_id: found.values() for found in reply.vectors}
