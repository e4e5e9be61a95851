"""`lectern up --cluster`: three NATS servers, streams at 3 replicas, two replicas of every
service. Uploads, searches and chat turns run against both gateways while the NATS server
leading the ingest stream is SIGKILLed, then (once the supervisor has started it again,
``NATS_DOWN_S`` later) the next leader (``LECTERN_CHAOS_ROUNDS`` kills in all: 2 here, more
in ``make chaos``), then two of the three servers at once (no quorum: no upload accepted
until one is back), then one replica of each worker service (retriever, reranker, ingest,
memory) at once: every accepted upload is indexed once, every answered turn reaches the chat
stream once (by event id), and the peers answer while the killed replicas restart.

What the clients saw is asserted too (issue 49): no 5xx but 503, each 503 with
``Retry-After`` and the reason of the dependency that failed (an upload's is
``nats_unavailable``: Postgres is up throughout, so never ``database_unavailable``), no chat
``error`` event and no failed search or session while a quorum exists, and a turn answered
within ``WORKER_KILL_GAP_S`` (beyond what a turn took before) of a worker replica's SIGKILL.

Before the faults, a school's LMS (the tests' LTI platform) launches a student: the login
starts on one gateway and the launch ends on the other, within a second (issue 60)."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import nats
import pytest
from lectern_testing import logs

from lectern_cli.runtime.processes import SERVICES
from lectern_cli.runtime.state import process_alive, read_state, stack_nats_url
from lectern_common.broker import stream_for
from lectern_common.events import Subjects
from lectern_common.runtime.nats import free_port

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

READY_WITHIN_S = 120.0  # ten services loading their models on two cores
#: how many times the NATS server leading the ingest stream is killed (each brought back
#: before the next): two in ``make test``, more in the long ``make chaos``
ROUNDS = int(os.environ.get("LECTERN_CHAOS_ROUNDS", "2"))
#: how long a killed NATS server stays down before the supervisor starts it again
#: (``lectern up --nats-restart-after``): two of the three down that long lose the quorum
NATS_DOWN_S = 8.0
INGEST_STREAM = stream_for(Subjects.DOCUMENTS_UPLOADED).name
TENANT = f"cluster-{uuid.uuid4().hex[:6]}"
#: the demo lesson's opening section (it answers QUESTION): one chunk an upload, so that the
#: uploads' embedding keeps up on a slow machine (5 chunks an upload, 2-3 uploads a second,
#: outran ingest on an AVX2-only CPU: 0.15-0.2 s of a core a chunk, 2026-12-04)
_DEMO = (Path(__file__).resolve().parents[2] / "demo" / "mitosis.md").read_text()
LESSON = "\n## ".join(_DEMO.split("\n## ")[:2])
QUESTION = "What does mitosis produce?"
WORKERS = ("retriever", "reranker", "ingest", "memory")
#: the longest from a worker replica's SIGKILL to the next answered chat turn, beyond the
#: longest of the turns just before (issue 49: 10.7 s when a request the dead replica held was
#: waited for until its 10 s timeout; turns took 2-3 s under this load on an AVX2-only CPU)
WORKER_KILL_GAP_S = 2.0
#: the ingest consumer's ack wait here (30 s by default): a delivery a killed replica held
#: comes back after it
ACK_WAIT_S = 8
#: an upload's own ingest on two cores shared with ten processes under load (measured:
#: upload to indexed p95 7.5 s, max 8.0 s in a make chaos run); on a machine loaded more than
#: that, twice the longest ingest work the run's logs show (the batch the killed replica held
#: the upload in, then its own ingest after the redelivery: seen 2026-12-03, a batch of 7
#: small documents took 15 s, its embedding 12.5 s, and an upload in it waited 26 s)
INGEST_SLACK_S = 10.0
#: the longest the count of indexed uploads may stand still while some are not yet indexed
INDEXED_STALL_S = 60.0
#: how ingest logs a document's or a batch's work and how long it took
INGEST_WORK = re.compile(r"^indexed .* in ([0-9.]+) s \(")
#: the reasons a 503 may give per route: an upload's bytes go to a JetStream stream (NATS);
#: a search asks the retriever over NATS, and may fail only while the quorum is lost;
#: sessions live in Postgres alone, up throughout
ALLOWED_503 = {"uploads": {"nats_unavailable"}, "search": {"nats_unavailable", "upstream"}}
#: the gateways' public URL (``LECTERN_GATEWAY_LTI_PUBLIC_URL``): a launch starts on one
#: replica and ends on the other, as a load balancer before both serves it (issue 60)
LTI_PUBLIC_URL = "http://lectern.invalid"
#: the issue's budget for a launch is 1 s on this machine (measured 73-345 ms, docs/lti.md);
#: the suite runs beside another worker and other stacks, so its bound is three times that:
#: a regression guard (a key fetched per launch, a lock waited on), the figure printed
LAUNCH_BUDGET_S = 3.0
#: an ERROR line that names a lost peer is explained by a fault that was on when it was
#: logged, or had ended at most this long before (a request sent during the fault times out
#: after it: the services' NATS requests wait up to 10 s)
FAULT_GRACE_S = 15.0


@pytest.fixture
def base_dir() -> Iterator[Path]:
    """A directory the unprivileged Postgres account can traverse (tmp_path is 0700)."""
    base = Path("/tmp") / f"lectern-cluster-e2e-{uuid.uuid4().hex[:8]}"
    base.mkdir(mode=0o755)
    os.chmod(base, 0o755)  # noqa: S103 - the embedded Postgres account must traverse it
    yield base
    shutil.rmtree(base, ignore_errors=True)


def bearer(user: str, role: str) -> dict[str, str]:
    """A token of the stack's signing secret."""
    from lectern_cli.token_cmd import make_token, signing_secret

    secret = signing_secret(os.environ)
    assert secret is not None
    token = make_token(secret=secret, tenant=TENANT, user=user, role=role, plan="pro",
                       ttl_s=1800)  # fmt: skip
    return {"Authorization": f"Bearer {token}"}


