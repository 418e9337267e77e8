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
# (the stateful schemathesis run in .ci/schemathesis.sh follows them). Keyed by
# (path, method) of the creating operation; each link names the target operation by path
# and method and fills its parameters from the created object's `id`.
CREATED_LINKS = {
    ("/api/v1/jobs", "post"): {
        "GetJob": ("/api/v1/jobs/{job_id}", "get", {"job_id": "$response.body#/id"}),
        "CancelJob": ("/api/v1/jobs/{job_id}/cancel", "post", {"job_id": "$response.body#/id"}),
    },
    ("/api/v1/files", "post"): {
        "GetFile": ("/api/v1/files/{file_id}", "get", {"file_id": "$response.body#/id"}),
        "GetFileContent": (
            "/api/v1/files/{file_id}/content",
            "get",
            {"file_id": "$response.body#/id"},
        ),
        "DeleteFile": ("/api/v1/files/{file_id}", "delete", {"file_id": "$response.body#/id"}),
        "CreateBatch": ("/api/v1/batches", "post", {"input_file_id": "$response.body#/id"}),
    },
    ("/api/v1/batches", "post"): {
        "GetBatch": ("/api/v1/batches/{batch_id}", "get", {"batch_id": "$response.body#/id"}),
        "CancelBatch": (
            "/api/v1/batches/{batch_id}/cancel",
            "post",
            {"batch_id": "$response.body#/id"},
        ),
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
                link["requestBody"] = {k: v for k, v in values.items()}
            else:
                link["parameters"] = dict(values)
            built[name] = link
        for code, response in op["responses"].items():
            if code.startswith("2") and built:
                response["links"] = built
    return result
