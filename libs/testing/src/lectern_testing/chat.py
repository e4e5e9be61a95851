"""Test support for the chat features (used by tests/gateway and benchmarks, not at run time):
seeded material, in-process retriever/re-ranker stand-ins answering on the real NATS, the
gateway served by uvicorn, and an SSE client reading answers with httpx-sse."""

from __future__ import annotations

import asyncio
import functools
import json
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import httpx
import numpy as np
import uvicorn
from fastapi import FastAPI
from faststream.nats import NatsBroker
from httpx_sse import aconnect_sse
from nats.js.api import ConsumerConfig, DeliverPolicy
from opentelemetry import trace
from pydantic import BaseModel

from lectern_common.broker import QUEUE_GROUPS, stream_for
from lectern_common.db.types import Pool
from lectern_common.events import (
    AnswerSpan,
    Candidate,
    Confidence,
    IndexChunksRequest,
    IndexCountRequest,
    IndexMaterialRequest,
    IndexOutlineRequest,
    IndexTopicsRequest,
    IndexVectorsRequest,
    MemoryRecallReply,
    MemoryRecallRequest,
    RankedChunk,
    RecalledMemory,
    RerankReply,
    RerankRequest,
    RetrieveReply,
    RetrieveRequest,
    Subjects,
)
from lectern_common.events.chat import ConfidenceBand
from lectern_gateway.app import create_app
from lectern_gateway.auth import Plan, Role, issue_token
from lectern_gateway.chat.sse import ChatEvent, parse_event
from lectern_gateway.config import Settings
from lectern_gateway.deps import GatewayDeps, gateway_of
from lectern_gateway.worker import create_worker_app
from lectern_retriever import index_reads
from lectern_testing.plugin import LOCAL_EMBEDDING_DIM

#: a short course in four numbered sections (definitions and stated numbers to quiz on)
STUDY_MATERIAL: list[tuple[str, list[str], list[str]]] = [
    (
        "Mitosis is a type of cell division that produces two identical daughter cells. "
        "A full cell cycle takes about 24 hours in human cells.",
        ["1 Cells", "1.1 Mitosis"],
        [],
    ),
    (
        "Meiosis is a type of cell division that produces four different gametes. "
        "Human gametes carry 23 chromosomes each.",
        ["1 Cells", "1.2 Meiosis"],
        [],
    ),
    (
        "Photosynthesis is a process that converts light energy into chemical energy. "
        "A leaf can hold about 500000 chloroplasts per square millimetre.",
        ["2 Plants", "2.1 Photosynthesis"],
        ["photosynthesis"],
    ),
    (
        "Cellular respiration is a process that releases energy from glucose in cells. "
        "One glucose molecule yields about 30 molecules of ATP.",
        ["2 Plants", "2.2 Respiration"],
        [],
    ),
]

PHOTOSYNTHESIS = [
    (
        "Photosynthesis happens in the chloroplasts of plant cells. Chlorophyll absorbs light "
        "energy, mostly red and blue light. The light reactions split water and release oxygen.",
        ["Photosynthesis", "Light reactions"],
        ["photosynthesis"],
    ),
    (
        "The Calvin cycle fixes carbon dioxide into sugars using ATP and NADPH. The enzyme "
        "RuBisCO catalyses the first step of carbon fixation in the stroma.",
        ["Photosynthesis", "Calvin cycle"],
        ["photosynthesis", "calvin cycle"],
    ),
    (
        "Cellular respiration releases energy from glucose. Mitochondria produce most of the "
        "ATP a cell needs through oxidative phosphorylation.",
        ["Cells", "Respiration"],
        ["cellular respiration"],
    ),
]


@dataclass
class Seeded:
    """Ids of seeded material."""

    document_id: uuid.UUID
    chunk_ids: list[uuid.UUID]


# Each seeded document draws its random vectors from a seed of its own (its id): with one
# seed for all, hundreds of copies of the same vectors in a worker's shared HNSW index made
# other tests' filtered searches miss (the conflict check through the index: 17 misses in 20
# after 300 seeded documents, none with vectors of their own).


