"""`lectern up` as a user runs it: all five services (and the gateway's worker) ready within
60 s, status healthy, the demo corpus indexed and answering with citations, a crashed service
restarted, a clean SIGTERM, and data that survives a restart; and services SIGKILLed mid-work
that lose nothing: ingest, the retriever, memory, NATS, and the gateway's worker in the middle
of webhook deliveries."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import nats
import pytest
from prometheus_client.parser import text_string_to_metric_families

from lectern_cli.runtime.processes import GATEWAY_WORKER, PROCESSES, SERVICES
from lectern_cli.runtime.state import process_alive, read_state, stack_nats_url
from lectern_common.runtime.nats import free_port

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

READY_WITHIN_S = 60.0  # issue 2: every /readyz answers 200 within 60 s of the stack starting
DEMO_INDEXED_WITHIN_S = 240.0
STOP_WITHIN_S = 40.0
MARKER_STREAM = "LECTERN_DEADLETTER"
MARKER_SUBJECT = "lectern.deadletter.v1"


@dataclass
class Stack:
    """One `lectern up` process."""

    process: subprocess.Popen[bytes]
    data_dir: Path
    output: Path
    started: float

    def text(self) -> str:
        """What `lectern up` printed, plus the tail of each service log."""
        out = self.output.read_text(errors="replace")
        for log in sorted((self.data_dir / "logs").glob("*.log")):
            out += f"\n--- {log.name}\n" + log.read_text(errors="replace")[-1500:]
        return out

    def state(self) -> dict[str, Any]:
        """The supervisor's stack.json."""
        state = read_state(self.data_dir)
        assert state is not None, self.text()
        return state


@pytest.fixture
def base_dir() -> Iterator[Path]:
    """A directory the unprivileged Postgres account can traverse (tmp_path is 0700)."""
    base = Path("/tmp") / f"lectern-e2e-{uuid.uuid4().hex[:8]}"
    base.mkdir(mode=0o755)
    os.chmod(base, 0o755)  # noqa: S103 - the embedded Postgres account must traverse it
    yield base
    shutil.rmtree(base, ignore_errors=True)


