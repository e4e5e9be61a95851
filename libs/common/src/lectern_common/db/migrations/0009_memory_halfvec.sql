-- Recall ranks one student's memories exactly (a per-user filter would starve an HNSW walk),
-- so its cost is reading their rows: half-precision vectors halve the bytes per row (776
-- instead of 1,544 at 384 dimensions) for ~30% less time at 10,000 memories, and a cosine
-- between half-precision vectors differs from the float one by ~1e-3, far below the gaps
-- that order memories.
ALTER TABLE user_memories
    ALTER COLUMN embedding TYPE halfvec(${embedding_dim}) USING embedding::halfvec(${embedding_dim});
