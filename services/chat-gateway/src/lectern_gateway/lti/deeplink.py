"""Deep Linking 2.0: a teacher picking content in the LMS chooses a course module, a document
or a quiz of Lectern; the signed ``LtiDeepLinkingResponse`` places it in the course as an
``ltiResourceLink`` (with a line item for a quiz, so that its scores reach the gradebook)."""

from __future__ import annotations

import secrets
import uuid
from dataclasses import dataclass
from typing import Any

from lectern_common.db.types import Pool
from lectern_gateway.lti import claims, keys
from lectern_gateway.lti import repository as repo
from lectern_gateway.lti.service import Target, parse_target
from lectern_gateway.problems import ProblemError

RESOURCE_LINK_TYPE = "ltiResourceLink"


@dataclass(frozen=True)
class Choice:
    """Something the teacher may place."""

    target: Target
    title: str
    detail: str = ""
    questions: int | None = None


async def choices(pool: Pool, *, tenant_id: str, class_id: str | None) -> list[Choice]:
    """Modules, documents and quizzes of the class (or of no class), in that order."""
    documents = await repo.placeable_documents(pool, tenant_id=tenant_id, class_id=class_id)
    quizzes = await repo.placeable_quizzes(pool, tenant_id=tenant_id, class_id=class_id)
    modules = sorted({d["module_tag"] for d in documents if d["module_tag"]})
    return [
        *(Choice(Target("module", m), m, "course module") for m in modules),
        *(Choice(Target("document", str(d["id"])), d["title"], "document") for d in documents),
        *(
            Choice(
                Target("quiz", str(q["id"])),
                q["title"],
                f"quiz, {q['questions']} questions",
                questions=int(q["questions"]),
            )
            for q in quizzes
        ),
    ]


def _refused(status: int, reason: str, detail: str) -> ProblemError:
    return ProblemError(status, "Deep link refused", detail, reason=reason)


async def respond(
    *, pool: Pool, deep_link_id: str, picked: list[str], launch_url: str, lifetime_s: int
) -> tuple[str, str]:
    """Sign the response placing ``picked`` (targets as ``kind:id``); (return URL, JWT).
    The request is used once; nothing is placed when any pick is wrong."""
    request = await repo.get_deep_link(pool, deep_link_id)
    if request is None:
        raise _refused(
            404,
            "unknown_deep_link",
            "no deep-linking request of that id waits (answered already, expired, or never made)",
        )
    if RESOURCE_LINK_TYPE not in request["accept_types"]:
        raise _refused(400, "type_not_accepted", "the platform does not accept LTI links here")
    if not picked or (len(picked) > 1 and not request["accept_multiple"]):
        raise _refused(400, "bad_pick", "pick one item" if picked else "nothing was picked")
    offered = {
        str(c.target): c
        for c in await choices(pool, tenant_id=request["tenant_id"], class_id=request["class_id"])
    }
    chosen = [offered.get(str(parse_target(p))) for p in picked]
    if any(c is None for c in chosen):
        raise _refused(400, "bad_pick", "a picked item is not one this course may place")
    registration = await repo.registration_by_id(pool, request["registration_id"])
    if registration is None or not await repo.use_deep_link(pool, deep_link_id):
        raise _refused(404, "unknown_deep_link", "this deep-linking request was answered already")
    items = [_item(c, launch_url) for c in chosen if c is not None]
    for c in chosen:
        if c is not None and c.target.kind == "quiz" and request["class_id"] and c.target.id:
            await repo.assign_quiz(
                pool,
                tenant_id=request["tenant_id"],
                quiz_id=uuid.UUID(c.target.id),
                class_id=request["class_id"],
            )
    message: dict[str, Any] = {
        "iss": registration["client_id"],
        "aud": registration["issuer"],
        "nonce": secrets.token_urlsafe(16),
        claims.MESSAGE_TYPE: claims.DEEP_LINKING_RESPONSE,
        claims.VERSION: claims.LTI_VERSION,
        claims.DEPLOYMENT_ID: request["deployment_id"],
        claims.CONTENT_ITEMS: items,
    }
    if request["data"]:
        message[claims.DL_DATA] = request["data"]
    signed = await keys.sign(pool, message, lifetime_s=lifetime_s)
    return request["return_url"], signed


def _item(choice: Choice, launch_url: str) -> dict[str, Any]:
    item: dict[str, Any] = {
        "type": RESOURCE_LINK_TYPE,
        "title": choice.title,
        "url": launch_url,
        "custom": {claims.TARGET_PARAMETER: str(choice.target)},
    }
    if choice.target.kind == "quiz":
        item["lineItem"] = {
            "scoreMaximum": max(choice.questions or 1, 1),
            "label": choice.title,
            "resourceId": str(choice.target),
            "tag": "lectern-quiz",
        }
    return item
