"""Mutation-test survivors of state.json and the run-id allocator
(`harness.supervisor.state`) and of the boot's settling of the run ids it names
(`harness.supervisor.history.settle_firings`): the last id a counter can hold, the error
that names a counter no id can be read from, and every malformed ``held``/``issued``
shape a hand edit or a half upgrade can leave, which the boot names in one log line and
never answers with a traceback. Real state files and ledgers in tmp dirs; the boot itself
is a real daemon."""

from __future__ import annotations

import json
import logging
import signal
from pathlib import Path
from typing import Any

import pytest

from conftest import World
from daemons import DEADLINE, Daemons, request, runs_of
from harness.supervisor.history import settle_firings
from harness.supervisor.state import MAX_RUN_ID, RunIds, StateError, StateFile
from harness.timefmt import parse_ns
from ledgertools import Clock, OpenLedger

NOW = parse_ns("2026-06-15T12:00:00Z")
AT = "2026-06-15T11:00:00.000000000Z"


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


@pytest.mark.parametrize(("value", "shown"), [
    ({"n": 7}, "an object"), ([7], "a list"), ("7" * 60, '"' + "7" * 38 + "…"),
])
def test_a_counter_that_is_no_id_is_quoted_by_its_kind_or_cut(
        tmp_path: Path, value: Any, shown: str) -> None:
    """The error quotes what the file holds: a container by its kind, never its contents
    (a counter hand-edited into an object may hold anything), a long scalar cut at 40."""
    p = tmp_path / "state.json"
    write_json(p, {"runs": {"n": {"last_run_id": value}}})
    with pytest.raises(StateError) as ei:
        StateFile(str(p)).load()
    assert str(ei.value) == (f"{p}: runs.n.last_run_id must be an integer from 0 to "
                             f"9223372036854775806, not {shown}")


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
    assert f"{state}: held firing job: run_id must be an integer ≥ 1, got [3]" in err
    assert (f"{state}: 'issued' must be an object of harness names, not \"job\": the run "
            "ids it names cannot be recorded") in err
    assert json.loads(state.read_text()) == {"runs": {"job": {"last_run_id": 3}},
                                             "stopped": []}
    assert runs_of(world, "job") == []  # no id the file could not name was made up
