"""The demo corpus and its loader: uploads through the API as the demo teacher, waits for
ingest, records itself once, never blocks the supervisor."""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest

from lectern_cli.demo import (
    DEMO_TENANT,
    MARKER,
    DemoLoader,
    default_demo_dir,
    on_stack_ready,
    read_corpus,
)
from lectern_cli.main import build_parser
from lectern_cli.runtime.children import Child
from lectern_cli.runtime.supervisor import Supervisor
from lectern_common.errors import ConfigurationError
from lectern_common.events import DocumentMetadata
from lectern_common.runtime.nats import free_port
from lectern_common.settings import DEV_JWT_SECRET

REPO_DEMO = Path(__file__).parents[2] / "demo"


def test_the_repository_ships_a_demo_corpus() -> None:
    assert default_demo_dir() == REPO_DEMO
    documents = read_corpus(REPO_DEMO)
    assert len(documents) >= 3
    for document in documents:
        words = len(document.path.read_text().split())
        assert 200 <= words <= 1000, (document.path.name, words)
        fields: dict[str, Any] = {}
        for name, value in document.fields:
            fields.setdefault(name, []).append(value)
        metadata = DocumentMetadata.model_validate(
            {k: v if k in ("topic_tags", "curriculum_standards") else v[-1]
             for k, v in fields.items()}
        )  # fmt: skip
        assert metadata.title and metadata.subject and metadata.topic_tags


def test_a_broken_manifest_is_reported(tmp_path: Path) -> None:
    (tmp_path / "corpus.toml").write_text('[[document]]\nfile = "missing.md"\n')
    with pytest.raises(ConfigurationError, match=r"missing\.md"):
        read_corpus(tmp_path)
    (tmp_path / "a.md").write_text("# A\n\nText.\n")
    (tmp_path / "corpus.toml").write_text('[[document]]\nfile = "a.md"\ncolour = "red"\n')
    with pytest.raises(ConfigurationError, match="colour"):
        read_corpus(tmp_path)


def test_up_takes_no_demo() -> None:
    parser = build_parser()
    assert parser.parse_args(["up"]).no_demo is False
    assert parser.parse_args(["up", "--no-demo"]).no_demo is True


class FakeGateway:
    """POST /v1/documents and GET /v1/documents/{id}: pending, processing, then indexed."""

    def __init__(self, *, upload_status: int = 202) -> None:
        self.upload_status = upload_status
        self.uploads: list[dict[str, Any]] = []
        self.polls: dict[str, int] = {}
        self.claims: list[dict[str, Any]] = []
        self.never_indexed = False

    def handler(self, request: httpx.Request) -> httpx.Response:
        token = request.headers["authorization"].removeprefix("Bearer ")
        self.claims.append(jwt.decode(token, DEV_JWT_SECRET, algorithms=["HS256"]))
        if request.method == "POST" and request.url.path == "/v1/documents":
            if self.upload_status >= 400:
                return httpx.Response(self.upload_status, json={"detail": "no room"})
            body = request.read().decode()
            document_id = f"doc-{len(self.uploads)}"
            self.uploads.append({"id": document_id, "body": body})
            return httpx.Response(self.upload_status, json={"id": document_id, "status": "pending"})
        document_id = request.url.path.rsplit("/", 1)[-1]
        polls = self.polls[document_id] = self.polls.get(document_id, 0) + 1
        status = ["pending", "processing", "indexed"][min(polls - 1, 2)]
        if self.never_indexed:
            status = "processing"
        return httpx.Response(200, json={"id": document_id, "status": status, "chunk_count": 3})


def _loader(tmp_path: Path, gateway: FakeGateway, messages: list[str], **kwargs: Any) -> DemoLoader:
    return DemoLoader(
        directory=REPO_DEMO, data_dir=tmp_path, report=messages.append, poll_s=0.01,
        transport=httpx.MockTransport(gateway.handler), **kwargs,
    )  # fmt: skip


