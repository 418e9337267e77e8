"""Hostile admin URLs, opened by a logged-in staff user, never give a 500 (issue 23,
finding 4): a NUL byte in the path or the query, and ids that overflow a 64-bit integer,
are a plain 400 or 404 page."""

from __future__ import annotations

import pytest
from django.test import Client

from tests.helpers import job_submit

pytestmark = pytest.mark.django_db

HUGE = "99999999999999999999999"  # past a 64-bit integer

HOSTILE = [
    f"/admin/routing/job/{HUGE}/change/",
    f"/admin/routing/account/{HUGE}/change/",
    f"/admin/routing/account/{HUGE}/quote/",
    "/admin/routing/account/987654/quote/",  # an account that is not there
    f"/admin/routing/account/{HUGE}/usage/",
    "/admin/routing/account/987654/usage/",
    f"/admin/routing/account/1/usage/?start=2026-01-01&end=2026-01-02&bucket=day&keys={HUGE}",
    "/admin/routing/account/1/usage/?start=9999-12-31&end=9999-12-31&bucket=day",
    "/admin/routing/account/1/usage/?start=0001-01-01&end=0001-01-01&bucket=hour",
    "/admin/routing/account/1/usage/?start=2026-01-01&end=2026-01-02&bucket=%00",
    "/admin/routing/account/1/usage/?start=2026-01-01&end=2026-01-02&group_by=nope",
    f"/admin/routing/account/{HUGE}/history/",
    f"/admin/routing/account/{HUGE}/delete/",
    f"/admin/routing/quotapackage/{HUGE}/change/",
    f"/admin/routing/batch/{HUGE}/change/",
    f"/admin/routing/notice/{HUGE}/change/",
    f"/admin/catalog/modelversion/{HUGE}/change/",
    f"/admin/catalog/hardwarepool/{HUGE}/change/",
    f"/admin/r/{HUGE}/{HUGE}/",
    "/admin/r/1/%00/",
    "/admin/routing/account/-1/change/",
    "/admin/routing/account/1e309/change/",
    f"/admin/routing/account/?id__exact={HUGE}",
    f"/admin/routing/job/?account__id__exact={HUGE}",
    f"/admin/routing/job/?p={HUGE}",
    f"/admin/routing/job/?created_at__year={HUGE}",
    "/admin/routing/job/?created_at__year=2026&created_at__month=13",
    "/admin/routing/job/?o=99999",
    "/admin/routing/job/%00/change/",
    "/admin/routing/job/?q=%00",
    "/admin/routing/job/?status__exact=a%00b",
    "/admin/routing/account/?q=%00",
    "/admin/routing/batch/%00/change/",
    "/admin/routing/file/%00/download/",
    "/admin/routing/file/file-nothere/download/",
    "/admin/routing/retirementapplication/impact/%00/",
    "/admin/routing/retirementapplication/impact/no-such-model/",
    "/admin/%00/",
    "/admin/login/?next=%00",
    "/%00",  # outside the admin: problem+json, as every other unknown path
    "/problems/%00",
]


@pytest.fixture
def staff(admin_user):
    client = Client(raise_request_exception=False)
    client.force_login(admin_user)
    return client


@pytest.mark.parametrize("url", HOSTILE)
def test_a_hostile_admin_url_is_never_a_500(staff, api, url):
    job_submit(api)  # a job, so the job pages have something to list
    r = staff.get(url)
    assert r.status_code < 500, (url, r.status_code, r.content[:500])
    if r.status_code in (400, 404) and url.startswith("/admin/"):
        # A plain page, not the API's problem+json.
        assert r["Content-Type"].startswith("text/html"), url
