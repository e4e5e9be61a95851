"""`lectern up` as a user runs it: all five services ready within 60 s, status healthy, the
demo corpus indexed and answering with citations, a crashed service restarted, a clean
SIGTERM, and data that survives a restart."""

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
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import nats
import pytest

from lectern_common.runtime.nats import free_port
from lectern_common.runtime.supervisor import SERVICES, process_alive, read_state

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


def start_stack(base: Path, run: int) -> Stack:
    """`lectern up` on free ports for everything, so a developer's stack is never touched."""
    env = dict(os.environ)
    for name in SERVICES:
        if name != "gateway":
            env[f"LECTERN_{name.upper()}_HTTP_PORT"] = str(free_port())
    output = base / f"up-{run}.txt"
    command = [
        sys.executable, "-m", "lectern_cli", "up",
        "--data-dir", str(base / "data"),
        "--port", str(free_port()),
        "--nats-port", str(free_port()),
        "--nats-monitor-port", str(free_port()),
        "--graceful-timeout", "15",
    ]  # fmt: skip
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
    """Whether every service's /readyz answers 200."""
    state = read_state(stack.data_dir)
    if state is None or set(state.get("services", {})) != set(SERVICES):
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

    from lectern_cli.token_cmd import make_token, signing_secret

    secret = signing_secret(os.environ)
    assert secret is not None
    token = make_token(secret=secret, tenant="demo", user="e2e-student", role="student",
                       plan="pro", ttl_s=600)  # fmt: skip
    headers = {"Authorization": f"Bearer {token}"}
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
    nc = await nats.connect(state["nats"]["url"])
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
    nc = await nats.connect(state["nats"]["url"])
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

        code, status = lectern_status(stack.data_dir)
        assert code == 0, status
        assert status["healthy"] is True
        assert set(status["services"]) == set(SERVICES)
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
    finally:
        if stack.process.poll() is None:  # a failed assertion: still stop everything
            stack.process.send_signal(signal.SIGTERM)
            try:
                stack.process.wait(STOP_WITHIN_S)
            except subprocess.TimeoutExpired:
                stack.process.kill()
                stack.process.wait()
