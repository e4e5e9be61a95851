"""The reader by itself, on data it never saw, beside the bi-encoder's cosine and BM25.

    make bench-reader        # or: python bench/bench_reader.py [--run RUN.json] [--reader DIR]

On the same items, three orders of each question's candidates: the packaged reader's logit
(``lectern_common.reading``, int8 ONNX, as the services run it), the cosine of the packaged
MiniLM bi-encoder (the product's int8 query and passage embeddings) and BM25 (bm25s over
the candidates, English stopwords):

- SelQA test (1,590 questions, never trained on): MAP and MRR of the candidate sentences;
- COVID-QA (measuring only): top-1 accuracy of the sentence chosen among BM25's 30 best
  sentences of the article (a question whose answer BM25 misses counts as a miss for all);
- bioasq-dev's held-out fifth (``reading_data.bioasq_split``): BM25's top 20 re-ranked,
  MRR@10;
- the project's development split (``bench/answers/dev``, never trained on): unit top-1, the
  share of answerable questions whose best unit of the final context states a key fact,
  on a stored ``make bench-answers`` run (``--run``).

Also the model's size and its time per pair on this machine. Prints a table, then one JSON
line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import reading_data
from numpy.typing import NDArray
from reading_data import Group

HERE = Path(__file__).resolve().parent
Scorer = Callable[[Sequence[Group]], list[NDArray[np.float64]]]


def average_precision(scores: NDArray[np.float64], labels: Sequence[int]) -> float:
    """Average precision of one question's candidates ordered by ``scores``."""
    order = np.argsort(-scores, kind="stable")
    hits, total = 0, 0.0
    for rank, i in enumerate(order, start=1):
        if labels[i]:
            hits += 1
            total += hits / rank
    return total / hits if hits else 0.0


def reciprocal_rank(scores: NDArray[np.float64], labels: Sequence[int], depth: int = 0) -> float:
    """1 / the rank of the first answer (0 past ``depth`` when it is set)."""
    order = np.argsort(-scores, kind="stable")
    for rank, i in enumerate(order, start=1):
        if depth and rank > depth:
            break
        if labels[i]:
            return 1.0 / rank
    return 0.0


def top1(scores: NDArray[np.float64], labels: Sequence[int]) -> float:
    """1 when the best-scored candidate answers."""
    return float(labels[int(np.argmax(scores))]) if len(scores) else 0.0


def reader_scorer(folder: Path | None) -> tuple[Scorer, Any]:
    """Each group's candidates read by the reader (the kind of the group)."""
    from lectern_common.reading import Reader

    reader = Reader.load(folder)

    def score(groups: Sequence[Group]) -> list[NDArray[np.float64]]:
        return [reader.logits(g.question, g.texts, kind=g.kind).astype(np.float64) for g in groups]

    return score, reader


def cosine_scorer() -> Scorer:
    """Each group's candidates by their cosine to the question (the product's embedder)."""
    from lectern_common.embeddings import LocalEmbedder

    embedder = LocalEmbedder()

    async def one(group: Group) -> NDArray[np.float64]:
        query = np.asarray(await embedder.embed_query(group.question), dtype=np.float64)
        docs = np.asarray(await embedder.embed_documents(group.texts), dtype=np.float64)
        return docs @ query

    def score(groups: Sequence[Group]) -> list[NDArray[np.float64]]:
        async def run() -> list[NDArray[np.float64]]:
            return [await one(g) for g in groups]

        return asyncio.run(run())

    return score


def bm25_scores(groups: Sequence[Group]) -> list[NDArray[np.float64]]:
    """Each group's candidates by BM25 over the group's own candidates."""
    import bm25s

    out = []
    for g in groups:
        index = bm25s.BM25()
        index.index(bm25s.tokenize(g.texts, stopwords="en", show_progress=False),
                    show_progress=False)  # fmt: skip
        query = bm25s.tokenize([g.question], stopwords="en", show_progress=False)
        docs, scores = index.retrieve(query, k=len(g.texts), show_progress=False)
        row = np.zeros(len(g.texts))
        row[docs[0]] = scores[0]
        out.append(row)
    return out


def in_given_order(groups: Sequence[Group]) -> list[NDArray[np.float64]]:
    """The candidates' own order (BM25's, where the groups were built by it)."""
    return [-np.arange(len(g.texts), dtype=np.float64) for g in groups]


def dev_units(run: Path) -> list[Group]:
    """The development split's answerable questions of a stored run, each against the units
    of its final context (labelled: states one of its key facts)."""
    from replay_answers import _questions_asked, _sources

    from lectern_answerer import source_units
    from lectern_eval.answer_set import holds_any_fact, load_set

    splits = load_set(HERE / "answers")
    split_of = {q: s.name for s in splits for q in s.ids}
    by_id = {q.id: q for s in splits for q in s.questions}
    groups = []
    for result in json.loads(run.read_text())["results"]:
        question = by_id.get(result["id"])
        stored = result.get("sources") or []
        if question is None or split_of[question.id] != "dev" or not stored:
            continue
        units = source_units(_sources(stored))
        labels = [int(holds_any_fact(u.text, question.facts)) for u in units]
        if any(labels):
            asked = _questions_asked(question, by_id)
            groups.append(Group(asked, [u.text for u in units], labels, "sentence", "dev"))
    return groups


