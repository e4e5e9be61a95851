"""Semantic scorers: the project's reader (default), another CrossEncoder, or the bi-encoder.

Models are loaded once per process (``load_scorer`` at start-up); scoring runs in a worker
thread so the event loop keeps answering health checks and other requests.
"""

from __future__ import annotations

import abc
import asyncio
import logging
import math
import os
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
from numpy.typing import NDArray

from lectern_common import onnx_models, reading
from lectern_reranker.service import ScorerName, SemanticScorer

if TYPE_CHECKING:
    from lectern_reranker.config import Settings

log = logging.getLogger(__name__)


def sigmoid(logits: Sequence[float]) -> list[float]:
    """Logistic map of raw logits to 0..1 (numerically safe for large magnitudes)."""
    out: list[float] = []
    for x in logits:
        z = max(min(float(x), 60.0), -60.0)
        out.append(1.0 / (1.0 + math.exp(-z)))
    return out


def word_pieces(tokenizer: Any, text: str) -> int:
    """Word pieces of a text with a Hugging Face tokenizer (no special tokens, uncut)."""
    ids = tokenizer(text, add_special_tokens=False, truncation=False, verbose=False)
    return len(ids["input_ids"])


class _PairScorer(abc.ABC):
    """What both CrossEncoder scorers share: their name, and ``_predict`` (blocking) run in a
    worker thread."""

    @property
    def name(self) -> ScorerName:
        """Reported in replies."""
        return "cross-encoder"

    @abc.abstractmethod
    def _predict(self, query: str, texts: Sequence[str]) -> list[float]:
        """The sigmoid score of each (query, text) pair (blocking)."""

    async def score(self, query: str, texts: Sequence[str]) -> list[float]:
        """Sigmoid of the cross-encoder logit of each (query, text) pair, in batches."""
        if not texts:
            return []
        return await asyncio.to_thread(self._predict, query, list(texts))


class CrossEncoderScorer(_PairScorer):
    """Scores (query, passage) pairs with a CrossEncoder; sigmoid of the logit is the score."""

    def __init__(self, model: Any, *, batch_size: int = 32) -> None:
        self._model = model
        self._batch_size = batch_size
        # torch modules are not safe to call from several threads at once
        self._lock = threading.Lock()

    @classmethod
    def load(
        cls, name_or_path: str, *, max_length: int | None = None, batch_size: int = 32
    ) -> CrossEncoderScorer:
        """Load a CrossEncoder from a local path or a cached model name, offline."""
        import torch
        from sentence_transformers import CrossEncoder

        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        model = CrossEncoder(
            name_or_path,
            device="cpu",
            max_length=max_length,
            local_files_only=True,
            activation_fn=torch.nn.Identity(),
        )
        if model.num_labels != 1:
            raise ValueError(f"{name_or_path} has {model.num_labels} labels; a scorer needs 1")
        return cls(model, batch_size=batch_size)

    @property
    def max_length(self) -> int | None:
        """Word pieces per (query, passage) pair; longer pairs are truncated."""
        value = getattr(self._model, "max_length", None)
        return int(value) if value is not None else None

    def _predict(self, query: str, texts: Sequence[str]) -> list[float]:
        import torch

        pairs = [(query, t) for t in texts]
        with self._lock, torch.inference_mode():
            logits = self._model.predict(
                pairs,
                batch_size=self._batch_size,
                show_progress_bar=False,
                activation_fn=torch.nn.Identity(),
                convert_to_numpy=True,
            )
        return sigmoid(np.asarray(logits, dtype=np.float64).reshape(-1).tolist())

    def count_tokens(self, text: str) -> int:
        """Word pieces of a text with the cross-encoder's tokenizer."""
        return word_pieces(self._model.tokenizer, text)


class ReaderScorer:
    """The project's reader (``lectern_common.reading``, shipped as int8 ONNX) reading each
    (question, passage) pair; the sigmoid of its logit is the score."""

    def __init__(self, reader: reading.Reader, *, max_length: int | None = None) -> None:
        self._reader = reader
        self._max_length = max_length or reader.max_length("passage")

    @classmethod
    def load(
        cls, folder: Path | None = None, *, max_length: int | None = None,
        threads: int | None = None,
    ) -> ReaderScorer:  # fmt: skip
        """The packaged reader, or a reader folder written by ``bench/train_reader.py``."""
        return cls(reading.Reader.load(folder, threads=threads), max_length=max_length)

    @property
    def name(self) -> ScorerName:
        """Reported in replies: the reader is a cross-encoder."""
        return "cross-encoder"

    @property
    def max_length(self) -> int:
        """Word pieces per (question, passage) pair; longer pairs are cut."""
        return self._max_length

    @property
    def path(self) -> Path:
        """The ONNX graph it runs."""
        return self._reader.path

    @property
    def spans(self) -> bool:
        """Whether the reader has a span head (``read`` then finds each answer span)."""
        return self._reader.spans

    async def score(self, query: str, texts: Sequence[str]) -> list[float]:
        """Sigmoid of the reader's logit of each (query, text) pair."""
        if not texts:
            return []
        logits = await asyncio.to_thread(
            self._reader.logits, query, list(texts), kind="passage", max_length=self._max_length
        )
        return sigmoid(logits.tolist())

    async def read(self, query: str, texts: Sequence[str]) -> list[reading.Reading]:
        """One read of each (query, text) pair: its logit and, with a span head, the best
        answer span (offsets into the text) and the null score."""
        if not texts:
            return []
        return await asyncio.to_thread(
            self._reader.read, query, list(texts), kind="passage", max_length=self._max_length
        )

    def count_tokens(self, text: str) -> int:
        """Word pieces of a text with the reader's tokenizer."""
        return self._reader.count_tokens(text)


