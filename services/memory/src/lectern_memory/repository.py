"""SQL of the memory service."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

import numpy as np

from lectern_common.db.types import Queryable
from lectern_common.events import ChatTurnCompleted, FeedbackFlagged

#: evidence items kept per memory (the newest)
MAX_EVIDENCE = 20


async def record_turn(conn: Queryable, event: ChatTurnCompleted) -> None:
    """Keep one turn's signals; a re-delivered turn changes nothing."""
    await conn.execute(
        """INSERT INTO memory_turn_signals (assistant_message_id, session_id, tenant_id, user_id,
               question, answer, band, confidence, knowledge_gap, topic, occurred_at, topics,
               answered_by)
           VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)
           ON CONFLICT (assistant_message_id) DO NOTHING""",
        event.assistant_message_id, event.session_id, event.tenant_id, event.user_id,
        event.question, event.answer, event.band, event.confidence, event.knowledge_gap,
        event.topic, event.occurred_at, event.topics, event.answered_by,
    )  # fmt: skip


async def record_flag(conn: Queryable, event: FeedbackFlagged) -> None:
    """Keep a flag on an answer; a re-delivered flag changes nothing."""
    await conn.execute(
        """INSERT INTO memory_flags (flag_id, tenant_id, message_id, session_id, user_id,
               flagged_at)
           VALUES ($1, $2, $3, $4, $5, $6)
           ON CONFLICT (flag_id) DO NOTHING""",
        event.flag_id, event.tenant_id, event.message_id, event.session_id, event.user_id,
        event.occurred_at,
    )  # fmt: skip


async def flagged_messages(conn: Queryable, *, tenant_id: str, session_id: uuid.UUID) -> int:
    """How many messages of the session have a flag recorded."""
    count: int = await conn.fetchval(
        "SELECT count(DISTINCT message_id) FROM memory_flags "
        "WHERE tenant_id = $1 AND session_id = $2",
        tenant_id,
        session_id,
    )
    return count


async def session_turns(conn: Queryable, *, tenant_id: str, session_id: uuid.UUID) -> list[Any]:
    """The session's turns, oldest first, with whether the student flagged each answer (a
    flag recorded before its turn counts as well)."""
    return list(
        await conn.fetch(
            """SELECT s.question, s.answer, s.band, s.confidence, s.knowledge_gap, s.topic,
                      s.occurred_at, s.topics, s.answered_by,
                      EXISTS (SELECT 1 FROM memory_flags f
                              WHERE f.message_id = s.assistant_message_id
                                AND f.tenant_id = s.tenant_id) AS flagged
               FROM memory_turn_signals s
               WHERE s.tenant_id = $1 AND s.session_id = $2
               ORDER BY s.occurred_at, s.assistant_message_id""",
            tenant_id,
            session_id,
        )
    )


async def lock_user(conn: Queryable, *, tenant_id: str, user_id: str) -> None:
    """Serialise memory merges of one student (transaction-scoped advisory lock)."""
    await conn.execute(
        "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", f"memory:{tenant_id}:{user_id}"
    )


async def distillation(conn: Queryable, *, session_id: uuid.UUID) -> Any:
    """The recorded distillation of a session, if any."""
    return await conn.fetchrow(
        "SELECT created, updated, distiller FROM memory_distillations WHERE session_id = $1",
        session_id,
    )


async def record_distillation(
    conn: Queryable,
    *,
    session_id: uuid.UUID,
    tenant_id: str,
    user_id: str,
    created: list[uuid.UUID],
    updated: list[uuid.UUID],
    distiller: str,
) -> None:
    """Mark a session distilled (the idempotency key)."""
    await conn.execute(
        """INSERT INTO memory_distillations
               (session_id, tenant_id, user_id, created, updated, distiller)
           VALUES ($1, $2, $3, $4, $5, $6)""",
        session_id, tenant_id, user_id, created, updated, distiller,
    )  # fmt: skip


async def nearest(
    conn: Queryable,
    *,
    tenant_id: str,
    user_id: str,
    embedding: np.ndarray,
    kinds: list[str],
) -> Any:
    """The student's most similar memory among ``kinds``, with its cosine similarity."""
    return await conn.fetchrow(
        """SELECT id, kind, topic, strength, 1 - (embedding <=> $3) AS similarity
           FROM user_memories
           WHERE tenant_id = $1 AND user_id = $2 AND kind = ANY($4::text[])
           ORDER BY (embedding <=> $3) + 0
           LIMIT 1""",
        tenant_id,
        user_id,
        embedding,
        kinds,
    )


