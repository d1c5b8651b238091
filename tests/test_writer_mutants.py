"""The writer's failure and durability paths, pinned where mutation testing found them loose.

Each test drives one path of `harness.ledger.writer` (a failed write or sync, a cut-back
or read-back, a file gone while its handle was dropped, the retry loop, close) through
real files and the `FaultyFiles` layer, and checks what is exact there: which seqs are in
which file, once and in order, what was committed and in which batches, which error was
reported for which seq, and the writer's counters.
"""

from __future__ import annotations

import errno
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.ledger.errors import LedgerUnavailable
from harness.ledger.writer import Writer
from test_writer import (
    DAY,
    RecordingFiles,
    Rig,
    _open_in,
    _thread_cpu,
    hold_in_a_sync,
    line,
    past_the_bound,
    read_disk,
    rigs_in,
    settled,
    time_out_line_3,
    wait_until,
)

OTHER_DAY = "2026-12-01"


def on_day(day: str, run_id: int, **extra: Any) -> dict[str, Any]:
    """A fresh line for the day file of `day`."""
    return {**line(run_id=run_id), "at": f"{day}T10:00:00.000000000Z", **extra}


@pytest.fixture
def make_rig(tmp_path: Path) -> Iterator[Callable[..., Rig]]:
    """As in test_writer, but a failed pass is retried only after 30 s unless the test
    sets retry_min: a retry runs when the test asks for it (a flush), so what a failing
    pass left can be looked at before it."""
    yield from rigs_in(tmp_path, retry_min=30.0, retry_max=30.0)


def deleted_before_a_failed_sync_and_cut(rig: Rig) -> None:
    """Lines 1-2 buffered in the day file; the file deleted; the next sync fails and so does
    the cut-back after it, so the writer drops the handle and keeps it."""
    w = rig.writer
    for i in (1, 2):
        w.append(line(run_id=i), harness="h", run_id=i, sync=False)
        wait_until(lambda i=i: w.stats().lines_written == i)
    rig.day.unlink()
    rig.files.inject("sync", errno=errno.EIO, times=1)
    rig.files.inject("truncate", errno=errno.EIO, times=1)


def tear_lines_3_and_4(rig: Rig, synced: bool) -> None:
    """While a sync holds the writer, queue lines 3 and 4 (4 synced or not) to go out in
    one write that tears inside 4, and make the cut-back after it fail."""
    w = rig.writer
    hold_in_a_sync(rig)
    w.enqueue({**line(run_id=3), "reason": "x"}, sync=False, harness="h", run_id=3)
    w.enqueue({**line(run_id=4), "reason": "x" * 400}, sync=synced, harness="h", run_id=4)
    rig.files.inject("write", errno=errno.ENOSPC, partial=True, times=1)
    rig.files.inject("truncate", errno=errno.EIO, times=1)


# -- _write_and_sync ---------------------------------------------------------------------


