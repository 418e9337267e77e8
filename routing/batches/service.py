"""Batches: many requests from a JSONL file, planned against the pools' capacity and
run inside a completion window (the OpenAI Batch API's shape, see
../shared/reference/api-conventions.md).

Life of a batch (every step a function here; views, tasks, the admin and the `batch`
command call them):

1. `batch_create`: the arguments are checked (file, endpoint, window, start) and the
   batch is written in `validating`; the validation task is sent after commit.
2. `batch_validate`: the file is read. A broken file (not UTF-8, a line that is not a
   JSON object, a missing or repeated `custom_id`, a wrong method or url, over 50,000
   requests) fails the whole batch with each problem's line number. A well-formed line
   whose body cannot run (unknown or retired model, bad token counts, over the context
   window) is kept as a failed request and reported in the error file. Then the batch
   is planned (routing.batches.planner) on the capacity the interactive load and the other
   running batches leave; when no plan fits the window the batch fails with the fastest
   plan's makespan. A batch whose start has come starts at once.
3. `batch_start` (now, or when its start time comes, from beat): planned again on the
   load of that moment and the time left, its planned cost reserved on the account's
   packages (one reservation per model and tier), the requests given their tiers.
4. `batch_advance` (a task chain, one link per wave, plus beat's sweep as a safety net):
   each tier runs its requests on the streams the plan gave it, never more than the
   pool has left after interactive work and other batches at that moment (interactive
   jobs keep priority), in list-scheduling order: a stream that frees at time t starts
   the next request at t. Requests that finished are marked completed and charged from
   their reservation in the same transaction (nothing lost, nothing charged twice: a
   request is charged only by the conditional write that completes it).
5. `batch_finalize`: the output and error files are written, whatever is still held is
   released, the batch ends `completed`; cancel and expiry end it `cancelled`/`expired`
   the same way, keeping (and billing) what finished.

Timings: the window and the plan are in simulated seconds, like every deadline here;
SIM_TIME_SCALE simulated seconds pass per wall second (1 in production).
"""

from __future__ import annotations

import datetime as dt
import heapq
import json
import logging
import math
import re
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from decimal import Decimal

from django.db import IntegrityError, connection, transaction
from django.db.models import Count, F, Max, Q, Sum
from django.utils import timezone

import simengine
from catalog import lifecycle
from catalog.engine import engine_deployment, model_spec
from catalog.models import HardwarePool, ModelVersion, Tier
from routing import quota
from routing.batches.files import MAX_BATCH_REQUESTS, file_lines, file_write
from routing.batches.planner import BatchGroup, Plan, PlanError, fmt_duration, plan_batch
from routing.core.clock import sim_scale, wall
from routing.core.limits import MAX_TASK_TOKENS, MAX_TOOL_SECONDS, MAX_TURNS
from routing.jobs.output import synthetic_text
from routing.models import Account, Batch, BatchRequest, BatchSchedule, File, QuotaReservation
from routing.router.resolve import ModelNotServing, ModelRetired, ModelUnknown, resolve_for_routing
from routing.router.snapshot import model_option, pool_loads

logger = logging.getLogger(__name__)

BATCH_DISCOUNT = Decimal("0.5")  # of the Standard price, on Flex and Standard capacity
ENDPOINTS = ("/v1/jobs", "/v1/chat/completions")
MIN_WINDOW_SECONDS = 60.0
MAX_WINDOW_SECONDS = 7 * 86400.0
MAX_START_AHEAD = dt.timedelta(days=31)
MAX_REPORTED_ERRORS = 100
ADVANCE_STEP = 5000  # requests started or completed per advance (one transaction)
MIN_ADVANCE_DELAY = 0.05  # wall seconds between two links of the chain
STALE_ADVANCE = dt.timedelta(seconds=5)
NO_ROOM_POLL = dt.timedelta(seconds=1)  # a chain link this late was lost: send again
CHARS_PER_TOKEN = 4  # chat-completions lines: input tokens estimated from the text
CUSTOM_ID_MAX = 512
ACTIVE = (Batch.Status.IN_PROGRESS, Batch.Status.CANCELLING)


class BatchError(Exception):
    """A refusal the client can act on; `param` names the offending field."""

    def __init__(
        self, message: str, *, param: str | None = None, status: int = 400, code="invalid-batch"
    ):
        super().__init__(message)
        self.param, self.status, self.code = param, status, code


class BatchNotCancellable(BatchError):
    pass


# --- Arguments -----------------------------------------------------------------------

_WINDOW = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd])\s*$")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_window(text: str | None) -> tuple[str, float]:
    """'24h' -> ('24h', 86400.0). Accepts s, m, h, d; from 1 minute to 7 days."""
    text = (text or "24h").strip().lower()
    m = _WINDOW.match(text)
    if not m:
        raise BatchError(
            f"completion_window {text!r} is not a duration like 30m, 8h, 24h or 2d.",
            param="completion_window",
        )
    seconds = float(m.group(1)) * _UNIT[m.group(2)]
    if not MIN_WINDOW_SECONDS <= seconds <= MAX_WINDOW_SECONDS:
        raise BatchError(
            f"completion_window must be between 1m and 7d, got {text}.", param="completion_window"
        )
    return text, seconds


def parse_start(value, now: dt.datetime) -> dt.datetime:
    """None or 'now' -> now; an ISO 8601 time (UTC if no offset), at most 31 days ahead.
    A time in the past means now."""
    if value in (None, "", "now"):
        return now
    if isinstance(value, dt.datetime):
        at = value
    else:
        try:
            at = dt.datetime.fromisoformat(str(value).strip().replace("Z", "+00:00"))
        except ValueError:
            raise BatchError(
                f"start_at {value!r} is not an ISO 8601 time (2026-12-03T02:00:00Z) or 'now'.",
                param="start_at",
            ) from None
    if at.tzinfo is None:
        at = at.replace(tzinfo=dt.UTC)
    if at > now + MAX_START_AHEAD:
        raise BatchError("start_at is more than 31 days ahead.", param="start_at")
    return max(at, now)


def check_metadata(metadata, *, max_keys: int = 16) -> None:
    """OpenAI's rule: at most 16 string keys (64 characters) with string values (512)."""
    if metadata is not None and (
        not isinstance(metadata, dict)
        or len(metadata) > max_keys
        or any(
            not isinstance(k, str) or not isinstance(v, str) or len(k) > 64 or len(v) > 512
            for k, v in metadata.items()
        )
    ):
        raise BatchError(
            f"metadata is at most {max_keys} string keys (64 characters) with string values (512).",
            param="metadata",
        )


def schedule_check(*, account: Account, input_file: File, completion_window: str, metadata) -> None:
    """What a recurring schedule must satisfy for its nightly batches to be accepted (the
    admin's form calls it): the account's own batch input, a valid window, metadata
    with room for the `schedule` key every run adds."""
    if input_file.account_id != account.pk:
        raise BatchError("The input file belongs to another account.", param="input_file")
    if input_file.purpose != File.Purpose.BATCH:
        raise BatchError(
            "The input file must be a batch input (purpose 'batch').", param="input_file"
        )
    parse_window(completion_window)
    check_metadata(metadata or {}, max_keys=15)


# --- Create --------------------------------------------------------------------------


