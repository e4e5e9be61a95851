"""How much the tutor's check questions are about what the student asked.

Reads a ``lectern eval-memory --json`` file (``make bench-memory`` writes
``/tmp/lectern-bench-memory.json``; give others to compare runs) and, for every tutor answer
to an ``ask`` step that ended with a check question, the share of the question's terms
(``lectern_common.text.terms``: stems of its content words) that the check's statement
carries, blank left out. Prints, per split, the checks, the mean share and the share of
checks carrying at least half of the question's terms. A proxy, not a teacher's judgment:
a check on the sentence that taught what was asked shares the question's terms; one on the
answer's framing sentence ("A rocket is fired vertically upward from the _____." for the
rocket's velocity) shares few.

    .venv/bin/python bench/check_focus.py [/tmp/lectern-bench-memory.json ...]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from lectern_common.text import terms

DEFAULT = Path("/tmp/lectern-bench-memory.json")
BLANK = "_____"


def shares(run: dict[str, Any], split: str) -> list[float]:
    """For each check asked after a question of ``split``, the share of its terms it carries."""
    out: list[float] = []
    for student in run["students"]:
        if student["split"] != split:
            continue
        for step in student["transcript"]:
            if step["step"] != "ask" or not step.get("check"):
                continue
            asked = set(terms(step["sent"]))
            if asked:
                checked = set(terms(str(step["check"]).replace(BLANK, " ")))
                out.append(len(asked & checked) / len(asked))
    return out


def main() -> int:
    """Print the figures of each run given (the default run's without arguments)."""
    paths = [Path(p) for p in sys.argv[1:]] or [DEFAULT]
    print(f"{'run':44} {'split':5} {'checks':>6} {'mean share':>10} {'>= half':>8}")
    for path in paths:
        run = json.loads(path.read_text())
        for split in ("dev", "test"):
            found = shares(run, split)
            if not found:
                continue
            mean = sum(found) / len(found)
            half = sum(s >= 0.5 for s in found) / len(found)
            print(f"{path!s:44} {split:5} {len(found):6} {mean:10.3f} {half:8.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
