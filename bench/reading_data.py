"""The reading data, as (question, candidates, labels) groups: what the reader is trained on
and measured with.

Everything is read by path from ``../shared/data`` (never copied into the project). Each
source is split so that no measured item is ever trained on:

- SQuAD v1.1 and v2.0 (unanswerable): by article; every eighth article (by title) is held
  out for validation, the rest is trained on;
- SelQA: its dev file is trained on, its test file measured (never fitted);
- COVID-QA: measured only (its README: articles of mixed licences, for measuring only);
- PubMedQA: by abstract, the same hash rule as BioASQ;
- BioASQ (``eval/bioasq-dev``): by question, ``bioasq_split``; the held-out fifth is what
  ``lectern eval --query-split held-out`` measures the product on;
- the project's own answer set (``bench/answers``) is not trained on at all, so the reader's
  figures on its development split are out of sample.

Sentences are cut by the product's own splitter (``lectern_common.text.split_sentences``),
so the reader is trained on the units the answerer will show it.
"""

from __future__ import annotations

import json
import random
import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from lectern_common.text import split_sentences, terms
from lectern_eval.retrieval import query_split

HERE = Path(__file__).resolve().parent
SHARED = HERE.parent.parent / "shared" / "data"
READING = SHARED / "reading"
BIOASQ = SHARED / "eval" / "bioasq-dev"
PUBMEDQA = SHARED / "eval" / "pubmedqa-pqal"

Kind = Literal["sentence", "passage"]


@dataclass
class Group:
    """One question and candidates to read against it; ``labels[i]`` is 1 when candidate
    ``i`` answers it. A group may hold no answer at all (an unanswerable question)."""

    question: str
    texts: list[str]
    labels: list[int]
    kind: Kind
    source: str
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def answered(self) -> bool:
        """Whether some candidate answers."""
        return any(self.labels)


def held_out(key: str) -> bool:
    """The hash rule that holds out one item in five (by its id) from training: the one
    ``lectern eval --query-split held-out`` measures on."""
    return query_split(key) == "held-out"


def bioasq_split(query_id: str) -> Literal["held-out", "train"]:
    """Which part of bioasq-dev a question belongs to: a fifth is held out from every fit."""
    return query_split(query_id)


def _normal(text: str) -> str:
    text = re.sub(r"(?<!\d)\.|\.(?!\d)", " ", text.casefold())  # keep "2.5", not "year."
    return " ".join(re.sub(r"[^\w%$.]+", " ", text).split())


def holds(sentence: str, answers: Iterable[str]) -> bool:
    """Whether ``sentence`` states one of ``answers`` (case and punctuation aside)."""
    norm = f" {_normal(sentence)} "
    return any(a and f" {a} " in norm for a in (_normal(x) for x in answers))


def overlap(question: Sequence[str], text: str) -> float:
    """Share of the question's terms in ``text`` (what makes a negative hard)."""
    if not question:
        return 0.0
    held = set(terms(text))
    return sum(1 for t in question if t in held) / len(question)


def _rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _hardest(
    rng: random.Random, question: str, pool: Sequence[str], hard: int, easy: int
) -> list[str]:
    """``hard`` candidates of ``pool`` sharing most of the question's terms, then ``easy``
    drawn at random from the rest."""
    asked = list(dict.fromkeys(terms(question)))
    ranked = sorted(pool, key=lambda s: -overlap(asked, s))
    rest = ranked[hard:]
    return ranked[:hard] + rng.sample(rest, min(easy, len(rest)))


def squad_titles_held_out(titles: Iterable[str]) -> set[str]:
    """Every eighth SQuAD article by title: held out for validation, never trained on."""
    return set(sorted(set(titles))[::8])