def test_a_dropped_file_found_replaced_mid_pass_rewrites_its_lines_first_in_seq_order(
    make_rig: Callable[..., Rig],
) -> None:
    """Lines 1-3 sit in a day file that was deleted while its handle was dropped (a
    failed sync whose cut-back failed too). The retry pass carries new lines for another
    day (4) and for that day (5). Line 4 waits until 1-3 are synced, and looking for that
    the writer finds the path names a new file: it writes 1, 2 and 3 there again, in seq
    order, each once, then 4 in its own file and 5 after them. Each file is synced before
    another takes a line: one write and one commit per run of same-file lines."""
    rig = make_rig()
    w = rig.writer
    deleted_before_a_failed_sync_and_cut(rig)
    with pytest.raises(LedgerUnavailable, match="Input/output error"):
        w.append(line(run_id=3), harness="h", run_id=3)
    assert rig.commits.batches == []
    writes, syncs = rig.files.calls["write"], w.stats().syncs
    assert (writes, syncs) == (3, 0)
    w.enqueue(on_day(OTHER_DAY, 4), sync=False, harness="h", run_id=4)
    w.enqueue(line(run_id=5), sync=True, harness="h", run_id=5)
    w.flush()  # the retry, now: the backoff is 30 s
    rig.commits.wait_for(5)
    d, other = rig.disk(), read_disk(rig.directory / f"{OTHER_DAY}.jsonl")
    assert (d.seqs, d.fragments) == ([1, 2, 3, 5], [])
    assert (other.seqs, other.fragments) == ([4], [])
    assert rig.commits.batches == [[1, 2, 3], [4], [5]]
    assert rig.files.calls["write"] - writes == 3  # one per run of same-file lines
    s = settled(w, lambda s: (s.syncs, s.lines_written, s.queued, s.degraded) == (3, 5, 0, False))
    assert (s.syncs, s.lines_written, s.queued, s.degraded) == (3, 5, 0, False)
    # The handle kept on the deleted file was closed once the path was open again.
    assert _open_in(rig.directory) == [f"{DAY}.jsonl", f"{OTHER_DAY}.jsonl"]


def test_a_failed_write_stops_the_pass_before_lines_for_another_file(
    make_rig: Callable[..., Rig],
) -> None:
    """Line 3's write fails: line 4, for another day's file, must not reach its file
    ahead of it. Nothing more is written until the retry, which puts both down, 3 synced
    before 4 is written."""
    rig = make_rig()
    w = rig.writer
    hold_in_a_sync(rig)
    w.enqueue(line(run_id=3), sync=False, harness="h", run_id=3)
    e4 = w.enqueue(on_day(OTHER_DAY, 4), sync=True, harness="h", run_id=4)
    rig.files.inject("write", errno=errno.EIO, times=1)
    rig.files.clear("sync")
    with pytest.raises(LedgerUnavailable, match="Input/output error"):
        w.wait(e4)
    other = rig.directory / f"{OTHER_DAY}.jsonl"
    assert not other.exists()
    s = w.stats()
    assert (s.lines_written, s.queued) == (2, 2)
    assert s.last_error == ("ledger write of " + str(rig.day) + " failed: Input/output "
                            "error (injected on write) (harness=h run_id=3 seq=3)")
    w.flush()
    rig.commits.wait_for(4)
    assert (rig.disk().seqs, read_disk(other).seqs) == ([1, 2, 3], [4])
    assert rig.commits.batches == [[1], [2], [3], [4]]


@pytest.mark.parametrize("synced", [True, False], ids=["short-pass", "general-pass"])
def test_a_torn_write_reports_the_first_line_that_did_not_land(
    make_rig: Callable[..., Rig], synced: bool
) -> None:
    """Lines 3 and 4 go out in one write that tears inside 4, and the cut-back fails:
    the read-back finds 3 whole. The error names seq 4, the line still to be written,
    whichever pass wrote them (a synced line takes the short one)."""
    rig = make_rig()
    w = rig.writer
    tear_lines_3_and_4(rig, synced)
    rig.files.clear("sync")
    if not synced:
        w.flush()
    wait_until(lambda: w.stats().degraded)
    s = w.stats()
    assert s.last_error == ("ledger write of " + str(rig.day) + " failed: No space left on "
                            "device (injected on write) (harness=h run_id=4 seq=4)")
    assert (s.lines_written, s.append_errors) == (3, 1)
    w.flush()
    rig.commits.wait_for(4)
    d = rig.disk()
    assert d.seqs == [1, 2, 3, 4] and len(d.fragments) == 1
    # 3 was read back whole: synced and committed by the failing pass itself.
    assert rig.commits.batches == [[1], [2], [3], [4]]


# -- _finish_pass ------------------------------------------------------------------------


