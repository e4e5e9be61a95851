"""Replay the offline answerer on the sources a real run stored, per split: fast ablations
and the labelled sentences the answerer's model is fitted on.

``make bench-answers`` (``lectern eval-answers --set bench/answers --json FILE``) keeps, for
every question, the sources of its final context in the order chat gave them. This replays
``OfflineAnswerer`` (with the same local embedding model the gateway loads) on exactly those
sources and scores the answers as the benchmark does: key-fact recall, a citation on the gold
page, citation precision, refusals. Retrieval is not re-run, so a change to the answerer is
measured alone in seconds; what it measures must then be confirmed by a fresh
``make bench-answers``.

    python bench/replay_answers.py --json /tmp/lectern-bench-answers.json
    python bench/replay_answers.py --json RUN.json --without followed_on --without enumerated
    python bench/replay_answers.py --json RUN.json --signals /tmp/signals.npz   # for fitting
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, cast

import numpy as np

import lectern_answerer as answerer
from lectern_answerer.tables import cited_cell
from lectern_common.events import AnswerSpan
from lectern_common.generation import SourceText
from lectern_common.text import resolve_follow_up, terms
from lectern_eval.answer_set import (
    AnswerQuestion,
    answer_lead,
    fact_recall,
    holds_any_fact,
    load_set,
)

if TYPE_CHECKING:
    from lectern_common.embeddings import Embedder

HERE = Path(__file__).resolve().parent


@dataclass
class Replayed:
    """One question's replayed answer and its scores."""

    id: str
    split: str
    document: str
    kind: str
    refused: bool
    fact_recall: float
    cited: int
    cited_precise: int
    cited_gold: bool
    context_hit: bool
    answer: str = ""
    lead_fact_recall: float = 0.0
    #: the table cell the gateway marks in the lead's citation, and whether it holds a key fact
    cell: str | None = None
    cell_holds_fact: bool = False
    #: the (question, unit) pairs the answerer's reader read for it
    units_read: int = 0


#: vectors of the product's default embedder (int8 queries and passages); another file for
#: another model or precision
CACHE = Path("/tmp/lectern-replay-vectors-int8.npz")


class CachedEmbedder:
    """The local embedder with its vectors kept on disk between replays (keyed by text)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name = inner.name
        self.vectors: dict[str, np.ndarray] = {}
        if CACHE.is_file():
            with np.load(CACHE, allow_pickle=False) as data:
                self.vectors = dict(zip(data["keys"].tolist(), data["vectors"], strict=True))
        self.added = 0

    async def _many(self, prefix: str, texts: Sequence[str], embed: Any) -> list[np.ndarray]:
        missing = [t for t in dict.fromkeys(texts) if prefix + t not in self.vectors]
        if missing:
            for text, vector in zip(missing, await embed(missing), strict=True):
                self.vectors[prefix + text] = np.asarray(vector, dtype=np.float32)
            self.added += len(missing)
        return [self.vectors[prefix + t] for t in texts]

    async def embed_documents(self, texts: Sequence[str]) -> list[np.ndarray]:
        return await self._many("d:", texts, self.inner.embed_documents)

    async def embed_query(self, text: str) -> np.ndarray:
        async def one(texts: Sequence[str]) -> list[np.ndarray]:
            return [await self.inner.embed_query(texts[0])]

        return (await self._many("q:", [text], one))[0]

    def save(self) -> None:
        if self.added:
            keys = list(self.vectors)
            np.savez(
                CACHE, keys=np.asarray(keys), vectors=np.stack([self.vectors[k] for k in keys])
            )


class CachedReader:
    """The packaged reader with its logits kept on disk between replays, keyed by the
    model's file, the question and the text."""

    #: logits that take the place of the model's for some pairs (``--reader-logits``: another
    #: reader's, e.g. ``bench/dev_reader.py``'s cross-fitted ones); never saved
    overrides: ClassVar[dict[str, float]] = {}

    def __init__(self, inner: Any) -> None:
        import hashlib

        self.inner = inner
        digest = hashlib.sha256(Path(inner.path).read_bytes()).hexdigest()[:12]
        self.path = Path(f"/tmp/lectern-replay-reader-{digest}.json")
        self.logits: dict[str, Any] = (
            json.loads(self.path.read_text()) if self.path.is_file() else {}
        )
        self.added = 0

    async def score_logits(
        self, question: str, texts: Sequence[str], *, kind: str = "sentence"
    ) -> np.ndarray:
        keys = [f"{kind}\x1f{question}\x1f{t}" for t in texts]
        if all(k in self.overrides for k in keys):
            return np.asarray([self.overrides[k] for k in keys], dtype=np.float32)
        missing = [t for t, k in zip(texts, keys, strict=True) if k not in self.logits]
        if missing:
            fresh = await self.inner.score_logits(question, missing, kind=kind)
            for text, value in zip(missing, fresh.tolist(), strict=True):
                self.logits[f"{kind}\x1f{question}\x1f{text}"] = float(value)
            self.added += len(missing)
        return np.asarray([self.logits[k] for k in keys], dtype=np.float32)

    @property
    def spans(self) -> bool:
        """Whether the reader has a span head (then ``score_readings`` reads spans too)."""
        return bool(getattr(self.inner, "spans", False))

    async def score_readings(
        self, question: str, texts: Sequence[str], *, kind: str = "sentence"
    ) -> list[Any]:
        """The reader's reads of the pairs, spans and null scores kept like the logits."""
        from lectern_common.reading import Reading

        keys = {t: f"{kind}\x1f{question}\x1f{t}\x1fspans" for t in texts}
        missing = [t for t in keys if keys[t] not in self.logits]
        if missing:
            fresh = await self.inner.score_readings(question, missing, kind=kind)
            for text, read in zip(missing, fresh, strict=True):
                self.logits[keys[text]] = [read.logit, read.start, read.end, read.span_score,
                                           read.null_score]  # fmt: skip
            self.added += len(missing)
        return [Reading(*self.logits[keys[t]]) for t in texts]

    def save(self) -> None:
        if self.added:
            self.path.write_text(json.dumps(self.logits))


