"""DESIGN.md §2 ("The stable surface") and SPEC-0022 REQ-14/REQ-16 as a tool outside the
code base meets them: the installed `harness` CLI and a real `harness daemon` in a
throwaway XDG world, read only through what they print, exit with, write to disk and
say on the control socket.

Each test pins one §2 promise that no other test pins end to end, exactly (bytes, exit
codes, field sets), so a change that keeps the code's own tests green but moves the
surface a script relies on fails here. Work ledgers and run ledgers are written by hand
with the standard library alone, as another tool would write them to the contract.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import stat
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import harness
from conftest import World
from daemons import DEADLINE, Daemons, reaped, until


def canonical(obj: Any) -> bytes:
    """§2's canonical JSON, spelled out with the standard library only."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False).encode("utf-8")


# -- the control socket: one reply per request, shutdown included ----------------------


def test_a_request_in_flight_when_the_daemon_shuts_down_is_answered(
        world: World, daemons: Daemons) -> None:
    """§2: each request gets exactly one reply. A `stop` waiting out its run's grace when
    SIGTERM reaches the daemon is answered `shutting_down` (the CLI says so and exits 1),
    not dropped with the connection, which the CLI could only call a lost daemon."""
    termed = world.root / "termed"
    daemons.write_config(
        '[harness.stub]\nkind = "oneshot"\n'
        f'argv = ["sh", "-c", "trap \\"touch {termed}\\" TERM; while :; do sleep 0.1; done"]\n')
    proc = daemons.start()
    assert world.harness("trigger", "stub").stdout == "1\n"
    until("the run to be live", lambda: world.harness("list", "--json").stdout.count(
        '"state": "running"') == 1)
    with reaped(subprocess.Popen([sys.executable, "-m", "harness.cli", "stop", "stub"],
                                 env=world.env, text=True, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE)) as stop:
        until("the stop's SIGTERM to reach the run", termed.exists)
        proc.send_signal(signal.SIGTERM)
        out, err = stop.communicate(timeout=DEADLINE)
    assert (stop.returncode, out, err) == (
        1, "", "harness: the daemon shut down before it answered; the request may or may "
               "not have taken effect (shutting_down)\n")
    assert proc.wait(timeout=DEADLINE) == 0, daemons.stderr()


# -- the run ledger: files, modes and line bytes as REQ-1/REQ-2 and §4 say -----------


def test_run_ledger_lines_are_canonical_chained_and_in_the_utc_day_file(
        world: World, daemons: Daemons) -> None:
    """Day files named by the UTC day of each line's `at` (a daemon in UTC+14 included),
    dir 0700 and files 0600, every line its own canonical bytes with `v`, `seq`, `type`,
    `at`, `harness`, `run_id`, `prev` and `hash`, `hash` = sha256 of the line without it,
    `prev` the previous hash (64 zeros first), seq 1, 2, … A non-ASCII state home is
    written as UTF-8, not escaped."""
    world.env["TZ"] = "Pacific/Kiritimati"
    state_home = world.root / "stäte☃"
    world.env["XDG_STATE_HOME"] = str(state_home)
    daemons.write_config('[harness.ok]\nkind = "oneshot"\nargv = ["true"]\n')
    daemons.start()
    ran = world.harness("trigger", "ok", "--wait")
    assert ran.returncode == 0, ran.stderr
    ledger = state_home / "harness" / "ledger"
    assert stat.S_IMODE(ledger.stat().st_mode) == 0o700
    days = sorted(p for p in ledger.iterdir() if p.suffix == ".jsonl")
    prev, seq = "0" * 64, 0
    for day in days:
        assert stat.S_IMODE(day.stat().st_mode) == 0o600
        for raw in day.read_bytes().splitlines():
            line = json.loads(raw)
            assert canonical(line) == raw
            assert {"v", "seq", "type", "at", "harness", "run_id", "prev", "hash"} <= set(line)
            assert line["v"] == 1
            seq += 1
            assert line["seq"] == seq
            assert line["prev"] == prev
            digest = line.pop("hash")
            assert hashlib.sha256(canonical(line)).hexdigest() == digest
            prev = digest
            assert day.name == f"{line['at'][:10]}.jsonl"
            assert len(line["at"]) == len("2026-01-02T03:04:05.123456789Z")
            assert line["at"].endswith("Z")
    assert seq == 2  # opened and closed
    opened = json.loads(days[-1].read_bytes().splitlines()[0])
    assert opened["log"] == f"{state_home}/harness/jobs/ok/1.log"
    assert "stäte☃".encode() in days[-1].read_bytes()


