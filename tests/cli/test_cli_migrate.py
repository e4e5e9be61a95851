"""`lectern migrate` on a fresh database of the session's real Postgres."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest

from lectern_cli.main import main
from lectern_common.db.migrate import load_migrations

pytestmark = pytest.mark.integration


async def _admin(database_url: str, sql: str) -> None:
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


@pytest.fixture
def fresh_database(database_url: str) -> Iterator[str]:
    """An empty database next to the session's, dropped afterwards."""
    name = f"migrate_{uuid.uuid4().hex[:10]}"
    asyncio.run(_admin(database_url, f"CREATE DATABASE {name}"))
    parts = urlsplit(database_url)
    yield urlunsplit(parts._replace(path=f"/{name}"))
    asyncio.run(_admin(database_url, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))


async def _recorded(dsn: str) -> tuple[list[int], int]:
    conn = await asyncpg.connect(dsn)
    try:
        versions = [r["version"] for r in await conn.fetch("SELECT version FROM schema_migrations")]
        dim = await conn.fetchval("SELECT dimension FROM embedding_models WHERE id = 1")
    finally:
        await conn.close()
    return sorted(versions), dim


def test_migrate_applies_everything_once_and_says_what(
    fresh_database: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LECTERN_EMBEDDING_PROVIDER", raising=False)
    monkeypatch.delenv("LECTERN_LOCAL_EMBEDDING_MODEL", raising=False)
    assert main(["migrate", "--database-url", fresh_database]) == 0
    out = capsys.readouterr().out
    migrations = load_migrations()
    for migration in migrations:
        assert f"applied {migration.version:04d}_{migration.name}" in out
    assert "384 dimensions" in out
    assert asyncio.run(_recorded(fresh_database)) == ([m.version for m in migrations], 384)

    monkeypatch.setenv("LECTERN_DATABASE_URL", fresh_database)
    assert main(["migrate"]) == 0
    assert "schema up to date" in capsys.readouterr().out


def test_migrate_reports_an_unreachable_database(
    capsys: pytest.CaptureFixture[str], database_url: str
) -> None:
    missing = urlunsplit(urlsplit(database_url)._replace(path=f"/nope_{uuid.uuid4().hex[:6]}"))
    assert main(["migrate", "--database-url", missing]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "lectern migrate: error:" in captured.err
    assert "does not exist" in captured.err