def _sources(stored: Sequence[dict[str, Any]]) -> list[SourceText]:
    return [
        SourceText(
            label=str(s["label"]),
            text=str(s["text"]),
            score=None if s.get("score") is None else float(s["score"]),
            section=s.get("section"),
            answer=None if s.get("answer") is None else AnswerSpan.model_validate(s["answer"]),
        )
        for s in stored
    ]


def _lead_cell(question: str, text: str, by_label: dict[str, dict[str, Any]]) -> str | None:
    """The cell the gateway marks on the citation of the answer's lead (``Citation.cell``),
    when the lead quotes a table row and the question asks for one of its columns."""
    lead = answer_lead(text)
    label = re.search(r"\[(T\d+)", lead)
    if label is None or label.group(1) not in by_label:
        return None
    chunk = str(by_label[label.group(1)]["text"])
    found = cited_cell(question, lead, chunk)
    return chunk[found[0] : found[1]] if found else None


def _below(stored: Sequence[dict[str, Any]], margin: float | None) -> bool:
    """Whether chat.decision refuses these sources at ``margin``: none of their answer spans
    beats its null score by it (sources without spans are not refused)."""
    if margin is None:
        return False
    sources = _sources(stored)
    return answerer.has_answer_spans(sources) and answerer.best_margin(sources) < margin


def _questions_asked(question: AnswerQuestion, by_id: dict[str, AnswerQuestion]) -> str:
    """The question as the offline answerer reads it: a follow-up takes its chain's topic."""
    earlier: list[str] = []
    parent = question.follow_up_to
    while parent is not None and parent in by_id:
        earlier.insert(0, by_id[parent].question)
        parent = by_id[parent].follow_up_to
    return resolve_follow_up(question.question, earlier) if earlier else question.question


