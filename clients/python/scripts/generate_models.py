"""Generate ``lectern_client/models.py`` from the gateway's OpenAPI document.

``make client-models`` runs it; ``tests/clients/test_client_models.py`` runs it into a temporary
file and fails when the committed models differ. The generated source goes through the
repository's ruff (fixes, then format) as if it were the committed file, so both agree.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
OPENAPI = ROOT / "docs" / "openapi.json"
TARGET = ROOT / "clients" / "python" / "src" / "lectern_client" / "models.py"
HEADER = "# Do not edit: `make client-models` regenerates this file from docs/openapi.json.\n"

#: datamodel-code-generator's options: pydantic v2 models for Python 3.11, constrained
#: aliases as ``TypeAliasType`` (no ``RootModel`` wrappers to build by hand), enums as literals
CODEGEN_OPTIONS = (
    "--input-file-type", "openapi",
    "--output-model-type", "pydantic_v2.BaseModel",
    "--target-python-version", "3.11",
    "--use-annotated",
    "--field-constraints",
    "--use-standard-collections",
    "--use-union-operator",
    "--use-type-alias",
    "--enum-field-as-literal", "all",
    "--use-schema-description",
    "--use-field-description",
    "--use-double-quotes",
    "--disable-timestamp",
    "--no-formatters",
)  # fmt: skip


def _ruff(*args: str, source: str) -> str:
    """Run the repository's ruff on ``source`` as if it were the committed models file."""
    done = subprocess.run(
        [sys.executable, "-m", "ruff", *args, "--stdin-filename", str(TARGET), "-"],
        input=source, capture_output=True, text=True, cwd=ROOT, check=True,
    )  # fmt: skip
    return done.stdout


def generate(openapi: Path = OPENAPI) -> str:
    """The models module's source for ``openapi``."""
    with tempfile.TemporaryDirectory() as folder:
        raw = Path(folder) / "models.py"
        subprocess.run(
            [sys.executable, "-m", "datamodel_code_generator", "--input", str(openapi),
             "--output", str(raw), *CODEGEN_OPTIONS],
            check=True, capture_output=True, text=True,
        )  # fmt: skip
        source = HEADER + raw.read_text(encoding="utf-8")
    fixed = _ruff("check", "--fix", "--exit-zero", "--quiet", source=source)
    return _ruff("format", "--quiet", source=fixed)


def main(argv: list[str] | None = None) -> int:
    """Write the models (``--check``: only say whether the committed file is current)."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--openapi", type=Path, default=OPENAPI)
    parser.add_argument("--output", type=Path, default=TARGET)
    parser.add_argument("--check", action="store_true", help="exit 1 when the file is stale")
    args = parser.parse_args(argv)
    source = generate(args.openapi)
    if args.check:
        current = args.output.read_text(encoding="utf-8") if args.output.exists() else ""
        if current != source:
            print(f"{args.output} is stale: run `make client-models`", file=sys.stderr)
            return 1
        return 0
    args.output.write_text(source, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
