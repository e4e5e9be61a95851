"""The packaged reader: it loads offline from the package, reads, and batches without changing
what it reads.

The questions and sentences here were written for this test, not taken from the reader's
training data (SQuAD, SelQA, PubMedQA, BioASQ).
"""

import asyncio
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import numpy as np
import pytest
from lectern_testing.metrics import install_telemetry, local_total
from numpy.typing import NDArray

from lectern_common import reading

pytestmark = pytest.mark.slow

QUESTION = "What does the enzyme amylase break down?"
ANSWER = "Amylase, made in the salivary glands, breaks starch down into simpler sugars."
NEAR_MISSES = [
    "The salivary glands make about a litre of saliva a day.",
    "Enzymes are proteins that speed up chemical reactions in cells.",
    "Amylase was the first enzyme to be described, in 1833.",
    "Bread and potatoes are rich in starch.",
]


@pytest.fixture(scope="module")
def reader() -> reading.Reader:
    return reading.Reader.load()


@pytest.mark.parametrize(("folder", "layers"), [(reading.PACKAGED, 6), (reading.PACKAGED_L3, 3)])
def test_the_packaged_readers_are_shipped_small_and_described(folder: Path, layers: int) -> None:
    assert reading.available(folder)
    card = json.loads((folder / "reader.json").read_text())
    assert card["precision"] == "int8"
    assert card["max_length"] == {"sentence": 128, "passage": 256}
    assert card["name"] == f"lectern-reader-minilm-l{layers}"
    assert card["training"].get("layers", 6) == layers
    assert (folder / "model.onnx").stat().st_size < 30e6
    assert (folder / "MODEL_CARD.md").is_file()


def test_the_answering_sentence_reads_best(reader: reading.Reader) -> None:
    logits = reader.logits(QUESTION, [*NEAR_MISSES, ANSWER], kind="sentence")
    assert int(np.argmax(logits)) == len(NEAR_MISSES)
    assert logits[-1] > 0 > max(logits[:-1])  # a score to threshold, not only an order


def test_a_question_the_text_does_not_answer_reads_low(reader: reading.Reader) -> None:
    logits = reader.logits("Who won the football World Cup in 2014?", [ANSWER, *NEAR_MISSES])
    assert logits.max() < 0


def test_a_pair_reads_the_same_whatever_is_read_beside_it(reader: reading.Reader) -> None:
    """int8 activations are quantised per tensor: batched, a pair's score would move with its
    neighbours'; the reader runs each pair alone."""
    texts = [ANSWER, *NEAR_MISSES, " ".join([ANSWER] * 40)]  # the last is cut to fit
    together = reader.logits(QUESTION, texts, kind="passage")
    alone = np.asarray([reader.logits(QUESTION, [t], kind="passage")[0] for t in texts])
    reverse = reader.logits(QUESTION, texts[::-1], kind="passage")[::-1]
    np.testing.assert_array_equal(together, alone)
    np.testing.assert_array_equal(together, reverse)


def test_passages_are_cut_at_the_kind_s_length(reader: reading.Reader) -> None:
    long = " ".join(["Starch is a chain of glucose units."] * 200)
    assert reader.count_tokens(long) > reader.max_length("passage")
    cut = reader.logits(QUESTION, [long], kind="passage", max_length=64)
    same = reader.logits(QUESTION, [" ".join(long.split()[:80])], kind="passage", max_length=64)
    np.testing.assert_allclose(cut, same, atol=1e-4)


def test_what_reading_costs_is_counted_in_the_metrics(reader: reading.Reader) -> None:
    """``lectern.reader.cpu_time`` and ``.pieces``: what ``make soak`` divides by the turns."""
    install_telemetry()
    cpu = "lectern_reader_cpu_time_seconds_total"
    before = local_total(cpu, kind="passage")
    pieces_before = local_total("lectern_reader_pieces_total", kind="passage")
    texts = [" ".join([ANSWER] * 8), *NEAR_MISSES]
    reader.logits(QUESTION, texts, kind="passage")
    read = sum(len(reader._tokenizer(256).encode(QUESTION, t).ids) for t in texts)
    assert local_total("lectern_reader_pieces_total", kind="passage") - pieces_before == read
    assert local_total(cpu, kind="passage") > before


