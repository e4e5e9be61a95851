"""The re-ranker's one read per candidate: a reader with a span head gives each candidate's
relevance and its answer span, mapped from what was read back into the chunk's text."""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence
from datetime import date

from lectern_common.events import Candidate, RerankRequest
from lectern_common.reading import Reading
from lectern_reranker.service import (
    RerankConfig,
    ScorerName,
    SpanReader,
    answer_spans,
    locate_span,
    read_texts,
    rerank,
)

TODAY = date(2026, 1, 1)
YEAR = re.compile(r"\b1\d{3}\b")


class YearReader:
    """A crude span reader for "when" questions: the first year in a text is the answer
    (span score 8 against a null score of 2), a text without one answers nothing (null 6)."""

    def __init__(self) -> None:
        self.read_calls = 0
        self.score_calls = 0
        self.max_length = 64

    @property
    def name(self) -> ScorerName:
        return "cross-encoder"

    @property
    def spans(self) -> bool:
        return True

    async def score(self, query: str, texts: Sequence[str]) -> list[float]:
        self.score_calls += 1
        return [0.9 if YEAR.search(t) else 0.1 for t in texts]

    async def read(self, query: str, texts: Sequence[str]) -> list[Reading]:
        self.read_calls += 1
        out = []
        for text in texts:
            found = YEAR.search(text)
            if found is None:
                out.append(Reading(-3.0, span_score=1.0, null_score=6.0))
            else:
                out.append(Reading(3.0, found.start(), found.end(), 8.0, 2.0))
        return out

    def count_tokens(self, text: str) -> int:
        return len(text.split())


def candidate(text: str, prefix: str | None = None) -> Candidate:
    return Candidate(
        chunk_id=uuid.uuid4(), document_id=uuid.uuid4(), title="History", text=text,
        context_prefix=prefix,
    )  # fmt: skip


def test_a_span_is_found_in_the_chunk_text_with_loose_spaces() -> None:
    text = "The revolution began\nin   1789 in Paris. It ended in 1799."
    read = "Chapter 2 > France\nThe revolution began in 1789 in Paris."
    start = read.index("began in 1789")
    span = locate_span(text, read, start, start + len("began in 1789"))
    assert span is not None
    assert text[span[0] : span[1]] == "began\nin   1789"


def test_a_repeated_span_is_the_occurrence_after_the_same_words() -> None:
    text = "Paris fell in 1871. Rome fell in 1871. Berlin held."
    read = "Rome fell in 1871. Berlin held."
    span = locate_span(text, read, read.index("1871"), read.index("1871") + 4)
    at = text.index("Rome fell in 1871") + len("Rome fell in ")
    assert span == (at, at + 4)


def test_a_span_in_the_prefix_alone_is_none() -> None:
    text = "The revolution began in 1789."
    read = "Chapter Monarchy\nThe revolution began in 1789."
    assert locate_span(text, read, 8, 16) is None
    assert locate_span(text, read, 3, 3) is None


def test_answer_spans_carry_the_scores_and_skip_what_is_not_in_the_chunk() -> None:
    chunks = [candidate("It began in 1789."), candidate("Nothing here.")]
    texts = ["Prefix\nIt began in 1789.", "Nothing here."]
    at = texts[0].index("1789")
    reads = [
        Reading(2.0, start=at, end=at + 4, span_score=7.5, null_score=1.5),
        Reading(-1.0, start=0, end=7, span_score=0.5, null_score=4.0),
    ]
    found = answer_spans(chunks, texts, reads)
    assert found[0] is not None and chunks[0].text[found[0].start : found[0].end] == "1789"
    assert found[0].margin == 6.0
    # the second read marked "Nothing", a span with no answer: kept, its margin negative
    assert found[1] is not None and found[1].margin < 0
    assert answer_spans(chunks[:1], texts[:1], [Reading(2.0)]) == [None]


async def test_one_read_gives_relevance_and_the_answer_span_in_the_chunk() -> None:
    scorer = YearReader()
    assert isinstance(scorer, SpanReader)
    long_chunk = " ".join(
        ["Kings ruled France for centuries and taxed the peasants heavily."] * 6
        + ["The storming of the Bastille took place in 1789 during the revolution."]
        + ["Bread prices rose sharply across the country that spring."] * 3
    )
    chunks = [candidate("Paris is the capital of France."), candidate(long_chunk, "France")]
    request = RerankRequest(
        tenant_id="t", query="When did the storming of the Bastille happen?",
        candidates=chunks, top_k=2,
    )  # fmt: skip
    config = RerankConfig(relevance=None)
    # a chunk longer than the reading length is read in a window, not whole
    assert read_texts(request.query, chunks, scorer, config)[1] != long_chunk
    reply = await rerank(request=request, scorer=scorer, config=config, today=TODAY)
    assert scorer.read_calls == 1 and scorer.score_calls == 0  # one read, nothing again
    best = reply.chunks[0]
    assert best.candidate.text == long_chunk
    assert best.answer is not None
    assert long_chunk[best.answer.start : best.answer.end] == "1789"
    assert best.answer.margin == 6.0
    other = reply.chunks[1]
    assert other.answer is None  # the reader marked no span in it
    assert best.semantic > other.semantic


async def test_a_reader_without_a_span_head_scores_and_marks_nothing() -> None:
    class Plain(YearReader):
        @property
        def spans(self) -> bool:
            return False

    scorer = Plain()
    request = RerankRequest(
        tenant_id="t", query="When?", candidates=[candidate("It began in 1789.")]
    )
    reply = await rerank(
        request=request, scorer=scorer, config=RerankConfig(relevance=None), today=TODAY
    )
    assert scorer.score_calls == 1 and scorer.read_calls == 0
    assert reply.chunks[0].answer is None
