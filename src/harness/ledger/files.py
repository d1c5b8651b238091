"""The file layer: every system call the ledger writer makes, behind one seam.

`FileLayer` is the real thing (O_APPEND, fdatasync, directory fsync). Tests and
benchmarks substitute `FaultyFiles`, which can make `open`, `write`, `sync`, `truncate`
or the read-back fail with a chosen errno, run slow, hang until released, or write only
part of the bytes (then fail, or return the short count as write(2) may) — the disks
(read-only, full, stalled) a supervisor must survive — and, asked to, tell what a power
cut would leave of each file (only what was fdatasync'd). Nothing else in the ledger
touches file descriptors for writing.

Invariant: files are created 0600 and directories 0700 at creation (the mode is
passed to open/mkdir; nothing is chmod'ed afterwards).
"""

from __future__ import annotations

import contextlib
import errno as errno_mod
import fcntl
import logging
import os
import re
import stat
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

_SYNC = getattr(os, "fdatasync", os.fsync)


def make_private_dir(path: str) -> bool:
    """Create `path` (and missing parents) with mode 0700; return whether `path` was created."""
    return bool(make_private_dirs(path))


def make_private_dirs(path: str) -> list[str]:
    """Create `path` and its missing parents with mode 0700; return those created, the
    outermost first (each one's entry lives in the directory before it)."""
    if os.path.isdir(path):
        return []
    parent = os.path.dirname(path.rstrip("/"))
    made = make_private_dirs(parent) if parent and not os.path.exists(parent) else []
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        if not os.path.isdir(path):
            raise NotADirectoryError(errno_mod.ENOTDIR, "not a directory", path) from None
        return made
    return [*made, path]


def hold_dir(path: str) -> int | None:
    """Take an exclusive lock on directory `path` for this open file description; return
    the fd that holds it (closing it releases the lock), None when another holds it, or
    -1 when this file system cannot lock a directory (NFS emulates flock with locks that
    need a file open for writing): then nothing is held. The lock is on the directory
    itself: no lock file among the ledger's own."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    except OSError:
        os.close(fd)
        return -1
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_lock_file(path: str | os.PathLike[str]) -> int:
    """Open the lock file at `path` (created 0600 when missing) for an flock; the caller
    owns the fd. A symbolic link at `path` is never followed (OSError ELOOP): a holder
    would lock, create or write into a file wherever the link points."""
    return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """Make a directory's entries (a created, renamed or deleted file) durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def make_durable_dirs(path: str, sync_dir: Callable[[str], None] = fsync_dir) -> list[str]:
    """`make_private_dirs`, and each created directory's entry synced in its parent: for
    a ledger's directory, whose lines are acknowledged as durable, a crash must not lose
    the path, and the lines below it, with the outermost directory made."""
    made = make_private_dirs(path)
    for d in made:
        sync_entries_of(os.path.dirname(d) or "/", sync_dir)
    return made


def sync_entries_of(directory: str, sync_dir: Callable[[str], None] = fsync_dir) -> None:
    """Sync `directory`, one above a ledger's own (a parent the user may own with mode
    0300: writable and searchable, not readable): fsync needs a descriptor, which such a
    directory does not give. Nothing can sync it then, so that is logged and the lines
    below go on; any other failure is raised."""
    try:
        sync_dir(directory)
    except PermissionError as exc:
        logging.getLogger("harness.ledger").warning(
            "cannot open %s to sync its entries (%s); a power cut right after it gained a "
            "directory may lose that directory", directory, exc.strerror or exc)


def found_parents(path: str, levels: int, made: list[str]) -> tuple[str, ...]:
    """The directories up to `levels` above `path` whose entries `make_durable_dirs(path)`,
    which made `made`, did not sync. Found already there, each may have been made by a
    process killed before it synced it: they are synced before a line below is durable."""
    above = []
    d = os.path.abspath(path)
    for _ in range(levels):
        d = os.path.dirname(d)
        above.append(d)
    return tuple(dict.fromkeys(above[len(made):]))  # "/" is its own parent


def atomic_write(path: str | os.PathLike[str], data: bytes,
                 files: FileLayer | None = None) -> None:
    """Replace `path` with `data`: readers see the old content or the new, never a mix.
    With `files`, its write and sync calls do the work (where tests inject faults)."""
    write = files.write if files is not None else os.write

    def fill(fd: int) -> None:
        done = 0
        while done < len(data):
            done += write(fd, data[done:])

    if files is None:
        atomic_replace(path, fill)
    else:
        atomic_replace(path, fill, sync=files.sync, sync_dir=files.sync_dir)


