"""The units of a turn's sources, the answerer's grain: every sentence, list item and table
row, with where it is; what the reader reads of each; and which unit holds the answer span
the re-ranker's reader marked in its source."""

from __future__ import annotations

from collections.abc import Container, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lectern_common.text import split_units

if TYPE_CHECKING:
    from lectern_common.generation import SourceText


@dataclass(frozen=True)
class SourceUnit:
    """A sentence or list item of a source, with where it is."""

    source_index: int
    position: int
    paragraph: int
    text: str
    item: bool
    introduces_list: bool
    depth: int = 0  # 1 for an item, 2 for an item of an item (another bullet), ...
    context: str = ""  # a table row's caption and header
    caption: str = ""  # a table row's caption alone (the lines above its header)


@dataclass(frozen=True)
class UnitReadings:
    """What the answerer's reader said of a turn's units, in ``source_units`` order: each
    unit's logit (the lowest one read for the units it did not read) and, when the reader
    has a span head, how far each read unit's best answer span beats "no answer here" in it
    (SQuAD 2.0's null-score difference; None for the units not read)."""

    logits: list[float]
    margins: list[float | None] | None = None


def source_units(sources: Sequence[SourceText]) -> list[SourceUnit]:
    """Every unit worth quoting: sentences of 3+ words, and list items of any length."""
    out: list[SourceUnit] = []
    for source_index, source in enumerate(sources):
        units = split_units(source.text)
        markers: list[str] = []  # the bullets of the list under way, outermost first
        captions: dict[int, str] = {}  # a table's caption, by paragraph, once its header came
        for position, (paragraph, text, marker, context) in enumerate(units):
            if context and paragraph not in captions and " | " in text:
                captions[paragraph] = " ".join(
                    t for p, t, _, c in units[:position] if p == paragraph and c
                )
            if not marker:
                markers = []
            elif marker in markers:
                del markers[markers.index(marker) + 1 :]
            else:
                markers.append(marker)
            if not marker and len(text.split()) < 3:
                continue
            following = units[position + 1] if position + 1 < len(units) else None
            introduces = text.rstrip().endswith(":") or (
                not marker and following is not None and bool(following[2])
            )
            out.append(
                SourceUnit(
                    source_index,
                    position,
                    paragraph,
                    text,
                    bool(marker),
                    introduces,
                    len(markers),
                    context,
                    captions.get(paragraph, "") if context else "",
                )
            )
    return out


def candidate_sentences(sources: Sequence[SourceText]) -> list[tuple[int, int, str]]:
    """(source index, position, text) of every unit worth quoting."""
    return [(u.source_index, u.position, u.text) for u in source_units(sources)]


def reader_texts(units: Sequence[SourceUnit], *, without: Container[str] = ()) -> list[str]:
    """What the reader reads of each unit: a table row after its table's caption and header
    (what the row's cells are), any other unit as it is."""
    if "row_context" in without:
        return [u.text for u in units]
    return [f"{u.context}\n{u.text}" if u.context else u.text for u in units]


def is_table_row(text: str) -> bool:
    """A table row as ``text.table_rows`` writes it: "header: cell; header: cell; ..."."""
    return text.count("; ") >= 2 and text.count(": ") >= 3


def is_heading(unit: SourceUnit) -> bool:
    """A heading or a caption: a few words without a stop, not a list item."""
    return not unit.item and len(unit.text.split()) < 6 and unit.text.rstrip()[-1:] not in ".!?:;"


def loose(text: str) -> str:
    """``text`` with its spacing made single and its case folded (to find one text in
    another whatever the line breaks)."""
    return " ".join(text.split()).casefold()


def answer_holders(sources: Sequence[SourceText], units: Sequence[SourceUnit]) -> dict[int, float]:
    """The unit (index into ``units``) that holds each source's answer span (``answer``, the
    re-ranker's reader's), with the span's margin: of the units whose text holds the span's
    words, the last that opens at or before the span in the source's text (units are in text
    order, a table row rendered as its cells); the first that holds the span when none can be
    placed. A span longer than a unit falls to the unit it starts in."""
    out: dict[int, float] = {}
    for source_index, source in enumerate(sources):
        answer = source.answer
        if answer is None:
            continue
        span = loose(source.text[answer.start : answer.end])
        if not span:
            continue
        mine = [i for i, u in enumerate(units) if u.source_index == source_index]
        holding = [i for i in mine if span in loose(units[i].text)]
        if not holding:  # a span across units: the unit it starts in holds its first words
            head = " ".join(span.split()[:3])
            holding = [i for i in mine if head and loose(units[i].text).endswith(head)] or [
                i for i in mine if head in loose(units[i].text)
            ]
        if not holding:
            continue
        chosen = holding[0]
        if len(holding) > 1:  # the same words twice: the unit whose text opens before the span
            cursor, opened = 0, {}
            lowered = source.text.casefold()
            for i in mine:
                first = " ".join(units[i].text.split()[:4]).casefold()
                at = lowered.find(first, cursor) if first else -1
                if at >= 0:
                    opened[i], cursor = at, at + 1
            before = [i for i in holding if opened.get(i, answer.start + 1) <= answer.start]
            chosen = before[-1] if before else holding[0]
        out[chosen] = answer.margin
    return out


def read_margins(margins: Sequence[float | None]) -> dict[int, float]:
    """The units (index into ``units``) the answerer's reader read with its span head, with
    their margins."""
    return {i: m for i, m in enumerate(margins) if m is not None}


def has_answer_spans(sources: Sequence[SourceText]) -> bool:
    """Whether the re-ranker's reader marked an answer span in any of the sources."""
    return any(s.answer is not None for s in sources)


def answer_source(sources: Sequence[SourceText]) -> int | None:
    """The source whose answer span beats its null score by most, if any has a span."""
    margins = {i: s.answer.margin for i, s in enumerate(sources) if s.answer is not None}
    return max(margins, key=lambda i: margins[i]) if margins else None
