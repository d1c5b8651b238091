"""Tests that kill mutants of harness.ledger.runledger that the other tests let live:
exact answers of the real RunLedger over real day files."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

import harness.ledger.load as load_mod
import harness.ledger.runledger as runledger_mod
from harness.ledger.query import Query
from harness.timefmt import format_ns
from ledgertools import (
    DAY,
    HOUR,
    T0,
    Clock,
    OpenLedger,
    all_lines,
    count_scans,
    day,
    decided,
    lines_of,
)


def test_stats_name_the_oldest_day_the_bytes_and_the_records_held(
    ledger_dir: Path, open_ledger: OpenLedger
) -> None:
    clock = Clock(T0 - 2 * DAY)
    led = open_ledger(ledger_dir, clock=clock)
    led.append(decided("a", 1))
    clock.ns = T0
    led.append(decided("a", 2))
    led.append(decided("b", 1))
    st = led.stats()
    size = sum(os.path.getsize(p) for p in ledger_dir.glob("*.jsonl"))
    assert (st.oldest_day, st.bytes, st.records_in_memory, st.next_seq) == (
        day(T0 - 2 * DAY), size, 3, 4)
    assert (st.skipped, st.torn, st.pruned, st.carried_forward) == (0, 0, 0, 0)


def test_a_fresh_ledger_opens_without_a_warning_and_starts_at_seq_1(
    ledger_dir: Path, open_ledger: OpenLedger, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("WARNING", logger="harness.ledger")
    led = open_ledger(ledger_dir, clock=Clock(T0))
    assert caplog.records == []
    assert led.stats().next_seq == 1
    assert led.append(decided("a", 1)) == 1


def test_a_restart_recovers_seq_and_head_from_the_last_lines_without_a_warning(
    ledger_dir: Path, open_ledger: OpenLedger, caplog: pytest.LogCaptureFixture
) -> None:
    """The tails give the next seq and head; the boot's full read finding a higher seq
    is the files-edited case, which warns. A plain restart must not."""
    clock = Clock(T0 - 40 * DAY)  # one file older than the window, one inside it
    led = open_ledger(ledger_dir, clock=clock)
    led.append(decided("a", 1))
    led.append(decided("a", 2))
    clock.ns = T0 - HOUR
    led.append(decided("a", 3))
    led.close()
    caplog.set_level("WARNING", logger="harness.ledger")
    led = open_ledger(ledger_dir, clock=Clock(T0))
    assert caplog.records == []
    assert led.stats().next_seq == 4
    assert led.append(decided("a", 4)) == 4
    lines = all_lines(ledger_dir)
    assert [x["seq"] for x in lines] == [1, 2, 3, 4]
    assert lines[3]["prev"] == lines[2]["hash"]


def test_a_file_on_the_windows_first_day_is_loaded_as_the_window_not_as_older(
    ledger_dir: Path, open_ledger: OpenLedger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Lines 1 went with their file; the one left file is the window's first day (the 8th
    for a boot on the 15th at noon): memory holds every line on disk, so a query needs no
    file read."""
    clock = Clock(T0 - 100 * DAY)
    led = open_ledger(ledger_dir, clock=clock)
    led.append(decided("a", 1))
    clock.ns = T0 - 7 * DAY
    led.append(decided("a", 2))
    led.close()
    led = open_ledger(ledger_dir, clock=Clock(T0), retention_ns=30 * DAY)
    assert led.prune().deleted == [day(T0 - 100 * DAY)]
    led.close()
    assert sorted(p.name for p in ledger_dir.glob("*.jsonl")) == ["2026-06-08.jsonl"]

    led = open_ledger(ledger_dir, clock=Clock(T0))
    calls = count_scans(monkeypatch)
    recs, oldest = led.query(Query(limit=10))
    assert ([(r["run_id"], r["seq"]) for r in recs], oldest) == ([(2, 2)], 2)
    assert calls == []


