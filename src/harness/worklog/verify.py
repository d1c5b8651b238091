"""Reading and verifying a work ledger's chain (DESIGN.md §2, the spec's "Crash recovery").

This module owns the one tail policy every reader shares (verify, writer recovery,
anchoring, resume): only a final unterminated fragment of the last segment that is not
a whole JSON value is a torn tail — excluded and reported, never a failure. A crash
cannot leave a whole row behind without having written all of it, and a ledger written
by hand may lack its final newline, so an unterminated last row that parses is a row
like any other. Every complete line is part of the chain, so an unparseable complete
line, an extra or missing field, a wrong type, a ``seq`` that is not the previous + 1
(from 1), a ``prev_hash`` that is not the previous ``entry_hash`` (genesis first), an
``entry_hash`` that the row's content does not hash to, or a ``schema_version`` other
than 1 is a break, named by seq and by segment file and 1-based line within it. A break's
reason quotes what it found only scrubbed of secrets (a hand-written or fetched ledger
may hold one in any field), cut after the scrub.

Invariant: a result says ok only if ``sha256(canonical({"kind","payload","prev_hash",
"task_id"}))`` of every row equals its ``entry_hash`` and the rows link in order. For
speed, the hashed document is sliced from the line's own bytes, but only after the line
has been shown to be exactly the canonical encoding of the row it decodes to; any line
that is not (a hand-written one, a float or an escape spelled another way) is parsed
strictly and re-encoded with `canonical` instead. Those lines are the only ones that may
differ from their row's canonical line: `verify_lines` lists them (`WorkVerify.unproven`),
and `canonical_lines` re-encodes just them, for what publishes the canonical form (an
anchor) without paying for a line already in it. An `Observer` is shown each run of
verified lines proven canonical as the walk decoded them, so that what reads their rows
(anchoring's search for secrets) pays for no second decoding. `verify_dir` streams: memory does not
grow with the ledger. Large ledgers are checked on every core, in byte ranges stitched
link to link, with the sequential walk as the single judge of any failure.
"""

from __future__ import annotations

import calendar
import errno
import functools
import gc
import hashlib
import json
import multiprocessing
import os
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Final, Literal, NamedTuple

import msgspec

from harness.ledger.canonical import PROOF_ERRORS, proof_decoder, proven
from harness.ledger.dayfiles import CHUNK, is_whole, read_tail
from harness.ledger.files import why_unreadable
from harness.timefmt import is_rfc3339

from . import NoLedger, VerificationFailed, quoted, secretless
from .rows import GENESIS, RowText, encode_row, entry_hash

__all__ = [
    "SEGMENT_RX",
    "LedgerRead",
    "Observer",
    "WorkVerify",
    "canonical_lines",
    "iter_segments",
    "read_chain",
    "verify_dir",
    "verify_lines",
]

SEGMENT_RX: Final = re.compile(r"[0-9]{6}\.jsonl")
_BLOCK: Final = 2 << 20  # bytes read per system call while streaming (cache-sized)
_CHUNK: Final = 1024  # lines decoded per batch on the fast path

# Sees each run of verified lines proven canonical, as the walk decoded them: the index of
# the first line, the rows (a row's payload is its line's own bytes of it), and the JSON
# array of their payloads (b"[" + b",".join(payloads) + b"]").
Observer = Callable[[int, Sequence[RowText], bytes], None]

_FIELDS: Final = frozenset(
    ("seq", "ts", "kind", "task_id", "payload", "prev_hash", "entry_hash", "schema_version")
)
_OPTIONAL: Final = frozenset(("redactions",))


class _Row(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, omit_defaults=True, gc=False):
    # Declared in sorted key order: encoding a decoded row then reproduces a canonical
    # line byte for byte, which is how a line proves itself canonical. The payload is
    # kept as its raw bytes (cheap) and proven canonical in a separate batched pass.
    entry_hash: str
    kind: str
    payload: msgspec.Raw
    prev_hash: str
    # Absent means 0; omit_defaults makes an explicit "redactions":0 (off-contract) fail
    # the canonical comparison and take the strict slow path, which refuses it.
    redactions: Annotated[int, msgspec.Meta(ge=1)] = 0
    schema_version: Literal[1]
    seq: int
    task_id: str | None
    ts: str


