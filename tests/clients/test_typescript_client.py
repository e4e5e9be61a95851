"""The TypeScript client (clients/typescript, `@lectern/client`) against a real gateway.

The gateway is the real app (offline answerer, retriever and re-ranker stand-ins on the real
NATS, real Postgres) with seeded course material; the client is built with `npm ci` (once,
when node_modules is missing) and `npm run build`, and its Node tests (`node --test`) talk to
the gateway through the environment. Without Node and npm this fails, never skips: the
client is part of the repository and this is its only test here.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from lectern_testing.chat import STUDY_MATERIAL, offline_gateway, seed_document

pytestmark = pytest.mark.integration

CLIENT = Path(__file__).resolve().parents[2] / "clients" / "typescript"
DOCUMENT_TITLE = "Cells and plants"


def _tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        pytest.fail(
            f"`{name}` is not on PATH: the TypeScript client's tests need Node.js 20+ and npm "
            "(https://nodejs.org); install them and run this test again"
        )
    return found


async def _run(*command: str, timeout: float, env: dict[str, str] | None = None) -> tuple[int, str]:
    """Run ``command`` in the client's folder without blocking the loop serving the
    gateway; its exit code and output (stdout and stderr together)."""
    process = await asyncio.create_subprocess_exec(
        *command,
        cwd=CLIENT,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        output, _ = await asyncio.wait_for(process.communicate(), timeout)
    except TimeoutError:
        process.kill()
        await process.wait()
        pytest.fail(f"{' '.join(command)} took over {timeout:.0f} s")
    assert process.returncode is not None
    return process.returncode, output.decode(errors="replace")


async def _build(npm: str) -> None:
    if not (CLIENT / "node_modules").is_dir():
        code, output = await _run(npm, "ci", "--no-audit", "--no-fund", timeout=300)
        assert code == 0, f"npm ci failed:\n{output}"
    code, output = await _run(npm, "run", "check-generated", timeout=120)
    assert code == 0, f"src/schema.ts is stale or cannot be generated:\n{output}"
    code, output = await _run(npm, "run", "build", timeout=180)
    assert code == 0, f"npm run build failed:\n{output}"
    for built in ("index.js", "index.d.ts", "lectern-client.browser.js"):
        assert (CLIENT / "dist" / built).is_file(), f"the build made no dist/{built}"


def _count(output: str, what: str) -> int:
    found = re.search(rf"^# {what} (\d+)$", output, re.MULTILINE)
    assert found is not None, f"no `# {what}` line in the node --test output:\n{output}"
    return int(found.group(1))


async def test_the_typescript_client_against_a_real_gateway(
    nats_url: str, database_url: str, db_pool: Any, tenant_id: str
) -> None:
    node = _tool("node")
    npm = _tool("npm")
    await _build(npm)
    seeded = await seed_document(
        db_pool, tenant_id=tenant_id, title=DOCUMENT_TITLE, chunks=STUDY_MATERIAL
    )
    async with offline_gateway(nats_url, database_url, db_pool) as gateway:
        env = {k: v for k, v in os.environ.items() if not k.startswith("LECTERN_")}
        env.update(
            LECTERN_URL=gateway.url,
            LECTERN_TENANT=tenant_id,
            LECTERN_TOKEN=gateway.token(tenant_id, "sam")["Authorization"].split()[1],
            LECTERN_TEACHER_TOKEN=gateway.token(tenant_id, "ms-lee", role="teacher")[
                "Authorization"
            ].split()[1],
            LECTERN_DOCUMENT_ID=str(seeded.document_id),
            LECTERN_DOCUMENT_TITLE=DOCUMENT_TITLE,
            NO_COLOR="1",
        )
        code, output = await _run(
            node, "--test", "--test-reporter=tap", "test/", timeout=120, env=env
        )
    print(output)  # shown with -s, or when an assertion below fails
    assert code == 0, f"node --test failed:\n{output}"
    assert _count(output, "fail") == 0, output
    assert _count(output, "skipped") == 0, f"tests were skipped:\n{output}"
    assert _count(output, "pass") >= 20, output
    for title in (
        "search returns the seeded material",
        "a dropped stream resumes by itself (get)",
        "a dropped stream resumes by itself (post)",
        "a 404 is a LecternError with the problem's fields",
        "a 503 with Retry-After is retried after the wait it asks for",
    ):
        assert re.search(rf"^\s*ok \d+ - {re.escape(title)}", output, re.MULTILINE), (
            f"no passing test {title!r}:\n{output}"
        )
