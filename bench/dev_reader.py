"""The reader fine-tuned on the development split's own units, measured out of sample.

The shipped reader learnt to read from factoid sets (SQuAD, SelQA, PubMedQA, BioASQ); the
answer set's documents are course material (lecture notes, slides, tables). This measures
what reading the development documents' questions would add, without letting any question
be scored by a reader that saw its document:

1. every development question of a stored ``make bench-answers`` run is replayed as the
   answerer reads it: the units it reads (at most ``READ_AT_MOST``), their reader texts, the
   shipped reader's logits and each unit's label (it states a key fact);
2. the development documents are cut into ``--folds`` folds; for each, the shipped reader's
   float weights (``make train-reader``'s ``WORK/final``) are fine-tuned on the other folds'
   questions (each answer against the six unlabelled units the shipped reader scores highest
   and two at random; an off-topic question's six best units as negatives: the training
   reader's loss) and score the fold's units;
3. the untuned float reader scores every unit too (the comparison: the same float weights,
   not the int8 export), and for each reader the answerer's unit model and refusal are
   refitted with the shipped recipe and cross-fitted by document
   (``fit_answerer.py --cross-fit``, ``replay_answers.py --cross-fitted``).

    python bench/dev_reader.py --json RUN.json [--folds 5 --epochs 2 --lr 2e-5]

Development figures only: the test split is never read here.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, cast

from reading_data import Group
from replay_answers import CachedEmbedder, CachedReader, _questions_asked, _sources
from train_reader import DEFAULT_WORK, optimiser, train_step

HERE = Path(__file__).resolve().parent
SET = HERE / "answers"


class _Recording:
    """The cached shipped reader, remembering the last texts it read and their logits."""

    def __init__(self, inner: CachedReader) -> None:
        self.inner = inner
        self.last: tuple[list[str], list[float]] | None = None

    async def score_logits(self, question: str, texts: Any, *, kind: str = "sentence") -> Any:
        values = await self.inner.score_logits(question, texts, kind=kind)
        self.last = (list(texts), [float(v) for v in values])
        return values


async def collect(run: dict[str, Any]) -> list[dict[str, Any]]:
    """Every development question with sources: the units the answerer reads, with labels."""
    import lectern_answerer as answerer
    from lectern_common import reading
    from lectern_common.embeddings import LocalEmbedder
    from lectern_common.settings import BaseServiceSettings
    from lectern_eval.answer_set import holds_any_fact, load_set

    splits = load_set(SET)
    split_of = {q: s.name for s in splits for q in s.ids}
    by_id = {q.id: q for s in splits for q in s.questions}
    embedder = CachedEmbedder(LocalEmbedder(BaseServiceSettings()))
    shipped = CachedReader(reading.packaged())
    recording = _Recording(shipped)
    offline = answerer.OfflineAnswerer(embedder=cast(Any, embedder), reader=cast(Any, recording))
    items: list[dict[str, Any]] = []

    async def one(qid: str, asked: str, stored: list[Any], group: str, facts: Any) -> None:
        sources = _sources(stored)
        units = answerer.source_units(sources)
        similarities = await offline.similarities(asked, [u.text for u in units])
        recording.last = None
        await offline.unit_readings(asked, sources, units, similarities)
        if recording.last is None:
            return
        texts = answerer.reader_texts(units)
        label = {
            t: int(bool(facts) and holds_any_fact(u.text, facts))
            for t, u in zip(texts, units, strict=True)
        }
        read, logits = recording.last
        items.append({
            "id": qid, "group": group, "question": asked, "answerable": bool(facts),
            "read": read, "logits": logits, "labels": [label[t] for t in read],
            "all_texts": texts, "all_labels": [label[t] for t in texts],
        })  # fmt: skip

    for result in run["results"]:
        question = by_id.get(result["id"])
        if question is None or split_of[question.id] != "dev" or result.get("band") == "gap":
            continue
        if result.get("sources"):
            asked = _questions_asked(question, by_id)
            await one(question.id, asked, result["sources"], question.document, question.facts)
    for result in run.get("offtopic", []):
        if split_of.get(result["id"]) != "dev" or result.get("band") == "gap":
            continue
        if result.get("sources"):
            group = result.get("document") or "(off-topic)"
            await one(result["id"], result["question"], result["sources"], group, None)
    embedder.save()
    shipped.save()
    return items


def _groups_of(item: dict[str, Any], rng: random.Random) -> list[Group]:
    """The training group of one development question (none for an answerable one whose
    sources state no key fact)."""
    read = sorted(
        zip(item["read"], item["labels"], item["logits"], strict=True), key=lambda r: -r[2]
    )
    if not item["answerable"]:
        texts = [t for t, _, _ in read][:6]
        return [Group(item["question"], texts, [0] * len(texts), "sentence", "dev")]
    answers = [t for t, y in zip(item["all_texts"], item["all_labels"], strict=True) if y][:3]
    if not answers:
        return []
    hard = [t for t, y, _ in read if not y][:6]
    rest = [t for t, y in zip(item["all_texts"], item["all_labels"], strict=True)
            if not y and t not in hard]  # fmt: skip
    negatives = hard + rng.sample(rest, min(2, len(rest)))
    labels = [1] * len(answers) + [0] * len(negatives)
    return [Group(item["question"], answers + negatives, labels, "sentence", "dev")]


def read_pairs(model: Any, tokenizer: Any, pairs: list[tuple[str, str]]) -> list[float]:
    """A float reader's logit of each (question, sentence) pair, 64 at a time in bfloat16."""
    import torch

    model.eval()
    out: list[float] = []
    with torch.no_grad():
        for start in range(0, len(pairs), 64):
            chunk = pairs[start : start + 64]
            encoded = tokenizer(
                [q for q, _ in chunk], [t for _, t in chunk], truncation="longest_first",
                max_length=128, padding=True, return_tensors="pt",
            )  # fmt: skip
            with torch.autocast("cpu", dtype=torch.bfloat16):
                out += [float(v) for v in model(**encoded).logits.squeeze(-1).float().tolist()]
    return out


