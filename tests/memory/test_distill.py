"""The deterministic distiller (pure)."""

import numpy as np

from lectern_memory.distill import (
    MemoryDraft,
    TurnSignal,
    distill_turns,
    first_sentence,
    preferences_in,
    validated,
)
from lectern_memory.struggle import Reading, StruggleModel

ANSWER = "Mitosis produces two identical daughter cells from one parent cell [T1]. It has phases."


def turn(question: str, band: str = "high", **kw: object) -> TurnSignal:
    return TurnSignal(question=question, answer=ANSWER, band=band, confidence=0.9, **kw)  # type: ignore[arg-type]


MODEL = StruggleModel(weights=np.zeros((1, 4)), bias=np.zeros(4))


def read(confusion: float, sentence: str, preference: float = 0.0) -> Reading:
    return Reading(confusion=confusion, preference=preference, question=0.9,
                   confused_sentence=sentence, preference_sentence=sentence)  # fmt: skip


def test_a_confident_answer_is_no_mastery_and_low_confidence_no_struggle() -> None:
    # the answer's confidence is about the material, not the student
    drafts = distill_turns(
        [
            turn("What does mitosis produce?", topics=("mitosis",)),
            turn("How does the Calvin cycle fix carbon?", band="low", topics=("calvin cycle",)),
        ]
    )
    assert [d.kind for d in drafts] == ["takeaway"]


def test_a_statement_of_confusion_is_a_struggle_named_by_what_confused() -> None:
    message = "I still find meiosis confusing. Why does it halve the chromosome number?"
    turns = [
        turn("What does mitosis produce?", topics=("mitosis",)),
        turn(message, topics=("chromosome number", "meiosis")),
    ]
    readings = [read(0.05, "x"), read(0.93, "I still find meiosis confusing.")]
    drafts = distill_turns(turns, readings, model=MODEL)
    struggles = [d for d in drafts if d.kind == "struggle"]
    assert [d.topic for d in struggles] == ["meiosis"]
    assert struggles[0].evidence[0]["kind"] == "said"
    assert "confusing" in struggles[0].text
    assert not [d for d in drafts if d.kind in ("mastered", "preference")]


def test_confusion_that_names_nothing_is_about_the_previous_question() -> None:
    turns = [
        turn("What is the first law of motion?", topics=("first law of motion",)),
        turn("Sorry, I'm lost. Can you say it more simply?"),
    ]
    readings = [read(0.1, "x"), read(0.9, "Sorry, I'm lost.")]
    drafts = distill_turns(turns, readings, model=MODEL)
    assert [d.topic for d in drafts if d.kind == "struggle"] == ["first law of motion"]


def test_explain_again_is_a_struggle_not_a_preference() -> None:
    message = "I don't get the difference between mitosis and meiosis, can you explain again?"
    drafts = distill_turns(
        [turn(message, topics=("mitosis and meiosis",))],
        [read(0.95, message, preference=0.6)],
        model=MODEL,
    )
    assert [(d.kind, d.topic) for d in drafts] == [("struggle", "mitosis and meiosis")]


def test_a_stated_preference_is_remembered_with_its_words() -> None:
    message = "I learn best with diagrams. What is a cell?"
    drafts = distill_turns([turn(message)], [read(0.02, message, preference=0.9)], model=MODEL)
    assert [d.text for d in drafts if d.kind == "preference"] == [f"Prefers: {message}"]


def test_rephrased_question_marks_struggle_even_when_answered_well() -> None:
    drafts = distill_turns(
        [
            turn("What is the Krebs cycle?"),
            turn("Can you explain the Krebs cycle again, what is it?"),
        ]
    )
    struggles = [d for d in drafts if d.kind == "struggle"]
    assert struggles and "more than once" in struggles[0].text
    assert not [d for d in drafts if d.kind == "mastered"]


def test_flagged_and_gap_turns_are_struggles() -> None:
    drafts = distill_turns(
        [
            turn("What is osmosis?", flagged=True, topic="osmosis"),
            turn("What are black holes?", band="gap", knowledge_gap=True, topic="black holes"),
        ]
    )
    texts = {d.topic: d.text for d in drafts if d.kind == "struggle"}
    assert "flagged" in texts["osmosis"]
    assert "beyond the course material" in texts["black holes"]


def test_a_models_mastery_claims_are_dropped_and_struggles_need_evidence() -> None:
    rules = distill_turns([turn("What is osmosis?", flagged=True, topics=("osmosis",))])
    claimed = [
        MemoryDraft("mastered", "Knows photosynthesis well", "photosynthesis"),
        MemoryDraft("struggle", "Found osmosis confusing", "osmosis"),
        MemoryDraft("struggle", "Struggles with gravity", "gravity"),
        MemoryDraft("takeaway", "Osmosis moves water across a membrane", "osmosis"),
    ]
    kept = validated(claimed, rules)
    assert [(d.kind, d.topic) for d in kept] == [("struggle", "osmosis"), ("takeaway", "osmosis")]
    assert kept[0].evidence and kept[0].evidence[0]["kind"] == "flagged"


def test_stated_preference_without_the_classifier_uses_the_pattern() -> None:
    assert preferences_in("I learn best with diagrams. What is a cell?") == [
        "I learn best with diagrams."
    ]
    drafts = distill_turns([turn("Please explain with more examples: what is a vector?")])
    assert any(d.kind == "preference" for d in drafts)


def test_takeaways_are_capped() -> None:
    subjects = ["photosynthesis", "mitosis", "osmosis", "gravity", "magnetism", "erosion"]
    turns = [turn(f"What is {s}?", topic=s) for s in subjects]
    assert sum(d.kind == "takeaway" for d in distill_turns(turns)) == 3


def test_first_sentence_skips_hedges() -> None:
    text = "Based on the available materials, yes. The heart pumps blood through the body [T2]."
    assert first_sentence(text) == "The heart pumps blood through the body."


def test_a_reply_to_small_talk_teaches_nothing() -> None:
    """ "thanks!" is answered in kind by the gateway (answered_by "social"): no takeaway of it,
    as a thank-you once became "thanks: We thank Julian Eisenschlos ..." """
    drafts = distill_turns(
        [
            turn("What does mitosis produce?", topics=("mitosis",)),
            turn("thanks!", topics=("thanks",), answered_by="social"),
        ]
    )
    assert [(d.kind, d.topic) for d in drafts] == [("takeaway", "mitosis")]
