"""``lectern mcp``: a Model Context Protocol server (the official ``mcp`` SDK) over the gateway.

It lets an AI assistant search a course's material, ask the tutor, read the syllabus and take
quizzes with the caller's token and nothing more: every tool is one or two calls to the
gateway's public HTTP API, so tenancy, roles, classes and rate limits stay the gateway's. A
gateway problem (problem+json) becomes an MCP tool error with its title and detail.
"""

from __future__ import annotations

import argparse
import json
import sys
import uuid
from dataclasses import dataclass, field
from typing import Any, Literal

from mcp.server import MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError, ToolError
from pydantic import BaseModel, Field

from lectern_cli.ask_cmd import add_connection, credentials
from lectern_client import AsyncLecternClient, ConnectionFailed, LecternError
from lectern_client.events import RestartEvent, UnknownEvent

INSTRUCTIONS = (
    "Lectern is a course's tutor. Use `search` to find passages of the course material, "
    "`ask` for a cited answer grounded in it (reuse its session_id for follow-ups), "
    "`syllabus` for what the material covers, `draw_quiz` then `check_answer` to practise. "
    "Cite the material as the answers do ([T1] ...); read a cited passage whole at its "
    "`resource` URI (lectern://chunks/{chunk_id})."
)
NOT_COVERED = "The material does not cover this."


class GatewayError(ToolError):
    """The gateway refused a request (a problem+json answer) or could not be reached; raised
    by every tool, so MCP returns it as a tool error with this message."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


def _refused(error: LecternError) -> GatewayError:
    """The client's typed error as the tool error the assistant reads."""
    if isinstance(error, ConnectionFailed):
        return GatewayError(f"the gateway could not be reached: {error.detail}")
    message = f"{error.title}: {error.detail}" if error.detail else error.title
    return GatewayError(f"{message} (HTTP {error.status})", status=error.status)


@dataclass(frozen=True)
class Gateway:
    """The gateway's URL and the caller's token, sent with every request (through the
    Python client: typed problem+json errors, 429/503 retried after ``Retry-After``, and an
    answer stream that resumes after a dropped connection)."""

    url: str
    token: str = field(repr=False)
    timeout: float = 60.0

    def client(self) -> AsyncLecternClient:
        """A client for one tool call (an answer streams as long as it takes)."""
        return AsyncLecternClient(self.url, self.token, timeout=self.timeout)

    async def call(
        self,
        method: str,
        path: str,
        *,
        body: dict[str, Any] | None = None,
        params: dict[str, str] | None = None,
    ) -> Any:
        """The JSON of a successful answer; a :class:`GatewayError` otherwise."""
        try:
            async with self.client() as client:
                return await client.request(method, path, json=body, params=params)
        except LecternError as exc:
            raise _refused(exc) from exc


# --- what the tools return (each is also the tool's output schema) ----------------------------


class SearchHit(BaseModel):
    """A passage of the material that matches the query."""

    chunk_id: str
    document_id: str
    title: str
    section: str | None
    pages: str | None
    score: float
    text: str
    resource: str = Field(description="read the whole passage at this URI")


class SearchResult(BaseModel):
    """Passages best first."""

    query: str
    hits: list[SearchHit]


class AnswerCitation(BaseModel):
    """A source the answer cites: [T#] a passage of the material, [W#] a web page."""

    label: str
    kind: Literal["textbook", "web"]
    title: str | None
    pages: str | None = None
    section: str | None = None
    chunk_id: str | None = None
    document_id: str | None = None
    url: str | None = None
    quote: str | None = Field(default=None, description="the cited sentence of the answer")
    resource: str | None = None


class Answer(BaseModel):
    """The tutor's answer with its citations and confidence."""

    session_id: str = Field(description="pass it back to `ask` for a follow-up")
    message_id: str
    answer: str
    covered: bool = Field(description="false: the material does not cover the question")
    note: str | None = None
    band: str = Field(description="confidence band: high, medium, low or gap")
    confidence: float
    answered_by: str
    citations: list[AnswerCitation]
    check_question: str | None = Field(
        default=None, description="tutor mode: the check question the answer ends with"
    )


class Syllabus(BaseModel):
    """The material as modules, documents and sections in reading order."""

    modules: list[dict[str, Any]]


class QuizQuestion(BaseModel):
    """A question as a student sees it (never its answer)."""

    id: str
    kind: str
    prompt: str
    options: list[str]
    document_title: str
    pages: list[int]
    section: str | None
    topic: str


class Quiz(BaseModel):
    """A quiz drawn from the material."""

    quiz_id: str
    title: str
    questions: list[QuizQuestion]


