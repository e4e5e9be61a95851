"""The web UI in headless Chromium against the real gateway (stand-in retriever and re-ranker):
sign in, ask, follow a citation, flag, sign out, demo sign-in, documents and search.

Driven with Playwright and the system's Chromium (``make system-deps`` installs it as root;
elsewhere the test skips, and where it could have been installed the run fails).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import pytest
from lectern_testing.chat import (
    STUDY_MATERIAL,
    Gateway,
    Responders,
    chunk_keeper,
    gateway_settings,
    hosted_model_settings,
    memory_service,
    run_responders,
    seed_document,
    serve_gateway,
    settled,
)
from lectern_testing.gemini_fake import Behaviour, FakeGemini, FakeOpenAI, web_grounding
from lectern_testing.plugin import LOCAL_EMBEDDING_DIM

CHROMIUM = next(
    (p for p in (shutil.which("chromium"), shutil.which("chromium-browser")) if p), None
)

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed"),
]

HOSTILE_TITLE = '<img src=x onerror="window.pwned = true">Biology notes'


class Page:
    """One headless Chromium tab, driven with Playwright."""

    def __init__(self, page: Any) -> None:
        self.page = page
        self.exceptions: list[str] = []
        page.on("pageerror", lambda error: self.exceptions.append(str(error)))

    async def goto(self, url: str) -> None:
        """Open ``url``."""
        await self.page.goto(url)

    async def reload(self) -> None:
        """Reload the page."""
        await self.page.reload()

    async def js(self, expression: str) -> Any:
        """Evaluate a script in the page (its last expression's value, promises awaited)."""
        return await self.page.evaluate("async (code) => await (0, eval)(code)", expression)

    async def until(self, condition: str, timeout: float = 20.0) -> None:
        """Wait until the JavaScript ``condition`` holds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if await self.js(f"!!({condition})"):
                return
            await asyncio.sleep(0.1)
        body = await self.js("document.body ? document.body.innerText.slice(0, 2000) : ''")
        raise AssertionError(f"not within {timeout} s: {condition}\n--- page:\n{body}")

    async def text(self, selector: str) -> str:
        """The text of the first element ``selector`` matches."""
        value = await self.js(f"document.querySelector({json.dumps(selector)})?.textContent")
        return str(value or "")


@contextlib.asynccontextmanager
async def chromium() -> AsyncIterator[Page]:
    """The system's headless Chromium (Playwright, ``executable_path``) with one page."""
    from playwright.async_api import async_playwright

    assert CHROMIUM is not None
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=CHROMIUM,
            headless=True,
            # this machine's network is closed: no background connections at all
            args=["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update",
                  "--disable-sync"],
        )  # fmt: skip
        try:
            yield Page(await browser.new_page())
        finally:
            await browser.close()


@pytest.fixture(scope="module")
async def gateway(nats_url: str, database_url: str, db_pool: Any) -> AsyncIterator[Gateway]:
    """The gateway (development) with retriever and re-ranker stand-ins, the real memory
    service and ingest's consumers of a teacher's changes."""
    settings = gateway_settings(nats_url, database_url, environment="development")
    async with (
        run_responders(nats_url, Responders(pool=db_pool)),
        memory_service(nats_url, database_url),
        serve_gateway(settings) as running,
        chunk_keeper(nats_url, database_url, db_pool),
    ):
        yield running


def _bearer(gateway: Gateway, tenant_id: str, user: str, role: Any = "student") -> str:
    return gateway.token(tenant_id, user, role=role)["Authorization"].removeprefix("Bearer ")


async def _sign_in(page: Page, token: str) -> None:
    await page.js(
        f"document.getElementById('token-input').value = {json.dumps(token)};"
        "document.getElementById('token-form').requestSubmit()"
    )
    await page.until("!document.getElementById('whoami').hidden")


