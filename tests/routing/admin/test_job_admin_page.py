"""Every job's admin change page opens (issue 23, finding 4: it raised a TypeError for
every job), whatever its state."""

import pytest

from routing.models import Job
from tests.helpers import job_submit

pytestmark = pytest.mark.django_db


def test_the_change_page_of_a_job_in_each_state_opens(admin_client, api):
    assert job_submit(api).status_code in (200, 201, 202)
    job = Job.objects.get()
    for state in Job.Status.values:
        Job.objects.filter(pk=job.pk).update(status=state)
        page = admin_client.get(f"/admin/routing/job/{job.pk}/change/")
        assert page.status_code == 200, state
        assert str(job.pk) in page.content.decode()
