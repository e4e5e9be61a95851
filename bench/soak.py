"""Soak: concurrent chats and continuous ingestion on the embedded stack, for minutes.

Starts the embedded stack the way ``lectern up`` does (NATS with per-service users, Postgres,
the five services as processes), uploads the demo lessons as one tenant's course, then for
``--duration`` seconds runs ``--chats`` students asking questions over SSE without pause
while a teacher uploads a new document every ``--upload-every`` seconds (one in five is a
broken file that must fail cleanly). It samples every service's resident memory (RSS) and
reports, from that one run:

- chat turns, errors (each ``error`` event's reason and message, counted by kind), and time
  to first token / whole answer (p50, p95);
- uploads = indexed + failed (+ duplicate), none left pending;
- messages the students saw completed = assistant messages stored;
- each service's RSS after warm-up and at the end, its growth, and restarts;
- ERROR lines in the services' logs.

- CPU seconds a turn of each service (and of NATS and Postgres), over the load after the
  warm-up: what a turn costs, which throughput alone hides on a machine with idle cores; and
  the reader's share of it, core-milliseconds and word pieces a turn in each service that
  reads (from its ``lectern.reader.*`` metrics).

It exits non-zero when an invariant breaks: an error turn, a lost or stuck upload, a
missing message, a restart, a service whose RSS grew more than ``--max-growth`` after
warm-up, or an ERROR line in a service's log (each is printed). It also judges speed: the
last accepted run's figures are kept in docs/benchmarks.md (``--accept`` keeps a run that
broke no invariant); every run prints its ratios to them, and fails when its turns a second fall
below 0.8 of the accepted run's (same number of chats, on a machine that reads as fast: each
run first times the re-ranker's reader on one word piece, and a baseline is a machine's) or,
at the default 20 chats, its first token p95 exceeds 1.5 s.

    make soak                       # 20 chats, 5 minutes
    .venv/bin/python bench/soak.py --accept   # and keep it as the accepted run
    .venv/bin/python bench/soak.py --duration 60 --chats 5
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil
from lectern_testing import logs
from lectern_testing.metrics import sample_total

from lectern_cli.demo import default_demo_dir, read_corpus
from lectern_cli.runtime.embedded import embedded_stack
from lectern_cli.runtime.state import read_state
from lectern_common.tokens import make_token

QUESTIONS = [
    "What are the stages of mitosis?",
    "What does chlorophyll do in photosynthesis?",
    "State Newton's second law of motion.",
    "How does water get from the ocean into clouds?",
    "Why do cells divide?",
    "What are the products of photosynthesis?",
    "What happens during anaphase?",
    "What is inertia?",
    "What is condensation in the water cycle?",
    "Who won the football world cup in 1998?",  # off-topic: an honest refusal
]
WORDS = (
    "cell energy light water force motion plant carbon oxygen cycle membrane nucleus "
    "chromosome glucose evaporation rain cloud mass acceleration friction gravity root leaf "
    "stem enzyme protein current voltage circuit magnet wave sound heat temperature pressure "
    "volume density molecule atom electron reaction acid base salt solution crystal rock soil"
).split()
FINAL = {"indexed", "failed", "duplicate"}
ROOT = Path(__file__).resolve().parents[1]
#: where the last accepted run's figures are kept (``--accept`` writes them)
BENCHMARKS = ROOT / "docs" / "benchmarks.md"
BEGIN, END = "<!-- soak-accepted-begin -->", "<!-- soak-accepted-end -->"
ACCEPTED = re.compile(r"<!-- soak-accepted (\{.*?\}) -->")
#: a run below this share of the accepted run's turns a second has lost throughput
MIN_THROUGHPUT_RATIO = 0.8
#: first token p95 a run of the default 20 chats must keep (the throughput issue's target)
MAX_FIRST_TOKEN_P95_S = 1.5
DEFAULT_CHATS = 20
#: the machine probe reads one (question, passage) pair of this many word pieces with the
#: re-ranker's reader, alone on one thread: reading is most of a turn's CPU, and CPUs differ
#: in it far more than in the rest (2026-12-04: an AVX2-only EPYC read a piece in 0.40 ms of
#: a core, where the soaks on the AVX-512 machine of the accepted run read one in 0.08-0.10
#: ms under load; a Python loop was only 14% slower there)
PROBE_PIECES = 192
#: runs whose probes differ by more than this factor were on other machines: their turns a
#: second are not compared (a baseline is a machine's; ``--accept`` one on this machine)
MACHINE_TOLERANCE = 1.5
#: the re-ranker's reader (``reader_l3``): MiniLM's first 3 layers, hidden size 384, feed-forward
#: 1,536; the floating-point operations of one pair of ``pieces`` word pieces are
#: ``2 * pieces * (4 * 384**2 + 2 * 384 * 1536) + 4 * pieces**2 * 384`` a layer (the four
#: projections, the feed-forward pair, then attention's scores and weighted sum)
READER_LAYERS, READER_HIDDEN, READER_FEED_FORWARD = 3, 384, 1536


@dataclass
class Turn:
    """One question asked."""

    worker: int
    outcome: str  # done | error | http-<status> | exception
    first_token_s: float | None
    total_s: float
    refused: bool = False
    #: an ``error`` event's reason and message (the message's numbers cut, so that alike
    #: errors count together)
    error: str | None = None
    #: seconds the question waited before this attempt: the ``Retry-After`` of the 503s
    #: (``overloaded``) it got first, and their round trips
    shed_wait_s: float = 0.0
    #: a 503's ``Retry-After``
    retry_after_s: float | None = None

    @property
    def question_first_token_s(self) -> float | None:
        """From the question's first attempt to this attempt's first token."""
        return None if self.first_token_s is None else self.shed_wait_s + self.first_token_s


@dataclass
class Soak:
    """Everything measured in one run."""

    turns: list[Turn] = field(default_factory=list)
    #: questions refused with 503 ``overloaded`` (each asked again after its Retry-After)
    shed: list[Turn] = field(default_factory=list)
    #: the services' overload counters at the end (``OVERLOAD_METRICS``)
    overload: dict[str, float] = field(default_factory=dict)
    sessions: dict[int, str] = field(default_factory=dict)
    uploads: dict[str, str] = field(default_factory=dict)  # id -> "valid" | "broken"
    upload_errors: list[str] = field(default_factory=list)
    rss: dict[str, list[tuple[float, int]]] = field(default_factory=dict)
    cpu_s: dict[str, float] = field(default_factory=dict)  # CPU seconds under load
    cpu_turns: int = 0  # turns that ended inside the CPU window
    cpu_done_turns: int = 0  # ... and of them, those answered (``done``)
    # the reader's own CPU seconds and word pieces in that window, by service
    reading: dict[str, dict[str, float]] = field(default_factory=dict)


def _token(secret: str, tenant: str, user: str, role: str) -> str:
    return make_token(secret=secret, tenant=tenant, user=user, role=role, plan="pro", ttl_s=7200)


def _document(rng: random.Random, index: int) -> tuple[str, bytes, str]:
    """A generated lesson (a few pages of prose), or every fifth time a broken file."""
    if index % 5 == 4:
        return f"broken-{index}.pdf", b"%PDF-1.7\n" + rng.randbytes(4096), "broken"
    paragraphs = []
    for p in range(rng.randint(8, 30)):
        words = [rng.choice(WORDS) for _ in range(rng.randint(60, 140))]
        paragraphs.append(f"## Part {p + 1}\n\n" + " ".join(words).capitalize() + ".")
    text = f"# Soak lesson {index} ({uuid.uuid4().hex[:8]})\n\n" + "\n\n".join(paragraphs)
    return f"lesson-{index}.md", text.encode(), "valid"


async def _ask(client: httpx.AsyncClient, session_id: str, text: str, worker: int) -> Turn:
    started = time.perf_counter()
    first: float | None = None
    outcome, refused, error = "exception", False, None
    try:
        async with client.stream(
            "POST", f"/v1/sessions/{session_id}/messages", json={"content": text}
        ) as response:
            if response.status_code != 200:
                await response.aread()
                shed = Turn(worker, f"http-{response.status_code}", None, 0.0)
                if response.status_code == 503 and "retry-after" in response.headers:
                    shed.outcome = "shed"
                    shed.retry_after_s = float(response.headers["retry-after"])
                return shed
            event = ""
            async for line in response.aiter_lines():
                if line.startswith("event:"):
                    event = line.split(":", 1)[1].strip()
                    if event == "token" and first is None:
                        first = time.perf_counter() - started
                elif line.startswith("data:") and event in {"done", "error"}:
                    outcome = event
                    if event == "error":
                        error = error_kind(json.loads(line[5:]))
                    if event == "done":
                        data = json.loads(line[5:])
                        usage = data.get("usage") or {}
                        refused = bool(data.get("knowledge_gap")) or (
                            usage.get("outcome") == "no_support"
                        )
    except httpx.HTTPError:
        outcome = "exception"
    return Turn(worker, outcome, first, time.perf_counter() - started, refused, error)


def error_kind(data: dict[str, Any]) -> str:
    """An ``error`` event as ``reason: message``, its numbers as ``N`` (ids, seconds)."""
    message = re.sub(
        r"[0-9a-f]{8}-[0-9a-f-]{27}|\b\d+(\.\d+)?\b", "N", str(data.get("message", ""))
    )
    return f"{data.get('reason', '?')}: {message}"


async def _chatter(
    url: str, secret: str, tenant: str, worker: int, until: float, soak: Soak
) -> None:
    token = _token(secret, tenant, f"student-{worker}", "student")
    async with httpx.AsyncClient(
        base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=120
    ) as client:
        session = await client.post("/v1/sessions", json={"mode": "chat"})
        session.raise_for_status()
        session_id = str(session.json()["id"])
        soak.sessions[worker] = session_id
        index, shed_wait = worker, 0.0
        while time.monotonic() < until:
            asked = time.perf_counter()
            turn = await _ask(client, session_id, QUESTIONS[index % len(QUESTIONS)], worker)
            turn.shed_wait_s = shed_wait
            if turn.outcome == "shed" and turn.retry_after_s is not None:
                # overloaded: the student is told when to ask again, and asks the same question
                soak.shed.append(turn)
                await asyncio.sleep(min(turn.retry_after_s, max(0.0, until - time.monotonic())))
                shed_wait += time.perf_counter() - asked
                continue
            soak.turns.append(turn)
            index, shed_wait = index + 1, 0.0


async def _uploader(
    teacher: httpx.AsyncClient, every_s: float, until: float, soak: Soak, seed: int
) -> None:
    rng = random.Random(seed)
    index = 0
    while time.monotonic() < until:
        name, data, kind = _document(rng, index)
        response = await teacher.post(
            "/v1/documents", files={"file": (name, data, "application/octet-stream")}
        )
        if response.status_code in (200, 201, 202):
            soak.uploads[str(response.json()["id"])] = kind
        elif kind == "broken" and response.status_code in (400, 415, 422):
            soak.uploads[f"refused-{index}"] = "refused at upload"
        else:
            soak.upload_errors.append(f"{name}: HTTP {response.status_code} {response.text[:200]}")
        index += 1
        await asyncio.sleep(every_s)


async def _sampler(pids: dict[str, int], until: float, soak: Soak, started: float) -> None:
    processes = {name: psutil.Process(pid) for name, pid in pids.items()}
    while time.monotonic() < until:
        for name, process in processes.items():
            with contextlib.suppress(psutil.Error):
                soak.rss.setdefault(name, []).append(
                    (time.monotonic() - started, process.memory_info().rss)
                )
        await asyncio.sleep(5.0)


def _cpu_seconds(pid: int) -> float:
    """A process's CPU seconds (user + system), with its live and reaped children's: Postgres
    serves each connection from a child of the postmaster."""
    try:
        process = psutil.Process(pid)
        times = process.cpu_times()
        total = times.user + times.system + times.children_user + times.children_system
        for child in process.children(recursive=True):
            with contextlib.suppress(psutil.Error):
                child_times = child.cpu_times()
                total += child_times.user + child_times.system
        return total
    except psutil.Error:
        return 0.0


def _service_urls(state: dict[str, Any]) -> dict[str, str]:
    """Each service's HTTP address (its ``/metrics``)."""
    return {name: str(info["url"]) for name, info in state.get("services", {}).items()
            if info.get("url")}  # fmt: skip


