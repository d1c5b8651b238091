"""Reading the run ledger from its files: the offline `harness runs` and the index's fallback.

Invariants: read-only (nothing is created, changed or pruned — REQ-16); memory is
bounded by the number of records in range, not the number of lines or bytes:
a first pass decodes only the few envelope fields a query filters on, a second
pass folds whole lines only for the records the query returns. Unparseable lines
and torn fragments are skipped and counted, never raised.
"""

from __future__ import annotations

import functools
import gc
import heapq
import itertools
import math
import re
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

import msgspec

from ..timefmt import canon, format_ns
from .dayfiles import (
    UNREADABLE,
    decode_json,
    is_utf8,
    iter_blocks,
    iter_blocks_back,
    list_day_files,
    read_tail,
)
from .fold import Record
from .query import Query, select
from .schema import LINE_TYPES, RECORD_FIELDS
from .writer import MAX_LINE

_DAY_NS = 86_400 * 1_000_000_000


# Positive and within 64 bits, as the writer keeps every integer (schema._int64): a line
# with a larger seq or run_id was not written by harness, and no writer could close
# its record, so it would read `running?` for ever.
_POS_MAX = 2**63 - 1
_Pos = Annotated[int, msgspec.Meta(gt=0, le=_POS_MAX)]


class Head(msgspec.Struct):
    """The envelope and the three fields queries filter on; all else is skipped unread.

    The constraints make msgspec reject, in C, every line a reader must skip."""

    seq: _Pos
    type: Literal["opened", "updated", "closed", "decided"]
    at: str
    harness: Annotated[str, msgspec.Meta(min_length=1)]
    run_id: _Pos
    started_at: str | None = None
    outcome: str | None = None
    trigger: str | None = None


_head = msgspec.json.Decoder(Head)
# Lines this long or longer may need a whole decode in `head_of` (see `_huge_int`).
CHECK_WHOLE = 4096
# The fewest digits of an integer a whole decode refuses (Python's limit on converting
# digits to an int) and `Head`, skipping it unread, accepts. Every such integer holds a
# stretch of _RUN digits that starts at a multiple of _STEP: a few anchored matches per
# long line rule it out, where a whole decode cost more than the decode of `Head` itself.
_HUGE = 4301
_STEP = _HUGE // 2
_RUN = re.compile(rb"[0-9]{%d}" % (_HUGE - _STEP + 1))
# Arrays and objects nested deeper than this make a line every reader skips. The
# decoders' own limit is the interpreter's recursion limit, which a deep caller reaches
# sooner, and decoding into `Head` costs a level more than a whole decode: left to them,
# one line near it would read in one reader and not in another. REQ-4's fields nest
# three deep; a line needs twice this many bytes to nest this deep.
MAX_DEPTH = 512
# A line no longer than this cannot nest past MAX_DEPTH (a level takes two bytes) nor hold
# an integer too long to decode: the checks for those skip it.
SHORT_LINE = 2 * MAX_DEPTH
_full = msgspec.json.Decoder()
_TYPES = frozenset(LINE_TYPES)


@dataclass
class ReadStats:
    """What a read skipped: unparseable complete lines, torn fragments, stray file names."""

    lines: int = 0
    skipped: int = 0
    torn: int = 0
    strays: list[str] = field(default_factory=list)
    files: int = 0


_OPT_STR = (str, type(None))


def valid_line(obj: Any) -> bool:
    """Whether a decoded value is a run-ledger line a reader may fold: exactly the lines
    whose `Head` decodes, so every reader of the files keeps and skips the same lines."""
    if type(obj) is not dict:
        return False
    seq, run_id, h = obj.get("seq"), obj.get("run_id"), obj.get("harness")
    return (
        type(seq) is int
        and 0 < seq <= _POS_MAX
        and type(run_id) is int
        and 0 < run_id <= _POS_MAX
        and type(h) is str
        and h != ""
        # Type first: a list or an object in `type` is unhashable, no set member.
        and type(t := obj.get("type")) is str
        and t in _TYPES
        and type(obj.get("at")) is str
        and type(obj.get("started_at")) in _OPT_STR
        and type(obj.get("outcome")) in _OPT_STR
        and type(obj.get("trigger")) in _OPT_STR
    )


def readable(raw: bytes) -> bool:
    """Whether readers fold the complete line `raw` at all: within the 16 KiB line limit
    (REQ-1, its newline counted) and nested no deeper than MAX_DEPTH. Verify holds a line
    that fails this to be a break, however its hash reads."""
    return len(raw) + 1 <= MAX_LINE and not too_deep(raw)


