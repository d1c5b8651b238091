"""`harness daemon` end to end: a real daemon process, driven through the real CLI.

Each test boots `python -m harness.cli daemon` in the throwaway XDG world with a config
it writes, waits for the control socket, and checks what the CLI and the ledger say:
trigger --wait exit codes (its run found under any number of newer records), the
schedule ticker, overlap skips, crash reconciliation (SIGKILL) and clean shutdown
(SIGTERM), a bad config, the jobs failure streak, and stop/restart/reload/replace
reporting what they did after waiting out the grace of a run that ignores SIGTERM.
Daemons, and any process a test left running, are killed at teardown.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from conftest import World
from daemons import (
    DEADLINE,
    STUBBORN,
    Daemons,
    FaultDaemons,
    reaped,
    record_of,
    request,
    runs_of,
    stubborn_pid,
    until,
)
from harness.cli.daemon import exit_code_of
from harness.control.client import Client, DaemonError
from harness.supervisor.history import CRASH_NOTE
from harness.supervisor.runner import DEFAULT_GRACE
from harness.timefmt import parse_ns
from ledgertools import all_lines


def _config(world: World, d: Daemons) -> str:
    pidfile = world.root / "long.pid"
    d.pidfiles.append(pidfile)
    go = world.root / "chatty.go"  # chatty's first line, then it waits for this (up to 60 s)
    return f"""
[harness.ok]
kind = "oneshot"
argv = ["sh", "-c", "echo fine; exit 0"]

[harness.bad]
kind = "oneshot"
argv = ["sh", "-c", "echo broken >&2; exit 3"]

[harness.tick]
schedule = "@every 2s"
argv = ["sh", "-c", "echo tick"]

[harness.slow]
kind = "oneshot"
timeout = "1s"
argv = ["sleep", "30"]

[harness.chatty]
kind = "oneshot"
argv = ["sh", "-c", "echo line 1; n=0; while [ ! -e {go} ] && [ $n -lt 1200 ]; do \
sleep 0.05; n=$((n+1)); done; for i in 2 3 4 5; do echo line $i; sleep 0.3; done"]

[harness.missing]
kind = "oneshot"
argv = ["/nonexistent/harness-test-binary"]

