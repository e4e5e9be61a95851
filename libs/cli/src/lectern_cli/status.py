"""``lectern status``: services and their health, JetStream backlog, documents and chunks."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: the processes to probe: the five services and the gateway's worker (its health server)
SERVICES: tuple[str, ...] = (
    "gateway", "ingest", "retriever", "reranker", "memory", "gateway-worker",
)  # fmt: skip
DEFAULT_PORTS: dict[str, int] = {
    "gateway": 8000, "ingest": 8001, "retriever": 8002, "reranker": 8003, "memory": 8004,
    "gateway-worker": 8005,
}  # fmt: skip
DOCUMENT_STATUSES = (
    "pending", "processing", "indexed", "failed", "superseded", "archived", "deleted",
)  # fmt: skip
DEFAULT_DATA_DIR = Path(".lectern")


@dataclass
class Targets:
    """What to ask: service base URLs, NATS, Postgres, and where that came from."""

    services: dict[str, str]
    nats_url: str
    database_url: str
    source: str
    problems: list[str] = field(default_factory=list)
    stack: dict[str, Any] | None = None


def register(subparsers: Any) -> None:
    """Add ``status``."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "status",
        help="health of the services, JetStream streams and consumers, documents and chunks",
        description=(
            "Report each service's /readyz, the JetStream streams and consumers with pending "
            "counts, and documents and chunks per status. Finds the embedded stack through "
            "DATA_DIR/stack.json, else uses LECTERN_NATS_URL, LECTERN_DATABASE_URL and "
            "LECTERN_GATEWAY_URL (LECTERN_<SERVICE>_URL for the others, "
            "LECTERN_GATEWAY_WORKER_URL for the gateway's worker). Exits 1 when unhealthy."
        ),
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--data-dir", type=Path, default=None,
        help="the embedded stack's data dir (default ./.lectern when it holds a stack.json)",
    )  # fmt: skip
    parser.add_argument("--timeout", type=float, default=3.0, help="seconds per probe (3)")
    parser.set_defaults(func=run)


def resolve_targets(data_dir: Path | None, environ: Mapping[str, str]) -> Targets:
    """Targets from ``data_dir/stack.json`` (an embedded stack) or from the environment."""
    from lectern_cli.runtime.state import STATE_FILE, process_alive, read_state, stack_nats_url

    if data_dir is None and (DEFAULT_DATA_DIR / STATE_FILE).exists():
        data_dir = DEFAULT_DATA_DIR
    if data_dir is not None:
        state = read_state(data_dir)
        if state is None:
            return Targets(
                services={}, nats_url="", database_url="", source=str(data_dir / STATE_FILE),
                problems=[f"no embedded stack state in {data_dir.resolve() / STATE_FILE}"],
            )  # fmt: skip
        targets = Targets(
            services={name: info["url"] for name, info in state.get("services", {}).items()},
            nats_url=stack_nats_url(state),
            database_url=state.get("postgres", {}).get("dsn", ""),
            source=str(data_dir.resolve() / STATE_FILE),
            stack=state,
        )
        if not (
            state.get("running") and process_alive(state.get("pid"), state.get("pid_create_time"))
        ):
            targets.problems.append(f"the embedded stack in {data_dir.resolve()} is not running")
        return targets
    services = {}
    for name in SERVICES:
        prefix = env_prefix(name)
        url = environ.get(f"{prefix}_URL")
        if not url:
            port = environ.get(f"{prefix}_HTTP_PORT") or DEFAULT_PORTS[name]
            url = f"http://127.0.0.1:{port}"
        services[name] = url.rstrip("/")
    return Targets(
        services=services,
        nats_url=environ.get("LECTERN_NATS_URL", "nats://127.0.0.1:4222"),
        database_url=environ.get(
            "LECTERN_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
        ),
        source="environment",
    )


def env_prefix(name: str) -> str:
    """The variables' prefix of a process: ``LECTERN_GATEWAY_WORKER`` for ``gateway-worker``."""
    return "LECTERN_" + name.upper().replace("-", "_")


