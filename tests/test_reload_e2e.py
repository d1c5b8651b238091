"""Config reload end to end (DESIGN.md §3, SPEC-0022 REQ-3/REQ-19): the `reload` op and
SIGHUP against a real daemon process.

A reload starts what the new config adds, closes the live run of what it removes as
cancelled/reload, stops and starts again a changed resident that was up (`enabled` or
not), leaves down one that was down or an operator stopped, and leaves an unchanged
harness's run alone (same run id, same process). A config that fails to load is refused
with `bad_config` naming the file and key, and the last good config stays in force.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

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
from harness.control.client import Client, DaemonError


def _resident(name: str, pidfile: Path, note: str = "") -> str:
    return f"""
[harness.{name}]
argv = ["sh", "-c", "echo $$ > {pidfile}; exec sleep 600 {note}"]
"""


def _pid(path: Path) -> int:
    return int(until(f"{path.name}", lambda: path.exists() and path.read_text().strip()))


def test_reload_applies_only_what_changed(world: World, daemons: Daemons,
                                          tmp_path: Path) -> None:
    keep, change, drop, new = (tmp_path / f"{n}.pid" for n in ("keep", "change", "drop", "new"))
    daemons.pidfiles += [keep, change, drop, new]
    base = _resident("keep", keep) + _resident("drop", drop)
    daemons.write_config(base + _resident("change", change) + """
[harness.job]
kind = "oneshot"
argv = ["true"]
""")
    daemons.start()
    keep_pid, change_pid = _pid(keep), _pid(change)
    _pid(drop)
    change.unlink()
    daemons.write_config(_resident("keep", keep) + _resident("change", change, "# v2")
                         + _resident("new", new))
    with Client(str(daemons.socket)) as c:
        out = c.request("reload")
    assert out == {"added": ["new"], "removed": ["drop", "job"], "changed": ["change"],
                   "unchanged": 1}
    dropped = record_of(world, "drop", 1)
    assert dropped is not None and (dropped["outcome"], dropped["reason"]) == (
        "cancelled", "reload")
    old = record_of(world, "change", 1)
    assert old is not None and (old["outcome"], old["reason"]) == ("cancelled", "reload")
    again = until("the changed resident's new run", lambda: record_of(world, "change", 2))
    # Brought up again by the operator's reload, as `harness restart` would: manual.
    assert (again["trigger"], again["outcome"]) == ("manual", "running")
    assert _pid(change) != change_pid
    assert _pid(new) > 0
    # The unchanged resident kept its run and its process.
    assert [r["run_id"] for r in runs_of(world, "keep")] == [1]
    assert _pid(keep) == keep_pid
    os.kill(keep_pid, 0)
    assert states_of(world) == {"change": "running", "keep": "running", "new": "running"}


def test_a_bad_reload_keeps_the_last_good_config(world: World, daemons: Daemons,
                                                 tmp_path: Path) -> None:
    pidfile = tmp_path / "w.pid"
    daemons.pidfiles.append(pidfile)
    daemons.write_config(_resident("w", pidfile))
    daemons.start()
    pid = _pid(pidfile)
    daemons.write_config(_resident("w", pidfile)
                         + '\n[harness.bad]\nargv = ["x"]\nrestart = "sometimes"\n')
    with Client(str(daemons.socket)) as c, pytest.raises(DaemonError) as err:
        c.request("reload")
    assert err.value.code == "bad_config"
    assert str(daemons.config) in str(err.value) and "restart" in str(err.value)
    assert states_of(world) == {"w": "running"}
    os.kill(pid, 0)
    # SIGHUP reloads too: a fixed file is applied, and the failed attempt changed nothing.
    daemons.write_config(_resident("w", pidfile) + '\n[harness.job]\nkind = "oneshot"\n'
                         'argv = ["true"]\n')
    daemons.procs[-1].send_signal(signal.SIGHUP)
    until("the SIGHUP reload", lambda: "job" in states_of(world))
    assert states_of(world) == {"job": "armed", "w": "running"}
    assert [r["run_id"] for r in runs_of(world, "w")] == [1]
    assert "reload failed" in daemons.stderr()


def test_reload_removal_cancels_a_live_one_shot_and_its_held_firing(
        world: World, daemons: Daemons) -> None:
    daemons.write_config("""
[harness.q]
kind = "oneshot"
on_overlap = "queue"
argv = ["sleep", "600"]

