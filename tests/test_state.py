"""state.json and the run-id allocator (SPEC-0022 REQ-13; SPEC-0008 run ids never reused).

Real files in a tmp dir: what is read back is what a restarted daemon would read. The
atomic-write tests break the rename on purpose and check the old document survives whole.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from conftest import World
from daemons import DEADLINE, Daemons, runs_of
from harness.supervisor.state import RunIds, StateError, StateFile, highest_log_id, issued_entry
from ledgertools import OpenLedger


class FakeLedger:
    """Only what the allocator asks a ledger: its highest run id per harness, and whether
    a run is recorded (never, here)."""

    def __init__(self, ids: dict[str, int]) -> None:
        self.ids = ids

    def recorded(self, harness: str, run_id: int) -> bool:
        return False

    def max_run_id(self, harness: str) -> int:
        return self.ids.get(harness, 0)


def write_json(path: Path, doc: Any) -> None:
    path.write_text(json.dumps(doc))


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


# -- reading -------------------------------------------------------------------------------


def test_missing_file_is_empty(tmp_path: Path) -> None:
    sf = StateFile(str(tmp_path / "state.json"))
    assert sf.load() == {}
    assert sf.last_run_id("nightly") == 0
    assert sf.entries() == {}
    assert not (tmp_path / "state.json").exists()  # reading never creates it


def test_corrupt_file_names_path_and_problem(tmp_path: Path) -> None:
    p = tmp_path / "state.json"
    p.write_text('{"runs": {"nightly": {"last_run_id": 3}')
    with pytest.raises(StateError) as ei:
        StateFile(str(p)).load()
    msg = str(ei.value)
    assert msg.startswith(f"{p}: not valid JSON: Expecting ',' delimiter at line 1 column")
    assert ei.value.__traceback__ is not None and ei.value.__cause__ is None


RANGE = "must be an integer from 0 to 9223372036854775806"
LIST = [{"run_id": 1, "outcome": "success"}]


@pytest.mark.parametrize(("doc", "problem"), [
    ([1, 2], "the top level must be a JSON object, not list"),
    # Every counter is judged, a legacy entry's too: read as 0, a counter the file holds
    # but the daemon cannot read would hand out again the ids of runs keep_runs had cut.
    ({"runs": []}, "'runs' must be an object, not a list"),
    ({"runs": {"n": "x"}}, 'runs.n must be an object, not "x"'),
    ({"runs": {"n": [LIST]}}, "runs.n must be an object, not a list"),
    ({"runs": {"n": {"last_run_id": "7"}}}, f'runs.n.last_run_id {RANGE}, not "7"'),
    ({"runs": {"n": {"last_run_id": "7", "runs": LIST}}}, f'runs.n.last_run_id {RANGE}, not "7"'),
    ({"runs": {"n": {"last_run_id": None, "runs": LIST}}}, f"runs.n.last_run_id {RANGE}, not null"),
    ({"runs": {"n": {"last_run_id": True}}}, f"runs.n.last_run_id {RANGE}, not true"),
    ({"runs": {"n": {"last_run_id": 2.0}}}, f"runs.n.last_run_id {RANGE}, not 2.0"),
    ({"runs": {"n": {"last_run_id": -1}}}, f"runs.n.last_run_id {RANGE}, not -1"),
    ({"runs": {"n": {"last_run_id": "x" * 60}}},
     f'runs.n.last_run_id {RANGE}, not "{"x" * 38}…'),
    # The id after it would not fit the ledger: every run of n would be refused for good.
    ({"runs": {"n": {"last_run_id": 2**63 - 1}}},
     f"runs.n.last_run_id {RANGE}, not 9223372036854775807"),
    # The previous version's table is judged as strictly as it always was.
    ({"harnesses": []}, "'harnesses' must be an object, not a list"),
    ({"harnesses": {"n": 3}}, "harnesses.n must be an object, not 3"),
    ({"harnesses": {"n": {"last_run_id": "7"}}}, f'harnesses.n.last_run_id {RANGE}, not "7"'),
    ({"runs": {"n": {"last_run_id": 2}}, "harnesses": {"n": {"last_run_id": -1}}},
     f"harnesses.n.last_run_id {RANGE}, not -1"),
    ({"stopped": "n"}, "'stopped' must be a list of harness names"),
    ({"stopped": ["n", 7]}, "'stopped' must be a list of harness names"),
])
def test_wrong_shapes_are_errors(tmp_path: Path, doc: Any, problem: str) -> None:
    p = tmp_path / "state.json"
    write_json(p, doc)
    with pytest.raises(StateError) as ei:
        StateFile(str(p)).load()
    assert str(ei.value) == f"{p}: {problem}"


@pytest.mark.parametrize("runs", ["not a list", [1, "garbage"], {"run_id": 3}, None])
def test_a_record_list_is_never_judged_here(tmp_path: Path, runs: Any) -> None:
    """The record list is the import's to judge (a malformed one costs only that
    history): the file loads, the counter counts, and the list waits for the import."""
    p = tmp_path / "state.json"
    write_json(p, {"runs": {"n": {"last_run_id": 7, "runs": runs}, "m": {"runs": []}}})
    sf = StateFile(str(p))
    assert sf.last_run_id("n") == 7
    assert sf.last_run_id("m") == 0  # an entry with no counter has used none we know of
    assert sf.has_legacy_lists()


def test_not_utf8_is_an_error(tmp_path: Path) -> None:
    p = tmp_path / "state.json"
    p.write_bytes(b'{"x": "\xff"}')
    with pytest.raises(StateError, match="not valid"):
        StateFile(str(p)).load()


def test_a_file_nested_too_deeply_stops_the_daemon_with_one_line(world: World) -> None:
    """json recurses once per level: a state.json of 100,000 "[" once ended `harness
    daemon` in a RecursionError traceback. It is a state error like any bad JSON: the
    boot stops with exit 1, naming the file."""
    p = world.state / "state.json"
    p.parent.mkdir(parents=True)
    p.write_text("[" * 100_000)
    res = world.harness("daemon")
    assert res.returncode == 1
    assert "Traceback" not in res.stderr
    assert res.stderr.splitlines()[-1] == f"harness: {p}: not valid JSON: nested too deeply"


def test_an_integer_past_the_digit_limit_stops_the_daemon_with_one_line(world: World
                                                                         ) -> None:
    """json refuses an integer of over 4,300 digits with a bare ValueError, which ended
    `harness daemon` in a traceback: it is bad JSON like any other, exit 1, one line."""
    p = world.state / "state.json"
    p.parent.mkdir(parents=True)
    p.write_text('{"runs": {"n": {"last_run_id": ' + "9" * 5000 + "}}}")
    res = world.harness("daemon")
    assert res.returncode == 1
    assert "Traceback" not in res.stderr
    assert res.stderr.splitlines()[-1] == (
        f"harness: {p}: not valid JSON: an integer too long to read")


def _make_fifo(p: Path) -> None:
    os.mkfifo(p, 0o600)


def _make_socket(p: Path) -> None:
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(p))


@pytest.mark.parametrize(("make", "kind"), [
    (_make_fifo, "a FIFO"),
    (lambda p: p.mkdir(mode=0o700), "a directory"),
    (_make_socket, "a socket"),
])
def test_a_state_path_holding_no_regular_file_stops_the_daemon_with_one_line(
        world: World, make: Callable[[Path], None], kind: str) -> None:
    """A FIFO at state.json hung `harness daemon` for good (the open waited for a writer,
    and SIGTERM could not end it), a socket's error said "No such device or address":
    the boot stops at once, exit 1 as for a malformed file, one line naming the path and
    what is there, and leaves it there."""
    p = world.state / "state.json"
    p.parent.mkdir(parents=True)
    make(p)
    res = world.harness("daemon")
    assert res.returncode == 1
    assert "Traceback" not in res.stderr
    assert res.stderr.splitlines()[-1] == (
        f"harness: {p}: cannot read: it is {kind}, not a regular file")
    assert not stat.S_ISREG(p.lstat().st_mode)


def test_a_legacy_counter_the_daemon_cannot_read_stops_the_boot(world: World) -> None:
    """A legacy entry whose counter is not an id: the boot stops (exit 1, one line naming
    the file, the key and the value) rather than count from 0 and hand out again an id
    keep_runs cut from the list, and the file keeps its history for the fixed boot."""
    p = world.state / "state.json"
    p.parent.mkdir(parents=True)
    write_json(p, {"runs": {"nightly": {"last_run_id": "20", "runs": []}}})
    before = p.read_bytes()
    res = world.harness("daemon")
    assert res.returncode == 1
    assert "Traceback" not in res.stderr
    assert res.stderr.splitlines()[-1] == (
        f'harness: {p}: runs.nightly.last_run_id {RANGE}, not "20"')
    assert p.read_bytes() == before


def test_the_previous_versions_counters_count_and_the_first_write_moves_them(
        tmp_path: Path) -> None:
    """A file the previous version wrote holds a legacy table (lists waiting for the
    import) beside its own "harnesses" counters: each counter is the higher of the two,
    reading alone rewrites nothing, and the first write leaves one table, "runs", each
    entry's list and its other keys kept."""
    p = tmp_path / "state.json"
    write_json(p, {"harnesses": {"a": {"last_run_id": 4}, "b": {"last_run_id": 9, "k": 1},
                                 "c": {"last_run_id": 5}},
                   "runs": {"a": {"last_run_id": 7, "runs": []}, "b": {"last_run_id": 2}},
                   "stopped": ["c"], "other": True})
    before = p.read_bytes()
    sf = StateFile(str(p))
    assert [sf.last_run_id(n) for n in "abcd"] == [7, 9, 5, 0]
    assert sf.has_legacy_lists()
    assert p.read_bytes() == before
    sf.set_last_run_id("d", 1)
    assert json.loads(p.read_text()) == {
        "runs": {"a": {"last_run_id": 7, "runs": []}, "b": {"last_run_id": 9, "k": 1},
                 "c": {"last_run_id": 5}, "d": {"last_run_id": 1}},
        "stopped": ["c"], "other": True}
    assert [StateFile(str(p)).last_run_id(n) for n in "abcd"] == [7, 9, 5, 1]


