"""A flag as clients see it: the columns of its ``feedback_flags`` row that every view of a
flag shows (the students' and teachers' flag list, and the review queue's flagged answers)."""

from __future__ import annotations

import uuid
from typing import Literal

from pydantic import BaseModel


class FlagView(BaseModel):
    """Who flagged which message, why, and whether it is still open."""

    id: uuid.UUID
    message_id: uuid.UUID
    session_id: uuid.UUID
    user_id: str
    reason: str
    details: str | None
    status: Literal["open", "resolved"]
