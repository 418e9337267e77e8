import os
import secrets

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from routing.accounts.accounts import account_create
from routing.models import Account

DEMO_CREDITS = 1000
DEMO_ACCOUNT = "demo"  # also `batch submit`'s account when there are several


class Command(BaseCommand):
    help = "Create the quick start's demo admin and demo account (once) and print them."

    def add_arguments(self, parser):
        parser.add_argument(
            "--username",
            default=os.environ.get("DEMO_ADMIN_USER", "admin"),
            help="The demo admin's username (default: $DEMO_ADMIN_USER or %(default)s).",
        )
        parser.add_argument(
            "--account",
            default=DEMO_ACCOUNT,
            help="The demo account's name (default: %(default)s).",
        )

    def handle(self, *args, **options):
        creds = settings.VAR_DIR / "demo-credentials.txt"
        lines = creds.read_text().splitlines() if creds.exists() else []
        username = options["username"]
        User = get_user_model()
        if not User.objects.filter(username=username).exists():
            password = os.environ.get("DEMO_ADMIN_PASSWORD") or secrets.token_urlsafe(12)
            User.objects.create_superuser(username, f"{username}@example.com", password)
            lines = [ln for ln in lines if not ln.startswith("admin ")]
            lines += [f"admin user: {username}", f"admin password: {password}"]
            self.stdout.write(self.style.SUCCESS("Demo admin created."))
        if not Account.objects.filter(name=options["account"]).exists():
            # Enough for the README's 10,000-line batch (250 credits at the batch price).
            account, raw = account_create(name=options["account"], default_credits=DEMO_CREDITS)
            lines = [ln for ln in lines if not ln.startswith("demo ")]
            lines += [f"demo account: {account.name}", f"demo api key: {raw}"]
            self.stdout.write(
                self.style.SUCCESS(f"Demo account created ({DEMO_CREDITS} credits a month).")
            )
        creds.parent.mkdir(parents=True, exist_ok=True)
        creds.write_text("\n".join(lines) + "\n")
        creds.chmod(0o600)
        base = settings.PUBLIC_BASE_URL
        self.stdout.write(f"Credentials ({creds}):\n" + "\n".join(f"  {ln}" for ln in lines))
        self.stdout.write(
            f"Admin:  {base}/admin/\nModels: {base}/api/v1/models/\nDocs:   {base}/api/docs/"
        )
