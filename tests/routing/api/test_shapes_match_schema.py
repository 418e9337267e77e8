"""Each resource's JSON has two homes: the builder the view answers with
(routing/api/shapes.py, file_json and notice_json in the services) and the serializer
the OpenAPI schema is drawn from (routing/api/serializers.py). This holds each pair equal
field by field: every object in a real answer sends only properties its schema component
names, and every property the component marks required, nested objects included
(issue 25). It found `predicted.load` of a quote's candidates, sent but undocumented."""

from __future__ import annotations

import io

import pytest

from tests.helpers import jsonl

pytestmark = pytest.mark.django_db


@pytest.fixture
def schema(client):
    return client.get("/api/v1/schema/?format=json").json()


def resolve(schema: dict, node: dict) -> dict:
    """A property's schema with $ref and single-entry allOf/oneOf followed."""
    while True:
        if "$ref" in node:
            node = schema["components"]["schemas"][node["$ref"].rsplit("/", 1)[-1]]
        elif len(node.get("allOf", [])) == 1:
            node = node["allOf"][0]
        elif "oneOf" in node and len(node["oneOf"]) == 2 and {"type": "null"} in node["oneOf"]:
            node = next(n for n in node["oneOf"] if n != {"type": "null"})
        else:
            return node


def differences(schema: dict, node: dict, value, where: str) -> list[str]:
    """Where `value` has a key its schema does not name, or lacks one it requires."""
    node = resolve(schema, node)
    out = []
    if isinstance(value, dict) and "properties" in node:
        named, sent = set(node["properties"]), set(value)
        required = set(node.get("required", ()))
        if not required <= sent <= named:
            out.append(
                f"{where}: required but not sent {sorted(required - sent)}, "
                f"sent but not in the schema {sorted(sent - named)}"
            )
        for key in named & sent:
            out += differences(schema, node["properties"][key], value[key], f"{where}.{key}")
    elif isinstance(value, list) and "items" in node:
        for i, item in enumerate(value[:3]):
            out += differences(schema, node["items"], item, f"{where}[{i}]")
    return out


def answer_schema(schema: dict, path: str, method: str, status: str) -> dict:
    return schema["paths"][path][method]["responses"][status]["content"]["application/json"][
        "schema"
    ]


def test_each_answer_has_exactly_the_fields_of_its_schema(schema, api):
    quote_body = {"model": "sol", "input_tokens": 100, "output_tokens": 10, "deadline_seconds": 600}
    quote = api.post_json("/api/v1/quotes", quote_body)
    job = api.post_json("/api/v1/jobs", quote_body)
    assert quote.status_code == 200 and job.status_code in (200, 202), job.content
    job_id = job.json()["id"]
    upload = api.post("/api/v1/files", {"purpose": "batch", "file": io.BytesIO(jsonl(2))})
    assert upload.status_code == 201, upload.content
    batch = api.post_json(
        "/api/v1/batches",
        {"input_file_id": upload.json()["id"], "endpoint": "/v1/jobs", "completion_window": "24h"},
    )
    assert batch.status_code in (200, 201, 202), batch.content
    batch_id = batch.json()["id"]
    answers = [
        ("/api/v1/quotes", "post", "200", quote.json()),
        ("/api/v1/jobs", "post", str(job.status_code), job.json()),
        ("/api/v1/jobs/{job_id}", "get", "200", api.get(f"/api/v1/jobs/{job_id}").json()),
        ("/api/v1/jobs", "get", "200", api.get("/api/v1/jobs").json()),
        ("/api/v1/files", "post", "201", upload.json()),
        ("/api/v1/files", "get", "200", api.get("/api/v1/files").json()),
        ("/api/v1/batches", "post", str(batch.status_code), batch.json()),
        ("/api/v1/batches/{batch_id}", "get", "200", api.get(f"/api/v1/batches/{batch_id}").json()),
        ("/api/v1/quota", "get", "200", api.get("/api/v1/quota").json()),
        ("/api/v1/notices", "get", "200", api.get("/api/v1/notices").json()),
    ]
    found = []
    for path, method, status, body in answers:
        found += differences(schema, answer_schema(schema, path, method, status), body, path)
    assert not found, "\n".join(found)
