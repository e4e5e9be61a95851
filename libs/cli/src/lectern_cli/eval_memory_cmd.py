"""``lectern eval-memory``: the tutor's memory of scripted students, through the services."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from lectern_cli.eval_run import add_where_options


def register(subparsers: Any) -> None:
    """Add ``eval-memory``."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "eval-memory",
        help="is the tutor's memory right about the student (struggles, mastered topics)",
        description=(
            "Play the scripted students of a set split by document (DIR/dev and DIR/test, "
            "each with students.jsonl: tutor sessions of questions, statements, replies to "
            "check questions, flags and quizzes) through the gateway, end their sessions, and "
            "compare the memories the memory service keeps with what a careful teacher would "
            "write: precision and recall of struggles and of mastered topics, memories per "
            "session, and leaks. Uses the gateway at --url, or starts the embedded stack."
        ),
    )
    parser.add_argument("--set", type=Path, default=Path("bench/memory"), metavar="DIR")
    add_where_options(parser, owners="students")
    parser.add_argument("--concurrency", type=int, default=2, help="students in flight (2)")
    parser.add_argument("--json", type=Path, metavar="FILE", help="write every result as JSON")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run the evaluation; exit 2 on a bad set."""
    from lectern_cli.eval_run import frozen_note, on_gateway, report
    from lectern_eval.answer_set import frozen_hash, split_hash
    from lectern_eval.memory import (
        DatasetError,
        MemoryEval,
        format_scores,
        load_students,
        score,
    )

    try:
        splits = [
            (name, load_students(args.set / name / "students.jsonl"))
            for name in ("dev", "test")
            if (args.set / name / "students.jsonl").is_file()
        ]
    except DatasetError as exc:
        print(f"lectern eval-memory: {exc}", file=sys.stderr)
        return 2
    if not splits:
        print(f"lectern eval-memory: no dev/ or test/ students in {args.set}", file=sys.stderr)
        return 2
    if not args.documents.is_dir():
        print(f"lectern eval-memory: no folder {args.documents}", file=sys.stderr)
        return 2
    hashes = []
    for name, students in splits:
        path = args.set / name / "students.jsonl"
        line = f"{name} split: {len(students)} students, "
        line += f"{sum(len(s.sessions) for s in students)} sessions; sha256 {split_hash([path])}"
        if name == "test":
            line += frozen_note(split_hash([path]), frozen_hash(args.set))
        hashes.append(line)
        print(line, file=sys.stderr)

    async def evaluate(url: str, secret: str) -> Any:
        runner = MemoryEval(
            gateway_url=url, secret=secret, documents_dir=args.documents,
            concurrency=args.concurrency, report=report,
        )  # fmt: skip
        return await runner.run(splits)

    ran, results = on_gateway("eval-memory", args.url, args.data_dir, evaluate)
    if not ran:
        return 2
    scores = {name: score([r for r in results if r.split == name]) for name, _ in splits}
    print("\n".join(hashes))
    print(format_scores(scores))
    if args.json:
        out = {
            "splits": {name: vars(s) for name, s in scores.items()},
            "students": [r.to_json() for r in results],
        }
        args.json.write_text(json.dumps(out, indent=1, default=str))
    return 0
