"""Apparatus (reference lists, contents, indexes) is typed, headings frame every chunk, and a
document's own title replaces a file name; all on material written here."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pymupdf as _pymupdf
import pytest

from lectern_common.events import DocumentMetadata, DocumentUploaded
from lectern_common.filetype import PDF
from lectern_ingest.chunking import (
    ChunkingConfig,
    chunk_units,
    section_kind,
    structural_prefix,
    text_kind,
)
from lectern_ingest.extract import extract
from lectern_ingest.extract.model import Block, Unit
from lectern_ingest.pipeline import given_title
from lectern_ingest.titles import usable_title

pymupdf: Any = _pymupdf

BODY = (
    "Turner syndrome affects about one in 2500 live female births. Short stature and "
    "ovarian failure are its most common features, and most girls need oestrogen from puberty."
)
REFERENCES = (
    "1. Stochholm K, Juul S, Juel K, et al. Prevalence, incidence, diagnostic delay, and "
    "mortality in Turner syndrome. J Clin Endocrinol Metab 2006;91:3897-902. 2. Grossi A, "
    "Crino A, Luciano R, et al. Endocrine autoimmunity in Turner syndrome. Ital J Pediatr "
    "2013;39:79. 3. Bakalov VK, Gutin L, Cheng CM, et al. Autoimmune disorders in women with "
    "Turner syndrome. J Autoimmun 2012;38:315-21."
)
CONTENTS = "\n".join(
    f"{n}. Chapter title number {n} . . . . . . . . . . . {n * 7}" for n in range(1, 9)
)
INDEX = "Abbildung, 107 affine, 29 Decktransformation, 59 Faser, 21 Fläche, 90 Halbebene, 66 " * 2


def test_apparatus_is_recognised_by_its_marks_and_by_its_section() -> None:
    assert text_kind(BODY) == "text"
    assert text_kind(REFERENCES) == "references"
    assert text_kind(CONTENTS) == "contents"
    assert text_kind(INDEX) == "index"
    assert text_kind("The numbers 1, 2, 3, 4, 5, 6, 7, 8, 9 and 10 are listed here.") == "text"
    assert section_kind(["A review", "7. References"]) == "references"
    assert section_kind(["Table of Contents"]) == "contents"
    assert section_kind(["Stichwortverzeichnis"]) == "index"
    assert section_kind(["Glossary"]) is None


def test_chunks_carry_their_kind_and_the_abstract_does_not_swallow_the_next_section(
    count_tokens: Any,
) -> None:
    units = [
        Unit(page=1, blocks=[
            Block("heading", "Turner syndrome in adults", level=1),
            Block("heading", "Abstract", level=2),
            Block("paragraph", "A short summary of the review and what it covers for adults."),
            Block("heading", "Background", level=3),
            Block("paragraph", BODY),
        ]),
        Unit(page=9, blocks=[Block("heading", "References", level=3),
                             Block("paragraph", REFERENCES)]),
    ]  # fmt: skip
    drafts = list(chunk_units(units, config=ChunkingConfig(), count_tokens=count_tokens))
    body = next(d for d in drafts if "2500" in d.text)
    assert body.kind == "text"
    assert body.section_path == ["Turner syndrome in adults", "Background"]
    refs = [d for d in drafts if "Stochholm" in d.text]
    assert refs and all(d.kind == "references" for d in refs)


def test_the_structural_prefix_names_title_and_sections_once() -> None:
    assert structural_prefix("Turner review", ["Turner review", "Renal"]) == "Turner review > Renal"
    assert structural_prefix(None, []) is None
    long = structural_prefix("T", [f"Section {i} " + "x" * 90 for i in range(6)])
    assert long is not None and len(long) <= 300 and long.startswith("T > ")
    assert long.endswith("Section 5 " + "x" * 90)


def test_placeholder_titles_give_way_to_the_documents_own() -> None:
    assert usable_title("untitled") is None
    assert usable_title("Microsoft Word - notes.doc") is None
    assert usable_title("chapter2.pdf") is None
    assert usable_title("Turner syndrome: issues to consider") == (
        "Turner syndrome: issues to consider"
    )

    def uploaded(title: str | None, filename: str) -> DocumentUploaded:
        return DocumentUploaded(
            tenant_id="t", document_id=uuid.uuid4(), version=1, filename=filename,
            mime_type=PDF, size_bytes=1, object_name="o", uploaded_by="u", file_sha256="x",
            metadata=DocumentMetadata(title=title),
        )  # fmt: skip

    assert given_title(uploaded("review", "review.pdf")) is None
    assert given_title(uploaded(None, "review.pdf")) is None
    assert given_title(uploaded("My reading", "review.pdf")) == "My reading"


def _article(path: Path) -> None:
    doc = pymupdf.open()
    for n in range(1, 7):
        page = doc.new_page(width=595, height=842)
        # a "Downloaded from" note set sideways in the margin of every page
        page.insert_text((570, 560), "Downloaded from https://example.org/journal by a reader",
                         fontsize=7, fontname="helv", rotate=90)  # fmt: skip
        if n == 1:
            page.insert_text((72, 90), "Living with Turner syndrome", fontsize=20, fontname="hebo")
            page.insert_text((72, 120), "Ann Smith†, Bob Jones‡, Cy Lee§ and Di Park*",
                             fontsize=14, fontname="hebo")  # fmt: skip
        page.insert_textbox(
            pymupdf.Rect(72, 160, 520, 400), f"Page {n} text. {BODY}", fontsize=10,
            fontname="helv",
        )  # fmt: skip
        # text above and below the note: it is no top or bottom block of the page
        page.insert_textbox(pymupdf.Rect(72, 600, 520, 780), BODY, fontsize=10, fontname="helv")
        page.insert_text((72, 790), f"Closing line {n}.", fontsize=10, fontname="helv")
    doc.save(path)


@pytest.mark.timeout(60)
def test_bylines_are_not_headings_and_margin_notes_are_furniture(tmp_path: Path) -> None:
    path = tmp_path / "article.pdf"
    _article(path)
    with extract(path, mime=PDF, password=None) as ex:
        units = list(ex.units())
    headings = [b.text for u in units for b in u.blocks if b.kind == "heading"]
    assert headings == ["Living with Turner syndrome"]
    text = "\n".join(b.text for u in units for b in u.blocks)
    assert "Ann Smith" in text and "Downloaded from" not in text
    assert "Page 6 text." in text
