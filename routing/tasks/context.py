"""The request id follows a request into its Celery tasks (issue 30): the publisher puts
the current id (httpedge.requestid) in the task message's headers, and the worker makes
it the log context while the task runs, with the task's id and name, so the worker's log
lines for a job's run and finish carry the id of the `POST /api/v1/jobs` that made it.
A task sent by a task carries the same id on; one sent outside any request (beat's
sweeps, a management command) gets an id of its own at publication.
Connected in every process that imports routing.tasks (web and workers: routing.apps)."""

from __future__ import annotations

from celery.signals import before_task_publish, task_postrun, task_prerun

from httpedge import requestid

HEADER = "request_id"


@before_task_publish.connect(dispatch_uid="requestid-publish")
def stamp_request_id(headers=None, **_kwargs) -> None:
    if headers is not None and not requestid.accepted(headers.get(HEADER)):
        current = requestid.current()
        headers[HEADER] = current if requestid.accepted(current) else requestid.new_id()


@task_prerun.connect(dispatch_uid="requestid-prerun")
def bind_request_id(task_id=None, task=None, **_kwargs) -> None:
    # An eager task (tests, CELERY_TASK_ALWAYS_EAGER) is not published: it keeps the
    # caller's id, as it runs inside the caller.
    sent = requestid.accepted(getattr(task.request, HEADER, None))
    current = requestid.current()
    rid = sent or (current if requestid.accepted(current) else requestid.new_id())
    task.request.requestid_tokens = requestid.bind(
        rid, task_id=str(task_id or task.request.id), task_name=task.name
    )


@task_postrun.connect(dispatch_uid="requestid-postrun")
def unbind_request_id(task=None, **_kwargs) -> None:
    tokens = getattr(task.request, "requestid_tokens", None)
    if tokens is not None:
        task.request.requestid_tokens = None
        requestid.unbind(tokens)