def test_a_file_with_only_the_previous_table_is_moved_by_any_write(tmp_path: Path) -> None:
    """The previous version's file after its import: counters in "harnesses" only. An
    operator's stop is the first write here; the counters move with it."""
    p = tmp_path / "state.json"
    write_json(p, {"runs": {"n": {"last_run_id": 3}, "u": {"last_run_id": 8}}})
    sf = StateFile(str(p))
    assert sf.last_run_id("u") == 8
    sf.set_stopped("u", True)
    assert json.loads(p.read_text()) == {
        "runs": {"n": {"last_run_id": 3}, "u": {"last_run_id": 8}}, "stopped": ["u"]}
    ids = RunIds(StateFile(str(p)), None, str(tmp_path / "jobs"))
    assert (ids.next("n"), ids.next("u")) == (4, 9)
    assert json.loads(p.read_text()) == {
        "runs": {"n": {"last_run_id": 4}, "u": {"last_run_id": 9}}, "stopped": ["u"]}


# -- writing -------------------------------------------------------------------------------


def test_write_keeps_unknown_keys_and_is_0600(tmp_path: Path) -> None:
    p = tmp_path / "state.json"
    write_json(p, {"paused": ["x"], "runs": {"other": {"last_run_id": 2, "note": "k"}}})
    os.chmod(p, 0o644)
    sf = StateFile(str(p))
    sf.set_last_run_id("nightly", 5)
    assert json.loads(p.read_text()) == {
        "paused": ["x"],
        "runs": {"other": {"last_run_id": 2, "note": "k"}, "nightly": {"last_run_id": 5}},
    }
    assert mode(p) == 0o600  # the replacement was created 0600, whatever the old mode
    assert sorted(os.listdir(tmp_path)) == ["state.json"]  # no tmp file left


