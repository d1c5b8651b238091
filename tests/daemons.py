"""Real daemons for the end-to-end tests, and what those tests ask of them.

This module owns `Daemons` (starts `python -m harness.cli daemon` in a test's world and
kills every daemon, every pid in its pidfiles and every run a daemon left, at teardown),
`FaultDaemons` (the same, with the daemon run under faultdaemon.py, the `LAUNCHER`, and a
fault-injecting disk), the `DEADLINE` the tests wait on, `until` (poll a probe until it
answers or the deadline passes), `request` (one control-socket op), and the readers built
on the real CLI: `runs_of`, `record_of` and `states_of`; `read_log`, a run's log as
`harness logs` reads it (plain or compressed); two looks at a process by pid,
`alive` and `comm`; and `STUBBORN`, a run that ignores SIGTERM, with `stubborn_pid` to
wait for it.
The `daemons` and `fd` fixtures that hand a test one of these live in conftest.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, TypeVar

from harness.control.client import Client, DaemonUnreachable
from harness.supervisor.logview import open_log

if TYPE_CHECKING:
    from conftest import World

DEADLINE = 30.0


def alive(pid: int) -> bool:
    """Alive and not a zombie (an orphan's reaper may be a PID 1 that never reaps)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in (b"Z", b"X")


def comm(pid: int) -> str:
    """The process's command name ("" once it is gone)."""
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""
LAUNCHER = Path(__file__).with_name("faultdaemon.py")
T = TypeVar("T")


def until(what: str, probe: Callable[[], T | None], deadline: float = DEADLINE) -> T:
    end = time.monotonic() + deadline
    while True:
        got = probe()
        if got:
            return got
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {deadline:g}s waiting for {what}")
        time.sleep(0.1)


# The tail of a run's shell command that ignores SIGTERM (a stop must wait out its grace);
# the command writes its pid first: `echo $$ > PIDFILE; ` + STUBBORN.
STUBBORN = "trap '' TERM; exec sleep 1000"


def stubborn_pid(pidfile: Path) -> int:
    """The pid in `pidfile` once it is the `sleep` of STUBBORN, ignoring SIGTERM."""
    until(f"{pidfile.name} to name a sleep that ignores SIGTERM",
          lambda: pidfile.exists() and pidfile.read_text().strip()
          and comm(int(pidfile.read_text())) == "sleep")
    return int(pidfile.read_text())


def interruptible() -> None:
    """A child's `preexec_fn`: SIGINT back to its default. A shell starts a command put in
    the background with SIGINT ignored, and Python keeps an ignored SIGINT ignored: under
    such a runner, a test's Ctrl-C would never reach the command."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@contextlib.contextmanager
def reaped(proc: subprocess.Popen[str]) -> Iterator[subprocess.Popen[str]]:
    """`proc`, killed and reaped on the way out if it is still running (a test that
    failed while it waited must not leave the command behind)."""
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()  # a pipe read to its end is still open until closed

class Daemons:
    """Starts daemons in a world; kills every one still alive (and the pids in pidfiles)."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.procs: list[subprocess.Popen[str]] = []
        self.pidfiles: list[Path] = []
        self.files: list[IO[str]] = []

    @property
    def socket(self) -> Path:
        """The socket this world's daemons serve: the HARNESS_SOCKET a test put in the
        world's environment, else the XDG default."""
        sock = self.world.env.get("HARNESS_SOCKET")
        return Path(sock) if sock else self.world.root / "run" / "harness.sock"

    @property
    def config(self) -> Path:
        return self.world.root / "config" / "harness" / "harness.toml"

    def write_config(self, text: str) -> None:
        self.config.parent.mkdir(parents=True, exist_ok=True)
        self.config.write_text(text)

    def start(self, *, wait: bool = True) -> subprocess.Popen[str]:
        n = len(self.procs)
        out = open(self.world.root / f"daemon{n}.out", "w")  # noqa: SIM115
        err = open(self.world.root / f"daemon{n}.err", "w")  # noqa: SIM115
        self.files += [out, err]  # closed at teardown, after the daemon is gone
        proc = subprocess.Popen([sys.executable, "-m", "harness.cli", "daemon"],
                                env=self.world.env, text=True, stdout=out, stderr=err)
        self.procs.append(proc)
        if wait:
            until("the control socket", lambda: self._answers(proc))
        return proc

    def stderr(self, n: int = -1) -> str:
        idx = n if n >= 0 else len(self.procs) + n
        return (self.world.root / f"daemon{idx}.err").read_text()

    def _answers(self, proc: subprocess.Popen[str]) -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"daemon exited {proc.returncode}: {self.stderr()}")
        try:
            Client(str(self.socket), timeout=2.0).close()
        except DaemonUnreachable:
            return False
        return True

    def kill_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=DEADLINE)
        for pf in self.pidfiles:
            with contextlib.suppress(OSError, ValueError):
                os.killpg(int(pf.read_text().strip()), signal.SIGKILL)
        self._kill_leftover_runs()
        for f in self.files:
            f.close()

    def _kill_leftover_runs(self) -> None:
        """Kill every run a SIGKILLed daemon of this world left behind (a resident still
        up when the test ended would otherwise outlive the suite, and load the machine).
        A run is known by this world's XDG_STATE_HOME in its environment, which no other
        process holds; each is its own process group's leader."""
        mark = b"XDG_STATE_HOME=" + os.fsencode(self.world.env["XDG_STATE_HOME"])
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) == os.getpid():
                continue
            pid = int(entry)
            with contextlib.suppress(OSError):
                with open(f"/proc/{pid}/environ", "rb") as f:
                    if mark not in f.read().split(b"\0"):
                        continue
                if os.getpgid(pid) == pid:
                    os.killpg(pid, signal.SIGKILL)
                else:
                    os.kill(pid, signal.SIGKILL)


