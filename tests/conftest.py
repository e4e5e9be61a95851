"""Shared test configuration; the real-server fixtures come from the lectern_testing plugin."""

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


# --- a suite that never skips for something the project can install -----------------------

#: skip reasons that name a tool the project installs (`make system-deps`, as root)
INSTALLABLE = ("tesseract not installed", "Chromium is not installed")
_skipped_for_tools: list[str] = []


def _can_install() -> bool:
    import shutil

    return os.geteuid() == 0 and shutil.which("apt-get") is not None


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Remember tests skipped for a tool the project could have installed."""
    if report.skipped and isinstance(report.longrepr, tuple):
        reason = str(report.longrepr[2])
        if any(tool in reason for tool in INSTALLABLE):
            _skipped_for_tools.append(f"{report.nodeid}: {reason}")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Where the project could have installed the missing tool (root with apt-get, as in
    CI), a test skipped for lack of it fails the run: a skipped test tests nothing."""
    if _skipped_for_tools and _can_install() and exitstatus == 0:
        lines = "\n  ".join(_skipped_for_tools)
        print(f"\nskipped for a tool `make system-deps` installs (`make test` runs it):\n  {lines}")
        session.exitstatus = 1
