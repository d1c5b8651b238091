"""`harness runs` when a daemon answers on the control socket (REQ-15/16, DESIGN.md §2).

A real Unix socket served by a thread speaking the protocol stands in for the daemon
(the daemon itself is built on this engine separately): the CLI must do the hello
exchange, send SPEC-0008's `{name, limit}` for a single NAME and the query form
otherwise, print what the daemon answered (open records read `running`, not
`running?`), and neither warn nor touch the ledger files.

A scripted daemon, on the same kind of socket, stands in where the real one could not be
made to misbehave on cue: an op that may wait out a stop grace is waited for as long as
the daemon answers a fresh hello and given up on within two timeouts once it does not
(other ops keep their plain timeout), and `trigger --wait` pages back by seq to its run
under thousands of newer records.
"""

from __future__ import annotations

import contextlib
import json
import os
import pty
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conftest import World
from daemons import interruptible, reaped
from harness.control.client import Client, DaemonLost


class FakeDaemon:
    """Accepts connections, answers hello, records each request, replies with `runs`
    (or with `raw`, a reply of any shape, as a daemon of another make might; bytes are
    sent as the reply's line as they are, and `hello`, bytes too, answers hello so)."""

    def __init__(self, path: str, runs: list[dict[str, Any]], raw: Any = None,
                 hello: bytes | None = None) -> None:
        self.requests: list[dict[str, Any]] = []
        self.runs = runs
        self.raw = raw
        self.hello = hello
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(path)
        os.chmod(path, 0o600)
        self.sock.listen()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            # A client that gave up on an odd reply is gone when the next is written.
            with contextlib.suppress(OSError), conn, conn.makefile("rwb") as f:
                for line in f:
                    msg = json.loads(line)
                    if msg.get("op") == "hello":
                        reply: Any = {"ok": True, "proto": "1.0"} if self.hello is None \
                            else self.hello
                    elif self.raw is not None:
                        self.requests.append(msg)
                        reply = self.raw
                    else:
                        self.requests.append(msg)
                        reply = {"id": msg["id"], "ok": True,
                                 "data": {"runs": self.runs,
                                          "oldest_seq": self.runs[-1]["seq"] if self.runs
                                          else None}}
                    f.write((reply if isinstance(reply, bytes)
                             else json.dumps(reply).encode()) + b"\n")
                    f.flush()

    def close(self) -> None:
        self.sock.close()


RUNS = [
    {"harness": "nightly", "run_id": 5, "seq": 9, "kind": "oneshot", "trigger": "schedule",
     "started_at": "2026-11-03T09:05:00.000000000Z", "outcome": "running"},
    {"harness": "nightly", "run_id": 4, "seq": 7, "kind": "oneshot", "trigger": "manual",
     "started_at": "2026-11-03T08:00:00.000000000Z", "ended_at": "2026-11-03T08:01:30.000000000Z",
     "duration_ms": 90000, "outcome": "failed", "exit_code": 2},
]


def test_a_single_name_asks_the_daemon_the_spec_0008_way(world: World) -> None:
    daemon = FakeDaemon(str(world.root / "run" / "harness.sock"), RUNS)
    try:
        res = world.harness("runs", "nightly", "--limit", "5", "--json")
    finally:
        daemon.close()
    assert res.returncode == 0, res.stderr
    assert res.stderr == ""  # no "read the ledger from disk" warning
    assert json.loads(res.stdout) == RUNS
    assert daemon.requests == [{"id": 1, "op": "runs", "name": "nightly", "limit": 5}]
    assert not world.ledger.exists()  # the CLI never opened the files


def test_a_query_is_sent_whole_and_open_runs_read_running(world: World) -> None:
    daemon = FakeDaemon(str(world.root / "run" / "harness.sock"), RUNS)
    try:
        res = world.harness("runs", "--harness", "nightly", "--since",
                            "2026-11-01T00:00:00Z", "--until", "2026-11-04T00:00:00Z",
                            "--outcome", "failed,running", "--trigger", "manual",
                            "--trigger", "schedule", "--limit", "7")
    finally:
        daemon.close()
    assert res.returncode == 0, res.stderr
    assert res.stderr == ""
    assert daemon.requests == [{
        "id": 1, "op": "runs", "names": ["nightly"], "limit": 7,
        "since": "2026-11-01T00:00:00.000000000Z", "until": "2026-11-04T00:00:00.000000000Z",
        "outcomes": ["failed", "running"], "triggers": ["manual", "schedule"]}]
    assert res.stdout.splitlines() == [
        "HARNESS  RUN  STARTED       TOOK     TRIGGER   OUTCOME  EXIT",
        "nightly    5  Nov  3 09:05  running  schedule  running  —",
        "nightly    4  Nov  3 08:00  1m30s    manual    failed   2",
    ]


