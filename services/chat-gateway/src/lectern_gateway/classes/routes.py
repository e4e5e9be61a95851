"""Class rosters: teachers list who is in a class; anyone can ask which classes they are in.

What a class finds hard is shown to its teachers as aggregates (never who); a tenant may let
them also read each rostered student's struggles and mastered topics
(``teachers_see_students``), with the evidence in a few words but never the student's own
words quoted in it."""

from __future__ import annotations

from datetime import datetime

from fastapi import APIRouter, Path, Response
from pydantic import BaseModel

from lectern_gateway.auth import PrincipalDep, StaffDep
from lectern_gateway.classes import repository as repo
from lectern_gateway.classes.membership import classes_of
from lectern_gateway.deps import GatewayDep, PoolDep
from lectern_gateway.memories.service import Memory, list_memories, topics
from lectern_gateway.problems import ProblemError
from lectern_gateway.tenant.service import teachers_see_students

router = APIRouter(tags=["classes"])

ClassId = Path(min_length=1, max_length=200)
UserId = Path(min_length=1, max_length=200)


class Member(BaseModel):
    """A student on a class roster."""

    class_id: str
    user_id: str
    added_by: str
    added_at: datetime


class MyClasses(BaseModel):
    """The caller's classes (token claim and rosters)."""

    classes: list[str]


@router.get("/v1/classes/mine", summary="The classes the caller belongs to")
async def my_classes(principal: PrincipalDep, pool: PoolDep) -> MyClasses:
    return MyClasses(classes=await classes_of(pool, principal))


@router.get("/v1/classes/{class_id}/students", summary="A class's roster (staff)")
async def roster(staff: StaffDep, pool: PoolDep, class_id: str = ClassId) -> list[Member]:
    rows = await repo.roster(pool=pool, tenant_id=staff.tenant_id, class_id=class_id)
    return [Member.model_validate(dict(r)) for r in rows]


class ClassStruggle(BaseModel):
    """A topic the class's students found hard, counted, never named by student."""

    topic: str
    students: int
    evidence: int


#: a topic shows only when at least this many students of the class found it hard, so that an
#: aggregate never points at one child
MIN_STUDENTS = 2


@router.get(
    "/v1/classes/{class_id}/struggles",
    summary="What a class finds hard, as aggregates (staff)",
)
async def class_struggles(
    staff: StaffDep, gateway: GatewayDep, class_id: str = ClassId
) -> list[ClassStruggle]:
    """Struggle topics of the roster's students, by how many students have each (at least
    ``MIN_STUDENTS``) and how much evidence is behind them. A student's memories stay
    theirs: this view never says who."""
    # the memory service counts them (it owns the memories); the roster is the gateway's
    roster = await repo.roster_user_ids(
        pool=gateway.pool, tenant_id=staff.tenant_id, class_id=class_id
    )
    found = await topics(
        gateway.broker, tenant_id=staff.tenant_id, user_ids=roster, min_users=MIN_STUDENTS,
        timeout=gateway.settings.request_timeout_s,
    )  # fmt: skip
    return [ClassStruggle(topic=t.topic, students=t.users, evidence=t.evidence) for t in found]


@router.get(
    "/v1/classes/{class_id}/students/{user_id}/memories",
    summary="A rostered student's struggles and mastered topics (staff, if the tenant allows)",
)
async def student_memories(
    staff: StaffDep, gateway: GatewayDep, class_id: str = ClassId, user_id: str = UserId
) -> list[Memory]:
    """The student's struggles and mastered topics with the evidence behind them, for a
    teacher of the class when the tenant allows it (``teachers_see_students``; admins
    always). What the student said is summed up ("said so 2 times"), never quoted; takeaways
    and preferences stay the student's."""
    pool = gateway.pool
    if staff.role != "admin" and not await teachers_see_students(pool, staff.tenant_id):
        raise ProblemError(
            403, "Forbidden", "this school shows teachers a class's struggles as aggregates "
            "only (GET /v1/classes/{class_id}/struggles); an admin can change it in the "
            "tenant settings (teachers_see_students)", reason="aggregates_only",
        )  # fmt: skip
    if not await repo.on_roster(
        pool=pool, tenant_id=staff.tenant_id, class_id=class_id, user_id=user_id
    ):
        raise ProblemError(404, "Not found", f"{user_id} is not on the roster of {class_id}")
    shown = await list_memories(
        gateway.broker, tenant_id=staff.tenant_id, user_id=user_id,
        kinds=("struggle", "mastered"), timeout=gateway.settings.request_timeout_s,
    )  # fmt: skip
    for memory in shown:
        memory.evidence = [e.model_copy(update={"detail": ""}) if e.kind == "said" else e
                           for e in memory.evidence]  # fmt: skip
    return shown


@router.put(
    "/v1/classes/{class_id}/students/{user_id}",
    summary="Put a student on a class roster (staff; idempotent)",
)
async def add_member(
    staff: StaffDep, pool: PoolDep, class_id: str = ClassId, user_id: str = UserId
) -> Member:
    row = await repo.add_member(
        pool=pool, tenant_id=staff.tenant_id, class_id=class_id, user_id=user_id,
        added_by=staff.user_id,
    )  # fmt: skip
    return Member.model_validate(dict(row))


@router.delete(
    "/v1/classes/{class_id}/students/{user_id}",
    status_code=204,
    summary="Take a student off a class roster (staff)",
)
async def remove_member(
    staff: StaffDep, pool: PoolDep, class_id: str = ClassId, user_id: str = UserId
) -> Response:
    if not await repo.remove_member(
        pool=pool, tenant_id=staff.tenant_id, class_id=class_id, user_id=user_id
    ):
        raise ProblemError(404, "Not found", f"{user_id} is not on the roster of {class_id}")
    return Response(status_code=204)
