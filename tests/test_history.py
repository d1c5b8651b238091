"""Run history at boot: the legacy import (SPEC-0022 REQ-13) and closing open runs (REQ-7).

Every test uses a real `RunLedger` on tmp dirs and reads the day files back: the lines
the import wrote, in which file, with which values. The upgrade scenario ends with the
real `harness runs nightly --json` reading the same files in a subprocess.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from conftest import World
from harness.ledger.errors import LedgerUnavailable
from harness.ledger.files import FaultyFiles
from harness.ledger.runledger import RunLedger
from harness.supervisor.history import (
    CRASH_NOTE,
    SkippedEntry,
    close_open_on_shutdown,
    import_legacy,
    reconcile,
    settle_firings,
)
from harness.supervisor.state import RunIds, StateFile
from harness.timefmt import format_ns, parse_ns
from ledgertools import Clock, OpenLedger, lines_of

NOW = parse_ns("2026-06-15T12:00:00Z")
BASE = parse_ns("2026-06-01T02:00:00Z")
SEC = 1_000_000_000
HOUR = 3600 * SEC
CHAIN_KEYS = ("seq", "prev", "hash")

# nightly's 20 legacy runs: (outcome, exit_code, reason). Run 13 crosses midnight, run 19
# was interrupted (no end), run 20 was still running when the old daemon stopped.
PLAN: dict[int, tuple[str, int | None, str | None]] = {
    1: ("success", 0, None), 2: ("failed", 1, None), 3: ("success", 0, None),
    4: ("skipped", None, "overlap"), 5: ("success", 0, None), 6: ("missed", None, None),
    7: ("timed_out", None, "timeout"), 8: ("success", 0, None), 9: ("failed", 2, None),
    10: ("skipped", None, "overlap"), 11: ("success", 0, None), 12: ("missed", None, None),
    13: ("success", 0, None), 14: ("cancelled", None, "manual"), 15: ("success", 0, None),
    16: ("failed", 1, None), 17: ("skipped", None, "budget"), 18: ("success", 0, None),
    19: ("interrupted", None, "daemon_crash"), 20: ("running", None, None),
}
DECIDED = {4, 6, 10, 12, 17}
FINISHED = set(PLAN) - DECIDED - {20}
TOOK = {7: 3600 * SEC, 13: 150 * SEC}  # every other finished run took 90 s


def start_of(i: int) -> int:
    if i == 13:
        return parse_ns("2026-06-06T23:59:00Z")
    return BASE + (i - 1) * 12 * HOUR


def end_of(i: int) -> int:
    return start_of(i) + TOOK.get(i, 90 * SEC)


def legacy_run(i: int) -> dict[str, Any]:
    outcome, code, reason = PLAN[i]
    run: dict[str, Any] = {"run_id": i, "trigger": "manual" if i in (3, 15) else "schedule",
                           "outcome": outcome, "started_at": format_ns(start_of(i)),
                           "ended_at": None, "exit_code": code, "reason": reason,
                           "window": None, "first_window": None, "windows": None}
    if i in FINISHED and i != 19:
        run["ended_at"] = format_ns(end_of(i))
    if outcome == "missed":
        run.update(window=format_ns(start_of(i)), first_window=format_ns(start_of(i) - HOUR),
                   windows=2)
        if i == 12:
            run["started_at"] = None  # an old missed record carried only its windows
    return run


def legacy_state(last_run_id: int = 20) -> dict[str, Any]:
    return {"paused": ["weekly"],
            "runs": {"nightly": {"last_run_id": last_run_id,
                                 "runs": [legacy_run(i) for i in sorted(PLAN)]}}}


def expected_lines() -> list[tuple[int, str, str]]:
    """(run_id, type, day file) of every line the import must write."""
    out = []
    for i in PLAN:
        if i in DECIDED:
            out.append((i, "decided", format_ns(start_of(i))[:10]))
            continue
        out.append((i, "opened", format_ns(start_of(i))[:10]))
        if i in FINISHED:
            end = start_of(i) if i == 19 else end_of(i)
            out.append((i, "closed", format_ns(end)[:10]))
    return sorted(out)


def all_lines(ledger_dir: Path) -> list[dict[str, Any]]:
    """Every complete line of every day file, with its file's day, in seq order."""
    out = []
    for f in sorted(ledger_dir.glob("*.jsonl")):
        for obj in lines_of(f):
            out.append({**obj, "_day": f.stem})
    return sorted(out, key=lambda o: o["seq"])


def strip(obj: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if k not in CHAIN_KEYS and k != "_day"}


def write_state(path: Path, doc: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))


def make_logs(state_dir: Path) -> Path:
    jobs = state_dir / "jobs" / "nightly"
    jobs.mkdir(parents=True)
    for i in (18, 19, 20):
        (jobs / f"{i}.log").write_text(f"output of run {i}\n")
    (jobs / "16.log.zst").write_bytes(b"\x28\xb5\x2f\xfd")
    return jobs


# -- REQ-13: upgrading a daemon with history ---------------------------------------------


