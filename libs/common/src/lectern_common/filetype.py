"""Decide a document's type from its bytes (magic numbers, zip members), not its name."""

from __future__ import annotations

import io
import re
import zipfile
from pathlib import Path

from lectern_common.errors import BadInputError

PDF = "application/pdf"
EPUB = "application/epub+zip"
DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
PPTX = "application/vnd.openxmlformats-officedocument.presentationml.presentation"
HTML = "text/html"
MARKDOWN = "text/markdown"
TEXT = "text/plain"
VTT = "text/vtt"
SRT = "application/x-subrip"
#: a journal article in JATS XML (PubMed Central, most publishers)
JATS = "application/vnd.jats+xml"
#: a photo or scan of a page: read by OCR
PNG = "image/png"
JPEG = "image/jpeg"

SUPPORTED_TYPES = frozenset(
    {PDF, EPUB, DOCX, PPTX, HTML, MARKDOWN, TEXT, VTT, SRT, JATS, PNG, JPEG}
)
#: how many leading bytes ``detect_mime`` needs to decide (zip files: pass the whole file)
HEAD_BYTES = 64 * 1024

_LOCAL_HEADER = re.compile(rb"PK\x03\x04.{22}(..)(..)", re.DOTALL)
_SRT_CUE = re.compile(r"^\s*\d+\s*\r?\n\s*\d{1,2}:\d{2}:\d{2}[,.]\d{1,3}\s*-->", re.MULTILINE)
#: an HTML page, or XHTML (an EPUB chapter, many sites): an XML declaration may come first
_HTML_START = re.compile(
    r"^\s*(?:<\?xml[^>]*\?>\s*)?(?:<!--.*?-->\s*)*<(?:!doctype\s+html|html|head|body)\b",
    re.IGNORECASE | re.DOTALL,
)
_HTML_TAGS = re.compile(r"<(?:p|div|h[1-6]|article|table|section)\b[^>]*>", re.IGNORECASE)
_JATS = re.compile(
    r"<!DOCTYPE\s+article\s+PUBLIC\s+\"-//NLM//DTD|jats|<article\b[^>]*>\s*<front>",
    re.IGNORECASE,
)
_XML_START = re.compile(
    r"^\s*(?:<\?xml[^>]*\?>\s*)?(?:<!--.*?-->\s*)*<(!DOCTYPE|[A-Za-z])", re.DOTALL
)
_MD_SIGNALS = (
    re.compile(r"^#{1,6} \S", re.MULTILINE),
    re.compile(r"^```", re.MULTILINE),
    re.compile(r"\[[^\]\n]+\]\([^)\s]+\)"),
    re.compile(r"^\s*\|.*\|\s*$\n^\s*\|?\s*:?-{3,}", re.MULTILINE),
    re.compile(r"^(?:\*\*|__)\S.*\S(?:\*\*|__)", re.MULTILINE),
)


def _zip_names(data: bytes) -> list[str]:
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            return archive.namelist()
    except (zipfile.BadZipFile, ValueError, OSError):
        pass
    # Only the head of the file: walk the local file headers it contains.
    names: list[str] = []
    for match in _LOCAL_HEADER.finditer(data):
        name_len = int.from_bytes(match.group(1), "little")
        start = match.end()
        names.append(data[start : start + name_len].decode("utf-8", "replace"))
    return names


def _zip_type(data: bytes) -> str:
    if data[30:38] == b"mimetype" and b"application/epub+zip" in data[38:80]:
        return EPUB
    return _zip_type_from_names(_zip_names(data))


def _decode_text(data: bytes) -> str | None:
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        return data.decode("utf-16", "replace")
    if b"\x00" in data:
        return None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        # A head cut in the middle of a multi-byte character is still UTF-8.
        if exc.start >= len(data) - 3:
            return data[: exc.start].decode("utf-8-sig")
    text = data.decode("latin-1")
    printable = sum(ch.isprintable() or ch in "\r\n\t" for ch in text)
    return text if printable >= 0.95 * len(text) else None


def detect_mime(head: bytes, filename: str | None = None) -> str:
    """Return the MIME type of a document from its first bytes (the whole file for zips).

    Raises ``BadInputError`` with reason ``empty_file`` or ``unsupported_type``.
    """
    if not head:
        raise BadInputError("the file is empty", reason="empty_file")
    if head[:1024].lstrip().startswith(b"%PDF-") or b"%PDF-" in head[:1024]:
        return PDF
    if head.startswith(b"PK\x03\x04"):
        return _zip_type(head)
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return PNG
    if head.startswith(b"\xff\xd8\xff"):
        return JPEG
    text = _decode_text(head)
    if text is None:
        raise BadInputError("not a supported document type", reason="unsupported_type")
    if not text.strip():
        raise BadInputError("the file holds only whitespace", reason="empty_file")
    stripped = text.lstrip()
    if stripped.startswith("WEBVTT"):
        return VTT
    if _SRT_CUE.match(text):
        return SRT
    if _XML_START.match(text) and "<article" in text and _JATS.search(text[:16384]):
        return JATS
    if text.lstrip().startswith("<?xml") and not _HTML_START.match(text[:4096]):
        # XML other than an article or XHTML is no document Lectern reads
        raise BadInputError(
            "unsupported format: an XML file that is not a JATS article", reason="unsupported_type"
        )
    if _HTML_START.match(text) or len(_HTML_TAGS.findall(text[:4096])) >= 3:
        return HTML
    name = (filename or "").lower()
    if name.endswith((".md", ".markdown")):
        return MARKDOWN
    if sum(bool(p.search(text)) for p in _MD_SIGNALS) >= 2:
        return MARKDOWN
    return TEXT


def detect_mime_path(path: Path, filename: str | None = None) -> str:
    """Like ``detect_mime`` for a file on disk (reads the zip directory when needed)."""
    with path.open("rb") as handle:
        head = handle.read(HEAD_BYTES)
    if head.startswith(b"PK\x03\x04"):
        try:
            with zipfile.ZipFile(path) as archive:
                names = archive.namelist()
        except (zipfile.BadZipFile, OSError):
            return _zip_type(head)
        if head[30:38] == b"mimetype" and b"application/epub+zip" in head[38:80]:
            return EPUB
        return _zip_type_from_names(names)
    return detect_mime(head, filename or path.name)


def _zip_type_from_names(names: list[str]) -> str:
    if "mimetype" in names and any(n.endswith(".opf") or n.startswith("META-INF/") for n in names):
        return EPUB
    if any(n.startswith("word/") for n in names):
        return DOCX
    if any(n.startswith("ppt/") for n in names):
        return PPTX
    raise BadInputError("zip archive is not a DOCX, PPTX or EPUB", reason="unsupported_type")
