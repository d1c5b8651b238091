"""Reading the run ledger from its files: the offline `harness runs` and the index's fallback.

Invariants: read-only (nothing is created, changed or pruned — REQ-16); memory is
bounded by the number of records in range, not the number of lines or bytes:
a first pass decodes only the few envelope fields a query filters on, a second
pass folds whole lines only for the records the query returns. Unparseable lines
and torn fragments are skipped and counted, never raised.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import msgspec

from ..timefmt import canon, format_ns
from .dayfiles import iter_chunks, list_day_files
from .fold import Record
from .query import Query, select
from .schema import LINE_TYPES

_DAY_NS = 86_400 * 1_000_000_000


class _Head(msgspec.Struct):
    """The envelope and the three fields queries filter on; all else is skipped unread."""

    seq: int
    type: str
    at: str
    harness: str
    run_id: int
    started_at: str | None = None
    outcome: str | None = None
    trigger: str | None = None


_head = msgspec.json.Decoder(_Head)
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


def valid_line(obj: Any) -> bool:
    """Whether a decoded value is a run-ledger line a reader may fold."""
    if type(obj) is not dict:
        return False
    seq, run_id, h = obj.get("seq"), obj.get("run_id"), obj.get("harness")
    return (
        type(seq) is int
        and seq > 0
        and type(run_id) is int
        and run_id > 0
        and type(h) is str
        and h != ""
        and obj.get("type") in _TYPES
        and type(obj.get("at")) is str
    )


class _Light:
    """A record reduced to what filters need, for the first pass."""

    __slots__ = (
        "closed",
        "fileno",
        "first_at",
        "harness",
        "last_seq",
        "opened",
        "outcome",
        "run_id",
        "seq",
        "started",
        "trigger",
    )

    def __init__(self, h: _Head, fileno: int) -> None:
        self.harness = h.harness
        self.run_id = h.run_id
        self.seq = h.seq
        self.last_seq = 0
        self.first_at = h.at
        self.fileno = fileno
        self.opened = self.closed = False
        self.started = self.outcome = self.trigger = None

    @property
    def started_key(self) -> str:
        return canon(self.started) or canon(self.first_at) or ""


def _files_for(directory: str, q: Query, stats: ReadStats) -> list[tuple[str, str]]:
    listing = list_day_files(directory)
    stats.strays = listing.strays
    days = listing.days
    if q.since_ns is not None:
        # A record's lines sit in the day files of their own `at`, on or after its start;
        # a day of slack covers a start stamped just before midnight and written after.
        first = format_ns(q.since_ns - _DAY_NS)[:10]
        days = [d for d in days if d[0] >= first]
    return days


def _decode_heads(lines: list[bytes], stats: ReadStats) -> Iterator[_Head]:
    for raw in lines:
        if not raw:
            continue
        stats.lines += 1
        try:
            h = _head.decode(raw)
        except (msgspec.DecodeError, msgspec.ValidationError):
            stats.skipped += 1
            continue
        if h.seq <= 0 or h.run_id <= 0 or not h.harness or h.type not in _TYPES:
            stats.skipped += 1
            continue
        yield h


def scan(directory: str, q: Query, *, offline: bool = True) -> tuple[list[Record], int | None,
                                                                     ReadStats]:
    """Answer `q` from the day files alone."""
    stats = ReadStats()
    files = _files_for(directory, q, stats)
    stats.files = len(files)
    lights: dict[tuple[str, int], _Light] = {}
    names = frozenset(q.names)
    gc_was = gc.isenabled()
    gc.disable()  # millions of short-lived objects and no cycles: collection is pure cost
    try:
        for fileno, (_day, path) in enumerate(files):
            for _first, lines, torn in iter_chunks(path):
                if torn:
                    stats.torn += 1
                    continue
                for h in _decode_heads(lines, stats):
                    if names and h.harness not in names:
                        continue
                    key = (h.harness, h.run_id)
                    r = lights.get(key)
                    if r is None:
                        r = lights[key] = _Light(h, fileno)
                    elif h.seq < r.seq:
                        r.seq, r.first_at = h.seq, h.at
                        r.fileno = min(r.fileno, fileno)
                    t = h.type
                    if t == "opened":
                        r.opened = True
                    elif t != "updated":
                        r.closed = True
                        if t == "decided":
                            r.opened = True
                    if h.seq >= r.last_seq:
                        r.last_seq = h.seq
                        if h.started_at is not None:
                            r.started = h.started_at
                        if h.outcome is not None:
                            r.outcome = h.outcome
                        if h.trigger is not None:
                            r.trigger = h.trigger
                    else:  # an older line read late only fills gaps
                        r.started = r.started or h.started_at
                        r.outcome = r.outcome or h.outcome
                        r.trigger = r.trigger or h.trigger
        chosen = _choose(q, lights.values())
        records = _fold_chosen(files, chosen, stats)
    finally:
        if gc_was:
            gc.enable()
    hits, oldest = select(q, records)
    return hits, oldest, stats


class _Probe:
    """What `Query.matches` needs, shaped like a `Record`, built from a `_Light`."""

    __slots__ = ("fields", "harness", "outcome", "run_id", "seq", "started_key")

    def __init__(self, r: _Light) -> None:
        self.harness = r.harness
        self.run_id = r.run_id
        self.seq = r.seq
        self.outcome = r.outcome if r.closed else "running"
        self.fields = {"trigger": r.trigger}
        self.started_key = r.started_key


def _choose(q: Query, lights: Any) -> dict[tuple[str, int], int]:
    """The records the query returns, by key, with the first file holding their lines."""
    probes = []
    cheap = q.since is None and q.until is None and not q.outcomes and not q.triggers
    for r in lights:
        if q.before_seq is not None and r.seq >= q.before_seq:
            continue
        if cheap:
            probes.append(r)
        else:
            p = _Probe(r)
            if q.matches(p):  # type: ignore[arg-type]
                probes.append(r)
    probes.sort(key=lambda r: r.seq, reverse=True)
    if q.limit is not None:
        probes = probes[: q.limit]
    return {(r.harness, r.run_id): r.fileno for r in probes}


def _fold_chosen(files: list[tuple[str, str]], chosen: dict[tuple[str, int], int],
                 stats: ReadStats) -> list[Record]:
    if not chosen:
        return []
    records = {k: Record(*k) for k in chosen}
    start = min(chosen.values())
    for _day, path in files[start:]:
        for _first, lines, torn in iter_chunks(path):
            if torn:
                continue
            for raw in lines:
                if not raw:
                    continue
                try:
                    h = _head.decode(raw)
                except (msgspec.DecodeError, msgspec.ValidationError):
                    continue
                r = records.get((h.harness, h.run_id))
                if r is None or h.type not in _TYPES or h.seq <= 0:
                    continue
                obj = _full.decode(raw)
                if valid_line(obj):
                    r.apply(obj)
    return list(records.values())
