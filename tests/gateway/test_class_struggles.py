"""What a class finds hard, for its teacher: aggregates over the roster, never one student."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import numpy as np
import pytest
from lectern_testing.chat import Gateway, offline_gateway
from lectern_testing.plugin import LOCAL_EMBEDDING_DIM

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
async def gateway(nats_url: str, database_url: str, db_pool: Any) -> AsyncIterator[Gateway]:
    async with offline_gateway(nats_url, database_url, db_pool) as running:
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
