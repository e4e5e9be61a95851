"""Tutoring through the real gateway (offline answerer): tutor answers end with a check
question from their sources, the reply is judged against the sources before moving on, a
judged check reaches memory as a quiz attempt, and drill mode practises the material's own
Q&A pairs first."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import numpy as np
import pytest
from lectern_testing.chat import (
    STUDY_MATERIAL,
    Gateway,
    ask,
    new_session,
    offline_gateway,
    published,
    seed_document,
)
from lectern_testing.plugin import LOCAL_EMBEDDING_DIM

from lectern_common import reading
from lectern_common.events import Subjects
from lectern_gateway.chat.turn_input import TutorCheck
from lectern_gateway.chat.tutoring import (
    Judged,
    best_answering_first,
    feedback,
    is_new_question,
    judge,
    section_tested,
)

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
async def gateway(nats_url: str, database_url: str, db_pool: Any) -> AsyncIterator[Gateway]:
    async with offline_gateway(nats_url, database_url, db_pool) as running:
        yield running


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=60) as c:
        yield c


async def _pending(pool: Any, message_id: uuid.UUID) -> dict[str, Any]:
    check = await pool.fetchval("SELECT tutor_check FROM chat_messages WHERE id = $1", message_id)
    assert isinstance(check, dict), check
    return check


async def test_a_tutor_answer_ends_with_a_check_that_the_reply_is_judged_against(
    gateway: Gateway, client: httpx.AsyncClient, db_pool: Any, tenant_id: str, jetstream: Any
) -> None:
    seeded = await seed_document(db_pool, tenant_id=tenant_id, chunks=STUDY_MATERIAL)
    headers = gateway.token(tenant_id, "stu-1")
    session = await new_session(client, gateway, headers, mode="tutor")
    got = await ask(client, gateway, session["id"], "What is mitosis?", headers)
    (asked,) = got.of("check")
    assert asked.phase == "asked"
    assert got.text.endswith(f"Check your understanding: {asked.question}") or got.text.endswith(
        "(Reply true or false.)"
    )
    check = await _pending(db_pool, got.done.message_id)
    assert check["status"] == "pending" and uuid.UUID(check["chunk_id"]) in seeded.chunk_ids
    assert check["evidence"] in " ".join(t for t, _, _ in STUDY_MATERIAL)

    # the right answer: judged right, with the passage, before anything else
    reply = check["answer"]
    judged = await ask(client, gateway, session["id"], reply, headers)
    (verdict,) = judged.of("check")
    assert (verdict.phase, verdict.verdict) == ("judged", "right")
    assert judged.text.startswith("Right! ") and check["evidence"] in judged.text
    assert judged.done.answered_by == "tutor-check"
    (source,) = judged.of("sources")[0].sources
    assert str(source.chunk_id) == check["chunk_id"]
    assert [c.label for c in judged.done.citations] == ["T1"]
    settled = await _pending(db_pool, got.done.message_id)
    assert settled["status"] == "judged" and settled["verdict"] == "right"
    # memory hears of it as a one-question quiz attempt
    attempts = await published(jetstream, Subjects.QUIZ_ATTEMPTED, tenant_id)
    assert [(a["correct"], a["total"]) for a in attempts] == [(1, 1)]
    assert attempts[0]["results"][0]["topic"] == check["topic"]
    # with its session and the section it tests, for memory's count of sessions running
    assert attempts[0]["session_id"] == str(session["id"])
    assert attempts[0]["results"][0]["section"] == check["section"] == "1 Cells > 1.1 Mitosis"

    # a wrong answer to the next check
    again = await ask(client, gateway, session["id"], "What is meiosis?", headers)
    if again.of("check"):
        wrong = await ask(client, gateway, session["id"], "bananas", headers)
        (verdict,) = wrong.of("check")
        assert verdict.verdict == "wrong"
        assert wrong.text.startswith("Not quite: the answer is ")


async def test_a_new_question_instead_of_a_reply_skips_the_check(
    gateway: Gateway, client: httpx.AsyncClient, db_pool: Any, tenant_id: str
) -> None:
    await seed_document(db_pool, tenant_id=tenant_id, chunks=STUDY_MATERIAL)
    headers = gateway.token(tenant_id, "stu-2")
    session = await new_session(client, gateway, headers, mode="tutor")
    got = await ask(client, gateway, session["id"], "What is mitosis?", headers)
    assert got.of("check")
    other = await ask(client, gateway, session["id"], "What does cellular respiration do?", headers)
    assert other.done.answered_by == "offline"  # answered, not judged
    assert (await _pending(db_pool, got.done.message_id))["status"] == "skipped"


async def test_the_check_tests_the_statement_the_answer_rests_on(
    gateway: Gateway, client: httpx.AsyncClient, db_pool: Any, tenant_id: str
) -> None:
    await seed_document(db_pool, tenant_id=tenant_id, chunks=STUDY_MATERIAL)
    headers = gateway.token(tenant_id, "stu-5")
    session = await new_session(client, gateway, headers, mode="tutor")
    got = await ask(client, gateway, session["id"], "What does photosynthesis do?", headers)
    check = await _pending(db_pool, got.done.message_id)
    # the sentence the answer gave, not another of the sources (the leaf's chloroplasts)
    assert check["evidence"].startswith("Photosynthesis is a process that converts light")
    assert check["evidence"] in got.text.replace(" [T1]", "")
    # what it tests is named by the student's question, in the material's words
    assert check["topic"] == "photosynthesis"


async def test_a_skipped_check_reaches_memory_as_evidence_against_mastery(
    gateway: Gateway, client: httpx.AsyncClient, db_pool: Any, tenant_id: str, jetstream: Any
) -> None:
    await seed_document(db_pool, tenant_id=tenant_id, chunks=STUDY_MATERIAL)
    headers = gateway.token(tenant_id, "stu-6")
    session = await new_session(client, gateway, headers, mode="tutor")
    first = await ask(client, gateway, session["id"], "What is mitosis?", headers)
    assert first.of("check")
    second = await ask(client, gateway, session["id"], "What does meiosis produce?", headers)
    assert second.of("check")
    # the second check is still open when the session ends: skipped too
    ended = await client.post(f"{gateway.url}/v1/sessions/{session['id']}/end", headers=headers)
    assert ended.status_code == 200
    attempts = await published(jetstream, Subjects.QUIZ_ATTEMPTED, tenant_id, expect=2)
    outcomes = sorted((a["results"][0]["outcome"], a["results"][0]["topic"]) for a in attempts)
    assert outcomes == [("skipped", "meiosis"), ("skipped", "mitosis")]
    assert {a["session_id"] for a in attempts} == {str(session["id"])}
    assert all(a["correct"] == 0 for a in attempts)


async def test_chat_mode_never_asks_a_check(
    gateway: Gateway, client: httpx.AsyncClient, db_pool: Any, tenant_id: str
) -> None:
    await seed_document(db_pool, tenant_id=tenant_id, chunks=STUDY_MATERIAL)
    headers = gateway.token(tenant_id, "stu-3")
    session = await new_session(client, gateway, headers, mode="chat")
    got = await ask(client, gateway, session["id"], "What is mitosis?", headers)
    assert not got.of("check") and "Check your understanding" not in got.text


async def test_drill_practises_the_materials_own_questions_first(
    gateway: Gateway, client: httpx.AsyncClient, db_pool: Any, tenant_id: str
) -> None:
    seeded = await seed_document(db_pool, tenant_id=tenant_id, chunks=STUDY_MATERIAL)
    # an ingest-time Q&A pair on the mitosis chunk
    await db_pool.execute(
        "INSERT INTO chunks (id, document_id, tenant_id, chunk_index, kind, text, section_path, "
        "page_start, page_end, token_count, content_hash, collection, parent_chunk_id, "
        "embedding) VALUES ($1, $2, $3, 99, 'qa', $4, $5, 1, 1, 12, $6, 'educational', $7, $8)",
        uuid.uuid4(), seeded.document_id, tenant_id,
        "Q: How many daughter cells does mitosis produce?\nA: Two identical daughter cells",
        ["1 Cells", "1.1 Mitosis"], uuid.uuid4().hex, seeded.chunk_ids[0],
        np.ones(LOCAL_EMBEDDING_DIM, dtype=np.float32),
    )  # fmt: skip
    headers = gateway.token(tenant_id, "stu-4")
    session = await new_session(client, gateway, headers, mode="drill")
    first = await ask(client, gateway, session["id"], "start", headers)
    (asked,) = first.of("check")
    assert asked.question == "How many daughter cells does mitosis produce?"
    assert first.text == "Practice question: How many daughter cells does mitosis produce?"
    reply = await ask(client, gateway, session["id"], "two identical daughter cells", headers)
    judged, following = reply.of("check")
    assert judged.verdict == "right"
    assert following.phase == "asked" and following.question != asked.question
    assert "\n\nNext: " in reply.text
    # the next reply is judged against the next question
    skipped = await ask(client, gateway, session["id"], "skip", headers)
    # skipping is not a wrong answer: no struggle comes of it, but no mastery either
    assert skipped.of("check")[0].verdict == "skipped"
    assert skipped.of("check")[0].expected


async def test_the_rules_judge_right_partly_and_wrong() -> None:
    check = TutorCheck(
        question_id="q1", kind="short_answer", prompt="What does the Calvin cycle produce?",
        answer="sugars from carbon dioxide", accepted=["sugars from carbon dioxide"],
        evidence="The Calvin cycle fixes carbon dioxide into sugars.",
        chunk_id=uuid.uuid4(), document_id=uuid.uuid4(), title="Biology",
    )  # fmt: skip
    assert (await judge(check, "it makes sugars from carbon dioxide")).verdict == "right"
    assert (await judge(check, "sugars")).verdict == "right"
    assert (await judge(check, "oxygen from water and carbon")).verdict == "partly"
    assert (await judge(check, "oxygen")).verdict == "wrong"
    # the answer beside another candidate is a hedge: partly right, no evidence of mastery
    blank = check.model_copy(update={"answer": "sugars", "accepted": ["sugars"]})
    assert (await judge(blank, "sugars")).verdict == "right"
    assert (await judge(blank, "sugars or oxygen")).verdict == "partly"
    true_false = check.model_copy(update={"kind": "true_false", "answer": "false", "accepted": []})
    assert (await judge(true_false, "False")).verdict == "right"
    assert (await judge(true_false, "yes")).verdict == "wrong"
    assert feedback(check, Judged("partly", "rules")).startswith("Partly right. The full answer")
    assert is_new_question("What is osmosis?") and is_new_question("explain diffusion to me please")
    assert not is_new_question("carbon dioxide") and not is_new_question("I don't know")
    # "I don't know" is an answer (a wrong one); "ok thanks" and "skip" are none
    assert (await judge(check, "I don't know")).verdict == "wrong"
    assert (await judge(check, "ok thanks!")).verdict == "skipped"
    assert not is_new_question("ok thanks")


class _Reader:
    """A reader whose logits are given, that counts its calls."""

    def __init__(self, logits: list[float]) -> None:
        self.logits = logits
        self.calls = 0

    async def score_logits(self, question: str, texts: Any, *, kind: str = "sentence") -> Any:
        self.calls += 1
        assert kind == "sentence" and len(texts) == len(self.logits)
        return np.asarray(self.logits, dtype=np.float32)


async def test_the_check_asks_about_the_cited_sentence_the_reader_reads_as_answering() -> None:
    cited = [("T1", "a [T1]."), ("T2", "b [T2]."), ("T1", "c [T1].")]
    fake = _Reader([0.5, 2.0, 0.5])
    assert await best_answering_first(fake, cited, asked="q?") == [cited[1], cited[0], cited[2]]
    # no reader, or nothing to choose between: the answer's order, and no reading
    assert await best_answering_first(None, cited, asked="q?") == cited
    one = _Reader([1.0])
    assert await best_answering_first(one, cited[:1], asked="q?") == cited[:1]
    assert one.calls == 0


@pytest.mark.skipif(not reading.available(), reason="no packaged reader in this checkout")
async def test_the_packaged_reader_puts_the_sentence_that_answers_first() -> None:
    cited = [
        ("T1", "Photosynthesis takes place in the chloroplasts of leaf cells [T1]."),
        ("T1", "Leaves look green because chlorophyll reflects green light [T1]."),
    ]
    ordered = await best_answering_first(
        reading.packaged(), cited, asked="Why do leaves look green?"
    )
    assert ordered == [cited[1], cited[0]]


def test_a_check_tests_a_section_below_the_documents_title_or_none() -> None:
    """Memory counts right checks by section across sessions; a section that is the whole
    document (its title) or none is no unit, and memory counts the topic's words instead."""

    def check(section: str | None) -> TutorCheck:
        return TutorCheck(
            question_id="q", kind="short_answer", prompt="p", answer="a", chunk_id=uuid.uuid4(),
            document_id=uuid.uuid4(), title="Duck", section=section,
        )  # fmt: skip

    assert section_tested(check("Duck > Behaviour > Feeding")) == "Duck > Behaviour > Feeding"
    assert section_tested(check(" duck ")) is None
    assert section_tested(check(None)) is None