async def test_a_student_asks_follows_a_citation_and_flags_the_answer(
    gateway: Gateway, db_pool: Any, tenant_id: str
) -> None:
    seeded = await seed_document(db_pool, tenant_id=tenant_id, title=HOSTILE_TITLE)
    async with chromium() as page:
        await page.goto(f"{gateway.url}/")
        await page.until("document.body && document.body.dataset.ready === 'true'")
        assert await page.js("!document.getElementById('view-signin').hidden")
        assert await page.js("!document.getElementById('dev-signin').hidden")

        await _sign_in(page, _bearer(gateway, tenant_id, "stu-1"))
        await page.until("!document.getElementById('view-chat').hidden")
        assert "stu-1 · student" in await page.text("#whoami-text")
        assert await page.js("document.querySelector('[data-view=documents]').hidden")
        assert not await page.js("document.querySelector('[data-view=memories]').hidden")

        await page.js(
            "document.getElementById('session-mode').value = 'tutor';"
            "document.getElementById('session-subject').value = 'biology';"
            "document.getElementById('new-session-form').requestSubmit()"
        )
        await page.until("!document.getElementById('ask-form').hidden")
        await page.js(
            "document.getElementById('question').value = 'What does the Calvin cycle fix?';"
            "document.getElementById('ask-form').requestSubmit()"
        )
        await page.until("document.querySelector('.message.assistant button.small')", 60)
        answer = await page.text(".message.assistant .answer-text")
        assert "carbon dioxide" in answer and "[T1]" in answer
        assert await page.text(".message.assistant .band") == "confidence: high"
        # server text is text: the hostile title shows as written and runs nothing
        sources = await page.text(".message.assistant .sources")
        assert HOSTILE_TITLE in sources
        assert await page.js("window.pwned === undefined")
        assert await page.js("document.querySelectorAll('.message.assistant img').length") == 0

        # a citation opens the source viewer with the cited span marked
        await page.js("document.querySelector('.message.assistant button.cite').click()")
        await page.until("document.getElementById('source-dialog').open")
        await page.until("document.querySelector('#source-text mark')")
        assert "Calvin cycle" in await page.text("#source-text mark")
        assert await page.text("#source-title") == HOSTILE_TITLE
        await page.js("document.getElementById('source-dialog').close()")

        # flag it
        await page.js("document.querySelector('.message.assistant button.small').click()")
        await page.until("document.getElementById('flag-dialog').open")
        await page.js(
            "document.getElementById('flag-reason').value = 'unclear';"
            "document.querySelector('#flag-form button[value=flag]').click()"
        )
        await page.until("document.getElementById('notice-text').textContent.includes('flagged')")
        flags = await db_pool.fetch(
            "SELECT reason FROM feedback_flags WHERE tenant_id = $1", tenant_id
        )
        assert [f["reason"] for f in flags] == ["unclear"]

        # the past session and its stored answer come back after a reload
        await page.reload()
        await page.until("document.body && document.body.dataset.ready === 'true'")
        await page.until("document.querySelector('#session-list button')")
        await page.js("document.querySelector('#session-list button').click()")
        await page.until("document.querySelector('.message.assistant button.cite')")
        stored = await page.text(".message.assistant .answer-text")
        assert stored == answer

        # a memory with the evidence behind it (as the memory service stores it)
        await db_pool.execute(
            "INSERT INTO user_memories (id, tenant_id, user_id, kind, text, topic, embedding, "
            "evidence) VALUES ($1, $2, 'stu-1', 'mastered', 'Answered check questions on "
            "photosynthesis right twice running', 'photosynthesis', $3, $4::jsonb)",
            uuid.uuid4(), tenant_id, np.ones(LOCAL_EMBEDDING_DIM, dtype=np.float32),
            [{"kind": "check_right", "detail": "photosynthesis", "at": f"2026-11-{day}T10:00Z"}
             for day in (25, 26)],
        )  # fmt: skip
        await page.js("location.hash = 'memories'")
        await page.until("!document.getElementById('view-memories').hidden")
        await page.until("document.querySelector('#memory-list .evidence')")
        assert await page.text("#memory-list .evidence") == (
            "Because you answered 2 checks right on 26 Nov."
        )

        await page.js("document.getElementById('sign-out').click()")
        await page.until("!document.getElementById('view-signin').hidden")
        assert await page.js("sessionStorage.getItem('lectern.token')") is None

        # the development sign-in
        await page.js("document.querySelector('[data-dev-role=student]').click()")
        await page.until("document.getElementById('view-signin').hidden")
        assert (await page.text("#whoami-text")).startswith("demo-student · student · tenant demo")
        assert page.exceptions == []
    assert seeded.chunk_ids


