"""Verifying the run ledger's hash chain across its day files (DESIGN.md §4).

Invariants: read-only and streaming (memory does not grow with the ledger; a day file
that faulted costs 16 bytes a line while its seq order is checked); the
chain is followed in seq order from ``CHAIN`` (the pruned tail) or from genesis;
torn fragments (an unterminated tail, or an unparseable line a crash left inside
a file) are reported, not failures; an edited, removed, duplicated or reordered
complete line, or one without ``prev``/``hash``, is a break, named by seq and
file:line. A line's bytes are hashed as they lie only once the line is proven to be
canonical JSON (`canonical.proven`: decoded and re-encoded to the same bytes, a batch at
a time); any other line is re-encoded, and only that hash counts. A line in another
spelling sealed over its own bytes is a break, as it is for every other verifier of §4.
"""

from __future__ import annotations

import array
import bisect
import gc
import heapq
import itertools
import json
import multiprocessing
import operator
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Annotated, Any

import msgspec

from .canonical import numbers_proven, proof_decoder, proven
from .chain import ZERO_HASH, hash_of_line_bytes, hash_of_object, hashes_as_they_lie, link_to
from .dayfiles import (
    CHAIN_FILE,
    UNREADABLE,
    Listing,
    decode_json,
    is_utf8,
    is_whole,
    iter_chunks,
    list_day_files,
    surrogate_escape,
)
from .files import open_regular
from .reader import MAX_DEPTH, SHORT_LINE, readable
from .schema import NUMBER_FIELDS, sealed_line_type
from .writer import MAX_LINE

# The widest seq a line may hold: `_scan` keeps seqs in 64-bit arrays, and no writer
# counts that far; a line past it is no ledger line, as one no decoder holds is not.
_Seq = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]


class _Link(msgspec.Struct):
    seq: _Seq
    prev: str | None = None
    hash: str | None = None


class _Canonical(_Link):
    """The chain fields of a line `_lines` proved canonical in its batch (never decoded
    from a line, so no line can claim it): `_fault` need not prove it again."""


_link = msgspec.json.Decoder(_Link)
_any = msgspec.json.Decoder()
# The canonical proof's decoders: the lines the writer seals (typed, so cheap), and any
# JSON value (a line of another shape, a number member).
_sealed = proof_decoder(sealed_line_type())
_values = proof_decoder()
_numbers = [operator.attrgetter(k) for k in NUMBER_FIELDS]  # kept as raw text by _sealed
_seq, _prev, _hash = (operator.attrgetter(k) for k in ("seq", "prev", "hash"))
_BATCH = 1024  # lines proven and checked at once on the fast path


@dataclass
class Break:
    seq: int | None
    file: str
    line: int
    reason: str


@dataclass
class VerifyResult:
    ok: bool
    exists: bool
    lines: int = 0
    torn: int = 0
    torn_at: list[str] = field(default_factory=list)  # file:line of each fragment
    files: int = 0
    head_seq: int | None = None
    head_hash: str | None = None
    start_seq: int | None = None  # first seq checked
    anchor: str = "genesis"  # or "CHAIN seq N"
    error: Break | None = None
    strays: list[str] = field(default_factory=list)
    torn_tail: bool = False  # the newest day file ends in an unterminated fragment
    behind: int = 0  # lines at or before CHAIN's seq, each checked on its own (_Behind)

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {
            "ok": self.ok,
            "lines": self.lines,
            "entry_count": self.lines,
            "files": self.files,
            "torn": self.torn,
            "torn_tail": self.torn_tail,
            "torn_at": self.torn_at,
            "head_seq": self.head_seq,
            "head_hash": self.head_hash,
            "anchor": self.anchor,
            "behind_anchor": self.behind,
            "strays": self.strays,
        }
        if self.error is not None:
            out.update(seq=self.error.seq, file=self.error.file, line=self.error.line,
                       reason=self.error.reason)
        return out


