"""SQL of the chat features: sessions, messages, turns (``chat_turns``: all of its SQL is
here) and the daily message counts. A statement on a row named by its id is scoped by tenant
where a caller could name another tenant's."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from datetime import date
from typing import Any

from lectern_common.db.types import Queryable

_SESSION_COLUMNS = (
    "id, tenant_id, user_id, mode, subject, module_tag, class_id, grade_level, learning_style, "
    "explanation_depth, curriculum_standards, title, status, end_reason, created_at, "
    "last_activity_at, ended_at, persona_slug, persona_version"
)
_MESSAGE_COLUMNS = (
    "id, session_id, user_id, role, content, citations, confidence, confidence_band, "
    "answered_by, usage, timings, tutor_check, created_at"
)


async def insert_session(*, pool: Queryable, values: dict[str, Any]) -> dict[str, Any]:
    """Create a session and return its row."""
    row = await pool.fetchrow(
        f"INSERT INTO chat_sessions (id, tenant_id, user_id, mode, subject, module_tag, class_id, "  # noqa: S608
        "grade_level, learning_style, explanation_depth, title, curriculum_standards, "
        "persona_slug, persona_version) "
        f"VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14) RETURNING {_SESSION_COLUMNS}",
        values["id"],
        values["tenant_id"],
        values["user_id"],
        values["mode"],
        values["subject"],
        values["module_tag"],
        values["class_id"],
        values["grade_level"],
        values["learning_style"],
        values["explanation_depth"],
        values["title"],
        list(values.get("curriculum_standards") or []),
        values.get("persona_slug"),
        values.get("persona_version"),
    )
    return dict(row)


async def get_session(
    *, pool: Queryable, tenant_id: str, session_id: uuid.UUID
) -> dict[str, Any] | None:
    """A session of the tenant, or None."""
    row = await pool.fetchrow(
        f"SELECT {_SESSION_COLUMNS} FROM chat_sessions WHERE id = $1 AND tenant_id = $2",  # noqa: S608
        session_id,
        tenant_id,
    )
    return dict(row) if row else None


async def list_sessions(
    *, pool: Queryable, tenant_id: str, user_id: str | None, limit: int, status: str | None
) -> list[dict[str, Any]]:
    """Sessions of a tenant (one user's when ``user_id`` is given), newest first."""
    rows = await pool.fetch(
        f"SELECT {_SESSION_COLUMNS} FROM chat_sessions WHERE tenant_id = $1 "  # noqa: S608
        "AND ($2::text IS NULL OR user_id = $2) AND ($3::text IS NULL OR status = $3) "
        "ORDER BY created_at DESC LIMIT $4",
        tenant_id,
        user_id,
        status,
        limit,
    )
    return [dict(r) for r in rows]


async def end_session(
    *, pool: Queryable, tenant_id: str, session_id: uuid.UUID, reason: str
) -> dict[str, Any] | None:
    """End an active session; None when it was not active (already ended or absent). With its
    message count (``n``) and how many of its messages are flagged (``flagged``: memory learns
    flags from their events and waits for that many before distilling)."""
    row = await pool.fetchrow(
        "UPDATE chat_sessions SET status = 'ended', end_reason = $3, ended_at = now() "
        "WHERE id = $1 AND tenant_id = $2 AND status = 'active' "
        "RETURNING id, tenant_id, user_id, "
        "(SELECT count(*) FROM chat_messages m WHERE m.session_id = chat_sessions.id) AS n, "
        "(SELECT count(DISTINCT f.message_id) FROM feedback_flags f JOIN chat_messages m "
        "ON m.id = f.message_id WHERE m.session_id = chat_sessions.id) AS flagged",
        session_id,
        tenant_id,
        reason,
    )
    return dict(row) if row else None


async def claim_idle_sessions(
    *, pool: Queryable, idle_s: float, limit: int = 100
) -> list[dict[str, Any]]:
    """End sessions idle longer than ``idle_s`` (all tenants) and return them.

    ``FOR UPDATE SKIP LOCKED`` inside the UPDATE lets several gateway replicas sweep at once:
    each row is claimed, ended and returned by exactly one of them.
    """
    rows = await pool.fetch(
        "UPDATE chat_sessions s SET status = 'ended', end_reason = 'idle', ended_at = now() "
        "FROM (SELECT id FROM chat_sessions WHERE status = 'active' "
        "      AND last_activity_at < now() - make_interval(secs => $1) "
        "      ORDER BY last_activity_at LIMIT $2 FOR UPDATE SKIP LOCKED) idle "
        "WHERE s.id = idle.id AND s.status = 'active' "
        "RETURNING s.id, s.tenant_id, s.user_id, "
        "(SELECT count(*) FROM chat_messages m WHERE m.session_id = s.id) AS n, "
        "(SELECT count(DISTINCT f.message_id) FROM feedback_flags f JOIN chat_messages m "
        "ON m.id = f.message_id WHERE m.session_id = s.id) AS flagged",
        float(idle_s),
        limit,
    )
    return [dict(r) for r in rows]


async def insert_message(
    *,
    pool: Queryable,
    message_id: uuid.UUID,
    session_id: uuid.UUID,
    tenant_id: str,
    user_id: str,
    role: str,
    content: str,
    citations: Sequence[dict[str, Any]] = (),
    confidence: float | None = None,
    band: str | None = None,
    answered_by: str | None = None,
    usage: dict[str, Any] | None = None,
    timings: dict[str, Any] | None = None,
    tutor_check: dict[str, Any] | None = None,
    if_absent: bool = False,
) -> None:
    """Store a message and mark the session active now (one statement, one round trip);
    ``if_absent``: a message already stored under ``message_id`` is kept as it is."""
    conflict = "ON CONFLICT (id) DO NOTHING " if if_absent else ""
    await pool.execute(
        "WITH stored AS (INSERT INTO chat_messages (id, session_id, tenant_id, user_id, role, "  # noqa: S608 (a constant clause)
        "content, citations, confidence, confidence_band, answered_by, usage, timings, "
        "tutor_check) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$14) "
        f"{conflict}RETURNING session_id) "
        "UPDATE chat_sessions SET last_activity_at = now(), title = coalesce(title, left($13, 80)) "
        "WHERE id = (SELECT session_id FROM stored) AND tenant_id = $3",
        message_id,
        session_id,
        tenant_id,
        user_id,
        role,
        content,
        list(citations),
        confidence,
        band,
        answered_by,
        usage or {},
        timings or {},
        content if role == "user" else None,
        tutor_check,
    )


async def settle_check(
    *, pool: Queryable, tenant_id: str, message_id: uuid.UUID, outcome: dict[str, Any]
) -> bool:
    """Mark a pending check question judged or skipped; False if it was not pending."""
    status = await pool.execute(
        "UPDATE chat_messages SET tutor_check = tutor_check || $3::jsonb "
        "WHERE id = $1 AND tenant_id = $2 AND tutor_check->>'status' = 'pending'",
        message_id,
        tenant_id,
        outcome,
    )
    return bool(status != "UPDATE 0")


async def asked_checks(*, pool: Queryable, tenant_id: str, session_id: uuid.UUID) -> set[str]:
    """The question ids this session has already asked (drill: never the same twice)."""
    rows = await pool.fetch(
        "SELECT tutor_check->>'question_id' AS question_id FROM chat_messages "
        "WHERE session_id = $1 AND tenant_id = $2 AND tutor_check IS NOT NULL",
        session_id,
        tenant_id,
    )
    return {r["question_id"] for r in rows if r["question_id"]}


async def recent_messages(
    *,
    pool: Queryable,
    tenant_id: str,
    session_id: uuid.UUID,
    limit: int,
    before: uuid.UUID | None,
    only_earlier: bool = False,
) -> list[dict[str, Any]]:
    """The last ``limit`` messages of a session, oldest first (excluding ``before``; with
    ``only_earlier`` also the messages stored after it, such as its own answer)."""
    rows = await pool.fetch(
        f"SELECT {_MESSAGE_COLUMNS} FROM chat_messages WHERE session_id = $1 AND tenant_id = $2 "  # noqa: S608
        "AND ($3::uuid IS NULL OR id <> $3) AND (NOT $5 OR created_at < coalesce("
        "(SELECT created_at FROM chat_messages WHERE id = $3), 'infinity')) "
        "ORDER BY created_at DESC LIMIT $4",
        session_id,
        tenant_id,
        before,
        limit,
        only_earlier,
    )
    return [dict(r) for r in reversed(rows)]


async def list_messages(
    *, pool: Queryable, tenant_id: str, session_id: uuid.UUID, limit: int
) -> list[dict[str, Any]]:
    """Messages of a session, oldest first."""
    rows = await pool.fetch(
        f"SELECT {_MESSAGE_COLUMNS} FROM chat_messages WHERE session_id = $1 AND tenant_id = $2 "  # noqa: S608
        "ORDER BY created_at LIMIT $3",
        session_id,
        tenant_id,
        limit,
    )
    return [dict(r) for r in rows]


async def get_message(
    *, pool: Queryable, tenant_id: str, message_id: uuid.UUID
) -> dict[str, Any] | None:
    """A message of the tenant, or None."""
    row = await pool.fetchrow(
        f"SELECT {_MESSAGE_COLUMNS} FROM chat_messages WHERE id = $1 AND tenant_id = $2",  # noqa: S608
        message_id,
        tenant_id,
    )
    return dict(row) if row else None


async def class_teachers(
    *, pool: Queryable, tenant_id: str, class_id: str, limit: int = 50
) -> list[str]:
    """The teachers of a class: users who uploaded material for it with the teacher role.

    Rosters list students (``class_members``), so a class's teachers are read from what
    they did: uploading the class's documents as teachers.
    """
    rows = await pool.fetch(
        "SELECT DISTINCT uploaded_by FROM documents WHERE tenant_id = $1 AND class_id = $2 "
        "AND uploader_role = 'teacher' AND deleted_at IS NULL ORDER BY uploaded_by LIMIT $3",
        tenant_id,
        class_id,
        limit,
    )
    return [r["uploaded_by"] for r in rows]


async def insert_gap(
    *,
    pool: Queryable,
    gap_id: uuid.UUID,
    tenant_id: str,
    session_id: uuid.UUID,
    user_id: str,
    question: str,
    topic: str | None,
    subject: str | None,
    confidence: float,
    message_id: uuid.UUID,
    related: Sequence[str],
) -> None:
    """Record a knowledge gap."""
    await pool.execute(
        "INSERT INTO knowledge_gaps (id, tenant_id, session_id, user_id, question, topic, "
        "subject, confidence, message_id, related_topics) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10)",
        gap_id,
        tenant_id,
        session_id,
        user_id,
        question,
        topic,
        subject,
        confidence,
        message_id,
        list(related),
    )


async def gaps_by_topic(*, pool: Queryable, tenant_id: str, limit: int) -> list[dict[str, Any]]:
    """A tenant's knowledge gaps grouped by topic, most frequent first."""
    rows = await pool.fetch(
        "SELECT coalesce(topic, 'unknown') AS topic, count(*) AS count, "
        "count(DISTINCT user_id) AS students, max(created_at) AS last_seen, "
        "min(confidence) AS min_confidence, array_agg(DISTINCT subject) "
        "FILTER (WHERE subject IS NOT NULL) AS subjects, "
        "(array_agg(question ORDER BY created_at DESC))[1:5] AS questions "
        "FROM knowledge_gaps WHERE tenant_id = $1 GROUP BY 1 "
        "ORDER BY count(*) DESC, max(created_at) DESC LIMIT $2",
        tenant_id,
        limit,
    )
    return [dict(r) for r in rows]


async def insert_flag(*, pool: Queryable, values: dict[str, Any]) -> dict[str, Any]:
    """Record a flag on a message."""
    row = await pool.fetchrow(
        "INSERT INTO feedback_flags (id, tenant_id, message_id, session_id, user_id, reason, "
        "details) VALUES ($1,$2,$3,$4,$5,$6,$7) RETURNING *",
        values["id"],
        values["tenant_id"],
        values["message_id"],
        values["session_id"],
        values["user_id"],
        values["reason"],
        values["details"],
    )
    return dict(row)


async def list_flags(
    *, pool: Queryable, tenant_id: str, status: str | None, limit: int
) -> list[dict[str, Any]]:
    """A tenant's flags, newest first."""
    rows = await pool.fetch(
        "SELECT f.*, m.content AS message_content FROM feedback_flags f "
        "JOIN chat_messages m ON m.id = f.message_id "
        "WHERE f.tenant_id = $1 AND ($2::text IS NULL OR f.status = $2) "
        "ORDER BY f.created_at DESC LIMIT $3",
        tenant_id,
        status,
        limit,
    )
    return [dict(r) for r in rows]


async def resolve_flag(
    *, pool: Queryable, tenant_id: str, flag_id: uuid.UUID, resolution: str | None, resolved_by: str
) -> dict[str, Any] | None:
    """Resolve a flag of the tenant; None when absent."""
    row = await pool.fetchrow(
        "UPDATE feedback_flags SET status = 'resolved', resolution = $3, resolved_by = $4, "
        "resolved_at = now() WHERE id = $1 AND tenant_id = $2 RETURNING *",
        flag_id,
        tenant_id,
        resolution,
        resolved_by,
    )
    return dict(row) if row else None


def citations_json(citations: Sequence[Any]) -> list[dict[str, Any]]:
    """Citations as JSON-ready dicts (pydantic models or dicts)."""
    out: list[dict[str, Any]] = []
    for c in citations:
        out.append(json.loads(c.model_dump_json()) if hasattr(c, "model_dump_json") else dict(c))
    return out


async def last_message(*, pool: Queryable, tenant_id: str, session_id: uuid.UUID) -> Any:
    """The session's newest message (``id``, ``role``, ``tutor_check``), or None."""
    return await pool.fetchrow(
        "SELECT id, role, tutor_check FROM chat_messages WHERE tenant_id = $1 AND "
        "session_id = $2 ORDER BY created_at DESC, id DESC LIMIT 1",
        tenant_id, session_id,
    )  # fmt: skip


# ---------------------------------------------------------------- chat turns
# A turn's row (``chat_turns``): its streamed events, the run that owns it (``owner``: only
# its writes count), its Idempotency-Key and what a take-over needs to answer it again.


async def insert_turn(
    *,
    pool: Queryable,
    turn_id: uuid.UUID,
    session_id: uuid.UUID,
    tenant_id: str,
    user_id: str,
    idempotency_key: str | None,
) -> bool:
    """A new turn's row; False when the id or the session's key is taken."""
    inserted = await pool.fetchval(
        "INSERT INTO chat_turns (id, session_id, tenant_id, user_id, idempotency_key) "
        "VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING RETURNING id",
        turn_id, session_id, tenant_id, user_id, idempotency_key,
    )  # fmt: skip
    return inserted is not None


async def turn_exists(
    *, pool: Queryable, tenant_id: str, session_id: uuid.UUID, turn_id: uuid.UUID
) -> bool:
    """Whether the session has this turn."""
    found = await pool.fetchval(
        "SELECT id FROM chat_turns WHERE id = $1 AND session_id = $2 AND tenant_id = $3",
        turn_id, session_id, tenant_id,
    )  # fmt: skip
    return found is not None


async def turn_by_key(*, pool: Queryable, session_id: uuid.UUID, idempotency_key: str) -> Any:
    """The session's turn holding this key (``id``, ``status``, ``age`` in seconds), or None."""
    return await pool.fetchrow(
        "SELECT id, status, extract(epoch FROM now() - updated_at) AS age "
        "FROM chat_turns WHERE session_id = $1 AND idempotency_key = $2",
        session_id, idempotency_key,
    )  # fmt: skip


async def release_turn_key(*, pool: Queryable, turn_id: uuid.UUID) -> None:
    """Free a turn's Idempotency-Key for a new turn."""
    await pool.execute("UPDATE chat_turns SET idempotency_key = NULL WHERE id = $1", turn_id)


async def delete_turn(*, pool: Queryable, turn_id: uuid.UUID) -> None:
    """Forget a turn's row."""
    await pool.execute("DELETE FROM chat_turns WHERE id = $1", turn_id)


async def delete_old_turns(*, pool: Queryable, older_than_s: float) -> None:
    """Forget the rows of turns not written for ``older_than_s`` (answers stay in messages)."""
    await pool.execute(
        "DELETE FROM chat_turns WHERE updated_at < now() - make_interval(secs => $1)",
        older_than_s,
    )


async def own_turn(
    *,
    pool: Queryable,
    turn_id: uuid.UUID,
    counted_on: date | None,
    owner: uuid.UUID,
    inputs: dict[str, Any],
) -> None:
    """Make this run the turn's owner, with what another replica needs to take it over."""
    await pool.execute(
        "UPDATE chat_turns SET counted_on = $2, owner = $3, inputs = $4 WHERE id = $1",
        turn_id, counted_on, owner, inputs,
    )  # fmt: skip


async def stored_turn(*, pool: Queryable, turn_id: uuid.UUID) -> Any:
    """A turn's ``status``, stored ``events`` and ``age`` (seconds since written), or None."""
    return await pool.fetchrow(
        "SELECT status, events, extract(epoch FROM now() - updated_at) AS age "
        "FROM chat_turns WHERE id = $1",
        turn_id,
    )


async def claim_stale_turn(
    *, pool: Queryable, turn_id: uuid.UUID, owner: uuid.UUID, stale_s: float
) -> Any:
    """Take over a streaming turn not written for ``stale_s``; one replica wins (the claim
    makes the row fresh again). Its ``session_id``, ``tenant_id``, ``events``, ``inputs``
    and ``counted_on``, or None when it is not stale or another claimed it."""
    return await pool.fetchrow(
        "UPDATE chat_turns SET owner = $2, updated_at = now(), takeovers = takeovers + 1 "
        "WHERE id = $1 AND status = 'streaming' AND inputs IS NOT NULL "
        "AND updated_at < now() - make_interval(secs => $3) "
        "RETURNING session_id, tenant_id, events, inputs, counted_on",
        turn_id, owner, stale_s,
    )  # fmt: skip


async def touch_turn(*, pool: Queryable, turn_id: uuid.UUID, owner: uuid.UUID) -> bool:
    """Mark the owner's turn alive; False when another run owns it now."""
    touched = await pool.execute(
        "UPDATE chat_turns SET updated_at = now() WHERE id = $1 AND owner = $2", turn_id, owner
    )
    return bool(touched != "UPDATE 0")


async def append_turn_events(
    *,
    pool: Queryable,
    turn_id: uuid.UUID,
    events: list[dict[str, Any]],
    status: str,
    owner: uuid.UUID,
) -> bool:
    """Store more of the owner's events and the turn's status; False when another run owns
    it now."""
    written = await pool.execute(
        "UPDATE chat_turns SET events = events || $2::jsonb, status = $3, updated_at = now() "
        "WHERE id = $1 AND owner = $4",
        turn_id, events, status, owner,
    )  # fmt: skip
    return bool(written != "UPDATE 0")


async def claim_turn_answer(
    *, pool: Queryable, turn_id: uuid.UUID, owner: uuid.UUID, answer_id: uuid.UUID
) -> Any:
    """The turn's answer id (``answer_id`` unless an earlier run stored one); None when
    another run owns the turn."""
    return await pool.fetchval(
        "UPDATE chat_turns SET answer_id = coalesce(answer_id, $3) "
        "WHERE id = $1 AND owner = $2 RETURNING answer_id",
        turn_id, owner, answer_id,
    )  # fmt: skip


# ---------------------------------------------------------------- daily message counts


async def increment_message_count(
    *, pool: Queryable, tenant_id: str, user_id: str, day: date, hard_limit: int | None
) -> int | None:
    """Count one message of the day, unless the count has reached ``hard_limit``: the new
    count, or None when refused. One statement, so concurrent requests never pass the limit."""
    count = await pool.fetchval(
        "INSERT INTO usage_counters (tenant_id, user_id, day, messages) VALUES ($1, $2, $3, 1) "
        "ON CONFLICT (tenant_id, user_id, day) DO UPDATE "
        "SET messages = usage_counters.messages + 1 "
        "WHERE $4::integer IS NULL OR usage_counters.messages < $4::integer "
        "RETURNING messages",
        tenant_id, user_id, day, hard_limit,
    )  # fmt: skip
    return None if count is None else int(count)


async def refund_message(*, pool: Queryable, tenant_id: str, user_id: str, day: date) -> None:
    """Take back one counted message of the day (the server failed the student)."""
    await pool.execute(
        "UPDATE usage_counters SET messages = messages - 1 "
        "WHERE tenant_id = $1 AND user_id = $2 AND day = $3 AND messages > 0",
        tenant_id, user_id, day,
    )  # fmt: skip
