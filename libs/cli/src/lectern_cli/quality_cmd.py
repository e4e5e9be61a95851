"""``lectern quality``: the quality dashboard's figures in the terminal (staff)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from datetime import UTC, datetime, timedelta
from typing import Any, TextIO

from lectern_cli.ask_cmd import add_connection, credentials, problem_text


def register(subparsers: Any) -> None:
    """Add ``quality``."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "quality",
        help="answer quality per day and per persona or subject (teachers and admins)",
        description=(
            "Questions, answers by confidence band, knowledge-gap rate, flagged answers, "
            "citation use, fallbacks and latency percentiles per day, then the top gap "
            "topics and the most- and never-cited documents (GET /v1/metrics/quality)."
        ),
    )
    parser.add_argument("--days", type=int, default=14, help="how many days back (default 14)")
    parser.add_argument("--by", choices=("persona", "subject", "none"), default="persona")
    add_connection(parser)
    parser.set_defaults(func=run)


async def quality(*, url: str, token: str, out: TextIO, days: int, by: str) -> int:
    """Print the dashboard; 0 on success."""
    from lectern_client import AsyncLecternClient, LecternError

    end = datetime.now(UTC).date()
    params = {"from": str(end - timedelta(days=max(1, days) - 1)), "to": str(end), "group_by": by}
    async with AsyncLecternClient(url, token, timeout=60) as lectern:
        try:
            data = await lectern.request("GET", "/v1/metrics/quality", params=params)
        except LecternError as exc:
            print(f"lectern quality: {problem_text(exc)}", file=sys.stderr)
            return 1
    out.write(f"{'day':<10} {'group':<16} {'asked':>5} {'high':>5} {'med':>4} {'low':>4} "
              f"{'gap':>4} {'flag':>4} {'cited':>6} {'ttft p95':>9}\n")  # fmt: skip
    for row in [*data["series"], {**data["totals"], "day": "total", "group": ""}]:
        answers = row["answers"]
        p95 = row["ttft_ms"]["p95"]
        out.write(
            f"{row['day']:<10} {row['group'] or '-':<16} {row['questions']:>5} "
            f"{answers['high']:>5} {answers['medium']:>4} {answers['low']:>4} "
            f"{answers['gap']:>4} {row['flagged']:>4} {row['with_citations']:>6.0%} "
            f"{'-' if p95 is None else f'{p95:.0f} ms':>9}\n"
        )
    gaps = ", ".join(f"{g['topic']} ({g['questions']})" for g in data["top_gap_topics"])
    out.write(f"top gap topics: {gaps or 'none'}\n")
    cited = ", ".join(f"{d['title']} ({d['citations']})" for d in data["most_cited"])
    out.write(f"most cited: {cited or 'none'}\n")
    out.write(f"never cited: {', '.join(d['title'] for d in data['never_cited']) or 'none'}\n")
    backlog = data["ingest_backlog"]
    out.write(f"ingest backlog: {backlog['pending']} pending, {backlog['processing']} processing\n")
    return 0


def run(args: argparse.Namespace) -> int:
    """Entry of ``lectern quality``."""
    found = credentials(args, "quality")
    if found is None:
        return 1
    url, token = found
    return asyncio.run(quality(url=url, token=token, out=sys.stdout, days=args.days, by=args.by))
