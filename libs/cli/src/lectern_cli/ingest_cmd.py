"""``lectern ingest PATH...``: upload files or folders through the gateway and follow them."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lectern_cli.ask_cmd import DEFAULT_URL, add_connection

if TYPE_CHECKING:
    from lectern_client import AsyncLecternClient, LecternError

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
    add_connection(parser)
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
    lectern: AsyncLecternClient, *, filename: str, title: str | None
) -> str | None:
    """The caller's one indexed document this file is a new version of, if any.

    Matches the file name (and the title, when one is given) among the documents the caller
    uploaded; raises ``AmbiguousVersion`` when several match. The server only replaces what it
    is told to (``replaces``): guessing across uploaders would let one teacher's file silently
    retire a colleague's same-named one.
    """
    page = await lectern.documents_page(
        limit=2, filename=filename, mine=True, status="indexed", title=title or None
    )
    items = page.items
    if len(items) > 1:
        raise AmbiguousVersion(
            f"{len(items)} indexed documents named {filename!r} are yours; pass --replaces ID "
            "(or --title) to pick one, or --no-replace"
        )
    return str(items[0].id) if items else None


def _problem_detail(error: LecternError) -> str:
    body = error.body
    if body is None:
        return error.text[:300]
    if isinstance(body, dict):
        return str(body.get("detail") or body.get("title") or body)
    return str(body)[:300]


async def _follow(
    lectern: AsyncLecternClient, document_id: str, progress: Any, task: Any, timeout: float
) -> tuple[str, str]:
    from lectern_client import DocumentProgress

    async for event in lectern.document_events(document_id, timeout=timeout):
        if isinstance(event, DocumentProgress):
            progress.update(
                task, completed=event.done or 0, total=event.total or None,
                stage=f"{event.stage} {event.unit or ''}".strip(),
            )  # fmt: skip
        elif event.final:
            return event.type, _outcome_detail(event.type, event.document.model_dump(mode="json"))
    raise TimeoutError(f"no outcome within {timeout:.0f} s")


def _outcome_detail(event: str, data: dict[str, Any]) -> str:
    if event == "indexed":
        return f"{data.get('chunk_count', 0)} chunks, {data.get('page_count') or 0} pages"
    if event == "duplicate":
        return f"same text as {data.get('duplicate_of')}; not indexed twice"
    error = data.get("error") or {}
    return f"[{error.get('stage')}/{error.get('reason')}] {error.get('message') or ''}"


async def _ingest_one(
    *,
    lectern: AsyncLecternClient,
    path: Path,
    fields: dict[str, str],
    progress: Any,
    gate: asyncio.Semaphore,
    wait: bool,
    timeout: float,
    auto_replace: bool,
) -> Outcome:
    from lectern_client import LecternError

    async with gate:
        task = progress.add_task(path.name, total=None, stage="uploading")
        try:
            if auto_replace and "replaces" not in fields:
                try:
                    previous = await previous_version(
                        lectern, filename=path.name, title=fields.get("title")
                    )
                except AmbiguousVersion as exc:
                    progress.update(task, stage="ambiguous")
                    return Outcome(path, "ambiguous", str(exc))
                if previous is not None:
                    fields = {**fields, "replaces": previous}
                    progress.update(task, stage=f"new version of {previous}")
            try:
                accepted = await lectern.upload(path, fields=fields)
            except LecternError as exc:
                if exc.status == 0:
                    raise
                progress.update(task, stage=f"rejected {exc.status}")
                return Outcome(path, f"rejected ({exc.status})", _problem_detail(exc))
            document_id = str(accepted.id)
            if accepted.duplicate:
                progress.update(task, total=1, completed=1, stage="already uploaded")
                return Outcome(path, "duplicate", f"same bytes as {document_id}", document_id)
            version = f"version {accepted.version} of {fields['replaces']}; " if (
                "replaces" in fields) else ""  # fmt: skip
            if not wait:
                progress.update(task, total=1, completed=1, stage="queued")
                return Outcome(path, "queued", f"{version}not waiting for indexing", document_id)
            status, detail = await _follow(lectern, document_id, progress, task, timeout)
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
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from lectern_client import AsyncLecternClient

    gate = asyncio.Semaphore(max(1, concurrency))
    columns = (
        TextColumn("{task.description}", style="bold"), BarColumn(), MofNCompleteColumn(),
        TextColumn("{task.fields[stage]}"),
    )  # fmt: skip
    async with AsyncLecternClient(url, token, timeout=60.0) as lectern:
        with Progress(*columns, console=console, transient=False) as progress:
            return list(
                await asyncio.gather(
                    *(
                        _ingest_one(
                            lectern=lectern,
                            path=path,
                            fields=fields,
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
