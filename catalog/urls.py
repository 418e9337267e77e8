from django.urls import path

from catalog import views

urlpatterns = [
    path("models/", views.ModelListView.as_view(), name="model-list"),
    path("models/<str:slug>/", views.ModelDetailView.as_view(), name="model-detail"),
    path("tiers/", views.TierListView.as_view(), name="tier-list"),
    path("health", views.HealthView.as_view(), name="health"),
    path("ping", views.PingView.as_view(), name="ping"),
]
