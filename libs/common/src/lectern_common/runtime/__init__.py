"""The embedded runtime: NATS and Postgres from PyPI packages (the tests' fixtures, the benches
and ``lectern up`` start them; the supervisor that runs the services beside them is
``lectern_cli.runtime``'s)."""

from lectern_common.runtime.nats import EmbeddedNats, EmbeddedNatsCluster
from lectern_common.runtime.postgres import EmbeddedPostgres, EmbeddedReplica

__all__ = ["EmbeddedNats", "EmbeddedNatsCluster", "EmbeddedPostgres", "EmbeddedReplica"]
