"""Run history at boot and shutdown: the legacy import and closing open records.

`import_legacy` (SPEC-0022 REQ-13) moves the pre-ledger state.json run lists into the
ledger once: each legacy run becomes the lines it would have had (``decided`` for
skipped/missed, ``opened`` + ``closed`` for a finished run, ``opened`` alone for one still
running), marked ``imported: true``, in time order, each in the day file of its own time.
Invariants: no legacy run is ever imported twice — the marker ``ledger/.imported`` is
written only after every line is durable, and a retry after a failed or interrupted
import skips the imported lines already on disk; state.json loses its lists only once
the marker exists, so a failed import keeps them for the next boot; no entry ever loses
its ``last_run_id`` (`StateFile.drop_lists`), so run ids continue where they were.

`reconcile` (REQ-7, at boot before any start) and `close_open_on_shutdown` (REQ-7, clean
shutdown) close every open record as ``interrupted``; neither raises for one record's
failure, so one bad disk write cannot stop a daemon from booting or stopping. "Open"
counts every line already queued, committed or not (REQ-6's no-wait exception leaves a
resident's own-exit closed line and its restart's opened line queued): a run is closed
once, never over its own end, and a run whose opened line is still queued is closed too.

`settle_firings` (at boot, before `reconcile` and any start) gives every run id state.json
names and the ledger has no record of its record: a firing an ``on_overlap = "queue"``
one-shot held when the daemon died, or dropped with its decided line still queued, and
a run admitted with its opened line still queued (REQ-6) or killed between its id and
its opened line. A client may have been told the id, and a process may have run under it:
one found still running gets an opened line that `reconcile` closes as any crashed run,
interrupted/daemon_crash; any other a decided line, interrupted/daemon_crash. Invariant,
with `StateFile`'s: every run id handed out has a record after the next boot.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from .. import paths
from ..config.model import is_harness_name
from ..ledger.dayfiles import IMPORTED_FILE
from ..ledger.errors import LedgerError, LineRejected
from ..ledger.files import atomic_write
from ..ledger.logref import layout_paths, log_file
from ..ledger.runledger import RunLedger
from ..ledger.schema import KINDS, OUTCOMES, prepare_line
from ..ledger.scrub import Scrubbed, scrub_text
from ..timefmt import format_ns, is_rfc3339, parse_ns
from .state import LIST_KEY, MAX_RUN_ID, StateError, StateFile

log = logging.getLogger("harness.supervisor")

MARKER = IMPORTED_FILE
CRASH_NOTE = "run interrupted: the daemon stopped without closing it (daemon_crash)"
_DECIDED = frozenset({"skipped", "missed"})
_TYPE_ORDER = {"decided": 0, "opened": 0, "closed": 1}


@dataclass
class SkippedEntry(Scrubbed):
    """A legacy run that could not be imported, and why (scrubbed as it is shown)."""

    harness: str
    index: int
    problem: str

    def __str__(self) -> str:
        # Logged at boot, and the problem quotes the legacy value: scrubbed like a line.
        return scrub_text(f"{self.harness}[{self.index}]: {self.problem}")[0]


@dataclass
class ImportResult:
    """What `import_legacy` did; `error` is set when it failed (state.json kept its lists)."""

    ran: bool = False  # an import was attempted on this boot
    already: bool = False  # the marker was there: an earlier boot imported
    records: int = 0  # legacy runs now in the ledger (written now or by an interrupted try)
    lines: int = 0  # lines this call handed to the ledger (all durable unless `error`)
    found: int = 0  # imported lines an interrupted earlier try left, not written again
    skipped: list[SkippedEntry] = field(default_factory=list)
    lists_dropped: bool = False
    error: str | None = None
    state_error: str | None = None  # imported, but state.json still holds its lists


def marker_path(ledger: RunLedger) -> str:
    return os.path.join(ledger.directory, MARKER)


# -- building the lines of one legacy run ------------------------------------------------


def _time(entry: dict[str, Any], key: str) -> str | None:
    v = entry.get(key)
    if v is None:
        return None
    if not is_rfc3339(v):
        raise ValueError(f"{key} is not an RFC 3339 time: {v!r:.60}")
    return format_ns(parse_ns(v))


def _lines_of(harness: str, entry: Any, jobs_dir: str) -> list[dict[str, Any]]:
    """The ledger lines of one legacy run; ValueError saying what is wrong with it."""
    if type(entry) is not dict:
        raise ValueError(f"not an object: {entry!r:.60}")
    run_id = entry.get("run_id")
    if type(run_id) is not int or run_id < 1:
        raise ValueError(f"run_id must be an integer ≥ 1, got {run_id!r:.60}")
    outcome = entry.get("outcome")
    if outcome not in OUTCOMES:
        raise ValueError(f"unknown outcome {outcome!r:.60}")
    started = _time(entry, "started_at")
    ended = _time(entry, "ended_at")
    window = _time(entry, "window")
    first_window = _time(entry, "first_window")
    base: dict[str, Any] = {"harness": harness, "run_id": run_id, "imported": True,
                            "kind": "oneshot"}  # residents had no state.json records
    for key in ("trigger", "reason", "exit_code", "windows"):
        if entry.get(key) is not None:
            base[key] = entry[key]
    if window is not None:
        base["window"] = window
    if first_window is not None:
        base["first_window"] = first_window
    if outcome in _DECIDED:
        at = started or window or first_window
        if at is None:
            raise ValueError("a skipped/missed run needs started_at or window")
        line = {**base, "type": "decided", "at": at, "outcome": outcome}
        if started is not None:
            line["started_at"] = started
        return [line]
    if started is None:
        raise ValueError("started_at is missing")
    opened = {**{k: v for k, v in base.items() if k not in ("reason", "exit_code")},
              "type": "opened", "at": started, "started_at": started, "outcome": "running"}
    logfile = _legacy_log(jobs_dir, harness, run_id)
    if logfile is not None:
        opened["log"] = paths.as_text(logfile)
    if outcome == "running":
        return [opened]  # reconciliation closes it as daemon_crash
    closed: dict[str, Any] = {"harness": harness, "run_id": run_id, "imported": True,
                              "type": "closed", "outcome": outcome,
                              "at": ended or started}  # an interrupted run may have no end
    for key in ("reason", "exit_code"):
        if entry.get(key) is not None:
            closed[key] = entry[key]
    if ended is not None:
        closed["ended_at"] = ended
        duration = (parse_ns(ended) - parse_ns(started)) // 1_000_000
        if duration < 0:
            raise ValueError(f"ended_at {ended} is before started_at {started}")
        closed["duration_ms"] = duration
    return [opened, closed]


def _legacy_log(jobs_dir: str, harness: str, run_id: int) -> str | None:
    """The run's per-run log path when it (or its compressed form) is still on disk.

    A log keep_runs already deleted is not named: we cannot tell it from a run that never
    had one, and a named missing log would read as pruned.
    """
    path = os.path.join(jobs_dir, harness, f"{run_id}.log")
    return path if os.path.exists(path) or os.path.exists(path + ".zst") else None


def _collect(entries: dict[str, Any], jobs_dir: str
             ) -> tuple[list[dict[str, Any]], int, list[SkippedEntry]]:
    """The lines of every legacy record list in `entries` (state.json's table, each entry
    an object: `StateFile` refuses the file otherwise), in time order."""
    lines: list[dict[str, Any]] = []
    skipped: list[SkippedEntry] = []
    records = 0
    seen: set[tuple[str, int]] = set()
    for harness in sorted(entries):
        runs = entries[harness].get(LIST_KEY)
        if runs is None:
            continue
        if type(runs) is not list:
            skipped.append(SkippedEntry(harness, -1, "the run list is not a list"))
            continue
        for i, run in enumerate(runs):
            try:
                got = _lines_of(harness, run, jobs_dir)
                for line in got:
                    prepare_line(line)  # the ledger's own check, before anything is queued
            except (ValueError, LineRejected) as exc:
                msg = exc.message if isinstance(exc, LineRejected) else str(exc)
                skipped.append(SkippedEntry(harness, i, msg))
                continue
            key = (harness, got[0]["run_id"])
            if key in seen:
                skipped.append(SkippedEntry(harness, i, f"run_id {key[1]} appears twice"))
                continue
            seen.add(key)
            records += 1
            lines.extend(got)
    lines.sort(key=lambda x: (parse_ns(x["at"]), x["harness"], x["run_id"],
                              _TYPE_ORDER[x["type"]]))
    return lines, records, skipped


def _on_disk(ledger: RunLedger) -> tuple[set[tuple[str, int, str]], set[tuple[str, int]]]:
    """What an earlier, interrupted try left: (harness, run_id, type) of every imported
    line, and (harness, run_id) of every run the daemon itself wrote since."""
    imported: set[tuple[str, int, str]] = set()
    native: set[tuple[str, int]] = set()
    for o in ledger.since(0):
        if o.get("imported"):
            imported.add((o["harness"], o["run_id"], o["type"]))
        else:
            native.add((o["harness"], o["run_id"]))
    return imported, native


def _write_marker(path: str, lines: int, now: int) -> None:
    atomic_write(path, f"imported {lines} lines at {format_ns(now)}\n".encode())


def import_legacy(ledger: RunLedger, state_path: str, *, created: bool | None = None,
                  now: int | None = None) -> ImportResult:
    """Import state.json's legacy run lists into `ledger` once (REQ-13); never raises.

    `created` is whether this boot created ledger/ (default: `ledger.created`). The import
    runs on that first boot, and again on a later boot only while no marker exists and
    state.json still holds lists (the earlier try failed or was cut short).
    """
    res = ImportResult()
    created = ledger.created if created is None else created
    now = ledger.clock() if now is None else now
    state = StateFile(state_path)
    marker = marker_path(ledger)
    try:
        state.load()
        if os.path.exists(marker):
            res.already = True
            if state.has_legacy_lists():  # imported, but the state save was lost
                state.drop_lists({})
                res.lists_dropped = True
            return res
        if not created and not state.has_legacy_lists():
            return res  # a ledger from an earlier boot and nothing waiting to import
        jobs_dir = os.path.join(os.path.dirname(os.path.abspath(state_path)), "jobs")
        lines, res.records, res.skipped = _collect(state.entries(), jobs_dir)
    except StateError as exc:
        res.error = str(exc)
        log.error("ledger import: %s", exc)
        return res
    res.ran = True
    done: set[tuple[str, int, str]] = set()
    if not created:
        done, native = _on_disk(ledger)
        # Folding a legacy run into a run the daemon wrote under the same id would mix two
        # runs into one record; the live record wins and the legacy one is reported.
        clash = {(x["harness"], x["run_id"]) for x in lines} & native
        for h, rid in sorted(clash):
            res.skipped.append(SkippedEntry(h, -1, f"run_id {rid} is already in the ledger"))
            res.records -= 1
        lines = [x for x in lines if (x["harness"], x["run_id"]) not in clash]
    for s in res.skipped:
        log.warning("ledger import: skipped legacy run %s", s)
    todo = [x for x in lines if (x["harness"], x["run_id"], x["type"]) not in done]
    res.found = len(lines) - len(todo)
    try:
        for i, line in enumerate(todo):
            # Only the last line waits for the disk: the writer syncs every earlier
            # buffered line with it, across day files.
            ledger.append(line, sync=i == len(todo) - 1)
            res.lines += 1
        _write_marker(marker, len(lines), now)
    except (LedgerError, OSError) as exc:
        res.error = (f"import into {ledger.directory} failed with {res.lines} of {len(todo)} "
                     f"line(s) handed to the ledger: {exc}")
        log.error("ledger import: %s; state.json keeps its run lists for the next boot",
                  res.error)
        return res
    imported_max: dict[str, int] = {}
    for x in lines:
        imported_max[x["harness"]] = max(imported_max.get(x["harness"], 0), x["run_id"])
    try:
        state.drop_lists(imported_max)
        res.lists_dropped = True
    except StateError as exc:
        # The marker exists, so the next boot drops the lists without importing again.
        res.state_error = str(exc)
        log.error("ledger import: done, but %s", exc)
    return res


# -- closing open records ----------------------------------------------------------------


def _note_in_log(path: Any, text: str, now: int) -> bool:
    """Append one line to an existing run log; False (logged) when it cannot."""
    if type(path) is not str or not path or not os.path.isfile(path):
        return False
    try:
        # No O_CREAT: a log keep_runs deleted is not recreated to hold only this line.
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
        try:
            os.write(fd, f"{format_ns(now)} harness: {text}\n".encode())
        finally:
            os.close(fd)
    except OSError as exc:
        log.warning("cannot note the interruption in %s: %s", path, exc)
        return False
    return True


def _close_all(ledger: RunLedger, extra: dict[str, Any], now: int,
               with_end: bool) -> list[dict[str, Any]]:
    """Close every record still open, counting lines already queued: REQ-6's no-wait
    exception can leave a resident's own-exit closed line (and its restart's opened
    line) queued at shutdown, and the committed view alone would close that run a second
    time, its fold then reading interrupted instead of its own outcome (REQ-5)."""
    closed: list[dict[str, Any]] = []
    for rec in ledger.open_records(queued=True):
        line: dict[str, Any] = {"type": "closed", "harness": rec["harness"],
                                "run_id": rec["run_id"], "at": format_ns(now),
                                "outcome": "interrupted", **extra}
        if with_end:
            line["ended_at"] = format_ns(now)
            started = rec.get("started_at")
            if isinstance(started, str) and is_rfc3339(started):
                line["duration_ms"] = max(0, (now - parse_ns(started)) // 1_000_000)
        try:
            entry = ledger.enqueue_closing(line)
            if entry is None:
                continue  # a line queued since the look closed it first
            ledger.wait(entry)
        except LedgerError as exc:
            # Not fatal: the line stays queued and the writer retries it in order.
            log.error("cannot close open run: %s", exc)
            continue
        closed.append(ledger.get(rec["harness"], rec["run_id"]) or {**rec, **line})
    return closed


def reconcile(ledger: RunLedger, now: int) -> list[dict[str, Any]]:
    """Close every open record as interrupted/daemon_crash (REQ-7); return them, closed.

    No ended_at: nobody saw the run end. Each record's log (per-run or a resident's durable
    log) gains a line saying so when it exists.
    """
    closed = _close_all(ledger, {"reason": "daemon_crash"}, now, with_end=False)
    for rec in closed:
        # The log file, not the field: a path the ledger stored cut names another file.
        _note_in_log(log_file(rec, ledger.state_dir), CRASH_NOTE, now)
    return closed


def close_open_on_shutdown(ledger: RunLedger, now: int) -> list[dict[str, Any]]:
    """Close every record still open at a clean shutdown: interrupted/shutdown, ended now."""
    return _close_all(ledger, {"reason": "shutdown"}, now, with_end=True)


# -- run ids handed out whose record the daemon died without -------------------------

def _entry_fields(harness: Any, entry: Any) -> tuple[int, str, str, str | None, str]:
    """(run_id, trigger, at, window, kind) of one ``held`` or ``issued`` entry, times
    canonical; ValueError saying what is wrong. A held entry has no kind: a one-shot's."""
    if type(harness) is not str or type(entry) is not dict:
        raise ValueError(f"not a harness name and an object: {harness!r:.60}: {entry!r:.60}")
    if not is_harness_name(harness):
        # A hand edit: recorded, it would be a run of no harness a config can name, and
        # a log path built from it ("../x") would leave the state dir.
        raise ValueError(f"not a harness name: {harness!r:.60}")
    run_id, trigger, window, at = (entry.get(k) for k in ("run_id", "trigger", "window", "at"))
    kind = entry.get("kind", "oneshot")
    if not is_rfc3339(at):
        raise ValueError(f"at is not an RFC 3339 time: {at!r:.60}")
    if type(run_id) is not int or not 0 < run_id < MAX_RUN_ID:
        raise ValueError(f"run_id must be an integer ≥ 1, got {run_id!r:.60}")
    if type(trigger) is not str:
        raise ValueError(f"trigger must be a string, got {trigger!r:.60}")
    if window is not None and not is_rfc3339(window):
        raise ValueError(f"window is not an RFC 3339 time: {window!r:.60}")
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {kind!r:.60}")
    return (run_id, trigger, format_ns(parse_ns(at)),
            None if window is None else format_ns(parse_ns(window)), kind)