def test_an_operator_stop_is_kept_beside_the_counters(tmp_path: Path) -> None:
    """`harness stop` of a resident is saved as a sorted top-level list (the harness
    entries keep only their counter, REQ-13); saying again what the file says already
    does not rewrite it."""
    p = tmp_path / "state.json"
    write_json(p, {"paused": ["x"], "runs": {"u": {"last_run_id": 3}}})
    sf = StateFile(str(p))
    sf.set_stopped("u", True)
    sf.set_stopped("p/w", True)
    assert json.loads(p.read_text()) == {"paused": ["x"], "runs": {"u": {"last_run_id": 3}},
                                         "stopped": ["p/w", "u"]}
    assert mode(p) == 0o600
    assert StateFile(str(p)).stopped() == frozenset({"u", "p/w"})
    inode = p.stat().st_ino  # every save replaces the file by a rename
    sf.set_stopped("u", True)
    sf.set_stopped("gone", False)
    assert p.stat().st_ino == inode
    sf.set_stopped("u", False)
    sf.set_stopped("p/w", False)
    assert json.loads(p.read_text()) == {"paused": ["x"], "runs": {"u": {"last_run_id": 3}}}
    assert StateFile(str(p)).stopped() == frozenset()


def test_each_held_firing_keeps_its_own_entry_and_is_forgotten_alone(tmp_path: Path) -> None:
    """A firing held while an earlier one of the same harness is still named (its decided
    line not on disk yet) goes beside it, never over it, and forgetting one run id leaves
    the other. A file written by the previous version (one entry object per name) reads
    as that one entry, unchanged until the table is written, then in lists."""
    p = tmp_path / "state.json"
    at = "2026-06-05T10:00:00.000000000Z"
    old = {"run_id": 2, "trigger": "manual", "window": None, "at": at}
    write_json(p, {"runs": {"job": {"last_run_id": 2}, "b": {"last_run_id": 7}},
                   "held": {"job": old, "b": [{"run_id": 7, "trigger": "schedule"}]}})
    sf = StateFile(str(p))
    assert sf.held() == [("job", old), ("b", {"run_id": 7, "trigger": "schedule"})]
    inode = p.stat().st_ino
    sf.forget_firings([("job", 3), ("b", 2)])  # no such firing: not rewritten
    assert p.stat().st_ino == inode
    assert json.loads(p.read_text())["held"]["job"] == old

    four = {"trigger": "schedule", "window": at, "at": at}
    assert RunIds(sf, None, str(tmp_path / "jobs")).next("job", four, held=True) == 3
    sf.set_last_run_id("job", 4, four, held=True)
    assert json.loads(p.read_text()) == {
        "runs": {"job": {"last_run_id": 4}, "b": {"last_run_id": 7}},
        "held": {"job": [old, {**four, "run_id": 3}, {**four, "run_id": 4}],
                 "b": [{"run_id": 7, "trigger": "schedule"}]}}
    sf.forget_firings([("job", 3)])
    sf.forget_firings([("job", 2), ("b", 7)])
    assert json.loads(p.read_text())["held"] == {"job": [{**four, "run_id": 4}]}
    assert StateFile(str(p)).held() == [("job", {**four, "run_id": 4})]
    sf.forget_firings([("job", 4)])
    assert json.loads(p.read_text()) == {
        "runs": {"job": {"last_run_id": 4}, "b": {"last_run_id": 7}}}


