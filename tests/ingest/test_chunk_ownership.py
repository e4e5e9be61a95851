"""Ingest owns the chunks and their BM25 statistics (issue 61): after any sequence of uploads,
metadata edits, archives, restores, supersessions and deletions through the gateway's API,
once ingest has applied the events the gateway wrote to its outbox, every document's chunks
match its row and the statistics equal a recount from the chunks."""

from __future__ import annotations

import asyncio
import random
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from lectern_testing.chat import Gateway, offline_gateway, seed_document

pytestmark = pytest.mark.integration

WORDS = (
    "light energy chlorophyll water oxygen carbon sugar enzyme membrane cell leaf root "
    "photosynthesis respiration glucose starch nitrogen protein"
).split()
SUBJECTS = ("biology", "chemistry", "physics", None)


@pytest.fixture(scope="module")
async def gateway(nats_url: str, database_url: str, db_pool: Any) -> AsyncIterator[Gateway]:
    async with offline_gateway(nats_url, database_url, db_pool, chunks=True) as running:
        yield running


async def _upload(pool: Any, tenant_id: str, rng: random.Random) -> uuid.UUID:
    """A document stored as ingest stores one: chunks written and indexed, then ``indexed``."""
    chunks: list[tuple[str, list[str], list[str]]] = [
        (" ".join(rng.choices(WORDS, k=rng.randint(3, 12))) + ".", ["Notes"], [])
        for _ in range(rng.randint(1, 4))
    ]
    seeded = await seed_document(pool, tenant_id=tenant_id, chunks=chunks)
    await pool.execute("SELECT lectern_bm25_index_document($1)", seeded.document_id)
    return seeded.document_id


async def _act(
    client: httpx.AsyncClient, gateway: Gateway, pool: Any, tenant_id: str, rng: random.Random,
    documents: list[uuid.UUID],
) -> str:  # fmt: skip
    """One random operation; its name."""
    teacher = gateway.token(tenant_id, "t-1", role="teacher")
    action = rng.choice(("upload", "edit", "edit", "archive", "restore", "supersede", "delete"))
    if action == "upload" or not documents:
        documents.append(await _upload(pool, tenant_id, rng))
        return "upload"
    url = f"{gateway.url}/v1/documents/{rng.choice(documents)}"
    if action == "edit":
        body = {
            "subject": rng.choice(SUBJECTS), "topic_tags": rng.sample(WORDS, 2),
            "title": f"Notes on {rng.choice(WORDS)}",
        }  # fmt: skip
        response = await client.patch(url, json=body, headers=teacher)
    elif action == "supersede":
        body = {"by": str(rng.choice(documents))}
        response = await client.post(f"{url}/supersede", json=body, headers=teacher)
    elif action == "delete":
        response = await client.delete(url, headers=teacher)
    else:
        response = await client.post(f"{url}/{action}", headers=teacher)
    # a change the document's state refuses (archive a deleted one ...) is a clear 4xx
    assert response.status_code in (200, 404, 409, 422), response.text
    return action


async def _mismatches(pool: Any, tenant_id: str) -> list[Any]:
    """Chunks, and the index's record of documents (``index_documents``), that do not match
    their document's row (empty once ingest caught up)."""
    records = await pool.fetch(
        """SELECT d.id, d.status, NULL::uuid AS chunk_id FROM documents d
           LEFT JOIN index_documents x ON x.document_id = d.id
           WHERE d.tenant_id = $1 AND (
               (x.document_id IS NOT NULL) <> (
                   d.status <> 'deleted' AND d.deleted_at IS NULL
                   AND EXISTS (SELECT 1 FROM chunks c WHERE c.document_id = d.id))
               OR (x.document_id IS NOT NULL AND (
                   x.searchable <> (d.status = 'indexed')
                   OR x.subject IS DISTINCT FROM d.subject
                   OR x.title IS DISTINCT FROM d.title)))""",
        tenant_id,
    )
    return list(records) + list(
        await pool.fetch(
            """SELECT d.id, d.status, c.id AS chunk_id FROM documents d
               JOIN chunks c ON c.document_id = d.id
               WHERE d.tenant_id = $1 AND (
                   d.status = 'deleted'
                   OR c.active <> (d.status = 'indexed')
                   OR (c.doc_length IS NOT NULL) <> (d.status = 'indexed')
                   OR c.subject IS DISTINCT FROM d.subject
                   OR c.topic_tags IS DISTINCT FROM d.topic_tags)""",
            tenant_id,
        )
    )


async def _statistics(pool: Any, tenant_id: str) -> tuple[tuple[int, int], dict[str, int]]:
    stats = await pool.fetchrow(
        "SELECT chunk_count, total_length FROM bm25_collection_stats WHERE tenant_id = $1",
        tenant_id,
    )
    df = await pool.fetch(
        "SELECT v.term, s.df FROM bm25_term_stats s JOIN bm25_vocabulary v ON v.id = s.term_id "
        "WHERE s.tenant_id = $1 AND s.df > 0",
        tenant_id,
    )
    return (stats["chunk_count"], stats["total_length"]), {r["term"]: r["df"] for r in df}


async def _recount(pool: Any, tenant_id: str) -> tuple[tuple[int, int], dict[str, int]]:
    """The statistics counted afresh from the indexed chunks' text."""
    rows = await pool.fetch(
        "SELECT tsv, doc_length FROM chunks WHERE tenant_id = $1 AND doc_length IS NOT NULL",
        tenant_id,
    )
    lengths = await pool.fetchval(
        "SELECT coalesce(sum(coalesce(array_length(t.positions, 1), 1)), 0) "
        "FROM chunks c, unnest(c.tsv) t WHERE c.tenant_id = $1 AND c.doc_length IS NOT NULL",
        tenant_id,
    )
    df: Counter[str] = Counter()
    for row in await pool.fetch(
        "SELECT t.lexeme FROM chunks c, unnest(c.tsv) t "
        "WHERE c.tenant_id = $1 AND c.doc_length IS NOT NULL",
        tenant_id,
    ):
        df[row["lexeme"]] += 1
    assert sum(r["doc_length"] for r in rows) == lengths
    return (len(rows), int(lengths)), dict(df)


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_statistics_equal_a_recount_after_any_sequence_of_changes(
    gateway: Gateway, db_pool: Any, seed: int
) -> None:
    rng = random.Random(seed)
    tenant_id = f"owned-{seed}-{uuid.uuid4().hex[:8]}"
    documents: list[uuid.UUID] = []
    done: Counter[str] = Counter()
    async with httpx.AsyncClient(timeout=60) as client:
        for _ in range(30):
            done[await _act(client, gateway, db_pool, tenant_id, rng, documents)] += 1
    assert len(done) >= 4, f"the sequence exercised too little: {done}"
    deadline = asyncio.get_running_loop().time() + 30
    while mismatched := await _mismatches(db_pool, tenant_id):
        assert asyncio.get_running_loop().time() < deadline, (
            f"ingest did not bring the chunks to their documents: {[dict(r) for r in mismatched]}"
        )
        await asyncio.sleep(0.05)
    assert await _statistics(db_pool, tenant_id) == await _recount(db_pool, tenant_id), done
