"""Language detection and Postgres text search configurations."""

from __future__ import annotations

import pytest

from lectern_ingest.language import detect_language, ts_config_for

SAMPLES = {
    "en": "The mitochondria is the powerhouse of the cell and produces most of its energy.",
    "de": "Die Mitochondrien sind die Kraftwerke der Zelle und erzeugen den größten Teil der "
    "Energie.",
    "fr": "Les mitochondries sont les centrales énergétiques de la cellule et produisent "
    "l'essentiel de son énergie.",
    "es": "Las mitocondrias son las centrales energéticas de la célula y producen la mayor parte "
    "de su energía.",
}


@pytest.mark.parametrize("lang", sorted(SAMPLES))
def test_detects_language_deterministically(lang: str) -> None:
    assert {detect_language(SAMPLES[lang]) for _ in range(5)} == {lang}


def test_falls_back_on_too_little_text() -> None:
    assert detect_language("") == "en"
    assert detect_language("12 34 ++") == "en"
    assert detect_language("", default="de") == "de"


def test_text_search_configurations() -> None:
    assert ts_config_for("en") == "english"
    assert ts_config_for("de") == "german"
    assert ts_config_for("pt-BR") == "portuguese"
    assert ts_config_for("ar") == "arabic"
    assert ts_config_for("nb") == "norwegian"
    assert ts_config_for("ja") == "simple"
    assert ts_config_for(None) == "simple"


def test_documents_read_at_once_after_start_up_load_the_model_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The model takes ~0.8 s of CPU to load: parallel first documents must share one load."""
    import functools
    import threading
    import time

    from lectern_ingest import language

    loads: list[int] = []
    real = language._load.__wrapped__

    @functools.cache
    def counting_load() -> object:
        loads.append(1)
        time.sleep(0.2)  # a window for the other threads to arrive
        return real()

    language._identifier.cache_clear()
    monkeypatch.setattr(language, "_load", counting_load)
    threads = [
        threading.Thread(target=language.detect_language, args=(SAMPLES["en"],)) for _ in range(4)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    language._identifier.cache_clear()  # the next test loads the real, cached model again
    assert loads == [1]
