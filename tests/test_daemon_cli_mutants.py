"""Mutation-test survivors of the daemon's entry (`harness.daemon`) and the CLI glue
(`harness.cli.daemon`, `harness.cli.main`, `harness.cli.projects`): `trigger --wait`
exiting with a run's exit code at the top of the range (255), and DESIGN §2's mapping of
a record without a usable exit code; a SIGINT to `harness daemon` shutting it down as
cleanly as a SIGTERM (exit 0, the run's whole process group stopped, its record closed
interrupted/shutdown, the socket gone); a second daemon refused the socket exiting 1; a
daemon in its shutdown answering no more requests; `-h` as `--help` and `--version`; a
bad global flag's quote scrubbed; an incomplete reload's own line; the words, table and
JSON of `jobs` and `list`, an empty string in a reply shown as no value; trigger's
stderr line for a queued or skipped run; a stop reply that names only its own durability
warning only when the line is not durable, each line of a `not_durable` list said; a
socket path holding a token scrubbed in the daemon's log and in a second daemon's
refusal; an unknown name's not_found line naming the kind the command needs; a run id
state.json cannot take refused as unavailable; the boot's prune of day files past
retention. Real daemons in throwaway XDG worlds, or a scripted daemon on a real socket,
driven through the real CLI."""

from __future__ import annotations

import signal
import tempfile
from datetime import datetime
from typing import Any

import pytest

from conftest import World
from daemons import (
    DEADLINE,
    STUBBORN,
    Daemons,
    alive,
    record_of,
    runs_of,
    states_of,
    stubborn_pid,
    until,
)
from harness import __version__
from harness.cli.daemon import exit_code_of
from ledgertools import sealed_lines, write_day_file
from test_cli_daemon import Refusal, ScriptedDaemon


def test_trigger_wait_exits_with_the_runs_code_up_to_255(world: World,
                                                          daemons: Daemons) -> None:
    """DESIGN §2: `trigger --wait` exits with the run's exit code — all of 1..255, the
    largest included, not 1 for a code near the top of the range."""
    daemons.write_config('[harness.top]\nkind = "oneshot"\nargv = ["sh", "-c", "exit 255"]\n'
                         '[harness.mid]\nkind = "oneshot"\nargv = ["sh", "-c", "exit 254"]\n')
    daemons.start()
    for name, code in (("top", 255), ("mid", 254)):
        ran = world.harness("trigger", name, "--wait")
        assert (ran.returncode, ran.stdout, ran.stderr) == (code, "", f"{name} run 1: failed\n")


def test_sigint_shuts_the_daemon_down_as_cleanly_as_sigterm(world: World,
                                                             daemons: Daemons) -> None:
    """DESIGN §2: SIGTERM *and* SIGINT (Ctrl-C on a foreground `harness daemon`) shut it
    down cleanly: exit 0, the live run stopped whole (a process it started in the
    background too, not only the one the daemon spawned) and closed as interrupted by
    the shutdown, the control socket removed."""
    pidfile, childfile = world.root / "long.pid", world.root / "child.pid"
    daemons.pidfiles.append(pidfile)
    daemons.write_config(
        '[harness.long]\nkind = "oneshot"\n'
        f'argv = ["sh", "-c", "sleep 1000 & echo $! > {childfile}; echo $$ > {pidfile}; wait"]\n')
    proc = daemons.start()
    started = world.harness("trigger", "long")
    assert (started.returncode, started.stdout) == (0, "1\n")
    until("run 1 to be running", lambda: pidfile.exists() and pidfile.read_text().strip()
          and (r := record_of(world, "long", 1)) is not None and r["outcome"] == "running")
    pids = [int(pidfile.read_text()), int(childfile.read_text())]
    assert all(alive(pid) for pid in pids)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=DEADLINE) == 0, daemons.stderr()
    assert not daemons.socket.exists()
    assert [alive(pid) for pid in pids] == [False, False]
    rec = record_of(world, "long", 1)
    assert rec is not None
    assert (rec["outcome"], rec["reason"]) == ("interrupted", "shutdown")
    assert "Traceback" not in daemons.stderr()


@pytest.mark.parametrize(("rec", "code"), [
    ({"outcome": "success"}, 0),  # no exit_code field (a hand-made record): still 0
    ({"outcome": "success", "exit_code": True}, 0),  # a bool is no exit status
    ({"outcome": "failed", "exit_code": True}, 1),
    ({"outcome": "failed", "exit_code": 256}, 1),  # out of range: a plain failure
    ({"outcome": "cancelled"}, 1),
    # A hand-edited contradiction: the outcome decides which side of 0 the exit is on
    # (the other side, a failure with exit_code 0, is test_daemon_e2e's).
    ({"outcome": "success", "exit_code": 3}, 0),
])
def test_trigger_wait_exit_codes_of_records_without_a_usable_code(rec: dict[str, Any],
                                                                  code: int) -> None:
    """DESIGN §2's mapping where the record's exit_code is missing or no exit status."""
    got = exit_code_of(rec)
    assert (type(got), got) == (int, code)


