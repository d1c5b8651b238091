"""The ledger benchmarks of issue #2, each measured against a raw baseline in the same run.

    make bench            # or: .venv/bin/python bench/run.py [--quick]

Figures (ratios are what the targets bind; absolute numbers depend on the disk):
  1. synced append latency p50/p99   vs raw os.write + os.fdatasync of the same line (≤ 1.5×)
  2. 16 threads of synced appends    vs one thread of raw write + fdatasync per line (≥ 5×)
  3. `harness runs --since 7d --json` over 1,000,000 lines (250k runs)
                                     vs decoding the same lines with msgspec (≤ 2×)
  4. `harness ledger verify` over that ledger: lines/s (≥ 500,000)
  5. RSS of a ledger whose index holds 7 days × 10,000 runs (≤ 150 MB)
  6. peak RSS of verify (≤ 100 MB) and of the runs query (≤ 200 MB) on the 1M-line ledger:
     of the largest process, and verify's PSS summed over it and its workers
Beside 1 and 2, what explains them: the same handoff with a bare thread that only writes and
syncs (the design's floor), the engine's writer with no per-line work, the per-line work warm
and right after an fdatasync, where one synced append's time goes (stamped through the
injectable file layer), 2 with sync=False (no fdatasync in the way; the writer thread
still shares the GIL with the callers), how long the writer's write
and fdatasync calls take with 16 callers against one (each includes getting the GIL
back), the per-line work alone in 16 threads (no writer, no disk, no wait), 1 and 2 with
a writer thread in C that never holds the GIL (bench/native_floor.c, built here; the floor
of any writer in this interpreter), and 1 and 2 again on a disk whose sync costs 1 ms
more (FaultyFiles' slow-sync model, applied to the raw baseline too).
The generated ledgers are cached in bench/out/ (regenerated when missing).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

import msgspec
import psutil

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import native  # noqa: E402
from harness.ledger import RunLedger  # noqa: E402
from harness.ledger.canonical import canonical  # noqa: E402
from harness.ledger.chain import seal_line  # noqa: E402
from harness.ledger.dayfiles import iter_chunks, list_day_files  # noqa: E402
from harness.ledger.files import FaultyFiles, FileLayer  # noqa: E402
from harness.ledger.schema import prepare_line, ready_to_encode  # noqa: E402
from harness.ledger.writer import Writer  # noqa: E402
from harness.timefmt import format_ns, now_ns  # noqa: E402

DAY = 86_400 * 1_000_000_000
# The emulated slower disk: FaultyFiles' "slow sync" model (a sleep before the real
# fdatasync), applied to the raw baseline and to the ledger alike.
SLOW_SYNC = 0.001


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p))]


def opened_line(rid: int) -> dict[str, Any]:
    return {"type": "opened", "harness": "bench", "run_id": rid, "kind": "oneshot",
            "trigger": "schedule", "started_at": format_ns(now_ns()), "outcome": "running",
            "log": f"/home/u/.local/state/harness/jobs/bench/{rid}.log"}


def sample_line() -> bytes:
    """One finished run-ledger line (with its newline), as the raw baselines write it."""
    return canonical({**opened_line(1), "v": 1, "seq": 1, "at": format_ns(now_ns()),
                      "prev": "0" * 64, "hash": "0" * 64}) + b"\n"


def raw_latencies(path: str, data: bytes, n: int, sync: Any = os.fdatasync) -> list[float]:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    out = []
    try:
        for _ in range(n):
            t = time.perf_counter()
            os.write(fd, data)
            sync(fd)
            out.append(time.perf_counter() - t)
    finally:
        os.close(fd)
    return out


def raw_rate(path: str, data: bytes, n: int, sync: Any = os.fdatasync) -> float:
    """Lines/s of one thread doing raw write + sync per line, by wall time."""
    t = time.perf_counter()
    raw_latencies(path, data, n, sync)
    return n / (time.perf_counter() - t)


class BareWriter:
    """The floor of the one-writer-thread design: a thread that only writes and syncs what
    callers hand it (no schema, no chain, no index), with the same handoff as the ledger."""

    def __init__(self, path: str, sync_delay: float = 0.0) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self.sync = slow_raw(sync_delay) if sync_delay else os.fdatasync
        self.q: list[tuple[bytes, threading.Lock]] = []
        self.mu = threading.Lock()
        self.bell = threading.Lock()
        self.bell.acquire()
        self.stop = False
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def run(self) -> None:
        while True:
            self.bell.acquire()
            with self.mu:
                batch, self.q = self.q, []
            if self.stop:
                return
            if batch:
                os.write(self.fd, b"".join(d for d, _ in batch))
                self.sync(self.fd)
                for _, w in batch:
                    w.release()

    def append(self, data: bytes) -> None:
        w = threading.Lock()
        w.acquire()
        with self.mu:
            self.q.append((data, w))
        try:  # noqa: SIM105 -- the ledger's own handoff, kept identical
            self.bell.release()
        except RuntimeError:
            pass
        w.acquire()

    def close(self) -> None:
        self.stop = True
        with contextlib.suppress(RuntimeError):
            self.bell.release()
        self.t.join()
        os.close(self.fd)


class PlainSealer:
    """The engine's writer with nothing to do per line: one precomputed line, one file."""

    def __init__(self, path: str, data: bytes) -> None:
        self.path, self.data = path, data[:-1]

    def seal(self, obj: dict[str, Any], seq: int, prev: str) -> tuple[bytes, str, str]:
        return self.data, "0" * 64, self.path


