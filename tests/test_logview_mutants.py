"""Mutation-test survivors of `harness logs` (`harness.supervisor.logview`, `harness.cli.logs`
and the `logs` op): a closed run's ``.zst`` cut short (a disk that lost its end, an empty
file), a one-line error naming the file through the daemon and from disk alike, where its
front was shown as the whole log with exit 0, while a whole compressed log of an empty run
still prints nothing and succeeds; a path holding a secret in the explanation of a missing
log, scrubbed from disk as the daemon scrubs it; the global --socket and --config reaching
`logs`, and `--json` printing the text as it is; a project's PROJECT/NAME harness read
from disk; `view_log`'s own refusal of a run or line count below 1; a log whose first
byte is a newline, cut by `--lines`; a daemon lost mid-request; a capped tail with no
newline in it; a followed log in neither file, and one compressed after more than a
chunk of it was shown; the count of bytes a cap left out of a compressed log trimmed
many times. Real daemons and control servers, the real CLI, real files.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import zstandard

import test_control_server
from conftest import World
from daemons import DEADLINE, Daemons
from harness.supervisor import logview

# The fixtures of the control server's own tests, under the names tests ask for.
loop = test_control_server.loop
sockdir = test_control_server.sockdir

ONESHOT = '[harness.job]\nkind = "oneshot"\nargv = ["true"]\nkeep_runs = 5\n'
FROM_DISK = "harness: daemon not running; read the log from disk\n"


def _cli(world: World, *args: str) -> tuple[int, str, str]:
    res = world.harness(*args)
    return res.returncode, res.stdout, res.stderr


def _logs(world: World, *args: str) -> tuple[int, str, str]:
    return _cli(world, "logs", *args)


def _compressed(data: bytes) -> bytes:
    """`data` as the runner's compression writes a closed log: one streamed frame."""
    buf = io.BytesIO()
    with zstandard.ZstdCompressor(level=3).stream_writer(buf, closefd=False) as w:
        w.write(data)
    return buf.getvalue()


def _stop(daemons: Daemons) -> None:
    proc = daemons.procs[-1]
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=DEADLINE) == 0, daemons.stderr()


