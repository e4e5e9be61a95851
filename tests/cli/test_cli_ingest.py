"""`lectern ingest` options and reporting (no server: the uploads themselves are tested in
tests/gateway/test_documents_api.py)."""

from __future__ import annotations

import argparse
from datetime import date
from pathlib import Path

import pytest

from lectern_cli import ingest_cmd
from lectern_cli.ingest_cmd import Outcome, form_fields, summarise


def parse(*argv: str) -> argparse.Namespace:
    """Parse ``lectern ingest`` arguments."""
    parser = argparse.ArgumentParser()
    ingest_cmd.register(parser.add_subparsers())
    return parser.parse_args(["ingest", *argv])


def test_title_and_freshness_date_become_form_fields() -> None:
    args = parse(
        "a.pdf", "--title", "Cell biology", "--freshness-date", "2024-09-01", "--grade", "9"
    )
    assert args.freshness_date == date(2024, 9, 1)
    fields = form_fields(args)
    assert fields["title"] == "Cell biology"
    assert fields["freshness_date"] == "2024-09-01"
    assert fields["grade_level"] == "9"
    assert "replaces" not in fields and "password" not in fields


def test_a_bad_freshness_date_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        parse("a.pdf", "--freshness-date", "next week")
    assert exited.value.code == 2
    assert "YYYY-MM-DD" in capsys.readouterr().err


@pytest.mark.parametrize("option", [["--title", "One title"], ["--replaces", "some-id"]])
def test_title_and_replaces_need_exactly_one_file(
    option: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "a.md").write_text("# A")
    (tmp_path / "b.md").write_text("# B")
    args = parse(str(tmp_path), *option, "--token", "t")
    assert ingest_cmd.run(args) == 2
    assert f"{option[0]} needs exactly one file (2 found)" in capsys.readouterr().err


def test_no_wait_reports_queued_not_indexed() -> None:
    queued = [Outcome(Path("a.pdf"), "queued"), Outcome(Path("b.pdf"), "duplicate")]
    assert summarise(queued) == (0, ["2 of 2 documents queued"])
    mixed = [*queued, Outcome(Path("c.pdf"), "rejected (415)", "not a document")]
    code, lines = summarise(mixed)
    assert code == 1
    assert lines == ["2 of 3 documents queued", "FAILED c.pdf: rejected (415) not a document"]
    waited = [Outcome(Path("a.pdf"), "indexed"), Outcome(Path("b.pdf"), "ambiguous", "pick")]
    assert summarise(waited) == (1, ["1 of 2 documents indexed", "FAILED b.pdf: ambiguous pick"])