[harness.stay]
kind = "oneshot"
argv = ["true"]
""")
    daemons.start()
    with Client(str(daemons.socket)) as c:
        assert c.request("trigger", name="q") == {"decision": "started", "run_id": 1}
        assert c.request("trigger", name="q") == {"decision": "queued", "run_id": 2}
        daemons.write_config('[harness.stay]\nkind = "oneshot"\nargv = ["true"]\n')
        assert c.request("reload") == {"added": [], "removed": ["q"], "changed": [],
                                       "unchanged": 1}
        runs = {r["run_id"]: r for r in runs_of(world, "q")}
        assert {k: (r["outcome"], r["reason"]) for k, r in runs.items()} == {
            1: ("cancelled", "reload"), 2: ("cancelled", "reload")}
        assert runs[1]["exit_code"] == -1 and "exit_code" not in runs[2]
        with pytest.raises(DaemonError) as err:
            c.request("trigger", name="q")
        assert err.value.code == "not_found"
    assert states_of(world) == {"stay": "armed"}


def test_a_reload_starts_again_what_was_up_and_leaves_down_what_was_down(
        world: World, daemons: Daemons, tmp_path: Path) -> None:
    """A reload that changes a resident stops its live run (cancelled/reload) and starts it
    again under the new config. It started it again only when `enabled` and its hours said
    autostart, so a disabled resident an operator started (c), one an operator started
    outside its hours (h) and a disabled one an operator started that was waiting out a
    restart's backoff (b) were left down. What was down stays down: a disabled resident
    nobody started (d), one an operator stopped (s), and one an operator started outside
    its hours whose run ended on its own (o: restart = "no" left nothing of that start)."""
    opens = datetime.now(UTC) + timedelta(hours=3)
    hours = f"TZ=UTC Mon-Sun {opens:%H:%M}-{opens + timedelta(minutes=1):%H:%M}"
    pids = {n: tmp_path / f"{n}.pid" for n in "bchs"}
    daemons.pidfiles += pids.values()
    mark = tmp_path / "b.crashed"

    def config(note: str) -> str:
        def up(n: str) -> str:
            return f"echo $$ > {pids[n]}; exec sleep 600 {note}"
        return f"""
[harness.b]
enabled = false
restart_delay = "1h"
argv = ["sh", "-c", "[ -e {mark} ] || {{ touch {mark}; exit 1; }}; {up('b')}"]

[harness.c]
enabled = false
argv = ["sh", "-c", "{up('c')}"]

[harness.d]
enabled = false
argv = ["sh", "-c", "exec sleep 600 {note}"]

[harness.h]
operating_hours = "{hours}"
argv = ["sh", "-c", "{up('h')}"]

[harness.o]
operating_hours = "{hours}"
restart = "no"
argv = ["sh", "-c", "exit 0 {note}"]