def read_chain_file(directory: str) -> tuple[int, str] | None:
    """The pruned tail's last (seq, hash), or None when nothing was pruned."""
    path = os.path.join(directory, CHAIN_FILE)
    try:
        # Never blocks: a FIFO at CHAIN is unreadable, as a directory there is.
        with open_regular(path) as f:
            data = json.loads(f.read())
    except FileNotFoundError:
        return None
    except (OSError, ValueError, RecursionError) as exc:  # nested past the decoder's depth
        raise ValueError(f"{path}: unreadable chain anchor: {exc}") from None
    seq, digest = (data.get("seq"), data.get("hash")) if isinstance(data, dict) else (None, None)
    # A hash that is not one would break the chain at the next kept line, and verify
    # would blame that line for what CHAIN holds.
    # Seqs start at 1, so 0 is where genesis anchors (no prune writes it); below that an
    # anchor names nothing at all.
    if type(seq) is not int or seq < 0 or not isinstance(digest, str) \
            or link_to(digest) != digest:
        raise ValueError(f"{path}: chain anchor must be {{\"seq\": N ≥ 0, \"hash\": HEX64}}")
    return seq, digest


@dataclass
class FileCheck:
    """One day file checked on its own: its ends, its count and its first inner fault."""

    name: str
    first_seq: int | None = None
    first_prev: str | None = None
    first_line: int = 0
    last_seq: int | None = None
    last_hash: str | None = None
    lines: int = 0
    torn_at: list[str] = field(default_factory=list)
    error: Break | None = None
    ends_torn: bool = False
    behind: int = 0  # lines at or before CHAIN's seq, each checked on its own


CHAIN_MISMATCH = "line does not match CHAIN, which holds this seq's hash (one of them was edited)"


class _Behind:
    """The lines at or before CHAIN's seq that come before the chain's first kept line:
    a file a crash left between writing CHAIN and deleting it, or lines a clock stepped
    back kept in a later day's file. The chain from CHAIN does not reach them, but an
    edit must still break them: each one's own hash is checked, its link too when it is
    the seq after the line before it, and CHAIN's hash when it holds CHAIN's seq."""

    __slots__ = ("count", "hash", "prev_hash", "prev_seq", "seq")

    def __init__(self, anchor: tuple[int, str] | None) -> None:
        self.seq, self.hash = anchor if anchor else (0, "")
        self.prev_seq: int | None = None
        self.prev_hash: str | None = None
        self.count = 0

    def takes(self, seq: int) -> bool:
        return 0 < seq <= self.seq

    def fault(self, link: _Link, raw: bytes) -> str | None:
        linked = self.prev_seq is not None and link.seq == self.prev_seq + 1
        fault = _fault(link, raw, self.prev_seq if linked else None, self.prev_hash)
        if fault is None and link.seq == self.seq and link.hash != self.hash:
            fault = CHAIN_MISMATCH
        self.prev_seq, self.prev_hash = link.seq, link.hash
        self.count += 1
        return fault


def check_file(path: str, name: str, anchor: tuple[int, str] | None = None) -> FileCheck:
    """Verify the links and hashes inside one file (lines are seq-ordered within a file)."""
    fc = FileCheck(name)
    frags = _Fragments(fc.torn_at)
    behind = _Behind(anchor)
    prev_seq: int | None = None
    prev_hash: str | None = None
    gc_was = gc.isenabled()
    gc.disable()
    try:
        for n, raw, link in _lines(path, name, frags, fc, behind.seq):
            if isinstance(link, _Foreign):
                fc.error = Break(link.seq, name, n, link.reason)
                break
            if n == 0:  # _lines' fast path took lines up to this (seq, hash)
                prev_seq, prev_hash = link.seq, link.hash
                continue
            seq = link.seq
            if prev_seq is None and behind.takes(seq):  # only before the file's first line
                fault = behind.fault(link, raw)
                if fault:
                    fc.error = Break(seq, name, n, fault)
                    break
                continue
            # The first line's link is the stitching's to check, against the file before.
            fault = _fault(link, raw, prev_seq, prev_hash)
            if fault:
                fc.error = Break(seq, name, n, fault)
                break
            if prev_seq is None:
                fc.first_seq, fc.first_prev, fc.first_line = seq, link.prev, n
            prev_seq, prev_hash = seq, link.hash
            fc.lines += 1
    finally:
        if gc_was:
            gc.enable()
    fc.ends_torn = frags.tail
    fc.behind = behind.count
    fc.last_seq, fc.last_hash = prev_seq, prev_hash  # the last line that verified
    return fc


