"""The run ledger (SPEC-0022) as the daemon drives it: `harness.ledger.runledger.RunLedger`.

Covers REQ-1 (location, modes, envelope, seq across restarts), REQ-2 (folding, unknown
fields, partial records, torn lines), REQ-4 (caps and validation), REQ-17 (secrets never
reach a file byte), REQ-10 (the run feed and `since`), the boot index (every open record
is found whatever its age, runs across the window's edge fold whole, backfill) and
REQ-12's `log_pruned`. On-disk claims are checked by reading the day files themselves.
Time is injected (`Clock`) so day files and stamps are exact.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import stat
import time
from pathlib import Path
from typing import Any

import pytest

import harness.ledger.reader as reader_mod
import harness.ledger.runledger as runledger_mod
from harness.ledger.errors import LedgerCorrupt, LedgerInUse, LedgerUnavailable, LineRejected
from harness.ledger.files import FaultyFiles
from harness.ledger.fold import LogProbe
from harness.ledger.query import Query
from harness.ledger.reader import scan
from harness.ledger.runledger import RunLedger
from harness.ledger.verify import Break, verify_run_ledger
from harness.timefmt import format_ns
from ledgertools import (
    DAY,
    HOUR,
    NS,
    T0,
    Clock,
    DirSyncs,
    OpenLedger,
    all_lines,
    count_scans,
    day,
    decided,
    gc_left_by,
    lines_of,
    ref_canonical,
    seqs_by_file,
    wait_for_bytes,
)

ZERO = "0" * 64
STAMP = re.compile(r"\A\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{9}Z\Z")


def seal(obj: dict[str, Any], prev: str) -> bytes:
    """A hand-sealed line (with its newline) that continues a chain whose head is `prev`."""
    body = {**obj, "prev": prev}
    body["hash"] = hashlib.sha256(ref_canonical(body)).hexdigest()
    return ref_canonical(body) + b"\n"


def day_file(directory: Path, ns: int) -> Path:
    return directory / f"{format_ns(ns)[:10]}.jsonl"


def write_many(led: RunLedger, n: int, harness: str = "nightly", first_run: int = 1) -> None:
    """Append n decided lines quickly: unsynced, then one synced line commits them all."""
    for i in range(first_run, first_run + n - 1):
        led.append(decided(harness, i), sync=False)
    led.append(decided(harness, first_run + n - 1))


# -- REQ-1: location, modes, envelope, seq ----------------------------------------------


def test_first_run_creates_private_ledger_with_an_opened_line_seq_1(
    ledger_dir: Path, open_ledger: OpenLedger
) -> None:
    assert not ledger_dir.exists()
    clock = Clock(T0 + 123_456_789)
    led = open_ledger(ledger_dir, clock=clock)
    seq = led.append({"type": "opened", "harness": "nightly", "run_id": 1, "kind": "oneshot",
                      "trigger": "schedule", "started_at": format_ns(T0)})
    assert seq == 1
    assert stat.S_IMODE(ledger_dir.stat().st_mode) == 0o700
    path = ledger_dir / "2026-06-15.jsonl"
    assert sorted(os.listdir(ledger_dir)) == ["2026-06-15.jsonl"]
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    raw = path.read_bytes()
    assert raw.endswith(b"\n") and raw.count(b"\n") == 1
    line = json.loads(raw)
    body = {"v": 1, "seq": 1, "type": "opened", "at": "2026-06-15T12:00:00.123456789Z",
            "harness": "nightly", "run_id": 1, "kind": "oneshot", "trigger": "schedule",
            "started_at": "2026-06-15T12:00:00.000000000Z", "prev": ZERO}
    expected_hash = hashlib.sha256(ref_canonical(body)).hexdigest()
    assert line == {**body, "hash": expected_hash}
    assert raw == ref_canonical(line) + b"\n"  # the line on disk is canonical JSON
    assert STAMP.match(line["at"])


def test_at_defaults_to_now_and_routes_the_line_to_its_utc_day(
    ledger_dir: Path, open_ledger: OpenLedger
) -> None:
    led = open_ledger(ledger_dir, clock=Clock(T0 + 7))
    led.append({"type": "opened", "harness": "h", "run_id": 1})
    # An offset stamp: 01:30+02:00 on the 17th is 23:30Z on the 16th.
    led.append({"type": "closed", "harness": "h", "run_id": 1, "outcome": "success",
                "at": "2026-06-17T01:30:00.5+02:00"})
    assert sorted(os.listdir(ledger_dir)) == ["2026-06-15.jsonl", "2026-06-16.jsonl"]
    (first,) = lines_of(ledger_dir / "2026-06-15.jsonl")
    (second,) = lines_of(ledger_dir / "2026-06-16.jsonl")
    assert (first["seq"], first["at"]) == (1, "2026-06-15T12:00:00.000000007Z")
    assert (second["seq"], second["at"]) == (2, "2026-06-16T23:30:00.500000000Z")
    assert second["prev"] == first["hash"]


def test_enqueue_syncs_by_default_and_wait_returns_the_seq_once_durable(
    ledger_dir: Path, open_ledger: OpenLedger
) -> None:
    led = open_ledger(ledger_dir, clock=Clock(T0))
    first = led.enqueue({"type": "opened", "harness": "h", "run_id": 1})
    second = led.enqueue({"type": "closed", "harness": "h", "run_id": 1,
                          "outcome": "success"}, sync=True)
    assert (led.wait(first), led.wait(second)) == (1, 2)
    assert [x["seq"] for x in lines_of(ledger_dir / "2026-06-15.jsonl")] == [1, 2]
    assert led.get("h", 1) == {"harness": "h", "run_id": 1, "seq": 1, "outcome": "success"}
    # An unsynced line waits for the next sync (flush_every is 30 s): flush asks for it now.
    assert led.append(decided("h", 2), sync=False) == 3
    led.flush()
    deadline = time.monotonic() + 10
    while led.get("h", 2) is None:
        assert time.monotonic() < deadline, "flush did not sync the buffered line"
        time.sleep(0.01)


def test_the_real_clock_stamps_rfc3339_utc_nanoseconds(
    ledger_dir: Path, open_ledger: OpenLedger
) -> None:
    led = open_ledger(ledger_dir)
    led.append({"type": "opened", "harness": "h", "run_id": 1})
    (path,) = ledger_dir.glob("*.jsonl")
    (line,) = lines_of(path)
    assert STAMP.match(line["at"])
    assert path.name == line["at"][:10] + ".jsonl"


def test_seq_survives_a_restart(ledger_dir: Path, open_ledger: OpenLedger) -> None:
    led = open_ledger(ledger_dir, clock=Clock(T0))
    write_many(led, 812)
    led.close()
    path = ledger_dir / "2026-06-15.jsonl"
    before = lines_of(path)
    assert [x["seq"] for x in before] == list(range(1, 813))

    led = open_ledger(ledger_dir, clock=Clock(T0 + HOUR))
    assert led.stats().next_seq == 813
    assert led.append(decided("nightly", 813)) == 813
    after = lines_of(path)
    assert after[:812] == before
    assert after[812]["seq"] == 813
    assert after[812]["prev"] == before[-1]["hash"]
    res = verify_run_ledger(str(ledger_dir))
    assert (res.ok, res.lines, res.head_seq, res.torn) == (True, 813, 813, 0)


def _seqs_after_power_cut(files: FaultyFiles, *paths: Path) -> dict[str, list[int]]:
    """The seqs of the lines each file keeps after a power cut now."""
    return seqs_by_file({str(p): files.after_power_cut(str(p)) for p in paths})


def _killed_before_its_sync(ledger_dir: Path, open_ledger: OpenLedger) -> tuple[Path, FaultyFiles]:
    """Lines 1-3 in today's file, as a daemon killed after writing line 3 and before its
    fdatasync leaves it: line 3 is in the page cache only. The files of the next daemon."""
    led = open_ledger(ledger_dir, clock=Clock(T0))
    led.append(decided("nightly", 1))
    led.append(decided("nightly", 2))
    path = day_file(ledger_dir, T0)
    synced = path.read_bytes()
    led.append(decided("nightly", 3))
    led.close()
    files = FaultyFiles(power_cut=True)
    files.left_unsynced(str(path), synced)
    return path, files


def test_a_restart_syncs_the_file_a_killed_daemon_left_before_another_file_takes_a_line(
    ledger_dir: Path, open_ledger: OpenLedger
) -> None:
    """The next daemon boots past midnight, chains line 4 to line 3 and writes it to the
    next day's file. Unless line 3's file is synced first, a power cut could keep line 4
    and lose line 3: a gap in the chain for good, and seq 3 issued again."""
    path, files = _killed_before_its_sync(ledger_dir, open_ledger)
    assert _seqs_after_power_cut(files, path) == {path.name: [1, 2]}
    led = open_ledger(ledger_dir, clock=Clock(T0 + DAY), files=files)
    assert led.append(decided("nightly", 4)) == 4
    later = day_file(ledger_dir, T0 + DAY)
    assert later != path
    assert _seqs_after_power_cut(files, path, later) == {path.name: [1, 2, 3], later.name: [4]}
    # What a power cut right after line 4's write could leave: line 3 kept with it.
    assert [seqs_by_file(cut) for cut in files.cuts] == [
        {path.name: [1, 2, 3], later.name: [4]}
    ]
    assert led.stats().append_errors == 0


@pytest.mark.parametrize("into", ["directory", "symlink", "fifo", "not permitted"])
def test_a_head_file_that_cannot_be_synced_any_more_is_passed_over(
    ledger_dir: Path, open_ledger: OpenLedger, into: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Replaced after the boot by what is no regular file, or refused to us (an immutable
    file): it holds nothing the new lines depend on, so the writer goes on, once warned,
    instead of failing every append for ever."""
    path, files = _killed_before_its_sync(ledger_dir, open_ledger)
    led = open_ledger(ledger_dir, clock=Clock(T0 + DAY), files=files, retry_min=0.05)
    if into == "not permitted":
        files.inject("open", errno=errno.EPERM, times=1)  # the settle's open alone
    else:
        path.unlink()
        if into == "directory":
            path.mkdir()
        elif into == "symlink":
            path.symlink_to(ledger_dir / "elsewhere.txt")
        else:
            os.mkfifo(path)
    assert led.append(decided("nightly", 4)) == 4
    assert led.append(decided("nightly", 5)) == 5
    later = day_file(ledger_dir, T0 + DAY)
    assert [x["seq"] for x in lines_of(later)] == [4, 5]
    assert led.stats().append_errors == 0
    said = [r.getMessage() for r in caplog.records if "going on" in r.getMessage()
            or "no longer a regular file" in r.getMessage()]
    assert len(said) == 1 and str(path) in said[0], said


def test_the_engines_warnings_never_print_a_secret_a_path_holds(
    tmp_path: Path, open_ledger: OpenLedger, caplog: pytest.LogCaptureFixture
) -> None:
    secret = "password=Hunter2-Hunter2-Hunter2"
    ledger_dir = tmp_path / secret / "harness" / "ledger"
    path, files = _killed_before_its_sync(ledger_dir, open_ledger)
    led = open_ledger(ledger_dir, clock=Clock(T0 + DAY), files=files)
    path.unlink()
    path.mkdir()
    assert led.append(decided("nightly", 4)) == 4
    said = [r.getMessage() for r in caplog.records if r.name == "harness.ledger"]
    assert any("no longer a regular file" in m for m in said), said
    assert not [m for m in said if "Hunter2" in m]
    assert any("[REDACTED]" in m for m in said)


@pytest.mark.parametrize("op", ["open", "sync"])
def test_a_restart_whose_settling_sync_fails_retries_it_before_writing_a_line(
    ledger_dir: Path, open_ledger: OpenLedger, op: str
) -> None:
    """The head file's open or sync fails once (EIO): a failed sync of that file, named,
    retried in order; nothing goes to the next day's file before it holds line 3."""
    path, files = _killed_before_its_sync(ledger_dir, open_ledger)
    files.inject(op, errno=errno.EIO, times=1)
    led = open_ledger(ledger_dir, clock=Clock(T0 + DAY), files=files, retry_min=0.05)
    with pytest.raises(LedgerUnavailable) as caught:
        led.append(decided("nightly", 4))  # its pass failed: said at once, line kept
    assert caught.value.message == (f"ledger sync of {path} failed: Input/output error "
                                    f"(injected on {op}); the line stays queued and will "
                                    "be retried in order")
    deadline = time.monotonic() + 30
    while led.stats().queued and time.monotonic() < deadline:  # the retry, 50 ms on
        time.sleep(0.01)
    assert led.append(decided("nightly", 5)) == 5
    later = day_file(ledger_dir, T0 + DAY)
    assert _seqs_after_power_cut(files, path, later) == {
        path.name: [1, 2, 3], later.name: [4, 5]
    }
    assert files.cuts
    assert all(os.path.basename(p) != path.name or b.count(b"\n") == 3
               for cut in files.cuts for p, b in cut.items())
    assert led.stats().append_errors == 1


def test_seq_is_recovered_from_files_outside_the_window(
    ledger_dir: Path, open_ledger: OpenLedger
) -> None:
    old = T0 - 40 * DAY
    led = open_ledger(ledger_dir, clock=Clock(old))
    write_many(led, 5)
    led.close()
    old_path = day_file(ledger_dir, old)
    old_bytes = old_path.read_bytes()

    led = open_ledger(ledger_dir, clock=Clock(T0))
    assert led.append(decided("nightly", 6)) == 6
    assert old_path.read_bytes() == old_bytes
    today = lines_of(day_file(ledger_dir, T0))
    assert [x["seq"] for x in today] == [6]
    assert today[0]["prev"] == lines_of(old_path)[-1]["hash"]
    assert verify_run_ledger(str(ledger_dir)).ok


# -- REQ-2: folding ---------------------------------------------------------------------


