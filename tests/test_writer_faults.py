"""The writer under random schedules of disk faults: nothing acknowledged is ever lost.

Threads append synced and buffered lines to two day files while the file layer fails
writes and syncs (EIO, ENOSPC, torn half-writes, short writes), cannot cut a torn write
back or read it back, cannot open files, runs slow past the callers' bound, and while
a day file is deleted under the writer. Then the disk heals and the writer closes.
Whatever the schedule:

- every line appended was given the next seq, and lands on disk exactly once (unless
  it was committed before its file was deleted: then it went with the file);
- each file holds its lines in seq order; with no file deleted, the chain verifies;
- commits come once per seq, in seq order, and a synced append returns only after its
  line was committed; one that fails says so within the bound and its line stays queued.

Then schedules pinned where such a run found a loss or a duplicate: a torn write that
could not be cut back, read back, and what came after it; and one where a power cut
(`FaultyFiles(power_cut=True)`) could keep a line and lose the one before it.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from harness.ledger.chain import ZERO_HASH
from harness.ledger.errors import LedgerUnavailable
from harness.ledger.files import FaultyFiles, make_private_dir
from harness.ledger.runledger import _DaySealer
from harness.ledger.verify import verify_run_ledger
from harness.ledger.writer import Entry, Writer
from ledgertools import seqs_by_file
from test_writer import (
    RecordingFiles,
    Rig,
    assert_chain,
    line,
    rigs_in,
    torn_before_the_first_newline,
    wait_until,
    warm,
)

_FIXED = not os.environ.get("HARNESS_DAMAGE_EXPLORE")
DAYS = ("2026-11-30", "2026-12-01")
BOUND = 0.2  # the callers' sync_timeout: short, so failing schedules stay quick

_ARM = st.tuples(st.just("fault"),
                 st.sampled_from(["write", "sync", "open", "truncate", "read"]),
                 st.sampled_from(["eio", "enospc", "partial", "short", "slow"]),
                 st.one_of(st.none(), st.integers(1, 3)))
_APPEND = st.tuples(st.just("append"), st.integers(1, 4), st.booleans(), st.integers(0, 1))
_OTHER = st.one_of(st.tuples(st.just("clear")), st.tuples(st.just("delete"), st.integers(0, 1)))
# A phase arms faults, then appends under them, then perhaps clears or deletes a file.
_PHASE = st.tuples(st.lists(_ARM, max_size=2), _APPEND, st.lists(_OTHER, max_size=1)).map(
    lambda p: [*p[0], p[1], *p[2]])
_STEPS = st.lists(_PHASE, min_size=1, max_size=6).map(lambda ps: [s for p in ps for s in p])


class _Commits:
    """The writer's commits, one batch per pass, as `on_commit` reports them."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seqs: list[int] = []
        self.batches: list[list[int]] = []

    def __call__(self, entries: list[Entry]) -> None:
        with self.lock:
            self.seqs.extend(e.seq for e in entries)
            self.batches.append([e.seq for e in entries])

    def upto(self, n: int) -> set[int]:
        """The seqs of the first `n` batches."""
        with self.lock:
            return {s for b in self.batches[:n] for s in b}

    def has(self, seq: int) -> bool:
        with self.lock:
            return seq in self.seqs


def _arm(files: FaultyFiles, op: str, kind: str, times: int | None) -> None:
    if kind == "slow":
        files.inject(op, delay=0.3, times=times)  # past the bound, then it succeeds
    elif kind == "short":
        files.inject(op, short=True, times=times)
    else:
        code = errno.ENOSPC if kind == "enospc" else errno.EIO
        files.inject(op, errno=code, partial=kind == "partial", times=times)


def _on_disk(directory: Path) -> dict[str, list[dict[str, Any]]]:
    out = {}
    for day in DAYS:
        path = directory / f"{day}.jsonl"
        objs = []
        if path.exists():
            for raw in path.read_bytes().split(b"\n"):
                try:
                    obj = json.loads(raw)
                except ValueError:
                    continue  # a torn fragment: readers skip it, verify reports it
                objs.append(obj)
        out[day] = objs
    return out


