"""lectern_client/models.py is generated from docs/openapi.json: regenerated into a temporary
file, it must equal the committed one (run `make client-models` after changing the API)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "clients" / "python" / "scripts" / "generate_models.py"
COMMITTED = ROOT / "clients" / "python" / "src" / "lectern_client" / "models.py"


def test_the_committed_models_are_current(tmp_path: Path) -> None:
    fresh = tmp_path / "models.py"
    subprocess.run([sys.executable, str(SCRIPT), "--output", str(fresh)], check=True)
    assert fresh.read_text(encoding="utf-8") == COMMITTED.read_text(encoding="utf-8"), (
        "clients/python/src/lectern_client/models.py is stale: run `make client-models`"
    )


def test_every_schema_of_the_api_has_a_model() -> None:
    import json

    from lectern_client import models

    schemas = json.loads((ROOT / "docs" / "openapi.json").read_text())["components"]["schemas"]
    missing = [
        name
        for name in schemas
        if not hasattr(models, name.replace("lectern_gateway__", "").split("__")[-1])
        and not any(hasattr(models, n) for n in _generated_names(name))
    ]
    assert missing == []


def _generated_names(schema: str) -> list[str]:
    """Qualified schema names (``lectern_gateway__feedback__gaps__GapTopic``) become one
    CamelCase name."""
    parts = [p for chunk in schema.split("__") for p in chunk.split("_")]
    return ["".join(p[:1].upper() + p[1:] for p in parts)]
