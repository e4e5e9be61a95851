"""The quality dashboard against the stored messages: after a scripted mix of answered, gap
and flagged turns, every figure equals what the messages say."""

from __future__ import annotations

import io
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from lectern_testing.chat import (
    Gateway,
    Responders,
    ask,
    gateway_settings,
    new_session,
    run_responders,
    seed_document,
    serve_gateway,
)

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
async def responders(nats_url: str, db_pool: Any) -> AsyncIterator[Responders]:
    async with run_responders(nats_url, Responders(pool=db_pool)) as running:
        yield running


@pytest.fixture(scope="module")
async def gateway(
    nats_url: str, database_url: str, responders: Responders
) -> AsyncIterator[Gateway]:
    async with serve_gateway(gateway_settings(nats_url, database_url)) as running:
        yield running


async def test_the_dashboard_equals_the_stored_messages(
    gateway: Gateway, responders: Responders, db_pool: Any, tenant_id: str
) -> None:
    seeded = await seed_document(db_pool, tenant_id=tenant_id)
    tectonics: list[tuple[str, list[str], list[str]]] = [
        ("Plate tectonics moves continents a few centimetres a year.", ["Geology"], [])
    ]
    unused = await seed_document(
        db_pool, tenant_id=tenant_id, title="Never cited", chunks=tectonics
    )
    admin = gateway.token(tenant_id, "admin-1", role="admin")
    teacher = gateway.token(tenant_id, "t-1", role="teacher")
    student = gateway.token(tenant_id, "stu-1")
    async with httpx.AsyncClient(timeout=60) as client:
        await client.post(
            f"{gateway.url}/v1/personas",
            json={"slug": "bio", "display_name": "Bio", "scope": {"subjects": ["biology"]}},
            headers=teacher,
        )
        plain = await new_session(client, gateway, student)
        tutored = await new_session(client, gateway, student, persona="bio")
        answered = [
            await ask(client, gateway, plain["id"], "What does RuBisCO catalyse?", student),
            await ask(client, gateway, plain["id"], "Where does photosynthesis happen?", student),
            await ask(client, gateway, tutored["id"], "What does the Calvin cycle fix?", student),
        ]
        responders.band = "gap"
        try:
            gaps = [
                await ask(client, gateway, plain["id"], "Explain quantum entanglement", student),
                await ask(client, gateway, tutored["id"], "Who won the 1998 World Cup?", student),
            ]
        finally:
            responders.band = "high"
        assert all(g.done.knowledge_gap for g in gaps)
        flagged = await client.post(
            f"{gateway.url}/v1/messages/{answered[0].done.message_id}/flags",
            json={"reason": "unclear"}, headers=student,
        )  # fmt: skip
        assert flagged.status_code == 201
        got = await client.get(
            f"{gateway.url}/v1/metrics/quality", params={"group_by": "persona"}, headers=admin
        )
        assert got.status_code == 200, got.text
        dashboard = got.json()
        behind = await client.get(
            f"{gateway.url}{dashboard['totals']['questions_url']}", headers=admin
        )
        refused = await client.get(f"{gateway.url}/v1/metrics/quality", headers=student)
        as_teacher = await client.get(f"{gateway.url}/v1/metrics/quality", headers=teacher)

    # recomputed from what is stored
    questions = await db_pool.fetchval(
        "SELECT count(*) FROM chat_messages WHERE tenant_id = $1 AND role = 'user'", tenant_id
    )
    bands = dict(await db_pool.fetch(
        "SELECT confidence_band, count(*) FROM chat_messages WHERE tenant_id = $1 "
        "AND role = 'assistant' GROUP BY 1", tenant_id))  # fmt: skip
    cited = await db_pool.fetch(
        "SELECT id, (SELECT array_agg(DISTINCT c->>'document_id') FROM jsonb_array_elements("
        "citations) c WHERE c->>'document_id' IS NOT NULL) AS docs FROM chat_messages "
        "WHERE tenant_id = $1 AND role = 'assistant'", tenant_id)  # fmt: skip
    flags = await db_pool.fetchval(
        "SELECT count(*) FROM feedback_flags WHERE tenant_id = $1", tenant_id
    )
    topics = dict(
        await db_pool.fetch(
            "SELECT topic, count(*) FROM knowledge_gaps WHERE tenant_id = $1 GROUP BY 1", tenant_id
        )
    )

    totals = dashboard["totals"]
    assert totals["questions"] == questions == 5
    assert {b: n for b, n in totals["answers"].items() if n} == bands
    assert totals["gap_rate"] == round(bands["gap"] / questions, 4)
    assert totals["flagged"] == flags == 1
    with_docs = [r for r in cited if r["docs"]]
    assert totals["with_citations"] == round(len(with_docs) / questions, 4)
    assert totals["ttft_ms"]["p95"] is not None and totals["retrieval_ms"]["p50"] is not None
    assert {t["topic"]: t["questions"] for t in dashboard["top_gap_topics"]} == topics
    counts: dict[str, int] = {}
    for row in with_docs:
        for doc in row["docs"]:
            counts[doc] = counts.get(doc, 0) + 1
    assert {c["document_id"]: c["citations"] for c in dashboard["most_cited"]} == counts
    assert str(seeded.document_id) in counts
    assert [d["document_id"] for d in dashboard["never_cited"]] == [str(unused.document_id)]
    # grouped by persona: the persona's questions apart from the others
    groups = {s["group"]: s["questions"] for s in dashboard["series"]}
    assert groups == {"": 3, "bio": 2}
    # each figure links to the questions behind it
    assert behind.status_code == 200 and len(behind.json()) == questions
    assert sum(r["flagged"] for r in behind.json()) == 1
    assert refused.status_code == 403
    # a teacher with no class of their own sees the class-less sessions: the same figures
    assert as_teacher.json()["totals"]["questions"] == 5
    assert as_teacher.json()["scope"] == "classes"


