"""Properties of `Record.apply`, the fold of a run's lines into its record (SPEC-0022 REQ-2).

A record is the fold, in seq order, of its lines: each field takes the value of the
highest-seq line that carries it non-null, absent or null never erases, the record's
``seq`` is the lowest seq, and unknown fields are dropped. Lines applied out of seq
order (a backfill, a clock jump across day files) must fold exactly as if in order,
so every permutation of the same lines gives the same record.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.ledger.fold import Frozen, LogProbe, Record
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


# -- exact bookkeeping: opened_at, first_at, started_key ------------------------------------


def test_a_new_record_is_empty() -> None:
    r = Record("h", 3)
    assert (r.harness, r.run_id, r.seq, r.last_seq, r.first_at, r.opened_at) == ("h", 3, 0, 0,
                                                                                 "", "")
    assert (r.opened, r.closed, r.is_open, r.fields) == (False, False, False, {})
    assert r.started_key == "" and r.outcome == "running" and r.trigger is None


@pytest.mark.parametrize("order", [(0, 1, 2, 3), (3, 2, 1, 0), (2, 0, 3, 1)])
def test_opened_at_is_the_newest_opened_lines_at(order: tuple[int, ...]) -> None:
    lines = [_line(1, "opened"), _line(2, "updated"), _line(3, "opened"),
             _line(4, "updated")]
    r = fold([lines[i] for i in order])
    assert r.opened_at == "2026-01-01T00:00:03Z"
    assert r.first_at == "2026-01-01T00:00:01Z"
    assert (r.seq, r.last_seq) == (1, 4)


def test_only_an_opened_line_sets_opened_at() -> None:
    r = fold([_line(1, "updated"), _line(2, "closed", outcome="failed"),
              _line(3, "decided", outcome="skipped")])
    assert r.opened_at == ""
    r = fold([_line(5, "opened")])
    assert r.opened_at == "2026-01-01T00:00:05Z"


def test_a_line_without_at_leaves_first_at_empty() -> None:
    line = _line(2, "opened")
    del line["at"]
    r = fold([_line(4, "closed"), line])
    assert r.seq == 2 and r.first_at == "" and r.opened_at == ""


def test_record_from_a_single_line_with_seq_one() -> None:
    r = fold([_line(1, "closed", outcome="success")])
    assert (r.seq, r.last_seq, r.first_at) == (1, 1, "2026-01-01T00:00:01Z")


def test_late_first_line_fills_only_unset_fields() -> None:
    r = fold([_line(3, "closed", outcome="success"), _line(1, "opened", outcome="running",
                                                             trigger="manual", todo_id="t")])
    assert r.fields == {"outcome": "success", "trigger": "manual", "todo_id": "t"}
    assert r.outcome == "success" and r.trigger == "manual"


def test_a_late_line_below_every_setter_loses_and_fills_the_rest() -> None:
    r = fold([_line(5, "closed", exit_code=2), _line(3, "updated", exit_code=9, model_calls=4),
              _line(1, "opened", exit_code=1, model_calls=1, kind="oneshot")])
    assert r.fields == {"exit_code": 2, "model_calls": 4, "kind": "oneshot"}


def test_a_replayed_line_with_the_same_seq_changes_nothing() -> None:
    lines = [_line(1, "opened", model_calls=1), _line(2, "closed", model_calls=2)]
    r = fold([*lines, lines[0], lines[1], lines[0]])
    assert r.fields == {"model_calls": 2}
    assert (r.seq, r.last_seq, r.first_at) == (1, 2, "2026-01-01T00:00:01Z")


@pytest.mark.parametrize("fields,first_at,want", [
    ({"started_at": "2026-01-01T01:00:00+01:00"}, "2026-05-05T00:00:00Z",
     "2026-01-01T00:00:00.000000000Z"),
    ({}, "2026-05-05T02:00:00+02:00", "2026-05-05T00:00:00.000000000Z"),
    ({"started_at": "not a time"}, "2026-05-05T00:00:00Z", "2026-05-05T00:00:00.000000000Z"),
    ({}, "junk", ""),
])
def test_started_key_is_canonical_started_at_else_first_at(fields: dict[str, Any],
                                                           first_at: str, want: str) -> None:
    r = fold([{**_line(1, "opened", **fields), "at": first_at}])
    assert r.started_key == want


# -- to_json ------------------------------------------------------------------------------


def test_to_json_of_an_open_record() -> None:
    r = fold([_line(4, "opened", trigger="manual", log_pruned=True, log="/nowhere/x.log")])
    assert r.is_open
    assert r.to_json() == {"harness": HARNESS, "run_id": RUN_ID, "seq": 4,
                           "trigger": "manual", "log": "/nowhere/x.log", "outcome": "running"}
    assert r.to_json(offline=True)["outcome"] == "running?"


def test_to_json_of_a_closed_record_reports_a_pruned_log(tmp_path: Path) -> None:
    log = tmp_path / "1.log"
    r = fold([_line(1, "opened", log=str(log)), _line(2, "closed", outcome="failed")])
    want = {"harness": HARNESS, "run_id": RUN_ID, "seq": 1, "log": str(log),
            "outcome": "failed"}
    assert r.to_json() == {**want, "log_pruned": True}
    assert r.to_json(probe=LogProbe()) == {**want, "log_pruned": True}
    assert r.to_json(check_log=False) == want
    assert r.to_json(offline=True) == {**want, "log_pruned": True}
    log.write_text("x")
    assert r.to_json() == want
    assert r.to_json(probe=LogProbe()) == want
    log.unlink()
    (tmp_path / "1.log.zst").write_bytes(b"z")
    assert r.to_json() == want
    assert r.to_json(probe=LogProbe()) == want


def test_a_residents_durable_log_gone_is_not_pruned(tmp_path: Path) -> None:
    """keep_runs deletes per-run logs only (REQ-4): a resident's durable log that is gone
    was not pruned, while a one-shot's log at the same path would read so."""
    log = tmp_path / "res.log"
    for kind, pruned in (("resident", None), ("oneshot", True)):
        r = fold([_line(1, "opened", kind=kind, log=str(log)),
                  _line(2, "closed", outcome="success")])
        for out in (r.to_json(), r.to_json(offline=True), r.to_json(probe=LogProbe()),
                    Frozen(r).to_json(probe=LogProbe(str(tmp_path)))):
            assert out.get("log_pruned") is pruned, (kind, out)


