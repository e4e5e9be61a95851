"""Webhooks (admins of the tenant): register an endpoint for some event types, see its
deliveries and their attempts, redeliver one, switch it back on once it was disabled."""

from __future__ import annotations

import asyncio
import uuid
from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Response
from pydantic import BaseModel, Field, field_validator

from lectern_common.db.types import Pool
from lectern_gateway.auth import AdminDep
from lectern_gateway.deps import GatewayDep, PoolDep, SettingsDep
from lectern_gateway.documents.fetch import UrlRefused, check_host
from lectern_gateway.problems import ProblemError
from lectern_gateway.webhooks import repository as repo
from lectern_gateway.webhooks.signing import WEBHOOK_EVENTS, new_secret

router = APIRouter(tags=["webhooks"])

DeliveryStatus = Literal["pending", "succeeded", "failed"]
MAX_URL_CHARS = 2000
RESOLVE_TIMEOUT_S = 10.0


def _event_types(value: list[str]) -> list[str]:
    unknown = sorted(set(value) - set(WEBHOOK_EVENTS))
    if unknown:
        raise ValueError(
            f"unknown event types {unknown}; a webhook may ask for {list(WEBHOOK_EVENTS)}"
        )
    return sorted(set(value))


class WebhookCreate(BaseModel):
    """A new webhook: where to POST and which events."""

    url: str = Field(
        min_length=1, max_length=MAX_URL_CHARS, description="http(s) endpoint, public address"
    )
    event_types: list[str] = Field(
        min_length=1,
        max_length=len(WEBHOOK_EVENTS),
        description="event subjects, e.g. `lectern.documents.indexed.v1`",
        examples=[["lectern.documents.indexed.v1", "lectern.quiz.attempted.v1"]],
    )
    description: str | None = Field(default=None, max_length=500)

    _check_types = field_validator("event_types")(_event_types)


class WebhookUpdate(BaseModel):
    """Changes to a webhook (left out: unchanged). ``enabled: true`` switches a disabled
    webhook back on and clears its run of failures; ``false`` pauses it."""

    url: str | None = Field(default=None, min_length=1, max_length=MAX_URL_CHARS)
    event_types: list[str] | None = Field(
        default=None, min_length=1, max_length=len(WEBHOOK_EVENTS)
    )
    description: str | None = Field(default=None, max_length=500)
    enabled: bool | None = None

    @field_validator("event_types")
    @classmethod
    def _check_types(cls, value: list[str] | None) -> list[str] | None:
        return None if value is None else _event_types(value)


class Webhook(BaseModel):
    """A registered webhook (never its secret)."""

    id: uuid.UUID
    url: str
    event_types: list[str]
    description: str | None
    created_by: str | None
    created_at: datetime
    updated_at: datetime
    enabled: bool = Field(description="false once disabled (see `disabled_reason`)")
    consecutive_failures: int = Field(description="failed deliveries since the last success")
    disabled_at: datetime | None
    disabled_reason: str | None = Field(
        description="why it stopped: too many failed deliveries in a row, or an admin"
    )

    @classmethod
    def of(cls, row: dict[str, Any]) -> Webhook:
        """From a row of ``webhooks``."""
        return cls.model_validate({**row, "enabled": row["disabled_at"] is None})


class CreatedWebhook(Webhook):
    """A webhook just registered: ``secret`` is shown this once."""

    secret: str = Field(
        description="`whsec_` + base64: verifies `webhook-signature`; it cannot be shown again"
    )


class WebhookAttempt(BaseModel):
    """One attempt at a delivery."""

    attempted_at: datetime
    status_code: int | None = Field(description="the receiver's HTTP status; null: none came")
    error: str | None = Field(description="null when the receiver answered 2xx")
    duration_ms: int


class WebhookDelivery(BaseModel):
    """One event for one webhook, with every attempt so far (oldest first)."""

    id: uuid.UUID
    webhook_id: uuid.UUID
    event_id: uuid.UUID = Field(description="also the `webhook-id` header")
    event_type: str
    status: DeliveryStatus
    next_attempt_at: datetime | None = Field(description="when pending: the next attempt")
    created_at: datetime
    finished_at: datetime | None
    attempts: list[WebhookAttempt]

    @classmethod
    def of(cls, row: dict[str, Any]) -> WebhookDelivery:
        """From a row of ``webhook_deliveries`` with its ``attempt_log``."""
        pending = row["status"] == "pending"
        return cls.model_validate(
            {
                **row,
                "next_attempt_at": row["next_attempt_at"] if pending else None,
                "attempts": row.get("attempt_log", []),
            }
        )


async def _check_url(url: str, allowed_networks: list[str]) -> None:
    """422 ``url_refused`` unless ``url`` is http(s) to public addresses or allowed networks."""
    try:
        async with asyncio.timeout(RESOLVE_TIMEOUT_S):
            await check_host(url, allowed_networks)
    except UrlRefused as exc:
        raise ProblemError(422, "URL refused", exc.message, reason="url_refused") from exc
    except ValueError as exc:  # urlsplit: a bad port or IPv6 literal; idna: a bad host name
        raise ProblemError(
            422, "URL refused", f"not a valid URL: {exc}", reason="url_refused"
        ) from exc
    except TimeoutError as exc:
        raise ProblemError(
            422, "URL refused", f"the URL's host did not resolve within {RESOLVE_TIMEOUT_S:g} s",
            reason="url_refused",
        ) from exc  # fmt: skip


