"""A document's structure as ingest reads it (title, heading tree, chunks by kind), offline:
the same extraction, cleaning and chunking as the ingest service, without storing anything.
``lectern inspect FILE`` prints it."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from lectern_common.embeddings import GEMINI_MAX_TOKENS, LOCAL_MAX_TOKENS, local_model_path
from lectern_common.filetype import detect_mime_path
from lectern_ingest.chunking import ChunkDraft, ChunkingConfig, chunk_units, structural_prefix
from lectern_ingest.config import Settings
from lectern_ingest.extract import extract
from lectern_ingest.extract.entry_map import entry_key
from lectern_ingest.extract.model import OutlineEntry, Unit
from lectern_ingest.pipeline import chunking_config
from lectern_ingest.titles import heading_title, usable_title

PREVIEW_CHARS = 80


@dataclass(slots=True)
class DocumentStructure:
    """What ingest makes of a document, before any embedding."""

    path: Path
    mime: str
    title: str | None
    page_count: int | None
    headings: list[OutlineEntry]  # the heading tree, each with the page it opens on
    chunks: list[ChunkDraft]
    #: entries of the printed table of contents, and those no line of the text matched (so
    #: no heading of the tree stands for them)
    contents_entries: list[OutlineEntry] = field(default_factory=list)
    unmatched_entries: list[OutlineEntry] = field(default_factory=list)
    #: entries of the outline the tree follows, and those no line of the text matched
    outline_entries: list[OutlineEntry] = field(default_factory=list)
    unmatched_outline: list[OutlineEntry] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def kinds(self) -> dict[str, int]:
        """Chunks counted by kind, most first."""
        return dict(Counter(c.kind for c in self.chunks).most_common())

    def to_json(self, *, chunks: bool = False) -> str:
        """The structure as one JSON object (``chunks``: every chunk, with a preview)."""
        body: dict[str, object] = {
            "file": str(self.path),
            "mime": self.mime,
            "title": self.title,
            "pages": self.page_count,
            "headings": [{"level": h.level, "title": h.title, "page": h.page}
                         for h in self.headings],
            "chunks_by_kind": self.kinds,
            "contents_entries": len(self.contents_entries),
            "contents_entries_without_heading": [e.title for e in self.unmatched_entries],
            "contents_entries_matched_share": matched_share(
                self.contents_entries, self.unmatched_entries
            ),
            "outline_entries": len(self.outline_entries),
            "outline_entries_not_in_text": [e.title for e in self.unmatched_outline],
            "warnings": self.warnings,
        }  # fmt: skip
        if chunks:
            body["chunks"] = [chunk_summary(c) for c in self.chunks]
        return json.dumps(body, ensure_ascii=False, indent=2)

    def to_text(self, *, chunks: bool = False) -> str:
        """The structure for a person: title, heading tree with pages, chunks by kind."""
        lines = [
            f"{self.path.name} ({self.mime}, {self.page_count or '?'} pages)",
            f"title: {self.title or '(none)'}",
            "",
            "headings:" if self.headings else "headings: (none)",
        ]
        for h in self.headings:
            where = f"p{h.page}" if h.page is not None else "-"
            lines.append(f"  {where:>5}  {'  ' * (h.level - 1)}{h.title}")
        if self.contents_entries:
            found = len(self.contents_entries) - len(self.unmatched_entries)
            share = f"{found / len(self.contents_entries):.0%}"
            lines += ["", f"contents page: {found} of {len(self.contents_entries)} entries "
                          f"are headings of the tree ({share} matched in the text)"]  # fmt: skip
            lines += [f"  not found: {e.title} (p. {printed_page(e.page)})"
                      for e in self.unmatched_entries[:20]]  # fmt: skip
        if self.outline_entries:
            found = len(self.outline_entries) - len(self.unmatched_outline)
            lines += ["", f"outline: {found} of {len(self.outline_entries)} entries are lines "
                          "of the text"]  # fmt: skip
            lines += [f"  not found: {e.title} (p. {e.page})" for e in self.unmatched_outline[:20]]
        lines += ["", "chunks: " + ", ".join(f"{n} {kind}" for kind, n in self.kinds.items())]
        if chunks:
            for c in self.chunks:
                where = f"p{c.page_start}" if c.page_start is not None else (
                    f"s{c.slide}" if c.slide is not None else "-"
                )  # fmt: skip
                path = " > ".join(c.section_path)
                lines.append(f"  {where:>5} {c.kind:<10} {path}\n          {preview(c.text)}")
        lines += [f"warning: {w}" for w in self.warnings]
        return "\n".join(lines)


def chunk_summary(chunk: ChunkDraft) -> dict[str, object]:
    """A chunk's place, kind and first characters (what ``--chunks`` lists)."""
    return {
        "index": chunk.index, "kind": chunk.kind, "page_start": chunk.page_start,
        "page_end": chunk.page_end, "slide": chunk.slide, "section_path": chunk.section_path,
        "tokens": chunk.token_count, "preview": preview(chunk.text),
    }  # fmt: skip