async def seed_document(
    pool: Pool,
    *,
    tenant_id: str,
    title: str = "Biology notes",
    chunks: Sequence[tuple[str, list[str], list[str]]] = PHOTOSYNTHESIS,
    collection: str = "educational",
    subject: str | None = "biology",
    uploaded_by: str = "teacher-1",
    uploader_role: str | None = None,
    class_id: str | None = None,
    chunk_ids: Sequence[uuid.UUID] | None = None,
) -> Seeded:
    """Insert an indexed document (the gateway's row and ingest's record) and its chunks
    straight into Postgres."""
    document_id = uuid.uuid4()
    await pool.execute(
        "INSERT INTO documents (id, tenant_id, title, filename, mime_type, size_bytes, "
        "file_sha256, status, uploaded_by, uploader_role, class_id, collection, subject, "
        "chunk_count) "
        "VALUES ($1,$2,$3,'notes.md','text/markdown',100,$4,'indexed',$5,$6,$7,$8,$9,$10)",
        document_id,
        tenant_id,
        title,
        uuid.uuid4().hex,
        uploaded_by,
        uploader_role,
        class_id,
        collection,
        subject,
        len(chunks),
    )
    # ingest's own record of the upload, as it keeps one of a document it indexed
    await pool.execute(
        "INSERT INTO ingest_documents (id, tenant_id, title, filename, mime_type, status, "
        "uploaded_by, uploader_role, class_id, collection, subject, chunk_count, indexed_at) "
        "VALUES ($1,$2,$3,'notes.md','text/markdown','indexed',$4,$5,$6,$7,$8,$9,now())",
        document_id,
        tenant_id,
        title,
        uploaded_by,
        uploader_role,
        class_id,
        collection,
        subject,
        len(chunks),
    )
    ids = []
    rng = np.random.default_rng(document_id.int % 2**63)  # its own (see the comment above)
    for index, (text, section, tags) in enumerate(chunks):
        chunk_id = chunk_ids[index] if chunk_ids is not None else uuid.uuid4()
        ids.append(chunk_id)
        await pool.execute(
            "INSERT INTO chunks (id, document_id, tenant_id, chunk_index, text, section_path, "
            "page_start, page_end, token_count, content_hash, collection, subject, topic_tags, "
            "class_id, uploaded_by, embedding) "
            "VALUES ($1,$2,$3,$4,$5,$6,$7,$7,$8,$9,$10,$11,$12,$14,$15,$13)",
            chunk_id,
            document_id,
            tenant_id,
            index,
            text,
            section,
            index + 1,
            len(text) // 4,
            uuid.uuid4().hex,
            collection,
            subject,
            tags,
            rng.standard_normal(LOCAL_EMBEDDING_DIM).astype(np.float32),
            class_id,
            uploaded_by,
        )
    # the index's record of the document, as ingest writes it when it indexes one
    from lectern_ingest.repository import sync_index_documents

    await sync_index_documents(pool, [document_id])
    return Seeded(document_id, ids)


async def store_candidate_chunk(
    pool: Any, *, tenant_id: str, candidate: Candidate, embedding: Any
) -> None:
    """A candidate's document and chunk, indexed with ``embedding`` as its stored vector (what
    the re-ranker's bi-encoder asks the retriever for: ``lectern.index.vectors.v1``)."""
    await pool.execute(
        "INSERT INTO documents (id, tenant_id, title, filename, mime_type, size_bytes,"
        " file_sha256, uploaded_by, status) VALUES ($1, $2, $3, 'notes.pdf',"
        " 'application/pdf', 1, 'x', 'teacher-1', 'indexed')",
        candidate.document_id,
        tenant_id,
        candidate.title,
    )
    await pool.execute(
        "INSERT INTO chunks (id, document_id, tenant_id, chunk_index, text, token_count,"
        " content_hash, embedding) VALUES ($1, $2, $3, 0, $4, 20, 'h', $5)",
        candidate.chunk_id,
        candidate.document_id,
        tenant_id,
        candidate.text,
        embedding,
    )