def batch_create(
    *,
    account: Account,
    input_file_id: str,
    endpoint: str = "/v1/jobs",
    completion_window: str | None = "24h",
    start_at=None,
    metadata: dict | None = None,
    schedule: BatchSchedule | None = None,
    scheduled_for: dt.datetime | None = None,
    retry_of: Batch | None = None,
    at: dt.datetime | None = None,
) -> Batch:
    """Write a batch in `validating`; the validation task runs after commit. Raises
    BatchError for a bad argument (the file is someone else's or not a batch input, an
    unknown endpoint, a bad window or start)."""
    at = at or timezone.now()
    f = File.objects.filter(pk=input_file_id, account=account).first()
    if f is None:
        raise BatchError(
            f"No file {input_file_id}.", param="input_file_id", status=404, code="file-not-found"
        )
    if f.purpose != File.Purpose.BATCH:
        raise BatchError(
            f"File {f.id} has purpose {f.purpose!r}; a batch needs a file uploaded with purpose 'batch'.",
            param="input_file_id",
        )
    if endpoint not in ENDPOINTS:
        raise BatchError(
            f"endpoint {endpoint!r} is not batchable; use one of {', '.join(ENDPOINTS)}.",
            param="endpoint",
        )
    window_text, window = parse_window(completion_window)
    start = parse_start(start_at, at)
    check_metadata(metadata)
    with transaction.atomic():
        batch = Batch.objects.create(
            account=account,
            input_file=f,
            endpoint=endpoint,
            completion_window=window_text,
            window_seconds=window,
            metadata=metadata or {},
            schedule=schedule,
            scheduled_for=scheduled_for,
            retry_of=retry_of,
            start_at=start,
            expires_at=start + wall(window),
            total=f.lines,
        )
        transaction.on_commit(lambda: send_validate(batch.pk))
    return batch


def _send(task_name: str, batch_id, delay: float = 0.0) -> None:
    """Send a batch's next step after commit. A broker that is away loses nothing: the
    batch row is the truth and beat's sweep (batches_sweep) takes the step later."""
    from routing import tasks

    try:
        getattr(tasks, task_name).apply_async(
            args=[str(batch_id)], countdown=max(0.0, delay), retry=True
        )
    except Exception as exc:  # kombu/redis raise many kinds when the broker is away
        logger.warning("batch %s: %s not sent (%s); the sweep will", batch_id, task_name, exc)


def send_validate(batch_id) -> None:
    _send("validate_batch", batch_id)


def send_advance(batch_id, delay: float = 0.0) -> None:
    _send("advance_batch", batch_id, delay)


def send_finalize(batch_id) -> None:
    _send("finalize_batch", batch_id)


# --- Validate ------------------------------------------------------------------------


@dataclass
class Parsed:
    """What validation makes of a file: the requests (runnable or failed), or the
    file-level errors that refuse it."""

    rows: list[BatchRequest] = field(default_factory=list)
    file_errors: list[dict] = field(default_factory=list)
    line_errors: int = 0


def _err(
    code: str, message: str, line: int | None = None, param: str | None = None, custom_id=None
) -> dict:
    e = {"code": code, "message": message, "line": line, "param": param}
    if custom_id is not None:
        e["custom_id"] = custom_id
    return e


class _Models:
    """Model references resolved once per batch (the same few names repeat)."""

    def __init__(self, account: Account, at: dt.datetime):
        self.account, self.at = account, at
        self.cache: dict[str, tuple[ModelVersion | None, str | None]] = {}

    def get(self, ref: str) -> tuple[ModelVersion | None, str | None]:
        if ref not in self.cache:
            try:
                res = resolve_for_routing(ref, auto_migrate=self.account.auto_migrate, at=self.at)
                self.cache[ref] = (res.model, None)
            except ModelUnknown:
                self.cache[ref] = (None, f"Unknown model {ref!r}.")
            except ModelRetired as exc:
                succ = f"; use {exc.successor.slug}" if exc.successor else ""
                self.cache[ref] = (None, f"Model {exc.model.slug} is retired{succ}.")
            except ModelNotServing as exc:
                self.cache[ref] = (
                    None,
                    f"Model {exc.model.slug} is not serving yet ({exc.status}).",
                )
        return self.cache[ref]


def _int_field(body: dict, name: str, lo: int, hi: int, default=None) -> int:
    value = body.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise ValueError(f"body.{name} must be an integer from {lo} to {hi}.")
    return value


def _task_shape(endpoint: str, body: dict) -> tuple[int, int, int, float]:
    """(input_tokens, output_tokens, turns, tool_seconds) of a line's body."""
    if endpoint == "/v1/chat/completions":
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise ValueError("body.messages must be a non-empty list.")
        chars = 0
        for m in messages:
            content = m.get("content") if isinstance(m, dict) else None
            if isinstance(content, list):  # content parts
                content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
            chars += len(content or "")
        inp = max(1, math.ceil(chars / CHARS_PER_TOKEN))
        out_name = "max_completion_tokens" if "max_completion_tokens" in body else "max_tokens"
        out = _int_field(body, out_name, 1, MAX_TASK_TOKENS, default=1024)
        return inp, out, 1, 0.0
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

    def refuse(e: dict) -> None:
        if len(out.file_errors) < MAX_REPORTED_ERRORS:
            out.file_errors.append(e)
        else:
            out.file_errors[-1]["more"] = True

    for number, raw in lines:
        if not raw.strip():
            continue
        count += 1
        if count > MAX_BATCH_REQUESTS:
            refuse(_err("too_many_requests", f"More than {MAX_BATCH_REQUESTS} requests.", number))
            break
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            refuse(_err("invalid_encoding", "The line is not UTF-8.", number))
            continue
        try:
            obj = json.loads(text)
        except ValueError as exc:
            refuse(
                _err(
                    "invalid_json_line", f"Not valid JSON: {exc.msg} at column {exc.colno}.", number
                )
            )
            continue
        if not isinstance(obj, dict):
            refuse(_err("invalid_json_line", "Each line must be a JSON object.", number))
            continue
        cid = obj.get("custom_id")
        if not isinstance(cid, str) or not cid.strip() or len(cid) > CUSTOM_ID_MAX:
            refuse(
                _err(
                    "invalid_custom_id",
                    f"custom_id must be a non-empty string of at most {CUSTOM_ID_MAX} characters.",
                    number,
                    "custom_id",
                )
            )
            continue
        if cid in seen:
            refuse(
                _err(
                    "duplicate_custom_id",
                    f"custom_id {cid!r} is also on line {seen[cid]}.",
                    number,
                    "custom_id",
                    cid,
                )
            )
            continue
        seen[cid] = number
        if obj.get("method", "POST") != "POST":
            refuse(_err("invalid_method", "method must be POST.", number, "method", cid))
            continue
        url = obj.get("url", batch.endpoint)
        if url not in (batch.endpoint, "/api" + batch.endpoint):
            refuse(
                _err(
                    "mismatched_url",
                    f"url {url!r} differs from the batch's endpoint {batch.endpoint}.",
                    number,
                    "url",
                    cid,
                )
            )
            continue
        body = obj.get("body")
        # Ids, not instances: the related-object setters cost more than the rest at 50,000.
        row = BatchRequest(batch_id=batch.pk, line=number, custom_id=cid, request=obj)
        try:
            if not isinstance(body, dict):
                raise ValueError("body must be a JSON object.")
            ref = body.get("model")
            if not isinstance(ref, str) or not ref:
                raise ValueError("body.model is required.")
            inp, out_tokens, turns, tools = _task_shape(batch.endpoint, body)
            model, why = models.get(ref)
            if model is None:
                raise ValueError(why)
            if inp + out_tokens > model.context_window:
                raise ValueError(
                    f"A task of {inp + out_tokens} tokens exceeds {model.slug}'s context window of {model.context_window}."
                )
        except ValueError as exc:
            row.status = BatchRequest.Status.FAILED
            row.error = _err("invalid_request", str(exc), number, None, cid)
            row.finished_at = at
            out.line_errors += 1
            out.rows.append(row)
            continue
        row.model_id = model.pk
        row.input_tokens, row.output_tokens, row.turns, row.tool_seconds = (
            inp,
            out_tokens,
            turns,
            tools,
        )
        out.rows.append(row)
    if count == 0 and not out.file_errors:
        refuse(_err("empty_file", "The file has no requests."))
    return out


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
        parsed = Parsed(
            file_errors=[_err("file_unreadable", f"The input file cannot be read ({exc}).")]
        )
    with transaction.atomic():
        locked = (
            Batch.objects.select_for_update()
            .filter(pk=batch.pk, status=Batch.Status.VALIDATING, validated_at__isnull=True)
            .first()
        )
        if locked is None:
            return None
        if parsed.file_errors:
            return _fail(locked, parsed.file_errors, at)
        insert_requests(parsed.rows)
        locked.total = len(parsed.rows)
        locked.failed = parsed.line_errors
        locked.validated_at = at
        plan = batch_plan(locked, at=at, window_seconds=locked.window_seconds)
        fields = ["total", "failed", "validated_at"]
        if plan is not None:
            if not plan.feasible:
                return _fail(locked, [_plan_refusal(plan)], at, also=fields)
            locked.plan = _plan_json(plan, locked)
            locked.predicted_cost = plan.cost
            locked.predicted_finish_at = locked.start_at + wall(plan.makespan_seconds)
            fields += ["plan", "predicted_cost", "predicted_finish_at"]
        locked.save(update_fields=fields)
    # Reading a large file takes seconds: start on the clock of now, not of the read.
    start_now = at if explicit_time else timezone.now()
    if locked.start_at <= start_now:
        return batch_start(locked.pk, at=start_now) or Batch.objects.get(pk=locked.pk)
    return locked


