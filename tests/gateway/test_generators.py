"""Generators: Gemini through the real SDK against the fake server, fallback, offline answers."""

import email.utils
import re
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta

import pytest
from lectern_testing.gemini_fake import Behaviour, FakeGemini, FakeOpenAI, web_grounding
from lectern_testing.metrics import install_telemetry, local_total

from lectern_answerer import NO_SUPPORT_TEXT, OfflineAnswerer, extract_answer
from lectern_common.embeddings import create_gemini_client
from lectern_common.errors import BadInputError, ConfigurationError, UpstreamError
from lectern_common.generation import (
    ChatMessage,
    Final,
    GenerationChunk,
    GenerationRequest,
    GenerationStream,
    Grounding,
    SourceText,
    TextDelta,
    Usage,
)
from lectern_common.settings import BaseServiceSettings
from lectern_common.text import split_sentences
from lectern_gateway.chat.generators import (
    FallbackGenerator,
    GeminiGenerator,
    Generator,
    OpenAICompatibleGenerator,
    build_generator,
    cited_labels,
    retry_after_seconds,
)

QUESTION = [ChatMessage(role="user", content="How do plants turn sunlight into food?")]
SOURCES = [
    SourceText(
        label="T1",
        text=(
            "Chapter 4 covers plant biology.\n\n"
            "Photosynthesis is the process by which plants turn sunlight into chemical energy. "
            "The food is stored as glucose in the leaves. "
            "Chlorophyll gives leaves their green colour."
        ),
    ),
    SourceText(
        label="T2",
        text="The French Revolution began in 1789. It ended the absolute monarchy in France.",
    ),
]
#: the question asked of the sources, with no system prompt
ASKED = GenerationRequest(system="", messages=QUESTION, sources=SOURCES)


@pytest.fixture(scope="module")
def gemini_server() -> Iterator[FakeGemini]:
    """One server per module (start/stop costs ~0.3 s)."""
    with FakeGemini() as server:
        yield server


@pytest.fixture
def gemini(gemini_server: FakeGemini) -> FakeGemini:
    """A fake Gemini server for the module, reset for each test."""
    gemini_server.reset()
    return gemini_server


@pytest.fixture(scope="module")
def openai_server() -> Iterator[FakeOpenAI]:
    """One server per module (start/stop costs ~0.3 s)."""
    with FakeOpenAI(default_text="Plants make food by photosynthesis [T1].") as server:
        yield server


@pytest.fixture
def openai(openai_server: FakeOpenAI) -> FakeOpenAI:
    """A fake OpenAI-compatible server for the module, reset for each test."""
    openai_server.reset()
    return openai_server


def gemini_generator(fake: FakeGemini) -> GeminiGenerator:
    """A generator talking to the fake through the real SDK."""
    client = create_gemini_client(api_key="test-key", base_url=fake.base_url)
    return GeminiGenerator(client=client, model="gemini-2.5-flash", temperature=0.2)


async def collect(
    generator: Generator,
    *,
    messages: Sequence[ChatMessage] = QUESTION,
    sources: Sequence[SourceText] = SOURCES,
    web_search: bool = False,
    system: str = "You are a tutor. Cite sources as [T#].",
) -> list[GenerationChunk]:
    """Every chunk of one stream."""
    return [
        chunk
        async for chunk in generator.stream(
            GenerationRequest(
                system=system, messages=messages, sources=sources, web_search=web_search
            )
        )
    ]


def text_of(chunks: Sequence[GenerationChunk]) -> str:
    """The concatenated text deltas."""
    return "".join(c.text for c in chunks if isinstance(c, TextDelta))


def final_of(chunks: Sequence[GenerationChunk]) -> Final:
    """The last chunk, which must be the only ``Final``."""
    finals = [c for c in chunks if isinstance(c, Final)]
    assert len(finals) == 1 and chunks[-1] is finals[0]
    return finals[0]