[harness.long]
kind = "oneshot"
argv = ["sh", "-c", "echo $$ > {pidfile}; exec sleep 120"]
"""


def _wait_running(world: World, d: Daemons, name: str) -> int:
    res = world.harness("trigger", name)
    assert res.returncode == 0, res.stderr
    run_id = int(res.stdout.strip())
    # Running, and the script has got as far as writing its pid.
    until("the long run to start",
           lambda: (rec := record_of(world, name, run_id)) is not None
           and rec["outcome"] == "running" and (world.root / "long.pid").exists())
    return run_id


def test_trigger_wait_exits_with_the_run_and_the_daemon_answers_runs(
        world: World, daemons: Daemons) -> None:
    daemons.write_config(_config(world, daemons))
    daemons.start()
    ok = world.harness("trigger", "ok", "--wait")
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout == "fine\n"  # the run's log, streamed
    assert ok.stderr == "ok run 1: success\n"
    bad = world.harness("trigger", "bad", "--wait")
    assert bad.returncode == 3, bad.stderr
    assert bad.stdout == "broken\n"

    for name, code, outcome in (("ok", 0, "success"), ("bad", 3, "failed")):
        res = world.harness("runs", name, "--json")
        assert res.returncode == 0
        assert res.stderr == ""  # answered by the daemon, not read from disk
        [rec] = json.loads(res.stdout)
        assert rec["outcome"] == outcome and "?" not in rec["outcome"]
        assert rec["exit_code"] == code
        assert rec["trigger"] == "manual" and "ended_at" in rec

    jobs = world.harness("jobs", "--json")
    assert jobs.returncode == 0, jobs.stderr
    by_name = {j["name"]: j for j in json.loads(jobs.stdout)}
    assert by_name["bad"]["fails"] == 1
    assert by_name["bad"]["last_run"]["outcome"] == "failed"
    assert by_name["ok"]["fails"] == 0
    assert by_name["tick"]["schedule"] == "@every 2s" and by_name["tick"]["next"]

    table = world.harness("jobs")
    assert table.returncode == 0
    assert table.stdout.split("\n")[0].split() == ["NAME", "STATE", "SCHEDULE", "NEXT",
                                                   "LAST", "RUN", "FAILS"]
    listed = world.harness("list", "--json")
    assert listed.returncode == 0
    assert {h["name"]: h["kind"] for h in json.loads(listed.stdout)} == dict.fromkeys(
        ("ok", "bad", "tick", "slow", "chatty", "missing", "long"), "oneshot")

    client = Client(str(daemons.socket))
    try:
        info = client.request("daemon_info")
    finally:
        client.close()
    assert info["pid"] == daemons.procs[0].pid
    assert info["config"] == str(daemons.config)
    assert info["ledger_dir"] == str(world.ledger)
    assert info["ledger"]["next_seq"] > 1 and info["started_at"].endswith("Z")

    unknown = world.harness("trigger", "nope")
    assert unknown.returncode == 1
    assert "not_found" in unknown.stderr and "Traceback" not in unknown.stderr


def test_trigger_wait_streams_the_log_as_the_run_writes_it(
        world: World, daemons: Daemons) -> None:
    daemons.write_config(_config(world, daemons))
    daemons.start()
    proc = subprocess.Popen([sys.executable, "-m", "harness.cli", "trigger", "chatty", "--wait"],
                            env=world.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None
    # The first line arrives while the run is still going, not after it ended: the run
    # waits for the test before it goes on (a fixed pace let a loaded machine's `runs`
    # query come after the run had ended).
    assert proc.stdout.readline() == b"line 1\n"
    rec = record_of(world, "chatty", 1)
    assert rec is not None and rec["outcome"] == "running"
    (world.root / "chatty.go").touch()
    rest, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert rest == b"".join(b"line %d\n" % i for i in range(2, 6))
    # Shown once each, though the log was compressed once the run closed.
    assert (world.state / "jobs" / "chatty" / "1.log.zst").exists()


def test_timeouts_and_spawn_failures_map_to_their_exit_codes(
        world: World, daemons: Daemons) -> None:
    daemons.write_config(_config(world, daemons))
    daemons.start()
    slow = world.harness("trigger", "slow", "--wait")
    assert slow.returncode == 124, slow.stderr
    [rec] = runs_of(world, "slow")
    assert rec["outcome"] == "timed_out"
    missing = world.harness("trigger", "missing", "--wait")
    assert missing.returncode == 1, missing.stderr
    [rec] = runs_of(world, "missing")
    assert rec["outcome"] == "failed" and rec["reason"] == "spawn"
    assert "exit_code" not in rec


def test_a_spawn_failure_note_spells_out_the_controls_of_the_path_it_names(
        world: World, daemons: Daemons) -> None:
    """The daemon's note in a run's log quotes argv[0] or the workdir: an escape sequence
    in one reached the terminal raw through `trigger --wait` and `harness logs`, and a
    newline forged a `harness:` line of its own."""
    daemons.write_config('[harness.one]\nkind = "oneshot"\n'
                         'argv = ["/no/\\u001b]0;T\\u0007\\nharness: FAKE"]\n'
                         '[harness.res]\nkind = "oneshot"\nargv = ["true"]\n'
                         'workdir = "/no/\\u001b[31mRED\\nFAKE"\n')
    daemons.start()
    one = "harness: spawn failed: /no/\\x1b]0;T\\x07\\nharness: FAKE: No such file or directory\n"
    res = "harness: spawn failed: /no/\\x1b[31mRED\\nFAKE: No such file or directory\n"
    for name, note in (("one", one), ("res", res)):
        ran = world.harness("trigger", name, "--wait")
        assert (ran.returncode, ran.stdout, ran.stderr) == (1, note,
                                                            f"{name} run 1: failed (spawn)\n")
        shown = world.harness("logs", name)
        assert (shown.returncode, shown.stdout, shown.stderr) == (0, note, "")


def test_a_run_log_that_cannot_be_created_is_said_once_in_the_daemons_log(
        world: World, daemons: Daemons) -> None:
    """Every run failed/spawn when its log could not be created, and why (the note that
    says it goes into that log) was nowhere: now the daemon logs it, once per episode,
    not once per restart of a resident in a loop; `trigger --wait` points there."""
    daemons.write_config('[harness.a]\nkind = "oneshot"\nargv = ["true"]\n'
                         '[harness.r]\nkind = "resident"\nargv = ["true"]\n'
                         'restart = "always"\nrestart_delay = "100ms"\n')
    world.state.mkdir(parents=True)
    (world.state / "logs").write_text("")  # a file where the directory goes: even root fails
    (world.state / "jobs").mkdir()
    (world.state / "jobs" / "a").write_text("")
    daemons.start()
    for run_id in (1, 2):
        ran = world.harness("trigger", "a", "--wait")
        assert (ran.returncode, ran.stdout, ran.stderr) == (
            1, "", f"harness: a run {run_id} got no log; the daemon's log says why\n"
                   f"a run {run_id}: failed (spawn)\n")
    until("the resident's third failed start", lambda: record_of(world, "r", 3))
    warned = [line.split(" ", 2)[2] for line in daemons.stderr().splitlines()
              if " INFO " not in line]
    tail = "(its later runs that fail the same way are not logged again)"
    assert warned == [
        f"WARNING harness.supervisor: run r/1: failed to start: cannot create the run log "
        f"{world.state}/logs/r.log: not a directory {tail}",
        f"WARNING harness.supervisor: run a/1: failed to start: cannot create the run log "
        f"{world.state}/jobs/a/1.log: not a directory {tail}",
    ]


@pytest.mark.parametrize(("rec", "code"), [
    ({"outcome": "success", "exit_code": 0}, 0),
    ({"outcome": "failed", "exit_code": 3}, 3),
    ({"outcome": "failed", "exit_code": -1}, 1),  # killed by a signal: no exit status
    ({"outcome": "failed", "exit_code": 0}, 1),  # a failure never reads as success
    ({"outcome": "failed", "reason": "spawn"}, 1),
    ({"outcome": "timed_out", "exit_code": -1}, 124),
    ({"outcome": "skipped", "reason": "overlap"}, 75),
    ({"outcome": "interrupted", "reason": "shutdown", "exit_code": -1}, 1),
])
def test_trigger_wait_exit_codes(rec: dict[str, Any], code: int) -> None:
    assert exit_code_of(rec) == code


def test_a_scheduled_one_shot_fires_each_window(world: World, daemons: Daemons) -> None:
    daemons.write_config(_config(world, daemons))
    daemons.start()
    runs = until("two scheduled runs", lambda: (
        r if len(r := [x for x in runs_of(world, "tick") if x["outcome"] == "success"]) >= 2
        else None))
    assert all(r["trigger"] == "schedule" for r in runs)
    # One run per window: the windows are 2 s apart, so the starts are too (give or take).
    starts = sorted(r["started_at"] for r in runs)
    assert len(set(s[:19] for s in starts)) == len(starts)


def test_overlap_skips_and_sigterm_closes_the_live_run(world: World, daemons: Daemons) -> None:
    daemons.write_config(_config(world, daemons))
    proc = daemons.start()
    first = _wait_running(world, daemons, "long")

    again = world.harness("trigger", "long", "--wait")
    assert again.returncode == 75, again.stderr
    skipped = [r for r in runs_of(world, "long") if r["outcome"] == "skipped"]
    assert len(skipped) == 1
    assert skipped[0]["reason"] == "overlap" and skipped[0]["trigger"] == "manual"
    assert skipped[0]["run_id"] == first + 1

    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=DEADLINE) == 0, daemons.stderr()
    assert not daemons.socket.exists()
    res = world.harness("runs", "long", "--json")
    rec = next(r for r in json.loads(res.stdout) if r["run_id"] == first)
    assert rec["outcome"] == "interrupted" and rec["reason"] == "shutdown"
    assert "ended_at" in rec
    pid = int((world.root / "long.pid").read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # the run's process group went with it


def _crash(world: World, proc: subprocess.Popen[str]) -> None:
    """SIGKILL the daemon `proc`; its orphaned `long` run is not the next daemon's to end,
    so it is stopped as an operator would."""
    proc.kill()
    proc.wait(timeout=DEADLINE)
    pidfile = world.root / "long.pid"
    os.killpg(int(pidfile.read_text()), signal.SIGKILL)
    pidfile.unlink()


def test_a_crashed_daemon_is_reconciled_on_restart(world: World, daemons: Daemons) -> None:
    daemons.write_config(_config(world, daemons))
    proc = daemons.start()
    first = _wait_running(world, daemons, "long")
    _crash(world, proc)
    daemons.start()
    rec = record_of(world, "long", first)
    assert rec is not None
    assert rec["outcome"] == "interrupted" and rec["reason"] == "daemon_crash"
    assert "ended_at" not in rec
    second = _wait_running(world, daemons, "long")
    assert second == first + 1


def test_a_state_home_whose_name_is_not_utf8(world: World, daemons: Daemons) -> None:
    """A state home named in Latin-1 (the byte 0xff): a path JSON cannot carry as it is.
    Every one-shot used to be refused ("field 'log' must be a string (valid UTF-8)") and
    daemon_info failed whole; now the ledger and the socket spell such a byte ``\\xff``,
    and what follows a record's log (the crash note) still finds the real file."""
    home = os.fsdecode(os.fsencode(str(world.root)) + b"/st\xffate")
    world.env["XDG_STATE_HOME"] = home
    spelled = f"{world.root}/st\\xffate/harness"
    daemons.write_config(_config(world, daemons))
    proc = daemons.start()
    res = world.harness("trigger", "ok", "--wait")
    assert (res.returncode, res.stdout) == (0, "fine\n"), res.stderr
    rec = record_of(world, "ok", 1)
    assert rec is not None
    assert (rec["outcome"], rec["log"]) == ("success", f"{spelled}/jobs/ok/1.log")
    assert request(daemons, "daemon_info")["ledger_dir"] == f"{spelled}/ledger"

    first = _wait_running(world, daemons, "long")
    _crash(world, proc)
    daemons.start()
    rec = record_of(world, "long", first)
    assert rec is not None
    assert (rec["outcome"], rec["reason"]) == ("interrupted", "daemon_crash")
    shown = world.harness("logs", "long", "--run", str(first))
    assert (shown.returncode, shown.stderr) == (0, "")
    assert shown.stdout.splitlines()[-1].endswith(f" harness: {CRASH_NOTE}")
    assert world.harness("ledger", "verify").returncode == 0