@dataclass(frozen=True)
class Call:
    """One client call: its route, when it began and ended, and how it ended (``202``,
    ``503 nats_unavailable``, ``done``, ``error upstream``, ``ReadTimeout`` ...)."""

    route: str
    began: float
    ended: float
    outcome: str
    retry_after: str | None = None

    @property
    def status(self) -> str:
        """The outcome's first word: an HTTP status, ``done``, ``error`` or an exception."""
        return self.outcome.split(" ", 1)[0]


def _outcome(response: httpx.Response) -> str:
    """``201``, or ``503 nats_unavailable``: an error's status and problem reason."""
    if response.status_code < 400:
        return str(response.status_code)
    with contextlib.suppress(ValueError, AttributeError):
        return f"{response.status_code} {response.json().get('reason', '')}".strip()
    return str(response.status_code)


@dataclass
class Load:
    """Uploads, searches and questions sent round-robin to the two gateways, and every
    call's outcome."""

    gateways: list[str]
    calls: list[Call] = field(default_factory=list)
    accepted: set[str] = field(default_factory=set)
    accepted_at: dict[str, float] = field(default_factory=dict)
    upload_acks: list[float] = field(default_factory=list)
    answered: set[str] = field(default_factory=set)

    def record(
        self, route: str, began: float, outcome: str, retry_after: str | None = None
    ) -> None:
        self.calls.append(Call(route, began, time.monotonic(), outcome, retry_after))

    def responded(self, route: str, began: float, response: httpx.Response) -> None:
        self.record(route, began, _outcome(response), response.headers.get("Retry-After"))

    def of(self, route: str) -> list[Call]:
        """The calls of one route, in the order they ended."""
        return [c for c in self.calls if c.route == route]

    def outcomes(self) -> dict[str, dict[str, int]]:
        """How each route's calls ended, counted."""
        counted: dict[str, Counter[str]] = {}
        for call in self.calls:
            counted.setdefault(call.route, Counter())[call.outcome] += 1
        return {route: dict(counts) for route, counts in counted.items()}

    def answered_after(self, moment: float) -> float | None:
        """When the first chat turn that ended after ``moment`` was answered."""
        return next(
            (c.ended for c in self.of("chat") if c.status == "done" and c.ended > moment), None
        )

    def upload_errors_after(self, moment: float) -> list[Call]:
        """The uploads not accepted that ended after ``moment``."""
        return [
            c for c in self.of("uploads")
            if c.ended > moment and not (c.status.isdigit() and int(c.status) < 300)
        ]  # fmt: skip

    async def upload(self, client: httpx.AsyncClient, stop: asyncio.Event) -> None:
        number = 0
        while not stop.is_set():
            body = f"{LESSON}\n\nLesson copy {number} of run {TENANT}.\n".encode()
            url = self.gateways[number % 2]
            began = time.monotonic()
            try:
                response = await client.post(
                    f"{url}/v1/documents", headers=bearer("teacher-1", "teacher"),
                    files={"file": (f"lesson-{number}.md", body, "text/markdown")},
                    data={"title": f"Mitosis {number}", "subject": "biology"},
                )  # fmt: skip
            except httpx.HTTPError as exc:
                self.record("uploads", began, type(exc).__name__)
                await asyncio.sleep(0.5)
                continue  # the same bytes again (the client's retry)
            self.responded("uploads", began, response)
            if response.status_code in (200, 201, 202):
                self.accepted.add(response.json()["id"])
                self.accepted_at.setdefault(response.json()["id"], time.time())
                self.upload_acks.append(time.monotonic())
                number += 1
                await asyncio.sleep(0.3)
            else:
                await asyncio.sleep(float(response.headers.get("Retry-After", "0.5")))

    async def ask(self, client: httpx.AsyncClient, stop: asyncio.Event) -> None:
        headers = bearer("student-1", "student")
        number = 0
        while not stop.is_set():
            url = self.gateways[number % 2]
            number += 1
            began = time.monotonic()
            try:
                session = await client.post(f"{url}/v1/sessions", json={}, headers=headers)
            except httpx.HTTPError as exc:
                self.record("sessions", began, type(exc).__name__)
            else:
                self.responded("sessions", began, session)
                if session.status_code == 201:
                    began = time.monotonic()
                    outcome = await self.turn(client, url, session.json()["id"], headers)
                    self.record("chat", began, outcome)
            await asyncio.sleep(0.2)

    async def turn(
        self, client: httpx.AsyncClient, url: str, session_id: str, headers: dict[str, str]
    ) -> str:
        """One question's outcome: ``done``, ``error <reason>``, ``none`` (the stream ended
        without either), the problem of a refused request, or a transport error."""
        from httpx_sse import aconnect_sse

        outcome = "none"
        try:
            async with aconnect_sse(
                client, "POST", f"{url}/v1/sessions/{session_id}/messages",
                json={"content": QUESTION}, headers=headers,
            ) as source:  # fmt: skip
                if source.response.status_code != 200:
                    await source.response.aread()
                    return _outcome(source.response)
                async for sse in source.aiter_sse():
                    if sse.event == "done":
                        self.answered.add(json.loads(sse.data)["user_message_id"])
                        outcome = "done"
                    elif sse.event == "error":
                        outcome = f"error {json.loads(sse.data).get('reason', '?')}"
        except (httpx.HTTPError, KeyError, ValueError) as exc:
            outcome = type(exc).__name__
        return outcome

    async def search(self, client: httpx.AsyncClient, stop: asyncio.Event) -> None:
        headers = bearer("teacher-1", "teacher")
        number = 0
        while not stop.is_set():
            url = self.gateways[number % 2]
            number += 1
            began = time.monotonic()
            try:
                response = await client.post(
                    f"{url}/v1/search", json={"query": QUESTION, "k": 5}, headers=headers
                )
            except httpx.HTTPError as exc:
                self.record("search", began, type(exc).__name__)
            else:
                self.responded("search", began, response)
            await asyncio.sleep(1.0)


