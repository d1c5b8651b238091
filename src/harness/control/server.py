"""The daemon's side of the control socket (DESIGN.md §2): an asyncio Unix-socket server.

`ControlServer` owns the socket file, the accept loop and the wire protocol
(newline-delimited JSON, hello first, one reply per request carrying its id). What
each op does belongs to the handler table it is given, so it serves any table.

Invariants:
- the socket is never reachable by another user: it is bound and set to 0600 inside a
  fresh 0700 directory and only then renamed to its path;
- at most one server owns a path: an flock on ``PATH.lock`` (never opened through a
  symlink) is held while it runs, and a socket that still answers is never replaced (a
  stale one is);
- every request line gets exactly one reply line with its id (``null`` when it had no
  valid id), one that `close` cut short included (``shutting_down``), and nothing a
  client sends — malformed, oversized or a handler failure — ends the server or
  disturbs another connection;
- a connection never buffers more than about twice `max_line` bytes of unread input;
- no client holds the daemon: at most `max_conns` connections are served (the next is
  answered ``busy`` and closed), one with no request in flight is closed after
  `idle_timeout`, one that leaves a reply unread for `write_timeout` is cut off, and
  `close` drops unsent replies rather than wait for a peer that does not read.

Requests pipelined on one connection run concurrently (at most `MAX_INFLIGHT`; past
that the connection is not read) and are answered as they finish: match replies by id.
``PATH.lock`` is left in place on close; see `_take_lock` for why.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import json
import logging
import os
import socket
import stat
import tempfile
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import msgspec

from .. import __version__, paths
from ..ledger.files import open_lock_file
from ..ledger.scrub import scrub_text
from . import PROTO, SCRUBBED_AT_SOURCE, SUN_PATH, path_problem

log = logging.getLogger("harness.control")

Handler = Callable[[dict[str, Any]], Awaitable[Any]]

MAX_LINE = 1024 * 1024
HELLO_TIMEOUT = 10.0
MAX_INFLIGHT = 16  # per connection: pipelined requests beyond this wait to be read
# Each connection costs a descriptor and up to a few MB of buffers: well under the
# usual soft limit of 1,024 descriptors, with room for the runs' pipes and logs.
MAX_CONNS = 256
IDLE_TIMEOUT = 600.0  # a connection with no request in flight, after hello
WRITE_TIMEOUT = 30.0  # a reply the peer leaves unread
PROBE_TIMEOUT = 1.0
_MAX_MESSAGE = 512


class OpError(Exception):
    """Raised by a handler to answer with a specific error code and message."""

    def __init__(self, code: str, message: str) -> None:
        self.code = code
        self.message = message
        super().__init__(f"{code}: {message}")


class SocketInUse(RuntimeError):
    """Another server owns the socket path, or something not ours sits there (not a
    socket at the path, a symbolic link at its lock)."""


class _TooLarge(Exception):
    pass


def _major(proto: str) -> str:
    return proto.split(".", 1)[0]


def _error(rid: Any, code: str, message: str) -> dict[str, Any]:
    # Messages may quote client input (an op name, a proto): keep replies small. They may
    # also quote a config value or an exception's text: scrubbed, whole before the cut (a
    # token cut short is one the scrubber no longer knows).
    if code not in SCRUBBED_AT_SOURCE:
        message = scrub_text(message)[0]
    return {"id": rid, "ok": False, "error": {"code": code, "message": message[:_MAX_MESSAGE]}}


_encoder = msgspec.json.Encoder()


def _encode(msg: dict[str, Any]) -> bytes:
    # msgspec: a runs answer of 1,000 records encodes in a tenth of json.dumps's time, on
    # the event loop. It writes NaN/Infinity as null, so every line stays strict JSON.
    return _encoder.encode(msg) + b"\n"


def _no_constant(name: str) -> Any:
    # NaN and Infinity are not JSON; accepting them would echo values no peer can parse.
    raise ValueError(f"{name} is not valid JSON")


def _valid_id(msg: dict[str, Any]) -> bool:
    rid = msg.get("id")
    return isinstance(rid, int) and not isinstance(rid, bool)


class _Connection:
    """One client: serialises its reply writes and bounds its in-flight requests."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 write_timeout: float) -> None:
        self.reader = reader
        self.writer = writer
        self.write_timeout = write_timeout
        self.write_lock = asyncio.Lock()
        self.slots = asyncio.Semaphore(MAX_INFLIGHT)
        self.inflight: set[asyncio.Task[None]] = set()

    def finished(self, task: asyncio.Task[None]) -> None:
        self.inflight.discard(task)
        self.slots.release()

    async def send(self, msg: dict[str, Any]) -> None:
        await self.send_bytes(_encode(msg))

    async def send_bytes(self, data: bytes) -> None:
        # One lock around write+drain: concurrent drains on one stream are not safe on 3.11.
        async with self.write_lock:
            self.writer.write(data)
            try:
                async with asyncio.timeout(self.write_timeout):
                    await self.writer.drain()
            except TimeoutError:
                # A peer that does not read would hold this reply, and the memory of
                # every one after it, for as long as it stays connected.
                self.writer.transport.abort()
                raise ConnectionError("the client left a reply unread") from None


