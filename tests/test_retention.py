"""Retention (SPEC-0022 REQ-12) through `RunLedger.prune`, with an injected clock.

Old day files go, the rest stay byte-identical, today's file is never deleted, the size
cap deletes oldest first, a run still open is re-opened in today's file before the file
holding its opened line is deleted, and `CHAIN` (0600) keeps the pruned tail's last
seq/hash so the chain still verifies from there. Everything is checked on disk.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import stat
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import harness.ledger.dayfiles as dayfiles_mod
import harness.ledger.retention as retention_mod
import harness.ledger.runledger as runledger_mod
from harness.ledger.errors import LedgerUnavailable
from harness.ledger.files import FaultyFiles
from harness.ledger.query import Query
from harness.ledger.reader import scan
from harness.ledger.runledger import RunLedger
from harness.ledger.verify import verify_run_ledger
from harness.supervisor.history import reconcile
from harness.timefmt import format_ns, parse_ns
from ledgertools import DAY, HOUR, MINUTE, T0, Clock, OpenLedger, day, decided, lines_of


def digests(directory: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.glob("*.jsonl"))}


def fill_days(led: RunLedger, clock: Clock, ages: range, per_day: int = 2) -> None:
    """`per_day` decided lines on each day `T0 - age days`, oldest first."""
    run = 0
    for age in ages:
        clock.ns = T0 - age * DAY
        for _ in range(per_day):
            run += 1
            led.append({"type": "decided", "harness": "nightly", "run_id": run,
                        "trigger": "schedule", "outcome": "missed"}, sync=False)
    led.flush()
    led.append({"type": "decided", "harness": "nightly", "run_id": run + 1,
                "trigger": "schedule", "outcome": "missed"})


def test_plan_deletes_a_day_only_once_it_ended_more_than_retention_ago() -> None:
    """REQ-12: "whose day ended more than retention ago", to the nanosecond."""
    days = [("2026-06-01", "a", 10), ("2026-06-02", "b", 10), ("2026-06-15", "c", 10)]
    ended = parse_ns("2026-06-02T00:00:00Z")  # the end of 2026-06-01
    retention = 3 * DAY
    plan = retention_mod.plan
    assert plan(days, ended + retention, retention, 1 << 30) == []
    assert plan(days, ended + retention + 1, retention, 1 << 30) == ["2026-06-01"]
    assert plan(days, ended + DAY + retention, retention, 1 << 30) == ["2026-06-01"]
    assert plan(days, ended + DAY + retention + 1, retention, 1 << 30) == [
        "2026-06-01", "2026-06-02"]


def test_plan_size_cap_is_at_most_max_bytes_oldest_first_and_spares_today() -> None:
    days = [("2026-06-10", "a", 100), ("2026-06-11", "b", 50), ("2026-06-12", "c", 30),
            ("2026-06-15", "t", 20)]
    now = T0  # 2026-06-15T12:00Z
    plan = retention_mod.plan
    assert plan(days, now, 90 * DAY, 200) == []
    assert plan(days, now, 90 * DAY, 199) == ["2026-06-10"]
    assert plan(days, now, 90 * DAY, 100) == ["2026-06-10"]
    assert plan(days, now, 90 * DAY, 99) == ["2026-06-10", "2026-06-11"]
    assert plan(days, now, 90 * DAY, 0) == ["2026-06-10", "2026-06-11", "2026-06-12"]
    # Expired files count as gone before the cap is applied, and are not listed twice.
    assert plan(days, now, 4 * DAY, 50) == ["2026-06-10", "2026-06-11"]
    assert plan(days, now, 4 * DAY, 49) == ["2026-06-10", "2026-06-11", "2026-06-12"]


def test_plan_never_deletes_today_or_a_later_day() -> None:
    """A clock stepped back leaves a file named for a later day: it is not old."""
    days = [("2026-06-14", "y", 10), ("2026-06-15", "t", 10), ("2026-06-16", "f", 10)]
    plan = retention_mod.plan
    assert plan(days, T0, DAY, 0) == ["2026-06-14"]
    assert plan(days, T0, 0, 0) == ["2026-06-14"]
    assert plan(days[1:], T0, 0, 0) == []


def test_files_older_than_retention_go_and_the_rest_are_intact(
    tmp_path: Path, open_ledger: OpenLedger
) -> None:
    d = tmp_path / "ledger"
    clock = Clock(0)
    led = open_ledger(d, clock=clock)
    fill_days(led, clock, range(44, -1, -1))
    led.close()
    assert len(digests(d)) == 45
    before = digests(d)
    # The day 31 days back ended 30.5 days ago: past retention. 30 days back ended 29.5 ago.
    gone = [day(T0 - age * DAY) for age in range(44, 30, -1)]
    kept = [day(T0 - age * DAY) for age in range(30, -1, -1)]
    last_gone = lines_of(d / f"{gone[-1]}.jsonl")[-1]

    led = open_ledger(d, clock=Clock(T0), retention_ns=30 * DAY)
    res = led.prune()
    assert (res.deleted, res.carried_forward, res.error) == (gone, 0, None)
    after = digests(d)
    assert sorted(after) == [f"{k}.jsonl" for k in kept]
    assert after == {k: v for k, v in before.items() if k in after}  # byte-identical
    chain = d / "CHAIN"
    assert stat.S_IMODE(chain.stat().st_mode) == 0o600
    assert json.loads(chain.read_bytes()) == {"seq": last_gone["seq"], "hash": last_gone["hash"]}
    res_v = verify_run_ledger(str(d))
    assert res_v.ok, res_v.to_json()
    assert res_v.anchor == f"CHAIN seq {last_gone['seq']}"
    assert res_v.start_seq == last_gone["seq"] + 1
    assert res_v.lines == 2 * 31 + 1
    st = led.stats()
    assert (st.pruned, st.oldest_day) == (14, kept[0])
    assert st.bytes == sum(p.stat().st_size for p in d.glob("*.jsonl"))  # the kept files

    again = led.prune()  # nothing more to do
    assert (again.deleted, again.error) == ([], None)
    assert digests(d) == after
    # The next line continues the chain from the kept files.
    assert led.append({"type": "decided", "harness": "nightly", "run_id": 999,
                       "outcome": "missed"}) == res_v.head_seq + 1  # type: ignore[operator]
    assert verify_run_ledger(str(d)).ok


def test_today_is_never_deleted_even_over_the_size_cap(
    tmp_path: Path, open_ledger: OpenLedger
) -> None:
    d = tmp_path / "ledger"
    clock = Clock(0)
    led = open_ledger(d, clock=clock, max_bytes=1)
    fill_days(led, clock, range(3, -1, -1))
    today = d / f"{day(T0)}.jsonl"
    today_bytes = today.read_bytes()
    clock.ns = T0
    res = led.prune()
    assert res.deleted == [day(T0 - age * DAY) for age in (3, 2, 1)]
    assert sorted(os.listdir(d)) == sorted(["CHAIN", today.name])
    assert today.read_bytes() == today_bytes
    assert led.prune().deleted == []  # over the cap, and still kept
    assert today.exists()
    assert verify_run_ledger(str(d)).ok


def test_the_size_cap_deletes_the_oldest_files_first(
    tmp_path: Path, open_ledger: OpenLedger
) -> None:
    d = tmp_path / "ledger"
    clock = Clock(0)
    led = open_ledger(d, clock=clock)
    fill_days(led, clock, range(5, -1, -1))
    led.close()
    sizes = {p.name[:10]: p.stat().st_size for p in sorted(d.glob("*.jsonl"))}
    names = sorted(sizes)
    assert len(names) == 6
    cap = sum(sizes[n] for n in names[2:])  # room for the newest four exactly
    led = open_ledger(d, clock=Clock(T0), max_bytes=cap)
    before = digests(d)
    res = led.prune()
    assert res.deleted == names[:2]
    assert sorted(digests(d)) == [f"{n}.jsonl" for n in names[2:]]
    assert all(before[k] == v for k, v in digests(d).items())
    led.max_bytes = cap - 1  # one byte less: the next oldest goes too
    assert led.prune().deleted == [names[2]]
    assert verify_run_ledger(str(d)).ok


def test_the_size_cap_counts_the_carried_forward_lines(
    tmp_path: Path, open_ledger: OpenLedger
) -> None:
    """A run open in the oldest file is carried into today's file, which grows; the cap
    still holds afterwards: the next oldest file goes too."""
    d = tmp_path / "ledger"
    clock = Clock(T0 - 5 * DAY)
    led = open_ledger(d, clock=clock)
    led.append({"type": "opened", "harness": "worker", "run_id": 1, "kind": "resident",
                "trigger": "autostart", "log": "/var/log/" + "w" * 200})
    fill_days(led, clock, range(5, -1, -1))
    led.close()
    sizes = {p.name[:10]: p.stat().st_size for p in sorted(d.glob("*.jsonl"))}
    names = sorted(sizes)
    cap = sum(sizes[n] for n in names[1:])  # room for all but the oldest, before the carry
    led = open_ledger(d, clock=Clock(T0), max_bytes=cap)
    res = led.prune()
    assert (res.deleted, res.carried_forward, res.error) == (names[:2], 1, None)
    assert sum(p.stat().st_size for p in d.glob("*.jsonl")) <= cap
    rec = led.get("worker", 1)
    assert rec is not None and rec["outcome"] == "running"
    assert verify_run_ledger(str(d)).ok


def test_a_run_open_across_the_prune_is_carried_forward_before_its_file_goes(
    tmp_path: Path, open_ledger: OpenLedger, monkeypatch: pytest.MonkeyPatch
) -> None:
    d = tmp_path / "ledger"
    old = T0 - 100 * DAY
    clock = Clock(old)
    led = open_ledger(d, clock=clock)
    log = str(tmp_path / "logs" / "worker.log")
    # Its start is not its opened line's `at`: the carried line keeps the start.
    led.append({"type": "opened", "harness": "worker", "run_id": 1, "kind": "resident",
                "trigger": "autostart", "started_at": format_ns(old - HOUR), "log": log})
    led.append({"type": "opened", "harness": "cron", "run_id": 1, "kind": "oneshot"})
    led.append({"type": "closed", "harness": "cron", "run_id": 1, "outcome": "success"})
    clock.ns = T0 - 50 * DAY
    led.append({"type": "updated", "harness": "worker", "run_id": 1, "model_calls": 7,
                "tokens": {"input": 70, "output": 7, "cache_read": 0, "cache_write": 0}})
    led.close()
    old_file = d / f"{day(old)}.jsonl"
    today = d / f"{day(T0)}.jsonl"
    assert not today.exists()

    led = open_ledger(d, clock=Clock(T0), retention_ns=90 * DAY)
    assert [(r["harness"], r["run_id"]) for r in led.open_records()] == [("worker", 1)]
    seen: list[tuple[str, list[dict[str, Any]], bool]] = []
    real_unlink = os.unlink

    def watching_unlink(path: Any, *a: Any, **kw: Any) -> None:
        # At the moment the old file goes, today's file must already hold the new line.
        # (os.unlink is patched module-wide: only day files are the prune's deletions.)
        if os.fspath(path).endswith(".jsonl"):
            seen.append((os.path.basename(path), lines_of(today) if today.exists() else [],
                         (d / "CHAIN").exists()))
        real_unlink(path, *a, **kw)

    monkeypatch.setattr(retention_mod.os, "unlink", watching_unlink)
    res = led.prune()
    monkeypatch.undo()
    assert (res.deleted, res.carried_forward, res.error) == ([day(old)], 1, None)
    assert not old_file.exists()
    carried = {"v": 1, "seq": 5, "type": "opened", "at": format_ns(T0), "harness": "worker",
               "run_id": 1, "kind": "resident", "trigger": "autostart",
               "started_at": format_ns(old - HOUR), "log": log, "model_calls": 7,
               "tokens": {"input": 70, "output": 7, "cache_read": 0, "cache_write": 0}}
    (on_disk,) = lines_of(today)
    assert {k: v for k, v in on_disk.items() if k not in ("prev", "hash")} == carried
    assert seen == [(old_file.name, [on_disk], True)]
    assert led.stats().carried_forward == 1

    chain = json.loads((d / "CHAIN").read_bytes())
    assert chain["seq"] == 3  # the last line of the deleted file
    assert stat.S_IMODE((d / "CHAIN").stat().st_mode) == 0o600
    v = verify_run_ledger(str(d))
    assert (v.ok, v.anchor, v.start_seq, v.lines) == (True, "CHAIN seq 3", 4, 2)

    want = {"harness": "worker", "run_id": 1, "seq": 4, "kind": "resident",
            "trigger": "autostart", "started_at": format_ns(old - HOUR), "log": log,
            "model_calls": 7,
            "tokens": {"input": 70, "output": 7, "cache_read": 0, "cache_write": 0}}
    recs, _, _ = scan(str(d), Query(names=("worker",), limit=5))
    assert [r.to_json(offline=True) for r in recs] == [{**want, "outcome": "running?"}]
    led.close()
    led = open_ledger(d, clock=Clock(T0 + HOUR))
    (rec,) = led.open_records()
    assert {k: v for k, v in rec.items() if k != "seq"} == {
        **{k: v for k, v in want.items() if k != "seq"}, "outcome": "running"}
    assert led.prune().carried_forward == 0  # it now lives in today's file


def test_a_carried_line_past_the_line_limit_is_cut_to_fit_not_refused(
    tmp_path: Path, open_ledger: OpenLedger
) -> None:
    """An open resident's opened line (every string at its 256-byte cap, 16 models) and a
    usage update (16 sessions) fit the line limit each, but not folded into one carried
    line (23.7 KB). Refused, it failed every prune while the run stayed open, and the
    file was never deleted. It is cut to fit as a closing line is: the last sessions
    first, each cut counted."""
    d = tmp_path / "ledger"
    old = T0 - 100 * DAY
    clock = Clock(old)
    led = open_ledger(d, clock=clock)
    big = {k: k[0] * 256 for k in ("reason", "source", "event_id", "todo_id", "model",
                                    "trace_url", "log")}
    led.append({"type": "opened", "harness": "h", "run_id": 1, "kind": "resident",
                "trigger": "autostart", **big,
                "models": [{"model": chr(97 + i) * 256, "provider": "p" * 256}
                           for i in range(16)]})
    led.append({"type": "updated", "harness": "h", "run_id": 1,
                "sessions": [{"id": chr(65 + i) * 256, "adapter": "a" * 256,
                              "trace_id": "x" * 256} for i in range(16)]})
    led.close()
    led = open_ledger(d, clock=Clock(T0), retention_ns=90 * DAY)
    before = led.stats().truncated
    res = led.prune()
    assert (res.deleted, res.carried_forward, res.error) == ([day(old)], 1, None)
    carried = lines_of(d / f"{day(T0)}.jsonl")
    assert len(carried) == 1
    line = carried[0]
    assert len(json.dumps(line, sort_keys=True, separators=(",", ":"),
                          ensure_ascii=False).encode()) + 1 <= 16 * 1024
    kept = len(line["sessions"])
    assert 0 < kept < 16
    assert line["sessions"] == [{"id": chr(65 + i) * 256, "adapter": "a" * 256,
                                 "trace_id": "x" * 256} for i in range(kept)]
    assert len(line["models"]) == 16 and all(line[k] == v for k, v in big.items())
    assert led.stats().truncated - before == 16 - kept
    assert [(r["harness"], r["run_id"]) for r in led.open_records()] == [("h", 1)]
    assert verify_run_ledger(str(d)).ok


@pytest.mark.parametrize("late", ["closed", "updated"])
def test_a_line_queued_during_the_carry_forward_is_not_overwritten(
    tmp_path: Path, open_ledger: OpenLedger, late: str
) -> None:
    """The run's closed line (or a usage update) is appended while its old file is being
    pruned and is still queued (buffered, not yet synced) when the carry-forward line is
    built: the carried line folds it in, so the record never reads running again or
    loses the newer figures."""
    d = tmp_path / "ledger"
    old = T0 - 100 * DAY
    clock = Clock(old)
    led = open_ledger(d, clock=clock, retention_ns=90 * DAY)
    led.append({"type": "opened", "harness": "worker", "run_id": 1, "kind": "resident",
                "trigger": "autostart", "started_at": format_ns(old), "model_calls": 1})
    clock.ns = T0
    later: dict[str, Any] = (
        {"type": "closed", "harness": "worker", "run_id": 1, "outcome": "failed",
         "exit_code": 1, "ended_at": format_ns(T0), "model_calls": 9}
        if late == "closed" else
        {"type": "updated", "harness": "worker", "run_id": 1, "model_calls": 9})
    led.enqueue(later, sync=False)  # queued: committed only with the next sync
    # Queued lines of other runs, one of each key part shared: none of them is folded in.
    for name, run_id in (("other", 1), ("worker", 2)):
        led.enqueue({"type": "decided", "harness": name, "run_id": run_id,
                     "trigger": "manual", "outcome": "missed", "model_calls": 5}, sync=False)
    res = led.prune()
    assert (res.deleted, res.carried_forward, res.error) == ([day(old)], 1, None)
    want_outcome = "failed" if late == "closed" else "running"
    rec = led.get("worker", 1)
    assert rec is not None
    assert (rec["outcome"], rec["model_calls"], rec["trigger"]) == (want_outcome, 9, "autostart")
    recs, _, _ = scan(str(d), Query(names=("worker",), limit=5))
    assert [r.run_id for r in recs] == [2, 1]
    on_disk = recs[1].to_json(offline=True)
    assert (on_disk["model_calls"], on_disk["trigger"]) == (9, "autostart")
    assert on_disk["outcome"] == ("failed" if late == "closed" else "running?")
    assert verify_run_ledger(str(d)).ok


def test_a_closing_line_in_a_doomed_file_is_carried_when_the_run_opened_later(
    tmp_path: Path, open_ledger: OpenLedger
) -> None:
    """x/1 opens just after yesterday's midnight; the clock steps back 30 s and its closed
    line lands in the day before, which the prune deletes. Without a fresh closed line
    the run would read open on disk (and REQ-7 would close it again at the next boot)."""
    d = tmp_path / "ledger"
    y = T0 - T0 % DAY - DAY  # yesterday's midnight
    clock = Clock(y + 5 * 10**9)
    led = open_ledger(d, clock=clock, retention_ns=DAY)
    led.append({"type": "opened", "harness": "x", "run_id": 1, "kind": "oneshot",
                "trigger": "manual", "started_at": format_ns(clock.ns)})
    clock.ns = y - 25 * 10**9
    led.append({"type": "closed", "harness": "x", "run_id": 1, "outcome": "success",
                "exit_code": 0})
    clock.ns = T0
    res = led.prune()
    assert (res.deleted, res.carried_forward, res.error) == ([day(y - DAY)], 1, None)
    (carried,) = lines_of(d / f"{day(T0)}.jsonl")
    assert (carried["type"], carried["outcome"], carried["exit_code"], carried["trigger"]) == (
        "closed", "success", 0, "manual")
    assert led.open_records() == []
    recs, _, _ = scan(str(d), Query(names=("x",), limit=5))
    assert [(r.closed, r.fields["outcome"]) for r in recs] == [(True, "success")]
    assert verify_run_ledger(str(d)).ok


def test_a_ledger_pruned_to_nothing_continues_its_chain_from_chain(
    tmp_path: Path, open_ledger: OpenLedger
) -> None:
    d = tmp_path / "ledger"
    clock = Clock(0)
    led = open_ledger(d, clock=clock)
    fill_days(led, clock, range(120, 95, -5), per_day=1)
    led.close()
    last = lines_of(sorted(d.glob("*.jsonl"))[-1])[-1]

    led = open_ledger(d, clock=Clock(T0))
    res = led.prune()
    assert len(res.deleted) == 5 and res.error is None
    assert sorted(os.listdir(d)) == ["CHAIN"]
    led.close()

    led = open_ledger(d, clock=Clock(T0))  # seq and chain head come from CHAIN alone
    assert led.append({"type": "decided", "harness": "nightly", "run_id": 50,
                       "outcome": "missed"}) == last["seq"] + 1
    (first,) = lines_of(d / f"{day(T0)}.jsonl")
    assert first["prev"] == last["hash"]
    v = verify_run_ledger(str(d))
    assert (v.ok, v.anchor, v.lines) == (True, f"CHAIN seq {last['seq']}", 1)


def test_chain_keeps_the_highest_pruned_seq_when_an_older_file_holds_later_lines(
    tmp_path: Path, open_ledger: OpenLedger
) -> None:
    """A clock stepped back put seq 3 in the file of the day before seqs 1-2: pruning both,
    oldest first, CHAIN must end at seq 3, not at the last line of the last file deleted."""
    d = tmp_path / "ledger"
    clock = Clock(T0 - 10 * DAY)
    led = open_ledger(d, clock=clock)
    for run_id, ago in ((1, 10), (2, 10), (3, 11), (4, 5)):
        clock.ns = T0 - ago * DAY
        led.append({"type": "decided", "harness": "nightly", "run_id": run_id,
                    "outcome": "missed"})
    led.close()
    third = lines_of(d / f"{day(T0 - 11 * DAY)}.jsonl")[-1]
    assert third["seq"] == 3

    led = open_ledger(d, clock=Clock(T0), retention_ns=7 * DAY)
    res = led.prune()
    assert (res.deleted, res.error) == ([day(T0 - 11 * DAY), day(T0 - 10 * DAY)], None)
    assert json.loads((d / "CHAIN").read_bytes()) == {"seq": 3, "hash": third["hash"]}
    v = verify_run_ledger(str(d))
    assert (v.ok, v.anchor, v.start_seq, v.lines, v.head_seq) == (True, "CHAIN seq 3", 4, 1, 4)


@pytest.mark.parametrize("kept_tail", ["whole", "damaged-hash"])
def test_the_boot_continues_after_chain_when_every_kept_line_is_below_it(
    tmp_path: Path, open_ledger: OpenLedger, kept_tail: str
) -> None:
    """A clock stepped back put seq 3 in an older day's file than seqs 1-2; the prune
    took it, and CHAIN holds seq 3. The kept file's last line is seq 2 (whole, or with a
    hash no one can read): the next boot must still continue at seq 4, linked to CHAIN,
    never issuing seq 3 again."""
    d = tmp_path / "ledger"
    clock = Clock(T0 - 5 * DAY)
    led = open_ledger(d, clock=clock)
    for run_id, ago in ((1, 5), (2, 5), (3, 11)):
        clock.ns = T0 - ago * DAY
        led.append({"type": "decided", "harness": "nightly", "run_id": run_id,
                    "outcome": "missed"})
    led.close()
    led = open_ledger(d, clock=Clock(T0), retention_ns=7 * DAY)
    assert led.prune().deleted == [day(T0 - 11 * DAY)]
    led.close()
    chain = json.loads((d / "CHAIN").read_bytes())
    assert chain["seq"] == 3
    kept = d / f"{day(T0 - 5 * DAY)}.jsonl"
    assert [x["seq"] for x in lines_of(kept)] == [1, 2]
    if kept_tail == "damaged-hash":
        data = kept.read_bytes()
        at = data.rindex(b'"hash":"') + 12
        kept.write_bytes(data[:at] + b"\xff" + data[at + 1:])

    led = open_ledger(d, clock=Clock(T0 + HOUR))
    assert led.stats().next_seq == 4
    assert led.append({"type": "decided", "harness": "nightly", "run_id": 4,
                       "outcome": "missed"}) == 4
    (new,) = lines_of(d / f"{day(T0)}.jsonl")
    assert (new["seq"], new["prev"]) == (4, chain["hash"])


def test_a_symlink_named_for_an_old_day_is_never_pruned_nor_followed(
    tmp_path: Path, open_ledger: OpenLedger
) -> None:
    """A link named for a day long gone, to today's file: read as a day file, the prune
    took it first and wrote CHAIN from its target's highest line (today's head), so
    every kept line fell at or before CHAIN and a line removed from them went unseen. It
    is a stray: left where it is, its target untouched, CHAIN from the files pruned."""
    d = tmp_path / "ledger"
    clock = Clock(T0 - 6 * DAY)
    led = open_ledger(d, clock=clock)
    fill_days(led, clock, range(6, -1, -1))  # seq 1-14 over seven days, then 15 today
    led.close()
    today = d / f"{day(T0)}.jsonl"
    link = d / "2020-01-03.jsonl"
    link.symlink_to(today)
    before = today.read_bytes()

    led = open_ledger(d, clock=Clock(T0), retention_ns=2 * DAY)
    res = led.prune()
    led.close()
    assert (res.deleted, res.error) == ([day(T0 - age * DAY) for age in (6, 5, 4, 3)], None)
    assert link.is_symlink() and today.read_bytes() == before
    assert json.loads((d / "CHAIN").read_bytes())["seq"] == 8
    v = verify_run_ledger(str(d))
    assert (v.ok, v.anchor, v.lines, v.behind, v.strays) == (
        True, "CHAIN seq 8", 7, 0, ["2020-01-03.jsonl"])

    kept = d / f"{day(T0 - 2 * DAY)}.jsonl"  # seq 9-10
    kept.write_bytes(kept.read_bytes().split(b"\n", 1)[1])  # seq 9 removed by hand
    v = verify_run_ledger(str(d))
    assert v.error is not None
    assert (v.ok, v.error.seq, v.error.file, v.error.line) == (False, 10, kept.name, 1)


def test_pruning_a_file_with_no_complete_line_leaves_chain_alone(
    tmp_path: Path, open_ledger: OpenLedger
) -> None:
    """An old day file holding only a crash's torn fragment has no (seq, hash) to anchor:
    it goes, and CHAIN is neither written nor changed."""
    d = tmp_path / "ledger"
    clock = Clock(T0 - DAY)
    led = open_ledger(d, clock=clock)
    led.append({"type": "decided", "harness": "nightly", "run_id": 1, "outcome": "missed"})
    led.close()
    torn = d / f"{day(T0 - 40 * DAY)}.jsonl"
    torn.write_bytes(b'{"v":1,"seq":')
    empty = d / f"{day(T0 - 39 * DAY)}.jsonl"
    empty.write_bytes(b"")

    led = open_ledger(d, clock=Clock(T0), retention_ns=30 * DAY)
    res = led.prune()
    assert (res.deleted, res.error) == ([day(T0 - 40 * DAY), day(T0 - 39 * DAY)], None)
    assert not torn.exists() and not empty.exists()
    assert not (d / "CHAIN").exists()
    v = verify_run_ledger(str(d))
    assert (v.ok, v.anchor, v.start_seq, v.lines) == (True, "genesis", 1, 1)


def test_pruning_a_file_whose_lines_are_numbered_below_one_leaves_chain_alone(
    tmp_path: Path, open_ledger: OpenLedger
) -> None:
    """No seq below 1 was ever issued, so an old day file whose only line claims one (a
    hand-made file) anchors nothing. CHAIN holding a seq below 0 is refused as malformed,
    and would stop every later boot."""
    d = tmp_path / "ledger"
    clock = Clock(T0 - DAY)
    led = open_ledger(d, clock=clock)
    led.append({"type": "decided", "harness": "nightly", "run_id": 1, "outcome": "missed"})
    led.close()
    for age, seq in ((40, 0), (39, -3)):
        forged = {"v": 1, "seq": seq, "type": "decided", "harness": "x", "run_id": 1,
                  "at": format_ns(T0 - age * DAY), "prev": "0" * 64, "hash": "1" * 64}
        (d / f"{day(T0 - age * DAY)}.jsonl").write_text(json.dumps(forged) + "\n")
    led = open_ledger(d, clock=Clock(T0), retention_ns=30 * DAY)
    res = led.prune()
    assert (res.deleted, res.error) == ([day(T0 - 40 * DAY), day(T0 - 39 * DAY)], None)
    assert not (d / "CHAIN").exists()
    led.close()
    led = open_ledger(d, clock=Clock(T0))
    assert led.append({"type": "decided", "harness": "nightly", "run_id": 2,
                       "outcome": "missed"}) == 2


def test_a_prune_on_a_hung_disk_gives_up_within_the_bound(tmp_path: Path) -> None:
    """A sync that hangs holds the writer's pass. The prune, which deletes a file only
    between passes, waited for it as long as the disk hung, and so did the daemon's
    shutdown, which waits for a prune under way. It gives up after the ledger's bound,
    keeps the file, and the next prune, on a disk that came back, deletes it."""
    d = tmp_path / "ledger"
    files = FaultyFiles()
    clock = Clock(T0 - 3 * DAY)
    led = RunLedger(str(d), clock=clock, files=files, retention_ns=DAY, sync_timeout=0.5)
    try:
        led.append(decided("a", 1))
        clock.ns = T0
        files.inject("sync", hang=True)
        with pytest.raises(LedgerUnavailable):
            led.append(decided("a", 2))
        done = threading.Event()
        got: list[Any] = []
        t = threading.Thread(target=lambda: (got.append(led.prune()), done.set()))
        t.start()
        assert done.wait(30.0), "the prune waited for the hung disk"
        res = got[0]
        assert (res.deleted, res.carried_forward) == ([], 0)
        assert "stuck in a write or sync" in res.error
        assert (d / f"{day(T0 - 3 * DAY)}.jsonl").exists()
        files.clear()
        assert led.prune().deleted == [day(T0 - 3 * DAY)]
    finally:
        files.clear()
        led.close()


def test_a_failed_carry_forward_keeps_the_file(tmp_path: Path, open_ledger: OpenLedger,
                                               caplog: pytest.LogCaptureFixture) -> None:
    d = tmp_path / "ledger"
    clock = Clock(T0 - 100 * DAY)
    led = open_ledger(d, clock=clock)
    led.append({"type": "opened", "harness": "worker", "run_id": 1, "kind": "resident"})
    clock.ns = T0
    before = digests(d)
    led.close()  # appends now fail: the carry-forward cannot be written
    with caplog.at_level(logging.INFO, logger="harness.ledger"):
        res = led.prune()
    assert res.deleted == [] and res.carried_forward == 0
    path = d / f"{day(T0 - 100 * DAY)}.jsonl"
    assert res.error is not None and res.error.startswith(f"pruning {path} failed: ")
    assert res.error.endswith("; retrying at the next prune")
    assert digests(d) == before
    assert not (d / "CHAIN").exists()
    # The boot's prune logs nothing of its own: the ledger's error line is the only trace.
    assert [(r.name, r.levelno, r.getMessage()) for r in caplog.records
            if r.levelno >= logging.WARNING] == [
        ("harness.ledger", logging.ERROR, f"ledger: {res.error}")]


def test_memory_agrees_with_the_files_after_a_prune(tmp_path: Path,
                                                     open_ledger: OpenLedger) -> None:
    """A run opened in a pruned file and closed in a kept one, and a run wholly pruned:
    after the prune, memory answers exactly what a file read answers (same records, same
    seqs), so paging across the two never duplicates or skips a record."""
    d = tmp_path / "ledger"
    clock = Clock(T0 - 40 * DAY)
    led = open_ledger(d, clock=clock, retention_ns=30 * DAY, window_ns=400 * DAY)
    led.append({"type": "decided", "harness": "gone", "run_id": 1, "outcome": "missed",
                "at": format_ns(T0 - 40 * DAY)})
    led.append({"type": "opened", "harness": "long", "run_id": 1, "kind": "oneshot",
                "started_at": format_ns(T0 - 40 * DAY), "at": format_ns(T0 - 40 * DAY),
                "outcome": "running"})
    clock.ns = T0 - 10 * DAY
    led.append({"type": "updated", "harness": "long", "run_id": 1, "model_calls": 3,
                "at": format_ns(T0 - 10 * DAY)})
    led.append({"type": "closed", "harness": "long", "run_id": 1, "outcome": "success",
                "exit_code": 0, "at": format_ns(T0 - 10 * DAY + HOUR)})
    clock.ns = T0
    res = led.prune()
    assert res.deleted == [day(T0 - 40 * DAY)]
    q = Query(limit=1000)
    mem, mem_oldest = led.query(q)
    files, files_oldest, _ = scan(str(d), q)
    assert [(r["harness"], r["run_id"], r["seq"]) for r in mem] == [("long", 1, 3)]
    assert [(r.harness, r.run_id, r.seq) for r in files] == [("long", 1, 3)]
    assert mem == [r.to_json() for r in files]
    assert mem_oldest == files_oldest == 3


def test_a_record_below_the_floor_but_above_its_harness_floor_is_held_after_a_prune(
    tmp_path: Path, open_ledger: OpenLedger
) -> None:
    """b/1, trimmed from memory while its opened line was on disk, left b's own floor at
    seq 2 (every b record from seq 2 on is in memory) below the ledger-wide one. The
    prune deletes its opened line: b/1 now starts at its closed line, seq 3, above b's
    floor. Memory looked for such records above the ledger-wide floor only, so it
    answered for b without b/1, and paging b from memory skipped it."""
    d = tmp_path / "ledger"
    clock = Clock(parse_ns("2026-06-10T12:00:00Z"))
    led = open_ledger(d, clock=clock, window_ns=DAY, tail=1, retention_ns=2 * DAY)
    led.append({"type": "opened", "harness": "b", "run_id": 1, "trigger": "manual"})
    clock.ns += DAY
    led.append({"type": "opened", "harness": "b", "run_id": 2, "trigger": "manual"})
    led.append({"type": "closed", "harness": "b", "run_id": 1, "outcome": "failed"})
    led.append(decided("c", 1))
    clock.ns += DAY
    led.append(decided("b", 3))
    led.append(decided("c", 2))
    clock.ns += DAY
    led.append(decided("c", 3))
    assert led.prune().deleted == ["2026-06-10"]
    for q in (Query(("b",), limit=2), Query(("b",), limit=1, before_seq=5),
              Query(("b",), limit=1, before_seq=3), Query(limit=10)):
        mem, mem_oldest = led.query(q)
        files, files_oldest, _ = scan(str(d), q)
        assert mem == [r.to_json() for r in files], q
        assert mem_oldest == files_oldest, q
    assert [r["seq"] for r in led.query(Query(("b",), limit=10))[0]] == [5, 3, 2]


def test_a_trimmed_record_with_a_kept_late_line_is_held_again_after_the_prune(
    tmp_path: Path, open_ledger: OpenLedger
) -> None:
    """x/1 opened and closed 40 days ago and got a late usage update 3 days ago. Memory
    trims it (closed, older than the window, tail 0), then the prune deletes its first
    lines: what is left of it on disk is a partial record at the late line's seq, above
    the floor, and memory must hold it too or a limited query answers from memory
    without it."""
    d = tmp_path / "ledger"
    clock = Clock(T0 - 40 * DAY)
    led = open_ledger(d, clock=clock)
    led.append({"type": "opened", "harness": "x", "run_id": 1, "kind": "oneshot"})
    led.append({"type": "closed", "harness": "x", "run_id": 1, "outcome": "success"})
    clock.ns = T0 - 5 * DAY
    led.append({"type": "decided", "harness": "y", "run_id": 1, "outcome": "missed"})
    clock.ns = T0 - 3 * DAY
    led.append({"type": "updated", "harness": "x", "run_id": 1, "model_calls": 4})
    led.close()

    clock = Clock(T0)
    led = open_ledger(d, clock=clock, retention_ns=30 * DAY, window_ns=7 * DAY, tail=0)
    assert led.append({"type": "decided", "harness": "z", "run_id": 1,
                       "outcome": "missed"}) == 5  # the day's first commit trims x/1
    assert led.get("x", 1) is None
    res = led.prune()
    assert (res.deleted, res.carried_forward, res.error) == ([day(T0 - 40 * DAY)], 0, None)
    assert led.get("x", 1) == {"harness": "x", "run_id": 1, "seq": 4, "model_calls": 4,
                               "outcome": "running"}
    q = Query(limit=2)
    mem, mem_oldest = led.query(q)
    files, files_oldest, _ = scan(str(d), q)
    assert [(r.harness, r.run_id, r.seq) for r in files] == [("z", 1, 5), ("x", 1, 4)]
    assert mem == [r.to_json() for r in files]
    assert mem_oldest == files_oldest == 4


def test_set_limits_refuses_either_limit_negative_and_accepts_zero(
    tmp_path: Path, open_ledger: OpenLedger
) -> None:
    led = open_ledger(tmp_path / "ledger", clock=Clock(T0), retention_ns=DAY, max_bytes=10)
    led.set_limits(0, 0)
    assert (led.retention_ns, led.max_bytes) == (0, 0)
    with pytest.raises(ValueError, match=r"^ledger limits must not be negative, got "
                       r"retention_ns=5, max_bytes=-1$"):
        led.set_limits(5, -1)
    with pytest.raises(ValueError, match=r"^ledger limits must not be negative, got "
                       r"retention_ns=-1, max_bytes=5$"):
        led.set_limits(-1, 5)
    assert (led.retention_ns, led.max_bytes) == (0, 0)  # a refused call changes nothing
    led.set_limits(3 * DAY, 7)
    assert (led.retention_ns, led.max_bytes) == (3 * DAY, 7)


def test_a_carried_line_counts_a_start_that_is_no_time_from_the_first_line(
    tmp_path: Path, open_ledger: OpenLedger, caplog: pytest.LogCaptureFixture
) -> None:
    """An edited file gave the open run a started_at that is no time, a todo_id that is no
    string and an attempt that is no integer. The carried line starts the run at its
    first line's `at` (where readers counted it from, and whose file is about to go) and
    leaves the other two out, saying so: no line may hold them, and refusing the whole
    line would keep the file for ever."""
    d = tmp_path / "ledger"
    old = T0 - 100 * DAY
    clock = Clock(old)
    led = open_ledger(d, clock=clock)
    led.append({"type": "opened", "harness": "worker", "run_id": 1, "kind": "resident",
                "trigger": "autostart", "started_at": format_ns(old - HOUR),
                "todo_id": "t1", "attempt": 2})
    led.append({"type": "decided", "harness": "cron", "run_id": 1, "outcome": "missed"})
    led.close()
    old_file = d / f"{day(old)}.jsonl"
    data = old_file.read_bytes()
    for was, now in ((f'"started_at":"{format_ns(old - HOUR)}"'.encode(), b'"started_at":"junk"'),
                     (b'"todo_id":"t1"', b'"todo_id":17'), (b'"attempt":2', b'"attempt":"2"')):
        assert data.count(was) == 1
        data = data.replace(was, now)
    old_file.write_bytes(data)

    led = open_ledger(d, clock=Clock(T0), retention_ns=90 * DAY)
    with caplog.at_level(logging.WARNING, logger="harness.ledger"):
        res = led.prune()
    assert (res.deleted, res.carried_forward, res.error) == ([day(old)], 1, None)
    (carried,) = lines_of(d / f"{day(T0)}.jsonl")
    assert {k: v for k, v in carried.items() if k not in ("prev", "hash")} == {
        "v": 1, "seq": 3, "type": "opened", "at": format_ns(T0), "harness": "worker",
        "run_id": 1, "kind": "resident", "trigger": "autostart", "started_at": format_ns(old)}
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == [
        "ledger: carrying worker/1 forward without field(s) attempt, todo_id, which hold "
        "values no line may: the files were edited or damaged"]


def _long_run_across_the_cut(d: Path, open_ledger: OpenLedger) -> RunLedger:
    """gone/1 wholly in the file 40 days back; long/1 opened there (seqs 1-2) and updated
    and closed 10 days back (seqs 3-4). The ledger's clock is T0, retention 30 days."""
    clock = Clock(T0 - 40 * DAY)
    led = open_ledger(d, clock=clock, retention_ns=30 * DAY, window_ns=400 * DAY)
    led.append({"type": "decided", "harness": "gone", "run_id": 1, "outcome": "missed"})
    led.append({"type": "opened", "harness": "long", "run_id": 1, "kind": "oneshot",
                "started_at": format_ns(T0 - 40 * DAY)})
    clock.ns = T0 - 10 * DAY
    led.append({"type": "updated", "harness": "long", "run_id": 1, "model_calls": 3})
    led.append({"type": "closed", "harness": "long", "run_id": 1, "outcome": "success",
                "exit_code": 0})
    clock.ns = T0
    return led


