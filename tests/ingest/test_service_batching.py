"""Many small documents at once: each indexed exactly once with its own outcome event."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from typing import Any

import numpy as np
import pytest

from lectern_common import filetype
from lectern_common.embeddings import LocalEmbedder
from lectern_common.errors import PermanentError
from lectern_common.events import (
    DocumentFailed,
    DocumentIndexed,
    DocumentUploaded,
    outcome_event_id,
)
from lectern_ingest.app import create_app
from lectern_ingest.config import Settings
from lectern_ingest.service import IngestWorker
from tests.ingest.test_service_worker import outboxed, stage_upload

pytestmark = [pytest.mark.integration, pytest.mark.slow]

FACTS = [
    "Photosynthesis turns light energy into chemical energy stored in glucose.",
    "Mitosis produces two daughter cells with the same number of chromosomes.",
    "Newton's second law states that force equals mass times acceleration.",
    "Evaporation and condensation move water between the oceans and the air.",
    "Enzymes lower the activation energy of the reactions they catalyse.",
    "The mitochondrion makes most of the cell's supply of ATP.",
    "Sound travels faster in water than in air because water is less compressible.",
    "A covalent bond shares a pair of electrons between two atoms.",
]


class PoisonedEmbedder:
    """The packaged MiniLM, except that it rejects any batch holding the word POISON."""

    def __init__(self, inner: LocalEmbedder) -> None:
        self.inner = inner
        self.calls: list[int] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def embed_documents(self, texts: Sequence[str]) -> Any:
        self.calls.append(len(texts))
        if any("POISON" in t for t in texts):
            raise PermanentError("the embedder refuses this text", reason="bad_input")
        return await self.inner.embed_documents(texts)


@pytest.fixture(scope="module")
def embedder() -> LocalEmbedder:
    """The packaged MiniLM, loaded once for the module."""
    return LocalEmbedder(Settings())


@pytest.fixture(scope="module")
def settings(nats_url: str, database_url: str) -> Settings:
    """Batching on, small lists so several form."""
    return Settings(
        nats_url=nats_url, database_url=database_url, http_port=0, log_json=False,
        progress_interval_s=0.0, progress_after_s=0.0, retry_backoff_s=0.05, batch_documents=8,
    )  # fmt: skip


@pytest.fixture(scope="module", autouse=True)
async def app(settings: Settings, embedder: LocalEmbedder) -> AsyncIterator[Any]:
    """The ingest app with batching on (it also declares the streams and the bucket)."""
    application = create_app(settings, embedder=embedder)
    async with application.router.lifespan_context(application):
        yield application


@pytest.fixture(scope="module")
async def nc(nats_url: str) -> Any:
    """A plain NATS connection for the object store."""
    import nats

    connection = await nats.connect(nats_url)
    yield connection
    await connection.drain()


def make_worker(settings: Settings, embedder: Any, db_pool: Any, nc: Any) -> IngestWorker:
    async def publish(event: Any) -> None:
        return None

    return IngestWorker(
        settings=settings, embedder=embedder, pool=db_pool, jetstream=nc.jetstream(),
        publish=publish,
    )  # fmt: skip


async def stage_small(
    db_pool: Any, nc: Any, tenant_id: str, texts: Sequence[bytes]
) -> list[DocumentUploaded]:
    """Stage one small .txt upload per text."""
    staged = []
    for i, text in enumerate(texts):
        event = await stage_upload(
            db_pool, nc, tenant_id=tenant_id, data=text, filename=f"fact-{i}.txt",
            mime=filetype.TEXT,
        )  # fmt: skip
        staged.append(event)
    return staged


async def chunk_ids(db_pool: Any, events: Sequence[DocumentUploaded]) -> dict[uuid.UUID, set[Any]]:
    rows = await db_pool.fetch(
        "SELECT document_id, id FROM chunks WHERE document_id = ANY($1::uuid[])",
        [e.document_id for e in events],
    )
    found: dict[uuid.UUID, set[Any]] = {e.document_id: set() for e in events}
    for row in rows:
        found[row["document_id"]].add(row["id"])
    return found


async def test_small_documents_together_are_each_indexed_once(
    settings: Settings, embedder: LocalEmbedder, db_pool: Any, nc: Any, tenant_id: str
) -> None:
    counting = PoisonedEmbedder(embedder)
    worker = make_worker(settings, counting, db_pool, nc)
    events = await stage_small(db_pool, nc, tenant_id, [f.encode() for f in FACTS])
    assert all(worker.is_small(e) for e in events)
    outcomes = await asyncio.gather(*(worker.process(event=e, deliveries=1) for e in events))
    assert [o.status for o in outcomes] == ["indexed"] * len(events)
    assert worker.small is not None
    assert worker.small.collector.lists == 1, "the eight uploads were indexed as one list"
    assert counting.calls == [len(events)], "one embedding call for the list"
    chunks = await chunk_ids(db_pool, events)
    assert all(len(ids) == 1 for ids in chunks.values())
    for event in events:
        published = await outboxed(db_pool, DocumentIndexed.subject, event.document_id)
        assert [p["event_id"] for p in published] == [
            str(outcome_event_id(event.document_id, event.version, "indexed"))
        ]
        stored = await db_pool.fetchrow(
            "SELECT c.text, d.status FROM chunks c JOIN ingest_documents d ON d.id = c.document_id "
            "WHERE c.document_id = $1", event.document_id,
        )  # fmt: skip
        assert stored["status"] == "indexed"
    texts = {
        r["text"]
        for r in await db_pool.fetch(
            "SELECT text FROM chunks WHERE document_id = ANY($1::uuid[])",
            [e.document_id for e in events],
        )
    }
    assert texts == set(FACTS), "each document keeps its own chunk and vector"


class SlowEmbedder:
    """The packaged MiniLM, ``delay_s`` slower a call: a list that stalls (as while NATS
    elects a leader) while others wait."""

    def __init__(self, inner: LocalEmbedder, delay_s: float) -> None:
        self.inner, self.delay_s = inner, delay_s

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def embed_documents(self, texts: Sequence[str]) -> Any:
        await asyncio.sleep(self.delay_s)
        return await self.inner.embed_documents(texts)


async def test_an_upload_waiting_behind_the_lists_in_flight_is_kept_alive(
    settings: Settings, embedder: LocalEmbedder, db_pool: Any, nc: Any, tenant_id: str
) -> None:
    """A small upload tells JetStream it is alive from the moment it waits for a list, not
    once its own list runs: one waiting behind stalled lists past its ack wait came again,
    a delivery spent each time, until a good upload failed ``too_many_deliveries``."""
    lists_of_two = settings.model_copy(update={"batch_documents": 2, "in_progress_interval_s": 0.1})
    worker = make_worker(lists_of_two, SlowEmbedder(embedder, 1.0), db_pool, nc)
    events = await stage_small(db_pool, nc, tenant_id, [f.encode() for f in FACTS[:6]])
    beats: dict[uuid.UUID, list[float]] = {e.document_id: [] for e in events}
    finished: list[float] = []

    async def deliver(event: DocumentUploaded) -> str:
        async def keepalive() -> None:
            beats[event.document_id].append(time.monotonic())

        outcome = await worker.process(event=event, deliveries=1, keepalive=keepalive)
        finished.append(time.monotonic())
        return outcome.status

    assert await asyncio.gather(*(deliver(e) for e in events)) == ["indexed"] * len(events)
    assert worker.small is not None and worker.small.collector.lists == 3
    # two lists in flight at most: the third is taken once one of them is done, and its
    # uploads were heard from before that
    for event in events[4:]:
        assert beats[event.document_id], "no keep-alive while waiting"
        assert min(beats[event.document_id]) < min(finished)


async def test_a_bad_document_fails_alone_in_a_batch(
    settings: Settings, embedder: LocalEmbedder, db_pool: Any, nc: Any, tenant_id: str
) -> None:
    poisoned = PoisonedEmbedder(embedder)
    worker = make_worker(settings, poisoned, db_pool, nc)
    texts = [f.encode() for f in FACTS[:5]]
    texts[1] = b""  # empty: fails at extract
    texts[3] = b"This fact is POISON to the embedder and only this document may fail."
    events = await stage_small(db_pool, nc, tenant_id, texts)
    outcomes = await asyncio.gather(*(worker.process(event=e, deliveries=1) for e in events))
    assert [o.status for o in outcomes] == ["indexed", "failed", "indexed", "failed", "indexed"]
    expected = {1: ("extract", "empty_file"), 3: ("embed", "embedding_failed")}
    for position, (stage, reason) in expected.items():
        failed = await outboxed(db_pool, DocumentFailed.subject, events[position].document_id)
        assert [(f["stage"], f["reason"]) for f in failed] == [(stage, reason)]
        assert failed[0]["message"]
    chunks = await chunk_ids(db_pool, events)
    assert [len(chunks[e.document_id]) for e in events] == [1, 0, 1, 0, 1]
    for position in (0, 2, 4):
        assert not await outboxed(db_pool, DocumentFailed.subject, events[position].document_id)


async def test_a_redelivered_batch_does_not_duplicate_chunks(
    settings: Settings, embedder: LocalEmbedder, db_pool: Any, nc: Any, tenant_id: str
) -> None:
    worker = make_worker(settings, embedder, db_pool, nc)
    events = await stage_small(db_pool, nc, tenant_id, [f.encode() for f in FACTS[:6]])
    first = await asyncio.gather(*(worker.process(event=e, deliveries=1) for e in events))
    assert {o.status for o in first} == {"indexed"}
    before = await chunk_ids(db_pool, events)
    # the worker crashed after committing, before acking: the whole batch comes again
    again = await asyncio.gather(*(worker.process(event=e, deliveries=2) for e in events))
    assert {o.status for o in again} == {"indexed"}
    # and a redelivery racing a slow first attempt (still 'processing'): same ids, no copies
    await db_pool.execute(
        "UPDATE ingest_documents SET status = 'processing' WHERE id = ANY($1::uuid[])",
        [e.document_id for e in events],
    )
    third = await asyncio.gather(*(worker.process(event=e, deliveries=3) for e in events))
    assert {o.status for o in third} == {"indexed"}
    assert await chunk_ids(db_pool, events) == before
    for event in events:
        published = await outboxed(db_pool, DocumentIndexed.subject, event.document_id)
        assert len({p["event_id"] for p in published}) == 1


async def test_many_uploads_through_the_consumer_get_one_outcome_each(
    db_pool: Any, nc: Any, tenant_id: str
) -> None:
    texts = [f"{fact} Copy {i}.".encode() for i in range(3) for fact in FACTS]
    events = await stage_small(db_pool, nc, tenant_id, texts)
    wanted = {str(e.document_id) for e in events}
    seen: dict[str, list[str]] = {}
    finished = asyncio.Event()

    async def on_outcome(msg: Any) -> None:
        data = json.loads(msg.data)
        if data.get("document_id") in wanted:
            seen.setdefault(data["document_id"], []).append(msg.subject)
            if len(seen) == len(wanted):
                finished.set()

    subs = [
        await nc.subscribe(DocumentIndexed.subject, cb=on_outcome),
        await nc.subscribe(DocumentFailed.subject, cb=on_outcome),
    ]
    for event in events:
        await nc.jetstream().publish(event.subject, event.model_dump_json().encode())
    await asyncio.wait_for(finished.wait(), 120)
    await asyncio.sleep(0.5)  # any duplicate outcome would arrive meanwhile
    for sub in subs:
        await sub.unsubscribe()
    assert all(subjects == [DocumentIndexed.subject] for subjects in seen.values())
    chunks = await chunk_ids(db_pool, events)
    assert all(len(ids) == 1 for ids in chunks.values())
    vectors = await db_pool.fetch(
        "SELECT embedding FROM chunks WHERE document_id = ANY($1::uuid[])",
        [e.document_id for e in events],
    )
    assert all(np.isfinite(np.asarray(r["embedding"].to_numpy())).all() for r in vectors)
