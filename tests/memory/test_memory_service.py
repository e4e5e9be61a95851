"""Distillation, merging and recall against a real Postgres with pgvector."""

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import pytest

from lectern_common.embeddings import Embedder
from lectern_common.events import (
    ChatSessionEnded,
    ChatTurnCompleted,
    FeedbackFlagged,
    MemoryRecallRequest,
    QuizAnswerResult,
    QuizAttempted,
)
from lectern_common.events.chat import ConfidenceBand
from lectern_common.events.memory import MemoryExportRequest
from lectern_gateway.privacy.export import ExportedCheckRun
from lectern_memory import records
from lectern_memory.config import Settings
from lectern_memory.handlers import handle_flagged
from lectern_memory.service import MemoryService, TurnsNotArrived

pytestmark = pytest.mark.integration

ANSWER_OK = "Photosynthesis turns light, water and carbon dioxide into glucose and oxygen [T1]."


def turn_event(
    tenant_id: str,
    user_id: str,
    session_id: uuid.UUID,
    question: str,
    *,
    band: ConfidenceBand = "high",
    topic: str | None = None,
    at: datetime | None = None,
) -> ChatTurnCompleted:
    # what the gateway finds the message is about in its material: here the topic itself
    return ChatTurnCompleted(
        tenant_id=tenant_id, session_id=session_id, user_id=user_id,
        user_message_id=uuid.uuid4(), assistant_message_id=uuid.uuid4(), question=question,
        answer=ANSWER_OK, confidence={"high": 0.9, "medium": 0.7, "low": 0.5, "gap": 0.2}[band],
        band=band, topic=topic, topics=[topic] if topic else [],
        occurred_at=at or datetime.now(UTC),
    )  # fmt: skip


async def run_session(
    service: MemoryService,
    pool: Any,
    tenant_id: str,
    user_id: str,
    turns: list[tuple[str, ConfidenceBand, str | None]],
) -> tuple[ChatSessionEnded, Any]:
    session_id = uuid.uuid4()
    start = datetime.now(UTC)
    for i, (question, band, topic) in enumerate(turns):
        event = turn_event(tenant_id, user_id, session_id, question, band=band, topic=topic,
                           at=start + timedelta(seconds=i))  # fmt: skip
        await service.record_turn(pool=pool, event=event)
    ended = ChatSessionEnded(
        tenant_id=tenant_id, session_id=session_id, user_id=user_id, message_count=2 * len(turns)
    )
    return ended, await service.distil_session(pool=pool, event=ended)


async def memories(pool: Any, tenant_id: str, user_id: str) -> list[Any]:
    return list(
        await pool.fetch(
            "SELECT id, kind, topic, text, strength FROM user_memories "
            "WHERE tenant_id = $1 AND user_id = $2 ORDER BY kind, topic",
            tenant_id,
            user_id,
        )
    )


@pytest.fixture
def service(memory_settings: Settings, embedder: Embedder) -> MemoryService:
    # the struggle classifier reads messages with the same packaged MiniLM
    return MemoryService(
        settings=memory_settings, embedder=embedder, encode=embedder.embed_documents
    )


async def test_struggle_is_distilled_and_redelivery_does_not_duplicate(
    service: MemoryService, db_pool: Any, tenant_id: str
) -> None:
    ended, first = await run_session(
        service, db_pool, tenant_id, "s1",
        [("What is photosynthesis?", "high", None),
         ("I really don't get meiosis, it makes no sense to me. How does it work?", "high",
          "meiosis")],
    )  # fmt: skip
    rows = await memories(db_pool, tenant_id, "s1")
    # asking is interest, not mastery: no "mastered" from a confident answer
    assert {r["kind"] for r in rows} == {"struggle", "takeaway"}
    assert any(r["kind"] == "struggle" and r["topic"] == "meiosis" for r in rows)
    again = await service.distil_session(pool=db_pool, event=ended)
    assert sorted(again.created) == sorted(first.created)
    assert len(await memories(db_pool, tenant_id, "s1")) == len(rows)


