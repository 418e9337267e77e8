import json

from django.core.management.base import BaseCommand, CommandError

from routing.jobs.interactive import stream_mismatches
from routing.quota.audit import ledger_audit
from routing.router.occupancy import occupancy_mismatches


class Command(BaseCommand):
    help = (
        "Check that every package's balance equals its ledger, that no job was charged "
        "twice or charged while cancelled, and that every batch was charged exactly its "
        "completed requests and holds nothing once ended; print job counts. Exit 1 on any "
        "mismatch."
        " Also that each pool's occupancy counters equal its queued and running jobs, and "
        "that every streamed answer was charged for what it delivered (no more, no less) "
        "and delivered nothing after its job ended."
    )

    def add_arguments(self, parser):
        parser.add_argument("--json", action="store_true", help="Print the report as JSON.")

    def handle(self, *args, **o):
        report = ledger_audit()  # the queries live in routing.quota.audit
        report["occupancy_mismatches"] = occupancy_mismatches()
        report["stream_mismatches"] = stream_mismatches()
        report["ok"] = (
            report["ok"] and not report["occupancy_mismatches"] and not report["stream_mismatches"]
        )
        if o["json"]:
            self.stdout.write(json.dumps(report, default=str))
        else:
            for key, value in report.items():
                self.stdout.write(f"{key}: {value}")
        if not report["ok"]:
            raise CommandError("Ledger check failed.")
