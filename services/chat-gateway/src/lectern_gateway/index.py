"""The gateway's reads of the index, asked of the retriever, which owns them (issue 61):
chunks by id (a turn's visible candidates, the source viewer, the review queue's passages),
the tenant's common topics (a refusal's suggestions), how many searchable chunks a tutor
persona's scope matches, the material a quiz, a drill or a syllabus reads, and a document's
outline in vectors (the curriculum proposals). The question words' idf comes with a turn's
search (``chat.retrieve``). Each raises ``UpstreamError`` when the retriever does not answer
in time (a route: 503) unless it says otherwise."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from typing import Any, Literal

from faststream.nats import NatsBroker

from lectern_common.broker import request
from lectern_common.errors import RetryableError, UpstreamError
from lectern_common.events import (
    ChunkRow,
    ChunkVisibility,
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
    MaterialFilter,
)
from lectern_common.events.retrieval import ScopeFilter
from lectern_gateway.config import Settings

log = logging.getLogger(__name__)

#: chunk ids one request asks for (at most 500, ``IndexChunksRequest.chunk_ids``): 200
#: chunks of 256 word pieces keep the reply well under NATS's 1 MB message
CHUNKS_PER_REQUEST = 200
#: at most this many chunks are read to draw a quiz from (about a 500-page book)
MAX_QUIZ_CHUNKS = 5000
#: material rows a request asks for at once (a page of ``IndexMaterialRequest``)
MATERIAL_PAGE = 500


async def chunks_by_id(
    broker: NatsBroker,
    settings: Settings,
    tenant_id: str,
    chunk_ids: Sequence[uuid.UUID],
    *,
    visible: ChunkVisibility | None = None,
) -> dict[uuid.UUID, ChunkRow]:
    """The tenant's chunks by id (an id not found is left out): with ``visible``, only those
    the caller may see of live documents; without, any chunk of a document not deleted."""
    wanted = list(dict.fromkeys(chunk_ids))
    found: dict[uuid.UUID, ChunkRow] = {}
    for at in range(0, len(wanted), CHUNKS_PER_REQUEST):
        asked = IndexChunksRequest(
            tenant_id=tenant_id, chunk_ids=wanted[at : at + CHUNKS_PER_REQUEST], visible=visible
        )
        reply = await request(broker, asked, IndexChunksReply, timeout=settings.retrieve_timeout_s)
        found.update((c.chunk_id, c) for c in reply.chunks)
    return found


def as_row(chunk: ChunkRow) -> dict[str, Any]:
    """A chunk as the gateway's row dicts hold it (its id also as ``id``)."""
    return {**chunk.model_dump(), "id": chunk.chunk_id}


async def related_topics(
    broker: NatsBroker, settings: Settings, tenant_id: str, subject: str | None, *, limit: int
) -> list[str]:
    """The tenant's common topic tags, ``subject``'s first (a refusal suggests them); none
    when the retriever does not answer in time: a refusal does not wait on its suggestions."""
    try:
        reply = await request(
            broker,
            IndexTopicsRequest(tenant_id=tenant_id, course_subject=subject, limit=limit),
            IndexTopicsReply,
            timeout=settings.retrieve_timeout_s,
        )
    except (UpstreamError, RetryableError) as exc:
        log.warning("related topics unavailable (%s); refusing without them", exc)
        return []
    return list(reply.topics)


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


async def material(
    broker: NatsBroker,
    settings: Settings,
    tenant_id: str,
    selected: MaterialFilter,
    *,
    purpose: Literal["quiz", "syllabus"],
    limit: int = MAX_QUIZ_CHUNKS,
) -> list[dict[str, Any]]:
    """The material ``selected`` picks, in reading order, at most ``limit`` chunks, page by
    page; each row a dict with the chunk's ``id`` and its document's ``title`` (also as
    ``document_title``)."""
    rows: list[dict[str, Any]] = []
    more = True
    while more and len(rows) < limit:
        page = IndexMaterialRequest(
            tenant_id=tenant_id, filter=selected, purpose=purpose, offset=len(rows),
            limit=min(MATERIAL_PAGE, limit - len(rows)),
        )  # fmt: skip
        reply = await request(broker, page, IndexMaterialReply, timeout=settings.retrieve_timeout_s)
        rows += [
            {**r.model_dump(), "id": r.chunk_id, "document_title": r.title} for r in reply.rows
        ]
        more = reply.more and bool(reply.rows)
    return rows


async def outline(
    broker: NatsBroker, settings: Settings, tenant_id: str, document_id: uuid.UUID, sections: int
) -> IndexOutlineReply:
    """A document's mean embedding, its ``sections`` largest top-level sections' and the
    standards its sections' chunks carry."""
    return await request(
        broker,
        IndexOutlineRequest(tenant_id=tenant_id, document_id=document_id, max_sections=sections),
        IndexOutlineReply,
        timeout=settings.retrieve_timeout_s,
    )
