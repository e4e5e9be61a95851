"""The re-ranker's responder with FastStream's ``TestNatsBroker``, in memory and (as
FastStream's own examples do) against the session's real NATS server (``with_real=True``): a
typed request in, a typed reply out; a body that is no request is answered ``bad_input``,
never dropped."""

import uuid
from collections.abc import Sequence
from typing import Literal

import pytest
from faststream.nats import TestNatsBroker

from lectern_common.broker import create_broker
from lectern_common.events import Candidate, RerankReply, RerankRequest, Subjects
from lectern_reranker.app import subscribe
from lectern_reranker.config import Settings
from lectern_reranker.handlers import Reranker


class WordOverlap:
    """A scorer without a model: the share of the query's words a text holds."""

    name: Literal["bi-encoder"] = "bi-encoder"

    async def score(self, query: str, texts: Sequence[str]) -> list[float]:
        words = set(query.lower().split())
        return [len(words & set(t.lower().split())) / max(1, len(words)) for t in texts]

    def count_tokens(self, text: str) -> int:
        return len(text.split())


def candidate(text: str) -> Candidate:
    return Candidate(chunk_id=uuid.uuid4(), document_id=uuid.uuid4(), title="Biology", text=text)


@pytest.mark.integration
async def test_on_rerank_answers_a_typed_request_over_real_nats(nats_url: str) -> None:
    await answers_a_typed_request(nats_url, real=True)


async def test_on_rerank_answers_a_typed_request() -> None:
    await answers_a_typed_request("nats://127.0.0.1:4222", real=False)


async def answers_a_typed_request(url: str, *, real: bool) -> None:
    broker = create_broker(url, service_name="lectern-reranker")
    subscribe(broker, Reranker(settings=Settings(), scorer=WordOverlap()))
    rerank = RerankRequest(
        tenant_id="t1",
        query="what does the mitochondria make",
        candidates=[
            candidate("Plants grow towards light."),
            candidate("The mitochondria make ATP for the cell."),
        ],
    )
    async with TestNatsBroker(broker, with_real=real) as br:
        raw = await br.request(rerank.model_dump(mode="json"), Subjects.RERANK, timeout=30)
        reply = RerankReply.model_validate_json(raw.body)
        on_rerank = broker.subscribers[0].calls[0].handler
        on_rerank.mock.assert_called_once_with(rerank.model_dump(mode="json"))
    assert reply.error is None
    assert reply.request_id == rerank.request_id
    assert {c.candidate.chunk_id for c in reply.chunks} == {c.chunk_id for c in rerank.candidates}
    assert reply.confidence is not None


async def test_an_invalid_request_is_answered_bad_input() -> None:
    broker = create_broker("nats://127.0.0.1:4222", service_name="lectern-reranker")
    subscribe(broker, Reranker(settings=Settings(), scorer=WordOverlap()))
    request_id = uuid.uuid4()
    async with TestNatsBroker(broker) as br:
        raw = await br.request(
            {"request_id": str(request_id), "query": ""}, Subjects.RERANK, timeout=30
        )
    reply = RerankReply.model_validate_json(raw.body)
    assert reply.error == "bad_input"
    assert reply.request_id == request_id
    assert "candidates" in (reply.error_message or "")


async def test_a_failure_is_answered_with_its_reason() -> None:
    broker = create_broker("nats://127.0.0.1:4222", service_name="lectern-reranker")
    subscribe(broker, Reranker(settings=Settings()))  # no scorer loaded: not started
    request = RerankRequest(tenant_id="t1", query="q", candidates=[candidate("text")])
    async with TestNatsBroker(broker) as br:
        raw = await br.request(request.model_dump(mode="json"), Subjects.RERANK, timeout=30)
    reply = RerankReply.model_validate_json(raw.body)
    assert reply.error is not None
    assert reply.request_id == request.request_id