def _lines(path: str, name: str, frags: _Fragments, fc: FileCheck | None = None,
           skip: int = 0, prove: bool = False) -> Iterator[_Item]:
    """(line number, bytes, chain fields) of each line of one day file; a torn fragment
    is not part of the chain and goes to `frags`, a whole line that is not a ledger line
    comes as `_Foreign`.

    With `fc` (`check_file`'s), the common line is checked here: once the caller has
    taken a line of the chain (one past `skip`, CHAIN's seq), a line that links to the
    line before it (seq one more, prev its hash), is proven canonical and whose hash
    holds as it lies is counted in `fc.lines` and not yielded; the last of such a run
    comes as (0, b"", its link), so the caller's chain state follows. This is verify's
    hot loop (a million lines a run): it checks _BATCH lines at a time (`_proven_run`),
    and goes line by line only through a batch that is not all such lines.

    With `prove` (and no `fc`: a merge, whose caller judges every line), a batch proven
    canonical at once comes as `_Canonical` links, which `_fault` does not prove again."""
    decode = _link.decode
    # Until the caller has taken a chain line, it judges each: no seq equals None (a
    # number would let a forged line of that seq, prev "", through unjudged).
    expect: int | None = None
    head = ""
    counted = fc if fc is not None else FileCheck(name)  # (no fast path without fc)
    for first, lines, torn in iter_chunks(path):
        if torn:
            frags.at.append(f"{name}:{first}")
            frags.tail = True
            continue
        n = first - 1
        run: _Link | None = None
        k = 0
        while k < len(lines):
            # Until the caller has taken a line, a line at a time: the one it takes sets
            # `expect`, and the next batch can follow it.
            batch = lines[k : k + (1 if expect is None and fc is not None else _BATCH)]
            k += len(batch)
            if expect is not None and (last := _proven_run(batch, expect, head)) is not None:
                counted.lines += len(batch)
                n += len(batch)
                expect, head, run = last.seq + 1, last.hash or "", last
                continue
            if prove and (rows := _proven_rows(batch)) is not None:
                for raw, row in zip(batch, rows, strict=True):
                    n += 1
                    yield n, raw, _Canonical(row.seq, row.prev, row.hash)
                continue
            # Something in the batch is off, or merely unusual (a line in another
            # spelling, of another shape): each line is taken or judged on its own.
            for raw in batch:
                n += 1
                try:
                    link = decode(raw)
                except UNREADABLE as exc:
                    if run is not None:
                        yield 0, b"", run
                        run = None
                    foreign = _unreadable(raw, exc, f"{name}:{n}", frags)
                    if foreign is not None:
                        yield n, raw, foreign
                    continue
                digest = link.hash
                if link.seq == expect and link.prev == head and digest is not None \
                        and (len(raw) <= SHORT_LINE or readable(raw)) \
                        and hash_of_line_bytes(raw, digest) and _canonical(raw):
                    counted.lines += 1
                    expect, head, run = link.seq + 1, digest, link
                    continue
                if run is not None:
                    yield 0, b"", run
                    run = None
                yield n, raw, link
                # The caller judged it and, had it not taken it, stopped: the next line
                # may follow it here. A line at or before CHAIN's seq the caller only
                # set apart.
                if fc is not None and link.seq > skip:
                    expect, head = link.seq + 1, digest or ""
        if run is not None:
            yield 0, b"", run