def test_a_daemon_error_falls_back_to_the_files(world: World, tmp_path: Path) -> None:
    """A daemon that answers hello but fails the request: the CLI says so and reads disk."""
    path = str(world.root / "run" / "harness.sock")
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen()

    def serve() -> None:
        conn, _ = srv.accept()
        with conn, conn.makefile("rwb") as f:
            f.readline()
            f.write(b'{"ok": true}\n')
            f.flush()
            req = json.loads(f.readline())
            f.write(json.dumps({"id": req["id"], "ok": False, "error": {
                "code": "internal", "message": "index unavailable"}}).encode() + b"\n")
            f.flush()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        res = world.harness("runs", "--json")
    finally:
        t.join(timeout=30)
        srv.close()
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout) == []
    assert res.stderr.startswith("harness: daemon failed (index unavailable); read the ledger "
                                 "from disk")


# -- ops that take long, and daemons that stop answering ----------------------------------


Answer = Callable[[dict[str, Any]], "tuple[float, Any] | None"]


class Refusal:
    """What a `ScriptedDaemon` answers as an error, not as data."""

    def __init__(self, code: str, message: str) -> None:
        self.error = {"code": code, "message": message}


class ScriptedDaemon:
    """Answers hello on every connection until `wedge`d, and each request with
    `answer(msg)`: (delay, data) to reply with data after delay seconds (a `Refusal`:
    with that error), None never to reply. A wedged daemon accepts connections but
    answers nothing, like a stopped one."""

    def __init__(self, path: str, answer: Answer) -> None:
        self.answer = answer
        self.hellos = 0
        self.requests: list[dict[str, Any]] = []
        self.wedged = threading.Event()
        self.closed = threading.Event()
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(path)
        self.sock.listen()
        threading.Thread(target=self._accept, daemon=True).start()

    def wedge(self) -> None:
        self.wedged.set()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        # A client that gave up is gone when a late reply is written: nothing to report.
        with contextlib.suppress(OSError), conn, conn.makefile("rwb") as f:
            for line in f:
                msg = json.loads(line)
                if msg.get("op") == "hello":
                    if self.wedged.is_set():
                        self.closed.wait()
                        return
                    self.hellos += 1
                    reply: dict[str, Any] = {"ok": True, "proto": "1.0"}
                else:
                    self.requests.append(msg)
                    got = self.answer(msg)
                    if got is None:
                        self.closed.wait()
                        return
                    delay, data = got
                    if self.closed.wait(delay):
                        return
                    reply = ({"id": msg["id"], "ok": False, "error": data.error}
                             if isinstance(data, Refusal) else
                             {"id": msg["id"], "ok": True, "data": data})
                f.write(json.dumps(reply).encode() + b"\n")
                f.flush()

    def close(self) -> None:
        self.closed.set()
        self.sock.close()


# Short enough to keep these tests quick, long enough for a loaded machine to answer hello.
TIMEOUT = 3.0
STOPPED = {"name": "stub", "kind": "resident", "action": "stopped", "run_id": 1,
           "outcome": "cancelled", "reason": "operator"}


def test_an_op_that_waits_out_a_grace_is_waited_for_while_the_daemon_answers(
        tmp_path: Path) -> None:
    daemon = ScriptedDaemon(str(tmp_path / "d.sock"), lambda m: (7.0, STOPPED))
    try:
        client = Client(str(tmp_path / "d.sock"), timeout=TIMEOUT)
        t0 = time.monotonic()
        try:
            assert client.request("stop", name="stub") == STOPPED
        finally:
            client.close()
    finally:
        daemon.close()
    assert time.monotonic() - t0 >= 7.0
    assert daemon.hellos >= 2  # its own, and at least one probe while it waited


def test_an_op_that_cannot_take_long_still_times_out(tmp_path: Path) -> None:
    daemon = ScriptedDaemon(str(tmp_path / "d.sock"),
                            lambda m: (30.0, {"harnesses": []}))
    try:
        client = Client(str(tmp_path / "d.sock"), timeout=TIMEOUT)
        try:
            with pytest.raises(DaemonLost, match=r"^timed out$"):
                client.request("list")
        finally:
            client.close()
    finally:
        daemon.close()
    assert daemon.hellos == 1  # no probe: a list has no reason to be slow


def test_a_wedged_daemon_ends_a_long_op_within_two_timeouts(tmp_path: Path) -> None:
    def answer(msg: dict[str, Any]) -> None:
        daemon.wedge()  # it took the stop, then stopped answering anything

    daemon = ScriptedDaemon(str(tmp_path / "d.sock"), answer)
    try:
        client = Client(str(tmp_path / "d.sock"), timeout=TIMEOUT)
        t0 = time.monotonic()
        try:
            with pytest.raises(DaemonLost, match=r"^timed out, and the daemon no longer "
                                                   r"answers a new connection$"):
                client.request("stop", name="stub")
        finally:
            client.close()
    finally:
        daemon.close()
    assert 2 * TIMEOUT <= time.monotonic() - t0 < 30
    assert daemon.hellos == 1


