"""Curriculum tagging through the gateway, the real retriever (local MiniLM) and the real
ingest service (which owns the chunks the confirmed standards are written to,
``lectern.chunks.curriculum.v1``): standards uploaded as CSV, proposals for a document and
its sections by embedding similarity, a teacher's confirmation, and search filtered by the
confirmed standards."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from lectern_testing.chat import Gateway, gateway_settings, seed_document, serve_gateway

from lectern_common.embeddings import LocalEmbedder

pytestmark = [pytest.mark.integration, pytest.mark.slow]

lectern_retriever_app = pytest.importorskip("lectern_retriever.app")

MATERIAL: list[tuple[str, list[str], list[str]]] = [
    ("Mitosis is a type of cell division that produces two identical daughter cells. "
     "Chromosomes condense, line up and are pulled apart.", ["1 Cells", "1.1 Mitosis"], []),
    ("Meiosis is a type of cell division that produces four different gametes for sexual "
     "reproduction.", ["1 Cells", "1.2 Meiosis"], []),
    ("Photosynthesis converts light energy into chemical energy stored in glucose; "
     "chlorophyll in the chloroplasts absorbs the light.", ["2 Plants", "2.1 Photosynthesis"],
     []),
]  # fmt: skip
STANDARDS = """code,description,subject,grade
LS1-CELL,"Explain how cells divide by mitosis and meiosis, and what each produces",biology,9
LS1-PHOTO,"Describe how photosynthesis in plants turns light energy into stored chemical energy",biology,9
MA-ALG,"Solve linear equations and inequalities in one variable",mathematics,9
HI-WW2,"Explain the causes and the course of the Second World War",history,9
"""  # noqa: E501


@pytest.fixture(scope="module")
async def stack(nats_url: str, database_url: str) -> AsyncIterator[tuple[Gateway, LocalEmbedder]]:
    from lectern_ingest.app import create_app as create_ingest
    from lectern_ingest.config import Settings as IngestSettings
    from lectern_retriever.config import Settings as RetrieverSettings

    common: dict[str, Any] = {"nats_url": nats_url, "database_url": database_url,
                              "http_port": 0, "log_json": False}  # fmt: skip
    embedder = LocalEmbedder(RetrieverSettings(**common))
    retriever = lectern_retriever_app.create_app(RetrieverSettings(**common), embedder=embedder)
    ingest = create_ingest(IngestSettings(**common, gc_interval_s=0), embedder=embedder)
    async with (
        retriever.router.lifespan_context(retriever),
        ingest.router.lifespan_context(ingest),
        serve_gateway(gateway_settings(nats_url, database_url)) as gateway,
    ):
        yield gateway, embedder


async def test_standards_are_proposed_confirmed_and_filter_search(
    stack: tuple[Gateway, LocalEmbedder], db_pool: Any, tenant_id: str
) -> None:
    gateway, embedder = stack
    seeded = await seed_document(db_pool, tenant_id=tenant_id, chunks=MATERIAL)
    vectors = await embedder.embed_documents([text for text, _, _ in MATERIAL])
    for chunk_id, vector in zip(seeded.chunk_ids, vectors, strict=True):
        await db_pool.execute("UPDATE chunks SET embedding = $2 WHERE id = $1", chunk_id, vector)
    teacher = gateway.token(tenant_id, "t-1", role="teacher")
    student = gateway.token(tenant_id, "maya")
    csv_type = {"content-type": "text/csv"}
    async with httpx.AsyncClient(base_url=gateway.url, timeout=60) as client:
        refused = await client.post("/v1/curriculum/standards", content=STANDARDS,
                                    headers={**student, **csv_type})  # fmt: skip
        assert refused.status_code == 403
        bad = await client.post("/v1/curriculum/standards", content="code,description\n,x\n",
                                headers={**teacher, **csv_type})  # fmt: skip
        assert bad.status_code == 422
        assert bad.headers["content-type"].startswith("application/problem+json")
        uploaded = await client.post("/v1/curriculum/standards", content=STANDARDS,
                                     headers={**teacher, **csv_type})  # fmt: skip
        assert uploaded.json() == {"imported": 4}
        listed = await client.get("/v1/curriculum/standards", headers=student,
                                  params={"subject": "Biology"})  # fmt: skip
        assert [s["code"] for s in listed.json()] == ["LS1-CELL", "LS1-PHOTO"]
        # a code given twice in one upload: its last entry, as a later upload would replace it
        said = ("Prove theorems about triangles", "Prove theorems about circles")
        geometry = [{"code": "MA-GEO", "description": d, "subject": "mathematics"} for d in said]
        twice = await client.post("/v1/curriculum/standards", json={"standards": geometry},
                                  headers=teacher)  # fmt: skip
        assert twice.status_code == 200, twice.text
        maths = await client.get("/v1/curriculum/standards", headers=student,
                                 params={"subject": "mathematics"})  # fmt: skip
        assert [(s["code"], s["description"]) for s in maths.json()] == [
            ("MA-ALG", "Solve linear equations and inequalities in one variable"),
            ("MA-GEO", "Prove theorems about circles"),
        ]

        url = f"/v1/documents/{seeded.document_id}/curriculum"
        proposed = (await client.get(url, headers=teacher)).json()
        # the document's subject (biology) keeps other subjects' standards out
        assert {p["code"] for p in proposed["proposals"]} == {"LS1-CELL", "LS1-PHOTO"}
        by_section = {s["path"][0]: s["proposals"][0]["code"] for s in proposed["sections"]}
        assert by_section == {"1 Cells": "LS1-CELL", "2 Plants": "LS1-PHOTO"}

        unknown = await client.post(url, headers=teacher, json={"document": ["NOPE"]})
        assert unknown.status_code == 422
        confirmed = await client.post(url, headers=teacher, json={
            "sections": [{"path": ["1 Cells"], "standards": ["LS1-CELL"]}]})  # fmt: skip
        assert confirmed.status_code == 200, confirmed.text
        cells = next(s for s in confirmed.json()["sections"] if s["path"][0] == "1 Cells")
        assert cells["confirmed"] == ["LS1-CELL"]

        search = {"query": "how do cells and plants work", "rewrite": False,
                  "filters": {"curriculum_standards": ["LS1-CELL"]}}  # fmt: skip
        found = await client.post("/v1/search", headers=student, json=search)
        assert found.status_code == 200, found.text
        ids = {c["chunk_id"] for c in found.json()["candidates"]}
        assert ids == {str(i) for i in seeded.chunk_ids[:2]}
        search["filters"]["include_untagged"] = True  # type: ignore[index]
        everything = await client.post("/v1/search", headers=student, json=search)
        assert {c["chunk_id"] for c in everything.json()["candidates"]} == {
            str(i) for i in seeded.chunk_ids}  # fmt: skip