def too_deep(raw: bytes) -> bool:
    """Whether the JSON text `raw` nests arrays and objects deeper than MAX_DEPTH (for
    text that is no JSON, whether it opens more than that before failing)."""
    if len(raw) <= SHORT_LINE or not _opens_over(raw, MAX_DEPTH):
        return False
    depth = 0
    in_string = escaped = False
    for b in raw:  # rare: only a line of over MAX_DEPTH brackets gets here
        if in_string:
            if escaped:
                escaped = False
            elif b == 0x5C:  # backslash
                escaped = True
            elif b == 0x22:  # quote
                in_string = False
        elif b == 0x22:
            in_string = True
        elif b == 0x5B or b == 0x7B:  # [ {
            depth += 1
            if depth > MAX_DEPTH:
                return True
        elif b == 0x5D or b == 0x7D:  # ] }
            depth -= 1
    return False


# Brackets looked for one by one before counting them: `find` is memchr, ten times the
# speed of `count` over a long line, and most lines hold a handful.
_FEW = 16


def _opens_over(raw: bytes, limit: int) -> bool:
    """Whether `raw` holds more than `limit` opening brackets ([ and {) in all."""
    n = 0
    for ch in (b"[", b"{"):
        i = raw.find(ch)
        while i >= 0:
            n += 1
            if n > _FEW:
                return raw.count(b"[") + raw.count(b"{") > limit
            i = raw.find(ch, i + 1)
    return n > limit


def decode_line(raw: bytes) -> dict[str, Any] | None:
    """A complete line as a reader folds it, or None for one every reader skips: over
    16 KiB, nested deeper than MAX_DEPTH, not JSON, not UTF-8, or not a run-ledger line.

    A number out of float's range (1e999, which a flipped digit can make of 15e99) is no
    value: dropped where it stands, as if absent, and the rest of the line reads. `Head`
    skips such a number unread, so skipping the whole line here would let the envelope
    scans and the folds disagree about the same line (a run closed for one, open for the
    other). In the envelope it makes the line unreadable, as it does for `Head`."""
    if not readable(raw):
        return None
    try:
        obj = _full.decode(raw)
    except msgspec.ValidationError:
        try:
            obj = decode_json(raw)
        except UNREADABLE:
            return None
        return _finite(obj) if valid_line(obj) else None
    except UNREADABLE:
        return None
    return obj if valid_line(obj) else None


def _finite(v: Any) -> Any:
    """`v` without the infinities `decode_json` read out-of-range numbers as."""
    if type(v) is dict:
        return {k: _finite(x) for k, x in v.items() if not _infinite(x)}
    if type(v) is list:
        return [_finite(x) for x in v if not _infinite(x)]
    return v


def _infinite(v: Any) -> bool:
    return type(v) is float and math.isinf(v)


def head_of(raw: bytes, utf8: bool = False) -> Head | None:
    """The envelope of a complete line, or None for a line `decode_line` skips; cheaper,
    for scans that pick lines before decoding them whole. `utf8`: the line is known to be
    UTF-8 (it came from a block that is)."""
    if len(raw) + 1 > MAX_LINE or not (utf8 or is_utf8(raw)) or too_deep(raw):
        return None
    try:
        h = _head.decode(raw)
    except msgspec.ValidationError:
        return _rescued(raw)
    except UNREADABLE:
        return None
    if _huge_int(raw) and decode_line(raw) is None:
        return None
    return h


def refused_whole(raw: bytes) -> bool:
    """Whether a line of at most 16 KiB that a decoder skipping fields (`Head`) read is one
    a whole decode refuses, as `head_of` checks: bytes skipped unread are not UTF-8, or
    nest too deep, or hold a huge integer."""
    return not (raw.isascii() or is_utf8(raw)) or (len(raw) > SHORT_LINE and (
        too_deep(raw) or (_huge_int(raw) and decode_line(raw) is None)))


def _huge_int(raw: bytes) -> bool:
    """Whether `raw` may hold an integer of _HUGE digits or more: the one value `Head`
    skips unread that makes a whole decode refuse the line (a false alarm only costs that
    whole decode). Such a run of digits covers a multiple of _STEP that starts a run of
    _RUN's length."""
    if len(raw) < _HUGE:
        return False
    run = _RUN.match
    return any(48 <= raw[k] <= 57 and run(raw, k) for k in
               range(0, len(raw) - (_HUGE - _STEP), _STEP))


