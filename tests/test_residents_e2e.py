"""Resident harnesses end to end (SPEC-0022 REQ-3, REQ-5): a real daemon, the real CLI.

Covers autostart, the restart policy with its crash-loop backoff, the durable log, the
operator verbs `start`, `stop` and `restart`, and shutdown. The `daemons` fixture
(conftest.py) and the polling helpers (daemons.py) are shared with the other end-to-end
tests; every daemon and every pid a test recorded is killed at teardown.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import World
from daemons import DEADLINE, Daemons, record_of, runs_of, states_of, until
from harness.supervisor.manager import MAX_BACKOFF, next_delay
from ledgertools import all_lines, line_of


def _durable_log(world: World, name: str) -> Path:
    return world.state / "logs" / f"{name}.log"


def test_a_crash_loop_backs_off_and_restart_no_exits_once(
        world: World, daemons: Daemons) -> None:
    daemons.write_config("""
[harness.crashy]
kind = "resident"
restart_delay = "200ms"
argv = ["sh", "-c", "echo boom; sleep 0.05; exit 1"]

[harness.once]
kind = "resident"
restart = "no"
restart_delay = "200ms"
argv = ["sh", "-c", "echo once; exit 1"]

[harness.done]
kind = "resident"
restart_delay = "200ms"
argv = ["sh", "-c", "exit 0"]

[harness.again]
kind = "resident"
restart = "always"
restart_delay = "200ms"
argv = ["sh", "-c", "exit 0"]
""")
    daemons.start()

    def four_closed() -> list[dict[str, Any]] | None:
        recs = sorted(runs_of(world, "crashy"), key=lambda r: r["run_id"])
        closed = [r for r in recs if r["outcome"] != "running"]
        return closed[:4] if len(closed) >= 4 else None

    recs = until("four closed crash-loop runs", four_closed)
    # Delays 0.2, 0.4, 0.8 s got here; the next is 1.6 s, so the loop is now backing off
    # (or, on a slow machine, has already started a fifth run).
    state = states_of(world)["crashy"]
    assert state in ("backoff", "running")
    log_path = _durable_log(world, "crashy")
    first = recs[0]["run_id"]
    assert [r["run_id"] for r in recs] == [first, first + 1, first + 2, first + 3]
    assert [r["trigger"] for r in recs] == ["autostart", "restart", "restart", "restart"]
    for rec in recs:
        assert rec["outcome"] == "failed" and rec["exit_code"] == 1, rec
        assert rec["kind"] == "resident" and rec["log"] == str(log_path)
        assert "ended_at" in rec
    # The backoff doubles: each restart waited longer than the one before it.
    starts = [r["started_at"] for r in recs]
    assert starts == sorted(starts)

    assert stat.S_IMODE(log_path.stat().st_mode) == 0o600
    assert stat.S_IMODE(log_path.parent.stat().st_mode) == 0o700
    assert log_path.read_text().count("boom") >= 4
    # Never a per-run log: residents write the durable one only.
    assert not (world.state / "jobs" / "crashy").exists()

    stopped = world.harness("stop", "crashy")
    assert stopped.returncode == 0, stopped.stderr
    assert stopped.stdout.startswith("crashy: ")
    until("crashy to be stopped", lambda: states_of(world)["crashy"] == "stopped")

    # restart = "no": one run, failed, and nothing after it.
    [once] = until("the restart=no run to close", lambda: [
        r for r in runs_of(world, "once") if r["outcome"] != "running"])
    assert once["outcome"] == "failed" and once["exit_code"] == 1
    assert once["trigger"] == "autostart"
    time.sleep(1.0)  # five restart delays
    assert len(runs_of(world, "once")) == 1
    assert states_of(world)["once"] == "stopped"
    # on-failure (the default): a clean exit is final. always: restarted all the same.
    [done] = runs_of(world, "done")
    assert done["outcome"] == "success" and done["exit_code"] == 0
    again = sorted(runs_of(world, "again"), key=lambda r: r["run_id"])
    assert len(again) >= 2
    assert again[0]["outcome"] == "success" and again[1]["trigger"] == "restart"


@pytest.mark.parametrize(("base", "current", "up", "want"), [
    (0.2, None, 0.05, (0.2, 0.4)),  # the first quick failure waits the configured delay
    (0.2, 0.4, 0.05, (0.4, 0.8)),  # each further one doubles
    (1.0, 40.0, 1.0, (40.0, MAX_BACKOFF)),  # capped
    (1.0, MAX_BACKOFF, 1.0, (MAX_BACKOFF, MAX_BACKOFF)),
    (1.0, 8.0, 30.0, (8.0, 8.0)),  # neither quick nor stable: the backoff holds
    (1.0, MAX_BACKOFF, 60.0, (1.0, 1.0)),  # up a minute: reset
    # A restart_delay above the cap: a quick failure never brings the next restart
    # sooner than the configured delay (it used to drop to MAX_BACKOFF).
    (300.0, None, 1.0, (300.0, 300.0)),
    (300.0, 300.0, 1.0, (300.0, 300.0)),
    (300.0, 300.0, 60.0, (300.0, 300.0)),
])
def test_crash_loop_backoff(base: float, current: float | None, up: float,
                            want: tuple[float, float]) -> None:
    assert next_delay(base, current, up) == want


def _wait_up(world: World, name: str, run_id: int | None = None) -> dict[str, Any]:
    """The live run of `name` (the one with `run_id` if given), once its script wrote its pid."""
    pidfile = world.root / f"{name}.pid"

    def probe() -> dict[str, Any] | None:
        live = [r for r in runs_of(world, name) if r["outcome"] == "running"
                and (run_id is None or r["run_id"] == run_id)]
        if live and pidfile.exists() and pidfile.read_text().strip():
            return live[0]
        return None

    return until(f"{name} to be running", probe)


def _gone(pidfile: Path) -> bool:
    try:
        os.killpg(int(pidfile.read_text()), 0)
    except ProcessLookupError:
        return True
    return False


def test_operator_stop_start_restart_and_shutdown(world: World, daemons: Daemons) -> None:
    pidfile = world.root / "svc.pid"
    daemons.pidfiles.append(pidfile)
    daemons.write_config(f"""
