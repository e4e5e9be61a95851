"""Tables by cell, and the answer leading with the answer: a question over a table is answered
from its best row, after the table's caption, with the cell the question asks for marked in
the chunk; in prose, the best sentence's passage opens its source's part of the answer."""

from __future__ import annotations

from lectern_answerer import ScoredSentence, SourceUnit, extract_answer, source_units
from lectern_answerer.compose import best_first
from lectern_answerer.tables import asked_cell, cell_span, cited_cell, row_cells, with_caption
from lectern_common.generation import SourceText
from lectern_eval.answer_set import answer_lead

DOSES = (
    "Table 2 Recommended adult doses\n"
    "Drug | Dose | Route\n"
    "Aspirin | 75 mg | oral\n"
    "Heparin | 5000 units | injection\n"
    "Warfarin | 5 mg | oral"
)
OUTLETS = (
    "Table 6.2: Numbers of Retail Food Outlets\n"
    " | population 1995 (mn) | number of food outlets 1996/7 (000) | inhabitants per outlet\n"
    "Germany | 81.9 | 73.6 | 1111\n"
    "Italy | 57.3 | 114.6 | 500"
)


def test_a_row_is_read_as_its_header_cell_pairs() -> None:
    assert row_cells("Drug: Heparin; Dose: 5000 units; Route: injection") == [
        ("Drug", "Heparin"), ("Dose", "5000 units"), ("Route", "injection"),
    ]  # fmt: skip
    assert row_cells("Italy; population: 57.3") == [("", "Italy"), ("population", "57.3")]


def test_the_cell_asked_for_is_under_the_header_the_question_names() -> None:
    row = "Drug: Heparin; Dose: 5000 units; Route: injection"
    assert asked_cell("What dose of heparin is given?", row) == ("Dose", "5000 units")
    assert asked_cell("By which route is heparin given?", row) == ("Route", "injection")
    # the cell the question names is the row's label, never the answer
    assert asked_cell("Which drug is given by injection?", row) == ("Drug", "Heparin")
    assert asked_cell("Is heparin safe in pregnancy?", row) is None
    # a row the question names nothing of is not the row it asks about
    assert asked_cell("What dose of warfarin is given?", row) is None


def test_a_number_of_the_question_names_no_cell_unless_it_is_the_whole_cell() -> None:
    """ "Table 6.2" says 6 and 2, which the cell 114.6 also holds: it is still the answer."""
    row = (
        "Italy; population 1995 (mn): 57.3; number of food outlets 1996/7 (000): 114.6; "
        "inhabitants per outlet: 500"
    )
    question = "How many food outlets did Italy have in 1996/7 according to Table 6.2?"
    assert asked_cell(question, row) == ("number of food outlets 1996/7 (000)", "114.6")
    assert asked_cell("Which country had 114.6 thousand food outlets?", row) != (
        "number of food outlets 1996/7 (000)", "114.6",
    )  # fmt: skip


def test_the_cell_is_found_in_its_own_rows_line() -> None:
    """5 mg is Warfarin's dose; the row asked about is Aspirin's, whose 75 mg holds "5 mg"
    too: the mark lands on the cell of the row that answered."""
    start, end = cell_span(DOSES, "Drug: Warfarin; Dose: 5 mg; Route: oral", "5 mg") or (0, 0)
    assert DOSES[start:end] == "5 mg"
    assert DOSES.index("Warfarin") < start
    start, end = cell_span(DOSES, "Drug: Aspirin; Dose: 75 mg; Route: oral", "oral") or (0, 0)
    assert DOSES[start:end] == "oral" and start < DOSES.index("Heparin")
    assert cell_span(DOSES, "Drug: Insulin; Dose: 4 units; Route: injection", "4 units") is None


def test_a_cited_row_marks_its_cell_through_caption_and_citation_marks() -> None:
    sentence = (
        "Table 6.2: Numbers of Retail Food Outlets — Italy; population 1995 (mn): 57.3; "
        "number of food outlets 1996/7 (000): 114.6; inhabitants per outlet: 500 [T1]."
    )
    found = cited_cell("How many food outlets did Italy have in 1996/7?", sentence, OUTLETS)
    assert found is not None
    start, end, header = found
    assert OUTLETS[start:end] == "114.6" and header == "number of food outlets 1996/7 (000)"
    assert (
        cited_cell("How many food outlets did Italy have?", "Italy had 114.6 [T1].", OUTLETS)
        is None
    )


def test_a_caption_leads_the_row_unless_it_is_a_paragraph() -> None:
    row = "Drug: Heparin; Dose: 5000 units"
    assert with_caption(row, "Table 2 Recommended adult doses.") == (
        "Table 2 Recommended adult doses — Drug: Heparin; Dose: 5000 units"
    )
    assert with_caption(row, "") == row
    assert with_caption(row, " ".join(["word"] * 40)) == row


def test_a_table_answer_leads_with_its_best_row_after_the_caption() -> None:
    answer = extract_answer(
        question="What is the dose of heparin?", sources=[SourceText(label="T1", text=DOSES)]
    )
    text = answer.render()
    assert text.startswith("Table 2 Recommended adult doses — Drug: Heparin; Dose: 5000 units")
    assert "5000 units" in answer_lead(text)
    units = source_units([SourceText(label="T1", text=DOSES)])
    rows = [u for u in units if "; " in u.text]
    assert len(rows) == 3
    assert {u.caption for u in rows} == {"Table 2 Recommended adult doses"}


def _sentence(position: int, text: str, score: float, source: int = 0) -> ScoredSentence:
    return ScoredSentence(f"T{source + 1}", source, position, text, 0.5, None, score)


def _unit(position: int, text: str, source: int = 0) -> SourceUnit:
    return SourceUnit(source, position, 0, text, False, False)


def test_the_best_sentence_opens_its_sources_part_and_what_refers_back_keeps_its_antecedent() -> (
    None
):
    before = _sentence(3, "Cells divide in two ways.", 0.0)
    best = _sentence(4, "Mitosis makes two identical cells.", 0.9)
    after = _sentence(5, "It takes about an hour.", 0.0)
    other = _sentence(9, "Meiosis makes four cells.", 0.5)
    elsewhere = _sentence(1, "Mitosis was named in 1882.", 0.4, source=1)
    chosen = [before, best, after, other, elsewhere]
    units = [_unit(s.position, s.text, s.source_index) for s in chosen]
    assert best_first(chosen, units) == [best, after, before, other, elsewhere]
    # a best sentence that goes on from the one before it is read after it
    refers = _sentence(4, "It makes two identical cells.", 0.9)
    assert best_first([before, refers, after], units) == [before, refers, after]


def test_rows_of_a_table_go_best_first() -> None:
    rows = [
        _sentence(2, "Drug: Aspirin; Dose: 75 mg; Route: oral", 0.3),
        _sentence(3, "Drug: Heparin; Dose: 5000 units; Route: injection", 0.8),
        _sentence(4, "Drug: Warfarin; Dose: 5 mg; Route: oral", 0.5),
    ]
    units = [_unit(s.position, s.text) for s in rows]
    assert [s.position for s in best_first(rows, units)] == [3, 4, 2]
