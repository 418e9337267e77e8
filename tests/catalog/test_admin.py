import datetime as dt

import pytest

from catalog import lifecycle
from catalog.models import LifecycleChange, ModelVersion, Tier

pytestmark = pytest.mark.django_db

CHANGELIST = "/admin/catalog/modelversion/"


def pk(slug):
    return ModelVersion.objects.get(slug=slug).pk


def test_admin_is_for_staff_only(client, django_user_model, builtin_catalog):
    assert client.get(CHANGELIST).status_code == 302  # to the login page
    user = django_user_model.objects.create_user("eve", password="pw-eve-123456")
    client.force_login(user)
    r = client.get(CHANGELIST)
    assert r.status_code == 302 and "/admin/login/" in r["Location"]


def test_changelist_shows_status_retirement_and_successor(admin_client, builtin_catalog):
    r = admin_client.get(CHANGELIST)
    assert r.status_code == 200
    html = r.content.decode()
    assert 'data-status="retired"' in html and "gpt-5.6-sol" in html and "2026-09-18" in html


@pytest.mark.parametrize(
    ("query", "present", "absent"),
    [
        ("status=retired", "gpt-5.3-codex-spark", "gpt-5.6-terra"),
        ("status=active", "gpt-5.6-terra", "gpt-5.3-codex-spark"),
        ("family__id__exact=FAMILY", "neohorse-1-4b", "gpt-5.6-sol"),
        ("vendor=DeepSeek", "deepseek-v4.1-flash", "gpt-5.6-sol"),
        ("retires_on__year=2026&retires_on__month=6", "gpt-5.2", "gpt-5.4-mini"),
    ],
)
def test_changelist_filters(admin_client, builtin_catalog, query, present, absent):
    from catalog.models import ModelFamily

    query = query.replace("FAMILY", str(ModelFamily.objects.get(slug="neohorse-1").pk))
    html = admin_client.get(f"{CHANGELIST}?{query}").content.decode()
    assert f">{present}<" in html
    assert f">{absent}<" not in html


def test_retiring_within_30_days_filter(admin_client, builtin_catalog):
    lifecycle.model_schedule_retirement(
        notice_override="short notice in a test",
        model=ModelVersion.objects.get(slug="gpt-5.6-luna"),
        retires_on=lifecycle.utc_today() + dt.timedelta(days=10),
        successor=None,
        actor="t",
    )
    html = admin_client.get(f"{CHANGELIST}?status=retiring-30d").content.decode()
    assert ">gpt-5.6-luna<" in html and ">gpt-5.6-sol<" not in html


def test_schedule_retirement_asks_for_date_and_successor_first(admin_client, builtin_catalog):
    r = admin_client.post(
        CHANGELIST, {"action": "schedule_retirement", "_selected_action": [pk("gpt-5.6-luna")]}
    )
    assert r.status_code == 200
    html = r.content.decode()
    assert 'name="retires_on"' in html and 'name="successor"' in html
    assert ModelVersion.objects.get(slug="gpt-5.6-luna").retires_on is None


def test_schedule_retirement_applies_and_records_history(admin_client, builtin_catalog):
    retires = lifecycle.utc_today() + dt.timedelta(days=200)
    r = admin_client.post(
        CHANGELIST,
        {
            "action": "schedule_retirement",
            "_selected_action": [pk("gpt-5.6-luna")],
            "apply": "1",
            "retires_on": retires.isoformat(),
            "successor": pk("gpt-5.6-terra"),
            "successor_tier": Tier.objects.get(slug="flex").pk,
            "reason": "Terra flex is cheaper",
        },
        follow=True,
    )
    assert r.status_code == 200
    assert "Retirement scheduled: gpt-5.6-luna" in r.content.decode()
    luna = ModelVersion.objects.get(slug="gpt-5.6-luna")
    assert luna.retires_on == retires and luna.successor.slug == "gpt-5.6-terra"
    assert luna.retirement_announced_on == lifecycle.utc_today()
    change = LifecycleChange.objects.get(model=luna, field="retires_on")
    assert change.actor == "admin:admin" and change.changed_by.username == "admin"
    assert change.reason == "Terra flex is cheaper"


def test_an_impossible_retirement_is_refused_with_a_message(admin_client, builtin_catalog):
    r = admin_client.post(
        CHANGELIST,
        {
            "action": "schedule_retirement",
            "_selected_action": [pk("gpt-5.6-luna")],
            "apply": "1",
            "retires_on": (lifecycle.utc_today() + dt.timedelta(days=30)).isoformat(),
            "successor": pk("gpt-5.2"),  # retired long ago
        },
        follow=True,
    )
    html = r.content.decode()
    assert "Not changed, gpt-5.6-luna: Successor gpt-5.2 retires on 2026-06-02" in html
    assert ModelVersion.objects.get(slug="gpt-5.6-luna").retires_on is None