def _plan_refusal(plan: Plan) -> dict:
    if not math.isfinite(plan.fastest_makespan_seconds):
        return _err("no_capacity", plan.reason or "No pool has room for this batch.")
    return _err(
        "window_too_short",
        f"No plan finishes inside the window: the fastest plan needs "
        f"{fmt_duration(plan.fastest_makespan_seconds)} (predicted makespan "
        f"{plan.fastest_makespan_seconds:.0f} s); window {fmt_duration(plan.window_seconds)}.",
        param="completion_window",
    ) | {
        "fastest_makespan_seconds": round(plan.fastest_makespan_seconds, 3),
        "window_seconds": plan.window_seconds,
    }


def _fail(batch: Batch, errors: list[dict], at: dt.datetime, also: Iterable[str] = ()) -> Batch:
    if batch.pk and batch.validated_at:
        # Its requests will not run: they fail with the batch's reason.
        first = errors[0] if errors else {}
        batch.failed += _close_requests(
            batch,
            batch.requests.filter(status=BatchRequest.Status.QUEUED),
            BatchRequest.Status.FAILED,
            first.get("code", "batch_failed"),
            first.get("message", "The batch failed."),
            at,
        )
    batch.status = Batch.Status.FAILED
    batch.failed_at = at
    batch.errors = errors
    batch.save(update_fields=["status", "failed_at", "errors", "failed", *also])
    return batch


# --- Plan ----------------------------------------------------------------------------

GroupKey = tuple[int, int, int, int, float]  # model id, input, output, turns, tool s


def _groups(requests) -> tuple[list[GroupKey], list[int]]:
    """The distinct task shapes of some requests (a queryset), with their counts."""
    rows = (
        requests.values("model_id", "input_tokens", "output_tokens", "turns", "tool_seconds")
        .annotate(n=Count("id"))
        .order_by("model_id", "input_tokens", "output_tokens", "turns", "tool_seconds")
    )
    keys, counts = [], []
    for r in rows:
        keys.append(
            (r["model_id"], r["input_tokens"], r["output_tokens"], r["turns"], r["tool_seconds"])
        )
        counts.append(r["n"])
    return keys, counts


def batch_loads(exclude: Batch | None = None) -> dict[int, float]:
    """Share of each pool taken before this batch: interactive work (outside traffic and
    our jobs, see selectors.pool_loads) plus the streams other running batches hold."""
    loads = dict(pool_loads())
    others = Batch.objects.filter(status__in=ACTIVE)
    if exclude is not None:
        others = others.exclude(pk=exclude.pk)
    for plan in others.values_list("plan", flat=True):
        for lane in (plan or {}).get("lanes", []):
            loads[lane["pool_id"]] = (
                loads.get(lane["pool_id"], 0.0) + lane["streams"] * lane["stream_share"]
            )
    return loads


def batch_plan(
    batch: Batch, *, at: dt.datetime, window_seconds: float, requests=None, loads=None
) -> Plan | None:
    """Plan the batch's queued requests (or `requests`, a queryset of them) for a window
    on the capacity `loads` leaves (default: batch_loads). None when none is queued."""
    if requests is None:
        requests = batch.requests.filter(status=BatchRequest.Status.QUEUED)
    keys, counts = _groups(requests)
    if not keys:
        return None
    models = {m.pk: m for m in ModelVersion.objects.filter(pk__in={k[0] for k in keys})}
    groups = [
        BatchGroup(
            model=model_option(models[k[0]]),
            input_tokens=k[1],
            output_tokens=k[2],
            turns=k[3],
            tool_seconds=k[4],
            count=n,
        )
        for k, n in zip(keys, counts, strict=True)
    ]
    try:
        return plan_batch(
            groups,
            window_seconds=window_seconds,
            loads=batch_loads(exclude=batch) if loads is None else loads,
            batch_discount=BATCH_DISCOUNT,
            today=at.date(),
        )
    except PlanError as exc:
        return Plan.refused(window_seconds, str(exc))


def _plan_json(plan: Plan, batch: Batch) -> dict:
    """The plan as stored and shown: per tier (lane) its streams, requests, cost and
    predicted makespan; the groups' assignments for the record."""
    body = plan.to_dict()
    lanes: dict[str, dict] = {}
    for a in plan.assignments:
        key = f"{a.model}/{a.tier}"
        lane = lanes.setdefault(
            key,
            {
                "key": key,
                "model": a.model,
                "tier": a.tier,
                "pool": a.pool,
                "pool_id": a.pool_id,
                "streams": a.streams,
                "stream_share": a.stream_share,
                "requests": 0,
                "cost": "0",
                "makespan_seconds": round(a.makespan_seconds, 3),
            },
        )
        lane["requests"] += a.count
        lane["cost"] = str(Decimal(lane["cost"]) + quota.credits(a.unit_cost) * a.count)
    body["lanes"] = list(lanes.values())
    body["time_scale"] = sim_scale()
    return body


