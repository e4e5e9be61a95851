"""The embedded runtime: NATS and Postgres from PyPI packages, and a process supervisor."""

from lectern_common.runtime.nats import EmbeddedNats, EmbeddedNatsCluster
from lectern_common.runtime.postgres import EmbeddedPostgres, EmbeddedReplica

__all__ = ["EmbeddedNats", "EmbeddedNatsCluster", "EmbeddedPostgres", "EmbeddedReplica"]
