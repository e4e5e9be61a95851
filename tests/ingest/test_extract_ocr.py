"""OCR of PDF pages without a text layer (PyMuPDF + Tesseract; optional: `apt-get install
tesseract-ocr`). Without tesseract such pages are counted as skipped and OCR tests skip."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pymupdf as _pymupdf
import pytest

from lectern_common.errors import BadInputError
from lectern_common.filetype import JPEG, PDF, PNG, detect_mime_path
from lectern_ingest.extract import extract
from lectern_ingest.extract.ocr import _OCR_MAX_PIXELS
from lectern_ingest.extract.ocr import ocr_dpi as _ocr_dpi
from lectern_ingest.extract.pdf import PdfExtraction

pymupdf: Any = _pymupdf

HAS_TESSERACT = shutil.which("tesseract") is not None
needs_tesseract = pytest.mark.skipif(
    not HAS_TESSERACT, reason="tesseract not installed (apt-get install tesseract-ocr enables OCR)"
)

FIRST = (
    "Photosynthesis converts light energy into chemical energy. Plants store this energy "
    "as glucose, which their cells later burn for growth and repair."
)
SECOND = "Mitochondria release the stored energy through cellular respiration."


def _scanned_pdf(path: Path, *, page_size: tuple[float, float] = (595, 842)) -> None:
    """A PDF whose only page is a picture of typed text (no text layer), like a scan."""
    typed = pymupdf.open()
    page = typed.new_page(width=595, height=842)
    for rect, text in [((72, 90, 500, 200), FIRST), ((72, 230, 500, 300), SECOND)]:
        assert page.insert_textbox(pymupdf.Rect(*rect), text, fontsize=14, fontname="helv") >= 0
    pixmap = page.get_pixmap(dpi=150, colorspace=pymupdf.csGRAY)
    scan = pymupdf.open()
    width, height = page_size
    scan.new_page(width=width, height=height).insert_image(
        pymupdf.Rect(0, 0, width, height), pixmap=pixmap
    )
    scan.save(path)
    with pymupdf.open(path) as check:  # the premise: nothing to extract without OCR
        assert check[0].get_text().strip() == "" and check[0].get_images()


@needs_tesseract
@pytest.mark.timeout(120)
def test_image_only_page_is_ocred(tmp_path: Path) -> None:
    path = tmp_path / "scan.pdf"
    _scanned_pdf(path)
    with extract(path, mime=PDF) as ex:
        units = list(ex.units())
    blocks = [b for u in units for b in u.blocks]
    text = " ".join(b.text for b in blocks)
    for word in ["Photosynthesis", "chemical", "glucose", "Mitochondria", "respiration"]:
        assert word in text, text
    assert ex.summary.ocr_pages == [1] and ex.summary.skipped_pages == []
    assert 0 < ex.summary.ocr_seconds < 60
    # word-box heights are not font sizes: OCR text stays paragraphs, one per paragraph
    assert [b.kind for b in blocks] == ["paragraph", "paragraph"], blocks
    assert blocks[0].text.startswith("Photosynthesis") and "repair." in blocks[0].text


@needs_tesseract
@pytest.mark.timeout(120)
def test_huge_page_is_ocred_at_a_bounded_resolution(tmp_path: Path) -> None:
    path = tmp_path / "poster.pdf"
    _scanned_pdf(path, page_size=(2380, 3368))  # A0-like: 200 dpi would be ~10x the pixels
    with extract(path, mime=PDF) as ex:
        text = " ".join(b.text for u in ex.units() for b in u.blocks)
    assert ex.summary.ocr_pages == [1] and "Photosynthesis" in text
    assert ex.summary.ocr_seconds < 60


@needs_tesseract
@pytest.mark.timeout(60)
def test_ocr_stops_when_the_time_budget_is_spent(tmp_path: Path) -> None:
    path = tmp_path / "scan.pdf"
    _scanned_pdf(path)
    with PdfExtraction(pymupdf.open(path), mime=PDF, ocr=True, ocr_budget_s=0.0) as ex:
        with pytest.raises(BadInputError) as err:
            list(ex.units())
        assert err.value.reason == "no_text" and "not OCRed" in err.value.message
        assert ex.summary.skipped_pages == [1] and ex.summary.ocr_pages == []
        assert any("OCR time budget" in w for w in ex.summary.warnings)


@pytest.mark.timeout(60)
def test_missing_language_data_skips_pages_with_a_warning(tmp_path: Path) -> None:
    path = tmp_path / "scan.pdf"
    _scanned_pdf(path)
    doc = pymupdf.open(path)
    with PdfExtraction(doc, mime=PDF, ocr=True, ocr_language="zzz") as ex:
        with pytest.raises(BadInputError) as err:
            list(ex.units())
        assert err.value.reason == "no_text"
        assert ex.summary.skipped_pages == [1] and ex.summary.ocr_pages == []
        assert any("OCR unavailable" in w and "'zzz'" in w for w in ex.summary.warnings)


@pytest.mark.shared_data
@pytest.mark.timeout(120)
def test_shared_scan_without_text_layer(shared_data: Path) -> None:
    path = shared_data / "docs" / "scanned-no-textlayer.pdf"
    ex = extract(path, mime=PDF)
    if not HAS_TESSERACT:
        with ex, pytest.raises(BadInputError) as err:
            list(ex.units())
        assert err.value.reason == "no_text" and ex.summary.skipped_pages == [1]
        return
    with ex:
        text = " ".join(b.text for u in ex.units() for b in u.blocks)
    assert ex.summary.ocr_pages == [1] and ex.summary.skipped_pages == []
    assert "Docling bundles PDF document conversion to JSON and Markdown" in text
    assert ex.summary.ocr_seconds < 60


@pytest.mark.shared_data
@pytest.mark.timeout(60)
def test_shared_scan_with_text_layer_is_not_reocred(shared_data: Path) -> None:
    path = shared_data / "docs" / "scanned-with-garbage-ocr.pdf"
    with extract(path, mime=PDF, ocr=True) as ex:
        text = " ".join(b.text for u in ex.units() for b in u.blocks)
    # its (poor) embedded OCR layer is used as is: only pages without text are OCRed
    assert ex.summary.ocr_pages == [] and ex.summary.skipped_pages == []
    assert "Foundation" in text


@pytest.mark.parametrize("size", [(595, 842), (300, 393), (2480, 3508), (3000, 8000)])
def test_ocr_resolution_keeps_the_image_bounded(size: tuple[float, float]) -> None:
    page = pymupdf.open().new_page(width=size[0], height=size[1])
    dpi = _ocr_dpi(page)
    assert dpi is not None
    assert (size[0] / 72 * dpi) * (size[1] / 72 * dpi) <= _OCR_MAX_PIXELS
    if size[0] <= 600:  # ordinary pages get the full resolution
        assert dpi == 200


@pytest.mark.timeout(60)
def test_page_too_large_for_ocr_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / "wall.pdf"
    _scanned_pdf(path, page_size=(14400, 14400))  # 200 x 200 inches
    with PdfExtraction(pymupdf.open(path), mime=PDF, ocr=True) as ex:
        with pytest.raises(BadInputError):
            list(ex.units())
        assert ex.summary.skipped_pages == [1] and ex.summary.ocr_pages == []
        if HAS_TESSERACT:  # without data, OCR is unavailable before the size matters
            assert "page 1 is too large to OCR" in ex.summary.warnings


@needs_tesseract
@pytest.mark.timeout(120)
def test_a_photo_of_a_page_is_read_by_ocr(tmp_path: Path) -> None:
    """A PNG or JPEG page (a phone photo of a worksheet) is indexed through OCR."""
    typed = pymupdf.open()
    page = typed.new_page(width=595, height=842)
    assert page.insert_textbox(pymupdf.Rect(72, 90, 500, 200), FIRST, fontsize=14) >= 0
    pixmap = page.get_pixmap(dpi=150, colorspace=pymupdf.csGRAY)
    for suffix, mime in ((".png", PNG), (".jpg", JPEG)):
        path = tmp_path / f"page{suffix}"
        pixmap.save(path)
        assert detect_mime_path(path) == mime
        with extract(path, mime=mime) as ex:
            text = " ".join(b.text for u in ex.units() for b in u.blocks)
        assert "Photosynthesis" in text and "glucose" in text, text
        assert ex.summary.ocr_pages == [1]
