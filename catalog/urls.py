from catalog import views
from httpedge.paths import both

urlpatterns = [
    *both("models/", views.ModelListView.as_view(), name="model-list"),
    *both("models/<str:slug>/", views.ModelDetailView.as_view(), name="model-detail"),
    *both("tiers/", views.TierListView.as_view(), name="tier-list"),
    *both("health", views.HealthView.as_view(), name="health"),
    *both("ping", views.PingView.as_view(), name="ping"),
]