async def _webhook(pool: Pool, tenant_id: str, webhook_id: uuid.UUID) -> dict[str, Any]:
    row = await repo.get_webhook(pool, tenant_id=tenant_id, webhook_id=webhook_id)
    if row is None:
        raise ProblemError(404, "Not found", f"no webhook {webhook_id}")
    return row


@router.post(
    "/v1/webhooks", status_code=201, summary="Register a webhook (admins; the secret is shown once)"
)
async def create_webhook(
    body: WebhookCreate, admin: AdminDep, pool: PoolDep, settings: SettingsDep
) -> CreatedWebhook:
    await _check_url(body.url, settings.url_fetch_allowed_networks)
    secret = new_secret()
    row = await repo.insert_webhook(
        pool,
        tenant_id=admin.tenant_id,
        url=body.url,
        event_types=body.event_types,
        description=body.description,
        secret=secret,
        created_by=admin.user_id,
    )
    return CreatedWebhook.model_validate({**Webhook.of(row).model_dump(), "secret": secret})


@router.get("/v1/webhooks", summary="The tenant's webhooks, newest first (admins; no secrets)")
async def list_webhooks(admin: AdminDep, pool: PoolDep) -> list[Webhook]:
    return [Webhook.of(r) for r in await repo.list_webhooks(pool, tenant_id=admin.tenant_id)]


@router.get("/v1/webhooks/{webhook_id}", summary="A webhook (admins; no secret)")
async def get_webhook(webhook_id: uuid.UUID, admin: AdminDep, pool: PoolDep) -> Webhook:
    return Webhook.of(await _webhook(pool, admin.tenant_id, webhook_id))


@router.patch(
    "/v1/webhooks/{webhook_id}",
    summary="Change a webhook, or switch it back on (`enabled: true`) (admins)",
)
async def update_webhook(
    webhook_id: uuid.UUID,
    body: WebhookUpdate,
    admin: AdminDep,
    pool: PoolDep,
    settings: SettingsDep,
) -> Webhook:
    changes = body.model_dump(exclude_unset=True)
    for required in ("url", "event_types", "enabled"):
        if required in changes and changes[required] is None:
            del changes[required]
    if "url" in changes:
        await _check_url(changes["url"], settings.url_fetch_allowed_networks)
    row = await repo.update_webhook(
        pool, tenant_id=admin.tenant_id, webhook_id=webhook_id, changes=changes
    )
    if row is None:
        raise ProblemError(404, "Not found", f"no webhook {webhook_id}")
    return Webhook.of(row)


@router.delete(
    "/v1/webhooks/{webhook_id}",
    status_code=204,
    summary="Delete a webhook and its deliveries (admins)",
)
async def delete_webhook(webhook_id: uuid.UUID, admin: AdminDep, pool: PoolDep) -> Response:
    if not await repo.delete_webhook(pool, tenant_id=admin.tenant_id, webhook_id=webhook_id):
        raise ProblemError(404, "Not found", f"no webhook {webhook_id}")
    return Response(status_code=204)


@router.get(
    "/v1/webhooks/{webhook_id}/deliveries",
    summary="A webhook's deliveries, newest first, with their attempts (admins)",
)
async def list_deliveries(
    webhook_id: uuid.UUID,
    admin: AdminDep,
    pool: PoolDep,
    status: DeliveryStatus | None = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> list[WebhookDelivery]:
    await _webhook(pool, admin.tenant_id, webhook_id)
    rows = await repo.list_deliveries(pool, webhook_id=webhook_id, limit=limit, status=status)
    return [WebhookDelivery.of(r) for r in rows]


@router.post(
    "/v1/webhooks/{webhook_id}/deliveries/{delivery_id}/redeliver",
    status_code=202,
    summary="Send a delivery again, with a fresh retry schedule (admins)",
)
async def redeliver(
    webhook_id: uuid.UUID,
    delivery_id: uuid.UUID,
    admin: AdminDep,
    pool: PoolDep,
    gateway: GatewayDep,
) -> WebhookDelivery:
    webhook = await _webhook(pool, admin.tenant_id, webhook_id)
    if webhook["disabled_at"] is not None:
        raise ProblemError(
            409, "Conflict", "the webhook is disabled: switch it on first (PATCH enabled: true)",
            reason="webhook_disabled",
        )  # fmt: skip
    row, queued = await repo.redeliver(pool, webhook_id=webhook_id, delivery_id=delivery_id)
    if row is None:
        raise ProblemError(404, "Not found", f"no delivery {delivery_id} of webhook {webhook_id}")
    if not queued:
        raise ProblemError(
            409, "Conflict", "the delivery is still pending: it is queued or being sent",
            reason="delivery_pending",
        )  # fmt: skip
    gateway.wake_webhooks()
    return WebhookDelivery.of(row)