def start_stack(
    base: Path,
    run: int,
    *,
    demo: bool = True,
    nats_restart_after: float | None = None,
    env_extra: dict[str, str] | None = None,
) -> Stack:
    """`lectern up` on free ports for everything, so a developer's stack is never touched."""
    env = {**os.environ, **(env_extra or {})}
    for name in SERVICES:
        if name != "gateway":
            env[f"LECTERN_{name.upper()}_HTTP_PORT"] = str(free_port())
    env["LECTERN_GATEWAY_WORKER_HTTP_PORT"] = str(free_port())
    output = base / f"up-{run}.txt"
    command = [
        sys.executable, "-m", "lectern_cli", "up",
        "--data-dir", str(base / "data"),
        "--port", str(free_port()),
        "--nats-port", str(free_port()),
        "--nats-monitor-port", str(free_port()),
        "--graceful-timeout", "15",
    ]  # fmt: skip
    command += [] if demo else ["--no-demo"]
    if nats_restart_after is not None:
        command += ["--nats-restart-after", str(nats_restart_after)]
    with open(output, "wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
    return Stack(process, base / "data", output, time.monotonic())


async def wait_until(
    stack: Stack, what: str, timeout: float, condition: Callable[[], Any]
) -> float:
    """Poll ``condition`` (sync or async) until true; seconds since the stack started."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if stack.process.poll() is not None:
            pytest.fail(f"lectern up exited ({stack.process.returncode}):\n{stack.text()}")
        result = condition()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return time.monotonic() - stack.started
        await asyncio.sleep(0.25)
    pytest.fail(f"{what} not within {timeout} s:\n{stack.text()}")


async def all_ready(stack: Stack) -> bool:
    """Whether every service's /readyz (and the gateway worker's) answers 200."""
    state = read_state(stack.data_dir)
    if state is None or set(state.get("services", {})) != set(PROCESSES):
        return False
    # the supervisor's own verdict too: it polls every 0.5 s, so /readyz can answer 200 before
    # it has noticed and printed its "ready: ..." line
    if not state.get("all_ready"):
        return False
    async with httpx.AsyncClient(timeout=2.0) as client:
        for info in state["services"].values():
            try:
                response = await client.get(f"{info['url']}/readyz")
            except httpx.HTTPError:
                return False
            if response.status_code != 200:
                return False
    return True


#: per service, metrics its own /metrics must show once the demo was indexed and asked
EXPECTED_METRICS: dict[str, list[tuple[str, dict[str, str]]]] = {
    "gateway": [
        ("lectern_chat_time_to_first_token_seconds_count", {}),
        ("lectern_chat_answer_duration_seconds_count", {}),
        ("lectern_chat_answers_total", {"answered_by": "offline"}),
        ("lectern_chat_streams_in_flight", {}),
        ("lectern_outbox_backlog", {}),
    ],
    "ingest": [
        ("lectern_documents_ingested_total", {"outcome": "indexed"}),
        ("lectern_consumer_pending", {"consumer": "lectern-ingest"}),
    ],
    "retriever": [("lectern_retrieval_stage_duration_seconds_count", {"stage": "fuse"})],
    "reranker": [("lectern_retrieval_stage_duration_seconds_count", {"stage": "score"})],
    "memory": [
        ("lectern_consumer_pending", {"consumer": "lectern-memory-quizzes"}),
        ("lectern_outbox_backlog", {}),
    ],
    # the webhook dispatch's durable consumers are the worker's, not the HTTP gateway's
    GATEWAY_WORKER: [
        ("lectern_consumer_pending", {"consumer": "lectern-gateway-webhooks"}),
        ("lectern_outbox_backlog", {}),
    ],
}


async def assert_each_service_scrapes_its_metrics(state: dict[str, Any]) -> None:
    """Every service's own process serves its metrics in Prometheus' text format."""
    async with httpx.AsyncClient(timeout=10.0) as client:
        for name, wanted in EXPECTED_METRICS.items():
            url = state["services"][name]["url"]
            for _ in range(40):  # gauges of consumers are read every few seconds
                response = await client.get(f"{url}/metrics")
                assert response.status_code == 200, (name, response.text)
                names = {
                    sample.name
                    for family in text_string_to_metric_families(response.text)
                    for sample in family.samples
                    if sample.name.startswith("lectern_")
                }
                missing = [
                    (metric, labels) for metric, labels in wanted
                    if not _has_sample(response.text, metric, labels)
                ]  # fmt: skip
                if not missing:
                    break
                await asyncio.sleep(0.5)
            assert not missing, (name, missing, sorted(names))


def _has_sample(scrape: str, name: str, labels: dict[str, str]) -> bool:
    return any(
        sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items())
        for family in text_string_to_metric_families(scrape)
        for sample in family.samples
    )


def lectern_status(data_dir: Path) -> tuple[int, dict[str, Any]]:
    """`lectern status --json` as a user runs it."""
    done = subprocess.run(
        [sys.executable, "-m", "lectern_cli", "status", "--json", "--data-dir", str(data_dir)],
        capture_output=True,
        timeout=60,
        check=False,
    )
    return done.returncode, json.loads(done.stdout)


def stop_stack(stack: Stack, signum: signal.Signals = signal.SIGTERM) -> float:
    """SIGTERM (or Ctrl-C's SIGINT), then assert a clean exit with nothing left running."""
    state = stack.state()
    pids = [(f"service {n}", i["pid"], i["pid_create_time"]) for n, i in state["services"].items()]
    pids += [
        (what, state[what]["pid"], state[what]["pid_create_time"]) for what in ("nats", "postgres")
    ]
    began = time.monotonic()
    stack.process.send_signal(signum)
    try:
        code = stack.process.wait(STOP_WITHIN_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"lectern up did not stop within {STOP_WITHIN_S} s:\n{stack.text()}")
    took = time.monotonic() - began
    assert code == 0, stack.text()
    left = [(what, pid) for what, pid, created in pids if process_alive(pid, created)]
    assert not left, f"still running after stop: {left}"
    assert stack.state()["running"] is False
    assert "stack stopped" in stack.output.read_text()
    assert "ready: gateway, ingest, retriever, reranker, memory" in stack.output.read_text()
    return took


async def ask_the_demo(state: dict[str, Any]) -> dict[str, Any]:
    """A question about a demo lesson, asked as a student of the demo tenant; its done event."""
    from httpx_sse import aconnect_sse

    headers = bearer("demo", "e2e-student", "student")
    url = state["gateway_url"]
    async with httpx.AsyncClient(timeout=60) as client:
        session = (await client.post(f"{url}/v1/sessions", json={}, headers=headers)).json()
        events: dict[str, Any] = {}
        async with aconnect_sse(
            client, "POST", f"{url}/v1/sessions/{session['id']}/messages",
            json={"content": "What does mitosis produce?"}, headers=headers,
        ) as source:  # fmt: skip
            assert source.response.status_code == 200
            text = ""
            async for sse in source.aiter_sse():
                data = json.loads(sse.data)
                text += data.get("text", "") if sse.event == "token" else ""
                events[sse.event] = data
        done: dict[str, Any] = events["done"]
        done["text"] = text
        # the cited chunk, through the source viewer
        chunk_id = done["citations"][0]["chunk_id"]
        viewer = await client.get(
            f"{url}/v1/chunks/{chunk_id}", params={"message_id": done["message_id"]},
            headers=headers,
        )  # fmt: skip
        assert viewer.status_code == 200, viewer.text
        done["viewer"] = viewer.json()
    return done


async def quiz_the_demo(state: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """A quiz on the demo lessons, answered wrongly throughout by a student; the checked
    attempt and the topics the memory service then records as struggles."""

    headers = bearer("demo", "e2e-quiz", "student")
    url = state["gateway_url"]
    async with httpx.AsyncClient(base_url=url, timeout=60, headers=headers) as client:
        made = await client.post("/v1/quizzes", json={"num_questions": 4})
        assert made.status_code == 201, made.text
        quiz = made.json()
        answers = {q["id"]: "not a real answer" for q in quiz["questions"]}
        checked = await client.post(f"/v1/quizzes/{quiz['id']}/attempts",
                                    json={"answers": answers})  # fmt: skip
        assert checked.status_code == 201, checked.text
    conn = await asyncpg.connect(state["postgres"]["dsn"])
    try:
        for _ in range(300):
            rows = await conn.fetch(
                "SELECT topic FROM user_memories WHERE tenant_id = 'demo' AND user_id = "
                "'e2e-quiz' AND kind = 'struggle'"
            )
            if rows:
                break
            await asyncio.sleep(0.1)
    finally:
        await conn.close()
    return checked.json(), sorted(str(r["topic"]) for r in rows)


async def demo_documents(state: dict[str, Any]) -> list[str]:
    """Titles of the demo tenant's documents."""
    conn = await asyncpg.connect(state["postgres"]["dsn"])
    try:
        rows = await conn.fetch("SELECT title FROM documents WHERE tenant_id = 'demo'")
    finally:
        await conn.close()
    return sorted(r["title"] for r in rows)


async def write_marker(state: dict[str, Any], marker: str) -> int:
    """A row in Postgres and a message in a JetStream stream; the message's sequence."""
    conn = await asyncpg.connect(state["postgres"]["dsn"])
    try:
        await conn.execute("CREATE TABLE IF NOT EXISTS e2e_marker (value text PRIMARY KEY)")
        await conn.execute("INSERT INTO e2e_marker VALUES ($1)", marker)
    finally:
        await conn.close()
    nc = await nats.connect(stack_nats_url(state))
    try:
        ack = await nc.jetstream().publish(MARKER_SUBJECT, marker.encode(), stream=MARKER_STREAM)
    finally:
        await nc.close()
    return int(ack.seq)


async def read_marker(state: dict[str, Any], seq: int) -> tuple[list[str], bytes]:
    """What `write_marker` left, read back."""
    conn = await asyncpg.connect(state["postgres"]["dsn"])
    try:
        rows = [r["value"] for r in await conn.fetch("SELECT value FROM e2e_marker")]
    finally:
        await conn.close()
    nc = await nats.connect(stack_nats_url(state))
    try:
        message = await nc.jetstream().get_msg(MARKER_STREAM, seq)
    finally:
        await nc.close()
    return rows, message.data or b""


async def test_lectern_up_runs_restarts_stops_and_keeps_data(
    base_dir: Path, record_property: Callable[[str, object], None]
) -> None:
    stack = start_stack(base_dir, 1)
    try:
        first_ready = await wait_until(stack, "all five /readyz 200", READY_WITHIN_S,
                                       lambda: all_ready(stack))  # fmt: skip
        record_property("time_to_ready_first_s", round(first_ready, 1))
        print(f"\nfirst start: all five services ready in {first_ready:.1f} s")
        state = stack.state()
        assert state["running"] is True
        assert state["gateway_url"].startswith("http://127.0.0.1:")
        output = stack.output.read_text()
        urls = ("gateway_url", "docs_url", "logs_dir")
        for needle in [state[k] for k in urls] + [state["nats"]["url"], state["postgres"]["dsn"]]:
            assert needle in output
        assert state["ui_url"] in output
        async with httpx.AsyncClient() as client:
            assert (await client.get(state["docs_url"])).status_code == 200
            page = await client.get(state["ui_url"])
            assert page.status_code == 200 and 'id="ask-form"' in page.text

        # the demo corpus loads in the background once the stack is ready, through ingest
        indexed_after = await wait_until(
            stack, "the demo corpus indexed", DEMO_INDEXED_WITHIN_S,
            lambda: "demo corpus indexed: 4 lessons" in stack.output.read_text(),
        )  # fmt: skip
        print(f"demo corpus indexed {indexed_after:.1f} s after the stack started")
        output = stack.output.read_text()
        assert output.index("ready: gateway") < output.index("demo corpus: 4 lessons uploaded")
        titles = await demo_documents(state)
        assert len(titles) == 4 and "The water cycle" in titles
        done = await ask_the_demo(state)
        assert done["band"] in ("high", "medium", "low"), done
        assert not done["knowledge_gap"]
        assert "daughter cells" in done["text"] and "[T" in done["text"]
        cited = [c for c in done["citations"] if c["supported"]]
        assert cited, done["citations"]
        assert done["viewer"]["document_title"] == "Cell division: mitosis and the cell cycle"
        assert done["viewer"]["highlights"], "the cited span is marked"
        # a quiz through the gateway; memory consumes quiz.attempted (its own NATS user)
        attempt, struggles = await quiz_the_demo(state)
        assert attempt["correct"] == 0 and attempt["total"] == 4
        assert struggles, "the quiz's topics became struggles"

        await assert_each_service_scrapes_its_metrics(state)

        code, status = lectern_status(stack.data_dir)
        assert code == 0, status
        assert status["healthy"] is True
        assert set(status["services"]) == set(PROCESSES)
        assert all(info["ready"] for info in status["services"].values())
        assert "LECTERN_DOCUMENTS" in status["streams"]
        assert isinstance(status["documents"]["indexed"], int)
        assert status["stack"]["time_to_ready_s"] is not None
        assert status["stack"]["time_to_ready_s"] < READY_WITHIN_S

        marker = f"kept-{uuid.uuid4().hex}"
        seq = await write_marker(state, marker)

        # a service killed behind the supervisor's back comes back
        victim = state["services"]["memory"]
        os.kill(victim["pid"], signal.SIGKILL)
        began = time.monotonic()
        await wait_until(
            stack, "memory restarted", READY_WITHIN_S,
            lambda: stack.state()["services"]["memory"]["restarts"] == 1,
        )  # fmt: skip
        await wait_until(stack, "memory ready again", READY_WITHIN_S, lambda: all_ready(stack))
        print(f"memory restarted and ready again in {time.monotonic() - began:.1f} s")
        assert stack.state()["services"]["memory"]["pid"] != victim["pid"]

        took = stop_stack(stack)
        print(f"clean stop in {took:.1f} s")

        stack = start_stack(base_dir, 2)
        second_ready = await wait_until(stack, "all five /readyz 200 again", READY_WITHIN_S,
                                        lambda: all_ready(stack))  # fmt: skip
        record_property("time_to_ready_second_s", round(second_ready, 1))
        print(f"second start: all five services ready in {second_ready:.1f} s")
        assert "database schema up to date" in stack.output.read_text()
        # the demo corpus is loaded once per data directory
        await wait_until(
            stack, "the demo corpus skipped", 10,
            lambda: "demo corpus: loaded on an earlier start" in stack.output.read_text(),
        )  # fmt: skip
        assert await demo_documents(stack.state()) == titles
        rows, data = await read_marker(stack.state(), seq)
        assert rows == [marker]
        assert data == marker.encode()
        stop_stack(stack, signal.SIGINT)
        assert_within_nats_permissions(stack)
    finally:
        ensure_stopped(stack)  # after a failed assertion too


def ensure_stopped(stack: Stack) -> None:
    """Stop `lectern up` if it still runs (SIGTERM, then SIGKILL)."""
    if stack.process.poll() is None:
        stack.process.send_signal(signal.SIGTERM)
        try:
            stack.process.wait(STOP_WITHIN_S)
        except subprocess.TimeoutExpired:
            stack.process.kill()
            stack.process.wait()


async def settled(dsn: str, document_id: str) -> bool:
    """Whether ingest is done with the document (indexed or failed)."""
    found = await document_row(dsn, document_id)
    return found is not None and found["status"] in ("indexed", "failed")


def assert_within_nats_permissions(stack: Stack) -> None:
    """Every service stayed inside its NATS user's permissions (nats-server logs each
    refused publish or subscribe as a "Permissions Violation")."""
    log = (stack.data_dir / "nats" / "nats-server.log").read_text(errors="replace")
    violations = [line for line in log.splitlines() if "Violation" in line]
    assert not violations, "\n".join(violations[:20])


def long_pdf(pages: int, seed: int = 7) -> bytes:
    """A long PDF of varied prose (a heading and ~300 words a page), like a course manual."""
    import random

    import pymupdf as _pymupdf

    pymupdf: Any = _pymupdf  # PyMuPDF's partial annotations make mypy --strict reject calls
    rng = random.Random(seed)
    words = ("cell membrane protein energy enzyme gene chromosome nucleus mitosis meiosis "
             "osmosis diffusion respiration photosynthesis tissue organ hormone receptor "
             "neuron synapse antibody antigen bacteria virus ecosystem population species "
             "mutation allele inheritance evolution adaptation habitat carbon oxygen water "
             "glucose starch lipid vitamin mineral digestion circulation").split()  # fmt: skip
    doc = pymupdf.open()
    for number in range(1, pages + 1):
        page = doc.new_page()
        page.insert_text((72, 60), f"Section {number}: {rng.choice(words).title()}", fontsize=16)
        sentences = []
        for _ in range(24):
            sentence = " ".join(rng.choice(words) for _ in range(12))
            sentences.append(sentence.capitalize() + f" ({number}).")
        page.insert_textbox(pymupdf.Rect(60, 80, 540, 780), " ".join(sentences), fontsize=9)
    data: bytes = doc.tobytes()
    doc.close()
    return data


def bearer(tenant: str, user: str, role: str) -> dict[str, str]:
    """A token of the stack's signing secret."""
    from lectern_cli.token_cmd import make_token, signing_secret

    secret = signing_secret(os.environ)
    assert secret is not None
    token = make_token(secret=secret, tenant=tenant, user=user, role=role, plan="pro",
                       ttl_s=1800)  # fmt: skip
    return {"Authorization": f"Bearer {token}"}


async def upload(url: str, tenant: str, data: bytes) -> str:
    """Upload as the tenant's teacher; the document's id."""
    async with httpx.AsyncClient(timeout=60) as client:
        response = await client.post(
            f"{url}/v1/documents", headers=bearer(tenant, "teacher-1", "teacher"),
            files={"file": ("manual.pdf", data, "application/pdf")},
            data={"title": "Biology manual", "subject": "biology"},
        )  # fmt: skip
    assert response.status_code == 202, response.text
    document_id: str = response.json()["id"]
    return document_id


async def upload_until_embedding(url: str, nats_url: str, tenant: str, data: bytes) -> str:
    """Upload ``data`` and return its document id once ingest is part-way through embedding
    it (its ``documents.progress`` events say so): the moment the fault tests strike."""
    nc = await nats.connect(nats_url)
    embedding = asyncio.Event()
    target: dict[str, str] = {}

    async def on_progress(message: Any) -> None:
        event = json.loads(message.data)
        ours = event.get("document_id") == target.get("id") and event.get("stage") == "embed"
        if ours and 0 < event["done"] < event["total"]:
            embedding.set()

    try:
        await nc.subscribe("lectern.documents.progress.v1", cb=on_progress)
        target["id"] = await upload(url, tenant, data)
        await asyncio.wait_for(embedding.wait(), 120)
    finally:
        await nc.close()
    return target["id"]


async def document_row(
    dsn: str, document_id: str, *, table: str = "ingest_documents"
) -> asyncpg.Record | None:
    """Ingest's record of the document (``table="documents"``: the gateway's row)."""
    conn = await asyncpg.connect(dsn)
    try:
        return await conn.fetchrow(
            f"SELECT * FROM {table} WHERE id = $1",  # noqa: S608 - a table name of the tests
            uuid.UUID(document_id),
        )
    finally:
        await conn.close()


async def chunk_fingerprint(dsn: str, document_id: str) -> list[tuple[Any, ...]]:
    """What identifies a document's index: every chunk's kind, place, text hash and id."""
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch(
            "SELECT chunk_index, kind, page_start, md5(text) AS hash, id FROM chunks "
            "WHERE document_id = $1 ORDER BY chunk_index, id", uuid.UUID(document_id),
        )  # fmt: skip
    finally:
        await conn.close()
    return [tuple(r) for r in rows]


async def outcome_events(nats_url: str, document_id: str) -> list[dict[str, Any]]:
    """Every documents.indexed / documents.failed event the stream holds for the document,
    read message by message by sequence (a consumer's pending count races its deliveries)."""
    from nats.js.errors import NotFoundError as MessageNotFound

    from lectern_common.broker import stream_for
    from lectern_common.events import Subjects

    wanted = (Subjects.DOCUMENTS_INDEXED, Subjects.DOCUMENTS_FAILED)
    stream = stream_for(Subjects.DOCUMENTS_INDEXED).name
    nc = await nats.connect(nats_url)
    found: list[dict[str, Any]] = []
    try:
        js = nc.jetstream()
        state = (await js.stream_info(stream)).state
        for seq in range(state.first_seq, state.last_seq + 1):
            try:
                message = await js.get_msg(stream, seq)
            except MessageNotFound:
                continue
            if message.subject not in wanted:
                continue
            event = json.loads(message.data or b"{}")
            if event.get("document_id") == document_id:
                found.append({"subject": message.subject, **event})
    finally:
        await nc.close()
    return found


async def stored_objects(nats_url: str) -> set[str]:
    """Names of every object in the documents bucket."""
    from lectern_common.broker import DOCUMENTS_BUCKET

    nc = await nats.connect(nats_url)
    try:
        store = await nc.jetstream().object_store(DOCUMENTS_BUCKET)
        return {info.name for info in await store.list() if not info.deleted}
    finally:
        await nc.close()


async def ask(url: str, tenant: str, question: str) -> dict[str, Any]:
    """A student's question over SSE: the last event (done or error) and the answer text."""
    from httpx_sse import aconnect_sse

    headers = bearer(tenant, "student-1", "student")
    async with httpx.AsyncClient(timeout=90) as client:
        session = (await client.post(f"{url}/v1/sessions", json={}, headers=headers)).json()
        last: dict[str, Any] = {}
        text = ""
        async with aconnect_sse(
            client, "POST", f"{url}/v1/sessions/{session['id']}/messages",
            json={"content": question}, headers=headers,
        ) as source:  # fmt: skip
            assert source.response.status_code == 200
            async for sse in source.aiter_sse():
                data = json.loads(sse.data)
                text += data.get("text", "") if sse.event == "token" else ""
                if sse.event in ("done", "error"):
                    last = {"event": sse.event, **data}
    return {**last, "text": text}


#: a webhook attempt's timeout in the fault stack; the receiver answers each after HOLD_S
WEBHOOK_TIMEOUT_S = 5.0
HOLD_S = 1.0
#: deliveries one worker sends at once (LECTERN_GATEWAY_WEBHOOK_CONCURRENCY's default): a
#: worker killed mid-delivery can have sent at most this many without recording them
WEBHOOK_CONCURRENCY = 8
WEBHOOK_EVENTS = 40

#: how long the killed NATS server stays down before the supervisor starts it again: longer
#: than a question (its 10 s request deadline) and an upload (5 s) sent during the outage
NATS_DOWN_S = 15.0


@pytest.fixture(scope="module")
async def fault_stack() -> AsyncIterator[Stack]:
    """One stack for the fault tests of this module, which each leave it whole (the
    supervisor starts what they kill again): stopped cleanly, within its NATS users'
    permissions, once they are done. JetStream redelivers a killed worker's upload one ack
    wait after its last keep-alive: 8 s here instead of 30 (keep-alives every 2 s), the same
    path in a third of the time."""
    base = Path("/tmp") / f"lectern-e2e-{uuid.uuid4().hex[:8]}"
    base.mkdir(mode=0o755)
    os.chmod(base, 0o755)  # noqa: S103 - the embedded Postgres account must traverse it
    env = {
        "LECTERN_INGEST_ACK_WAIT_S": "8", "LECTERN_INGEST_IN_PROGRESS_INTERVAL_S": "2",
        # webhooks to the test's receiver on 127.0.0.1; a killed worker's leases run out
        # WEBHOOK_TIMEOUT_S + 2 s after their claim instead of + 60 s
        "LECTERN_GATEWAY_URL_FETCH_ALLOWED_NETWORKS": '["127.0.0.0/8"]',
        "LECTERN_GATEWAY_WEBHOOK_TIMEOUT_S": str(WEBHOOK_TIMEOUT_S),
        "LECTERN_GATEWAY_WEBHOOK_LEASE_MARGIN_S": "2",
    }  # fmt: skip
    stack = start_stack(base, 1, demo=False, nats_restart_after=NATS_DOWN_S, env_extra=env)
    try:
        await wait_until(stack, "all five /readyz 200", READY_WITHIN_S, lambda: all_ready(stack))
        yield stack
        stop_stack(stack)
        assert_within_nats_permissions(stack)
    finally:
        ensure_stopped(stack)  # after a failed assertion too
        shutil.rmtree(base, ignore_errors=True)


async def test_services_killed_mid_work_lose_nothing(
    fault_stack: Stack, record_property: Callable[[str, object], None]
) -> None:
    """SIGKILL the ingest worker in the middle of a long PDF: restarted by the supervisor, the
    redelivered upload is indexed exactly once (the same chunks as an undisturbed run, one
    outcome event, no orphan objects). SIGKILL the retriever and the memory service while a
    chat is asked: the stream ends (an answer or an `error` event), and chat works after."""
    stack = fault_stack
    await wait_until(stack, "all five /readyz 200", READY_WITHIN_S, lambda: all_ready(stack))
    ingest_restarts = stack.state()["services"]["ingest"]["restarts"]
    state = stack.state()
    url, dsn, nats_url = state["gateway_url"], state["postgres"]["dsn"], stack_nats_url(state)
    # 50 pages, ~150 chunks (over 100; over ingest's 64 KiB of small uploads, which are
    # indexed in lists without progress events): embedding takes batches, the kill lands in
    # them (it was 120 pages: 3 embeddings of 360 chunks, 150 s of the suite on an AVX2 CPU)
    manual = long_pdf(50)

    # kill the worker once embedding is under way
    killed_doc = await upload_until_embedding(url, nats_url, "faults-a", manual)
    victim = stack.state()["services"]["ingest"]
    os.kill(victim["pid"], signal.SIGKILL)
    killed_at = time.monotonic()
    row = await document_row(dsn, killed_doc)
    assert row is not None and row["status"] == "processing", row
    assert await chunk_fingerprint(dsn, killed_doc) == [], "nothing stored before the kill"

    await wait_until(stack, "the killed upload indexed", 240,
                     lambda: settled(dsn, killed_doc))  # fmt: skip
    recovered_s = time.monotonic() - killed_at
    record_property("ingest_sigkill_recovery_s", round(recovered_s, 1))
    print(f"\ningest SIGKILLed mid-embedding: document indexed {recovered_s:.1f} s later")
    assert stack.state()["services"]["ingest"]["restarts"] == ingest_restarts + 1
    row = await document_row(dsn, killed_doc)
    assert row is not None and row["status"] == "indexed", row
    assert row["attempts"] == 2, "indexed by the redelivery after the kill"

    async def catalogued() -> bool:  # the outcome reached the gateway's row, as an event
        found = await document_row(dsn, killed_doc, table="documents")
        return found is not None and (found["status"], found["chunk_count"]) == (
            "indexed", row["chunk_count"])  # fmt: skip

    await wait_until(stack, "the gateway's row indexed", 30, catalogued)

    # the same bytes in another tenant, undisturbed
    clean_doc = await upload(url, "faults-b", manual)
    await wait_until(stack, "the undisturbed upload indexed", 240,
                     lambda: settled(dsn, clean_doc))  # fmt: skip
    killed = await chunk_fingerprint(dsn, killed_doc)
    clean = await chunk_fingerprint(dsn, clean_doc)
    assert len(killed) == row["chunk_count"] > 100
    assert [c[:4] for c in killed] == [c[:4] for c in clean], "same chunks, same text"
    assert len({c[4] for c in killed}) == len(killed), "no duplicate chunks"
    outcomes = await outcome_events(nats_url, killed_doc)
    assert [o["subject"] for o in outcomes] == ["lectern.documents.indexed.v1"], outcomes
    rows = [await document_row(dsn, d) for d in (killed_doc, clean_doc)]
    assert await stored_objects(nats_url) == {r["object_name"] for r in rows if r}

    # the retriever, then the memory service, killed as a question is asked
    for service in ("retriever", "memory"):
        before = stack.state()["services"][service]
        question = asyncio.create_task(ask(url, "faults-a", "What is osmosis?"))
        os.kill(before["pid"], signal.SIGKILL)
        began = time.monotonic()
        outcome = await asyncio.wait_for(question, 60)
        print(f"{service} SIGKILLed during a chat: '{outcome['event']}' after "
              f"{time.monotonic() - began:.1f} s")  # fmt: skip
        assert outcome["event"] in ("done", "error"), outcome
        restarts = before["restarts"] + 1

        def restarted(name: str = service, count: int = restarts) -> bool:
            return bool(stack.state()["services"][name]["restarts"] == count)

        await wait_until(stack, f"{service} restarted", READY_WITHIN_S, restarted)
        await wait_until(stack, "all ready again", READY_WITHIN_S, lambda: all_ready(stack))
        after = await ask(url, "faults-a", "What is osmosis?")
        assert after["event"] == "done" and after["citations"], after


async def test_nats_restart_loses_no_upload_and_chat_recovers(
    fault_stack: Stack, record_property: Callable[[str, object], None]
) -> None:
    """Kill NATS while a long PDF is being ingested, ask and upload during the outage, then
    start NATS again on its store: the services reconnect by themselves, the upload in flight
    ends indexed exactly once (one outcome event id, no duplicate chunks), requests during the
    outage end with an error in bounded time, and new uploads and chats work. The supervisor
    starts NATS again (``NATS_DOWN_S`` after the kill)."""
    stack = fault_stack
    await wait_until(stack, "all five /readyz 200", READY_WITHIN_S, lambda: all_ready(stack))
    ingest_restarts = stack.state()["services"]["ingest"]["restarts"]
    state = stack.state()
    url, dsn, nats_url = state["gateway_url"], state["postgres"]["dsn"], stack_nats_url(state)

    course = await upload(url, "nats-r", long_pdf(4, seed=3))
    await wait_until(stack, "the course indexed", 120, lambda: settled(dsn, course))

    # 60 pages, ~180 chunks: still embedding when NATS is killed (200 pages, ~600 chunks, cost
    # 220 s of the suite on an AVX2-only CPU and tested nothing more)
    in_flight = await upload_until_embedding(url, nats_url, "nats-r", long_pdf(60, seed=5))

    killed = state["nats"]["pid"]
    os.kill(killed, signal.SIGKILL)
    down_at = time.monotonic()
    # during the outage: a question ends with an error, an upload is refused; neither hangs
    # (both at once, so that the outage need not outlast them one after the other)

    async def timed(work: Any) -> tuple[Any, float]:
        began = time.monotonic()
        return await work, time.monotonic() - began

    async def refused_upload() -> httpx.Response:
        async with httpx.AsyncClient(timeout=60) as client:
            return await client.post(
                f"{url}/v1/documents", headers=bearer("nats-r", "teacher-1", "teacher"),
                files={"file": ("late.pdf", long_pdf(2, seed=9), "application/pdf")},
            )  # fmt: skip

    (during, asked_s), (refused, upload_s) = await asyncio.gather(
        timed(ask(url, "nats-r", "What is osmosis?")), timed(refused_upload())
    )
    print(f"\nNATS down: the chat ended with {during['event']!r} after {asked_s:.1f} s")
    assert during["event"] == "error", during
    assert asked_s < 30
    print(f"NATS down: an upload got {refused.status_code} after {upload_s:.1f} s")
    assert refused.status_code == 503, refused.text
    assert refused.headers["content-type"].startswith("application/problem+json")
    assert upload_s < 30

    assert time.monotonic() - down_at < NATS_DOWN_S, "the outage outlasted the questions"

    def nats_started_again() -> bool:
        nats_state = stack.state()["nats"]
        return bool(
            nats_state["pid"] != killed
            and process_alive(nats_state["pid"], nats_state["pid_create_time"])
        )

    await wait_until(stack, "NATS started again by the supervisor", 60, nats_started_again)
    up_at = time.monotonic()
    print(f"NATS started again by the supervisor {up_at - down_at:.1f} s after the kill")
    await wait_until(stack, "all ready after the restart", 90, lambda: all_ready(stack))
    ready_s = time.monotonic() - up_at
    await wait_until(stack, "the upload in flight settled", 300, lambda: settled(dsn, in_flight))
    indexed_s = time.monotonic() - up_at
    record_property("nats_restart_ready_s", round(ready_s, 1))
    print(f"NATS restarted: all services ready {ready_s:.1f} s later, the upload in flight "
          f"indexed {indexed_s:.1f} s later")  # fmt: skip
    row = await document_row(dsn, in_flight)
    assert row is not None and row["status"] == "indexed", row
    chunks = await chunk_fingerprint(dsn, in_flight)
    assert len(chunks) == row["chunk_count"] > 150
    assert len({c[0] for c in chunks}) == len(chunks), "no duplicate chunks"
    outcomes = await outcome_events(nats_url, in_flight)
    assert {o["subject"] for o in outcomes} == {"lectern.documents.indexed.v1"}, outcomes
    assert len({o["event_id"] for o in outcomes}) == 1, "one outcome, by its event id"
    restarts = stack.state()["services"]["ingest"]["restarts"]
    assert restarts == ingest_restarts, "reconnected, not restarted"

    after = await upload(url, "nats-r", long_pdf(3, seed=11))
    await wait_until(stack, "an upload after the restart indexed", 120,
                     lambda: settled(dsn, after))  # fmt: skip
    answer = await ask(url, "nats-r", "What is osmosis?")
    assert answer["event"] == "done" and answer["citations"], answer


@dataclass
class HookReceiver:
    """A webhook endpoint on 127.0.0.1 that verifies each delivery (Standard Webhooks), holds
    it ``HOLD_S`` (so a kill lands while some are in flight), answers 204 and keeps its
    ``webhook-id``."""

    secret: str = ""
    url: str = ""
    ids: list[str] = field(default_factory=list)
    #: the webhook-ids of the requests being held
    in_flight: set[str] = field(default_factory=set)
    refused: list[str] = field(default_factory=list)

    async def handle(self, request: Any) -> Any:
        from standardwebhooks import Webhook
        from starlette.responses import Response

        body = await request.body()
        self.in_flight.add(request.headers["webhook-id"])
        try:
            await asyncio.sleep(HOLD_S)
            try:
                payload = Webhook(self.secret).verify(body, dict(request.headers))
            except Exception as exc:
                self.refused.append(repr(exc))
                return Response(status_code=400)
            assert payload["event_id"] == request.headers["webhook-id"]
            self.ids.append(request.headers["webhook-id"])
            return Response(status_code=204)
        finally:
            self.in_flight.discard(request.headers["webhook-id"])


@asynccontextmanager
async def hook_receiver() -> AsyncIterator[HookReceiver]:
    """``HookReceiver`` served by uvicorn on a free port of 127.0.0.1."""
    import uvicorn
    from starlette.applications import Starlette
    from starlette.routing import Route

    receiver = HookReceiver()
    app = Starlette(routes=[Route("/hook", receiver.handle, methods=["POST"])])
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=0, log_config=None, access_log=False)
    )
    task = asyncio.create_task(server.serve())
    while not server.started:
        assert not task.done(), "the receiver did not start"
        await asyncio.sleep(0.01)
    receiver.url = f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}/hook"
    try:
        yield receiver
    finally:
        server.should_exit = True
        await task


