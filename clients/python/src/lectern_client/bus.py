"""Lectern's events from the bus (NATS JetStream), read as CloudEvents.

Every event Lectern publishes carries CloudEvents binary-mode headers (``ce-id``, ``ce-type``,
``ce-source``, ``ce-subject``, ``ce-time``; docs/events.md); its body is the event's JSON.
``subscribe`` reads them through a durable pull consumer, so a subscriber that stops resumes
where it left off, and yields each as a ``BusEvent`` to acknowledge once handled. Delivery is
at least once: keep the handling idempotent by ``BusEvent.id``.

```python
from lectern_client.bus import subscribe

async for event in subscribe("nats://nats:4222", "lectern.documents.indexed.v1",
                             durable="my-lms", user="my-lms", password="..."):
    print(event.type, event.subject, event.data["document_id"])
    await event.ack()
```

Needs ``nats-py`` (``pip install 'lectern-client[bus]'``).
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


@dataclass(frozen=True)
class BusEvent:
    """One event from the bus: its CloudEvents attributes, its JSON data, and its ack."""

    id: str
    type: str
    source: str
    subject: str | None
    time: datetime | None
    data: dict[str, Any]
    headers: Mapping[str, str] = field(repr=False)
    _ack: Callable[[], Awaitable[None]] = field(repr=False)
    _nak: Callable[[], Awaitable[None]] = field(repr=False)

    @property
    def tenant_id(self) -> str | None:
        """The tenant the event belongs to (from ``ce-source``: ``/lectern/tenants/<id>``)."""
        prefix = "/lectern/tenants/"
        return self.source[len(prefix) :] if self.source.startswith(prefix) else None

    async def ack(self) -> None:
        """Handled: the consumer will not deliver it again."""
        await self._ack()

    async def nak(self) -> None:
        """Not handled: deliver it again (to this or another subscriber of the durable)."""
        await self._nak()


class NotACloudEvent(ValueError):
    """A message without the CloudEvents headers Lectern publishes."""


def from_message(
    headers: Mapping[str, str],
    body: bytes,
    ack: Callable[[], Awaitable[None]],
    nak: Callable[[], Awaitable[None]],
) -> BusEvent:
    """A ``BusEvent`` from a message's headers and body (binary-mode CloudEvent)."""
    try:
        event_id, event_type, source = headers["ce-id"], headers["ce-type"], headers["ce-source"]
    except KeyError as exc:
        raise NotACloudEvent(f"no CloudEvents header {exc.args[0]}") from exc
    if headers.get("ce-specversion") != "1.0":
        raise NotACloudEvent(f"CloudEvents {headers.get('ce-specversion')!r}, not 1.0")
    time = headers.get("ce-time")
    data = json.loads(body or b"{}")
    return BusEvent(
        id=event_id,
        type=event_type,
        source=source,
        subject=headers.get("ce-subject"),
        time=datetime.fromisoformat(time) if time else None,
        data=data if isinstance(data, dict) else {"value": data},
        headers=dict(headers),
        _ack=ack,
        _nak=nak,
    )


async def subscribe(
    servers: str | list[str],
    subject: str,
    *,
    durable: str,
    user: str | None = None,
    password: str | None = None,
    batch: int = 10,
    wait: float = 5.0,
) -> AsyncGenerator[BusEvent, None]:
    """Events on ``subject`` (wildcards allowed: ``lectern.documents.>``) through the durable
    pull consumer ``durable`` (created on first use, shared by the subscriber's replicas).
    ``servers``: one URL, a comma-separated list or a list (every node of a cluster). Runs
    until the caller stops iterating; the connection is closed then."""
    import nats  # the optional dependency (lectern-client[bus])
    from nats.errors import TimeoutError as NatsTimeout

    urls = servers if isinstance(servers, list) else [s.strip() for s in servers.split(",")]
    auth: dict[str, Any] = {"user": user, "password": password} if user else {}
    connection = await nats.connect([u for u in urls if u], **auth)
    try:
        consumer = await connection.jetstream().pull_subscribe(subject, durable=durable)
        while True:
            try:
                messages = await consumer.fetch(batch, timeout=wait)
            except NatsTimeout:
                continue
            for message in messages:
                try:
                    event = from_message(
                        message.headers or {}, message.data, message.ack, message.nak
                    )
                except (NotACloudEvent, ValueError):
                    await message.term()  # not Lectern's: never redelivered
                    continue
                yield event
    finally:
        await connection.close()
