"""Entry point of ``lectern``: one subcommand per module in ``COMMAND_MODULES``.

Each module exposes ``register(subparsers) -> None``, which adds its subparser and sets
``func`` (``args -> int``, the exit code) with ``set_defaults``. Add a command by naming each
command its module registers in ``COMMANDS`` (a test checks that they agree).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence
from typing import Any, cast

from lectern_common.errors import LecternError

#: the module that registers each command: ``lectern COMMAND ...`` imports that one alone
#: (building every command's parser imported them all, the MCP SDK among them: 3.4 s before
#: any command ran); ``lectern --help``, or a command not named here, builds them all
COMMANDS: dict[str, str] = {
    "up": "lectern_cli.up",
    "migrate": "lectern_cli.migrate_cmd",
    "status": "lectern_cli.status",
    "token": "lectern_cli.token_cmd",
    "apikey": "lectern_cli.apikey_cmd",
    "lti": "lectern_cli.lti_cmd",
    "ingest": "lectern_cli.ingest_cmd",
    "inspect": "lectern_cli.inspect_cmd",
    "ask": "lectern_cli.ask_cmd",
    "search": "lectern_cli.search_cmd",
    "quiz": "lectern_cli.quiz_cmd",
    "syllabus": "lectern_cli.quiz_cmd",
    "mcp": "lectern_cli.mcp_cmd",
    "personas": "lectern_cli.personas_cmd",
    "quality": "lectern_cli.quality_cmd",
    "docs": "lectern_cli.docs_cmd",
    "reindex": "lectern_cli.reindex_cmd",
    "gc": "lectern_cli.gc_cmd",
    "eval": "lectern_cli.eval_cmd",
    "eval-answers": "lectern_cli.eval_answers_cmd",
    "eval-memory": "lectern_cli.eval_memory_cmd",
}

#: every command's module once, in the order ``lectern --help`` lists them
COMMAND_MODULES: list[str] = list(dict.fromkeys(COMMANDS.values()))

Command = Callable[[argparse.Namespace], int]


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The argument parser with every registered subcommand, or with ``command``'s alone
    when ``COMMANDS`` names its module."""
    parser = argparse.ArgumentParser(
        prog="lectern",
        description="Lectern: a retrieval-augmented tutor backend (embedded stack and tools).",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    only = COMMANDS.get(command or "")
    for name in [only] if only is not None else COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ImportError as exc:
            # One broken command must not take `lectern up` and the others down with it.
            _register_broken(subparsers, name, exc)
            continue
        module.register(subparsers)
    return parser


def _register_broken(subparsers: Any, module: str, error: ImportError) -> None:
    command = module.rsplit(".", 1)[-1].removesuffix("_cmd")
    message = f"lectern {command}: unavailable: cannot import {module}: {error}"

    def unavailable(args: argparse.Namespace) -> int:
        print(message, file=sys.stderr)
        return 1

    parser = subparsers.add_parser(command, help=f"(unavailable: {error})", add_help=False)
    parser.add_argument("rest", nargs=argparse.REMAINDER)
    parser.set_defaults(func=unavailable, broken_command=True)


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` and run the chosen command; returns its exit code."""
    words = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(words[0] if words else None)
    args, extra = parser.parse_known_args(words)
    if extra and not getattr(args, "broken_command", False):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    func = cast(Command, args.func)
    try:
        return func(args)
    except LecternError as exc:
        print(f"lectern {args.command}: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