# The canonical proof's decoders (`proven`): rows, their payloads kept raw, and payloads,
# a float in another spelling than canonical unproven (`canonical_float`). A line not
# proven takes the strict path, which names what is wrong with it.
_rows: Final = proof_decoder(_Row)
_payloads: Final = proof_decoder(dict[str, Any])
_plain: Final = msgspec.json.Decoder()
_sha256: Final = hashlib.sha256
# The 30-character stamp our writer produces, every field in range (days 29-31 are also
# checked against the calendar, by _real_day); anything else goes to the general parser.
# ASCII digits only ([0-9], not \d): the fast path relies on a stamp being 30 *bytes*.
_STAMP = (r"[0-9]{4}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12][0-9]|3[01])T(?:[01][0-9]|2[0-3]):"
          r"[0-5][0-9]:[0-5][0-9]\.[0-9]{9}Z")
_TS_FAST: Final = re.compile(_STAMP)
_TS_MANY: Final = re.compile(f"(?:{_STAMP}\\n)*")


@functools.lru_cache(maxsize=256)
def _real_day(date: str) -> bool:
    """Whether "YYYY-MM-DD" (fields in range, day 29-31) is a day of the calendar."""
    return int(date[8:10]) <= calendar.monthrange(int(date[:4]), int(date[5:7]))[1]


def _late_days(stamps: str) -> set[str]:
    """The distinct dates with day 29-31 among newline-joined 30-character stamps."""
    tens, units = stamps[8::31], stamps[9::31]
    if "3" not in tens and ("2" not in tens or "9" not in units):
        return set()  # no day 29-31 here: most batches of every month
    # C-level slices at the fixed stride: a Python loop per stamp costs several times more.
    dates = {"".join(c) for c in set(zip(*(stamps[k::31] for k in range(10)), strict=True))}
    return {d for d in dates if d[8:10] >= "29"}


# A line whose ts is in our 30-character form ends in ',"ts":"<30>"}' (39 bytes).
_TS_TAIL: Final = -39
_PREV_KEY: Final = b',"prev_hash":"'
_TASK_KEY: Final = b',"task_id":'
_TS_KEY: Final = b',"ts":'
_HASH_AT: Final = len(b'{"entry_hash":"') + 64 + len(b'",')  # where "kind" starts


@dataclass
class WorkVerify:
    """The outcome of verifying one chain; on failure, the first break."""

    ok: bool
    entry_count: int
    head_hash: str
    # The unterminated fragment after the last row: its last CHUNK bytes at most (a
    # crash can leave megabytes of zeroed blocks), and its whole size.
    torn_tail: bytes | None = None
    torn_size: int = 0
    error_seq: int | None = None
    error_line: int | None = None  # 1-based, within `error_file` when that is known
    reason: str | None = None
    error_file: str | None = None  # the segment file (e.g. "000001.jsonl") of the break
    # Indices (into the lines verified) of the lines not proven canonical on the fast
    # path, in order: every other verified line is its row's canonical line. Kept by
    # `verify_lines` and `verify_continuation` (None: not kept, as by `verify_dir`).
    unproven: list[int] | None = field(default=None, repr=False)

    @property
    def head_seq(self) -> int:
        """The seq of the last verified entry: seqs run 1, 2, … so it is the count."""
        return self.entry_count

    def to_json(self, run_id: str) -> dict[str, object]:
        out: dict[str, object] = {
            "run_id": run_id,
            "ok": self.ok,
            "entry_count": self.entry_count,
            "head_hash": self.head_hash,
            "head_seq": self.head_seq,
            "torn_tail": self.torn_tail is not None,
            "torn_tail_bytes": self.torn_size,
        }
        if not self.ok:
            out.update(seq=self.error_seq, file=self.error_file, line=self.error_line,
                       reason=self.reason)
        return out

    def describe(self) -> str:
        """One line for a human: the position of the break (segment file:line when the
        lines were read from files), or the verified head."""
        if self.ok:
            return f"ok: {self.entry_count} entries, head {self.head_hash}"
        where = (f"{self.error_file}:{self.error_line}" if self.error_file is not None
                 else f"line {self.error_line}")
        return f"entry {self.error_seq} ({where}): {self.reason}"

    def place(self, starts: Sequence[tuple[int, str]]) -> WorkVerify:
        """Turn a break's line, counted across the segments, into its segment file and
        the line within it. `starts` holds, for each segment in order, the number of
        complete lines before it and its name (`LedgerRead.starts`)."""
        if self.ok or self.error_line is None or self.error_file is not None:
            return self
        for before, name in reversed(starts):
            if before < self.error_line:
                self.error_file, self.error_line = name, self.error_line - before
                break
        return self


