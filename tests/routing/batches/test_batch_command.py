"""`manage.py batch`: submit prints the plan or the refusal, watch shows progress."""

import datetime as dt
import json
from decimal import Decimal
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from routing.accounts.accounts import account_create
from routing.batches.finish import batch_finalize
from routing.batches.runner import batch_advance
from routing.models import Batch
from tests.helpers import jsonl_file

pytestmark = pytest.mark.django_db

SMALL = {"model": "sol", "input_tokens": 2000, "output_tokens": 1000, "turns": 1}
# Long enough that no plan finishes 50 of them in a minute.
BIG = {"model": "sol", "input_tokens": 100000, "output_tokens": 100000, "turns": 50}


@pytest.fixture(autouse=True)
def media(settings, tmp_path):
    settings.MEDIA_ROOT = tmp_path / "media"


def run(*args) -> str:
    out = StringIO()
    call_command("batch", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


def submit(tmp_path, n=20, body=SMALL, *args) -> tuple[Batch, str]:
    text = run("submit", jsonl_file(tmp_path, n, body=body), "--account", "acme", *args)
    return Batch.objects.get(), text


def drive(batch: Batch) -> Batch:
    """What the workers do: advance the chain (simulated time) until the batch ends."""
    at = timezone.now()
    for _ in range(100):
        r = batch_advance(batch.pk, at=at, force=True)
        batch.refresh_from_db()
        if batch.status == Batch.Status.FINALIZING:
            batch_finalize(batch.pk, at=at)
            break
        if batch.status in Batch.TERMINAL:
            break
        at += dt.timedelta(seconds=r["next_in"])
    batch.refresh_from_db()
    return batch


class Tty(StringIO):
    def isatty(self):
        return True


def test_submit_prints_the_plan_and_starts_the_batch(account, tmp_path):
    batch, text = submit(tmp_path, 20, SMALL, "--window", "8h", "--metadata", "team=ml", "run=7")
    assert batch.status == Batch.Status.IN_PROGRESS
    assert batch.metadata == {"team": "ml", "run": "7"} and batch.completion_window == "8h"
    assert f"Batch {batch.pk}: in_progress" in text
    lane = batch.plan["lanes"][0]
    assert lane["tier"] in text and lane["model"] in text
    assert "streams" in text and "makespan" in text and "Predicted cost" in text
    assert "Predicted finish" in text and f"batch watch {batch.pk}" in text
    assert "in an 8h window" in text


@pytest.mark.parametrize(
    ("window", "article"),
    [
        ("8h", "an"),
        ("80m", "an"),
        ("11h", "an"),
        ("18h", "an"),
        ("30m", "a"),
        ("24h", "a"),
        ("1d", "a"),
        ("7d", "a"),
        ("1.5h", "a"),
        ("8.5h", "an"),
        ("1m", "a"),
    ],
)
def test_the_window_reads_with_the_right_article(window, article):
    from routing.management.commands.batch import a_or_an

    assert a_or_an(window) == article


def test_submit_wait_does_not_say_watch_it(account, tmp_path, monkeypatch):
    from routing.management.commands import batch as batch_command

    monkeypatch.setattr(batch_command.Command, "watch", lambda self, *a, **k: None)
    _, text = submit(tmp_path, 5, SMALL, "--wait")
    assert "Watch it" not in text and "batch watch" not in text


def test_submit_json_is_the_api_shape(account, tmp_path):
    _, text = submit(tmp_path, 5, SMALL, "--json")
    data = json.loads(text)
    assert data["object"] == "batch" and data["status"] == "in_progress"
    assert data["request_counts"] == {"total": 5, "completed": 0, "failed": 0}
    assert data["plan"]["lanes"]


def test_submit_lists_the_lines_that_cannot_run(account, tmp_path):
    bad = json.dumps({"custom_id": "x", "body": {**SMALL, "model": "nope"}})
    path = jsonl_file(tmp_path, 3, body=SMALL, extra=[bad])
    text = run("submit", path, "--account", "acme")
    assert "1 request(s) cannot run" in text and "line 4: Unknown model 'nope'" in text
    assert Batch.objects.get().status == Batch.Status.IN_PROGRESS


def test_a_broken_line_refuses_the_batch_naming_the_line(account, tmp_path):
    path = jsonl_file(tmp_path, 2, body=SMALL, extra=["{not json"])
    with pytest.raises(CommandError, match=r"line 3: invalid_json_line: Not valid JSON"):
        run("submit", path, "--account", "acme")
    assert Batch.objects.get().status == Batch.Status.FAILED


def test_an_impossible_window_is_refused_with_the_fastest_plan(account, tmp_path):
    with pytest.raises(CommandError) as err:
        submit(tmp_path, 50, BIG, "--window", "1m")
    batch = Batch.objects.get()
    fastest = batch.errors[0]["fastest_makespan_seconds"]
    assert batch.status == Batch.Status.FAILED and fastest > 60
    message = str(err.value)
    assert "window_too_short" in message and "fastest plan needs" in message
    assert f"predicted makespan {fastest:.0f} s" in message


def test_a_batch_the_account_cannot_pay_for_is_refused(builtin_catalog, tmp_path):
    account_create(name="poor", default_credits=Decimal("0.01"))
    with pytest.raises(CommandError, match="insufficient_quota: The plan costs"):
        run("submit", jsonl_file(tmp_path, 20, body=SMALL))
    assert Batch.objects.get().status == Batch.Status.FAILED


def test_bad_arguments_are_refused_before_the_upload(account, tmp_path):
    path = jsonl_file(tmp_path, 2, body=SMALL)
    with pytest.raises(CommandError, match=r"completion_window .* \(--window\)"):
        run("submit", path, "--account", "acme", "--window", "soon")
    with pytest.raises(CommandError, match=r"--metadata takes KEY=VALUE"):
        run("submit", path, "--account", "acme", "--metadata", "oops")
    with pytest.raises(CommandError, match="No file"):
        run("submit", str(tmp_path / "missing.jsonl"), "--account", "acme")
    assert not account.files.exists()


def test_the_account_defaults_to_the_only_one(account, tmp_path):
    run("submit", jsonl_file(tmp_path, 2, body=SMALL))
    assert Batch.objects.get().account == account
    account_create(name="zeta")
    with pytest.raises(CommandError, match=r"Several accounts.*Accounts: acme, zeta"):
        run("submit", jsonl_file(tmp_path, 2, body=SMALL))
    with pytest.raises(CommandError, match="No account named 'nobody'"):
        run("submit", jsonl_file(tmp_path, 2, body=SMALL), "--account", "nobody")


def test_with_several_accounts_the_demo_account_is_the_default(builtin_catalog, tmp_path, settings):
    # The quick start: demo_setup's account, then demo_traffic's six accounts.
    settings.VAR_DIR = tmp_path / "var"
    call_command("demo_setup", stdout=StringIO())
    call_command("demo_traffic", "--jobs", "12", stdout=StringIO())
    text = run("submit", jsonl_file(tmp_path, 2, body=SMALL), "--window", "8h")
    assert Batch.objects.get().account.name == "demo"
    assert "for account demo." in text


def test_watch_once_on_a_finished_batch_shows_100_percent_and_the_files(account, tmp_path):
    bad = json.dumps({"custom_id": "x", "body": {**SMALL, "model": "nope"}})
    run("submit", jsonl_file(tmp_path, 30, body=SMALL, extra=[bad]), "--account", "acme")
    batch = drive(Batch.objects.get())
    assert batch.status == Batch.Status.COMPLETED
    text = run("watch", str(batch.pk), "--once")
    assert "100.0%" in text and "30/31 done, 1 failed" in text and "completed" in text
    assert "#" * 20 in text and "\r" not in text
    assert f"Output file: {batch.output_file_id}" in text
    assert f"Error file:  {batch.error_file_id}" in text
    # Without --once it ends by itself on a finished batch; a prefix of the id will do.
    assert "100.0%" in run("watch", str(batch.pk)[:8], "--interval", "0.01")


def test_watch_redraws_in_place_on_a_tty(account, tmp_path, monkeypatch):
    batch, _ = submit(tmp_path, 10, SMALL)
    monkeypatch.setenv("COLUMNS", "200")
    out = Tty()
    call_command("batch", "watch", str(batch.pk), "--once", stdout=out)
    text = out.getvalue()
    assert text.startswith("\r[") and "0.0%" in text and "in_progress; finish ~" in text
    assert text.endswith("\n") and "cost 0.00 of ~" in text
    # A narrow terminal gets a shorter line (no wrapping, or '\r' would not redraw it).
    monkeypatch.setenv("COLUMNS", "60")
    out = Tty()
    call_command("batch", "watch", str(batch.pk), "--once", stdout=out)
    assert len(out.getvalue().strip("\r\n")) < 60 and "0/10 done" in out.getvalue()


def test_watch_exits_non_zero_when_the_batch_expired(account, tmp_path):
    batch, _ = submit(tmp_path, 10, SMALL, "--window", "1m")
    batch_advance(batch.pk, at=batch.expires_at + dt.timedelta(seconds=1), force=True)
    batch.refresh_from_db()
    assert batch.status == Batch.Status.EXPIRED
    with pytest.raises(CommandError, match=f"Batch {batch.pk} expired"):
        run("watch", str(batch.pk), "--once")


def test_unknown_ids_are_a_clear_error(account):
    with pytest.raises(CommandError, match="No batch 'not-a-uuid'"):
        run("watch", "not-a-uuid")
    with pytest.raises(CommandError, match="No batch 00000000-0000-0000-0000-000000000000"):
        run("watch", "00000000-0000-0000-0000-000000000000", "--once")
    with pytest.raises(CommandError, match="No batch deadbeef"):
        run("cancel", "deadbeef")
    with pytest.raises(CommandError, match="at least 8 characters"):
        run("watch", "abc")


def test_list_and_cancel(account, tmp_path):
    batch, _ = submit(tmp_path, 10, SMALL)
    text = run("list", "--account", "acme")
    assert str(batch.pk) in text and "in_progress" in text and "0/10" in text
    assert "cancelled" in run("cancel", str(batch.pk))
    batch.refresh_from_db()
    assert batch.status == Batch.Status.CANCELLED
    assert "No batches." in run("list", "--status", "completed")
    batch.status = Batch.Status.COMPLETED  # an ended batch cannot be cancelled
    batch.save(update_fields=["status"])
    with pytest.raises(CommandError, match="has already completed"):
        run("cancel", str(batch.pk))


def test_cancelling_a_cancelled_batch_says_so_and_fails(account, tmp_path):
    batch, _ = submit(tmp_path, 10, SMALL)
    first = run("cancel", str(batch.pk))
    assert "cancelled" in first and "already" not in first
    with pytest.raises(CommandError, match=r"is already cancelled \(since .* UTC\); nothing to do"):
        run("cancel", str(batch.pk))
    batch.refresh_from_db()
    assert batch.status == Batch.Status.CANCELLED
