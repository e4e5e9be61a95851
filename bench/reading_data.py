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


Span = tuple[int, int]


@dataclass
class Group:
    """One question and candidates to read against it; ``labels[i]`` is 1 when candidate
    ``i`` answers it. A group may hold no answer at all (an unanswerable question).

    ``spans``, when a source knows where its answers are, gives for each candidate the
    answer's characters in it (``text[start:end]``): for an answering candidate its span, or
    None when the answer is not found word for word (then only its relevance is learnt); a
    candidate that does not answer holds no span (the reader learns to say "none here"). A
    group without ``spans`` teaches relevance alone."""

    question: str
    texts: list[str]
    labels: list[int]
    kind: Kind
    source: str
    meta: dict[str, Any] = field(default_factory=dict)
    spans: list[Span | None] | None = None

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


def locate(text: str, answers: Iterable[str]) -> Span | None:
    """Where the first of ``answers`` that occurs in ``text`` as whole words (case aside)
    is, as character offsets; None when none does."""
    for answer in answers:
        answer = answer.strip()
        if not answer:
            continue
        found = re.search(rf"(?<!\w){re.escape(answer)}(?!\w)", text, flags=re.IGNORECASE)
        if found:
            return found.start(), found.end()
    return None


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
            group = _group(question, right[:1], negatives, "sentence", "squad")
            groups.append(_spanned(group, row["answers"]))
        if passages_taken[key] < passages_per_paragraph:
            passages_taken[key] += 1
            pool = [p for i, p in paragraphs[key[0]].items() if i != key[1]]
            negatives = _hardest(rng, question, pool, 1, 1)
            group = _group(
                question,
                [_titled(rng, key[0], paragraphs[key[0]][key[1]])],
                [_titled(rng, key[0], p) for p in negatives],
                "passage",
                "squad",
            )
            groups.append(_spanned(group, row["answers"]))
    for number, row in enumerate(v2):
        if (row["title"] in out_titles) != held:
            continue
        key = (row["title"], int(row["paragraph"]))
        closest = _hardest(rng, row["question"], sentences[key], 2, 0)
        groups.append(_spanned(_group(row["question"], [], closest, "sentence", "squad-v2"), []))
        if number % 2 == 0:
            text = _titled(rng, key[0], row["context"])
            groups.append(_spanned(_group(row["question"], [], [text], "passage", "squad-v2"), []))
    return groups


def _spanned(group: Group, answers: Sequence[str]) -> Group:
    """The group with its answering candidates' spans located (``locate``), none in the
    others: the answer most annotators gave first, the shortest of equals (SQuAD's
    annotators sometimes mark the whole sentence beside the word the others chose)."""
    counts: dict[str, int] = defaultdict(int)
    for answer in answers:
        counts[answer.strip()] += 1
    ranked = sorted(counts, key=lambda a: (-counts[a], len(a)))
    group.spans = [
        locate(text, ranked) if label else None
        for text, label in zip(group.texts, group.labels, strict=True)
    ]
    return group


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


