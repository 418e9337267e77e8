"""Replay a request trace (Azure LLM inference trace format) through the router, the
quota reservation and the pools' slot booking in simulated time, and compare policies.
The logic lives in routing.replay; README "Does it keep its promise?" shows a run."""

from __future__ import annotations

import json
import sys
import time

from django.core.management.base import BaseCommand, CommandError

from routing.replay.deadlines import SLACK_MIX
from routing.replay.policies import POLICIES, PolicyError
from routing.replay.report import markdown, plot, public
from routing.replay.run import ReplayError, replay_run
from routing.replay.trace import TraceError, read_trace
from routing.replay.world import DEFAULT_MODEL, DEFAULT_POOL_SCALE, DEFAULT_START, WorldError


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise CommandError(f"not a number: {text!r}") from None
    if not value > 0 or value != value or value == float("inf"):
        raise CommandError(f"must be a positive number: {text!r}")
    return value


def _loads(text: str) -> list[float]:
    loads = [_positive(part) for part in text.split(",") if part.strip()]
    if not loads:
        raise CommandError("--load names no load")
    return loads


class Command(BaseCommand):
    help = (
        "Replay a trace (CSV: TIMESTAMP,ContextTokens,GeneratedTokens) through the real "
        "router, reservation and slot booking in simulated time on a throwaway database, "
        "and compare policies: attainment, promise calibration, cost against the cost "
        "floor, tier mix, pool utilisation."
    )

    def add_arguments(self, parser):
        parser.add_argument("--trace", required=True, help="The trace CSV file.")
        parser.add_argument(
            "--load",
            help="Offered load as a share of the pool Standard runs on (the arrival rate is "
            "scaled to it); a comma list sweeps (0.5,0.7,0.9). Default: the trace's own rate.",
        )
        parser.add_argument(
            "--rate",
            help="Arrivals this many times as frequent as the trace's, instead of --load "
            "(default: 1, the trace's own rate, when --load is not given either).",
        )
        parser.add_argument(
            "--model", default=DEFAULT_MODEL, help="Model slug (default: %(default)s)."
        )
        parser.add_argument(
            "--limit", type=int, help="Only the first N requests of the trace (default: all)."
        )
        parser.add_argument("--seed", type=int, default=1, help="Seed (default: %(default)s).")
        parser.add_argument(
            "--slack",
            help="Every deadline this many times the unloaded Standard time, instead of the "
            "mix (default): " + ", ".join(f"{v:g} (share {w:g})" for v, w in SLACK_MIX) + ".",
        )
        parser.add_argument(
            "--policies",
            help=f"Comma list among {', '.join(POLICIES)} (default: all the model has).",
        )
        parser.add_argument(
            "--pool-scale",
            default=str(DEFAULT_POOL_SCALE),
            help="The pools' nodes times this, at least one replica (default: 1/64).",
        )
        parser.add_argument(
            "--plot", help="Write a PNG: attainment and cost against load (default: none)."
        )
        parser.add_argument(
            "--json",
            action="store_true",
            help="Print JSON: one object, or a list of objects for a --load sweep.",
        )
        parser.add_argument(
            "--markdown", action="store_true", help="Print the Markdown table (README)."
        )
        parser.add_argument("--quiet", action="store_true", help="No progress on stderr.")

    def handle(self, *args, **o):
        if o["load"] and o["rate"]:
            raise CommandError("give --load or --rate, not both")
        if o["limit"] is not None and o["limit"] < 1:
            raise CommandError("--limit must be at least 1")
        loads = _loads(o["load"]) if o["load"] else None
        rate = _positive(o["rate"]) if o["rate"] else None
        slack = _positive(o["slack"]) if o["slack"] else None
        scale = _scale(o["pool_scale"])
        try:
            requests = read_trace(o["trace"], limit=o["limit"])
        except TraceError as exc:
            raise CommandError(str(exc)) from None
        progress = None if o["quiet"] else _progress(len(requests))
        try:
            reports = replay_run(
                requests,
                model=o["model"],
                loads=loads,
                rate=rate,
                seed=o["seed"],
                slack=slack,
                policies=o["policies"],
                pool_scale=scale,
                start=DEFAULT_START,
                progress=progress,
            )
        except (PolicyError, ReplayError, WorldError) as exc:
            raise CommandError(str(exc)) from None
        if o["plot"]:
            plot(reports, o["plot"])
        if o["json"]:
            out = [public(r) for r in reports]
            self.stdout.write(json.dumps(out[0] if loads is None or len(out) == 1 else out))
        if o["markdown"] or not o["json"]:
            self.stdout.write(markdown(reports))


def _scale(text: str) -> float:
    if "/" in text:
        num, _, den = text.partition("/")
        value = _positive(num) / _positive(den)
    else:
        value = _positive(text)
    if value > 1:
        raise CommandError("--pool-scale is at most 1")
    return value


def _progress(total: int):
    """A progress line on stderr per policy run, refreshed every 2 s."""

    def for_run(label: str):
        started = time.monotonic()
        shown = [started]

        def tick(done: int, of: int) -> None:
            now = time.monotonic()
            if done < of and now - shown[0] < 2.0:
                return
            shown[0] = now
            rate = done / max(now - started, 1e-9)
            end = "\n" if done >= of or not sys.stderr.isatty() else "\r"
            sys.stderr.write(f"replay {label}: {done}/{of} requests ({rate:.0f}/s){end}")
            sys.stderr.flush()

        return tick

    return for_run
