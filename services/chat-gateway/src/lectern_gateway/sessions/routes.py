"""Chat sessions: create, list, read messages, end."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query
from pydantic import AliasChoices, BaseModel, Field

from lectern_gateway.auth import PrincipalDep
from lectern_gateway.chat import repository as repo
from lectern_gateway.chat.lifecycle import end_session, session_for
from lectern_gateway.chat.sse import Citation
from lectern_gateway.classes.membership import require_member, student_classes
from lectern_gateway.deps import BrokerDep, PoolDep
from lectern_gateway.personas.service import persona_for

router = APIRouter(tags=["sessions"])

LearningStyle = Literal["visual", "reading", "examples", "auditory", "kinesthetic"]
Depth = Literal["brief", "standard", "detailed"]


class SessionCreate(BaseModel):
    """A new chat session; profile fields come from the student's profile."""

    mode: Literal["chat", "tutor", "drill"] = Field(
        default="chat",
        description="chat; tutor (answers end with a check question, judged on the reply); "
        "drill (practice questions, the material's own Q&A pairs first)",
    )
    subject: str | None = Field(default=None, max_length=200)
    module: str | None = Field(default=None, max_length=200, description="module tag")
    class_id: str | None = Field(
        default=None, max_length=200, validation_alias=AliasChoices("class_id", "class")
    )
    grade_level: int | None = Field(default=None, ge=0, le=20)
    learning_style: LearningStyle | None = None
    explanation_depth: Depth | None = None
    curriculum_standards: list[Annotated[str, Field(min_length=1, max_length=100)]] = Field(
        default_factory=list,
        max_length=50,
        description="the student's curriculum standards (e.g. NGSS-LS1-4): material tagged "
        "with one of them ranks higher",
    )
    title: str | None = Field(default=None, max_length=200)
    persona: str | None = Field(
        default=None,
        max_length=63,
        description="a tutor persona's slug: its material, voice and defaults (mode, "
        "learning style, depth) unless given here; the session keeps this version",
    )


class Session(BaseModel):
    """A chat session."""

    id: uuid.UUID
    user_id: str
    mode: Literal["chat", "tutor", "drill"]
    subject: str | None
    module: str | None
    class_id: str | None
    grade_level: int | None
    learning_style: str | None
    explanation_depth: str | None
    curriculum_standards: list[str] = Field(default_factory=list)
    title: str | None
    status: Literal["active", "ended"]
    end_reason: str | None
    created_at: datetime
    last_activity_at: datetime
    ended_at: datetime | None
    persona: str | None = Field(default=None, description="the tutor persona's slug")
    persona_version: int | None = None

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Session:
        """From a ``chat_sessions`` row."""
        return cls.model_validate(
            {**row, "module": row["module_tag"], "persona": row.get("persona_slug")}
        )


class Message(BaseModel):
    """A stored message."""

    id: uuid.UUID
    session_id: uuid.UUID
    role: Literal["user", "assistant"]
    content: str
    citations: list[Citation] = Field(default_factory=list)
    confidence: float | None = None
    confidence_band: str | None = None
    answered_by: str | None = None
    created_at: datetime


class Ended(BaseModel):
    """Outcome of ending a session."""

    ended: bool = Field(description="false: it had already ended")
    session: Session


@router.post("/v1/sessions", status_code=201, summary="Start a chat session")
async def create_session(body: SessionCreate, principal: PrincipalDep, pool: PoolDep) -> Session:
    """A student may name only a class they belong to (token claim or roster): 403 else."""
    require_member(body.class_id, await student_classes(pool, principal))
    persona = await persona_for(pool, principal, body.persona) if body.persona else None
    given = body.model_fields_set
    mode, style, depth = body.mode, body.learning_style, body.explanation_depth
    if persona is not None:  # the persona's defaults, unless the request sets them
        mode = mode if "mode" in given else persona["default_mode"]
        style = style if "learning_style" in given else persona["learning_style"]
        depth = depth if "explanation_depth" in given else persona["explanation_depth"]
    row = await repo.insert_session(
        pool=pool,
        values={
            "id": uuid.uuid4(),
            "tenant_id": principal.tenant_id,
            "user_id": principal.user_id,
            "mode": mode,
            "subject": body.subject,
            "module_tag": body.module,
            "class_id": body.class_id,
            "grade_level": body.grade_level,
            "learning_style": style,
            "explanation_depth": depth,
            "curriculum_standards": body.curriculum_standards,
            "title": body.title,
            "persona_slug": None if persona is None else persona["slug"],
            "persona_version": None if persona is None else persona["version"],
        },
    )
    return Session.from_row(row)


@router.get("/v1/sessions", summary="Sessions, newest first (students: their own)")
async def list_sessions(
    principal: PrincipalDep,
    pool: PoolDep,
    user_id: str | None = Query(default=None, description="staff: one user's sessions"),
    all_users: bool = Query(default=False, description="staff: every session of the tenant"),
    status: Literal["active", "ended"] | None = None,
    limit: int = Query(default=50, ge=1, le=500),
) -> list[Session]:
    if principal.is_staff:
        owner = None if all_users and user_id is None else (user_id or principal.user_id)
    else:
        owner = principal.user_id
    rows = await repo.list_sessions(
        pool=pool, tenant_id=principal.tenant_id, user_id=owner, limit=limit, status=status
    )
    return [Session.from_row(r) for r in rows]


@router.get("/v1/sessions/{session_id}", summary="One session")
async def get_session(session_id: uuid.UUID, principal: PrincipalDep, pool: PoolDep) -> Session:
    return Session.from_row(
        await session_for(pool=pool, principal=principal, session_id=session_id)
    )


@router.get("/v1/sessions/{session_id}/messages", summary="A session's messages, oldest first")
async def list_messages(
    session_id: uuid.UUID,
    principal: PrincipalDep,
    pool: PoolDep,
    limit: int = Query(default=200, ge=1, le=1000),
) -> list[Message]:
    await session_for(pool=pool, principal=principal, session_id=session_id)
    rows = await repo.list_messages(
        pool=pool, tenant_id=principal.tenant_id, session_id=session_id, limit=limit
    )
    return [Message.model_validate(r) for r in rows]


@router.post(
    "/v1/sessions/{session_id}/end", summary="End a session (publishes chat.session.ended)"
)
async def end(
    session_id: uuid.UUID, principal: PrincipalDep, pool: PoolDep, broker: BrokerDep
) -> Ended:
    await session_for(pool=pool, principal=principal, session_id=session_id)
    ended = await end_session(
        pool=pool,
        tenant_id=principal.tenant_id,
        session_id=session_id,
        reason="explicit",
    )
    row = await session_for(pool=pool, principal=principal, session_id=session_id)
    return Ended(ended=ended, session=Session.from_row(row))
