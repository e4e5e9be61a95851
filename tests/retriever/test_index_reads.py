"""The index's reads the retriever answers for the gateway (``lectern.index.*`` and the
search reply's ``idf``): the gateway holds no SQL on ``chunks`` or the BM25 statistics."""

from __future__ import annotations

import uuid
from typing import Any

import numpy as np
import pytest
from pydantic import ValidationError

from lectern_common.embeddings import Embedder
from lectern_common.events import (
    ChunkVector,
    ChunkVisibility,
    IndexChunksRequest,
    IndexCountRequest,
    IndexMaterialRequest,
    IndexOutlineRequest,
    IndexTopicsRequest,
    IndexVectorsReply,
    IndexVectorsRequest,
    MaterialFilter,
    RetrieveRequest,
)
from lectern_common.events.retrieval import ScopeFilter
from lectern_retriever import index_reads

PHOTO = "Chlorophyll in the chloroplasts captures light energy for photosynthesis."
CELLS = "Mitochondria release energy from glucose by cellular respiration."


async def test_chunks_by_id_with_and_without_the_callers_visibility(
    retriever: Any, db_pool: Any, embedder: Embedder, tenant_id: str, add_doc: Any,
    set_doc_status: Any,
) -> None:  # fmt: skip
    live = await add_doc(db_pool, tenant_id=tenant_id, texts=[PHOTO], embedder=embedder,
                         subject="Biology", topic_tags=["light"])  # fmt: skip
    quiz = await add_doc(db_pool, tenant_id=tenant_id, texts=[CELLS], embedder=embedder,
                         collection="assessment")  # fmt: skip
    other = await add_doc(db_pool, tenant_id=f"{tenant_id}-b", texts=[PHOTO], embedder=embedder)
    ids = {
        doc: await db_pool.fetchval("SELECT id FROM chunks WHERE document_id = $1", doc)
        for doc in (live, quiz, other)
    }
    asked = list(ids.values())

    async def visible(**given: Any) -> set[Any]:
        reply = await retriever.chunks(
            IndexChunksRequest(
                tenant_id=tenant_id, chunk_ids=asked, visible=ChunkVisibility(**given)
            )
        )
        return {c.document_id for c in reply.chunks}

    assert await visible(collections=["educational"]) == {live}
    assert await visible(collections=["educational", "assessment"]) == {live, quiz}
    assert await visible(collections=["educational"], scope=ScopeFilter(subjects=["biology"]))
    assert not await visible(collections=["educational"], scope=ScopeFilter(subjects=["art"]))
    # the source viewer's read: any chunk of the tenant's documents that are not deleted
    viewer = await retriever.chunks(IndexChunksRequest(tenant_id=tenant_id, chunk_ids=asked))
    rows = {c.document_id: c for c in viewer.chunks}
    assert set(rows) == {live, quiz}
    assert (rows[live].text, rows[live].topic_tags, rows[live].title) == (PHOTO, ["light"], "doc")
    # archived: out of a turn's candidates, still shown by the viewer
    await set_doc_status(db_pool, live, "archived")
    assert await visible(collections=["educational"]) == set()
    viewer = await retriever.chunks(IndexChunksRequest(tenant_id=tenant_id, chunk_ids=asked))
    assert {c.document_id for c in viewer.chunks} == {live, quiz}


async def test_topics_and_the_search_replys_idf(
    retriever: Any, db_pool: Any, embedder: Embedder, tenant_id: str, add_doc: Any
) -> None:
    await add_doc(db_pool, tenant_id=tenant_id, texts=[PHOTO], embedder=embedder,
                  subject="biology", topic_tags=["light", "plants"])  # fmt: skip
    await add_doc(db_pool, tenant_id=tenant_id, texts=[CELLS], embedder=embedder,
                  subject="chemistry", topic_tags=["energy"])  # fmt: skip
    topics = await retriever.topics(
        IndexTopicsRequest(tenant_id=tenant_id, course_subject="chemistry", limit=2)
    )
    assert topics.topics == ["energy", "light"]
    reply = await retriever.retrieve(
        RetrieveRequest(
            tenant_id=tenant_id,
            query="what is chlorophyll?",
            rewrite=False,
            idf_words=["chlorophyll", "energy", "the", "unicorn"],
        )
    )
    # a word in one of two chunks is rarer than one in both; a stop word or an absent one has none
    assert set(reply.idf) == {"chlorophyll", "energy"}
    assert reply.idf["chlorophyll"] > reply.idf["energy"] > 0


async def test_a_personas_scope_is_counted_over_searchable_content(
    retriever: Any, db_pool: Any, embedder: Embedder, tenant_id: str, add_doc: Any,
    set_doc_status: Any,
) -> None:  # fmt: skip
    bio = await add_doc(db_pool, tenant_id=tenant_id, texts=[PHOTO, CELLS], embedder=embedder,
                        subject="Biology", topic_tags=["cells"])  # fmt: skip
    await add_doc(db_pool, tenant_id=tenant_id, texts=[CELLS], embedder=embedder,
                  subject="biology", collection="assessment")  # fmt: skip

    async def count(scope: ScopeFilter, collections: list[Any] | None = None) -> int:
        request = IndexCountRequest(tenant_id=tenant_id, scope=scope)
        if collections is not None:
            request.collections = collections
        reply = await retriever.count(request)
        assert reply.error is None
        return int(reply.chunks)

    assert await count(ScopeFilter(subjects=["biology"])) == 2
    assert await count(ScopeFilter(subjects=["biology"]), ["educational", "assessment"]) == 3
    assert await count(ScopeFilter(topic_tags=["cells"])) == 2
    assert await count(ScopeFilter(subjects=["art"])) == 0
    await set_doc_status(db_pool, bio, "archived")
    assert await count(ScopeFilter(subjects=["biology"])) == 0


