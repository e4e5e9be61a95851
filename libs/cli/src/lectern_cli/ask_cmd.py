"""``lectern ask "..."``: ask the tutor and stream its answer to the terminal."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from typing import Any, TextIO

DEFAULT_URL = "http://127.0.0.1:8000"


def register(subparsers: Any) -> None:
    """Add ``ask``."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "ask",
        help="ask a question and stream the cited answer",
        description=(
            "Ask the tutor a question in a session (a new one unless --session is given) and "
            "print the answer as it streams, then its sources, citations and confidence."
        ),
    )
    parser.add_argument("question", help="the question")
    parser.add_argument("--session", help="session id to continue (default: a new session)")
    parser.add_argument("--mode", choices=("chat", "tutor"), default="chat")
    parser.add_argument("--subject", help="subject filter of a new session")
    add_connection(parser)
    parser.add_argument("--json", action="store_true", help="print every event as JSON lines")
    parser.set_defaults(func=run)


def _format_source(source: dict[str, Any]) -> str:
    where = []
    if source.get("page_start") is not None:
        end = source.get("page_end")
        pages = (
            source["page_start"]
            if end in (None, source["page_start"])
            else f"{source['page_start']}-{end}"
        )
        where.append(f"p. {pages}")
    if source.get("section"):
        where.append(str(source["section"]))
    suffix = f" ({', '.join(where)})" if where else ""
    return f"  [{source['label']}] {source['title']}{suffix}"


async def ask(
    *,
    url: str,
    token: str,
    question: str,
    session_id: str | None,
    mode: str,
    subject: str | None,
    out: TextIO,
    as_json: bool = False,
) -> int:
    """Stream one answer to ``out``; returns the exit code."""
    from lectern_client import (
        AsyncLecternClient,
        DoneEvent,
        ErrorEvent,
        LecternError,
        RateLimited,
        SourcesEvent,
        TokenEvent,
    )

    sources: list[dict[str, Any]] = []
    done: DoneEvent | None = None
    async with AsyncLecternClient(url, token, timeout=30.0) as lectern:
        try:
            if session_id is None:
                created = await lectern.create_session(mode=mode, subject=subject)
                session_id = str(created.id)
        except LecternError as exc:
            print(f"lectern ask: {problem_text(exc)}", file=sys.stderr)
            return 1
        stream = lectern.ask(session_id, question)
        try:
            async for event in stream:
                if as_json:
                    print(stream.last_data, file=out, flush=True)
                    continue
                if isinstance(event, SourcesEvent):
                    sources = [s.model_dump(mode="json") for s in event.sources]
                elif isinstance(event, TokenEvent):
                    out.write(event.text)
                    out.flush()
                elif isinstance(event, ErrorEvent):
                    print(f"\nlectern ask: {event.message} ({event.reason})", file=sys.stderr)
                    return 1
                elif isinstance(event, DoneEvent):
                    done = event
        except LecternError as exc:
            print(f"lectern ask: {problem_text(exc)}", file=sys.stderr)
            return 2 if isinstance(exc, RateLimited) else 1
    if as_json or done is None:
        return 0 if as_json or done else 1
    out.write("\n\n")
    cited = {c.label for c in done.citations}
    used = [s for s in sources if s["label"] in cited] or sources
    if used:
        out.write("Sources:\n" + "\n".join(_format_source(s) for s in used) + "\n")
    web = {c.label: c for c in done.citations if c.kind == "web"}
    for label, c in web.items():
        out.write(f"  [{label}] {c.title or ''} {c.url or ''}\n")
    if done.unsupported:
        out.write(f"Unsupported citations: {', '.join(done.unsupported)}\n")
    out.write(
        f"Confidence: {done.band} ({done.confidence:.2f}), answered by "
        f"{done.answered_by}; session {session_id}\n"
    )
    return 0


def problem_text(problem: Any) -> str:
    """A problem (a ``LecternError``, or a problem+json response) as one line (status, title,
    detail) for the terminal."""
    from lectern_client import LecternError

    if isinstance(problem, LecternError):
        if problem.status == 0:
            return str(problem.detail)
        if isinstance(problem.body, dict):
            return f"{problem.status} {problem.body.get('title')}: {problem.body.get('detail')}"
        return f"{problem.status} {problem.text[:200]}"
    try:
        body = problem.json()
        return f"{problem.status_code} {body.get('title')}: {body.get('detail')}"
    except ValueError:
        return f"{problem.status_code} {problem.text[:200]}"


def add_connection(parser: argparse.ArgumentParser) -> None:
    """``--token`` and ``--url`` of a command that talks to the gateway."""
    parser.add_argument("--token", help="bearer token (default: $LECTERN_TOKEN)")
    parser.add_argument(
        "--url", help=f"gateway URL (default: $LECTERN_GATEWAY_URL or {DEFAULT_URL})"
    )


def credentials(args: argparse.Namespace, command: str) -> tuple[str, str] | None:
    """(gateway URL, token) from the options or the environment; None (said) without one."""
    token = args.token or os.environ.get("LECTERN_TOKEN")
    if not token:
        print(f"lectern {command}: give --token or set LECTERN_TOKEN (see `lectern token`)",
              file=sys.stderr)  # fmt: skip
        return None
    return args.url or os.environ.get("LECTERN_GATEWAY_URL") or DEFAULT_URL, token


def run(args: argparse.Namespace) -> int:
    """Entry of ``lectern ask``."""
    found = credentials(args, "ask")
    if found is None:
        return 1
    url, token = found
    return asyncio.run(
        ask(
            url=url,
            token=token,
            question=args.question,
            session_id=args.session,
            mode=args.mode,
            subject=args.subject,
            out=sys.stdout,
            as_json=args.json,
        )
    )
