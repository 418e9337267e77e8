"""Validating a batch: its file read line by line, the requests written (COPY on
PostgreSQL), then the batch planned (and started when its start has come).

A broken file (not UTF-8, a line that is not a JSON object, JSON nested deeper than
MAX_JSON_DEPTH, a NaN or Infinity, a string with a NUL or a lone surrogate, a missing or
repeated `custom_id`, a wrong method or url, over 50,000 requests) fails the whole batch
with each problem's line number. A well-formed line whose body cannot run (unknown or retired
model, bad token counts, over the context window) is kept as a failed request and
reported in the error file."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable
from dataclasses import dataclass, field

from django.db import InterfaceError, OperationalError, connection, transaction
from django.utils import timezone

from catalog.models import ModelVersion
from routing.batches.errors import error_entry
from routing.batches.files import MAX_BATCH_REQUESTS, file_lines
from routing.batches.finish import batch_fail
from routing.batches.planning import batch_plan, batch_start, plan_json, plan_refusal
from routing.core import jsonsafe, openai_shapes
from routing.core.clock import wall
from routing.core.formats import echo
from routing.core.limits import MAX_PROMPT_CHARS, MAX_TASK_TOKENS, MAX_TOOL_SECONDS, MAX_TURNS
from routing.models import Account, Batch, BatchRequest
from routing.router.resolve import ModelNotServing, ModelRetired, ModelUnknown, resolve_for_routing

MAX_REPORTED_ERRORS = 100
CUSTOM_ID_MAX = 512


@dataclass
class Parsed:
    """What validation makes of a file: the requests (runnable or failed), or the
    file-level errors that refuse it."""

    rows: list[BatchRequest] = field(default_factory=list)
    file_errors: list[dict] = field(default_factory=list)
    line_errors: int = 0

    def refuse(self, e: dict) -> None:
        """Record a file-level error (the first MAX_REPORTED_ERRORS; then `more`)."""
        if len(self.file_errors) < MAX_REPORTED_ERRORS:
            self.file_errors.append(e)
        else:
            self.file_errors[-1]["more"] = True


class LineRefused(ValueError):
    """A line's body cannot run: `code` and `extra` members go to its error entry."""

    def __init__(self, message: str, code: str = "invalid_request", **extra):
        super().__init__(message)
        self.code, self.extra = code, extra


class _Models:
    """Model references resolved once per batch (the same few names repeat)."""

    def __init__(self, account: Account, at: dt.datetime):
        self.account, self.at = account, at
        self.cache: dict[str, ModelVersion | LineRefused] = {}

    def get(self, ref: str) -> ModelVersion:
        """The model `ref` runs on, or LineRefused saying why it cannot."""
        if ref not in self.cache:
            try:
                res = resolve_for_routing(ref, auto_migrate=self.account.auto_migrate, at=self.at)
                self.cache[ref] = res.model
            except ModelUnknown:
                self.cache[ref] = LineRefused(f"Unknown model {echo(ref)}.")
            except ModelRetired as exc:
                self.cache[ref] = retired_refusal(exc)
            except ModelNotServing as exc:
                self.cache[ref] = LineRefused(
                    f"Model {exc.model.slug} is not serving yet ({exc.status})."
                )
        found = self.cache[ref]
        if isinstance(found, LineRefused):
            # A fresh exception each time: re-raising one instance would grow its
            # traceback with every line that names the model.
            raise LineRefused(str(found), found.code, **found.extra)
        return found


def retired_refusal(exc: ModelRetired) -> LineRefused:
    """A retired model's line error: the successor and its tier in the message and as
    members (code `model_retired`)."""
    succ = exc.successor.slug if exc.successor else None
    tier = exc.tier.slug if exc.tier else None
    use = f"; use {succ}" + (f" on {tier}" if tier else "") if succ else ""
    return LineRefused(
        f"Model {exc.model.slug} is retired{use}.",
        "model_retired",
        model=exc.model.slug,
        successor=succ,
        successor_tier=tier,
    )


def _int_field(body: dict, name: str, lo: int, hi: int, default=None) -> int:
    value = body.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise ValueError(f"body.{name} must be an integer from {lo} to {hi}.")
    return value