class Passage(BaseModel):
    """The passage an answer is checked against."""

    chunk_id: str
    document_title: str
    section: str | None
    pages: str | None
    text: str
    resource: str


class Verdict(BaseModel):
    """One question checked."""

    question_id: str
    correct: bool
    given: str | None
    answer: str
    feedback: str
    explanation: str
    passage: Passage | None


class CheckedAttempt(BaseModel):
    """An attempt at a quiz, checked."""

    attempt_id: str
    quiz_id: str
    correct: int
    total: int
    results: list[Verdict]


# --- plain functions: wire JSON to the models above -------------------------------------------


def pages_text(start: int | None, end: int | None) -> str | None:
    """``p. 3`` or ``pp. 3-5`` (None without a page)."""
    if start is None:
        return None
    return f"p. {start}" if end in (None, start) else f"pp. {start}-{end}"


def chunk_uri(chunk_id: Any) -> str:
    """The MCP resource URI of a chunk."""
    return f"lectern://chunks/{chunk_id}"


def search_hits(body: dict[str, Any]) -> list[SearchHit]:
    """The candidates of a ``POST /v1/search`` answer as hits."""
    return [
        SearchHit(
            chunk_id=str(c["chunk_id"]),
            document_id=str(c["document_id"]),
            title=c.get("title") or "",
            section=c.get("section_path") or None,
            pages=pages_text(c.get("page_start"), c.get("page_end")),
            score=float(c.get("fused_score") or 0.0),
            text=c["text"],
            resource=chunk_uri(c["chunk_id"]),
        )
        for c in body.get("candidates", [])
    ]


def answer_from_events(session_id: str, events: list[dict[str, Any]]) -> Answer:
    """An answer from the events of its stream (``sources`` ... ``done``)."""
    errors = [e for e in events if e.get("type") == "error"]
    if errors:
        raise GatewayError(f"{errors[0]['message']} ({errors[0]['reason']})")
    done = next((e for e in events if e.get("type") == "done"), None)
    if done is None:
        raise GatewayError("the answer stream ended before its `done` event")
    sources = {s["label"]: s for e in events if e.get("type") == "sources" for s in e["sources"]}
    citations: dict[str, AnswerCitation] = {}
    for cited in done.get("citations", []):
        label = cited["label"]
        if label in citations:
            continue
        source = sources.get(label, {})
        chunk_id = cited.get("chunk_id") or source.get("chunk_id")
        citations[label] = AnswerCitation(
            label=label,
            kind=cited.get("kind", "textbook"),
            title=source.get("title") or cited.get("title"),
            pages=pages_text(source.get("page_start"), source.get("page_end")),
            section=source.get("section"),
            chunk_id=str(chunk_id) if chunk_id else None,
            document_id=str(cited.get("document_id") or source.get("document_id") or "") or None,
            url=cited.get("url"),
            quote=cited.get("text"),
            resource=chunk_uri(chunk_id) if chunk_id else None,
        )
    covered = not (done.get("knowledge_gap") or done.get("band") == "gap")
    asked = [e for e in events if e.get("type") == "check" and e.get("phase") == "asked"]
    return Answer(
        session_id=session_id,
        message_id=str(done["message_id"]),
        answer="".join(e["text"] for e in events if e.get("type") == "token"),
        covered=covered,
        note=None if covered else NOT_COVERED,
        band=str(done["band"]),
        confidence=float(done["confidence"]),
        answered_by=str(done["answered_by"]),
        citations=list(citations.values()),
        check_question=asked[-1]["question"] if asked else None,
    )


def quiz_for_student(body: dict[str, Any]) -> Quiz:
    """A quiz's questions without their answers or explanations (staff get them from the
    gateway; an assistant helping a student must not)."""
    return Quiz(
        quiz_id=str(body["id"]),
        title=body["title"],
        questions=[
            QuizQuestion(
                id=q["id"],
                kind=q["kind"],
                prompt=q["prompt"],
                options=q["options"],
                document_title=q.get("document_title") or "",
                pages=q.get("pages") or [],
                section=q.get("section"),
                topic=q.get("topic") or "",
            )
            for q in body["questions"]
        ],
    )


def passage_from_chunk(chunk: dict[str, Any]) -> Passage:
    """A ``GET /v1/chunks/{id}`` answer as a passage."""
    return Passage(
        chunk_id=str(chunk["id"]),
        document_title=chunk["document_title"],
        section=chunk.get("section"),
        pages=pages_text(chunk.get("page_start"), chunk.get("page_end")),
        text=chunk["text"],
        resource=chunk_uri(chunk["id"]),
    )


