"""SQL of the re-ranker: the index's embedding model and stored chunk vectors."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from lectern_common.db.types import Queryable


async def index_model(pool: Queryable) -> tuple[str, int] | None:
    """Name and dimension of the model the chunk index was built with (None before migration)."""
    row = await pool.fetchrow("SELECT name, dimension FROM embedding_models WHERE id = 1")
    return None if row is None else (str(row["name"]), int(row["dimension"]))


async def chunk_vectors(
    pool: Queryable, *, tenant_id: str, chunk_ids: Sequence[uuid.UUID], model: str
) -> dict[uuid.UUID, NDArray[np.float32]]:
    """Stored embeddings of the tenant's chunks among ``chunk_ids`` (missing ids are absent),
    none unless the index holds ``model``'s vectors when they are read (one statement, so a
    re-index cannot switch the model between the check and the read)."""
    if not chunk_ids:
        return {}
    rows = await pool.fetch(
        "SELECT c.id, c.embedding FROM chunks c, embedding_models m "
        "WHERE m.id = 1 AND m.name = $3 AND c.tenant_id = $1 AND c.id = ANY($2::uuid[])",
        tenant_id,
        list(chunk_ids),
        model,
    )
    return {row["id"]: _as_array(row["embedding"]) for row in rows}


def _as_array(value: Any) -> NDArray[np.float32]:
    # pgvector's codec gives ``pgvector.Vector``; plain sequences are accepted too
    raw = value.to_numpy() if hasattr(value, "to_numpy") else value
    return np.asarray(raw, dtype=np.float32)
