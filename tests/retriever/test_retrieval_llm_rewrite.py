"""The Gemini query rewrite through the real google-genai SDK against the local fake server."""

from __future__ import annotations

import json

from lectern_testing.gemini_fake import Behaviour, FakeGemini

from lectern_common.embeddings import create_gemini_client
from lectern_common.events.retrieval import Turn
from lectern_retriever.rewrite import Rewritten, llm_rewrite


async def test_llm_rewrite_resolves_and_splits() -> None:
    answer = {"queries": ["how does mitosis work", "phases of mitosis"], "kind": "simple"}
    history = [Turn(role="user", text="Tell me about mitosis"), Turn(role="assistant", text="OK")]
    fallback = Rewritten(main="how does it work")
    async with FakeGemini() as fake:
        fake.enqueue(Behaviour(text=json.dumps(answer)), endpoint="generate")
        fake.enqueue(Behaviour.error(429), endpoint="generate")
        client = create_gemini_client(api_key="fake-key", base_url=fake.base_url)
        rewritten = await llm_rewrite(
            client, model="gemini-2.5-flash", query="how does it work", history=history,
            fallback=fallback,
        )  # fmt: skip
        failed = await llm_rewrite(
            client, model="gemini-2.5-flash", query="how does it work", history=history,
            fallback=fallback,
        )  # fmt: skip
        sent = fake.requests_to("generate")
    assert rewritten.all == answer["queries"] and rewritten.by == "llm"
    assert failed is fallback  # a 429 falls back to the rule-based rewrite
    body = sent[0].body
    assert body["generationConfig"]["responseMimeType"] == "application/json"
    prompt = json.dumps(body["contents"])
    assert "Tell me about mitosis" in prompt and "how does it work" in prompt
