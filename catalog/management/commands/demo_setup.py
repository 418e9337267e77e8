import os
import secrets

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Create the quick start's demo admin (once) and print where to go."

    def add_arguments(self, parser):
        parser.add_argument("--username", default=os.environ.get("DEMO_ADMIN_USER", "admin"))

    def handle(self, *args, **options):
        username = options["username"]
        creds = settings.VAR_DIR / "demo-credentials.txt"
        User = get_user_model()
        user = User.objects.filter(username=username).first()
        if user is None:
            password = os.environ.get("DEMO_ADMIN_PASSWORD") or secrets.token_urlsafe(12)
            User.objects.create_superuser(username, f"{username}@example.com", password)
            creds.parent.mkdir(parents=True, exist_ok=True)
            creds.write_text(f"admin user: {username}\nadmin password: {password}\n")
            creds.chmod(0o600)
            self.stdout.write(self.style.SUCCESS(f"Demo admin created: {username} / {password}"))
        elif creds.exists():
            self.stdout.write(f"Demo admin exists; credentials in {creds}:\n{creds.read_text()}")
        else:
            self.stdout.write(f"Admin user {username!r} exists.")
        base = settings.PUBLIC_BASE_URL
        self.stdout.write(
            f"Admin:  {base}/admin/\nModels: {base}/api/v1/models/\nDocs:   {base}/api/docs/"
        )