def chunk_text(chunk: dict[str, Any]) -> str:
    """A chunk as the text of its resource: where it comes from, then the passage."""
    where = [p for p in (chunk.get("section"), pages_text(chunk.get("page_start"),
             chunk.get("page_end"))) if p]  # fmt: skip
    heading = chunk["document_title"] + (f" ({', '.join(where)})" if where else "")
    return f"{heading}\n\n{chunk['text']}"


def _resource_error(error: GatewayError, uri: str) -> ResourceError:
    if error.status in (400, 404, 422):
        return ResourceNotFoundError(f"{uri}: {error}")
    return ResourceError(f"{uri}: {error}")


def _tool_id(value: str, what: str) -> str:
    # ids go into the gateway's paths: a non-id never reaches it
    try:
        return str(uuid.UUID(value))
    except ValueError:
        raise ToolError(f"{what} {value!r} is not a Lectern id") from None


def _uuid(value: str, uri: str) -> str:
    try:
        return str(uuid.UUID(value))
    except ValueError:
        raise ResourceNotFoundError(f"{uri}: not a Lectern id") from None


# --- the server ----------------------------------------------------------------------------------


def build_server(gateway: Gateway) -> MCPServer[Any]:
    """The MCP server whose tools and resources call ``gateway``."""
    server: MCPServer[Any] = MCPServer(
        "lectern", instructions=INSTRUCTIONS, log_level="WARNING", version="0.1.0"
    )
    _add_material_tools(server, gateway)
    _add_quiz_tools(server, gateway)
    _add_resources(server, gateway)
    return server


def _add_material_tools(server: MCPServer[Any], gateway: Gateway) -> None:
    """The tools that read the material: ``search``, ``ask`` and ``syllabus``."""

    @server.tool()
    async def search(
        query: str,
        k: int = 8,
        subject: str | None = None,
        module: str | None = None,
        class_id: str | None = None,
    ) -> SearchResult:
        """Search the course material (hybrid dense + keyword search); passages best first,
        each with its document, section, pages and a resource URI for the whole passage."""
        filters = {"subject": subject, "module_tag": module, "class_id": class_id}
        body = {
            "query": query,
            "k": max(1, min(k, 50)),
            "filters": {key: value for key, value in filters.items() if value is not None},
        }
        found = await gateway.call("POST", "/v1/search", body=body)
        return SearchResult(query=query, hits=search_hits(found))

    @server.tool()
    async def ask(
        question: str,
        session_id: str | None = None,
        mode: Literal["chat", "tutor"] = "chat",
        subject: str | None = None,
    ) -> Answer:
        """Ask the tutor: an answer grounded in the course material with its citations
        ([T1] ...: document title, pages, chunk id) and confidence band, or a note that the
        material does not cover the question. Pass the returned session_id for follow-ups."""
        if session_id is not None:
            session_id = _tool_id(session_id, "session_id")
        events: list[dict[str, Any]] = []
        try:
            async with gateway.client() as client:
                if session_id is None:
                    created = await client.create_session(mode=mode, subject=subject)
                    session_id = str(created.id)
                async for event in client.ask(session_id, question):
                    if isinstance(event, RestartEvent):  # answered again from its start
                        events.clear()
                    elif isinstance(event, UnknownEvent):
                        events.append({"type": event.type, **event.data})
                    else:
                        events.append(event.model_dump(mode="json"))
        except LecternError as exc:
            raise _refused(exc) from exc
        return answer_from_events(session_id, events)

    @server.tool()
    async def syllabus(subject: str | None = None, document_id: str | None = None) -> Syllabus:
        """What the course material covers: modules, documents and sections in reading
        order, with pages, topics and each section's first chunk id."""
        params = {k: v for k, v in (("subject", subject), ("document_id", document_id)) if v}
        body = await gateway.call("GET", "/v1/syllabus", params=params)
        return Syllabus(modules=body.get("modules", []))


