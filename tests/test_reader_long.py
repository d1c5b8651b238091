"""The offline reader on long records and long lines: a record of thousands of lines is
folded newest line first (`reader._fold_back`), a record open across --since is looked
back for without keeping its lines, and a line near the 16 KiB cap is checked without a
whole decode. Each must answer exactly what the plain forward fold answers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness.ledger import reader
from harness.ledger.dayfiles import iter_blocks, iter_blocks_back
from harness.ledger.query import Query
from harness.ledger.reader import decode_line, head_of, scan
from harness.ledger.writer import MAX_LINE
from harness.timefmt import format_ns
from ledgertools import DAY, HOUR, MINUTE, NS, T0


def line(seq: int, typ: str, ns: int, name: str, run_id: int, **f: Any) -> dict[str, Any]:
    return {"seq": seq, "type": typ, "at": format_ns(ns), "harness": name, "run_id": run_id,
            **f}


def raw(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def write_days(d: Path, lines: list[bytes | dict[str, Any]]) -> None:
    """Each line to the day file of its `at` (bytes: to the file of the line before)."""
    d.mkdir(exist_ok=True)
    files: dict[str, list[bytes]] = {}
    day = ""
    for x in lines:
        if isinstance(x, dict):
            day = x["at"][:10]
        files.setdefault(day, []).append(x if isinstance(x, bytes) else raw(x))
    for day, got in files.items():
        (d / f"{day}.jsonl").write_bytes(b"".join(r + b"\n" for r in got))


def answers(d: Path, monkeypatch: pytest.MonkeyPatch, **kw: Any) -> list[list[dict[str, Any]]]:
    """`scan`'s answer to Query(**kw) folded forward, then newest line first; each with
    its records' JSON and the oldest seq."""
    out = []
    for span in (10**12, 0):
        monkeypatch.setattr(reader, "LONG_SPAN", span)
        recs, oldest, _stats = scan(str(d), Query(**kw))
        out.append([*(r.to_json(offline=True, check_log=False) for r in recs), oldest])
    return out


def long_run(start_seq: int, t: int, n: int) -> list[dict[str, Any]]:
    """x/1: opened, then n updates, some carrying fields an older one set, nulls, fields
    no reader knows and a session now and then; one in the middle sets started_at."""
    out = [line(start_seq, "opened", t, "x", 1, kind="resident", trigger="autostart",
                started_at=format_ns(t), outcome="running", log="/l/x.log")]
    for i in range(1, n + 1):
        f: dict[str, Any] = {"tokens": {"input": i, "output": 2 * i}, "model_calls": i}
        if i % 7 == 0:
            f["model_calls"] = None  # null: not a value, the older one stands
        if i % 97 == 0:
            f["sessions"] = [{"id": f"s{i}", "adapter": "claude"}]
        if i % 500 == 0:
            f["x_future"] = {"i": i}
        if i == n // 2:
            f["started_at"] = format_ns(t + MINUTE)
            f["todo_id"] = "t-9"
        out.append(line(start_seq + i, "updated", t + i * NS, "x", 1, **f))
    return out