def squad(
    rng: random.Random, *, held: bool = False, passages_per_paragraph: int = 2
) -> list[Group]:
    """SQuAD v1.1 and v2.0 as sentence and passage groups.

    A question's sentence group: the sentence stating its answer, two sentences of its
    paragraph sharing most of its terms, one more of the paragraph at random and the
    closest sentence of another paragraph of its article. Its passage group (for
    ``passages_per_paragraph`` questions of each paragraph): the paragraph, with or without
    its article's title, against the article's other paragraph sharing most of its terms
    and one at random. An unanswerable v2.0 question gives the two sentences of its paragraph
    closest to it (no answer among them), and for half of them the paragraph itself.
    """
    v1 = _rows(READING / "squad-v1.1-dev.jsonl")
    v2 = _rows(READING / "squad-v2.0-dev-unanswerable.jsonl")
    out_titles = squad_titles_held_out(r["title"] for r in v1)
    paragraphs: dict[str, dict[int, str]] = defaultdict(dict)
    for row in v1 + v2:
        paragraphs[row["title"]][int(row["paragraph"])] = row["context"]
    sentences = {
        (title, index): split_sentences(text)
        for title, by_index in paragraphs.items()
        for index, text in by_index.items()
    }
    groups: list[Group] = []
    passages_taken: dict[tuple[str, int], int] = defaultdict(int)
    for row in v1:
        if (row["title"] in out_titles) != held:
            continue
        key = (row["title"], int(row["paragraph"]))
        question = row["question"]
        own = sentences[key]
        right = [s for s in own if holds(s, row["answers"])]
        wrong = [s for s in own if not holds(s, row["answers"])]
        others = [s for (t, i), ss in sentences.items() if t == key[0] and i != key[1] for s in ss]
        if right:
            negatives = _hardest(rng, question, wrong, 2, 1) + _hardest(rng, question, others, 1, 0)
            groups.append(_group(question, right[:1], negatives, "sentence", "squad"))
        if passages_taken[key] < passages_per_paragraph:
            passages_taken[key] += 1
            pool = [p for i, p in paragraphs[key[0]].items() if i != key[1]]
            negatives = _hardest(rng, question, pool, 1, 1)
            groups.append(
                _group(
                    question,
                    [_titled(rng, key[0], paragraphs[key[0]][key[1]])],
                    [_titled(rng, key[0], p) for p in negatives],
                    "passage",
                    "squad",
                )
            )
    for number, row in enumerate(v2):
        if (row["title"] in out_titles) != held:
            continue
        key = (row["title"], int(row["paragraph"]))
        closest = _hardest(rng, row["question"], sentences[key], 2, 0)
        groups.append(_group(row["question"], [], closest, "sentence", "squad-v2"))
        if number % 2 == 0:
            text = _titled(rng, key[0], row["context"])
            groups.append(_group(row["question"], [], [text], "passage", "squad-v2"))
    return groups


def _titled(rng: random.Random, title: str, text: str) -> str:
    """A passage as the product shows it half of the time: its document's title first."""
    return f"{title.replace('_', ' ')}\n\n{text}" if rng.random() < 0.5 else text


def _group(
    question: str, right: Sequence[str], wrong: Sequence[str], kind: Kind, source: str
) -> Group:
    texts = [*right, *wrong]
    return Group(question, texts, [1] * len(right) + [0] * len(wrong), kind, source)


def selqa(part: Literal["dev", "test"]) -> list[Group]:
    """SelQA answer-sentence selection: a question against its section's sentences."""
    data = json.loads((READING / f"selqa-ass-{part}.json").read_text())
    groups = []
    for item in data:
        answers = set(item["answers"])
        labels = [int(i in answers) for i in range(len(item["candidates"]))]
        groups.append(
            Group(item["question"], list(item["candidates"]), labels, "sentence", f"selqa-{part}")
        )
    return groups


def covid_qa(rng: random.Random, *, candidates: int = 30) -> list[Group]:
    """COVID-QA (measuring only): each question against the ``candidates`` sentences of its
    article that BM25 ranks best; a sentence answers when it holds the answer or lies
    inside a long one. A question whose answering sentence BM25 misses keeps its group with
    no answer (every method misses it alike)."""
    import bm25s

    data = json.loads((READING / "covid-qa-200423.json").read_text())["data"]
    groups = []
    for article in data:
        for paragraph in article["paragraphs"]:
            sentences = [s for s in split_sentences(paragraph["context"]) if len(s.split()) >= 3]
            if not sentences:
                continue
            index = bm25s.BM25()
            index.index(bm25s.tokenize(sentences, stopwords="en", show_progress=False),
                        show_progress=False)  # fmt: skip
            for qa in paragraph["qas"]:
                answers = [a["text"] for a in qa["answers"]]
                found, _ = index.retrieve(
                    bm25s.tokenize([qa["question"]], stopwords="en", show_progress=False),
                    k=min(candidates, len(sentences)),
                    show_progress=False,
                )
                picked = [sentences[int(i)] for i in found[0]]
                labels = [int(holds(s, answers) or _inside(s, answers)) for s in picked]
                groups.append(Group(qa["question"], picked, labels, "sentence", "covid-qa"))
    rng.shuffle(groups)
    return groups