def _stack_pids(state: dict[str, Any]) -> dict[str, int]:
    """Every process of the stack whose CPU a turn costs: the services, NATS and Postgres."""
    pids = {name: int(info["pid"]) for name, info in state.get("services", {}).items()
            if info.get("pid")}  # fmt: skip
    for server in ("nats", "postgres"):
        if state.get(server, {}).get("pid"):
            pids[server] = int(state[server]["pid"])
    return pids


READER_METRICS = {
    "cpu_s": "lectern_reader_cpu_time_seconds_total", "pieces": "lectern_reader_pieces_total",
}  # fmt: skip


async def _scrapes(urls: dict[str, str]) -> dict[str, str]:
    """Each service's ``/metrics`` scrape now (a service that does not answer is left out)."""
    out: dict[str, str] = {}
    async with httpx.AsyncClient(timeout=10) as client:
        for name, url in urls.items():
            with contextlib.suppress(httpx.HTTPError):
                response = await client.get(f"{url}/metrics")
                if response.status_code == 200:
                    out[name] = response.text
    return out


async def _reading(urls: dict[str, str]) -> dict[str, dict[str, float]]:
    """Each service's reader totals so far (``lectern.reader.*`` from its ``/metrics``)."""
    return {
        name: {key: sample_total(text, metric) for key, metric in READER_METRICS.items()}
        for name, text in (await _scrapes(urls)).items()
    }


