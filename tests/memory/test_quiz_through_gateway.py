"""Quizzes through the real gateway and the real memory service: a quiz drawn from the
tenant's material, answers hidden from students until they submit, answers checked with
the passage they came from, and the result remembered (wrong: a struggle; right in two
attempts running: mastered, replacing the struggle); later quizzes start with struggles."""

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from lectern_testing.chat import (
    STUDY_MATERIAL as MATERIAL,
)
from lectern_testing.chat import (
    Gateway,
    Responders,
    gateway_settings,
    run_responders,
    seed_document,
    serve_gateway,
)

from lectern_memory.app import create_app
from lectern_memory.config import Settings

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture
async def gateway(
    nats_url: str, database_url: str, db_pool: Any, memory_settings: Settings
) -> AsyncIterator[Gateway]:
    """The gateway and the real memory service; the material comes from the retriever's own
    reads (``Responders``)."""
    memory = create_app(memory_settings)
    async with (
        memory.router.lifespan_context(memory),
        run_responders(nats_url, Responders(pool=db_pool)),
        serve_gateway(gateway_settings(nats_url, database_url)) as served,
    ):
        yield served


async def memories(pool: Any, tenant_id: str, user_id: str, want: int) -> list[Any]:
    rows: list[Any] = []
    for _ in range(200):
        rows = list(await pool.fetch(
            "SELECT kind, topic, strength FROM user_memories WHERE tenant_id = $1 "
            "AND user_id = $2 ORDER BY topic", tenant_id, user_id))  # fmt: skip
        if len(rows) >= want:
            return rows
        await asyncio.sleep(0.1)
    raise AssertionError(f"expected {want} memories, have {rows}")


async def test_a_quiz_is_taken_checked_and_remembered(
    gateway: Gateway, db_pool: Any, tenant_id: str
) -> None:
    seeded = await seed_document(db_pool, tenant_id=tenant_id, chunks=MATERIAL)
    student = gateway.token(tenant_id, "maya")
    teacher = gateway.token(tenant_id, "t-1", role="teacher")
    async with httpx.AsyncClient(base_url=gateway.url, timeout=60) as client:
        made = await client.post("/v1/quizzes", headers=student,
                                 json={"subject": "Biology", "num_questions": 4})  # fmt: skip
        assert made.status_code == 201, made.text
        quiz = made.json()
        assert len(quiz["questions"]) == 4
        assert len({q["section"] for q in quiz["questions"]}) == 4
        assert all(q["answer"] is None and q["explanation"] is None for q in quiz["questions"])
        fetched = (await client.get(f"/v1/quizzes/{quiz['id']}", headers=student)).json()
        assert fetched["questions"] == quiz["questions"]
        # a teacher sees the answers, and every one is in the chunk the question cites
        keyed = (await client.get(f"/v1/quizzes/{quiz['id']}", headers=teacher)).json()
        texts = {str(i): t for i, (t, _, _) in zip(seeded.chunk_ids, MATERIAL, strict=True)}
        for q in keyed["questions"]:
            assert q["chunk_ids"][0] in texts
            if q["kind"] != "true_false":
                assert q["answer"] in texts[q["chunk_ids"][0]]
        answers = {q["id"]: q["answer"] for q in keyed["questions"]}
        wrong_id = next(q["id"] for q in keyed["questions"] if q["kind"] != "short_answer")
        wrong_q = next(q for q in keyed["questions"] if q["id"] == wrong_id)
        wrong = next(o for o in wrong_q["options"] if o != wrong_q["answer"])
        first = await client.post(f"/v1/quizzes/{quiz['id']}/attempts", headers=student,
                                  json={"answers": {**answers, wrong_id: wrong}})  # fmt: skip
        assert first.status_code == 201, first.text
        result = first.json()
        assert (result["correct"], result["total"]) == (3, 4)
        missed = next(r for r in result["results"] if r["question_id"] == wrong_id)
        assert not missed["correct"] and missed["feedback"].startswith("Not quite")
        assert wrong_q["topic"] in missed["feedback"]
        assert missed["chunk_ids"] == wrong_q["chunk_ids"]
        rows = await memories(db_pool, tenant_id, "maya", 1)
        assert [(r["kind"], r["topic"]) for r in rows] == [("struggle", wrong_q["topic"])]
        # the next quiz starts with the struggle topic
        one = {"num_questions": 1, "kinds": [wrong_q["kind"]]}
        again = await client.post("/v1/quizzes", headers=student, json=one)
        assert again.json()["questions"][0]["topic"] == wrong_q["topic"]
        for _ in range(2):
            right = await client.post(f"/v1/quizzes/{quiz['id']}/attempts", headers=student,
                                      json={"answers": answers})  # fmt: skip
            assert right.json()["correct"] == 4
        for _ in range(100):
            rows = await memories(db_pool, tenant_id, "maya", 1)
            if any(r["kind"] == "mastered" and r["topic"] == wrong_q["topic"] for r in rows):
                break
            await asyncio.sleep(0.1)
        by_topic = {r["topic"]: r["kind"] for r in rows}
        assert by_topic[wrong_q["topic"]] == "mastered", rows
        assert "struggle" not in by_topic.values()
        # another student cannot open maya's quiz; unknown question ids are refused
        other = gateway.token(tenant_id, "sam")
        assert (await client.get(f"/v1/quizzes/{quiz['id']}", headers=other)).status_code == 404
        bad = await client.post(f"/v1/quizzes/{quiz['id']}/attempts", headers=student,
                                json={"answers": {"nope": "x"}})  # fmt: skip
        assert bad.status_code == 422
        assert bad.headers["content-type"].startswith("application/problem+json")


