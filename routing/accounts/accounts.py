"""Accounts: a new account comes with one API key and a default monthly package."""

from __future__ import annotations

from decimal import Decimal

from django.db import transaction

from routing.accounts.keys import api_key_create
from routing.models import Account
from routing.quota import package_create


@transaction.atomic
def account_create(
    *, name: str, default_credits=None, auto_migrate: bool = False
) -> tuple[Account, str]:
    """A new account with one key and a default monthly package on every model."""
    account = Account.objects.create(name=name, auto_migrate=auto_migrate)
    _, raw = api_key_create(account=account, role="admin")  # the owner's key
    package_create(
        account=account,
        name="Main (monthly)",
        limit=Decimal("100") if default_credits is None else default_credits,
        order=10,
    )
    return account, raw
