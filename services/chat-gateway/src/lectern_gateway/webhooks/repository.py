"""SQL of webhooks, their deliveries and the attempts of each."""

from __future__ import annotations

import json
import uuid
from typing import Any

from lectern_common.db.types import Queryable

_WEBHOOK_COLUMNS = (
    "id, url, event_types, description, created_by, created_at, updated_at, "
    "consecutive_failures, disabled_at, disabled_reason"
)
_DELIVERY_COLUMNS = (
    "id, webhook_id, event_id, event_type, status, attempts, next_attempt_at, created_at, "
    "finished_at"
)


async def insert_webhook(
    pool: Queryable,
    *,
    tenant_id: str,
    url: str,
    event_types: list[str],
    description: str | None,
    secret: str,
    created_by: str,
) -> dict[str, Any]:
    """Register a webhook; its row (without the secret)."""
    row = await pool.fetchrow(
        "INSERT INTO webhooks (id, tenant_id, url, event_types, description, secret, created_by) "  # noqa: S608
        f"VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING {_WEBHOOK_COLUMNS}",
        uuid.uuid4(), tenant_id, url, event_types, description, secret, created_by,
    )  # fmt: skip
    return dict(row)


async def list_webhooks(pool: Queryable, *, tenant_id: str) -> list[dict[str, Any]]:
    """The tenant's webhooks, newest first (no secrets)."""
    rows = await pool.fetch(
        f"SELECT {_WEBHOOK_COLUMNS} FROM webhooks WHERE tenant_id = $1 "  # noqa: S608
        "ORDER BY created_at DESC, id",
        tenant_id,
    )
    return [dict(r) for r in rows]


async def get_webhook(
    pool: Queryable, *, tenant_id: str, webhook_id: uuid.UUID
) -> dict[str, Any] | None:
    """One webhook of the tenant (no secret), or None."""
    row = await pool.fetchrow(
        f"SELECT {_WEBHOOK_COLUMNS} FROM webhooks WHERE id = $1 AND tenant_id = $2",  # noqa: S608
        webhook_id,
        tenant_id,
    )
    return dict(row) if row else None


async def update_webhook(
    pool: Queryable, *, tenant_id: str, webhook_id: uuid.UUID, changes: dict[str, Any]
) -> dict[str, Any] | None:
    """Change ``url``, ``event_types``, ``description`` and/or switch it on (``enabled``:
    True clears the disabled state and the failure count, False disables it by hand)."""
    sets: list[str] = ["updated_at = now()"]
    args: list[Any] = [webhook_id, tenant_id]
    for column in ("url", "event_types", "description"):
        if column in changes:
            args.append(changes[column])
            sets.append(f"{column} = ${len(args)}")
    if changes.get("enabled") is True:
        sets += ["disabled_at = NULL", "disabled_reason = NULL", "consecutive_failures = 0"]
    elif changes.get("enabled") is False:
        sets += [
            "disabled_at = coalesce(disabled_at, now())",
            "disabled_reason = coalesce(disabled_reason, 'disabled by an admin')",
        ]
    row = await pool.fetchrow(
        f"UPDATE webhooks SET {', '.join(sets)} WHERE id = $1 AND tenant_id = $2 "  # noqa: S608
        f"RETURNING {_WEBHOOK_COLUMNS}",
        *args,
    )
    return dict(row) if row else None


async def delete_webhook(pool: Queryable, *, tenant_id: str, webhook_id: uuid.UUID) -> bool:
    """Delete a webhook with its deliveries; False when the tenant has none of that id."""
    deleted = await pool.fetchval(
        "DELETE FROM webhooks WHERE id = $1 AND tenant_id = $2 RETURNING id", webhook_id, tenant_id
    )
    return deleted is not None


