"""The readers' Deployments point LECTERN_DATABASE_READ_URL at CloudNativePG's -ro Service."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from lectern_cli.runtime.processes import READ_REPLICA_SERVICES, SERVICES

BASE = Path(__file__).resolve().parents[2] / "deploy" / "k8s" / "base"


def container_env(service: str) -> list[dict[str, Any]]:
    """The env list of a service's Deployment."""
    with (BASE / f"{service}.yaml").open(encoding="utf-8") as handle:
        docs = [doc for doc in yaml.safe_load_all(handle) if doc]
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    env: list[dict[str, Any]] = deployment["spec"]["template"]["spec"]["containers"][0]["env"]
    return env


@pytest.mark.parametrize("service", SERVICES)
def test_only_the_readers_read_from_the_replicas(service: str) -> None:
    env = {entry["name"]: entry for entry in container_env(service)}
    if service not in READ_REPLICA_SERVICES:
        assert "LECTERN_DATABASE_READ_URL" not in env
        return
    url = env["LECTERN_DATABASE_READ_URL"]["value"]
    assert url == "postgresql://lectern@lectern-postgres-ro:5432/lectern"
    # the password for a URL without one: the operator's app Secret, as for the -rw URI
    password = env["PGPASSWORD"]["valueFrom"]["secretKeyRef"]
    assert password == {"name": "lectern-postgres-app", "key": "password"}
    primary = env["LECTERN_DATABASE_URL"]["valueFrom"]["secretKeyRef"]
    assert primary == {"name": "lectern-postgres-app", "key": "uri"}
