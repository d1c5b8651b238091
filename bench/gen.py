"""Generate a large, valid run ledger fast, for benchmarks.

Lines go through the real schema (`prepare_line`) and the real sealer (seq, prev,
hash), so the result verifies and folds exactly like a daemon-written ledger; only
the fdatasync per line is skipped (files are written buffered), which is what makes
a million lines take seconds instead of minutes.
"""

from __future__ import annotations

import os
import random
from typing import Any

from harness.ledger.chain import ZERO_HASH
from harness.ledger.files import make_private_dir
from harness.ledger.runledger import _DaySealer
from harness.ledger.schema import prepare_line
from harness.timefmt import format_ns

SEC = 1_000_000_000


def run_lines(i: int, t: int, rng: random.Random, harnesses: int) -> list[dict[str, Any]]:
    name = f"agent-{i % harnesses:02d}"
    rid = i // harnesses + 1
    took = rng.randint(30, 1800) * SEC
    tokens = {"input": rng.randint(1000, 90_000), "output": rng.randint(100, 9000),
              "cache_read": rng.randint(0, 200_000), "cache_write": 0}
    outcome = "failed" if rng.random() < 0.1 else "success"
    return [
        {"type": "opened", "harness": name, "run_id": rid, "at": format_ns(t), "kind": "oneshot",
         "trigger": "schedule", "started_at": format_ns(t), "outcome": "running",
         "log": f"/home/u/.local/state/harness/jobs/{name}/{rid}.log"},
        {"type": "updated", "harness": name, "run_id": rid, "at": format_ns(t + took // 3),
         "model": "claude-sonnet-4-5", "tokens": {k: v // 2 for k, v in tokens.items()},
         "model_calls": rng.randint(1, 20),
         "models": [{"model": "claude-sonnet-4-5", "provider": "anthropic",
                     "output_tokens": tokens["output"] // 2}]},
        {"type": "updated", "harness": name, "run_id": rid, "at": format_ns(t + 2 * took // 3),
         "tokens": tokens, "model_calls": rng.randint(20, 40), "usage_complete": True},
        {"type": "closed", "harness": name, "run_id": rid, "at": format_ns(t + took),
         "ended_at": format_ns(t + took), "duration_ms": took // 1_000_000, "outcome": outcome,
         "exit_code": 0 if outcome == "success" else 1,
         "cost_usd": round(tokens["output"] * 15e-6 + tokens["input"] * 3e-6, 6),
         "cost_source": "priced", "todo_id": f"T-{i}"},
    ]


def generate(directory: str, runs: int, span_ns: int, end_ns: int, harnesses: int = 50,
             seed: int = 7) -> int:
    """Write `runs` runs (4 lines each) spread evenly over `span_ns` ending at `end_ns`."""
    make_private_dir(directory)
    rng = random.Random(seed)
    sealer = _DaySealer(directory)
    seq, prev = 1, ZERO_HASH
    handles: dict[str, Any] = {}
    step = span_ns // max(1, runs)
    start = end_ns - span_ns
    # Runs overlap in time but each run's lines are written in order; order the whole
    # stream by `at` (as a daemon would) with a small window sort.
    pending: list[tuple[str, int, dict[str, Any]]] = []
    n = 0
    for i in range(runs):
        t = start + i * step
        for line in run_lines(i, t, rng, harnesses):
            pending.append((line["at"], n, line))
            n += 1
        if len(pending) > 40_000 or i == runs - 1:
            pending.sort(key=lambda p: (p[0], p[1]))
            cut = len(pending) if i == runs - 1 else len(pending) // 2
            horizon = format_ns(t - 3600 * SEC) if i != runs - 1 else None
            keep = []
            for at, k, line in pending[:cut] if horizon is None else pending:
                if horizon is not None and at > horizon:
                    keep.append((at, k, line))
                    continue
                obj, _ = prepare_line(line)
                data, prev, path = sealer.seal(obj, seq, prev)
                seq += 1
                f = handles.get(path)
                if f is None:
                    for old in handles.values():
                        old.close()
                    handles.clear()
                    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
                    f = handles[path] = os.fdopen(fd, "ab", buffering=1 << 20)
                f.write(data + b"\n")
            pending = keep
    for f in handles.values():
        f.close()
    return seq - 1