#: counters of how the stack met overload, summed over its services' ``/metrics``
OVERLOAD_METRICS = {
    "rerank_fallbacks": "lectern_chat_rerank_fallbacks_total",
    "requests_expired": "lectern_requests_expired_total",
}


async def _overload(urls: dict[str, str]) -> dict[str, float]:
    """The stack's overload counters so far: turns answered from the retriever's order (the
    re-ranker did not answer in time) and requests answered ``expired`` (the questions
    refused are the soak's own count, ``Soak.shed``)."""
    scrapes = list((await _scrapes(urls)).values())
    return {
        key: sum(sample_total(text, metric) for text in scrapes)
        for key, metric in OVERLOAD_METRICS.items()
    }


async def _cpu_window(
    pids: dict[str, int], urls: dict[str, str], start_s: float, until: float, soak: Soak
) -> None:
    """CPU seconds of each process from ``start_s`` after the load began until it ends, and
    the reader's share of them: the window skips the warm-up, and its turns are counted by
    when they ended."""
    await asyncio.sleep(start_s)
    reading_before = await _reading(urls)
    before = {name: _cpu_seconds(pid) for name, pid in pids.items()}
    turns_before = len(soak.turns)
    done_before = sum(1 for t in soak.turns if t.outcome == "done")
    await asyncio.sleep(max(0.0, until - time.monotonic()))
    soak.cpu_s = {name: _cpu_seconds(pid) - before[name] for name, pid in pids.items()}
    soak.cpu_turns = len(soak.turns) - turns_before
    soak.cpu_done_turns = sum(1 for t in soak.turns if t.outcome == "done") - done_before
    reading_after = await _reading(urls)
    soak.reading = {
        name: {k: v - reading_before[name][k] for k, v in totals.items()}
        for name, totals in reading_after.items()
        if name in reading_before and totals["pieces"] > reading_before[name]["pieces"]
    }


