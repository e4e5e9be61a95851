"""Chunking with the real MiniLM tokenizer: structure first, token caps, overlap, tables."""

from __future__ import annotations

from collections.abc import Callable
from itertools import pairwise

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from lectern_common.text import embedding_text, sentences
from lectern_ingest.chunking import (
    SENTENCES,
    ChunkDraft,
    ChunkingConfig,
    chunk_units,
    structural_prefix,
)
from lectern_ingest.extract.model import Block, Unit

TokenCounter = Callable[[str], int]

WORDS = (
    "cell energy mitosis chromosome nucleus membrane protein enzyme photosynthesis glucose "
    "oxygen carbon molecule reaction gradient transport division replication spindle "
    "cytoplasm ribosome organelle structure function pathway synthesis hormone receptor "
    "signal bacteria virus immune antibody tissue organ system evolution species genome "
    "inheritance allele mutation selection population ecosystem climate the of and in to "
    "with from during between which is are was were has have quickly strongly 42 1998"
).split()


def _run(start: int, n: int) -> list[str]:
    return [WORDS[(start + k) % len(WORDS)] for k in range(n)]


def _sentence(words: list[str]) -> str:
    text = " ".join(words)
    return text[0].upper() + text[1:] + "."


sentences_st = st.lists(st.sampled_from(WORDS), min_size=1, max_size=60).map(_sentence)
paragraph_st = st.lists(sentences_st, min_size=1, max_size=8)
section_st = st.tuples(
    st.integers(1, 3), st.sampled_from(WORDS), st.lists(paragraph_st, min_size=0, max_size=5)
)


def _units(sections: list[tuple[int, str, list[list[str]]]]) -> list[Unit]:
    units = []
    for page, (level, title, paragraphs) in enumerate(sections, start=1):
        blocks = [Block("heading", f"{title.title()} {page}", level=level)]
        blocks += [Block("paragraph", " ".join(p)) for p in paragraphs]
        units.append(Unit(blocks=blocks, page=page))
    return units


def _chunks(
    units: list[Unit], count: TokenCounter, config: ChunkingConfig | None = None
) -> list[ChunkDraft]:
    return list(chunk_units(units, config=config or ChunkingConfig(), count_tokens=count))


def test_sentence_splitting() -> None:
    text = (
        "Cells divide. E.g. bacteria split in two, cf. Fig. 3 and Dr. Smith's notes! "
        "Is it 3.5 mm? Yes.\nA new line starts here"
    )
    assert sentences(text, rules=SENTENCES) == [
        "Cells divide.",
        "E.g. bacteria split in two, cf. Fig. 3 and Dr. Smith's notes!",
        "Is it 3.5 mm?",
        "Yes.",
        "A new line starts here",
    ]
    cjk = sentences("細胞は分裂する。次の文です。", rules=SENTENCES)
    assert cjk == ["細胞は分裂する。", "次の文です。"]


def test_config_is_validated() -> None:
    with pytest.raises(ValueError, match="min_tokens"):
        ChunkingConfig(target_tokens=300, max_tokens=256)
    with pytest.raises(ValueError, match="overlap"):
        ChunkingConfig(overlap_tokens=200)


def test_sections_pages_and_chapters(count_tokens: TokenCounter) -> None:
    body = " ".join(_sentence(_run(i, 12)) for i in range(0, 60, 3))
    units = [
        Unit([Block("heading", "Chapter 5 Cells", level=1), Block("paragraph", body)], page=10),
        Unit([Block("heading", "5.3 Mitosis", level=2), Block("paragraph", body)], page=11),
        Unit([Block("paragraph", body)], page=12),
        Unit([Block("heading", "Chapter 6 Energy", level=1), Block("paragraph", body)], page=13),
    ]
    chunks = _chunks(units, count_tokens)
    paths = [tuple(c.section_path) for c in chunks]
    assert paths[0] == ("Chapter 5 Cells",)
    assert ("Chapter 5 Cells", "5.3 Mitosis") in paths
    assert paths[-1] == ("Chapter 6 Energy",)
    mitosis = [c for c in chunks if c.section_path == ["Chapter 5 Cells", "5.3 Mitosis"]]
    assert min(c.page_start or 0 for c in mitosis) == 11
    assert max(c.page_end or 0 for c in mitosis) == 12
    assert all(c.chapter == c.section_path[0] for c in chunks)
    assert [c.index for c in chunks] == list(range(len(chunks)))


