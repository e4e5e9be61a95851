"""``lectern migrate``: apply the database migrations."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from typing import Any


def register(subparsers: Any) -> None:
    """Add ``migrate``."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "migrate",
        help="apply pending database migrations",
        description=(
            "Apply the numbered SQL migrations (idempotent, under an advisory lock). The "
            "embedding dimension comes from the configured embedder (LECTERN_EMBEDDING_*)."
        ),
    )
    parser.add_argument(
        "--database-url", default=None,
        help="Postgres DSN (default: LECTERN_DATABASE_URL)",
    )  # fmt: skip
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Apply pending migrations and say which."""
    import asyncpg

    from lectern_cli.runtime.settings import embedding_identity, load_settings
    from lectern_cli.status import redact
    from lectern_common.db import migrate
    from lectern_common.db.migrate import load_migrations

    settings = load_settings()
    dsn = args.database_url or os.environ.get("LECTERN_DATABASE_URL") or settings.database_url
    model, dim = embedding_identity(settings)
    try:
        applied = asyncio.run(migrate(dsn, embedding_model=model, embedding_dim=dim))
    except (OSError, asyncpg.PostgresError) as exc:
        print(f"lectern migrate: error: {redact(dsn)}: {exc}", file=sys.stderr)
        return 1
    names = {m.version: m.name for m in load_migrations()}
    live = asyncio.run(_live(dsn))
    if live is not None and (live.name, live.dimension) != (model, dim):
        print(
            f"note: the index holds {live.name} vectors ({live.dimension} dimensions), not the "
            f"configured {model} ({dim}); the services keep using {live.name}. Run "
            f"`lectern reindex --model {model}` to move the index (retrieval keeps answering).",
            file=sys.stderr,
        )
    if not applied:
        print(f"schema up to date ({len(names)} migrations)")
        return 0
    for version in applied:
        print(f"applied {version:04d}_{names[version]}")
    print(f"{len(applied)} migration(s) applied; embeddings: {model}, {dim} dimensions")
    return 0


async def _live(dsn: str) -> Any:
    import asyncpg

    from lectern_common.index import live_model

    conn = await asyncpg.connect(dsn)
    try:
        return await live_model(conn)
    finally:
        await conn.close()