def _form(fields: list[tuple[str, str]]) -> dict[str, list[str]]:
    form: dict[str, list[str]] = {}
    for name, value in fields:
        form.setdefault(name, []).append(value)
    return form


async def _statuses(teacher: httpx.AsyncClient, ids: list[str]) -> dict[str, str]:
    statuses: dict[str, str] = {}
    for document_id in ids:
        response = await teacher.get(f"/v1/documents/{document_id}")
        statuses[document_id] = response.json()["status"] if response.status_code == 200 else "?"
    return statuses


async def _run(url: str, secret: str, data_dir: Path, args: argparse.Namespace) -> dict[str, Any]:
    tenant = f"soak-{uuid.uuid4().hex[:8]}"
    soak = Soak()
    teacher_token = _token(secret, tenant, "soak-teacher", "teacher")
    async with httpx.AsyncClient(
        base_url=url, headers={"Authorization": f"Bearer {teacher_token}"}, timeout=120
    ) as teacher:
        demo = default_demo_dir()
        assert demo is not None, "the demo corpus (demo/) is needed"
        course = []
        for document in read_corpus(demo):
            with document.path.open("rb") as handle:
                response = await teacher.post(
                    "/v1/documents", files={"file": (document.path.name, handle)},
                    data=_form(document.fields),
                )  # fmt: skip
            response.raise_for_status()
            course.append(str(response.json()["id"]))
        deadline = time.monotonic() + 300
        while set((await _statuses(teacher, course)).values()) - FINAL:
            if time.monotonic() > deadline:
                raise RuntimeError("the course was not indexed within 300 s")
            await asyncio.sleep(0.5)
        print(f"course of {len(course)} lessons indexed for tenant {tenant}", flush=True)

        state = read_state(data_dir) or {}
        pids = {name: int(info["pid"]) for name, info in state.get("services", {}).items()}
        cpu_pids = _stack_pids(state)
        started = time.monotonic()
        until = started + args.duration
        print(f"soak: {args.chats} chats + an upload every {args.upload_every} s for "
              f"{args.duration} s", flush=True)  # fmt: skip
        await asyncio.gather(
            *(_chatter(url, secret, tenant, w, until, soak) for w in range(args.chats)),
            _uploader(teacher, args.upload_every, until, soak, seed=args.seed),
            _sampler(pids, until + 1, soak, started),
            _cpu_window(
                cpu_pids, _service_urls(state), min(args.warmup, args.duration / 6), until, soak
            ),
        )
        elapsed = time.monotonic() - started
        # every upload must reach an outcome: give ingest time to drain its queue
        ids = [i for i in soak.uploads if not i.startswith("refused-")]
        drain_deadline = time.monotonic() + args.drain_timeout
        statuses = await _statuses(teacher, ids)
        while set(statuses.values()) - FINAL and time.monotonic() < drain_deadline:
            await asyncio.sleep(2.0)
            statuses = await _statuses(teacher, ids)
        drained_s = time.monotonic() - started - elapsed

        stored = 0
        for worker, session_id in soak.sessions.items():
            token = _token(secret, tenant, f"student-{worker}", "student")
            response = await teacher.get(
                f"/v1/sessions/{session_id}/messages", params={"limit": 1000},
                headers={"Authorization": f"Bearer {token}"},
            )  # fmt: skip
            response.raise_for_status()
            stored += sum(1 for m in response.json() if m["role"] == "assistant")
        soak.overload = await _overload(_service_urls(state))

    state = read_state(data_dir) or {}
    return _report(soak, statuses, stored, state, data_dir, elapsed, drained_s, args)


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _report(
    soak: Soak,
    statuses: dict[str, str],
    stored: int,
    state: dict[str, Any],
    data_dir: Path,
    elapsed: float,
    drained_s: float,
    args: argparse.Namespace,
) -> dict[str, Any]:
    done = [t for t in soak.turns if t.outcome == "done"]
    failed = [t for t in soak.turns if t.outcome != "done"]
    # the student's wait: from the question's first attempt, through any 503 and its
    # Retry-After, to the first token; and the admitted attempt's own
    firsts = [f for t in done if (f := t.question_first_token_s) is not None]
    admitted_firsts = [t.first_token_s for t in done if t.first_token_s is not None]
    totals = [t.total_s for t in done]
    outcomes: dict[str, int] = {}
    for document_id, status in statuses.items():
        key = f"{soak.uploads[document_id]}:{status}"
        outcomes[key] = outcomes.get(key, 0) + 1
    refused_at_upload = sum(1 for k in soak.uploads.values() if k == "refused at upload")
    warm_at = min(args.warmup, elapsed / 3)
    memory: dict[str, dict[str, float]] = {}
    for name, samples in soak.rss.items():
        warm = [rss for t, rss in samples if t >= warm_at]
        if not warm:
            continue
        start_mb, end_mb = warm[0] / 2**20, statistics.mean(warm[-3:]) / 2**20
        mid_mb = warm[len(warm) // 2] / 2**20
        memory[name] = {
            "rss_after_warmup_mb": round(start_mb, 1),
            "rss_mid_mb": round(mid_mb, 1),
            "rss_end_mb": round(end_mb, 1),
            # growth over the second half: a leak keeps growing, a warm-up plateau does not
            "second_half_growth": round(end_mb / mid_mb - 1, 3),
            "rss_peak_mb": round(max(warm) / 2**20, 1),
            "growth": round(end_mb / start_mb - 1, 3),
        }
    restarts = {n: i.get("restarts", 0) for n, i in state.get("services", {}).items()}
    logged = logs.error_lines(data_dir / "logs")
    error_lines = {source: len(found) for source, found in logged.items()}
    errors = [e.describe() for found in logged.values() for e in found]
    pending = [i for i, s in statuses.items() if s not in FINAL]
    problems = []
    if failed:
        problems.append(f"{len(failed)} chat turns did not end with done")
    if pending or soak.upload_errors:
        problems.append(f"uploads not settled: {pending[:5]} {soak.upload_errors[:3]}")
    if outcomes.get("broken:indexed"):
        problems.append("a broken file was indexed")
    if stored != len(done):
        problems.append(f"messages completed {len(done)} != stored {stored}")
    if any(restarts.values()):
        problems.append(f"restarts {restarts}")
    grew = {n: m["growth"] for n, m in memory.items() if m["growth"] > args.max_growth}
    if grew:
        problems.append(f"RSS grew after warm-up: {grew}")
    if errors:
        # the soak injects no fault a service should log as an error: a broken upload is the
        # uploader's mistake (a documents.failed event), not the service's
        problems.append(f"{len(errors)} ERROR log lines")
    return {
        "duration_s": round(elapsed, 1),
        "chats": args.chats,
        "turns": len(soak.turns),
        "turns_done": len(done),
        "turns_refused": sum(1 for t in done if t.refused),
        "turns_failed": {
            o: sum(1 for t in failed if t.outcome == o) for o in {t.outcome for t in failed}
        },
        "turn_errors": dict(Counter(t.error for t in failed if t.error).most_common()),
        "turns_per_s": round(len(soak.turns) / elapsed, 2),
        "turns_done_per_s": round(len(done) / elapsed, 2),
        "shed": len(soak.shed),
        "overload": {k: int(v) for k, v in soak.overload.items()},
        "first_token_s": {"p50": _pct(firsts, 0.5), "p95": _pct(firsts, 0.95)},
        "admitted_first_token_s": {
            "p50": _pct(admitted_firsts, 0.5),
            "p95": _pct(admitted_firsts, 0.95),
        },
        "answer_s": {"p50": _pct(totals, 0.5), "p95": _pct(totals, 0.95)},
        "uploads": len(soak.uploads),
        "uploads_refused_at_upload": refused_at_upload,
        "upload_outcomes": outcomes,
        "uploads_pending": len(pending),
        "drain_s": round(drained_s, 1),
        "messages_completed": len(done),
        "messages_stored": stored,
        "memory": memory,
        "warmup_s": round(warm_at, 1),
        "restarts": restarts,
        "error_log_lines": error_lines,
        "errors": errors[:20],
        "cpu": _cpu_report(soak),
        "problems": problems,
    }


def _cpu_report(soak: Soak) -> dict[str, Any]:
    """CPU seconds a turn, by process and in all, over the window after warm-up."""
    turns = max(1, soak.cpu_turns)
    services = {n: c for n, c in soak.cpu_s.items() if n not in {"nats", "postgres"}}
    return {
        "window_turns": soak.cpu_turns,
        "cpu_s": {n: round(c, 2) for n, c in soak.cpu_s.items()},
        "per_turn_s": {n: round(c / turns, 4) for n, c in soak.cpu_s.items()},
        # the services' cost a turn (ingest's share is the uploads'); with NATS and Postgres
        "services_per_turn_s": round(sum(services.values()) / turns, 4),
        "all_per_turn_s": round(sum(soak.cpu_s.values()) / turns, 4),
        # a turn that ends in an error event costs little and answers nothing: the services'
        # CPU over the turns answered
        "services_per_answered_turn_s": round(
            sum(services.values()) / max(1, soak.cpu_done_turns), 4
        ),
        # the reader's core-milliseconds and word pieces a turn, by service that reads
        "reading_per_turn": {
            name: {
                "core_ms": round(1000 * r["cpu_s"] / turns, 1),
                "pieces": round(r["pieces"] / turns),
            }
            for name, r in soak.reading.items()
        },
    }


def accepted_run(path: Path = BENCHMARKS) -> dict[str, Any] | None:
    """The figures of the last accepted run, kept in ``docs/benchmarks.md`` (None: none)."""
    if not path.is_file():
        return None
    found = ACCEPTED.search(path.read_text())
    return json.loads(found.group(1)) if found else None


def summary(result: dict[str, Any]) -> dict[str, Any]:
    """What is kept of an accepted run, and compared with later ones."""
    cpu = result["cpu"]
    return {
        "chats": result["chats"],
        "duration_s": result["duration_s"],
        "turns": result["turns"],
        "turns_per_s": result["turns_per_s"],
        "turns_done_per_s": result.get("turns_done_per_s"),
        "first_token_p50_s": result["first_token_s"]["p50"],
        "first_token_p95_s": result["first_token_s"]["p95"],
        "cpu_per_turn_s": cpu["per_turn_s"],
        "services_cpu_per_turn_s": cpu["services_per_turn_s"],
        "machine": result.get("machine"),
    }


def probe_machine(reads: int = 12) -> dict[str, Any]:
    """This machine's CPU and how long the re-ranker's reader takes a word piece (core-ms,
    the median of ``reads`` reads of one ``PROBE_PIECES`` pair on one thread, after two)."""
    from lectern_common import reading

    reader = reading.Reader.load(reading.PACKAGED_L3, threads=1)
    rng = random.Random(0)
    passage = " ".join(rng.choice(WORDS) for _ in range(PROBE_PIECES * 2))
    question = "What does the membrane do to the energy of the cell?"
    seconds = []
    for _ in range(reads + 2):
        began = time.thread_time()
        reader.logits(question, [passage], kind="passage", max_length=PROBE_PIECES)
        seconds.append(time.thread_time() - began)
    read_s = statistics.median(seconds[2:])
    return {
        "cpu": _cpu_model(),
        "reader_ms_per_piece": round(read_s * 1000 / PROBE_PIECES, 4),
        # what that read is against what one core can do: the machine's bound on reading
        "reader_gflops": round(reader_flops(PROBE_PIECES) / read_s / 1e9, 1),
        "core_gflops": round(matrix_gflops(), 1),
    }


def reader_flops(pieces: int) -> float:
    """Floating-point operations of one read of ``pieces`` word pieces by the re-ranker's
    reader (multiplications and additions of its matrix products; the rest is a few %)."""
    h, f = READER_HIDDEN, READER_FEED_FORWARD
    per_layer = 2 * pieces * (4 * h * h + 2 * h * f) + 4 * pieces * pieces * h
    return float(READER_LAYERS * per_layer)


def matrix_gflops(runs: int = 30) -> float:
    """One core's rate at the reader's largest product (a 192-piece pair's 192 x 384 by
    384 x 1,536, in float, through onnxruntime on one thread): the most a reader of this
    size can read a second here (the median of ``runs``, after three), in a session opened
    as the services open the reader's."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from lectern_common import onnx_models

    rows, inner, cols = PROBE_PIECES, READER_HIDDEN, READER_FEED_FORWARD
    weight = np.random.default_rng(0).standard_normal((inner, cols)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "probe",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, inner])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [rows, cols])],
        [numpy_helper.from_array(weight, "w")],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "matmul.onnx"
        onnx.save(model, str(path))
        session = onnx_models.open_session(path, threads=1)
    x = np.ones((rows, inner), dtype=np.float32)
    seconds = []
    for _ in range(runs + 3):
        began = time.thread_time()
        session.run(None, {"x": x})
        seconds.append(time.thread_time() - began)
    return 2 * rows * inner * cols / statistics.median(seconds[3:]) / 1e9


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "unknown"


def other_machine(result: dict[str, Any], accepted: dict[str, Any]) -> str | None:
    """Why the accepted run's turns a second say nothing of this run's (None: they do): its
    machine read a word piece more than ``MACHINE_TOLERANCE`` times faster or slower."""
    here, there = result.get("machine"), accepted.get("machine")
    if not here or not there:
        return None  # an accepted run from before the probe: compared as it always was
    ratio = here["reader_ms_per_piece"] / max(there["reader_ms_per_piece"], 1e-9)
    if 1 / MACHINE_TOLERANCE <= ratio <= MACHINE_TOLERANCE:
        return None
    return (
        f"the accepted run was on another machine ({there['cpu']}: a word piece read in "
        f"{there['reader_ms_per_piece']} core-ms, here {here['reader_ms_per_piece']}, "
        f"{ratio:.2f}x): turns a second not compared; --accept a run on this machine"
    )


def judge(result: dict[str, Any], accepted: dict[str, Any] | None) -> list[str]:
    """The speed checks of a run: turns a second against the accepted run's (same number of
    chats, a machine that reads as fast), and first token p95 at the default 20 chats."""
    problems: list[str] = []
    if (
        accepted is not None
        and other_machine(result, accepted) is None
        and accepted.get("chats") == result["chats"]
    ):
        # answered turns: a turn that ends in an error event is no throughput (the accepted
        # runs before 2026-12-04 kept turns a second only, when every turn was answered)
        done = result.get("turns_done_per_s") or result["turns_per_s"]
        then = accepted.get("turns_done_per_s") or accepted["turns_per_s"]
        ratio = done / max(float(then), 1e-9)
        if ratio < MIN_THROUGHPUT_RATIO:
            problems.append(
                f"turns answered a second {done} are {ratio:.2f} of the accepted run's {then} "
                f"(below {MIN_THROUGHPUT_RATIO})"
            )
    p95 = result["first_token_s"]["p95"]
    if result["chats"] == DEFAULT_CHATS and p95 is not None and p95 > MAX_FIRST_TOKEN_P95_S:
        problems.append(
            f"first token p95 {p95 * 1000:.0f} ms over {MAX_FIRST_TOKEN_P95_S * 1000:.0f} ms "
            f"at {DEFAULT_CHATS} chats"
        )
    return problems


def _commit() -> str:
    try:
        out = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return "?"
    return out.stdout.strip()


def accept(result: dict[str, Any], path: Path = BENCHMARKS) -> None:
    """Keep this run's figures in ``docs/benchmarks.md`` as the accepted run."""
    kept = {**summary(result), "commit": _commit(), "date": time.strftime("%Y-%m-%d")}
    rows = [
        "| figure | accepted run |",
        "|---|---|",
        f"| commit, date | {kept['commit']}, {kept['date']} |",
        f"| chats, seconds | {kept['chats']}, {kept['duration_s']} |",
        f"| turns (a second) | {kept['turns']} ({kept['turns_per_s']}) |",
        f"| first token p50 / p95 | {_ms(kept['first_token_p50_s'])} / "
        f"{_ms(kept['first_token_p95_s'])} |",
        f"| CPU seconds a turn, the services | {kept['services_cpu_per_turn_s']} |",
    ]
    if machine := kept.get("machine"):
        rows.insert(4, f"| machine (a word piece read in) | {machine['cpu']} "
                       f"({machine['reader_ms_per_piece']} core-ms) |")  # fmt: skip
    rows += [
        f"| CPU seconds a turn, {name} | {value} |"
        for name, value in sorted(kept["cpu_per_turn_s"].items(), key=lambda kv: -kv[1])
    ]
    block = "\n".join([BEGIN, f"<!-- soak-accepted {json.dumps(kept)} -->", "", *rows, END])
    text = path.read_text()
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        text = head + block + rest.split(END, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n## Under load — `make soak`\n\n" + block + "\n"
    path.write_text(text)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.0f} ms"


