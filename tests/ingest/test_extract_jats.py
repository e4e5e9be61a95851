"""JATS XML journal articles: detected from their bytes, read as title, abstract, nested
sections, tables and captions (no reference list), and parsed without resolving entities."""

from __future__ import annotations

from pathlib import Path

import pytest

from lectern_common.errors import BadInputError
from lectern_common.filetype import JATS, detect_mime, detect_mime_path
from lectern_ingest.chunking import ChunkingConfig, chunk_units
from lectern_ingest.extract import extract

ARTICLE = """<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE article PUBLIC "-//NLM//DTD JATS (Z39.96) Journal Archiving DTD v1.2//EN"
  "JATS-archivearticle1.dtd">
<article xmlns:xlink="http://www.w3.org/1999/xlink" article-type="research-article">
<front><article-meta>
  <title-group><article-title>Light capture in leaves</article-title></title-group>
  <abstract><p>We measured how chloroplasts move towards weak light.</p></abstract>
</article-meta></front>
<body>
  <sec><title>Introduction</title>
    <p>Chloroplasts accumulate on the cell surface under weak light.</p>
    <sec><title>Blue light</title>
      <p>Phototropins sense blue light and trigger the movement.</p>
    </sec>
  </sec>
  <sec><title>Results</title>
    <p>Movement took about 40 minutes in <italic>Arabidopsis</italic>.</p>
    <table-wrap><caption><p>Table 1. Speeds</p></caption>
      <table><tr><th>Light</th><th>Speed</th></tr>
        <tr><td>weak</td><td>slow</td></tr></table>
    </table-wrap>
    <fig><caption><p>Figure 1. Chloroplast positions.</p></caption></fig>
  </sec>
</body>
<back><ref-list>
  <ref><mixed-citation>Smith J. Old paper. 1999.</mixed-citation></ref>
</ref-list></back>
</article>
"""


def _words(text: str) -> int:
    return len(text.split())


def test_a_jats_article_is_detected_and_read_as_its_structure(tmp_path: Path) -> None:
    path = tmp_path / "article.xml"
    path.write_text(ARTICLE, encoding="utf-8")
    assert detect_mime_path(path) == JATS
    with extract(path, mime=JATS) as doc:
        assert doc.title == "Light capture in leaves"
        blocks = [b for unit in doc.units() for b in unit.blocks]
        outline = [(entry.level, entry.title) for entry in doc.outline]
    headings = [(b.level, b.text) for b in blocks if b.kind == "heading"]
    assert headings == [
        (1, "Light capture in leaves"), (2, "Abstract"), (2, "Introduction"), (3, "Blue light"),
        (2, "Results"),
    ]  # fmt: skip
    assert outline == headings
    text = " ".join(b.text for b in blocks)
    assert "Movement took about 40 minutes in Arabidopsis." in text
    assert "Old paper" not in text, "the reference list is not content"
    (table,) = [b for b in blocks if b.kind == "table"]
    assert table.text == "Light | Speed\nweak | slow" and table.caption == "Table 1. Speeds"
    assert any(b.kind == "caption" and "Chloroplast positions" in b.text for b in blocks)
    with extract(path, mime=JATS) as doc:
        chunks = list(chunk_units(doc.units(), config=ChunkingConfig(), count_tokens=_words))
    assert any(list(c.section_path[-1:]) == ["Blue light"] for c in chunks)


def test_other_xml_is_an_unsupported_format_and_entities_are_not_resolved(
    tmp_path: Path,
) -> None:
    with pytest.raises(BadInputError) as raised:
        detect_mime(b'<?xml version="1.0"?><catalog><book id="1"/></catalog>')
    assert (
        raised.value.reason == "unsupported_type" and "unsupported format" in raised.value.message
    )
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP SECRET")
    hostile = ARTICLE.replace(
        '"JATS-archivearticle1.dtd">',
        f'"JATS-archivearticle1.dtd" [<!ENTITY leak SYSTEM "file://{secret}">]>',
    ).replace("weak light.</p></abstract>", "weak light. &leak;</p></abstract>")
    path = tmp_path / "hostile.xml"
    path.write_text(hostile, encoding="utf-8")
    with extract(path, mime=JATS) as doc:
        text = " ".join(b.text for unit in doc.units() for b in unit.blocks)
    assert "TOP SECRET" not in text
