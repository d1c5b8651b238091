"""The daemon benchmarks of issue #4, run against a real `harness daemon` process in a
throwaway XDG world, each figure against a raw baseline measured in the same run.

    python bench/daemon.py            # full scale (about 80 seconds)
    python bench/daemon.py --quick    # small sizes, for a smoke run
    python bench/daemon.py --json     # progress on stderr, the results as JSON on stdout

Figures:
  1. trigger → spawn: the `trigger` op's round trip over the control socket, and the time
     from the client's send to the moment the child process ran its first command (it
     writes bash's $EPOCHREALTIME, the same CLOCK_REALTIME the client reads), p50/p99.
     Baselines: raw os.write + os.fdatasync of a ~300-byte line on the same disk, and a raw
     subprocess.Popen of the same child from this process (send → child's timestamp).
  2. N one-shots on `@every 1s` (argv /bin/true) for D seconds: records per window read
     back from the day files; missed windows (a window in the span with no record at all),
     and separately skipped records and windows the daemon recorded as missed; fire lag
     (start − window); each run's opened → closed time; the daemon's CPU seconds
     (user+sys, boot excluded) and peak/final RSS (psutil).
  3. the `runs` op with limit 1000 over a ledger of ≥ 1,000 closed records in memory
     (bench/gen.py, spread over the last 6 days; their per-run logs do not exist, as for
     runs whose logs keep_runs pruned): round trip p50/p99 (target p50 ≤ 20 ms).
     Baselines: the same query in-process on the same ledger (RunLedger.query), the `list`
     op round trip (socket floor), and json.dumps / json.loads of the reply.
The world (config, state, runtime dirs) lives under --out (bench/out/ by default) and is
deleted afterwards; results go to <out>/results-daemon.json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

import psutil

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from gen import generate  # noqa: E402
from harness.control.client import Client, DaemonUnreachable  # noqa: E402
from harness.ledger import RunLedger  # noqa: E402
from harness.ledger.canonical import canonical  # noqa: E402
from harness.ledger.dayfiles import list_day_files  # noqa: E402
from harness.ledger.query import Query  # noqa: E402
from harness.timefmt import format_ns, now_ns, parse_ns  # noqa: E402
from run import opened_line, pct, raw_latencies  # noqa: E402

SEC = 1_000_000_000
DAY = 86_400 * SEC
BOOT_TIMEOUT = 60.0
QUIET = False


def say(*a: Any) -> None:
    print(*a, file=sys.stderr if QUIET else sys.stdout, flush=True)


def ms(seconds: float) -> float:
    return round(seconds * 1e3, 3)


def stats_ms(xs: list[float]) -> dict[str, float]:
    return {"p50_ms": ms(pct(xs, .5)), "p99_ms": ms(pct(xs, .99)), "max_ms": ms(max(xs))}


class World:
    """A throwaway XDG world and one `harness daemon` process in it."""

    def __init__(self, root: str) -> None:
        # Absolute: the XDG variables below ignore a relative path (--out bench/out).
        self.root = root = os.path.abspath(root)
        self.config_home = os.path.join(root, "config")
        self.state_home = os.path.join(root, "state")
        self.runtime = os.path.join(root, "run")
        for d in (self.config_home, self.state_home, self.runtime):
            os.makedirs(d, mode=0o700, exist_ok=True)
        self.env = {k: v for k, v in os.environ.items()
                    if k not in ("HARNESS_CONFIG", "HARNESS_SOCKET")}
        self.env.update(XDG_CONFIG_HOME=self.config_home, XDG_STATE_HOME=self.state_home,
                        XDG_RUNTIME_DIR=self.runtime)
        self.socket = os.path.join(self.runtime, "harness.sock")
        self.ledger_dir = os.path.join(self.state_home, "harness", "ledger")
        self.proc: subprocess.Popen[bytes] | None = None
        self._err: Any = None

    def write_config(self, text: str) -> None:
        d = os.path.join(self.config_home, "harness")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "harness.toml"), "w") as f:
            f.write(text)

    def start(self) -> int:
        """Boot the daemon; return its pid once it answers a gated op (boot done)."""
        self._err = open(os.path.join(self.root, "daemon.err"), "wb")  # noqa: SIM115
        self.proc = subprocess.Popen([sys.executable, "-m", "harness.cli", "daemon"],
                                     env=self.env, stdout=self._err, stderr=self._err)
        end = time.monotonic() + BOOT_TIMEOUT
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the daemon exited {self.proc.returncode}: "
                                   f"{self.stderr()[-2000:]}")
            try:
                c = Client(self.socket, timeout=BOOT_TIMEOUT)
            except DaemonUnreachable:
                if time.monotonic() > end:
                    raise RuntimeError("the daemon did not come up") from None
                time.sleep(0.02)
                continue
            try:
                info = c.request("daemon_info")  # waits for the boot to finish
            finally:
                c.close()
            return int(info["pid"])

    def client(self, timeout: float = 30.0) -> Client:
        return Client(self.socket, timeout=timeout)

    def stderr(self) -> str:
        with open(os.path.join(self.root, "daemon.err"), "rb") as f:
            return f.read().decode(errors="replace")

    def stop(self) -> int:
        """SIGTERM and wait; the exit code."""
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self._err is not None:
            self._err.close()
        return self.proc.returncode

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def read_records(directory: str) -> dict[tuple[str, int], dict[str, Any]]:
    """Fold the day files by (harness, run_id) ourselves, independent of the engine."""
    out: dict[tuple[str, int], dict[str, Any]] = {}
    for _day, path in list_day_files(directory).days:
        with open(path, "rb") as f:
            for raw in f:
                if not raw.endswith(b"\n"):
                    continue
                obj = json.loads(raw)
                key = (obj["harness"], obj["run_id"])
                rec = out.setdefault(key, {})
                rec.update({k: v for k, v in obj.items() if k not in ("prev", "hash", "at")})
    return out


def sample_line(size: int = 300) -> bytes:
    """`size` bytes of a ledger-like line (the raw baseline only writes and syncs it)."""
    line = canonical({**opened_line(1), "v": 1, "seq": 1, "at": format_ns(now_ns()),
                      "prev": "0" * 64, "hash": "0" * 64})
    return (line + b" " * size)[:size - 1] + b"\n"


# -- 1. trigger → spawn ---------------------------------------------------------------


def _stamp_count(path: str) -> list[str]:
    try:
        with open(path) as f:
            return f.read().split()
    except FileNotFoundError:
        return []


def _wait_stamp(path: str, n: int, timeout: float = 30.0) -> int:
    """The n-th (1-based) timestamp the child wrote, in ns since the epoch."""
    end = time.monotonic() + timeout
    while True:
        got = _stamp_count(path)
        if len(got) >= n:
            sec, _, frac = got[n - 1].replace(",", ".").partition(".")
            return int(sec) * SEC + int((frac + "000000000")[:9])
        if time.monotonic() > end:
            raise RuntimeError(f"the child never wrote its timestamp to {path}")
        time.sleep(0.0002)


def bench_trigger(root: str, n: int) -> dict[str, Any]:
    world = World(os.path.join(root, "trigger"))
    stamps = os.path.join(root, "trigger-stamps")
    raw_stamps = os.path.join(root, "raw-stamps")
    bash = shutil.which("bash") or "/bin/bash"
    child = [bash, "-c", 'echo "$EPOCHREALTIME" >> "$0"']
    world.write_config(f"""
