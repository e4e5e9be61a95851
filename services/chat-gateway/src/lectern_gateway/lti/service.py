"""What a verified launch does: the user (created or updated from the platform's ``sub``,
name and email as sent), the course's class, the placed link and where its scores go, and
the Lectern sign-in the web UI lands with. What other domains ask of LTI (a quiz attempt's
score) is here too: ``queue_attempt_score``."""

from __future__ import annotations

import hashlib
import logging
import secrets
import time
import uuid
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import parse_qs, urlsplit

from lectern_common.db.types import Connection, Pool
from lectern_gateway.auth import issue_token
from lectern_gateway.config import Settings
from lectern_gateway.lti import claims
from lectern_gateway.lti import repository as repo
from lectern_gateway.lti.launch import Launch, refused
from lectern_gateway.lti.platform import PlatformClient
from lectern_gateway.lti.roster import sync_roster

log = logging.getLogger(__name__)

TargetKind = Literal["home", "quiz", "document", "module"]
MAX_TEXT = 500


@dataclass(frozen=True)
class Target:
    """What a placed link opens."""

    kind: TargetKind
    id: str | None = None

    def __str__(self) -> str:
        return self.kind if self.id is None else f"{self.kind}:{self.id}"


def parse_target(value: str | None) -> Target:
    """``quiz:<uuid>``, ``document:<uuid>``, ``module:<name>``; anything else is home."""
    kind, _, ident = (value or "").partition(":")
    if kind in ("quiz", "document") and ident:
        try:
            return Target(kind, str(uuid.UUID(ident)))  # type: ignore[arg-type]
        except ValueError:
            return Target("home")
    if kind == "module" and 0 < len(ident) <= 200:
        return Target("module", ident)
    return Target("home")


def target_of(token: dict[str, Any]) -> Target:
    """The link's target: its custom parameter, else the ``target`` of its target_link_uri."""
    custom = token.get(claims.CUSTOM)
    if isinstance(custom, dict) and isinstance(custom.get(claims.TARGET_PARAMETER), str):
        return parse_target(custom[claims.TARGET_PARAMETER])
    query = parse_qs(urlsplit(str(token.get(claims.TARGET_LINK_URI, ""))).query)
    return parse_target(query["target"][0] if query.get("target") else None)


def class_for(registration_id: uuid.UUID, context_id: str) -> str:
    """The class id of an LMS course: stable, opaque, never shared by two courses."""
    digest = hashlib.sha256(f"{registration_id}:{context_id}".encode()).hexdigest()
    return f"lti-{digest[:20]}"


@dataclass(frozen=True)
class Landing:
    """Where a launch lands: the web UI, signed in as this user, in this class."""

    token: str
    tenant_id: str
    user_id: str
    role: claims.Role
    class_id: str | None
    target: Target
    expires_at: int
    deep_link_id: str | None = None


def _text(value: Any) -> str | None:
    return value[:MAX_TEXT] if isinstance(value, str) and value else None


def _person(token: dict[str, Any]) -> dict[str, Any]:
    return {
        "sub": token["sub"],
        **{k: _text(token.get(k)) for k in ("name", "given_name", "family_name", "email")},
    }


def _check_target_uri(launch: Launch, tool_origin: str) -> None:
    parts = urlsplit(str(launch.claims[claims.TARGET_LINK_URI]))
    if f"{parts.scheme}://{parts.netloc}".lower() != tool_origin.lower():
        raise refused(400, "foreign_target", "the launch's target_link_uri is not this tool's")


async def complete_launch(
    *, pool: Pool, platforms: PlatformClient, settings: Settings, launch: Launch, tool_origin: str
) -> Landing:
    """Record what a verified launch says and sign the user in."""
    _check_target_uri(launch, tool_origin)
    if launch.message_type == claims.DEEP_LINKING_REQUEST and launch.role != "teacher":
        raise refused(403, "not_a_teacher", "only teachers place Lectern content in a course")
    registration, token = launch.registration, launch.claims
    tenant_id = registration["tenant_id"]
    context = token.get(claims.CONTEXT)
    target = (
        target_of(token) if launch.message_type == claims.RESOURCE_LINK_REQUEST else Target("home")
    )
    async with pool.acquire() as conn, conn.transaction():
        users = await repo.upsert_users(
            conn, registration_id=registration["id"], tenant_id=tenant_id, people=[_person(token)]
        )
        user_id = users[launch.sub]
        class_id = None
        if isinstance(context, dict):
            class_id = await _record_context(conn, launch, context)
            if launch.role == "student":
                await repo.join_class(
                    conn, tenant_id=tenant_id, class_id=class_id, user_ids=[user_id]
                )
        deep_link_id = None
        if launch.message_type == claims.RESOURCE_LINK_REQUEST:
            await _record_link(conn, launch, user_id=user_id, target=target)
        else:
            deep_link_id = await _record_deep_link(conn, launch, user_id, class_id, settings)
        roster_due = class_id is not None and await repo.roster_due(
            conn,
            tenant_id=tenant_id,
            class_id=class_id,
            older_than_s=settings.lti_roster_refresh_s,
        )
    if roster_due and class_id is not None:
        _sync_in_background(pool, platforms, tenant_id, class_id)
    expires = int(time.time()) + settings.lti_session_ttl_s
    signed = issue_token(
        secret=settings.effective_jwt_secret,
        tenant_id=tenant_id,
        user_id=user_id,
        role=launch.role,
        plan=settings.lti_plan,
        ttl_s=settings.lti_session_ttl_s,
        classes=[class_id] if class_id else [],
    )
    return Landing(
        token=signed,
        tenant_id=tenant_id,
        user_id=user_id,
        role=launch.role,
        class_id=class_id,
        target=target,
        expires_at=expires,
        deep_link_id=deep_link_id,
    )


