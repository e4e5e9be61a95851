"""How ``make test`` deals the suite to its pytest-xdist workers (``--dist loadfile``).

- **A file to a worker**, as xdist's ``loadfile`` does, except the files that read the
  shared documents (``lectern_testing.shared_reads.SHARED_READERS``), which are one scope:
  one worker runs them one after another and reads each document once for all of them.
- **The costliest scopes first.** xdist deals scopes by their number of tests, so the few
  long fault and end-to-end tests (a whole stack each, minutes) came last, and the run ended
  with one worker still on them and the other idle. Longest first is the classic remedy: the
  scopes in ``SECONDS`` (measured: the sum of a file's test durations in one run of the
  suite) go first, the costliest first, the others after as xdist orders them. A stale
  figure only changes the order.

Registered as a pytest plugin (``pytest11`` entry point ``lectern-scheduling``).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sized
from typing import Any

import pytest

from lectern_testing.shared_reads import SCOPE, SHARED_READERS, file_of

#: seconds a scope took in one run of the suite (2026-12-03, two workers; files over ~12 s)
SECONDS: dict[str, int] = {
    "tests/e2e/test_stack.py": 240,
    SCOPE: 110,
    "tests/ingest/test_service_shared_docs.py": 110,
    "tests/retriever/test_reindex.py": 95,
    "tests/e2e/test_cluster_stack.py": 95,
    "tests/common/test_embeddings.py": 80,
    "tests/common/test_nats_cluster.py": 60,
    "tests/eval/test_eval_answers_e2e.py": 45,
    "tests/cli/test_cli_inspect.py": 35,
    "tests/gateway/test_chat_takeover.py": 35,
    "tests/eval/test_eval_memory_e2e.py": 33,
    "tests/gateway/test_web_ui_browser.py": 30,
    "tests/cli/test_mcp.py": 30,
    "tests/gateway/test_grading.py": 29,
    "tests/gateway/test_outbox.py": 29,
    "tests/clients/test_typescript_client.py": 28,
    "tests/gateway/test_reprocess.py": 27,
    "tests/test_architecture.py": 25,
    "tests/deploy/test_k8s.py": 24,
    "tests/gateway/test_unavailable_dependencies.py": 23,
    "tests/gateway/test_lti.py": 18,
    "tests/eval/test_eval_retrieval_e2e.py": 17,
    "tests/ingest/test_service_worker.py": 16,
    "tests/gateway/test_lti_browser.py": 16,
    "tests/gateway/test_chat_provider_faults.py": 15,
}


def scope_of(nodeid: str) -> str:
    """A test's scope: its file, or ``SCOPE`` for the files that share the reads."""
    file = file_of(nodeid)
    return SCOPE if file in SHARED_READERS else file


def costliest_first(scopes: Mapping[str, Sized]) -> list[str]:
    """The scopes (each with its tests) in dealing order: those in ``SECONDS`` costliest
    first, then the others by their number of tests, most first (xdist's own order)."""
    return sorted(scopes, key=lambda scope: (-SECONDS.get(scope, 0), -len(scopes[scope])))


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadfile`` by ``scope_of``, the scopes dealt ``costliest_first`` (taken
    before xdist's own choice, which would otherwise win; other modes are xdist's)."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling  # type: ignore[import-untyped]

    class CostliestFirst(LoadFileScheduling):  # type: ignore[misc]
        ordered = False
        workqueue: OrderedDict[str, dict[str, bool]]  # xdist's: scope -> {nodeid: done}

        def _split_scope(self, nodeid: str) -> str:
            return scope_of(nodeid)

        def _assign_work_unit(self, node: Any) -> None:
            # the queue is complete when the first unit is dealt
            if not self.ordered:
                self.ordered = True
                queue = self.workqueue
                self.workqueue = OrderedDict((s, queue[s]) for s in costliest_first(queue))
            super()._assign_work_unit(node)

    return CostliestFirst(config, log)
