"""Concurrency stress of one real RunLedger (SPEC-0022 REQ-1, REQ-2, REQ-10, REQ-12, REQ-20).

Several threads share one ledger in a tmp dir, with real files and real threads: appenders
(opened/updated/closed/decided lines of many runs, synced and not), readers (`query`,
`get`, `open_records`, `max_run_id`), a `since(seq)` follower, feed subscribers (one with
room for everything, one tiny and slow) and a pruner calling `prune()` with a short
retention and a small size cap. The injectable clock moves hours at a time, crossing
UTC midnights, so day files pile up and go: between epochs (the appenders quiesced and
the queue drained), and in the racy case also while appenders run, so lines stamped just
before midnight reach yesterday's file while a prune deletes it.
Halfway, the ledger is closed with non-synced lines still queued and opened again.

Checked while running:
* a synced `append` that returned is readable at once: `get`, `query`, `since(seq - 1)`;
* `since` never skips, repeats or reorders a seq, and yields only lines that were sent;
* each subscriber gets committed non-`updated` lines in strictly increasing seq order;
* `max_run_id` never goes backwards; `query` pages are newest first;
* a run open across a `prune()` is still in memory, open, after it.
At the end, from the files alone (read here, not by the engine):
* no seq twice; the seqs kept are contiguous from CHAIN's seq + 1 to the head;
* every line sent (acknowledged or not) above CHAIN's seq is on disk, as sent; every
  other line is a carried-forward opened/closed line of a known run;
* the chain verifies (`verify_run_ledger` and `harness ledger verify`);
* the records `query`/`get`/`open_records` return, live and from a freshly opened
  ledger, equal a fold of the lines on disk computed here; `since(0)` of the fresh
  ledger is exactly the lines on disk; every run the test left open is open;
* the big subscriber missed nothing and got exactly the committed non-updated lines;
  the small one got an in-order subset and counted exactly the rest as missed.

By default one seed runs with the clock still while appenders run and one racy.
LEDGER_STRESS_SEEDS (e.g. "1-50" or "3,7"), LEDGER_STRESS_SCALE (ops per appender per
epoch, default 40) and LEDGER_STRESS_EPOCHS (default 4 per session) widen the run for
exploration; LEDGER_STRESS_RACY=1 makes every seed racy, 0 none.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from harness.ledger.errors import LedgerUnavailable
from harness.ledger.query import Query
from harness.ledger.runledger import RunLedger
from harness.ledger.verify import read_chain_file, verify_run_ledger
from ledgertools import DAY, HOUR, T0

HARNESSES = ("alpha", "beta", "gamma")
NON_FIELDS = frozenset({"v", "seq", "type", "at", "harness", "run_id", "prev", "hash"})
JOIN = 120.0  # seconds: generous, the machine is shared


# -- the clock -------------------------------------------------------------------------


class TickClock:
    """Epoch ns: a base the test moves, plus a microsecond per call (distinct stamps)."""

    def __init__(self, base: int) -> None:
        self.base = base
        self._ticks = itertools.count()

    def __call__(self) -> int:
        return self.base + next(self._ticks) * 1_000


# -- what the test sent ----------------------------------------------------------------


class Model:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.next_rid = dict.fromkeys(HARNESSES, 0)
        self.sent: dict[int, dict[str, Any]] = {}  # seq -> the line as sent
        self.acked: set[int] = set()  # synced appends that returned
        self.open_acked: set[tuple[str, int]] = set()  # opened acked, no closed sent yet
        self.errors: list[str] = []
        self.pruned_days: list[str] = []
        self.prunes = 0

    def alloc(self, h: str) -> int:
        with self.lock:
            self.next_rid[h] += 1
            return self.next_rid[h]

    def fail(self, msg: str) -> None:
        with self.lock:
            if len(self.errors) < 50:
                self.errors.append(msg)


def _guard(model: Model, name: str, fn: Callable[[], None]) -> Callable[[], None]:
    def run() -> None:
        try:
            fn()
        except BaseException:  # reported as a failure of the run
            model.fail(f"{name} crashed:\n{traceback.format_exc()}")

    return run


def _start(model: Model, name: str, fn: Callable[[], None]) -> threading.Thread:
    t = threading.Thread(target=_guard(model, name, fn), name=name, daemon=True)
    t.start()
    return t


def _join(model: Model, threads: list[threading.Thread]) -> None:
    for t in threads:
        t.join(JOIN)
        if t.is_alive():
            model.fail(f"thread {t.name} did not finish within {JOIN}s")


# -- the workers -----------------------------------------------------------------------


def _appender(led: RunLedger, model: Model, rng: random.Random, ops: int,
              owned: list[dict[str, Any]], name: str) -> None:
    """`ops` lines of runs this thread owns: each run's lines come from one thread, in
    order, as the supervisor writes them."""
    for i in range(ops):
        roll = rng.random()
        if not owned or (len(owned) < 4 and roll < 0.35):
            h = rng.choice(HARNESSES)
            rid = model.alloc(h)
            if rng.random() < 0.15:
                line = {"type": "decided", "harness": h, "run_id": rid, "kind": "oneshot",
                        "trigger": "schedule", "outcome": rng.choice(["skipped", "missed"])}
                _send(led, model, line, rng.random() < 0.8, name)
                continue
            line = {"type": "opened", "harness": h, "run_id": rid,
                    "kind": rng.choice(["oneshot", "resident"]),
                    "trigger": rng.choice(["manual", "schedule", "restart"]), "attempt": 1}
            run = {"h": h, "rid": rid, "calls": 0, "acked_open": False}
            owned.append(run)
            run["acked_open"] = _send(led, model, line, rng.random() < 0.85, name)
            if run["acked_open"]:
                with model.lock:
                    model.open_acked.add((h, rid))
        elif roll < 0.75 or len(owned) < 2:
            run = rng.choice(owned)
            run["calls"] += 1
            line = {"type": "updated", "harness": run["h"], "run_id": run["rid"],
                    "model_calls": run["calls"],
                    "tokens": {"input": 10 * run["calls"], "output": i}}
            _send(led, model, line, rng.random() < 0.3, name)
        else:
            run = owned.pop(rng.randrange(len(owned)))
            with model.lock:
                model.open_acked.discard((run["h"], run["rid"]))
            line = {"type": "closed", "harness": run["h"], "run_id": run["rid"],
                    "outcome": rng.choice(["success", "failed", "cancelled"]),
                    "exit_code": rng.randrange(3), "model_calls": run["calls"]}
            _send(led, model, line, rng.random() < 0.9, name)


def _send(led: RunLedger, model: Model, line: dict[str, Any], sync: bool, name: str) -> bool:
    """Append `line`; on a synced return, read it back at once. True when acknowledged."""
    try:
        seq = led.append(dict(line), sync=sync)
    except LedgerUnavailable as exc:  # a slow disk: the line stays queued, unacknowledged
        assert exc.seq is not None
        with model.lock:
            model.sent[exc.seq] = line
        return False
    with model.lock:
        if seq in model.sent:
            model.fail(f"{name}: seq {seq} returned twice")
        model.sent[seq] = line
        if sync:
            model.acked.add(seq)
    if not sync:
        return False
    h, rid = line["harness"], line["run_id"]
    rec = led.get(h, rid)
    if rec is None:
        mine = next(iter(led.since(seq - 1)), None)
        day = mine["at"][:10] if mine is not None and mine["seq"] == seq else "?"
        if line["type"] in ("closed", "decided") and not os.path.exists(
                os.path.join(led.directory, f"{day}.jsonl")):
            return True  # a closed record whose file a prune took meanwhile: gone, rightly
        today = time.strftime("%Y-%m-%d", time.gmtime(led.clock() // 10**9))
        model.fail(f"{name}: get({h}, {rid}) is None right after {line['type']} seq {seq} "
                   f"(at {day}, today {today}) was acknowledged; day files: "
                   f"{sorted(os.listdir(led.directory))}")
        return True
    for k, v in line.items():
        if k not in NON_FIELDS and k != "outcome" and rec.get(k) != v:
            model.fail(f"{name}: get({h}, {rid}).{k} = {rec.get(k)!r}, just wrote {v!r} "
                       f"(seq {seq})")
    want = line["outcome"] if line["type"] in ("closed", "decided") else "running"
    if rec.get("outcome") != want:
        model.fail(f"{name}: get({h}, {rid}).outcome = {rec.get('outcome')!r} after "
                   f"{line['type']} seq {seq}, want {want!r}")
    got = next(iter(led.since(seq - 1)), None)
    if got is None or got["seq"] != seq or got["run_id"] != rid or got["type"] != line["type"]:
        model.fail(f"{name}: since({seq - 1}) starts with {got and got['seq']}, not the line "
                   f"just acknowledged")
    if seq % 3 == 0:  # the page that must start with this run's record
        for _ in range(3):  # a prune may refold the record (a new seq) in between: again
            recs, _ = led.query(Query(names=(h,), before_seq=rec["seq"] + 1, limit=1))
            if recs and recs[0] == rec:
                break
            again = led.get(h, rid)
            if again == rec:
                model.fail(f"{name}: query({h}, before_seq={rec['seq'] + 1}) gave "
                           f"{recs[:1]}, not {rec} right after seq {seq}")
                break
            rec = again
            if rec is None:
                break
    return True


def _reader(led: RunLedger, model: Model, rng: random.Random, stop: threading.Event,
            name: str) -> None:
    top = dict.fromkeys(HARNESSES, 0)
    while not stop.is_set():
        roll = rng.random()
        if roll < 0.3:
            names = (rng.choice(HARNESSES),) if rng.random() < 0.5 else ()
            recs, oldest = led.query(Query(names=names, limit=rng.choice([1, 10, 200])))
            seqs = [r["seq"] for r in recs]
            if seqs != sorted(seqs, reverse=True) or len(set(seqs)) != len(seqs):
                model.fail(f"{name}: query page not strictly newest first: {seqs[:20]}")
            if recs and oldest != seqs[-1]:
                model.fail(f"{name}: query oldest {oldest} != last seq {seqs[-1]}")
            if names and any(r["harness"] != names[0] for r in recs):
                model.fail(f"{name}: query({names}) returned another harness")
        elif roll < 0.55:
            with model.lock:
                keys = list(model.open_acked)
            if keys:
                h, rid = rng.choice(keys)
                rec = led.get(h, rid)
                if rec is not None and (rec["harness"], rec["run_id"]) != (h, rid):
                    model.fail(f"{name}: get({h}, {rid}) returned {rec['harness']}/"
                               f"{rec['run_id']}")
        elif roll < 0.75:
            recs = led.open_records()
            seqs = [r["seq"] for r in recs]
            if seqs != sorted(seqs):
                model.fail(f"{name}: open_records not in seq order")
            if any(r.get("outcome") != "running" for r in recs):
                model.fail(f"{name}: open_records holds a record not running")
        else:
            for h in HARNESSES:
                m = led.max_run_id(h)
                if m < top[h]:
                    model.fail(f"{name}: max_run_id({h}) went back from {top[h]} to {m}")
                top[h] = m
                with model.lock:
                    if m > model.next_rid[h]:
                        model.fail(f"{name}: max_run_id({h}) = {m} > allocated "
                                   f"{model.next_rid[h]}")
        time.sleep(rng.random() * 0.002)


def _follower(led: RunLedger, model: Model, start: int, stop: threading.Event,
              got: list[dict[str, Any]]) -> None:
    """Tail the ledger with since(last), as a lossless consumer does."""
    last = start
    while True:
        final = stop.is_set()
        for o in led.since(last):
            if o["seq"] != last + 1:
                model.fail(f"follower: since({last}) gave seq {o['seq']} after {last} "
                           "(skipped or repeated)")
            last = o["seq"]
            got.append(o)
        if final:
            return
        time.sleep(0.001)


def _subscriber(sub: Any, model: Model, stop: threading.Event, slow: bool,
                got: list[Any]) -> None:
    while True:
        item = sub.get(timeout=0.02)
        if item is None:
            if stop.is_set():
                got.extend(sub.drain())
                return
            continue
        got.append(item)
        if slow:
            time.sleep(0.003)


def _pruner(led: RunLedger, model: Model, rng: random.Random, stop: threading.Event) -> None:
    while not stop.is_set():
        time.sleep(rng.random() * 0.03)
        with model.lock:
            before = set(model.open_acked)
        res = led.prune()
        with model.lock:
            model.prunes += 1
            model.pruned_days.extend(res.deleted)
            still = before & model.open_acked
        if res.error is not None:
            model.fail(f"prune failed: {res.error}")
        if not res.deleted:
            continue
        open_now = {(r["harness"], r["run_id"]) for r in led.open_records()}
        for h, rid in sorted(still):
            rec = led.get(h, rid)
            with model.lock:
                if (h, rid) not in model.open_acked:
                    continue  # its closed line may have been sent meanwhile
            if rec is None or rec.get("outcome") != "running":
                model.fail(f"run {h}/{rid}, open across a prune deleting {res.deleted}, "
                           f"reads {rec} afterwards")
            elif (h, rid) not in open_now and (h, rid) in model.open_acked:
                model.fail(f"run {h}/{rid} open across a prune is not in open_records")


# -- the independent reading of the files ----------------------------------------------


def disk_lines(directory: Path) -> list[dict[str, Any]]:
    out = []
    for p in sorted(directory.glob("*.jsonl")):
        data = p.read_bytes()
        assert data == b"" or data.endswith(b"\n"), f"{p.name} ends in a fragment"
        out.extend(json.loads(raw) for raw in data.split(b"\n")[:-1] if raw)
    return out


def fold_open(lines: list[dict[str, Any]]
              ) -> tuple[dict[tuple[str, int], dict[str, Any]], set[tuple[str, int]]]:
    """REQ-2's fold, spelled out: per (harness, run_id), in seq order, later non-null values
    replace earlier ones; seq is the first line's; running unless closed/decided. Also the
    runs open: an opened line and no closed/decided one (a partial record is not open)."""
    recs: dict[tuple[str, int], dict[str, Any]] = {}
    closed: set[tuple[str, int]] = set()
    started: set[tuple[str, int]] = set()  # an opened line: not partial (REQ-2)
    for o in sorted(lines, key=lambda x: x["seq"]):
        key = (o["harness"], o["run_id"])
        r = recs.setdefault(key, {"harness": key[0], "run_id": key[1], "seq": o["seq"]})
        r.update((k, v) for k, v in o.items() if k not in NON_FIELDS and v is not None)
        if o["type"] in ("closed", "decided"):
            closed.add(key)
        if o["type"] in ("opened", "decided"):
            started.add(key)
    for key, r in recs.items():
        if key not in closed:
            r["outcome"] = "running"
    return recs, started - closed


def fold(lines: list[dict[str, Any]]) -> dict[tuple[str, int], dict[str, Any]]:
    return fold_open(lines)[0]


# -- one run ---------------------------------------------------------------------------


def _session(led: RunLedger, model: Model, clock: TickClock, rng: random.Random,
             epochs: int, ops: int, owned: list[list[dict[str, Any]]], racy: bool
             ) -> dict[str, Any]:
    """Appenders in `epochs` rounds, with readers, a follower, two subscribers and a
    pruner running throughout; the clock moves between rounds."""
    stop = threading.Event()
    head = led.writer.head[0]
    followed: list[dict[str, Any]] = []
    big, small = led.subscribe("big", size=1 << 20), led.subscribe("small", size=4)
    got_big: list[Any] = []
    got_small: list[Any] = []
    side = [
        _start(model, "reader-1", lambda: _reader(led, model, random.Random(rng.random()),
                                                   stop, "reader-1")),
        _start(model, "reader-2", lambda: _reader(led, model, random.Random(rng.random()),
                                                   stop, "reader-2")),
        _start(model, "follower", lambda: _follower(led, model, head, stop, followed)),
        _start(model, "sub-big", lambda: _subscriber(big, model, stop, False, got_big)),
        _start(model, "sub-small", lambda: _subscriber(small, model, stop, True, got_small)),
    ]
    prune_stop = threading.Event()
    pruner = _start(model, "pruner", lambda: _pruner(led, model, random.Random(rng.random()),
                                                     prune_stop))
    mover_stop = threading.Event()
    for _epoch in range(epochs):
        mover = None
        if racy:
            mover_rng = random.Random(rng.random())

            def move(r: random.Random = mover_rng) -> None:
                while not mover_stop.wait(r.random() * 0.01):
                    clock.base += r.randrange(HOUR)

            mover = _start(model, "mover", move)
        rngs = [random.Random(rng.random()) for _ in owned]
        apps = [_start(model, f"appender-{i}",
                       lambda i=i, r=rngs[i]: _appender(led, model, r, ops, owned[i],
                                                        f"appender-{i}"))
                for i in range(len(owned))]
        _join(model, apps)
        if mover is not None:
            mover_stop.set()
            _join(model, [mover])
            mover_stop.clear()
        # Quiesce: everything queued is durable before the day may change, so no line a
        # prune could delete is still in flight (see the module docstring).
        led.flush()
        deadline = time.monotonic() + JOIN
        while led.stats().queued and time.monotonic() < deadline:
            time.sleep(0.005)
        clock.base += rng.randrange(3 * HOUR, 9 * HOUR)
        if clock.base % DAY > DAY - HOUR:  # an epoch's ticks never reach midnight
            clock.base += 2 * HOUR
    prune_stop.set()
    _join(model, [pruner])
    led.flush()
    deadline = time.monotonic() + JOIN
    while led.stats().queued and time.monotonic() < deadline:
        time.sleep(0.005)
    stop.set()
    _join(model, side)
    missed_small = small.missed
    missed_big = big.missed
    big.close()
    small.close()

    # The follower saw every line after `head`, once, in order; each as sent.
    tail = led.writer.head[0]
    seqs = [o["seq"] for o in followed]
    if seqs != list(range(head + 1, tail + 1)):
        model.fail(f"follower got {len(seqs)} lines, not seqs {head + 1}..{tail}")
    _check_feed(led, model, head, got_big, got_small, missed_big, missed_small)
    return {"lines": tail - head, "feed_small_missed": missed_small}


def _check_feed(led: RunLedger, model: Model, head: int, got_big: list[Any],
                got_small: list[Any], missed_big: int, missed_small: int) -> None:
    committed = [o for o in led.since(head) if o["type"] != "updated"]
    want = [o["seq"] for o in committed]
    for label, got in (("big", got_big), ("small", got_small)):
        seqs = [c.seq for c in got]
        if any(b <= a for a, b in itertools.pairwise(seqs)):
            model.fail(f"feed {label}: seqs not strictly increasing")
        if any(c.type == "updated" for c in got):
            model.fail(f"feed {label}: an updated line was published")
        by_seq = {o["seq"]: o for o in committed}
        for c in got:
            o = by_seq.get(c.seq)
            if o is None or (o["type"], o["harness"], o["run_id"]) != (
                    c.type, c.record["harness"], c.record["run_id"]):
                model.fail(f"feed {label}: item seq {c.seq} is not the committed line")
                break
    if missed_big or [c.seq for c in got_big] != want:
        model.fail(f"feed big: missed {missed_big}, got {len(got_big)} of {len(want)}")
    if not set(c.seq for c in got_small) <= set(want) or (
            len(got_small) + missed_small != len(want)):
        model.fail(f"feed small: got {len(got_small)} + missed {missed_small} != "
                   f"{len(want)} published")


def _burst_then_reopen(led: RunLedger, model: Model, clock: TickClock, rng: random.Random,
                       owned: list[list[dict[str, Any]]], directory: Path) -> RunLedger:
    """Queue non-synced lines (from several threads) and close at once; a new ledger on
    the same dir must hold them all, and lose no run id."""
    first = led.writer.head[0] + 1
    burst_threads = []
    for i, runs in enumerate(owned):
        burst_rng = random.Random(rng.random())

        def burst(runs: list[dict[str, Any]] = runs, r: random.Random = burst_rng) -> None:
            for run in runs:
                run["calls"] += 1
                line = {"type": "updated", "harness": run["h"], "run_id": run["rid"],
                        "model_calls": run["calls"]}
                seq = led.append(dict(line), sync=False)
                with model.lock:
                    model.sent[seq] = line
            for _ in range(r.randrange(2, 6)):
                h = r.choice(HARNESSES)
                rid = model.alloc(h)
                seq = led.append({"type": "opened", "harness": h, "run_id": rid,
                                  "kind": "resident", "trigger": "restart"}, sync=False)
                with model.lock:
                    model.sent[seq] = {"type": "opened", "harness": h, "run_id": rid,
                                       "kind": "resident", "trigger": "restart"}
                runs.append({"h": h, "rid": rid, "calls": 0, "acked_open": False})
        burst_threads.append(_start(model, f"burst-{i}", burst))
    _join(model, burst_threads)
    last = led.writer.head[0]
    with model.lock:
        for runs in owned:
            for run in runs:
                model.open_acked.discard((run["h"], run["rid"]))
    led.close(timeout=JOIN)
    led2 = RunLedger(str(directory), clock=clock, sync_timeout=30.0,
                     retention_ns=led.retention_ns, max_bytes=led.max_bytes)
    on_disk = {o["seq"]: o for o in disk_lines(directory)}
    missing = [s for s in range(first, last + 1) if s not in on_disk]
    if missing:
        model.fail(f"reopen: queued seqs {missing[:10]} not on disk after close")
    for s in range(first, last + 1):
        o = on_disk.get(s)
        if o is not None and s in model.sent and (o["harness"], o["run_id"]) != (
                model.sent[s]["harness"], model.sent[s]["run_id"]):
            model.fail(f"reopen: seq {s} on disk is another run's line")
    replay = [o["seq"] for o in led2.since(first - 1)]
    if replay != list(range(first, last + 1)):
        model.fail(f"reopen: since({first - 1}) gave {replay[:10]}..., want {first}..{last}")
    for h in HARNESSES:
        # Not compared with `before`: a prune may have taken every line of a harness's
        # newest run, and the ids the files no longer show are state.json's to remember
        # (REQ-13); the ledger must still know every id its files hold.
        top = max((o["run_id"] for o in on_disk.values() if o["harness"] == h), default=0)
        if led2.max_run_id(h) != top or top > model.next_rid[h]:
            model.fail(f"reopen: max_run_id({h}) = {led2.max_run_id(h)}, the files' highest "
                       f"is {top}, {model.next_rid[h]} allocated")
    open_now = {(r["harness"], r["run_id"]): r for r in led2.open_records()}
    for runs in owned:
        for run in runs:
            rec = open_now.get((run["h"], run["rid"]))
            if rec is None:
                model.fail(f"reopen: run {run['h']}/{run['rid']} open before close is not "
                           "open after")
            elif rec.get("model_calls", 0) != run["calls"]:
                model.fail(f"reopen: run {run['h']}/{run['rid']} reads model_calls "
                           f"{rec.get('model_calls')}, last queued {run['calls']}")
    return led2


def _final_checks(led: RunLedger, model: Model, clock: TickClock, directory: Path,
                  owned: list[list[dict[str, Any]]]) -> dict[str, Any]:
    lines = disk_lines(directory)
    seqs = [o["seq"] for o in lines]
    if len(seqs) != len(set(seqs)):
        dup = sorted({s for s in seqs if seqs.count(s) > 1})
        model.fail(f"disk: seqs {dup[:10]} appear more than once")
    anchor = read_chain_file(str(directory))
    base = anchor[0] if anchor else 0
    head = led.writer.head[0]
    if sorted(set(seqs)) != list(range(base + 1, head + 1)):
        model.fail(f"disk: seqs kept are not {base + 1}..{head} (got {len(set(seqs))} lines, "
                   f"min {min(seqs, default=None)})")
    by_seq = {o["seq"]: o for o in lines}
    with model.lock:
        sent = dict(model.sent)
        acked = set(model.acked)
    for s, line in sent.items():
        if s <= base:
            continue
        o = by_seq.get(s)
        if o is None:
            model.fail(f"disk: {'acknowledged' if s in acked else 'queued'} seq {s} "
                       f"({line['type']} {line['harness']}/{line['run_id']}) is missing")
            continue
        for k, v in line.items():
            if k not in ("v", "seq", "at", "prev", "hash") and o.get(k) != v:
                model.fail(f"disk: seq {s}.{k} = {o.get(k)!r}, sent {v!r}")
                break
    known = {(x["harness"], x["run_id"]) for x in sent.values()}
    for o in lines:
        if o["seq"] not in sent and (o["type"] not in ("opened", "closed")
                                     or (o["harness"], o["run_id"]) not in known):
            model.fail(f"disk: seq {o['seq']} is neither sent nor a carried line: {o}")
    v = verify_run_ledger(str(directory))
    if not v.ok:
        model.fail(f"verify: {v.error}")

    expected, expected_open = fold_open(lines)
    still_open = {(run["h"], run["rid"]) for runs in owned for run in runs}
    for key in still_open:
        if expected.get(key, {}).get("outcome") != "running":
            model.fail(f"disk: run {key}, never closed, folds to {expected.get(key)}")

    def compare(label: str, ledger: RunLedger) -> None:
        recs, _ = ledger.query(Query())
        got = {(r["harness"], r["run_id"]): r for r in recs}
        if len(got) != len(recs):
            model.fail(f"{label}: query returned a run twice")
        for key in sorted(set(got) | set(expected)):
            if got.get(key) != expected.get(key):
                model.fail(f"{label}: query record {key} = {got.get(key)}, the files fold "
                           f"to {expected.get(key)}")
                break
        opened = {(r["harness"], r["run_id"]) for r in ledger.open_records()}
        if opened != expected_open:
            model.fail(f"{label}: open_records {sorted(opened ^ expected_open)[:5]} differ "
                       "from the files")
        for key in sorted(still_open):
            if ledger.get(*key) != expected.get(key):
                model.fail(f"{label}: get{key} = {ledger.get(*key)}, files fold to "
                           f"{expected.get(key)}")
                break
        for h in HARNESSES:
            on_disk = max((k[1] for k in expected if k[0] == h), default=0)
            if ledger.max_run_id(h) < on_disk:
                model.fail(f"{label}: max_run_id({h}) {ledger.max_run_id(h)} < {on_disk}")

    compare("live", led)
    for h in HARNESSES:
        if led.max_run_id(h) != model.next_rid[h]:
            model.fail(f"live: max_run_id({h}) = {led.max_run_id(h)}, allocated "
                       f"{model.next_rid[h]}")
    led.close(timeout=JOIN)
    fresh = RunLedger(str(directory), clock=clock)
    try:
        compare("reopened", fresh)
        replay = list(fresh.since(0))
        if replay != sorted(lines, key=lambda x: x["seq"]):
            model.fail(f"reopened: since(0) gave {len(replay)} lines, the files hold "
                       f"{len(lines)}")
    finally:
        fresh.close(timeout=JOIN)
    return {"disk_lines": len(lines), "chain_anchor": base, "records": len(expected)}


def run_stress(directory: Path, seed: int, *, ops: int = 25, epochs: int = 3,
               appenders: int = 3, racy: bool = False) -> dict[str, Any]:
    """One seeded run; returns a summary, or raises AssertionError listing what broke."""
    rng = random.Random(seed)
    model = Model()
    clock = TickClock(T0 - 2 * DAY + rng.randrange(DAY))
    led = RunLedger(str(directory), clock=clock, sync_timeout=30.0,
                    retention_ns=DAY, max_bytes=48 * 1024)
    owned: list[list[dict[str, Any]]] = [[] for _ in range(appenders)]
    summary: dict[str, Any] = {"seed": seed}
    try:
        summary["s1"] = _session(led, model, clock, rng, epochs, ops, owned, racy)
        led = _burst_then_reopen(led, model, clock, rng, owned, directory)
        summary["s2"] = _session(led, model, clock, rng, epochs, ops, owned, racy)
        summary.update(_final_checks(led, model, clock, directory, owned))
    finally:
        led.close(timeout=JOIN)
    summary["prunes"] = model.prunes
    summary["pruned_days"] = len(model.pruned_days)
    if model.errors:
        raise AssertionError(f"seed {seed}: {len(model.errors)} violation(s):\n"
                             + "\n".join(model.errors[:20]))
    return summary


def _cases() -> list[tuple[int, bool]]:
    """(seed, racy) of each run: the environment's, else one calm seed and one racy."""
    spec = os.environ.get("LEDGER_STRESS_SEEDS")
    racy = os.environ.get("LEDGER_STRESS_RACY")
    if spec is None:
        return [(20261201, racy == "1"), (20261202, racy != "0")]
    out: list[tuple[int, bool]] = []
    for part in spec.split(","):
        lo, _, hi = part.partition("-")
        out.extend((s, racy == "1") for s in (range(int(lo), int(hi) + 1) if hi else [int(lo)]))
    return out


@pytest.mark.parametrize(("seed", "racy"), _cases())
def test_one_ledger_under_concurrent_appends_reads_feed_and_prunes(
        seed: int, racy: bool, tmp_path: Path) -> None:
    state = tmp_path / "state"
    directory = state / "harness" / "ledger"
    directory.parent.mkdir(parents=True)
    summary = run_stress(
        directory, seed,
        ops=int(os.environ.get("LEDGER_STRESS_SCALE", "40")),
        epochs=int(os.environ.get("LEDGER_STRESS_EPOCHS", "4")),
        racy=racy,
    )
    assert summary["pruned_days"] > 0, summary  # the prunes really raced the appenders
    env = dict(os.environ, XDG_STATE_HOME=str(state), XDG_CONFIG_HOME=str(tmp_path / "cfg"),
               XDG_RUNTIME_DIR=str(tmp_path / "run"), HOME=str(tmp_path / "home"), TZ="UTC")
    env.pop("HARNESS_SOCKET", None)
    env.pop("HARNESS_CONFIG", None)
    res = subprocess.run([sys.executable, "-m", "harness.cli", "ledger", "verify"], env=env,
                         capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 0, (res.stdout, res.stderr)
