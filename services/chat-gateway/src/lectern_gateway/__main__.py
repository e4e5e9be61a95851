"""Process entry: ``python -m lectern_gateway [serve|worker]`` (``lectern-gateway``)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from lectern_common.service import run_service
from lectern_gateway.app import create_app
from lectern_gateway.config import Settings
from lectern_gateway.worker import create_worker_app, worker_settings


def main(argv: Sequence[str] | None = None) -> None:
    """Build settings from the environment, build the app (the HTTP API or the worker),
    serve until SIGTERM."""
    parser = argparse.ArgumentParser(
        prog="lectern-gateway",
        description="The Lectern gateway: `serve` the HTTP API (the default) or run the "
        "`worker` (sweeps, gap closures, retention, webhook deliveries; health endpoints only).",
    )
    parser.add_argument("command", nargs="?", choices=("serve", "worker"), default="serve")
    args = parser.parse_args(argv)
    if args.command == "worker":
        settings = worker_settings(Settings())
        run_service(create_worker_app(settings), settings)
        return
    settings = Settings()
    run_service(create_app(settings), settings)


if __name__ == "__main__":
    main()
