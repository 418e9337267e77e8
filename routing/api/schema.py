"""OpenAPI: the bearer key scheme (imported by RoutingConfig.ready) and the links
between the client resources (a postprocessing hook in SPECTACULAR_SETTINGS)."""

from drf_spectacular.extensions import OpenApiAuthenticationExtension


class BearerKeyScheme(OpenApiAuthenticationExtension):
    target_class = "routing.accounts.auth.BearerKeyAuthentication"
    name = "ApiKey"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "An API key from `manage.py create_account`: `Authorization: Bearer mlr_...`",
        }


# OpenAPI links between the client resources: what a created job, file or batch leads to
# (the stateful schemathesis run in .ci/schemathesis.sh follows them, and infers more from
# list responses and path names). Keyed by (path, method) of the operation whose 2xx
# response the link starts from; each link names the target operation by path and method
# and fills its path parameters (or, for a POST without any, its body) with runtime
# expressions: a field of the response, or the whole request body.
_JOB = {"job_id": "$response.body#/id"}
_FILE = {"file_id": "$response.body#/id"}
_BATCH = {"batch_id": "$response.body#/id"}
CREATED_LINKS = {
    ("/api/v1/quotes", "post"): {
        # A quote's task, run: the job fields are the quote's plus an optional prompt.
        "CreateJob": ("/api/v1/jobs", "post", "$request.body"),
    },
    ("/api/v1/jobs", "post"): {
        "GetJob": ("/api/v1/jobs/{job_id}", "get", _JOB),
        "CancelJob": ("/api/v1/jobs/{job_id}/cancel", "post", _JOB),
    },
    ("/api/v1/jobs/{job_id}/cancel", "post"): {
        "GetJob": ("/api/v1/jobs/{job_id}", "get", _JOB),
    },
    ("/api/v1/files", "post"): {
        "GetFile": ("/api/v1/files/{file_id}", "get", _FILE),
        "GetFileContent": ("/api/v1/files/{file_id}/content", "get", _FILE),
        "DeleteFile": ("/api/v1/files/{file_id}", "delete", _FILE),
        "CreateBatch": ("/api/v1/batches", "post", {"input_file_id": "$response.body#/id"}),
    },
    ("/api/v1/batches", "post"): {
        "GetBatch": ("/api/v1/batches/{batch_id}", "get", _BATCH),
        "CancelBatch": ("/api/v1/batches/{batch_id}/cancel", "post", _BATCH),
        "GetInputFile": (
            "/api/v1/files/{file_id}",
            "get",
            {"file_id": "$response.body#/input_file_id"},
        ),
    },
    ("/api/v1/batches/{batch_id}/cancel", "post"): {
        "GetBatch": ("/api/v1/batches/{batch_id}", "get", _BATCH),
    },
}


def add_links(result, generator, request, public):
    """drf-spectacular postprocessing hook: CREATED_LINKS on the 2xx responses."""
    paths = result.get("paths", {})
    for (path, method), links in CREATED_LINKS.items():
        op = paths.get(path, {}).get(method)
        if op is None:
            continue
        built = {}
        for name, (target_path, target_method, values) in links.items():
            target = paths.get(target_path, {}).get(target_method)
            if target is None:
                continue
            link = {"operationId": target["operationId"]}
            if target_method == "post" and "{" not in target_path:
                link["requestBody"] = values if isinstance(values, str) else dict(values)
            else:
                link["parameters"] = dict(values)
            built[name] = link
        for code, response in op["responses"].items():
            if code.startswith("2") and built:
                response["links"] = built
    return result