def train_folds(
    items: list[dict[str, Any]], *, folds: int, epochs: int, lr: float, work: Path
) -> dict[str, dict[str, float]]:
    """The untuned and the cross-fitted tuned readers' logits, keyed as ``CachedReader``."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    final = work / "final"
    if not (final / "model.safetensors").is_file():
        sys.exit(f"no float reader in {final}: run `make train-reader` first")
    torch.set_num_threads(2)
    torch.manual_seed(13)
    rng = random.Random(13)
    tokenizer = AutoTokenizer.from_pretrained(final, local_files_only=True)

    def load() -> Any:
        return AutoModelForSequenceClassification.from_pretrained(
            final, num_labels=1, local_files_only=True
        )

    def score(model: Any, pairs: list[tuple[str, str]]) -> dict[str, float]:
        logits = read_pairs(model, tokenizer, pairs)
        return {f"sentence\x1f{q}\x1f{t}": v for (q, t), v in zip(pairs, logits, strict=True)}

    started = time.monotonic()
    pairs = [(i["question"], t) for i in items for t in i["read"]]
    base = score(load(), pairs)
    print(f"the untuned reader read {len(pairs)} pairs ({time.monotonic() - started:.0f} s)")
    documents = sorted({i["group"] for i in items})
    fold_of = {d: n % folds for n, d in enumerate(documents)}
    tuned: dict[str, float] = {}
    for fold in range(folds):
        train = [g for i in items if fold_of[i["group"]] != fold for g in _groups_of(i, rng)]
        model = load()
        model.train()
        optimizer = optimiser(model, lr=lr, head_lr=5 * lr)
        steps = 0
        for _ in range(epochs):
            order = list(range(len(train)))
            rng.shuffle(order)
            batches: list[list[Group]] = [[]]
            for index in order:  # at most 32 pairs a step, as the training reader's
                size = sum(len(g.texts) for g in batches[-1])
                if batches[-1] and size + len(train[index].texts) > 32:
                    batches.append([])
                batches[-1].append(train[index])
            for batch in batches:
                train_step(model, tokenizer, optimizer, batch, bfloat16=True)
                steps += 1
        held = [(i["question"], t) for i in items if fold_of[i["group"]] == fold for t in i["read"]]
        tuned.update(score(model, held))
        took = time.monotonic() - started
        print(f"fold {fold + 1}/{folds}: {len(train)} questions, {steps} steps, "
              f"{len(held)} pairs scored ({took:.0f} s)", flush=True)  # fmt: skip
    return {"base": base, "tuned": tuned}


def measure(run_path: Path, logits_path: Path, which: str, scratch: Path) -> None:
    """Signals with one reader's development logits, the shipped recipe cross-fitted, and
    the development figures printed (``bench/replay_answers.py`` through ``--reader-logits``)."""
    python = sys.executable
    signals, folder = scratch / f"signals-{which}.npz", scratch / f"cross-fitted-{which}"
    replay = [python, str(HERE / "replay_answers.py"), "--json", str(run_path),
              "--reader-logits", f"{logits_path}:{which}"]  # fmt: skip
    subprocess.run([*replay, "--signals", str(signals)], check=True, capture_output=True)
    fitted = subprocess.run(
        [python, "fit_answerer.py", "--signals", str(signals), "--out",
         str(scratch / f"model-{which}.json"), "--cross-fit", str(folder)],
        check=True, capture_output=True, text=True, cwd=HERE,
    )  # fmt: skip
    top1 = [line for line in fitted.stdout.splitlines() if line.startswith("C=")]
    replayed = subprocess.run(
        [*replay, "--cross-fitted", str(folder)], check=True, capture_output=True, text=True
    )
    figures = json.loads(replayed.stdout.splitlines()[-1])["replay"]["dev"]
    print(f"{which}: unit model {top1[-1].strip() if top1 else ''}")
    print("  dev, cross-fitted: " + ", ".join(
        f"{k} {v:.3f}" for k, v in figures.items() if k != "questions"
    ))  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, default=Path("/tmp/lectern-bench-answers.json"))
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--lr", type=float, default=2e-5)
    parser.add_argument("--work", type=Path, default=DEFAULT_WORK)
    parser.add_argument("--scratch", type=Path, default=Path("/tmp/lectern-dev-reader"))
    args = parser.parse_args()
    args.scratch.mkdir(parents=True, exist_ok=True)
    items = asyncio.run(collect(json.loads(args.json.read_text())))
    print(f"{len(items)} development questions with sources")
    logits = train_folds(items, folds=args.folds, epochs=args.epochs, lr=args.lr, work=args.work)
    path = args.scratch / "logits.json"
    path.write_text(json.dumps(logits))
    for which in ("base", "tuned"):
        measure(args.json, path, which, args.scratch)
    return 0


if __name__ == "__main__":
    sys.exit(main())
