"""Mutation-test survivors of the offline reader (`harness.ledger.reader`): exact answers of
`scan` over hand-written day files, for the branches the other tests leave unpinned."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness.ledger.query import Query
from harness.ledger.reader import decode_line, head_of, scan
from harness.ledger.writer import MAX_LINE
from harness.timefmt import format_ns
from ledgertools import DAY, HOUR, MINUTE, T0


def write_day(d: Path, day_ns: int, *lines: dict[str, Any]) -> Path:
    """Write `lines` as the day file of `day_ns`'s UTC date (compact JSON, one a line)."""
    d.mkdir(exist_ok=True)
    p = d / f"{format_ns(day_ns)[:10]}.jsonl"
    p.write_bytes(b"".join(json.dumps(x, separators=(",", ":")).encode() + b"\n"
                           for x in lines))
    return p


def line(seq: int, typ: str, ns: int, name: str, run_id: int, **f: Any) -> dict[str, Any]:
    return {"seq": seq, "type": typ, "at": format_ns(ns), "harness": name, "run_id": run_id,
            **f}


def answer(d: Path, **kw: Any) -> tuple[list[dict[str, Any]], int | None]:
    recs, oldest, _stats = scan(str(d), Query(**kw))
    return [r.to_json(offline=True, check_log=False) for r in recs], oldest


def test_a_first_line_with_no_time_counts_as_earliest_even_if_its_seq_is_copied(
        tmp_path: Path) -> None:
    """x/1's only line has an `at` that is no time and no started_at: it starts at the
    earliest (Record.started_key is ""), and a damaged copy of its seq on another record's
    line, with a real time, does not lend x/1 that time."""
    d = tmp_path / "ledger"
    write_day(d, T0,
              {"seq": 1, "type": "decided", "at": "whenever", "harness": "x", "run_id": 1,
               "outcome": "missed"},
              line(1, "decided", T0, "y", 1, outcome="missed"),
              line(2, "decided", T0, "z", 1, outcome="missed"))
    for limit in (5, None):
        recs, oldest, stats = scan(str(d), Query(until_ns=T0 - HOUR, limit=limit))
        assert ([(r.harness, r.run_id, r.seq) for r in recs], oldest, stats.skipped) == (
            [("x", 1, 1)], 1, 0), limit


def test_a_look_back_keeps_the_newer_lines_trigger_and_outcome(tmp_path: Path) -> None:
    """x/1 opened, closed as failed three days back; a line after `since`'s slack moves its
    start into range and says manual/success. The look-back reads the older file for the
    opened line, but the newer line's words win in the filters, as in the fold."""
    d = tmp_path / "ledger"
    old = T0 - 3 * DAY
    write_day(d, old,
              line(1, "opened", old, "x", 1, trigger="schedule", started_at=format_ns(old)),
              line(2, "closed", old + MINUTE, "x", 1, outcome="failed", exit_code=1))
    write_day(d, T0,
              line(3, "updated", T0, "x", 1, trigger="manual", outcome="success",
                   started_at=format_ns(T0 - HOUR)))
    want = {"harness": "x", "run_id": 1, "seq": 1, "trigger": "manual",
            "started_at": format_ns(T0 - HOUR), "outcome": "success", "exit_code": 1}
    since = T0 - 2 * HOUR
    for kw in ({"triggers": frozenset({"manual"})}, {"outcomes": frozenset({"success"})},
               {}):
        assert answer(d, since_ns=since, limit=10, **kw) == ([want], 1), kw
    for kw in ({"triggers": frozenset({"schedule"})}, {"outcomes": frozenset({"failed"})},
               {"outcomes": frozenset({"running"})}):
        assert answer(d, since_ns=since, limit=10, **kw) == ([], None), kw


def padded(seq: int, name: str, size: int) -> bytes:
    """A decided line of exactly `size` bytes (without its newline)."""
    base = line(seq, "decided", T0, name, 1, outcome="missed", reason="")
    raw = json.dumps(base, separators=(",", ":")).encode()
    base["reason"] = "r" * (size - len(raw))
    raw = json.dumps(base, separators=(",", ":")).encode()
    assert len(raw) == size
    return raw


def test_a_line_of_16383_bytes_is_read_and_one_of_16384_is_skipped(tmp_path: Path) -> None:
    """REQ-1: 16 KiB with the newline is the most a line may be. The longest allowed line
    is decoded, headed and folded; one byte more and every reader skips it, counted."""
    d = tmp_path / "ledger"
    d.mkdir()
    ok, big = padded(1, "a", MAX_LINE - 1), padded(2, "b", MAX_LINE)
    short = json.dumps(line(3, "decided", T0, "c", 1, outcome="missed"),
                       separators=(",", ":")).encode()
    (d / f"{format_ns(T0)[:10]}.jsonl").write_bytes(ok + b"\n" + big + b"\n" + short + b"\n")
    assert decode_line(ok) == json.loads(ok)
    assert decode_line(big) is None
    h = head_of(ok)
    assert h is not None and (h.seq, h.harness, h.outcome) == (1, "a", "missed")
    assert head_of(big) is None
    recs, oldest, stats = scan(str(d), Query(limit=10))
    assert [r.to_json(offline=True, check_log=False) for r in recs] == [
        {"harness": "c", "run_id": 1, "seq": 3, "outcome": "missed"},
        {"harness": "a", "run_id": 1, "seq": 1, "outcome": "missed",
         "reason": json.loads(ok)["reason"]}]
    assert (oldest, stats.lines, stats.skipped, stats.torn) == (1, 3, 1, 0)


def test_a_line_past_upto_seq_does_not_hide_the_lines_after_it(tmp_path: Path) -> None:
    """Lines after `upto_seq` are ignored one by one: a damaged file holding a durable line
    below a newer one (seq 2 after seq 3) still answers with it."""
    d = tmp_path / "ledger"
    write_day(d, T0,
              line(1, "decided", T0, "a", 1, outcome="missed"),
              line(3, "decided", T0, "b", 1, outcome="missed"),
              line(2, "decided", T0, "c", 1, outcome="skipped"))
    recs, oldest, stats = scan(str(d), Query(limit=10), upto_seq=2)
    assert [r.to_json(offline=True, check_log=False) for r in recs] == [
        {"harness": "c", "run_id": 1, "seq": 2, "outcome": "skipped"},
        {"harness": "a", "run_id": 1, "seq": 1, "outcome": "missed"}]
    assert (oldest, stats.lines, stats.skipped) == (1, 3, 0)
