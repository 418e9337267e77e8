"""The one exception -> problem map (routing.api.errors): batch and file refusals get
their HTTP status from their slug alone, never from the exception."""

from __future__ import annotations

import pytest
from django.test import RequestFactory

from routing.api.errors import DOMAIN_ERRORS, problem_for
from routing.batches.errors import BatchError, BatchNotCancellable
from routing.batches.files import FileRejected
from routing.jobs.errors import IdempotencyConflict, IdempotencyMismatch, JobNotCancellable


@pytest.mark.parametrize(
    "code, status, title",
    [
        ("file-not-found", 404, "Not found"),
        ("batch-not-cancellable", 409, "Conflict"),
        ("batch-not-ended", 409, "Conflict"),
        ("nothing-to-retry", 409, "Conflict"),
        ("file-too-large", 413, "Too large"),
        ("too-many-requests", 413, "Too large"),
        ("invalid-batch", 400, "Invalid batch request"),
        ("invalid-purpose", 400, "Invalid batch request"),
        ("empty-file", 400, "Invalid batch request"),
    ],
)
def test_batch_and_file_refusals_take_their_status_from_the_slug(code, status, title):
    request = RequestFactory().post("/api/v1/batches")
    for exc in (BatchError("no", code=code, param="p"), FileRejected("no", code=code)):
        problem = problem_for(exc, request=request)
        assert (problem.status_code, problem.slug, problem.title) == (status, code, title)
        assert str(problem.detail) == "no"
    assert problem_for(BatchError("no", code=code, param="p"), request=request).extensions == {
        "parameter": "p"
    }


@pytest.mark.parametrize(
    "exc, status, slug",
    [
        (BatchNotCancellable("no", code="batch-not-cancellable"), 409, "batch-not-cancellable"),
        (IdempotencyConflict("busy"), 409, "idempotency-conflict"),
        (IdempotencyMismatch("other body"), 422, "idempotency-key-reused"),
        (JobNotCancellable("done"), 409, "job-not-cancellable"),
    ],
)
def test_subclasses_and_fixed_problems(exc, status, slug):
    assert isinstance(exc, DOMAIN_ERRORS)
    problem = problem_for(exc, request=RequestFactory().get("/"))
    assert (problem.status_code, problem.slug, str(problem.detail)) == (status, slug, str(exc))
