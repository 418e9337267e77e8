"""GET and DELETE /v1/responses/{id}: a stored response (`store`, default true) read
back, or forgotten, within its retention (routing.compat.answering.RETENTION). A
response that was not stored, was deleted, belongs to another account or is older than
the retention is a 404, as OpenAI answers."""

from __future__ import annotations

from rest_framework.exceptions import NotFound
from rest_framework.response import Response

from routing.compat import answering
from routing.compat.base import CompatAPIView
from routing.compat.interactive import _response_body
from routing.core.formats import cut
from routing.models import Job


def _stored(account, response_id: str) -> Job:
    job = answering.stored_response(account, response_id)
    if job is None:
        raise NotFound(f"No response found with id '{cut(response_id, 80)}'.")
    return job


class ResponseDetailView(CompatAPIView):
    def get(self, request, response_id: str):
        job = _stored(self.account, response_id)
        if job.status == Job.Status.SUCCEEDED:
            return Response(_response_body(None, job))
        if job.status in Job.ACTIVE:
            return Response(_response_body(None, job, status="in_progress"))
        status = "incomplete" if job.status == Job.Status.CANCELLED else "failed"
        return Response(_response_body(None, job, status, job.delivered_tokens))

    def delete(self, request, response_id: str):
        job = _stored(self.account, response_id)
        answering.forget(job)
        return Response({"id": response_id, "object": "response", "deleted": True})
