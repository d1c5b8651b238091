"""The offline reader on valid but unusual ledgers, each against a raw decode in the same run.

    .venv/bin/python bench/pathological.py [--only P2,P3,P8] [--scale 0.1]

The issue's benchmark (bench/run.py) is 250k short runs. These shapes are what it does not
exercise; each is generated through the real schema and sealer (bench/gen.py's way), so it
verifies and folds as a daemon-written ledger would:

  P2  one long-running run with 1,000,000 `updated` lines, opened 36 h ago and still open:
      `harness runs long --json` and `harness runs --since 3d --json` fold every line of it
      (target: ≤ 2× the decode).
  P3  the same kind of run opened 4 days ago, its 1,000,000 updates all older than the
      default window, a few in the last hour, beside 200 short runs of the last day:
      the default `harness runs --json` must look back for its opened line
      (target: peak RSS ≤ 200 MB; its time is shown too).
  P8  30,000 lines near the 16 KiB cap (a field of a later schema, a 15,800-byte string,
      which readers skip) beside 15,000 short ones: `harness runs --since 7d --json`
      (target: ≤ 2× the decode).

Each figure is the command's wall time (the best of 3, as a process: interpreter start
included) over the best of 3 in-process msgspec decodes of every line of the same ledger,
the baseline bench/run.py uses, the two alternated. Ledgers are cached in
bench/out/patho-* and regenerated when missing or older than 12 h (their times are
relative to now).
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from harness.ledger.chain import ZERO_HASH  # noqa: E402
from harness.ledger.files import make_private_dir  # noqa: E402
from harness.ledger.runledger import _DaySealer  # noqa: E402
from harness.ledger.schema import prepare_line  # noqa: E402
from harness.timefmt import format_ns  # noqa: E402
from run import decode_baseline, generated, peak_memory, run_timed  # noqa: E402

SEC = 1_000_000_000
HOUR = 3600 * SEC
DAY = 24 * HOUR


def write_ledger(directory: str, lines: Iterator[dict[str, Any]]) -> int:
    """Seal `lines` (in `at` order) into day files; the number written."""
    make_private_dir(directory)
    sealer = _DaySealer(directory)
    seq, prev = 1, ZERO_HASH
    f: Any = None
    open_path = ""
    try:
        for line in lines:
            extra = line.pop("_extra", None)
            obj, _ = prepare_line(line)
            if extra:  # fields the schema would refuse, though every reader reads the line
                obj.update(extra)
            data, prev, path = sealer.seal(obj, seq, prev)
            seq += 1
            if path != open_path:
                if f is not None:
                    f.close()
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
                f, open_path = os.fdopen(fd, "ab", buffering=1 << 20), path
            f.write(data + b"\n")
    finally:
        if f is not None:
            f.close()
    return seq - 1


def long_run(name: str, start: int, n: int, end: int) -> Iterator[dict[str, Any]]:
    """A resident's opened line at `start`, then `n` usage checkpoints spread to `end`."""
    yield {"type": "opened", "harness": name, "run_id": 1, "at": format_ns(start),
           "kind": "resident", "trigger": "autostart", "started_at": format_ns(start),
           "outcome": "running", "log": f"/home/u/.local/state/harness/logs/{name}.log"}
    step = (end - start) // (n + 1)
    for i in range(1, n + 1):
        line: dict[str, Any] = {
            "type": "updated", "harness": name, "run_id": 1, "at": format_ns(start + i * step),
            "tokens": {"input": 1000 * i, "output": 100 * i, "cache_read": 50 * i,
                       "cache_write": 0},
            "model_calls": i, "cost_usd": round(i * 0.0003, 6)}
        if i % 1000 == 1:  # a new session now and then, the model once
            line["sessions"] = [{"id": f"s-{i}", "adapter": "claude", "trace_id": f"{i:032x}"}]
            line["model"] = "claude-sonnet-4-5"
        yield line


def short_runs(name: str, start: int, count: int, step: int) -> Iterator[dict[str, Any]]:
    for k in range(count):
        t = start + k * step
        yield {"type": "opened", "harness": name, "run_id": k + 1, "at": format_ns(t),
               "kind": "oneshot", "trigger": "schedule", "started_at": format_ns(t),
               "outcome": "running"}
        yield {"type": "closed", "harness": name, "run_id": k + 1, "at": format_ns(t + SEC),
               "ended_at": format_ns(t + SEC), "duration_ms": 1000, "outcome": "success",
               "exit_code": 0}