class _Break(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        dup = next(k for k, _ in pairs if k in seen or seen.add(k))  # type: ignore[func-returns-value]
        raise ValueError(f"duplicate key {dup!r}")
    return out


def _strict_parse(raw: bytes) -> dict[str, Any]:
    """Parse a line the fast path could not vouch for, refusing what JSON parsers
    disagree on (duplicate keys, NaN/Infinity, invalid UTF-8)."""
    try:
        text = raw.decode("utf-8")
        obj = json.loads(text, object_pairs_hook=_unique_pairs, parse_constant=_no_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise _Break(f"not a parseable ledger row ({secretless(exc)})") from None
    if not isinstance(obj, dict):
        raise _Break(f"not a parseable ledger row (a JSON {type(obj).__name__}, not an object)")
    return obj


def _slow_row(raw: bytes, expect_seq: int, prev: str) -> str:
    """Check one line by the contract's letter, re-encoding the hashed document."""
    obj = _strict_parse(raw)
    keys = set(obj)
    missing = _FIELDS - keys
    if missing:
        raise _Break(f"row lacks field(s) {', '.join(sorted(missing))}")
    extra = keys - _FIELDS - _OPTIONAL
    if extra:
        raise _Break("row has field(s) outside the contract: "
                     f"{', '.join(secretless(k) for k in sorted(extra))}")
    seq = obj["seq"]
    if type(seq) is not int:
        raise _Break(f"seq must be an integer, got {quoted(seq)}")
    for name in ("kind", "prev_hash", "entry_hash", "ts"):
        if type(obj[name]) is not str:
            raise _Break(f"{name} must be a string, got {quoted(obj[name])}")
    if obj["task_id"] is not None and type(obj["task_id"]) is not str:
        raise _Break(f"task_id must be a string or null, got {quoted(obj['task_id'])}")
    if type(obj["payload"]) is not dict:
        raise _Break(f"payload must be an object, got {quoted(obj['payload'])}")
    sv = obj["schema_version"]
    if type(sv) is not int or sv != 1:
        raise _Break(f"schema_version must be 1, got {quoted(sv)}")
    if "redactions" in obj:
        red = obj["redactions"]
        if type(red) is not int or red < 1:
            raise _Break("redactions must be a positive integer when present, got "
                         f"{quoted(red)}")
    _check_link(seq, obj["prev_hash"], expect_seq, prev)
    _check_ts(obj["ts"])
    try:
        digest = entry_hash(obj["kind"], obj["task_id"], obj["payload"], obj["prev_hash"])
    except ValueError as exc:
        raise _Break(f"payload cannot be canonically encoded ({secretless(exc)})") from None
    except RecursionError:
        raise _Break("payload is nested too deeply to encode") from None
    if digest != obj["entry_hash"]:
        raise _Break(_hash_reason(digest, obj["entry_hash"]))
    return digest


def _check_link(seq: int, prev_hash: str, expect_seq: int, prev: str) -> None:
    if seq != expect_seq:
        raise _Break(
            f"seq mismatch (expected {expect_seq}, got {seq}): a row was removed, inserted,"
            " duplicated or reordered"
        )
    if prev_hash != prev:
        raise _Break(
            f"prev_hash mismatch (expected {prev[:16]}…, got {secretless(prev_hash)[:16]}…): "
            "the row does not link to the one before it"
        )


def _check_ts(ts: str) -> None:
    if _TS_FAST.fullmatch(ts) is not None:
        if ts[8:10] < "29" or _real_day(ts[:10]):
            return
    elif is_rfc3339(ts):
        return
    raise _Break(f"ts {quoted(ts)} is not an RFC 3339 time")


def _hash_reason(recomputed: str, stored: str) -> str:
    return (
        f"entry_hash mismatch (recomputed {recomputed[:16]}…, stored "
        f"{secretless(stored)[:16]}…):"
        " the row's kind, task_id or payload was changed"
    )


class _Walker:
    """Follows the chain through successive batches of complete lines."""

    __slots__ = ("count", "failure", "line", "observe", "prev", "unproven")

    def __init__(self, observe: Observer | None = None) -> None:
        self.observe = observe
        self.count = 0  # verified rows; also the seq of the last one
        self.line = 0  # complete lines consumed
        self.prev = GENESIS
        self.failure: tuple[int, int, str] | None = None  # (seq, line, reason)
        self.unproven: list[int] = []  # 0-based lines that took the strict path

    def feed(self, lines: list[bytes]) -> bool:
        """Check `lines`; return False (and record the failure) at the first break."""
        if self.failure is not None:
            return False
        if lines and self._batch(lines):
            return True
        # Something in the batch is off (or merely unusual, like a hand-written line):
        # the per-line path decides, and names the first break.
        return all(self._one(raw) for raw in lines)

    def _batch(self, lines: list[bytes]) -> bool:
        """Verify a whole batch with a handful of C-level passes, or return False having
        changed nothing (the caller then walks it line by line)."""
        # Every line canonical: the row's members, then its payload's.
        rows = proven(_rows, lines)
        if rows is None or proven(_payloads, [r.payload for r in rows]) is None:
            return False
        first = self.count + 1
        if [r.seq for r in rows] != list(range(first, first + len(rows))):
            return False
        hashes = [r.entry_hash for r in rows]
        if [r.prev_hash for r in rows] != [self.prev, *hashes[:-1]]:
            return False
        # Every ts must be our 30-character stamp: the digest below slices at a fixed
        # offset from the end of the line. The length test matters: a ts holding a
        # newline could otherwise pass as two stamps and shift that offset.
        stamps = "\n".join([r.ts for r in rows]) + "\n"
        if len(stamps) != 31 * len(rows) or _TS_MANY.fullmatch(stamps) is None:
            return False
        # Days 29-31 against the calendar, once per distinct day in the batch.
        if not all(_real_day(d) for d in _late_days(stamps)):
            return False
        # Every line is canonical, so its members are in sorted order: "kind",
        # "payload" and "prev_hash" lie side by side after "entry_hash", and the
        # "task_id" member sits just before the fixed-length "ts" one. The last
        # top-level ',"prev_hash":"' cannot occur inside a string (its quotes would be
        # escaped) and nothing nested follows the payload.
        sha, pk, tk, tail, at = _sha256, _PREV_KEY, _TASK_KEY, _TS_TAIL, _HASH_AT
        digests = [
            sha(
                b"{%b%b}"
                % (raw[at : raw.rfind(pk) + 79], raw[raw.rfind(tk, 0, tail) : tail])
            ).hexdigest()
            for raw in lines
        ]
        if digests != hashes:
            return False
        if self.observe is not None:
            self.observe(self.line, rows, b"[" + b",".join([r.payload for r in rows]) + b"]")
        self.count += len(rows)
        self.prev = hashes[-1]
        self.line += len(lines)
        return True

    def _one(self, raw: bytes) -> bool:
        """Check one line on its own (decode, prove canonical or re-encode)."""
        self.line += 1
        expect = self.count + 1
        try:
            if raw == _OVERLONG:
                raise _Break(f"a line longer than {CHUNK} bytes: no ledger row is that long")
            row = self._fast_one(raw, expect)
            if row is None:
                digest = _slow_row(raw, expect, self.prev)
                self.unproven.append(self.line - 1)
            else:
                digest = row.entry_hash
                if self.observe is not None:
                    self.observe(self.line - 1, [row], b"[" + bytes(row.payload) + b"]")
        except _Break as b:
            self.failure = (expect, self.line, b.reason)
            return False
        self.count = expect
        self.prev = digest
        return True

    def _fast_one(self, raw: bytes, expect: int) -> _Row | None:
        """The row of `raw`, verified, if the line is its canonical line; None if it is
        not (the strict path then decides)."""
        rows = proven(_rows, [raw])
        if rows is None or proven(_payloads, [rows[0].payload]) is None:
            return None
        r = rows[0]
        _check_link(r.seq, r.prev_hash, expect, self.prev)
        _check_ts(r.ts)
        k = raw.rfind(_PREV_KEY) + 79
        doc = b"{" + raw[_HASH_AT:k] + raw[raw.rfind(_TASK_KEY) : raw.rfind(_TS_KEY)] + b"}"
        digest = _sha256(doc).hexdigest()
        if digest != r.entry_hash:
            raise _Break(_hash_reason(digest, r.entry_hash))
        return r

    def result(self, torn: bytes | None, expected_head: str | None,
               torn_size: int = 0) -> WorkVerify:
        head = self.prev
        res = WorkVerify(
            ok=self.failure is None,
            entry_count=self.count,
            head_hash=head,
            torn_tail=torn,
            torn_size=torn_size,
        )
        if self.failure is not None:
            res.error_seq, res.error_line, res.reason = self.failure
        elif expected_head is not None and expected_head != head:
            res.ok = False
            res.error_seq, res.error_line = self.count, self.line
            res.reason = (
                f"head mismatch: expected {expected_head[:16]}…, got {head[:16]}…"
                " (rows were removed from the end, or the chain was rewritten)"
            )
        return res


def _run(batches: Iterable[list[bytes]], walker: _Walker) -> None:
    # Decoding allocates many short-lived containers that hold no cycles; pausing the
    # collector keeps it from rescanning them over and over on a large ledger.
    was = gc.isenabled()
    gc.disable()
    try:
        for batch in batches:
            if not walker.feed(batch):
                break
    finally:
        if was:
            gc.enable()


def _batched(lines: list[bytes]) -> Iterator[list[bytes]]:
    for i in range(0, len(lines), _CHUNK):
        yield lines[i : i + _CHUNK]


def verify_lines(lines: list[bytes], expected_head: str | None = None, *,
                 starts: Sequence[tuple[int, str]] = (),
                 observe: Observer | None = None) -> WorkVerify:
    """Verify complete lines (bytes without "\\n") in chain order from genesis. With
    `starts` (`LedgerRead.starts` of the lines), a break is named by file and line.
    `observe` is shown, in order, every run of lines verified and proven canonical (up
    to a break); the lines it is not shown are those `WorkVerify.unproven` lists."""
    walker = _Walker(observe)
    _run(_batched(lines), walker)
    res = walker.result(None, expected_head).place(starts)
    res.unproven = walker.unproven
    return res


def verify_continuation(lines: list[bytes], start: int, prev_hash: str, *,
                        observe: Observer | None = None) -> WorkVerify:
    """Verify `lines[start:]` as the continuation of an already verified prefix of `start`
    entries whose last entry_hash is `prev_hash`: the cost is what is new, not the chain.
    `observe` as for `verify_lines`, from line `start` on."""
    walker = _Walker(observe)
    walker.count = walker.line = start
    walker.prev = prev_hash
    _run(_batched(lines[start:]), walker)
    res = walker.result(None, None)
    res.unproven = walker.unproven
    return res


def canonical_lines(lines: list[bytes], unproven: Sequence[int]) -> list[bytes]:
    """The canonical line of each row of the verified `lines` (DESIGN.md §2): `lines`
    itself when all of them are, else a copy in which each line `unproven` names
    (`WorkVerify.unproven`) that is not is replaced by its row re-encoded. The rows and
    their entry hashes are the same; only the spelling (spaces, key order, escapes, a
    float's form, a CR before the newline) is the canonical one."""
    out: list[bytes] | None = None
    for i in unproven:
        line = encode_row(_strict_parse(lines[i]))
        if line != lines[i]:
            if out is None:
                out = list(lines)
            out[i] = line
    return lines if out is None else out


def iter_segments(directory: str | Path) -> list[Path]:
    """The segment files of a ledger directory, in name (= chain) order.

    A name of a segment that holds no regular file (a directory, a FIFO, a dangling
    symlink) is `VerificationFailed`: passed over, the rows it should hold would be
    missing unseen (the last segment's, with nothing after them to break the chain),
    so every reader and the writer fail closed on it, naming it."""
    d = Path(directory)
    segs = []
    for p in d.iterdir():
        if not SEGMENT_RX.fullmatch(p.name):
            continue
        if not p.is_file():
            why = why_unreadable(str(p), FileNotFoundError(errno.ENOENT,
                                                           os.strerror(errno.ENOENT)))
            raise VerificationFailed(f"work ledger {secretless(str(d))}: segment "
                                     f"{quoted(p.name)} cannot be read: {why}")
        segs.append(p)
    return sorted(segs)


# What a complete line past CHUNK bytes is judged as: its last bytes alone could read as
# a valid row, and it is none. No line read from a file holds a newline, so this one
# stands for nothing else.
_OVERLONG: Final = b"\n"


class _Stream:
    """Complete lines from the segments in order, in batches; remembers the torn tail.

    A run of bytes with no newline is held to its last CHUNK bytes, whatever its length:
    no row is that long, and zeroed blocks a crash left cost no more than a row.
    """

    def __init__(self, segments: list[Path]) -> None:
        self.segments = segments
        self.torn: bytes | None = None
        self.torn_size = 0
        # (complete lines before it, name) of each segment reached: where a line is.
        self.starts: list[tuple[int, str]] = []
        self.count = 0  # complete lines yielded so far

    def batches(self) -> Iterator[list[bytes]]:
        for batch in self._batches():
            self.count += len(batch)
            yield batch

    def _batches(self) -> Iterator[list[bytes]]:
        last = len(self.segments) - 1
        for i, path in enumerate(self.segments):
            self.starts.append((self.count, path.name))
            rest, size = b"", 0  # the line begun and not ended: its last bytes, its size
            with open(path, "rb") as f:
                while block := f.read(_BLOCK):
                    end = block.find(b"\n")
                    if end < 0:
                        rest, size = (rest + block)[-CHUNK:], size + len(block)
                        continue
                    parts = block[end + 1 :].split(b"\n")
                    parts[:0] = [rest + block[:end] if size + end <= CHUNK else _OVERLONG]
                    rest = parts.pop()
                    size = len(rest)
                    for j in range(0, len(parts), _CHUNK):
                        yield parts[j : j + _CHUNK]
            if size:
                whole = size == len(rest) and is_whole(rest)
                if i == last and not whole:
                    self.torn, self.torn_size = rest, size
                else:
                    # A segment that ends unterminated while a later one continues the
                    # chain is interior damage, not a crash tail, and a last row that
                    # only lacks its newline is whole: both are judged like any line.
                    # One past CHUNK bytes is judged as a complete line that long is:
                    # its last CHUNK bytes alone may read as a row it is not.
                    yield [rest if size == len(rest) else _OVERLONG]


class LedgerRead(NamedTuple):
    """What `read_chain` found in a ledger directory."""

    lines: list[bytes]  # every complete line across the segments, in order
    torn: bytes | None  # the torn tail's last CHUNK bytes at most (None: no torn tail)
    torn_size: int  # the torn tail's whole size: what must be cut to drop it
    starts: list[tuple[int, str]]  # per segment: (complete lines before it, its name)


def read_chain(directory: str | Path) -> LedgerRead:
    """All complete lines across the segments, in order, and the torn tail with its size."""
    stream = _Stream(_segments_or_none(directory))
    lines: list[bytes] = []
    for batch in stream.batches():
        lines.extend(batch)
    return LedgerRead(lines, stream.torn, stream.torn_size, stream.starts)


def not_a_directory(path: Path) -> str:
    """What a "no work ledger" refusal adds when something other than a directory holds
    the ledger's path: without it the user is told of nothing where there is a file."""
    return " (not a directory)" if path.exists() or path.is_symlink() else ""


def _segments_or_none(directory: str | Path) -> list[Path]:
    d = Path(directory)
    # The work tree may be named after a token; every other refusal scrubs its path.
    if not d.is_dir():
        raise NoLedger(f"no work ledger at {secretless(d)}{not_a_directory(d)}")
    segs = iter_segments(d)
    if not segs:
        raise NoLedger(f"no work ledger at {secretless(d)} (no segment files)")
    return segs


def verify_dir(
    directory: str | Path, expected_head: str | None = None, *, parallel: bool | None = None
) -> WorkVerify:
    """Verify a ledger directory end to end; `NoLedger` when there is none.

    With `parallel` (default: when the ledger is large, there are several cores, and
    this process runs no other thread, so forking is safe), byte ranges are checked on
    every core and stitched; any break sends the walk back to the sequential path, so
    a failure is always reported exactly as the sequential walk names it.
    """
    segments = _segments_or_none(directory)
    if parallel is None:
        parallel = (
            (os.cpu_count() or 1) > 1
            and threading.active_count() == 1
            and sum(p.stat().st_size for p in segments) >= PARALLEL_BYTES
        )
    if parallel:
        res = _verify_parallel(segments, expected_head)
        if res is not None:
            return res
    stream = _Stream(segments)
    walker = _Walker()
    _run(stream.batches(), walker)
    return walker.result(stream.torn, expected_head, stream.torn_size).place(stream.starts)


# Below this many bytes the fork costs more than the other cores save.
PARALLEL_BYTES: Final = 32 << 20


def _split(segments: list[Path], torn: int, pieces: int) -> list[tuple[str, int, int]]:
    """Byte ranges that each start a line; the last segment stops before its fragment."""
    total = sum(p.stat().st_size for p in segments)
    target = max(1, total // pieces)
    out: list[tuple[str, int, int]] = []
    for i, p in enumerate(segments):
        end = p.stat().st_size - (torn if i == len(segments) - 1 else 0)
        start = 0
        with open(p, "rb") as f:
            while start < end:
                cut = start + target
                if cut >= end:
                    out.append((str(p), start, end))
                    break
                f.seek(cut)
                rest = f.readline()
                cut += len(rest)
                if cut >= end:
                    out.append((str(p), start, end))
                    break
                out.append((str(p), start, cut))
                start = cut
    return out


# (first seq, first prev_hash, last seq, last entry_hash, lines) of a clean range, or
# None when the range has a break (the caller then walks sequentially).
_Span = tuple[int, str, int, str, int] | None


def _check_range(job: tuple[str, int, int]) -> _Span:
    path, start, end = job
    with open(path, "rb") as f:
        f.seek(start)
        data = f.read(end - start)
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    # A line past CHUNK bytes is a break to the sequential walk (`_Stream`), whatever it
    # holds: leave it to that walk to name, rather than pass it here as a row.
    if not lines or max(map(len, lines)) > CHUNK:
        return None
    try:
        head = _plain.decode(lines[0])
    except PROOF_ERRORS:
        return None
    if not isinstance(head, dict) or type(head.get("seq")) is not int or not isinstance(
        head.get("prev_hash"), str
    ):
        return None
    walker = _Walker()
    # Detached start: this range trusts its first link; the parent stitches it to the
    # range before, so every link is still checked exactly once.
    walker.count = head["seq"] - 1
    walker.prev = head["prev_hash"]
    _run(_batched(lines), walker)
    if walker.failure is not None:
        return None
    return head["seq"], head["prev_hash"], walker.count, walker.prev, len(lines)


def _verify_parallel(segments: list[Path], expected_head: str | None) -> WorkVerify | None:
    # The unterminated fragment after the last segment's final newline (None if none).
    t = read_tail(str(segments[-1]))
    tail = t.torn
    if t.ends_in_whole_line():
        return None  # a last row without its newline: the sequential walk judges it
    torn = t.torn_size
    procs = os.cpu_count() or 1
    jobs = _split(segments, torn, procs * 4)
    if len(jobs) < 2:
        return None
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(procs) as pool:
        spans = pool.map(_check_range, jobs, chunksize=1)
    seq, prev, lines = 0, GENESIS, 0
    for span in spans:
        if span is None:
            return None
        first, first_prev, last, last_hash, n = span
        if first != seq + 1 or first_prev != prev:
            return None
        seq, prev, lines = last, last_hash, lines + n
    if expected_head is not None and expected_head != prev:
        return None  # the sequential walk names the mismatch by file and line
    walker = _Walker()
    walker.count, walker.prev, walker.line = seq, prev, lines
    return walker.result(tail, expected_head, torn)
