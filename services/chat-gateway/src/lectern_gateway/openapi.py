"""The gateway's OpenAPI document, for docs/openapi.json (``make openapi``)."""

from __future__ import annotations

import json

from lectern_gateway.app import create_app
from lectern_gateway.config import Settings


def openapi_json() -> str:
    """The OpenAPI document as stable, indented JSON."""
    return json.dumps(create_app(Settings()).openapi(), indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":
    print(openapi_json(), end="")