async def replay(
    run: dict[str, Any],
    root: Path,
    *,
    without: Sequence[str] = (),
    signals_out: Path | None = None,
    floor: float | None = None,
    other_floor: float | None = None,
    model: answerer.AnswerModel | None = None,
    reads: bool = True,
    read_at_most: int | None = answerer.READ_AT_MOST,
    cross_fitted: dict[str, answerer.AnswerModel] | None = None,
    margin: float | None = None,
    from_spans: bool = False,
    reader_folder: Path | None = None,
    read_first: int | None = answerer.READ_FIRST,
    read_enough: float = answerer.READ_ENOUGH_LOGIT,
) -> list[Replayed]:
    """Replay every stored answerable and off-topic question of ``run`` (with the packaged
    reader, as the gateway runs it, unless ``reads`` is false). With ``cross_fitted`` (a model
    per development document, fitted without it), each development question is answered by
    the model of its document: out-of-sample development figures."""

    def chosen(split: str, group: str) -> dict[str, Any]:
        if cross_fitted is None or split != "dev":
            return options
        return {**options, "model": cross_fitted[group]}

    from lectern_common import reading
    from lectern_common.embeddings import LocalEmbedder
    from lectern_common.settings import BaseServiceSettings

    splits = load_set(root)
    split_of = {q: s.name for s in splits for q in s.ids}
    by_id = {q.id: q for s in splits for q in s.questions}
    # the gateway's embedder with its default settings: what chat's answers are scored with
    embedder = CachedEmbedder(LocalEmbedder(BaseServiceSettings()))
    folder = reader_folder or reading.PACKAGED
    reader = (
        CachedReader(reading.Reader.load(folder)) if reads and reading.available(folder) else None
    )
    offline = answerer.OfflineAnswerer(
        embedder=cast("Embedder", embedder),
        reader=reader,
        read_at_most=read_at_most,
        from_spans=from_spans,
        read_first=read_first,
        read_enough=read_enough,
    )
    options: dict[str, Any] = {"without": frozenset(without), "model": model}
    if floor is not None:
        options["floor"] = floor
    if other_floor is not None:
        options["other_floor"] = other_floor
    out: list[Replayed] = []
    rows: list[np.ndarray] = []
    labels: list[int] = []
    groups: list[str] = []
    questions: list[str] = []
    # one row per question: answerable (1) or off-topic (0), then the question signals that
    # do not depend on the unit model (speaks, re-ranker top score, no score)
    question_ids: list[str] = []
    question_groups: list[str] = []
    question_table: list[list[float]] = []

    async def record(
        text: str, sources: list[SourceText], qid: str, group: str, answerable: int
    ) -> list[answerer.SourceUnit]:
        units = answerer.source_units(sources)
        bags = [Counter(terms(u.text)) for u in units]
        similarities = await offline.similarities(text, [u.text for u in units])
        read = await offline.unit_readings(text, sources, units, similarities, without=without)
        margins = None if read is None else read.margins
        rows.append(
            answerer.unit_signals(
                text, answerer.question_form(text), units, bags, similarities, sources=sources,
                readings=None if read is None else read.logits, margins=margins,
            )
        )  # fmt: skip
        groups.extend([group] * len(units))
        questions.extend([qid] * len(units))
        query = list(dict.fromkeys(terms(text)))
        # the question signals with no unit model behind them (the model-dependent ones are
        # recomputed by the fit)
        static = answerer.question_signals(
            text, query, bags, rows[-1], np.zeros(len(units)), sources, margins
        )
        question_ids.append(qid)
        question_groups.append(group)
        question_table.append([answerable, *static.tolist()])
        return units

    for result in run["results"]:
        question = by_id.get(result["id"])
        if question is None:
            continue
        stored = result.get("sources") or []
        # the re-ranker's gap verdict refuses before the answerer is asked, and so does the
        # gateway's answer margin (chat.decision) when no source's span beats it
        if result.get("band") == "gap" or not stored or _below(stored, margin):
            out.append(
                Replayed(result["id"], split_of[result["id"]], question.document,
                         question.kind, True, 0.0, 0, 0, False, bool(result.get("context_hit")))
            )  # fmt: skip
            continue
        sources = _sources(stored)
        asked = _questions_asked(question, by_id)
        read_before = offline.units_read
        answer = await offline.answer(
            question=asked, sources=sources,
            **chosen(split_of[question.id], question.document),
        )  # fmt: skip
        text = answer.render()
        by_label = {s["label"]: s for s in stored}
        cited = answer.cited
        cell = _lead_cell(question.question, text, by_label) if answer.supported else None
        out.append(
            Replayed(
                id=question.id, split=split_of[question.id], document=question.document,
                kind=question.kind, refused=not answer.supported,
                fact_recall=fact_recall(text, question.facts) if answer.supported else 0.0,
                cited=len(cited),
                cited_precise=sum(
                    1 for c in cited if holds_any_fact(str(by_label[c]["text"]), question.facts)
                ),
                cited_gold=any(bool(by_label[c].get("gold")) for c in cited),
                context_hit=bool(result.get("context_hit")),
                answer=text,
                lead_fact_recall=(
                    fact_recall(answer_lead(text), question.facts) if answer.supported else 0.0
                ),
                cell=cell,
                cell_holds_fact=cell is not None and holds_any_fact(cell, question.facts),
                units_read=offline.units_read - read_before,
            )
        )  # fmt: skip
        if signals_out is not None and split_of[question.id] == "dev":  # fitted on dev only
            units = await record(asked, sources, question.id, question.document, 1)
            labels += [int(holds_any_fact(u.text, question.facts)) for u in units]
    for result in run.get("offtopic", []):
        if result["id"] not in split_of:
            continue
        stored = result.get("sources") or []
        refused, read_before = True, offline.units_read
        if stored and result.get("band") != "gap" and not _below(stored, margin):
            group = result.get("document") or "(off-topic)"
            answer = await offline.answer(
                question=result["question"], sources=_sources(stored),
                **chosen(split_of[result["id"]], group),
            )  # fmt: skip
            refused = not answer.supported
            if signals_out is not None and split_of[result["id"]] == "dev":
                group = result.get("document") or "(off-topic)"
                units = await record(result["question"], _sources(stored), result["id"], group, 0)
                labels += [0] * len(units)
        out.append(
            Replayed(result["id"], split_of[result["id"]], result.get("document") or "",
                     "offtopic", refused, 0.0, 0, 0, False, False,
                     units_read=offline.units_read - read_before)
        )  # fmt: skip
    embedder.save()
    if reader is not None:
        reader.save()
    if signals_out is not None:
        np.savez(
            signals_out, signals=np.vstack(rows), labels=np.asarray(labels),
            groups=np.asarray(groups), questions=np.asarray(questions),
            names=np.asarray(answerer.SIGNALS), question_ids=np.asarray(question_ids),
            question_table=np.asarray(question_table), question_groups=np.asarray(question_groups),
        )  # fmt: skip
    return out