def test_upgrade_imports_twenty_runs_once(world: World, open_ledger: OpenLedger) -> None:
    state_path = world.state / "state.json"
    write_state(state_path, legacy_state())
    jobs = make_logs(world.state)

    led = open_ledger(world.ledger, clock=Clock(NOW))
    assert led.created
    res = import_legacy(led, str(state_path))
    assert res.error is None and res.state_error is None
    assert (res.ran, res.already, res.records, res.lines, res.found) == (True, False, 20, 34, 0)
    assert res.skipped == []
    assert res.lists_dropped

    lines = all_lines(world.ledger)
    assert sorted((o["run_id"], o["type"], o["_day"]) for o in lines) == expected_lines()
    kinds = Counter(o["type"] for o in lines)
    assert kinds == {"decided": 5, "opened": 15, "closed": 14}
    assert all(o["imported"] is True and o["harness"] == "nightly" for o in lines)
    assert all(o["_day"] == o["at"][:10] for o in lines)  # each in the file of its own time
    assert [o["seq"] for o in lines] == list(range(1, 35))
    ats = [parse_ns(o["at"]) for o in lines]
    assert ats == sorted(ats)  # written in time order
    assert sorted(f.name for f in world.ledger.glob("*.jsonl")) == [
        f"2026-06-{d:02d}.jsonl" for d in range(1, 11)]

    by = {(o["run_id"], o["type"]): strip(o) for o in lines}
    s2, e2 = format_ns(start_of(2)), format_ns(end_of(2))
    assert by[(2, "opened")] == {"v": 1, "type": "opened", "at": s2, "harness": "nightly",
                                 "run_id": 2, "imported": True, "kind": "oneshot",
                                 "trigger": "schedule", "started_at": s2, "outcome": "running"}
    assert by[(2, "closed")] == {"v": 1, "type": "closed", "at": e2, "harness": "nightly",
                                 "run_id": 2, "imported": True, "outcome": "failed",
                                 "exit_code": 1, "ended_at": e2, "duration_ms": 90_000}
    assert by[(7, "closed")]["reason"] == "timeout"
    assert by[(7, "closed")]["duration_ms"] == 3_600_000
    assert by[(13, "opened")]["at"][:10] == "2026-06-06"
    assert by[(13, "closed")]["at"][:10] == "2026-06-07"
    s4 = format_ns(start_of(4))
    assert by[(4, "decided")] == {"v": 1, "type": "decided", "at": s4, "harness": "nightly",
                                  "run_id": 4, "imported": True, "kind": "oneshot",
                                  "trigger": "schedule", "outcome": "skipped",
                                  "reason": "overlap", "started_at": s4}
    w12 = format_ns(start_of(12))
    assert by[(12, "decided")] == {"v": 1, "type": "decided", "at": w12, "harness": "nightly",
                                   "run_id": 12, "imported": True, "kind": "oneshot",
                                   "trigger": "schedule", "outcome": "missed", "window": w12,
                                   "first_window": format_ns(start_of(12) - HOUR),
                                   "windows": 2}
    assert by[(19, "closed")] == {"v": 1, "type": "closed", "at": format_ns(start_of(19)),
                                  "harness": "nightly", "run_id": 19, "imported": True,
                                  "outcome": "interrupted", "reason": "daemon_crash"}
    assert (20, "closed") not in by  # still running: reconciliation closes it
    assert by[(20, "opened")]["log"] == str(jobs / "20.log")
    assert by[(16, "opened")]["log"] == str(jobs / "16.log")  # its log is compressed
    assert "log" not in by[(15, "opened")]  # no log on disk: not claimed

    marker = world.ledger / ".imported"
    assert marker.read_text() == f"imported 34 lines at {format_ns(NOW)}\n"
    assert stat.S_IMODE(marker.stat().st_mode) == 0o600
    doc = json.loads(state_path.read_text())
    assert doc == {"paused": ["weekly"], "runs": {"nightly": {"last_run_id": 20}}}
    assert stat.S_IMODE(state_path.stat().st_mode) == 0o600

    # Boot continues: reconciliation closes run 20, and its log says so.
    closed = reconcile(led, NOW)
    assert [(r["run_id"], r["outcome"], r["reason"]) for r in closed] == [
        (20, "interrupted", "daemon_crash")]
    assert (jobs / "20.log").read_text() == (
        f"output of run 20\n{format_ns(NOW)} harness: {CRASH_NOTE}\n")
    led.close()

    # A second boot imports nothing.
    before = {f.name: f.read_bytes() for f in world.ledger.iterdir()}
    again = open_ledger(world.ledger, clock=Clock(NOW + HOUR))
    assert not again.created
    res2 = import_legacy(again, str(state_path))
    assert (res2.ran, res2.already, res2.lines, res2.error) == (False, True, 0, None)
    assert {f.name: f.read_bytes() for f in world.ledger.iterdir()} == before
    assert reconcile(again, NOW + HOUR) == []

    # Run ids continue at 21.
    ids = RunIds(StateFile(str(state_path)), again, str(world.state / "jobs"))
    assert ids.next("nightly") == 21
    assert json.loads(state_path.read_text()) == {
        "paused": ["weekly"], "runs": {"nightly": {"last_run_id": 21}}}
    again.close()

    # The real CLI, reading the ledger from disk, lists all twenty.
    res_cli = world.harness("runs", "nightly", "--json")
    assert res_cli.returncode == 0, res_cli.stderr
    assert "Traceback" not in res_cli.stderr
    assert "read the ledger from disk" in res_cli.stderr
    recs = json.loads(res_cli.stdout)
    assert [r["run_id"] for r in recs] == list(range(20, 0, -1))
    assert all(r["imported"] is True and r["harness"] == "nightly" for r in recs)
    got = {r["run_id"]: r for r in recs}
    assert {i: got[i]["outcome"] for i in PLAN} == {
        **{i: PLAN[i][0] for i in PLAN}, 20: "interrupted"}
    assert got[2]["exit_code"] == 1 and got[2]["duration_ms"] == 90_000
    assert got[2]["started_at"] == s2 and got[2]["ended_at"] == e2
    assert got[20]["reason"] == "daemon_crash" and "ended_at" not in got[20]
    assert got[6]["windows"] == 2


def test_lists_are_dropped_when_the_state_save_was_lost(tmp_path: Path,
                                                        open_ledger: OpenLedger) -> None:
    state_path = tmp_path / "state.json"
    write_state(state_path, legacy_state())
    led = open_ledger(tmp_path / "ledger", clock=Clock(NOW))
    assert import_legacy(led, str(state_path)).lines == 34
    led.close()
    write_state(state_path, legacy_state())  # as if the rewrite never reached the disk
    before = sorted((f.name, f.read_bytes()) for f in (tmp_path / "ledger").iterdir())
    led2 = open_ledger(tmp_path / "ledger", clock=Clock(NOW))
    res = import_legacy(led2, str(state_path))
    assert (res.already, res.lines, res.lists_dropped) == (True, 0, True)
    assert sorted((f.name, f.read_bytes()) for f in (tmp_path / "ledger").iterdir()) == before
    assert json.loads(state_path.read_text()) == {
        "paused": ["weekly"], "runs": {"nightly": {"last_run_id": 20}}}


