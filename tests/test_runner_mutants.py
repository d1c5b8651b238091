"""Mutation-test survivors of the runner (`harness.supervisor.runner`): what a stop, a
timeout or a loop torn down does to the descendants that left the run's process group
(setsid), found by the run's identity at the SIGTERM, during the grace (a helper
daemonized in answer to the SIGTERM too) and after it; a second stop that brings the
SIGKILL closer and keeps the first stop's outcome; a one-shot's closed line the disk
refuses, which `wait` reports queued rather than durable; a resident's one private
durable log and its spec without a timeout; an env value holding a NUL, named by file
and line; the once-per-episode log failure; the log's descriptor, never leaked; and a
failed spawn's one-line note naming the file and the reason. Real processes, real
files; the only fake is the ledger's failing disk.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import logging
import os
import re
import shutil
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from daemons import read_log
from harness.ledger.errors import LedgerClosed
from harness.ledger.files import FaultyFiles
from harness.ledger.runledger import RunLedger
from harness.supervisor.runner import LogFailures, Run, RunSpec
from harness.supervisor.state import RunIds, StateFile

DEADLINE = 60.0
# A descendant that leaves the run's group and session, and says its pid (its group's).
ESCAPE = "setsid sh -c 'echo $$ > {f}; exec sleep 1000' &"


def _ended(pid: int) -> bool:
    """Gone, or a zombie: it runs no more."""
    try:
        return bool(psutil.Process(pid).status() == psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return True


def _until(what: str, cond: Callable[[], bool]) -> None:
    end = time.monotonic() + DEADLINE
    while not cond():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.02)


async def _until_async(what: str, cond: Callable[[], bool]) -> None:
    end = time.monotonic() + DEADLINE
    while not cond():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


def _pid_in(path: Path) -> int | None:
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    return int(text) if text.endswith("\n") else None


@pytest.fixture
def reap() -> Iterator[list[Path]]:
    """Pid files of descendants a failing test may leave running: SIGKILLed at teardown."""
    files: list[Path] = []
    yield files
    for f in files:
        pid = _pid_in(f)
        if pid is not None:
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGKILL)


class Rig:
    def __init__(self, ledger: RunLedger, root: Path) -> None:
        self.ledger, self.root = ledger, root
        self.jobs = str(root / "state" / "jobs")
        self.ids = RunIds(StateFile(str(root / "state" / "state.json")), ledger, self.jobs)

    def run(self, name: str, script: str, **kw: Any) -> Run:
        grace = kw.pop("grace", 600.0)
        return Run(RunSpec(name, ["sh", "-c", script], **kw), self.ledger, self.ids,
                   "manual", jobs_dir=self.jobs, grace=grace)

    def closed(self, name: str, run_id: int) -> list[dict[str, Any]]:
        out = []
        for p in sorted(Path(self.ledger.directory).glob("*.jsonl")):
            for x in p.read_text().splitlines():
                o = json.loads(x)
                if (o["type"], o["harness"], o["run_id"]) == ("closed", name, run_id):
                    out.append({k: o[k] for k in ("outcome", "reason", "exit_code") if k in o})
        return out


@pytest.fixture
def rig(tmp_path: Path, open_ledger: Callable[..., RunLedger]) -> Rig:
    return Rig(open_ledger(tmp_path / "state" / "ledger"), tmp_path)


def _log(run: Run) -> str:
    """The runner's notes in the run's log: a shell may say "Terminated" of a child the
    SIGTERM ended, which is not ours."""
    assert run.log_path is not None
    data = read_log(run.log_path)
    assert data is not None
    return "".join(x for x in data.decode().splitlines(keepends=True)
                   if x.startswith("harness:"))


def _also(pid: int) -> str:
    return (f"harness: also stopping the process group(s) {pid} that its descendants "
            "started (setsid)\n")


# -- what left the group ------------------------------------------------------------------


def test_a_timeout_also_stops_the_descendant_that_left_the_group(
        rig: Rig, tmp_path: Path, reap: list[Path]) -> None:
    """A timed-out one-shot's setsid descendant is found by the run's identity and
    SIGTERMed with the group: the timeout is a stop, not the process's own exit."""
    esc = tmp_path / "esc.pid"
    reap.append(esc)
    run = rig.run("to", f"{ESCAPE.format(f=esc)} while [ ! -s {esc} ]; do sleep 0.05; done; "
                        "exec sleep 1000", timeout=5.0)

    async def go() -> dict[str, Any]:
        await run.start()
        return await asyncio.wait_for(run.wait(), DEADLINE)

    rec = asyncio.run(go())
    pid = _pid_in(esc)
    assert pid is not None
    _until("the descendant that left the group to end", lambda: _ended(pid))
    assert (rec["outcome"], rec["exit_code"]) == ("timed_out", -1)
    assert rig.closed("to", 1) == [{"outcome": "timed_out", "exit_code": -1}]
    assert _log(run) == "harness: timed out after 5s; stopping the process group\n" + _also(pid)


