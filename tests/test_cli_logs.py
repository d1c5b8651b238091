"""`harness logs` (DESIGN.md §2) and the `logs` control op: a real daemon, the real CLI.

One-shot runs write real per-run logs (compressed and pruned by keep_runs by the runner);
each test reads them through the daemon and then, with the daemon stopped, from the files,
and checks both say exactly the same. A resident's durable log is read whole. `view_log`
itself is checked on hand-made files for what a daemon cannot easily be made to produce
(a skipped run, a run that never got a log, the cap on a compressed log).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import resource
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import zstandard

from conftest import World
from daemons import DEADLINE, Daemons, reaped, until
from harness.control.client import Client, DaemonError
from harness.supervisor import logview

# Each run prints its own number (a counter file in the workdir), then two fixed lines;
# run ids start at 1 in a fresh world, so the counter is the run id.
COUNTING = """
[harness.job]
kind = "oneshot"
keep_runs = 2
workdir = "{workdir}"
argv = ["sh", "-c", '''
n=$(cat count 2>/dev/null || echo 0); n=$((n+1)); echo $n > count
echo run $n; echo second; echo third''']
"""


def _logs(world: World, *args: str) -> tuple[int, str, str]:
    res = world.harness("logs", *args)
    return res.returncode, res.stdout, res.stderr


def _jobs_dir(world: World, name: str) -> Path:
    return world.state / "jobs" / name


def _stop(daemons: Daemons) -> None:
    proc = daemons.procs[-1]
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=DEADLINE) == 0, daemons.stderr()


def _three_runs(world: World, daemons: Daemons) -> None:
    workdir = world.root / "work"
    workdir.mkdir()
    daemons.write_config(COUNTING.format(workdir=workdir))
    daemons.start()
    for _ in range(3):
        res = world.harness("trigger", "job", "--wait")
        assert res.returncode == 0, res.stderr
    jobs = _jobs_dir(world, "job")
    # The closed line comes before compression and pruning: wait for the files to settle.
    until("run 3's log compressed and run 1's pruned",
           lambda: sorted(p.name for p in jobs.iterdir())
           == ["2.log.zst", "3.log.zst"])


# The same answers whether the daemon or the files give them (the daemon-down note aside).
EXPECTED: list[tuple[tuple[str, ...], int, str, str]] = [
    (("job",), 0, "run 3\nsecond\nthird\n", ""),
    (("job", "--run", "2"), 0, "run 2\nsecond\nthird\n", ""),
    (("job", "--run", "3", "--lines", "2"), 0, "second\nthird\n", ""),
    (("job", "--lines", "1"), 0, "third\n", ""),
    (("job", "--lines", "50"), 0, "run 3\nsecond\nthird\n", ""),
    (("job", "--run", "1"), 1, "",
     "harness: job run 1's log was pruned (keep_runs = 2; the oldest log kept is run 2's)\n"),
    (("job", "--run", "9"), 1, "", "harness: job has no run 9\n"),
    (("nope",), 1, "", "harness: no harness named 'nope'\n"),
]


def _check_all(world: World, note: str) -> None:
    for args, code, out, err in EXPECTED:
        got = _logs(world, *args)
        # Reading from disk adds its note only when there was a log to read.
        want_err = err if code else note
        assert got == (code, out, want_err), args


def test_oneshot_logs_from_the_daemon_and_from_disk(world: World, daemons: Daemons) -> None:
    _three_runs(world, daemons)
    _check_all(world, "")

    res = world.harness("logs", "job", "--run", "2", "--json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout) == {
        "name": "job", "run_id": 2, "path": str(_jobs_dir(world, "job") / "2.log.zst"),
        "text": "run 2\nsecond\nthird\n", "cut_bytes": 0, "shared": False}

    _stop(daemons)
    _check_all(world, "harness: daemon not running; read the log from disk\n")


def test_a_state_dir_moved_or_copied_keeps_its_logs(world: World, daemons: Daemons) -> None:
    """A state dir copied to another XDG_STATE_HOME (history moved to another machine):
    its records keep the old absolute log paths, yet each log is the one in the state dir
    holding the ledger, as `harness logs` reads it. So `runs` says log_pruned of exactly
    the logs gone there, even where the original's file is still there or gone in turn,
    daemon up or down, and the same once the original is removed."""
    _three_runs(world, daemons)
    _stop(daemons)
    old = world.root / "state"
    new = world.root / "moved"
    shutil.copytree(old, new, symlinks=True)
    world.env["XDG_STATE_HOME"] = str(new)  # the next daemon's and CLI's state home
    old_jobs = old / "harness" / "jobs" / "job"
    new_jobs = new / "harness" / "jobs" / "job"
    (old_jobs / "3.log.zst").unlink()  # only the original's: the copy keeps run 3's log
    (new_jobs / "2.log.zst").unlink()  # only the copy's: its run 2 log is gone

    def listed() -> list[tuple[Any, ...]]:
        res = world.harness("runs", "--json", "job")
        assert res.returncode == 0, res.stderr
        return [(r["run_id"], r["log"], r.get("log_pruned")) for r in json.loads(res.stdout)]

    want = [(3, str(old_jobs / "3.log"), None), (2, str(old_jobs / "2.log"), True),
            (1, str(old_jobs / "1.log"), True)]
    # One log kept of keep_runs = 2: not keep_runs' doing, and not told as if it were.
    pruned = (1, "", "harness: job run 2's log is missing, though keep_runs = 2 keeps it "
                     "(removed outside harness, or pruned under a lower keep_runs; the "
                     "oldest log kept is run 3's)\n")
    note = "harness: daemon not running; read the log from disk\n"
    assert listed() == want
    assert _logs(world, "job", "--run", "3") == (0, "run 3\nsecond\nthird\n", note)
    assert _logs(world, "job", "--run", "2") == pruned
    table = world.harness("runs", "job").stdout.splitlines()
    assert [(line.split()[1], "success (log pruned)" in line) for line in table[1:]] == [
        ("3", False), ("2", True), ("1", True)]

    daemons.start()
    assert listed() == want
    assert _logs(world, "job", "--run", "3") == (0, "run 3\nsecond\nthird\n", "")
    assert _logs(world, "job", "--run", "2") == pruned
    _stop(daemons)
    # The original's files are its own: the copy's daemon never touched them.
    assert sorted(os.listdir(old_jobs)) == ["2.log.zst"]

    shutil.rmtree(old)
    assert listed() == want
    assert _logs(world, "job", "--run", "3") == (0, "run 3\nsecond\nthird\n", note)


def test_trigger_wait_from_another_state_dir_follows_the_daemons_log(
        world: World, daemons: Daemons) -> None:
    """A run the daemon starts now has its log under the daemon's state dir, which a CLI
    with another XDG_STATE_HOME (the same socket) does not know: the record's own path,
    uncut, is followed, not the place under the CLI's state dir (which is how a moved
    state dir's records are read back)."""
    workdir = world.root / "work"
    workdir.mkdir()
    daemons.write_config(COUNTING.format(workdir=workdir))
    daemons.start()
    apart = World(world.root, {**world.env, "XDG_STATE_HOME": str(world.root / "elsewhere")})
    res = apart.harness("trigger", "job", "--wait")
    assert (res.returncode, res.stdout, res.stderr) == (
        0, "run 1\nsecond\nthird\n", "job run 1: success\n")
    assert not (world.root / "elsewhere").exists()


