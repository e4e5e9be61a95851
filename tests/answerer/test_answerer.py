"""Follow-up questions without a model, and the offline answerer answering in the question's
form (lists, numbers, comparisons, definitions), from sources written here."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from lectern_answerer import (
    MODEL_PATH,
    NO_READER_MODEL_PATH,
    QUESTION_SIGNALS,
    SIGNALS,
    AnswerModel,
    Logistic,
    OfflineAnswerer,
    answer_model,
    extract_answer,
    question_form,
    source_units,
    states_number,
    unit_signals,
)
from lectern_common.generation import ChatMessage, GenerationRequest, SourceText, TextDelta
from lectern_common.text import is_follow_up, resolve_follow_up, split_sentences, terms

MITOSIS = SourceText(
    label="T1",
    text=(
        "Mitosis is usually described in four stages:\n"
        "1. Prophase: chromosomes condense.\n"
        "2. Metaphase: chromosomes line up in the middle.\n"
        "3. Anaphase: sister chromatids are pulled apart.\n"
        "4. Telophase: two new nuclei form.\n\n"
        "Mitosis is different from meiosis. Mitosis produces two identical diploid cells, "
        "while meiosis produces four genetically different haploid cells. "
        "A full cell cycle takes about 24 hours in human cells."
    ),
)
PHOTO = SourceText(
    label="T2",
    text="Photosynthesis happens in two connected stages. Light reactions make ATP.",
)


def answer_text(question: str, *sources: SourceText) -> str:
    return extract_answer(question=question, sources=list(sources)).render()


def test_question_forms() -> None:
    assert question_form("What backward filters does nanojit apply?") == "list"
    assert question_form("What are the stages of mitosis?") == "list"
    assert question_form("How long does a cell cycle take?") == "number"
    assert question_form("What is the risk of gonadoblastoma?") == "number"
    assert question_form("How does mitosis differ from meiosis?") == "comparison"
    assert question_form("What is a trace tree?") == "definition"
    assert question_form("Why do leaves change colour?") == "general"


def test_a_list_question_gets_the_list() -> None:
    text = answer_text("What are the stages of mitosis?", MITOSIS, PHOTO)
    for stage in ("Prophase", "Metaphase", "Anaphase", "Telophase"):
        assert stage in text
    assert "Photosynthesis" not in text
    # the introduction brings its list, item by item
    assert text.startswith("Mitosis is usually described in four stages [T1]:")
    assert "\n- Prophase: chromosomes condense [T1]." in text


def test_a_number_question_gets_the_number() -> None:
    text = answer_text("How long does a human cell cycle take?", MITOSIS, PHOTO)
    assert "24 hours" in text
    assert states_number("about 24 hours") and not states_number("see Table 1")
    assert not states_number("as described earlier.8")
    # names with a digit in them are no quantity; a speedup or a dose is
    assert not states_number("benchmarks that use recursion: 3d-cube, 3draytrace")
    assert not states_number("it calls the trace T16 through CFOL041")
    assert states_number("a 2x-20x speedup") and states_number("20mg daily")


def test_a_list_introduction_is_not_quoted_without_its_list() -> None:
    cycle = SourceText(
        label="T1",
        text="A human cell cycle takes about 24 hours, of which mitosis lasts about one hour.",
    )
    stages = SourceText(label="T2", text="Mitosis proceeds through four stages:")
    picked = extract_answer(
        question="How long does mitosis last?", sources=[cycle, stages], similarities=[0.6, 0.6]
    )
    text = picked.render()
    assert "one hour" in text
    assert "four stages" not in text


def test_citations_end_sentences_even_after_footnote_markers() -> None:
    source = SourceText(
        label="T1", text="Turner syndrome affects about 1 in 2500 live female births.12"
    )
    text = answer_text("How common is Turner syndrome among female births?", source)
    assert text == "Turner syndrome affects about 1 in 2500 live female births [T1]."


def test_follow_up_questions_carry_the_topic() -> None:
    assert is_follow_up("What are its side effects?")
    assert is_follow_up("And how long does the treatment last?")
    assert not is_follow_up("What are the side effects of tamoxifen?")
    earlier = ["What is tamoxifen used for?"]
    resolved = resolve_follow_up("What are its side effects?", earlier)
    assert resolved == "What are its side effects? (tamoxifen used)"
    # a follow-up of a follow-up still reaches the first topic
    chain = ["What is tamoxifen used for?", "What are its side effects?"]
    assert "tamoxifen" in resolve_follow_up("How long do they last?", chain)
    assert resolve_follow_up("What are the stages of mitosis?", earlier) == (
        "What are the stages of mitosis?"
    )


async def test_the_offline_answerer_resolves_a_follow_up_from_the_conversation() -> None:
    messages = [
        ChatMessage(role="user", content="What does mitosis produce?"),
        ChatMessage(role="assistant", content="Two identical cells [T1]."),
        ChatMessage(role="user", content="And what are its stages?"),
    ]
    pieces = [
        chunk.text
        async for chunk in OfflineAnswerer().stream(
            GenerationRequest(system="", messages=messages, sources=[PHOTO, MITOSIS])
        )
        if isinstance(chunk, TextDelta)
    ]
    text = "".join(pieces)
    assert "Prophase" in text and "Telophase" in text and "Photosynthesis" not in text


def test_a_table_row_answers_alone_with_its_header() -> None:
    warn = SourceText(
        label="T1",
        text=(
            "Company | City | No. Of | Layoff/Closure\n"
            "Symantec Corporation | Mountain View | 60 | Layoff Permanent\n"
            "KLA-Tencor Corporation | Milpitas | 213 | Layoff Permanent\n"
            "Boeing Company | Long Beach | 56 | Layoff Unknown at this time"
        ),
    )
    text = answer_text("How many employees did KLA-Tencor lay off in Milpitas?", warn)
    assert "Company: KLA-Tencor Corporation; City: Milpitas; No. Of: 213" in text
    assert "Symantec" not in text and "Boeing" not in text


def test_a_definition_is_the_sentence_that_defines_not_a_caption_naming_it() -> None:
    caption = SourceText(label="T1", text="Table 1 Clinical features in Turner syndrome")
    review = SourceText(
        label="T2",
        text=(
            "Delayed diagnosis of Turner syndrome is still seen in 20% of cases. Turner "
            "syndrome (TS) is a condition in girls and women with a lack of one sex chromosome."
        ),
    )
    picked = extract_answer(
        question="What is Turner syndrome?", sources=[caption, review],
        similarities=[0.82, 0.4, 0.6],
    )  # fmt: skip
    assert "lack of one sex chromosome" in picked.render()
    assert "Table 1" not in picked.render()


def test_a_definition_by_condition_defines_the_word_after_its_verb() -> None:
    from lectern_answerer.forms import defines

    assert defines("Ein Raum X heißt hausdorffsch, wenn es je zwei", terms("Raum hausdorffsch"))
    assert defines("a) f heißt stetig :⇔ f−1(U) ∈ TX.", terms("Abbildung f stetig"))
    assert not defines("f heißt Homöomorphismus, wenn f stetig ist", terms("Abbildung f stetig"))
    assert defines("A space is called compact if every cover has a finite subcover", ["compact"])
    assert not defines("A male is called a drake and the female is called a duck", ["duck"])


def test_german_definitions_and_sentences_cut_by_a_line_break() -> None:
    assert question_form("Wann heißt ein topologischer Raum kompakt?") == "definition"
    assert question_form("Wann beginnt die Vorlesung?") == "number"
    notes = SourceText(
        label="T1",
        text=(
            "Sei X ein topologischer Raum.\n\n"
            "Ein topologischer Raum X heißt kompakt, wenn jede offene Überdeckung von X\n\n"
            "eine endliche Teilüberdeckung besitzt.\n\n"
            "Jeder kompakte Raum ist beschränkt."
        ),
    )
    text = answer_text("Wann heißt ein topologischer Raum kompakt?", notes)
    assert "offene Überdeckung von X eine endliche Teilüberdeckung besitzt" in text


def test_a_definition_by_condition_need_not_name_its_subject_as_the_question_does() -> None:
    # the question says "eine Teilmenge A"; the notes name it by its symbol, "A ⊆ X"
    notes = SourceText(
        label="T1",
        text="Sei X ein Raum. A ⊆ X heißt abgeschlossen, wenn X \\ A offen ist.",
    )
    other = SourceText(label="T2", text="Für jeden topologischen Raum X gilt: idX ist stetig.")
    picked = extract_answer(
        question="Wann heißt eine Teilmenge A eines topologischen Raums abgeschlossen?",
        sources=[notes, other],
        similarities=[0.3, 0.47, 0.7],
        without={"off_topic"},  # which sentence answers, whatever the refusal decides
    )
    assert picked.cited == ["T1"]
    assert "X \\ A offen" in picked.render()


def test_the_best_sentence_introducing_a_list_brings_the_list_in_any_form() -> None:
    book = SourceText(
        label="T1",
        text=(
            "Can you apply the techniques we describe?\n\n"
            "By the end of this chapter, you should be able to . . .\n\n"
            "• Define what an inductive argument is.\n\n"
            "• Decide when to use an inductive argument.\n\n"
            "• Describe mathematical induction via an analogy."
        ),
    )
    other = SourceText(
        label="T2",
        text="In the next chapter, we will explore concepts needed to prove induction.",
    )
    question = "What should students be able to do by the end of the induction chapter?"
    assert question_form(question) == "general"
    text = extract_answer(question=question, sources=[book, other]).render()
    assert text.startswith("By the end of this chapter, you should be able to [T1]:\n- Define")
    assert "- Describe mathematical induction via an analogy [T1]." in text


def test_an_item_introducing_nested_items_brings_them_and_not_its_siblings() -> None:
    # a slide's bullets, set out as a PDF gives them: sub-items under an item with a colon
    slide = SourceText(
        label="T1",
        text=(
            "• After the editors agree on the final draft, remove all annotations from it:\n\n"
            "– Line numbers\n\n"
            "– Headers and footers\n\n"
            "• Ensure a two-column format for the summary page"
        ),
    )
    question = "Which annotations should be removed once the editors agree on a draft?"
    text = extract_answer(question=question, sources=[slide]).render()
    assert "- Line numbers [T1]." in text and "- Headers and footers [T1]." in text
    assert "two-column" not in text


def test_lines_a_pdf_set_apart_are_one_sentence_again() -> None:
    page = SourceText(
        label="T1",
        text=(
            "In this case, s(t) = 0 represents the time\n\n"
            "at which the back of the car is at the garage door, so\n\n"
            "s(0) = −4 is the starting position of the car, 4 feet inside\n\n"
            "the garage.\n\n"
            "a. Determine the velocity of the car when s(t) = 0.\n\n"
            "Exercises\n\n"
            "The position of a bird is given by s(t) = 3t."
        ),
    )
    assert split_sentences(page.text) == [
        "In this case, s(t) = 0 represents the time at which the back of the car is at the "
        "garage door, so s(0) = −4 is the starting position of the car, 4 feet inside the "
        "garage.",
        "Determine the velocity of the car when s(t) = 0.",
        "Exercises",
        "The position of a bird is given by s(t) = 3t.",
    ]
    text = answer_text("Where is the car at its starting position?", page)
    assert "4 feet inside the garage [T1]." in text


def test_answers_cite_the_source_that_answers_not_every_source_near_it() -> None:
    best = SourceText(label="T1", text="Mitosis produces two identical daughter cells.")
    near = SourceText(label="T2", text="Cells divide in several ways, and mitosis is one.")
    picked = extract_answer(
        question="What does mitosis produce?", sources=[best, near], similarities=[0.8, 0.45]
    )
    assert picked.cited == ["T1"]


def test_a_footnote_number_after_the_stop_still_ends_the_sentence() -> None:
    source = SourceText(
        label="T1",
        text=(
            "Storing ovarian tissue was studied in 57 girls.48 This report concluded that at "
            "the age of 13 years girls should be counselled about fertility options."
        ),
    )
    picked = extract_answer(
        question="At what age should girls be counselled about fertility?", sources=[source]
    )
    best = max(picked.sentences, key=lambda s: s.score)
    assert best.text.startswith("This report concluded")
    # the sentence before it is one of its own, its footnote marker dropped before the citation
    assert "57 girls [T1]. This report concluded" in picked.render()


def test_a_question_in_the_text_does_not_hide_the_answer_after_it() -> None:
    source = SourceText(
        label="T1",
        text=(
            "Draw two lines across a sheet of paper. How many regions are there after "
            "drawing two intersecting lines? Two intersecting lines divide the sheet into "
            "4 regions."
        ),
    )
    picked = extract_answer(
        question="How many regions are there after drawing two intersecting lines?",
        sources=[source],
    )
    assert "4 regions" in picked.render()


def test_a_comparison_cites_another_source_only_when_it_answers_nearly_as_well() -> None:
    both = SourceText(
        label="T1",
        text="Mitosis produces two identical cells, while meiosis produces four different cells.",
    )
    near = SourceText(label="T2", text="Mitosis and meiosis were first observed in the 1880s.")
    picked = extract_answer(
        question="How does mitosis differ from meiosis?",
        sources=[both, near],
        similarities=[0.8, 0.5],
    )
    assert picked.cited == ["T1"]


def test_another_source_is_cited_only_for_question_terms_the_answer_lacks() -> None:
    """The second source scores nearly as well as the first (it repeats the question's words)
    but adds none of them: it is not cited; a source that adds a term the answer lacks is, and
    so is one that scores as well as the best (a tie the model cannot break)."""
    answer = SourceText(
        label="T1",
        text=(
            "Fat bytecodes have two advantages: fewer bytecodes means lower dispatch cost, and "
            "bigger implementations give the compiler more opportunities to optimize."
        ),
    )
    echo = SourceText(
        label="T2",
        text="This retains the advantages of fat bytecodes while avoiding their problems.",
    )
    picked = extract_answer(
        question="What are the advantages of fat bytecodes?",
        sources=[answer, echo],
        similarities=[0.84, 0.75],
    )
    assert picked.cited == ["T1"]
    tied = extract_answer(
        question="What are the advantages of fat bytecodes?",
        sources=[answer, echo],
        similarities=[0.84, 0.84],
    )
    assert tied.cited == ["T1", "T2"]
    other = SourceText(
        label="T2", text="Fat bytecodes also cut the interpreter's dispatch overhead in loops."
    )
    picked = extract_answer(
        question="What are the advantages of fat bytecodes in loops?",
        sources=[answer, other],
        similarities=[0.6, 0.99],
    )
    assert set(picked.cited) == {"T1", "T2"}


def test_the_rows_under_a_caption_answer_what_the_caption_names() -> None:
    """The caption matches the question, its table's header row does not: the row is about
    what the caption names, and a decimal at its end is no footnote marker."""
    source = SourceText(
        label="T1",
        text=(
            "A uniform table\n\nHeader 0.0 | Header 0.1 | Header 0.2\n"
            "Cell 1.0 | Cell 1.1 | Cell 1.2"
        ),
    )
    other = SourceText(label="T2", text="Headers and footers repeat on every page of a document.")
    text = answer_text("What are the headers of the uniform table?", source, other)
    assert "Header 0.0" in text
    assert "Header 0.2 [T1]" in text


def test_table_rows_that_differ_in_a_value_are_not_repeats() -> None:
    """Two rows of one table about the same company share every header and most cells; the
    one that differs in its layoff type is another fact and is quoted too."""
    source = SourceText(
        label="T1",
        text=(
            "Notice Date | Company | City | No. Of | Layoff/Closure\n"
            "10/26/2015 | BAE SYSTEMS | San Francisco | 2 | Layoff Unknown at this time\n"
            "10/26/2015 | BAE SYSTEMS | San Francisco | 163 | Layoff Temporary\n"
            "10/29/2015 | Vishay Siliconix | Santa Clara | 292 | Layoff Permanent"
        ),
    )
    text = answer_text("What kind of layoff did BAE Systems report in San Francisco?", source)
    assert "Layoff Unknown" in text
    assert "Layoff Temporary" in text
    assert "Vishay" not in text


def test_another_form_of_a_word_the_answer_holds_is_not_a_new_term() -> None:
    answer = SourceText(
        label="T1",
        text="In einem topologischer Raum heißt A abgeschlossen, wenn X \\ A offen ist.",
    )
    other = SourceText(label="T2", text="Für jeden topologischen Raum X ist idX stetig.")
    picked = extract_answer(
        question="Wann heißt eine Teilmenge eines topologischen Raums abgeschlossen?",
        sources=[answer, other],
        similarities=[0.6, 0.75],
        without={"off_topic"},  # which source is cited, whatever the refusal decides
    )
    assert picked.cited == ["T1"]


def test_the_second_best_sentence_brings_the_one_that_goes_on_about_it() -> None:
    source = SourceText(
        label="T1",
        text=(
            "Doug starts in the yard of house #1, looking for bread. He loves bread, and he "
            "goes searching through everyone's yards to find more bread. These yards are all "
            "along Induction Street in Math Town, numbered 1, 2, 3 and so on."
        ),
    )
    picked = extract_answer(
        question="Where does Doug the duck search for bread?",
        sources=[source],
        similarities=[0.7, 0.58, 0.31],
    )
    assert "Induction Street" in picked.render()


def test_sources_that_do_not_speak_of_the_question_do_not_answer_it() -> None:
    """A book that shouts "Offside!" in a hockey match does not answer a question on the
    offside rule in football; the same book answers one on offside in hockey. The sources
    must hold two of the question's terms in a sentence (of three terms or more), and with
    an embedder the fitted refusal decides beyond that: however close in meaning the
    embedder puts a sentence holding one term, it does not answer."""
    hockey = SourceText(
        label="T1",
        text=(
            "Simultaneously a second player showed his head over the ice-bank and shouted "
            '"Offside!" Simultaneously also, the puck hit him in the face. It was hard to '
            "stop laughing."
        ),
    )
    football = extract_answer(
        question="What is the offside rule in football?", sources=[hockey], similarities=[0.3, 0.1]
    )
    assert not football.supported
    assert football.render().startswith("I could not find anything")
    # every term of the question in some source, never two in one sentence: however close
    # in meaning the embedder puts the sentences, they speak of something else
    games = SourceText(
        label="T2",
        text="Football is not played on the ice. The first rule of tobogganing is to steer.",
    )
    for similarity in (0.5, 0.9):
        spread = extract_answer(
            question="What is the offside rule in football?",
            sources=[hockey, games],
            similarities=[similarity] * 4,
        )
        assert not spread.supported
    lexical_only = extract_answer(
        question="What is the offside rule in football?", sources=[hockey]
    )
    assert not lexical_only.supported
    hockey_question = "Who shouted offside when the puck hit him in the face?"
    assert extract_answer(question=hockey_question, sources=[hockey]).supported
    assert extract_answer(
        question=hockey_question, sources=[hockey], similarities=[0.7, 0.6]
    ).supported
    assert extract_answer(question="What is offside?", sources=[hockey]).supported


PORTS = SourceText(
    label="T1",
    text=(
        "Well-known services listen on fixed port numbers. HTTP uses TCP port 80 and HTTPS "
        "uses TCP port 443. DNS answers queries on port 53."
    ),
    score=0.8,
)


def test_the_fitted_refusal_refuses_what_the_sources_do_not_say() -> None:
    """A near miss shares the material's words (port, number) but names what no source holds
    (SNMP): refused. The question the material answers is answered."""
    near_miss = extract_answer(
        question="What port number does the network management protocol SNMP listen on?",
        sources=[PORTS],
        similarities=[0.3, 0.35, 0.25],
    )
    assert not near_miss.supported
    answered = extract_answer(
        question="Which port does HTTPS use?", sources=[PORTS], similarities=[0.35, 0.75, 0.3]
    )
    assert answered.supported and "443" in answered.render()


@pytest.mark.parametrize("reads", [True, False])
def test_the_shipped_models_are_fitted_on_this_answerers_signals(
    reads: bool, tmp_path: Path
) -> None:
    model = answer_model(reads)
    data = json.loads((MODEL_PATH if reads else NO_READER_MODEL_PATH).read_text())
    assert data["fitted_on"].startswith("bench/answers/dev")
    assert set(data["signals"]) <= set(SIGNALS)
    assert len(model.unit.weights) == len(data["signals"])
    assert model.refusal is not None
    assert set(data["refusal"]["signals"]) <= set(QUESTION_SIGNALS)
    # the model with the reader reads: its signals are among those it was fitted on
    assert model.reads == reads
    assert ("reader" in data["signals"]) == reads
    # a model fitted on signals this answerer does not make is refused, not silently misread
    stale = tmp_path / "model.json"
    stale.write_text(json.dumps({**data, "signals": [*data["signals"][:-1], "retired"]}))
    with pytest.raises(ValueError, match="does not make"):
        AnswerModel.load(stale)
    # the probability follows the weights: a unit stating the answer outranks one that does not
    units = source_units([PORTS])
    signals = unit_signals(
        "Which port does HTTPS use?", "general", units,
        [Counter(terms(u.text)) for u in units], [0.35, 0.75, 0.3], sources=[PORTS],
        readings=[-4.0, 5.0, -6.0] if reads else None,
    )  # fmt: skip
    scores = model.score(signals)
    assert int(np.argmax(scores)) == 1 and 0.0 < float(scores.min()) < float(scores.max()) < 1.0


def test_a_missing_word_that_is_rare_in_common_use_marks_a_question_the_material_lacks() -> None:
    """A paraphrase brings common words no source holds ("often"); a question about what the
    material does not cover names it, and such names are rare words ("SNMP", "Herfindahl")."""
    from lectern_answerer.signals import missing_rarity

    held = {t[:5] for t in terms(PORTS.text)}
    assert missing_rarity("Which port number does HTTPS use?", held) == 0.0
    assert missing_rarity("How often is port 443 used by HTTPS?", held) < 0.25
    assert missing_rarity("Which port does SNMP use?", held) == 1.0
    assert missing_rarity("What is the Herfindahl index of HTTPS ports?", held) == 1.0
    # identifiers with digits are names of things the material may spell otherwise
    assert missing_rarity("What does port 8080 or X25 carry under HTTPS?", held) == 0.0


def test_a_law_is_defined_by_the_sentence_that_states_it() -> None:
    """A law is asked for by its name ("What is the first law of motion?") and answered by
    the sentence that states it ("Newton's first law says that ..."), not by one that only
    uses it; what follows "of" may be left to the context, and a possessive name may open
    the sentence."""
    lesson = SourceText(
        label="T1",
        text=(
            "Newton's first law says that an object stays at rest, or keeps moving at a "
            "constant speed in a straight line, unless a resultant force acts on it."
        ),
    )
    method = SourceText(
        label="T2",
        text=(
            "To predict the motion, first find all the forces acting on it. If their sum is "
            "zero, the first law says the motion does not change."
        ),
    )
    units = source_units([lesson, method])
    signals = unit_signals(
        "What is the first law of motion?", "definition", units,
        [Counter(terms(u.text)) for u in units], [0.6, 0.35, 0.55], sources=[lesson, method],
    )  # fmt: skip
    opens = signals[:, SIGNALS.index("opens_with_subject")]
    assert opens.tolist() == [1.0, 0.0, 0.0]


def test_a_definition_from_another_source_is_cited_and_leads_the_answer() -> None:
    """The demo course's "What is the first law of motion?": the top source only uses the law
    ("If it is zero, the first law says the motion does not change") and holds every term of
    the question, so another source adds none; the one that states the law is cited anyway,
    and the answer opens with it."""
    using = SourceText(
        label="T1",
        text=(
            "To predict how an object will move, first find all the forces acting on it. If "
            "the resultant force is zero, the first law says the motion does not change."
        ),
        score=0.73,
    )
    stating = SourceText(
        label="T2",
        text=(
            "Newton's first law says that an object stays at rest, or keeps moving at a "
            "constant speed in a straight line, unless a resultant force acts on it."
        ),
        score=0.66,
    )
    picked = extract_answer(
        question="What is the first law of motion?", sources=[using, stating],
        similarities=[0.45, 0.6, 0.62],
    )  # fmt: skip
    assert picked.render().startswith("Newton's first law says that an object stays at rest")
    assert "T2" in picked.cited


def test_a_table_whose_row_labels_are_set_as_items_is_read_by_row() -> None:
    """A caption, a header with an empty first cell, rows whose labels a PDF set as items
    ("- Same Row | 32.1 | 2.8") and a last row a chunk's end cut short: still one table."""
    text = (
        "Table 7: Ablation study of proposed attention biases.\n | ALL | SEQ\n"
        "TABLEFORMERBASE | 62.1 | 38.4\n- Same Row | 32.1 | 2.8\n- Same Column | 62.1 | 37.7\n"
        "- Header to Othe"
    )
    units = split_sentences(text)
    assert "- Same Row; ALL: 32.1; SEQ: 2.8" in units
    assert "- Same Column; ALL: 62.1; SEQ: 37.7" in units
    assert not any(u.startswith("Same Row") for u in units)


def test_a_defining_phrase_says_what_the_term_means() -> None:
    from lectern_answerer.forms import defining_frame

    duck = terms("duck")
    assert defining_frame("Duck is the common name for numerous species of waterfowl", duck)
    assert defining_frame("We call such a sequence of instructions a trace.", terms("trace"))
    assert defining_frame("The trace of A is defined to be the sum of its diagonal", ["trace"])
    assert defining_frame("Osmosis refers to the movement of water across a membrane", ["osmosis"])
    assert defining_frame("Ein solcher Raum wird als kompakt bezeichnet", ["raum"])
    assert not defining_frame("A duckling is a young duck in downy plumage", duck)
    assert not defining_frame("Ducks are generally smaller than swans and geese", duck)
    # the phrase must be about the subject: another term's definition is not its
    assert not defining_frame("A drake refers to a male; ducks swim", duck)


def test_the_unit_that_says_what_a_term_means_ranks_first_for_a_definition() -> None:
    # the opening of a Wikipedia article, as the answer benchmark's duck question met it:
    # every sentence names a duck after a copula; the one that defines the word is the answer
    page = SourceText(
        label="T1",
        text=(
            "A duckling is a young duck in downy plumage or baby duck. "
            "Duck is the common name for numerous species of waterfowl in the family Anatidae. "
            "Ducks are generally smaller and shorter-necked than swans and geese. "
            "Ducks are mostly aquatic birds, and may be found in both fresh and sea water."
        ),
    )
    question = "What is a duck?"
    units = source_units([page])
    bags = [Counter(terms(u.text)) for u in units]
    signals = unit_signals(
        question, question_form(question), units, bags, [0.6] * len(units), sources=[page],
        readings=[2.0] * len(units),  # the reader told apart from nothing: read alike
    )  # fmt: skip
    best = int(np.argmax(answer_model(reads=True).score(signals)))
    assert units[best].text.startswith("Duck is the common name")


def _question_row(**values: float) -> np.ndarray:
    row = np.zeros(len(QUESTION_SIGNALS))
    for name, value in values.items():
        row[QUESTION_SIGNALS.index(name)] = value
    return row


def test_a_question_below_a_floor_is_refused_whatever_the_refusal_says() -> None:
    """The refusal's floors: no answerable development question had its best unit that far
    in meaning from it, or its best source scored that low, so the question is refused even
    where the logistic refusal, weighing a high lexical share, would answer. The re-ranker's
    floor holds only for scored sources."""
    always = Logistic((0.0,), 10.0, (0,))  # a refusal that always answers
    floors = (
        (QUESTION_SIGNALS.index("best_semantic"), 0.44),
        (QUESTION_SIGNALS.index("rerank_top"), 0.41),
    )
    model = AnswerModel(Logistic((1.0,), 0.0), always, 0.5, floors=floors)
    assert model.answers(_question_row(best_semantic=0.6, rerank_top=0.5, best_lexical=0.6))
    assert not model.answers(_question_row(best_semantic=0.33, rerank_top=0.5, best_lexical=0.6))
    assert not model.answers(_question_row(best_semantic=0.6, rerank_top=0.3))
    # sources with no re-ranker score: no floor on it
    assert model.answers(_question_row(best_semantic=0.6, rerank_top=0.0, rerank_missing=1.0))
    # the shipped model keeps its floor on meaning
    shipped = json.loads(MODEL_PATH.read_text())["refusal"]["floors"]
    assert set(shipped) == {"best_semantic"}
    assert answer_model(True).floors == ((QUESTION_SIGNALS.index("best_semantic"), 0.442),)


WADERS = [
    SourceText(
        label="T1",
        text=(
            "Many shorebirds fly south for the winter. Flocks of waders from Siberia spend the "
            "southern summer on the mudflats of Australia, where they feed on worms and small "
            "crabs before the long flight back."
        ),
        score=0.45,
    ),
    SourceText(
        label="T2",
        text=(
            "The capital letters of the bird's Latin name are printed in bold. Banding stations "
            "in Australia report the birds they catch each season."
        ),
        score=0.47,
    ),
]


async def test_a_general_question_the_sources_only_name_is_refused() -> None:
    """The product's offline answerer (its embedder and reader) asked what the capital of
    Australia is, over passages on shorebirds that hold "capital" and "Australia": refused by
    the floor on meaning (no sentence comes as close to the question as one did for every
    answerable development question), where the logistic refusal, weighing the full lexical
    match, answers. Asked what the passages say, it answers."""
    from lectern_common import reading
    from lectern_common.embeddings import LocalEmbedder
    from lectern_common.settings import BaseServiceSettings

    answerer = OfflineAnswerer(
        embedder=LocalEmbedder(BaseServiceSettings()), reader=reading.packaged(threads=1)
    )
    capital = await answerer.answer(question="What is the capital of Australia?", sources=WADERS)
    assert not capital.supported
    summer = await answerer.answer(
        question="Where do waders from Siberia spend the southern summer?", sources=WADERS
    )
    assert summer.supported and "mudflats of Australia" in summer.render()
