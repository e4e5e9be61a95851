"""``lectern docs``: a teacher's library from the terminal: list documents, change their
metadata, archive and restore them, index them again, and read their audit log."""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import TYPE_CHECKING, Any, TextIO

from lectern_cli.ask_cmd import add_connection, credentials, problem_text

if TYPE_CHECKING:
    from lectern_client import AsyncLecternClient

#: ``--set`` fields that hold lists (comma-separated on the command line)
LIST_FIELDS = ("curriculum_standards", "topic_tags")


def register(subparsers: Any) -> None:
    """Add ``docs``."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "docs",
        help="list, edit, archive and restore documents (teachers)",
        description=(
            "Without an action: the tenant's documents. --edit ID --set field=value (repeat; "
            "an empty value clears it, lists are comma-separated); --archive ID; --restore ID; "
            "--reprocess ID: index its stored file again with the current extraction and "
            "chunking (a new version; the old one answers until it is indexed); "
            "--reprocess-all: every indexed document, after the chunking settings changed; "
            "--audit ID: who changed the document and how."
        ),
    )
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--edit", metavar="ID", help="change the metadata of a document")
    action.add_argument("--archive", metavar="ID", help="take a document out of retrieval")
    action.add_argument("--restore", metavar="ID", help="put an archived document back")
    action.add_argument("--audit", metavar="ID", help="a document's audit log")
    action.add_argument(
        "--reprocess", metavar="ID", help="index a document's stored file again (re-chunk)"
    )
    action.add_argument(
        "--reprocess-all", action="store_true",
        help="index every indexed document again (after a change of chunking settings)",
    )  # fmt: skip
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE")
    parser.add_argument("--status", help="list: only this status (e.g. archived)")
    add_connection(parser)
    parser.set_defaults(func=run)


def parse_sets(pairs: list[str]) -> dict[str, Any]:
    """``field=value`` pairs as a PATCH body (``grade_level`` and ``source_priority`` as
    numbers, list fields split on commas, an empty value as null)."""
    body: dict[str, Any] = {}
    for pair in pairs:
        field, sep, value = pair.partition("=")
        if not sep or not field.strip():
            raise ValueError(f"--set wants field=value, got {pair!r}")
        field, value = field.strip(), value.strip()
        if not value:
            body[field] = [] if field in LIST_FIELDS else None
        elif field in LIST_FIELDS:
            body[field] = [v.strip() for v in value.split(",") if v.strip()]
        elif field == "grade_level":
            body[field] = int(value)
        elif field == "source_priority":
            body[field] = float(value)
        else:
            body[field] = value
    return body


async def docs(
    *, url: str, token: str, out: TextIO, action: str | None = None,
    document: str | None = None, changes: dict[str, Any] | None = None,
    status: str | None = None, transport: Any = None,
) -> int:  # fmt: skip
    """Run one ``lectern docs`` action; 0 on success (``transport``: tests' in-process app)."""
    from lectern_client import AsyncLecternClient, LecternError

    async with AsyncLecternClient(url, token, timeout=60, transport=transport) as lectern:
        try:
            if action == "edit":
                body = await lectern.request(
                    "PATCH", f"/v1/documents/{document}", json=changes or {}
                )
            elif action in ("archive", "restore", "reprocess"):
                body = await lectern.request("POST", f"/v1/documents/{document}/{action}")
            elif action == "audit":
                body = await lectern.request("GET", f"/v1/documents/{document}/audit")
            elif action == "reprocess-all":
                return await reprocess_all(lectern, out)
            else:
                params = {"limit": "200", **({"status": status} if status else {})}
                body = await lectern.request("GET", "/v1/documents", params=params)
        except LecternError as exc:
            print(f"lectern docs: {problem_text(exc)}", file=sys.stderr)
            return 1
    if action == "reprocess":
        body = body["document"]
    if action == "audit":
        for entry in body:
            changed = ", ".join(f"{k}: {v[0]!r} -> {v[1]!r}" for k, v in entry["changes"].items())
            out.write(f"{entry['at']}  {entry['actor']}  {entry['action']}  {changed}\n")
        return 0
    for doc in body["items"] if action is None else [body]:
        out.write(
            f"{doc['id']}  {doc['status']:<10} {doc['title']}  "
            f"[{doc.get('subject') or '-'}, grade {doc.get('grade_level') or '-'}]\n"
        )
    return 0


async def reprocess_all(lectern: AsyncLecternClient, out: TextIO) -> int:
    """Queue every indexed document of the tenant for indexing again; 1 if any was refused.
    The new versions are listed as queued; ``lectern docs --status pending`` follows them."""
    from lectern_client import LecternError

    try:
        ids = [str(doc.id) async for doc in lectern.list_documents(status="indexed", page_size=200)]
    except LecternError as exc:
        print(f"lectern docs: {problem_text(exc)}", file=sys.stderr)
        return 1
    refused = 0
    for document in ids:
        try:
            new = (await lectern.request("POST", f"/v1/documents/{document}/reprocess"))["document"]
        except LecternError as exc:
            refused += 1
            print(f"lectern docs: {document}: {problem_text(exc)}", file=sys.stderr)
            continue
        out.write(f"{document} -> {new['id']}  {new['status']:<10} {new['title']}\n")
    out.write(f"{len(ids) - refused} of {len(ids)} documents queued for indexing again\n")
    return 1 if refused else 0


def run(args: argparse.Namespace) -> int:
    """Entry of ``lectern docs``."""
    found = credentials(args, "docs")
    if found is None:
        return 1
    url, token = found
    action, document = None, None
    for name in ("edit", "archive", "restore", "audit", "reprocess"):
        if getattr(args, name):
            action, document = name, getattr(args, name)
    if args.reprocess_all:
        action = "reprocess-all"
    try:
        changes = parse_sets(args.set)
    except ValueError as exc:
        print(f"lectern docs: {exc}", file=sys.stderr)
        return 2
    return asyncio.run(docs(url=url, token=token, out=sys.stdout, action=action,
                            document=document, changes=changes, status=args.status))  # fmt: skip
