"""Exact refusals and `writable`: what mutation testing of `prepare_line`, `_validate`,
`_check`, `_check_obj`, `_refuse` and `writable` found no test held (the refusals' text),
or held only through the slow retention tests (`writable`).

A refusal's message is what a caller's log shows (SPEC-0022 REQ-20: the error names the
record it concerns), so these pin whole messages, not their first words: the value quoted
as its repr and cut to 80 characters, the valid words listed, the harness and run_id
attached, and the first bad field in the line's order reported."""

from __future__ import annotations

from typing import Any

import pytest

from harness.ledger.errors import LineRejected
from harness.ledger.schema import prepare_line, writable
from harness.timefmt import parse_ns

NOW = parse_ns("2026-06-15T12:00:00Z")


def refusal(line: dict[str, Any]) -> tuple[str, str | None, int | None]:
    with pytest.raises(LineRejected) as info:
        prepare_line(line, NOW)
    return str(info.value), info.value.harness, info.value.run_id


def closed(**fields: Any) -> dict[str, Any]:
    return {"type": "closed", "harness": "h", "run_id": 1, **fields}


@pytest.mark.parametrize("line,message,harness,run_id", [
    ([("type", "opened")], "a ledger line must be an object, got list", None, None),
    ({"type": "opened", "harness": "", "run_id": 1},
     "harness must be a non-empty string, got ''", None, None),
    ({"type": "opened", "harness": ["h"], "run_id": 1},
     "harness must be a non-empty string, got ['h']", None, None),
    ({"type": "opened", "harness": "h", "run_id": "1"},
     "run_id must be an integer ≥ 1, got '1' (harness=h)", "h", None),
    ({"type": "opened", "harness": "h", "run_id": -3},
     "run_id must be an integer ≥ 1, got -3 (harness=h)", "h", None),
    ({"type": "open", "harness": "h", "run_id": 1},
     "unknown line type 'open' (valid: opened, updated, closed, decided)", None, None),
    (closed(at="2026-02-30T00:00:00Z"),
     "at must be an RFC 3339 time, got '2026-02-30T00:00:00Z' (harness=h run_id=1)", "h", 1),
    (closed(at=1781524800),
     "at must be an RFC 3339 time, got 1781524800 (harness=h run_id=1)", "h", 1),
], ids=["not-an-object", "empty-harness", "list-harness", "str-run-id", "negative-run-id",
        "type", "at", "int-at"])
def test_envelope_refusals_read_exactly(line: dict[str, Any], message: str,
                                        harness: str | None, run_id: int | None) -> None:
    assert refusal(line) == (message, harness, run_id)


@pytest.mark.parametrize("fields,message", [
    ({"kind": "daemon"}, "field 'kind' has unknown value 'daemon' (valid: oneshot, resident)"),
    ({"cost_source": "guessed"},
     "field 'cost_source' has unknown value 'guessed' (valid: recorded, priced, unknown)"),
    ({"models": {"model": "m"}}, "field 'models' must be a list, got {'model': 'm'}"),
    ({"sessions": "s"}, "field 'sessions' must be a list, got 's'"),
    ({"sessions": ["s"]}, "field 'sessions' must be an object, got 's'"),
    ({"tokens": [1]}, "field 'tokens' must be an object, got [1]"),
    ({"mismatch": {"kind": "model", "why": 1}},
     "field mismatch.why is not part of the run ledger schema"),
    ({"errors": {"c": "2"}}, "field 'errors' must map class names to counts, got {'c': '2'}"),
    ({"errors": ["c"]}, "field 'errors' must map class names to counts, got ['c']"),
    ({"bogus": 1}, "field 'bogus' is not part of the run ledger schema"),
    ({"attempt": "2"}, "field 'attempt' must be an integer (64-bit), got '2'"),
    ({"override": "yes"}, "field 'override' must be a boolean, got 'yes'"),
    ({"ended_at": "noon"}, "field 'ended_at' must be an RFC 3339 time, got 'noon'"),
    ({"cost_usd": float("inf")}, "field 'cost_usd' must be a finite number, got inf"),
    ({"reason": 7}, "field 'reason' must be a string (valid UTF-8), got 7"),
    ({"models": [{"provider": "p\ud800"}]},
     "field 'models.provider' must be a string (valid UTF-8), got 'p\\ud800'"),
])
def test_field_refusals_read_exactly(fields: dict[str, Any], message: str) -> None:
    assert refusal(closed(**fields)) == (f"{message} (harness=h run_id=1)", "h", 1)


