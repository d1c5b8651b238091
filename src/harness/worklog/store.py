"""The work ledger's writer side: one `WorkLedger` per run directory, one holder at a time.

It owns opening a run's ledger (directory 0700, segments 0600), the cross-process
writer lock ``<dir>/.lock``, crash recovery on open, and appending rows through the
engine's single `Writer` thread (`harness.ledger.writer`), which assigns ``seq`` and
the chain link at enqueue and acknowledges a row only after write + fdatasync.

Invariants:

* At most one `WorkLedger` holds a run at a time, across processes and within one
  (``flock`` locks belong to an open file description, so a second open in the same
  process is refused too); the refusal names the holder's pid and host.
* Nothing is appended to a chain that has not been verified from genesis in this
  open: interior damage refuses to open, naming ``entry <seq> (line <n>)``; a torn
  trailing fragment is cut off (ftruncate + fsync) before the first append, so a new
  row can never be glued onto a crash fragment.
* A refused row writes nothing and consumes no seq; `record` returns only once the
  row is durable, and the returned row is exactly what a reader decodes from the line.

The ledger continues in its last segment; rolling to a new segment is not done here
(readers already follow ``000000.jsonl``, ``000001.jsonl``, … in name order).
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from pathlib import Path
from types import TracebackType
from typing import Any, Final

import msgspec

from harness.ledger.canonical import decode_untrusted
from harness.ledger.errors import LedgerClosed, LedgerUnavailable, LineRejected
from harness.ledger.files import FileLayer, found_parents, make_durable_dirs, open_lock_file
from harness.ledger.writer import Writer
from harness.timefmt import format_ns, now_ns

from . import NoLedger, VerificationFailed, WorkLedgerError, os_problem, quoted, secretless
from .rows import (
    GENESIS,
    RowRejected,
    check_deps,
    check_kind,
    check_task_id,
    clean_payload,
    ledger_dir,
    make_row,
    validate_run_id,
)
from .verify import WorkVerify, iter_segments, read_chain, verify_dir

__all__ = ["FIRST_SEGMENT", "MAX_LINE", "LedgerLocked", "WorkLedger", "cut_torn_tail"]

FIRST_SEGMENT: Final = "000000.jsonl"
LOCK_FILE: Final = ".lock"
MAX_LINE: Final = 1 << 20
# A CLI-level append waits for its own fdatasync; a slow disk is not a failure yet.
SYNC_TIMEOUT: Final = 30.0
# The holder writes its identity right after taking the lock; a contender that reads
# in between sees an empty file, so it looks again briefly before giving up on it.
_HOLDER_READ_TRIES: Final = 20


class LedgerLocked(WorkLedgerError):
    """Another writer holds this run's ledger (exit 2); names the holder."""

    exit_code = 2

    def __init__(self, message: str, holder: dict[str, Any]) -> None:
        super().__init__(message)
        self.holder = holder


class _RowSealer:
    """Seals a prepared row for the writer: the seq and chain link arrive at enqueue."""

    def __init__(self, path: str) -> None:
        self.path = path

    def seal(self, obj: dict[str, Any], seq: int, prev: str) -> tuple[bytes, str, str]:
        row, line = make_row(
            seq=seq,
            ts_ns=now_ns(),
            kind=obj["kind"],
            task_id=obj["task_id"],
            payload=obj["payload"],
            payload_bytes=obj["payload_bytes"],
            prev_hash=prev,
            redactions=obj["redactions"],
        )
        # Handed back to `record` through the queued object: the writer keeps no other
        # channel from the sealer to the caller.
        obj["row"] = row
        return line, row["entry_hash"], self.path


def _read_holder(fd: int) -> dict[str, Any] | None:
    """The holder's identity: {} while it has recorded none, None when the lock file holds
    something that is no identity (not a JSON object, or nested past the decoder's depth,
    which `decode_untrusted` reports as bad JSON rather than a RecursionError)."""
    data = b""
    for _ in range(_HOLDER_READ_TRIES):
        try:
            data = os.pread(fd, 4096, 0)
        except OSError:
            data = b""
        if data:
            try:
                info = decode_untrusted(data)
                if isinstance(info, dict):
                    return info
            except msgspec.DecodeError:
                pass  # caught mid-write; look again
        time.sleep(0.01)
    return None if data else {}