def test_each_run_id_is_named_from_the_write_that_persists_it_until_its_record_is_on_disk(
        tmp_path: Path, open_ledger: OpenLedger) -> None:
    """Every id the allocator hands out is named in ``issued`` (a held firing's in
    ``held``) by the very write that persists it, and stays while the ledger has not
    committed its record, beside the later ids of its harness. Each later allocation, of
    any harness, drops in that same write every entry whose record is committed: no
    write of its own. An entry that cannot be read stays (the boot judges it). A file
    without the tables gains none from an allocation that names no firing."""
    at = "2026-06-05T10:00:00.000000000Z"
    p = tmp_path / "state.json"
    bad = {"run_id": "x"}
    write_json(p, {"paused": ["y"], "issued": {"z": [bad]}})
    led = open_ledger(tmp_path / "ledger")
    sf = StateFile(str(p))
    ids = RunIds(sf, led, str(tmp_path / "jobs"))

    def issued(run_id: int, trigger: str = "manual", kind: str = "oneshot"
               ) -> dict[str, Any]:
        return {**issued_entry(trigger, None, at, kind), "run_id": run_id}

    def line(typ: str, harness: str, run_id: int) -> None:
        led.append({"type": typ, "harness": harness, "run_id": run_id, "at": at,
                    "kind": "oneshot", "trigger": "manual",
                    "outcome": "running" if typ == "opened" else "skipped"}, sync=True)

    assert ids.next("a", issued_entry("manual", None, at, "oneshot")) == 1
    assert ids.next("w", issued_entry("autostart", None, at, "resident")) == 1
    doc = json.loads(p.read_text())
    assert doc["issued"] == {"z": [bad], "a": [issued(1)], "w": [issued(1, "autostart",
                                                                           "resident")]}
    line("opened", "a", 1)  # a/1's record is on disk; w/1's opened line is not yet
    assert ids.next("w", issued_entry("restart", None, at, "resident")) == 2
    assert json.loads(p.read_text())["issued"] == {
        "z": [bad], "w": [issued(1, "autostart", "resident"), issued(2, "restart", "resident")]}
    held = {"trigger": "manual", "window": None, "at": at}
    assert ids.next("a", held, held=True) == 2
    line("opened", "w", 1)
    line("opened", "w", 2)
    line("decided", "a", 2)
    assert ids.next("a", issued_entry("manual", None, at, "oneshot")) == 3
    assert json.loads(p.read_text()) == {
        "paused": ["y"], "runs": {"a": {"last_run_id": 3}, "w": {"last_run_id": 2}},
        "issued": {"z": [bad], "a": [issued(3)]}}

    plain = tmp_path / "plain.json"
    write_json(plain, {"runs": {"n": {"last_run_id": 4}}})
    assert RunIds(StateFile(str(plain)), led, str(tmp_path / "jobs")).next("n") == 5
    assert json.loads(plain.read_text()) == {"runs": {"n": {"last_run_id": 5}}}


