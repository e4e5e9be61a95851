"""Which classes a caller belongs to: the identity provider's ``classes`` claim and the
rosters teachers keep (``class_members``). A student may use their own classes' material and
material assigned to no class, never another class's; staff are not limited."""

from __future__ import annotations

from collections.abc import Sequence

from lectern_common.db.types import Pool
from lectern_gateway.auth import Principal
from lectern_gateway.classes import repository as repo
from lectern_gateway.problems import ProblemError


async def classes_of(pool: Pool, principal: Principal) -> list[str]:
    """The caller's classes: the token's claim and every roster that lists them."""
    rostered = await repo.member_classes(
        pool=pool, tenant_id=principal.tenant_id, user_id=principal.user_id
    )
    return sorted({*principal.classes, *rostered})


async def student_classes(pool: Pool, principal: Principal) -> list[str] | None:
    """A student's classes; ``None`` for staff (no class limit)."""
    if principal.is_staff:
        return None
    return await classes_of(pool, principal)


def require_member(class_id: str | None, classes: Sequence[str] | None) -> None:
    """403 unless ``class_id`` is one of ``classes`` (None: staff, or no class asked)."""
    if class_id is None or classes is None or class_id in classes:
        return
    raise ProblemError(
        403,
        "Forbidden",
        f"you are not a member of class {class_id!r} (membership comes from your sign-in's "
        "classes claim or your teacher's roster)",
        reason="not_in_class",
    )


def may_see_class(class_id: str | None, classes: Sequence[str] | None) -> bool:
    """Whether material assigned to ``class_id`` is visible to a caller with ``classes``."""
    return classes is None or class_id is None or class_id in classes