async def on_topic(conn: Queryable, *, tenant_id: str, user_id: str, kind: str, topic: str) -> Any:
    """The student's memory of ``kind`` on ``topic`` (whatever its case), if there is one."""
    row = await conn.fetchrow(
        """SELECT id, evidence FROM user_memories
           WHERE tenant_id = $1 AND user_id = $2 AND kind = $3 AND lower(topic) = lower($4)
           ORDER BY updated_at DESC LIMIT 1""",
        tenant_id, user_id, kind, topic,
    )  # fmt: skip
    return None if row is None else {"id": row["id"], "evidence": list(row["evidence"] or [])}


async def insert_memory(
    conn: Queryable,
    *,
    tenant_id: str,
    user_id: str,
    kind: str,
    text: str,
    topic: str | None,
    session_id: uuid.UUID | None,
    embedding: np.ndarray,
    evidence: list[dict[str, str]],
) -> uuid.UUID:
    """Add a memory; returns its id."""
    memory_id = uuid.uuid4()
    await conn.execute(
        """INSERT INTO user_memories
               (id, tenant_id, user_id, kind, text, topic, source_session_id, embedding,
                evidence)
           VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9::jsonb)""",
        memory_id, tenant_id, user_id, kind, text, topic, session_id, embedding,
        evidence[-MAX_EVIDENCE:],
    )  # fmt: skip
    return memory_id


async def update_memory(
    conn: Queryable,
    *,
    memory_id: uuid.UUID,
    kind: str,
    text: str,
    topic: str | None,
    session_id: uuid.UUID | None,
    embedding: np.ndarray,
    strengthen: bool,
    evidence: list[dict[str, str]],
) -> None:
    """Rewrite a memory in place (a twin strengthens it; a new kind resets strength); the
    new evidence is added to the old (the last ``MAX_EVIDENCE`` items are kept)."""
    await conn.execute(
        """UPDATE user_memories
           SET kind = $2, text = $3, topic = coalesce($4, topic), source_session_id = $5,
               embedding = $6, updated_at = now(),
               strength = CASE WHEN $7 THEN strength + 1 ELSE 1 END,
               evidence = (SELECT coalesce(jsonb_agg(e ORDER BY n), '[]'::jsonb) FROM (
                   SELECT e, n FROM jsonb_array_elements(evidence || $8::jsonb)
                        WITH ORDINALITY AS t(e, n)
                   ORDER BY n DESC LIMIT $9) kept)
           WHERE id = $1""",
        memory_id, kind, text, topic, session_id, embedding, strengthen,
        evidence, MAX_EVIDENCE,
    )  # fmt: skip


async def recall_candidates(
    conn: Queryable, *, tenant_id: str, user_id: str, embedding: np.ndarray, limit: int
) -> list[Any]:
    """The student's memories nearest the query (exact: filtered first, then ranked)."""
    # "+ 0" keeps the planner on the (tenant, user) btree: an exact ranking of this student's
    # memories, never an approximate HNSW walk that a per-user filter could starve.
    return list(
        await conn.fetch(
            """SELECT id, kind, text, topic, strength, updated_at,
                      1 - (embedding <=> $3) AS similarity
               FROM user_memories
               WHERE tenant_id = $1 AND user_id = $2
               ORDER BY (embedding <=> $3) + 0
               LIMIT $4""",
            tenant_id,
            user_id,
            embedding,
            limit,
        )
    )


def age_days(updated_at: datetime, now: datetime) -> float:
    """Age in days."""
    return max(0.0, (now - updated_at).total_seconds() / 86400.0)


async def claim_quiz_attempt(conn: Queryable, attempt_id: uuid.UUID, tenant_id: str) -> bool:
    """Mark a quiz attempt recorded; False when it already was (a redelivery)."""
    claimed = await conn.fetchval(
        "INSERT INTO memory_quiz_attempts (attempt_id, tenant_id) VALUES ($1, $2) "
        "ON CONFLICT DO NOTHING RETURNING attempt_id",
        attempt_id,
        tenant_id,
    )
    return claimed is not None


