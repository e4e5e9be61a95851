"""The web UI's files are served from the package, use only the documented API, never parse
server text as HTML; the development token endpoint exists in development only."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import AsyncIterator
from html.parser import HTMLParser
from pathlib import Path

import httpx
import jwt
import pytest
from pydantic import SecretStr

from lectern_common.settings import DEV_JWT_SECRET
from lectern_gateway.app import create_app
from lectern_gateway.config import Settings
from lectern_gateway.web.routes import STATIC_DIR

PRODUCTION_SECRET = "a-production-secret-of-at-least-32-characters"


def _client(settings: Settings) -> httpx.AsyncClient:
    # these routes need neither NATS nor Postgres: no lifespan
    app = create_app(settings)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gateway")


@pytest.fixture
async def dev_client() -> AsyncIterator[httpx.AsyncClient]:
    async with _client(Settings(environment="development")) as client:
        yield client


@pytest.fixture(params=["test", "production"])
async def prod_client(request: pytest.FixtureRequest) -> AsyncIterator[httpx.AsyncClient]:
    settings = Settings(environment=request.param, jwt_secret=SecretStr(PRODUCTION_SECRET))
    async with _client(settings) as client:
        yield client


class _Page(HTMLParser):
    """Ids, labelled controls, scripts and stylesheets of a page."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()
        self.label_for: set[str] = set()
        self.controls: list[tuple[str, dict[str, str | None]]] = []
        self.assets: list[str] = []
        self.body: dict[str, str | None] = {}
        self.inline_scripts = 0
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if values.get("id"):
            self.ids.add(str(values["id"]))
        if tag == "label" and values.get("for"):
            self.label_for.add(str(values["for"]))
        if tag in ("input", "select", "textarea"):
            self.controls.append((tag, values))
        if tag == "body":
            self.body = values
        if tag == "script":
            if values.get("src"):
                self.assets.append(str(values["src"]))
            else:
                self._in_script = True
        if tag == "link" and values.get("rel") == "stylesheet":
            self.assets.append(str(values["href"]))

    def handle_data(self, data: str) -> None:
        if self._in_script and data.strip():
            self.inline_scripts += 1

    def handle_endtag(self, tag: str) -> None:
        if tag == "script":
            self._in_script = False


def _page(html: str) -> _Page:
    page = _Page()
    page.feed(html)
    return page


async def test_the_index_page_has_every_screen(dev_client: httpx.AsyncClient) -> None:
    response = await dev_client.get("/")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    csp = response.headers["content-security-policy"]
    assert "script-src 'self'" in csp
    assert "connect-src 'self'" in csp
    assert response.headers["x-content-type-options"] == "nosniff"
    page = _page(response.text)
    for element in (
        "token-form", "token-input", "dev-signin",  # sign-in
        "view-chat", "new-session-form", "session-mode", "session-list", "messages", "ask-form",
        "question", "stop-button",  # chat
        "source-dialog", "source-text", "flag-dialog", "flag-reason",  # sources, flags
        "view-documents", "upload-form", "upload-file", "document-rows",  # documents
        "view-search", "search-form", "search-results",  # search
        "view-memories", "memory-list", "memories-forget-all",  # memories
        "view-syllabus", "syllabus-form", "syllabus-tree",  # syllabus explorer
        "view-quizzes", "quiz-form", "quiz-area", "quiz-list",  # quizzes
    ):  # fmt: skip
        assert element in page.ids, element
    assert page.assets == ["/static/style.css", "/static/app.js"]
    assert page.inline_scripts == 0, "the CSP allows no inline script"
    assert '<script type="module" src="/static/app.js">' in response.text
    # every form control has a label
    for tag, attrs in page.controls:
        if attrs.get("type") == "checkbox":
            continue  # wrapped in its <label>
        assert attrs.get("id") in page.label_for, (tag, attrs)


async def test_the_demo_sign_in_is_offered_in_development_only(
    dev_client: httpx.AsyncClient, prod_client: httpx.AsyncClient
) -> None:
    assert _page((await dev_client.get("/")).text).body["data-dev-signin"] == "true"
    assert _page((await prod_client.get("/")).text).body["data-dev-signin"] == "false"


@pytest.mark.parametrize(
    ("name", "media_type"),
    [("app.js", "text/javascript"), ("sse.js", "text/javascript"), ("style.css", "text/css")],
)
async def test_static_files_are_served_with_their_types(
    dev_client: httpx.AsyncClient, name: str, media_type: str
) -> None:
    response = await dev_client.get(f"/static/{name}")
    assert response.status_code == 200
    assert response.headers["content-type"].split(";")[0] == media_type
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.content == (STATIC_DIR / name).read_bytes()


@pytest.mark.parametrize(
    "path",
    ["/static/missing.js", "/static/index.html", "/static/..%2Fapp.py", "/static/../app.py",
     "/static/", "/static/.hidden.js"],
)  # fmt: skip
async def test_nothing_else_is_served_from_static(dev_client: httpx.AsyncClient, path: str) -> None:
    response = await dev_client.get(path)
    assert response.status_code == 404


