"""Curriculum tagging: a tenant's standards, proposals for a document and its sections by
embedding similarity, and a teacher's confirmation.

Standards are embedded with the index's own model, so a standard's description and a
document's chunks are compared in one space: the proposals for a document are the standards
nearest the mean of its content chunks' vectors, and for each top-level section (its first
two headings) those nearest that section's mean. Confirmed standards are written to the
document and, through ingest, which owns them (``lectern.chunks.curriculum.v1``), to its
chunks, where search and chat filter on them (``RetrievalFilters.curriculum_standards``) and
the re-ranker scores a student's standards.
"""

from __future__ import annotations

import csv
import io
import uuid
from typing import Annotated, Any

import numpy as np
from fastapi import APIRouter, Query, Request
from faststream.nats import NatsBroker
from pydantic import BaseModel, Field, ValidationError

from lectern_common.broker import request
from lectern_common.db.types import Pool
from lectern_common.embeddings import Embedder, build_embedder
from lectern_common.events import ChunkCurriculumReply, ChunkCurriculumRequest, SectionStandards
from lectern_common.index import FollowingEmbedder, guard, with_live_model
from lectern_gateway.auth import PrincipalDep, StaffDep
from lectern_gateway.config import Settings
from lectern_gateway.deps import GatewayDep, GatewayDeps, PoolDep
from lectern_gateway.index import outline
from lectern_gateway.problems import ProblemError
from lectern_gateway.study import repository as repo

router = APIRouter(tags=["curriculum"])
MAX_STANDARDS = 5000
DOCUMENT_PROPOSALS = 5
SECTION_PROPOSALS = 3
MAX_SECTIONS = 40

Code = Annotated[str, Field(min_length=1, max_length=100, pattern=r"^\S(.*\S)?$")]


class Standard(BaseModel):
    """A curriculum standard."""

    code: Code
    description: str = Field(min_length=3, max_length=2000)
    subject: str | None = Field(default=None, max_length=100)
    grade: int | None = Field(default=None, ge=0, le=20)


class StandardsUpload(BaseModel):
    """Standards as JSON (CSV is accepted too: ``code,description,subject,grade``)."""

    standards: list[Standard] = Field(min_length=1, max_length=MAX_STANDARDS)


class Imported(BaseModel):
    """How many standards were stored (new or updated)."""

    imported: int


class Proposal(BaseModel):
    """A standard proposed for a document or section, with its cosine similarity."""

    code: str
    description: str
    score: float


class SectionProposals(BaseModel):
    """Proposals for one top-level section."""

    path: list[str]
    chunk_count: int
    proposals: list[Proposal]
    confirmed: list[str]


class DocumentCurriculum(BaseModel):
    """A document's confirmed standards and the proposals for it and its sections."""

    document_id: uuid.UUID
    confirmed: list[str]
    proposals: list[Proposal]
    sections: list[SectionProposals]


class SectionConfirmation(BaseModel):
    """Standards confirmed for a section (every chunk under this heading path)."""

    path: list[str] = Field(min_length=1, max_length=10)
    standards: list[Code] = Field(max_length=20)


class Confirmation(BaseModel):
    """A teacher's choice: standards for the whole document, and per section."""

    document: list[Code] = Field(default_factory=list, max_length=20)
    sections: list[SectionConfirmation] = Field(default_factory=list, max_length=MAX_SECTIONS)


async def _embedder(gateway: GatewayDeps) -> FollowingEmbedder:
    """The index's embedding model (the chat's local model when that is the index's)."""
    if gateway.index_embedder is not None:
        return gateway.index_embedder
    settings, local = gateway.settings, gateway.embedder
    embedder = FollowingEmbedder(
        settings,
        local if settings.embedding_provider == "local" and local else build_embedder(settings),
    )
    await embedder.sync(gateway.pool)
    gateway.index_embedder = embedder
    return embedder


def _from_csv(text: str) -> StandardsUpload:
    rows = list(csv.DictReader(io.StringIO(text)))
    standards = [
        {"code": (r.get("code") or "").strip(), "description": (r.get("description") or "").strip(),
         "subject": (r.get("subject") or "").strip() or None,
         "grade": int(r["grade"]) if (r.get("grade") or "").strip() else None}
        for r in rows
    ]  # fmt: skip
    return StandardsUpload.model_validate({"standards": standards})


def _upload_schema() -> dict[str, Any]:
    """The JSON body's schema, its ``Standard`` a reference to the document's components
    (where the standards list puts it): a ``$defs`` of its own would be looked up from the
    document's root by OpenAPI tools and not found."""
    schema = StandardsUpload.model_json_schema(ref_template="#/components/schemas/{model}")
    schema.pop("$defs", None)
    return schema


