"""Hostile files built here, byte by byte: decompression bombs dressed as DOCX, PPTX and
EPUB, an archive of too many members, a PDF whose page tree claims 100,000 pages and one
with more pages than ingest accepts."""

from __future__ import annotations

import io
import zipfile
from typing import Any

from lectern_ingest.extract import MAX_ARCHIVE_MEMBERS
from lectern_ingest.extract.pdf import MAX_PAGES

#: what the member of a bomb inflates to: 64 MB of one byte, about 64 KB deflated
BOMB_BYTES = 64 * 1024 * 1024

_CONTENT_TYPES = (
    b'<?xml version="1.0" encoding="UTF-8"?><Types xmlns="http://schemas.openxmlformats.org/'
    b'package/2006/content-types"><Default Extension="xml" ContentType="application/xml"/>'
    b"</Types>"
)


def _zip(members: list[tuple[str, bytes]], *, stored_first: bool = False) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for index, (name, data) in enumerate(members):
            kind = zipfile.ZIP_STORED if stored_first and index == 0 else zipfile.ZIP_DEFLATED
            archive.writestr(name, data, compress_type=kind)
    return buffer.getvalue()


def _zeros() -> bytes:
    return b"<w:t>" + b"0" * BOMB_BYTES + b"</w:t>"


def docx_bomb() -> bytes:
    """A DOCX whose document.xml inflates 1,000-fold."""
    return _zip([("[Content_Types].xml", _CONTENT_TYPES), ("word/document.xml", _zeros())])


def pptx_bomb() -> bytes:
    """A PPTX whose first slide inflates 1,000-fold."""
    return _zip([("[Content_Types].xml", _CONTENT_TYPES), ("ppt/presentation.xml", b"<p/>"),
                 ("ppt/slides/slide1.xml", _zeros())])  # fmt: skip


def epub_bomb() -> bytes:
    """An EPUB (mimetype first, stored) whose chapter inflates 1,000-fold."""
    return _zip(
        [("mimetype", b"application/epub+zip"), ("META-INF/container.xml", b"<container/>"),
         ("OEBPS/chapter1.xhtml", _zeros())],
        stored_first=True,
    )  # fmt: skip


def docx_of_many_members() -> bytes:
    """A DOCX of more members than an archive may hold."""
    members = [("[Content_Types].xml", _CONTENT_TYPES), ("word/document.xml", b"<w:document/>")]
    members += [(f"word/media/m{i}.xml", b"") for i in range(MAX_ARCHIVE_MEMBERS + 1)]
    return _zip(members)


def pdf_claiming_pages(count: int = 100_000) -> bytes:
    """A one-page PDF whose page tree claims ``count`` pages."""
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count %d >>" % count,
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] >>",
    ]
    out = io.BytesIO()
    out.write(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(out.tell())
        out.write(b"%d 0 obj\n%s\nendobj\n" % (number, body))
    xref = out.tell()
    out.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1))
    for offset in offsets:
        out.write(b"%010d 00000 n \n" % offset)
    out.write(b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n"
              % (len(objects) + 1, xref))  # fmt: skip
    return out.getvalue()


def pdf_of_too_many_pages() -> bytes:
    """A real PDF of MAX_PAGES + 1 blank pages."""
    import pymupdf as _pymupdf

    pymupdf: Any = _pymupdf
    doc = pymupdf.open()
    for _ in range(MAX_PAGES + 1):
        doc.new_page()
    data: bytes = doc.tobytes(garbage=1)
    doc.close()
    return data