def _proven_run(lines: list[bytes], expect: int, head: str) -> _Link | None:
    """The link of the last of `lines` when each of them is what the fast path takes one
    by one: canonical (proven for the batch at once), readable, linked to the line before
    it (the first to seq `expect`, prev `head`) and hashing as it lies; otherwise None,
    having taken nothing."""
    rows = _proven_rows(lines)
    if rows is None:
        return None
    if list(map(_seq, rows)) != list(range(expect, expect + len(rows))):
        return None
    hashes = list(map(_hash, rows))
    if list(map(_prev, rows)) != [head, *hashes[:-1]]:
        return None
    if max(map(len, lines)) > SHORT_LINE and not all(map(readable, lines)):
        return None
    if hashes_as_they_lie(lines) != hashes:
        return None
    last = rows[-1]
    return _Link(last.seq, last.prev, last.hash)


def _proven_rows(lines: list[bytes]) -> list[Any] | None:
    """The chain fields of `lines` (as `_sealed` reads them) when every one of them is a
    line the writer seals and is canonical; otherwise None."""
    rows = proven(_sealed, lines)
    return rows if rows is not None and _numbers_proven(rows) else None


def _numbers_proven(rows: list[Any]) -> bool:
    """Whether the number members of rows `_sealed` proved, which it keeps as raw text,
    are canonical too."""
    texts = [x for get in _numbers for x in map(get, rows) if x]
    return not texts or numbers_proven(texts)


def _canonical(raw: bytes) -> bool:
    """Whether one line is byte for byte the canonical JSON of its value, so that its hash
    may be checked on its bytes as they lie. A line of a shape the writer does not seal is
    proven as any JSON value."""
    rows = proven(_sealed, [raw])
    if rows is not None and _numbers_proven(rows):
        return True
    return proven(_values, [raw]) is not None


@dataclass
class _Fragments:
    """Where a file's torn fragments were found (file:line), and whether one ends it."""

    at: list[str]
    tail: bool = False


DAMAGED = "line is not valid UTF-8: damaged on disk"
SURROGATE = ("complete line is not a ledger line (a string holds the lone surrogate escape "
             "{}, which no writer of the chain makes: it was edited)")
UNREAD = (f"line is over {MAX_LINE // 1024} KiB or nested deeper than {MAX_DEPTH}: every "
          "reader skips it (it was edited)")


class _Foreign:
    """A complete line that is valid JSON but no ledger line (a seq that is not an
    integer, a prev that is not a string, an array), or whole JSON but for bytes that
    are not UTF-8: edited or damaged on disk, never left by a crash, which leaves only
    a line's first bytes."""

    __slots__ = ("reason", "seq")

    def __init__(self, obj: object, reason: str) -> None:
        seq = obj.get("seq") if isinstance(obj, dict) else None
        self.seq = seq if type(seq) is int else None
        self.reason = reason


def _damaged(raw: bytes) -> object | None:
    """The value of a line that is whole JSON once its invalid UTF-8 is replaced, or
    None: a torn write's fragment is no whole value, whatever its bytes."""
    fixed = raw.decode("utf-8", "replace").encode()
    if fixed == raw:
        return None  # valid UTF-8 already: not whole JSON, so a fragment
    try:
        return _any.decode(fixed)
    except UNREADABLE:
        return None


_Item = tuple[int, bytes, "_Link | _Foreign"]


def _unreadable(raw: bytes, exc: Exception, where: str, frags: _Fragments) -> _Foreign | None:
    """A line the chain decoder refused: whole JSON that is no ledger line, or damaged
    (a `_Foreign`); otherwise a fragment a crash left before later appends (noted in
    `frags`) or a blank line (None for both)."""
    if is_whole(raw):
        try:
            obj = decode_json(raw)
        except UNREADABLE:
            try:
                obj, escape = surrogate_escape(raw)
            except UNREADABLE:  # an integer of over 4,300 digits
                obj = None
            else:
                # msgspec's own word for such a line is "truncated": not the reason.
                return _Foreign(obj, SURROGATE.format(escape))
        return _Foreign(obj, f"complete line is not a ledger line ({exc})")
    if (obj := _damaged(raw)) is not None:
        return _Foreign(obj, DAMAGED)
    if raw:
        frags.at.append(where)
    return None


