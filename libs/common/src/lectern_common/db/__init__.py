"""Postgres access: the pool factory and migrations."""

from lectern_common.db.migrate import applied_migrations, migrate
from lectern_common.db.pool import create_pool

__all__ = ["applied_migrations", "create_pool", "migrate"]
