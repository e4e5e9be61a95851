"""The offline answerer over sources the re-ranker's reader read once: its answer spans say
which unit answers, and the answerer reads nothing again."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Literal

import numpy as np
from numpy.typing import NDArray

from lectern_answerer import (
    QUESTION_SIGNALS,
    READER_CLIP,
    SIGNALS,
    OfflineAnswerer,
    answer_holders,
    best_margin,
    has_answer_spans,
    question_form,
    question_signals,
    source_units,
    unit_signals,
)
from lectern_common.events import AnswerSpan
from lectern_common.generation import SourceText
from lectern_common.text import terms

STORY = (
    "The miller's daughter lived by the river. The king locked her in a room full of straw. "
    "She wept because she could not spin straw into gold. A little man came and spun it "
    "for her necklace."
)


def spanned(text: str, answer: str, *, score: float = 9.0, null: float = 1.0) -> SourceText:
    at = text.index(answer)
    return SourceText(
        label="T1", text=text,
        answer=AnswerSpan(start=at, end=at + len(answer), score=score, null_score=null),
    )  # fmt: skip


class CountingReader:
    """A reader that says every text answers, and counts what it was asked to read."""

    def __init__(self) -> None:
        self.read: list[str] = []

    async def score_logits(
        self, question: str, texts: Sequence[str],
        *, kind: Literal["sentence", "passage"] = "sentence",
    ) -> NDArray[np.float32]:  # fmt: skip
        self.read += list(texts)
        return np.ones(len(texts), dtype=np.float32)


def test_the_unit_holding_the_span_is_marked_with_its_margin() -> None:
    source = spanned(STORY, "she could not spin straw into gold")
    units = source_units([source])
    holders = answer_holders([source], units)
    assert len(holders) == 1
    ((index, margin),) = holders.items()
    assert units[index].text.startswith("She wept because")
    assert margin == 8.0
    signals = unit_signals(
        "Why did she weep?", question_form("Why did she weep?"), units,
        [Counter(terms(u.text)) for u in units], None, sources=[source],
    )  # fmt: skip
    at_span, at_margin = SIGNALS.index("answer_span"), SIGNALS.index("answer_margin")
    assert signals[index, at_span] == 1.0 and signals[index, at_margin] == 8.0
    others = [i for i in range(len(units)) if i != index]
    assert not signals[others, at_span].any() and not signals[others, at_margin].any()


def test_repeated_words_fall_to_the_unit_the_span_lies_in() -> None:
    text = "Gold was rare. The king wanted gold. The queen wanted gold."
    source = spanned(text, "The queen wanted gold")
    at = text.index("wanted gold", text.index("queen"))
    source = source.model_copy(
        update={"answer": AnswerSpan(start=at, end=at + 11, score=5.0, null_score=1.0)}
    )
    units = source_units([source])
    (index,) = answer_holders([source], units)
    assert units[index].text == "The queen wanted gold."


def test_a_span_beyond_any_unit_or_none_marks_nothing() -> None:
    plain = SourceText(label="T1", text=STORY)
    assert answer_holders([plain], source_units([plain])) == {}
    assert not has_answer_spans([plain])
    assert best_margin([plain]) == -READER_CLIP
    doubted = spanned(STORY, "straw", score=1.0, null=30.0)
    assert best_margin([plain, doubted]) == -READER_CLIP  # clipped
    assert best_margin([spanned(STORY, "straw", score=4.0, null=1.5)]) == 2.5


def test_the_best_margin_is_a_question_signal() -> None:
    source = spanned(STORY, "spun it")
    units = source_units([source])
    bags = [Counter(terms(u.text)) for u in units]
    question = "Who spun the straw?"
    signals = unit_signals(question, question_form(question), units, bags, None, sources=[source])
    row = question_signals(
        question, list(terms(question)), bags, signals, np.zeros(len(units)), [source]
    )
    assert row[QUESTION_SIGNALS.index("best_margin")] == 8.0


async def test_the_answerer_does_not_read_what_the_reranker_read() -> None:
    reader = CountingReader()
    answerer = OfflineAnswerer(reader=reader, from_spans=True)
    read = spanned(STORY, "spun it")
    await answerer.answer(question="Who spun the straw into gold?", sources=[read])
    assert reader.read == []
    # by default it reads the sentences itself, spans or not (the 6-layer reader reads
    # sentences better than the 3-layer span head marks answers)
    await OfflineAnswerer(reader=reader).answer(
        question="Who spun the straw into gold?", sources=[read]
    )
    assert reader.read
    reader.read.clear()
    await answerer.answer(
        question="Who spun the straw into gold?", sources=[SourceText(label="T1", text=STORY)]
    )
    assert reader.read  # without spans it reads the units itself, as before


def test_the_source_holding_the_answer_opens_the_answer() -> None:
    from lectern_answerer import ScoredSentence
    from lectern_answerer.compose import in_answer_order
    from lectern_answerer.units import answer_source

    def unit(source: int, position: int, score: float, defines: bool = False) -> ScoredSentence:
        return ScoredSentence(f"T{source + 1}", source, position, "x y z", 0.5, None, score,
                              defines=defines)  # fmt: skip

    chosen = [unit(0, 3, 0.9), unit(1, 2, 0.8), unit(1, 1, 0.7)]
    assert [(c.source_index, c.position) for c in in_answer_order(chosen)] == [
        (0, 3),
        (1, 1),
        (1, 2),
    ]
    led = in_answer_order(chosen, leads=1)
    assert [(c.source_index, c.position) for c in led] == [(1, 1), (1, 2), (0, 3)]
    # a definition still opens a definition question's answer
    defined = [unit(0, 3, 0.9, defines=True), *chosen[1:]]
    assert in_answer_order(defined, leads=1)[0].source_index == 0
    plain = SourceText(label="T1", text=STORY)
    assert answer_source([plain, spanned(STORY, "spun it", score=2.0, null=5.0)]) == 1
    assert answer_source([plain]) is None
