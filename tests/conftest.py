"""Shared fixtures: a throwaway XDG world per test, a way to run the real CLI, and the
daemons a test starts in it."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from daemons import Daemons, FaultDaemons
from harness.ledger.runledger import RunLedger


@dataclass
class World:
    root: Path
    env: dict[str, str]

    @property
    def state(self) -> Path:
        return self.root / "state" / "harness"

    @property
    def ledger(self) -> Path:
        return self.state / "ledger"

    def harness(self, *args: str, check: bool = False) -> subprocess.CompletedProcess[str]:
        """Run the real `harness` CLI in this world."""
        return subprocess.run(
            [sys.executable, "-m", "harness.cli", *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
            check=check,
        )


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    env = dict(os.environ)
    env.update(
        XDG_STATE_HOME=str(tmp_path / "state"),
        XDG_CONFIG_HOME=str(tmp_path / "config"),
        XDG_RUNTIME_DIR=str(tmp_path / "run"),
        HOME=str(tmp_path / "home"),
        TZ="UTC",
    )
    env.pop("HARNESS_SOCKET", None)
    env.pop("HARNESS_CONFIG", None)
    (tmp_path / "run").mkdir(mode=0o700)
    yield World(tmp_path, env)


@pytest.fixture
def daemons(world: World) -> Iterator[Daemons]:
    """Daemons started in this test's world; all killed at teardown."""
    d = Daemons(world)
    yield d
    d.kill_all()


@pytest.fixture
def fd(world: World) -> Iterator[FaultDaemons]:
    """A `FaultDaemons` in this test's world; all its daemons and runs killed at teardown."""
    d = FaultDaemons(world)
    yield d
    d.kill_all()


@pytest.fixture
def ledger_dir(tmp_path: Path) -> Path:
    """Where a run ledger lives under a throwaway XDG state dir."""
    return tmp_path / "state" / "harness" / "ledger"


@pytest.fixture
def opened_ledgers() -> Iterator[list[RunLedger]]:
    """Ledgers a test opened; closed at teardown so no writer thread outlives its test."""
    ledgers: list[RunLedger] = []
    yield ledgers
    for led in ledgers:
        led.close(timeout=10.0)


@pytest.fixture
def open_ledger(opened_ledgers: list[RunLedger]) -> Callable[..., RunLedger]:
    """Open a RunLedger that is closed at teardown."""

    def _open(directory: Path, **kw: Any) -> RunLedger:
        led = RunLedger(str(directory), **kw)
        opened_ledgers.append(led)
        return led

    return _open
