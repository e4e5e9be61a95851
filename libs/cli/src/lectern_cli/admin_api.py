"""What the CLI's admin commands over the gateway's API share (``lectern apikey``,
``lectern lti``): the common options, and one request that prints why it failed."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

DEFAULT_URL = "http://127.0.0.1:8000"

#: what :func:`call` answers when the request failed (after saying why)
FAILED = object()


def usage(parser: argparse.ArgumentParser) -> int:
    """A command given without its subcommand: its usage, exit 2."""
    parser.print_usage(sys.stderr)
    return 2


def add_common(parser: argparse.ArgumentParser) -> None:
    """The options every admin subcommand takes."""
    parser.add_argument("--json", action="store_true", help="print the response JSON")
    parser.add_argument("--token", help="an admin's bearer token (default: $LECTERN_TOKEN)")
    parser.add_argument(
        "--url", help=f"gateway URL (default: $LECTERN_GATEWAY_URL or {DEFAULT_URL})"
    )
    parser.add_argument("--timeout", type=float, default=30.0)


def call(command: str, args: argparse.Namespace, method: str, path: str, **kwargs: Any) -> Any:
    """Send the request of ``lectern COMMAND``; its JSON (None when empty), or FAILED after
    printing why."""
    from lectern_client import LecternClient, LecternError

    url = (args.url or os.environ.get("LECTERN_GATEWAY_URL") or DEFAULT_URL).rstrip("/")
    token = args.token or os.environ.get("LECTERN_TOKEN")
    if not token:
        print(f"lectern {command}: a token is needed (--token or $LECTERN_TOKEN)", file=sys.stderr)
        return FAILED
    try:
        with LecternClient(url, token, timeout=args.timeout) as lectern:
            return lectern.request(method, path, **kwargs)
    except LecternError as exc:
        print(f"lectern {command} {args.action}: {exc.status} {detail(exc)}", file=sys.stderr)
        return FAILED


def detail(error: Any) -> str:
    """What went wrong, from a ``LecternError``: the problem's detail where it has one."""
    if error.status == 0:
        return str(error.detail)
    body = error.body
    if isinstance(body, dict) and body.get("detail"):
        return str(body["detail"])
    return str(error.text[:500])
