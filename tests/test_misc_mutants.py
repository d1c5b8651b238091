"""Mutation-test survivors of the query (`harness.ledger.query`), the run feed
(`harness.ledger.feed`), canonical JSON (`harness.ledger.canonical`), the runs table
(`harness.cli.render`) and the CLI's error exit (`harness.cli.output`): exact answers for
the branches the other tests leave unpinned."""

from __future__ import annotations

import dataclasses

import pytest

from harness.cli import render
from harness.ledger.canonical import canonical
from harness.ledger.feed import Committed, Feed
from harness.ledger.query import Query, QueryError
from harness.ledger.schema import OUTCOMES, TRIGGERS
from ledgertools import T0

# -- harness.ledger.query ---------------------------------------------------------------


def test_query_errors_name_the_first_bad_value_and_list_the_valid_ones() -> None:
    """The message of each refused value, whole: the first bad value in sorted order, then
    every valid one, so `harness runs` can print it as it is."""
    cases = [
        ({"outcomes": frozenset({"zz", "timeout"})},
         f"unknown outcome 'timeout' (valid: {', '.join(OUTCOMES)})"),
        ({"triggers": frozenset({"cron", "at"})},
         f"unknown trigger 'at' (valid: {', '.join(TRIGGERS)})"),
        ({"limit": 0}, "limit must be between 1 and 1000, got 0"),
        ({"limit": 1001}, "limit must be between 1 and 1000, got 1001"),
        ({"before_seq": 0}, "before_seq must be a positive seq, got 0"),
    ]
    for kw, message in cases:
        with pytest.raises(QueryError) as info:
            Query(**kw)
        assert str(info.value) == message, kw


def test_the_rendered_bounds_are_not_arguments() -> None:
    """`since` and `until` are derived from the nanosecond bounds: the constructor takes
    neither, and `replace` renders them again from the new bounds."""
    for name in ("since", "until"):
        with pytest.raises(TypeError):
            Query(**{name: "2026-01-01T00:00:00Z"})  # type: ignore[arg-type]
    q = dataclasses.replace(Query(since_ns=T0, until_ns=T0 + 1), since_ns=T0 - 1)
    assert (q.since_ns, q.until_ns, q.since, q.until) == (
        T0 - 1, T0 + 1, "2026-06-15T11:59:59.999999999Z", "2026-06-15T12:00:00.000000001Z")


# -- harness.ledger.feed ----------------------------------------------------------------


def _item(seq: int) -> Committed:
    return Committed(seq, "closed", {"harness": "r", "run_id": seq, "seq": seq})


def test_a_subscription_closed_twice_counts_its_misses_once() -> None:
    """Retiring hands a subscriber's misses to the totals and zeroes its own count, so a
    second close (or a close after the first) adds nothing more; two live subscribers of
    one name add up, and what a retired one missed stays in the name's total."""
    feed = Feed()
    assert feed.active() is False
    one, two, other = feed.subscribe("w", 1), feed.subscribe("w", 2), feed.subscribe("z")
    assert feed.active() is True
    for seq in range(1, 5):
        feed.publish(_item(seq))
    assert (one.missed, two.missed, other.missed) == (3, 2, 0)
    assert feed.missed() == {"w": 5, "z": 0}
    one.close()
    one.close()
    assert (one.missed, feed.missed()) == (0, {"w": 5, "z": 0})
    feed.publish(_item(5))
    assert [c.seq for c in one.drain()] == [1]
    assert [c.seq for c in two.drain()] == [1, 2]
    assert [c.seq for c in other.drain()] == [1, 2, 3, 4, 5]
    assert feed.missed() == {"w": 6, "z": 0}
    two.close()
    other.close()
    two.close()
    assert (feed.active(), feed.missed()) == (False, {"w": 6, "z": 0})


def test_a_committed_item_is_shared_so_it_cannot_be_changed() -> None:
    """Every subscriber gets the same `Committed` object: it is frozen, so no consumer can
    change what the others read."""
    feed = Feed()
    a, b = feed.subscribe("a"), feed.subscribe("b")
    feed.publish(_item(1))
    got_a, got_b = a.get(timeout=0), b.get(timeout=0)
    assert got_a is got_b and got_a is not None
    with pytest.raises(dataclasses.FrozenInstanceError):
        got_a.seq = 2  # type: ignore[misc]
    assert (got_b.seq, got_b.type) == (1, "closed")
    assert (a.get(timeout=0), b.get(timeout=0.01)) == (None, None)