def test_a_second_daemon_on_the_same_socket_exits_1_and_leaves_the_first_serving(
        world: World, daemons: Daemons) -> None:
    """A daemon that cannot take the control socket cannot boot: one line on stderr
    naming the socket, exit 1 (a supervisor restarting it must not read success), and
    the daemon that owns it goes on answering."""
    daemons.write_config('[harness.job]\nkind = "oneshot"\nargv = ["true"]\n')
    daemons.start()
    second = world.harness("daemon")
    assert (second.returncode, second.stdout, second.stderr) == (
        1, "", "harness: cannot serve the control socket: another harness daemon owns "
               f"{daemons.socket}\n")
    assert states_of(world) == {"job": "armed"}


def test_dash_h_is_help_and_version_names_harness(world: World) -> None:
    """`-h` is `--help` (the group's and a command's), and `--version` names the program
    `harness` whatever it was started as (`python -m harness.cli` here)."""
    for args in ((), ("trigger",)):
        long, short = world.harness(*args, "--help"), world.harness(*args, "-h")
        assert (short.returncode, short.stdout, short.stderr) == (0, long.stdout, "")
        assert long.returncode == 0 and long.stdout.startswith("Usage: harness ")
    ver = world.harness("--version")
    assert (ver.returncode, ver.stdout, ver.stderr) == (0, f"harness, version {__version__}\n",
                                                        "")


def test_a_shutting_down_daemon_answers_no_more_requests(world: World,
                                                         daemons: Daemons) -> None:
    """The shutdown closes the control socket first, before it waits out a live run's
    grace: a command meanwhile is told the daemon is not running (exit 1), it does not
    get an answer from a daemon about to be gone, nor can a trigger slip in."""
    pidfile = world.root / "stub.pid"
    daemons.pidfiles.append(pidfile)
    daemons.write_config('[harness.stub]\nkind = "oneshot"\n'
                         f'argv = ["sh", "-c", "echo $$ > {pidfile}; {STUBBORN}"]\n')
    proc = daemons.start()
    assert world.harness("trigger", "stub").returncode == 0
    pid = stubborn_pid(pidfile)
    proc.send_signal(signal.SIGTERM)
    until("the shutdown to begin", lambda: "shutting down" in daemons.stderr())
    jobs = world.harness("jobs")
    assert (jobs.returncode, jobs.stdout, jobs.stderr) == (
        1, "", f"harness: daemon not running ({daemons.socket}); start it with "
               "`harness daemon`\n")
    assert proc.wait(timeout=DEADLINE) == 0, daemons.stderr()
    assert not alive(pid)
    rec = record_of(world, "stub", 1)
    assert rec is not None and (rec["outcome"], rec["reason"]) == ("interrupted", "shutdown")


def test_an_incomplete_reload_says_what_was_left_and_exits_1(world: World) -> None:
    """A reload the daemon applied but for what it names (``incomplete``) is no refusal
    of the config (2) nor a plain failure: its own line, exit 1."""
    daemon = ScriptedDaemon(str(world.root / "run" / "harness.sock"),
                            lambda msg: (0, Refusal("incomplete", "job: cannot stop: boom")))
    try:
        res = world.harness("reload")
    finally:
        daemon.close()
    assert (res.returncode, res.stdout, res.stderr) == (
        1, "", "harness: reload incomplete: job: cannot stop: boom\n")


@pytest.mark.parametrize(("flag", "shown"), [
    ("--x\x1b]0;T\x07", "--x\\x1b]0;T\\x07"),  # a title-setting escape, spelled out
    ("--ghp_abcdefghijklmnopqrstuvwxyz0123456789", "--[REDACTED]"),  # a token, scrubbed
])
def test_a_bad_global_flag_is_quoted_scrubbed_and_escaped(world: World, flag: str,
                                                           shown: str) -> None:
    """An unknown flag before the command is refused as click refuses one (usage, then
    one `Error:` line, exit 2), its quote of the flag scrubbed and escaped like the
    commands' own flags."""
    res = world.harness(flag)
    assert (res.returncode, res.stdout, res.stderr) == (
        2, "", "Usage: harness [OPTIONS] COMMAND [ARGS]...\nTry 'harness --help' for help.\n"
               f"\nError: No such option '{shown}'.\n")