PR_REVIEW_7 = {
    "harness": "pr-review", "run_id": 7, "seq": 1, "kind": "oneshot", "trigger": "webhook",
    "source": "github", "event_id": "evt-1", "started_at": "2026-06-15T12:00:00.000000000Z",
    "tokens": {"input": 900, "output": 300, "cache_read": 40, "cache_write": 2},
    "model_calls": 5, "model": "claude-sonnet-4", "cost_usd": 0.0123, "cost_source": "priced",
    "outcome": "success", "exit_code": 0, "ended_at": "2026-06-15T12:10:00.000000000Z",
    "duration_ms": 600000,
}


def write_pr_review_7(led: RunLedger, clock: Clock) -> None:
    led.append({"type": "opened", "harness": "pr-review", "run_id": 7, "kind": "oneshot",
                "trigger": "webhook", "source": "github", "event_id": "evt-1",
                "started_at": format_ns(T0)})
    clock.ns += 60 * NS
    led.append({"type": "updated", "harness": "pr-review", "run_id": 7,
                "tokens": {"input": 100, "output": 20, "cache_read": 0, "cache_write": 0},
                "model_calls": 1, "model": "claude-sonnet-4"}, sync=False)
    clock.ns += 60 * NS
    led.append({"type": "updated", "harness": "pr-review", "run_id": 7,
                "tokens": {"input": 500, "output": 120, "cache_read": 10, "cache_write": 1},
                "model_calls": 3}, sync=False)
    clock.ns = T0 + 600 * NS
    led.append({"type": "closed", "harness": "pr-review", "run_id": 7, "outcome": "success",
                "exit_code": 0, "ended_at": format_ns(T0 + 600 * NS), "duration_ms": 600000,
                "tokens": {"input": 900, "output": 300, "cache_read": 40, "cache_write": 2},
                "model_calls": 5, "cost_usd": 0.0123, "cost_source": "priced"})


def test_opened_updated_closed_fold_into_one_record(
    ledger_dir: Path, open_ledger: OpenLedger
) -> None:
    clock = Clock(T0)
    led = open_ledger(ledger_dir, clock=clock)
    write_pr_review_7(led, clock)
    assert [x["type"] for x in all_lines(ledger_dir)] == ["opened", "updated", "updated",
                                                          "closed"]
    recs, oldest = led.query(Query(names=("pr-review",), limit=20))
    assert (recs, oldest) == ([PR_REVIEW_7], 1)
    assert led.get("pr-review", 7) == PR_REVIEW_7
    assert led.open_records() == []
    led.close()

    led = open_ledger(ledger_dir, clock=clock)  # after a restart, from the files
    assert led.query(Query(names=("pr-review",), limit=20)) == ([PR_REVIEW_7], 1)
    offline, oldest, st = scan(str(ledger_dir), Query(names=("pr-review",), limit=20))
    assert [r.to_json(offline=True) for r in offline] == [PR_REVIEW_7]
    assert (oldest, st.skipped, st.torn) == (1, 0, 0)


def test_unknown_fields_and_versions_are_ignored(ledger_dir: Path, open_ledger: OpenLedger) -> None:
    led = open_ledger(ledger_dir, clock=Clock(T0))
    led.append({"type": "opened", "harness": "x", "run_id": 1, "kind": "oneshot",
                "trigger": "manual"})
    led.close()
    path = ledger_dir / "2026-06-15.jsonl"
    head = lines_of(path)[-1]
    future = {"v": 2, "seq": 2, "type": "closed", "at": format_ns(T0 + NS), "harness": "x",
              "run_id": 1, "outcome": "success", "exit_code": 0,
              "future": {"nested": {"deep": [1, {"x": None}]}}, "flag": True}
    with path.open("ab") as f:
        f.write(seal(future, head["hash"]))

    led = open_ledger(ledger_dir, clock=Clock(T0 + HOUR))
    want = {"harness": "x", "run_id": 1, "seq": 1, "kind": "oneshot", "trigger": "manual",
            "outcome": "success", "exit_code": 0}
    assert led.get("x", 1) == want
    assert led.query(Query(names=("x",), limit=5)) == ([want], 1)
    offline, _, st = scan(str(ledger_dir), Query(limit=5))
    assert [r.to_json() for r in offline] == [want]
    assert st.skipped == 0
    assert led.stats().skipped == 0
    assert led.append(decided("x", 2)) == 3  # the hand-written line's seq is taken
    res = verify_run_ledger(str(ledger_dir))
    assert (res.ok, res.lines) == (True, 3)


def test_a_closed_line_without_its_opened_line_is_a_partial_record(
    ledger_dir: Path, open_ledger: OpenLedger
) -> None:
    led = open_ledger(ledger_dir, clock=Clock(T0))
    led.append({"type": "closed", "harness": "p", "run_id": 3, "outcome": "failed",
                "exit_code": 2})
    want = {"harness": "p", "run_id": 3, "seq": 1, "outcome": "failed", "exit_code": 2}
    assert led.query(Query(limit=5)) == ([want], 1)
    assert led.open_records() == []  # nothing for crash reconciliation to close
    recs, _, _ = scan(str(ledger_dir), Query(limit=5))
    assert len(recs) == 1
    assert (recs[0].opened, recs[0].closed) == (False, True)
    assert recs[0].to_json(offline=True) == want


def test_a_torn_last_line_is_skipped_counted_and_the_next_append_starts_a_new_line(
    ledger_dir: Path, open_ledger: OpenLedger
) -> None:
    clock = Clock(T0)
    led = open_ledger(ledger_dir, clock=clock)
    led.append({"type": "opened", "harness": "n", "run_id": 1, "kind": "oneshot"})
    led.append({"type": "closed", "harness": "n", "run_id": 1, "outcome": "success"})
    led.append({"type": "opened", "harness": "n", "run_id": 2, "kind": "oneshot"})
    led.close()
    path = ledger_dir / "2026-06-15.jsonl"
    fragment = b'{"at":"2026-06-15T12:00:01.000000000Z","harness":"n","run_id":2,"seq":4,"ty'
    with path.open("ab") as f:
        f.write(fragment)
    before = path.read_bytes()

    led = open_ledger(ledger_dir, clock=clock)
    assert led.stats().torn == 1
    assert [r["run_id"] for r in led.open_records()] == [2]
    assert led.append({"type": "closed", "harness": "n", "run_id": 2,
                       "outcome": "failed", "exit_code": 1}) == 4
    after = path.read_bytes()
    assert after.startswith(before + b"\n")
    new = after[len(before) + 1:]
    assert new.count(b"\n") == 1 and json.loads(new)["seq"] == 4
    recs, _ = led.query(Query(names=("n",), limit=5))
    assert [(r["run_id"], r["outcome"], r["seq"]) for r in recs] == [(2, "failed", 3),
                                                                     (1, "success", 1)]
    res = verify_run_ledger(str(ledger_dir))
    assert (res.ok, res.lines, res.torn, res.torn_at) == (True, 4, 1, ["2026-06-15.jsonl:4"])
    led.close()

    led = open_ledger(ledger_dir, clock=clock)  # the fragment is now inside the file
    st = led.stats()
    assert (st.torn, st.skipped, st.next_seq) == (0, 1, 5)
    assert [r["outcome"] for r in led.query(Query(names=("n",), limit=5))[0]] == [
        "failed", "success"]


def test_unparseable_lines_are_skipped_and_counted(
    ledger_dir: Path, open_ledger: OpenLedger
) -> None:
    clock = Clock(T0)
    led = open_ledger(ledger_dir, clock=clock)
    led.append({"type": "opened", "harness": "n", "run_id": 1, "kind": "oneshot"})
    led.close()
    path = ledger_dir / "2026-06-15.jsonl"
    with path.open("ab") as f:
        f.write(b"not json at all\n")
        f.write(b'{"seq":"two","type":"closed"}\n')
        f.write(b"[1,2,3]\n")

    led = open_ledger(ledger_dir, clock=clock)
    assert (led.stats().skipped, led.stats().torn) == (3, 0)
    assert led.append({"type": "closed", "harness": "n", "run_id": 1,
                       "outcome": "success"}) == 2
    assert led.get("n", 1) == {"harness": "n", "run_id": 1, "seq": 1, "kind": "oneshot",
                               "outcome": "success"}
    recs, _, st = scan(str(ledger_dir), Query(limit=5))
    assert [r.to_json() for r in recs] == [led.get("n", 1)]
    assert (st.skipped, st.torn) == (3, 0)
    assert [x["seq"] for x in led.since(0)] == [1, 2]
    assert led.stats().skipped == 3  # counted once, at the boot: not again by each read
    # To verify, only the unparseable line may be a crash's fragment (DESIGN §4): a whole
    # JSON line without a ledger line's chain fields was put there, and breaks the chain.
    res = verify_run_ledger(str(ledger_dir))
    assert (res.ok, res.lines, res.torn, res.torn_at) == (False, 1, 1, ["2026-06-15.jsonl:2"])
    assert res.error == Break(None, "2026-06-15.jsonl", 3, "complete line is not a ledger "
                              "line (Expected `int`, got `str` - at `$.seq`)")
    with path.open("r+b") as f:
        kept = [x for x in f.read().split(b"\n") if not x.startswith((b"{\"seq\":\"", b"["))]
        f.seek(0)
        f.truncate()
        f.write(b"\n".join(kept))
    res = verify_run_ledger(str(ledger_dir))
    assert (res.ok, res.lines, res.torn) == (True, 2, 1)


def test_unparseable_lines_of_files_older_than_the_window_are_counted_too(
    ledger_dir: Path, open_ledger: OpenLedger
) -> None:
    """The boot reads only envelopes from files older than the window; the lines it
    skips there count in `skipped` as the window's do."""
    old = T0 - 20 * DAY
    led = open_ledger(ledger_dir, clock=Clock(old))
    led.append({"type": "opened", "harness": "n", "run_id": 1, "kind": "resident"})
    led.close()
    with day_file(ledger_dir, old).open("ab") as f:
        f.write(b"not json at all\n")
        f.write(b'{"seq":"two","type":"closed"}\n')
    with day_file(ledger_dir, T0).open("ab") as f:
        f.write(b"[1,2,3]\n")

    led = open_ledger(ledger_dir, clock=Clock(T0))
    assert (led.stats().skipped, led.stats().torn) == (3, 0)
    assert [r["run_id"] for r in led.open_records()] == [1]


def _u1_closed_by_a_non_utf8_line(ledger_dir: Path, open_ledger: OpenLedger) -> None:
    """Run u/1 opened through the writer, then a closed line for it whose envelope reads
    but whose `reason` is not UTF-8."""
    led = open_ledger(ledger_dir, clock=Clock(T0))
    led.append({"type": "opened", "harness": "u", "run_id": 1, "trigger": "manual"})
    led.close()
    path = ledger_dir / "2026-06-15.jsonl"
    with path.open("ab") as f:
        f.write(b'{"seq":2,"type":"closed","at":"2026-06-15T12:00:01Z","harness":"u",'
                b'"run_id":1,"outcome":"failed","reason":"\xff\xfe"}\n')


def test_a_non_utf8_line_of_a_returned_record_is_counted_once(
    ledger_dir: Path, open_ledger: OpenLedger
) -> None:
    """A line whose envelope reads but which holds invalid UTF-8 is skipped and counted by
    the first pass; the second pass, folding the record that line belongs to, must not
    count it again ("skipped 2 unparseable line(s)" for one bad line)."""
    _u1_closed_by_a_non_utf8_line(ledger_dir, open_ledger)
    recs, _, st = scan(str(ledger_dir), Query(limit=5))
    assert [r.to_json() for r in recs] == [
        {"harness": "u", "run_id": 1, "seq": 1, "trigger": "manual", "outcome": "running"}]
    assert (st.lines, st.skipped, st.torn) == (2, 1, 0)


def test_a_line_only_a_whole_decode_refuses_is_skipped_in_both_passes(
    ledger_dir: Path, open_ledger: OpenLedger
) -> None:
    """An integer too long to decode in a field the envelope skips unread: both passes
    skip that line, it is counted once, and nothing is folded in its place (not the line
    before it, of another record)."""
    led = open_ledger(ledger_dir, clock=Clock(T0))
    led.append({"type": "opened", "harness": "b", "run_id": 1, "trigger": "manual"})
    led.append({"type": "decided", "harness": "a", "run_id": 1, "outcome": "missed",
                "model": "m"})
    led.close()
    path = ledger_dir / "2026-06-15.jsonl"
    with path.open("ab") as f:
        f.write(b'{"seq":3,"type":"closed","at":"2026-06-15T12:00:02Z","harness":"b",'
                b'"run_id":1,"outcome":"success","cost_usd":' + b"9" * 4301 + b"}\n")
    recs, _, st = scan(str(ledger_dir), Query(limit=5))
    assert [r.to_json() for r in recs] == [
        {"harness": "a", "run_id": 1, "seq": 2, "outcome": "missed", "model": "m"},
        {"harness": "b", "run_id": 1, "seq": 1, "trigger": "manual", "outcome": "running"}]
    assert (st.lines, st.skipped, st.torn) == (3, 1, 0)


def _b2_closed_by(ledger_dir: Path, open_ledger: OpenLedger, bad: bytes) -> None:
    """a/1 closed "success" through the writer; a/2 opened, then a closed line for it
    whose envelope says "success" and which also holds `bad`."""
    led = open_ledger(ledger_dir, clock=Clock(T0))
    led.append({"type": "opened", "harness": "a", "run_id": 1, "trigger": "manual"})
    led.append({"type": "closed", "harness": "a", "run_id": 1, "outcome": "success"})
    led.append({"type": "opened", "harness": "a", "run_id": 2, "trigger": "manual"})
    led.close()
    with (ledger_dir / "2026-06-15.jsonl").open("ab") as f:
        f.write(b'{"seq":4,"type":"closed","at":"2026-06-15T12:00:03Z","harness":"a",'
                b'"run_id":2,"outcome":"success",' + bad + b"}\n")


