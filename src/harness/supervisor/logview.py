"""Reading a harness's log for `harness logs` (DESIGN.md §2): one place for the daemon's
`logs` op and for the CLI reading the files itself while the daemon is down.

Which file: a one-shot's per-run log ``<jobs_dir>/<harness>/<run_id>.log`` (or its
``.log.zst`` once the run closed) — the newest run that has a log when no run is asked
for; a resident's single durable log, shared by all its runs, which the runner does not
mark run by run, so it is shown whole even for ``--run N``.

Invariants: reading never writes, creates or locks anything; a run whose log is absent is
explained from facts only — the ledger's record for it (through the caller's `lookup`,
asked only when a one-shot's log file is missing, or whether a resident's run exists) and
the log files present — as unknown, skipped,
never logged, or pruned by ``keep_runs``; with a cap, at most ``max_bytes`` of a log are
returned (and about twice that held while a compressed log streams through), and what
the cap left out in front is counted, never hidden; ``--lines`` reads a plain log
backwards from its end, so a few lines of a huge log cost a few reads; a whole log
streamed (`stream_log`, the CLI's plain `harness logs` with the daemon down) holds one
chunk at a time (of a compressed log, what a few hundred bytes of it decompress to),
whatever its size, and its text is exactly what `view_log` would give; a compressed log
cut short is an error, never shown as if it were whole.
"""

from __future__ import annotations

import codecs
import errno
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO

import zstandard

from ..ledger.files import open_regular
from . import logs

# The daemon's answer travels as one JSON line: a log bigger than this is sent as its tail.
SOCKET_CAP = 1 << 20
_CHUNK = 1 << 16
_FEED = 256  # compressed bytes decompressed at once (see unzst)

# (harness, run_id) → that run's folded record as the runs op prints it, or None.
Lookup = Callable[[str, int], dict[str, Any] | None]


class LogError(Exception):
    """A log that cannot be shown; `code` is the control op's error code."""

    def __init__(self, code: str, message: str) -> None:
        self.code = code
        self.message = message
        super().__init__(message)


@dataclass(frozen=True)
class LogText:
    """The text of one log, or of its tail.

    `run_id` is None for a resident's durable log asked for without ``--run``; `cut` is
    how many bytes in front of `text` the cap left out (with its partial first line), 0
    when nothing was cut or ``--lines`` still got every line it asked for; `shared` says
    the log is a resident's, holding every run's output.
    """

    name: str
    run_id: int | None
    path: str
    text: str
    cut: int = 0
    shared: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "run_id": self.run_id, "path": self.path,
                "text": self.text, "cut_bytes": self.cut, "shared": self.shared}


class OpenLog:
    """One log file, open: a plain log, or a closed run's ``.zst``.

    `size` is a plain log's size when it was opened: a resident still appending does not
    move the end a reader reads to. Once open, the bytes stay readable even when the
    compression or a prune unlinks the file a moment later.
    """

    def __init__(self, path: str, f: BinaryIO, compressed: bool) -> None:
        self.path = path
        self.file = f
        self.compressed = compressed
        self.size = 0 if compressed else os.fstat(f.fileno()).st_size

    def close(self) -> None:
        self.file.close()

    def __enter__(self) -> OpenLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def tail(self, max_bytes: int | None, lines: int | None) -> tuple[bytes, int]:
        """(its bytes or a tail of them, bytes left out in front). The tail holds at most
        `max_bytes`, and needs to hold no more than the last `lines` lines; when anything
        is left out in front, the tail's first line may be partial."""
        if self.compressed:
            return _tail_zst(self.file, self.path, max_bytes, lines)
        return _tail_plain(self.file, self.size, max_bytes, lines)

    def chunks(self) -> Iterator[bytes]:
        """Its bytes from the start, at most `_CHUNK` at a time (to `size` for a plain
        log), so that reading all of it holds one chunk, whatever the log's size."""
        if self.compressed:
            yield from unzst(self.file, self.path)
            return
        self.file.seek(0)
        left = self.size
        while left > 0 and (chunk := self.file.read(min(_CHUNK, left))):
            left -= len(chunk)
            yield chunk


