"""``lectern inspect FILE``: how ingest reads a document (title, heading tree, chunks), offline."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path
from typing import Any


def register(subparsers: Any) -> None:
    """Add ``inspect``."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "inspect",
        help="show how ingest reads a document: title, headings with pages, chunks by kind",
        description=(
            "Run the ingest service's extraction, cleaning and chunking on FILE, offline (no "
            "server, nothing stored or embedded), and print the title, the heading tree with "
            "the page of each heading and the chunks counted by kind (contents, references "
            "and index chunks are kept out of chat's retrieval). Chunk sizes follow the "
            "LECTERN_INGEST_CHUNK_* settings and the embedding model's tokenizer."
        ),
    )
    parser.add_argument("file", type=Path)
    parser.add_argument(
        "--chunks", action="store_true",
        help="also list every chunk: page, kind, section path and its first 80 characters",
    )  # fmt: skip
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--password", help="the password of an encrypted PDF")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print the document's structure; 1 when it cannot be read (with ingest's reason).

    The ingest service's own code reads it, run as a process (``python -m
    lectern_ingest.structure``): the tools drive the services, they never import them."""
    path: Path = args.file
    if not path.is_file():
        print(f"lectern inspect: error: no such file: {path}", file=sys.stderr)
        return 1
    command = [sys.executable, "-m", "lectern_ingest.structure", str(path)]
    command += ["--chunks"] * args.chunks + ["--json"] * args.json
    if args.password:
        command += ["--password", args.password]
    try:
        return subprocess.run(command, check=False).returncode
    except OSError as exc:
        print(f"lectern inspect: cannot run the ingest service's reader: {exc}", file=sys.stderr)
        return 1
