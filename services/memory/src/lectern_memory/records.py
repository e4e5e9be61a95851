"""The memory service's answers about the rows it owns, for the gateway (which never reads
or deletes them itself): a user's memories, forgetting them, topics over a roster, and the
user's export. Each takes its request and returns its reply (``app.subscribe_requests``)."""

from __future__ import annotations

from lectern_common.db.types import Pool
from lectern_common.events import memory as mem
from lectern_memory import repository as repo


async def list_memories(pool: Pool, request: mem.MemoryListRequest) -> mem.MemoryListReply:
    """The user's memories, newest first."""
    async with pool.acquire() as conn:
        rows = await repo.user_memories(
            conn, tenant_id=request.tenant_id, user_id=request.user_id, kinds=list(request.kinds)
        )
    return mem.MemoryListReply.model_validate({"request_id": request.request_id, "memories": rows})


async def forget(pool: Pool, request: mem.MemoryForgetRequest) -> mem.MemoryForgetReply:
    """Delete one memory of the user, or all; under the lock distillation merges take, so a
    distillation under way cannot write a forgotten memory back."""
    async with pool.acquire() as conn, conn.transaction():
        await repo.lock_user(conn, tenant_id=request.tenant_id, user_id=request.user_id)
        deleted = await repo.forget(
            conn, tenant_id=request.tenant_id, user_id=request.user_id,
            memory_id=request.memory_id,
        )  # fmt: skip
    return mem.MemoryForgetReply(request_id=request.request_id, deleted=deleted)


async def topics(pool: Pool, request: mem.MemoryTopicsRequest) -> mem.MemoryTopicsReply:
    """Topics of the request's kind over its users (never which users)."""
    async with pool.acquire() as conn:
        rows = await repo.topics(
            conn, tenant_id=request.tenant_id, user_ids=list(request.user_ids),
            kind=request.kind, min_users=request.min_users, limit=request.limit,
        )  # fmt: skip
    return mem.MemoryTopicsReply.model_validate({"request_id": request.request_id, "topics": rows})


async def export(pool: Pool, request: mem.MemoryExportRequest) -> mem.MemoryExportReply:
    """Every row kept about the user, read in one read-only snapshot."""
    async with pool.acquire() as conn, conn.transaction(isolation="repeatable_read", readonly=True):
        parts = await repo.export_user(conn, tenant_id=request.tenant_id, user_id=request.user_id)
    return mem.MemoryExportReply.model_validate({"request_id": request.request_id, **parts})