async def tally_quiz_topic(
    conn: Queryable, *, tenant_id: str, user_id: str, topic: str, right: bool, counts_wrong: bool
) -> int:
    """Count an attempt's outcome on a topic (anything but right ends the run of right
    answers; ``counts_wrong`` adds to the wrong ones); returns the run of right attempts."""
    streak: int = await conn.fetchval(
        """INSERT INTO memory_quiz_topics (tenant_id, user_id, topic, right_streak, wrong_total)
           VALUES ($1, $2, $3, CASE WHEN $4 THEN 1 ELSE 0 END, CASE WHEN $5 THEN 1 ELSE 0 END)
           ON CONFLICT (tenant_id, user_id, topic) DO UPDATE SET
               right_streak = CASE WHEN $4 THEN memory_quiz_topics.right_streak + 1 ELSE 0 END,
               wrong_total = memory_quiz_topics.wrong_total + CASE WHEN $5 THEN 1 ELSE 0 END,
               updated_at = now()
           RETURNING right_streak""",
        tenant_id, user_id, topic, right, counts_wrong,
    )  # fmt: skip
    return streak


async def check_runs(
    conn: Queryable, *, tenant_id: str, user_id: str, units: list[str]
) -> dict[str, Any]:
    """The user's runs of right checks on these units (``lectern_memory.mastery``), by unit."""
    rows = await conn.fetch(
        "SELECT * FROM memory_check_runs WHERE tenant_id = $1 AND user_id = $2 "
        "AND unit = ANY($3::text[])",
        tenant_id, user_id, units,
    )  # fmt: skip
    return {r["unit"]: r for r in rows}


async def put_check_run(
    conn: Queryable,
    *,
    tenant_id: str,
    user_id: str,
    unit: str,
    session_id: uuid.UUID,
    session_right: bool,
    sessions_running: int,
    topics: list[str],
    earlier_topics: list[str],
    mastered_id: uuid.UUID | None,
    answered_at: datetime,
) -> None:
    """Write a unit's run."""
    await conn.execute(
        """INSERT INTO memory_check_runs (tenant_id, user_id, unit, session_id, session_right,
               sessions_running, topics, earlier_topics, mastered_id, answered_at)
           VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
           ON CONFLICT (tenant_id, user_id, unit) DO UPDATE SET
               session_id = EXCLUDED.session_id, session_right = EXCLUDED.session_right,
               sessions_running = EXCLUDED.sessions_running, topics = EXCLUDED.topics,
               earlier_topics = EXCLUDED.earlier_topics, mastered_id = EXCLUDED.mastered_id,
               answered_at = greatest(memory_check_runs.answered_at, EXCLUDED.answered_at),
               updated_at = now()""",
        tenant_id, user_id, unit, session_id, session_right, sessions_running, topics,
        earlier_topics, mastered_id, answered_at,
    )  # fmt: skip


async def mark_mastered(
    conn: Queryable, *, tenant_id: str, user_id: str, units: list[str], memory_id: uuid.UUID
) -> None:
    """Record the 'mastered' memory that ``units`` made, for a later wrong answer to withdraw."""
    await conn.execute(
        "UPDATE memory_check_runs SET mastered_id = $4 WHERE tenant_id = $1 AND user_id = $2 "
        "AND unit = ANY($3::text[])",
        tenant_id, user_id, units, memory_id,
    )  # fmt: skip


async def withdraw_mastered(conn: Queryable, *, tenant_id: str, memory_ids: list[uuid.UUID]) -> int:
    """Delete the 'mastered' memories a later wrong answer withdrew (one a struggle has since
    replaced is a struggle now and stays); how many."""
    status: str = await conn.execute(
        "DELETE FROM user_memories WHERE tenant_id = $1 AND id = ANY($2::uuid[]) "
        "AND kind = 'mastered'",
        tenant_id, memory_ids,
    )  # fmt: skip
    return int(status.split()[-1])


async def forget_sessions(conn: Queryable, *, tenant_id: str, session_ids: list[uuid.UUID]) -> int:
    """Delete the turn signals and flags of sessions the gateway deleted; how many turn
    signals."""
    await conn.execute(
        "DELETE FROM memory_check_runs WHERE tenant_id = $1 AND session_id = ANY($2::uuid[])",
        tenant_id,
        session_ids,
    )
    await conn.execute(
        "DELETE FROM memory_flags WHERE tenant_id = $1 AND session_id = ANY($2::uuid[])",
        tenant_id,
        session_ids,
    )
    status: str = await conn.execute(
        "DELETE FROM memory_turn_signals WHERE tenant_id = $1 AND session_id = ANY($2::uuid[])",
        tenant_id,
        session_ids,
    )
    return int(status.split()[-1])


