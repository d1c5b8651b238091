"""Benchmark: verifying a large work ledger (`harness.worklog.verify`).

Owns nothing but a measurement. It writes a ledger of N small rows straight to disk
(rows computed directly by `harness.worklog.rows.make_row`, not through the synced
writer, which would measure fdatasync instead), then times `verify_lines` and
`verify_dir` (on one core, and forked across every core) against a plain msgspec
decode of the same lines — the floor any verifier that parses every line pays.
Invariant: the ledger it writes verifies (the run aborts otherwise), so a fast figure
is never the figure of a failing walk.

    python bench/worklog_verify.py [--entries 1000000] [--dir DIR] [--repeat 3]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import msgspec

from harness.worklog.rows import GENESIS, clean_payload, make_row
from harness.worklog.verify import read_chain, verify_dir, verify_lines

_KINDS = ("task.scheduled", "task.started", "task.completed")


def generate(path: Path, n: int) -> float:
    """Write `n` rows to `path`; return the seconds it took."""
    t0 = time.perf_counter()
    prev = GENESIS
    ts = 1_764_460_800_000_000_000
    out: list[bytes] = []
    with open(path, "wb") as f:
        for seq in range(1, n + 1):
            task = seq // 3
            payload, data, _ = clean_payload(
                {
                    "attempt": 1,
                    "commit": f"{seq * 2654435761 % (1 << 160):040x}",
                    "harness": "worker",
                    "run_id": task,
                }
            )
            row, line = make_row(
                seq=seq,
                ts_ns=ts + seq * 1_000_003,
                kind=_KINDS[seq % 3],
                task_id=f"t{task}",
                payload=payload,
                payload_bytes=data,
                prev_hash=prev,
                redactions=0,
            )
            prev = row["entry_hash"]
            out.append(line)
            if len(out) >= 8192:
                f.write(b"\n".join(out) + b"\n")
                out.clear()
        if out:
            f.write(b"\n".join(out) + b"\n")
    return time.perf_counter() - t0


def best(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        gc.collect()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--entries", type=int, default=1_000_000)
    ap.add_argument("--dir", type=Path, default=None)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        d = Path(tmp) / "bench-run"
        d.mkdir()
        gen = generate(d / "000000.jsonl", args.entries)
        lines, torn, _size, _starts = read_chain(d)
        assert torn is None and len(lines) == args.entries
        res = verify_lines(lines)
        assert res.ok and res.entry_count == args.entries, res
        decoder = msgspec.json.Decoder()

        def plain() -> None:
            dec = decoder.decode
            for raw in lines:
                dec(raw)

        t_plain = best(plain, args.repeat)
        t_lines = best(lambda: verify_lines(lines), args.repeat)
        t_dir = best(lambda: verify_dir(d, parallel=False), args.repeat)
        t_par = best(lambda: verify_dir(d, parallel=True), args.repeat)
        assert verify_dir(d, parallel=True) == verify_dir(d, parallel=False)
        n = args.entries
        report = {
            "entries": n,
            "bytes": os.path.getsize(d / "000000.jsonl"),
            "generate_s": round(gen, 3),
            "plain_msgspec_decode_per_s": round(n / t_plain),
            "verify_lines_per_s": round(n / t_lines),
            "verify_dir_per_s": round(n / t_dir),
            "verify_dir_parallel_per_s": round(n / t_par),
            "cpus": os.cpu_count(),
            "load_avg_1m": round(os.getloadavg()[0], 2),
            "verify_lines_vs_plain_decode": round(t_lines / t_plain, 2),
            "verify_dir_vs_plain_decode": round(t_dir / t_plain, 2),
        }
        print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