async def test_a_teacher_sees_documents_and_searches(
    gateway: Gateway, db_pool: Any, tenant_id: str
) -> None:
    seeded = await seed_document(db_pool, tenant_id=tenant_id, title="Plant biology")
    async with chromium() as page:
        await page.goto(f"{gateway.url}/#documents")
        await page.until("document.body && document.body.dataset.ready === 'true'")
        await _sign_in(page, _bearer(gateway, tenant_id, "t-1", role="teacher"))
        # the link it was opened with
        await page.until("!document.getElementById('view-documents').hidden")
        await page.until("document.querySelectorAll('#document-rows tr th').length > 0")
        row = await page.text("#document-rows tr")
        assert "Plant biology" in row and "indexed" in row
        # archive it (out of search and chat once ingest applies it), then restore it
        await page.js(
            "document.querySelector('#document-rows button[aria-label^=Archive]').click()"
        )
        await page.until("document.querySelector('#document-rows .status-archived')")
        await settled(db_pool, seeded.document_id, active=False)
        await page.js(
            "document.querySelector('#document-rows button[aria-label^=Restore]').click()"
        )
        await page.until("document.querySelector('#document-rows .status-indexed')")
        await settled(db_pool, seeded.document_id, active=True)
        await page.js("location.hash = 'search'")
        await page.until("!document.getElementById('view-search').hidden")
        await page.js(
            "document.getElementById('search-query').value = 'RuBisCO carbon fixation';"
            "document.getElementById('search-form').requestSubmit()"
        )
        await page.until("document.getElementById('search-results').children.length > 0")
        assert "Plant biology" in await page.text("#search-results")
        assert await page.js("document.querySelector('[data-view=memories]').hidden")
        assert page.exceptions == []


async def _answer_quiz(page: Page, db_pool: Any, tenant_id: str) -> list[dict[str, Any]]:
    """Fill the quiz on screen: every answer right but the first (read from Postgres, as a
    student who knows would)."""
    row = await db_pool.fetchrow(
        "SELECT questions FROM quizzes WHERE tenant_id = $1 ORDER BY created_at DESC LIMIT 1",
        tenant_id,
    )
    stored = row["questions"]
    questions: list[dict[str, Any]] = json.loads(stored) if isinstance(stored, str) else stored
    for index, q in enumerate(questions):
        if q["options"]:
            wrong = next(o for o in q["options"] if o != q["answer"])
            value = wrong if index == 0 else q["answer"]
            await page.js(
                f"[...document.querySelectorAll('input[name=q-{index}]')]"
                f".find((i) => i.value === {json.dumps(value)}).checked = true"
            )
        else:
            value = "no idea" if index == 0 else q["answer"]
            await page.js(f"document.getElementById('q-{index}').value = {json.dumps(value)}")
    return questions


async def store_original(nats_url: str, db_pool: Any, document_id: str, data: bytes) -> None:
    """Put a seeded document's "uploaded" bytes in the object store (seeding skips upload)."""
    import nats

    from lectern_common.objects import object_name, put_bytes

    name = object_name(uuid.UUID(document_id), 1)
    client = await nats.connect(nats_url)
    try:
        await put_bytes(client.jetstream(), name=name, data=data)
    finally:
        await client.drain()
    await db_pool.execute(
        "UPDATE documents SET object_name = $2, mime_type = 'application/pdf' WHERE id = $1",
        uuid.UUID(document_id), name,
    )  # fmt: skip