def merged(*streams: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """The lines of several streams, each in `at` order, in `at` order (as a daemon writes)."""
    return heapq.merge(*streams, key=lambda line: line["at"])


def shape_p2(n: int, now: int) -> Iterator[dict[str, Any]]:
    return long_run("long", now - 36 * HOUR, n, now - 10 * 60 * SEC)


def shape_p3(n: int, now: int) -> Iterator[dict[str, Any]]:
    start = now - 4 * DAY
    tail = ({"type": "updated", "harness": "long", "run_id": 1,
             "at": format_ns(now - HOUR + k * 60 * SEC), "model_calls": n + k + 1}
            for k in range(10))
    return merged(_chain(long_run("long", start, n, start + DAY), tail),
                  short_runs("short", now - DAY + 10 * 60 * SEC, 200, 5 * 60 * SEC))


def _chain(*its: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for it in its:
        yield from it


def noted(line: dict[str, Any], size: int) -> dict[str, Any]:
    """`line` with a field no reader knows (a later schema's), a string of `size` bytes:
    readers must skip it unread (REQ-2), and its bytes bring the line near the cap."""
    return {**line, "_extra": {"note": "n" * size}}


def shape_p8(n: int, now: int) -> Iterator[dict[str, Any]]:
    """n lines of 16,000 bytes: each run's updated and closed lines carry a long note."""
    runs = n // 2
    start = now - 6 * DAY
    step = (6 * DAY - HOUR) // runs
    for k in range(runs):
        t, name, rid = start + k * step, f"wide-{k % 20:02d}", k // 20 + 1
        yield {"type": "opened", "harness": name, "run_id": rid, "at": format_ns(t),
               "kind": "oneshot", "trigger": "schedule", "started_at": format_ns(t),
               "outcome": "running"}
        yield noted({"type": "updated", "harness": name, "run_id": rid,
                     "at": format_ns(t + 10 * SEC), "model_calls": 3}, 15_800)
        yield noted({"type": "closed", "harness": name, "run_id": rid,
                     "at": format_ns(t + 20 * SEC), "ended_at": format_ns(t + 20 * SEC),
                     "duration_ms": 20_000, "outcome": "success", "exit_code": 0}, 15_800)


SHAPES = {
    # name: (generator, lines at scale 1, [(label, argv after `harness`), ...])
    "P2": (shape_p2, 1_000_000, [("runs long --json", ["runs", "long", "--json"]),
                                 ("runs --since 3d --json", ["runs", "--since", "3d", "--json"])]),
    "P3": (shape_p3, 1_000_000, [("runs --json", ["runs", "--json"])]),
    "P8": (shape_p8, 30_000, [("runs --since 7d --json", ["runs", "--since", "7d", "--json"])]),
}


def ensure(out: str, shape: str, n: int) -> tuple[str, str, int]:
    return generated(
        out, f"patho-{shape}-{n}", {"shape": shape, "n": n},
        f"(p := __import__('pathological')).write_ledger(ledger, p.SHAPES[{shape!r}][0]"
        f"({n}, end))", shape)


def measure(out: str, shape: str, scale: float) -> list[dict[str, Any]]:
    _gen, full, commands = SHAPES[shape]
    state, ledger, _ = ensure(out, shape, max(10, int(full * scale)))
    env = dict(os.environ, XDG_STATE_HOME=state, HARNESS_SOCKET=os.path.join(state, "no.sock"))
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # as an installed tool runs: see bench/run.py
    harness = [sys.executable, "-m", "harness.cli"]
    subprocess.run([*harness, "--help"], env=env, stdout=subprocess.DEVNULL, check=True)
    rows = []
    for label, argv in commands:
        # Alternated, the best of each: a machine busy for a while slows both sides.
        bases, runs = [], []
        for _ in range(3):
            bases.append(decode_baseline(ledger))
            runs.append(run_timed([*harness, *argv], env))
        (base, n), (took, rc) = min(bases), min(runs)
        rss, _pss, _ = peak_memory([*harness, *argv], env)
        rows.append({"shape": shape, "command": f"harness {label}", "lines": n,
                     "decode_s": base, "command_s": took, "exit": rc,
                     "ratio": took / base, "peak_rss_mb": rss})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", default=",".join(SHAPES), help="shapes to run, e.g. P2,P8")
    ap.add_argument("--scale", type=float, default=1.0, help="line counts × this (smoke runs)")
    ap.add_argument("--out", default=os.path.join(HERE, "out"))
    args = ap.parse_args()
    shapes = [s.strip().upper() for s in args.only.split(",") if s.strip()]
    bad = [s for s in shapes if s not in SHAPES]
    if bad:
        ap.error(f"unknown shape {bad[0]} (valid: {', '.join(SHAPES)})")
    os.makedirs(args.out, exist_ok=True)
    rows = []
    for shape in shapes:
        got = measure(args.out, shape, args.scale)
        print(json.dumps(got, indent=1), flush=True)
        rows += got
    with open(os.path.join(args.out, "pathological.json"), "w") as f:
        json.dump(rows, f, indent=1)
    print("\n| shape | command | lines | time | msgspec decode (same run) | ratio | peak RSS |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['shape']} | `{r['command']}` | {r['lines']:,} | {r['command_s']:.2f} s | "
              f"{r['decode_s']:.2f} s | {r['ratio']:.2f}× | {r['peak_rss_mb']:.0f} MB |")


if __name__ == "__main__":
    main()
