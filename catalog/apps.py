from django.apps import AppConfig


class CatalogConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "catalog"
    verbose_name = "Model catalog"

    def ready(self) -> None:
        from catalog.problemtypes import PROBLEM_TYPES
        from httpedge import problemtypes

        problemtypes.register(PROBLEM_TYPES)