def test_an_id_only_a_kept_firing_entry_names_floors_the_counter(tmp_path: Path) -> None:
    """A boot whose disk refused the record of a held or issued firing keeps its entry for
    the next boot; that id is then used only there. With the counter edited below it and
    no log left, the next id still goes above it (and an entry of another harness, or one
    no boot could settle, floors nothing)."""
    p = tmp_path / "state.json"
    entry = {"trigger": "manual", "window": None, "at": "2026-11-30T10:00:00Z"}
    write_json(p, {"runs": {"a": {"last_run_id": 1}, "b": {"last_run_id": 1}},
                   "held": {"a": [{**entry, "run_id": 12}], "c": [{**entry, "run_id": 50}]},
                   "issued": {"b": [{**entry, "run_id": 7}, {**entry, "run_id": "9x"},
                                    "junk"]}})
    ids = RunIds(StateFile(str(p)), None, str(tmp_path / "jobs"))
    assert (ids.next("a"), ids.next("b"), ids.next("d")) == (13, 8, 1)


def test_new_file_is_0600_even_with_open_umask(tmp_path: Path) -> None:
    p = tmp_path / "sub" / "state.json"
    old = os.umask(0)
    try:
        StateFile(str(p)).set_last_run_id("n", 1)
    finally:
        os.umask(old)
    assert mode(p) == 0o600
    assert mode(p.parent) == 0o700
    assert json.loads(p.read_text()) == {"runs": {"n": {"last_run_id": 1}}}


