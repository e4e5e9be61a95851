"""The retriever's responder in memory (FastStream's ``TestNatsBroker``) over the session's
Postgres: a typed request in, a typed reply out, ``bad_input`` for a body that is no request."""

from typing import Any

import pytest
from faststream.nats import TestNatsBroker

from lectern_common.broker import create_broker
from lectern_common.embeddings import Embedder
from lectern_common.events import (
    IndexVectorsReply,
    IndexVectorsRequest,
    RetrieveReply,
    RetrieveRequest,
    Subjects,
)
from lectern_retriever.app import subscribe
from tests.retriever.conftest import add_document


async def test_on_retrieve_answers_a_typed_request(
    retriever: Any, db_pool: Any, embedder: Embedder, tenant_id: str
) -> None:
    text = "Cells divide by mitosis into two identical daughter cells."
    document_id = await add_document(db_pool, tenant_id=tenant_id, texts=[text], embedder=embedder)
    broker = create_broker("nats://127.0.0.1:4222", service_name="lectern-retriever")
    subscribe(broker, retriever)
    request = RetrieveRequest(tenant_id=tenant_id, query="how do cells divide?", rewrite=False)
    async with TestNatsBroker(broker) as br:
        raw = await br.request(request.model_dump(mode="json"), Subjects.RETRIEVE, timeout=30)
        # of the retriever's responders (search, the index's reads) only search was called
        called = [s for s in broker.subscribers if s.calls[0].handler.mock.call_count]
        assert len(called) == 1 and len(broker.subscribers) == 7
        called[0].calls[0].handler.mock.assert_called_once_with(request.model_dump(mode="json"))
        bad = await br.request({"tenant_id": tenant_id, "query": ""}, Subjects.RETRIEVE, timeout=30)
    reply = RetrieveReply.model_validate_json(raw.body)
    assert reply.error is None and reply.request_id == request.request_id
    assert [(c.document_id, c.text) for c in reply.candidates] == [(document_id, text)]
    assert RetrieveReply.model_validate_json(bad.body).error == "bad_input"


async def test_on_vectors_answers_the_stored_vectors_of_the_index_model(
    retriever: Any, db_pool: Any, embedder: Embedder, tenant_id: str
) -> None:
    text = "Cells divide by mitosis into two identical daughter cells."
    document_id = await add_document(db_pool, tenant_id=tenant_id, texts=[text], embedder=embedder)
    chunk_id = await db_pool.fetchval("SELECT id FROM chunks WHERE document_id = $1", document_id)
    model = await db_pool.fetchval("SELECT name FROM embedding_models WHERE id = 1")
    broker = create_broker("nats://127.0.0.1:4222", service_name="lectern-retriever")
    subscribe(broker, retriever)
    request = IndexVectorsRequest(tenant_id=tenant_id, chunk_ids=[chunk_id], model=model)
    async with TestNatsBroker(broker) as br:
        raw = await br.request(request.model_dump(mode="json"), Subjects.INDEX_VECTORS, timeout=30)
    reply = IndexVectorsReply.model_validate_json(raw.body)
    assert reply.error is None and reply.request_id == request.request_id
    (found,) = reply.vectors
    assert found.chunk_id == chunk_id
    stored = (await embedder.embed_documents([text]))[0]
    assert found.values() == pytest.approx(stored, abs=1e-6)
