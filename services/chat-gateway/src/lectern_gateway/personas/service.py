"""What other domains ask of personas: a persona's scope as a retrieval filter, its prompt
and label, its band cut-offs, and the persona a caller may use (no HTTP in here)."""

from __future__ import annotations

from typing import Any

from lectern_common.events.retrieval import ScopeFilter
from lectern_gateway.auth import Principal
from lectern_gateway.classes.membership import student_classes
from lectern_gateway.personas import repository as repo
from lectern_gateway.problems import ProblemError


def scope_filter(persona: dict[str, Any]) -> ScopeFilter:
    """The retrieval filter of a persona's scope."""
    scope = persona.get("scope") or {}
    return ScopeFilter(
        subjects=list(scope.get("subjects") or []),
        modules=list(scope.get("modules") or []),
        class_ids=list(scope.get("classes") or []),
        topic_tags=list(scope.get("topic_tags") or []),
    )


def visible_to(persona: dict[str, Any], classes: list[str] | None) -> bool:
    """Staff see every persona; a student those of their classes and the unscoped ones."""
    scoped = (persona.get("scope") or {}).get("classes") or []
    return classes is None or not scoped or bool(set(scoped) & set(classes))


def persona_prompt(persona: dict[str, Any] | None) -> tuple[str, str] | None:
    """(display name, instructions) for the system prompt, or None."""
    if persona is None:
        return None
    return str(persona["display_name"]), str(persona.get("instructions") or "")


def persona_label(persona: dict[str, Any] | None) -> str | None:
    """``slug@version`` of the persona that answered, or None."""
    return None if persona is None else f"{persona['slug']}@{persona['version']}"


def thresholds(persona: dict[str, Any] | None) -> tuple[float, float, float] | None:
    """A persona's own confidence band cut-offs, or None (the deployment's)."""
    if persona is None or persona.get("band_high") is None:
        return None
    return (float(persona["band_high"]), float(persona["band_medium"]),
            float(persona["band_low"]))  # fmt: skip


async def persona_for(pool: Any, principal: Principal, slug: str) -> dict[str, Any]:
    """The latest version of a persona the caller may use, else 404."""
    row = await repo.get(pool, tenant_id=principal.tenant_id, slug=slug)
    if row is None or not visible_to(row, await student_classes(pool, principal)):
        raise ProblemError(404, "Not found", f"no tutor persona {slug!r}")
    return row
