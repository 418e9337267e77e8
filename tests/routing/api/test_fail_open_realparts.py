"""Rate limits fail open while Redis is down (issue 23: a documented choice, README
"Reliability"): a limit that would refuse lets the request through uncounted, and
routing_ratelimit_fail_open_total{scope} counts each time, on a throwaway Redis that is
stopped under the cache."""

import pytest

from routing.core import metrics, ratelimit
from routing.core.ratelimit import Counter
from tests.realparts import RedisServer

pytestmark = [pytest.mark.realparts, pytest.mark.django_db]


def fail_opens(scope: str) -> float:
    """This process's routing_ratelimit_fail_open_total for one scope."""
    for family in metrics.RATE_LIMIT_FAIL_OPEN.collect():
        for s in family.samples:
            if s.name == "routing_ratelimit_fail_open_total" and s.labels["scope"] == scope:
                return s.value
    return 0.0


def test_rate_limits_fail_open_while_redis_is_down_and_count_it(
    redis_server: RedisServer, redis_cache, settings, api
):
    settings.API_THROTTLE_RATES = {"account": "1/min", "write": None, "anon": None}
    a, b = Counter("req:account-9", 1), Counter("tok:account-9", 10)
    at = 1_000_000.0
    assert ratelimit.take([(a, 1)], at).ok and not ratelimit.take([(a, 1)], at).ok
    assert api.get("/api/v1/jobs").status_code == 200  # the throttle's one a minute
    assert api.get("/api/v1/jobs").status_code == 429
    before = {scope: fail_opens(scope) for scope in ("req", "tok")}

    redis_server.stop()
    taken = ratelimit.take([(a, 1), (b, 20)], at)  # both over their limits
    assert taken.ok and taken.counts == ()
    assert fail_opens("req") == before["req"] + 1 and fail_opens("tok") == before["tok"] + 1
    # The key's throttle counts the account's requests (`req:account-N`).
    assert [api.get("/api/v1/jobs").status_code for _ in range(3)] == [200, 200, 200]
    assert fail_opens("req") == before["req"] + 4
