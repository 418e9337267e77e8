"""OpenAPI: the bearer key scheme (imported by RoutingConfig.ready)."""

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
