"""The reader's span and no-answer heads, on data held out from its training, with the
published anchors beside them.

    python bench/bench_spans.py [--reader DIR]      # part of make bench-reader

- **SQuAD** (the held-out articles, every eighth by title, ``reading_data.squad_titles_held_out``):
  v1.1 questions read with their paragraph: exact match and F1 of the best span (SQuAD's
  official normalisation, the best over the annotators' answers), and has-answer accuracy
  (the span beats "no answer" by the margin); v2.0's unanswerable questions of the same
  articles: no-answer accuracy (the margin says none). The margin is chat's
  (``chat.decision.ANSWER_MARGIN``) when chat refuses on one, else SQuAD 2.0's own 0 (the
  best span beats "no answer"), unless ``--margin``; the margin's AUC says how well it tells
  the two apart at any threshold.
- **FairytaleQA** (its test stories): each question read with its section(s): ROUGE-L F1 of
  the extracted span against the answers (the FairytaleQA paper's BART-large QA model:
  0.536), and the answer sentence's top-1 (the sentence holding the span is the section's
  sentence closest to an answer by ROUGE-L).
- **WikiTableQuestions** (tables never seen in training), questions whose answer is one cell:
  every row of the table read as the answerer reads a row ("header: cell; ..."); the span of
  the row whose span beats its null score most must be the cell (TAPAS: 0.488 on all WTQ
  questions, aggregation included).

Reads run as the services run them: the int8 ONNX graph, one pair at a time. Prints a
table, then one JSON line.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import string
import sys
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import reading_data

from lectern_common import reading
from lectern_common.text import split_sentences
from lectern_gateway.chat.decision import ANSWER_MARGIN

#: the margin has-answer and no-answer accuracy are judged at: chat's, or 0 where chat
#: refuses on none (its default)
JUDGED_MARGIN = ANSWER_MARGIN if ANSWER_MARGIN is not None else 0.0

ANCHORS = {"fairytale_rouge_l": 0.536, "wtq_accuracy_tapas": 0.488}


def normalise(text: str) -> list[str]:
    """SQuAD's answer normalisation (lower case, no punctuation, no articles), as words."""
    text = "".join(c for c in text.casefold() if c not in set(string.punctuation))
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return text.split()


def f1(prediction: str, answer: str) -> float:
    """SQuAD's word-overlap F1."""
    p, a = normalise(prediction), normalise(answer)
    common = sum((Counter(p) & Counter(a)).values())
    if not p or not a or not common:
        return float(p == a)
    precision, recall = common / len(p), common / len(a)
    return 2 * precision * recall / (precision + recall)


def rouge_l(prediction: str, answer: str) -> float:
    """ROUGE-L F1: the longest common subsequence of the two texts' words."""
    p, a = normalise(prediction), normalise(answer)
    if not p or not a:
        return 0.0
    previous = [0] * (len(a) + 1)
    for word in p:
        current = [0]
        for j, other in enumerate(a):
            current.append(previous[j] + 1 if word == other else max(previous[j + 1], current[j]))
        previous = current
    lcs = previous[-1]
    if not lcs:
        return 0.0
    precision, recall = lcs / len(p), lcs / len(a)
    return 2 * precision * recall / (precision + recall)


def best(score: Any, prediction: str, answers: Iterable[str]) -> float:
    return max((score(prediction, a) for a in answers), default=0.0)


def _span(text: str, found: reading.Reading) -> str:
    if found.start is None or found.end is None:
        return ""
    return text[found.start : found.end]


def squad(reader: reading.Reader, margin: float, limit: int) -> dict[str, Any]:
    rows = reading_data._rows(reading_data.READING / "squad-v1.1-dev.jsonl")
    held = reading_data.squad_titles_held_out(r["title"] for r in rows)
    answerable = [r for r in rows if r["title"] in held][:limit]
    v2 = reading_data._rows(reading_data.READING / "squad-v2.0-dev-unanswerable.jsonl")
    unanswerable = [r for r in v2 if r["title"] in held][:limit]
    exact = overlap = has = 0.0
    margins: list[tuple[float, int]] = []
    for row in answerable:
        (found,) = reader.read(row["question"], [row["context"]], kind="passage")
        predicted = _span(row["context"], found)
        exact += best(lambda p, a: float(normalise(p) == normalise(a)), predicted, row["answers"])
        overlap += best(f1, predicted, row["answers"])
        has += float((found.margin or 0.0) > margin)
        margins.append((found.margin or 0.0, 1))
    none = 0.0
    for row in unanswerable:
        (found,) = reader.read(row["question"], [row["context"]], kind="passage")
        none += float((found.margin or 0.0) <= margin)
        margins.append((found.margin or 0.0, 0))
    n, m = max(1, len(answerable)), max(1, len(unanswerable))
    return {
        "questions": len(answerable), "unanswerable": len(unanswerable),
        "exact_match": round(exact / n, 3), "f1": round(overlap / n, 3),
        "has_answer_accuracy": round(has / n, 3), "no_answer_accuracy": round(none / m, 3),
        "margin": margin, "no_answer_auc": round(auc(margins), 3),
    }  # fmt: skip


