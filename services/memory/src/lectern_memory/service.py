"""Memory domain logic: record turns, distil sessions, merge memories, recall them."""

from __future__ import annotations

import logging
import math
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from lectern_common.db.types import Connection, Pool
from lectern_common.embeddings import Embedder
from lectern_common.errors import RetryableError
from lectern_common.events import (
    ChatSessionEnded,
    ChatTurnCompleted,
    MemoryDistilled,
    MemoryRecallReply,
    MemoryRecallRequest,
    QuizAttempted,
    RecalledMemory,
)
from lectern_common.index import FollowingEmbedder, guard, with_live_model
from lectern_common.outbox import enqueue
from lectern_memory import mastery
from lectern_memory import repository as repo
from lectern_memory.config import Settings
from lectern_memory.distill import (
    MemoryDraft,
    TurnSignal,
    distill_turns,
    struggle_text,
    validated,
)
from lectern_memory.struggle import Encode, packaged_model, read_messages

log = logging.getLogger(__name__)
#: right answers on a topic in this many attempts running make it mastered
QUIZ_MASTERY_STREAK = 2

#: an optional model-based distiller: turns -> drafts (None when it gave up)
Distiller = Callable[[Sequence[TurnSignal]], Awaitable[list[MemoryDraft] | None]]


_ORDER = ("right", "skipped", "partly", "wrong")


def _worse(a: str, b: str) -> str:
    """Of two outcomes on one topic in one attempt, the one that says less for mastery."""
    return max(a, b, key=_ORDER.index)


class TurnsNotArrived(RetryableError):
    """Raised when a session ended before all its turn events, or the flags on its messages,
    were recorded (they travel on other streams and may arrive after the end)."""

    reason = "turns_pending"


def recall_score(
    *, similarity: float, age_days: float, strength: float, settings: Settings
) -> float:
    """Similarity, recency (exponential half-life) and strength (saturating), weighted."""
    recency: float = 0.5 ** (age_days / settings.recency_half_life_days)
    strength_norm = min(1.0, math.log1p(max(strength, 0.0)) / math.log1p(10.0))
    return (
        settings.weight_similarity * similarity
        + settings.weight_recency * recency
        + settings.weight_strength * strength_norm
    )