async def test_gemini_streams_deltas_in_order_with_thinking_off(gemini: FakeGemini) -> None:
    pieces = ["Photosynthesis ", "turns light ", "into glucose [T1]."]
    gemini.enqueue(Behaviour(chunks=pieces))
    history = [
        ChatMessage(role="user", content="What is chlorophyll?"),
        ChatMessage(role="assistant", content="A green pigment [T1]."),
        *QUESTION,
    ]
    chunks = await collect(gemini_generator(gemini), messages=history)
    assert [c.text for c in chunks if isinstance(c, TextDelta)] == pieces
    usage = next(c for c in chunks if isinstance(c, Usage))
    assert (usage.input_tokens, usage.output_tokens) == (7, 6)  # the fake counts words
    final = final_of(chunks)
    assert (final.provider, final.model, final.finish_reason) == (
        "gemini",
        "gemini-2.5-flash",
        "STOP",
    )
    assert final.cited_sources == ["T1"] and final.fallback_from == []

    (request,) = gemini.requests_to("generate")
    assert request.path == "/v1beta/models/gemini-2.5-flash:streamGenerateContent"
    assert request.query == {"alt": "sse"}
    body = request.body
    thinking = body["generationConfig"]["thinkingConfig"]
    assert thinking.get("thinkingBudget", thinking.get("thinking_budget")) == 0
    assert body["generationConfig"]["temperature"] == 0.2
    assert body["systemInstruction"]["parts"][0]["text"].startswith("You are a tutor")
    assert [c["role"] for c in body["contents"]] == ["user", "model", "user"]
    assert body["contents"][-1]["parts"][0]["text"] == QUESTION[0].content
    assert "tools" not in body


async def test_gemini_chunks_arrive_before_the_answer_is_complete(gemini: FakeGemini) -> None:
    gate = threading.Event()
    gemini.enqueue(Behaviour(chunks=["First ", "second ", "third."], gate=gate))
    stream = gemini_generator(gemini).stream(ASKED)
    first = await anext(stream)
    assert first == TextDelta(text="First ")
    gate.set()
    rest = [chunk async for chunk in stream]
    assert text_of(rest) == "second third."


async def test_a_stream_closed_early_releases_the_connection(gemini: FakeGemini) -> None:
    gate = threading.Event()
    gemini.enqueue(Behaviour(chunks=["Only ", "part."], gate=gate))
    generator = gemini_generator(gemini)
    stream = generator.stream(ASKED)
    assert await anext(stream) == TextDelta(text="Only ")
    await stream.aclose()
    gate.set()
    assert text_of(await collect(generator)).startswith("Fake answer to: How do plants")


async def test_the_fake_also_serves_plain_generation_and_token_counts(gemini: FakeGemini) -> None:
    client = create_gemini_client(api_key="test-key", base_url=gemini.base_url)
    response = await client.aio.models.generate_content(
        model="gemini-2.5-flash", contents="Summarise the session"
    )
    assert response.text == "Fake answer to: Summarise the session"
    counted = await client.aio.models.count_tokens(
        model="gemini-2.5-flash", contents="three little words"
    )
    assert counted.total_tokens == 3
    assert [r.action for r in gemini.requests] == ["generateContent", "countTokens"]


async def test_web_search_grounding_becomes_web_sources_and_supports(gemini: FakeGemini) -> None:
    text = "Le café is a French word. Coffee was first grown in Ethiopia."
    grounding = web_grounding(
        text,
        sources=[("https://example.org/cafe", "example.org"), ("https://history.test", "History")],
        supports=[("Coffee was first grown in Ethiopia.", [1, 0])],
        queries=["coffee origin"],
    )
    gemini.enqueue(Behaviour(text=text, words_per_chunk=2, grounding=grounding))
    chunks = await collect(gemini_generator(gemini), web_search=True)
    assert text_of(chunks) == text
    (mapped,) = [c for c in chunks if isinstance(c, Grounding)]
    assert [(s.label, s.uri, s.title) for s in mapped.sources] == [
        ("W1", "https://example.org/cafe", "example.org"),
        ("W2", "https://history.test", "History"),
    ]
    (support,) = mapped.supports
    # Gemini counts UTF-8 bytes; "é" is two of them, so character offsets differ by one
    assert support.start == text.index("Coffee") and support.end == len(text)
    assert text[support.start : support.end] == support.text
    assert support.sources == ["W2", "W1"] and mapped.queries == ["coffee origin"]
    assert gemini.requests_to("generate")[0].body["tools"] == [{"googleSearch": {}}]


@pytest.mark.parametrize(
    ("status", "error", "reason"),
    [
        (429, UpstreamError, "rate_limited"),
        (500, UpstreamError, "upstream_unavailable"),
        (400, BadInputError, "upstream_rejected"),
        (401, ConfigurationError, "upstream_auth"),
    ],
)
async def test_gemini_errors_map_to_our_errors(
    gemini: FakeGemini, status: int, error: type[Exception], reason: str
) -> None:
    gemini.fail(status)
    with pytest.raises(error) as caught:
        await collect(gemini_generator(gemini))
    assert getattr(caught.value, "reason", None) == reason
    assert len(gemini.requests) == 1