def client_visible_failures(
    load: Load, quorum_lost: tuple[float, float], started: float
) -> list[str]:
    """What no client should have seen (issue 49): a 5xx other than 503 or a transport
    error anywhere; a 503 without ``Retry-After`` or naming a dependency that did not fail
    (an upload's is NATS's; sessions never); and, while a quorum existed, a failed search or
    a chat turn that did not end ``done``. A call counts as without quorum when it
    overlapped ``quorum_lost`` (from the kill until an upload was accepted again)."""
    failures = []
    for call in load.calls:
        without_quorum = call.began < quorum_lost[1] and call.ended > quorum_lost[0]
        reason = call.outcome.partition(" ")[2]
        if call.route == "chat" and call.status in ("done", "error"):
            ok = call.status == "done" or without_quorum
        elif call.status.isdigit() and int(call.status) < 400:
            ok = True
        elif call.status == "503":
            allowed = ALLOWED_503.get(call.route, set())
            ok = bool(call.retry_after) and reason in allowed
            ok = ok and (call.route == "uploads" or without_quorum)
        else:  # another 4xx or 5xx, a transport error, a stream ended without an outcome
            ok = False
        if not ok:
            quorum = "without" if without_quorum else "with"
            failures.append(
                f"{call.route} {call.outcome!r} (Retry-After {call.retry_after}) at "
                f"{call.ended - started:.1f} s, {quorum} a quorum"
            )
    return failures


def percentile(values: list[float], share: float) -> float:
    """The value ``share`` of ``values`` are at or below (nearest rank)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(share * len(ordered)) - 1))]


def stream_leader(nodes: list[dict[str, Any]], alive: set[str]) -> str | None:
    """The live server leading the ingest stream, from the servers' /jsz?streams=1."""
    for node in nodes:
        if node["name"] not in alive:
            continue
        try:
            page = httpx.get(f"{node['monitor_url']}/jsz?streams=1", timeout=1.0).json()
        except (httpx.HTTPError, ValueError):
            continue
        for account in page.get("account_details") or []:
            for detail in account.get("stream_detail") or []:
                leader = (detail.get("cluster") or {}).get("leader")
                if detail.get("name") == INGEST_STREAM and leader in alive:
                    return str(leader)
    return None


def longest_gap(times: list[float], *, since: float) -> float:
    """The longest interval between consecutive ``times`` that ends after ``since``."""
    return max((b - a for a, b in itertools.pairwise(times) if b > since), default=0.0)


def stream_current(node: dict[str, Any]) -> bool:
    """Whether the server answers /healthz 200 (its streams and consumers current)."""
    try:
        return httpx.get(f"{node['monitor_url']}/healthz", timeout=1.0).status_code == 200
    except httpx.HTTPError:
        return False


async def poll(what: str, timeout: float, condition: Any) -> float:
    """Poll ``condition`` (a coroutine function, or a blocking one run in a thread); the
    seconds it took."""
    began = time.monotonic()
    while time.monotonic() - began < timeout:
        if inspect.iscoroutinefunction(condition):
            result = await condition()
        else:
            result = await asyncio.to_thread(condition)
        if result:
            return time.monotonic() - began
        await asyncio.sleep(0.1)
    pytest.fail(f"{what} not within {timeout} s")