def _fault(link: _Link, raw: bytes, prev_seq: int | None, prev_hash: str | None) -> str | None:
    """Why a line breaks the chain after (prev_seq, prev_hash), or None; with no line
    before it (prev_seq None) only the line's own fields and hash are checked."""
    digest = link.hash
    if link.prev is None or digest is None:
        return "line has no prev/hash chain fields"
    if prev_seq is not None:
        err = _link_error(link.seq, link.prev, prev_seq, prev_hash)
        if err:
            return err
    if not readable(raw):
        # Hashed right as it lies or in another spelling (spaces, escapes), every reader
        # skips it: what they fold is not what was hashed, and no writer of the chain
        # makes such a line.
        return UNREAD
    # Its bytes hashing to the digest prove nothing unless they are the canonical ones:
    # a line in another spelling is judged by its re-encoding alone.
    if hash_of_line_bytes(raw, digest) and (type(link) is _Canonical or _canonical(raw)):
        return None
    if not _reencoded_ok(raw, digest):
        if not is_utf8(raw):
            return DAMAGED  # a byte no editor writes: the disk, not a person
        return "hash does not match the line's content (the line was edited)"
    return None


def _link_error(seq: int, prev: str, prev_seq: int, prev_hash: str | None) -> str | None:
    if seq <= prev_seq:
        return f"seq {seq} does not follow seq {prev_seq} (duplicated or reordered line)"
    if prev != prev_hash:
        return (f"prev does not match the hash of the line before (seq {prev_seq}):"
                " a line was removed, inserted or edited")
    if seq != prev_seq + 1:
        # Linked, yet past a missing seq (REQ-1: one more per line): sealed by hand.
        return f"seq {seq} follows seq {prev_seq}: a seq is missing (each line's is one " \
               "more than the last)"
    return None


def _reencoded_ok(raw: bytes, digest: str) -> bool:
    """The slow path, for a line not proven canonical: re-encode and hash."""
    try:
        obj = _any.decode(raw)
        return isinstance(obj, dict) and hash_of_object(obj) == digest
    except (*UNREADABLE, ValueError):
        return False


def _check_job(args: tuple[str, str, tuple[int, str] | None]) -> FileCheck:
    return check_file(*args)


# Below this many bytes the fork costs more than the second core saves.
PARALLEL_BYTES = 16 << 20


def _check_all(jobs: list[tuple[str, str, tuple[int, str] | None]], parallel: bool
               ) -> list[FileCheck]:
    procs = os.cpu_count() or 1
    if parallel and procs > 1 and len(jobs) > 1:
        ctx = multiprocessing.get_context("fork")
        with ctx.Pool(min(procs, len(jobs))) as pool:
            # Tasks of many files each (map's default split): one per file cost a round
            # trip each, and 100,000 small files verified 3× slower than on one core.
            return pool.map(_check_job, jobs)
    return [check_file(*j) for j in jobs]


def verify_run_ledger(directory: str, parallel: bool | None = None) -> VerifyResult:
    """Check the chain from CHAIN (or genesis) to the head.

    Each day file is checked on its own — on every core when the ledger is large —
    and the files are then stitched: each file's first line must link to the
    previous file's last. Files whose seq ranges overlap (a clock jump wrote a later
    line into an earlier day's file) are checked as one seq-ordered merge instead.

    The daemon prunes while verify reads: CHAIN moves on and the oldest files go. A file
    gone after the listing means the walk saw part of each state, so it starts again
    from a fresh listing and CHAIN, for as long as files it listed go: one prune of a
    large ledger deletes hundreds of files, each after a carry and a synced CHAIN, and
    outlasts any fixed number of walks. Every extra walk needs a file the last walk
    listed to be gone, so the walking ends. A file deleted by hand is found as if it had
    gone before verify started: a break where its lines were.
    """
    while True:
        listing = list_day_files(directory)
        try:
            return _verify_once(directory, listing, parallel)
        except FileNotFoundError:
            if not any(not os.path.lexists(path) for _, path in listing.days):
                raise


