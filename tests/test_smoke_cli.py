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


def test_every_command_resolves_and_help_lists_them_all(world) -> None:
    """Commands load on demand: each name the group lists is the command of that name,
    and `harness --help` shows every one with its summary."""
    import click

    from harness.cli.main import cli

    ctx = click.Context(cli)
    names = cli.list_commands(ctx)
    assert names == ["daemon", "down", "jobs", "ledger", "list", "logs", "reload", "restart",
                     "runs", "start", "stop", "trigger", "up"]
    assert [c.name for c in (cli.get_command(ctx, n) for n in names) if c] == names
    assert cli.get_command(ctx, "nope") is None
    res = world.harness("--help")
    rows = res.stdout.split("Commands:\n", 1)[1].splitlines()
    assert res.returncode == 0
    assert [r.split()[0] for r in rows if r.startswith("  ") and r[2] != " "] == names
    res = world.harness("nope")
    assert (res.returncode, res.stderr.splitlines()[-1]) == (2, "Error: No such command 'nope'.")


def test_runs_loads_neither_the_daemon_nor_the_work_ledger(world) -> None:
    """`harness runs` reads the ledger without loading the daemon's config models or the
    work ledger's git code, which took half its start-up."""
    import subprocess
    import sys

    code = ("import sys\nfrom harness.cli.main import cli\n"
            "try:\n    cli.main(['runs', '--json'], standalone_mode=False)\n"
            "finally:\n    print(sorted(m for m in sys.modules if m.startswith(("
            "'harness.config.load', 'harness.supervisor', 'harness.worklog', 'pydantic'))),"
            " file=sys.stderr)\n")
    res = subprocess.run([sys.executable, "-c", code], env=world.env, capture_output=True,
                         text=True, timeout=60)
    assert (res.returncode, res.stdout) == (0, "[]\n")
    assert res.stderr.splitlines()[-1] == "[]"
