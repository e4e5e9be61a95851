"""The test harness's server: an app that fails to start is an error of the test that served
it, not an exit of the whole run (which left the session's NATS and Postgres running)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from fastapi import FastAPI
from lectern_testing.chat import gateway_settings, serve_app


async def test_an_app_whose_start_fails_raises_an_error_not_an_exit() -> None:
    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        raise KeyError("lectern.retrieve.v1")
        yield

    app = FastAPI(title="broken", lifespan=lifespan)
    settings = gateway_settings("nats://127.0.0.1:1", "postgresql://nowhere/none")
    with pytest.raises(RuntimeError, match="broken did not start"):
        async with serve_app(app, settings):
            pass