def _files_for(directory: str, q: Query, stats: ReadStats) -> tuple[list[tuple[str, str]], int]:
    """Every day file, and the index of the first one the query's range needs."""
    listing = list_day_files(directory)
    stats.strays = listing.strays
    days = listing.days
    start = 0
    if q.since_ns is not None:
        # A record's lines sit in the day files of their own `at`, on or after its start;
        # a day of slack covers a start stamped just before midnight and written after.
        first = format_ns(q.since_ns - _DAY_NS)[:10]
        while start < len(days) and days[start][0] < first:
            start += 1
    return days, start


def _rescued(raw: bytes) -> Head | None:
    """The envelope of a line `Head` refused as invalid, as a whole decode reads it. A key
    given twice reads as its last value in a whole decode, while `Head` refuses the line
    at an earlier, invalid one: the whole decode decides, in every pass."""
    obj = decode_line(raw)
    if obj is None:
        return None
    return Head(obj["seq"], obj["type"], obj["at"], obj["harness"], obj["run_id"],
                obj.get("started_at"), obj.get("outcome"), obj.get("trigger"))


def _maybe_long(buf: bytes) -> bool:
    """Whether `buf` may hold a line of CHECK_WHOLE bytes or more, which `head_of` checks
    for a huge integer, or one over MAX_LINE (REQ-1: 16 KiB with its "\\n"), which it skips.

    Such a line covers a whole aligned window of CHECK_WHOLE // 2 bytes with no newline, so
    a few thousand `find`s per block rule it out; a false alarm only costs the slow path.
    """
    w = CHECK_WHOLE // 2
    return any(buf.find(b"\n", k, k + w) < 0 for k in range(0, len(buf) - w + 1, w))


def heads(path: str, stats: ReadStats) -> Iterator[list[Head]]:
    """The valid lines of a day file as `Head`s, a block at a time; bad lines counted.

    Each line is decoded on its own: msgspec's batch decoder reads a stream of values, so
    a line holding two objects balances a blank line, or a line cut before a nested
    object, in its count, and no cheap look at the bytes rules both out. Only a block
    holding a bad line is read a second time, with the checks `head_of` makes per line.
    """
    for got, _lines in head_blocks(path, stats):
        yield got


def head_blocks(path: str, stats: ReadStats) -> Iterator[tuple[list[Head], list[bytes]]]:
    """`heads`, with each block's lines as well: the valid lines' `Head`s and their bytes,
    in two lists of one length (for a reader that decodes some of them whole)."""
    decode = _head.decode
    for block, torn in iter_blocks(path, gone_ok=True):
        if torn:
            stats.torn += 1
            continue
        data = bytes(block)
        lines = data.split(b"\n")
        lines.pop()  # the block ends in a newline
        stats.lines += len(lines)
        # Per line, `Head` skips unknown fields unread, invalid UTF-8 included, and
        # `head_of` skips a line over 16 KiB: both are ruled out for the block at once.
        utf8 = is_utf8(data)  # and so is each line: "\n" is no part of another character
        if utf8 and not _maybe_long(data):
            try:
                got = [decode(raw) for raw in lines]
            except UNREADABLE:
                pass
            else:
                # too_deep's own length gate, for the whole block at once: only a block
                # holding a line long enough to nest past MAX_DEPTH is looked at per line.
                if max(map(len, lines), default=0) <= SHORT_LINE or not any(
                        too_deep(raw) for raw in lines):
                    yield got, lines
                    continue
        good = []
        kept = []
        for raw in lines:
            h = head_of(raw, utf8)
            if h is None:
                stats.skipped += 1
            else:
                good.append(h)
                kept.append(raw)
        yield good, kept


# A record in the first pass: [seq, last_seq, when, outcome, trigger, flags, fileno]
_SEQ, _LAST, _WHEN, _OUT, _TRIG, _FLAGS, _FILE = range(7)
_OPENED, _CLOSED, _STARTED = 1, 2, 4


