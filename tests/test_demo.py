"""`make demo` (the README's main job) runs the daemon on its embedded config end to end."""

from __future__ import annotations

import os
import subprocess
import sys


def test_the_demo_runs_the_daemon_and_shows_runs_filling_in(tmp_path) -> None:
    env = dict(os.environ, HARNESS_DEMO_SECONDS="7", TMPDIR=str(tmp_path), TZ="UTC")
    res = subprocess.run([sys.executable, "-m", "harness.demo"], env=env, capture_output=True,
                         text=True, timeout=180)
    out = res.stdout
    assert res.returncode == 0, out + res.stderr
    assert "Traceback" not in out + res.stderr
    assert "pr-check run 1: failed" in out  # the triggered one-shot exits 3
    table = out.split("$ harness runs --since 1h\n", 1)[1].split("\n\n", 1)[0].splitlines()
    rows = [line.split() for line in table[1:]]
    by = {(r[0], r[1]): r for r in rows}
    assert by[("pr-check", "1")][-3:] == ["manual", "failed", "3"]
    assert by[("todo-worker", "1")][-3:] == ["autostart", "failed", "1"]
    assert ("todo-worker", "2") in by and by[("todo-worker", "2")][-3] == "restart"
    reviews = [r for r in rows if r[0] == "nightly-review"]
    assert reviews and all(r[-3] == "schedule" for r in reviews)
    assert all(r[-2:] == ["success", "0"] for r in reviews if r[-2] != "running")
    assert "harness daemon stopped on SIGTERM (exit 0)" in out
    assert "ok: " in out.split("$ harness ledger verify\n", 1)[1]
