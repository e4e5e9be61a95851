"""What ``eval-answers`` and ``eval-memory`` share: their options of where to run, the
frozen-split line, and running an evaluation against a given gateway or the embedded stack."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any


def add_where_options(parser: argparse.ArgumentParser, *, owners: str) -> None:
    """``--documents`` (where the ``owners``' document paths start), ``--url`` and
    ``--data-dir``."""
    parser.add_argument(
        "--documents", type=Path, default=Path("../shared/data"), metavar="DIR",
        help=f"folder the {owners}' document paths are relative to (../shared/data)",
    )  # fmt: skip
    parser.add_argument("--url", help="a running gateway (default: start the embedded stack)")
    parser.add_argument("--data-dir", type=Path, help="embedded stack's data dir (temporary)")


def frozen_note(sha256: str, frozen: str | None) -> str:
    """How a test split's hash stands against the one frozen in ``FROZEN``."""
    if frozen == sha256:
        return " (frozen: matches)"
    return f" (DIFFERS from the frozen {frozen})" if frozen else " (not frozen)"


def report(message: str) -> None:
    """Progress, on standard error."""
    print(message, file=sys.stderr, flush=True)


def on_gateway(
    command: str,
    url: str | None,
    data_dir: Path | None,
    evaluate: Callable[[str, str], Coroutine[Any, Any, Any]],
) -> tuple[bool, Any]:
    """``evaluate(gateway URL, JWT secret)`` on the gateway at ``url`` (the secret from
    ``LECTERN_JWT_SECRET``) or on the embedded stack started in ``data_dir``; (False, None)
    when a gateway is given without a secret."""
    from lectern_cli.runtime.embedded import embedded_stack
    from lectern_common.tokens import signing_secret

    if url:
        secret = signing_secret(os.environ)
        if secret is None:
            print(f"lectern {command}: set LECTERN_JWT_SECRET", file=sys.stderr)
            return False, None
        return True, asyncio.run(evaluate(url, secret))
    with embedded_stack(data_dir=data_dir, report=report) as (started, secret):
        return True, asyncio.run(evaluate(started, secret))
