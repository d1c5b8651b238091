"""Concurrency stress against a real daemon, in place of a race detector (SPEC-0022 REQ-20).

The daemon runs under `python -X dev -X faulthandler` (asyncio debug mode, unraisable and
"never awaited" warnings surfaced, a faulthandler that dumps every thread's stack on SIGABRT
and from a watchdog) through tests/faultdaemon.py with a healthy disk. Thirty harnesses —
20 one-shots (quick exits, failures, timeouts; skip, queue and replace overlap policies) and
10 residents (crash loops, long runners) — are driven by client threads that trigger
one-shots and start/stop/restart residents concurrently, while other threads keep asking
`runs`, `jobs`, `list` and `daemon_info`. Afterwards the ledger must be whole: every record
closed, exactly one closed line per opened line, run ids unique and gap-free per harness,
the chain verifying, no traceback or asyncio task warning on stderr, and SIGTERM exit 0.
"""

from __future__ import annotations

import collections
import json
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from conftest import World
from daemons import LAUNCHER, FaultDaemons, request, until
from harness.control.client import Client, DaemonError
from ledgertools import all_lines, verify_ok

ONESHOTS = 20
RESIDENTS = 10
TRIGGERS_PER_THREAD = 150
RESIDENT_OPS_PER_THREAD = 80
WATCHDOG = 600.0  # a daemon still alive this long dumps its stacks (the test ends sooner)
SETTLE = 120.0


def _config(world: World) -> tuple[str, list[str], list[str]]:
    pids = world.root / "pids"
    oneshot_argv = [
        '["true"]',
        '["false"]',
        '["sh", "-c", "exit 3"]',
        '["sh", "-c", "sleep 0.05"]',
        # Outlives its timeout: timed_out, the group SIGTERMed.
        f'["sh", "-c", "touch {pids}/$$; exec sleep 5"]',
    ]
    policies = ["skip", "queue", "replace", "skip"]
    text = []
    oneshots, residents = [], []
    for i in range(ONESHOTS):
        name = f"o{i:02d}"
        oneshots.append(name)
        text.append(f'[harness.{name}]\nkind = "oneshot"\nargv = {oneshot_argv[i % 5]}\n'
                    f'on_overlap = "{policies[i % 4]}"\ntimeout = "300ms"\n'
                    "keep_runs = 5\n")
    resident_argv = [
        '["sh", "-c", "sleep 0.1; exit 1"]',  # a crash loop
        f'["sh", "-c", "touch {pids}/$$; exec sleep 600"]',  # up until stopped
        '["sh", "-c", "exit 0"]',  # exits at once, cleanly
    ]
    restarts = ["always", "on-failure", "unless-stopped", "no"]
    for i in range(RESIDENTS):
        name = f"r{i:02d}"
        residents.append(name)
        text.append(f'[harness.{name}]\nkind = "resident"\nargv = {resident_argv[i % 3]}\n'
                    f'restart = "{restarts[i % 4]}"\nrestart_delay = "50ms"\n')
    return "\n".join(text), oneshots, residents


class Load:
    """Client threads hammering one daemon; collects every error they see."""

    def __init__(self, d: FaultDaemons) -> None:
        self.d = d
        self.errors: list[str] = []
        self.done = threading.Event()
        self.counts: collections.Counter[str] = collections.Counter()
        self._lock = threading.Lock()

    def _client(self) -> Client:
        return Client(str(self.d.socket), timeout=60.0)

    def _call(self, c: Client, op: str, **args: Any) -> Any:
        try:
            got = c.request(op, **args)
        except DaemonError as exc:
            with self._lock:
                self.errors.append(f"{op} {args}: {exc.code}: {exc}")
            return None
        with self._lock:
            self.counts[op] += 1
        return got

    def run(self, target: Callable[[Client, random.Random], None], seed: int) -> None:
        try:
            c = self._client()
            try:
                target(c, random.Random(seed))
            finally:
                c.close()
        except Exception as exc:  # a lost connection, a timeout: the test fails on it
            with self._lock:
                self.errors.append(f"client thread {seed}: {type(exc).__name__}: {exc}")


