"""A small trace in the Azure LLM inference trace format, with an arrival pattern of its
own (bursts every few seconds, not the shipped trace's steady stream), and the replay
command run without the test database's transaction (it makes a database of its own)."""

from __future__ import annotations

import datetime as dt
import io
import json
import math
import random

import pytest
from django.core.management import call_command


def write_trace(path, *, n: int = 120, seed: int = 5) -> None:
    """`n` requests in bursts: 1-6 requests within 20 ms, bursts 0.5-4 s apart; prompts
    and outputs lognormal (larger outputs than the coding trace)."""
    rng = random.Random(seed)
    t = dt.datetime(2024, 5, 10, 9, 30, tzinfo=dt.UTC)
    lines = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    while len(lines) <= n:
        t += dt.timedelta(seconds=rng.uniform(0.5, 4.0))
        for _ in range(rng.randint(1, 6)):
            at = t + dt.timedelta(microseconds=rng.randint(0, 20_000))
            prompt = max(1, min(30_000, int(math.exp(rng.gauss(7.0, 1.0)))))
            output = max(1, min(4_000, int(math.exp(rng.gauss(4.5, 1.0)))))
            # 7 fractional digits, as the Azure files have
            lines.append(f"{at:%Y-%m-%d %H:%M:%S}.{at.microsecond:06d}0,{prompt},{output}")
    path.write_text("\n".join(lines[: n + 1]) + "\n")


@pytest.fixture(scope="session")
def burst_trace(tmp_path_factory):
    path = tmp_path_factory.mktemp("traces") / "bursts.csv"
    write_trace(path)
    return path


@pytest.fixture
def replay_cmd(django_db_blocker):
    """`replay_cmd(*args)` runs `manage.py replay` and returns its stdout (parsed when
    --json is among the args)."""

    def run(*args):
        out = io.StringIO()
        with django_db_blocker.unblock():
            call_command("replay", *map(str, args), "--quiet", stdout=out)
        text = out.getvalue()
        return json.loads(text) if "--json" in args else text

    return run