async def test_a_student_explores_the_syllabus_and_takes_a_quiz(
    gateway: Gateway, db_pool: Any, tenant_id: str, nats_url: str
) -> None:
    await seed_document(db_pool, tenant_id=tenant_id, title="Cells and plants",
                        chunks=STUDY_MATERIAL[:3])  # fmt: skip
    async with chromium() as page:
        await page.goto(f"{gateway.url}/")
        await page.until("document.body && document.body.dataset.ready === 'true'")
        await _sign_in(page, _bearer(gateway, tenant_id, "stu-9"))
        await page.js("location.hash = 'syllabus'")
        await page.until("document.querySelectorAll('.syllabus-section').length === 5")
        titles = await page.js(
            "[...document.querySelectorAll('.syllabus-heading strong')].map((n) => n.textContent)"
        )
        assert titles == ["1 Cells", "1.1 Mitosis", "1.2 Meiosis", "2 Plants",
                          "2.1 Photosynthesis"]  # fmt: skip

        # a quiz on one section, from the syllabus
        await page.js(
            "document.querySelectorAll('.syllabus-section')[0]"
            ".querySelector('[data-action=quiz-section]').click()"
        )
        await page.until("!document.getElementById('view-quizzes').hidden")
        await page.until("document.querySelectorAll('#quiz-take .quiz-question').length > 0")
        questions = await _answer_quiz(page, db_pool, tenant_id)
        assert {q["section"] for q in questions} <= {"1.1 Mitosis", "1.2 Meiosis"}
        await page.js("document.querySelector('#quiz-take button[type=submit]').click()")
        await page.until("document.querySelector('.quiz-score')")
        total = len(questions)
        assert await page.text(".quiz-score") == f"Score: {total - 1} of {total}"
        first = await page.text(".quiz-question .quiz-result")
        assert first.startswith("Not quite") and questions[0]["topic"] in first
        assert await page.js(
            "document.querySelectorAll('.quiz-result.right').length"
        ) == total - 1  # fmt: skip

        # the passage an answer came from opens in the source viewer
        await page.js("document.querySelector('[data-action=quiz-passage]').click()")
        await page.until("document.getElementById('source-dialog').open")
        assert questions[0]["evidence"] in await page.text("#source-text")
        # ... and the original file opens at the passage's page
        await store_original(nats_url, db_pool, questions[0]["document_id"], b"%PDF-1.4 lesson")
        await page.js(
            "window.open = (url) => { window.opened = url; return null; };"
            "const blobUrl = URL.createObjectURL.bind(URL);"
            "URL.createObjectURL = (blob) => { window.blob = blob; return blobUrl(blob); }"
        )
        await page.js("document.querySelector('[data-action=open-original]').click()")
        await page.until("window.opened")
        opened = str(await page.js("window.opened"))
        page_number = questions[0]["pages"][0]
        assert opened.startswith("blob:") and opened.endswith(f"#page={page_number}")
        assert await page.js("window.blob.text()") == "%PDF-1.4 lesson"
        await page.js("document.getElementById('source-dialog').close()")

        # a quiz drawn from the form spans the material, and is listed
        await page.js(
            "document.getElementById('quiz-count').value = '3';"
            "document.getElementById('quiz-form').requestSubmit()"
        )
        await page.until("document.querySelectorAll('#quiz-list button').length === 2")
        sections = await db_pool.fetchval(
            "SELECT count(DISTINCT q->>'section') FROM quizzes, jsonb_array_elements(questions) q "
            "WHERE id = (SELECT id FROM quizzes WHERE tenant_id = $1 ORDER BY created_at DESC "
            "LIMIT 1)",
            tenant_id,
        )
        assert sections == 3
        assert page.exceptions == []


@pytest.fixture(scope="module")
async def gemini_gateway(
    nats_url: str, database_url: str, db_pool: Any
) -> AsyncIterator[tuple[Gateway, FakeGemini]]:
    """The gateway answering with (a fake) Gemini, web search on."""
    async with FakeGemini() as gemini, FakeOpenAI() as oai:
        settings = hosted_model_settings(
            nats_url, database_url, gemini, oai, environment="development"
        )
        async with (
            run_responders(nats_url, Responders(pool=db_pool)),
            memory_service(nats_url, database_url),
            serve_gateway(settings) as running,
        ):
            yield running, gemini


async def test_web_sources_show_apart_from_the_course_with_their_labels(
    gemini_gateway: tuple[Gateway, FakeGemini], db_pool: Any, tenant_id: str
) -> None:
    gateway, gemini = gemini_gateway
    await seed_document(db_pool, tenant_id=tenant_id)
    text = (
        "The Calvin cycle fixes carbon dioxide into sugars [T1]. "
        "Scientists first mapped it in the 1950s."
    )
    grounding = web_grounding(
        text,
        sources=[("https://example.org/calvin", "Calvin cycle history")],
        supports=[("Scientists first mapped it in the 1950s.", [0])],
    )
    gemini.enqueue(Behaviour(text=text, grounding=grounding), endpoint="generate")
    async with chromium() as page:
        await page.goto(f"{gateway.url}/")
        await page.until("document.body && document.body.dataset.ready === 'true'")
        await _sign_in(page, _bearer(gateway, tenant_id, "stu-1"))
        await page.js("document.getElementById('new-session-form').requestSubmit()")
        await page.until("!document.getElementById('ask-form').hidden")
        await page.js(
            "document.getElementById('question').value = 'What does the Calvin cycle fix?';"
            "document.getElementById('ask-form').requestSubmit()"
        )
        await page.until("document.querySelector('.message.assistant button.small')", 60)
        answer = await page.text(".message.assistant .answer-text")
        # the web label sits after the span it grounds, as a link to the page
        assert answer.endswith("in the 1950s.[W1]"), answer
        link = await page.js(
            "document.querySelector('.message.assistant .answer-text a.cite').href"
        )
        assert link == "https://example.org/calvin"
        # listed apart from the course's sources
        assert await page.js("!document.querySelector('.message.assistant .web-box').hidden")
        web = await page.text(".message.assistant .web-sources")
        assert web == "[W1] Calvin cycle history"
        assert "Calvin cycle history" not in await page.text(".message.assistant ul.sources")
        # a stored answer shows the same after a reload
        await page.reload()
        await page.until("document.body && document.body.dataset.ready === 'true'")
        await page.until("document.querySelector('#session-list button')")
        await page.js("document.querySelector('#session-list button').click()")
        await page.until("document.querySelector('.message.assistant .web-sources li')", 30)
        assert (await page.text(".message.assistant .answer-text")).endswith("1950s.[W1]")
        assert not page.exceptions, page.exceptions


