"""Mutation-test survivors of state.json and the run-id allocator
(`harness.supervisor.state`) and of the boot's run history (`harness.supervisor.history`:
`settle_firings`, REQ-7's closing passes and `import_legacy`'s result): the last id a
counter can hold and the floors of the first one, the tables a first entry creates, a
write that fails after its rename, the error that names a counter no id can be read from
or a value no write could carry back, every malformed ``held``/``issued`` shape a hand
edit or a half upgrade can leave, which the boot names in one log line and never answers
with a traceback, and what a close or an import the disk refuses says. Real state files
and ledgers in tmp dirs; the boot itself is a real daemon."""

from __future__ import annotations

import errno
import json
import logging
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from conftest import World
from daemons import DEADLINE, Daemons, request, runs_of
from harness.ledger.errors import LedgerUnavailable
from harness.ledger.files import FaultyFiles
from harness.ledger.runledger import RunLedger
from harness.supervisor.history import (
    ImportResult,
    close_open_on_shutdown,
    import_legacy,
    reconcile,
    settle_firings,
)
from harness.supervisor.state import (
    MAX_RUN_ID,
    RunIds,
    StateError,
    StateFile,
    highest_log_id,
    issued_entry,
)
from harness.timefmt import format_ns, parse_ns
from ledgertools import Clock, OpenLedger

NOW = parse_ns("2026-06-15T12:00:00Z")
AT = "2026-06-15T11:00:00.000000000Z"
SEC = 1_000_000_000
MS = 1_000_000
# A name NAME_RE allows but the ledger refuses: it reads as a key (so config refuses it).
SECRET_NAME = "sk-nightly2025build0123"


def write_json(path: Path, doc: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))


# -- the allocator -------------------------------------------------------------------


def test_the_last_id_a_counter_can_hold_is_handed_out_and_then_none(tmp_path: Path) -> None:
    """The highest id handed out is the highest a counter may hold (2**63 - 2), so the
    next boot reads the counter it wrote; the id after it is refused, said as such, and
    state.json keeps that counter. Handing out 2**63 - 1 persisted a counter every later
    boot refused ("must be an integer from 0 to ..."): no daemon could start again."""
    p = tmp_path / "state.json"
    write_json(p, {"runs": {"a": {"last_run_id": MAX_RUN_ID - 2}}})
    ids = RunIds(StateFile(str(p)), None, str(tmp_path / "jobs"))
    assert ids.next("a") == MAX_RUN_ID - 1
    with pytest.raises(StateError) as ei:
        ids.next("a")
    assert str(ei.value) == ("a: no run id is left after 9223372036854775806, the highest "
                             "in use (state.json, the ledger or its run logs)")
    reread = StateFile(str(p))
    assert reread.load() == {"runs": {"a": {"last_run_id": MAX_RUN_ID - 1}}}
    assert reread.last_run_id("a") == MAX_RUN_ID - 1


def test_the_first_entry_of_each_table_goes_into_a_file_without_it(tmp_path: Path) -> None:
    """The steady state after a boot is a file without ``issued`` or ``held`` (the boot
    drops them once every id has its record): the next id handed out must create the
    table in the write that persists it, or a crash right after would leave an id with
    no record. A firing given without `held` is an issued one."""
    at = "2026-06-05T10:00:00.000000000Z"
    p = tmp_path / "state.json"
    write_json(p, {"runs": {"a": {"last_run_id": 4}}, "stopped": ["r"]})
    sf = StateFile(str(p))
    ids = RunIds(sf, None, str(tmp_path / "jobs"))
    assert ids.next("a", issued_entry("manual", None, at, "oneshot")) == 5
    entry = {"trigger": "manual", "window": None, "at": at, "kind": "oneshot"}
    assert json.loads(p.read_text()) == {
        "runs": {"a": {"last_run_id": 5}}, "stopped": ["r"],
        "issued": {"a": [{**entry, "run_id": 5}]}}
    sf.set_last_run_id("b", 1, entry)
    held = {"trigger": "schedule", "window": None, "at": at}
    assert ids.next("a", held, held=True) == 6
    assert json.loads(p.read_text()) == {
        "runs": {"a": {"last_run_id": 6}, "b": {"last_run_id": 1}}, "stopped": ["r"],
        "issued": {"a": [{**entry, "run_id": 5}], "b": [{**entry, "run_id": 1}]},
        "held": {"a": [{**held, "run_id": 6}]}}