[harness.s]
enabled = false
argv = ["sh", "-c", "{up('s')}"]
"""

    def records(name: str) -> list[tuple[int, str, str, str | None]]:
        return [(r["run_id"], r["trigger"], r["outcome"], r.get("reason"))
                for r in runs_of(world, name)]

    daemons.write_config(config(""))
    daemons.start()
    assert states_of(world) == {"b": "stopped", "c": "stopped", "d": "stopped",
                                "h": "off-hours", "o": "off-hours", "s": "stopped"}
    with Client(str(daemons.socket)) as c:
        for name in "bchos":
            out = c.request("start", name=name)
            assert (out["action"], out["run_id"]) == ("started", 1)
        assert c.request("stop", name="s")["reason"] == "operator"
    until("b to crash into its 1h backoff and o to end",
          lambda: (st := states_of(world))["b"] == "backoff" and st["o"] == "off-hours")
    old = {n: _pid(pids[n]) for n in "ch"}
    for n in "ch":
        pids[n].unlink()
    assert {n: records(n) for n in "bcdhos"} == {
        "b": [(1, "manual", "failed", None)],
        "c": [(1, "manual", "running", None)],
        "d": [],
        "h": [(1, "manual", "running", None)],
        "o": [(1, "manual", "success", None)],
        "s": [(1, "manual", "cancelled", "operator")]}

    daemons.write_config(config("# v2"))
    with Client(str(daemons.socket)) as c:
        assert c.request("reload") == {"added": [], "removed": [],
                                       "changed": ["b", "c", "d", "h", "o", "s"],
                                       "unchanged": 0}
    # The restarts are the operator's reload's own: trigger manual, as for `harness
    # restart`, whatever `enabled` says. They read "autostart", which a disabled resident
    # (b, c) never does, and "restart" is the policy's restart after an exit.
    assert {n: records(n) for n in "bcdhos"} == {
        "b": [(2, "manual", "running", None), (1, "manual", "failed", None)],
        "c": [(2, "manual", "running", None), (1, "manual", "cancelled", "reload")],
        "d": [],
        "h": [(2, "manual", "running", None), (1, "manual", "cancelled", "reload")],
        "o": [(1, "manual", "success", None)],
        "s": [(1, "manual", "cancelled", "operator")]}
    assert states_of(world) == {"b": "running", "c": "running", "d": "stopped",
                                "h": "running", "o": "off-hours", "s": "stopped"}
    for n in "bch":
        pid = _pid(pids[n])
        assert pid != old.get(n) and alive(pid)
    assert not pids["s"].exists() or not alive(int(pids["s"].read_text()))


@contextlib.contextmanager
def _reloading(daemons: Daemons, begun: Callable[[], bool]) -> Iterator[socket.socket]:
    """A client of the documented protocol that has asked for `reload`, once `begun()`
    says the reload is under way; its connection is closed on the way out."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.connect(str(daemons.socket))
        s.sendall(b'{"op": "hello", "proto": "1.0"}\n')
        assert json.loads(s.makefile("rb").readline())["ok"] is True
        s.sendall(b'{"id": 1, "op": "reload"}\n')
        until("the reload to begin", begun)
        yield s


def _slow_and_changed(daemons: Daemons, tmp_path: Path
                      ) -> tuple[dict[str, Path], int, int, Callable[[], bool]]:
    """A daemon running resident `slow` (its run ignores SIGTERM, so its stop waits out
    the grace) and resident `chg`, and a config on disk that removes `slow`, changes
    `chg` and adds resident `new`. Returns the pid files, the pids of slow's and chg's
    runs, and a probe saying when a reload has put that config in force: it then stops
    `slow` first, and the rest is still to do while `slow` is alive."""
    pids = {n: tmp_path / f"{n}.pid" for n in ("slow", "chg", "new")}
    daemons.pidfiles += pids.values()
    daemons.write_config(f"""
[harness.slow]
argv = ["sh", "-c", "echo $$ > {pids['slow']}; {STUBBORN}"]
""" + _resident("chg", pids["chg"]))
    daemons.start()
    slow = stubborn_pid(pids["slow"])
    chg = _pid(pids["chg"])
    pids["chg"].unlink()
    daemons.write_config(_resident("chg", pids["chg"], "# v2") + _resident("new", pids["new"]))

    def begun() -> bool:
        with Client(str(daemons.socket)) as c:
            return {h["name"] for h in c.request("list")["harnesses"]} == {"chg", "new"}
    return pids, slow, chg, begun


def _records(world: World, *names: str) -> list[tuple[str, int, str, str, str | None]]:
    return [(n, r["run_id"], r["trigger"], r["outcome"], r.get("reason"))
            for n in names for r in runs_of(world, n)]


def test_a_reload_whose_client_goes_away_is_still_applied_whole(
        world: World, daemons: Daemons, tmp_path: Path) -> None:
    """A reload removes `slow`, changes resident `chg` and adds resident `new`; its
    client goes away while `slow` is being stopped. The reload used to be cancelled with
    the request there, half-applied and silently: the new config in force (`slow` gone
    from `list`), yet `chg` still on its run of the old config and `new` never started.
    A reload runs to its end now whoever asked for it, as a reload of systemd or nginx
    does once it has begun."""
    pids, slow, chg, begun = _slow_and_changed(daemons, tmp_path)
    with _reloading(daemons, begun) as s:
        # Gone with a reply unread: the daemon reads ECONNRESET on the connection (Linux
        # tells a peer that closes with data unread so), as when a client dies.
        s.sendall(b'{"id": 2, "op": "list"}\n')
        readable, _, _ = select.select([s], [], [], DEADLINE)
        assert readable == [s], "the list reply never came"
    assert alive(slow)  # the client went while the rest was still to do
    until("new's first run", lambda: record_of(world, "new", 1))
    until("chg's run under the new config", lambda: record_of(world, "chg", 2))
    assert _records(world, "slow", "chg", "new") == [
        ("slow", 1, "autostart", "cancelled", "reload"),
        ("chg", 2, "manual", "running", None), ("chg", 1, "autostart", "cancelled", "reload"),
        ("new", 1, "autostart", "running", None)]
    assert not alive(slow) and not alive(chg)
    assert alive(_pid(pids["chg"])) and alive(_pid(pids["new"]))
    assert states_of(world) == {"chg": "running", "new": "running"}
    assert "reload: 1 added, 1 removed, 1 changed, 0 unchanged" in daemons.stderr()


