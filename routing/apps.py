from django.apps import AppConfig


class RoutingConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "routing"
    verbose_name = "Routing, accounts and quota"

    def ready(self) -> None:
        from routing import schema  # noqa: F401  (registers the OpenAPI auth scheme)
