"""A fetch given patience waits out an object store without a leader (an election) instead of
failing at once; without patience, or past it, it fails ``NatsUnavailableError``.

The object store is the real one (embedded NATS); only the first calls to open the bucket
are answered as a stream without a leader answers them (JetStream's 503)."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from nats.js.errors import ServiceUnavailableError

from lectern_common.errors import NatsUnavailableError
from lectern_common.objects import fetch_to_file, put_bytes

pytestmark = pytest.mark.integration


class Electing:
    """A JetStream context whose bucket has no leader for its first ``failures`` opens."""

    def __init__(self, js: Any, failures: int) -> None:
        self._js = js
        self.failures = failures
        self.opened = 0

    async def object_store(self, bucket: str) -> Any:
        self.opened += 1
        if self.opened <= self.failures:
            raise ServiceUnavailableError(code=503, description="no responders")
        return await self._js.object_store(bucket)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._js, name)


async def test_a_fetch_with_patience_waits_out_an_election(jetstream: Any, tmp_path: Path) -> None:
    name = f"lessons/{uuid.uuid4()}"
    await put_bytes(jetstream, name=name, data=b"Cells divide by mitosis. " * 40)
    electing = Electing(jetstream, failures=3)
    began = time.monotonic()
    size = await fetch_to_file(electing, name=name, path=tmp_path / "doc", patience_s=20.0)
    assert size == len(b"Cells divide by mitosis. " * 40)
    assert (tmp_path / "doc").read_bytes().startswith(b"Cells divide")
    assert electing.opened == 4
    assert time.monotonic() - began < 5.0  # short waits: 0.25, 0.5, 1 s (jittered)


async def test_without_patience_or_past_it_the_fetch_says_nats_is_unavailable(
    jetstream: Any, tmp_path: Path
) -> None:
    name = f"lessons/{uuid.uuid4()}"
    await put_bytes(jetstream, name=name, data=b"Meiosis halves the chromosomes.")
    at_once = Electing(jetstream, failures=1)
    with pytest.raises(NatsUnavailableError):
        await fetch_to_file(at_once, name=name, path=tmp_path / "a")
    assert at_once.opened == 1
    never = Electing(jetstream, failures=1000)
    began = time.monotonic()
    with pytest.raises(NatsUnavailableError):
        await fetch_to_file(never, name=name, path=tmp_path / "b", patience_s=1.0)
    assert 1.0 <= time.monotonic() - began < 4.0
    assert never.opened >= 2
