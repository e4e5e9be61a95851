"""The deployment files configure the services with variables the code actually reads.

Each service's environment, as compose and Kubernetes give it, is fed to that service's
real ``Settings`` class; docs/deploy.md must document every variable the files use.
"""

from __future__ import annotations

import os
import re
import secrets
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import AliasChoices

from lectern_cli.runtime.processes import DATABASE_SERVICES
from lectern_common.settings import BaseServiceSettings, ServiceHttpSettings
from lectern_gateway.config import Settings as GatewaySettings
from lectern_ingest.config import Settings as IngestSettings
from lectern_memory.config import Settings as MemorySettings
from lectern_reranker.config import Settings as RerankerSettings
from lectern_retriever.config import Settings as RetrieverSettings

REPO = Path(__file__).resolve().parents[2]
K8S = REPO / "deploy" / "k8s"
DOCS = REPO / "docs" / "deploy.md"

SETTINGS: dict[str, type[ServiceHttpSettings]] = {
    "gateway": GatewaySettings,
    "ingest": IngestSettings,
    "retriever": RetrieverSettings,
    "reranker": RerankerSettings,
    "memory": MemorySettings,
}
PORTS = {"gateway": 8000, "ingest": 8001, "retriever": 8002, "reranker": 8003, "memory": 8004}
# Read by docker-compose.yml itself (interpolation), not by the services.
COMPOSE_ONLY = {"LECTERN_POSTGRES_PASSWORD", "LECTERN_IMAGE", "LECTERN_GATEWAY_PUBLISH"}
SAMPLE_DSN = "postgresql://lectern:pw@lectern-postgres-rw.lectern:5432/lectern"

Doc = dict[str, Any]


def env_names(settings: type[BaseServiceSettings]) -> set[str]:
    """Every LECTERN_* variable a settings class reads."""
    prefix = str(settings.model_config.get("env_prefix", ""))
    names: set[str] = set()
    for field_name, field in settings.model_fields.items():
        alias = field.validation_alias
        if isinstance(alias, AliasChoices):
            names |= {choice.upper() for choice in alias.choices if isinstance(choice, str)}
        elif isinstance(alias, str):
            names.add(alias.upper())
        else:
            names.add(f"{prefix}{field_name}".upper())
    return names


def lectern(names: set[str] | list[str]) -> set[str]:
    """Only the LECTERN_* names."""
    return {name for name in names if name.startswith("LECTERN_")}


def compose_env(service: str) -> dict[str, str]:
    """A compose service's environment with defaults applied and the required secrets set."""
    with (REPO / "docker-compose.yml").open(encoding="utf-8") as handle:
        definition = yaml.safe_load(handle)["services"][service]
    required: dict[str, str] = {}  # one random value per required variable, as a shell gives

    def required_value(match: re.Match[str]) -> str:
        return required.setdefault(match[1], secrets.token_hex(32))

    env: dict[str, str] = {}
    for key, value in definition["environment"].items():
        if value is None:
            continue
        text = re.sub(r"\$\{(\w+):\?[^}]*\}", required_value, str(value))
        env[key] = re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", text)
    assert "${" not in "".join(env.values()), env
    return env


def k8s_docs(directory: Path) -> list[Doc]:
    """Every document of every manifest under a directory."""
    docs: list[Doc] = []
    for path in sorted(directory.glob("*.yaml")):
        with path.open(encoding="utf-8") as handle:
            docs.extend(doc for doc in yaml.safe_load_all(handle) if doc)
    return docs


def k8s_env(service: str, docs: list[Doc]) -> dict[str, str]:
    """A Deployment's environment: ConfigMap, Secret, then its own env (sample secrets)."""
    config = next(d for d in docs if d["kind"] == "ConfigMap")["data"]
    deployment = next(
        d
        for d in docs
        if d["kind"] == "Deployment" and d["metadata"]["name"] == f"lectern-{service}"
    )
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    env = dict(config) | {"LECTERN_JWT_SECRET": secrets.token_hex(32)}
    for entry in container["env"]:
        if "value" in entry:
            env[entry["name"]] = entry["value"]
        elif entry["name"] == "LECTERN_DATABASE_URL":
            env[entry["name"]] = SAMPLE_DSN
        elif entry["name"] == "LECTERN_NATS_PASSWORD":
            env[entry["name"]] = secrets.token_hex(24)
    return env


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """No LECTERN_* variable from the test process leaks into the settings under test."""
    for name in list(os.environ):
        if name.startswith("LECTERN_"):
            monkeypatch.delenv(name)
    return monkeypatch


def build_settings(
    monkeypatch: pytest.MonkeyPatch, service: str, env: dict[str, str]
) -> ServiceHttpSettings:
    """The service's real Settings, read from exactly this environment."""
    unknown = lectern(set(env)) - env_names(SETTINGS[service])
    assert not unknown, f"{service} does not read {sorted(unknown)}"
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return SETTINGS[service]()