def test_a_shutdown_during_a_reload_lets_it_finish_starting_nothing(
        world: World, daemons: Daemons, tmp_path: Path) -> None:
    """SIGTERM while a reload waits out `slow`'s grace: the reload goes on past the
    shutdown's start, and what it has left to start (chg's run under the new config,
    `new`) is not started, since the shutdown would only stop it; every record closes,
    and the daemon exits 0 with nothing logged as failed."""
    _, slow, chg, begun = _slow_and_changed(daemons, tmp_path)
    proc = daemons.procs[-1]
    with _reloading(daemons, begun):
        assert alive(slow)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, daemons.stderr()
    err = daemons.stderr()
    assert " ERROR " not in err and "Traceback" not in err, err
    assert "reload: 1 added, 1 removed, 1 changed, 0 unchanged" in err
    assert not alive(slow) and not alive(chg)
    assert _records(world, "slow", "chg", "new") == [
        ("slow", 1, "autostart", "cancelled", "reload"),
        ("chg", 1, "autostart", "interrupted", "shutdown")]


TOO_LONG = "must be at most 1000000d (about 2,700 years), got"


def test_an_overflowing_duration_on_reload_names_file_key_and_line(
        world: World, daemons: Daemons, tmp_path: Path) -> None:
    """`timeout = 1e300` once failed the reload as "internal" (an OverflowError); it is a
    bad_config naming each file, key and line, and the last good config stays."""
    pidfile = tmp_path / "w.pid"
    daemons.pidfiles.append(pidfile)
    dropins = daemons.config.parent / "harness.d"
    dropins.mkdir(parents=True)
    daemons.write_config('[server]\nharness_d = "harness.d"\n' + _resident("w", pidfile))
    daemons.start()
    pid = _pid(pidfile)
    daemons.write_config('[server]\nharness_d = "harness.d"\n' + _resident("w", pidfile)
                         + '\n[harness.job]\nkind = "oneshot"\nargv = ["true"]\n'
                         'timeout = 1e300\n\n[ledger]\nretention = inf\n')
    (dropins / "a.toml").write_text('[harness.r]\nargv = ["true"]\nrestart_delay = '
                                    '"1000001d"\n')
    with Client(str(daemons.socket)) as c, pytest.raises(DaemonError) as err:
        c.request("reload")
    assert err.value.code == "bad_config"
    assert str(err.value).splitlines() == [
        f"{daemons.config}:10: harness.job.timeout: {TOO_LONG} 1e+300",
        f"{daemons.config}:13: ledger.retention: must be finite, got inf",
        f"{dropins / 'a.toml'}:3: harness.r.restart_delay: {TOO_LONG} '1000001d'",
    ]
    assert states_of(world) == {"w": "running"}
    os.kill(pid, 0)
    assert "reload failed; the last good config stays in force" in daemons.stderr()
    assert "Traceback" not in daemons.stderr()


def test_an_overflowing_duration_at_boot_is_a_config_error(world: World,
                                                           daemons: Daemons) -> None:
    daemons.write_config('[harness.job]\nkind = "oneshot"\nargv = ["true"]\ntimeout = inf\n')
    proc = daemons.start(wait=False)
    assert proc.wait(timeout=60) == 2
    assert daemons.stderr() == (
        f"{daemons.config}:4: harness.job.timeout: must be finite, got inf\n")


