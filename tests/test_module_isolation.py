"""Each test module starts with an empty uploads queue (``lectern_testing.plugin``): uploads
one module leaves undone do not reach the next module's ingest consumer in the same worker."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

#: leaves two uploads delivered to the real ingest consumer and never acknowledged
_LEAVES = """
from lectern_common.broker import INGEST_DURABLE, Subjects
from lectern_ingest.app import consumer_config
from lectern_ingest.config import Settings

async def test_leaves_uploads(jetstream):
    await jetstream.add_consumer("LECTERN_DOCUMENTS", consumer_config(Settings()))
    for n in range(2):
        await jetstream.publish(Subjects.DOCUMENTS_UPLOADED, b"left %d" % n)
    pull = await jetstream.pull_subscribe(
        Subjects.DOCUMENTS_UPLOADED, durable=INGEST_DURABLE, stream="LECTERN_DOCUMENTS"
    )
    assert len(await pull.fetch(2, timeout=10)) == 2
"""

#: finds them gone, and the consumer holding nothing
_FINDS = """
from lectern_common.broker import INGEST_DURABLE

async def test_finds_none(jetstream):
    assert (await jetstream.stream_info("LECTERN_DOCUMENTS")).state.messages == 0
    held = await jetstream.consumer_info("LECTERN_DOCUMENTS", INGEST_DURABLE)
    assert (held.num_pending, held.num_ack_pending) == (0, 0)
"""


def test_a_module_does_not_inherit_the_uploads_another_left(tmp_path: Path) -> None:
    (tmp_path / "test_a_leaves.py").write_text(_LEAVES)
    (tmp_path / "test_b_finds.py").write_text(_FINDS)
    (tmp_path / "pytest.ini").write_text(
        "[pytest]\naddopts = --import-mode=importlib\nasyncio_mode = auto\n"
        "asyncio_default_fixture_loop_scope = session\n"
        "asyncio_default_test_loop_scope = session\n"
    )
    environ = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
         "test_a_leaves.py", "test_b_finds.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, env=environ,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "2 passed" in done.stdout