def take_lock(directory: Path, run_id: str) -> int:
    path = directory / LOCK_FILE
    # Not through a symlink, as for a segment: the holder truncates and rewrites this
    # file, so a link at its name would have it clobber the link's target.
    fd = open_lock_file(path)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _read_holder(fd)
        os.close(fd)
        if holder is None:
            who = f"another process (its identity in {secretless(path)} cannot be read)"
            holder = {}
        elif holder:
            # What the lock file says is whatever was written there: quoted scrubbed.
            who = (f"pid {secretless(holder.get('pid'))} on {secretless(holder.get('host'))} "
                   f"since {secretless(holder.get('since'))}")
        else:
            who = "another process (it has not recorded its pid yet)"
        raise LedgerLocked(
            f"work ledger {run_id!r} is held by {who}; only one writer may hold a run",
            holder,
        ) from None
    except BaseException:
        os.close(fd)
        raise
    try:
        info = json.dumps(
            {"pid": os.getpid(), "host": socket.gethostname(), "since": format_ns(now_ns())},
            sort_keys=True,
        ).encode("utf-8")
        os.ftruncate(fd, 0)
        os.pwrite(fd, info + b"\n", 0)
    except BaseException:
        os.close(fd)  # closing the description drops the lock too
        raise
    return fd


def cut_torn_tail(segment: Path, torn: bytes, torn_size: int,
                  files: FileLayer | None = None) -> int:
    """Cut a torn tail off `segment` (its last segment) and sync; return the size kept.

    `torn` and `torn_size` are what `verify.read_chain` / `verify_dir` reported: the
    fragment's last bytes (at most CHUNK of them: a crash can leave megabytes of zeroed
    blocks) and its whole size. The whole `torn_size` bytes are cut, never only
    ``len(torn)``, or the rest of the fragment would stay inside the chain. Every path
    that drops a torn tail before appending (writer recovery, fetch) cuts it here. The
    caller holds the writer's lock; the file's end is checked anyway, and
    `VerificationFailed` names the segment rather than cut bytes that are not the fragment.
    """
    layer = files or FileLayer()
    fd, _ = layer.open_append(str(segment))
    try:
        size = layer.size(fd)
        keep = size - torn_size
        if keep < 0 or len(torn) > torn_size or os.pread(fd, len(torn), size - len(torn)) != torn:
            raise VerificationFailed(
                f"work ledger segment {secretless(segment)} changed while its torn tail was "
                f"being cut (it no longer ends in the {torn_size}-byte fragment read from it)"
            )
        layer.truncate(fd, keep)
        layer.sync(fd)
    finally:
        layer.close(fd)
    return keep


def release_lock(fd: int) -> None:
    try:
        # A stale identity would mislead whoever reads the file next.
        os.ftruncate(fd, 0)
    except OSError:
        pass
    finally:
        os.close(fd)


_decode_row = msgspec.json.Decoder()


