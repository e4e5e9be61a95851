"""Table rows to read: generated (question, row) groups that teach the reader the form the
answerer shows it a table row in.

The reading sets hold no tables, and the reader scores the rows that answer a question low
(docs/benchmarks.md: a row of a layoff report that names the company and the city the
question asks about, at -5.0, under the month totals). This writes tables the way the
product reads them (``lectern_common.text.table_rows``: a caption and header line, then
each row as "header: cell; header: cell; ..."), fills them with names taken from SQuAD's
training articles (the proper nouns of their paragraphs: people, places, organisations)
and with numbers, dates and categories of many forms, and asks questions of the kinds a
student asks of a table:

- a cell by its row's label and its column ("What is the revenue of X?", "How many
  employees did X have?");
- a cell by two keys, the row's label and another cell ("... X in Y?"), against rows that
  share one of them;
- a row by a value it holds ("Which company has 412 employees?");
- and questions the table does not answer (every row a negative): a label no row holds, and,
  off by default, a column it lacks (real headers are terse, "No. Of" for employees, and a
  reader taught that the question's noun must be a header scored such rows lower still).

Every other row of the table is a candidate against the answering one: rows share their
headers, so only reading the label and the column tells them apart. Nothing here is taken
from the project's answer set; the headers are generic measures of many fields.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass

from reading_data import READING, Group, _rows, squad_titles_held_out

#: generic column headers by field: (header as the table prints it, the noun a question
#: uses, the value's form)
MEASURES: tuple[tuple[str, str, str], ...] = (
    ("Revenue ($m)", "revenue", "money"),
    ("Net income ($m)", "net income", "money"),
    ("Staff", "staff", "count"),
    ("Workers", "workers", "count"),
    ("Members", "members", "count"),
    ("Branches", "branches", "count"),
    ("Sites", "sites", "count"),
    ("Units sold", "units sold", "count"),
    ("Market share (%)", "market share", "percent"),
    ("Growth (%)", "growth", "percent"),
    ("Share of total", "share of the total", "percent"),
    ("Population (mn)", "population", "decimal"),
    ("Area (km2)", "area", "count"),
    ("Density per km2", "density", "decimal"),
    ("Founded", "founding year", "year"),
    ("Year opened", "opening year", "year"),
    ("Start date", "start date", "date"),
    ("Deadline", "deadline", "date"),
    ("Accuracy", "accuracy", "score"),
    ("Error rate (%)", "error rate", "percent"),
    ("Mean score", "mean score", "score"),
    ("Precision", "precision", "fraction"),
    ("Recall", "recall", "fraction"),
    ("Parameters (M)", "number of parameters", "decimal"),
    ("Runtime (s)", "runtime", "decimal"),
    ("Speedup", "speedup", "ratio"),
    ("Patients", "patients", "count"),
    ("Median age", "median age", "age"),
    ("Prevalence (%)", "prevalence", "percent"),
    ("Dose (mg)", "dose", "count"),
    ("Cases", "cases", "count"),
    ("Deaths", "deaths", "count"),
    ("Price ($)", "price", "money"),
    ("Weight (kg)", "weight", "decimal"),
    ("Length (m)", "length", "decimal"),
    ("Height (m)", "height", "decimal"),
    ("Capacity", "capacity", "count"),
    ("Votes", "votes", "count"),
    ("Seats", "seats", "count"),
    ("Budget (bn)", "budget", "decimal"),
    ("Students", "students", "count"),
    ("Rank", "rank", "rank"),
)
#: columns of categories: (header, the preposition a question puts before a value)
CATEGORIES: tuple[tuple[str, str], ...] = (
    ("City", "in"), ("Country", "in"), ("Region", "in"), ("Location", "at"),
    ("Status", "with status"), ("Type", "of type"), ("Category", "in category"),
    ("Period", "in"), ("Setting", "under"), ("Group", "in group"),
)  # fmt: skip
#: what a row's label names, by the first header (empty: a table whose first column is
#: unlabelled, as many printed tables are)
LABELS: tuple[str, ...] = (
    "", "Name", "Organisation", "Company", "Model", "Method", "Entity", "Site", "Team",
    "Institution", "Item",
)  # fmt: skip
STATUSES = (
    "Open", "Closed", "Pending", "Active", "Permanent", "Temporary", "Planned", "Complete",
    "High", "Low", "Medium", "Yes", "No", "Partial",
)  # fmt: skip
MONTHS = (
    "January", "February", "March", "April", "May", "June", "July", "August", "September",
    "October", "November", "December",
)  # fmt: skip
CAPTIONS = (
    "Table {n}: {a} and {b} by {label}", "Table {n}. Summary of {a}", "{a} of selected {label}s",
    "Table {n}: Comparison of {a}, {b} and more", "Overview", "Table {n}",
)  # fmt: skip

_PROPER = re.compile(r"(?<=[a-z,;] )((?:[A-Z][a-z]{2,}\s){0,2}[A-Z][a-z]{3,})\b")


@dataclass
class Table:
    caption: str
    headers: list[str]  # headers[0] may be "" (an unlabelled first column)
    rows: list[list[str]]
    kinds: list[str]  # the form of each column's values ("label", "category", a measure's)
    nouns: list[str]  # what a question calls each column

    def context(self) -> str:
        """The caption and header line, as ``text.table_context`` writes them."""
        line = " | ".join(self.headers)
        if not self.headers[0]:
            line = "| " + " | ".join(self.headers[1:])
        return f"{self.caption} {line}".strip() if self.caption else line

    def row_text(self, row: Sequence[str]) -> str:
        """One row as ``text.table_rows`` writes it."""
        return "; ".join(f"{h}: {v}" if h else v for h, v in zip(self.headers, row, strict=True))

    def reader_text(self, row: Sequence[str]) -> str:
        """What the answerer's reader reads of the row (``answerer.reader_texts``)."""
        return f"{self.context()}\n{self.row_text(row)}"


