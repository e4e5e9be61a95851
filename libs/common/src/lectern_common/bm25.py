"""BM25 as computed by migration 0002 (Postgres), in Python: parameters, idf, query helpers.

The database holds the document side (per-chunk sparsevec weights, per-tenant statistics);
these functions build the query side and serve as the reference the tests check SQL against.
"""

from __future__ import annotations

import math
from collections.abc import Container, Iterable, Sequence

K1 = 0.9
B = 0.4
# Every BM25 sparsevec has this dimension (term ids are 1-based and stay below it).
SPARSE_DIM = 1_000_000_000

# ISO 639-1 code -> the built-in Postgres text search configurations: one map for ingest
# (a chunk's ts_config) and retrieval (the query's), so both stem a language alike
TS_CONFIGS = {
    "ar": "arabic", "hy": "armenian", "eu": "basque", "ca": "catalan", "da": "danish",
    "nl": "dutch", "en": "english", "fi": "finnish", "fr": "french", "de": "german",
    "el": "greek", "hi": "hindi", "hu": "hungarian", "id": "indonesian", "ga": "irish",
    "it": "italian", "lt": "lithuanian", "ne": "nepali", "no": "norwegian", "nb": "norwegian",
    "nn": "norwegian", "pt": "portuguese", "ro": "romanian", "ru": "russian", "sr": "serbian",
    "es": "spanish", "sv": "swedish", "ta": "tamil", "tr": "turkish", "yi": "yiddish",
}  # fmt: skip
DEFAULT_TS_CONFIG = "english"


def ts_config_for(language: str | None, *, default: str = DEFAULT_TS_CONFIG) -> str:
    """The text search configuration for a language code (``default`` when none is given,
    'simple' for a language Postgres has none for)."""
    if not language:
        return default
    return TS_CONFIGS.get(language.split("-")[0].split("_")[0].lower(), "simple")


def idf(*, chunk_count: int, df: int) -> float:
    """BM25 idf, ln(1 + (N - df + 0.5) / (df + 0.5)); never negative."""
    return math.log(1.0 + (chunk_count - df + 0.5) / (df + 0.5))


def idf_weights(query: Sequence[str], bags: Sequence[Container[str]]) -> dict[str, float]:
    """The ``idf`` of each query term over ``bags`` (the terms of each text): the offline
    answerer's over a turn's sentences, the re-ranker's over its candidates' sentences."""
    count = len(bags)
    return {
        term: idf(chunk_count=count, df=df)
        for term in query
        for df in [sum(1 for bag in bags if term in bag)]
    }


def document_weight(*, tf: int, doc_length: int, avg_length: float) -> float:
    """A term's BM25 document weight tf·(k1+1) / (tf + k1·(1 − b + b·dl/avgdl))."""
    norm = 1.0 - B + B * doc_length / max(avg_length, 1e-9)
    return tf * (K1 + 1.0) / (tf + K1 * norm)


def quote_lexeme(lexeme: str) -> str:
    """A lexeme as a tsquery operand."""
    return "'" + lexeme.replace("\\", "\\\\").replace("'", "''") + "'"


def tsquery_or(lexemes: Iterable[str]) -> str:
    """A tsquery literal matching any of these (already normalised) lexemes."""
    return " | ".join(quote_lexeme(lex) for lex in lexemes)


def tsquery_all_then_any(required: Sequence[str], any_of: Sequence[str]) -> str:
    """A tsquery literal matching text holding every ``required`` lexeme and one of ``any_of``."""
    return " & ".join([*(quote_lexeme(lex) for lex in required), f"({tsquery_or(any_of)})"])


def tsqueries_two_of(lexemes: Sequence[str]) -> list[str]:
    """tsquery literals whose OR matches text holding at least two of these lexemes.

    One clause per lexeme but the last, ``l_i & (l_i+1 | ... | l_n)``: with the lexemes
    rarest first, each clause's GIN scan is driven by its rare lexeme's short posting list,
    and Postgres ORs the clauses' bitmaps (a BitmapOr). One tsquery of every pair makes GIN
    test each chunk holding any of the lexemes against all n(n-1)/2 pairs instead (measured
    at 100k chunks, 9 common lexemes: 60 ms in the index against 12 ms).
    """
    return [tsquery_all_then_any([lex], lexemes[i + 1 :]) for i, lex in enumerate(lexemes[:-1])]
