"""state.json and the run-id allocator (SPEC-0022 REQ-13, SPEC-0008 "run ids never reused").

`StateFile` owns `$XDG_STATE_HOME/harness/state.json`. Its shape is DESIGN.md §2's legacy
one, less the run records: ``{"runs": {NAME: {"last_run_id": N}}, "stopped": [NAME, ...]}``
plus whatever other top-level keys the daemon keeps there. A pre-ledger entry also holds
its record list (``{"last_run_id": N, "runs": [...]}``) until `history.import_legacy` has
moved it into the ledger and dropped it (`drop_lists`); the entry's counter stays. A file
written by the previous version kept the counters in a ``"harnesses"`` table beside the
legacy one: it is read as one table (each counter the higher of the two) and the first
write leaves only ``"runs"``. ``"stopped"`` names the residents an operator stopped
(`harness stop`) and has not started since: the operator's wish, not a run fact, so it is
not in the ledger (a stop of a resident with no live run writes no record, and retention
may prune the one that did); the Manager reads it at boot (``unless-stopped``).
``"held"`` (``{NAME: [{"run_id": N, "trigger": T, "window": W, "at": A}, ...]}``) names the
firings an ``on_overlap = "queue"`` one-shot held whose record is not known to be on disk:
a client was told their run id, and only memory holds them until their record is written,
so a daemon killed meanwhile leaves the next boot this to record them by
(`history.settle_firings`); one started with its opened line still queued (REQ-6) keeps
its entry until that line is on disk. A harness holds one firing at a time, but a dropped
one whose decided line the disk has not taken yet keeps its entry beside the next one's,
so the list has an entry per firing, oldest first, and each is forgotten alone
(`forget_firings`). The previous version wrote one entry object per name (``{NAME:
{...}}``): it is read as a list of that one entry, and the next write of the table leaves
lists only.
``"issued"`` (``{NAME: [{"run_id": N, "trigger": T, "window": W, "at": A, "kind": K},
...]}``) names every other run id handed out (a start, a skip, a missed window) whose
record is not known to be on disk: the allocator writes the entry in the very write that
persists the id (no write of its own), and drops every entry, of any harness, whose
record the ledger has committed at each later allocation, so on a healthy disk it holds
about one entry. A firing decided before its id is handed out (a skip, missed windows)
has its decided line's fields under ``"decided"``, so the boot records what its client
was told. A run admitted with its opened line still queued (REQ-6: a harness under
no budget past the sync bound, a resident's own-exit restart) has a client told its id
and a process running, and only this entry says so if the daemon dies first: the next
boot records it (`history.settle_firings`). A file without the key has no such entry;
either table that is not an object names none, and the boot says so (`unreadable_tables`).
Invariants: the file on disk is always a whole, valid JSON document (it is replaced by
rename, never rewritten in place) and mode 0600; top-level keys this module does not
know, and keys of an entry other than its record list, survive every rewrite; updates of
the file are serialised, so no thread's change overwrites another's; a corrupt file is a
`StateError` naming the path and the JSON problem, never a traceback, and so is a file
holding a value no write could carry back (NaN, an infinity, a lone surrogate) and a path
that holds no regular file (a directory, a FIFO: read without blocking, it is named).
Every counter is judged strictly — a table or an entry that is not an object, or a
``last_run_id`` that is not an id, is a `StateError` naming it (the daemon does not
boot), since reading it as 0 could hand out an id already used — while a record list is
the import's to judge: a malformed one costs only that history, reported by the import.

`RunIds` hands out run ids. Invariants: an id is persisted as ``last_run_id`` before it is
returned, in one write with its firing's ``held`` or ``issued`` entry, which stays until
its record is on disk, so every run id handed out has a record after the next boot at the
latest; and the first id handed out per harness per process is above everything
already used — state.json's counters, the ledger's records and the per-run logs on disk.
"""

from __future__ import annotations

import json
import math
import os
import re
import threading
from collections.abc import Callable, Collection
from typing import Any, Protocol

from ..ledger.files import (
    atomic_write,
    clear_leftovers,
    found_parents,
    make_durable_dirs,
    open_regular,
    sync_entries_of,
    why_unreadable,
)

RUNS_KEY = "runs"  # the per-harness table: {NAME: {"last_run_id": N}}
LIST_KEY = "runs"  # in an entry: the pre-ledger record list, until its import
PREVIOUS_KEY = "harnesses"  # the previous version's counter table, moved on the next write
HELD_KEY = "held"
ISSUED_KEY = "issued"
FIRING_KEYS = (HELD_KEY, ISSUED_KEY)  # the tables of run ids whose record may be missing
STOPPED_KEY = "stopped"
_LOG_NAME = re.compile(r"(\d+)\.log(?:\.zst)?\Z")


