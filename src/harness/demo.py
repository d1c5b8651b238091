"""`make demo`: a realistic small run ledger, written through the engine, then queried.

It builds a throwaway XDG state directory, writes a week of runs for three
harnesses (a nightly one-shot, a webhook-triggered reviewer and a resident
worker, with failures, a timeout, a missed window, usage and a run still open)
through `RunLedger`, exactly as the daemon will, and then runs the real
`harness runs` and `harness ledger verify` commands over it.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import tempfile

from .ledger import RunLedger
from .timefmt import format_ns, now_ns

MIN = 60 * 1_000_000_000


def _demo_lines(state: str, now: int) -> list[dict[str, object]]:
    """A week of runs for three harnesses, as the daemon would have written them."""
    rng = random.Random(22)
    out: list[dict[str, object]] = []
    ids: dict[str, int] = {}
    starts: list[tuple[int, str, dict[str, object]]] = []
    for day in range(6, -1, -1):
        t = now - day * 1440 * MIN - 9 * 60 * MIN
        starts.append((t, "nightly", {"trigger": "schedule"}))
        for k in range(3):
            starts.append((t + (k + 1) * 97 * MIN, "pr-review",
                           {"trigger": "webhook", "source": "webhook.github"}))
    newest_review = max(t for t, name, _ in starts if name == "pr-review")
    for t, name, extra in sorted(starts, key=lambda e: e[0]):
        ids[name] = rid = ids.get(name, 0) + 1
        if name == "nightly" and rid == 3:
            out.append({"type": "decided", "harness": name, "run_id": rid, "kind": "oneshot",
                        "trigger": "schedule", "outcome": "missed", "at": format_ns(t),
                        "started_at": format_ns(t), "window": format_ns(t - 1440 * MIN),
                        "first_window": format_ns(t - 2880 * MIN), "windows": 2})
            continue
        log = os.path.join(state, "jobs", name, f"{rid}.log")
        out.append({"type": "opened", "harness": name, "run_id": rid, "kind": "oneshot",
                    "started_at": format_ns(t), "at": format_ns(t), "outcome": "running",
                    "log": log, **extra})
        took = rng.randint(2, 40) * MIN
        if t + took > now:
            took = max(MIN, (now - t) // 2)
        tokens = {"input": rng.randint(20_000, 90_000), "output": rng.randint(2_000, 9_000),
                  "cache_read": rng.randint(0, 200_000), "cache_write": 0}
        out.append({"type": "updated", "harness": name, "run_id": rid,
                    "at": format_ns(t + took // 2), "model": "claude-sonnet-4-5",
                    "tokens": tokens, "model_calls": rng.randint(5, 60),
                    "models": [{"model": "claude-sonnet-4-5", "provider": "anthropic",
                                "output_tokens": tokens["output"]}]})
        if t == newest_review:
            continue  # still running
        outcome, code = ("failed", 1) if rid % 5 == 0 else ("success", 0)
        if name == "nightly" and rid == 5:
            outcome, code, took = "timed_out", -1, 60 * MIN
        end = t + took
        out.append({"type": "closed", "harness": name, "run_id": rid, "at": format_ns(end),
                    "ended_at": format_ns(end), "duration_ms": took // 1_000_000,
                    "outcome": outcome, "exit_code": code,
                    "cost_usd": round(tokens["output"] * 15e-6 + tokens["input"] * 3e-6, 4),
                    "cost_source": "priced",
                    "todo_id": f"T-{100 + rid}" if name == "pr-review" else None})
    start = now - 5 * 60 * MIN
    log = os.path.join(state, "logs", "todo-worker.log")
    for rid, (trigger, life, status) in enumerate(
        [("autostart", 3, 1), ("restart", 3, 1), ("restart", 40, 0), ("manual", 0, None)], 1
    ):
        out.append({"type": "opened", "harness": "todo-worker", "run_id": rid,
                    "kind": "resident", "trigger": trigger, "started_at": format_ns(start),
                    "at": format_ns(start), "outcome": "running", "log": log})
        if status is None:
            break
        start += life * MIN
        out.append({"type": "closed", "harness": "todo-worker", "run_id": rid,
                    "at": format_ns(start), "ended_at": format_ns(start),
                    "duration_ms": life * 60_000, "exit_code": status,
                    "outcome": "success" if status == 0 else "failed"})
        start += MIN
    out.sort(key=lambda line: str(line["at"]))
    return out


def write_demo_ledger(state: str, now: int) -> int:
    """Write the demo runs through the engine; keep_runs=5 worth of per-run logs on disk."""
    lines = _demo_lines(state, now)
    ledger = RunLedger(os.path.join(state, "ledger"))
    for line in lines:
        ledger.append(line, sync=line["type"] != "updated")
    ledger.close()
    logs = sorted({str(x["log"]) for x in lines if "log" in x})
    by_dir: dict[str, list[str]] = {}
    for path in logs:
        by_dir.setdefault(os.path.dirname(path), []).append(path)
    for paths in by_dir.values():
        paths.sort(key=lambda p: int(os.path.basename(p).split(".")[0]) if "jobs" in p else 0)
        for path in paths[-5:]:
            os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
            os.close(fd)
    return len(lines)


def main() -> None:
    state = tempfile.mkdtemp(prefix="harness-demo-")
    env = dict(os.environ, XDG_STATE_HOME=state, HARNESS_SOCKET=os.path.join(state, "none.sock"))
    home = os.path.join(state, "harness")
    n = write_demo_ledger(home, now_ns())
    print(f"wrote {n} lines to {home}/ledger\n")
    harness = [sys.executable, "-m", "harness.cli"]
    for args in (["runs", "--since", "7d", "--limit", "12"],
                 ["runs", "pr-review", "--wide", "--limit", "5"],
                 ["runs", "--since", "7d", "--outcome", "failed,timed_out,missed"],
                 ["ledger", "verify"]):
        print("$ harness " + " ".join(args), flush=True)
        subprocess.run(harness + args, env=env, check=False, stderr=subprocess.STDOUT)
        print(flush=True)
    print(f"(the ledger stays in {state} for you to query with XDG_STATE_HOME={state})")


if __name__ == "__main__":
    main()
