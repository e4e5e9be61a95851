"""The `lectern` entry point: every registered command loads; broken ones are contained."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from lectern_cli import main as cli_main


def test_every_command_module_imports_and_registers() -> None:
    import argparse
    import importlib

    for name in cli_main.COMMAND_MODULES:
        parser = argparse.ArgumentParser()
        sub = parser.add_subparsers()
        importlib.import_module(name).register(sub)
        assert sub.choices, f"{name} registered no command"
        for command in sub.choices.values():
            assert callable(command.get_default("func")), f"{name} sets no func"


def test_each_command_is_named_with_the_module_that_registers_it() -> None:
    import argparse
    import importlib

    registered: dict[str, str] = {}
    for name in cli_main.COMMAND_MODULES:
        sub = argparse.ArgumentParser().add_subparsers()
        importlib.import_module(name).register(sub)
        registered |= dict.fromkeys(sub.choices, name)
    assert registered == cli_main.COMMANDS


def test_a_command_imports_its_own_module_and_no_other() -> None:
    """`lectern token` builds the token command's parser alone: the MCP SDK and the other
    commands' modules stay unimported (they took 3.4 s of every command's start)."""
    probe = (
        "import sys\n"
        "from lectern_cli.main import main\n"
        "assert main(['token', '--tenant', 't', '--user', 'u', '--role', 'admin']) == 0\n"
        "print(sorted(m for m in sys.modules if m.startswith('lectern_cli.') or m == 'mcp'))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    loaded = eval(done.stdout.strip().splitlines()[-1])  # noqa: S307 - our own probe's list
    assert loaded == ["lectern_cli.main", "lectern_cli.token_cmd"]


@pytest.mark.parametrize("command", ["up", "migrate", "status", "token"])
def test_core_commands_are_registered(command: str) -> None:
    with pytest.raises(SystemExit) as exited:
        cli_main.build_parser().parse_args([command, "--help"])
    assert exited.value.code == 0


def test_a_command_is_required(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli_main.main([])
    assert exited.value.code == 2
    assert "COMMAND" in capsys.readouterr().err


def test_unknown_service_for_up_is_an_argument_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli_main.main(["up", "--services", "gateway,frontend"])
    assert exited.value.code == 2
    assert "frontend" in capsys.readouterr().err


def test_a_module_that_fails_to_import_does_not_break_the_others(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(
        cli_main, "COMMAND_MODULES", [*cli_main.COMMAND_MODULES, "lectern_cli.missing_cmd"]
    )
    assert cli_main.main(["missing", "--anything"]) == 1
    assert "cannot import lectern_cli.missing_cmd" in capsys.readouterr().err
    assert cli_main.main(["token", "--tenant", "t", "--user", "u", "--role", "admin"]) == 0


def test_console_script_is_installed() -> None:
    script = Path(sys.executable).parent / "lectern"
    assert script.exists(), "pip install -e libs/cli declares the `lectern` console script"
    done = subprocess.run(
        [str(script), "--help"], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    for command in ("up", "migrate", "status", "token"):
        assert command in done.stdout


def test_invalid_settings_are_reported_without_a_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LECTERN_EMBEDDING_PROVIDER", "gemini")
    monkeypatch.delenv("LECTERN_GEMINI_API_KEY", raising=False)
    assert cli_main.main(["migrate", "--database-url", "postgresql://nowhere/x"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("lectern migrate: error: invalid LECTERN_* settings")
    assert "LECTERN_GEMINI_API_KEY" in err