@dataclass
class Responders:
    """Retriever and re-ranker stand-ins answering on the real NATS.

    The retriever does Postgres full-text search within the request's tenant and collections
    (``leak`` ignores both, to prove the gateway filters on its own); the re-ranker keeps the
    order and answers the scripted confidence band; ``spans`` (a phrase -> its margin over
    "no answer here") mark each phrase where a kept chunk holds it, as a reader with a span
    head would.
    """

    pool: Pool
    band: ConfidenceBand = "high"
    leak: bool = False
    requests: list[RetrieveRequest] = field(default_factory=list)
    #: when set, a memory-service stand-in recalls these texts for every student
    memories: list[str] | None = None
    recalls: list[MemoryRecallRequest] = field(default_factory=list)
    spans: dict[str, float] = field(default_factory=dict)

    async def recall(self, request: MemoryRecallRequest) -> MemoryRecallReply:
        """The scripted memories."""
        self.recalls.append(request)
        memories = [
            RecalledMemory(
                memory_id=uuid.uuid4(),
                kind="struggle",
                text=text,
                strength=1.0,
                score=0.9,
                updated_at=datetime.now(UTC),
            )
            for text in (self.memories or [])[: request.k]
        ]
        return MemoryRecallReply(request_id=request.request_id, memories=memories)

    async def retrieve(self, request: RetrieveRequest) -> RetrieveReply:
        """Full-text candidates."""
        self.requests.append(request)
        rows = await self.pool.fetch(
            "SELECT c.id, c.document_id, c.text, c.section_path, c.page_start, c.page_end, "
            "d.title FROM chunks c JOIN documents d ON d.id = c.document_id "
            "WHERE c.tsv @@ to_tsquery('english', $1) "
            "AND ($4 OR (c.tenant_id = $2 AND c.collection = ANY($3::text[]))) "
            "ORDER BY ts_rank_cd(c.tsv, to_tsquery('english', $1)) DESC LIMIT 10",
            _or_query(request.query),
            request.tenant_id,
            list(request.filters.collections),
            self.leak,
        )
        if self.leak:
            rows = list(rows) + list(
                await self.pool.fetch(
                    "SELECT c.id, c.document_id, c.text, c.section_path, c.page_start, "
                    "c.page_end, d.title FROM chunks c JOIN documents d ON d.id = c.document_id "
                    "ORDER BY c.created_at DESC LIMIT 40"
                )
            )
        candidates = [
            Candidate(
                chunk_id=r["id"],
                document_id=r["document_id"],
                title=r["title"],
                text=r["text"],
                section_path=" > ".join(r["section_path"]),
                page_start=r["page_start"],
                page_end=r["page_end"],
                fused_score=1.0 / (i + 1),
            )
            for i, r in enumerate(rows)
        ]
        idf = await index_reads.word_idf(
            self.pool, tenant_id=request.tenant_id, words=request.idf_words
        )
        return RetrieveReply(request_id=request.request_id, candidates=candidates, idf=idf)

    async def rerank(self, request: RerankRequest) -> RerankReply:
        """Keep the order; confidence from the scripted band (a score inside it)."""
        score = {"high": 0.9, "medium": 0.7, "low": 0.5, "gap": 0.2}[self.band]
        chunks = [
            RankedChunk(candidate=c, semantic=0.5, score=c.fused_score, answer=self._span(c.text))
            for c in request.candidates[: request.top_k]
        ]
        confidence = Confidence(
            score=score, band=self.band, retrieval=score, source_quality=0.7, grounding=0.6
        )
        return RerankReply(request_id=request.request_id, chunks=chunks, confidence=confidence)

    def _span(self, text: str) -> AnswerSpan | None:
        for phrase, margin in self.spans.items():
            at = text.find(phrase)
            if at >= 0:
                return AnswerSpan(start=at, end=at + len(phrase), score=margin, null_score=0.0)
        return None


def _or_query(text: str) -> str:
    words = [w for w in "".join(c if c.isalnum() else " " for c in text.lower()).split()]
    return " | ".join(words) or "nothing"


#: the retriever's reads of the index (``lectern.index.*``), answered here by its own code
INDEX_READS: dict[str, tuple[type[BaseModel], Callable[[Any, Any], Awaitable[BaseModel]]]] = {
    Subjects.INDEX_CHUNKS: (IndexChunksRequest, index_reads.answer_chunks),
    Subjects.INDEX_COUNT: (IndexCountRequest, index_reads.answer_count),
    Subjects.INDEX_MATERIAL: (IndexMaterialRequest, index_reads.answer_material),
    Subjects.INDEX_OUTLINE: (IndexOutlineRequest, index_reads.answer_outline),
    Subjects.INDEX_TOPICS: (IndexTopicsRequest, index_reads.answer_topics),
    Subjects.INDEX_VECTORS: (IndexVectorsRequest, index_reads.answer_vectors),
}


