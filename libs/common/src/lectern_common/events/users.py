"""User events: a school's request to erase everything kept about one of its users."""

from __future__ import annotations

import hashlib
from typing import ClassVar

from pydantic import Field

from lectern_common.events.base import Event, Subjects, register_event


@register_event
class UserErased(Event):
    """Everything Lectern kept about a user of the tenant was erased at the school's request
    (``DELETE /v1/users/{user}``). The gateway erased its own rows in the transaction that
    wrote this event; every other service deletes the rows it keeps about the user, and
    drops any event about the user that occurred before this one's ``occurred_at`` (such an
    event may still be on its way, or arrive after this one from another stream). A
    re-delivery erases nothing more."""

    subject: ClassVar[str] = Subjects.USERS_ERASED

    user_id: str = Field(min_length=1, max_length=128, description="the erased user")


def erased_user_key(tenant_id: str, user_id: str) -> str:
    """How ``erased_users`` names an erased user: the hex SHA-256 of tenant and user, so the
    record that stops stale events from bringing data back does not keep the user's id."""
    return hashlib.sha256(f"{tenant_id}\x00{user_id}".encode()).hexdigest()