class OnnxCrossEncoderScorer(_PairScorer):
    """The same CrossEncoder exported to ONNX (int8 by default) and run with onnxruntime (a
    session may be run from several threads at once).

    On 2 CPU cores a MiniLM-sized cross-encoder in torch needs ~0.8 s for 20 pairs of 256
    word pieces; the int8 ONNX graph is several times faster (``make bench-rerank`` prints the
    ratio). The export happens once per model and is cached (``cache_dir``); replicas that
    start together each write to a temporary name and rename, so a half-written file is
    never loaded.
    """

    def __init__(
        self, session: Any, tokenizer: Any, *, max_length: int, batch_size: int, path: Path
    ) -> None:
        self._session = session
        self._tokenizer = tokenizer
        self._max_length = max_length
        self._batch_size = batch_size
        self._inputs = onnx_models.session_inputs(session)
        self.path = path

    @classmethod
    def load(
        cls,
        name_or_path: str,
        *,
        max_length: int | None = None,
        batch_size: int = 32,
        cache_dir: Path,
        quantize: bool = True,
        threads: int | None = None,
    ) -> OnnxCrossEncoderScorer:
        """Export (once, cached) and load a one-label CrossEncoder as an ONNX session."""
        from transformers import AutoConfig, AutoTokenizer

        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        source = resolve_model_dir(name_or_path)
        config = AutoConfig.from_pretrained(source, local_files_only=True)
        if getattr(config, "num_labels", 1) != 1:
            raise ValueError(f"{name_or_path} has {config.num_labels} labels; a scorer needs 1")
        tokenizer = AutoTokenizer.from_pretrained(source, local_files_only=True)
        path = onnx_models.export(
            Path(source), cache_dir=cache_dir, head="sequence-classification", quantize=quantize
        )
        session = onnx_models.open_session(path, threads=threads)
        limit = max_length or int(getattr(tokenizer, "model_max_length", 512) or 512)
        return cls(session, tokenizer, max_length=min(limit, 512), batch_size=batch_size, path=path)

    @property
    def max_length(self) -> int:
        """Word pieces per (query, passage) pair; longer pairs are truncated."""
        return self._max_length

    def _predict(self, query: str, texts: Sequence[str]) -> list[float]:
        # shortest first, so each batch pads to similar lengths
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        logits = [0.0] * len(texts)
        for start in range(0, len(order), self._batch_size):
            batch = order[start : start + self._batch_size]
            encoded = self._tokenizer(
                [query] * len(batch),
                [texts[i] for i in batch],
                truncation="longest_first",
                max_length=self._max_length,
                padding=True,
                return_tensors="np",
            )
            feeds = {k: v.astype(np.int64) for k, v in encoded.items() if k in self._inputs}
            out = self._session.run(None, feeds)[0].reshape(-1)
            for index, value in zip(batch, out.tolist(), strict=True):
                logits[index] = float(value)
        return sigmoid(logits)

    def count_tokens(self, text: str) -> int:
        """Word pieces of a text with the cross-encoder's tokenizer."""
        return word_pieces(self._tokenizer, text)


def resolve_model_dir(name_or_path: str) -> str:
    """A local directory for a model path or a model name in the local Hugging Face cache."""
    if Path(name_or_path).is_dir():
        return str(Path(name_or_path).resolve())
    from huggingface_hub import snapshot_download

    return str(snapshot_download(name_or_path, local_files_only=True))


class QueryDocumentEmbedder(Protocol):
    """What the bi-encoder scorer needs of ``lectern_common.embeddings.Embedder``."""

    async def embed_query(self, text: str) -> Any:
        """Normalised query vector."""
        ...

    async def embed_documents(self, texts: Sequence[str]) -> Any:
        """Normalised document vectors, one row per text."""
        ...

    def count_tokens(self, text: str) -> int:
        """Tokens with the embedder's tokenizer."""
        ...