Outcome = Literal["right", "partly", "wrong", "skipped"]
DOCUMENT = uuid.UUID("5e5e5e5e-0000-4000-8000-000000000001")


def check_attempt(
    tenant_id: str,
    user_id: str,
    topic: str,
    outcome: Outcome,
    session_id: uuid.UUID | None = None,
    section: str | None = None,
) -> QuizAttempted:
    return QuizAttempted(
        tenant_id=tenant_id, attempt_id=uuid.uuid4(), quiz_id=uuid.uuid4(), user_id=user_id,
        correct=int(outcome == "right"), total=1, session_id=session_id,
        results=[QuizAnswerResult(question_id="q", kind="short_answer",
                                  correct=outcome == "right", outcome=outcome, topic=topic,
                                  document_id=DOCUMENT, section=section)],
    )  # fmt: skip


async def mastered(pool: Any, tenant_id: str, user_id: str) -> list[tuple[str, str]]:
    return [(r["topic"], r["text"]) for r in await memories(pool, tenant_id, user_id)
            if r["kind"] == "mastered"]  # fmt: skip


async def test_mastery_is_two_sessions_running_of_right_checks_on_a_topic_said_differently(
    service: MemoryService, db_pool: Any, tenant_id: str
) -> None:
    """A check's topic is the student's question's, named differently each time: a word of
    the topics answered right in two sessions running makes them mastered, named by that
    word; right answers in one session, a session between with a wrong answer, or a skipped
    check do not; a wrong answer later withdraws it."""

    async def say(user: str, session: uuid.UUID, topic: str, outcome: Outcome) -> None:
        event = check_attempt(tenant_id, user, topic, outcome, session)
        await service.record_quiz(pool=db_pool, event=event)

    one, two, three = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    # three right answers on blacklisting in one session: not mastered
    for topic in ("blacklist some traces", "VM blacklist a fragment", "blacklisted fragments"):
        await say("m1", one, topic, "right")
    assert await mastered(db_pool, tenant_id, "m1") == []
    # the next session, said another way: mastered, named by the shared word
    await say("m1", two, "backoff counter used for in blacklisting", "right")
    assert await mastered(db_pool, tenant_id, "m1") == [(
        "backoff counter used for in blacklisting",
        "Answered check questions on backoff counter used for in blacklisting right in 2 "
        "sessions running "
        "(blacklist some traces; vm blacklist a fragment; blacklisted fragments; backoff "
        "counter used for in blacklisting)",
    )]  # fmt: skip
    # a right answer in a third session strengthens nothing twice; a wrong one withdraws it
    await say("m1", three, "blacklist a loop", "right")
    assert len(await mastered(db_pool, tenant_id, "m1")) == 1
    await say("m1", three, "when is a fragment blacklisted", "wrong")
    assert await mastered(db_pool, tenant_id, "m1") == []

    # right, then a session with a partial answer and a right one on the word, then right:
    # the failed session breaks the run
    steps: list[tuple[uuid.UUID, Outcome]] = [(one, "right"), (two, "partly"), (two, "right"),
                                              (three, "right")]  # fmt: skip
    for session, outcome in steps:
        await say("m2", session, "dabbling ducks feed", outcome)
    assert await mastered(db_pool, tenant_id, "m2") == []
    # a skipped check ends the run without a struggle
    skipped: list[tuple[uuid.UUID, Outcome]] = [(one, "right"), (two, "skipped"), (three, "right")]
    for session, outcome in skipped:
        await say("m3", session, "stochastic gradient descent", outcome)
    assert await mastered(db_pool, tenant_id, "m3") == []
    assert [r for r in await memories(db_pool, tenant_id, "m3") if r["kind"] == "struggle"] == []
    # function words and words of talk about learning bridge nothing
    await say("m4", one, "what is the difference here", "right")
    await say("m4", two, "what does it mean here", "right")
    assert await mastered(db_pool, tenant_id, "m4") == []
    # two words of the topic reached together: one memory, named by the whole topic
    await say("m5", one, "batch and stochastic gradient descent", "right")
    await say("m5", two, "learning rate alpha in gradient descent", "right")
    assert [t for t, _ in await mastered(db_pool, tenant_id, "m5")] == [
        "learning rate alpha in gradient descent"
    ]
    # a quiz (no session) keeps the rule by topic alone
    await service.record_quiz(pool=db_pool, event=check_attempt(tenant_id, "m6", "osmosis",
                                                                "right"))  # fmt: skip
    assert await mastered(db_pool, tenant_id, "m6") == []


