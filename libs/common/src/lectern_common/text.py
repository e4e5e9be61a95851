"""Text as every service reads it: words, stopwords and stems; sentences and the units of a
source; follow-up questions without a model; what is embedded for a chunk.

One copy for everyone (issue 48). The tokeniser, the stopword list, the stemmer and the
sentence splitter are the offline answerer's: its fitted models (``answerer_model.json``)
were fitted on features computed with them, so they stay as they were. A module that needs
another behaviour asks for it with a parameter of the one function (``words(joined_by=...,
digits=...)``, ``SentenceRules``), never with a copy of its own.

A follow-up ("What are its side effects?", "And how long does it last?") names its topic
only through a pronoun or by ellipsis. Without a language model to rewrite it, the topic is
carried over from the conversation: the content words of the earlier question(s) it follows
are added to it, so retrieval and the offline answerer look for the right thing.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

# ---------------------------------------------------------------------------- words

#: function words of English and German, and the words a question asks with ("explain",
#: "tell", "mean"): never a term of a text
STOPWORDS = frozenset(
    """a about above after again against all also am an and any are as at be because been
    before being below between both but by can could did do does doing down during each few
    for from further had has have having he her here hers herself him himself his how i if in
    into is it its itself just me more most my myself no nor not now of off on once only or
    other our ours ourselves out over own same she should so some such than that the their
    theirs them themselves then there these they this those through to too under until up
    very was we were what when where which while who whom why will with would you your yours
    yourself yourselves explain describe tell please give mean means der die das ein eine
    einer eines einem einen und oder ist sind was wie wer wo warum welche welcher welches
    von zu im in den dem des mit auf für nicht auch es sich""".split()
)


@functools.cache
def _word_pattern(joined_by: str, digits: bool) -> re.Pattern[str]:
    run = r"[^\W_]+" if digits else r"[^\W\d_]+"
    if not joined_by:
        return re.compile(run)
    return re.compile(rf"{run}(?:[{re.escape(joined_by)}]{run})*")


def words(text: str, *, joined_by: str = "", digits: bool = True) -> list[str]:
    """The words of ``text`` in order: runs of letters and digits.

    ``joined_by`` holds characters that join two runs into one word: "'’" keeps "don't" and
    "Newton’s" whole (a topic's words), "'’-" also "pair-bonds" (follow-ups, memory topics).
    With ``digits=False`` a word is letters only ("H2O" is "H" and "O", "1789" no word): for
    what names a statement or a topic, where a number is something else (conflicts compare
    numbers apart; a quiz never blanks one as a key word)."""
    return _word_pattern(joined_by, digits).findall(text)


def stem(word: str) -> str:
    """A lower-case word lightly stemmed: a plural's -s or -ies, then -ing or -ed, off
    ("studies" -> "study", "classes" -> "class", "walking" -> "walk"; "is", "bus" stay)."""
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if word.endswith("sses"):
        return word[:-2]
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        word = word[:-1]
    for suffix in ("ing", "ed"):
        if len(word) > len(suffix) + 3 and word.endswith(suffix):
            return word[: -len(suffix)]
    return word


def terms(text: str) -> list[str]:
    """Lower-cased, lightly stemmed content words of ``text`` (stopwords removed)."""
    return [stem(w) for w in words(text.lower()) if w not in STOPWORDS]


#: the letters of a term that say two terms are one word in any form (``prefix_stem``)
PREFIX_LETTERS = 5


def prefix_stem(term: str) -> str:
    """A term cut to its first five letters: the coarser stem that finds a word in any of
    its forms where ``stem`` does not ("topologischen" and "topologischer", "regularize" and
    "regularization"), as the answerer compares a question's terms with its sources'."""
    return term[:PREFIX_LETTERS]


def prefix_stems(text: str) -> set[str]:
    """The ``prefix_stem`` of every term of ``text``."""
    return {prefix_stem(t) for t in terms(text)}


# ---------------------------------------------------------------------------- sentences


@dataclass(frozen=True)
class SentenceRules:
    """Where a sentence ends: at a ``stop`` (with its ``closers``) followed by white space and
    a ``start``, at a ``hard`` stop whatever follows, and at a line break (``lines``). The
    defaults are the answerer's (``PROSE``); each field says who needs it otherwise. Fields
    that hold patterns are regular expressions."""

    #: the mark a sentence ends with: a stop, or a footnote number stuck to it ("growth.31 A")
    stop: str = r"[.!?]+|(?<=[a-z)])[.!?]\d{1,3}"
    #: what may follow the stop and still belong to the sentence: closing quotes and
    #: brackets (ingest's chunks), citation labels ("... sugar. [T1]": the gateway's check)
    closers: str = ""
    #: what the next sentence must open with, after an opening quote or bracket; "" for
    #: anything (chat messages and model answers are not always capitalised)
    start: str = r"[\"'(\[]?[A-Z0-9ÄÖÜ]"
    #: a stop that ends a sentence whatever follows ("。": Chinese and Japanese need no space)
    hard: str = ""
    #: words after which a full stop ends no sentence ("e.g.", "Dr."; ingest's chunks)
    abbreviations: frozenset[str] = frozenset()
    #: ... nor after a single letter (an initial: "J. Smith")
    initials: bool = False
    #: a line break ends a sentence (not in a chat message, where lines wrap as they come)
    lines: bool = True
    #: streaming (``final=False``): text that may still grow into a closer ("[T"), so the
    #: sentence before it is not finished yet
    pending: str = ""


#: sentences of a source's prose, as the answerer quotes them: the default
PROSE = SentenceRules()


@functools.cache
def _sentence_end(rules: SentenceRules) -> re.Pattern[str]:
    closers = f"(?:{rules.closers})*+" if rules.closers else ""
    # the end is past the white space before a sentence's start, else right after the stop
    space = rf"\s+(?={rules.start})" if rules.start else r"(?=\s|\Z)"
    soft = f"(?:{rules.stop}){closers}{space}"
    return re.compile(f"{soft}|(?:{rules.hard})" if rules.hard else soft)


def _ends(text: str, rules: SentenceRules) -> Iterator[int]:
    """Where each sentence of ``text`` ends, in order; the last one's end is not among them."""
    pattern = _sentence_end(rules)
    cut = 0
    line_start = 0
    while line_start <= len(text):
        line_end = text.find("\n", line_start) if rules.lines else -1
        stop = len(text) if line_end < 0 else line_end
        for match in pattern.finditer(text, line_start, stop):
            if (rules.abbreviations or rules.initials) and match.group().startswith("."):
                before = text[cut : match.start()].split()
                last = before[-1].lower().rstrip(".") if before else ""
                if last in rules.abbreviations or (
                    rules.initials and len(last) == 1 and last.isalpha()
                ):
                    continue
            cut = match.end()
            yield cut
        if line_end < 0:
            return
        cut = line_end + 1
        yield cut
        line_start = cut


def sentence_spans(
    text: str, *, rules: SentenceRules = PROSE, final: bool = True
) -> tuple[list[tuple[int, int]], int]:
    """The (start, end) of each sentence of ``text`` (white space around it left out), and
    where the text not yet split starts.

    With ``final`` the rest counts as a sentence too. Without it (text that is still being
    streamed) a sentence is finished only when something other than white space follows it
    that can no longer grow into a closer (``rules.pending``): the gateway checks each
    sentence of a model's answer as soon as it is finished."""
    spans: list[tuple[int, int]] = []
    pending = re.compile(rules.pending) if rules.pending else None
    cut = 0
    for end in _ends(text, rules):
        if not final:
            after = text[end:].lstrip(" \t")
            if not after or (pending is not None and pending.fullmatch(after)):
                return spans, cut
        _add_span(spans, text, cut, end)
        cut = end
    if final:
        _add_span(spans, text, cut, len(text))
        cut = len(text)
    return spans, cut


def _add_span(spans: list[tuple[int, int]], text: str, start: int, end: int) -> None:
    raw = text[start:end]
    stripped = raw.strip()
    if stripped:
        offset = start + len(raw) - len(raw.lstrip())
        spans.append((offset, offset + len(stripped)))


def sentences(text: str, *, rules: SentenceRules = PROSE) -> list[str]:
    """The sentences of ``text``, stripped (a source's paragraphs, list items and tables are
    ``split_units``'s)."""
    return [text[start:end] for start, end in sentence_spans(text, rules=rules)[0]]


_TERMINAL = re.compile(r"[.!?:;)\]\"'”]\s*$")


def ends_clause(text: str) -> bool:
    """Whether ``text`` ends as a sentence or clause does (a stop, colon, semicolon, closing
    bracket or quote), rather than where a line break cut it."""
    return _TERMINAL.search(text) is not None


# ---------------------------------------------------------------------------- units of a source

#: a blank line, or a line break before a list item ("- ", "2.", "(a)") that is no table row
#: ("- Same Row | 32.1 | 2.8": a table's row labels may be set as items)
_PARAGRAPHS = re.compile(
    r"\n\s*\n|\n(?=\s*(?:[-•*▪◦–‒—]|\d{1,2}[.)]|\(?[a-z][.)])\s(?![^\n]* \| ))"
)
_ITEM_MARK = re.compile(r"^\s*(?:[-•*▪◦–‒—]|\d{1,2}[.)]|\(?[a-z][.)])\s+")
_INLINE_ITEMS = re.compile(r"\s+[-•▪◦‒]\s+")


def table_rows(paragraph: str) -> list[str]:
    """The rows of a table paragraph (lines with cells joined by " | ", header first), each as
    "header: cell; ..." so that a row answers alone; [] when the paragraph is no table."""
    lines = [line.strip() for line in paragraph.split("\n") if line.strip()]
    cells = [_cells(line) for line in lines]
    first = next((i for i, c in enumerate(cells) if len(c) > 1), len(cells))
    # a caption of up to two lines above, and one line of no cells (a row a chunk's end cut)
    body = len(lines) - first
    if first > 2 or body < 2 or sum(1 for c in cells[first:] if len(c) > 1) < body - 1:
        return []
    header = cells[first]
    rows = [" ".join(lines[i].split()) for i in range(first + 1)]  # caption and header
    for row in cells[first + 1 :]:
        if len(row) == len(header) and any(row):
            pairs = [f"{h}: {v}" if h else v for h, v in zip(header, row, strict=True) if v]
            rows.append("; ".join(pairs))
        elif any(row):
            rows.append(" | ".join(c for c in row if c))
    return rows


def _cells(line: str) -> list[str]:
    """The cells of a table line ("a | b | c"); an empty first or last cell leaves a bare
    bar at the line's end ("| population (mn) | ..." over "EU15 | 372.3 | ...")."""
    cells = [c.strip() for c in line.split(" | ")]
    if cells[0].startswith("|"):
        cells[0:1] = ["", cells[0][1:].strip()]
    if cells[-1].endswith("|") and len(cells) > 1:
        cells[-1:] = [cells[-1][:-1].strip(), ""]
    return cells


def table_context(paragraph: str) -> str:
    """A table paragraph's caption and header (what every row is about), "" for no table."""
    rows = table_rows(paragraph)
    if not rows:
        return ""
    lines = [line.strip() for line in paragraph.split("\n") if line.strip()]
    first = next(i for i, line in enumerate(lines) if len(_cells(line)) > 1)
    return " ".join(lines[: first + 1])


def _joined_lines(paragraphs: Sequence[str]) -> list[str]:
    """Paragraphs with the lines a PDF set apart put back together: one that stops mid-way
    ("... represents the time") goes on with the next when that one starts in lower case
    ("at which the back of the car ...")."""
    out: list[str] = []
    for paragraph in paragraphs:
        body = paragraph.strip()
        previous = out[-1].rstrip() if out else ""
        if (
            previous
            and body[:1].islower()
            and not ends_clause(previous)
            and not _ITEM_MARK.match(body)
            and not table_rows(previous)
        ):
            out[-1] = f"{previous} {body}"
        else:
            out.append(paragraph)
    return out


def split_units(text: str) -> list[tuple[int, str, str, str]]:
    """(paragraph, unit, item marker, context) of a source text: paragraphs and list items
    first (a line of "- a - b - c" items is split into them), then sentence ends. The marker
    is "" for a sentence, the bullet for an item ("1" for any number, "a" for any letter);
    the context of a table row is its table's caption and header ("" elsewhere)."""
    units: list[tuple[int, str, str, str]] = []
    for paragraph_index, paragraph in enumerate(_joined_lines(_PARAGRAPHS.split(text))):
        rows = table_rows(paragraph)
        if rows:
            context = table_context(paragraph)
            units.extend((paragraph_index, row, "", context) for row in rows)
            continue
        flat = " ".join(paragraph.split())
        if not flat:
            continue
        mark = _ITEM_MARK.match(flat)
        if mark:
            body = flat[mark.end() :]
            pieces = [p for p in _INLINE_ITEMS.split(body) if p.strip()] if (
                flat[0] in "-•▪◦‒") else [body]  # fmt: skip
            bullet = mark.group().strip().lstrip("(")[:1]
            marker = "1" if bullet.isdigit() else "a" if bullet.isalpha() else bullet
            units.extend((paragraph_index, p.strip(), marker, "") for p in pieces)
            continue
        units.extend((paragraph_index, s, "", "") for s in sentences(flat))
    return units


def split_sentences(text: str) -> list[str]:
    """Sentences and list items of a source text, in order."""
    return [unit for _, unit, _, _ in split_units(text)]


# ---------------------------------------------------------------------------- follow-ups

#: words that point back at something named earlier (English and German)
ANAPHORS = frozenset(
    """it its itself they them their theirs themselves he him his she her hers this these
    those es sein seine seiner seinen seinem ihr ihre ihrer ihren ihrem dies diese dieser
    dieses diesen davon dazu darin deren dessen""".split()
)
_ELLIPSIS = re.compile(
    r"^\s*(?:and|also|what about|how about|what else|und|was ist mit|und was)\b", re.IGNORECASE
)
_QUESTION_WORDS = frozenset(
    """what which who whom whose when where why how does do did is are was were can could
    should would will explain describe tell me please give list name define mean meaning
    the a an of in on at to for from by with about and or as be been being has have had
    there some any many much more most other such than that this these those it its they
    them their you your i we our my was wie wer wo warum welche welcher welches ist sind
    der die das ein eine und oder mit von zu im in den dem des common often frequent
    frequently usually typically long""".split()
)
MAX_CARRIED_WORDS = 8
#: a follow-up's words keep their apostrophes and hyphens ("don't", "pair-bonds")
_JOINERS = "'’-"


def is_follow_up(question: str) -> bool:
    """Whether a question refers back to the conversation (a pronoun, or "and ...?")."""
    if _ELLIPSIS.match(question):
        return True
    return any(w.casefold() in ANAPHORS for w in words(question, joined_by=_JOINERS))


def topic_words(text: str) -> list[str]:
    """Content words of a question (question words, pronouns and function words removed)."""
    seen: dict[str, str] = {}
    for word in words(text, joined_by=_JOINERS):
        key = word.casefold()
        if key in _QUESTION_WORDS or key in ANAPHORS or len(key) < 2 or key in seen:
            continue
        seen[key] = word
    return list(seen.values())


def resolve_follow_up(question: str, earlier_questions: Sequence[str]) -> str:
    """``question`` with the topic of the questions it follows appended, when it is a
    follow-up; unchanged otherwise. ``earlier_questions`` are the user's, oldest first."""
    if not earlier_questions or not is_follow_up(question):
        return question
    previous = resolve_follow_up(earlier_questions[-1], earlier_questions[:-1])
    present = {w.casefold() for w in words(question, joined_by=_JOINERS)}
    carried = [w for w in topic_words(previous) if w.casefold() not in present]
    if not carried:
        return question
    return f"{question.rstrip()} ({' '.join(carried[:MAX_CARRIED_WORDS])})"


#: a chunk with fewer words than this is embedded without its document's title
TITLE_OUTWEIGHS_WORDS = 30


def embedding_text(text: str, prefix: str | None, title: str | None) -> str:
    """What is embedded for a chunk (ingest) and scored against a question (re-ranker): its
    contextual prefix ("Title > Section > ...") and its text.

    A short chunk (a journal header, a copyright line) is embedded without the title: every
    chunk of the document shares it, and in a few words it would outweigh the text and make
    the chunk look like the document's best answer to any question about its topic. The
    title stays in every chunk's BM25 terms either way."""
    if prefix and title and len(text.split()) < TITLE_OUTWEIGHS_WORDS:
        key = title.strip().casefold()
        prefix = " > ".join(p for p in prefix.split(" > ") if p.strip().casefold() != key)
    return f"{prefix}\n{text}" if prefix else text