async def _record_context(conn: Connection, launch: Launch, context: dict[str, Any]) -> str:
    registration = launch.registration
    nrps = launch.claims.get(claims.NRPS)
    ags = launch.claims.get(claims.AGS)
    return await repo.upsert_context(
        conn,
        {
            "registration_id": registration["id"],
            "context_id": context["id"][:MAX_TEXT],
            "tenant_id": registration["tenant_id"],
            "class_id": class_for(registration["id"], context["id"]),
            "title": _text(context.get("title")),
            "label": _text(context.get("label")),
            "memberships_url": _text(nrps.get("context_memberships_url"))
            if isinstance(nrps, dict)
            else None,
            "lineitems_url": _text(ags.get("lineitems")) if isinstance(ags, dict) else None,
        },
    )


async def _record_link(conn: Connection, launch: Launch, *, user_id: str, target: Target) -> None:
    registration, token = launch.registration, launch.claims
    link = token[claims.RESOURCE_LINK]
    context = token.get(claims.CONTEXT)
    ags = token.get(claims.AGS)
    lineitem = _text(ags.get("lineitem")) if isinstance(ags, dict) else None
    await repo.upsert_resource_link(
        conn,
        {
            "registration_id": registration["id"],
            "resource_link_id": link["id"][:MAX_TEXT],
            "tenant_id": registration["tenant_id"],
            "context_id": context["id"] if isinstance(context, dict) else None,
            "title": _text(link.get("title")),
            "target_kind": target.kind,
            "target_id": target.id,
            "lineitem_url": lineitem,
        },
    )
    scopes = ags.get("scope", []) if isinstance(ags, dict) else []
    if (
        target.kind == "quiz"
        and target.id
        and lineitem
        and launch.role == "student"
        and isinstance(scopes, list)
        and claims.SCOPE_SCORE in scopes
    ):
        await repo.upsert_grade_link(
            conn,
            {
                "tenant_id": registration["tenant_id"],
                "user_id": user_id,
                "quiz_id": uuid.UUID(target.id),
                "lineitem_url": lineitem,
                "registration_id": registration["id"],
                "sub": launch.sub,
            },
        )


async def _record_deep_link(
    conn: Connection, launch: Launch, user_id: str, class_id: str | None, settings: Settings
) -> str:
    dl_settings = launch.claims[claims.DEEP_LINKING_SETTINGS]
    accept = dl_settings.get("accept_types")
    deep_link_id = secrets.token_urlsafe(32)
    await repo.insert_deep_link(
        conn,
        {
            "id": deep_link_id,
            "registration_id": launch.registration["id"],
            "tenant_id": launch.registration["tenant_id"],
            "deployment_id": launch.deployment_id,
            "user_id": user_id,
            "class_id": class_id,
            "return_url": dl_settings["deep_link_return_url"],
            "data": dl_settings.get("data") if isinstance(dl_settings.get("data"), str) else None,
            "accept_types": [str(a) for a in accept] if isinstance(accept, list) else [],
            "accept_multiple": bool(dl_settings.get("accept_multiple", False)),
        },
        ttl_s=settings.lti_session_ttl_s,
    )
    return deep_link_id


def _sync_in_background(
    pool: Pool, platforms: PlatformClient, tenant_id: str, class_id: str
) -> None:
    async def run() -> None:
        try:
            await sync_roster(
                pool=pool, platforms=platforms, tenant_id=tenant_id, class_id=class_id
            )
        except Exception as exc:  # logged: the next launch or an on-demand sync tries again
            log.warning("roster sync of %s (tenant %s) failed: %s", class_id, tenant_id, exc)

    platforms.spawn(run(), name=f"lti-roster-{class_id}")


async def queue_attempt_score(
    conn: Connection,
    *,
    tenant_id: str,
    user_id: str,
    quiz_id: uuid.UUID,
    attempt_id: uuid.UUID,
    correct: int,
    total: int,
    at: str,
) -> int:
    """Queue a quiz attempt's score for the line items the student took the quiz from (in
    the attempt's transaction: committed with it, posted by the worker); how many."""
    score = {
        "scoreGiven": correct,
        "scoreMaximum": max(total, 1),
        "timestamp": at,
        "activityProgress": "Completed",
        "gradingProgress": "FullyGraded",
    }
    return await repo.queue_scores(
        conn,
        tenant_id=tenant_id,
        user_id=user_id,
        quiz_id=quiz_id,
        attempt_id=attempt_id,
        score=score,
    )
