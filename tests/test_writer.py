"""The single ledger writer and its file layer under healthy, failing, slow and hung disks.

Every test reads what landed back from the files themselves (never from the writer's
memory) and checks the invariants `harness.ledger.writer` promises: seqs 1..N in order,
each complete line exactly once, the chain linked, nothing committed before it is
fdatasync'd, failures reported with their record and retried in order, synced callers
bounded by `sync_timeout`, and files created 0600 without a chmod (SPEC-0022 REQ-1,
REQ-2, REQ-6, REQ-20).
"""

from __future__ import annotations

import errno
import json
import logging
import os
import re
import shutil
import stat
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pytest

from harness.ledger.chain import ZERO_HASH, hash_of_line_bytes
from harness.ledger.errors import (
    LedgerClosed,
    LedgerCorrupt,
    LedgerUnavailable,
    LineRejected,
)
from harness.ledger.files import FaultyFiles, make_private_dir
from harness.ledger.runledger import _DaySealer
from harness.ledger.writer import Entry, Writer, WriterStats

DAY = "2026-11-30"
AT = f"{DAY}T10:00:00.000000000Z"
WAIT = 10.0  # generous bound for "eventually"; tests normally finish in milliseconds


def line(run_id: int = 1, type_: str = "opened", harness: str = "h") -> dict[str, Any]:
    """A fresh run-ledger line (the sealer stamps seq/prev/hash into it, so never reuse one)."""
    return {"v": 1, "type": type_, "at": AT, "harness": harness, "run_id": run_id}


def wait_until(pred: Callable[[], bool], timeout: float = WAIT) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        time.sleep(0.002)


def settled(writer: Writer, pred: Callable[[WriterStats], bool]) -> WriterStats:
    """The writer's stats once `pred` holds of them (or the last read, to fail on).

    A pass hands its lines to `on_commit` before it unqueues them and clears `degraded`,
    and a buffered pass clears it only on its way out: a test that waited for a commit or
    a write reads the stats in that window on a loaded machine unless it waits for them."""
    deadline = time.monotonic() + WAIT
    while not pred(s := writer.stats()) and time.monotonic() < deadline:
        time.sleep(0.002)
    return s


class Commits:
    """An `on_commit` callback that records each committed batch as the writer hands it over."""

    def __init__(self) -> None:
        self._cv = threading.Condition()
        self.batches: list[list[int]] = []
        self.entries: list[Entry] = []
        self.times: list[float] = []
        self.hook: Callable[[list[Entry]], None] | None = None

    def __call__(self, entries: list[Entry]) -> None:
        if self.hook is not None:
            self.hook(entries)
        with self._cv:
            self.batches.append([e.seq for e in entries])
            self.entries.extend(entries)
            self.times.append(time.monotonic())
            self._cv.notify_all()

    @property
    def seqs(self) -> list[int]:
        with self._cv:
            return [e.seq for e in self.entries]

    def wait_for(self, n: int, timeout: float = WAIT) -> None:
        with self._cv:
            if not self._cv.wait_for(lambda: len(self.entries) >= n, timeout):
                raise AssertionError(f"{len(self.entries)} of {n} lines committed in {timeout}s")


@dataclass
class Disk:
    """What one day file holds, split the way readers split it."""

    raw: bytes
    lines: list[bytes] = field(default_factory=list)  # complete lines that parse
    objs: list[dict[str, Any]] = field(default_factory=list)
    fragments: list[bytes] = field(default_factory=list)  # pieces a reader skips

    @property
    def seqs(self) -> list[int]:
        return [o["seq"] for o in self.objs]


def read_disk(path: Path) -> Disk:
    raw = path.read_bytes() if path.exists() else b""
    d = Disk(raw)
    parts = raw.split(b"\n")
    tail = parts.pop()  # b"" when the file ends in "\n"
    for p in parts:
        try:
            obj = json.loads(p)
        except ValueError:
            d.fragments.append(p)
            continue
        assert isinstance(obj, dict), p
        d.lines.append(p)
        d.objs.append(obj)
    if tail:
        d.fragments.append(tail)
    return d


def assert_chain(d: Disk, first_prev: str = ZERO_HASH) -> None:
    """Every complete line hashes to its `hash` as it lies and links to the one before."""
    prev = first_prev
    for raw, obj in zip(d.lines, d.objs, strict=True):
        assert obj["prev"] == prev, f"seq {obj['seq']} does not link"
        assert hash_of_line_bytes(raw, obj["hash"]), f"seq {obj['seq']} hash mismatch"
        prev = obj["hash"]


class RecordingFiles(FaultyFiles):
    """FaultyFiles that also logs sync boundaries and directory syncs, in order."""

    def __init__(self, *, power_cut: bool = False) -> None:
        super().__init__(power_cut=power_cut)
        self.events: list[str] = []
        self.dir_syncs: list[str] = []

    def sync(self, fd: int) -> None:
        self.events.append("sync-begin")
        super().sync(fd)
        self.events.append("sync-end")

    def sync_dir(self, path: str) -> None:
        self.dir_syncs.append(path)
        super().sync_dir(path)


@dataclass
class Rig:
    directory: Path
    files: RecordingFiles
    commits: Commits
    writer: Writer

    @property
    def day(self) -> Path:
        return self.directory / f"{DAY}.jsonl"

    def disk(self) -> Disk:
        return read_disk(self.day)


def rigs_in(tmp_path: Path, **defaults: Any) -> Iterator[Callable[..., Rig]]:
    """Yield a maker of writers on fresh directories under `tmp_path` (options over
    `defaults`); close them all after."""
    rigs: list[Rig] = []

    def make(**kw: Any) -> Rig:
        directory = tmp_path / f"ledger{len(rigs)}"
        make_private_dir(str(directory))
        files = kw.pop("files", None) or RecordingFiles()
        commits = Commits()
        opts: dict[str, Any] = {
            "next_seq": 1,
            "head_hash": ZERO_HASH,
            "sync_timeout": 2.0,
            **defaults,
        }
        opts.update(kw)
        w = Writer(_DaySealer(str(directory)), files=files, on_commit=commits, **opts)
        rig = Rig(directory, files, commits, w)
        rigs.append(rig)
        return rig

    yield make
    for rig in rigs:
        rig.files.clear()
        rig.writer.close(timeout=5.0)


@pytest.fixture
def make_rig(tmp_path: Path) -> Iterator[Callable[..., Rig]]:
    yield from rigs_in(tmp_path, retry_min=0.01, retry_max=0.05)


# -- 1. the healthy path -------------------------------------------------------------------


def test_synced_appends_land_in_seq_order_and_commit_only_after_their_sync(
    make_rig: Callable[..., Rig],
) -> None:
    rig = make_rig()
    rig.files.inject("sync", delay=0.02)
    on_disk_at_commit: list[list[int]] = []
    rig.commits.hook = lambda entries: on_disk_at_commit.append(rig.disk().seqs)

    seqs = [rig.writer.append(line(run_id=i), harness="h", run_id=i) for i in range(1, 6)]

    assert seqs == [1, 2, 3, 4, 5]
    d = rig.disk()
    assert d.seqs == [1, 2, 3, 4, 5]
    assert d.fragments == []
    assert [o["run_id"] for o in d.objs] == [1, 2, 3, 4, 5]
    assert d.raw == b"".join(e.data for e in rig.commits.entries)
    assert_chain(d)
    assert rig.writer.head == (5, d.objs[-1]["hash"])
    # Each synced caller waited for its own sync: one line per commit, in seq order, and
    # each commit came after a completed sync, never between a sync's start and end.
    assert rig.commits.batches == [[1], [2], [3], [4], [5]]
    assert rig.files.events == ["sync-begin", "sync-end"] * 5
    assert on_disk_at_commit == [[1], [1, 2], [1, 2, 3], [1, 2, 3, 4], [1, 2, 3, 4, 5]]
    s = rig.writer.stats()
    assert (s.queued, s.append_errors, s.degraded, s.lines_written, s.syncs, s.next_seq) == (
        0, 0, False, 5, 5, 6,
    )
    # The new day file's directory entry was made durable once, when it was created.
    assert rig.files.dir_syncs == [str(rig.directory)]


def test_nothing_is_committed_while_the_sync_is_in_progress(make_rig: Callable[..., Rig]) -> None:
    rig = make_rig()
    release = rig.files.inject("sync", hang=True)
    assert release is not None
    e = rig.writer.enqueue(line(), sync=True, harness="h", run_id=1)
    wait_until(lambda: rig.files.calls["sync"] == 1)
    # Written (the bytes are in the file) but not yet durable: not committed.
    assert rig.disk().seqs == [1]
    assert rig.commits.batches == []
    assert not e.waiter.woken  # type: ignore[union-attr]
    rig.files.clear("sync")
    assert rig.writer.wait(e) == 1
    assert rig.commits.batches == [[1]]
    assert rig.disk().seqs == [1]


def test_a_holder_of_passes_sees_no_line_written_or_committed(
    make_rig: Callable[..., Rig],
) -> None:
    """Retention deletes a day file holding `passes()`: meanwhile the writer neither writes
    nor commits (a line committed into the file then would go with it unseen); lines
    queued meanwhile are written and committed, in order, once it is let go."""
    rig = make_rig()
    w = rig.writer
    assert w.append(line(run_id=1), harness="h", run_id=1) == 1
    with w.passes():
        e = w.enqueue(line(run_id=2), sync=True, harness="h", run_id=2)
        b = w.enqueue(line(run_id=3), sync=False, harness="h", run_id=3)
        time.sleep(0.3)  # ample for a pass here; a held writer must not have made one
        assert rig.disk().seqs == [1]
        assert rig.commits.batches == [[1]]
        assert not e.waiter.woken  # type: ignore[union-attr]
        assert (e.written, b.written) == (False, False)
    assert w.wait(e) == 2
    w.flush()
    wait_until(lambda: rig.commits.batches[-1][-1] == 3)
    assert rig.disk().seqs == [1, 2, 3]
    assert [s for batch in rig.commits.batches for s in batch] == [1, 2, 3]


