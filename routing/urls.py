from django.urls import path

from routing import views

urlpatterns = [
    path("quotes", views.QuoteView.as_view(), name="quote"),
    path("quota", views.QuotaView.as_view(), name="quota"),
]
