"""Quizzes written by Gemini, through the real google-genai SDK against the local fake
Gemini server: invalid and unsupported items are dropped and the missing ones asked for
again; a failing model gives the offline quiz."""

import json
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
from lectern_testing.gemini_fake import Behaviour, FakeGemini

pytestmark = [pytest.mark.integration]

MITOSIS = "Mitosis is a type of cell division that produces two identical daughter cells."
MEIOSIS = "Meiosis is a type of cell division that produces four different gametes."
PHOTO = "Photosynthesis is a process that converts light energy into chemical energy."
ATP = "One glucose molecule yields about 30 molecules of ATP."
assert all(any(e in text for text, _, _ in MATERIAL) for e in (MITOSIS, MEIOSIS, PHOTO, ATP))


def reply(*items: dict[str, Any]) -> Behaviour:
    return Behaviour(text=json.dumps({"questions": list(items)}))


@pytest.fixture
async def served(
    nats_url: str, database_url: str, db_pool: Any
) -> AsyncIterator[tuple[Gateway, FakeGemini]]:
    """The gateway with (a fake) Gemini; the quiz material comes from the retriever's own
    reads (``Responders``)."""
    async with FakeGemini() as gemini:
        settings = gateway_settings(nats_url, database_url, gemini_api_key="fake-key",
                                    gemini_base_url=gemini.base_url)  # fmt: skip
        async with (
            run_responders(nats_url, Responders(pool=db_pool)),
            serve_gateway(settings) as gateway,
        ):
            yield gateway, gemini


async def test_model_questions_are_validated_against_their_passages(
    served: tuple[Gateway, FakeGemini], db_pool: Any, tenant_id: str
) -> None:
    gateway, gemini = served
    await seed_document(db_pool, tenant_id=tenant_id, chunks=MATERIAL)
    # passages are offered one per section, spread over the material: Mitosis,
    # Photosynthesis, Meiosis, Respiration (checked below from the recorded prompt)
    gemini.enqueue(
        reply(
            {"passage": 1, "kind": "multiple_choice", "prompt": "Which division makes twins?",
             "options": ["Mitosis", "Meiosis", "Osmosis", "Diffusion"], "answer": "Mitosis",
             "explanation": "Mitosis gives two identical cells.", "evidence": MITOSIS},
            {"passage": 2, "kind": "multiple_choice", "prompt": "What stores light energy?",
             "options": ["Glucose", "Water", "Salt"], "answer": "Respiration",
             "evidence": PHOTO},  # the answer is not an option
            {"passage": 2, "kind": "short_answer", "prompt": "Which pigment absorbs light?",
             "answer": "chlorophyll", "evidence": PHOTO},  # not in the passage
            {"passage": 3, "kind": "true_false",
             "prompt": "True or false: meiosis produces two identical cells.",
             "options": ["true", "false"], "answer": "False", "evidence": MEIOSIS},
        ),
        reply(
            {"passage": 2, "kind": "short_answer",
             "prompt": "How many ATP molecules does one glucose molecule yield?",
             "answer": "about 30", "evidence": ATP},
        ),
        endpoint="generate",
    )  # fmt: skip
    teacher = gateway.token(tenant_id, "t-1", role="teacher")
    async with httpx.AsyncClient(base_url=gateway.url, timeout=60) as client:
        made = await client.post("/v1/quizzes", headers=teacher, json={"num_questions": 3})
    assert made.status_code == 201, made.text
    quiz = made.json()
    assert quiz["generator"] == "gemini:gemini-2.5-flash"
    assert [(q["kind"], q["answer"]) for q in quiz["questions"]] == [
        ("multiple_choice", "Mitosis"),
        ("true_false", "false"),
        ("short_answer", "about 30"),
    ]
    assert [q["topic"] for q in quiz["questions"]] == ["Mitosis", "Meiosis", "Respiration"]
    first, second = (r.body for r in gemini.requests_to("generate"))
    asked = json.dumps(first)
    assert asked.index("1.1 Mitosis") < asked.index("2.1 Photosynthesis") < asked.index(
        "1.2 Meiosis") < asked.index("2.2 Respiration")  # fmt: skip
    again = json.dumps(second)
    assert "Write 1 medium" in again and "1.1 Mitosis" not in again


async def test_a_failing_model_gives_the_offline_quiz(
    served: tuple[Gateway, FakeGemini], db_pool: Any, tenant_id: str
) -> None:
    gateway, gemini = served
    await seed_document(db_pool, tenant_id=tenant_id, chunks=MATERIAL)
    gemini.fail(400, endpoint="generate")
    student = gateway.token(tenant_id, "maya")
    async with httpx.AsyncClient(base_url=gateway.url, timeout=60) as client:
        made = await client.post("/v1/quizzes", headers=student, json={"num_questions": 4})
    assert made.status_code == 201, made.text
    assert made.json()["generator"] == "offline"
    assert len(made.json()["questions"]) == 4


async def test_typed_answers_are_judged_by_the_model_and_by_the_rules_when_it_fails(
    served: tuple[Gateway, FakeGemini], db_pool: Any, tenant_id: str
) -> None:
    gateway, gemini = served
    await seed_document(db_pool, tenant_id=tenant_id, chunks=MATERIAL)
    gemini.fail(400, endpoint="generate")  # the offline generator writes this quiz
    teacher = gateway.token(tenant_id, "t-1", role="teacher")
    async with httpx.AsyncClient(base_url=gateway.url, timeout=60) as client:
        made = await client.post("/v1/quizzes", headers=teacher,
                                 json={"num_questions": 2, "kinds": ["short_answer"]})  # fmt: skip
        assert made.status_code == 201, made.text
        first, second = made.json()["questions"]
        answers = {first["id"]: "the one the rules cannot know", second["id"]: second["answer"]}
        url = f"/v1/quizzes/{made.json()['id']}/attempts"
        gemini.enqueue(Behaviour(text='{"verdicts": [{"item": 1, "correct": true}]}'),
                       endpoint="generate")  # fmt: skip
        judged = (await client.post(url, headers=teacher, json={"answers": answers})).json()
        assert [r["correct"] for r in judged["results"]] == [True, True]
        asked = json.dumps(gemini.requests_to("generate")[-1].body)
        # only the answer that differs from its reference goes to the model
        assert "the one the rules cannot know" in asked and asked.count("student_answer") == 1
        gemini.fail(400, endpoint="generate")
        ruled = (await client.post(url, headers=teacher, json={"answers": answers})).json()
        assert [r["correct"] for r in ruled["results"]] == [False, True]