def test_a_damaged_compressed_log_is_one_line_naming_it(world: World,
                                                        daemons: Daemons) -> None:
    """A closed run's .zst that is no zstd data (a disk error, a hand edit): every way of
    reading it says so in one line naming the file, exit 1, never a traceback. The
    library's error is no OSError, and went up whole through every reader."""
    _three_runs(world, daemons)
    zst = _jobs_dir(world, "job") / "2.log.zst"
    zst.write_bytes(b"garbage, no zstd frame\n")
    why = ("damaged compressed log (zstd decompressor error: Unknown frame descriptor): "
           f"'{zst}'")
    for args in (("job", "--run", "2"), ("job", "--run", "2", "--lines", "1"),
                 ("job", "--run", "2", "--json")):
        assert _logs(world, *args) == (
            1, "", f"harness: cannot read job's log: [Errno 5] {why}\n"), args
    _stop(daemons)
    for args in (("job", "--run", "2"), ("job", "--run", "2", "--lines", "1"),
                 ("job", "--run", "2", "--json")):
        note = "harness: daemon not running; read the log from disk\n" \
            if "--lines" not in args and "--json" not in args else ""
        assert _logs(world, *args) == (
            1, "", f"{note}harness: cannot read job's log: [Errno 5] {why}\n"), args


