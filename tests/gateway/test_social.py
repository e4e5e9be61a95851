"""Small talk ("thanks!", "ok cool", "hello") gets a reply in kind: nothing looked up, no
knowledge gap, nothing for memory to learn; anything with a word of its own is a question."""

from __future__ import annotations

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
    published,
    run_responders,
    seed_document,
    serve_gateway,
)

from lectern_common.events import Subjects
from lectern_gateway.chat.social import REPLIES, social_kind

pytestmark = pytest.mark.integration


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("thanks!", "thanks"),
        ("thank you, that was clear", "thanks"),
        ("Danke!", "thanks"),
        ("ok cool", "assent"),
        ("I get it now", "assent"),
        ("hello", "greeting"),
        ("bye!", "parting"),
        ("thanks, but why?", None),  # a question
        ("I don't get it", None),  # a statement of confusion: for memory to read
        ("cool, what about meiosis", None),  # a word of its own
        ("What does RuBisCO catalyse?", None),
    ],
)
def test_small_talk_is_told_from_questions(text: str, kind: str | None) -> None:
    assert social_kind(text) == kind


@pytest.fixture(scope="module")
async def gateway(nats_url: str, database_url: str, db_pool: Any) -> AsyncIterator[Gateway]:
    async with (
        run_responders(nats_url, Responders(pool=db_pool)),
        serve_gateway(gateway_settings(nats_url, database_url)) as running,
    ):
        yield running


@pytest.mark.parametrize("mode", ["chat", "tutor"])
async def test_small_talk_is_answered_in_kind_without_retrieval(
    gateway: Gateway, db_pool: Any, tenant_id: str, jetstream: Any, mode: str
) -> None:
    await seed_document(db_pool, tenant_id=tenant_id)
    student = gateway.token(tenant_id, "stu-social")
    async with httpx.AsyncClient(timeout=30) as client:
        session = await new_session(client, gateway, student, mode=mode)
        asked = await ask(client, gateway, session["id"], "What does RuBisCO catalyse?", student)
        thanked = await ask(client, gateway, session["id"], "thanks!", student)
    assert asked.done.answered_by == "offline" and asked.of("sources")[0].sources
    if mode == "tutor":  # the thank-you moved on from the answer's check: skipped, as before
        assert thanked.done.answered_by == "tutor-check"
        return
    assert thanked.text == REPLIES["thanks"]
    assert thanked.done.answered_by == "social" and not thanked.done.knowledge_gap
    assert thanked.of("sources")[0].sources == [] and thanked.done.citations == []
    gaps = await db_pool.fetchval("SELECT count(*) FROM knowledge_gaps WHERE tenant_id = $1",
                                  tenant_id)  # fmt: skip
    assert gaps == 0
    events = await published(jetstream, Subjects.CHAT_TURN_COMPLETED, tenant_id, expect=2)
    assert sorted(e["answered_by"] for e in events) == ["offline", "social"]
