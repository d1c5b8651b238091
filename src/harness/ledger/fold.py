"""Folding lines into records (SPEC-0022 REQ-2).

A record is the fold, in seq order, of every line with its (harness, run_id): a
later line's value replaces an earlier one field by field; a field a line does not
carry (absent or null) changes nothing. Invariants: the record's ``seq`` is the seq
of its first line; fields a reader does not know are dropped, never errors; an
``opened`` line makes the record started, ``closed``/``decided`` make it closed; a
record with lines but no ``opened``/``decided`` (its start was pruned) is partial.
Lines applied out of seq order (a backfill, a clock jump across files) still fold
as if in order: an older line only fills fields no newer line has set. A record as JSON
reads ``log_pruned`` only when its log is a per-run log (a resident's durable log never
is) and that file is gone, the file found by logref.py. `Merge` folds a run's lines in
seq order by merging them whole (the boot's pass over the window), to the same record
`Record.apply` makes of them, frozen as the index freezes it.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import msgspec

from ..timefmt import canon
from .logref import log_file
from .schema import RECORD_FIELDS


class Record:
    """The folded state of one run."""

    __slots__ = (
        "_field_seq",
        "closed",
        "fields",
        "first_at",
        "harness",
        "last_day",
        "last_seq",
        "opened",
        "opened_at",
        "run_id",
        "seq",
    )

    def __init__(self, harness: str, run_id: int) -> None:
        self.harness = harness
        self.run_id = run_id
        self.seq = 0  # the first line's seq
        self.last_seq = 0
        self.first_at = ""  # `at` of the first line
        self.opened_at = ""  # `at` of the newest opened line (its day file holds it)
        # The day of the newest `at` of any line: the last day file holding a line of the
        # run. Interned: records share the few days there are.
        self.last_day = ""
        self.opened = False
        self.closed = False
        self.fields: dict[str, Any] = {}
        # The seq of the line that set each field. Kept from the first line on: a late
        # line must know which fields a *newer* line set, and that cannot be rebuilt
        # afterwards (assuming every field was set at last_seq let an older value
        # beat a late line that is newer than the field's real setter).
        self._field_seq: dict[str, int] = {}

    @property
    def is_open(self) -> bool:
        return self.opened and not self.closed

    def copy(self) -> Record:
        """An independent copy, to fold lines into without touching this record (the
        shutdown's look at lines still queued, which the index must not see yet)."""
        r = Record(self.harness, self.run_id)
        r.seq, r.last_seq, r.first_at, r.opened_at = (self.seq, self.last_seq, self.first_at,
                                                      self.opened_at)
        r.opened, r.closed, r.last_day = self.opened, self.closed, self.last_day
        r.fields = dict(self.fields)
        r._field_seq = dict(self._field_seq)
        return r

    def apply(self, line: dict[str, Any]) -> None:
        """Fold one parsed line (already known to belong to this record) into it."""
        seq = line["seq"]
        typ = line.get("type")
        at = line.get("at", "")
        if self.seq == 0 or seq < self.seq:
            self.seq = seq
            self.first_at = at
        if at[:10] > self.last_day:
            self.last_day = sys.intern(at[:10])
        if typ == "opened":
            self.opened = True
            if line.get("at", "") >= self.opened_at:
                self.opened_at = line.get("at", "")
        elif typ in ("closed", "decided"):
            self.closed = True
            if typ == "decided":
                self.opened = True  # a decided record is whole: not partial
        fields = self.fields
        fs = self._field_seq
        if seq >= self.last_seq:
            for k, v in line.items():
                if v is not None and k in RECORD_FIELDS:
                    fields[k] = v
                    fs[k] = seq
            self.last_seq = seq
            return
        # An older line arriving late: keep every value a newer line set.
        for k, v in line.items():
            if v is not None and k in RECORD_FIELDS and fs.get(k, 0) < seq:
                fields[k] = v
                fs[k] = seq

    @property
    def started_key(self) -> str:
        """The instant --since/--until filter on (canonical): started_at, else the first at."""
        return canon(self.fields.get("started_at")) or canon(self.first_at) or ""

    @property
    def outcome(self) -> str | None:
        if not self.closed:
            return "running"
        return self.fields.get("outcome")

    @property
    def trigger(self) -> str | None:
        return self.fields.get("trigger")

    def to_json(self, *, offline: bool = False, check_log: bool = True,
                probe: LogProbe | None = None) -> dict[str, Any]:
        """The record as `harness runs --json` and the runs op print it."""
        return _as_json(self.harness, self.run_id, self.seq, self.closed, self.fields,
                        offline, check_log, probe)


class LogProbe:
    """Whether a closed record's log is gone (`log_pruned`), for one answer's records.

    keep_runs deletes per-run logs (a resident's durable log is never asked about), and a
    compressed log (`<log>.zst`) is not pruned. One
    directory listing per log directory instead of two stat calls per record: an answer
    of 1,000 records reads a handful of directories. Built per answer, so it is never
    staler than the answer itself. `state` is the state dir holding the ledger the
    records come from: a log path the ledger stored cut is found from it (logref.py);
    without it such a record is never said to be pruned.
    """

    __slots__ = ("_dirs", "state")

    def __init__(self, state: str | None = None) -> None:
        self.state = state
        self._dirs: dict[str, frozenset[str] | None] = {}

    def gone(self, log: str) -> bool:
        d, base = os.path.split(log)
        if d not in self._dirs:
            try:
                self._dirs[d] = frozenset(os.listdir(d or "."))
            except (FileNotFoundError, NotADirectoryError):
                self._dirs[d] = frozenset()  # no directory: none of its logs is left
            except OSError:
                self._dirs[d] = None  # unlistable: ask about the file itself
        names = self._dirs[d]
        if names is None:
            return _log_gone(log)
        return base not in names and base + ".zst" not in names


def _log_gone(log: str) -> bool:
    """One record's question, asked of the file system directly (two stats, no listing)."""
    return not os.path.exists(log) and not os.path.exists(log + ".zst")


def _as_json(harness: str, run_id: int, seq: int, closed: bool, fields: dict[str, Any],
             offline: bool, check_log: bool, probe: LogProbe | None = None
             ) -> dict[str, Any]:
    out: dict[str, Any] = {"harness": harness, "run_id": run_id, "seq": seq}
    out.update(fields)
    out.pop("log_pruned", None)
    if not closed:
        out["outcome"] = "running?" if offline else "running"
    # REQ-4's log_pruned is about a per-run log, the only kind keep_runs deletes: a
    # resident's `log` is its durable log, which nothing prunes, so one gone (removed or
    # rotated away by its operator) is not a pruned log and is not said to be.
    if check_log and closed and out.get("log") and out.get("kind") != "resident":
        # The file the record's log is, not the field as stored: a cut path names no file,
        # and would read as pruned while the log is on disk. None: cannot tell, so not said.
        log = log_file(out, probe.state if probe is not None else None)
        if log is not None and (probe.gone(log) if probe is not None else _log_gone(log)):
            out["log_pruned"] = True
    return out


_pack = msgspec.json.Encoder()
_unpack = msgspec.json.Decoder()


class Frozen:
    """A closed record at rest: what queries filter on, plus its fields as compact JSON.

    The in-memory index holds tens of thousands of closed records; a dict of fields per
    record costs several times the bytes of the same fields encoded. A line that arrives
    for a frozen record thaws it (`thaw`), and the index freezes it again once folded.
    """

    __slots__ = ("_blob", "_older", "first_at", "harness", "last_day", "last_seq", "opened",
                 "opened_at", "outcome", "run_id", "seq", "started_key", "trigger")
    closed = True
    is_open = False

    def __init__(self, r: Record) -> None:
        last = r.last_seq
        self._set(r.harness, r.run_id, r.seq, last, r.last_day, r.first_at, r.opened_at,
                  r.opened, r.fields, [last - r._field_seq.get(k, last) for k in r.fields])

    def _set(self, harness: str, run_id: int, seq: int, last_seq: int, last_day: str,
             first_at: str, opened_at: str, opened: bool, fields: dict[str, Any],
             ages: list[int]) -> None:
        """Fill in the closed record these parts make (a `Record`'s, or a `Merge`'s, which
        builds none): one place says what a frozen record keeps."""
        self.harness = harness
        self.run_id = run_id
        self.seq = seq
        self.last_seq = last_seq
        self.last_day = last_day
        self.first_at = first_at
        self.opened_at = opened_at
        self.opened = opened
        # As `Record.outcome`, `trigger` and `started_key` read a closed record.
        # Interned: the same few words on tens of thousands of records.
        outcome = fields.get("outcome")
        self.outcome = sys.intern(outcome) if type(outcome) is str else outcome
        trigger = fields.get("trigger")
        self.trigger = sys.intern(trigger) if type(trigger) is str else trigger
        self.started_key = canon(fields.get("started_at")) or canon(first_at) or ""
        self._blob = _pack.encode(fields)
        # `ages`: how many seqs before the last line each field was set, in the fields'
        # order, kept unless all are 0 (the last line set them all): a late line (a clock
        # stepped back, read from a later day's file) must still lose only to a newer
        # setter. Small numbers in one list: the index holds tens of thousands of these.
        self._older = _pack.encode(ages) if any(ages) else None

    @property
    def fields(self) -> dict[str, Any]:
        return _unpack.decode(self._blob)

    def thaw(self) -> Record:
        """The record, live again, each field dated by the line that set it."""
        r = Record(self.harness, self.run_id)
        r.seq, r.last_seq, r.first_at, r.opened_at = (self.seq, self.last_seq, self.first_at,
                                                       self.opened_at)
        r.last_day = self.last_day
        r.opened, r.closed = self.opened, True
        r.fields = self.fields
        if self._older is None:
            r._field_seq = dict.fromkeys(r.fields, self.last_seq)
        else:
            r._field_seq = {k: self.last_seq - age
                            for k, age in zip(r.fields, _unpack.decode(self._older), strict=True)}
        return r

    def to_json(self, *, offline: bool = False, check_log: bool = True,
                probe: LogProbe | None = None) -> dict[str, Any]:
        return _as_json(self.harness, self.run_id, self.seq, True, self.fields, offline,
                        check_log, probe)


class Merge:
    """A record folded by merging its lines' fields whole, for a reader that folds very
    many lines (the boot): what `Record.apply` of the same lines gives, at a `dict.update`
    per line in C instead of a Python step per field.

    Each line comes as its seq, type and `at`, and a dict of its record fields alone (no
    envelope, no chain, no field a reader does not know) with no null among them (a null
    changes nothing in a fold, where a merge would store it). It holds while every line
    is a valid line (`reader.decode_line`'s) of this one run, and no seq falls below the
    last one added (`last_seq`): then each field holds the value of the last line carrying
    it, in the order each was first set, as `Record.apply` keeps them. The dicts are
    taken over, not copied.
    """

    __slots__ = ("first_at", "last_seq", "merged", "opened", "opened_at", "seq", "seqs",
                 "top_at")

    def __init__(self, fields: dict[str, Any], seq: int, typ: str, at: str) -> None:
        self.seq = self.last_seq = seq
        self.first_at = self.top_at = at
        self.merged = fields
        # The seq of the last line carrying each field, when that is not the first line
        # (most of a run's fields are set once, by its opened line).
        self.seqs: dict[str, int] = {}
        # As `Record.apply`: a decided record is whole, and only an opened line is dated.
        self.opened = typ == "opened" or typ == "decided"
        self.opened_at = at if typ == "opened" else ""

    def add(self, fields: dict[str, Any], seq: int, typ: str, at: str) -> None:
        """One more line, its seq at or above `last_seq`."""
        self.merged.update(fields)
        self.seqs.update(dict.fromkeys(fields, seq))
        self.last_seq = seq
        if at > self.top_at:
            self.top_at = at
        if typ == "opened":
            self.opened = True
            if at >= self.opened_at:
                self.opened_at = at
        elif typ == "decided":
            self.opened = True

    def _last_day(self) -> str:
        # The newest day of any line: the latest `at` begins with it (of two strings, the
        # one that sorts last has the prefix that sorts last).
        return sys.intern(self.top_at[:10])

    def frozen(self, harness: str, run_id: int) -> Frozen:
        """The record, closed (its last line closed it), as the index keeps it. Once."""
        fields = self.merged
        last = self.last_seq
        first = self.seq
        seqs = self.seqs.get
        f = Frozen.__new__(Frozen)
        f._set(harness, run_id, first, last, self._last_day(), self.first_at,
               self.opened_at, self.opened, fields, [last - seqs(k, first) for k in fields])
        return f

    def record(self, harness: str, run_id: int) -> Record:
        """The record, not closed (no line added closed it). Once."""
        fields = self.merged
        r = Record(harness, run_id)
        r.seq, r.last_seq, r.first_at, r.opened_at = (self.seq, self.last_seq, self.first_at,
                                                      self.opened_at)
        r.last_day, r.opened = self._last_day(), self.opened
        r.fields = fields
        r._field_seq = {k: self.seqs.get(k, self.seq) for k in fields}
        return r