async def collect_status(targets: Targets, *, timeout: float = 3.0) -> dict[str, Any]:
    """Ask every service, NATS and Postgres; one JSON-ready dict with ``healthy``."""
    services, nats_part, pg_part = await asyncio.gather(
        _services(targets, timeout), _jetstream(targets.nats_url, timeout),
        _postgres(targets.database_url, timeout),
    )  # fmt: skip
    problems = list(targets.problems)
    problems += [f"{name} is not ready" for name, info in services.items() if not info["ready"]]
    if not nats_part["nats"]["ok"]:
        problems.append(f"NATS: {nats_part['nats'].get('error')}")
    if not pg_part["postgres"]["ok"]:
        problems.append(f"Postgres: {pg_part['postgres'].get('error')}")
    if not services:
        problems.append("no services to check")
    stack = None
    if targets.stack is not None:
        keys = ("running", "pid", "data_dir", "started_at", "time_to_ready_s", "logs_dir")
        stack = {key: targets.stack.get(key) for key in keys}
    return {
        "source": targets.source,
        "stack": stack,
        "services": services,
        **nats_part,
        **pg_part,
        "healthy": not problems,
        "problems": problems,
    }


async def _services(targets: Targets, timeout: float) -> dict[str, Any]:
    import httpx

    async def probe(client: httpx.AsyncClient, name: str, url: str) -> dict[str, Any]:
        info: dict[str, Any] = {"url": url, "ready": False, "checks": {}}
        if targets.stack is not None:
            recorded = targets.stack.get("services", {}).get(name, {})
            info.update({k: recorded.get(k) for k in ("pid", "state", "restarts")})
        try:
            response = await client.get(f"{url}/readyz")
        except httpx.HTTPError as exc:
            info["error"] = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            return info
        info["ready"] = response.status_code == 200
        info["status_code"] = response.status_code
        try:
            body = response.json()
        except ValueError:
            body = {}
        if isinstance(body, dict) and isinstance(body.get("checks"), dict):
            info["checks"] = body["checks"]
        return info

    async with httpx.AsyncClient(timeout=timeout) as client:
        names = list(targets.services)
        results = await asyncio.gather(
            *(probe(client, name, targets.services[name]) for name in names)
        )
    return dict(zip(names, results, strict=True))


async def _jetstream(url: str, timeout: float) -> dict[str, Any]:
    import nats
    from nats.errors import Error as NatsError

    result: dict[str, Any] = {
        "nats": {"url": redact(url), "ok": False},
        "streams": {},
        "consumers": {},
    }
    if not url:
        result["nats"]["error"] = "no NATS URL"
        return result

    async def quiet(_: Exception) -> None:
        return None

    try:
        # nats-py retries forever with max_reconnect_attempts=0 or allow_reconnect=False when
        # the first connect is refused; one attempt plus an overall timeout ends it.
        async with asyncio.timeout(timeout * 2 + 1):
            nc = await nats.connect(
                [s.strip() for s in url.split(",") if s.strip()],  # a cluster's servers
                connect_timeout=timeout, max_reconnect_attempts=1, reconnect_time_wait=0.1,
                error_cb=quiet,
            )  # fmt: skip
    except (OSError, NatsError, TimeoutError) as exc:
        result["nats"]["error"] = f"cannot connect: {exc or type(exc).__name__}"
        return result
    try:
        jsm = nc.jsm()
        for stream in await jsm.streams_info():
            name = stream.config.name
            assert name is not None
            result["streams"][name] = {
                "subjects": list(stream.config.subjects or []),
                "messages": stream.state.messages,
                "bytes": stream.state.bytes,
                "consumers": stream.state.consumer_count,
            }
            consumers: dict[str, Any] = {}
            for consumer in await jsm.consumers_info(name):
                consumers[consumer.name] = {
                    "pending": consumer.num_pending or 0,
                    "ack_pending": consumer.num_ack_pending or 0,
                    "redelivered": consumer.num_redelivered or 0,
                    "waiting": consumer.num_waiting or 0,
                }
            result["consumers"][name] = consumers
        result["nats"]["ok"] = True
    except (OSError, NatsError, TimeoutError) as exc:
        result["nats"]["error"] = f"JetStream: {exc or type(exc).__name__}"
    finally:
        await nc.close()
    return result


