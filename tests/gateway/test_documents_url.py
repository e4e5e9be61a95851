"""Documents from a URL, end to end (gateway + ingest over real NATS and Postgres) against a
local HTTP server: fetched with limits, indexed, re-fetched into a new version only when the
content changed; loopback, link-local and private addresses refused unless allowed."""

from __future__ import annotations

import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from lectern_common.embeddings import Embedder, LocalEmbedder
from lectern_gateway.app import create_app as create_gateway
from lectern_gateway.auth import issue_token
from lectern_gateway.config import Settings as GatewaySettings
from lectern_ingest.app import create_app as create_ingest
from lectern_ingest.config import Settings as IngestSettings
from tests.gateway.test_documents_api import wait_final

pytestmark = [pytest.mark.integration, pytest.mark.slow]

LIMIT = 256 * 1024
PAGE = """<!doctype html><html><head><title>Photosynthesis explained</title>
<link rel="canonical" href="https://example.org/biology/photosynthesis">
<meta name="author" content="Ada Botanist"></head><body><article>
<h1>Photosynthesis explained</h1>
<p>Plants capture light energy with chlorophyll in the thylakoid membranes. The light
reactions split water, release oxygen and store energy in ATP and NADPH.</p>
<h2>Calvin cycle</h2>
<p>The Calvin cycle fixes carbon dioxide into sugars. The enzyme RuBisCO catalyses the first
step of carbon fixation. VERSION</p></article></body></html>"""


class Site:
    """A local web server whose pages a test can change."""

    def __init__(self) -> None:
        self.pages: dict[str, tuple[int, dict[str, str], bytes]] = {}
        site = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                status, headers, body = site.pages.get(self.path, (404, {}, b"missing"))
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"


@pytest.fixture(scope="module")
def site() -> Iterator[Site]:
    running = Site()
    running.thread.start()
    html = {"Content-Type": "text/html; charset=utf-8"}
    running.pages["/notes"] = (200, html, PAGE.replace("VERSION", "v1").encode())
    running.pages["/moved"] = (302, {"Location": "/notes"}, b"")
    running.pages["/to-metadata"] = (302, {"Location": "http://169.254.169.254/latest"}, b"")
    running.pages["/photo.png"] = (200, {"Content-Type": "image/png"}, b"\x89PNG....")
    running.pages["/huge"] = (200, html, b"<p>" + b"x" * (LIMIT + 10) + b"</p>")
    yield running
    running.server.shutdown()


@pytest.fixture(scope="module")
async def gateways(
    nats_url: str, database_url: str
) -> AsyncIterator[tuple[httpx.AsyncClient, httpx.AsyncClient, GatewaySettings]]:
    """A gateway that may fetch from loopback (the test's site), one with the defaults, and
    an ingest worker."""
    common: dict[str, Any] = {
        "nats_url": nats_url,
        "database_url": database_url,
        "http_port": 0,
        "log_json": False,
        "max_upload_bytes": LIMIT,
    }
    allowed = create_gateway(GatewaySettings(**common, url_fetch_allowed_networks=["127.0.0.0/8"]))
    strict_settings = GatewaySettings(**common)
    strict = create_gateway(strict_settings)
    embedder: Embedder = LocalEmbedder(IngestSettings())
    ingest = create_ingest(
        IngestSettings(nats_url=nats_url, database_url=database_url, http_port=0, log_json=False),
        embedder=embedder,
    )
    async with (
        ingest.router.lifespan_context(ingest),
        allowed.router.lifespan_context(allowed),
        strict.router.lifespan_context(strict),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=allowed), base_url="http://a") as a,
        httpx.AsyncClient(transport=httpx.ASGITransport(app=strict), base_url="http://s") as s,
    ):
        yield a, s, strict_settings


def _teacher(settings: GatewaySettings, tenant_id: str) -> dict[str, str]:
    token = issue_token(
        secret=settings.effective_jwt_secret, tenant_id=tenant_id, user_id="t-1", role="teacher"
    )
    return {"Authorization": f"Bearer {token}"}


async def _submit(client: httpx.AsyncClient, headers: dict[str, str], url: str) -> httpx.Response:
    # a multipart form with a url field and no file, as `curl -F url=...` sends it
    return await client.post("/v1/documents", files={"url": (None, url)}, headers=headers)