async def test_twin_strengthens_and_mastery_from_two_right_checks_replaces_struggle(
    service: MemoryService, db_pool: Any, tenant_id: str
) -> None:
    await run_session(service, db_pool, tenant_id, "s2", [("Explain meiosis", "gap", "meiosis")])
    _, second = await run_session(
        service, db_pool, tenant_id, "s2", [("Explain meiosis", "gap", "meiosis")]
    )
    rows = await memories(db_pool, tenant_id, "s2")
    struggles = [r for r in rows if r["kind"] == "struggle"]
    assert len(struggles) == 1 and struggles[0]["strength"] == 2.0
    assert second.updated == [struggles[0]["id"]] and second.created == []
    # one right check is not mastery; a skipped one starts the run again
    for outcome in ("right", "skipped", "right"):
        await service.record_quiz(pool=db_pool, event=check_attempt(tenant_id, "s2", "meiosis",
                                                                    outcome))  # fmt: skip
    assert not [r for r in await memories(db_pool, tenant_id, "s2") if r["kind"] == "mastered"]
    await service.record_quiz(pool=db_pool, event=check_attempt(tenant_id, "s2", "Meiosis",
                                                                "right"))  # fmt: skip
    rows = await memories(db_pool, tenant_id, "s2")
    assert not [r for r in rows if r["kind"] == "struggle"]
    assert [r["id"] for r in rows if r["kind"] == "mastered"] == [struggles[0]["id"]]
    evidence = await db_pool.fetchval(
        "SELECT evidence FROM user_memories WHERE id = $1", struggles[0]["id"]
    )
    assert [e["kind"] for e in evidence] == ["gap", "gap", "check_right"]
    # a partly right answer later is a struggle again
    await service.record_quiz(pool=db_pool, event=check_attempt(tenant_id, "s2", "meiosis",
                                                                "partly"))  # fmt: skip
    rows = await memories(db_pool, tenant_id, "s2")
    assert [r["kind"] for r in rows if r["topic"] == "meiosis"] == ["struggle"]


async def test_checks_from_one_section_of_the_material_count_together_across_sessions(
    service: MemoryService, db_pool: Any, tenant_id: str
) -> None:
    """Where the material has headings, a check counts towards its section: three questions on
    tobogganing that share no word, checked right in two sessions, are one mastered topic
    listing what was checked; two topics in two sections are not, even with a word in
    common."""

    async def say(user: str, session: uuid.UUID, topic: str, section: str) -> None:
        event = check_attempt(tenant_id, user, topic, "right", session, section)
        await service.record_quiz(pool=db_pool, event=event)

    one, two = uuid.uuid4(), uuid.uuid4()
    tobogganing = "Winter sports > CHAPTER IV TOBOGGANING"
    await say("t1", one, "tobogganing practised", tobogganing)
    await say("t1", one, "swiss luge", tobogganing)
    await say("t1", two, "riding a skeleton", tobogganing)
    assert await mastered(db_pool, tenant_id, "t1") == [(
        "swiss luge", "Answered check questions on swiss luge right in 2 sessions running "
        "(tobogganing practised; swiss luge; riding a skeleton)",
    )]  # fmt: skip
    # words that name the whole document name no mastery
    background = "Turner syndrome: issues to consider > Background"
    await say("t4", one, "turner syndrome diagnosed", background)
    await say("t4", one, "low level mosaicism", background)
    await say("t4", two, "turner syndrome", background)
    assert [t for t, _ in await mastered(db_pool, tenant_id, "t4")] == ["low level mosaicism"]
    # its evidence is every right check of the run: "answered 3 checks right"
    evidence = await db_pool.fetchval(
        "SELECT evidence FROM user_memories WHERE tenant_id = $1 AND user_id = 't4' "
        "AND kind = 'mastered'",
        tenant_id,
    )
    assert [(e["kind"], e["detail"]) for e in evidence] == [
        ("check_right", "turner syndrome diagnosed"), ("check_right", "low level mosaicism"),
        ("check_right", "turner syndrome"),
    ]  # fmt: skip
    # the topic that shares a word with the earlier session's names it, whole, never the
    # word alone; without one, the topic the run stood on
    lms = "Part I > 1 LMS algorithm"
    await say("t2", one, "high variance", lms)
    await say("t2", two, "high bias", lms)
    assert [t for t, _ in await mastered(db_pool, tenant_id, "t2")] == ["high bias"]
    await say("t3", one, "high variance", lms)
    await say("t3", two, "what to do about it", lms)
    assert [t for t, _ in await mastered(db_pool, tenant_id, "t3")] == ["high variance"]
    # one section each session: nothing, even with a word in common
    await say("t5", one, "when does a loop become hot in tracemonkey", "2. Overview")
    await say("t5", two, "why does tracemonkey blacklist traces", "3.3 Blacklisting")
    assert await mastered(db_pool, tenant_id, "t5") == []


