"""Shared test configuration; the real-server fixtures come from the lectern_testing plugin."""

import os
from collections.abc import Iterator

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


# --- two workers (``make test`` runs pytest-xdist, ``--dist loadfile``) ----------------------

#: modules that start the whole stack through ``lectern up``'s supervisor (besides the e2e
#: ones): its services prefer fixed ports (8000-8004), so two stacks must not start at once
STACK_MODULES = (
    "tests/cli/test_cli_demo.py",
    "tests/cli/test_cli_main.py",
    "tests/cli/test_cli_status.py",
    "tests/cli/test_supervisor.py",
    "tests/cli/test_supervisor_cluster.py",
    "tests/common/test_read_replica.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The tests that run the whole stack hold ``one_stack_at_a_time`` for their module."""
    root = config.rootpath
    for item in items:
        module = item.path.relative_to(root).as_posix()
        if item.get_closest_marker("e2e") is not None or module in STACK_MODULES:
            item.add_marker(pytest.mark.usefixtures("one_stack_at_a_time"))


@pytest.fixture(scope="module")
def one_stack_at_a_time() -> Iterator[None]:
    """Under pytest-xdist each worker runs whole modules; a module that starts the whole
    stack waits here until no other worker's does (an exclusive lock on a file of this run),
    so that two stacks never race for the same ports. Without xdist it never waits."""
    import fcntl
    import tempfile
    from pathlib import Path

    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if run is None:
        yield
        return
    with (Path(tempfile.gettempdir()) / f"lectern-tests-{run}.stack.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