def auc(scored: Sequence[tuple[float, int]]) -> float:
    """The chance that an answerable question's margin beats an unanswerable one's (ties
    half): how well the margin tells them apart at any threshold."""
    positives = [m for m, y in scored if y]
    negatives = [m for m, y in scored if not y]
    if not positives or not negatives:
        return 0.0
    wins = sum((p > q) + 0.5 * (p == q) for p in positives for q in negatives)
    return wins / (len(positives) * len(negatives))


def fairytale(reader: reading.Reader, limit: int) -> dict[str, Any]:
    stories = {
        r["story"]: r["sections"]
        for r in reading_data._rows(reading_data.READING / "fairytaleqa-stories.jsonl")
    }
    rows = [
        r for r in reading_data._rows(reading_data.READING / "fairytaleqa.jsonl")
        if r["split"] == "test"
    ]  # fmt: skip
    random.Random(7).shuffle(rows)
    rows = rows[:limit]
    score = sentence_hits = 0.0
    by_type: dict[str, list[float]] = {}
    for row in rows:
        sections = stories[row["story"]]
        text = "\n".join(sections[i - 1] for i in row["sections"] if 0 < i <= len(sections))
        (found,) = reader.read(row["question"], [text], kind="passage")
        predicted = _span(text, found)
        value = best(rouge_l, predicted, row["answers"])
        score += value
        by_type.setdefault(row["type"], []).append(value)
        sentences = split_sentences(text) or [text]
        closest = max(sentences, key=lambda s: best(rouge_l, s, row["answers"]))
        holding = next((s for s in sentences if predicted and predicted in s), "")
        sentence_hits += float(holding == closest)
    n = max(1, len(rows))
    return {
        "questions": len(rows), "rouge_l": round(score / n, 3),
        "answer_sentence_top1": round(sentence_hits / n, 3),
        "rouge_l_by_type": {k: round(sum(v) / len(v), 3) for k, v in sorted(by_type.items())},
    }  # fmt: skip


def wikitables(reader: reading.Reader, limit: int) -> dict[str, Any]:
    groups = reading_data.wikitables(random.Random(7), "test", questions=limit, negatives=10**6)
    hits = row_hits = logit_hits = 0
    for group in groups:
        readings = reader.read(group.question, group.texts, kind="sentence")
        chosen = max(range(len(readings)), key=lambda i: readings[i].margin or -1e9)
        logit_hits += int(max(range(len(readings)), key=lambda i: readings[i].logit) == 0)
        gold = group.spans[0] if group.spans else None
        assert gold is not None
        row_hits += int(chosen == 0)
        found = readings[chosen]
        predicted = _span(group.texts[chosen], found)
        hits += int(normalise(predicted) == normalise(group.texts[0][gold[0] : gold[1]]))
    n = max(1, len(groups))
    return {"questions": len(groups), "cell_accuracy": round(hits / n, 3),
            "row_top1": round(row_hits / n, 3),
            "row_top1_by_relevance": round(logit_hits / n, 3)}  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--reader", type=Path, default=reading.PACKAGED_L3_SPANS,
        help="a reader folder with a span head (default: the packaged reader_l3_spans)",
    )  # fmt: skip
    parser.add_argument(
        "--margin", type=float, default=JUDGED_MARGIN,
        help="the margin has-answer and no-answer are judged at (default: chat's, "
        f"LECTERN_GATEWAY_ANSWER_MARGIN's default {ANSWER_MARGIN}, else 0)",
    )  # fmt: skip
    parser.add_argument("--limit", type=int, default=1000, help="questions per set at most")
    args = parser.parse_args(argv)
    if not reading_data.READING.is_dir():
        print(f"bench-spans: needs the reading sets at {reading_data.READING}", file=sys.stderr)
        return 2
    reader = reading.Reader.load(args.reader)
    if not reader.spans:
        print(f"bench-spans: {args.reader} has no span head", file=sys.stderr)
        return 2
    started = time.monotonic()
    s = squad(reader, args.margin, args.limit)
    f = fairytale(reader, args.limit)
    w = wikitables(reader, args.limit)
    print(f"reader {reader.name} ({time.monotonic() - started:.0f} s)")
    print(f"SQuAD held-out articles ({s['questions']} + {s['unanswerable']} unanswerable): "
          f"EM {s['exact_match']:.3f}, F1 {s['f1']:.3f}, "
          f"has-answer {s['has_answer_accuracy']:.3f}, "
          f"no-answer {s['no_answer_accuracy']:.3f} at margin {s['margin']:g}, "
          f"margin AUC {s['no_answer_auc']:.3f}")  # fmt: skip
    print(f"FairytaleQA test ({f['questions']}): ROUGE-L F1 {f['rouge_l']:.3f} "
          f"(BART-large QA 0.536), "
          f"answer sentence top-1 {f['answer_sentence_top1']:.3f}")  # fmt: skip
    print(f"WikiTableQuestions unseen tables ({w['questions']} one-cell questions): cell "
          f"accuracy {w['cell_accuracy']:.3f} (TAPAS 0.488 on all), "
          f"row top-1 {w['row_top1']:.3f} "
          f"(by relevance {w['row_top1_by_relevance']:.3f})")  # fmt: skip
    out = {
        "reader": reader.name, "squad_held_out": s, "fairytaleqa_test": f,
        "wikitablequestions_unseen": w, "anchors": ANCHORS,
    }  # fmt: skip
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
