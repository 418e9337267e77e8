from django.urls import path

from routing.api import batches, files, jobs, notices, quota, quotes

urlpatterns = [
    path("quotes", quotes.QuoteView.as_view(), name="quote"),
    path("quota", quota.QuotaView.as_view(), name="quota"),
    path("jobs", jobs.JobListView.as_view(), name="job-list"),
    path("jobs/<str:job_id>", jobs.JobDetailView.as_view(), name="job-detail"),
    path("jobs/<str:job_id>/cancel", jobs.JobCancelView.as_view(), name="job-cancel"),
    path("notices", notices.NoticeListView.as_view(), name="notice-list"),
    path("files", files.FileListView.as_view(), name="file-list"),
    path("files/<str:file_id>", files.FileDetailView.as_view(), name="file-detail"),
    path("files/<str:file_id>/content", files.FileContentView.as_view(), name="file-content"),
    path("batches", batches.BatchListView.as_view(), name="batch-list"),
    path("batches/<str:batch_id>", batches.BatchDetailView.as_view(), name="batch-detail"),
    path("batches/<str:batch_id>/cancel", batches.BatchCancelView.as_view(), name="batch-cancel"),
]