# -- 2. failing disks ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("op", "err"),
    [
        ("write", errno.EROFS),
        ("write", errno.ENOSPC),
        ("open", errno.EROFS),
        ("sync", errno.EIO),
    ],
)
def test_failing_disk_reports_fails_fast_keeps_lines_queued_and_recovers_in_order(
    make_rig: Callable[..., Rig], caplog: pytest.LogCaptureFixture, op: str, err: int
) -> None:
    caplog.set_level(logging.ERROR, logger="harness.ledger")
    # A bound far off, so failing fast reads as such on a loaded machine too.
    rig = make_rig(sync_timeout=20.0)
    w = rig.writer
    rig.files.inject(op, errno=err)

    t0 = time.monotonic()
    with pytest.raises(LedgerUnavailable) as first:
        w.append(line(run_id=7), harness="h", run_id=7)
    assert time.monotonic() - t0 < 10.0
    msg = str(first.value)
    assert "harness=h run_id=7 seq=1" in msg
    assert os.strerror(err) in msg
    assert (first.value.harness, first.value.run_id, first.value.seq) == ("h", 7, 1)

    for run_id in (8, 9, 10):
        t0 = time.monotonic()
        with pytest.raises(LedgerUnavailable) as later:
            w.append(line(run_id=run_id), harness="h", run_id=run_id)
        assert time.monotonic() - t0 < 10.0, "a synced append behind a failing head waited"
        assert f"harness=h run_id={run_id} seq={run_id - 6}" in str(later.value)

    s = w.stats()
    assert s.append_errors > 0
    assert s.queued == 4
    assert s.degraded is True
    assert s.next_seq == 5
    assert s.last_error is not None and "seq=1" in s.last_error
    assert rig.commits.batches == []
    assert rig.disk().objs == []
    # The failure is logged with the record it concerns (REQ-6).
    assert any("harness=h" in r.getMessage() and "seq=1" in r.getMessage() for r in caplog.records)

    rig.files.clear(op)
    wait_until(lambda: w.stats().queued == 0)
    d = rig.disk()
    assert d.seqs == [1, 2, 3, 4]
    assert [o["run_id"] for o in d.objs] == [7, 8, 9, 10]
    assert d.fragments == []
    assert_chain(d)
    assert rig.commits.seqs == [1, 2, 3, 4]
    s = settled(w, lambda s: (s.queued, s.degraded, s.next_seq) == (0, False, 5))
    assert (s.queued, s.degraded, s.next_seq) == (0, False, 5)
    assert w.append(line(run_id=11), harness="h", run_id=11) == 5
    assert rig.disk().seqs == [1, 2, 3, 4, 5]


def test_recovery_of_a_failed_buffered_line_clears_degraded_before_its_flush(
    make_rig: Callable[..., Rig],
) -> None:
    """A buffered line that failed and was then written fine must not keep the ledger
    "degraded" (failing synced callers fast) until its flush_every comes round."""
    rig = make_rig(flush_every=30.0)
    w = rig.writer
    rig.files.inject("write", errno=errno.ENOSPC)
    assert w.append(line(run_id=1), sync=False) == 1
    wait_until(lambda: w.stats().append_errors > 0)
    rig.files.clear("write")
    wait_until(lambda: w.stats().lines_written == 1)
    wait_until(lambda: not w.stats().degraded, timeout=2.0)
    assert w.append(line(run_id=2), harness="h", run_id=2) == 2
    assert rig.disk().seqs == [1, 2]
    assert rig.commits.seqs == [1, 2]


# -- 3. partial writes ---------------------------------------------------------------------


@pytest.mark.parametrize("truncate_fails", [False, True])
def test_partial_writes_never_duplicate_a_seq(
    make_rig: Callable[..., Rig], truncate_fails: bool
) -> None:
    rig = make_rig()
    w = rig.writer
    n = 9
    # Hold the writer on its first open so the first failing write carries line 1 alone
    # and the retries carry the whole queue: whole lines and fragments both reach the file.
    gate = rig.files.inject("open", hang=True, times=1)
    assert gate is not None
    rig.files.inject("write", errno=errno.ENOSPC, partial=True, times=3)
    if truncate_fails:
        rig.files.inject("truncate", errno=errno.EIO)
    first = w.enqueue(line(run_id=1), sync=False)
    wait_until(lambda: rig.files.calls["open"] == 1)
    rest = [w.enqueue(line(run_id=i), sync=i == n) for i in range(2, n + 1)]
    gate.set()

    wait_until(lambda: w.stats().queued == 0)
    d = rig.disk()
    assert d.seqs == list(range(1, n + 1))
    assert [o["run_id"] for o in d.objs] == list(range(1, n + 1))
    assert d.lines == [e.data[:-1] for e in [first, *rest]]
    assert rig.commits.seqs == list(range(1, n + 1))
    assert_chain(d)
    assert rig.files.calls["write"] == 4
    if truncate_fails:
        # What each failed write left stays in the file on a line of its own: a fragment
        # readers skip (it does not parse), never a second copy of a seq. Each fragment
        # is the head of the line the retry then wrote whole, right after it.
        pieces = d.raw.split(b"\n")
        assert pieces.pop() == b""
        assert len(d.fragments) == 3
        for frag in d.fragments:
            whole = pieces[pieces.index(frag) + 1]
            assert whole.startswith(frag) and len(frag) < len(whole)
        # The second and third failed writes put whole lines down before their
        # fragment; those were read back and kept, not written again.
        assert rig.commits.batches == [[1, 2, 3, 4], [5, 6], [7, 8, 9]]
    else:
        assert d.fragments == []
        assert d.raw == b"".join(e.data for e in [first, *rest])


# -- 4. sync failures ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "truncate_fails", [None, 1, 99], ids=["cut-ok", "cut-fails-once", "cut-fails"]
)
def test_sync_failing_twice_then_recovering_leaves_the_line_once(
    make_rig: Callable[..., Rig], truncate_fails: int | None
) -> None:
    rig = make_rig()
    rig.files.inject("sync", errno=errno.EIO, times=2)
    if truncate_fails:
        rig.files.inject("truncate", errno=errno.EIO, times=truncate_fails)
    with pytest.raises(LedgerUnavailable, match="Input/output error"):
        rig.writer.append(line(), harness="h", run_id=1)
    rig.commits.wait_for(1)
    d = rig.disk()
    assert d.seqs == [1]
    assert d.fragments == []
    assert rig.commits.batches == [[1]]
    assert rig.files.calls["sync"] == 3
    assert rig.writer.stats().append_errors == 2
    # The file was created by this writer: its directory entry must be synced too,
    # even though the handle that created it was dropped after the failed sync.
    assert rig.files.dir_syncs == [str(rig.directory)]
    assert rig.writer.append(line(run_id=2), harness="h", run_id=2) == 2
    assert rig.disk().seqs == [1, 2]


def test_a_created_file_whose_first_sync_fails_still_gets_its_directory_synced(
    make_rig: Callable[..., Rig],
) -> None:
    rig = make_rig()
    rig.files.inject("sync", errno=errno.EIO, times=1)
    with pytest.raises(LedgerUnavailable, match="Input/output error"):
        rig.writer.append(line(), harness="h", run_id=1)
    rig.commits.wait_for(1)
    assert rig.files.calls["sync"] == 2
    assert rig.files.dir_syncs == [str(rig.directory)]
    assert rig.writer.append(line(run_id=2), harness="h", run_id=2) == 2
    assert rig.files.dir_syncs == [str(rig.directory)]


def test_failed_sync_after_a_failed_cut_keeps_earlier_lines_once(
    make_rig: Callable[..., Rig],
) -> None:
    """Lines left in place by a failed cut-back must not be rewritten when a later sync
    fails and the cut then works: only the bytes actually cut are rewritten."""
    rig = make_rig(flush_every=30.0)
    w = rig.writer
    rig.files.inject("sync", errno=errno.EIO, times=2)
    rig.files.inject("truncate", errno=errno.EIO, times=1)
    w.append(line(run_id=1), sync=False)
    wait_until(lambda: w.stats().lines_written == 1)
    with pytest.raises(LedgerUnavailable):
        w.append(line(run_id=2), harness="h", run_id=2)
    rig.commits.wait_for(2)
    d = rig.disk()
    assert d.seqs == [1, 2]
    assert d.fragments == []
    assert_chain(d)
    assert rig.commits.seqs == [1, 2]


# -- 4b. the same failures once the file is open --------------------------------------------
# A pass over fresh synced lines for a file already open takes the writer's short path
# (`_common_pass`); the tests above mostly fail the very first pass, which opens the file
# and takes the general one. These fail the short path and expect the same outcomes.


def warm(rig: Rig) -> None:
    """One synced line down, so the file is open and its directory entry synced."""
    assert rig.writer.append(line(run_id=100), harness="h", run_id=100) == 1
    assert rig.files.dir_syncs == [str(rig.directory)]


def past_the_bound(hung: str, late: str, path: Path, bound: str, record: str) -> re.Pattern[str]:
    """How one write or sync past the bound is told (and counted, once): by the watchdog
    while it has not returned (`hung`: what the pass was doing then), or, should it return
    before the watchdog looked (a loaded machine), by the writer (`late`: what it did)."""
    durable = ("the lines are now durable" if late == "write and sync"
               else "the lines are written and will be synced")
    return re.compile(
        f"ledger {hung} of {re.escape(str(path))} has not returned within the {bound}s "
        f"bound {re.escape(record)}"
        f"|ledger {late} of {re.escape(str(path))} took [0-9.]+s, over the {bound}s bound; "
        f"{durable} {re.escape(record)}")


def release_past_the_bound(rig: Rig, bound: float, call: int) -> None:
    """Release the hung "sync" once its `call`-th call has been hung for longer than
    `bound`. A pass's time runs from before that call, so the writer then finds it late
    however late a loaded machine let it start the pass."""
    deadline = time.monotonic() + 30
    while rig.files.calls["sync"] < call:
        assert time.monotonic() < deadline, "the hung sync was never called"
        time.sleep(0.005)
    time.sleep(bound + 0.1)
    rig.files.clear("sync")


def hold_in_a_sync(rig: Rig) -> None:
    """Line 1 synced, line 2 written and its sync hung: lines queued now go out together
    in one pass once the test clears the "sync" fault."""
    warm(rig)
    release = rig.files.inject("sync", hang=True)
    assert release is not None
    rig.writer.append(line(run_id=2), harness="h", run_id=2, sync=False)
    rig.writer.flush()
    wait_until(lambda: rig.files.calls["sync"] == 2 and rig.disk().seqs == [1, 2])


