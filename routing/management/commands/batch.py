"""Batches from the command line: submit a JSONL file and see the verdict at once,
watch a batch's progress, list and cancel batches.

    manage.py batch submit FILE [--account NAME] [--window 8h] [--start-at now|ISO]
                                [--endpoint /v1/jobs] [--metadata k=v ...] [--json] [--wait]
    manage.py batch watch ID [--interval 1] [--once]
    manage.py batch list [--account NAME] [--status S] [--limit 20]
    manage.py batch cancel ID

Without --account, `submit` uses the only account there is, or the quick start's demo
account (`demo_setup`) when there are several (e.g. after `demo_traffic`). `cancel` of a
batch that is already cancelled (or cancelling) changes nothing, says so and exits 1.

Thin: the rules are in routing/batches/ (files, create, validation, cancel, progress).
`watch` only observes; the batch is advanced by the Celery workers. An ID may be a
batch's full id or a unique prefix of it (at least 8 characters). Durations are written
by routing.core.formats.duration_text.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
import time
from decimal import Decimal
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError, OutputWrapper
from django.utils import timezone

from routing.api.shapes import batch_json
from routing.batches.cancel import batch_cancel
from routing.batches.create import batch_create
from routing.batches.errors import BatchError
from routing.batches.files import FileRejected, file_create
from routing.batches.params import parse_start, parse_window
from routing.batches.progress import batch_progress
from routing.batches.validation import batch_validate
from routing.core.clock import sim_scale
from routing.core.formats import duration_text
from routing.management.commands.demo_setup import DEMO_ACCOUNT
from routing.models import Account, Batch, BatchRequest

ENDED_BADLY = (Batch.Status.FAILED, Batch.Status.EXPIRED)
BAR_WIDTH = 24
MIN_ID_PREFIX = 8
SHOWN_LINE_ERRORS = 5


class Command(BaseCommand):
    help = (
        "Submit a batch file (prints the plan or the refusal), watch a batch's progress, "
        "list or cancel batches."
    )

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")

        s = sub.add_parser("submit", help="Upload a JSONL file and create a batch from it.")
        s.add_argument("file", help="JSONL file, one request a line.")
        s.add_argument(
            "--account",
            help="Account name (default: the only account, or the demo account "
            f"{DEMO_ACCOUNT!r} when there are several).",
        )
        s.add_argument(
            "--window",
            default="24h",
            help="Completion window from 1m to 7d, e.g. 30m, 8h, 2d (default: %(default)s).",
        )
        s.add_argument(
            "--start-at",
            default="now",
            help="'now' or an ISO 8601 time at most 31 days ahead (default: %(default)s).",
        )
        s.add_argument(
            "--endpoint",
            default="/v1/jobs",
            help="/v1/jobs, /v1/chat/completions or /v1/responses (default: %(default)s).",
        )
        s.add_argument(
            "--metadata",
            nargs="+",
            action="extend",
            default=[],
            metavar="KEY=VALUE",
            help="Metadata pairs, at most 16 (repeatable; default: none).",
        )
        s.add_argument("--json", action="store_true", help="Print the batch as JSON (API shape).")
        s.add_argument("--wait", action="store_true", help="Then watch it until it ends.")
        s.add_argument(
            "--interval",
            type=float,
            default=1.0,
            help="With --wait: seconds between refreshes (default: %(default)s).",
        )

        w = sub.add_parser("watch", help="Show a batch's progress until it ends.")
        w.add_argument("id", help="Batch id (or a unique prefix of it).")
        w.add_argument(
            "--interval",
            type=float,
            default=1.0,
            help="Seconds between refreshes (default: %(default)s).",
        )
        w.add_argument("--once", action="store_true", help="Print the progress once and stop.")

        ls = sub.add_parser("list", help="List batches, newest first.")
        ls.add_argument("--account", help="Only this account's batches (default: every account).")
        ls.add_argument(
            "--status",
            choices=Batch.Status.values,
            help="Only batches in this status (default: any).",
        )
        ls.add_argument(
            "--limit",
            type=int,
            default=20,
            help="At most this many batches (default: %(default)s).",
        )

        c = sub.add_parser("cancel", help="Cancel a batch (requests in flight finish).")
        c.add_argument("id", help="Batch id (or a unique prefix of it).")

    def handle(self, *args, **o):
        action = o["action"]
        if action == "submit":
            return self.submit(o)
        if action == "watch":
            return self.watch(find_batch(o["id"]), interval=o["interval"], once=o["once"])
        if action == "list":
            return self.list_batches(o)
        if action == "cancel":
            return self.cancel(o)
        raise CommandError(f"Unknown action {action!r}.")  # pragma: no cover (argparse)

    # --- submit -----------------------------------------------------------------------

    def submit(self, o) -> None:
        account = find_account(o["account"])
        metadata = parse_metadata(o["metadata"])
        try:  # the arguments first: a refused batch should not leave its upload behind
            parse_window(o["window"])
            parse_start(o["start_at"], timezone.now())
        except BatchError as exc:
            raise CommandError(f"{exc} ({_option(exc.param)})") from None
        path = Path(o["file"])
        if not path.is_file():
            raise CommandError(f"No file {path}.")
        try:
            with path.open("rb") as fh:
                f = file_create(account=account, purpose="batch", upload=fh, filename=path.name)
        except FileRejected as exc:
            raise CommandError(f"{path}: {exc}") from None
        except OSError as exc:
            raise CommandError(f"{path}: cannot read ({exc.strerror or exc}).") from None
        try:
            batch = batch_create(
                account=account,
                input_file_id=f.id,
                endpoint=o["endpoint"],
                completion_window=o["window"],
                start_at=o["start_at"],
                metadata=metadata,
            )
        except BatchError as exc:
            where = f" ({_option(exc.param)})" if exc.param else ""
            raise CommandError(f"{exc}{where}") from None
        # The validation task runs in a worker after commit; validate here too (it is
        # idempotent: whoever comes second finds the batch validated) to answer at once.
        batch_validate(batch.pk)
        batch = Batch.objects.select_related("input_file").get(pk=batch.pk)

        if o["json"]:
            self.stdout.write(json.dumps(batch_json(batch), indent=2))
        else:
            self.stdout.write(
                f"Uploaded {path.name} as {f.id} ({f.lines} lines, {f.bytes:,} bytes) "
                f"for account {account.name}."
            )
            self.stdout.write(verdict(batch, watching=o["wait"]))
        if batch.status == Batch.Status.FAILED:
            raise CommandError(refusal(batch))
        if o["wait"]:
            # With --json stdout stays one JSON document: the progress goes to stderr
            # (unstyled: Django's stderr wrapper paints everything as an error).
            out = OutputWrapper(self.stderr._out) if o["json"] else self.stdout
            self.watch(batch, interval=o["interval"], once=False, out=out)

    # --- watch ------------------------------------------------------------------------

    def watch(
        self,
        batch: Batch,
        *,
        interval: float,
        once: bool,
        out: OutputWrapper | None = None,
    ) -> None:
        out = out or self.stdout
        tty = out.isatty()
        width = shutil.get_terminal_size((100, 24)).columns - 1 if tty else 10_000
        drawn = 0
        try:
            while True:
                batch = Batch.objects.get(pk=batch.pk)
                line = progress_line(batch, batch_progress(batch), timezone.now(), width)
                ended = batch.status in Batch.TERMINAL
                if tty:
                    out.write("\r" + line.ljust(drawn), ending="\n" if ended or once else "")
                    out.flush()
                    drawn = len(line)
                else:
                    out.write(line)
                if ended or once:
                    break
                time.sleep(max(0.05, interval))
        except KeyboardInterrupt:
            if tty:
                out.write("")
            raise CommandError(
                f"Stopped watching; batch {batch.pk} goes on ({batch.status}).", returncode=130
            ) from None
        if batch.status in Batch.TERMINAL:
            out.write(ending(batch))
            if batch.status in ENDED_BADLY:
                raise CommandError(f"Batch {batch.pk} {batch.status}." + _error_tail(batch))

    # --- list, cancel -----------------------------------------------------------------

    def list_batches(self, o) -> None:
        qs = Batch.objects.select_related("account").order_by("-created_at")
        if o["account"]:
            qs = qs.filter(account=find_account(o["account"]))
        if o["status"]:
            qs = qs.filter(status=o["status"])
        rows = list(qs[: max(1, o["limit"])])
        if not rows:
            self.stdout.write("No batches.")
            return
        self.stdout.write(
            f"{'id':<36}  {'account':<12} {'status':<11} {'done':>13} {'failed':>6} "
            f"{'window':>6}  {'cost':>10}  created (UTC)"
        )
        for b in rows:
            self.stdout.write(
                f"{b.pk!s:<36}  {b.account.name[:12]:<12} {b.status:<11} "
                f"{f'{b.completed:,}/{b.total:,}':>13} {b.failed:>6,} {b.completion_window:>6}  "
                f"{money(b.cost):>10}  {_utc(b.created_at)}"
            )

    def cancel(self, o) -> None:
        batch = find_batch(o["id"])
        if batch.status in (Batch.Status.CANCELLING, Batch.Status.CANCELLED):
            # batch_cancel would change nothing: say so, and fail like any refused cancel.
            when = batch.cancelled_at or batch.cancelling_at
            raise CommandError(
                f"Batch {batch.pk} is already {batch.status}"
                + (f" (since {_utc(when)} UTC)" if when else "")
                + "; nothing to do."
            )
        try:
            batch = batch_cancel(batch=batch)
        except BatchError as exc:
            raise CommandError(str(exc)) from None
        p = batch_progress(batch)
        self.stdout.write(
            f"Batch {batch.pk} {batch.status}: {p['completed']:,} done, {p['running']:,} "
            f"still running (they finish and are billed), {p['failed']:,} not run."
        )


# --- Lookups and arguments ---------------------------------------------------------------


def find_account(name: str | None) -> Account:
    """The named account; without a name, the only account there is, or the quick
    start's demo account when there are several."""
    if name:
        account = Account.objects.filter(name=name).first()
        if account is None:
            raise CommandError(f"No account named {name!r}.{_accounts_hint()}")
        return account
    accounts = list(Account.objects.order_by("name")[:2])
    if len(accounts) == 1:
        return accounts[0]
    if not accounts:
        raise CommandError("There is no account yet; create one with `manage.py create_account`.")
    demo = Account.objects.filter(name=DEMO_ACCOUNT).first()
    if demo is not None:
        return demo
    raise CommandError(f"Several accounts: name one with --account.{_accounts_hint()}")