class MemoryService:
    """Everything the memory service does, given a pool and an embedder."""

    def __init__(
        self,
        *,
        settings: Settings,
        embedder: Embedder,
        model_distiller: Distiller | None = None,
        encode: Encode | None = None,
    ) -> None:
        self.settings = settings
        #: the local model's embeddings for the struggle classifier (None: rules without it)
        self.encode = encode
        #: follows the live index's model (``lectern reindex``)
        self.embedder = (
            embedder
            if isinstance(embedder, FollowingEmbedder)
            else FollowingEmbedder(settings, embedder)
        )
        self.model_distiller = model_distiller

    async def record_turn(self, *, pool: Pool, event: ChatTurnCompleted) -> None:
        """Store a completed turn's signals for the session's distillation."""
        async with pool.acquire() as conn:
            await repo.record_turn(conn, event)

    async def distil_session(
        self, *, pool: Pool, event: ChatSessionEnded, final_attempt: bool = False
    ) -> MemoryDistilled:
        """Distil an ended session into memories, with ``memory.distilled`` in the outbox in
        the same transaction; idempotent per session."""
        async with pool.acquire() as conn:
            rows = await repo.session_turns(
                conn, tenant_id=event.tenant_id, session_id=event.session_id
            )
            flagged = await repo.flagged_messages(
                conn, tenant_id=event.tenant_id, session_id=event.session_id
            )
        expected_turns = event.message_count // 2
        if not final_attempt and (len(rows) < expected_turns or flagged < event.flagged_messages):
            raise TurnsNotArrived(
                f"session {event.session_id}: {len(rows)} of {expected_turns} turns and "
                f"{flagged} of {event.flagged_messages} flags recorded"
            )
        turns = [
            TurnSignal(
                question=r["question"], answer=r["answer"], band=r["band"],
                confidence=r["confidence"], knowledge_gap=r["knowledge_gap"], topic=r["topic"],
                flagged=r["flagged"], occurred_at=r["occurred_at"],
                topics=tuple(r["topics"] or ()), answered_by=r["answered_by"],
            )
            for r in rows
        ]  # fmt: skip
        drafts, distiller = await self._drafts(turns)

        async def attempt(embedder: Embedder) -> MemoryDistilled:
            vectors = (
                list(await embedder.embed_documents([d.text for d in drafts])) if drafts else []
            )
            return await self._store_distilled(
                pool, event, drafts, vectors, distiller, embedder.name
            )

        return await with_live_model(self.embedder, attempt)

    async def _store_distilled(
        self,
        pool: Pool,
        event: ChatSessionEnded,
        drafts: Sequence[MemoryDraft],
        vectors: Sequence[Any],
        distiller: str,
        model: str,
    ) -> MemoryDistilled:
        async with pool.acquire() as conn, conn.transaction():
            await guard(conn, model)
            await repo.lock_user(conn, tenant_id=event.tenant_id, user_id=event.user_id)
            done = await repo.distillation(conn, session_id=event.session_id)
            if done is not None:
                return self._distilled_event(event, done["created"], done["updated"],
                                             done["distiller"])  # fmt: skip
            created: list[uuid.UUID] = []
            updated: list[uuid.UUID] = []
            for draft, vector in zip(drafts, vectors, strict=True):
                memory_id, is_new = await self._merge(
                    conn, event.tenant_id, event.user_id, event.session_id, draft, vector
                )
                (created if is_new else updated).append(memory_id)
            updated = [m for m in dict.fromkeys(updated) if m not in created]
            await repo.record_distillation(
                conn, session_id=event.session_id, tenant_id=event.tenant_id,
                user_id=event.user_id, created=created, updated=updated, distiller=distiller,
            )  # fmt: skip
            distilled = self._distilled_event(event, created, updated, distiller)
            # the outbox: memory.distilled is published once the memories are committed
            await enqueue(conn, distilled)
        return distilled

    async def _drafts(self, turns: list[TurnSignal]) -> tuple[list[MemoryDraft], str]:
        """The rules' memories (with the struggle classifier's reading of each message), or
        a summarising model's held to the same evidence."""
        readings = None
        if self.encode is not None and turns:
            readings = await read_messages([t.question for t in turns], encode=self.encode)
        rules = distill_turns(turns, readings, model=packaged_model() if readings else None)
        if self.model_distiller is not None and turns:
            drafts = await self.model_distiller(turns)
            if drafts is not None:
                return validated(drafts, rules), "gemini"
        return rules, "deterministic"

    async def record_quiz(self, *, pool: Pool, event: QuizAttempted) -> list[uuid.UUID]:
        """A quiz attempt or a judged tutor check becomes memory: a topic answered wrongly
        or partly is a struggle; a quiz's topic answered right in two attempts running is
        mastered (replacing its struggle), and so is a check's topic answered right in two
        chat sessions running, counted by its words (``lectern_memory.mastery``); a skipped
        check starts the run again and is no memory. Idempotent per attempt; returns the
        memories created or changed."""
        outcome: dict[str, str] = {}
        named: dict[str, str] = {}  # one tally per topic whatever its case
        for result in event.results:
            said = result.outcome or ("right" if result.correct else "wrong")
            topic = named.setdefault(result.topic.strip().casefold(), result.topic.strip())
            outcome[topic] = _worse(outcome.get(topic, "right"), said)

        async def attempt(embedder: Embedder) -> list[uuid.UUID]:
            return await self._store_quiz(pool, event, outcome, embedder)

        return await with_live_model(self.embedder, attempt)

    async def _store_quiz(
        self, pool: Pool, event: QuizAttempted, outcome: dict[str, str], embedder: Embedder
    ) -> list[uuid.UUID]:
        drafts: list[MemoryDraft] = []
        check = any(r.outcome is not None for r in event.results)
        what = "check questions" if check else "quiz questions"
        at = event.occurred_at.isoformat()
        # a check asked in a chat session is mastered by sessions running (``mastery``); a
        # quiz, by attempts running on its topic
        by_topic = event.session_id is None
        async with pool.acquire() as conn, conn.transaction():
            await guard(conn, embedder.name)
            await repo.lock_user(conn, tenant_id=event.tenant_id, user_id=event.user_id)
            if not await repo.claim_quiz_attempt(conn, event.attempt_id, event.tenant_id):
                return []
            for topic, said in outcome.items():
                streak = await repo.tally_quiz_topic(
                    conn, tenant_id=event.tenant_id, user_id=event.user_id,
                    topic=topic.casefold(),
                    right=said == "right", counts_wrong=said in ("wrong", "partly"),
                )  # fmt: skip
                item = {"kind": f"{'check' if check else 'quiz'}_{said}", "detail": topic,
                        "at": at}  # fmt: skip
                if said in ("wrong", "partly"):
                    drafts.append(MemoryDraft("struggle", struggle_text(topic, [item]), topic,
                                              [item]))  # fmt: skip
                elif said == "right" and streak == QUIZ_MASTERY_STREAK and by_topic:
                    drafts.append(MemoryDraft("mastered", f"Answered {what} on {topic} right "
                                              "twice running", topic, [item]))  # fmt: skip
            across = await self._across_sessions(conn, event, what)
            drafts += [draft for draft, _ in across]
            if not drafts:
                return []
            vectors = list(await embedder.embed_documents([d.text for d in drafts]))
            changed = [
                (await self._merge(conn, event.tenant_id, event.user_id, None, d, v))[0]
                for d, v in zip(drafts, vectors, strict=True)
            ]
            for (_, units), memory_id in zip(across, changed[len(changed) - len(across) :],
                                             strict=True):  # fmt: skip
                await repo.mark_mastered(conn, tenant_id=event.tenant_id,
                                         user_id=event.user_id, units=units,
                                         memory_id=memory_id)  # fmt: skip
        return changed

    @staticmethod
    async def _across_sessions(
        conn: Connection, event: QuizAttempted, what: str
    ) -> list[tuple[MemoryDraft, list[str]]]:
        """A check asked in a chat session counted towards what it tests, by session
        (``lectern_memory.mastery``): the mastered drafts of the units whose run reached its
        second session, each with its units; the masteries a wrong answer withdrew are
        deleted."""
        if event.session_id is None:
            return []
        drafts: list[tuple[MemoryDraft, list[str]]] = []
        at = event.occurred_at.isoformat()
        for result in event.results:
            said = result.outcome or ("right" if result.correct else "wrong")
            topic = result.topic.strip()
            tally = await mastery.tally_check(
                conn, tenant_id=event.tenant_id, user_id=event.user_id,
                session_id=event.session_id, topic=topic, said=said,
                answered_at=event.occurred_at,
                units=mastery.units_of(topic, section=result.section,
                                       document_id=result.document_id,
                                       title=result.document_title),
            )  # fmt: skip
            if tally.withdrawn:
                await repo.withdraw_mastered(conn, tenant_id=event.tenant_id,
                                             memory_ids=tally.withdrawn)  # fmt: skip
            if not tally.reached:
                continue
            # the words of one topic reaching together are one memory
            first = tally.reached[0]
            name = first.name(result.section, result.document_title)
            # every right check the run rests on (the earlier ones' days are not kept)
            evidence = [{"kind": "check_right", "detail": t, "at": ""} for t in first.earlier]
            evidence.append({"kind": "check_right", "detail": topic, "at": at})
            draft = MemoryDraft("mastered", first.text(name, what), name, evidence)
            drafts.append((draft, [m.unit for m in tally.reached]))
        return drafts

    async def _merge(
        self,
        conn: Connection,
        tenant_id: str,
        user_id: str,
        session_id: uuid.UUID | None,
        draft: MemoryDraft,
        vector: Any,
    ) -> tuple[uuid.UUID, bool]:
        """Strengthen a twin (a memory of the same kind on the same topic, or one that says
        nearly the same), let 'mastered' replace a 'struggle', or insert."""
        common = {"tenant_id": tenant_id, "user_id": user_id, "embedding": vector}
        if draft.topic:
            same = await repo.on_topic(conn, kind=draft.kind, topic=draft.topic,
                                       tenant_id=tenant_id, user_id=user_id)  # fmt: skip
            if same is not None:
                # one memory a topic: a struggle's text names all the evidence behind it
                text = draft.text
                if draft.kind == "struggle":
                    text = struggle_text(draft.topic, [*same["evidence"], *draft.evidence])
                await repo.update_memory(
                    conn, memory_id=same["id"], kind=draft.kind, text=text, topic=draft.topic,
                    session_id=session_id, embedding=vector, strengthen=True,
                    evidence=draft.evidence,
                )  # fmt: skip
                return same["id"], False
        twin = await repo.nearest(conn, kinds=[draft.kind], **common)
        if twin is not None and twin["similarity"] >= self.settings.merge_threshold:
            await repo.update_memory(
                conn, memory_id=twin["id"], kind=draft.kind, text=draft.text, topic=draft.topic,
                session_id=session_id, embedding=vector, strengthen=True,
                evidence=draft.evidence,
            )  # fmt: skip
            return twin["id"], False
        opposite = {"mastered": "struggle", "struggle": "mastered"}.get(draft.kind)
        if opposite is not None:
            other = await repo.nearest(conn, kinds=[opposite], **common)
            if other is not None and (
                other["similarity"] >= self.settings.replace_threshold
                or (
                    draft.topic is not None
                    and str(other["topic"] or "").casefold() == draft.topic.casefold()
                )
            ):
                await repo.update_memory(
                    conn, memory_id=other["id"], kind=draft.kind, text=draft.text,
                    topic=draft.topic, session_id=session_id, embedding=vector,
                    strengthen=False, evidence=draft.evidence,
                )  # fmt: skip
                return other["id"], False
        memory_id = await repo.insert_memory(
            conn, kind=draft.kind, text=draft.text, topic=draft.topic,
            session_id=session_id, evidence=draft.evidence, **common,
        )  # fmt: skip
        return memory_id, True

    @staticmethod
    def _distilled_event(
        event: ChatSessionEnded,
        created: Sequence[uuid.UUID],
        updated: Sequence[uuid.UUID],
        distiller: str,
    ) -> MemoryDistilled:
        return MemoryDistilled(
            # one event per session, whichever delivery distils it
            event_id=uuid.uuid5(event.session_id, "lectern.memory.distilled"),
            tenant_id=event.tenant_id, session_id=event.session_id, user_id=event.user_id,
            created=list(created), updated=list(updated), distiller=distiller,
        )  # fmt: skip

    async def recall(self, *, pool: Pool, request: MemoryRecallRequest) -> MemoryRecallReply:
        """The student's top memories for a query: similarity, recency and strength."""
        started = time.perf_counter()

        async def attempt(embedder: Embedder) -> list[Any]:
            vector = await embedder.embed_query(request.query)
            async with pool.acquire() as conn, conn.transaction():
                await guard(conn, embedder.name)
                return await repo.recall_candidates(
                    conn, tenant_id=request.tenant_id, user_id=request.user_id,
                    embedding=vector, limit=max(self.settings.recall_candidates, request.k),
                )  # fmt: skip

        rows = await with_live_model(self.embedder, attempt)
        now = datetime.now(UTC)
        scored = sorted(
            (
                RecalledMemory(
                    memory_id=r["id"], kind=r["kind"], text=r["text"], topic=r["topic"],
                    strength=r["strength"], updated_at=r["updated_at"],
                    score=recall_score(
                        similarity=float(r["similarity"]),
                        age_days=repo.age_days(r["updated_at"], now),
                        strength=float(r["strength"]), settings=self.settings,
                    ),
                )
                for r in rows
            ),
            key=lambda m: m.score,
            reverse=True,
        )  # fmt: skip
        return MemoryRecallReply(
            request_id=request.request_id,
            memories=scored[: request.k],
            took_ms=(time.perf_counter() - started) * 1000,
        )
