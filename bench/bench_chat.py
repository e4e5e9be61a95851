"""Gateway overhead to the first token of a chat answer.

Starts an embedded NATS and Postgres, seeds a small biology corpus embedded with the packaged
MiniLM, runs the real retriever and re-ranker apps in this process (local models; with
``--stand-ins`` or when they cannot start, light in-process responders instead, reported in
the output), a fake Gemini whose time to first token is a fixed delay, and the gateway under
uvicorn. For each question it times POST -> the first ``token`` event the model produced, over
a real HTTP connection read with httpx-sse, and subtracts the fake's fixed delay: what is left
is the gateway's overhead (auth, rate limit, storing the question, history, memory recall
timeout, retrieval, re-ranking, prompt, the SDK call). p50/p95 at 1 and 10 concurrent chats.
The last line is one JSON object (overhead_p50_ms, overhead_p95_ms, overhead_p95_ms_10 ...).

Usage: .venv/bin/python bench/bench_chat.py [--samples 40] [--ttft-ms 300] [--stand-ins]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import httpx
import uvicorn
from fastapi import FastAPI
from faststream.nats import NatsBroker
from httpx_sse import aconnect_sse
from lectern_testing.gemini_fake import Behaviour, FakeGemini
from pydantic import SecretStr

from lectern_common.broker import QUEUE_GROUPS, request
from lectern_common.db import create_pool, migrate
from lectern_common.embeddings import LocalEmbedder
from lectern_common.errors import LecternError
from lectern_common.events import (
    Candidate,
    Confidence,
    MemoryRecallReply,
    MemoryRecallRequest,
    RankedChunk,
    RerankReply,
    RerankRequest,
    RetrieveReply,
    RetrieveRequest,
    Subjects,
)
from lectern_common.runtime import EmbeddedNats, EmbeddedPostgres
from lectern_gateway.app import create_app as create_gateway
from lectern_gateway.auth import issue_token
from lectern_gateway.chat.sse import parse_event
from lectern_gateway.config import Settings as GatewaySettings
from lectern_ingest.repository import sync_index_documents

TENANT = "bench"
DIM = 384
MODEL = "sentence-transformers/all-MiniLM-L6-v2"
ANSWER = (
    "Photosynthesis turns light energy into chemical energy in the chloroplasts [T1]. "
    "The Calvin cycle then fixes carbon dioxide into sugars [T2]."
)
TOPICS = {
    "Photosynthesis": [
        "Photosynthesis happens in the chloroplasts of plant cells, where chlorophyll absorbs "
        "mostly red and blue light.",
        "The light reactions split water, release oxygen and store energy as ATP and NADPH.",
        "The Calvin cycle fixes carbon dioxide into sugars using ATP and NADPH in the stroma.",
        "RuBisCO catalyses the first step of carbon fixation and is the most abundant enzyme.",
    ],
    "Respiration": [
        "Cellular respiration releases energy from glucose in the mitochondria.",
        "Glycolysis splits glucose into two pyruvate molecules in the cytoplasm.",
        "Oxidative phosphorylation produces most of a cell's ATP using an electron gradient.",
    ],
    "Genetics": [
        "DNA is a double helix of nucleotides paired A with T and C with G.",
        "Mitosis produces two identical daughter cells; meiosis produces four gametes.",
        "Mendel's laws describe how dominant and recessive alleles are inherited.",
    ],
}
QUESTIONS = [
    "What happens in the Calvin cycle?",
    "Where does photosynthesis take place?",
    "What does chlorophyll absorb?",
    "How do the light reactions store energy?",
    "What does RuBisCO do?",
]


async def seed(pool: Any, embedder: LocalEmbedder, copies: int) -> int:
    """A few documents of short chunks (copies of the corpus under different titles)."""
    texts: list[tuple[str, str, str]] = []
    for copy in range(copies):
        for topic, sentences in TOPICS.items():
            for sentence in sentences:
                texts.append((f"{topic} notes {copy + 1}", topic, sentence))
    vectors = await embedder.embed_documents([t[2] for t in texts])
    documents: dict[str, uuid.UUID] = {}
    for index, ((title, topic, text), vector) in enumerate(zip(texts, vectors, strict=True)):
        if title not in documents:
            documents[title] = uuid.uuid4()
            await pool.execute(
                "INSERT INTO documents (id, tenant_id, title, filename, mime_type, size_bytes, "
                "file_sha256, status, uploaded_by, subject) VALUES "
                "($1,$2,$3,'notes.md','text/markdown',1,$4,'indexed','bench','biology')",
                documents[title],
                TENANT,
                title,
                uuid.uuid4().hex,
            )
            # and ingest's own record of it, which the index's record is made from
            await pool.execute(
                "INSERT INTO ingest_documents (id, tenant_id, title, filename, mime_type, "
                "status, uploaded_by, subject) VALUES "
                "($1,$2,$3,'notes.md','text/markdown','indexed','bench','biology')",
                documents[title],
                TENANT,
                title,
            )
        await pool.execute(
            "INSERT INTO chunks (id, document_id, tenant_id, chunk_index, text, section_path, "
            "page_start, token_count, content_hash, subject, topic_tags, embedding) "
            "VALUES ($1,$2,$3,$4,$5,$6,1,$7,$8,'biology',$9,$10)",
            uuid.uuid4(),
            documents[title],
            TENANT,
            index,
            text,
            [topic],
            len(text) // 4,
            uuid.uuid4().hex,
            [topic.lower()],
            vector,
        )
    # the index's record of each document, as ingest writes it when it indexes one
    await sync_index_documents(pool, list(documents.values()))
    return len(texts)


@contextlib.asynccontextmanager
async def stand_ins(nats_url: str, pool: Any) -> AsyncIterator[str]:
    """Light retriever/re-ranker responders (full-text search; fixed high confidence)."""
    broker = NatsBroker(nats_url)

    @broker.subscriber(Subjects.RETRIEVE, queue=QUEUE_GROUPS[Subjects.RETRIEVE])
    async def on_retrieve(body: dict[str, Any]) -> dict[str, Any]:
        request = RetrieveRequest.model_validate(body)
        rows = await pool.fetch(
            "SELECT c.id, c.document_id, c.text, d.title FROM chunks c JOIN documents d "
            "ON d.id = c.document_id WHERE c.tenant_id = $1 AND c.tsv @@ "
            "to_tsquery('english', $2) LIMIT 20",
            request.tenant_id,
            " | ".join(w for w in request.query.lower().split() if w.isalpha()),
        )
        candidates = [
            Candidate(
                chunk_id=r["id"],
                document_id=r["document_id"],
                title=r["title"],
                text=r["text"],
                fused_score=1.0 / (i + 1),
            )
            for i, r in enumerate(rows)
        ]
        reply = RetrieveReply(request_id=request.request_id, candidates=candidates)
        return reply.model_dump(mode="json")

    @broker.subscriber(Subjects.RERANK, queue=QUEUE_GROUPS[Subjects.RERANK])
    async def on_rerank(body: dict[str, Any]) -> dict[str, Any]:
        request = RerankRequest.model_validate(body)
        chunks = [
            RankedChunk(candidate=c, semantic=0.8, score=c.fused_score)
            for c in request.candidates[: request.top_k]
        ]
        confidence = Confidence(
            score=0.8, band="high", retrieval=0.8, source_quality=0.8, grounding=0.7
        )
        reply = RerankReply(request_id=request.request_id, chunks=chunks, confidence=confidence)
        return reply.model_dump(mode="json")

    await broker.start()
    try:
        yield "stand-ins (full-text retriever, fixed-confidence re-ranker)"
    finally:
        await broker.stop()


@contextlib.asynccontextmanager
async def real_services(
    nats_url: str, database_url: str, embedder: LocalEmbedder
) -> AsyncIterator[str]:
    """The real retriever and re-ranker apps with the packaged local models."""
    from lectern_reranker.app import create_app as create_reranker
    from lectern_reranker.config import Settings as RerankerSettings
    from lectern_retriever.app import create_app as create_retriever
    from lectern_retriever.config import Settings as RetrieverSettings

    common: dict[str, Any] = {
        "nats_url": nats_url,
        "database_url": database_url,
        "http_port": 0,
        "log_json": False,
    }
    retriever = create_retriever(RetrieverSettings(**common), embedder=embedder)
    reranker = create_reranker(RerankerSettings(**common))
    async with (
        retriever.router.lifespan_context(retriever),
        reranker.router.lifespan_context(reranker),
    ):
        yield "real retriever + re-ranker (local MiniLM)"


SERVICE_MODULES = ("lectern_retriever", "lectern_reranker", "lectern_memory")
#: the service processes' pids while they run (their CPU a turn is measured)
SERVICE_PIDS: dict[str, int] = {}


def cpu_seconds() -> dict[str, float]:
    """CPU seconds so far of each service process, and of this one (the gateway, with the
    benchmark's own client)."""
    import psutil

    out = {"gateway+client": sum(psutil.Process().cpu_times()[:2])}
    for name, pid in SERVICE_PIDS.items():
        with contextlib.suppress(psutil.Error):
            out[name] = sum(psutil.Process(pid).cpu_times()[:2])
    return out


@contextlib.asynccontextmanager
async def service_processes(nats_url: str, database_url: str) -> AsyncIterator[str]:
    """The real retriever, re-ranker and memory services as their own processes (as
    deployed)."""
    env = {
        **os.environ,
        "LECTERN_NATS_URL": nats_url,
        "LECTERN_DATABASE_URL": database_url,
        "LECTERN_RETRIEVER_HTTP_PORT": "0",
        "LECTERN_RERANKER_HTTP_PORT": "0",
        "LECTERN_MEMORY_HTTP_PORT": "0",
        "LECTERN_LOG_LEVEL": "WARNING",
    }
    processes = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            module,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        # memory too: without it every recall would wait for a responder until its timeout
        for module in SERVICE_MODULES
    ]
    broker = NatsBroker(nats_url)
    try:
        await broker.connect()
        probe = RetrieveRequest(tenant_id=TENANT, query="photosynthesis")
        deadline = time.monotonic() + 180
        while True:
            try:
                reply = await request(broker, probe, RetrieveReply, timeout=5)
                await request(
                    broker,
                    RerankRequest(
                        tenant_id=TENANT, query="photosynthesis", candidates=reply.candidates[:3]
                    ),
                    RerankReply,
                    timeout=5,
                )
                await request(
                    broker,
                    MemoryRecallRequest(tenant_id=TENANT, user_id="probe", query="photosynthesis"),
                    MemoryRecallReply,
                    timeout=5,
                )
                break
            except LecternError:
                if time.monotonic() > deadline or any(p.returncode is not None for p in processes):
                    raise RuntimeError("service processes did not come up") from None
                await asyncio.sleep(0.5)
        for module, process in zip(SERVICE_MODULES, processes, strict=True):
            SERVICE_PIDS[module.removeprefix("lectern_")] = process.pid
        yield "real retriever + re-ranker + memory processes (local MiniLM)"
    finally:
        await broker.stop()
        for process in processes:
            process.terminate()
        for process in processes:
            await asyncio.wait_for(process.wait(), timeout=30)