_A1 = {"harness": "a", "run_id": 1, "seq": 1, "trigger": "manual", "outcome": "success"}


def _pages(ledger_dir: Path) -> list[tuple[list[dict[str, Any]], int | None, int]]:
    """The first page of one for each outcome, and of five unfiltered, with skip counts."""
    out = []
    for q in (Query(outcomes=frozenset({"success"}), limit=1),
              Query(outcomes=frozenset({"running"}), limit=1), Query(limit=5)):
        recs, oldest, st = scan(str(ledger_dir), q)
        assert (st.lines, st.torn) == (4, 0)
        out.append(([r.to_json() for r in recs], oldest, st.skipped))
    return out


def test_a_closing_line_with_an_integer_too_long_to_decode_closes_nothing(
    ledger_dir: Path, open_ledger: OpenLedger
) -> None:
    """The newest run's only closing line says "success" in its envelope, but an integer
    of 4,301 digits elsewhere makes the whole line unreadable, so every reader folds that
    run as running. The envelope pass must skip the line too: else an `--outcome success`
    page of one chose the damaged run and came out empty, and a `running` page missed it."""
    _b2_closed_by(ledger_dir, open_ledger, b'"cost_usd":' + b"9" * 4301)
    a2 = {"harness": "a", "run_id": 2, "seq": 3, "trigger": "manual", "outcome": "running"}
    assert _pages(ledger_dir) == [([_A1], 1, 1), ([a2], 3, 1), ([a2, _A1], 1, 1)]


def test_a_closing_line_with_a_number_out_of_range_still_closes_its_run(
    ledger_dir: Path, open_ledger: OpenLedger
) -> None:
    """The same line with 1e999 for its cost: the number is no value, the line reads, and
    both passes see the run closed "success" with no cost."""
    _b2_closed_by(ledger_dir, open_ledger, b'"cost_usd":1e999,"tokens":{"input":-2e400}')
    a2 = {"harness": "a", "run_id": 2, "seq": 3, "trigger": "manual", "outcome": "success",
          "tokens": {}}
    assert _pages(ledger_dir) == [([a2], 3, 0), ([], None, 0), ([a2, _A1], 1, 0)]


def test_a_non_utf8_closing_line_does_not_end_its_run_for_the_outcome_filter(
    ledger_dir: Path, open_ledger: OpenLedger
) -> None:
    """Invalid UTF-8 in a field the first pass does not read still makes the whole line
    unreadable there: the run it would close is "running" to the filter as in its record."""
    _u1_closed_by_a_non_utf8_line(ledger_dir, open_ledger)
    want = [{"harness": "u", "run_id": 1, "seq": 1, "trigger": "manual", "outcome": "running"}]
    recs, oldest, st = scan(str(ledger_dir), Query(outcomes=frozenset({"running"}), limit=1))
    assert ([r.to_json() for r in recs], oldest, st.lines) == (want, 1, 2)
    recs, oldest, st = scan(str(ledger_dir), Query(outcomes=frozenset({"failed"}), limit=1))
    assert (recs, oldest, st.skipped) == ([], None, 1)


@pytest.mark.parametrize("layout", ["C|AB", "C||AB", "|C|AB", "C|   |AB"])
def test_a_line_holding_two_objects_is_skipped_even_next_to_a_blank_one(
    ledger_dir: Path, layout: str
) -> None:
    """A line holding two whole objects is unparseable, and so is a blank one; a blank
    line in the same block must not let the two objects pass as two lines. Each bad line
    is skipped and counted, and the one good record is the first page of one."""
    ledger_dir.mkdir(parents=True)

    def line(seq: int, name: str) -> bytes:
        return ref_canonical({"seq": seq, "type": "decided", "at": format_ns(T0),
                              "harness": name, "run_id": 1, "outcome": "missed"})

    parts = {"C": line(1, "c"), "AB": line(2, "a") + line(3, "b")}
    rows = layout.split("|")
    (ledger_dir / "2026-06-15.jsonl").write_bytes(
        b"".join(parts.get(x, x.encode()) + b"\n" for x in rows))
    recs, oldest, st = scan(str(ledger_dir), Query(limit=1))
    assert ([(r.harness, r.seq) for r in recs], oldest) == ([("c", 1)], 1)
    assert (st.lines, st.skipped, st.torn) == (len(rows), len(rows) - 1, 0)


@pytest.mark.parametrize("blank", [b"", b"   "])
@pytest.mark.parametrize("age", [0, 20 * DAY], ids=["in-window", "older"])
def test_the_boot_skips_a_line_holding_two_objects_next_to_a_blank_one(
    ledger_dir: Path, open_ledger: OpenLedger, blank: bytes, age: int
) -> None:
    """A newline turned into a space joins the closed line of an open run to the next
    line; a blank line sits in the same block. Every reader skips the joined line, so the
    run is still open and no seq above 1 is on disk. The boot must say the same whether
    the file is in the window or older (where only envelopes are read): it used to take
    the two objects as two lines there, lose the open run (REQ-7 never closed it), take
    run ids from them, and continue at seq 4."""
    ledger_dir.mkdir(parents=True)
    at = format_ns(T0 - age)

    def line(seq: int, typ: str, name: str, **kw: Any) -> bytes:
        return ref_canonical({"seq": seq, "type": typ, "at": at, "harness": name,
                              "run_id": 1, **kw})

    (ledger_dir / f"{at[:10]}.jsonl").write_bytes(
        line(1, "opened", "w", kind="resident") + b"\n" + blank + b"\n"
        + line(2, "closed", "w", outcome="success") + b" "
        + line(3, "decided", "c", outcome="missed") + b"\n")
    want = {"harness": "w", "run_id": 1, "seq": 1, "kind": "resident", "outcome": "running"}
    found, _, _ = scan(str(ledger_dir), Query(limit=10))
    assert [r.to_json() for r in found] == [want]
    led = open_ledger(ledger_dir, clock=Clock(T0))
    assert led.open_records() == [want]
    assert (led.max_run_id("w"), led.max_run_id("c")) == (1, 0)
    # The blank line and the joined one, in the window as in older files (the window's
    # pass did not count a blank line).
    assert (led.stats().skipped, led.stats().torn) == (2, 0)
    assert led.append(decided("c", 1)) == 2


@pytest.mark.parametrize("age", [0, 20 * DAY], ids=["in-window", "older"])
def test_a_line_cut_before_a_nested_object_and_a_joined_one_fool_no_reader(
    ledger_dir: Path, open_ledger: OpenLedger, age: int
) -> None:
    """Two edits in one block: a newline put in front of a nested object cuts a line in
    two that both start with "{", and a newline turned into a space joins the closed line
    of an open run to the next one. A stream decoder reads the same three objects off
    those three lines, so a count of lines, or of lines starting with "{", cannot tell.
    Every reader skips all three lines: run w stays open, x and c have no record. The
    query with a filter used to answer [] (its first pass took w for closed) and the boot
    took w for closed, so REQ-7 would never close it."""
    ledger_dir.mkdir(parents=True)
    at = format_ns(T0 - age)

    def line(seq: int, typ: str, name: str, **kw: Any) -> bytes:
        return ref_canonical({"seq": seq, "type": typ, "at": at, "harness": name,
                              "run_id": 1, **kw})

    cut = line(2, "decided", "x", outcome="missed", tokens={"input": 5})
    k = cut.index(b'{"input"')
    (ledger_dir / f"{at[:10]}.jsonl").write_bytes(
        line(1, "opened", "w", kind="resident") + b"\n"
        + cut[:k] + b"\n" + cut[k:] + b"\n"
        + line(3, "closed", "w", outcome="success") + b" "
        + line(4, "decided", "c", outcome="missed") + b"\n"
        + line(5, "decided", "z", outcome="missed") + b"\n")
    want_w = {"harness": "w", "run_id": 1, "seq": 1, "kind": "resident", "outcome": "running"}
    want_z = {"harness": "z", "run_id": 1, "seq": 5, "outcome": "missed"}
    found, oldest, st = scan(str(ledger_dir), Query(outcomes=frozenset({"running"}), limit=1))
    assert ([r.to_json() for r in found], oldest) == ([want_w], 1)
    assert (st.lines, st.skipped) == (5, 3)
    found, _, _ = scan(str(ledger_dir), Query(limit=10))
    assert [r.to_json() for r in found] == [want_z, want_w]
    led = open_ledger(ledger_dir, clock=Clock(T0))
    assert led.open_records() == [want_w]
    assert [led.max_run_id(n) for n in ("w", "x", "c", "z")] == [1, 0, 0, 1]
    assert (led.stats().skipped, led.stats().torn) == (3, 0)
    assert led.append(decided("c", 1)) == 6


def test_lines_with_a_seq_or_run_id_below_1_or_no_harness_are_skipped_and_counted(
    ledger_dir: Path
) -> None:
    ledger_dir.mkdir(parents=True)
    base = {"type": "decided", "at": format_ns(T0), "harness": "z", "outcome": "missed"}
    rows = [{**base, "seq": 1, "run_id": 1}, {**base, "seq": 2, "run_id": 0},
            {**base, "seq": 0, "run_id": 3}, {**base, "seq": 4, "run_id": -4},
            {**base, "seq": 5, "run_id": 5, "harness": ""}]
    (ledger_dir / "2026-06-15.jsonl").write_bytes(b"".join(ref_canonical(x) + b"\n"
                                                           for x in rows))
    recs, oldest, st = scan(str(ledger_dir), Query(limit=1))
    assert ([(r.harness, r.run_id, r.seq) for r in recs], oldest) == ([("z", 1, 1)], 1)
    assert (st.lines, st.skipped) == (5, 4)


def test_a_line_nested_past_the_decoders_depth_is_skipped_not_a_crash(
    ledger_dir: Path, open_ledger: OpenLedger
) -> None:
    """2 KB of brackets is enough to make the decoder recurse too deep: boot, the file
    scan and verify skip such a line like any unreadable one instead of crashing."""
    clock = Clock(T0)
    led = open_ledger(ledger_dir, clock=clock)
    led.append({"type": "decided", "harness": "n", "run_id": 1, "outcome": "missed"})
    led.close()
    path = ledger_dir / "2026-06-15.jsonl"
    deep = b'{"v":1,"seq":2,"type":"decided","harness":"n","run_id":2,"x":'
    with path.open("ab") as f:
        f.write(deep + b"[" * 1000 + b"]" * 1000 + b"}\n")
        f.write(deep + b"[" * 1000)  # and as an unterminated tail
    led = open_ledger(ledger_dir, clock=clock)
    assert (led.stats().skipped, led.stats().torn) == (1, 1)
    recs, _, st = scan(str(ledger_dir), Query(limit=5))
    assert ([r.run_id for r in recs], st.skipped, st.torn) == ([1], 1, 1)
    res = verify_run_ledger(str(ledger_dir))
    assert (res.ok, res.lines, res.torn) == (True, 1, 2)
    assert led.append({"type": "decided", "harness": "n", "run_id": 3,
                       "outcome": "missed"}) == 2


def test_the_writer_does_not_append_through_a_symlink_at_todays_name(
        ledger_dir: Path, open_ledger: OpenLedger) -> None:
    """A symlink at today's day-file name is a stray to every reader, so the writer must
    not append to its target either: the line fails and stays queued (as with a directory
    there), and the file linked to is left as it was."""
    ledger_dir.mkdir(mode=0o700, parents=True)
    outside = ledger_dir.parent / "outside.jsonl"
    outside.write_bytes(b"")
    link = ledger_dir / f"{day(T0)}.jsonl"
    link.symlink_to(outside)
    led = open_ledger(ledger_dir, clock=Clock(T0))
    with pytest.raises(LedgerUnavailable, match="Too many levels of symbolic links"):
        led.append(decided("n", 1))
    assert (led.stats().append_errors, led.stats().queued) == (1, 1)
    link.unlink()  # mended: the line goes to a day file of its own
    led.close(timeout=60.0)
    assert outside.read_bytes() == b""
    assert [(x["seq"], x["run_id"]) for x in lines_of(link)] == [(1, 1)]


def test_a_day_file_replaced_by_a_symlink_while_open_is_not_written_through(
        ledger_dir: Path, open_ledger: OpenLedger) -> None:
    """Today's file moved away and a symlink to it put in its place: readers skip the
    link, so the writer must not go on appending to the moved file through its open
    handle either. It sees the name no longer names its file and reopens, which the
    link refuses; the line stays queued until the link goes."""
    led = open_ledger(ledger_dir, clock=Clock(T0))
    led._writer.name_check_every = 0.0  # the rename is looked for at every sync, not 1/s
    led.append(decided("n", 1))
    today = ledger_dir / f"{day(T0)}.jsonl"
    moved = ledger_dir.parent / "moved.jsonl"
    today.rename(moved)
    today.symlink_to(moved)
    with pytest.raises(LedgerUnavailable, match="Too many levels of symbolic links"):
        led.append(decided("n", 2))
    today.unlink()
    led.close(timeout=60.0)
    # The moved file keeps what was written into it (acknowledged or not), as a file
    # renamed away does; the line is acknowledged where readers look.
    assert (lines_of(moved)[0]["seq"], lines_of(moved)[0]["run_id"]) == (1, 1)
    assert [(x["seq"], x["run_id"]) for x in lines_of(today)] == [(2, 2)]


def test_a_damaged_chain_file_is_ledger_corrupt(ledger_dir: Path,
                                               open_ledger: OpenLedger) -> None:
    ledger_dir.mkdir(mode=0o700, parents=True)
    (ledger_dir / "CHAIN").write_bytes(b"garbage")
    with pytest.raises(LedgerCorrupt, match=r"CHAIN: unreadable chain anchor"):
        open_ledger(ledger_dir)


