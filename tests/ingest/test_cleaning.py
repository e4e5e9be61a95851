"""Text normalisation: ligatures, quotes, dehyphenation, whitespace, running headers."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from lectern_ingest.cleaning import (
    clean_inline,
    clean_text,
    furniture_key,
    is_page_number,
    join_lines,
    normalize_unicode,
    normalize_whitespace,
    repeated_furniture,
)


def test_ligatures_and_smart_quotes_are_fixed() -> None:
    assert normalize_unicode("\ufb01nal \ufb02ow \ufb00ect \ufb03x") == "final flow ffect ffix"
    assert normalize_unicode("\u201cquoted\u201d and \u2018single\u2019 it\u2019s") == (
        "\"quoted\" and 'single' it's"
    )


def test_unicode_is_nfc_and_invisible_characters_go() -> None:
    decomposed = "Cafe\u0301 soft\u00adhyphen zero\u200bwidth"
    assert normalize_unicode(decomposed) == "Caf\u00e9 softhyphen zerowidth"


def test_arabic_presentation_forms_fold_to_letters() -> None:
    # U+FEE3 U+FEE4 are presentation forms of meem; searchable text needs U+0645.
    assert normalize_unicode("\ufee3\ufee4") == "\u0645\u0645"


def test_words_hyphenated_across_lines_are_rejoined() -> None:
    assert join_lines(["the mito-", "chondria are", "well-", "Known"]) == (
        "the mitochondria are well- Known"
    )
    assert join_lines(["  spaced  ", "", "out"]) == "spaced out"


def test_clean_text_keeps_paragraphs_and_collapses_spaces() -> None:
    raw = "First   line of a para-\ngraph.\n\n\n\nSecond\u00a0paragraph  \n"
    assert clean_text(raw) == "First line of a paragraph.\n\nSecond paragraph"


def test_whitespace_normalisation() -> None:
    assert normalize_whitespace("  a  b \n\n\n c ") == "a b\n\nc"
    assert clean_inline(" Heading\n  two\tparts ") == "Heading two parts"


def test_page_numbers_are_recognised() -> None:
    for text in ["12", "xiv", "Page 3 of 10", "page 7", "4 / 20"]:
        assert is_page_number(text), text
    for text in ["12 apples", "Chapter 3", "2.1 Introduction"]:
        assert not is_page_number(text), text


def test_repeated_headers_found_across_pages_with_numbers_ignored() -> None:
    pages = [[f"Biology Textbook  page {n}", f"Chapter {n % 3} notes"] for n in range(1, 21)]
    pages[5].append("A unique line")
    found = repeated_furniture(pages)
    assert furniture_key("Biology Textbook page 99") in found
    assert furniture_key("A unique line") not in found


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.characters(codec="utf-8"), max_size=300))
def test_clean_text_is_idempotent(text: str) -> None:
    once = clean_text(text)
    assert clean_text(once) == once


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_cleaned_text_has_no_ligatures_smart_quotes_or_double_spaces(text: str) -> None:
    cleaned = clean_text(text)
    assert not set(cleaned) & set("\ufb00\ufb01\ufb02\ufb03\ufb04\u201c\u201d\u2018\u2019\u00ad")
    assert "  " not in cleaned
    assert "\n\n\n" not in cleaned
