"""Mutation-test survivors of the `harness ledger` work-ledger commands (`harness.cli.ledger`)
and of the control client (`harness.control.client`): a work tree named after a token,
scrubbed from every "no work ledger" line and --json reason as resume already scrubbed it.
Real git work trees in tmp dirs, the real `harness` CLI, exact stdout, stderr and exit
codes (DESIGN.md §2: 0 ok, 1 no ledger, 2 verification failed, 3 divergence)."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import World
from test_worklog_cli import cli, err_line, make_repo

TOKEN = "ghp_" + "A1b2C3d4" * 4 + "abcd"  # the form of a GitHub token


def test_no_work_ledger_never_shows_a_token_in_the_work_trees_path(world: World,
                                                                   tmp_path: Path) -> None:
    repo = make_repo(tmp_path / TOKEN)
    shown = f"{tmp_path}/[REDACTED]/.harness/runtime/ledger"
    res = cli(world, repo, "ledger", "verify", "g1")
    assert (res.returncode, res.stdout) == (1, "")
    assert err_line(res) == f"harness: no work ledger at {shown}/g1"
    js = cli(world, repo, "ledger", "verify", "g1", "--json")
    assert js.returncode == 1
    assert json.loads(js.stdout)["reason"] == f"no work ledger at {shown}/g1"
    (repo / ".harness" / "runtime" / "ledger" / "g2").mkdir(parents=True)
    res = cli(world, repo, "ledger", "anchor", "g2")
    assert (res.returncode, res.stdout) == (1, "")
    assert err_line(res) == f"harness: no work ledger at {shown}/g2 (no segment files)"
    assert TOKEN not in js.stderr + res.stderr
