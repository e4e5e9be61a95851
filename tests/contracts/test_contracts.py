"""Event contracts: schema snapshots and the committed AsyncAPI document.

Any change to a contract shows in review as a changed snapshot. Regenerate deliberately with
``LECTERN_UPDATE_SNAPSHOTS=1 pytest tests/contracts`` and ``make asyncapi``.
"""

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from lectern_common.asyncapi import asyncapi_yaml
from lectern_common.events import ALL_EVENTS, ALL_REQUESTS
from lectern_common.events.base import Event, Subjects

ROOT = Path(__file__).resolve().parents[2]
SNAPSHOTS = Path(__file__).parent / "snapshots"
UPDATE = os.environ.get("LECTERN_UPDATE_SNAPSHOTS") == "1"

MODELS = [*ALL_EVENTS, *(m for pair in ALL_REQUESTS for m in pair)]


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
def test_schema_matches_snapshot(model: type[BaseModel]) -> None:
    schema = json.dumps(model.model_json_schema(), indent=2, sort_keys=True) + "\n"
    path = SNAPSHOTS / f"{model.__name__}.json"
    if UPDATE:
        path.write_text(schema)
    assert path.exists(), f"no snapshot for {model.__name__}: run with LECTERN_UPDATE_SNAPSHOTS=1"
    assert path.read_text() == schema, (
        f"{model.__name__}'s schema changed. If intended (an optional field keeps the version; "
        "a breaking change needs a new .v{N+1} subject), update the snapshot."
    )


def test_no_stale_snapshots() -> None:
    names = {m.__name__ for m in MODELS}
    assert {p.stem for p in SNAPSHOTS.glob("*.json")} <= names


def test_asyncapi_document_is_current() -> None:
    committed = (ROOT / "docs" / "asyncapi.yaml").read_text()
    assert committed == asyncapi_yaml(), "docs/asyncapi.yaml is stale: run `make asyncapi`"


def _refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        found = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        return found + [ref for value in node.values() for ref in _refs(value)]
    if isinstance(node, list):
        return [ref for value in node for ref in _refs(value)]
    return []


def _resolve(document: dict[str, Any], ref: str) -> Any:
    """Follow a local ``$ref`` (and the references it leads to)."""
    assert ref.startswith("#/"), ref
    node: Any = document
    for part in ref[2:].split("/"):
        node = node[part.replace("~1", "/").replace("~0", "~")]
    return _resolve(document, node["$ref"]) if isinstance(node, dict) and "$ref" in node else node


def test_asyncapi_documents_each_reply() -> None:
    document = yaml.safe_load(asyncapi_yaml())
    for ref in _refs(document):
        _resolve(document, ref)  # every reference resolves
    for request, reply in ALL_REQUESTS:
        operation = document["operations"][f"{request.subject}:request"]
        assert operation["action"] == "receive"
        channel = _resolve(document, operation["reply"]["channel"]["$ref"])
        assert channel["address"] is None, "replies go to the requester's inbox"
        (message_ref,) = operation["reply"]["messages"]
        assert message_ref["$ref"].startswith(operation["reply"]["channel"]["$ref"] + "/")
        message = _resolve(document, message_ref["$ref"])
        payload = _resolve(document, message["payload"]["$ref"])
        assert payload["title"] == reply.__name__
        assert set(payload["properties"]) == set(reply.model_fields)
        assert set(payload.get("required", [])) == {
            name for name, field in reply.model_fields.items() if field.is_required()
        }


def test_every_subject_is_documented_and_versioned() -> None:
    subjects = {v for k, v in vars(Subjects).items() if k.isupper()}
    documented = {e.subject for e in ALL_EVENTS} | {r.subject for r, _ in ALL_REQUESTS}
    assert subjects == documented
    for subject in subjects:
        assert re.fullmatch(r"lectern\.[a-z_]+(\.[a-z_]+)*\.v\d+", subject), subject


@pytest.mark.parametrize("event", ALL_EVENTS, ids=lambda m: m.__name__)
def test_events_ignore_unknown_fields_and_carry_envelope(event: type[Event]) -> None:
    fields = event.model_fields
    for name in ("event_id", "occurred_at", "tenant_id"):
        assert name in fields
    assert event.model_config.get("extra") == "ignore"


def test_openapi_document_is_current() -> None:
    from lectern_gateway.openapi import openapi_json

    committed = (ROOT / "docs" / "openapi.json").read_text()
    assert committed == openapi_json(), "docs/openapi.json is stale: run `make asyncapi`"
