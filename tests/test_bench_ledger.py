"""Smoke test of bench/run.py --quick: every figure is measured and its counts add up.

Only counts and shapes are checked here; the speed figures live in the benchmark itself.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench" / "run.py"


def test_bench_ledger_smoke(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, str(BENCH), "--quick", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads((tmp_path / "results.json").read_text())
    assert set(res) == {"machine", "latency", "cold", "path", "group_commit", "gil", "native",
                        "slow_latency", "slow_group_commit", "reads", "index"}

    for lat, n, delay in ((res["latency"], 400, 0.0), (res["slow_latency"], 100, 0.001)):
        assert (lat["n"], lat["sync_delay_s"]) == (n, delay)
        for key in ("raw", "append", "handoff_floor", "writer_only"):
            assert 0 < lat[f"{key}_p50_us"] <= lat[f"{key}_p99_us"]
        assert lat["ratio_p50"] == pytest.approx(lat["append_p50_us"] / lat["raw_p50_us"])
    # The slow disk's sleep is in both the baseline and the ledger's syncs.
    assert res["slow_latency"]["raw_p50_us"] >= 1000
    assert res["slow_latency"]["append_p50_us"] >= 1000

    cold = res["cold"]
    assert cold["penalty"] == pytest.approx(cold["after_sync_us"] / cold["warm_us"])
    assert cold["warm_us"] > 0

    # Each leg of an append was stamped inside that append (a stale stamp from the append
    # before would make a leg negative), and none is longer than the whole.
    path = res["path"]
    assert set(path) == {f"{leg}_p50_us" for leg in ("caller", "to_writer", "io", "back",
                                                      "total")}
    assert all(0 < v <= path["total_p50_us"] for v in path.values())

    for gc, lines in ((res["group_commit"], 16 * 20), (res["slow_group_commit"], 16 * 5)):
        assert (gc["threads"], gc["lines"]) == (16, lines)
        assert 1 <= gc["lines_per_sync"] <= 16  # a sync is shared by at most every thread
        assert gc["ratio"] == gc["lines_per_s"] / gc["raw_one_thread_lines_per_s"]
        assert gc["no_sync_ratio"] == (gc["no_sync_16_threads_lines_per_s"]
                                       / gc["raw_one_thread_lines_per_s"])
        assert gc["work_only_ratio"] == (gc["work_only_16_threads_lines_per_s"]
                                         / gc["raw_one_thread_lines_per_s"])

    # One caller's every line has a sync of its own; sixteen share them.
    gil = res["gil"]
    assert gil["one_lines_per_commit"] == 1.0
    assert 1 <= gil["many_lines_per_commit"] <= 16
    assert all(gil[f"{k}_{leg}_p50_us"] > 0 for k in ("one", "many") for leg in ("write", "sync"))

    # The C writer thread is built here (this project's machines have a compiler), and
    # the bench itself checks that every line it acknowledged lies whole in its file.
    nat = res["native"]
    assert "skipped" not in nat, nat
    assert (nat["n"], nat["threads"], nat["lines"]) == (400, 16, 320)
    for key in ("bare", "work"):
        assert nat[f"{key}_ratio_p50"] == nat[f"{key}_p50_us"] / nat["raw_p50_us"]
        assert nat[f"{key}_16_threads_ratio"] == (nat[f"{key}_16_threads_lines_per_s"]
                                                  / nat["raw_one_thread_lines_per_s"])
        assert 1 <= nat[f"{key}_16_threads_lines_per_sync"] <= 16

    rd = res["reads"]
    assert (rd["runs"], rd["lines"]) == (10_000, 40_000)  # four lines a run
    assert rd["runs_query_exit"] == 0 and rd["verify_exit"] == 0
    assert rd["verify_lines_per_s"] == rd["lines"] / rd["verify_s"]
    assert res["index"]["records_in_memory"] == 7_000

    rows = [ln for ln in proc.stdout.splitlines() if ln.startswith("| ")]
    assert len(rows) == 23  # the header, its rule and twenty-one figures
    assert rows[0].startswith("| figure |") and rows[2].startswith("| synced append p50 |")
    # The throwaway working directory is gone; only the cached ledgers and results stay.
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "index-7000", "ledger-10000", "results.json"]