def _verify_once(directory: str, listing: Listing, parallel: bool | None) -> VerifyResult:
    exists = os.path.isdir(directory)
    res = VerifyResult(ok=False, exists=exists, strays=listing.strays)
    if not exists:
        return res
    res.files = len(listing.days)
    anchor = read_chain_file(directory)
    if anchor:
        res.anchor = f"CHAIN seq {anchor[0]}"
    jobs = [(p, os.path.basename(p), anchor) for _, p in listing.days]
    if parallel is None:
        parallel = sum(os.path.getsize(p) for p, _, _ in jobs) >= PARALLEL_BYTES
    checks = _check_all(jobs, parallel)
    # A file's own check stops at its first fault, before it reaches the file's end: a
    # file that faulted is read through once more, to its end.
    scans = {i: _scan(p, name) for i, (p, name, _) in enumerate(jobs)
             if checks[i].error is not None}
    if checks:
        last = len(checks) - 1
        res.torn_tail = scans[last].torn if last in scans else checks[last].ends_torn
    # The files' own checks can be stitched only when their seq ranges follow each other.
    # A fault a file found need not be one: a clock jump leaves a gap in one file that
    # another file fills. So any fault, like any overlap, is judged by the merge, which
    # also finds the first break in seq order when there are several.
    spans = [(c.first_seq, c.last_seq) for c in checks
             if c.first_seq is not None and c.last_seq is not None]
    ordered = all(c.error is None for c in checks) and all(
        b_first > a_last for (_, a_last), (b_first, _) in itertools.pairwise(spans))
    if len(checks) > 1 and not ordered:
        return _verify_merged(listing, anchor, checks, scans, res)
    prev_seq, prev_hash = anchor if anchor else (0, ZERO_HASH)
    for c in checks:
        res.behind += c.behind
        if c.first_seq is None:
            res.torn_at.extend(c.torn_at)
            if c.error is not None:
                res.error = c.error
                break
            continue
        err = _link_error(c.first_seq, c.first_prev or "", prev_seq, prev_hash)
        if err:
            res.error = Break(c.first_seq, c.name, c.first_line, err)
            # The file's own check read past its first line: only fragments before it,
            # as for a break inside a file.
            res.torn_at.extend(w for w in c.torn_at if _file_then_line(w)[1] < c.first_line)
            break
        res.torn_at.extend(c.torn_at)
        if res.start_seq is None:
            res.start_seq = c.first_seq
        res.lines += c.lines
        prev_seq, prev_hash = c.last_seq or prev_seq, c.last_hash or prev_hash
        if c.error is not None:
            res.error = c.error
            break
    res.torn = len(res.torn_at)
    res.ok = res.error is None
    res.head_seq = prev_seq if prev_seq else None
    res.head_hash = prev_hash if prev_seq else None
    return res


def _by_seq(fi: int, lines: Iterator[_Item], before: int, frags: _Fragments,
            placed: list[tuple[tuple[int, int, int], str]]
            ) -> Iterator[tuple[int, int, int, bytes, _Link | _Foreign]]:
    """One file's lines keyed for the merge: (seq, file index, line number, bytes, link).

    A foreign line keeps its place after the line before it. One that opens the file has
    no line before it there, so it is keyed at the seq before the file's first linked
    line: after the earlier files' line of that seq (an earlier stream sorts first), and
    ahead of every line of the first linked line's own seq, an earlier file's duplicate
    of it included. In a file with no linked line it goes at `before`: where the files
    before it end. Only the first such line can be the break, so the rest are not held.

    The torn fragments `lines` passes over go to `placed` with their place in the merge
    (the key of the line after them, the file, their own line number), so that a break
    can keep only those the merge had reached; the merge reads each file ahead of it."""
    seq: int | None = None
    opening: tuple[int, bytes, _Link | _Foreign] | None = None
    held: list[str] = []  # the fragments before the held opening line
    seen = 0

    def put(key: int, wheres: list[str]) -> None:
        placed.extend(((key, fi, _file_then_line(w)[1]), w) for w in wheres)

    def place(key: int) -> None:
        nonlocal seen
        put(key, frags.at[seen:])
        seen = len(frags.at)

    for n, raw, link in lines:
        if isinstance(link, _Link):
            if opening is not None:
                put(link.seq - 1, held)
                yield link.seq - 1, fi, *opening
                opening = None
            seq = link.seq
        elif seq is None:
            if opening is None:
                opening = (n, raw, link)
                held, seen = frags.at[seen:], len(frags.at)
            continue
        place(seq)
        yield seq, fi, n, raw, link
    if opening is not None:
        put(before, held)
        yield before, fi, *opening
    place(before if seq is None else seq)  # after the file's last line