LONG = "x" * 200
CUT = "'" + "x" * 79  # the first 80 characters of the value's repr


@pytest.mark.parametrize("line,message", [
    (closed(attempt=LONG),
     f"field 'attempt' must be an integer (64-bit), got {CUT} (harness=h run_id=1)"),
    (closed(sessions=[LONG]),
     f"field 'sessions' must be an object, got {CUT} (harness=h run_id=1)"),
    (closed(models=LONG), f"field 'models' must be a list, got {CUT} (harness=h run_id=1)"),
    (closed(errors=[LONG]),
     f"field 'errors' must map class names to counts, got [{CUT[:-1]} (harness=h run_id=1)"),
    (closed(kind=LONG),
     f"field 'kind' has unknown value {CUT} (valid: oneshot, resident) (harness=h run_id=1)"),
    (closed(at=LONG), f"at must be an RFC 3339 time, got {CUT} (harness=h run_id=1)"),
    ({"type": "opened", "harness": "h", "run_id": LONG},
     f"run_id must be an integer ≥ 1, got {CUT} (harness=h)"),
    ({"type": "opened", "harness": 10**100, "run_id": 1},
     "harness must be a non-empty string, got 1" + "0" * 79),
], ids=["check", "check_obj", "list", "errors", "enum", "at", "run_id", "harness"])
def test_a_refusal_quotes_at_most_80_characters_of_the_value(line: dict[str, Any],
                                                            message: str) -> None:
    assert refusal(line)[0] == message


def test_a_refusal_names_the_first_bad_field_in_the_lines_order() -> None:
    # Omitted (None) fields and the envelope and chain fields are passed over, wherever
    # they stand; of two bad fields, the first reported is the first in the line.
    line = {"prev": "p", "hash": "x", "seq": 3, "v": 1, "type": "closed", "reason": None,
            "at": None, "harness": "h", "run_id": 1, "model": "m", "models": None,
            "attempt": "2", "outcome": "succeeded"}
    assert refusal(line) == (
        "field 'attempt' must be an integer (64-bit), got '2' (harness=h run_id=1)", "h", 1)
    line = closed(reason=None, outcome="succeeded", attempt="2")
    assert refusal(line)[0] == (
        "field 'outcome' has unknown value 'succeeded' (valid: running, success, failed, "
        "timed_out, skipped, replaced, missed, cancelled, interrupted, budget_exceeded, "
        "quota_parked, model_mismatch, model_unattested, stalled) (harness=h run_id=1)")


def test_writable_keeps_what_a_line_may_hold_and_names_the_rest_in_order() -> None:
    fields = {
        "kind": "resident", "attempt": "2", "todo_id": 17, "reason": None,
        "started_at": "2026-06-15T14:00:00+02:00", "ended_at": "noon",
        "outcome": "succeeded", "cost_usd": float("nan"), "model_calls": True,
        "models": [{"model": "m", "output_tokens": 3}], "sessions": [{"id": "s", "pid": 1}],
        "tokens": {"input": 1}, "errors": {"rate_limit": 2}, "mismatch": {"at": "noon"},
        "usage_complete": False, "bogus": 1, "trace_url": "t\udc80",
    }
    kept, dropped = writable(fields)
    assert kept == {
        "kind": "resident", "reason": None, "started_at": "2026-06-15T14:00:00+02:00",
        "models": [{"model": "m", "output_tokens": 3}], "tokens": {"input": 1},
        "errors": {"rate_limit": 2}, "usage_complete": False,
    }
    assert dropped == ["attempt", "todo_id", "ended_at", "outcome", "cost_usd", "model_calls",
                       "sessions", "mismatch", "bogus", "trace_url"]
    # What it keeps, prepare_line takes as it is (the time made canonical).
    out, cuts = prepare_line(closed(**kept), NOW)
    assert out == {"v": 1, "type": "closed", "at": "2026-06-15T12:00:00.000000000Z",
                   "harness": "h", "run_id": 1, "kind": "resident",
                   "started_at": "2026-06-15T12:00:00.000000000Z",
                   "models": [{"model": "m", "output_tokens": 3}], "tokens": {"input": 1},
                   "errors": {"rate_limit": 2}, "usage_complete": False}
    assert (cuts.redactions, cuts.truncations) == (0, 0)