[harness.trig]
kind = "oneshot"
argv = {json.dumps([*child, stamps])}
keep_runs = 5
""")
    world.start()
    line = sample_line()
    rt: list[float] = []
    spawn: list[float] = []
    closed: list[float] = []
    raw_sync: list[float] = []
    raw_spawn: list[float] = []
    raw_popen: list[float] = []
    k = 0
    try:
        c = world.client()
        blocks = 10
        for _ in range(blocks):
            # Same disk weather for all three: alternate blocks.
            raw_sync += raw_latencies(os.path.join(root, "raw.bin"), line, n // blocks)
            for _ in range(n // blocks):
                k += 1
                t_ns = time.time_ns()
                t = time.perf_counter()
                p = subprocess.Popen([*child, raw_stamps], stdin=subprocess.DEVNULL)
                raw_popen.append(time.perf_counter() - t)
                raw_spawn.append((_wait_stamp(raw_stamps, k) - t_ns) / 1e9)
                p.wait()
            for _ in range(n // blocks):
                seen = len(rt) + 1
                t_ns = time.time_ns()
                t = time.perf_counter()
                run_id = c.request("trigger", name="trig")["run_id"]
                rt.append(time.perf_counter() - t)
                spawn.append((_wait_stamp(stamps, seen) - t_ns) / 1e9)
                # Wait for the run's closed line before the next trigger, then for the
                # daemon to drop the run from its live set (the closed line is visible a
                # few ms before that; a trigger in between is skipped as an overlap).
                while True:
                    recs = c.request("runs", name="trig", limit=1)["runs"]
                    if recs and recs[0]["run_id"] == run_id and recs[0]["outcome"] != "running":
                        break
                    time.sleep(0.001)
                closed.append(time.perf_counter() - t)
                while any(h["name"] == "trig" and h["state"] == "running"
                          for h in c.request("list")["harnesses"]):
                    time.sleep(0.001)
        c.close()
    finally:
        code = world.stop()
    recs = read_records(world.ledger_dir)
    outcomes: dict[str, int] = {}
    for r in recs.values():
        outcomes[r.get("outcome", "?")] = outcomes.get(r.get("outcome", "?"), 0) + 1
    r50, r99 = pct(raw_sync, .5), pct(raw_sync, .99)
    s50, s99 = pct(raw_spawn, .5), pct(raw_spawn, .99)
    return {
        "n": len(rt), "line_bytes": len(line), "daemon_exit": code, "records": len(recs),
        "outcomes": outcomes, "skipped": outcomes.get("skipped", 0),
        "trigger_rtt": stats_ms(rt), "trigger_to_child": stats_ms(spawn),
        "trigger_to_closed": stats_ms(closed),
        "raw_fdatasync": stats_ms(raw_sync), "raw_popen_to_child": stats_ms(raw_spawn),
        "raw_popen_call": stats_ms(raw_popen),
        "ratio_rtt_vs_fdatasync_p50": pct(rt, .5) / r50,
        "ratio_rtt_vs_fdatasync_p99": pct(rt, .99) / r99,
        "ratio_child_vs_fdatasync_p50": pct(spawn, .5) / r50,
        "ratio_child_vs_fdatasync_p99": pct(spawn, .99) / r99,
        # The floor of "sync the opened line, then spawn": one fdatasync plus one raw spawn.
        "ratio_child_vs_sync_plus_spawn_p50": pct(spawn, .5) / (r50 + s50),
        "ratio_child_vs_sync_plus_spawn_p99": pct(spawn, .99) / (r99 + s99),
    }


# -- 2. many schedules ----------------------------------------------------------------


class RssSampler:
    def __init__(self, proc: psutil.Process, every: float = 0.25) -> None:
        self.proc = proc
        self.every = every
        self.peak = 0
        self.samples: list[tuple[float, int]] = []
        self.cpu: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def run(self) -> None:
        while not self._stop.is_set():
            try:
                rss = self.proc.memory_info().rss
                ct = self.proc.cpu_times()
            except psutil.Error:
                return
            now = time.monotonic()
            self.peak = max(self.peak, rss)
            self.samples.append((now, rss))
            self.cpu.append((now, ct.user + ct.system))
            self._stop.wait(self.every)

    def stop(self) -> None:
        self._stop.set()
        self.t.join()


def bench_schedules(root: str, harnesses: int, duration: float) -> dict[str, Any]:
    world = World(os.path.join(root, "sched"))
    names = [f"s{i:03d}" for i in range(harnesses)]
    world.write_config("".join(
        f'\n[harness.{n}]\nschedule = "@every 1s"\nargv = ["/bin/true"]\nkeep_runs = 5\n'
        for n in names))
    pid = world.start()
    proc = psutil.Process(pid)
    boot = proc.cpu_times()
    boot_cpu = boot.user + boot.system
    sampler = RssSampler(proc)
    t0_ns = time.time_ns()
    try:
        time.sleep(duration)
        t1_ns = time.time_ns()
        end = proc.cpu_times()
        final_rss = proc.memory_info().rss
        sampler.stop()
    finally:
        code = world.stop()
    recs = read_records(world.ledger_dir)
    # Windows fully inside the measured span, with a second's margin at the end so the
    # last window's run has had time to open.
    lo = t0_ns // SEC + 1
    hi = t1_ns // SEC - 1
    expected = max(0, hi - lo + 1)
    per: dict[str, dict[str, int]] = {n: {"runs": 0, "skipped": 0, "recorded_missed": 0}
                                       for n in names}
    windows: dict[str, set[int]] = {n: set() for n in names}
    lags: list[float] = []
    held: list[float] = []  # opened → closed of each run (/bin/true itself takes ~1 ms)
    outcomes: dict[str, int] = {}
    by_name: dict[str, list[tuple[int, dict[str, Any]]]] = {n: [] for n in names}
    for (name, _rid), r in recs.items():
        if name in by_name and r.get("trigger") in ("schedule", "catch_up"):
            by_name[name].append((parse_ns(r["started_at"]), r))
    for name, items in by_name.items():
        # The window of a record is its `window` field. Without one (a daemon that does not
        # write it), a window fires at or after its instant, in order, at most once; so,
        # newest first, a record takes the latest whole second at or before its start that
        # is earlier than the window of the record after it.
        nxt = None
        for started, r in sorted(items, key=lambda p: p[0], reverse=True):
            if isinstance(r.get("window"), str):
                w = parse_ns(r["window"]) // SEC
            else:
                w = started // SEC if nxt is None else min(started // SEC, nxt - 1)
            nxt = w
            outcome = r.get("outcome", "?")
            if outcome == "missed":
                # One record for a run of windows the daemon says it missed.
                first = parse_ns(r.get("first_window", r["window"])) // SEC
                got = set(range(max(lo, first), min(hi, w) + 1))
                windows[name] |= got
                per[name]["recorded_missed"] += len(got)
                if got:
                    outcomes[outcome] = outcomes.get(outcome, 0) + 1
                continue
            if not lo <= w <= hi:
                continue
            lags.append((started - w * SEC) / 1e9)
            windows[name].add(w)
            key = "skipped" if outcome == "skipped" else "runs"
            per[name][key] += 1
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
            if key == "runs" and isinstance(r.get("duration_ms"), int):
                held.append(r["duration_ms"] / 1e3)
    # The brief's "missed": a window in the span with no record at all.
    missed = {n: expected - len(windows[n]) for n in names}
    runs = [per[n]["runs"] for n in names]
    # CPU over the measured span only (boot excluded), from the sampler's series.
    span_cpu = (end.user + end.system) - boot_cpu
    return {
        "harnesses": harnesses, "duration_s": (t1_ns - t0_ns) / 1e9, "daemon_exit": code,
        "windows_expected_per_harness": expected,
        "windows_expected_total": expected * harnesses,
        "runs_total": sum(runs), "runs_min": min(runs), "runs_max": max(runs),
        "skipped_total": sum(per[n]["skipped"] for n in names),
        "recorded_missed_windows": sum(per[n]["recorded_missed"] for n in names),
        "missed_total": sum(missed.values()), "missed_max": max(missed.values()),
        "harnesses_with_missed": sum(1 for v in missed.values() if v),
        "outcomes": outcomes,
        "fire_lag": stats_ms(lags) if lags else {},
        "run_open_to_closed": stats_ms(held) if held else {},
        "cpu_boot_s": round(boot_cpu, 3),
        "cpu_s": round(span_cpu, 3), "cpu_user_s": round(end.user - boot.user, 3),
        "cpu_sys_s": round(end.system - boot.system, 3),
        "cpu_share_of_one_core": span_cpu / ((t1_ns - t0_ns) / 1e9),
        "cpus": os.cpu_count(),
        "children_cpu_s": round(end.children_user + end.children_system, 3),
        "rss_peak_mb": round(sampler.peak / 2**20, 1),
        "rss_final_mb": round(final_rss / 2**20, 1),
        "rss_at_start_mb": round(sampler.samples[0][1] / 2**20, 1) if sampler.samples else 0,
    }


# -- 3. the runs op -------------------------------------------------------------------


def _raw_reply(path: str, req: dict[str, Any]) -> bytes:
    """One request on a fresh connection; the reply's bytes (for the decode baseline)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.connect(path)
        f = s.makefile("rb")
        s.sendall(b'{"op":"hello","proto":"1.0"}\n')
        f.readline()
        s.sendall(json.dumps({"id": 1, **req}).encode() + b"\n")
        return f.readline()