def _fold_head(r: list[Any], h: Head, words: dict[str, str]) -> None:
    """Fold an envelope into a first-pass record, in seq order."""
    t = h.type
    if t != "updated":
        r[_FLAGS] |= _OPENED if t == "opened" else (
            _CLOSED | _OPENED if t == "decided" else _CLOSED)
    r[_LAST] = h.seq
    if h.started_at is not None:
        r[_WHEN] = h.started_at
        r[_FLAGS] |= _STARTED
    if h.outcome is not None:
        r[_OUT] = words.setdefault(h.outcome, h.outcome)
    if h.trigger is not None:
        r[_TRIG] = words.setdefault(h.trigger, h.trigger)


def _fresh(h: Head, fileno: int) -> list[Any]:
    return [h.seq, 0, h.at, None, None, 0, fileno]


# Scans of one query at most: a prune deleted a file the scan had chosen records from.
_SCANS = 3


def scan(directory: str, q: Query, *, upto_seq: int | None = None
         ) -> tuple[list[Record], int | None, ReadStats]:
    """Answer `q` from the day files alone; lines after `upto_seq` (not yet durable) are
    ignored.

    The daemon prunes while offline readers read: a day file may go after the listing. A
    file gone before the first pass reads it is read as empty, as the prune left things;
    one gone between the passes takes records the first pass chose with it, so the scan
    starts again rather than answer a short page (a few times at most: a prune deletes
    a handful of files and is done)."""
    for _ in range(_SCANS):
        records, stats, whole = _scan_once(directory, q, upto_seq)
        if whole:
            break
    hits, oldest = select(q, records)
    return [r for r in hits if isinstance(r, Record)], oldest, stats


def _scan_once(directory: str, q: Query, upto_seq: int | None
               ) -> tuple[list[Record], ReadStats, bool]:
    """The records `q` may return, and whether every record the first pass chose was
    still in the files for the second."""
    stats = ReadStats()
    files, start = _files_for(directory, q, stats)
    gc_was = gc.isenabled()
    gc.disable()  # millions of short-lived objects and no cycles: collection is pure cost
    try:
        # Where each older file ends, read at most once a scan: both passes below ask.
        last_seq = functools.cache(_last_seq)
        found = _first_pass(files, start, q, upto_seq, stats, last_seq)
        if found is None:
            # The files read miss seqs of their own range: a clock stepped back more than
            # the day of slack put lines of these records in older files. Read them all.
            stats = ReadStats(strays=stats.strays)
            start = 0
            found = _first_pass(files, start, q, upto_seq, stats, last_seq)
            assert found is not None
        by_name, words, upto = found
        _look_back(files, start, by_name, words, last_seq)
        chosen = _choose(q, by_name, files)
        records = _fold_chosen(files, chosen, upto)
    finally:
        if gc_was:
            gc.enable()
    return records, stats, len(records) == len(chosen)


_Found = tuple[dict[str, dict[int, list[Any]]], dict[str, str], int]


def _first_pass(files: list[tuple[str, str]], start: int, q: Query, upto_seq: int | None,
                stats: ReadStats, last_seq: Callable[[str], int]) -> _Found | None:
    """Fold every line's envelope in files[start:] into first-pass records; None when
    start > 0 and those files do not hold every seq between the lowest and the highest
    they hold (lines of that range lie in older files)."""
    stats.files = len(files) - start
    upto = upto_seq if upto_seq is not None else sys.maxsize
    by_name: dict[str, dict[int, list[Any]]] = {}
    words: dict[str, str] = {}  # one copy of each outcome/trigger word
    names = frozenset(q.names)
    dirty: set[tuple[str, int]] = set()
    lo, hi = sys.maxsize, 0
    held = 0  # readable lines: a blank, a fragment or an unreadable line holds no seq
    for fileno in range(start, len(files)):
        for block in heads(files[fileno][1], stats):
            held += len(block)
            for h in block:
                seq = h.seq
                if seq < lo:
                    lo = seq
                if seq > hi:
                    hi = seq
                name = h.harness
                runs = by_name.get(name)
                if runs is None:
                    if names and name not in names:
                        continue
                    runs = by_name[name] = {}
                if seq > upto:
                    continue
                r = runs.get(h.run_id)
                if r is None:
                    r = runs[h.run_id] = _fresh(h, fileno)
                elif seq < r[_LAST]:
                    # A line older than one already folded (a clock jump put it in a
                    # later file): refold this record in seq order below.
                    dirty.add((name, h.run_id))
                    continue
                if h.type == "updated" and h.started_at is None and h.outcome is None \
                        and h.trigger is None:
                    r[_LAST] = seq  # the usual update: all `_fold_head` would change
                    continue
                _fold_head(r, h, words)
    # Every readable line holds one seq, so fewer of them than the range spans means
    # some of it lies elsewhere. Only readable lines count: a blank line or a fragment
    # counted in would hide a seq of the range that lies in an older file (verify
    # passes both); an unreadable line is a break for verify, and costs only a full
    # read here. And an older file ending above the range holds lines written after it
    # (the newest ones, with no gap to betray them, when the clock stepped back at the
    # very end).
    if start > 0 and hi >= lo and (held < hi - lo + 1 or any(
            last_seq(path) > hi for _day, path in files[:start])):
        return None
    if dirty:
        _refold(files, start, len(files), dirty, by_name, words, upto)
    return by_name, words, upto


