"""``lectern eval --dataset DIR``: retrieval quality on a BEIR-format dataset."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

METHOD_CHOICES = ("dense", "sparse", "hybrid", "hybrid+rerank")


def register(subparsers: Any) -> None:
    """Add ``eval``."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "eval",
        help="evaluate retrieval on a BEIR-format dataset (nDCG@10, recall, MRR, latency)",
        description=(
            "Load DIR (corpus.jsonl, queries.jsonl, qrels/test.tsv) into a fresh tenant, ask "
            "the retriever (and the re-ranker, when one answers) over NATS, and report per "
            "document nDCG@10, Recall@5/10/100 and MRR@10 for each method, with p50/p95 "
            "latency per stage. Documents go through the gateway (HTTP) and the ingest "
            "service; questions over NATS. Uses the stack of --data-dir (from `lectern up`) "
            "or --gateway-url + --nats-url + --database-url (tokens signed with "
            "LECTERN_JWT_SECRET); without them it starts the embedded stack (the five "
            "services as processes) in a temporary directory."
        ),
    )
    parser.add_argument("--dataset", type=Path, required=True, metavar="DIR")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--limit-queries", type=int, default=None, metavar="N")
    parser.add_argument(
        "--query-split", choices=("all", "held-out", "train"), default="all",
        help="only the questions held out from every fit (one in five, by a hash of the "
        "question id: what the reader and the re-ranker's weights never saw), or the others",
    )  # fmt: skip
    parser.add_argument(
        "--methods", default=",".join(METHOD_CHOICES),
        help=f"comma-separated subset of {','.join(METHOD_CHOICES)} (default all)",
    )  # fmt: skip
    parser.add_argument("--concurrency", type=int, default=4, help="queries in flight (4)")
    parser.add_argument(
        "--offtopic", type=Path, metavar="FILE",
        help="questions the corpus cannot answer, one per line: their confidence bands are "
        "reported next to the dataset's (needs the re-ranker)",
    )  # fmt: skip
    parser.add_argument("--data-dir", type=Path, help="a running `lectern up` stack's data dir")
    parser.add_argument("--gateway-url", default=os.environ.get("LECTERN_EVAL_GATEWAY_URL"))
    parser.add_argument("--nats-url", default=os.environ.get("LECTERN_EVAL_NATS_URL"))
    parser.add_argument("--database-url", default=os.environ.get("LECTERN_EVAL_DATABASE_URL"))
    parser.set_defaults(func=run)


def _running_system(args: argparse.Namespace) -> dict[str, str | None]:
    """The running system to evaluate (all None: start the embedded stack)."""
    from lectern_common.errors import ConfigurationError
    from lectern_common.tokens import signing_secret

    secret = signing_secret(os.environ)
    if args.data_dir is None:
        given = {"gateway_url": args.gateway_url, "nats_url": args.nats_url,
                 "database_url": args.database_url}  # fmt: skip
        if any(given.values()) and not all(given.values()):
            raise ConfigurationError(
                "give --gateway-url, --nats-url and --database-url together (or --data-dir)"
            )
        return {**given, "secret": secret if any(given.values()) else None}
    from lectern_cli.runtime.state import read_state, stack_nats_url

    state = read_state(args.data_dir)
    if not state or not state.get("running"):
        raise ConfigurationError(f"no running stack in {args.data_dir} (start `lectern up`)")
    return {
        "gateway_url": state["gateway_url"],
        "secret": secret,
        "nats_url": stack_nats_url(state),
        "database_url": state["postgres"]["dsn"],
    }


def format_table(result: dict[str, Any]) -> str:
    """A human-readable summary of an evaluation result."""
    lines = [f"{result['dataset']}: {result['queries']} queries, {result['documents']} documents"]
    if result.get("load_seconds") is not None:
        lines[0] += f" (loaded in {result['load_seconds']} s)"
    metrics = ("ndcg@10", "recall@5", "recall@10", "recall@100", "mrr@10")
    lines.append(f"{'method':<15}" + "".join(f"{m:>12}" for m in metrics))
    for method, values in result["methods"].items():
        lines.append(f"{method:<15}" + "".join(f"{values[m]:>12.4f}" for m in metrics))
    lines.append(f"{'stage':<15}{'p50 ms':>12}{'p95 ms':>12}")
    for stage, values in result["latency_ms"].items():
        lines.append(f"{stage:<15}{values['p50']:>12.2f}{values['p95']:>12.2f}")
    for kind, shares in (result.get("bands") or {}).items():
        parts = ", ".join(f"{band} {share:.1%}" for band, share in shares.items())
        lines.append(f"bands {kind:<10} {parts}")
    lines += [f"note: {n}" for n in result.get("notes", [])]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """Run the evaluation and print the result."""
    import logging

    from lectern_cli.runtime.embedded import embedded_system
    from lectern_common.broker import BROKER_LOGGER
    from lectern_eval.retrieval import DatasetError, evaluate, load_beir

    for name in ("faststream", BROKER_LOGGER):  # subscribers starting and stopping
        logging.getLogger(name).setLevel(logging.WARNING)
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    unknown = [m for m in methods if m not in METHOD_CHOICES]
    if unknown:
        print(f"lectern eval: unknown methods {unknown}", file=sys.stderr)
        return 2
    system = _running_system(args)
    offtopic: list[str] = []
    try:  # clear messages before anything starts
        dataset = load_beir(args.dataset)
        if args.offtopic is not None:
            lines = args.offtopic.read_text(encoding="utf-8").splitlines()
            offtopic = [line.strip() for line in lines if line.strip()]
    except (DatasetError, OSError, UnicodeDecodeError) as exc:
        print(f"lectern eval: {exc}", file=sys.stderr)
        return 2

    def progress(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    # service logs (FastStream writes to stdout) must not mix into the result: send file
    # descriptor 1 to stderr while the stack runs
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        result = asyncio.run(
            evaluate(
                dataset_dir=args.dataset,
                dataset=dataset,
                **system,
                methods=methods,
                limit_queries=args.limit_queries,
                split=args.query_split,
                concurrency=args.concurrency,
                progress=progress,
                offtopic=offtopic,
                start_stack=embedded_system,
            )
        ).to_json()
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)
    print(json.dumps(result) if args.json else format_table(result))
    return 0
