"""Mutation-test survivors of run history at boot and shutdown (`harness.supervisor.history`),
the daily prune (`harness.supervisor.housekeeping`), per-run logs (`harness.supervisor.logs`)
and the run feed (`harness.ledger.feed`): exact records, files and counts for the branches
the other tests leave unpinned. Real ledgers, real files, real event loops."""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import stat
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from harness.ledger.files import FaultyFiles
from harness.supervisor import housekeeping, logs
from harness.supervisor.history import close_open_on_shutdown, reconcile
from harness.supervisor.housekeeping import DailyPrune
from harness.timefmt import format_ns
from ledgertools import DAY, HOUR, T0, Clock, OpenLedger, all_lines
from test_history import opened, seed
from test_housekeeping import DEADLINE, MIB, TICK, WallClock, days_on_disk, fill, idle, until

# -- harness.supervisor.history ----------------------------------------------------------


def test_a_shutdown_after_the_clock_stepped_back_records_a_zero_duration(
        tmp_path: Path, open_ledger: OpenLedger) -> None:
    """REQ-7's clean shutdown closes with an end: a run whose started_at is later than the
    shutdown's now (the wall clock stepped back while it ran) took 0 ms, never a negative
    time, which `harness runs` would show as it is."""
    d = tmp_path / "ledger"
    seed(d, [opened("nightly", 3, T0 + HOUR)])
    led = open_ledger(d, clock=Clock(T0))
    got = close_open_on_shutdown(led, T0)
    assert [(r["run_id"], r["outcome"], r["reason"], r["ended_at"], r["duration_ms"])
            for r in got] == [(3, "interrupted", "shutdown", format_ns(T0), 0)]
    last = all_lines(d)[-1]
    assert (last["type"], last["duration_ms"], last["ended_at"]) == ("closed", 0, format_ns(T0))

def test_a_crash_close_the_disk_refuses_is_not_returned_and_lands_once_it_recovers(
        tmp_path: Path, open_ledger: OpenLedger) -> None:
    """REQ-7 at a boot on a full disk: reconcile neither raises nor claims a run it could
    not close; the closed line stays queued, and the writer lands it once the disk takes
    writes again, so the run then reads interrupted/daemon_crash."""
    d = tmp_path / "ledger"
    seed(d, [opened("nightly", 4, T0 - HOUR)])
    full = FaultyFiles()
    full.inject("write", errno=errno.ENOSPC)
    led = open_ledger(d, clock=Clock(T0), files=full, retry_min=0.01, retry_max=0.05)
    try:
        assert reconcile(led, T0) == []
    finally:
        full.clear()  # the disk recovers
    deadline = time.monotonic() + 60
    while len(all_lines(d)) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert [(o["run_id"], o["type"], o["outcome"], o.get("reason")) for o in all_lines(d)] == [
        (4, "opened", "running", None), (4, "closed", "interrupted", "daemon_crash")]
    assert reconcile(led, T0) == []  # closed once



# -- harness.supervisor.housekeeping -----------------------------------------------------


def test_stopping_the_daily_prune_mid_prune_waits_for_the_prune_to_finish(
        tmp_path: Path, open_ledger: OpenLedger) -> None:
    """The daemon stops housekeeping before it closes the ledger: a prune already deleting
    day files in its thread is waited for, so `stop` returns only once the files it was
    deleting are gone, never with the thread still working on a ledger about to close."""
    d = tmp_path / "ledger"
    clock = WallClock("2026-06-15T23:59:59+00:00")
    led = open_ledger(d, clock=clock.ns, retention_ns=90 * DAY)
    fill(led, clock, range(44, -1, -1))
    entered, gate = threading.Event(), threading.Event()

    def limits() -> tuple[int, int]:
        entered.set()
        assert gate.wait(DEADLINE)  # the prune's thread, held mid-prune
        return 30 * DAY, 256 * MIB

    dp = DailyPrune(led, limits=limits, now=clock.now, tick=TICK)

    async def main() -> None:
        task = asyncio.get_running_loop().create_task(dp.run())
        await until("the task to arm", lambda: dp.next_at is not None)
        clock.set("2026-06-16T00:00:00+00:00")
        await until("the prune's thread", entered.is_set)
        stopper = asyncio.get_running_loop().create_task(housekeeping.stop(task))
        await idle()
        assert not stopper.done()  # stop waits while the prune is under way
        assert len(days_on_disk(d)) == 45
        gate.set()
        await asyncio.wait_for(stopper, DEADLINE)
        assert task.cancelled()
        # The prune ran to its end before stop returned.
        assert days_on_disk(d) == [f"2026-05-{x:02d}" for x in range(16, 32)] + [
            f"2026-06-{x:02d}" for x in range(1, 16)]

    try:
        asyncio.run(main())
    finally:
        gate.set()


def test_stopping_housekeeping_that_never_started_is_a_no_op() -> None:
    """A daemon stopped during its boot has no housekeeping task yet: `stop(None)`."""
    assert asyncio.run(housekeeping.stop(None)) is None