def _compare(result: dict[str, Any], accepted: dict[str, Any] | None) -> None:
    """This run's figures as ratios to the accepted run's."""
    if accepted is None:
        print("  against accepted  none kept in docs/benchmarks.md (--accept keeps this run)")
        return
    if (note := other_machine(result, accepted)) is not None:
        print(f"  against accepted  {note}")
    run = f"{accepted['chats']} chats, {accepted['duration_s']} s"
    print(f"  against accepted  run of {accepted.get('commit', '?')} on "
          f"{accepted.get('date', '?')} ({run}):")  # fmt: skip
    now = summary(result)

    def ratio(a: float | None, b: float | None) -> str:
        return "-" if a is None or not b else f"{a / b:.2f}x"

    done = now.get("turns_done_per_s") or now["turns_per_s"]
    then = accepted.get("turns_done_per_s") or accepted["turns_per_s"]
    print(f"    turns answered a second {done} / {then} = {ratio(done, then)}")
    print(f"    first token p95  {_ms(now['first_token_p95_s'])} / "
          f"{_ms(accepted['first_token_p95_s'])} = "
          f"{ratio(now['first_token_p95_s'], accepted['first_token_p95_s'])}")  # fmt: skip
    cpu_now, cpu_then = now["services_cpu_per_turn_s"], accepted["services_cpu_per_turn_s"]
    print(f"    CPU a turn       {cpu_now} / {cpu_then} = {ratio(cpu_now, cpu_then)}")
    for name, value in sorted(now["cpu_per_turn_s"].items(), key=lambda kv: -kv[1]):
        before = accepted["cpu_per_turn_s"].get(name)
        print(f"      {name:<14} {value} / {before} = {ratio(value, before)}")


