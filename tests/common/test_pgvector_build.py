"""The embedded pgvector runs on this CPU, and its rebuild only takes the pinned source."""

from __future__ import annotations

from pathlib import Path

import pytest

from lectern_common.errors import ConfigurationError
from lectern_common.runtime import pgvector

pytestmark = pytest.mark.integration


def test_installed_pgvector_survives_the_probe() -> None:
    result = pgvector.probe()
    assert result.ok, f"{result.detail} (run: python -m lectern_common.runtime.pgvector ensure)"


def test_probe_reports_a_broken_extension(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pgvector, "PROBE_SQL", "CREATE EXTENSION vector; SELECT '[1,2'::vector;")
    result = pgvector.probe()
    assert not result.ok
    assert "invalid input syntax for type vector" in result.detail


def test_download_refuses_a_tarball_with_the_wrong_checksum(tmp_path: Path) -> None:
    tampered = tmp_path / "pgvector.tar.gz"
    tampered.write_bytes(b"not the pgvector release")
    with pytest.raises(ConfigurationError, match="expected"):
        pgvector._download(tampered.as_uri(), pgvector.PGVECTOR_SOURCE_SHA256, tmp_path / "out")
    assert not (tmp_path / "out").exists()
