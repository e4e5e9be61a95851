"""The offline answerer as a generator: the units that answer, cited, streamed a few words at
a time; the local embedding model's cosines and the reader's logits when it has them (the
reader reads only the units a cheaper model ranks highest)."""

from __future__ import annotations

import asyncio
from collections import Counter, OrderedDict
from collections.abc import Container, Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol, cast

import numpy as np

from lectern_answerer.answer import ExtractiveAnswer
from lectern_answerer.compose import extract_answer
from lectern_answerer.forms import question_form
from lectern_answerer.model import answer_model
from lectern_answerer.signals import unit_signals
from lectern_answerer.units import (
    SourceUnit,
    UnitReadings,
    has_answer_spans,
    reader_texts,
    source_units,
)
from lectern_common.generation import Final, TextDelta, Verdict
from lectern_common.text import resolve_follow_up, terms

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from lectern_common.embeddings import Embedder
    from lectern_common.generation import GenerationRequest, GenerationStream, SourceText
    from lectern_common.reading import Reading


class SentenceReader(Protocol):
    """What the answerer needs of ``lectern_common.reading.Reader``."""

    async def score_logits(
        self, question: str, texts: Sequence[str], *, kind: Literal["sentence", "passage"] = ...
    ) -> NDArray[np.float32]:
        """The reader's logit of each (question, text) pair."""
        ...


class SpanReader(SentenceReader, Protocol):
    """A reader with a span head (``lectern_common.reading.Reader`` whose graph has one):
    each read also says where the answer is and how far it beats "no answer here"."""

    spans: bool

    async def score_readings(
        self, question: str, texts: Sequence[str], *, kind: Literal["sentence", "passage"] = ...
    ) -> list[Reading]:
        """One read of each (question, text) pair."""
        ...


#: the units the offline answerer reads at most, those the model without the reader ranks
#: highest (docs/benchmarks.md: on the development split its top 8 hold the full model's best
#: unit for 0.996 of the questions, its top 16 for all, its top 4 for 0.955). Each read is
#: ~5 ms of a core: 16 were two thirds of the gateway's CPU a turn under load (issue 58)
READ_AT_MOST = 8
#: the units read first, of those ``READ_AT_MOST``; the rest are read only when none of them
#: reads as an answer (a logit of ``READ_ENOUGH_LOGIT`` or more: even odds, not fitted). None:
#: all at once. Replayed on the answer set's stored sources (docs/benchmarks.md, thirty-sixth
#: session): 6.1-6.2 units read a question instead of 8, key-fact recall dev 0.811 -> 0.808,
#: test 0.676 -> 0.676, where reading 6 at once kept dev and lost test to 0.669
READ_FIRST: int | None = 4
READ_ENOUGH_LOGIT = 0.0