async def publish_flags(nats_url: str, tenant: str, count: int) -> list[str]:
    """``count`` feedback.flagged events of the tenant on JetStream, as the gateway's outbox
    relay publishes them (the event id as ``Nats-Msg-Id``); their ids."""
    from lectern_common.events import FeedbackFlagged

    events = [
        FeedbackFlagged(
            tenant_id=tenant, flag_id=uuid.uuid4(), message_id=uuid.uuid4(),
            session_id=uuid.uuid4(), user_id="sam", reason="unclear", details=f"#{i}",
        )
        for i in range(count)
    ]  # fmt: skip
    nc = await nats.connect(nats_url)
    try:
        js = nc.jetstream()
        for event in events:
            await js.publish(
                event.subject, event.model_dump_json().encode(),
                headers={"Nats-Msg-Id": str(event.event_id)},
            )  # fmt: skip
    finally:
        await nc.close()
    return [str(event.event_id) for event in events]


async def delivery_rows(dsn: str, webhook_id: str) -> list[asyncpg.Record]:
    """The webhook's deliveries: event id, status, attempts."""
    conn = await asyncpg.connect(dsn)
    try:
        rows: list[asyncpg.Record] = await conn.fetch(
            "SELECT event_id, status, attempts FROM webhook_deliveries WHERE webhook_id = $1",
            uuid.UUID(webhook_id),
        )
    finally:
        await conn.close()
    return rows


