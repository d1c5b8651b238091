"""The single ledger writer: a queue of sealed lines and one thread that makes them durable.

Both ledgers write through this. Invariants:

* ``seq`` is assigned and the chain link computed at enqueue, under one lock, so
  queue order is seq order is chain order, and lines reach the files in that order.
* A line is *committed* — handed to ``on_commit`` (index, feed) and acknowledged to
  a synced caller — only after it is written and its file fdatasync'd, through the
  handle that wrote it or one opened on the file since. Nothing is visible before it
  is durable.
* ... and only while the synced file still has a name: one deleted or replaced under
  the writer gets the unacknowledged lines again in a new file at its path (the
  directory too is made again if it went); one renamed away keeps them under its new
  name until the writer notices, within ``name_check_every``.
* A line is written to a file at most once per seq: a failed write is cut back
  (ftruncate) or, where that fails too, what reached the file is read back and
  matched, so a retry never duplicates a line; while that read-back fails, nothing
  more is written to that file. A failed or timed-out write/sync
  keeps the line queued; the writer retries in order with backoff (a closing writer
  every 50 ms, to drain within its timeout). Each failure is told to one
  `faillog.FailureLog`, which logs the first, a change of cause, a bounded-rate count of
  the repeats and the recovery, rather than a line per retry.
* A failed fdatasync may have lost pages that still read back whole (and a later sync
  succeeds without them): every uncommitted line of that file, whichever handle wrote
  it, is cut back and written again. A cut falls at a line's start, never inside one,
  so each seq is in the file once; where the cut fails, the sync alone is retried.
* A handle's ``synced`` mark never covers a byte not fdatasync'd since it was written:
  a handle reopened on the file a dropped one held starts from the dropped one's mark,
  not the file's size, so what a failed write left (read back, marked written) still
  counts as unsynced and keeps other files from taking a line until it is synced.
* Nothing this writer writes can outlive, in a power cut, the lines it chains to: the
  file that held the newest line when it was made (``settle``; a killed process may
  have left it unsynced) is fdatasync'd, with its directory entry, before its first write.
* Synced appends wait at most ``sync_timeout``; while the queue's head is failing, or
  its write or sync has run past the bound, they fail fast instead of each waiting out
  the bound.
* A write or sync that runs past ``sync_timeout`` is an append error the moment the
  bound passes (REQ-6), though the writer thread is stuck in the syscall: a watchdog
  thread counts it then, tells the `FailureLog` and marks the ledger degraded until
  the operation returns. It is counted once: by the watchdog, or by the writer as a
  late sync when it returned past the bound before the watchdog looked (the two decide
  under the state lock); an error it then returns with is told, not counted again.
  The watchdog wakes no waiter (only the writer thread does): each is bounded by its
  own wait. It is idle while no pass does I/O, and a pass rings it only when it went
  idle, so a steady stream of appends costs it a look per bound, not a wake-up each.
* Concurrent synced appends share one fdatasync per file (group commit); lines
  appended with ``sync=False`` are synced within ``flush_every`` and always before
  (with) any later synced line. Until then they wait in the queue, written; a pass that
  only writes new buffered lines looks at those alone, so each append costs the same
  however many wait.
* Each pass (write, sync, commit) runs whole under ``passes()``: a holder of it sees no
  line written or committed meanwhile (retention deletes a day file under it).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import stat
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeVar

from .errors import LedgerClosed, LedgerError, LedgerUnavailable, LineTooLong
from .faillog import FailureLog
from .files import FileLayer, make_durable_dirs, sync_entries_of

log = logging.getLogger("harness.ledger")

# Why a file cannot be opened or synced that no retry changes (gone, not ours to open, no
# longer a regular file, a read-only file system): `_settle_found` passes over it.
_UNSETTLABLE = frozenset({errno.ENOENT, errno.EACCES, errno.EPERM, errno.ELOOP,
                          errno.ENXIO, errno.EISDIR, errno.ENOTDIR, errno.EROFS,
                          errno.EINVAL})

MAX_LINE = 16 * 1024
T = TypeVar("T")


class _Stopped:
    """What the general pass returns once the writer has drained and closed its files."""


_STOPPED = _Stopped()


class Sealer(Protocol):
    """Turns an accepted object into its durable form for a given seq and chain head."""

    def seal(self, obj: dict[str, Any], seq: int, prev: str) -> tuple[bytes, str, str]:
        """Return (canonical line without newline, its chain hash, target file path)."""
        ...


class _Waiter:
    """A one-shot wake-up for one synced append (a bare lock is the cheapest handoff)."""

    __slots__ = ("_lock", "error", "woken")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lock.acquire()
        self.error: LedgerError | None = None
        self.woken = False

    def wake(self, error: LedgerError | None = None) -> None:
        # Only the writer thread wakes. A caller waiting at the failure was told of it;
        # once the line commits, a wait that comes later (enqueue now, wait later) is
        # told it is durable, not of a failure that has since been mended.
        if not self.woken:
            self.error = error
            self.woken = True
            self._lock.release()
        elif error is None:
            self.error = None

    def wait(self, timeout: float) -> bool:
        return self.woken or self._lock.acquire(timeout=timeout)


@dataclass(eq=False)
class Entry:
    """One sealed line in the queue."""

    seq: int
    obj: dict[str, Any]
    data: bytes  # canonical bytes + b"\n"
    hash: str
    path: str
    sync: bool
    enqueued: float
    harness: str | None = None
    run_id: int | None = None
    written: bool = False
    end: int = 0  # offset just past this line in its file, once written
    waiter: _Waiter | None = field(default=None, repr=False)
    behind_failure: bool = False  # a synced wait would fail fast, as of the enqueue
    # What the caller of `enqueue_built` says the line is, handed back at commit: the
    # writer never reads it (the run ledger marks a prune's carried lines with it).
    tag: str | None = None

    def unavailable(self, message: str) -> LedgerUnavailable:
        """The error that names this line (REQ-20: harness, run_id and seq)."""
        return LedgerUnavailable(message, harness=self.harness, run_id=self.run_id,
                                 seq=self.seq)


@dataclass
class _File:
    fd: int
    size: int  # bytes in the file that we account for (complete lines)
    # Bytes synced through it (or the handle it replaced: `_reopened_elsewhere`), or in
    # the file when it was first opened.
    synced: int
    created: bool
    identity: tuple[int, int]  # (st_dev, st_ino): is the path still this file?
    named_at: float = 0.0  # when the path was last seen to name this file
    newline: bool = False  # the file ends in a fragment: start the next write with "\n"


@dataclass
class WriterStats:
    next_seq: int
    queued: int
    append_errors: int
    last_error: str | None
    last_error_at: float | None
    degraded: bool
    lines_written: int
    syncs: int


class Writer:
    """Owns the queue, the chain head and the writer thread of one ledger."""

    def __init__(
        self,
        sealer: Sealer,
        *,
        next_seq: int,
        head_hash: str,
        files: FileLayer | None = None,
        on_commit: Callable[[list[Entry]], None] | None = None,
        sync_timeout: float = 2.0,
        flush_every: float = 30.0,
        retry_min: float = 0.25,
        retry_max: float = 30.0,
        max_line: int = MAX_LINE,
        name: str = "ledger-writer",
        ancestors: tuple[str, ...] = (),
        settle: str | None = None,
        log_every: float = 10.0,
    ) -> None:
        self._sealer = sealer
        self._files = files or FileLayer()
        self._on_commit = on_commit
        self.sync_timeout = sync_timeout
        self.flush_every = flush_every
        self.retry_min = retry_min
        self.retry_max = retry_max
        self.max_line = max_line
        # State lock, and a bell: a bare lock used as a binary semaphore, which is much
        # cheaper to ring than a Condition (no per-wait lock, no Python-level notify).
        self._cv = threading.Lock()
        self._bell = threading.Lock()
        self._bell.acquire()
        self._queue: deque[Entry] = deque()
        self._synced_queued = 0  # queued entries a synced caller waits for
        # No unwritten line precedes a written one in the queue: lines not yet written are
        # its tail. Cleared where lines are marked unwritten again (a failed sync, a file
        # gone), set again by a general pass that wrote all it took.
        self._gapless = True
        self._next_seq = next_seq
        self._head = head_hash
        self._open: dict[str, _File] = {}
        self._closing = False
        self._closed = False
        self._failing: LedgerError | None = None
        self._io_started: float | None = None  # when the pass under way began writing
        # What the watchdog (`_watch`) needs of the pass under way to tell it hung: its
        # first line and what it does ("write", "write and sync"); whether it told it.
        self._io_head: Entry | None = None
        self._io_what = ""
        self._io_told = False
        # The watchdog sleeps on this bell (a bare lock, as `_bell`) while no pass does
        # I/O; `_begin_io` rings it only when `_watch_parked` says it went to sleep so.
        self._watch_bell = threading.Lock()
        self._watch_bell.acquire()
        self._watch_parked = False
        # Held by the watchdog from deciding a hang under the state lock until its log
        # line is out: the pass stuck in it waits for that before it logs what ended it.
        self._telling = threading.Lock()
        self._overdue = 0  # highest seq whose synced caller timed out
        # Paths whose directory entry, as they name a file now, this writer has synced. A
        # file it creates is not among them until its first sync; one it finds already
        # there may have been created by a process killed before its directory sync, so
        # its entry is synced too before the first line written to it is acknowledged.
        self._entries_synced: set[str] = set()
        # Directories above the ledger's, synced once with the first directory sync: a
        # killed process may have made them and not synced them either (`make_durable_dirs`
        # syncs only what it creates itself).
        self._ancestors = ancestors
        # The file that held the newest line when this writer was made. A process killed
        # while writing may have left lines there in the page cache only, its directory
        # entry too when it made the file; they now sit below the head this writer
        # chains to. Synced before this writer writes anything, so a power cut cannot
        # keep a line of ours in another file and lose the lines ours follow.
        self._settle = settle
        # Files where a write failed, could not be cut back and could not be read back:
        # (offset it began at, whether it began with "\n"). What reached the file is
        # unknown, so nothing more is written there until a read-back tells.
        self._unread: dict[str, tuple[int, bool]] = {}
        # Handles dropped (after a failed sync or cut, or a torn write read back) while
        # lines written through them are, or may be found to be, uncommitted: those lines
        # are only where the path still names that file.
        # Kept open until the path is opened again (`_reopened_elsewhere`), so the
        # inode cannot be reused by a new file at the path and pass for the old one; and
        # with its synced mark, which the handle reopened on that file takes over.
        self._dropped: dict[str, _File] = {}
        # Whether a path's identity tells whether it is still the file we hold open; a
        # file system whose inode numbers do not hold still would make every pass look
        # like a deleted file, and the rewrite would put each line in the file twice.
        self._identities_hold = True
        self.name_check_every = 1.0
        self._errors = 0
        # Repeats of one failure are logged as a count at most once per `log_every` s.
        self._faillog = FailureLog(log, log_every)
        self._failed_path = ""  # the file of the latest failed write or sync
        self._last_error: str | None = None
        self._last_error_at: float | None = None
        self._lines_written = 0
        self._syncs = 0
        self._flush_now = False
        self._retry_now = False  # a close or flush cuts short the backoff under way
        self._passing = threading.Lock()  # held through each pass: see `passes`
        self._stopped = False  # the writer thread has returned: it writes no more
        self._at_stop: list[Callable[[], None]] = []
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()
        threading.Thread(target=self._watch, name=f"{name}-watchdog", daemon=True).start()

    # -- callers -------------------------------------------------------------------

    @property
    def head(self) -> tuple[int, str]:
        """(last assigned seq, its hash): the chain head including queued lines."""
        with self._cv:
            return self._next_seq - 1, self._head

    def enqueue(
        self,
        obj: dict[str, Any],
        *,
        sync: bool,
        harness: str | None = None,
        run_id: int | None = None,
    ) -> Entry:
        """Seal `obj` with the next seq and queue it; never blocks on the disk."""
        with self._cv:
            e = self._queue_locked(obj, sync, harness, run_id)
        self._ring()
        return e

    def enqueue_built(
        self, build: Callable[[deque[Entry]], tuple[dict[str, Any], str, int] | None],
        tag: str | None = None,
    ) -> Entry | None:
        """Queue the line `build` makes from the lines still queued (and not yet
        committed), as one step: no other line can be queued between what `build` saw
        and its own line. `build` returns (obj, harness, run_id), or None for no line.
        Committed lines are handed to ``on_commit`` before they leave the queue, so a
        line is always in one of the two places `build` can look. A synced entry, with
        `tag` on it."""
        with self._cv:
            made = build(self._queue)
            if made is None:
                return None
            e = self._queue_locked(made[0], True, made[1], made[2])
            e.tag = tag  # before the lock goes: the commit that reads it cannot come first
        self._ring()
        return e

    def look_queued(self, look: Callable[[deque[Entry]], T]) -> T:
        """What `look` makes of the lines still queued (and not yet committed), under the
        queue lock: as in `enqueue_built`, each line is in the queue or already handed to
        ``on_commit`` (for a moment both), never in neither. `look` must not queue."""
        with self._cv:
            return look(self._queue)

    def _queue_locked(
        self, obj: dict[str, Any], sync: bool, harness: str | None, run_id: int | None
    ) -> Entry:
        """Seal `obj` with the next seq and queue it (call with `_cv` held)."""
        if self._closing:
            raise LedgerClosed("the ledger is closed", harness=harness, run_id=run_id)
        seq = self._next_seq
        data, digest, path = self._sealer.seal(obj, seq, self._head)
        if len(data) + 1 > self.max_line:
            raise LineTooLong(
                f"line of {len(data) + 1} bytes exceeds the {self.max_line}-byte limit",
                harness=harness,
                run_id=run_id,
            )
        now = time.monotonic()
        e = Entry(seq, obj, data + b"\n", digest, path, sync, now, harness, run_id)
        if sync:
            e.waiter = _Waiter()
            e.behind_failure = self._behind_failure(now)
        self._next_seq = seq + 1
        self._head = digest
        self._queue.append(e)
        self._synced_queued += sync
        return e

    def _behind_failure(self, now: float) -> bool:
        """Whether a synced caller should fail fast now (call with `_cv` held)."""
        return (
            self._failing is not None
            or (self._io_started is not None and now - self._io_started > self.sync_timeout)
            # An earlier caller timed out and its line is still queued ahead of this
            # one. The clock test above cannot see that reliably: the stuck sync may
            # have started a moment after that caller began its wait, so a caller
            # arriving right after the timeout would wait out a whole bound again.
            or (bool(self._queue) and self._queue[0].seq <= self._overdue)
        )

    def stuck(self, harness: str, run_id: int) -> str | None:
        """Why a line of run (`harness`, `run_id`) still queued cannot become durable now
        (the failing head's error, or a write or sync stuck past the bound); None when
        none of its lines is queued, or the queue is moving."""
        with self._cv:
            now = time.monotonic()
            if not self._behind_failure(now) or not any(
                    e.run_id == run_id and e.harness == harness for e in self._queue):
                return None
            # A hang first: while it lasts, it is what `_failing` holds too (`_tell_hung`),
            # and how long it has lasted says more.
            took = now - self._io_started if self._io_started is not None else 0.0
            if took > self.sync_timeout:
                return f"a ledger write or sync has not returned for {took:.0f}s"
            if self._failing is not None:
                # The message alone: its context names the head's line, maybe another run's.
                return self._failing.message
            return f"a ledger sync did not finish within the {self.sync_timeout:g}s bound"

    def wait(self, e: Entry, *, as_enqueued: bool = False) -> int:
        """Wait until a synced entry is durable; raise LedgerUnavailable on failure or timeout.

        While the queue's head is failing it fails at once. `as_enqueued` judges that by
        the writer's state when `e` was enqueued, for a wait that directly follows its
        enqueue (the append path): no second look under the lock between the two.
        """
        assert e.waiter is not None, "only synced entries can be waited for"
        if as_enqueued:
            fast_fail = e.behind_failure
        else:
            with self._cv:
                fast_fail = self._behind_failure(time.monotonic())
        if fast_fail and not e.waiter.woken:
            raise e.unavailable("queued behind a failing write; it will be retried in order")
        if e.waiter.wait(self.sync_timeout):
            if e.waiter.error is not None:
                err = e.waiter.error
                raise e.unavailable(
                    f"{err.message}; the line stays queued and will be retried in order"
                ) from err
            return e.seq
        with self._cv:
            self._overdue = max(self._overdue, e.seq)
        raise e.unavailable(f"not synced within {self.sync_timeout:g}s; the line stays queued")

    def append(
        self,
        obj: dict[str, Any],
        *,
        sync: bool = True,
        harness: str | None = None,
        run_id: int | None = None,
    ) -> int:
        """Queue `obj`; with sync=True return only once it is durable (or raise)."""
        e = self.enqueue(obj, sync=sync, harness=harness, run_id=run_id)
        return self.wait(e, as_enqueued=True) if sync else e.seq

    def flush(self) -> None:
        """Ask the writer to sync buffered lines now (used by tests and shutdown)."""
        with self._cv:
            self._flush_now = True
            self._retry_now = True
        self._ring()

    @contextlib.contextmanager
    def passes(self, timeout: float | None = None) -> Iterator[None]:
        """Hold the writer between passes: while held, no line is written, synced or
        committed. What a pass had written but not synced stays uncommitted, and is
        written again should its file go meanwhile (`_rewrite_moved`). With `timeout`,
        raise LedgerUnavailable when the pass under way (stuck on a hung disk) does not
        end within it."""
        if not self._passing.acquire(timeout=-1 if timeout is None else timeout):
            raise LedgerUnavailable(f"the ledger's writer is stuck in a write or sync for "
                                    f"over {timeout:g}s")
        try:
            yield
        finally:
            self._passing.release()

    def stats(self) -> WriterStats:
        with self._cv:
            return WriterStats(
                next_seq=self._next_seq,
                queued=len(self._queue),
                append_errors=self._errors,
                last_error=self._last_error,
                last_error_at=self._last_error_at,
                degraded=self._failing is not None,
                lines_written=self._lines_written,
                syncs=self._syncs,
            )

    def close(self, timeout: float = 5.0) -> None:
        """Stop accepting lines, drain the queue, close files.

        Raises LedgerUnavailable naming how many lines were still queued when the
        timeout passed (they are lost to this process; the caller logs it).
        """
        with self._cv:
            if self._closed:
                return
            self._closing = True
            self._retry_now = True
            self._deadline = time.monotonic() + timeout
        self._ring()
        self._thread.join(timeout + 1.0)
        with self._cv:
            self._closed = True
            left = len(self._queue)
            # Read under the lock: a writer thread that outlived the join (a hung sync)
            # may pop the queue the moment it is released.
            first = self._queue[0] if left else None
        if first is not None:
            raise first.unavailable(f"closed with {left} line(s) still queued (not durable)")

    def after_stop(self, fn: Callable[[], None]) -> None:
        """Call `fn` once the writer thread can write no more: now, or when the thread
        returns. A close can return while the thread is stuck in a write (a hung disk):
        what must outlast every write of it, such as the ledger's single-writer lock,
        is let go here."""
        with self._cv:
            if not self._stopped:
                self._at_stop.append(fn)
                return
        fn()

    # -- the writer thread -----------------------------------------------------------

    def _ring(self) -> None:
        """Wake the writer thread (a no-op if it is already awake or about to be)."""
        try:  # noqa: SIM105 -- on the append path; suppress() costs a context manager
            self._bell.release()
        except RuntimeError:  # already rung: the writer drains the whole queue per wake
            pass

    def _begin_io(self, head: Entry, what: str) -> float:
        """Start timing a pass's I/O (`what` it does, from `head`, its first line) for the
        fail-fast, the late sync and the watchdog; return when it began. Rings the watchdog
        only when it went idle: once per idle spell, never per append in a stream."""
        with self._cv:
            self._io_started = started = time.monotonic()
            self._io_head, self._io_what, self._io_told = head, what, False
            if self._watch_parked:
                self._watch_parked = False
                self._ring_watch()
        return started

    def _end_io(self) -> bool:
        """End the pass's I/O; whether the watchdog told it hung past the bound (then it
        is counted, and its log line is out before this returns)."""
        with self._cv:
            self._io_started = self._io_head = None
            told = self._io_told
        if told:
            # The watchdog decided under the state lock and tells after it: wait for its
            # line, so the episode it opened is open before this pass ends or fails it.
            with self._telling:
                pass
        return told

    def _ring_watch(self) -> None:
        with contextlib.suppress(RuntimeError):  # already rung: it looks again either way
            self._watch_bell.release()

    def _watch(self) -> None:
        """The watchdog thread: tell a pass's I/O that runs past ``sync_timeout`` the
        moment it does, since the writer thread stuck in the syscall cannot (REQ-6)."""
        while True:
            with self._cv:
                if self._stopped:
                    return
                started = self._io_started
                idle = started is None or self._io_told
                # Idle until `_begin_io` rings: no pass does I/O, or this one is told.
                self._watch_parked = idle
            if idle:
                self._watch_bell.acquire()
                continue
            assert started is not None
            left = started + self.sync_timeout - time.monotonic()
            if left > 0:
                self._watch_bell.acquire(timeout=left)  # a close rings it too
                continue
            self._tell_hung(started)

    def _tell_hung(self, started: float) -> None:
        """Count and tell the pass's I/O begun at `started` as hung past the bound, unless
        it has ended meanwhile (then the writer counts it late, if it was)."""
        with self._telling:
            with self._cv:
                head = self._io_head
                if self._io_started != started or self._io_told or head is None:
                    return
                self._io_told = True
                err = head.unavailable(
                    f"ledger {self._io_what} of {head.path} has not returned within the "
                    f"{self.sync_timeout:g}s bound"
                )
                self._record_error(err)
                # Degraded while it hangs; the pass that returns clears it or fails it.
                self._failing = err
                queued = len(self._queue)
            # Outside the state lock, which is never held across I/O (a log write may
            # block on the very disk that hangs).
            self._faillog.hung(err, head.path, queued, time.monotonic())

    def _run(self) -> None:
        try:
            self._loop()
        finally:
            # A close whose timeout passed on a failing disk: the log says it gave up,
            # with the count of the repeats it had not told yet.
            self._faillog.stopped(len(self._queue), time.monotonic())
            with self._cv:
                self._stopped = True
                at_stop, self._at_stop = self._at_stop, []
            self._ring_watch()
            for fn in at_stop:
                fn()

    def _loop(self) -> None:
        backoff = self.retry_min
        retry_at = 0.0
        while True:
            with self._cv:
                calm = not retry_at and not self._closing and not self._flush_now
                idle = calm and not self._queue
                # The common pass takes only fresh lines, one of them synced: with the
                # head already written (buffered lines) it would decline, after a copy
                # of the whole queue.
                common = (calm and self._synced_queued > 0 and self._failing is None
                          and not self._queue[0].written)
                if common:
                    batch = list(self._queue)
            if idle:  # nothing queued, no retry or close pending: a later enqueue rings
                self._bell.acquire()
                continue
            err: LedgerError | Literal[False] | _Stopped | None = False
            if common:
                with self._passing:
                    err = self._common_pass(batch)
            if err is False:
                err = self._general_pass(retry_at)
                if err is False:  # nothing was due: it waited for the bell or a deadline
                    continue
                if isinstance(err, _Stopped):
                    return
            if err is None:
                backoff = self.retry_min
                retry_at = 0.0
                if self._faillog.open:
                    self._faillog.recovered(time.monotonic())
                # A clean pass means the head is no longer failing, even when it only
                # wrote buffered lines that are synced later: otherwise synced callers
                # would keep failing fast for up to flush_every after the disk recovered.
                # (Only this thread sets it, so it can look without the lock.)
                if self._failing is not None:
                    with self._cv:
                        self._failing = None
            else:
                # A close retries every 50 ms whatever the backoff, so a disk that comes
                # back is used before the close's timeout: the reason each failure cannot
                # be a line of its own in the log (`FailureLog` counts the repeats).
                retry_at = time.monotonic() + (min(backoff, 0.05) if self._closing else backoff)
                backoff = min(backoff * 2, self.retry_max)

    def _general_pass(self, retry_at: float) -> LedgerError | Literal[False] | _Stopped | None:
        """Decide what is due — a retry, buffered lines, a flush, the shutdown — and do it;
        or wait for the bell (False). `_STOPPED` once the queue is drained on close."""
        with self._cv:
            now = time.monotonic()
            if self._closing and (not self._queue or now >= self._deadline):
                self._shutdown_files()
                return _STOPPED
            if self._retry_now:
                # A close or flush asked for the queue now: a backoff set before it (up
                # to retry_max away) must not outlast the close's own timeout.
                self._retry_now = False
                retry_at = 0.0
            # From the tail: new lines are there, behind those written and waiting to
            # be synced (which, with sync=False, can be thousands).
            pending = any(not e.written for e in reversed(self._queue))
            waiting_sync = self._synced_queued > 0
            oldest = self._queue[0].enqueued if self._queue else None
            due = oldest is not None and (
                now - oldest >= self.flush_every or self._flush_now or self._closing
            )
            ready = now >= retry_at and (pending or waiting_sync or due)
            if ready:
                force = self._flush_now or self._closing
                self._flush_now = False
                fresh = None
                # Not where a handle was dropped either: writing to its path again may
                # mark lines before these unwritten (`_reopened_elsewhere`).
                if not (waiting_sync or due or force or retry_at) and self._gapless \
                        and self._failing is None and not self._unread and not self._dropped:
                    fresh = self._fresh_locked() or None
                if fresh is None:
                    batch = list(self._queue)
            else:
                timeout = -1.0  # block until rung
                if now < retry_at:
                    timeout = retry_at - now
                elif oldest is not None:
                    timeout = max(0.0, oldest + self.flush_every - now)
                if self._closing:
                    timeout = min(0.05 if timeout < 0 else timeout,
                                  max(0.0, self._deadline - now), 0.05)
        if not ready:
            self._bell.acquire(timeout=timeout)
            return False
        with self._passing:
            if fresh is not None:
                return self._write_fresh(fresh)
            return self._write_and_sync(batch, force)

    def _fresh_locked(self) -> list[Entry]:
        """The unwritten tail of the queue, in seq order (call with `_cv` held)."""
        fresh = []
        for e in reversed(self._queue):
            if e.written:
                break
            fresh.append(e)
        fresh.reverse()
        return fresh

    def _write_fresh(self, fresh: list[Entry]) -> LedgerError | None:
        """Write buffered lines when nothing asks for a sync (no synced caller, no flush
        due, no failure being retried): what `_write_and_sync` does for them, looking at
        these lines only. It would walk every line written and waiting for its sync, on
        every wake-up: with thousands buffered, each append would cost them all. The
        lines stay queued, uncommitted, until the pass that syncs them."""
        started = self._begin_io(fresh[0], "write")
        try:
            error, whole = self._write_pending(fresh)
        finally:
            told = self._end_io()
        if not whole:  # the lines written to the other file are synced before the rest
            with self._cv:
                batch = list(self._queue)
            return self._write_and_sync(batch, True)
        self._trim_handles()
        if error is not None:
            return self._fail(error, told=told)
        took = time.monotonic() - started
        if took > self.sync_timeout and not told:
            self._late_sync(fresh[0], took, synced=False)
        return None

    def _common_pass(self, batch: list[Entry]) -> LedgerError | Literal[False] | None:
        """Write and sync a batch the way nearly every wake-up finds it, or decline.

        The common batch: fresh lines for one file that is open and needs no directory
        sync, at least one of them synced, no failure being retried. This does what
        `_write_and_sync` does for it with a fraction of the bookkeeping, since it runs
        once per synced append; it returns False, having touched nothing, for any other
        batch, and hands a failed write or sync to the same handling as the general pass.
        """
        path = batch[0].path
        f = self._open.get(path)
        if f is None or f.newline or f.created:
            return False
        synced_caller = False
        for e in batch:
            if e.written or e.path != path:
                return False
            synced_caller = synced_caller or e.sync
        if not synced_caller:
            return False
        # The pass's I/O is timed from the write on: a hung write stalls callers as
        # surely as a hung sync (fail-fast, REQ-6's count of late syncs).
        started = self._begin_io(batch[0], "write and sync")
        try:
            self._write_group(path, batch)
        except OSError as exc:
            err = self._error("write", exc, next((e for e in batch if not e.written), batch[0]))
            return self._finish_pass(batch, [e for e in batch if e.written], err, False,
                                     started)
        error = None
        try:
            self._sync_file(path, f)
        except OSError as exc:
            error = self._error("sync", exc, batch[0])
            self._after_failed_sync(path, batch)
        finally:
            told = self._end_io()
        if error is not None:
            return self._fail(error, told=told)
        took = time.monotonic() - started
        if took > self.sync_timeout and not told:
            self._late_sync(batch[0], took)
        self._commit_prefix(batch, None)
        return None

    def _file(self, path: str) -> _File:
        f = self._open.get(path)
        if f is None:
            fd, created, identity = self._open_named(path)
            size = self._files.size(fd)
            if created:  # a new entry, whatever one of that name was synced before
                self._entries_synced.discard(path)
            # Also a file a handle dropped after a failure created before its first sync.
            f = _File(fd, size, size, path not in self._entries_synced, identity)
            if size > 0 and self._files.last_byte(fd, size) != b"\n":
                # A torn fragment from a crash: leave it (readers skip it), start clean.
                f.newline = True
            self._open[path] = f
        return f

    def _reopened_elsewhere(self, path: str) -> bool:
        """Open `path` if its handle was dropped, and say whether it now names another
        file than the dropped one while lines written through that one are uncommitted
        (the file was deleted or replaced meanwhile: an `rm` on a failing disk). Those
        lines are not in the new file: they are marked unwritten, to be written again in
        seq order, never committed from a file that does not hold them."""
        held = self._dropped.get(path)
        if held is None:
            return False
        if path in self._open:
            self._release(path)
            return False
        f = self._file(path)  # raises while it cannot be opened: the handle stays held
        if not self._identities_hold:
            same = True  # cannot be told (inode numbers drift here): taken for the same
        else:
            try:
                same = (self._files.linked(held.fd)
                        and self._files.identity(held.fd) == f.identity)
            except OSError:
                same = False
        self._release(path)
        if same:
            # The new handle found the file's size, which counts bytes written through
            # the old one and never synced: a failed write's (cut-back failed), marked
            # written once read back, or a failed sync's (cut failed). Taken as synced,
            # they would let another file take a line while they are still only in the
            # page cache, and a power cut could keep that line and lose these: a gap in
            # the chain for good. The old handle's mark is what was truly synced.
            f.synced = min(f.synced, held.synced)
            return False
        self._unread.pop(path, None)  # what a failed write left is in the old file
        lines = self._unwrite(path)
        if lines:
            log.warning("ledger: %s was deleted or replaced while its handle was closed; "
                        "writing its %d unacknowledged line(s) again", path, len(lines))
        return bool(lines)

    def _unwrite(self, path: str) -> list[Entry]:
        """Mark the written, uncommitted lines of `path` unwritten (the file they were
        written to is gone) and return them, in seq order, to be written again."""
        with self._cv:
            lines = [e for e in self._queue if e.path == path and e.written]
        for e in lines:
            e.written = False
            self._gapless = False
        self._lines_written -= len(lines)
        return lines

    def _open_named(self, path: str) -> tuple[int, bool, tuple[int, int]]:
        """Open `path` for appending: (fd, created, identity), the file the path names.

        A file deleted or replaced in the instant between the open and the look at its
        name is opened again: nothing was written to it yet. Only a file that never
        matches its name (a file system whose inodes drift) turns the deleted-file check
        off; taken for one after a single miss, the check went off for good, and lines
        synced into the unlinked file were acknowledged with no name holding them.
        """
        made = False
        for attempt in range(3):
            try:
                fd, created = self._files.open_append(path)
            except FileNotFoundError:
                fd, created = self._open_in_new_dir(path)
            made = made or created
            identity = self._files.identity(fd)
            if not self._identities_hold or (self._files.linked(fd)
                                             and self._files.names(path, identity)):
                return fd, made, identity
            if attempt < 2:
                self._close(path, fd)
        self._identities_hold = False
        log.warning("ledger: %s does not name the file just opened from it; a day "
                    "file deleted while open will not be noticed", path)
        return fd, made, identity

    def _open_in_new_dir(self, path: str) -> tuple[int, bool]:
        """The ledger's directory was removed while the writer ran (`rm -rf` of the state
        dir): make it again, 0700, so lines from now on still reach a file rather than
        failing for ever; the chain shows the gap."""
        directory = os.path.dirname(path)
        if os.path.isdir(directory):
            raise FileNotFoundError(2, "No such file or directory", path)
        make_durable_dirs(directory, self._files.sync_dir)
        log.warning("ledger: directory %s was removed while open; created it again", directory)
        return self._files.open_append(path)

    def _drop(self, path: str, *, keep: bool = False) -> None:
        """Stop writing through the handle of `path`; close it, or with `keep` or while
        lines written through it are uncommitted, hold it for `_reopened_elsewhere`."""
        f = self._open.pop(path, None)
        if f is not None:
            with self._cv:
                held = keep or any(e.path == path and e.written for e in self._queue)
            # Kept on close too (the shutdown closes it): a retry during close must still
            # tell whether the path names that file, or it would sync a new empty one.
            if held:
                self._release(path)
                self._dropped[path] = f
                return
            self._close(path, f.fd)

    def _release(self, path: str) -> None:
        held = self._dropped.pop(path, None)
        if held is not None:
            self._close(path, held.fd)

    def _close(self, path: str, fd: int) -> None:
        try:
            self._files.close(fd)
        except OSError as exc:  # the fd is gone either way; the reopen re-checks the file
            self._faillog.trouble("close", f"ledger: closing {path} failed: {exc}",
                                  time.monotonic())

    def _write_group(self, path: str, group: list[Entry]) -> None:
        if path in self._unread:
            # Raises while the file still cannot be read: the pass fails and is retried.
            group = self._read_back(path, group)
            if not group:
                return
        f = self._file(path)
        data = group[0].data if len(group) == 1 else b"".join([e.data for e in group])
        if f.newline:
            data = b"\n" + data
        before = f.size
        done = 0
        try:
            while done < len(data):
                done += self._files.write(f.fd, data[done:] if done else data)
        except OSError:
            self._undo_write(path, f, before, group)
            raise
        end = before + 1 if f.newline else before
        f.newline = False
        f.size = before + len(data)
        for e in group:
            end += len(e.data)
            e.end = end
            e.written = True
        self._lines_written += len(group)

    def _undo_write(self, path: str, f: _File, before: int, group: list[Entry]) -> None:
        """After a failed write, leave the file with no line half-counted."""
        try:
            self._files.truncate(f.fd, before)
            return
        except OSError as exc:
            self._faillog.trouble("cut write", f"ledger: cannot cut back {path} after a "
                                               f"failed write: {exc}", time.monotonic())
        # The bytes may be partly down: learn which whole lines reached the file so a
        # retry never writes a seq twice; whatever fragment follows is left for readers
        # to skip, and the next write starts on a new line. The handle is kept whatever
        # the read-back finds, now or in a later pass: the lines it marks written are
        # only where the path still names this file (`_reopened_elsewhere`).
        self._drop(path, keep=True)
        self._unread[path] = (before, f.newline)
        try:
            self._read_back(path, group)
        except OSError as exc:
            self._faillog.trouble("read back", f"ledger: cannot read back {path}: {exc}; no "
                                               "line is written to it until it can be",
                                  time.monotonic())

    def _read_back(self, path: str, group: list[Entry]) -> list[Entry]:
        """Mark the lines of `group` that a failed write put down whole, from the file
        itself, and return the rest. Raises OSError when the file cannot be read."""
        before, newline = self._unread[path]
        try:
            tail = self._files.read_from(path, before)
        except FileNotFoundError:
            tail = b""  # the file is gone, and with it anything the write left
        del self._unread[path]
        pos = 1 if tail.startswith(b"\n") and newline else 0
        rest = iter(group)
        for e in rest:
            # A line that reached the file whole but for its newline is written too: the
            # reopened handle starts the next write with the "\n" it lacks, so writing the
            # line again would put its seq in the file twice. Its `end` counts that "\n"
            # (a cut goes at a line's start, never at an `end`).
            if tail.startswith(e.data, pos) or tail[pos:] == e.data[:-1]:
                e.written = True
                pos += len(e.data)
                e.end = before + pos
                self._lines_written += 1
            else:
                return [e, *rest]
        return []

    def _write_and_sync(self, batch: list[Entry], force: bool) -> LedgerError | None:
        started = self._begin_io(batch[0], "write")  # and sync, once `_finish_pass` does
        error, whole = self._write_pending(batch)
        if error is None:
            self._gapless = True  # all it wrote is a prefix; lines still unwritten, a tail
        written = [e for e in batch if e.written]
        return self._finish_pass(batch, written, error, force or not whole, started)

    def _write_pending(self, batch: list[Entry]) -> tuple[LedgerError | None, bool]:
        """Write the unwritten lines of `batch` in seq order, one write per run of
        same-file lines: (the error of the first write that failed, whether it wrote
        them all). It stops short before the first line for a file while another file
        holds lines not yet synced: the caller syncs those, and a later pass writes
        the rest."""
        i = 0
        todo = [e for e in batch if not e.written]
        if self._settle is not None and todo:
            try:
                self._settle_found(self._settle)
            except OSError as exc:
                return self._error("sync", exc, todo[0], path=self._settle), True
            self._settle = None
        while i < len(todo):
            j = i
            while j < len(todo) and todo[j].path == todo[i].path:
                j += 1
            if self._unsynced_elsewhere(todo[i].path):
                # A power cut keeps each file's unsynced lines or loses them on its own:
                # a later file keeping its line while an earlier one lost the line before
                # would leave a gap in the chain for good (a midnight, a clock step, the
                # import of many days). Nothing is written past a file boundary until the
                # lines before it are synced.
                return None, False
            try:
                if self._reopened_elsewhere(todo[i].path):
                    todo = [e for e in batch if not e.written]  # again, in seq order
                    i = 0
                    continue
                self._write_group(todo[i].path, todo[i:j])
            except OSError as exc:
                failed_at = next((e for e in todo[i:j] if not e.written), todo[i])
                return self._error("write", exc, failed_at), True
            i = j
        return None, True

    def _settle_found(self, path: str) -> None:
        """fdatasync the file a killed writer may have left unsynced, and its directory
        entry. Read-only and not following a link: what cannot be opened so, or is no
        longer a regular file (deleted, made immutable, replaced by a directory or a
        FIFO), holds nothing this writer's lines depend on, and is passed over with a
        warning rather than retried for ever. Raises OSError for a failure worth a retry
        (EIO, a full disk)."""
        try:
            fd = self._files.open_existing(path)
        except OSError as exc:
            if exc.errno in _UNSETTLABLE:
                if exc.errno != errno.ENOENT:
                    log.warning("ledger: cannot open %s to sync what a killed daemon left "
                                "in it (%s); going on", path, exc.strerror or exc)
                return
            raise
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                log.warning("ledger: %s is no longer a regular file; not synced", path)
                return
            try:
                self._files.sync(fd)
            except OSError as exc:
                if exc.errno not in _UNSETTLABLE:
                    raise
                log.warning("ledger: cannot sync %s (%s); going on", path,
                            exc.strerror or exc)
                return
        finally:
            self._files.close(fd)
        sync_entries_of(os.path.dirname(path) or "/", self._files.sync_dir)

    def _unsynced_elsewhere(self, path: str) -> bool:
        """Whether a file other than `path` holds lines written and not yet synced:
        through an open handle past its last sync, or through a handle held since it was
        dropped that has written lines still queued (synced or not: they are synced
        again, and a pass that stops here always has a line of its own to sync)."""
        if any(p != path and f.size > f.synced for p, f in self._open.items()):
            return True
        if all(p == path for p in self._dropped):
            return False  # the common case: no failure left a handle held
        with self._cv:
            return any(e.written and e.path != path and e.path in self._dropped
                       for e in self._queue)

    def _finish_pass(
        self, batch: list[Entry], written: list[Entry], error: LedgerError | None, force: bool,
        started: float,
    ) -> LedgerError | None:
        """Sync what a pass wrote (when anything asks for it) and commit the durable prefix.
        `started` is when the pass's I/O began (its first write), which set `_io_started`
        (`_begin_io`); this ends it."""
        synced: set[str] = set()
        wants_sync = False
        try:
            if written:
                wants_sync = (
                    error is not None
                    or any(e.sync for e in written)
                    or force
                    or time.monotonic() - written[0].enqueued >= self.flush_every
                )
            if wants_sync:
                # Words the watchdog's line, should this hang (a plain store: it reads it
                # under the state lock, and a stale read would only word it "write").
                self._io_what = "write and sync"
                # Sync every file touched by a written-but-uncommitted line (group commit).
                paths = list(dict.fromkeys(e.path for e in written))
                try:
                    for p in paths:
                        if self._reopened_elsewhere(p):
                            continue  # its lines are not in the file: written again next pass
                        self._sync_file(p, self._file(p))
                        synced.add(p)
                except OSError as exc:
                    bad = next(e for e in written if e.path not in synced)
                    error = error or self._error("sync", exc, bad)
                    self._after_failed_sync(p, written)
        finally:
            # Before anything is told of the pass: a hang the watchdog told is not also
            # a late sync, and its error not a second failure.
            told = self._end_io()
        if not written:
            return self._fail(error, told=told) if error else None
        took = time.monotonic() - started
        if not wants_sync:
            if took > self.sync_timeout and not told:
                self._late_sync(written[0], took, synced=False)
            return None
        if error is None and took > self.sync_timeout and not told:
            self._late_sync(written[0], took)
        # Commit the durable prefix: lines before the first one not known synced.
        commit: list[Entry] = []
        for e in batch:
            if e.written and e.path in synced:
                commit.append(e)
            else:
                break
        if commit:
            self._commit_prefix(commit, error)
        self._trim_handles()
        if error is not None:
            return self._fail(error, told=told)
        return None

    def _trim_handles(self) -> None:
        if len(self._open) > 2:
            # Day rollover leaves yesterday's handle open; keep only the newest.
            for p in list(self._open)[:-1]:
                self._drop(p)

    def _sync_file(self, path: str, f: _File) -> None:
        """fdatasync one file, and its directory entry when this writer created it; then
        make sure the synced lines are where readers look."""
        self._files.sync(f.fd)
        if f.created:
            self._files.sync_dir(path.rsplit("/", 1)[0] or "/")
            for d in self._ancestors:
                sync_entries_of(d, self._files.sync_dir)
            self._ancestors = ()
            f.created = False
            self._entries_synced.add(path)
        f.synced = f.size
        self._syncs += 1
        if self._identities_hold and self._moved(path, f):
            self._rewrite_moved(path)

    def _moved(self, path: str, f: _File) -> bool:
        """Whether the path no longer names the file just synced. Every pass asks the
        handle whether it still has a name at all (an `rm`, or another file renamed over
        it: one fstat); the path lookup that also catches the file renamed away costs
        several µs cold, so it runs at most every `name_check_every` seconds. A file
        renamed away keeps the lines written meanwhile, under its new name."""
        if not self._files.linked(f.fd):
            return True
        now = time.monotonic()
        if now - f.named_at < self.name_check_every:
            return False
        f.named_at = now
        return not self._files.names(path, f.identity)

    def _rewrite_moved(self, path: str) -> None:
        """The file open for `path` was deleted, renamed or replaced (by hand: retention
        never touches an open file), so the lines synced into it are on no path a reader
        looks at. Write its uncommitted lines again to what `path` names now, usually a
        new file, before they are acknowledged. Lines acknowledged before went with the
        file; the chain then shows the gap."""
        log.warning("ledger: %s was deleted or replaced while open; writing its "
                    "unacknowledged lines to %s again", path, path)
        lines = self._unwrite(path)
        self._drop(path)  # it holds no written line now: closed, not kept
        self._release(path)  # one kept from an earlier drop is gone with the file too
        # Whatever the path names now, its directory entry is new to us: sync it too.
        self._entries_synced.discard(path)
        if lines:
            self._write_group(path, lines)
            self._sync_file(path, self._file(path))

    def _late_sync(self, first: Entry, took: float, *, synced: bool = True) -> None:
        """REQ-6: a write or sync past its bound is an append error even when it then
        succeeds (and even when nobody waited for it); otherwise the counter never sees a
        stalled disk. It is not a failing head, so `_failing` is left alone."""
        what, now = (("write and sync", "the lines are now durable") if synced
                     else ("write", "the lines are written and will be synced"))
        late = first.unavailable(
            f"ledger {what} of {first.path} took {took:.3f}s, over the "
            f"{self.sync_timeout:g}s bound; {now}"
        )
        with self._cv:
            self._record_error(late)
        log.error("%s", late)

    def _commit_prefix(self, commit: list[Entry], error: LedgerError | None) -> None:
        """Commit durable lines at the head of the queue: index, unqueue, acknowledge.

        The index has them before they leave the queue, so `enqueue_built` always sees
        each line in one place or the other."""
        if self._on_commit is not None:
            try:
                self._on_commit(commit)
            except Exception:  # a reader-side bug must not stop durability
                log.exception("ledger: commit callback failed (seq %d)", commit[0].seq)
        with self._cv:
            for e in commit:
                self._queue.popleft()
                self._synced_queued -= e.sync
            if error is None:
                self._failing = None
        for e in commit:
            if e.waiter is not None:
                e.waiter.wake()

    def _after_failed_sync(self, path: str, written: list[Entry]) -> None:
        """A failed fdatasync may have dropped dirty pages that still read back whole, and
        a later sync would report success without writing them: cut every uncommitted line
        of `path` back and rewrite it, or, where the cut fails, retry the sync alone (never
        rewrite: no duplicates). None of those lines is durable, whichever handle wrote
        it (one dropped after a torn write or a failed cut, or by `_trim_handles`), so the
        cut goes at the start of the first: never inside a line, whose bytes a cut there
        would leave in place under a seq then written again.

        The lines the pass wrote to other files above the first line cut go first, the
        file holding the highest first: a file must never hold a line whose predecessor
        is missing from every file (across a UTC midnight the next day's file holds the
        next seqs), or a crash before the retry leaves that gap in the chain for good.
        """
        f = self._open.get(path)
        if f is None:
            return
        first = next((e for e in written if e.path == path and e.written), None)
        at = f.synced if first is None else min(f.synced, first.end - len(first.data))
        if first is not None:
            later: dict[str, Entry] = {}  # another file -> its first line above `first`
            for e in written:
                if e.written and e.seq > first.seq and e.path != path:
                    later.setdefault(e.path, e)
            for q, e in sorted(later.items(), key=lambda item: -item[1].seq):
                fq = self._open.get(q)
                if fq is None or not self._cut_back(q, fq, e.end - len(e.data), written):
                    # The lines above stay where they are: keep this file's too, so what
                    # the files hold stays a prefix, and retry the sync alone.
                    self._drop(path)
                    return
        self._cut_back(path, f, at, written)
        self._drop(path)

    def _cut_back(self, path: str, f: _File, at: int, written: list[Entry]) -> bool:
        """Cut `path` (open as `f`) back to `at` and mark the lines of `written` the cut
        removed unwritten, to be written again; False, all left in place, when it fails."""
        try:
            self._files.truncate(f.fd, at)
        except OSError as exc:
            self._faillog.trouble("cut sync", f"ledger: cannot cut back {path} after a "
                                              f"failed sync: {exc}", time.monotonic())
            return False
        f.size = at
        f.synced = min(f.synced, at)
        for e in written:
            # Only lines the cut removed are rewritten: each cut falls at a line's start,
            # so a line is cut whole or left whole; rewriting one left in place would put
            # its seq in the file twice.
            if e.path == path and e.written and e.end > at:
                e.written = False
                self._gapless = False
                self._lines_written -= 1
        return True

    def _error(self, op: str, exc: OSError, e: Entry, path: str | None = None) -> LedgerError:
        """The error of `e`'s pass, whose `op` on `path` (`e`'s file unless another was
        being synced for it) failed."""
        # Every failure `_fail` reports was made here in the same pass: the file its
        # log names when the episode ends.
        path = path if path is not None else e.path
        self._failed_path = path
        return e.unavailable(f"ledger {op} of {path} failed: {exc.strerror or exc}")

    def _record_error(self, err: LedgerError, *, counted: bool = True) -> None:
        """What stats show of a failure: the count (REQ-6's append errors, unless it was
        counted already) and the last error with its time. The caller holds the state
        lock."""
        self._errors += counted
        self._last_error = str(err)
        self._last_error_at = time.time()

    def _fail(self, err: LedgerError, *, told: bool = False) -> LedgerError:
        """The pass failed with `err`. `told`: the operation that failed is the one the
        watchdog told hung past the bound, already counted (REQ-6 counts a failure of a
        line's write or sync once, and a timeout is one): told, not counted again."""
        with self._cv:
            self._record_error(err, counted=not told)
            self._failing = err
            queued = len(self._queue)
        self._faillog.failed(err, self._failed_path, queued, time.monotonic(), told=told)
        # Every synced caller still queued hears of it at once, not after its own timeout.
        with self._cv:
            still_queued = list(self._queue)
        for e in still_queued:
            if e.waiter is not None:
                e.waiter.wake(err)
        return err

    def _shutdown_files(self) -> None:
        # Called under the state lock, which `_drop` takes: close the handles directly.
        for p, f in list(self._open.items()):
            del self._open[p]
            self._close(p, f.fd)
        for p in list(self._dropped):
            self._release(p)