def _last_seq(path: str) -> int:
    """The seq of a day file's last whole line, damaged or not; 0 for none."""
    try:
        t = read_tail(path)
    except OSError:
        return 0
    return max(t.last_seq or 0, t.damaged_seq or 0)


def _refold(files: list[tuple[str, str]], lo: int, hi: int, keys: set[tuple[str, int]],
            by_name: dict[str, dict[int, list[Any]]], words: dict[str, str], upto: int
            ) -> None:
    """Rebuild the given first-pass records from all their lines in files[lo:hi], by seq."""
    acc: dict[tuple[str, int], list[Any]] = {k: _unsorted() for k in keys}
    for fileno in range(lo, hi):
        for block in heads(files[fileno][1], ReadStats()):
            for h in block:
                a = acc.get((h.harness, h.run_id))
                if a is not None and h.seq <= upto:
                    _absorb(a, h, fileno, words)
    for (name, run_id), a in acc.items():
        by_name[name][run_id] = _settled(a)


# A first-pass record folded from lines met in any order: [first seq, its at, first file,
# last seq, started_at, its seq, outcome, its seq, trigger, its seq, flags]. Each field
# keeps the seq of the line that set it, so the lines need not be kept to sort them: a
# record of a million lines folds in constant memory.
_A_SEQ, _A_AT, _A_FILE, _A_LAST, _A_WHEN, _A_WHEN_SEQ, _A_OUT, _A_OUT_SEQ, _A_TRIG, \
    _A_TRIG_SEQ, _A_FLAGS = range(11)


def _unsorted() -> list[Any]:
    return [sys.maxsize, "", sys.maxsize, 0, None, 0, None, 0, None, 0, 0]


def _absorb(a: list[Any], h: Head, fileno: int, words: dict[str, str]) -> None:
    """Fold one envelope into `a` as sorting the lines by seq, stably in the order they are
    met, and folding them in that order would: a field takes the value of the highest seq
    that carries it, of the last met among equal seqs; the first line is the lowest seq,
    the first met among equal ones."""
    seq = h.seq
    if seq < a[_A_SEQ]:
        a[_A_SEQ], a[_A_AT] = seq, h.at
    if fileno < a[_A_FILE]:
        a[_A_FILE] = fileno
    if seq > a[_A_LAST]:
        a[_A_LAST] = seq
    t = h.type
    if t != "updated":
        a[_A_FLAGS] |= _OPENED if t == "opened" else (
            _CLOSED | _OPENED if t == "decided" else _CLOSED)
    if h.started_at is not None and seq >= a[_A_WHEN_SEQ]:
        a[_A_WHEN], a[_A_WHEN_SEQ] = h.started_at, seq
        a[_A_FLAGS] |= _STARTED
    if h.outcome is not None and seq >= a[_A_OUT_SEQ]:
        a[_A_OUT], a[_A_OUT_SEQ] = words.setdefault(h.outcome, h.outcome), seq
    if h.trigger is not None and seq >= a[_A_TRIG_SEQ]:
        a[_A_TRIG], a[_A_TRIG_SEQ] = words.setdefault(h.trigger, h.trigger), seq


def _settled(a: list[Any]) -> list[Any]:
    """The first-pass record `a` (which holds at least one line) folds to."""
    when = a[_A_WHEN] if a[_A_FLAGS] & _STARTED else a[_A_AT]
    return [a[_A_SEQ], a[_A_LAST], when, a[_A_OUT], a[_A_TRIG], a[_A_FLAGS], a[_A_FILE]]