def test_a_failed_sync_past_the_bound_counts_once(make_rig: Callable[..., Rig]) -> None:
    """A sync that runs past the bound and then fails is one append error (the failure),
    not also a late sync."""
    rig = make_rig(sync_timeout=1.0)  # the other passes stay well within it, even loaded
    w = rig.writer
    w.append(line(run_id=1), sync=False)
    wait_until(lambda: w.stats().lines_written == 1)
    rig.files.inject("sync", errno=errno.EIO, delay=1.5, times=1)
    w.flush()
    # Counted when the bound passes (or, on a loaded machine, when it fails); its failure
    # is told after it, not counted again.
    wait_until(lambda: (w.stats().last_error or "").startswith("ledger sync of"))
    s = w.stats()
    assert s.append_errors == 1
    assert s.degraded
    w.flush()
    rig.commits.wait_for(1)
    assert rig.disk().seqs == [1]
    assert w.stats().append_errors == 1


def test_a_buffered_write_within_the_bound_is_no_append_error(
    make_rig: Callable[..., Rig],
) -> None:
    """A pass that only writes buffered lines, quickly, counts nothing: only a write past
    the bound is an append error."""
    rig = make_rig(sync_timeout=2.0)
    w = rig.writer
    for i in (1, 2):
        w.append(line(run_id=i), sync=False)
        wait_until(lambda i=i: w.stats().lines_written == i)
    s = w.stats()
    assert (s.append_errors, s.last_error, s.syncs, s.queued) == (0, None, 0, 2)
    w.flush()
    rig.commits.wait_for(2)
    s = w.stats()
    assert (s.append_errors, s.last_error, s.syncs, s.queued) == (0, None, 1, 0)


def test_a_pass_whose_write_and_sync_both_fail_reports_the_write(
    make_rig: Callable[..., Rig],
) -> None:
    """Line 2 is written, buffered; line 3's write fails, and then the sync of line 2
    fails too: the error reported (to the callers and in stats) is the first one, the
    write of seq 3; both lines are retried, in order, once each."""
    rig = make_rig()
    w = rig.writer
    assert w.append(line(run_id=1), harness="h", run_id=1) == 1
    w.append(line(run_id=2), harness="h", run_id=2, sync=False)
    wait_until(lambda: w.stats().lines_written == 2)
    rig.files.inject("write", errno=errno.EIO, times=1)
    rig.files.inject("sync", errno=errno.EIO, times=1)
    errors = w.stats().append_errors
    e3 = w.enqueue(line(run_id=3), sync=True, harness="h", run_id=3)
    wait_until(lambda: w.stats().append_errors == errors + 1)
    s = w.stats()
    assert s.last_error == ("ledger write of " + str(rig.day) + " failed: Input/output "
                            "error (injected on write) (harness=h run_id=3 seq=3)")
    assert (s.queued, s.degraded, s.lines_written) == (2, True, 1)
    assert rig.disk().seqs == [1]  # the failed sync's line was cut back
    assert e3.waiter is not None and e3.waiter.woken
    assert rig.files.calls["sync"] == 2 and rig.files.calls["truncate"] == 2
    w.flush()
    rig.commits.wait_for(3)
    assert rig.disk().seqs == [1, 2, 3]
    assert rig.commits.batches == [[1], [2, 3]]
    assert w.stats().append_errors == errors + 1


# -- _commit_prefix ----------------------------------------------------------------------


class _DegradedAtClose(RecordingFiles):
    """Records whether the writer says it is degraded each time it closes a file."""

    def __init__(self) -> None:
        super().__init__()
        self.writer: Writer | None = None
        self.seen: list[bool] = []

    def close(self, fd: int) -> None:
        if self.writer is not None:
            self.seen.append(self.writer.stats().degraded)
        super().close(fd)