async def record_event(
    pool: Queryable,
    *,
    tenant_id: str,
    event_id: uuid.UUID,
    event_type: str,
    occurred_at: Any,
    payload: str,
    headers: dict[str, str],
) -> int:
    """A pending delivery for each enabled webhook of the tenant that asked for this event
    type and existed when it occurred; none twice for one (webhook, event). How many new."""
    status = await pool.execute(
        """
        INSERT INTO webhook_deliveries
            (id, webhook_id, tenant_id, event_id, event_type, payload, headers)
        SELECT gen_random_uuid(), w.id, w.tenant_id, $2, $3, $4, $5::jsonb FROM webhooks w
        WHERE w.tenant_id = $1 AND $3 = ANY(w.event_types) AND w.disabled_at IS NULL
          AND w.created_at <= $6
        ON CONFLICT (webhook_id, event_id) DO NOTHING
        """,
        tenant_id, event_id, event_type, payload, json.dumps(headers), occurred_at,
    )  # fmt: skip
    return int(str(status).rsplit(" ", 1)[-1])


async def claim_due(conn: Queryable, *, limit: int, lease_s: float) -> list[dict[str, Any]]:
    """Claim due deliveries of enabled webhooks (``FOR UPDATE SKIP LOCKED``) and lease them
    for ``lease_s`` seconds; call inside a transaction. Each row has the URL and secret."""
    rows = await conn.fetch(
        """
        SELECT d.id, d.webhook_id, d.tenant_id, d.event_id, d.payload, d.headers, d.attempts,
               w.url, w.secret
        FROM webhook_deliveries d JOIN webhooks w ON w.id = d.webhook_id
        WHERE d.status = 'pending' AND d.next_attempt_at <= now() AND w.disabled_at IS NULL
        ORDER BY d.next_attempt_at, d.id
        LIMIT $1
        FOR UPDATE OF d SKIP LOCKED
        """,
        limit,
    )
    if rows:
        await conn.execute(
            "UPDATE webhook_deliveries SET next_attempt_at = now() + make_interval(secs => $2) "
            "WHERE id = ANY($1::uuid[])",
            [r["id"] for r in rows],
            lease_s,
        )
    return [{**dict(r), "headers": _headers(r["headers"])} for r in rows]


def _headers(stored: Any) -> dict[str, str]:
    """A delivery's extra headers: written as a JSON text (the pool's jsonb codec hands it
    back as a string), or as an object by SQL; a row of either kind never stops the others."""
    value = json.loads(stored) if isinstance(stored, str) else stored
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}


async def record_attempt(
    conn: Queryable,
    *,
    delivery_id: uuid.UUID,
    status_code: int | None,
    error: str | None,
    duration_ms: int,
) -> None:
    """Log one attempt."""
    await conn.execute(
        "INSERT INTO webhook_attempts (delivery_id, status_code, error, duration_ms) "
        "VALUES ($1, $2, $3, $4)",
        delivery_id, status_code, error, duration_ms,
    )  # fmt: skip


async def mark_succeeded(conn: Queryable, *, delivery_id: uuid.UUID, webhook_id: uuid.UUID) -> None:
    """The delivery is done; the webhook's run of failures ends."""
    await conn.execute(
        "UPDATE webhook_deliveries SET status = 'succeeded', attempts = attempts + 1, "
        "finished_at = now() WHERE id = $1",
        delivery_id,
    )
    await conn.execute(
        "UPDATE webhooks SET consecutive_failures = 0 WHERE id = $1 AND consecutive_failures > 0",
        webhook_id,
    )


async def mark_retry(conn: Queryable, *, delivery_id: uuid.UUID, delay_s: float) -> None:
    """The attempt failed; try again in ``delay_s`` seconds."""
    await conn.execute(
        "UPDATE webhook_deliveries SET attempts = attempts + 1, "
        "next_attempt_at = now() + make_interval(secs => $2) WHERE id = $1",
        delivery_id,
        delay_s,
    )