@settings(max_examples=150 if _FIXED else 500, deadline=None, derandomize=_FIXED,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(steps=_STEPS)
def test_the_writer_under_random_faults(tmp_path_factory: Any, steps: list[tuple[Any, ...]]
                                        ) -> None:
    directory = tmp_path_factory.mktemp("faults") / "ledger"
    make_private_dir(str(directory))
    files = FaultyFiles()
    commits = _Commits()
    w = Writer(_DaySealer(str(directory)), files=files, on_commit=commits, next_seq=1,
               head_hash=ZERO_HASH, sync_timeout=BOUND, retry_min=0.005, retry_max=0.05)
    w.name_check_every = 0.0
    lock = threading.Lock()
    given_seqs: list[int] = []
    day_of: dict[int, str] = {}
    deletes: list[tuple[str, int]] = []  # (day, batches committed when it was deleted)
    problems: list[str] = []
    run_id = 0
    deleted = False

    def append(rid: int, day: str, sync: bool) -> None:
        obj = {"v": 1, "type": "opened", "at": f"{day}T10:00:00.000000000Z",
               "harness": "h", "run_id": rid}
        t0 = time.monotonic()
        try:
            seq = w.append(obj, harness="h", run_id=rid, sync=sync)
        except LedgerUnavailable as exc:
            took = time.monotonic() - t0
            if took > BOUND + 1.0:  # generous: a loaded machine must not fail this
                problems.append(f"run {rid} failed after {took:.2f}s, past the bound")
            seq = exc.seq
            if seq is None:
                problems.append(f"run {rid}: LedgerUnavailable without a seq: {exc}")
                return
        else:
            if sync and not commits.has(seq):
                problems.append(f"seq {seq} acknowledged before it was committed")
        with lock:
            given_seqs.append(seq)
            day_of[seq] = day

    try:
        for step in steps:
            if step[0] == "append":
                threads = []
                for _ in range(step[1]):
                    run_id += 1
                    threads.append(threading.Thread(
                        target=append, args=(run_id, DAYS[step[3]], step[2])))
                for t in threads:
                    t.start()
                for t in threads:
                    t.join(30)
            elif step[0] == "fault":
                _arm(files, step[1], step[2], step[3])
            elif step[0] == "clear":
                files.clear()
            else:
                path = directory / f"{DAYS[step[1]]}.jsonl"
                if path.exists():
                    path.unlink()
                    deleted = True
                    with commits.lock:
                        deletes.append((DAYS[step[1]], len(commits.batches)))
        files.clear()
        w.close(timeout=30.0)
    finally:
        files.clear()
        w.close(timeout=5.0)

    event(f"faults hit: {w.stats().append_errors > 0}, a file deleted: {deleted}")
    assert problems == [], (steps, problems)
    n = len(given_seqs)
    assert sorted(given_seqs) == list(range(1, n + 1)), steps
    assert commits.seqs == list(range(1, n + 1)), steps  # once each, in order, all of them
    disk = _on_disk(directory)
    for day, objs in disk.items():
        seqs = [o["seq"] for o in objs]
        assert seqs == sorted(set(seqs)), (steps, day, seqs)
        assert all(day_of[s] == day for s in seqs), (steps, day, seqs)
    found = sorted(o["seq"] for objs in disk.values() for o in objs)
    assert len(found) == len(set(found)), (steps, found)  # no seq twice, across files
    # Lines committed before their file was deleted went with it. So may the lines of the
    # one pass in flight at the unlink: it may have found the file still linked after its
    # sync, an instant before. Every later pass checks after the unlink and must rewrite.
    gone_ok = {s for day, k in deletes for s in commits.upto(k + 1) if day_of[s] == day}
    missing = set(range(1, n + 1)) - set(found)
    assert missing <= gone_ok, (steps, sorted(missing - gone_ok))
    if not deleted and n:
        res = verify_run_ledger(str(directory), parallel=False)
        assert (res.ok, res.head_seq) == (True, n), (steps, res.error)


# -- pinned: a torn write that could not be cut back -----------------------------------------


@pytest.fixture
def make_rig(tmp_path: Path) -> Iterator[Callable[..., Rig]]:
    """A failed pass is retried only when the test flushes: each step of a schedule runs
    in the pass the test asks for."""
    yield from rigs_in(tmp_path, retry_min=30.0, retry_max=30.0)


def _fail_then_retry_together(rig: Rig, first: dict[str, Any], *more: tuple[dict[str, Any], bool]
                              ) -> list[Entry]:
    """Line 1 synced; `first` (buffered) fails its write, so the writer backs off; the lines
    of `more` ((line, synced)) queue behind it. The retry the test then asks for (a flush)
    writes them all in one write. Returns their entries, `first`'s first."""
    warm(rig)
    w = rig.writer
    rig.files.inject("write", errno=errno.EIO, times=1)
    entries = [w.enqueue(first, sync=False, harness="h", run_id=first["run_id"])]
    wait_until(lambda: w.stats().append_errors == 1)
    entries += [w.enqueue(o, sync=s, harness="h", run_id=o["run_id"]) for o, s in more]
    return entries


def _retry(rig: Rig, errors: int) -> None:
    """Run the retry now and wait until it has failed, the writer's `errors`-th failure."""
    rig.writer.flush()
    wait_until(lambda: rig.writer.stats().append_errors == errors)


def _torn_inside_line_4(rig: Rig) -> Entry:
    """`_fail_then_retry_together` with lines 2, 3 (buffered) and a long synced line 4:
    half the retry's bytes hold lines 2 and 3 whole. Returns line 4's entry."""
    e2, e3, e4 = _fail_then_retry_together(
        rig, line(run_id=2), (line(run_id=3), False),
        ({**line(run_id=4), "reason": "x" * 600}, True))
    n = len(e2.data) + len(e3.data)
    assert n <= (n + len(e4.data)) // 2 < n + len(e4.data) - 1
    return e4


def test_a_line_torn_before_its_newline_then_a_failed_sync_is_cut_whole(
    make_rig: Callable[..., Rig],
) -> None:
    """The retry of lines 2 and 3 tears right before line 2's newline and cannot be cut
    back: the read-back keeps line 2 (the next write brings its "\n"). The sync after it
    fails. The cut that follows must take line 2 whole: cut at the file's end, inside the
    line, it left the bytes in place, and line 2 was written again after them."""
    rig = make_rig()
    w = rig.writer
    two, three = torn_before_the_first_newline(rig, 2)
    _, e3 = _fail_then_retry_together(rig, two, (three, True))
    rig.files.inject("write", errno=errno.ENOSPC, partial=True, times=1)
    rig.files.inject("truncate", errno=errno.EIO, times=1)
    rig.files.inject("sync", errno=errno.EIO, times=1)
    _retry(rig, 2)
    assert rig.commits.seqs == [1]
    rig.writer.flush()
    rig.commits.wait_for(3)
    assert w.wait(e3) == 3
    assert rig.commits.batches == [[1], [2, 3]]
    d = rig.disk()
    assert (d.seqs, d.fragments) == ([1, 2, 3], [])
    assert_chain(d)
    res = verify_run_ledger(str(rig.directory), parallel=False)
    assert (res.ok, res.head_seq) == (True, 3), res.error


def test_lines_read_back_from_a_file_deleted_before_their_sync_are_written_again(
    make_rig: Callable[..., Rig],
) -> None:
    """The retry of lines 2-4 tears inside line 4 and cannot be cut back: the read-back
    keeps lines 2 and 3. Reopening the file for the sync fails, and the day file is
    deleted. The retry must write 2 and 3 again, into the new file, before they are
    committed with 4: with the old handle closed, the writer could not tell the new file
    from the old, and acknowledged lines that were on no path."""
    rig = make_rig()
    w = rig.writer
    e4 = _torn_inside_line_4(rig)
    rig.files.inject("write", errno=errno.ENOSPC, partial=True, times=1)
    rig.files.inject("truncate", errno=errno.EIO, times=1)
    rig.files.inject("open", errno=errno.EIO, times=1)
    _retry(rig, 2)
    held = rig.disk()
    assert held.seqs == [1, 2, 3] and len(held.fragments) == 1  # 4 torn: 2, 3 read back
    assert rig.commits.seqs == [1]
    rig.day.unlink()
    rig.writer.flush()
    rig.commits.wait_for(4)
    assert w.wait(e4) == 4
    assert rig.commits.batches == [[1], [2, 3, 4]]
    d = rig.disk()
    assert (d.seqs, d.fragments) == ([2, 3, 4], [])  # line 1, acknowledged, went with the file
    assert_chain(d, first_prev=rig.commits.entries[0].hash)


class _LosesPagesOnFailedSync(RecordingFiles):
    """fsyncgate, as Linux does it: a failed fdatasync marks the pages written since the
    file's last good sync clean without writing them. They read back whole, the next
    fdatasync succeeds, and a power cut loses them. `lost` holds those byte ranges per
    file. (The real kernel cannot be made to do this on cue: a fake is the only way.)"""

    def __init__(self) -> None:
        super().__init__()
        self._dirty: dict[tuple[int, int], int] = {}  # file -> first byte since a good sync
        self.lost: dict[tuple[int, int], list[tuple[int, int]]] = {}

    def write(self, fd: int, data: bytes) -> int:
        start = self.size(fd)  # O_APPEND: every write lands at the end
        try:
            return super().write(fd, data)
        finally:
            if self.size(fd) > start:
                self._dirty.setdefault(self.identity(fd), start)

    def sync(self, fd: int) -> None:
        key = self.identity(fd)
        try:
            super().sync(fd)
        except OSError:
            start = self._dirty.pop(key, None)
            if start is not None:
                self.lost.setdefault(key, []).append((start, self.size(fd)))
            raise
        self._dirty.pop(key, None)

    def truncate(self, fd: int, size: int) -> None:
        super().truncate(fd, size)
        key = self.identity(fd)
        self.lost[key] = [(a, min(b, size)) for a, b in self.lost.get(key, []) if a < size]
        if key in self._dirty:
            self._dirty[key] = min(self._dirty[key], size)

    def after_power_cut(self, path: Path) -> list[int]:
        """The seqs of the complete lines of `path` that a power cut now would keep."""
        st = path.stat()
        lost = self.lost.get((st.st_dev, st.st_ino), [])
        seqs, pos = [], 0
        for raw in path.read_bytes().split(b"\n")[:-1]:
            end = pos + len(raw) + 1
            if not any(a < end and pos < b for a, b in lost):
                with contextlib.suppress(ValueError):  # a torn fragment is no line
                    seqs.append(json.loads(raw)["seq"])
            pos = end
        return seqs


def test_after_a_failed_sync_lines_an_earlier_handle_wrote_are_cut_and_written_again(
    make_rig: Callable[..., Rig],
) -> None:
    """The retry of lines 2-4 tears inside line 4 and cannot be cut back: the read-back
    keeps lines 2 and 3, and the handle that wrote them is dropped. The sync through the
    reopened handle fails, losing their pages (fsyncgate). The cut works now, so 2 and 3
    must be cut and written again: trusted as durable because the reopened handle found
    them in the file, they were acknowledged with 4 and a power cut lost them."""
    files = _LosesPagesOnFailedSync()
    rig = make_rig(files=files)
    w = rig.writer
    e4 = _torn_inside_line_4(rig)
    files.inject("write", errno=errno.ENOSPC, partial=True, times=1)
    files.inject("truncate", errno=errno.EIO, times=1)
    files.inject("sync", errno=errno.EIO, times=1)
    _retry(rig, 2)
    assert rig.commits.seqs == [1]
    rig.writer.flush()
    rig.commits.wait_for(4)
    assert w.wait(e4) == 4
    assert rig.commits.batches == [[1], [2, 3, 4]]
    w.close()
    assert files.after_power_cut(rig.day) == [1, 2, 3, 4]
    d = rig.disk()
    assert (d.seqs, d.fragments) == ([1, 2, 3, 4], [])
    res = verify_run_ledger(str(rig.directory), parallel=False)
    assert (res.ok, res.head_seq) == (True, 4), res.error


# -- pinned: what a power cut keeps of a line read back through a reopened handle ------------


def test_a_line_read_back_through_a_reopened_handle_is_synced_before_another_file_takes_one(
    make_rig: Callable[..., Rig],
) -> None:
    """Line 2's write stops one byte short (its "\\n") on a full disk, and neither the
    cut-back nor the read-back works, so its handle is dropped; line 3 is for the next
    day. The retry reopens the file and reads 2 back, whole. The reopened handle took the
    file's size for synced, so the next day's file took line 3 while 2 was only in the
    page cache: a power cut before 2's sync could keep 3 and lose 2, a gap in the chain
    for good. Line 2 must be synced before line 3 is written."""
    files = RecordingFiles(power_cut=True)
    rig = make_rig(files=files)
    w = rig.writer
    warm(rig)
    files.inject("write", errno=errno.ENOSPC, partial=True, lands=-1, times=1)
    files.inject("truncate", errno=errno.EIO, times=1)
    files.inject("read", errno=errno.EIO)
    e2 = w.enqueue(line(run_id=2), sync=True, harness="h", run_id=2)
    with pytest.raises(LedgerUnavailable):
        w.wait(e2)
    wait_until(lambda: w.stats().append_errors == 1 and files.calls["read"] == 1)
    other = "2026-12-01"
    e3 = w.enqueue({**line(run_id=3), "at": f"{other}T00:00:01.000000000Z"}, sync=True,
                   harness="h", run_id=3)
    files.clear("read")
    w.flush()  # the retry, now: the backoff is 30 s
    rig.commits.wait_for(3)
    assert w.wait(e3) == 3
    next_day = rig.directory / f"{other}.jsonl"
    day, later = rig.day.name, next_day.name
    assert [seqs_by_file(s) for s in files.cuts] == [
        {day: [1]},  # line 1
        {day: [1, 2]},  # line 2's failed write, all but its "\n"
        {day: [1, 2], later: [3]},  # line 3, once 2 is synced
    ]
    assert rig.commits.batches == [[1], [2], [3]]
    e1 = rig.commits.entries[0]
    # Line 2's "\n" comes first in the next write to its file.
    assert rig.day.read_bytes() == e1.data + e2.data[:-1]
    assert next_day.read_bytes() == e3.data
    assert files.after_power_cut(str(rig.day)) == e1.data + e2.data[:-1]
    assert files.after_power_cut(str(next_day)) == e3.data


def test_the_power_cut_model_keeps_nothing_of_a_file_made_again_at_its_path(
    tmp_path: Path,
) -> None:
    """A file deleted and made again usually gets the same inode number: the model must
    not say the new file keeps what the deleted one had synced."""
    files = FaultyFiles(power_cut=True)
    path = str(tmp_path / "day.jsonl")
    fd, created = files.open_append(path)
    assert created
    files.write(fd, b'{"seq":1}\n')
    files.sync(fd)
    files.close(fd)
    assert files.after_power_cut(path) == b'{"seq":1}\n'
    os.unlink(path)
    fd, created = files.open_append(path)
    assert created
    files.write(fd, b'{"seq":2}\n')
    files.close(fd)
    assert files.after_power_cut(path) == b""