def test_listings_of_a_daemon_with_nothing_configured(world: World, daemons: Daemons) -> None:
    """`jobs` and `list` say in words that nothing is configured (not an empty table),
    and as JSON print an empty array."""
    daemons.write_config("")
    daemons.start()
    said = [(r.returncode, r.stdout, r.stderr) for r in (
        world.harness("jobs"), world.harness("list"), world.harness("jobs", "--json"),
        world.harness("list", "--json"))]
    assert said == [(0, "no one-shot harnesses configured\n", ""),
                    (0, "no harnesses configured\n", ""), (0, "[]\n", ""), (0, "[]\n", "")]


def test_the_jobs_table_and_json_of_a_failing_job(world: World, daemons: Daemons) -> None:
    """The jobs table's last run reads `#ID OUTCOME STARTED` (STARTED as `harness runs`
    shows it) and the streak counts failures; the JSON is the daemon's listing, indented."""
    daemons.write_config('[harness.bad]\nkind = "oneshot"\nargv = ["false"]\n')
    daemons.start()
    for _ in range(2):
        assert world.harness("trigger", "bad", "--wait").returncode == 1
    table = world.harness("jobs")
    assert (table.returncode, table.stderr) == (0, "")
    none = "\u2014"  # no schedule, no next fire
    t = datetime.fromisoformat(runs_of(world, "bad")[0]["started_at"][:19] + "+00:00")
    when = [f"{t:%b}", str(t.day), f"{t:%H:%M}"]  # STARTED in the world's TZ=UTC
    assert table.stdout.splitlines()[1].split() == ["bad", "armed", none, none, "#2",
                                                    "failed", *when, "2"]
    listed = world.harness("list", "--json")
    assert (listed.returncode, listed.stdout) == (
        0, '[\n  {\n    "name": "bad",\n    "kind": "oneshot",\n    "state": "armed"\n  }\n]\n')


def test_trigger_says_on_stderr_when_its_run_is_queued_or_skipped(
        world: World, daemons: Daemons) -> None:
    """stdout stays the bare run id, for scripts; a decision other than `started` is said
    on stderr, a queued one with when it will run."""
    pidfile = world.root / "q.pid"
    daemons.pidfiles.append(pidfile)
    daemons.write_config('[harness.q]\nkind = "oneshot"\non_overlap = "queue"\n'
                         f'argv = ["sh", "-c", "echo $$ > {pidfile}; exec sleep 1000"]\n')
    daemons.start()
    said = []
    for _ in range(3):
        r = world.harness("trigger", "q")
        said.append((r.returncode, r.stdout, r.stderr))
    assert said == [(0, "1\n", ""), (0, "2\n", "q: run 2 queued until the live run ends\n"),
                    (0, "3\n", "q: run 3 skipped\n")]


def test_an_empty_string_the_daemon_sends_reads_as_no_value(world: World) -> None:
    """A cell the daemon sent as "" shows the no-value mark, as a missing one does, not
    as a blank that shifts the row's columns."""
    reply = {"jobs": [{"name": "x", "state": "", "schedule": "", "next": None,
                       "last_run": {"run_id": "", "outcome": "failed"}, "fails": ""}]}
    daemon = ScriptedDaemon(str(world.root / "run" / "harness.sock"), lambda msg: (0, reply))
    try:
        res = world.harness("jobs")
    finally:
        daemon.close()
    assert (res.returncode, res.stderr) == (0, "")
    none = "\u2014"
    assert res.stdout.splitlines()[1].split() == ["x", none, none, none, "#?", "failed", none]


@pytest.mark.parametrize(("durable", "warned"), [
    (False, "harness: job run 4's closed line is not on disk yet: the ledger's disk is "
            "failing; the line stays queued and is written once the disk takes it\n"),
    (True, ""),
])
def test_a_stop_reply_naming_only_its_own_durability_warns_only_when_not_durable(
        world: World, durable: bool, warned: str) -> None:
    """A daemon that says of a stop only whether the run's closed line is durable (no
    `not_durable` list): the stop's line, and a warning on stderr only when it is not."""
    reply = {"name": "job", "action": "stopped", "run_id": 4, "outcome": "cancelled",
             "reason": "operator", "durable": durable}
    daemon = ScriptedDaemon(str(world.root / "run" / "harness.sock"), lambda msg: (0, reply))
    try:
        res = world.harness("stop", "job")
    finally:
        daemon.close()
    assert (res.returncode, res.stdout, res.stderr) == (
        0, "job: stopped run 4 (cancelled/operator)\n", warned)