def bench_runs_op(root: str, records: int, n: int) -> dict[str, Any]:
    world = World(os.path.join(root, "runsop"))
    world.write_config('\n[harness.idle]\nkind = "oneshot"\nargv = ["/bin/true"]\n')
    # Closed records spread over the last 6 days: all of them in the in-memory index.
    t = time.perf_counter()
    lines = generate(world.ledger_dir, records, 6 * DAY, now_ns() - 60 * SEC)
    gen_s = time.perf_counter() - t
    q = Query(limit=1000)
    led = RunLedger(world.ledger_dir)
    in_mem = led.stats().records_in_memory
    inproc: list[float] = []
    for _ in range(n):
        t = time.perf_counter()
        got, _ = led.query(q)
        inproc.append(time.perf_counter() - t)
    led.close()
    world.start()
    rtt: list[float] = []
    floor: list[float] = []
    try:
        c = world.client()
        for _ in range(20):  # warm up
            c.request("runs", limit=1000)
        for _ in range(n):
            t = time.perf_counter()
            c.request("list")
            floor.append(time.perf_counter() - t)
            t = time.perf_counter()
            data = c.request("runs", limit=1000)
            rtt.append(time.perf_counter() - t)
        c.close()
        raw = _raw_reply(world.socket, {"op": "runs", "limit": 1000})
    finally:
        code = world.stop()
    dec: list[float] = []
    enc: list[float] = []
    for _ in range(n):
        t = time.perf_counter()
        obj = json.loads(raw)
        dec.append(time.perf_counter() - t)
        # What the server does to the answer (control/server.py's encoding).
        t = time.perf_counter()
        json.dumps(obj, ensure_ascii=False, allow_nan=False).encode()
        enc.append(time.perf_counter() - t)
    p50 = pct(rtt, .5)
    return {
        "records": records, "lines": lines, "generate_s": round(gen_s, 2),
        "records_in_memory": in_mem, "n": n, "daemon_exit": code,
        "returned": len(data["runs"]), "inproc_returned": len(got),
        "reply_bytes": len(raw),
        "runs_op": stats_ms(rtt), "inproc_query": stats_ms(inproc),
        "list_op_floor": stats_ms(floor), "client_json_decode": stats_ms(dec),
        "server_json_encode": stats_ms(enc),
        "ratio_vs_inproc_p50": p50 / pct(inproc, .5),
        "target_p50_ms": 20.0, "target_met": p50 * 1e3 <= 20.0,
    }


