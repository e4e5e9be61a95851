"""Offline checks of docker-compose.yml and the collector config it mounts."""

from __future__ import annotations

import http.server
import importlib.util
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from lectern_cli.runtime.processes import DATABASE_SERVICES

REPO = Path(__file__).resolve().parents[2]
COMPOSE = REPO / "docker-compose.yml"

# service -> (python package, env name, port)
SERVICES: dict[str, tuple[str, str, int]] = {
    "gateway": ("lectern_gateway", "GATEWAY", 8000),
    "ingest": ("lectern_ingest", "INGEST", 8001),
    "retriever": ("lectern_retriever", "RETRIEVER", 8002),
    "reranker": ("lectern_reranker", "RERANKER", 8003),
    "memory": ("lectern_memory", "MEMORY", 8004),
}
#: every Lectern process: the services and the gateway's worker (the gateway's package with
#: another command, its health server on 8005)
PROCESSES: dict[str, tuple[str, str, int]] = {
    **SERVICES,
    "gateway-worker": ("lectern_gateway", "GATEWAY", 8005),
}
ARGUMENTS: dict[str, list[str]] = {"gateway-worker": ["worker"]}
INFRA = {"postgres", "nats", "otel-collector", "migrate"}

Doc = dict[str, Any]


def interpolate(value: str) -> str:
    """Compose's ${VAR:-default} / ${VAR:?error} with an empty environment (defaults only)."""

    def substitute(match: re.Match[str]) -> str:
        operator, argument = match.group(2), match.group(3) or ""
        if operator == ":?":
            return f"<required:{match.group(1)}>"
        return argument if operator == ":-" else ""

    return re.sub(r"\$\{(\w+)(?:(:-|:\?)([^}]*))?\}", substitute, value)


@pytest.fixture(scope="module")
def compose() -> Doc:
    """docker-compose.yml, parsed (anchors and merge keys resolved)."""
    with COMPOSE.open(encoding="utf-8") as handle:
        doc: Doc = yaml.safe_load(handle)
    return doc


@pytest.fixture(scope="module")
def services(compose: Doc) -> dict[str, Doc]:
    """The services section."""
    result: dict[str, Doc] = compose["services"]
    return result


def test_exactly_the_expected_services(services: dict[str, Doc]) -> None:
    assert set(services) == set(PROCESSES) | INFRA


@pytest.mark.parametrize("service", PROCESSES)
def test_service_definition(service: str, services: dict[str, Doc]) -> None:
    package, env_name, port = PROCESSES[service]
    definition = services[service]
    assert definition["command"] == ["python", "-m", package, *ARGUMENTS.get(service, [])]
    assert importlib.util.find_spec(f"{package}.__main__") is not None, package
    assert definition["image"] == services["migrate"]["image"], "one image for every service"
    assert (REPO / definition["build"]["context"] / definition["build"]["dockerfile"]).is_file()

    env = {
        key: interpolate(str(value))
        for key, value in definition["environment"].items()
        if value is not None
    }
    assert env["LECTERN_NATS_URL"] == "nats://nats:4222"
    assert env["LECTERN_OTLP_ENDPOINT"] == "http://otel-collector:4318"
    uses_database = service.removesuffix("-worker") in DATABASE_SERVICES
    if uses_database:
        database = urlsplit(env["LECTERN_DATABASE_URL"])
        assert (database.scheme, database.hostname, database.port) == (
            "postgresql", "postgres", 5432,
        )  # fmt: skip
    else:  # the re-ranker: its reads of the index are the retriever's
        assert "LECTERN_DATABASE_URL" not in env
    assert env["LECTERN_HEALTH_HOST"] == "0.0.0.0"  # noqa: S104 - reachable from the engine
    assert env[f"LECTERN_{env_name}_HTTP_PORT"] == str(port)
    assert env["LECTERN_SERVICE_NAME"] == f"lectern-{service}"
    assert env["LECTERN_STREAM_REPLICAS"] == "1"
    assert env["LECTERN_JWT_SECRET"] == "<required:LECTERN_JWT_SECRET>"
    # Absent unless set: an empty string would count as a configured Gemini key.
    assert definition["environment"].get("LECTERN_GEMINI_API_KEY", None) is None

    depends = {name: spec["condition"] for name, spec in definition["depends_on"].items()}
    on_database = {"migrate": "service_completed_successfully", "postgres": "service_healthy"}
    assert depends == {
        "nats": "service_healthy",
        "otel-collector": "service_started",
        **(on_database if uses_database else {}),
    }

    check = definition["healthcheck"]
    assert check["test"][:3] == ["CMD", "python", "-c"]
    assert f"http://127.0.0.1:{port}/readyz" in check["test"][3]
    assert definition["read_only"] is True and "/tmp" in definition["tmpfs"]


def test_only_the_gateway_is_published(services: dict[str, Doc]) -> None:
    published = {name for name, spec in services.items() if spec.get("ports")}
    assert published == {"gateway"}
    (mapping,) = services["gateway"]["ports"]
    assert interpolate(mapping).rsplit(":", 1)[1] == str(SERVICES["gateway"][2])