def test_legacy_counter_above_the_list_is_kept(tmp_path: Path, open_ledger: OpenLedger) -> None:
    state_path = tmp_path / "state.json"
    write_state(state_path, legacy_state(last_run_id=27))  # keep_runs had cut older records
    led = open_ledger(tmp_path / "ledger", clock=Clock(NOW))
    import_legacy(led, str(state_path))
    assert json.loads(state_path.read_text()) == {
        "paused": ["weekly"], "runs": {"nightly": {"last_run_id": 27}}}
    assert RunIds(StateFile(str(state_path)), led, str(tmp_path / "jobs")).next("nightly") == 28


def test_an_import_the_previous_version_left_waiting_ends_in_one_table(
        tmp_path: Path, open_ledger: OpenLedger) -> None:
    """The previous version's failed import: its ledger exists, the legacy lists wait,
    and its own counters (above them, runs went on) are in "harnesses". The retry
    imports the lists and leaves one table: every counter, the higher of the two."""
    state_path = tmp_path / "state.json"
    (tmp_path / "ledger").mkdir(mode=0o700)
    write_state(state_path, {**legacy_state(), "harnesses": {
        "nightly": {"last_run_id": 23}, "other": {"last_run_id": 2}}})
    led = open_ledger(tmp_path / "ledger", clock=Clock(NOW))
    assert not led.created
    res = import_legacy(led, str(state_path))
    assert (res.error, res.state_error, res.records, res.lines) == (None, None, 20, 34)
    assert json.loads(state_path.read_text()) == {"paused": ["weekly"], "runs": {
        "nightly": {"last_run_id": 23}, "other": {"last_run_id": 2}}}
    assert RunIds(StateFile(str(state_path)), led, str(tmp_path / "jobs")).next("nightly") == 24


class FullDiskFrom(FaultyFiles):
    """Writes to day files of `day` or later fail with ENOSPC: the disk filled mid-import."""

    def __init__(self, day: str) -> None:
        super().__init__()
        self.day = day
        self.paths: dict[int, str] = {}

    def open_append(self, path: str) -> tuple[int, bool]:
        fd, created = super().open_append(path)
        self.paths[fd] = path
        return fd, created

    def write(self, fd: int, data: bytes) -> int:
        if os.path.basename(self.paths.get(fd, ""))[:10] >= self.day:
            raise OSError(errno.ENOSPC, "No space left on device (injected)")
        return super().write(fd, data)


def test_crash_mid_import_keeps_lists_and_retry_has_no_duplicates(
        tmp_path: Path, open_ledger: OpenLedger) -> None:
    state_path = tmp_path / "state.json"
    write_state(state_path, legacy_state())
    state_before = state_path.read_bytes()
    ledger_dir = tmp_path / "ledger"

    led = open_ledger(ledger_dir, clock=Clock(NOW), files=FullDiskFrom("2026-06-06"),
                      retry_min=0.01, retry_max=0.05)
    res = import_legacy(led, str(state_path))
    assert res.error is not None and res.error.startswith(f"import into {ledger_dir} failed")
    assert "No space left on device" in res.error
    assert not res.lists_dropped
    with pytest.raises(LedgerUnavailable):  # the daemon dies with lines still queued
        led.close(timeout=0.2)
    assert state_path.read_bytes() == state_before  # the lists wait for the next boot
    assert not (ledger_dir / ".imported").exists()
    partial = all_lines(ledger_dir)
    want_partial = [x for x in expected_lines() if x[2] < "2026-06-06"]
    assert sorted((o["run_id"], o["type"], o["_day"]) for o in partial) == want_partial
    assert len(partial) == 17

    # The retry: ledger/ exists now, but no marker and the lists are still there.
    led2 = open_ledger(ledger_dir, clock=Clock(NOW))
    assert not led2.created
    res2 = import_legacy(led2, str(state_path))
    assert res2.error is None
    assert (res2.ran, res2.records, res2.found, res2.lines) == (True, 20, 17, 17)
    lines = all_lines(ledger_dir)
    keys = [(o["run_id"], o["type"]) for o in lines]
    assert len(keys) == len(set(keys)) == 34  # no line twice
    assert sorted((o["run_id"], o["type"], o["_day"]) for o in lines) == expected_lines()
    assert (ledger_dir / ".imported").read_text() == f"imported 34 lines at {format_ns(NOW)}\n"
    assert json.loads(state_path.read_text()) == {
        "paused": ["weekly"], "runs": {"nightly": {"last_run_id": 20}}}
    recs, _ = led2.query(_all_nightly())
    assert sorted(r["run_id"] for r in recs) == list(range(1, 21))
    assert import_legacy(led2, str(state_path)).lines == 0  # and a third boot: nothing


def _all_nightly() -> Any:
    from harness.ledger.query import Query
    return Query(names=frozenset({"nightly"}), limit=None)


def test_malformed_entries_are_skipped_and_named(tmp_path: Path,
                                                 open_ledger: OpenLedger) -> None:
    good = legacy_run(1)
    state_path = tmp_path / "state.json"
    write_state(state_path, {"runs": {
        "nightly": {"last_run_id": 9, "runs": [
            good,
            "garbage",
            {**legacy_run(2), "run_id": 0},
            {**legacy_run(3), "outcome": "exploded"},
            {**legacy_run(5), "started_at": "yesterday"},
            {**legacy_run(8), "started_at": None},
            {**good},
            {**legacy_run(9), "ended_at": format_ns(start_of(9) - SEC)},
            {**legacy_run(11), "exit_code": "1"},
        ]},
        "weekly": {"last_run_id": 3, "runs": "not a list"},
        "monthly": {"runs": None, "note": "k"},  # a list, or what is left of one: no counter
    }})
    led = open_ledger(tmp_path / "ledger", clock=Clock(NOW))
    res = import_legacy(led, str(state_path))
    assert res.error is None
    assert res.records == 1 and res.lines == 2
    assert [(s.harness, s.index) for s in res.skipped] == [
        ("nightly", 1), ("nightly", 2), ("nightly", 3), ("nightly", 4), ("nightly", 5),
        ("nightly", 6), ("nightly", 7), ("nightly", 8), ("weekly", -1)]
    msgs = [str(s) for s in res.skipped]
    assert msgs[0] == "nightly[1]: not an object: 'garbage'"
    assert msgs[1] == "nightly[2]: run_id must be an integer ≥ 1, got 0"
    assert msgs[2] == "nightly[3]: unknown outcome 'exploded'"
    assert msgs[3] == "nightly[4]: started_at is not an RFC 3339 time: 'yesterday'"
    assert msgs[4] == "nightly[5]: started_at is missing"
    assert msgs[5] == "nightly[6]: run_id 1 appears twice"
    assert msgs[6].startswith("nightly[7]: ended_at ") and "is before started_at" in msgs[6]
    assert msgs[7] == "nightly[8]: field 'exit_code' must be an integer (64-bit), got '1'"
    assert res.skipped[-1] == SkippedEntry("weekly", -1, "the run list is not a list")
    assert [(o["run_id"], o["type"]) for o in all_lines(tmp_path / "ledger")] == [
        (1, "opened"), (1, "closed")]
    # Every entry keeps a counter, whatever its list was; none is dropped.
    assert json.loads(state_path.read_text()) == {"runs": {
        "nightly": {"last_run_id": 9}, "weekly": {"last_run_id": 3},
        "monthly": {"last_run_id": 0, "note": "k"}}}


