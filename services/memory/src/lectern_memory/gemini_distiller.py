"""Distillation by Gemini: one summarisation call returning validated JSON, retried once."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from pydantic import ValidationError

from lectern_common.embeddings import create_gemini_client
from lectern_memory.config import Settings
from lectern_memory.distill import (
    Distillation,
    MemoryDraft,
    TurnSignal,
    distillation_prompt,
)
from lectern_memory.service import Distiller

if TYPE_CHECKING:
    # google-genai only where Gemini is called (lectern_common.embeddings says why)
    from google import genai

log = logging.getLogger(__name__)


class GeminiDistiller:
    """Asks Gemini for the session's memories as JSON; ``None`` when it cannot."""

    def __init__(self, *, client: genai.Client, model: str) -> None:
        self.client = client
        self.model = model

    async def __call__(self, turns: Sequence[TurnSignal]) -> list[MemoryDraft] | None:
        """Two attempts at valid JSON; on failure the caller falls back to the rules."""
        from google.genai import errors, types

        prompt = distillation_prompt(turns)
        config = types.GenerateContentConfig(
            response_mime_type="application/json",
            temperature=0.2,
            thinking_config=types.ThinkingConfig(thinking_budget=0),
        )
        for attempt in (1, 2):
            try:
                response = await self.client.aio.models.generate_content(
                    model=self.model, contents=prompt, config=config
                )
                parsed = Distillation.model_validate_json(response.text or "")
            except ValidationError as exc:
                log.warning("distillation attempt %d returned invalid JSON: %s", attempt, exc)
                continue
            except errors.APIError as exc:
                log.warning("distillation call failed (%s); using the deterministic rules", exc)
                return None
            return [MemoryDraft(m.kind, m.text, m.topic) for m in parsed.memories]
        return None


def build_model_distiller(settings: Settings) -> Distiller | None:
    """A Gemini distiller when a key is configured, else ``None`` (rules only)."""
    if settings.gemini_api_key is None:
        return None
    client = create_gemini_client(
        api_key=settings.gemini_api_key.get_secret_value(), base_url=settings.gemini_base_url
    )
    return GeminiDistiller(client=client, model=settings.gemini_chat_model)
