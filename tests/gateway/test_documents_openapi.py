"""The upload form is in the OpenAPI document although the handler parses the body itself."""

from __future__ import annotations

from typing import Any

from lectern_common.events import DocumentMetadata
from lectern_gateway.app import create_app
from lectern_gateway.config import Settings


def upload_operation() -> Any:
    """The ``POST /v1/documents`` operation of the gateway's OpenAPI document."""
    return create_app(Settings()).openapi()["paths"]["/v1/documents"]["post"]


def test_upload_documents_the_multipart_form_with_every_field() -> None:
    body = upload_operation()["requestBody"]
    assert body["required"] is True
    form = body["content"]["multipart/form-data"]
    schema = form["schema"]
    assert schema["required"] == ["file"]
    properties = schema["properties"]
    assert properties["file"]["format"] == "binary"
    assert set(DocumentMetadata.model_fields) | {"file", "password", "replaces"} == set(properties)
    assert properties["grade_level"]["type"] == "integer"
    assert properties["freshness_date"] == {"format": "date", "title": "Freshness Date",
                                            "type": "string"}  # fmt: skip
    assert properties["collection"]["enum"] == ["educational", "assessment"]
    assert properties["collection"]["default"] == "educational"
    assert properties["topic_tags"]["type"] == "array"
    assert properties["password"]["format"] == "password"
    assert form["encoding"]["curriculum_standards"] == {"style": "form", "explode": True}
    # form fields are optional and never null
    assert not any("anyOf" in p or p.get("default", "") is None for p in properties.values())


def test_upload_keeps_its_query_parameter_and_answers() -> None:
    operation = upload_operation()
    assert [p["name"] for p in operation["parameters"]] == ["replaces"]
    assert {"200", "202", "413", "415"} <= set(operation["responses"])
