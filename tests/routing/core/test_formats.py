"""How numbers read for people (routing.core.formats): admin pages and charts."""

import datetime as dt
from decimal import Decimal

import pytest

from routing.core.formats import (
    change_text,
    credits_text,
    duration_long,
    json_number,
    moment,
    percent_text,
    rows_to_total,
    thousands,
    timings_json,
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


def test_json_numbers_are_rounded_to_six_significant_digits():
    assert json_number(1.2000000000000002) == 1.2
    assert json_number(0.04000000000000001) == 0.04
    assert json_number(764.9315976485403) == 764.932
    assert json_number(0.039323042769028926) == 0.039323
    assert json_number(123456789.0) == 123457000.0
    for kept in (None, True, 3, float("inf")):
        assert json_number(kept) is kept


def test_timings_json_rounds_and_never_sends_a_negative_time():
    raw = {
        "queue_seconds": -1.1102230246251565e-16,
        "ttft_seconds": 0.6135989149957891,
        "total_seconds": 1.2000000000000002,
        "tokens_per_second": 19.125933854063565,
        "stream_capacity": 64,
        "load": None,
        "saturated": False,
    }
    assert timings_json(raw) == {
        "queue_seconds": 0.0,
        "ttft_seconds": 0.613599,
        "total_seconds": 1.2,
        "tokens_per_second": 19.1259,
        "stream_capacity": 64,
        "load": None,
        "saturated": False,
    }
    assert timings_json(None) is None


@pytest.mark.parametrize(
    "parts,rows,total",
    [
        (["0.333333", "0.333333", "0.333334"], ["0.33", "0.33", "0.34"], "1.00"),
        (["1.005", "2.005"], ["1.01", "2.00"], "3.01"),
        (["0.004", "0.004", "0.004"], ["0.01", "0.00", "0.00"], "0.01"),  # a tie: the first
        ([Decimal("12.5")], ["12.50"], "12.50"),
        ([], [], "0.00"),
    ],
)
def test_rounded_rows_add_up_to_their_rounded_total(parts, rows, total):
    got_rows, got_total = rows_to_total(parts)
    assert [str(r) for r in got_rows] == rows and str(got_total) == total
    assert sum(got_rows, Decimal(0)) == got_total
