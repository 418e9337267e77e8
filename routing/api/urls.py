from django.urls import path

from routing.api import batches as batch_views
from routing.api import views

urlpatterns = [
    path("quotes", views.QuoteView.as_view(), name="quote"),
    path("quota", views.QuotaView.as_view(), name="quota"),
    path("jobs", views.JobListView.as_view(), name="job-list"),
    path("jobs/<str:job_id>", views.JobDetailView.as_view(), name="job-detail"),
    path("jobs/<str:job_id>/cancel", views.JobCancelView.as_view(), name="job-cancel"),
    path("notices", views.NoticeListView.as_view(), name="notice-list"),
    path("files", batch_views.FileListView.as_view(), name="file-list"),
    path("files/<str:file_id>", batch_views.FileDetailView.as_view(), name="file-detail"),
    path("files/<str:file_id>/content", batch_views.FileContentView.as_view(), name="file-content"),
    path("batches", batch_views.BatchListView.as_view(), name="batch-list"),
    path("batches/<str:batch_id>", batch_views.BatchDetailView.as_view(), name="batch-detail"),
    path(
        "batches/<str:batch_id>/cancel", batch_views.BatchCancelView.as_view(), name="batch-cancel"
    ),
]