def _add_quiz_tools(server: MCPServer[Any], gateway: Gateway) -> None:
    """The quiz tools: ``draw_quiz`` and ``check_answer``."""

    @server.tool()
    async def draw_quiz(
        subject: str | None = None,
        document_ids: list[str] | None = None,
        section: list[str] | None = None,
        num_questions: int = 5,
        difficulty: Literal["easy", "medium", "hard"] = "medium",
        kinds: list[Literal["multiple_choice", "short_answer", "true_false"]] | None = None,
    ) -> Quiz:
        """Draw a quiz from the course material (a section path as `syllabus` lists it narrows
        it to that section). Returns the questions without their answers."""
        request: dict[str, Any] = {
            "subject": subject, "document_ids": document_ids or [], "section": section or [],
            "num_questions": num_questions, "difficulty": difficulty,
        }  # fmt: skip
        if kinds:
            request["kinds"] = kinds
        return quiz_for_student(await gateway.call("POST", "/v1/quizzes", body=request))

    @server.tool()
    async def check_answer(quiz_id: str, answers: dict[str, str]) -> CheckedAttempt:
        """Check answers to a quiz drawn with `draw_quiz`: `answers` maps question ids to the
        answer (an option's text, "true"/"false", or a typed answer). Each call is one
        recorded attempt in which unanswered questions count as wrong, so send all the
        quiz's answers together. Returns each verdict with the passage it is checked
        against."""
        result = await gateway.call(
            "POST",
            f"/v1/quizzes/{_tool_id(quiz_id, 'quiz_id')}/attempts",
            body={"answers": answers},
        )
        passages: dict[str, Passage] = {}
        for item in result["results"]:
            for chunk_id in item.get("chunk_ids", [])[:1]:
                if chunk_id not in passages:
                    chunk = await gateway.call("GET", f"/v1/chunks/{chunk_id}")
                    passages[chunk_id] = passage_from_chunk(chunk)
        verdicts = [
            Verdict(
                question_id=item["question_id"],
                correct=item["correct"],
                given=item.get("given"),
                answer=item["answer"],
                feedback=item["feedback"],
                explanation=item.get("explanation") or "",
                passage=next((passages[c] for c in item.get("chunk_ids", [])[:1]), None),
            )
            for item in result["results"]
        ]
        return CheckedAttempt(
            attempt_id=str(result["id"]), quiz_id=str(result["quiz_id"]),
            correct=result["correct"], total=result["total"], results=verdicts,
        )  # fmt: skip


def _add_resources(server: MCPServer[Any], gateway: Gateway) -> None:
    """The resources: a whole chunk, and a document's metadata and sections."""

    @server.resource(
        "lectern://chunks/{chunk_id}",
        name="chunk",
        description="A passage of the course material (a cited chunk), whole, with its "
        "document, section and pages.",
        mime_type="text/plain",
    )
    async def chunk(chunk_id: str) -> str:
        uri = chunk_uri(chunk_id)
        try:
            found = await gateway.call("GET", f"/v1/chunks/{_uuid(chunk_id, uri)}")
        except GatewayError as exc:
            raise _resource_error(exc, uri) from None
        return chunk_text(found)

    @server.resource(
        "lectern://documents/{document_id}",
        name="document",
        description="A document of the course material: its metadata (title, subject, pages, "
        "status) and its sections with pages and first chunk ids (the gateway serves no "
        "document text apart from its chunks).",
        mime_type="application/json",
    )
    async def document(document_id: str) -> str:
        uri = f"lectern://documents/{document_id}"
        wanted = _uuid(document_id, uri)
        try:
            found = await gateway.call("GET", f"/v1/documents/{wanted}")
            outline = await gateway.call("GET", "/v1/syllabus", params={"document_id": wanted})
        except GatewayError as exc:
            raise _resource_error(exc, uri) from None
        sections = [
            s
            for module in outline.get("modules", [])
            for d in module.get("documents", [])
            if str(d.get("id")) == wanted
            for s in d.get("sections", [])
        ]
        return json.dumps({"document": found, "sections": sections}, indent=2)


# --- the command ---------------------------------------------------------------------------------


def register(subparsers: Any) -> None:
    """Add ``mcp``."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "mcp",
        help="serve the course material to an AI assistant over MCP (stdio or HTTP)",
        description=(
            "Run a Model Context Protocol server whose tools (search, ask, syllabus, "
            "draw_quiz, check_answer) and resources (lectern://chunks/{id}, "
            "lectern://documents/{id}) call the gateway with this token. Over stdio by "
            "default; --http serves streamable HTTP at http://HOST:PORT/mcp."
        ),
    )
    add_connection(parser)
    parser.add_argument("--http", action="store_true", help="serve streamable HTTP, not stdio")
    parser.add_argument("--host", default="127.0.0.1", help="--http bind address (127.0.0.1)")
    parser.add_argument("--port", type=int, default=8765, help="--http port (8765)")
    parser.add_argument(
        "--timeout", type=float, default=60.0, help="seconds to connect or send (60)"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Entry of ``lectern mcp``."""
    found = credentials(args, "mcp")
    if found is None:
        return 1
    url, token = found
    gateway = Gateway(url=url.rstrip("/"), token=token, timeout=args.timeout)
    server = build_server(gateway)
    if args.http:
        print(
            f"lectern mcp: serving http://{args.host}:{args.port}/mcp for {gateway.url}",
            file=sys.stderr,
        )
        server.run("streamable-http", host=args.host, port=args.port)
    else:
        server.run("stdio")
    return 0
