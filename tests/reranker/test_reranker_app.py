"""The reranker as deployed: start-up loads the model, requests answered over NATS."""

import uuid

import httpx
import pytest

from lectern_common.broker import create_broker, request
from lectern_common.errors import RetryableError
from lectern_common.events import Candidate, RerankReply, RerankRequest, StudentContext
from lectern_reranker.app import create_app
from lectern_reranker.config import Settings

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def chunk(text: str, **metadata: object) -> Candidate:
    return Candidate(
        chunk_id=uuid.uuid4(),
        document_id=uuid.uuid4(),
        title="Biology",
        text=text,
        metadata=dict(metadata),
    )


async def test_rerank_over_nats(nats_url: str, database_url: str, tenant_id: str) -> None:
    app = create_app(
        Settings(nats_url=nats_url, database_url=database_url, http_port=0, log_json=False)
    )
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
    async with app.router.lifespan_context(app), client:
        await client.start()
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://reranker") as http:
            ready = await http.get("/readyz")
        assert ready.status_code == 200, ready.text
        assert ready.json()["checks"]["models"] == "ok"

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