async def test_a_student_picks_a_tutor_persona(
    gateway: Gateway, db_pool: Any, tenant_id: str
) -> None:
    import httpx

    await seed_document(db_pool, tenant_id=tenant_id)
    teacher = gateway.token(tenant_id, "t-1", role="teacher")
    async with httpx.AsyncClient(timeout=30) as client:
        created = await client.post(
            f"{gateway.url}/v1/personas",
            json={"slug": "dr-cell", "display_name": "Dr Cell", "scope": {"subjects": ["biology"]}},
            headers=teacher,
        )
    assert created.status_code == 201, created.text
    async with chromium() as page:
        await page.goto(f"{gateway.url}/")
        await page.until("document.body && document.body.dataset.ready === 'true'")
        await _sign_in(page, _bearer(gateway, tenant_id, "stu-1"))
        await page.until("document.querySelector('#session-persona option[value=dr-cell]')")
        await page.js(
            "document.getElementById('session-persona').value = 'dr-cell';"
            "document.getElementById('new-session-form').requestSubmit()"
        )
        await page.until("!document.getElementById('ask-form').hidden")
        assert "tutor dr-cell" in await page.text("#session-header")
        await page.js(
            "document.getElementById('question').value = 'What does the Calvin cycle fix?';"
            "document.getElementById('ask-form').requestSubmit()"
        )
        await page.until("document.querySelector('.message.assistant button.small')", 60)
        assert "tutor: dr-cell" in await page.text(".message.assistant .answer-meta")
        assert not page.exceptions, page.exceptions


async def test_an_admin_opens_the_quality_dashboard_and_follows_a_bar(
    gateway: Gateway, db_pool: Any, tenant_id: str
) -> None:
    import httpx
    from lectern_testing.chat import ask, new_session

    await seed_document(db_pool, tenant_id=tenant_id)
    student = gateway.token(tenant_id, "stu-1")
    async with httpx.AsyncClient(timeout=60) as client:
        session = await new_session(client, gateway, student)
        for question in ("What does RuBisCO catalyse?", "Where does photosynthesis happen?"):
            assert (await ask(client, gateway, session["id"], question, student)).done
    async with chromium() as page:
        await page.goto(f"{gateway.url}/")
        await page.until("document.body && document.body.dataset.ready === 'true'")
        await _sign_in(page, _bearer(gateway, tenant_id, "admin-1", role="admin"))
        await page.js("location.hash = '#quality'")
        await page.until("document.querySelector('#quality-charts svg.chart rect')", 30)
        assert "2 questions" in await page.text("#quality-summary")
        assert await page.js("document.querySelectorAll('#quality-charts svg.chart').length") == 2
        await page.js("document.querySelector('#quality-charts g.bar').dispatchEvent("
                      "new MouseEvent('click', {bubbles: true}))")  # fmt: skip
        await page.until("!document.getElementById('quality-questions').hidden", 30)
        listed = await page.text("#quality-questions")
        assert "RuBisCO" in listed and "Questions (2)" in listed
        assert not page.exceptions, page.exceptions