@pytest.mark.parametrize("log", ["", 5, None])
def test_no_log_or_an_odd_one_is_never_pruned(log: Any) -> None:
    r = fold([_line(1, "decided", outcome="skipped", log=log)])
    out = r.to_json()
    assert "log_pruned" not in out
    assert out["outcome"] == "skipped"
    assert "log_pruned" not in r.to_json(probe=LogProbe())


def test_log_pruned_is_dropped_from_the_stored_fields(tmp_path: Path) -> None:
    log = tmp_path / "2.log"
    log.write_text("x")
    r = fold([_line(1, "decided", outcome="skipped", log=str(log), log_pruned=True)])
    assert "log_pruned" not in r.to_json()


def test_log_probe_answers_per_directory(tmp_path: Path) -> None:
    (tmp_path / "a.log").write_text("x")
    (tmp_path / "b.log.zst").write_text("x")
    p = LogProbe()
    assert p.gone(str(tmp_path / "a.log")) is False
    assert p.gone(str(tmp_path / "b.log")) is False
    assert p.gone(str(tmp_path / "c.log")) is True
    assert p.gone(str(tmp_path / "missing" / "a.log")) is True
    assert p.gone(str(tmp_path / "a.log" / "x.log")) is True  # a file where a dir should be


def test_log_probe_relative_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "here.log").write_text("x")
    p = LogProbe()
    assert p.gone("here.log") is False
    assert p.gone("gone.log") is True


def test_log_probe_falls_back_to_stat_when_a_directory_cannot_be_listed(
        tmp_path: Path) -> None:
    long = str(tmp_path / ("d" * 300) / "x.log")  # listing fails (name too long)
    assert LogProbe().gone(long) is True


# -- Frozen ---------------------------------------------------------------------------------


def _closed_record() -> Record:
    return fold([_line(2, "opened", trigger="manual", tokens={"input": 1}, exit_code=0),
                 _line(3, "updated", model_calls=2),
                 _line(5, "closed", outcome="success", usage_complete=False)])


