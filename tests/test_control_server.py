"""The control socket server and the `runs` op (DESIGN.md §2, SPEC-0022 REQ-15).

Real Unix sockets in short temporary directories (sun_path is 108 bytes), a server on
an event loop in its own thread (as the daemon's single loop would be), and on the
client side either the CLI's own `Client`, raw sockets for input no client would send,
or the `harness` CLI itself as a subprocess. The `runs` op answers from a real
`RunLedger` whose records were written through it.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import os
import random
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import threading
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

import harness
from harness.control.client import Client, DaemonError, DaemonLost, DaemonUnreachable
from harness.control.ops import runs_op
from harness.control.server import MAX_LINE, ControlServer, Handler, OpError, SocketInUse
from harness.ledger.runledger import RunLedger
from harness.ledger.schema import OUTCOMES
from harness.timefmt import format_ns, now_ns
from ledgertools import (
    DAY,
    HOUR,
    MINUTE,
    T0,
    Clock,
    OpenLedger,
    append_filter_runs,
    append_paged_runs,
)

T = TypeVar("T")


class LoopThread:
    """An event loop running in a thread, so blocking clients can run in the test."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 30.0) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        self.loop.close()


@pytest.fixture
def sockdir() -> Iterator[Path]:
    # Not tmp_path: its long names can pass the 108-byte limit of a socket path.
    d = Path(tempfile.mkdtemp(prefix="hcs-", dir="/tmp"))
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def loop() -> Iterator[LoopThread]:
    lt = LoopThread()
    yield lt
    lt.stop()


Serve = Callable[..., ControlServer]


@pytest.fixture
def serve(loop: LoopThread, sockdir: Path) -> Iterator[Serve]:
    """Start a ControlServer (default path: sockdir/harness.sock); closed at teardown."""
    started: list[ControlServer] = []

    def _serve(handlers: dict[str, Handler], path: Path | None = None,
               **kw: Any) -> ControlServer:
        srv = ControlServer(str(path or sockdir / "harness.sock"), handlers, **kw)
        loop.run(srv.start())
        started.append(srv)
        return srv

    yield _serve
    for srv in started:
        loop.run(srv.close())


async def echo(req: dict[str, Any]) -> Any:
    return {"x": req.get("x")}


async def jittery_echo(req: dict[str, Any]) -> Any:
    await asyncio.sleep(random.random() / 500)  # finish out of order
    return {"tag": req.get("tag")}


async def boom(req: dict[str, Any]) -> Any:
    raise RuntimeError("kaput")


async def refuse(req: dict[str, Any]) -> Any:
    raise OpError("busy", "try later")


async def unencodable(req: dict[str, Any]) -> Any:
    return {"x": object()}  # no JSON form


HANDLERS: dict[str, Handler] = {"echo": echo, "boom": boom, "refuse": refuse,
                                "unencodable": unencodable}


class Raw:
    """A bare socket client for sending what the real client never would."""

    def __init__(self, path: Path | str, timeout: float = 10.0) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(str(path))
        self.file = self.sock.makefile("rb")

    def send(self, msg: Any) -> None:
        data = msg if isinstance(msg, bytes) else json.dumps(msg).encode() + b"\n"
        self.sock.sendall(data)

    def recv(self) -> Any:
        line = self.file.readline()
        assert line, "connection closed"
        return json.loads(line)

    def at_eof(self) -> bool:
        try:
            return self.file.readline() == b""
        except ConnectionResetError:
            return True

    def hello(self) -> Any:
        self.send({"op": "hello", "proto": "1.0"})
        return self.recv()

    def close(self) -> None:
        self.file.close()
        self.sock.close()


def code_of(reply: dict[str, Any]) -> str:
    assert reply["ok"] is False, reply
    return str(reply["error"]["code"])


# -- lifecycle: hello, the socket file, stale and live sockets ------------------------