@pytest.mark.parametrize("op", ["stop", "start", "restart", "trigger"])
def test_the_cli_reports_a_daemon_lost_during_a_change(world: World, op: str) -> None:
    """A daemon lost after it was sent a stop or a trigger may have carried it out: the
    user is told where to look before asking again (a second trigger is a second run)."""
    def answer(msg: dict[str, Any]) -> None:
        daemon.wedge()

    daemon = ScriptedDaemon(str(world.root / "run" / "harness.sock"), answer)
    try:
        res = world.harness(op, "stub")
    finally:
        daemon.close()
    assert (res.returncode, res.stdout, res.stderr) == (
        1, "", "harness: lost the daemon (timed out, and the daemon no longer answers a new "
               "connection); it may have taken the request: `harness list` and "
               "`harness runs stub` show what it did\n")
    assert [(r["op"], r["name"]) for r in daemon.requests] == [(op, "stub")]


def test_a_daemon_lost_during_a_listing_needs_no_advice(world: World) -> None:
    def answer(msg: dict[str, Any]) -> None:
        daemon.wedge()

    daemon = ScriptedDaemon(str(world.root / "run" / "harness.sock"), answer)
    try:
        res = world.harness("list")
    finally:
        daemon.close()
    assert (res.returncode, res.stdout, res.stderr) == (
        1, "", "harness: lost the daemon (timed out)\n")
    assert [r["op"] for r in daemon.requests] == ["list"]


def waited_on(world: World, name: str, answer: Any
              ) -> tuple[ScriptedDaemon, tuple[int, str, str]]:
    """`harness trigger NAME --wait` against a scripted daemon answering with `answer`:
    the daemon (its requests) and the CLI's (exit code, stdout, stderr)."""
    daemon = ScriptedDaemon(str(world.root / "run" / "harness.sock"), answer)
    try:
        with reaped(subprocess.Popen([sys.executable, "-m", "harness.cli", "trigger", name,
                                      "--wait"], env=world.env, text=True,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)) as proc:
            out, err = proc.communicate(timeout=60)
    finally:
        daemon.close()
    return daemon, (proc.returncode, out, err)


@pytest.mark.parametrize("args", [("jobs",), ("stop", "job")])
def test_only_a_daemon_that_is_not_there_is_to_be_started(world: World,
                                                           args: tuple[str, ...]) -> None:
    """Nothing at the socket, or a socket no process holds (a crashed daemon's): start
    one. A socket something holds but that never answers (a daemon stopped with SIGSTOP,
    or stuck) is no case for a second daemon, which would refuse to start: no such hint."""
    path = world.root / "run" / "harness.sock"
    start = "; start it with `harness daemon`\n"
    res = world.harness(*args)
    assert (res.returncode, res.stdout, res.stderr) == (
        1, "", f"harness: daemon not running ({path}){start}")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.bind(str(path))
        res = world.harness(*args)  # bound, not listening: what a crash leaves
        assert (res.returncode, res.stderr) == (
            1, f"harness: daemon not running ({path}){start}")
        sock.listen(4)  # connections queue in the backlog; nobody ever replies
        res = world.harness(*args)
    assert (res.returncode, res.stdout, res.stderr) == (
        1, "", f"harness: daemon not responding ({path})\n")


@pytest.mark.parametrize("args", [("jobs",), ("stop", "job"), ("trigger", "job"),
                                  ("reload",)])
def test_a_socket_path_holding_a_token_is_scrubbed(world: World,
                                                    args: tuple[str, ...]) -> None:
    """--socket names a directory after a credential: every command's advice names the
    socket with the credential scrubbed. `up`/`down` did; the others printed it whole.
    (A directory that is not there: a socket path has room for 107 bytes only.)"""
    token = "sk-ant-api03-" + "Q" * 40
    res = world.harness("--socket", f"/nonexistent/{token}/harness.sock", *args)
    assert (res.returncode, res.stdout) == (1, "")
    assert res.stderr == ("harness: daemon not running (/nonexistent/[REDACTED]/harness.sock)"
                          "; start it with `harness daemon`\n")


