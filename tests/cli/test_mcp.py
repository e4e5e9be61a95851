"""`lectern mcp` through the MCP SDK's own client, against a real gateway (offline answerer,
retriever and re-ranker stand-ins on the real NATS, real Postgres): the server is the real
command, spawned over stdio and over streamable HTTP, and it reaches the material only as
the token's holder could."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from lectern_testing.chat import STUDY_MATERIAL, Gateway, offline_gateway, seed_document
from mcp import Client, MCPError, StdioServerParameters
from mcp.types import INVALID_PARAMS, CallToolResult, TextResourceContents

from lectern_cli.mcp_cmd import NOT_COVERED

pytestmark = pytest.mark.integration

LECTERN = str(Path(sys.executable).parent / "lectern")
TOOLS = {"search", "ask", "syllabus", "draw_quiz", "check_answer"}


@pytest.fixture(scope="module")
async def gateway(nats_url: str, database_url: str, db_pool: Any) -> AsyncIterator[Gateway]:
    async with offline_gateway(nats_url, database_url, db_pool) as running:
        yield running


def _bearer(gateway: Gateway, tenant_id: str, user: str, **claims: Any) -> str:
    return gateway.token(tenant_id, user, **claims)["Authorization"].split()[1]


def _stdio(gateway: Gateway, token: str) -> Client:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LECTERN_")}
    params = StdioServerParameters(
        command=LECTERN, args=["mcp", "--url", gateway.url, "--token", token], env=env
    )
    return Client(params, read_timeout_seconds=120)


def _structured(result: CallToolResult) -> dict[str, Any]:
    assert not result.is_error, result.content
    content: dict[str, Any] | None = result.structured_content
    assert content is not None
    return content


def _error_text(result: CallToolResult) -> str:
    assert result.is_error
    return " ".join(getattr(part, "text", "") for part in result.content)


async def _read(client: Client, uri: str) -> str:
    read = await client.read_resource(uri)
    (content,) = read.contents
    assert isinstance(content, TextResourceContents)
    return content.text


async def test_a_student_uses_the_material_over_stdio(
    gateway: Gateway, db_pool: Any, tenant_id: str
) -> None:
    seeded = await seed_document(
        db_pool, tenant_id=tenant_id, title="Cells and plants", chunks=STUDY_MATERIAL
    )
    seeded_ids = {str(c) for c in seeded.chunk_ids}
    student = _bearer(gateway, tenant_id, "sam")
    async with _stdio(gateway, student) as client:
        listed = await client.list_tools()
        assert {t.name for t in listed.tools} == TOOLS
        templates = await client.list_resource_templates()
        assert {t.uri_template for t in templates.resource_templates} == {
            "lectern://chunks/{chunk_id}",
            "lectern://documents/{document_id}",
        }

        found = _structured(await client.call_tool("search", {"query": "mitosis cell division"}))
        hits = found["hits"]
        assert hits and {h["chunk_id"] for h in hits} <= seeded_ids
        assert hits[0]["title"] == "Cells and plants" and "Mitosis" in hits[0]["text"]

        answer = _structured(await client.call_tool("ask", {"question": "What is mitosis?"}))
        assert answer["covered"] and answer["band"] != "gap" and answer["note"] is None
        assert "[T1]" in answer["answer"] and answer["citations"]
        cited = answer["citations"][0]
        assert cited["label"] == "T1" and cited["title"] == "Cells and plants"
        assert cited["chunk_id"] in seeded_ids and cited["pages"].startswith("p. ")
        passage = await _read(client, cited["resource"])
        index = [str(c) for c in seeded.chunk_ids].index(cited["chunk_id"])
        assert passage.startswith(f"Cells and plants ({cited['section']}, {cited['pages']})")
        assert passage.endswith(STUDY_MATERIAL[index][0])
        # a follow-up in the same session
        again = _structured(
            await client.call_tool(
                "ask",
                {"question": "What does meiosis produce?", "session_id": answer["session_id"]},
            )
        )
        assert again["session_id"] == answer["session_id"] and again["covered"]

        outline = _structured(await client.call_tool("syllabus", {}))
        titles = [d["title"] for m in outline["modules"] for d in m["documents"]]
        assert titles == ["Cells and plants"]
        document = json.loads(await _read(client, f"lectern://documents/{seeded.document_id}"))
        assert document["document"]["title"] == "Cells and plants" and document["sections"]

        quiz = _structured(
            await client.call_tool("draw_quiz", {"num_questions": 2, "kinds": ["short_answer"]})
        )
        assert len(quiz["questions"]) == 2
        assert all("answer" not in q and "explanation" not in q for q in quiz["questions"])
        # the right answers, as a teacher of the tenant sees them through the API
        async with httpx.AsyncClient(timeout=30) as http:
            staff = await http.get(
                f"{gateway.url}/v1/quizzes/{quiz['quiz_id']}",
                headers=gateway.token(tenant_id, "ms-lee", role="teacher"),
            )
        right = {q["id"]: q["answer"] for q in staff.json()["questions"]}
        first, second = (q["id"] for q in quiz["questions"])
        checked = _structured(
            await client.call_tool(
                "check_answer",
                {"quiz_id": quiz["quiz_id"], "answers": {first: right[first], second: "banana"}},
            )
        )
        assert (checked["correct"], checked["total"]) == (1, 2)
        verdicts = {v["question_id"]: v for v in checked["results"]}
        assert verdicts[first]["correct"] and not verdicts[second]["correct"]
        for verdict in verdicts.values():
            assert verdict["passage"]["chunk_id"] in seeded_ids
            assert verdict["passage"]["text"] in {t for t, _, _ in STUDY_MATERIAL}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
async def http_server(gateway: Gateway, tenant_id: str) -> AsyncIterator[str]:
    """`lectern mcp --http`, given a student token of another tenant than ``tenant_id`` and the
    gateway's URL through the environment; yields its MCP URL."""
    other = _bearer(gateway, f"{tenant_id}-other", "eve")
    env = {k: v for k, v in os.environ.items() if not k.startswith("LECTERN_")}
    env.update(LECTERN_GATEWAY_URL=gateway.url, LECTERN_TOKEN=other)
    port = _free_port()
    process = await asyncio.create_subprocess_exec(
        LECTERN, "mcp", "--http", "--port", str(port),
        env=env, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        async with httpx.AsyncClient(timeout=5) as http:
            for _ in range(300):
                assert process.returncode is None, "lectern mcp --http exited"
                try:
                    await http.get(url)
                    break
                except httpx.TransportError:
                    await asyncio.sleep(0.1)
            else:
                pytest.fail("lectern mcp --http did not start listening")
        yield url
    finally:
        process.terminate()
        await asyncio.wait_for(process.wait(), 10)


async def test_another_tenants_student_reaches_nothing_over_http(
    gateway: Gateway, db_pool: Any, tenant_id: str, http_server: str
) -> None:
    seeded = await seed_document(db_pool, tenant_id=tenant_id, chunks=STUDY_MATERIAL)
    async with Client(http_server, read_timeout_seconds=120) as client:
        assert {t.name for t in (await client.list_tools()).tools} == TOOLS
        found = _structured(await client.call_tool("search", {"query": "mitosis"}))
        assert found["hits"] == []
        answer = _structured(await client.call_tool("ask", {"question": "What is mitosis?"}))
        assert not answer["covered"] and answer["note"] == NOT_COVERED
        assert answer["citations"] == [] and answer["band"] == "gap"
        outline = _structured(await client.call_tool("syllabus", {}))
        assert outline["modules"] == []
        for uri in (
            f"lectern://chunks/{seeded.chunk_ids[0]}",
            f"lectern://documents/{seeded.document_id}",
        ):
            with pytest.raises(MCPError, match="HTTP 404") as refused:
                await client.read_resource(uri)
            assert refused.value.code == INVALID_PARAMS  # the SDK's "resource not found"
        drawn = await client.call_tool("draw_quiz", {"document_ids": [str(seeded.document_id)]})
        assert "No material" in _error_text(drawn) and "HTTP 404" in _error_text(drawn)
        # a quiz of the first tenant's student is not this student's to answer
        quiz = await _a_quiz(gateway, tenant_id)
        checked = await client.call_tool("check_answer", {"quiz_id": quiz, "answers": {"q": "x"}})
        assert "HTTP 404" in _error_text(checked)
        bad = await client.call_tool("check_answer", {"quiz_id": "../../v1/me", "answers": {}})
        assert "not a Lectern id" in _error_text(bad)


async def _a_quiz(gateway: Gateway, tenant_id: str) -> str:
    async with httpx.AsyncClient(timeout=30) as http:
        drawn = await http.post(
            f"{gateway.url}/v1/quizzes",
            json={"num_questions": 1},
            headers=gateway.token(tenant_id, "sam"),
        )
    assert drawn.status_code == 201, drawn.text
    return str(drawn.json()["id"])


async def test_a_bad_token_gives_tool_errors_not_a_crash(
    gateway: Gateway, db_pool: Any, tenant_id: str
) -> None:
    await seed_document(db_pool, tenant_id=tenant_id, chunks=STUDY_MATERIAL)
    async with _stdio(gateway, "not-a-token") as client:
        for tool, arguments in (
            ("search", {"query": "mitosis"}),
            ("ask", {"question": "What is mitosis?"}),
            ("syllabus", {}),
            ("draw_quiz", {}),
            ("check_answer", {"quiz_id": str(uuid.uuid4()), "answers": {}}),
        ):
            text = _error_text(await client.call_tool(tool, arguments))
            assert "Unauthorized" in text and "HTTP 401" in text, (tool, text)
        # the server is still up after the errors
        assert {t.name for t in (await client.list_tools()).tools} == TOOLS