@pytest.mark.parametrize(("doc", "problem"), [
    ({"runs": []}, "'runs' must be an object, not a list"),
    ({"runs": {"nightly": {"last_run_id": 4, "runs": [legacy_run(1)]}, "weird": "x"}},
     'runs.weird must be an object, not "x"'),
    ({"runs": {"nightly": {"last_run_id": -4, "runs": [legacy_run(1)]}}},
     "runs.nightly.last_run_id must be an integer from 0 to 9223372036854775806, not -4"),
])
def test_a_table_whose_counters_cannot_be_read_is_an_error_and_nothing_is_written(
        tmp_path: Path, open_ledger: OpenLedger, doc: dict[str, Any], problem: str) -> None:
    """The table holds the run id counters: one the daemon cannot read is not taken as 0
    (the boot stops on it), and the import leaves everything for the fixed file's boot."""
    state_path = tmp_path / "state.json"
    write_state(state_path, doc)
    before = state_path.read_bytes()
    led = open_ledger(tmp_path / "ledger", clock=Clock(NOW))
    res = import_legacy(led, str(state_path))
    assert res.error == f"{state_path}: {problem}"
    assert (res.ran, res.lines, res.lists_dropped) == (False, 0, False)
    assert state_path.read_bytes() == before
    assert sorted(os.listdir(tmp_path / "ledger")) == []


def test_corrupt_state_is_an_error_and_nothing_is_written(tmp_path: Path,
                                                          open_ledger: OpenLedger) -> None:
    state_path = tmp_path / "state.json"
    state_path.write_text('{"runs": ')
    led = open_ledger(tmp_path / "ledger", clock=Clock(NOW))
    res = import_legacy(led, str(state_path))
    assert res.error is not None
    assert res.error.startswith(f"{state_path}: not valid JSON: Expecting value")
    assert not res.ran
    assert state_path.read_text() == '{"runs": '
    assert sorted(os.listdir(tmp_path / "ledger")) == []


def test_no_state_file_marks_the_import_done(tmp_path: Path, open_ledger: OpenLedger) -> None:
    led = open_ledger(tmp_path / "ledger", clock=Clock(NOW))
    res = import_legacy(led, str(tmp_path / "state.json"))
    assert (res.ran, res.records, res.lines, res.error) == (True, 0, 0, None)
    assert (tmp_path / "ledger" / ".imported").read_text() == (
        f"imported 0 lines at {format_ns(NOW)}\n")
    assert not list((tmp_path / "ledger").glob("*.jsonl"))


def test_existing_ledger_without_lists_imports_nothing(tmp_path: Path,
                                                       open_ledger: OpenLedger) -> None:
    (tmp_path / "ledger").mkdir(mode=0o700)
    write_state(tmp_path / "state.json", {"runs": {"nightly": {"last_run_id": 3}}})
    led = open_ledger(tmp_path / "ledger", clock=Clock(NOW))
    res = import_legacy(led, str(tmp_path / "state.json"))
    assert (res.ran, res.already, res.lines) == (False, False, 0)
    assert not (tmp_path / "ledger" / ".imported").exists()


# -- REQ-7: closing open records ------------------------------------------------------------


def seed(directory: Path, lines: list[dict[str, Any]]) -> None:
    led = RunLedger(str(directory))
    try:
        for line in lines:
            led.append(line, sync=True)
    finally:
        led.close()


def opened(harness: str, run_id: int, start: int, **extra: Any) -> dict[str, Any]:
    return {"type": "opened", "harness": harness, "run_id": run_id, "at": format_ns(start),
            "kind": "oneshot", "trigger": "schedule", "started_at": format_ns(start),
            "outcome": "running", **extra}


def closed(harness: str, run_id: int, end: int) -> dict[str, Any]:
    return {"type": "closed", "harness": harness, "run_id": run_id, "at": format_ns(end),
            "outcome": "success", "exit_code": 0, "ended_at": format_ns(end)}


