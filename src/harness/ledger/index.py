"""The in-memory index of recent records (SPEC-0022 REQ-15): what the daemon answers from.

It holds every record whose first line falls in the last `window` (7 days), at
least the newest `tail` (20) records of each harness it has seen, and every open
record whatever its age. Invariant (the floors): every record with seq ≥
``floor`` is present and fully folded, and for a harness h every record of h with
seq ≥ ``harness_floor[h]`` is; a harness with no floor of its own (any other name, one
never seen included) has every record of it present. So whatever lets a record go, or
learns of one it never held, gives its harness a floor: the boot for each harness the
older files hold unloaded records of, a trim for each it drops records of, a live late
line for its own. `query` answers only when those floors prove the answer complete and
otherwise says so, so the caller reads the files instead.
Not thread-safe by itself: the ledger serialises access with its lock.
"""

from __future__ import annotations

import heapq
import sys
from collections import Counter
from collections.abc import Iterable
from typing import Any

from ..timefmt import format_ns, parse_ns
from .fold import Frozen, Record
from .query import Query, select

INTERNED = ("kind", "trigger", "outcome", "reason", "cost_source", "model", "source")


class Index:
    def __init__(self, *, window_ns: int, tail: int = 20) -> None:
        self.window_ns = window_ns
        self.tail = tail
        self.records: dict[tuple[str, int], Record | Frozen] = {}
        self.floor = 1  # every record with seq >= floor is here
        self.floor_at = ""  # records started at/after this instant have seq >= floor
        self.harness_floor: dict[str, int] = {}
        self.max_ids: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self.records)

    def apply(self, line: dict[str, Any], *, live: bool = False,
              carried: bool = False) -> Record:
        """Fold a committed (or loaded) line into its record.

        `live` (a line just committed, not one loaded from the files): a closed or updated
        line, or a prune's `carried` opened line, of a record memory does not hold, with a
        run id the ledger has already seen, belongs to a record it trimmed or never
        loaded. Whether that record's first lines are still on disk (then it is older than
        the floors) or were pruned (then this line starts a partial record) only the files
        can say, so it is folded for the caller but not kept, and the floors rise past it:
        queries that reach it read the files.

        Any other opened line starts a record, whatever its run id: ids are allocated
        before the opened line is written, so a run held under on_overlap = "queue" opens
        after the records of higher ids decided meanwhile (and a legacy import writes
        runs in time order, not id order). Only a prune's carry writes an opened line for
        a record that already has one, and only for a record memory held, open, when the
        carry read it; the line is not kept if memory let the record go since (it closed
        and was trimmed before the line was committed). A new run id is likewise a new
        record, partial or not."""
        h, rid = line["harness"], line["run_id"]
        key = (h, rid)
        found = self.records.get(key)
        typ = line["type"]
        if (found is None and live and rid <= self.max_ids.get(h, 0)
                and (typ in ("closed", "updated") or (typ == "opened" and carried))):
            late = Record(h, rid)
            late.apply(line)
            above = line["seq"] + 1
            self.floor = max(self.floor, above)
            self.harness_floor[h] = max(self.harness_floor.get(h, above), above)
            self.floor_at = max(self.floor_at, format_ns(parse_ns(line["at"]) + 1))
            return late
        if found is None:
            h = sys.intern(h)
            r = Record(h, rid)
            if rid > self.max_ids.get(h, 0):
                self.max_ids[h] = rid
        else:
            r = found.thaw() if isinstance(found, Frozen) else found
        for k in INTERNED:  # the same few words on every record: share them
            v = line.get(k)
            if v is not None and type(v) is str:
                line[k] = sys.intern(v)
        r.apply(line)
        self.store(key, r)
        return r

    def store(self, key: tuple[str, int], r: Record) -> None:
        # Closed records rest compact; open ones stay live for the lines still to come.
        self.records[key] = Frozen(r) if r.closed else r

    def get(self, harness: str, run_id: int) -> Record | Frozen | None:
        return self.records.get((harness, run_id))

    def open_records(self) -> list[Record]:
        return sorted((r for r in self.records.values() if isinstance(r, Record) and r.is_open),
                      key=lambda r: r.seq)

    def floor_of(self, harness: str) -> int:
        """Every record of `harness` with this seq or above is here (1: all of them)."""
        return min(self.harness_floor.get(harness, 1), self.floor)

    def query(self, q: Query) -> tuple[list[Record | Frozen], int | None, bool]:
        """Answer from memory: (records, oldest seq, complete). Incomplete: read the files."""
        hits, _ = select(Query(q.names, q.since_ns, q.until_ns, q.outcomes, q.triggers, None,
                               q.before_seq), self.records.values())
        fl = self.floor
        if q.names:
            fl = max(self.floor_of(n) for n in q.names)
        if fl > 1:
            above = [r for r in hits if r.seq >= fl]
            if q.limit is not None and len(above) >= q.limit:
                hits = above
            elif not (q.since is not None and self.floor_at and q.since >= self.floor_at):
                return [], None, False
        if q.limit is not None:
            hits = hits[: q.limit]
        return hits, (hits[-1].seq if hits else None), True

    def trim(self, now_ns: int) -> int:
        """Drop closed records older than the window beyond each harness's tail; raise floors."""
        start = format_ns(now_ns - self.window_ns)
        per: dict[str, list[Record | Frozen]] = {}
        for r in self.records.values():
            per.setdefault(r.harness, []).append(r)
        dropped = 0
        top = 0  # the highest seq dropped
        for h, recs in per.items():
            recs.sort(key=lambda r: r.seq, reverse=True)
            before = self.floor_of(h)
            gone = 0
            for r in recs[self.tail :]:
                if r.closed and r.first_at < start:
                    del self.records[(h, r.run_id)]
                    gone += 1
                    top = max(top, r.seq)
            if gone:
                # The newest records of h down to the oldest one kept without a gap (none
                # kept, with a tail of 0: above the newest).
                block = recs[0].seq + 1
                for r in recs:
                    if (h, r.run_id) not in self.records:
                        break
                    block = r.seq
                self.harness_floor[h] = max(before, block)
                dropped += gone
        if dropped:
            # The floor must clear every record dropped here. It used to be raised only to
            # the oldest record left in the window, and not at all when the window held
            # none: memory then claimed records it had just dropped were there, and
            # answered queries without them.
            self.floor = max(self.floor, top + 1)
            self.floor_at = max(self.floor_at, start)
        return dropped


