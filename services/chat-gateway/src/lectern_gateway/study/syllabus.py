"""The syllabus explorer: a tenant's material as modules, documents and sections in order.

Sections come from the chunks' heading paths, in chunk order, with their page ranges and
chunk counts. Headings detected from font sizes include figure labels ("Region 1 split",
"Move 7"); where a level of a document is numbered ("2.2.1", "2.2.2"), an unnumbered heading
among numbered siblings is such a label and its chunks stay in the section before it.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from lectern_common.text import split_sentences

_NUMBERED = re.compile(r"^\s*(?:\d+(?:\.\d+)*\.?|[A-Z]\.|[IVX]+\.)\s+\S")
OVERVIEW_CHARS = 280


def folded_paths(paths: Sequence[tuple[str, ...]]) -> list[tuple[str, ...]]:
    """Each chunk's section path (in document order) with figure-label headings folded
    into the section before them (see the module docstring)."""
    numbered_levels: set[tuple[tuple[str, ...], int]] = set()
    for path in paths:
        for depth, heading in enumerate(path):
            if _NUMBERED.match(heading):
                numbered_levels.add((path[:depth], depth))
    out: list[tuple[str, ...]] = []
    last_kept: dict[tuple[str, ...], tuple[str, ...]] = {}
    for path in paths:
        folded = path
        for depth, heading in enumerate(path):
            parent = path[:depth]
            if (parent, depth) in numbered_levels and not _NUMBERED.match(heading):
                folded = last_kept.get(parent, parent)
                break
        for depth in range(len(folded)):
            last_kept[folded[:depth]] = folded
        out.append(folded)
    return out


def overview(text: str, heading: str | None) -> str:
    """A section's first sentences (up to ~280 characters), or its heading."""
    picked: list[str] = []
    size = 0
    for sentence in split_sentences(text):
        flat = " ".join(sentence.split())
        if len(flat.split()) < 4 or (heading and flat == heading):
            continue
        if picked and size + len(flat) > OVERVIEW_CHARS:
            break
        picked.append(flat)
        size += len(flat) + 1
        if size >= OVERVIEW_CHARS:
            break
    summary = " ".join(picked)
    if len(summary) > OVERVIEW_CHARS + 80:
        summary = summary[:OVERVIEW_CHARS].rsplit(" ", 1)[0] + " …"
    return summary or (heading or "")


@dataclass
class SectionOutline:
    """One section of a document, as the explorer lists it."""

    path: list[str]
    page_start: int | None
    page_end: int | None
    chunk_count: int
    first_chunk_id: uuid.UUID
    topics: list[str] = field(default_factory=list)
    overview: str = ""

    @property
    def title(self) -> str:
        """The section's own heading ("" for text before the first heading)."""
        return self.path[-1] if self.path else ""

    @property
    def level(self) -> int:
        """Depth of the heading (1 = top level; 0 for text before any heading)."""
        return len(self.path)


def outline(chunks: Sequence[Any]) -> list[SectionOutline]:
    """Sections of one document from its content chunks in order (rows with ``id``,
    ``section_path``, ``page_start``, ``page_end``, ``text``, ``topic_tags``)."""
    paths = folded_paths([tuple(c["section_path"] or ()) for c in chunks])
    sections: list[SectionOutline] = []
    for chunk, path in zip(chunks, paths, strict=True):
        if sections and sections[-1].path == list(path):
            section = sections[-1]
        else:
            section = SectionOutline(
                path=list(path), page_start=chunk["page_start"], page_end=chunk["page_end"],
                chunk_count=0, first_chunk_id=chunk["id"],
                overview=overview(chunk["text"], path[-1] if path else None),
            )  # fmt: skip
            sections.append(section)
        section.chunk_count += 1
        for page in (chunk["page_start"], chunk["page_end"]):
            if page is None:
                continue
            section.page_start = page if section.page_start is None else min(
                section.page_start, page)  # fmt: skip
            section.page_end = page if section.page_end is None else max(section.page_end, page)
        for tag in chunk["topic_tags"] or ():
            if tag not in section.topics:
                section.topics.append(tag)
    return _rolled_up(_with_headings(sections))


def _with_headings(sections: list[SectionOutline]) -> list[SectionOutline]:
    """Headings with no text of their own ("2.2.3 Questions & Exercises" above its
    subsections) listed before their first subsection."""
    out: list[SectionOutline] = []
    listed: set[tuple[str, ...]] = set()
    for section in sections:
        for depth in range(1, len(section.path)):
            prefix = tuple(section.path[:depth])
            if prefix not in listed:
                listed.add(prefix)
                out.append(
                    SectionOutline(
                        path=list(prefix), page_start=section.page_start,
                        page_end=section.page_end, chunk_count=0,
                        first_chunk_id=section.first_chunk_id, overview=section.overview,
                    )
                )  # fmt: skip
        listed.add(tuple(section.path))
        out.append(section)
    return out


def _rolled_up(sections: list[SectionOutline]) -> list[SectionOutline]:
    """A section's pages and chunk count include its subsections (those that follow it)."""
    own = [s.chunk_count for s in sections]
    for index, section in enumerate(sections):
        if not section.path:
            continue
        depth = len(section.path)
        for later, count in zip(sections[index + 1 :], own[index + 1 :], strict=True):
            if len(later.path) <= depth or later.path[:depth] != section.path:
                break
            section.chunk_count += count
            if later.page_end is not None:
                section.page_end = max(section.page_end or later.page_end, later.page_end)
            if section.page_start is None:
                section.page_start = later.page_start
    return sections