def test_overlap_is_whole_sentences_within_a_section(count_tokens: TokenCounter) -> None:
    written = [_sentence(_run(i, 9)) for i in range(0, 80)]
    units = [Unit([Block("heading", "Topic", level=1), Block("paragraph", " ".join(written))])]
    chunks = _chunks(units, count_tokens)
    assert len(chunks) >= 3
    for first, second in pairwise(chunks):
        first_sentences = sentences(first.text, rules=SENTENCES)
        second_sentences = sentences(second.text, rules=SENTENCES)
        assert second_sentences[0] in first_sentences  # starts with a repeated whole sentence
        shared = [s for s in second_sentences if s in first_sentences]
        assert sum(count_tokens(s) - 2 for s in shared) <= ChunkingConfig().overlap_tokens


def test_overlong_sentence_is_split_at_word_boundaries(count_tokens: TokenCounter) -> None:
    words = [WORDS[i % len(WORDS)] for i in range(700)]
    sentence = " ".join(words) + "."
    units = [Unit([Block("paragraph", sentence)], page=1)]
    chunks = _chunks(units, count_tokens)
    assert len(chunks) >= 3
    assert all(count_tokens(c.text) <= 256 for c in chunks)
    rebuilt = " ".join(c.text for c in chunks).split()
    # Overlap may repeat whole slices; the words still come back in order.
    assert rebuilt[: len(chunks[0].text.split())] == words[: len(chunks[0].text.split())]
    assert set(rebuilt) <= set(words) | {words[-1] + "."}
    joined = " ".join(dict.fromkeys(c.text for c in chunks))
    assert words[350] in joined and (words[-1] + ".") in joined


def test_tiny_trailing_fragment_is_merged_into_its_section(count_tokens: TokenCounter) -> None:
    long = " ".join(_sentence(_run(i, 10)) for i in range(0, 45))
    units = [
        Unit([Block("heading", "A", level=1), Block("paragraph", long)]),
        Unit([Block("paragraph", "Short tail.")]),
        Unit([Block("heading", "B", level=1), Block("paragraph", "Tiny section.")]),
    ]
    chunks = _chunks(units, count_tokens)
    a_chunks = [c for c in chunks if c.section_path == ["A"]]
    assert all(c.token_count >= ChunkingConfig().min_tokens for c in a_chunks)
    assert "Short tail." in a_chunks[-1].text
    b_chunks = [c for c in chunks if c.section_path == ["B"]]
    assert [c.text for c in b_chunks] == ["Tiny section."]  # not merged across sections


def test_tables_are_whole_or_split_by_rows_with_header(count_tokens: TokenCounter) -> None:
    header = "Species | Habitat | Mass (kg)"
    rows = [f"Duck number {i} | pond and river {i} | {i}.5" for i in range(120)]
    units = [
        Unit([Block("paragraph", "Some words before.")], page=1),
        Unit([Block("table", "\n".join([header, *rows[:3]]), caption="Table 1: Ducks")], page=1),
        Unit([Block("table", "\n".join([header, *rows]), caption="Table 2: Many ducks")], page=2),
    ]
    chunks = _chunks(units, count_tokens)
    tables = [c for c in chunks if c.kind == "table"]
    assert tables[0].text == "\n".join(["Table 1: Ducks", header, *rows[:3]])
    big = tables[1:]
    assert len(big) >= 3
    for chunk in big:
        lines = chunk.text.split("\n")
        assert lines[:2] == ["Table 2: Many ducks", header]
        assert count_tokens(chunk.text) <= 256
        assert chunk.page_start == 2
    assert [r for c in big for r in c.text.split("\n")[2:]] == rows


def test_short_line_before_a_table_becomes_its_caption(count_tokens: TokenCounter) -> None:
    units = [Unit([Block("paragraph", "A uniform table"), Block("table", "a | b\n1 | 2")])]
    chunks = _chunks(units, count_tokens)
    assert [(c.kind, c.text) for c in chunks] == [("table", "A uniform table\na | b\n1 | 2")]


def test_slides_never_share_a_chunk(count_tokens: TokenCounter) -> None:
    units = [
        Unit([Block("heading", "Intro", level=1), Block("paragraph", "Welcome.")], slide=1),
        Unit([Block("paragraph", "No title here.")], slide=2),
    ]
    chunks = _chunks(units, count_tokens)
    assert [(c.slide, c.text) for c in chunks] == [(1, "Welcome."), (2, "No title here.")]


