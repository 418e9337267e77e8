"""One tenant's batch file cannot stall anyone: a line nested too deep, a NUL character
or a bare NaN fails that batch with the line's number (never a RecursionError or a
DataError), over-long prompts are refused like the jobs API refuses them, and beat's
sweep isolates each batch (issue 13)."""

from __future__ import annotations

import datetime as dt
import json
import logging
from decimal import Decimal

import pytest
from django.utils import timezone

from routing.accounts.accounts import account_create
from routing.batches import sweep as sweep_module
from routing.batches.sweep import batches_sweep
from routing.core.limits import MAX_JSON_DEPTH, MAX_PROMPT_CHARS
from routing.models import Batch, BatchRequest
from tests.helpers import BATCH_BODY, jsonl
from tests.helpers import batch_make as make

pytestmark = pytest.mark.django_db


def line(custom_id="p", **body) -> bytes:
    return json.dumps(
        {"custom_id": custom_id, "url": "/v1/jobs", "body": BATCH_BODY | body}
    ).encode()


DEEP = b'{"custom_id": "deep", "body": ' + b"[" * 50_000 + b"]" * 50_000 + b"}"
NUL_ID = b'{"custom_id": "a\\u0000b", "body": ' + json.dumps(BATCH_BODY).encode() + b"}"
NUL_PROMPT = line(prompt="hello\u0000world")
NAN = b'{"custom_id": "nan", "body": {"model": "sol", "input_tokens": NaN, "output_tokens": 10}}'
INFINITY = b'{"custom_id": "inf", "body": {"model": "sol", "tool_seconds": -Infinity}}'
SURROGATE = line("sur", prompt="\ud800")
# Past a double's range: read as infinity, which jsonb refused for the whole batch.
HUGE = b'{"custom_id": "huge", "body": {"model": "sol", "input_tokens": 1e309}}'
HUGE_INT = b'{"custom_id": "hi", "body": {"model": "sol", "tool_seconds": 1' + b"0" * 400 + b"}}"
DUPLICATE_KEY = b'{"custom_id": "dup", "body": {"model": "sol", "model": "luna"}}'


@pytest.mark.parametrize(
    "poison, code",
    [
        (DEEP, "invalid_json_line"),
        (NUL_ID, "invalid_custom_id"),
        (NUL_PROMPT, "invalid_json_line"),
        (NAN, "invalid_json_line"),
        (INFINITY, "invalid_json_line"),
        (SURROGATE, "invalid_json_line"),
        (HUGE, "invalid_json_line"),
        (HUGE_INT, "invalid_json_line"),
        (DUPLICATE_KEY, "invalid_json_line"),
    ],
    ids=[
        "deep",
        "nul-custom-id",
        "nul-prompt",
        "nan",
        "infinity",
        "lone-surrogate",
        "1e309",
        "huge-integer",
        "duplicate-key",
    ],
)
def test_a_poisoned_line_fails_the_batch_with_its_line_number(account, poison, code):
    b = make(account, jsonl(2) + b"\n" + poison + b"\n" + jsonl(1, start=2))
    assert b.status == "failed" and b.failed_at
    assert [(e["code"], e["line"]) for e in b.errors] == [(code, 3)]
    assert not BatchRequest.objects.filter(batch=b).exists()


@pytest.mark.parametrize(
    "poison, param, words",
    [
        (HUGE, "body.input_tokens", "1e309 is outside the range of a double"),
        (HUGE_INT, "body.tool_seconds", "outside the range of a double"),
        (NAN, "body.input_tokens", "NaN is not a JSON number"),
        (DUPLICATE_KEY, "body.model", "'model' appears more than once"),
    ],
)
def test_a_refused_number_or_key_names_its_line_and_field(account, poison, param, words):
    b = make(account, jsonl(1) + b"\n" + poison)
    assert b.status == "failed"
    [error] = b.errors
    assert (error["line"], error["param"]) == (2, param)
    assert words in error["message"] and param in error["message"]


