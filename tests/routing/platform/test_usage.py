"""Issue 27 item 3: usage and cost, natively (GET /api/v1/usage) and in OpenAI's shapes
(/v1/organization/usage/completions, /v1/organization/costs): buckets, groups, who
sees what, another account's work invisible, and every bad parameter a 400 naming it.
Sums against the ledger under concurrent load: test_usage_ledger_realparts.py."""

import datetime as dt
from decimal import Decimal

import pytest
from django.db.models import Sum
from django.utils import timezone

from routing.accounts.accounts import account_create
from routing.accounts.keys import api_key_create
from routing.jobs import worker
from routing.models import BatchRequest, Job, LedgerEntry
from routing.quota.usage import account_usage, usage_range, usage_totals
from tests.helpers import ApiClient, batch_make, batch_run, job_submit, jsonl

pytestmark = pytest.mark.django_db
PROBLEM = "application/problem+json"


@pytest.fixture(autouse=True)
def fast_time(settings):
    settings.SIM_TIME_SCALE = 1e6


def settle(job_id) -> Job:
    job = worker.job_run(job_id)  # at this time scale, settled in the same write
    if job.status == "running":
        worker.job_finish(job_id, at=job.finishes_at + dt.timedelta(seconds=1))
    done = Job.objects.get(pk=job_id)
    assert done.status == "succeeded"
    return done


@pytest.fixture
def member(account):
    key, raw = api_key_create(account=account, name="ci")
    return key, ApiClient(raw)


@pytest.fixture
def work(api, account, member, settings):
    """Two jobs of the owner's key (one for user u-1), one of the member key on Flex,
    and a two-line batch of the member key: all settled."""
    key, client = member
    jobs = [
        settle(job_submit(api, user="u-1").json()["id"]),
        settle(job_submit(api).json()["id"]),
        settle(job_submit(client, tier="flex", deadline_seconds=86400).json()["id"]),
    ]
    settings.SIM_TIME_SCALE = 1.0  # the batch at the real time scale, run in the past
    t0 = timezone.now() - dt.timedelta(hours=8)
    batch = batch_make(account, jsonl(2, user="u-2"), api_key_id=key.pk, window="8h", at=t0)
    batch_run(batch, t0)
    batch.refresh_from_db()
    assert batch.status == "completed", batch.errors
    return jobs, batch


def charged(account) -> Decimal:
    """What the ledger charged the account (settles and draws)."""
    return LedgerEntry.objects.filter(
        package__account=account, kind__in=["settle", "draw"]
    ).aggregate(s=Sum("delta_spent"))["s"]


def results(body) -> list[dict]:
    return [r for b in body["data"] for r in b["results"]]


def merged(rows, keys: tuple[str, ...], sums: tuple[str, ...]) -> dict:
    """Rows of several buckets merged by their group: the fixture's batch runs 8 hours
    back, so between 00:00 and 08:00 UTC its lines fall in yesterday's day bucket and the
    same group has a row in each (a group-by test is about the groups, not the buckets)."""
    out: dict = {}
    for r in rows:
        k = tuple(r[x] for x in keys)
        if k not in out:
            out[k] = dict(r)
            continue
        for f in sums:
            total = Decimal(str(out[k][f])) + Decimal(str(r[f]))
            out[k][f] = type(r[f])(total) if not isinstance(r[f], str) else str(total)
    return out


def test_totals_equal_the_ledger_and_the_work(api, account, work):
    jobs, batch = work
    body = api.get("/api/v1/usage").json()
    assert body["bucket"] == "day" and len(body["data"]) == 7
    total = body["totals"]
    assert Decimal(total["credits"]) == charged(account) == sum(j.cost for j in jobs) + batch.cost
    assert total["requests"] == 5
    lines = BatchRequest.objects.filter(batch=batch)
    assert total["input_tokens"] == sum(j.input_tokens for j in jobs) + sum(
        r.input_tokens for r in lines
    )
    met = [j.deadline_met for j in jobs]
    assert total["deadline_outcomes"] == 3
    assert total["deadline_met_share"] == round(sum(met) / 3, 6)