class OfflineAnswerer:
    """Answers from the sources alone: the units that answer, cited, streamed."""

    name = "offline"

    def __init__(
        self,
        *,
        embedder: Embedder | None = None,
        reader: SentenceReader | None = None,
        max_sentences: int = 4,
        cache_floats: int = 8_000_000,  # 32 MB of vectors: 20,000 sentences of MiniLM
        read_at_most: int | None = READ_AT_MOST,
        from_spans: bool = False,
        read_first: int | None = READ_FIRST,
        read_enough: float = READ_ENOUGH_LOGIT,
    ) -> None:
        self.embedder = embedder
        self.reader = reader
        #: sources with the re-ranker's answer spans are scored from those spans, not read
        #: again (cheaper; a 3-layer span head scores answers worse than the 6-layer reader
        #: reads sentences: docs/benchmarks.md, twenty-sixth session)
        self.from_spans = from_spans
        self.read_at_most = read_at_most
        self.read_first = read_first
        self.read_enough = read_enough
        #: (question, unit) pairs this answerer has read: what reading cost
        self.units_read = 0
        self.max_sentences = max_sentences
        # unit vectors by (model, text), least recently used first: a course's questions
        # keep meeting the same chunks, and embedding their sentences is most of an answer's
        # time on a CPU
        self._vectors: OrderedDict[tuple[str, str], NDArray[np.float32]] = OrderedDict()
        self.cache_floats = cache_floats

    async def answer(
        self, *, question: str, sources: Sequence[SourceText], **options: Any
    ) -> ExtractiveAnswer:
        """The extractive answer (unit similarity from the embedder and the reader's logits
        when they are set); ``options`` go to ``extract_answer`` (measurements: ``without``,
        ``model``)."""
        units = source_units(sources)
        similarities = await self.similarities(question, [u.text for u in units])
        readings = await self.unit_readings(
            question, sources, units, similarities, without=options.get("without", frozenset())
        )
        return extract_answer(
            question=question,
            sources=sources,
            similarities=similarities,
            readings=None if readings is None else readings.logits,
            margins=None if readings is None else readings.margins,
            max_sentences=self.max_sentences,
            **options,
        )

    async def unit_readings(
        self,
        question: str,
        sources: Sequence[SourceText],
        units: Sequence[SourceUnit],
        similarities: Sequence[float] | None,
        *,
        without: Container[str] = frozenset(),
    ) -> UnitReadings | None:
        """The reader's logit of each unit, and its span margin when it has a span head (None
        without a reader, or when the answerer scores ``from_spans`` and the re-ranker's
        reader marked answer spans in the sources: it read them once already). Of more than
        ``read_at_most`` units only those the model without the reader ranks highest are
        read; the others get the lowest logit read: they rank below the read ones on every
        other signal, and reading them is most of an answer's time on a CPU."""
        texts = reader_texts(units, without=without)
        if self.reader is None or not texts or not question.strip():
            return None
        if self.from_spans and has_answer_spans(sources):
            return None
        at_most, first = self.read_at_most, self.read_first
        if (at_most is None or len(texts) <= at_most) and (first is None or len(texts) <= first):
            logits, margins = await self._read(question, texts)
            return UnitReadings(logits, margins if self.reads_spans else None)
        bags = [Counter(terms(u.text)) for u in units]
        cheap = answer_model(reads=False).score(
            unit_signals(
                question, question_form(question), units, bags, similarities, sources=sources
            )
        )
        order = [int(i) for i in np.argsort(-cheap, kind="stable")[:at_most]]
        read = order[:first] if first is not None else order
        logits, margins = await self._read(question, [texts[i] for i in read])
        if len(read) < len(order) and max(logits) < self.read_enough:
            # none of the cheap model's first reads as an answer: read the rest too
            more, more_margins = await self._read(question, [texts[i] for i in order[len(read) :]])
            read, logits, margins = order, logits + more, margins + more_margins
        out = [min(logits)] * len(texts)
        out_margins: list[float | None] = [None] * len(texts)
        for index, logit, margin in zip(read, logits, margins, strict=True):
            out[index], out_margins[index] = logit, margin
        return UnitReadings(out, out_margins if self.reads_spans else None)

    @property
    def reads_spans(self) -> bool:
        """Whether the reader has a span head (``SpanReader``): its reads give span margins."""
        return bool(getattr(self.reader, "spans", False)) and hasattr(self.reader, "score_readings")

    async def _read(
        self, question: str, texts: Sequence[str]
    ) -> tuple[list[float], list[float | None]]:
        """The reader's logit of each (question, text) pair and, with a span head, its span
        margin (None without one)."""
        assert self.reader is not None
        self.units_read += len(texts)
        if self.reads_spans:
            reads = await cast("SpanReader", self.reader).score_readings(
                question, texts, kind="sentence"
            )
            return [r.logit for r in reads], [r.margin for r in reads]
        logits = await self.reader.score_logits(question, texts, kind="sentence")
        return [float(v) for v in logits], [None] * len(texts)

    async def readings(self, question: str, texts: Sequence[str]) -> list[float] | None:
        """The reader's logit of each (question, text) pair (None without a reader)."""
        if self.reader is None or not texts or not question.strip():
            return None
        return (await self._read(question, texts))[0]

    async def similarities(self, question: str, texts: Sequence[str]) -> list[float] | None:
        """Cosine of the question to each text (None without an embedder)."""
        if self.embedder is None or not texts or not question.strip():
            return None
        query = await self.embedder.embed_query(question)
        vectors = await self._unit_vectors(self.embedder, texts)
        return [float(v) for v in np.asarray(vectors @ query).ravel()]

    async def _unit_vectors(self, embedder: Embedder, texts: Sequence[str]) -> NDArray[np.float32]:
        """The vectors of ``texts``, embedding only those not met lately."""
        cache = self._vectors
        # taken before the model is awaited: meanwhile other answers may evict them
        known = {t: cache[(embedder.name, t)] for t in texts if (embedder.name, t) in cache}
        missing = [t for t in dict.fromkeys(texts) if t not in known]
        if missing:
            fresh = np.asarray(await embedder.embed_documents(missing), dtype=np.float32)
            known.update(zip(missing, fresh, strict=True))
        for text in dict.fromkeys(texts):
            cache[(embedder.name, text)] = known[text]
            cache.move_to_end((embedder.name, text))
        out = np.stack([known[t] for t in texts])
        most = max(len(known), self.cache_floats // max(1, out.shape[1]))
        while len(cache) > most:
            cache.popitem(last=False)
        return out

    async def stream(self, request: GenerationRequest) -> GenerationStream:
        """Stream the answer to the last user message (a follow-up takes the topic of the
        questions before it), a sentence at a time."""
        asked = [m.content for m in request.messages if m.role == "user"]
        question = resolve_follow_up(asked[-1], asked[:-1]) if asked else ""
        result = await self.answer(question=question, sources=request.sources)
        yield Verdict(outcome="answered" if result.supported else "no_support")
        # the answer is composed whole: a delta a sentence, not a few words (each delta is an
        # SSE write, a stored turn event and a pass of the citation checker; 4-word deltas
        # cost the gateway CPU a turn under load, docs/benchmarks.md, twenty-eighth session)
        for part in result.parts():
            yield TextDelta(text=part)
            await asyncio.sleep(0)
        yield Final(
            provider=self.name,
            finish_reason="stop",
            outcome="answered" if result.supported else "no_support",
            cited_sources=result.cited,
        )