def test_a_refused_reload_quotes_no_secret_to_the_caller_or_the_log(
        world: World, daemons: Daemons) -> None:
    """A token in a value the reload refuses (argv as one command line) reaches neither
    `harness reload` nor the daemon's log: the problem quotes the value scrubbed."""
    token = "sk-ant-api03-" + "A" * 40
    daemons.write_config('[harness.job]\nkind = "oneshot"\nargv = ["true"]\n')
    daemons.start()
    daemons.write_config('[harness.job]\nkind = "oneshot"\nargv = ["true"]\n\n'
                         f'[harness.agent]\nargv = "claude --api-key {token}"\n')
    problem = (f"{daemons.config}:6: harness.agent.argv: must be a non-empty list of "
               "strings, got string 'claude --api-key [REDACTED]'")
    res = world.harness("reload")
    assert (res.returncode, res.stdout, res.stderr) == (
        2, "", f"harness: the daemon refused the new config and keeps its last good one:\n"
               f"{problem}\n")
    log = daemons.stderr()
    assert [line.split(" ", 2)[2] for line in log.splitlines() if " ERROR " in line] == [
        "ERROR harness.daemon: reload failed; the last good config stays in force:",
        f"ERROR harness.daemon: {problem}"]
    assert token not in log and token[:20] not in log
    assert states_of(world) == {"job": "armed"}


def test_a_refused_reload_shows_a_credential_named_key_problem_as_it_is(
        world: World, daemons: Daemons) -> None:
    """A problem with a key named `secret` reads as the loader wrote it: its values were
    scrubbed there, and a second, whole-line scrub by the socket would take "must" for
    the secret."""
    daemons.write_config('[harness.job]\nkind = "oneshot"\nargv = ["true"]\n')
    daemons.start()
    daemons.write_config('[harness.job]\nkind = "oneshot"\nargv = ["true"]\n\n'
                         '[webhook.w]\nverify = "bearer"\nsecret = ""\n')
    res = world.harness("reload")
    assert (res.returncode, res.stdout, res.stderr) == (
        2, "", f"harness: the daemon refused the new config and keeps its last good one:\n"
               f"{daemons.config}:7: webhook.w.secret: must not be empty\n")
    # The daemon's own log line too: its handler's scrub passes a problem as it is.
    assert [line.split(" ", 2)[2] for line in daemons.stderr().splitlines()
            if " ERROR " in line][-1] == (
        f"ERROR harness.daemon: {daemons.config}:7: webhook.w.secret: must not be empty")


# -- a config that is there but cannot be reached is an error, never "no config" ----------

NODAC = ["capsh", "--drop=cap_dac_override,cap_dac_read_search", "--"]


def _boot_fails(world: World, env: dict[str, str] | None = None, *,
                nodac: bool = False) -> tuple[int, str, str]:
    """`harness daemon` in this world, which must exit on its own; (rc, stdout, stderr).
    `nodac`: as root, without the capabilities that read past a mode (root reads a 0000
    directory anyway)."""
    cmd = [sys.executable, "-m", "harness.cli", "daemon"]
    if nodac and os.geteuid() == 0:
        if shutil.which("capsh") is None:
            pytest.skip("running as root, and no capsh to drop the permission bypass")
        cmd = [*NODAC, "-c", shlex.join(cmd)]
    res = subprocess.run(cmd, env=env or world.env, capture_output=True, text=True,
                         timeout=60)
    return res.returncode, res.stdout, res.stderr


def test_a_dangling_config_symlink_is_refused_on_reload_and_at_boot(
        world: World, daemons: Daemons, tmp_path: Path) -> None:
    """A harness.toml kept among dotfiles, whose target went away, read as "no config":
    `harness reload` said ok and stopped every harness, and a boot started none."""
    pidfile = tmp_path / "w.pid"
    daemons.pidfiles.append(pidfile)
    real = tmp_path / "dotfiles" / "harness.toml"
    real.parent.mkdir()
    real.write_text(_resident("w", pidfile) + '[harness.job]\nargv = ["true"]\n'
                    'schedule = "@daily"\n')
    daemons.config.parent.mkdir(parents=True)
    daemons.config.symlink_to(real)
    daemons.start()
    pid = _pid(pidfile)
    real.rename(real.with_suffix(".moved"))
    problem = (f"{daemons.config}: cannot read: No such file or directory (a symlink to "
               f"{real}, which is not there)")
    res = world.harness("reload")
    assert (res.returncode, res.stdout, res.stderr) == (
        2, "", f"harness: the daemon refused the new config and keeps its last good one:\n"
               f"{problem}\n")
    assert states_of(world) == {"job": "armed", "w": "running"}
    os.kill(pid, 0)
    assert _errors(daemons.stderr()) == [
        "ERROR harness.daemon: reload failed; the last good config stays in force:",
        f"ERROR harness.daemon: {problem}"]
    daemons.kill_all()
    assert _boot_fails(world) == (2, "", f"{problem}\n")


