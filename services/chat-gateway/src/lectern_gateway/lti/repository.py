"""SQL of the LTI domain: registrations and deployments, the tool's keys, login states, user
and course links, placed links, deep-linking requests and the score outbox (jsonb parameters
are Python values: the pool's codec encodes them)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from typing import Any

from lectern_common.db.types import Queryable

_REGISTRATION_COLUMNS = (
    "r.id, r.tenant_id, r.issuer, r.client_id, r.name, r.auth_url, r.token_url, r.jwks_url, "
    "r.token_audience, r.source, r.created_by, r.created_at, r.updated_at, "
    "coalesce((SELECT array_agg(d.deployment_id ORDER BY d.deployment_id) FROM lti_deployments d "
    "WHERE d.registration_id = r.id), '{}') AS deployment_ids"
)


# --- registrations --------------------------------------------------------------------------


async def insert_registration(conn: Queryable, values: dict[str, Any]) -> uuid.UUID:
    """Store a registration (the caller adds its deployments); its id."""
    registration_id = uuid.uuid4()
    await conn.execute(
        "INSERT INTO lti_registrations (id, tenant_id, issuer, client_id, name, auth_url, "
        "token_url, jwks_url, token_audience, source, platform_config, created_by) "
        "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11::jsonb, $12)",
        registration_id,
        values["tenant_id"],
        values["issuer"],
        values["client_id"],
        values.get("name"),
        values["auth_url"],
        values["token_url"],
        values["jwks_url"],
        values.get("token_audience"),
        values.get("source", "manual"),
        values.get("platform_config"),
        values.get("created_by"),
    )
    return registration_id


async def update_registration(
    conn: Queryable, *, tenant_id: str, registration_id: uuid.UUID, changes: dict[str, Any]
) -> bool:
    """Change the named columns of a registration of the tenant; False when there is none."""
    sets = ["updated_at = now()"]
    args: list[Any] = [registration_id, tenant_id]
    for column in ("name", "auth_url", "token_url", "jwks_url", "token_audience"):
        if column in changes:
            args.append(changes[column])
            sets.append(f"{column} = ${len(args)}")
    found = await conn.fetchval(
        f"UPDATE lti_registrations SET {', '.join(sets)} "  # noqa: S608
        "WHERE id = $1 AND tenant_id = $2 RETURNING id",
        *args,
    )
    return found is not None


async def set_deployments(
    conn: Queryable, *, registration_id: uuid.UUID, deployment_ids: Sequence[str]
) -> None:
    """Make the registration's deployments exactly ``deployment_ids`` (raises
    ``asyncpg.UniqueViolationError`` when another registration holds one of them)."""
    row = await conn.fetchrow(
        "SELECT tenant_id, issuer, client_id FROM lti_registrations WHERE id = $1",
        registration_id,
    )
    await conn.execute(
        "DELETE FROM lti_deployments WHERE registration_id = $1 "
        "AND NOT deployment_id = ANY($2::text[])",
        registration_id,
        list(deployment_ids),
    )
    await conn.execute(
        "INSERT INTO lti_deployments (issuer, client_id, deployment_id, registration_id, "
        "tenant_id) SELECT $1, $2, d, $3, $4 FROM unnest($5::text[]) AS d "
        "ON CONFLICT (issuer, client_id, deployment_id) DO UPDATE "
        "SET registration_id = EXCLUDED.registration_id "
        "WHERE lti_deployments.registration_id = EXCLUDED.registration_id",
        row["issuer"],
        row["client_id"],
        registration_id,
        row["tenant_id"],
        list(deployment_ids),
    )
    held = await conn.fetch(
        "SELECT deployment_id FROM lti_deployments WHERE issuer = $1 AND client_id = $2 "
        "AND deployment_id = ANY($3::text[]) AND registration_id <> $4",
        row["issuer"],
        row["client_id"],
        list(deployment_ids),
        registration_id,
    )
    if held:
        raise DeploymentTaken([r["deployment_id"] for r in held])


class DeploymentTaken(Exception):
    """A deployment id of this (issuer, client id) is registered elsewhere already."""

    def __init__(self, deployment_ids: list[str]) -> None:
        super().__init__(", ".join(deployment_ids))
        self.deployment_ids = deployment_ids


async def list_registrations(pool: Queryable, *, tenant_id: str) -> list[dict[str, Any]]:
    """The tenant's registrations, newest first, each with its deployment ids."""
    rows = await pool.fetch(
        f"SELECT {_REGISTRATION_COLUMNS} FROM lti_registrations r "  # noqa: S608
        "WHERE r.tenant_id = $1 ORDER BY r.created_at DESC, r.id",
        tenant_id,
    )
    return [dict(r) for r in rows]


