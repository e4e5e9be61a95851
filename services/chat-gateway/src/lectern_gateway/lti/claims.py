"""The LTI 1.3 / LTI Advantage vocabulary (claim URIs, media types, scopes) and the role
mapping: plain values and functions, no I/O."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

LTI = "https://purl.imsglobal.org/spec/lti/claim/"
MESSAGE_TYPE = LTI + "message_type"
VERSION = LTI + "version"
DEPLOYMENT_ID = LTI + "deployment_id"
TARGET_LINK_URI = LTI + "target_link_uri"
RESOURCE_LINK = LTI + "resource_link"
ROLES = LTI + "roles"
CONTEXT = LTI + "context"
CUSTOM = LTI + "custom"
DEEP_LINKING_SETTINGS = "https://purl.imsglobal.org/spec/lti-dl/claim/deep_linking_settings"
CONTENT_ITEMS = "https://purl.imsglobal.org/spec/lti-dl/claim/content_items"
DL_DATA = "https://purl.imsglobal.org/spec/lti-dl/claim/data"
DL_MSG = "https://purl.imsglobal.org/spec/lti-dl/claim/msg"
NRPS = "https://purl.imsglobal.org/spec/lti-nrps/claim/namesroleservice"
AGS = "https://purl.imsglobal.org/spec/lti-ags/claim/endpoint"
TOOL_CONFIGURATION = "https://purl.imsglobal.org/spec/lti-tool-configuration"
PLATFORM_CONFIGURATION = "https://purl.imsglobal.org/spec/lti-platform-configuration"

LTI_VERSION = "1.3.0"
RESOURCE_LINK_REQUEST = "LtiResourceLinkRequest"
DEEP_LINKING_REQUEST = "LtiDeepLinkingRequest"
DEEP_LINKING_RESPONSE = "LtiDeepLinkingResponse"
MESSAGE_TYPES = (RESOURCE_LINK_REQUEST, DEEP_LINKING_REQUEST)

SCOPE_MEMBERSHIPS = "https://purl.imsglobal.org/spec/lti-nrps/scope/contextmembership.readonly"
SCOPE_SCORE = "https://purl.imsglobal.org/spec/lti-ags/scope/score"
SCOPE_LINEITEM = "https://purl.imsglobal.org/spec/lti-ags/scope/lineitem"
SCOPE_LINEITEM_READ = "https://purl.imsglobal.org/spec/lti-ags/scope/lineitem.readonly"
SCOPE_RESULT_READ = "https://purl.imsglobal.org/spec/lti-ags/scope/result.readonly"
TOOL_SCOPES = (SCOPE_MEMBERSHIPS, SCOPE_SCORE, SCOPE_LINEITEM, SCOPE_LINEITEM_READ)

MEMBERSHIPS_MEDIA_TYPE = "application/vnd.ims.lti-nrps.v2.membershipcontainer+json"
SCORE_MEDIA_TYPE = "application/vnd.ims.lis.v1.score+json"
CLIENT_ASSERTION_TYPE = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"

#: the custom parameter a placed link carries: what it opens (``quiz:<id>``, ``document:<id>``,
#: ``module:<name>``)
TARGET_PARAMETER = "lectern_target"

MEMBERSHIP = "http://purl.imsglobal.org/vocab/lis/v2/membership#"
#: context roles that teach (the LIS vocabulary, its sub-roles and the deprecated short names);
#: every other role, institution and system roles included, is a student. No launch makes an
#: admin: a platform administrator manages Lectern through Lectern's own admins.
_TEACHING = ("Instructor", "ContentDeveloper", "Administrator", "TeachingAssistant")

Role = Literal["student", "teacher"]


def _teaches(role: str) -> bool:
    if role in _TEACHING:  # short names (LTI 1.3 allows them in the roles claim)
        return True
    if role.startswith(MEMBERSHIP):
        name = role.removeprefix(MEMBERSHIP)
        return name.split("#", 1)[0].split("/", 1)[0] in _TEACHING
    return False


def lectern_role(roles: Iterable[str]) -> Role:
    """Teacher when any context role teaches (Instructor, TeachingAssistant, ContentDeveloper,
    course Administrator), else student; never admin."""
    return "teacher" if any(_teaches(r) for r in roles) else "student"