def test_hello_answers_proto_and_version(serve: Serve, sockdir: Path) -> None:
    serve(HANDLERS)
    raw = Raw(sockdir / "harness.sock")
    assert raw.hello() == {"ok": True, "proto": "1.0", "version": harness.__version__}
    raw.send({"id": 1, "op": "echo", "x": 5})
    assert raw.recv() == {"id": 1, "ok": True, "data": {"x": 5}}
    raw.close()
    # A hello that carries an id gets it back, in the request/reply form (DESIGN §2) as
    # well; a later minor version is the same protocol.
    raw = Raw(sockdir / "harness.sock")
    raw.send({"id": 0, "op": "hello", "proto": "1.7"})
    assert raw.recv() == {"id": 0, "ok": True, "proto": "1.0", "version": harness.__version__,
                          "data": {"proto": "1.0", "version": harness.__version__}}
    raw.close()
    client = Client(str(sockdir / "harness.sock"))
    assert client.request("echo", x="y") == {"x": "y"}
    client.close()


def test_socket_is_0600_and_removed_on_close(loop: LoopThread, sockdir: Path) -> None:
    path = sockdir / "harness.sock"
    srv = ControlServer(str(path), HANDLERS)
    loop.run(srv.start())
    st = os.lstat(path)
    assert stat.S_ISSOCK(st.st_mode)
    assert stat.S_IMODE(st.st_mode) == 0o600
    assert not [p for p in os.listdir(sockdir) if p.startswith(".hs-")]  # temp dir gone
    client = Client(str(path))  # an idle connection must not hold up close
    loop.run(srv.close(), timeout=10)
    assert not path.exists()
    with pytest.raises(DaemonLost):
        client.request("echo")
    client.close()
    with pytest.raises(DaemonUnreachable, match="not running"):
        Client(str(path))
    again = ControlServer(str(path), HANDLERS)  # the path is free again
    loop.run(again.start())
    loop.run(again.close())


def stuck_handler() -> tuple[Callable[[dict[str, Any]], Awaitable[Any]], threading.Event]:
    """An op handler that never answers, and the event it sets once a request reached it."""
    entered = threading.Event()

    async def stuck(req: dict[str, Any]) -> Any:
        entered.set()
        await asyncio.Event().wait()

    return stuck, entered