@pytest.mark.timeout(60)  # the old open() waited for a FIFO's writer for ever
def test_a_fifo_at_chain_is_ledger_corrupt_not_a_hang(ledger_dir: Path,
                                                      open_ledger: OpenLedger) -> None:
    ledger_dir.mkdir(mode=0o700, parents=True)
    os.mkfifo(ledger_dir / "CHAIN", 0o600)
    with pytest.raises(LedgerCorrupt, match=r"CHAIN: unreadable chain anchor: \[Errno 22\] "
                                            r"Not a regular file"):
        open_ledger(ledger_dir)


def one_closed_run(ledger_dir: Path, open_ledger: OpenLedger, clock: Clock) -> Path:
    """Run n/1 opened and closed (seq 1-2), the ledger closed; returns its day file."""
    led = open_ledger(ledger_dir, clock=clock)
    led.append({"type": "opened", "harness": "n", "run_id": 1, "kind": "oneshot"})
    led.append({"type": "closed", "harness": "n", "run_id": 1, "outcome": "success"})
    led.close()
    return ledger_dir / "2026-06-15.jsonl"


def test_a_whole_last_line_missing_only_its_newline_is_kept_and_folded(
    ledger_dir: Path, open_ledger: OpenLedger, caplog: pytest.LogCaptureFixture
) -> None:
    # A crash after write(2) put the line down but before its "\n": the line is whole and
    # chained, so it is adopted. Its run closed: it must not read open after the restart.
    clock = Clock(T0)
    path = one_closed_run(ledger_dir, open_ledger, clock)
    path.write_bytes(path.read_bytes()[:-1])

    led = open_ledger(ledger_dir, clock=clock)
    assert led.stats().torn == 0
    assert f"{path} ends in a complete line without its newline; kept" in caplog.text
    assert path.read_bytes().endswith(b"}\n")  # terminated before the writer starts
    assert led.open_records() == []
    assert led.get("n", 1) == {"harness": "n", "run_id": 1, "seq": 1, "kind": "oneshot",
                               "outcome": "success"}
    assert [x["seq"] for x in led.since(0)] == [1, 2]
    assert led.append(decided("n", 2)) == 3
    assert [x["seq"] for x in lines_of(path)] == [1, 2, 3]
    res = verify_run_ledger(str(ledger_dir))
    assert (res.ok, res.lines, res.torn) == (True, 3, 0)


@pytest.mark.parametrize("fault", ["seq-ahead", "prev", "hash", "hash-not-a-string"])
def test_a_last_line_without_its_newline_that_does_not_continue_the_chain_is_not_adopted(
    ledger_dir: Path, open_ledger: OpenLedger, fault: str
) -> None:
    """A whole line missing only its newline is adopted (not torn, terminated at once)
    only when it is the chain's next line: the seq after the head, linked to it, hashing
    to its own string hash. Any other is left as it lies; every reader still reads it as
    a line, so its seq is not issued again, the boot links to its hash where it has one,
    and it is no torn fragment, for the boot as for verify (the boot counted one)."""
    clock = Clock(T0)
    path = one_closed_run(ledger_dir, open_ledger, clock)
    head = lines_of(path)[-1]["hash"]
    seq = 4 if fault == "seq-ahead" else 3
    body = {"v": 1, "seq": seq, "type": "decided", "at": format_ns(T0), "harness": "x",
            "run_id": 1, "outcome": "missed"}
    frag = seal(body, ZERO if fault == "prev" else head)[:-1]
    if fault == "hash":
        frag = ref_canonical({**body, "prev": head, "hash": "1" * 64})
    elif fault == "hash-not-a-string":
        frag = ref_canonical({**body, "prev": head, "hash": 5})
    with path.open("ab") as f:
        f.write(frag)

    led = open_ledger(ledger_dir, clock=clock)
    assert (led.stats().torn, led.stats().skipped, led.stats().next_seq) == (0, 0, seq + 1)
    assert path.read_bytes().endswith(b"}\n" + frag)  # not terminated at the boot
    assert led.get("x", 1) is not None
    assert led.append(decided("n", 2)) == seq + 1
    new = json.loads(path.read_bytes().split(frag + b"\n")[1])
    assert new["prev"] == (ZERO if fault == "hash-not-a-string" else json.loads(frag)["hash"])
    res = verify_run_ledger(str(ledger_dir))
    assert (res.ok, res.torn) == (False, 0)  # a break at that line, not a torn fragment


# -- REQ-4: caps and validation ---------------------------------------------------------


def test_long_strings_are_cut_to_256_bytes_on_a_character_boundary(
    ledger_dir: Path, open_ledger: OpenLedger
) -> None:
    led = open_ledger(ledger_dir, clock=Clock(T0))
    todo = "€" * 1365 + "x"  # 4,096 bytes; byte 256 falls inside the 86th "€"
    source = "a" + "€" * 1365  # 4,096 bytes; 256 bytes end exactly after the 85th "€"
    assert len(todo.encode()) == len(source.encode()) == 4096
    assert led.stats().truncated == 0
    led.append({"type": "opened", "harness": "sb-drain", "run_id": 3, "trigger": "channel",
                "todo_id": todo, "source": source, "event_id": "e1"})
    line = all_lines(ledger_dir)[0]
    assert line["todo_id"] == "€" * 85
    assert len(line["todo_id"].encode()) == 255
    assert line["source"] == "a" + "€" * 85
    assert len(line["source"].encode()) == 256
    assert line["event_id"] == "e1"
    assert led.stats().truncated == 2
    assert led.get("sb-drain", 3)["todo_id"] == "€" * 85  # type: ignore[index]


def test_lists_and_error_maps_are_cut_to_16_entries(
    ledger_dir: Path, open_ledger: OpenLedger
) -> None:
    """Past 16 entries the first sessions and models are kept, and the 16 most frequent
    error classes; each list or map cut is one cut."""
    led = open_ledger(ledger_dir, clock=Clock(T0))
    sessions = [{"id": f"s{i:02d}", "adapter": "claude-code", "trace_id": f"{i:032x}"}
                for i in range(20)]
    models = [{"model": f"m{i:02d}", "provider": "anthropic", "output_tokens": i}
              for i in range(20)]
    errors = {f"class{i:02d}": i + 1 for i in range(20)}
    led.append({"type": "closed", "harness": "h", "run_id": 1, "outcome": "success",
                "sessions": sessions, "models": models, "errors": errors})
    line = all_lines(ledger_dir)[0]
    assert line["sessions"] == sessions[:16]
    assert line["models"] == models[:16]
    assert line["errors"] == {f"class{i:02d}": i + 1 for i in range(4, 20)}
    assert led.stats().truncated == 3


def test_a_string_in_an_entry_past_16_is_no_cut_of_its_own(
    ledger_dir: Path, open_ledger: OpenLedger
) -> None:
    """20 models with overlong names: the 4 dropped entries count once, as the list's
    cut, and only the 16 kept names count as cut strings (17, not 21)."""
    led = open_ledger(ledger_dir, clock=Clock(T0))
    models = [{"model": f"m{i:02d}" + "x" * 300, "provider": "p", "output_tokens": i}
              for i in range(20)]
    led.append({"type": "closed", "harness": "h", "run_id": 1, "outcome": "success",
                "models": models})
    assert [m["model"] for m in all_lines(ledger_dir)[0]["models"]] == [
        f"m{i:02d}" + "x" * 253 for i in range(16)]
    assert led.stats().truncated == 17


def test_error_classes_that_cap_to_the_same_text_add_up(
    ledger_dir: Path, open_ledger: OpenLedger
) -> None:
    """Two classes alike in their first 256 bytes become one class holding both counts;
    the later one's count used to replace the earlier one's."""
    led = open_ledger(ledger_dir, clock=Clock(T0))
    stem = "E" * 256
    led.append({"type": "closed", "harness": "h", "run_id": 1, "outcome": "failed",
                "errors": {stem + "A": 3, stem + "B": 4, "Other": 1}})
    assert all_lines(ledger_dir)[0]["errors"] == {stem: 7, "Other": 1}
    assert led.stats().truncated == 2


def test_a_line_within_every_cap_but_over_16_kib_is_cut_to_fit(
    ledger_dir: Path, open_ledger: OpenLedger
) -> None:
    """16 sessions and 16 models of 256-byte strings are each within REQ-4's caps, yet
    their line passes REQ-1's 16 KiB. A closed line refused for that would leave the run
    open for good, so the last sessions go, one cut each, until the line fits: the
    record closes. (The writer itself still refuses an oversized line: test_writer.)"""
    led = open_ledger(ledger_dir, clock=Clock(T0))
    led.append({"type": "opened", "harness": "h", "run_id": 1})
    sessions = [{"id": f"{i:x}" * 256, "adapter": "a" * 256, "trace_id": "t" * 256}
                for i in range(16)]
    models = [{"model": "m" * 256, "provider": f"{i:x}" * 256, "output_tokens": 1}
              for i in range(16)]
    seq = led.append({"type": "closed", "harness": "h", "run_id": 1, "outcome": "success",
                      "sessions": sessions, "models": models})
    raw = (ledger_dir / "2026-06-15.jsonl").read_bytes().splitlines()[1]
    assert (seq, len(raw) + 1 <= 16 * 1024) == (2, True)
    line = json.loads(raw)
    kept = len(line["sessions"])
    assert (line["sessions"], line["models"]) == (sessions[:kept], models)
    # The whole line would be about 22,080 bytes and each session takes 805: 8 go.
    assert (kept, led.stats().truncated) == (8, 8)
    assert led.get("h", 1)["outcome"] == "success"  # type: ignore[index]


def test_the_scan_skips_a_line_over_16_kib_with_its_newline_and_keeps_one_at_it(
    ledger_dir: Path
) -> None:
    """REQ-1's limit read back: a line of 16,385 bytes with its newline is skipped and
    counted, even when the rest of its record reads (the run stays open); one of exactly
    16,384 bytes is folded whole. Both passes agree on the byte."""
    ledger_dir.mkdir(parents=True)

    def padded(obj: dict[str, Any], size: int) -> bytes:
        obj = {**obj, "reason": ""}
        raw = ref_canonical(obj)
        obj["reason"] = "y" * (size - 1 - len(raw))
        raw = ref_canonical(obj) + b"\n"
        assert len(raw) == size
        return raw

    at = format_ns(T0)
    opened = {"seq": 1, "type": "opened", "at": at, "harness": "h", "run_id": 1}
    over = padded({"seq": 2, "type": "closed", "at": at, "harness": "h", "run_id": 1,
                   "outcome": "failed"}, 16 * 1024 + 1)
    at_limit = padded({"seq": 3, "type": "decided", "at": at, "harness": "h", "run_id": 2,
                       "outcome": "skipped"}, 16 * 1024)
    (ledger_dir / "2026-06-15.jsonl").write_bytes(ref_canonical(opened) + b"\n" + over
                                                  + at_limit)
    recs, oldest, st = scan(str(ledger_dir), Query(limit=5))
    assert [(r.run_id, r.seq, r.last_seq, r.opened, r.closed, r.fields.get("outcome"),
             r.fields.get("reason")) for r in recs] == [
        (2, 3, 3, True, True, "skipped", json.loads(at_limit)["reason"]),
        (1, 1, 1, True, False, None, None)]
    assert (oldest, st.lines, st.skipped, st.torn) == (1, 3, 1, 0)
    recs, _, _ = scan(str(ledger_dir), Query(outcomes=frozenset({"running"}), limit=1))
    assert [(r.run_id, r.seq) for r in recs] == [(1, 1)]  # the over-long line closes nothing


def _line(**kw: Any) -> dict[str, Any]:
    return {"type": "closed", "harness": "h", "run_id": 4, "outcome": "failed", **kw}


BAD_LINES: list[tuple[str, dict[str, Any], tuple[str, ...]]] = [
    ("run_id 0", _line(run_id=0), ("run_id", "0")),
    ("run_id -1", _line(run_id=-1), ("run_id", "-1")),
    ("run_id str", _line(run_id="3"), ("run_id", "'3'")),
    ("run_id bool", _line(run_id=True), ("run_id", "True")),
    ("run_id missing", {"type": "closed", "harness": "h"}, ("run_id", "None")),
    ("unknown type", _line(type="started"), ("type", "'started'")),
    ("no type", {"harness": "h", "run_id": 1}, ("type", "None")),
    ("empty harness", _line(harness=""), ("harness", "''")),
    ("harness int", _line(harness=5), ("harness", "5")),
    ("unknown field", _line(prompt="do the thing"), ("'prompt'", "not part of")),
    ("unknown nested", _line(tokens={"input": 1, "reasoning": 2}), ("tokens.reasoning",)),
    ("exit_code str", _line(exit_code="1"), ("'exit_code'", "'1'", "integer")),
    ("attempt float", _line(attempt=1.5), ("'attempt'", "1.5")),
    ("usage_complete int", _line(usage_complete=1), ("'usage_complete'", "boolean")),
    ("tokens str", _line(tokens={"input": "5"}), ("tokens.input", "'5'")),
    ("sessions not list", _line(sessions={"id": "x"}), ("'sessions'", "list")),
    ("session id int", _line(sessions=[{"id": 1}]), ("sessions.id", "1")),
    ("errors text", _line(errors={"rate_limit": "too many"}), ("'errors'",)),
    ("unknown outcome", _line(outcome="timeout"), ("'outcome'", "'timeout'", "timed_out")),
    ("unknown kind", _line(kind="daemon"), ("'kind'", "'daemon'")),
    ("bad at", _line(at="yesterday"), ("at", "'yesterday'")),
    ("bad at month", _line(at="2026-13-01T00:00:00Z"), ("at", "2026-13-01")),
    ("at not a string", _line(at=1718452800), ("at", "1718452800")),
    ("bad started_at", _line(started_at="2026-06-15 noon"), ("'started_at'", "noon")),
    ("cost NaN", _line(cost_usd=float("nan")), ("'cost_usd'", "nan")),
    ("cost infinite", _line(cost_usd=float("-inf")), ("'cost_usd'", "-inf")),
    ("cost bool", _line(cost_usd=True), ("'cost_usd'", "True")),
    ("lone surrogate", _line(todo_id="t\ud800"), ("'todo_id'", "UTF-8")),
    ("lone surrogate key", _line(errors={"rate\udfff": 1}), ("'errors'",)),
    ("lone surrogate harness", _line(harness="h\ud800"), ("harness",)),
    ("not an object", ["closed"], ("object", "list")),  # type: ignore[list-item]
]