def _inside(sentence: str, answers: Iterable[str]) -> bool:
    """A sentence of a long answer (several sentences): it lies inside one."""
    norm = _normal(sentence)
    return len(norm.split()) >= 4 and any(norm in _normal(a) for a in answers)


@dataclass
class Bioasq:
    """bioasq-dev read once: queries, corpus, judgements, and BM25's top 30 per question."""

    queries: dict[str, str]
    corpus: dict[str, str]
    relevant: dict[str, set[str]]
    top: dict[str, list[str]]

    @classmethod
    def load(cls, depth: int = 30) -> Bioasq:
        """Read bioasq-dev and rank its corpus by bm25s for every judged question."""
        import bm25s

        queries = {d["_id"]: d["text"] for d in _rows(BIOASQ / "queries.jsonl")}
        corpus = {d["_id"]: d["text"] for d in _rows(BIOASQ / "corpus.jsonl")}
        relevant: dict[str, set[str]] = defaultdict(set)
        for line in (BIOASQ / "qrels" / "test.tsv").read_text().splitlines()[1:]:
            query, doc, score = line.split("\t")
            if float(score) > 0:
                relevant[query].add(doc)
        ids = list(corpus)
        bm25 = bm25s.BM25()
        bm25.index(bm25s.tokenize([corpus[i] for i in ids], stopwords="en", show_progress=False),
                   show_progress=False)  # fmt: skip
        asked = sorted(q for q in queries if relevant.get(q))
        found, _ = bm25.retrieve(
            bm25s.tokenize([queries[q] for q in asked], stopwords="en", show_progress=False),
            k=depth,
            show_progress=False,
        )
        top = {q: [ids[int(j)] for j in row] for q, row in zip(asked, found, strict=True)}
        return cls(queries, corpus, dict(relevant), top)

    def training_groups(
        self, rng: random.Random, *, positives: int = 2, negatives: int = 3
    ) -> list[Group]:
        """Each training question's judged passages (up to ``positives``), each against
        ``negatives`` of BM25's ten best passages that are not judged relevant."""
        groups = []
        for query in sorted(self.top):
            if bioasq_split(query) != "train":
                continue
            wrong = [d for d in self.top[query] if d not in self.relevant[query]][:10]
            right = sorted(self.relevant[query])
            for doc in rng.sample(right, min(positives, len(right))):
                picked = rng.sample(wrong, min(negatives, len(wrong)))
                groups.append(
                    _group(self.queries[query], [self.corpus[doc]],
                           [self.corpus[d] for d in picked], "passage", "bioasq")
                )  # fmt: skip
        return groups

    def held_out_groups(self, depth: int = 20) -> list[Group]:
        """Each held-out question against BM25's top ``depth``, in BM25's order."""
        groups = []
        for query in sorted(self.top):
            if bioasq_split(query) != "held-out":
                continue
            docs = self.top[query][:depth]
            groups.append(
                Group(self.queries[query], [self.corpus[d] for d in docs],
                      [int(d in self.relevant[query]) for d in docs], "passage", "bioasq",
                      {"query_id": query, "doc_ids": docs})
            )  # fmt: skip
        return groups


def pubmedqa(rng: random.Random, *, negatives: int = 2) -> list[Group]:
    """PubMedQA's labelled questions (four fifths, by the hash of the abstract's id): the
    question against its abstract and the ``negatives`` other abstracts sharing most of its
    terms (one of them at random)."""
    data = json.loads((READING / "pubmedqa-pqal.json").read_text())
    abstracts = {key: " ".join(item["CONTEXTS"]) for key, item in data.items()}
    keys = sorted(abstracts)
    groups = []
    for key in keys:
        if held_out(key):
            continue
        question = data[key]["QUESTION"]
        pool = [abstracts[k] for k in rng.sample(keys, 60) if k != key]
        wrong = _hardest(rng, question, pool, negatives - 1, 1)
        groups.append(_group(question, [abstracts[key]], wrong, "passage", "pubmedqa"))
    return groups


def training_groups(seed: int, *, bioasq: Bioasq | None = None) -> list[Group]:
    """Every training group of every source, the same for the same seed."""
    rng = random.Random(seed)
    groups = squad(rng) + selqa("dev") + pubmedqa(rng)
    groups += (bioasq or Bioasq.load()).training_groups(rng)
    return groups
