"""Smoke test of bench/daemon.py at a tiny scale: it boots real daemons and its JSON adds up.

Only counts and shapes are checked here; the speed figures live in the benchmark itself.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent / "bench" / "daemon.py"


def test_bench_daemon_smoke(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("HARNESS_CONFIG", "HARNESS_SOCKET")}
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--json", "--out", str(tmp_path), "--triggers", "10",
         "--harnesses", "3", "--duration", "3", "--records", "1100", "--runs-ops", "5"],
        env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(proc.stdout)
    assert set(res) == {"machine", "trigger", "schedules", "runs_op"}

    tr = res["trigger"]
    assert tr["daemon_exit"] == 0
    assert tr["n"] == 10
    # Every trigger waited for the previous run: ten runs, all successful, none skipped.
    assert tr["records"] == 10
    assert tr["outcomes"] == {"success": 10}
    for key in ("trigger_rtt", "trigger_to_child", "raw_fdatasync", "raw_popen_to_child"):
        assert 0 < tr[key]["p50_ms"] <= tr[key]["p99_ms"] <= tr[key]["max_ms"]
    assert tr["ratio_rtt_vs_fdatasync_p50"] > 0

    sc = res["schedules"]
    assert sc["daemon_exit"] == 0
    assert sc["harnesses"] == 3
    assert sc["windows_expected_per_harness"] >= 1
    assert sc["windows_expected_total"] == 3 * sc["windows_expected_per_harness"]
    # Each window is accounted for once: a run, a skipped record, a window the daemon
    # recorded as missed, or (missed_total) no record at all.
    covered = sc["windows_expected_total"] - sc["missed_total"]
    assert 0 < covered == (sc["runs_total"] + sc["skipped_total"]
                           + sc["recorded_missed_windows"])
    assert sc["rss_peak_mb"] >= sc["rss_at_start_mb"] > 0
    assert sc["cpu_s"] >= 0

    ro = res["runs_op"]
    assert ro["daemon_exit"] == 0
    assert ro["records"] == 1100
    assert ro["lines"] == 4 * 1100
    assert ro["records_in_memory"] == 1100
    assert ro["returned"] == 1000
    assert ro["inproc_returned"] == 1000
    assert ro["n"] == 5
    assert ro["runs_op"]["p50_ms"] > 0
    assert (tmp_path / "results-daemon.json").is_file()
    # The throwaway world is gone afterwards.
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("daemon-")]