@router.post(
    "/v1/curriculum/standards",
    summary="Upload curriculum standards (JSON or CSV)",
    openapi_extra={
        "requestBody": {
            "content": {
                "application/json": {"schema": _upload_schema()},
                "text/csv": {"schema": {"type": "string"}},
            }
        }
    },
)
async def upload_standards(
    request: Request, staff: StaffDep, pool: PoolDep, gateway: GatewayDep
) -> Imported:
    """Adds or replaces the tenant's standards by code (teachers and admins)."""
    raw = await request.body()
    kind = request.headers.get("content-type", "").split(";")[0].strip()
    try:
        if kind == "text/csv":
            upload = _from_csv(raw.decode("utf-8-sig"))
        else:
            upload = StandardsUpload.model_validate_json(raw)
    except (ValidationError, UnicodeDecodeError, ValueError, KeyError) as exc:
        raise ProblemError(422, "Invalid standards", str(exc)[:2000]) from exc
    embedder = await _embedder(gateway)
    # a code given twice is replaced by its last entry, as by a later upload: only that one
    # is embedded and stored (5,000 copies of one code took a fuzzed request over 30 s)
    latest = list({s.code: s for s in upload.standards}.values())

    async def attempt(model: Embedder) -> None:
        vectors = await model.embed_documents([f"{s.code}: {s.description}" for s in latest])
        async with pool.acquire() as conn, conn.transaction():
            await guard(conn, model.name)
            await repo.upsert_standards(
                conn,
                [(staff.tenant_id, s.code, s.description, s.subject, s.grade, v)
                 for s, v in zip(latest, vectors, strict=True)],
            )  # fmt: skip

    await with_live_model(embedder, attempt)
    return Imported(imported=len(upload.standards))


@router.get("/v1/curriculum/standards", summary="The tenant's curriculum standards")
async def list_standards(
    principal: PrincipalDep,
    pool: PoolDep,
    subject: str | None = Query(default=None, max_length=100),
) -> list[Standard]:
    rows = await repo.standards(pool, tenant_id=principal.tenant_id, subject=subject)
    return [Standard.model_validate(dict(r)) for r in rows]


async def _document(pool: Pool, tenant_id: str, document_id: uuid.UUID) -> Any:
    row = await repo.indexed_document(pool, tenant_id=tenant_id, document_id=document_id)
    if row is None:
        raise ProblemError(404, "Not found", f"no indexed document {document_id}")
    return row


async def _curriculum(
    pool: Pool, broker: NatsBroker, settings: Settings, tenant_id: str, document: Any
) -> DocumentCurriculum:
    # the document's outline in vectors from the index's owner (one transaction there: a
    # re-index cannot switch the vectors between its statements)
    shape = await outline(broker, settings, tenant_id, document["id"], MAX_SECTIONS)
    tagged = {tuple(s.path): s.standards for s in shape.standards}

    async def nearest(vector: list[float], limit: int) -> list[Proposal]:
        rows = await repo.nearest_standards(
            pool, tenant_id=tenant_id, vector=np.asarray(vector, dtype=np.float32),
            subject=document["subject"], grade=document["grade_level"], limit=limit,
        )  # fmt: skip
        return [Proposal(code=r["code"], description=r["description"],
                         score=round(float(r["score"]), 4)) for r in rows]  # fmt: skip

    proposals = (
        await nearest(shape.centroid, DOCUMENT_PROPOSALS) if shape.centroid is not None else []
    )
    per_section = [
        SectionProposals(
            path=list(s.path), chunk_count=s.chunks,
            proposals=await nearest(s.centroid, SECTION_PROPOSALS),
            confirmed=sorted(
                set(tagged.get(tuple(s.path), [])) - set(document["curriculum_standards"])
            ),
        )
        for s in sorted(shape.sections, key=lambda s: s.first)
    ]  # fmt: skip
    return DocumentCurriculum(
        document_id=document["id"], confirmed=list(document["curriculum_standards"]),
        proposals=proposals, sections=per_section,
    )  # fmt: skip


@router.get(
    "/v1/documents/{document_id}/curriculum",
    summary="Proposed and confirmed curriculum standards of a document",
)
async def document_curriculum(
    document_id: uuid.UUID, staff: StaffDep, gateway: GatewayDep
) -> DocumentCurriculum:
    """The 5 standards nearest the document and the 3 nearest each top-level section
    (standards of the document's subject and grade +/- 1, or of none)."""
    document = await _document(gateway.pool, staff.tenant_id, document_id)
    return await _curriculum(
        gateway.pool, gateway.broker, gateway.settings, staff.tenant_id, document
    )


@router.post(
    "/v1/documents/{document_id}/curriculum",
    summary="Confirm a document's curriculum standards",
)
async def confirm_curriculum(
    document_id: uuid.UUID, body: Confirmation, staff: StaffDep, gateway: GatewayDep
) -> DocumentCurriculum:
    """Sets the document's standards (every chunk) and each section's (its chunks): they
    take effect in search, chat and re-ranking at once."""
    pool = gateway.pool
    document = await _document(pool, staff.tenant_id, document_id)
    codes = set(body.document) | {c for s in body.sections for c in s.standards}
    known = await repo.known_standards(pool, tenant_id=staff.tenant_id, codes=sorted(codes))
    if codes - known:
        raise ProblemError(422, "Unknown standards", f"not uploaded: {sorted(codes - known)}")
    whole = list(dict.fromkeys(body.document))
    # the chunks first (ingest's): NATS or ingest away leaves nothing changed (503), and a
    # repeated confirmation sets the same tags
    await request(
        gateway.broker,
        ChunkCurriculumRequest(
            tenant_id=staff.tenant_id, document_id=document_id, document=whole,
            sections=[SectionStandards(path=s.path, standards=list(s.standards))
                      for s in body.sections],
        ),
        ChunkCurriculumReply,
        timeout=gateway.settings.request_timeout_s,
    )  # fmt: skip
    await repo.set_document_standards(pool, document_id, whole)
    document = await _document(pool, staff.tenant_id, document_id)
    return await _curriculum(pool, gateway.broker, gateway.settings, staff.tenant_id, document)
