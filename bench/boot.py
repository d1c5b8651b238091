"""The daemon's boot on the big ledger, against a raw decode of the same lines in the same run.

    .venv/bin/python bench/boot.py [--quick] [--out DIR] [--trials N] [--against SRC]

Figure: the wall time from starting `harness daemon` to its first answer on the control
socket (`daemon_info`, which waits for the boot: seq and chain head recovered from the
files, the window folded into the index, REQ-7's closing of runs left open, the prune),
over bench/run.py's ledger (1,000,000 lines, 250k runs, all in the last 7 days: the same
cached ledger, `generated` in run.py), against the in-process msgspec decode of every
line of it (run.decode_baseline, the baseline of run.py's `runs` figure). Best of
--trials each, alternated, so both see the same machine weather. Two boots:

  kept    [ledger] max_mb above the ledger's size: the prune deletes nothing.
  pruned  max_mb 256, the default, under the ledger's 400 MB (quick: 64% of its size):
          the prune carries, deletes the oldest days and refolds what they held.

Each boot gets a fresh copy of the cached ledger in a throwaway XDG world (bench/daemon.py's
World) under --out, deleted afterwards. Beside them, in a child process, where the time
goes: RunLedger's open (recovery and the window's fold), reconcile, prune and settle_heap,
and that process's peak RSS (once a trial; the quickest is kept). With --against SRC (the
`src` directory of another checkout, an older commit say) every boot is also made by that
code, in the same trials, so a before/after pair sees the same machine weather. Results
go to <out>/results-boot.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from daemon import World  # noqa: E402
from run import DAY, decode_baseline, ensure_ledger  # noqa: E402

# The ledger's span, as bench/run.py's `runs` figure generates it (one cache for both).
SPAN = 6 * DAY + 20 * 3600 * 10**9
DEFAULT_MAX_MB = 256

# In a child process: the boot's steps in the daemon's order, timed one by one.
_STEPS = """
import json, os, resource, sys, time
import harness
from harness.daemon import settle_heap
from harness.ledger import RunLedger
from harness.supervisor.history import reconcile
ledger, max_mb = sys.argv[1], int(sys.argv[2])
t = [time.perf_counter()]
led = RunLedger(ledger, max_bytes=max_mb * 1024 * 1024)
t.append(time.perf_counter())
closed = reconcile(led, led.clock())
t.append(time.perf_counter())
pruned = led.prune()
t.append(time.perf_counter())
settle_heap()
t.append(time.perf_counter())
print(json.dumps({"open_s": t[1] - t[0], "reconcile_s": t[2] - t[1], "prune_s": t[3] - t[2],
                  "settle_s": t[4] - t[3], "records_in_memory": led.stats().records_in_memory,
                  "closed": len(closed), "deleted_days": len(pruned.deleted),
                  "code": os.path.dirname(os.path.dirname(harness.__file__)),
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
led.close()
"""


def ledger_mb(ledger: str) -> float:
    return sum(e.stat().st_size for e in os.scandir(ledger)) / 2**20


def code_env(src: str | None, base: dict[str, str] | None = None) -> dict[str, str]:
    """`base` (this process's environment) for a timed process: running this checkout's
    code, or `src`'s; with the bytecode cache, as an installed tool runs (see run.py's
    bench_reads)."""
    env = {k: v for k, v in (os.environ if base is None else base).items()
           if k != "PYTHONDONTWRITEBYTECODE"}
    if src is not None:
        env["PYTHONPATH"] = os.pathsep.join([src, *filter(None, [env.get("PYTHONPATH")])])
    return env


def boot_once(out: str, ledger: str, max_mb: int, src: str | None = None) -> float:
    """Seconds from the daemon's start to its first answer, on a fresh copy of `ledger`."""
    root = tempfile.mkdtemp(prefix="boot-", dir=out)
    w = World(root)
    try:
        w.env = code_env(src, w.env)
        w.write_config(f"[ledger]\nmax_mb = {max_mb}\n")
        shutil.copytree(ledger, w.ledger_dir)
        t = time.perf_counter()
        w.start()
        took = time.perf_counter() - t
        rc = w.stop()
        if rc != 0:
            raise RuntimeError(f"the daemon exited {rc}: {w.stderr()[-2000:]}")
        return took
    finally:
        w.kill()
        shutil.rmtree(root, ignore_errors=True)


def steps(out: str, ledger: str, max_mb: int, src: str | None = None) -> dict[str, Any]:
    """The in-process breakdown, on a fresh copy of `ledger`."""
    root = tempfile.mkdtemp(prefix="boot-steps-", dir=out)
    try:
        copy = os.path.join(root, "ledger")
        shutil.copytree(ledger, copy)
        proc = subprocess.run([sys.executable, "-c", _STEPS, copy, str(max_mb)],
                              env=code_env(src), capture_output=True, text=True, check=True)
        res: dict[str, Any] = json.loads(proc.stdout)
        return res
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _total(st: dict[str, Any]) -> float:
    return float(st["open_s"] + st["reconcile_s"] + st["prune_s"] + st["settle_s"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="10,000 runs, for a smoke run")
    ap.add_argument("--out", default=os.path.join(HERE, "out"))
    ap.add_argument("--trials", type=int, default=3, help="boots of each kind (best of)")
    ap.add_argument("--against", metavar="SRC",
                    help="also boot with the code in SRC (another checkout's src/)")
    args = ap.parse_args()
    codes: dict[str, str | None] = {"": None}
    if args.against:
        codes["against_"] = os.path.abspath(args.against)
    os.makedirs(args.out, exist_ok=True)
    runs = 10_000 if args.quick else 250_000
    _state, ledger = ensure_ledger(args.out, f"ledger-{runs}", runs, SPAN)
    size = ledger_mb(ledger)
    kinds = {"kept": int(2 * size) + 16,
             "pruned": max(16, int(0.64 * size)) if args.quick else DEFAULT_MAX_MB}
    for src in codes.values():  # warm the bytecode caches, as run.py does
        subprocess.run([sys.executable, "-m", "harness.cli", "--help"], env=code_env(src),
                       stdout=subprocess.DEVNULL, check=True)
    decodes: list[float] = []
    boots: dict[str, list[float]] = {p + k: [] for p in codes for k in kinds}
    # The breakdown whose steps took least in all, of each trial's.
    parts: dict[str, dict[str, Any]] = {}
    lines = 0
    for i in range(args.trials):
        took, lines = decode_baseline(ledger)
        decodes.append(took)
        for kind, max_mb in kinds.items():
            for prefix, src in codes.items():
                boots[prefix + kind].append(boot_once(args.out, ledger, max_mb, src))
                st = steps(args.out, ledger, max_mb, src)
                if prefix + kind not in parts or _total(st) < _total(parts[prefix + kind]):
                    parts[prefix + kind] = st
        print(f"  trial {i + 1}: decode {took:.2f}s, "
              + ", ".join(f"{k} {v[-1]:.2f}s" for k, v in boots.items()), flush=True)
    base = min(decodes)
    res: dict[str, Any] = {
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                    "platform": platform.platform(), "loadavg": os.getloadavg()},
        "lines": lines, "runs": runs, "ledger_mb": size, "trials": args.trials,
        "decode_baseline_s": base, "decode_baseline_all_s": decodes}
    if args.against:
        res["against"] = codes["against_"]
    for prefix in codes:
        for kind, max_mb in kinds.items():
            best = min(boots[prefix + kind])
            res[prefix + kind] = {"max_mb": max_mb, "boot_s": best,
                                  "boot_all_s": boots[prefix + kind],
                                  "ratio_vs_decode": best / base,
                                  "steps": parts[prefix + kind]}
    with open(os.path.join(args.out, "results-boot.json"), "w") as f:
        json.dump(res, f, indent=1)
    print(json.dumps(res, indent=1))
    print("\n| figure | ours | raw baseline (same run) | ratio | target |")
    print("| --- | --- | --- | --- | --- |")
    for prefix in codes:
        who = f" ({codes[prefix]})" if prefix else ""
        for kind, what in (("kept", "the prune deletes nothing"),
                           ("pruned", f"max_mb {kinds['pruned']}: the prune deletes "
                                      f"{res[prefix + 'pruned']['steps']['deleted_days']} "
                                      "day(s)")):
            r = res[prefix + kind]
            print(f"| `harness daemon` start to first answer{who}, {lines:,} lines, {what} | "
                  f"{r['boot_s']:.2f} s | {base:.2f} s msgspec decode | "
                  f"{r['ratio_vs_decode']:.2f}× | 2–3× |")
        for kind in kinds:
            st = res[prefix + kind]["steps"]
            print(f"| same{who}, {kind}, in one process: open / reconcile / prune / "
                  f"settle_heap | {st['open_s']:.2f} / {st['reconcile_s']:.2f} / "
                  f"{st['prune_s']:.2f} / {st['settle_s']:.2f} s (peak RSS "
                  f"{st['peak_rss_mb']:.0f} MB) | — | — | — |")


if __name__ == "__main__":
    main()