def test_a_second_daemon_leaves_the_first_ones_runs_alone(
        world: World, daemons: Daemons) -> None:
    daemons.write_config(_config(world, daemons))
    daemons.start()
    first = _wait_running(world, daemons, "long")
    second = daemons.start(wait=False)
    assert second.wait(timeout=DEADLINE) == 1
    assert "another harness daemon owns" in daemons.stderr()
    rec = record_of(world, "long", first)
    assert rec is not None and rec["outcome"] == "running"  # not reconciled as crashed


def test_a_bad_config_exits_2_before_anything_starts(world: World, daemons: Daemons) -> None:
    daemons.write_config('[harness.x]\nkind = "oneshot"\nargv = ["true"]\nbogus = 1\n')
    proc = daemons.start(wait=False)
    assert proc.wait(timeout=DEADLINE) == 2
    assert f"{daemons.config}:4: harness.x.bogus" in daemons.stderr()
    assert not daemons.socket.exists()
    assert not world.ledger.exists()


def test_commands_without_a_daemon_say_so(world: World) -> None:
    for args in (("trigger", "x"), ("jobs",), ("list", "--json")):
        res = world.harness(*args)
        assert res.returncode == 1
        assert res.stderr.startswith("harness: daemon not running")
        assert "Traceback" not in res.stderr


