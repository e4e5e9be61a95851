"""Reciprocal rank fusion of ranked lists, with per-document caps and boosts (pure)."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

Side = Literal["dense", "sparse"]


@dataclass(frozen=True)
class Hit:
    """One chunk at one rank (1-based) of one ranked list."""

    chunk_id: uuid.UUID
    document_id: uuid.UUID
    rank: int
    score: float
    row: Any = None
    topic_tags: tuple[str, ...] = ()


@dataclass(frozen=True)
class RankedList:
    """A ranked list from one side (dense or sparse) of one query, with its RRF weight."""

    side: Side
    hits: Sequence[Hit]
    weight: float = 1.0


@dataclass
class Fused:
    """A fused candidate: its RRF score and its best rank and score on each side."""

    chunk_id: uuid.UUID
    document_id: uuid.UUID
    row: Any
    fused_score: float = 0.0
    dense_rank: int | None = None
    dense_score: float | None = None
    sparse_rank: int | None = None
    sparse_score: float | None = None
    boosts: list[str] = field(default_factory=list)


def rrf_fuse(
    lists: Iterable[RankedList],
    *,
    k: int = 60,
    limit: int,
    max_per_document: int | None = 3,
    boost_tags: Sequence[str] = (),
    tag_boost: float = 0.0,
    cited_document_ids: Sequence[uuid.UUID] = (),
    cited_boost: float = 0.0,
) -> list[Fused]:
    """Fuse ranked lists by RRF: sum of weight / (k + rank); duplicates merged, best first.

    Boosts multiply the fused score by (1 + boost) for chunks whose topic tags meet
    ``boost_tags`` and for chunks of documents in ``cited_document_ids``.
    """
    merged: dict[uuid.UUID, Fused] = {}
    tags_of: dict[uuid.UUID, tuple[str, ...]] = {}
    for ranked in lists:
        if ranked.weight <= 0:
            continue
        for hit in ranked.hits:
            entry = merged.get(hit.chunk_id)
            if entry is None:
                entry = merged[hit.chunk_id] = Fused(hit.chunk_id, hit.document_id, hit.row)
                tags_of[hit.chunk_id] = hit.topic_tags
            entry.fused_score += ranked.weight / (k + hit.rank)
            _keep_best(entry, ranked.side, hit)
    wanted_tags = {t.casefold() for t in boost_tags}
    cited = set(cited_document_ids)
    for entry in merged.values():
        if tag_boost and wanted_tags & {t.casefold() for t in tags_of[entry.chunk_id]}:
            entry.fused_score *= 1.0 + tag_boost
            entry.boosts.append("tags")
        if cited_boost and entry.document_id in cited:
            entry.fused_score *= 1.0 + cited_boost
            entry.boosts.append("cited")
    ordered = sorted(merged.values(), key=lambda f: (-f.fused_score, str(f.chunk_id)))
    return cap_per_document(ordered, max_per_document=max_per_document)[:limit]


def _keep_best(entry: Fused, side: Side, hit: Hit) -> None:
    if side == "dense":
        if entry.dense_rank is None or hit.rank < entry.dense_rank:
            entry.dense_rank, entry.dense_score = hit.rank, hit.score
    elif entry.sparse_rank is None or hit.rank < entry.sparse_rank:
        entry.sparse_rank, entry.sparse_score = hit.rank, hit.score


def cap_per_document(items: Sequence[Fused], *, max_per_document: int | None) -> list[Fused]:
    """At most ``max_per_document`` chunks of each document first, order preserved; the rest
    stay behind them, best first, so the cap only spreads the top over competing documents
    and never starves a tenant with one textbook (its chunks beyond the cap still follow)."""
    if max_per_document is None:
        return list(items)
    seen: dict[uuid.UUID, int] = {}
    kept: list[Fused] = []
    over: list[Fused] = []
    for item in items:
        count = seen.get(item.document_id, 0)
        (kept if count < max_per_document else over).append(item)
        seen[item.document_id] = count + 1
    return kept + over
