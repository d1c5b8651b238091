"""Mutation-test survivors of the offline reader (`harness.ledger.reader`): exact answers of
`scan` over hand-written day files, for the branches the other tests leave unpinned."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness.ledger import reader
from harness.ledger.query import Query
from harness.ledger.reader import decode_line, head_of, scan, valid_line
from harness.ledger.runledger import RunLedger
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


# -- round 2: valid_line, decode_line, head_of, _last_seq, _look_back, _FirstAt, _choose ---


def _raw(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def test_mistyped_start_outcome_or_trigger_makes_a_line_unreadable_to_every_reader(
        tmp_path: Path) -> None:
    """valid_line refuses a started_at, outcome or trigger that is neither a string nor
    null, as `Head` does: decode_line and head_of both skip such a line, and scan counts
    it; a null one is absent and the line reads."""
    d = tmp_path / "ledger"
    good = line(1, "decided", T0, "a", 1, outcome="missed", trigger="schedule",
                started_at=format_ns(T0))
    bad = [{**line(2, "decided", T0, "b", 1), k: v} for k, v in (
        ("started_at", 5), ("outcome", ["missed"]), ("trigger", {"x": 1}),
        ("started_at", True), ("trigger", 7))]
    nulls = line(3, "decided", T0, "c", 1, started_at=None, outcome=None, trigger=None)
    path = write_day(d, T0, good, *bad, nulls)
    raws = path.read_bytes().split(b"\n")[:-1]
    assert [decode_line(r) for r in raws] == [good, None, None, None, None, None, nulls]
    assert [head_of(r) is None for r in raws] == [False, True, True, True, True, True, False]
    assert [valid_line(x) for x in (good, *bad, nulls)] == [True] + [False] * 5 + [True]
    recs, oldest, stats = scan(str(d), Query(limit=10))
    assert [r.to_json(offline=True, check_log=False) for r in recs] == [
        {"harness": "c", "run_id": 1, "seq": 3},
        {"harness": "a", "run_id": 1, "seq": 1, "outcome": "missed", "trigger": "schedule",
         "started_at": format_ns(T0)}]
    assert (oldest, stats.lines, stats.skipped) == (1, 7, 5)


def test_an_out_of_range_number_does_not_make_an_invalid_line_readable(
        tmp_path: Path) -> None:
    """decode_line's slow path (a number past float's range) still checks the envelope:
    a line with seq 0, no harness, or that is no object stays unreadable, while a valid
    one reads with the number dropped, in nested lists and objects too, and only that
    number: finite floats stay."""
    d = tmp_path / "ledger"
    d.mkdir()
    at = format_ns(T0).encode()
    raws = [
        b'{"seq":0,"type":"closed","at":"' + at + b'","harness":"a","run_id":1,"x":1e999}',
        b'{"seq":2,"type":"closed","at":"' + at + b'","run_id":1,"x":1e999}',
        b'[1e999,{"seq":3}]',
        b'{"seq":4,"type":"closed","at":"' + at + b'","harness":"a","run_id":1,'
        b'"outcome":"failed","cost_usd":0.25,"models":["m",-1e999,["n",2e999,1.5]],'
        b'"tokens":{"input":1e999,"output":[{"k":-1e999,"j":2}]}}',
    ]
    (d / f"{format_ns(T0)[:10]}.jsonl").write_bytes(b"".join(r + b"\n" for r in raws))
    assert [decode_line(r) for r in raws] == [None, None, None, {
        "seq": 4, "type": "closed", "at": format_ns(T0), "harness": "a", "run_id": 1,
        "outcome": "failed", "cost_usd": 0.25, "models": ["m", ["n", 1.5]],
        "tokens": {"output": [{"j": 2}]}}]
    recs, oldest, stats = scan(str(d), Query(limit=10))
    assert [r.to_json(offline=True, check_log=False) for r in recs] == [
        {"harness": "a", "run_id": 1, "seq": 4, "outcome": "failed", "cost_usd": 0.25,
         "models": ["m", ["n", 1.5]], "tokens": {"output": [{"j": 2}]}}]
    assert (oldest, stats.lines, stats.skipped) == (4, 4, 3)


def test_a_duplicated_envelope_key_is_read_alike_by_decode_line_and_head_of(
        tmp_path: Path) -> None:
    """valid_line promises 'exactly the lines whose Head decodes'. A hand-edited line
    holding "seq":0 then "seq":2 (or a mistyped trigger then null) reads in a whole decode
    (the last value wins) but not into Head (refused at the first), so RunLedger's window
    pass (decode_line only) folds a closed line the offline scan skips: x/1 reads success
    there, running? here. Both must decide alike, and agree on the envelope if it reads."""
    d = tmp_path / "ledger"
    d.mkdir()
    at = format_ns(T0).encode()
    raws = [
        b'{"seq":0,"type":"closed","at":"' + at + b'","harness":"x","run_id":1,'
        b'"outcome":"success","seq":2}',
        b'{"seq":3,"type":"closed","at":"' + at + b'","harness":"y","run_id":1,'
        b'"trigger":7,"trigger":null,"outcome":"success"}',
    ]
    (d / f"{format_ns(T0)[:10]}.jsonl").write_bytes(b"".join(r + b"\n" for r in raws))
    objs, envs = [decode_line(r) for r in raws], [head_of(r) for r in raws]
    assert [o is None for o in objs] == [h is None for h in envs]
    for o, h in zip(objs, envs, strict=True):
        if o is not None and h is not None:
            assert (h.seq, h.type, h.harness, h.run_id, h.outcome, h.trigger) == (
                o["seq"], o["type"], o["harness"], o["run_id"], o.get("outcome"),
                o.get("trigger"))
    # Both read them, the last value winning, as a whole decode (and Python's json) does.
    assert [(h.seq, h.harness, h.trigger) for h in envs if h is not None] == [
        (2, "x", None), (3, "y", None)]
    recs, _oldest, stats = scan(str(d), Query(limit=10))
    assert [(r.harness, r.run_id, r.seq, r.to_json(offline=True)["outcome"])
            for r in recs] == [("y", 1, 3, "success"), ("x", 1, 2, "success")]
    assert stats.skipped == 0
    # The daemon's memory, folded at open by decode_line alone, answers the same.
    led = RunLedger(str(d))
    try:
        mem, _ = led.query(Query(limit=10))
    finally:
        led.close()
    assert [(r["harness"], r["seq"], r["outcome"]) for r in mem] == [
        ("y", 3, "success"), ("x", 2, "success")]


def _nested(seq: int, kind: bytes, depth: int) -> bytes:
    """A decided line whose unknown field `x` nests `depth` arrays or objects."""
    close = b"]" if kind == b"[" else b"}"
    return (b'{"seq":%d,"type":"decided","at":"%s","harness":"n","run_id":%d,'
            b'"outcome":"missed","x":' % (seq, format_ns(T0).encode(), seq)
            + kind * depth + b"1" + close * depth + b"}")


def test_a_deeply_nested_line_is_kept_or_skipped_alike_by_decode_line_and_head_of() -> None:
    """Every reader keeps and skips the same lines (decode_line's docstring): for each
    depth of nesting around the decoders' recursion limit, decode_line and head_of agree
    on whether the line reads."""
    disagree = []
    for kind in (b"[", b'{"a":'):
        for depth in range(700, 1200):
            raw = _nested(1, kind, depth)
            if (decode_line(raw) is None) != (head_of(raw) is None):
                disagree.append((kind, depth, len(raw)))
    assert disagree == []


def _deep_stack(n: int, f: Any) -> Any:
    return f() if n == 0 else _deep_stack(n - 1, f)


@pytest.mark.parametrize("kind", [b"[", b'{"a":'])
def test_nesting_past_max_depth_is_skipped_by_every_reader_at_any_stack_depth(
        tmp_path: Path, kind: bytes) -> None:
    """MAX_DEPTH (512) decides, not the interpreter's recursion limit: a line nesting 512
    deep reads, one nesting 513 deep is skipped, in decode_line and head_of alike, from a
    shallow caller and from one 400 frames deep, and in `heads`' fast block path, which
    decodes a block of short lines at once (here 2 of 3 lines read, 1 skipped)."""
    assert reader.MAX_DEPTH == 512
    ok, deep = _nested(1, kind, 511), _nested(2, kind, 512)  # inside the line's own {}
    # A bracket inside a string opens nothing.
    quoted = _nested(3, kind, 500)[:-1] + b',"s":"' + b"[" * 600 + b'"}'
    for stack in (0, 400):
        assert _deep_stack(stack, lambda: [decode_line(r) is not None
                                           for r in (ok, deep, quoted)]) == [True, False, True]
        assert _deep_stack(stack, lambda: [head_of(r) is not None
                                           for r in (ok, deep, quoted)]) == [True, False, True]
    d = tmp_path / "ledger"
    d.mkdir()
    (d / f"{format_ns(T0)[:10]}.jsonl").write_bytes(ok + b"\n" + deep + b"\n" + quoted + b"\n")
    stats = reader.ReadStats()
    got = [h.seq for block in reader.heads(str(d / f"{format_ns(T0)[:10]}.jsonl"), stats)
           for h in block]
    assert (got, stats.lines, stats.skipped) == ([1, 3], 3, 1)
    recs, _oldest, stats = scan(str(d), Query(limit=10))
    assert ([r.seq for r in recs], stats.skipped) == ([3, 1], 1)


def test_an_older_file_pruned_after_the_listing_reads_as_ending_at_seq_0(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """_last_seq of a file before `since`'s range that a prune deleted after the listing
    is 0 (no line above the range), not an error: the scan answers from the files left."""
    d = tmp_path / "ledger"
    old = write_day(d, T0 - 5 * DAY, line(1, "decided", T0 - 5 * DAY, "a", 1,
                                          outcome="missed"))
    write_day(d, T0, line(2, "decided", T0, "b", 1, outcome="missed"),
              line(3, "decided", T0 + MINUTE, "c", 1, outcome="skipped"))
    real = reader.list_day_files

    def listed_then_pruned(directory: str) -> Any:
        listing = real(directory)
        old.unlink()
        return listing

    monkeypatch.setattr(reader, "list_day_files", listed_then_pruned)
    recs, oldest, stats = scan(str(d), Query(since_ns=T0 - HOUR, limit=10))
    assert [r.to_json(offline=True, check_log=False) for r in recs] == [
        {"harness": "c", "run_id": 1, "seq": 3, "outcome": "skipped"},
        {"harness": "b", "run_id": 1, "seq": 2, "outcome": "missed"}]
    assert (oldest, stats.files, stats.lines, stats.skipped) == (2, 1, 2, 0)


def test_an_older_file_with_no_readable_line_ends_at_seq_0(tmp_path: Path) -> None:
    """_last_seq of an older file holding no line with a seq (a blank line, a torn
    fragment, no JSON) is 0: it holds nothing above the range, and the scan answers from
    the files `since` needs, having read only those."""
    d = tmp_path / "ledger"
    d.mkdir()
    (d / f"{format_ns(T0 - 5 * DAY)[:10]}.jsonl").write_bytes(b"not json\n\n{\"seq\":")
    write_day(d, T0, line(2, "decided", T0, "b", 1, outcome="missed"),
              line(3, "decided", T0 + MINUTE, "c", 1, outcome="skipped"))
    recs, oldest, stats = scan(str(d), Query(since_ns=T0 - HOUR, limit=10))
    assert [r.to_json(offline=True, check_log=False) for r in recs] == [
        {"harness": "c", "run_id": 1, "seq": 3, "outcome": "skipped"},
        {"harness": "b", "run_id": 1, "seq": 2, "outcome": "missed"}]
    assert (oldest, stats.files, stats.lines, stats.skipped, stats.torn) == (2, 1, 2, 0, 0)


def test_an_older_file_ending_in_a_damaged_line_above_the_range_is_read(
        tmp_path: Path) -> None:
    """The clock stepped back at the very end: b/1's closed line (seq 4) went to a file
    five days back, and its hash is damaged (a number). _last_seq counts that line's seq
    (damaged_seq), so the file ends above the range's seqs 2..3 and the scan reads every
    file: b/1 reads closed, with its success, not running?."""
    d = tmp_path / "ledger"
    old = T0 - 5 * DAY
    write_day(d, old, line(1, "decided", old, "a", 1, outcome="missed"),
              line(4, "closed", old + MINUTE, "b", 1, outcome="success", hash=123))
    write_day(d, T0, line(2, "opened", T0, "b", 1, started_at=format_ns(T0)),
              line(3, "decided", T0 + MINUTE, "c", 1, outcome="skipped"))
    recs, oldest, stats = scan(str(d), Query(since_ns=T0 - HOUR, limit=10))
    assert [r.to_json(offline=True, check_log=False) for r in recs] == [
        {"harness": "c", "run_id": 1, "seq": 3, "outcome": "skipped"},
        {"harness": "b", "run_id": 1, "seq": 2, "started_at": format_ns(T0),
         "outcome": "success"}]
    assert (oldest, stats.files, stats.lines, stats.skipped) == (2, 2, 4, 0)


def test_a_start_that_is_no_time_filters_on_the_at_of_the_first_line_not_the_last(
        tmp_path: Path) -> None:
    """started_at 'soon' is no time: --until/--since compare the `at` of the record's first
    line, which _FirstAt reads again by the record's first seq, from its first file on (x/1
    closes in the next day's file, y/1 in its own file, both after `until`)."""
    d = tmp_path / "ledger"
    write_day(d, T0,
              line(1, "opened", T0 - 2 * HOUR, "x", 1, started_at="soon", trigger="manual"),
              line(2, "opened", T0 - 2 * HOUR + MINUTE, "y", 1, started_at="later"),
              line(3, "closed", T0 + HOUR, "y", 1, outcome="success"))
    write_day(d, T0 + DAY, line(4, "closed", T0 + DAY, "x", 1, outcome="failed"))
    want = [{"harness": "y", "run_id": 1, "seq": 2, "started_at": "later",
             "outcome": "success"},
            {"harness": "x", "run_id": 1, "seq": 1, "started_at": "soon",
             "trigger": "manual", "outcome": "failed"}]
    for kw in ({"until_ns": T0 - HOUR}, {"since_ns": T0 - 3 * HOUR, "until_ns": T0 - HOUR},
               {"since_ns": T0 - 2 * HOUR}):
        assert answer(d, limit=10, **kw) == (want, 1), kw
        assert answer(d, **kw) == (want, 1), kw
    assert answer(d, since_ns=T0 - 2 * HOUR + 1, limit=10) == (want[:1], 2)
    assert answer(d, until_ns=T0 - 2 * HOUR + MINUTE - 1, limit=10) == (want[1:], 1)


def test_an_unreadable_first_line_in_the_second_pass_is_skipped(tmp_path: Path) -> None:
    """_fold_chosen skips a line `Head` cannot decode before looking up its record: here
    the very first line of the file it starts from, then one between a/1's two lines."""
    d = tmp_path / "ledger"
    d.mkdir()
    raws = [b"garbage",
            _raw(line(1, "opened", T0, "a", 1, trigger="manual", started_at=format_ns(T0))),
            b'{"seq":2,"type":"closed","harness":"a","run_id":1,"outcome":"failed"',
            _raw(line(3, "closed", T0 + MINUTE, "a", 1, outcome="success"))]
    (d / f"{format_ns(T0)[:10]}.jsonl").write_bytes(b"".join(r + b"\n" for r in raws))
    recs, oldest, stats = scan(str(d), Query(limit=10))
    assert [r.to_json(offline=True, check_log=False) for r in recs] == [
        {"harness": "a", "run_id": 1, "seq": 1, "trigger": "manual",
         "started_at": format_ns(T0), "outcome": "success"}]
    assert (oldest, stats.lines, stats.skipped) == (1, 4, 2)


def test_a_look_back_reads_a_line_a_clock_step_put_before_the_opened_line(
        tmp_path: Path) -> None:
    """x/1 opened two days back (seq 1); the clock then stepped back two more days, so
    its closed line (seq 2, failed, exit 3) went to the file four days back; a later
    update (seq 3, today) moved its start into range. REQ-2: the record is the fold of
    every line, so a --since query that returns x/1 returns it closed, as a query with
    no --since (which reads every file) does."""
    d = tmp_path / "ledger"
    write_day(d, T0 - 2 * DAY, line(1, "opened", T0 - 2 * DAY, "x", 1, trigger="schedule",
                                    started_at=format_ns(T0 - 2 * DAY)))
    write_day(d, T0 - 4 * DAY, line(2, "closed", T0 - 4 * DAY, "x", 1, outcome="failed",
                                    exit_code=3))
    write_day(d, T0, line(3, "updated", T0, "x", 1, started_at=format_ns(T0 - HOUR)))
    want = {"harness": "x", "run_id": 1, "seq": 1, "trigger": "schedule",
            "started_at": format_ns(T0 - HOUR), "outcome": "failed", "exit_code": 3}
    assert answer(d, limit=10) == ([want], 1)
    assert answer(d, since_ns=T0 - 3 * DAY, limit=10) == ([want], 1)
    assert answer(d, since_ns=T0 - 2 * HOUR, limit=10) == ([want], 1)
    assert answer(d, since_ns=T0 - 2 * HOUR, outcomes=frozenset({"failed"}),
                  limit=10) == ([want], 1)


def test_a_late_line_between_a_records_first_and_last_seq_is_refolded_in_seq_order(
        tmp_path: Path) -> None:
    """The clock jumped a day ahead for seq 2 only: x/1's seq 2 (started_at 07:00) sits in
    the next day's file, after seq 3 (started_at 11:00) in today's. The first pass meets
    seq 2 after seq 3 (below the record's last seq, above its first) and refolds in seq
    order, so --since filters on 11:00, the start the fold returns."""
    d = tmp_path / "ledger"
    write_day(d, T0,
              line(1, "opened", T0, "x", 1, started_at=format_ns(T0 - 3 * HOUR)),
              line(3, "closed", T0 + MINUTE, "x", 1, outcome="success",
                   started_at=format_ns(T0 - HOUR)))
    write_day(d, T0 + DAY, line(2, "updated", T0 + DAY, "x", 1, outcome="failed",
                                started_at=format_ns(T0 - 5 * HOUR)))
    want = {"harness": "x", "run_id": 1, "seq": 1, "started_at": format_ns(T0 - HOUR),
            "outcome": "success"}
    for kw in ({}, {"since_ns": T0 - 2 * HOUR}, {"outcomes": frozenset({"success"})},
               {"until_ns": T0 - HOUR}):
        assert answer(d, limit=10, **kw) == ([want], 1), kw
    for kw in ({"until_ns": T0 - 2 * HOUR}, {"outcomes": frozenset({"failed"})}):
        assert answer(d, limit=10, **kw) == ([], None), kw


def test_a_look_back_takes_the_older_outcome_only_where_the_newer_lines_have_none(
        tmp_path: Path) -> None:
    """x/1 and y/1 closed as failed three days back; today's line moves each start into
    range, x/1's with an outcome (success) and no trigger, y/1's with a trigger (manual)
    and no outcome. The look-back keeps x/1's newer outcome and gives y/1 its older one."""
    d = tmp_path / "ledger"
    old = T0 - 3 * DAY
    write_day(d, old,
              line(1, "opened", old, "x", 1, trigger="schedule", started_at=format_ns(old)),
              line(2, "opened", old, "y", 1, trigger="schedule", started_at=format_ns(old)),
              line(3, "closed", old + MINUTE, "x", 1, outcome="failed"),
              line(4, "closed", old + MINUTE, "y", 1, outcome="failed"))
    write_day(d, T0,
              line(5, "updated", T0, "x", 1, outcome="success",
                   started_at=format_ns(T0 - HOUR)),
              line(6, "updated", T0, "y", 1, trigger="manual",
                   started_at=format_ns(T0 - HOUR)))
    x = {"harness": "x", "run_id": 1, "seq": 1, "trigger": "schedule",
         "started_at": format_ns(T0 - HOUR), "outcome": "success"}
    y = {"harness": "y", "run_id": 1, "seq": 2, "trigger": "manual",
         "started_at": format_ns(T0 - HOUR), "outcome": "failed"}
    since = T0 - 2 * HOUR
    assert answer(d, since_ns=since, limit=10) == ([y, x], 1)
    assert answer(d, since_ns=since, limit=10, outcomes=frozenset({"success"})) == ([x], 1)
    assert answer(d, since_ns=since, limit=10, outcomes=frozenset({"failed"})) == ([y], 2)
    assert answer(d, since_ns=since, limit=10, triggers=frozenset({"schedule"})) == ([x], 1)


def test_a_look_back_gives_the_record_its_first_seq_for_paging_and_the_limit(
        tmp_path: Path) -> None:
    """x/1 opened three days back (seq 1, updated at seq 2); today's update (seq 5) moves
    its start into range, after z/1 (seq 4). Once the look-back finds its opened line,
    x/1 is seq 1 (its first line's, not its last older line's) in the choice too:
    before_seq 2 and 4 return it, and limit 1 returns z/1, the newer record."""
    d = tmp_path / "ledger"
    old = T0 - 3 * DAY
    write_day(d, old, line(1, "opened", old, "x", 1, started_at=format_ns(old)),
              line(2, "updated", old + MINUTE, "x", 1, todo_id="t1"))
    write_day(d, T0, line(4, "decided", T0 - 2 * MINUTE, "z", 1, outcome="missed"),
              line(5, "updated", T0, "x", 1, started_at=format_ns(T0 - HOUR)))
    x = {"harness": "x", "run_id": 1, "seq": 1, "started_at": format_ns(T0 - HOUR),
         "todo_id": "t1", "outcome": "running?"}
    z = {"harness": "z", "run_id": 1, "seq": 4, "outcome": "missed"}
    since = T0 - 2 * HOUR
    assert answer(d, since_ns=since, limit=10) == ([z, x], 1)
    assert answer(d, since_ns=since, limit=1) == ([z], 4)
    assert answer(d, since_ns=since, limit=10, before_seq=4) == ([x], 1)
    assert answer(d, since_ns=since, limit=1, before_seq=4) == ([x], 1)
    assert answer(d, since_ns=since, limit=10, before_seq=2) == ([x], 1)


def test_records_sharing_a_damaged_seq_are_chosen_as_when_sorted(tmp_path: Path) -> None:
    """a/1's line carries a copy of a/2's seq (1), and a/2 was met first: the records of
    `a` are then not in strictly rising seq order, so the choice sorts them (by seq, name,
    run id, newest first) instead of merging, and limit 1 returns a/2 as limit 10 and no
    limit (internal use) list it first."""
    d = tmp_path / "ledger"
    write_day(d, T0, line(1, "decided", T0, "a", 2, outcome="missed"),
              line(1, "decided", T0 + MINUTE, "a", 1, outcome="skipped"))
    a2 = {"harness": "a", "run_id": 2, "seq": 1, "outcome": "missed"}
    a1 = {"harness": "a", "run_id": 1, "seq": 1, "outcome": "skipped"}
    assert answer(d, limit=10) == ([a2, a1], 1)
    assert answer(d, limit=1) == ([a2], 1)
    assert answer(d) == ([a2, a1], 1)