def test_the_default_wall_clock_is_the_current_utc_time() -> None:
    """The daemon's DailyPrune reads `utc_now` for the rollover: an aware UTC datetime of
    the moment it is called (a naive or local one would misplace midnight)."""
    before = datetime.now(UTC)
    got = housekeeping.utc_now()
    after = datetime.now(UTC)
    assert got.tzinfo is UTC
    assert before <= got <= after
    assert DailyPrune(None).now is housekeeping.utc_now  # type: ignore[arg-type]


def test_a_tick_that_is_not_positive_is_refused() -> None:
    """A zero tick would spin the loop without sleeping: refused with the value named."""
    for tick in (0, -1.0):
        with pytest.raises(ValueError) as info:
            DailyPrune(None, tick=tick)  # type: ignore[arg-type]
        assert str(info.value) == f"tick must be positive, got {tick}"
    assert DailyPrune(None, tick=0.001).tick == 0.001  # type: ignore[arg-type]


# -- harness.supervisor.logs -------------------------------------------------------------


def test_a_run_log_is_created_private_and_never_over_a_stale_file(tmp_path: Path) -> None:
    """DESIGN §2's `jobs/<harness>/<run_id>.log`: created 0600 in 0700 directories whatever
    the umask (the mode is given at creation), and never opened over a file already there
    (a run id is never reused: a stale file is not appended a new run's output)."""
    jobs = tmp_path / "state" / "jobs"
    path = logs.run_log_path(str(jobs), "nightly", 7)
    assert path == str(jobs / "nightly" / "7.log")
    old = os.umask(0)
    try:
        fd = logs.create_run_log(path)
    finally:
        os.umask(old)
    try:
        os.write(fd, b"first\n")
        os.write(fd, b"second\n")
    finally:
        os.close(fd)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert [stat.S_IMODE(os.stat(p).st_mode) for p in (jobs, jobs / "nightly")] == [
        0o700, 0o700]
    with pytest.raises(FileExistsError):
        logs.create_run_log(path)
    assert Path(path).read_bytes() == b"first\nsecond\n"


def test_a_log_that_cannot_be_deleted_is_not_reported_pruned(tmp_path: Path) -> None:
    """keep_runs = 1 over runs 1..3: run 2's logs go; run 1's `1.log` is a directory the
    unlink refuses, so run 1 is not among the ids pruned (its other file still goes)."""
    d = tmp_path / "h"
    d.mkdir()
    (d / "1.log").mkdir()
    for name in ("1.log.zst", "2.log", "2.log.zst", "3.log.zst"):
        (d / name).write_bytes(b"x")
    assert logs.prune_logs(str(tmp_path), "h", 1) == [2]
    assert sorted(os.listdir(d)) == ["1.log", "3.log.zst"]


def test_compressing_a_log_that_is_not_there_does_nothing_and_says_nothing(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The boot compresses the log of every run a crash ended, and a run may have died
    before its log was made: no .zst, no temporary file, no warning in the daemon log."""
    d = tmp_path / "jobs" / "nightly"
    d.mkdir(parents=True)
    with caplog.at_level(logging.DEBUG, logger="harness.supervisor"):
        assert logs.compress_log(str(d / "4.log")) is False
    assert os.listdir(d) == []
    assert caplog.records == []


def test_compress_leftovers_are_cleared_only_in_real_harness_directories(
        tmp_path: Path) -> None:
    """At boot only `jobs/<harness>/` directories are swept: a stray file in jobs/ is no
    directory to list, and a symlink in jobs/ leads outside the state dir, where a file
    of a leftover's name is someone else's and stays."""
    jobs, outside = tmp_path / "jobs", tmp_path / "outside"
    (jobs / "nightly").mkdir(parents=True)
    outside.mkdir()
    half = jobs / "nightly" / ".3.log.zst.4242.77.tmp"
    half.write_bytes(b"half made")
    theirs = outside / ".5.log.zst.4242.77.tmp"
    theirs.write_bytes(b"not ours")
    (jobs / "stray.txt").write_bytes(b"x")
    (jobs / "elsewhere").symlink_to(outside)
    assert logs.clear_compress_leftovers(str(jobs)) == [str(half)]
    assert not half.exists()
    assert theirs.read_bytes() == b"not ours"
    assert (jobs / "stray.txt").read_bytes() == b"x"
    assert logs.clear_compress_leftovers(str(tmp_path / "none")) == []


def test_keep_runs_of_one_is_valid_and_a_harness_without_logs_prunes_nothing(
        tmp_path: Path) -> None:
    """keep_runs' floor is 1 (the config's own): 1 keeps the newest log only, 0 is refused
    with the value named; a harness whose jobs directory does not exist has nothing to
    prune."""
    d = tmp_path / "h"
    d.mkdir()
    for name in ("8.log.zst", "9.log"):
        (d / name).write_bytes(b"x")
    assert logs.prune_logs(str(tmp_path), "h", 1) == [8]
    assert os.listdir(d) == ["9.log"]
    with pytest.raises(ValueError) as info:
        logs.prune_logs(str(tmp_path), "h", 0)
    assert str(info.value) == "keep_runs must be at least 1, got 0"
    assert logs.prune_logs(str(tmp_path), "never-ran", 1) == []
    assert not (tmp_path / "never-ran").exists()
