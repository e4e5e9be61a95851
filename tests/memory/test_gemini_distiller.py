"""Distillation through the real google-genai SDK against the local fake Gemini server."""

import json
from collections.abc import Iterator

import pytest
from lectern_testing.gemini_fake import Behaviour, FakeGemini
from pydantic import SecretStr

from lectern_memory.config import Settings
from lectern_memory.distill import TurnSignal
from lectern_memory.gemini_distiller import build_model_distiller

TURNS = [
    TurnSignal(question="Why do ionic bonds form?", answer="Electrons move [T1].", band="low",
               confidence=0.5, topic="ionic bonds"),
    TurnSignal(question="I learn best with diagrams. What is a covalent bond?",
               answer="Atoms share electrons [T2].", band="high", confidence=0.9),
]  # fmt: skip
VALID = json.dumps(
    {
        "memories": [
            {"kind": "struggle", "text": "Found ionic bonding hard", "topic": "ionic bonds"},
            {"kind": "preference", "text": "Learns best with diagrams", "topic": None},
        ]
    }
)


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeGemini]:
    with FakeGemini() as server:
        yield server


def distiller_for(fake: FakeGemini) -> object:
    distiller = build_model_distiller(
        Settings(gemini_api_key=SecretStr("k"), gemini_base_url=fake.base_url)
    )
    assert distiller is not None
    return distiller


async def test_valid_json_becomes_memories_in_one_call(fake: FakeGemini) -> None:
    fake.reset()
    fake.enqueue(Behaviour(text=VALID), endpoint="generate")
    drafts = await distiller_for(fake)(TURNS)  # type: ignore[operator]
    assert [(d.kind, d.topic) for d in drafts] == [
        ("struggle", "ionic bonds"),
        ("preference", None),
    ]
    calls = fake.requests_to("generate")
    assert len(calls) == 1
    body = calls[0].body
    assert body["generationConfig"]["responseMimeType"] == "application/json"
    assert "Why do ionic bonds form?" in json.dumps(body["contents"])


async def test_invalid_output_is_retried_once_then_given_up(fake: FakeGemini) -> None:
    fake.reset()
    fake.enqueue(Behaviour(text="not json"), Behaviour(text=VALID), endpoint="generate")
    drafts = await distiller_for(fake)(TURNS)  # type: ignore[operator]
    assert drafts is not None and len(drafts) == 2
    assert len(fake.requests_to("generate")) == 2

    fake.reset()
    fake.enqueue(
        Behaviour(text='{"memories": [{"kind": "gossip", "text": "x"}]}'),
        Behaviour(text="still not json"),
        endpoint="generate",
    )
    assert await distiller_for(fake)(TURNS) is None  # type: ignore[operator]
    assert len(fake.requests_to("generate")) == 2


async def test_api_errors_fall_back_to_rules(fake: FakeGemini) -> None:
    fake.reset()
    fake.fail(500, times=1, endpoint="generate")
    assert await distiller_for(fake)(TURNS) is None  # type: ignore[operator]


def test_no_key_means_rules_only() -> None:
    assert build_model_distiller(Settings()) is None