def _task_shape(endpoint: str, body: dict) -> tuple[int, int, int, float]:
    """(input_tokens, output_tokens, turns, tool_seconds) of a line's body."""
    if endpoint in (openai_shapes.CHAT, openai_shapes.RESPONSES):
        shape = openai_shapes.request_shape(endpoint, body, where="body.")  # the live rule
        return shape.input_tokens, shape.output_tokens, 1, 0.0
    prompt = body.get("prompt", "")
    if not isinstance(prompt, str) or len(prompt) > MAX_PROMPT_CHARS:
        raise ValueError(f"body.prompt must be a string of at most {MAX_PROMPT_CHARS} characters.")
    inp = _int_field(body, "input_tokens", 1, MAX_TASK_TOKENS)
    out = _int_field(body, "output_tokens", 1, MAX_TASK_TOKENS)
    turns = _int_field(body, "turns", 1, MAX_TURNS, default=1)
    tools = body.get("tool_seconds", 0.0)
    if (
        isinstance(tools, bool)
        or not isinstance(tools, (int, float))
        or not 0 <= tools <= MAX_TOOL_SECONDS
    ):
        raise ValueError(f"body.tool_seconds must be a number from 0 to {MAX_TOOL_SECONDS}.")
    if out < turns:
        raise ValueError(f"body.output_tokens must be at least turns ({turns}): each turn answers.")
    return inp, out, turns, float(tools)


def parse_file(batch: Batch, lines: Iterable[tuple[int, bytes]], at: dt.datetime) -> Parsed:
    """Read a batch file into request rows (not saved). File-level problems go to
    `file_errors` (they refuse the batch); a line whose body cannot run becomes a failed
    request with its error."""
    out = Parsed()
    seen: dict[str, int] = {}
    models = _Models(batch.account, at)
    count = 0
    for number, raw in lines:
        if not raw.strip():
            continue
        count += 1
        if count > MAX_BATCH_REQUESTS:
            out.refuse(
                error_entry(
                    "too_many_requests", f"More than {MAX_BATCH_REQUESTS} requests.", number
                )
            )
            break
        obj, problem = _line_object(batch, number, raw, seen)
        if problem is not None:
            out.refuse(problem)
            continue
        row, runnable = _request_row(batch, number, obj, models, at)
        out.line_errors += not runnable
        out.rows.append(row)
    if count == 0 and not out.file_errors:
        out.refuse(error_entry("empty_file", "The file has no requests."))
    return out


def _line_object(
    batch: Batch, number: int, raw: bytes, seen: dict[str, int]
) -> tuple[dict | None, dict | None]:
    """(the line's JSON object, None), or (None, the file-level error it is). Records
    the line's custom_id in `seen`."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None, error_entry("invalid_encoding", "The line is not UTF-8.", number)
    try:
        obj = jsonsafe.loads(text)
    except jsonsafe.UnsafeJSON as exc:
        code = "invalid_custom_id" if exc.path == "custom_id" else "invalid_json_line"
        return None, error_entry(code, exc.message, number, exc.path)
    except json.JSONDecodeError as exc:
        message = f"Not valid JSON: {exc.msg} at column {exc.colno}."
        return None, error_entry("invalid_json_line", message, number)
    if not isinstance(obj, dict):
        return None, error_entry("invalid_json_line", "Each line must be a JSON object.", number)
    cid = obj.get("custom_id")
    if not isinstance(cid, str) or not cid.strip() or len(cid) > CUSTOM_ID_MAX:
        message = f"custom_id must be a non-empty string of at most {CUSTOM_ID_MAX} characters."
        return None, error_entry("invalid_custom_id", message, number, "custom_id")
    if cid in seen:
        message = f"custom_id {cid!r} is also on line {seen[cid]}."
        return None, error_entry("duplicate_custom_id", message, number, "custom_id", cid)
    seen[cid] = number
    if obj.get("method", "POST") != "POST":
        return None, error_entry("invalid_method", "method must be POST.", number, "method", cid)
    url = obj.get("url", batch.endpoint)
    if url not in (batch.endpoint, "/api" + batch.endpoint):
        message = f"url {echo(url)} differs from the batch's endpoint {batch.endpoint}."
        return None, error_entry("mismatched_url", message, number, "url", cid)
    return obj, None


def _request_row(
    batch: Batch, number: int, obj: dict, models: _Models, at: dt.datetime
) -> tuple[BatchRequest, bool]:
    """The request row of a well-formed line and whether it can run (a line whose body
    cannot run is a failed request carrying its error)."""
    cid = obj["custom_id"]
    # Ids, not instances: the related-object setters cost more than the rest at 50,000.
    row = BatchRequest(batch_id=batch.pk, line=number, custom_id=cid, request=obj)
    try:
        model, shape = _runnable_body(batch.endpoint, obj.get("body"), models)
    except ValueError as exc:
        row.status = BatchRequest.Status.FAILED
        refused = exc if isinstance(exc, LineRefused) else LineRefused(str(exc))
        row.error = error_entry(refused.code, str(exc), number, None, cid) | refused.extra
        row.finished_at = at
        return row, False
    row.model_id = model.pk
    row.input_tokens, row.output_tokens, row.turns, row.tool_seconds = shape
    return row, True


def _runnable_body(
    endpoint: str, body, models: _Models
) -> tuple[ModelVersion, tuple[int, int, int, float]]:
    """The model and task shape a line's body asks for; ValueError saying why it cannot run."""
    if not isinstance(body, dict):
        raise ValueError("body must be a JSON object.")
    ref = body.get("model")
    if not isinstance(ref, str) or not ref:
        raise ValueError("body.model is required.")
    shape = _task_shape(endpoint, body)
    model = models.get(ref)
    tokens = shape[0] + shape[1]
    if tokens > model.context_window:
        raise ValueError(
            f"A task of {tokens} tokens exceeds {model.slug}'s context window of {model.context_window}."
        )
    return model, shape