def open_log(path: str) -> OpenLog | None:
    """`path` opened, else ``path.zst``; None when neither exists.

    The plain file is tried first: compression writes the ``.zst`` before it deletes the
    plain log, so a log being compressed meanwhile is still found as one or the other.
    Regular files only, opened non-blocking: a FIFO put where a log goes blocked
    `harness logs` for ever, and the daemon's `logs` thread with its SIGTERM.
    """
    for name, compressed in ((path, False), (path + logs.ZST, True)):
        try:
            f = open_regular(name)
        except FileNotFoundError:
            continue
        try:
            return OpenLog(name, f, compressed)  # closed by the caller
        except BaseException:
            f.close()
            raise
    return None


def _tail_plain(f: BinaryIO, size: int, max_bytes: int | None, lines: int | None
                ) -> tuple[bytes, int]:
    floor = size - min(size, max_bytes) if max_bytes is not None else 0
    if lines is None:
        f.seek(floor)
        return f.read(size - floor), floor
    # Backwards in chunks, stopping once the asked-for lines are in: `--lines 20` of a
    # resident's gigabyte log reads kilobytes. Each chunk's newlines are counted once,
    # and the chunks joined once at the end: a log with fewer newlines than asked
    # for is read whole, and re-copying and re-counting all that was read at each
    # chunk made that quadratic (a 40 MB log without a newline took 12 s).
    pos, newlines = size, 0
    chunks: list[bytes] = []
    ends_line = False  # a final newline ends the last line; it does not count
    while pos > floor and newlines - ends_line < lines:
        step = min(_CHUNK, pos - floor)
        pos -= step
        f.seek(pos)
        chunk = f.read(step)
        if not chunks:
            ends_line = chunk.endswith(b"\n")
        chunks.append(chunk)
        newlines += chunk.count(b"\n")
    chunks.reverse()
    return b"".join(chunks), pos


def _trim_lines(buf: bytearray, lines: int) -> int:
    """Drop what is in front of the newline that precedes `buf`'s last `lines` lines (that
    newline stays, as the partial first line `_whole_lines` removes); the bytes dropped."""
    tail, complete = last_lines(bytes(buf), lines)
    if not complete or len(tail) == len(buf):
        return 0
    drop = len(buf) - len(tail) - 1
    del buf[:drop]
    return drop


def unzst(f: BinaryIO, path: str) -> Iterator[bytes]:
    """A ``.zst`` log's bytes, decompressed, at most `_CHUNK` at a time. Damaged data (a
    disk error, a hand edit, a file that is no zstd frame, a frame cut short) is an
    OSError naming the file, as an unreadable plain log is: every reader already answers
    that with one line, where the library's own error is no OSError and went up as a
    traceback, and a frame cut short was no error at all: its front was shown as the
    whole log."""
    dec = zstandard.ZstdDecompressor().decompressobj()
    while block := f.read(_CHUNK):
        # Fed a little at a time: the library hands back at once all that its input
        # decompresses to, and a few hundred bytes of a log that repeats itself hold
        # megabytes (256 bytes at most some 8 MiB; a whole 64 KiB, gigabytes).
        for at in range(0, len(block), _FEED):
            try:
                out = dec.decompress(block[at:at + _FEED])
            except zstandard.ZstdError as exc:
                raise OSError(errno.EIO, f"damaged compressed log ({exc})", path) from None
            for start in range(0, len(out), _CHUNK):
                yield out[start:start + _CHUNK]
            if dec.eof:
                return
    raise OSError(errno.EIO, "damaged compressed log (it ends inside its zstd frame)", path)


def _tail_zst(f: BinaryIO, path: str, max_bytes: int | None, lines: int | None
              ) -> tuple[bytes, int]:
    # Streamed through a bounded window: the decompressed size is not known up front.
    # The window is trimmed once it is twice what must be kept, so trimming stays
    # linear in the log's size.
    keep = max_bytes if max_bytes is not None else 4 * _CHUNK
    buf = bytearray()
    dropped = 0
    for chunk in unzst(f, path):
        buf += chunk
        if len(buf) > 2 * keep:
            dropped += _trim(buf, max_bytes, lines)
            keep = max(keep, len(buf))  # many long lines: let the window grow
    dropped += _trim(buf, max_bytes, lines)
    return bytes(buf), dropped


def _trim(buf: bytearray, max_bytes: int | None, lines: int | None) -> int:
    """Cut `buf` in place to its last `lines` lines and `max_bytes` bytes; bytes cut."""
    dropped = _trim_lines(buf, lines) if lines is not None else 0
    if max_bytes is not None and len(buf) > max_bytes:
        extra = len(buf) - max_bytes
        del buf[:extra]
        dropped += extra
    return dropped


