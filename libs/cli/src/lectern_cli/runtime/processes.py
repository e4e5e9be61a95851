"""What the embedded stack runs and where: the services, the gateway's worker beside each
gateway, their default ports, NATS's, a cluster's size, and the command that starts one."""

from __future__ import annotations

import sys

SERVICES: tuple[str, ...] = ("gateway", "ingest", "retriever", "reranker", "memory")
DEFAULT_PORTS: dict[str, int] = {
    "gateway": 8000, "ingest": 8001, "retriever": 8002, "reranker": 8003, "memory": 8004,
}  # fmt: skip
#: the gateway's worker process: one per gateway process (the same package, ``worker``)
GATEWAY_WORKER = "gateway-worker"
GATEWAY_WORKER_PORT = 8005
#: every process of ``lectern up`` (one of each): the services, then the gateway's worker
PROCESSES: tuple[str, ...] = (*SERVICES, GATEWAY_WORKER)
DEFAULT_NATS_PORT = 4222
DEFAULT_NATS_MONITOR_PORT = 8222
#: ``lectern up --cluster``: NATS servers (streams at as many replicas), processes per service
CLUSTER_NATS_SERVERS = 3
CLUSTER_SERVICE_REPLICAS = 2
#: services that connect to Postgres (the re-ranker's data all comes over NATS)
DATABASE_SERVICES: tuple[str, ...] = ("gateway", "ingest", "retriever", "memory")
#: services whose reads a streaming read replica serves (``LECTERN_DATABASE_READ_URL``)
READ_REPLICA_SERVICES = ("retriever", "memory")
#: a further replica's preferred HTTP port: its service's default plus this (gateway-2: 8010)
REPLICA_PORT_STEP = 10


def service_command(name: str) -> list[str]:
    """How a service process is started: ``python -m lectern_<name>``."""
    return [sys.executable, "-m", f"lectern_{name}"]