# -- harness runs: REQ-14 and REQ-16 over one hand-written ledger ----------------------


def _rfc(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.%f000Z")


def _write_run_ledger(ledger: Path, lines: list[dict[str, Any]]) -> None:
    """A run ledger written to REQ-1/REQ-2 and §4 with the standard library alone."""
    ledger.mkdir(mode=0o700, parents=True)
    prev, days = "0" * 64, {}  # type: tuple[str, dict[str, list[bytes]]]
    for seq, fields in enumerate(lines, 1):
        line = {"v": 1, **fields, "seq": seq, "prev": prev}
        line["hash"] = prev = hashlib.sha256(canonical(line)).hexdigest()
        days.setdefault(line["at"][:10], []).append(canonical(line) + b"\n")
    for day, body in days.items():
        fd = os.open(ledger / f"{day}.jsonl", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.write(fd, b"".join(body))
        os.close(fd)


def _sweep_ledger(world: World) -> datetime:
    now = datetime.now(UTC)
    old, hour = now - timedelta(hours=30), now - timedelta(hours=1)
    _write_run_ledger(world.ledger, [
        # a: no started_at, its first line 30 h ago: outside the default 24 h sweep
        {"type": "opened", "at": _rfc(old), "harness": "a", "run_id": 1, "kind": "oneshot",
         "trigger": "manual", "outcome": "running", "future_field": {"x": [1]}},
        {"type": "opened", "at": _rfc(hour), "harness": "b", "run_id": 1, "kind": "oneshot",
         "trigger": "manual", "outcome": "running", "started_at": _rfc(hour)},
        {"type": "closed", "at": _rfc(now - timedelta(minutes=30)), "harness": "a",
         "run_id": 1, "outcome": "success", "exit_code": 0},
        {"type": "decided", "at": _rfc(now - timedelta(minutes=20)), "harness": "c",
         "run_id": 1, "kind": "oneshot", "trigger": "schedule", "outcome": "skipped",
         "reason": "overlap", "started_at": _rfc(now - timedelta(minutes=20)),
         "cost_usd": 1e-05, "todo_id": "Zürich ☃"},
        {"type": "updated", "at": _rfc(now - timedelta(minutes=10)), "harness": "b",
         "run_id": 1, "unknown": "ignored"},
    ])
    return now


def test_runs_offline_folds_filters_and_marks_open_records_running_query(
        world: World) -> None:
    """REQ-16 with no daemon: the same fold and filters, `running?` for the open record,
    the first line's seq for each record, unknown fields ignored, the first line's `at`
    standing in for a missing started_at, floats and non-ASCII as written, a warning on
    stderr, and not one byte of the ledger changed."""
    _sweep_ledger(world)
    before = {p.name: p.read_bytes() for p in world.ledger.iterdir()}
    res = world.harness("runs", "--json")
    assert res.returncode == 0, res.stderr
    assert res.stderr == ("harness: daemon not running; read the ledger from disk "
                          f"({world.ledger})\n")
    got = json.loads(res.stdout)
    assert [(r["harness"], r["run_id"], r["seq"], r["outcome"]) for r in got] == [
        ("c", 1, 4, "skipped"), ("b", 1, 2, "running?")]
    assert got[0]["cost_usd"] == 1e-05 and got[0]["todo_id"] == "Zürich ☃"
    assert "unknown" not in got[1] and "future_field" not in json.dumps(got)
    assert '"cost_usd": 1e-05' in res.stdout and "Zürich ☃" in res.stdout
    wider = json.loads(world.harness("runs", "--since", "31h", "--json").stdout)
    assert [(r["harness"], r["seq"]) for r in wider] == [("c", 4), ("b", 2), ("a", 1)]
    table = world.harness("runs").stdout.splitlines()
    assert table[2].split()[-4:] == ["running?", "manual", "running?", "—"]
    assert {p.name: p.read_bytes() for p in world.ledger.iterdir()} == before


def test_runs_through_the_daemon_matches_the_files_but_reads_running(
        world: World, daemons: Daemons) -> None:
    """REQ-14/REQ-15 against REQ-16: over the same ledger (the hand-written one, which the
    booting daemon reconciles, and a live run of its own) the daemon's answer and the
    files' are the same records, field for field, except that the live run reads
    `running` from the daemon and `running?` from the files."""
    _sweep_ledger(world)
    daemons.write_config('[harness.live]\nkind = "oneshot"\nargv = ["sleep", "600"]\n')
    daemons.start()
    assert world.harness("trigger", "live").stdout == "1\n"
    online = world.harness("runs", "--since", "31h", "--json")
    assert online.returncode == 0 and online.stderr == ""
    offline = world.harness("--socket", str(world.root / "nowhere.sock"), "runs", "--since",
                            "31h", "--json")
    assert offline.returncode == 0, offline.stderr
    got = json.loads(online.stdout)
    assert [(r["harness"], r["seq"], r["outcome"]) for r in got] == [
        ("live", 7, "running"), ("c", 4, "skipped"), ("b", 2, "interrupted"),
        ("a", 1, "success")]
    assert online.stdout == offline.stdout.replace('"running?"', '"running"')
    assert offline.stdout.count('"running?"') == 1


def test_a_missing_ledger_is_empty_and_an_unreadable_one_fails(world: World) -> None:
    """REQ-14/REQ-16 and §2: no ledger directory is an empty ledger (exit 0, `[]`, nothing
    created); a ledger path that is a file exits non-zero, naming it."""
    res = world.harness("runs", "--json")
    assert (res.returncode, res.stdout) == (0, "[]\n")
    assert not (world.root / "state").exists()
    world.state.mkdir(parents=True)
    world.ledger.write_text("")
    for args in (("runs", "--json"), ("runs",), ("runs", "x")):
        res = world.harness(*args)
        assert (res.returncode, res.stdout) == (1, ""), args
        assert res.stderr == ("harness: daemon not running, and the run ledger could not be "
                              f"read: ledger path {world.ledger} is not a directory\n")


# -- work ledgers and their anchors, written by hand ---------------------------------


def _write_work_ledger(workdir: Path, run_id: str, n: int, per_segment: int) -> str:
    """A work ledger written to §2's row contract with the standard library alone, rolled
    into segments of `per_segment` rows; returns the head hash."""
    d = workdir / ".harness" / "runtime" / "ledger" / run_id
    d.mkdir(parents=True)
    prev, rows = "0" * 64, []
    for seq in range(1, n + 1):
        if seq == 1:
            kind, task, payload = "run.open", None, {"f": 1e-05, "name": "Zürich ☃"}
        else:
            kind, task, payload = "task.scheduled", f"t{seq}", {"deps": [], "x": 0.1}
        entry = hashlib.sha256(canonical({"kind": kind, "payload": payload,
                                          "prev_hash": prev, "task_id": task})).hexdigest()
        rows.append(canonical({"seq": seq, "ts": "2026-12-03T10:00:00Z", "kind": kind,
                               "task_id": task, "payload": payload, "prev_hash": prev,
                               "entry_hash": entry, "schema_version": 1}) + b"\n")
        prev = entry
    for i in range(0, n, per_segment):
        (d / f"{i // per_segment:06d}.jsonl").write_bytes(b"".join(rows[i:i + per_segment]))
    return prev


def _git(repo: Path, *args: str, env: dict[str, str]) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], env=env, check=True,
                          capture_output=True, text=True, timeout=60).stdout.strip()