def runs_of(world: World, name: str) -> list[dict[str, Any]]:
    """`harness runs NAME --json`, which must succeed."""
    res = world.harness("runs", name, "--json")
    assert res.returncode == 0, res.stderr
    runs: list[dict[str, Any]] = json.loads(res.stdout)
    return runs


def read_log(path: str) -> bytes | None:
    """The whole log at `path`, plain or from ``<path>.zst``; None when neither exists."""
    found = open_log(path)
    if found is None:
        return None
    with found:
        return found.tail(None, None)[0]


def record_of(world: World, name: str, run_id: int) -> dict[str, Any] | None:
    """The record of (name, run_id) as `harness runs` lists it, or None."""
    return next((r for r in runs_of(world, name) if r["run_id"] == run_id), None)


def states_of(world: World) -> dict[str, str]:
    """Each harness's state as `harness list` shows it, by name."""
    res = world.harness("list", "--json")
    assert res.returncode == 0, res.stderr
    return {h["name"]: h["state"] for h in json.loads(res.stdout)}


class FaultDaemons(Daemons):
    """`Daemons` whose daemon runs under tests/faultdaemon.py with a control file."""

    def __init__(self, world: World) -> None:
        super().__init__(world)
        self.control = world.root / "faults.json"
        self.gen = 0
        (world.root / "pids").mkdir()

    def start_faulty(self, *launcher_args: str, wait: bool = True
                     ) -> subprocess.Popen[str]:
        n = len(self.procs)
        out = open(self.world.root / f"daemon{n}.out", "w")  # noqa: SIM115
        err = open(self.world.root / f"daemon{n}.err", "w")  # noqa: SIM115
        self.files += [out, err]
        proc = subprocess.Popen(
            [sys.executable, str(LAUNCHER), "--control", str(self.control), *launcher_args,
             "--"], env=self.world.env, text=True, stdout=out, stderr=err)
        self.procs.append(proc)
        if wait:
            until("the control socket", lambda: self._answers(proc))
        return proc

    def booted(self) -> None:
        """Wait out the boot: hello is answered at once, ops only once the boot is done
        (import, reconciliation and their log lines included)."""
        request(self, "list")

    def faults(self, **faults: dict[str, Any]) -> dict[str, int]:
        """Arm exactly `faults` (none: a healthy disk); return the call counts at the switch."""
        self.gen += 1
        tmp = self.control.with_suffix(".tmp")
        tmp.write_text(json.dumps({"gen": self.gen, "faults": faults}))
        os.replace(tmp, self.control)
        ack = Path(f"{self.control}.ack")

        def acked() -> dict[str, Any] | None:
            try:
                doc = json.loads(ack.read_text())
            except (OSError, ValueError):
                return None
            return doc if doc.get("gen") == self.gen else None

        calls: dict[str, int] = until(f"fault set {self.gen} to be armed", acked)["calls"]
        return calls


def request(d: Daemons, op: str, **args: Any) -> Any:
    c = Client(str(d.socket), timeout=30.0)
    try:
        return c.request(op, **args)
    finally:
        c.close()
