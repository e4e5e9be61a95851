"""HTML, Markdown, plain text and transcript extraction."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lectern_common.errors import BadInputError
from lectern_common.filetype import HTML, MARKDOWN, SRT, TEXT, VTT, detect_mime_path
from lectern_ingest.chunking import ChunkingConfig, chunk_units
from lectern_ingest.extract import extract
from lectern_ingest.extract.transcript import parse_cues, parse_timestamp

MARKDOWN_DOC = """# Cell Biology

Intro paragraph with **bold** and a [link](http://example.org).

## Mitosis

Mitosis has four phases. Each phase has a role.

- Prophase condenses chromosomes
- Metaphase aligns them

Table 2: Phases

| Phase | Event |
|-------|-------|
| Prophase | Condense |
| Anaphase | Separate |

Energy
------

```
code stays as is
```
"""

HTML_DOC = """<!DOCTYPE html><html><head><title>Ducks - Encyclopedia</title></head><body>
<nav><ul><li><a href="/">Home</a></li><li><a href="/about">About us</a></li></ul></nav>
<article><h1>Ducks</h1>
<p>Ducks are waterfowl of the family Anatidae. They live near ponds, rivers and lakes all over
the world, and most of them feed on plants, insects and small fish found in shallow water.</p>
<h2>Diet</h2>
<p>Ducks eat a varied diet of grasses, aquatic plants, fish, insects, small amphibians, worms and
small molluscs.<sup class="reference"><a href="#cite-1">[1]</a></sup> Dabbling ducks feed on the
surface of water or on land.<sup>[2]</sup><sup>[self-published source?]</sup> The verb *dūcan
means to dive; 10<sup>6</sup> ducklings hatch [in spring].</p>
<h2>Behaviour</h2>
<p>Many species of duck are temporarily flightless while moulting; they seek out protected
habitat with good food supplies during this period.</p>
</article>
<footer>Copyright 2024 Example Encyclopedia. Privacy policy. Terms of use.</footer>
</body></html>"""

VTT_DOC = """WEBVTT

NOTE this is a comment

00:00:01.000 --> 00:00:04.000
<v Teacher>Welcome to the lecture on cells.

00:00:04.000 --> 00:00:08.500
Today we look at <b>mitosis</b> &amp; meiosis.

00:01:10.000 --> 00:01:15.000
After a minute we talk about energy.
"""

SRT_DOC = """1
00:00:01,000 --> 00:00:03,000
First caption line.

2
00:00:03,500 --> 00:00:06,000
Second caption,
on two lines.
"""


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_markdown_structure(tmp_path: Path) -> None:
    path = _write(tmp_path, "notes.md", MARKDOWN_DOC)
    assert detect_mime_path(path) == MARKDOWN
    with extract(path, mime=MARKDOWN, password=None) as ex:
        blocks = [(b.kind, b.level, b.text, b.caption) for u in ex.units() for b in u.blocks]
        assert ex.title == "Cell Biology"
    assert blocks[0] == ("heading", 1, "Cell Biology", None)
    assert ("paragraph", None, "Intro paragraph with bold and a link.", None) in blocks
    assert ("heading", 2, "Mitosis", None) in blocks
    assert ("paragraph", None, "Prophase condenses chromosomes", None) in blocks
    assert (
        "table",
        None,
        "Phase | Event\nProphase | Condense\nAnaphase | Separate",
        "Table 2: Phases",
    ) in blocks
    assert ("heading", 2, "Energy", None) in blocks
    assert ("paragraph", None, "code stays as is", None) in blocks


def test_html_main_content_without_boilerplate(tmp_path: Path, count_tokens: Any) -> None:
    path = _write(tmp_path, "page.html", HTML_DOC)
    assert detect_mime_path(path) == HTML
    with extract(path, mime=HTML, password=None) as ex:
        blocks = [b for u in ex.units() for b in u.blocks]
    text = " ".join(b.text for b in blocks)
    assert "waterfowl of the family Anatidae" in text
    assert "Privacy policy" not in text and "About us" not in text
    headings = [b.text for b in blocks if b.kind == "heading"]
    assert "Diet" in headings and "Behaviour" in headings
    with extract(path, mime=HTML, password=None) as ex:
        chunks = list(chunk_units(ex.units(), config=ChunkingConfig(), count_tokens=count_tokens))
    diet = next(c for c in chunks if "grasses" in c.text)
    assert diet.section_path[-1] == "Diet"
    # citation markers and inline tags of the Markdown do not reach the text, nor its escapes
    assert "small molluscs. Dabbling" in diet.text and "on land. The verb" in diet.text
    assert "<sup>" not in diet.text and "\\" not in diet.text
    assert "*dūcan" in diet.text and "10^6 ducklings hatch [in spring]" in diet.text


def test_plain_text_paragraphs(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_bytes("First para\u00adgraph with a \ufb01ne word.\n\n\nSecond one.\n".encode())
    assert detect_mime_path(path) == TEXT
    with extract(path, mime=TEXT, password=None) as ex:
        assert [b.text for u in ex.units() for b in u.blocks] == [
            "First paragraph with a fine word.",
            "Second one.",
        ]
    latin = tmp_path / "latin.txt"
    latin.write_bytes("Grüße aus Köln".encode("latin-1"))
    with extract(latin, mime=TEXT, password=None) as ex:
        assert [b.text for u in ex.units() for b in u.blocks] == ["Grüße aus Köln"]


def test_whitespace_only_text_has_no_text(tmp_path: Path) -> None:
    path = _write(tmp_path, "blank.txt", "\n\n   \n")
    with extract(path, mime=TEXT, password=None) as ex, pytest.raises(BadInputError) as err:
        list(ex.units())
    assert err.value.reason == "no_text"


def test_timestamps() -> None:
    assert parse_timestamp("01:02:03.500") == 3723.5
    assert parse_timestamp("02:03,250") == 123.25


def test_vtt_cues_grouped_with_times(tmp_path: Path, count_tokens: Any) -> None:
    path = _write(tmp_path, "lecture.vtt", VTT_DOC)
    assert detect_mime_path(path) == VTT
    cues = parse_cues(VTT_DOC)
    assert [c.text for c in cues] == [
        "Teacher: Welcome to the lecture on cells.",
        "Today we look at mitosis & meiosis.",
        "After a minute we talk about energy.",
    ]
    with extract(path, mime=VTT, password=None) as ex:
        units = list(ex.units())
    assert [(u.time_start, u.time_end) for u in units] == [(1.0, 8.5), (70.0, 75.0)]
    with extract(path, mime=VTT, password=None) as ex:
        chunks = list(chunk_units(ex.units(), config=ChunkingConfig(), count_tokens=count_tokens))
    assert (chunks[0].time_start, chunks[-1].time_end) == (1.0, 75.0)


def test_srt(tmp_path: Path) -> None:
    path = _write(tmp_path, "lecture.srt", SRT_DOC)
    assert detect_mime_path(path) == SRT
    with extract(path, mime=SRT, password=None) as ex:
        units = list(ex.units())
    assert len(units) == 1
    assert units[0].blocks[0].text == "First caption line. Second caption, on two lines."
    assert (units[0].time_start, units[0].time_end) == (1.0, 6.0)


def test_unknown_type_is_unsupported(tmp_path: Path) -> None:
    path = _write(tmp_path, "x.bin", "data")
    with pytest.raises(BadInputError) as err:
        extract(path, mime="image/gif", password=None)
    assert err.value.reason == "unsupported_type"
