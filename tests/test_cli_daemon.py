"""`harness runs` when a daemon answers on the control socket (REQ-15/16, DESIGN.md §2).

A real Unix socket served by a thread speaking the protocol stands in for the daemon
(the daemon itself is built on this engine separately): the CLI must do the hello
exchange, send SPEC-0008's `{name, limit}` for a single NAME and the query form
otherwise, print what the daemon answered (open records read `running`, not
`running?`), and neither warn nor touch the ledger files.
"""

from __future__ import annotations

import json
import os
import socket
import threading
from pathlib import Path
from typing import Any

from conftest import World


class FakeDaemon:
    """Accepts connections, answers hello, records each request, replies with `runs`."""

    def __init__(self, path: str, runs: list[dict[str, Any]]) -> None:
        self.requests: list[dict[str, Any]] = []
        self.runs = runs
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
            with conn, conn.makefile("rwb") as f:
                for line in f:
                    msg = json.loads(line)
                    if msg.get("op") == "hello":
                        reply: dict[str, Any] = {"ok": True, "proto": "1.0"}
                    else:
                        self.requests.append(msg)
                        reply = {"id": msg["id"], "ok": True,
                                 "data": {"runs": self.runs,
                                          "oldest_seq": self.runs[-1]["seq"] if self.runs
                                          else None}}
                    f.write(json.dumps(reply).encode() + b"\n")
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
