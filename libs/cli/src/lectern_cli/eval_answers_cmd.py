"""``lectern eval-answers``: answer quality through upload, ingest and chat (SSE)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from lectern_cli.eval_run import add_where_options


def register(subparsers: Any) -> None:
    """Add ``eval-answers``."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "eval-answers",
        help="answer quality of chat on real documents (context recall, key facts, citations)",
        description=(
            "Upload every document named by the question file (JSON Lines: id, document, "
            "question, kind, pages, evidence, facts, follow_up_to) into a fresh tenant through "
            "the gateway, wait for ingest, ask each question as a student over SSE with chat's "
            "default settings, and report gold-page recall of the context, key-fact recall of "
            "the answers, citation precision, and the share refused (answerable and off-topic). "
            "Uses the gateway at --url, or starts the embedded stack in a temporary directory."
        ),
    )
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument(
        "--set", type=Path, metavar="DIR",
        help="a question set split by document: DIR/dev and DIR/test, each with questions.jsonl "
        "and offtopic.jsonl; both are asked in one library and reported side by side, with the "
        "test split's SHA-256 checked against DIR/FROZEN",
    )  # fmt: skip
    which.add_argument("--questions", type=Path, metavar="FILE", help="one question file")
    parser.add_argument("--offtopic", type=Path, metavar="FILE", help="questions to refuse")
    add_where_options(parser, owners="questions")
    parser.add_argument(
        "--tenant",
        help="tenant to upload into (default: a fresh one); with a kept --data-dir, a second "
        "run finds its documents already indexed and only asks",
    )
    parser.add_argument("--concurrency", type=int, default=2, help="sessions in flight (2)")
    parser.add_argument("--json", type=Path, metavar="FILE", help="write every result as JSON")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run the evaluation; exit 2 on a bad question file."""
    from lectern_cli.eval_run import frozen_note, on_gateway, report
    from lectern_eval.answer_set import (
        DatasetError,
        Split,
        frozen_hash,
        load_offtopic,
        load_questions,
        load_set,
    )
    from lectern_eval.answers import (
        AnswerEval,
        format_report,
        format_side_by_side,
        split_reports,
    )

    splits: list[Split] = []
    try:
        if args.set is not None:
            splits = load_set(args.set)
            questions = [q for s in splits for q in s.questions]
            offtopic = [q for s in splits for q in s.offtopic]
        else:
            questions = load_questions(args.questions)
            offtopic = load_offtopic(args.offtopic) if args.offtopic else []
    except DatasetError as exc:
        print(f"lectern eval-answers: {exc}", file=sys.stderr)
        return 2
    hashes = []
    for split in splits:
        line = f"{split.name} split: {len(split.questions)} questions over "
        line += f"{len(split.documents)} documents, {len(split.offtopic)} off-topic; "
        line += f"sha256 {split.sha256}"
        if split.name == "test":
            line += frozen_note(split.sha256, frozen_hash(args.set))
        hashes.append(line)
        print(line, file=sys.stderr)
    if not args.documents.is_dir():
        print(f"lectern eval-answers: no folder {args.documents}", file=sys.stderr)
        return 2

    async def evaluate(url: str, secret: str) -> Any:
        runner = AnswerEval(
            gateway_url=url, secret=secret, documents_dir=args.documents,
            tenant=args.tenant, concurrency=args.concurrency, report=report,
        )  # fmt: skip
        return await runner.run(questions, offtopic)

    ran, result = on_gateway("eval-answers", args.url, args.data_dir, evaluate)
    if not ran:
        return 2
    print(format_report(result))
    out = result.to_json()
    if splits:
        parts = split_reports(
            result,
            [(s.name, s.ids) for s in splits],
        )
        print("\n" + "\n".join(hashes))
        print(format_side_by_side(parts))
        out["splits"] = {
            s.name: {"sha256": s.sha256, **parts[s.name].to_json()["summary"]} for s in splits
        }
        out["splits_by_kind"] = {name: part.by_kind for name, part in parts.items()}
    if args.json:
        args.json.write_text(json.dumps(out, indent=1, default=str))
    return 0
