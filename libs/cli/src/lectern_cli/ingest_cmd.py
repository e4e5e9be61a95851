"""``lectern ingest PATH...``: upload files or folders through the gateway and follow them."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

DEFAULT_URL = "http://127.0.0.1:8000"
#: files a folder walk skips (hidden files, editor leftovers)
_SKIP_PREFIXES = (".", "~$")


@dataclass
class Outcome:
    """What happened to one file."""

    path: Path
    status: str
    detail: str = ""
    document_id: str | None = None

    @property
    def ok(self) -> bool:
        """Indexed, already there, or (without waiting) queued."""
        return self.status in ("indexed", "duplicate", "queued")


def register(subparsers: Any) -> None:
    """Add ``ingest``."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "ingest",
        help="upload documents (files or folders) and wait until they are indexed",
        description=(
            "Upload each file (folders recursively) to POST /v1/documents with the given "
            "metadata, show a progress bar per document from its event stream, and wait for "
            "the outcome. Exits 1 listing the files that failed. A changed file whose name "
            "(and --title, if given) matches exactly one indexed document you uploaded is sent "
            "as its new version (unless --no-replace); unchanged files are recognised as "
            "already uploaded."
        ),
    )
    parser.add_argument("paths", nargs="+", type=Path, metavar="PATH")
    parser.add_argument("--title", help="document title (one file only; default: file name)")
    parser.add_argument("--subject")
    parser.add_argument("--grade", type=int, help="grade level (0-16)")
    parser.add_argument("--module", help="module tag")
    parser.add_argument("--class-id")
    parser.add_argument("--collection", choices=("educational", "assessment"))
    parser.add_argument("--content-type", help="textbook, slides, notes, worksheet ...")
    parser.add_argument("--language", help="ISO 639-1 code (detected when unset)")
    parser.add_argument("--tags", help="topic tags, comma-separated")
    parser.add_argument("--standards", help="curriculum standards, comma-separated")
    parser.add_argument("--source-priority", type=float)
    parser.add_argument(
        "--freshness-date", type=_iso_date, metavar="YYYY-MM-DD", help="date of the material"
    )
    parser.add_argument("--password", help="password of encrypted PDFs")
    parser.add_argument(
        "--replaces", metavar="ID", help="document id this upload is a new version of (one file)"
    )
    parser.add_argument(
        "--no-replace",
        action="store_true",
        help="never send a file as the new version of a same-named document",
    )
    parser.add_argument("--token", help="bearer token (default: $LECTERN_TOKEN)")
    parser.add_argument(
        "--url", help=f"gateway URL (default: $LECTERN_GATEWAY_URL or {DEFAULT_URL})"
    )
    parser.add_argument("--concurrency", type=int, default=2, help="uploads at a time (2)")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per document")
    parser.add_argument("--no-wait", action="store_true", help="upload only; do not follow")
    parser.set_defaults(func=run)