def atomic_replace(path: str | os.PathLike[str], fill: Callable[[int], None], *,
                   sync: Callable[[int], None] | None = None,
                   sync_dir: Callable[[str], None] | None = None) -> None:
    """Replace `path` with what `fill` writes to the fd it is handed, atomically.

    A temporary file beside it, created 0600, is filled and fsync'd, renamed over the
    target, and the directory is synced so the rename survives a crash. On any failure
    the temporary file is removed and the error raised; `path` is untouched.
    """
    target = os.fspath(path)
    d = os.path.dirname(target) or "."
    tmp = os.path.join(d, f".{os.path.basename(target)}.{os.getpid()}."
                          f"{threading.get_ident()}.tmp")
    # A tmp of this name can only be left by a killed process that had our pid and
    # thread id (a restarted container's PID 1): it is ours to replace.
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            fill(fd)
            (sync or os.fsync)(fd)
        finally:
            os.close(fd)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    (sync_dir or fsync_dir)(d)


# A ledger file (a day file, CHAIN) is opened without following a symlink (ELOOP) and
# without blocking: a FIFO put where the listing saw a regular file, or at CHAIN, would
# wait for a writer that never comes. Only a regular file is then read.
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def open_regular(path: str, buffering: int = -1, *, follow: bool = False) -> Any:
    """Regular file `path` opened for reading, never through a symlink; anything else
    there raises OSError (IsADirectoryError for a directory, as `open` does).

    With `follow`, a symlink is followed (a file the user names, like a config file or
    an env_file kept among dotfiles), and what it leads to must still be a regular file:
    a FIFO there opens without waiting for a writer, and is then refused."""
    fd = os.open(path, _READ & ~os.O_NOFOLLOW if follow else _READ)
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno_mod.EISDIR, os.strerror(errno_mod.EISDIR), path)
        if not stat.S_ISREG(mode):
            raise OSError(errno_mod.EINVAL, "Not a regular file", path)
        os.set_blocking(fd, True)
        return open(fd, "rb", buffering=buffering)
    except BaseException:
        os.close(fd)
        raise


_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
          (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"))


def why_unreadable(path: str, exc: OSError) -> str:
    """Why `open_regular(path)` failed with `exc`: what `path` is when it is no regular
    file (a socket's errno, "No such device or address", would not say), else the
    system's reason."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        mode = stat.S_IFREG
    kind = next((word for test, word in _KINDS if test(mode)), None)
    if kind is not None:
        return f"it is {kind}, not a regular file"
    return exc.strerror or str(exc)


def clear_leftovers(directory: str, names: str) -> list[str]:
    """Remove what `atomic_replace` left in `directory` when its process was killed
    mid-write (its temporary files), for each target whose name the regex `names` matches
    whole; return their names, sorted. Only for a caller that owns those targets alone (the
    ledger's lock, the daemon's socket), so no live writer's file can be among them."""
    pattern = re.compile(rf"\.(?:{names})\.\d+\.\d+\.tmp")
    gone = []
    for entry in os.listdir(directory):
        if pattern.fullmatch(entry):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(directory, entry))
                gone.append(entry)
    return sorted(gone)