def proper_names(rng: random.Random) -> list[str]:
    """Proper nouns of SQuAD's training articles (not those held out), deduplicated."""
    rows = _rows(READING / "squad-v1.1-dev.jsonl")
    held = squad_titles_held_out(r["title"] for r in rows)
    seen: dict[str, None] = {}
    for context in dict.fromkeys(r["context"] for r in rows if r["title"] not in held):
        for match in _PROPER.finditer(context):
            seen.setdefault(match.group(1), None)
    names = list(seen)
    rng.shuffle(names)
    return names


def _value(rng: random.Random, kind: str) -> str:
    """A value of a measure's form."""
    if kind == "count":
        n = int(10 ** rng.uniform(0.5, 5))
        return f"{n:,}" if rng.random() < 0.7 else str(n)
    if kind == "money":
        return f"{rng.uniform(1, 5000):,.1f}"
    if kind == "percent":
        v = rng.uniform(0.1, 99)
        return f"{v:.1f}" + ("%" if rng.random() < 0.4 else "")
    if kind == "decimal":
        return f"{rng.uniform(0.1, 900):.{rng.choice((1, 2))}f}"
    if kind == "year":
        return str(rng.randint(1850, 2024))
    if kind == "date":
        if rng.random() < 0.5:
            return f"{rng.randint(1, 12):02d}/{rng.randint(1, 28):02d}/{rng.randint(1995, 2024)}"
        return f"{rng.randint(1, 28)} {rng.choice(MONTHS)} {rng.randint(1995, 2024)}"
    if kind == "score":
        return f"{rng.uniform(20, 99):.1f}"
    if kind == "fraction":  # ".733" as slides print it, or "0.733"
        value = f"{rng.uniform(0.05, 0.99):.3f}"
        return value.lstrip("0") if rng.random() < 0.3 else value
    if kind == "ratio":
        return f"{rng.uniform(1.1, 30):.1f}x"
    if kind == "age":
        return str(rng.randint(2, 80))
    if kind == "rank":
        return str(rng.randint(1, 50))
    raise ValueError(kind)


def make_table(rng: random.Random, names: list[str]) -> Table:
    """A table of 4 to 9 rows: a label column, maybe a category, 2 to 6 measures."""
    label = rng.choice(LABELS)
    measures = rng.sample(MEASURES, rng.randint(2, 6))
    category = rng.choice(CATEGORIES) if rng.random() < 0.5 else None
    n_rows = rng.randint(4, 9)
    headers = [label]
    kinds = ["label"]
    nouns = [label.lower() or "entry"]
    if category:
        headers.append(category[0])
        kinds.append("category")
        nouns.append(category[0].lower())
    for header, noun, kind in measures:
        headers.append(header)
        kinds.append(kind)
        nouns.append(noun)
    labels = [names.pop() for _ in range(n_rows)]
    pool: list[str] = []
    if category:
        if category[0] in ("City", "Country", "Region", "Location"):
            pool = [names.pop() for _ in range(rng.randint(2, 3))]
        elif category[0] == "Period":
            pool = rng.sample([f"{m} {y}" for m in MONTHS for y in (2015, 2016)], 3)
        else:
            pool = rng.sample(STATUSES, 3)
        # half the time two rows share a label (and differ in the category): the label alone
        # does not pick the row, as a company's two sites in a layoff report
        if rng.random() < 0.5:
            labels[1] = labels[0]
    rows = []
    for index in range(n_rows):
        row = [labels[index]]
        if category:
            row.append(pool[index % len(pool)])
        row += [_value(rng, kind) for _, _, kind in measures]
        rows.append(row)
    caption = ""
    if rng.random() < 0.6:
        a, b = rng.sample([m[1] for m in measures], 2)
        caption = rng.choice(CAPTIONS).format(
            n=rng.randint(1, 12), a=a, b=b, label=(label or "entry").lower()
        )
    return Table(caption, headers, rows, kinds, nouns)


