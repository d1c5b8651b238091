"""Properties of `Record.apply`, the fold of a run's lines into its record (SPEC-0022 REQ-2).

A record is the fold, in seq order, of its lines: each field takes the value of the
highest-seq line that carries it non-null, absent or null never erases, the record's
``seq`` is the lowest seq, and unknown fields are dropped. Lines applied out of seq
order (a backfill, a clock jump across day files) must fold exactly as if in order,
so every permutation of the same lines gives the same record.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.ledger.fold import Record
from harness.ledger.schema import OUTCOMES, RECORD_FIELDS

HARNESS = "prop"
RUN_ID = 7
ABSENT = object()  # a field the line does not carry at all (as opposed to null)

# Values for a representative subset of REQ-4 fields, with the falsy values (0, False,
# "", {}) a careless `or` would lose.
FIELD_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "outcome": st.sampled_from(OUTCOMES),
    "reason": st.sampled_from(["spawn", "operator", "hours", "shutdown", "daemon_crash", ""]),
    "exit_code": st.one_of(st.sampled_from([0, -1, 1, 124]), st.integers(-300, 300)),
    "tokens": st.fixed_dictionaries(
        {},
        optional={
            "input": st.integers(0, 10**9),
            "output": st.integers(0, 10**9),
            "cache_read": st.integers(0, 10**6),
            "cache_write": st.integers(0, 10**6),
        },
    ),
    "usage_complete": st.booleans(),
    "todo_id": st.text(max_size=12),
    "model_calls": st.integers(0, 50),
    "cost_usd": st.one_of(st.integers(0, 5), st.floats(0, 100, allow_nan=False)),
    "ended_at": st.sampled_from(["2026-01-01T00:00:00.000000000Z", "2026-01-02T10:00:00Z"]),
}
# Fields a reader does not know (and envelope-like names that are not record fields).
UNKNOWN_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "bogus": st.integers(),
    "zz_future_field": st.text(max_size=5),
    "nested_unknown": st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
}


def _field(values: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """A field's presence: absent, explicitly null, or a value."""
    return st.one_of(st.just(ABSENT), st.none(), values)