def test_a_compressed_log_cut_short_is_an_error_not_its_front(world: World,
                                                              daemons: Daemons) -> None:
    """A .zst that ends inside its frame decompressed without a word: `harness logs`
    printed the log's front as if it were all of it, exit 0, and `--lines 2` printed
    two lines from its middle as its last. Now it is the one line a damaged log gets,
    naming the file, exit 1, however it is asked for, daemon up or down."""
    daemons.write_config(ONESHOT)
    body = b"".join(b"line %06d\n" % i for i in range(100_000))  # blocks before the cut
    whole = _compressed(body)
    jobs = world.state / "jobs" / "job"
    jobs.mkdir(parents=True, mode=0o700)
    cut = jobs / "1.log.zst"
    cut.write_bytes(whole[: len(whole) // 2])
    empty = jobs / "2.log.zst"
    empty.write_bytes(b"")

    def refused(path: Path) -> str:
        return ("harness: cannot read job's log: [Errno 5] damaged compressed log (it ends "
                f"inside its zstd frame): '{path}'\n")

    asks = [(("job", "--run", "1"), cut), (("job", "--run", "1", "--lines", "2"), cut),
            (("job", "--run", "1", "--json"), cut), (("job",), empty),
            (("job", "--lines", "1"), empty)]
    for args, path in asks:
        streamed = "--lines" not in args and "--json" not in args
        code, out, err = _logs(world, *args)
        # Streamed from disk, what came before the cut is printed before the cut is met.
        assert (code, err) == (1, (FROM_DISK if streamed else "") + refused(path)), args
        if streamed and path == cut:
            assert out and len(out) < len(body) and body.decode().startswith(out), args
        else:
            assert out == "", args
    daemons.start()
    for args, path in asks:
        assert _logs(world, *args) == (1, "", refused(path)), args
    _stop(daemons)


def test_a_whole_compressed_log_prints_all_of_it_and_an_empty_one_nothing(
        world: World, daemons: Daemons) -> None:
    """The check for a frame cut short passes every whole frame: a long log's last
    lines are its own, and an empty run's compressed log (a frame holding nothing)
    prints nothing and succeeds."""
    daemons.write_config(ONESHOT)
    body = b"".join(b"line %05d\n" % i for i in range(20_000))
    jobs = world.state / "jobs" / "job"
    jobs.mkdir(parents=True, mode=0o700)
    (jobs / "1.log.zst").write_bytes(_compressed(body))
    (jobs / "2.log.zst").write_bytes(_compressed(b""))
    want = [(("job", "--run", "1", "--lines", "2"), "line 19998\nline 19999\n"),
            (("job", "--run", "1"), body.decode()), (("job",), "")]
    for args, out in want:
        assert _logs(world, *args) == (0, out, FROM_DISK), args
    daemons.start()
    for args, out in want:
        assert _logs(world, *args) == (0, out, ""), args
    res = world.harness("logs", "job", "--json")
    assert json.loads(res.stdout) == {"name": "job", "run_id": 2,
                                      "path": str(jobs / "2.log.zst"), "text": "",
                                      "cut_bytes": 0, "shared": False}
    _stop(daemons)


TOKEN = "ghp_" + "A1b2C3d4" * 4 + "E5f6"  # a GitHub token's shape: the scrubber knows it


def test_a_secret_in_the_state_path_is_scrubbed_when_a_log_is_missing(
        world: World, daemons: Daemons) -> None:
    """A state dir named after a token (or under a directory that is): the daemon's
    explanation of a missing log names the path scrubbed, as every error it sends is;
    read from disk the same explanation printed the token whole. Now both print the
    same line, and so does the note that the ledger could not be read to say why."""
    world.env["XDG_STATE_HOME"] = str(world.root / TOKEN / "state")
    daemons.write_config(ONESHOT + '[harness.svc]\nkind = "resident"\nargv = ["true"]\n'
                                   'enabled = false\n')
    durable = f"{world.root}/[REDACTED]/state/harness/logs/svc.log"
    no_log = (1, "", f"harness: svc has no log yet ({durable})\n")
    assert _logs(world, "svc") == no_log
    assert _logs(world, "svc", "--lines", "3") == no_log
    daemons.start()
    assert _logs(world, "svc") == no_log
    _stop(daemons)

    ledger = world.root / TOKEN / "state" / "harness" / "ledger"
    shutil.rmtree(ledger)  # the daemon's
    ledger.write_text("a file where the ledger directory goes\n")
    assert _logs(world, "job", "--run", "3") == (
        1, "", "harness: job run 3 has no log, and the run ledger could not be read to say "
               f"why: ledger path {world.root}/[REDACTED]/state/harness/ledger is not a "
               "directory\n")


def test_the_socket_and_config_flags_reach_logs(world: World, daemons: Daemons) -> None:
    """`harness --socket S --config C logs NAME`: the daemon asked is the one on S, and
    with none there the harness's kind comes from C; a project's harness, PROJECT/NAME,
    is read from its own directories under jobs/ and logs/. `--json` prints the text as
    it is (not as \\u escapes), indented."""
    config = world.root / "elsewhere.toml"
    config.write_text(ONESHOT + '[harness.svc]\nkind = "resident"\nargv = ["true"]\n'
                                'enabled = false\n')
    jobs = world.state / "jobs" / "job"
    jobs.mkdir(parents=True, mode=0o700)
    (jobs / "1.log").write_text("café\n")
    (world.state / "logs").mkdir(mode=0o700)
    (world.state / "logs" / "svc.log").write_text("svc\n")
    flags = ("--config", str(config))
    assert _cli(world, *flags, "logs", "job") == (0, "café\n", FROM_DISK)
    assert _cli(world, *flags, "logs", "svc", "--lines", "1") == (0, "svc\n", FROM_DISK)
    assert _logs(world, "job") == (1, "", "harness: no harness named 'job'\n")  # none there
    assert _cli(world, *flags, "logs", "job", "--json") == (0, json.dumps(
        {"name": "job", "run_id": 1, "path": str(jobs / "1.log"), "text": "café\n",
         "cut_bytes": 0, "shared": False}, indent=2, ensure_ascii=False) + "\n", FROM_DISK)

    sock = world.root / "elsewhere.sock"
    world.env["HARNESS_CONFIG"] = str(config)
    world.env["HARNESS_SOCKET"] = str(sock)
    daemons.start()
    del world.env["HARNESS_CONFIG"], world.env["HARNESS_SOCKET"]
    assert _cli(world, "--socket", str(sock), *flags, "logs", "job") == (0, "café\n", "")
    _stop(daemons)


def test_a_projects_harness_is_read_from_disk_under_its_full_name(world: World) -> None:
    proj = world.root / "proj"
    proj.mkdir()
    (proj / "harness.toml").write_text(ONESHOT.replace("job", "worker") + (
        '[harness.svc]\nkind = "resident"\nargv = ["true"]\nenabled = false\n'))
    assert world.harness("up", str(proj)).returncode == 0
    jobs = world.state / "jobs" / "proj" / "worker"
    jobs.mkdir(parents=True, mode=0o700)
    (jobs / "1.log").write_text("one\n")
    (jobs / "2.log.zst").write_bytes(_compressed(b"two\nlast\n"))
    (world.state / "logs" / "proj").mkdir(parents=True, mode=0o700)
    (world.state / "logs" / "proj" / "svc.log").write_text("svc out\n")
    assert _logs(world, "proj/worker") == (0, "two\nlast\n", FROM_DISK)
    assert _logs(world, "proj/worker", "--run", "1") == (0, "one\n", FROM_DISK)
    assert _logs(world, "proj/worker", "--lines", "1") == (0, "last\n", FROM_DISK)
    assert _logs(world, "proj/svc") == (0, "svc out\n", FROM_DISK)
    assert _logs(world, "proj/svc", "--run", "1") == (1, "", "harness: proj/svc has no run 1\n")
    assert _logs(world, "worker") == (1, "", "harness: no harness named 'worker'\n")


def test_view_log_refuses_a_run_or_lines_below_1(tmp_path: Path) -> None:
    """`view_log` and `stream_log` check their numbers themselves, whoever calls them:
    a run id or a line count below 1 is a bad request naming the value, before any
    file is looked for."""
    def nothing(name: str, run_id: int) -> None:
        raise AssertionError("no record is asked for")

    where: dict[str, Any] = {"jobs_dir": str(tmp_path), "resident_log": str(tmp_path / "svc.log"),
             "keep_runs": 1, "lookup": nothing}
    for how, message in (({"run": 0}, "run must be a positive run id, got 0"),
                         ({"run": -2}, "run must be a positive run id, got -2"),
                         ({"lines": 0}, "lines must be at least 1, got 0"),
                         ({"run": 1, "lines": -1}, "lines must be at least 1, got -1")):
        with pytest.raises(logview.LogError) as info:
            logview.view_log("job", "oneshot", **where, **how)
        assert (info.value.code, info.value.message) == ("bad_request", message), how
    with pytest.raises(logview.LogError) as info:
        logview.stream_log("svc", "resident", run=0, **where)
    assert (info.value.code, info.value.message) == (
        "bad_request", "run must be a positive run id, got 0")


def test_a_log_that_starts_with_an_empty_line_keeps_it_only_when_asked_for(
        world: World) -> None:
    """The newline at a log's very first byte ends an empty first line: `--lines 1`
    of "\\nlast\\n" is "last", `--lines 2` both lines, plain or compressed."""
    (world.root / "config" / "harness").mkdir(parents=True)
    (world.root / "config" / "harness" / "harness.toml").write_text(ONESHOT)
    jobs = world.state / "jobs" / "job"
    jobs.mkdir(parents=True, mode=0o700)
    (jobs / "1.log").write_bytes(b"\nlast\n")
    (jobs / "2.log.zst").write_bytes(_compressed(b"\nlast\n"))
    for run in ("1", "2"):
        assert _logs(world, "job", "--run", run, "--lines", "1") == (0, "last\n", FROM_DISK)
        assert _logs(world, "job", "--run", run, "--lines", "2") == (
            0, "\nlast\n", FROM_DISK)


def test_a_daemon_lost_mid_request_is_one_line(sockdir: Path, tmp_path: Path) -> None:
    """A daemon that goes away while it holds the `logs` request: one line saying how
    it was lost, exit 1 (not a fall through to a log never received)."""
    path = sockdir / "harness.sock"
    env = dict(os.environ, HARNESS_SOCKET=str(path), XDG_STATE_HOME=str(tmp_path / "state"),
               XDG_CONFIG_HOME=str(tmp_path / "config"), HOME=str(tmp_path / "home"))
    with test_control_server.dying_daemon(path) as got:
        res = subprocess.run([sys.executable, "-m", "harness.cli", "logs", "job"], env=env,
                             capture_output=True, text=True, timeout=60, check=False)
    assert [json.loads(line)["op"] for line in got] == ["logs"]
    assert (res.returncode, res.stdout, res.stderr) == (
        1, "", "harness: lost the daemon (connection closed)\n")


def _capped_plain_and_compressed(tmp_path: Path, body: bytes, max_bytes: int
                                 ) -> list[tuple[int, logview.LogText]]:
    """`body` kept as run 1's plain log and run 2's ``.log.zst``, each viewed as the daemon
    does under a cap of `max_bytes`: (run, view) for both, so one assertion holds both."""
    jobs = tmp_path / "jobs" / "job"
    jobs.mkdir(parents=True)
    (jobs / "1.log").write_bytes(body)
    (jobs / "2.log.zst").write_bytes(_compressed(body))
    return [(run, logview.view_log("job", "oneshot", run=run, jobs_dir=str(tmp_path / "jobs"),
                                   resident_log=str(tmp_path / "unused.log"), keep_runs=5,
                                   lookup=lambda name, run_id: None, max_bytes=max_bytes))
            for run in (1, 2)]


def test_a_capped_tail_without_a_newline_is_kept_whole(tmp_path: Path) -> None:
    """The daemon's cap on a log whose end holds no newline (one long line): the tail is
    all there is to show, counted as cut, not dropped as a partial first line."""
    for run, view in _capped_plain_and_compressed(tmp_path, b"x" * 100, 10):
        assert (view.text, view.cut) == ("x" * 10, 90), run


def test_a_followed_log_that_never_was_is_empty(tmp_path: Path) -> None:
    """`trigger --wait` follows a closed run's log that is in neither file (never
    written, or pruned before the look): nothing more to print, not a None written."""
    follower = logview.LogFollower(str(tmp_path / "9.log"))
    assert (follower.new(), follower.rest(), follower.shown) == (b"", b"", 0)


def test_a_followed_log_compressed_after_more_than_a_chunk_was_shown(tmp_path: Path) -> None:
    """`trigger --wait` had shown more of the plain log than one decompressed chunk when
    the daemon compressed it: the rest skips exactly what was shown, chunk by chunk, and
    prints the run's last output once."""
    from harness.supervisor import logs as run_logs

    path = tmp_path / "5.log"
    shown = b"".join(b"%07d\n" % i for i in range(40_000))  # 320,000 bytes: 5 chunks
    path.write_bytes(shown)
    follower = logview.LogFollower(str(path))
    assert follower.new() == shown
    with path.open("ab") as out:
        out.write(b"the last line\n")
    assert run_logs.compress_log(str(path)) and not path.exists()
    assert follower.rest() == b"the last line\n"
    assert follower.shown == len(shown) + len(b"the last line\n")


def test_the_cut_of_a_big_compressed_log_counts_every_trim(tmp_path: Path) -> None:
    """A capped compressed log of several chunks is trimmed many times as it streams:
    the bytes said to be left out are all of them, as for the same log kept plain."""
    body = b"".join(b"line %06d\n" % i for i in range(30_000))  # 12 bytes a line
    for run, view in _capped_plain_and_compressed(tmp_path, body, 100):
        assert (view.text, view.cut) == (
            "".join(f"line {i:06d}\n" for i in range(29_992, 30_000)), len(body) - 96), run