def test_trigger_wait_pages_back_to_its_run_under_thousands_of_newer_records(
        world: World) -> None:
    # Run 40 (seq 100) is the one triggered; 2,500 firings skipped while it ran came after.
    records: list[dict[str, Any]] = [
        {"harness": "gate", "run_id": n, "seq": 100 + n - 40, "kind": "oneshot",
         "trigger": "schedule", "outcome": "skipped", "reason": "overlap"}
        for n in range(41, 2541)]
    records.append({"harness": "gate", "run_id": 40, "seq": 100, "kind": "oneshot",
                    "trigger": "manual", "outcome": "failed", "exit_code": 4})
    records += [{"harness": "gate", "run_id": n, "seq": 50 + n, "kind": "oneshot",
                 "trigger": "manual", "outcome": "success", "exit_code": 0}
                for n in range(39, 0, -1)]
    records.sort(key=lambda r: r["seq"], reverse=True)  # as the daemon answers: newest first

    def answer(msg: dict[str, Any]) -> tuple[float, Any]:
        op = msg["op"]
        if op == "daemon_info":
            return 0.0, {"pid": 1, "ledger": {"next_seq": 100}}
        if op == "trigger":
            return 0.0, {"decision": "started", "run_id": 40}
        assert op == "runs"
        if "name" in msg:  # SPEC-0008's form: the newest only
            hits = records[: msg.get("limit", 20)]
        else:
            before = msg.get("before_seq")
            hits = [r for r in records if r["harness"] in msg["names"]
                    and (before is None or r["seq"] < before)][: msg["limit"]]
        return 0.0, {"runs": hits, "oldest_seq": hits[-1]["seq"] if hits else None}

    daemon, (code, out, err) = waited_on(world, "gate", answer)
    assert (code, out, err) == (4, "", "gate run 40: failed\n")
    asked = [{k: v for k, v in r.items() if k != "id"} for r in daemon.requests]
    assert asked == [
        {"op": "daemon_info"}, {"op": "trigger", "name": "gate"},
        {"op": "runs", "names": ["gate"], "limit": 1000},
        {"op": "runs", "names": ["gate"], "limit": 1000, "before_seq": 1601},
        {"op": "runs", "names": ["gate"], "limit": 1000, "before_seq": 601}]


def _durable_after(polls: int, pending: Any) -> Answer:
    """A daemon that starts run 1 of x, whose record is not durable (no record at all)
    for the first `polls` runs requests and then reads failed with exit 3; it answers
    `pending` with `pending`."""
    rec = {"harness": "x", "run_id": 1, "seq": 1, "outcome": "failed", "exit_code": 3}
    polled = [0]

    def answer(msg: dict[str, Any]) -> tuple[float, Any]:
        op = msg["op"]
        if op == "daemon_info":
            return 0.0, {"ledger": {"next_seq": 1}}
        if op == "trigger":
            return 0.0, {"decision": "started", "run_id": 1}
        if op == "pending":
            return 0.0, pending
        polled[0] += 1
        runs = [rec] if polled[0] > polls else []
        return 0.0, {"runs": runs, "oldest_seq": 1 if runs else None}
    return answer


@pytest.mark.parametrize(("pending", "said"), [
    ({"stuck": "ledger write of /l/day.jsonl failed: api_key=" + "sk-ant-api03-" + "A" * 40
               + " \x1b]0;owned\x07\nharness: done"},
     "harness: x run 1: its record is not durable yet, the run ledger cannot write it ("
     "ledger write of /l/day.jsonl failed: api_key=[REDACTED] \\x1b]0;owned\\x07\\n"
     "harness: done); still waiting (Ctrl-C stops the wait, not the run)\n"),
    (Refusal("unknown_op", "unknown op 'pending' (known: daemon_info, trigger, runs)"), ""),
    ({"stuck": None}, ""),
], ids=["stuck", "a daemon without the op", "not stuck"])
def test_trigger_wait_says_once_why_its_record_is_not_durable(
        world: World, pending: Any, said: str) -> None:
    """What the daemon says keeps the record from being durable is shown once, scrubbed
    and escaped as every daemon value is, and the wait goes on to the durable outcome. A
    daemon that does not know the op is asked once, and the wait goes on as before it."""
    daemon, (code, out, err) = waited_on(world, "x", _durable_after(5, pending))
    assert (code, out, err) == (3, "", said + "x run 1: failed\n")
    asked = [r for r in daemon.requests if r["op"] == "pending"]
    assert [{k: v for k, v in r.items() if k != "id"} for r in asked][:1] == [
        {"op": "pending", "name": "x", "run_id": 1}]
    # Asked while the record was not durable: once when stuck or unknown, each poll else.
    assert len(asked) == (5 if pending == {"stuck": None} else 1)