def _accounts_hint(limit: int = 20) -> str:
    names = list(Account.objects.order_by("name").values_list("name", flat=True)[: limit + 1])
    if not names:
        return ""
    more = ", ..." if len(names) > limit else ""
    return f" Accounts: {', '.join(names[:limit])}{more}."


def find_batch(ident: str) -> Batch:
    """A batch by its id, or by a unique prefix of it (8 characters or more)."""
    text = (ident or "").strip().lower()
    digits = text.replace("-", "")
    if not digits or any(c not in "0123456789abcdef" for c in digits) or len(digits) > 32:
        raise CommandError(f"No batch {ident!r}: a batch id is a UUID.")
    if len(digits) == 32:
        batch = Batch.objects.filter(pk=digits).first()
        if batch is None:
            raise CommandError(f"No batch {ident}.")
        return batch
    if len(digits) < MIN_ID_PREFIX:
        raise CommandError(
            f"No batch {ident!r}: give the full id or at least {MIN_ID_PREFIX} characters."
        )
    # UUID text with hyphens (PostgreSQL casts the uuid to it; SQLite stores bare hex
    # and Django strips the hyphens from the pattern there).
    hyphenated = "-".join(
        part for part in (digits[:8], digits[8:12], digits[12:16], digits[16:20], digits[20:])
    ).rstrip("-")
    found = list(Batch.objects.filter(pk__startswith=hyphenated).order_by("-created_at")[:3])
    if not found:
        raise CommandError(f"No batch {ident}.")
    if len(found) > 1:
        ids = ", ".join(str(b.pk) for b in found)
        raise CommandError(f"Batch id prefix {ident} is ambiguous: {ids}...")
    return found[0]