def test_group_by_key_model_tier_user(api, account, member, work):
    key, _ = member
    owner = account.api_keys.get(role="admin")
    body = api.get("/api/v1/usage", {"group_by": "tier,key"}).json()
    rows = merged(results(body), ("key_id", "tier"), ("requests",))
    assert set(rows) == {(owner.pk, "standard"), (key.pk, "flex"), (key.pk, "standard")}
    assert rows[(owner.pk, "standard")]["requests"] == 2
    assert rows[(key.pk, "standard")]["requests"] == 2  # the batch's lines
    assert rows[(key.pk, "flex")]["key_name"] == "ci"
    assert "model" not in rows[(key.pk, "flex")] and "user" not in rows[(key.pk, "flex")]
    by_user = merged(
        results(api.get("/api/v1/usage?group_by=user").json()), ("user",), ("requests",)
    )
    users = {k[0]: r["requests"] for k, r in by_user.items()}
    assert users == {"u-1": 1, None: 2, "u-2": 2}
    by = api.get("/api/v1/usage?group_by=model,package").json()
    (row,) = merged(results(by), ("model", "package"), ("credits",)).values()
    assert row["model"] == "gpt-5.6-sol" and row["package"] == "Main (monthly)"
    assert Decimal(row["credits"]) == charged(account)


def test_a_member_key_sees_its_own_usage_only(api, account, member, work):
    key, client = member
    body = client.get("/api/v1/usage").json()
    assert body["scope"] == "keys" and body["key_ids"] == [key.pk]
    assert body["totals"]["requests"] == 3
    owner = account.api_keys.get(role="admin")
    r = client.get(f"/api/v1/usage?key={owner.pk}")
    assert r.status_code == 403 and r["Content-Type"] == PROBLEM
    assert r.json()["type"].endswith("key-not-admin")
    assert client.get(f"/api/v1/usage?key={key.pk}").status_code == 200
    # The admin may pick any key of the account.
    mine = api.get(f"/api/v1/usage?key={owner.pk}").json()
    assert mine["totals"]["requests"] == 2 and mine["scope"] == "keys"


def test_another_accounts_work_is_invisible(api, work):
    other, raw = account_create(name="globex")
    body = ApiClient(raw).get("/api/v1/usage?group_by=key").json()
    assert body["totals"]["requests"] == 0 and results(body) == []
    # Its admin naming our key sees nothing of it either.
    theirs = ApiClient(raw).get(f"/api/v1/usage?key={work[0][0].api_key_id}").json()
    assert theirs["totals"]["requests"] == 0


def test_hourly_buckets_cover_the_range_in_order(api, work):
    now = timezone.now()
    start = (now - dt.timedelta(hours=9)).isoformat()
    body = api.get("/api/v1/usage", {"bucket": "hour", "start": start}).json()
    starts = [b["start"] for b in body["data"]]
    assert len(starts) == 10 and starts == sorted(starts)
    assert sum(r["requests"] for r in results(body)) == 5
    assert body["data"][-1]["results"][0]["requests"] >= 3  # the jobs, just now
    # Unix seconds work too; a range with no work has empty buckets.
    old = int((now - dt.timedelta(days=30)).timestamp())
    empty = api.get(f"/api/v1/usage?start={old}&end={old + 3 * 86400}").json()
    assert len(empty["data"]) in (3, 4) and results(empty) == []


@pytest.mark.parametrize(
    "query, parameter",
    [
        ("bucket=week", "bucket"),
        ("group_by=key,project", "group_by"),
        ("start=yesterday", "start"),
        ("end=99999999999", "end"),
        ("start=2026-01-02&end=2026-01-01", "end"),
        ("bucket=hour&start=2026-01-01&end=2026-03-01", "start"),
        ("key=abc", "key"),
        ("bucket=day&bucket=hour", "bucket"),
        ("start=0001-01-01", "start"),
    ],
)
def test_bad_parameters_are_400s_naming_them(api, query, parameter):
    r = api.get(f"/api/v1/usage?{query}")
    assert r.status_code == 400, r.content
    assert r["Content-Type"] == PROBLEM
    assert r.json()["parameter"] == parameter


def test_usage_without_a_key_is_a_401(client):
    assert client.get("/api/v1/usage").status_code == 401


def test_the_selector_range_rounds_to_whole_buckets():
    at = dt.datetime(2026, 3, 4, 10, 30, tzinfo=dt.UTC)
    start, end = usage_range(bucket="day", start=None, end=at, now=at)
    assert end == dt.datetime(2026, 3, 5, tzinfo=dt.UTC)
    assert start == end - dt.timedelta(days=7)
    start, end = usage_range(bucket="hour", start=at, end=at, now=at)
    assert (start, end) == (at.replace(minute=0), at.replace(minute=0) + dt.timedelta(hours=1))


