"""Mutation-test survivors of the daemon's entry (`harness.daemon`) and the CLI glue
(`harness.cli.daemon`, `harness.cli.main`, `harness.cli.projects`, `harness.paths`,
`harness.controls`): `trigger --wait` exiting with a run's exit code at the top of the
range (255), not only the small ones; a SIGINT to `harness daemon` shutting it down as
cleanly as a SIGTERM (exit 0, its live run closed interrupted/shutdown, the socket
gone). Real daemons in throwaway XDG worlds, driven through the real CLI."""

from __future__ import annotations

import signal
from typing import Any

import pytest

from conftest import World
from daemons import DEADLINE, Daemons, record_of, states_of, until
from harness.cli.daemon import exit_code_of


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
    down cleanly: exit 0, the live run closed as interrupted by the shutdown, the
    control socket removed."""
    pidfile = world.root / "long.pid"
    daemons.pidfiles.append(pidfile)
    daemons.write_config('[harness.long]\nkind = "oneshot"\n'
                         f'argv = ["sh", "-c", "echo $$ > {pidfile}; exec sleep 1000"]\n')
    proc = daemons.start()
    started = world.harness("trigger", "long")
    assert (started.returncode, started.stdout) == (0, "1\n")
    until("run 1 to be running", lambda: pidfile.exists() and pidfile.read_text().strip()
          and (r := record_of(world, "long", 1)) is not None and r["outcome"] == "running")
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=DEADLINE) == 0, daemons.stderr()
    assert not daemons.socket.exists()
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