def disk_of(path: str) -> str:
    best = None
    for part in psutil.disk_partitions(all=True):
        if path.startswith(part.mountpoint) and (
                best is None or len(part.mountpoint) > len(best.mountpoint)):
            best = part
    return f"{best.device} ({best.fstype}) at {best.mountpoint}" if best else "?"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    global QUIET
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    ap.add_argument("--out", default=os.path.join(HERE, "out"),
                    help="where the throwaway world lives (same disk as the ledger)")
    ap.add_argument("--triggers", type=int, help="triggers for figure 1 (200)")
    ap.add_argument("--harnesses", type=int, help="scheduled one-shots for figure 2 (100)")
    ap.add_argument("--duration", type=float, help="seconds of figure 2 (60)")
    ap.add_argument("--records", type=int, help="closed records for figure 3 (5000)")
    ap.add_argument("--runs-ops", type=int, help="runs ops timed in figure 3 (200)")
    ap.add_argument("--only", default="123", help="which figures, e.g. 13")
    ap.add_argument("--json", action="store_true",
                    help="print the results as JSON on stdout (progress on stderr)")
    args = ap.parse_args(argv)
    QUIET = args.json
    q = args.quick
    triggers = args.triggers or (20 if q else 200)
    harnesses = args.harnesses or (10 if q else 100)
    duration = args.duration or (5.0 if q else 60.0)
    records = args.records or (1200 if q else 5000)
    runs_ops = args.runs_ops or (20 if q else 200)
    os.makedirs(args.out, exist_ok=True)
    root = tempfile.mkdtemp(prefix="daemon-", dir=args.out)
    res: dict[str, Any] = {"machine": {"python": platform.python_version(),
                                       "cpus": os.cpu_count(), "platform": platform.platform(),
                                       "disk": disk_of(os.path.realpath(root))}}
    try:
        if "1" in args.only:
            say(f"1. trigger → spawn, {triggers} triggers")
            load = os.getloadavg()[0]
            res["trigger"] = bench_trigger(root, triggers)
            res["trigger"]["loadavg_1m_before_after"] = [load, os.getloadavg()[0]]
            say(json.dumps(res["trigger"], indent=1))
        if "2" in args.only:
            say(f"2. {harnesses} one-shots on @every 1s for {duration:g}s")
            load = os.getloadavg()[0]
            res["schedules"] = bench_schedules(root, harnesses, duration)
            res["schedules"]["loadavg_1m_before_after"] = [load, os.getloadavg()[0]]
            say(json.dumps(res["schedules"], indent=1))
        if "3" in args.only:
            say(f"3. runs op, limit 1000, over {records:,} closed records")
            load = os.getloadavg()[0]
            res["runs_op"] = bench_runs_op(root, records, runs_ops)
            res["runs_op"]["loadavg_1m_before_after"] = [load, os.getloadavg()[0]]
            say(json.dumps(res["runs_op"], indent=1))
    finally:
        if not os.environ.get("BENCH_KEEP"):
            shutil.rmtree(root, ignore_errors=True)
    with open(os.path.join(args.out, "results-daemon.json"), "w") as f:
        json.dump(res, f, indent=1)
    if args.json:
        print(json.dumps(res))
        return res
    say("\n| figure | ours | raw baseline (same run) | ratio | target |")
    say("| --- | --- | --- | --- | --- |")
    if "trigger" in res:
        tr = res["trigger"]
        a, b, s = tr["trigger_rtt"], tr["raw_fdatasync"], tr["raw_popen_to_child"]
        c = tr["trigger_to_child"]
        say(f"| `trigger` op round trip p50 / p99 ({tr['n']} triggers) | {a['p50_ms']:.2f} / "
            f"{a['p99_ms']:.2f} ms | {b['p50_ms']:.3f} / {b['p99_ms']:.3f} ms fdatasync | "
            f"{tr['ratio_rtt_vs_fdatasync_p50']:.1f}× / {tr['ratio_rtt_vs_fdatasync_p99']:.1f}×"
            " | — |")
        say(f"| trigger sent → child running p50 / p99 | {c['p50_ms']:.2f} / {c['p99_ms']:.2f}"
            f" ms | {s['p50_ms']:.2f} / {s['p99_ms']:.2f} ms raw Popen of the same child; "
            f"fdatasync + Popen | {tr['ratio_child_vs_sync_plus_spawn_p50']:.1f}× / "
            f"{tr['ratio_child_vs_sync_plus_spawn_p99']:.1f}× | — |")
    if "schedules" in res:
        sc = res["schedules"]
        say(f"| {sc['harnesses']} × `@every 1s`, {sc['duration_s']:.0f} s: windows with no "
            f"record | {sc['missed_total']} of {sc['windows_expected_total']:,} | — | — | 0 |")
        say(f"| same: skipped records / windows recorded missed | {sc['skipped_total']} / "
            f"{sc['recorded_missed_windows']} | — | — | — |")
        fl, oc = sc["fire_lag"] or {}, sc["run_open_to_closed"] or {}
        say(f"| same: fire lag p50 / p99; run opened → closed p50 / p99 | "
            f"{fl.get('p50_ms', 0):.0f} / {fl.get('p99_ms', 0):.0f} ms; "
            f"{oc.get('p50_ms', 0):.0f} / {oc.get('p99_ms', 0):.0f} ms | — | — | — |")
        say(f"| same: daemon CPU | {sc['cpu_s']:.1f} s user+sys "
            f"({100 * sc['cpu_share_of_one_core']:.0f}% of one core) | — | — | — |")
        say(f"| same: daemon RSS peak / final | {sc['rss_peak_mb']:.0f} / "
            f"{sc['rss_final_mb']:.0f} MB | — | — | — |")
    if "runs_op" in res:
        ro = res["runs_op"]
        a, b = ro["runs_op"], ro["inproc_query"]
        say(f"| `runs` op, limit 1000, {ro['records_in_memory']:,} records in memory, "
            f"p50 / p99 | {a['p50_ms']:.1f} / {a['p99_ms']:.1f} ms | {b['p50_ms']:.1f} / "
            f"{b['p99_ms']:.1f} ms in-process query; `list` op {ro['list_op_floor']['p50_ms']:.2f}"
            f" ms | {ro['ratio_vs_inproc_p50']:.1f}× | p50 ≤ 20 ms |")
    say(f"\nmachine: {res['machine']}")
    return res


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()