def _lost_line(harness: str, entry: Any, now: int) -> dict[str, Any]:
    """The decided line recording a firing nothing shows a process of; ValueError."""
    run_id, trigger, at, window, kind = _entry_fields(harness, entry)
    # Decided: no process of it is known. No ended_at, like every record a crash ended:
    # nobody saw when the daemon died.
    line: dict[str, Any] = {"type": "decided", "harness": harness, "run_id": run_id,
                            "at": format_ns(now), "kind": kind, "trigger": trigger,
                            "started_at": at,
                            **(_decision(entry) or {"outcome": "interrupted",
                                                    "reason": "daemon_crash"})}
    if window is not None:
        line["window"] = window
    return line


def _decision(entry: dict[str, Any]) -> dict[str, Any] | None:
    """The decided line's fields an entry carries (a skip's or missed windows', decided
    before the id was handed out: what the client was told), or None when it carries
    none or they are not a skip's or a miss's (a hand edit: the crash is recorded
    instead, since a field the schema refuses would leave the id with no record)."""
    d = entry.get("decided")
    if type(d) is not dict:
        return None
    outcome, reason = d.get("outcome"), d.get("reason")
    if outcome == "skipped" and type(reason) is str and set(d) == {"outcome", "reason"}:
        return {"outcome": outcome, "reason": reason}
    first, windows = d.get("first_window"), d.get("windows")
    if (outcome == "missed" and set(d) == {"outcome", "first_window", "windows"}
            and is_rfc3339(first) and type(windows) is int and 0 < windows < MAX_RUN_ID):
        return {"outcome": outcome, "first_window": format_ns(parse_ns(first)),
                "windows": windows}
    return None


