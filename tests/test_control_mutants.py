"""Mutation-test survivors of the control socket (`harness.control`: the server, the client
and the ops served from the ledger): a hello too long for the line limit, answered
``too_large`` like any other request; a client silent through the hello timeout, or gone
before its hello, dropped without an error logged; the replies owed to a client that
half-closed, every byte of them delivered before the connection ends; a second `close`, a
no-op as the daemon's shutdown needs it; a start refused over the lock, and a client
whose hello no daemon takes, each leaving no descriptor behind; the `runs` op's default
page of 50 and its smallest of 1; each op that may wait out a stop grace, waited for past
the client's timeout; the `logs` op's "pruned" for a run the daemon's memory has let go;
a listing reply without its key, an empty listing; a daemon that closes the connection
mid-request, reported by the CLI as lost in one line. Real servers on real Unix sockets
in tmp dirs, spoken to with the real client, the real CLI or a bare socket."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

import test_control_server
from daemons import until
from harness.config.model import Config
from harness.control.client import Client, DaemonError, DaemonUnreachable
from harness.control.ops import logs_op, runs_op
from harness.control.server import MAX_LINE, ControlServer, SocketInUse
from harness.timefmt import format_ns
from ledgertools import DAY, HOUR, T0, Clock, OpenLedger, open_fds
from test_control_server import HANDLERS, LoopThread, Raw, Serve, _send_quietly

# The fixtures of the server's own tests, under the names tests ask for.
loop = test_control_server.loop
serve = test_control_server.serve
sockdir = test_control_server.sockdir


def test_an_oversized_hello_is_answered_too_large_then_closed(
        serve: Serve, sockdir: Path) -> None:
    serve(HANDLERS)
    raw = Raw(sockdir / "harness.sock")
    line = b'{"op": "hello", "proto": "1.0", "pad": "' + b"p" * MAX_LINE + b'"}\n'
    threading.Thread(target=_send_quietly, args=(raw.sock, line), daemon=True).start()
    reply = raw.recv()
    assert reply == {"id": None, "ok": False, "error": {
        "code": "too_large",
        "message": f"a request line may be at most {MAX_LINE} bytes; closing"}}
    assert raw.at_eof()
    raw.close()


def test_a_client_silent_or_gone_before_its_hello_is_dropped_without_an_error(
        serve: Serve, sockdir: Path, caplog: pytest.LogCaptureFixture) -> None:
    serve(HANDLERS, hello_timeout=0.2)
    with caplog.at_level(logging.DEBUG, logger="harness.control"):
        raw = Raw(sockdir / "harness.sock")
        assert raw.at_eof()  # a failure would be logged before this close
        raw.close()
        # A probe (a second daemon's look at the socket) connects and hangs up at once.
        probe = Raw(sockdir / "harness.sock")
        probe.sock.shutdown(socket.SHUT_WR)
        assert probe.at_eof()
        probe.close()
        client = Client(str(sockdir / "harness.sock"))
        assert client.request("echo", x=1) == {"x": 1}
        client.close()
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


async def big(req: dict[str, Any]) -> Any:
    return {"i": req["id"], "pad": "x" * 256 * 1024}


def test_replies_owed_to_a_half_closed_client_arrive_whole(
        serve: Serve, sockdir: Path) -> None:
    """A client that half-closes after its requests and reads slowly still gets every
    reply in full: the end of the connection waits for them to be flushed, not only
    handed to the transport."""
    n = 3
    serve({"big": big})
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(30)
    sock.connect(str(sockdir / "harness.sock"))
    sock.sendall(b'{"op": "hello", "proto": "1.0"}\n' + b"".join(
        json.dumps({"id": i, "op": "big"}).encode() + b"\n" for i in range(1, n + 1)))
    sock.shutdown(socket.SHUT_WR)
    data = bytearray()
    pause = threading.Event()
    while chunk := sock.recv(4096):
        data += chunk
        pause.wait(0.0005)  # a slow reader: the server's writes outrun it
    sock.close()
    lines = data.split(b"\n")
    assert lines[-1] == b""  # the last reply ended with its newline
    assert json.loads(lines[0])["ok"] is True
    replies = [json.loads(line) for line in lines[1:-1]]
    assert sorted(r["data"]["i"] for r in replies) == list(range(1, n + 1))
    assert all(len(r["data"]["pad"]) == 256 * 1024 for r in replies)


def test_close_twice_is_a_no_op(loop: LoopThread, sockdir: Path) -> None:
    """The daemon closes its server on the way down and again in its last `finally`."""
    path = sockdir / "harness.sock"
    srv = ControlServer(str(path), HANDLERS)
    loop.run(srv.start())
    loop.run(srv.close())
    loop.run(srv.close())
    assert not path.exists()
    never = ControlServer(str(sockdir / "never.sock"), HANDLERS)
    loop.run(never.close())  # never started: nothing to close
    assert not (sockdir / "never.sock").exists()


def test_a_start_refused_over_the_lock_leaves_no_descriptor_open(
        serve: Serve, loop: LoopThread, sockdir: Path) -> None:
    serve(HANDLERS)
    second = ControlServer(str(sockdir / "harness.sock"), HANDLERS)
    before = open_fds()
    for _ in range(5):
        with pytest.raises(SocketInUse, match="another harness daemon owns"):
            loop.run(second.start())
    assert open_fds() - before == set()


def test_runs_answers_50_by_default_and_as_few_as_1(
        serve: Serve, sockdir: Path, open_ledger: OpenLedger, tmp_path: Path) -> None:
    clock = Clock(T0)
    led = open_ledger(tmp_path / "ledger", clock=clock)
    for i in range(1, 61):
        clock.ns += 1_000_000_000
        led.append({"type": "decided", "harness": "a", "run_id": i, "trigger": "schedule",
                    "outcome": "missed"})
    serve({"runs": runs_op(led)})
    client = Client(str(sockdir / "harness.sock"))
    data = client.request("runs")
    assert [r["run_id"] for r in data["runs"]] == list(range(60, 10, -1))
    data = client.request("runs", names=["a"], limit=1)
    assert [r["run_id"] for r in data["runs"]] == [60]
    assert data["oldest_seq"] == data["runs"][0]["seq"]
    client.close()



def test_every_op_that_may_wait_out_a_grace_is_waited_for(
        serve: Serve, sockdir: Path) -> None:
    """start, stop, restart, reload and trigger may each wait out a run's SIGTERM grace:
    a reply later than the client's timeout is still the answer while the daemon keeps
    answering a fresh hello. (An op with no reason to be slow times out: see
    test_cli_daemon.)"""
    timeout, silence = 2.0, 5.0
    patient = ("start", "stop", "restart", "reload", "trigger")

    async def slow(req: dict[str, Any]) -> Any:
        await asyncio.sleep(silence)
        return {"op": req["op"]}

    serve(dict.fromkeys(patient, slow))
    got: dict[str, Any] = {}

    def ask(op: str) -> None:
        try:
            with Client(str(sockdir / "harness.sock"), timeout=timeout) as client:
                got[op] = client.request(op, name="x")
        except Exception as exc:
            got[op] = repr(exc)

    threads = [threading.Thread(target=ask, args=(op,)) for op in patient]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert got == {op: {"op": op} for op in patient}


def test_logs_says_pruned_for_a_run_memory_no_longer_holds(
        serve: Serve, sockdir: Path, open_ledger: OpenLedger, tmp_path: Path) -> None:
    """A pruned log is usually an old run's, one the daemon's memory has let go: its
    record is looked up in the day files, so the answer is "pruned", not "no run"."""
    state = tmp_path / "state"
    jobs = state / "jobs"
    clock = Clock(T0 - 30 * DAY)
    led = open_ledger(state / "ledger", clock=clock)
    for i in range(1, 26):
        clock.ns += HOUR
        led.append({"type": "opened", "harness": "job", "run_id": i, "kind": "oneshot",
                    "trigger": "manual", "started_at": format_ns(clock.ns),
                    "log": str(jobs / "job" / f"{i}.log")})
        led.append({"type": "closed", "harness": "job", "run_id": i, "outcome": "success",
                    "exit_code": 0, "ended_at": format_ns(clock.ns)})
    led.close(timeout=10.0)
    (jobs / "job").mkdir(parents=True, mode=0o700)
    for i in (24, 25):
        (jobs / "job" / f"{i}.log").write_text(f"run {i}\n")
    clock.ns = T0
    led = open_ledger(state / "ledger", clock=clock)
    assert led.get("job", 1) is None  # past the window and the tail: not in memory
    cfg = Config.model_validate(
        {"harness": {"job": {"kind": "oneshot", "argv": ["true"], "keep_runs": 2}}})
    serve({"logs": logs_op(lambda: cfg, led, str(jobs))})
    with Client(str(sockdir / "harness.sock")) as client:
        with pytest.raises(DaemonError) as err:
            client.request("logs", name="job", run=1)
        assert (err.value.code, str(err.value)) == (
            "pruned", "job run 1's log was pruned (keep_runs = 2; the oldest log kept is "
                      "run 24's)")
        with pytest.raises(DaemonError) as err:
            client.request("logs", name="job", run=26)
        assert (err.value.code, str(err.value)) == ("not_found", "job has no run 26")


def _one_reply_server(path: Path, reply: bytes | None) -> socket.socket:
    """A socket that answers each connection's first line with `reply` (None: listens
    but never accepts, so a hello goes unanswered)."""
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(str(path))
    srv.listen(16)

    def serve_all() -> None:
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return  # closed by the test
            with conn:
                conn.recv(4096)
                conn.sendall(reply or b"")

    if reply is not None:
        threading.Thread(target=serve_all, daemon=True).start()
    return srv


@pytest.mark.parametrize(("reply", "why"), [
    (None, "not responding"),
    (b'{"ok": false, "error": {"code": "unsupported_proto", "message": "no"}}\n',
     "not responding (protocol mismatch)"),
], ids=["silent", "refused"])
def test_a_daemon_that_does_not_take_the_hello_leaves_no_descriptor_open(
        sockdir: Path, reply: bytes | None, why: str) -> None:
    """A client waiting for a daemon to come up asks again and again: each refusal must
    leave nothing open behind it."""
    path = sockdir / "harness.sock"
    srv = _one_reply_server(path, reply)
    try:
        before = open_fds()
        for _ in range(5):
            with pytest.raises(DaemonUnreachable) as err:
                Client(str(path), timeout=0.5)
            assert (err.value.why, err.value.absent) == (why, False)
        # The server's thread closes its side of each connection in its own time.
        until("the refused connections' descriptors to close",
              lambda: open_fds() <= before, 30.0)
    finally:
        srv.close()


def test_a_listing_reply_without_its_key_is_an_empty_listing(
        serve: Serve, sockdir: Path, tmp_path: Path) -> None:
    """`harness list --json` always prints a JSON array: a reply holding no
    `harnesses` (an older daemon's) is none, not `null`."""

    async def bare(req: dict[str, Any]) -> Any:
        return {}

    serve({"list": bare})
    env = dict(os.environ, HARNESS_SOCKET=str(sockdir / "harness.sock"),
               XDG_STATE_HOME=str(tmp_path / "state"), HOME=str(tmp_path / "home"))
    res = subprocess.run([sys.executable, "-m", "harness.cli", "list", "--json"], env=env,
                         capture_output=True, text=True, timeout=120, check=False)
    assert (res.returncode, res.stdout, res.stderr) == (0, "[]\n", "")


def test_the_cli_says_the_daemon_closed_the_connection_mid_request(
        sockdir: Path, tmp_path: Path) -> None:
    """A daemon that dies while it holds a request (the connection ends with no reply; one
    that shuts down answers ``shutting_down`` instead): the command says how the daemon
    was lost, on one line, and exits 1."""
    path = sockdir / "harness.sock"
    env = dict(os.environ, HARNESS_SOCKET=str(path), XDG_STATE_HOME=str(tmp_path / "state"),
               HOME=str(tmp_path / "home"))
    with test_control_server.dying_daemon(path) as got:
        res = subprocess.run([sys.executable, "-m", "harness.cli", "list"], env=env,
                             capture_output=True, text=True, timeout=60, check=False)
    assert [json.loads(line)["op"] for line in got] == ["list"]
    assert (res.returncode, res.stdout, res.stderr) == (
        1, "", "harness: lost the daemon (connection closed)\n")