async def test_material_pages_in_reading_order_and_a_documents_outline(
    retriever: Any, db_pool: Any, embedder: Embedder, tenant_id: str, add_doc: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    texts = [f"Passage {i} about {'light' if i % 2 else 'cells'} and energy." for i in range(7)]
    doc = await add_doc(db_pool, tenant_id=tenant_id, texts=texts, embedder=embedder,
                        section_path=["1 Plants"])  # fmt: skip
    await add_doc(db_pool, tenant_id=tenant_id, texts=[CELLS], embedder=embedder,
                  collection="assessment")  # fmt: skip
    selected = MaterialFilter(collections=["educational"])
    seen: list[str] = []
    offset, more = 0, True
    while more:
        reply = await retriever.material(
            IndexMaterialRequest(
                tenant_id=tenant_id, filter=selected, purpose="quiz", offset=offset, limit=3
            )
        )
        assert reply.error is None and len(reply.rows) <= 3
        seen += [r.text for r in reply.rows]
        offset, more = offset + len(reply.rows), reply.more
    assert seen == texts, "every chunk once, in the document's order, over the pages"
    # a page also stops at its texts' size (a reply must fit a NATS message)
    monkeypatch.setattr(index_reads, "MATERIAL_PAGE_CHARS", 2 * len(texts[0]))
    reply = await retriever.material(
        IndexMaterialRequest(tenant_id=tenant_id, filter=selected, purpose="quiz", limit=100)
    )
    assert [r.text for r in reply.rows] == texts[:2] and reply.more
    outline = await retriever.outline(IndexOutlineRequest(tenant_id=tenant_id, document_id=doc))
    assert outline.centroid is not None and len(outline.centroid) == 384
    assert [(s.path, s.chunks, s.first) for s in outline.sections] == [(["1 Plants"], 7, 0)]
    other = await retriever.outline(IndexOutlineRequest(tenant_id="someone-else", document_id=doc))
    assert other.centroid is None and other.sections == [], "another tenant's document: nothing"


async def test_stored_vectors_only_of_the_model_asked_for(
    retriever: Any, db_pool: Any, tenant_id: str, add_doc: Any, unit_vectors: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    vectors = unit_vectors(3, seed=61)
    doc = await add_doc(db_pool, tenant_id=tenant_id, texts=[PHOTO, CELLS, "Third."],
                        vectors=vectors)  # fmt: skip
    rows = await db_pool.fetch(
        "SELECT id FROM chunks WHERE document_id = $1 ORDER BY chunk_index", doc
    )
    ids = [r["id"] for r in rows]
    model, dimension = await db_pool.fetchrow(
        "SELECT name, dimension FROM embedding_models WHERE id = 1"
    )
    missing = uuid.uuid4()
    asked = IndexVectorsRequest(tenant_id=tenant_id, chunk_ids=[*ids, missing], model=model)
    reply = await retriever.vectors(asked)
    assert (reply.error, reply.model, reply.dimension, reply.more) == (
        None,
        model,
        dimension,
        False,
    )
    # the wire form decodes to the stored float32 values exactly, after a trip through JSON
    decoded = IndexVectorsReply.model_validate_json(reply.model_dump_json())
    found = {v.chunk_id: v.values() for v in decoded.vectors}
    assert set(found) == set(ids), "an id not found is left out"
    for chunk_id, vector in zip(ids, vectors, strict=True):
        assert found[chunk_id].dtype == np.float32
        assert np.array_equal(found[chunk_id], vector.astype(np.float32))
    # an index of another model: the model named, no vector given
    other = await retriever.vectors(asked.model_copy(update={"model": "another-model"}))
    assert (other.model, other.dimension, other.vectors) == (model, dimension, [])
    # another tenant's chunks: none
    stranger = await retriever.vectors(asked.model_copy(update={"tenant_id": "someone-else"}))
    assert stranger.model == model and stranger.vectors == []
    # a reply stops short of NATS's message size; the caller embeds the rest itself
    monkeypatch.setattr(index_reads, "VECTORS_REPLY_CHARS", 2 * len(decoded.vectors[0].vector))
    cut = await retriever.vectors(asked)
    assert len(cut.vectors) == 2 and cut.more


def test_a_vectors_reply_holds_vectors_of_its_dimension() -> None:
    chunk_id = uuid.uuid4()
    values = np.array([0.5, -1.25, 3.0], dtype=np.float32)
    wire = ChunkVector.of(chunk_id, values)
    assert wire.vector == "AAAAPwAAoL8AAEBA", "base64 of float32 little-endian"
    reply = IndexVectorsReply(request_id=uuid.uuid4(), model="m", dimension=3, vectors=[wire])
    assert np.array_equal(reply.vectors[0].values(), values)
    with pytest.raises(ValidationError, match="not 4 float32 values"):
        IndexVectorsReply(request_id=uuid.uuid4(), model="m", dimension=4, vectors=[wire])
    with pytest.raises(ValidationError):
        ChunkVector(chunk_id=chunk_id, vector="not base64!")
