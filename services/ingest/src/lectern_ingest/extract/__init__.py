"""Document extraction: ``extract(path, mime=..., password=...)`` -> an ``Extraction``."""

from __future__ import annotations

import zipfile
from pathlib import Path

from lectern_common import filetype
from lectern_common.errors import BadInputError
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
    "check_archive",
    "extract",
]


#: what an Office or EPUB archive may expand to: members, their total size, and the
#: compression ratio of a large member (XML compresses 5-20x; a bomb 1,000x)
MAX_ARCHIVE_MEMBERS = 20_000
MAX_ARCHIVE_BYTES = 512 * 1024 * 1024
MAX_MEMBER_RATIO = 200
_RATIO_FROM_BYTES = 8 * 1024 * 1024


def check_archive(path: Path) -> None:
    """Refuse a ZIP-based document (DOCX, PPTX, EPUB) that would expand beyond the limits,
    from its central directory and before anything is decompressed (``too_large``; an
    unreadable archive is ``corrupt``). ``zipfile`` never inflates a member past the size
    its directory declares, so these declared sizes bound what extraction will read."""
    try:
        with zipfile.ZipFile(path) as archive:
            members = archive.infolist()
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise BadInputError(f"unreadable archive: {exc}", reason="corrupt") from exc
    if len(members) > MAX_ARCHIVE_MEMBERS:
        raise BadInputError(
            f"the archive holds {len(members)} files; at most {MAX_ARCHIVE_MEMBERS}",
            reason="too_large",
        )
    total = sum(m.file_size for m in members)
    if total > MAX_ARCHIVE_BYTES:
        raise BadInputError(
            f"the archive expands to {total // 2**20} MB; at most {MAX_ARCHIVE_BYTES // 2**20} MB",
            reason="too_large",
        )
    for member in members:
        ratio = member.file_size / max(member.compress_size, 1)
        if member.file_size > _RATIO_FROM_BYTES and ratio > MAX_MEMBER_RATIO:
            raise BadInputError(
                f"{member.filename} expands {ratio:.0f}x (a decompression bomb?); "
                f"at most {MAX_MEMBER_RATIO}x",
                reason="too_large",
            )


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
    if mime in (filetype.DOCX, filetype.PPTX, filetype.EPUB):
        check_archive(path)
    if mime in (filetype.PDF, filetype.EPUB, filetype.PNG, filetype.JPEG):
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
    if mime == filetype.JATS:
        from lectern_ingest.extract.jats import open_jats

        return open_jats(path)
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
