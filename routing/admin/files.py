"""Admin for files: batch inputs and the output/error files of batches (read-only;
downloaded here)."""

from __future__ import annotations

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import FileResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.urls import path, reverse
from django.utils.html import format_html

from routing.admin.base import ReadOnlyAdmin, short_id, short_text, stacked, when
from routing.models import File


@admin.register(File)
class FileAdmin(ReadOnlyAdmin):
    """Batch inputs and the output/error files of batches (read-only; download here)."""

    list_display = ["file_id", "account", "purpose", "name", "size", "created"]
    list_filter = ["purpose"]
    search_fields = ["id", "filename", "account__name"]
    list_select_related = ["account"]
    date_hierarchy = "created_at"

    @admin.display(description="id", ordering="id")
    def file_id(self, obj: File):
        return short_id(obj.pk)

    @admin.display(description="filename", ordering="filename")
    def name(self, obj: File):
        return short_text(obj.filename, keep=28)

    @admin.display(description="size", ordering="bytes")
    def size(self, obj: File):
        return stacked(f"{obj.lines:,} lines", f"{obj.bytes:,} bytes")

    @admin.display(description="created", ordering="created_at")
    def created(self, obj: File):
        return when(obj.created_at)

    fields = [
        "id",
        "account",
        "purpose",
        "filename",
        "bytes",
        "lines",
        "sha256",
        "created_at",
        "download",
    ]
    readonly_fields = fields

    def get_urls(self):
        return [
            path(
                "<str:pk>/download/",
                self.admin_site.admin_view(self.download_view),
                name="routing_file_download",
            )
        ] + super().get_urls()

    @admin.display(description="content")
    def download(self, obj: File):
        url = reverse("admin:routing_file_download", args=[obj.pk])
        return format_html('<a href="{}">download {}</a>', url, obj.filename)

    def download_view(self, request, pk: str):
        f = get_object_or_404(File, pk=pk)
        if not self.has_view_permission(request, f):
            raise PermissionDenied
        try:
            fh = f.content.open("rb")
        except OSError:
            self.message_user(
                request, f"The content of {f.id} is no longer stored.", level=messages.ERROR
            )
            return HttpResponseRedirect(reverse("admin:routing_file_change", args=[f.pk]))
        return FileResponse(
            fh, as_attachment=True, filename=f.filename, content_type="application/jsonl"
        )
