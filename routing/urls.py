from django.urls import path

from routing import views

urlpatterns = [
    path("quotes", views.QuoteView.as_view(), name="quote"),
    path("quota", views.QuotaView.as_view(), name="quota"),
    path("jobs", views.JobListView.as_view(), name="job-list"),
    path("jobs/<str:job_id>", views.JobDetailView.as_view(), name="job-detail"),
    path("jobs/<str:job_id>/cancel", views.JobCancelView.as_view(), name="job-cancel"),
    path("notices", views.NoticeListView.as_view(), name="notice-list"),
]