def test_the_loader_uploads_each_lesson_as_the_demo_teacher(tmp_path: Path) -> None:
    gateway, messages = FakeGateway(), list[str]()
    loader = _loader(tmp_path, gateway, messages)
    assert loader.run(gateway_url="http://gateway", secret=DEV_JWT_SECRET) is True
    documents = read_corpus(REPO_DEMO)
    assert len(gateway.uploads) == len(documents)
    first = gateway.uploads[0]["body"]
    assert f'filename="{documents[0].path.name}"' in first
    assert 'name="subject"' in first and 'name="topic_tags"' in first
    assert {c["tenant"] for c in gateway.claims} == {DEMO_TENANT}
    assert {(c["sub"], c["role"]) for c in gateway.claims} == {("demo-teacher", "teacher")}
    assert all(polls == 3 for polls in gateway.polls.values()), "polled until indexed"
    marker = json.loads((tmp_path / MARKER).read_text())
    assert [d["file"] for d in marker["documents"]] == [d.path.name for d in documents]
    assert "indexing in the background" in messages[0]
    assert messages[-1].startswith(f"demo corpus indexed: {len(documents)} lessons")
    assert "http://gateway/" in messages[-1]

    # a later start of the same data directory leaves the corpus alone
    again: list[str] = []
    assert _loader(tmp_path, gateway, again).start(gateway_url="x", secret="y") is None
    assert "loaded on an earlier start" in again[0]
    assert len(gateway.uploads) == len(documents)


def test_a_refused_upload_is_reported_and_retried_next_time(tmp_path: Path) -> None:
    gateway, messages = FakeGateway(upload_status=503), list[str]()
    loader = _loader(tmp_path, gateway, messages)
    assert loader.run(gateway_url="http://g", secret=DEV_JWT_SECRET) is False
    assert not (tmp_path / MARKER).exists()
    assert "not loaded" in messages[-1] and "503" in messages[-1]


def test_stopping_the_stack_stops_the_wait_quietly(tmp_path: Path) -> None:
    gateway, messages = FakeGateway(), list[str]()
    stop = threading.Event()
    loader = _loader(tmp_path, gateway, messages, stop=stop)
    gateway.never_indexed = True
    thread = loader.start(gateway_url="http://gateway", secret=DEV_JWT_SECRET)
    assert thread is not None
    time.sleep(0.2)
    stop.set()
    thread.join(5)
    assert not thread.is_alive()
    assert not any("indexed:" in m for m in messages)


# -- the supervisor's hook ---------------------------------------------------------------------

READY_SERVER = """
import http.server, os
port = int(os.environ["LECTERN_MEMORY_HTTP_PORT"])
class Ready(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b'{"checks": {}}')
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", port), Ready).serve_forever()
"""


def _ready_supervisor(
    tmp_path: Path, messages: list[str], on_ready: Callable[[Supervisor], None]
) -> Supervisor:
    supervisor = Supervisor(
        data_dir=tmp_path, services=("memory",), report=messages.append,
        command=lambda name: [sys.executable, "-c", READY_SERVER], on_ready=on_ready,
    )  # fmt: skip
    child = Child(name="memory", port=free_port(), log_path=tmp_path / "memory.log")
    supervisor.children = {"memory": child}
    supervisor.spawn(child)
    return supervisor


def _poll_until_ready(supervisor: Supervisor) -> None:
    deadline = time.monotonic() + 20
    while supervisor.all_ready_after is None and time.monotonic() < deadline:
        supervisor.poll()
        time.sleep(0.05)
    assert supervisor.all_ready_after is not None


def test_the_hook_runs_once_when_the_stack_is_first_ready(tmp_path: Path) -> None:
    calls: list[Supervisor] = []
    messages: list[str] = []
    supervisor = _ready_supervisor(tmp_path, messages, calls.append)
    try:
        supervisor.poll()
        assert calls == []
        _poll_until_ready(supervisor)
        for _ in range(3):
            supervisor._next_poll = 0.0
            supervisor.poll()
        assert calls == [supervisor]
        assert any(m.startswith("ready: memory") for m in messages)
    finally:
        supervisor.stop()


def test_a_failing_hook_is_reported_and_the_stack_keeps_running(tmp_path: Path) -> None:
    def broken(supervisor: Supervisor) -> None:
        raise RuntimeError("demo exploded")

    messages: list[str] = []
    supervisor = _ready_supervisor(tmp_path, messages, broken)
    try:
        _poll_until_ready(supervisor)
        assert any("demo exploded" in m for m in messages)
        assert supervisor.children["memory"].state == "ready"
    finally:
        supervisor.stop()


def test_the_demo_needs_the_gateway_and_ingest(tmp_path: Path) -> None:
    messages: list[str] = []
    loader = _loader(tmp_path, FakeGateway(), messages)
    supervisor = Supervisor(data_dir=tmp_path, services=("memory",), report=messages.append)
    supervisor.children = {"memory": Child(name="memory", port=1, log_path=tmp_path / "m.log")}
    on_stack_ready(loader)(supervisor)
    assert messages == ["demo corpus: not loaded (needs gateway, ingest)"]
    assert not (tmp_path / MARKER).exists()
