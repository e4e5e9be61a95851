"""Answer quality through the product's real path: upload -> ingest -> chat over SSE.

Every document of the question set is uploaded through ``POST /v1/documents`` into one
fresh tenant (a course library), ingested by the ingest service, and every question is
asked as a student through ``POST /v1/sessions/{id}/messages`` with the chat's default
settings, reading the Server-Sent Events as any client does. Follow-up questions are asked
in the session of the question they follow. Only public contracts are used; the stack is a
running gateway (``--url``, or the embedded stack ``lectern eval-answers`` starts).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
from httpx_sse import aconnect_sse

from lectern_common.tokens import make_token
from lectern_eval.answer_set import (
    AnswerQuestion,
    OfftopicQuestion,
    QuestionResult,
    SourceSeen,
    Summary,
    answer_lead,
    breakdown,
    conversations,
    fact_recall,
    holds_any_fact,
    on_gold,
    summarise,
)

log = logging.getLogger(__name__)

Report = Callable[[str], None]
FINAL_STATUSES = ("indexed", "failed", "duplicate")
TOKEN_TTL_S = 6 * 3600


async def chat_events(
    client: httpx.AsyncClient, session_id: str, text: str
) -> AsyncIterator[dict[str, Any]]:
    """The events of one chat turn (``POST /v1/sessions/{id}/messages``), decoded; raises
    ``RuntimeError`` when the gateway refuses the turn or the stream reports an error."""
    async with aconnect_sse(
        client, "POST", f"/v1/sessions/{session_id}/messages", json={"content": text}
    ) as source:
        if source.response.status_code != 200:
            await source.response.aread()
            raise RuntimeError(
                f"chat: HTTP {source.response.status_code} {source.response.text[:300]}"
            )
        async for sse in source.aiter_sse():
            event: dict[str, Any] = json.loads(sse.data)
            if event.get("type") == "error":
                raise RuntimeError(f"chat error {event.get('reason')}: {event.get('message')}")
            yield event


@dataclass
class AnswerEvalReport:
    """The outcome of one run: the summary, breakdowns and every question's result."""

    summary: Summary
    by_document: dict[str, dict[str, float]]
    by_kind: dict[str, dict[str, float]]
    results: list[QuestionResult]
    offtopic: list[QuestionResult]
    documents: dict[str, dict[str, Any]] = field(default_factory=dict)
    ingest_s: float = 0.0
    answer_s: float = 0.0

    def to_json(self) -> dict[str, Any]:
        """Everything, as plain JSON."""
        return {
            "summary": asdict(self.summary),
            "by_document": self.by_document,
            "by_kind": self.by_kind,
            "documents": self.documents,
            "ingest_s": round(self.ingest_s, 1),
            "answer_s": round(self.answer_s, 1),
            "results": [asdict(r) | {"citation_precision": r.citation_precision}
                        for r in self.results],
            "offtopic": [asdict(r) for r in self.offtopic],
        }  # fmt: skip


