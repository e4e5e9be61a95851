"""Document extraction: ``extract(path, mime=..., password=...)`` -> an ``Extraction``."""

from __future__ import annotations

from pathlib import Path

from lectern_common.errors import BadInputError
from lectern_ingest import filetype
from lectern_ingest.extract.model import (
    Block,
    BlockKind,
    Extraction,
    ExtractionSummary,
    OutlineEntry,
    Unit,
)

__all__ = [
    "Block",
    "BlockKind",
    "Extraction",
    "ExtractionSummary",
    "OutlineEntry",
    "Unit",
    "extract",
]


def extract(
    path: Path, *, mime: str, password: str | None = None, ocr: bool | None = None
) -> Extraction:
    """Open a document for page-by-page extraction.

    Raises ``BadInputError`` whose ``reason`` is a ``FailureReason`` value: ``empty_file``,
    ``encrypted``, ``wrong_password``, ``corrupt`` or ``unsupported_type`` here; iterating
    ``units()`` may raise ``no_text`` (nothing extractable) or ``corrupt`` (no page readable).
    ``ocr``: OCR pages without a text layer (PDF); None means "if tesseract is installed".
    """
    if path.stat().st_size == 0:
        raise BadInputError("the file is empty", reason="empty_file")
    if mime in (filetype.PDF, filetype.EPUB):
        from lectern_ingest.extract.pdf import open_pymupdf

        return open_pymupdf(path, mime=mime, password=password, ocr=ocr)
    if mime == filetype.DOCX:
        from lectern_ingest.extract.office import open_docx

        return open_docx(path)
    if mime == filetype.PPTX:
        from lectern_ingest.extract.office import open_pptx

        return open_pptx(path)
    if mime == filetype.HTML:
        from lectern_ingest.extract.text import open_html

        return open_html(path)
    if mime == filetype.MARKDOWN:
        from lectern_ingest.extract.text import open_markdown

        return open_markdown(path)
    if mime == filetype.TEXT:
        from lectern_ingest.extract.text import open_plain_text

        return open_plain_text(path)
    if mime in (filetype.VTT, filetype.SRT):
        from lectern_ingest.extract.transcript import open_transcript

        return open_transcript(path, mime=mime)
    raise BadInputError(f"unsupported document type {mime!r}", reason="unsupported_type")
