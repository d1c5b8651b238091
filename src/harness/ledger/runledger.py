"""The run ledger (SPEC-0022): the journal the daemon writes every run through.

It puts the engine together for runs: `prepare_line` (schema, scrub, caps) → the
single `Writer` (seq, chain, day file by each line's UTC `at`, durability) → on
commit, the `Index` and the ring behind `since`, then the `Feed`. Data flows one
way. Invariants: a line is visible to queries, `since` and subscribers only once
it is durable (REQ-7's closing passes alone also count lines still queued, through
`open_records(queued=True)` and `enqueue_closing`, so no run is closed twice); the
index and ring are touched only under `_lock`; `seq` continues from the highest
parseable seq on disk and never repeats; every record that was ever opened and not
closed is known at open (REQ-7 needs them all), whatever its age.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import gc
import heapq
import logging
import os
import re
import threading
from collections.abc import Callable, Container, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from .. import paths
from ..timefmt import canon, day_start_ns, format_ns, now_ns, utc_day
from .chain import ZERO_HASH, line_verifies, link_to, seal_line
from .dayfiles import (
    CHAIN_FILE,
    CHUNK,
    IMPORTED_FILE,
    day_path,
    iter_chunks,
    list_day_files,
    read_tail,
)
from .errors import LedgerCorrupt, LedgerInUse, LineTooLong
from .feed import Committed, Feed, Subscription
from .files import FileLayer, clear_leftovers, found_parents, hold_dir, make_durable_dirs
from .fold import Frozen, LogProbe, Record
from .index import Index, NewestPicker
from .load import load_files
from .query import Query
from .reader import Head, ReadStats, decode_line, head_blocks, head_of, heads, scan
from .retention import PruneResult, prune
from .schema import RECORD_FIELDS, Cuts, fit_line, prepare_line, ready_to_encode, writable
from .verify import read_chain_file
from .writer import Entry, Writer

log = logging.getLogger("harness.ledger")

DAY_NS = 86_400 * 1_000_000_000
WINDOW_NS = 7 * DAY_NS
RING = 10_000
# The first read of a day file by a reader after its first lines only (its first seq;
# the opened lines below a seq a prune looks for): room for a few lines.
_PEEK = 1 << 16
# The boot's bound on records tracked while it looks for those still open.
_LIVE_CAP = 100_000
# The writer's tag on a prune's carried-forward lines: an opened line so tagged restates a
# record memory held, where any other opened line starts one (`Index.apply`).
_CARRIED = "carried"


def _outlived(r: Record | Frozen, day: str) -> bool:
    """Whether ended record `r` has a line in a later file than `day`'s (a clock stepped
    back across midnight put its closing line in `day`'s file after a line in the next
    day's): with that day's file gone, the lines left would read open, whichever type
    they are (an opened line, a usage update), so its closing line is carried."""
    return r.closed and r.last_day > day


class _DaySealer:
    """Seals run-ledger lines and routes each to the day file of its UTC `at`."""

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def seal(self, obj: dict[str, Any], seq: int, prev: str) -> tuple[bytes, str, str]:
        data, digest = seal_line(obj, seq, prev, ready_to_encode)
        return data, digest, day_path(self.directory, obj["at"][:10])


@dataclass
class LedgerStats:
    """What `harness doctor` and /metrics report about the ledger."""

    dir: str
    next_seq: int
    queued: int
    append_errors: int
    last_error: str | None
    degraded: bool
    skipped: int
    torn: int
    truncated: int
    redactions: int
    pruned: int
    carried_forward: int
    bytes: int
    oldest_day: str | None
    feed_missed: dict[str, int]
    records_in_memory: int


class RunLedger:
    """Open a run ledger directory for writing; one per daemon."""

    def __init__(
        self,
        directory: str,
        *,
        files: FileLayer | None = None,
        clock: Callable[[], int] = now_ns,
        window_ns: int = WINDOW_NS,
        tail: int = 20,
        sync_timeout: float = 2.0,
        flush_every: float = 30.0,
        retry_min: float = 0.25,
        retry_max: float = 30.0,
        retention_ns: int = 90 * DAY_NS,
        max_bytes: int = 256 * 1024 * 1024,
    ) -> None:
        self.directory = directory
        # Where this ledger's runs keep their logs (REQ-1: the ledger is <state>/ledger).
        self.state_dir = paths.state_of_ledger(directory)
        self.clock = clock
        self.retention_ns = retention_ns
        self.max_bytes = max_bytes
        self._lock = threading.RLock()
        self._index = Index(window_ns=window_ns, tail=tail)
        self._ring: collections.deque[dict[str, Any]] = collections.deque(maxlen=RING)
        self._feed = Feed()
        self._truncated = 0
        self._redactions = 0
        self._skipped = 0
        self._torn = 0
        self._pruned = 0
        self._carried = 0
        self._trimmed_day = 0
        # The highest seq committed to each day file, and what a carry-forward saw of it:
        # a prune deletes a file only when the two agree (`_quiet`).
        self._path_commits: dict[str, int] = {}
        self._carry_marks: dict[str, int] = {}
        # Lines committed while a prune's refold reads the files, one list per refold
        # under way: replayed before its swap, however many there were.
        self._captures: dict[int, list[dict[str, Any]]] = {}
        made = make_durable_dirs(directory, (files or FileLayer()).sync_dir)
        self.created = bool(made)
        # One writer per ledger (SPEC-0022): a second daemon on the same state directory
        # would issue the same seqs. Held until close; readers take no lock.
        held = hold_dir(directory)
        if held is None:
            raise LedgerInUse(f"the ledger {directory} is held by another process (another "
                              "harness daemon on the same state directory?)")
        if held < 0:
            log.warning("ledger: %s cannot be locked on this file system; a second daemon "
                        "on the same state directory would not be stopped", directory)
        self._held = held
        if held >= 0:
            # Ours alone now: a CHAIN (a prune's) or import marker replacement that a
            # kill left half made goes.
            try:
                left = clear_leftovers(directory, f"{re.escape(CHAIN_FILE)}|"
                                                  f"{re.escape(IMPORTED_FILE)}")
            except OSError as exc:
                log.warning("ledger: cannot clear leftovers in %s: %s", directory, exc)
            else:
                if left:
                    log.warning("ledger: removed %s, left half made by a process that was "
                                "killed", ", ".join(left))
        try:
            next_seq, head, head_file = self._recover()
            next_seq, head = self._load(window_ns, next_seq, head)
            self._committed = next_seq - 1  # everything on disk at open counts as durable
            self._writer = Writer(
                _DaySealer(directory),
                next_seq=next_seq,
                head_hash=head,
                files=files,
                on_commit=self._commit,
                sync_timeout=sync_timeout,
                flush_every=flush_every,
                retry_min=retry_min,
                retry_max=retry_max,
                # `harness/` holds the entry of `ledger/`, the state dir that of `harness/`.
                ancestors=found_parents(directory, 2, made),
                settle=head_file,
            )
        except BaseException:
            if held >= 0:
                os.close(held)
            raise

    # -- boot --------------------------------------------------------------------------

    def _recover(self) -> tuple[int, str, str | None]:
        """The next seq and the chain head, from the tails of every day file, and the file
        that holds the head (a daemon killed while writing may have left it unsynced)."""
        best: tuple[int, str] = (0, ZERO_HASH)
        head_file: str | None = None
        try:
            chain = read_chain_file(self.directory)
        except ValueError as exc:  # REQ-20: damaged ledger data is LedgerCorrupt
            raise LedgerCorrupt(str(exc)) from None
        if chain is not None:
            best = chain
        tails = []
        for _day, path in list_day_files(self.directory).days:
            t = read_tail(path)
            tails.append((path, t))
            if t.last_seq is not None and t.last_seq > best[0]:
                best = (t.last_seq, link_to(t.last_hash))
                head_file = path
            if t.damaged_seq is not None and t.damaged_seq > best[0]:
                # Its hash is unreadable: what follows cannot link to it, and verify
                # names the break there whatever prev the next line carries.
                log.warning("ledger: %s: the line of seq %d has a damaged hash; "
                            "continuing after it", path, t.damaged_seq)
                best = (t.damaged_seq, ZERO_HASH)
                head_file = path
        for path, t in tails:
            if t.torn is None:
                continue
            if not t.ends_in_whole_line():
                self._torn += 1  # a crash fragment, which every reader skips
                continue
            # A whole value missing only its "\n" is a line to every reader (and to the
            # window's pass below), not a torn fragment. One that is the next sealed line
            # was fully written: adopt it, so its seq is never issued twice.
            obj = decode_line(t.torn)
            # Its hash is checked as verify checks it (over the canonical bytes), so a
            # line verify would call a break is never adopted, nor one it accepts left out.
            if (obj is not None and obj["seq"] == best[0] + 1 and obj.get("prev") == best[1]
                    and line_verifies(t.torn, obj)):
                log.warning("ledger: %s ends in a complete line without its newline; kept", path)
                best = (obj["seq"], obj["hash"])
                head_file = path
                # Terminate it now, before the writer starts (still one writer): the file
                # again holds only complete lines, whatever reads it next.
                try:
                    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC
                                 | os.O_NOFOLLOW)
                    try:
                        os.write(fd, b"\n")
                        os.fsync(fd)
                    finally:
                        os.close(fd)
                except OSError as exc:  # the writer still starts its next line with "\n"
                    log.warning("ledger: cannot terminate the last line of %s: %s", path, exc)
        return best[0] + 1, best[1], head_file

    def _load(self, window_ns: int, next_seq: int, head: str) -> tuple[int, str]:
        """Fold the window's files into the index and find every open record, however old.

        Returns the next seq and the chain head: those `_recover` found in the files'
        last lines, unless a line inside a file holds a higher seq (a file damaged by
        hand: a line moved or copied below later ones). The boot reads every line
        anyway, and a seq on disk must never be issued again.
        """
        listing = list_day_files(self.directory)
        now = self.clock()
        first_day = utc_day(now - window_ns)
        gc_was = gc.isenabled()
        gc.disable()
        try:
            old = [(d, p) for d, p in listing.days if d < first_day]
            window = [(d, p) for d, p in listing.days if d >= first_day]
            # Every line of the window, folded a run at a time (load.py), as folding
            # them one by one with `Index.apply` would.
            loaded = load_files(self._index, (p for _d, p in window))
            self._skipped += loaded.skipped
            top: tuple[int, str] = (loaded.top_seq, loaded.top_path)  # the highest seq read
            # Every line from this seq on was written once the window had begun; a clock
            # stepped back puts some of them in an older day's file.
            first_seq = self._first_seq(window)
            in_window = self._index.records
            # Fold whole, from the old files too: every record still open (REQ-7); every
            # record with lines on both sides of the window's first day (a run across it,
            # a decided or partial record updated later), else memory holds it partial,
            # with the seq of its first window line and none of its start fields; and
            # every record with a line written after the window began (a clock stepped
            # back across its first midnight), else a closed run reads open and REQ-7
            # would close it again, and a record wholly in an older file would be missing
            # above the floor. Only envelopes are read here, and only keys are kept, with
            # the first old file holding a line of each: the fold reads from there on.
            open_old: set[tuple[str, int]] = set()
            wanted: set[tuple[str, int]] = set()
            start = len(old)
            # Each record not yet ended, in file order, with its first file: a run's lines
            # before its opened one (a carried-forward resident's) come first. Bounded: a
            # ledger of many records never ended reads every old file instead.
            live: dict[tuple[str, int], int] | None = {}
            # Every run id on disk, not only the window's: ids are never reused, and a
            # late line of an old record is told from a new record by its id.
            max_ids = self._index.max_ids
            # The lines every reader skips are skipped here too (`heads` decodes each
            # line on its own, so no line of two objects passes as two lines).
            stats = ReadStats()
            # REQ-15's "at least the newest 20 per harness": a weekly job's history, or an
            # idle harness's, is in memory from boot, not read from the files per query.
            picker = NewestPicker(self._index.tail, in_window)
            full = picker.full
            unpicked = picker.unpicked.add
            below = 0  # the highest seq of the old files before this one
            for i, (_day, path) in enumerate(old):
                above = below
                for block in heads(path, stats):
                    for e in block:
                        if e.seq <= below:
                            # A clock stepped back: a record's lines are not in file
                            # order, so its first file is not known.
                            start = 0
                        elif e.seq > above:
                            above = e.seq
                        if e.seq > top[0]:
                            top = (e.seq, path)
                        key = (e.harness, e.run_id)
                        if key in in_window:
                            wanted.add(key)
                            start = min(start, i)
                        elif first_seq is not None and e.seq >= first_seq:
                            wanted.add(key)
                            start = 0  # its lower seqs may lie in any older file
                        elif e.harness not in full:
                            picker.see(e.harness, e.run_id, e.seq, i)
                        else:
                            unpicked(e.harness)
                        new_id = e.run_id > max_ids.get(e.harness, 0)
                        if new_id:
                            max_ids[e.harness] = e.run_id
                        if e.type in ("closed", "decided"):
                            open_old.discard(key)
                            if live is not None:
                                live.pop(key, None)
                        else:
                            if e.type == "opened":
                                open_old.add(key)
                            if live is not None and key not in live:
                                # An id seen before may have lines in any earlier file (a
                                # carried opened line after its closing line, the carry
                                # having raced the close): its first file is unknown.
                                live[key] = i if new_id else 0
                                if len(live) > _LIVE_CAP:
                                    live = None
                below = above
            self._skipped += stats.skipped
            wanted |= open_old | picker.keys()
            start = min(start, picker.first_file(),
                        *(live[k] for k in open_old) if live is not None else (0,))
            if wanted:
                self._backfill_keys(old[start:], wanted)
            if top[0] >= next_seq:
                next_seq, head = top[0] + 1, self._hash_at(*top)
            if old:
                self._index.floor = first_seq if first_seq is not None else next_seq
                self._index.floor_at = format_ns(day_start_ns(window[0][0])) if window else (
                    format_ns(now))
                # Every harness with records in the old files memory did not load gets its
                # floor; any other (none there, or all loaded) is held whole.
                self._index.harness_floor.update(picker.floors(self._index.floor))
        finally:
            if gc_was:
                gc.enable()
        return next_seq, head

    def _hash_at(self, seq: int, path: str) -> str:
        """The hash of line `seq` in `path`, which a day file's last line does not reach."""
        log.warning("ledger: %s holds seq %d, above the last line of every day file: the "
                    "files were edited; continuing after it", path, seq)
        for e, raw in self._envelopes(path):
            if e.seq == seq:
                obj = decode_line(raw)
                if obj is not None:
                    return link_to(obj.get("hash"))
        return ZERO_HASH  # a line with no hash: the chain breaks here whatever follows

    def _first_seq(self, files: list[tuple[str, str]]) -> int | None:
        for _day, path in files:
            for e, _raw in self._envelopes(path, first=_PEEK):
                return e.seq
        return None

    def _backfill_keys(self, files: list[tuple[str, str]], keys: set[tuple[str, int]]) -> None:
        """Fold every line of the given records from older files into the index."""
        for obj in self._lines_of(files, keys):
            self._index.apply(obj)

    def _lines_of(self, files: list[tuple[str, str]], keys: Container[tuple[str, int]],
                  upto: int | None = None, spot: Callable[[Head], None] | None = None,
                  known: Container[tuple[str, int]] = ()) -> Iterator[dict[str, Any]]:
        """The valid lines of the records `keys` in `files` (up to seq `upto`), in order;
        `spot` is shown the envelope of every other line up to `upto`, but those of the
        records `known`.

        Only each line's envelope is decoded to pick it; the whole line only when picked.
        """
        stats = ReadStats()
        for _day, path in files:
            for got, lines in head_blocks(path, stats):
                for e, raw in zip(got, lines, strict=True):
                    if upto is not None and e.seq > upto:
                        continue
                    key = (e.harness, e.run_id)
                    if key in keys:
                        obj = self._decode(raw, count=False)
                        if obj is not None:
                            yield obj
                    elif spot is not None and key not in known:
                        spot(e)

    def _file_lines(self, path: str, first: int = CHUNK) -> Iterator[bytes]:
        """Every complete line of one day file, blank ones too: a blank line is a line
        readers skip and count, in the window's pass as in `heads`. A file a prune
        deleted since it was listed (a `since` reading outside the lock) has none.
        `first`: the first read's size, for a reader that usually stops early."""
        for _first, lines, _torn in iter_chunks(path, gone_ok=True, first=first):
            yield from lines

    def _envelopes(self, path: str, first: int = CHUNK) -> Iterator[tuple[Head, bytes]]:
        """(envelope, bytes) of each complete line of one day file that readers keep.

        Read whole, a block at a time (`head_blocks`: one decode per line, the checks a
        block at a time), at half the cost of `head_of` per line: a prune reads every
        kept file this way. A reader that usually stops in the first lines (`first`)
        reads them one by one."""
        if first < CHUNK:
            for raw in self._file_lines(path, first):
                h = head_of(raw)
                if h is not None:
                    yield h, raw
            return
        for got, lines in head_blocks(path, ReadStats()):
            yield from zip(got, lines, strict=True)

    def _decode(self, raw: bytes, count: bool = True) -> dict[str, Any] | None:
        obj = decode_line(raw)
        if obj is None and count:
            self._skipped += 1
        return obj

    # -- writing ---------------------------------------------------------------------

    def enqueue(self, line: dict[str, Any], *, sync: bool = True) -> Entry:
        """Validate and queue `line`; wait for it with `wait` (sync) or not at all."""
        out, cuts = prepare_line(line, self.clock())
        try:
            e = self._writer.enqueue(out, sync=sync, harness=out["harness"],
                                     run_id=out["run_id"])
        except LineTooLong:
            # Rare (fields each within their cap, together past 16 KiB), so the hot path
            # does not measure: the line is cut to fit and queued, not refused.
            out = fit_line(out, cuts, self._writer.max_line)
            e = self._writer.enqueue(out, sync=sync, harness=out["harness"],
                                     run_id=out["run_id"])
        self._count_cuts(cuts)  # once the line is accepted
        return e

    def _count_cuts(self, cuts: Cuts) -> None:
        if cuts.truncations or cuts.redactions:
            with self._lock:
                self._truncated += cuts.truncations
                self._redactions += cuts.redactions

    def wait(self, entry: Entry) -> int:
        return self._writer.wait(entry)

    def append(self, line: dict[str, Any], *, sync: bool = True) -> int:
        """Append a line; with sync=True return its seq once it is on stable storage."""
        e = self.enqueue(line, sync=sync)
        return self._writer.wait(e, as_enqueued=True) if sync else e.seq

    def flush(self) -> None:
        self._writer.flush()

    def stuck(self, harness: str, run_id: int) -> str | None:
        """Why a line of that run, queued, cannot be made durable now; None if none waits so."""
        return self._writer.stuck(harness, run_id)

    def _commit(self, entries: list[Entry]) -> None:
        published = []
        feed = self._feed.active()
        with self._lock:
            self._committed = entries[-1].seq
            for e in entries:
                self._path_commits[e.path] = e.seq
                # The writer is done with it: the ring keeps it as committed, its members
                # in the order the file holds them (canonical: sorted), so a record folds
                # to the same member order from memory as from the files, and the daemon's
                # answer prints the same bytes as an offline read.
                obj = dict(sorted(e.obj.items()))
                self._ring.append(obj)
                r = self._index.apply(obj, live=True, carried=e.tag == _CARRIED)
                for captured in self._captures.values():
                    captured.append(obj)
                if feed and obj["type"] != "updated":
                    published.append(Committed(e.seq, obj["type"], r.to_json(check_log=False)))
            day = self.clock() // DAY_NS
            if day != self._trimmed_day:
                self._trimmed_day = day
                self._index.trim(self.clock())
        for c in published:
            self._feed.publish(c)

    # -- reading -----------------------------------------------------------------------

    def query(self, q: Query) -> tuple[list[dict[str, Any]], int | None]:
        """Records newest first and the oldest seq: from memory when that is provably
        complete, else from the day files (every committed line is in them)."""
        with self._lock:
            recs, oldest, complete = self._index.query(q)
            if complete:
                probe = LogProbe(self.state_dir)
                return [r.to_json(probe=probe) for r in recs], oldest
        # Only what is durable: a buffered line may be in the file before its sync.
        found, oldest, _stats = scan(self.directory, q, upto_seq=self._committed)
        probe = LogProbe(self.state_dir)
        return [r.to_json(probe=probe) for r in found], oldest

    def get(self, harness: str, run_id: int) -> dict[str, Any] | None:
        with self._lock:
            r = self._index.get(harness, run_id)
            return r.to_json(probe=LogProbe(self.state_dir)) if r is not None else None

    def recorded(self, harness: str, run_id: int) -> bool:
        """Whether the run has a committed record that memory holds (`get` without the
        fold: cheap enough for the run-id allocator's every call)."""
        with self._lock:
            return self._index.get(harness, run_id) is not None

    def open_records(self, *, queued: bool = False) -> list[dict[str, Any]]:
        """The records still open, in seq order: by the committed lines (what queries see),
        or with `queued`, by every line already queued as well, committed or not.

        REQ-7's closing passes need the second: under REQ-6's no-wait exception a
        resident's own-exit closed line, and the opened line of its restart, may still
        wait in the queue, and the committed view would close the first run again (its
        fold then reading interrupted) and miss the second."""
        if queued:
            return self._writer.look_queued(
                lambda q: [r.to_json(check_log=False) for r in self._open_with(q)])
        with self._lock:
            return [r.to_json(check_log=False) for r in self._index.open_records()]

    def enqueue_closing(self, line: dict[str, Any]) -> Entry | None:
        """Queue closed `line` (a synced entry; wait for it with `wait`) only if its record
        is still open once every line already queued is folded in, judged in one step with
        the queueing; None when a line queued before it already ends the record, or it
        was never opened. REQ-7's closing passes use it: a run is closed once, by the
        first line that closes it, and a shutdown never overwrites a run's own end."""
        if line.get("type") != "closed":
            raise ValueError(f"enqueue_closing takes a closed line, not {line.get('type')!r}")
        out, cuts = prepare_line(line, self.clock())
        # Cut to fit here: inside the writer's lock a refused line could not be cut.
        out = fit_line(out, cuts, self._writer.max_line)
        key = (out["harness"], out["run_id"])

        def build(queue: Iterable[Entry]) -> tuple[dict[str, Any], str, int] | None:
            return (out, key[0], key[1]) if self._open_with(queue, key) else None

        e = self._writer.enqueue_built(build)
        if e is not None:
            self._count_cuts(cuts)
        return e

    def _open_with(self, queue: Iterable[Entry],
                   only: tuple[str, int] | None = None) -> list[Record]:
        """The records open once `queue`'s lines are folded, in seq order, onto copies of
        the committed ones (all, or the one record `only`); call under the writer's queue
        lock, so no line is committed or queued meanwhile. A line both committed and
        still queued folds twice, to the same state."""
        with self._lock:
            known = self._index.records
            if only is None:
                opened = self._index.open_records()
            else:
                # One record, looked up: a shutdown closes each open run this way, and a
                # walk of the whole index for each held the queue lock for tens of ms.
                one = known.get(only)
                opened = [one] if isinstance(one, Record) and one.is_open else []
            recs = {(r.harness, r.run_id): r.copy() for r in opened}
            for e in queue:
                o = e.obj
                if only is not None and (o["run_id"] != only[1] or o["harness"] != only[0]):
                    continue
                key = (o["harness"], o["run_id"])
                r = recs.get(key)
                if r is None:
                    # Only an opened line starts a record here; a committed record that
                    # is not open (ended, or partial) stays as the committed fold has it.
                    if o["type"] != "opened" or key in known:
                        continue
                    r = recs[key] = Record(*key)
                r.apply(o)
        return sorted((r for r in recs.values() if r.is_open), key=lambda r: r.seq)

    def max_run_id(self, harness: str) -> int:
        with self._lock:
            return self._index.max_ids.get(harness, 0)

    def subscribe(self, name: str, size: int = 1024) -> Subscription:
        return self._feed.subscribe(name, size)

    def since(self, seq: int) -> Iterator[dict[str, Any]]:
        """Every committed line after `seq`, in seq order, from memory or the files.

        Memory is the ring of the newest lines. While it reaches back to `seq` it answers
        alone, lines a prune has since deleted included, so a follower that lags behind
        a prune loses nothing while the daemon runs; past it, the files answer, and hold
        only what retention kept."""
        with self._lock:
            ring = list(self._ring)
            committed = self._committed
        if ring and ring[0]["seq"] <= seq + 1:
            yield from (o for o in ring if o["seq"] > seq)
            return
        # The files hold more than what is committed: lines written and not yet synced,
        # and lines committed after this snapshot, into files listed or not. Read only up
        # to the snapshot, the ring's first line or, the ring empty, the last committed.
        upto = ring[0]["seq"] if ring else committed + 1
        last = seq
        streams = [self._file_stream(p, seq, upto) for _d, p in
                   list_day_files(self.directory).days]
        for obj in heapq.merge(*streams, key=lambda o: o["seq"]):
            last = obj["seq"]
            yield obj
        yield from (o for o in ring if o["seq"] > last)

    def _file_stream(self, path: str, after: int, upto: int) -> Iterator[dict[str, Any]]:
        for raw in self._file_lines(path):
            obj = self._decode(raw, count=False)
            if obj is not None and after < obj["seq"] < upto:
                yield obj

    # -- retention ---------------------------------------------------------------------

    def set_limits(self, retention_ns: int, max_bytes: int) -> None:
        """The retention and size cap the next `prune` applies (REQ-19: a reload changes
        them without reopening the ledger). Thread-safe; a prune already running keeps
        the limits it started with."""
        if retention_ns < 0 or max_bytes < 0:
            raise ValueError(f"ledger limits must not be negative, got retention_ns="
                             f"{retention_ns}, max_bytes={max_bytes}")
        with self._lock:
            self.retention_ns = retention_ns
            self.max_bytes = max_bytes

    def prune(self) -> PruneResult:
        """Apply REQ-12 now (the daemon calls this at boot and at each UTC day rollover)."""
        with self._lock:
            retention_ns, max_bytes = self.retention_ns, self.max_bytes
        res = prune(self.directory, self.clock(), retention_ns, max_bytes, self._carry_forward,
                    self._quiet)
        with self._lock:
            self._pruned += len(res.deleted)
            self._carried += res.carried_forward
        if res.deleted:
            anchor = read_chain_file(self.directory)
            if anchor is not None:
                self._forget_pruned(anchor[0])
        return res

    def _forget_pruned(self, upto: int) -> None:
        """Make memory agree with the files after lines up to seq `upto` were deleted.

        A closed record whose lines are all gone is dropped. A record that lost only its
        first lines (a run across the cut, a carried-forward resident) is refolded from
        the lines left on disk, so its seq is its first remaining line's, as a file read
        says. The files are read without the lock (the writer keeps committing); every
        line committed meanwhile is captured and replayed before the swap.
        """
        later: list[dict[str, Any]] = []
        with self._lock:
            # Every record that began before the cut is refolded from the files left: by
            # seq alone it cannot be told whether its lines went (a clock stepped back
            # puts lower seqs in a later day's file, which is kept).
            cut = {k for k, r in self._index.records.items() if r.seq <= upto}
            # Memory vouches for a harness's records from its own floor up, which can lie
            # below the ledger-wide one (a record trimmed from the harness's tail), and for
            # all of those of a harness with no floor of its own.
            floors = {h: self._index.floor_of(h) for h in self._index.harness_floor}
            floor_at = self._index.floor_at
            held = set(self._index.records)
            read_to = self._committed
            self._captures[id(later)] = later
        try:
            days = list_day_files(self.directory).days
            # Made as their lines come: most records of a file that went have no line left
            # (at a boot's prune, a hundred thousand records).
            fresh: dict[tuple[str, int], Record] = {}
            # One read folds the records known to refold, and finds those memory had
            # already let go (trimmed, or older than the boot loaded) that kept a later
            # line (a late update, a closing line): such a record now starts at that
            # line, which may be above a floor, or stamped after `floor_at` (a clock
            # stepped back gave it a lower seq): memory must hold it, or it would answer
            # without it. Those are folded by a second read, needed only when there are
            # any (a read of every kept file was most of a prune's time).
            found: set[tuple[str, int]] = set()

            def spot(e: Head) -> None:
                if floors.get(e.harness, 1) <= e.seq or (floor_at and e.at >= floor_at):
                    found.add((e.harness, e.run_id))

            for obj in self._lines_of(days, cut, read_to, spot, held):
                key = (obj["harness"], obj["run_id"])
                r = fresh.get(key)
                if r is None:
                    r = fresh[key] = Record(*key)
                r.apply(obj)
            if found:
                more = {k: Record(*k) for k in found}
                for obj in self._lines_of(days, more, read_to):
                    more[(obj["harness"], obj["run_id"])].apply(obj)
                fresh.update(more)
            with self._lock:
                for o in later:
                    key = (o["harness"], o["run_id"])
                    r = fresh.get(key)
                    if r is None and key in cut:
                        r = fresh[key] = Record(*key)
                    if r is not None:
                        r.apply(o)
                for k in cut:
                    if k not in fresh:
                        self._index.records.pop(k, None)  # no line of it is left
                for k, r in fresh.items():
                    if r.seq == 0:
                        self._index.records.pop(k, None)
                    else:
                        self._index.store(k, r)
        finally:
            with self._lock:
                del self._captures[id(later)]

    def _carry_forward(self, day: str) -> int:
        """Write a fresh opened line, into today's file, for each run still open whose
        opened line is in `day`'s file, which is about to go (REQ-12); and a fresh closed
        line for each ended run whose closing line is in it while another of its lines
        (opened, updated) lies in a later file (a clock stepped back across midnight):
        the lines left would otherwise read open once the file is gone."""
        path = day_path(self.directory, day)
        with self._lock:
            # Marked before the file and the index are read: a line committed to the file
            # from now on is one this carry may not have seen (`_quiet` tells).
            self._carry_marks[path] = self._path_commits.get(path, 0)
        opening, ending = self._keys_in(path)
        forgotten: dict[tuple[str, int], int] = {}
        with self._lock:
            # By the file's own lines too: a line's `at` names its file unless the files
            # were edited, and an open run whose only opened line is gone reads as none.
            # Not a run whose newest opened line is elsewhere, though: carried already
            # by a prune that failed after the carry, it needs no second line.
            doomed: list[tuple[tuple[str, int], str, Record | None]] = [
                ((r.harness, r.run_id), "opened", None) for r in self._index.open_records()
                if r.opened_at[:10] == day
                or opening.get((r.harness, r.run_id), "") >= r.opened_at]
            for key, seq in ending.items():
                r = self._index.records.get(key)
                if r is None:
                    # Its opened line may be in this file too: a later update is enough
                    # to leave it reading open.
                    forgotten[key] = seq
                elif _outlived(r, day):
                    doomed.append((key, "closed", None))
        if forgotten:
            # Closed runs memory let go (older than the window, past the tail) are read
            # from the files: the same clock step may have put one of their lines later.
            doomed += [((r.harness, r.run_id), "closed", r)
                       for r in self._outlived_later(day, forgotten)]
        entries = []
        for key, typ, known in doomed:
            # Built and queued in one step with the lines still queued in view: a line of
            # the run appended meanwhile (its closed line, a usage update) is folded in,
            # never overwritten by the older state the carried line would otherwise hold.
            e = self._writer.enqueue_built(
                functools.partial(self._carried_line, key, typ, known), _CARRIED)
            if e is not None:
                entries.append(e)
        for e in entries:
            self._writer.wait(e)
        return len(entries)

    @contextlib.contextmanager
    def _quiet(self, day: str) -> Iterator[bool]:
        """Hold the writer while `day`'s file is deleted, and say whether nothing was
        committed to it since `_carry_forward` looked. A line stamped just before midnight
        can be committed to yesterday's file while the prune runs; such a line would go
        with the file unseen, and the prune carries again instead."""
        path = day_path(self.directory, day)
        # Bounded: a prune on a hung disk gives up and retries at the next one, rather
        # than hold the daemon's shutdown, which waits for it, for as long as the disk.
        with self._writer.passes(self._writer.sync_timeout):
            with self._lock:
                still = self._path_commits.get(path, 0) == self._carry_marks.pop(path, -1)
                if still:
                    self._path_commits.pop(path, None)
            yield still

    def _keys_in(self, path: str) -> tuple[dict[tuple[str, int], str], dict[tuple[str, int], int]]:
        """The records with an opened line in one day file (with the newest such line's
        `at`), and those with a closed or decided line in it (with its highest seq)."""
        opening: dict[tuple[str, int], str] = {}
        ending: dict[tuple[str, int], int] = {}
        for block in heads(path, ReadStats()):
            for e in block:
                typ = e.type
                if typ == "updated":
                    continue
                key = (e.harness, e.run_id)
                if typ == "opened":
                    if e.at >= opening.get(key, ""):
                        opening[key] = e.at
                elif e.seq > ending.get(key, 0):
                    ending[key] = e.seq
        return opening, ending

    def _outlived_later(self, day: str, ending: dict[tuple[str, int], int]) -> list[Record]:
        """Of the runs `ending` (key: the seq of its closing line in `day`'s file), those
        with a line written before that close in a later file, folded from the files;
        closed ones only.

        Such a line has a lower seq than the close. Each file is in seq order, so only
        the lines of later files below the highest of those seqs need a look: none at all
        in a ledger whose clock never stepped back, where a small first read of each later
        file shows a first line above them. (A line written after the close, in a later
        file, is not looked for: a late line of a record memory had let go.)"""
        bound = max(ending.values())
        days = list_day_files(self.directory).days
        found: set[tuple[str, int]] = set()
        for d, path in days:
            if d <= day:
                continue
            for e, _raw in self._envelopes(path, first=_PEEK):
                if e.seq > bound:
                    break
                key = (e.harness, e.run_id)
                if e.seq < ending.get(key, 0):
                    found.add(key)
        if not found:
            return []
        with self._lock:
            upto = self._committed
        folded = {k: Record(*k) for k in found}
        for obj in self._lines_of(days, folded, upto):
            folded[(obj["harness"], obj["run_id"])].apply(obj)
        return [r for r in folded.values() if _outlived(r, day)]

    def _carried_line(self, key: tuple[str, int], typ: str, known: Record | None,
                      queued: Iterable[Entry]) -> tuple[dict[str, Any], str, int] | None:
        """The carried-forward line of run `key`, of type `typ`: its committed record (from
        memory, or `known`, folded from the files) with the lines of it still queued
        folded in (called by the writer, queue locked)."""
        with self._lock:
            r = known if known is not None else self._index.records.get(key)
            if r is None:
                return None
            fields = dict(r.fields)
            first_at = r.first_at
        for e in queued:
            o = e.obj
            if o["run_id"] == key[1] and o["harness"] == key[0]:
                fields.update((k, v) for k, v in o.items() if v is not None and k in RECORD_FIELDS)
        fields.pop("log_pruned", None)
        if "started_at" in fields and canon(fields["started_at"]) is None:
            # A start that is no time: readers count the run from its first line, whose
            # file is about to go. The carried line keeps that start.
            fields["started_at"] = canon(first_at)
        # Values from damaged or edited files the writer would refuse: the line carries
        # the rest, or the file holding the run could never be pruned.
        fields, dropped = writable(fields)
        if dropped:
            log.warning("ledger: carrying %s/%d forward without field(s) %s, which hold "
                        "values no line may: the files were edited or damaged",
                        key[0], key[1], ", ".join(sorted(dropped)))
        fields.update(type=typ, harness=key[0], run_id=key[1], at=None)
        out, cuts = prepare_line(fields, self.clock())
        # Lines that fit one by one can fold past the line limit: cut to fit, as `enqueue`
        # does, or the prune would fail on this run for as long as it stays open.
        out = fit_line(out, cuts, self._writer.max_line)
        self._count_cuts(cuts)
        return out, key[0], key[1]

    # -- state -------------------------------------------------------------------------

    def stats(self) -> LedgerStats:
        w = self._writer.stats()
        listing = list_day_files(self.directory)
        size = 0
        for _d, p in listing.days:
            try:
                size += os.path.getsize(p)
            except OSError:
                continue
        with self._lock:
            return LedgerStats(
                dir=self.directory,
                next_seq=w.next_seq,
                queued=w.queued,
                append_errors=w.append_errors,
                last_error=w.last_error,
                degraded=w.degraded,
                skipped=self._skipped,
                torn=self._torn,
                truncated=self._truncated,
                redactions=self._redactions,
                pruned=self._pruned,
                carried_forward=self._carried,
                bytes=size,
                oldest_day=listing.days[0][0] if listing.days else None,
                feed_missed=self._feed.missed(),
                records_in_memory=len(self._index),
            )

    @property
    def writer(self) -> Writer:
        return self._writer

    def close(self, timeout: float = 5.0) -> None:
        """Drain every queued line to disk (or report what could not be) and stop."""
        try:
            self._writer.close(timeout)
        finally:
            held, self._held = self._held, -1
            if held >= 0:
                # Not before the writer thread stops: one stuck past the timeout may
                # still write, and a ledger opened meanwhile would reissue its seqs.
                self._writer.after_stop(functools.partial(os.close, held))


__all__ = ["LedgerCorrupt", "LedgerStats", "Record", "RunLedger"]
