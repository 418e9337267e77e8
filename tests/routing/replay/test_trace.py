"""The trace reader and the deadline mix (no database)."""

import pytest

from routing.replay.deadlines import SLACK_MIX, draw_slacks
from routing.replay.trace import TraceError, parse_timestamp, read_trace, span_seconds


def test_reads_the_azure_format_by_arrival(tmp_path):
    f = tmp_path / "t.csv"
    f.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:17:04.0319600,3180,8\n"
        "2023-11-16 18:17:03.9799600,4808,10\n"
        "\n"
        "2023-11-16 18:17:05,110,27\n"
    )
    reqs = read_trace(f)
    assert [(r.input_tokens, r.output_tokens) for r in reqs] == [(4808, 10), (3180, 8), (110, 27)]
    assert reqs[0].arrival == 0.0
    assert reqs[1].arrival == pytest.approx(0.052)
    assert reqs[2].arrival == pytest.approx(1.02004)
    assert len(read_trace(f, limit=2)) == 2
    assert span_seconds(reqs) == pytest.approx(1.02004)


def test_the_shipped_trace_reads_whole():
    reqs = read_trace("data/traces/azure-llm-2023-code.csv")
    assert len(reqs) > 8000
    assert 3000 < reqs[-1].arrival < 3600  # one hour
    assert all(r.input_tokens >= 1 and r.output_tokens >= 1 for r in reqs)


@pytest.mark.parametrize(
    "body, message",
    [
        ("time,a,b\n", "first line must be"),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\n", "no requests"),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:04,3,\n", "line 2"),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16T18:17,3,4\n", "bad TIMESTAMP"),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:04,0,4\n", "at least 1"),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:04,3\n", "3 columns"),
    ],
)
def test_a_bad_trace_names_its_line(tmp_path, body, message):
    f = tmp_path / "bad.csv"
    f.write_text(body)
    with pytest.raises(TraceError, match=message):
        read_trace(f)


def test_a_missing_file_is_a_trace_error(tmp_path):
    with pytest.raises(TraceError, match="cannot read"):
        read_trace(tmp_path / "nope.csv")


def test_timestamps_keep_microseconds():
    assert parse_timestamp("1970-01-01 00:00:01.9999999") == pytest.approx(1.999999)
    assert parse_timestamp("1970-01-01 00:00:01") == 1.0


def test_slacks_come_from_the_mix_seeded():
    a = draw_slacks(400, seed=1)
    assert a == draw_slacks(400, seed=1)
    assert a != draw_slacks(400, seed=2)
    assert set(a) == {v for v, _ in SLACK_MIX}
    for value, share in SLACK_MIX:
        assert abs(a.count(value) / 400 - share) < 0.08
    assert draw_slacks(3, seed=1, slack=3.0) == [3.0, 3.0, 3.0]
