"""What other domains ask of personas: a persona's scope as a retrieval filter, its prompt
and label, its band cut-offs, and the persona a caller may use (no HTTP in here)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from lectern_common.db.types import Pool
from lectern_common.education import BandThresholds
from lectern_common.events.retrieval import ScopeFilter
from lectern_gateway.auth import Principal
from lectern_gateway.classes.membership import student_classes
from lectern_gateway.personas import repository as repo
from lectern_gateway.problems import ProblemError


def scope_filter(scope: Mapping[str, Any]) -> ScopeFilter:
    """The retrieval filter of a persona's scope."""
    return ScopeFilter(
        subjects=list(scope.get("subjects") or []),
        modules=list(scope.get("modules") or []),
        class_ids=list(scope.get("classes") or []),
        topic_tags=list(scope.get("topic_tags") or []),
    )


def scope_collections(scope: Mapping[str, Any]) -> list[str]:
    """The collections a persona's scope draws on (educational unless it says)."""
    return list(scope.get("collections") or ["educational"])


def visible_to(persona: dict[str, Any], classes: list[str] | None) -> bool:
    """Staff see every persona; a student those of their classes and the unscoped ones."""
    scoped = (persona.get("scope") or {}).get("classes") or []
    return classes is None or not scoped or bool(set(scoped) & set(classes))


@dataclass(frozen=True)
class TutorPersona:
    """The version of a tutor persona a session runs with, as a turn reads it: read from its
    row once per turn, so the policy, the retrieval scope, the prompt, the gap's words and the
    label all see the same persona."""

    slug: str
    version: int
    display_name: str
    instructions: str
    #: the persona's own band cut-offs (high, medium, low), or None: the deployment's
    cuts: tuple[float, float, float] | None
    #: its scope as stored (``subjects``, ``modules``, ``classes``, ``topic_tags``,
    #: ``collections``): what ``personas.repository.indexed_chunks`` counts
    scope: Mapping[str, Any]
    tag_boosts: tuple[str, ...]
    #: what it says when the material does not answer (None: the gateway's words)
    gap_message: str | None

    @classmethod
    def of_row(cls, row: Mapping[str, Any]) -> TutorPersona:
        """The persona of a ``personas`` row."""
        return cls(
            slug=str(row["slug"]), version=int(row["version"]),
            display_name=str(row["display_name"]), instructions=str(row.get("instructions") or ""),
            cuts=thresholds(row), scope=dict(row.get("scope") or {}),
            tag_boosts=tuple(row.get("tag_boosts") or ()),
            gap_message=str(row["gap_message"]) if row.get("gap_message") else None,
        )  # fmt: skip

    @property
    def label(self) -> str:
        """``slug@version``: the persona that answered (``done``'s ``persona``)."""
        return f"{self.slug}@{self.version}"

    @property
    def prompt(self) -> tuple[str, str]:
        """(display name, instructions) for the system prompt."""
        return self.display_name, self.instructions

    @property
    def collections(self) -> list[str]:
        """The collections its scope draws on (educational unless it names others)."""
        return list(self.scope.get("collections") or ["educational"])

    def scope_filter(self) -> ScopeFilter:
        """The retrieval filter of its scope."""
        return scope_filter(self.scope)

    def bands(self, deployment: BandThresholds) -> BandThresholds | None:
        """Its own band cut-offs over the deployment's, or None when it has none."""
        if self.cuts is None:
            return None
        high, medium, low = self.cuts
        return dataclasses.replace(deployment, high=high, medium=medium, low=low)


def thresholds(persona: Mapping[str, Any] | None) -> tuple[float, float, float] | None:
    """A persona's own confidence band cut-offs, or None (the deployment's)."""
    if persona is None or persona.get("band_high") is None:
        return None
    return (float(persona["band_high"]), float(persona["band_medium"]),
            float(persona["band_low"]))  # fmt: skip


async def session_persona(
    pool: Pool, *, tenant_id: str, slug: str | None, version: int | None
) -> TutorPersona | None:
    """The persona version a session started with (None: a session without a persona, or
    a persona since deleted)."""
    if not slug:
        return None
    row = await repo.get(pool, tenant_id=tenant_id, slug=slug, version=version)
    return None if row is None else TutorPersona.of_row(row)


async def persona_for(pool: Pool, principal: Principal, slug: str) -> dict[str, Any]:
    """The latest version of a persona the caller may use, else 404."""
    row = await repo.get(pool, tenant_id=principal.tenant_id, slug=slug)
    if row is None or not visible_to(row, await student_classes(pool, principal)):
        raise ProblemError(404, "Not found", f"no tutor persona {slug!r}")
    return row