def _snapshot(world: World) -> dict[tuple[str, int], list[dict[str, Any]]]:
    by: dict[tuple[str, int], list[dict[str, Any]]] = collections.defaultdict(list)
    for x in all_lines(world.ledger):
        by[(x["harness"], x["run_id"])].append(x)
    return by


def test_concurrent_load_leaves_a_whole_ledger(world: World, fd: FaultDaemons) -> None:
    text, oneshots, residents = _config(world)
    fd.write_config(text)
    env = dict(world.env, PYTHONFAULTHANDLER="1", PYTHONASYNCIODEBUG="1")
    n = len(fd.procs)
    out = open(world.root / f"daemon{n}.out", "w")  # noqa: SIM115
    err = open(world.root / f"daemon{n}.err", "w")  # noqa: SIM115
    fd.files += [out, err]
    proc = subprocess.Popen(
        [sys.executable, "-X", "dev", "-X", "faulthandler", str(LAUNCHER),
         "--watchdog", str(WATCHDOG), "--"], env=env, text=True, stdout=out, stderr=err)
    fd.procs.append(proc)
    until("the control socket", lambda: fd._answers(proc), 60.0)

    load = Load(fd)

    def triggers(c: Client, rnd: random.Random) -> None:
        for _ in range(TRIGGERS_PER_THREAD):
            got = load._call(c, "trigger", name=rnd.choice(oneshots))
            if got is not None and got.get("decision") not in ("started", "queued", "skipped"):
                load.errors.append(f"trigger answered {got}")

    def resident_ops(c: Client, rnd: random.Random) -> None:
        for _ in range(RESIDENT_OPS_PER_THREAD):
            load._call(c, rnd.choice(["start", "stop", "restart", "restart"]),
                       name=rnd.choice(residents))
            time.sleep(rnd.random() * 0.02)

    def queries(c: Client, rnd: random.Random) -> None:
        while not load.done.is_set():
            pick = rnd.randrange(6)
            if pick == 0:
                load._call(c, "runs", limit=rnd.choice([1, 50, 1000]))
            elif pick == 1:
                page = load._call(c, "runs", names=[rnd.choice(oneshots + residents)],
                                  limit=20, outcomes=["failed", "timed_out", "skipped"])
                if page and page["runs"]:
                    load._call(c, "runs", limit=20, before_seq=page["oldest_seq"])
            elif pick == 2:
                load._call(c, "runs", name=rnd.choice(oneshots), limit=5)
            elif pick == 3:
                load._call(c, "jobs")
            elif pick == 4:
                load._call(c, "list")
            else:
                load._call(c, "daemon_info")

    workers = [threading.Thread(target=load.run, args=(triggers, i)) for i in range(4)]
    workers += [threading.Thread(target=load.run, args=(resident_ops, 100 + i))
                for i in range(3)]
    readers = [threading.Thread(target=load.run, args=(queries, 200 + i)) for i in range(3)]
    for t in workers + readers:
        t.start()
    for t in workers:
        t.join(timeout=SETTLE * 3)
    load.done.set()
    for t in readers:
        t.join(timeout=SETTLE)
    assert not any(t.is_alive() for t in workers + readers), "a client thread hung"
    assert load.errors == []
    assert load.counts["trigger"] == 4 * TRIGGERS_PER_THREAD
    assert load.counts["runs"] > 0 and load.counts["jobs"] > 0 and load.counts["list"] > 0

    # Settle: stop every resident, let the one-shots (and queued firings) finish.
    for name in residents:
        got = request(fd, "stop", name=name)
        assert got["action"] in ("stopped", "not_running"), got

    def quiet() -> bool:
        states = {h["name"]: h["state"] for h in request(fd, "list")["harnesses"]}
        if any(states[n] != "stopped" for n in residents):
            return False
        if any(states[n] == "running" for n in oneshots):
            return False
        recs = request(fd, "runs", limit=1000, since="1970-01-01T00:00:00Z")["runs"]
        return all(r["outcome"] != "running" for r in recs)

    until("every run to end", quiet, SETTLE)
    info = request(fd, "daemon_info")["ledger"]
    assert info["append_errors"] == 0 and info["queued"] == 0 and info["skipped"] == 0

    # Then a shutdown in the middle of things: every resident up, every one-shot fired.
    before_burst = {k: len(v) for k, v in _snapshot(world).items()}
    burst = Load(fd)

    def start_all(c: Client, rnd: random.Random) -> None:
        for name in residents:
            burst._call(c, "start", name=name)

    def fire_all(c: Client, rnd: random.Random) -> None:
        for name in rnd.sample(oneshots, len(oneshots)):
            burst._call(c, "trigger", name=name)

    threads = [threading.Thread(target=burst.run, args=(start_all, 300)),
               threading.Thread(target=burst.run, args=(fire_all, 301)),
               threading.Thread(target=burst.run, args=(fire_all, 302))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=SETTLE)
    assert burst.errors == []
    live = {r["harness"]: r["run_id"] for r in
            request(fd, "runs", limit=1000, since="1970-01-01T00:00:00Z")["runs"]
            if r["outcome"] == "running"}
    assert any(n.startswith("r") for n in live), live  # residents of `sleep 600` are up

    proc.send_signal(signal.SIGTERM)
    try:
        code = proc.wait(timeout=SETTLE)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGABRT)  # faulthandler: every thread's stack to stderr
        proc.wait(timeout=30)
        raise AssertionError("the daemon did not exit on SIGTERM:\n"
                             + fd.stderr()[-20000:]) from None
    stderr = fd.stderr()
    assert code == 0, stderr[-5000:]
    for bad in ("Traceback", "Task was destroyed", "never awaited", "Fatal Python error",
                "most recent call first", "Exception in callback", "Task exception was never",
                "ResourceWarning", "RuntimeWarning", "DeprecationWarning"):
        assert bad not in stderr, f"{bad!r} in the daemon's stderr:\n{stderr[-20000:]}"

    # The ledger, read straight from the files.
    by = _snapshot(world)
    seen: dict[str, set[int]] = collections.defaultdict(set)
    for (name, run_id), lines in by.items():
        types = [x["type"] for x in lines if x["type"] != "updated"]
        assert types in (["opened", "closed"], ["decided"]), (name, run_id, types)
        assert all(x["outcome"] != "running" for x in lines if x["type"] != "opened")
        seen[name].add(run_id)
    # Whatever was live at SIGTERM closed interrupted/shutdown, with an end time (unless it
    # had just ended on its own).
    for name, run_id in live.items():
        closed = by[(name, run_id)][-1]
        assert closed["type"] == "closed" and "ended_at" in closed, closed
        if closed["outcome"] == "interrupted":
            assert closed["reason"] == "shutdown"
    shut = [k for k, v in by.items() if v[-1].get("reason") == "shutdown"]
    assert shut and all(k not in before_burst for k in shut)
    # Run ids: never reused (one record each, checked above) and none skipped.
    for name, got_ids in seen.items():
        assert got_ids == set(range(1, max(got_ids) + 1)), (name, sorted(got_ids))
    state = json.loads((world.state / "state.json").read_text())["runs"]
    assert {n: v["last_run_id"] for n, v in state.items()} == {
        n: max(ids) for n, ids in seen.items()}
    assert set(seen) >= set(oneshots)  # every one-shot was fired at least once
    verify_ok(world)
    offline = world.harness("runs", "--json", "--limit", "1000", "--since", "1h")
    assert offline.returncode == 0
    recs = json.loads(offline.stdout)
    assert recs and all(r["outcome"] not in ("running", "running?") for r in recs)
