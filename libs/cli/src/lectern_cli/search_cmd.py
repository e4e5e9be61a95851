"""``lectern search "..."``: hybrid search through the gateway's POST /v1/search."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from lectern_cli.ask_cmd import DEFAULT_URL, add_connection


def register(subparsers: Any) -> None:
    """Add ``search``."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "search",
        help="search the indexed material (hybrid dense + BM25) through the gateway",
        description="Ask POST /v1/search and print the candidates best first.",
    )
    parser.add_argument("query")
    parser.add_argument("--k", type=int, default=10, help="candidates (10)")
    parser.add_argument("--subject")
    parser.add_argument("--grade", type=int, help="grade level")
    parser.add_argument("--grade-within-one", action="store_true", help="accept grade +/- 1")
    parser.add_argument("--module", help="module tag")
    parser.add_argument("--class-id")
    parser.add_argument("--language")
    parser.add_argument("--content-type", action="append", help="repeatable")
    parser.add_argument("--collection", action="append", choices=("educational", "assessment"))
    parser.add_argument("--method", choices=("hybrid", "dense", "sparse"), default="hybrid")
    parser.add_argument("--json", action="store_true", help="print the response JSON")
    add_connection(parser)
    parser.add_argument("--timeout", type=float, default=30.0)
    parser.set_defaults(func=run)


def request_body(args: argparse.Namespace) -> dict[str, Any]:
    """The JSON body of POST /v1/search for these arguments."""
    filters: dict[str, Any] = {
        "subject": args.subject, "grade_level": args.grade, "module_tag": args.module,
        "class_id": args.class_id, "language": args.language,
        "content_types": args.content_type, "collections": args.collection,
    }  # fmt: skip
    filters = {k: v for k, v in filters.items() if v is not None}
    if args.grade_within_one:
        filters["grade_within_one"] = True
    methods = {"hybrid": ["dense", "sparse"], "dense": ["dense"], "sparse": ["sparse"]}
    return {"query": args.query, "k": args.k, "filters": filters, "methods": methods[args.method]}


def format_results(body: dict[str, Any]) -> str:
    """Candidates as numbered lines with their scores and a text excerpt."""
    lines = []
    for number, c in enumerate(body.get("candidates", []), start=1):
        where = " ".join(
            part for part in (
                c.get("section_path") or "",
                f"p.{c['page_start']}" if c.get("page_start") else "",
            ) if part
        )  # fmt: skip
        ranks = f"dense #{c.get('dense_rank') or '-'} sparse #{c.get('sparse_rank') or '-'}"
        lines.append(f"{number:>2}. {c['title']} {where}".rstrip())
        lines.append(f"    score {c['fused_score']:.4f} ({ranks})  chunk {c['chunk_id']}")
        excerpt = " ".join(c["text"].split())[:200]
        lines.append(f"    {excerpt}")
    timings = body.get("timings_ms") or {}
    if timings:
        lines.append("timings: " + ", ".join(f"{k} {v:.1f} ms" for k, v in timings.items()))
    return "\n".join(lines) if lines else "no results"


def run(args: argparse.Namespace) -> int:
    """Call the gateway and print the results."""
    from lectern_client import LecternClient, LecternError

    url = (args.url or os.environ.get("LECTERN_GATEWAY_URL") or DEFAULT_URL).rstrip("/")
    token = args.token or os.environ.get("LECTERN_TOKEN")
    if not token:
        print("lectern search: a token is needed (--token or $LECTERN_TOKEN)", file=sys.stderr)
        return 2
    try:
        with LecternClient(url, token, timeout=args.timeout) as lectern:
            # the response's JSON as the gateway wrote it (--json prints it unchanged)
            body = lectern.request("POST", "/v1/search", json=request_body(args))
    except LecternError as exc:
        detail = exc.detail if exc.status == 0 else exc.text[:500]
        print(f"lectern search: {exc.status} {detail}", file=sys.stderr)
        return 1
    print(json.dumps(body, indent=2) if args.json else format_results(body))
    return 0