async def get_registration(
    pool: Queryable, *, tenant_id: str, registration_id: uuid.UUID
) -> dict[str, Any] | None:
    """One registration of the tenant, or None."""
    row = await pool.fetchrow(
        f"SELECT {_REGISTRATION_COLUMNS} FROM lti_registrations r "  # noqa: S608
        "WHERE r.id = $1 AND r.tenant_id = $2",
        registration_id,
        tenant_id,
    )
    return dict(row) if row else None


async def registration_by_id(pool: Queryable, registration_id: uuid.UUID) -> dict[str, Any] | None:
    """A registration of any tenant (the worker posting a score), or None."""
    row = await pool.fetchrow(
        f"SELECT {_REGISTRATION_COLUMNS} FROM lti_registrations r WHERE r.id = $1",  # noqa: S608
        registration_id,
    )
    return dict(row) if row else None


async def delete_registration(
    pool: Queryable, *, tenant_id: str, registration_id: uuid.UUID
) -> bool:
    """Delete a registration with its deployments and links (Lectern's users, classes and
    their work stay); False when the tenant has none of that id."""
    deleted = await pool.fetchval(
        "DELETE FROM lti_registrations WHERE id = $1 AND tenant_id = $2 RETURNING id",
        registration_id,
        tenant_id,
    )
    return deleted is not None


async def deployment(
    pool: Queryable, *, issuer: str, client_id: str, deployment_id: str
) -> dict[str, Any] | None:
    """The registration that holds (issuer, client id, deployment id), or None."""
    row = await pool.fetchrow(
        f"SELECT {_REGISTRATION_COLUMNS} FROM lti_deployments d0 "  # noqa: S608
        "JOIN lti_registrations r ON r.id = d0.registration_id "
        "WHERE d0.issuer = $1 AND d0.client_id = $2 AND d0.deployment_id = $3",
        issuer,
        client_id,
        deployment_id,
    )
    return dict(row) if row else None


async def login_candidates(
    pool: Queryable, *, issuer: str, client_id: str | None
) -> list[dict[str, Any]]:
    """Registrations of ``issuer`` (and ``client_id`` when given) that have a deployment:
    their client id and authorization endpoint."""
    rows = await pool.fetch(
        "SELECT DISTINCT r.client_id, r.auth_url FROM lti_registrations r "
        "JOIN lti_deployments d ON d.registration_id = r.id "
        "WHERE r.issuer = $1 AND ($2::text IS NULL OR r.client_id = $2)",
        issuer,
        client_id,
    )
    return [dict(r) for r in rows]


# --- the tool's keys ------------------------------------------------------------------------


async def lock_keys(conn: Queryable) -> None:
    """Serialise key creation and rotation across replicas (inside a transaction)."""
    await conn.execute("SELECT pg_advisory_xact_lock(hashtext('lectern.lti_tool_keys'))")


async def signing_key(conn: Queryable) -> dict[str, Any] | None:
    """The key that signs now: the newest not retired."""
    row = await conn.fetchrow(
        "SELECT kid, private_pem FROM lti_tool_keys WHERE retired_at IS NULL "
        "ORDER BY created_at DESC, kid LIMIT 1"
    )
    return dict(row) if row else None


async def insert_key(
    conn: Queryable, *, kid: str, private_pem: str, public_jwk: dict[str, Any]
) -> None:
    """Store a new key."""
    await conn.execute(
        "INSERT INTO lti_tool_keys (kid, private_pem, public_jwk) VALUES ($1, $2, $3::jsonb)",
        kid,
        private_pem,
        public_jwk,
    )