class StateError(Exception):
    """state.json cannot be read or written; the message names the path and the problem."""


class _Ledger(Protocol):
    def max_run_id(self, harness: str) -> int: ...

    def recorded(self, harness: str, run_id: int) -> bool: ...


# Whether the ledger has committed a record of (harness, run_id).
Recorded = Callable[[str, int], bool]


# A run id is a ledger integer (64-bit signed), and this bound is none: the highest id
# handed out, and so the highest a counter may hold, is one below it.
MAX_RUN_ID = 2**63 - 1


def _counter(v: Any) -> bool:
    return type(v) is int and 0 <= v < MAX_RUN_ID


def _shown(v: Any) -> str:
    """A value as an error quotes it: a scalar as JSON (cut), a container by its kind."""
    if type(v) is dict:
        return "an object"
    if type(v) is list:
        return "a list"
    text = json.dumps(v, ensure_ascii=False)
    return text if len(text) <= 40 else text[:39] + "…"


class StateFile:
    """state.json: read tolerantly, validated, rewritten atomically."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._data: dict[str, Any] | None = None
        # Whether this process has made the state dir's own entry durable (see `save`).
        self._entry_synced = False
        # Held across each read-modify-write: the run-id allocator and the Manager's
        # holds update the file from different threads.
        self._update = threading.Lock()

    # -- reading -------------------------------------------------------------------

    def load(self) -> dict[str, Any]:
        """The document (cached after the first read); a missing file is empty."""
        if self._data is None:
            self._data = self._read()
        return self._data

    def clear_leftovers(self) -> list[str]:
        """Remove what a daemon killed while replacing the file left half made (its
        temporary files); return their paths. Only for the one daemon, before it writes."""
        d = os.path.dirname(self.path) or "."
        try:
            names = clear_leftovers(d, re.escape(os.path.basename(self.path)))
        except FileNotFoundError:  # no state dir yet: nothing was ever written
            return []
        return [os.path.join(d, n) for n in names]

    def _read(self) -> dict[str, Any]:
        try:
            # Never blocking: a FIFO at the path would hang the boot, deaf to SIGTERM,
            # waiting for a writer. A symlink is followed, as it always was.
            with open_regular(self.path, follow=True) as f:
                raw = f.read()
        except FileNotFoundError:
            return {}
        except OSError as exc:
            why = why_unreadable(self.path, exc)
            raise StateError(f"{self.path}: cannot read: {why}") from None
        if not raw.strip():
            # An empty file is what a crash before the first write could leave on
            # filesystems without rename atomicity; it carries no history to lose.
            return {}
        try:
            doc = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise StateError(
                f"{self.path}: not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
            ) from None
        except UnicodeDecodeError as exc:
            raise StateError(f"{self.path}: not valid UTF-8: {exc.reason}") from None
        except RecursionError:  # the decoder recurses once per level of nesting
            raise StateError(f"{self.path}: not valid JSON: nested too deeply") from None
        except ValueError:  # an integer past the interpreter's digit limit (4,300)
            raise StateError(f"{self.path}: not valid JSON: an integer too long to "
                             "read") from None
        if type(doc) is not dict:
            raise StateError(f"{self.path}: the top level must be a JSON object, "
                             f"not {type(doc).__name__}")
        if (problem := _unwritable(doc)) is not None:
            raise StateError(f"{self.path}: {problem}")
        for key in (RUNS_KEY, PREVIOUS_KEY):
            self._check_table(doc, key)
        stopped = doc.get(STOPPED_KEY, [])
        if type(stopped) is not list or any(type(n) is not str for n in stopped):
            raise StateError(f"{self.path}: {STOPPED_KEY!r} must be a list of harness names")
        return _one_table(doc)

    def _check_table(self, doc: dict[str, Any], key: str) -> None:
        """Judge the counters of table `key` strictly, never an entry's record list.

        A counter taken as 0 where the file says something else could hand out again
        an id only the counter remembers (keep_runs cut its record from the legacy list
        and its log from the disk, so neither the ledger nor the logs floor it): the boot
        stops instead, naming it. A malformed record list costs only that history (the
        import reports it), so a legacy file whose lists alone are broken still boots.
        A missing counter is 0: the file claims no id.
        """
        table = doc.get(key, {})
        if type(table) is not dict:
            raise StateError(f"{self.path}: {key!r} must be an object, not {_shown(table)}")
        for name, entry in table.items():
            if type(entry) is not dict:
                raise StateError(f"{self.path}: {key}.{name} must be an object, "
                                 f"not {_shown(entry)}")
            if "last_run_id" in entry and not _counter(entry["last_run_id"]):
                raise StateError(f"{self.path}: {key}.{name}.last_run_id must be an integer "
                                 f"from 0 to {MAX_RUN_ID - 1}, not "
                                 f"{_shown(entry['last_run_id'])}")

    def last_run_id(self, harness: str) -> int:
        """The counter for `harness` (0 when state.json has none)."""
        entry = self.entries().get(harness, {})
        counter: int = entry.get("last_run_id", 0)
        return counter

    def stopped(self) -> frozenset[str]:
        """The residents an operator stopped and has not started since."""
        return frozenset(self.load().get(STOPPED_KEY, []))

    def entries(self) -> dict[str, Any]:
        """The ``runs`` table: each harness's entry (empty when there is none)."""
        table: dict[str, Any] = self.load().get(RUNS_KEY, {})
        return table

    def has_legacy_lists(self) -> bool:
        """Whether an entry still holds a pre-ledger record list (its import is due)."""
        return any(LIST_KEY in e for e in self.entries().values())

    def held(self) -> list[tuple[str, Any]]:
        """Every held firing as written, (harness, entry), each harness's oldest first
        (`history.settle_firings` judges each entry)."""
        return self._firings(HELD_KEY)

    def issued(self) -> list[tuple[str, Any]]:
        """Every ``issued`` entry as written, (harness, entry), each harness's oldest
        first (`history.settle_firings` judges each entry)."""
        return self._firings(ISSUED_KEY)

    def unreadable_tables(self) -> list[str]:
        """The problem of each firing table that is not an object (read as empty), for the
        boot to say: the run ids it named cannot be recorded."""
        doc = self.load()
        return [f"{key!r} must be an object of harness names, not {_shown(doc[key])}"
                for key in FIRING_KEYS if key in doc and type(doc[key]) is not dict]

    def _firings(self, key: str) -> list[tuple[str, Any]]:
        return [(name, entry) for name, entries in self._table(key).items()
                for entry in entries]

    def _table(self, key: str) -> dict[str, list[Any]]:
        """Firing table `key` with each harness's entries as a list (the previous
        version's single held entry object is a list of one); empty when it is no
        object."""
        table = self.load().get(key, {})
        if type(table) is not dict:
            return {}
        return {name: list(v) if type(v) is list else [v] for name, v in table.items()}

    # -- writing -------------------------------------------------------------------

    def set_last_run_id(self, harness: str, value: int,
                        firing: dict[str, Any] | None = None, *, held: bool = False,
                        recorded: Recorded | None = None) -> None:
        """Persist `value` as `harness`'s counter (durable when this returns); with
        `firing`, in the same write, the entry of the firing given that id (its trigger,
        window, time and kind): in ``held`` (`held`, a firing held behind a live run) or
        ``issued``, beside any earlier entry of `harness`. With `recorded`, the same
        write drops every entry, of any harness, whose record it says is committed."""
        with self._update:
            doc = dict(self.load())
            table = dict(self.entries())
            table[harness] = {**table.get(harness, {}), "last_run_id": value}
            doc[RUNS_KEY] = table
            for key in FIRING_KEYS:
                add = firing is not None and (key == HELD_KEY) == held
                if key not in doc and not add:
                    continue
                firings = self._table(key)
                if recorded is not None:
                    firings = _unrecorded(firings, recorded)
                if add:
                    assert firing is not None
                    firings[harness] = [*firings.get(harness, []), {**firing, "run_id": value}]
                if firings:
                    doc[key] = firings
                else:
                    doc.pop(key, None)
            self.save(doc)

    def drop_lists(self, floors: dict[str, int]) -> None:
        """Rewrite state.json without any entry's record list (REQ-13, once they are in
        the ledger). Every entry keeps its ``last_run_id``, raised to `floors`' value for
        it (the highest id imported), so the allocator never goes below an imported run."""
        with self._update:
            doc = dict(self.load())
            table = {}
            for name, entry in self.entries().items():
                kept = {k: v for k, v in entry.items() if k != LIST_KEY}
                kept["last_run_id"] = max(self.last_run_id(name), floors.get(name, 0))
                table[name] = kept
            doc[RUNS_KEY] = table
            self.save(doc)

    def forget_firings(self, firings: Collection[tuple[str, int]] | None = None) -> None:
        """Drop the ``held`` and ``issued`` entries `firings` names ((harness, run_id)
        pairs; every other entry stays, another run id's of the same harness too), or all
        of them; no write when nothing changes."""
        with self._update:
            doc = dict(self.load())
            changed = False
            for key in FIRING_KEYS:
                if key not in doc:
                    continue
                if firings is None:
                    keep: dict[str, list[Any]] = {}
                else:
                    gone = set(firings)
                    table = self._table(key)
                    keep = {name: kept for name, entries in table.items()
                            if (kept := [e for e in entries if not _held_in(name, e, gone)])}
                    if keep == table:
                        continue
                changed = True
                if keep:
                    doc[key] = keep
                else:
                    del doc[key]
            if changed:
                self.save(doc)

    def set_stopped(self, harness: str, stopped: bool) -> None:
        """Persist whether an operator holds `harness` stopped (durable when this
        returns); the file is not rewritten when that is already what it says."""
        with self._update:
            doc = dict(self.load())
            names = set(doc.get(STOPPED_KEY, []))
            if (harness in names) == stopped:
                return
            names.symmetric_difference_update((harness,))
            if names:
                doc[STOPPED_KEY] = sorted(names)
            else:
                doc.pop(STOPPED_KEY, None)
            self.save(doc)

    def save(self, doc: dict[str, Any]) -> None:
        """Replace state.json with `doc` (tmp file 0600, fsync, rename, fsync the directory).

        A crash at any point leaves either the old document or the new one, whole.
        """
        try:
            data = json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False,
                              allow_nan=False).encode("utf-8") + b"\n"
        except (TypeError, ValueError) as exc:
            raise StateError(f"{self.path}: cannot encode the state: {exc}") from None
        try:
            d = os.path.dirname(os.path.abspath(self.path))
            made = make_durable_dirs(d)
            # The run id is durable only with the state dir's entry: one found already
            # there may be a killed process's (the daemon's lock beside the socket makes
            # it first), made and never synced.
            for parent in () if self._entry_synced else found_parents(d, 1, made):
                sync_entries_of(parent)
            atomic_write(self.path, data)
            self._entry_synced = True
        except OSError as exc:
            # The rename may or may not have happened (a failed directory sync comes after
            # it): forget the cached document so the next read takes the disk's word.
            self._data = None
            raise StateError(f"{self.path}: cannot write: {exc.strerror or exc}") from None
        self._data = doc