def test_a_recovering_pass_is_not_degraded_once_it_has_acknowledged_its_lines(
    make_rig: Callable[..., Rig],
) -> None:
    """The pass that commits the line a failure held back stops failing callers fast as it
    acknowledges them, before it goes on to close yesterday's file (on a slow file
    system, a close can take a while)."""
    files = _DegradedAtClose()
    rig = make_rig(files=files)
    w = rig.writer
    assert w.append(on_day("2026-11-29", 1), harness="h", run_id=1) == 1
    assert w.append(line(run_id=2), harness="h", run_id=2) == 2
    rig.files.inject("write", errno=errno.EIO, times=1)
    with pytest.raises(LedgerUnavailable, match="Input/output error"):
        w.append(on_day(OTHER_DAY, 3), harness="h", run_id=3)
    assert w.stats().degraded
    files.writer = w
    try:
        w.flush()
        rig.commits.wait_for(3)
        wait_until(lambda: len(files.seen) == 2)  # both older files, newest kept
    finally:
        files.writer = None
    assert files.seen == [False, False]
    assert rig.commits.batches == [[1], [2], [3]]
    assert read_disk(rig.directory / f"{OTHER_DAY}.jsonl").seqs == [3]


# -- _write_group / _read_back / _undo_write -----------------------------------------------


def test_a_read_back_that_succeeds_on_the_retry_writes_the_rest_in_the_same_pass(
    make_rig: Callable[..., Rig],
) -> None:
    """Lines 3 and 4 tear in one write that can be neither cut back nor read back. The
    retry (a flush) reads back 3 whole and writes 4 in the same pass: one sync, one
    commit of both, each line once, the read tried once per pass."""
    rig = make_rig()
    w = rig.writer
    tear_lines_3_and_4(rig, True)
    rig.files.inject("read", errno=errno.EIO)
    rig.files.clear("sync")
    wait_until(lambda: w.stats().degraded)
    assert rig.files.calls["read"] == 1
    assert w.stats().lines_written == 2
    syncs, writes = w.stats().syncs, rig.files.calls["write"]
    rig.files.clear("read")
    w.flush()
    rig.commits.wait_for(4)
    assert rig.commits.batches == [[1], [2], [3, 4]]
    assert rig.files.calls["read"] == 2
    assert (rig.files.calls["write"] - writes, w.stats().syncs - syncs) == (1, 1)
    d = rig.disk()
    assert d.seqs == [1, 2, 3, 4] and len(d.fragments) == 1
    assert d.lines[3].startswith(d.fragments[0])
    s = settled(w, lambda s: (s.lines_written, s.queued, s.degraded) == (4, 0, False))
    assert (s.lines_written, s.queued, s.degraded) == (4, 0, False)
    # Read back once, the file is accounted for again: later lines need no read.
    assert w.append(line(run_id=5), harness="h", run_id=5) == 5
    assert rig.files.calls["read"] == 2
    assert rig.disk().seqs == [1, 2, 3, 4, 5]


def test_a_torn_write_that_is_cut_back_keeps_its_handle_and_reads_nothing(
    make_rig: Callable[..., Rig],
) -> None:
    """The cut-back works: the file is exactly as before the write, so nothing is read
    back and the handle stays open; the retry writes the line once."""
    rig = make_rig()
    w = rig.writer
    assert w.append(line(run_id=1), harness="h", run_id=1) == 1
    before = rig.day.read_bytes()
    rig.files.inject("write", errno=errno.ENOSPC, partial=True, times=1)
    with pytest.raises(LedgerUnavailable, match="No space left"):
        w.append(line(run_id=2), harness="h", run_id=2)
    assert rig.day.read_bytes() == before
    assert rig.files.calls["truncate"] == 1
    w.flush()
    rig.commits.wait_for(2)
    d = rig.disk()
    assert (d.seqs, d.fragments) == ([1, 2], [])
    assert (rig.files.calls["read"], rig.files.calls["open"]) == (0, 1)
    assert rig.files.dir_syncs == [str(rig.directory)]
    assert w.stats().lines_written == 2


# -- _after_failed_sync ------------------------------------------------------------------


