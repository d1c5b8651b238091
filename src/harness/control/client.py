"""The CLI's side of the control socket.

Invariants: a client either completes the hello exchange or reports why the daemon
cannot be used — "not running" (no socket, or nobody listening) or "not
responding" (something holds the socket but does not answer hello in time) — so
commands that can read the ledger themselves (REQ-16) know when to. A request is
answered, or fails within about `timeout` seconds of the daemon going silent; an op
that may have to wait out a stop grace (`PATIENT_OPS`) is waited for as long as the
daemon keeps answering a fresh hello, and given up within about twice `timeout` once
it does not.
"""

from __future__ import annotations

import json
import os
import socket
import stat
from typing import Any

import msgspec

from ..ledger.scrub import scrub_text
from . import PROTO, SCRUBBED_AT_SOURCE, path_problem

_decode = msgspec.json.Decoder().decode
_CHUNK = 1 << 16

# Ops that may stop a run and so wait out its SIGTERM grace (runner.DEFAULT_GRACE), then
# a synced closed line — several times over for a reload of several residents, or a
# stop queued behind another on the same harness. No fixed read timeout fits them all.
PATIENT_OPS = frozenset({"start", "stop", "restart", "reload", "trigger"})


class DaemonUnreachable(Exception):
    """No daemon answers at the socket `sock`: `absent` when none listens there (nothing
    at the path, or a socket no process holds), so that starting one is the remedy."""

    def __init__(self, why: str, sock: str, *, absent: bool = False) -> None:
        self.why = why
        self.sock = sock
        self.absent = absent
        super().__init__(f"daemon {why}")

    def advice(self) -> str:
        """What a command says when it needs the daemon. Starting one helps only where none
        listens: a stuck or stopped (SIGSTOP) daemon holds the socket, and a second would
        refuse to start. Scrubbed, as DaemonError's words are, for every command that
        shows it: --socket or $XDG_RUNTIME_DIR may name a directory after a token."""
        return scrub_text(f"daemon {self.why} ({self.sock})")[0] + (
            "; start it with `harness daemon`" if self.absent else "")


class DaemonLost(Exception):
    """The connection to the daemon failed during a request: closed, reset, or silent
    past the timeout. Not an OSError, so that a command's own failures (standard output
    refusing a write, a file it reads) are never taken for the daemon's."""


class DaemonError(Exception):
    """The daemon answered `request` with an error, or with a reply of no use
    (`bad_reply`). Its code and message are what the daemon said, scrubbed here once for
    every command that shows them: an error never carries a credential, whatever the
    other end sent. (Escaping them for a terminal is the printer's: `fail`, `visible`.)"""

    def __init__(self, code: str, message: str) -> None:
        self.code = scrub_text(code)[0]
        # A config problem's values were scrubbed where it was made (SCRUBBED_AT_SOURCE).
        super().__init__(message if self.code in SCRUBBED_AT_SOURCE
                         else scrub_text(message)[0])


def _preview(value: Any) -> str:
    """The start of a reply for an error message, scrubbed: an error never carries a
    credential, whatever the other end sent."""
    text = scrub_text(json.dumps(value, ensure_ascii=False))[0]
    return text if len(text) <= 60 else f"{text[:59]}…"


def listing(data: Any, key: str) -> list[dict[str, Any]]:
    """The objects a listing op answered under `key` (a bare list too: an old daemon's
    runs reply), or DaemonError: a reply of another shape must end in a clear error,
    not in a traceback at the first field the caller reads."""
    items = data.get(key) if isinstance(data, dict) else data
    if items is None:
        return []
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise DaemonError("bad_reply", f"the daemon's {key} reply is not a list of objects: "
                                       f"{_preview(data)}")
    return items


def reply_object(data: Any, op: str, **fields: type) -> dict[str, Any]:
    """`data`, what the daemon answered to `op`, as the object it must be, holding each of
    `fields` as a value of its type (an int being no bool); or DaemonError: like
    `listing`, a reply of another shape ends in a clear error, not in a traceback at the
    first field the caller reads."""
    if isinstance(data, dict) and all(
            isinstance(v := data.get(k), t) and not (t is int and isinstance(v, bool))
            for k, t in fields.items()):
        return data
    needs = f" with {', '.join(fields)}" if fields else ""
    raise DaemonError("bad_reply", f"the daemon's {op} reply is not an object{needs}: "
                                   f"{_preview(data)}")


