"""The project's reader: a cross-encoder that scores how well a text answers a question.

One model, trained here from public reading data (``bench/train_reader.py``; its card is
``reader/MODEL_CARD.md``) and shipped in this package as int8 ONNX with its tokenizer, reads
(question, passage) pairs for the re-ranker and (question, sentence or table row) pairs for
the offline answerer and its refusal. It runs with onnxruntime and ``tokenizers`` alone: no
PyTorch, no model hub. Its output is a logit: the log-odds that the text answers the
question (it was trained with a pointwise loss beside the ranking one, so 0 is a meaningful
"as likely as not").
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from lectern_common import metrics, onnx_models

if TYPE_CHECKING:
    from numpy.typing import NDArray

Kind = Literal["sentence", "passage"]
#: the reader shipped with the package: all 6 of the base's layers, the offline answerer's
PACKAGED = Path(__file__).with_name("reader")
#: the name that means the packaged reader wherever a model name is configured
PACKAGED_NAME = "lectern-reader"
#: the re-ranker's reader: the same recipe on the base's first 3 layers, half the cost a
#: word piece; it ranks passages as well (bioasq) but picks answering sentences worse than
#: the 6-layer one (docs/benchmarks.md, "A reader of 3 layers")
PACKAGED_L3 = Path(__file__).with_name("reader_l3")
PACKAGED_L3_NAME = "lectern-reader-l3"
#: the 3-layer reader with span and no-answer heads beside its relevance one: the re-ranker
#: then marks each candidate's answer span (``RankedChunk.answer``); not the default, its
#: relevance reads off-topic questions higher (reader_l3_spans/MODEL_CARD.md)
PACKAGED_L3_SPANS = Path(__file__).with_name("reader_l3_spans")
PACKAGED_L3_SPANS_NAME = "lectern-reader-l3-spans"
#: packaged readers by the names a setting may give
PACKAGED_FOLDERS = {
    PACKAGED_NAME: PACKAGED,
    PACKAGED_L3_NAME: PACKAGED_L3,
    PACKAGED_L3_SPANS_NAME: PACKAGED_L3_SPANS,
}


#: the longest answer the span head may mark, in word pieces (SQuAD's answers are 1-30)
LONGEST_SPAN = 30


@dataclass(frozen=True)
class Reading:
    """What one read of a (question, text) pair says: how well the text answers
    (``logit``), and with a span head where the answer is: its characters in the text
    (``text[start:end]``, None when the head points nowhere in the text), the span's score
    and the "no answer here" score (the [CLS] piece's, SQuAD 2.0's null score). A reader
    without a span head leaves the last four None."""

    logit: float
    start: int | None = None
    end: int | None = None
    span_score: float | None = None
    null_score: float | None = None

    @property
    def margin(self) -> float | None:
        """How far the best span beats "no answer here" (positive: the text answers)."""
        if self.span_score is None or self.null_score is None:
            return None
        return self.span_score - self.null_score


@dataclass(frozen=True)
class ReaderCard:
    """What ``reader.json`` says of a reader folder."""

    name: str
    precision: str
    max_length: Mapping[str, int]

    @classmethod
    def read(cls, folder: Path) -> ReaderCard:
        """The card of a reader folder."""
        data = json.loads((folder / "reader.json").read_text())
        return cls(str(data["name"]), str(data["precision"]), dict(data["max_length"]))


class Reader:
    """Scores (question, text) pairs with the reader's ONNX graph."""

    def __init__(
        self, session: Any, tokenizer: Any, card: ReaderCard, *, path: Path, workers: int = 1
    ) -> None:
        self._session = session
        self._inputs = onnx_models.session_inputs(session)
        #: whether the graph has the span head's outputs (``start_logits``, ``end_logits``)
        self.spans = {o.name for o in session.get_outputs()} >= {"start_logits", "end_logits"}
        self._base = tokenizer
        self.card = card
        self.path = path
        self._tokenizers: dict[int, Any] = {}
        self._lock = threading.Lock()
        self._workers = max(1, workers)
        self._pool = ThreadPoolExecutor(self._workers, thread_name_prefix="lectern-reader")

    @classmethod
    def load(cls, folder: Path | None = None, *, threads: int | None = None) -> Reader:
        """A reader folder (``model.onnx``, ``tokenizer.json``, ``reader.json``); the
        packaged one by default. ``threads`` (default: the CPUs, at most 4) pairs are read
        at once, each on one thread: a pair of a few hundred word pieces is too small to
        share well between threads (16 passages of 192 pieces on 2 cores: 119 ms one at a
        time on two threads, 92 ms two at a time on one thread each)."""
        from tokenizers import Tokenizer

        root = folder or PACKAGED
        card = ReaderCard.read(root)
        tokenizer = Tokenizer.from_file(str(root / "tokenizer.json"))
        tokenizer.no_truncation()
        tokenizer.no_padding()
        session = onnx_models.open_session(root / "model.onnx", threads=1)
        workers = threads or min(os.cpu_count() or 1, 4)
        return cls(session, tokenizer, card, path=root / "model.onnx", workers=workers)

    @property
    def name(self) -> str:
        """The reader's name (``reader.json``)."""
        return self.card.name

    def max_length(self, kind: Kind) -> int:
        """Word pieces of a (question, text) pair of this kind; longer pairs are cut."""
        return int(self.card.max_length[kind])

    def _tokenizer(self, max_length: int) -> Any:
        """A copy of the tokenizer that cuts pairs at ``max_length`` (copies are cheap, and
        one set up per length is never changed again, so threads share it safely)."""
        with self._lock:
            found = self._tokenizers.get(max_length)
            if found is None:
                from tokenizers import Tokenizer

                found = Tokenizer.from_str(self._base.to_str())
                found.enable_truncation(max_length, strategy="longest_first")
                self._tokenizers[max_length] = found
            return found

    def logits(
        self, question: str, texts: Sequence[str], *, kind: Kind = "sentence",
        max_length: int | None = None,
    ) -> NDArray[np.float32]:  # fmt: skip
        """The reader's logit of each (question, text) pair, in input order.

        Each pair runs alone, unpadded: the int8 graph quantises its activations per tensor
        at run time, so in a batch a pair's score would move with its neighbours' (by 0.13
        on average, measured); alone it is a function of the pair. On 2 cores this costs
        nothing for passages and about 1.6x for short sentences (docs/benchmarks.md)."""
        readings = self._read_each(question, texts, kind, max_length, spans=False)
        return np.asarray([r.logit for r in readings], dtype=np.float32)

    def read(
        self, question: str, texts: Sequence[str], *, kind: Kind = "sentence",
        max_length: int | None = None,
    ) -> list[Reading]:  # fmt: skip
        """One read of each (question, text) pair, in input order: its logit as ``logits``
        gives it and, when the graph has a span head, the best span (at most
        ``LONGEST_SPAN`` word pieces, inside the text) and the null score."""
        return self._read_each(question, texts, kind, max_length, spans=True)

    def _read_each(
        self, question: str, texts: Sequence[str], kind: Kind, max_length: int | None,
        *, spans: bool,
    ) -> list[Reading]:  # fmt: skip
        """Each pair encoded at the kind's length and run alone, on the worker threads when
        there are several (onnxruntime runs a session from several threads, off the GIL)."""
        if not texts:
            return []
        tokenizer = self._tokenizer(max_length or self.max_length(kind))
        encodings = tokenizer.encode_batch([(question, t) for t in texts])
        read = functools.partial(self._timed_read, kind=kind, spans=spans)
        if self._workers == 1 or len(encodings) == 1:
            return [read(e) for e in encodings]
        return list(self._pool.map(read, encodings))

    def _timed_read(self, encoding: Any, kind: Kind, *, spans: bool = True) -> Reading:
        """``_run``, its thread's CPU time and word pieces counted (``lectern.reader.*``)."""
        began = time.thread_time()
        outputs = self._run(encoding)
        reading = Reading(float(np.asarray(outputs[0]).reshape(-1)[0]))
        if spans and self.spans:
            reading = best_span(reading.logit, outputs[1][0], outputs[2][0], encoding)
        metrics.READER_CPU.add(time.thread_time() - began, {"kind": kind})
        metrics.READER_PIECES.add(len(encoding.ids), {"kind": kind})
        return reading

    def _run(self, encoding: Any) -> list[Any]:
        ids = np.asarray([encoding.ids], dtype=np.int64)
        feeds = {
            "input_ids": ids,
            "attention_mask": np.ones_like(ids),
            "token_type_ids": np.asarray([encoding.type_ids], dtype=np.int64),
        }
        feeds = {k: v for k, v in feeds.items() if k in self._inputs}
        return list(self._session.run(None, feeds))

    async def score_logits(
        self, question: str, texts: Sequence[str], *, kind: Kind = "sentence"
    ) -> NDArray[np.float32]:
        """``logits`` in a worker thread (an onnxruntime session runs from several at once)."""
        if not texts:
            return np.zeros(0, dtype=np.float32)
        return await asyncio.to_thread(self.logits, question, list(texts), kind=kind)

    async def score_readings(
        self, question: str, texts: Sequence[str], *, kind: Kind = "sentence"
    ) -> list[Reading]:
        """``read`` in a worker thread: each pair's logit and, with a span head, its best span
        and null score."""
        if not texts:
            return []
        return await asyncio.to_thread(self.read, question, list(texts), kind=kind)

    def count_tokens(self, text: str) -> int:
        """Word pieces of a text with the reader's tokenizer (no special tokens)."""
        return len(self._base.encode(text, add_special_tokens=False).ids)