@pytest.mark.parametrize("how", ["stop", "loop torn down"])
def test_a_stop_also_stops_the_descendant_that_left_the_group(
        rig: Rig, tmp_path: Path, reap: list[Path], how: str) -> None:
    """An operator's stop, and a loop torn down without one (a shutdown's end), each end
    the setsid descendant with the group: SIGTERM, no SIGKILL needed."""
    esc = tmp_path / "esc.pid"
    reap.append(esc)
    run = rig.run("st", f"{ESCAPE.format(f=esc)} exec sleep 1000")

    async def go() -> None:
        await run.start()
        await _until_async("the descendant to start", lambda: _pid_in(esc) is not None)
        if how == "stop":
            await asyncio.wait_for(run.stop("operator"), DEADLINE)

    asyncio.run(go())
    pid = _pid_in(esc)
    assert pid is not None
    _until("the descendant that left the group to end", lambda: _ended(pid))
    want = ({"outcome": "cancelled", "reason": "operator", "exit_code": -1} if how == "stop"
            else {"outcome": "interrupted", "reason": "shutdown", "exit_code": -1})
    assert rig.closed("st", 1) == [want]
    assert _log(run) == _also(pid)


def test_a_descendant_that_leaves_the_group_during_the_grace_is_killed_with_it(
        rig: Rig, tmp_path: Path, reap: list[Path]) -> None:
    """The leader ignores SIGTERM; after the runner's first look for escaped groups (its
    note in the log), it starts a second setsid descendant that ignores SIGTERM too. A
    second stop brings the SIGKILL forward: the runner looks again and kills both, and
    the run keeps the first stop's outcome."""
    esc, go, late = (tmp_path / n for n in ("esc.pid", "go", "late.pid"))
    reap.extend([esc, late])
    stubborn_late = "setsid sh -c 'trap \"\" TERM; echo $$ > {f}; exec sleep 1000' &"
    script = (f"trap '' TERM; {ESCAPE.format(f=esc)} "
              f"while [ ! -e {go} ]; do sleep 0.05; done; "
              f"{stubborn_late.format(f=late)} while :; do sleep 0.05; done")
    run = rig.run("gr", script)
    got: dict[str, Any] = {}

    async def main() -> None:
        await run.start()
        pid = await _wait_pid(esc)
        first = asyncio.create_task(run.stop("hours"))
        await _until_async("the first look's note", lambda: _also(pid) in _log(run))
        go.touch()
        await _wait_pid(late)
        got["second"] = await asyncio.wait_for(run.stop("shutdown", grace=0.0), DEADLINE)
        got["first"] = await asyncio.wait_for(first, DEADLINE)

    asyncio.run(main())
    pid, lpid = _pid_in(esc), _pid_in(late)
    assert pid is not None and lpid is not None
    _until("the late descendant to end", lambda: _ended(lpid))
    want = {"outcome": "cancelled", "reason": "hours", "exit_code": -1}
    assert rig.closed("gr", 1) == [want]
    for rec in got.values():
        assert {k: rec.get(k) for k in want} == want
    assert re.fullmatch(re.escape(_also(pid)) + r"harness: still running [\d.]+s after "
                        r"SIGTERM; sent SIGKILL\n", _log(run)), _log(run)


async def _wait_pid(path: Path) -> int:
    await _until_async(f"{path.name} to be written", lambda: _pid_in(path) is not None)
    pid = _pid_in(path)
    assert pid is not None
    return pid


