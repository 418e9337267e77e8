import json

from django.core.management.base import BaseCommand, CommandError
from django.db.models import Count, Q

from routing.models import Job, LedgerEntry, QuotaReservation
from routing.quota import ledger_mismatches


class Command(BaseCommand):
    help = (
        "Check that every package's balance equals its ledger and that no job was charged "
        "twice or charged while cancelled; print job counts. Exit 1 on any mismatch."
    )

    def add_arguments(self, parser):
        parser.add_argument("--json", action="store_true")

    def handle(self, *args, **o):
        mismatches = ledger_mismatches()
        settled_twice = list(
            LedgerEntry.objects.filter(kind=LedgerEntry.Kind.SETTLE)
            .values("reservation_id")
            .annotate(n=Count("id"))
            .filter(n__gt=1)
            .values_list("reservation_id", flat=True)
        )
        charged_cancelled = list(
            Job.objects.filter(status=Job.Status.CANCELLED)
            .filter(Q(cost__gt=0) | Q(reservation__state=QuotaReservation.State.SETTLED))
            .values_list("pk", flat=True)
        )
        unsettled_done = list(
            Job.objects.filter(status=Job.Status.SUCCEEDED)
            .exclude(reservation__state=QuotaReservation.State.SETTLED)
            .values_list("pk", flat=True)
        )
        counts = dict(Job.objects.values_list("status").annotate(n=Count("id")))
        report = {
            "ok": not (mismatches or settled_twice or charged_cancelled or unsettled_done),
            "balance_mismatches": mismatches,
            "settled_twice": settled_twice,
            "charged_while_cancelled": [str(x) for x in charged_cancelled],
            "succeeded_not_settled": [str(x) for x in unsettled_done],
            "jobs": counts,
            "settlements": LedgerEntry.objects.filter(kind=LedgerEntry.Kind.SETTLE).count(),
        }
        if o["json"]:
            self.stdout.write(json.dumps(report, default=str))
        else:
            for key, value in report.items():
                self.stdout.write(f"{key}: {value}")
        if not report["ok"]:
            raise CommandError("Ledger check failed.")