class FileLayer:
    """Real file operations used by the writer."""

    def open_append(self, path: str) -> tuple[int, bool]:
        """Open `path` for appending, creating it 0600; return (fd, created)."""
        # O_RDWR, not O_WRONLY: the writer preads the last byte of an existing file to
        # find a torn tail, and pread on a write-only fd fails with EBADF, which made
        # every reopen (a restart, a retry after a dropped handle) fail for ever.
        # O_APPEND still puts every write at the end.
        # O_NOFOLLOW: a symlink at a day file's name is a stray to every reader, so the
        # writer must not append to its target either (ELOOP, retried like any failure).
        flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW
        try:
            return os.open(path, flags | os.O_EXCL, 0o600), True
        except FileExistsError:
            return os.open(path, flags, 0o600), False

    def open_existing(self, path: str) -> int:
        """Open the file at `path` to sync it, not to write: read-only, no link followed,
        never blocking (a FIFO at the name opens, and its fstat says what it is)."""
        return os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)

    def write(self, fd: int, data: bytes) -> int:
        return os.write(fd, data)

    def sync(self, fd: int) -> None:
        _SYNC(fd)

    def sync_dir(self, path: str) -> None:
        fsync_dir(path)

    def size(self, fd: int) -> int:
        return os.fstat(fd).st_size

    def identity(self, fd: int) -> tuple[int, int]:
        st = os.fstat(fd)
        return st.st_dev, st.st_ino

    def linked(self, fd: int) -> bool:
        """Whether the open file still has a name (not deleted, nor replaced by a rename
        over it). Cheaper than `names`: no path lookup."""
        return os.fstat(fd).st_nlink > 0

    def names(self, path: str, identity: tuple[int, int]) -> bool:
        """Whether `path` still names the file of `identity`: not deleted, renamed away
        or replaced since it was opened (by a symlink too, even to that very file: readers
        skip a link, so writing through it would hide lines). True when that cannot be
        told."""
        try:
            st = os.stat(path, follow_symlinks=False)
        except FileNotFoundError:
            return False
        except OSError:
            return True
        return (st.st_dev, st.st_ino) == identity

    def last_byte(self, fd: int, size: int) -> bytes:
        return os.pread(fd, 1, size - 1) if size > 0 else b""

    def truncate(self, fd: int, size: int) -> None:
        os.ftruncate(fd, size)

    def read_from(self, path: str, offset: int) -> bytes:
        """The bytes of `path` from `offset` to its end (what a failed write left)."""
        with open_regular(path) as f:
            f.seek(offset)
            return f.read()

    def close(self, fd: int) -> None:
        os.close(fd)


@dataclass
class _Fault:
    errno: int | None = None  # fail with this errno
    delay: float = 0.0  # sleep this long first
    hang: threading.Event | None = None  # block until set
    partial: bool = False  # write: put half the bytes down, then fail
    short: bool = False  # write: put half the bytes down and return that count
    times: int | None = None  # apply this many times, then clear itself
    # partial/short: how many bytes go down instead of half; negative, all but that many
    # (-1: a line whole but for its "\n", as a full disk can stop at a block's end).
    lands: int | None = None

    def landing(self, n: int) -> int:
        """How many of `n` bytes a partial or short write puts down."""
        if self.lands is None:
            return n // 2
        return max(0, min(n, self.lands if self.lands >= 0 else n + self.lands))