def test_a_helper_daemonized_in_answer_to_sigterm_does_not_outlive_the_stop(
        rig: Rig, tmp_path: Path, reap: list[Path]) -> None:
    """The leader answers SIGTERM by starting a setsid helper, after the runner's first
    look for escaped groups (its note in the log), and exiting 0. Its group empties
    within the grace, but the run is not over: the helper carries the run's identity and
    is ended too (it outlived the stop before)."""
    esc, go, late = (tmp_path / n for n in ("esc.pid", "go", "late.pid"))
    reap.extend([esc, late])
    leader = tmp_path / "leader.sh"
    leader.write_text(f"""on_term() {{
    while [ ! -e {go} ]; do sleep 0.05; done
    {ESCAPE.format(f=late)}
    while [ ! -s {late} ]; do sleep 0.05; done
    exit 0
}}
trap on_term TERM
{ESCAPE.format(f=esc)}
while :; do sleep 0.05; done
""")
    run = Run(RunSpec("dz", ["sh", str(leader)]), rig.ledger, rig.ids, "manual",
              jobs_dir=rig.jobs, grace=600.0)

    async def main() -> dict[str, Any]:
        await run.start()
        pid = await _wait_pid(esc)
        stop = asyncio.create_task(run.stop("operator"))
        await _until_async("the first look's note", lambda: _also(pid) in _log(run))
        go.touch()
        return await asyncio.wait_for(stop, DEADLINE)

    rec = asyncio.run(main())
    pid, lpid = _pid_in(esc), _pid_in(late)
    assert pid is not None and lpid is not None
    _until("the helper started at SIGTERM to end", lambda: _ended(lpid))
    want = {"outcome": "cancelled", "reason": "operator", "exit_code": 0}
    assert {k: rec.get(k) for k in want} == want
    assert rig.closed("dz", 1) == [want]
    assert _log(run) == _also(pid) + _also(lpid)


# -- the grace of a stop ---------------------------------------------------------------------


def test_a_second_stop_never_puts_the_sigkill_later(rig: Rig, tmp_path: Path) -> None:
    """A stop with a short grace, then one with the run's long grace: the SIGKILL comes
    after the short one, and the first stop's outcome stands."""
    up = tmp_path / "up"
    run = rig.run("two", f"trap '' TERM; touch {up}; while :; do sleep 0.05; done")

    async def main() -> tuple[dict[str, Any], dict[str, Any]]:
        await run.start()
        await _until_async("the leader to ignore SIGTERM", up.exists)
        first = asyncio.create_task(run.stop("operator", grace=0.2))
        await asyncio.sleep(0)
        second = await asyncio.wait_for(run.stop("shutdown"), DEADLINE)
        return await asyncio.wait_for(first, DEADLINE), second

    recs = asyncio.run(main())
    want = {"outcome": "cancelled", "reason": "operator", "exit_code": -1}
    assert rig.closed("two", 1) == [want]
    assert [{k: r.get(k) for k in want} for r in recs] == [want, want]
    assert re.fullmatch(r"harness: still running [\d.]+s after SIGTERM; sent SIGKILL\n",
                        _log(run)), _log(run)


# -- a closed line the disk refuses -------------------------------------------------------


def test_a_one_shots_closed_line_the_disk_refuses_is_reported_queued(
        tmp_path: Path, open_ledger: Callable[..., RunLedger],
        caplog: pytest.LogCaptureFixture) -> None:
    """A one-shot's end waits for its closed line to be durable: when the disk refuses
    it, `wait` returns the record as it will read once written (the opened line's fields
    and the closed line's), says the line is queued (`close_queued`) and logs why; the
    line lands, once, when the disk takes it."""
    files = FaultyFiles()
    led = open_ledger(tmp_path / "state" / "ledger", files=files, sync_timeout=0.5,
                      retry_min=0.05, retry_max=0.2)
    rig = Rig(led, tmp_path)
    go = tmp_path / "go"
    run = rig.run("q", f"while [ ! -e {go} ]; do sleep 0.05; done; exit 3")

    async def main() -> dict[str, Any]:
        await run.start()  # its opened line is durable
        files.inject("write", errno=errno.ENOSPC)
        go.touch()
        return await asyncio.wait_for(run.wait(), DEADLINE)

    caplog.set_level(logging.ERROR, logger="harness.supervisor")
    rec = asyncio.run(main())
    assert (rec["outcome"], rec["exit_code"]) == ("failed", 3)
    assert run.close_queued is True
    assert [r.getMessage().split(": closed line")[0] for r in caplog.records
            if r.name == "harness.supervisor"] == ["run q/1"]
    assert rig.closed("q", 1) == []
    files.clear("write")
    _until("the queued closed line to land", lambda: rig.closed("q", 1) != [])
    assert rig.closed("q", 1) == [{"outcome": "failed", "exit_code": 3}]
    landed = led.get("q", 1)
    assert landed is not None and landed["trigger"] == "manual"
    # `wait` answered with the record as it reads now that the line is written.
    assert {k: v for k, v in rec.items() if k != "seq"} == {
        k: v for k, v in landed.items() if k != "seq"}


