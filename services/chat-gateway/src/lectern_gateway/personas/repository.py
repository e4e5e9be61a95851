"""Postgres access of tutor personas (versioned: an edit inserts the next version)."""

from __future__ import annotations

from typing import Any

from lectern_common.db.types import Queryable

_COLUMNS = (
    "tenant_id, slug, version, display_name, instructions, default_mode, learning_style, "
    "explanation_depth, scope, tag_boosts, band_high, band_medium, band_low, gap_message, "
    "created_by, created_at"
)


async def insert_version(pool: Queryable, values: dict[str, Any]) -> dict[str, Any] | None:
    """The persona's next version (1 for a new slug); None when ``expect_new`` and it exists."""
    row = await pool.fetchrow(
        f"""INSERT INTO personas (tenant_id, slug, version, display_name, instructions,
                default_mode, learning_style, explanation_depth, scope, tag_boosts, band_high,
                band_medium, band_low, gap_message, created_by)
            SELECT $1, $2, coalesce(max(version), 0) + 1, $3, $4, $5, $6, $7, $8, $9, $10,
                   $11, $12, $13, $14
            FROM personas WHERE tenant_id = $1 AND slug = $2
            HAVING NOT $15 OR count(*) = 0
            RETURNING {_COLUMNS}""",  # noqa: S608
        values["tenant_id"], values["slug"], values["display_name"], values["instructions"],
        values["default_mode"], values["learning_style"], values["explanation_depth"],
        values["scope"], values["tag_boosts"], values["band_high"], values["band_medium"],
        values["band_low"], values["gap_message"], values["created_by"], values["expect_new"],
    )  # fmt: skip
    return dict(row) if row else None


async def get(
    pool: Queryable, *, tenant_id: str, slug: str, version: int | None = None
) -> dict[str, Any] | None:
    """A version of a persona (the latest when ``version`` is None)."""
    row = await pool.fetchrow(
        f"SELECT {_COLUMNS} FROM personas WHERE tenant_id = $1 AND slug = $2 "  # noqa: S608
        "AND ($3::integer IS NULL OR version = $3) ORDER BY version DESC LIMIT 1",
        tenant_id,
        slug,
        version,
    )
    return dict(row) if row else None


async def latest(pool: Queryable, *, tenant_id: str) -> list[dict[str, Any]]:
    """The latest version of every persona of the tenant, by slug."""
    rows = await pool.fetch(
        f"SELECT DISTINCT ON (slug) {_COLUMNS} FROM personas WHERE tenant_id = $1 "  # noqa: S608
        "ORDER BY slug, version DESC",
        tenant_id,
    )
    return [dict(r) for r in rows]