# -- ops that wait out a stop grace -------------------------------------------------------


def _ignoring_sigterm(pidfile: Path) -> int:
    """The pid in `pidfile` once it is a `sleep` that ignores SIGTERM; the file is removed,
    so the next run's pid is the next one waited for."""
    pid = stubborn_pid(pidfile)
    pidfile.unlink()
    return pid


def _timed(world: World, *args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    t0 = time.monotonic()
    res = world.harness(*args)
    return res, time.monotonic() - t0




def test_ops_that_wait_out_the_grace_report_what_they_did(
        world: World, daemons: Daemons) -> None:
    res_pid, job_pid = world.root / "stub.pid", world.root / "job.pid"
    daemons.pidfiles += [res_pid, job_pid]
    config = f"""
[harness.stub]
kind = "resident"
argv = ["sh", "-c", "echo $$ > {res_pid}; {STUBBORN}"]

[harness.job]
kind = "oneshot"
on_overlap = "replace"
argv = ["sh", "-c", "echo $$ > {job_pid}; {STUBBORN}"]
"""
    daemons.write_config(config)
    daemons.start()
    _ignoring_sigterm(res_pid)

    stop, took = _timed(world, "stop", "stub")
    assert (stop.returncode, stop.stdout, stop.stderr) == (
        0, "stub: stopped run 1 (cancelled/operator)\n", "")
    assert took >= DEFAULT_GRACE  # it did wait out the grace

    start = world.harness("start", "stub")
    assert (start.returncode, start.stdout) == (0, "stub: started (run 2)\n"), start.stderr
    _ignoring_sigterm(res_pid)
    restart, took = _timed(world, "restart", "stub")
    assert (restart.returncode, restart.stdout, restart.stderr) == (
        0, "stub: restarted (replaced run 2, new run 3)\n", "")
    assert took >= DEFAULT_GRACE

    _ignoring_sigterm(res_pid)
    daemons.write_config(config.replace('kind = "resident"',
                                        'kind = "resident"\nrestart = "always"'))
    reload, took = _timed(world, "reload")
    assert (reload.returncode, reload.stdout, reload.stderr) == (
        0, "reloaded: changed stub; 1 unchanged\n", "")
    assert took >= DEFAULT_GRACE

    first = world.harness("trigger", "job")
    assert (first.returncode, first.stdout) == (0, "1\n"), first.stderr
    _ignoring_sigterm(job_pid)
    second, took = _timed(world, "trigger", "job")
    assert (second.returncode, second.stdout, second.stderr) == (0, "2\n", "")
    assert took >= DEFAULT_GRACE

    assert [(r["run_id"], r["outcome"], r.get("reason")) for r in runs_of(world, "stub")] == [
        (4, "running", None), (3, "cancelled", "reload"), (2, "cancelled", "operator"),
        (1, "cancelled", "operator")]
    assert [(r["run_id"], r["outcome"]) for r in runs_of(world, "job")] == [
        (2, "running"), (1, "replaced")]


# -- trigger --wait under many newer records ----------------------------------------------


def test_trigger_wait_finds_its_run_under_any_number_of_newer_records(
        world: World, daemons: Daemons) -> None:
    go = world.root / "go"
    daemons.write_config(f"""
[harness.gate]
kind = "oneshot"
argv = ["sh", "-c", "echo started; while [ ! -e {go} ]; do sleep 0.1; done; echo done; exit 7"]
""")
    daemons.start()
    with reaped(subprocess.Popen([sys.executable, "-m", "harness.cli", "trigger", "gate",
                                  "--wait"], env=world.env, text=True,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE)) as proc:
        until("run 1 to be live", lambda: (rec := record_of(world, "gate", 1)) is not None
              and rec["outcome"] == "running")
        # Firings while it is live are skipped, each a newer record of the same harness:
        # more of them than any one page of `runs` the waiter could look at.
        for n in range(2, 62):
            assert request(daemons, "trigger", name="gate") == {"decision": "skipped",
                                                                 "run_id": n}
        go.touch()
        out, err = proc.communicate(timeout=DEADLINE)
    assert (proc.returncode, out, err) == (7, "started\ndone\n", "gate run 1: failed\n")


def test_over_budget_is_recorded_on_the_run_it_admits(world: World, daemons: Daemons) -> None:
    """DESIGN §2's `trigger --over-budget`: the run it starts carries `override: true`
    (SPEC-0022 REQ-4); a run started without it carries no such field."""
    daemons.write_config(_config(world, daemons))
    daemons.start()
    over = world.harness("trigger", "ok", "--over-budget", "--wait")
    assert (over.returncode, over.stdout, over.stderr) == (0, "fine\n", "ok run 1: success\n")
    plain = world.harness("trigger", "ok")
    assert (plain.returncode, plain.stdout) == (0, "2\n")
    until("run 2 to close", lambda: (r := record_of(world, "ok", 2)) is not None
          and r["outcome"] == "success")
    recs = {r["run_id"]: r for r in runs_of(world, "ok")}
    assert recs[1]["override"] is True
    assert "override" not in recs[2]
    client = Client(str(daemons.socket))
    try:
        with pytest.raises(DaemonError) as info:
            client.request("trigger", name="ok", over_budget="yes")
    finally:
        client.close()
    assert (info.value.code, str(info.value)) == (
        "bad_request", "over_budget must be true or false")
    assert 3 not in {r["run_id"] for r in runs_of(world, "ok")}  # refused: no run


def _lines_with(world: World, field: bytes) -> int:
    """How many ledger lines hold `field` (canonical bytes) as the daemon writes them: a
    line it has half written is not a parse error here."""
    return sum(p.read_bytes().count(field) for p in world.ledger.glob("*.jsonl"))


def test_every_run_id_handed_out_as_sigterm_arrives_gets_a_record(
        world: World, daemons: Daemons) -> None:
    """Triggers keep arriving while SIGTERM shuts the daemon down: skips of busy one-shots,
    and starts of idle ones. Closing the control socket cancels the requests in flight,
    and one cut while its run id was being persisted used to leave the id in state.json
    with no line in the ledger. Every id up to each harness's last_run_id now has a
    record, and none reads running."""
    busy = [f"busy{n}" for n in range(4)]
    idle = [f"idle{n:02d}" for n in range(60)]
    daemons.write_config("".join(f'\n[harness.{n}]\nkind = "oneshot"\n'
                                 'argv = ["sleep", "1000"]\n' for n in busy + idle))
    proc = daemons.start()
    for name in busy:
        assert request(daemons, "trigger", name=name) == {"decision": "started", "run_id": 1}
    go = threading.Event()

    def fire(names: Iterable[str]) -> None:
        try:
            with Client(str(daemons.socket), timeout=DEADLINE) as c:
                for name in names:
                    c.request("trigger", name=name)
        except Exception:  # the shutdown ends the session, one way or another
            return

    def spam(name: str) -> None:
        fire(itertools.takewhile(lambda _: not go.is_set(), itertools.repeat(name)))

    threads = [threading.Thread(target=spam, args=(n,)) for n in busy + busy]
    threads.append(threading.Thread(target=fire, args=(idle,)))
    for t in threads:
        t.start()
    try:
        until("skips to pile up", lambda: _lines_with(world, b'"outcome":"skipped"') >= 40)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=DEADLINE) == 0, daemons.stderr()
    finally:
        go.set()
        for t in threads:
            t.join(timeout=DEADLINE)
    recs: dict[tuple[str, int], dict[str, Any]] = {}
    for line in all_lines(world.ledger):
        recs.setdefault((line["harness"], line["run_id"]), {}).update(line)
    last = {n: h["last_run_id"] for n, h in json.loads(
        (world.state / "state.json").read_text())["runs"].items()}
    assert {n: sorted(i for h, i in recs if h == n) for n in last} == {
        n: list(range(1, k + 1)) for n, k in last.items()}
    assert set(busy) <= set(last) <= {*busy, *idle}
    outcomes = {k: (r["outcome"], r.get("reason")) for k, r in recs.items()}
    assert {outcomes.pop((n, 1)) for n in busy} == {("interrupted", "shutdown")}
    assert {v for (n, _), v in outcomes.items() if n in busy} == {("skipped", "overlap")}
    assert {v for (n, _), v in outcomes.items() if n in idle} <= {("interrupted", "shutdown")}