def test_migrate_runs_once_before_the_services(services: dict[str, Doc]) -> None:
    migrate = services["migrate"]
    assert migrate["command"] == ["lectern", "migrate"]
    assert migrate["restart"] == "no"
    assert migrate["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert "healthcheck" not in migrate and not migrate.get("ports")
    for service in PROCESSES:
        assert "migrate" not in " ".join(services[service]["command"])


def test_secrets_have_no_default() -> None:
    """Compose refuses to start without each secret rather than falling back to a known one."""
    text = COMPOSE.read_text(encoding="utf-8")
    secrets = re.findall(r"\$\{(\w*(?:PASSWORD|SECRET|KEY)\w*)([^}]*)\}", text)
    assert {name for name, _ in secrets} == {"LECTERN_POSTGRES_PASSWORD", "LECTERN_JWT_SECRET"}
    for name, rest in secrets:
        assert rest.startswith(":?"), f"{name} must be required (${{{name}:?...}}), not defaulted"


def test_migrate_and_services_share_the_database(services: dict[str, Doc]) -> None:
    postgres_env = {k: interpolate(str(v)) for k, v in services["postgres"]["environment"].items()}
    assert postgres_env["POSTGRES_PASSWORD"] == "<required:LECTERN_POSTGRES_PASSWORD>"
    for name in ("migrate", *PROCESSES):
        if name.removesuffix("-worker") not in ("migrate", *DATABASE_SERVICES):
            assert "LECTERN_DATABASE_URL" not in services[name]["environment"]
            continue
        url = urlsplit(interpolate(services[name]["environment"]["LECTERN_DATABASE_URL"]))
        assert url.username == postgres_env["POSTGRES_USER"]
        assert url.password == postgres_env["POSTGRES_PASSWORD"]
        assert url.path.lstrip("/") == postgres_env["POSTGRES_DB"]


def test_postgres(services: dict[str, Doc], compose: Doc) -> None:
    postgres = services["postgres"]
    assert postgres["image"] == "pgvector/pgvector:pg17"
    assert "pg_isready" in " ".join(postgres["healthcheck"]["test"])
    volume, target = postgres["volumes"][0].split(":")[:2]
    assert volume in compose["volumes"] and target == "/var/lib/postgresql/data"


def test_nats(services: dict[str, Doc], compose: Doc) -> None:
    nats = services["nats"]
    assert nats["image"] == "nats:2.11-alpine", "the scratch image has no wget"
    command = nats["command"]
    assert "-js" in command
    assert command[command.index("-sd") + 1] == "/data"
    assert command[command.index("-m") + 1] == "8222"
    volume, target = nats["volumes"][0].split(":")[:2]
    assert volume in compose["volumes"] and target == "/data"
    check = nats["healthcheck"]["test"]
    assert check[:2] == ["CMD", "wget"]
    assert any(re.match(r"http://(127\.0\.0\.1|localhost):8222/healthz", arg) for arg in check)


def test_otel_collector(services: dict[str, Doc]) -> None:
    collector = services["otel-collector"]
    assert collector["image"].startswith("otel/opentelemetry-collector-contrib:")
    source, target = collector["volumes"][0].split(":")[:2]
    config_path = (REPO / source).resolve()
    assert config_path == (REPO / "deploy" / "otel-collector.yaml").resolve()
    assert f"--config={target}" in collector["command"]

    config: Doc = yaml.safe_load(config_path.read_text(encoding="utf-8"))
    endpoint = config["receivers"]["otlp"]["protocols"]["http"]["endpoint"]
    otlp_port = urlsplit(services["gateway"]["environment"]["LECTERN_OTLP_ENDPOINT"]).port
    assert endpoint.rsplit(":", 1)[1] == str(otlp_port)
    assert "debug" in config["exporters"]
    pipelines = config["service"]["pipelines"]
    assert {"traces", "metrics"} <= set(pipelines)
    for pipeline in pipelines.values():
        for section in ("receivers", "processors", "exporters"):
            for component in pipeline.get(section, []):
                assert component in config[section], f"{component} is not defined"
    for extension in config["service"].get("extensions", []):
        assert extension in config["extensions"]


class _Readiness(http.server.BaseHTTPRequestHandler):
    status = 200

    def do_GET(self) -> None:
        self.send_response(self.status if self.path == "/readyz" else 404)
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        """Silence the per-request log line."""


@pytest.fixture
def readiness_server() -> Iterator[tuple[http.server.HTTPServer, type[_Readiness]]]:
    """A local /readyz whose status code a test chooses."""
    handler = type("Handler", (_Readiness,), {})
    server = http.server.HTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield server, handler
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("service", PROCESSES)
def test_healthcheck_command_follows_readyz(
    service: str,
    services: dict[str, Doc],
    readiness_server: tuple[http.server.HTTPServer, type[_Readiness]],
) -> None:
    server, handler = readiness_server
    code = services[service]["healthcheck"]["test"][3].replace(
        f"127.0.0.1:{PROCESSES[service][2]}", f"127.0.0.1:{server.server_address[1]}"
    )
    for status, healthy in ((200, True), (503, False)):
        handler.status = status
        result = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, timeout=30, check=False
        )
        assert (result.returncode == 0) is healthy, (status, result.stderr)
