"""File types decided from bytes, not names."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import pytest

from lectern_common import filetype
from lectern_common.errors import BadInputError


def _zip(names: list[str], *, epub: bool = False) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        if epub:
            archive.writestr("mimetype", "application/epub+zip", compress_type=zipfile.ZIP_STORED)
        for name in names:
            archive.writestr(name, "<x/>")
    return buffer.getvalue()


def test_pdf_by_magic_whatever_the_name() -> None:
    assert filetype.detect_mime(b"%PDF-1.7\n%\xe2\xe3", "notes.txt") == filetype.PDF


def test_zip_containers_by_members() -> None:
    assert filetype.detect_mime(_zip(["[Content_Types].xml", "word/document.xml"])) == (
        filetype.DOCX
    )
    assert filetype.detect_mime(_zip(["[Content_Types].xml", "ppt/presentation.xml"])) == (
        filetype.PPTX
    )
    assert filetype.detect_mime(_zip(["META-INF/container.xml", "a.opf"], epub=True)) == (
        filetype.EPUB
    )
    with pytest.raises(BadInputError) as err:
        filetype.detect_mime(_zip(["xl/workbook.xml"]), "sheet.docx")
    assert err.value.reason == "unsupported_type"


def test_zip_head_only_is_read_from_local_headers() -> None:
    data = _zip(["[Content_Types].xml", "ppt/slides/slide1.xml"] + [f"f{i}" for i in range(50)])
    head = data[:200]  # the central directory at the end is cut off
    assert filetype.detect_mime(head) == filetype.PPTX


def test_text_formats() -> None:
    assert filetype.detect_mime(b"WEBVTT\n\n00:00.000 --> 00:01.000\nhi") == filetype.VTT
    srt = b"1\n00:00:01,000 --> 00:00:02,500\nHello\n\n2\n00:00:03,000 --> 00:00:04,000\nBye\n"
    assert filetype.detect_mime(srt) == filetype.SRT
    assert filetype.detect_mime(b"<!DOCTYPE html><html><body>x</body></html>") == filetype.HTML
    assert filetype.detect_mime(b"\xef\xbb\xbf<html lang='en'>") == filetype.HTML
    assert filetype.detect_mime(b"# Title\n\nSome [link](http://x.org) text\n") == (
        filetype.MARKDOWN
    )
    assert filetype.detect_mime(b"just some words", "README.md") == filetype.MARKDOWN
    assert filetype.detect_mime(b"Just plain text.\n\nTwo paragraphs.") == filetype.TEXT
    assert filetype.detect_mime("Grüße aus Köln".encode()) == filetype.TEXT
    # A head cut inside a multi-byte character is still UTF-8 text.
    assert filetype.detect_mime("Grüße".encode()[:3]) == filetype.TEXT


def test_unsupported_and_empty() -> None:
    assert filetype.detect_mime(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "scan") == filetype.PNG
    assert filetype.detect_mime(b"\xff\xd8\xff\xe0\x00\x10JFIF", "page.pdf") == filetype.JPEG
    for data in [b"GIF89a\x01\x00\x01\x00", b"\x7fELF\x02\x01\x01\x00\x00"]:
        with pytest.raises(BadInputError) as err:
            filetype.detect_mime(data, "document.pdf")
        assert err.value.reason == "unsupported_type"
    for data in [b"", b"   \n\t "]:
        with pytest.raises(BadInputError) as err:
            filetype.detect_mime(data)
        assert err.value.reason == "empty_file"


@pytest.mark.shared_data
def test_shared_documents_are_typed_by_content(shared_data: Path) -> None:
    docs = shared_data / "docs"
    expected = {
        "textbook-ch2-induction-48p.pdf": filetype.PDF,
        "other/winter-sports-gutenberg.epub": filetype.EPUB,
        "other/word-tables.docx": filetype.DOCX,
        "other/nasa-science-org-1p.pptx": filetype.PPTX,
        "other/malformed.pptx": filetype.PPTX,
        "other/wikipedia-duck.html": filetype.HTML,
    }
    for name, mime in expected.items():
        path = docs / name
        assert filetype.detect_mime_path(path) == mime, name
        head = path.read_bytes()[: filetype.HEAD_BYTES]
        assert filetype.detect_mime(head, "renamed.bin") == mime, name
    with pytest.raises(BadInputError) as err:
        filetype.detect_mime_path(docs / "empty-0-bytes.pdf")
    assert err.value.reason == "empty_file"


XHTML_CHAPTER = b"""<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE html>
<html xmlns="http://www.w3.org/1999/xhtml" xmlns:epub="http://www.idpf.org/2007/ops">
<head><title>Chapter One</title></head>
<body><section epub:type="chapter"><h2>Down the Rabbit-Hole</h2>
<p>Alice was beginning to get very tired of sitting by her sister on the bank.</p>
</section></body></html>
"""


def test_xhtml_is_html_whatever_its_xml_declaration(tmp_path: Path) -> None:
    """An EPUB chapter (and many sites) is XHTML: an XML declaration, then <html>."""
    assert filetype.detect_mime(XHTML_CHAPTER, "chapter_001.xhtml") == filetype.HTML
    strict = XHTML_CHAPTER.replace(
        b"<!DOCTYPE html>",
        b'<!DOCTYPE html PUBLIC "-//W3C//DTD XHTML 1.1//EN" '
        b'"http://www.w3.org/TR/xhtml11/DTD/xhtml11.dtd">',
    )
    assert filetype.detect_mime(strict, "page.xhtml") == filetype.HTML
    path = tmp_path / "chapter.xhtml"
    path.write_bytes(XHTML_CHAPTER)
    from lectern_ingest.extract import extract

    with extract(path, mime=filetype.detect_mime_path(path)) as extraction:
        text = " ".join(b.text for u in extraction.units() for b in u.blocks)
    assert "Alice was beginning to get very tired" in text
    # other XML is still refused
    with pytest.raises(BadInputError) as err:
        filetype.detect_mime(b'<?xml version="1.0"?><catalog><book/></catalog>', "c.xml")
    assert err.value.reason == "unsupported_type"