def _answer_with(
    broker: NatsBroker,
    subject: str,
    request_type: type[BaseModel],
    answer: Callable[[Any], Awaitable[BaseModel]],
) -> None:
    """Answer ``subject`` in its queue group with ``answer`` of the decoded request."""

    @broker.subscriber(subject, queue=QUEUE_GROUPS[subject])
    async def handle(body: dict[str, Any]) -> dict[str, Any]:
        reply = await answer(request_type.model_validate(body))
        return reply.model_dump(mode="json")


@asynccontextmanager
async def run_responders(nats_url: str, responders: Responders) -> AsyncIterator[Responders]:
    """Serve ``responders`` in the retriever's (search and the index's reads) and the
    re-ranker's queue groups."""
    broker = NatsBroker(nats_url)

    @broker.subscriber(Subjects.RETRIEVE, queue=QUEUE_GROUPS[Subjects.RETRIEVE])
    async def on_retrieve(request: RetrieveRequest) -> RetrieveReply:
        return await responders.retrieve(request)

    @broker.subscriber(Subjects.RERANK, queue=QUEUE_GROUPS[Subjects.RERANK])
    async def on_rerank(request: RerankRequest) -> RerankReply:
        return await responders.rerank(request)

    for subject, (request_type, answer) in INDEX_READS.items():
        _answer_with(broker, subject, request_type, functools.partial(answer, responders.pool))

    if responders.memories is not None:

        @broker.subscriber(Subjects.MEMORY_RECALL, queue=QUEUE_GROUPS[Subjects.MEMORY_RECALL])
        async def on_recall(request: MemoryRecallRequest) -> MemoryRecallReply:
            return await responders.recall(request)

    await broker.start()
    try:
        yield responders
    finally:
        await broker.stop()


@dataclass
class Worker:
    """The gateway's worker process (its app) served by uvicorn on a free port."""

    app: FastAPI
    url: str

    @property
    def deps(self) -> GatewayDeps:
        """The running worker's typed dependencies (its webhook delivery worker, say)."""
        return gateway_of(self.app.state.lectern)


@dataclass
class Gateway:
    """A gateway served by uvicorn on a free port (and its worker, when one was asked for)."""

    app: FastAPI
    settings: Settings
    url: str
    worker: Worker | None = None

    def token(
        self,
        tenant_id: str,
        user_id: str,
        *,
        role: Role = "student",
        plan: Plan = "pro",
        classes: Sequence[str] = (),
    ) -> dict[str, str]:
        """Authorization headers for a user (``classes``: the token's class claim)."""
        token = issue_token(
            secret=self.settings.effective_jwt_secret,
            tenant_id=tenant_id,
            user_id=user_id,
            role=role,
            plan=plan,
            classes=classes,
        )
        return {"Authorization": f"Bearer {token}"}

    @property
    def deps(self) -> GatewayDeps:
        """The running gateway's typed dependencies (a test may swap its streamer)."""
        return gateway_of(self.app.state.lectern)


def gateway_settings(nats_url: str, database_url: str, **overrides: Any) -> Settings:
    """Test settings: offline generator, no idle sweep (in a worker), short delays."""
    values: dict[str, Any] = {
        "nats_url": nats_url,
        "database_url": database_url,
        "http_port": 0,
        "log_json": False,
        "idle_sweep_interval_s": 0,
        "free_soft_delay_s": 0.3,
        "memory_timeout_s": 0.2,
    }
    values.update(overrides)
    return Settings(**values)


def hosted_model_settings(
    nats_url: str, database_url: str, gemini: Any, fallback: Any, **overrides: Any
) -> Settings:
    """Test settings with Gemini and the OpenAI-compatible fallback pointed at the fake
    servers of ``lectern_testing.gemini_fake`` (``gemini``, ``fallback``). No secondary
    Gemini model unless asked (``gemini_secondary_chat_model=...``): the chain is Gemini, the
    fallback, offline."""
    values: dict[str, Any] = {
        "gemini_api_key": "fake-key",
        "gemini_base_url": gemini.base_url,
        "gemini_secondary_chat_model": "",
        "fallback_llm_base_url": fallback.api_base,
        "fallback_llm_model": "deepseek-chat",
    }
    return gateway_settings(nats_url, database_url, **{**values, **overrides})


