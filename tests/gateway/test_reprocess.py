"""Re-chunking: a document's stored file indexed again (``POST /v1/documents/{id}/reprocess``,
``lectern docs --reprocess``) after the operator changed the chunking settings. Gateway and
ingest over real NATS and Postgres: the old version answers until the new one is indexed,
the new one is chunked by the new settings, and the old one is retired."""

from __future__ import annotations

import contextlib
import io
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from lectern_cli.docs_cmd import docs
from lectern_common.embeddings import Embedder, LocalEmbedder
from lectern_gateway.app import create_app as create_gateway
from lectern_gateway.auth import issue_token
from lectern_gateway.config import Settings as GatewaySettings
from lectern_ingest.app import create_app as create_ingest
from lectern_ingest.config import Settings as IngestSettings
from tests.gateway.test_documents_api import wait_final

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TOPICS = ("osmosis", "diffusion", "active transport", "endocytosis", "exocytosis", "ion pumps")
NOTES = "\n\n".join(
    f"# {topic.title()}\n\n"
    + " ".join(
        f"Sentence {i} about {topic}: cells move substances across the membrane by {topic}, "
        f"which biology students compare with the other transport processes in unit {i}."
        for i in range(1, 9)
    )
    for topic in TOPICS
)


@pytest.fixture(scope="module")
def embedder() -> Embedder:
    return LocalEmbedder(IngestSettings())


@pytest.fixture
async def gateway(
    nats_url: str, database_url: str
) -> AsyncIterator[tuple[httpx.AsyncClient, GatewaySettings, httpx.ASGITransport]]:
    settings = GatewaySettings(
        nats_url=nats_url, database_url=database_url, http_port=0, log_json=False
    )
    app = create_gateway(settings)
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://g") as client,
    ):
        yield client, settings, transport


@contextlib.asynccontextmanager
async def _ingest(
    nats_url: str, database_url: str, embedder: Embedder, **chunking: Any
) -> AsyncIterator[None]:
    app = create_ingest(
        IngestSettings(
            nats_url=nats_url, database_url=database_url, http_port=0, log_json=False,
            **chunking,
        ),
        embedder=embedder,
    )  # fmt: skip
    async with app.router.lifespan_context(app):
        yield


def _teacher(settings: GatewaySettings, tenant_id: str) -> dict[str, str]:
    token = issue_token(
        secret=settings.effective_jwt_secret, tenant_id=tenant_id, user_id="t-1", role="teacher"
    )
    return {"Authorization": f"Bearer {token}"}


async def _chunk_texts(db_pool: Any, doc_id: str) -> list[str]:
    rows = await db_pool.fetch(
        "SELECT text FROM chunks WHERE document_id = $1 AND kind = 'text' ORDER BY chunk_index",
        uuid.UUID(doc_id),
    )
    return [r["text"] for r in rows]


async def _holding(db_pool: Any, tenant_id: str, word: str) -> set[str]:
    """The searchable documents whose chunks hold the word (what retrieval reads)."""
    rows = await db_pool.fetch(
        "SELECT DISTINCT c.document_id FROM chunks c JOIN documents d ON d.id = c.document_id "
        "WHERE c.tenant_id = $1 AND d.status = 'indexed' AND c.text ILIKE '%' || $2 || '%'",
        tenant_id, word,
    )  # fmt: skip
    return {str(r["document_id"]) for r in rows}


async def test_reprocessing_rechunks_a_document_while_the_old_version_answers(
    gateway: tuple[httpx.AsyncClient, GatewaySettings, httpx.ASGITransport],
    embedder: Embedder,
    nats_url: str,
    database_url: str,
    tenant_id: str,
    db_pool: Any,
) -> None:
    client, settings, transport = gateway
    headers = _teacher(settings, tenant_id)
    async with _ingest(nats_url, database_url, embedder):
        accepted = await client.post(
            "/v1/documents", files={"file": ("transport.md", NOTES.encode(), "text/markdown")},
            data={"subject": "biology"}, headers=headers,
        )  # fmt: skip
        assert accepted.status_code == 202, accepted.text
        old_id = accepted.json()["id"]
        old = await wait_final(client, old_id, headers, attempts=600)
        assert old["status"] == "indexed", old
    before = await _chunk_texts(db_pool, old_id)

    # no worker runs now: the new version waits, and the old one still answers
    first = await client.post(f"/v1/documents/{old_id}/reprocess", headers=headers)
    assert first.status_code == 202, first.text
    new_id = first.json()["id"]
    assert new_id != old_id and first.json()["version"] == 2
    assert first.json()["document"]["subject"] == "biology"  # the metadata is kept
    again = await client.post(f"/v1/documents/{old_id}/reprocess", headers=headers)
    assert again.status_code == 200 and again.json()["id"] == new_id, "joins the one under way"
    busy = await client.post(f"/v1/documents/{new_id}/reprocess", headers=headers)
    assert busy.status_code == 409 and busy.json()["reason"] == "in_progress"
    assert await _holding(db_pool, tenant_id, "endocytosis") == {old_id}

    async with _ingest(
        nats_url, database_url, embedder,
        chunk_target_tokens=60, chunk_min_tokens=20, chunk_max_tokens=80, chunk_overlap_tokens=0,
    ):  # fmt: skip
        # a claim on what is indexed, not on how soon: a fresh-clone run (2026-12-05) found
        # the new version still pending, never attempted, after 600 polls (unexplained; a
        # suspect: a delivery to the stopped worker's pull request, back after the ack wait)
        new = await wait_final(client, new_id, headers, attempts=1800)
    assert new["status"] == "indexed", new
    assert new["previous_version_id"] == old_id and new["subject"] == "biology"
    after = await _chunk_texts(db_pool, new_id)
    assert len(after) > len(before), (len(before), len(after))
    assert " ".join(after).count("endocytosis") >= " ".join(before).count("endocytosis") - 1
    retired = (await client.get(f"/v1/documents/{old_id}", headers=headers)).json()
    assert retired["status"] == "superseded"
    assert await _chunk_texts(db_pool, old_id) == []
    assert await _holding(db_pool, tenant_id, "endocytosis") == {new_id}
    audit = (await client.get(f"/v1/documents/{old_id}/audit", headers=headers)).json()
    assert any(entry["action"] == "reprocessed" for entry in audit)

    # the CLI over HTTP: every indexed document queued again
    out = io.StringIO()
    code = await docs(
        url="http://g", token=headers["Authorization"].split()[1], out=out,
        action="reprocess-all", transport=transport,
    )  # fmt: skip
    assert code == 0, out.getvalue()
    assert "1 of 1 documents queued" in out.getvalue()
    newest = await db_pool.fetchval(
        "SELECT id FROM documents WHERE previous_version_id = $1", uuid.UUID(new_id)
    )
    assert newest is not None
    async with _ingest(nats_url, database_url, embedder):
        third = await wait_final(client, str(newest), headers, attempts=600)
    assert third["status"] == "indexed" and third["version"] == 3
    assert await _chunk_texts(db_pool, str(newest)) == before, "default chunking again"