# --- Start ---------------------------------------------------------------------------


def batch_start(batch_id, *, at: dt.datetime | None = None) -> Batch | None:
    """Start a validated batch whose start time has come: plan again on the load of now
    and the time left, reserve the planned cost, give the requests their tiers.
    Idempotent: only a validated batch still `validating` starts."""
    at = at or timezone.now()
    with transaction.atomic():
        batch = (
            Batch.objects.select_for_update(of=("self",))
            .select_related("account")
            .filter(
                pk=batch_id,
                status=Batch.Status.VALIDATING,
                validated_at__isnull=False,
                start_at__lte=at,
            )
            .first()
        )
        if batch is None:
            return None
        if at >= batch.expires_at:  # beat was away past the whole window
            _close_requests(
                batch,
                batch.requests.filter(status=BatchRequest.Status.QUEUED),
                BatchRequest.Status.EXPIRED,
                "batch_expired",
                "The batch's window ended before it could start.",
                at,
            )
            batch.refresh_from_db()
            _finish(batch, Batch.Status.EXPIRED, at)
            return batch
        left = (batch.expires_at - at).total_seconds() * sim_scale()
        plan = batch_plan(batch, at=at, window_seconds=max(left, 1e-3))
        if plan is not None and not plan.feasible:
            return _fail(batch, [_plan_refusal(plan)], at)
        if plan is not None:
            try:
                with transaction.atomic():
                    _assign(batch, plan, at)
            except quota.QuotaExhausted as exc:
                return _fail(
                    batch,
                    [
                        _err(
                            "insufficient_quota",
                            f"The plan costs {quota.credits(plan.cost)} credits: {exc}",
                        )
                    ],
                    at,
                )
            batch.plan = _plan_json(plan, batch)
            batch.predicted_cost = plan.cost
            batch.predicted_finish_at = at + wall(plan.makespan_seconds)
        batch.status = Batch.Status.IN_PROGRESS
        batch.in_progress_at = at
        batch.next_advance_at = at
        batch.save(
            update_fields=[
                "status",
                "in_progress_at",
                "plan",
                "predicted_cost",
                "predicted_finish_at",
                "next_advance_at",
            ]
        )
        transaction.on_commit(lambda: send_advance(batch.pk))
    return batch


def _reference(batch: Batch, model: str, tier: str, suffix: str = "") -> str:
    return f"batch:{batch.pk}:{model}:{tier}{suffix}"


def _assign(
    batch: Batch,
    plan: Plan,
    at: dt.datetime,
    *,
    requests=None,
    suffix: str = "",
    rerouted_from: str = "",
) -> None:
    """Reserve each lane's cost and write the lane on its requests (the plan's counts per
    group, in line order). Raises QuotaExhausted (the caller's savepoint undoes all)."""
    if requests is None:
        requests = batch.requests.filter(status=BatchRequest.Status.QUEUED)
    keys, _ = _groups(requests)
    tiers = {t.slug: t for t in Tier.objects.all()}
    models = {
        m.slug: m for m in ModelVersion.objects.filter(slug__in={a.model for a in plan.assignments})
    }
    lane_cost: dict[tuple[str, str], Decimal] = defaultdict(Decimal)
    for a in plan.assignments:
        lane_cost[(a.model, a.tier)] += quota.credits(a.unit_cost) * a.count
    reservations = {}
    for (model_slug, tier_slug), amount in lane_cost.items():
        m = models[model_slug]
        reservations[(model_slug, tier_slug)] = quota.quota_reserve_for(
            account=batch.account_id,
            model_id=m.pk,
            family_id=m.family_id,
            tier_id=tiers[tier_slug].pk,
            amount=amount,
            reference=_reference(batch, model_slug, tier_slug, suffix),
            at=at,
            note=f"batch {batch.pk}: {model_slug} {tier_slug}",
        )
    taken: dict[int, int] = defaultdict(int)  # group -> requests assigned so far
    group_ids: dict[int, list[int]] = {}
    parts = defaultdict(int)  # group -> assignments (a group split over tiers has several)
    for a in plan.assignments:
        parts[a.group] += 1

    def of_group(g: int):
        k = keys[g]
        return requests.filter(
            model_id=k[0], input_tokens=k[1], output_tokens=k[2], turns=k[3], tool_seconds=k[4]
        )

    for a in plan.assignments:
        update = {
            "tier_id": tiers[a.tier].pk,
            "pool_id": a.pool_id,
            "unit_cost": quota.credits(a.unit_cost),
            "slot_share": a.stream_share,
            "reservation": reservations[(a.model, a.tier)],
        }
        if rerouted_from:
            update |= {"model": models[a.model], "rerouted_from": rerouted_from}
        if parts[a.group] == 1:  # the whole group on one tier: one UPDATE
            of_group(a.group).update(**update)
            continue
        if a.group not in group_ids:  # split in line order
            group_ids[a.group] = list(
                of_group(a.group).order_by("line").values_list("pk", flat=True)
            )
        ids = group_ids[a.group][taken[a.group] : taken[a.group] + a.count]
        taken[a.group] += a.count
        for i in range(0, len(ids), 5000):
            BatchRequest.objects.filter(pk__in=ids[i : i + 5000]).update(**update)


# --- Advance ---------------------------------------------------------------------------


@dataclass
class _Lane:
    key: str
    model_id: int
    tier_id: int
    pool_id: int
    streams: int
    share: float


def _lanes(batch: Batch) -> list[_Lane]:
    plan = batch.plan or {}
    lanes = plan.get("lanes", [])
    models = dict(
        ModelVersion.objects.filter(slug__in={x["model"] for x in lanes}).values_list("slug", "pk")
    )
    tiers = dict(Tier.objects.values_list("slug", "pk"))
    return [
        _Lane(
            x["key"],
            models[x["model"]],
            tiers[x["tier"]],
            x["pool_id"],
            int(x["streams"]),
            float(x["stream_share"]),
        )
        for x in lanes
        if x["model"] in models
    ]


def _live_streams(batch: Batch, lanes: list[_Lane]) -> dict[str, int]:
    """Streams each lane may use now: its planned streams, scaled down when interactive
    work and other batches leave its pool less than the plan assumed."""
    loads = dict(pool_loads())
    others = (
        BatchRequest.objects.filter(
            status=BatchRequest.Status.RUNNING, pool_id__in={x.pool_id for x in lanes}
        )
        .exclude(batch=batch)
        .values("pool_id")
        .annotate(share=Sum("slot_share"))
    )
    for r in others:
        loads[r["pool_id"]] = loads.get(r["pool_id"], 0.0) + (r["share"] or 0.0)
    planned: dict[int, float] = defaultdict(float)
    for x in lanes:
        planned[x.pool_id] += x.streams * x.share
    out = {}
    for x in lanes:
        room = max(0.0, 1.0 - loads.get(x.pool_id, 0.0))
        need = planned[x.pool_id]
        out[x.key] = (
            x.streams if need <= room + 1e-9 else int(math.floor(x.streams * room / need + 1e-9))
        )
    return out