def parse_metadata(pairs: list[str]) -> dict[str, str] | None:
    if not pairs:
        return None
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise CommandError(f"--metadata takes KEY=VALUE pairs, got {pair!r}.")
        out[key.strip()] = value
    return out


def _option(param: str) -> str:
    return {
        "completion_window": "--window",
        "start_at": "--start-at",
        "endpoint": "--endpoint",
        "metadata": "--metadata",
        "input_file_id": "FILE",
    }.get(param, param)


# --- Formatting ---------------------------------------------------------------------------


def money(value) -> str:
    if value is None:
        return "-"
    value = Decimal(value)
    return f"{value:,.2f}" if abs(value) >= 1 or value == 0 else f"{value:.4f}"


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return duration_text(max(0.0, float(seconds)))


def _utc(value: dt.datetime | None) -> str:
    return value.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S") if value else "-"


def _clock(value: dt.datetime, now: dt.datetime) -> str:
    """HH:MM:SS UTC (with the date when not today) and how far from now."""
    value = value.astimezone(dt.UTC)
    fmt = "%H:%M:%S" if value.date() == now.astimezone(dt.UTC).date() else "%Y-%m-%d %H:%M:%S"
    delta = (value - now).total_seconds()
    rel = f"in {duration(delta)}" if delta >= 0 else f"{duration(-delta)} ago"
    return f"{value.strftime(fmt)} UTC ({rel})"