def test_a_failed_sync_cuts_back_drops_the_handle_and_rewrites_only_the_cut_line(
    make_rig: Callable[..., Rig],
) -> None:
    """The sync of line 2 fails: the file is cut back to what was synced (line 1), the
    handle is dropped (the next pass opens the file again), and the retry writes line 2
    once; the count of lines written stays the count of lines in the file."""
    rig = make_rig()
    w = rig.writer
    assert w.append(line(run_id=1), harness="h", run_id=1) == 1
    synced = rig.day.read_bytes()
    rig.files.inject("sync", errno=errno.EIO, times=1)
    t0 = time.time()
    with pytest.raises(LedgerUnavailable, match=r"ledger sync of .* Input/output error"):
        w.append(line(run_id=2), harness="h", run_id=2)
    assert rig.day.read_bytes() == synced
    s = w.stats()
    assert (s.lines_written, s.queued, s.degraded, s.syncs) == (1, 1, True, 1)
    assert s.append_errors == 1
    assert s.last_error_at is not None and t0 <= s.last_error_at <= time.time()
    w.flush()
    rig.commits.wait_for(2)
    d = rig.disk()
    assert (d.seqs, d.fragments) == ([1, 2], [])
    assert (rig.files.calls["open"], rig.files.calls["write"], rig.files.calls["sync"]) == (
        2, 3, 3)
    s = settled(w, lambda s: (s.lines_written, s.queued, s.degraded, s.syncs) == (2, 0, False, 2))
    assert (s.lines_written, s.queued, s.degraded, s.syncs) == (2, 0, False, 2)


# -- _run --------------------------------------------------------------------------------


def test_close_retries_a_disk_that_keeps_failing_at_the_short_interval(
    make_rig: Callable[..., Rig],
) -> None:
    """Backoff is 30 s, and the write fails four more times after close() is called: the
    retries while closing come every 50 ms, not after the backoff, so the line is drained
    well within the close's timeout."""
    rig = make_rig()
    w = rig.writer
    assert w.append(line(run_id=1), harness="h", run_id=1) == 1
    rig.files.inject("write", errno=errno.EIO, times=5)
    w.enqueue(line(run_id=2), sync=False, harness="h", run_id=2)
    wait_until(lambda: w.stats().degraded)
    assert rig.files.calls["write"] == 2
    w.close(timeout=3.0)  # raises, naming the line, if it is still queued
    d = rig.disk()
    assert (d.seqs, d.fragments) == ([1, 2], [])
    assert rig.commits.batches == [[1], [2]]
    assert rig.files.calls["write"] == 7
    assert w.stats().append_errors == 5


def test_an_idle_writer_blocks_instead_of_polling(make_rig: Callable[..., Rig]) -> None:
    """With nothing queued and nothing to retry, the writer thread waits for the next
    enqueue: a second with nothing to do costs it no CPU."""
    rig = make_rig()
    w = rig.writer
    assert w.append(line(run_id=1), harness="h", run_id=1) == 1
    wait_until(lambda: w.stats().queued == 0)
    cpu0 = _thread_cpu(w)
    time.sleep(1.0)
    assert _thread_cpu(w) - cpu0 < 0.03
    assert w.append(line(run_id=2), harness="h", run_id=2) == 2  # and an enqueue wakes it