def test_daemon_killed_mid_run(world: World, open_ledger: OpenLedger) -> None:
    jobs = world.state / "jobs" / "nightly"
    jobs.mkdir(parents=True)
    logs = world.state / "logs"
    logs.mkdir()
    for i in range(1, 5):
        (jobs / f"{i}.log").write_text(f"run {i}\n")
    (logs / "watcher.log").write_text("resident output\n")
    t = NOW - 10 * HOUR
    seed(world.ledger, [
        *[x for i in range(1, 4) for x in (opened("nightly", i, t + i * HOUR,
                                                  log=str(jobs / f"{i}.log")),
                                           closed("nightly", i, t + i * HOUR + 60 * SEC))],
        opened("nightly", 4, t + 4 * HOUR, log=str(jobs / "4.log")),
        opened("watcher", 2, t, kind="resident", trigger="autostart",
               log=str(logs / "watcher.log")),
        opened("gone", 1, t, log=str(world.state / "jobs" / "gone" / "1.log")),
    ])
    # The daemon was SIGKILLed here: run 4 and the others were never closed.

    led = open_ledger(world.ledger, clock=Clock(NOW))
    assert not led.created
    assert import_legacy(led, str(world.state / "state.json")).lines == 0
    got = sorted(reconcile(led, NOW), key=lambda r: (r["harness"], r["run_id"]))
    assert [(r["harness"], r["run_id"], r["outcome"], r["reason"]) for r in got] == [
        ("gone", 1, "interrupted", "daemon_crash"),
        ("nightly", 4, "interrupted", "daemon_crash"),
        ("watcher", 2, "interrupted", "daemon_crash")]
    assert all("ended_at" not in r and "duration_ms" not in r for r in got)
    rec4 = led.get("nightly", 4)
    assert rec4 is not None
    assert (rec4["outcome"], rec4["reason"], rec4.get("ended_at")) == (
        "interrupted", "daemon_crash", None)

    tail = all_lines(world.ledger)[-3:]
    assert sorted((strip(o) for o in tail), key=lambda o: o["harness"]) == [
        {"v": 1, "type": "closed", "at": format_ns(NOW), "harness": h, "run_id": n,
         "outcome": "interrupted", "reason": "daemon_crash"}
        for h, n in (("gone", 1), ("nightly", 4), ("watcher", 2))]
    note = f"{format_ns(NOW)} harness: {CRASH_NOTE}\n"
    assert (jobs / "4.log").read_text() == "run 4\n" + note
    assert (logs / "watcher.log").read_text() == "resident output\n" + note
    assert (jobs / "3.log").read_text() == "run 3\n"  # closed runs are not touched
    assert not (world.state / "jobs" / "gone").exists()  # a missing log is not created
    assert reconcile(led, NOW) == []  # nothing left open

    ids = RunIds(StateFile(str(world.state / "state.json")), led, str(world.state / "jobs"))
    assert ids.next("nightly") == 5
    led.close()

    cli = world.harness("runs", "nightly", "--json")
    assert cli.returncode == 0, cli.stderr
    first = json.loads(cli.stdout)[0]
    assert (first["run_id"], first["outcome"], first["reason"]) == (4, "interrupted",
                                                                    "daemon_crash")
    assert "ended_at" not in first


def test_a_queued_run_still_running_at_the_upgrade_is_closed_at_that_boot(
    tmp_path: Path, open_ledger: OpenLedger
) -> None:
    """Legacy history under on_overlap = "queue": run 7 was skipped while run 6 was held,
    and run 6 started later and was still running when the old daemon died. Imported in
    time order, run 6's opened line follows run 7's: memory took it for a late line of a
    record it had let go and did not hold it, so REQ-7's reconcile at that boot closed
    nothing, and run 6 read running for the whole life of the daemon."""
    state_path = tmp_path / "state.json"
    write_state(state_path, {"runs": {"nightly": {"last_run_id": 7, "runs": [
        {"run_id": 5, "trigger": "manual", "outcome": "success",
         "started_at": format_ns(NOW - 3 * HOUR), "ended_at": format_ns(NOW - 2 * HOUR),
         "exit_code": 0},
        {"run_id": 7, "trigger": "manual", "outcome": "skipped", "reason": "overlap",
         "started_at": format_ns(NOW - 150 * 60 * SEC)},
        {"run_id": 6, "trigger": "manual", "outcome": "running",
         "started_at": format_ns(NOW - 2 * HOUR)},
    ]}}})
    led = open_ledger(tmp_path / "ledger", clock=Clock(NOW))
    res = import_legacy(led, str(state_path))
    assert (res.error, res.records, res.lines) == (None, 3, 4)
    assert [(o["run_id"], o["type"]) for o in all_lines(tmp_path / "ledger")] == [
        (5, "opened"), (7, "decided"), (5, "closed"), (6, "opened")]
    closed = reconcile(led, NOW)
    assert [(r["run_id"], r["seq"], r["outcome"], r["reason"], r["started_at"])
            for r in closed] == [
        (6, 4, "interrupted", "daemon_crash", format_ns(NOW - 2 * HOUR))]
    assert led.open_records() == []
    led.close()
    led = open_ledger(tmp_path / "ledger", clock=Clock(NOW))
    assert reconcile(led, NOW) == []  # the next boot finds nothing left open


def test_a_crash_note_goes_to_the_log_a_cut_path_stood_for_never_to_the_file_it_names(
        tmp_path: Path, open_ledger: OpenLedger) -> None:
    """REQ-7's note on a deep state dir, where the ledger holds each log path cut to 256
    bytes (REQ-4): run 1's cut path is its DESIGN §2 log under the ledger's state dir and
    gets the note; run 2's is not, and its first 256 bytes name another file, which a
    note must never reach."""
    state = tmp_path / ("s" * 120) / ("t" * 120) / "harness"
    jobs = state / "jobs" / "nightly"
    jobs.mkdir(parents=True)
    mine = jobs / "1.log"
    mine.write_text("output of run 1\n")
    room = 256 - len(str(tmp_path).encode()) - 1
    other = tmp_path / ("o" * room)  # a path of exactly 256 bytes
    other.write_text("other\n")
    led = open_ledger(state / "ledger", clock=Clock(NOW))
    for run_id, log in ((1, str(mine)), (2, f"{other}-elsewhere/2.log")):
        led.append({"type": "opened", "harness": "nightly", "run_id": run_id,
                    "kind": "oneshot", "log": log})
    assert [len(o["log"].encode()) for o in all_lines(state / "ledger")] == [256, 256]

    closed = reconcile(led, NOW)
    assert [(r["run_id"], r["outcome"], r["reason"], r.get("log_pruned")) for r in closed] == [
        (1, "interrupted", "daemon_crash", None), (2, "interrupted", "daemon_crash", None)]
    assert mine.read_text() == f"output of run 1\n{format_ns(NOW)} harness: {CRASH_NOTE}\n"
    assert other.read_text() == "other\n"


