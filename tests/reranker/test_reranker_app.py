"""The reranker as deployed: start-up loads the model (no database: the retriever answers
its reads of the index), requests answered over NATS."""

import uuid

import httpx
import pytest
from lectern_testing.chat import store_candidate_chunk

from lectern_common.broker import create_broker, request
from lectern_common.db import create_pool
from lectern_common.embeddings import LocalEmbedder
from lectern_common.errors import RetryableError
from lectern_common.events import Candidate, RerankReply, RerankRequest, StudentContext
from lectern_reranker.app import create_app
from lectern_reranker.config import Settings
from lectern_retriever.app import subscribe as retriever_responders
from lectern_retriever.config import Settings as RetrieverSettings
from lectern_retriever.handlers import Retriever

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def chunk(text: str, **metadata: object) -> Candidate:
    return Candidate(
        chunk_id=uuid.uuid4(),
        document_id=uuid.uuid4(),
        title="Biology",
        text=text,
        metadata=dict(metadata),
    )


async def test_rerank_over_nats(
    nats_url: str, database_url: str, tenant_id: str, minilm: LocalEmbedder
) -> None:
    # the bi-encoder (no cross-encoder configured): its reuse of the index's vectors is
    # checked below; the packaged reader, the default, in test_reranker_scorers.py. Its
    # database URL leads nowhere: it has no database.
    app = create_app(
        Settings(
            nats_url=nats_url, database_url="postgresql://nobody@127.0.0.1:9/none", http_port=0,
            log_json=False, cross_encoder_model="",
        )
    )  # fmt: skip
    # the retriever answers the index's reads (its stored vectors)
    retriever = Retriever(
        settings=RetrieverSettings(nats_url=nats_url, database_url=database_url, http_port=0),
        embedder=minilm,
    )
    index = create_broker(nats_url, service_name="lectern-retriever")
    retriever_responders(index, retriever)
    photosynthesis = (
        "Photosynthesis in the chloroplast uses light energy to turn carbon dioxide and water "
        "into glucose and oxygen."
    )
    candidates = [
        chunk("The Treaty of Versailles ended the First World War in 1919."),
        chunk(
            photosynthesis,
            grade_level=8,
            uploaded_by="teacher-1",
            class_id="bio-8",
            freshness_date="2025-09-01",
        ),
        chunk(photosynthesis + " It happens in plants and algae.", source_priority="web"),
        chunk("Plants store the glucose they make as starch in their leaves and roots."),
    ]
    student = StudentContext(grade_level=8, class_id="bio-8", teacher_ids=["teacher-1"])
    client = create_broker(nats_url, service_name="test-client")
    await retriever.start()
    try:
        async with app.router.lifespan_context(app), client, index:
            await client.start()
            await index.start()
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://reranker") as http:
                ready = await http.get("/readyz")
            assert ready.status_code == 200, ready.text
            assert ready.json()["checks"]["models"] == "ok"
            assert "postgres" not in ready.json()["checks"]

            reply = await request(
                client,
                RerankRequest(
                    tenant_id=tenant_id,
                    query="How do plants make glucose?",
                    candidates=candidates,
                    student=student,
                    top_k=3,
                ),
                RerankReply,
                timeout=30,
            )
            assert reply.scorer == "bi-encoder"
            assert reply.dropped_duplicates == 1
            texts = [c.candidate.text for c in reply.chunks]
            assert texts[0] == photosynthesis, "the teacher's own chunk wins over its web copy"
            assert candidates[2].text not in texts
            assert len(texts) == 3
            assert reply.chunks[0].signals["source_priority"] == 1.0
            assert reply.confidence is not None
            assert reply.confidence.band in {"high", "medium", "low"}
            assert reply.confidence.grounding_is_prior

            off_topic = await request(
                client,
                RerankRequest(
                    tenant_id=tenant_id,
                    query="Who won the 2014 FIFA World Cup final?",
                    candidates=candidates,
                ),
                RerankReply,
                timeout=30,
            )
            assert off_topic.confidence is not None
            assert off_topic.confidence.band == "gap"

            with pytest.raises(RetryableError) as failure:
                await request(
                    client,
                    RerankRequest.model_construct(
                        request_id=uuid.uuid4(), tenant_id=tenant_id, query="", candidates=[]
                    ),
                    RerankReply,
                    timeout=30,
                )
            assert failure.value.reason == "bad_input"

            # the bi-encoder reuses the index's stored vector of a chunk instead of re-embedding:
            # store a misleading vector (another sentence's) to see that it is the one used
            query = "How do plants make glucose?"
            decoy = minilm.embed_documents_sync(["The stock market fell sharply on Monday."])[0]
            pool = await create_pool(database_url, min_size=1, max_size=2)
            try:
                await store_candidate_chunk(
                    pool, tenant_id=tenant_id, candidate=candidates[1], embedding=decoy
                )
            finally:
                await pool.close()
            again = await request(
                client,
                RerankRequest(
                    tenant_id=tenant_id, query=query, candidates=candidates, student=student
                ),
                RerankReply,
                timeout=30,
            )
            by_id = {c.candidate.chunk_id: c for c in again.chunks}
            expected = float(decoy @ minilm.embed_queries_sync([query])[0])
            assert by_id[candidates[1].chunk_id].semantic == pytest.approx(
                max(expected, 0), abs=1e-4
            )
            assert by_id[candidates[1].chunk_id].semantic < 0.3 < reply.chunks[0].semantic
            # another tenant's request does not see this tenant's vectors
            other = await request(
                client,
                RerankRequest(tenant_id=tenant_id + "-other", query=query, candidates=candidates),
                RerankReply,
                timeout=30,
            )
            first = {c.candidate.chunk_id: c.semantic for c in other.chunks}
            assert first[candidates[1].chunk_id] > 0.5
    finally:
        await retriever.close()
