"""HTML (trafilatura main content), Markdown and plain text extraction."""

from __future__ import annotations

import re
from pathlib import Path

from lectern_common.errors import BadInputError
from lectern_ingest.cleaning import clean_inline, clean_text, join_lines, normalize_unicode
from lectern_ingest.extract.model import (
    Block,
    Extraction,
    ListExtraction,
    OutlineEntry,
    group_blocks,
)

_ATX = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_SETEXT = re.compile(r"^(=+|-+)\s*$")
_FENCE = re.compile(r"^\s*(```|~~~)")
_TABLE_RULE = re.compile(r"^\s*\|?\s*:?-{2,}:?\s*(\|\s*:?-{2,}:?\s*)*\|?\s*$")
_LIST_ITEM = re.compile(r"^\s*(?:[-*+]|\d{1,3}[.)])\s+")
# trafilatura's Markdown keeps inline HTML and escapes: "fed with bread<sup>\[25\]</sup>"
_CITATION_SUP = re.compile(r"<sup>\s*(?:\\?\[[^\]<]{0,80}\\?\]\s*)+</sup>")
_SUPERSCRIPT = re.compile(r"<sup>([^<]{1,20})</sup>", re.IGNORECASE)
_INLINE_TAG = re.compile(r"</?(?:sup|sub|span|small|mark|u|abbr)\b[^>]*>", re.IGNORECASE)
_ESCAPED = re.compile(r"\\([\\`*_{}\[\]()#+\-.!|<>])")
_INLINE_MD = [
    (re.compile(r"!\[([^\]]*)\]\([^)]*\)"), r"\1"),
    (re.compile(r"\[([^\]]+)\]\([^)]*\)"), r"\1"),
    (re.compile(r"(\*\*|__)(.+?)\1"), r"\2"),
    (re.compile(r"(?<![\w*])\*(?!\s)(.+?)(?<!\s)\*(?![\w*])"), r"\1"),
    (re.compile(r"`([^`]+)`"), r"\1"),
]


def read_text(path: Path) -> str:
    """Decode a text file: UTF-8 (with or without BOM), UTF-16 with BOM, else Latin-1."""
    data = path.read_bytes()
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        return data.decode("utf-16", "replace")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        return data.decode("latin-1")


def _strip_inline(text: str) -> str:
    for pattern, repl in _INLINE_MD:
        text = pattern.sub(repl, text)
    return text


def _table_row(line: str) -> str:
    cells = [clean_inline(_strip_inline(c)) for c in line.strip().strip("|").split("|")]
    return " | ".join(cells)


def parse_markdown(markdown: str) -> list[Block]:
    """Markdown to blocks: ATX/setext headings, pipe tables, paragraphs, list items, code."""
    blocks: list[Block] = []
    paragraph: list[str] = []
    lines = normalize_unicode(markdown).replace("\r\n", "\n").split("\n")

    def flush() -> None:
        if paragraph:
            text = clean_text(_strip_inline(join_lines(paragraph)))
            if text:
                blocks.append(Block(kind="paragraph", text=text))
            paragraph.clear()

    i = 0
    while i < len(lines):
        line = lines[i]
        if _FENCE.match(line):
            flush()
            fence = _FENCE.match(line).group(1)  # type: ignore[union-attr]
            code: list[str] = []
            i += 1
            while i < len(lines) and not lines[i].strip().startswith(fence):
                code.append(lines[i])
                i += 1
            if any(c.strip() for c in code):
                blocks.append(Block(kind="paragraph", text="\n".join(code).strip("\n")))
            i += 1
            continue
        heading = _ATX.match(line)
        if heading:
            flush()
            text = clean_inline(_strip_inline(heading.group(2)))
            if text:
                blocks.append(Block(kind="heading", text=text, level=len(heading.group(1))))
            i += 1
            continue
        if paragraph and len(paragraph) == 1 and _SETEXT.match(line) and line.strip():
            text = clean_inline(_strip_inline(paragraph.pop()))
            level = 1 if line.strip().startswith("=") else 2
            blocks.append(Block(kind="heading", text=text, level=level))
            i += 1
            continue
        if "|" in line and i + 1 < len(lines) and _TABLE_RULE.match(lines[i + 1]):
            flush()
            rows = [_table_row(line)]
            i += 2
            while i < len(lines) and "|" in lines[i] and lines[i].strip():
                rows.append(_table_row(lines[i]))
                i += 1
            caption = None
            if (
                blocks
                and blocks[-1].kind == "paragraph"
                and blocks[-1].text.lower().startswith("table")
            ):
                caption = blocks.pop().text
            blocks.append(Block(kind="table", text="\n".join(rows), caption=caption))
            continue
        if not line.strip():
            flush()
        elif _LIST_ITEM.match(line):
            flush()
            paragraph.append(_LIST_ITEM.sub("", line, count=1))
        else:
            paragraph.append(line)
        i += 1
    flush()
    return blocks


def _outline(blocks: list[Block]) -> list[OutlineEntry]:
    return [
        OutlineEntry(level=b.level or 1, title=b.text, page=None)
        for b in blocks
        if b.kind == "heading"
    ]


def _finish(mime: str, blocks: list[Block], title: str | None) -> Extraction:
    if title is None:
        title = next((b.text for b in blocks if b.kind == "heading"), None)
    return ListExtraction(
        mime=mime, units=group_blocks(blocks), title=title, outline=_outline(blocks)
    )


def open_markdown(path: Path) -> Extraction:
    """Markdown: headings as structure."""
    return _finish("text/markdown", parse_markdown(read_text(path)), None)


def open_plain_text(path: Path) -> Extraction:
    """Plain text: paragraphs separated by blank lines."""
    text = clean_text(read_text(path))
    blocks = [Block(kind="paragraph", text=p) for p in text.split("\n\n") if p.strip()]
    return ListExtraction(mime="text/plain", units=group_blocks(blocks))


def open_html(path: Path) -> Extraction:
    """HTML: trafilatura's main content (boilerplate dropped), as Markdown for the headings."""
    import trafilatura

    html = read_text(path)
    try:
        markdown = trafilatura.extract(
            html,
            output_format="markdown",
            include_tables=True,
            include_comments=False,
            include_links=False,
            include_images=False,
            include_formatting=True,
            favor_recall=True,
        )
        metadata = trafilatura.extract_metadata(html)
    except Exception as exc:
        raise BadInputError(f"unreadable HTML: {exc}", reason="corrupt") from exc
    title = clean_inline(metadata.title) if metadata is not None and metadata.title else None
    # citation markers go, exponents stay exponents, other inline tags give up their text;
    # escapes are undone in the parsed text (before parsing "\#" could become a heading)
    markdown = _CITATION_SUP.sub("", markdown or "")
    markdown = _INLINE_TAG.sub("", _SUPERSCRIPT.sub(r"^\1", markdown))  # 10<sup>6</sup>: 10^6
    blocks = [
        Block(b.kind, _ESCAPED.sub(r"\1", b.text), level=b.level,
              caption=_ESCAPED.sub(r"\1", b.caption) if b.caption else b.caption)
        for b in parse_markdown(markdown)
    ]  # fmt: skip
    if title and not any(b.kind == "heading" and b.level == 1 for b in blocks):
        blocks.insert(0, Block(kind="heading", text=title, level=1))
    return _finish("text/html", blocks, title)