def _iso_date(value: str) -> date:
    try:
        return date.fromisoformat(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a date (YYYY-MM-DD): {value!r}") from exc


def collect_files(paths: Iterable[Path]) -> list[Path]:
    """The files named, plus every file under the folders named (sorted, hidden ones skipped)."""
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            for child in sorted(path.rglob("*")):
                relative = child.relative_to(path).parts
                if child.is_file() and not any(p.startswith(_SKIP_PREFIXES) for p in relative):
                    found.append(child)
        elif path.is_file():
            found.append(path)
        else:
            raise FileNotFoundError(f"no such file or folder: {path}")
    return list(dict.fromkeys(found))


def form_fields(args: argparse.Namespace) -> dict[str, str]:
    """The metadata form fields of an upload."""
    freshness = getattr(args, "freshness_date", None)
    mapping = {
        "title": getattr(args, "title", None), "subject": args.subject,
        "grade_level": args.grade, "module_tag": args.module, "class_id": args.class_id,
        "collection": args.collection, "content_type": args.content_type,
        "language": args.language, "topic_tags": args.tags,
        "curriculum_standards": args.standards, "source_priority": args.source_priority,
        "freshness_date": freshness.isoformat() if freshness else None,
        "password": args.password, "replaces": args.replaces,
    }  # fmt: skip
    return {k: str(v) for k, v in mapping.items() if v is not None and v != ""}


def summarise(outcomes: Sequence[Outcome]) -> tuple[int, list[str]]:
    """Exit code and the lines listing failures."""
    failed = [o for o in outcomes if not o.ok]
    verb = "queued" if any(o.status == "queued" for o in outcomes) else "indexed"
    lines = [f"{len(outcomes) - len(failed)} of {len(outcomes)} documents {verb}"]
    lines += [f"FAILED {o.path}: {o.status} {o.detail}".rstrip() for o in failed]
    return (1 if failed else 0), lines


class AmbiguousVersion(Exception):
    """Raised when a file's name matches several of the caller's indexed documents."""


async def previous_version(
    client: Any, *, filename: str, title: str | None, headers: dict[str, str]
) -> str | None:
    """The caller's one indexed document this file is a new version of, if any.

    Matches the file name (and the title, when one is given) among the documents the caller
    uploaded; raises ``AmbiguousVersion`` when several match. The server only replaces what it
    is told to (``replaces``): guessing across uploaders would let one teacher's file silently
    retire a colleague's same-named one.
    """
    params = {"filename": filename, "mine": "true", "status": "indexed", "limit": "2"}
    if title:
        params["title"] = title
    response = await client.get("/v1/documents", params=params, headers=headers)
    response.raise_for_status()
    items = response.json().get("items", [])
    if len(items) > 1:
        raise AmbiguousVersion(
            f"{len(items)} indexed documents named {filename!r} are yours; pass --replaces ID "
            "(or --title) to pick one, or --no-replace"
        )
    return str(items[0]["id"]) if items else None


def _problem_detail(response: Any) -> str:
    try:
        body = response.json()
    except ValueError:
        return str(response.text)[:300]
    if isinstance(body, dict):
        return str(body.get("detail") or body.get("title") or body)
    return str(body)[:300]


async def _follow(
    client: Any, url: str, headers: dict[str, str], progress: Any, task: Any, timeout: float
) -> tuple[str, str]:
    from httpx_sse import aconnect_sse

    async with asyncio.timeout(timeout):
        while True:
            async with aconnect_sse(client, "GET", url, headers=headers) as source:
                async for sse in source.aiter_sse():
                    data = json.loads(sse.data) if sse.data else {}
                    if sse.event == "progress":
                        total = data.get("total") or None
                        progress.update(
                            task, completed=data.get("done", 0), total=total,
                            stage=f"{data.get('stage')} {data.get('unit', '')}".strip(),
                        )  # fmt: skip
                    elif sse.event in ("indexed", "duplicate", "failed", "deleted", "superseded"):
                        return sse.event, _outcome_detail(sse.event, data)
            await asyncio.sleep(1.0)  # the stream closed early: reconnect


def _outcome_detail(event: str, data: dict[str, Any]) -> str:
    if event == "indexed":
        return f"{data.get('chunk_count', 0)} chunks, {data.get('page_count') or 0} pages"
    if event == "duplicate":
        return f"same text as {data.get('duplicate_of')}; not indexed twice"
    error = data.get("error") or {}
    return f"[{error.get('stage')}/{error.get('reason')}] {error.get('message') or ''}"


async def _ingest_one(
    *,
    client: Any,
    path: Path,
    fields: dict[str, str],
    headers: dict[str, str],
    progress: Any,
    gate: asyncio.Semaphore,
    wait: bool,
    timeout: float,
    auto_replace: bool,
) -> Outcome:
    async with gate:
        task = progress.add_task(path.name, total=None, stage="uploading")
        try:
            if auto_replace and "replaces" not in fields:
                try:
                    previous = await previous_version(
                        client, filename=path.name, title=fields.get("title"), headers=headers
                    )
                except AmbiguousVersion as exc:
                    progress.update(task, stage="ambiguous")
                    return Outcome(path, "ambiguous", str(exc))
                if previous is not None:
                    fields = {**fields, "replaces": previous}
                    progress.update(task, stage=f"new version of {previous}")
            with path.open("rb") as handle:
                response = await client.post(
                    "/v1/documents", files={"file": (path.name, handle)}, data=fields,
                    headers=headers,
                )  # fmt: skip
            if response.status_code not in (200, 202):
                progress.update(task, stage=f"rejected {response.status_code}")
                return Outcome(
                    path, f"rejected ({response.status_code})", _problem_detail(response)
                )
            body = response.json()
            document_id = str(body["id"])
            if response.status_code == 200:
                progress.update(task, total=1, completed=1, stage="already uploaded")
                return Outcome(path, "duplicate", f"same bytes as {document_id}", document_id)
            version = f"version {body.get('version')} of {fields['replaces']}; " if (
                "replaces" in fields) else ""  # fmt: skip
            if not wait:
                progress.update(task, total=1, completed=1, stage="queued")
                return Outcome(path, "queued", f"{version}not waiting for indexing", document_id)
            status, detail = await _follow(
                client, body["events_url"], headers, progress, task, timeout
            )
            progress.update(task, stage=status)
            if status in ("indexed", "duplicate"):
                progress.update(task, total=1, completed=1)
            return Outcome(path, status, version + detail, document_id)
        except TimeoutError:
            return Outcome(path, "timeout", f"no outcome within {timeout:.0f} s")
        except Exception as exc:
            return Outcome(path, "error", str(exc) or type(exc).__name__)


async def ingest(
    *,
    url: str,
    token: str,
    files: Sequence[Path],
    fields: dict[str, str],
    concurrency: int = 2,
    wait: bool = True,
    timeout: float = 1800.0,
    console: Any = None,
    auto_replace: bool = True,
) -> list[Outcome]:
    """Upload every file and (unless ``wait`` is False) wait for its outcome.

    ``auto_replace``: a file matching one indexed document of the caller by name (and title,
    when ``fields`` has one) is uploaded as its new version (see ``previous_version``).
    """
    import httpx
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    headers = {"Authorization": f"Bearer {token}"}
    gate = asyncio.Semaphore(max(1, concurrency))
    columns = (
        TextColumn("{task.description}", style="bold"), BarColumn(), MofNCompleteColumn(),
        TextColumn("{task.fields[stage]}"),
    )  # fmt: skip
    async with httpx.AsyncClient(base_url=url, timeout=httpx.Timeout(60.0, read=None)) as client:
        with Progress(*columns, console=console, transient=False) as progress:
            return list(
                await asyncio.gather(
                    *(
                        _ingest_one(
                            client=client,
                            path=path,
                            fields=fields,
                            headers=headers,
                            progress=progress,
                            gate=gate,
                            wait=wait,
                            timeout=timeout,
                            auto_replace=auto_replace,
                        )
                        for path in files
                    )
                )
            )


def run(args: argparse.Namespace) -> int:
    """Upload, follow, report; 1 when any document failed."""
    token = args.token or os.environ.get("LECTERN_TOKEN")
    if not token:
        print("lectern ingest: give --token or set LECTERN_TOKEN", file=sys.stderr)
        return 2
    url = args.url or os.environ.get("LECTERN_GATEWAY_URL") or DEFAULT_URL
    try:
        files = collect_files(args.paths)
    except FileNotFoundError as exc:
        print(f"lectern ingest: {exc}", file=sys.stderr)
        return 2
    if not files:
        print("lectern ingest: no files found", file=sys.stderr)
        return 2
    for option, value in (("--title", args.title), ("--replaces", args.replaces)):
        if value and len(files) != 1:
            print(f"lectern ingest: {option} needs exactly one file ({len(files)} found)",
                  file=sys.stderr)  # fmt: skip
            return 2
    outcomes = asyncio.run(
        ingest(
            url=url, token=token, files=files, fields=form_fields(args),
            concurrency=args.concurrency, wait=not args.no_wait, timeout=args.timeout,
            auto_replace=not args.no_replace,
        )
    )  # fmt: skip
    code, lines = summarise(outcomes)
    for line in lines:
        print(line, file=sys.stderr if line.startswith("FAILED") else sys.stdout)
    return code
