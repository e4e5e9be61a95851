"""What a class finds hard, for its teacher: aggregates over the roster, never one student.
The memories are the memory service's: the gateway asks it (``lectern.memory.topics.v1``,
``lectern.memory.list.v1``), so the real memory service runs beside the gateway."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import numpy as np
import pytest
from lectern_testing.chat import Gateway, memory_service, offline_gateway
from lectern_testing.plugin import LOCAL_EMBEDDING_DIM

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
async def gateway(nats_url: str, database_url: str, db_pool: Any) -> AsyncIterator[Gateway]:
    async with (
        memory_service(nats_url, database_url),
        offline_gateway(nats_url, database_url, db_pool) as running,
    ):
        yield running


async def _remember(pool: Any, tenant_id: str, user: str, kind: str, topic: str) -> None:
    await pool.execute(
        "INSERT INTO user_memories (id, tenant_id, user_id, kind, text, topic, embedding, "
        "evidence) VALUES ($1, $2, $3, $4, $5, $6, $7, $8::jsonb)",
        uuid.uuid4(), tenant_id, user, kind, f"Found {topic} hard", topic,
        np.ones(LOCAL_EMBEDDING_DIM, dtype=np.float32),
        [{"kind": "said", "detail": "secret words of " + user, "at": ""}],
    )  # fmt: skip


async def test_a_teacher_sees_what_the_class_finds_hard_never_who(
    gateway: Gateway, db_pool: Any, tenant_id: str
) -> None:
    teacher = gateway.token(tenant_id, "t-1", role="teacher")
    async with httpx.AsyncClient(timeout=30) as client:
        for student in ("ana", "ben", "cho"):
            put = await client.put(
                f"{gateway.url}/v1/classes/9C/students/{student}", headers=teacher
            )
            assert put.status_code == 200, put.text
        await _remember(db_pool, tenant_id, "ana", "struggle", "meiosis")
        await _remember(db_pool, tenant_id, "ben", "struggle", "meiosis")
        await _remember(db_pool, tenant_id, "cho", "struggle", "osmosis")  # one child: hidden
        await _remember(db_pool, tenant_id, "cho", "mastered", "meiosis")
        await _remember(db_pool, tenant_id, "dan", "struggle", "meiosis")  # not on the roster
        got = await client.get(f"{gateway.url}/v1/classes/9C/struggles", headers=teacher)
        assert got.status_code == 200, got.text
        assert got.json() == [{"topic": "meiosis", "students": 2, "evidence": 2}]
        assert "ana" not in got.text and "secret" not in got.text
        ana = gateway.token(tenant_id, "ana")
        refused = await client.get(f"{gateway.url}/v1/classes/9C/struggles", headers=ana)
        assert refused.status_code == 403


async def test_a_tenant_may_let_teachers_see_each_student_without_their_words(
    gateway: Gateway, db_pool: Any, tenant_id: str
) -> None:
    teacher = gateway.token(tenant_id, "t-1", role="teacher")
    admin = gateway.token(tenant_id, "a-1", role="admin")
    url = f"{gateway.url}/v1/classes/8B/students/eve/memories"
    async with httpx.AsyncClient(timeout=30) as client:
        assert (await client.put(f"{gateway.url}/v1/classes/8B/students/eve", headers=teacher)
                ).status_code == 200  # fmt: skip
        await _remember(db_pool, tenant_id, "eve", "struggle", "meiosis")
        await _remember(db_pool, tenant_id, "eve", "mastered", "osmosis")
        await _remember(db_pool, tenant_id, "eve", "preference", "short answers")
        # the default: aggregates only
        refused = await client.get(url, headers=teacher)
        assert refused.status_code == 403, refused.text
        assert refused.json()["reason"] == "aggregates_only"
        assert refused.headers["content-type"].startswith("application/problem+json")
        # an admin allows more
        put = await client.put(
            f"{gateway.url}/v1/tenant/settings", json={"teachers_see_students": True},
            headers=admin,
        )  # fmt: skip
        assert put.status_code == 200 and put.json()["teachers_see_students"] is True
        seen = await client.get(url, headers=teacher)
        assert seen.status_code == 200, seen.text
        assert {(m["kind"], m["topic"]) for m in seen.json()} == {
            ("struggle", "meiosis"),
            ("mastered", "osmosis"),
        }  # the preference stays the student's
        assert "secret words" not in seen.text  # what the student said is summed up, not quoted
        assert all(m["because"] == "said so 1 time" for m in seen.json())
        # only students on the roster, and never to other students
        assert (await client.get(
            f"{gateway.url}/v1/classes/8B/students/zed/memories", headers=teacher
        )).status_code == 404  # fmt: skip
        eve = gateway.token(tenant_id, "eve")
        assert (await client.get(url, headers=eve)).status_code == 403
        # the setting left out of a later change stays; null goes back to aggregates only
        kept = await client.put(
            f"{gateway.url}/v1/tenant/settings", json={"web_search": False}, headers=admin
        )
        assert kept.json()["teachers_see_students"] is True
        back = await client.put(
            f"{gateway.url}/v1/tenant/settings", json={"teachers_see_students": None},
            headers=admin,
        )  # fmt: skip
        assert back.json()["teachers_see_students"] is False
        assert (await client.get(url, headers=teacher)).status_code == 403