def _ran_line(harness: str, entry: Any, now: int, state_dir: str) -> dict[str, Any]:
    """The opened line of a run whose process outlived the daemon that lost its opened
    line; `reconcile` then closes it as it closes any run a crash left open. No
    started_at: the entry's time is when the id was handed out, not when the process
    began. Its log is named when the file is there (a one-shot's per-run log, or a
    resident's durable log); ValueError."""
    run_id, trigger, _at, window, kind = _entry_fields(harness, entry)
    line: dict[str, Any] = {"type": "opened", "harness": harness, "run_id": run_id,
                            "at": format_ns(now), "kind": kind, "trigger": trigger,
                            "outcome": "running"}
    if window is not None:
        line["window"] = window
    path = layout_paths(harness, run_id, kind, state_dir)[0]
    if os.path.isfile(path):
        line["log"] = paths.as_text(path)
    return line


def settle_firings(ledger: RunLedger, state: StateFile, now: int,
                   ran: Collection[tuple[str, int]] = ()) -> list[dict[str, Any]]:
    """Give every run id state.json names (``held`` and ``issued`` entries) and the ledger
    has no record of its record (at boot, before `reconcile` and any start); return the
    lines written. `ran` is the (harness, run_id) of every process an earlier daemon left
    running (`orphans.find_orphans`): such a run gets an opened line, which `reconcile`
    closes interrupted/daemon_crash; any other a decided line, interrupted/daemon_crash.
    Each entry is settled on its own. An entry whose record exists (the daemon died after
    writing it) is dropped, as is one that cannot be read (logged) unless another stays;
    one whose line the disk refused stays for the next boot."""
    written: list[dict[str, Any]] = []
    done: list[tuple[str, int]] = []  # entries settled: recorded now or before, or refused
    kept = False
    ran = set(ran)
    for problem in state.unreadable_tables():
        log.warning("%s: %s: the run ids it names cannot be recorded", state.path, problem)
    for table, held in ((state.held(), True), (state.issued(), False)):
        for harness, entry in table:
            try:
                # A hand-edited run id may be any JSON value, a list too: only an int is
                # looked up (`_entry_fields` names the others).
                run_id = entry.get("run_id") if type(entry) is dict else None
                started = type(run_id) is int and (harness, run_id) in ran
                line = (_ran_line(harness, entry, now, ledger.state_dir) if started
                        else _lost_line(harness, entry, now))
            except ValueError as exc:
                # Scrubbed: a hand-edited name (or value) may be a pasted key.
                what = "held firing" if held else "run id issued to"
                log.warning("%s: %s", state.path, scrub_text(f"{what} {harness}: {exc}")[0])
                continue
            key = (harness, line["run_id"])
            if key in done:
                continue  # named twice (held, then issued): one record
            done.append(key)
            if ledger.get(*key) is not None:
                continue
            try:
                ledger.append(line, sync=True)
            except LineRejected as exc:  # a hand-edited entry the schema refuses
                # Scrubbed: the name the ledger refused may read as a secret.
                log.warning("%s: %s", state.path,
                            scrub_text(f"run id {key[1]} of {harness}: {exc}")[0])
                continue
            except LedgerError as exc:
                log.error("cannot record the run %s/%d: %s", harness, key[1], exc)
                done.pop()
                kept = True
                continue
            if started:
                log.warning("run %s/%d: its opened line was lost with the daemon, but its "
                            "process outlived it; recorded, to be closed as interrupted "
                            "(daemon_crash)", harness, key[1])
            elif held:
                log.warning("run %s/%d: the queued firing was lost with the daemon; closed "
                            "as interrupted (daemon_crash)", harness, key[1])
            else:
                told = line["outcome"] if line["outcome"] != "interrupted" else \
                    "interrupted (daemon_crash)"
                log.warning("run %s/%d: its record was lost with the daemon, and no process "
                            "of it outlived it; recorded as %s", harness, key[1], told)
            written.append(ledger.get(*key) or line)
    try:
        # All of them when none is kept: an entry that cannot be read goes too.
        state.forget_firings(done if kept else None)
    except StateError as exc:
        # The records are written: the next boot finds them and only drops the entries.
        log.error("%s", exc)
    return written
