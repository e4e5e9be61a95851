"""Transformer checkpoints exported once to ONNX and run with onnxruntime.

PyTorch's eager mode spends most of a short input's time in Python (a 20-word query through
MiniLM: ~12 ms in torch, ~4 ms in onnxruntime on 2 cores), and onnxruntime's int8 kernels
make a cross-encoder several times cheaper. Exports are cached per model weights in
``cache_dir``; concurrent replicas each work in their own temporary files and rename the
result into place, so a half-written graph is never loaded. Exporting needs torch and onnx;
running needs only onnxruntime.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import tempfile
import threading
import warnings
from pathlib import Path
from typing import Any, Literal

log = logging.getLogger(__name__)

Head = Literal["encoder", "sequence-classification"]
#: the token inputs BERT-style checkpoints take, in this order
TOKEN_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def default_cache_dir(kind: str) -> Path:
    """``$XDG_CACHE_HOME/lectern/<kind>`` (``~/.cache`` when unset)."""
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return root / "lectern" / kind


#: files whose bytes make a checkpoint's digest
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin", "config.json")
#: a process opens each graph once, and hashes each checkpoint once, however many models are
#: built on them (a gateway's embedder opens two graphs; the tests start dozens of services
#: in one process, each open taking ~0.4 s and each hash of MiniLM's weights ~0.15 s). Keyed
#: by the files' size and modification time, so a changed file is read again.
_DIGESTS: dict[tuple[object, ...], str] = {}
_SESSIONS: dict[tuple[object, ...], Any] = {}
_OPENING = threading.Lock()


def _stamp(path: Path) -> tuple[str, int, int]:
    stat = path.stat()
    return str(path.resolve()), stat.st_size, stat.st_mtime_ns


def weights_digest(source: Path) -> str:
    """A short digest of a checkpoint's weights and config (the export's cache key)."""
    files = [source / name for name in WEIGHT_FILES if (source / name).exists()]
    key = tuple(_stamp(path) for path in files)
    with _OPENING:
        if (known := _DIGESTS.get(key)) is not None:
            return known
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.name.encode())
        with path.open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    with _OPENING:
        _DIGESTS[key] = digest.hexdigest()[:16]
        return _DIGESTS[key]


def export(source: Path, *, cache_dir: Path, head: Head, quantize: bool = False) -> Path:
    """The cached ONNX graph of a checkpoint (float, or int8 weights), exported if missing.

    ``encoder`` graphs output ``last_hidden_state``; ``sequence-classification`` graphs output
    ``logits``.
    """
    folder = cache_dir / f"{head}-{weights_digest(source)}"
    fp32 = folder / "model.onnx"
    # the int8 file's name changes with its quantisation scheme, so a cache of an older
    # scheme is never taken for the current one
    int8 = "model.s8.onnx" if head == "encoder" else "model.int8.onnx"
    target = folder / int8 if quantize else fp32
    if target.exists():
        return target
    folder.mkdir(parents=True, exist_ok=True)
    if not fp32.exists():
        _export_float(source, fp32, head=head)
    if quantize:
        from onnxruntime.quantization import QuantType, quantize_dynamic

        # quantize_dynamic writes a shape-inferred copy beside its input, under a fixed
        # name: each replica quantizes its own link to the float graph, in its own
        # directory, so replicas exporting at once never delete each other's files
        with tempfile.TemporaryDirectory(dir=folder, prefix=".quantize-") as work:
            own = Path(work) / fp32.name
            try:
                os.link(fp32, own)
            except OSError:  # a file system without hard links
                shutil.copyfile(fp32, own)
            tmp = Path(work) / target.name
            # Signed weights take onnxruntime's u8s8 kernels, which on AVX2 use 30% less CPU
            # per query than uint8 weights (3.2 against 4.5 ms). Query embeddings must stay
            # close to the float model's (documents are embedded in float): per-channel
            # weight scales, on the MatMuls only (bioasq-dev queries: cosine 0.994 mean,
            # 0.989 worst; per-tensor scales gave 0.96 and cost 0.01 nDCG@10).
            encoder: dict[str, Any] = {"per_channel": True, "op_types_to_quantize": ["MatMul"]}
            quantize_dynamic(
                str(own), str(tmp), weight_type=QuantType.QInt8,
                **(encoder if head == "encoder" else {}),
            )  # fmt: skip
            tmp.replace(target)
    return target


def _export_float(source: Path, target: Path, *, head: Head) -> None:
    import torch
    from transformers import AutoModel, AutoModelForSequenceClassification, AutoTokenizer

    log.info("exporting %s to ONNX (once; cached in %s)", source, target.parent)
    factory: Any = AutoModel if head == "encoder" else AutoModelForSequenceClassification
    # eager attention traces to plain ops; the SDPA mask helpers branch on traced shapes
    model = factory.from_pretrained(source, local_files_only=True, attn_implementation="eager")
    model.eval()
    tokenizer = AutoTokenizer.from_pretrained(source, local_files_only=True)
    sample = tokenizer(["a question"], ["a passage"], return_tensors="pt")
    names = [name for name in TOKEN_INPUTS if name in sample]
    output = "last_hidden_state" if head == "encoder" else "logits"

    class Wrapped(torch.nn.Module):
        """Keyword inputs in a fixed order, one named output."""

        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *tensors: Any) -> Any:
            return getattr(self.model(**dict(zip(names, tensors, strict=True))), output)

    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    # the tracer warns about every Python-level shape check it freezes; they are expected
    with torch.inference_mode(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            Wrapped(),
            tuple(sample[name] for name in names),
            str(tmp),
            input_names=names,
            output_names=[output],
            dynamic_axes={
                **{name: {0: "batch", 1: "sequence"} for name in names},
                output: {0: "batch", 1: "sequence"} if head == "encoder" else {0: "batch"},
            },
            opset_version=17,
            dynamo=False,
        )
    tmp.replace(target)


def open_session(path: Path, *, threads: int | None = None) -> Any:
    """An onnxruntime CPU session with full graph optimisation, opened once per process for
    a graph file and thread count (sessions are safe to run from several threads)."""
    key = (*_stamp(path), threads)
    with _OPENING:
        if (known := _SESSIONS.get(key)) is not None:
            return known
    session = _new_session(path, threads=threads)
    with _OPENING:
        return _SESSIONS.setdefault(key, session)


def _new_session(path: Path, *, threads: int | None) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = threads or min(os.cpu_count() or 1, 4)
    options.inter_op_num_threads = 1
    # idle worker threads sleep instead of spinning: services share few cores with Postgres
    # and each other, and a spinning pool burns CPU that another request needs
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.add_session_config_entry("session.inter_op.allow_spinning", "0")
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def session_inputs(session: Any) -> frozenset[str]:
    """The input names a session takes (some checkpoints have no ``token_type_ids``)."""
    return frozenset(item.name for item in session.get_inputs())