@pytest.mark.parametrize(("op", "data", "encoding", "table"), [
    ("jobs", {"jobs": [{}]}, "utf-8",
     "NAME  STATE  SCHEDULE  NEXT  LAST RUN  FAILS\n"
     "\u2014     \u2014      \u2014         \u2014     \u2014         0\n"),
    ("jobs", {"jobs": [{"name": "a\x1b]0;pwned\x07", "state": 3, "last_run": {"x": 1},
                        "fails": None, "schedule": "@every 5m", "next": "09:00"}]}, "utf-8",
     "NAME               STATE  SCHEDULE   NEXT   LAST RUN  FAILS\n"
     "a\\x1b]0;pwned\\x07  3      @every 5m  09:00  #? ?      \u2014\n"),
    ("list", {"harnesses": [{"name": "caf\u00e9\u2028", "kind": None}]}, "latin-1",
     "NAME        KIND  STATE\ncaf\u00e9\\u2028  -     -\n"),
], ids=["nothing but an object", "odd values", "latin-1"])
def test_a_listing_shows_whatever_the_reply_holds_escaped(
        world: World, tmp_path: Path, op: str, data: Any, encoding: str, table: str) -> None:
    """A daemon of another make may leave a field out or send another type: the table
    shows what there is (no traceback), escaped, and laid out for the output's encoding."""
    path = tmp_path / "odd.sock"
    daemon = FakeDaemon(str(path), [], raw={"id": 1, "ok": True, "data": data})
    try:
        res = subprocess.run([sys.executable, "-m", "harness.cli", "--socket", str(path), op],
                             env={**world.env, "PYTHONIOENCODING": encoding},
                             capture_output=True, encoding=encoding, timeout=120)
    finally:
        daemon.close()
    assert (res.returncode, res.stderr, res.stdout) == (0, "", table)


@pytest.mark.parametrize(("tz", "cells"), [
    ("UTC", ["Dec  4 01:00", "#7 success Dec  3 23:59"]),
    ("Asia/Kolkata", ["Dec  4 06:30", "#7 success Dec  4 05:29"]),
])
def test_the_jobs_table_shows_next_and_last_in_local_time(
        world: World, tmp_path: Path, tz: str, cells: list[str]) -> None:
    """NEXT was the daemon's raw stamp (`2026-12-04T01:00:00.000000000Z`, 30 columns of a
    table meant for 80) beside a LAST RUN in the local `Jan _2 15:04` of `harness runs`."""
    path = tmp_path / "jobs.sock"
    job = {"name": "n", "state": "armed", "schedule": "@hourly",
           "next": "2026-12-04T01:00:00.000000000Z", "fails": 0,
           "last_run": {"run_id": 7, "outcome": "success",
                        "started_at": "2026-12-03T23:59:30.5Z", "ended_at": None}}
    daemon = FakeDaemon(str(path), [], raw={"id": 1, "ok": True, "data": {"jobs": [job]}})
    try:
        res = subprocess.run([sys.executable, "-m", "harness.cli", "--socket", str(path),
                              "jobs"], env={**world.env, "TZ": tz}, capture_output=True,
                             text=True, timeout=120)
    finally:
        daemon.close()
    assert (res.returncode, res.stderr) == (0, "")
    assert res.stdout == (
        "NAME  STATE  SCHEDULE  NEXT          LAST RUN                 FAILS\n"
        f"n     armed  @hourly   {cells[0]}  {cells[1]}  0\n")


@pytest.mark.parametrize(("raw", "why"), [
    ([1], "the daemon's reply to jobs is not a JSON object: [1]"),
    ({"id": 1, "ok": True, "data": "abc"},
     "the daemon's jobs reply is not a list of objects: \"abc\""),
    ({"id": 1, "ok": True, "data": {"jobs": [1, 2]}},
     "the daemon's jobs reply is not a list of objects: {\"jobs\": [1, 2]}"),
    ({"id": 1, "ok": True, "data": "token=s3cr3t"},
     "the daemon's jobs reply is not a list of objects: \"token=[REDACTED]\""),
], ids=["a list", "a string", "not objects", "a secret in it"])
def test_a_reply_of_another_shape_is_a_clear_error(world: World, tmp_path: Path, raw: Any,
                                                   why: str) -> None:
    """Whatever answers on the socket, a listing never ends in a traceback: exit 1 and
    what the reply was."""
    path = tmp_path / "odd.sock"
    daemon = FakeDaemon(str(path), [], raw=raw)
    try:
        res = world.harness("--socket", str(path), "jobs")
    finally:
        daemon.close()
    assert (res.returncode, res.stdout, res.stderr) == (1, "", f"harness: {why} (bad_reply)\n")


# -- replies no daemon of ours sends: each a clear one-line error, never a traceback ------

# Every command that needs the daemon, and the first op each sends.
DAEMON_COMMANDS = [("jobs",), ("list",), ("trigger", "x"), ("trigger", "x", "--wait"),
                   ("start", "x"), ("stop", "x"), ("restart", "x"), ("reload",),
                   ("logs", "x")]


def first_op(args: tuple[str, ...]) -> str:
    return "daemon_info" if "--wait" in args else args[0]


def said(args: tuple[str, ...], why: str, code: str = "bad_reply") -> str:
    """The line a command prints for the daemon's error `why` (code `code`)."""
    if args[0] == "logs":
        return f"harness: {why}\n"
    if args[0] == "reload":
        return f"harness: reload failed: {why} ({code})\n"
    return f"harness: {why} ({code})\n"


def odd_daemon(world: World, *args: str, raw: Any = None,
               hello: bytes | None = None) -> subprocess.CompletedProcess[str]:
    """`harness ARGS` against a FakeDaemon on the world's socket answering `raw`."""
    daemon = FakeDaemon(str(world.root / "run" / "harness.sock"), [], raw=raw, hello=hello)
    try:
        return world.harness(*args)
    finally:
        daemon.close()


