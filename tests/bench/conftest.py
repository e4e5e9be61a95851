"""The benchmark scripts (``bench/``) as modules: ``bench_import("name")`` imports one with
``bench/`` on the path for the test module's run."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture(scope="module")
def bench_import() -> Iterator[Callable[[str], ModuleType]]:
    sys.path.insert(0, str(BENCH))
    try:
        yield importlib.import_module
    finally:
        sys.path.remove(str(BENCH))
