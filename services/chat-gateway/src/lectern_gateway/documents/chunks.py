"""The source viewer: one chunk in full, with the span an answer cited marked."""

from __future__ import annotations

import uuid
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field

from lectern_gateway.auth import PrincipalDep
from lectern_gateway.chat import repository as repo
from lectern_gateway.chat.citations import content_terms, split_cited_sentences
from lectern_gateway.classes.membership import may_see_class, student_classes
from lectern_gateway.deps import BrokerDep, PoolDep, SettingsDep
from lectern_gateway.index import as_row, chunks_by_id
from lectern_gateway.problems import ProblemError

router = APIRouter(tags=["sources"])


class Highlight(BaseModel):
    """The part of the chunk that supports a cited sentence of an answer (``sentence``), or
    within it the answer itself, as the re-ranker's reader marked it (``answer``) or as the
    cell of a quoted table row the question asks for (``cell``)."""

    kind: Literal["sentence", "answer", "cell"] = "sentence"
    label: str
    start: int = Field(description="character offset in `text`")
    end: int
    text: str
    cited_sentence: str | None
    support: float


class ChunkView(BaseModel):
    """A chunk with its provenance."""

    id: uuid.UUID
    document_id: uuid.UUID
    document_title: str
    filename: str
    chunk_index: int
    kind: str
    text: str
    context_prefix: str | None
    section: str | None
    section_path: list[str]
    chapter: str | None
    page_start: int | None
    page_end: int | None
    slide: int | None
    topic_tags: list[str]
    highlights: list[Highlight] = Field(default_factory=list)


def best_span(chunk_text: str, sentence: str) -> tuple[int, int, float] | None:
    """The chunk sentence sharing most content words with ``sentence`` (start, end, overlap)."""
    wanted = content_terms(sentence)
    if not wanted:
        return None
    best: tuple[int, int, float] | None = None
    for candidate in split_cited_sentences(chunk_text)[0]:
        overlap = len(wanted & content_terms(candidate.text)) / len(wanted)
        if overlap > 0 and (best is None or overlap > best[2]):
            best = (candidate.start, candidate.end, round(overlap, 3))
    return best


def highlights_for(
    chunk_id: uuid.UUID, chunk_text: str, citations: list[dict[str, Any]]
) -> list[Highlight]:
    """Highlights of every citation of this chunk in a message."""
    out: list[Highlight] = []
    for c in citations:
        if str(c.get("chunk_id")) != str(chunk_id):
            continue
        sentence = c.get("text") or ""
        span = best_span(chunk_text, sentence)
        if span is None:
            continue
        start, end, overlap = span
        out.append(
            Highlight(
                label=str(c.get("label")),
                start=start,
                end=end,
                text=chunk_text[start:end],
                cited_sentence=sentence or None,
                support=overlap,
            )
        )
        for kind in ("answer", "cell"):
            marked = c.get(kind) or {}
            first, last = marked.get("start"), marked.get("end")
            if (
                isinstance(first, int)
                and isinstance(last, int)
                and 0 <= first < last <= len(chunk_text)
            ):
                out.append(
                    Highlight(
                        kind=kind, label=str(c.get("label")), start=first, end=last,
                        text=chunk_text[first:last], cited_sentence=sentence or None,
                        support=overlap,
                    )
                )  # fmt: skip
    return out


@router.get("/v1/chunks/{chunk_id}", summary="A source chunk (cited span marked with message_id)")
async def get_chunk(
    chunk_id: uuid.UUID,
    principal: PrincipalDep,
    pool: PoolDep,
    broker: BrokerDep,
    settings: SettingsDep,
    message_id: Annotated[
        uuid.UUID | None, Query(description="mark this answer's citations")
    ] = None,
) -> ChunkView:
    """The chunk from the index's owner (``lectern.index.chunks.v1``), as the caller may see
    it; 503 when the retriever does not answer in time."""
    found = (await chunks_by_id(broker, settings, principal.tenant_id, [chunk_id])).get(chunk_id)
    row = as_row(found) if found is not None else None
    # students never see assessments; answer as if it did not exist
    if row is None or (
        not principal.is_staff
        and (
            row["collection"] != "educational"
            or not may_see_class(row["class_id"], await student_classes(pool, principal))
        )
    ):
        raise ProblemError(404, "Not found", f"no chunk {chunk_id}")
    highlights: list[Highlight] = []
    if message_id is not None:
        message = await repo.get_message(
            pool=pool, tenant_id=principal.tenant_id, message_id=message_id
        )
        if message is None or (not principal.is_staff and message["user_id"] != principal.user_id):
            raise ProblemError(404, "Not found", f"no message {message_id}")
        highlights = highlights_for(chunk_id, row["text"], list(message["citations"] or []))
    section_path = list(row["section_path"] or [])
    return ChunkView(
        id=row["id"],
        document_id=row["document_id"],
        document_title=row["title"],
        filename=row["filename"],
        chunk_index=row["chunk_index"],
        kind=row["kind"],
        text=row["text"],
        context_prefix=row["context_prefix"],
        section=" > ".join(section_path) or row["chapter"],
        section_path=section_path,
        chapter=row["chapter"],
        page_start=row["page_start"],
        page_end=row["page_end"],
        slide=row["slide"],
        topic_tags=list(row["topic_tags"] or []),
        highlights=highlights,
    )