async def retire_keys(conn: Queryable, *, except_kid: str, publish_for_s: float) -> list[str]:
    """Retire every signing key but ``except_kid``; each stays published ``publish_for_s``."""
    rows = await conn.fetch(
        "UPDATE lti_tool_keys SET retired_at = now(), "
        "publish_until = now() + make_interval(secs => $2) "
        "WHERE retired_at IS NULL AND kid <> $1 RETURNING kid",
        except_kid,
        publish_for_s,
    )
    return [r["kid"] for r in rows]


async def published_keys(pool: Queryable) -> list[dict[str, Any]]:
    """The public keys to publish: the signing key and retired keys still within their time."""
    rows = await pool.fetch(
        "SELECT kid, public_jwk, created_at, retired_at, publish_until FROM lti_tool_keys "
        "WHERE publish_until IS NULL OR publish_until > now() ORDER BY created_at DESC, kid"
    )
    return [{**dict(r), "public_jwk": _json(r["public_jwk"])} for r in rows]


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


# --- OIDC login states ----------------------------------------------------------------------


async def insert_state(pool: Queryable, values: dict[str, Any], *, ttl_s: float) -> None:
    """A login's state and nonce, expiring in ``ttl_s``; expired rows of others go."""
    await pool.execute(
        "INSERT INTO lti_oidc_states (state, nonce, issuer, client_id, deployment_id, "
        "browser_sha256, expires_at, auth_url) VALUES ($1, $2, $3, $4, $5, $6, "
        "now() + make_interval(secs => $7), $8)",
        values["state"],
        values["nonce"],
        values["issuer"],
        values["client_id"],
        values.get("deployment_id"),
        values["browser_sha256"],
        ttl_s,
        values["auth_url"],
    )
    await pool.execute("DELETE FROM lti_oidc_states WHERE expires_at < now() - interval '1 day'")


async def get_state(pool: Queryable, state: str) -> dict[str, Any] | None:
    """A login state with whether it is expired, or None."""
    row = await pool.fetchrow(
        "SELECT *, expires_at < now() AS expired FROM lti_oidc_states WHERE state = $1", state
    )
    return dict(row) if row else None


async def use_state(pool: Queryable, state: str) -> bool:
    """Mark a live state used; False when it was used already or expired (used once)."""
    used = await pool.fetchval(
        "UPDATE lti_oidc_states SET used_at = now() WHERE state = $1 AND used_at IS NULL "
        "AND expires_at >= now() RETURNING state",
        state,
    )
    return used is not None


# --- users, courses, links ------------------------------------------------------------------


async def upsert_users(
    conn: Queryable,
    *,
    registration_id: uuid.UUID,
    tenant_id: str,
    people: Sequence[dict[str, Any]],
) -> dict[str, str]:
    """Create or update the Lectern users of platform users (``sub`` and the name and email
    fields as sent: a field not sent is left as it was); their user ids by ``sub``."""
    rows = await conn.fetch(
        """
        INSERT INTO lti_users AS u (registration_id, sub, tenant_id, user_id, name, given_name,
                                    family_name, email)
        SELECT $1, p.sub, $2, 'lti-' || replace(gen_random_uuid()::text, '-', ''),
               p.name, p.given_name, p.family_name, p.email
        FROM jsonb_to_recordset($3::jsonb)
             AS p(sub text, name text, given_name text, family_name text, email text)
        ON CONFLICT (registration_id, sub) DO UPDATE SET
            name = coalesce(EXCLUDED.name, u.name),
            given_name = coalesce(EXCLUDED.given_name, u.given_name),
            family_name = coalesce(EXCLUDED.family_name, u.family_name),
            email = coalesce(EXCLUDED.email, u.email),
            updated_at = now()
        RETURNING sub, user_id
        """,
        registration_id,
        tenant_id,
        list(people),
    )
    return {r["sub"]: r["user_id"] for r in rows}


