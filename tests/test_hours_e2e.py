"""Operating hours of residents end to end (SPEC-0022 REQ-3 "An operating-hours close",
DESIGN.md §3), against a real daemon process on the real wall clock.

Hours have minute resolution, so the close-and-release test builds a window that ends at
the next minute boundary and one that opens a minute later: the run closes
cancelled/hours, `list` reads off-hours, and the opening starts a new record with trigger
release. A daemon booted outside the hours starts nothing until an operator's `start`.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest

from conftest import World
from daemons import Daemons, record_of, runs_of, states_of, until
from harness.control.client import Client

MINUTE_WAIT = 150.0  # two minute boundaries, and slack for a loaded machine


def _hm(at: datetime) -> str:
    return f"{at.hour:02d}:{at.minute:02d}"


def test_hours_close_the_resident_and_release_it_when_they_open(
        world: World, daemons: Daemons) -> None:
    now = datetime.now(UTC)
    if now.second > 40:  # leave the daemon time to boot before the boundary
        time.sleep(61 - now.second)
        now = datetime.now(UTC)
    close = now.replace(second=0, microsecond=0) + timedelta(minutes=1)
    reopen = close + timedelta(minutes=1)
    if reopen.date() != now.date() or (close.hour == 0 and close.minute == 0):
        pytest.skip("the windows would cross midnight")
    daemons.write_config(f"""
[harness.worker]
argv = ["sleep", "600"]
operating_hours = "TZ=UTC Mon-Sun 00:00-{_hm(close)}; Mon-Sun {_hm(reopen)}-24:00"
hours_shutdown = "immediate"
""")
    daemons.start()
    first = until("the autostarted run", lambda: record_of(world, "worker", 1))
    assert (first["trigger"], first["outcome"]) == ("autostart", "running")
    closed = until("the hours close",
                    lambda: (r := record_of(world, "worker", 1)) and r["outcome"] != "running"
                    and r, deadline=MINUTE_WAIT)
    assert (closed["outcome"], closed["reason"], closed["exit_code"]) == (
        "cancelled", "hours", -1)
    assert closed["ended_at"] >= close.strftime("%Y-%m-%dT%H:%M:%S")
    assert states_of(world)["worker"] == "off-hours"
    released = until("the release", lambda: record_of(world, "worker", 2),
                      deadline=MINUTE_WAIT)
    assert (released["trigger"], released["outcome"]) == ("release", "running")
    assert released["started_at"] >= reopen.strftime("%Y-%m-%dT%H:%M:%S")
    assert [r["run_id"] for r in runs_of(world, "worker")] == [2, 1]  # no restart between


def test_booted_outside_hours_nothing_starts_until_an_operator_starts_it(
        world: World, daemons: Daemons) -> None:
    now = datetime.now(UTC)
    opens = now + timedelta(hours=3)
    ends = opens + timedelta(minutes=1)
    daemons.write_config(f"""
[harness.worker]
argv = ["sleep", "600"]
operating_hours = "TZ=UTC Mon-Sun {_hm(opens)}-{_hm(ends)}"
""")
    daemons.start()
    assert states_of(world)["worker"] == "off-hours"
    assert runs_of(world, "worker") == []
    with Client(str(daemons.socket)) as c:
        out = c.request("start", name="worker")
        assert (out["action"], out["run_id"]) == ("started", 1)
        # The operator's start outlives the next gate tick: it is not closed again.
        time.sleep(2.5)
        rec = record_of(world, "worker", 1)
        assert rec is not None and (rec["trigger"], rec["outcome"]) == ("manual", "running")
        assert c.request("stop", name="worker")["reason"] == "operator"
    assert states_of(world)["worker"] == "stopped"