def best_span(logit: float, start: Any, end: Any, encoding: Any) -> Reading:
    """The best answer span of one read: the pair of the text's word pieces (first no later
    than last, at most ``LONGEST_SPAN`` apart) whose start and end logits sum highest, as
    character offsets into the text, against the [CLS] piece's sum (the null score)."""
    start = np.asarray(start, dtype=np.float32)
    end = np.asarray(end, dtype=np.float32)
    null = float(start[0] + end[0])
    pieces = np.asarray([i for i, s in enumerate(encoding.sequence_ids) if s == 1], dtype=np.int64)
    if pieces.size == 0:
        return Reading(logit, null_score=null)
    first, last = start[pieces], end[pieces]
    # scores[i, j]: a span from the text's i-th to its j-th piece; only j in [i, i + LONGEST)
    scores = first[:, None] + last[None, :]
    distance = np.arange(pieces.size)[None, :] - np.arange(pieces.size)[:, None]
    scores[(distance < 0) | (distance >= LONGEST_SPAN)] = -np.inf
    i, j = np.unravel_index(int(np.argmax(scores)), scores.shape)
    offsets = encoding.offsets
    return Reading(
        logit, start=int(offsets[pieces[i]][0]), end=int(offsets[pieces[j]][1]),
        span_score=float(scores[i, j]), null_score=null,
    )  # fmt: skip