def test_a_config_behind_a_file_or_a_closed_directory_fails_the_boot(
        world: World, tmp_path: Path) -> None:
    """XDG_CONFIG_HOME naming a file (ENOTDIR) and a config directory of mode 0000 (EACCES)
    booted a daemon with no harnesses."""
    (tmp_path / "afile").write_text("")
    env = {**world.env, "XDG_CONFIG_HOME": str(tmp_path / "afile")}
    assert _boot_fails(world, env) == (
        2, "", f"{tmp_path / 'afile' / 'harness' / 'harness.toml'}: cannot read: Not a "
               "directory\n")
    cfg_dir = tmp_path / "config" / "harness"
    cfg_dir.mkdir(parents=True)
    (cfg_dir / "harness.toml").write_text('[harness.w]\nargv = ["sleep", "600"]\n')
    cfg_dir.chmod(0)
    try:
        assert _boot_fails(world, nodac=True) == (
            2, "", f"{cfg_dir / 'harness.toml'}: cannot read: Permission denied\n")
    finally:
        cfg_dir.chmod(0o700)


@pytest.mark.parametrize("what", ["dangling", "directory", "fifo"])
def test_a_dropin_that_cannot_be_read_is_refused_not_skipped(
        world: World, daemons: Daemons, tmp_path: Path, what: str) -> None:
    """A *.toml in harness_d that was not a regular file was skipped: a drop-in symlink
    whose target went away made a reload stop its harnesses; a FIFO hung the load."""
    pidfile = tmp_path / "d.pid"
    daemons.pidfiles.append(pidfile)
    dropins = tmp_path / "dd"
    dropins.mkdir()
    target = tmp_path / "d.toml"
    target.write_text(_resident("d", pidfile))
    drop = dropins / "d.toml"
    drop.symlink_to(target)
    daemons.write_config(f'[server]\nharness_d = "{dropins}"\n')
    daemons.start()
    pid = _pid(pidfile)
    if what == "dangling":
        target.unlink()
        why = f"cannot read: No such file or directory (a symlink to {target}, which is not there)"
    elif what == "directory":
        drop.unlink()
        drop.mkdir()
        why = "cannot read: it is a directory, not a regular file"
    else:
        drop.unlink()
        os.mkfifo(drop)
        why = "cannot read: it is a FIFO, not a regular file"
    res = world.harness("reload")
    assert (res.returncode, res.stdout, res.stderr) == (
        2, "", f"harness: the daemon refused the new config and keeps its last good one:\n"
               f"{drop}: {why}\n")
    assert states_of(world) == {"d": "running"}
    os.kill(pid, 0)
    daemons.kill_all()
    assert _boot_fails(world) == (2, "", f"{drop}: {why}\n")


def test_a_nul_in_a_command_line_or_path_is_a_config_error(world: World,
                                                            daemons: Daemons) -> None:
    """TOML's "\\u0000" passed validation; every spawn then raised ValueError ("embedded
    null byte"), uncaught: a traceback in the log and the record left running."""
    daemons.write_config(textwrap.dedent('''
        [server]
        harness_d = "/etc/harness\\u0000.d"
        [harness.arg]
        argv = ["true", "a\\u0000b"]
        schedule = "@daily"
        [harness.wd]
        argv = ["true"]
        workdir = "/tm\\u0000p"
        [harness.env]
        argv = ["true"]
        env_file = ["/dev/null", "/tm\\u0000p/x"]
        [channel.c]
        url = "https://c.example"
        env_file = "/tm\\u0000p/c.env"
    ''').lstrip("\n"))
    proc = daemons.start(wait=False)
    assert proc.wait(timeout=60) == 2
    cfg = daemons.config
    assert daemons.stderr() == (
        f"{cfg}:2: server.harness_d: '/etc/harness\\x00.d' holds a NUL character, which no "
        "path can carry\n"
        f"{cfg}:4: harness.arg.argv: 'a\\x00b' holds a NUL character, which no command line "
        "can carry\n"
        f"{cfg}:8: harness.wd.workdir: '/tm\\x00p' holds a NUL character, which no path can "
        "carry\n"
        f"{cfg}:11: harness.env.env_file: '/tm\\x00p/x' holds a NUL character, which no path "
        "can carry\n"
        f"{cfg}:14: channel.c.env_file: '/tm\\x00p/c.env' holds a NUL character, which no "
        "path can carry\n")