class FaultyFiles(FileLayer):
    """A `FileLayer` whose operations can be made to fail, run slow or hang.

    Operations are named "open", "write", "sync", "truncate" and "read" (the read-back
    after a write that failed and could not be cut back). `calls` counts
    every attempt per operation, so tests can see retries and shared syncs.

    With `power_cut=True` it also keeps, per file, the bytes it held at its last
    successful fdatasync through this layer: what a power cut keeps when the kernel
    wrote back none of the rest (`after_power_cut`). And at each write it notes, in
    `cuts`, what a power cut right after it could leave: the file just written whole
    (the kernel may flush its pages first, any time), every other file only what was
    fdatasync'd. A file found already there when first opened counts as synced (the
    test's premise) unless `left_unsynced` says what of it a killed process synced; a
    failed fdatasync makes nothing durable (it does not model a later sync that succeeds
    without the pages, fsyncgate); directory entries, deletes and renames are not
    modelled.
    """

    def __init__(self, *, power_cut: bool = False) -> None:
        self._lock = threading.Lock()
        self._faults: dict[str, _Fault] = {}
        self.calls: dict[str, int] = {
            "open": 0, "write": 0, "sync": 0, "truncate": 0, "read": 0
        }
        self._power_cut = power_cut
        self._durable: dict[tuple[int, int], bytes] = {}  # file -> bytes at its last sync
        self._paths: dict[tuple[int, int], str] = {}  # file -> the path it was opened at
        self.cuts: list[dict[str, bytes]] = []  # path -> bytes, one state per write
        self._found: dict[str, bytes] = {}  # path -> what a killed writer had synced of it

    def inject(
        self,
        op: str,
        *,
        errno: int | None = None,
        delay: float = 0.0,
        hang: bool = False,
        partial: bool = False,
        short: bool = False,
        times: int | None = None,
        lands: int | None = None,
    ) -> threading.Event | None:
        """Arm a fault on `op`; with hang=True return the event that releases it."""
        if op not in self.calls:
            raise ValueError(f"unknown file operation {op!r}")
        ev = threading.Event() if hang else None
        with self._lock:
            self._faults[op] = _Fault(errno, delay, ev, partial, short, times, lands)
        return ev

    def clear(self, op: str | None = None) -> None:
        """Disarm one operation's fault (or all), releasing anything hung on it."""
        with self._lock:
            ops = [op] if op else list(self._faults)
            for o in ops:
                f = self._faults.pop(o, None)
                if f and f.hang:
                    f.hang.set()

    def _apply(self, op: str) -> _Fault | None:
        with self._lock:
            self.calls[op] += 1
            f = self._faults.get(op)
            if f is None:
                return None
            if f.times is not None:
                f.times -= 1
                if f.times <= 0:
                    del self._faults[op]
        if f.hang is not None:
            f.hang.wait()
        if f.delay:
            time.sleep(f.delay)
        return f

    @staticmethod
    def _raise(f: _Fault | None, what: str) -> None:
        if f is not None and f.errno is not None:
            raise OSError(f.errno, f"{os.strerror(f.errno)} (injected on {what})")

    def open_append(self, path: str) -> tuple[int, bool]:
        self._raise(self._apply("open"), "open")
        fd, created = super().open_append(path)
        self._known(fd, path, created)
        return fd, created

    def open_existing(self, path: str) -> int:
        self._raise(self._apply("open"), "open")
        fd = super().open_existing(path)
        self._known(fd, path, False)
        return fd

    def _known(self, fd: int, path: str, created: bool) -> None:
        """Follow the file `fd` holds for the power-cut model. A file made now keeps
        nothing yet, whatever a deleted file with its inode number kept."""
        if not self._power_cut or not stat.S_ISREG(os.fstat(fd).st_mode):
            return  # only regular files hold lines
        key = self.identity(fd)
        with self._lock:
            self._paths[key] = path
            if created:
                self._durable[key] = b""
            else:
                self._durable.setdefault(key, self._found.get(path, self._content(fd)))

    def left_unsynced(self, path: str, durable: bytes) -> None:
        """Take the file now at `path` to keep only `durable` in a power cut: the rest is
        what a process killed before its fdatasync left in the page cache (power_cut)."""
        with self._lock:
            self._found[path] = durable

    def write(self, fd: int, data: bytes) -> int:
        f = self._apply("write")
        try:
            if f is not None and f.partial and f.errno is not None and len(data) > 1:
                super().write(fd, data[: f.landing(len(data))])
            self._raise(f, "write")
            if f is not None and f.short and len(data) > 1:
                # As write(2) may, unasked.
                return super().write(fd, data[: f.landing(len(data))])
            return super().write(fd, data)
        finally:
            if self._power_cut:
                self._note_cut(fd)

    def sync(self, fd: int) -> None:
        self._raise(self._apply("sync"), "sync")
        super().sync(fd)
        if self._power_cut:
            content = self._content(fd)
            with self._lock:
                self._durable[self.identity(fd)] = content

    @staticmethod
    def _content(fd: int) -> bytes:
        size = os.fstat(fd).st_size
        return os.pread(fd, size, 0) if size else b""

    def _note_cut(self, fd: int) -> None:
        """Note what a power cut right after a write to `fd` could leave (`cuts`)."""
        written = self.identity(fd)
        content = self._content(fd)
        with self._lock:
            state = {p: self._durable.get(k, b"") for k, p in self._paths.items()
                     if k != written}
            state[self._paths.get(written, f"fd {fd}")] = content
            self.cuts.append(state)

    def after_power_cut(self, path: str) -> bytes:
        """What the file `path` names keeps after a power cut now that writes back none
        of its bytes not yet fdatasync'd (with `power_cut=True`)."""
        st = os.stat(path)
        with self._lock:
            return self._durable.get((st.st_dev, st.st_ino), self._found.get(path, b""))

    def truncate(self, fd: int, size: int) -> None:
        self._raise(self._apply("truncate"), "truncate")
        super().truncate(fd, size)

    def read_from(self, path: str, offset: int) -> bytes:
        self._raise(self._apply("read"), "read")
        return super().read_from(path, offset)

