"""The OpenAPI schema tells the truth (issue 13): what the responses hold, the problems
every operation can answer, the request strings the server refuses blank, and query
parameters refused with a 400 instead of silently ignored. Schemathesis checks the whole
schema against a live server in CI (.ci/schemathesis.sh); these pin the findings."""

from __future__ import annotations

import io

import pytest

from catalog.models import ModelVersion
from tests.helpers import jsonl

pytestmark = pytest.mark.django_db
PROBLEM = "application/problem+json"


@pytest.fixture
def schema(client):
    r = client.get("/api/v1/schema/?format=json")
    assert r.status_code == 200
    return r.json()


def operations(schema):
    for path, item in schema["paths"].items():
        for method, op in item.items():
            yield path, method, op


def component(schema, ref_or_schema):
    ref = ref_or_schema.get("$ref", "")
    return schema["components"]["schemas"][ref.rsplit("/", 1)[-1]] if ref else ref_or_schema


def test_successor_and_successor_tier_are_nullable(schema, client, builtin_catalog):
    for name in ("ModelSummary", "ModelDetail"):
        props = schema["components"]["schemas"][name]["properties"]
        assert props["successor"]["nullable"] and props["successor_tier"]["nullable"]
    latest = ModelVersion.objects.filter(successor__isnull=True).first()
    assert client.get(f"/api/v1/models/{latest.slug}/").json()["successor"] is None


@pytest.mark.parametrize(
    ("path", "item"), [("/api/v1/quota", "QuotaPackage"), ("/api/v1/tiers/", "Tier")]
)
def test_quota_and_tiers_are_documented_as_object_and_data(schema, path, item):
    ok = schema["paths"][path]["get"]["responses"]["200"]["content"]["application/json"]
    body = component(schema, ok["schema"])
    assert body["type"] == "object" and set(body["required"]) >= {"object", "data"}
    assert body["properties"]["data"]["items"]["$ref"].endswith(f"/{item}")


def test_quota_and_tiers_answer_object_and_data(api, client, builtin_catalog):
    for r in (api.get("/api/v1/quota"), client.get("/api/v1/tiers/")):
        assert r.status_code == 200 and r.json()["object"] == "list"
        assert isinstance(r.json()["data"], list) and r.json()["data"]
    assert api.get("/api/v1/quota").json()["data"][0]["family"] is None


def test_every_operation_documents_its_problem_responses(schema):
    for path, method, op in operations(schema):
        codes = op["responses"]
        expected = {"400", "503"}
        if any("ApiKey" in s for s in op.get("security", [])):
            expected.add("401")
        if "{" in path:
            expected.add("404")
        if "requestBody" in op:
            expected |= {"413", "415"}
        assert expected <= set(codes), (method, path, sorted(codes))
        for code, response in codes.items():
            if int(code) >= 400 and not (path == "/api/v1/health" and code == "503"):
                content = response["content"]
                assert list(content) == [PROBLEM], (method, path, code)
                assert content[PROBLEM]["schema"]["$ref"].endswith("/Problem")
    assert "Retry-After" in schema["paths"]["/api/v1/jobs"]["get"]["responses"]["503"]["headers"]


@pytest.mark.parametrize(
    ("component_name", "field"),
    [
        ("RouteRequestRequest", "model"),
        ("JobRequestRequest", "model"),
        ("JobRequestRequest", "task"),
        ("BatchCreateRequest", "input_file_id"),
    ],
)
def test_strings_the_server_refuses_blank_are_min_length_1(schema, component_name, field):
    assert schema["components"]["schemas"][component_name]["properties"][field]["minLength"] == 1


def test_max_cost_and_tier_document_what_the_server_reads(schema):
    props = schema["components"]["schemas"]["RouteRequestRequest"]["properties"]
    string = next(s for s in props["max_cost"]["anyOf"] if s["type"] == "string")
    assert string["pattern"] == r"^[0-9]{1,12}(\.[0-9]{0,6})?$"  # "" and "." are no amount
    tier = component(schema, props["tier"]["allOf"][0])
    assert set(tier["enum"]) == {
        "flex",
        "standard",
        "priority",
        "ultrafast",
        "default",
        "fast",
        "auto",
    }


def test_blank_model_input_file_and_task_are_refused(api):
    task = {"input_tokens": 100, "output_tokens": 10, "deadline_seconds": 600}
    assert api.post_json("/api/v1/quotes", {**task, "model": ""}).status_code == 400
    assert api.post_json("/api/v1/quotes", {**task, "model": "sol", "task": ""}).status_code == 400
    assert api.post_json("/api/v1/batches", {"input_file_id": ""}).status_code == 400


