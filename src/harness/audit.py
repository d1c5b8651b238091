"""The HMAC-SHA256 audit chain (DESIGN.md §1): ``$XDG_STATE_HOME/harness/audit/audit.jsonl``.

It owns the audit file, its key (``audit/key``: 32 random bytes, created 0600 with
O_EXCL on first use) and the chain rule. Each line is the canonical JSON of
``{seq, at, event, data, prev, mac}`` where ``mac = HMAC-SHA256(key, canonical(line
without mac))`` and ``prev`` is the previous line's ``mac`` (64 zeros for the first).

Invariants: lines are only ever appended, each one synced before `append_event`
returns, under an exclusive ``flock`` so two processes never interleave or reuse a
seq; ``data`` passes through the secret scrubber before it is written, so no secret
reaches the file; the key is never logged, printed or put in a message. A torn last
line (a crash mid-append) is not part of the chain and the next append starts on a
fresh line after it.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import hmac
import os
from collections.abc import Iterator
from typing import Any

import msgspec

from harness.ledger.canonical import canonical, decode_untrusted
from harness.ledger.files import make_private_dir
from harness.ledger.scrub import scrub_value
from harness.paths import state_dir
from harness.timefmt import format_ns, now_ns

GENESIS = "0" * 64
KEY_BYTES = 32

# A line is decoded by `decode_untrusted`: one nested past the decoder's depth is as unreadable
# as a torn one (a DecodeError, never a RecursionError), and every caller treats it alike.


class AuditError(Exception):
    """The audit chain or its key cannot be used (bad key file, unreadable directory)."""


def audit_dir() -> str:
    return os.path.join(state_dir(), "audit")


def audit_path() -> str:
    return os.path.join(audit_dir(), "audit.jsonl")


def key_path() -> str:
    return os.path.join(audit_dir(), "key")


def _load_key(create: bool) -> bytes | None:
    path = key_path()
    if create and not os.path.exists(path):
        make_private_dir(audit_dir())
        # The key is written under a private name and linked into place, so a concurrent
        # first use never reads a key file that exists but is still empty.
        tmp = f"{path}.{os.getpid()}.{os.urandom(4).hex()}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            try:
                os.write(fd, os.urandom(KEY_BYTES))
                os.fsync(fd)
            finally:
                os.close(fd)
            with contextlib.suppress(FileExistsError):
                os.link(tmp, path)
        finally:
            os.unlink(tmp)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        st = os.fstat(fd)
        if st.st_mode & 0o077:
            # A key others can read lets them forge the chain; refuse rather than use it.
            raise AuditError(f"audit key {path} must be mode 0600 (it is {st.st_mode & 0o777:o})")
        key = os.read(fd, KEY_BYTES + 1)
    finally:
        os.close(fd)
    if len(key) != KEY_BYTES:
        # A key file created by a process that died before writing it fully.
        raise AuditError(f"audit key {path} is not {KEY_BYTES} bytes long")
    return key


def _mac(key: bytes, body: dict[str, Any]) -> str:
    return hmac.new(key, canonical(body), hashlib.sha256).hexdigest()


@contextlib.contextmanager
def _locked_append() -> Iterator[int]:
    make_private_dir(audit_dir())
    fd = os.open(audit_path(), os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield fd
    finally:
        os.close(fd)  # closing releases the lock


def _last_line(fd: int) -> tuple[bytes | None, bytes]:
    """The last line of the chain (None when it has none), and what must be written
    before the next line: a newline when the file does not end in one.

    The last line is the newest piece of the file that decodes, as `verify_audit`
    reads it: a fragment a crash or a short write left is passed over wherever it lies,
    also when a later append, itself cut short, wrote only the newline that closes it
    off. Refusing such a last fragment would stop the chain for good."""
    size = os.fstat(fd).st_size
    if size == 0:
        return None, b""
    closer = b"" if os.pread(fd, 1, size - 1) == b"\n" else b"\n"
    for piece in _lines_backward(fd, 4096):
        try:
            decode_untrusted(piece)
        except msgspec.DecodeError:
            continue
        # The newest piece may be a whole line that lost only its newline: the chain
        # goes on from it, after the newline `closer` gives it.
        return piece, closer
    return None, closer


def append_event(event: str, data: dict[str, Any]) -> dict[str, Any]:
    """Append one event to the audit chain, synced; return the line as written."""
    key = _load_key(create=True)
    assert key is not None
    clean, _ = scrub_value(data)
    with _locked_append() as fd:
        return _append(fd, key, event, clean)


def append_event_once(event: str, data: dict[str, Any]) -> dict[str, Any] | None:
    """Append `event` unless the chain already holds a line of that event with exactly
    this (scrubbed) `data`: return the line appended, or None when one was there.

    For an event that must be recorded once although the first attempt to record it may
    have failed (the caller cannot tell, so it asks again). The look and the append are
    made under the one append lock, so callers racing on the same event add one line
    between them.
    """
    key = _load_key(create=True)
    assert key is not None
    clean, _ = scrub_value(data)
    with _locked_append() as fd:
        if _holds(fd, event, clean):
            return None
        return _append(fd, key, event, clean)


def _holds(fd: int, event: str, data: object) -> bool:
    """Whether a line of the file (open at `fd`) records `event` with `data`.

    Reads backwards a block at a time: the line sought, when there, is nearly always
    among the newest, and the file is only ever appended to, so memory stays one
    block plus one line however long the chain has grown.
    """
    needle = b'"event":' + canonical(event)
    for line in _lines_backward(fd):
        if needle not in line:
            continue  # cheap: most lines are other events
        try:
            row = decode_untrusted(line)
        except msgspec.DecodeError:
            continue  # a torn fragment a later append closed off: no event
        if isinstance(row, dict) and row.get("event") == event and row.get("data") == data:
            return True
    return False


def _lines_backward(fd: int, block: int = 1 << 16) -> Iterator[bytes]:
    """The newline-separated pieces of the file at `fd`, newest first (empty ones skipped)."""
    end = os.fstat(fd).st_size
    carry = b""  # the start of a line whose beginning lies in an earlier block
    while end > 0:
        start = max(0, end - block)
        pieces = (os.pread(fd, end - start, start) + carry).split(b"\n")
        end = start
        carry = pieces.pop(0) if end > 0 else b""
        for piece in reversed(pieces):
            if piece:
                yield piece


def _append(fd: int, key: bytes, event: str, clean: object) -> dict[str, Any]:
    """Append one line under the lock `fd` holds; `clean` is already scrubbed."""
    last, closer = _last_line(fd)
    if last is None:
        seq, prev = 1, GENESIS
    else:
        try:
            row = decode_untrusted(last)
            seq, prev = int(row["seq"]) + 1, str(row["mac"])
        except (msgspec.DecodeError, KeyError, TypeError, ValueError) as exc:
            raise AuditError(f"the last line of {audit_path()} is not an audit line") from exc
    body: dict[str, Any] = {
        "seq": seq,
        "at": format_ns(now_ns()),
        "event": event,
        "data": clean,
        "prev": prev,
    }
    line = dict(body, mac=_mac(key, body))
    # A torn fragment stays where it is, closed off by a newline: the file is only
    # ever appended to, and `verify_audit` links across the fragment.
    data = closer + canonical(line) + b"\n"
    try:
        # A write may take only part of the line (a full disk, a file size limit): the
        # rest is written, or the error that stops it is raised, so a line is never
        # reported appended while the file holds only a fragment of it.
        done = 0
        while done < len(data):
            done += os.write(fd, data[done:])
        os.fsync(fd)
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, audit_path()) from None
    return line


def verify_audit() -> tuple[bool, int, int | None]:
    """Walk the chain: (ok, number of good lines, seq of the first bad line or None).

    A missing file is an empty, valid chain. A piece that does not decode is a fragment
    a crash or a short write left (at the end, or closed off by a later append): it is
    not counted and is not a failure, and the chain links across it, as `_append` does.
    A line that decodes but is no object, skips a seq, breaks the ``prev`` link or
    carries a wrong or no ``mac`` is a failure.
    """
    try:
        with open(audit_path(), "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return True, 0, None
    key = _load_key(create=False)
    lines = raw.split(b"\n")
    if lines[-1]:
        try:
            decode_untrusted(lines[-1])
        except msgspec.DecodeError:
            lines.pop()  # a torn tail: not part of the chain
    prev, count = GENESIS, 0
    for line in lines:
        if not line:
            continue
        expected_seq = count + 1
        try:
            row = decode_untrusted(line)
        except msgspec.DecodeError:
            # A fragment a crash left before a later append closed it off; the chain
            # links across it.
            continue
        if not isinstance(row, dict) or key is None:
            return False, count, expected_seq
        mac = row.pop("mac", None)
        ok = (
            row.get("seq") == expected_seq
            and row.get("prev") == prev
            and isinstance(mac, str)
            and hmac.compare_digest(mac, _mac(key, row))
        )
        if not ok:
            return False, count, expected_seq
        prev, count = mac, expected_seq
    return True, count, None