class _Durations:
    """Run time of a request shape on a lane, from the engine (the worker's 'inference')."""

    def __init__(self, lanes: list[_Lane]):
        self.models = {
            m.pk: m for m in ModelVersion.objects.filter(pk__in={x.model_id for x in lanes})
        }
        self.pools = {
            p.pk: p for p in HardwarePool.objects.filter(pk__in={x.pool_id for x in lanes})
        }
        self.tiers = dict(Tier.objects.values_list("pk", "slug"))
        self.cache: dict[tuple, float] = {}

    def __call__(self, lane: _Lane, shape: tuple[int, int, int, float]) -> float:
        key = (lane.key, shape)
        if key not in self.cache:
            pred = simengine.predict(
                model_spec(self.models[lane.model_id]),
                engine_deployment(self.pools[lane.pool_id], self.tiers[lane.tier_id]),
                simengine.TaskProfile(
                    input_tokens=shape[0],
                    output_tokens=shape[1],
                    turns=shape[2],
                    tool_seconds=shape[3],
                ),
                breakdown=False,
            )
            self.cache[key] = pred.total_seconds
        return self.cache[key]


def batch_advance(
    batch_id, *, at: dt.datetime | None = None, step: int = ADVANCE_STEP, force: bool = False
) -> dict:
    """One link of a running batch's chain (see the module doc). Returns what it did and
    when it wants to run again. Idempotent and safe to run concurrently: it works under
    the batch's row lock from the database state alone; a link arriving before the
    batch's `next_advance_at` (a duplicate) does nothing unless `force`."""
    at = at or timezone.now()
    done = {"completed": 0, "started": 0, "expired": 0, "next_in": None, "status": None}
    with transaction.atomic():
        batch = Batch.objects.select_for_update().filter(pk=batch_id, status__in=ACTIVE).first()
        if batch is None:
            return done
        done["status"] = batch.status
        if (
            not force
            and batch.next_advance_at
            and batch.next_advance_at > at + dt.timedelta(milliseconds=20)
        ):
            return done  # another link of the chain is due later: this one is a duplicate
        expiring = batch.status == Batch.Status.IN_PROGRESS and at >= batch.expires_at
        horizon = min(at, batch.expires_at)
        lanes = _lanes(batch)
        starting = batch.status == Batch.Status.IN_PROGRESS and not expiring
        streams = _live_streams(batch, lanes) if starting else {}
        durations = _Durations(lanes)

        running = list(
            batch.requests.filter(status=BatchRequest.Status.RUNNING)
            .order_by("finishes_at")
            .values_list(
                "pk", "model_id", "tier_id", "pool_id", "finishes_at", "unit_cost", "reservation_id"
            )
        )
        finished_running = [r for r in running if r[4] <= horizon]
        charges: dict[int, list[Decimal]] = defaultdict(list)
        for r in finished_running:
            charges[r[6]].append(r[5])
        if finished_running:
            ids = [r[0] for r in finished_running]
            for i in range(0, len(ids), 5000):
                BatchRequest.objects.filter(
                    pk__in=ids[i : i + 5000], status=BatchRequest.Status.RUNNING
                ).update(
                    status=BatchRequest.Status.COMPLETED,
                    finished_at=F("finishes_at"),
                    cost=F("unit_cost"),
                )
        next_free: list[dt.datetime] = [r[4] for r in running if r[4] > horizon]

        started: list[BatchRequest] = []
        if starting:
            for lane in lanes:
                k = streams.get(lane.key, 0)
                busy = sorted(
                    r[4]
                    for r in running
                    if (r[1], r[2], r[3]) == (lane.model_id, lane.tier_id, lane.pool_id)
                )
                # Streams: the k latest-finishing running requests' ends, the rest free now.
                slots = busy[-k:] if k else []
                slots += [at] * max(0, k - len(busy))
                heapq.heapify(slots)
                if not slots or slots[0] > at:
                    continue
                queued = batch.requests.filter(
                    status=BatchRequest.Status.QUEUED,
                    model_id=lane.model_id,
                    tier_id=lane.tier_id,
                    pool_id=lane.pool_id,
                ).order_by("line")[: max(0, step - len(started))]
                for req in queued.only(
                    "pk",
                    "input_tokens",
                    "output_tokens",
                    "turns",
                    "tool_seconds",
                    "unit_cost",
                    "reservation_id",
                    "batch_id",
                ):
                    t = slots[0]
                    if t > at:
                        break
                    seconds = durations(
                        lane, (req.input_tokens, req.output_tokens, req.turns, req.tool_seconds)
                    )
                    end = t + wall(seconds)
                    heapq.heapreplace(slots, end)
                    req.started_at, req.finishes_at = t, end
                    req.simulated = {
                        "queue_seconds": round(
                            (t - batch.in_progress_at).total_seconds() * sim_scale(), 3
                        ),
                        "run_seconds": round(seconds, 3),
                    }
                    if end <= horizon:
                        req.status, req.finished_at, req.cost = (
                            BatchRequest.Status.COMPLETED,
                            end,
                            req.unit_cost,
                        )
                        charges[req.reservation_id].append(req.unit_cost)
                    else:
                        req.status = BatchRequest.Status.RUNNING
                        next_free.append(end)
                    started.append(req)
                    if len(started) >= step:
                        break
            _write_started(started)
        completed = len(finished_running) + sum(
            1 for r in started if r.status == BatchRequest.Status.COMPLETED
        )
        charged = _charge(batch, charges)
        batch.completed = F("completed") + completed
        batch.cost = F("cost") + charged
        batch.last_advanced_at = at
        done.update(completed=completed, started=len(started))

        remaining = batch.requests.filter(
            status__in=(BatchRequest.Status.QUEUED, BatchRequest.Status.RUNNING)
        )
        if expiring:
            done["expired"] = _close_requests(
                batch,
                remaining,
                BatchRequest.Status.EXPIRED,
                "batch_expired",
                "The batch expired before this request finished.",
                at,
            )
            batch.save(update_fields=["completed", "cost", "last_advanced_at"])
            return done | {"status": _finish(batch, Batch.Status.EXPIRED, at)}
        if batch.status == Batch.Status.CANCELLING:
            # In-flight requests finish (and are billed); then the batch is cancelled.
            if not batch.requests.filter(status=BatchRequest.Status.RUNNING).exists():
                batch.save(update_fields=["completed", "cost", "last_advanced_at"])
                return done | {"status": _finish(batch, Batch.Status.CANCELLED, at)}
        elif not remaining.exists():
            batch.status = Batch.Status.FINALIZING
            batch.finalizing_at = at
            batch.next_advance_at = None
            batch.save(
                update_fields=[
                    "completed",
                    "cost",
                    "last_advanced_at",
                    "status",
                    "finalizing_at",
                    "next_advance_at",
                ]
            )
            transaction.on_commit(lambda: send_finalize(batch.pk))
            return done | {"status": Batch.Status.FINALIZING}
        # When to look again: the next end of a running request, or at once when this
        # link stopped at its step size, or at expiry.
        if len(started) >= step:
            nxt = at
        elif next_free:
            nxt = min(min(t for t in next_free), batch.expires_at)
        else:
            # Requests wait but nothing runs: the pools have no room for the batch now
            # (interactive work has them). Look again soon.
            nxt = min(batch.expires_at, at + NO_ROOM_POLL)
        delay = max(MIN_ADVANCE_DELAY, (nxt - at).total_seconds())
        batch.next_advance_at = at + dt.timedelta(seconds=delay)
        batch.save(update_fields=["completed", "cost", "last_advanced_at", "next_advance_at"])
        done["next_in"] = delay
        transaction.on_commit(lambda: send_advance(batch.pk, delay))
    return done