def _committing_while_refolding(led: RunLedger, monkeypatch: pytest.MonkeyPatch,
                                lines: list[dict[str, Any]], times: int | None = None
                                ) -> list[int]:
    """Commit `lines` while the prune's refold reads the files (its lock released), in
    the first `times` reads (None: every one); returns a list that counts the reads."""
    real = led._lines_of
    reads: list[int] = []

    def refolding(*a: Any, **kw: Any) -> Any:
        reads.append(1)
        if times is None or len(reads) <= times:
            for line in lines:
                led.append(line)
        yield from real(*a, **kw)

    monkeypatch.setattr(led, "_lines_of", refolding)
    return reads


def test_lines_committed_while_the_prune_refolds_are_folded_in(
    tmp_path: Path, open_ledger: OpenLedger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A usage update of long/1 and a new run are committed after the refold took its
    snapshot: the refolded long/1 (seq 3, its first kept line) still holds the update,
    and the new run, which was never cut, is left as the commit folded it."""
    d = tmp_path / "ledger"
    led = _long_run_across_the_cut(d, open_ledger)
    _committing_while_refolding(led, monkeypatch, [
        {"type": "updated", "harness": "long", "run_id": 1, "model_calls": 9},
        {"type": "decided", "harness": "other", "run_id": 1, "outcome": "missed"}])
    res = led.prune()
    monkeypatch.undo()
    assert (res.deleted, res.error) == ([day(T0 - 40 * DAY)], None)
    assert led.get("long", 1) == {"harness": "long", "run_id": 1, "seq": 3, "model_calls": 9,
                                  "outcome": "success", "exit_code": 0}
    assert led.get("other", 1) == {"harness": "other", "run_id": 1, "seq": 6,
                                   "outcome": "missed"}
    assert led.get("gone", 1) is None
    q = Query(limit=1000)
    mem, _ = led.query(q)
    files, _, _ = scan(str(d), q)
    assert [(r.harness, r.run_id, r.seq) for r in files] == [("other", 1, 6), ("long", 1, 3)]
    assert mem == [r.to_json() for r in files]


def test_more_lines_committed_than_the_ring_holds_are_folded_in_from_one_read(
    tmp_path: Path, open_ledger: OpenLedger, monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture
) -> None:
    """More lines than the ring holds are committed during the refold's read: they are
    captured as they commit, so one read suffices and memory then agrees with the files
    (long/1 from its first kept line with the last update, gone/1 dropped). Once the
    ring could not replay them: the files were read again, and after three such reads
    memory kept the pre-prune records, and gone/1, until a restart."""
    monkeypatch.setattr(runledger_mod, "RING", 3)
    d = tmp_path / "ledger"
    led = _long_run_across_the_cut(d, open_ledger)
    reads = _committing_while_refolding(led, monkeypatch, [
        {"type": "updated", "harness": "long", "run_id": 1, "model_calls": n}
        for n in (5, 6, 7, 8)])
    with caplog.at_level(logging.WARNING, logger="harness.ledger"):
        res = led.prune()
    monkeypatch.undo()
    assert (res.deleted, res.error, len(reads)) == ([day(T0 - 40 * DAY)], None, 1)
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert led.get("long", 1) == {"harness": "long", "run_id": 1, "seq": 3, "model_calls": 8,
                                  "outcome": "success", "exit_code": 0}
    assert led.get("gone", 1) is None
    assert led._captures == {}
    q = Query(limit=1000)
    mem, _ = led.query(q)
    files, _, _ = scan(str(d), q)
    assert mem == [r.to_json() for r in files]
    # Lines committed after the prune reach the refolded record directly.
    led.append({"type": "updated", "harness": "long", "run_id": 1, "model_calls": 9})
    assert led.get("long", 1)["model_calls"] == 9


def test_a_refold_that_fails_stops_capturing(
    tmp_path: Path, open_ledger: OpenLedger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read of the files that raises leaves memory as the commits left it and stops
    capturing: later commits are not held for a refold that will never replay them."""
    d = tmp_path / "ledger"
    led = _long_run_across_the_cut(d, open_ledger)

    def broken(*a: Any, **kw: Any) -> Any:
        led.append({"type": "updated", "harness": "long", "run_id": 1, "model_calls": 4})
        raise OSError(5, "Input/output error")
        yield  # a generator, as the real one

    monkeypatch.setattr(led, "_lines_of", broken)
    with pytest.raises(OSError, match="Input/output error"):
        led.prune()
    monkeypatch.undo()
    assert led._captures == {}
    assert led.get("long", 1) == {"harness": "long", "run_id": 1, "seq": 2, "kind": "oneshot",
                                  "started_at": format_ns(T0 - 40 * DAY), "model_calls": 4,
                                  "outcome": "success", "exit_code": 0}


def test_a_carried_line_that_cannot_be_synced_keeps_the_file(
    tmp_path: Path, open_ledger: OpenLedger
) -> None:
    """The carried opened line is queued but its write fails: the old file, which holds
    the run's only opened line on disk, must stay. Once the write goes through, the next
    prune deletes the file without carrying the run a second time."""
    d = tmp_path / "ledger"
    old = T0 - 100 * DAY
    clock = Clock(old)
    files = FaultyFiles()
    led = open_ledger(d, clock=clock, files=files, sync_timeout=0.5, retry_min=0.05)
    led.append({"type": "opened", "harness": "worker", "run_id": 1, "kind": "resident"})
    clock.ns = T0
    old_file, today = d / f"{day(old)}.jsonl", d / f"{day(T0)}.jsonl"
    before = digests(d)
    files.inject("write", errno=errno.EIO)
    res = led.prune()
    assert (res.deleted, res.carried_forward) == ([], 0)
    assert res.error is not None and res.error.startswith(f"pruning {old_file} failed: ")
    assert res.error.endswith("(harness=worker run_id=1 seq=2); retrying at the next prune")
    assert digests(d)[old_file.name] == before[old_file.name]
    assert not today.exists() or lines_of(today) == []
    assert not (d / "CHAIN").exists()

    files.clear()
    led.flush()
    deadline = time.monotonic() + 30
    while led.stats().queued:
        assert time.monotonic() < deadline, "the carried line was never written"
        time.sleep(0.01)
    assert [(x["seq"], x["type"], x["harness"], x["run_id"], x["kind"])
            for x in lines_of(today)] == [(2, "opened", "worker", 1, "resident")]
    res = led.prune()
    assert (res.deleted, res.carried_forward, res.error) == ([day(old)], 0, None)
    assert [x["seq"] for x in lines_of(today)] == [2]
    assert led.open_records()[0]["seq"] == 2
    assert verify_run_ledger(str(d)).ok


def test_an_open_run_whose_opened_line_was_moved_into_a_doomed_file_is_carried(
    tmp_path: Path, open_ledger: OpenLedger
) -> None:
    """An edit moved worker/1's opened line (at two days back) into the file of 100 days
    back. Its `at` names a kept day, but the line is in the doomed file: the run is
    carried forward by the file's own lines, or it would lose its only opened line."""
    d = tmp_path / "ledger"
    old = T0 - 100 * DAY
    clock = Clock(old)
    led = open_ledger(d, clock=clock)
    led.append({"type": "decided", "harness": "cron", "run_id": 1, "outcome": "missed"})
    clock.ns = T0 - 2 * DAY
    led.append({"type": "opened", "harness": "worker", "run_id": 1, "kind": "resident",
                "trigger": "autostart", "started_at": format_ns(T0 - 2 * DAY)})
    led.close()
    old_file, moved = d / f"{day(old)}.jsonl", d / f"{day(T0 - 2 * DAY)}.jsonl"
    old_file.write_bytes(old_file.read_bytes() + moved.read_bytes())
    moved.unlink()

    led = open_ledger(d, clock=Clock(T0), retention_ns=90 * DAY)
    res = led.prune()
    assert (res.deleted, res.carried_forward, res.error) == ([day(old)], 1, None)
    assert sorted(p.name for p in d.glob("*.jsonl")) == [f"{day(T0)}.jsonl"]
    (carried,) = lines_of(d / f"{day(T0)}.jsonl")
    assert {k: v for k, v in carried.items() if k not in ("prev", "hash")} == {
        "v": 1, "seq": 3, "type": "opened", "at": format_ns(T0), "harness": "worker",
        "run_id": 1, "kind": "resident", "trigger": "autostart",
        "started_at": format_ns(T0 - 2 * DAY)}
    assert [(r["harness"], r["run_id"], r["seq"]) for r in led.open_records()] == [
        ("worker", 1, 3)]


def test_a_carried_line_of_a_record_memory_no_longer_holds_is_not_built(
    tmp_path: Path, open_ledger: OpenLedger
) -> None:
    """The record a carry was planned for left memory before its line was built: no
    line, rather than a writer-side error."""
    led = open_ledger(tmp_path / "ledger", clock=Clock(T0))
    assert led._carried_line(("ghost", 1), "opened", None, []) is None


def test_a_run_opened_and_closed_in_the_doomed_file_is_not_carried(
    tmp_path: Path, open_ledger: OpenLedger
) -> None:
    """short/1 opened and closed 40 days back, and memory still holds it: its closing
    line is in the doomed file with its opened line, so nothing reads it open once the
    file is gone and no line is carried for it."""
    d = tmp_path / "ledger"
    clock = Clock(T0 - 40 * DAY)
    led = open_ledger(d, clock=clock, retention_ns=30 * DAY, window_ns=400 * DAY)
    led.append({"type": "opened", "harness": "short", "run_id": 1, "kind": "oneshot"})
    led.append({"type": "closed", "harness": "short", "run_id": 1, "outcome": "success"})
    clock.ns = T0 - DAY
    led.append({"type": "decided", "harness": "cron", "run_id": 1, "outcome": "missed"})
    clock.ns = T0
    assert led.get("short", 1) is not None
    res = led.prune()
    assert (res.deleted, res.carried_forward, res.error) == ([day(T0 - 40 * DAY)], 0, None)
    assert not (d / f"{day(T0)}.jsonl").exists()
    assert led.get("short", 1) is None
    assert [x["seq"] for x in lines_of(d / f"{day(T0 - DAY)}.jsonl")] == [3]


def test_an_open_run_whose_opened_line_no_reader_can_read_is_carried_by_its_at(
    tmp_path: Path, open_ledger: OpenLedger
) -> None:
    """worker/1's opened line in the doomed file was damaged after it was committed, so
    the file's own lines do not name it; memory still holds the run open, opened that
    day. It is carried by its opened line's `at`: the prune must not let it vanish."""
    d = tmp_path / "ledger"
    old = T0 - 100 * DAY
    clock = Clock(old)
    led = open_ledger(d, clock=clock, retention_ns=90 * DAY)
    led.append({"type": "opened", "harness": "worker", "run_id": 1, "kind": "resident",
                "trigger": "autostart"})
    led.append({"type": "decided", "harness": "cron", "run_id": 1, "outcome": "missed"})
    old_file = d / f"{day(old)}.jsonl"
    data = old_file.read_bytes()
    assert data.startswith(b"{")
    old_file.write_bytes(b"X" + data[1:])  # the first line is no JSON any more
    clock.ns = T0
    res = led.prune()
    assert (res.deleted, res.carried_forward, res.error) == ([day(old)], 1, None)
    (carried,) = lines_of(d / f"{day(T0)}.jsonl")
    assert (carried["seq"], carried["type"], carried["harness"], carried["run_id"],
            carried["kind"], carried["trigger"]) == (3, "opened", "worker", 1, "resident",
                                                     "autostart")
    assert [(r["harness"], r["run_id"], r["seq"]) for r in led.open_records()] == [
        ("worker", 1, 3)]


def test_a_run_trimmed_once_closed_is_held_again_from_its_closing_line(
    tmp_path: Path, open_ledger: OpenLedger
) -> None:
    """A resident opened 40 days back closes today; today's first commit (that closed
    line) trims it from memory, the floor staying at that line's seq. The prune deletes
    its opened line: on disk it is now a partial record starting at the closing line,
    at the floor and the newest committed seq. Memory must hold it too, or a query it
    answers alone (since the floor's instant) leaves it out."""
    d = tmp_path / "ledger"
    led = open_ledger(d, clock=Clock(T0 - 40 * DAY))
    led.append({"type": "opened", "harness": "x", "run_id": 1, "kind": "resident"})
    led.close()
    led = open_ledger(d, clock=Clock(T0), retention_ns=30 * DAY, window_ns=7 * DAY, tail=0)
    assert [r["run_id"] for r in led.open_records()] == [1]
    assert led.append({"type": "closed", "harness": "x", "run_id": 1, "outcome": "success",
                       "exit_code": 0}) == 2
    assert led.get("x", 1) is None  # closed, started before the window: trimmed
    res = led.prune()
    assert (res.deleted, res.carried_forward, res.error) == ([day(T0 - 40 * DAY)], 0, None)
    want = {"harness": "x", "run_id": 1, "seq": 2, "outcome": "success", "exit_code": 0}
    assert led.get("x", 1) == want
    q = Query(since_ns=T0)
    files, _, _ = scan(str(d), q)
    assert [r.to_json() for r in files] == [want]
    assert led.query(q) == ([want], 2)


@pytest.mark.parametrize("ending,outcome", [("closed", "success"), ("decided", "cancelled")])
def test_a_closing_line_in_a_doomed_file_is_carried_for_a_run_memory_let_go(
    tmp_path: Path, open_ledger: OpenLedger, ending: str, outcome: str
) -> None:
    """x/1 opens just after a midnight 40 days back; the clock steps back and the line
    ending it lands in the day before. Ended and older than the window, the run leaves
    memory at the first commit (tail=0 here; 20 newer runs of x do the same by default).
    The prune deletes the day holding that line and keeps the next, holding the opened
    line: the run is read from the files and a fresh closed line keeps it ended on disk,
    as when memory holds it; else every reader finds it running and the next boot
    closes it a second time, losing its outcome."""
    d = tmp_path / "ledger"
    midnight = T0 - T0 % DAY - 40 * DAY
    clock = Clock(midnight + 10 * 10**9)
    led = open_ledger(d, clock=clock)
    led.append({"type": "opened", "harness": "x", "run_id": 1, "kind": "oneshot",
                "trigger": "manual"})
    clock.ns = midnight - 10 * 10**9
    led.append({"type": ending, "harness": "x", "run_id": 1, "outcome": outcome})
    led.close()
    led = open_ledger(d, clock=Clock(T0), retention_ns=40 * DAY, tail=0)
    assert led.get("x", 1) is not None  # the boot folds it whole: ended
    assert led.append(decided("cron", 1)) == 3
    assert led.get("x", 1) is None  # trimmed at the first commit
    res = led.prune()
    assert (res.deleted, res.carried_forward, res.error) == ([day(midnight - DAY)], 1, None)
    carried = [(x["type"], x["harness"], x["run_id"], x.get("outcome"), x.get("trigger"))
               for x in lines_of(d / f"{day(T0)}.jsonl")]
    assert carried == [("decided", "cron", 1, "skipped", "schedule"),
                       ("closed", "x", 1, outcome, "manual")]
    led.close()
    again = open_ledger(d, clock=Clock(T0))
    assert again.open_records() == []
    recs, _, _ = scan(str(d), Query(names=("x",), since_ns=0, limit=5))
    assert [(r.closed, r.fields["outcome"]) for r in recs] == [(True, outcome)]


@pytest.mark.parametrize("held", [True, False])
def test_a_closing_line_in_a_doomed_file_is_carried_when_a_later_file_holds_an_update(
    tmp_path: Path, open_ledger: OpenLedger, held: bool
) -> None:
    """a/1 opens at 23:00, a usage update lands in the next day's file at 00:30, then the
    clock steps back and the failed close is stamped 23:59: in the first day's file with
    the opened line, which the prune deletes. Only an opened line in a later file got the
    closing line carried, so the update was left alone on disk: the run read running to
    memory, the files and `--outcome running`, its failed close gone. Held: memory has the
    run; not held: it is older than the window (a day here), past the tail (tail=0), and is
    read from the files."""
    d = tmp_path / "ledger"
    clock = Clock(parse_ns("2026-06-01T23:00:00Z"))
    led = open_ledger(d, clock=clock, retention_ns=2 * DAY,
                      **({} if held else {"window_ns": DAY, "tail": 0}))
    led.append({"type": "opened", "harness": "a", "run_id": 1, "kind": "oneshot",
                "trigger": "manual"})
    clock.ns = parse_ns("2026-06-02T00:30:00Z")
    led.append({"type": "updated", "harness": "a", "run_id": 1, "model_calls": 3})
    clock.ns = parse_ns("2026-06-01T23:59:00Z")
    led.append({"type": "closed", "harness": "a", "run_id": 1, "outcome": "failed",
                "exit_code": 1})
    clock.ns = parse_ns("2026-06-04T01:00:00Z")  # the 1st ended over 2 days ago, the 2nd not
    led.append(decided("b", 1))  # the day's trim
    assert (led.get("a", 1) is not None) is held
    res = led.prune()
    assert (res.deleted, res.carried_forward, res.error) == (["2026-06-01"], 1, None)
    carried = [(x["type"], x["harness"], x["run_id"], x.get("outcome"), x.get("exit_code"),
                x.get("model_calls"), x.get("trigger"))
               for x in lines_of(d / f"{day(clock.ns)}.jsonl")]
    assert carried == [("decided", "b", 1, "skipped", None, None, "schedule"),
                       ("closed", "a", 1, "failed", 1, 3, "manual")]
    ended = {"harness": "a", "run_id": 1, "seq": 2, "kind": "oneshot",
             "trigger": "manual", "model_calls": 3, "outcome": "failed", "exit_code": 1}
    q = Query(names=("a",), since_ns=0, limit=5)
    files, _, _ = scan(str(d), q)
    assert [r.to_json(offline=True) for r in files] == [ended]
    assert led.query(q) == ([ended], 2)
    running, _ = led.query(Query(outcomes=frozenset({"running"}), since_ns=0, limit=5))
    assert running == []
    led.close()
    assert open_ledger(d, clock=clock).open_records() == []


def test_a_run_memory_let_go_that_opened_in_an_earlier_file_is_not_carried(
    tmp_path: Path, open_ledger: OpenLedger
) -> None:
    """The usual run across midnight: opened in the day before the one its closed line is
    in. Pruning both days leaves nothing of it to read open, so nothing is carried."""
    d = tmp_path / "ledger"
    midnight = T0 - T0 % DAY - 40 * DAY
    clock = Clock(midnight - 10 * 10**9)
    led = open_ledger(d, clock=clock)
    led.append({"type": "opened", "harness": "x", "run_id": 1, "kind": "oneshot"})
    clock.ns = midnight + 10 * 10**9
    led.append({"type": "closed", "harness": "x", "run_id": 1, "outcome": "success"})
    clock.ns = midnight + 2 * DAY
    led.append({"type": "opened", "harness": "x", "run_id": 2, "kind": "oneshot"})
    led.close()
    led = open_ledger(d, clock=Clock(T0), retention_ns=39 * DAY, tail=0)
    assert led.append(decided("cron", 1)) == 4
    assert led.get("x", 1) is None
    res = led.prune()
    assert (res.deleted, res.carried_forward, res.error) == (
        [day(midnight - DAY), day(midnight)], 0, None)
    assert [x["seq"] for x in lines_of(d / f"{day(T0)}.jsonl")] == [4]
    assert [r["run_id"] for r in led.open_records()] == [2]


def test_a_decided_line_in_a_doomed_file_is_carried_when_the_run_opened_later(
    tmp_path: Path, open_ledger: OpenLedger
) -> None:
    """As for a closed line: x/1 opens just after yesterday's midnight, the clock steps
    back and the line deciding it (cancelled) lands in the day before, which the prune
    deletes. A fresh closed line keeps the run decided on disk."""
    d = tmp_path / "ledger"
    y = T0 - T0 % DAY - DAY  # yesterday's midnight
    clock = Clock(y + 5 * 10**9)
    led = open_ledger(d, clock=clock, retention_ns=DAY)
    led.append({"type": "opened", "harness": "x", "run_id": 1, "kind": "oneshot",
                "trigger": "manual"})
    clock.ns = y - 25 * 10**9
    led.append({"type": "decided", "harness": "x", "run_id": 1, "outcome": "cancelled",
                "reason": "operator"})
    clock.ns = T0
    res = led.prune()
    assert (res.deleted, res.carried_forward, res.error) == ([day(y - DAY)], 1, None)
    (carried,) = lines_of(d / f"{day(T0)}.jsonl")
    assert (carried["seq"], carried["type"], carried["outcome"], carried["reason"],
            carried["trigger"]) == (3, "closed", "cancelled", "operator", "manual")
    assert led.open_records() == []
    recs, _, _ = scan(str(d), Query(names=("x",), limit=5))
    assert [(r.closed, r.fields["outcome"]) for r in recs] == [(True, "cancelled")]


MIDNIGHT = (T0 // DAY + 1) * DAY  # the end of T0's day


def just_after_midnight(directory: Path) -> tuple[RunLedger, Clock]:
    """A ledger one second past MIDNIGHT whose only file but today's is yesterday's (one
    line at 23:59:59), with a size cap that deletes every file but today's."""
    clock = Clock(MIDNIGHT - 10**9)
    led = RunLedger(str(directory), clock=clock, max_bytes=1 << 30)
    led.append({"type": "decided", "harness": "a", "run_id": 1, "trigger": "manual",
                "outcome": "skipped"})
    clock.ns = MIDNIGHT + 10**9
    led.set_limits(90 * DAY, 0)
    return led, clock


def test_a_line_committed_to_yesterdays_file_while_it_is_pruned_is_carried(
        tmp_path: Path) -> None:
    """Just after midnight the size cap deletes yesterday's file, while a run whose opened
    line was stamped 23:59:59.5 is committed to it after the carry-forward looked at the
    file. That acknowledged line must not go with the file: the prune sees the commit,
    carries again, and the run stays open, in memory, on disk and after a reopen. (The
    interleaving is forced by running the append right after the first carry.)"""
    led, clock = just_after_midnight(tmp_path)
    midnight = MIDNIGHT
    led.append({"type": "decided", "harness": "a", "run_id": 2, "trigger": "manual",
                "outcome": "skipped"})
    carry = led._carry_forward
    carries: list[int] = []

    def carry_then_a_late_line(d: str) -> int:
        n = carry(d)
        carries.append(n)
        if len(carries) == 1:  # another thread read the clock at 23:59:59.5
            clock.ns = midnight - 10**9 // 2
            led.append({"type": "opened", "harness": "b", "run_id": 7, "trigger": "manual",
                        "kind": "oneshot", "outcome": "running"})
            clock.ns = midnight + 10**9
        return n

    led._carry_forward = carry_then_a_late_line  # type: ignore[method-assign]
    res = led.prune()
    assert (res.deleted, res.error, carries, res.carried_forward) == ([day(T0)], None, [0, 1], 1)
    assert [(r["harness"], r["run_id"], r["outcome"]) for r in led.open_records()] == [
        ("b", 7, "running")]
    led.close()
    assert sorted(os.listdir(tmp_path)) == [f"{day(midnight)}.jsonl", "CHAIN"]
    carried = [o for o in lines_of(tmp_path / f"{day(midnight)}.jsonl") if o["harness"] == "b"]
    assert [(o["type"], o["run_id"], o["at"][:10]) for o in carried] == [
        ("opened", 7, day(midnight))]
    again = RunLedger(str(tmp_path), clock=clock)
    assert again.get("b", 7)["outcome"] == "running"  # type: ignore[index]
    again.close()
    assert verify_run_ledger(str(tmp_path)).ok


def test_a_prune_gives_up_on_a_file_lines_keep_reaching(tmp_path: Path) -> None:
    """Were lines committed to a doomed file after every carry, the prune would carry for
    ever: after `CARRIES` tries it keeps the file, says why, and the next prune retries."""
    led, clock = just_after_midnight(tmp_path)
    midnight = MIDNIGHT
    carry = led._carry_forward
    late = iter(range(10, 20))

    def carry_then_a_late_line(d: str) -> int:
        n = carry(d)
        clock.ns = midnight - 10**9 // 2
        led.append({"type": "decided", "harness": "a", "run_id": next(late),
                    "trigger": "manual", "outcome": "skipped"})
        clock.ns = midnight + 10**9
        return n

    led._carry_forward = carry_then_a_late_line  # type: ignore[method-assign]
    res = led.prune()
    assert res.deleted == []
    assert res.error == (f"pruning {tmp_path}/{day(T0)}.jsonl failed: lines kept reaching it "
                         f"while {retention_mod.CARRIES} carries ran; retrying at the next prune")
    led._carry_forward = carry  # type: ignore[method-assign]
    res = led.prune()
    assert (res.deleted, res.error) == ([day(T0)], None)
    led.close()


def test_opening_the_ledger_removes_a_chain_file_a_killed_prune_left_half_made(
    tmp_path: Path, open_ledger: OpenLedger, caplog: pytest.LogCaptureFixture
) -> None:
    """A prune killed inside CHAIN's atomic replacement (or a daemon inside the import
    marker's) leaves its temporary file; the next writer, which holds the ledger alone,
    removes it and says so. Files of other names, the CHAIN itself and a day file stay, to
    the byte."""
    d = tmp_path / "ledger"
    led = open_ledger(d, clock=Clock(T0))
    led.append({"type": "opened", "harness": "a", "run_id": 1, "kind": "oneshot"})
    led.close()
    retention_mod.write_chain_file(str(d), 0, "0" * 64)
    (d / ".CHAIN.4242.139872.tmp").write_bytes(b'{"hash": "')
    (d / "..imported.4242.139872.tmp").write_bytes(b"imported 3")
    (d / ".CHAIN.4242.tmp").write_bytes(b"not ours")
    (d / ".other.1.2.tmp").write_bytes(b"not ours")

    def everything() -> dict[str, bytes]:
        return {p.name: p.read_bytes() for p in sorted(d.iterdir())}

    kept = everything()
    del kept[".CHAIN.4242.139872.tmp"], kept["..imported.4242.139872.tmp"]
    assert sorted(kept) == [".CHAIN.4242.tmp", ".other.1.2.tmp", "2026-06-15.jsonl", "CHAIN"]
    with caplog.at_level(logging.WARNING, logger="harness.ledger"):
        open_ledger(d, clock=Clock(T0))
    assert everything() == kept
    assert [r.getMessage() for r in caplog.records] == [
        "ledger: removed ..imported.4242.139872.tmp, .CHAIN.4242.139872.tmp, left half "
        "made by a process that was killed"]


def test_a_ledger_that_cannot_be_locked_leaves_chain_leftovers_alone(
    tmp_path: Path, open_ledger: OpenLedger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the directory cannot be locked (NFS), another daemon may be replacing CHAIN
    right now: its temporary file is not ours to remove."""
    d = tmp_path / "ledger"
    d.mkdir(mode=0o700)
    (d / ".CHAIN.4242.139872.tmp").write_bytes(b"maybe live")
    monkeypatch.setattr(runledger_mod, "hold_dir", lambda path: -1)
    open_ledger(d, clock=Clock(T0))
    assert (d / ".CHAIN.4242.139872.tmp").read_bytes() == b"maybe live"


def test_a_chain_damaged_under_a_running_ledger_stops_the_prune_before_any_delete(
    tmp_path: Path, open_ledger: OpenLedger
) -> None:
    """CHAIN edited by hand while the daemon runs: the prune deletes nothing (the kept
    lines would be anchored to nothing checkable) and says why, rather than raise out of
    the daily prune; once CHAIN is mended, the next prune goes ahead."""
    d = tmp_path / "ledger"
    led = open_ledger(d, clock=Clock(T0 - 40 * DAY))
    led.append(decided("a", 1))
    led.close()
    led = open_ledger(d, clock=Clock(T0), retention_ns=30 * DAY)
    (d / "CHAIN").write_text("[" * 100_000)
    res = led.prune()
    assert (res.deleted, res.carried_forward) == ([], 0)
    assert res.error is not None
    assert res.error.startswith(f"{d / 'CHAIN'}: unreadable chain anchor: maximum recursion")
    assert res.error.endswith("; nothing is pruned until it is mended")
    assert sorted(p.name for p in d.iterdir()) == [f"{day(T0 - 40 * DAY)}.jsonl", "CHAIN"]
    (d / "CHAIN").unlink()
    res = led.prune()
    assert (res.deleted, res.error) == ([day(T0 - 40 * DAY)], None)


@pytest.mark.timeout(60)  # the old open() waited for a FIFO's writer for ever
def test_a_fifo_put_at_chain_under_a_running_ledger_stops_the_prune_without_blocking(
    tmp_path: Path, open_ledger: OpenLedger
) -> None:
    d = tmp_path / "ledger"
    led = open_ledger(d, clock=Clock(T0 - 40 * DAY))
    led.append(decided("a", 1))
    led.close()
    led = open_ledger(d, clock=Clock(T0), retention_ns=30 * DAY)
    os.mkfifo(d / "CHAIN", 0o600)
    res = led.prune()
    assert (res.deleted, res.carried_forward) == ([], 0)
    assert res.error == (f"{d / 'CHAIN'}: unreadable chain anchor: [Errno 22] Not a regular "
                         f"file: '{d / 'CHAIN'}'; nothing is pruned until it is mended")
    (d / "CHAIN").unlink()
    assert led.prune().deleted == [day(T0 - 40 * DAY)]


def test_a_ledger_directory_unreadable_at_the_prune_is_a_prune_error(
    tmp_path: Path, open_ledger: OpenLedger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Listing the day files fails (the directory's permissions changed under the daemon;
    injected, as root reads any directory): an error of the prune, nothing deleted."""
    d = tmp_path / "ledger"
    led = open_ledger(d, clock=Clock(T0 - 40 * DAY))
    led.append(decided("a", 1))
    led.close()
    led = open_ledger(d, clock=Clock(T0), retention_ns=30 * DAY)

    def refused(path: str) -> Any:
        raise PermissionError(13, "Permission denied", path)

    monkeypatch.setattr(dayfiles_mod.os, "scandir", refused)
    res = led.prune()
    assert (res.deleted, res.carried_forward) == ([], 0)
    assert res.error == (f"listing {d} failed: ledger directory {d} cannot be read: "
                         "permission denied; retrying at the next prune")
    monkeypatch.undo()
    assert led.prune().deleted == [day(T0 - 40 * DAY)]


def test_a_record_the_prune_leaves_starting_after_the_windows_start_is_held_again(
    tmp_path: Path, open_ledger: OpenLedger
) -> None:
    """h/1 opened 10 days ago and closed at 11:30 today; a clock stepped back then put
    g/1 in an old day's file, above it. At the first commit memory lets both go (a tail
    of 1, the window one hour), raising its floor above g/1 and its floor_at to 11:00.
    The prune deletes the old files: h/1 now starts at its closing line, 11:30, below
    the floor. Memory answered `--since 11:15` without it (found by a random
    query-vs-files hunt); it must hold it again, as the files show it."""
    d = tmp_path / "ledger"
    today = T0 - T0 % DAY
    clock = Clock(today - 10 * DAY)
    led = open_ledger(d, clock=clock)

    def run(h: str, rid: int, at: int) -> None:
        clock.ns = at
        led.append({"type": "opened", "harness": h, "run_id": rid, "kind": "oneshot",
                    "trigger": "manual", "started_at": format_ns(at)})
        led.append({"type": "closed", "harness": h, "run_id": rid, "outcome": "success"})

    led.append({"type": "opened", "harness": "h", "run_id": 1, "kind": "oneshot",
                "trigger": "manual", "started_at": format_ns(clock.ns)})
    clock.ns = today + 11 * HOUR + 30 * MINUTE
    led.append({"type": "closed", "harness": "h", "run_id": 1, "outcome": "failed"})
    run("g", 1, today - 9 * DAY)
    run("h", 2, today + 11 * HOUR + 40 * MINUTE)
    run("g", 2, today + 11 * HOUR + 41 * MINUTE)
    led.close()

    clock = Clock(today + 12 * HOUR)
    led = open_ledger(d, clock=clock, window_ns=HOUR, tail=1, retention_ns=5 * DAY)
    led.append(decided("z", 1))  # the day's first commit trims
    assert (led.get("h", 1), led.get("g", 1)) == (None, None)
    assert led.prune().deleted == [day(today - 10 * DAY), day(today - 9 * DAY)]
    q = Query(names=("h",), since_ns=today + 11 * HOUR + 15 * MINUTE)
    files, low, _ = scan(str(d), q)
    assert [(r.run_id, r.seq) for r in files] == [(2, 5), (1, 2)]
    assert led.query(q) == ([r.to_json() for r in files], low)


def _files_open(d: Path) -> list[tuple[str, int]]:
    recs, _, _ = scan(str(d), Query())
    return [(r.harness, r.run_id) for r in recs if r.opened and not r.closed]


def test_a_run_closed_while_a_prune_carried_it_stays_closed_after_a_restart(
    tmp_path: Path, open_ledger: OpenLedger
) -> None:
    """h/1's closed line is still queued (sync=False) when the prune carries h/1, open in
    memory, forward: the files hold closed (seq 2) then the carried opened (seq 3). After
    21 newer runs and a restart with every file older than the window, the boot folded
    h/1 from the carried line alone (it began its fold at that line's file): running
    again, and REQ-7 would close it a second time. Found by a boot hunt."""
    d = tmp_path / "ledger"
    clock = Clock(T0 - 20 * DAY)
    led = open_ledger(d, clock=clock, retention_ns=2 * DAY, flush_every=3600)
    led.append({"type": "opened", "harness": "h", "run_id": 1, "trigger": "manual",
                "started_at": format_ns(clock.ns)})
    clock.ns += DAY
    led.append({"type": "closed", "harness": "h", "run_id": 1, "outcome": "success"},
               sync=False)
    clock.ns += 2 * DAY
    assert led.prune().carried_forward == 1
    for i in range(2, 23):
        led.append(decided("h", i))
    led.close()
    assert _files_open(d) == []
    led = open_ledger(d, clock=Clock(T0))
    assert led.open_records() == []
    assert led.get("h", 1) == {"harness": "h", "run_id": 1, "seq": 2, "outcome": "success",
                               "trigger": "manual", "started_at": format_ns(T0 - 20 * DAY)}


def test_a_carried_opened_line_committed_after_the_trim_does_not_reopen_the_run(
    tmp_path: Path, open_ledger: OpenLedger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The closed line of h/1 and the prune's carried opened line commit in separate
    batches (a slow sync between them), and the day's trim between them drops h/1, now
    closed: the carried line then made a fresh record in memory, open. Found by a random
    query-vs-files hunt (seed 532); the batches are forced one line each here."""
    real_commit = RunLedger._commit

    def one_by_one(self: RunLedger, entries: list[Any]) -> None:
        for e in entries:
            real_commit(self, [e])

    monkeypatch.setattr(RunLedger, "_commit", one_by_one)
    d = tmp_path / "ledger"
    clock = Clock(T0 - 5 * DAY)
    led = open_ledger(d, clock=clock, window_ns=DAY, tail=1, retention_ns=2 * DAY)
    led.append({"type": "opened", "harness": "h", "run_id": 1, "trigger": "manual",
                "started_at": format_ns(clock.ns)})
    led.append(decided("h", 2))
    clock.ns = T0
    led.append({"type": "closed", "harness": "h", "run_id": 1, "outcome": "success"},
               sync=False)
    assert led.prune().carried_forward == 1
    assert _files_open(d) == []
    assert led.open_records() == []
    files, low, _ = scan(str(d), Query(names=("h",)))
    assert led.query(Query(names=("h",))) == ([r.to_json() for r in files], low)


def test_a_queued_run_opened_below_a_skipped_run_id_is_carried_across_the_prune(
    tmp_path: Path, open_ledger: OpenLedger
) -> None:
    """on_overlap = "queue": while nightly/1 runs, a second firing is held (run id 2
    allocated, no line yet) and a third is skipped as run 3; run 2 opens only after run 3's
    line. Memory took that opened line, its run id below one already seen, for a late line
    of a record it had let go, and did not keep it: the prune then carried nothing, run 2's
    only opened line went with its file (REQ-12) and no boot could close it (REQ-7)."""
    d = tmp_path / "ledger"
    clock = Clock(T0 - 3 * DAY)
    led = open_ledger(d, clock=clock, retention_ns=DAY)
    led.append({"type": "opened", "harness": "nightly", "run_id": 1, "kind": "oneshot",
                "trigger": "manual", "started_at": format_ns(clock.ns)})
    led.append(decided("nightly", 3, trigger="manual"))
    led.append({"type": "closed", "harness": "nightly", "run_id": 1, "outcome": "success"})
    clock.ns += MINUTE
    started = format_ns(clock.ns)
    led.append({"type": "opened", "harness": "nightly", "run_id": 2, "kind": "oneshot",
                "trigger": "manual", "started_at": started})
    run2 = {"harness": "nightly", "run_id": 2, "kind": "oneshot", "trigger": "manual",
            "started_at": started}
    assert led.open_records() == [{**run2, "seq": 4, "outcome": "running"}]

    clock.ns = T0
    res = led.prune()
    assert (res.deleted, res.carried_forward, res.error) == ([day(T0 - 3 * DAY)], 1, None)
    q = Query(names=("nightly",))
    files, low, _ = scan(str(d), q)
    assert ([r.to_json(offline=True) for r in files], low) == (
        [{**run2, "seq": 5, "outcome": "running?"}], 5)
    assert led.query(q) == ([{**run2, "seq": 5, "outcome": "running"}], 5)
    led.close()

    led = open_ledger(d, clock=Clock(T0))
    assert [(r["run_id"], r["outcome"], r["reason"]) for r in reconcile(led, T0)] == [
        (2, "interrupted", "daemon_crash")]
