from django.apps import AppConfig


class RoutingConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "routing"
    verbose_name = "Routing, accounts and quota"

    def ready(self) -> None:
        from catalog.lifecycle import model_retired, retirement_announced
        from httpedge import problemtypes
        from routing import tasks  # noqa: F401  (registers the tasks services send by name)
        from routing.accounts import keys
        from routing.api import schema  # noqa: F401  (registers the OpenAPI auth scheme)
        from routing.api.problemtypes import PROBLEM_TYPES
        from routing.quota import packages
        from routing.retirement.day import on_model_retired
        from routing.retirement.notices import on_retirement_announced
        from routing.router import snapshot

        model_retired.connect(on_model_retired, dispatch_uid="routing-quota-on-retirement")
        # Retired now: the affected accounts hear of it too.
        model_retired.connect(on_retirement_announced, dispatch_uid="routing-notice-retired")
        retirement_announced.connect(on_retirement_announced, dispatch_uid="routing-notices")
        problemtypes.register(PROBLEM_TYPES)
        # The memos' receivers (routing.core.shared.SharedMemo): a change drops them.
        snapshot.connect_receivers()
        packages.connect_receivers()
        keys.connect_receivers()
