from httpedge.paths import both
from routing.api import batches, files, jobs, keys, notices, quota, quotes, usage, webhooks

urlpatterns = [
    *both("quotes", quotes.QuoteView.as_view(), name="quote"),
    *both("quota", quota.QuotaView.as_view(), name="quota"),
    *both("jobs", jobs.JobListView.as_view(), name="job-list"),
    *both("jobs/<str:job_id>", jobs.JobDetailView.as_view(), name="job-detail"),
    *both("jobs/<str:job_id>/cancel", jobs.JobCancelView.as_view(), name="job-cancel"),
    *both("notices", notices.NoticeListView.as_view(), name="notice-list"),
    *both("files", files.FileListView.as_view(), name="file-list"),
    *both("files/<str:file_id>", files.FileDetailView.as_view(), name="file-detail"),
    *both("files/<str:file_id>/content", files.FileContentView.as_view(), name="file-content"),
    *both("batches", batches.BatchListView.as_view(), name="batch-list"),
    *both("batches/<str:batch_id>", batches.BatchDetailView.as_view(), name="batch-detail"),
    *both("batches/<str:batch_id>/cancel", batches.BatchCancelView.as_view(), name="batch-cancel"),
    *both("usage", usage.UsageView.as_view(), name="usage"),
    *both("keys", keys.KeyListView.as_view(), name="key-list"),
    *both("keys/<str:key_id>", keys.KeyDetailView.as_view(), name="key-detail"),
    *both("keys/<str:key_id>/rotate", keys.KeyRotateView.as_view(), name="key-rotate"),
    *both("webhooks", webhooks.WebhookListView.as_view(), name="webhook-list"),
    *both(
        "webhooks/<str:endpoint_id>", webhooks.WebhookDetailView.as_view(), name="webhook-detail"
    ),
    *both(
        "webhooks/<str:endpoint_id>/rotate-secret",
        webhooks.WebhookRotateView.as_view(),
        name="webhook-rotate-secret",
    ),
    *both(
        "webhooks/<str:endpoint_id>/deliveries",
        webhooks.WebhookDeliveriesView.as_view(),
        name="webhook-deliveries",
    ),
    *both(
        "webhooks/<str:endpoint_id>/test", webhooks.WebhookTestView.as_view(), name="webhook-test"
    ),
]