class AnswerEval:
    """Runs a question set against a gateway (see the module docstring)."""

    def __init__(
        self,
        *,
        gateway_url: str,
        secret: str,
        documents_dir: Path,
        tenant: str | None = None,
        concurrency: int = 2,
        ingest_timeout_s: float = 3600.0,
        request_timeout_s: float = 120.0,
        report: Report | None = None,
    ) -> None:
        self.url = gateway_url.rstrip("/")
        self.secret = secret
        self.documents_dir = documents_dir
        self.tenant = tenant or f"eval-answers-{uuid.uuid4().hex[:8]}"
        self.concurrency = max(1, concurrency)
        self.ingest_timeout_s = ingest_timeout_s
        self.request_timeout_s = request_timeout_s
        self.report: Report = report or log.info
        self._chunks: dict[str, dict[str, Any]] = {}

    def _token(self, user: str, role: str) -> str:
        return make_token(
            secret=self.secret, tenant=self.tenant, user=user, role=role, plan="pro",
            ttl_s=TOKEN_TTL_S,
        )  # fmt: skip

    def _client(self, token: str) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            base_url=self.url,
            headers={"Authorization": f"Bearer {token}"},
            timeout=self.request_timeout_s,
        )

    async def run(
        self, questions: Sequence[AnswerQuestion], offtopic: Sequence[OfftopicQuestion] = ()
    ) -> AnswerEvalReport:
        """Upload, wait for ingest, ask everything; the scored report."""
        documents = list(dict.fromkeys(q.document for q in questions))
        missing = [d for d in documents if not (self.documents_dir / d).is_file()]
        if missing:
            raise FileNotFoundError(
                f"not in {self.documents_dir}: {', '.join(missing)} (give --documents DIR)"
            )
        async with self._client(self._token("eval-teacher", "teacher")) as teacher:
            started = time.monotonic()
            views = await self._ingest(teacher, documents)
            ingest_s = time.monotonic() - started
            ids = {name: str(view["id"]) for name, view in views.items()}
            started = time.monotonic()
            semaphore = asyncio.Semaphore(self.concurrency)
            chains = conversations(questions)
            done = [0]
            total = len(questions) + len(offtopic)

            async def chain_job(index: int, chain: list[AnswerQuestion]) -> list[QuestionResult]:
                async with semaphore:
                    out = await self._conversation(teacher, f"student-{index}", chain, ids)
                done[0] += len(chain)
                if done[0] % 10 < len(chain):
                    self.report(f"asked {done[0]}/{total}")
                return out

            async def offtopic_job(index: int, item: OfftopicQuestion) -> QuestionResult:
                async with semaphore:
                    result = await self._offtopic(teacher, f"offtopic-student-{index}", item)
                done[0] += 1
                return result

            answered = await asyncio.gather(*(chain_job(i, c) for i, c in enumerate(chains)))
            refused = await asyncio.gather(*(offtopic_job(i, q) for i, q in enumerate(offtopic)))
            answer_s = time.monotonic() - started
        order = {q.id: i for i, q in enumerate(questions)}
        results = sorted((r for chain in answered for r in chain), key=lambda r: order[r.id])
        return report_of(
            results,
            refused,
            documents={name: _document_view(view) for name, view in views.items()},
            ingest_s=ingest_s,
            answer_s=answer_s,
        )

    # -- ingest -------------------------------------------------------------------------------

    async def _ingest(
        self, client: httpx.AsyncClient, documents: Sequence[str]
    ) -> dict[str, dict[str, Any]]:
        return await upload_and_wait(
            client, self.documents_dir, documents, tenant=self.tenant, report=self.report,
            timeout_s=self.ingest_timeout_s,
        )  # fmt: skip

    # -- asking -------------------------------------------------------------------------------

    async def _conversation(
        self,
        teacher: httpx.AsyncClient,
        user: str,
        chain: Sequence[AnswerQuestion],
        ids: dict[str, str],
    ) -> list[QuestionResult]:
        results: list[QuestionResult] = []
        async with self._client(self._token(user, "student")) as student:
            session_id = await self._session(student)
            for question in chain:
                result = QuestionResult(
                    id=question.id, document=question.document, kind=question.kind,
                    question=question.question,
                )  # fmt: skip
                try:
                    turn = await self._ask(student, session_id, question.question)
                    await self._score(teacher, question, turn, result, ids.get(question.document))
                except (httpx.HTTPError, RuntimeError) as exc:
                    result.error = f"{type(exc).__name__}: {exc}"
                    result.refused = True
                results.append(result)
        return results

    async def _offtopic(
        self, teacher: httpx.AsyncClient, user: str, item: OfftopicQuestion
    ) -> QuestionResult:
        result = QuestionResult(
            id=item.id, document=item.document or "", kind="offtopic", question=item.question
        )
        try:
            async with self._client(self._token(user, "student")) as student:
                turn = await self._ask(student, await self._session(student), item.question)
            _fill_turn(result, turn)
            result.sources = [  # what it was answered from, when it was
                {
                    "label": s.label,
                    "text": s.text,
                    "section": s.section,
                    "score": s.score,
                    "answer": s.answer,
                }
                for s in await self._seen(teacher, turn)
            ]
        except (httpx.HTTPError, RuntimeError) as exc:
            result.error = f"{type(exc).__name__}: {exc}"
        return result

    async def _seen(self, teacher: httpx.AsyncClient, turn: Turn) -> list[SourceSeen]:
        """The turn's sources with their chunks' text."""
        seen: list[SourceSeen] = []
        for source in turn.sources:
            chunk = await self._chunk(teacher, str(source["chunk_id"]))
            seen.append(
                SourceSeen(
                    label=str(source["label"]), chunk_id=str(source["chunk_id"]),
                    document_id=str(source["document_id"]), page_start=source.get("page_start"),
                    page_end=source.get("page_end"), slide=source.get("slide"),
                    text=str(chunk["text"]), section=source.get("section"),
                    score=source.get("score"), answer=source.get("answer"),
                )
            )  # fmt: skip
        return seen

    async def _session(self, student: httpx.AsyncClient) -> str:
        response = await student.post("/v1/sessions", json={"mode": "chat"})
        if response.status_code != 201:
            raise RuntimeError(f"POST /v1/sessions: HTTP {response.status_code} {response.text}")
        return str(response.json()["id"])

    async def _ask(self, student: httpx.AsyncClient, session_id: str, text: str) -> Turn:
        turn = Turn()
        started = time.monotonic()
        async for event in chat_events(student, session_id, text):
            kind = event.get("type")
            if kind == "sources":
                turn.sources = list(event["sources"])
            elif kind == "token":
                if turn.first_token_ms is None:
                    turn.first_token_ms = (time.monotonic() - started) * 1000
                turn.answer += event["text"]
            elif kind == "done":
                turn.done = event
        turn.total_ms = (time.monotonic() - started) * 1000
        if turn.done is None:
            raise RuntimeError("the stream ended without a done event")
        return turn

    async def _chunk(self, teacher: httpx.AsyncClient, chunk_id: str) -> dict[str, Any]:
        if chunk_id not in self._chunks:
            response = await teacher.get(f"/v1/chunks/{chunk_id}")
            response.raise_for_status()
            self._chunks[chunk_id] = response.json()
        return self._chunks[chunk_id]

    async def _score(
        self,
        teacher: httpx.AsyncClient,
        question: AnswerQuestion,
        turn: Turn,
        result: QuestionResult,
        gold_document_id: str | None,
    ) -> None:
        _fill_turn(result, turn)
        seen = await self._seen(teacher, turn)
        result.context_hit = any(on_gold(s, question, gold_document_id) for s in seen)
        result.sources = [
            {"label": s.label, "document": s.document_id == gold_document_id,
             "pages": [s.page_start, s.page_end], "gold": on_gold(s, question, gold_document_id),
             "text": s.text, "section": s.section, "score": s.score, "answer": s.answer}
            for s in seen
        ]  # fmt: skip
        if result.refused:
            return
        result.fact_recall = fact_recall(turn.answer, question.facts)
        result.lead_fact_recall = fact_recall(answer_lead(turn.answer), question.facts)
        cited = {
            str(c["chunk_id"])
            for c in (turn.done or {}).get("citations", [])
            if c.get("kind") == "textbook" and c.get("chunk_id")
        }
        by_chunk = {s.chunk_id: s for s in seen}
        result.cited = len(cited)
        result.cited_precise = sum(
            1 for c in cited if c in by_chunk and holds_any_fact(by_chunk[c].text, question.facts)
        )
        result.cited_gold = any(
            c in by_chunk and on_gold(by_chunk[c], question, gold_document_id) for c in cited
        )