def test_nothing_to_read_is_nothing(reader: reading.Reader) -> None:
    assert reader.logits(QUESTION, []).shape == (0,)
    assert asyncio.run(reader.score_logits(QUESTION, [])).shape == (0,)


def test_probability_is_the_logistic_map() -> None:
    np.testing.assert_allclose(
        reading.probability([0.0, 100.0, -100.0]), [0.5, 1.0, 0.0], atol=1e-12
    )


def test_a_missing_folder_is_not_available(tmp_path: Path) -> None:
    assert not reading.available(tmp_path)


async def test_the_offline_answerer_quotes_what_the_reader_finds_answering() -> None:
    """Among sentences that share the question's words, the answerer with the reader quotes
    the one that answers, and says plainly when none does."""
    from lectern_answerer import OfflineAnswerer
    from lectern_common.embeddings import LocalEmbedder
    from lectern_common.generation import SourceText

    passage = " ".join([NEAR_MISSES[0], NEAR_MISSES[2], ANSWER, NEAR_MISSES[1], NEAR_MISSES[3]])
    sources = [
        SourceText(label="T1", text=passage, score=0.9),
        SourceText(label="T2", text="Saliva keeps the mouth moist.", score=0.4),
    ]
    answerer = OfflineAnswerer(embedder=LocalEmbedder(), reader=reading.packaged())
    answer = await answerer.answer(question=QUESTION, sources=sources)
    assert answer.supported and ANSWER.split(",")[0] in answer.render()
    assert answer.cited == ["T1"]
    readings = await answerer.readings(QUESTION, [ANSWER, NEAR_MISSES[0]])
    assert readings is not None and readings[0] > readings[1]
    off = await answerer.answer(question="Who painted the Mona Lisa?", sources=sources)
    assert not off.supported


async def test_the_offline_answerer_reads_only_the_units_it_may_answer_from() -> None:
    """Of many units the answerer reads at most ``read_at_most``, those ranked highest
    without the reader (the answering one among them); the rest get the lowest logit read,
    and the answer is the one reading everything gives."""
    from lectern_answerer import OfflineAnswerer, source_units
    from lectern_common.embeddings import LocalEmbedder
    from lectern_common.generation import SourceText

    filler = [
        f"Chapter {n} of the handbook lists the opening hours of library number {n}."
        for n in range(1, 25)
    ]
    sources = [
        SourceText(label="T1", text=" ".join([*filler[:12], ANSWER, *NEAR_MISSES]), score=0.9),
        SourceText(label="T2", text=" ".join(filler[12:]), score=0.3),
    ]
    units = source_units(sources)
    assert len(units) > 20

    class Counting:
        def __init__(self) -> None:
            self.inner = reading.packaged()
            self.read: list[str] = []

        async def score_logits(
            self,
            question: str,
            texts: Sequence[str],
            *,
            kind: Literal["sentence", "passage"] = "sentence",
        ) -> NDArray[np.float32]:
            self.read.extend(texts)
            return await self.inner.score_logits(question, texts, kind=kind)

    embedder = LocalEmbedder()
    counting = Counting()
    few = OfflineAnswerer(embedder=embedder, reader=counting, read_at_most=6, read_first=None)
    answer = await few.answer(question=QUESTION, sources=sources)
    assert len(counting.read) == 6 and ANSWER in counting.read
    every = OfflineAnswerer(
        embedder=embedder, reader=reading.packaged(), read_at_most=None, read_first=None
    )
    assert answer.render() == (await every.answer(question=QUESTION, sources=sources)).render()
    assert answer.supported and "starch" in answer.render()
    similarities = await few.similarities(QUESTION, [u.text for u in units])
    read = await few.unit_readings(QUESTION, sources, units, similarities)
    assert read is not None and read.margins is None  # the packaged reader has no span head
    logits = read.logits
    assert len(logits) == len(units)
    assert sum(v > min(logits) for v in logits) == 5  # the unread ones hold the lowest read