def test_the_default_buffer_holds_1024_items() -> None:
    """A subscriber that names no size buffers 1024 items: the 1025th is its first miss."""
    feed = Feed()
    sub = feed.subscribe("jobs")
    for seq in range(1, 1026):
        feed.publish(_item(seq))
    assert (sub.missed, feed.missed()) == (1, {"jobs": 1})
    assert [c.seq for c in sub.drain()] == list(range(1, 1025))
    assert sub.drain() == []


# -- harness.ledger.canonical -----------------------------------------------------------


def test_integers_wider_than_64_bits_are_spelled_as_the_stdlib_does() -> None:
    """An integer past 64 bits is spelled exactly, as the stdlib does (whichever encoder
    takes it), with the rest of the value still canonical (sorted keys, no spaces, UTF-8,
    floats as repr)."""
    value = {"n": 2**64, "f": 1e-05, "b": [True, None, -(2**70)], "é": "ü"}
    assert canonical(value) == (
        '{"b":[true,null,-1180591620717411303424],"f":1e-05,'
        '"n":18446744073709551616,"é":"ü"}').encode()
    assert canonical(2**64) == b"18446744073709551616"
    assert canonical(-(2**63)) == b"-9223372036854775808"


@pytest.mark.parametrize(("bad", "message"), [
    (float("nan"), "canonical JSON refuses the non-finite number nan"),
    ([float("-inf")], "canonical JSON refuses the non-finite number -inf"),
    ({1: 2}, "canonical JSON needs string keys, got 1"),
    ({"a": {None: 1}}, "canonical JSON needs string keys, got None"),
    (b"x", "canonical JSON cannot encode a bytes"),
    ({"s": {1, 2}}, "canonical JSON cannot encode a set"),
    ("\ud800", "canonical JSON refuses a string that is not valid UTF-8: 'utf-8' codec "
               "can't encode character '\\ud800' in position 0: surrogates not allowed"),
])
def test_refusals_say_what_was_refused(bad: object, message: str) -> None:
    """Each refusal is a ValueError whose message names the value or type refused."""
    with pytest.raises(ValueError) as info:
        canonical(bad)
    assert str(info.value) == message


# -- harness.cli.render -----------------------------------------------------------------


def test_visible_escapes_the_c0_controls_and_delete_and_keeps_ascii() -> None:
    """U+0000..U+001F and U+007F are spelled as escapes, also in a value that needs
    escaping for another character: its spaces and `~` are kept as they are."""
    assert render.visible("a b\x1f\x7f~") == "a b\\x1f\\x7f~"
    assert render.visible("x\x08\x0b\x0c\x0e y") == "x\\x08\\x0b\\x0c\\x0e y"
    assert render.visible("\x00 \x1e") == "\\x00 \\x1e"


def test_visible_spells_the_last_bmp_code_points_in_four_hex_digits() -> None:
    """U+FFFF and U+FFFE (noncharacters, not printable) are still below 0x10000: `\\u`
    and four digits, not `\\U` and eight; the printable neighbours U+00FF, U+0100 and
    U+10000 are kept as they are."""
    assert render.visible("\uffff\ufffe") == "\\uffff\\ufffe"
    assert render.visible("\xff\u0100\U00010000\uffff") == "\xff\u0100\U00010000\\uffff"


@pytest.mark.parametrize("outcome", ["skipped", "missed", "failed"])
def test_took_with_an_unreadable_end_is_unknown_whatever_the_outcome(outcome: str) -> None:
    """Start and end both given but one not a time: the duration is "unknown", even for an
    outcome that ran no process (which, with no times at all, shows "—")."""
    start = "2025-11-03T09:00:00Z"
    assert render.took({"outcome": outcome, "started_at": start, "ended_at": "soon"}) == (
        "unknown")
    assert render.took({"outcome": outcome, "started_at": "then", "ended_at": start}) == (
        "unknown")
    assert render.took({"outcome": outcome}) == ("unknown" if outcome == "failed" else "—")


@pytest.mark.parametrize("size", [0, -1])
def test_a_subscription_buffer_is_bounded(size: int) -> None:
    """The feed's buffers are bounded: queue.Queue takes a size of 0 or less as no bound
    at all, so such a size is refused rather than given a buffer that grows for ever."""
    with pytest.raises(ValueError, match=f"buffer size must be at least 1, got {size}"):
        Feed().subscribe("w", size)