def _unwritable(doc: dict[str, Any]) -> str | None:
    """Where `doc` holds what `StateFile.save` cannot write back, and what; None when
    nothing. Python's decoder takes NaN, Infinity and a number past a float's range (read
    as infinite), which JSON has no words for, and a lone surrogate escape (``\\ud800``),
    which UTF-8 cannot encode: kept (an unknown key's value is kept by every write), such
    a value would fail every later write, so no run id could be handed out."""
    def shown(key: str) -> str:
        return key.encode("utf-8", "backslashreplace").decode("utf-8")

    stack: list[tuple[str, Any]] = [("the top level", doc)]
    while stack:
        where, v = stack.pop()
        if type(v) is float and not math.isfinite(v):
            word = "NaN" if v != v else "Infinity" if v > 0 else "-Infinity"
            return f"{where} is not a finite number ({word})"
        if type(v) is str:
            v = [v]  # judged as a key is
        elif type(v) is list:
            stack += reversed([(f"{where}[{i}]", x) for i, x in enumerate(v)])
            continue
        elif type(v) is not dict:
            continue
        for text in v:
            try:
                text.encode("utf-8")
            except UnicodeEncodeError:
                return f"{where} holds a lone surrogate, which UTF-8 cannot encode"
        if type(v) is dict:
            prefix = "" if v is doc else f"{where}."
            stack += reversed([(prefix + shown(k), x) for k, x in v.items()])
    return None