@dataclass
class _Disorder:
    """Where a day file leaves seq order, which no writer does (`_scan`)."""

    low: int  # the lowest seq from the first line out of order to the file's end
    line: int  # the line blamed, its seq, and why
    seq: int
    reason: str
    # The lines from the first of a seq above the one out of order to that one's line.
    block: tuple[int, int]


@dataclass
class _Scan:
    """A day file read to its end, whether its lines verify or not."""

    end: int  # the highest seq of any ledger line in it
    torn: bool  # whether a torn fragment ends it
    disorder: _Disorder | None


def _scan(path: str, name: str) -> _Scan:
    """Read one day file through (`_Scan`).

    A clock jump leaves a file with gaps in its seqs that other files fill, but each
    file's seqs rise, as the writer appends them; the merge relies on that. A line whose
    seq is below one before it breaks it: lines were moved. Which ones is a guess, made
    as a reader would: the lines above it that come first are the ones moved in when it
    is the seq after the line before them (it lies where it belongs); otherwise it is."""
    frags = _Fragments([])
    end = 0
    seqs = array.array("q")  # the file's seqs while they do not fall, and their lines
    at = array.array("q")
    disorder: _Disorder | None = None
    for n, _, link in _lines(path, name, frags):
        if not isinstance(link, _Link):
            continue
        seq = link.seq
        if disorder is not None:
            disorder.low = min(disorder.low, seq)
        elif not seqs or seq >= seqs[-1]:
            seqs.append(seq)
            at.append(n)
        else:
            i = bisect.bisect_right(seqs, seq)  # the first line above it
            if i and seqs[i - 1] + 1 == seq:
                why = (f"seq {seqs[i]} comes before seq {seq} (line {n}) in the same file: "
                       "a line was moved or reordered")
                disorder = _Disorder(seq, at[i], seqs[i], why, (at[i], n))
            else:
                why = _link_error(seq, "", seqs[-1], None) or ""  # "does not follow"
                disorder = _Disorder(seq, n, seq, why, (at[i], n))
            seqs = at = array.array("q")
        end = max(end, seq)
    return _Scan(end, frags.tail, disorder)


def _blame(path: str, name: str, d: _Disorder) -> Break:
    """The break a file's disorder makes: the first line of its block above the one out
    of order whose own hash fails (an edited seq), else the line `_scan` blamed."""
    first, last = d.block
    for n, raw, link in _lines(path, name, _Fragments([])):
        if n >= last:
            break
        if n >= first and isinstance(link, _Link):
            own = _fault(link, raw, None, None)
            if own is not None:
                return Break(link.seq, name, n, own)
    return Break(d.seq, name, d.line, d.reason)


def _file_then_line(where: str) -> tuple[str, int]:
    """Sort key of a `file:line` place: day-file names sort in day order."""
    name, _, line = where.rpartition(":")
    return name, int(line)


def _first_seq(path: str) -> int | None:
    """The seq of a day file's first line that has one, read from its first lines."""
    for _n, lines, _torn in iter_chunks(path, first=1 << 16):
        for raw in lines:
            try:
                return _link.decode(raw).seq
            except UNREADABLE:
                continue
    return None


_Keyed = tuple[int, int, int, bytes, "_Link | _Foreign"]


