"""``POST /v1/search``: hybrid search in the caller's tenant (search pages, debugging)."""

from __future__ import annotations

import uuid

from fastapi import APIRouter
from pydantic import BaseModel, Field

from lectern_common.broker import request
from lectern_common.events import Candidate, RetrievalFilters, RetrieveReply, RetrieveRequest
from lectern_common.events.retrieval import Method
from lectern_gateway.auth import PrincipalDep
from lectern_gateway.classes.membership import require_member, student_classes
from lectern_gateway.deps import BrokerDep, PoolDep, SettingsDep

router = APIRouter(tags=["search"])


def _both_methods() -> list[Method]:
    return ["dense", "sparse"]


class SearchRequest(BaseModel):
    """A search: the question, the same filters as chat retrieval, and tuning knobs."""

    query: str = Field(min_length=1, max_length=4000, pattern=r"\S", description="not blank")
    filters: RetrievalFilters = Field(default_factory=RetrievalFilters)
    k: int = Field(default=10, ge=1, le=100)
    k_dense: int = Field(default=20, ge=0, le=1000)
    k_sparse: int = Field(default=20, ge=0, le=1000)
    dense_weight: float | None = Field(default=None, ge=0.0)
    sparse_weight: float | None = Field(default=None, ge=0.0)
    max_per_document: int | None = Field(default=3, ge=1)
    ef_search: int | None = Field(default=None, ge=10, le=1000)
    rewrite: bool = True
    multi_hop: bool = True
    boost_tags: list[str] = Field(
        default_factory=list, max_length=50, description="topic tags whose chunks rank higher"
    )
    cited_document_ids: list[uuid.UUID] = Field(
        default_factory=list,
        max_length=100,
        description="documents cited in the last turns of a conversation (their chunks rank "
        "higher)",
    )
    methods: list[Method] = Field(default_factory=_both_methods, min_length=1)


class SearchResponse(BaseModel):
    """Candidates best first, the queries run after rewriting, and per-stage timings."""

    candidates: list[Candidate]
    queries: list[str]
    timings_ms: dict[str, float]


def scoped_filters(filters: RetrievalFilters, classes: list[str] | None) -> RetrievalFilters:
    """The filters a caller may use: students (``classes`` not None) only ever search the
    educational collection, and only their own classes' material and unassigned material."""
    if classes is None:
        return filters
    require_member(filters.class_id, classes)
    wanted = (
        classes if filters.class_ids is None else [c for c in filters.class_ids if c in classes]
    )
    return filters.model_copy(
        update={"collections": ["educational"], "class_ids": wanted, "include_unassigned": True}
    )


@router.post("/v1/search", response_model=SearchResponse, summary="Hybrid search")
async def search(
    body: SearchRequest,
    principal: PrincipalDep,
    broker: BrokerDep,
    settings: SettingsDep,
    pool: PoolDep,
) -> SearchResponse:
    """Dense + BM25 search fused by RRF within the caller's tenant, with the given filters."""
    message = RetrieveRequest(
        request_id=uuid.uuid4(),
        tenant_id=principal.tenant_id,
        query=body.query,
        filters=scoped_filters(body.filters, await student_classes(pool, principal)),
        k=body.k,
        k_dense=body.k_dense,
        k_sparse=body.k_sparse,
        dense_weight=body.dense_weight,
        sparse_weight=body.sparse_weight,
        max_per_document=body.max_per_document,
        ef_search=body.ef_search,
        rewrite=body.rewrite,
        multi_hop=body.multi_hop,
        boost_tags=body.boost_tags,
        cited_document_ids=body.cited_document_ids,
        methods=body.methods,
    )
    reply = await request(broker, message, RetrieveReply, timeout=settings.request_timeout_s)
    return SearchResponse(
        candidates=reply.candidates, queries=reply.queries, timings_ms=reply.timings_ms
    )
