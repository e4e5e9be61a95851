"""Curriculum tags on the chunks ingest owns: the gateway's teachers confirm a document's
standards and ask (``lectern.chunks.curriculum.v1``); ingest writes them to the chunks, where
search and chat filter on them and the re-ranker scores a student's standards."""

from __future__ import annotations

from lectern_common.db.types import Pool
from lectern_common.events import ChunkCurriculumReply, ChunkCurriculumRequest


async def tag_chunks(pool: Pool, request: ChunkCurriculumRequest) -> ChunkCurriculumReply:
    """Every chunk of the document gets the document's standards, then each section's chunks
    also get that section's, in one transaction; chunks updated (0: no such document in the
    tenant, or none of its chunks)."""
    whole = list(dict.fromkeys(request.document))
    async with pool.acquire() as conn, conn.transaction():
        status: str = await conn.execute(
            "UPDATE chunks SET curriculum_standards = $3 WHERE document_id = $1 "
            "AND tenant_id = $2",
            request.document_id, request.tenant_id, whole,
        )  # fmt: skip
        for section in request.sections:
            await conn.execute(
                "UPDATE chunks SET curriculum_standards = ARRAY(SELECT DISTINCT unnest("
                "curriculum_standards || $4::text[])) WHERE document_id = $1 AND tenant_id = $2 "
                "AND section_path[1:$5] = $3::text[]",
                request.document_id, request.tenant_id, section.path, list(section.standards),
                len(section.path),
            )  # fmt: skip
    return ChunkCurriculumReply(request_id=request.request_id, updated=int(status.split()[-1]))