async def stream_events(nats_url: str, stream: str, subject: str) -> list[dict[str, Any]]:
    """Every event of ``subject`` the stream holds, read by sequence."""
    from nats.js.errors import NotFoundError as MessageNotFound

    nc = await nats.connect(nats_url.split(","))
    found: list[dict[str, Any]] = []
    try:
        js = nc.jetstream()
        state = (await js.stream_info(stream)).state
        for seq in range(state.first_seq, state.last_seq + 1):
            with contextlib.suppress(MessageNotFound):
                message = await js.get_msg(stream, seq)
                if message.subject == subject:
                    found.append(json.loads(message.data or b"{}"))
    finally:
        await nc.close()
    return found


def spawn(
    command: list[str], output: Path | None, env: dict[str, str] | None
) -> subprocess.Popen[bytes]:
    """Start a process (its output to ``output``)."""
    if output is None:
        return subprocess.Popen(command, stdin=subprocess.DEVNULL, env=env)
    with open(output, "wb") as out:
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)


@dataclass
class Stack:
    """The running ``lectern up --cluster``: its state, and which NATS servers run as which
    process."""

    data_dir: Path
    state: dict[str, Any]
    pids: dict[str, int] = field(default_factory=dict)
    alive: set[str] = field(default_factory=set)
    #: each injected fault: its name, when it began and when the stack was whole again
    #: (monotonic seconds)
    faults: list[tuple[str, float, float]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.pids = {node["name"]: node["pid"] for node in self.nodes}
        self.alive = set(self.pids)

    @property
    def nodes(self) -> list[dict[str, Any]]:
        nodes: list[dict[str, Any]] = self.state["nats"]["nodes"]
        return nodes

    def node(self, name: str) -> dict[str, Any]:
        return next(n for n in self.nodes if n["name"] == name)

    def started_again(self, name: str, killed: int) -> int | None:
        """The server's new pid once the supervisor has started it again."""
        state = read_state(self.data_dir)
        node = next(n for n in (state or {})["nats"]["nodes"] if n["name"] == name)
        alive = process_alive(node["pid"], node["pid_create_time"])
        return int(node["pid"]) if node["pid"] != killed and alive else None

    def kill(self, name: str) -> int:
        """SIGKILL a NATS server; its pid."""
        pid = self.pids[name]
        os.kill(pid, signal.SIGKILL)
        self.alive.discard(name)
        return pid

    async def leader(self) -> str:
        leader = await asyncio.to_thread(stream_leader, self.nodes, self.alive)
        assert leader is not None
        return leader

    async def restarted(self, name: str, killed: int) -> None:
        """Wait for the supervisor to start a killed server again."""
        await poll(
            "the supervisor starting it again", 30,
            lambda: self.started_again(name, killed) is not None,
        )  # fmt: skip
        self.pids[name] = self.started_again(name, killed) or 0

    async def current(self, name: str) -> None:
        """Wait for a restarted server's streams and consumers to be current."""
        await poll("the server current again", 30, lambda: stream_current(self.node(name)))
        self.alive.add(name)


async def leader_outages(stack: Stack, load: Load) -> list[dict[str, Any]]:
    """Kill the ingest stream's leader ``ROUNDS`` times, each started again by the
    supervisor and current before the next."""
    outages: list[dict[str, Any]] = []
    for _ in range(ROUNDS):
        leader = await stack.leader()
        killed_at = time.monotonic()
        pid = stack.kill(leader)
        elected_s = await poll(
            "a new leader", 30, lambda: stream_leader(stack.nodes, stack.alive) is not None
        )
        await stack.restarted(leader, pid)
        back_at = time.monotonic()
        await stack.current(leader)
        stack.faults.append(("NATS leader killed", killed_at, time.monotonic()))
        errors = load.upload_errors_after(killed_at)
        acks = [*load.upload_acks, time.monotonic()]
        outages.append({
            "killed": leader, "new_leader_s": round(elected_s, 1),
            "started_again_s": round(back_at - killed_at, 1),
            "upload_errors_at_s": [(round(c.ended - killed_at, 1), c.outcome) for c in errors],
            "longest_upload_pause_s": round(longest_gap(acks, since=killed_at), 1),
            "current_again_s": round(time.monotonic() - back_at, 1),
        })  # fmt: skip
        await asyncio.sleep(1.0)
    return outages


async def quorum_loss(stack: Stack, load: Load) -> tuple[dict[str, Any], tuple[float, float]]:
    """Two of the three servers at once (the leader and a follower): no quorum, the streams
    take no event. Uploads wait (the object store is a stream) or are refused (503,
    Retry-After) and sent again; chat turns go on (retrieval is core request/reply, the
    completed events wait in the gateways' outbox); both servers back, uploads are accepted
    again. Returns the figures and the span without a quorum (until an upload is accepted)."""
    leader = await stack.leader()
    pair = [leader, next(name for name in sorted(stack.alive) if name != leader)]
    chats_before = len(load.of("chat"))
    killed_at = time.monotonic()
    killed = {name: stack.kill(name) for name in pair}

    def one_started_again() -> bool:
        return any(stack.started_again(name, pid) for name, pid in killed.items())

    await poll("the supervisor starting one again", 30, one_started_again)
    back_at = time.monotonic()
    accepted_during = [t for t in load.upload_acks if killed_at + 1.0 < t < back_at]
    chats = [c.status for c in load.of("chat")[chats_before:]]
    during = {
        "uploads_accepted": len(accepted_during),
        "upload_errors": len(load.upload_errors_after(killed_at)),
        "turns_done": chats.count("done"),
        "chat_errors": chats.count("error"),
    }
    for name, pid in killed.items():
        await stack.restarted(name, pid)

    def upload_accepted_again() -> bool:
        return any(t > back_at for t in load.upload_acks)

    accepted_again_s = await poll("an upload accepted again", 60, upload_accepted_again)
    for name in pair:
        await stack.current(name)
    stack.faults.append(("quorum lost", killed_at, time.monotonic()))
    figures = {
        "servers_killed": pair,
        "quorum_lost_s": round(back_at - killed_at, 1),
        **during,
        "upload_accepted_after_restart_s": round(accepted_again_s, 1),
        "current_again_s": round(time.monotonic() - back_at, 1),
    }
    assert not accepted_during, "an upload accepted without a quorum"
    await asyncio.sleep(1.0)
    return figures, (killed_at, back_at + accepted_again_s)


async def workers_killed(stack: Stack, load: Load) -> dict[str, Any]:
    """One replica of every worker service SIGKILLed at once: the peers take the work (queue
    groups, the shared ingest consumer) while the supervisor restarts them."""
    chats_before, accepted_before = len(load.of("chat")), len(load.accepted)
    done = [c.ended - c.began for c in load.of("chat") if c.status == "done"]
    killed_at = time.monotonic()
    for name in WORKERS:
        os.kill(stack.state["services"][name]["pid"], signal.SIGKILL)

    async def answered() -> bool:
        return load.answered_after(killed_at) is not None

    await poll("a turn answered by the peers", 30, answered)
    first_turn_s = (load.answered_after(killed_at) or 0.0) - killed_at
    await asyncio.sleep(max(0.0, 8.0 - (time.monotonic() - killed_at)))
    stack.faults.append(("worker replicas killed", killed_at, time.monotonic()))
    chats = [c.status for c in load.of("chat")[chats_before:]]
    return {
        "first_turn_after_s": round(first_turn_s, 2),
        # what a turn took before the kill (its last ten answered): a slow machine's own pace
        "turn_before_s": round(max(done[-10:], default=0.0), 2),
        "turns_done_in_8_s": chats.count("done"),
        "chat_errors_in_8_s": chats.count("error"),
        "uploads_accepted_in_8_s": len(load.accepted) - accepted_before,
    }


async def lti_launch_across_replicas(first: str, second: str) -> float:
    """An LMS (the tests' platform) launches a student: the login on the first gateway, the
    launch on the second (state and nonce live in Postgres). The launch's time."""
    from lectern_testing.lti_platform import data_of, login, serve_platform

    async with serve_platform() as platform, httpx.AsyncClient(timeout=30) as client:
        platform.tool_jwks_url = f"{first}/lti/jwks"
        platform.tool_launch_url = f"{LTI_PUBLIC_URL}/lti/launch"
        platform.deployment_id = f"dep-{TENANT}"
        created = await client.post(
            f"{first}/v1/lti/registrations", headers=bearer("root", "admin"),
            json={
                "issuer": platform.issuer, "client_id": platform.client_id,
                "deployment_ids": [platform.deployment_id], "auth_url": f"{platform.url}/auth",
                "token_url": f"{platform.url}/token", "jwks_url": f"{platform.url}/jwks",
                "name": "Cluster LMS",
            },
        )  # fmt: skip
        assert created.status_code == 201, created.text
        platform.course("cluster-course", [])
        hint = platform.prepare(sub="cluster-student", course_id="cluster-course")
        action, fields, cookies = await login(client, platform, first, hint)
        assert action == f"{LTI_PUBLIC_URL}/lti/launch"
        cookie = "; ".join(f"{k}={v}" for k, v in cookies.items())
        started = time.perf_counter()
        landed = await client.post(f"{second}/lti/launch", data=fields, headers={"Cookie": cookie})
        elapsed = time.perf_counter() - started
        assert landed.status_code == 200, landed.text
        data = data_of(landed.text)
        assert data.get("lti") == "land", landed.text[:300]
        mine = await client.get(
            f"{first}/v1/classes/mine", headers={"Authorization": f"Bearer {data['token']}"}
        )
        assert mine.status_code == 200 and mine.json()["classes"] == [data["class-id"]]
        return elapsed


def start_stack(base_dir: Path) -> tuple[subprocess.Popen[bytes], Path]:
    """``lectern up --cluster`` in the background; its process and its output file."""
    env = dict(os.environ)
    for name in SERVICES:
        if name != "gateway":
            env[f"LECTERN_{name.upper()}_HTTP_PORT"] = str(free_port())
    env["LECTERN_GATEWAY_WORKER_HTTP_PORT"] = str(free_port())
    # the uploads a killed ingest replica held (up to three lists of small ones) come back one
    # ack wait after their last keep-alive: 8 s here instead of 30 (keep-alives every 2 s),
    # the same path in less of the suite's time
    env["LECTERN_INGEST_ACK_WAIT_S"] = str(ACK_WAIT_S)
    env["LECTERN_INGEST_IN_PROGRESS_INTERVAL_S"] = "2"
    # the LTI launch across the two gateways: one public URL before both, as behind a load
    # balancer, and the test's platform on 127.0.0.1 may be fetched (its JWKS)
    env["LECTERN_GATEWAY_LTI_PUBLIC_URL"] = LTI_PUBLIC_URL
    env["LECTERN_GATEWAY_URL_FETCH_ALLOWED_NETWORKS"] = '["127.0.0.0/8"]'
    output = base_dir / "up.txt"
    command = [
        sys.executable, "-m", "lectern_cli", "up", "--cluster", "--no-demo", "--no-worker",
        "--data-dir", str(base_dir / "data"), "--port", str(free_port()),
        "--nats-port", str(free_port()), "--nats-monitor-port", str(free_port()),
        "--graceful-timeout", "10", "--nats-restart-after", str(NATS_DOWN_S),
    ]  # fmt: skip
    return spawn(command, output, env), output


def tail(output: Path) -> str:
    """The end of the stack's output, for a failure's message."""
    return output.read_text(errors="replace")[-4000:]


async def stack_ready(
    base_dir: Path, up: subprocess.Popen[bytes], output: Path
) -> tuple[float, dict[str, int], Stack]:
    """Wait for the ten services (no gateway worker: its sweeps and webhooks are not what the
    faults here test, and its start loads the machine); how long it took, the restarts at
    start, the stack."""

    def ready() -> bool:
        assert up.poll() is None, tail(output)
        state = read_state(base_dir / "data")
        processes = 2 * len(SERVICES)  # each service, twice
        return bool(state and state.get("all_ready") and len(state["services"]) == processes)

    ready_s = await poll("all ten processes ready", READY_WITHIN_S, ready)
    state = read_state(base_dir / "data")
    assert state is not None
    # on a loaded machine a service may time out declaring its 3-replica consumers once
    # and be restarted by the supervisor before it is ready; the outages below are the test
    restarts = {name: s["restarts"] for name, s in state["services"].items() if s["restarts"]}
    assert all(n <= 1 for n in restarts.values()), tail(output)
    return ready_s, restarts, Stack(base_dir / "data", state)


async def run_faults(stack: Stack, load: Load) -> dict[str, Any]:
    """The load against both gateways through every fault, in turn; the figures."""
    stop = asyncio.Event()
    async with httpx.AsyncClient(timeout=60) as client:
        tasks = [
            asyncio.create_task(load.upload(client, stop)),
            asyncio.create_task(load.ask(client, stop)),
            asyncio.create_task(load.search(client, stop)),
        ]
        await asyncio.sleep(2.0)
        outages = await leader_outages(stack, load)
        quorum, quorum_lost = await quorum_loss(stack, load)
        replicas = await workers_killed(stack, load)
        stopped_at = time.monotonic()
        stop.set()
        await asyncio.gather(*tasks)
    return {
        "outages": outages, "quorum": quorum, "quorum_lost": quorum_lost,
        "replicas_killed": replicas, "stopped_at": stopped_at, "faults": list(stack.faults),
    }  # fmt: skip


def overlap(span: tuple[float, float], other: tuple[float, float]) -> float:
    """Seconds two spans share."""
    return max(0.0, min(span[1], other[1]) - max(span[0], other[0]))


async def upload_to_indexed(dsn: str, load: Load) -> dict[str, float]:
    """Once every accepted upload is indexed, the seconds each took from its acceptance."""

    seen = {"indexed": -1, "at": time.monotonic()}

    async def all_indexed() -> bool:
        conn = await asyncpg.connect(dsn)
        try:
            rows = await conn.fetch(
                "SELECT status, count(*) AS n FROM documents WHERE tenant_id = $1 "
                "GROUP BY status", TENANT,
            )  # fmt: skip
        finally:
            await conn.close()
        counts = {r["status"]: r["n"] for r in rows}
        if counts.get("indexed", 0) > seen["indexed"]:
            seen.update(indexed=counts.get("indexed", 0), at=time.monotonic())
        # a backlog drains at the machine's pace; an upload lost leaves the count standing
        assert time.monotonic() - seen["at"] < INDEXED_STALL_S, (
            f"no upload indexed in {INDEXED_STALL_S} s: {counts}, {len(load.accepted)} accepted"
        )
        return counts == {"indexed": len(load.accepted)}

    await poll("every upload indexed", 600, all_indexed)
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch(
            "SELECT id::text, extract(epoch FROM indexed_at)::float8 AS t FROM documents "
            "WHERE tenant_id = $1", TENANT,
        )  # fmt: skip
    finally:
        await conn.close()
    return {r["id"]: r["t"] - load.accepted_at[r["id"]] for r in rows}


def unexplained_errors(folder: Path, faults: list[tuple[str, float, float]]) -> list[logs.LogError]:
    """The services' ERROR lines no fault explains; every ERROR line is printed with the fault
    that explains it (or none)."""
    by_log = logs.error_lines(folder)
    # every process of the stack logs there (a wrong folder would find nothing to judge)
    assert len(by_log) >= 2 * len(SERVICES), sorted(by_log)
    found = [e for lines in by_log.values() for e in lines]
    print(f"\n{len(found)} ERROR lines in {len(by_log)} service logs")
    out = []
    for error in found:
        reason = logs.explained_by(error, faults, grace_s=FAULT_GRACE_S)
        print(f"ERROR line ({reason or 'UNEXPLAINED'}): {error.describe()}")
        if reason is None:
            out.append(error)
    return out


def longest_ingest_work(folder: Path) -> float:
    """The longest a document's or a batch's ingest took, in seconds, by the ingest
    replicas' logs (0 when they show none)."""
    longest = 0.0
    for log in folder.glob("ingest*.log"):
        for line in log.read_text(errors="replace").splitlines():
            with contextlib.suppress(ValueError):  # the supervisor's lines are not JSON
                record = json.loads(line)
                match = (
                    INGEST_WORK.match(str(record.get("message", "")))
                    if isinstance(record, dict)
                    else None
                )
                if match:
                    longest = max(longest, float(match.group(1)))
    return longest


def keep_logs(base_dir: Path) -> Path:
    """The services', the supervisor's and the servers' logs of a failed run, copied out of
    the directory the fixture removes."""
    kept = Path("/tmp") / f"lectern-chaos-evidence-{uuid.uuid4().hex[:8]}"
    kept.mkdir()
    with contextlib.suppress(OSError):
        shutil.copytree(base_dir / "data" / "logs", kept / "logs")
    for log in (base_dir / "data" / "nats").glob("n*/nats-server.log"):
        shutil.copy(log, kept / f"nats-{log.parent.name}.log")
    if (base_dir / "up.txt").exists():
        shutil.copy(base_dir / "up.txt", kept / "up.txt")
    return kept


async def keep_evidence(dsn: str, base_dir: Path, slow: dict[str, float], load: Load) -> Path:
    """The services' and servers' logs of a run whose upload took too long, kept outside the
    directory the fixture removes, with the slow uploads' ids and times, their rows (retries,
    last error) and their ``documents.uploaded`` outbox rows (publish attempts)."""
    kept = keep_logs(base_dir)
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch(
            "SELECT id::text, attempts, error_stage, error_message, created_at, updated_at, "
            "indexed_at FROM ingest_documents WHERE id::text = ANY($1::text[])", list(slow),
        )  # fmt: skip
        sent = await conn.fetch(
            "SELECT payload->>'document_id' AS id, created_at, attempts, last_error, "
            "published_at FROM outbox WHERE payload->>'document_id' = ANY($1::text[]) "
            "AND subject = $2", list(slow), Subjects.DOCUMENTS_UPLOADED,
        )  # fmt: skip
    finally:
        await conn.close()
    (kept / "rows.txt").write_text(
        "\n".join(repr(dict(r)) for r in rows) + "\n" + "\n".join(repr(dict(r)) for r in sent)
    )
    lines = [
        f"{doc} accepted at {load.accepted_at[doc]:.3f} (epoch), indexed {took:.1f} s later"
        for doc, took in sorted(slow.items(), key=lambda item: -item[1])
    ]
    (kept / "slow-uploads.txt").write_text("\n".join(lines) + "\n")
    return kept


async def turns_published(nats_url: str, load: Load) -> list[dict[str, Any]]:
    """The ``chat.turn.completed`` events of the run, once every answered turn's is there."""

    async def published() -> list[dict[str, Any]]:
        events = await stream_events(
            nats_url, stream_for(Subjects.CHAT_TURN_COMPLETED).name,
            Subjects.CHAT_TURN_COMPLETED,
        )  # fmt: skip
        return [e for e in events if e.get("tenant_id") == TENANT]

    deadline = time.monotonic() + 30
    completed = await published()
    while {e["user_message_id"] for e in completed} < load.answered:
        assert time.monotonic() < deadline, "answered turns missing from the chat stream"
        await asyncio.sleep(0.5)
        completed = await published()
    return completed


def report(ready_s: float, restarts: dict[str, int], run: dict[str, Any], load: Load,
           to_indexed: list[float]) -> None:  # fmt: skip
    """The run's figures, on one line as docs/reliability.md quotes them."""
    acks = [*load.upload_acks, run["stopped_at"]]
    gaps = [b - a for a, b in itertools.pairwise(acks)] or [0.0]
    chats = [c.ended - c.began for c in load.of("chat")]
    to_indexed = to_indexed or [0.0]
    print(
        f"\ncluster stack: ready after {ready_s:.1f} s (restarts at start: {restarts}); "
        f"outages {run['outages']}; uploads accepted {len(load.accepted)}, longest gap "
        f"between accepted uploads {max(gaps):.1f} s, upload to indexed p50 "
        f"{percentile(to_indexed, 0.5):.1f} s p95 {percentile(to_indexed, 0.95):.1f} s max "
        f"{max(to_indexed):.1f} s; outcomes per route {load.outcomes()}; longest turn "
        f"{max(chats, default=0.0):.1f} s; two servers down: {run['quorum']}; a replica of "
        f"{', '.join(WORKERS)} killed: {run['replicas_killed']}"
    )


async def test_nats_leaders_killed_under_load_lose_and_repeat_nothing(base_dir: Path) -> None:
    up, output = start_stack(base_dir)
    started = time.monotonic()
    epoch_offset = time.time() - started  # the uploads' times are epoch, the outages' monotonic
    kept: Path | None = None
    try:
        ready_s, restarts, stack = await stack_ready(base_dir, up, output)
        nats_url, dsn = stack_nats_url(stack.state), stack.state["postgres"]["dsn"]
        services = stack.state["services"]
        gateways = [services["gateway"]["url"], services["gateway-2"]["url"]]
        launch_s = await lti_launch_across_replicas(*gateways)
        print(f"\nLTI launch started on one gateway, ended on the other: {launch_s * 1000:.0f} ms")
        assert launch_s < LAUNCH_BUDGET_S
        load = Load(gateways)
        run = await run_faults(stack, load)
        waited = await upload_to_indexed(dsn, load)
        to_indexed = list(waited.values())
        indexed = await stream_events(
            nats_url, stream_for(Subjects.DOCUMENTS_INDEXED).name, Subjects.DOCUMENTS_INDEXED
        )
        ours = [e for e in indexed if e.get("tenant_id") == TENANT]
        per_document = Counter(e["document_id"] for e in ours)
        completed = await turns_published(nats_url, load)
        report(ready_s, restarts, run, load, to_indexed)
        failures = client_visible_failures(load, run["quorum_lost"], started)
        assert not failures, f"{len(failures)} client-visible failures: {failures[:20]}"
        first_turn_s = run["replicas_killed"]["first_turn_after_s"]
        gap_s = WORKER_KILL_GAP_S + run["replicas_killed"]["turn_before_s"]
        assert first_turn_s <= gap_s, (
            f"the first turn was answered {first_turn_s} s after a replica of each worker was "
            f"SIGKILLed (at most {gap_s} s: {WORKER_KILL_GAP_S} s more than the longest of the "
            "last ten turns before)"
        )
        # an accepted upload waits at most for a new leader (its outbox event is published
        # as soon as the stream takes a publish again) and, if the ingest replica holding it
        # was killed, one ack wait for its redelivery, plus its own ingest, plus whatever of
        # the quorum loss it was still waiting through (no stream takes anything then):
        # bounded by the ack wait and the outages, not by luck
        elections = [o["new_leader_s"] for o in run["outages"]] or [0.0]
        ingest_s = max(INGEST_SLACK_S, 2 * longest_ingest_work(base_dir / "data" / "logs"))
        bound = ACK_WAIT_S + max(elections) + ingest_s
        no_quorum = tuple(t + epoch_offset for t in run["quorum_lost"])
        slow = {
            doc: t
            for doc, t in waited.items()
            if t > bound + overlap((load.accepted_at[doc], load.accepted_at[doc] + t), no_quorum)
        }
        kept = await keep_evidence(dsn, base_dir, slow, load) if slow else None
        assert not slow, (
            f"{len(slow)} uploads took longer to be indexed (at most {max(slow.values()):.1f} s) "
            f"than one ack wait ({ACK_WAIT_S} s), the longest election ({max(elections)} s) "
            f"and {ingest_s:.1f} s of ingest; logs kept in {kept}"
        )
        assert set(per_document) == load.accepted, "every accepted upload indexed"
        assert set(per_document.values()) == {1}, "no upload indexed twice"
        assert len({e["event_id"] for e in ours}) == len(ours)
        turn_ids = Counter(e["user_message_id"] for e in completed)
        assert set(turn_ids) == load.answered and set(turn_ids.values()) == {1}
        assert len({e["event_id"] for e in completed}) == len(completed)
        assert len(load.accepted) >= 10 and len(load.answered) >= 10
        nats_logs = list((base_dir / "data" / "nats").glob("n*/nats-server.log"))
        assert len(nats_logs) == 3
        assert not [
            p for p in nats_logs if "Permissions Violation" in p.read_text(errors="replace")
        ]
        faults = [(name, a + epoch_offset, b + epoch_offset) for name, a, b in run["faults"]]
        unexplained = unexplained_errors(base_dir / "data" / "logs", faults)
        assert not unexplained, (
            f"{len(unexplained)} ERROR lines no injected fault explains:\n"
            + "\n".join(e.describe() for e in unexplained[:20])
        )
    except BaseException:
        print(f"\nthe stack's logs are kept in {kept or keep_logs(base_dir)}")
        raise
    finally:
        stopping = time.monotonic()
        if up.poll() is None:
            up.send_signal(signal.SIGTERM)
            try:
                up.wait(60)
            except subprocess.TimeoutExpired:
                up.kill()
                up.wait()
        took, stop_s = time.monotonic() - started, time.monotonic() - stopping
        print(f"(test took {took:.1f} s, of which stopping the stack {stop_s:.1f} s)")