@contextlib.contextmanager
def dying_daemon(path: Path) -> Iterator[list[bytes]]:
    """A daemon on `path` that answers the hello, reads one request and dies holding it
    (its connection ends with no reply, as a SIGKILLed daemon's does; one that shuts down
    answers ``shutting_down`` instead). Yields the request lines it read."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen()
    got: list[bytes] = []

    def die_mid_request() -> None:
        conn, _ = listener.accept()
        with conn, conn.makefile("rwb") as f:
            f.readline()
            f.write(b'{"ok": true, "proto": "1.0"}\n')
            f.flush()
            got.append(f.readline())  # the request, then the end of the connection

    server = threading.Thread(target=die_mid_request, daemon=True)
    server.start()
    try:
        yield got
        server.join(timeout=60)
    finally:
        listener.close()


SHUT_DOWN = {"code": "shutting_down",
             "message": "the daemon shut down before it answered; the request may or may "
                        "not have taken effect"}


def test_close_does_not_wait_for_a_stuck_handler(loop: LoopThread, sockdir: Path) -> None:
    """Nor does it leave the request unanswered (DESIGN.md §2: each request gets exactly
    one reply): the client is told the daemon shut down, not left with a bare EOF that
    reads like a crash."""
    path = sockdir / "harness.sock"
    stuck, entered = stuck_handler()
    srv = ControlServer(str(path), {"stuck": stuck})
    loop.run(srv.start())
    raw = Raw(path)
    raw.hello()
    raw.send({"id": 1, "op": "stuck"})
    assert entered.wait(timeout=10)
    loop.run(srv.close(), timeout=10)
    assert raw.recv() == {"id": 1, "ok": False, "error": SHUT_DOWN}
    assert raw.at_eof()
    raw.close()
    assert not path.exists()


def test_every_request_cut_short_by_close_is_answered_once(loop: LoopThread,
                                                             sockdir: Path) -> None:
    """Pipelined requests past the in-flight bound (read, not yet dispatched) and those
    in flight alike: one reply each, by id, then the end of the connection."""
    path = sockdir / "harness.sock"
    entered = threading.Semaphore(0)

    async def stuck(req: dict[str, Any]) -> Any:
        entered.release()
        await asyncio.Event().wait()

    srv = ControlServer(str(path), {"stuck": stuck})
    loop.run(srv.start())
    raw = Raw(path)
    raw.hello()
    # One write: the server reads all 20 lines at once, so once the 16th handler runs
    # the 17th line has been read and waits for a slot.
    raw.send(b"".join(json.dumps({"id": i, "op": "stuck"}).encode() + b"\n"
                      for i in range(1, 21)))
    for _ in range(16):
        assert entered.acquire(timeout=10)
    loop.run(srv.close(), timeout=10)
    replies = []
    while (line := raw.file.readline()) != b"":
        replies.append(json.loads(line))
    raw.close()
    # 16 in flight and the 17th read while waiting for a slot; the rest were never read.
    assert sorted(r["id"] for r in replies) == list(range(1, 18))
    assert all(r == {"id": r["id"], "ok": False, "error": SHUT_DOWN} for r in replies)


def test_a_stale_socket_is_replaced(serve: Serve, sockdir: Path) -> None:
    path = sockdir / "harness.sock"
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(str(path))  # a crashed daemon: the file stays, nobody listens
    dead.close()
    old = os.lstat(path).st_ino
    serve(HANDLERS)
    assert os.lstat(path).st_ino != old
    assert stat.S_IMODE(os.lstat(path).st_mode) == 0o600
    client = Client(str(path))
    assert client.request("echo", x=1) == {"x": 1}
    client.close()


def test_a_live_daemon_is_not_replaced(loop: LoopThread, serve: Serve, sockdir: Path) -> None:
    path = sockdir / "harness.sock"
    serve(HANDLERS)
    ino = os.lstat(path).st_ino
    second = ControlServer(str(path), HANDLERS)
    with pytest.raises(SocketInUse):
        loop.run(second.start())
    assert os.lstat(path).st_ino == ino
    client = Client(str(path))
    assert client.request("echo", x=2) == {"x": 2}
    client.close()


def test_a_listener_without_the_lock_is_not_replaced(loop: LoopThread, sockdir: Path) -> None:
    """Something else listening on the path (no lock held) still counts as live."""
    path = sockdir / "other.sock"
    other = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    other.bind(str(path))
    other.listen()
    try:
        with pytest.raises(SocketInUse, match="already listening"):
            loop.run(ControlServer(str(path), HANDLERS).start())
        assert stat.S_ISSOCK(os.lstat(path).st_mode)
    finally:
        other.close()
    # A regular file at the path is not ours to delete.
    regular = sockdir / "file.sock"
    regular.write_text("keep me")
    with pytest.raises(SocketInUse, match="not a socket"):
        loop.run(ControlServer(str(regular), HANDLERS).start())
    assert regular.read_text() == "keep me"


def test_a_path_too_long_for_a_socket_is_refused_before_its_lock_is_made(
        loop: LoopThread, tmp_path: Path) -> None:
    """The length was checked only at bind, after PATH.lock was created and left behind."""
    path = tmp_path / ("s" * (199 - len(os.fsencode(str(tmp_path)))))
    with pytest.raises(OSError) as info:
        loop.run(ControlServer(str(path), HANDLERS).start())
    assert (info.value.errno, info.value.strerror, info.value.filename) == (
        errno.ENAMETOOLONG, "the path is 200 bytes; a Unix socket's path holds at most 107",
        str(path))
    assert list(tmp_path.iterdir()) == []


def test_a_request_before_hello_is_refused(serve: Serve, sockdir: Path) -> None:
    serve(HANDLERS)
    raw = Raw(sockdir / "harness.sock")
    raw.send({"id": 1, "op": "echo"})
    reply = raw.recv()
    assert reply["id"] == 1 and code_of(reply) == "hello_required"
    assert raw.at_eof()
    raw.close()
    raw = Raw(sockdir / "harness.sock")
    raw.send({"op": "hello", "proto": "2.0"})
    reply = raw.recv()
    assert code_of(reply) == "unsupported_proto" and "2.0" in reply["error"]["message"]
    assert raw.at_eof()
    raw.close()
    raw = Raw(sockdir / "harness.sock")
    raw.send(b"hello\n")
    assert code_of(raw.recv()) == "bad_request"
    assert raw.at_eof()
    raw.close()


def test_a_silent_connection_is_dropped_after_the_hello_timeout(
        serve: Serve, sockdir: Path) -> None:
    serve(HANDLERS, hello_timeout=0.2)
    raw = Raw(sockdir / "harness.sock", timeout=10)
    assert raw.at_eof()
    raw.close()


# -- bad input -------------------------------------------------------------------------


def _send_quietly(sock: socket.socket, data: bytes) -> None:
    with contextlib.suppress(OSError):  # the server closes mid-line: expected
        sock.sendall(data)


def test_an_oversized_line_is_refused_and_others_are_still_served(
        serve: Serve, sockdir: Path) -> None:
    serve(HANDLERS)
    raw = Raw(sockdir / "harness.sock")
    raw.hello()
    big = b'{"id": 1, "op": "echo", "x": "' + b"a" * (2 * 1024 * 1024) + b'"}\n'
    sender = threading.Thread(target=_send_quietly, args=(raw.sock, big))
    sender.start()
    reply = raw.recv()
    assert reply["id"] is None and code_of(reply) == "too_large"
    assert raw.at_eof()
    sender.join(timeout=30)
    assert not sender.is_alive()
    raw.close()
    client = Client(str(sockdir / "harness.sock"))
    assert client.request("echo", x="after") == {"x": "after"}
    client.close()


def test_a_line_of_exactly_the_limit_is_served(serve: Serve, sockdir: Path) -> None:
    serve(HANDLERS)
    raw = Raw(sockdir / "harness.sock")
    raw.hello()
    head, tail = b'{"id": 7, "op": "echo", "x": "', b'"}'
    line = head + b"b" * (MAX_LINE - len(head) - len(tail)) + tail
    assert len(line) == MAX_LINE
    threading.Thread(target=raw.sock.sendall, args=(line + b"\n",), daemon=True).start()
    reply = raw.recv()
    assert reply["id"] == 7 and reply["ok"] is True and len(reply["data"]["x"]) > MAX_LINE - 64
    raw.close()


@pytest.mark.parametrize(("line", "code", "rid", "says"), [
    (b'{"id": 1, "op": "echo"', "bad_request", None, "JSON"),
    (b"\xff\xfe not utf-8", "bad_request", None, "JSON"),
    (b"[1, 2]", "bad_request", None, "object"),
    (b'"echo"', "bad_request", None, "object"),
    (b"42", "bad_request", None, "object"),
    (b"null", "bad_request", None, "object"),
    (b"[" * 200_000, "bad_request", None, "JSON"),
    (b"1" * 10_000, "bad_request", None, "JSON"),
    (b'{"id": 1, "op": "echo", "x": NaN}', "bad_request", None, "NaN"),
    (b'{"op": "echo"}', "bad_request", None, "id is missing"),
    (b'{"id": "1", "op": "echo"}', "bad_request", None, "id"),
    (b'{"id": true, "op": "echo"}', "bad_request", None, "id"),
    (b'{"id": 3}', "bad_request", 3, "op"),
    (b'{"id": 4, "op": 5}', "bad_request", 4, "op"),
    (b'{"id": 5, "op": "frobnicate"}', "unknown_op", 5, "'frobnicate'"),
    (b'{"id": 6, "op": "boom"}', "internal", 6, "kaput"),
    (b'{"id": 7, "op": "refuse"}', "busy", 7, "try later"),
    (b'{"id": 8, "op": "unencodable"}', "internal", 8, "unencodable"),
])
def test_bad_requests_get_exact_codes_and_the_connection_goes_on(
        serve: Serve, sockdir: Path, line: bytes, code: str, rid: int | None,
        says: str) -> None:
    serve(HANDLERS)
    raw = Raw(sockdir / "harness.sock")
    raw.hello()
    raw.send(line + b"\n")
    reply = raw.recv()
    assert set(reply) == {"id", "ok", "error"}
    assert reply["id"] == rid and code_of(reply) == code
    assert says in reply["error"]["message"]
    assert "Traceback" not in reply["error"]["message"]
    raw.send({"id": 99, "op": "echo", "x": "next"})
    assert raw.recv() == {"id": 99, "ok": True, "data": {"x": "next"}}
    raw.close()


TOKEN = "sk-ant-api03-" + "A" * 40


async def refuse_quoting_a_secret(req: dict[str, Any]) -> Any:
    # A refusal quotes the value it refused; here across the reply's cap (512). (Not
    # bad_config: a config problem is scrubbed value by value where it is made.)
    raise OpError("refused", "x" * 464 + f" argv: got string 'claude --api-key {TOKEN}'")


async def fail_quoting_a_secret(req: dict[str, Any]) -> Any:
    raise RuntimeError(f"upstream said Authorization: Bearer {TOKEN}")


@pytest.mark.parametrize(("op", "message"), [
    ("refuse", "x" * 464 + " argv: got string 'claude --api-key [REDACTED]'"),
    ("boom", "op 'boom' failed: upstream said Authorization: Bearer [REDACTED]"),
], ids=["a refusal", "a handler failure"])
def test_an_error_reply_never_carries_a_secret(serve: Serve, sockdir: Path, op: str,
                                               message: str) -> None:
    """Scrubbed whole, then cut: a token cut short is one the scrubber no longer knows."""
    serve({"refuse": refuse_quoting_a_secret, "boom": fail_quoting_a_secret})
    raw = Raw(sockdir / "harness.sock")
    raw.hello()
    raw.send({"id": 1, "op": op})
    assert raw.recv()["error"]["message"] == message
    raw.close()


def test_a_handler_failure_is_internal_and_logged(
        serve: Serve, sockdir: Path, caplog: pytest.LogCaptureFixture) -> None:
    serve(HANDLERS)
    client = Client(str(sockdir / "harness.sock"))
    with caplog.at_level("ERROR", logger="harness.control"), \
            pytest.raises(DaemonError) as err:
        client.request("boom")
    assert err.value.code == "internal" and "kaput" in str(err.value)
    assert any(r.exc_info and "kaput" in str(r.exc_info[1]) for r in caplog.records)
    assert client.request("echo", x="still here") == {"x": "still here"}
    client.close()


def test_requests_after_a_half_close_are_still_answered(serve: Serve, sockdir: Path) -> None:
    serve(HANDLERS)
    raw = Raw(sockdir / "harness.sock")
    raw.send(b'{"op": "hello", "proto": "1.0"}\n{"id": 1, "op": "echo", "x": 1}\n'
             b'{"id": 2, "op": "echo", "x": 2}')  # the last line has no newline
    raw.sock.shutdown(socket.SHUT_WR)
    assert raw.recv()["ok"] is True
    assert sorted([raw.recv()["id"], raw.recv()["id"]]) == [1, 2]
    assert raw.at_eof()
    raw.close()


# -- clients that hold on ---------------------------------------------------------------


async def big(req: dict[str, Any]) -> Any:
    return {"pad": "x" * 256 * 1024}


def _pipeline_unread(path: Path, n: int = 64) -> Raw:
    """A client that asks for n large replies and never reads one."""
    raw = Raw(path)
    raw.hello()
    raw.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    _send_quietly(raw.sock, b"".join(
        json.dumps({"id": i, "op": "big"}).encode() + b"\n" for i in range(n)))
    return raw


def test_close_does_not_wait_for_a_client_that_leaves_replies_unread(
        loop: LoopThread, sockdir: Path) -> None:
    """The daemon's shutdown closes the server first: a peer that never reads must not
    hold it (the runs it supervises would never be closed)."""
    path = sockdir / "harness.sock"
    srv = ControlServer(str(path), {"big": big})
    loop.run(srv.start())
    raw = _pipeline_unread(path)
    time_to_fill = 2.0  # let the server block on the full socket
    threading.Event().wait(time_to_fill)
    loop.run(srv.close(), timeout=20)
    assert not path.exists()
    raw.close()


def test_a_client_that_leaves_a_reply_unread_is_cut_off(serve: Serve, sockdir: Path) -> None:
    srv = serve({"big": big, **HANDLERS}, write_timeout=0.5, max_conns=1)
    stuck = _pipeline_unread(sockdir / "harness.sock")
    deadline = 60.0
    waited = 0.0
    while srv._conns and waited < deadline:  # cut off once its reply waited 0.5 s
        threading.Event().wait(0.1)
        waited += 0.1
    assert not srv._conns
    raw = Raw(sockdir / "harness.sock")  # its slot is free again
    assert raw.hello()["ok"] is True
    raw.send({"id": 1, "op": "echo", "x": 5})
    assert raw.recv() == {"id": 1, "ok": True, "data": {"x": 5}}
    raw.close()
    stuck.close()


def test_connections_past_the_cap_are_told_busy(serve: Serve, sockdir: Path) -> None:
    serve(HANDLERS, max_conns=2)
    path = sockdir / "harness.sock"
    held = [Raw(path), Raw(path)]
    for r in held:
        assert r.hello()["ok"] is True
    extra = Raw(path)
    assert extra.recv() == {"id": None, "ok": False, "error": {
        "code": "busy", "message": "the daemon serves at most 2 connections at once; try "
                                   "again"}}
    assert extra.at_eof()
    extra.close()
    held.pop().close()
    waited = 0.0
    while True:  # the server sees the close on its next read
        again = Raw(path)
        reply = again.hello()
        if reply.get("ok") or waited > 60:
            break
        again.close()
        threading.Event().wait(0.1)
        waited += 0.1
    assert reply["ok"] is True
    again.send({"id": 7, "op": "echo", "x": 1})
    assert again.recv()["id"] == 7
    for r in (again, *held):
        r.close()


def test_an_idle_connection_is_closed_but_not_one_waiting_for_its_reply(
        serve: Serve, sockdir: Path) -> None:
    async def slow(req: dict[str, Any]) -> Any:
        await asyncio.sleep(1.5)  # several idle timeouts long
        return "done"

    serve({"slow": slow, **HANDLERS}, idle_timeout=0.3)
    path = sockdir / "harness.sock"
    idle = Raw(path)
    assert idle.hello()["ok"] is True
    assert idle.at_eof()  # nothing asked: closed after 0.3 s
    idle.close()
    busy = Raw(path)
    busy.hello()
    busy.send({"id": 3, "op": "slow"})
    assert busy.recv() == {"id": 3, "ok": True, "data": "done"}
    busy.close()


# -- many clients ----------------------------------------------------------------------


def test_twenty_clients_of_fifty_requests_each_get_their_own_replies(
        serve: Serve, sockdir: Path) -> None:
    serve({"echo": jittery_echo})
    path = sockdir / "harness.sock"
    failures: list[str] = []

    def pipelined(c: int) -> None:
        raw = Raw(path, timeout=30)
        try:
            raw.hello()
            raw.send(b"".join(json.dumps({"id": i, "op": "echo", "tag": f"{c}/{i}"}).encode()
                              + b"\n" for i in range(1, 51)))
            got = [raw.recv() for _ in range(50)]
            if sorted(r["id"] for r in got) != list(range(1, 51)):
                failures.append(f"client {c}: ids {[r['id'] for r in got]}")
            for r in got:
                if r != {"id": r["id"], "ok": True, "data": {"tag": f"{c}/{r['id']}"}}:
                    failures.append(f"client {c}: {r}")
        except Exception as exc:
            failures.append(f"client {c}: {exc!r}")
        finally:
            raw.close()

    def one_at_a_time(c: int) -> None:
        try:
            client = Client(str(path), timeout=30)
            for i in range(1, 51):
                data = client.request("echo", tag=f"{c}/{i}")
                if data != {"tag": f"{c}/{i}"}:
                    failures.append(f"client {c}: request {i} got {data}")
            client.close()
        except Exception as exc:
            failures.append(f"client {c}: {exc!r}")

    threads = [threading.Thread(target=pipelined if c % 2 else one_at_a_time, args=(c,))
               for c in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads)
    assert failures == []


# -- the runs op -----------------------------------------------------------------------


def test_runs_pages_2500_records_with_no_duplicates_and_no_gaps(
        serve: Serve, sockdir: Path, open_ledger: OpenLedger, tmp_path: Path) -> None:
    clock = Clock(T0)
    led = open_ledger(tmp_path / "ledger", clock=clock)
    append_paged_runs(led, clock)
    serve({"runs": runs_op(led)})
    client = Client(str(sockdir / "harness.sock"))
    sizes: list[int] = []
    seqs: list[int] = []
    before: int | None = None
    while True:
        args: dict[str, Any] = {"limit": 1000}
        if before is not None:
            args["before_seq"] = before
        data = client.request("runs", **args)
        if not data["runs"]:
            assert data == {"runs": [], "oldest_seq": None}
            break
        sizes.append(len(data["runs"]))
        seqs += [r["seq"] for r in data["runs"]]
        assert data["oldest_seq"] == data["runs"][-1]["seq"]
        before = data["oldest_seq"]
    client.close()
    assert sizes == [1000, 1000, 500]
    assert seqs == list(range(2500, 0, -1))  # newest first, each once, none missing


def _filters_ledger(open_ledger: OpenLedger, d: Path) -> RunLedger:
    clock = Clock(T0 - 5 * HOUR)
    led = open_ledger(d, clock=clock)
    append_filter_runs(led, clock, missed=False)
    return led


@pytest.mark.parametrize(("args", "want"), [
    ({}, ["c/1", "b/1", "a/2", "a/1"]),
    ({"names": ["a"]}, ["a/2", "a/1"]),
    ({"names": ["a", "c"], "limit": 2}, ["c/1", "a/2"]),
    ({"outcomes": ["running"]}, ["c/1"]),
    ({"outcomes": ["failed", "success"]}, ["b/1", "a/2"]),
    ({"triggers": ["webhook", "schedule"]}, ["b/1", "a/1"]),
    ({"since": format_ns(T0 - 4 * HOUR)}, ["c/1", "b/1", "a/2"]),
    ({"until": format_ns(T0 - 4 * HOUR)}, ["a/2", "a/1"]),
    ({"since": "2026-06-15T09:30:00+01:00", "until": format_ns(T0 - 2 * HOUR)}, ["b/1"]),
    ({"names": ["a"], "outcomes": ["skipped"], "triggers": ["schedule"]}, ["a/1"]),
    ({"names": ["nobody"]}, []),
])
def test_runs_filters(serve: Serve, sockdir: Path, open_ledger: OpenLedger, tmp_path: Path,
                      args: dict[str, Any], want: list[str]) -> None:
    led = _filters_ledger(open_ledger, tmp_path / "ledger")
    serve({"runs": runs_op(led)})
    client = Client(str(sockdir / "harness.sock"))
    data = client.request("runs", **args)
    client.close()
    assert [f"{r['harness']}/{r['run_id']}" for r in data["runs"]] == want
    assert data["oldest_seq"] == (data["runs"][-1]["seq"] if want else None)
    for r in data["runs"]:
        if (r["harness"], r["run_id"]) == ("c", 1):
            assert r["outcome"] == "running"  # open, and the daemon is the one answering


def test_runs_spec_0008_form_is_newest_of_one_harness_with_no_time_bound(
        serve: Serve, sockdir: Path, open_ledger: OpenLedger, tmp_path: Path) -> None:
    clock = Clock(T0 - 30 * DAY)
    led = open_ledger(tmp_path / "ledger", clock=clock)
    for i in range(1, 26):  # a weekly-ish job: most records far older than 24h
        clock.ns += DAY
        led.append({"type": "decided", "harness": "weekly", "run_id": i, "trigger": "schedule",
                    "outcome": "missed"})
        led.append({"type": "decided", "harness": "other", "run_id": i, "trigger": "schedule",
                    "outcome": "missed"})
    serve({"runs": runs_op(led)})
    client = Client(str(sockdir / "harness.sock"))
    data = client.request("runs", name="weekly")
    assert [r["run_id"] for r in data["runs"]] == list(range(25, 5, -1))  # default limit 20
    assert {r["harness"] for r in data["runs"]} == {"weekly"}
    data = client.request("runs", name="weekly", limit=3)
    assert [r["run_id"] for r in data["runs"]] == [25, 24, 23]
    assert data["oldest_seq"] == data["runs"][-1]["seq"]
    # The query form without since is unbounded in time too; its default limit is 50.
    assert len(client.request("runs")["runs"]) == 50
    client.close()


@pytest.mark.parametrize(("args", "says"), [
    ({"names": "a"}, "names"),
    ({"names": ["a", 3]}, "names"),
    ({"names": [""]}, "names"),
    ({"since": "yesterday"}, "since"),
    ({"since": 1700000000}, "since"),
    ({"until": "2026-13-01T00:00:00Z"}, "until"),
    ({"outcomes": ["timeout"]}, "outcomes"),
    ({"outcomes": "failed"}, "outcomes"),
    ({"triggers": ["cron"]}, "triggers"),
    ({"limit": 0}, "limit"),
    ({"limit": 1001}, "limit"),
    ({"limit": "5"}, "limit"),
    ({"limit": True}, "limit"),
    ({"limit": 2.5}, "limit"),
    ({"before_seq": 0}, "before_seq"),
    ({"before_seq": -3}, "before_seq"),
    ({"before_seq": "9"}, "before_seq"),
    ({"name": ""}, "name"),
    ({"name": ["a"]}, "name"),
    ({"name": "a", "since": "2026-06-15T00:00:00Z"}, "name"),
    ({"name": "a", "limit": 0}, "limit"),
    ({"outcome": ["failed"]}, "outcome"),
])
def test_runs_invalid_values_are_bad_requests_naming_the_field(
        serve: Serve, sockdir: Path, open_ledger: OpenLedger, tmp_path: Path,
        args: dict[str, Any], says: str) -> None:
    led = _filters_ledger(open_ledger, tmp_path / "ledger")
    serve({"runs": runs_op(led)})
    client = Client(str(sockdir / "harness.sock"))
    with pytest.raises(DaemonError) as err:
        client.request("runs", **args)
    assert err.value.code == "bad_request"
    assert says in str(err.value)
    if args.get("outcomes") == ["timeout"]:
        assert all(o in str(err.value) for o in OUTCOMES)  # lists every valid outcome
    if args.get("triggers") == ["cron"]:
        assert "schedule" in str(err.value) and "webhook" in str(err.value)
    assert client.request("runs", names=["a"])["runs"]  # the connection goes on
    client.close()


# -- end to end: the CLI asks this server ----------------------------------------------


def test_the_cli_gets_the_daemons_answer(
        serve: Serve, sockdir: Path, open_ledger: OpenLedger, tmp_path: Path) -> None:
    led = open_ledger(tmp_path / "daemon-ledger")  # not where the CLI would look itself
    now = now_ns()
    led.append({"type": "opened", "harness": "nightly", "run_id": 1, "kind": "oneshot",
                "trigger": "schedule", "started_at": format_ns(now - 2 * HOUR)})
    led.append({"type": "closed", "harness": "nightly", "run_id": 1, "outcome": "failed",
                "exit_code": 2, "ended_at": format_ns(now - HOUR)})
    led.append({"type": "opened", "harness": "nightly", "run_id": 2, "kind": "oneshot",
                "trigger": "manual", "started_at": format_ns(now - MINUTE)})
    serve({"runs": runs_op(led)})
    env = dict(os.environ, XDG_RUNTIME_DIR=str(sockdir),
               XDG_STATE_HOME=str(tmp_path / "cli-state"), HOME=str(tmp_path / "home"))
    env.pop("HARNESS_SOCKET", None)

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "harness.cli", "runs", *args], env=env,
                              capture_output=True, text=True, timeout=120, check=False)

    res = cli("nightly", "--json")
    assert res.returncode == 0, res.stderr
    assert res.stderr == ""  # no "read the ledger from disk" warning
    got = json.loads(res.stdout)
    assert [(r["run_id"], r["outcome"]) for r in got] == [(2, "running"), (1, "failed")]
    assert got[1]["exit_code"] == 2
    res = cli("--harness", "nightly", "--outcome", "running", "--json")
    assert res.returncode == 0 and res.stderr == "", res.stderr
    assert [(r["run_id"], r["outcome"]) for r in json.loads(res.stdout)] == [(2, "running")]
    res = subprocess.run([sys.executable, "-m", "harness.cli", "runs", "--json"],
                         env=dict(env, XDG_RUNTIME_DIR=str(tmp_path / "nowhere"),
                                  HARNESS_SOCKET=str(sockdir / "harness.sock")),
                         capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 0 and res.stderr == "", res.stderr
    assert [r["run_id"] for r in json.loads(res.stdout)] == [2, 1]
    assert not (tmp_path / "cli-state").exists()  # the CLI never looked at files
