"""Replay a few weeks of synthetic traffic on a model from several accounts, so the
retirement impact view and notices have users to show (a demo database). Exact and
idempotent: --jobs N makes exactly N jobs on the model, each keyed by its number, so a
second run with the same arguments adds nothing (a larger --jobs adds the rest)."""

import datetime as dt
import random
from decimal import Decimal

from django.core.management.base import BaseCommand, CommandError
from django.db import transaction
from django.utils import timezone

import simengine
from catalog import lifecycle
from catalog.engine import model_spec
from catalog.models import ModelVersion, Tier
from routing import quota
from routing.accounts.accounts import account_create
from routing.jobs.submit import fingerprint
from routing.models import Account, Job, QuotaPackage
from routing.retirement.notices import notices_announce
from routing.router.route import RouteRequest, task_cost
from routing.router.snapshot import tier_option

PROFILES = [  # (name, share of jobs, typical shape)
    ("acme-robotics", 0.35, (6000, 2500, 4, 20)),
    ("initech", 0.2, (2000, 800, 1, 0)),
    ("globex", 0.15, (12000, 4000, 8, 45)),
    ("umbrella-labs", 0.12, (3000, 1200, 2, 5)),
    ("hooli", 0.1, (8000, 3000, 6, 30)),
    ("pied-piper", 0.08, (1500, 600, 1, 0)),
]
POLICIES = ["migrate", "keep", "expire"]


def split_jobs(total: int, shares: list[float]) -> list[int]:
    """`total` split in proportion to `shares`, summing to exactly `total` (largest
    remainders get the rest; ties to the earlier share)."""
    weight = sum(shares)
    exact = [total * s / weight for s in shares]
    counts = [int(x) for x in exact]
    by_remainder = sorted(range(len(shares)), key=lambda i: (-(exact[i] - counts[i]), i))
    for i in by_remainder[: total - sum(counts)]:
        counts[i] += 1
    return counts


class Command(BaseCommand):
    help = __doc__

    def add_arguments(self, parser):
        parser.add_argument(
            "--model",
            default="gpt-5.3-codex-spark",
            help="Model slug the traffic ran on (default: %(default)s).",
        )
        parser.add_argument(
            "--jobs",
            type=int,
            default=400,
            help="Jobs in all, shared among the demo accounts, 1..100000 (default: %(default)s).",
        )
        parser.add_argument(
            "--days",
            type=int,
            default=21,
            help="Days of history before the model's retirement (or now), 1..60 "
            "(default: %(default)s).",
        )
        parser.add_argument(
            "--seed",
            type=int,
            default=7,
            help="Random seed for the jobs' shapes and times (default: %(default)s).",
        )

    def handle(self, *args, **o):
        model = ModelVersion.objects.filter(slug=o["model"]).first()
        if model is None:
            raise CommandError(f"Unknown model {o['model']!r}; run loadcatalog first.")
        deployment = model.deployments.select_related("tier", "pool").first()
        price = model.prices.filter(tier=deployment.tier).first() if deployment else None
        if deployment is None or price is None:
            raise CommandError(f"{model.slug} has no priced deployment to replay on.")
        if not 1 <= o["jobs"] <= 100_000 or not 1 <= o["days"] <= 60:
            raise CommandError("--jobs must be 1..100000 and --days 1..60.")
        rng = random.Random(o["seed"])
        end = (
            min(timezone.now(), lifecycle.day_start(model.retires_on))
            if model.retires_on
            else timezone.now()
        )
        start = end - dt.timedelta(days=o["days"])
        option = tier_option(deployment, price)
        spec = model_spec(model)
        ultrafast = Tier.objects.filter(slug="ultrafast").first()
        made = existing = 0
        counts = split_jobs(o["jobs"], [share for _, share, _ in PROFILES])
        for i, ((name, _share, (inp, out, turns, tools)), count) in enumerate(
            zip(PROFILES, counts, strict=True)
        ):
            account = Account.objects.filter(name=name).first()
            if account is None:
                account, _ = account_create(name=name, default_credits=Decimal("500"))
                pkg = quota.package_create(
                    account=account,
                    name=f"{model.slug} spare tank",
                    limit="200",
                    period="once",
                    scope=QuotaPackage.Scope.MODELS,
                    model_versions=[model],
                    independent=True,
                )
                QuotaPackage.objects.filter(pk=pkg.pk).update(
                    on_retirement=POLICIES[i % 3],
                    migrate_tier=ultrafast if POLICIES[i % 3] == "migrate" else None,
                    conversion=Decimal("0.2"),
                )
            done = set(
                Job.objects.filter(
                    account=account, idempotency_key__startswith=f"demo:{model.slug}:"
                ).values_list("idempotency_key", flat=True)
            )
            for n in range(count):
                # Drawn for every job, made or not, so job n is the same on every run.
                shape = dict(
                    input_tokens=max(100, int(rng.gauss(inp, inp * 0.3))),
                    output_tokens=max(turns, int(rng.gauss(out, out * 0.3))),
                    turns=turns,
                    tool_seconds=float(tools),
                )
                when = start + dt.timedelta(seconds=rng.uniform(0, (end - start).total_seconds()))
                key = f"demo:{model.slug}:{n}"
                if key in done:
                    existing += 1
                    continue
                made += self._replay(account, model, deployment, option, spec, shape, when, key)
        span = f"({start:%Y-%m-%d} to {end:%Y-%m-%d})"
        if made:
            self.stdout.write(
                f"Replayed {made} jobs on {model.slug} from {len(PROFILES)} accounts {span}."
            )
        if existing:
            self.stdout.write(
                f"{existing} of the {o['jobs']} demo jobs on {model.slug} were already "
                "there; not replayed again."
            )
        # If its retirement is announced, the demo accounts hear of it like real ones.
        told = notices_announce(model=model)
        if told:
            self.stdout.write(f"Recorded {told} retirement notice(s) for the affected accounts.")

    @transaction.atomic
    def _replay(self, account, model, deployment, option, spec, shape, when, key) -> int:
        request = RouteRequest(deadline_seconds=3600, **shape)
        pred = simengine.predict(spec, option.deployment, request.task_profile, breakdown=False)
        cost = task_cost(option, request)
        timings = pred.summary()
        job = Job(
            account=account,
            idempotency_key=key,
            request_fingerprint=fingerprint(shape),
            requested_model=model.slug,
            model=model,
            tier=deployment.tier,
            pool=deployment.pool,
            deadline_seconds=3600,
            status=Job.Status.SUCCEEDED,
            predicted=timings,
            predicted_cost=cost,
            predicted_start_at=when,
            predicted_completion_at=when + dt.timedelta(seconds=pred.total_seconds),
            slot_share=1 / max(1, pred.stream_capacity),
            started_at=when,
            finishes_at=when + dt.timedelta(seconds=pred.total_seconds),
            simulated=timings,
            finished_at=when + dt.timedelta(seconds=pred.total_seconds),
            **shape,
        )
        reservation = quota.quota_reserve_for(
            account=account,
            model_id=model.pk,
            family_id=model.family_id,
            tier_id=deployment.tier_id,
            amount=cost,
            reference=f"job:{job.id}",
            at=when,
        )
        quota.quota_settle(reference=reservation.reference, actual=cost)
        job.reservation, job.package_id, job.cost = reservation, reservation.package_id, cost
        job.save()
        Job.objects.filter(pk=job.pk).update(created_at=when)  # it happened then
        return 1