def test_a_queued_firing_runs_next_however_many_triggers_follow(
        world: World, daemons: Daemons) -> None:
    """on_overlap = "queue" holds one firing until the live run ends, and it runs next.
    The reaper let go of the ended run before it took the harness's lock to start the
    held firing, and a trigger landing in between started at once: under steady
    triggers the held firing was overtaken again and again. Now every trigger while a
    firing is held is skipped (overlap), and the runs open in run-id order."""
    daemons.write_config('[harness.q]\nkind = "oneshot"\non_overlap = "queue"\n'
                         'argv = ["sleep", "0.3"]\n')
    proc = daemons.start()
    go = threading.Event()
    replies: list[dict[str, Any]] = []

    def spam() -> None:
        with Client(str(daemons.socket), timeout=DEADLINE) as c:
            while not go.is_set():
                replies.append(c.request("trigger", name="q"))

    threads = [threading.Thread(target=spam) for _ in range(3)]
    for t in threads:
        t.start()
    try:
        until("eight runs to open", lambda: _lines_with(world, b'"type":"opened"') >= 8)
    finally:
        go.set()
        for t in threads:
            t.join(timeout=DEADLINE)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=DEADLINE) == 0, daemons.stderr()
    lines = all_lines(world.ledger)
    opened = [ln["run_id"] for ln in lines if ln["type"] == "opened"]
    assert opened == sorted(opened) and len(opened) >= 8
    # No run opened ahead of a firing queued before it.
    queued = [r["run_id"] for r in replies if r["decision"] == "queued"]
    assert [q for q in queued if q < opened[-1] and q not in opened] == []
    recs: dict[int, dict[str, Any]] = {}
    for line in lines:
        recs.setdefault(line["run_id"], {}).update(line)
    by = {r["decision"] for r in replies}
    assert by == {"started", "queued", "skipped"}
    for r in replies:
        rec = recs[r["run_id"]]
        got = (rec["type"], rec["outcome"], rec.get("reason"))
        if r["decision"] == "skipped":
            assert got == ("decided", "skipped", "overlap")
        elif r["run_id"] in opened:
            assert got[1:] in {("success", None), ("interrupted", "shutdown")}
        else:  # the firing still held at the shutdown
            assert (r["decision"], got) == ("queued", ("decided", "interrupted", "shutdown"))
    assert sorted(recs) == list(range(1, len(recs) + 1)) == sorted(r["run_id"] for r in replies)


def test_a_wall_clock_stepped_back_mid_run_keeps_its_duration(
        world: World, fd: FaultDaemons) -> None:
    """The wall clock steps back a minute (an NTP correction) while a 3 s run is live.
    duration_ms came from the wall clock, clamped: it read 0, and ended_at preceded
    started_at. The duration is the monotonic clock's now, and the end is never earlier
    than the start plus it."""
    clock = world.root / "clock"
    clock.write_text("0")
    fd.write_config('[harness.span]\nkind = "oneshot"\nargv = ["sleep", "3"]\n')
    fd.start_faulty("--clock", str(clock))
    fd.booted()
    assert request(fd, "trigger", name="span") == {"decision": "started", "run_id": 1}
    clock.write_text(str(-60 * 1_000_000_000))  # the opened line already has its stamp
    rec = until("the run to close", lambda: (r := record_of(world, "span", 1))
                and r["outcome"] != "running" and r)
    assert (rec["outcome"], rec["exit_code"]) == ("success", 0)
    assert rec["duration_ms"] >= 3000
    took = parse_ns(rec["ended_at"]) - parse_ns(rec["started_at"])
    assert took // 1_000_000 >= rec["duration_ms"]