async def _postgres(dsn: str, timeout: float) -> dict[str, Any]:
    import asyncpg

    result: dict[str, Any] = {
        "postgres": {"url": redact(dsn), "ok": False}, "documents": {}, "chunks": {},
    }  # fmt: skip
    if not dsn:
        result["postgres"]["error"] = "no database URL"
        return result
    try:
        conn = await asyncpg.connect(dsn, timeout=timeout)
    except (OSError, asyncpg.PostgresError, TimeoutError) as exc:
        result["postgres"]["error"] = f"cannot connect: {exc or type(exc).__name__}"
        return result
    try:
        migrated = await conn.fetchval("SELECT to_regclass('public.documents') IS NOT NULL")
        if not migrated:
            result["postgres"]["error"] = "schema missing (run `lectern migrate`)"
            return result
        documents = dict.fromkeys(DOCUMENT_STATUSES, 0)
        for row in await conn.fetch("SELECT status, count(*) AS n FROM documents GROUP BY 1"):
            documents[row["status"]] = row["n"]
        result["documents"] = {**documents, "total": sum(documents.values())}
        chunks = {"active": 0, "inactive": 0}
        for row in await conn.fetch("SELECT active, count(*) AS n FROM chunks GROUP BY 1"):
            chunks["active" if row["active"] else "inactive"] = row["n"]
        result["chunks"] = {**chunks, "total": chunks["active"] + chunks["inactive"]}
        result["postgres"]["migrations"] = [
            r["version"]
            for r in await conn.fetch("SELECT version FROM schema_migrations ORDER BY 1")
        ]
        result["postgres"]["ok"] = True
    except (OSError, asyncpg.PostgresError, TimeoutError) as exc:
        result["postgres"]["error"] = str(exc)
    finally:
        await conn.close()
    return result


def redact(url: str) -> str:
    """``url`` without its password."""
    return re.sub(r"(://[^:/@]+):[^@]*@", r"\1:***@", url)


def render(status: Mapping[str, Any]) -> str:
    """The human-readable report."""
    lines = [f"Lectern status ({status['source']})", "", "services"]
    width = max([10, *(len(name) for name in status["services"])])  # retriever-2 in a cluster
    for name, info in status["services"].items():
        state = "ready" if info["ready"] else "NOT READY"
        detail = info.get("error") or ", ".join(
            f"{k}={v}" for k, v in info.get("checks", {}).items() if v != "ok"
        )
        if not info["ready"] and info.get("state"):
            detail = f"[{info['state']}, {info.get('restarts') or 0} restarts] {detail}"
        lines.append(f"  {name:<{width}} {info['url']:<26} {state:<10} {detail}".rstrip())
    nats_info = status["nats"]
    lines += [
        "",
        f"JetStream ({nats_info['url']}): {'ok' if nats_info['ok'] else nats_info.get('error')}",
    ]
    for name, stream in status["streams"].items():
        lines.append(f"  {name:<28} {stream['messages']:>8} msgs  {stream['consumers']} consumers")
        for consumer, counts in status["consumers"].get(name, {}).items():
            lines.append(
                f"    {consumer:<26} pending {counts['pending']}, ack pending "
                f"{counts['ack_pending']}, redelivered {counts['redelivered']}"
            )
    from lectern_common.broker import stream_for
    from lectern_common.events import Subjects

    # where consumers park the messages they give up on (MessageParked)
    dead_letter = stream_for(Subjects.DEAD_LETTER).name
    parked = status["streams"].get(dead_letter, {}).get("messages", 0)
    if parked:
        lines.append(
            f"  {parked} parked message(s) a consumer gave up on: nats stream view {dead_letter}"
        )
    pg = status["postgres"]
    lines += ["", f"Postgres ({pg['url']}): {'ok' if pg['ok'] else pg.get('error')}"]
    if status["documents"]:
        docs = ", ".join(f"{k} {v}" for k, v in status["documents"].items())
        chunks = ", ".join(f"{k} {v}" for k, v in status["chunks"].items())
        lines += [f"  documents: {docs}", f"  chunks:    {chunks}"]
    lines.append("")
    if status["healthy"]:
        lines.append("healthy")
    else:
        lines.append("UNHEALTHY:")
        lines += [f"  - {problem}" for problem in status["problems"]]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """Print the status; exit 0 when healthy, 1 otherwise."""
    targets = resolve_targets(args.data_dir, os.environ)
    status = asyncio.run(collect_status(targets, timeout=args.timeout))
    print(json.dumps(status, indent=2, default=str) if args.json else render(status))
    return 0 if status["healthy"] else 1