def summary(replayed: Sequence[Replayed], split: str) -> dict[str, float]:
    """The benchmark's figures for one split."""
    answerable = [r for r in replayed if r.split == split and r.kind != "offtopic"]
    off = [r for r in replayed if r.split == split and r.kind == "offtopic"]
    cited = sum(r.cited for r in answerable)

    def mean(values: Sequence[float]) -> float:
        return sum(values) / len(values) if values else 0.0

    return {
        "questions": len(answerable),
        "fact_recall": mean([r.fact_recall for r in answerable]),
        "lead_fact_recall": mean([r.lead_fact_recall for r in answerable]),
        "cells_marked": float(sum(r.cell is not None for r in answerable)),
        "cell_holds_fact": mean([float(r.cell_holds_fact) for r in answerable if r.cell]),
        "citation_on_gold": mean([float(r.cited_gold) for r in answerable]),
        "citation_precision": sum(r.cited_precise for r in answerable) / cited if cited else 0.0,
        "answerable_refused": mean([float(r.refused) for r in answerable]),
        "offtopic_refused": mean([float(r.refused) for r in off]),
        "near_miss_refused": mean([float(r.refused) for r in off if r.document]),
        # what reading cost: the units the answerer's reader read a question, every question
        "units_read": mean([float(r.units_read) for r in replayed if r.split == split]),
    }


