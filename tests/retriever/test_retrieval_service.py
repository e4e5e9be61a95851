"""The retriever service over real NATS, and the evaluation harness on a small BEIR set."""

from __future__ import annotations

import json
import math
import re
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from lectern_common.broker import create_broker, request
from lectern_common.embeddings import Embedder
from lectern_common.events import RetrieveReply, RetrieveRequest
from lectern_eval.retrieval import (
    DatasetError,
    document_ranking,
    evaluate,
    latency_summary,
    load_beir,
    mean_metrics,
    mrr_at,
    ndcg_at,
    percentile,
    recall_at,
    rerank_order,
)
from lectern_retriever.app import create_app
from lectern_retriever.config import Settings


@pytest.fixture(scope="module")
async def retriever_service(
    nats_url: str, database_url: str, embedder: Embedder
) -> AsyncIterator[Any]:
    """The retriever app (its lifespan: broker, subscriber, pool) and a client broker."""
    settings = Settings(nats_url=nats_url, database_url=database_url, http_port=0, log_json=False)
    app = create_app(settings, embedder=embedder)
    async with app.router.lifespan_context(app):
        client = create_broker(nats_url, service_name="retriever-tests")
        await client.connect()
        try:
            yield client
        finally:
            await client.stop()


@pytest.mark.integration
async def test_request_reply_over_nats(
    retriever_service: Any, db_pool: Any, embedder: Embedder, tenant_id: str, add_doc: Any
) -> None:
    texts = ["The French Revolution began in 1789 with the storming of the Bastille."]
    doc = await add_doc(
        db_pool, tenant_id=tenant_id, texts=texts, embedder=embedder, title="Revolutions",
        section_path=["Europe", "France"], page_start=4, page_end=5, subject="history",
    )  # fmt: skip
    await add_doc(
        db_pool, tenant_id=tenant_id, texts=["Cells divide by mitosis."], embedder=embedder
    )
    message = RetrieveRequest(tenant_id=tenant_id, query="when did the french revolution start?")
    reply = await request(retriever_service, message, RetrieveReply, timeout=20)
    assert reply.request_id == message.request_id
    top = reply.candidates[0]
    assert (top.document_id, top.title, top.text) == (doc, "Revolutions", texts[0])
    assert (top.section_path, top.page_start, top.page_end) == ("Europe > France", 4, 5)
    assert top.metadata["subject"] == "history"
    assert top.dense_rank == 1 and top.sparse_rank == 1
    assert reply.queries == ["when did the french revolution start?"]
    assert reply.timings_ms["total"] > 0

    bad = {"tenant_id": tenant_id, "query": ""}
    raw = await retriever_service.request(bad, RetrieveRequest.subject, timeout=10)
    assert RetrieveReply.model_validate_json(raw.body).error == "bad_input"


def test_rerank_order_puts_dropped_duplicates_after_their_twin() -> None:
    c1, c2, c3, c4, c5 = (uuid.uuid4() for _ in range(5))
    d1, d2, d3, d4, d5 = (uuid.uuid4() for _ in range(5))
    document_of = {c1: d1, c2: d2, c3: d3, c4: d4, c5: d5}
    # c4 and c2 repeat c3; c5 repeats a chunk the reply never kept (it stays out)
    order = rerank_order([(c3, d3), (c1, d1)], {c4: c3, c2: c3, c5: uuid.uuid4()}, document_of)
    assert order == [d3, d4, d2, d1]
    assert rerank_order([(c1, d1)], {}, document_of) == [d1]


def test_metrics_by_hand() -> None:
    relevant = {"d1": 1, "d4": 2}
    ranking = document_ranking(["d3", "d1", "d1", "d2", "d4"])
    assert ranking == ["d3", "d1", "d2", "d4"]
    dcg = 1 / math.log2(3) + 2 / math.log2(5)
    idcg = 2 / math.log2(2) + 1 / math.log2(3)
    assert ndcg_at(ranking, relevant, 10) == pytest.approx(dcg / idcg)
    assert ndcg_at(ranking, relevant, 1) == 0.0
    assert recall_at(ranking, relevant, 2) == 0.5
    assert recall_at(ranking, relevant, 5) == 1.0
    assert mrr_at(ranking, relevant, 10) == 0.5
    assert mrr_at(["x"], relevant, 10) == 0.0
    first = {"ndcg@10": 1.0, "recall@5": 0.5, "recall@10": 1, "recall@100": 1, "mrr@10": 1}
    second = {"ndcg@10": 0.5, "recall@5": 0.0, "recall@10": 0, "recall@100": 1, "mrr@10": 0}
    assert mean_metrics([first, second]) == {
        "ndcg@10": 0.75, "recall@5": 0.25, "recall@10": 0.5, "recall@100": 1.0, "mrr@10": 0.5
    }  # fmt: skip
    assert percentile([1, 2, 3, 4, 5], 50) == 3
    assert percentile([1, 2, 3, 4, 5], 95) == pytest.approx(4.8)
    assert latency_summary({"dense": [1.0, 3.0], "none": []}) == {"dense": {"p50": 2.0, "p95": 2.9}}