def test_failed_rename_leaves_old_file_whole(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    p = tmp_path / "state.json"
    write_json(p, {"runs": {"n": {"last_run_id": 3}}})
    before = p.read_bytes()
    seen: list[tuple[str, bytes, int]] = []

    def dying_rename(src: str, dst: str) -> None:
        # The new document is complete and 0600 in the tmp file when the rename is tried.
        seen.append((os.path.basename(src), Path(src).read_bytes(), mode(Path(src))))
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "replace", dying_rename)
    sf = StateFile(str(p))
    with pytest.raises(StateError) as ei:
        sf.set_last_run_id("n", 4)
    assert str(ei.value) == f"{p}: cannot write: Input/output error"
    assert len(seen) == 1
    name, data, tmp_mode = seen[0]
    assert name.startswith(f".state.json.{os.getpid()}.") and name.endswith(".tmp")
    assert json.loads(data) == {"runs": {"n": {"last_run_id": 4}}}
    assert tmp_mode == 0o600
    assert p.read_bytes() == before  # the old document, byte for byte
    assert json.loads(p.read_text()) == {"runs": {"n": {"last_run_id": 3}}}
    assert sorted(os.listdir(tmp_path)) == ["state.json"]  # the tmp file was removed
    monkeypatch.undo()
    assert StateFile(str(p)).last_run_id("n") == 3


