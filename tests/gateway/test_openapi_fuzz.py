"""Property-based requests generated from the gateway's own OpenAPI schema (schemathesis):
whatever a client sends, conforming or not, the gateway never answers 5xx, and every error
is problem+json. The gateway runs for real (NATS, Postgres, retriever and re-ranker
stand-ins) on its own event loop in a thread, since schemathesis calls it synchronously."""

from __future__ import annotations

import asyncio
import json
import os
import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from lectern_testing.chat import (
    Gateway,
    Responders,
    gateway_settings,
    memory_service,
    run_responders,
    serve_gateway,
)

from lectern_gateway.openapi import openapi_json

pytestmark = pytest.mark.integration

#: status codes seen, over every generated request (checked by the last test)
STATUSES: Counter[int] = Counter()

#: examples per operation (90 operations, some 5,300 requests in all); raise it with
#: LECTERN_FUZZ_EXAMPLES for a longer run
EXAMPLES = int(os.environ.get("LECTERN_FUZZ_EXAMPLES", "25"))
#: "k/n": fuzz only the k-th of n shares of the operations, so that n processes share the
#: work; `make test` runs two on its two cores
SHARD = os.environ.get("LECTERN_FUZZ_SHARD", "0/1")
#: seconds an operation's examples took where far from the usual second (2026-12-03): each
#: standards import embeds up to 5,000 generated descriptions
FUZZ_SECONDS = {"POST /v1/curriculum/standards": 45.0, "POST /v1/search": 5.0}
HTTP_METHODS = {"get", "put", "post", "delete", "patch", "head", "options"}


def shares(spec: dict[str, Any], count: int) -> list[set[str]]:
    """The operations ("METHOD /path") dealt into ``count`` shares of about equal time: the
    longest first, each to the share with the least so far."""
    labels = sorted(
        f"{method.upper()} {path}"
        for path, item in spec["paths"].items()
        for method in item
        if method in HTTP_METHODS
    )
    dealt: list[set[str]] = [set() for _ in range(count)]
    seconds = [0.0] * count
    for label in sorted(labels, key=lambda label: -FUZZ_SECONDS.get(label, 1.0)):
        least = seconds.index(min(seconds))
        dealt[least].add(label)
        seconds[least] += FUZZ_SECONDS.get(label, 1.0)
    return dealt


SPEC = json.loads(openapi_json())
_index, _count = (int(part) for part in SHARD.split("/"))
MINE = shares(SPEC, _count)[_index]


class ThreadedGateway:
    """The gateway and its stand-ins served from a thread with its own event loop."""

    def __init__(self, nats_url: str, database_url: str) -> None:
        self.nats_url = nats_url
        self.database_url = database_url
        self.ready = threading.Event()
        self.gateway: Gateway | None = None
        self.error: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, name="gateway", daemon=True)

    def _run(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:  # reported to the test thread
            self.error = exc
            self.ready.set()

    async def _serve(self) -> None:
        from lectern_common.db import create_pool

        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        pool = await create_pool(self.database_url, min_size=1, max_size=8)
        try:
            async with (
                run_responders(self.nats_url, Responders(pool=pool)),
                memory_service(self.nats_url, self.database_url),
                serve_gateway(gateway_settings(self.nats_url, self.database_url)) as gateway,
            ):
                self.gateway = gateway
                self.ready.set()
                await self._stop.wait()
        finally:
            await pool.close()

    def __enter__(self) -> Gateway:
        self._thread.start()
        if not self.ready.wait(120) or self.error is not None or self.gateway is None:
            raise RuntimeError(f"the gateway did not start: {self.error}")
        return self.gateway

    def __exit__(self, *exc: object) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)


@pytest.fixture(scope="module")
def served(nats_url: str, database_url: str) -> Iterator[Gateway]:
    with ThreadedGateway(nats_url, database_url) as gateway:
        yield gateway


# the gateway's schema as it builds it (docs/openapi.json is the same, kept current by a test)
schema = schemathesis.openapi.from_dict(SPEC).include(lambda ctx: ctx.operation.label in MINE)
# conforming requests and ones that break the schema (wrong types, missing fields, extra
# parameters), with NUL characters allowed in strings
schema.config.generation.update(
    modes=list(schemathesis.GenerationMode), allow_x00=True, allow_extra_parameters=True
)


@pytest.fixture(scope="module")
def headers(served: Gateway) -> dict[str, str]:
    """An admin of a tenant of its own: every route is open to it."""
    return dict(served.token("t-fuzz", "fuzz-admin", role="admin"))


# Hypothesis warns when the global `random` state changes while a case is drawn; the gateway
# under test runs in threads of this process and may use `random` meanwhile, so the
# warning fires at random and says nothing about the strategies.
@pytest.mark.filterwarnings("ignore::hypothesis.errors.HypothesisDeprecationWarning")
@schema.parametrize()
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
)
def test_no_request_gets_a_server_error(
    case: Any, served: Gateway, headers: dict[str, str]
) -> None:
    response = case.call(base_url=served.url, headers=headers, timeout=30)
    STATUSES[response.status_code] += 1
    assert response.status_code < 500, (
        f"{case.method} {case.formatted_path} -> {response.status_code}: {response.text[:500]}"
    )
    if response.status_code >= 400:
        content_type = response.headers.get("content-type") or [""]
        assert content_type[0].startswith("application/problem+json"), (
            f"{case.method} {case.formatted_path} -> {response.status_code} "
            f"{content_type}: {response.text[:200]}"
        )


def test_the_generated_requests_reached_the_routes() -> None:
    """Runs after the property test (file order): it sent many requests, and not all were
    refused at the door (some succeeded, some failed validation)."""
    total = sum(STATUSES.values())
    print(f"\nschemathesis: {total} requests, statuses {dict(sorted(STATUSES.items()))}")
    assert total >= 500, STATUSES
    assert sum(n for status, n in STATUSES.items() if status < 300) >= 50, STATUSES
    assert STATUSES[422] + STATUSES[400] >= 50, STATUSES


def test_the_shares_deal_every_operation_once() -> None:
    dealt = shares(SPEC, 2)
    assert not dealt[0] & dealt[1]
    assert len(dealt[0] | dealt[1]) == sum(
        1 for path in SPEC["paths"].values() for m in path if m in HTTP_METHODS
    )
    assert "POST /v1/curriculum/standards" in dealt[0] and len(dealt[0]) < len(dealt[1])
