"""``lectern reindex``: move the index to another embedding model while retrieval answers."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from typing import Any


def register(subparsers: Any) -> None:
    """Add ``reindex``."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "reindex",
        help="re-embed the stored text with another model and switch to it",
        description=(
            "Build an index of another embedding model beside the live one (chunks, student "
            "memories and curriculum standards, re-embedded from their stored text), then "
            "switch retrieval to it in one transaction and drop the old one. Retrieval keeps "
            "answering throughout; the running services follow the switch. A failure leaves "
            "the live index untouched."
        ),
    )
    parser.add_argument(
        "--model", default=None,
        help="'local' (the packaged MiniLM), a sentence-transformers folder, or a Gemini "
             "embedding model such as gemini-embedding-001 (needs LECTERN_GEMINI_API_KEY); "
             "default: the configured model (LECTERN_EMBEDDING_*)",
    )  # fmt: skip
    parser.add_argument(
        "--dimension", type=int, default=None,
        help="output dimension of a Gemini model (default: LECTERN_GEMINI_EMBEDDING_DIM)",
    )  # fmt: skip
    parser.add_argument(
        "--batch-size", type=int, default=512, help="rows read and embedded at a time"
    )
    parser.add_argument(
        "--status", action="store_true", help="list the latest re-index runs and exit"
    )
    parser.add_argument(
        "--database-url", default=None, help="Postgres DSN (default: LECTERN_DATABASE_URL)"
    )
    parser.set_defaults(func=run)


def target_model(args: argparse.Namespace, settings: Any) -> tuple[str, int]:
    """The (name, dimension) asked for."""
    from lectern_cli.runtime.settings import embedding_identity
    from lectern_common.embeddings import LOCAL_MODEL_NAME
    from lectern_common.index import is_local_model

    name = args.model
    if name is None:
        return embedding_identity(settings)
    if name == "local":
        name = LOCAL_MODEL_NAME
    if name == "gemini":
        name = settings.gemini_embedding_model
    if is_local_model(name):
        local = settings.model_copy(
            update={
                "embedding_provider": "local",
                "local_embedding_model": None if name == LOCAL_MODEL_NAME else name,
            }
        )
        return embedding_identity(local)
    return str(name), int(args.dimension or settings.gemini_embedding_dim)


def run(args: argparse.Namespace) -> int:
    """Re-index, printing progress; or list the runs."""
    from lectern_cli.runtime.settings import load_settings
    from lectern_cli.status import redact

    settings = load_settings()
    dsn = args.database_url or os.environ.get("LECTERN_DATABASE_URL") or settings.database_url
    if args.status:
        return asyncio.run(_status(dsn))
    from lectern_common.errors import LecternError
    from lectern_common.index import IndexModel, load_embedder
    from lectern_common.reindex import reindex

    name, dimension = target_model(args, settings)
    try:
        embedder = load_embedder(settings, IndexModel(name, dimension))
    except LecternError as exc:
        print(f"lectern reindex: error: {exc.message}", file=sys.stderr)
        return 2
    print(f"re-indexing {redact(dsn)} with {name} ({dimension} dimensions)", flush=True)
    last: dict[str, int] = {}

    def progress(table: str, done: int, total: int) -> None:
        step = max(1, total // 20)
        if done == total or done - last.get(table, 0) >= step:
            last[table] = done
            print(f"  {table}: {done}/{total}", flush=True)

    try:
        report = asyncio.run(reindex(dsn, embedder, batch_size=args.batch_size, progress=progress))
    except LecternError as exc:
        print(f"lectern reindex: error: {exc.message}", file=sys.stderr)
        return 1
    rows = ", ".join(f"{n} {t}" for t, n in report.rows.items())
    print(
        f"switched from {report.previous.name} to {report.model.name} in {report.seconds:.1f} s "
        f"(re-embedded {rows}; {report.caught_up} written during the build caught up in the "
        f"switch, which held the tables for {report.switch_ms:.0f} ms)"
    )
    return 0


async def _status(dsn: str) -> int:
    import asyncpg

    from lectern_common.index import live_model
    from lectern_common.reindex import builds

    conn = await asyncpg.connect(dsn)
    try:
        model = await live_model(conn)
        runs = await builds(conn)
    finally:
        await conn.close()
    if model is not None:
        print(f"live index: {model.name} ({model.dimension} dimensions)")
    for run in runs:
        finished = run["finished_at"].isoformat(timespec="seconds") if run["finished_at"] else "-"
        print(
            f"{run['started_at'].isoformat(timespec='seconds')}  {run['status']:<9} "
            f"{run['previous_model']} -> {run['model']} ({run['dimension']})  "
            f"{run['done']}/{run['total']} rows  finished {finished}"
            + (f"  error: {run['error']}" if run["error"] else "")
        )
    return 0
