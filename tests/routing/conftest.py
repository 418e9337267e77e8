from decimal import Decimal

import openai
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


@pytest.fixture
def sdk(live_server):
    """OpenAI clients of the live server, closed at the end of the test (a kept-alive
    connection would otherwise outlive the test database's thread sharing)."""
    made = []

    def make(api_key: str) -> openai.OpenAI:
        made.append(openai.OpenAI(base_url=f"{live_server.url}/v1", api_key=api_key, max_retries=0))
        return made[-1]

    yield make
    for c in made:
        c.close()