def _socket_or_nothing(path: str) -> bool:
    """Whether `path` holds a socket or nothing (a connection refused there means no
    daemon listens); a path that cannot be examined keeps that answer."""
    try:
        return stat.S_ISSOCK(os.stat(path).st_mode)
    except OSError:
        return True


class Client:
    def __init__(self, path: str, timeout: float = 5.0) -> None:
        self.path = path
        self.timeout = timeout
        self._next_id = 0
        # Our own line buffer, not makefile(): a buffered reader is left inconsistent by a
        # timeout, and a patient request must be able to keep reading after one.
        self._buf = bytearray()
        if (problem := path_problem(path)) is not None:
            # The words the daemon refuses the same path with, not socket's "AF_UNIX
            # path too long", which names neither the size nor the limit.
            raise DaemonUnreachable(f"not reachable ({problem})", path)
        try:
            self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        except OSError as exc:
            # Out of descriptors (EMFILE) or memory: no socket to close, the same answer.
            raise DaemonUnreachable(f"not reachable ({exc.strerror or exc})", path) from None
        try:
            self._sock.settimeout(timeout)
            self._sock.connect(path)
        except (FileNotFoundError, ConnectionRefusedError):
            self._sock.close()
            if not _socket_or_nothing(path):
                # A file of another kind there: a daemon refuses to replace it, so
                # "start one" is no remedy.
                raise DaemonUnreachable("not reachable (not a socket)", path) from None
            raise DaemonUnreachable("not running", path, absent=True) from None
        except OSError as exc:
            self._sock.close()
            raise DaemonUnreachable(f"not reachable ({exc.strerror or exc})", path) from None
        try:
            reply = self._roundtrip({"op": "hello", "proto": PROTO})
        except (OSError, ValueError):
            self.close()
            raise DaemonUnreachable("not responding", path) from None
        if not isinstance(reply, dict) or reply.get("ok") is False:
            self.close()
            raise DaemonUnreachable("not responding (protocol mismatch)", path)

    def _roundtrip(self, msg: dict[str, Any], *, patient: bool = False) -> Any:
        """The reply to `msg`: OSError when the connection fails, ValueError when the
        reply is no JSON (nested past the decoder's depth included, which msgspec raises
        as a RecursionError)."""
        self._sock.sendall(json.dumps(msg).encode() + b"\n")
        line = self._read_line(patient)
        try:
            # msgspec: a 1,000-record runs answer decodes in a fraction of json.loads's time.
            return _decode(line)
        except RecursionError:
            raise ValueError("JSON nested too deeply") from None

    def _read_line(self, patient: bool) -> bytes:
        scanned = 0
        while True:
            nl = self._buf.find(b"\n", scanned)
            if nl >= 0:
                line = bytes(self._buf[:nl])
                del self._buf[:nl + 1]
                return line
            scanned = len(self._buf)
            try:
                chunk = self._sock.recv(_CHUNK)
            except TimeoutError:
                if not patient:
                    raise
                # Silence is expected while a run ignores SIGTERM; a daemon whose loop
                # no longer answers a new connection is not coming back with an answer.
                if not self._daemon_answers():
                    raise TimeoutError("timed out, and the daemon no longer answers "
                                       "a new connection") from None
                continue
            if not chunk:
                raise OSError("connection closed")
            self._buf += chunk

    def _daemon_answers(self) -> bool:
        try:
            Client(self.path, self.timeout).close()
        except DaemonUnreachable:
            return False
        return True

    def request(self, op: str, **args: Any) -> Any:
        """The `data` of the daemon's answer to `op`; DaemonError when it answered with an
        error or with a reply of another shape than the protocol's, DaemonLost when the
        connection failed before an answer came."""
        self._next_id += 1
        try:
            reply = self._roundtrip({"id": self._next_id, "op": op, **args},
                                    patient=op in PATIENT_OPS)
        except OSError as exc:
            raise DaemonLost(str(exc)) from None
        except ValueError as exc:
            raise DaemonError("bad_reply", f"the daemon's reply to {op} is not JSON ({exc})"
                              ) from None
        if not isinstance(reply, dict):
            raise DaemonError("bad_reply", f"the daemon's reply to {op} is not a JSON object: "
                                           f"{_preview(reply)}")
        if not reply.get("ok"):
            err = reply.get("error")
            if not isinstance(err, dict):
                raise DaemonError("bad_reply", f"the daemon's reply to {op} is neither ok nor "
                                               f"an error object: {_preview(reply)}")
            message = err.get("message")
            raise DaemonError(str(err.get("code", "error")),
                              message if isinstance(message, str) else _preview(err))
        return reply.get("data")

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
