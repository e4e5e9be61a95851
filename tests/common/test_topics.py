"""What a student's message is about, in the material's words (``lectern_common.topics``)."""

from __future__ import annotations

from lectern_common.topics import plain_topics, topics

MATERIAL = [
    "Ducks generally only have one partner at a time, although the partnership usually "
    "only lasts one year. Larger species tend to have pair-bonds that last numerous years.",
    "Mitosis produces two identical daughter cells; meiosis halves the chromosome number.",
]


def test_a_topic_is_a_run_of_words_the_material_uses() -> None:
    found = topics("I still don't get why meiosis halves the chromosome number", MATERIAL)
    assert found[0] == "meiosis halves the chromosome number"


def test_a_hyphen_joins_no_word() -> None:
    """A hyphen joins no word: "pair bonds" asked is "pair-bonds" written, and back."""
    assert topics("How long do duck pair bonds usually last?", MATERIAL)[0] == "pair bonds"
    assert topics("Are pair-bonds for life?", ["Pair bonds last for years."])[0] == "pair bonds"


def test_a_contrast_of_two_topics_is_one_topic() -> None:
    found = topics("What is the difference between mitosis and meiosis?", MATERIAL)
    assert found[0] == "mitosis and meiosis"


def test_the_rarest_words_name_the_topic_with_the_librarys_idf() -> None:
    idf = {"meiosis": 5.0, "cells": 1.0, "daughter": 3.0}
    found = topics("Does meiosis make daughter cells?", MATERIAL, idf=idf)
    assert found[0] == "meiosis"
    assert "cells" not in found  # far more common than the message's rarest word


def test_without_material_the_messages_own_words() -> None:
    assert plain_topics("Sorry, I'm lost with the krebs cycle") == ["krebs cycle"]
    assert topics("anything", []) == []


def test_an_acronym_in_capitals_is_a_topic_a_short_word_is_not() -> None:
    """ "VP" names a topic; "in" or "vp" in lower case is too short to."""
    material = ["The VP metric is the prediction variation percentage in the experiments."]
    assert topics("What is the VP metric?", material)[0] == "vp metric"
    assert plain_topics("What is the VP metric in the experiments?")[0].startswith("vp metric")
    assert "vp" not in " ".join(topics("what is the vp metric?", material)).split()


def test_two_close_topics_are_named_together_with_the_librarys_idf() -> None:
    """A subject the material keeps repeating is outranked by the rarer phrase beside it;
    the span names both. Across a question word they stay apart."""
    material = [
        "Oestrogen replacement is commenced at 11 to 12 years; oestrogen doses rise slowly.",
        "Low-dose oestradiol given to induce puberty in girls with Turner syndrome.",
        "The velocity of the ball is zero when it hits the ground.",
    ]
    idf = {"oestrogen": 4.0, "usually": 3.0, "started": 3.5, "induce": 6.0, "puberty": 5.5,
           "velocity": 4.0, "ball": 4.0, "hits": 3.5, "ground": 4.0}  # fmt: skip
    asked = "At what age is oestrogen usually started to induce puberty?"
    assert topics(asked, material, idf=idf)[0] == "oestrogen usually started to induce puberty"
    found = topics("What is the velocity of the ball when it hits the ground?", material, idf=idf)
    assert "velocity of the ball when it hits the ground" not in found