@pytest.mark.parametrize("service", SETTINGS)
def test_compose_environment_builds_the_service_settings(
    service: str, clean_env: pytest.MonkeyPatch
) -> None:
    settings = build_settings(clean_env, service, compose_env(service))
    assert settings.http_port == PORTS[service]
    assert settings.health_host == "0.0.0.0"  # noqa: S104
    assert settings.environment == "production"
    assert settings.nats_url == "nats://nats:4222"
    # the re-ranker has no database: its settings keep the (unused) default
    uses_database = service in DATABASE_SERVICES
    assert settings.database_url.startswith("postgresql://lectern:") == uses_database
    assert settings.otlp_endpoint == "http://otel-collector:4318"
    assert settings.service_name == f"lectern-{service}"
    assert settings.log_json is True
    assert settings.gemini_api_key is None


def test_compose_migrate_environment_is_read_by_the_shared_settings(
    clean_env: pytest.MonkeyPatch,
) -> None:
    env = compose_env("migrate")
    assert not lectern(set(env)) - env_names(BaseServiceSettings)
    for key, value in env.items():
        clean_env.setenv(key, value)
    assert BaseServiceSettings().database_url.endswith("@postgres:5432/lectern")


@pytest.mark.parametrize("overlay", ["dev", "prod"])
@pytest.mark.parametrize("service", SETTINGS)
def test_k8s_environment_builds_the_service_settings(
    overlay: str, service: str, clean_env: pytest.MonkeyPatch
) -> None:
    docs = k8s_docs(K8S / "base")
    overlay_config = next(
        d for d in k8s_docs(K8S / "overlays" / overlay) if d["kind"] == "ConfigMap"
    )["data"]
    next(d for d in docs if d["kind"] == "ConfigMap")["data"].update(overlay_config)
    settings = build_settings(clean_env, service, k8s_env(service, docs))
    assert settings.http_port == PORTS[service]
    assert settings.nats_credentials is not None
    assert settings.nats_credentials[0] == f"lectern-{service}"
    assert settings.health_host == "0.0.0.0"  # noqa: S104
    assert settings.stream_replicas == (3 if overlay == "prod" else 1)
    assert settings.nats_credentials is not None
    assert settings.nats_credentials[0] == f"lectern-{service}"
    assert settings.environment == ("production" if overlay == "prod" else "development")


def test_k8s_shared_config_is_read_by_every_service() -> None:
    docs = k8s_docs(K8S / "base")
    shared = set(next(d for d in docs if d["kind"] == "ConfigMap")["data"])
    shared |= set(next(d for d in docs if d["kind"] == "Secret")["stringData"])
    for service, settings in SETTINGS.items():
        assert not lectern(shared) - env_names(settings), service


def used_variables() -> set[str]:
    """Every variable compose or the Kubernetes manifests set or interpolate."""
    compose_text = (REPO / "docker-compose.yml").read_text(encoding="utf-8")
    names = set(re.findall(r"\$\{(\w+)", compose_text))
    for definition in yaml.safe_load(compose_text)["services"].values():
        names |= set(definition.get("environment", {}))
    for directory in {path.parent for path in K8S.rglob("*.yaml")}:
        for doc in k8s_docs(directory):
            names |= set(doc.get("data", {}) if doc.get("kind") == "ConfigMap" else {})
            names |= set(doc.get("stringData", {}) if doc.get("kind") == "Secret" else {})
            if doc.get("kind") in ("Deployment", "Job"):
                for container in doc["spec"]["template"]["spec"].get("containers", []):
                    names |= {entry["name"] for entry in container.get("env", [])}
    return names


def documented_variables() -> set[str]:
    """The variables in the configuration table of docs/deploy.md."""
    return set(re.findall(r"^\| `(\w+)` \|", DOCS.read_text(encoding="utf-8"), re.M))


def test_docs_document_every_variable_the_files_use() -> None:
    missing = lectern(used_variables()) - COMPOSE_ONLY - documented_variables()
    assert not missing, f"not in docs/deploy.md's table: {sorted(missing)}"
    text = DOCS.read_text(encoding="utf-8")
    for name in COMPOSE_ONLY & used_variables():
        assert f"`{name}`" in text, name


def test_documented_variables_exist() -> None:
    known = set().union(*(env_names(s) for s in SETTINGS.values()))
    stale = lectern(documented_variables()) - known
    assert not stale, f"docs/deploy.md documents variables no service reads: {sorted(stale)}"


def test_the_gateway_worker_reads_the_gateway_settings(clean_env: pytest.MonkeyPatch) -> None:
    """The worker (compose's gateway-worker, Kubernetes' lectern-gateway-worker) is the
    gateway's package: its environment builds the gateway's settings, named as the worker,
    with the gateway's NATS user."""
    from lectern_gateway.worker import WORKER_SERVICE_NAME, worker_settings

    compose = build_settings(clean_env, "gateway", compose_env("gateway-worker"))
    assert isinstance(compose, GatewaySettings)
    assert compose.http_port == 8005
    assert worker_settings(compose).service_name == WORKER_SERVICE_NAME
    for key in compose_env("gateway-worker"):
        clean_env.delenv(key)
    k8s = build_settings(clean_env, "gateway", k8s_env("gateway-worker", k8s_docs(K8S / "base")))
    assert isinstance(k8s, GatewaySettings)
    assert k8s.http_port == 8000
    assert k8s.service_name == WORKER_SERVICE_NAME
    assert k8s.nats_credentials is not None and k8s.nats_credentials[0] == "lectern-gateway"
    assert worker_settings(GatewaySettings()).service_name == WORKER_SERVICE_NAME