def test_frozen_keeps_what_queries_read() -> None:
    r = _closed_record()
    f = Frozen(r)
    assert (f.harness, f.run_id, f.seq, f.last_seq, f.first_at, f.opened_at, f.opened) == (
        HARNESS, RUN_ID, 2, 5, "2026-01-01T00:00:02Z", "2026-01-01T00:00:02Z", True)
    assert (f.outcome, f.trigger, f.started_key) == ("success", "manual",
                                                     "2026-01-01T00:00:02.000000000Z")
    assert (f.closed, f.is_open) == (True, False)
    assert f.fields == r.fields == {"trigger": "manual", "tokens": {"input": 1},
                                    "exit_code": 0, "model_calls": 2, "outcome": "success",
                                    "usage_complete": False}
    assert f.to_json(check_log=False) == r.to_json(check_log=False)
    assert f.to_json(check_log=False, offline=True)["outcome"] == "success"


def test_a_frozen_record_holds_its_fields_only_as_compact_json() -> None:
    """What Frozen is for (tens of thousands of them at rest): no per-instance dict, the
    fields kept encoded. Each read decodes a fresh copy: editing one changes nothing."""
    f = Frozen(_closed_record())
    assert not hasattr(f, "__dict__")
    got = f.fields
    got["model_calls"] = 99
    assert f.fields["model_calls"] == 2


def test_frozen_reports_a_pruned_log_like_the_record(tmp_path: Path) -> None:
    r = fold([_line(1, "decided", outcome="skipped", log=str(tmp_path / "9.log"))])
    want = {"harness": HARNESS, "run_id": RUN_ID, "seq": 1, "outcome": "skipped",
            "log": str(tmp_path / "9.log"), "log_pruned": True}
    assert Frozen(r).to_json() == want
    assert Frozen(r).to_json(probe=LogProbe()) == want
    assert "log_pruned" not in Frozen(r).to_json(check_log=False)


def test_thaw_restores_the_record_and_keeps_folding_in_order() -> None:
    r = _closed_record()
    t = Frozen(r).thaw()
    assert (t.harness, t.run_id, t.seq, t.last_seq, t.first_at, t.opened_at) == (
        r.harness, r.run_id, r.seq, r.last_seq, r.first_at, r.opened_at)
    assert (t.opened, t.closed, t.fields) == (True, True, r.fields)
    t.apply(_line(6, "updated", model_calls=3, cost_usd=0.5))
    assert t.fields["model_calls"] == 3 and t.fields["cost_usd"] == 0.5
    assert t.last_seq == 6
    # A line older than the frozen record's last cannot override what it holds.
    t.apply(_line(4, "updated", outcome="failed", reason="late"))
    assert t.fields["outcome"] == "success" and t.fields["reason"] == "late"


def test_last_day_is_the_day_of_the_newest_line_in_any_order_frozen_and_thawed() -> None:
    """The clock stepped back: the update (seq 2) is in the 2nd's file, the close (seq 3)
    in the 1st's. `last_day` names the last day file holding a line of the run, which a
    prune needs (a closing line in an older file is carried); lines applied in any order
    give it, and it survives Frozen and thaw."""
    lines = [{**_line(1, "opened"), "at": "2026-01-01T23:00:00Z"},
             {**_line(2, "updated", model_calls=3), "at": "2026-01-02T00:30:00Z"},
             {**_line(3, "closed", outcome="failed"), "at": "2026-01-01T23:59:00Z"}]
    for order in (lines, lines[::-1]):
        r = fold(order)
        f = Frozen(r)
        assert (r.last_day, f.last_day, f.thaw().last_day) == ("2026-01-02",) * 3
    assert fold(lines[:1]).last_day == "2026-01-01"


def test_thaw_of_an_unopened_record_stays_partial() -> None:
    r = fold([_line(8, "closed", outcome="failed")])
    t = Frozen(r).thaw()
    assert (t.opened, t.closed, t.is_open) == (False, True, False)


def test_an_opened_line_without_at_keeps_the_known_opened_at() -> None:
    bare = _line(3, "opened")
    del bare["at"]
    r = fold([_line(1, "opened"), bare])
    assert r.opened_at == "2026-01-01T00:00:01Z"