CORPUS = {
    "bio1": ("Photosynthesis", "Plants convert light energy into glucose in chloroplasts."),
    "bio2": ("Respiration", "Mitochondria release energy from glucose, producing ATP."),
    "his1": ("Revolution", "The French Revolution began in 1789 in Paris."),
    "his2": ("Empire", "Napoleon crowned himself emperor of the French in 1804."),
    "phy1": ("Motion", "Newton's second law: force equals mass times acceleration."),
    "phy2": ("Energy", "Kinetic energy is one half of mass times velocity squared."),
    # the same entry twice: the product keeps one document, which stands for both ids
    "phy1b": ("Motion", "Newton's second law: force equals mass times acceleration."),
}
QUERIES = {
    "q1": "how do plants make glucose from light",
    "q2": "when did the french revolution begin",
    "q3": "what does newton's second law say about force",
    "q4": "a question without judgements",
}
QRELS = [
    ("q1", "bio1", 1), ("q2", "his1", 1), ("q2", "his2", 0), ("q3", "phy1", 2), ("q3", "phy1b", 1)
]  # fmt: skip


def write_beir(directory: Path) -> None:
    """A tiny BEIR-format dataset."""
    (directory / "qrels").mkdir(parents=True)
    with (directory / "corpus.jsonl").open("w") as out:
        for doc_id, (title, text) in CORPUS.items():
            out.write(json.dumps({"_id": doc_id, "title": title, "text": text}) + "\n")
    with (directory / "queries.jsonl").open("w") as out:
        for query_id, text in QUERIES.items():
            out.write(json.dumps({"_id": query_id, "text": text}) + "\n")
    lines = ["query-id\tcorpus-id\tscore"] + [f"{q}\t{d}\t{s}" for q, d, s in QRELS]
    (directory / "qrels" / "test.tsv").write_text("\n".join(lines) + "\n")


def test_load_beir_keeps_judged_queries(tmp_path: Path) -> None:
    write_beir(tmp_path / "tiny")
    dataset = load_beir(tmp_path / "tiny")
    assert dataset.name == "tiny"
    assert sorted(dataset.queries) == ["q1", "q2", "q3"]
    assert dataset.qrels["q2"] == {"his1": 1}  # score 0 is not relevant
    assert dataset.corpus["phy1"][0] == "Motion"


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda d: (d / "queries.jsonl").unlink(), "queries.jsonl not found"),
        (lambda d: (d / "qrels" / "test.tsv").unlink(), "qrels/test.tsv not found"),
        (
            lambda d: (d / "corpus.jsonl").write_text('{"_id": "a", "text": "x"}\n{"_id": "b",\n'),
            "corpus.jsonl:2: not a JSON object",
        ),
        (
            lambda d: (d / "corpus.jsonl").write_text('{"title": "no id", "text": "x"}\n'),
            'corpus.jsonl:1: a JSON object with an "_id" is expected',
        ),
        (
            lambda d: (d / "qrels" / "test.tsv").write_text(
                "query-id\tcorpus-id\tscore\nq1 bio1 1\n"
            ),
            "test.tsv:2: expected query-id, corpus-id and an integer score",
        ),
        (
            lambda d: (d / "qrels" / "test.tsv").write_text("q1\tbio1\t0\nq9\tbio1\t1\n"),
            "no query of",
        ),
    ],
)
def test_load_beir_names_what_is_wrong(
    tmp_path: Path, damage: Callable[[Path], object], message: str
) -> None:
    write_beir(tmp_path / "tiny")
    damage(tmp_path / "tiny")
    with pytest.raises(DatasetError, match=re.escape(message)):
        load_beir(tmp_path / "tiny")


def test_eval_cli_reports_a_bad_dataset_without_starting_anything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from lectern_cli.main import main

    assert main(["eval", "--dataset", str(tmp_path / "absent")]) == 2
    assert "is not a BEIR-format dataset" in capsys.readouterr().err


@pytest.fixture(scope="module")
async def ingest_service(
    nats_url: str, database_url: str, embedder: Embedder
) -> AsyncIterator[Any]:
    """The ingest service (its durable consumer), which the harness uploads go through."""
    from lectern_ingest.app import create_app as create_ingest
    from lectern_ingest.config import Settings as IngestSettings

    app = create_ingest(
        IngestSettings(nats_url=nats_url, database_url=database_url, http_port=0, log_json=False),
        embedder=embedder,
    )
    async with app.router.lifespan_context(app):
        yield app


@pytest.fixture(scope="module")
async def gateway_service(nats_url: str, database_url: str) -> AsyncIterator[Any]:
    """The gateway over HTTP, which the harness uploads documents through."""
    from lectern_testing.chat import gateway_settings, serve_gateway

    async with serve_gateway(gateway_settings(nats_url, database_url)) as gateway:
        yield gateway