async def test_the_cli_prints_the_dashboard(gateway: Gateway, db_pool: Any, tenant_id: str) -> None:
    from lectern_cli.quality_cmd import quality

    await seed_document(db_pool, tenant_id=tenant_id)
    student = gateway.token(tenant_id, "stu-1")
    async with httpx.AsyncClient(timeout=60) as client:
        session = await new_session(client, gateway, student)
        await ask(client, gateway, session["id"], "What does RuBisCO catalyse?", student)
    token = gateway.token(tenant_id, "admin-1", role="admin")["Authorization"].split()[1]
    out = io.StringIO()
    assert await quality(url=gateway.url, token=token, out=out, days=3, by="none") == 0
    lines = out.getvalue().splitlines()
    assert lines[0].split()[:3] == ["day", "group", "asked"]
    total = next(line for line in lines if line.startswith("total"))
    assert total.split()[2] == "1"  # one question asked
    assert "most cited: Biology notes (1)" in out.getvalue()
    bad = gateway.token(tenant_id, "stu-1")["Authorization"].split()[1]
    assert await quality(url=gateway.url, token=bad, out=io.StringIO(), days=3, by="none") == 1


@pytest.mark.parametrize(
    ("path", "params"),
    [
        ("/v1/metrics/quality", {"to": "0001-01-05"}),  # once a 500: the default range overflowed
        ("/v1/metrics/quality", {"from": "0001-01-01", "to": "0001-01-02"}),
        ("/v1/metrics/quality", {"from": "2026-03-01", "to": "2026-01-01"}),
        ("/v1/metrics/quality", {"from": "2024-01-01", "to": "2026-01-01"}),
        ("/v1/metrics/quality/questions", {"day": "9999-12-31"}),
        ("/v1/metrics/quality/questions", {"start": "2026-03-01", "end": "2026-01-01"}),
    ],
)
async def test_days_out_of_range_are_a_clear_422(
    gateway: Gateway, tenant_id: str, path: str, params: dict[str, str]
) -> None:
    admin = gateway.token(tenant_id, "admin-1", role="admin")
    async with httpx.AsyncClient(timeout=30) as client:
        got = await client.get(f"{gateway.url}{path}", params=params, headers=admin)
    assert got.status_code == 422, got.text
    assert got.headers["content-type"].startswith("application/problem+json")
    assert "days" in got.json()["detail"] or "before" in got.json()["detail"]