def test_nesting_up_to_the_limit_is_accepted(account):
    nested = {"x": 1}
    for _ in range(MAX_JSON_DEPTH - 3):  # the line and its body are two levels more
        nested = {"n": nested}
    b = make(account, line(meta=nested))
    assert b.status == "in_progress" and b.total == 1 and b.failed == 0
    deeper = make(account, line(meta={"n": nested}))
    assert deeper.status == "failed" and "nested" in deeper.errors[0]["message"]


def test_an_escaped_backslash_before_u0000_is_not_a_nul(account):
    b = make(account, line(prompt="C:\\u0000\\dir"))
    assert b.status == "in_progress" and b.failed == 0


def test_batch_prompts_are_capped_like_the_jobs_api(account):
    data = b"\n".join(
        [
            line("ok", prompt="x" * MAX_PROMPT_CHARS),
            line("long", prompt="x" * (MAX_PROMPT_CHARS + 1)),
            line("not-text", prompt=["x"]),
        ]
    )
    b = make(account, data)
    assert b.status == "in_progress" and (b.total, b.failed) == (3, 2)
    errors = {r.custom_id: r.error for r in b.requests.exclude(error=None)}
    assert set(errors) == {"long", "not-text"}
    assert str(MAX_PROMPT_CHARS) in errors["long"]["message"].replace(",", "")
    assert errors["long"]["line"] == 2


def test_chat_lines_are_capped_like_the_jobs_api(account):
    body = {"model": "sol", "messages": [{"role": "user", "content": "x" * (MAX_PROMPT_CHARS + 1)}]}
    data = json.dumps({"custom_id": "c", "url": "/v1/chat/completions", "body": body}).encode()
    b = make(account, data, endpoint="/v1/chat/completions")
    assert b.failed == 1 and "characters" in b.requests.get().error["message"]


def test_the_jobs_api_uses_the_same_prompt_limit():
    from routing.api.serializers import JobRequestSerializer

    assert JobRequestSerializer().fields["prompt"].max_length == MAX_PROMPT_CHARS


# --- The sweep --------------------------------------------------------------------------------


def test_a_poisoned_batch_does_not_stop_another_accounts_batch(account):
    at = timezone.now()
    later = at + dt.timedelta(minutes=5)
    # A message lost: both batches are still `validating`, beat's sweep picks them up.
    poisoned = make(
        account, jsonl(1) + b"\n" + DEEP + b"\n" + NUL_ID + b"\n" + NAN, at=at, validate=False
    )
    other_account = account_create(name="other", default_credits=Decimal(100))[0]
    good = make(other_account, jsonl(3), at=at, validate=False)
    out = batches_sweep(at=later)
    assert out["errors"] == 0 and out["validated"] == 2
    poisoned.refresh_from_db()
    good.refresh_from_db()
    assert poisoned.status == "failed" and [e["line"] for e in poisoned.errors] == [2, 3, 4]
    assert good.status == "in_progress" and good.total == 3


def test_the_sweep_isolates_a_batch_whose_step_crashes(account, monkeypatch, caplog):
    at = timezone.now()
    scheduled = make(account, jsonl(2), at=at, start_at=(at + dt.timedelta(hours=1)).isoformat())
    other_account = account_create(name="other", default_credits=Decimal(100))[0]
    crashing = make(other_account, jsonl(2), at=at, validate=False)
    real = sweep_module.batch_validate

    def validate(pk, **kw):
        if pk == crashing.pk:
            raise RuntimeError("boom")
        return real(pk, **kw)

    monkeypatch.setattr(sweep_module, "batch_validate", validate)
    with caplog.at_level(logging.ERROR, logger="routing.batches.sweep"):
        out = batches_sweep(at=at + dt.timedelta(hours=1))
    assert out["errors"] == 1 and out["started"] == 1
    assert any("boom" in r.exc_text for r in caplog.records if r.exc_text)
    scheduled.refresh_from_db()
    crashing.refresh_from_db()
    assert scheduled.status == "in_progress"
    # Not left `validating` forever: failed with an error the client can read.
    assert crashing.status == "failed" and crashing.errors[0]["code"] == "validation_error"
    assert batches_sweep(at=at + dt.timedelta(hours=2))["errors"] == 0