def measure(name: str, groups: Sequence[Group], scorers: dict[str, Scorer]) -> dict[str, Any]:
    """Every figure of one data set for every scorer."""
    out: dict[str, Any] = {"questions": len(groups)}
    for label, scorer in scorers.items():
        started = time.monotonic()
        scores = scorer(groups)
        seconds = time.monotonic() - started
        pairs = list(zip(scores, groups, strict=True))
        answered = [(s, g.labels) for s, g in pairs if any(g.labels)]
        figures = {
            "map": float(np.mean([average_precision(s, y) for s, y in answered])),
            "mrr": float(np.mean([reciprocal_rank(s, y) for s, y in answered])),
            "mrr@10": float(np.mean([reciprocal_rank(s, y, 10) for s, y in answered])),
            # a question whose answer is not among the candidates is a miss for all
            "top1": float(np.mean([top1(s, g.labels) for s, g in pairs])),
            "seconds": round(seconds, 1),
        }  # fmt: skip
        out[label] = {k: round(v, 4) for k, v in figures.items()}
        print(f"  {name:18} {label:10} " + "  ".join(
            f"{k} {v:.3f}" for k, v in figures.items() if k != "seconds"
        ) + f"  ({seconds:.0f} s)", flush=True)  # fmt: skip
    return out


def timing(reader: Any) -> dict[str, float]:
    """Milliseconds per pair, batched: a question's 20 passages and its 64 sentences."""
    question = "What does the enzyme do in the second step of the reaction?"
    words = "the enzyme binds its substrate and lowers the energy of the transition state".split()
    rng = random.Random(0)
    passage = [" ".join(rng.choice(words) for _ in range(180)) for _ in range(20)]
    sentence = [" ".join(rng.choice(words) for _ in range(28)) for _ in range(64)]
    out = {}
    for kind, texts in (("passage", passage), ("sentence", sentence)):
        reader.logits(question, texts, kind=kind)
        runs = []
        for _ in range(5):
            started = time.perf_counter()
            reader.logits(question, texts, kind=kind)
            runs.append(time.perf_counter() - started)
        out[f"{kind}s_{len(texts)}_ms"] = round(float(np.median(runs)) * 1000, 1)
    return out


def timing_beside(readers: dict[str, Any], rounds: int = 5) -> dict[str, Any]:
    """``timing`` of several readers in turn, ``rounds`` times over, in one run (the machine's
    noise falls on all alike): each one's medians, and each one's ratio to the first."""
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in readers}
    for _ in range(rounds):
        for name, reader in readers.items():
            runs[name].append(timing(reader))
    medians = {
        name: {k: round(float(np.median([r[k] for r in rs])), 1) for k in rs[0]}
        for name, rs in runs.items()
    }
    first = next(iter(medians.values()))
    return {
        name: {**m, **{f"{k}_ratio": round(v / first[k], 3) for k, v in m.items()}}
        for name, m in medians.items()
    }


def main() -> int:
    """Measure every set and print the table and the JSON line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reader", type=Path, help="a reader folder (default: the packaged one)")
    parser.add_argument(
        "--run", type=Path, default=Path("/tmp/lectern-bench-answers.json"),
        help="a stored make bench-answers run, for the development units",
    )  # fmt: skip
    parser.add_argument("--covid-limit", type=int, default=0, help="at most N COVID-QA questions")
    parser.add_argument(
        "--time-beside", type=Path, metavar="DIR",
        help="only time the reader against another reader folder, in turn in one run",
    )  # fmt: skip
    args = parser.parse_args()
    if args.time_beside:
        from lectern_common.reading import Reader

        readers = {str(args.reader or "packaged"): Reader.load(args.reader),
                   str(args.time_beside): Reader.load(args.time_beside)}  # fmt: skip
        compared = timing_beside(readers)
        for name, figures in compared.items():
            print(f"{name}: {figures}")
        print(json.dumps({"bench": "reader-timing", **compared}))
        return 0
    if not reading_data.READING.is_dir():
        print(f"bench-reader: needs the reading data at {reading_data.READING}", file=sys.stderr)
        return 2
    reader, loaded = reader_scorer(args.reader)
    cosine = cosine_scorer()
    results: dict[str, Any] = {
        "model": str(loaded.path),
        "size_mb": round(loaded.path.stat().st_size / 1e6, 1),
        "timing": timing(loaded),
    }
    print(f"reader {loaded.path} ({results['size_mb']} MB): {results['timing']}", flush=True)
    selqa = reading_data.selqa("test")
    results["selqa_test"] = measure(
        "SelQA test", selqa, {"reader": reader, "cosine": cosine, "bm25": bm25_scores}
    )
    covid = reading_data.covid_qa(random.Random(0))
    if args.covid_limit:
        covid = covid[: args.covid_limit]
    results["covid_qa"] = measure(
        "COVID-QA", covid, {"reader": reader, "cosine": cosine, "bm25": in_given_order}
    )
    bioasq = reading_data.Bioasq.load().held_out_groups(20)
    results["bioasq_held_out"] = measure(
        "bioasq held-out", bioasq, {"reader": reader, "cosine": cosine, "bm25": in_given_order}
    )
    if args.run.is_file():
        dev = dev_units(args.run)
        results["dev_units"] = measure(
            "dev units", dev, {"reader": reader, "cosine": cosine, "bm25": bm25_scores}
        )
    else:
        print(f"  dev units: no stored run at {args.run} (make bench-answers writes one)")
    print(json.dumps({"bench": "reader", **results}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