def test_bad_flag_values_exit_2_naming_the_value(world: World) -> None:
    for args, hint, value in ((("--run", "0"), "--run", "must be a positive run id, got 0"),
                              (("--lines", "-3"), "--lines", "must be at least 1, got -3")):
        code, out, err = _logs(world, "job", *args)
        assert (code, out) == (2, "")
        assert err.splitlines()[-1] == f"Error: Invalid value for '{hint}': {value}"
        assert "Traceback" not in err
    code, _out, err = _logs(world, "job", "--run", "x")
    assert code == 2 and "'x' is not a valid integer" in err


@pytest.mark.parametrize("flag", ["--run", "--lines"])
@pytest.mark.parametrize("value", ["\uff13", "\u0663", "1_0", " \uff11 "])
def test_an_integer_flag_takes_ascii_digits_only(world: World, flag: str, value: str) -> None:
    """Python's int() reads full-width and other Unicode digits and underscores:
    `--lines ３` printed 3 lines and `--run 1_0` run 10's log, where no other tool reading
    the same argument would. Refused as any other value that is no integer."""
    code, out, err = _logs(world, "job", flag, value)
    assert (code, out, err.splitlines()[-1]) == (
        2, "", f"Error: Invalid value for '{flag}': {value!r} is not a valid integer.")


def test_a_credential_typed_as_the_name_is_not_echoed(world: World) -> None:
    """`harness logs KEY` with no daemon read the config and refused the name quoted in
    full; the daemon's answer to the same name is scrubbed."""
    key = "sk-ant-api03-" + "A" * 70
    (world.root / "config" / "harness").mkdir(parents=True)
    (world.root / "config" / "harness" / "harness.toml").write_text(
        '[harness.job]\nkind = "oneshot"\nargv = ["true"]\n')
    assert _logs(world, key) == (1, "", "harness: no harness named '[REDACTED]'\n")
    code, out, err = _logs(world, "job", "--run", key)
    assert (code, out, err.splitlines()[-1]) == (
        2, "", "Error: Invalid value for '--run': '[REDACTED]' is not a valid integer.")


def test_a_fifo_where_the_log_goes_is_refused_not_waited_on(world: World,
                                                            daemons: Daemons) -> None:
    """A FIFO in a log's place blocked `harness logs` for ever with the daemon down, and
    through the daemon blocked its `logs` thread, and with it the daemon's SIGTERM."""
    daemons.write_config('[harness.f]\nkind = "resident"\nargv = ["true"]\nenabled = false\n')
    (world.state / "logs").mkdir(parents=True)
    fifo = world.state / "logs" / "f.log"
    os.mkfifo(fifo)
    refused = f"harness: cannot read f's log: [Errno 22] Not a regular file: '{fifo}'\n"
    assert _logs(world, "f") == (1, "", refused)
    daemons.start()
    assert _logs(world, "f") == (1, "", refused)
    _stop(daemons)


def test_the_op_refuses_bad_fields(world: World, daemons: Daemons) -> None:
    daemons.write_config('[harness.job]\nkind = "oneshot"\nargv = ["true"]\n')
    daemons.start()
    client = Client(str(daemons.socket))
    try:
        cases: list[tuple[dict[str, Any], str, str]] = [
            ({"name": "job", "run": "1"}, "bad_request", "run must be an integer, got '1'"),
            ({"name": "job", "lines": 0}, "bad_request",
             "lines must be a positive integer, got 0"),
            ({"name": "job", "tail": 3}, "bad_request",
             "unknown field 'tail' (valid: lines, name, run)"),
            ({}, "bad_request", "name must be a non-empty string, got None"),
            ({"name": "job"}, "not_found", "job has no run logs yet"),
            ({"name": "ghost"}, "not_found", "no harness named 'ghost'"),
        ]
        for args, code, message in cases:
            with pytest.raises(DaemonError) as info:
                client.request("logs", **args)
            assert (info.value.code, str(info.value)) == (code, message), args
    finally:
        client.close()


