"""A deep state dir, end to end: a real daemon and the real CLI, every log path past 256 bytes.

SPEC-0022 REQ-4 caps every string of a ledger line at 256 bytes, so a run's `log` field
holds the first 256 bytes of its path when `$XDG_STATE_HOME` is deep. What follows that
field must still reach the log itself: `trigger --wait` shows the run's output,
`harness runs --json` says `log_pruned: true` only of a log keep_runs deleted (REQ-12),
daemon up or down, `harness logs` shows the log, and a crashed run's log gets its notes
and is compressed at the next boot (REQ-7). The ledger keeps the cut (REQ-4), checked too.
"""

from __future__ import annotations

import json
import os
import re
import signal
from pathlib import Path
from typing import Any

import pytest

from conftest import World
from daemons import DEADLINE, Daemons, alive, comm, record_of, until
from harness.supervisor.history import CRASH_NOTE
from test_cli_logs import COUNTING

# The one-shot of test_cli_logs (each run prints its number and two fixed lines); the
# resident prints one line and exits 0, and is not restarted.
CONFIG = COUNTING + """
[harness.res]
kind = "resident"
enabled = true
restart = "no"
workdir = "{workdir}"
argv = ["sh", "-c", "echo resident up"]
"""


@pytest.fixture
def deep(world: World) -> World:
    """`world` with its state home three 80-byte directories deeper."""
    home = world.root / "state" / ("d" * 80) / ("e" * 80) / ("f" * 80)
    world.env["XDG_STATE_HOME"] = str(home)
    return world


def _state(world: World) -> Path:
    return Path(world.env["XDG_STATE_HOME"]) / "harness"


def _cut(path: Path) -> str:
    """What the ledger keeps of an ASCII path: its first 256 bytes (REQ-4)."""
    raw = str(path)
    assert raw.isascii() and len(raw) > 256, raw
    return raw[:256]


def _logs(world: World, *args: str) -> tuple[int, str, str]:
    res = world.harness("logs", *args)
    return res.returncode, res.stdout, res.stderr


def _listed(world: World) -> list[tuple[Any, ...]]:
    """(harness, run_id, outcome, log, log_pruned) of every record `harness runs --json`
    prints, in a fixed order."""
    res = world.harness("runs", "--json")
    assert res.returncode == 0, res.stderr
    return sorted((r["harness"], r["run_id"], r["outcome"], r["log"], r.get("log_pruned"))
                  for r in json.loads(res.stdout))


def test_a_deep_state_dirs_logs_are_followed_listed_and_shown(
        deep: World, daemons: Daemons) -> None:
    state = _state(deep)
    workdir = deep.root / "work"
    workdir.mkdir()
    daemons.write_config(CONFIG.format(workdir=workdir))
    proc = daemons.start()
    for n in (1, 2, 3):
        res = deep.harness("trigger", "job", "--wait")
        assert (res.returncode, res.stdout) == (0, f"run {n}\nsecond\nthird\n"), res.stderr
        assert res.stderr == f"job run {n}: success\n"
    jobs = state / "jobs" / "job"
    until("run 3's log compressed and run 1's pruned",
          lambda: sorted(os.listdir(jobs)) == ["2.log.zst", "3.log.zst"])
    until("the resident's run to end",
          lambda: (rec := record_of(deep, "res", 1)) is not None
          and rec["outcome"] == "success")

    durable = state / "logs" / "res.log"
    want = [("job", 1, "success", _cut(jobs / "1.log"), True),
            ("job", 2, "success", _cut(jobs / "2.log"), None),
            ("job", 3, "success", _cut(jobs / "3.log"), None),
            ("res", 1, "success", _cut(durable), None)]
    pruned = (1, "", "harness: job run 1's log was pruned (keep_runs = 2; the oldest log "
                     "kept is run 2's)\n")
    assert _listed(deep) == want
    assert _logs(deep, "job", "--run", "2") == (0, "run 2\nsecond\nthird\n", "")
    assert _logs(deep, "job", "--run", "1") == pruned
    assert _logs(deep, "res") == (0, "resident up\n", "")

    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=DEADLINE) == 0, daemons.stderr()
    # From the files, the daemon down: the same answers.
    assert _listed(deep) == want
    assert _logs(deep, "job", "--run", "3") == (
        0, "run 3\nsecond\nthird\n", "harness: daemon not running; read the log from disk\n")
    assert _logs(deep, "job", "--run", "1") == pruned


def test_a_crashed_run_under_a_deep_state_dir_gets_its_notes_and_is_compressed(
        deep: World, daemons: Daemons) -> None:
    pidfile = deep.root / "long.pid"
    daemons.pidfiles.append(pidfile)
    daemons.write_config(f"""
[harness.long]
kind = "oneshot"
argv = ["sh", "-c", "echo started; echo $$ > {pidfile}; exec sleep 300"]
""")
    first = daemons.start()
    res = deep.harness("trigger", "long")
    assert (res.returncode, res.stdout) == (0, "1\n"), res.stderr
    until("run 1's sleep", lambda: pidfile.exists() and pidfile.read_text().strip()
          and comm(int(pidfile.read_text())) == "sleep")
    pid = int(pidfile.read_text())
    first.kill()
    first.wait(timeout=DEADLINE)

    daemons.start()
    jobs = _state(deep) / "jobs" / "long"
    until("run 1's log compressed", lambda: sorted(os.listdir(jobs)) == ["1.log.zst"])
    until("the orphan to be stopped", lambda: not alive(pid))
    code, out, err = _logs(deep, "long", "--run", "1")
    assert (code, err) == (0, "")
    assert re.fullmatch(
        r"started\n"
        r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z harness: " + re.escape(CRASH_NOTE) + r"\n"
        r"harness: stopped the orphaned process group " + str(pid)
        + r" left by the crashed daemon \(SIGTERM\)\n", out), out
    assert [r for r in _listed(deep) if r[0] == "long"] == [
        ("long", 1, "interrupted", _cut(jobs / "1.log"), None)]


def test_trigger_wait_from_another_state_dir_says_it_cannot_follow_a_cut_log(
        deep: World, daemons: Daemons) -> None:
    """The CLI finds a cut log under its own state dir: one that is not the daemon's
    cannot say which file the cut stood for, so it says so and waits without the log,
    rather than read whatever file the cut names."""
    workdir = deep.root / "work"
    workdir.mkdir()
    daemons.write_config(CONFIG.format(workdir=workdir))
    daemons.start()
    apart = World(deep.root, {**deep.env, "XDG_STATE_HOME": str(deep.root / "elsewhere")})
    res = apart.harness("trigger", "job", "--wait")
    assert (res.returncode, res.stdout) == (0, "")
    assert res.stderr == (
        "harness: cannot tell where job run 1's log is (its path is cut in the run ledger, "
        "and not under this state directory); waiting for the run to end without it\n"
        "job run 1: success\n")
