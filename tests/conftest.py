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


# --- two workers (pytest-xdist, `make test`) ------------------------------------------------

#: tests that kill servers and processes and wait for them on deadlines: they run one after
#: another on one worker (while the other worker runs the rest), never two at once on the
#: machine's two cores
FAULTS = (
    "tests/e2e/",
    "tests/common/test_nats_cluster.py",
    "tests/common/test_read_replica.py",
    "tests/gateway/test_chat_takeover.py",
    "tests/gateway/test_outbox.py",
    "tests/cli/test_supervisor",
)


#: run in a pytest process of their own (`make test`): grouped, schemathesis's tests collect as
#: one item instead of one per route
APART = frozenset({"tests/gateway/test_openapi_fuzz.py"})


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under ``--dist loadgroup`` a test file runs whole on one worker (its module fixtures
    start once, and a file's later tests may read what its earlier ones left, as the fuzz
    test's request count does), and the fault tests share one worker."""
    for item in items:
        path = item.nodeid.split("::", 1)[0]
        if path in APART:
            continue
        group = "faults" if path.startswith(FAULTS) else path
        item.add_marker(pytest.mark.xdist_group(group))