def _document_view(view: dict[str, Any]) -> dict[str, Any]:
    keys = ("id", "status", "title", "page_count", "chunk_count", "error")
    return {key: view.get(key) for key in keys}


async def upload_and_wait(
    client: httpx.AsyncClient,
    documents_dir: Path,
    documents: Sequence[str],
    *,
    tenant: str,
    report: Report,
    timeout_s: float,
) -> dict[str, dict[str, Any]]:
    """Upload each document (a path under ``documents_dir``) through ``POST /v1/documents``
    and wait until every one is indexed, failed or a duplicate; their views by name."""
    ids: dict[str, str] = {}
    for name in documents:
        path = documents_dir / name
        with path.open("rb") as handle:
            response = await client.post(
                "/v1/documents",
                files={"file": (path.name, handle, "application/octet-stream")},
            )
        if response.status_code not in (200, 201, 202):
            raise RuntimeError(f"upload of {name}: HTTP {response.status_code} {response.text}")
        ids[name] = str(response.json()["id"])
    report(f"uploaded {len(ids)} documents to tenant {tenant}; waiting for ingest")
    views: dict[str, dict[str, Any]] = {}
    deadline = time.monotonic() + timeout_s
    while True:
        for name, document_id in ids.items():
            if views.get(name, {}).get("status") in FINAL_STATUSES:
                continue
            response = await client.get(f"/v1/documents/{document_id}")
            response.raise_for_status()
            views[name] = response.json()
            if views[name]["status"] in FINAL_STATUSES:
                view = views[name]
                report(
                    f"  {name}: {view['status']}, {view.get('chunk_count')} chunks"
                    + (f" ({(view.get('error') or {}).get('message')})"
                       if view["status"] == "failed" else "")
                )  # fmt: skip
        if all(v.get("status") in FINAL_STATUSES for v in views.values()) and len(views) == len(
            ids
        ):
            return views
        if time.monotonic() > deadline:
            waiting = [n for n, v in views.items() if v.get("status") not in FINAL_STATUSES]
            raise TimeoutError(f"not indexed after {timeout_s:.0f} s: {waiting}")
        await asyncio.sleep(0.5)


