"""Standard Webhooks: secrets, signatures and the headers of a delivery (no I/O).

A secret is ``whsec_`` + the base64 of random bytes; a delivery carries ``webhook-id`` (the
event id, the same on every retry), ``webhook-timestamp`` (unix seconds of the attempt) and
``webhook-signature``: ``v1,`` + the base64 HMAC-SHA256, keyed with the secret's decoded bytes,
of ``{id}.{timestamp}.{body}``. Receivers verify with any Standard Webhooks library.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

from lectern_common.broker import STREAMS
from lectern_common.events import ALL_EVENTS
from lectern_common.events.base import Subjects

SECRET_PREFIX = "whsec_"  # noqa: S105 - the format's prefix, not a secret
SECRET_BYTES = 24
USER_AGENT = "Lectern-Webhooks/1.0"

#: not offered: uploads wait on a work-queue stream that only ingest may consume, progress is
#: a stream of per-stage ticks, and parked messages are the operator's business, not a tenant's;
#: expired sessions tell the services to delete their copies and found conflicts feed the
#: review queue (housekeeping between services)
_NOT_OFFERED = {
    Subjects.DOCUMENTS_UPLOADED,
    Subjects.DOCUMENTS_PROGRESS,
    Subjects.DEAD_LETTER,
    Subjects.CHAT_SESSIONS_EXPIRED,
    Subjects.DOCUMENTS_CONFLICTS,
}

#: the event types a webhook may ask for (subjects, e.g. ``lectern.documents.indexed.v1``)
WEBHOOK_EVENTS: tuple[str, ...] = tuple(sorted({cls.subject for cls in ALL_EVENTS} - _NOT_OFFERED))

#: the streams holding them: the dispatcher's durable consumers
WEBHOOK_STREAMS: tuple[str, ...] = tuple(
    spec.name for spec in STREAMS if any(s in WEBHOOK_EVENTS for s in spec.subjects)
)


def new_secret() -> str:
    """A fresh signing secret, ``whsec_`` + base64 of 24 random bytes."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode()


def sign(secret: str, *, msg_id: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` header: ``v1,`` + base64 HMAC-SHA256 of id.timestamp.body."""
    key = base64.b64decode(secret.removeprefix(SECRET_PREFIX))
    signed = f"{msg_id}.{timestamp}.".encode() + body
    digest = hmac.new(key, signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def delivery_headers(
    secret: str, *, msg_id: str, timestamp: int, body: bytes, extra: dict[str, str]
) -> dict[str, str]:
    """Every header of one attempt: the event's CloudEvents attributes (``extra``), then the
    Standard Webhooks ones, signed for this attempt's time."""
    return {
        **extra,
        "content-type": "application/json",
        "user-agent": USER_AGENT,
        "webhook-id": msg_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": sign(secret, msg_id=msg_id, timestamp=timestamp, body=body),
    }


def retry_delay(attempts: int, schedule: list[float]) -> float | None:
    """Seconds to wait after the ``attempts``-th failed attempt, or None: the delivery failed."""
    if attempts < 1 or attempts > len(schedule):
        return None
    return schedule[attempts - 1]
