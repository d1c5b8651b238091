"""timefmt: the canonical stamp (four-digit years, nine fraction digits) and RFC 3339 parsing
(any fraction length, kept to the nanosecond)."""

from __future__ import annotations

import subprocess
import sys
from datetime import datetime, timedelta

import pytest

from harness.timefmt import canon, format_ns, is_rfc3339, parse_ns, utc_day

S = 1_000_000_000


@pytest.mark.parametrize(("stamp", "epoch_s"), [
    ("0001-01-01T00:00:00.000000000Z", -62_135_596_800),
    ("0999-01-01T00:00:00.000000000Z", -30_641_760_000),
    ("0999-12-31T23:59:59.999999999Z", -30_610_224_001),
    ("1000-01-01T00:00:00.000000000Z", -30_610_224_000),
    ("1969-12-31T23:59:59.000000000Z", -1),
    ("1970-01-01T00:00:00.000000000Z", 0),
    ("9999-12-31T23:59:59.000000000Z", 253_402_300_799),
])
def test_format_ns_writes_four_digit_years(stamp: str, epoch_s: int) -> None:
    frac = int(stamp[20:29])
    ns = epoch_s * S + frac
    assert format_ns(ns) == stamp
    assert parse_ns(stamp) == ns
    assert canon(stamp) == stamp
    assert utc_day(ns) == stamp[:10]


def test_format_ns_of_a_negative_epoch_keeps_the_fraction_forward() -> None:
    # divmod floors: half a second before the epoch is 23:59:59 plus .5, not 00:00:00 - .5
    assert format_ns(-S // 2) == "1969-12-31T23:59:59.500000000Z"


def test_format_ns_reuses_a_second_only_for_that_second() -> None:
    # Calls that move to another second and back, forward and backward, each get their
    # own second's text (format_ns keeps the last second's text for the next call).
    base = parse_ns("2026-12-01T18:59:59Z")
    for ns in (base, base + 1, base + S, base + S - 1, base - 1, base + 2 * S + 7, base + 7,
               base + 86_400 * S, base):
        dt = datetime(1970, 1, 1) + timedelta(microseconds=(ns // S) * 1_000_000)
        assert format_ns(ns) == f"{dt.isoformat(timespec='seconds')}.{ns % S:09d}Z"


def test_the_first_stamp_of_a_process_in_the_last_second_of_1969() -> None:
    # Nothing formatted before: the kept second must match no second, -1 included.
    out = subprocess.run([sys.executable, "-c", "from harness.timefmt import format_ns; "
                          "print(format_ns(-1))"], capture_output=True, text=True, timeout=60)
    assert out.stdout == "1969-12-31T23:59:59.999999999Z\n", out.stderr


def test_stamps_sort_as_strings_across_the_year_1000() -> None:
    instants = [parse_ns(s) for s in ("0001-06-01T00:00:00Z", "0999-01-01T00:00:00Z",
                                      "1000-01-01T00:00:00Z", "1969-07-20T20:17:40Z",
                                      "2026-01-01T00:00:00Z", "9999-12-31T00:00:00Z")]
    stamps = [format_ns(ns) for ns in instants]
    assert sorted(stamps) == stamps


@pytest.mark.parametrize("ns", [
    parse_ns("0001-01-01T00:00:00Z") - 1,
    parse_ns("9999-12-31T23:59:59.999999999Z") + 1,
])
def test_format_ns_refuses_an_instant_no_stamp_names(ns: int) -> None:
    with pytest.raises(ValueError) as info:
        format_ns(ns)
    assert str(info.value) == f"{ns} ns since the epoch is outside the years 0001-9999"


@pytest.mark.parametrize("text", ["0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00"])
def test_an_offset_past_the_calendar_parses_but_has_no_canonical_stamp(text: str) -> None:
    # A valid RFC 3339 string, but its UTC instant is outside 0001-9999: canon() says so
    # with None (its contract) instead of an OverflowError escaping to the reader.
    assert is_rfc3339(text)
    assert parse_ns(text) == parse_ns(text[:19] + "Z") - int(text[19] + "1") * 3600 * S
    assert canon(text) is None


@pytest.mark.parametrize(("text", "expected"), [
    ("2026-11-30T12:00:00.123456789123Z", "2026-11-30T12:00:00.123456789Z"),
    ("2026-11-30T12:00:00.1234567899999999999999Z", "2026-11-30T12:00:00.123456789Z"),
    ("2026-11-30T23:59:59.9999999999Z", "2026-11-30T23:59:59.999999999Z"),  # same day
    ("2026-11-30T12:00:00.5Z", "2026-11-30T12:00:00.500000000Z"),
    ("2026-11-30T12:00:00.1234567891+01:00", "2026-11-30T11:00:00.123456789Z"),
    ("2026-11-30T12:00:00." + "0" * 8 + "1" + "9" * 300 + "Z",
     "2026-11-30T12:00:00.000000001Z"),
])
def test_parse_ns_accepts_any_fraction_length_truncating_to_nanoseconds(
        text: str, expected: str) -> None:
    assert format_ns(parse_ns(text)) == expected
    assert is_rfc3339(text)
    assert canon(text) == expected


@pytest.mark.parametrize(("text", "why"), [
    ("2026-11-30T12:00:00.Z", ""),     # a dot needs at least one digit
    ("2026-11-30T12:00:00,5Z", ""),
    ("2026-11-30T12:00:00.5", ""),     # no offset
    ("2026-11-30T12:00:00.5x1Z", ""),
    ("2026-02-30T12:00:00.123456789123Z", " (day is out of range for month)"),
    ("\u0662\u0660\u0662\u0666-11-30T12:00:00Z", ""),  # digits, but not ASCII ones
    ("2026-11-30T12:00:00+24:00", " (offset +24:00 out of range)"),
    ("2026-11-30T12:00:00-05:60", " (offset -05:60 out of range)"),
])
def test_parse_ns_still_refuses_what_is_not_rfc3339(text: str, why: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_ns(text)
    assert str(info.value) == f"not an RFC 3339 time: {text!r}{why}"
    assert not is_rfc3339(text)
    assert canon(text) is None


@pytest.mark.parametrize(("stamp", "want"), [
    ("2016-12-31T23:59:60Z", "2016-12-31T23:59:59.999999999Z"),
    ("2016-12-31T23:59:60.25Z", "2016-12-31T23:59:59.999999999Z"),
    ("2017-01-01T00:59:60+01:00", "2016-12-31T23:59:59.999999999Z"),
])
def test_a_leap_second_reads_as_the_last_instant_of_the_second_before(
        stamp: str, want: str) -> None:
    """RFC 3339 allows second 60; POSIX time has no room for it. It reads in time order
    and on its own day, so `harness runs --since` takes it and its line keeps its file."""
    assert format_ns(parse_ns(stamp)) == want
    assert canon(stamp) == want
    with pytest.raises(ValueError, match=r"second must be in 0\.\.59"):
        parse_ns("2016-12-31T23:59:61Z")