@pytest.mark.parametrize(
    ("op", "err"), [("write", errno.EROFS), ("write", errno.ENOSPC), ("sync", errno.EIO)]
)
def test_an_open_file_failing_keeps_lines_queued_and_recovers_in_order(
    make_rig: Callable[..., Rig], op: str, err: int
) -> None:
    rig = make_rig(sync_timeout=20.0)  # far off: failing fast reads so under load too
    w = rig.writer
    warm(rig)
    rig.files.inject(op, errno=err)
    t0 = time.monotonic()
    with pytest.raises(LedgerUnavailable, match=os.strerror(err)) as first:
        w.append(line(run_id=2), harness="h", run_id=2)
    assert first.value.seq == 2
    with pytest.raises(LedgerUnavailable, match="queued behind a failing write"):
        w.append(line(run_id=3), harness="h", run_id=3)
    assert time.monotonic() - t0 < 10.0, "a caller waited out the bound on a failing disk"
    s = w.stats()
    assert (s.queued, s.degraded, s.next_seq) == (2, True, 4)
    assert s.append_errors >= 1 and s.last_error is not None and "seq=2" in s.last_error
    assert rig.commits.seqs == [1]
    assert rig.disk().seqs == [1]  # a failed sync's bytes were cut back

    rig.files.clear(op)
    wait_until(lambda: w.stats().queued == 0)
    d = rig.disk()
    assert (d.seqs, d.fragments) == ([1, 2, 3], [])
    assert_chain(d)
    assert rig.commits.seqs == [1, 2, 3]
    assert w.stats().degraded is False
    assert w.append(line(run_id=4), harness="h", run_id=4) == 4


def test_an_open_file_whose_write_tears_and_cannot_be_cut_back_keeps_no_duplicate(
    make_rig: Callable[..., Rig],
) -> None:
    rig = make_rig()
    warm(rig)
    rig.files.inject("write", errno=errno.ENOSPC, partial=True, times=1)
    rig.files.inject("truncate", errno=errno.EIO, times=1)
    with pytest.raises(LedgerUnavailable, match="No space left"):
        rig.writer.append(line(run_id=2), harness="h", run_id=2)
    wait_until(lambda: rig.writer.stats().queued == 0)
    d = rig.disk()
    assert d.seqs == [1, 2]
    assert len(d.fragments) == 1 and d.lines[1].startswith(d.fragments[0])
    assert_chain(d)
    assert rig.commits.batches == [[1], [2]]