def test_the_sweep_counts_a_crashing_advance_and_goes_on(account, monkeypatch):
    at = timezone.now()
    a = make(account, jsonl(1), at=at)
    b = make(account_create(name="other", default_credits=Decimal(100))[0], jsonl(1), at=at)
    Batch.objects.filter(pk__in=[a.pk, b.pk]).update(next_advance_at=None)
    real = sweep_module.batch_advance
    seen = []

    def advance(pk, **kw):
        seen.append(pk)
        if pk == a.pk:
            raise RuntimeError("boom")
        return real(pk, **kw)

    monkeypatch.setattr(sweep_module, "batch_advance", advance)
    out = batches_sweep(at=at + dt.timedelta(seconds=1))
    assert set(seen) == {a.pk, b.pk} and out["errors"] == 1 and out["advanced"] == 1


# --- PostgreSQL: the COPY path ------------------------------------------------------------------


@pytest.mark.postgres
def test_on_postgres_poisoned_lines_never_reach_copy(on_postgres, account):
    """PostgreSQL's text and jsonb refuse NUL and NaN: COPY raised DataError and left the
    batch `validating`. Now the lines are refused first; a clean batch still COPYs."""
    at = timezone.now()
    poisoned = make(account, b"\n".join([jsonl(1), NUL_ID, NUL_PROMPT, NAN, SURROGATE]), at=at)
    assert poisoned.status == "failed"
    assert [(e["code"], e["line"]) for e in poisoned.errors] == [
        ("invalid_custom_id", 2),
        ("invalid_json_line", 3),
        ("invalid_json_line", 4),
        ("invalid_json_line", 5),
    ]
    other = account_create(name="other", default_credits=Decimal(100))[0]
    good = make(other, jsonl(3) + b"\n" + line("long", prompt="x" * (MAX_PROMPT_CHARS + 1)), at=at)
    assert good.status == "in_progress" and (good.total, good.failed) == (4, 1)
    assert BatchRequest.objects.filter(batch=good).count() == 4


@pytest.mark.postgres
def test_on_postgres_the_sweep_starts_the_others_past_a_poisoned_batch(on_postgres, account):
    at = timezone.now()
    poisoned = make(account, jsonl(1) + b"\n" + NUL_PROMPT + b"\n" + NAN, at=at, validate=False)
    other = account_create(name="other", default_credits=Decimal(100))[0]
    good = make(other, jsonl(2), at=at, validate=False)
    out = batches_sweep(at=at + dt.timedelta(minutes=1))
    assert out["errors"] == 0 and out["validated"] == 2
    poisoned.refresh_from_db()
    good.refresh_from_db()
    assert poisoned.status == "failed" and good.status == "in_progress"


# --- The shared parser -------------------------------------------------------------------------


def test_jsonsafe_loads_refuses_what_postgres_or_recursion_would():
    from routing.core import jsonsafe

    assert jsonsafe.loads(b'{"a": "[[[[{{{{' + b"[" * 500 + b'"}') == {"a": "[[[[{{{{" + "[" * 500}
    assert jsonsafe.loads("[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH) is not None
    for bad, path in [
        ("[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1), None),
        ('{"a": NaN}', "a"),
        ('{"a": [1, Infinity]}', "a[1]"),
        ('{"a": {"b": 1e309}}', "a.b"),
        ('{"a": -1E+400}', "a"),
        ('{"a": 1, "b": 2, "a": 3}', "a"),
        ('[{"x": {"y": 1, "y": 1}}]', "[0].x.y"),
        ('{"a": {"b": ["x", "y\\u0000"]}}', "a.b[1]"),
        ('{"k\\u0000": 1}', ""),
        ('{"s": "\\udc00"}', "s"),
    ]:
        with pytest.raises(jsonsafe.UnsafeJSON) as exc:
            jsonsafe.loads(bad)
        assert exc.value.path == path or (path == "" and exc.value.path is None)
    assert jsonsafe.loads('"\\ud83d\\ude00"') == "\U0001f600"  # a surrogate pair is fine
    # The edge of a double's range, and the same key in two objects, are fine.
    assert jsonsafe.loads('{"a": 1.7976931348623157e308, "b": "1e309", "c": 1e-400}')["c"] == 0
    assert jsonsafe.loads('[{"a": 1}, {"a": 2}]') == [{"a": 1}, {"a": 2}]