@contextlib.asynccontextmanager
async def serve(app: FastAPI) -> AsyncIterator[str]:
    """uvicorn on a free port of 127.0.0.1."""
    config = uvicorn.Config(
        app, host="127.0.0.1", port=0, lifespan="on", log_config=None, access_log=False
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            await task
            raise RuntimeError("gateway did not start")
        await asyncio.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task


async def one_chat(
    client: httpx.AsyncClient, url: str, headers: dict[str, str], question: str
) -> tuple[float, dict[str, Any]]:
    """Seconds to the first model token, and the done event's timings."""
    created = await client.post(f"{url}/v1/sessions", json={"subject": "biology"}, headers=headers)
    session_id = created.json()["id"]
    started = time.perf_counter()
    first: float | None = None
    timings: dict[str, Any] = {}
    async with aconnect_sse(
        client,
        "POST",
        f"{url}/v1/sessions/{session_id}/messages",
        json={"content": question},
        headers=headers,
    ) as source:
        source.response.raise_for_status()
        async for sse in source.aiter_sse():
            event = parse_event(sse.data)
            if event.type == "token" and event.origin == "model" and first is None:
                first = time.perf_counter() - started
            elif event.type == "done":
                timings = dict(event.timings_ms)
                timings["answered_by"] = event.answered_by
            elif event.type == "error":
                raise RuntimeError(f"chat failed: {event.message}")
    if first is None:
        raise RuntimeError("no model token")
    return first, timings


def _median(values: list[float]) -> float | None:
    return round(statistics.median(values), 2) if values else None


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    index = max(0, min(len(ordered) - 1, round(q / 100 * len(ordered) + 0.5) - 1))
    return ordered[index]


async def run(args: argparse.Namespace) -> dict[str, Any]:
    """The benchmark."""
    base = Path(tempfile.mkdtemp(prefix="lectern-bench-chat-"))
    os.chmod(base, 0o755)  # noqa: S103 - the unprivileged Postgres account must traverse it
    pg = EmbeddedPostgres(base / "pg", run_as=os.environ.get("LECTERN_EMBEDDED_PG_USER"))
    nats_server = EmbeddedNats(base / "nats")
    ttft = args.ttft_ms / 1000
    try:
        pg.start()
        nats_server.start()
        await migrate(pg.dsn, embedding_model=MODEL, embedding_dim=DIM)
        settings = GatewaySettings(
            nats_url=nats_server.url,
            database_url=pg.dsn,
            http_port=0,
            log_json=False,
            log_level="WARNING",
            idle_sweep_interval_s=0,
            retrieve_timeout_s=60.0,
            retrieve_k=args.retrieve_k,
            rerank_timeout_s=60.0,
            gemini_api_key=SecretStr("bench"),
        )
        embedder = LocalEmbedder(settings)
        pool = await create_pool(pg.dsn, min_size=1, max_size=4)
        chunks = await seed(pool, embedder, copies=args.copies)
        async with contextlib.AsyncExitStack() as stack:
            fake = await stack.enter_async_context(FakeGemini())
            settings = settings.model_copy(update={"gemini_base_url": fake.base_url})
            if args.stand_ins:
                backend = await stack.enter_async_context(stand_ins(nats_server.url, pool))
            elif not args.in_process:
                backend = await stack.enter_async_context(
                    service_processes(nats_server.url, pg.dsn)
                )
            else:
                try:
                    backend = await stack.enter_async_context(
                        real_services(nats_server.url, pg.dsn, embedder)
                    )
                except Exception as exc:
                    print(f"real services unavailable ({exc!r}); using stand-ins", file=sys.stderr)
                    backend = await stack.enter_async_context(stand_ins(nats_server.url, pool))
            url = await stack.enter_async_context(serve(create_gateway(settings)))
            token = issue_token(
                secret=settings.effective_jwt_secret,
                tenant_id=TENANT,
                user_id="bench-user",
                role="student",
                plan="pro",
            )
            headers = {"Authorization": f"Bearer {token}"}
            client = await stack.enter_async_context(
                httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=50))
            )

            def script(n: int) -> None:
                fake.enqueue(
                    *(Behaviour(delay_s=ttft, text=ANSWER) for _ in range(n)), endpoint="generate"
                )

            script(3)
            for i in range(3):  # warm-up: connections, model caches
                await one_chat(client, url, headers, QUESTIONS[i])
            single: list[float] = []
            stages: list[dict[str, Any]] = []
            before = cpu_seconds()
            for i in range(args.samples):
                script(1)
                seconds, timings = await one_chat(client, url, headers, QUESTIONS[i % 5])
                single.append((seconds - ttft) * 1000)
                stages.append(timings)
            cpu_per_turn = {
                name: round((value - before.get(name, value)) / max(1, args.samples), 4)
                for name, value in cpu_seconds().items()
            }
            concurrent: list[float] = []
            for round_ in range(max(1, args.samples // 10)):
                script(10)
                results = await asyncio.gather(
                    *(
                        one_chat(client, url, headers, QUESTIONS[(round_ + j) % 5])
                        for j in range(10)
                    )
                )
                concurrent.extend((s - ttft) * 1000 for s, _ in results)
        await pool.close()
    finally:
        nats_server.stop()
        pg.stop()
        shutil.rmtree(base, ignore_errors=True)

    def stage(name: str) -> float | None:
        values = [t[name] for t in stages if name in t]
        return round(statistics.median(values), 2) if values else None

    return {
        "backend": backend,
        "chunks": chunks,
        "fake_ttft_ms": args.ttft_ms,
        "retrieve_k": args.retrieve_k,
        "samples_1": len(single),
        "samples_10": len(concurrent),
        "overhead_p50_ms": round(percentile(single, 50), 1),
        "overhead_p95_ms": round(percentile(single, 95), 1),
        "overhead_p50_ms_10": round(percentile(concurrent, 50), 1),
        "overhead_p95_ms_10": round(percentile(concurrent, 95), 1),
        "median_stage_ms": {
            **{
                n: stage(n)
                for n in (
                    "store_question_ms",
                    "retrieve_ms",
                    "visibility_ms",
                    "rerank_ms",
                    "memory_ms",
                )
            },
            "before_model_call_ms": _median(
                [t["first_token_ms"] - t["model_first_token_ms"] for t in stages]
            ),
            "model_call_minus_fake_ttft_ms": _median(
                [t["model_first_token_ms"] - args.ttft_ms for t in stages]
            ),
        },
        "answered_by": sorted({str(t.get("answered_by")) for t in stages}),
        # one chat at a time: what a turn costs each process (the re-ranker's is its reading)
        "cpu_per_turn_s": cpu_per_turn,
        "target_overhead_p95_ms": 250,
    }


def main() -> None:
    """Parse arguments, run, print the figures and the JSON line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=40, help="sequential chats (and 10x rounds)")
    parser.add_argument("--ttft-ms", type=float, default=300.0, help="fake Gemini's first token")
    parser.add_argument("--copies", type=int, default=20, help="copies of the corpus to index")
    parser.add_argument("--stand-ins", action="store_true", help="skip the real services")
    parser.add_argument("--retrieve-k", type=int, default=20, help="candidates to re-rank")
    parser.add_argument(
        "--in-process", action="store_true", help="real services in this process, not their own"
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    result = asyncio.run(run(args))
    print(f"backend: {result['backend']}, {result['chunks']} chunks")
    print(
        f"overhead to first token, 1 chat:   p50 {result['overhead_p50_ms']} ms, "
        f"p95 {result['overhead_p95_ms']} ms (target p95 < 250 ms)"
    )
    print(
        f"overhead to first token, 10 chats: p50 {result['overhead_p50_ms_10']} ms, "
        f"p95 {result['overhead_p95_ms_10']} ms"
    )
    print(f"CPU seconds a turn, one chat at a time: {result['cpu_per_turn_s']}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
