"""Names and Role Provisioning Services 2.0: a class's roster from its course's membership
service, every page (``Link: <...>; rel="next"``). Members become Lectern users (name and
email as the platform sends them); active students are on the class; students LTI put there
who are no longer in the course (or no longer active) are taken off, and nothing of theirs is
deleted: their sessions, memories and attempts stay."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from lectern_common.db.types import Pool
from lectern_gateway.lti import claims
from lectern_gateway.lti import repository as repo
from lectern_gateway.lti.platform import PlatformClient, PlatformError
from lectern_gateway.problems import ProblemError

#: a course of 100 000 members in pages of 100: any more is a platform looping its links
MAX_PAGES = 1000


@dataclass(frozen=True)
class RosterSync:
    """What a sync found and changed."""

    class_id: str
    members: int
    students: int
    removed: list[str]
    pages: int
    seconds: float


async def fetch_members(
    platforms: PlatformClient, *, url: str, token: str
) -> tuple[list[dict[str, Any]], int]:
    """Every member of the course, following ``rel="next"``; (members, pages read)."""
    members: list[dict[str, Any]] = []
    pages = 0
    next_url: str | None = url
    seen: set[str] = set()
    while next_url and pages < MAX_PAGES and next_url not in seen:
        seen.add(next_url)
        response = await platforms.send(
            "GET",
            next_url,
            headers={"Accept": claims.MEMBERSHIPS_MEDIA_TYPE, "Authorization": f"Bearer {token}"},
        )
        if not 200 <= response.status_code < 300:
            raise PlatformError(
                f"the membership service answered HTTP {response.status_code}",
                retryable=response.status_code >= 500,
                status=response.status_code,
            )
        try:
            body = response.json()
        except ValueError as exc:
            raise PlatformError(
                "the membership service did not answer JSON", retryable=True
            ) from exc
        page = body.get("members") if isinstance(body, dict) else None
        if not isinstance(page, list):
            raise PlatformError("the membership container has no members list", retryable=False)
        members += [m for m in page if isinstance(m, dict) and isinstance(m.get("user_id"), str)]
        pages += 1
        next_url = response.links.get("next", {}).get("url")
    return members, pages


def _person(member: dict[str, Any]) -> dict[str, Any]:
    def text(key: str) -> str | None:
        value = member.get(key)
        return value[:500] if isinstance(value, str) and value else None

    return {
        "sub": member["user_id"][:255],
        "name": text("name"),
        "given_name": text("given_name"),
        "family_name": text("family_name"),
        "email": text("email"),
    }


def _is_active_student(member: dict[str, Any]) -> bool:
    roles = member.get("roles")
    roles = [r for r in roles if isinstance(r, str)] if isinstance(roles, list) else []
    return member.get("status", "Active") == "Active" and claims.lectern_role(roles) == "student"


async def sync_roster(
    *, pool: Pool, platforms: PlatformClient, tenant_id: str, class_id: str
) -> RosterSync:
    """Sync a class's roster from its course now."""
    started = time.monotonic()
    context = await repo.context_of_class(pool, tenant_id=tenant_id, class_id=class_id)
    if context is None:
        raise ProblemError(404, "Not found", f"class {class_id} did not come from an LMS course")
    if not context["memberships_url"]:
        raise ProblemError(
            409,
            "No roster service",
            "the course's platform offers no membership service "
            "(Names and Role Provisioning) for it",
            reason="no_roster_service",
        )
    registration = await repo.registration_by_id(pool, context["registration_id"])
    assert registration is not None  # the context's foreign key
    try:
        token = await platforms.access_token(pool, registration, claims.SCOPE_MEMBERSHIPS)
        members, pages = await fetch_members(platforms, url=context["memberships_url"], token=token)
    except PlatformError as exc:
        raise ProblemError(
            502,
            "Platform error",
            f"the roster could not be read: {exc.message}",
            reason="platform_error",
        ) from exc
    async with pool.acquire() as conn, conn.transaction():
        users = await repo.upsert_users(
            conn,
            registration_id=registration["id"],
            tenant_id=tenant_id,
            people=list({p["sub"]: p for p in map(_person, members)}.values()),
        )
        students = sorted({users[m["user_id"][:255]] for m in members if _is_active_student(m)})
        await repo.join_class(conn, tenant_id=tenant_id, class_id=class_id, user_ids=students)
        # a course nobody is in (not even its teacher) is a platform answering wrong: the
        # roster stays as it is rather than losing every student at once
        removed = (
            await repo.remove_left(conn, tenant_id=tenant_id, class_id=class_id, keep=students)
            if members
            else []
        )
        await repo.mark_roster_synced(conn, tenant_id=tenant_id, class_id=class_id)
    return RosterSync(
        class_id=class_id,
        members=len(members),
        students=len(students),
        removed=removed,
        pages=pages,
        seconds=round(time.monotonic() - started, 3),
    )
