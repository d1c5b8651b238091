"""The thin end-to-end slice: lines written through the engine, read back by the real CLI."""

from __future__ import annotations

import json

from harness.ledger import RunLedger
from harness.timefmt import format_ns, now_ns
from ledgertools import verify_ok


def test_runs_lists_what_the_engine_wrote(world) -> None:
    led = RunLedger(str(world.ledger))
    t = now_ns()
    led.append({"type": "opened", "harness": "nightly", "run_id": 1, "kind": "oneshot",
                "trigger": "schedule", "started_at": format_ns(t), "outcome": "running"})
    led.append({"type": "closed", "harness": "nightly", "run_id": 1, "outcome": "failed",
                "exit_code": 3, "ended_at": format_ns(t + 5_000_000_000), "duration_ms": 5000})
    led.close()
    res = world.harness("runs", "nightly", "--json")
    assert res.returncode == 0, res.stderr
    recs = json.loads(res.stdout)
    assert [(r["run_id"], r["seq"], r["outcome"], r["exit_code"]) for r in recs] == [
        (1, 1, "failed", 3)
    ]
    assert "read the ledger from disk" in res.stderr
    assert "2 lines" in verify_ok(world)