@pytest.mark.parametrize(
    "query",
    [
        "limit=null",
        "limit=0",
        "limit=-1",
        "limit=1.5",
        "limit=%2B5",  # "+5": int() would read it
        "limit=",
        "limit=2&limit=3",
        "status=",
        "status=queued&status=failed",
        "model=a&model=b",
        "cursor=a&cursor=b",
    ],
)
def test_bad_query_parameters_are_a_400_never_ignored(api, query):
    r = api.get(f"/api/v1/jobs?{query}")
    assert r.status_code == 400 and r["Content-Type"] == PROBLEM, (r.status_code, r.content)
    assert r.json()["parameter"] == query.split("=")[0]


@pytest.mark.parametrize(
    "query", ["limit=null", "status=", "retiring_within_days=", "family=sol&family=luna"]
)
def test_bad_model_list_parameters_are_a_400(client, builtin_catalog, query):
    r = client.get(f"/api/v1/models/?{query}")
    assert r.status_code == 400 and r.json()["parameter"] == query.split("=")[0]


def test_limit_above_the_maximum_is_capped_and_documented(api, client, builtin_catalog, schema):
    assert api.get("/api/v1/jobs?limit=100000").status_code == 200
    assert (
        len(client.get("/api/v1/models/?limit=100000").json()["data"])
        == ModelVersion.objects.count()
    )
    limit = next(
        p for p in schema["paths"]["/api/v1/jobs"]["get"]["parameters"] if p["name"] == "limit"
    )
    assert limit["schema"] == {"type": "integer", "minimum": 1} and "500" in limit["description"]


def test_paging_follows_its_cursor_to_the_end(client, builtin_catalog):
    """Native cursor paging: each `next` link's cursor gives the following page, every
    model once, in order."""
    seen, url = [], "/api/v1/models/?limit=3"
    while url:
        page = client.get(url).json()
        seen += [m["id"] for m in page["data"]]
        url = page["next"]
    assert seen == sorted(ModelVersion.objects.values_list("slug", flat=True))


# --- issue 23: schema-valid requests the API refused, and the links the stateful run follows


def test_strings_of_spaces_alone_are_refused_and_the_schema_says_so(schema, api):
    """minLength 1 let "\\f" through the schema, and DRF trims it to a blank: `\\S` says it."""
    for component_name, field in [
        ("RouteRequestRequest", "model"),
        ("JobRequestRequest", "task"),
        ("BatchCreateRequest", "input_file_id"),
        ("BatchCreateRequest", "start_at"),
    ]:
        prop = schema["components"]["schemas"][component_name]["properties"][field]
        assert prop["pattern"] == r"\S", (component_name, field)
    task = {"input_tokens": 100, "output_tokens": 10, "deadline_seconds": 600}
    assert api.post_json("/api/v1/quotes", {**task, "model": " \f\t"}).status_code == 400
    assert api.post_json("/api/v1/batches", {"input_file_id": "\x0c"}).status_code == 400


def test_an_upload_names_purpose_batch_and_the_schema_says_so(schema, api):
    upload = schema["components"]["schemas"]["FileUploadRequest"]["properties"]["purpose"]
    assert component(schema, upload["allOf"][0])["enum"] == ["batch"]
    assert set(schema["components"]["schemas"]["PurposeEnum"]["enum"]) == {
        "batch",
        "batch_output",
        "batch_error",
    }
    r = api.post("/api/v1/files", {"purpose": "00", "file": io.BytesIO(jsonl(1))})
    assert r.status_code == 400 and r.json()["type"].endswith("/invalid-purpose")


def links(schema, path, method):
    (ok,) = [r for code, r in schema["paths"][path][method]["responses"].items() if code < "300"]
    return ok.get("links", {})


def test_links_name_real_operations_and_their_parameters(schema):
    """Every link names an operationId of the schema and fills that operation's path
    parameters (or, for a POST without any, its body)."""
    by_id = {op["operationId"]: (path, method) for path, method, op in operations(schema)}
    count = 0
    for path, _method, op in operations(schema):
        for response in op["responses"].values():
            for name, link in response.get("links", {}).items():
                count += 1
                target_path, target_method = by_id[link["operationId"]]
                names = {
                    p["name"]
                    for p in schema["paths"][target_path][target_method].get("parameters", [])
                    if p["in"] == "path"
                }
                assert set(link.get("parameters", {})) == names, (path, name)
                if not names:
                    assert target_method == "post" and "requestBody" in link, (path, name)
    assert count >= 12


def test_a_quote_leads_to_its_job_and_a_batch_to_its_input_file(schema, api):
    assert links(schema, "/api/v1/quotes", "post")["CreateJob"] == {
        "operationId": "jobs_create",
        "requestBody": "$request.body",
    }
    assert links(schema, "/api/v1/batches", "post")["GetInputFile"]["parameters"] == {
        "file_id": "$response.body#/input_file_id"
    }
    # The link's premise: a quote's request body is a valid job request.
    quote = {"model": "sol", "input_tokens": 100, "output_tokens": 10, "deadline_seconds": 600}
    assert api.post_json("/api/v1/quotes", quote).status_code == 200
    assert api.post_json("/api/v1/jobs", quote).status_code in (200, 202)
