from decimal import Decimal

import pytest

from routing.accounts.accounts import account_create
from tests.helpers import ApiClient


@pytest.fixture
def account_with_key(builtin_catalog):
    account, raw = account_create(name="acme", default_credits=Decimal("100"))
    return account, raw


@pytest.fixture
def api(account_with_key):
    return ApiClient(account_with_key[1])


@pytest.fixture
def account(account_with_key):
    return account_with_key[0]