@asynccontextmanager
async def serve_gateway(
    settings: Settings,
    *,
    tracer_provider: trace.TracerProvider | None = None,
    worker: bool = False,
) -> AsyncIterator[Gateway]:
    """Run the real gateway app (lifespan included) with uvicorn on 127.0.0.1; ``worker``:
    its worker process's app beside it (``serve_worker``), for tests of the background
    loops (sweeps, gap closures, retention, webhook deliveries)."""
    app = create_app(settings, tracer_provider=tracer_provider)
    async with serve_app(app, settings) as url:
        if not worker:
            yield Gateway(app=app, settings=settings, url=url)
            return
        async with serve_worker(settings, tracer_provider=tracer_provider) as running:
            yield Gateway(app=app, settings=settings, url=url, worker=running)


@asynccontextmanager
async def serve_worker(
    settings: Settings, *, tracer_provider: trace.TracerProvider | None = None
) -> AsyncIterator[Worker]:
    """Run the gateway's worker app (``lectern-gateway worker``) with uvicorn on 127.0.0.1."""
    app = create_worker_app(settings, tracer_provider=tracer_provider)
    async with serve_app(app, settings) as url:
        yield Worker(app=app, url=url)


@asynccontextmanager
async def serve_app(app: FastAPI, settings: Settings) -> AsyncIterator[str]:
    """Serve ``app`` (lifespan included) with uvicorn on a free port of 127.0.0.1; its URL."""
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=0,
        lifespan="on",
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=2,
        timeout_keep_alive=int(settings.keep_alive_s),
    )
    server = uvicorn.Server(config)

    async def serve() -> None:
        # uvicorn ends a failed startup with sys.exit(3), and a SystemExit out of a task stops
        # the event loop and pytest with it, without tearing the session's servers down (they
        # were left running): an error of the test that served the app instead
        try:
            await server.serve()
        except SystemExit as exc:
            raise RuntimeError(f"{app.title} did not start (its log says why)") from exc

    task = asyncio.create_task(serve())
    for _ in range(3000):
        if server.started or task.done():
            break
        await asyncio.sleep(0.01)
    if not server.started:
        await task
        raise RuntimeError(f"{app.title} did not start")
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task


@dataclass
class Received:
    """The events of one answer, with their arrival times."""

    status: int
    events: list[ChatEvent]
    times: list[float]
    headers: dict[str, str]
    problem: dict[str, Any] | None = None

    def of(self, kind: str) -> list[Any]:
        """Events of one type."""
        return [e for e in self.events if e.type == kind]

    @property
    def text(self) -> str:
        """The streamed answer."""
        return "".join(e.text for e in self.of("token"))

    @property
    def done(self) -> Any:
        """The done event."""
        (done,) = self.of("done")
        return done


@asynccontextmanager
async def offline_gateway(
    nats_url: str,
    database_url: str,
    pool: Pool,
    *,
    worker: bool = False,
    chunks: bool = False,
    **overrides: Any,
) -> AsyncIterator[Gateway]:
    """The gateway with the offline answerer and the retriever, re-ranker and memory
    stand-ins (``Responders``) answering on the real NATS (``worker``: and its worker;
    ``chunks``: and ingest's consumers of a teacher's changes, ``chunk_keeper``)."""
    settings = gateway_settings(nats_url, database_url, **overrides)
    async with AsyncExitStack() as stack:
        await stack.enter_async_context(run_responders(nats_url, Responders(pool=pool)))
        if chunks:
            await stack.enter_async_context(chunk_keeper(nats_url, database_url, pool))
        yield await stack.enter_async_context(serve_gateway(settings, worker=worker))


@asynccontextmanager
async def chunk_keeper(nats_url: str, database_url: str, pool: Pool) -> AsyncIterator[None]:
    """Ingest's consumers of a teacher's changes of a document (the real ones,
    ``lectern_ingest.app.subscribe_changes``) on the real NATS, in this process: what
    archive, restore, supersede, edits and deletion do to the chunks ingest owns."""
    from lectern_common.broker import create_broker, ensure_streams
    from lectern_ingest.app import subscribe_changes
    from lectern_ingest.config import Settings as IngestSettings

    settings = IngestSettings(
        nats_url=nats_url, database_url=database_url, http_port=0, log_json=False
    )
    broker = create_broker(nats_url, service_name="ingest")
    subscribe_changes(broker, settings=settings, pool=lambda: pool)
    await broker.connect()
    await ensure_streams(broker.config.connection_state.stream)
    await broker.start()
    try:
        yield
    finally:
        await broker.stop()