def probability(logits: Sequence[float] | NDArray[np.float32]) -> NDArray[np.float64]:
    """The logistic map of reader logits to 0..1 (numerically safe)."""
    z = np.clip(np.asarray(logits, dtype=np.float64), -60.0, 60.0)
    return np.asarray(1.0 / (1.0 + np.exp(-z)), dtype=np.float64)


def available(folder: Path | None = None) -> bool:
    """Whether a reader folder holds a model (a checkout without the packaged file has none)."""
    root = folder or PACKAGED
    return (root / "model.onnx").is_file() and (root / "reader.json").is_file()


@functools.cache
def packaged(threads: int | None = None) -> Reader:
    """The packaged reader, loaded once per process."""
    return Reader.load(threads=threads)


def has_span_head(folder: Path) -> bool:
    """Whether a reader folder's card lists the span head (read without loading its model)."""
    heads = json.loads((folder / "reader.json").read_text()).get("heads", ["relevance"])
    return "span" in heads


def folder_of(name: str) -> Path:
    """The folder a reader setting names: a packaged reader's name (``PACKAGED_FOLDERS``) or
    a folder's path."""
    return PACKAGED_FOLDERS.get(name) or Path(name)


@functools.cache
def named(name: str) -> Reader:
    """The reader a setting names (``folder_of``), loaded once per process: the packaged
    reader's name gives ``packaged()`` itself."""
    if folder_of(name) == PACKAGED:
        return packaged()
    return Reader.load(folder_of(name))
