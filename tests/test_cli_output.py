"""What a command does when its standard output will not take what it prints.

A full device (`> /dev/full`, a redirect onto a full disk) is a failure: one
`harness: cannot write standard output: …` line on stderr and exit 1, never a traceback,
also when the output was still buffered when the command ended. A reader that closes the
pipe early (`harness runs --json | head -c 10`) ends the command quietly: nothing on
stderr but what it said before, and exit 1, as click ends a command whose pipe closed and
as Python's docs advise; the same wherever the closed pipe is met.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import World
from harness.timefmt import format_ns, now_ns
from test_cli_runs import OFFLINE, run_lines, seed

FULL = "harness: cannot write standard output: No space left on device\n"
MIN = 60 * 1_000_000_000

needs_dev_full = pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")


def harness_into(world: World, stdout: Any, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "harness.cli", *args], env=world.env,
                          stdout=stdout, stderr=subprocess.PIPE, text=True, timeout=120)


def seed_runs(world: World, n: int) -> None:
    start = now_ns() - n * MIN
    seed(world, [line for i in range(n) for line in run_lines("h", i + 1, start + i * MIN)])


@needs_dev_full
@pytest.mark.parametrize("args", [("runs",), ("runs", "--json"), ("ledger", "verify"),
                                  ("ledger", "verify", "--json"), ("--help",)])
def test_a_full_stdout_is_one_line_on_stderr_and_exit_1(world: World, args: tuple[str, ...]
                                                        ) -> None:
    seed_runs(world, 3)  # a few lines of output: the first write fails
    with open("/dev/full", "w") as full:
        res = harness_into(world, full, *args)
    assert res.returncode == 1
    warning = OFFLINE.format(world.ledger) if args[0] == "runs" else ""
    assert res.stderr == warning + FULL


@needs_dev_full
def test_a_full_stdout_mid_output_is_reported_the_same(world: World) -> None:
    seed_runs(world, 400)  # far more than one buffer: the write fails mid-command
    with open("/dev/full", "w") as full:
        res = harness_into(world, full, "runs", "--json", "--limit", "400")
    assert res.returncode == 1
    assert res.stderr == OFFLINE.format(world.ledger) + FULL


def test_a_file_that_fills_mid_output_is_reported(world: World, tmp_path: Path) -> None:
    """A disk that fills while the command writes: part of the output got out. Modelled
    with the file size limit (writes past it fail with EFBIG; SIGXFSZ, which would
    kill the process instead, ignored as the child starts). Before, the buffered layer
    returned the part it wrote and dropped the error: a cut file, exit 0."""
    seed_runs(world, 1000)
    out = tmp_path / "out.json"
    limit = 65536

    def limited() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    with open(out, "w") as f:
        res = subprocess.run([sys.executable, "-m", "harness.cli", "runs", "--json", "--limit",
                              "1000"], env=world.env, stdout=f, stderr=subprocess.PIPE,
                             text=True, timeout=120, preexec_fn=limited)
    assert out.stat().st_size == limit  # the part that got out
    assert res.returncode == 1
    assert res.stderr == OFFLINE.format(world.ledger) + \
        "harness: cannot write standard output: File too large\n"


def test_a_reader_that_stops_early_ends_the_command_quietly(world: World) -> None:
    seed_runs(world, 1000)
    whole = world.harness("runs", "--json", "--limit", "1000").stdout
    assert len(whole) > 2 * 65536  # more than a pipe holds: the command meets the close
    with subprocess.Popen([sys.executable, "-m", "harness.cli", "runs", "--json", "--limit",
                           "1000"], env=world.env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True) as p:
        assert p.stdout is not None and p.stderr is not None
        assert p.stdout.read(12) == '[\n  {\n    "h'
        p.stdout.close()  # `| head -c 12`
        err = p.stderr.read()
        assert p.wait(timeout=120) == 1
    assert err == OFFLINE.format(world.ledger)


def a_log_on_disk(world: World) -> None:
    """A one-shot `job` whose run 1 wrote a short log, for `harness logs job` from disk."""
    (world.root / "config" / "harness").mkdir(parents=True)
    (world.root / "config" / "harness" / "harness.toml").write_text(
        '[harness.job]\nkind = "oneshot"\nargv = ["true"]\n')
    seed(world, run_lines("job", 1, now_ns() - MIN))
    (world.state / "jobs" / "job").mkdir(parents=True)
    (world.state / "jobs" / "job" / "1.log").write_text("one\ntwo\n")


LOGS_OFFLINE = "harness: daemon not running; read the log from disk\n"


@pytest.mark.parametrize(("cmd", "note"), [(("runs",), "runs"), (("logs", "job"), "logs")])
def test_a_pipe_closed_before_anything_is_written_ends_quietly(
        world: World, cmd: tuple[str, ...], note: str) -> None:
    """`logs` leaves its output in the buffer, so the last flush, after the command,
    meets the closed pipe (where the interpreter alone would print 'Exception ignored'
    and exit 120); `runs` meets it inside the command."""
    a_log_on_disk(world)
    r, w = os.pipe()
    os.close(r)
    try:
        res = harness_into(world, w, *cmd)
    finally:
        os.close(w)
    assert res.returncode == 1
    assert res.stderr == (OFFLINE.format(world.ledger) if note == "runs" else LOGS_OFFLINE)


@needs_dev_full
def test_a_full_stdout_after_the_command_is_reported(world: World) -> None:
    a_log_on_disk(world)
    assert world.harness("logs", "job").stdout == "one\ntwo\n"
    with open("/dev/full", "w") as full:
        res = harness_into(world, full, "logs", "job")
    assert res.returncode == 1
    assert res.stderr == LOGS_OFFLINE + FULL


def test_text_the_locale_cannot_encode_is_escaped_not_a_traceback(world: World) -> None:
    """Under a latin-1 locale, a table's "—" (an empty cell) is written as "-", and any
    character of a value outside the encoding as its backslash escape; --json stays
    JSON that parses to the same records as under UTF-8. (An ASCII stdout click takes
    for a misconfigured UTF-8 one, and writes UTF-8.)"""
    encoding = "latin-1"
    seed(world, [{"type": "opened", "harness": "revue-été", "run_id": 1, "kind": "oneshot",
                  "trigger": "manual", "reason": "naïve — ok", "at": format_ns(now_ns())}])
    env = {**world.env, "PYTHONIOENCODING": encoding}
    table = subprocess.run([sys.executable, "-m", "harness.cli", "runs", "--wide"], env=env,
                           capture_output=True, timeout=120)
    assert table.returncode == 0, table.stderr
    assert table.stdout.splitlines()[1].split() == [
        "revue-été".encode(encoding), b"1", b"-", b"running?", b"manual", b"running?",
        *[b"-"] * 5]
    as_json = subprocess.run([sys.executable, "-m", "harness.cli", "runs", "--json"], env=env,
                             capture_output=True, timeout=120)
    assert as_json.returncode == 0, as_json.stderr
    utf8 = world.harness("runs", "--json")
    assert json.loads(as_json.stdout.decode(encoding)) == json.loads(utf8.stdout)
    assert json.loads(utf8.stdout)[0]["reason"] == "naïve — ok"


def test_a_non_blocking_stdout_gets_the_whole_output(world: World) -> None:
    """A parent that set O_NONBLOCK on the pipe it hands over (some CI runners do): the
    pipe fills, a write finds no room, and the command waits for room. Before, the
    buffered layer took the refusal after a part had gone out as the end: 64 KiB of
    the output arrived, exit 0."""
    seed_runs(world, 1000)
    whole = world.harness("runs", "--json", "--limit", "1000").stdout.encode()
    assert len(whole) > 2 * 65536
    r, w = os.pipe()
    os.set_blocking(w, False)
    with subprocess.Popen([sys.executable, "-m", "harness.cli", "runs", "--json", "--limit",
                           "1000"], env=world.env, stdout=w, stderr=subprocess.PIPE) as p:
        os.close(w)
        got = bytearray()
        with os.fdopen(r, "rb", buffering=0) as reader:
            time.sleep(0.5)  # let the pipe fill before anything is read
            while chunk := reader.read(4096):
                got += chunk
                time.sleep(0.0005)  # a slow reader: the pipe stays full
        assert p.stderr is not None
        err = p.stderr.read().decode()
        assert p.wait(timeout=120) == 0
    assert err == OFFLINE.format(world.ledger)
    assert bytes(got) == whole


def test_a_daemon_started_without_stdout_and_stderr_puts_dev_null_there(world: World) -> None:
    """`harness daemon >&- 2>&-`: the descriptors the process lacks get /dev/null before
    anything is opened, so no file or socket of the daemon's takes 1 or 2 (its epoll and a
    socket did), where a write meant for a terminal would land."""
    def closed_out_and_err() -> None:
        os.close(1)
        os.close(2)

    p = subprocess.Popen([sys.executable, "-m", "harness.cli", "daemon"], env=world.env,
                         stdin=subprocess.DEVNULL, preexec_fn=closed_out_and_err)
    try:
        deadline = time.monotonic() + 60
        while world.harness("jobs").returncode != 0:  # up once the socket answers
            assert p.poll() is None and time.monotonic() < deadline, "the daemon did not start"
            time.sleep(0.1)
        assert [os.readlink(f"/proc/{p.pid}/fd/{fd}") for fd in (0, 1, 2)] == \
            [os.devnull] * 3
    finally:
        p.terminate()
        assert p.wait(timeout=60) == 0
