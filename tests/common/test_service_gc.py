"""The garbage-collector settings a service process takes once it has started."""

import json
import subprocess
import sys

from lectern_common.service import GC_YOUNG_THRESHOLD

SCRIPT = """
import gc
import json
from lectern_common.service import settle_garbage_collector
loaded = [{"a": [i]} for i in range(50_000)]  # what start-up leaves alive (models, modules)
before = gc.get_threshold()
settle_garbage_collector()
print(json.dumps({"frozen": gc.get_freeze_count(), "tracked": len(gc.get_objects()),
                  "before": before, "after": gc.get_threshold()}))
"""


def test_settling_freezes_what_start_up_left_and_collects_the_young_less_often() -> None:
    # its own interpreter: the settings are process-wide, and pytest's must stay as they are
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, check=True, timeout=60
    )

    state = json.loads(out.stdout)
    assert state["frozen"] > 100_000, "the start-up objects are out of the collector's sight"
    assert state["tracked"] < 1_000
    assert state["after"] == [GC_YOUNG_THRESHOLD, *state["before"][1:]]
