"""The run ledger's day files on disk: names, listing, and streaming their lines.

One file per UTC day, ``YYYY-MM-DD.jsonl``. Invariants: a day file is a regular file
of that name (anything else of that name, a symlink too, is a stray: never read, pruned
or followed); readers never write; a line is complete when it ends in ``\\n``, and an
unterminated tail is a torn fragment (reported, never parsed as data) unless it is a
whole JSON value: no proper prefix of a line is one, so that is a line a crash cut only
its newline from. Files are read in bounded chunks so a reader's memory does not grow
with the ledger, nor with one line: a line longer than ``CHUNK`` (no ledger line: the
writer's limit is 16 KiB; a run of NUL bytes a crash left, say) is seen as its first
``CHUNK`` bytes. Lines within one file are in seq order because the single writer
appends them in that order.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import date
from typing import Any

import msgspec

from .files import open_regular

DAY_FILE = re.compile(r"([0-9]{4}-[0-9]{2}-[0-9]{2})\.jsonl\Z")
CHAIN_FILE = "CHAIN"
IMPORTED_FILE = ".imported"  # the legacy import's marker (supervisor/history.py)
# What decoding one line can raise when the line is not one the ledger can read: a
# malformed or mistyped line, and one nested deeper than the decoder recurses (a 2 KB
# line of brackets is enough). Every reader skips such a line; none may crash on it.
UNREADABLE = (msgspec.MsgspecError, RecursionError)
CHUNK = 1 << 22  # 4 MiB: big enough to amortise syscalls, small enough to keep RSS flat
# Files the ledger itself keeps beside the day files: not strays. (An atomic
# replacement's leftover, `.<name>.<pid>.<tid>.tmp`, is not a stray either: see below.)
KNOWN_FILES = frozenset({CHAIN_FILE, IMPORTED_FILE})


class LedgerDirError(OSError):
    """The ledger path exists but cannot be read as a ledger (a file, no permission)."""


@dataclass
class Listing:
    """The day files of a ledger directory, oldest first, and names that are not ours."""

    days: list[tuple[str, str]] = field(default_factory=list)  # (YYYY-MM-DD, path)
    strays: list[str] = field(default_factory=list)


def list_day_files(directory: str) -> Listing:
    """List the ledger's day files; a missing directory is an empty ledger."""
    try:
        with os.scandir(directory) as it:
            entries = sorted(it, key=lambda e: e.name)
    except FileNotFoundError:
        return Listing()
    except NotADirectoryError:
        raise LedgerDirError(f"ledger path {directory} is not a directory") from None
    except PermissionError:
        raise LedgerDirError(
            f"ledger directory {directory} cannot be read: permission denied"
        ) from None
    out = Listing()
    for entry in entries:
        name = entry.name
        m = DAY_FILE.match(name)
        # Only a regular file is a day file: opening a FIFO of that name would block
        # every reader, and a directory is nothing the ledger wrote. Nor is a symlink,
        # wherever it points: one to a kept file would be read twice, and a prune would
        # write CHAIN from its target's lines, so edits to kept lines went unseen.
        if m and _is_day(m.group(1)) and _regular(entry):
            out.days.append((m.group(1), os.path.join(directory, name)))
        elif name not in KNOWN_FILES and not name.endswith(".tmp"):
            out.strays.append(name)
    return out