def test_the_daemon_sends_at_most_a_mib_and_says_what_it_cut(
        world: World, daemons: Daemons) -> None:
    lines = 200_000
    daemons.write_config(f"""
[harness.big]
kind = "oneshot"
argv = ["sh", "-c", "yes 0123456789 | head -n {lines}"]
""")
    daemons.start()
    res = world.harness("trigger", "big", "--wait")
    assert res.returncode == 0, res.stderr
    zst = _jobs_dir(world, "big") / "1.log.zst"
    until("the big log compressed", lambda: zst.exists()
           and not (_jobs_dir(world, "big") / "1.log").exists())

    size = 11 * lines
    # The cap's first, partial line goes too: the cut ends on a line boundary.
    cut = -(-(size - logview.SOCKET_CAP) // 11) * 11
    res = world.harness("logs", "big", "--json")
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert data["cut_bytes"] == cut
    assert data["text"] == "0123456789\n" * ((size - cut) // 11)

    code, out, err = _logs(world, "big")
    assert code == 0 and len(out) == size - cut
    assert err == (f"harness: showing the end of {zst}; the first {cut} byte(s) were "
                   "left out\n")
    # Every line asked for fits under the cap: nothing is reported cut.
    assert _logs(world, "big", "--lines", "3") == (0, "0123456789\n" * 3, "")

    _stop(daemons)
    code, out, err = _logs(world, "big")
    assert (code, err) == (0, "harness: daemon not running; read the log from disk\n")
    assert out == "0123456789\n" * lines  # from disk: no socket, no cap


def test_a_residents_durable_log_is_shown_whole(world: World, daemons: Daemons) -> None:
    pidfile = world.root / "svc.pid"
    daemons.pidfiles.append(pidfile)
    daemons.write_config(f"""
[harness.svc]
kind = "resident"
argv = ["sh", "-c", "echo $$ > {pidfile}; echo hello from svc; echo second line; exec sleep 120"]
""")
    daemons.start()
    durable = world.state / "logs" / "svc.log"
    until("the resident's output",
           lambda: durable.exists() and "second line" in durable.read_text())
    whole = "hello from svc\nsecond line\n"
    assert _logs(world, "svc") == (0, whole, "")
    assert _logs(world, "svc", "--lines", "1") == (0, "second line\n", "")
    assert _logs(world, "svc", "--run", "1") == (
        0, whole, "harness: svc is a resident: all its runs write one log, and runs are "
                  "not marked in it; printing it whole\n")
    assert _logs(world, "svc", "--run", "5") == (1, "", "harness: svc has no run 5\n")
    res = world.harness("logs", "svc", "--json")
    assert json.loads(res.stdout) == {"name": "svc", "run_id": None, "path": str(durable),
                                      "text": whole, "cut_bytes": 0, "shared": True}

    _stop(daemons)  # stops the resident; its log stays
    text = durable.read_text()
    assert text.startswith(whole)
    assert _logs(world, "svc") == (
        0, text, "harness: daemon not running; read the log from disk\n")
    shared = ("harness: svc is a resident: all its runs write one log, and runs are not "
              "marked in it; printing it whole\n")
    note = "harness: daemon not running; read the log from disk\n"
    assert _logs(world, "svc", "--run", "1") == (0, text, note + shared)
    assert _logs(world, "svc", "--run", "1", "--lines", "1") == (
        0, text.splitlines(keepends=True)[-1], note + shared)


def test_a_resident_that_never_ran_has_no_log(world: World, daemons: Daemons) -> None:
    daemons.write_config('[harness.idle]\nkind = "resident"\nenabled = false\n'
                         'argv = ["true"]\n')
    durable = world.state / "logs" / "idle.log"
    assert _logs(world, "idle") == (
        1, "", f"harness: idle has no log yet ({durable})\n")


def test_a_config_that_does_not_load_exits_2_when_reading_from_disk(world: World,
                                                                     daemons: Daemons) -> None:
    daemons.write_config('[harness.job]\nkind = "oneshot"\nargv = "not a list"\n')
    code, out, err = _logs(world, "job")
    assert (code, out) == (2, "")
    assert err.startswith("harness: the config does not load, so job's kind is unknown:\n"
                          f"{daemons.config}:3: harness.job.argv: ")
    assert "Traceback" not in err


# ---- view_log on hand-made files ---------------------------------------------------------

def _records(recs: dict[int, dict[str, Any]]) -> logview.Lookup:
    def lookup(name: str, run_id: int) -> dict[str, Any] | None:
        return recs.get(run_id)
    return lookup


def _view(jobs: Path, run: int | None, lookup: logview.Lookup, *, lines: int | None = None,
          max_bytes: int | None = None) -> logview.LogText:
    return logview.view_log("job", "oneshot", run=run, lines=lines, jobs_dir=str(jobs),
                            resident_log=str(jobs / "unused.log"), keep_runs=5,
                            lookup=lookup, max_bytes=max_bytes)


def test_why_a_run_has_no_log(tmp_path: Path) -> None:
    jobs = tmp_path / "jobs"
    (jobs / "job").mkdir(parents=True)
    (jobs / "job" / "4.log").write_bytes(b"four\n")
    lookup = _records({
        1: {"run_id": 1, "outcome": "skipped", "reason": "overlap"},
        2: {"run_id": 2, "outcome": "failed", "reason": "spawn"},
        3: {"run_id": 3, "outcome": "success", "log": str(jobs / "job" / "3.log")},
        5: {"run_id": 5, "outcome": "skipped", "reason": "overlap"},
    })
    want = {1: ("not_found", "job run 1 was skipped (overlap): it has no log"),
            2: ("not_found", "job run 2 has no log (it ended failed before writing one)"),
            # One log kept, of keep_runs = 5: gone some other way than keep_runs.
            3: ("not_found", "job run 3's log is missing, though keep_runs = 5 keeps it "
                             "(removed outside harness, or pruned under a lower keep_runs; "
                             "the oldest log kept is run 4's)"),
            6: ("not_found", "job has no run 6")}
    for run, (code, message) in want.items():
        with pytest.raises(logview.LogError) as info:
            _view(jobs, run, lookup)
        assert (info.value.code, info.value.message) == (code, message)
    # With five logs kept, run 3's is older than all of them: keep_runs pruned it.
    for n in (6, 7, 8, 9):
        (jobs / "job" / f"{n}.log").write_bytes(b"later\n")
    with pytest.raises(logview.LogError) as info:
        _view(jobs, 3, lookup)
    assert (info.value.code, info.value.message) == (
        "pruned", "job run 3's log was pruned (keep_runs = 5; the oldest log kept is run 4's)")
    (jobs / "job" / "4.log").unlink()  # four kept, the oldest newer than run 3: not keep_runs
    with pytest.raises(logview.LogError) as info:
        _view(jobs, 3, lookup)
    assert info.value.code == "not_found"
    for n in (6, 7, 8, 9):
        (jobs / "job" / f"{n}.log").unlink()
    (jobs / "job" / "4.log").write_bytes(b"four\n")
    # The newest run with a log, though run 5 (skipped) came after it.
    view = _view(jobs, None, lookup)
    assert (view.run_id, view.text, view.cut) == (4, "four\n", 0)


def test_the_cap_on_plain_and_compressed_logs(tmp_path: Path) -> None:
    jobs = tmp_path / "jobs"
    (jobs / "job").mkdir(parents=True)
    body = b"".join(b"line %03d\n" % i for i in range(100))  # 9 bytes a line
    (jobs / "job" / "1.log").write_bytes(body)
    (jobs / "job" / "2.log.zst").write_bytes(zstandard.ZstdCompressor().compress(body))
    nothing = _records({})
    for run in (1, 2):
        # 95 bytes: 10 whole lines and 5 bytes of the one before, which go too.
        view = _view(jobs, run, nothing, max_bytes=95)
        assert (view.text, view.cut) == ("".join(f"line {i:03d}\n" for i in range(90, 100)),
                                         810)
        view = _view(jobs, run, nothing, max_bytes=95, lines=3)
        assert (view.text, view.cut) == ("line 097\nline 098\nline 099\n", 0)
        view = _view(jobs, run, nothing, max_bytes=95, lines=20)
        assert view.cut == 810 and view.text.count("\n") == 10
        view = _view(jobs, run, nothing)
        assert (view.text, view.cut) == (body.decode(), 0)
    assert _view(jobs, 2, nothing).path == str(jobs / "job" / "2.log.zst")


def test_last_lines() -> None:
    assert logview.last_lines(b"a\nb\nc\n", 2) == (b"b\nc\n", True)
    assert logview.last_lines(b"a\nb\nc", 2) == (b"b\nc", True)
    assert logview.last_lines(b"a\nb\nc\n", 3) == (b"a\nb\nc\n", True)
    assert logview.last_lines(b"a\nb\nc\n", 4) == (b"a\nb\nc\n", False)
    assert logview.last_lines(b"", 1) == (b"", False)


def test_tails_match_the_whole_log_at_every_chunk_boundary(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    jobs = tmp_path / "jobs"
    (jobs / "job").mkdir(parents=True)
    rows = [b"x" * (i % 13) + b"%d" % i for i in range(60)]
    body = b"\n".join(rows) + b"\n"
    (jobs / "job" / "1.log").write_bytes(body)
    (jobs / "job" / "2.log.zst").write_bytes(zstandard.ZstdCompressor().compress(body))
    (jobs / "job" / "3.log").write_bytes(body.rstrip(b"\n"))  # no final newline
    nothing = _records({})
    for chunk in (1, 7, 64, 1 << 16):
        monkeypatch.setattr(logview, "_CHUNK", chunk)
        for n in (1, 2, 13, 59, 60, 61, 500):
            want = b"".join(r + b"\n" for r in rows[-n:]).decode()
            for run in (1, 2):
                view = _view(jobs, run, nothing, lines=n)
                assert (view.text, view.cut) == (want, 0), (chunk, n, run)
            view = _view(jobs, 3, nothing, lines=n)
            assert (view.text, view.cut) == (want.rstrip("\n"), 0), (chunk, n)


def test_lines_of_a_log_with_fewer_newlines_is_linear(world: World) -> None:
    """`--lines N` of a log holding fewer than N newlines reads it whole: that re-copied
    and re-counted all it had read at each 64 KiB, and a 40 MB log without a newline took
    16 s with the daemon down (300 MB, over ten CPU minutes); 0.7 s now. No time is
    asserted (a loaded machine must not fail it): what is read whole comes out whole."""
    (world.root / "config" / "harness").mkdir(parents=True)
    (world.root / "config" / "harness" / "harness.toml").write_text(
        '[harness.r]\nkind = "resident"\nargv = ["true"]\nenabled = false\n')
    (world.state / "logs").mkdir(parents=True)
    (world.state / "logs" / "r.log").write_bytes(b"a" * 40_000_000)
    code, out, err = _logs(world, "r", "--lines", "5")
    assert (code, len(out), out.strip("a"), err) == (
        0, 40_000_001, "\n", "harness: daemon not running; read the log from disk\n")


def test_a_few_lines_of_a_huge_log_read_only_its_end(tmp_path: Path) -> None:
    durable = tmp_path / "svc.log"
    with open(durable, "wb") as f:
        f.truncate(8 << 30)  # 8 GiB, sparse: reading it whole would not finish in time
        f.seek(0, 2)
        f.write(b"\nlast but one\nlast\n")
    view = logview.view_log("svc", "resident", lines=2, jobs_dir=str(tmp_path),
                            resident_log=str(durable), keep_runs=1, lookup=_records({}))
    assert (view.text, view.cut, view.shared) == ("last but one\nlast\n", 0, True)


def test_log_follower_shows_each_byte_once_across_the_compression(tmp_path: Path) -> None:
    from harness.supervisor import logs as run_logs
    from harness.supervisor.logview import LogFollower

    path = tmp_path / "7.log"
    f = LogFollower(str(path))
    assert f.new() == b""  # not created yet
    path.write_bytes(b"one\n")
    assert f.new() == b"one\n"
    assert f.new() == b""
    with path.open("ab") as out:
        out.write(b"two\n" + b"x" * 200_000 + b"\nthree\n")
    assert run_logs.compress_log(str(path)) and not path.exists()
    assert f.rest() == b"two\n" + b"x" * 200_000 + b"\nthree\n"
    assert f.rest() == b""
    # Compressed before the first look: all of it, once.
    late = LogFollower(str(path))
    assert late.rest() == b"one\ntwo\n" + b"x" * 200_000 + b"\nthree\n"


def test_log_follower_shows_the_last_output_when_compression_lands_mid_look(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # CI once saw `trigger --wait` print "started" but not the run's last line "done":
    # the follower looked for the plain log, the daemon compressed it away, and the open
    # that followed found nothing. Here the compression lands right after any look.
    import os as real_os

    from harness.supervisor import logs as run_logs
    from harness.supervisor import logview
    from harness.supervisor.logview import LogFollower

    path = tmp_path / "3.log"
    path.write_bytes(b"started\n")
    f = LogFollower(str(path))
    assert f.new() == b"started\n"
    with path.open("ab") as out:
        out.write(b"done\n")
    looked = real_os.path.exists
    busy: list[bool] = []

    def look_then_compress(p: str) -> bool:
        there = looked(p)
        if not busy:  # once: compress_log looks too
            busy.append(True)
            run_logs.compress_log(str(path))
        return there

    monkeypatch.setattr(logview.os.path, "exists", look_then_compress)
    assert f.rest() == b"done\n"
    monkeypatch.undo()
    run_logs.compress_log(str(path))  # if no look came first
    assert not path.exists() and f.rest() == b""


def test_log_follower_races_the_compression_without_losing_a_byte(tmp_path: Path) -> None:
    import threading

    from harness.supervisor import logs as run_logs
    from harness.supervisor.logview import LogFollower

    for i in range(200):
        path = tmp_path / f"{i}.log"
        path.write_bytes(b"started\n")
        f = LogFollower(str(path))
        assert f.new() == b"started\n"
        with path.open("ab") as out:
            out.write(b"done %d\n" % i)
        t = threading.Thread(target=run_logs.compress_log, args=(str(path),))
        t.start()
        got = f.rest()
        t.join()
        assert got + f.rest() == b"done %d\n" % i, i


def test_a_log_that_cannot_be_compressed_stays_plain_and_leaves_no_tmp(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from harness.supervisor import logs as run_logs

    path = tmp_path / "4.log"
    path.write_bytes(b"kept\n")
    (tmp_path / "4.log.zst").mkdir()  # the rename onto it fails, even for root
    assert run_logs.compress_log(str(path)) is False
    assert path.read_bytes() == b"kept\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["4.log", "4.log.zst"]
    assert any(r.getMessage().startswith(f"cannot compress {path}: ")
               for r in caplog.records)
    assert run_logs.compress_log(str(tmp_path / "gone.log")) is False  # no log, nothing to do
    (tmp_path / "4.log.zst").rmdir()
    assert run_logs.compress_log(str(path)) is True
    assert sorted(p.name for p in tmp_path.iterdir()) == ["4.log.zst"]
    assert zstandard.ZstdDecompressor().decompressobj().decompress(
        (tmp_path / "4.log.zst").read_bytes()) == b"kept\n"


# ---- a whole log read from disk is streamed ------------------------------------------------

# One block of a big log: controls and escape sequences (printed as they are: the child's
# output is not harness's to change), bytes that are not UTF-8 (each replaced, also when
# a chunk's end cuts them), multibyte characters packed tight (so chunk ends fall inside
# them) and a line longer than a chunk. Each block ends a line, so the whole log's text is
# its blocks' texts joined.
_BLOCK = b"".join([
    b"\x1b[31mred\x1b[0m \x07bell\x00nul\r\n",
    b"bad \xff\xfe \xc3( \xed\xa0\x80 \xf0\x9f\x98\n",
    b"\xe2\x82 cut\n",
    "é€😀".encode() * 3001 + b"\n",
    b"y" * 70_001 + b"\n",
])


def test_a_whole_log_read_from_disk_is_streamed_not_held(world: World) -> None:
    """`harness logs NAME` with the daemon down read the whole log into memory, about
    four times its size at its peak (and a resident's log grows for months). Here the
    command gets 96 MiB of address space for a log of about 200 MB: it ran out of memory
    (a traceback, exit 1); now it prints exactly what it printed before, whatever chunk
    ends cut (the text as `bytes.decode(errors="replace")` gives it, a newline added to a
    last line without one)."""
    blocks = 200_000_000 // len(_BLOCK)
    tail = b"the last line has no newline and a cut character \xe2\x82"
    (world.root / "config" / "harness").mkdir(parents=True)
    (world.root / "config" / "harness" / "harness.toml").write_text(
        '[harness.r]\nkind = "resident"\nargv = ["true"]\nenabled = false\n')
    log = world.state / "logs" / "r.log"
    log.parent.mkdir(parents=True)
    with log.open("wb") as f:
        for _ in range(blocks):
            f.write(_BLOCK)
        f.write(tail)
    want = hashlib.sha256()
    shown_block = _BLOCK.decode("utf-8", errors="replace").encode()
    for _ in range(blocks):
        want.update(shown_block)
    shown_tail = tail.decode("utf-8", errors="replace").encode() + b"\n"
    want.update(shown_tail)
    assert shown_tail.endswith("\ufffd\n".encode())

    def small() -> None:
        limit = 96 << 20
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    got = hashlib.sha256()
    size = 0
    err = world.root / "logs.err"
    try:
        with err.open("wb") as errf, reaped(subprocess.Popen(
                [sys.executable, "-m", "harness.cli", "logs", "r"],
                env={**world.env, "PYTHONIOENCODING": "utf-8"}, stdout=subprocess.PIPE,
                stderr=errf, preexec_fn=small)) as proc:
            assert proc.stdout is not None
            while chunk := proc.stdout.read(1 << 20):
                got.update(chunk)
                size += len(chunk)
            code = proc.wait(timeout=DEADLINE)
    finally:
        log.unlink()
    assert (code, size, got.hexdigest(), err.read_text()) == (
        0, len(shown_block) * blocks + len(shown_tail), want.hexdigest(),
        "harness: daemon not running; read the log from disk\n")


# Bytes that make UTF-8 decoding hard at a chunk's end: lead bytes, continuation bytes,
# an overlong form, an encoded surrogate, and a newline and ASCII between them.
_TRICKY = [b"\xc3", b"\xa9", b"\xe2", b"\x82", b"\xac", b"\xf0", b"\x9f", b"\x98", b"\x80",
           b"\xff", b"\xed\xa0\x80", b"\xc0\xaf", b"a", b"\n", b"\x1b"]


def test_a_streamed_log_is_the_text_view_log_gives_at_every_chunk_size(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The streamed pieces joined are exactly the text read whole (the daemon's answer,
    --json, and what was printed before), for a plain and a compressed log, an empty
    one, and every cut of a character a chunk's end can make."""
    jobs = tmp_path / "jobs"
    (jobs / "job").mkdir(parents=True)
    rng = random.Random(7)
    bodies = [b"", b"\n", b"no newline", *(b"".join(rng.choices(_TRICKY, k=rng.randrange(1, 60)))
                                          for _ in range(40))]
    nothing = _records({})
    for chunk in (1, 2, 3, 5, 1 << 16):
        monkeypatch.setattr(logview, "_CHUNK", chunk)
        for body in bodies:
            (jobs / "job" / "1.log").write_bytes(body)
            (jobs / "job" / "2.log.zst").write_bytes(zstandard.ZstdCompressor().compress(body))
            for run in (1, 2):
                whole = _view(jobs, run, nothing)
                with logview.stream_log("job", "oneshot", run=run, jobs_dir=str(jobs),
                                        resident_log=str(jobs / "unused.log"), keep_runs=5,
                                        lookup=nothing) as stream:
                    got = (stream.run_id, stream.path, stream.shared, "".join(stream.text()))
                assert got == (whole.run_id, whole.path, False, whole.text), (chunk, body)
                assert whole.text == body.decode("utf-8", errors="replace")


def test_a_streamed_log_ends_where_it_ended_when_opened(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A resident still writing does not make the read go on for ever: what it appends
    once the log is open is not shown (as when the log was read whole at once); and a
    one-shot's log compressed away meanwhile is still read whole from the open file."""
    from harness.supervisor import logs as run_logs

    monkeypatch.setattr(logview, "_CHUNK", 4)
    durable = tmp_path / "svc.log"
    durable.write_bytes(b"one\ntwo\n")
    with logview.stream_log("svc", "resident", jobs_dir=str(tmp_path),
                            resident_log=str(durable), keep_runs=1,
                            lookup=_records({})) as stream:
        pieces = stream.text()
        first = next(pieces)
        with durable.open("ab") as out:
            out.write(b"three\n" * 10)
        assert (stream.shared, first + "".join(pieces)) == (True, "one\ntwo\n")

    jobs = tmp_path / "jobs"
    (jobs / "job").mkdir(parents=True)
    plain = jobs / "job" / "3.log"
    plain.write_bytes(b"started\ndone\n")
    with logview.stream_log("job", "oneshot", jobs_dir=str(jobs),
                            resident_log=str(durable), keep_runs=1,
                            lookup=_records({})) as stream:
        assert run_logs.compress_log(str(plain)) and not plain.exists()
        assert (stream.run_id, stream.path, "".join(stream.text())) == (
            3, str(plain), "started\ndone\n")