def _write_started(started: list[BatchRequest]) -> None:
    """Write the requests a link started (and maybe completed): one UPDATE per distinct
    set of values (a wave shares its start, a shape its duration), which is far cheaper
    than bulk_update's CASE per row."""
    groups: dict[tuple, list[int]] = defaultdict(list)
    for r in started:
        key = (r.status, r.started_at, r.finishes_at, json.dumps(r.simulated, sort_keys=True))
        groups[key].append(r.pk)
    for (status, started_at, finishes_at, simulated), ids in groups.items():
        values = {
            "status": status,
            "started_at": started_at,
            "finishes_at": finishes_at,
            "simulated": json.loads(simulated),
        }
        if status == BatchRequest.Status.COMPLETED:
            values |= {"finished_at": finishes_at, "cost": F("unit_cost")}
        for i in range(0, len(ids), 5000):
            BatchRequest.objects.filter(
                pk__in=ids[i : i + 5000], status=BatchRequest.Status.QUEUED
            ).update(**values)


def _charge(batch: Batch, charges: dict[int, list[Decimal]]) -> Decimal:
    """Charge the requests completed in this link from their reservations (one ledger row
    per reservation, noting how many requests it pays for)."""
    total = Decimal(0)
    if not charges:
        return total
    refs = dict(
        QuotaReservation.objects.filter(pk__in=list(charges)).values_list("pk", "reference")
    )
    for rid, costs in charges.items():
        amount = sum(costs, Decimal(0))
        total += quota.quota_draw(
            reference=refs[rid], amount=amount, note=f"batch {batch.pk}: {len(costs)} requests"
        )
    return total


def _close_requests(batch, qs, status, code, message, at) -> int:
    ids = list(qs.values_list("pk", flat=True))
    for i in range(0, len(ids), 5000):
        BatchRequest.objects.filter(pk__in=ids[i : i + 5000]).update(
            status=status, finished_at=at, error={"code": code, "message": message}
        )
    if ids:
        Batch.objects.filter(pk=batch.pk).update(failed=F("failed") + len(ids))
    return len(ids)


def batch_finalize(batch_id, *, at: dt.datetime | None = None) -> Batch | None:
    """Write the files of a batch whose requests are all done and complete it.
    Idempotent: only a `finalizing` batch is finalized."""
    at = at or timezone.now()
    with transaction.atomic():
        batch = (
            Batch.objects.select_for_update()
            .filter(pk=batch_id, status=Batch.Status.FINALIZING)
            .first()
        )
        if batch is None:
            return None
        _finish(batch, Batch.Status.COMPLETED, at)
        return batch


_END_FIELD = {
    Batch.Status.COMPLETED: "completed_at",
    Batch.Status.EXPIRED: "expired_at",
    Batch.Status.CANCELLED: "cancelled_at",
}


def _finish(batch: Batch, status: str, at: dt.datetime) -> str:
    """End a batch (under its lock): release what is still held, write the output and
    error files, set the final status and its time."""
    refs = set(
        QuotaReservation.objects.filter(
            reference__startswith=f"batch:{batch.pk}:", state=QuotaReservation.State.HELD
        ).values_list("reference", flat=True)
    )
    for ref in refs:
        quota.quota_release(reference=ref, at=at)
    batch.refresh_from_db()
    batch.output_file = (
        file_write(
            account=batch.account,
            purpose=File.Purpose.BATCH_OUTPUT,
            filename=f"batch_{batch.pk.hex}_output.jsonl",
            lines=output_lines(batch),
        )
        if batch.completed
        else None
    )
    errors = batch.requests.exclude(status=BatchRequest.Status.COMPLETED).exists()
    batch.error_file = (
        file_write(
            account=batch.account,
            purpose=File.Purpose.BATCH_ERROR,
            filename=f"batch_{batch.pk.hex}_errors.jsonl",
            lines=error_lines(batch),
        )
        if errors
        else None
    )
    batch.status = status
    setattr(batch, _END_FIELD[status], at)
    batch.next_advance_at = None
    batch.save(
        update_fields=["status", _END_FIELD[status], "output_file", "error_file", "next_advance_at"]
    )
    return status


# --- Output ----------------------------------------------------------------------------

EXCERPT_WORDS = 48


def _iso(value) -> str | None:
    return value.isoformat().replace("+00:00", "Z") if value else None


def output_lines(batch: Batch) -> Iterator[bytes]:
    """One line per completed request, in the OpenAI output shape."""
    tiers = dict(Tier.objects.values_list("pk", "slug"))
    models = dict(ModelVersion.objects.values_list("pk", "slug"))
    qs = batch.requests.filter(status=BatchRequest.Status.COMPLETED).order_by("line")
    for r in qs.values(
        "pk",
        "line",
        "custom_id",
        "model_id",
        "tier_id",
        "input_tokens",
        "output_tokens",
        "turns",
        "started_at",
        "finished_at",
        "simulated",
        "cost",
        "rerouted_from",
        "request",
    ).iterator(chunk_size=2000):
        body = {
            "object": "job.result",
            "model": (r["request"].get("body") or {}).get("model"),
            "served_model": models.get(r["model_id"]),
            "service_tier": tiers.get(r["tier_id"]),
            "usage": {
                "input_tokens": r["input_tokens"],
                "output_tokens": r["output_tokens"],
                "turns": r["turns"],
            },
            "started_at": _iso(r["started_at"]),
            "finished_at": _iso(r["finished_at"]),
            "simulated": r["simulated"],
            "cost": str(r["cost"]),
            "output": {
                "simulated": True,
                "tokens": r["output_tokens"],
                "excerpt": synthetic_text(r["pk"], min(r["output_tokens"], EXCERPT_WORDS)),
            },
        }
        if r["rerouted_from"]:
            body["rerouted_from"] = r["rerouted_from"]
        yield json.dumps(
            {
                "id": f"batch_req_{r['pk']}",
                "custom_id": r["custom_id"],
                "response": {
                    "status_code": 200,
                    "request_id": f"req_{batch.pk.hex[:12]}_{r['line']}",
                    "body": body,
                },
                "error": None,
            }
        ).encode()


def error_lines(batch: Batch) -> Iterator[bytes]:
    """One line per request that did not complete: its code, message and line number."""
    qs = batch.requests.exclude(status=BatchRequest.Status.COMPLETED).order_by("line")
    for r in qs.values("pk", "line", "custom_id", "status", "error").iterator(chunk_size=2000):
        err = dict(
            r["error"] or {"code": r["status"], "message": f"The request was {r['status']}."}
        )
        err["line"] = r["line"]
        yield json.dumps(
            {
                "id": f"batch_req_{r['pk']}",
                "custom_id": r["custom_id"],
                "response": None,
                "error": err,
            }
        ).encode()