BOOM = {"id": 1, "ok": False, "error": "boom"}


@pytest.mark.parametrize("args", DAEMON_COMMANDS, ids=" ".join)
def test_an_error_that_is_no_object_is_a_bad_reply(world: World, args: tuple[str, ...]
                                                   ) -> None:
    """{"ok": false, "error": "boom"} ended every command in an AttributeError."""
    res = odd_daemon(world, *args, raw=BOOM)
    why = (f"the daemon's reply to {first_op(args)} is neither ok nor an error object: "
           '{"id": 1, "ok": false, "error": "boom"}')
    assert (res.returncode, res.stdout, res.stderr) == (1, "", said(args, why))


@pytest.mark.parametrize("args", DAEMON_COMMANDS, ids=" ".join)
def test_a_reply_nested_too_deeply_is_a_bad_reply(world: World, args: tuple[str, ...]
                                                  ) -> None:
    """msgspec raises RecursionError, no ValueError, past its depth: it was a traceback."""
    res = odd_daemon(world, *args, raw=b"[" * 100_000)
    why = f"the daemon's reply to {first_op(args)} is not JSON (JSON nested too deeply)"
    assert (res.returncode, res.stdout, res.stderr) == (1, "", said(args, why))


@pytest.mark.parametrize("args", [("jobs",), ("reload",)], ids=" ".join)
def test_a_hello_nested_too_deeply_is_a_daemon_not_responding(
        world: World, args: tuple[str, ...]) -> None:
    res = odd_daemon(world, *args, hello=b"[" * 100_000)
    assert (res.returncode, res.stdout, res.stderr) == (
        1, "", f"harness: daemon not responding ({world.root / 'run' / 'harness.sock'})\n")


@pytest.mark.parametrize(("raw", "hello", "why"), [
    (BOOM, None, "failed (the daemon's reply to runs is neither ok nor an error object: "
                 '{"id": 1, "ok": false, "error": "boom"})'),
    (b"[" * 100_000, None, "failed (the daemon's reply to runs is not JSON (JSON nested "
                           "too deeply))"),
    (None, b"[" * 100_000, "not responding"),
], ids=["error no object", "deep reply", "deep hello"])
def test_runs_reads_the_disk_when_the_daemon_answers_nonsense(
        world: World, raw: Any, hello: bytes | None, why: str) -> None:
    res = odd_daemon(world, "runs", "--json", raw=raw, hello=hello)
    assert (res.returncode, res.stdout, res.stderr) == (
        0, "[]\n", f"harness: daemon {why}; read the ledger from disk ({world.ledger})\n")


TOKEN = "sk-ant-api03-" + "A" * 40


@pytest.mark.parametrize("args", [("jobs",), ("trigger", "x"), ("reload",), ("logs", "x")],
                         ids=" ".join)
@pytest.mark.parametrize(("error", "why"), [
    ({"code": "x", "message": f"upstream said: key {TOKEN}"},
     "upstream said: key [REDACTED]"),
    ({"code": "x", "detail": f"api_key={TOKEN}"},
     '{"code": "x", "detail": "api_key=[REDACTED]"}'),
], ids=["in the message", "no message"])
def test_a_secret_in_a_daemon_error_never_reaches_stderr(
        world: World, args: tuple[str, ...], error: dict[str, Any], why: str) -> None:
    res = odd_daemon(world, *args, raw={"id": 1, "ok": False, "error": error})
    assert (res.returncode, res.stdout, res.stderr) == (1, "", said(args, why, "x"))


def not_an_object(op: str, data: str, needs: str = "") -> str:
    return f"the daemon's {op} reply is not an object{needs and ' with ' + needs}: {data}"


@pytest.mark.parametrize(("args", "data", "why"), [
    (("trigger", "x"), None, not_an_object("trigger", "null", "run_id")),
    (("trigger", "x"), "x", not_an_object("trigger", '"x"', "run_id")),
    (("trigger", "x"), {}, not_an_object("trigger", "{}", "run_id")),
    (("trigger", "x", "--wait"), [1, 2], not_an_object("daemon_info", "[1, 2]", "ledger")),
    (("trigger", "x", "--wait"), {"ledger": {}, "run_id": 1},
     not_an_object("daemon_info ledger", "{}", "next_seq")),
    (("trigger", "x", "--wait"), {"ledger": {"next_seq": 1}, "run_id": 1, "runs": 5},
     'the daemon\'s runs reply is not a list of objects: {"ledger": {"next_seq": 1}, '
     '"run_id": 1, "runs": 5}'),
    (("start", "x"), None, not_an_object("start", "null", "action")),
    (("stop", "x"), [1, 2], not_an_object("stop", "[1, 2]", "action")),
    (("restart", "x"), {}, not_an_object("restart", "{}", "action")),
    (("reload",), [1, 2], not_an_object("reload", "[1, 2]")),
    (("logs", "x"), {"text": None}, not_an_object("logs", '{"text": null}', "text")),
], ids=["trigger null", "trigger string", "trigger no run_id", "wait list",
        "wait no next_seq", "wait runs no list", "start null", "stop list",
        "restart no action", "reload list", "logs no text"])