async def upsert_context(conn: Queryable, values: dict[str, Any]) -> str:
    """Create or update the course of a launch; the class it maps to."""
    class_id: str = await conn.fetchval(
        """
        INSERT INTO lti_contexts AS c (registration_id, context_id, tenant_id, class_id, title,
                                       label, memberships_url, lineitems_url)
        VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
        ON CONFLICT (registration_id, context_id) DO UPDATE SET
            title = coalesce(EXCLUDED.title, c.title),
            label = coalesce(EXCLUDED.label, c.label),
            memberships_url = coalesce(EXCLUDED.memberships_url, c.memberships_url),
            lineitems_url = coalesce(EXCLUDED.lineitems_url, c.lineitems_url),
            updated_at = now()
        RETURNING class_id
        """,
        values["registration_id"],
        values["context_id"],
        values["tenant_id"],
        values["class_id"],
        values.get("title"),
        values.get("label"),
        values.get("memberships_url"),
        values.get("lineitems_url"),
    )
    return class_id


async def context_of_class(
    pool: Queryable, *, tenant_id: str, class_id: str
) -> dict[str, Any] | None:
    """The course a class came from, or None."""
    row = await pool.fetchrow(
        "SELECT * FROM lti_contexts WHERE tenant_id = $1 AND class_id = $2", tenant_id, class_id
    )
    return dict(row) if row else None


async def roster_due(
    conn: Queryable, *, tenant_id: str, class_id: str, older_than_s: float
) -> bool:
    """Whether the class's roster was never synced or last synced more than that long ago."""
    due = await conn.fetchval(
        "SELECT memberships_url IS NOT NULL AND (roster_synced_at IS NULL OR "
        "roster_synced_at < now() - make_interval(secs => $3)) "
        "FROM lti_contexts WHERE tenant_id = $1 AND class_id = $2",
        tenant_id,
        class_id,
        older_than_s,
    )
    return bool(due)


async def join_class(
    conn: Queryable, *, tenant_id: str, class_id: str, user_ids: Sequence[str]
) -> None:
    """Put students on a class's roster (``class_members``), noting that LTI put them there."""
    await conn.execute(
        "INSERT INTO class_members (tenant_id, class_id, user_id, added_by) "
        "SELECT $1, $2, u, 'lti' FROM unnest($3::text[]) AS u "
        "ON CONFLICT (tenant_id, class_id, user_id) DO NOTHING",
        tenant_id,
        class_id,
        list(user_ids),
    )
    # only the memberships LTI made: a student a teacher put on the class stays theirs
    await conn.execute(
        "INSERT INTO lti_roster_members (tenant_id, class_id, user_id) "
        "SELECT m.tenant_id, m.class_id, m.user_id FROM class_members m "
        "WHERE m.tenant_id = $1 AND m.class_id = $2 AND m.user_id = ANY($3::text[]) "
        "AND m.added_by = 'lti' "
        "ON CONFLICT (tenant_id, class_id, user_id) DO UPDATE SET synced_at = now()",
        tenant_id,
        class_id,
        list(user_ids),
    )


async def remove_left(
    conn: Queryable, *, tenant_id: str, class_id: str, keep: Sequence[str]
) -> list[str]:
    """Take off the class's roster the students LTI put there who are not in ``keep`` (their
    sessions, memories and attempts stay); who was taken off."""
    rows = await conn.fetch(
        "DELETE FROM lti_roster_members WHERE tenant_id = $1 AND class_id = $2 "
        "AND NOT user_id = ANY($3::text[]) RETURNING user_id",
        tenant_id,
        class_id,
        list(keep),
    )
    left = [r["user_id"] for r in rows]
    await conn.execute(
        "DELETE FROM class_members WHERE tenant_id = $1 AND class_id = $2 "
        "AND user_id = ANY($3::text[])",
        tenant_id,
        class_id,
        left,
    )
    return left


async def mark_roster_synced(conn: Queryable, *, tenant_id: str, class_id: str) -> None:
    """Note the time of the class's last roster sync."""
    await conn.execute(
        "UPDATE lti_contexts SET roster_synced_at = now() WHERE tenant_id = $1 AND class_id = $2",
        tenant_id,
        class_id,
    )


