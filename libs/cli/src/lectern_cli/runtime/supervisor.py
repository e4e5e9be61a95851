"""The embedded stack: Postgres, NATS, migrations and the five services as child processes,
with the gateway's worker (``python -m lectern_gateway worker``: its sweeps, gap closures and
webhook deliveries) beside the gateway.

``Supervisor.run()`` is what ``lectern up`` runs in the foreground (``cluster=True`` for
``lectern up --cluster``: a 3-node NATS cluster, streams and consumers at 3 replicas, and two
replicas of every service). It restarts a service
that crashes (exponential backoff, and it gives up on one that crash-loops) and a NATS
server that dies (``nats_restart_after_s`` later, on its ports and store, as a StatefulSet
restarts its pod), polls every
service's ``/readyz``, and on SIGINT/SIGTERM stops the services (SIGTERM, their graceful
timeout, then SIGKILL) before NATS and Postgres. Its state goes to ``DATA_DIR/stack.json``
so ``lectern status`` can find the stack.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any

from lectern_cli.runtime.children import (
    Child,
    die_with_parent,
    log_tail,
    preferred_or_free_port,
    probe_ready,
)
from lectern_cli.runtime.processes import (
    CLUSTER_NATS_SERVERS,
    CLUSTER_SERVICE_REPLICAS,
    DATABASE_SERVICES,
    DEFAULT_NATS_MONITOR_PORT,
    DEFAULT_NATS_PORT,
    DEFAULT_PORTS,
    GATEWAY_WORKER,
    GATEWAY_WORKER_PORT,
    READ_REPLICA_SERVICES,
    REPLICA_PORT_STEP,
    SERVICES,
    service_command,
)
from lectern_cli.runtime.settings import embedding_identity, load_settings
from lectern_cli.runtime.state import (
    create_time,
    nats_credentials_path,
    nats_entry,
    postgres_entry,
    process_alive,
    read_state,
    replica_entry,
    services_entry,
    terminate_pid,
    write_nats_credentials,
    write_state,
)
from lectern_common.backoff import backoff_delay
from lectern_common.errors import ConfigurationError
from lectern_common.nats_auth import (
    ADMIN_USER,
    authorization_config,
    nats_user,
    new_credentials,
)
from lectern_common.runtime.nats import EmbeddedNats, EmbeddedNatsCluster, free_port, port_is_free
from lectern_common.runtime.postgres import DEFAULT_ROOT_ACCOUNT, EmbeddedPostgres, EmbeddedReplica
from lectern_common.settings import BaseServiceSettings

log = logging.getLogger(__name__)

Reporter = Callable[[str], None]
CommandFor = Callable[[str], list[str]]
ReadyHook = Callable[["Supervisor"], None]


class Supervisor:
    """Runs the embedded stack; see the module docstring."""

    def __init__(
        self,
        *,
        data_dir: Path,
        gateway_port: int = DEFAULT_PORTS["gateway"],
        nats_port: int | None = None,
        nats_monitor_port: int | None = None,
        pg_user: str | None = None,
        create_pg_user: bool = False,
        services: tuple[str, ...] = SERVICES,
        graceful_timeout_s: float = 30.0,
        backoff_initial_s: float = 1.0,
        backoff_max_s: float = 30.0,
        crash_loop_limit: int = 5,
        stable_after_s: float = 60.0,
        settings: BaseServiceSettings | None = None,
        report: Reporter | None = None,
        command: CommandFor = service_command,
        on_ready: ReadyHook | None = None,
        cluster: bool = False,
        nats_restart_after_s: float = 2.0,
        worker: bool = True,
    ) -> None:
        unknown = set(services) - set(SERVICES)
        if unknown:
            raise ConfigurationError(f"unknown services: {sorted(unknown)}; known: {SERVICES}")
        self.data_dir = data_dir.resolve()
        self.host = "127.0.0.1"
        self.services = services
        #: a gateway worker beside each gateway (its background work: sweeps, webhooks)
        self.worker = worker
        #: a 3-node NATS cluster and two processes per service instead of one of each
        self.cluster = cluster
        self.replicas = CLUSTER_SERVICE_REPLICAS if cluster else 1
        self.graceful_timeout_s = graceful_timeout_s
        #: after SIGTERM, how long a service gets before SIGKILL (uvicorn needs a moment more)
        self.kill_after_s = graceful_timeout_s + 5.0
        self.command = command
        #: called once, the first time every service is ready (must not block: start a thread)
        self.on_ready = on_ready
        self.backoff_initial_s = backoff_initial_s
        self.backoff_max_s = backoff_max_s
        self.crash_loop_limit = crash_loop_limit
        self.stable_after_s = stable_after_s
        #: how long a dead NATS server stays down before it is started again
        self.nats_restart_after_s = nats_restart_after_s
        #: dead NATS servers by name: when they are due to start again, failed starts so far
        self._nats_down: dict[str, tuple[float, int]] = {}
        self.settings = settings or load_settings()
        self.report: Reporter = report or log.info
        self.pg_user = pg_user
        self.create_pg_user = create_pg_user
        self.logs_dir = self.data_dir / "logs"
        self._gateway_port = gateway_port
        self._nats_port = nats_port
        self._nats_monitor_port = nats_monitor_port
        self.postgres: EmbeddedPostgres | None = None
        #: ``cluster``: a streaming read replica of ``postgres``
        self.postgres_replica: EmbeddedReplica | None = None
        self.nats: EmbeddedNats | EmbeddedNatsCluster | None = None
        self.nats_passwords: dict[str, str] = {}
        self.children: dict[str, Child] = {}
        self.started_monotonic = 0.0
        self.started_at = ""
        self.all_ready_after: float | None = None
        self.stop_requested = threading.Event()
        self._force = False
        self._next_poll = 0.0
        self._running = False
        self._owns_state = False

    # -- start -------------------------------------------------------------------------------

    def _service_port(self, name: str, replica: int = 0) -> int:
        if replica > 0:
            return self._replica_port(name, replica)
        if name == "gateway":
            if self._gateway_port == 0:
                return free_port(self.host)
            if not port_is_free(self._gateway_port, self.host):
                raise ConfigurationError(
                    f"port {self._gateway_port} on {self.host} is in use; choose another with "
                    f"--port (is another stack running?)"
                )
            return self._gateway_port
        configured = os.environ.get(f"LECTERN_{name.upper()}_HTTP_PORT")
        if configured:
            return int(configured)
        return preferred_or_free_port(DEFAULT_PORTS[name], self.host)

    def _replica_port(self, name: str, replica: int) -> int:
        """A further replica's port: its service's plus 10 when free (gateway-2 on 8010), any
        free one when the first replica's port was picked at random or set by a variable."""
        taken = {child.port for child in self.children.values()}
        base = self._gateway_port if name == "gateway" else DEFAULT_PORTS[name]
        configured = name != "gateway" and os.environ.get(f"LECTERN_{name.upper()}_HTTP_PORT")
        port = free_port(self.host)
        if base and not configured:
            port = preferred_or_free_port(base + REPLICA_PORT_STEP * replica, self.host)
        while port in taken:
            port = free_port(self.host)
        return port

    def _worker_port(self, replica: int) -> int:
        """The gateway worker's health port: ``LECTERN_GATEWAY_WORKER_HTTP_PORT`` (the first),
        else 8005 (8015 ...) when free, else any free one."""
        configured = os.environ.get("LECTERN_GATEWAY_WORKER_HTTP_PORT")
        if configured and replica == 0:
            return int(configured)
        taken = {child.port for child in self.children.values()}
        port = preferred_or_free_port(GATEWAY_WORKER_PORT + REPLICA_PORT_STEP * replica, self.host)
        while port in taken:
            port = free_port(self.host)
        return port

    def _add_children(self) -> None:
        """Every process, one by one (a port avoids those taken before): each replica's
        services, then a gateway worker per gateway."""
        self.children = {}
        for replica in range(self.replicas):
            for service in self.services:
                name = service if replica == 0 else f"{service}-{replica + 1}"
                self.children[name] = Child(
                    name=name,
                    service=service,
                    port=self._service_port(service, replica),
                    log_path=self.logs_dir / f"{name}.log",
                )
        if "gateway" not in self.services or not self.worker:
            return
        for replica in range(self.replicas):
            name = GATEWAY_WORKER if replica == 0 else f"{GATEWAY_WORKER}-{replica + 1}"
            self.children[name] = Child(
                name=name,
                service="gateway",
                args=("worker",),
                port=self._worker_port(replica),
                log_path=self.logs_dir / f"{name}.log",
            )

    def _nats_ports(self) -> tuple[int, int]:
        def pick(given: int | None, default: int) -> int:
            if given is not None:
                return given or free_port(self.host)
            port = preferred_or_free_port(default, self.host)
            if port != default:
                self.report(f"port {default} is in use; NATS uses {port} instead")
            return port

        return pick(self._nats_port, DEFAULT_NATS_PORT), pick(
            self._nats_monitor_port, DEFAULT_NATS_MONITOR_PORT
        )

    def _embedded_nats(self) -> EmbeddedNats | EmbeddedNatsCluster:
        nats_port, monitor_port = self._nats_ports()
        authorization = authorization_config(self.nats_passwords)
        if not self.cluster:
            return EmbeddedNats(
                self.data_dir / "nats",
                port=nats_port,
                monitor_port=monitor_port,
                host=self.host,
                authorization=authorization,
            )
        # the first server on the chosen ports, the others on the next ones when free
        ports, monitor_ports = [nats_port], [monitor_port]
        taken = {nats_port, monitor_port, *(child.port for child in self.children.values())}

        def pick(preferred: int) -> int:
            port = preferred_or_free_port(preferred, self.host)
            while port in taken:
                port = free_port(self.host)
            taken.add(port)
            return port

        for i in range(1, CLUSTER_NATS_SERVERS):
            ports.append(pick(nats_port + i))
            monitor_ports.append(pick(monitor_port + i))
        return EmbeddedNatsCluster(
            self.data_dir / "nats",
            size=CLUSTER_NATS_SERVERS,
            host=self.host,
            authorization=authorization,
            ports=ports,
            monitor_ports=monitor_ports,
        )

    def _check_not_running(self) -> None:
        previous = read_state(self.data_dir)
        if previous is None:
            return
        if previous.get("running") and process_alive(
            previous.get("pid"), previous.get("pid_create_time")
        ):
            raise ConfigurationError(
                f"a Lectern stack already runs from {self.data_dir} (supervisor pid "
                f"{previous['pid']}); stop it first (Ctrl-C or kill -TERM {previous['pid']})"
            )
        # A supervisor killed hard leaves children behind; they hold the ports and the data.
        leftovers: list[tuple[str, dict[str, Any]]] = [
            (f"service {name}", info) for name, info in previous.get("services", {}).items()
        ]
        leftovers += [
            ("NATS", previous.get("nats", {})),
            *(("NATS", node) for node in previous.get("nats", {}).get("nodes", [])[1:]),
            ("Postgres read replica", previous.get("postgres_replica", {})),
            ("Postgres", previous.get("postgres", {})),
        ]
        for what, info in leftovers:
            pid = info.get("pid")
            if pid and process_alive(pid, info.get("pid_create_time")):
                self.report(f"stopping {what} (pid {pid}) left over from a previous run")
                terminate_pid(pid, timeout=self.kill_after_s)

    def start(self) -> None:
        """Start NATS, the services, Postgres, and migrate; returns once all are spawned."""
        self.started_monotonic = time.monotonic()
        self.started_at = datetime.now(UTC).isoformat()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.logs_dir.mkdir(exist_ok=True)
        self._check_not_running()
        self._owns_state = True
        self._add_children()
        self._running = True
        self.write_state()
        self.postgres = self._embedded_postgres()
        if self.cluster:
            # its DSN is known before it exists: the services get it at spawn, and read from
            # the primary until the replica answers
            self.postgres_replica = EmbeddedReplica(
                self.data_dir / "postgres-replica",
                primary=self.postgres,
                run_as=self.pg_user,
                create_user=self.create_pg_user,
            )
        self.nats_passwords = new_credentials(list(self.services))
        write_nats_credentials(self.data_dir, self.nats_passwords)
        self.nats = self._embedded_nats()
        self.nats.start()
        what = (
            f"a {CLUSTER_NATS_SERVERS}-server cluster, streams at {CLUSTER_NATS_SERVERS} replicas"
            if self.cluster
            else "JetStream"
        )
        self.report(
            f"NATS ({what}) on {self.nats.url}, store {self.data_dir / 'nats'}; one user per "
            f"service, passwords in {nats_credentials_path(self.data_dir)}"
        )
        if self.cluster:
            self._declare_streams()
        # Services spend most of their start-up importing torch and loading models; they wait
        # for the schema themselves, so Postgres and the migrations overlap with that.
        for child in self.children.values():
            self.spawn(child)
        self.write_state()
        self.postgres.start()
        self.report(f"Postgres (pgvector) at {self.postgres.dsn}")
        self._migrate()
        if self.postgres_replica is not None:
            self.postgres_replica.start()
            self.report(
                f"Postgres read replica (streaming, pg_basebackup) at {self.postgres_replica.dsn}; "
                f"{', '.join(READ_REPLICA_SERVICES)} read from it"
            )
        self.write_state()
        self.report(self.summary())

    def _declare_streams(self) -> None:
        """Create the streams at 3 replicas once, before the services start: ten processes
        creating replicated streams at once time out in the cluster's meta group (measured:
        4 of 10 services restarted once at start-up)."""
        from lectern_common.broker import ensure_streams

        assert self.nats is not None
        servers = self.nats.url.split(",")
        password = self.nats_passwords[ADMIN_USER]

        async def declare() -> None:
            import nats

            nc = await nats.connect(servers, user=ADMIN_USER, password=password)
            try:
                await ensure_streams(nc.jetstream(), replicas=CLUSTER_NATS_SERVERS)
            finally:
                await nc.close()

        asyncio.run(declare())

    def summary(self) -> str:
        """Where everything is: URLs, DSN, data and logs."""
        state = self.state()
        nats, postgres = state["nats"], state["postgres"]
        replica = state.get("postgres_replica")
        replica_line = f"  replica    {replica['dsn']}  (reads)\n" if replica else ""
        return (
            "\nLectern embedded stack\n"
            f"  gateway    {state['gateway_url'] or '(not run)'}\n"
            f"  web UI     {state['ui_url'] or '(not run)'}\n"
            f"  API docs   {state['docs_url'] or '(not run)'}\n"
            f"  NATS       {nats.get('url')}  (monitoring {nats.get('monitor_url')})\n"
            f"  Postgres   {postgres.get('dsn')}\n"
            f"{replica_line}"
            f"  data dir   {state['data_dir']}\n"
            f"  logs       {state['logs_dir']}\n"
            f"waiting for {', '.join(self.children)} to be ready...\n"
        )

    def _embedded_postgres(self) -> EmbeddedPostgres:
        if os.geteuid() == 0:
            account = self.pg_user or DEFAULT_ROOT_ACCOUNT
            creation = (
                f"{account!r} is created if missing, as asked (--create-pg-user)"
                if self.create_pg_user
                else "no system account is ever created unless you pass --create-pg-user"
            )
            self.report(
                f"running as root: Postgres refuses root, so the embedded Postgres runs as the "
                f"existing account {account!r} (choose another with --pg-user NAME); {creation}"
            )
        return EmbeddedPostgres(
            self.data_dir / "postgres", run_as=self.pg_user, create_user=self.create_pg_user
        )

    def _migrate(self) -> None:
        from lectern_common.db import migrate

        assert self.postgres is not None
        model, dim = embedding_identity(self.settings)
        applied = asyncio.run(migrate(self.postgres.dsn, embedding_model=model, embedding_dim=dim))
        if applied:
            self.report(f"applied migrations {applied} (embeddings: {model}, {dim} dimensions)")
        else:
            self.report("database schema up to date")

    def child_env(self, child: Child) -> dict[str, str]:
        """The environment of one service process."""
        prefix = f"LECTERN_{child.service.upper()}_"
        env = dict(os.environ)
        if self.nats is not None:
            env["LECTERN_NATS_URL"] = self.nats.url
            if self.cluster:
                env["LECTERN_STREAM_REPLICAS"] = str(CLUSTER_NATS_SERVERS)
            user = nats_user(child.service)
            env["LECTERN_NATS_USER"] = user
            env["LECTERN_NATS_PASSWORD"] = self.nats_passwords[user]
        if self.postgres is not None and child.service in DATABASE_SERVICES:
            env["LECTERN_DATABASE_URL"] = self.postgres.dsn
        if self.postgres_replica is not None and child.service in READ_REPLICA_SERVICES:
            env["LECTERN_DATABASE_READ_URL"] = self.postgres_replica.dsn
        env.update(
            {
                "LECTERN_SERVICE_NAME": child.service_name,
                "LECTERN_HEALTH_HOST": self.host,
                f"{prefix}HTTP_PORT": str(child.port),
                f"{prefix}GRACEFUL_TIMEOUT_S": str(self.graceful_timeout_s),
                "PYTHONUNBUFFERED": "1",
                # Nothing may download model weights at run time.
                "HF_HUB_OFFLINE": "1",
                "TRANSFORMERS_OFFLINE": "1",
                "TOKENIZERS_PARALLELISM": "false",
            }
        )
        env.setdefault("LECTERN_ENVIRONMENT", "development")
        env.setdefault("LECTERN_LOG_JSON", "true")
        return env

    def spawn(self, child: Child) -> None:
        """Start (or restart) one service process, its output appended to its log."""
        child.starts += 1
        child.restart_at = None
        child.ready = False
        child.ready_at = None
        child.checks = {}
        with open(child.log_path, "ab") as log_file:
            stamp = datetime.now(UTC).isoformat()
            log_file.write(f"--- lectern: start #{child.starts} at {stamp}\n".encode())
            log_file.flush()
            child.process = subprocess.Popen(
                [*self.command(child.service), *child.args],
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                env=self.child_env(child),
                cwd=self.data_dir,
                start_new_session=True,  # Ctrl-C reaches the supervisor only; it stops in order
                preexec_fn=die_with_parent,  # only the main thread spawns children
            )
        child.started_at = time.monotonic()

    # -- watch -------------------------------------------------------------------------------

    def poll(self) -> None:
        """Restart crashed services when their backoff is over; refresh readiness."""
        now = time.monotonic()
        changed = False
        for child in self.children.values():
            if child.failed:
                continue
            if child.restart_at is not None:
                if now >= child.restart_at:
                    self.report(f"restarting {child.name} (start #{child.starts + 1})")
                    self.spawn(child)
                    changed = True
                continue
            if child.process is not None and child.process.poll() is not None:
                self._crashed(child, now)
                changed = True
        changed |= self._watch_nats(now)
        if now >= self._next_poll:
            changed |= self._poll_readiness()
            all_ready = self._all_ready()
            self._next_poll = time.monotonic() + (5.0 if all_ready else 0.5)
        if changed:
            self.write_state()

    def _nats_servers(self) -> list[EmbeddedNats]:
        if self.nats is None:
            return []
        return self.nats.nodes if isinstance(self.nats, EmbeddedNatsCluster) else [self.nats]

    def _watch_nats(self, now: float) -> bool:
        """Start a dead NATS server again on its ports and store, ``nats_restart_after_s``
        after it was found dead (a start that fails is tried again as long after; after
        ``crash_loop_limit`` failed starts in a row it is given up with the reason)."""
        changed = False
        for server in self._nats_servers():
            name = server.server_name or "nats"
            if server.process is None or server.running:
                continue
            down = self._nats_down.get(name)
            if down is None:
                self._nats_down[name] = (now + self.nats_restart_after_s, 0)
                self.report(
                    f"NATS server {name} ({server.url}) exited with code "
                    f"{server.process.returncode}; starting it again in "
                    f"{self.nats_restart_after_s:g} s (its store is kept)"
                )
                changed = True
                continue
            due, failures = down
            if now < due or failures >= self.crash_loop_limit:
                continue
            try:
                server.start()
            except ConfigurationError as exc:
                failures += 1
                self._nats_down[name] = (now + self.nats_restart_after_s, failures)
                given_up = failures >= self.crash_loop_limit
                self.report(
                    f"ERROR: NATS server {name} did not start again ({exc}); "
                    + ("not trying again" if given_up else "trying again")
                )
                continue
            del self._nats_down[name]
            self.report(f"NATS server {name} started again on {server.url}")
            changed = True
        return changed

    def _crashed(self, child: Child, now: float) -> None:
        assert child.process is not None
        child.last_exit = child.process.returncode
        child.ready = False
        uptime = now - child.started_at
        child.consecutive_crashes = (
            1 if uptime >= self.stable_after_s else (child.consecutive_crashes + 1)
        )
        tail = log_tail(child.log_path, 8)
        if child.consecutive_crashes >= self.crash_loop_limit:
            child.failed = True
            self.report(
                f"ERROR: {child.name} is crash-looping ({child.consecutive_crashes} crashes in a "
                f"row, last exit code {child.last_exit}); not restarting it again. "
                f"See {child.log_path}; last lines:\n{tail}"
            )
            return
        delay = backoff_delay(
            child.consecutive_crashes, first_s=self.backoff_initial_s, max_s=self.backoff_max_s
        )
        child.restart_at = now + delay
        self.report(
            f"{child.name} exited with code {child.last_exit} after {uptime:.1f} s; restarting "
            f"in {delay:.0f} s (crash {child.consecutive_crashes}/{self.crash_loop_limit}; "
            f"log {child.log_path})"
        )

    def _poll_readiness(self) -> bool:
        changed = False
        for child in self.children.values():
            if child.process is None or child.process.poll() is not None or child.failed:
                continue
            ready, checks = probe_ready(child.url, timeout=1.0)
            if checks:
                child.checks = checks
            if ready and not child.ready:
                child.ready = True
                first = child.ready_at is None
                child.ready_at = time.monotonic()
                changed = True
                if not first or self.all_ready_after is not None:
                    self.report(f"{child.name} is ready again")
            elif not ready and child.ready:
                child.ready = False
                changed = True
                self.report(f"{child.name} is not ready: {checks or 'no answer'}")
        if self.all_ready_after is None and self._all_ready():
            self.all_ready_after = time.monotonic() - self.started_monotonic
            self.report(self.readiness_table())
            self.report(
                f"ready: {', '.join(self.children)} ({self.all_ready_after:.1f} s after the "
                f"stack started); press Ctrl-C to stop"
            )
            changed = True
            if self.on_ready is not None:
                try:
                    self.on_ready(self)
                except Exception as exc:  # a broken hook must not take the stack down
                    log.exception("on_ready hook failed")
                    self.report(f"after start-up: {exc}")
        return changed

    def _all_ready(self) -> bool:
        return bool(self.children) and all(c.ready for c in self.children.values())

    def readiness_table(self) -> str:
        """A plain-text table of the services, their URLs and readiness."""
        rows = [("service", "url", "state", "ready after", "pid", "restarts")]
        for child in self.children.values():
            pid = child.process.pid if child.process is not None else "-"
            after = f"{child.ready_at - self.started_monotonic:.1f} s" if child.ready_at else "-"
            rows.append(
                (child.name, child.url, child.state, after, str(pid), str(child.starts - 1))
            )
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        return "\n".join(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
            for row in rows
        )

    # -- stop --------------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop the services (SIGTERM, grace, SIGKILL), then NATS, then Postgres."""
        alive = [
            c for c in self.children.values() if c.process is not None and c.process.poll() is None
        ]
        for child in alive:
            child.restart_at = None
            assert child.process is not None
            with contextlib.suppress(ProcessLookupError):
                child.process.send_signal(signal.SIGTERM)
        if alive:
            self.report(f"stopping {', '.join(c.name for c in alive)}")
        deadline = time.monotonic() + self.kill_after_s
        while time.monotonic() < deadline and not self._force:
            if all(c.process is None or c.process.poll() is not None for c in alive):
                break
            time.sleep(0.1)
        for child in alive:
            assert child.process is not None
            if child.process.poll() is None:
                self.report(f"{child.name} did not stop in time; killing it")
                child.process.kill()
            child.process.wait()
        for child in self.children.values():
            child.restart_at = None
            child.ready = False
        self._nats_down.clear()
        if self.nats is not None:
            self.nats.stop()
        if self.postgres_replica is not None:
            self.postgres_replica.stop()
        if self.postgres is not None:
            self.postgres.stop()
        was_running, self._running = self._running, False
        self.write_state()
        if was_running:
            self.report("stack stopped")

    def run(self, *, install_signal_handlers: bool = True) -> int:
        """Start, watch until SIGINT/SIGTERM (or ``stop_requested``), stop; the exit code."""
        if install_signal_handlers:
            signal.signal(signal.SIGINT, self._on_signal)
            signal.signal(signal.SIGTERM, self._on_signal)
        try:
            self.start()
            while not self.stop_requested.is_set():
                self.poll()
                self.stop_requested.wait(0.2)
        finally:
            self.stop()
        return 0

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self.stop_requested.is_set():
            self._force = True  # a second Ctrl-C: do not wait for the graceful shutdown
            return
        self.report(f"received {signal.Signals(signum).name}; stopping the stack")
        self.stop_requested.set()

    # -- state -------------------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        """What ``stack.json`` holds: pids, ports, URLs, data dir, readiness."""
        gateway = self.children.get("gateway")
        gateway_url = gateway.url if gateway else None
        pid = os.getpid()
        replica = replica_entry(self.postgres_replica, READ_REPLICA_SERVICES)
        return {
            "running": self._running,
            "pid": pid,
            "pid_create_time": create_time(pid),
            "data_dir": str(self.data_dir),
            "started_at": self.started_at,
            "updated_at": datetime.now(UTC).isoformat(),
            "all_ready": self._all_ready(),
            "time_to_ready_s": self.all_ready_after,
            "gateway_url": gateway_url,
            "docs_url": f"{gateway_url}/docs" if gateway_url else None,
            "ui_url": f"{gateway_url}/" if gateway_url else None,
            "logs_dir": str(self.logs_dir),
            "nats": nats_entry(
                self.nats,
                self._nats_servers(),
                self.data_dir,
                stream_replicas=CLUSTER_NATS_SERVERS if self.cluster else None,
            ),
            "postgres": postgres_entry(self.postgres),
            **({"postgres_replica": replica} if replica else {}),
            "services": services_entry(self.children.values()),
        }

    def write_state(self) -> None:
        """Write ``stack.json`` atomically (only a supervisor that owns the data dir)."""
        if not self._owns_state:
            return
        write_state(self.data_dir, self.state())