def test_empty_strings_that_cannot_work_are_config_errors(world: World,
                                                          daemons: Daemons) -> None:
    """`workdir = ""` was accepted and every run failed "spawn failed: : No such file or
    directory"; `model_pin = ""` matched no model; `env_file = ""` named no file."""
    daemons.write_config(textwrap.dedent('''
        [server]
        harness_d = ""
        [harness.a]
        argv = ["true", ""]
        workdir = ""
        schedule = "@daily"
        [harness.b]
        argv = ["true"]
        model_pin = ""
        env_file = ""
        [harness.c]
        argv = ["true"]
        env_file = ["/dev/null", ""]
        [webhook.w]
        secret = "s"
        signature_header = ""
        delivery_header = ""
    ''').lstrip("\n"))
    proc = daemons.start(wait=False)
    assert proc.wait(timeout=60) == 2
    cfg = daemons.config
    assert daemons.stderr() == (
        f"{cfg}:2: server.harness_d: must not be empty\n"
        f"{cfg}:5: harness.a.workdir: must not be empty\n"
        f"{cfg}:9: harness.b.model_pin: must not be empty\n"
        f"{cfg}:10: harness.b.env_file: must not be empty\n"
        f"{cfg}:13: harness.c.env_file: must not hold an empty path, got ['/dev/null', '']\n"
        f"{cfg}:16: webhook.w.signature_header: must not be empty\n"
        f"{cfg}:17: webhook.w.delivery_header: must not be empty\n")


def _errors(log: str) -> list[str]:
    """The daemon log's lines other than INFO, each without its time."""
    return [line.split(" ", 2)[2] for line in log.splitlines() if " INFO " not in line]


# A key with a newline, an escape sequence and a BEL in its name; in a file whose name
# holds the same. Each problem is one line, its controls spelled out.
_EVIL_KEY = '"bo\\n\\u001b]0;T\\u0007gus" = 1\n'
_EVIL_FILE = "e\x1b[2J\nERROR x.toml"


def test_a_config_problem_at_boot_is_one_line_with_its_controls_spelled_out(
        world: World, daemons: Daemons) -> None:
    """A key or a drop-in's name with a newline once forged a second problem line, and an
    escape sequence in one reached the terminal raw through `harness daemon`'s stderr."""
    dropins = daemons.config.parent / "harness.d"
    dropins.mkdir(parents=True)
    (dropins / _EVIL_FILE).write_text('[harness.b]\nargv = ["true"]\nbad = 1\n')
    daemons.write_config('[server]\nharness_d = "harness.d"\n[harness.a]\nargv = ["true"]\n'
                         + _EVIL_KEY)
    proc = daemons.start(wait=False)
    assert proc.wait(timeout=60) == 2
    assert daemons.stderr() == (
        f"{daemons.config}:5: harness.a.bo\\n\\x1b]0;T\\x07gus: unknown key\n"
        f"{dropins}/e\\x1b[2J\\nERROR x.toml:3: harness.b.bad: unknown key\n")


def test_a_refused_reload_logs_each_problem_on_one_line(world: World,
                                                        daemons: Daemons) -> None:
    """The daemon's log of a refused reload spells out the controls in a key's name, as
    `harness reload` does: a newline in it cannot start a log line of its own."""
    daemons.write_config('[harness.a]\nkind = "oneshot"\nargv = ["true"]\n')
    daemons.start()
    daemons.write_config('[harness.a]\nkind = "oneshot"\nargv = ["true"]\n' + _EVIL_KEY)
    problem = f"{daemons.config}:4: harness.a.bo\\n\\x1b]0;T\\x07gus: unknown key"
    res = world.harness("reload")
    assert (res.returncode, res.stdout, res.stderr) == (
        2, "", f"harness: the daemon refused the new config and keeps its last good one:\n"
               f"{problem}\n")
    assert _errors(daemons.stderr()) == [
        "ERROR harness.daemon: reload failed; the last good config stays in force:",
        f"ERROR harness.daemon: {problem}"]