async def test_a_check_arriving_late_from_an_earlier_session_does_not_break_a_later_run(
    service: MemoryService, db_pool: Any, tenant_id: str
) -> None:
    """Events travel apart and a redelivery may come after a later session's: the run is of
    sessions in the order they happened, so an older check of another session counts for
    nothing there (it would have reset a run it came before)."""
    one, two = uuid.uuid4(), uuid.uuid4()
    start = datetime.now(UTC) - timedelta(hours=1)

    async def say(session: uuid.UUID, outcome: Outcome, minutes: int) -> None:
        event = check_attempt(tenant_id, "late", "osmosis in plant cells", outcome, session,
                              "Cells > Osmosis")  # fmt: skip
        event = event.model_copy(update={"occurred_at": start + timedelta(minutes=minutes)})
        await service.record_quiz(pool=db_pool, event=event)

    await say(one, "right", 0)
    await say(two, "right", 30)
    assert [t for t, _ in await mastered(db_pool, tenant_id, "late")] == ["osmosis in plant cells"]
    await say(one, "skipped", 10)  # session one's skip, delivered late
    run = await db_pool.fetchrow(
        "SELECT session_id, sessions_running FROM memory_check_runs WHERE tenant_id = $1 "
        "AND user_id = 'late'",
        tenant_id,
    )
    assert (run["session_id"], run["sessions_running"]) == (two, 2)
    assert len(await mastered(db_pool, tenant_id, "late")) == 1
    # the user's export holds the run, in the shape the gateway's export gives it
    reply = await records.export(db_pool, MemoryExportRequest(tenant_id=tenant_id, user_id="late"))
    (exported,) = [ExportedCheckRun.model_validate(r) for r in reply.check_runs]
    assert (exported.unit.startswith("s:"), exported.sessions_running) == (True, 2)
    assert exported.topics == ["osmosis in plant cells"] and reply.holds_anything()


async def test_one_struggle_a_topic_names_all_its_evidence(
    service: MemoryService, db_pool: Any, tenant_id: str
) -> None:
    """A statement of confusion, then a wrong check on the same topic: one struggle, whose
    text says both, not two memories that say different things about one topic."""
    await run_session(
        service, db_pool, tenant_id, "s5",
        [("I really don't get osmosis, it makes no sense to me.", "high", "osmosis")],
    )  # fmt: skip
    await service.record_quiz(
        pool=db_pool, event=check_attempt(tenant_id, "s5", "Osmosis", "wrong")
    )
    struggles = [r for r in await memories(db_pool, tenant_id, "s5") if r["kind"] == "struggle"]
    assert len(struggles) == 1, struggles
    assert struggles[0]["strength"] == 2.0
    text = struggles[0]["text"]
    assert "said they found it confusing" in text and "check question on it wrong" in text, text


