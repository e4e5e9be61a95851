"""Exact hashes and SimHash near-duplicate fingerprints."""

from __future__ import annotations

import hashlib

from hypothesis import given, settings
from hypothesis import strategies as st

from lectern_ingest.dedup import (
    SimHasher,
    TextHasher,
    hamming,
    sha256_bytes,
    sha256_file,
    sha256_text,
    simhash,
    similarity,
)

BASE = (
    "Mitosis is the part of the cell cycle in which replicated chromosomes are separated into "
    "two new nuclei. Cell division by mitosis gives rise to genetically identical cells in which "
    "the total number of chromosomes is maintained. Mitosis is preceded by the S phase of "
    "interphase, during which DNA replication occurs, and is followed by telophase and "
    "cytokinesis, which divides the cytoplasm, organelles and cell membrane of one cell into two "
    "new cells containing roughly equal shares of these cellular components."
)


def test_sha256_helpers(tmp_path: object) -> None:
    from pathlib import Path

    path = Path(str(tmp_path)) / "f.bin"
    path.write_bytes(b"abc" * 1000)
    assert sha256_bytes(b"abc") == hashlib.sha256(b"abc").hexdigest()
    assert sha256_file(str(path), chunk_size=7) == hashlib.sha256(b"abc" * 1000).hexdigest()
    assert sha256_text("Hello,   WORLD\n") == sha256_text("hello world")
    assert sha256_text("hello world") != sha256_text("hello word")


def test_simhash_flags_near_duplicates_and_not_different_texts() -> None:
    edited = BASE.replace("genetically identical", "genetically the same").replace(
        "roughly", "about"
    )
    other = (
        "Photosynthesis converts light energy into chemical energy stored in glucose. The light "
        "reactions take place in the thylakoid membranes, and the Calvin cycle fixes carbon "
        "dioxide in the stroma of the chloroplast using ATP and NADPH."
    )
    a, b, c = simhash(BASE), simhash(edited), simhash(other)
    assert similarity(a, a) == 1.0
    assert similarity(a, b) > 0.85
    assert similarity(a, c) < 0.85


def test_simhash_is_a_signed_int64_and_streaming_matches_whole_text() -> None:
    value = simhash(BASE)
    assert -(2**63) <= value < 2**63
    hasher = SimHasher()
    words = BASE.split()
    for i in range(0, len(words), 7):
        hasher.update(" ".join(words[i : i + 7]))
    assert hasher.digest() == value


def test_short_texts_still_get_a_fingerprint() -> None:
    assert simhash("two words") == simhash("Two  WORDS")
    assert simhash("") == 0


@settings(max_examples=100, deadline=None)
@given(st.integers(min_value=-(2**63), max_value=2**63 - 1), st.integers(0, 63))
def test_hamming_counts_flipped_bits_on_signed_values(value: int, bit: int) -> None:
    flipped = (value & ((1 << 64) - 1)) ^ (1 << bit)
    signed = flipped - (1 << 64) if flipped >= 1 << 63 else flipped
    assert hamming(value, signed) == 1
    assert similarity(value, signed) == 1 - 1 / 64


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(alphabet=st.characters(codec="utf-8"), max_size=40), max_size=6))
def test_streamed_text_hash_equals_the_hash_of_the_joined_text(pieces: list[str]) -> None:
    hasher = TextHasher()
    for piece in pieces:
        hasher.update(piece)
    assert hasher.hexdigest() == sha256_text("\n".join(pieces))
    assert hasher.empty == (sha256_text("\n".join(pieces)) == sha256_text(""))


def test_text_hash_ignores_layout_not_words() -> None:
    one, two = TextHasher(), TextHasher()
    one.update("Chapter 1\nCells divide.")
    two.update("CHAPTER   1")
    two.update("cells  divide")
    assert one.hexdigest() == two.hexdigest()
    two.update("again")
    assert one.hexdigest() != two.hexdigest()