def count_file_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The day files a RunLedger reads line by line from now on (the real read answers):
    by lines (`iter_chunks`: the boot's pass over the window, in load.py, and a peek at a
    file's first lines) or by envelopes a block at a time (`head_blocks`)."""
    paths: list[str] = []

    def counting(real: Any) -> Any:
        def read(path: str, *a: Any, **kw: Any) -> Any:
            paths.append(os.path.basename(path))
            return real(path, *a, **kw)
        return read

    monkeypatch.setattr(runledger_mod, "iter_chunks", counting(runledger_mod.iter_chunks))
    monkeypatch.setattr(runledger_mod, "head_blocks", counting(runledger_mod.head_blocks))
    monkeypatch.setattr(load_mod, "iter_chunks", counting(load_mod.iter_chunks))
    return paths


def test_since_within_the_ring_reads_no_file(
    ledger_dir: Path, open_ledger: OpenLedger, monkeypatch: pytest.MonkeyPatch
) -> None:
    led = open_ledger(ledger_dir, clock=Clock(T0))
    for i in range(1, 6):
        led.append(decided("a", i))
    reads = count_file_reads(monkeypatch)
    on_disk = all_lines(ledger_dir)
    assert list(led.since(2)) == on_disk[2:]
    assert list(led.since(0)) == on_disk
    assert reads == []
    # One seq before the ring's first line: the files answer that part.
    led.close()
    led = open_ledger(ledger_dir, clock=Clock(T0))
    led.append(decided("a", 6))
    reads.clear()
    assert [x["seq"] for x in led.since(3)] == [4, 5, 6]
    assert reads == [f"{day(T0)}.jsonl"]


def test_a_query_read_from_the_files_holds_every_line_of_the_last_commit(
    ledger_dir: Path, open_ledger: OpenLedger
) -> None:
    """Memory let go of a/1 (window one day, tail 0), so the query reads the files up to
    the last committed seq: the last line of a commit of several lines included."""
    clock = Clock(T0 - 3 * DAY)
    led = open_ledger(ledger_dir, clock=clock, window_ns=DAY, tail=0)
    led.append(decided("a", 1))
    clock.ns = T0
    for i in range(2, 6):
        led.append(decided("a", i), sync=False)
    assert led.append(decided("a", 6)) == 6
    recs, oldest = led.query(Query(limit=10))
    assert ([r["seq"] for r in recs], oldest) == ([6, 5, 4, 3, 2, 1], 1)


# -- product defects: these fail on the code as it is ------------------------------------


def test_since_still_gives_a_lagging_follower_what_a_prune_deleted_while_memory_holds_it(
    ledger_dir: Path, open_ledger: OpenLedger
) -> None:
    """Seq 1 and 3 lie in an old day's file (the clock stepped back for seq 3), seq 2 and
    4 in today's; a prune deletes the old file. A follower that had read up to seq 0 still
    gets every committed line, 1 to 4, from memory: `since` answers from the ring while it
    reaches back, so a consumer that lags behind a prune loses nothing while the daemon
    runs. The files, and `since` after a restart, hold only 2 and 4."""
    clock = Clock(T0 - 100 * DAY)
    led = open_ledger(ledger_dir, clock=clock)
    led.append(decided("nightly", 1))
    clock.ns = T0
    led.append(decided("nightly", 2))
    clock.ns = T0 - 100 * DAY + HOUR
    led.append(decided("nightly", 3))
    clock.ns = T0
    led.append(decided("nightly", 4))
    assert led.prune().deleted == [day(T0 - 100 * DAY)]
    assert [x["seq"] for x in all_lines(ledger_dir)] == [2, 4]
    for after, want in ((0, [1, 2, 3, 4]), (1, [2, 3, 4]), (3, [4]), (4, [])):
        assert [x["seq"] for x in led.since(after)] == want, after
    led.close()
    led = open_ledger(ledger_dir, clock=clock)
    for after, want in ((0, [2, 4]), (1, [2, 4]), (2, [4]), (3, [4]), (4, [])):
        assert [x["seq"] for x in led.since(after)] == want, after


def test_a_subscriber_holds_1024_records_by_default(
    ledger_dir: Path, open_ledger: OpenLedger
) -> None:
    led = open_ledger(ledger_dir, clock=Clock(T0))
    sub = led.subscribe("default")
    for i in range(1, 1030):
        led.append(decided("a", i), sync=False)
    assert led.append(decided("a", 1030)) == 1030
    assert led.stats().feed_missed == {"default": 6}
    assert [c.seq for c in sub.drain()] == list(range(1, 1025))


def test_the_first_commit_of_a_new_utc_day_trims_memory(
    ledger_dir: Path, open_ledger: OpenLedger
) -> None:
    clock = Clock(T0 - 3 * DAY)
    led = open_ledger(ledger_dir, clock=clock, window_ns=DAY, tail=0)
    led.append(decided("a", 1))
    assert led.stats().records_in_memory == 1
    clock.ns = T0
    led.append(decided("a", 2))
    assert led.stats().records_in_memory == 1
    assert led.get("a", 1) is None and led.get("a", 2) is not None
    # The answer is the files' all the same.
    recs, _oldest = led.query(Query(limit=10))
    assert [(r["run_id"], r["seq"]) for r in recs] == [(2, 2), (1, 1)]


def test_a_late_update_in_the_window_of_a_run_closed_before_it_folds_whole_at_boot(
    ledger_dir: Path, open_ledger: OpenLedger
) -> None:
    """Opened and closed ten days ago, a usage update today: the boot must fold the old
    lines in too, else memory holds a record of seq 3 with no start and no outcome."""
    clock = Clock(T0 - 10 * DAY)
    led = open_ledger(ledger_dir, clock=clock)
    led.append({"type": "opened", "harness": "s", "run_id": 1, "kind": "oneshot",
                "trigger": "schedule", "started_at": format_ns(clock.ns)})
    led.append({"type": "closed", "harness": "s", "run_id": 1, "outcome": "success",
                "exit_code": 0})
    clock.ns = T0 - HOUR
    led.append({"type": "updated", "harness": "s", "run_id": 1, "model_calls": 3})
    led.close()

    led = open_ledger(ledger_dir, clock=Clock(T0))
    want = {"harness": "s", "run_id": 1, "seq": 1, "kind": "oneshot", "trigger": "schedule",
            "started_at": format_ns(T0 - 10 * DAY), "outcome": "success", "exit_code": 0,
            "model_calls": 3}
    assert led.get("s", 1) == want
    assert led.query(Query(limit=10)) == ([want], 1)


def test_a_line_written_after_the_window_began_into_an_older_file_is_loaded(
    ledger_dir: Path, open_ledger: OpenLedger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seq 1 yesterday, then the clock stepped back ten days: seq 2 lands in an older
    file than the window's. Memory claims every record from seq 1 on, so it must hold
    run b/1; a query answered from memory without it would lose it."""
    clock = Clock(T0 - DAY)
    led = open_ledger(ledger_dir, clock=clock)
    led.append(decided("a", 1))
    clock.ns = T0 - 10 * DAY
    led.append(decided("b", 1))
    led.close()

    led = open_ledger(ledger_dir, clock=Clock(T0))
    calls = count_scans(monkeypatch)
    recs, oldest = led.query(Query(limit=10))
    assert ([(r["harness"], r["run_id"], r["seq"]) for r in recs], oldest) == (
        [("b", 1, 2), ("a", 1, 1)], 1)
    assert led.get("b", 1) is not None
    assert calls == []


def test_an_adopted_last_line_without_its_newline_is_the_head_with_one_warning(
    ledger_dir: Path, open_ledger: OpenLedger, caplog: pytest.LogCaptureFixture
) -> None:
    led = open_ledger(ledger_dir, clock=Clock(T0))
    led.append(decided("a", 1))
    led.append(decided("a", 2))
    led.close()
    path = ledger_dir / f"{day(T0)}.jsonl"
    path.write_bytes(path.read_bytes()[:-1])  # the last "\n" never reached the disk
    caplog.set_level("WARNING", logger="harness.ledger")
    led = open_ledger(ledger_dir, clock=Clock(T0))
    assert [r.getMessage() for r in caplog.records] == [
        f"ledger: {path} ends in a complete line without its newline; kept"]
    assert path.read_bytes().endswith(b"}\n")
    assert (led.stats().next_seq, led.stats().torn) == (3, 0)
    assert led.append(decided("a", 3)) == 3
    lines = lines_of(path)
    assert [x["seq"] for x in lines] == [1, 2, 3]
    assert lines[2]["prev"] == lines[1]["hash"]


def test_a_late_update_of_a_trimmed_run_is_answered_from_the_files(
    ledger_dir: Path, open_ledger: OpenLedger
) -> None:
    """s/1 ran three days ago and was trimmed (window one day, tail 0); a late usage
    update is committed today. Memory must not start a partial record at seq 4: the
    query answers the whole run, seq 1, as the files do."""
    clock = Clock(T0 - 3 * DAY)
    led = open_ledger(ledger_dir, clock=clock, window_ns=DAY, tail=0)
    led.append({"type": "opened", "harness": "s", "run_id": 1, "kind": "oneshot",
                "trigger": "schedule", "started_at": format_ns(clock.ns)})
    led.append({"type": "closed", "harness": "s", "run_id": 1, "outcome": "success"})
    clock.ns = T0
    led.append(decided("x", 1))
    assert led.get("s", 1) is None  # trimmed
    assert led.append({"type": "updated", "harness": "s", "run_id": 1,
                       "model_calls": 3}) == 4
    recs, oldest = led.query(Query(names=("s",), limit=10))
    assert (recs, oldest) == ([{"harness": "s", "run_id": 1, "seq": 1, "kind": "oneshot",
                                "trigger": "schedule", "started_at": format_ns(T0 - 3 * DAY),
                                "outcome": "success", "model_calls": 3}], 1)
    assert led.get("s", 1) is None


def test_stats_count_the_files_pruned_and_the_runs_carried(
    ledger_dir: Path, open_ledger: OpenLedger
) -> None:
    clock = Clock(T0 - 100 * DAY)
    led = open_ledger(ledger_dir, clock=clock)
    led.append({"type": "opened", "harness": "w", "run_id": 1, "kind": "resident",
                "trigger": "autostart"})
    clock.ns = T0 - 99 * DAY
    led.append(decided("a", 1))
    clock.ns = T0
    led.append(decided("a", 2))
    res = led.prune()
    assert (res.deleted, res.carried_forward) == ([day(T0 - 100 * DAY), day(T0 - 99 * DAY)], 1)
    st = led.stats()
    assert (st.pruned, st.carried_forward, st.oldest_day, st.next_seq) == (2, 1, day(T0), 5)
    assert led.get("a", 1) is None  # memory forgot the pruned record
    assert [(r["harness"], r["run_id"], r["seq"]) for r in led.open_records()] == [("w", 1, 4)]
    res = led.prune()
    assert (res.deleted, res.carried_forward) == ([], 0)
    assert (led.stats().pruned, led.stats().carried_forward) == (2, 1)


def test_a_boot_that_reads_every_file_lets_memory_answer_the_harness(
    ledger_dir: Path, open_ledger: OpenLedger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seq 1 was pruned; a weekly harness w has runs 30 and 20 days ago, outside the
    window. The boot reads every file left for it: memory then holds all of w, and a
    query of w needs no file read."""
    clock = Clock(T0 - 100 * DAY)
    led = open_ledger(ledger_dir, clock=clock)
    led.append(decided("z", 1))
    clock.ns = T0 - 30 * DAY
    led.append(decided("w", 1))
    clock.ns = T0 - 20 * DAY
    led.append(decided("w", 2))
    clock.ns = T0
    led.append(decided("a", 1))
    assert led.prune().deleted == [day(T0 - 100 * DAY)]
    led.close()

    led = open_ledger(ledger_dir, clock=Clock(T0))
    calls = count_scans(monkeypatch)
    recs, oldest = led.query(Query(names=("w",), limit=10))
    assert ([(r["run_id"], r["seq"]) for r in recs], oldest) == ([(2, 3), (1, 2)], 2)
    assert calls == []


def test_the_boot_loads_no_old_record_of_a_harness_already_holding_its_tail(
    ledger_dir: Path, open_ledger: OpenLedger
) -> None:
    clock = Clock(T0 - 30 * DAY)
    led = open_ledger(ledger_dir, clock=clock)
    led.append(decided("a", 1))
    led.append(decided("b", 1))
    clock.ns = T0
    led.append(decided("a", 2))
    led.append(decided("a", 3))
    led.close()
    led = open_ledger(ledger_dir, clock=Clock(T0), tail=2)
    # a's tail is in the window; b has none there, so its old record is loaded.
    assert [k for k in (("a", 1), ("a", 2), ("a", 3), ("b", 1)) if led.get(*k)] == [
        ("a", 2), ("a", 3), ("b", 1)]


def test_the_boot_folds_old_records_from_the_first_file_holding_one(
    ledger_dir: Path, open_ledger: OpenLedger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ten old days of one run of w each, and a tail of two: the fold of the records the
    boot keeps reads the last two old files, not all ten."""
    clock = Clock(T0 - 20 * DAY)
    led = open_ledger(ledger_dir, clock=clock)
    for i in range(1, 11):
        clock.ns = T0 - (20 - i) * DAY
        led.append(decided("w", i))
    led.close()
    reads = count_file_reads(monkeypatch)
    led = open_ledger(ledger_dir, clock=Clock(T0), tail=2)
    assert [i for i in range(1, 11) if led.get("w", i) is not None] == [9, 10]
    assert reads == [f"{day(T0 - 11 * DAY)}.jsonl", f"{day(T0 - 10 * DAY)}.jsonl"]


def test_an_old_open_run_folds_its_lines_from_before_its_carried_opened_line(
    ledger_dir: Path, open_ledger: OpenLedger
) -> None:
    """A resident opened 30 days ago, updated 24 days ago; a prune 20 days ago deleted its
    opened line's file and carried a fresh opened line. Its update now comes before any
    opened line in the files, and the boot must fold it too."""
    clock = Clock(T0 - 30 * DAY)
    led = open_ledger(ledger_dir, clock=clock, retention_ns=5 * DAY)
    led.append({"type": "opened", "harness": "r", "run_id": 1, "kind": "resident",
                "trigger": "autostart", "started_at": format_ns(clock.ns)})
    clock.ns = T0 - 24 * DAY
    led.append({"type": "updated", "harness": "r", "run_id": 1, "model_calls": 5})
    clock.ns = T0 - 20 * DAY
    assert led.prune().deleted == [day(T0 - 30 * DAY)]
    led.close()
    led = open_ledger(ledger_dir, clock=Clock(T0), tail=0)
    assert led.open_records() == [{
        "harness": "r", "run_id": 1, "seq": 2, "kind": "resident", "trigger": "autostart",
        "started_at": format_ns(T0 - 30 * DAY), "model_calls": 5, "outcome": "running"}]


def test_a_trim_with_no_tail_leaves_the_floor_above_the_record_it_dropped(
    ledger_dir: Path, open_ledger: OpenLedger
) -> None:
    """With a tail of 0 the day's trim drops a/1 (seq 1), the newest of a: the harness's
    floor went on a/1's own seq, and memory answered "no record of a"."""
    clock = Clock(T0)
    led = open_ledger(ledger_dir, clock=clock, window_ns=DAY, tail=0)
    led.append(decided("a", 1))
    clock.ns += 2 * DAY
    led.append(decided("b", 1))
    assert led.get("a", 1) is None
    recs, oldest = led.query(Query(names=("a",), limit=1))
    assert ([(r["run_id"], r["seq"]) for r in recs], oldest) == ([(1, 1)], 1)
