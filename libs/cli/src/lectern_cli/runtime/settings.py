"""The settings the stack's commands read (``lectern up``, ``migrate``, ``reindex``, ``gc``):
the shared ``LECTERN_*`` settings, and the configured embedder's name and dimension, read
without loading any model (the supervisor never imports torch)."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import ValidationError

from lectern_common.errors import ConfigurationError
from lectern_common.settings import BaseServiceSettings

LOCAL_EMBEDDING_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
LOCAL_EMBEDDING_DIM = 384


def load_settings() -> BaseServiceSettings:
    """The shared ``LECTERN_*`` settings; a ``ConfigurationError`` says what is wrong."""
    try:
        return BaseServiceSettings()
    except ValidationError as exc:
        problems = "; ".join(str(e["msg"]) for e in exc.errors())
        raise ConfigurationError(f"invalid LECTERN_* settings: {problems}") from None


def embedding_identity(settings: BaseServiceSettings) -> tuple[str, int]:
    """Name and dimension of the configured embedder, read without loading any model."""
    if settings.embedding_provider == "gemini":
        return settings.gemini_embedding_model, settings.gemini_embedding_dim
    if settings.local_embedding_model is None:
        return LOCAL_EMBEDDING_MODEL, LOCAL_EMBEDDING_DIM
    path = Path(settings.local_embedding_model)
    for config_file, key in (
        (path / "1_Pooling" / "config.json", "word_embedding_dimension"),
        (path / "config.json", "hidden_size"),
    ):
        if config_file.exists():
            value = json.loads(config_file.read_text()).get(key)
            if isinstance(value, int):
                return str(path), value
    raise ConfigurationError(
        f"cannot tell the embedding dimension of {path} (no sentence-transformers config found)"
    )
