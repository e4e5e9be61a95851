"""OCR of PDF pages without a text layer (Tesseract through PyMuPDF): the language data,
the resolution a page is rendered at, and merging the recognised blocks."""

from __future__ import annotations

import functools
import glob
import math
import os
from typing import Any

import pymupdf as _pymupdf

from lectern_ingest.extract.pdf_layout import PBlock

# PyMuPDF is only partly typed; its objects are handled as Any here.
pymupdf: Any = _pymupdf

#: OCR: render at _OCR_DPI, but never above _OCR_MAX_PIXELS (about A4 at 200 dpi): scanners
#: often declare one point per pixel, and such a page at 200 dpi would keep Tesseract busy for
#: minutes. A document stops being OCRed once _OCR_BUDGET_S is spent.
OCR_LANGUAGE = "eng"


_OCR_DPI = 200


_OCR_MIN_DPI = 24


_OCR_MAX_PIXELS = 4_500_000


_TESSDATA_GLOBS = (
    "/usr/share/tesseract-ocr/*/tessdata",
    "/usr/share/tessdata",
    "/usr/local/share/tessdata",
    "/usr/local/share/tesseract-ocr/*/tessdata",
    "/opt/homebrew/share/tessdata",
)


def has_languages(folder: str, language: str) -> bool:
    return all(
        os.path.isfile(os.path.join(folder, f"{lang}.traineddata")) for lang in language.split("+")
    )


@functools.cache
def find_tessdata(language: str = OCR_LANGUAGE) -> str | None:
    """The Tesseract data folder holding ``language`` (``eng``, ``eng+deu``), or None."""
    candidates: list[str] = []
    if prefix := os.environ.get("TESSDATA_PREFIX"):
        candidates += [prefix, os.path.join(prefix, "tessdata")]
    for pattern in _TESSDATA_GLOBS:
        candidates += sorted(glob.glob(pattern), reverse=True)
    found = next((c for c in candidates if has_languages(c, language)), None)
    if found is None:
        # Slow (runs ``tesseract --list-langs``), so only when the usual folders have nothing.
        try:
            asked = pymupdf.get_tessdata()
        except Exception:
            return None
        found = asked if asked and has_languages(asked, language) else None
    return found


def ocr_dpi(page: Any) -> int | None:
    """Resolution for OCR: _OCR_DPI, less on large pages; None if the page is too large."""
    area_in2 = max(page.rect.width * page.rect.height, 1.0) / 72**2
    fitting = int(math.sqrt(_OCR_MAX_PIXELS / area_in2))
    return min(_OCR_DPI, fitting) if fitting >= _OCR_MIN_DPI else None


def merge_ocr_blocks(blocks: list[PBlock]) -> list[PBlock]:
    """Rejoin OCR lines MuPDF split into blocks (word heights vary) when they are one paragraph."""
    merged: list[PBlock] = []
    for block in sorted(blocks, key=lambda b: (b.bbox[1], b.bbox[0])):
        if merged:
            prev = merged[-1]
            line_height = (prev.bbox[3] - prev.bbox[1]) / len(prev.lines)
            gap = block.bbox[1] - prev.bbox[3]
            overlaps = block.bbox[0] < prev.bbox[2] and prev.bbox[0] < block.bbox[2]
            aligned = abs(block.bbox[0] - prev.bbox[0]) <= 1.5 * line_height
            if overlaps and aligned and -0.2 * line_height <= gap <= 0.8 * line_height:
                x0, y0, x1, y1 = prev.bbox
                bx0, by0, bx1, by1 = block.bbox
                merged[-1] = PBlock(
                    bbox=(min(x0, bx0), min(y0, by0), max(x1, bx1), max(y1, by1)),
                    lines=prev.lines + block.lines,
                )
                continue
        merged.append(block)
    return merged
