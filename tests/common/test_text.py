"""The one text module: its tokeniser, stopwords, stemmer and sentence splitter on small cases,
the answerer's definitions by default and each other behaviour asked for by a parameter."""

from __future__ import annotations

import pytest

from lectern_common.text import (
    PROSE,
    STOPWORDS,
    SentenceRules,
    ends_clause,
    prefix_stem,
    prefix_stems,
    sentence_spans,
    sentences,
    split_sentences,
    split_units,
    stem,
    terms,
    words,
)


def test_words_are_runs_of_letters_and_digits_unless_joined() -> None:
    text = "Newton’s 2nd law: don't mix pair-bonds with H2O_gas"
    assert words(text) == [
        "Newton", "s", "2nd", "law", "don", "t", "mix", "pair", "bonds", "with", "H2O", "gas",
    ]  # fmt: skip
    assert words(text, joined_by="'’") == [
        "Newton’s", "2nd", "law", "don't", "mix", "pair", "bonds", "with", "H2O", "gas",
    ]  # fmt: skip
    assert words(text, joined_by="'’-")[5] == "pair-bonds"
    assert words(text, digits=False) == [
        "Newton", "s", "nd", "law", "don", "t", "mix", "pair", "bonds", "with", "H", "O", "gas",
    ]  # fmt: skip
    assert words("Über die Größe 1789") == ["Über", "die", "Größe", "1789"]


@pytest.mark.parametrize(
    ("word", "stemmed"),
    [
        ("studies", "study"),
        ("classes", "class"),
        ("walking", "walk"),
        ("jumped", "jump"),
        ("cells", "cell"),
        ("is", "is"),
        ("bus", "bus"),
        ("glass", "glass"),
        ("fixed", "fixed"),  # too short to lose "-ed"
        ("ties", "tie"),  # too short for "-ies"
    ],
)
def test_the_stemmer_takes_plural_ing_and_ed_endings_off(word: str, stemmed: str) -> None:
    assert stem(word) == stemmed


def test_terms_are_stemmed_words_without_stopwords_in_english_and_german() -> None:
    assert {"the", "what", "explain", "der", "und", "nicht"} <= STOPWORDS
    assert terms("Explain what the mitochondria are doing in cells") == [
        "mitochondria",
        "cell",
    ]
    # an English stemmer, as the answerer's models were fitted with: German "-ed" goes too
    assert terms("Was ist der Unterschied zwischen Mitose und Meiose?") == [
        "unterschi",
        "zwischen",
        "mitose",
        "meiose",
    ]


def test_a_prefix_stem_finds_a_term_in_any_of_its_forms() -> None:
    assert prefix_stem("topologischen") == prefix_stem("topologischer") == "topol"
    assert prefix_stem("cell") == "cell"  # a short term is its own prefix
    assert prefix_stems("The regularization regularizes") == {"regul"}


def test_idf_weights_are_bm25s_idf_over_the_bags() -> None:
    from lectern_common.bm25 import idf, idf_weights

    bags = [{"cell", "wall"}, {"cell"}, {"nucleus"}]
    weights = idf_weights(["cell", "wall", "absent"], bags)
    assert weights == {
        "cell": idf(chunk_count=3, df=2),
        "wall": idf(chunk_count=3, df=1),
        "absent": idf(chunk_count=3, df=0),
    }
    assert weights["absent"] > weights["wall"] > weights["cell"] > 0


def test_prose_ends_a_sentence_before_a_capital_or_digit_after_its_stop() -> None:
    text = "Cells divide, e.g. by mitosis. It has 4 stages! 3.5 percent grow.31 A footnote."
    assert sentences(text) == [
        "Cells divide, e.g. by mitosis.",
        "It has 4 stages!",
        "3.5 percent grow.31",
        "A footnote.",
    ]
    assert sentences("No end here. but a lower-case word goes on") == [
        "No end here. but a lower-case word goes on"
    ]
    assert sentences('He said "Stop." (Then) he left.') == ['He said "Stop." (Then) he left.']
    assert sentences("Line one\nline two") == ["Line one", "line two"]