async def upsert_resource_link(conn: Queryable, values: dict[str, Any]) -> None:
    """Record a placed link: what it opens and its line item."""
    await conn.execute(
        """
        INSERT INTO lti_resource_links AS l (registration_id, resource_link_id, tenant_id,
            context_id, title, target_kind, target_id, lineitem_url)
        VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
        ON CONFLICT (registration_id, resource_link_id) DO UPDATE SET
            context_id = EXCLUDED.context_id, title = coalesce(EXCLUDED.title, l.title),
            target_kind = EXCLUDED.target_kind, target_id = EXCLUDED.target_id,
            lineitem_url = coalesce(EXCLUDED.lineitem_url, l.lineitem_url), updated_at = now()
        """,
        values["registration_id"],
        values["resource_link_id"],
        values["tenant_id"],
        values.get("context_id"),
        values.get("title"),
        values["target_kind"],
        values.get("target_id"),
        values.get("lineitem_url"),
    )


async def upsert_grade_link(conn: Queryable, values: dict[str, Any]) -> None:
    """A student's scores on a quiz go to this line item."""
    await conn.execute(
        "INSERT INTO lti_grade_links (tenant_id, user_id, quiz_id, lineitem_url, "
        "registration_id, sub) VALUES ($1, $2, $3, $4, $5, $6) "
        "ON CONFLICT (tenant_id, user_id, quiz_id, lineitem_url) DO UPDATE SET "
        "registration_id = EXCLUDED.registration_id, sub = EXCLUDED.sub, updated_at = now()",
        values["tenant_id"],
        values["user_id"],
        values["quiz_id"],
        values["lineitem_url"],
        values["registration_id"],
        values["sub"],
    )


async def queue_scores(
    conn: Queryable,
    *,
    tenant_id: str,
    user_id: str,
    quiz_id: uuid.UUID,
    attempt_id: uuid.UUID,
    score: dict[str, Any],
) -> int:
    """Queue the attempt's score for every line item the student took the quiz from (each
    score carries its platform's ``userId``); how many."""
    status = await conn.execute(
        """
        INSERT INTO lti_score_outbox (id, tenant_id, registration_id, attempt_id, lineitem_url,
                                      score)
        SELECT gen_random_uuid(), g.tenant_id, g.registration_id, $4, g.lineitem_url,
               $5::jsonb || jsonb_build_object('userId', g.sub)
        FROM lti_grade_links g WHERE g.tenant_id = $1 AND g.user_id = $2 AND g.quiz_id = $3
        ON CONFLICT (attempt_id, lineitem_url) DO NOTHING
        """,
        tenant_id,
        user_id,
        quiz_id,
        attempt_id,
        score,
    )
    return int(str(status).rsplit(" ", 1)[-1])


# --- content a teacher may place --------------------------------------------------------------


async def placeable_quizzes(pool: Queryable, *, tenant_id: str, class_id: str | None) -> list[Any]:
    """Quizzes of the class or of no class, newest first (at most 200)."""
    return list(
        await pool.fetch(
            "SELECT id, title, jsonb_array_length(questions) AS questions, assigned_class_id "
            "FROM quizzes WHERE tenant_id = $1 AND (assigned_class_id IS NULL OR "
            "assigned_class_id = $2) ORDER BY created_at DESC LIMIT 200",
            tenant_id,
            class_id,
        )
    )


async def placeable_documents(
    pool: Queryable, *, tenant_id: str, class_id: str | None
) -> list[Any]:
    """Indexed educational documents of the class or of no class (at most 500), by title."""
    return list(
        await pool.fetch(
            "SELECT id, title, module_tag FROM documents WHERE tenant_id = $1 "
            "AND status = 'indexed' AND deleted_at IS NULL AND collection = 'educational' "
            "AND (class_id IS NULL OR class_id = $2) ORDER BY title, id LIMIT 500",
            tenant_id,
            class_id,
        )
    )


async def assign_quiz(
    pool: Queryable, *, tenant_id: str, quiz_id: uuid.UUID, class_id: str
) -> None:
    """A quiz of no class placed in a course is the course's class's from then on."""
    await pool.execute(
        "UPDATE quizzes SET assigned_class_id = $3 WHERE tenant_id = $1 AND id = $2 "
        "AND assigned_class_id IS NULL",
        tenant_id,
        quiz_id,
        class_id,
    )


# --- deep-linking requests ------------------------------------------------------------------


