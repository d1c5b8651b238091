"""Durations (DESIGN.md §2): exact nanoseconds up to 1000000d, and nothing but ValueError
for anything else — non-finite, negative, longer, or not a duration at all."""

from __future__ import annotations

import pytest

from conftest import World
from harness.config.durations import MAX_DURATION_NS, parse_duration_ns

S = 1_000_000_000
DAY = 86_400 * S
ZEROS_400 = "1" + "0" * 400


@pytest.mark.parametrize(("value", "ns"), [
    ("500ms", 500_000_000),
    ("2s", 2 * S),
    ("1h30m", 5_400 * S),
    ("7d", 7 * DAY),
    (" 90 ", 90 * S),
    (90, 90 * S),
    (0, 0),
    (0.0, 0),
    ("0s", 0),
    ("0.000ms", 0),
    ("0.000001ms", 1),
    (0.5, S // 2),
    (1e-05, 10_000),
    (1.001, 1_001_000_000),     # the digits as written: 1.001 * 1e9 is 1000999999.99...
    ("1.001s", 1_001_000_000),
    ("1.001h", 3_603_600_000_000),
    ("0.1s", 100_000_000),
    ("1.0000000001s", S),       # below a nanosecond: rounded down
    ("0." + "3" * 40 + "4m", 20 * S),  # exact at any fraction length
    ("1000000d", MAX_DURATION_NS),
    ("999999d23h59m59.999999999s", MAX_DURATION_NS - 1),
    (86_400_000_000, MAX_DURATION_NS),
    (86_400_000_000.0, MAX_DURATION_NS),
])
def test_parses_exactly(value: str | int | float, ns: int) -> None:
    assert parse_duration_ns(value) == ns


@pytest.mark.parametrize(("value", "message"), [
    (float("inf"), "must be finite, got inf"),
    (float("-inf"), "must be finite, got -inf"),
    (float("nan"), "must be finite, got nan"),
    (1e300, "must be at most 1000000d (about 2,700 years), got 1e+300"),
    (86_400_000_001, "must be at most 1000000d (about 2,700 years), got 86400000001"),
    (86_400_000_000.001,
     "must be at most 1000000d (about 2,700 years), got 86400000000.001"),
    ("1000000d1ms", "must be at most 1000000d (about 2,700 years), got '1000000d1ms'"),
    ("999999999999d", "must be at most 1000000d (about 2,700 years), got '999999999999d'"),
    (ZEROS_400 + "s", "must be at most 1000000d (about 2,700 years), got "
                      "'100000000000000000000000…' (402 characters)"),
    (ZEROS_400, "must be at most 1000000d (about 2,700 years), got "
                "'100000000000000000000000…' (401 characters)"),
    ("9" * 5000 + "ms", "must be at most 1000000d (about 2,700 years), got "
                        "'999999999999999999999999…' (5002 characters)"),
    (-1, "a duration cannot be negative: -1"),
    (True, "not a duration: True"),
    ("", "not a duration: '' (use e.g. 500ms, 2s, 15m, 1h, 7d)"),
    ("inf", "not a duration: 'inf' (use e.g. 500ms, 2s, 15m, 1h, 7d)"),
    ("1e300s", "not a duration: '1e300s' (use e.g. 500ms, 2s, 15m, 1h, 7d)"),
    # 0 is "no limit" to a timeout: a positive duration must not round to it
    (1e-10, "must be at least 1ns or 0, got 1e-10"),
    ("0.0000000001s", "must be at least 1ns or 0, got '0.0000000001s'"),
    ("0.0000009ms", "must be at least 1ns or 0, got '0.0000009ms'"),
])
def test_refuses_with_value_error_only(value: str | int | float, message: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_duration_ns(value)
    assert type(info.value) is ValueError and str(info.value) == message


def test_runs_since_an_overflowing_duration_is_a_flag_error_not_a_traceback(
        world: World) -> None:
    res = world.harness("runs", "--since", ZEROS_400 + "s", "--json")
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr and res.stdout == ""
    assert res.stderr.splitlines()[-1] == (
        "Error: Invalid value for '--since': duration must be at most 1000000d (about 2,700 "
        "years), got '100000000000000000000000…' (402 characters)")
    far = world.harness("runs", "--since", "999999999999d", "--json")
    assert (far.returncode, far.stdout) == (2, "")
    assert far.stderr.splitlines()[-1] == (
        "Error: Invalid value for '--since': duration must be at most 1000000d (about 2,700 "
        "years), got '999999999999d'")