def _merge_lazily(firsts: list[int], stream: Callable[[int], Iterator[_Keyed]]
                  ) -> Iterator[_Keyed]:
    """What `heapq.merge` of every file's `stream(fi)` by seq gives (ties in file order),
    with a file opened only once the merge reaches `firsts[fi]`, no more than its first
    item's seq, and closed when it ends. So only files whose seq ranges overlap are open
    at once, a few where a clock stepped back, not ten years of day files (past the
    descriptor limit, each holding a chunk)."""
    heap: list[tuple[int, int, _Keyed | None]] = [(k, fi, None) for fi, k in enumerate(firsts)]
    heapq.heapify(heap)
    open_: dict[int, Iterator[_Keyed]] = {}
    while heap:
        _key, fi, item = heap[0]
        if item is None:
            open_[fi] = stream(fi)
        else:
            yield item
        nxt = next(open_[fi], None)
        if nxt is None:
            heapq.heappop(heap)
            del open_[fi]
        else:
            heapq.heapreplace(heap, (nxt[0], fi, nxt))


def _verify_merged(listing: Listing, anchor: tuple[int, str] | None, checks: list[FileCheck],
                   scans: dict[int, _Scan], res: VerifyResult) -> VerifyResult:
    """Follow the chain through every file at once, in seq order (the clock-jump case)."""
    res.lines = 0
    res.behind = 0
    res.start_seq = None
    prev_hash: str | None
    prev_seq, prev_hash = anchor if anchor else (0, ZERO_HASH)
    names = [os.path.basename(p) for _, p in listing.days]
    behind = _Behind(anchor)
    # Where each file's predecessors end, for a file with no linked line (`_by_seq`). A
    # file's own check stops at its first fault, so its last verified seq can fall short
    # of its end: a file that faulted was read to its end for its highest seq.
    ends = itertools.accumulate(
        (scans[i].end if i in scans else (c.last_seq or 0) for i, c in enumerate(checks)),
        max, initial=prev_seq)
    placed: list[tuple[tuple[int, int, int], str]] = []
    befores = list(ends)

    def stream(fi: int) -> Iterator[tuple[int, int, int, bytes, _Link | _Foreign]]:
        frags = _Fragments([])
        return _by_seq(fi, _lines(listing.days[fi][1], names[fi], frags, prove=True),
                       befores[fi], frags, placed)

    # Day files are seq-ordered inside; merging by seq also orders lines a clock jump
    # put in an earlier-named file. A file's stream starts no lower than the line before
    # its first linked line, or where the files before it end (`_by_seq`).
    firsts = [min(befores[fi], first - 1) if (first := _first_seq(p)) is not None
              else befores[fi] for fi, (_, p) in enumerate(listing.days)]
    items = _merge_lazily(firsts, stream)
    gc_was = gc.isenabled()
    gc.disable()
    try:
        stop: tuple[int, int, int] | None = None  # the break's place in the merge
        for seq, fi, n, raw, link in items:
            if isinstance(link, _Foreign):
                res.error = Break(link.seq, names[fi], n, link.reason)
                stop = (seq, fi, n)
                break
            if res.start_seq is None and behind.takes(seq):
                fault = behind.fault(link, raw)
                if fault:
                    res.error = Break(seq, names[fi], n, fault)
                    stop = (seq, fi, n)
                    break
                continue
            fault = _fault(link, raw, prev_seq, prev_hash)
            if fault:
                res.error = Break(seq, names[fi], n, fault)
                stop = (seq, fi, n)
                break
            if res.start_seq is None:
                res.start_seq = seq
            res.lines += 1
            prev_seq, prev_hash = seq, link.hash
    finally:
        if gc_was:
            gc.enable()
    # A file out of seq order holds lines back from the merge behind a higher one, so
    # a line after them can seem to break the chain. Lower than that, the disorder is
    # the break.
    disordered = [(sc.disorder.low, fi) for fi, sc in scans.items() if sc.disorder]
    if stop is not None and disordered and min(disordered)[0] < stop[0]:
        fi = min(disordered)[1]
        d = scans[fi].disorder
        assert d is not None
        res.error = _blame(listing.days[fi][1], names[fi], d)
    res.behind = behind.count
    # Only the fragments before the break, as when files are read one after another;
    # found in merge order, they are named in file order too.
    res.torn_at = sorted((w for place, w in placed if stop is None or place < stop),
                         key=_file_then_line)
    res.torn = len(res.torn_at)
    res.ok = res.error is None
    res.head_seq = prev_seq if prev_seq else None
    res.head_hash = prev_hash if prev_seq else None
    return res
