"""``lectern quiz``: take a quiz in the terminal (questions asked, typed answers checked);
``lectern syllabus``: the material as modules, documents and sections."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable
from typing import Any, TextIO

from lectern_cli.ask_cmd import add_connection, credentials, problem_text

Prompt = Callable[[str], str]


def register(subparsers: Any) -> None:
    """Add ``quiz`` and ``syllabus``."""
    quiz: argparse.ArgumentParser = subparsers.add_parser(
        "quiz",
        help="take a quiz on the course material in the terminal",
        description=(
            "Draw a quiz from the material (or take quiz --id), ask each question, check the "
            "typed answers and show what was right, with the passage each answer came from."
        ),
    )
    quiz.add_argument("--id", help="take an existing quiz (default: draw a new one)")
    quiz.add_argument("--subject", help="quiz on this subject's material")
    quiz.add_argument("--document", action="append", default=[], help="document id (repeat)")
    quiz.add_argument("--questions", type=int, default=5, help="number of questions (1-50)")
    quiz.add_argument("--difficulty", choices=("easy", "medium", "hard"), default="medium")
    quiz.add_argument(
        "--kinds", default="multiple_choice,short_answer,true_false",
        help="comma-separated kinds of questions",
    )  # fmt: skip
    add_connection(quiz)
    quiz.set_defaults(func=run_quiz)
    syllabus: argparse.ArgumentParser = subparsers.add_parser(
        "syllabus", help="list the material as modules, documents and sections"
    )
    syllabus.add_argument("--subject", help="only this subject's material")
    syllabus.add_argument("--document", help="only this document")
    add_connection(syllabus)
    syllabus.set_defaults(func=run_syllabus)


def _ask(question: dict[str, Any], number: int, out: TextIO, prompt: Prompt) -> str:
    out.write(f"\n{number}. {question['prompt']}\n")
    options: list[str] = question["options"]
    if question["kind"] == "true_false":
        said = prompt("   true or false? ").strip().casefold()
        return {"t": "true", "f": "false"}.get(said, said)
    if options:
        for index, option in enumerate(options, 1):
            out.write(f"   {index}) {option}\n")
        said = prompt("   your choice (number or text): ").strip()
        if said.isdigit() and 1 <= int(said) <= len(options):
            return options[int(said) - 1]
        return said
    return prompt("   your answer: ")


async def take_quiz(
    *,
    url: str,
    token: str,
    out: TextIO,
    prompt: Prompt,
    quiz_id: str | None = None,
    request: dict[str, Any] | None = None,
) -> int:
    """Draw (or fetch) a quiz, ask it through ``prompt``, print the checked results."""
    from lectern_client import AsyncLecternClient, LecternError

    async with AsyncLecternClient(url, token, timeout=60) as lectern:
        try:
            if quiz_id is None:
                quiz = await lectern.create_quiz(request or {})
            else:
                quiz = await lectern.get_quiz(quiz_id)
        except LecternError as exc:
            print(f"lectern quiz: {problem_text(exc)}", file=sys.stderr)
            return 1
        out.write(f"{quiz.title} ({len(quiz.questions)} questions)\n")
        answers = {
            q.id: _ask(q.model_dump(mode="json"), n, out, prompt)
            for n, q in enumerate(quiz.questions, 1)
        }
        try:
            result = await lectern.attempt_quiz(quiz.id, answers)
        except LecternError as exc:
            print(f"lectern quiz: {problem_text(exc)}", file=sys.stderr)
            return 1
    out.write("\n")
    for number, item in enumerate(result.results, 1):
        mark = "right" if item.correct else "wrong"
        out.write(f"{number}. {mark}: {item.feedback}\n")
    out.write(f"\nScore: {result.correct}/{result.total} (quiz {quiz.id})\n")
    return 0


async def show_syllabus(
    *, url: str, token: str, out: TextIO, subject: str | None, document: str | None
) -> int:
    """Print the syllabus as an indented outline with page ranges."""
    from lectern_client import AsyncLecternClient, LecternError

    async with AsyncLecternClient(url, token, timeout=60) as lectern:
        try:
            syllabus = await lectern.syllabus(subject=subject or None, document_id=document or None)
        except LecternError as exc:
            print(f"lectern syllabus: {problem_text(exc)}", file=sys.stderr)
            return 1
    for module in syllabus.modules:
        out.write(f"{module.module or '(no module)'}\n")
        for doc in module.documents:
            out.write(f"  {doc.title}  [{doc.id}]\n")
            for section in doc.sections:
                pages = _pages(section.page_start, section.page_end)
                indent = "  " * (section.level + 1)
                out.write(f"  {indent}{section.title or '(start)'}{pages}\n")
    return 0


def _pages(start: int | None, end: int | None) -> str:
    if start is None:
        return ""
    return f"  p. {start}" if end in (None, start) else f"  pp. {start}-{end}"


def run_quiz(args: argparse.Namespace) -> int:
    """Entry of ``lectern quiz``."""
    found = credentials(args, "quiz")
    if found is None:
        return 1
    url, token = found
    request = {
        "subject": args.subject, "document_ids": args.document,
        "num_questions": args.questions, "difficulty": args.difficulty,
        "kinds": [k.strip() for k in args.kinds.split(",") if k.strip()],
    }  # fmt: skip
    return asyncio.run(
        take_quiz(
            url=url, token=token, out=sys.stdout, prompt=input, quiz_id=args.id, request=request
        )
    )


def run_syllabus(args: argparse.Namespace) -> int:
    """Entry of ``lectern syllabus``."""
    found = credentials(args, "syllabus")
    if found is None:
        return 1
    url, token = found
    return asyncio.run(
        show_syllabus(
            url=url, token=token, out=sys.stdout, subject=args.subject, document=args.document
        )
    )