async def mark_failed(
    conn: Queryable,
    *,
    delivery_id: uuid.UUID,
    webhook_id: uuid.UUID,
    disable_after: int,
    reason: str,
) -> bool:
    """The delivery failed for good: count it against the webhook and disable the webhook at
    ``disable_after`` failed deliveries running. True when this disabled it."""
    await conn.execute(
        "UPDATE webhook_deliveries SET status = 'failed', attempts = attempts + 1, "
        "finished_at = now() WHERE id = $1",
        delivery_id,
    )
    was_disabled = await conn.fetchval(
        "SELECT disabled_at IS NOT NULL FROM webhooks WHERE id = $1 FOR UPDATE", webhook_id
    )
    failures = await conn.fetchval(
        """
        UPDATE webhooks SET consecutive_failures = consecutive_failures + 1,
            disabled_at = CASE WHEN disabled_at IS NULL AND consecutive_failures + 1 >= $2
                               THEN now() ELSE disabled_at END,
            disabled_reason = CASE WHEN disabled_at IS NULL AND consecutive_failures + 1 >= $2
                                   THEN $3 ELSE disabled_reason END
        WHERE id = $1 RETURNING consecutive_failures
        """,
        webhook_id, disable_after, reason,
    )  # fmt: skip
    return was_disabled is False and failures is not None and failures >= disable_after


async def list_deliveries(
    pool: Queryable, *, webhook_id: uuid.UUID, limit: int, status: str | None
) -> list[dict[str, Any]]:
    """A webhook's deliveries, newest first, each with its attempts (oldest first)."""
    rows = await pool.fetch(
        f"SELECT {_DELIVERY_COLUMNS} FROM webhook_deliveries "  # noqa: S608
        "WHERE webhook_id = $1 AND ($3::text IS NULL OR status = $3) "
        "ORDER BY created_at DESC, id LIMIT $2",
        webhook_id, limit, status,
    )  # fmt: skip
    deliveries = [dict(r) for r in rows]
    attempts = await pool.fetch(
        "SELECT delivery_id, attempted_at, status_code, error, duration_ms "
        "FROM webhook_attempts WHERE delivery_id = ANY($1::uuid[]) ORDER BY attempted_at, id",
        [d["id"] for d in deliveries],
    )
    by_delivery: dict[uuid.UUID, list[dict[str, Any]]] = {}
    for a in attempts:
        by_delivery.setdefault(a["delivery_id"], []).append(dict(a))
    for d in deliveries:
        d["attempt_log"] = by_delivery.get(d["id"], [])
    return deliveries


async def redeliver(
    pool: Queryable, *, webhook_id: uuid.UUID, delivery_id: uuid.UUID
) -> tuple[dict[str, Any] | None, bool]:
    """Queue a finished delivery again at once, with a fresh retry schedule. None when the
    webhook has no such delivery; the row unchanged when it is still pending (queued or being
    sent: sending it now as well could send it twice at once). The bool: queued again."""
    row = await pool.fetchrow(
        "UPDATE webhook_deliveries SET status = 'pending', attempts = 0, finished_at = NULL, "  # noqa: S608
        "next_attempt_at = now() WHERE id = $1 AND webhook_id = $2 AND status <> 'pending' "
        f"RETURNING {_DELIVERY_COLUMNS}",
        delivery_id,
        webhook_id,
    )
    if row is not None:
        return dict(row), True
    row = await pool.fetchrow(
        f"SELECT {_DELIVERY_COLUMNS} FROM webhook_deliveries "  # noqa: S608
        "WHERE id = $1 AND webhook_id = $2",
        delivery_id,
        webhook_id,
    )
    return (dict(row) if row else None), False


async def prune_deliveries(pool: Queryable, *, older_than_s: float) -> int:
    """Delete deliveries (and their attempts) finished more than ``older_than_s`` ago."""
    status = await pool.execute(
        "DELETE FROM webhook_deliveries "
        "WHERE finished_at < now() - make_interval(secs => $1::float8)",
        older_than_s,
    )
    return int(str(status).rsplit(" ", 1)[-1])
