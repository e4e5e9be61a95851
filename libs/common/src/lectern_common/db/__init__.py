"""Postgres access: the pool factory, migrations and reads a replica may serve."""

from lectern_common.db.migrate import applied_migrations, migrate
from lectern_common.db.pool import create_pool
from lectern_common.db.reads import ReadPools

__all__ = ["ReadPools", "applied_migrations", "create_pool", "migrate"]