def test_clean_shutdown_closes_with_an_end(tmp_path: Path, open_ledger: OpenLedger) -> None:
    d = tmp_path / "ledger"
    seed(d, [opened("nightly", 5, NOW - 90 * SEC),
             opened("watcher", 3, NOW - 2 * HOUR, kind="resident", trigger="restart"),
             opened("odd", 1, NOW - SEC, started_at=None)])
    led = open_ledger(d, clock=Clock(NOW))
    got = sorted(close_open_on_shutdown(led, NOW), key=lambda r: r["harness"])
    assert [(r["harness"], r["outcome"], r["reason"], r["ended_at"], r.get("duration_ms"))
            for r in got] == [
        ("nightly", "interrupted", "shutdown", format_ns(NOW), 90_000),
        ("odd", "interrupted", "shutdown", format_ns(NOW), None),
        ("watcher", "interrupted", "shutdown", format_ns(NOW), 7_200_000)]
    last = sorted((strip(o) for o in all_lines(d)[-3:]), key=lambda o: o["harness"])
    assert last[0] == {"v": 1, "type": "closed", "at": format_ns(NOW), "harness": "nightly",
                       "run_id": 5, "outcome": "interrupted", "reason": "shutdown",
                       "ended_at": format_ns(NOW), "duration_ms": 90_000}
    assert led.open_records() == []
    assert close_open_on_shutdown(led, NOW) == []


def test_shutdown_closes_only_what_the_queued_lines_leave_open(
        tmp_path: Path, open_ledger: OpenLedger) -> None:
    """REQ-6's no-wait exception meets REQ-7's shutdown close. A resident that exited 1 on
    its own has its closed line queued, not yet durable (a sync that hangs), and the
    restart that followed has its opened line queued behind it. The shutdown closes the
    restart, whose opened line is not even committed, and leaves the run that exited
    with its own outcome: no second closed line overwrites it."""
    d = tmp_path / "ledger"
    seed(d, [opened("worker", 1, NOW - HOUR, kind="resident", trigger="autostart")])
    files = FaultyFiles()
    led = open_ledger(d, clock=Clock(NOW), files=files)
    release = files.inject("sync", hang=True)
    assert release is not None
    got: list[dict[str, Any]] = []
    try:
        # What runner._close and the restart queue without waiting (REQ-6's exception).
        led.enqueue({"type": "closed", "harness": "worker", "run_id": 1,
                     "at": format_ns(NOW - 2 * SEC), "outcome": "failed", "exit_code": 1,
                     "ended_at": format_ns(NOW - 2 * SEC), "duration_ms": 3_598_000},
                    sync=True)
        led.enqueue(opened("worker", 2, NOW - SEC, kind="resident", trigger="restart"),
                    sync=True)
        assert [r["run_id"] for r in led.open_records()] == [1]  # what is committed
        shut = threading.Thread(target=lambda: got.extend(close_open_on_shutdown(led, NOW)))
        shut.start()
        end = time.monotonic() + 30
        while led.stats().queued < 3 and time.monotonic() < end:  # the shutdown's line
            time.sleep(0.01)
    finally:
        files.clear("sync")  # the disk catches up
    shut.join(timeout=30)
    assert not shut.is_alive()
    assert [(r["harness"], r["run_id"], r["outcome"], r["reason"], r["ended_at"],
             r["duration_ms"]) for r in got] == [
        ("worker", 2, "interrupted", "shutdown", format_ns(NOW), 1_000)]
    assert [(o["run_id"], o["type"], o["outcome"], o.get("reason"), o.get("exit_code"))
            for o in all_lines(d)] == [
        (1, "opened", "running", None, None), (1, "closed", "failed", None, 1),
        (2, "opened", "running", None, None), (2, "closed", "interrupted", "shutdown", None)]
    rec1 = led.get("worker", 1)
    assert rec1 is not None
    assert (rec1["outcome"], rec1.get("reason"), rec1["exit_code"], rec1["ended_at"]) == (
        "failed", None, 1, format_ns(NOW - 2 * SEC))
    assert led.open_records() == []
    assert close_open_on_shutdown(led, NOW) == []


def test_retry_never_folds_a_legacy_run_into_a_live_one(tmp_path: Path,
                                                        open_ledger: OpenLedger) -> None:
    """After a failed import the daemon kept running; a legacy id it reused is reported."""
    d = tmp_path / "ledger"
    seed(d, [opened("nightly", 2, NOW - HOUR), closed("nightly", 2, NOW - HOUR + SEC)])
    state_path = tmp_path / "state.json"
    write_state(state_path, {"runs": {"nightly": {"last_run_id": 2,
                                                  "runs": [legacy_run(1), legacy_run(2)]}}})
    led = open_ledger(d, clock=Clock(NOW))
    res = import_legacy(led, str(state_path))
    assert res.error is None
    assert (res.records, res.lines) == (1, 2)
    assert res.skipped == [SkippedEntry("nightly", -1, "run_id 2 is already in the ledger")]
    rec2 = led.get("nightly", 2)
    assert rec2 is not None and "imported" not in rec2
    assert [(o["run_id"], o["type"], o.get("imported")) for o in all_lines(d)] == [
        (2, "opened", None), (2, "closed", None), (1, "opened", True), (1, "closed", True)]