async def test_openai_compatible_streams_with_bearer_key(openai: FakeOpenAI) -> None:
    generator = OpenAICompatibleGenerator(
        base_url=openai.api_base, model="deepseek-chat", api_key="sk-test"
    )
    chunks = await collect(generator)
    assert text_of(chunks) == "Plants make food by photosynthesis [T1]."
    assert sum(isinstance(c, TextDelta) for c in chunks) > 1
    assert any(isinstance(c, Usage) and c.output_tokens == 6 for c in chunks)
    final = final_of(chunks)
    assert (final.provider, final.model, final.finish_reason) == (
        "openai-compatible",
        "deepseek-chat",
        "stop",
    )
    (request,) = openai.requests
    assert request.headers["authorization"] == "Bearer sk-test"
    assert request.body["stream"] is True and request.body["model"] == "deepseek-chat"
    assert [m["role"] for m in request.body["messages"]] == ["system", "user"]


async def test_openai_compatible_rate_limit_is_upstream_error(openai: FakeOpenAI) -> None:
    openai.fail(429)
    generator = OpenAICompatibleGenerator(base_url=openai.api_base, model="m")
    with pytest.raises(UpstreamError) as caught:
        await collect(generator)
    assert caught.value.reason == "rate_limited"


async def test_fallback_retries_primary_once_then_uses_the_fallback(
    gemini: FakeGemini, openai: FakeOpenAI
) -> None:
    gemini.fail(429, times=2)
    fallback = OpenAICompatibleGenerator(base_url=openai.api_base, model="deepseek-chat")
    generator = FallbackGenerator(
        gemini_generator(gemini), [fallback, OfflineAnswerer()], retry_delay_s=0.0
    )
    chunks = await collect(generator)
    assert text_of(chunks) == "Plants make food by photosynthesis [T1]."
    final = final_of(chunks)
    assert final.provider == "openai-compatible"
    assert final.fallback_from == ["gemini", "gemini"]
    assert len(gemini.requests) == 2 and len(openai.requests) == 1


async def test_fallback_retry_of_primary_can_succeed(
    gemini: FakeGemini, openai: FakeOpenAI
) -> None:
    gemini.fail(503)
    gemini.enqueue(Behaviour(text="Recovered answer [T1]."))
    fallback = OpenAICompatibleGenerator(base_url=openai.api_base, model="deepseek-chat")
    chunks = await collect(FallbackGenerator(gemini_generator(gemini), [fallback], retry_delay_s=0))
    assert text_of(chunks) == "Recovered answer [T1]."
    assert (final_of(chunks).provider, final_of(chunks).fallback_from) == ("gemini", ["gemini"])
    assert openai.requests == []


async def test_fallback_ends_with_the_offline_answerer(
    gemini: FakeGemini, openai: FakeOpenAI
) -> None:
    gemini.fail(429, times=2)
    openai.fail(503)
    fallback = OpenAICompatibleGenerator(base_url=openai.api_base, model="deepseek-chat")
    generator = FallbackGenerator(
        gemini_generator(gemini), [fallback, OfflineAnswerer()], retry_delay_s=0
    )
    chunks = await collect(generator)
    final = final_of(chunks)
    assert final.provider == "offline" and final.outcome == "answered"
    assert final.fallback_from == ["gemini", "gemini", "openai-compatible"]
    assert "[T1]" in text_of(chunks)


async def test_an_unreachable_gemini_falls_back() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    client = create_gemini_client(api_key="k", base_url=f"http://127.0.0.1:{closed_port}")
    generator = FallbackGenerator(
        GeminiGenerator(client=client), [OfflineAnswerer()], retry_delay_s=0
    )
    final = final_of(await collect(generator))
    assert (final.provider, final.fallback_from) == ("offline", ["gemini", "gemini"])


@pytest.mark.parametrize("status", [400, 401, 403])
async def test_permanent_errors_fall_back_without_a_retry(
    gemini: FakeGemini, openai: FakeOpenAI, status: int
) -> None:
    # a revoked key or a bad model name: retrying the same call cannot help, the next can
    gemini.fail(status)
    fallback = OpenAICompatibleGenerator(base_url=openai.api_base, model="m")
    before = fallback_count()
    chunks = await collect(FallbackGenerator(gemini_generator(gemini), [fallback], retry_delay_s=0))
    final = final_of(chunks)
    assert (final.provider, final.fallback_from) == ("openai-compatible", ["gemini"])
    assert len(gemini.requests) == 1 and len(openai.requests) == 1
    assert fallback_count() == before + 1