def test_two_machines_anchor_one_hand_written_chain_to_one_tree(
        world: World, tmp_path: Path) -> None:
    """§2's anchor tree: a hand-written 2,500-row chain, rolled into segments of 999 on
    one machine and kept in one segment on the other, verifies on both and anchors, with
    no git user configured anywhere, to the same tree: `chunk-000000.jsonl` …
    `chunk-000002.jsonl` of 1,000, 1,000 and 500 lines, byte for byte the rows, and
    `LEDGER.json` = {run_id, head_hash, entry_count, chunk_count, format_version}."""
    home = tmp_path / "nohome"
    home.mkdir()
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home),
           "GIT_CONFIG_NOSYSTEM": "1", "TZ": "UTC",
           "XDG_STATE_HOME": world.env["XDG_STATE_HOME"]}
    trees, heads = [], []
    for name, per_segment in (("one", 999), ("two", 2500)):
        repo = tmp_path / name
        repo.mkdir()
        _git(repo, "init", "-q", env=env)
        heads.append(_write_work_ledger(repo, "r1", 2500, per_segment))
        res = subprocess.run([sys.executable, "-m", "harness.cli", "ledger", "verify", "r1",
                              "--json"], cwd=repo, env=env, capture_output=True, text=True,
                             timeout=120)
        assert res.returncode == 0, res.stderr
        doc = json.loads(res.stdout)
        assert (doc["run_id"], doc["ok"], doc["entry_count"], doc["head_hash"],
                doc["torn_tail"]) == ("r1", True, 2500, heads[-1], False)
        res = subprocess.run([sys.executable, "-m", "harness.cli", "ledger", "anchor", "r1"],
                             cwd=repo, env=env, capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, res.stderr
        ref = "refs/harness/work-ledger/r1"
        trees.append(_git(repo, "rev-parse", f"{ref}^{{tree}}", env=env))
        assert _git(repo, "log", "-1", "--format=%an <%ae>", ref, env=env) == \
            "harness <harness@localhost>"
        names = _git(repo, "ls-tree", "--name-only", ref, env=env).split("\n")
        assert names == ["LEDGER.json", "chunk-000000.jsonl", "chunk-000001.jsonl",
                         "chunk-000002.jsonl"]
        rows = b"".join(p.read_bytes() for p in sorted(
            (repo / ".harness" / "runtime" / "ledger" / "r1").iterdir()))
        chunks = [subprocess.run(["git", "-C", str(repo), "cat-file", "blob",
                                  f"{ref}:chunk-00000{i}.jsonl"], env=env, check=True,
                                 capture_output=True, timeout=60).stdout for i in range(3)]
        assert [c.count(b"\n") for c in chunks] == [1000, 1000, 500]
        assert b"".join(chunks) == rows
        meta = _git(repo, "cat-file", "blob", f"{ref}:LEDGER.json", env=env)
        assert json.loads(meta) == {"run_id": "r1", "head_hash": heads[-1],
                                    "entry_count": 2500, "chunk_count": 3,
                                    "format_version": 1}
    assert heads[0] == heads[1]
    assert trees[0] == trees[1]


# -- trigger --wait and durations in config --------------------------------------------


def test_trigger_wait_exits_with_the_runs_code_through_a_real_daemon(
        world: World, daemons: Daemons) -> None:
    """§2: `trigger --wait` exits with the run's exit code, 124 for timed_out (a bare
    `timeout = 1` in config is one second, `"500ms"` half of one), 75 for skipped, 1 for
    a failure without a code (a signal death, a spawn failure)."""
    daemons.write_config(
        '[harness.three]\nkind = "oneshot"\nargv = ["sh", "-c", "exit 3"]\n'
        '[harness.ok]\nkind = "oneshot"\nargv = ["true"]\n'
        '[harness.signalled]\nkind = "oneshot"\nargv = ["sh", "-c", "kill -9 $$"]\n'
        '[harness.nospawn]\nkind = "oneshot"\nargv = ["/nonexistent/harness-binary"]\n'
        '[harness.bare]\nkind = "oneshot"\nargv = ["sleep", "600"]\ntimeout = 1\n'
        '[harness.ms]\nkind = "oneshot"\nargv = ["sleep", "600"]\ntimeout = "500ms"\n'
        '[harness.held]\nkind = "oneshot"\nargv = ["sleep", "600"]\non_overlap = "skip"\n')
    daemons.start()
    codes = {name: world.harness("trigger", name, "--wait").returncode
             for name in ("three", "ok", "signalled", "nospawn", "bare", "ms")}
    assert codes == {"three": 3, "ok": 0, "signalled": 1, "nospawn": 1, "bare": 124,
                     "ms": 124}
    assert world.harness("trigger", "held").stdout == "1\n"
    skipped = world.harness("trigger", "held", "--wait")
    assert (skipped.returncode, skipped.stderr) == (
        75, "held: run 2 skipped\nheld run 2: skipped (overlap)\n")
    outcomes = {r["harness"]: (r["outcome"], r.get("exit_code"), r.get("reason"))
                for r in json.loads(world.harness("runs", "--json").stdout)
                if r["harness"] != "held"}
    assert outcomes == {"three": ("failed", 3, None), "ok": ("success", 0, None),
                        "signalled": ("failed", -1, None),
                        "nospawn": ("failed", None, "spawn"),
                        "bare": ("timed_out", -1, None), "ms": ("timed_out", -1, None)}


def test_every_command_that_prints_data_takes_json(world: World, daemons: Daemons) -> None:
    """§2: each command takes `--json` where it prints data. `trigger` prints the run id
    it started, `start`/`stop`/`restart` what they did to which run: with `--json`, the
    daemon's answer as one JSON object on stdout. `trigger --wait --json` prints the
    run's record in place of the output it would stream (stdout stays one JSON value)
    and still exits with the run's code."""
    daemons.write_config(
        '[harness.out]\nkind = "oneshot"\nargv = ["sh", "-c", "echo hello; exit 3"]\n'
        '[harness.res]\nkind = "resident"\nargv = ["sleep", "600"]\n')
    daemons.start()

    def as_json(*args: str, code: int = 0) -> Any:
        res = world.harness(*args, "--json")
        assert res.returncode == code, res.stderr
        return json.loads(res.stdout)

    assert as_json("trigger", "out") == {"decision": "started", "run_id": 1}
    rec = as_json("trigger", "out", "--wait", code=3)
    assert {k: rec[k] for k in ("harness", "run_id", "outcome", "exit_code", "trigger")} \
        == {"harness": "out", "run_id": 2, "outcome": "failed", "exit_code": 3,
            "trigger": "manual"}
    assert rec == json.loads(world.harness("runs", "out", "--json").stdout)[0]
    # Without --json the same wait streams the run's output.
    assert world.harness("trigger", "out", "--wait").stdout == "hello\n"
    until("the resident to be up", lambda: world.harness("list", "--json").stdout.count(
        '"state": "running"') == 1)
    assert as_json("stop", "res") == {"name": "res", "kind": "resident", "action": "stopped",
                                      "run_id": 1, "outcome": "cancelled",
                                      "reason": "operator"}
    assert as_json("start", "res") == {"name": "res", "kind": "resident",
                                       "action": "started", "run_id": 2}
    assert as_json("restart", "res") == {"name": "res", "kind": "resident",
                                         "action": "restarted", "replaced": 2, "run_id": 3}


# -- the control socket, byte for byte, against the real daemon -----------------------


def test_the_control_protocol_byte_for_byte(world: World, daemons: Daemons) -> None:
    """§2's wire: a hello with proto "1.0" answered first; then each request — pipelined,
    malformed, unknown or a `runs` query — one reply line carrying its id, in the error
    shape {"id", "ok": false, "error": {"code", "message"}} when it fails; the `runs` op
    answering {"runs": [newest first, each with its seq], "oldest_seq": N}."""
    daemons.write_config('[harness.ok]\nkind = "oneshot"\nargv = ["true"]\n')
    daemons.start()
    for _ in range(3):
        assert world.harness("trigger", "ok", "--wait").returncode == 0
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(DEADLINE)
        s.connect(str(daemons.socket))
        f = s.makefile("rwb")
        f.write(b'{"op": "hello", "proto": "1.0"}\n')
        f.flush()
        hello = json.loads(f.readline())
        assert hello == {"ok": True, "proto": "1.0", "version": harness.__version__}
        f.write(b'{"id": 1, "op": "runs", "names": ["ok"], "limit": 2}\n'
                b'not json\n'
                b'{"id": 2, "op": "no_such_op"}\n'
                b'{"id": 3, "op": "runs", "limit": 1001}\n'
                b'{"id": 4, "op": "runs", "names": ["ok"], "before_seq": 3}\n'
                b'{"id": 5, "op": "runs", "name": "ok", "limit": 1}\n')
        f.flush()
        replies = [json.loads(f.readline()) for _ in range(6)]
    by_id = {r["id"]: r for r in replies}
    assert sorted(by_id, key=str) == sorted([1, 2, 3, 4, 5, None], key=str)
    for rid, code in ((None, "bad_request"), (2, "unknown_op"), (3, "bad_request")):
        r = by_id[rid]
        assert set(r) == {"id", "ok", "error"} and r["ok"] is False
        assert set(r["error"]) == {"code", "message"} and r["error"]["code"] == code
    assert by_id[3]["error"]["message"] == "limit must be between 1 and 1000, got 1001"
    for rid in (1, 4, 5):
        assert set(by_id[rid]) == {"id", "ok", "data"} and by_id[rid]["ok"] is True
        assert set(by_id[rid]["data"]) == {"runs", "oldest_seq"}
    page = by_id[1]["data"]
    assert [(r["run_id"], r["seq"]) for r in page["runs"]] == [(3, 5), (2, 3)]
    assert page["oldest_seq"] == 3
    older = by_id[4]["data"]
    assert [(r["run_id"], r["seq"]) for r in older["runs"]] == [(1, 1)]
    assert older["oldest_seq"] == 1
    assert [r["run_id"] for r in by_id[5]["data"]["runs"]] == [3]


# -- harness daemon: SIGINT as SIGTERM ---------------------------------------------------


def test_sigint_shuts_the_daemon_down_cleanly(world: World, daemons: Daemons) -> None:
    """§2: SIGTERM/SIGINT shut the daemon down cleanly (REQ-7, REQ-20) — Ctrl-C as well as
    a service manager's SIGTERM: exit 0, the socket removed, the live run's record closed
    interrupted/shutdown with an end time, and the chain intact."""
    daemons.write_config('[harness.live]\nkind = "oneshot"\nargv = ["sleep", "600"]\n')
    proc = daemons.start()
    assert world.harness("trigger", "live").stdout == "1\n"
    until("the run to be live", lambda: world.harness("list", "--json").stdout.count(
        '"state": "running"') == 1)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=DEADLINE) == 0, daemons.stderr()
    assert not daemons.socket.exists()
    res = world.harness("runs", "live", "--json")
    assert res.returncode == 0, res.stderr
    [rec] = json.loads(res.stdout)
    assert (rec["outcome"], rec["reason"], rec["exit_code"]) == ("interrupted", "shutdown", -1)
    assert rec["ended_at"] >= rec["started_at"]
    verified = world.harness("ledger", "verify", "--json")
    assert verified.returncode == 0, verified.stdout
    assert (json.loads(verified.stdout)["ok"], json.loads(verified.stdout)["entry_count"]) \
        == (True, 2)
