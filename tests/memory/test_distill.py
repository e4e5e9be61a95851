"""The deterministic distiller (pure)."""

from hypothesis import given
from hypothesis import strategies as st

from lectern_memory.distill import (
    TurnSignal,
    distill_turns,
    first_sentence,
    preferences_in,
    rephrased_indices,
)

ANSWER = "Mitosis produces two identical daughter cells from one parent cell [T1]. It has phases."


def turn(question: str, band: str = "high", **kw: object) -> TurnSignal:
    return TurnSignal(question=question, answer=ANSWER, band=band, confidence=0.9, **kw)  # type: ignore[arg-type]


def test_low_confidence_turn_is_a_struggle_with_its_reason() -> None:
    drafts = distill_turns([turn("How does meiosis differ from mitosis?", band="low")])
    kinds = [d.kind for d in drafts]
    assert kinds == ["struggle"]
    assert "meiosis" in drafts[0].text
    assert "low confidence" in drafts[0].text


def test_rephrased_question_marks_struggle_even_when_answered_well() -> None:
    drafts = distill_turns(
        [
            turn("What is the Krebs cycle?"),
            turn("Can you explain the Krebs cycle again, what is it?"),
        ]
    )
    struggles = [d for d in drafts if d.kind == "struggle"]
    assert struggles and "more than once" in struggles[0].text
    assert not [d for d in drafts if d.kind == "mastered" and d.topic == struggles[0].topic]


def test_flagged_and_gap_turns_are_struggles() -> None:
    drafts = distill_turns(
        [
            turn("What is osmosis?", flagged=True, topic="osmosis"),
            turn("What are black holes?", band="gap", knowledge_gap=True, topic="black holes"),
        ]
    )
    texts = {d.topic: d.text for d in drafts if d.kind == "struggle"}
    assert "flagged" in texts["osmosis"]
    assert "no course material" in texts["black holes"]


def test_confident_turn_gives_mastered_and_a_cited_free_takeaway() -> None:
    drafts = distill_turns([turn("What does mitosis produce?", topic="mitosis")])
    assert [d.kind for d in drafts] == ["mastered", "takeaway"]
    assert "[T1]" not in drafts[1].text
    assert drafts[1].text.startswith("mitosis: Mitosis produces two identical daughter cells")


def test_stated_preference_is_remembered() -> None:
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


@given(st.lists(st.text(min_size=1, max_size=60), max_size=8))
def test_rephrased_indices_are_within_range_and_symmetric(questions: list[str]) -> None:
    found = rephrased_indices(questions)
    assert all(0 <= i < len(questions) for i in found)
    # appending a question can only add repeats, never remove earlier ones
    assert found <= rephrased_indices([*questions, "photosynthesis chlorophyll light"])