def slow_raw(delay: float) -> Any:
    """raw_latencies' fdatasync on a disk whose sync costs `delay` more (FaultyFiles' model)."""
    def sync(fd: int) -> None:
        time.sleep(delay)
        os.fdatasync(fd)
    return sync


def bench_latency(work: str, n: int, sync_delay: float = 0.0) -> dict[str, Any]:
    """Synced append latency against raw write+fdatasync, alternating blocks so every variant
    sees the same disk weather. Besides the full append: the design's floor (a bare thread
    that only writes and syncs what it is handed) and the engine's writer with a sealer that
    does nothing, which split the overhead into handoff, writer, and per-line work."""
    files = None
    if sync_delay:
        files = FaultyFiles()
        files.inject("sync", delay=sync_delay)
    led = RunLedger(os.path.join(work, f"lat-ledger-{sync_delay}"), files=files)
    sample = sample_line()
    bare = BareWriter(os.path.join(work, f"bare-{sync_delay}.bin"), sync_delay)
    plain = Writer(PlainSealer(os.path.join(work, f"plain-{sync_delay}.bin"), sample),
                   next_seq=1, head_hash="0" * 64, files=files)
    raw_sync = slow_raw(sync_delay) if sync_delay else os.fdatasync
    xs: dict[str, list[float]] = {"raw": [], "bare": [], "writer": [], "ours": []}
    rid = 0
    blocks = 20
    for _ in range(blocks):
        xs["raw"] += raw_latencies(os.path.join(work, "raw.bin"), sample, n // blocks, raw_sync)
        for name, append in (("bare", lambda: bare.append(sample)),
                             ("writer", lambda: plain.append({}, sync=True))):
            for _ in range(n // blocks):
                t = time.perf_counter()
                append()
                xs[name].append(time.perf_counter() - t)
        for _ in range(n // blocks):
            rid += 1
            line = opened_line(rid)
            t = time.perf_counter()
            led.append(line, sync=True)
            xs["ours"].append(time.perf_counter() - t)
    led.close()
    plain.close()
    bare.close()
    r50, r99 = pct(xs["raw"], .5), pct(xs["raw"], .99)
    res: dict[str, Any] = {"n": n, "line_bytes": len(sample), "sync_delay_s": sync_delay,
                           "raw_p50_us": r50 * 1e6, "raw_p99_us": r99 * 1e6}
    for name, key in (("ours", "append"), ("bare", "handoff_floor"), ("writer", "writer_only")):
        p50, p99 = pct(xs[name], .5), pct(xs[name], .99)
        res.update({f"{key}_p50_us": p50 * 1e6, f"{key}_p99_us": p99 * 1e6})
        prefix = "" if name == "ours" else f"{key.split('_')[0]}_"
        res[f"{prefix}ratio_p50"] = p50 / r50
        res[f"{prefix}ratio_p99"] = p99 / r99
    return res


def bench_cold(work: str, n: int) -> dict[str, Any]:
    """What the per-line work of an append (schema, scrub, canonical encoding, hash) costs
    warm, and right after the thread slept in an fdatasync, as it does on every append."""
    fd = os.open(os.path.join(work, "cold.bin"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    warm: list[float] = []
    cold: list[float] = []
    plw = PerLineWork()
    try:
        for i in range(n):
            for out in (warm, cold):
                if out is cold:
                    os.write(fd, b"x" * 400)
                    os.fdatasync(fd)
                line = opened_line(i + 1)
                t = time.perf_counter()
                plw.make(line, len)
                out.append(time.perf_counter() - t)
    finally:
        os.close(fd)
    w, c = pct(warm, .5), pct(cold, .5)
    return {"warm_us": w * 1e6, "after_sync_us": c * 1e6, "penalty": c / w}


class _Stamped(FileLayer):
    """The real file layer, noting when the writer's last write began and its last sync
    ended, and how long each write and sync call took end to end: the system call and,
    when other threads hold the interpreter, the wait to get the GIL back after it."""

    def __init__(self) -> None:
        self.write_at = self.synced_at = 0.0
        self.writes: list[float] = []
        self.syncs: list[float] = []

    def write(self, fd: int, data: bytes) -> int:
        self.write_at = time.perf_counter()
        n = super().write(fd, data)
        self.writes.append(time.perf_counter() - self.write_at)
        return n

    def sync(self, fd: int) -> None:
        t = time.perf_counter()
        super().sync(fd)
        self.synced_at = time.perf_counter()
        self.syncs.append(self.synced_at - t)


def bench_path(work: str, n: int) -> dict[str, Any]:
    """Where one synced append's time goes, p50 of each leg: the caller's own work
    (validate, scrub, encode, hash, queue, ring), the handoff to the writer thread up to
    its write, the write and fdatasync, and the way back (the writer's checks and index
    fold after the sync, its wake-up of the caller, the caller getting the GIL back)."""
    files = _Stamped()
    led = RunLedger(os.path.join(work, "path-ledger"), files=files)
    legs: dict[str, list[float]] = {"caller": [], "to_writer": [], "io": [], "back": [],
                                    "total": []}
    try:
        for i in range(n):
            line = opened_line(i + 1)
            t0 = time.perf_counter()
            e = led.enqueue(line, sync=True)
            t1 = time.perf_counter()
            led.wait(e)
            t2 = time.perf_counter()
            for leg, took in (("caller", t1 - t0), ("to_writer", files.write_at - t1),
                              ("io", files.synced_at - files.write_at),
                              ("back", t2 - files.synced_at), ("total", t2 - t0)):
                legs[leg].append(took)
    finally:
        led.close()
    return {f"{leg}_p50_us": pct(xs, .5) * 1e6 for leg, xs in legs.items()}


def bench_gil(work: str, per_thread: int, threads: int = 16) -> dict[str, Any]:
    """Where a group commit's time goes with 16 callers: the writer's write and fdatasync
    calls, p50 wall time, against the same calls with one caller; and the commit's length
    and lines. The system calls release the GIL, and the writer must then get it back from
    callers busy with their next lines' Python."""
    lines = [opened_line(n) for n in range(1, threads * per_thread + 1)]
    res: dict[str, Any] = {}
    for key, n in (("one", 1), ("many", threads)):
        files = _Stamped()
        led = RunLedger(os.path.join(work, f"gil-{key}"), files=files)
        el = race(n, threads * per_thread // n,
                  lambda k, led=led: led.append(lines[k - 1], sync=True))
        led.close()
        res.update({f"{key}_write_p50_us": pct(files.writes, .5) * 1e6,
                    f"{key}_sync_p50_us": pct(files.syncs, .5) * 1e6,
                    f"{key}_commit_us": el / len(files.syncs) * 1e6,
                    f"{key}_lines_per_commit": len(lines) / len(files.syncs)})
    return res


def race(threads: int, per_thread: int, append: Any) -> float:
    """Seconds for `threads` threads, released together, to call append(n) per_thread times
    each (n = 1, 2, … unique across threads)."""
    start = threading.Barrier(threads + 1)

    def worker(k: int) -> None:
        start.wait()
        for i in range(per_thread):
            append(k * per_thread + i + 1)

    ts = [threading.Thread(target=worker, args=(k,)) for k in range(threads)]
    for th in ts:
        th.start()
    start.wait()
    t = time.perf_counter()
    for th in ts:
        th.join()
    return time.perf_counter() - t


class PerLineWork:
    """What an append does to a line before it waits, as RunLedger does it: validate and
    scrub, then, under one lock as the writer's enqueue holds it, seq, chain and canonical
    bytes, handed on (`hand`, under the lock) in seq order."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seq, self.prev = 0, "0" * 64

    def make(self, line: dict[str, Any], hand: Any) -> Any:
        out, _ = prepare_line(line)
        with self.lock:
            self.seq += 1
            data, self.prev = seal_line(out, self.seq, self.prev, ready_to_encode)
            return hand(data + b"\n")


class NativeAppender:
    """Appends through the C writer thread (bench/native_floor.c). With `work`, the caller
    does the per-line work; without, it hands over one fixed line. Either way nothing of
    the engine's writer runs: this is what the interpreter alone leaves of an append."""

    def __init__(self, mod: Any, path: str, work: bool) -> None:
        self.mod, self.path = mod, path
        self.work = PerLineWork() if work else None
        mod.open(path)

    def append(self, line: dict[str, Any], sample: bytes) -> None:
        if self.work is not None:
            ticket = self.work.make(line, self.mod.submit)
        else:
            ticket = self.mod.submit(sample)
        if not self.mod.wait(ticket, 2.0):
            raise TimeoutError(f"line {ticket} not synced within 2 s")

    def close(self, expected: int) -> int:
        """Stop the thread; check every line reached the file whole; return the syncs."""
        syncs = int(self.mod.close())
        with open(self.path, "rb") as f:
            lines = f.read().split(b"\n")
        assert lines.pop() == b"" and len(lines) == expected, (self.path, len(lines))
        if self.work is not None:
            assert [msgspec.json.decode(x)["seq"] for x in lines] == list(range(1, expected + 1))
        return syncs


def bench_native(work: str, n: int, per_thread: int, threads: int = 16) -> dict[str, Any]:
    """Figures 1 and 2 with the writer thread in C (no GIL, no per-line work of its own),
    callers with and without the real per-line work: the floor any Python writer design
    meets on this machine. Skipped, saying why, where no C compiler is at hand."""
    mod, why = native.load(work)
    if mod is None:
        return {"skipped": why}
    sample = sample_line()
    xs: dict[str, list[float]] = {"raw": [], "bare": [], "work": []}
    blocks = 10
    for b in range(blocks):
        xs["raw"] += raw_latencies(os.path.join(work, "native-raw.bin"), sample, n // blocks)
        for key in ("bare", "work"):
            nat = NativeAppender(mod, os.path.join(work, f"native-{key}-{b}.jsonl"), key == "work")
            for i in range(n // blocks):
                line = opened_line(i + 1)
                t = time.perf_counter()
                nat.append(line, sample)
                xs[key].append(time.perf_counter() - t)
            nat.close(n // blocks)
    r50 = pct(xs["raw"], .5)
    res: dict[str, Any] = {"n": n, "raw_p50_us": r50 * 1e6}
    for key in ("bare", "work"):
        res[f"{key}_p50_us"] = pct(xs[key], .5) * 1e6
        res[f"{key}_ratio_p50"] = pct(xs[key], .5) / r50
    total = threads * per_thread
    one = raw_rate(os.path.join(work, "native-raw-gc.bin"), sample, total // 4)
    lines = [opened_line(k) for k in range(1, total + 1)]
    res.update({"threads": threads, "lines": total, "raw_one_thread_lines_per_s": one})
    for key in ("bare", "work"):
        nat = NativeAppender(mod, os.path.join(work, f"native-gc-{key}.jsonl"), key == "work")
        el = race(threads, per_thread, lambda k, nat=nat: nat.append(lines[k - 1], sample))
        syncs = nat.close(total)
        res.update({f"{key}_16_threads_lines_per_s": total / el,
                    f"{key}_16_threads_ratio": total / el / one,
                    f"{key}_16_threads_lines_per_sync": total / syncs})
    return res


def bench_group_commit(work: str, per_thread: int, threads: int = 16,
                       sync_delay: float = 0.0) -> dict[str, Any]:
    sample = sample_line()
    files = None
    if sync_delay:
        files = FaultyFiles()
        files.inject("sync", delay=sync_delay)
    one = raw_rate(os.path.join(work, "raw-gc.bin"), sample, threads * per_thread // 4,
                   slow_raw(sync_delay) if sync_delay else os.fdatasync)
    bare = BareWriter(os.path.join(work, f"bare-gc-{sync_delay}.bin"), sync_delay)
    floor_rate = threads * per_thread / race(threads, per_thread, lambda _n: bare.append(sample))
    bare.close()
    # Built beforehand, as the latency figure's lines are: the raw baseline does not build
    # its line inside the timed loop either.
    lines = [opened_line(n) for n in range(1, threads * per_thread + 1)]
    led = RunLedger(os.path.join(work, f"gc-ledger-{sync_delay}"), files=files)
    el = race(threads, per_thread, lambda n: led.append(lines[n - 1], sync=True))
    syncs = led.writer.stats().syncs
    led.close()
    rate = threads * per_thread / el
    # The same appends with no caller waiting for a disk (sync=False), so no handoff and
    # no fdatasync is in their way; the writer thread still takes its share of the GIL.
    led = RunLedger(os.path.join(work, f"gc-nosync-{sync_delay}"), files=files)
    el = race(threads, per_thread, lambda n: led.append(lines[n - 1], sync=False))
    led.close()
    ceiling = threads * per_thread / el
    # The per-line work alone in the same threads: no writer, no disk, no wait. An
    # engine that does this work per line cannot go faster on this interpreter.
    plw = PerLineWork()
    work_rate = threads * per_thread / race(threads, per_thread,
                                            lambda n: plw.make(lines[n - 1], len))
    return {"threads": threads, "lines": threads * per_thread, "sync_delay_s": sync_delay,
            "lines_per_s": rate, "raw_one_thread_lines_per_s": one, "ratio": rate / one,
            "bare_writer_16_threads_lines_per_s": floor_rate, "floor_ratio": floor_rate / one,
            "no_sync_16_threads_lines_per_s": ceiling, "no_sync_ratio": ceiling / one,
            "work_only_16_threads_lines_per_s": work_rate, "work_only_ratio": work_rate / one,
            "lines_per_sync": threads * per_thread / max(1, syncs)}


def run_timed(cmd: list[str], env: dict[str, str]) -> tuple[float, int]:
    """(wall seconds, exit code) of a command, its output discarded."""
    t = time.perf_counter()
    rc = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL).returncode
    return time.perf_counter() - t, rc


# A process's peak RSS (ru_maxrss) starts at what its parent held when it forked, so a
# command started from this process, which holds the generated lines, would report this
# process's size. Measured commands start from this small launcher instead; it reports
# its children's peak on stderr (stdout is the command's).
_LAUNCHER = ("import resource, subprocess, sys; "
             "rc = subprocess.run(sys.argv[1:], stderr=subprocess.DEVNULL).returncode; "
             "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr); "
             "sys.exit(rc)")


def peak_memory(cmd: list[str], env: dict[str, str], keep_stdout: bool = False
                ) -> tuple[float, float, str]:
    """(peak RSS in MB of the command's largest process, peak PSS in MB summed over all
    its processes, its stdout if kept). PSS counts a page shared by n processes as 1/n
    in each, so the sum is what the command took from the machine: verify's forked
    workers share the interpreter's pages with it. Sampled every 5 ms."""
    p = subprocess.Popen([sys.executable, "-c", _LAUNCHER, *cmd], env=env,
                         stdout=subprocess.PIPE if keep_stdout else subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True)
    launcher = psutil.Process(p.pid)
    peak = 0
    while p.poll() is None:
        total = 0
        with contextlib.suppress(psutil.Error):
            for proc in launcher.children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    total += proc.memory_full_info().pss
        peak = max(peak, total)
        time.sleep(0.005)
    out, err = p.communicate()
    if p.returncode:
        raise subprocess.CalledProcessError(p.returncode, cmd, out, err)
    return int(err.split()[-1]) / 1024, peak / 2**20, out or ""


def decode_baseline(directory: str) -> tuple[float, int]:
    dec = msgspec.json.Decoder()
    gc.disable()
    try:
        t = time.perf_counter()
        n = 0
        for _d, path in list_day_files(directory).days:
            for _first, lines, _torn in iter_chunks(path):
                for raw in lines:
                    dec.decode(raw)
                n += len(lines)
        return time.perf_counter() - t, n
    finally:
        gc.enable()


def generated(out: str, name: str, key: dict[str, Any], make: str, label: str
              ) -> tuple[str, str, int]:
    """(state dir, ledger dir, lines) of the ledger `name` under `out`, generated by the
    Python expression `make` (it sees `ledger` and `end`, the ledger's newest time, and
    gives the line count) unless one made with the same `key` is there and fresh."""
    # Absolute: the commands get it as XDG_STATE_HOME, and a relative one is ignored there.
    state = os.path.abspath(os.path.join(out, name))
    ledger = os.path.join(state, "harness", "ledger")
    stamp = os.path.join(state, "generated.json")
    # The ledger must lie within the last days *now*: regenerate when it has aged.
    if os.path.exists(stamp):
        with open(stamp) as f:
            meta = json.load(f)
        if meta.get("key") == key and now_ns() - meta["end_ns"] < DAY // 2:
            return state, ledger, meta["lines"]
    shutil.rmtree(state, ignore_errors=True)
    t = time.perf_counter()
    end = now_ns()
    # In a child, so this process stays small: RSS high-water marks are inherited across
    # fork+exec, and the children whose RSS we measure are spawned from here.
    lines = int(subprocess.run(
        [sys.executable, "-c", f"import sys; sys.path.insert(0, {HERE!r}); "
         f"ledger, end = {ledger!r}, {end}; print({make})"],
        check=True, capture_output=True, text=True).stdout)
    print(f"  {label}: generated {lines:,} lines in {time.perf_counter() - t:.1f}s",
          flush=True)
    with open(stamp, "w") as f:
        json.dump({"key": key, "lines": lines, "end_ns": end}, f)
    return state, ledger, lines


def ensure_ledger(out: str, name: str, runs: int, span: int) -> tuple[str, str]:
    state, ledger, _lines = generated(
        out, name, {"runs": runs, "span": span},
        f"__import__('gen').generate(ledger, {runs}, {span}, end)", name)
    return state, ledger


def bench_reads(out: str, runs: int) -> dict[str, Any]:
    state, ledger = ensure_ledger(out, f"ledger-{runs}", runs, 6 * DAY + 20 * 3600 * 10**9)
    env = dict(os.environ, XDG_STATE_HOME=state, HARNESS_SOCKET=os.path.join(state, "no.sock"))
    # The commands run as an installed tool runs: with Python's bytecode cache, which pip
    # writes at install. An environment that turns it off (PYTHONDONTWRITEBYTECODE) makes
    # every start compile each module again: about 0.3 s of each command's time here.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    harness = [sys.executable, "-m", "harness.cli"]
    subprocess.run([*harness, "--help"], env=env, stdout=subprocess.DEVNULL, check=True)
    base, n = min(decode_baseline(ledger) for _ in range(2))
    base_cmd = [sys.executable, "-c", f"import sys; sys.path.insert(0, {HERE!r}); import run; "
                f"print(run.decode_baseline({ledger!r}))"]
    base_proc = min(run_timed(base_cmd, env)[0] for _ in range(2))
    query = [*harness, "runs", "--since", "7d", "--json"]
    verify = [*harness, "ledger", "verify"]
    q = min(run_timed(query, env) for _ in range(3))
    v = min(run_timed(verify, env) for _ in range(3))
    q_rss, q_pss, _ = peak_memory(query, env)
    v_rss, v_pss, _ = peak_memory(verify, env)
    return {
        "lines": n, "runs": runs,
        "decode_baseline_s": base, "decode_baseline_process_s": base_proc,
        "runs_query_s": q[0], "runs_query_rss_mb": q_rss, "runs_query_pss_mb": q_pss,
        "runs_query_exit": q[1],
        "runs_ratio_vs_decode": q[0] / base, "runs_ratio_vs_decode_process": q[0] / base_proc,
        "verify_s": v[0], "verify_lines_per_s": n / v[0], "verify_rss_mb": v_rss,
        "verify_pss_mb": v_pss, "verify_exit": v[1],
    }


def bench_index(out: str, runs: int) -> dict[str, Any]:
    _state, ledger = ensure_ledger(out, f"index-{runs}", runs, 7 * DAY - 3600 * 10**9)
    code = ("from harness.ledger import RunLedger; "
            f"L = RunLedger({ledger!r}); print(L.stats().records_in_memory); L.close()")
    rss, _pss, out = peak_memory([sys.executable, "-c", code], dict(os.environ), keep_stdout=True)
    empty, _pss, _ = peak_memory([sys.executable, "-c", "import harness.ledger"], dict(os.environ))
    return {"runs": runs, "records_in_memory": int(out.split()[-1]), "rss_mb": rss,
            "rss_without_index_mb": empty}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    ap.add_argument("--out", default=os.path.join(HERE, "out"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    work = tempfile.mkdtemp(prefix="bench-", dir=args.out)
    res: dict[str, Any] = {"machine": {"python": platform.python_version(),
                                       "cpus": os.cpu_count(), "platform": platform.platform()}}
    try:
        print("1. synced append latency", flush=True)
        res["latency"] = bench_latency(work, 400 if args.quick else 3000)
        print(json.dumps(res["latency"], indent=1), flush=True)
        print("   the per-line work, warm and right after an fdatasync", flush=True)
        res["cold"] = bench_cold(work, 200 if args.quick else 2000)
        print(json.dumps(res["cold"], indent=1), flush=True)
        print("   where one synced append's time goes", flush=True)
        res["path"] = bench_path(work, 400 if args.quick else 3000)
        print(json.dumps(res["path"], indent=1), flush=True)
        print("2. group commit, 16 threads", flush=True)
        res["group_commit"] = bench_group_commit(work, 20 if args.quick else 200)
        print(json.dumps(res["group_commit"], indent=1), flush=True)
        print("   where a group commit's time goes, 1 caller and 16", flush=True)
        res["gil"] = bench_gil(work, 10 if args.quick else 100)
        print(json.dumps(res["gil"], indent=1), flush=True)
        print("1+2 with the writer thread in C: what CPython itself leaves", flush=True)
        res["native"] = bench_native(work, 400 if args.quick else 3000, 20 if args.quick else 200)
        print(json.dumps(res["native"], indent=1), flush=True)
        print(f"1+2 again on a disk whose sync costs {SLOW_SYNC * 1e3:g} ms more", flush=True)
        res["slow_latency"] = bench_latency(work, 100 if args.quick else 600, SLOW_SYNC)
        res["slow_group_commit"] = bench_group_commit(work, 5 if args.quick else 40,
                                                      sync_delay=SLOW_SYNC)
        print(json.dumps([res["slow_latency"], res["slow_group_commit"]], indent=1), flush=True)
        print("3/4/6. runs query and verify over the big ledger", flush=True)
        res["reads"] = bench_reads(args.out, 10_000 if args.quick else 250_000)
        print(json.dumps(res["reads"], indent=1), flush=True)
        print("5. index memory", flush=True)
        res["index"] = bench_index(args.out, 7_000 if args.quick else 70_000)
        print(json.dumps(res["index"], indent=1), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(res, f, indent=1)
    lat, gcm, rd, ix = res["latency"], res["group_commit"], res["reads"], res["index"]
    cold, slat, sgc, path = (res["cold"], res["slow_latency"], res["slow_group_commit"],
                             res["path"])
    print("\n| figure | ours | raw baseline (same run) | ratio | target |")
    print("| --- | --- | --- | --- | --- |")
    print(f"| synced append p50 | {lat['append_p50_us']:.0f} µs | {lat['raw_p50_us']:.0f} µs "
          f"| {lat['ratio_p50']:.2f}× | ≤ 1.5× |")
    print(f"| synced append p99 | {lat['append_p99_us']:.0f} µs | {lat['raw_p99_us']:.0f} µs "
          f"| {lat['ratio_p99']:.2f}× | ≤ 1.5× |")
    print(f"| same, bare writer thread (the design's floor) | {lat['handoff_floor_p50_us']:.0f} /"
          f" {lat['handoff_floor_p99_us']:.0f} µs | — | {lat['handoff_ratio_p50']:.2f}× / "
          f"{lat['handoff_ratio_p99']:.2f}× | — |")
    print(f"| same, the engine's writer with no per-line work | {lat['writer_only_p50_us']:.0f} /"
          f" {lat['writer_only_p99_us']:.0f} µs | — | {lat['writer_ratio_p50']:.2f}× / "
          f"{lat['writer_ratio_p99']:.2f}× | — |")
    print(f"| per-line work (schema, scrub, encode, hash), warm / right after an fdatasync | "
          f"{cold['warm_us']:.1f} / {cold['after_sync_us']:.1f} µs | — | "
          f"{cold['penalty']:.1f}× | — |")
    print(f"| one append's legs, p50: caller's work / to the writer / write+fdatasync / back "
          f"to the caller | {path['caller_p50_us']:.0f} / {path['to_writer_p50_us']:.0f} / "
          f"{path['io_p50_us']:.0f} / {path['back_p50_us']:.0f} µs (total "
          f"{path['total_p50_us']:.0f}) | — | — | — |")
    print(f"| 16 threads synced appends | {gcm['lines_per_s']:,.0f} lines/s | "
          f"{gcm['raw_one_thread_lines_per_s']:,.0f} lines/s (1 thread) | {gcm['ratio']:.1f}× "
          f"| ≥ 5× |")
    print(f"| same, bare writer thread (the design's floor) | "
          f"{gcm['bare_writer_16_threads_lines_per_s']:,.0f} lines/s | — | "
          f"{gcm['floor_ratio']:.1f}× | — |")
    print(f"| same, our appends with sync=False (no fdatasync in the way) | "
          f"{gcm['no_sync_16_threads_lines_per_s']:,.0f} lines/s | — | "
          f"{gcm['no_sync_ratio']:.1f}× | — |")
    print(f"| same, the per-line work alone (no writer, no disk, no wait) | "
          f"{gcm['work_only_16_threads_lines_per_s']:,.0f} lines/s | — | "
          f"{gcm['work_only_ratio']:.1f}× | — |")
    gil = res["gil"]
    print(f"| same, the writer's write / fdatasync call, p50 wall time (getting the GIL back "
          f"included) | {gil['many_write_p50_us']:.0f} / {gil['many_sync_p50_us']:.0f} µs | "
          f"{gil['one_write_p50_us']:.0f} / {gil['one_sync_p50_us']:.0f} µs with one caller | "
          f"— | — |")
    print(f"| same, one group commit | {gil['many_commit_us']:.0f} µs for "
          f"{gil['many_lines_per_commit']:.1f} lines | {gil['one_commit_us']:.0f} µs for "
          f"{gil['one_lines_per_commit']:.1f} with one caller | — | — |")
    nat = res["native"]
    if "skipped" in nat:
        print(f"| writer thread in C | skipped: {nat['skipped']} | — | — | — |")
    else:
        print(f"| synced append p50, writer thread in C, callers with / without the per-line "
              f"work | {nat['work_p50_us']:.0f} / {nat['bare_p50_us']:.0f} µs | "
              f"{nat['raw_p50_us']:.0f} µs | {nat['work_ratio_p50']:.2f}× / "
              f"{nat['bare_ratio_p50']:.2f}× | — |")
        print(f"| 16 threads, writer thread in C, callers with / without the per-line work | "
              f"{nat['work_16_threads_lines_per_s']:,.0f} / "
              f"{nat['bare_16_threads_lines_per_s']:,.0f} lines/s | "
              f"{nat['raw_one_thread_lines_per_s']:,.0f} lines/s | "
              f"{nat['work_16_threads_ratio']:.1f}× / {nat['bare_16_threads_ratio']:.1f}× | — |")
    ms = f"{SLOW_SYNC * 1e3:g} ms"
    print(f"| synced append p50 / p99, sync + {ms} (both sides) | {slat['append_p50_us']:.0f} / "
          f"{slat['append_p99_us']:.0f} µs | {slat['raw_p50_us']:.0f} / {slat['raw_p99_us']:.0f}"
          f" µs | {slat['ratio_p50']:.2f}× / {slat['ratio_p99']:.2f}× | ≤ 1.5× |")
    print(f"| 16 threads, sync + {ms} (both sides) | {sgc['lines_per_s']:,.0f} lines/s | "
          f"{sgc['raw_one_thread_lines_per_s']:,.0f} lines/s | {sgc['ratio']:.1f}× | ≥ 5× |")
    print(f"| `runs --since 7d --json`, {rd['lines']:,} lines | {rd['runs_query_s']:.2f} s | "
          f"{rd['decode_baseline_s']:.2f} s msgspec decode | {rd['runs_ratio_vs_decode']:.2f}× "
          f"| ≤ 2× |")
    print(f"| `ledger verify`, {rd['lines']:,} lines | {rd['verify_lines_per_s']:,.0f} lines/s "
          f"| — | — | ≥ 500,000/s |")
    print(f"| index, {ix['records_in_memory']:,} records | {ix['rss_mb']:.0f} MB RSS | "
          f"{ix['rss_without_index_mb']:.0f} MB without | — | ≤ 150 MB |")
    print(f"| peak RSS verify: its largest process / PSS summed over its processes | "
          f"{rd['verify_rss_mb']:.0f} / {rd['verify_pss_mb']:.0f} MB | — | — | ≤ 100 MB |")
    print(f"| peak RSS runs query (one process) | {rd['runs_query_rss_mb']:.0f} MB | — | — "
          f"| ≤ 200 MB |")
    print(f"\nmachine: {res['machine']}; median of the raw decode "
          f"{statistics.median([rd['decode_baseline_s']]):.2f}s")


if __name__ == "__main__":
    main()