def _held_in(name: str, entry: Any, firings: set[tuple[str, int]]) -> bool:
    """Whether firing `entry` of `name` is one of `firings` (a malformed one is none)."""
    if type(entry) is not dict or type(run_id := entry.get("run_id")) is not int:
        return False
    return (name, run_id) in firings


def _unrecorded(table: dict[str, list[Any]], recorded: Recorded) -> dict[str, list[Any]]:
    """`table` without the entries whose record is committed; a malformed entry stays
    (the boot's `history.settle_firings` judges it)."""
    def on_disk(name: str, entry: Any) -> bool:
        run_id = entry.get("run_id") if type(entry) is dict else None
        return type(run_id) is int and recorded(name, run_id)

    return {name: kept for name, entries in table.items()
            if (kept := [e for e in entries if not on_disk(name, e)])}


def issued_entry(trigger: str, window: str | None, at: str, kind: str,
                 decided: dict[str, Any] | None = None) -> dict[str, Any]:
    """The ``issued`` entry of a firing given a run id (`RunIds.next` adds the id). A
    firing decided before its id is handed out (a skip, missed windows) carries the
    decided line's own fields (`decided`: outcome, reason, first_window, windows), so a
    boot that records it says what the client was told, not that the daemon crashed."""
    entry: dict[str, Any] = {"trigger": trigger, "window": window, "at": at, "kind": kind}
    if decided is not None:
        entry["decided"] = decided
    return entry