def _look_back(files: list[tuple[str, str]], start: int,
               by_name: dict[str, dict[int, list[Any]]], words: dict[str, str],
               last_seq: Callable[[str], int]) -> None:
    """Records whose start lies before the files read (a run open across `since`): read
    older files, newest first, until each has its opened line, so they filter on their
    real start instead of passing as partial records; then any older file still that
    ends above the lowest seq found (a clock stepped back wrote lines of these records
    there, after their opened lines)."""
    partial = {(n, rid) for n, runs in by_name.items() for rid, r in runs.items()
               if not r[_FLAGS] & _OPENED}
    if not partial or start == 0:
        return
    found: dict[tuple[str, int], list[Any]] = {k: _unsorted() for k in partial}

    def read(fileno: int) -> None:
        for block in heads(files[fileno][1], ReadStats()):
            for h in block:
                a = found.get((h.harness, h.run_id))
                if a is not None:
                    _absorb(a, h, fileno, words)
                    if h.type in ("opened", "decided"):
                        waiting.discard((h.harness, h.run_id))

    waiting = set(partial)
    lo = start
    while waiting and lo > 0:
        lo -= 1
        read(lo)
    if lo > 0:
        first = min(a[_A_SEQ] for a in found.values())
        for fileno in range(lo - 1, -1, -1):
            if last_seq(files[fileno][1]) > first:
                read(fileno)
    for (name, run_id), a in found.items():
        if not a[_A_LAST]:
            continue  # none of its lines lies in the older files
        old = _settled(a)
        new = by_name[name][run_id]
        # The lines read before are all newer: their values win where they have one.
        new[_SEQ], new[_FILE] = old[_SEQ], old[_FILE]
        if not new[_FLAGS] & _STARTED:
            new[_WHEN] = old[_WHEN]
        new[_OUT] = new[_OUT] if new[_OUT] is not None else old[_OUT]
        new[_TRIG] = new[_TRIG] if new[_TRIG] is not None else old[_TRIG]
        new[_FLAGS] |= old[_FLAGS]


class _FirstAt:
    """The `at` of a first-pass record's first line, read again from the files: wanted
    only for a started_at that is no time, so not kept for every record (that cost 19 MB
    and 15% of a 250k-record scan). Each file is read at most once per scan."""

    def __init__(self, files: list[tuple[str, str]]) -> None:
        self.files = files
        self.read: dict[int, dict[int, str]] = {}

    def __call__(self, r: list[Any]) -> str:
        for fileno in range(r[_FILE], len(self.files)):
            ats = self.read.get(fileno)
            if ats is None:
                ats = self.read[fileno] = {h.seq: h.at for block in
                                           heads(self.files[fileno][1], ReadStats())
                                           for h in block}
            if r[_SEQ] in ats:
                return ats[r[_SEQ]]
        return ""


def _choose(q: Query, by_name: dict[str, dict[int, list[Any]]],
            files: list[tuple[str, str]]) -> dict[tuple[str, int], tuple[int, bool]]:
    """The records the query returns, by key, with the first file holding their lines and
    whether they span LONG_SPAN seqs or more.

    Each harness's records were created in first-line order, which is seq order unless a
    late line lowered a record's seq; then merging them newest first lets the choice stop
    at the limit instead of sorting every record in range.
    """
    since, until, before = q.since, q.until, q.before_seq
    outcomes, triggers = q.outcomes, q.triggers

    def newest_first(name: str, runs: dict[int, list[Any]]) -> Iterator[tuple[int, str, int]]:
        return ((r[_SEQ], name, rid) for rid, r in reversed(runs.items()))

    ordered = all(
        all(a[_SEQ] < b[_SEQ] for a, b in itertools.pairwise(runs.values()))
        for runs in by_name.values()
    ) if q.limit is not None else False
    if ordered:
        stream: Iterable[tuple[int, str, int]] = heapq.merge(
            *(newest_first(n, runs) for n, runs in by_name.items()), reverse=True)
    else:
        stream = sorted(((r[_SEQ], n, rid) for n, runs in by_name.items()
                         for rid, r in runs.items()), reverse=True)
    picked: dict[tuple[str, int], tuple[int, bool]] = {}
    first_at = _FirstAt(files)
    for seq, name, run_id in stream:
        r = by_name[name][run_id]
        if before is not None and seq >= before:
            continue
        if since is not None or until is not None:
            # As Record.started_key: a start that is no time counts from the first line.
            when = canon(r[_WHEN]) or (canon(first_at(r)) if r[_FLAGS] & _STARTED
                                       else None) or ""
            if (since is not None and when < since) or (until is not None and when > until):
                continue
        if outcomes and (r[_OUT] if r[_FLAGS] & _CLOSED else "running") not in outcomes:
            continue
        if triggers and r[_TRIG] not in triggers:
            continue
        picked[(name, run_id)] = (r[_FILE], r[_LAST] - r[_SEQ] >= LONG_SPAN)
        if q.limit is not None and len(picked) >= q.limit:
            break
    return picked