def test_a_clean_pass_resets_the_backoff_for_the_next_failure(
    make_rig: Callable[..., Rig],
) -> None:
    """Eight failures in a row push the backoff to 25.6 s; once a pass succeeds, the next
    failure is retried after retry_min again, not after the backoff of the last episode."""
    rig = make_rig(retry_min=0.1, retry_max=30.0)
    w = rig.writer
    assert w.append(line(run_id=1), harness="h", run_id=1) == 1
    rig.files.inject("write", errno=errno.EIO, times=8)
    w.enqueue(line(run_id=2), sync=False, harness="h", run_id=2)
    for attempt in range(2, 10):
        wait_until(lambda attempt=attempt: rig.files.calls["write"] == attempt)
        w.flush()  # retry now, whatever the backoff
    rig.commits.wait_for(2)
    assert rig.files.calls["write"] == 10
    errors = settled(w, lambda s: s.append_errors == 8).append_errors
    assert errors == 8
    rig.files.inject("write", errno=errno.EIO, times=1)
    t0 = time.monotonic()
    # Not append(): its caller is told of the failure only if it wakes before the retry
    # 0.1 s later commits the line, and a loaded machine may wake it after (it is then
    # told, rightly, that the line is durable).
    w.enqueue(line(run_id=3), sync=True, harness="h", run_id=3)
    rig.commits.wait_for(3)
    assert time.monotonic() - t0 < 10.0  # retry_min is 0.1 s; the old backoff 25.6 s
    assert rig.files.calls["write"] == 12  # line 3's write failed once, then its retry
    assert w.stats().append_errors == errors + 1
    assert rig.commits.batches == [[1], [2], [3]]
    assert rig.disk().seqs == [1, 2, 3]


def test_a_flush_is_used_up_by_the_pass_after_it(make_rig: Callable[..., Rig]) -> None:
    """A flush asked while a synced line waits is done by the pass that syncs that line;
    a buffered line queued afterwards waits for flush_every like any other."""
    rig = make_rig(flush_every=30.0)
    w = rig.writer
    hold_in_a_sync(rig)
    e3 = w.enqueue(line(run_id=3), sync=True, harness="h", run_id=3)
    w.flush()
    rig.files.clear("sync")
    assert w.wait(e3) == 3
    syncs = rig.files.calls["sync"]
    w.enqueue(line(run_id=4), sync=False, harness="h", run_id=4)
    wait_until(lambda: w.stats().lines_written == 4)
    time.sleep(1.0)  # ample time for a wrong early sync to show
    assert rig.files.calls["sync"] == syncs
    assert rig.commits.seqs == [1, 2, 3]
    w.flush()
    rig.commits.wait_for(4)
    assert rig.commits.batches == [[1], [2], [3], [4]]


# -- wait / close ------------------------------------------------------------------------


def test_waiting_for_a_committed_line_while_a_later_one_fails_returns_its_seq(
    make_rig: Callable[..., Rig],
) -> None:
    """Line 2 is durable and acknowledged; line 3 then fails. A wait for line 2 that comes
    late (the caller was busy) still returns 2: fail-fast is for lines not yet durable."""
    rig = make_rig()
    w = rig.writer
    assert w.append(line(run_id=1), harness="h", run_id=1) == 1
    e2 = w.enqueue(line(run_id=2), sync=True, harness="h", run_id=2)
    rig.commits.wait_for(2)
    rig.files.inject("write", errno=errno.EIO)
    with pytest.raises(LedgerUnavailable, match="Input/output error"):
        w.append(line(run_id=3), harness="h", run_id=3)
    assert w.stats().degraded
    assert w.wait(e2) == 2
    assert w.wait(e2, as_enqueued=True) == 2
    e4 = w.enqueue(line(run_id=4), sync=True, harness="h", run_id=4)
    with pytest.raises(LedgerUnavailable, match="queued behind a failing write") as info:
        w.wait(e4)
    assert info.value.seq == 4


