"""Tutor personas: several tutors per tenant, each with its own voice and material.

A persona has instructions that shape the voice and pedagogy (they go into the prompt as
data, escaped like every other part of it), defaults for a new session (mode, learning
style, depth), the material in scope (subjects, classes, modules, collections, topic tags:
retrieval is restricted to it), tag boosts, its own confidence thresholds and its own
knowledge-gap wording. Editing a persona makes a new version; a session keeps the version
it started with. Students see the personas of their classes (and those scoped to no class).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from fastapi import APIRouter
from faststream.nats import NatsBroker
from pydantic import BaseModel, Field, model_validator

from lectern_common.db.types import Pool
from lectern_gateway.auth import Principal, PrincipalDep, StaffDep
from lectern_gateway.classes.membership import student_classes
from lectern_gateway.config import Settings
from lectern_gateway.deps import BrokerDep, PoolDep, SettingsDep
from lectern_gateway.index import scope_chunks
from lectern_gateway.personas import repository as repo
from lectern_gateway.personas.service import scope_collections, scope_filter, visible_to
from lectern_gateway.problems import ProblemError

router = APIRouter(tags=["personas"])

SLUG = r"^[a-z0-9][a-z0-9-]{0,62}$"


Collection = Literal["educational", "assessment"]


def _educational() -> list[Collection]:
    return ["educational"]


class PersonaScope(BaseModel):
    """The material a persona answers from; an empty list does not restrict."""

    subjects: list[str] = Field(default_factory=list, max_length=50)
    classes: list[str] = Field(default_factory=list, max_length=200)
    modules: list[str] = Field(default_factory=list, max_length=50)
    collections: list[Collection] = Field(default_factory=_educational, min_length=1)
    topic_tags: list[str] = Field(default_factory=list, max_length=50)


class PersonaIn(BaseModel):
    """A persona as a teacher or admin writes it."""

    slug: str = Field(pattern=SLUG, description="its id in URLs (lowercase, digits, dashes)")
    display_name: str = Field(min_length=1, max_length=100)
    instructions: str = Field(
        default="", max_length=4000, description="voice and pedagogy, followed by the model"
    )
    default_mode: Literal["chat", "tutor", "drill"] = "chat"
    learning_style: str | None = Field(default=None, max_length=50)
    explanation_depth: Literal["brief", "standard", "detailed"] | None = None
    scope: PersonaScope = Field(default_factory=PersonaScope)
    tag_boosts: list[str] = Field(
        default_factory=list, max_length=50, description="topic tags whose chunks rank higher"
    )
    band_high: float | None = Field(default=None, gt=0, le=1)
    band_medium: float | None = Field(default=None, gt=0, le=1)
    band_low: float | None = Field(default=None, gt=0, le=1)
    gap_message: str | None = Field(
        default=None, max_length=1000, description="what this tutor says when no material fits"
    )

    @model_validator(mode="after")
    def _ordered_bands(self) -> PersonaIn:
        given = [b for b in (self.band_high, self.band_medium, self.band_low) if b is not None]
        if given and len(given) != 3:
            raise ValueError("set band_high, band_medium and band_low together (or none)")
        if given and not (given[0] > given[1] > given[2]):
            raise ValueError("band_high > band_medium > band_low")
        return self


class Persona(PersonaIn):
    """A stored version of a persona."""

    version: int
    created_by: str
    created_at: datetime
    indexed_chunks: int | None = Field(
        default=None, description="live chunks its scope matches now"
    )
    warning: str | None = Field(default=None, description="e.g. the scope matches no material")

    @classmethod
    def from_row(cls, row: dict[str, Any], *, chunks: int | None = None) -> Persona:
        values = {k: v for k, v in row.items() if k in cls.model_fields}
        persona = cls.model_validate(values)
        persona.indexed_chunks = chunks
        if chunks == 0:
            persona.warning = (
                "its scope matches no indexed material yet: it will say so until material "
                "in scope is uploaded"
            )
        return persona


async def _write(
    body: PersonaIn,
    staff: Principal,
    pool: Pool,
    broker: NatsBroker,
    settings: Settings,
    *,
    new: bool,
) -> Persona:
    scope = body.scope.model_dump()
    row = await repo.insert_version(
        pool,
        {**body.model_dump(exclude={"scope"}), "scope": scope, "tenant_id": staff.tenant_id,
         "created_by": staff.user_id, "expect_new": new},
    )  # fmt: skip
    if row is None:
        raise ProblemError(409, "Conflict", f"persona {body.slug!r} exists: PUT a new version")
    chunks = await scope_chunks(
        broker, settings, staff.tenant_id, scope_filter(scope), scope_collections(scope)
    )
    return Persona.from_row(row, chunks=chunks)


@router.post("/v1/personas", status_code=201, summary="Define a tutor persona (staff)")
async def create_persona(
    body: PersonaIn, staff: StaffDep, pool: PoolDep, broker: BrokerDep, settings: SettingsDep
) -> Persona:
    """Version 1 of a new persona; the reply says how much indexed material its scope has."""
    return await _write(body, staff, pool, broker, settings, new=True)


@router.put("/v1/personas/{slug}", summary="Change a persona: its next version (staff)")
async def update_persona(
    slug: str,
    body: PersonaIn,
    staff: StaffDep,
    pool: PoolDep,
    broker: BrokerDep,
    settings: SettingsDep,
) -> Persona:
    """Sessions already open keep the version they started with."""
    if body.slug != slug:
        raise ProblemError(422, "Unprocessable", "the body's slug must be the URL's")
    return await _write(body, staff, pool, broker, settings, new=False)


@router.get("/v1/personas", summary="The tutor personas the caller may use")
async def list_personas(principal: PrincipalDep, pool: PoolDep) -> list[Persona]:
    classes = await student_classes(pool, principal)
    rows = await repo.latest(pool, tenant_id=principal.tenant_id)
    return [Persona.from_row(r) for r in rows if visible_to(r, classes)]


@router.get("/v1/personas/{slug}", summary="A persona (its latest version, or ?version=)")
async def get_persona(
    slug: str,
    principal: PrincipalDep,
    pool: PoolDep,
    broker: BrokerDep,
    settings: SettingsDep,
    version: int | None = None,
) -> Persona:
    row = await repo.get(pool, tenant_id=principal.tenant_id, slug=slug, version=version)
    if row is None or not visible_to(row, await student_classes(pool, principal)):
        raise ProblemError(404, "Not found", f"no tutor persona {slug!r}")
    scope = row["scope"]
    chunks = await scope_chunks(
        broker, settings, principal.tenant_id, scope_filter(scope), scope_collections(scope)
    )
    return Persona.from_row(row, chunks=chunks)