class NewestPicker:
    """The boot's pick, in one pass over the envelopes of the files older than the window,
    of each harness's newest records there: enough that memory holds `tail` of each
    harness (REQ-15) when the window holds fewer. Bounded: at most `tail` run ids are
    kept per harness, whatever the files hold.

    Run ids rise per harness and are never reused, so a line whose run id is at or below
    the highest one let go belongs to a record passed over. A harness in `full` is not
    picked from: the caller names each one a line of an unloaded record of it is seen for
    in `unpicked`. Invariant: every record of harness h on disk and not picked (nor loaded
    otherwise) has a seq below ``floors(floor)[h]``, and a harness `floors` does not name
    has none (conservatively: a passed-over record's late line raises the floor too, since
    an orphan line whose opened line was pruned cannot be told from it without
    remembering every run id).
    """

    def __init__(self, tail: int, held: Iterable[tuple[str, int]]) -> None:
        self.tail = tail
        self._held = Counter(h for h, _ in held)  # the window's records per harness
        self.full = {h for h, n in self._held.items() if n >= tail}
        self.unpicked: set[str] = set()  # the harnesses of `full` with records passed over
        # Per harness, each picked run id -> (the lowest seq seen, the first file holding it)
        self._firsts: dict[str, dict[int, tuple[int, int]]] = {}
        self._heaps: dict[str, list[int]] = {}
        self._cut: dict[str, int] = {}  # the highest run id let go
        self._passed: dict[str, int] = {}  # the highest seq of a record let go

    def see(self, harness: str, run_id: int, seq: int, file: int) -> None:
        """One envelope, read from the `file`th file, in file order; the caller skips
        harnesses in `full`."""
        firsts = self._firsts.get(harness)
        if firsts is None:
            firsts = self._firsts[harness] = {}
            self._heaps[harness] = []
        got = firsts.get(run_id)
        if got is not None:
            if seq < got[0]:  # a clock stepped back put a lower seq in a later file
                firsts[run_id] = (seq, got[1])
            return
        if run_id <= self._cut.get(harness, 0):
            self._pass(harness, seq)
            return
        firsts[run_id] = (seq, file)
        heap = self._heaps[harness]
        heapq.heappush(heap, run_id)
        if len(heap) > self.tail - self._held[harness]:
            gone = heapq.heappop(heap)  # above every id let go before: the cut only rises
            self._cut[harness] = gone
            self._pass(harness, firsts.pop(gone)[0])

    def _pass(self, harness: str, seq: int) -> None:
        if seq > self._passed.get(harness, 0):
            self._passed[harness] = seq

    def keys(self) -> set[tuple[str, int]]:
        return {(h, rid) for h, firsts in self._firsts.items() for rid in firsts}

    def first_file(self) -> int:
        """The first file holding a line of a picked record (a large number: none)."""
        return min((file for firsts in self._firsts.values() for _seq, file in firsts.values()),
                   default=sys.maxsize)

    def floors(self, floor: int) -> dict[str, int]:
        """Per harness with records in the files: memory, once the picked records are
        folded, holds every record of it from this seq up (1: all of them). `floor` is
        the ledger-wide one, below which lie the records of `unpicked` passed over."""
        out = {h: self._passed.get(h, 0) + 1 for h in self._firsts}
        out.update(dict.fromkeys(self.unpicked, floor))
        return out
