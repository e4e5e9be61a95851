"""Exact and near-duplicate fingerprints: SHA-256 of bytes/text, 64-bit SimHash of shingles."""

from __future__ import annotations

import hashlib
import re

import numpy as np

_WORD = re.compile(r"\w+", re.UNICODE)
_MASK = (1 << 64) - 1
_BIT_SHIFTS = np.arange(64, dtype=np.uint64)


def sha256_bytes(data: bytes) -> str:
    """Hex SHA-256 of raw bytes (the uploaded file)."""
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: str, *, chunk_size: int = 1 << 20) -> str:
    """Hex SHA-256 of a file, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk_size):
            digest.update(block)
    return digest.hexdigest()


def normalize_for_hash(text: str) -> str:
    """Canonical form of cleaned text for hashing: lower-case words separated by one space."""
    return " ".join(_WORD.findall(text.lower()))


def sha256_text(text: str) -> str:
    """Hex SHA-256 of text after canonicalisation (whitespace and case do not matter)."""
    return hashlib.sha256(normalize_for_hash(text).encode("utf-8")).hexdigest()


class TextHasher:
    """Incremental ``sha256_text``: feed the text piece by piece (pieces end between words).

    ``update(a); update(b)`` gives ``sha256_text(a + "\\n" + b)`` without holding the whole
    text in memory.
    """

    def __init__(self) -> None:
        self._digest = hashlib.sha256()
        self._started = False

    def update(self, text: str) -> None:
        """Add one piece (a page, a slide ...)."""
        words = _WORD.findall(text.lower())
        if not words:
            return
        joined = " ".join(words)
        self._digest.update(((" " if self._started else "") + joined).encode("utf-8"))
        self._started = True

    @property
    def empty(self) -> bool:
        """No word was fed yet."""
        return not self._started

    def hexdigest(self) -> str:
        """Hex SHA-256 of the canonical text fed so far."""
        return self._digest.hexdigest()


def _to_int64(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


class SimHasher:
    """Incremental 64-bit SimHash over word shingles; feed text piece by piece, then digest."""

    def __init__(self, *, shingle_size: int = 3) -> None:
        self._size = shingle_size
        self._tail: list[str] = []
        self._weights = np.zeros(64, dtype=np.int64)
        self._seen_any = False

    def update(self, text: str) -> None:
        """Add the words of ``text`` (continuing the shingles of the previous piece)."""
        words = self._tail + _WORD.findall(text.lower())
        if len(words) < self._size:
            self._tail = words
            return
        grams = [" ".join(words[i : i + self._size]) for i in range(len(words) - self._size + 1)]
        self._add(grams)
        self._tail = words[-(self._size - 1) :] if self._size > 1 else []

    def _add(self, grams: list[str]) -> None:
        hashes = np.fromiter(
            (
                int.from_bytes(hashlib.blake2b(g.encode("utf-8"), digest_size=8).digest(), "big")
                for g in grams
            ),
            dtype=np.uint64,
            count=len(grams),
        )
        bits = (hashes[:, None] >> _BIT_SHIFTS) & np.uint64(1)
        self._weights += (bits.astype(np.int64) * 2 - 1).sum(axis=0)
        self._seen_any = True

    def digest(self) -> int:
        """The fingerprint as a signed int64 (fits a Postgres bigint)."""
        if not self._seen_any and self._tail:
            self._add([" ".join(self._tail)])
        value = 0
        for bit in range(64):
            if self._weights[bit] > 0:
                value |= 1 << bit
        return _to_int64(value)


def simhash(text: str, *, shingle_size: int = 3) -> int:
    """64-bit SimHash over word shingles, as a signed int64 (fits a Postgres bigint)."""
    hasher = SimHasher(shingle_size=shingle_size)
    hasher.update(text)
    return hasher.digest()


def hamming(a: int, b: int) -> int:
    """Number of differing bits between two 64-bit fingerprints (signed or unsigned)."""
    return ((a & _MASK) ^ (b & _MASK)).bit_count()


def similarity(a: int, b: int) -> float:
    """1 - hamming/64: 1.0 identical, ~0.5 unrelated."""
    return 1.0 - hamming(a, b) / 64.0