async def insert_deep_link(pool: Queryable, values: dict[str, Any], *, ttl_s: float) -> None:
    """A deep-linking request waiting for the teacher's choice."""
    await pool.execute(
        "INSERT INTO lti_deep_links (id, registration_id, tenant_id, deployment_id, user_id, "
        "class_id, return_url, data, accept_types, accept_multiple, expires_at) "
        "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, now() + make_interval(secs => $11))",
        values["id"],
        values["registration_id"],
        values["tenant_id"],
        values["deployment_id"],
        values["user_id"],
        values.get("class_id"),
        values["return_url"],
        values.get("data"),
        values["accept_types"],
        values["accept_multiple"],
        ttl_s,
    )
    await pool.execute("DELETE FROM lti_deep_links WHERE expires_at < now() - interval '1 day'")


async def get_deep_link(pool: Queryable, deep_link_id: str) -> dict[str, Any] | None:
    """A live deep-linking request (not used, not expired), or None."""
    row = await pool.fetchrow(
        "SELECT * FROM lti_deep_links WHERE id = $1 AND used_at IS NULL AND expires_at >= now()",
        deep_link_id,
    )
    return dict(row) if row else None


async def use_deep_link(pool: Queryable, deep_link_id: str) -> bool:
    """Mark a deep-linking request answered; False when it was already."""
    used = await pool.fetchval(
        "UPDATE lti_deep_links SET used_at = now() WHERE id = $1 AND used_at IS NULL RETURNING id",
        deep_link_id,
    )
    return used is not None


# --- the score outbox -----------------------------------------------------------------------


async def claim_scores(conn: Queryable, *, limit: int, lease_s: float) -> list[dict[str, Any]]:
    """Claim due scores (``FOR UPDATE SKIP LOCKED``) and lease them for ``lease_s``."""
    rows = await conn.fetch(
        "SELECT id, tenant_id, registration_id, lineitem_url, score, attempts, created_at "
        "FROM lti_score_outbox WHERE status = 'pending' AND next_attempt_at <= now() "
        "ORDER BY next_attempt_at, id LIMIT $1 FOR UPDATE SKIP LOCKED",
        limit,
    )
    if rows:
        await conn.execute(
            "UPDATE lti_score_outbox SET next_attempt_at = now() + make_interval(secs => $2) "
            "WHERE id = ANY($1::uuid[])",
            [r["id"] for r in rows],
            lease_s,
        )
    return [{**dict(r), "score": _json(r["score"])} for r in rows]


async def score_sent(pool: Queryable, *, score_id: uuid.UUID) -> None:
    """The platform took the score."""
    await pool.execute(
        "UPDATE lti_score_outbox SET status = 'sent', attempts = attempts + 1, sent_at = now(), "
        "last_error = NULL WHERE id = $1",
        score_id,
    )


async def score_retry(pool: Queryable, *, score_id: uuid.UUID, delay_s: float, error: str) -> None:
    """The platform did not take it: try again in ``delay_s``."""
    await pool.execute(
        "UPDATE lti_score_outbox SET attempts = attempts + 1, last_error = $3, "
        "next_attempt_at = now() + make_interval(secs => $2) WHERE id = $1",
        score_id,
        delay_s,
        error,
    )


async def score_failed(pool: Queryable, *, score_id: uuid.UUID, error: str) -> None:
    """Given up (the platform refused it for good, or the give-up time passed)."""
    await pool.execute(
        "UPDATE lti_score_outbox SET status = 'failed', attempts = attempts + 1, "
        "last_error = $2 WHERE id = $1",
        score_id,
        error,
    )


async def list_scores(
    pool: Queryable, *, tenant_id: str, status: str | None, limit: int
) -> list[dict[str, Any]]:
    """The tenant's scores to post, newest first."""
    rows = await pool.fetch(
        "SELECT id, registration_id, attempt_id, lineitem_url, score, status, attempts, "
        "last_error, next_attempt_at, created_at, sent_at FROM lti_score_outbox "
        "WHERE tenant_id = $1 AND ($2::text IS NULL OR status = $2) "
        "ORDER BY created_at DESC, id LIMIT $3",
        tenant_id,
        status,
        limit,
    )
    return [{**dict(r), "score": _json(r["score"])} for r in rows]