async def test_private_addresses_are_refused_unless_allowed(
    gateways: tuple[httpx.AsyncClient, httpx.AsyncClient, GatewaySettings],
    site: Site,
    tenant_id: str,
) -> None:
    allowed, strict, settings = gateways
    headers = _teacher(settings, tenant_id)
    for url in (
        site.url("/notes"), f"http://localhost:{site.port}/notes", "http://169.254.169.254/",
        "http://10.1.2.3/x", "http://192.168.0.1/", "http://[::1]/", "ftp://example.org/a",
        "file:///etc/passwd", "http://a:99999/", "http://[::1/",
    ):  # fmt: skip
        refused = await _submit(strict, headers, url)
        assert refused.status_code == 422, (url, refused.text)
        assert refused.json()["reason"] == "url_refused", url
    # allowed to reach the site, but not where it redirects: every hop is checked
    hop = await _submit(allowed, headers, site.url("/to-metadata"))
    assert hop.status_code == 422 and "169.254.169.254" in hop.json()["detail"]
    wrong_type = await _submit(allowed, headers, site.url("/photo.png"))
    assert wrong_type.status_code == 422 and "image/png" in wrong_type.json()["detail"]
    too_big = await _submit(allowed, headers, site.url("/huge"))
    assert too_big.status_code == 422 and "larger than the limit" in too_big.json()["detail"]
    listed = await strict.get("/v1/documents", headers=headers)
    assert listed.json()["items"] == [], "nothing refused leaves a document behind"


async def test_a_page_is_fetched_indexed_and_refetched_only_when_it_changed(
    gateways: tuple[httpx.AsyncClient, httpx.AsyncClient, GatewaySettings],
    site: Site,
    tenant_id: str,
    db_pool: Any,
) -> None:
    allowed, _, settings = gateways
    headers = _teacher(settings, tenant_id)
    accepted = await _submit(allowed, headers, site.url("/moved"))
    assert accepted.status_code == 202, accepted.text
    doc_id = accepted.json()["id"]
    done = await wait_final(allowed, doc_id, headers)
    assert done["status"] == "indexed" and done["chunk_count"] >= 1
    assert done["title"] == "Photosynthesis explained"  # from the page
    source = done["source"]
    assert source["url"] == site.url("/moved") and source["final_url"] == site.url("/notes")
    assert source["canonical_url"] == "https://example.org/biology/photosynthesis"
    assert source["author"] == "Ada Botanist"
    texts = await db_pool.fetch("SELECT text FROM chunks WHERE document_id = $1", uuid.UUID(doc_id))
    assert any("RuBisCO" in r["text"] for r in texts)

    same = await allowed.post(f"/v1/documents/{doc_id}/refetch", headers=headers)
    assert same.status_code == 200 and same.json()["id"] == doc_id
    site.pages["/notes"] = (200, {"Content-Type": "text/html"},
                            PAGE.replace("VERSION", "v2 revised").encode())  # fmt: skip
    changed = await allowed.post(f"/v1/documents/{doc_id}/refetch", headers=headers)
    assert changed.status_code == 202, changed.text
    newer = await wait_final(allowed, changed.json()["id"], headers)
    assert newer["version"] == 2 and newer["previous_version_id"] == doc_id
    plain = await allowed.post("/v1/documents", files={"title": (None, "x")}, headers=headers)
    assert plain.status_code == 400  # neither a file nor a URL


async def test_a_jats_article_is_uploaded_and_indexed(
    gateways: tuple[httpx.AsyncClient, httpx.AsyncClient, GatewaySettings],
    tenant_id: str,
    db_pool: Any,
) -> None:
    from tests.ingest.test_extract_jats import ARTICLE

    _, strict, settings = gateways
    headers = _teacher(settings, tenant_id)
    accepted = await strict.post(
        "/v1/documents", files={"file": ("pmc-article.xml", ARTICLE.encode(), "text/xml")},
        headers=headers,
    )  # fmt: skip
    assert accepted.status_code == 202, accepted.text
    done = await wait_final(strict, accepted.json()["id"], headers)
    assert done["status"] == "indexed" and done["mime_type"] == "application/vnd.jats+xml"
    sections = await db_pool.fetch(
        "SELECT section_path FROM chunks WHERE document_id = $1", uuid.UUID(done["id"])
    )
    assert any(r["section_path"][-1:] == ["Blue light"] for r in sections)
    other = await strict.post(
        "/v1/documents", files={"file": ("books.xml", b"<?xml version='1.0'?><books/>")},
        headers=headers,
    )  # fmt: skip
    assert other.status_code == 415 and other.json()["reason"] == "unsupported_type"