def test_a_long_record_folds_newest_first_to_what_the_forward_fold_gives(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """x/1 spans 5,000 updates over two days, between short runs y/1 and z/1, and its
    last line closes it: both folds give the same record, field by field, and the same
    page with and without a limit, by name and by --since."""
    d = tmp_path / "ledger"
    t = T0 - DAY
    lines: list[bytes | dict[str, Any]] = [
        line(1, "decided", t - MINUTE, "y", 1, outcome="missed")]
    lines += long_run(2, t, 5000)
    lines.append(line(5003, "closed", T0 + HOUR, "x", 1, outcome="failed", exit_code=3,
                      model_calls=None, ended_at=format_ns(T0 + HOUR)))
    lines.append(line(5004, "decided", T0 + HOUR, "z", 1, outcome="skipped"))
    write_days(d, lines)
    want = {"harness": "x", "run_id": 1, "seq": 2, "kind": "resident",
            "trigger": "autostart", "started_at": format_ns(t + MINUTE), "outcome": "failed",
            "log": "/l/x.log", "tokens": {"input": 5000, "output": 10000},
            "model_calls": 5000, "sessions": [{"id": "s4947", "adapter": "claude"}],
            "todo_id": "t-9", "exit_code": 3, "ended_at": format_ns(T0 + HOUR)}
    for kw in ({"names": ("x",), "limit": 20}, {"limit": 50}, {},
               {"names": ("x",), "since_ns": t, "limit": 1}, {"since_ns": t + MINUTE, "limit": 10},
               {"outcomes": frozenset({"failed"}), "limit": 5}):
        forward, back = answers(d, monkeypatch, **kw)
        assert back == forward, kw
        assert want in forward, kw


def test_a_long_record_across_the_window_folds_as_when_every_file_is_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """x/1 opened three days back and has 5,000 updates there; one today moves its start
    into range (its outcome word stays unread: no line closed it). The look-back folds its
    older lines as they come: the record read with --since is the one read from every
    file, and so is its seq for paging."""
    d = tmp_path / "ledger"
    old = T0 - 3 * DAY
    lines: list[bytes | dict[str, Any]] = list(long_run(1, old, 5000))
    lines.append(line(5002, "decided", T0 - 2 * MINUTE, "z", 1, outcome="missed"))
    lines.append(line(5003, "updated", T0, "x", 1, started_at=format_ns(T0 - HOUR),
                      outcome="success"))
    write_days(d, lines)
    everything = answers(d, monkeypatch, limit=10)[0]
    x = next(r for r in everything[:-1] if r["harness"] == "x")
    assert (x["seq"], x["started_at"], x["outcome"], x["model_calls"]) == (
        1, format_ns(T0 - HOUR), "running?", 5000)
    for kw in ({"since_ns": T0 - 2 * HOUR, "limit": 10},
               {"since_ns": T0 - 2 * HOUR, "limit": 10, "before_seq": 5002},
               {"since_ns": T0 - 2 * HOUR, "outcomes": frozenset({"running"}), "limit": 10}):
        forward, back = answers(d, monkeypatch, **kw)
        assert back == forward, kw
        assert x in forward, kw


def test_a_long_record_whose_seqs_do_not_rise_is_folded_forward(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A clock stepped back: x/1's seq 4,000 went to the file a day before the rest, and a
    copy of seq 300 sits among the later lines. The newest-first fold sees the seqs stop
    falling and leaves x/1 to the forward fold, which takes the late lines as REQ-2 says:
    the highest seq carrying a field wins, ties to the line read last."""
    d = tmp_path / "ledger"
    t = T0 - DAY
    run = long_run(1, t, 5000)
    run[4000]["at"] = format_ns(t - DAY)
    run[4000]["todo_id"] = "stepped"
    copy = {**run[300], "at": run[4500]["at"], "todo_id": "copied"}
    lines: list[bytes | dict[str, Any]] = [run[4000], *run[:4000], *run[4001:4500], copy,
                                           *run[4500:]]
    write_days(d, lines)
    forward, back = answers(d, monkeypatch, limit=10)
    assert back == forward
    assert forward[0]["todo_id"] == "stepped"


def test_lines_the_newest_first_fold_must_decode_whole_read_as_in_the_forward_fold(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Among x/1's lines: one with a number past float's range in a field (read with the
    number dropped), one with a duplicated seq whose first value is invalid (the last
    value decides), one with 4,301 digits in a field no reader knows, one nested past
    MAX_DEPTH, one not UTF-8 in a skipped field, one over 16 KiB, a torn tail: each is
    read or skipped as the forward fold reads or skips it."""
    d = tmp_path / "ledger"
    t = T0 - HOUR
    run = long_run(1, t, 4200)
    at = format_ns(t + 4300 * NS).encode()
    odd = [
        b'{"seq":4202,"type":"updated","at":"' + at + b'","harness":"x","run_id":1,'
        b'"tokens":{"input":1e999,"output":7},"reason":"r1"}',
        b'{"seq":0,"type":"updated","at":"' + at + b'","harness":"x","run_id":1,'
        b'"seq":4203,"todo_id":"dup"}',
        b'{"seq":4204,"type":"updated","at":"' + at + b'","harness":"x","run_id":1,'
        b'"todo_id":"huge","x":' + b"9" * 4301 + b"}",
        b'{"seq":4205,"type":"updated","at":"' + at + b'","harness":"x","run_id":1,'
        b'"todo_id":"deep","x":' + b"[" * 600 + b"]" * 600 + b"}",
        b'{"seq":4206,"type":"updated","at":"' + at + b'","harness":"x","run_id":1,'
        b'"todo_id":"latin","x":"\xe9"}',
        b'{"seq":4207,"type":"updated","at":"' + at + b'","harness":"x","run_id":1,'
        b'"todo_id":"big","x":"' + b"b" * MAX_LINE + b'"}',
    ]
    lines: list[bytes | dict[str, Any]] = [*run, *odd]
    write_days(d, lines)
    with (d / f"{format_ns(t)[:10]}.jsonl").open("ab") as f:
        f.write(b'{"seq":4208,"type":"closed","at":"' + at + b'","harness":"x","run_id":1')
    forward, back = answers(d, monkeypatch, limit=10)
    assert back == forward
    x = forward[0]
    assert (x["todo_id"], x["reason"], x["tokens"], x["outcome"]) == (
        "dup", "r1", {"output": 7}, "running?")


def test_a_long_line_is_checked_for_a_huge_integer_wherever_it_lies() -> None:
    """head_of skips a line holding an integer of 4,301 digits (a whole decode refuses it)
    without decoding every long line whole: wherever the digits start, and only when they
    are that many and form one number."""
    for pad in range(0, 2200, 97):
        for digits, kept in ((4301, False), (4300, True)):
            obj = raw(line(1, "decided", T0, "a", 1, outcome="missed", r="p" * pad))
            text = obj[:-1] + b',"x":' + b"7" * digits + b"}"
            assert (head_of(text) is not None, decode_line(text) is not None) == (
                kept, kept), (pad, digits)
    # Digits in a string are no number: both read the line.
    text = raw(line(1, "decided", T0, "a", 1, outcome="missed", r="7" * 9000))
    assert head_of(text) is not None and decode_line(text) is not None


@pytest.mark.parametrize("size", [1, 7, 64, 1 << 22])
def test_the_lines_read_backward_are_those_read_forward(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, size: int) -> None:
    """iter_blocks_back yields the lines iter_blocks does, whatever the block size: blank
    lines, a first line, lines longer than a block (left out, as no ledger line is that
    long), and a final fragment only when it is a whole line."""
    from harness.ledger import dayfiles
    monkeypatch.setattr(dayfiles, "CHUNK", max(size, 8))
    cases = [b"", b"\n", b"{}", b"{}\n", b"{\"a\":1}\n\n{\"b\":22}\n{\"c\":", b"x\ny",
             b"\n\n{\"a\":1}\n" + b"{\"long\":\"" + b"z" * 40 + b"\"}\n{}\n{\"t\":1}"]
    for data in cases:
        p = tmp_path / "f.jsonl"
        p.write_bytes(data)
        forward = []
        for block, torn in iter_blocks(str(p)):
            if not torn:
                forward += bytes(block).split(b"\n")[:-1]
        back: list[bytes] = []
        for lines in iter_blocks_back(str(p)):
            back = lines + back
        chunk = dayfiles.CHUNK
        assert [x for x in back if x and len(x) < chunk] == [
            x for x in forward if x and len(x) < chunk], data