def test_callers_fail_fast_once_a_sync_nobody_waits_for_hangs_past_the_bound(
    make_rig: Callable[..., Rig],
) -> None:
    """A flush of buffered lines hangs in its sync; no synced caller has timed out yet.
    Once the sync has run past the bound, a synced append fails at once, and so does a
    wait, judged when it starts, for a line queued before the bound ran out."""
    rig = make_rig(sync_timeout=0.5, flush_every=30.0)
    w = rig.writer
    release = rig.files.inject("sync", hang=True)
    assert release is not None
    w.append(line(run_id=1), sync=False)
    w.flush()
    wait_until(lambda: rig.files.calls["sync"] == 1)
    e2 = w.enqueue(line(run_id=2), sync=True, harness="h", run_id=2)
    time.sleep(1.0)  # twice the bound: the sync under way is now past it
    with pytest.raises(LedgerUnavailable, match="queued behind a failing write") as info:
        w.append(line(run_id=3), harness="h", run_id=3)
    assert info.value.seq == 3
    with pytest.raises(LedgerUnavailable, match="queued behind a failing write") as info:
        w.wait(e2)
    assert info.value.seq == 2
    # A sync that has not returned within the bound has failed (REQ-6): counted, degraded.
    wait_until(lambda: w.stats().append_errors == 1)
    s = w.stats()
    assert (s.append_errors, s.degraded, s.queued) == (1, True, 3)
    rig.files.clear("sync")
    rig.commits.wait_for(3)
    assert rig.disk().seqs == [1, 2, 3]
    assert rig.commits.batches == [[1], [2, 3]]
    s = settled(w, lambda s: (s.append_errors, s.degraded, s.queued) == (1, False, 0))
    assert (s.append_errors, s.degraded, s.queued) == (1, False, 0)


def test_close_gives_a_hung_sync_its_whole_timeout_before_giving_up(
    make_rig: Callable[..., Rig],
) -> None:
    """close() waits the whole timeout for the queue to drain before it reports the lines
    left; the line, synced late, then lands once."""
    rig = make_rig(flush_every=30.0)
    w = rig.writer
    rig.files.inject("sync", hang=True)
    w.append(line(run_id=1, harness="nightly"), sync=False, harness="nightly", run_id=1)
    w.flush()
    wait_until(lambda: rig.files.calls["sync"] == 1)
    t0 = time.monotonic()
    with pytest.raises(LedgerUnavailable) as info:
        w.close(timeout=1.0)
    assert time.monotonic() - t0 >= 1.0
    assert str(info.value) == ("closed with 1 line(s) still queued (not durable) "
                               "(harness=nightly run_id=1 seq=1)")
    rig.files.clear("sync")
    rig.commits.wait_for(1)
    assert rig.disk().seqs == [1]


def test_a_third_day_file_closes_all_but_the_newest(make_rig: Callable[..., Rig]) -> None:
    """Handles are dropped after the pass's commit; the next line's pass starts only once
    that is done, so the handles open are looked at after one more line each time. A
    third day's file closes the two before it; a fourth's leaves two open."""
    rig = make_rig()
    w = rig.writer
    days = ["2026-11-29", "2026-11-30", "2026-12-01"]
    for i, day in enumerate(days, 1):
        assert w.append(on_day(day, i), harness="h", run_id=i) == i
    assert w.append(on_day(days[-1], 4), harness="h", run_id=4) == 4
    assert _open_in(rig.directory) == ["2026-12-01.jsonl"]
    assert w.append(on_day("2026-12-02", 5), harness="h", run_id=5) == 5
    assert w.append(on_day("2026-12-02", 6), harness="h", run_id=6) == 6
    assert _open_in(rig.directory) == ["2026-12-01.jsonl", "2026-12-02.jsonl"]
    assert rig.commits.batches == [[1], [2], [3], [4], [5], [6]]
    assert rig.files.calls["open"] == 4


class _FailThenSlowWrite(RecordingFiles):
    """Once armed, the next write fails (EIO) and the one after it takes `delay`."""

    def __init__(self, delay: float) -> None:
        super().__init__()
        self.delay = delay
        self.script: list[str] = []

    def write(self, fd: int, data: bytes) -> int:
        step = self.script.pop(0) if self.script else ""
        if step == "fail":
            self.calls["write"] += 1
            raise OSError(errno.EIO, "Input/output error (scripted)")
        if step == "slow":
            time.sleep(self.delay)
        return super().write(fd, data)