async def test_when_every_provider_fails_the_last_error_is_raised(
    gemini: FakeGemini, openai: FakeOpenAI
) -> None:
    gemini.fail(401)
    openai.fail(400)
    fallback = OpenAICompatibleGenerator(base_url=openai.api_base, model="m")
    with pytest.raises(BadInputError):
        await collect(FallbackGenerator(gemini_generator(gemini), [fallback], retry_delay_s=0))


async def test_the_retry_waits_as_long_as_the_server_asks(
    gemini: FakeGemini, openai: FakeOpenAI
) -> None:
    gemini.enqueue(Behaviour.error(429, retry_delay_s=0.6), endpoint="generate")
    generator = FallbackGenerator(gemini_generator(gemini), [], retry_delay_s=0.01)
    began = time.perf_counter()
    final = final_of(await collect(generator))
    assert final.provider == "gemini" and final.fallback_from == ["gemini"]
    assert time.perf_counter() - began >= 0.6


async def test_a_retry_wait_longer_than_the_cap_goes_straight_to_the_fallback(
    gemini: FakeGemini, openai: FakeOpenAI
) -> None:
    gemini.enqueue(Behaviour.error(429, retry_delay_s=37), endpoint="generate")
    fallback = OpenAICompatibleGenerator(base_url=openai.api_base, model="m")
    generator = FallbackGenerator(
        gemini_generator(gemini), [fallback], retry_delay_s=0, max_retry_wait_s=5
    )
    began = time.perf_counter()
    final = final_of(await collect(generator))
    assert (final.provider, final.fallback_from) == ("openai-compatible", ["gemini"])
    assert time.perf_counter() - began < 5 and len(gemini.requests) == 1


async def test_an_openai_compatible_retry_after_header_is_read(openai: FakeOpenAI) -> None:
    openai.enqueue(Behaviour(status=429, headers={"Retry-After": "7"}))
    generator = OpenAICompatibleGenerator(base_url=openai.api_base, model="m")
    with pytest.raises(UpstreamError) as raised:
        await collect(generator)
    assert raised.value.reason == "rate_limited" and raised.value.retry_after_s == 7.0


def test_retry_after_accepts_seconds_and_http_dates() -> None:
    assert retry_after_seconds("12") == 12.0
    assert retry_after_seconds(None) is None and retry_after_seconds("soon") is None
    later = email.utils.format_datetime(datetime.now(UTC) + timedelta(seconds=30), usegmt=True)
    assert 25 <= (retry_after_seconds(later) or 0) <= 30


def fallback_count() -> float:
    """``lectern.llm.fallbacks`` as Prometheus scrapes it."""
    install_telemetry()
    return local_total("lectern_llm_fallbacks_total")


class _FailsMidStream:
    """A provider that streams one delta and then loses its upstream."""

    name = "flaky"

    async def stream(self, request: GenerationRequest) -> GenerationStream:
        yield TextDelta(text="Partial ")
        raise UpstreamError("connection lost", reason="upstream_unreachable")


async def test_no_fallback_once_text_was_streamed() -> None:
    generator = FallbackGenerator(_FailsMidStream(), [OfflineAnswerer()], retry_delay_s=0)
    stream = generator.stream(ASKED)
    assert await anext(stream) == TextDelta(text="Partial ")
    with pytest.raises(UpstreamError):
        await anext(stream)


async def test_build_generator_chains_gemini_fallback_and_offline(
    gemini: FakeGemini, openai: FakeOpenAI
) -> None:
    settings = BaseServiceSettings(
        gemini_api_key="k",  # type: ignore[arg-type]
        gemini_base_url=gemini.base_url,
        fallback_llm_base_url=openai.api_base,
        fallback_llm_api_key="sk-fallback",  # type: ignore[arg-type]
        fallback_llm_model="deepseek-chat",
    )
    generator = build_generator(settings)
    assert isinstance(generator, FallbackGenerator)
    assert [g.name for g in generator.fallbacks] == [
        "gemini-secondary", "openai-compatible", "offline"
    ]  # fmt: skip
    gemini.fail(429, times=3)
    generator.retry_delay_s = 0
    chunks = await collect(generator)
    assert final_of(chunks).provider == "openai-compatible"
    assert openai.requests[0].headers["authorization"] == "Bearer sk-fallback"
    assert gemini.requests[0].headers["x-goog-api-key"] == "k"


