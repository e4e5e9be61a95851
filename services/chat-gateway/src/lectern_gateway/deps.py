"""FastAPI dependencies as Annotated aliases."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, Request
from faststream.nats import NatsBroker

from lectern_common.service import ServiceState
from lectern_gateway.config import Settings


def get_state(request: Request) -> ServiceState:
    """The running service's resources."""
    state: ServiceState = request.app.state.lectern
    return state


def get_pool(request: Request) -> Any:
    """The asyncpg pool."""
    return get_state(request).pool


def get_broker(request: Request) -> NatsBroker:
    """The connected NATS broker."""
    return get_state(request).broker


def get_settings(request: Request) -> Settings:
    """The gateway's settings."""
    settings = get_state(request).settings
    assert isinstance(settings, Settings)
    return settings


StateDep = Annotated[ServiceState, Depends(get_state)]
PoolDep = Annotated[Any, Depends(get_pool)]
BrokerDep = Annotated[NatsBroker, Depends(get_broker)]
SettingsDep = Annotated[Settings, Depends(get_settings)]