[harness.svc]
kind = "resident"
restart_delay = "200ms"
argv = ["sh", "-c", "echo up; echo $$ > {pidfile}; exec sleep 120"]

[harness.ok]
kind = "oneshot"
argv = ["true"]
""")
    proc = daemons.start()
    first = _wait_up(world, "svc")
    assert first["trigger"] == "autostart" and first["kind"] == "resident"
    assert first["log"] == str(_durable_log(world, "svc"))
    assert states_of(world)["svc"] == "running"

    # stop: the closed line is on disk by the time the command returns.
    res = world.harness("stop", "svc")
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == f"svc: stopped run {first['run_id']} (cancelled/operator)"
    line = line_of(world.ledger, "closed", "svc", first["run_id"])
    assert line is not None
    assert line["outcome"] == "cancelled" and line["reason"] == "operator"
    assert _gone(pidfile)
    time.sleep(2.0)  # ten restart delays: a stopped resident stays down
    assert len(runs_of(world, "svc")) == 1
    assert states_of(world)["svc"] == "stopped"
    again = world.harness("stop", "svc")
    assert again.returncode == 0 and again.stdout.strip() == "svc: not running"

    # start: a new run, trigger manual.
    pidfile.unlink()
    res = world.harness("start", "svc")
    assert res.returncode == 0, res.stderr
    second_id = first["run_id"] + 1
    assert res.stdout.strip() == f"svc: started (run {second_id})"
    second = _wait_up(world, "svc", second_id)
    assert second["trigger"] == "manual"
    already = world.harness("start", "svc")
    assert already.stdout.strip() == f"svc: already running (run {second_id})"

    # restart: the old run cancelled/operator (a deliberate stop), a new one with trigger
    # manual.
    pidfile.unlink()
    res = world.harness("restart", "svc")
    assert res.returncode == 0, res.stderr
    third_id = second_id + 1
    assert res.stdout.strip() == (f"svc: restarted (replaced run {second_id}, "
                                  f"new run {third_id})")
    old = record_of(world, "svc", second_id)
    assert old is not None
    assert old["outcome"] == "cancelled" and old["reason"] == "operator"
    third = _wait_up(world, "svc", third_id)
    assert third["trigger"] == "manual"
    assert _durable_log(world, "svc").read_text().count("up") == 3

    # The verbs on a one-shot, an unknown name.
    res = world.harness("start", "ok")
    assert res.returncode == 0 and res.stdout.startswith("ok: triggered (run ")
    res = world.harness("restart", "ok")
    assert res.returncode == 1 and "bad_request" in res.stderr
    assert "Traceback" not in res.stderr
    res = world.harness("stop", "nope")
    assert res.returncode == 1 and "not_found" in res.stderr

    # SIGTERM: the live resident closes interrupted/shutdown and is not restarted.
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=DEADLINE) == 0, daemons.stderr()
    recs = sorted(runs_of(world, "svc"), key=lambda r: r["run_id"])
    assert [r["run_id"] for r in recs] == [first["run_id"], second_id, third_id]
    assert recs[-1]["outcome"] == "interrupted" and recs[-1]["reason"] == "shutdown"
    assert _gone(pidfile)


def test_the_resident_verbs_without_a_daemon_say_so(world: World) -> None:
    for verb in ("start", "stop", "restart"):
        res = world.harness(verb, "svc")
        assert res.returncode == 1
        assert res.stderr.startswith("harness: daemon not running")
        assert res.stderr.count("\n") == 1 and "Traceback" not in res.stderr


def _opened(world: World) -> dict[str, list[tuple[int, str]]]:
    """Each harness's opened lines in the ledger, as (run_id, trigger)."""
    out: dict[str, list[tuple[int, str]]] = {}
    for x in all_lines(world.ledger):
        if x["type"] == "opened":
            out.setdefault(x["harness"], []).append((x["run_id"], x["trigger"]))
    return out