class ControlServer:
    """Serve `handlers` (op name → async handler) on the Unix socket at `path`."""

    def __init__(self, path: str, handlers: Mapping[str, Handler], *,
                 max_line: int = MAX_LINE, hello_timeout: float = HELLO_TIMEOUT,
                 max_conns: int = MAX_CONNS, idle_timeout: float = IDLE_TIMEOUT,
                 write_timeout: float = WRITE_TIMEOUT) -> None:
        self.path = path
        self.handlers = dict(handlers)
        self.max_line = max_line
        self.hello_timeout = hello_timeout
        self.max_conns = max_conns
        self.idle_timeout = idle_timeout
        self.write_timeout = write_timeout
        self._server: asyncio.Server | None = None
        self._lock_fd: int | None = None
        self._conns: set[asyncio.Task[Any]] = set()
        self._inode: tuple[int, int] | None = None
        self._closing = False

    # -- lifecycle ---------------------------------------------------------------------

    async def start(self) -> None:
        """Take the path (replacing a stale socket) and start accepting connections."""
        if self._server is not None:
            raise RuntimeError("control server already started")
        self._closing = False
        # Before the lock: a path no socket can have must leave nothing behind.
        if (problem := path_problem(self.path)) is not None:
            raise OSError(errno.ENAMETOOLONG, problem, self.path)
        self._take_lock()
        try:
            await self._clear_stale()
            sock = self._bind_private()
            # limit bounds readuntil's buffer; the stream pauses reading past twice that.
            self._server = await asyncio.start_unix_server(
                self._accept, sock=sock, limit=self.max_line + 1)
        except BaseException:
            self._release_lock()
            raise
        log.info("control: listening on %s", self.path)

    async def close(self) -> None:
        """Stop accepting, end every connection and remove the socket file."""
        server, self._server = self._server, None
        if server is None:
            return
        self._closing = True
        server.close()
        for task in list(self._conns):
            task.cancel()
        if self._conns:
            await asyncio.gather(*self._conns, return_exceptions=True)
        await server.wait_closed()
        self._remove_socket()
        self._release_lock()

    async def __aenter__(self) -> ControlServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _take_lock(self) -> None:
        # The lock closes the race between two starting daemons that both see a stale
        # socket: without it the second would unlink the first one's fresh socket.
        # The lock file is never unlinked: unlinking it would let two holders exist.
        lock = self.path + ".lock"
        try:
            fd = open_lock_file(lock)
        except OSError as exc:
            # A link planted there would have the daemon create or lock a file elsewhere.
            if exc.errno == errno.ELOOP and os.path.islink(lock):
                raise SocketInUse(f"{lock} is a symbolic link; not following it") from None
            raise
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise SocketInUse(f"another harness daemon owns {self.path}") from None
            raise
        self._lock_fd = fd

    def _release_lock(self) -> None:
        fd, self._lock_fd = self._lock_fd, None
        if fd is not None:
            os.close(fd)  # closing drops the flock

    async def _clear_stale(self) -> None:
        try:
            st = os.lstat(self.path)
        except FileNotFoundError:
            return
        if not stat.S_ISSOCK(st.st_mode):
            raise SocketInUse(f"{self.path} exists and is not a socket; not replacing it")
        # A daemon that predates the lock (or holds it elsewhere) still answers connects.
        try:
            _r, w = await asyncio.wait_for(asyncio.open_unix_connection(self.path),
                                           PROBE_TIMEOUT)
        except (ConnectionRefusedError, FileNotFoundError):
            pass
        except (OSError, TimeoutError) as exc:
            raise SocketInUse(f"cannot tell whether {self.path} is in use: {exc}") from None
        else:
            w.close()
            with contextlib.suppress(OSError):
                await w.wait_closed()
            raise SocketInUse(f"a harness daemon is already listening on {self.path}")
        log.warning("control: replacing stale socket %s", self.path)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)

    def _bind_private(self) -> socket.socket:
        parent = os.path.dirname(os.path.abspath(self.path))
        # mkdtemp makes the directory 0700, so the socket is unreachable to others between
        # bind and chmod; a umask change would be process-wide and race other threads.
        tmpdir = tempfile.mkdtemp(prefix=".hs-", dir=parent)
        dfd = os.open(tmpdir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        tmp = os.path.join(tmpdir, "s")
        if len(os.fsencode(tmp)) >= SUN_PATH and os.path.isdir("/proc/self/fd"):
            # The final path fits but the temporary one does not: reach the directory
            # through its descriptor instead (Linux).
            tmp = f"/proc/self/fd/{dfd}/s"
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(tmp)
            os.chmod("s", 0o600, dir_fd=dfd)
            sock.listen(128)
            os.rename("s", self.path, src_dir_fd=dfd)  # within one filesystem: atomic
            st = os.lstat(self.path)
            self._inode = (st.st_dev, st.st_ino)
        except BaseException:
            sock.close()
            with contextlib.suppress(FileNotFoundError):
                os.unlink("s", dir_fd=dfd)
            raise
        finally:
            os.close(dfd)
            os.rmdir(tmpdir)
        sock.setblocking(False)
        return sock

    def _remove_socket(self) -> None:
        # Only our own socket: never a file someone else put at the path meanwhile.
        try:
            st = os.lstat(self.path)
            if (st.st_dev, st.st_ino) == self._inode:
                os.unlink(self.path)
        except FileNotFoundError:
            pass
        self._inode = None

    # -- connections -------------------------------------------------------------------

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        if self._closing:  # accepted just before close: would escape its cancellation
            writer.close()
            return
        if len(self._conns) >= self.max_conns:
            # One short line fits the socket's buffer: written and closed, never waited on.
            writer.write(_encode(_error(None, "busy", f"the daemon serves at most "
                                        f"{self.max_conns} connections at once; try again")))
            writer.close()
            return
        self._conns.add(task)
        conn = _Connection(reader, writer, self.write_timeout)
        try:
            if await self._hello(conn):
                await self._serve(conn)
        except ConnectionError:
            pass  # the client went away: nothing to answer
        except asyncio.CancelledError:
            pass  # server closing
        except Exception:
            log.exception("control: connection failed")
        finally:
            for t in conn.inflight:
                t.cancel()
            # close() may cancel us again mid-cleanup; ending as a cancelled task would make
            # asyncio's stream callback (3.11) log a spurious error, and there is nothing
            # left to stop anyway.
            with contextlib.suppress(Exception, asyncio.CancelledError):
                if conn.inflight:
                    # Before the writer closes: each request cut short answers as it ends.
                    await asyncio.gather(*conn.inflight, return_exceptions=True)
            writer.close()
            with contextlib.suppress(Exception, asyncio.CancelledError):
                if self._closing:
                    writer.transport.abort()  # shutting down: never wait on a peer
                # A graceful close flushes unsent replies first: bounded like any write.
                async with asyncio.timeout(self.write_timeout):
                    await writer.wait_closed()
            # Timed out or cancelled mid-flush: drop what is unsent (a no-op once closed).
            writer.transport.abort()
            self._conns.discard(task)

    async def _read_line(self, conn: _Connection) -> bytes | None:
        """The next line without its newline; None at end of input."""
        try:
            return (await conn.reader.readuntil(b"\n"))[:-1]
        except asyncio.IncompleteReadError as exc:
            # A last line without "\n" still counts; an empty one is just EOF.
            return exc.partial if exc.partial.strip() else None
        except asyncio.LimitOverrunError:
            raise _TooLarge from None

    async def _too_large(self, conn: _Connection) -> None:
        await conn.send(_error(None, "too_large",
                               f"a request line may be at most {self.max_line} bytes; closing"))

    async def _hello(self, conn: _Connection) -> bool:
        try:
            line = await asyncio.wait_for(self._read_line(conn), self.hello_timeout)
        except TimeoutError:
            return False
        except _TooLarge:
            await self._too_large(conn)
            return False
        if line is None:
            return False
        msg, err = self._parse(line)
        if msg is None:
            await conn.send(err)
            return False
        rid = msg["id"] if _valid_id(msg) else None
        if msg.get("op") != "hello":
            await conn.send(_error(rid, "hello_required",
                                   'the first message must be {"op": "hello", "proto": "1.0"}'))
            return False
        proto = msg.get("proto")
        if not isinstance(proto, str) or _major(proto) != _major(PROTO):
            await conn.send(_error(rid, "unsupported_proto",
                                   f"protocol {proto!r} is not supported (server speaks {PROTO})"))
            return False
        reply: dict[str, Any] = {"ok": True, "proto": PROTO, "version": __version__}
        if rid is not None:
            # A hello that carries an id is a request like any other: its reply has the
            # request form too ({"id", "ok", "data"}), the top-level fields kept for
            # clients that read the bare handshake.
            reply.update(id=rid, data={"proto": PROTO, "version": __version__})
        await conn.send(reply)
        return True

    def _parse(self, line: bytes) -> tuple[dict[str, Any] | None, dict[str, Any]]:
        """The request object, or None and the error reply to send instead."""
        try:
            # Decode first: json.loads would guess UTF-16/32 from bytes; the wire is UTF-8.
            msg = json.loads(line.decode("utf-8"), parse_constant=_no_constant)
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            return None, _error(None, "bad_request", f"not valid JSON: {exc}")
        if not isinstance(msg, dict):
            return None, _error(None, "bad_request",
                                f"a request must be a JSON object, not {type(msg).__name__}")
        return msg, {}

    async def _serve(self, conn: _Connection) -> None:
        while True:
            try:
                # Idle only with nothing in flight: a request may take long (a stop waits
                # for its run's closed line), and its reply is what the client waits for.
                async with asyncio.timeout(None if conn.inflight else self.idle_timeout):
                    line = await self._read_line(conn)
            except TimeoutError:
                return
            except _TooLarge:
                await self._too_large(conn)
                return
            if line is None:
                break
            if not line.strip():
                continue  # a blank line is not a request: nothing to answer
            # Bounded in-flight work per connection: past it, stop reading (backpressure).
            try:
                await conn.slots.acquire()
            except asyncio.CancelledError:
                self._cut_short(conn, line)  # read, so a request the client awaits
                raise
            task = asyncio.create_task(self._answer(conn, line))
            conn.inflight.add(task)
            task.add_done_callback(conn.finished)
        # End of input: a client may half-close after its last request; still answer it.
        while conn.inflight:
            await asyncio.gather(*conn.inflight, return_exceptions=True)

    async def _answer(self, conn: _Connection, line: bytes) -> None:
        try:
            op, reply = await self._dispatch(line)
        except asyncio.CancelledError:
            self._cut_short(conn, line)
            raise
        try:
            data = _encode(reply)
        except UnicodeEncodeError:
            data = _encode(paths.texts_of(reply))  # a path that is not UTF-8
        except (TypeError, ValueError) as exc:
            log.error("control: the result of op %r is not JSON-encodable: %s", op, exc)
            data = _encode(_error(reply.get("id"), "internal",
                                  f"the result of op {op!r} could not be encoded as JSON"))
        try:
            await conn.send_bytes(data)
        except ConnectionError:
            # The peer is gone; the read loop sees it too. Raising here would only leave
            # an exception no one retrieves.
            conn.writer.close()

    def _cut_short(self, conn: _Connection, line: bytes) -> None:
        """Answer a request that `close` cut short, at once and without waiting on the
        peer: one reply per request holds at shutdown too (DESIGN.md §2), so a client is
        told the daemon went away on purpose rather than left with a bare EOF. Its
        handler may have acted already, and the reply says so. Written straight to the
        transport, which hands it to the kernel's buffer now; `close` never drains."""
        if not self._closing or conn.writer.transport.is_closing():
            return
        msg, _err = self._parse(line)
        rid = msg["id"] if msg is not None and _valid_id(msg) else None
        conn.writer.write(_encode(_error(
            rid, "shutting_down", "the daemon shut down before it answered; the request "
                                  "may or may not have taken effect")))

    async def _dispatch(self, line: bytes) -> tuple[str | None, dict[str, Any]]:
        """The op named (when there is one) and the reply to send."""
        msg, err = self._parse(line)
        if msg is None:
            return None, err
        if not _valid_id(msg):
            what = "missing" if "id" not in msg else f"not an integer: {msg['id']!r}"
            return None, _error(None, "bad_request", f"request id is {what}")
        rid = msg["id"]
        op = msg.get("op")
        if not isinstance(op, str) or not op:
            return None, _error(rid, "bad_request", "request op must be a non-empty string")
        if op == "hello":  # harmless to repeat; answers what the handshake did
            return op, {"id": rid, "ok": True, "data": {"proto": PROTO, "version": __version__}}
        handler = self.handlers.get(op)
        if handler is None:
            known = ", ".join(sorted(["hello", *self.handlers]))
            return op, _error(rid, "unknown_op", f"unknown op {op[:64]!r} (known: {known})")
        try:
            data = await handler(msg)
        except OpError as exc:
            return op, _error(rid, str(exc.code), str(exc.message))
        except Exception as exc:
            log.exception("control: op %r failed", op)
            detail = str(exc) or type(exc).__name__
            return op, _error(rid, "internal", f"op {op!r} failed: {detail}")
        return op, {"id": rid, "ok": True, "data": data}