def test_without_keys_the_generator_is_offline() -> None:
    assert isinstance(build_generator(BaseServiceSettings()), OfflineAnswerer)


def test_the_offline_answerer_reads_at_most_what_it_is_given() -> None:
    from lectern_answerer import READ_AT_MOST
    from lectern_gateway.config import Settings as GatewaySettings

    default = build_generator(BaseServiceSettings())
    assert isinstance(default, OfflineAnswerer) and default.read_at_most == READ_AT_MOST == 8
    assert GatewaySettings().offline_answerer_read_at_most == READ_AT_MOST
    few = build_generator(BaseServiceSettings(), read_at_most=3)
    every = build_generator(BaseServiceSettings(), read_at_most=None)
    assert isinstance(few, OfflineAnswerer) and few.read_at_most == 3
    assert isinstance(every, OfflineAnswerer) and every.read_at_most is None
    # 4 of them first, the rest when none reads as an answer; 0 in the setting: all at once
    assert default.read_first == 4 == GatewaySettings().offline_answerer_read_first
    at_once = build_generator(BaseServiceSettings(), read_first=None)
    assert isinstance(at_once, OfflineAnswerer) and at_once.read_first is None


# --- offline answerer -------------------------------------------------------------------


async def test_offline_picks_the_answering_sentence_and_cites_it() -> None:
    chunks = await collect(OfflineAnswerer())
    text = text_of(chunks)
    assert text.startswith("Photosynthesis is the process by which plants turn sunlight")
    assert "[T2]" not in text and "French" not in text
    assert set(cited_labels(text)) <= {s.label for s in SOURCES}
    final = final_of(chunks)
    assert (final.provider, final.outcome, final.cited_sources) == ("offline", "answered", ["T1"])


async def test_offline_streams_a_sentence_a_delta_deterministically() -> None:
    answerer = OfflineAnswerer()
    first, second = await collect(answerer), await collect(answerer)
    assert first == second
    deltas = [c.text for c in first if isinstance(c, TextDelta)]
    answer = await answerer.answer(question=QUESTION[0].content, sources=SOURCES)
    # one delta per answer sentence, each ending at its citation's stop, joined the answer
    assert len(deltas) == len(answer.sentences) >= 2
    assert "".join(deltas) == answer.render()
    assert all(re.search(r"\[T\d+\][.!?:]?$", d.strip()) for d in deltas)


async def test_offline_says_so_when_nothing_supports_an_answer() -> None:
    question = [ChatMessage(role="user", content="What is the capital of Peru?")]
    chunks = await collect(OfflineAnswerer(), messages=question)
    assert text_of(chunks) == NO_SUPPORT_TEXT
    final = final_of(chunks)
    assert (final.outcome, final.cited_sources) == ("no_support", [])


def test_the_best_sentence_leads_and_its_passage_follows_in_document_order() -> None:
    sources = [
        SourceText(
            label="T1",
            text=(
                "Glucose moves through the phloem. Rain falls in spring. "
                "Glucose is stored in roots as starch."
            ),
        )
    ]
    answer = extract_answer(
        question="How is glucose stored as starch in the phloem?", sources=sources
    )
    best = max(answer.sentences, key=lambda s: s.score)
    assert best.position == 2
    # the best sentence brings the one before it in its paragraph (an answer is a passage);
    # the answer leads with the answer, the rest of the passage after it in the source's order
    assert [s.position for s in answer.sentences] == [2, 0, 1]
    assert answer.render() == (
        "Glucose is stored in roots as starch [T1]. Glucose moves through the phloem [T1]. "
        "Rain falls in spring [T1]."
    )
    led = extract_answer(
        question="How is glucose stored as starch in the phloem?", sources=sources,
        without=frozenset({"best_first"}),
    )  # fmt: skip
    assert [s.position for s in led.sentences] == [0, 1, 2]


def test_sentences_follow_the_best_source_first() -> None:
    sources = [
        SourceText(label="T1", text="Revolutions change governments. Kings lose power in them."),
        SourceText(label="T2", text="The French Revolution began in 1789 in Paris."),
    ]
    answer = extract_answer(question="When did the French Revolution begin?", sources=sources)
    assert answer.cited[0] == "T2"


def test_split_sentences_handles_paragraphs_bullets_and_line_breaks() -> None:
    text = "Heading line\n\nFirst sentence runs\nacross lines. Second one!\n- bullet point here"
    assert split_sentences(text) == [
        "Heading line",
        "First sentence runs across lines.",
        "Second one!",
        "bullet point here",
    ]