def test_data_of_another_shape_is_a_bad_reply(world: World, args: tuple[str, ...],
                                              data: Any, why: str) -> None:
    """trigger, start, stop and restart read the reply's fields unchecked: a TypeError,
    KeyError or AttributeError traceback."""
    res = odd_daemon(world, *args, raw={"id": 1, "ok": True, "data": data})
    assert (res.returncode, res.stdout, res.stderr) == (1, "", said(args, why))


# -- failures that are the command's own, not the daemon's ---------------------------------


def a_run(log: str, outcome: str = "failed", exit_code: int = 3) -> Answer:
    """A daemon that starts run 1 of x, whose record reads closed with its log at `log`."""
    rec = {"harness": "x", "run_id": 1, "seq": 1, "outcome": outcome,
           "exit_code": exit_code, "log": log}

    def answer(msg: dict[str, Any]) -> tuple[float, Any]:
        return 0.0, {"daemon_info": {"ledger": {"next_seq": 1}},
                     "trigger": {"decision": "started", "run_id": 1}}.get(
                         msg["op"], {"runs": [rec], "oldest_seq": 1})
    return answer


def trigger(world: World, answer: Answer, *args: str, stdout: Any = subprocess.PIPE
            ) -> subprocess.CompletedProcess[str]:
    daemon = ScriptedDaemon(str(world.root / "run" / "harness.sock"), answer)
    try:
        return subprocess.run([sys.executable, "-m", "harness.cli", "trigger", "x", *args],
                              env=world.env, stdout=stdout, stderr=subprocess.PIPE,
                              text=True, timeout=120)
    finally:
        daemon.close()


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")
@pytest.mark.parametrize("wait", [(), ("--wait",)], ids=["trigger", "trigger --wait"])
def test_a_full_stdout_after_the_trigger_is_no_lost_daemon(
        world: World, tmp_path: Path, wait: tuple[str, ...]) -> None:
    """The daemon took the trigger and the run started: "lost the daemon" (and a second
    line on the output) told the user otherwise, who might trigger it again."""
    (tmp_path / "1.log").write_text("out\n")
    with open("/dev/full", "w") as full:
        res = trigger(world, a_run(str(tmp_path / "1.log")), *wait, stdout=full)
    assert (res.returncode, res.stderr) == (
        1, "harness: cannot write standard output: No space left on device\n")


def test_a_reader_gone_before_the_run_id_ends_trigger_quietly(world: World) -> None:
    r, w = os.pipe()
    os.close(r)
    try:
        res = trigger(world, a_run("/nonexistent"), stdout=w)
    finally:
        os.close(w)
    assert (res.returncode, res.stderr) == (1, "")


def test_a_log_that_will_not_read_leaves_wait_with_the_runs_exit_code(
        world: World, tmp_path: Path) -> None:
    """A log path that is a directory: was "lost the daemon ([Errno 21] ...)", exit 1."""
    res = trigger(world, a_run(str(tmp_path)), "--wait")
    assert (res.returncode, res.stdout, res.stderr) == (
        3, "", f"harness: cannot read the log of x run 1 ([Errno 21] Is a directory: "
               f"'{tmp_path}'); waiting for the run to end without it\nx run 1: failed\n")


def test_a_compressed_log_that_will_not_read_leaves_wait_with_the_runs_exit_code(
        world: World, tmp_path: Path) -> None:
    """A .zst that is no zstd frame: was a ZstdError traceback."""
    (tmp_path / "1.log.zst").write_bytes(b"not zstd at all")
    res = trigger(world, a_run(str(tmp_path / "1.log"), "success", 0), "--wait")
    assert (res.returncode, res.stdout) == (0, "")
    assert res.stderr.startswith("harness: cannot read the log of x run 1 (")
    assert res.stderr.endswith("); waiting for the run to end without it\n"
                               "x run 1: success\n")
    assert res.stderr.count("\n") == 2


def closed_stdout() -> None:
    os.close(1)


def with_stdout_closed(world: World, *args: str) -> subprocess.CompletedProcess[str]:
    """The real CLI run with file descriptor 1 closed (`harness ... >&-`)."""
    return subprocess.run([sys.executable, "-m", "harness.cli", *args], env=world.env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          timeout=120, preexec_fn=closed_stdout)