_ASK_MEASURE = (
    "What is the {noun} of {label}?",
    "What {noun} does {label} have?",
    "What was {label}'s {noun}?",
    "What {noun} is given for {label}?",
    "According to the table, what is the {noun} for {label}?",
)
_ASK_COUNT = ("How many {noun} does {label} have?", "How many {noun} did {label} report?")
_ASK_YEAR = ("In what year was {label} {verb}?", "When was {label} {verb}?")
_ASK_TWO_KEYS = (
    "What is the {noun} of {label} {prep} {other}?",
    "How much {noun} did {label} have {prep} {other}?",
    "What {noun} does the table give for {label} {prep} {other}?",
)
_ASK_BY_VALUE = ("Which {what} has a {noun} of {value}?", "Which {what} had {value} {noun}?")


def _question(rng: random.Random, table: Table, row: list[str], column: int) -> str:
    """A question the cell ``row[column]`` answers."""
    noun, kind, label = table.nouns[column], table.kinds[column], row[0]
    has_category = table.kinds[1] == "category"
    shared_label = sum(1 for r in table.rows if r[0] == label) > 1
    if has_category and (shared_label or rng.random() < 0.4):
        prep = next(p for h, p in CATEGORIES if h == table.headers[1])
        return rng.choice(_ASK_TWO_KEYS).format(noun=noun, label=label, prep=prep, other=row[1])
    if kind == "year" and rng.random() < 0.5:
        verb = "founded" if "found" in noun else "opened"
        return rng.choice(_ASK_YEAR).format(label=label, verb=verb)
    if kind == "count" and rng.random() < 0.5:
        return rng.choice(_ASK_COUNT).format(noun=noun, label=label)
    return rng.choice(_ASK_MEASURE).format(noun=noun, label=label)


def table_groups(
    seed: int,
    count: int,
    *,
    by_value: float = 0.1,
    absent_column: float = 0.1,
    absent_label: float = 0.1,
) -> list[Group]:
    """``count`` groups over generated tables, the same for the same seed: a share
    ``by_value`` asking a row by a value, ``absent_column`` asking for a column the table
    lacks, ``absent_label`` for a row it lacks (no row answers these two), the rest answered
    by one row."""
    rng = random.Random(seed)
    names = proper_names(rng)
    out: list[Group] = []
    while len(out) < count:
        if len(names) < 40:
            names = proper_names(rng)
        table = make_table(rng, names)
        texts = [table.reader_text(r) for r in table.rows]
        roll = rng.random()
        measured = [i for i, k in enumerate(table.kinds) if k not in ("label", "category")]
        if roll < 1 - by_value - absent_column - absent_label:
            at = rng.randrange(len(table.rows))
            row = table.rows[at]
            if sum(1 for r in table.rows if r[0] == row[0]) > 1 and table.kinds[1] != "category":
                continue
            question = _question(rng, table, row, rng.choice(measured))
            labels = [int(i == at) for i in range(len(texts))]
        elif roll < 1 - absent_column - absent_label:
            column = rng.choice(measured)
            at = rng.randrange(len(table.rows))
            value = table.rows[at][column]
            if sum(1 for r in table.rows if r[column] == value) > 1:
                continue
            what = table.nouns[0] if table.headers[0] else "entry"
            question = rng.choice(_ASK_BY_VALUE).format(
                what=what, noun=table.nouns[column], value=value
            )
            labels = [int(i == at) for i in range(len(texts))]
        elif roll < 1 - absent_label:  # a column the table lacks
            absent = [m for m in MEASURES if m[0] not in table.headers]
            noun = rng.choice(absent)[1]
            row = rng.choice(table.rows)
            question = rng.choice(_ASK_MEASURE).format(noun=noun, label=row[0])
            labels = [0] * len(texts)
        else:  # a label no row holds
            stranger = names.pop()
            column = rng.choice(measured)
            question = rng.choice(_ASK_MEASURE).format(noun=table.nouns[column], label=stranger)
            labels = [0] * len(texts)
        order = list(range(len(texts)))
        rng.shuffle(order)
        out.append(
            Group(
                question,
                [texts[i] for i in order],
                [labels[i] for i in order],
                "sentence",
                "tables",
            )
        )
    return out


if __name__ == "__main__":
    for group in table_groups(13, 6):
        print(group.question)
        for text, label in zip(group.texts, group.labels, strict=True):
            print(f"  {label} {text[:160]!r}")
