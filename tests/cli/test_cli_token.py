"""`lectern token`: tokens the gateway accepts; refuses the development secret in production."""

from __future__ import annotations

import time

import jwt
import pytest

from lectern_cli.main import main
from lectern_common.settings import DEV_JWT_SECRET


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LECTERN_JWT_SECRET", raising=False)
    monkeypatch.delenv("LECTERN_ENVIRONMENT", raising=False)


def _token(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    code = main(["token", *args])
    out = capsys.readouterr().out
    assert code == 0
    assert out.count("\n") == 1, "stdout holds the token only, for $(lectern token ...)"
    return out.strip()


def test_development_token_round_trips_with_the_development_secret(
    capsys: pytest.CaptureFixture[str],
) -> None:
    before = int(time.time())
    token = _token(capsys, "--tenant", "acme", "--user", "u1", "--role", "teacher")
    claims = jwt.decode(token, DEV_JWT_SECRET, algorithms=["HS256"])
    assert jwt.get_unverified_header(token)["alg"] == "HS256"
    assert claims["tenant"] == "acme"
    assert claims["sub"] == "u1"
    assert claims["role"] == "teacher"
    assert claims["plan"] == "free"
    assert before <= claims["iat"] <= int(time.time())
    assert claims["exp"] - claims["iat"] == 12 * 3600


def test_configured_secret_plan_and_ttl_are_used(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "s" * 40
    monkeypatch.setenv("LECTERN_JWT_SECRET", secret)
    token = _token(
        capsys, "--tenant", "t", "--user", "admin-1", "--role", "admin", "--plan", "pro",
        "--ttl", "60",
    )  # fmt: skip
    claims = jwt.decode(token, secret, algorithms=["HS256"])
    assert (claims["role"], claims["plan"]) == ("admin", "pro")
    assert claims["exp"] - claims["iat"] == 60
    with pytest.raises(jwt.InvalidSignatureError):
        jwt.decode(token, DEV_JWT_SECRET, algorithms=["HS256"])


def test_the_gateway_accepts_the_cli_token(capsys: pytest.CaptureFixture[str]) -> None:
    from lectern_gateway.auth import decode_token

    token = _token(capsys, "--tenant", "acme", "--user", "s1", "--role", "student", "--plan", "pro")
    principal = decode_token(token, secret=DEV_JWT_SECRET)
    assert (principal.tenant_id, principal.user_id, principal.role, principal.plan) == (
        "acme", "s1", "student", "pro",
    )  # fmt: skip


@pytest.mark.parametrize("environment", ["production", "test"])
def test_outside_development_without_a_secret_is_refused(
    environment: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LECTERN_ENVIRONMENT", environment)
    monkeypatch.delenv("LECTERN_JWT_SECRET", raising=False)
    code = main(["token", "--tenant", "t", "--user", "u", "--role", "student"])
    captured = capsys.readouterr()
    assert code == 2
    assert captured.out == ""
    assert "LECTERN_JWT_SECRET" in captured.err
    assert f"LECTERN_ENVIRONMENT={environment}" in captured.err
    monkeypatch.setenv("LECTERN_JWT_SECRET", DEV_JWT_SECRET)
    assert main(["token", "--tenant", "t", "--user", "u", "--role", "student"]) == 2


def test_production_with_a_secret_signs_with_it(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LECTERN_ENVIRONMENT", "production")
    monkeypatch.setenv("LECTERN_JWT_SECRET", "p" * 48)
    token = _token(capsys, "--tenant", "t", "--user", "u", "--role", "student")
    assert jwt.decode(token, "p" * 48, algorithms=["HS256"])["sub"] == "u"


@pytest.mark.parametrize(
    ("args", "complaint"),
    [
        (["--user", "u", "--role", "student"], "--tenant"),
        (["--tenant", "t", "--role", "student"], "--user"),
        (["--tenant", "t", "--user", "u"], "--role"),
        (["--tenant", "t", "--user", "u", "--role", "root"], "invalid choice"),
        (["--tenant", "t", "--user", "u", "--role", "student", "--plan", "gold"], "invalid choice"),
        (["--tenant", "t", "--user", "u", "--role", "student", "--ttl", "0"], "positive"),
        (["--tenant", "t", "--user", "u", "--role", "student", "--ttl", "soon"], "not an integer"),
    ],
)
def test_argument_errors_exit_2_with_a_message(
    args: list[str], complaint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["token", *args])
    assert exited.value.code == 2
    captured = capsys.readouterr()
    assert complaint in captured.err
    assert captured.out == ""