# --- what the gateway asks about the rows this service owns (``records``) ------------------

_MEMORY_COLUMNS = (
    "id, kind, text, topic, strength, source_session_id, created_at, updated_at, evidence"
)


async def user_memories(
    conn: Queryable, *, tenant_id: str, user_id: str, kinds: list[str]
) -> list[dict[str, Any]]:
    """A user's memories (of ``kinds``; empty: all), newest first."""
    rows = await conn.fetch(
        f"SELECT {_MEMORY_COLUMNS} FROM user_memories WHERE tenant_id = $1 "  # noqa: S608
        "AND user_id = $2 AND (cardinality($3::text[]) = 0 OR kind = ANY($3::text[])) "
        "ORDER BY updated_at DESC",
        tenant_id, user_id, kinds,
    )  # fmt: skip
    return [dict(r) for r in rows]


async def forget(
    conn: Queryable, *, tenant_id: str, user_id: str, memory_id: uuid.UUID | None
) -> int:
    """Delete one memory of the user (``memory_id``) or all of them; how many were deleted."""
    status: str = await conn.execute(
        "DELETE FROM user_memories WHERE tenant_id = $1 AND user_id = $2 "
        "AND ($3::uuid IS NULL OR id = $3)",
        tenant_id, user_id, memory_id,
    )  # fmt: skip
    return int(status.split()[-1])


async def topics(
    conn: Queryable, *, tenant_id: str, user_ids: list[str], kind: str, min_users: int, limit: int
) -> list[dict[str, Any]]:
    """Topics of ``kind`` memories over ``user_ids``: users, evidence and strength of each,
    for topics at least ``min_users`` of them have."""
    rows = await conn.fetch(
        "SELECT topic, count(DISTINCT user_id)::int AS users, "
        "sum(jsonb_array_length(evidence))::int AS evidence, max(strength) AS strength "
        "FROM user_memories WHERE tenant_id = $1 AND user_id = ANY($2::text[]) "
        "AND kind = $3 AND topic IS NOT NULL GROUP BY topic "
        "HAVING count(DISTINCT user_id) >= $4 "
        "ORDER BY users DESC, evidence DESC, topic LIMIT $5",
        tenant_id, user_ids, kind, min_users, limit,
    )  # fmt: skip
    return [dict(r) for r in rows]


#: the user's rows of each table, every column but the owner's keys and embeddings
EXPORT_QUERIES: dict[str, str] = {
    "memories": """
        SELECT to_jsonb(m) - 'tenant_id' - 'user_id' - 'embedding' FROM user_memories m
        WHERE tenant_id = $1 AND user_id = $2 ORDER BY created_at, id""",
    "quiz_tallies": """
        SELECT to_jsonb(t) - 'tenant_id' - 'user_id' FROM memory_quiz_topics t
        WHERE tenant_id = $1 AND user_id = $2 ORDER BY topic""",
    "check_runs": """
        SELECT to_jsonb(r) - 'tenant_id' - 'user_id' FROM memory_check_runs r
        WHERE tenant_id = $1 AND user_id = $2 ORDER BY unit""",
    "turn_signals": """
        SELECT to_jsonb(t) - 'tenant_id' - 'user_id' FROM memory_turn_signals t
        WHERE tenant_id = $1 AND user_id = $2 ORDER BY occurred_at, assistant_message_id""",
    "distillations": """
        SELECT to_jsonb(d) - 'tenant_id' - 'user_id' FROM memory_distillations d
        WHERE tenant_id = $1 AND user_id = $2 ORDER BY distilled_at, session_id""",
}


async def export_user(conn: Queryable, *, tenant_id: str, user_id: str) -> dict[str, list[Any]]:
    """Every row kept about the user, by part (call in one read-only snapshot)."""
    return {
        part: [r[0] for r in await conn.fetch(sql, tenant_id, user_id)]
        for part, sql in EXPORT_QUERIES.items()
    }