def test_a_stream_cut_early_counts_what_it_was_charged_for(api, account, settings):
    settings.SIM_TIME_SCALE = 1.0
    job = worker.job_run(job_submit(api).json()["id"])
    from routing.jobs.interactive import stream_settle

    Job.objects.filter(pk=job.pk).update(delivered_tokens=100)
    job.refresh_from_db()
    stream_settle(job, at=job.started_at, status=Job.Status.CANCELLED)
    job.refresh_from_db()
    assert job.cost > 0
    usage = account_usage(
        account_id=account.pk,
        start=job.finished_at - dt.timedelta(days=1),
        end=job.finished_at + dt.timedelta(days=1),
    )
    total = usage_totals(usage)
    assert (total.requests, total.output_tokens, total.credits) == (1, 100, job.cost)
    assert total.credits == charged(account)


# --- OpenAI's shapes ----------------------------------------------------------------------


def oai(client, path, **params):
    return client.get(f"/v1/organization/{path}", params)


def test_completions_usage_in_openais_shape(api, account, member, work):
    key, _ = member
    start = int((timezone.now() - dt.timedelta(days=1)).timestamp())
    r = oai(api, "usage/completions", start_time=start, group_by=["api_key_id", "model"])
    assert r.status_code == 200, r.content
    body = r.json()
    assert body["object"] == "page" and body["has_more"] is False and body["next_page"] is None
    assert all(b["object"] == "bucket" for b in body["data"])
    rows = [x for b in body["data"] for x in b["results"]]
    assert {x["object"] for x in rows} == {"organization.usage.completions.result"}
    by_key = {
        k[0]: x for k, x in merged(rows, ("api_key_id", "model"), ("num_model_requests",)).items()
    }
    assert set(by_key) == {str(key.pk), str(account.api_keys.get(role="admin").pk)}
    assert by_key[str(key.pk)]["num_model_requests"] == 3
    assert by_key[str(key.pk)]["model"] == "gpt-5.6-sol"
    assert by_key[str(key.pk)]["user_id"] is None and by_key[str(key.pk)]["project_id"] is None
    tiers = oai(api, "usage/completions", start_time=start, group_by="service_tier,batch")
    got = {(x["service_tier"], x["batch"]) for b in tiers.json()["data"] for x in b["results"]}
    assert got == {("default", False), ("flex", False), ("default", True)}


def test_costs_in_openais_shape_equal_the_ledger(api, account, work):
    start = int((timezone.now() - dt.timedelta(days=2)).timestamp())
    r = oai(api, "costs", start_time=start, **{"group_by[]": "line_item"})
    assert r.status_code == 200, r.content
    rows = [x for b in r.json()["data"] for x in b["results"]]
    assert {x["object"] for x in rows} == {"organization.costs.result"}
    assert {x["line_item"] for x in rows} == {"gpt-5.6-sol, default", "gpt-5.6-sol, flex"}
    assert {x["amount"]["currency"] for x in rows} == {"usd"}
    total = sum(Decimal(str(x["amount"]["value"])) for x in rows)
    assert total == charged(account)


def test_pages_follow_next_page(api, work):
    start = int((timezone.now() - dt.timedelta(hours=9)).timestamp())
    seen, page, n = [], None, 0
    while True:
        params = {"start_time": start, "bucket_width": "1h", "limit": 2}
        if page:
            params["page"] = page
        body = oai(api, "usage/completions", **params).json()
        seen += body["data"]
        n += 1
        if not body["has_more"]:
            break
        page = body["next_page"]
    assert n == 5 and len(seen) == 10
    assert [b["start_time"] for b in seen] == sorted({b["start_time"] for b in seen})
    assert sum(x["num_model_requests"] for b in seen for x in b["results"]) == 5


