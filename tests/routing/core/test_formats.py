"""How numbers read for people (routing.core.formats): admin pages and charts."""

import datetime as dt
from decimal import Decimal

import pytest

from routing.core.formats import (
    change_text,
    credits_text,
    duration_long,
    moment,
    percent_text,
    thousands,
)


def test_thousands_and_credits():
    assert thousands(337786) == "337,786"
    assert thousands(1234.56, 1) == "1,234.6"
    assert thousands(None) == "-"
    assert credits_text(Decimal("200.000000")) == "200.00"
    assert credits_text(Decimal("1234.5")) == "1,234.50"
    assert credits_text(None) == "-"


@pytest.mark.parametrize(
    "ratio,text",
    [
        (17.13, "17x"),
        (10.0, "10x"),
        (2.5, "2.5x"),
        (2.0, "2x"),
        (1.03, "+3 %"),
        (0.88, "-12 %"),
        (1.001, "0 %"),
        (None, "-"),
    ],
)
def test_change_reads_as_a_multiple_when_large(ratio, text):
    assert change_text(ratio) == text


@pytest.mark.parametrize(
    "seconds,text",
    [
        (0.8, "0.8 s"),
        (14.6, "15 s"),
        (9.44, "9.4 s"),
        (44, "44 s"),
        (464, "7 min 44 s"),
        (480, "8 min"),
        (7500, "2 h 5 min"),
        (7200, "2 h"),
        (273_600, "3 d 4 h"),
        (None, "-"),
    ],
)
def test_durations_to_the_second(seconds, text):
    assert duration_long(seconds) == text


def test_percent_and_moment():
    assert percent_text(85.04) == "85 %"
    assert percent_text(4.24) == "4.2 %"
    assert percent_text(0.001) == "< 0.1 %"
    assert percent_text(0) == "0 %"
    t = dt.datetime(2026, 12, 3, 12, 53, 4, 900, tzinfo=dt.UTC)
    assert moment(t) == "2026-12-03 12:53:04 UTC"
    assert moment(None) == "-"