def test_process_dying_before_rename_leaves_valid_json(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A death between write and rename: the tmp file stays, state.json is the old one."""
    p = tmp_path / "state.json"
    write_json(p, {"runs": {"n": {"last_run_id": 3}}})

    class Died(BaseException):
        pass

    def die(src: str, dst: str) -> None:
        raise Died

    monkeypatch.setattr(os, "replace", die)
    with pytest.raises(Died):
        StateFile(str(p)).set_last_run_id("n", 4)
    monkeypatch.undo()
    assert json.loads(p.read_text()) == {"runs": {"n": {"last_run_id": 3}}}
    assert sorted(os.listdir(tmp_path)) == ["state.json"]  # the tmp file went with it
    StateFile(str(p)).set_last_run_id("n", 5)
    assert json.loads(p.read_text()) == {"runs": {"n": {"last_run_id": 5}}}
    assert sorted(os.listdir(tmp_path)) == ["state.json"]


def test_unwritable_directory_is_a_state_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    sf = StateFile(str(blocker / "state.json"))
    with pytest.raises(StateError, match="cannot read: Not a directory"):
        sf.set_last_run_id("n", 1)
    with pytest.raises(StateError, match=r"cannot write: [Nn]ot a directory"):
        sf.save({"runs": {}})


# -- the allocator -------------------------------------------------------------------------


def test_floor_is_the_highest_of_state_ledger_and_logs(tmp_path: Path) -> None:
    p = tmp_path / "state.json"
    write_json(p, {"runs": {"a": {"last_run_id": 10}, "b": {"last_run_id": 1},
                            "c": {"last_run_id": 2}}})
    jobs = tmp_path / "jobs"
    (jobs / "b").mkdir(parents=True)
    for name in ("3.log", "12.log.zst", "40.txt", "x.log", "11.log"):
        (jobs / "b" / name).write_text("")
    ids = RunIds(StateFile(str(p)), FakeLedger({"a": 6, "c": 30}), str(jobs))
    assert ids.next("a") == 11  # state.json
    assert ids.next("b") == 13  # the compressed log of run 12
    assert ids.next("c") == 31  # the ledger
    assert ids.next("d") == 1
    assert ids.next("a") == 12
    assert json.loads(p.read_text()) == {"runs": {
        "a": {"last_run_id": 12}, "b": {"last_run_id": 13}, "c": {"last_run_id": 31},
        "d": {"last_run_id": 1}}}


def test_id_is_persisted_before_it_is_returned(tmp_path: Path) -> None:
    p = tmp_path / "state.json"
    ids = RunIds(StateFile(str(p)), None, str(tmp_path / "jobs"))
    for want in (1, 2, 3):
        assert ids.next("n") == want
        assert json.loads(p.read_text()) == {"runs": {"n": {"last_run_id": want}}}
    # A restarted daemon (new allocator, fresh read) continues; nothing is reused.
    again = RunIds(StateFile(str(p)), None, str(tmp_path / "jobs"))
    assert again.next("n") == 4


def test_failed_persist_hands_out_nothing(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    p = tmp_path / "state.json"
    ids = RunIds(StateFile(str(p)), None, str(tmp_path / "jobs"))
    assert ids.next("n") == 1

    def broken(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", broken)
    with pytest.raises(StateError, match="No space left on device"):
        ids.next("n")
    monkeypatch.undo()
    assert ids.next("n") == 2  # the id that could not be persisted was never used


def test_legacy_counter_floors_before_the_import(tmp_path: Path) -> None:
    p = tmp_path / "state.json"
    write_json(p, {"runs": {"nightly": {"last_run_id": 20, "runs": []}}})
    ids = RunIds(StateFile(str(p)), None, str(tmp_path / "jobs"))
    assert ids.next("nightly") == 21
    # The list stays in its entry, for the import; the counter beside it moves on.
    assert json.loads(p.read_text()) == {"runs": {"nightly": {"last_run_id": 21, "runs": []}}}


def test_ids_past_the_ledgers_range_are_never_handed_out(tmp_path: Path) -> None:
    """A log named past any ledger id is not ours and floors nothing; a ledger that holds
    the highest id (an edited line) leaves none, said as such, and state.json is not
    rewritten with an id no line can carry. Both used to persist 2**63 and have every
    run of the harness refused for good."""
    p = tmp_path / "state.json"
    write_json(p, {"runs": {"a": {"last_run_id": 0}}})
    jobs = tmp_path / "jobs"
    (jobs / "a").mkdir(parents=True)
    for name in ("99999999999999999999.log", "9223372036854775807.log",
                 "09223372036854775806.log.zst", "5.log"):
        (jobs / "a" / name).write_text("")
    assert highest_log_id(str(jobs), "a") == 5
    ids = RunIds(StateFile(str(p)), FakeLedger({"full": 2**63 - 1}), str(jobs))
    assert ids.next("a") == 6
    with pytest.raises(StateError) as ei:
        ids.next("full")
    assert str(ei.value) == ("full: no run id is left after 9223372036854775807, the "
                             "highest in use (state.json, the ledger or its run logs)")
    assert json.loads(p.read_text()) == {"runs": {"a": {"last_run_id": 6}}}


def test_highest_log_id_of_a_namespaced_harness(tmp_path: Path) -> None:
    d = tmp_path / "jobs" / "proj" / "build"
    d.mkdir(parents=True)
    (d / "7.log").write_text("")
    assert highest_log_id(str(tmp_path / "jobs"), "proj/build") == 7
    assert highest_log_id(str(tmp_path / "jobs"), "missing") == 0


@pytest.mark.parametrize("found", [True, False], ids=["found", "made"])
def test_the_first_save_makes_the_state_dirs_entry_durable_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, found: bool) -> None:
    """A power-cut hunt: the daemon's lock made `state/harness` on a first boot without
    XDG_RUNTIME_DIR and never synced its entry in `state/`, so a power cut could take
    state.json, and the run ids it had handed out, with the whole directory. The first
    save syncs the entry of a directory it finds (once); one it makes is synced as made."""
    synced: list[str] = []  # each directory fsync'd, in order
    real = os.fsync

    def noting(fd: int) -> None:
        path = os.readlink(f"/proc/self/fd/{fd}")
        if os.path.isdir(path):
            synced.append(path)
        real(fd)

    monkeypatch.setattr(os, "fsync", noting)
    d = tmp_path / "state" / "harness"
    if found:
        d.mkdir(parents=True, mode=0o700)
    sf = StateFile(str(d / "state.json"))
    sf.set_last_run_id("a", 1)
    sf.set_last_run_id("a", 2)
    parent = str(tmp_path / "state")
    if found:  # the entry once, then each save's rename in harness/
        assert synced == [parent, str(d), str(d)]
    else:  # made: state/ and harness/ synced in their parents as made
        assert synced == [str(tmp_path), parent, str(d), str(d)]
    assert json.loads((d / "state.json").read_text()) == {"runs": {"a": {"last_run_id": 2}}}


def test_a_state_home_that_cannot_be_opened_still_takes_the_state(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A state home of mode 0300 (writable and searchable, not readable, and not root's)
    gives no descriptor to fsync: run ids are still saved, the missing sync logged. Root
    reads any directory, so the refusal is made here the way the kernel makes it."""
    home = tmp_path / "state"
    home.mkdir(mode=0o700)
    real_open = os.open

    def refusing(path: Any, flags: int, *args: Any, **kw: Any) -> int:
        if os.fspath(path) == str(home) and flags & os.O_DIRECTORY:
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return real_open(path, flags, *args, **kw)

    monkeypatch.setattr(os, "open", refusing)
    sf = StateFile(str(home / "harness" / "state.json"))
    sf.set_last_run_id("a", 7)
    monkeypatch.setattr(os, "open", real_open)
    assert json.loads((home / "harness" / "state.json").read_text()) == {
        "runs": {"a": {"last_run_id": 7}}}


def _legacy_run(run_id: int, day: str) -> dict[str, Any]:
    return {"run_id": run_id, "trigger": "manual", "outcome": "success",
            "started_at": f"{day}T10:00:00Z", "ended_at": f"{day}T10:01:00Z",
            "exit_code": 0, "reason": None, "window": None, "first_window": None,
            "windows": None}


def test_a_counter_edited_below_the_ids_used_never_hands_one_out_again(
        world: World, daemons: Daemons) -> None:
    """SPEC-0008: run ids are never reused. A state.json counter hand-edited below ids
    already used — a legacy list's (imported into day files long out of the boot's
    window), then the daemon's own — with the per-run logs gone too, so only the ledger
    remembers them: each boot's first id is above every id the ledger holds."""
    daemons.write_config('[harness.job]\nkind = "oneshot"\nargv = ["true"]\n')
    p = world.state / "state.json"
    world.state.mkdir(parents=True, mode=0o700)
    # Weeks old: out of the week the boot folds, within the 90 days retention keeps.
    day = [(datetime.now(UTC) - timedelta(days=d)).strftime("%Y-%m-%d") for d in (30, 20)]
    write_json(p, {"runs": {"job": {"last_run_id": 2, "runs": [
        _legacy_run(5, day[0]), _legacy_run(7, day[1])]}}})

    def boot(want: int | None) -> None:
        """Boot a daemon, trigger job once unless `want` is None (then only the boot's
        import and settling run), stop it, and check the ids recorded."""
        proc = daemons.start()
        if want is not None:
            res = world.harness("trigger", "job", "--wait")
            assert res.returncode == 0, res.stderr
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=DEADLINE) == 0, daemons.stderr()
        top = 7 if want is None else want
        assert [r["run_id"] for r in runs_of(world, "job")] == [*range(top, 6, -1), 5]

    def hand_edit_below() -> None:
        doc = json.loads(p.read_text())
        doc["runs"]["job"]["last_run_id"] = 1
        write_json(p, doc)
        for log in (world.state / "jobs" / "job").glob("*"):
            log.unlink()

    boot(None)  # the import: runs 5 and 7 go into their weeks-old day files
    hand_edit_below()
    boot(8)  # the ledger's old files alone floor it
    hand_edit_below()
    boot(9)  # and the week the boot folds
    assert json.loads(p.read_text())["runs"]["job"]["last_run_id"] == 9