def test_a_stop_reply_listing_what_is_not_durable_warns_for_each(world: World) -> None:
    """A reply with `not_durable` is said entry by entry (the stopped run's closed line
    and a queued firing's decided one), not as the stopped run alone."""
    reply = {"name": "job", "action": "stopped", "run_id": 4, "outcome": "cancelled",
             "durable": False, "not_durable": [
                 {"harness": "job", "run_id": 4, "line": "closed"},
                 {"harness": "job", "run_id": 5, "line": "decided"}]}
    daemon = ScriptedDaemon(str(world.root / "run" / "harness.sock"), lambda msg: (0, reply))
    try:
        res = world.harness("stop", "job")
    finally:
        daemon.close()
    tail = ("line is not on disk yet: the ledger's disk is failing; the line stays queued "
            "and is written once the disk takes it\n")
    assert (res.returncode, res.stdout, res.stderr) == (
        0, "job: stopped run 4 (cancelled)\n",
        f"harness: job run 4's closed {tail}harness: job run 5's decided {tail}")


def test_a_socket_path_holding_a_token_never_reaches_the_daemons_stderr(
        world: World, daemons: Daemons) -> None:
    """The daemon's log line naming its socket, and a second daemon's refusal of it, show
    a directory named after a token scrubbed, as the CLI's lines do."""
    token = "ghp_abcdefghijklmnopqrstuvwxyz0123456789"
    # Under /tmp: the test's own directory would make the path too long for a socket.
    with tempfile.TemporaryDirectory(prefix="h", dir="/tmp") as short:
        world.env["HARNESS_SOCKET"] = f"{short}/{token}/harness.sock"
        daemons.write_config('[harness.job]\nkind = "oneshot"\nargv = ["true"]\n')
        proc = daemons.start()
        until("the daemon's up line", lambda: " up: pid " in daemons.stderr())
        up = daemons.stderr()
        second = world.harness("daemon")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=DEADLINE) == 0, daemons.stderr()
    assert token not in up
    assert f"socket {short}/[REDACTED]/harness.sock" in up
    assert (second.returncode, second.stdout, second.stderr) == (
        1, "", "harness: cannot serve the control socket: another harness daemon owns "
               f"{short}/[REDACTED]/harness.sock\n")


def test_an_unknown_name_is_refused_naming_the_kind_the_command_needs(
        world: World, daemons: Daemons) -> None:
    """`trigger` needs a one-shot and says so; the others need any harness."""
    daemons.write_config('[harness.job]\nkind = "oneshot"\nargv = ["true"]\n')
    daemons.start()
    said = [(r.returncode, r.stdout, r.stderr) for r in (
        world.harness("trigger", "nope"), world.harness("trigger", "nope", "--wait"),
        world.harness("stop", "nope"))]
    assert said == [
        (1, "", "harness: no one-shot harness named 'nope' (not_found)\n"),
        (1, "", "harness: no one-shot harness named 'nope' (not_found)\n"),
        (1, "", "harness: no harness named 'nope' (not_found)\n")]


def test_a_run_id_the_disk_does_not_take_is_refused_as_unavailable(
        world: World, daemons: Daemons) -> None:
    """A trigger whose run id state.json cannot record is refused `unavailable` (a
    condition that passes, not a bug of the daemon's): one line, exit 1."""
    daemons.write_config('[harness.job]\nkind = "oneshot"\nargv = ["true"]\n')
    daemons.start()
    # Once the boot is done (a request waits for it): the boot reads state.json.
    assert world.harness("jobs").returncode == 0
    # A directory where state.json goes: its replacement cannot land there.
    state = world.state / "state.json"
    state.unlink(missing_ok=True)
    (state / "in-the-way").mkdir(parents=True)
    res = world.harness("trigger", "job")
    assert (res.returncode, res.stdout) == (1, ""), daemons.stderr()
    assert res.stderr.startswith("harness: ") and res.stderr.endswith(" (unavailable)\n")
    assert res.stderr.count("\n") == 1


def test_the_boot_prunes_day_files_past_retention(world: World, daemons: Daemons) -> None:
    """A day file that ended more than `[ledger] retention` ago is deleted by the boot,
    not left until the first midnight prune."""
    raws, _ = sealed_lines({"2020-01-01": [1, 2], "2020-01-02": [3]})
    write_day_file(world.ledger / "2020-01-01.jsonl", [raws[1], raws[2]])
    write_day_file(world.ledger / "2020-01-02.jsonl", [raws[3]])
    daemons.write_config('[ledger]\nretention = "30d"\n')
    daemons.start()
    assert world.harness("jobs").returncode == 0  # a request waits for the boot
    assert list(world.ledger.glob("2020-*.jsonl")) == []