async def settled(
    pool: Pool,
    document_id: Any,
    *,
    active: bool | None,
    subject: str | None = None,
    timeout_s: float = 15.0,
) -> None:
    """Wait until ingest has applied a document's change to its chunks: all ``active`` (and
    in the BM25 statistics exactly then) and, given ``subject``, all of that subject; or none
    left (``active=None``)."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        row = await pool.fetchrow(
            "SELECT count(*) AS n, count(*) FILTER (WHERE active) AS on, "
            "count(*) FILTER (WHERE doc_length IS NOT NULL) AS indexed, "
            "count(*) FILTER (WHERE $2::text IS NULL OR subject = $2) AS matching "
            "FROM chunks WHERE document_id = $1",
            document_id,
            subject,
        )
        assert row is not None
        if active is None:
            done = row["n"] == 0
        else:
            want = row["n"] if active else 0
            done = (
                row["n"] > 0
                and row["on"] == want
                and row["indexed"] == want
                and row["matching"] == row["n"]
            )
        if done:
            return
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"chunks of {document_id} not settled to {active}: {dict(row)}")
        await asyncio.sleep(0.02)


@asynccontextmanager
async def memory_service(nats_url: str, database_url: str) -> AsyncIterator[None]:
    """The real memory service, in this process: it answers the gateway's memory requests
    (``lectern.memory.list/forget/topics/export.v1``) and keeps what its events say."""
    from lectern_memory.app import create_app as create_memory
    from lectern_memory.config import Settings as MemorySettings

    memory = create_memory(
        MemorySettings(nats_url=nats_url, database_url=database_url, http_port=0, log_json=False)
    )
    async with memory.router.lifespan_context(memory):
        yield


async def ask(
    client: httpx.AsyncClient, gateway: Gateway, session_id: Any, content: str, headers: Any
) -> Received:
    """POST a question and read its SSE stream with httpx-sse."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    events: list[ChatEvent] = []
    times: list[float] = []
    async with aconnect_sse(
        client,
        "POST",
        f"{gateway.url}/v1/sessions/{session_id}/messages",
        json={"content": content},
        headers=headers,
    ) as source:
        response = source.response
        if response.status_code != 200:
            await response.aread()
            return Received(
                response.status_code, [], [], dict(response.headers), problem=response.json()
            )
        async for sse in source.aiter_sse():
            event = parse_event(sse.data)
            assert sse.event == event.type
            events.append(event)
            times.append(loop.time() - started)
    return Received(200, events, times, dict(response.headers))


async def new_session(
    client: httpx.AsyncClient, gateway: Gateway, headers: Any, **body: Any
) -> dict[str, Any]:
    """Create a session and return its JSON."""
    response = await client.post(f"{gateway.url}/v1/sessions", json=body, headers=headers)
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    return created


async def published(
    js: Any, subject: str, tenant_id: str, *, expect: int = 1, timeout: float = 10.0
) -> list[dict[str, Any]]:
    """Every event of ``subject`` for ``tenant_id`` on its stream, once at least ``expect`` of
    them are there (events go through the outbox relay: they land a moment after the
    request that caused them) or ``timeout`` passed; a short extra wait then lets a
    duplicate show."""
    deadline = time.monotonic() + timeout
    while True:
        events = await _published_now(js, subject, tenant_id)
        if len(events) >= expect or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.2)
    await asyncio.sleep(0.3)
    return await _published_now(js, subject, tenant_id)


async def _published_now(js: Any, subject: str, tenant_id: str) -> list[dict[str, Any]]:
    stream = stream_for(subject).name
    sub = await js.pull_subscribe(
        subject,
        durable=None,
        stream=stream,
        config=ConsumerConfig(deliver_policy=DeliverPolicy.ALL, inactive_threshold=5.0),
    )
    out: list[dict[str, Any]] = []
    try:
        while True:
            try:
                messages = await sub.fetch(256, timeout=0.5)
            except TimeoutError:
                break
            for message in messages:
                body = json.loads(message.data)
                if body.get("tenant_id") == tenant_id:
                    out.append(body)
            if len(messages) < 256:
                break
    finally:
        await sub.unsubscribe()
    return out