@pytest.mark.parametrize(
    "path, query, param",
    [
        ("usage/completions", "", "start_time"),
        ("usage/completions", "start_time=abc", "start_time"),
        ("usage/completions", "start_time=1700000000&bucket_width=1w", "bucket_width"),
        ("costs", "start_time=1700000000&bucket_width=1h", "bucket_width"),
        ("usage/completions", "start_time=1780000000&end_time=1770000000", "end_time"),
        ("usage/completions", "start_time=1780000000&group_by=project", "group_by"),
        ("usage/completions", "start_time=1780000000&limit=500", "limit"),
        ("usage/completions", "start_time=1780000000&page=xyz", "page"),
        ("usage/completions", "start_time=1780000000&project_ids=p1", "project_ids"),
        ("costs", "start_time=1000000000", "start_time"),
    ],
)
def test_openai_shaped_400s_name_the_parameter(api, path, query, param):
    r = api.get(f"/v1/organization/{path}?{query}")
    assert r.status_code == 400, r.content
    err = r.json()["error"]
    assert err["param"] == param and err["type"] == "invalid_request_error"


def test_openai_shaped_usage_hides_other_keys_from_a_member(api, account, member, work):
    key, client = member
    start = int((timezone.now() - dt.timedelta(days=1)).timestamp())
    body = oai(client, "usage/completions", start_time=start, group_by="api_key_id").json()
    assert {x["api_key_id"] for b in body["data"] for x in b["results"]} == {str(key.pk)}
    owner = account.api_keys.get(role="admin")
    r = oai(client, "usage/completions", start_time=start, api_key_ids=f"key_{owner.pk}")
    assert r.status_code == 403 and r.json()["error"]["code"] == "key_not_admin"


# --- The admin's CSV ----------------------------------------------------------------------


def test_the_admin_exports_usage_as_csv(admin_client, account, member, work):
    import csv
    import io

    key, _ = member
    page = admin_client.get("/admin/routing/account/")
    assert f"/admin/routing/account/{account.pk}/usage/" in page.content.decode()
    form = admin_client.get(f"/admin/routing/account/{account.pk}/usage/")
    assert form.status_code == 200 and b"Download CSV" in form.content
    today = timezone.now().date()
    r = admin_client.get(
        f"/admin/routing/account/{account.pk}/usage/",
        {
            "start": today - dt.timedelta(days=1),
            "end": today,
            "bucket": "day",
            "group_by": ["key", "tier"],
        },
    )
    assert r.status_code == 200 and r["Content-Type"].startswith("text/csv")
    assert "attachment" in r["Content-Disposition"]
    rows = list(csv.DictReader(io.StringIO(r.content.decode())))
    assert list(rows[0]) == [
        "bucket_start",
        "bucket_end",
        "key_id",
        "key_name",
        "tier",
        "requests",
        "input_tokens",
        "output_tokens",
        "credits",
        "deadline_met_share",
        "deadline_outcomes",
    ]
    assert sum(Decimal(x["credits"]) for x in rows) == charged(account)
    assert sum(int(x["requests"]) for x in rows) == 5
    assert {x["key_name"] for x in rows} == {"default", "ci"}
    # One key only; and a range the form refuses is shown again with the reason.
    mine = admin_client.get(
        f"/admin/routing/account/{account.pk}/usage/",
        {"start": today - dt.timedelta(days=1), "end": today, "bucket": "day", "keys": key.pk},
    )
    assert sum(int(x["requests"]) for x in csv.DictReader(io.StringIO(mine.content.decode()))) == 3
    bad = admin_client.get(
        f"/admin/routing/account/{account.pk}/usage/",
        {"start": today, "end": today - dt.timedelta(days=3), "bucket": "day"},
    )
    assert bad.status_code == 200 and b"end must be after start" in bad.content


def test_the_csv_is_for_staff_only(client, account, django_user_model):
    url = f"/admin/routing/account/{account.pk}/usage/"
    assert client.get(url).status_code == 302  # to the login
    user = django_user_model.objects.create_user("visitor", password="pw-visitor-1")
    client.force_login(user)
    assert client.get(url).status_code == 302  # not staff: the login again


def test_usage_takes_a_few_grouped_queries_whatever_the_work(
    api, work, django_assert_max_num_queries
):
    # Auth (key, account) + one grouped query per source (jobs, batch lines) + the names
    # of models, tiers, keys and packages: the same with 5 or 5 million rows.
    with django_assert_max_num_queries(9):
        r = api.get("/api/v1/usage?group_by=key,model,tier,package,user")
    assert r.status_code == 200 and r.json()["totals"]["requests"] == 5
