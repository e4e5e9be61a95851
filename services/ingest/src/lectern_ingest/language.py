"""Language detection and the matching Postgres full-text search configuration.

Detection is py3langid (langid.py's model, bundled, offline): ~0.5 ms a document where
langdetect took ~8 ms of pure Python, and deterministic without global seeds.
"""

from __future__ import annotations

import functools
import threading
from typing import Any

from lectern_common import bm25

_SAMPLE_CHARS = 5000
DEFAULT_LANGUAGE = "en"

_LOADING = threading.Lock()


@functools.cache
def _identifier() -> Any:
    """The bundled model, loaded once (probabilities normalised to 0..1).

    Loading takes ~0.8 s of CPU (an LZMA-compressed array); the lock keeps documents
    extracted in parallel right after start-up from each loading their own copy.
    """
    with _LOADING:
        return _load()


@functools.cache
def _load() -> Any:
    from py3langid import langid

    return langid.LanguageIdentifier.from_modelpath(
        langid.MODEL_DIR / langid.MODEL_FILE, norm_probs=True
    )


def load_model() -> None:
    """Load the model now (at start-up) rather than during the first document."""
    _identifier()


def detect_language(sample_text: str, *, default: str = DEFAULT_LANGUAGE) -> str:
    """Return the ISO 639-1 code of the text's language (deterministic), ``default`` if unsure."""
    sample = sample_text[:_SAMPLE_CHARS]
    if sum(ch.isalpha() for ch in sample) < 20:
        return default
    code, probability = _identifier().classify(sample)
    if probability < 0.5:
        return default
    return str(code).split("-")[0].lower()


def ts_config_for(lang: str | None) -> str:
    """Postgres text search configuration for an ISO 639-1 code ('simple' when none fits)."""
    return bm25.ts_config_for(lang, default="simple")