def test_transcript_chunks_keep_time_ranges(count_tokens: TokenCounter) -> None:
    units = [
        Unit(
            [Block("paragraph", _sentence(_run(i, 25)))],
            time_start=i * 10.0,
            time_end=i * 10.0 + 9.5,
        )
        for i in range(30)
    ]
    chunks = _chunks(units, count_tokens)
    assert len(chunks) > 1
    assert chunks[0].time_start == 0.0
    assert chunks[-1].time_end == 29 * 10.0 + 9.5
    for a, b in pairwise(chunks):
        assert a.time_start is not None and b.time_start is not None
        assert a.time_start <= b.time_start


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sections=st.lists(section_st, min_size=1, max_size=6),
    target=st.integers(60, 220),
    overlap=st.integers(0, 50),
)
def test_chunk_properties(
    count_tokens: TokenCounter,
    sections: list[tuple[int, str, list[list[str]]]],
    target: int,
    overlap: int,
) -> None:
    config = ChunkingConfig(
        target_tokens=target,
        overlap_tokens=min(overlap, target - 1),
        min_tokens=20,
        max_tokens=256,
    )
    units = _units(sections)
    chunks = _chunks(units, count_tokens, config)
    # never over the cap, and token_count is the real count
    for chunk in chunks:
        assert chunk.token_count == count_tokens(chunk.text) <= config.max_tokens
    # every sentence of the input is in a chunk of its own section
    for page, (_, _, paragraphs) in enumerate(sections, start=1):
        section_text = [c.text for c in chunks if c.page_start == page]
        for sentence in (s for p in paragraphs for s in p):
            assert any(sentence in text for text in section_text), sentence
    # in order, with the section path of their heading
    assert [c.index for c in chunks] == list(range(len(chunks)))
    pages = [c.page_start or 0 for c in chunks]
    assert pages == sorted(pages)
    for chunk in chunks:
        _, title, _ = sections[(chunk.page_start or 1) - 1]
        assert chunk.section_path[-1] == f"{title.title()} {chunk.page_start}"
        assert chunk.page_start == chunk.page_end


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@example(paragraphs=[["！0"]])  # a Chinese or Japanese stop, then a digit: no space put between
@given(
    paragraphs=st.lists(
        st.lists(
            st.text(
                alphabet=st.characters(categories=["L", "N", "P", "S"]), min_size=1, max_size=25
            ),
            min_size=1,
            max_size=400,
        ),
        min_size=1,
        max_size=4,
    )
)
def test_arbitrary_text_stays_under_the_cap_and_keeps_every_word(
    count_tokens: TokenCounter, paragraphs: list[list[str]]
) -> None:
    units = [Unit([Block("paragraph", " ".join(words)) for words in paragraphs], page=1)]
    chunks = _chunks(units, count_tokens)
    for chunk in chunks:
        assert chunk.token_count == count_tokens(chunk.text) <= 256
    text = " ".join(c.text for c in chunks)
    for words in paragraphs:
        if not any(ch.isalnum() for word in words for ch in word):
            continue  # a chunk of only symbols ("®", ":") is not kept: nothing to ask about
        for word in words:
            assert word in text


def test_a_single_word_over_the_cap_is_split_by_characters(count_tokens: TokenCounter) -> None:
    word = "".join(f"{i}," for i in range(400))  # ~800 word pieces, no space to split at
    chunks = _chunks([Unit([Block("paragraph", word)], page=1)], count_tokens)
    assert len(chunks) >= 4
    assert all(count_tokens(c.text) <= 256 for c in chunks)
    # cut into 100-character pieces first (WordPiece reads a longer word as one [UNK])
    pieces = [word[i : i + 100] for i in range(0, len(word), 100)]
    texts = [c.text for c in chunks]
    assert all(len(w) <= 100 for t in texts for w in t.split())
    assert list(dict.fromkeys(w for t in texts for w in t.split())) == pieces  # all, in order


def test_a_short_chunk_is_embedded_without_the_title_every_chunk_shares() -> None:
    title = "Turner syndrome: issues to consider"
    prefix = structural_prefix(title, [title, "Background"])
    assert prefix == "Turner syndrome: issues to consider > Background"
    assert embedding_text("TS affects 1/2500 births.", prefix, title) == (
        "Background\nTS affects 1/2500 births."
    )
    assert embedding_text("doi: 10.1093/bmb", title, title) == "doi: 10.1093/bmb"
    assert embedding_text("text", None, title) == "text"
    long = " ".join(["word"] * 40)
    assert embedding_text(long, prefix, title) == f"{prefix}\n{long}"


def test_a_chunk_without_a_word_is_not_kept(count_tokens: TokenCounter) -> None:
    units = [
        Unit([Block("heading", "Trademarks", level=1), Block("paragraph", "®")], page=1),
        Unit([Block("heading", "Cells", level=1), Block("paragraph", "Cells divide.")], page=2),
    ]
    assert [c.text for c in _chunks(units, count_tokens)] == ["Cells divide."]