def _fold_chosen(files: list[tuple[str, str]],
                 chosen: dict[tuple[str, int], tuple[int, bool]], upto: int) -> list[Record]:
    """Second pass: fold whole lines, but only for the records the query returns (by key:
    their first file, and whether they span LONG_SPAN seqs); the long ones newest line
    first (see `_fold_back`)."""
    long = {k: f for k, (f, is_long) in chosen.items() if is_long}
    if not long:
        return _fold_forward(files, {k: f for k, (f, _) in chosen.items()}, upto)
    got, messy = _fold_back(files, long, upto)
    rest = {k: f for k, (f, _) in chosen.items() if k not in long or k in messy}
    folded = {(r.harness, r.run_id): r for r in (*got, *_fold_forward(files, rest, upto))}
    # In the order chosen: `select` keeps it among records of equal seq.
    return [folded[k] for k in chosen if k in folded]


# A chosen record whose lines span this many seqs is folded newest line first.
LONG_SPAN = 4096
_ENVELOPE: list[tuple[str, Any]] = [
    ("seq", _Pos), ("type", Literal["opened", "updated", "closed", "decided"]), ("at", str),
    ("harness", Annotated[str, msgspec.Meta(min_length=1)]), ("run_id", _Pos)]
# The record fields `Head` decodes too, with its types: every line is checked alike.
_IN_HEAD = ("started_at", "outcome", "trigger")
_OTHERS = tuple(k for k in RECORD_FIELDS if k not in _IN_HEAD)


@functools.lru_cache(maxsize=64)
def _back_decoder(wanted: tuple[str, ...]) -> msgspec.json.Decoder[Any]:
    """A decoder of `Head`'s fields, with its types, and of the record fields `wanted`,
    of any type; every other field is skipped unread."""
    fields: list[tuple[str, Any] | tuple[str, Any, Any]] = [
        *_ENVELOPE, *((k, str | None, None) for k in _IN_HEAD),
        *((k, Any, None) for k in wanted)]
    return msgspec.json.Decoder(msgspec.defstruct("Back", fields))


class _Newest:
    """A record folded from its newest line back: each field holds the value of the first
    line met that carries it, which is the newest while the seqs met keep falling."""

    __slots__ = ("at", "closed", "fields", "first", "last", "opened", "opened_at", "seqs")

    def __init__(self) -> None:
        self.first = sys.maxsize  # the lowest seq met
        self.at = ""  # its line's at
        self.last = 0  # the first seq met
        self.opened = self.closed = False
        self.opened_at = ""
        self.fields: dict[str, Any] = {}
        self.seqs: dict[str, int] = {}

    def record(self, harness: str, run_id: int) -> Record:
        r = Record(harness, run_id)
        r.seq, r.first_at, r.last_seq = self.first, self.at, self.last
        r.opened, r.closed, r.opened_at = self.opened, self.closed, self.opened_at
        # Oldest setter first: as the forward fold lists fields where each was set first
        # in the usual case (the opened line's, the updates', the closed line's).
        r.fields = dict(reversed(self.fields.items()))
        r._field_seq = self.seqs
        return r