def test_a_write_that_fails_after_its_rename_leaves_the_disk_s_word(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The directory sync after the rename fails: the write is a StateError, yet the new
    document may be on disk, so the file is read again rather than trusted from memory,
    and the next write builds on what the disk holds."""
    p = tmp_path / "state.json"
    sf = StateFile(str(p))
    sf.set_last_run_id("n", 1)
    real = os.fsync

    def no_dir_sync(fd: int) -> None:
        if os.path.isdir(os.readlink(f"/proc/self/fd/{fd}")):
            raise OSError(errno.EIO, "Input/output error")
        real(fd)

    monkeypatch.setattr(os, "fsync", no_dir_sync)
    with pytest.raises(StateError, match="cannot write: Input/output error"):
        sf.set_last_run_id("n", 2, {"trigger": "manual", "window": None, "at": "t"})
    monkeypatch.undo()
    assert sf.last_run_id("n") == 2 and len(sf.issued()) == 1
    sf.set_stopped("r", True)
    assert json.loads(p.read_text()) == {
        "runs": {"n": {"last_run_id": 2}}, "stopped": ["r"],
        "issued": {"n": [{"trigger": "manual", "window": None, "at": "t", "run_id": 2}]}}


def test_forgetting_firings_drops_only_the_ids_named(tmp_path: Path) -> None:
    """`forget_firings` drops the (harness, run_id) pairs it is given from both tables;
    another id of the same harness stays, and so does an entry that cannot be read (the
    boot names it); a table left empty goes."""
    p = tmp_path / "state.json"
    one = {"run_id": 1, "trigger": "manual"}
    two = {"run_id": 2, "trigger": "manual"}
    write_json(p, {"runs": {"job": {"last_run_id": 3}},
                   "held": {"job": [{"run_id": 3}]},
                   "issued": {"job": ["bad", one, {"run_id": "1"}, two]}})
    sf = StateFile(str(p))
    sf.forget_firings([("job", 1), ("job", 3), ("other", 2)])
    assert json.loads(p.read_text()) == {
        "runs": {"job": {"last_run_id": 3}},
        "issued": {"job": ["bad", {"run_id": "1"}, two]}}


def test_a_previous_table_entry_without_a_counter_claims_no_id(tmp_path: Path) -> None:
    """The previous version's ``harnesses`` table folded into ``runs``: an entry with no
    counter in either table claims none, so the harness's first id is 1; its other keys
    are kept."""
    p = tmp_path / "state.json"
    write_json(p, {"harnesses": {"a": {"note": "x"}}, "runs": {"b": {}}})
    sf = StateFile(str(p))
    assert sf.entries() == {"a": {"note": "x", "last_run_id": 0}, "b": {}}
    ids = RunIds(sf, None, str(tmp_path / "jobs"))
    assert (ids.next("a"), ids.next("b")) == (1, 1)


def test_a_state_dir_not_made_yet_has_nothing_left_half_made(tmp_path: Path) -> None:
    """The boot's sweep of a killed replacement's temporary files finds none where no
    state dir exists yet, and makes none."""
    sf = StateFile(str(tmp_path / "state" / "state.json"))
    assert sf.clear_leftovers() == []
    assert not (tmp_path / "state").exists()


def test_an_issued_entry_carries_what_its_client_was_told(tmp_path: Path) -> None:
    """The entry of a firing decided before its id: trigger, window, time, kind and the
    decided line's own fields; one given no decision carries none."""
    at, w = "2026-06-05T10:00:00Z", "2026-06-05T09:00:00Z"
    told = {"outcome": "skipped", "reason": "overlap"}
    assert issued_entry("schedule", w, at, "oneshot", told) == {
        "trigger": "schedule", "window": w, "at": at, "kind": "oneshot", "decided": told}
    assert issued_entry("restart", None, at, "resident") == {
        "trigger": "restart", "window": None, "at": at, "kind": "resident"}


def test_a_nineteen_digit_log_floors_the_ids(tmp_path: Path) -> None:
    """The widest id a ledger holds has 19 digits: such a log is one of ours, and the
    first id handed out is above it (with no jobs dir at all, ids start at 1)."""
    jobs = tmp_path / "jobs"
    assert highest_log_id(str(jobs), "a") == 0
    (jobs / "a").mkdir(parents=True)
    (jobs / "a" / "notes.txt").write_text("")
    assert highest_log_id(str(jobs), "a") == 0  # a dir holding no log floors nothing
    (jobs / "a" / "1000000000000000000.log").write_text("")
    assert highest_log_id(str(jobs), "a") == 10**18
    ids = RunIds(StateFile(str(tmp_path / "state.json")), None, str(jobs))
    assert (ids.next("a"), ids.next("b")) == (10**18 + 1, 1)


@pytest.mark.parametrize(("value", "shown"), [
    ({"n": 7}, "an object"), ([7], "a list"), ("7" * 60, '"' + "7" * 38 + "…"),
    ("7" * 38, '"' + "7" * 38 + '"'), ("7" * 39, '"' + "7" * 38 + "…"),
    ("é" * 3, '"ééé"'),
])
def test_a_counter_that_is_no_id_is_quoted_by_its_kind_or_cut(
        tmp_path: Path, value: Any, shown: str) -> None:
    """The error quotes what the file holds: a container by its kind, never its contents
    (a counter hand-edited into an object may hold anything), a scalar as JSON, as
    written (not \\u-escaped), cut when it runs past 40 characters."""
    p = tmp_path / "state.json"
    write_json(p, {"runs": {"n": {"last_run_id": value}}})
    with pytest.raises(StateError) as ei:
        StateFile(str(p)).load()
    assert str(ei.value) == (f"{p}: runs.n.last_run_id must be an integer from 0 to "
                             f"9223372036854775806, not {shown}")


@pytest.mark.parametrize("text", ["", "\n  \t\n"], ids=["empty", "blank"])
def test_an_empty_state_file_is_an_empty_state(tmp_path: Path, text: str) -> None:
    """What a crash before the first write can leave on a filesystem without rename
    atomicity: no history to lose, so it reads as no file does, and ids start at 1."""
    p = tmp_path / "state.json"
    p.write_text(text)
    sf = StateFile(str(p))
    assert sf.load() == {}
    assert RunIds(sf, None, str(tmp_path / "jobs")).next("a") == 1
    assert json.loads(p.read_text()) == {"runs": {"a": {"last_run_id": 1}}}


def test_an_import_with_nothing_to_do_says_exactly_that(
        tmp_path: Path, open_ledger: OpenLedger) -> None:
    """The result of the two boots that import nothing, every field: an existing ledger
    and no lists (nothing ran), then a marker from an earlier import (already)."""
    (tmp_path / "ledger").mkdir(mode=0o700)
    write_json(tmp_path / "state.json", {"runs": {"n": {"last_run_id": 3}}})
    led = open_ledger(tmp_path / "ledger", clock=Clock(NOW))

    def fields(res: ImportResult) -> tuple[Any, ...]:
        return (res.ran, res.already, res.records, res.lines, res.found, res.skipped,
                res.lists_dropped, res.error, res.state_error)

    nothing = (False, False, 0, 0, 0, [], False, None, None)
    assert fields(import_legacy(led, str(tmp_path / "state.json"))) == nothing
    (tmp_path / "ledger" / ".imported").write_text("imported 0 lines\n")
    assert fields(import_legacy(led, str(tmp_path / "state.json"))) == (
        False, True, *nothing[2:])


def test_an_import_whose_state_save_fails_says_so_and_leaves_the_marker(
        tmp_path: Path, open_ledger: OpenLedger, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """The lines are in and the marker written, but state.json cannot be rewritten: the
    result and one error line say so, and the lists stay for the next boot to drop."""
    p = tmp_path / "state.json"
    run = {"run_id": 1, "outcome": "skipped", "started_at": "2026-06-01T02:00:00Z"}
    write_json(p, {"runs": {"n": {"last_run_id": 1, "runs": [run]}}})
    real = os.replace

    def no_state(src: Any, dst: Any) -> None:
        if os.fspath(dst) == str(p):
            raise OSError(errno.ENOSPC, "No space left on device")
        real(src, dst)

    monkeypatch.setattr(os, "replace", no_state)
    led = open_ledger(tmp_path / "ledger", clock=Clock(NOW))
    with caplog.at_level(logging.ERROR, logger="harness.supervisor"):
        res = import_legacy(led, str(p))
    problem = f"{p}: cannot write: No space left on device"
    assert (res.lines, res.lists_dropped, res.error, res.state_error) == (
        1, False, None, problem)
    assert [r.getMessage() for r in caplog.records if r.name == "harness.supervisor"] == [
        f"ledger import: done, but {problem}"]
    assert (tmp_path / "ledger" / ".imported").exists()
    assert json.loads(p.read_text())["runs"]["n"]["runs"] == [run]


@pytest.mark.parametrize("key", ["held", "issued"])
@pytest.mark.parametrize(("entry", "shown"), [
    (5, "5"), ("job", "'job'"), (None, "None"), ([[4]], "[4]")],
    ids=["int", "str", "null", "list"])
def test_a_firing_entry_that_is_not_an_object_is_named_and_the_others_recorded(
        tmp_path: Path, open_ledger: OpenLedger, caplog: pytest.LogCaptureFixture,
        key: str, entry: Any, shown: str) -> None:
    """An entry that is no object (the table's value for a name is read as a list of
    entries, or as one entry) is one warning naming the path, the table and the name;
    the name's other entries, and the other names', are still recorded."""
    p = tmp_path / "state.json"
    write_json(p, {"runs": {"job": {"last_run_id": 4}, "b": {"last_run_id": 2}},
                   key: {"job": entry, "b": [{"run_id": 2, "trigger": "manual",
                                              "window": None, "at": AT}]}})
    led = open_ledger(tmp_path / "ledger", clock=Clock(NOW))
    with caplog.at_level(logging.WARNING, logger="harness.supervisor"):
        written = settle_firings(led, StateFile(str(p)), NOW)
    assert [(r["harness"], r["run_id"], r["outcome"]) for r in written] == [
        ("b", 2, "interrupted")]
    what = "held firing" if key == "held" else "run id issued to"
    assert caplog.records[0].getMessage() == (
        f"{p}: {what} job: not a harness name and an object: 'job': {shown}")
    assert json.loads(p.read_text()) == {
        "runs": {"job": {"last_run_id": 4}, "b": {"last_run_id": 2}}}


@pytest.mark.parametrize(("fields", "problem"), [
    ({"at": None}, "at is not an RFC 3339 time: None"),
    ({"at": "yesterday"}, "at is not an RFC 3339 time: 'yesterday'"),
    ({"run_id": 0}, "run_id must be an integer ≥ 1, got 0"),
    ({"run_id": True}, "run_id must be an integer ≥ 1, got True"),
    ({"run_id": MAX_RUN_ID}, f"run_id must be an integer ≥ 1, got {MAX_RUN_ID}"),
    ({"trigger": 5}, "trigger must be a string, got 5"),
    ({"window": "noon"}, "window is not an RFC 3339 time: 'noon'"),
    ({"kind": None}, "kind must be one of oneshot, resident, got None"),
], ids=["no-at", "bad-at", "id-0", "id-bool", "id-max", "trigger", "window", "kind"])
def test_each_field_an_entry_cannot_be_recorded_by_is_named(
        tmp_path: Path, open_ledger: OpenLedger, caplog: pytest.LogCaptureFixture,
        fields: dict[str, Any], problem: str) -> None:
    """One warning per unreadable entry, naming the path, the harness and the first field
    at fault (times first, then the id, the trigger, the window, the kind), with its
    value; the readable entry beside it is recorded, and the file names neither after."""
    p = tmp_path / "state.json"
    good = {"run_id": 1, "trigger": "manual", "window": None, "at": AT, "kind": "oneshot"}
    write_json(p, {"runs": {"job": {"last_run_id": 2}},
                   "issued": {"job": [{**good, "run_id": 2, **fields}, good]}})
    led = open_ledger(tmp_path / "ledger", clock=Clock(NOW))
    with caplog.at_level(logging.WARNING, logger="harness.supervisor"):
        written = settle_firings(led, StateFile(str(p)), NOW)
    assert [(r["run_id"], r["outcome"]) for r in written] == [(1, "interrupted")]
    assert caplog.records[0].getMessage() == f"{p}: run id issued to job: {problem}"
    assert json.loads(p.read_text()) == {"runs": {"job": {"last_run_id": 2}}}


@pytest.mark.parametrize(("text", "problem"), [
    ('{"note": NaN}', "note is not a finite number (NaN)"),
    ('{"runs": {"a": {"last_run_id": 1, "x": [0, Infinity]}}}',
     "runs.a.x[1] is not a finite number (Infinity)"),
    ('{"note": {"deep": -1e999}}', "note.deep is not a finite number (-Infinity)"),
    ('{"stopped": ["a\\ud800"]}', "stopped[0] holds a lone surrogate, which UTF-8 cannot "
     "encode"),
    ('{"x": {"\\udfff": 1}}', "x holds a lone surrogate, which UTF-8 cannot encode"),
], ids=["nan", "infinity", "overflow", "surrogate", "surrogate-key"])
def test_a_value_state_json_could_not_be_written_back_with_is_refused_by_name(
        tmp_path: Path, text: str, problem: str) -> None:
    """Python's decoder takes NaN, Infinity, a number past a float's range and a lone
    surrogate escape, none of which the file can be written back with: they used to be
    read, and every write after failed ("cannot encode the state"), so no run id could be
    handed out while the daemon ran. Refused at the read now, naming where."""
    p = tmp_path / "state.json"
    p.write_text(text)
    with pytest.raises(StateError) as ei:
        StateFile(str(p)).load()
    assert str(ei.value) == f"{p}: {problem}"
    assert p.read_text() == text


def test_a_daemon_refuses_a_state_json_it_could_not_write_back(
        world: World, daemons: Daemons) -> None:
    """The boot stops (exit 1) with one line naming the file and the value, rather than
    serving a daemon whose every run fails for want of a run id."""
    daemons.write_config('[harness.job]\nkind = "oneshot"\nargv = ["true"]\n')
    state = world.state / "state.json"
    world.state.mkdir(parents=True, mode=0o700)
    state.write_text('{"runs": {"job": {"last_run_id": 3}}, "note": NaN}')
    proc = daemons.start(wait=False)
    assert proc.wait(timeout=DEADLINE) == 1
    err = daemons.stderr()
    assert f"harness: {state}: note is not a finite number (NaN)\n" in err
    assert "Traceback" not in err


def test_a_held_firing_and_a_run_that_ran_are_recorded_as_what_they_were(
        tmp_path: Path, open_ledger: OpenLedger, caplog: pytest.LogCaptureFixture) -> None:
    """A held firing no process shows is a decided crash, said as the queued firing lost;
    an issued scheduled run whose process outlived the daemon gets an opened line with
    its window, said as a run whose opened line was lost."""
    p = tmp_path / "state.json"
    window = "2026-06-15T10:00:00.000000000Z"
    write_json(p, {"runs": {"job": {"last_run_id": 2}},
                   "held": {"job": [{"run_id": 2, "trigger": "manual", "window": None,
                                     "at": AT}]},
                   "issued": {"job": [{"run_id": 1, "trigger": "schedule", "window": window,
                                       "at": AT, "kind": "oneshot"}]}})
    led = open_ledger(tmp_path / "ledger", clock=Clock(NOW))
    with caplog.at_level(logging.WARNING, logger="harness.supervisor"):
        written = settle_firings(led, StateFile(str(p)), NOW, {("job", 1)})
    assert [(r["run_id"], r["outcome"], r.get("window")) for r in written] == [
        (2, "interrupted", None), (1, "running", window)]
    assert [r.getMessage() for r in caplog.records] == [
        "run job/2: the queued firing was lost with the daemon; closed as interrupted "
        "(daemon_crash)",
        "run job/1: its opened line was lost with the daemon, but its process outlived it; "
        "recorded, to be closed as interrupted (daemon_crash)"]


def test_an_entry_the_ledger_refuses_is_named_and_not_reported_written(
        tmp_path: Path, open_ledger: OpenLedger, caplog: pytest.LogCaptureFixture) -> None:
    """An entry whose line the schema refuses (a hand edit: a harness name that reads as
    a key) is one warning naming the path, the id and the refusal, the name redacted as
    the ledger would redact it; it is not among the lines written, and it goes from the
    file, as a line no later boot could write either."""
    p = tmp_path / "state.json"
    write_json(p, {"runs": {"job": {"last_run_id": 1}},
                   "issued": {SECRET_NAME: [{"run_id": 1, "trigger": "manual",
                                             "window": None, "at": AT, "kind": "oneshot"}]}})
    led = open_ledger(tmp_path / "ledger", clock=Clock(NOW))
    with caplog.at_level(logging.WARNING, logger="harness.supervisor"):
        assert settle_firings(led, StateFile(str(p)), NOW) == []
    assert [r.getMessage() for r in caplog.records] == [
        f"{p}: run id 1 of [REDACTED]: harness name is over 256 bytes or reads as a "
        "secret, so the ledger could not keep it as it is: rename the harness"]
    assert json.loads(p.read_text()) == {"runs": {"job": {"last_run_id": 1}}}


def test_an_unreadable_entry_under_a_name_that_reads_as_a_key_is_named_redacted(
        tmp_path: Path, open_ledger: OpenLedger, caplog: pytest.LogCaptureFixture) -> None:
    """The warning for an entry that cannot be read names its harness: a hand-edited
    name that reads as a key (here with a space, so no harness name) is redacted in it,
    the value quoted after it too, as every log line keeps secrets out."""
    p = tmp_path / "state.json"
    name = f"x {SECRET_NAME}"
    write_json(p, {"issued": {name: [{"run_id": 1, "trigger": "manual", "window": None,
                                      "at": AT, "kind": "oneshot"}]}})
    led = open_ledger(tmp_path / "ledger", clock=Clock(NOW))
    with caplog.at_level(logging.WARNING, logger="harness.supervisor"):
        assert settle_firings(led, StateFile(str(p)), NOW) == []
    assert [r.getMessage() for r in caplog.records] == [
        f"{p}: run id issued to x [REDACTED]: not a harness name: 'x [REDACTED]'"]
    assert SECRET_NAME not in caplog.text


@pytest.mark.parametrize("key", ["held", "issued"])
@pytest.mark.parametrize("name", ["../x", "", "a/b/c", "/x", "x/", "a/..", ".x", "bad name!",
                                  "x" * 65])
def test_an_entry_under_a_name_no_harness_can_have_is_named_and_not_recorded(
        tmp_path: Path, open_ledger: OpenLedger, caplog: pytest.LogCaptureFixture,
        key: str, name: str) -> None:
    """A hand-edited entry under a name no config can give a harness ("../x", "", a
    space) was recorded, as a run of no harness (an empty one refused only by the
    schema), and a run that ran got a log path built from the name, out of the state
    dir. It is one warning naming the path, the table and the name, like any entry that
    cannot be read; a project's harness (PROJECT/NAME) is recorded beside it."""
    p = tmp_path / "state.json"
    entry = {"run_id": 3, "trigger": "manual", "window": None, "at": AT}
    if key == "issued":
        entry["kind"] = "oneshot"
    write_json(p, {"runs": {"job": {"last_run_id": 3}},
                   key: {name: [entry], "proj/job": [entry]}})
    escaped = tmp_path / "jobs" / name / "3.log"
    if ".." in name:
        escaped.parent.mkdir(parents=True, exist_ok=True)
        escaped.write_text("not a log of this state dir\n")
    led = open_ledger(tmp_path / "ledger", clock=Clock(NOW))
    with caplog.at_level(logging.WARNING, logger="harness.supervisor"):
        written = settle_firings(led, StateFile(str(p)), NOW, {(name, 3)})
    assert [(r["harness"], r["run_id"], r["outcome"]) for r in written] == [
        ("proj/job", 3, "interrupted")]
    what = "held firing" if key == "held" else "run id issued to"
    assert caplog.records[0].getMessage() == (
        f"{p}: {what} {name}: not a harness name: {name!r:.60}")
    assert led.get(name, 3) is None
    assert json.loads(p.read_text()) == {"runs": {"job": {"last_run_id": 3}}}


def test_an_import_raises_a_counter_below_its_list_and_names_what_it_skipped(
        tmp_path: Path, open_ledger: OpenLedger, caplog: pytest.LogCaptureFixture) -> None:
    """A legacy counter below a run its own list holds (a hand edit, a half-written old
    file) is raised to that run's id: once retention prunes the imported lines and
    keep_runs the logs, the counter is the only floor, and the ids up to it must not be
    handed out again. Each legacy run left out is one warning naming it."""
    p = tmp_path / "state.json"
    run = {"run_id": 7, "trigger": "manual", "outcome": "skipped",
           "started_at": "2026-06-01T02:00:00Z", "reason": "overlap"}
    write_json(p, {"runs": {"n": {"last_run_id": 5, "runs": [run, {"run_id": 0}]}}})
    led = open_ledger(tmp_path / "ledger", clock=Clock(NOW))
    with caplog.at_level(logging.WARNING, logger="harness.supervisor"):
        res = import_legacy(led, str(p))
    assert (res.records, res.lines, res.lists_dropped) == (1, 1, True)
    assert json.loads(p.read_text()) == {"runs": {"n": {"last_run_id": 7}}}
    assert [r.getMessage() for r in caplog.records] == [
        "ledger import: skipped legacy run n[1]: run_id must be an integer ≥ 1, got 0"]


def test_a_lost_miss_of_one_window_is_recorded_as_a_miss(
        tmp_path: Path, open_ledger: OpenLedger) -> None:
    """The smallest run of missed windows is one: its entry's decision is what the
    client was told, not a crash."""
    p = tmp_path / "state.json"
    first = "2026-06-15T10:00:00.000000000Z"
    write_json(p, {"runs": {"job": {"last_run_id": 1}}, "issued": {"job": [
        {"run_id": 1, "trigger": "schedule", "window": first, "at": AT, "kind": "oneshot",
         "decided": {"outcome": "missed", "first_window": first, "windows": 1}}]}})
    led = open_ledger(tmp_path / "ledger", clock=Clock(NOW))
    written = settle_firings(led, StateFile(str(p)), NOW)
    assert [(r["run_id"], r["outcome"], r.get("windows"), r.get("first_window"))
            for r in written] == [(1, "missed", 1, first)]


def _open_run(directory: Path, started: int) -> None:
    led = RunLedger(str(directory))
    try:
        led.append({"type": "opened", "harness": "job", "run_id": 1, "at": format_ns(started),
                    "kind": "oneshot", "trigger": "manual", "started_at": format_ns(started),
                    "outcome": "running"}, sync=True)
    finally:
        led.close()


@pytest.mark.parametrize(("started", "took"), [(NOW, 0), (NOW + 5 * SEC, 0),
                                               (NOW - 2500 * MS, 2500)],
                         ids=["same-instant", "clock-went-back", "ran"])
def test_a_shutdown_closes_a_run_with_what_it_took_never_less_than_nothing(
        tmp_path: Path, open_ledger: OpenLedger, started: int, took: int) -> None:
    """The shutdown's closed line says how long the run took, in whole milliseconds, and
    0 when the clock says it ended before it began; what it returns is the record as the
    ledger folds it."""
    _open_run(tmp_path / "ledger", started)
    led = open_ledger(tmp_path / "ledger", clock=Clock(NOW))
    closed = close_open_on_shutdown(led, NOW)
    assert closed == [led.get("job", 1)]
    assert (closed[0]["outcome"], closed[0]["reason"], closed[0]["duration_ms"]) == (
        "interrupted", "shutdown", took)


def test_a_close_the_disk_refuses_is_logged_and_not_reported_closed(
        tmp_path: Path, open_ledger: OpenLedger, caplog: pytest.LogCaptureFixture) -> None:
    """REQ-7's pass on a disk that takes no write: the closed line stays queued for the
    writer to retry, the failure is one error line, and the run is not among those the
    boot reports closed (nor gains a crash note)."""
    _open_run(tmp_path / "ledger", NOW - SEC)
    full = FaultyFiles()
    full.inject("write", errno=errno.ENOSPC)
    led = open_ledger(tmp_path / "ledger", clock=Clock(NOW), files=full, retry_min=0.01,
                      retry_max=0.05, sync_timeout=0.3)
    with caplog.at_level(logging.ERROR, logger="harness.supervisor"):
        assert reconcile(led, NOW) == []
    assert [r.getMessage().startswith("cannot close open run: ") for r in caplog.records
            if r.name == "harness.supervisor"] == [True]
    with pytest.raises(LedgerUnavailable):
        led.close(timeout=0.2)


def test_an_import_and_a_settling_the_disk_refuses_each_say_so(
        tmp_path: Path, open_ledger: OpenLedger, caplog: pytest.LogCaptureFixture) -> None:
    """On a disk that takes no write, the import's failure is one error line saying the
    lists stay for the next boot, and each run id the boot cannot record is one error
    line naming it: the only word a daemon's operator gets of either."""
    p = tmp_path / "state.json"
    run = {"run_id": 1, "outcome": "skipped", "started_at": "2026-06-01T02:00:00Z"}
    write_json(p, {"runs": {"n": {"last_run_id": 2, "runs": [run]}}, "issued": {"n": [
        {"run_id": 2, "trigger": "manual", "window": None, "at": AT, "kind": "oneshot"}]}})
    full = FaultyFiles()
    full.inject("write", errno=errno.ENOSPC)
    led = open_ledger(tmp_path / "ledger", clock=Clock(NOW), files=full, retry_min=0.01,
                      retry_max=0.05, sync_timeout=0.3)
    with caplog.at_level(logging.ERROR, logger="harness.supervisor"):
        res = import_legacy(led, str(p))
        assert settle_firings(led, StateFile(str(p)), NOW) == []
    said = [r.getMessage() for r in caplog.records if r.name == "harness.supervisor"]
    assert len(said) == 2 and res.error is not None
    assert said[0] == (f"ledger import: {res.error}; state.json keeps its run lists for "
                       "the next boot")
    assert said[1].startswith("cannot record the run n/2: ")
    with pytest.raises(LedgerUnavailable):
        led.close(timeout=0.2)


# -- malformed firing tables at boot ---------------------------------------------------


@pytest.mark.parametrize("run_id", [[3], {"id": 3}], ids=["list", "object"])
def test_a_firing_whose_run_id_is_a_container_is_named_and_the_others_recorded(
        tmp_path: Path, open_ledger: OpenLedger, caplog: pytest.LogCaptureFixture,
        run_id: Any) -> None:
    """A hand-edited run_id that is a list or an object (no id at all) is one entry that
    cannot be read: logged by name, and every other entry is still recorded. It used to
    raise TypeError (unhashable) out of the boot, on every boot after."""
    p = tmp_path / "state.json"
    write_json(p, {"runs": {"job": {"last_run_id": 4}},
                   "held": {"job": [{"run_id": run_id, "trigger": "manual", "window": None,
                                     "at": AT}]},
                   "issued": {"job": [{"run_id": 4, "trigger": "manual", "window": None,
                                       "at": AT, "kind": "oneshot"}]}})
    led = open_ledger(tmp_path / "ledger", clock=Clock(NOW))
    with caplog.at_level(logging.WARNING, logger="harness.supervisor"):
        written = settle_firings(led, StateFile(str(p)), NOW, {("job", 4)})
    assert [(r["harness"], r["run_id"], r["outcome"]) for r in written] == [
        ("job", 4, "running")]
    shown = json.dumps(run_id).replace('"', "'")
    assert f"{p}: held firing job: run_id must be an integer ≥ 1, got {shown}" in caplog.text
    assert json.loads(p.read_text()) == {"runs": {"job": {"last_run_id": 4}}}


@pytest.mark.parametrize("key", ["held", "issued"])
@pytest.mark.parametrize(("table", "shown"), [
    ("job", '"job"'), ([{"run_id": 4}], "a list"), (None, "null"), (7, "7")],
    ids=["str", "list", "null", "int"])
def test_a_firing_table_that_is_not_an_object_is_named_at_boot_and_dropped(
        tmp_path: Path, open_ledger: OpenLedger, caplog: pytest.LogCaptureFixture,
        key: str, table: Any, shown: str) -> None:
    """``held`` or ``issued`` that is not an object names no entry the boot can record: the
    boot says so (path, key, what it holds) instead of dropping it unsaid, and the next
    write leaves the file without it. The counters are untouched: no id is reused."""
    p = tmp_path / "state.json"
    write_json(p, {"runs": {"job": {"last_run_id": 4}}, key: table})
    led = open_ledger(tmp_path / "ledger", clock=Clock(NOW))
    with caplog.at_level(logging.WARNING, logger="harness.supervisor"):
        assert settle_firings(led, StateFile(str(p)), NOW) == []
    assert [r.getMessage() for r in caplog.records] == [
        f"{p}: {key!r} must be an object of harness names, not {shown}: the run ids it "
        "names cannot be recorded"]
    assert json.loads(p.read_text()) == {"runs": {"job": {"last_run_id": 4}}}
    ids = RunIds(StateFile(str(p)), led, str(tmp_path / "jobs"))
    assert ids.next("job") == 5


def test_a_hand_edited_state_json_boots_with_its_problems_logged(
        world: World, daemons: Daemons) -> None:
    """A real daemon on a state.json a hand edit left with a run id that is a list (held)
    and an ``issued`` that is a string boots, logs each problem naming state.json, and
    answers; the next run id is above the counter; the file no longer names either."""
    daemons.write_config('[harness.job]\nkind = "oneshot"\nargv = ["true"]\n')
    state = world.state / "state.json"
    world.state.mkdir(parents=True, mode=0o700)
    state.write_text(json.dumps({
        "runs": {"job": {"last_run_id": 3}}, "stopped": [],
        "held": {"job": [{"run_id": [3], "trigger": "manual", "window": None, "at": AT}]},
        "issued": "job"}))
    proc = daemons.start()
    assert request(daemons, "daemon_info")["pid"] == proc.pid
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=DEADLINE) == 0, daemons.stderr()
    err = daemons.stderr()
    assert "Traceback" not in err
    assert f"WARNING harness.supervisor: {state}: held firing job: run_id must be an " \
        "integer ≥ 1, got [3]" in err
    assert (f"WARNING harness.supervisor: {state}: 'issued' must be an object of harness "
            "names, not \"job\": the run ids it names cannot be recorded") in err
    assert json.loads(state.read_text()) == {"runs": {"job": {"last_run_id": 3}},
                                             "stopped": []}
    assert runs_of(world, "job") == []  # no id the file could not name was made up