@dataclass
class Turn:
    """What the SSE stream of one question carried."""

    sources: list[dict[str, Any]] = field(default_factory=list)
    answer: str = ""
    done: dict[str, Any] | None = None
    first_token_ms: float | None = None
    total_ms: float | None = None


def _fill_turn(result: QuestionResult, turn: Turn) -> None:
    done = turn.done or {}
    usage = done.get("usage") or {}
    result.answer = turn.answer
    result.band = done.get("band")
    result.confidence = done.get("confidence")
    result.answered_by = done.get("answered_by")
    result.refused = bool(done.get("knowledge_gap")) or usage.get("outcome") == "no_support"
    result.first_token_ms = None if turn.first_token_ms is None else round(turn.first_token_ms, 1)
    result.total_ms = None if turn.total_ms is None else round(turn.total_ms, 1)


def _rows(title: str, table: dict[str, dict[str, float]]) -> list[str]:
    lines = [f"{title:44} {'n':>3} {'context':>8} {'facts':>6} {'cited':>6} {'refused':>8}"]
    for name, row in table.items():
        lines.append(
            f"{name[:44]:44} {int(row['n']):3d} {row['context_recall']:8.2f} "
            f"{row['fact_recall']:6.2f} {row.get('cited_gold', 0.0):6.2f} {row['refused']:8.2f}"
        )
    return lines


def report_of(
    results: Sequence[QuestionResult],
    offtopic: Sequence[QuestionResult],
    *,
    documents: dict[str, dict[str, Any]] | None = None,
    ingest_s: float = 0.0,
    answer_s: float = 0.0,
) -> AnswerEvalReport:
    """The scored report of a set of results (a whole run, or one split of it)."""
    return AnswerEvalReport(
        summary=summarise(results, offtopic),
        by_document=breakdown(results, by="document"),
        by_kind=breakdown(results, by="kind"),
        results=list(results),
        offtopic=list(offtopic),
        documents=dict(documents or {}),
        ingest_s=ingest_s,
        answer_s=answer_s,
    )