def test_a_held_firing_the_disk_refuses_waits_for_the_next_boot(
        tmp_path: Path, open_ledger: OpenLedger) -> None:
    """The held firings' decided lines fail to write (ENOSPC): their entries stay in
    state.json (the writer retries the lines in order meanwhile); the next boot, on a
    disk that takes them, records both, in the entries' order, and drops them."""
    state_path = tmp_path / "state.json"
    at = "2026-06-05T10:00:00.000000000Z"
    held = {"a": {"run_id": 4, "trigger": "manual", "window": None, "at": at},
            "b": {"run_id": 9, "trigger": "schedule", "at": at,
                  "window": "2026-06-05T09:00:00Z"}}
    write_state(state_path, {"runs": {"a": {"last_run_id": 4}, "b": {"last_run_id": 9}},
                             "held": held})
    ledger_dir = tmp_path / "ledger"
    full = FaultyFiles()
    full.inject("write", errno=errno.ENOSPC)
    led = open_ledger(ledger_dir, clock=Clock(NOW), files=full, retry_min=0.01,
                      retry_max=0.05)
    assert settle_firings(led, StateFile(str(state_path)), NOW) == []
    assert json.loads(state_path.read_text())["held"] == held
    with pytest.raises(LedgerUnavailable):  # the daemon dies with both lines queued
        led.close(timeout=0.2)
    assert all_lines(ledger_dir) == []

    led2 = open_ledger(ledger_dir, clock=Clock(NOW))
    written = settle_firings(led2, StateFile(str(state_path)), NOW)
    assert [strip(r) for r in written] == [
        {"harness": "a", "run_id": 4, "kind": "oneshot", "trigger": "manual",
         "started_at": at, "outcome": "interrupted", "reason": "daemon_crash"},
        {"harness": "b", "run_id": 9, "kind": "oneshot", "trigger": "schedule",
         "started_at": at, "outcome": "interrupted", "reason": "daemon_crash",
         "window": "2026-06-05T09:00:00.000000000Z"}]
    assert json.loads(state_path.read_text()) == {
        "runs": {"a": {"last_run_id": 4}, "b": {"last_run_id": 9}}}
    assert [(o["harness"], o["run_id"], o["type"]) for o in all_lines(ledger_dir)] == [
        ("a", 4, "decided"), ("b", 9, "decided")]
    assert settle_firings(led2, StateFile(str(state_path)), NOW) == []  # a boot after: nothing


def test_every_held_firing_of_one_harness_gets_its_record(
        tmp_path: Path, open_ledger: OpenLedger) -> None:
    """Two firings of `job` named in state.json when the daemon died: run 2, dropped
    with its decided line still queued (the line landed after all), and run 4, held.
    Only run 4 is written, and both entries go. A previous version's entry (one object
    per name) is settled as before."""
    state_path = tmp_path / "state.json"
    at = "2026-06-05T10:00:00.000000000Z"
    two = {"run_id": 2, "trigger": "manual", "window": None, "at": at}
    four = {"run_id": 4, "trigger": "manual", "window": None, "at": at}
    old = {"run_id": 9, "trigger": "schedule", "window": "2026-06-05T09:00:00Z", "at": at}
    write_state(state_path, {"runs": {"job": {"last_run_id": 4}, "b": {"last_run_id": 9}},
                             "held": {"job": [two, four], "b": old}})
    ledger_dir = tmp_path / "ledger"
    seed(ledger_dir, [{"type": "decided", "harness": "job", "run_id": 2,
                       "at": format_ns(NOW - HOUR), "kind": "oneshot", "trigger": "manual",
                       "started_at": format_ns(NOW - HOUR), "outcome": "cancelled",
                       "reason": "operator", "ended_at": format_ns(NOW - HOUR)}])
    led = open_ledger(ledger_dir, clock=Clock(NOW))
    written = settle_firings(led, StateFile(str(state_path)), NOW)
    assert [strip(r) for r in written] == [
        {"harness": "job", "run_id": 4, "kind": "oneshot", "trigger": "manual",
         "started_at": at, "outcome": "interrupted", "reason": "daemon_crash"},
        {"harness": "b", "run_id": 9, "kind": "oneshot", "trigger": "schedule",
         "started_at": at, "outcome": "interrupted", "reason": "daemon_crash",
         "window": "2026-06-05T09:00:00.000000000Z"}]
    rec2 = led.get("job", 2)
    assert rec2 is not None and (rec2["outcome"], rec2["reason"]) == ("cancelled", "operator")
    assert json.loads(state_path.read_text()) == {
        "runs": {"job": {"last_run_id": 4}, "b": {"last_run_id": 9}}}


def test_every_issued_run_id_without_a_record_gets_one_saying_only_what_is_known(
        tmp_path: Path, open_ledger: OpenLedger, caplog: pytest.LogCaptureFixture) -> None:
    """The run ids a killed daemon handed out with no record on disk, as state.json names
    them. A run whose process outlived the daemon (`ran`: the boot found it) ran: it gets
    an opened line, with its log when the file is there and no started_at (the entry's
    time is its id's, not its process's), which `reconcile` closes interrupted/
    daemon_crash as any crashed run; a held firing started so too. Any other gets a
    decided line at its entry's time. One whose record exists is only dropped, as is one
    that cannot be read; then state.json names none."""
    at = "2026-06-15T11:00:00.000000000Z"
    window = "2026-06-15T10:00:00.000000000Z"
    (tmp_path / "jobs" / "job").mkdir(parents=True)
    log5 = tmp_path / "jobs" / "job" / "5.log"
    log5.write_text("hello\n")

    def entry(run_id: int, trigger: str, kind: str, w: str | None = None) -> dict[str, Any]:
        return {"run_id": run_id, "trigger": trigger, "window": w, "at": at, "kind": kind}

    state_path = tmp_path / "state.json"
    write_state(state_path, {
        "runs": {"job": {"last_run_id": 7}, "worker": {"last_run_id": 3}},
        "held": {"job": [{"run_id": 7, "trigger": "manual", "window": None, "at": at}]},
        "issued": {"job": [entry(5, "manual", "oneshot"),
                           entry(6, "schedule", "oneshot", window)],
                   "worker": [entry(2, "autostart", "resident"),
                              entry(3, "restart", "resident")],
                   "bad": [entry(1, "manual", "daemon")]}})
    ledger_dir = tmp_path / "ledger"
    seed(ledger_dir, [opened("worker", 2, NOW - HOUR, kind="resident", trigger="autostart")])
    led = open_ledger(ledger_dir, clock=Clock(NOW))
    ran = {("job", 5), ("job", 7), ("worker", 3), ("other", 9)}
    written = settle_firings(led, StateFile(str(state_path)), NOW, ran)
    now = format_ns(NOW)
    assert [(r["harness"], r["run_id"], r["outcome"]) for r in written] == [
        ("job", 7, "running"), ("job", 5, "running"), ("job", 6, "interrupted"),
        ("worker", 3, "running")]
    assert [strip(o) for o in all_lines(ledger_dir)][1:] == [
        {"v": 1, "type": "opened", "at": now, "harness": "job", "run_id": 7,
         "kind": "oneshot", "trigger": "manual", "outcome": "running"},
        {"v": 1, "type": "opened", "at": now, "harness": "job", "run_id": 5,
         "kind": "oneshot", "trigger": "manual", "outcome": "running", "log": str(log5)},
        {"v": 1, "type": "decided", "at": now, "harness": "job", "run_id": 6,
         "kind": "oneshot", "trigger": "schedule", "started_at": at, "window": window,
         "outcome": "interrupted", "reason": "daemon_crash"},
        {"v": 1, "type": "opened", "at": now, "harness": "worker", "run_id": 3,
         "kind": "resident", "trigger": "restart", "outcome": "running"}]
    assert json.loads(state_path.read_text()) == {
        "runs": {"job": {"last_run_id": 7}, "worker": {"last_run_id": 3}}}
    assert f"{state_path}: run id issued to bad: kind must be one of oneshot, resident, got " \
        "'daemon'" in caplog.text

    closed_now = {(r["harness"], r["run_id"]) for r in reconcile(led, NOW)}
    assert closed_now == {("worker", 2), ("job", 7), ("job", 5), ("worker", 3)}
    rec5 = led.get("job", 5)
    assert rec5 is not None and strip(rec5) == {
        "harness": "job", "run_id": 5, "kind": "oneshot", "trigger": "manual",
        "outcome": "interrupted", "reason": "daemon_crash", "log": str(log5)}
    assert log5.read_text() == f"hello\n{now} harness: {CRASH_NOTE}\n"
    # A boot after finds nothing to do.
    assert settle_firings(led, StateFile(str(state_path)), NOW, ran) == []