def _fold_back(files: list[tuple[str, str]], chosen: dict[tuple[str, int], int], upto: int
               ) -> tuple[list[Record], set[tuple[str, int]]]:
    """Fold the chosen records newest line first, and the keys of those whose lines do not
    rise in seq through the files (a clock step, a copied seq: `_fold_forward` folds them).

    Folding forward decodes every line of a record whole and sets each field it carries,
    though a newer line replaces most of them: a record of a million updates cost four
    times the decode of its lines. Newest first, a field is set once, by the first line
    met that carries it, and each line is decoded only for the fields some record still
    lacks (one decoder per such set: they only shrink). While a record's seqs fall line by
    line this is exactly the forward fold (REQ-2); the first that does not sends it back.
    """
    folds = {k: _Newest() for k in chosen}
    lacking = dict.fromkeys(_OTHERS, len(folds))  # how many records lack each field
    messy: set[tuple[str, int]] = set()

    def wanted() -> tuple[msgspec.json.Decoder[Any], tuple[str, ...]]:
        names = tuple(k for k in _OTHERS if lacking[k])
        return _back_decoder(names), (*_IN_HEAD, *names)

    def drop(key: tuple[str, int]) -> None:
        b = folds.pop(key)
        messy.add(key)
        for k in _OTHERS:
            if k not in b.fields:
                lacking[k] -= 1

    def take(key: tuple[str, int], seq: int, typ: str, at: str,
             items: Iterable[tuple[str, Any]]) -> bool:
        """Fold a line met after every newer one; whether the decoder must change."""
        b = folds[key]
        if seq >= b.first:
            drop(key)
            return True
        b.first, b.at = seq, at
        if not b.last:
            b.last = seq
        if typ != "updated":
            if typ == "opened":
                b.opened = True
                if at >= b.opened_at:
                    b.opened_at = at
            else:
                b.closed = True
                if typ == "decided":
                    b.opened = True
        fewer = False
        fields = b.fields
        for k, v in items:
            if v is not None and k not in fields:
                fields[k] = v
                b.seqs[k] = seq
                if k in lacking:
                    lacking[k] -= 1
                    fewer = fewer or not lacking[k]
        return fewer

    astuple = msgspec.structs.astuple
    skip, short = len(_ENVELOPE), SHORT_LINE
    dec, names = wanted()
    decode, free = dec.decode, len(names)
    for fileno in range(len(files) - 1, min(chosen.values()) - 1, -1):
        for lines in iter_blocks_back(files[fileno][1], gone_ok=True):
            for raw in reversed(lines):
                n = len(raw)
                if not n or n >= MAX_LINE:
                    continue
                try:
                    x = decode(raw)
                except msgspec.ValidationError:
                    # A whole decode decides, as for `Head` (see `_rescued`).
                    obj = decode_line(raw)
                    if obj is None:
                        continue
                    key = (obj["harness"], obj["run_id"])
                    if key not in folds or obj["seq"] > upto:
                        continue
                    changed = take(key, obj["seq"], obj["type"], obj["at"],
                                   [(k, v) for k, v in obj.items() if k in RECORD_FIELDS])
                except UNREADABLE:
                    continue
                else:
                    key = (x.harness, x.run_id)
                    b = folds.get(key)
                    if b is None:
                        continue
                    seq = x.seq
                    if seq > upto or ((n > short or not raw.isascii()) and refused_whole(raw)):
                        continue
                    typ = x.type
                    vals = astuple(x)
                    if seq < b.first and typ == "updated" and vals.count(None) == free:
                        # The usual line: an update setting nothing a newer one has not.
                        b.first, b.at = seq, x.at
                        if not b.last:
                            b.last = seq
                        continue
                    changed = take(key, seq, typ, x.at,
                                   zip(names, vals[skip:], strict=True))
                if changed:
                    dec, names = wanted()
                    decode, free = dec.decode, len(names)
    # A record with no line left lost its file to a prune since the first pass: `scan`
    # reads again.
    return [b.record(*k) for k, b in folds.items() if b.last], messy


def _fold_forward(files: list[tuple[str, str]], chosen: dict[tuple[str, int], int],
                  upto: int) -> list[Record]:
    """Fold the chosen records from their whole lines, oldest first."""
    if not chosen:
        return []
    records = {k: Record(*k) for k in chosen}
    start = min(chosen.values())
    for _day, path in files[start:]:
        for block, torn in iter_blocks(path, gone_ok=True):
            if torn:
                continue
            for raw in bytes(block).split(b"\n"):
                if not raw or len(raw) + 1 > MAX_LINE:  # over 16 KiB: skipped in pass one
                    continue
                try:
                    h = _head.decode(raw)
                except msgspec.ValidationError:
                    rescued = _rescued(raw)
                    if rescued is None:
                        continue
                    h = rescued
                except UNREADABLE:
                    continue
                r = records.get((h.harness, h.run_id))
                if r is not None and h.seq <= upto:
                    # A line `head_of` refuses was skipped and counted by the first pass.
                    obj = decode_line(raw)
                    if obj is not None:
                        r.apply(obj)
    # Both passes keep the same lines, so a record with none (seq still 0) lost its file
    # between them to a prune: `scan` reads again.
    return [r for r in records.values() if r.seq]