def split_reports(
    report: AnswerEvalReport, splits: Sequence[tuple[str, set[str]]]
) -> dict[str, AnswerEvalReport]:
    """``report`` cut into the splits given as (name, ids of its questions)."""
    out = {}
    for name, ids in splits:
        docs = {r.document for r in report.results if r.id in ids}
        out[name] = report_of(
            [r for r in report.results if r.id in ids],
            [r for r in report.offtopic if r.id in ids],
            documents={k: v for k, v in report.documents.items() if k in docs},
            ingest_s=report.ingest_s,
            answer_s=report.answer_s,
        )
    return out


_SIDE_BY_SIDE = (
    ("gold-page recall of the context", "context_recall"),
    ("key-fact recall of the answers", "fact_recall"),
    ("  ... of the answer's lead", "lead_fact_recall"),
    ("a citation on the gold page", "citation_on_gold"),
    ("citation precision", "citation_precision"),
    ("answerable refused", "answerable_refused"),
    ("off-topic refused", "offtopic_refused"),
    ("  of which near misses refused", "near_miss_refused"),
)


def format_side_by_side(reports: dict[str, AnswerEvalReport]) -> str:
    """The splits' headline figures in columns (dev beside test), then by kind."""
    names = list(reports)
    lines = [
        f"{'':34}" + "".join(f"{n:>10}" for n in names),
        f"{'questions (off-topic)':34}"
        + "".join(
            f"{f'{r.summary.questions} ({r.summary.offtopic})':>10}" for r in reports.values()
        ),
        f"{'documents':34}" + "".join(f"{len(r.by_document):>10}" for r in reports.values()),
    ]
    for label, key in _SIDE_BY_SIDE:
        lines.append(
            f"{label:34}" + "".join(f"{getattr(r.summary, key):>10.3f}" for r in reports.values())
        )
    kinds = sorted({k for r in reports.values() for k in r.by_kind})
    lines += ["", "key-fact recall by kind (n)"]
    for kind in kinds:
        cells = []
        for r in reports.values():
            row = r.by_kind.get(kind)
            cells.append(f"{row['fact_recall']:.2f} ({int(row['n'])})" if row else "-")
        lines.append(f"  {kind:32}" + "".join(f"{c:>10}" for c in cells))
    return "\n".join(lines)


def format_report(report: AnswerEvalReport) -> str:
    """A plain-text report: overall figures, per document and per kind, and the misses."""
    s = report.summary
    lines = [
        f"questions {s.questions}, off-topic {s.offtopic}, errors {s.errors}; "
        f"ingest {report.ingest_s:.0f} s, answering {report.answer_s:.0f} s",
        f"gold-page recall of the context  {s.context_recall:.3f}",
        f"key-fact recall of the answers   {s.fact_recall:.3f}",
        f"... of the answer's lead         {s.lead_fact_recall:.3f}",
        f"citation precision               {s.citation_precision:.3f}",
        f"a citation on the gold page      {s.citation_on_gold:.3f}",
        f"answerable refused               {s.answerable_refused:.3f}",
        f"off-topic refused                {s.offtopic_refused:.3f}"
        + (f" (near misses {s.near_miss_refused:.3f} of {s.near_miss})" if s.near_miss else ""),
        f"bands (answerable) {json.dumps(s.bands)}; (off-topic) {json.dumps(s.offtopic_bands)}",
        "",
        *_rows("document", report.by_document),
        "",
        *_rows("kind", report.by_kind),
    ]
    misses = [r for r in report.results if r.fact_recall < 1.0 or not r.context_hit]
    if misses:
        lines += ["", "misses (id, context hit, fact recall, band: question):"]
        lines += [
            f"  {r.id}: {'ctx' if r.context_hit else '---'} {r.fact_recall:.2f} {r.band}: "
            f"{r.question}" + (f" [{r.error}]" if r.error else "")
            for r in misses
        ]
    answered_off = [r for r in report.offtopic if not r.refused]
    if answered_off:
        lines += ["", "off-topic questions answered:"]
        lines += [f"  {r.id} ({r.band}): {r.question}" for r in answered_off]
    return "\n".join(lines)