def test_issued_run_ids_the_disk_refuses_wait_for_the_next_boot(
        tmp_path: Path, open_ledger: OpenLedger) -> None:
    """On a disk that takes no write, no entry is settled, and state.json is not even
    rewritten; its entries are recorded by the boot after, on a disk that takes them."""
    at = "2026-06-15T11:00:00.000000000Z"
    state_path = tmp_path / "state.json"
    doc = {"runs": {"job": {"last_run_id": 2}},
           "issued": {"job": [{"run_id": n, "trigger": "manual", "window": None, "at": at,
                               "kind": "oneshot"} for n in (1, 2)]}}
    write_state(state_path, doc)
    ledger_dir = tmp_path / "ledger"
    full = FaultyFiles()
    full.inject("write", errno=errno.ENOSPC)
    led = open_ledger(ledger_dir, clock=Clock(NOW), files=full, retry_min=0.01,
                      retry_max=0.05)
    before = state_path.stat().st_ino
    assert settle_firings(led, StateFile(str(state_path)), NOW, {("job", 2)}) == []
    assert state_path.stat().st_ino == before and json.loads(state_path.read_text()) == doc
    with pytest.raises(LedgerUnavailable):
        led.close(timeout=0.2)
    led2 = open_ledger(ledger_dir, clock=Clock(NOW))
    assert [(r["run_id"], r["outcome"]) for r in settle_firings(
        led2, StateFile(str(state_path)), NOW)] == [(1, "interrupted"), (2, "interrupted")]
    assert json.loads(state_path.read_text()) == {"runs": {"job": {"last_run_id": 2}}}


def test_a_lost_skip_or_miss_is_recorded_as_its_client_was_told(
        tmp_path: Path, open_ledger: OpenLedger, caplog: pytest.LogCaptureFixture) -> None:
    """A skip and a run of missed windows are decided before their id is handed out, and
    their entries carry the decision: a boot that finds no record writes the decided line
    they would have had (skipped/overlap; missed with its first window and count), not a
    crash the client was never told of. A decision that is not a skip's or a miss's (a
    hand edit: another outcome, an extra field, a count of 0, a bad time) is recorded as
    the crash, since a line the schema refused would leave the id with no record."""
    at = "2026-06-15T11:00:00.000000000Z"
    first, last = "2026-06-15T08:00:00Z", "2026-06-15T10:00:00.000000000Z"

    def entry(run_id: int, decided: Any, w: str | None = None) -> dict[str, Any]:
        return {"run_id": run_id, "trigger": "schedule", "window": w, "at": at,
                "kind": "oneshot", "decided": decided}

    state_path = tmp_path / "state.json"
    write_state(state_path, {"runs": {"job": {"last_run_id": 8}}, "issued": {"job": [
        entry(1, {"outcome": "skipped", "reason": "overlap"}, last),
        entry(2, {"outcome": "missed", "first_window": first, "windows": 3}, last),
        entry(3, {"outcome": "succeeded", "reason": "overlap"}),
        entry(4, {"outcome": "skipped", "reason": "overlap", "exit_code": 0}),
        entry(5, {"outcome": "missed", "first_window": first, "windows": 0}),
        entry(6, {"outcome": "missed", "first_window": "yesterday", "windows": 2}),
        entry(7, {"outcome": "skipped", "reason": 7}),
        entry(8, "skipped")]}})
    ledger_dir = tmp_path / "ledger"
    led = open_ledger(ledger_dir, clock=Clock(NOW))
    written = settle_firings(led, StateFile(str(state_path)), NOW)
    assert [(r["run_id"], r["outcome"], r.get("reason")) for r in written] == [
        (1, "skipped", "overlap"), (2, "missed", None)] + [
        (n, "interrupted", "daemon_crash") for n in range(3, 9)]
    now = format_ns(NOW)
    assert [strip(o) for o in all_lines(ledger_dir)][:2] == [
        {"v": 1, "type": "decided", "at": now, "harness": "job", "run_id": 1,
         "kind": "oneshot", "trigger": "schedule", "started_at": at, "window": last,
         "outcome": "skipped", "reason": "overlap"},
        {"v": 1, "type": "decided", "at": now, "harness": "job", "run_id": 2,
         "kind": "oneshot", "trigger": "schedule", "started_at": at, "window": last,
         "outcome": "missed", "first_window": "2026-06-15T08:00:00.000000000Z",
         "windows": 3}]
    assert "run job/1: its record was lost with the daemon, and no process of it " \
        "outlived it; recorded as skipped" in caplog.text
    assert "run job/3: its record was lost with the daemon, and no process of it " \
        "outlived it; recorded as interrupted (daemon_crash)" in caplog.text
    assert json.loads(state_path.read_text()) == {"runs": {"job": {"last_run_id": 8}}}