@pytest.mark.parametrize(("line", "words"), [(b[1], b[2]) for b in BAD_LINES],
                         ids=[b[0] for b in BAD_LINES])
def test_invalid_lines_are_rejected_naming_the_field_and_nothing_is_written(
    ledger_dir: Path, open_ledger: OpenLedger, line: dict[str, Any], words: tuple[str, ...]
) -> None:
    led = open_ledger(ledger_dir, clock=Clock(T0))
    led.append({"type": "opened", "harness": "h", "run_id": 4})
    path = ledger_dir / "2026-06-15.jsonl"
    before = path.read_bytes()
    with pytest.raises(LineRejected) as exc:
        led.append(line)
    assert isinstance(exc.value, ValueError)
    for w in words:
        assert w in str(exc.value), (w, str(exc.value))
    assert path.read_bytes() == before
    assert sorted(os.listdir(ledger_dir)) == ["2026-06-15.jsonl"]
    assert led.stats().next_seq == 2  # the seq was not consumed
    assert led.append({"type": "closed", "harness": "h", "run_id": 4,
                       "outcome": "success"}) == 2


# -- REQ-17: privacy --------------------------------------------------------------------

# Assembled from parts so that secret scanners do not mistake the fixtures for leaks.
ANTHROPIC_KEY = "sk-" + "ant-" + "api03-" + "Zq9xW2vB7nM4kL1pR8tY5uI3oE6aS0dF" + "Gh7jK2"
URL_PASSWORD = "Hunter2" + "-s3cret-Pa55"
BEARER = "eG9yZ" + "3VpZGUtdG9rZW4tMTIzNDU2Nzg5MA"


def test_secrets_never_reach_a_file_byte(ledger_dir: Path, open_ledger: OpenLedger) -> None:
    assert len(ANTHROPIC_KEY) >= len("sk-ant-") + 40
    led = open_ledger(ledger_dir, clock=Clock(T0))
    led.append({"type": "opened", "harness": "sb-drain", "run_id": 1, "trigger": "channel",
                "todo_id": ANTHROPIC_KEY,
                "trace_url": f"https://alice:{URL_PASSWORD}@trace.example.com/t/4bf9"})
    led.append({"type": "closed", "harness": "sb-drain", "run_id": 1, "outcome": "failed",
                "reason": f"upstream 401 for Authorization: Bearer {BEARER}"})
    st = led.stats()
    assert st.redactions == 3
    led.close()
    blobs = b"".join(p.read_bytes() for p in sorted(ledger_dir.iterdir()) if p.is_file())
    for secret in (ANTHROPIC_KEY, URL_PASSWORD, BEARER, "api03-Zq9x", "s3cret-Pa55"):
        assert secret.encode() not in blobs
    first, second = all_lines(ledger_dir)
    assert first["todo_id"] == "[REDACTED]"
    assert first["trace_url"] == "https://alice:[REDACTED]@trace.example.com/t/4bf9"
    assert second["reason"] == "upstream 401 for Authorization: Bearer [REDACTED]"
    res = verify_run_ledger(str(ledger_dir))
    assert (res.ok, res.lines) == (True, 2)


# -- REQ-10: the run feed and since() --------------------------------------------------


def test_a_stuck_subscriber_misses_records_and_others_get_every_one(
    ledger_dir: Path, open_ledger: OpenLedger
) -> None:
    led = open_ledger(ledger_dir, clock=Clock(T0))
    stuck = led.subscribe("stuck", 1)
    reader = led.subscribe("reader", 4096)
    for i in range(1, 1001):
        led.append({"type": "updated", "harness": "r", "run_id": i, "model_calls": i},
                   sync=False)
        assert led.append({"type": "closed", "harness": "r", "run_id": i,
                           "outcome": "success"}) == 2 * i
    # The stuck buffer holds the first close; each of the other 999 was missed.
    assert stuck.missed == 999
    assert led.stats().feed_missed == {"stuck": 999, "reader": 0}
    got = reader.drain()
    assert [c.seq for c in got] == list(range(2, 2001, 2))  # no updated line published
    assert {c.type for c in got} == {"closed"}
    for i, c in enumerate(got, start=1):
        assert c.record == {"harness": "r", "run_id": i, "seq": 2 * i - 1, "model_calls": i,
                            "outcome": "success"}
    held = stuck.drain()
    assert [(c.seq, c.record["run_id"]) for c in held] == [(2, 1)]
    assert reader.get(timeout=0.01) is None


def test_the_feed_publishes_opened_and_decided_records_with_their_seq(
    ledger_dir: Path, open_ledger: OpenLedger
) -> None:
    led = open_ledger(ledger_dir, clock=Clock(T0))
    sub = led.subscribe("jobs", 16)
    led.append({"type": "opened", "harness": "a", "run_id": 1, "kind": "oneshot"})
    led.append(decided("a", 2))
    first = sub.get(timeout=5.0)
    second = sub.get(timeout=5.0)
    assert first is not None and second is not None
    assert (first.seq, first.type, first.record) == (
        1, "opened", {"harness": "a", "run_id": 1, "seq": 1, "kind": "oneshot",
                      "outcome": "running"})
    assert (second.seq, second.type, second.record["outcome"]) == (2, "decided", "skipped")
    tiny = led.subscribe("tiny", 1)
    led.append(decided("a", 3))
    led.append(decided("a", 4))
    assert led.stats().feed_missed == {"jobs": 0, "tiny": 1}
    sub.close()
    tiny.close()  # a retired subscriber's misses stay counted; it receives nothing more
    led.append(decided("a", 5))
    assert [c.seq for c in sub.drain()] == [3, 4]
    assert [c.seq for c in tiny.drain()] == [3]
    assert led.stats().feed_missed == {"jobs": 0, "tiny": 1}


def test_the_feed_leaves_out_updated_lines_and_does_not_probe_logs(
    tmp_path: Path, ledger_dir: Path, open_ledger: OpenLedger
) -> None:
    """Subscribers get a record per opened, closed or decided line, as committed: not
    per usage update, and without `log_pruned`, which only an answer's read computes."""
    gone = str(tmp_path / "jobs" / "b" / "1.log")  # no such file
    led = open_ledger(ledger_dir, clock=Clock(T0))
    sub = led.subscribe("jobs", 16)
    led.append({"type": "opened", "harness": "b", "run_id": 1, "log": gone})
    led.append({"type": "updated", "harness": "b", "run_id": 1, "model": "m"})
    led.append({"type": "closed", "harness": "b", "run_id": 1, "outcome": "success"})
    first, second = sub.get(timeout=5.0), sub.get(timeout=5.0)
    assert first is not None and second is not None
    assert [(c.seq, c.type) for c in (first, second)] == [(1, "opened"), (3, "closed")]
    assert second.record == {"harness": "b", "run_id": 1, "seq": 1, "log": gone,
                             "model": "m", "outcome": "success"}
    assert sub.drain() == []
    assert led.get("b", 1) == {**second.record, "log_pruned": True}


def test_since_after_a_restart_returns_every_line_in_order(
    ledger_dir: Path, open_ledger: OpenLedger
) -> None:
    led = open_ledger(ledger_dir, clock=Clock(T0))
    write_many(led, 800)
    led.close()
    led = open_ledger(ledger_dir, clock=Clock(T0 + HOUR))
    # Nothing committed since the restart: the files alone answer, up to their end.
    assert list(led.since(800)) == []
    assert [x["seq"] for x in led.since(797)] == [798, 799, 800]
    write_many(led, 100, first_run=801)
    on_disk = {x["seq"]: x for x in all_lines(ledger_dir)}
    got = list(led.since(500))
    assert [x["seq"] for x in got] == list(range(501, 901))
    assert got == [on_disk[s] for s in range(501, 901)]  # whole lines, as on disk
    assert [x["seq"] for x in led.since(890)] == list(range(891, 901))
    assert list(led.since(900)) == []
    assert [x["seq"] for x in led.since(0)] == list(range(1, 901))


def test_since_after_a_restart_holds_back_a_written_line_not_yet_synced(
    ledger_dir: Path, open_ledger: OpenLedger
) -> None:
    """Before the first commit after a restart, `since` reads the files alone. A buffered
    line is in a file before it is synced, yet not committed: `since` must not show it
    (nor `get`) until it is."""
    led = open_ledger(ledger_dir, clock=Clock(T0))
    led.append(decided("nightly", 1))
    led.close()
    led = open_ledger(ledger_dir, clock=Clock(T0))
    assert led.append(decided("nightly", 2, reason="buffered"), sync=False) == 2
    wait_for_bytes(ledger_dir, b'"reason":"buffered"')
    assert [x["seq"] for x in led.since(0)] == [1]
    assert led.get("nightly", 2) is None
    led.flush()
    assert led.append(decided("nightly", 3)) == 3
    assert [x["seq"] for x in led.since(0)] == [1, 2, 3]