def by_kind(replayed: Sequence[Replayed], split: str) -> dict[str, tuple[int, float, float]]:
    """Per kind of question: (questions, key-fact recall, ... of the answer's lead)."""
    kinds: dict[str, list[Replayed]] = {}
    for r in replayed:
        if r.split == split and r.kind != "offtopic":
            kinds.setdefault(r.kind, []).append(r)
    return {
        k: (len(v), sum(r.fact_recall for r in v) / len(v),
            sum(r.lead_fact_recall for r in v) / len(v))
        for k, v in sorted(kinds.items())
    }  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, default=Path("/tmp/lectern-bench-answers.json"))
    parser.add_argument("--set", type=Path, default=HERE / "answers")
    parser.add_argument(
        "--without", action="append", default=[], choices=sorted(answerer.MECHANISMS),
        help="replay with this mechanism of the answerer switched off (repeatable)",
    )  # fmt: skip
    parser.add_argument("--model", type=Path, help="an answerer model file (default: shipped)")
    parser.add_argument("--floor", type=float)
    parser.add_argument("--other-floor", type=float)
    parser.add_argument("--signals", type=Path, help="write every unit's signals and label")
    parser.add_argument(
        "--cross-fitted", type=Path, metavar="DIR",
        help="answer each development question with the model fitted without its document "
        "(fit_answerer.py --cross-fit DIR): out-of-sample development figures",
    )  # fmt: skip
    parser.add_argument(
        "--from-spans", action="store_true",
        help="score sources with the re-ranker's answer spans, reading nothing "
        "(LECTERN_GATEWAY_OFFLINE_ANSWERER_FROM_SPANS=true)",
    )  # fmt: skip
    parser.add_argument("--no-reader", dest="reads", action="store_false",
                        help="replay the answerer without the reader (its own model)")  # fmt: skip
    parser.add_argument(
        "--read-at-most", type=int, default=answerer.READ_AT_MOST,
        help="the units the answerer reads at most (0: all; default the answerer's)",
    )  # fmt: skip
    parser.add_argument(
        "--read-first", type=int, default=answerer.READ_FIRST or 0,
        help="of those, the units read first; the rest only when none reads as an answer "
        "(0: all at once; default the answerer's)",
    )  # fmt: skip
    parser.add_argument(
        "--read-enough", type=float, default=answerer.READ_ENOUGH_LOGIT,
        help="the reader's logit at which one of the first units reads as an answer",
    )  # fmt: skip
    parser.add_argument(
        "--margin", type=float,
        help="refuse, as chat.decision does, a question none of whose sources' answer spans "
        "beats its null score by this (bench/fit_margin.py; default: none)",
    )  # fmt: skip
    parser.add_argument(
        "--reader", type=Path,
        help="the answerer reads with this reader folder (default: the packaged 6-layer one)",
    )  # fmt: skip
    parser.add_argument("--out", type=Path, help="write every replayed question as JSON")
    parser.add_argument(
        "--reader-logits", metavar="FILE:KEY",
        help="the reader's logits of the pairs FILE's KEY holds taken from there, not the "
        "packaged reader (bench/dev_reader.py writes them)",
    )  # fmt: skip
    args = parser.parse_args()
    if args.reader_logits:
        path, key = args.reader_logits.rsplit(":", 1)
        CachedReader.overrides = json.loads(Path(path).read_text())[key]
    run = json.loads(args.json.read_text())
    model = answerer.AnswerModel.load(args.model) if args.model else None
    cross_fitted = None
    if args.cross_fitted is not None:
        cross_fitted = {
            json.loads(p.read_text())["group"]: answerer.AnswerModel.load(p)
            for p in sorted(args.cross_fitted.glob("*.json"))
        }
    replayed = asyncio.run(
        replay(run, args.set, without=args.without, signals_out=args.signals,
               floor=args.floor, other_floor=args.other_floor, model=model, reads=args.reads,
               read_at_most=args.read_at_most or None, cross_fitted=cross_fitted,
               margin=args.margin, from_spans=args.from_spans, reader_folder=args.reader,
               read_first=args.read_first or None, read_enough=args.read_enough)
    )  # fmt: skip
    splits = [s for s in ("dev", "test") if any(r.split == s for r in replayed)]
    figures = {s: summary(replayed, s) for s in splits}
    print(f"{'':28}" + "".join(f"{s:>10}" for s in splits))
    for key in next(iter(figures.values())):
        print(f"{key:28}" + "".join(f"{figures[s][key]:>10.3f}" for s in splits))
    kinds = {s: by_kind(replayed, s) for s in splits}
    for kind in sorted({k for s in splits for k in kinds[s]}):
        cells = [kinds[s].get(kind) for s in splits]
        print(f"  {kind:26}" + "".join(f"{c[1]:>6.2f} {c[2]:>5.2f} ({c[0]:>2})" if c
                                         else f"{'-':>17}" for c in cells))  # fmt: skip
    if args.out:
        args.out.write_text(json.dumps([r.__dict__ for r in replayed], indent=1))
    print(json.dumps({"replay": figures, "without": args.without}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
