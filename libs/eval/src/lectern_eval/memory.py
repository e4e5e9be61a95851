"""The tutor's memory measured through the public contracts: scripted students, real services.

A student is a line of ``students.jsonl`` (see ``bench/memory/README.md``): a document and
one to three tutor sessions of steps. Through the gateway (HTTP and SSE), for each student:
the document is uploaded once for everyone (a teacher's upload), then every session is
opened in tutor mode and its steps are sent as the student would: ``ask`` and ``say`` are
messages; ``check`` replies to the check question the tutor asked (the right answer is read
from the cited passage, as a student who reads the material would: the words that fill the
blank, or whether the statement is the passage's; a wrong one is another word of the
passage or the opposite truth value; a partial one the right answer with a wrong word
added; ``skip`` says "skip"); ``flag`` flags the last answer; ``quiz`` takes a three-question
quiz on the document, all right or all wrong (the answers are read with a teacher's token);
the session is then ended. Once the memory service has distilled everything, the student's
memories (``GET /v1/me/memories``) are compared with what a careful teacher would write:

- a struggle or mastered memory *matches* an expected one when one of its terms starts a
  word of the memory's topic (its text when it has none);
- struggle recall and precision, mastered recall and precision, memories per session;
- the expected memories of quizzes are the teacher's rule applied to the quiz's items
  (wrong: a struggle on the item's topic; right in two attempts running: mastered);
- a memory that does not come from one of the student's own sessions or answers (another
  student's, another tenant's) is counted as a leak.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import httpx
from pydantic import BaseModel, Field

from lectern_common.tokens import make_token
from lectern_eval.answers import TOKEN_TTL_S, chat_events, upload_and_wait

log = logging.getLogger(__name__)
Report = Callable[[str], None]
_BLANK = re.compile(r"_{3,}")


class Expected(BaseModel):
    """One memory a teacher would write: what it is about, and words that identify it."""

    topic: str
    terms: list[str] = Field(min_length=1)


class Expectations(BaseModel):
    struggles: list[Expected] = Field(default_factory=list)
    mastered: list[Expected] = Field(default_factory=list)


class Step(BaseModel):
    """One thing the student does (exactly one field is set)."""

    ask: str | None = None
    say: str | None = None
    check: Literal["right", "wrong", "partly", "skip"] | None = None
    flag: bool | None = None
    quiz: Literal["right", "wrong"] | None = None


class Student(BaseModel):
    student: str
    document: str
    sessions: list[list[Step]] = Field(min_length=1)
    expected: Expectations
    note: str = ""


class DatasetError(ValueError):
    """Raised when a students file is malformed."""


def load_students(path: Path) -> list[Student]:
    """A split's students."""
    out = []
    for number, line in enumerate(path.read_text("utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            out.append(Student.model_validate_json(line))
        except ValueError as exc:
            raise DatasetError(f"{path}:{number}: {exc}") from exc
    return out


def _plain(text: str) -> str:
    return " " + " ".join(re.findall(r"[^\W_]+", text.casefold())) + " "


def matches(memory: dict[str, Any], expected: Expected) -> bool:
    """Whether a stored memory is the expected one: a term starts a word of its topic (its
    text when it has none), case and punctuation aside ("U.S." is "u s")."""
    about = _plain(str(memory.get("topic") or memory.get("text") or ""))
    return any(_plain(t).rstrip() in about for t in expected.terms)


@dataclass
class StudentResult:
    """What one scripted student left in memory, against what was expected."""

    student: str
    split: str
    sessions: int
    expected_struggles: list[Expected]
    expected_mastered: list[Expected]
    memories: list[dict[str, Any]] = field(default_factory=list)
    checks_scripted: int = 0
    checks_asked: int = 0
    leaks: int = 0
    error: str | None = None
    #: what was sent and what came back, step by step (for reading a run)
    transcript: list[dict[str, Any]] = field(default_factory=list)

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [m for m in self.memories if m["kind"] == kind]

    def to_json(self) -> dict[str, Any]:
        return {
            "student": self.student, "split": self.split, "sessions": self.sessions,
            "expected": {"struggles": [e.model_dump() for e in self.expected_struggles],
                         "mastered": [e.model_dump() for e in self.expected_mastered]},
            "memories": [{k: m.get(k) for k in ("kind", "topic", "text", "because")}
                         for m in self.memories],
            "checks_scripted": self.checks_scripted, "checks_asked": self.checks_asked,
            "leaks": self.leaks, "error": self.error, "transcript": self.transcript,
        }  # fmt: skip


@dataclass
class Scores:
    students: int = 0
    sessions: int = 0
    struggle_recall: float = 0.0
    struggle_precision: float = 0.0
    mastered_recall: float = 0.0
    mastered_precision: float = 0.0
    memories_per_session: float = 0.0
    expected_struggles: int = 0
    expected_mastered: int = 0
    struggles: int = 0
    mastered: int = 0
    checks_asked: str = ""
    leaks: int = 0
    errors: int = 0


def _ratio(part: int, whole: int) -> float:
    return round(part / whole, 3) if whole else 1.0


def score(results: Sequence[StudentResult]) -> Scores:
    """Precision and recall of struggles and mastered topics over students."""
    out = Scores(students=len(results), sessions=sum(r.sessions for r in results))
    found = right = 0
    found_m = right_m = 0
    for r in results:
        struggles, mastered = r.of("struggle"), r.of("mastered")
        out.expected_struggles += len(r.expected_struggles)
        out.expected_mastered += len(r.expected_mastered)
        out.struggles += len(struggles)
        out.mastered += len(mastered)
        found += sum(any(matches(m, e) for m in struggles) for e in r.expected_struggles)
        right += sum(any(matches(m, e) for e in r.expected_struggles) for m in struggles)
        found_m += sum(any(matches(m, e) for m in mastered) for e in r.expected_mastered)
        right_m += sum(any(matches(m, e) for e in r.expected_mastered) for m in mastered)
        out.leaks += r.leaks
        out.errors += r.error is not None
    out.struggle_recall = _ratio(found, out.expected_struggles)
    out.struggle_precision = _ratio(right, out.struggles)
    out.mastered_recall = _ratio(found_m, out.expected_mastered)
    out.mastered_precision = _ratio(right_m, out.mastered)
    memories = sum(len(r.memories) for r in results)
    out.memories_per_session = round(memories / out.sessions, 2) if out.sessions else 0.0
    asked = sum(r.checks_asked for r in results)
    scripted = sum(r.checks_scripted for r in results)
    out.checks_asked = f"{asked}/{scripted}"
    return out


@dataclass
class _Turn:
    answer: str = ""
    sources: list[dict[str, Any]] = field(default_factory=list)
    check: dict[str, Any] | None = None
    verdict: str | None = None
    done: dict[str, Any] | None = None


class MemoryEval:
    """Runs scripted students against a gateway (see the module docstring)."""

    def __init__(
        self,
        *,
        gateway_url: str,
        secret: str,
        documents_dir: Path,
        concurrency: int = 2,
        report: Report | None = None,
        settle_s: float = 60.0,
    ) -> None:
        self.url = gateway_url.rstrip("/")
        self.secret = secret
        self.documents_dir = documents_dir
        self.tenant = f"eval-memory-{uuid.uuid4().hex[:8]}"
        self.concurrency = max(1, concurrency)
        self.report: Report = report or log.info
        self.settle_s = settle_s
        self._chunks: dict[str, str] = {}

    def _client(self, user: str, role: str) -> httpx.AsyncClient:
        token = make_token(secret=self.secret, tenant=self.tenant, user=user, role=role,
                           plan="pro", ttl_s=TOKEN_TTL_S)  # fmt: skip
        return httpx.AsyncClient(
            base_url=self.url, headers={"Authorization": f"Bearer {token}"}, timeout=180.0
        )

    async def run(self, splits: Sequence[tuple[str, Sequence[Student]]]) -> list[StudentResult]:
        """Upload, play every student, collect and return the results."""
        students = [(name, s) for name, group in splits for s in group]
        documents = list(dict.fromkeys(s.document for _, s in students))
        missing = [d for d in documents if not (self.documents_dir / d).is_file()]
        if missing:
            raise FileNotFoundError(f"not in {self.documents_dir}: {', '.join(missing)}")
        async with self._client("eval-teacher", "teacher") as teacher:
            ids = await self._ingest(teacher, documents)
            semaphore = asyncio.Semaphore(self.concurrency)

            async def play(split: str, student: Student) -> StudentResult:
                async with semaphore:
                    return await self._student(teacher, split, student, ids[student.document])

            results = await asyncio.gather(*(play(n, s) for n, s in students))
            await self._collect(results)
        return list(results)

    async def _ingest(self, teacher: httpx.AsyncClient, documents: Sequence[str]) -> dict[str, str]:
        views = await upload_and_wait(
            teacher, self.documents_dir, documents, tenant=self.tenant, report=self.report,
            timeout_s=3600.0,
        )  # fmt: skip
        return {name: str(view["id"]) for name, view in views.items()}

    async def _student(
        self, teacher: httpx.AsyncClient, split: str, student: Student, document_id: str
    ) -> StudentResult:
        result = StudentResult(
            student=student.student, split=split, sessions=len(student.sessions),
            expected_struggles=list(student.expected.struggles),
            expected_mastered=list(student.expected.mastered),
        )  # fmt: skip
        quiz_streak: dict[str, int] = {}
        try:
            async with self._client(student.student, "student") as client:
                for steps in student.sessions:
                    session = await client.post("/v1/sessions", json={"mode": "tutor"})
                    session.raise_for_status()
                    session_id = str(session.json()["id"])
                    last: _Turn | None = None
                    for step in steps:
                        last = await self._step(
                            client, teacher, session_id, step, last, document_id, result,
                            quiz_streak,
                        )  # fmt: skip
                    ended = await client.post(f"/v1/sessions/{session_id}/end")
                    ended.raise_for_status()
        except (httpx.HTTPError, RuntimeError) as exc:
            result.error = f"{type(exc).__name__}: {exc}"
        self.report(f"  {student.student}: played ({result.error or 'ok'})")
        return result

    async def _step(
        self,
        client: httpx.AsyncClient,
        teacher: httpx.AsyncClient,
        session_id: str,
        step: Step,
        last: _Turn | None,
        document_id: str,
        result: StudentResult,
        quiz_streak: dict[str, int],
    ) -> _Turn | None:
        if step.ask is not None or step.say is not None:
            turn = await self._send(client, session_id, str(step.ask or step.say))
            self._log(result, "ask" if step.ask is not None else "say", str(step.ask or step.say),
                      turn)  # fmt: skip
            return turn
        if step.check is not None:
            result.checks_scripted += 1
            if last is None or last.check is None:
                return last  # no check was asked: nothing to reply to
            result.checks_asked += 1
            reply = await self._reply(teacher, last, step.check)
            turn = await self._send(client, session_id, reply)
            self._log(result, f"check {step.check}", reply, turn)
            return turn
        if step.flag:
            message_id = (last.done or {}).get("message_id") if last else None
            if message_id:
                flagged = await client.post(
                    f"/v1/messages/{message_id}/flags",
                    json={"reason": "unclear", "details": "scripted student"},
                )
                flagged.raise_for_status()
            return last
        if step.quiz is not None:
            await self._quiz(client, teacher, document_id, step.quiz, result, quiz_streak)
        return last

    @staticmethod
    def _log(result: StudentResult, step: str, sent: str, turn: _Turn) -> None:
        done = turn.done or {}
        result.transcript.append({
            "step": step, "sent": sent, "answer": turn.answer[:400], "band": done.get("band"),
            "answered_by": done.get("answered_by"),
            "check": (turn.check or {}).get("question"), "verdict": turn.verdict,
        })  # fmt: skip

    async def _send(self, client: httpx.AsyncClient, session_id: str, text: str) -> _Turn:
        turn = _Turn()
        async for event in chat_events(client, session_id, text):
            kind = event.get("type")
            if kind == "sources":
                turn.sources = list(event["sources"])
            elif kind == "token":
                turn.answer += event["text"]
            elif kind == "check" and event.get("phase") == "asked":
                turn.check = event
            elif kind == "check":
                turn.verdict = event.get("verdict")
            elif kind == "done":
                turn.done = event
        return turn

    async def _passages(self, teacher: httpx.AsyncClient, turn: _Turn) -> list[str]:
        texts = []
        for source in turn.sources:
            chunk_id = str(source["chunk_id"])
            if chunk_id not in self._chunks:
                response = await teacher.get(f"/v1/chunks/{chunk_id}")
                response.raise_for_status()
                self._chunks[chunk_id] = " ".join(str(response.json()["text"]).split())
            texts.append(self._chunks[chunk_id])
        return texts

    async def _reply(self, teacher: httpx.AsyncClient, turn: _Turn, how: str) -> str:
        """The reply a student who read the passage gives, right or not as scripted."""
        if how == "skip":
            return "skip"
        assert turn.check is not None
        prompt = " ".join(str(turn.check["question"]).split())
        passages = await self._passages(teacher, turn)
        if turn.check.get("kind") == "true_false":
            statement = prompt.removeprefix("True or false:").strip()
            true = any(statement.rstrip(".") in p for p in passages)
            return "true" if true == (how == "right") else "false"
        answer, words = _fill(prompt.removeprefix("Fill in the blank:").strip(), passages)
        if how == "right":
            return answer or "I don't know"
        wrong = next((w for w in words if w.casefold() != (answer or "").casefold()), "nothing")
        return wrong if how == "wrong" else f"{answer} and {wrong}"

    async def _quiz(
        self,
        client: httpx.AsyncClient,
        teacher: httpx.AsyncClient,
        document_id: str,
        how: str,
        result: StudentResult,
        streak: dict[str, int],
    ) -> None:
        made = await client.post(
            "/v1/quizzes",
            json={"document_ids": [document_id], "num_questions": 3,
                  "kinds": ["short_answer", "true_false"]},
        )  # fmt: skip
        made.raise_for_status()
        quiz_id = made.json()["id"]
        full = (await teacher.get(f"/v1/quizzes/{quiz_id}")).json()
        answers: dict[str, str] = {}
        for q in full["questions"]:
            right = str(q["answer"])
            if how == "right":
                answers[q["id"]] = right
            else:
                answers[q["id"]] = {"true": "false", "false": "true"}.get(right, "no idea at all")
        attempt = await client.post(f"/v1/quizzes/{quiz_id}/attempts", json={"answers": answers})
        attempt.raise_for_status()
        for q in full["questions"]:
            topic = str(q["topic"]).casefold()
            expected = Expected(topic=topic, terms=[topic])
            if how == "wrong":
                streak[topic] = 0
                if not any(e.topic == topic for e in result.expected_struggles):
                    result.expected_struggles.append(expected)
            else:
                streak[topic] = streak.get(topic, 0) + 1
                known = any(e.topic == topic for e in result.expected_mastered)
                if streak[topic] == 2 and not known:
                    result.expected_mastered.append(expected)

    async def _collect(self, results: Sequence[StudentResult]) -> None:
        """Wait until every student's memories stop changing, then read them."""
        deadline = time.monotonic() + self.settle_s
        previous: dict[str, int] = {}
        stable_since = time.monotonic()
        while True:
            counts: dict[str, int] = {}
            for r in results:
                async with self._client(r.student, "student") as client:
                    response = await client.get("/v1/me/memories")
                    response.raise_for_status()
                    r.memories = list(response.json())
                    counts[r.student] = len(r.memories)
            if counts != previous:
                previous, stable_since = counts, time.monotonic()
            if time.monotonic() - stable_since >= 8.0 or time.monotonic() > deadline:
                break
            await asyncio.sleep(1.0)
        for r in results:
            async with self._client(r.student, "student") as client:
                listed = await client.get("/v1/sessions", params={"limit": 500})
                listed.raise_for_status()
            own = {str(s["id"]) for s in listed.json()}
            r.leaks = sum(
                1 for m in r.memories
                if m.get("source_session_id") and str(m["source_session_id"]) not in own
            )  # fmt: skip


def _fill(cloze: str, passages: Sequence[str]) -> tuple[str | None, list[str]]:
    """The words that fill a blank, read from the passage that holds the sentence; and that
    sentence's other words (wrong answers to give)."""
    parts = _BLANK.split(cloze, maxsplit=1)
    if len(parts) != 2:
        return None, []
    before, after = parts[0].strip(), parts[1].strip().rstrip(".")
    pattern = re.compile(
        (re.escape(before[-60:]) + r"\s*" if before else "")
        + r"(.{1,80}?)"
        + (r"\s*" + re.escape(after[:60]) if after else r"[.;,]")
    )
    for passage in passages:
        found = pattern.search(passage)
        if found:
            sentence_words = [w for w in re.findall(r"[A-Za-z]{4,}", before + " " + after)]
            return found.group(1).strip(), sentence_words[::-1]
    return None, [w for w in re.findall(r"[A-Za-z]{4,}", cloze)][::-1]


def format_scores(splits: dict[str, Scores]) -> str:
    """Dev and test side by side."""
    names = list(splits)
    rows = [
        ("students", "students"), ("sessions", "sessions"),
        ("struggle recall", "struggle_recall"), ("struggle precision", "struggle_precision"),
        ("mastered recall", "mastered_recall"), ("mastered precision", "mastered_precision"),
        ("memories per session", "memories_per_session"),
        ("expected struggles / stored", "expected_struggles"),
        ("expected mastered / stored", "expected_mastered"),
        ("checks asked / scripted", "checks_asked"), ("leaks (another's memory)", "leaks"),
        ("errors", "errors"),
    ]  # fmt: skip
    lines = [f"{'':<30}" + "".join(f"{n:>12}" for n in names)]
    for label, key in rows:
        cells = []
        for name in names:
            s = splits[name]
            value: Any = getattr(s, key)
            if key == "expected_struggles":
                value = f"{s.expected_struggles}/{s.struggles}"
            elif key == "expected_mastered":
                value = f"{s.expected_mastered}/{s.mastered}"
            cells.append(f"{value:>12}" if not isinstance(value, float) else f"{value:>12.3f}")
        lines.append(f"{label:<30}" + "".join(cells))
    return "\n".join(lines)