def _regular(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_file(follow_symlinks=False)
    except OSError:
        return False


def _is_day(s: str) -> bool:
    """Whether YYYY-MM-DD names a day of the calendar: a file named for 2026-13-45 was
    not written by the ledger, and reading it would put foreign lines in the chain."""
    try:
        date.fromisoformat(s)
    except ValueError:
        return False
    return True


def day_path(directory: str, day: str) -> str:
    return os.path.join(directory, f"{day}.jsonl")


def _open_listed(path: str, gone_ok: bool) -> Any:
    """`path` opened for reading, or None when `gone_ok` and it is gone: a reader that runs
    beside the daemon may find a day file deleted by a prune since it listed the
    directory, and reads it as the prune left things."""
    try:
        return open_regular(path, buffering=0)
    except FileNotFoundError:
        if gone_ok:
            return None
        raise


def iter_chunks(path: str, gone_ok: bool = False, first: int = CHUNK
                ) -> Iterator[tuple[int, list[bytes], bool]]:
    """Yield (number of the first line, complete lines, ends_torn) per chunk of `path`,
    for readers that look at each line's bytes (`iter_blocks` is for batch decoders);
    nothing for a file that is gone, when `gone_ok`. The first read takes `first` bytes,
    for a reader that usually stops at the file's first lines.

    A final unterminated fragment comes once as (its line number, [], True); one that is
    a whole line comes as a chunk of that one line.
    """
    lineno = 0
    f = _open_listed(path, gone_ok)
    if f is None:
        return
    with f:
        rest = b""  # the line begun and not yet ended, cut at CHUNK bytes
        cut = False  # whether it was
        size = first
        while True:
            chunk = f.read(size)
            size = CHUNK
            if not chunk:
                break
            end = chunk.find(b"\n")
            if end < 0:  # no line ends here: a long one goes on
                rest, cut = _longer(rest, cut, chunk)
                continue
            if rest:  # the line that ends here began in an earlier chunk
                parts = [_longer(rest, cut, chunk[:end])[0], *chunk[end + 1 :].split(b"\n")]
            else:
                parts = chunk.split(b"\n")
            rest, cut = parts.pop(), False
            yield lineno + 1, parts, False
            lineno += len(parts)
        if rest:
            yield ((lineno + 1, [rest], False) if not cut and is_whole(rest)
                   else (lineno + 1, [], True))


def _longer(rest: bytes, cut: bool, more: bytes) -> tuple[bytes, bool]:
    """A line begun with `rest` and going on with `more`: its first CHUNK bytes, and
    whether there were more."""
    if cut:
        return rest, True
    if len(rest) + len(more) <= CHUNK:
        return rest + more, False
    return (rest + more[: CHUNK - len(rest)]), True


def is_utf8(data: bytes) -> bool:
    """Whether `data` is valid UTF-8. msgspec skips the fields a struct lacks unread,
    invalid UTF-8 included, so a reader that decodes only some fields asks this too."""
    if data.isascii():
        return True
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def is_whole(fragment: bytes | memoryview) -> bool:
    """Whether an unterminated tail is a whole JSON value: a line missing only its
    newline (the writer adopts such a line at boot), not a torn write. A string may hold
    a lone surrogate escape: JSON allows one, though msgspec refuses the line."""
    try:
        _any.decode(fragment)
    except msgspec.ValidationError:
        # A number no decoder holds (1e999, 5,000 digits) stops the decoder before the
        # end: whether the JSON is whole is for a decoder that skips the value unread.
        # That one skips strings unread too, so their UTF-8 is checked apart: the answer
        # must not depend on whether the number or the bad byte comes first.
        try:
            _raw.decode(fragment)
        except UNREADABLE:
            return False
        return is_utf8(bytes(fragment))
    except UNREADABLE:
        try:
            surrogate_escape(fragment)
        except UNREADABLE:
            return False
    return True


def iter_blocks(path: str, gone_ok: bool = False) -> Iterator[tuple[memoryview, bool]]:
    """Yield (view of complete lines, torn) in chunks, for batch decoders; nothing for a
    file that is gone, when `gone_ok`.

    Each block ends in "\\n"; a final unterminated fragment comes once as (fragment, True),
    or, when it is a whole line, as a block of its own with the newline it lacked.
    A line longer than CHUNK comes as a block of its first CHUNK bytes (and "\\n").
    The view is only valid until the next iteration (the buffer is reused: no copies).
    """
    f = _open_listed(path, gone_ok)
    if f is None:
        return
    # Sized to the file (a quiet day's is a few hundred bytes): a fresh 4 MiB buffer is
    # zero-filled, which cost more than reading such a file. It grows while the file does.
    buf = bytearray(min(CHUNK, os.fstat(f.fileno()).st_size + 1))
    have = 0
    with f:
        while True:
            cut = buf.rfind(b"\n", 0, have) + 1
            if cut:
                yield memoryview(buf)[:cut], False
                buf[: have - cut] = buf[cut:have]
                have -= cut
            elif have == len(buf) < CHUNK:  # the file grew: a larger buffer, not a
                grown = bytearray(min(CHUNK, 2 * len(buf)))  # resize (a view may be out)
                grown[:have] = buf
                buf = grown
            elif have == CHUNK:
                # One line fills the buffer: it comes as its first CHUNK bytes, and the
                # rest of it is read past, not kept.
                head = bytes(buf)
                while (got := f.readinto(buf)) and (end := buf.find(b"\n", 0, got)) < 0:
                    pass
                if not got:
                    yield memoryview(head), True  # it never ended: a fragment
                    return
                yield memoryview(head + b"\n"), False
                have = got - end - 1
                buf[:have] = buf[end + 1 : got]
                continue
            got = f.readinto(memoryview(buf)[have:])
            if not got:
                break
            have += got
        if have:
            tail = memoryview(buf)[:have]
            if is_whole(tail):
                yield memoryview(bytes(tail) + b"\n"), False
            else:
                yield tail, True


def iter_blocks_back(path: str, gone_ok: bool = False) -> Iterator[list[bytes]]:
    """The complete lines of `path` a block at a time, the last block first, each block's
    lines in file order (read a block reversed for newest first); nothing for a file that
    is gone, when `gone_ok`. For readers that fold the newest line first.

    The lines are those `iter_blocks` yields, as far as a line of at most CHUNK bytes
    goes: a final unterminated fragment is one only when it is a whole line; a longer line
    (no ledger line: the writer's limit is 16 KiB) is left out. The file is read as long
    as it was when opened: lines appended since are the next reader's.
    """
    f = _open_listed(path, gone_ok)
    if f is None:
        return
    with f:
        fd = f.fileno()
        pos = os.fstat(fd).st_size
        # The bytes from `pos` to the first newline after it: the end of a line that began
        # before `pos` (None once past CHUNK bytes), and whether no newline follows them.
        rest: bytes | None = b""
        at_end = True
        while pos > 0:
            step = min(CHUNK, pos)
            pos -= step
            data = os.pread(fd, step, pos)
            parts = data.split(b"\n")
            if len(parts) == 1:  # no newline: the line goes on further back
                rest = None if rest is None or len(rest) + len(data) > CHUNK else data + rest
                continue
            last = parts.pop()
            end = None if rest is None or len(last) + len(rest) > CHUNK else last + rest
            rest = parts[0]
            lines = parts[1:]
            if end and (not at_end or is_whole(end)):
                lines.append(end)
            at_end = False
            if lines:
                yield lines
        if rest and (not at_end or is_whole(rest)):
            yield [rest]


class _Tail(msgspec.Struct):
    seq: int
    hash: str | None = None


class _Seq(msgspec.Struct):
    seq: int


_tail_decoder = msgspec.json.Decoder(_Tail)
_seq_decoder = msgspec.json.Decoder(_Seq)
_any = msgspec.json.Decoder()
_raw = msgspec.json.Decoder(msgspec.Raw)  # checks a value is whole JSON, converting nothing
# A number past float's range (1e999) is valid JSON (RFC 8259 leaves range to the reader)
# that msgspec refuses; this decoder reads it as an infinity instead. Only damage or an
# edit puts one in a ledger: the writer refuses non-finite numbers.
_wide = msgspec.json.Decoder(float_hook=float)


# JSON's grammar lets a string hold a UTF-16 surrogate escape alone ("\ud800"), and the
# standard library reads one; msgspec refuses the whole line, as "truncated" or
# "malformed" (a proper prefix of a line reads as truncated too). No writer of the chain
# makes one (canonical JSON refuses lone surrogates): only an edit puts one in a line.
_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def surrogate_escape(data: bytes | memoryview) -> tuple[Any, str]:
    """For bytes msgspec refused: (their JSON value, the first lone surrogate in it as
    its escape, e.g. ``\\ud800``) when they are a whole JSON value holding one;
    msgspec.DecodeError otherwise. Only a decode that already failed asks this."""
    raw = bytes(data)
    if _SURROGATE.search(raw) is None:
        raise msgspec.DecodeError("no surrogate escape")
    try:
        # As UTF-8 text: given bytes, the stdlib would guess UTF-16 from NUL bytes (a
        # crash leaves runs of them) and read a fragment as a whole value.
        value = json.loads(raw.decode("utf-8"), parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:
        raise msgspec.DecodeError(str(exc)) from None
    # The decoded strings hold a pair as one character and a lone surrogate as itself.
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            stack.extend(reversed([x for kv in v.items() for x in kv]))
        elif isinstance(v, list):
            stack.extend(reversed(v))
        elif isinstance(v, str):
            lone = next((c for c in v if "\ud800" <= c <= "\udfff"), None)
            if lone is not None:
                return value, f"\\u{ord(lone):04x}"
    raise msgspec.DecodeError("no lone surrogate")


def decode_json(data: bytes | memoryview) -> Any:
    """A whole JSON value, a number past float's range read as an infinity; raises
    UNREADABLE for bytes that are no JSON value."""
    try:
        return _any.decode(data)
    except msgspec.ValidationError:
        return _wide.decode(data)


@dataclass
class FileTail:
    """What the end of a day file says: its last complete line and any torn fragment."""

    last_seq: int | None
    last_hash: str | None
    torn: bytes | None  # the unterminated fragment at the end, if any: its last CHUNK bytes
    size: int
    # The highest seq of a line after the last one that reads, whose hash is damaged:
    # its seq was issued, so a writer must not issue it again.
    damaged_seq: int | None = None
    torn_dropped: int = 0  # the bytes of a longer fragment before those in `torn`

    @property
    def torn_size(self) -> int:
        """The length in bytes of the unterminated fragment at the end (0 for none)."""
        return len(self.torn) + self.torn_dropped if self.torn is not None else 0

    def ends_in_whole_line(self) -> bool:
        """Whether the fragment at the end is a whole line missing only its newline (a
        line to every reader), not a torn write. One cut to its last CHUNK bytes is no
        line: nothing that long was ever written as one."""
        return self.torn is not None and not self.torn_dropped and is_whole(self.torn)


def highest_line(path: str) -> tuple[int, str | None] | None:
    """(seq, hash) of the line of `path` with the highest seq: its last line, unless the
    file was edited (a line copied below later ones). A whole line that lacks only its
    newline counts, as for every reader, and so does a line whose `hash` is damaged or
    gone (hash None): its seq was taken. None when no line has a seq."""
    best: tuple[int, bytes] | None = None
    decode = _seq_decoder.decode
    for _first, lines, _torn in iter_chunks(path):
        try:
            # A chunk at once (a prune reads every line of each file it deletes); one
            # with a line that has no seq is read line by line.
            seqs = [decode(raw).seq for raw in lines]
        except UNREADABLE:
            for raw in lines:
                try:
                    seq = decode(raw).seq
                except UNREADABLE:
                    continue
                if best is None or seq > best[0]:
                    best = (seq, raw)
            continue
        if seqs:
            top = max(seqs)
            if best is None or top > best[0]:
                best = (top, lines[seqs.index(top)])
    if best is None:
        return None
    try:
        digest = _tail_decoder.decode(best[1]).hash
    except UNREADABLE:
        digest = None
    return best[0], digest


def read_tail(path: str, block: int = 1 << 16) -> FileTail:
    """Find the last parseable complete line of `path`, reading backwards in blocks."""
    with open_regular(path) as f:
        size = f.seek(0, os.SEEK_END)
        lines = _backward(f, size, block)
        torn, torn_dropped = next(lines)
        damaged: int | None = None
        for raw, dropped in lines:
            if not raw or dropped:  # a line past CHUNK bytes is no ledger line
                continue
            try:
                t = _tail_decoder.decode(raw)
            except UNREADABLE:
                try:
                    seq = _seq_decoder.decode(raw).seq
                except UNREADABLE:
                    continue
                damaged = seq if damaged is None else max(damaged, seq)
                continue
            above = damaged if damaged is not None and damaged > t.seq else None
            return FileTail(t.seq, t.hash, torn or None, size, above, torn_dropped)
        return FileTail(None, None, torn or None, size, damaged, torn_dropped)


def _backward(f: Any, size: int, block: int) -> Iterator[tuple[bytes, int]]:
    """The lines of open file `f` from its end back, reading `block` bytes at a time:
    first what follows its last newline (b"" when it ends in one), then each complete
    line, the newest first. Each comes as (its last CHUNK bytes at most, how many bytes
    before those were dropped): a long run with no newline costs no more."""
    pos = size
    parts: list[bytes] = []  # the line being read, its pieces from the end back
    kept = dropped = 0
    while pos > 0:
        step = min(block, pos)
        pos -= step
        f.seek(pos)
        data = f.read(step)
        end = len(data)
        while True:
            nl = data.rfind(b"\n", 0, end)
            piece = data[nl + 1 : end]
            room = CHUNK - kept
            if len(piece) > room:  # keep the line's last CHUNK bytes
                parts.append(piece[len(piece) - room :])
                kept, dropped = CHUNK, dropped + len(piece) - room
            else:
                parts.append(piece)
                kept += len(piece)
            if nl < 0:
                break
            yield b"".join(reversed(parts)), dropped
            parts, kept, dropped = [], 0, 0
            end = nl
    yield b"".join(reversed(parts)), dropped
