"""Class rosters' SQL (``class_members``: the students teachers put on a class)."""

from __future__ import annotations

from typing import Any

from lectern_common.db.types import Queryable

_MEMBER_COLUMNS = "class_id, user_id, added_by, added_at"


async def member_classes(*, pool: Queryable, tenant_id: str, user_id: str) -> list[str]:
    """The classes whose roster lists the user."""
    rows = await pool.fetch(
        "SELECT class_id FROM class_members WHERE tenant_id = $1 AND user_id = $2",
        tenant_id, user_id,
    )  # fmt: skip
    return [r["class_id"] for r in rows]


async def roster(*, pool: Queryable, tenant_id: str, class_id: str) -> list[Any]:
    """A class's members (``class_id``, ``user_id``, ``added_by``, ``added_at``) by user."""
    return await pool.fetch(
        f"SELECT {_MEMBER_COLUMNS} FROM class_members "  # noqa: S608 - constants
        "WHERE tenant_id = $1 AND class_id = $2 ORDER BY user_id",
        tenant_id, class_id,
    )  # fmt: skip


async def roster_user_ids(*, pool: Queryable, tenant_id: str, class_id: str) -> list[str]:
    """The user ids on a class's roster."""
    rows = await pool.fetch(
        "SELECT user_id FROM class_members WHERE tenant_id = $1 AND class_id = $2",
        tenant_id, class_id,
    )  # fmt: skip
    return [str(r["user_id"]) for r in rows]


async def on_roster(*, pool: Queryable, tenant_id: str, class_id: str, user_id: str) -> bool:
    """Whether the class's roster lists the user."""
    found = await pool.fetchval(
        "SELECT 1 FROM class_members WHERE tenant_id = $1 AND class_id = $2 AND user_id = $3",
        tenant_id, class_id, user_id,
    )  # fmt: skip
    return found is not None


async def add_member(
    *, pool: Queryable, tenant_id: str, class_id: str, user_id: str, added_by: str
) -> Any:
    """Put a user on a class's roster (idempotent); the member row."""
    return await pool.fetchrow(
        "INSERT INTO class_members (tenant_id, class_id, user_id, added_by) "  # noqa: S608 - constants
        "VALUES ($1, $2, $3, $4) ON CONFLICT (tenant_id, class_id, user_id) "
        "DO UPDATE SET tenant_id = EXCLUDED.tenant_id "
        f"RETURNING {_MEMBER_COLUMNS}",
        tenant_id, class_id, user_id, added_by,
    )  # fmt: skip


async def remove_member(*, pool: Queryable, tenant_id: str, class_id: str, user_id: str) -> bool:
    """Take a user off a class's roster; False when they were not on it."""
    removed = await pool.execute(
        "DELETE FROM class_members WHERE tenant_id = $1 AND class_id = $2 AND user_id = $3",
        tenant_id, class_id, user_id,
    )  # fmt: skip
    return bool(removed != "DELETE 0")
