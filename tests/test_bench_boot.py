"""Smoke test of bench/boot.py --quick: both boots are measured against the decode of the
same lines, and the in-process breakdown holds the whole ledger.

Only counts and shapes are checked here; the speed figures live in the benchmark itself.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench" / "boot.py"


def test_bench_boot_smoke(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, str(BENCH), "--quick", "--trials", "1",
                           "--out", str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads((tmp_path / "results-boot.json").read_text())
    assert set(res) == {"machine", "lines", "runs", "ledger_mb", "trials", "decode_baseline_s",
                        "decode_baseline_all_s", "kept", "pruned"}
    assert (res["runs"], res["lines"], res["trials"]) == (10_000, 40_000, 1)
    assert res["decode_baseline_s"] == min(res["decode_baseline_all_s"]) > 0
    for kind in ("kept", "pruned"):
        r = res[kind]
        assert r["boot_s"] == min(r["boot_all_s"]) > 0
        assert r["ratio_vs_decode"] == pytest.approx(r["boot_s"] / res["decode_baseline_s"])
        steps = r["steps"]
        assert steps["closed"] == 0  # the generated runs all closed
        assert all(steps[k] >= 0 for k in ("open_s", "reconcile_s", "prune_s", "settle_s"))
    # Nothing pruned: every run of the last 7 days is in memory.
    assert res["kept"]["steps"]["deleted_days"] == 0
    assert res["kept"]["steps"]["records_in_memory"] == 10_000
    # Every world the boots made is gone; the cached ledger stays.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ledger-10000", "results-boot.json"]
