"""Settings: shared LECTERN_* values, per-service prefixes, secrets validated."""

import pytest
from pydantic import SecretStr, ValidationError

from lectern_common.settings import DEV_JWT_SECRET, BaseServiceSettings, Environment
from lectern_gateway.config import Settings as GatewaySettings
from lectern_ingest.config import Settings as IngestSettings


def test_shared_values_come_from_lectern_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LECTERN_NATS_URL", "nats://shared:4222")
    monkeypatch.setenv("NATS_URL", "nats://unprefixed-must-be-ignored:1")
    monkeypatch.setenv("LECTERN_INGEST_HTTP_PORT", "9101")
    monkeypatch.setenv("LECTERN_GATEWAY_HTTP_PORT", "9100")
    ingest, gateway = IngestSettings(), GatewaySettings()
    assert ingest.nats_url == gateway.nats_url == "nats://shared:4222"
    assert (ingest.http_port, gateway.http_port) == (9101, 9100)
    assert (ingest.service_name, gateway.service_name) == ("lectern-ingest", "lectern-gateway")


def test_keyword_arguments_override_without_environment() -> None:
    settings = GatewaySettings(nats_url="nats://kw:1", http_port=1234)
    assert (settings.nats_url, settings.http_port) == ("nats://kw:1", 1234)


def test_only_development_has_a_default_secret() -> None:
    development = BaseServiceSettings(environment="development")
    assert development.effective_jwt_secret == DEV_JWT_SECRET


@pytest.mark.parametrize("environment", ["test", "production"])
def test_outside_development_the_development_secret_is_refused(environment: Environment) -> None:
    with pytest.raises(ValidationError, match=f"LECTERN_ENVIRONMENT={environment}"):
        BaseServiceSettings(environment=environment)
    with pytest.raises(ValidationError, match="LECTERN_JWT_SECRET"):
        BaseServiceSettings(environment=environment, jwt_secret=SecretStr(DEV_JWT_SECRET))
    with pytest.raises(ValidationError, match="at least 32"):
        BaseServiceSettings(environment=environment, jwt_secret=SecretStr("short"))
    ok = BaseServiceSettings(environment=environment, jwt_secret=SecretStr("x" * 40))
    assert ok.effective_jwt_secret == "x" * 40


def test_environment_variable_outside_development_needs_a_secret(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LECTERN_ENVIRONMENT", "test")
    monkeypatch.delenv("LECTERN_JWT_SECRET", raising=False)
    with pytest.raises(ValidationError, match="LECTERN_JWT_SECRET"):
        GatewaySettings()
    monkeypatch.setenv("LECTERN_JWT_SECRET", "s" * 32)
    assert GatewaySettings().effective_jwt_secret == "s" * 32


def test_gemini_provider_needs_a_key() -> None:
    with pytest.raises(ValidationError, match="GEMINI_API_KEY"):
        BaseServiceSettings(embedding_provider="gemini")
    assert BaseServiceSettings(gemini_api_key=SecretStr("k")).gemini_enabled