async def test_the_offline_answerer_reads_the_rest_only_when_none_of_the_first_answers() -> None:
    """With ``read_first``, the answerer reads the cheap model's first units, and the others
    of its ``read_at_most`` only when none of the first reads as an answer (a logit of
    ``read_enough`` or more); ``units_read`` counts what was read."""
    from lectern_answerer import OfflineAnswerer
    from lectern_common.embeddings import LocalEmbedder
    from lectern_common.generation import SourceText

    filler = [
        f"Chapter {n} of the handbook lists the opening hours of library number {n}."
        for n in range(1, 25)
    ]
    sources = [SourceText(label="T1", text=" ".join([*filler, ANSWER]), score=0.9)]
    embedder, reader = LocalEmbedder(), reading.packaged()

    def answerer(read_enough: float) -> OfflineAnswerer:
        return OfflineAnswerer(
            embedder=embedder, reader=reader, read_at_most=6, read_first=2,
            read_enough=read_enough,
        )  # fmt: skip

    content = answerer(read_enough=-100.0)  # any unit reads as an answer: two reads
    await content.answer(question=QUESTION, sources=sources)
    assert content.units_read == 2
    doubting = answerer(read_enough=100.0)  # none ever does: the other four are read too
    answer = await doubting.answer(question=QUESTION, sources=sources)
    assert doubting.units_read == 6
    assert answer.supported and "starch" in answer.render()
    # the answer is among the cheap model's first two, and reads as one: two reads suffice
    fitted = answerer(read_enough=0.0)
    assert (await fitted.answer(question=QUESTION, sources=sources)).render() == answer.render()
    assert fitted.units_read == 2


async def test_a_reader_with_a_span_head_gives_the_answerer_each_read_unit_s_margin() -> None:
    """The answerer reading with a span-headed reader (the packaged 3-layer one here) gets,
    beside each unit's logit, how far its best span beats "no answer here", for the units it
    read and those alone; the span signals and the question's best margin are those reads'."""
    from collections import Counter

    import lectern_answerer as answerer
    from lectern_common.embeddings import LocalEmbedder
    from lectern_common.generation import SourceText
    from lectern_common.text import terms

    spans = reading.named(reading.PACKAGED_L3_SPANS_NAME)
    assert spans.spans
    filler = [f"Room {n} of the museum shows the tools of trade number {n}." for n in range(1, 9)]
    sources = [SourceText(label="T1", text=" ".join([*filler, ANSWER, *NEAR_MISSES]), score=0.9)]
    units = answerer.source_units(sources)
    offline = answerer.OfflineAnswerer(
        embedder=LocalEmbedder(), reader=spans, read_at_most=4, read_first=None
    )
    assert offline.reads_spans
    similarities = await offline.similarities(QUESTION, [u.text for u in units])
    read = await offline.unit_readings(QUESTION, sources, units, similarities)
    assert read is not None and read.margins is not None
    held = answerer.units.read_margins(read.margins)
    assert len(held) == 4 == offline.units_read
    texts = answerer.reader_texts(units)
    direct = spans.read(QUESTION, [texts[i] for i in held], kind="sentence")
    assert [held[i] for i in held] == pytest.approx([r.margin for r in direct])
    bags = [Counter(terms(u.text)) for u in units]
    signals = answerer.unit_signals(
        QUESTION, answerer.question_form(QUESTION), units, bags, similarities, sources=sources,
        readings=read.logits, margins=read.margins,
    )  # fmt: skip
    column = answerer.SIGNALS.index("answer_margin")
    for index, unit_margin in enumerate(read.margins):
        expected = 0.0 if unit_margin is None else np.clip(unit_margin, -12, 12)
        assert signals[index, column] == pytest.approx(expected)
    best = answerer.question_signals(
        QUESTION, terms(QUESTION), bags, signals, np.zeros(len(units)), sources, read.margins
    )[answerer.QUESTION_SIGNALS.index("best_margin")]
    assert best == pytest.approx(np.clip(max(held.values()), -12, 12))
    # the shipped answer model weighs no span signal: the answer is the one without margins
    answer = await offline.answer(question=QUESTION, sources=sources)
    assert answer.supported and "starch" in answer.render()