def test_logs_with_stdout_closed_ends_cleanly(world: World) -> None:
    """`harness logs x >&-`: Python leaves sys.stdout None; the write to it was an
    AttributeError traceback. The output goes to /dev/null, as the daemon's does."""
    daemon = FakeDaemon(str(world.root / "run" / "harness.sock"), [], raw={
        "id": 1, "ok": True, "data": {"name": "x", "run_id": 1, "path": "/x/1.log",
                                      "text": "hello\n", "cut_bytes": 0, "shared": False}})
    try:
        res = with_stdout_closed(world, "logs", "x")
    finally:
        daemon.close()
    assert (res.returncode, res.stderr) == (0, "")


def test_trigger_wait_with_stdout_closed_ends_with_the_runs_code(
        world: World, tmp_path: Path) -> None:
    (tmp_path / "1.log").write_text("out\n")
    daemon = ScriptedDaemon(str(world.root / "run" / "harness.sock"),
                            a_run(str(tmp_path / "1.log"), "failed", 3))
    try:
        res = with_stdout_closed(world, "trigger", "x", "--wait")
    finally:
        daemon.close()
    assert (res.returncode, res.stderr) == (3, "x run 1: failed\n")


def test_ctrl_c_exits_130_and_says_nothing(world: World) -> None:
    """Click turned the KeyboardInterrupt into "Aborted!" and exit 1, the ledger group's
    "no ledger"; a shell reports a command Ctrl-C ended as 130."""
    daemon = ScriptedDaemon(str(world.root / "run" / "harness.sock"), lambda m: None)
    try:
        # A stop is waited for while the daemon answers hello: nothing ends it but us.
        with reaped(subprocess.Popen(
                [sys.executable, "-m", "harness.cli", "stop", "x"], env=world.env, text=True,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                preexec_fn=interruptible)) as proc:
            deadline = time.monotonic() + 60
            while not daemon.requests:
                assert proc.poll() is None and time.monotonic() < deadline, proc.stderr
                time.sleep(0.05)
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=60)
    finally:
        daemon.close()
    assert (proc.returncode, out, err) == (130, "", "")


# -- what the daemon sends is shown, never obeyed by the terminal --------------------------

OSC = "\x1b]0;pwned\x07"  # retitles the terminal: click strips only CSI, and only off a TTY
SHOWN = "\\x1b]0;pwned\\x07"


@pytest.mark.parametrize(("args", "data", "out", "err"), [
    (("start", "x"), {"action": OSC, "run_id": 1}, f"x: {SHOWN}\n", ""),
    (("stop", "x"), {"action": "stopped", "run_id": OSC, "outcome": OSC, "reason": "r\n"},
     f"x: stopped run {SHOWN} ({SHOWN}/r\\n)\n", ""),
    (("restart", "x"), {"action": "restarted", "run_id": 2, "replaced": OSC},
     f"x: restarted (replaced run {SHOWN}, new run 2)\n", ""),
    (("trigger", "x"), {"run_id": 1, "decision": OSC}, "1\n", f"x: run 1 {SHOWN}\n"),
    (("logs", "x"), {"text": "t\n", "path": f"/l/{OSC}", "cut_bytes": 5},
     "t\n", f"harness: showing the end of /l/{SHOWN}; the first 5 byte(s) were left out\n"),
    (("reload",), {"added": [OSC], "unchanged": OSC},
     f"reloaded: added {SHOWN}; {SHOWN} unchanged\n", ""),
], ids=["start", "stop", "restart", "trigger", "logs", "reload"])
def test_values_the_daemon_sends_are_escaped(world: World, args: tuple[str, ...], data: Any,
                                             out: str, err: str) -> None:
    res = odd_daemon(world, *args, raw={"id": 1, "ok": True, "data": data})
    assert (res.returncode, res.stdout, res.stderr) == (0, out, err)


def test_trigger_wait_escapes_the_outcome(world: World, tmp_path: Path) -> None:
    res = trigger(world, a_run(str(tmp_path / "none.log"), OSC, 3), "--wait")
    assert (res.returncode, res.stdout, res.stderr) == (3, "", f"x run 1: {SHOWN}\n")


def on_a_terminal(world: World, *args: str) -> bytes:
    """What `harness ARGS` writes to a terminal (a pty): click strips CSI off a pipe."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: exec at once
        os.execve(sys.executable, [sys.executable, "-m", "harness.cli", *args], world.env)
    out = b""
    try:
        while chunk := os.read(fd, 4096):
            out += chunk
    except OSError:  # EIO: the child closed the terminal
        pass
    finally:
        os.close(fd)
        os.waitpid(pid, 0)
    return out


def test_a_colour_the_daemon_sends_does_not_reach_a_terminal(world: World) -> None:
    daemon = FakeDaemon(str(world.root / "run" / "harness.sock"), [], raw={
        "id": 1, "ok": True, "data": {"action": "\x1b[31mred", "run_id": 1}})
    try:
        out = on_a_terminal(world, "start", "x")
    finally:
        daemon.close()
    assert out == b"x: \\x1b[31mred\r\n"
