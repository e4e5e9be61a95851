"""Messages a consumer gave up on, parked on their own stream for an operator."""

from __future__ import annotations

import uuid
from typing import ClassVar, Literal

from pydantic import Field

from lectern_common.events.base import Event, Subjects, register_event

#: the longest message body a parked copy keeps, in characters
MAX_PARKED_PAYLOAD = 64 * 1024

ParkReason = Literal["invalid_message", "too_many_deliveries", "permanent_error"]


@register_event
class MessageParked(Event):
    """A consumer stopped delivering a message (it was invalid, failed permanently, or
    exhausted its deliveries) and parked a copy here instead of dropping it silently.
    ``tenant_id`` is the message's own when it carried a usable one, else ``unknown``.
    ``lectern status`` counts the stream's messages; read them with any JetStream client
    (``nats stream view LECTERN_DEADLETTER``) and republish the payload once fixed. A copy
    parked again after a crash has the same ``event_id`` (one per stream sequence)."""

    subject: ClassVar[str] = Subjects.DEAD_LETTER

    original_subject: str = Field(description="the subject the message was published on")
    stream: str | None = Field(default=None, description="the stream that held it")
    stream_sequence: int | None = Field(default=None, description="its sequence there")
    consumer: str | None = Field(default=None, description="the durable consumer that parked it")
    service: str = Field(description="the service that parked it")
    deliveries: int = Field(ge=0, description="how often it had been delivered")
    reason: ParkReason
    detail: str = Field(max_length=2000, description="why, in words")
    payload: str = Field(
        description=f"the message body as UTF-8 text, cut to {MAX_PARKED_PAYLOAD} characters"
    )


def parked_event_id(stream: str | None, sequence: int | None, subject: str) -> uuid.UUID:
    """One id per stored message, so a message parked twice is stored once."""
    return uuid.uuid5(uuid.NAMESPACE_URL, f"lectern.deadletter:{stream}:{sequence}:{subject}")