async def test_session_waits_for_its_turns(
    service: MemoryService, db_pool: Any, tenant_id: str
) -> None:
    ended = ChatSessionEnded(
        tenant_id=tenant_id, session_id=uuid.uuid4(), user_id="s3", message_count=4
    )
    with pytest.raises(TurnsNotArrived):
        await service.distil_session(pool=db_pool, event=ended)
    done = await service.distil_session(pool=db_pool, event=ended, final_attempt=True)
    assert done.created == []


async def test_session_waits_for_its_flags_and_a_late_flag_is_kept_not_redistilled(
    service: MemoryService, db_pool: Any, tenant_id: str
) -> None:
    """The session's end counts its flagged messages; the flag travels on another stream and
    may arrive after the end: the distillation waits for it, as for a turn. A flag arriving
    after the distillation is recorded, and the distillation is not redone (nor is it for a
    late turn): a distillation merges into the student's memories once per session."""
    event = turn_event(tenant_id, "s6", uuid.uuid4(), "What is osmosis?", topic="osmosis")
    await service.record_turn(pool=db_pool, event=event)
    ended = ChatSessionEnded(
        tenant_id=tenant_id, session_id=event.session_id, user_id="s6", message_count=2,
        flagged_messages=1,
    )  # fmt: skip
    with pytest.raises(TurnsNotArrived, match="0 of 1 flags"):
        await service.distil_session(pool=db_pool, event=ended)
    flag = FeedbackFlagged(
        tenant_id=tenant_id, flag_id=uuid.uuid4(), message_id=event.assistant_message_id,
        session_id=event.session_id, user_id="s6", reason="unclear",
    )  # fmt: skip
    await handle_flagged(db_pool, flag, None)
    await service.distil_session(pool=db_pool, event=ended)
    rows = await memories(db_pool, tenant_id, "s6")
    assert [(r["kind"], r["topic"]) for r in rows] == [("struggle", "osmosis")]
    assert "flagged" in rows[0]["text"]
    # a late flag on another answer of the session: kept, the distillation stands
    late = flag.model_copy(update={"flag_id": uuid.uuid4(), "message_id": uuid.uuid4()})
    await handle_flagged(db_pool, late, None)
    recorded = await db_pool.fetchval(
        "SELECT count(*) FROM memory_flags WHERE session_id = $1", event.session_id
    )
    assert recorded == 2
    again = await service.distil_session(pool=db_pool, event=ended)
    assert again.created == [rows[0]["id"]]
    assert len(await memories(db_pool, tenant_id, "s6")) == 1


async def test_recall_is_per_student_ranked_and_honours_deletion(
    service: MemoryService, db_pool: Any, tenant_id: str
) -> None:
    await run_session(
        service, db_pool, tenant_id, "alice",
        [("What are covalent bonds?", "gap", "covalent bonds"),
         ("How do plants make food?", "high", "photosynthesis")],
    )  # fmt: skip
    await run_session(
        service, db_pool, tenant_id, "bob", [("What is a black hole?", "gap", "black holes")]
    )
    reply = await service.recall(
        pool=db_pool,
        request=MemoryRecallRequest(tenant_id=tenant_id, user_id="alice", query="chemical bonds"),
    )
    assert reply.memories and reply.memories[0].topic == "covalent bonds"
    assert all("black hole" not in m.text for m in reply.memories)
    other_tenant = await service.recall(
        pool=db_pool,
        request=MemoryRecallRequest(tenant_id="someone-else", user_id="alice", query="bonds"),
    )
    assert other_tenant.memories == []
    await db_pool.execute("DELETE FROM user_memories WHERE id = $1", reply.memories[0].memory_id)
    after = await service.recall(
        pool=db_pool,
        request=MemoryRecallRequest(tenant_id=tenant_id, user_id="alice", query="chemical bonds"),
    )
    assert reply.memories[0].memory_id not in {m.memory_id for m in after.memories}
