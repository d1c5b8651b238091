"""`make demo`: the daemon on an embedded example config, in a throwaway XDG world.

It writes a harness.toml with a scheduled one-shot, a triggered one-shot and a resident
worker, starts the real `harness daemon`, triggers a run, lets the schedule fire and the
resident crash-loop for a few seconds, shows `harness runs`, `jobs` and `list` filling in,
then stops the daemon with SIGTERM (live runs close as interrupted) and verifies the
ledger's chain. Everything stays in the temporary directory it prints.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time

from .control.client import Client, DaemonUnreachable

CONFIG = """\
# An example harness.toml (see DESIGN.md §3 for every key).

[harness.nightly-review]          # a scheduled one-shot
argv = ["sh", "-c", "echo reviewing todays changes; sleep 1; echo looks fine"]
schedule = "@every 4s"

[harness.pr-check]                # a one-shot run on demand: harness trigger pr-check
kind = "oneshot"
argv = ["sh", "-c", "echo checking the PR; sleep 1; echo 'test_login failed'; exit 3"]

[harness.todo-worker]             # a resident worker, restarted when it exits
argv = ["sh", "-c", "echo draining the todo queue; sleep 2; exit 1"]
restart_delay = "500ms"
"""


def _run(env: dict[str, str], *args: str) -> int:
    print("$ harness " + " ".join(args), flush=True)
    res = subprocess.run([sys.executable, "-m", "harness.cli", *args], env=env, check=False,
                         stderr=subprocess.STDOUT)
    print(flush=True)
    return res.returncode


def main() -> None:
    seconds = float(os.environ.get("HARNESS_DEMO_SECONDS", "10"))
    root = tempfile.mkdtemp(prefix="harness-demo-")
    env = dict(os.environ)
    env.update(XDG_CONFIG_HOME=os.path.join(root, "config"),
               XDG_STATE_HOME=os.path.join(root, "state"),
               XDG_RUNTIME_DIR=os.path.join(root, "run"))
    for var in ("HARNESS_CONFIG", "HARNESS_SOCKET"):
        env.pop(var, None)
    os.makedirs(os.path.join(root, "config", "harness"), mode=0o700)
    os.makedirs(os.path.join(root, "run"), mode=0o700)
    config = os.path.join(root, "config", "harness", "harness.toml")
    with open(config, "w", encoding="utf-8") as f:
        f.write(CONFIG)
    print(f"example config: {config}\n\n{CONFIG}", flush=True)

    with open(os.path.join(root, "daemon.log"), "w") as log:
        daemon = subprocess.Popen([sys.executable, "-m", "harness.cli", "daemon"], env=env,
                                  stdout=subprocess.DEVNULL, stderr=log)
    sock = os.path.join(root, "run", "harness.sock")
    deadline = time.monotonic() + 30
    while True:
        try:
            Client(sock, timeout=2.0).close()
            break
        except DaemonUnreachable:
            if daemon.poll() is not None or time.monotonic() > deadline:
                sys.exit(f"harness daemon did not start; see {root}/daemon.log")
            time.sleep(0.1)
    print(f"harness daemon is up (pid {daemon.pid}); its log: {root}/daemon.log\n", flush=True)
    try:
        _run(env, "trigger", "pr-check", "--wait")
        time.sleep(max(0.0, seconds - 2))
        _run(env, "runs", "--since", "1h")
        _run(env, "jobs")
        _run(env, "list")
        _run(env, "runs", "todo-worker", "--wide", "--limit", "3")
    finally:
        daemon.send_signal(signal.SIGTERM)
        code = daemon.wait(timeout=60)
    print(f"harness daemon stopped on SIGTERM (exit {code}); the runs it was supervising "
          "closed as interrupted:\n", flush=True)
    _run(env, "runs", "--since", "1h", "--outcome", "interrupted")
    _run(env, "ledger", "verify")
    print(f"(everything stays in {root}; query it with XDG_STATE_HOME={root}/state)")


if __name__ == "__main__":
    main()