def fairytale(
    rng: random.Random, split: Literal["train", "val", "test"] = "train", *, questions: int = 4000
) -> list[Group]:
    """FairytaleQA (split by story): each question's answering section against the two other
    sections of its story sharing most of its terms (near misses that do not hold the
    answer), as passages; where the answer occurs word for word, its span, and a sentence
    group too: the sentence holding it against three of the section's others. At most
    ``questions``, those whose answer is found word for word first (why questions mostly
    are not: their passages teach relevance alone)."""
    stories = {r["story"]: r["sections"] for r in _rows(READING / "fairytaleqa-stories.jsonl")}
    rows = [r for r in _rows(READING / "fairytaleqa.jsonl") if r["split"] == split]
    rng.shuffle(rows)
    found: list[tuple[dict[str, Any], str]] = []
    unfound: list[tuple[dict[str, Any], str]] = []
    for row in rows:
        sections = stories[row["story"]]
        own = [sections[i - 1] for i in row["sections"] if 0 < i <= len(sections)]
        holding = [t for t in own if locate(t, row["answers"])]
        (found if holding else unfound).append((row, holding[0] if holding else own[0]))
    groups: list[Group] = []
    for row, section in (found + unfound)[:questions]:
        others = [
            t for t in stories[row["story"]] if t not in {section} and not holds(t, row["answers"])
        ]
        negatives = _hardest(rng, row["question"], others, 2, 0)
        meta = {"story": row["story"], "type": row["type"]}
        group = _spanned(_group(row["question"], [section], negatives, "passage", "fairytale"),
                         row["answers"])  # fmt: skip
        group.meta = meta
        groups.append(group)
        if group.spans and group.spans[0] is not None:
            sentences = split_sentences(section)
            right = [t for t in sentences if locate(t, row["answers"])]
            wrong = [t for t in sentences if not holds(t, row["answers"])]
            if right and wrong:
                nearest = _hardest(rng, row["question"], wrong, 2, 1)
                group = _group(row["question"], right[:1], nearest, "sentence", "fairytale")
                group.meta = meta
                groups.append(_spanned(group, row["answers"]))
    return groups


def table_paragraph(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A table as the product's ingest writes one into a chunk: one line of cells joined by
    " | " a row, the header first (``lectern_common.text.table_rows`` reads it back)."""
    clean = [[" ".join(c.split()) for c in row] for row in [header, *rows]]
    return "\n".join(" | ".join(row) for row in clean)


def wikitables(
    rng: random.Random, split: Literal["train", "test"] = "train", *, questions: int = 3000,
    negatives: int = 4,
) -> list[Group]:  # fmt: skip
    """WikiTableQuestions whose answer is one cell of one row: the row, rendered exactly as
    the answerer reads a table row ("header: cell; ..."), with the cell as the span, against
    ``negatives`` of the table's other rows (those sharing most of the question's terms
    first). ``test`` is the tables never seen in training."""
    from lectern_common.text import table_rows

    tables = {t["table"]: t for t in _rows(READING / "wikitablequestions-tables.jsonl")}
    rows = [r for r in _rows(READING / "wikitablequestions.jsonl") if r["split"] == split]
    rng.shuffle(rows)
    groups: list[Group] = []
    for row in rows:
        if len(groups) >= questions or len(row["answers"]) != 1:
            continue
        table = tables[row["table"]]
        header = [" ".join(h.split()) for h in table["header"]]
        body = [r for r in table["rows"] if len(r) == len(header)]
        answer = row["answers"][0].strip()
        holding = [
            (i, j) for i, r in enumerate(body) for j, c in enumerate(r)
            if " ".join(c.split()).casefold() == answer.casefold()
        ]  # fmt: skip
        if len(holding) != 1 or len(body) < 3 or not answer:
            continue
        rendered = table_rows(table_paragraph(header, body))[1:]  # the header line first
        if len(rendered) != len(body):
            continue
        at, column = holding[0]
        text = rendered[at]
        cell = f"{header[column]}: {' '.join(body[at][column].split())}"
        start = text.find(cell) if header[column] else text.find(answer)
        if start < 0:
            continue
        start += len(header[column]) + 2 if header[column] else 0
        others = _hardest(rng, row["question"], rendered[:at] + rendered[at + 1 :], negatives, 0)
        group = _group(row["question"], [text], others, "sentence", "wikitables")
        group.spans = [
            (start, start + len(" ".join(body[at][column].split()))),
            *[None] * len(others),
        ]
        group.meta = {"table": row["table"]}
        groups.append(group)
    return groups


def training_groups(seed: int, *, bioasq: Bioasq | None = None) -> list[Group]:
    """Every training group of every source, the same for the same seed."""
    rng = random.Random(seed)
    groups = squad(rng) + selqa("dev") + pubmedqa(rng)
    groups += (bioasq or Bioasq.load()).training_groups(rng)
    return groups