# --- Cancel, retry ---------------------------------------------------------------------


def batch_cancel(*, batch: Batch, at: dt.datetime | None = None) -> Batch:
    """Cancel: requests not started are cancelled at once (their credits released when
    the batch ends), requests in flight finish and are billed, then the batch is
    `cancelled`. Cancelling a cancelling or cancelled batch changes nothing."""
    at = at or timezone.now()
    with transaction.atomic():
        locked = Batch.objects.select_for_update().get(pk=batch.pk)
        if locked.status in (Batch.Status.CANCELLING, Batch.Status.CANCELLED):
            return locked
        if locked.status not in (Batch.Status.VALIDATING, Batch.Status.IN_PROGRESS):
            raise BatchNotCancellable(
                f"Batch {locked.pk} has already {locked.status.replace('_', ' ')}.",
                status=409,
                code="batch-not-cancellable",
            )
        locked.status = Batch.Status.CANCELLING
        locked.cancelling_at = at
        locked.next_advance_at = at
        locked.save(update_fields=["status", "cancelling_at", "next_advance_at"])
        _close_requests(
            locked,
            locked.requests.filter(status=BatchRequest.Status.QUEUED),
            BatchRequest.Status.CANCELLED,
            "batch_cancelled",
            "The batch was cancelled before this request started.",
            at,
        )
        if not locked.requests.filter(status=BatchRequest.Status.RUNNING).exists():
            locked.refresh_from_db()
            _finish(locked, Batch.Status.CANCELLED, at)
        else:
            transaction.on_commit(lambda: send_advance(locked.pk))
    locked.refresh_from_db()
    return locked


def batch_retry_failed(*, batch: Batch, at: dt.datetime | None = None) -> Batch:
    """A new batch of the requests that did not complete (failed, expired, cancelled),
    from their original lines, with the same endpoint and window."""
    at = at or timezone.now()
    if batch.status not in Batch.TERMINAL:
        raise BatchError(
            f"Batch {batch.pk} is still {batch.status}; retry when it has ended.",
            status=409,
            code="batch-not-ended",
        )
    if batch.validated_at is None:
        # Ended before its file was read (cancelled while validating, a broken file):
        # the retry is the whole input again.
        input_file_id = batch.input_file_id
    else:
        rows = batch.requests.exclude(status=BatchRequest.Status.COMPLETED).order_by("line")
        if not rows.exists():
            raise BatchError(
                f"Batch {batch.pk} has no failed requests.", status=409, code="nothing-to-retry"
            )
        input_file_id = file_write(
            account=batch.account,
            purpose=File.Purpose.BATCH,
            filename=f"retry_of_{batch.pk.hex}.jsonl",
            lines=(
                json.dumps(r).encode()
                for r in rows.values_list("request", flat=True).iterator(chunk_size=2000)
            ),
        ).id
    return batch_create(
        account=batch.account,
        input_file_id=input_file_id,
        endpoint=batch.endpoint,
        completion_window=batch.completion_window,
        metadata=batch.metadata,
        retry_of=batch,
        at=at,
    )


# --- Recurring -------------------------------------------------------------------------

SCHEDULE_TASK = "routing.start_scheduled_batch"


def schedule_sync(schedule: BatchSchedule) -> None:
    """Keep the schedule's django-celery-beat periodic task in step with it (name,
    crontab, enabled); ops may also edit the periodic task itself in the admin."""
    from django_celery_beat.models import PeriodicTask

    name = f"batch schedule {schedule.pk}: {schedule.name}"[:200]
    kwargs = json.dumps({"schedule_id": schedule.pk})
    task = schedule.periodic_task
    if task is None:
        task = PeriodicTask(task=SCHEDULE_TASK)
    task.name, task.crontab, task.kwargs, task.enabled = (
        name,
        schedule.crontab,
        kwargs,
        schedule.enabled,
    )
    task.interval = task.clocked = task.solar = None
    task.description = f"Starts a batch of {schedule.input_file.filename} for {schedule.account}, window {schedule.completion_window}."
    task.save()
    if schedule.periodic_task_id != task.pk:
        BatchSchedule.objects.filter(pk=schedule.pk).update(periodic_task=task)
        schedule.periodic_task = task


def last_firing(schedule: BatchSchedule, at: dt.datetime, lookback=dt.timedelta(days=31)):
    """The schedule's crontab time at or before `at` (to the minute): the key of one
    firing, so a message redelivered minutes later still finds its batch."""
    cron = schedule.crontab.schedule  # celery crontab, in the crontab's time zone
    local = at.astimezone(cron.tz).replace(second=0, microsecond=0)
    stop = local - lookback
    while local > stop:
        if (
            local.minute in cron.minute
            and local.hour in cron.hour
            and local.day in cron.day_of_month
            and local.month in cron.month_of_year
            and local.isoweekday() % 7 in cron.day_of_week
        ):
            return local.astimezone(dt.UTC)
        local -= dt.timedelta(minutes=1)
    return at.replace(second=0, microsecond=0)


def batch_from_schedule(schedule_id: int, *, at: dt.datetime | None = None) -> Batch | None:
    """The batch of one firing of a schedule (beat's periodic task). Once per firing:
    a repeated message for the same minute finds the batch already made."""
    at = at or timezone.now()
    schedule = (
        BatchSchedule.objects.select_related("account", "crontab")
        .filter(pk=schedule_id, enabled=True)
        .first()
    )
    if schedule is None:
        return None
    firing = last_firing(schedule, at)
    existing = Batch.objects.filter(schedule=schedule, scheduled_for=firing).first()
    if existing is not None:
        return existing
    try:
        with transaction.atomic():
            return batch_create(
                account=schedule.account,
                input_file_id=schedule.input_file_id,
                completion_window=schedule.completion_window,
                metadata={**schedule.metadata, "schedule": schedule.name},
                schedule=schedule,
                scheduled_for=firing,
                at=at,
            )
    except IntegrityError:
        return Batch.objects.filter(schedule=schedule, scheduled_for=firing).first()


# --- Retirement day -------------------------------------------------------------------


def batches_reroute(*, model: ModelVersion, at: dt.datetime | None = None) -> dict[str, int]:
    """On a model's retirement day: batch lines not yet started on it move to its
    successor and are planned again. A batch not yet started keeps its lines on the
    successor for its own plan at start; a running batch gets a plan for the moved lines
    on the time it has left and reservations for it (the retired lanes' unused credits
    are released when the batch ends). Lines the successor cannot take in time (or the
    account cannot pay for) stay and run on the retired model, like accepted jobs.
    Idempotent: only queued lines still on the retired model are touched."""
    at = at or timezone.now()
    out = {"batches": 0, "moved": 0, "kept": 0}
    if lifecycle.model_status(model, at) != lifecycle.RETIRED:
        return out
    res = lifecycle.resolve_successor(model, at)
    successor = res.model
    if successor.pk == model.pk or not lifecycle.is_serving(successor, at):
        return out
    batch_ids = (
        BatchRequest.objects.filter(model=model, status=BatchRequest.Status.QUEUED)
        .filter(batch__status__in=(Batch.Status.VALIDATING, Batch.Status.IN_PROGRESS))
        .values_list("batch_id", flat=True)
    )
    for batch_id in sorted(set(batch_ids)):
        with transaction.atomic():
            batch = Batch.objects.select_for_update().filter(pk=batch_id).first()
            lines = batch.requests.filter(model=model, status=BatchRequest.Status.QUEUED)
            n = lines.count()
            if not n:
                continue
            out["batches"] += 1
            if batch.status == Batch.Status.VALIDATING:
                lines.update(model=successor, rerouted_from=model.slug)
                out["moved"] += n
                continue
            if batch.status != Batch.Status.IN_PROGRESS:
                continue
            moved = _replan_lines(batch, lines, model, successor, at)
            out["moved"] += moved
            out["kept"] += n - moved
    return out


