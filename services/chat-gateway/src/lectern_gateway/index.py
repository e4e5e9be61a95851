"""The gateway's reads of the index, asked of the retriever, which owns them (issue 61):
chunks by id (the source viewer, the review queue's passages) and how many searchable
chunks a tutor persona's scope matches. A chat turn's own reads go with its search
(``chat.retrieve``)."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence

from faststream.nats import NatsBroker

from lectern_common.broker import request
from lectern_common.errors import RetryableError, UpstreamError
from lectern_common.events import (
    ChunkRow,
    IndexChunksReply,
    IndexChunksRequest,
    IndexCountReply,
    IndexCountRequest,
)
from lectern_common.events.retrieval import ScopeFilter
from lectern_gateway.config import Settings

log = logging.getLogger(__name__)

#: chunk ids one request carries at most (``IndexChunksRequest.chunk_ids``)
CHUNKS_PER_REQUEST = 2000


async def chunks_by_id(
    broker: NatsBroker, settings: Settings, tenant_id: str, chunk_ids: Sequence[uuid.UUID]
) -> dict[uuid.UUID, ChunkRow]:
    """The tenant's chunks of documents not deleted, by id (an id not found is left out);
    raises ``UpstreamError`` when the retriever does not answer in time (a route: 503)."""
    wanted = list(dict.fromkeys(chunk_ids))
    found: dict[uuid.UUID, ChunkRow] = {}
    for at in range(0, len(wanted), CHUNKS_PER_REQUEST):
        reply = await request(
            broker,
            IndexChunksRequest(tenant_id=tenant_id, chunk_ids=wanted[at : at + CHUNKS_PER_REQUEST]),
            IndexChunksReply,
            timeout=settings.retrieve_timeout_s,
        )
        found.update((c.chunk_id, c) for c in reply.chunks)
    return found


async def scope_chunks(
    broker: NatsBroker,
    settings: Settings,
    tenant_id: str,
    scope: ScopeFilter,
    collections: Sequence[str],
) -> int | None:
    """How many searchable content chunks of ``collections`` a persona's ``scope`` matches;
    None when the retriever does not answer in time (a count is never worth failing a
    request for)."""
    counted = IndexCountRequest.model_validate(
        {"tenant_id": tenant_id, "scope": scope, "collections": list(collections)}
    )
    try:
        reply = await request(broker, counted, IndexCountReply, timeout=settings.retrieve_timeout_s)
    except (UpstreamError, RetryableError) as exc:
        log.warning("a persona's chunk count is unavailable (%s)", exc)
        return None
    return reply.chunks