# -- a resident's durable log, and its spec ------------------------------------------------


def test_a_residents_spawns_append_to_one_private_durable_log(
        rig: Rig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each spawn of a resident continues $XDG_STATE_HOME/harness/logs/<name>.log, made
    0600 in a 0700 directory the first spawn creates; it is never compressed."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    path = tmp_path / "xdg" / "harness" / "logs" / "svc.log"

    async def spawn(word: str) -> dict[str, Any]:
        run = Run(RunSpec("svc", ["sh", "-c", f"echo {word}"]), rig.ledger, rig.ids,
                  "autostart", kind="resident", jobs_dir=rig.jobs)
        await run.start()
        return await asyncio.wait_for(run.wait(), DEADLINE)

    recs = [asyncio.run(spawn(w)) for w in ("one", "two")]
    assert [(r["run_id"], r["kind"], r["outcome"], r["log"]) for r in recs] == [
        (1, "resident", "success", str(path)), (2, "resident", "success", str(path))]
    assert path.read_bytes() == b"one\ntwo\n"
    assert sorted(os.listdir(path.parent)) == ["svc.log"]
    assert oct(path.stat().st_mode & 0o777) == oct(0o600)
    assert oct(path.parent.stat().st_mode & 0o777) == oct(0o700)


def test_a_resident_spec_has_no_timeout_whatever_its_config_says() -> None:
    """`timeout` bounds a one-shot's run: a resident left at the config's default (one
    hour) must not be stopped after it."""
    from harness.config.model import HarnessConfig

    res = HarnessConfig.model_validate({"argv": ["srv"], "kind": "resident"})
    one = HarnessConfig.model_validate({"argv": ["job"], "kind": "oneshot"})
    assert res.timeout == one.timeout == 3600 * 10**9
    assert RunSpec.from_config("r", res).timeout is None
    assert RunSpec.from_config("o", one).timeout == 3600.0


# -- spawn failures ------------------------------------------------------------------------


def test_an_env_value_with_a_nul_fails_naming_its_file_and_line(rig: Rig, tmp_path: Path
                                                                 ) -> None:
    """Not the spawn's bare "a NUL character": the file and line that hold it, and
    never the value."""
    env_file = tmp_path / "nul.env"
    env_file.write_bytes(b"OK=1\nTOKEN=sk-live\x00tail\n")
    run = Run(RunSpec("nul", ["true"], env_file=str(env_file)), rig.ledger, rig.ids,
              "manual", jobs_dir=rig.jobs)

    async def go() -> dict[str, Any]:
        await run.start()
        return await asyncio.wait_for(run.wait(), DEADLINE)

    rec = asyncio.run(go())
    assert (rec["outcome"], rec["reason"], "exit_code" in rec) == ("failed", "spawn", False)
    assert _log(run) == (f"harness: spawn failed: env_file {env_file}:2: the value holds a "
                         "NUL byte\n")


def test_a_run_that_gets_its_log_ends_the_episode_of_log_failures(
        rig: Rig, caplog: pytest.LogCaptureFixture) -> None:
    """The same log failure is said once per episode: a run that got its log in between
    makes the next failure worth saying again."""
    jobs = Path(rig.jobs)
    jobs.mkdir(parents=True)
    memory = LogFailures()

    async def once() -> dict[str, Any]:
        run = Run(RunSpec("w", ["true"]), rig.ledger, rig.ids, "manual", jobs_dir=rig.jobs,
                  log_failures=memory)
        await run.start()
        return await asyncio.wait_for(run.wait(), DEADLINE)

    caplog.set_level(logging.WARNING, logger="harness.supervisor")
    outcomes = []
    for blocked in (True, True, False, True):
        if blocked:
            (jobs / "w").write_text("")  # a file where the log's directory goes
        elif (jobs / "w").is_file():
            (jobs / "w").unlink()
        outcomes.append(asyncio.run(once())["outcome"])
        if not blocked:
            shutil.rmtree(jobs / "w")
    assert outcomes == ["failed", "failed", "success", "failed"]
    said = [r.getMessage() for r in caplog.records if r.name == "harness.supervisor"]
    assert [m.split(": failed to start")[0] for m in said] == ["run w/1", "run w/4"]


def _fds() -> list[str]:
    return sorted(os.listdir("/proc/self/fd"))


def test_a_run_leaves_no_descriptor_of_its_log_open(rig: Rig, tmp_path: Path) -> None:
    """The runner's copy of the log's fd is closed once the child holds its own: after
    a run, a failed spawn, and a start the ledger refuses, as many fds are open as
    before (a daemon that leaked one per run would run out)."""
    async def once(spec: RunSpec) -> None:
        run = Run(spec, rig.ledger, rig.ids, "manual", jobs_dir=rig.jobs)
        await run.start()
        await asyncio.wait_for(run.wait(), DEADLINE)

    asyncio.run(once(RunSpec("fd", ["true"])))  # the ledger's own files are open now
    before = _fds()
    asyncio.run(once(RunSpec("fd", ["sh", "-c", "echo hi"])))
    asyncio.run(once(RunSpec("fd", [str(tmp_path / "missing")])))
    assert _fds() == before
    rig.ledger.close()
    before = _fds()

    async def refused() -> None:
        run = Run(RunSpec("fd", ["true"]), rig.ledger, rig.ids, "manual", jobs_dir=rig.jobs)
        with pytest.raises(LedgerClosed):
            await run.start()

    asyncio.run(refused())
    assert _fds() == before


@pytest.mark.parametrize("bad", ["missing binary", "not executable", "workdir a file",
                                 "workdir missing"])
def test_a_spawn_failure_says_which_file_and_why_in_one_line(
        rig: Rig, tmp_path: Path, bad: str) -> None:
    """The note names the file that failed (argv[0] or the workdir) and the system's
    reason, nothing more; the record is failed/spawn with no exit code."""
    plain = tmp_path / "plain.txt"
    plain.write_text("not a program\n")
    plain.chmod(0o600)
    missing = tmp_path / "nowhere"
    spec, why = {
        "missing binary": (RunSpec("sf", [str(missing), "--flag"]),
                           f"{missing}: No such file or directory"),
        "not executable": (RunSpec("sf", [str(plain)]), f"{plain}: Permission denied"),
        "workdir a file": (RunSpec("sf", ["true"], workdir=str(plain)),
                           f"{plain}: Not a directory"),
        "workdir missing": (RunSpec("sf", ["true"], workdir=str(missing)),
                            f"{missing}: No such file or directory"),
    }[bad]
    run = Run(spec, rig.ledger, rig.ids, "manual", jobs_dir=rig.jobs)

    async def go() -> dict[str, Any]:
        await run.start()
        return await asyncio.wait_for(run.wait(), DEADLINE)

    rec = asyncio.run(go())
    assert (rec["outcome"], rec["reason"], "exit_code" in rec) == ("failed", "spawn", False)
    assert run.error == why
    assert _log(run) == f"harness: spawn failed: {why}\n"


def test_a_scheduled_run_over_budget_carries_its_window_and_override(rig: Rig) -> None:
    """The Manager's window and --over-budget admission reach the opened line, so the
    record says which firing it was and that it was admitted over the budget."""
    run = Run(RunSpec("win", ["true"]), rig.ledger, rig.ids, "schedule", jobs_dir=rig.jobs,
              window="2026-06-05T09:00:00Z", override=True)

    async def go() -> dict[str, Any]:
        await run.start()
        return await asyncio.wait_for(run.wait(), DEADLINE)

    rec = asyncio.run(go())
    assert (rec["trigger"], rec["window"], rec["override"], rec["outcome"]) == (
        "schedule", "2026-06-05T09:00:00.000000000Z", True, "success")