class WorkLedger:
    """The open, locked, verified ledger of one run; appends are synced before they return."""

    def __init__(
        self,
        workdir: str | Path,
        run_id: str,
        *,
        files: FileLayer | None = None,
        sync_timeout: float = SYNC_TIMEOUT,
    ) -> None:
        self.run_id = validate_run_id(run_id)
        if not Path(workdir).is_dir():
            raise WorkLedgerError(f"work tree {secretless(workdir)} is not a directory")
        self.dir = ledger_dir(workdir, run_id)
        self._files = files or FileLayer()
        self._closed = False
        try:
            made = make_durable_dirs(str(self.dir), self._files.sync_dir)
            self._lock_fd = take_lock(self.dir, self.run_id)
        except OSError as exc:
            raise WorkLedgerError(
                f"cannot open work ledger {secretless(self.dir)}: {os_problem(exc)}"
            ) from None
        try:
            try:
                self.recovered_tail, state = self._recover()
            except OSError as exc:
                raise WorkLedgerError(
                    f"cannot recover work ledger {secretless(self.dir)}: {os_problem(exc)}"
                ) from None
            segs = iter_segments(self.dir)
            self.segment = segs[-1] if segs else self.dir / FIRST_SEGMENT
            self.opened: WorkVerify = state
            self._writer = Writer(
                _RowSealer(str(self.segment)),
                next_seq=state.entry_count + 1,
                head_hash=state.head_hash,
                files=self._files,
                sync_timeout=sync_timeout,
                max_line=MAX_LINE,
                name=f"worklog-{self.run_id}",
                # Up to the work tree, which holds the entry of `.harness/`.
                ancestors=found_parents(str(self.dir), 4, made),
            )
        except BaseException:
            release_lock(self._lock_fd)
            raise

    # -- opening ---------------------------------------------------------------------

    def _recover(self) -> tuple[bytes | None, WorkVerify]:
        """Verify from genesis; cut a torn tail; refuse interior damage."""
        try:
            res = verify_dir(self.dir)
        except NoLedger:
            return None, WorkVerify(ok=True, entry_count=0, head_hash=GENESIS)
        if not res.ok:
            raise VerificationFailed(
                f"work ledger {quoted(self.run_id)} ({secretless(self.dir)}): "
                f"{res.describe()}; "
                "refusing to extend a broken chain. "
                "Move the ledger aside, or fetch it again from its anchor."
            )
        torn = res.torn_tail
        if torn is not None:
            self._cut_tail(torn, res.torn_size)
            res.torn_tail, res.torn_size = None, 0
        return torn, res

    def _cut_tail(self, torn: bytes, torn_size: int) -> None:
        """Cut the fragment of `torn_size` bytes, ending in `torn`, off the last segment."""
        cut_torn_tail(iter_segments(self.dir)[-1], torn, torn_size, self._files)

    # -- appending -------------------------------------------------------------------

    def record(self, kind: str, task_id: str | None, payload: dict[str, Any]) -> dict[str, Any]:
        """Validate, scrub and append one row; return it once it is durable."""
        if self._closed:
            raise WorkLedgerError(f"work ledger {self.run_id!r} is closed")
        kind = check_kind(kind)
        task_id = check_task_id(kind, task_id)
        clean, data, count = clean_payload(payload)
        check_deps(kind, task_id, payload, clean)
        if len(data) >= MAX_LINE:
            raise RowRejected(
                f"payload of {len(data)} bytes cannot fit the {MAX_LINE}-byte line limit"
            )
        obj: dict[str, Any] = {
            "kind": kind,
            "task_id": task_id,
            "payload": clean,
            "payload_bytes": data,
            "redactions": count,
        }
        try:
            self._writer.append(obj, sync=True)
        except LineRejected as exc:
            raise RowRejected(f"row refused: {exc}") from None
        except LedgerClosed:
            raise WorkLedgerError(f"work ledger {self.run_id!r} is closed") from None
        except LedgerUnavailable as exc:
            raise WorkLedgerError(
                f"work ledger {self.run_id!r}: {kind} row was not confirmed durable: {exc}"
            ) from None
        row: dict[str, Any] = obj["row"]
        return row

    # -- reading ---------------------------------------------------------------------

    @property
    def head(self) -> tuple[int, str]:
        """(seq of the last row, its entry_hash); (0, GENESIS) for an empty ledger."""
        return self._writer.head

    def pending(self) -> int:
        """Rows accepted but not yet durable (after a failed sync they are retried in
        order; a `record` that raised may still land)."""
        return self._writer.stats().queued

    def rows(self) -> list[dict[str, Any]]:
        """Every row on disk, in chain order (verified when the ledger was opened, and
        only this holder has appended since)."""
        try:
            lines = read_chain(self.dir).lines
        except NoLedger:
            return []
        return [_decode_row.decode(line) for line in lines]

    # -- closing ---------------------------------------------------------------------

    def close(self, timeout: float = SYNC_TIMEOUT) -> None:
        """Drain the writer and release the lock (idempotent)."""
        if self._closed:
            return
        self._closed = True
        try:
            self._writer.close(timeout)
        except LedgerUnavailable as exc:
            raise WorkLedgerError(f"work ledger {self.run_id!r}: {exc}") from None
        finally:
            release_lock(self._lock_fd)

    def __enter__(self) -> WorkLedger:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
