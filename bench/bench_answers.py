"""Answer quality on real course documents, through the product's default path.

Starts the embedded stack (NATS, Postgres, the five services as processes), uploads the
documents of the question set ``bench/answers`` (its ``dev`` and ``test`` splits, split by
document) from ../shared/data through the gateway into one library, asks every question as a
student over SSE with chat's default settings, and prints gold-page recall of the context,
key-fact recall, citations on the gold page, citation precision and refusals (answerable and
off-topic), per document and per kind, then dev and test side by side with the test split's
SHA-256. ``--url`` measures a running gateway instead.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from lectern_cli.main import main

HERE = Path(__file__).resolve().parent
DOCS = HERE.parent.parent / "shared" / "data"


def cli() -> int:
    """Run ``lectern eval-answers`` on the development set."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--set", type=Path, default=HERE / "answers")
    parser.add_argument("--documents", type=Path, default=DOCS)
    parser.add_argument("--json", type=Path, default=Path("/tmp/lectern-bench-answers.json"))
    parser.add_argument("--url")
    args = parser.parse_args()
    if not args.documents.is_dir():
        print(f"bench-answers: needs the shared documents at {args.documents}", file=sys.stderr)
        return 2
    argv = ["eval-answers", "--set", str(args.set), "--documents", str(args.documents),
            "--json", str(args.json)]  # fmt: skip
    if args.url:
        argv += ["--url", args.url]
    return main(argv)


if __name__ == "__main__":
    sys.exit(cli())