def highest_log_id(jobs_dir: str, harness: str) -> int:
    """The highest run id with a per-run log (`<id>.log` or `<id>.log.zst`) for `harness`."""
    try:
        names = os.listdir(os.path.join(jobs_dir, harness))
    except OSError:
        return 0  # no logs yet (or none readable): the other floors still apply
    best = 0
    for name in names:
        m = _LOG_NAME.match(name)
        # A name past any id the ledger can hold is no log of ours; taken as a floor,
        # it would leave the harness no id to run with.
        if m and len(m.group(1)) <= 19 and (n := int(m.group(1))) < MAX_RUN_ID:
            best = max(best, n)
    return best


class RunIds:
    """The per-harness run-id allocator; one per daemon."""

    def __init__(self, state: StateFile, ledger: _Ledger | None, jobs_dir: str) -> None:
        self.state = state
        self.ledger = ledger
        self.jobs_dir = jobs_dir
        self._lock = threading.Lock()
        self._last: dict[str, int] = {}

    def floor(self, harness: str) -> int:
        """The highest id already used anywhere we can see."""
        # An id whose record the disk refused at boot is only in its held/issued entry,
        # kept for the next boot: with the counter edited below it, it must floor too.
        pending = (e.get("run_id") for h, e in (*self.state.held(), *self.state.issued())
                   if h == harness and type(e) is dict)
        floor = max(self.state.last_run_id(harness), highest_log_id(self.jobs_dir, harness),
                    *(i for i in pending if type(i) is int and 0 < i < MAX_RUN_ID))
        if self.ledger is not None:
            floor = max(floor, self.ledger.max_run_id(harness))
        return floor

    def next(self, harness: str, firing: dict[str, Any] | None = None, *,
             held: bool = False) -> int:
        """A fresh id for `harness`, persisted before it is returned with `firing`'s entry
        (`held`: a firing held behind a live run) in the same write, which also drops the
        entries whose record the ledger has committed (`StateFile.set_last_run_id`);
        StateError if it cannot be."""
        with self._lock:
            last = self._last.get(harness)
            if last is None:
                # Once per harness per process: after that every id came from here.
                last = self.floor(harness)
            n = last + 1
            # MAX_RUN_ID itself is never handed out: persisted, it is a counter the next
            # boot refuses (`_counter`), and an entry no boot can settle.
            if n >= MAX_RUN_ID:
                raise StateError(f"{harness}: no run id is left after {last}, the highest "
                                 "in use (state.json, the ledger or its run logs)")
            self.state.set_last_run_id(
                harness, n, firing, held=held,
                recorded=None if self.ledger is None else self.ledger.recorded)
            self._last[harness] = n
            return n


def _one_table(doc: dict[str, Any]) -> dict[str, Any]:
    """`doc` with the previous version's counter table folded into ``runs`` (each counter
    the higher of the two), so the next write leaves only ``runs``; `doc` itself when
    there is none. Both tables are checked already."""
    previous = doc.get(PREVIOUS_KEY)
    if previous is None:
        return doc
    doc = {k: v for k, v in doc.items() if k != PREVIOUS_KEY}
    table = dict(doc.get(RUNS_KEY, {}))
    for name, old in previous.items():
        entry = table.get(name, {})
        table[name] = {**old, **entry, "last_run_id": max(old.get("last_run_id", 0),
                                                           entry.get("last_run_id", 0))}
    doc[RUNS_KEY] = table
    return doc
