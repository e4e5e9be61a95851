"""``lectern up``: the embedded stack in the foreground."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from lectern_cli.runtime.processes import DEFAULT_PORTS, SERVICES


def register(subparsers: Any) -> None:
    """Add ``up``."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "up",
        help="run the embedded stack (Postgres, NATS, the five services) in the foreground",
        description=(
            "Start an embedded Postgres (pgvector) and NATS (JetStream), apply migrations and "
            "run the five services and the gateway's worker (`python -m lectern_gateway "
            "worker`: sweeps, gap closures, webhook deliveries), restarting any that crashes. "
            "Ctrl-C stops everything. "
            "Data lives in --data-dir and survives restarts. The gateway serves the web UI at "
            "its root URL. On the first start of a data directory, a demo corpus (a few short "
            "lessons, tenant `demo`) is uploaded in the background once the stack is ready."
        ),
    )
    parser.add_argument(
        "--data-dir", type=Path, default=None,
        help="state directory (./.lectern; with --cluster ./.lectern-cluster)",
    )  # fmt: skip
    parser.add_argument(
        "--port", type=int, default=DEFAULT_PORTS["gateway"],
        help="gateway port on 127.0.0.1 (default 8000; 0: any free port)",
    )  # fmt: skip
    parser.add_argument(
        "--nats-port", type=int, default=None,
        help="NATS client port (default 4222 if free, else any; 0: any free port)",
    )  # fmt: skip
    parser.add_argument(
        "--nats-monitor-port", type=int, default=None,
        help="NATS monitoring port (default 8222 if free, else any; 0: any free port)",
    )  # fmt: skip
    parser.add_argument(
        "--pg-user", default=os.environ.get("LECTERN_EMBEDDED_PG_USER"),
        help="as root: the existing account the embedded Postgres runs as (default nobody)",
    )  # fmt: skip
    parser.add_argument(
        "--create-pg-user", action="store_true",
        help="as root: create the --pg-user account if it does not exist (never done otherwise)",
    )  # fmt: skip
    parser.add_argument(
        "--services", type=_service_list, default=SERVICES,
        help=f"comma-separated subset to run (default all: {','.join(SERVICES)}; the "
        "gateway's worker runs with the gateway)",
    )  # fmt: skip
    parser.add_argument(
        "--graceful-timeout", type=float, default=30.0,
        help="seconds a service may take to finish in-flight work on stop (default 30)",
    )  # fmt: skip
    parser.add_argument(
        "--cluster", action="store_true",
        help=(
            "the production layout on this machine: a 3-server NATS cluster (NATS ports "
            "--nats-port and the next two), streams and consumers at 3 replicas, two replicas "
            "of every service (gateway-2 on --port + 10), one Postgres primary and a streaming "
            "read replica that the retriever and memory recall read from"
        ),
    )  # fmt: skip
    parser.add_argument(
        "--no-worker", dest="worker", action="store_false",
        help="start no gateway worker beside the gateway: no idle sweep, gap closures, "
        "retention or webhook deliveries (they run elsewhere, or are not wanted)",
    )  # fmt: skip
    parser.add_argument(
        "--nats-restart-after", type=float, default=2.0, metavar="SECONDS",
        help="a NATS server that dies is started again this long after, on its ports and "
        "store (default 2)",
    )  # fmt: skip
    parser.add_argument(
        "--no-demo", action="store_true",
        help="do not load the demo corpus (otherwise loaded on a data directory's first start)",
    )  # fmt: skip
    parser.set_defaults(func=run)


def _service_list(value: str) -> tuple[str, ...]:
    names = tuple(n.strip() for n in value.split(",") if n.strip())
    unknown = [n for n in names if n not in SERVICES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown services {unknown}; choose from {', '.join(SERVICES)}"
        )
    return names


def run(args: argparse.Namespace) -> int:
    """Run the stack until Ctrl-C or SIGTERM."""
    from lectern_cli.runtime.supervisor import ReadyHook, Supervisor

    def report(message: str) -> None:
        print(message, flush=True)

    if args.data_dir is None:
        # a cluster's NATS store is not a single server's: keep the two apart by default
        args.data_dir = Path(".lectern-cluster" if args.cluster else ".lectern")
    on_ready: ReadyHook | None = None
    if not args.no_demo:
        from lectern_cli.demo import DemoLoader, default_demo_dir, on_stack_ready

        directory = default_demo_dir()
        if directory is None:
            report("demo corpus: not found (no demo/corpus.toml next to this checkout); skipped")
        else:
            data_dir = args.data_dir.resolve()
            loader = DemoLoader(directory=directory, data_dir=data_dir, report=report)
            on_ready = on_stack_ready(loader)

    supervisor = Supervisor(
        data_dir=args.data_dir,
        gateway_port=args.port,
        nats_port=args.nats_port,
        nats_monitor_port=args.nats_monitor_port,
        pg_user=args.pg_user,
        create_pg_user=args.create_pg_user,
        services=args.services,
        graceful_timeout_s=args.graceful_timeout,
        report=report,
        on_ready=on_ready,
        cluster=args.cluster,
        nats_restart_after_s=args.nats_restart_after,
        worker=args.worker,
    )
    return supervisor.run()
