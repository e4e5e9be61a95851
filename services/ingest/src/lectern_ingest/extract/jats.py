"""JATS XML journal articles (PubMed Central and most publishers): the article's title, its
abstract and its sections, nested as the article nests them, with tables and figure
captions; the reference list is left out (apparatus, not content).

Parsed with lxml with entity resolution and network access off (no XXE), and a size bound
from the upload limit upstream.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lectern_common.errors import BadInputError
from lectern_ingest.cleaning import clean_text
from lectern_ingest.extract.model import Block, Extraction, ListExtraction, group_blocks
from lectern_ingest.extract.text import _outline

#: sections whose content is not the article's (kept out of the index)
_SKIPPED = {"ref-list", "back", "fn-group", "ack", "glossary", "app-group"}


def _text(element: Any) -> str:
    return clean_text(" ".join("".join(element.itertext()).split()))


def _local(element: Any) -> str:
    tag = element.tag if isinstance(element.tag, str) else ""
    return tag.rsplit("}", 1)[-1]


def _blocks_of(element: Any, level: int, out: list[Block]) -> None:
    for child in element:
        name = _local(child)
        if name in _SKIPPED:
            continue
        if name == "sec":
            title = next((c for c in child if _local(c) == "title"), None)
            if title is not None and _text(title):
                out.append(Block(kind="heading", text=_text(title), level=level))
            _blocks_of(child, level + 1, out)
        elif name == "p":
            text = _text(child)
            if text:
                out.append(Block(kind="paragraph", text=text))
        elif name == "table-wrap":
            caption = next((c for c in child if _local(c) == "caption"), None)
            rows = [
                " | ".join(_text(cell) for cell in row if _local(cell) in ("th", "td"))
                for row in child.iter()
                if _local(row) == "tr"
            ]
            if rows:
                named = _text(caption) if caption is not None else None
                out.append(Block(kind="table", text="\n".join(rows), caption=named))
        elif name == "fig":
            caption = next((c for c in child if _local(c) == "caption"), None)
            if caption is not None and _text(caption):
                out.append(Block(kind="caption", text=_text(caption)))
        elif name in ("list", "list-item", "disp-quote", "boxed-text"):
            _blocks_of(child, level, out)


def open_jats(path: Path) -> Extraction:
    """A JATS article as headings, paragraphs, tables and captions in reading order."""
    from lxml import etree  # type: ignore[import-untyped]

    parser = etree.XMLParser(
        resolve_entities=False, no_network=True, load_dtd=False, huge_tree=False
    )
    try:
        root = etree.parse(str(path), parser).getroot()
    except etree.XMLSyntaxError as exc:
        raise BadInputError(f"unreadable JATS XML: {exc}", reason="corrupt") from exc
    title_element = next((e for e in root.iter() if _local(e) == "article-title"), None)
    title = _text(title_element) if title_element is not None else None
    blocks: list[Block] = []
    if title:
        blocks.append(Block(kind="heading", text=title, level=1))
    for abstract in (e for e in root.iter() if _local(e) == "abstract"):
        blocks.append(Block(kind="heading", text="Abstract", level=2))
        paragraphs = [e for e in abstract.iter() if _local(e) == "p"]
        blocks.extend(Block(kind="paragraph", text=_text(p)) for p in paragraphs if _text(p))
        break
    body = next((e for e in root if _local(e) == "body"), None)
    if body is not None:
        _blocks_of(body, 2, blocks)
    if not any(b.kind == "paragraph" for b in blocks):
        raise BadInputError("the JATS article has no text", reason="no_text")
    return ListExtraction(
        mime="application/vnd.jats+xml", units=group_blocks(blocks), title=title,
        outline=_outline(blocks),
    )  # fmt: skip