class LogFollower:
    """`trigger --wait`'s view of one run's log: the bytes added since the last look.

    While the run is live its plain log only grows. Once its record reads closed the log
    may already be compressed, so `rest` finishes from whichever file is there, skipping
    what was shown: every byte is shown once, whether the compression came before or
    after the last look.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self.shown = 0

    def new(self) -> bytes:
        """What the plain log gained since the last call (b"" when it is not there)."""
        data = self._plain()
        return data if data is not None else b""

    def rest(self) -> bytes:
        """After the run closed: everything not shown yet, from the plain log or its .zst."""
        data = self._plain()
        if data is not None:
            return data
        # The plain log goes only after its .zst is whole (compress_log), so a plain log
        # found missing here is in the .zst.
        try:
            f = open_regular(self.path + logs.ZST)  # closed below; not a FIFO
        except FileNotFoundError:
            return b""  # never written: the run printed nothing
        out = bytearray()
        with f:
            skip = self.shown
            for chunk in unzst(f, self.path + logs.ZST):
                if skip >= len(chunk):
                    skip -= len(chunk)
                    continue
                out += chunk[skip:]
                skip = 0
        self.shown += len(out)
        return bytes(out)

    def _plain(self) -> bytes | None:
        """The plain log's bytes past `shown`, or None when it is not there.

        Opened, never looked at first: once open, its bytes stay readable even when the
        compression unlinks it a moment later. A look then an open could find it there
        and then gone, and show nothing of the run's last output.
        """
        try:
            f = open_regular(self.path)  # closed below; not a FIFO
        except FileNotFoundError:
            return None
        with f:
            f.seek(self.shown)
            data = f.read()
        self.shown += len(data)
        return data


def last_lines(data: bytes, lines: int) -> tuple[bytes, bool]:
    """The last `lines` lines of `data`, and whether `data` held that many."""
    if not data:
        return data, False
    # A final newline ends the last line; it does not start an empty one.
    pos = len(data) - 1 if data.endswith(b"\n") else len(data)
    for i in range(lines):
        pos = data.rfind(b"\n", 0, pos)
        if pos < 0:
            return data, i + 1 >= lines
    return data[pos + 1:], True


def _whole_lines(data: bytes, cut: int) -> tuple[bytes, int]:
    """After a cut in front, drop the partial first line too (when a newline follows)."""
    if cut == 0:
        return data, 0
    nl = data.find(b"\n")
    if nl < 0:
        return data, cut
    return data[nl + 1:], cut + nl + 1


def _render(name: str, run_id: int | None, found: tuple[str, bytes, int], lines: int | None,
            shared: bool) -> LogText:
    path, data, cut = found
    data, cut = _whole_lines(data, cut)
    if lines is not None:
        data, complete = last_lines(data, lines)
        if complete:
            cut = 0  # every line asked for is there: nothing wanted was left out
    return LogText(name=name, run_id=run_id, path=path,
                   text=data.decode("utf-8", errors="replace"), cut=cut, shared=shared)


def _missing(name: str, run: int, keep_runs: int, jobs_dir: str, lookup: Lookup) -> LogError:
    """Why one-shot run `run` has no log file, from its record and the logs left."""
    rec = lookup(name, run)
    if rec is None:
        return LogError("not_found", f"{name} has no run {run}")
    if rec.get("outcome") == "skipped":
        why = f" ({rec['reason']})" if rec.get("reason") else ""
        return LogError("not_found", f"{name} run {run} was skipped{why}: it has no log")
    if not rec.get("log"):
        return LogError("not_found", f"{name} run {run} has no log "
                                     f"(it ended {rec.get('outcome')} before writing one)")
    kept = sorted(logs.log_ids(jobs_dir, name))
    oldest = f"; the oldest log kept is run {kept[0]}'s" if kept else ""
    if len(kept) >= keep_runs and (not kept or run < kept[0]):
        return LogError("pruned", f"{name} run {run}'s log was pruned "
                                  f"(keep_runs = {keep_runs}{oldest})")
    # keep_runs keeps the newest logs: one it would keep went some other way, and
    # blaming keep_runs would send the user to a setting that did not do it.
    return LogError("not_found", f"{name} run {run}'s log is missing, though keep_runs = "
                                 f"{keep_runs} keeps it (removed outside harness, or "
                                 f"pruned under a lower keep_runs{oldest})")


def _check(run: int | None, lines: int | None) -> None:
    if run is not None and run < 1:
        raise LogError("bad_request", f"run must be a positive run id, got {run}")
    if lines is not None and lines < 1:
        raise LogError("bad_request", f"lines must be at least 1, got {lines}")


def _locate(name: str, kind: str, run: int | None, *, jobs_dir: str, resident_log: str,
            keep_runs: int, lookup: Lookup) -> tuple[int | None, OpenLog, bool]:
    """The log `harness logs NAME [--run N]` shows, opened (the caller closes it), with
    the run id it is shown as and whether it is a resident's shared log; LogError when
    there is none. (See `view_log` for the arguments.)"""
    if kind == "resident":
        if run is not None and lookup(name, run) is None:
            raise LogError("not_found", f"{name} has no run {run}")
        found = open_log(resident_log)
        if found is None:
            raise LogError("not_found", f"{name} has no log yet ({resident_log})")
        return run, found, True

    if run is None:
        ids = logs.log_ids(jobs_dir, name)
        # The newest run that has a log: a skipped run after it has none of its own.
        for rid in sorted(ids, reverse=True):
            found = open_log(logs.run_log_path(jobs_dir, name, rid))
            if found is not None:
                return rid, found, False
        raise LogError("not_found", f"{name} has no run logs yet")
    found = open_log(logs.run_log_path(jobs_dir, name, run))
    if found is None:
        raise _missing(name, run, keep_runs, jobs_dir, lookup)
    return run, found, False


def view_log(name: str, kind: str, *, run: int | None = None, lines: int | None = None,
             jobs_dir: str, resident_log: str, keep_runs: int, lookup: Lookup,
             max_bytes: int | None = None) -> LogText:
    """The log `harness logs NAME [--run N] [--lines N]` prints; LogError when there is none.

    `kind` is the harness's configured kind; `resident_log` its durable log's path (only
    read for a resident); `keep_runs` is named when a log was pruned; `lookup` is asked
    only when a run's log file is missing or a resident's run must be shown to exist.
    """
    _check(run, lines)
    run_id, found, shared = _locate(name, kind, run, jobs_dir=jobs_dir,
                                    resident_log=resident_log, keep_runs=keep_runs,
                                    lookup=lookup)
    with found:
        data, cut = found.tail(max_bytes, lines)
    return _render(name, run_id, (found.path, data, cut), lines, shared=shared)


@dataclass(frozen=True)
class LogStream:
    """A whole log, open, to be read a chunk at a time: `view_log` without a cap or
    ``--lines``, for a log too big to hold (a resident's runs for months). Its fields are
    `LogText`'s; close it (or use it as a context manager) once read."""

    name: str
    run_id: int | None
    path: str
    shared: bool
    log: OpenLog

    def text(self) -> Iterator[str]:
        """The text `view_log` gives whole, in pieces: each chunk decoded as it is read.
        The decoder holds a character cut at a chunk's end until the next chunk, so the
        pieces joined are exactly that text, bytes that are not UTF-8 replaced alike."""
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        for chunk in self.log.chunks():
            if piece := decoder.decode(chunk):
                yield piece
        if piece := decoder.decode(b"", final=True):
            yield piece

    def close(self) -> None:
        self.log.close()

    def __enter__(self) -> LogStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def stream_log(name: str, kind: str, *, run: int | None = None, jobs_dir: str,
               resident_log: str, keep_runs: int, lookup: Lookup) -> LogStream:
    """The log `harness logs NAME [--run N]` prints, opened to be streamed; LogError
    when there is none, as `view_log` says it (its arguments too)."""
    _check(run, None)
    run_id, found, shared = _locate(name, kind, run, jobs_dir=jobs_dir,
                                    resident_log=resident_log, keep_runs=keep_runs,
                                    lookup=lookup)
    return LogStream(name=name, run_id=run_id, path=found.path, shared=shared, log=found)


__all__ = ["SOCKET_CAP", "LogError", "LogStream", "LogText", "Lookup", "OpenLog", "last_lines",
           "open_log", "stream_log", "view_log"]