def _print(result: dict[str, Any]) -> None:
    ms = _ms
    r = result
    print(f"\nsoak: {r['chats']} concurrent chats + continuous ingestion for {r['duration_s']} s")
    print(
        f"  chat turns        {r['turns']} ({r['turns_per_s']}/s), done {r['turns_done']} "
        f"({r.get('turns_done_per_s')}/s) "
        f"(of which refused as off-topic {r['turns_refused']}), failed {r['turns_failed']}"
    )
    for kind, count in r.get("turn_errors", {}).items():
        print(f"    error event    {count} x {kind}")
    print(
        f"  first token       p50 {ms(r['first_token_s']['p50'])}, "
        f"p95 {ms(r['first_token_s']['p95'])} (from the question's first attempt)"
    )
    if r.get("shed"):
        admitted = r["admitted_first_token_s"]
        print(
            f"  overloaded (503)  {r['shed']} attempts refused and asked again after their "
            f"Retry-After; the admitted turns' first token p50 {ms(admitted['p50'])}, "
            f"p95 {ms(admitted['p95'])}"
        )
    if r.get("overload"):
        o = r["overload"]
        print(
            f"  overload          {o['rerank_fallbacks']} turns answered from the retriever's "
            f"order (the re-ranker did not answer in time), {o['requests_expired']} requests "
            f"answered expired"
        )
    print(f"  whole answer      p50 {ms(r['answer_s']['p50'])}, p95 {ms(r['answer_s']['p95'])}")
    print(
        f"  uploads           {r['uploads']} = {r['upload_outcomes']} + refused at upload "
        f"{r['uploads_refused_at_upload']}; pending {r['uploads_pending']} "
        f"(queue drained {r['drain_s']} s after the load stopped)"
    )
    print(f"  messages          completed {r['messages_completed']}, stored {r['messages_stored']}")
    print(f"  RSS (MB) after {r['warmup_s']} s warm-up -> half-way -> end (peak), growth "
          "(second half):")  # fmt: skip
    for name, m in r["memory"].items():
        print(
            f"    {name:<10} {m['rss_after_warmup_mb']:>7} -> {m['rss_mid_mb']:>7} -> "
            f"{m['rss_end_mb']:>7} ({m['rss_peak_mb']}), {m['growth']:+.1%} "
            f"({m['second_half_growth']:+.1%})"
        )
    cpu = r["cpu"]
    print(f"  CPU seconds a turn, over {cpu['window_turns']} turns after warm-up "
          f"(services {cpu['services_per_turn_s']}, with NATS and Postgres "
          f"{cpu['all_per_turn_s']}; the services a turn answered "
          f"{cpu.get('services_per_answered_turn_s')}):")  # fmt: skip
    for name, per_turn in sorted(cpu["per_turn_s"].items(), key=lambda kv: -kv[1]):
        print(f"    {name:<10} {per_turn:.4f} ({cpu['cpu_s'][name]} s)")
    for name, read in cpu["reading_per_turn"].items():
        print(f"  reading in {name:<10} {read['core_ms']} core-ms and {read['pieces']} word "
              "pieces a turn")  # fmt: skip
    if (read := cpu["reading_per_turn"].get("reranker")) and (machine := result.get("machine")):
        # the re-ranker's pieces at this core's matrix rate: what no software can undercut
        # short of reading less (pairs of ~PROBE_PIECES pieces each)
        floor = read["pieces"] * reader_flops(PROBE_PIECES) / PROBE_PIECES
        print(f"  reading's floor   the re-ranker's {read['pieces']} pieces a turn need "
              f"{floor / machine['core_gflops'] / 1e6:.0f} core-ms at this core's "
              f"{machine['core_gflops']} GFLOP/s")  # fmt: skip
    print(f"  restarts          {r['restarts']}")
    print(f"  ERROR log lines   {r['error_log_lines']}")
    for line in r["errors"]:
        print(f"    {line}")
    _compare(r, r.get("accepted"))
    print("  verdict           " + ("OK" if not r["problems"] else "; ".join(r["problems"])))


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--duration", type=float, default=300.0, help="seconds of load")
    parser.add_argument("--chats", type=int, default=20, help="concurrent students")
    parser.add_argument("--upload-every", type=float, default=5.0, help="seconds between uploads")
    parser.add_argument(
        "--warmup", type=float, default=60.0, help="seconds before RSS is baselined"
    )
    parser.add_argument(
        "--max-growth", type=float, default=0.2, help="allowed RSS growth after warm-up"
    )
    parser.add_argument("--drain-timeout", type=float, default=300.0)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json", type=Path, default=Path("/tmp/lectern-soak.json"))
    parser.add_argument(
        "--accept", action="store_true",
        help="keep this run's figures in docs/benchmarks.md as the accepted run (only a run "
        "that broke no invariant)",
    )  # fmt: skip
    args = parser.parse_args()
    machine = probe_machine()  # before the stack starts: the machine quiet
    print(f"machine: {machine['cpu']}, a word piece read in {machine['reader_ms_per_piece']} "
          f"core-ms (the re-ranker's reader, one thread: {machine['reader_gflops']} GFLOP/s, "
          f"where one core multiplies matrices at {machine['core_gflops']})")  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="lectern-soak-") as tmp:
        data_dir = Path(tmp)
        data_dir.chmod(0o711)  # the embedded Postgres's account must traverse it
        with embedded_stack(data_dir=data_dir, report=lambda m: print(m, flush=True)) as (
            url,
            secret,
        ):
            result = asyncio.run(_run(url, secret, data_dir, args))
    result["machine"] = machine
    result["accepted"] = accepted = accepted_run()
    broken = list(result["problems"])
    result["problems"] += judge(result, accepted)
    args.json.write_text(json.dumps(result, indent=2))
    _print(result)
    print(f"\n(JSON in {args.json})")
    if args.accept and not broken:
        # a run that keeps every invariant is the figure later runs are compared with, even
        # when it misses the first-token target: the verdict above says so either way
        accept(result)
        print(f"kept as the accepted run in {BENCHMARKS.relative_to(ROOT)}")
    elif args.accept:
        print("not kept as the accepted run: an invariant broke")
    return 1 if result["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