async def test_a_teacher_works_the_review_queues_and_edits_a_document(
    gateway: Gateway, db_pool: Any, tenant_id: str
) -> None:
    one = await seed_document(db_pool, tenant_id=tenant_id, title="Water, edition 1")
    two = await seed_document(db_pool, tenant_id=tenant_id, title="Water, edition 2")
    await db_pool.execute(
        "INSERT INTO source_conflicts (id, tenant_id, chunk_a, chunk_b, document_a, document_b, "
        "kind, statement_a, statement_b, detail, similarity) VALUES ($1, $2, $3, $4, $5, $6, "
        "'number', 'Water boils at 90 °C at sea level.', 'Water boils at 100 °C at sea level.', "
        "'90 °C in one, 100 °C in the other', 0.93)",
        uuid.uuid4(), tenant_id, two.chunk_ids[0], one.chunk_ids[0], two.document_id,
        one.document_id,
    )  # fmt: skip
    await db_pool.execute(
        "INSERT INTO knowledge_gaps (id, tenant_id, user_id, question, topic, confidence) "
        "VALUES ($1, $2, 'stu-1', 'How do tardigrades survive in space?', 'tardigrades', 0.1)",
        uuid.uuid4(), tenant_id,
    )  # fmt: skip
    async with chromium() as page:
        await page.goto(f"{gateway.url}/")
        await page.until("document.body && document.body.dataset.ready === 'true'")
        await _sign_in(page, _bearer(gateway, tenant_id, "t-1", role="teacher"))
        await page.js("location.hash = '#review'")
        await page.until("document.querySelector('#review-conflicts table.conflict')", 30)
        conflict = await page.text("#review-conflicts")
        assert "Water, edition 2" in conflict and "Water, edition 1" in conflict
        assert "90 °C in one, 100 °C in the other" in conflict
        assert "tardigrades" in await page.text("#review-gaps")
        # material uploaded for the topic closes it once indexed (no ingest worker here)
        await page.page.set_input_files(
            '[aria-label="Upload material for tardigrades"]',
            files=[{"name": "tardigrades.md", "mimeType": "text/markdown",
                    "buffer": b"# Tardigrades\n\nThey survive space as a dried-out tun.\n"}],
        )  # fmt: skip
        await page.until("document.getElementById('notice-text').textContent"
                         ".includes('re-tried once it is indexed')", 30)  # fmt: skip
        closure = await db_pool.fetchrow(
            "SELECT c.status, d.filename FROM gap_closures c JOIN documents d "
            "ON d.id = c.document_id WHERE c.tenant_id = $1 AND c.topic = 'tardigrades'",
            tenant_id,
        )
        assert (closure["status"], closure["filename"]) == ("waiting", "tardigrades.md")
        assert "1 conflicts" in await page.text("#review-summary")
        await page.js(
            "[...document.querySelectorAll('#review-conflicts button')]"
            ".find((b) => b.textContent === 'Archive a').click()"
        )
        await page.until("document.getElementById('review-conflicts').textContent"
                         ".includes('No conflicting sources')", 30)  # fmt: skip
        status = await db_pool.fetchval(
            "SELECT status FROM documents WHERE id = $1", two.document_id
        )
        assert status == "archived"

        await page.js("location.hash = '#documents'")
        button = "document.querySelector('[aria-label=\"Edit Water, edition 1\"]')"
        await page.until(button, 30)
        await page.js(f"{button}.click()")
        await page.until("document.getElementById('edit-dialog').open", 30)
        await page.js(
            "document.getElementById('edit-doc-title').value = 'Water (checked)';"
            "document.getElementById('edit-freshness').value = '2024-09-01';"
            "document.querySelector('#edit-form button[value=save]').click()"
        )
        await page.until("document.querySelector('[aria-label=\"Edit Water (checked)\"]')", 30)
        row = await db_pool.fetchrow(
            "SELECT title, freshness_date::text AS fresh FROM documents WHERE id = $1",
            one.document_id,
        )
        assert (row["title"], row["fresh"]) == ("Water (checked)", "2024-09-01")
        await page.js("document.querySelector('[aria-label=\"Edit Water (checked)\"]').click()")
        await page.until("document.getElementById('edit-history').textContent"
                         ".includes('updated')", 30)  # fmt: skip
        assert (await page.text("#edit-versions")).startswith("v1 · indexed · notes.md")
        # "Index again" reads the stored file; this seeded document has none: a clear error
        await page.js("document.querySelector('#edit-form button[value=reprocess]').click()")
        await page.until("document.getElementById('notice-text').textContent"
                         ".includes('no stored file')", 30)  # fmt: skip
        assert not page.exceptions, page.exceptions
