"""The reader fine-tuned on generated table rows, measured on the development split.

The reading sets hold no table, and the reader scores the answering rows of real tables low.
This measures what teaching it rows would add (``bench/table_data.py`` generates the groups),
without any development question in the training:

1. every development question of a stored ``make bench-answers`` run is replayed as the
   answerer reads it (``bench/dev_reader.py``'s ``collect``);
2. the shipped reader's float weights (``make train-reader``'s ``WORK/final``) are
   fine-tuned on ``--tables`` generated table groups (the training reader's loss) mixed with
   ``--replay`` sentence groups of the reading data, whose loss is the squared distance to
   the untuned reader's own logits (``--distil``: what it read well it should keep reading
   so; without it, 0, the replayed groups' labels are the loss);
3. the untuned and the tuned reader score every development unit the answerer reads, and
   for each the answerer's unit model and refusal are refitted with the shipped recipe and
   cross-fitted by document (``dev_reader.measure``); the reader's own top-1 unit by kind
   of question is printed beside.

    python bench/table_reader.py --json RUN.json [--tables 1200 --replay 2000 --lr 1e-5]
    python bench/table_reader.py --json RUN.json --reader WORK/final   # a reader trained
    # with the tables from the start: train_reader.py train --tables 3000 --work WORK

About 13 minutes on 2 cores. Development figures only: the test split is never read here.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import reading_data
import table_data
from dev_reader import collect, measure, read_pairs
from reading_data import Group
from train_reader import DEFAULT_WORK, _encode, loss_of, optimiser

from lectern_eval.answer_set import load_set

HERE = Path(__file__).resolve().parent


def _batches(groups: list[Group], pairs: int = 32) -> list[list[Group]]:
    """Groups in steps of at most ``pairs`` pairs, in the order given."""
    out: list[list[Group]] = [[]]
    for group in groups:
        if out[-1] and sum(len(g.texts) for g in out[-1]) + len(group.texts) > pairs:
            out.append([])
        out[-1].append(group)
    return out


def tune(args: argparse.Namespace, items: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """The untuned and the tuned readers' logits of the development units, keyed as
    ``replay_answers.CachedReader`` keys them."""
    import torch
    import torch.nn.functional as f
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    final = args.work / "final"
    if not (final / "model.safetensors").is_file():
        sys.exit(f"no float reader in {final}: run `make train-reader` first")
    started = time.monotonic()
    rng = random.Random(args.seed)
    torch.set_num_threads(2)
    torch.manual_seed(args.seed)
    tokenizer = AutoTokenizer.from_pretrained(final, local_files_only=True)

    def load() -> Any:
        return AutoModelForSequenceClassification.from_pretrained(
            final, num_labels=1, local_files_only=True
        )

    def score(model: Any, pairs: list[tuple[str, str]]) -> dict[tuple[str, str], float]:
        return dict(zip(pairs, read_pairs(model, tokenizer, pairs), strict=True))

    units = [(i["question"], t) for i in items for t in i["read"]]
    untuned = load()
    base = score(untuned, units)

    def keyed(logits: dict[tuple[str, str], float]) -> dict[str, float]:
        return {f"sentence\x1f{q}\x1f{t}": v for (q, t), v in logits.items()}

    if args.reader is not None:  # a reader trained elsewhere, in place of the fine-tune
        other = AutoModelForSequenceClassification.from_pretrained(
            args.reader, num_labels=1, local_files_only=True
        )
        return {"base": keyed(base), "tuned": keyed(score(other, units))}
    tables = table_data.table_groups(
        args.seed, args.tables, absent_column=args.absent_column, absent_label=args.absent_label
    )
    replay = [g for g in reading_data.training_groups(args.seed) if g.kind == "sentence"]
    rng.shuffle(replay)
    replay = replay[: args.replay]
    teacher = score(untuned, [(g.question, t) for g in replay for t in g.texts])
    del untuned
    model = load()
    model.train()
    optimizer = optimiser(model, lr=args.lr, head_lr=args.lr)
    rng.shuffle(tables)
    plan = [(True, b) for b in _batches(tables)] + [(False, b) for b in _batches(replay)]
    rng.shuffle(plan)
    print(f"{len(tables)} table groups, {len(replay)} replayed, {len(plan)} steps "
          f"({time.monotonic() - started:.0f} s)", flush=True)  # fmt: skip
    for step, (is_table, batch) in enumerate(plan, 1):
        inputs = _encode(tokenizer, batch, "sentence")
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = model(**inputs).logits.squeeze(-1).float()
        if is_table or not args.distil:
            loss = loss_of(logits, batch)
        else:
            target = torch.tensor([teacher[(g.question, t)] for g in batch for t in g.texts])
            loss = args.distil * f.mse_loss(logits, target)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if step % 100 == 0:
            print(f"step {step}/{len(plan)} ({time.monotonic() - started:.0f} s)", flush=True)
    tuned = score(model, units)
    return {"base": keyed(base), "tuned": keyed(tuned)}


def reader_top1(items: list[dict[str, Any]], logits: dict[str, dict[str, float]]) -> None:
    """Each reader's top-1 unit (a key fact's) by kind of question, answerable questions
    whose read units hold one."""
    kinds = {q.id: q.kind for s in load_set(HERE / "answers") for q in s.questions}
    hits: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    for item in items:
        if not item["answerable"] or not any(item["labels"]):
            continue
        for which, values in logits.items():
            scores = [values[f"sentence\x1f{item['question']}\x1f{t}"] for t in item["read"]]
            best = max(range(len(scores)), key=scores.__getitem__)
            for kind in (kinds.get(item["id"], "?"), "all"):
                hits[kind][which].append(item["labels"][best])
    print("the reader's own top-1 unit, development questions:")
    for kind in sorted(hits):
        row = hits[kind]
        print(f"  {kind:12} ({len(row['base']):3}) " + "  ".join(
            f"{which} {sum(v) / len(v):.3f}" for which, v in row.items()
        ))  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, default=Path("/tmp/lectern-bench-answers.json"))
    parser.add_argument("--tables", type=int, default=1200)
    parser.add_argument("--replay", type=int, default=2000)
    parser.add_argument("--distil", type=float, default=1.0)
    parser.add_argument("--absent-column", type=float, default=0.0)
    parser.add_argument("--absent-label", type=float, default=0.05)
    parser.add_argument("--lr", type=float, default=1e-5)
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument(
        "--reader", type=Path,
        help="score with this float reader (e.g. `train_reader.py train --tables N --work DIR`"
        "'s DIR/final) as the tuned one, instead of fine-tuning",
    )  # fmt: skip
    parser.add_argument("--work", type=Path, default=DEFAULT_WORK)
    parser.add_argument("--scratch", type=Path, default=Path("/tmp/lectern-table-reader"))
    args = parser.parse_args()
    args.scratch.mkdir(parents=True, exist_ok=True)
    items = asyncio.run(collect(json.loads(args.json.read_text())))
    print(f"{len(items)} development questions with sources")
    logits = tune(args, items)
    path = args.scratch / "logits.json"
    path.write_text(json.dumps(logits))
    reader_top1(items, logits)
    for which in ("base", "tuned"):
        measure(args.json, path, which, args.scratch)
    return 0


if __name__ == "__main__":
    sys.exit(main())