@pytest.mark.parametrize("synced", [False, True], ids=["buffered", "synced"])
def test_a_late_pass_is_reported_against_its_first_line(
    make_rig: Callable[..., Rig], synced: bool
) -> None:
    """Lines 2 and 3 are retried together after a failed write, and the retry's write
    runs past the bound: the late write (and sync) is counted once, naming seq 2."""
    files = _FailThenSlowWrite(delay=0.8)
    rig = make_rig(files=files, sync_timeout=0.3, retry_min=0.2, retry_max=0.2,
                   flush_every=30.0)
    w = rig.writer
    assert w.append(line(run_id=1), harness="h", run_id=1) == 1
    files.script = ["fail", "slow"]
    w.enqueue(line(run_id=2), sync=False, harness="h", run_id=2)
    w.enqueue(line(run_id=3), sync=synced, harness="h", run_id=3)
    wait_until(lambda: w.stats().lines_written == 3)
    if synced:
        rig.commits.wait_for(3)
    s = settled(w, lambda s: (s.append_errors, s.degraded) == (2, False))
    # The retry is a general pass: the watchdog finds it in its write either way.
    what = "write and sync" if synced else "write"
    assert s.last_error is not None
    told = past_the_bound("write", what, rig.day, "0.3", "(harness=h run_id=2 seq=2)")
    assert told.fullmatch(s.last_error), s.last_error
    assert (s.append_errors, s.degraded) == (2, False)
    w.flush()
    rig.commits.wait_for(3)
    assert rig.commits.batches == [[1], [2, 3]]
    assert rig.disk().seqs == [1, 2, 3]


def test_buffered_lines_are_synced_within_flush_every_of_the_oldest(
    make_rig: Callable[..., Rig],
) -> None:
    """Line 2 is queued just before line 1's flush_every runs out: the flush is due by
    line 1's age, and syncs both then, not line 2's flush_every later."""
    rig = make_rig(flush_every=2.0)
    w = rig.writer
    t0 = time.monotonic()
    w.append(line(run_id=1), sync=False)
    time.sleep(1.6)
    w.append(line(run_id=2), sync=False)
    rig.commits.wait_for(2)
    assert rig.commits.times[0] - t0 < 3.0  # line 2's own flush_every ends past 3.6 s
    assert rig.commits.batches in ([[1, 2]], [[1], [2]])
    assert rig.files.calls["sync"] == len(rig.commits.batches)


def test_a_caller_behind_a_timed_out_line_and_a_buffered_one_still_fails_fast(
    make_rig: Callable[..., Rig],
) -> None:
    """As in test_writer's case of a caller behind one that timed out, but a buffered
    line was queued between them: it is the head of the queue that timed out, and the
    caller behind it fails at once."""
    rig = make_rig(sync_timeout=1.0)
    w = rig.writer
    assert w.append(line(run_id=1), harness="h", run_id=1) == 1
    time_out_line_3(rig)
    w.enqueue(line(run_id=4), sync=False, harness="h", run_id=4)
    with pytest.raises(LedgerUnavailable, match="queued behind a failing write") as info:
        w.append(line(run_id=5), harness="h", run_id=5)
    assert info.value.seq == 5
    rig.files.clear("sync")
    rig.commits.wait_for(5)
    assert rig.disk().seqs == [1, 2, 3, 4, 5]
    assert rig.commits.batches == [[1], [2], [3], [4, 5]]


def test_close_after_a_failed_sync_and_cut_on_a_deleted_file_commits_nothing_unwritten(
    make_rig: Callable[..., Rig],
) -> None:
    """Found by mutation testing: during close, a handle dropped after a failed sync whose
    cut-back also failed was closed, not kept, so the retry could not tell the day file
    had been deleted: it synced the new, empty file at the path and committed lines 1-2,
    which were in no file. Kept, the handle shows the path names another file, and the
    lines are written there before they are committed."""
    rig = make_rig(flush_every=30.0)
    w = rig.writer
    deleted_before_a_failed_sync_and_cut(rig)
    w.close(timeout=5.0)
    assert rig.commits.seqs == [1, 2]
    assert read_disk(rig.day).seqs == [1, 2]