@pytest.mark.integration
async def test_eval_harness_end_to_end(
    retriever_service: Any,
    ingest_service: Any,
    gateway_service: Any,
    nats_url: str,
    database_url: str,
    tmp_path: Path,
) -> None:
    write_beir(tmp_path / "tiny")
    result = await evaluate(
        dataset_dir=tmp_path / "tiny",
        gateway_url=gateway_service.url,
        secret=gateway_service.settings.effective_jwt_secret,
        nats_url=nats_url,
        database_url=database_url,
        methods=["dense", "sparse", "hybrid"],
    )
    out = result.to_json()
    assert out["dataset"] == "tiny" and out["queries"] == 3 and out["documents"] == 7
    # uploaded and indexed through the gateway and the ingest service, not written directly
    assert out["load_seconds"] > 0 and "notes" not in out
    assert set(out["methods"]) == {"dense", "sparse", "hybrid"}
    for values in out["methods"].values():
        assert set(values) == {"ndcg@10", "recall@5", "recall@10", "recall@100", "mrr@10"}
        # every question has one obvious answer in this corpus
        assert values["mrr@10"] == 1.0 and values["recall@5"] == 1.0
    assert {"embed", "dense", "sparse", "fuse", "total", "request"} <= set(out["latency_ms"])
    assert all(v["p95"] >= v["p50"] >= 0 for v in out["latency_ms"].values())


@pytest.mark.integration
async def test_gateway_search_route(
    retriever_service: Any,
    nats_url: str,
    database_url: str,
    db_pool: Any,
    embedder: Embedder,
    tenant_id: str,
    add_doc: Any,
) -> None:
    import httpx

    from lectern_gateway.app import create_app as create_gateway
    from lectern_gateway.auth import Role, issue_token
    from lectern_gateway.config import Settings as GatewaySettings

    lesson = await add_doc(
        db_pool, tenant_id=tenant_id, texts=["Volcanoes erupt when magma rises."],
        embedder=embedder, title="Volcanoes",
    )  # fmt: skip
    exam = await add_doc(
        db_pool, tenant_id=tenant_id, texts=["Exam: why do volcanoes erupt? Magma rises."],
        embedder=embedder, collection="assessment",
    )  # fmt: skip
    settings = GatewaySettings(
        nats_url=nats_url, database_url=database_url, http_port=0, log_json=False
    )
    gateway = create_gateway(settings)
    secret = settings.effective_jwt_secret

    def bearer(role: Role) -> dict[str, str]:
        token = issue_token(secret=secret, tenant_id=tenant_id, user_id="u1", role=role)
        return {"Authorization": f"Bearer {token}"}

    body = {"query": "why do volcanoes erupt", "filters": {"collections": ["assessment"]}}
    async with gateway.router.lifespan_context(gateway):
        transport = httpx.ASGITransport(app=gateway)
        async with httpx.AsyncClient(transport=transport, base_url="http://gw") as http:
            student = await http.post("/v1/search", json=body, headers=bearer("student"))
            teacher = await http.post("/v1/search", json=body, headers=bearer("teacher"))
            anonymous = await http.post("/v1/search", json=body)
    assert student.status_code == 200, student.text
    # students are held to the educational collection whatever they ask for
    assert [c["document_id"] for c in student.json()["candidates"]] == [str(lesson)]
    assert [c["document_id"] for c in teacher.json()["candidates"]] == [str(exam)]
    assert set(student.json()["timings_ms"]) >= {"dense", "sparse", "total"}
    assert anonymous.status_code == 401


@pytest.mark.integration
async def test_eval_reports_rerank_and_confidence_bands(
    retriever_service: Any,
    ingest_service: Any,
    gateway_service: Any,
    nats_url: str,
    database_url: str,
    tmp_path: Path,
) -> None:
    from lectern_reranker.app import create_app as create_reranker
    from lectern_reranker.config import Settings as RerankerSettings

    write_beir(tmp_path / "tiny")
    reranker = create_reranker(
        RerankerSettings(nats_url=nats_url, database_url=database_url, http_port=0, log_json=False)
    )
    offtopic = ["Who won the football world cup in 1998?", "How do I bake sourdough bread?"]
    async with reranker.router.lifespan_context(reranker):
        result = await evaluate(
            dataset_dir=tmp_path / "tiny",
            gateway_url=gateway_service.url,
            secret=gateway_service.settings.effective_jwt_secret,
            nats_url=nats_url,
            database_url=database_url,
            methods=["hybrid", "hybrid+rerank"],
            offtopic=offtopic,
        )
    out = result.to_json()
    assert set(out["methods"]) == {"hybrid", "hybrid+rerank"}
    assert out["methods"]["hybrid+rerank"]["recall@5"] == 1.0
    assert "rerank" in out["latency_ms"]
    bands = out["bands"]
    assert set(bands) == {"answerable", "offtopic"}
    for shares in bands.values():
        assert set(shares) == {"high", "medium", "low", "gap"}
        assert math.isclose(sum(shares.values()), 1.0)
    # the corpus cannot answer these: the re-ranker's confidence says so
    assert bands["offtopic"]["gap"] == 1.0
    assert bands["answerable"]["gap"] < 1.0