def test_since_after_a_restart_never_skips_a_seq_committed_while_it_reads(
    ledger_dir: Path, open_ledger: OpenLedger
) -> None:
    """`since` lists the day files once and reads them lazily. While it reads, seq N is
    committed to a new day file (not listed) and N+1, its clock read before midnight, to
    the listed one: yielding N+1 without N would make a reader resuming after N+1 miss N
    for good. It yields neither; the next call yields both, in order."""
    midnight = (T0 // DAY + 1) * DAY
    clock = Clock(T0)
    led = open_ledger(ledger_dir, clock=clock)
    write_many(led, 12_000)  # past one read chunk (4 MiB): the file is read in two
    led.close()
    led = open_ledger(ledger_dir, clock=clock)
    it = led.since(11_990)
    assert next(it)["seq"] == 11_991  # the listing is taken: one file
    clock.ns = midnight + NS
    assert led.append(decided("b", 1)) == 12_001  # into tomorrow's file, not listed
    clock.ns = midnight - NS
    assert led.append(decided("c", 1)) == 12_002  # into the listed file
    assert [x["seq"] for x in it] == list(range(11_992, 12_001))
    assert [x["seq"] for x in led.since(12_000)] == [12_001, 12_002]
    led.close()


def test_since_reads_the_files_where_the_ring_does_not_reach(
    ledger_dir: Path, open_ledger: OpenLedger, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runledger_mod, "RING", 50)
    clock = Clock(T0 - 2 * DAY)
    led = open_ledger(ledger_dir, clock=clock)
    for d in range(3):  # 100 lines on each of three days: the merge crosses files
        write_many(led, 100, first_run=100 * d + 1)
        clock.ns += DAY
    assert len(list(ledger_dir.glob("*.jsonl"))) == 3
    ring = list(led._ring)
    assert [x["seq"] for x in ring] == list(range(251, 301))
    on_disk = {x["seq"]: x for x in all_lines(ledger_dir)}
    got = list(led.since(10))
    assert [x["seq"] for x in got] == list(range(11, 301))
    assert got == [on_disk[s] for s in range(11, 301)]
    assert [x["seq"] for x in led.since(260)] == list(range(261, 301))
    assert [x["seq"] for x in led.since(250)] == list(range(251, 301))
    assert [x["seq"] for x in led.since(249)] == [250, *range(251, 301)]


def test_since_from_before_the_pruned_lines_returns_what_is_left(
    ledger_dir: Path, open_ledger: OpenLedger
) -> None:
    """Seqs 1-2 went with their file; seq 3, in memory and on disk, is what is left after
    any seq before it."""
    clock = Clock(T0 - 100 * DAY)
    led = open_ledger(ledger_dir, clock=clock)
    write_many(led, 2)
    led.close()
    clock.ns = T0
    led = open_ledger(ledger_dir, clock=clock)
    assert led.append(decided("nightly", 3)) == 3
    assert led.prune().deleted == [format_ns(T0 - 100 * DAY)[:10]]
    for seq in (0, 1, 2):
        assert [x["seq"] for x in led.since(seq)] == [3]
    assert list(led.since(3)) == []


def test_a_queued_run_opened_below_a_skipped_run_id_is_published_and_held_whole(
    ledger_dir: Path, open_ledger: OpenLedger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """on_overlap = "queue": nightly/2 is held while run 1 runs (its id allocated), a third
    firing is skipped as run 3, and run 2 opens after run 3's line. Memory took run 2's
    lines, their run id below one already seen, for late lines of a record it had let go:
    the feed published its close as the closed line alone, `get` found no record (the
    runner then built its record from that line), and the floors rose past it, so every
    later query read the files instead of memory (REQ-15)."""
    clock = Clock(T0)
    led = open_ledger(ledger_dir, clock=clock)
    sub = led.subscribe("watcher", 16)
    start1 = format_ns(clock.ns)
    led.append({"type": "opened", "harness": "nightly", "run_id": 1, "kind": "oneshot",
                "trigger": "manual", "started_at": start1})
    led.append(decided("nightly", 3, trigger="manual"))
    led.append({"type": "closed", "harness": "nightly", "run_id": 1, "outcome": "success"})
    clock.ns += 60 * NS
    started = format_ns(clock.ns)
    led.append({"type": "opened", "harness": "nightly", "run_id": 2, "kind": "oneshot",
                "trigger": "manual", "started_at": started})
    led.append({"type": "closed", "harness": "nightly", "run_id": 2, "outcome": "failed",
                "exit_code": 1})
    run2 = {"harness": "nightly", "run_id": 2, "seq": 4, "kind": "oneshot",
            "trigger": "manual", "started_at": started}
    got = [(c.seq, c.type, c.record) for c in sub.drain() if c.record["run_id"] == 2]
    assert got == [(4, "opened", {**run2, "outcome": "running"}),
                   (5, "closed", {**run2, "outcome": "failed", "exit_code": 1})]
    assert led.get("nightly", 2) == {**run2, "outcome": "failed", "exit_code": 1}

    calls = count_scans(monkeypatch)
    recs, oldest = led.query(Query(names=("nightly",), limit=20))
    assert ([(r["run_id"], r["seq"], r["outcome"]) for r in recs], oldest) == (
        [(2, 4, "failed"), (3, 2, "skipped"), (1, 1, "success")], 1)
    recs, oldest = led.query(Query(since_ns=T0 - HOUR, limit=50))
    assert ([r["run_id"] for r in recs], oldest) == ([2, 3, 1], 1)
    assert calls == []  # answered from memory


# -- the boot index: open records, runs across the window's edge, backfill -------------


def test_an_open_record_older_than_the_window_is_found_at_boot(
    ledger_dir: Path, open_ledger: OpenLedger
) -> None:
    clock = Clock(T0 - 14 * DAY)
    led = open_ledger(ledger_dir, clock=clock)
    led.append({"type": "opened", "harness": "worker", "run_id": 3, "kind": "resident",
                "trigger": "autostart", "started_at": format_ns(clock.ns)})
    for i in range(1, 31):  # closed runs around it, 14 to 11 days ago
        clock.ns += 2 * HOUR
        led.append({"type": "opened", "harness": "cron", "run_id": i, "kind": "oneshot"},
                   sync=False)
        led.append({"type": "closed", "harness": "cron", "run_id": i, "outcome": "success"},
                   sync=i != 30)
    led.close()

    led = open_ledger(ledger_dir, clock=Clock(T0))
    want = {"harness": "worker", "run_id": 3, "seq": 1, "kind": "resident",
            "trigger": "autostart", "started_at": format_ns(T0 - 14 * DAY),
            "outcome": "running"}
    assert led.open_records() == [want]
    assert led.get("worker", 3) == want
    # Of the old closed records only cron's newest 20 (its tail) are loaded.
    assert led.stats().records_in_memory == 1 + 20
    assert [i for i in range(1, 31) if led.get("cron", i) is not None] == list(range(11, 31))
    assert led.max_run_id("worker") == 3
    assert led.max_run_id("cron") == 30  # ids are never reused, even those only on disk


@pytest.mark.parametrize(("now", "loaded"), [(T0 - 12 * HOUR + 1, [2]),
                                             (T0 - 12 * HOUR - 1, [1, 2])],
                         ids=["just-after-midnight", "just-before-midnight"])
def test_the_default_window_is_the_last_seven_utc_days_to_the_nanosecond(
    ledger_dir: Path, open_ledger: OpenLedger, now: int, loaded: list[int]
) -> None:
    """The boot loads the files of the UTC days from `now` minus 7 days (REQ-15's
    window) on: a nanosecond after midnight on the 15th the 8th's file is the oldest one
    loaded, a nanosecond before it the 7th's is too."""
    clock = Clock(T0 - 8 * DAY)  # the 7th, at noon
    led = open_ledger(ledger_dir, clock=clock)
    led.append(decided("weekly", 1))
    clock.ns += DAY  # the 8th
    led.append(decided("weekly", 2))
    led.close()
    assert sorted(p.name for p in ledger_dir.glob("*.jsonl")) == [
        "2026-06-07.jsonl", "2026-06-08.jsonl"]

    # No tail, which would load the older records too (its own tests are below).
    led = open_ledger(ledger_dir, clock=Clock(now), tail=0)
    assert [i for i in (1, 2) if led.get("weekly", i) is not None] == loaded
    assert led.stats().records_in_memory == len(loaded)
    assert led.max_run_id("weekly") == 2


def test_a_line_moved_below_later_ones_in_a_file_older_than_the_window(
    ledger_dir: Path, open_ledger: OpenLedger
) -> None:
    """Seq 2 went into an old day's file (a clock stepped back), and a copy of seq 1 was
    put below it there: no file ends in seq 2, and the file holding it is read for
    envelopes only. The boot still continues at seq 3, linked to seq 2."""
    clock = Clock(T0)
    led = open_ledger(ledger_dir, clock=clock)
    led.append(decided("a", 1))
    clock.ns = T0 - 20 * DAY
    led.append(decided("a", 2))
    led.close()
    new, old = day_file(ledger_dir, T0), day_file(ledger_dir, T0 - 20 * DAY)
    (one,) = lines_of(new)
    (two,) = lines_of(old)
    with old.open("ab") as f:
        f.write(ref_canonical(one) + b"\n")

    led = open_ledger(ledger_dir, clock=Clock(T0 + HOUR))
    assert led.stats().next_seq == 3
    assert led.append(decided("a", 3)) == 3
    assert [(x["seq"], x["prev"]) for x in lines_of(new)] == [
        (1, ZERO), (3, two["hash"])]


def test_a_run_across_the_window_edge_folds_whole(
    ledger_dir: Path, open_ledger: OpenLedger, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Opened at 23:00 two days ago, closed at 01:00 the next day; the window (1 day)
    # starts between the two lines. Boot used to raise RuntimeError here, and memory
    # held a partial record.
    clock = Clock(T0 - 2 * DAY + 11 * HOUR)
    led = open_ledger(ledger_dir, clock=clock)
    led.append({"type": "opened", "harness": "s", "run_id": 1, "kind": "oneshot",
                "trigger": "schedule", "started_at": format_ns(clock.ns)})
    clock.ns += 2 * HOUR
    led.append({"type": "closed", "harness": "s", "run_id": 1, "outcome": "success",
                "exit_code": 0})
    led.close()
    assert len(list(ledger_dir.glob("*.jsonl"))) == 2

    led = open_ledger(ledger_dir, clock=Clock(T0), window_ns=DAY, tail=2)
    want = {"harness": "s", "run_id": 1, "seq": 1, "kind": "oneshot", "trigger": "schedule",
            "started_at": "2026-06-13T23:00:00.000000000Z", "outcome": "success",
            "exit_code": 0}
    assert led.get("s", 1) == want
    assert led.open_records() == []
    assert led.query(Query(names=("s",), limit=1)) == ([want], 1)


def test_the_boot_leaves_the_garbage_collector_as_it_found_it(
    ledger_dir: Path, open_ledger: OpenLedger
) -> None:
    """The boot pauses the collector while it folds the files (old ones too); it must
    hand it back on, and must not turn on one its caller turned off."""
    led = open_ledger(ledger_dir, clock=Clock(T0 - 20 * DAY))
    led.append({"type": "opened", "harness": "g", "run_id": 1, "kind": "resident"})
    led.close()

    def boot() -> None:
        led = open_ledger(ledger_dir, clock=Clock(T0))
        assert [r["run_id"] for r in led.open_records()] == [1]
        led.close()

    assert gc_left_by(boot) == [True, False]


def test_the_boot_loads_a_weekly_harness_tail_whole(
    ledger_dir: Path, open_ledger: OpenLedger, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Clock(0)
    led = open_ledger(ledger_dir, clock=clock)
    want = []
    for i in range(1, 6):  # weekly runs that cross midnight, 30 to 2 weeks ago
        start = T0 - (30 - 4 * i) * DAY + 11 * HOUR  # 23:00
        clock.ns = start
        led.append({"type": "opened", "harness": "weekly", "run_id": i, "kind": "oneshot",
                    "trigger": "schedule", "started_at": format_ns(start)})
        clock.ns = start + 2 * HOUR
        led.append({"type": "closed", "harness": "weekly", "run_id": i, "outcome": "success"})
        want.append({"harness": "weekly", "run_id": i, "seq": 2 * i - 1, "kind": "oneshot",
                     "trigger": "schedule", "started_at": format_ns(start),
                     "outcome": "success"})
    led.close()
    assert len(list(ledger_dir.glob("*.jsonl"))) == 10
    newest = sorted(ledger_dir.glob("*.jsonl"))[-1]
    with newest.open("ab") as f:
        f.write(b"not json at all\n")  # the boot reads past a line it cannot use

    # The window holds none of them: the boot loads the newest two (the tail), each
    # whole, from the files older than the window.
    led = open_ledger(ledger_dir, clock=Clock(T0), tail=2)
    assert led.stats().records_in_memory == 2
    assert led.stats().skipped == 1
    calls = count_scans(monkeypatch)
    recs, oldest = led.query(Query(names=("weekly",), limit=2))
    assert calls == []  # answered from memory
    assert (recs, oldest) == ([want[4], want[3]], 7)
    recs, oldest = led.query(Query(names=("weekly",), limit=5))
    assert len(calls) == 1  # beyond what the boot loaded: the files answer
    assert (recs, oldest) == (want[::-1], 1)


def test_a_harness_memory_holds_whole_is_answered_from_memory(
    ledger_dir: Path, open_ledger: OpenLedger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """REQ-15: memory holds the last 7 days and the newest 20 runs of each harness. A
    harness with fewer runs, all recent (`fresh`), or none at all (`nosuch`), is held
    whole: the older files, which the boot reads only the envelopes of, hold none of it.
    So it is answered from memory, not by reading every day file: after the boot, once
    runs are added, after a day's trim, after a prune deleted the oldest files, and at
    the next boot. What memory lacks of a harness the older files hold more of (`idle`,
    `busy`) is still read from the files. Every answer is the files' own."""
    clock = Clock(0)
    led = open_ledger(ledger_dir, clock=clock)
    ids: dict[str, int] = {}
    for ago in range(40, 0, -1):
        for h, n in (("busy", 30), ("idle", 3 * (ago > 20)), ("fresh", 2 * (ago < 5))):
            for k in range(n):
                clock.ns = T0 - ago * DAY + k * 60 * NS
                ids[h] = ids.get(h, 0) + 1
                led.append(decided(h, ids[h]), sync=False)
    led.close()
    assert len(list(ledger_dir.glob("*.jsonl"))) == 40
    with sorted(ledger_dir.glob("*.jsonl"))[0].open("ab") as f:
        f.write(b"not json at all\n")  # a line the boot, and every reader, skips

    def ask(*names: str, limit: int = 20) -> tuple[list[tuple[str, int]], int | None]:
        recs, oldest = led.query(Query(names=names, limit=limit))
        files, in_files, _ = scan(str(ledger_dir), Query(names=names, limit=limit))
        assert [r.to_json() for r in files] == recs  # the same records, field for field
        assert in_files == oldest
        return [(r["harness"], r["run_id"]) for r in recs], oldest

    def fresh(*run_ids: int) -> list[tuple[str, int]]:
        return [("fresh", i) for i in run_ids]

    def idle(top: int, bottom: int) -> list[tuple[str, int]]:
        return [("idle", i) for i in range(top, bottom - 1, -1)]

    clock = Clock(T0)
    led = open_ledger(ledger_dir, clock=clock, retention_ns=35 * DAY)
    scans = count_scans(monkeypatch)
    first = led.get("fresh", 1)
    assert first is not None
    assert ask("fresh") == (fresh(8, 7, 6, 5, 4, 3, 2, 1), first["seq"])
    assert ask("nosuch") == ([], None)
    assert ask("nosuch", "fresh") == ask("fresh")
    # Both held from their own floors up: fresh's all, idle's newest 20.
    both = ask("fresh", "idle", limit=28)
    assert both[0] == fresh(8, 7, 6, 5, 4, 3, 2, 1) + idle(60, 41)
    assert ask("busy")[0] == [("busy", i) for i in range(1200, 1180, -1)]
    assert scans == []  # all from memory
    assert ask("fresh", "idle", limit=29)[0] == both[0] + [("idle", 40)]
    assert ask("idle", limit=21)[0] == idle(60, 40)
    assert ask("busy", limit=250)[0] == [("busy", i) for i in range(1200, 950, -1)]
    assert len(scans) == 3  # beyond what memory holds: the files answered

    clock.ns = T0 + 60 * NS
    led.append(decided("fresh", 9))
    led.append(decided("newer", 1))
    del scans[:]
    assert ask("fresh")[0] == fresh(9, 8, 7, 6, 5, 4, 3, 2, 1)
    assert ask("newer")[0] == [("newer", 1)]
    clock.ns = T0 + 5 * DAY  # a new day: memory trims what left the window
    led.append(decided("fresh", 10))
    # busy's last two days, idle's newest 20, fresh's 10, newer's one
    assert led.stats().records_in_memory == 60 + 20 + 10 + 1
    assert ask("fresh")[0] == fresh(10, 9, 8, 7, 6, 5, 4, 3, 2, 1)
    assert ask("nosuch") == ([], None)
    assert scans == []

    assert len(led.prune().deleted) == 10  # the 40 to 31 days old files went
    assert ask("fresh")[0] == fresh(10, 9, 8, 7, 6, 5, 4, 3, 2, 1)
    assert ask("idle")[0] == idle(60, 41)
    assert ask("nosuch") == ([], None)
    assert scans == []
    assert ask("idle", limit=40)[0] == idle(60, 31)  # 1-30 went with the files
    assert len(scans) == 1
    led.close()

    led = open_ledger(ledger_dir, clock=Clock(T0 + 5 * DAY))
    del scans[:]
    assert ask("fresh")[0] == fresh(10, 9, 8, 7, 6, 5, 4, 3, 2, 1)
    assert ask("newer")[0] == [("newer", 1)]
    assert ask("nosuch") == ([], None)
    assert scans == []


def test_a_late_line_of_a_record_the_boot_passed_over_keeps_the_files_answering(
    ledger_dir: Path, open_ledger: OpenLedger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The boot keeps, of an old harness, only its newest run ids (the tail). A closing
    line of run 1 whose opened line is gone (a prune took it) is run 1's first line
    now: seq 4, above the runs kept. Memory must not answer "the newest two" without it.
    """
    clock = Clock(T0 - 20 * DAY)
    led = open_ledger(ledger_dir, clock=clock)
    for i in (2, 3, 4):
        led.append(decided("h", i))
    led.append({"type": "closed", "harness": "h", "run_id": 1, "outcome": "failed",
                "exit_code": 3})
    led.close()

    led = open_ledger(ledger_dir, clock=Clock(T0), tail=2)
    assert [i for i in (1, 2, 3, 4) if led.get("h", i) is not None] == [3, 4]
    calls = count_scans(monkeypatch)
    recs, oldest = led.query(Query(names=("h",), limit=2))
    assert ([(r["run_id"], r["seq"]) for r in recs], oldest) == ([(1, 4), (4, 3)], 3)
    assert len(calls) == 1


def test_since_from_the_windows_first_day_is_answered_from_memory_after_boot(
    ledger_dir: Path, open_ledger: OpenLedger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Files older than the window are not loaded, so memory holds every record from the
    first day the boot loaded on: a `since` from that day's midnight is answered from
    memory, one a nanosecond earlier from the files. Both answers are the files'."""
    clock = Clock(T0 - 20 * DAY)
    led = open_ledger(ledger_dir, clock=clock)
    for run_id, ago in ((1, 20), (2, 2), (3, 0)):
        clock.ns = T0 - ago * DAY
        led.append(decided("a", run_id))
    led.close()

    led = open_ledger(ledger_dir, clock=Clock(T0))
    calls = count_scans(monkeypatch)
    midnight = T0 - 2 * DAY - 12 * HOUR  # the 13th, the oldest day the boot loaded
    for since, scans in ((midnight, 0), (midnight - 1, 1)):
        recs, oldest = led.query(Query(since_ns=since, limit=10))
        assert ([(r["run_id"], r["seq"]) for r in recs], oldest) == ([(3, 3), (2, 2)], 2)
        assert len(calls) == scans


# -- REQ-12: log_pruned -----------------------------------------------------------------


def test_log_pruned_is_computed_from_the_log_file_and_never_written(
    tmp_path: Path, ledger_dir: Path, open_ledger: OpenLedger
) -> None:
    jobs = tmp_path / "state" / "harness" / "jobs" / "nightly"
    jobs.mkdir(parents=True)
    gone, zst, kept, running = (str(jobs / f"{i}.log") for i in (1, 2, 3, 4))
    Path(zst + ".zst").write_bytes(b"\x28\xb5\x2f\xfd")
    Path(kept).write_text("output\n")
    led = open_ledger(ledger_dir, clock=Clock(T0))
    for i, log in enumerate((gone, zst, kept), start=1):
        led.append({"type": "opened", "harness": "nightly", "run_id": i, "log": log,
                    "log_pruned": True})
        led.append({"type": "closed", "harness": "nightly", "run_id": i,
                    "outcome": "success"})
    led.append({"type": "opened", "harness": "nightly", "run_id": 4, "log": running})

    def pruned(rec: dict[str, Any] | None) -> Any:
        assert rec is not None
        return rec.get("log_pruned")

    assert [pruned(led.get("nightly", i)) for i in (1, 2, 3, 4)] == [True, None, None, None]
    recs, _ = led.query(Query(names=("nightly",), limit=10))
    assert [(r["run_id"], pruned(r)) for r in recs] == [(4, None), (3, None), (2, None),
                                                        (1, True)]
    offline, _, _ = scan(str(ledger_dir), Query(limit=10))
    assert [(r.run_id, r.to_json(offline=True).get("log_pruned")) for r in offline] == [
        (4, None), (3, None), (2, None), (1, True)]
    for p in ledger_dir.glob("*.jsonl"):
        assert b'"log_pruned"' not in p.read_bytes()
    assert [x for x in all_lines(ledger_dir) if "log_pruned" in x] == []
    Path(kept).unlink()
    assert pruned(led.get("nightly", 3)) is True


def _path_of_bytes(parent: Path, size: int) -> Path:
    """A path under `parent` of exactly `size` bytes (one last component)."""
    room = size - len(str(parent).encode()) - 1
    assert 0 < room <= 255, room
    return parent / ("o" * room)


def test_a_log_path_the_ledger_cut_is_found_by_the_layout_and_never_misread(
    tmp_path: Path, open_ledger: OpenLedger
) -> None:
    """REQ-4 cuts `log` to 256 bytes, so under a deep state dir the ledger holds a prefix
    of the path. REQ-12's log_pruned is still about the log itself: a cut path under the
    ledger's own state dir is its DESIGN §2 path (jobs/<harness>/<run_id>.log, or
    logs/<harness>.log for a resident), and a cut one cannot be told of (here the prefix
    names another, existing file) is said neither pruned nor kept."""
    state = tmp_path / ("s" * 100) / ("t" * 100) / "harness"
    name = "n" * 40
    jobs = state / "jobs" / name
    jobs.mkdir(parents=True)
    (state / "logs").mkdir()
    kept, zst, gone = (jobs / f"{i}.log" for i in (1, 2, 3))
    kept.write_text("output\n")
    Path(f"{zst}.zst").write_bytes(b"\x28\xb5\x2f\xfd")
    durable = state / "logs" / f"{name}.log"
    durable.write_text("resident output\n")
    other = _path_of_bytes(tmp_path, 256)
    other.write_text("other\n")
    elsewhere = f"{other}-elsewhere/4.log"  # not the layout; its cut names `other`
    runs = [(1, "oneshot", str(kept)), (2, "oneshot", str(zst)), (3, "oneshot", str(gone)),
            (4, "oneshot", elsewhere), (5, "resident", str(durable))]
    led = open_ledger(state / "ledger", clock=Clock(T0))
    for i, kind, log in runs:
        assert len(log.encode()) > 256
        led.append({"type": "opened", "harness": name, "run_id": i, "kind": kind,
                    "log": log})
        led.append({"type": "closed", "harness": name, "run_id": i, "outcome": "success"})

    # The ledger keeps the cut, as REQ-4 says: the log field is the path's first 256 bytes.
    assert {x["run_id"]: x["log"] for x in all_lines(state / "ledger")
            if x["type"] == "opened"} == {i: log[:256] for i, _k, log in runs}
    want = [(5, None), (4, None), (3, True), (2, None), (1, None)]
    recs, _ = led.query(Query(names=(name,), limit=10))
    assert [(r["run_id"], r.get("log_pruned")) for r in recs] == want
    assert [(i, (led.get(name, i) or {}).get("log_pruned")) for i in (5, 4, 3, 2, 1)] == want
    found, _, _ = scan(str(state / "ledger"), Query(limit=10))
    probe = LogProbe(str(state))
    assert [(r.run_id, r.to_json(offline=True, probe=probe).get("log_pruned"))
            for r in found] == want
    # Once a cut run's log really goes, it reads pruned.
    kept.unlink()
    assert (led.get(name, 1) or {}).get("log_pruned") is True
    assert other.read_text() == "other\n"


def test_a_log_path_the_scrubber_redacted_is_found_by_the_layout(
    tmp_path: Path, open_ledger: OpenLedger
) -> None:
    """A state dir whose name reads as a credential: the ledger keeps the log path with
    the secret redacted (REQ-17), and log_pruned still follows the log itself."""
    state = tmp_path / "password=hunter2hunter2" / "harness"
    jobs = state / "jobs" / "job"
    jobs.mkdir(parents=True)
    (jobs / "1.log").write_text("output\n")
    led = open_ledger(state / "ledger", clock=Clock(T0))
    for i in (1, 2):
        led.append({"type": "opened", "harness": "job", "run_id": i, "kind": "oneshot",
                    "log": str(jobs / f"{i}.log")})
        led.append({"type": "closed", "harness": "job", "run_id": i, "outcome": "success"})
    assert [x["log"] for x in all_lines(state / "ledger") if x["type"] == "opened"] == [
        f"{tmp_path}/password=[REDACTED]"] * 2
    for p in (state / "ledger").glob("*.jsonl"):
        assert b"hunter2" not in p.read_bytes()
    recs, _ = led.query(Query(names=("job",), limit=10))
    assert [(r["run_id"], r.get("log_pruned")) for r in recs] == [(2, True), (1, None)]


def test_log_probe_reads_each_directory_once_and_knows_zst(tmp_path: Path) -> None:
    from harness.ledger.fold import LogProbe

    jobs = tmp_path / "jobs" / "h"
    jobs.mkdir(parents=True)
    (jobs / "1.log").write_text("x")
    (jobs / "2.log.zst").write_bytes(b"z")
    probe = LogProbe()
    assert [probe.gone(str(jobs / f"{n}.log")) for n in (1, 2, 3)] == [False, False, True]
    # The listing is taken once per answer: a file made afterwards is not seen by it...
    (jobs / "3.log").write_text("late")
    assert probe.gone(str(jobs / "3.log")) is True
    # ...but a new probe (the next answer) sees it.
    assert LogProbe().gone(str(jobs / "3.log")) is False
    # A directory that does not exist holds no log.
    assert LogProbe().gone(str(tmp_path / "nope" / "1.log")) is True


def test_one_writer_per_ledger_directory(tmp_path: Path) -> None:
    """SPEC-0022's single writer: a second RunLedger on the directory is refused (a
    LedgerUnavailable, REQ-20's sentinel) until the first closes; readers need no lock."""
    d = tmp_path / "ledger"
    first = RunLedger(str(d), clock=Clock(T0))
    try:
        first.append({"type": "decided", "harness": "a", "run_id": 1, "trigger": "schedule",
                      "outcome": "missed"})
        with pytest.raises(LedgerInUse, match="held by another process") as exc:
            RunLedger(str(d), clock=Clock(T0))
        assert isinstance(exc.value, LedgerUnavailable)
        found, _, _ = scan(str(d), Query(limit=5))  # the offline reader still reads
        assert [r.run_id for r in found] == [1]
    finally:
        first.close()
    second = RunLedger(str(d), clock=Clock(T0))
    try:
        assert second.append({"type": "decided", "harness": "a", "run_id": 2,
                              "trigger": "schedule", "outcome": "missed"}) == 2
    finally:
        second.close()
    second.close()  # a second close is harmless, and releases nothing twice


def test_a_close_that_leaves_its_writer_stuck_keeps_the_directory(tmp_path: Path) -> None:
    """A close whose writer thread is stuck in a write past the close's timeout keeps the
    directory's lock until that thread stops: released at once, a ledger opened on it
    issued seq 2 again, which the stuck thread then wrote too ([1, 2, 2] on disk)."""
    d = tmp_path / "ledger"
    files = FaultyFiles()
    led = RunLedger(str(d), clock=Clock(T0), files=files, sync_timeout=0.3)
    led.append({"type": "opened", "harness": "a", "run_id": 1})
    files.inject("write", hang=True)
    with pytest.raises(LedgerUnavailable):
        led.append({"type": "closed", "harness": "a", "run_id": 1, "outcome": "success"})
    with pytest.raises(LedgerUnavailable, match="still queued"):
        led.close(timeout=0.2)
    with pytest.raises(LedgerInUse):
        RunLedger(str(d), clock=Clock(T0))
    files.clear()  # the disk comes back: the thread writes its line and stops
    deadline = time.monotonic() + 30.0  # generous: a loaded machine
    while True:
        try:
            again = RunLedger(str(d), clock=Clock(T0))
            break
        except LedgerInUse:
            assert time.monotonic() < deadline, "the stopped writer kept the directory"
            time.sleep(0.02)
    try:
        assert again.append({"type": "opened", "harness": "a", "run_id": 2}) == 3
    finally:
        again.close()
    seqs = [json.loads(raw)["seq"] for p in sorted(d.glob("*.jsonl"))
            for raw in p.read_bytes().splitlines()]
    assert seqs == [1, 2, 3]


def test_a_wait_after_the_line_recovered_and_committed_returns_its_seq(tmp_path: Path
                                                                       ) -> None:
    """A caller that enqueues and waits later (the runner's admission, the prune's carry
    forward) waits on a line whose write failed, was retried and committed meanwhile: the
    wait says it is durable. It said 'the line stays queued' from the failure it missed,
    and the prune so gave up and carried the same runs again at the next."""
    d = tmp_path / "ledger"
    files = FaultyFiles()
    led = RunLedger(str(d), clock=Clock(T0), files=files, sync_timeout=5.0)
    try:
        files.inject("write", errno=errno.EIO, times=1)
        e = led.enqueue({"type": "opened", "harness": "a", "run_id": 1})
        deadline = time.monotonic() + 30.0
        while led.get("a", 1) is None:  # failed once, retried, committed
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert led.stats().append_errors == 1
        assert led.wait(e) == 1
    finally:
        led.close()


def test_a_ledger_that_fails_to_open_lets_go_of_its_directory(tmp_path: Path) -> None:
    d = tmp_path / "ledger"
    d.mkdir(mode=0o700)
    (d / "CHAIN").write_text("garbage")
    with pytest.raises(LedgerCorrupt):
        RunLedger(str(d))
    (d / "CHAIN").unlink()
    RunLedger(str(d)).close()  # not refused as "held": the failed open released it


def test_a_file_system_that_cannot_lock_a_directory_still_opens(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """A state directory on NFS, where flock of a directory opened read-only fails with
    EBADF (no NFS here: that one call is made to fail). The lock is not enforced, and the
    ledger says so rather than refusing to run."""
    import harness.ledger.files as files_mod

    def ebadf(fd: int, op: int) -> None:
        raise OSError(9, "Bad file descriptor")

    monkeypatch.setattr(files_mod.fcntl, "flock", ebadf)
    d = tmp_path / "ledger"
    led = RunLedger(str(d), clock=Clock(T0))
    monkeypatch.undo()
    try:
        assert led.append({"type": "decided", "harness": "a", "run_id": 1,
                           "trigger": "schedule", "outcome": "missed"}) == 1
    finally:
        led.close()
    assert "cannot be locked on this file system" in caplog.text


# -- a prune under a reader ----------------------------------------------------------------


def _four_days(d: Path, open_ledger: OpenLedger) -> list[Path]:
    """Runs 1-4 of `n`, decided 10, 9 and 8 days ago and today: one day file each."""
    clock = Clock(T0 - 10 * DAY)
    led = open_ledger(d, clock=clock)
    for rid, age in enumerate([10, 9, 8, 0], 1):
        clock.ns = T0 - age * DAY
        led.append(decided("n", rid))
    led.close()
    return sorted(d.glob("*.jsonl"))


def test_a_day_file_deleted_between_the_passes_of_a_scan_is_scanned_again(
    ledger_dir: Path, open_ledger: OpenLedger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The daemon prunes while `harness runs` reads the files. A file that goes between
    the scan's two passes takes records the first pass chose with it: the scan reads
    again and answers a whole page from what is left. It used to raise
    FileNotFoundError (exit 1 offline, an error from the daemon's fallback)."""
    days = _four_days(ledger_dir, open_ledger)
    real = reader_mod._fold_chosen
    passes: list[int] = []

    def pruned_meanwhile(files: Any, chosen: Any, upto: int) -> Any:
        if not passes:
            days[2].unlink()  # run 3's file
        passes.append(len(chosen))
        return real(files, chosen, upto)

    monkeypatch.setattr(reader_mod, "_fold_chosen", pruned_meanwhile)
    recs, oldest, _ = scan(str(ledger_dir), Query(limit=2))
    assert ([r.run_id for r in recs], oldest, passes) == ([4, 2], 2, [2, 2])


def test_a_day_file_deleted_after_the_listing_reads_as_empty(
    ledger_dir: Path, open_ledger: OpenLedger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file a prune deletes after the reader listed the directory is read as the prune
    left things, by the scan and by the daemon's `since` replay alike."""
    days = _four_days(ledger_dir, open_ledger)
    real = reader_mod._files_for

    def pruned_after_listing(directory: str, q: Query, stats: Any) -> Any:
        got = real(directory, q, stats)
        days[0].unlink(missing_ok=True)
        return got

    monkeypatch.setattr(reader_mod, "_files_for", pruned_after_listing)
    recs, oldest, st = scan(str(ledger_dir), Query(limit=10))
    assert ([r.run_id for r in recs], oldest, st.lines) == ([4, 3, 2], 2, 3)

    led = open_ledger(ledger_dir, clock=Clock(T0), window_ns=DAY)
    real_list = runledger_mod.list_day_files

    def listed_then_pruned(directory: str) -> Any:
        got = real_list(directory)
        days[1].unlink(missing_ok=True)
        return got

    monkeypatch.setattr(runledger_mod, "list_day_files", listed_then_pruned)
    assert [x["seq"] for x in led.since(0)] == [3, 4]


@pytest.mark.parametrize("cut_fails", [False, True], ids=["cut", "cut-fails"])
def test_a_failed_sync_across_midnight_leaves_no_later_seq_in_the_next_days_file(
        tmp_path: Path, cut_fails: bool) -> None:
    """Seq 2 (before midnight) and seq 3 (after) are written in one pass, to two day
    files; the sync of the first fails and seq 2 is cut back. Seq 3 must go too: left in
    the next day's file, a crash before the retry (the disk still full) left seq 3 on
    disk with no seq 2 anywhere, a break verify reports for good and the restart never
    mends (it continues at 4). Where the cut of seq 3 fails, seq 2 stays as well, and
    each is written once."""
    d = tmp_path / "ledger"
    files = FaultyFiles()
    clock = Clock(T0 - T0 % DAY - 1_000_000_000)  # a second before a UTC midnight
    led = RunLedger(str(d), clock=clock, files=files, sync_timeout=0.5, retry_min=0.05,
                    retry_max=0.1)
    try:
        assert led.append({"type": "opened", "harness": "h", "run_id": 1}) == 1
        files.inject("sync", errno=errno.ENOSPC)
        if cut_fails:
            files.inject("truncate", errno=errno.EIO)
        a = led.enqueue({"type": "closed", "harness": "h", "run_id": 1, "outcome": "success"})
        clock.ns += 2_000_000_000
        b = led.enqueue({"type": "opened", "harness": "h", "run_id": 2})
        for e in (a, b):
            with pytest.raises(LedgerUnavailable):
                led.wait(e)
        before, after = d / f"{day(clock.ns - DAY)}.jsonl", d / f"{day(clock.ns)}.jsonl"
        # What a SIGKILL would leave, through several retries of the failing sync.
        for _ in range(5):
            time.sleep(0.1)
            on_disk = [json.loads(raw)["seq"] for p in (before, after) if p.exists()
                       for raw in p.read_bytes().splitlines() if raw]
            assert on_disk == list(range(1, len(on_disk) + 1)), on_disk
        files.clear()
        deadline = time.monotonic() + 30.0  # generous: a loaded machine
        while led.stats().queued:  # retried in order once the disk is back
            assert time.monotonic() < deadline, "the queued lines were not retried"
            time.sleep(0.02)
        assert (led.wait(a), led.wait(b)) == (2, 3)
    finally:
        led.close(timeout=10.0)
    assert [[json.loads(raw)["seq"] for raw in p.read_bytes().splitlines()]
            for p in (before, after)] == [[1, 2], [3]]
    res = verify_run_ledger(str(d))
    assert (res.ok, res.head_seq) == (True, 3)


def test_the_first_ack_follows_a_sync_of_every_directory_the_ledger_made(
        tmp_path: Path) -> None:
    """`state/harness/ledger` made from nothing: each directory's entry is in its parent,
    and each parent is synced before the first line is acknowledged, or a power loss can
    take the path, and the acknowledged line in it, with the outermost directory. Only
    the ledger's own directory was synced (for its day file)."""
    files = DirSyncs()
    d = tmp_path / "state" / "harness" / "ledger"
    led = RunLedger(str(d), clock=Clock(T0), files=files)
    try:
        assert led.append(decided("a", 1)) == 1
    finally:
        led.close()
    assert files.dirs == [str(tmp_path), str(tmp_path / "state"),
                          str(tmp_path / "state" / "harness"), str(d)]


@pytest.mark.parametrize("found", ["all", "harness"])
def test_the_first_ack_follows_a_sync_of_directories_found_unsynced(
        tmp_path: Path, found: str) -> None:
    """A power-cut hunt: a first boot without XDG_RUNTIME_DIR made `state/harness` for
    the daemon's lock and never synced its entry, and a daemon killed before its day
    file's directory sync left that file's entry unsynced; the next process trusted
    both, and a power cut then took every line it acknowledged. Directories found there
    (and a day file found there) are synced once, before the first line is durable:
    `ledger/` (the day file's entry), `harness/` (ledger's), the state dir (harness's)."""
    d = tmp_path / "state" / "harness" / "ledger"
    d.parent.mkdir(parents=True, mode=0o700)
    if found == "all":
        d.mkdir(mode=0o700)
        (d / "2026-11-30.jsonl").touch(mode=0o600)  # a killed daemon's, entry unsynced
    files = DirSyncs()
    led = RunLedger(str(d), clock=Clock(T0), files=files)
    try:
        assert led.append(decided("a", 1)) == 1
        made = list(files.dirs)
        assert led.append(decided("a", 2)) == 2
    finally:
        led.close()
    state, harness = str(tmp_path / "state"), str(tmp_path / "state" / "harness")
    if found == "all":
        assert made == [str(d), harness, state]
    else:  # `ledger/` made now: its entry synced as it was made
        assert made == [harness, str(d), state]
    assert files.dirs == made  # once


def test_closing_counts_lines_still_queued(tmp_path: Path) -> None:
    """REQ-7's closing passes judge "open" by every line already queued, committed or not
    (REQ-6 queues a resident's own-exit closed line and its restart's opened line without
    waiting): a record a queued line ends gets no second closed line, and one whose opened
    line is only queued is open."""
    files = FaultyFiles()
    led = RunLedger(str(tmp_path / "ledger"), clock=Clock(T0), files=files)
    try:
        led.append({"type": "opened", "harness": "w", "run_id": 1, "kind": "resident",
                    "started_at": format_ns(T0 - 60 * NS), "outcome": "running"})
        files.inject("sync", hang=True)  # from here on nothing commits
        led.enqueue({"type": "closed", "harness": "w", "run_id": 1, "outcome": "failed",
                     "exit_code": 1}, sync=True)
        led.enqueue({"type": "opened", "harness": "w", "run_id": 2, "kind": "resident",
                     "trigger": "restart", "started_at": format_ns(T0), "outcome": "running"},
                    sync=True)
        led.enqueue({"type": "updated", "harness": "w", "run_id": 2, "model_calls": 3},
                    sync=False)

        assert [r["run_id"] for r in led.open_records()] == [1]  # committed only
        assert led.open_records(queued=True) == [{
            "harness": "w", "run_id": 2, "seq": 3, "kind": "resident", "trigger": "restart",
            "started_at": format_ns(T0), "outcome": "running", "model_calls": 3}]

        def shut(run_id: int) -> dict[str, Any]:
            return {"type": "closed", "harness": "w", "run_id": run_id,
                    "outcome": "interrupted", "reason": "shutdown"}

        assert led.enqueue_closing(shut(1)) is None  # its own closed line is queued
        assert led.enqueue_closing(shut(9)) is None  # never opened
        e = led.enqueue_closing(shut(2))
        assert e is not None and e.seq == 5
        assert led.enqueue_closing(shut(2)) is None  # closed once, by the first line
        assert led.open_records(queued=True) == []
        with pytest.raises(ValueError):
            led.enqueue_closing({**shut(3), "type": "updated"})
        files.clear()
        assert led.wait(e) == 5
        got = {r["run_id"]: (r["outcome"], r.get("reason"), r.get("exit_code"))
               for r in (led.get("w", i) for i in (1, 2)) if r is not None}
        assert got == {1: ("failed", None, 1), 2: ("interrupted", "shutdown", None)}
        assert led.open_records() == []
    finally:
        files.clear()
        led.close(timeout=10.0)


class _Unopenable(DirSyncs):
    """The real file layer, but one directory cannot be opened to be synced, as a parent
    of mode 0300 owned by a user other than root refuses (root reads any directory)."""

    def __init__(self, refused: str) -> None:
        super().__init__()
        self.refused = refused

    def sync_dir(self, path: str) -> None:
        if path == self.refused:
            raise PermissionError(13, "Permission denied", path)
        super().sync_dir(path)


@pytest.mark.parametrize("found", [True, False], ids=["found", "made"])
def test_a_parent_that_cannot_be_opened_to_sync_is_logged_and_lines_go_on(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, found: bool) -> None:
    """A regression hunt: a state dir of mode 0300 (writable, searchable, not readable)
    gives no descriptor to fsync, and syncing the entries above the ledger made every
    append fail for ever. Such a parent is logged once and skipped; lines are acked."""
    state = tmp_path / "state"
    d = state / "harness" / "ledger"
    (d if found else state).mkdir(parents=True, mode=0o700)
    files = _Unopenable(str(state))
    led = RunLedger(str(d), clock=Clock(T0), files=files)
    try:
        assert led.append(decided("a", 1)) == 1
        assert led.append(decided("a", 2)) == 2
    finally:
        led.close()
    assert str(state) not in files.dirs
    warned = [r.getMessage() for r in caplog.records if "cannot open" in r.getMessage()]
    assert warned == [f"cannot open {state} to sync its entries (Permission denied); a power "
                      "cut right after it gained a directory may lose that directory"]


def _respelled_last_line(path: Path, *, hash_raw: bool) -> None:
    """Rewrite the file's last line (its newline dropped) with its members in reverse
    order, "hash" first: hashed over those very bytes (`hash_raw`, which no writer of
    the chain does) or, as DESIGN §4 says, over the canonical bytes of the same value."""
    *head, last = path.read_bytes().splitlines(keepends=True)
    obj = json.loads(last)
    del obj["hash"]
    rest = ",".join(f"{json.dumps(k)}:{json.dumps(v, ensure_ascii=False)}"
                    for k, v in sorted(obj.items(), reverse=True)).encode()
    canon = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    digest = hashlib.sha256(b"{" + rest + b"}" if hash_raw else canon.encode()).hexdigest()
    path.write_bytes(b"".join(head) + b'{"hash":"' + digest.encode() + b'",' + rest + b"}")


def test_a_last_line_hashed_over_non_canonical_bytes_is_not_adopted(
    ledger_dir: Path, open_ledger: OpenLedger, caplog: pytest.LogCaptureFixture
) -> None:
    # Verify calls it a break (the hash is not over the canonical bytes): the boot must
    # not take it as a sealed line of the chain either. Its seq is still never reissued.
    clock = Clock(T0)
    path = one_closed_run(ledger_dir, open_ledger, clock)
    _respelled_last_line(path, hash_raw=True)

    led = open_ledger(ledger_dir, clock=clock)
    assert "without its newline; kept" not in caplog.text
    assert (f"ledger: {path} holds seq 2, above the last line of every day file: the files "
            "were edited; continuing after it") in caplog.text
    assert led.append(decided("n", 2)) == 3
    led.close()
    res = verify_run_ledger(str(ledger_dir))
    assert res.ok is False and res.error is not None
    assert (res.error.seq, res.error.file, res.error.line) == (2, path.name, 2)
    assert res.error.reason == "hash does not match the line's content (the line was edited)"


def test_a_last_line_in_another_spelling_hashed_canonically_is_adopted(
    ledger_dir: Path, open_ledger: OpenLedger, caplog: pytest.LogCaptureFixture
) -> None:
    # Verify accepts it (re-encoded, its hash is right): the boot adopts it, so seq 2 is
    # never issued twice.
    clock = Clock(T0)
    path = one_closed_run(ledger_dir, open_ledger, clock)
    _respelled_last_line(path, hash_raw=False)

    led = open_ledger(ledger_dir, clock=clock)
    assert f"{path} ends in a complete line without its newline; kept" in caplog.text
    assert led.append(decided("n", 2)) == 3
    led.close()
    res = verify_run_ledger(str(ledger_dir))
    assert (res.ok, res.lines, res.torn) == (True, 3, 0)
