"""Print the third-party dependencies of the given pyproject.toml files, one per line.

The Docker image installs dependencies in their own layer, from the pyproject.toml files
alone, so editing code does not reinstall them. The workspace's own packages (named in
the same files) are left out: they are installed afterwards with ``--no-deps``.
Standard library only: this runs before anything else is installed.
"""

from __future__ import annotations

import re
import sys
import tomllib
from collections.abc import Iterable
from pathlib import Path

_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def normalize(name: str) -> str:
    """The PEP 503 normalised form of a distribution name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(requirement: str) -> str:
    """The normalised distribution name at the start of a PEP 508 requirement."""
    match = _NAME.match(requirement)
    if match is None:
        raise ValueError(f"not a requirement: {requirement!r}")
    return normalize(match.group(1))


def third_party_requirements(pyprojects: Iterable[Path]) -> list[str]:
    """Every dependency of the given projects that is not one of the projects, sorted."""
    projects = [tomllib.loads(path.read_text(encoding="utf-8"))["project"] for path in pyprojects]
    local = {normalize(project["name"]) for project in projects}
    wanted = {
        requirement.strip()
        for project in projects
        for requirement in project.get("dependencies", [])
        if requirement_name(requirement) not in local
    }
    return sorted(wanted, key=lambda r: (requirement_name(r), r))


def main(argv: list[str]) -> int:
    """Entry point: ``python pyproject_deps.py PYPROJECT...`` prints requirements."""
    if not argv:
        print("usage: pyproject_deps.py PYPROJECT.toml...", file=sys.stderr)
        return 2
    for requirement in third_party_requirements(Path(arg) for arg in argv):
        print(requirement)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
