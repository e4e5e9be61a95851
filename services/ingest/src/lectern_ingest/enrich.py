"""Gemini enrichment: a short contextual prefix per chunk and exam-style Q/A per section.

Only used when a Gemini key is configured. One ``generateContent`` call per section asks for
JSON; a section whose answer cannot be used keeps its chunks unenriched (the document is
still indexed, and records which sections were skipped).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import uuid
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from lectern_common.embeddings import create_gemini_client
from lectern_ingest.config import Settings
from lectern_ingest.repository import ChunkRecord

log = logging.getLogger(__name__)

MAX_SECTION_CHARS = 12_000
PREFIX_MAX_CHARS = 400


def build_enricher(settings: Settings) -> GeminiEnricher | None:
    """The Gemini enricher when a key is configured, else None (enrichment skipped)."""
    if not settings.gemini_enabled or settings.gemini_api_key is None:
        return None
    return GeminiEnricher(settings)


def sections_of(chunks: Sequence[ChunkRecord]) -> list[list[int]]:
    """Indexes of consecutive chunks sharing a section path."""
    groups: list[list[int]] = []
    last: tuple[str, ...] | None = None
    for i, chunk in enumerate(chunks):
        key = tuple(chunk.section_path)
        if not groups or key != last:
            groups.append([])
            last = key
        groups[-1].append(i)
    return groups


def qa_chunk_id(document_id: uuid.UUID, index: int) -> uuid.UUID:
    """Deterministic id of a Q/A chunk."""
    return uuid.uuid5(document_id, f"qa:{index}")


def _prompt(title: str, section: str, texts: Sequence[str], qa_count: int) -> str:
    numbered = "\n\n".join(f"[{i}] {t}" for i, t in enumerate(texts))
    return (
        f"Document: {title}\nSection: {section or '(none)'}\n\n"
        f"Passages:\n{numbered[:MAX_SECTION_CHARS]}"
        '\n\nReturn JSON with two keys. "prefixes": a list with one string per passage, in '
        "order: one or two sentences situating that passage within the document (what it is "
        'about, which part of the document), for search. "qa": up to '
        f"{qa_count} exam-style question/answer pairs answerable from these passages, each "
        '{"question": ..., "answer": ..., "passage": index of the passage it comes from}.'
    )


def fit_prefix(
    prefix: str, text: str, *, count_tokens: Callable[[str], int], max_tokens: int
) -> str | None:
    """The longest word-prefix of ``prefix`` that fits before ``text`` in ``max_tokens``."""
    words = prefix.split()
    while words:
        candidate = " ".join(words)
        if count_tokens(f"{candidate}\n{text}") <= max_tokens:
            return candidate
        words = words[: len(words) * 3 // 4] if len(words) > 4 else words[:-1]
    return None


class GeminiEnricher:
    """Adds context prefixes and Q/A chunks to a document's chunks (``enrich`` returns them,
    whether enrichment happened, and a note for the document), through ``google-genai``
    (JSON mode, thinking off)."""

    def __init__(self, settings: Settings, *, concurrency: int = 4) -> None:
        assert settings.gemini_api_key is not None
        self.client = create_gemini_client(
            api_key=settings.gemini_api_key.get_secret_value(),
            base_url=settings.gemini_base_url,
            timeout_s=60.0,
        )
        self.model = settings.gemini_chat_model
        self.qa_per_section = settings.qa_per_section
        self.gate = asyncio.Semaphore(concurrency)

    async def _ask(self, prompt: str) -> dict[str, Any] | None:
        # google-genai only where Gemini is called (lectern_common.embeddings says why)
        from google.genai import types

        config = types.GenerateContentConfig(
            response_mime_type="application/json",
            temperature=0.2,
            thinking_config=types.ThinkingConfig(thinking_budget=0),
        )
        async with self.gate:
            try:
                response = await self.client.aio.models.generate_content(
                    model=self.model, contents=prompt, config=config
                )
            except Exception as exc:
                log.warning("enrichment call failed: %s", exc)
                return None
        try:
            data = json.loads(response.text or "")
        except ValueError:
            return None
        return data if isinstance(data, dict) else None

    async def enrich(
        self,
        *,
        document_id: uuid.UUID,
        title: str,
        chunks: list[ChunkRecord],
        count_tokens: Callable[[str], int],
        max_tokens: int,
    ) -> tuple[list[ChunkRecord], bool, str | None]:
        """Prefixes for every chunk of a section and Q/A chunks linked to their passage.

        The embedder sees ``prefix + text``; a prefix that would push a chunk past
        ``max_tokens`` is shortened word by word (or dropped), and a Q/A pair longer than
        ``max_tokens`` is skipped, so nothing is truncated silently.
        """
        groups = sections_of(chunks)
        answers = await asyncio.gather(
            *(
                self._ask(
                    _prompt(
                        title,
                        " > ".join(chunks[g[0]].section_path),
                        [chunks[i].text for i in g],
                        self.qa_per_section,
                    )
                )
                for g in groups
            )
        )
        out = list(chunks)
        qa: list[ChunkRecord] = []
        failed = 0
        for group, answer in zip(groups, answers, strict=True):
            if answer is None:
                failed += 1
                continue
            prefixes = answer.get("prefixes")
            if isinstance(prefixes, list):
                for i, prefix in zip(group, prefixes, strict=False):
                    if isinstance(prefix, str) and prefix.strip():
                        structural = out[i].context_prefix
                        combined = prefix.strip()[:PREFIX_MAX_CHARS]
                        if structural:
                            combined = f"{structural}\n{combined}"
                        fitted = fit_prefix(
                            combined, out[i].text,
                            count_tokens=count_tokens, max_tokens=max_tokens,
                        )  # fmt: skip
                        if fitted:
                            out[i] = replace(out[i], context_prefix=fitted)
            pairs = answer.get("qa")
            if not isinstance(pairs, list):
                continue
            for pair in pairs[: self.qa_per_section]:
                if not isinstance(pair, dict):
                    continue
                question, reply = pair.get("question"), pair.get("answer")
                if not (isinstance(question, str) and isinstance(reply, str)):
                    continue
                passage = pair.get("passage")
                local = passage if isinstance(passage, int) and 0 <= passage < len(group) else 0
                parent = out[group[local]]
                text = f"Q: {question.strip()}\nA: {reply.strip()}"
                tokens = count_tokens(text)
                if tokens > max_tokens:
                    continue
                index = len(qa)
                qa.append(
                    replace(
                        parent, id=qa_chunk_id(document_id, index), chunk_index=index,
                        kind="qa", parent_chunk_id=parent.id, text=text, context_prefix=None,
                        token_count=tokens,
                        content_hash=hashlib.sha256(text.encode("utf-8")).hexdigest(),
                    )
                )  # fmt: skip
        enriched = failed < len(groups)
        note = None if failed == 0 else f"{failed} of {len(groups)} sections not enriched"
        if not enriched:
            note = "Gemini enrichment failed for every section"
        return out + qa, enriched, note
