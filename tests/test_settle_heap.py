"""The daemon's boot hands what it loaded to the permanent GC generation (`settle_heap`), so a
full collection no longer walks the whole index; lines folded after the boot stay collectable."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.daemon import settle_heap
from harness.timefmt import format_ns
from ledgertools import T0, Clock, OpenLedger


@pytest.fixture
def unfrozen() -> Iterator[None]:
    # pytest runs every test in this one process: leave nothing frozen behind.
    gc.unfreeze()
    yield
    gc.unfreeze()


def _tracked_ids() -> set[int]:
    return {id(o) for o in gc.get_objects()}


def test_boot_objects_leave_the_collector_and_later_ones_do_not(
        tmp_path: Path, open_ledger: OpenLedger, unfrozen: None) -> None:
    clock = Clock(T0)
    led = open_ledger(tmp_path / "ledger", clock=clock)
    for rid in range(1, 301):
        led.append({"type": "opened", "harness": "h", "run_id": rid, "trigger": "schedule",
                    "started_at": format_ns(T0)})
        led.append({"type": "closed", "harness": "h", "run_id": rid, "outcome": "success",
                    "exit_code": 0})
    boot = list(led._index.records.values())
    assert len(boot) == 300
    assert all(gc.is_tracked(r) for r in boot)
    tracked = _tracked_ids()
    assert all(id(r) in tracked for r in boot)

    frozen = settle_heap()

    assert frozen == gc.get_freeze_count()
    assert frozen >= len(boot)
    tracked = _tracked_ids()
    assert not any(id(r) in tracked for r in boot)
    # A record folded after the boot is an ordinary object again: collections see it.
    led.append({"type": "opened", "harness": "h", "run_id": 301, "trigger": "manual",
                "started_at": format_ns(T0)})
    later = led._index.records[("h", 301)]
    assert id(later) in _tracked_ids()
    # Frozen records still answer.
    rec = led.get("h", 300)
    assert rec is not None and rec["outcome"] == "success"