def _replan_lines(batch: Batch, lines, model: ModelVersion, successor: ModelVersion, at) -> int:
    ids = list(lines.values_list("pk", flat=True))
    try:
        with transaction.atomic():
            BatchRequest.objects.filter(pk__in=ids).update(model=successor)
            moving = BatchRequest.objects.filter(pk__in=ids)
            # The moved lines take over the retired lanes' share of the pools once the
            # requests running there end (a conservative plan: it starts them then).
            wave_end = batch.requests.filter(
                status=BatchRequest.Status.RUNNING, model=model
            ).aggregate(end=Max("finishes_at"))["end"]
            begin = max(at, wave_end or at)
            left = (batch.expires_at - begin).total_seconds() * sim_scale()
            loads = batch_loads(exclude=batch)
            for lane in (batch.plan or {}).get("lanes", []):
                if lane["model"] != model.slug:
                    pool = lane["pool_id"]
                    loads[pool] = loads.get(pool, 0.0) + lane["streams"] * lane["stream_share"]
            plan = batch_plan(
                batch, at=at, window_seconds=max(left, 1e-3), requests=moving, loads=loads
            )
            if plan is None or not plan.feasible:
                raise _Keep()
            _assign(
                batch,
                plan,
                at,
                requests=moving,
                suffix=f":from:{model.slug}",
                rerouted_from=model.slug,
            )
            lanes = {x["key"]: x for x in (batch.plan or {}).get("lanes", [])}
            for lane in lanes.values():
                if lane["model"] == model.slug:  # no new work there: running ones finish
                    lane["streams"], lane["retired"] = 0, True
            for new in _plan_json(plan, batch)["lanes"]:
                if new["key"] in lanes:
                    old = lanes[new["key"]]
                    old["streams"] += new["streams"]
                    old["requests"] += new["requests"]
                    old["cost"] = str(Decimal(old["cost"]) + Decimal(new["cost"]))
                else:
                    lanes[new["key"]] = new
            batch.plan = {**(batch.plan or {}), "lanes": list(lanes.values())}
            batch.plan.setdefault("replans", []).append(
                {
                    "at": _iso(at),
                    "from": model.slug,
                    "to": successor.slug,
                    "requests": len(ids),
                    "cost": str(plan.cost),
                }
            )
            batch.predicted_cost = (batch.predicted_cost or Decimal(0)) + plan.cost
            batch.save(update_fields=["plan", "predicted_cost"])
    except (_Keep, quota.QuotaExhausted):
        return 0
    return len(ids)


class _Keep(Exception):
    pass


# --- Sweep (beat) ----------------------------------------------------------------------


def batches_sweep(*, at: dt.datetime | None = None) -> dict[str, int]:
    """Beat's batch work: validate what a lost message left `validating`, start due
    batches, expire overdue ones (through their chain link), finalize finished ones, and
    restart a chain whose next link is late (its message died with a worker)."""
    at = at or timezone.now()
    out = {"validated": 0, "started": 0, "advanced": 0, "finalized": 0}
    stale = at - STALE_ADVANCE
    for pk in Batch.objects.filter(
        status=Batch.Status.VALIDATING, validated_at__isnull=True, created_at__lte=stale
    ).values_list("pk", flat=True):
        out["validated"] += batch_validate(pk, at=at) is not None
    for pk in Batch.objects.filter(
        status=Batch.Status.VALIDATING, validated_at__isnull=False, start_at__lte=at
    ).values_list("pk", flat=True):
        out["started"] += batch_start(pk, at=at) is not None
    for pk in (
        Batch.objects.filter(status__in=ACTIVE)
        .filter(
            Q(next_advance_at__lte=stale)
            | Q(next_advance_at__isnull=True)
            | Q(expires_at__lte=at, status=Batch.Status.IN_PROGRESS)
        )
        .values_list("pk", flat=True)
    ):
        batch_advance(pk, at=at, force=True)
        out["advanced"] += 1
    for pk in Batch.objects.filter(status=Batch.Status.FINALIZING).values_list("pk", flat=True):
        out["finalized"] += batch_finalize(pk, at=at) is not None
    return out


# --- Read --------------------------------------------------------------------------------


def batch_progress(batch: Batch) -> dict:
    """Counts for progress bars: done, failed, running, queued, and the predicted finish."""
    counts = dict(batch.requests.values_list("status").annotate(n=Count("id")))
    S = BatchRequest.Status
    return {
        "total": batch.total,
        "completed": counts.get(S.COMPLETED, 0),
        "failed": sum(counts.get(s, 0) for s in (S.FAILED, S.EXPIRED, S.CANCELLED)),
        "running": counts.get(S.RUNNING, 0),
        "queued": counts.get(S.QUEUED, 0),
        "predicted_finish_at": batch.predicted_finish_at,
    }


def batch_chart(batch: Batch) -> str | None:
    """A PNG (data: URI) of the run: requests completed over simulated time since the
    start, per tier, against the plan's predicted makespan and the window's end."""
    if batch.in_progress_at is None or not batch.completed:
        return None
    import base64
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tiers = dict(Tier.objects.values_list("pk", "slug"))
    ends: dict[str, list[float]] = defaultdict(list)
    for tier_id, finished in batch.requests.filter(
        status=BatchRequest.Status.COMPLETED
    ).values_list("tier_id", "finished_at"):
        ends[tiers.get(tier_id, "?")].append(
            (finished - batch.in_progress_at).total_seconds() * sim_scale() / 60
        )
    fig, ax = plt.subplots(figsize=(8, 3.2))
    colours = {
        "flex": "#7a9cc6",
        "standard": "#4c72b0",
        "priority": "#dd8452",
        "ultrafast": "#c44e52",
    }
    for tier, xs in sorted(ends.items()):
        xs.sort()
        ax.step(
            xs,
            range(1, len(xs) + 1),
            where="post",
            label=f"{tier} ({len(xs)})",
            color=colours.get(tier),
        )
    plan = batch.plan or {}
    if plan.get("makespan_seconds"):
        ax.axvline(
            plan["makespan_seconds"] / 60, ls="--", color="#555", lw=1, label="predicted finish"
        )
    window_end = (batch.expires_at - batch.in_progress_at).total_seconds() * sim_scale() / 60
    ax.axvline(window_end, ls=":", color="#b00", lw=1, label="window ends")
    ax.set_xlabel("simulated minutes since start")
    ax.set_ylabel("requests completed")
    ax.set_xlim(
        left=0, right=max(window_end, max((max(v) for v in ends.values()), default=0)) * 1.02
    )
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()