def test_the_package_ships_the_static_files() -> None:
    pyproject = Path(__file__).parents[2] / "services" / "chat-gateway" / "pyproject.toml"
    assert '"static/*"' in pyproject.read_text()
    assert {p.name for p in STATIC_DIR.iterdir()} >= {"index.html", "app.js", "sse.js", "style.css"}
    assert not [p for p in STATIC_DIR.iterdir() if p.is_dir()], "static/* ships no sub-folders"


def _script_text() -> str:
    return "\n".join((STATIC_DIR / n).read_text() for n in ("app.js", "sse.js", "charts.js"))


def test_the_scripts_never_parse_server_text_as_html() -> None:
    text = _script_text()
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(",
                 "new Function", "DOMParser"):  # fmt: skip
        assert sink not in text, sink


def _api_paths_used() -> set[str]:
    """Every /v1/... path the scripts call, with ${...} parameters as {param}."""
    text = _script_text()
    paths = set()
    for literal in re.findall(r"[\"`](/v1/[^\"`]*)[\"`]", text):
        paths.add(re.sub(r"\$\{[^}]*\}", "{param}", literal).split("?")[0])
    return paths


def test_the_ui_calls_only_documented_endpoints() -> None:
    documented = create_app(Settings()).openapi()["paths"]
    patterns = {re.sub(r"\{[^}]+\}", "{param}", path): path for path in documented}
    used = _api_paths_used()
    assert {"/v1/sessions", "/v1/sessions/{param}/messages", "/v1/chunks/{param}",
            "/v1/messages/{param}/flags", "/v1/documents", "/v1/documents/{param}/events",
            "/v1/search", "/v1/me/memories", "/v1/me/memories/{param}",
            "/v1/dev/token", "/v1/syllabus", "/v1/quizzes",
            "/v1/quizzes/{param}/attempts",
            "/v1/sessions/{param}/messages/{param}/cancel"} <= used  # fmt: skip
    for path in used:
        assert path in patterns, f"the UI calls {path}, which the OpenAPI document lacks"


async def test_dev_token_signs_in_the_demo_users(dev_client: httpx.AsyncClient) -> None:
    for role in ("student", "teacher"):
        response = await dev_client.post("/v1/dev/token", json={"role": role})
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["tenant"] == "demo"
        assert body["user_id"] == f"demo-{role}"
        claims = jwt.decode(body["token"], DEV_JWT_SECRET, algorithms=["HS256"])
        assert claims["tenant"] == "demo"
        assert claims["sub"] == f"demo-{role}"
        assert claims["role"] == role
        assert claims["plan"] == "pro"
        assert claims["exp"] == body["expires_at"]
    free = await dev_client.post("/v1/dev/token", json={"role": "student", "plan": "free"})
    assert jwt.decode(free.json()["token"], DEV_JWT_SECRET, algorithms=["HS256"])["plan"] == "free"
    bad = await dev_client.post("/v1/dev/token", json={"role": "root"})
    assert bad.status_code == 422


async def test_dev_token_is_not_found_outside_development(prod_client: httpx.AsyncClient) -> None:
    for body in ({"role": "student"}, {"role": "teacher"}, {"role": "nonsense"}, None):
        response = await prod_client.post("/v1/dev/token", json=body)
        assert response.status_code == 404
        assert response.headers["content-type"] == "application/problem+json"
        unknown = await prod_client.post("/v1/no/such/route", json=body)
        assert response.json() | {"instance": None} == unknown.json() | {"instance": None}


# -- the SSE parser, run by Node.js when it is installed (CI may not have it) ----------------

NODE = shutil.which("node")

SSE_CHECK = """
import { SSEParser } from "./sse.mjs";
const stream = ": ping\\r\\n\\r\\nevent: token\\r\\ndata: {\\"text\\": \\"a\\"}\\r\\n\\r\\n" +
  "event: sources\\ndata: line one\\ndata: line two\\n\\n" +
  "data: no name\\rid: 7\\r\\r" + "event: done\\r\\ndata:{}\\r\\n\\r\\nevent: cut\\r\\ndata: x";
const events = [];
// every split point, including inside a CRLF, must give the same events
for (let size = 1; size <= stream.length; size++) {
  const parser = new SSEParser();
  const got = [];
  for (let i = 0; i < stream.length; i += size) got.push(...parser.push(stream.slice(i, i + size)));
  events.push(JSON.stringify(got));
}
const distinct = [...new Set(events)].length;
console.log(JSON.stringify({ distinct, events: JSON.parse(events[0]) }));
"""


@pytest.mark.skipif(NODE is None, reason="Node.js is not installed")
def test_the_sse_parser_handles_any_chunking(tmp_path: Path) -> None:
    shutil.copy(STATIC_DIR / "sse.js", tmp_path / "sse.mjs")
    (tmp_path / "check.mjs").write_text(SSE_CHECK)
    assert NODE is not None
    done = subprocess.run(
        [NODE, "check.mjs"], cwd=tmp_path, capture_output=True, text=True, timeout=60, check=True
    )
    result = json.loads(done.stdout)
    assert result["distinct"] == 1, "the events depend on how the stream was cut"
    # the last event id seen goes with each event, and stays until another comes (WHATWG)
    assert result["events"] == [
        {"event": "token", "data": '{"text": "a"}', "id": ""},
        {"event": "sources", "data": "line one\nline two", "id": ""},
        {"event": "message", "data": "no name", "id": "7"},
        {"event": "done", "data": "{}", "id": "7"},
    ]
