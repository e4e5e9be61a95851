"""``lectern personas``: list the tutor personas, show one, or define one from a JSON file
(a new slug becomes version 1, an existing one its next version)."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any, TextIO

from lectern_cli.ask_cmd import add_connection, credentials, problem_text


def register(subparsers: Any) -> None:
    """Add ``personas``."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "personas",
        help="list, show or define tutor personas",
        description=(
            "Without arguments: the personas the caller may use. --show SLUG: one persona "
            "with the indexed material its scope matches. --define FILE: a persona from a "
            "JSON file (the fields of POST /v1/personas); an existing slug gets its next "
            "version."
        ),
    )
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--show", metavar="SLUG", help="show one persona")
    action.add_argument("--define", metavar="FILE", type=Path, help="define from a JSON file")
    add_connection(parser)
    parser.set_defaults(func=run)


async def personas(
    *,
    url: str,
    token: str,
    out: TextIO,
    show: str | None = None,
    define: dict[str, Any] | None = None,
) -> int:
    """List, show or define personas through the gateway; 0 on success."""
    from lectern_client import AsyncLecternClient, Conflict, LecternError

    async with AsyncLecternClient(url, token, timeout=60) as lectern:
        try:
            if define is not None:
                try:
                    body = await lectern.request("POST", "/v1/personas", json=define)
                except Conflict:
                    slug = define.get("slug")
                    body = await lectern.request("PUT", f"/v1/personas/{slug}", json=define)
            elif show is not None:
                body = await lectern.request("GET", f"/v1/personas/{show}")
            else:
                body = await lectern.request("GET", "/v1/personas")
        except LecternError as exc:
            print(f"lectern personas: {problem_text(exc)}", file=sys.stderr)
            return 1
    for persona in body if isinstance(body, list) else [body]:
        _write(persona, out, detail=not isinstance(body, list))
    return 0


def _write(persona: dict[str, Any], out: TextIO, *, detail: bool) -> None:
    scope = persona.get("scope") or {}
    limits = ", ".join(
        f"{key}: {', '.join(values)}"
        for key, values in scope.items()
        if values and key != "collections"
    )  # fmt: skip
    out.write(
        f"{persona['slug']} v{persona['version']}  {persona['display_name']}  "
        f"[{persona['default_mode']}]  {limits or 'all material'}\n"
    )
    if detail:
        if persona.get("instructions"):
            out.write(f"  instructions: {persona['instructions']}\n")
        out.write(f"  indexed chunks in scope: {persona.get('indexed_chunks')}\n")
    if persona.get("warning"):
        out.write(f"  warning: {persona['warning']}\n")


def run(args: argparse.Namespace) -> int:
    """Entry of ``lectern personas``."""
    found = credentials(args, "personas")
    if found is None:
        return 1
    url, token = found
    define = None
    if args.define is not None:
        try:
            define = json.loads(args.define.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            print(f"lectern personas: cannot read {args.define}: {exc}", file=sys.stderr)
            return 1
    return asyncio.run(personas(url=url, token=token, out=sys.stdout, show=args.show,
                                define=define))  # fmt: skip