def preview(text: str) -> str:
    """The first characters of a chunk on one line."""
    flat = " ".join(text.split())
    return flat if len(flat) <= PREVIEW_CHARS else flat[: PREVIEW_CHARS - 1] + "…"


def printed_page(page: int | None) -> str:
    """A contents entry's page as printed: front matter's in roman numbers (kept as pages
    before 1: "vii" is -993)."""
    if page is None:
        return "-"
    if page >= 0:
        return str(page)
    number, out = page + 1000, ""
    for value, letters in ((90, "xc"), (50, "l"), (40, "xl"), (10, "x"), (9, "ix"), (5, "v"),
                           (4, "iv"), (1, "i")):  # fmt: skip
        count, number = divmod(number, value)
        out += letters * count
    return out


def matched_share(entries: list[OutlineEntry], unmatched: list[OutlineEntry]) -> float | None:
    """The share of ``entries`` matched in the text (None without entries)."""
    return round(1 - len(unmatched) / len(entries), 3) if entries else None


def unmatched(entries: list[OutlineEntry], headings: list[OutlineEntry]) -> list[OutlineEntry]:
    """The contents entries no heading of the tree names (numbering and case aside), for
    formats whose extractor does not match them to the text itself."""
    keys = {entry_key(h.title) for h in headings}
    return [e for e in entries if entry_key(e.title) not in keys]


def inspect_document(
    path: Path,
    *,
    config: ChunkingConfig,
    count_tokens: Callable[[str], int],
    mime: str | None = None,
    password: str | None = None,
) -> DocumentStructure:
    """Extract, clean and chunk ``path`` as ingest does; nothing is stored or embedded.

    Raises ``BadInputError`` (with its ``reason``) as ingest would fail the document."""
    mime = mime or detect_mime_path(path)
    headings: list[OutlineEntry] = []
    units: list[Unit] = []
    with extract(path, mime=mime, password=password) as extraction:
        title = usable_title(extraction.title)
        for unit in extraction.units():
            if title is None and len(units) < 3:
                title = heading_title(unit)
            units.append(unit)
            headings += [
                OutlineEntry(b.level or 1, b.text, unit.page or unit.slide)
                for b in unit.blocks
                if b.kind == "heading"
            ]
        drafts = list(chunk_units(units, config=config, count_tokens=count_tokens))
        entries = list(extraction.contents_entries)
        report = extraction.entry_report()
        structure = DocumentStructure(
            path=path, mime=mime, title=title, page_count=extraction.page_count,
            headings=headings, chunks=drafts, contents_entries=entries,
            unmatched_entries=(
                report.contents_unmatched if report else unmatched(entries, headings)
            ),
            outline_entries=report.outline if report else [],
            unmatched_outline=report.outline_unmatched if report else [],
            warnings=list(extraction.summary.warnings),
        )  # fmt: skip
    for draft in drafts:
        draft.context_prefix = structural_prefix(title, draft.section_path)
    return structure


def ingest_chunking(
    settings: Settings | None = None,
) -> tuple[ChunkingConfig, Callable[[str], int]]:
    """The chunk sizes and token counter the ingest service would use with these settings
    (the embedding model's own WordPiece tokenizer; read from the model files, offline)."""
    from tokenizers import Tokenizer

    settings = settings or Settings()
    local = settings.embedding_provider == "local"
    max_tokens = LOCAL_MAX_TOKENS if local else GEMINI_MAX_TOKENS
    model = local_model_path(settings if local else None)
    config_file = model / "sentence_bert_config.json"
    if local and config_file.is_file():
        max_tokens = int(json.loads(config_file.read_text()).get("max_seq_length") or max_tokens)
    if settings.chunk_max_tokens is not None:
        max_tokens = min(max_tokens, settings.chunk_max_tokens)
    tokenizer = Tokenizer.from_file(str(model / "tokenizer.json"))
    tokenizer.no_truncation()
    tokenizer.no_padding()

    def count(text: str) -> int:
        return len(tokenizer.encode(text, add_special_tokens=True).ids)

    return chunking_config(settings, max_tokens=max_tokens), count


def main(argv: list[str] | None = None) -> int:
    """``python -m lectern_ingest.structure FILE [--chunks] [--json] [--password P]``: print
    the document's structure; 1 when ingest could not read it (with its reason). ``lectern
    inspect`` runs this as a process."""
    import argparse
    import sys

    from lectern_common.errors import BadInputError

    parser = argparse.ArgumentParser(prog="lectern inspect", description=__doc__)
    parser.add_argument("file", type=Path)
    parser.add_argument("--chunks", action="store_true")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--password")
    args = parser.parse_args(argv)
    path: Path = args.file
    if not path.is_file():
        print(f"lectern inspect: error: no such file: {path}", file=sys.stderr)
        return 1
    config, count_tokens = ingest_chunking()
    try:
        structure = inspect_document(
            path, config=config, count_tokens=count_tokens, password=args.password
        )
    except BadInputError as exc:
        print(f"lectern inspect: {path.name}: {exc.reason}: {exc}", file=sys.stderr)
        return 1
    print(
        structure.to_json(chunks=args.chunks)
        if args.json
        else structure.to_text(chunks=args.chunks)
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