_COPY_COLUMNS = (
    "batch_id",
    "line",
    "custom_id",
    "request",
    "model_id",
    "input_tokens",
    "output_tokens",
    "turns",
    "tool_seconds",
    "status",
    "finished_at",
    "error",
    "rerouted_from",
)


def insert_requests(rows: list[BatchRequest]) -> None:
    """Write a batch's new request rows: PostgreSQL's COPY (about twice as fast as
    bulk_create at 50,000 rows), bulk_create elsewhere."""
    if connection.vendor != "postgresql":
        BatchRequest.objects.bulk_create(rows, batch_size=2000)
        return
    table = BatchRequest._meta.db_table
    sql = f"COPY {table} ({', '.join(_COPY_COLUMNS)}) FROM STDIN"
    with connection.cursor() as cur, cur.cursor.copy(sql) as copy:
        for r in rows:
            copy.write_row(
                (
                    r.batch_id,
                    r.line,
                    r.custom_id,
                    json.dumps(r.request),
                    r.model_id,
                    r.input_tokens,
                    r.output_tokens,
                    r.turns,
                    r.tool_seconds,
                    r.status,
                    r.finished_at,
                    json.dumps(r.error) if r.error is not None else None,
                    r.rerouted_from,
                )
            )


def batch_validate(batch_id, *, at: dt.datetime | None = None) -> Batch | None:
    """Check the file, write the requests, plan the batch (see the module doc).
    Idempotent: only a batch still `validating` and not yet validated is touched."""
    explicit_time = at is not None
    at = at or timezone.now()
    batch = (
        Batch.objects.select_related("input_file", "account")
        .filter(pk=batch_id, status=Batch.Status.VALIDATING, validated_at__isnull=True)
        .first()
    )
    if batch is None:
        return None
    try:
        parsed = parse_file(batch, file_lines(batch.input_file), at)
    except OSError as exc:
        message = f"The input file cannot be read ({exc})."
        parsed = Parsed(file_errors=[error_entry("file_unreadable", message)])
    with transaction.atomic():
        locked = (
            Batch.objects.select_for_update()
            .filter(pk=batch.pk, status=Batch.Status.VALIDATING, validated_at__isnull=True)
            .first()
        )
        if locked is None:
            return None
        if parsed.file_errors:
            return batch_fail(batch=locked, errors=parsed.file_errors, at=at)
        insert_requests(parsed.rows)
        locked.total = len(parsed.rows)
        locked.failed = parsed.line_errors
        locked.validated_at = at
        plan = batch_plan(locked, at=at, window_seconds=locked.window_seconds)
        fields = ["total", "failed", "validated_at"]
        if plan is not None:
            if not plan.feasible:
                return batch_fail(
                    batch=locked, errors=[plan_refusal(plan=plan)], at=at, also=fields
                )
            locked.plan = plan_json(plan=plan, batch=locked)
            locked.predicted_cost = plan.cost
            locked.predicted_finish_at = locked.start_at + wall(plan.makespan_seconds)
            fields += ["plan", "predicted_cost", "predicted_finish_at"]
        locked.save(update_fields=fields)
    # Reading a large file takes seconds: start on the clock of now, not of the read.
    start_now = at if explicit_time else timezone.now()
    if locked.start_at <= start_now:
        return batch_start(locked.pk, at=start_now) or Batch.objects.get(pk=locked.pk)
    return locked


# The database went away or refused a connection: worth another try at the next sweep.
TRANSIENT_ERRORS = (OperationalError, InterfaceError)


def batch_validation_crashed(batch_id, exc: BaseException, *, at: dt.datetime) -> Batch | None:
    """Fail a batch whose validation raised `exc` (a bug or an input no check caught)
    rather than leave it `validating` to crash every sweep; None if it is no longer
    waiting for validation or the error is transient (the next sweep tries again)."""
    if isinstance(exc, TRANSIENT_ERRORS):
        return None
    with transaction.atomic():
        locked = (
            Batch.objects.select_for_update()
            .filter(pk=batch_id, status=Batch.Status.VALIDATING, validated_at__isnull=True)
            .first()
        )
        if locked is None:
            return None
        message = f"The input file could not be validated ({type(exc).__name__})."
        return batch_fail(batch=locked, errors=[error_entry("validation_error", message)], at=at)