def test_a_date_in_the_past_is_refused_on_the_form(admin_client, builtin_catalog):
    r = admin_client.post(
        CHANGELIST,
        {
            "action": "schedule_retirement",
            "_selected_action": [pk("gpt-5.6-luna")],
            "apply": "1",
            "retires_on": "2020-01-01",
        },
    )
    assert r.status_code == 200 and "use &#x27;Retire now&#x27; instead" in r.content.decode()
    assert ModelVersion.objects.get(slug="gpt-5.6-luna").retires_on is None


def test_retire_now_and_cancel_actions(admin_client, builtin_catalog):
    lifecycle.model_schedule_retirement(
        notice_override="short notice in a test",
        model=ModelVersion.objects.get(slug="gpt-5.6-terra"),
        retires_on=lifecycle.utc_today() + dt.timedelta(days=90),
        successor=None,
        actor="t",
    )
    admin_client.post(
        CHANGELIST,
        {"action": "cancel_retirement", "_selected_action": [pk("gpt-5.6-terra")], "apply": "1"},
    )
    assert ModelVersion.objects.get(slug="gpt-5.6-terra").retires_on is None

    retire = {
        "action": "retire_now",
        "_selected_action": [pk("neohorse-1-4b")],
        "apply": "1",
        "reason": "licence withdrawn",
    }
    r = admin_client.post(CHANGELIST, retire, follow=True)
    assert "gets at least 182 days&#x27; notice; 0 given" in r.content.decode()
    assert ModelVersion.objects.get(slug="neohorse-1-4b").retires_on is None
    r = admin_client.post(
        CHANGELIST, retire | {"notice_override": "licence withdrawn by the vendor"}, follow=True
    )
    assert "Retired: neohorse-1-4b" in r.content.decode()
    m = ModelVersion.objects.get(slug="neohorse-1-4b")
    assert lifecycle.model_status(m) == "retired"
    reason = LifecycleChange.objects.get(model=m, field="retires_on").reason
    assert reason == (
        "notice override (0 of 182 days): licence withdrawn by the vendor; licence withdrawn"
    )


def test_change_form_refuses_retirement_before_release(admin_client, builtin_catalog):
    luna = ModelVersion.objects.get(slug="gpt-5.6-luna")
    url = f"/admin/catalog/modelversion/{luna.pk}/change/"
    page = admin_client.get(url)
    form = page.context["adminform"].form
    data = {k: v for k, v in form.initial.items() if v is not None}
    data.update(
        {
            "family": luna.family_id,
            "input_modalities": ["text", "image"],
            "estimated_fields": [],
            "retires_on": "2026-01-01",
            "retirement_announced_on": "2025-12-01",
        }
    )
    for prefix in ("deployments", "prices", "benchmarks", "speeds", "history"):
        data.update({f"{prefix}-TOTAL_FORMS": "0", f"{prefix}-INITIAL_FORMS": "0"})
    r = admin_client.post(url, data)
    assert r.status_code == 200
    assert "cannot retire on 2026-01-01 before its release on 2026-07-16" in r.content.decode()
    luna.refresh_from_db()
    assert luna.retires_on is None


def test_change_form_lifecycle_edit_goes_to_the_history(admin_client, builtin_catalog):
    luna = ModelVersion.objects.get(slug="gpt-5.6-luna")
    url = f"/admin/catalog/modelversion/{luna.pk}/change/"
    form = admin_client.get(url).context["adminform"].form
    data = {k: v for k, v in form.initial.items() if v is not None}
    data.update(
        {
            "family": luna.family_id,
            "input_modalities": ["text", "image"],  # ticked boxes, not JSON text
            "estimated_fields": ["released_on", "layers"],
            "retires_on": "2027-12-01",
        }
    )
    for prefix in ("deployments", "prices", "benchmarks", "speeds", "history"):
        data.update({f"{prefix}-TOTAL_FORMS": "0", f"{prefix}-INITIAL_FORMS": "0"})
    r = admin_client.post(url, data)
    assert r.status_code == 302, (
        r.context["adminform"].form.errors,
        r.context["inline_admin_formsets"]
        and [f.formset.errors for f in r.context["inline_admin_formsets"]],
    )
    luna.refresh_from_db()
    assert luna.retires_on == dt.date(2027, 12, 1)
    assert luna.input_modalities == ["text", "image"]
    assert luna.estimated_fields == ["released_on", "layers"]
    assert LifecycleChange.objects.filter(
        model=luna, field="retires_on", actor="admin:admin"
    ).exists()


def test_history_is_read_only_in_the_admin(admin_client, builtin_catalog):
    r = admin_client.get("/admin/catalog/lifecyclechange/")
    assert r.status_code == 200
    assert admin_client.get("/admin/catalog/lifecyclechange/add/").status_code == 403