async def test_assessment_quizzes_are_for_teachers_to_assign(
    gateway: Gateway, db_pool: Any, tenant_id: str
) -> None:
    await seed_document(db_pool, tenant_id=tenant_id, chunks=MATERIAL, collection="assessment")
    student = gateway.token(tenant_id, "maya")
    teacher = gateway.token(tenant_id, "t-1", role="teacher")
    async with httpx.AsyncClient(base_url=gateway.url, timeout=60) as client:
        refused = await client.post("/v1/quizzes", headers=student,
                                    json={"collection": "assessment"})  # fmt: skip
        assert refused.status_code == 403
        none = await client.post("/v1/quizzes", headers=student, json={})
        assert none.status_code == 404  # no educational material in this tenant
        made = await client.post("/v1/quizzes", headers=teacher, json={
            "collection": "assessment", "assign_to_class": "9b", "num_questions": 3})  # fmt: skip
        assert made.status_code == 201, made.text
        # only students of class 9b (the token's classes claim) see it
        assert (await client.get("/v1/quizzes", headers=student)).json() == []
        in_9b = gateway.token(tenant_id, "ines", classes=["9b"])
        listed = (await client.get("/v1/quizzes", headers=in_9b)).json()
        assert [q["id"] for q in listed] == [made.json()["id"]]
        assert all(q["answer"] is None for q in listed[0]["questions"])
        quiz_url = f"/v1/quizzes/{made.json()['id']}"
        assert (await client.get(quiz_url, headers=student)).status_code == 404
        assert (await client.get(quiz_url, headers=in_9b)).status_code == 200


async def test_the_syllabus_lists_documents_and_sections_in_order(
    gateway: Gateway, db_pool: Any, tenant_id: str
) -> None:
    seeded = await seed_document(db_pool, tenant_id=tenant_id, chunks=MATERIAL, subject=None)
    student = gateway.token(tenant_id, "maya")
    async with httpx.AsyncClient(base_url=gateway.url, timeout=60) as client:
        got = await client.get("/v1/syllabus", headers=student, params={"subject": "biology"})
        assert got.status_code == 200, got.text
        (module,) = got.json()["modules"]
        (document,) = module["documents"]
        assert document["id"] == str(seeded.document_id)
        sections = document["sections"]
        assert [s["title"] for s in sections] == [
            "1 Cells", "1.1 Mitosis", "1.2 Meiosis", "2 Plants", "2.1 Photosynthesis",
            "2.2 Respiration"]  # fmt: skip
        assert [(s["page_start"], s["page_end"], s["chunk_count"]) for s in sections][:3] == [
            (1, 2, 2), (1, 1, 1), (2, 2, 1)]  # fmt: skip
        assert sections[4]["topics"] == ["photosynthesis"]
        assert sections[1]["first_chunk_id"] == str(seeded.chunk_ids[0])
        nowhere = {"document_id": "00000000-0000-0000-0000-000000000000"}
        missing = await client.get("/v1/syllabus", headers=student, params=nowhere)
        assert missing.status_code == 404


def right_reply(question: dict[str, Any]) -> str:
    """What a student who knows types: the option's number, or the answer."""
    if question["kind"] == "multiple_choice":
        return str(question["options"].index(question["answer"]) + 1)
    return str(question["answer"])


def wrong_reply(question: dict[str, Any]) -> str:
    """A wrong reply of the form the question asks for."""
    if question["kind"] == "true_false":
        return "f" if question["answer"] == "true" else "t"
    if question["kind"] == "multiple_choice":
        return "1" if question["options"][0] != question["answer"] else "2"
    return "no idea"


async def test_lectern_quiz_and_syllabus_in_the_terminal(
    gateway: Gateway, db_pool: Any, tenant_id: str
) -> None:
    import io

    from lectern_cli.quiz_cmd import show_syllabus, take_quiz

    await seed_document(db_pool, tenant_id=tenant_id, chunks=MATERIAL)
    teacher = gateway.token(tenant_id, "t-1", role="teacher")
    async with httpx.AsyncClient(base_url=gateway.url, timeout=60) as client:
        made = await client.post("/v1/quizzes", headers=teacher,
                                 json={"num_questions": 3, "assign_to_class": "9b"})  # fmt: skip
    keyed = made.json()["questions"]
    typed = [right_reply(q) for q in keyed]
    typed[0] = wrong_reply(keyed[0])
    replies = iter(typed)
    out = io.StringIO()
    token = gateway.token(tenant_id, "maya", classes=["9b"])["Authorization"].split()[1]
    code = await take_quiz(url=gateway.url, token=token, out=out,
                           prompt=lambda _: next(replies), quiz_id=made.json()["id"])  # fmt: skip
    printed = out.getvalue()
    assert code == 0, printed
    assert "1. " + keyed[0]["prompt"] in printed
    assert "1. wrong: Not quite" in printed and "2. right" in printed
    assert f"Score: 2/3 (quiz {made.json()['id']})" in printed
    outline = io.StringIO()
    assert await show_syllabus(url=gateway.url, token=token, out=outline, subject=None,
                               document=None) == 0  # fmt: skip
    assert "      1.1 Mitosis  p. 1\n" in outline.getvalue()