async def test_the_gateway_worker_killed_mid_delivery_loses_and_repeats_nothing(
    fault_stack: Stack, record_property: Callable[[str, object], None]
) -> None:
    """SIGKILL the gateway's worker while webhook deliveries are in flight (the receiver holds
    each for a second): restarted by the supervisor, it delivers every event; an event is
    received twice only if its delivery was in flight at the kill (sent, not yet recorded:
    at most one claimed batch), and then with the same ``webhook-id``, as Standard Webhooks
    allows; no delivery ends failed."""
    from lectern_common.events import Subjects

    stack = fault_stack
    await wait_until(stack, "all /readyz 200", READY_WITHIN_S, lambda: all_ready(stack))
    state = stack.state()
    url, dsn, nats_url = state["gateway_url"], state["postgres"]["dsn"], stack_nats_url(state)
    tenant = f"hooks-{uuid.uuid4().hex[:6]}"
    async with hook_receiver() as receiver, httpx.AsyncClient(timeout=30) as client:
        created = await client.post(
            f"{url}/v1/webhooks", headers=bearer(tenant, "root", "admin"),
            json={"url": receiver.url, "event_types": [Subjects.FEEDBACK_FLAGGED]},
        )  # fmt: skip
        assert created.status_code == 201, created.text
        hook = created.json()
        receiver.secret = hook["secret"]
        published = await publish_flags(nats_url, tenant, WEBHOOK_EVENTS)
        # every event recorded as a delivery first: the kill strikes the sending, not the
        # JetStream messages (those a killed worker held come back after their ack wait)
        await wait_until(
            stack, "every delivery recorded", 60,
            lambda: _recorded(dsn, hook["id"], WEBHOOK_EVENTS),
        )  # fmt: skip
        await wait_until(
            stack, "deliveries under way", 60,
            lambda: len(receiver.ids) >= WEBHOOK_CONCURRENCY and receiver.in_flight,
        )  # fmt: skip
        victim = stack.state()["services"][GATEWAY_WORKER]
        os.kill(victim["pid"], signal.SIGKILL)
        killed_at = time.monotonic()
        # sent at the kill: held by the receiver, or answered but not yet recorded (at most
        # one claimed batch before them)
        answered, in_flight = list(receiver.ids), set(receiver.in_flight)
        await wait_until(
            stack, "the worker restarted", READY_WITHIN_S,
            lambda: stack.state()["services"][GATEWAY_WORKER]["restarts"]
            == victim["restarts"] + 1,
        )  # fmt: skip
        await wait_until(
            stack, "every delivery succeeded", 120,
            lambda: _all_succeeded(dsn, hook["id"], WEBHOOK_EVENTS),
        )  # fmt: skip
        recovered_s = time.monotonic() - killed_at
        await asyncio.sleep(HOLD_S * 2)  # a stray extra attempt would have arrived by now
        received = list(receiver.ids)
        refused = list(receiver.refused)
    duplicates = len(received) - len(set(received))
    record_property("webhook_worker_kill_recovery_s", round(recovered_s, 1))
    record_property("webhook_worker_kill_duplicates", duplicates)
    print(
        f"\ngateway worker SIGKILLed mid-delivery ({len(answered)} answered, {len(in_flight)} "
        f"in flight): "
        f"all {WEBHOOK_EVENTS} delivered {recovered_s:.1f} s later; expected "
        f"{WEBHOOK_EVENTS}, received {len(received)} ({len(set(received))} distinct), "
        f"duplicates {duplicates} (same webhook-id)"
    )
    assert refused == [], refused
    assert set(received) == set(published), "nothing lost"
    assert duplicates <= WEBHOOK_CONCURRENCY, "only the deliveries in flight at the kill"
    counts = {event_id: received.count(event_id) for event_id in set(received)}
    assert max(counts.values()) <= 2, counts
    twice = {event_id for event_id, n in counts.items() if n == 2}
    assert twice <= in_flight | set(answered[-WEBHOOK_CONCURRENCY:]), "only those sent at the kill"
    restarts = stack.state()["services"][GATEWAY_WORKER]["restarts"]
    assert restarts == victim["restarts"] + 1
    await wait_until(stack, "all ready again", READY_WITHIN_S, lambda: all_ready(stack))


async def _recorded(dsn: str, webhook_id: str, count: int) -> bool:
    return len(await delivery_rows(dsn, webhook_id)) == count


async def _all_succeeded(dsn: str, webhook_id: str, count: int) -> bool:
    rows = await delivery_rows(dsn, webhook_id)
    assert not [r for r in rows if r["status"] == "failed"], rows
    return len(rows) == count and all(r["status"] == "succeeded" for r in rows)
