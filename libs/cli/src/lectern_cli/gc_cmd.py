"""``lectern gc``: remove stored files and chunks that no live document needs."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from typing import Any


def register(subparsers: Any) -> None:
    """Add ``gc``."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "gc",
        help="remove orphaned stored files and chunks (the ingest service runs it hourly)",
        description=(
            "Find objects in the documents bucket that no document needs (uploads that never "
            "committed, bytes a failed clean-up left, finished documents' PDF passwords) and "
            "chunks of deleted, failed or duplicate documents; remove them and report the "
            "counts found, removed and verified gone."
        ),
    )
    parser.add_argument("--dry-run", action="store_true", help="report, remove nothing")
    parser.add_argument(
        "--grace-minutes", type=float, default=60.0,
        help="never touch files younger than this (uploads in flight; default 60)",
    )  # fmt: skip
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--database-url", default=None, help="default: LECTERN_DATABASE_URL")
    parser.add_argument("--nats-url", default=None, help="default: LECTERN_NATS_URL")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Collect once and print the report (exit 1 when something removed is still there)."""
    from lectern_cli.runtime.settings import load_settings

    settings = load_settings()
    dsn = args.database_url or os.environ.get("LECTERN_DATABASE_URL") or settings.database_url
    nats_url = args.nats_url or os.environ.get("LECTERN_NATS_URL") or settings.nats_url
    report = asyncio.run(_collect(dsn, nats_url, settings.nats_credentials, args))
    if args.json:
        print(json.dumps({**report.__dict__, "verified": report.verified}, indent=2))
    elif not report.ran:
        print("another garbage collection is running")
    else:
        verb = "would remove" if report.dry_run else "removed"
        objects = report.objects_found if report.dry_run else report.objects_removed
        chunks = report.chunks_found if report.dry_run else report.chunks_removed
        print(
            f"objects: {report.objects_found} orphaned, {verb} {objects}, {report.objects_left} "
            f"left ({report.skipped_young} younger than the grace period)"
        )
        print(
            f"chunks: {report.chunks_found} of dead documents, {verb} {chunks}, "
            f"{report.chunks_left} left"
        )
        for name in report.removed_names:
            print(f"  {name}")
    return 0 if report.verified else 1


async def _collect(
    dsn: str, nats_url: str, credentials: tuple[str, str] | None, args: argparse.Namespace
) -> Any:
    import nats

    from lectern_common.db import create_pool
    from lectern_common.gc import collect

    auth: dict[str, str] = {}
    if credentials is not None:
        auth = {"user": credentials[0], "password": credentials[1]}
    nc = await nats.connect([s.strip() for s in nats_url.split(",") if s.strip()], **auth)
    pool = await create_pool(dsn, min_size=1, max_size=2)
    try:
        return await collect(
            pool, nc.jetstream(), grace_s=args.grace_minutes * 60.0, dry_run=args.dry_run
        )
    finally:
        await pool.close()
        await nc.close()