def test_an_operator_stop_of_an_unless_stopped_resident_outlives_daemon_restarts(
        world: World, daemons: Daemons) -> None:
    """`unless-stopped` behaved as `always`: a resident the operator stopped came back up
    when the daemon restarted. Now the stop is kept in state.json until `harness start`,
    across a clean restart, a SIGKILL of the daemon and a reload, and for a resident that
    was not running when stopped; an `always` resident still autostarts, and so does an
    unless-stopped one that exited on its own (a crash is no stop)."""
    pids = {n: world.root / f"{n}.pid" for n in ("u", "a", "c")}
    daemons.pidfiles.extend(pids.values())
    mark = world.root / "c.crashed"
    up = "echo $$ > {}; exec sleep 120"

    def config(u_delay: str) -> str:
        return f"""
[harness.u]
kind = "resident"
restart = "unless-stopped"
restart_delay = "{u_delay}"
argv = ["sh", "-c", "{up.format(pids['u'])}"]

[harness.a]
kind = "resident"
restart = "always"
argv = ["sh", "-c", "{up.format(pids['a'])}"]

[harness.c]
kind = "resident"
restart = "unless-stopped"
restart_delay = "1h"
argv = ["sh", "-c", "[ -e {mark} ] || {{ touch {mark}; exit 1; }}; {up.format(pids['c'])}"]

[harness.n]
kind = "resident"
restart = "unless-stopped"
restart_delay = "1h"
argv = ["sh", "-c", "exit 1"]
"""

    daemons.write_config(config("200ms"))
    proc = daemons.start()
    _wait_up(world, "u")
    _wait_up(world, "a")
    until("c and n to crash into their 1h backoff", lambda: states_of(world) == {
        "u": "running", "a": "running", "c": "backoff", "n": "backoff"})
    for name, said in (("u", "u: stopped run 1 (cancelled/operator)"),
                       ("a", "a: stopped run 1 (cancelled/operator)"),
                       ("n", "n: not running")):
        res = world.harness("stop", name)
        assert (res.returncode, res.stdout, res.stderr) == (0, said + "\n", "")
    state = world.state / "state.json"
    assert json.loads(state.read_text())["stopped"] == ["a", "n", "u"]
    assert stat.S_IMODE(state.stat().st_mode) == 0o600
    # A reload that changes the stopped resident keeps it stopped.
    daemons.write_config(config("300ms"))
    res = world.harness("reload")
    assert res.returncode == 0, res.stderr
    assert states_of(world) == {"u": "stopped", "a": "stopped", "c": "backoff",
                                "n": "stopped"}
    before = _opened(world)
    assert before == {"u": [(1, "autostart")], "a": [(1, "autostart")],
                      "c": [(1, "autostart")], "n": [(1, "autostart")]}

    # A clean restart: `list` answers once the boot, autostarts included, is done.
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=DEADLINE) == 0, daemons.stderr()
    for p in pids.values():
        p.unlink(missing_ok=True)
    proc = daemons.start()
    assert states_of(world) == {"u": "stopped", "a": "running", "c": "running",
                                "n": "stopped"}
    assert _opened(world) == {**before, "a": [(1, "autostart"), (2, "autostart")],
                              "c": [(1, "autostart"), (2, "autostart")]}
    _wait_up(world, "a", 2)
    _wait_up(world, "c", 2)
    assert json.loads(state.read_text())["stopped"] == ["n", "u"]  # `always` came back
    held = ('INFO harness.manager: harness {}: stopped by the operator before the daemon '
            'started; stays stopped until started (restart = "unless-stopped")')
    logged = [line.split(" ", 2)[2] for line in daemons.stderr().splitlines()]
    assert [x for x in logged if "stopped by the operator" in x] == [
        held.format("n"), held.format("u")]

    # A daemon killed outright: the stops were on disk before `stop` answered.
    proc.kill()
    proc.wait(timeout=DEADLINE)
    for p in pids.values():
        p.unlink(missing_ok=True)
    daemons.start()
    assert states_of(world) == {"u": "stopped", "a": "running", "c": "running",
                                "n": "stopped"}
    opened = _opened(world)
    assert (opened["u"], opened["n"]) == ([(1, "autostart")], [(1, "autostart")])
    assert opened["a"][-1] == (3, "autostart") and opened["c"][-1] == (3, "autostart")

    # `harness start` ends the stop, here and for the next boot.
    res = world.harness("start", "u")
    assert (res.returncode, res.stdout, res.stderr) == (0, "u: started (run 2)\n", "")
    assert _wait_up(world, "u", 2)["trigger"] == "manual"
    assert json.loads(state.read_text())["stopped"] == ["n"]
