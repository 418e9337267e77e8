import json
from decimal import Decimal, InvalidOperation

from django.core.management.base import BaseCommand, CommandError
from django.db import IntegrityError

from routing.accounts.accounts import account_create
from routing.models import Account


class Command(BaseCommand):
    help = (
        "Create an account with an API key and a default monthly quota package; print the "
        "key (shown this once: only its hash is stored)."
    )

    def add_arguments(self, parser):
        parser.add_argument("name", help="The account's name (unique).")
        parser.add_argument(
            "--credits",
            default="100",
            help="Monthly credits of the default package, 1 credit = 1 USD (default: %(default)s).",
        )
        parser.add_argument(
            "--auto-migrate",
            action="store_true",
            help="Opt in to automatic migration to successors of retired models.",
        )
        parser.add_argument(
            "--json", action="store_true", help="Print a JSON object (account, key, credits)."
        )

    def handle(self, *args, **o):
        try:
            credits = Decimal(o["credits"])
            if credits < 0 or not credits.is_finite():
                raise InvalidOperation
        except InvalidOperation:
            raise CommandError(f"--credits must be a number >= 0, got {o['credits']!r}") from None
        if Account.objects.filter(name=o["name"]).exists():
            raise CommandError(f"An account named {o['name']!r} exists already.")
        try:
            account, raw = account_create(
                name=o["name"], default_credits=credits, auto_migrate=o["auto_migrate"]
            )
        except IntegrityError as exc:
            raise CommandError(f"An account named {o['name']!r} exists already.") from exc
        if o["json"]:
            self.stdout.write(
                json.dumps(
                    {
                        "account": account.name,
                        "account_id": account.pk,
                        "api_key": raw,
                        "monthly_credits": str(credits),
                        "auto_migrate": account.auto_migrate,
                    }
                )
            )
        else:
            self.stdout.write(f"Account {account.name} (id {account.pk}) created.")
            self.stdout.write(f"API key (shown once): {raw}")
            self.stdout.write(f"Default package: {credits} credits a month on every model.")