@st.composite
def run_lines(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Lines of one run with distinct seqs, listed in seq order."""
    n = draw(st.integers(1, 8))
    seqs = sorted(draw(st.sets(st.integers(1, 10_000), min_size=n, max_size=n)))
    lines = []
    for i, seq in enumerate(seqs):
        typ = draw(st.sampled_from(["opened", "updated", "updated", "closed", "decided"]))
        line: dict[str, Any] = {
            "v": 1,
            "seq": seq,
            "type": typ,
            "at": f"2026-03-04T05:06:{i:02d}.000000000Z",
            "harness": HARNESS,
            "run_id": RUN_ID,
            "prev": "0" * 64,
            "hash": f"{seq:064x}",
        }
        for name, values in (FIELD_VALUES | UNKNOWN_VALUES).items():
            v = draw(_field(values))
            if v is not ABSENT:
                line[name] = v
        lines.append(line)
    return lines


def fold(lines: list[dict[str, Any]]) -> Record:
    r = Record(HARNESS, RUN_ID)
    for line in lines:
        r.apply(dict(line))
    return r


def expected_fields(lines: list[dict[str, Any]]) -> dict[str, Any]:
    """The specification, computed directly: per field, the highest-seq non-null value."""
    out: dict[str, tuple[int, Any]] = {}
    for line in lines:
        for k, v in line.items():
            if k in RECORD_FIELDS and v is not None and (k not in out or line["seq"] > out[k][0]):
                out[k] = (line["seq"], v)
    return {k: v for k, (_s, v) in out.items()}


def snapshot(r: Record) -> tuple[Any, ...]:
    return (r.fields, r.seq, r.last_seq, r.first_at, r.opened_at, r.opened, r.closed, r.is_open)


@settings(max_examples=400, deadline=None)
@given(run_lines())
def test_in_order_fold_matches_the_spec(lines: list[dict[str, Any]]) -> None:
    r = fold(lines)
    assert r.fields == expected_fields(lines)
    assert r.seq == min(line["seq"] for line in lines)
    assert r.last_seq == max(line["seq"] for line in lines)
    assert r.first_at == lines[0]["at"]
    types = {line["type"] for line in lines}
    assert r.opened == bool(types & {"opened", "decided"})
    assert r.closed == bool(types & {"closed", "decided"})
    # Unknown fields and the envelope/chain never become record fields.
    assert set(r.fields) <= set(RECORD_FIELDS)
    assert not set(r.fields) & (set(UNKNOWN_VALUES) | {"v", "seq", "type", "at", "prev", "hash"})


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_any_permutation_folds_like_seq_order(data: st.DataObject) -> None:
    lines = data.draw(run_lines())
    shuffled = data.draw(st.permutations(lines))
    assert snapshot(fold(shuffled)) == snapshot(fold(lines))
    assert fold(shuffled).fields == expected_fields(lines)


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_reapplying_lines_changes_nothing(data: st.DataObject) -> None:
    """A line seen twice (the index and a file scan overlapping) is idempotent."""
    lines = data.draw(run_lines())
    extra = data.draw(st.lists(st.sampled_from(lines), max_size=4))
    order = data.draw(st.permutations(lines + extra))
    assert snapshot(fold(order)) == snapshot(fold(lines))


def _line(seq: int, typ: str, **fields: Any) -> dict[str, Any]:
    return {"v": 1, "seq": seq, "type": typ, "at": f"2026-01-01T00:00:{seq:02d}Z",
            "harness": HARNESS, "run_id": RUN_ID, **fields}


def test_exit_code_zero_survives_a_later_line_without_it() -> None:
    r = fold([
        _line(1, "opened", trigger="manual"),
        _line(2, "closed", outcome="success", exit_code=0),
        _line(3, "updated", tokens={"input": 1}),
        _line(4, "updated", exit_code=None, usage_complete=None),
    ])
    assert r.fields["exit_code"] == 0
    assert r.fields["outcome"] == "success"
    assert r.to_json(check_log=False)["exit_code"] == 0


def test_usage_complete_false_survives_later_null() -> None:
    r = fold([_line(1, "opened", usage_complete=False), _line(2, "closed", usage_complete=None)])
    assert r.fields["usage_complete"] is False


def test_null_and_absent_never_erase() -> None:
    r = fold([_line(1, "opened", todo_id="t1", outcome="running"),
              _line(2, "updated", todo_id=None),
              _line(3, "closed", outcome="failed")])
    assert r.fields == {"todo_id": "t1", "outcome": "failed"}


def test_unknown_fields_are_dropped() -> None:
    r = fold([_line(1, "opened", bogus=1, trigger="manual", tomorrow={"a": 1})])
    assert r.fields == {"trigger": "manual"}
    assert "bogus" not in r.to_json(check_log=False)


def test_record_seq_is_the_first_lines_seq_even_when_it_arrives_last() -> None:
    r = fold([_line(9, "closed", outcome="success"), _line(5, "opened", trigger="manual")])
    assert r.seq == 5
    assert r.first_at == "2026-01-01T00:00:05Z"
    assert r.last_seq == 9
    assert r.fields == {"outcome": "success", "trigger": "manual"}
    assert r.opened and r.closed and not r.is_open


def test_late_line_newer_than_a_fields_last_setter_wins() -> None:
    """Regression: a late line must beat an older value of a field even when some newer
    line (which did not carry that field) was applied first."""
    r = fold([_line(1, "opened", exit_code=5), _line(3, "updated", model_calls=1),
              _line(2, "updated", exit_code=7)])
    assert r.fields == {"exit_code": 7, "model_calls": 1}


@pytest.mark.parametrize("typ,opened,closed", [
    ("opened", True, False), ("updated", False, False),
    ("closed", False, True), ("decided", True, True),
])
def test_line_types_set_flags(typ: str, opened: bool, closed: bool) -> None:
    r = fold([_line(1, typ)])
    assert (r.opened, r.closed) == (opened, closed)
    assert r.outcome == (None if closed else "running")
