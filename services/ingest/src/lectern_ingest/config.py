"""Settings of the ingest service (env prefix LECTERN_INGEST_, shared values from LECTERN_*)."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from lectern_common.broker import MAX_INGEST_DELIVERIES
from lectern_common.settings import ServiceHttpSettings, shared

#: JetStream's deliveries of one upload per attempt ingest allows (its consumer's
#: ``max_deliver`` is ``max_deliveries`` times this): a delivery can be spent without an
#: attempt starting (fetched by a replica killed before it began, or waiting in a replica's
#: queue past its ack wait), and such deliveries must not fail a good upload
DELIVERIES_PER_ATTEMPT = 4


class Settings(ServiceHttpSettings):
    """Ingest worker settings."""

    model_config = SettingsConfigDict(env_prefix="LECTERN_INGEST_")

    service_name: str = shared("service_name", "lectern-ingest", "name in logs and traces")
    http_port: int = 8001
    embedding_threads: int | None = shared(
        "embedding_threads", 1,
        "CPU threads of the local model (ingest: 1; it embeds documents and lists side by "
        "side instead: one thread embeds a short passage with 6.0 ms of CPU, two with 9.3 ms)",
    )  # fmt: skip

    max_deliveries: int = Field(
        default=MAX_INGEST_DELIVERIES, ge=1,
        description="attempts at one upload before it is failed: deliveries that reached a "
        "worker and started (JetStream itself delivers up to DELIVERIES_PER_ATTEMPT times as "
        "many: a delivery can be spent without an attempt)",
    )  # fmt: skip
    ack_wait_s: float = Field(
        default=30.0, gt=0,
        description="JetStream ack wait per delivery: a worker killed mid-document is "
        "redelivered this long after its last keep-alive (a live one sends one every "
        "in_progress_interval_s)",
    )  # fmt: skip
    fetch_patience_s: float = Field(
        default=20.0, ge=0,
        description="how long fetching an upload's bytes waits out an object store without a "
        "leader (a NATS election: 4-8 s in the cluster tests) before the upload is given back "
        "for a later delivery",
    )  # fmt: skip
    concurrency: int = Field(
        default=2, ge=1,
        description="documents one worker processes at once (embedding stays one batch at a "
        "time; the others extract, store and publish meanwhile)",
    )  # fmt: skip
    batch_documents: int = Field(
        default=32, ge=1,
        description="small uploads (up to batch_max_bytes) indexed together in one list: one "
        "fetch, one embedding call, one transaction with one COPY and one BM25 update, each "
        "document still with its own outcome event and ack (lectern_ingest.small); 1: every "
        "upload alone, `concurrency` at once. A replica holds up to three lists' worth of "
        "uploads, which other replicas cannot take meanwhile",
    )  # fmt: skip
    batch_max_bytes: int = Field(
        default=64 * 1024, ge=0,
        description="uploads up to this size may be batched with others; larger ones are "
        "indexed alone, as before",
    )  # fmt: skip
    in_progress_interval_s: float = Field(
        default=10.0, gt=0, description="how often a working delivery tells JetStream it is alive"
    )
    retry_backoff_s: float = Field(
        default=2.0, ge=0, description="first retry delay; doubles per delivery"
    )
    retry_backoff_max_s: float = Field(default=60.0, ge=0, description="cap of the retry delay")
    max_chunks_per_document: int = Field(
        default=5000, ge=1,
        description="a document that would make more chunks fails (too_large) as soon as it "
        "does, before it takes an ingest slot for long; the 400-page manual makes ~1,100",
    )  # fmt: skip
    document_timeout_s: float = Field(
        default=600.0, gt=0, description="time limit for one document (then failed: timeout)"
    )
    progress_interval_s: float = Field(
        default=0.5, ge=0, description="minimum time between two progress events of a document"
    )
    progress_after_s: float = Field(
        default=1.0, ge=0,
        description="a document's progress events start once it has been worked on this "
        "long: one indexed sooner has its outcome event only (a UI has nothing to show for a "
        "shorter wait, and each event costs the worker a JetStream publish)",
    )  # fmt: skip
    # 32 keeps MiniLM's attention buffers (batch x heads x 256²) near 250 MB; 64 doubles them
    embed_batch_size: int = Field(default=32, ge=1, description="chunks per embedding call")
    # extraction may run far ahead: chunk text is small, and once the producer thread is done
    # the embedder has both cores to itself
    queue_batches: int = Field(
        default=64, ge=1, description="chunk batches buffered between extraction and embedding"
    )
    near_duplicate_threshold: float = Field(
        default=0.85, ge=0.0, le=1.0, description="SimHash similarity flagged as near-duplicate"
    )
    gc_interval_s: float = Field(
        default=3600.0, ge=0,
        description="seconds between garbage collections of the chunks of deleted, failed "
        "and duplicate documents (0: none; `lectern gc` runs one by hand)",
    )  # fmt: skip
    reweight_interval_s: float = Field(
        default=600.0, ge=0.0,
        description="how often to re-weight the BM25 weights of drifted tenants (0: never; "
        "lectern_ingest.reweighting)",
    )  # fmt: skip
    reweight_drift: float = Field(
        default=0.1, ge=0.0, description="re-weight a tenant when its chunk count moved this share"
    )
    conflict_neighbours: int = Field(
        default=3, ge=0, le=20,
        description="nearest chunks of other documents each new chunk is checked against for "
        "conflicting numbers or negations (0: no conflict check)",
    )  # fmt: skip
    conflict_min_similarity: float = Field(
        default=0.6, ge=0.0, le=1.0,
        description="cosine similarity a neighbour needs to be checked for a conflict",
    )  # fmt: skip
    qa_per_section: int = Field(
        default=3, ge=0, le=10, description="exam-style Q/A pairs per section (Gemini only)"
    )
    chunk_target_tokens: int | None = Field(
        default=None, description="chunk target size in tokens (unset: chunker default)"
    )
    chunk_overlap_tokens: int | None = Field(default=None, description="overlap in tokens")
    chunk_min_tokens: int | None = Field(default=None, description="smallest chunk in tokens")
    chunk_max_tokens: int | None = Field(
        default=None, description="largest chunk (capped at the embedder's maximum input)"
    )

    @property
    def delivery_limit(self) -> int:
        """JetStream's ``max_deliver`` of the uploads consumer: the deliveries after which it
        delivers an upload no more (ingest fails it on that last one)."""
        return self.max_deliveries * DELIVERIES_PER_ATTEMPT