class BiEncoderScorer:
    """Cosine between the query and chunk embeddings, clipped to 0..1 (negatives are noise).

    Vectors already known for a text (the index's stored chunk embeddings, see
    ``with_vectors``) are used as they are; only the others are embedded.
    """

    def __init__(
        self,
        embedder: QueryDocumentEmbedder,
        *,
        known: Mapping[str, NDArray[np.float32]] | None = None,
    ) -> None:
        self._embedder = embedder
        self._known: Mapping[str, NDArray[np.float32]] = known or {}

    @property
    def name(self) -> ScorerName:
        """Reported in replies."""
        return "bi-encoder"

    @property
    def embedder_name(self) -> str | None:
        """The embedding model's name, to compare with the index's."""
        value = getattr(self._embedder, "name", None)
        return str(value) if value is not None else None

    def with_vectors(self, known: Mapping[str, NDArray[np.float32]]) -> BiEncoderScorer:
        """The same scorer reusing these vectors (text -> embedding) instead of embedding."""
        return BiEncoderScorer(self._embedder, known=known)

    async def score(self, query: str, texts: Sequence[str]) -> list[float]:
        """Cosine of each text with the query, clipped to 0..1."""
        if not texts:
            return []
        q = np.asarray(await self._embedder.embed_query(query), dtype=np.float32).reshape(-1)
        known = {
            t: v
            for t in texts
            if t in self._known
            and (v := np.asarray(self._known[t], dtype=np.float32).reshape(-1)).shape == q.shape
        }
        missing = sorted({t for t in texts if t not in known})
        vectors: dict[str, NDArray[np.float32]] = {}
        if missing:
            embedded = np.asarray(await self._embedder.embed_documents(missing), dtype=np.float32)
            vectors.update(zip(missing, embedded.reshape(len(missing), -1), strict=True))
        # a stored vector of another dimension (another model) is ignored, not trusted
        docs = np.stack([known[t] if t in known else vectors[t] for t in texts])
        norms = np.linalg.norm(docs, axis=1) * max(float(np.linalg.norm(q)), 1e-12)
        cosine = (docs @ q) / np.maximum(norms, 1e-12)
        return [min(max(float(c), 0.0), 1.0) for c in cosine]

    def count_tokens(self, text: str) -> int:
        """Tokens with the embedder's tokenizer."""
        return self._embedder.count_tokens(text)


def load_cross_encoder(settings: Settings, name: str) -> SemanticScorer:
    """The configured cross-encoder: a packaged reader by its name (``lectern-reader-l3``,
    ``lectern-reader``) or a folder holding a reader's ``reader.json``, else a CrossEncoder
    checkpoint on its backend (ONNX falls back to torch if it cannot load)."""
    folder = reading.folder_of(name)
    if (folder / "reader.json").is_file():
        return ReaderScorer.load(
            folder,
            max_length=settings.cross_encoder_max_length,
            threads=settings.cross_encoder_threads,
        )
    if settings.cross_encoder_backend == "onnx":
        try:
            return OnnxCrossEncoderScorer.load(
                name,
                max_length=settings.cross_encoder_max_length,
                batch_size=settings.cross_encoder_batch_size,
                cache_dir=settings.cross_encoder_cache_dir,
                quantize=settings.cross_encoder_quantize,
                threads=settings.cross_encoder_threads,
            )
        except (ImportError, OSError, RuntimeError) as exc:
            log.warning("ONNX export or load of %s failed (%s); running it in torch", name, exc)
    return CrossEncoderScorer.load(
        name,
        max_length=settings.cross_encoder_max_length,
        batch_size=settings.cross_encoder_batch_size,
    )


def load_scorer(
    settings: Settings, *, embedder: QueryDocumentEmbedder | None = None
) -> SemanticScorer:
    """The configured cross-encoder, or the bi-encoder when none can be loaded offline.

    ``embedder`` lets a caller that already holds a local MiniLM (``lectern eval``) share it;
    otherwise ``lectern_common.embeddings.LocalEmbedder(settings)`` is loaded.
    """
    name = settings.cross_encoder_model
    if name:
        try:
            scorer = load_cross_encoder(settings, name)
        except Exception as exc:
            log.warning("cross-encoder %s unavailable (%s); using the bi-encoder", name, exc)
        else:
            log.info("re-ranking with cross-encoder %s (%s)", name, settings.cross_encoder_backend)
            return scorer
    if embedder is None:
        # Always the local model, even when the index uses Gemini: the calibration of the
        # retrieval confidence is fitted on MiniLM cosines, and re-ranking stays offline.
        from lectern_common.embeddings import LocalEmbedder

        embedder = LocalEmbedder(settings)
    log.info("re-ranking with the bi-encoder")
    return BiEncoderScorer(embedder)
