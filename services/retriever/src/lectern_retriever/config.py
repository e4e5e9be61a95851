"""Settings of the retriever service (env prefix LECTERN_RETRIEVER_; shared: LECTERN_*)."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from lectern_common.settings import ServiceHttpSettings, shared


class Settings(ServiceHttpSettings):
    """Retriever settings."""

    model_config = SettingsConfigDict(env_prefix="LECTERN_RETRIEVER_")

    service_name: str = shared("service_name", "lectern-retriever", "name in logs and traces")
    http_port: int = 8002
    # One query costs 7.5 ms of CPU on one onnxruntime thread and 11 ms on two (fork/join),
    # for 0.5 ms less wall time: replicas, not threads, scale the retriever.
    embedding_threads: int | None = shared(
        "embedding_threads", 1, "CPU threads of the local model (the retriever: 1 per replica)"
    )

    ef_search: int = Field(default=200, ge=10, le=1000, description="HNSW ef_search default")
    ef_search_large: int = Field(
        default=800, ge=10, le=1000,
        description="HNSW ef_search for a tenant of more than ef_search_large_above chunks "
        "(a larger graph needs a wider search for the same recall)",
    )  # fmt: skip
    ef_search_large_above: int = Field(default=200_000, ge=0)
    dense_weight: float = Field(
        default=1.0, ge=0.0, description="RRF weight of dense lists (equal weights measured best)"
    )
    sparse_weight: float = Field(default=1.0, ge=0.0, description="RRF weight of BM25 lists")
    rrf_k: int = Field(default=60, ge=1, description="reciprocal rank fusion constant")
    exact_search_below: int = Field(
        default=2000, ge=0, description="exact dense search below this many filtered chunks"
    )
    tag_boost: float = Field(default=0.2, ge=0.0, description="score x (1+b) on topic tag match")
    cited_boost: float = Field(
        default=0.2, ge=0.0, description="score x (1+b) for documents cited in the last turns"
    )
    llm_rewrite: bool = Field(default=True, description="Gemini query rewrite when a key is set")
    llm_rewrite_timeout_s: float = Field(default=3.0, gt=0.0)
    concurrency: int = Field(
        default=8, ge=1,
        description="requests one replica works on at once (they overlap their database "
        "round trips and query embeddings)",
    )  # fmt: skip
    pool_size: int = Field(default=16, ge=2, description="the retriever's own Postgres pool")
    tenant_index_min_chunks: int = Field(
        default=2000, ge=1,
        description="a tenant with this many chunks gets HNSW and GIN indexes of its own "
        "(dropped below half of it); below it, a tenant is small enough for exact search "
        "(exact_search_below)",
    )  # fmt: skip
    tenant_index_max_share: float = Field(
        default=0.5, gt=0.0, le=1.0,
        description="a tenant holding more than this share of all chunks keeps the shared "
        "indexes (they are mostly its own)",
    )  # fmt: skip
    tenant_index_max_tenants: int = Field(
        default=100, ge=0,
        description="at most this many tenants, the largest, have indexes of their own (the "
        "planner weighs every index of the chunks table for each search)",
    )  # fmt: skip
    tenant_index_interval_s: float = Field(
        default=300.0, ge=0.0,
        description="how often a replica looks for tenants due indexes of their own (0: never)",
    )  # fmt: skip
    tenant_index_memory: str | None = Field(
        default="1GB", pattern=r"^\d+\s*(kB|MB|GB)$",
        description="maintenance_work_mem of a tenant index build (the graph builds fastest "
        "when it fits: ~2 KB a chunk at 384 dimensions)",
    )  # fmt: skip
    maxscore_postings: int = Field(
        default=1000, ge=0, description="BM25 MaxScore first pass: rarest terms up to this many"
    )
    pair_terms_max: int = Field(
        default=12, ge=0,
        description="BM25: queries of 2..N terms score chunks holding two terms first (0: off)",
    )  # fmt: skip
    pass_two_clauses_max: int = Field(
        default=32, ge=0,
        description="BM25: most clauses for the sets of terms that can beat the first pass's "
        "k-th score; beyond it, chunks holding any two terms (0: always any two)",
    )  # fmt: skip
