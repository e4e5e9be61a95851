"""The LTI domain's plain functions: role mapping, link targets, the scores URL, the retry
wait, the checks of a platform's openid-configuration and of a launch's LTI claims."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from lectern_gateway.lti import claims
from lectern_gateway.lti.launch import check_lti_claims
from lectern_gateway.lti.registration import check_platform_configuration, tool_configuration
from lectern_gateway.lti.scores import retry_delay, scores_url
from lectern_gateway.lti.service import Target, class_for, parse_target, target_of
from lectern_gateway.problems import ProblemError
from lectern_gateway.web.routes import STATIC_DIR, security_headers

M = "http://purl.imsglobal.org/vocab/lis/v2/membership#"
INSTITUTION = "http://purl.imsglobal.org/vocab/lis/v2/institution/person#"
SYSTEM = "http://purl.imsglobal.org/vocab/lis/v2/system/person#"


@pytest.mark.parametrize(
    ("roles", "expected"),
    [
        ([M + "Learner"], "student"),
        ([M + "Instructor"], "teacher"),
        ([M + "Instructor#TeachingAssistant"], "teacher"),
        ([M + "ContentDeveloper"], "teacher"),
        ([M + "Administrator"], "teacher"),
        (["Instructor"], "teacher"),
        (["Learner"], "student"),
        ([M + "Mentor"], "student"),
        ([INSTITUTION + "Administrator", SYSTEM + "Administrator"], "student"),
        ([INSTITUTION + "Instructor"], "student"),  # an institution role is not the course's
        ([], "student"),
        ([M + "Learner", M + "Instructor"], "teacher"),
    ],
)
def test_lti_roles_map_to_student_or_teacher_never_admin(roles: list[str], expected: str) -> None:
    assert claims.lectern_role(roles) == expected


def test_targets_parse_and_anything_else_is_home() -> None:
    quiz = uuid.uuid4()
    assert parse_target(f"quiz:{quiz}") == Target("quiz", str(quiz))
    assert parse_target(f"document:{quiz}") == Target("document", str(quiz))
    assert parse_target("module:Unit 3") == Target("module", "Unit 3")
    for junk in (None, "", "quiz:not-a-uuid", "module:", "admin:1", "quiz", "x" * 300):
        assert parse_target(junk) == Target("home")
    assert str(Target("quiz", "q")) == "quiz:q" and str(Target("home")) == "home"
    custom = {claims.CUSTOM: {claims.TARGET_PARAMETER: f"quiz:{quiz}"}}
    assert target_of(custom) == Target("quiz", str(quiz))
    by_uri = {claims.TARGET_LINK_URI: f"https://t.example/lti/launch?target=quiz:{quiz}"}
    assert target_of(by_uri) == Target("quiz", str(quiz))


def test_a_course_maps_to_one_stable_class_per_registration() -> None:
    one, two = uuid.uuid4(), uuid.uuid4()
    assert class_for(one, "c1") == class_for(one, "c1")
    assert class_for(one, "c1") != class_for(two, "c1") != class_for(one, "c2")
    assert class_for(one, "c" * 1000).startswith("lti-") and len(class_for(one, "c")) == 24


def test_the_scores_url_keeps_the_line_items_query() -> None:
    assert scores_url("https://lms.example/li/7") == "https://lms.example/li/7/scores"
    assert scores_url("https://lms.example/li/7/") == "https://lms.example/li/7/scores"
    assert scores_url("https://lms.example/li/7?type_id=2") == (
        "https://lms.example/li/7/scores?type_id=2"
    )


def test_the_retry_wait_follows_the_schedule_and_repeats_its_last() -> None:
    schedule = [5.0, 30.0, 120.0]
    assert [retry_delay(n, schedule) for n in (1, 2, 3, 4, 10)] == [5, 30, 120, 120, 120]


def _config(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "issuer": "https://moodle.school.example",
        "authorization_endpoint": "https://moodle.school.example/mod/lti/auth.php",
        "token_endpoint": "https://moodle.school.example/mod/lti/token.php",
        "jwks_uri": "https://moodle.school.example/mod/lti/certs.php",
        "registration_endpoint": "https://moodle.school.example/mod/lti/openid-registration.php",
        "id_token_signing_alg_values_supported": ["RS256"],
        claims.PLATFORM_CONFIGURATION: {"product_family_code": "moodle"},
    }
    base.update(changes)
    return {k: v for k, v in base.items() if v is not None}


MOODLE_URL = "https://moodle.school.example/mod/lti/openid-configuration.php"


def test_a_platform_configuration_is_checked() -> None:
    assert check_platform_configuration(_config(), MOODLE_URL)["issuer"]
    canvas = _config(issuer="https://canvas.instructure.com")
    # Canvas Cloud serves its configuration from the school's host, not the issuer's
    assert check_platform_configuration(
        canvas, "https://school.instructure.com/api/lti/security/openid-configuration"
    )
    bad = [
        (_config(issuer="https://evil.example"), "issuer_mismatch"),
        (_config(jwks_uri=None), "bad_registration"),
        (_config(token_endpoint="http://moodle.school.example/token"), "bad_registration"),
        (_config(id_token_signing_alg_values_supported=["HS256"]), "bad_registration"),
        (_config(**{claims.PLATFORM_CONFIGURATION: None}), "bad_registration"),
        ([], "bad_registration"),
    ]
    for config, reason in bad:
        with pytest.raises(ProblemError) as raised:
            check_platform_configuration(config, MOODLE_URL)
        assert raised.value.status == 400 and raised.value.extra["reason"] == reason


def test_the_tool_configuration_names_our_endpoints() -> None:
    config = tool_configuration("https://lectern.school.example")
    assert config["initiate_login_uri"] == "https://lectern.school.example/lti/login"
    assert config["redirect_uris"] == ["https://lectern.school.example/lti/launch"]
    assert config["jwks_uri"] == "https://lectern.school.example/lti/jwks"
    tool = config[claims.TOOL_CONFIGURATION]
    assert tool["domain"] == "lectern.school.example"
    assert {m["type"] for m in tool["messages"]} == set(claims.MESSAGE_TYPES)
    assert claims.SCOPE_SCORE in config["scope"].split()


def _launch(**changes: Any) -> dict[str, Any]:
    token: dict[str, Any] = {
        "sub": "u1",
        claims.MESSAGE_TYPE: claims.RESOURCE_LINK_REQUEST,
        claims.VERSION: "1.3.0",
        claims.ROLES: [M + "Learner"],
        claims.TARGET_LINK_URI: "https://t.example/lti/launch",
        claims.RESOURCE_LINK: {"id": "r1"},
        claims.CONTEXT: {"id": "c1"},
    }
    token.update(changes)
    return {k: v for k, v in token.items() if v is not None}


def test_the_lti_claims_of_a_launch_are_checked() -> None:
    assert check_lti_claims(_launch()) == claims.RESOURCE_LINK_REQUEST
    assert check_lti_claims(_launch(**{claims.CONTEXT: None})) == claims.RESOURCE_LINK_REQUEST
    bad = {
        "unsupported_message": _launch(**{claims.MESSAGE_TYPE: "LtiSubmissionReviewRequest"}),
        "wrong_version": _launch(**{claims.VERSION: "1.3"}),
        "missing_claim": _launch(**{claims.ROLES: "Learner"}),
    }
    for reason, token in bad.items():
        with pytest.raises(ProblemError) as raised:
            check_lti_claims(token)
        assert raised.value.extra["reason"] == reason
    for broken in (
        {claims.RESOURCE_LINK: {"title": "no id"}},
        {claims.CONTEXT: {"title": "no id"}},
        {"sub": ""},
        {claims.MESSAGE_TYPE: claims.DEEP_LINKING_REQUEST},  # without its settings
    ):
        with pytest.raises(ProblemError):
            check_lti_claims(_launch(**broken))


def test_lmss_allowed_to_frame_the_web_ui_widen_only_frame_ancestors() -> None:
    assert "frame-ancestors 'none'" in security_headers([])["Content-Security-Policy"]
    csp = security_headers(["https://moodle.school.edu", "https://*.instructure.com"])[
        "Content-Security-Policy"
    ]
    assert "frame-ancestors 'self' https://moodle.school.edu https://*.instructure.com" in csp
    assert "'none'" not in csp.split("frame-ancestors")[1] and "script-src 'self'" in csp


def test_the_lti_script_never_parses_server_text_as_html() -> None:
    text = (STATIC_DIR / "lti.js").read_text()
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("):
        assert sink not in text, sink
