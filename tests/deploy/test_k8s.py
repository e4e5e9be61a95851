"""Offline checks of deploy/k8s: kustomize structure, workloads, scaling, policies, infra.

No kubectl or kustomize here: the kustomizations are read and "built" by a small subset of
kustomize (resources, strategic-merge and JSON 6902 patches, images, namespace) so that the
overlays' results are checked too, and every patch must hit something.
"""

from __future__ import annotations

import copy
import importlib.util
import re
import tomllib
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

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
UID = 10001

Doc = dict[str, Any]


# --- a small kustomize ------------------------------------------------------------------


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


def matches(doc: Doc, target: Doc) -> bool:
    """Whether a resource is selected by a kustomize patch target."""
    if "kind" in target and doc.get("kind") != target["kind"]:
        return False
    if "name" in target and name_of(doc) != target["name"]:
        return False
    if "labelSelector" in target:
        labels = doc["metadata"].get("labels", {})
        for term in str(target["labelSelector"]).split(","):
            key, value = term.split("=", 1)
            if labels.get(key.strip()) != value.strip():
                return False
    return True


def strategic_merge(base: Any, patch: Any) -> Any:
    """Strategic merge: maps merge, lists of named maps merge by name, other lists replace."""
    if isinstance(base, dict) and isinstance(patch, dict):
        merged = dict(base)
        for key, value in patch.items():
            merged[key] = strategic_merge(base[key], value) if key in base else value
        return merged
    if (
        isinstance(base, list)
        and isinstance(patch, list)
        and all(isinstance(item, dict) and "name" in item for item in base + patch)
    ):
        patches = {item["name"]: item for item in patch}
        merged_list = [
            strategic_merge(item, patches[item["name"]]) if item["name"] in patches else item
            for item in base
        ]
        known = {item["name"] for item in base}
        return merged_list + [item for item in patch if item["name"] not in known]
    return copy.deepcopy(patch)


def _pointer(path: str) -> list[str]:
    assert path.startswith("/"), path
    return [part.replace("~1", "/").replace("~0", "~") for part in path[1:].split("/")]


def _step(node: Any, part: str, path: str) -> Any:
    if isinstance(node, list):
        index = int(part)
        assert 0 <= index < len(node), f"{path}: index {index} out of range"
        return node[index]
    assert isinstance(node, dict) and part in node, f"{path}: {part!r} does not exist"
    return node[part]


def json_patch(doc: Doc, ops: list[Doc]) -> None:
    """Apply RFC 6902 replace/add/remove operations; a missing path fails like kustomize."""
    for op in ops:
        parts = _pointer(op["path"])
        parent: Any = doc
        for part in parts[:-1]:
            parent = _step(parent, part, op["path"])
        last = parts[-1]
        if op["op"] == "replace":
            _step(parent, last, op["path"])
            parent[int(last) if isinstance(parent, list) else last] = op["value"]
        elif op["op"] == "add":
            if isinstance(parent, list):
                parent.insert(len(parent) if last == "-" else int(last), op["value"])
            else:
                parent[last] = op["value"]
        elif op["op"] == "remove":
            _step(parent, last, op["path"])
            del parent[int(last) if isinstance(parent, list) else last]
        else:
            pytest.fail(f"unsupported JSON patch op {op['op']}")


def apply_patch(docs: list[Doc], entry: Doc, directory: Path) -> list[Doc]:
    """Apply one `patches:` entry; it must select at least one resource."""
    if "path" in entry:
        patches = load_docs(directory / entry["path"])
    else:
        loaded = yaml.safe_load(entry["patch"])
        patches = [loaded]
    target = entry.get("target")
    result = docs
    for patch in patches:
        if isinstance(patch, list):
            assert target, "a JSON 6902 patch needs a target"
            selected = [doc for doc in result if matches(doc, target)]
            assert selected, f"patch target {target} matches nothing"
            for doc in selected:
                json_patch(doc, patch)
            continue
        selector = target or {"kind": patch["kind"], "name": name_of(patch)}
        selected_ids = [i for i, doc in enumerate(result) if matches(doc, selector)]
        assert selected_ids, f"patch for {selector} matches nothing"
        if patch.get("$patch") == "delete":
            result = [doc for i, doc in enumerate(result) if i not in selected_ids]
            continue
        for i in selected_ids:
            result[i] = strategic_merge(result[i], patch)
    return result


def pod_spec(doc: Doc) -> Doc:
    """The pod spec of a Deployment or Job."""
    spec: Doc = doc["spec"]["template"]["spec"]
    return spec


def build(directory: Path) -> list[Doc]:
    """What `kustomize build directory` would give, for the features this repo uses."""
    kustomization = load_kustomization(directory)
    docs: list[Doc] = []
    for resource in kustomization.get("resources", []):
        path = (directory / resource).resolve()
        docs.extend(build(path) if path.is_dir() else load_docs(path))
    for entry in kustomization.get("patches", []):
        docs = apply_patch(docs, entry, directory)
    for image in kustomization.get("images", []):
        for doc in docs:
            if doc["kind"] not in ("Deployment", "Job"):
                continue
            for container in pod_spec(doc)["containers"]:
                if container["image"].split(":")[0] == image["name"]:
                    container["image"] = f"{image.get('newName', image['name'])}:{image['newTag']}"
    if "namespace" in kustomization:
        for doc in docs:
            if doc["kind"] not in CLUSTER_SCOPED:
                doc["metadata"]["namespace"] = kustomization["namespace"]
    return docs


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
    assert [p["containerPort"] for p in container["ports"]] == [port]
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
        ref = env_of(container_of(workload))["LECTERN_DATABASE_URL"]["valueFrom"]["secretKeyRef"]
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
    for service in SERVICES:
        if service == "gateway":
            continue
        labels = find(docs, "Deployment", f"lectern-{service}")["spec"]["template"]["metadata"][
            "labels"
        ]
        assert not [
            p
            for p in policies
            if "ingress" in p["spec"]
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