def test_spans_point_into_the_text_and_leave_white_space_out() -> None:
    text = "  One sentence.  Two sentences.\n"
    spans, rest = sentence_spans(text)
    assert [text[a:b] for a, b in spans] == ["One sentence.", "Two sentences."]
    assert rest == len(text)


def test_a_source_splits_into_paragraphs_items_table_rows_then_sentences() -> None:
    text = (
        "Mitosis has stages:\n- Prophase\n- Metaphase\n\n"
        "Table 1 Sizes\nCell | Size\nRed | 8 µm\n\n"
        "First sentence here. Second one follows."
    )
    assert split_units(text) == [
        (0, "Mitosis has stages:", "", ""),
        (1, "Prophase", "-", ""),
        (2, "Metaphase", "-", ""),
        (3, "Table 1 Sizes", "", "Table 1 Sizes Cell | Size"),
        (3, "Cell | Size", "", "Table 1 Sizes Cell | Size"),
        (3, "Cell: Red; Size: 8 µm", "", "Table 1 Sizes Cell | Size"),
        (4, "First sentence here.", "", ""),
        (4, "Second one follows.", "", ""),
    ]
    assert split_sentences("A line a PDF\nbroke in two. Next") == [
        "A line a PDF broke in two.",
        "Next",
    ]


def test_rules_ask_for_abbreviations_initials_closers_and_hard_stops() -> None:
    rules = SentenceRules(
        stop=r"[.!?…]+",
        closers=r"[\"'”’)\]]",
        hard=r"[。！？]+",
        abbreviations=frozenset({"e.g", "dr"}),
        initials=True,
    )
    text = 'Ask Dr. Smith, e.g. Tuesday. J. Smith said "Yes." Then 細胞。次'
    assert sentences(text) == [
        "Ask Dr.",
        "Smith, e.g.",
        "Tuesday.",
        "J.",
        'Smith said "Yes." Then 細胞。次',
    ]
    assert sentences(text, rules=rules) == [
        "Ask Dr. Smith, e.g. Tuesday.",
        'J. Smith said "Yes."',
        "Then 細胞。",
        "次",
    ]


def test_a_chat_message_ends_sentences_in_lower_case_and_not_at_line_breaks() -> None:
    rules = SentenceRules(stop=r"[.!?…]+", start="", lines=False)
    message = "i don't get it… why\nis that? ok"
    assert sentences(message, rules=rules) == ["i don't get it…", "why\nis that?", "ok"]
    assert sentences(message, rules=PROSE) == ["i don't get it… why", "is that? ok"]


def test_streaming_holds_a_sentence_back_until_nothing_can_extend_it() -> None:
    rules = SentenceRules(
        stop=r"[.!?]+", closers=r"[ \t]*\[T\d+\]", start="", pending=r"\[(?:T\d*)?"
    )
    text = "Plants make sugar. [T1] They need light. [T"
    spans, rest = sentence_spans(text, rules=rules, final=False)
    assert [text[a:b] for a, b in spans] == ["Plants make sugar. [T1]"]
    assert text[rest:] == " They need light. [T"  # "[T" may still become its label
    done = text + "2] More"
    spans, rest = sentence_spans(done, rules=rules, final=False)
    assert [done[a:b] for a, b in spans][-1] == "They need light. [T2]"
    assert done[rest:] == " More"
    spans, rest = sentence_spans(done, rules=rules, final=True)
    assert [done[a:b] for a, b in spans][-1] == "More" and rest == len(done)


def test_a_clause_ends_at_a_stop_colon_or_closing_mark_not_mid_way() -> None:
    assert ends_clause("It grows.") and ends_clause("Four stages:") and ends_clause("(see above) ")
    assert not ends_clause("X heißt kompakt, wenn jede offene Überdeckung von X")