def bar(done: int, failed: int, total: int, width: int = BAR_WIDTH) -> str:
    """[####x-----]: '#' completed, 'x' failed, '-' to do."""
    if total <= 0:
        return "[" + "-" * width + "]"
    n_done = width * done // total
    n_failed = max(0, min(width, width * (done + failed) // total) - n_done)
    return "[" + "#" * n_done + "x" * n_failed + "-" * (width - n_done - n_failed) + "]"


def progress_line(batch: Batch, p: dict, now: dt.datetime, width: int = 10_000) -> str:
    """One line of progress: bar, percent, counts | status and (predicted) finish | cost.
    Parts of less weight are left out when the line would be wider than `width`."""
    total = p["total"] or batch.total
    done, failed = p["completed"], p["failed"]
    pct = 100.0 * (done + failed) / total if total else 0.0
    head = f"{bar(done, failed, total)} {pct:5.1f}%  {done:,}/{total:,} done"
    if failed:
        head += f", {failed:,} failed"
    running = f", {p['running']:,} running" if p["running"] else ""
    status = batch.status
    if status == Batch.Status.VALIDATING:
        if batch.validated_at is None:
            when = "validating"
        else:
            when = f"validated; starts {_clock(batch.start_at, now)}"
    elif status in Batch.TERMINAL:
        ended = batch.completed_at or batch.failed_at or batch.expired_at or batch.cancelled_at
        when = f"{status} {_clock(ended, now)}" if ended else status
    elif batch.predicted_finish_at:
        when = f"{status}; finish ~{_clock(batch.predicted_finish_at, now)}"
    else:
        when = status
    cost = f"cost {money(batch.cost)}"
    if batch.predicted_cost is not None:
        cost += f" of ~{money(batch.predicted_cost)}"
    line = f"{head}{running} | {when} | {cost}"
    for shorter in (f"{head} | {when} | {cost}", f"{head} | {when}", head):
        if len(line) <= width:
            break
        line = shorter
    return line[:width]


def a_or_an(text: str) -> str:
    """The article for a window as spoken: "an 8h", "an 11h", "a 30m", "a 24h"."""
    digits = text.split(".")[0]
    digits = "".join(c for c in digits if c.isdigit())
    eleven = digits in ("11", "18") or (len(digits) == 5 and digits[:2] in ("11", "18"))
    return "an" if digits.startswith("8") or eleven else "a"


def verdict(batch: Batch, *, watching: bool = False) -> str:
    """What validation made of the batch: the plan, or the refusal; `watching`: the
    progress follows, so no hint to watch it."""
    lines = [f"Batch {batch.pk}: {batch.status}"]
    if batch.status == Batch.Status.FAILED:
        return lines[0]
    plan = batch.plan or {}
    lanes = plan.get("lanes", [])
    scale = plan.get("time_scale") or sim_scale()
    if lanes:
        lines.append(
            f"  {'model':<16} {'tier':<10} {'pool':<12} {'streams':>7} {'requests':>8} "
            f"{'makespan':>9} {'cost':>10}"
        )
        for x in lanes:
            lines.append(
                f"  {x['model'][:16]:<16} {x['tier']:<10} {str(x.get('pool', ''))[:12]:<12} "
                f"{x['streams']:>7,} {x['requests']:>8,} "
                f"{duration(x.get('makespan_seconds')):>9} {money(x['cost']):>10}"
            )
    now = timezone.now()
    if plan:
        span = plan.get("makespan_seconds")
        fastest = plan.get("fastest_makespan_seconds")
        lines.append(
            f"  Predicted makespan {duration(span)} (fastest plan {duration(fastest)}) "
            f"in {a_or_an(batch.completion_window)} {batch.completion_window} window"
            + (f"; simulated seconds, {scale:g} per wall second" if scale != 1 else "")
            + "."
        )
    if batch.predicted_finish_at:
        lines.append(f"  Predicted finish {_clock(batch.predicted_finish_at, now)}.")
    if batch.predicted_cost is not None:
        lines.append(f"  Predicted cost {money(batch.predicted_cost)} credits.")
    if batch.status == Batch.Status.VALIDATING and batch.validated_at is None:
        lines.append("  Not validated yet (a worker is on it).")
    elif batch.status == Batch.Status.VALIDATING:
        lines.append(
            f"  Starts {_clock(batch.start_at, now)}; expires {_utc(batch.expires_at)} UTC."
        )
    else:
        lines.append(f"  Expires {_clock(batch.expires_at, now)} if not done.")
    if batch.failed:
        lines.append(f"  {batch.failed:,} request(s) cannot run and will be in the error file:")
        bad = batch.requests.filter(status=BatchRequest.Status.FAILED).order_by("line")
        for r in bad.values("line", "error")[:SHOWN_LINE_ERRORS]:
            lines.append(f"    line {r['line']}: {(r['error'] or {}).get('message', '')}")
        if batch.failed > SHOWN_LINE_ERRORS:
            lines.append(f"    ... and {batch.failed - SHOWN_LINE_ERRORS:,} more.")
    if not watching:
        lines.append(f"  Watch it: manage.py batch watch {batch.pk}")
    return "\n".join(lines)


def _error_text(e: dict) -> str:
    where = f"line {e['line']}: " if e.get("line") else ""
    more = " (more errors not shown)" if e.get("more") else ""
    return f"{where}{e.get('code', 'error')}: {e.get('message', '')}{more}"


def _error_tail(batch: Batch, limit: int = 10) -> str:
    errors = batch.errors or []
    if not errors:
        return ""
    shown = [f"\n  {_error_text(e)}" for e in errors[:limit]]
    if len(errors) > limit:
        shown.append(f"\n  ... and {len(errors) - limit} more.")
    return "".join(shown)


def refusal(batch: Batch) -> str:
    return f"Batch {batch.pk} refused:" + _error_tail(batch, limit=20)


def ending(batch: Batch) -> str:
    p = batch_progress(batch)
    lines = [
        f"Batch {batch.pk} {batch.status}: {p['completed']:,} of {p['total']:,} requests "
        f"done, {p['failed']:,} failed; cost {money(batch.cost)} credits"
        + (f" (predicted {money(batch.predicted_cost)})" if batch.predicted_cost else "")
        + "."
    ]
    lines.append(f"  Output file: {batch.output_file_id or '-'}")
    lines.append(f"  Error file:  {batch.error_file_id or '-'}")
    if batch.output_file_id or batch.error_file_id:
        lines.append("  (GET /api/v1/files/<file id>/content)")
    return "\n".join(lines)
