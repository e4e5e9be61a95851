"""SQL of export, erasure and session retention. Every statement is scoped by tenant.

What is read and deleted per table, and what is deliberately left, is documented in
``export``, ``erasure`` and ``retention`` (and docs/api.md, "Privacy: export and erasure")."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from lectern_common.db.types import Queryable
from lectern_common.events import Subjects

# --- export ------------------------------------------------------------------------------
# Every column of the user's rows but the keys that name the owner (the export's own tenant
# and user) and embeddings, so a column added later is exported without anyone remembering.

EXPORT_QUERIES: dict[str, str] = {
    "sessions": """
        SELECT to_jsonb(s) - 'tenant_id' - 'user_id' FROM chat_sessions s
        WHERE tenant_id = $1 AND user_id = $2 ORDER BY created_at, id""",
    "messages": """
        SELECT to_jsonb(m) - 'tenant_id' - 'user_id' FROM chat_messages m
        JOIN chat_sessions s ON s.id = m.session_id
        WHERE s.tenant_id = $1 AND s.user_id = $2 ORDER BY m.created_at, m.id""",
    "quizzes": """
        SELECT to_jsonb(q) - 'tenant_id' - 'created_by' FROM quizzes q
        WHERE tenant_id = $1 AND created_by = $2 ORDER BY created_at, id""",
    "quiz_attempts": """
        SELECT to_jsonb(a) - 'tenant_id' - 'user_id' || jsonb_build_object('quiz_title', q.title)
        FROM quiz_attempts a LEFT JOIN quizzes q ON q.id = a.quiz_id
        WHERE a.tenant_id = $1 AND a.user_id = $2 ORDER BY a.created_at, a.id""",
    "feedback_flags": """
        SELECT to_jsonb(f) - 'tenant_id' - 'user_id' FROM feedback_flags f
        WHERE tenant_id = $1 AND user_id = $2 ORDER BY created_at, id""",
    "knowledge_gaps": """
        SELECT to_jsonb(g) - 'tenant_id' - 'user_id' FROM knowledge_gaps g
        WHERE tenant_id = $1 AND user_id = $2 ORDER BY created_at, id""",
    "notices": """
        SELECT to_jsonb(n) - 'tenant_id' - 'user_id' FROM student_notices n
        WHERE tenant_id = $1 AND user_id = $2 ORDER BY created_at, id""",
    "usage": """
        SELECT to_jsonb(u) - 'tenant_id' - 'user_id' FROM usage_counters u
        WHERE tenant_id = $1 AND user_id = $2 ORDER BY day""",
    "classes": """
        SELECT to_jsonb(c) - 'tenant_id' - 'user_id' FROM class_members c
        WHERE tenant_id = $1 AND user_id = $2 ORDER BY class_id""",
    # the LMS accounts a launch or roster linked to the user (LTI), as the platform sent them
    "lms_accounts": """
        SELECT jsonb_build_object('issuer', r.issuer, 'client_id', r.client_id, 'sub', u.sub,
                                  'name', u.name, 'given_name', u.given_name,
                                  'family_name', u.family_name, 'email', u.email,
                                  'created_at', u.created_at, 'updated_at', u.updated_at)
        FROM lti_users u JOIN lti_registrations r ON r.id = u.registration_id
        WHERE u.tenant_id = $1 AND u.user_id = $2 ORDER BY u.created_at, u.sub""",
    # quiz scores for an LMS gradebook, sent or waiting
    "lms_scores": """
        SELECT jsonb_build_object('lineitem_url', o.lineitem_url, 'score', o.score,
                                  'status', o.status, 'created_at', o.created_at,
                                  'sent_at', o.sent_at)
        FROM lti_score_outbox o JOIN lti_users u ON u.registration_id = o.registration_id
            AND o.score->>'userId' = u.sub
        WHERE u.tenant_id = $1 AND u.user_id = $2 ORDER BY o.created_at, o.id""",
    # the metadata of documents the user uploaded or co-owns: the course's, not the user's
    "documents": """
        SELECT jsonb_build_object('id', id, 'title', title, 'filename', filename,
                                  'status', status, 'collection', collection,
                                  'created_at', created_at)
        FROM documents WHERE tenant_id = $1 AND (uploaded_by = $2 OR $2 = ANY(co_owners))
        ORDER BY created_at, id""",
    # (the erasure's own event names the user to erase; it is not data about them)
    "events": f"""
        SELECT jsonb_build_object('id', id, 'subject', subject, 'payload', payload,
                                  'created_at', created_at, 'published_at', published_at)
        FROM outbox WHERE payload->>'tenant_id' = $1 AND payload->>'user_id' = $2
          AND subject <> '{Subjects.USERS_ERASED}'
        ORDER BY created_at, id""",  # noqa: S608
}


async def read_user(
    conn: Queryable, *, tenant_id: str, user_id: str
) -> dict[str, list[dict[str, Any]]]:
    """Every row the gateway keeps about the user, by part of the export (call in one
    read-only snapshot; the memory service's parts come from it, ``export``)."""
    found: dict[str, list[dict[str, Any]]] = {}
    for part, sql in EXPORT_QUERIES.items():
        found[part] = [r[0] for r in await conn.fetch(sql, tenant_id, user_id)]
    return found


# --- erasure -----------------------------------------------------------------------------


async def lock_user(conn: Queryable, *, tenant_id: str, user_id: str) -> None:
    """Serialise erasures of one user (transaction-scoped advisory lock)."""
    await conn.execute(
        "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", f"erase:{tenant_id}:{user_id}"
    )


# A gap topic on the quality dashboard is made of the question's own words: the student's
# gaps are taken off their day's counts, and a topic nobody else asked goes.
_UNCOUNT_GAP_TOPICS = """
WITH mine AS (
    SELECT g.tenant_id, (g.created_at AT TIME ZONE 'UTC')::date AS day,
           coalesce(s.persona_slug, '') AS persona, lower(coalesce(s.subject, '')) AS subject,
           coalesce(s.class_id, '') AS class_id, left(g.topic, 200) AS topic,
           count(*)::int AS n
    FROM knowledge_gaps g JOIN chat_sessions s ON s.id = g.session_id
    WHERE g.tenant_id = $1 AND g.user_id = $2 AND g.topic IS NOT NULL
    GROUP BY 1, 2, 3, 4, 5, 6
)
UPDATE quality_gap_topics q SET questions = q.questions - mine.n
FROM mine
WHERE q.tenant_id = mine.tenant_id AND q.day = mine.day AND q.persona = mine.persona
  AND q.subject = mine.subject AND q.class_id = mine.class_id AND q.topic = mine.topic
"""
_DROP_UNCOUNTED = "DELETE FROM quality_gap_topics WHERE tenant_id = $1 AND questions <= 0"

#: (table, statement): the gateway's own rows of a user, deleted in this order (after the
#: gap topics are uncounted, which reads the gaps and their sessions)
_ERASE: list[tuple[str, str]] = [
    ("feedback_flags", "DELETE FROM feedback_flags WHERE tenant_id = $1 AND user_id = $2"),
    ("knowledge_gaps", "DELETE FROM knowledge_gaps WHERE tenant_id = $1 AND user_id = $2"),
    ("student_notices", "DELETE FROM student_notices WHERE tenant_id = $1 AND user_id = $2"),
    # the messages of the user's sessions (the flags on them go too: a foreign key), their
    # kept turn events, then the sessions (found by the sessions' user index)
    (
        "chat_messages",
        "DELETE FROM chat_messages m USING chat_sessions s WHERE m.session_id = s.id "
        "AND s.tenant_id = $1 AND s.user_id = $2",
    ),
    (
        "chat_turns",
        "DELETE FROM chat_turns t USING chat_sessions s WHERE t.session_id = s.id "
        "AND s.tenant_id = $1 AND s.user_id = $2",
    ),
    ("chat_sessions", "DELETE FROM chat_sessions WHERE tenant_id = $1 AND user_id = $2"),
    ("quiz_attempts", "DELETE FROM quiz_attempts WHERE tenant_id = $1 AND user_id = $2"),
    # a quiz the user drew for themselves; one a teacher assigned to a class is the class's
    (
        "quizzes",
        "DELETE FROM quizzes WHERE tenant_id = $1 AND created_by = $2 "
        "AND assigned_class_id IS NULL",
    ),
    ("usage_counters", "DELETE FROM usage_counters WHERE tenant_id = $1 AND user_id = $2"),
    ("class_members", "DELETE FROM class_members WHERE tenant_id = $1 AND user_id = $2"),
    # LTI: the user's scores for LMS gradebooks (found by their platform sub), where their
    # scores go, the rosters that put them on classes, then the link to their LMS account
    (
        "lti_score_outbox",
        "DELETE FROM lti_score_outbox o USING lti_users u WHERE u.tenant_id = $1 "
        "AND u.user_id = $2 AND o.registration_id = u.registration_id "
        "AND o.score->>'userId' = u.sub",
    ),
    ("lti_grade_links", "DELETE FROM lti_grade_links WHERE tenant_id = $1 AND user_id = $2"),
    (
        "lti_roster_members",
        "DELETE FROM lti_roster_members WHERE tenant_id = $1 AND user_id = $2",
    ),
    ("lti_users", "DELETE FROM lti_users WHERE tenant_id = $1 AND user_id = $2"),
    # events about the user not yet relayed, and relayed ones kept until pruned (except
    # an earlier erasure's own event, which must reach every service)
    (
        "outbox",
        f"DELETE FROM outbox WHERE subject <> '{Subjects.USERS_ERASED}' "  # noqa: S608
        "AND payload->>'tenant_id' = $1 AND payload->>'user_id' = $2",
    ),
    # webhook deliveries of events about the user, sent or not (their attempts go too: a
    # foreign key); the erasure's own event still goes out to the subscribers
    (
        "webhook_deliveries",
        f"DELETE FROM webhook_deliveries WHERE event_type <> '{Subjects.USERS_ERASED}' "  # noqa: S608
        "AND tenant_id = $1 AND payload::jsonb->>'user_id' = $2",
    ),
]


async def erase_gateway_rows(conn: Queryable, *, tenant_id: str, user_id: str) -> dict[str, int]:
    """Delete the gateway's rows of the user; rows deleted (or uncounted) per table."""
    status: str = await conn.execute(_UNCOUNT_GAP_TOPICS, tenant_id, user_id)
    counts = {"quality_gap_topics": int(status.split()[-1])}
    await conn.execute(_DROP_UNCOUNTED, tenant_id)
    for table, sql in _ERASE:
        status = await conn.execute(sql, tenant_id, user_id)
        counts[table] = int(status.split()[-1])
    return counts


async def tombstone(conn: Queryable, *, tenant_id: str, user_key: str) -> dict[str, Any] | None:
    """The user's erasure record, if they were erased."""
    row = await conn.fetchrow(
        "SELECT erased_at, event_id, erased_by FROM erased_users "
        "WHERE tenant_id = $1 AND user_key = $2",
        tenant_id,
        user_key,
    )
    return dict(row) if row else None


async def record_erasure(
    conn: Queryable,
    *,
    tenant_id: str,
    user_key: str,
    erased_at: datetime,
    event_id: uuid.UUID,
    erased_by: str,
) -> None:
    """Remember the erasure (the latest one, when a user returned and was erased again)."""
    await conn.execute(
        "INSERT INTO erased_users (tenant_id, user_key, erased_at, event_id, erased_by) "
        "VALUES ($1, $2, $3, $4, $5) ON CONFLICT (tenant_id, user_key) DO UPDATE SET "
        "erased_at = EXCLUDED.erased_at, event_id = EXCLUDED.event_id, "
        "erased_by = EXCLUDED.erased_by",
        tenant_id, user_key, erased_at, event_id, erased_by,
    )  # fmt: skip


# --- retention ---------------------------------------------------------------------------


async def retention_settings(pool: Queryable) -> list[tuple[str, int]]:
    """(tenant, days) of every tenant that has sessions deleted after a number of days."""
    rows = await pool.fetch(
        "SELECT tenant_id, session_retention_days FROM tenant_settings "
        "WHERE session_retention_days IS NOT NULL ORDER BY tenant_id"
    )
    return [(str(r["tenant_id"]), int(r["session_retention_days"])) for r in rows]


async def expire_sessions(
    conn: Queryable, *, tenant_id: str, days: int, limit: int
) -> list[uuid.UUID]:
    """Delete up to ``limit`` sessions of the tenant idle for more than ``days`` days, with
    their messages, turns and flags (foreign keys), knowledge gaps and notices; returns
    their ids. Rows another replica is deleting are skipped (``SKIP LOCKED``)."""
    rows = await conn.fetch(
        "SELECT id FROM chat_sessions WHERE tenant_id = $1 "
        "AND last_activity_at < now() - make_interval(days => $2) "
        "ORDER BY last_activity_at LIMIT $3 FOR UPDATE SKIP LOCKED",
        tenant_id, days, limit,
    )  # fmt: skip
    ids: list[uuid.UUID] = [r["id"] for r in rows]
    if not ids:
        return []
    for sql in (
        "DELETE FROM knowledge_gaps WHERE tenant_id = $1 AND session_id = ANY($2::uuid[])",
        "DELETE FROM student_notices WHERE tenant_id = $1 AND session_id = ANY($2::uuid[])",
        "DELETE FROM chat_sessions WHERE tenant_id = $1 AND id = ANY($2::uuid[])",
    ):
        await conn.execute(sql, tenant_id, ids)
    return ids


async def expire_gap_topics(conn: Queryable, *, tenant_id: str, days: int) -> int:
    """Delete the dashboard's gap topics (students' words) of days past the retention."""
    status: str = await conn.execute(
        "DELETE FROM quality_gap_topics WHERE tenant_id = $1 "
        "AND day < (now() AT TIME ZONE 'UTC')::date - $2::int",
        tenant_id,
        days,
    )
    return int(status.split()[-1])