def torn_before_the_first_newline(rig: Rig, seq: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """Lines of seq and seq + 1 (run ids the same) whose joint write, torn at half its
    bytes, stops exactly before the first line's "\n"."""
    first = {**line(run_id=seq), "reason": "x" * 200}
    second = {**line(run_id=seq + 1), "reason": "x" * 199}
    sealer = _DaySealer(str(rig.directory))
    n1 = len(sealer.seal(dict(first), seq, ZERO_HASH)[0]) + 1
    n2 = len(sealer.seal(dict(second), seq + 1, ZERO_HASH)[0]) + 1
    assert (n1 + n2) // 2 == n1 - 1  # the tear falls right before the first "\n"
    return first, second


def test_a_torn_write_that_stops_just_before_a_newline_keeps_no_duplicate(
    make_rig: Callable[..., Rig],
) -> None:
    """Two lines in one write; half the bytes is exactly the first line without its
    "\n"; the cut-back fails. Read back, that line is whole but for its newline: it is
    written, and the retry writes the newline it lacks, not the line again."""
    rig = make_rig()
    w = rig.writer
    first, second = torn_before_the_first_newline(rig, 3)
    hold_in_a_sync(rig)  # so the two lines are queued and written together
    e1 = w.enqueue(first, sync=False, harness="h", run_id=3)
    e2 = w.enqueue(second, sync=True, harness="h", run_id=4)
    rig.files.inject("write", errno=errno.ENOSPC, partial=True, times=1)
    rig.files.inject("truncate", errno=errno.EIO, times=1)
    rig.files.clear("sync")  # releases the hung sync
    with pytest.raises(LedgerUnavailable):
        w.wait(e2)  # the torn write fails the synced caller at once
    rig.commits.wait_for(4)
    d = rig.disk()
    assert d.seqs == [1, 2, 3, 4] and d.fragments == []
    assert (e1.seq, e2.seq) == (3, 4)
    assert_chain(d)


def _tear_unreadably(rig: Rig) -> Disk:
    """Lines 3 and 4 go out in one write that tears inside 4; the cut-back fails and
    the read-back keeps failing. Returns the day file as it is then held."""
    w = rig.writer
    hold_in_a_sync(rig)
    # Half the two lines' bytes holds all of the short first one.
    w.enqueue({**line(run_id=3), "reason": "x"}, sync=False, harness="h", run_id=3)
    e2 = w.enqueue({**line(run_id=4), "reason": "x" * 400}, sync=True, harness="h", run_id=4)
    writes = rig.files.calls["write"]
    rig.files.inject("write", errno=errno.ENOSPC, partial=True, times=1)
    rig.files.inject("truncate", errno=errno.EIO, times=1)
    rig.files.inject("read", errno=errno.EIO)
    rig.files.clear("sync")
    with pytest.raises(LedgerUnavailable, match="No space left"):
        w.wait(e2)
    wait_until(lambda: rig.files.calls["read"] >= 4)  # the failed write's, then retries'
    held = rig.disk()
    assert held.seqs == [1, 2, 3] and len(held.fragments) == 1
    assert rig.files.calls["write"] == writes + 1
    assert rig.commits.seqs == [1, 2]
    s = w.stats()
    assert s.queued == 2 and s.last_error is not None and "injected on read" in s.last_error
    return held


def test_a_torn_write_that_cannot_be_cut_or_read_back_writes_nothing_until_it_can(
    make_rig: Callable[..., Rig],
) -> None:
    """What reached the file is unknown, and rewriting both lines would put the first
    one's seq down twice: nothing more is written to that file until a read-back tells,
    and then only the line that did not land."""
    rig = make_rig()
    held = _tear_unreadably(rig)
    rig.files.clear("read")
    rig.commits.wait_for(4)
    d = rig.disk()
    assert d.seqs == [1, 2, 3, 4]
    assert d.raw.startswith(held.raw)
    assert d.fragments == held.fragments and d.lines[3].startswith(d.fragments[0])
    assert_chain(d)
    assert rig.commits.batches[-1] == [3, 4]
    s = settled(rig.writer, lambda s: (s.degraded, s.lines_written) == (False, 4))
    assert (s.degraded, s.lines_written) == (False, 4)


def test_a_torn_write_whose_file_is_then_removed_is_written_whole_again(
    make_rig: Callable[..., Rig],
) -> None:
    """The day file goes (an operator, a disk swapped) while the read-back fails: with
    it goes whatever the torn write left, so both lines are written to a new file."""
    rig = make_rig()
    _tear_unreadably(rig)
    rig.day.unlink()
    dir_syncs = len(rig.files.dir_syncs)
    rig.files.clear("read")
    rig.commits.wait_for(4)
    d = rig.disk()
    assert (d.seqs, d.fragments) == ([3, 4], [])
    assert rig.commits.batches[-1] == [3, 4]
    assert rig.files.dir_syncs[dir_syncs:] == [str(rig.directory)]  # a new file


def test_short_writes_are_continued_where_they_stopped(
    make_rig: Callable[..., Rig],
) -> None:
    """write(2) may put down fewer bytes than asked without an error; the rest follows
    in the next call, so the lines land whole and in order."""
    rig = make_rig()
    w = rig.writer
    hold_in_a_sync(rig)
    writes = rig.files.calls["write"]
    entries = [w.enqueue(line(run_id=i), sync=i == 5, harness="h", run_id=i)
               for i in (3, 4, 5)]
    rig.files.inject("write", short=True, times=2)
    rig.files.clear("sync")
    assert w.wait(entries[-1]) == 5
    d = rig.disk()
    assert (d.seqs, d.fragments) == ([1, 2, 3, 4, 5], [])
    assert d.lines[2:] == [e.data[:-1] for e in entries]
    assert_chain(d)
    assert rig.files.calls["write"] == writes + 3  # half, a quarter, the rest
    assert w.stats().lines_written == 5


def test_a_write_past_the_bound_is_counted_like_a_late_sync(
    make_rig: Callable[..., Rig],
) -> None:
    rig = make_rig(sync_timeout=0.3)
    w = rig.writer
    warm(rig)
    rig.files.inject("write", delay=0.6, times=1)
    with pytest.raises(LedgerUnavailable, match=r"not synced within 0\.3s"):
        w.append(line(run_id=2), harness="h", run_id=2)
    rig.commits.wait_for(2)
    s = settled(w, lambda s: (s.append_errors, s.degraded) == (1, False))
    assert (s.append_errors, s.degraded) == (1, False)
    assert s.last_error is not None
    told = past_the_bound("write and sync", "write and sync", rig.day, "0.3",
                          "(harness=h run_id=2 seq=2)")
    assert told.fullmatch(s.last_error), s.last_error


def test_a_buffered_write_past_the_bound_is_counted_though_nobody_waits(
    make_rig: Callable[..., Rig],
) -> None:
    rig = make_rig(sync_timeout=0.3, flush_every=30.0)
    w = rig.writer
    warm(rig)
    rig.files.inject("write", delay=0.6, times=1)
    w.enqueue(line(run_id=2), sync=False, harness="h", run_id=2)
    wait_until(lambda: w.stats().append_errors == 1)
    s = w.stats()
    assert s.last_error is not None
    told = past_the_bound("write", "write", rig.day, "0.3", "(harness=h run_id=2 seq=2)")
    assert told.fullmatch(s.last_error), s.last_error
    assert rig.files.calls["sync"] == 1 and rig.commits.seqs == [1]
    w.flush()
    rig.commits.wait_for(2)
    assert rig.disk().seqs == [1, 2] and w.stats().append_errors == 1


def test_a_failing_commit_callback_does_not_stop_durability(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A bug on the reader side (index, feed) is logged; the caller is still acknowledged
    and the writer goes on."""
    make_private_dir(str(tmp_path / "l"))
    calls: list[list[int]] = []

    def broken(entries: list[Entry]) -> None:
        calls.append([e.seq for e in entries])
        raise RuntimeError("index bug")

    w = Writer(_DaySealer(str(tmp_path / "l")), files=FaultyFiles(), on_commit=broken,
               next_seq=1, head_hash=ZERO_HASH)
    try:
        with caplog.at_level(logging.ERROR, logger="harness.ledger"):
            assert w.append(line(run_id=1), harness="h", run_id=1) == 1
            assert w.append(line(run_id=2), harness="h", run_id=2) == 2
    finally:
        w.close(timeout=5.0)
    assert calls == [[1], [2]]
    assert read_disk(tmp_path / "l" / f"{DAY}.jsonl").seqs == [1, 2]
    assert [r.getMessage() for r in caplog.records] == [
        "ledger: commit callback failed (seq 1)", "ledger: commit callback failed (seq 2)"
    ]
    assert w.stats().append_errors == 0


def _thread_cpu(w: Writer) -> float:
    """CPU seconds the writer's thread has used so far."""
    tid = w._thread.native_id
    t = next(t for t in psutil.Process().threads() if t.id == tid)
    return float(t.user_time + t.system_time)


def test_buffered_lines_wait_for_flush_every_then_are_synced_unasked(
    make_rig: Callable[..., Rig],
) -> None:
    rig = make_rig(flush_every=3.0)
    w = rig.writer
    warm(rig)
    t0 = time.monotonic()
    w.enqueue(line(run_id=2), sync=False, harness="h", run_id=2)
    w.enqueue(line(run_id=3), sync=False, harness="h", run_id=3)
    cpu0 = _thread_cpu(w)
    time.sleep(1.0)
    assert (rig.files.calls["sync"], rig.commits.seqs) == (1, [1])
    # Waiting for the deadline is a timed sleep, not a loop that looks again and again.
    assert _thread_cpu(w) - cpu0 < 0.1
    rig.commits.wait_for(3)
    assert time.monotonic() - t0 >= 3.0
    assert (rig.files.calls["sync"], rig.commits.batches[-1]) == (2, [2, 3])


@pytest.mark.parametrize("buffered", [False, True], ids=["short-pass", "general-pass"])
def test_a_finished_pass_is_not_mistaken_for_a_stuck_one(
    make_rig: Callable[..., Rig], buffered: bool
) -> None:
    """Fail-fast looks at how long the I/O under way has run; once a pass is over there
    is none, however long ago it began."""
    rig = make_rig(sync_timeout=0.3)
    w = rig.writer
    warm(rig)
    if buffered:
        w.enqueue(line(run_id=2), sync=False, harness="h", run_id=2)
        w.flush()
        rig.commits.wait_for(2)
    else:
        assert w.append(line(run_id=2), harness="h", run_id=2) == 2
    time.sleep(0.5)
    assert w.append(line(run_id=3), harness="h", run_id=3) == 3
    assert w.stats().append_errors == 0


def test_retries_of_a_failing_disk_back_off_doubling_up_to_retry_max(
    make_rig: Callable[..., Rig],
) -> None:
    """Retries at about 0, 0.05, 0.15, 0.35, 0.75 and 1.15 s: five in the first second,
    where a fixed 50 ms would make twenty and no backoff thousands."""
    rig = make_rig(retry_min=0.05, retry_max=0.4)
    w = rig.writer
    warm(rig)
    rig.files.inject("write", errno=errno.EIO)
    before = rig.files.calls["write"]
    w.enqueue(line(run_id=2), sync=False, harness="h", run_id=2)
    w.flush()
    time.sleep(1.0)
    attempts = rig.files.calls["write"] - before
    assert 3 <= attempts <= 8, attempts
    rig.files.clear("write")
    w.flush()
    rig.commits.wait_for(2)


@pytest.mark.parametrize("how", ["close", "flush"])
def test_close_and_flush_cut_short_a_backoff_set_before_them(
    make_rig: Callable[..., Rig], how: str
) -> None:
    """The disk failed long enough to push the retry far out; it then recovers. close()
    drains the queue within its own timeout, and flush() syncs it, instead of waiting
    out the backoff."""
    rig = make_rig(retry_min=30.0, retry_max=30.0)
    w = rig.writer
    warm(rig)
    rig.files.inject("write", errno=errno.ENOSPC, times=1)
    with pytest.raises(LedgerUnavailable, match="No space left"):
        w.append(line(run_id=2), harness="h", run_id=2)
    w.enqueue(line(run_id=3), sync=False, harness="h", run_id=3)
    t0 = time.monotonic()
    if how == "close":
        w.close(timeout=5.0)  # raises if anything is left queued
    else:
        w.flush()
        rig.commits.wait_for(3)
    assert time.monotonic() - t0 < 5.0
    assert rig.disk().seqs == [1, 2, 3]
    assert rig.commits.batches[-1] == [2, 3]



def time_out_line_3(rig: Rig) -> None:
    """Line 2 buffered and flushed into a slow sync (0.6 s); then a synced append of line 3
    times out (bound 1 s) in the sync after it, which hangs until the test's end."""
    w = rig.writer
    rig.files.inject("sync", delay=0.6, times=1)
    w.enqueue(line(run_id=2), sync=False, harness="h", run_id=2)
    w.flush()
    wait_until(lambda: rig.files.calls["sync"] == 2)  # in the slow sync
    assert rig.files.inject("sync", hang=True) is not None
    with pytest.raises(LedgerUnavailable, match=r"not synced within 1s"):
        w.append(line(run_id=3), harness="h", run_id=3)
    # Line 3's sync begins (within the bound, unless a loaded machine is late) and hangs.
    wait_until(lambda: rig.files.calls["sync"] == 3)


def test_a_caller_behind_one_that_timed_out_fails_fast_though_the_sync_began_late(
    make_rig: Callable[..., Rig],
) -> None:
    """Caller A's line waits out a slow pass before its own sync starts, and hangs; A
    times out. B, arriving then, sees a sync under way for less than the bound, but A's
    line is still the head: B fails at once instead of waiting out a second bound."""
    rig = make_rig(sync_timeout=1.0)
    w = rig.writer
    warm(rig)
    time_out_line_3(rig)  # A's line
    with pytest.raises(LedgerUnavailable, match="queued behind a failing write") as info:
        w.append(line(run_id=4), harness="h", run_id=4)
    assert info.value.seq == 4
    rig.files.clear("sync")
    rig.commits.wait_for(4)
    assert rig.disk().seqs == [1, 2, 3, 4]


def test_close_names_the_first_line_it_could_not_drain(make_rig: Callable[..., Rig]) -> None:
    rig = make_rig()
    w = rig.writer
    warm(rig)
    rig.files.inject("write", errno=errno.EROFS)
    w.enqueue(line(run_id=7, harness="nightly"), sync=False, harness="nightly", run_id=7)
    with pytest.raises(LedgerUnavailable) as info:
        w.close(timeout=0.3)
    assert str(info.value) == ("closed with 1 line(s) still queued (not durable) "
                               "(harness=nightly run_id=7 seq=2)")


def test_an_open_file_whose_sync_hangs_bounds_callers_and_counts_the_late_sync(
    make_rig: Callable[..., Rig],
) -> None:
    rig = make_rig(sync_timeout=0.5)
    w = rig.writer
    warm(rig)
    rig.files.inject("sync", hang=True)
    t0 = time.monotonic()
    with pytest.raises(LedgerUnavailable, match=r"not synced within 0\.5s"):
        w.append(line(run_id=2), harness="h", run_id=2)
    assert 0.25 <= time.monotonic() - t0 <= 5.0
    with pytest.raises(LedgerUnavailable):
        w.append(line(run_id=3), harness="h", run_id=3)
    assert rig.commits.seqs == [1]
    release_past_the_bound(rig, 0.5, call=2)  # warm's sync was the first
    rig.commits.wait_for(3)
    assert rig.commits.seqs == [1, 2, 3]
    assert rig.disk().seqs == [1, 2, 3]
    s = settled(w, lambda s: (s.queued, s.degraded, s.append_errors) == (0, False, 1))
    assert (s.queued, s.degraded, s.append_errors) == (0, False, 1)
    assert s.last_error is not None and "seq=2" in s.last_error and "bound" in s.last_error


# -- 5./6. hung and slow syncs -------------------------------------------------------------


def test_hung_sync_bounds_callers_and_commits_both_lines_when_released(
    make_rig: Callable[..., Rig],
) -> None:
    timeout = 3.0  # long enough that the second caller's fail-fast reads so under load
    rig = make_rig(sync_timeout=timeout)
    w = rig.writer
    rig.files.inject("sync", hang=True)

    t0 = time.monotonic()
    with pytest.raises(LedgerUnavailable, match=rf"not synced within {timeout:g}s") as exc:
        w.append(line(run_id=1), harness="h", run_id=1)
    elapsed = time.monotonic() - t0
    assert 0.5 * timeout <= elapsed <= 10 * timeout
    assert exc.value.seq == 1

    t0 = time.monotonic()
    with pytest.raises(LedgerUnavailable) as second:
        w.append(line(run_id=2), harness="h", run_id=2)
    assert time.monotonic() - t0 < 0.5 * timeout, "the second caller waited out the bound"
    assert second.value.seq == 2
    assert rig.files.calls["sync"] == 1  # still stuck in the first one
    assert rig.commits.batches == []
    # The hang is one append error, counted while it lasts: the first caller's timeout and
    # the second one's fail-fast are not errors of their own.
    wait_until(lambda: w.stats().append_errors > 0)
    s = w.stats()
    assert (s.queued, s.next_seq, s.append_errors, s.degraded) == (2, 3, 1, True)
    assert s.last_error == (f"ledger write and sync of {rig.day} has not returned within "
                            f"the {timeout:g}s bound (harness=h run_id=1 seq=1)")

    release_past_the_bound(rig, timeout, call=1)
    rig.commits.wait_for(2)
    assert rig.commits.seqs == [1, 2]
    d = rig.disk()
    assert d.seqs == [1, 2]
    assert_chain(d)
    s = settled(w, lambda s: (s.queued, s.degraded, s.append_errors) == (0, False, 1))
    assert (s.queued, s.degraded, s.append_errors) == (0, False, 1)  # not counted again
    # And the ledger is healthy again: the next caller waits normally and succeeds.
    assert w.append(line(run_id=3), harness="h", run_id=3) == 3


def ledger_log(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [f"{r.levelname} {r.getMessage()}" for r in caplog.records
            if r.name == "harness.ledger"]


def test_a_sync_that_hangs_is_counted_logged_and_degraded_when_the_bound_passes(
    make_rig: Callable[..., Rig], caplog: pytest.LogCaptureFixture,
) -> None:
    """REQ-6: a sync that has not returned within the bound has failed then, though the
    writer thread is stuck in it and nobody waits for its line: counted, logged with its
    record and the ledger degraded while it hangs, and counted once however long it hangs.
    When it returns, the episode's end is logged, nothing more is counted, and every line
    is on disk once, in order."""
    caplog.set_level(logging.WARNING, logger="harness.ledger")
    rig = make_rig(sync_timeout=0.5, flush_every=30.0)
    w = rig.writer
    warm(rig)
    rig.files.inject("sync", hang=True)
    w.enqueue(line(run_id=2, harness="nightly"), sync=False, harness="nightly", run_id=2)
    w.flush()  # its sync hangs, and no caller waits for it
    wait_until(lambda: w.stats().append_errors > 0)
    hung = (f"ledger write and sync of {rig.day} has not returned within the 0.5s bound "
            "(harness=nightly run_id=2 seq=2)")
    s = w.stats()
    assert (s.queued, s.append_errors, s.degraded, s.last_error) == (1, 1, True, hung)
    assert rig.files.calls["sync"] == 2  # still in line 2's
    assert ledger_log(caplog) == [f"ERROR {hung}; 1 line(s) queued behind it"]
    why = w.stuck("nightly", 2)
    assert why is not None
    assert re.fullmatch(r"a ledger write or sync has not returned for [0-9]+s", why)
    # A synced append behind it fails at once, and is no error of the ledger's own.
    with pytest.raises(LedgerUnavailable, match="queued behind a failing write") as info:
        w.append(line(run_id=3), harness="h", run_id=3)
    assert info.value.seq == 3
    time.sleep(1.0)  # two bounds more: the same hang is not counted again
    s = w.stats()
    assert (s.queued, s.append_errors, s.degraded) == (2, 1, True)

    rig.files.clear("sync")
    rig.commits.wait_for(3)
    s = settled(w, lambda s: (s.queued, s.append_errors, s.degraded, s.last_error)
                == (0, 1, False, hung))
    assert (s.queued, s.append_errors, s.degraded, s.last_error) == (0, 1, False, hung)
    assert rig.commits.batches == [[1], [2], [3]]
    d = rig.disk()
    assert (d.seqs, d.fragments) == ([1, 2, 3], [])
    assert_chain(d)
    first, end = ledger_log(caplog)
    assert first == f"ERROR {hung}; 1 line(s) queued behind it"
    assert re.fullmatch(f"WARNING ledger: writing {re.escape(str(rig.day))} again after "
                        r"1 failure\(s\) in [0-9.]+s", end), end
    assert w.append(line(run_id=4), harness="h", run_id=4) == 4


def test_a_hung_sync_that_then_fails_is_one_failure_retried_in_order(
    make_rig: Callable[..., Rig], caplog: pytest.LogCaptureFixture,
) -> None:
    """A sync hangs past the bound (counted then) and then fails: its error is the same
    failure of the same line, logged but not counted again. The line is cut back and
    written again with the one queued behind it: each once, in order."""
    caplog.set_level(logging.WARNING, logger="harness.ledger")
    rig = make_rig(sync_timeout=0.5)
    w = rig.writer
    warm(rig)
    # The sync under way fails once released (its fault was armed when it began); the
    # fault is gone by then, so the retry succeeds.
    rig.files.inject("sync", errno=errno.EIO, hang=True)
    e2 = w.enqueue(line(run_id=2, harness="nightly"), sync=True, harness="nightly", run_id=2)
    wait_until(lambda: w.stats().append_errors > 0)
    hung = (f"ledger write and sync of {rig.day} has not returned within the 0.5s bound "
            "(harness=nightly run_id=2 seq=2)")
    s = w.stats()
    assert (s.queued, s.append_errors, s.degraded, s.last_error) == (1, 1, True, hung)
    e3 = w.enqueue(line(run_id=3), sync=True, harness="h", run_id=3)
    rig.files.clear("sync")
    rig.commits.wait_for(3)
    assert (w.wait(e2), w.wait(e3)) == (2, 3)
    failed = (f"ledger sync of {rig.day} failed: Input/output error (injected on sync) "
              "(harness=nightly run_id=2 seq=2)")
    s = settled(w, lambda s: (s.queued, s.append_errors, s.degraded, s.last_error)
                == (0, 1, False, failed))
    assert (s.queued, s.append_errors, s.degraded, s.last_error) == (0, 1, False, failed)
    d = rig.disk()
    assert (d.seqs, d.fragments) == ([1, 2, 3], [])
    assert_chain(d)
    assert rig.commits.seqs == [1, 2, 3]
    wait_until(lambda: len(ledger_log(caplog)) == 3)  # the episode's end follows the commit
    hang_line, fail_line, end = ledger_log(caplog)
    assert hang_line == f"ERROR {hung}; 1 line(s) queued behind it"
    assert fail_line == (f"ERROR {failed}; 2 line(s) queued, retrying in order (already "
                         "counted when it passed its bound)")
    assert re.fullmatch(f"WARNING ledger: writing {re.escape(str(rig.day))} again after "
                        r"1 failure\(s\) in [0-9.]+s", end), end


@pytest.mark.parametrize(("timeout", "ok"), [(1.0, True), (0.2, False)], ids=["fast", "slow"])
def test_slow_sync_succeeds_or_times_out_and_the_line_lands_once(
    make_rig: Callable[..., Rig], timeout: float, ok: bool
) -> None:
    rig = make_rig(sync_timeout=timeout)
    t0 = time.monotonic()
    if ok:
        delay = 0.05
        rig.files.inject("sync", delay=delay)
        assert rig.writer.append(line(), harness="h", run_id=1) == 1
        assert time.monotonic() - t0 >= delay
        assert rig.commits.batches == [[1]]
    else:
        # The slow sync returns only when the test lets it (or WAIT later, should the
        # caller wait for it): a sync that took a fixed 0.6 s was not slow enough for a
        # caller a loaded machine woke late, and the check that it gave up first failed.
        rig.files.inject("sync", hang=True)
        late = threading.Timer(WAIT, rig.files.clear, ("sync",))
        late.start()
        with pytest.raises(LedgerUnavailable, match="stays queued"):
            rig.writer.append(line(), harness="h", run_id=1)
        assert time.monotonic() - t0 >= 0.5 * timeout
        assert not late.finished.is_set(), "the caller waited for the slow sync"
        late.cancel()
        assert rig.commits.batches == []
        release_past_the_bound(rig, timeout, call=1)
        rig.commits.wait_for(1)  # the late sync still commits it
        assert rig.commits.batches == [[1]]
    d = rig.disk()
    assert d.seqs == [1]
    assert d.fragments == []
    assert rig.files.calls["sync"] == 1
    assert rig.files.calls["write"] == 1
    s = settled(rig.writer, lambda s: (s.queued, s.degraded, s.append_errors)
                == (0, False, 0 if ok else 1))
    # A sync past the bound is logged and counted even though it then succeeded (REQ-6).
    assert (s.queued, s.degraded, s.append_errors) == (0, False, 0 if ok else 1)


# -- 7. group commit -----------------------------------------------------------------------


def test_concurrent_synced_appends_share_syncs(make_rig: Callable[..., Rig]) -> None:
    rig = make_rig()
    w = rig.writer
    rig.files.inject("sync", delay=0.005)
    threads_n, per = 16, 50
    got: dict[int, list[int]] = {}
    failures: list[BaseException] = []
    start = threading.Barrier(threads_n)

    def worker(t: int) -> None:
        try:
            start.wait()
            got[t] = [
                w.append(line(run_id=t * 1000 + k, harness=f"h{t}"), harness=f"h{t}")
                for k in range(per)
            ]
        except BaseException as exc:  # surfaced by the assertion below
            failures.append(exc)

    ts = [threading.Thread(target=worker, args=(t,)) for t in range(threads_n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    assert failures == []
    total = threads_n * per
    d = rig.disk()
    assert d.seqs == list(range(1, total + 1))
    assert d.fragments == []
    assert_chain(d)
    assert rig.commits.seqs == list(range(1, total + 1))
    # Every caller got back the seq its own line carries on disk, in its own order.
    by_run = {(o["harness"], o["run_id"]): o["seq"] for o in d.objs}
    for t, seqs in got.items():
        assert seqs == [by_run[(f"h{t}", t * 1000 + k)] for k in range(per)]
        assert seqs == sorted(seqs)
    s = w.stats()
    assert s.syncs == rig.files.calls["sync"]
    assert s.syncs < total // 2, f"{s.syncs} syncs for {total} lines: not shared"
    assert (s.queued, s.lines_written, s.next_seq) == (0, total, total + 1)


# -- 8. buffered (sync=False) lines --------------------------------------------------------


def test_buffered_lines_are_synced_within_flush_every(make_rig: Callable[..., Rig]) -> None:
    flush_every = 3.0
    rig = make_rig(flush_every=flush_every)
    w = rig.writer
    t0 = time.monotonic()
    assert [w.append(line(run_id=i), sync=False) for i in (1, 2, 3)] == [1, 2, 3]
    assert time.monotonic() - t0 < 0.5 * flush_every  # not held until the flush
    wait_until(lambda: w.stats().lines_written == 3)
    assert rig.commits.batches == []  # written, not yet durable: not committed
    assert rig.files.calls["sync"] == 0
    rig.commits.wait_for(3)
    assert rig.commits.times[0] - t0 >= flush_every
    assert rig.commits.seqs == [1, 2, 3]
    assert rig.files.calls["sync"] == 1
    d = rig.disk()
    assert d.seqs == [1, 2, 3]
    assert_chain(d)
    assert w.stats().queued == 0


def test_a_synced_line_makes_earlier_buffered_lines_durable_first(
    make_rig: Callable[..., Rig],
) -> None:
    rig = make_rig(flush_every=30.0)
    w = rig.writer
    w.append(line(run_id=1, type_="updated"), sync=False)
    w.append(line(run_id=1, type_="updated"), sync=False)
    wait_until(lambda: w.stats().lines_written == 2)
    time.sleep(0.05)  # long enough for a wrong early commit to show
    assert rig.commits.batches == []
    assert w.stats().queued == 2
    assert w.append(line(run_id=1, type_="closed"), harness="h", run_id=1) == 3
    assert rig.commits.batches == [[1, 2, 3]]
    assert rig.files.calls["sync"] == 1
    d = rig.disk()
    assert [(o["seq"], o["type"]) for o in d.objs] == [
        (1, "updated"), (2, "updated"), (3, "closed"),
    ]
    assert_chain(d)


def _on(day: str, run_id: int) -> dict[str, Any]:
    return {**line(run_id=run_id, type_="updated"), "at": f"{day}T10:00:00.000000000Z"}


class OrderFiles(RecordingFiles):
    """RecordingFiles that also notes, in order, each write and fdatasync and the day
    file it went to."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[tuple[str, str]] = []

    @staticmethod
    def _name(fd: int) -> str:
        return os.path.basename(os.readlink(f"/proc/self/fd/{fd}")).removesuffix(" (deleted)")

    def write(self, fd: int, data: bytes) -> int:
        self.ops.append(("write", self._name(fd)))
        return super().write(fd, data)

    def sync(self, fd: int) -> None:
        self.ops.append(("sync", self._name(fd)))
        super().sync(fd)


def assert_no_file_written_past_another_unsynced(ops: list[tuple[str, str]]) -> None:
    """A power cut keeps or loses each file's unsynced lines on its own: a write to one
    file while another holds lines written since its last sync could leave a later seq
    on disk and an earlier one lost, a gap in the chain for good."""
    dirty: set[str] = set()
    for op, name in ops:
        if op == "write":
            assert dirty <= {name}, f"{name} written while {sorted(dirty)} unsynced: {ops}"
            dirty.add(name)
        else:
            dirty.discard(name)


def test_buffered_lines_for_three_days_are_each_synced_before_the_next_days_file_takes_one(
    make_rig: Callable[..., Rig],
) -> None:
    """A power-cut hunt found a pass writing yesterday's buffered line and today's, then
    syncing both: a cut between kept today's (its file synced first, or its pages flushed
    first) and lost yesterday's, and verify failed on that ledger for ever. Each day's
    lines are now synced (and committed) before the next day's file takes a line; the
    last day's buffered line waits for its flush as before."""
    files = OrderFiles()
    rig = make_rig(flush_every=30.0, files=files)
    w = rig.writer
    days = ["2026-11-28", "2026-11-29", "2026-11-30"]
    for rid, day in enumerate(days, 1):
        w.append(_on(day, rid), sync=False)
    wait_until(lambda: w.stats().lines_written == 3)
    assert rig.commits.batches == [[1], [2]]
    assert w.stats().queued == 1
    w.append(_on(days[0], 4), sync=False)  # a clock stepped back
    wait_until(lambda: w.stats().lines_written == 4)
    assert w.append(_on(days[2], 5)) == 5
    assert rig.commits.batches == [[1], [2], [3], [4], [5]]
    assert [read_disk(rig.directory / f"{d}.jsonl").seqs for d in days] == [[1, 4], [2], [3, 5]]
    f0, f1, f2 = (f"{d}.jsonl" for d in days)
    assert files.ops == [("write", f0), ("sync", f0), ("write", f1), ("sync", f1),
                         ("write", f2), ("sync", f2), ("write", f0), ("sync", f0),
                         ("write", f2), ("sync", f2)]
    assert_no_file_written_past_another_unsynced(files.ops)


def test_a_line_held_by_a_dropped_handle_on_a_deleted_file_is_synced_before_the_next_days(
    make_rig: Callable[..., Rig],
) -> None:
    """Day 1's sync and then its cut-back failed, so its handle was dropped holding line
    1, and the file was deleted. Lines for day 2 (2) and day 1 (3) come: line 1 is written
    again to a new day-1 file and synced before day 2's file takes line 2, and line 3
    follows it there; each file holds its seqs in order, each once."""
    days = ["2026-11-30", "2026-12-01"]
    files = OrderFiles()
    rig = make_rig(flush_every=30.0, files=files)
    w = rig.writer
    w.append(_on(days[0], 1), sync=False)
    wait_until(lambda: w.stats().lines_written == 1)
    files.inject("sync", errno=errno.EIO, times=1)
    files.inject("truncate", errno=errno.EIO, times=1)
    w.flush()
    wait_until(lambda: files.calls["truncate"] == 1 and w.stats().append_errors == 1)
    (rig.directory / f"{days[0]}.jsonl").unlink()
    files.ops.clear()
    w.append(_on(days[1], 2), sync=False)
    w.append(_on(days[0], 3), sync=False)
    w.flush()
    rig.commits.wait_for(2)
    w.close(timeout=WAIT)
    assert rig.commits.batches == [[1], [2], [3]]
    assert [read_disk(rig.directory / f"{d}.jsonl").seqs for d in days] == [[1, 3], [2]]
    f0, f1 = (f"{d}.jsonl" for d in days)
    assert files.ops == [("write", f0), ("sync", f0), ("write", f1), ("sync", f1),
                         ("write", f0), ("sync", f0)]
    assert_no_file_written_past_another_unsynced(files.ops)


def test_flush_syncs_buffered_lines_now(make_rig: Callable[..., Rig]) -> None:
    rig = make_rig(flush_every=30.0)
    rig.writer.append(line(), sync=False)
    rig.writer.flush()
    rig.commits.wait_for(1)
    assert rig.commits.batches == [[1]]
    assert rig.disk().seqs == [1]


def test_buffered_appends_never_wait_for_a_stuck_disk(make_rig: Callable[..., Rig]) -> None:
    """REQ-6's exception: a closed line and the restart's opened line are queued, in order,
    without waiting, even while the writer is stuck in a sync."""
    rig = make_rig(sync_timeout=0.2, flush_every=30.0)
    w = rig.writer
    rig.files.inject("sync", hang=True)
    with pytest.raises(LedgerUnavailable):
        w.append(line(run_id=1), harness="h", run_id=1)
    # Waiting on the hung sync, either would raise at the bound or hang: no clock needed.
    assert w.append(line(run_id=1, type_="closed"), sync=False) == 2
    assert w.append(line(run_id=2, type_="opened"), sync=False) == 3
    rig.files.clear("sync")
    w.flush()
    rig.commits.wait_for(3)
    d = rig.disk()
    assert [(o["seq"], o["run_id"], o["type"]) for o in d.objs] == [
        (1, 1, "opened"), (2, 1, "closed"), (3, 2, "opened"),
    ]
    assert rig.commits.seqs == [1, 2, 3]


# -- day files -----------------------------------------------------------------------------


def test_lines_go_to_the_file_of_their_utc_day_and_the_chain_crosses_files(
    make_rig: Callable[..., Rig],
) -> None:
    rig = make_rig()
    w = rig.writer
    days = ["2026-11-30", "2026-11-30", "2026-12-01", "2026-12-01", "2026-12-02"]
    stamps = ["T23:59:59.999999999Z", "T23:59:59.999999999Z", "T00:00:00.000000000Z",
              "T12:00:00.000000000Z", "T00:00:00.000000000Z"]
    for i, (day, stamp) in enumerate(zip(days, stamps, strict=True), start=1):
        obj = line(run_id=i)
        obj["at"] = day + stamp
        assert w.append(obj, harness="h", run_id=i) == i
    per_day = {day: read_disk(rig.directory / f"{day}.jsonl") for day in sorted(set(days))}
    assert {day: d.seqs for day, d in per_day.items()} == {
        "2026-11-30": [1, 2], "2026-12-01": [3, 4], "2026-12-02": [5],
    }
    prev = ZERO_HASH
    for d in per_day.values():
        assert d.fragments == []
        assert_chain(d, first_prev=prev)
        prev = d.objs[-1]["hash"]
        assert all(o["at"][:10] == d.objs[0]["at"][:10] for o in d.objs)
    assert sorted(p.name for p in rig.directory.iterdir()) == [
        "2026-11-30.jsonl", "2026-12-01.jsonl", "2026-12-02.jsonl",
    ]
    # One directory sync per file this writer created.
    assert rig.files.dir_syncs == [str(rig.directory)] * 3
    assert rig.commits.seqs == [1, 2, 3, 4, 5]


class _FailSyncOf(RecordingFiles):
    """Fails the fdatasync of one named file, once."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name

    def sync(self, fd: int) -> None:
        if self.name and os.readlink(f"/proc/self/fd/{fd}").endswith(self.name):
            self.name = ""
            self.calls["sync"] += 1
            raise OSError(errno.EIO, "Input/output error (injected on sync)")
        super().sync(fd)


@pytest.mark.parametrize("fault", [None, "open", "sync"])
def test_one_pass_across_midnight_puts_each_line_in_its_own_day_file(
    make_rig: Callable[..., Rig], fault: str | None
) -> None:
    """Lines of two days queued behind one sync go out in one pass, each run of lines to
    its own file, though today's file is already open. When the new day's file cannot be
    opened, the lines already written are not written again; when only its sync fails,
    the line after it in today's file, though synced, waits its turn to be committed."""
    rig = make_rig(files=_FailSyncOf("2026-12-01.jsonl") if fault == "sync" else None)
    w = rig.writer
    hold_in_a_sync(rig)
    tomorrow = line(run_id=4)
    tomorrow["at"] = "2026-12-01T00:00:00.000000001Z"
    w.enqueue(line(run_id=3), sync=False, harness="h", run_id=3)
    w.enqueue(tomorrow, sync=False, harness="h", run_id=4)
    last = w.enqueue(line(run_id=5), sync=True, harness="h", run_id=5)
    if fault == "open":
        rig.files.inject("open", errno=errno.EACCES, times=1)
    rig.files.clear("sync")
    if fault:
        with pytest.raises(LedgerUnavailable, match=r"Permission denied|Input/output"):
            w.wait(last)
    else:
        w.wait(last)
    rig.commits.wait_for(5)
    assert rig.commits.seqs == [1, 2, 3, 4, 5]
    today, next_day = rig.disk(), read_disk(rig.directory / "2026-12-01.jsonl")
    assert (today.seqs, next_day.seqs) == ([1, 2, 3, 5], [4])
    assert today.fragments == [] and next_day.fragments == []
    merged = sorted(zip(today.lines + next_day.lines, today.objs + next_day.objs,
                        strict=True), key=lambda p: p[1]["seq"])
    assert_chain(Disk(b"", [raw for raw, _ in merged], [obj for _, obj in merged]))
    assert rig.files.calls["open"] == (2 if fault is None else 3)


def _open_in(directory: Path) -> list[str]:
    """Names of the files in `directory` this process holds open."""
    names = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if os.path.dirname(target) == str(directory):
            names.append(os.path.basename(target))
    return sorted(names)


def test_the_writer_keeps_two_day_files_open_at_most_and_none_after_close(
    make_rig: Callable[..., Rig],
) -> None:
    rig = make_rig()
    w = rig.writer
    for i, day in enumerate(("2026-11-29", "2026-11-30", "2026-12-01", "2026-12-02"), 1):
        obj = line(run_id=i)
        obj["at"] = f"{day}T12:00:00.000000000Z"
        assert w.append(obj, harness="h", run_id=i) == i
    assert _open_in(rig.directory) == ["2026-12-01.jsonl", "2026-12-02.jsonl"]
    w.close()
    assert _open_in(rig.directory) == []


def test_seq_and_chain_continue_from_where_the_ledger_left_off(
    make_rig: Callable[..., Rig],
) -> None:
    head = "ab" * 32
    rig = make_rig(next_seq=813, head_hash=head)
    assert rig.writer.append(line()) == 813
    d = rig.disk()
    assert d.seqs == [813]
    assert_chain(d, first_prev=head)
    assert rig.writer.head == (813, d.objs[0]["hash"])


# -- a day file deleted, renamed or replaced by hand while open ------------------------------


@pytest.mark.parametrize("how", ["deleted", "renamed", "replaced"])
def test_lines_synced_into_a_file_gone_from_its_path_are_written_again(
    make_rig: Callable[..., Rig], how: str
) -> None:
    """Someone frees space with `rm`, moves the file aside, or restores another copy over
    it while the daemon runs. The writer's handle still points at the old file, so a
    line synced through it is on no path a reader looks at: it is written again to what
    the path names now, and synced with that directory, before it is acknowledged.
    Lines acknowledged before the change went with the old file."""
    rig = make_rig()
    # A deleted or replaced file is seen at every sync; a file renamed away by the path
    # lookup, at most once a second (its lines meanwhile stay in it): here, every time.
    rig.writer.name_check_every = 0.0
    warm(rig)
    rig.writer.append(line(run_id=5), harness="h", run_id=5, sync=False)  # buffered
    wait_until(lambda: rig.disk().seqs == [1, 2])
    aside = rig.directory / "aside.jsonl"
    if how == "deleted":
        rig.day.unlink()
    elif how == "renamed":
        rig.day.rename(aside)
    else:
        other = rig.directory / "restored.tmp"
        other.write_bytes(b'{"restored":true,"seq":0}\n')
        other.rename(rig.day)
    rig.files.dir_syncs.clear()
    assert rig.writer.append(line(run_id=6), harness="h", run_id=6) == 3
    disk = rig.disk()
    # seq 2 was buffered, never acknowledged: it follows seq 3's way, not the old file's.
    assert disk.seqs == ([0] if how == "replaced" else []) + [2, 3]
    assert rig.commits.seqs == [1, 2, 3]
    assert rig.files.dir_syncs == [str(rig.directory)]
    if how == "replaced":
        assert disk.raw.startswith(b'{"restored":true,"seq":0}\n')
    if how == "renamed":
        assert read_disk(aside).seqs == [1, 2, 3]  # what went to the old file stays there
    if how != "replaced":  # a new file, created 0600 like every other
        assert stat.S_IMODE(rig.day.stat().st_mode) == 0o600
    # The handle now is the new file's: the next line goes after seq 3, once.
    assert rig.writer.append(line(run_id=7), harness="h", run_id=7) == 4
    assert rig.disk().seqs == ([0] if how == "replaced" else []) + [2, 3, 4]


class _FullAfterDelete(RecordingFiles):
    """The disk fills the moment the writer finds its file deleted: the rewrite fails."""

    def linked(self, fd: int) -> bool:
        there = super().linked(fd)
        if not there:
            self.inject("write", errno=errno.ENOSPC, times=1)
        return there


def test_a_rewrite_after_a_deleted_file_that_fails_is_retried_once(
    make_rig: Callable[..., Rig],
) -> None:
    """The new file cannot take the rewrite (ENOSPC): the caller hears of it, the line
    stays queued, and the retry puts it in the new file once; the count of lines written
    stays the count of lines in files."""
    rig = make_rig(files=_FullAfterDelete())
    warm(rig)
    rig.day.unlink()
    with pytest.raises(LedgerUnavailable, match="No space left on device"):
        rig.writer.append(line(run_id=2), harness="h", run_id=2)
    rig.commits.wait_for(2)
    assert rig.disk().seqs == [2]
    s = settled(rig.writer, lambda s: (s.queued, s.lines_written, s.degraded) == (0, 2, False))
    assert (s.queued, s.lines_written, s.degraded) == (0, 2, False)


def test_a_file_renamed_away_is_noticed_within_the_name_check_interval(
    make_rig: Callable[..., Rig],
) -> None:
    """Renamed away, the file keeps its name elsewhere, so the lines written meanwhile
    are not lost (they are in it); the path lookup that notices runs at most every
    `name_check_every` seconds, and the next sync after that writes to the path again."""
    rig = make_rig()
    rig.writer.name_check_every = 3600.0
    warm(rig)
    aside = rig.directory / "aside.jsonl"
    rig.day.rename(aside)
    assert rig.writer.append(line(run_id=2), harness="h", run_id=2) == 2
    assert read_disk(aside).seqs == [1, 2] and not rig.day.exists()
    rig.writer.name_check_every = 0.0
    assert rig.writer.append(line(run_id=3), harness="h", run_id=3) == 3
    assert read_disk(aside).seqs == [1, 2, 3]
    assert rig.disk().seqs == [3]


class _DriftingInodes(RecordingFiles):
    """A file system whose inode numbers do not hold still (some FUSE mounts): a path
    never seems to name the file just opened from it."""

    def names(self, path: str, identity: tuple[int, int]) -> bool:
        return False


def test_a_file_system_with_drifting_inodes_writes_each_line_once(
    make_rig: Callable[..., Rig], caplog: pytest.LogCaptureFixture
) -> None:
    """Without the guard every pass would take the file for deleted and write its lines
    again into the same file: each seq twice."""
    rig = make_rig(files=_DriftingInodes())
    for i in range(1, 4):
        assert rig.writer.append(line(run_id=i), harness="h", run_id=i) == i
    assert rig.disk().seqs == [1, 2, 3]
    assert "does not name the file just opened from it" in caplog.text


# -- 9. close ------------------------------------------------------------------------------


def test_close_drains_buffered_lines_and_refuses_later_appends(
    make_rig: Callable[..., Rig],
) -> None:
    rig = make_rig(flush_every=30.0)
    w = rig.writer
    for i in (1, 2, 3):
        w.append(line(run_id=i, type_="updated"), sync=False)
    w.close(timeout=5.0)
    d = rig.disk()
    assert d.seqs == [1, 2, 3]
    assert_chain(d)
    assert rig.commits.seqs == [1, 2, 3]
    assert rig.files.calls["sync"] == 1
    assert w.stats().queued == 0
    with pytest.raises(LedgerClosed) as exc:
        w.append(line(run_id=9), harness="h", run_id=9)
    assert "harness=h run_id=9" in str(exc.value)
    with pytest.raises(LedgerClosed):
        w.enqueue(line(), sync=False)
    assert w.stats().next_seq == 4
    w.close()  # closing twice is harmless
    assert rig.disk().raw == d.raw


def test_close_on_a_dead_disk_names_the_lines_it_could_not_write(
    make_rig: Callable[..., Rig],
) -> None:
    rig = make_rig(flush_every=30.0)
    w = rig.writer
    rig.files.inject("write", errno=errno.EROFS)
    for i in (1, 2, 3):
        w.append(line(run_id=i), sync=False)
    t0 = time.monotonic()
    with pytest.raises(LedgerUnavailable, match=r"closed with 3 line\(s\) still queued") as exc:
        w.close(timeout=0.3)
    assert time.monotonic() - t0 < 0.3 + 10.0  # bounded: the timeout, not the dead disk
    assert exc.value.seq == 1
    assert rig.commits.batches == []
    assert rig.disk().objs == []
    with pytest.raises(LedgerClosed):
        w.append(line(run_id=4), harness="h", run_id=4)


def test_close_is_bounded_while_a_sync_hangs(make_rig: Callable[..., Rig]) -> None:
    rig = make_rig(flush_every=30.0)
    w = rig.writer
    rig.files.inject("sync", hang=True)
    w.append(line(), sync=False)
    w.flush()
    wait_until(lambda: rig.files.calls["sync"] == 1)
    t0 = time.monotonic()
    with pytest.raises(LedgerUnavailable, match=r"closed with 1 line\(s\)"):
        w.close(timeout=0.2)
    assert time.monotonic() - t0 < 0.2 + 10.0  # bounded: the timeout, not the hung sync
    rig.files.clear("sync")  # the stuck sync finishes late; the line is still whole, once
    rig.commits.wait_for(1)
    assert rig.disk().seqs == [1]


# -- 10. oversized lines -------------------------------------------------------------------


def test_an_oversized_line_is_rejected_whole_and_leaves_no_gap(
    make_rig: Callable[..., Rig],
) -> None:
    rig = make_rig()
    w = rig.writer
    assert w.append(line(run_id=1), harness="h", run_id=1) == 1
    head = w.head
    big = line(run_id=2)
    big["reason"] = "x" * (16 * 1024)
    with pytest.raises(LineRejected, match="exceeds the 16384-byte limit") as exc:
        w.append(big, harness="h", run_id=2)
    assert isinstance(exc.value, LedgerCorrupt) and isinstance(exc.value, ValueError)
    assert "harness=h run_id=2" in str(exc.value)
    assert w.head == head
    s = w.stats()
    assert (s.queued, s.next_seq, s.append_errors) == (0, 2, 0)
    assert w.append(line(run_id=3), harness="h", run_id=3) == 2
    d = rig.disk()
    assert d.seqs == [1, 2]
    assert [o["run_id"] for o in d.objs] == [1, 3]
    assert b"xxxx" not in d.raw
    assert_chain(d)


class _BodySealer:
    """A trivial sealer: the line is obj["body"] as is, its "hash" just the seq."""

    def __init__(self, path: str) -> None:
        self.path = path

    def seal(self, obj: dict[str, Any], seq: int, prev: str) -> tuple[bytes, str, str]:
        return obj["body"].encode(), f"{seq}", self.path


def test_the_limit_counts_the_newline(tmp_path: Path) -> None:
    path = tmp_path / "plain.log"
    w = Writer(_BodySealer(str(path)), next_seq=1, head_hash="", max_line=10, retry_min=0.01)
    try:
        assert w.append({"body": "a" * 9}) == 1  # 9 bytes + "\n" = the limit exactly
        with pytest.raises(LineRejected, match="line of 11 bytes exceeds the 10-byte limit"):
            w.append({"body": "b" * 10})
        assert w.append({"body": "c"}) == 2
    finally:
        w.close(timeout=5.0)
    assert path.read_bytes() == b"aaaaaaaaa\nc\n"


# -- 11. torn tails ------------------------------------------------------------------------


def test_next_line_after_a_torn_fragment_starts_on_a_new_line(
    make_rig: Callable[..., Rig],
) -> None:
    first = make_rig()
    first.writer.append(line(run_id=1))
    first.writer.append(line(run_id=2))
    first.writer.close()
    before = first.day.read_bytes()
    fragment = b'{"v":1,"seq":3,"ty'
    with first.day.open("ab") as f:
        f.write(fragment)
    head = read_disk(first.day).objs[-1]["hash"]

    files = RecordingFiles()
    commits = Commits()
    w = Writer(
        _DaySealer(str(first.directory)),
        next_seq=3,
        head_hash=head,
        files=files,
        on_commit=commits,
        retry_min=0.01,
    )
    try:
        assert w.append(line(run_id=3)) == 3
        assert w.append(line(run_id=4)) == 4
    finally:
        w.close()
    e3, e4 = commits.entries
    assert first.day.read_bytes() == before + fragment + b"\n" + e3.data + e4.data
    d = read_disk(first.day)
    assert d.seqs == [1, 2, 3, 4]
    assert d.fragments == [fragment]
    assert_chain(d)  # the fragment is not part of the chain: 3 links to 2
    # The file was there already, left by a writer that may have been killed before it
    # synced the directory: this writer syncs its entry once, before line 3 is durable.
    assert files.dir_syncs == [str(first.directory)]


def test_a_day_file_that_is_one_torn_byte_gets_its_next_line_on_a_new_line(
    tmp_path: Path,
) -> None:
    """The shortest torn tail: a crash a byte into a new day file's first line."""
    directory = tmp_path / "ledger"
    make_private_dir(str(directory))
    day = directory / f"{DAY}.jsonl"
    day.write_bytes(b"{")
    commits = Commits()
    w = Writer(_DaySealer(str(directory)), next_seq=1, head_hash=ZERO_HASH,
               files=RecordingFiles(), on_commit=commits)
    try:
        assert w.append(line(run_id=1)) == 1
    finally:
        w.close()
    (e1,) = commits.entries
    assert day.read_bytes() == b"{\n" + e1.data
    assert read_disk(day).seqs == [1]


def test_a_file_ending_in_a_complete_line_gets_no_blank_line(
    make_rig: Callable[..., Rig],
) -> None:
    first = make_rig()
    first.writer.append(line(run_id=1))
    first.writer.close()
    head = read_disk(first.day).objs[-1]["hash"]
    commits = Commits()
    w = Writer(
        _DaySealer(str(first.directory)), next_seq=2, head_hash=head, on_commit=commits
    )
    try:
        assert w.append(line(run_id=2)) == 2
    finally:
        w.close()
    raw = first.day.read_bytes()
    assert b"\n\n" not in raw
    assert raw.endswith(commits.entries[0].data)
    assert read_disk(first.day).seqs == [1, 2]


# -- 12. modes -----------------------------------------------------------------------------


@pytest.fixture
def umask_022() -> Iterator[None]:
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


@pytest.fixture
def no_chmod(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    calls: list[tuple[Any, ...]] = []
    for name in ("chmod", "fchmod", "lchmod"):
        if hasattr(os, name):
            monkeypatch.setattr(os, name, lambda *a, _n=name, **k: calls.append((_n, *a)))
    return calls


def test_files_are_created_0600_and_dirs_0700_without_chmod(
    tmp_path: Path, umask_022: None, no_chmod: list[tuple[Any, ...]]
) -> None:
    directory = tmp_path / "state" / "harness" / "ledger"
    assert make_private_dir(str(directory)) is True
    assert make_private_dir(str(directory)) is False
    for p in (directory, directory.parent, directory.parent.parent):
        assert os.stat(p).st_mode & 0o777 == 0o700, p
    commits = Commits()
    w = Writer(_DaySealer(str(directory)), next_seq=1, head_hash=ZERO_HASH, on_commit=commits)
    try:
        assert w.append(line()) == 1
    finally:
        w.close()
    day = directory / f"{DAY}.jsonl"
    assert os.stat(day).st_mode & 0o777 == 0o600
    assert read_disk(day).seqs == [1]
    assert no_chmod == []


def test_an_existing_file_keeps_its_mode(
    tmp_path: Path, umask_022: None, no_chmod: list[tuple[Any, ...]]
) -> None:
    day = tmp_path / f"{DAY}.jsonl"
    fd = os.open(day, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o640)
    os.close(fd)
    w = Writer(_DaySealer(str(tmp_path)), next_seq=1, head_hash=ZERO_HASH)
    try:
        w.append(line())
    finally:
        w.close()
    assert os.stat(day).st_mode & 0o777 == 0o640
    assert read_disk(day).seqs == [1]
    assert no_chmod == []


def test_make_private_dir_refuses_a_file_in_the_way(tmp_path: Path) -> None:
    blocker = tmp_path / "ledger"
    blocker.write_bytes(b"")
    with pytest.raises(NotADirectoryError):
        make_private_dir(str(blocker))


# -- the fault layer itself ----------------------------------------------------------------


def test_faulty_files_counts_attempts_and_clears_after_times(tmp_path: Path) -> None:
    ff = FaultyFiles()
    with pytest.raises(ValueError, match="unknown file operation"):
        ff.inject("stat")
    ff.inject("write", errno=errno.ENOSPC, times=2)
    fd, created = ff.open_append(str(tmp_path / "f"))
    try:
        assert created is True
        for _ in range(2):
            with pytest.raises(OSError) as exc:
                ff.write(fd, b"abcd")
            assert exc.value.errno == errno.ENOSPC
        assert ff.write(fd, b"abcd") == 4
        ff.inject("write", errno=errno.ENOSPC, partial=True, times=1)
        with pytest.raises(OSError):
            ff.write(fd, b"wxyz")
        assert ff.calls == {"open": 1, "write": 4, "sync": 0, "truncate": 0, "read": 0}
        assert (tmp_path / "f").read_bytes() == b"abcdwx"
        ev = ff.inject("sync", hang=True)
        assert ev is not None and not ev.is_set()
        ff.clear()
        assert ev.is_set()
        ff.sync(fd)
        assert ff.calls["sync"] == 1
    finally:
        os.close(fd)
    fd2, created2 = ff.open_append(str(tmp_path / "f"))
    os.close(fd2)
    assert created2 is False
    assert os.stat(tmp_path / "f").st_mode & 0o777 == 0o600 & ~_umask()


def _umask() -> int:
    old = os.umask(0)
    os.umask(old)
    return old


def test_atomic_write_replaces_a_tmp_left_by_a_killed_process(tmp_path: Path) -> None:
    """A process killed between creating its tmp file and the rename leaves the tmp behind;
    a later process with the same pid and thread id (a container's PID 1) must still write."""
    import threading

    from harness.ledger.files import atomic_write

    target = tmp_path / "state.json"
    stale = tmp_path / f".state.json.{os.getpid()}.{threading.get_ident()}.tmp"
    stale.write_bytes(b"half a docum")
    atomic_write(target, b'{"runs": {}}\n')
    assert target.read_bytes() == b'{"runs": {}}\n'
    assert not stale.exists()
    assert os.stat(target).st_mode & 0o777 == 0o600


def test_a_removed_state_directory_is_made_again_and_every_new_entry_synced(
    tmp_path: Path,
) -> None:
    """`rm -rf` of the state directory two levels above the ledger's: the writer makes
    state/, state/harness/ and state/harness/ledger/ again, 0700, and syncs the directory
    holding each new entry before the line counts as durable; syncing only the ledger
    dir's own parent left the outer two to a crash."""
    directory = tmp_path / "state" / "harness" / "ledger"
    make_private_dir(str(directory))
    files = RecordingFiles()
    w = Writer(_DaySealer(str(directory)), files=files, on_commit=Commits(), next_seq=1,
               head_hash=ZERO_HASH, sync_timeout=2.0, retry_min=0.01, retry_max=0.05)
    try:
        assert w.append(line(run_id=1), harness="h", run_id=1) == 1
        files.dir_syncs.clear()
        shutil.rmtree(tmp_path / "state")
        assert w.append(line(run_id=2), harness="h", run_id=2) == 2
        assert files.dir_syncs == [str(tmp_path), str(tmp_path / "state"),
                                   str(tmp_path / "state" / "harness"), str(directory)]
        for d in (tmp_path / "state", tmp_path / "state" / "harness", directory):
            assert stat.S_IMODE(d.stat().st_mode) == 0o700
        assert read_disk(directory / f"{DAY}.jsonl").seqs == [2]
    finally:
        w.close(timeout=5.0)


class _DeletedRightAfterOpen(RecordingFiles):
    """A day file deleted (by someone else) between the writer's open and its first look
    at the file's name: the first `times` opens of the day file."""

    def __init__(self, times: int) -> None:
        super().__init__()
        self.times = times

    def open_append(self, path: str) -> tuple[int, bool]:
        fd, created = super().open_append(path)
        if self.times > 0 and path.endswith(".jsonl"):
            self.times -= 1
            os.unlink(path)
        return fd, created


def test_a_file_deleted_right_after_the_writer_opened_it_does_not_blind_the_writer(
    tmp_path: Path,
) -> None:
    """The file is gone before the writer looks at its name. Taken for a file system whose
    inodes drift, that turned off the deleted-file check for good, and lines written to
    the unlinked file were committed though no name held them: a later deletion lost
    them too. The writer opens the path again, and keeps noticing deletions."""
    directory = tmp_path / "ledger"
    make_private_dir(str(directory))
    files = _DeletedRightAfterOpen(times=1)
    w = Writer(_DaySealer(str(directory)), files=files, on_commit=Commits(), next_seq=1,
               head_hash=ZERO_HASH, sync_timeout=2.0, retry_min=0.01, retry_max=0.05)
    w.name_check_every = 0.0
    day = directory / f"{DAY}.jsonl"
    try:
        assert w.append(line(run_id=1), harness="h", run_id=1) == 1
        assert read_disk(day).seqs == [1]
        w.append(line(run_id=2), harness="h", run_id=2, sync=False)
        wait_until(lambda: read_disk(day).seqs == [1, 2])
        day.unlink()  # written, not yet synced: it must reach the new file
        assert w.append(line(run_id=3), harness="h", run_id=3) == 3
        assert read_disk(day).seqs == [2, 3]
    finally:
        w.close(timeout=5.0)


def test_lines_in_a_file_deleted_while_its_handle_was_dropped_are_written_again(
    make_rig: Callable[..., Rig],
) -> None:
    """Lines 1 and 2 are written, not yet synced, when the day file is deleted. Line 3's
    sync then fails and so does the cut back, so the writer drops the handle. Reopened,
    the path names a new, empty file: syncing that and committing 1-3 acknowledged three
    lines that were on no disk. They are written to the new file first."""
    rig = make_rig()
    rig.writer.append(line(run_id=1), harness="h", run_id=1, sync=False)
    rig.writer.append(line(run_id=2), harness="h", run_id=2, sync=False)
    wait_until(lambda: rig.disk().seqs == [1, 2])
    rig.day.unlink()
    rig.files.inject("sync", errno=errno.EIO, times=1)
    rig.files.inject("truncate", errno=errno.EIO, times=1)
    with pytest.raises(LedgerUnavailable, match="Input/output error"):
        rig.writer.append(line(run_id=3), harness="h", run_id=3)
    rig.commits.wait_for(3)
    assert rig.commits.seqs == [1, 2, 3]
    assert rig.disk().seqs == [1, 2, 3]
    assert rig.writer.append(line(run_id=4), harness="h", run_id=4) == 4
    d = rig.disk()
    assert (d.seqs, d.fragments) == ([1, 2, 3, 4], [])
    assert_chain(d)
