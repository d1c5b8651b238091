"""REQ-15 paging through a real daemon: 2,500 records, pages of 1,000, no duplicates, no gaps.

The ledger is written before the daemon boots, with the engine itself (`RunLedger`), so
it is a real chained ledger: 2,500 records over five harnesses, 2,000 of them spread over
the last 6½ days (served from the daemon's memory) and 500 from 8–14 days ago (served by
reading day files), in time order so seq order is time order. The test then pages with the
`runs` op exactly as a client would, and checks the CLI's `--limit` against the same data.
"""

from __future__ import annotations

import json
import signal
from typing import Any

from conftest import World
from daemons import DEADLINE, Daemons
from harness.control.client import Client
from harness.ledger.runledger import RunLedger
from harness.timefmt import format_ns, now_ns
from ledgertools import verify_ok

NS = 1_000_000_000
DAY = 86_400 * NS
NAMES = [f"h{i}" for i in range(5)]
OUTCOMES = ["success", "failed", "success", "timed_out", "skipped", "success", "cancelled"]
TOTAL = 2_500
OLD = 500  # older than the 7-day window
MORE = ("harness: more runs match than the 50 shown (the default --limit); ask for up to "
        "1000 with --limit, or page back with --until\n")


def _seed(world: World, now: int) -> list[tuple[int, str, int, str]]:
    """Write the ledger; return (seq, harness, run_id, outcome) of every record, oldest first."""
    led = RunLedger(str(world.ledger))
    expected = []
    ids = dict.fromkeys(NAMES, 0)
    try:
        for i in range(TOTAL):
            if i < OLD:  # 14 → 8 days ago
                t = now - 14 * DAY + i * (6 * DAY // OLD)
            else:  # 6.5 days ago → 10 minutes ago
                t = now - 13 * DAY // 2 + (i - OLD) * ((13 * DAY // 2 - 600 * NS) // (TOTAL - OLD))
            name = NAMES[(i * 7) % len(NAMES)]
            ids[name] += 1
            run_id = ids[name]
            outcome = OUTCOMES[i % len(OUTCOMES)]
            at = format_ns(t)
            base = {"harness": name, "run_id": run_id, "kind": "oneshot", "trigger": "schedule"}
            if outcome == "skipped":
                seq = led.append({**base, "type": "decided", "at": at, "started_at": at,
                                  "outcome": "skipped", "reason": "overlap"}, sync=False)
            else:
                seq = led.append({**base, "type": "opened", "at": at, "started_at": at,
                                  "outcome": "running"}, sync=False)
                end = format_ns(t + 30 * NS)
                closed: dict[str, Any] = {"harness": name, "run_id": run_id, "type": "closed",
                                          "at": end, "ended_at": end, "duration_ms": 30_000,
                                          "outcome": outcome, "exit_code": 0 if outcome ==
                                          "success" else 1}
                if outcome == "cancelled":
                    closed["reason"] = "operator"
                led.append(closed, sync=False)
            expected.append((seq, name, run_id, outcome))
        led.flush()
    finally:
        led.close(timeout=60.0)
    return expected


def _config(d: Daemons) -> None:
    d.write_config("".join(f'[harness.{n}]\nkind = "oneshot"\nargv = ["true"]\n\n'
                           for n in NAMES))


def _page_all(d: Daemons, **query: Any) -> tuple[list[dict[str, Any]], list[int]]:
    """Every record the `runs` op yields for `query`, paging by before_seq; and page sizes."""
    c = Client(str(d.socket), timeout=60.0)
    out: list[dict[str, Any]] = []
    sizes: list[int] = []
    before: int | None = None
    try:
        for _ in range(20):
            args = dict(query, limit=1000)
            if before is not None:
                args["before_seq"] = before
            data = c.request("runs", **args)
            page = data["runs"]
            sizes.append(len(page))
            if not page:
                assert data["oldest_seq"] is None
                return out, sizes
            assert data["oldest_seq"] == page[-1]["seq"]
            out += page
            before = data["oldest_seq"]
    finally:
        c.close()
    raise AssertionError("paging did not end")


def test_paging_2500_records_through_the_daemon(world: World, daemons: Daemons) -> None:
    now = now_ns()
    expected = _seed(world, now)
    newest_first = [(s, h, r, o) for s, h, r, o in reversed(expected)]
    _config(daemons)
    proc = daemons.start()

    got, sizes = _page_all(daemons)
    assert sizes == [1000, 1000, 500, 0]
    assert [(r["seq"], r["harness"], r["run_id"], r["outcome"]) for r in got] == newest_first
    assert len({(r["harness"], r["run_id"]) for r in got}) == TOTAL

    # One harness only: its records, paged the same way, exactly.
    for name in ("h0", "h3"):
        mine, sizes = _page_all(daemons, names=[name])
        want = [(s, r) for s, h, r, _o in newest_first if h == name]
        assert [(r["seq"], r["run_id"]) for r in mine] == want
        assert sizes == [len(want), 0]  # 500 each: one page, then the end
    # A time bound inside the window: the 2,000 recent records, in pages of 1,000.
    recent, sizes = _page_all(daemons, since=format_ns(now - 7 * DAY))
    assert sizes == [1000, 1000, 0]
    assert [r["seq"] for r in recent] == [s for s, *_ in newest_first[: TOTAL - OLD]]
    # A failure filter across every page.
    failed, _ = _page_all(daemons, outcomes=["failed", "timed_out"])
    assert [r["seq"] for r in failed] == [s for s, _h, _r, o in newest_first
                                          if o in ("failed", "timed_out")]

    # A run that lands between two pages does not shift the pages: before_seq is a cut.
    c = Client(str(daemons.socket), timeout=60.0)
    try:
        first = c.request("runs", limit=1000)
        res = world.harness("trigger", "h1", "--wait")
        assert res.returncode == 0, res.stderr
        second = c.request("runs", limit=1000, before_seq=first["oldest_seq"])
        fresh = c.request("runs", limit=1)["runs"][0]
    finally:
        c.close()
    assert [r["seq"] for r in first["runs"] + second["runs"]] == [
        s for s, *_ in newest_first[:2000]]
    assert fresh["harness"] == "h1" and fresh["run_id"] == 501
    assert fresh["seq"] > newest_first[0][0]

    # The CLI: --limit bounds one answer (it does not page); 1,000 is the most it takes.
    cli = world.harness("runs", "--since", "30d", "--limit", "1000", "--json")
    assert cli.returncode == 0 and cli.stderr == "", cli.stderr
    recs = json.loads(cli.stdout)
    assert [r["seq"] for r in recs] == [fresh["seq"]] + [s for s, *_ in newest_first[:999]]
    one = world.harness("runs", "h2", "--limit", "1000", "--json")
    assert one.returncode == 0
    assert [r["run_id"] for r in json.loads(one.stdout)] == list(range(500, 0, -1))
    # The sweep's default 50 is said on stderr when more match, and only then.
    sweep = world.harness("runs", "--since", "30d", "--json")
    assert sweep.returncode == 0
    assert [r["seq"] for r in json.loads(sweep.stdout)] == [fresh["seq"]] + [
        s for s, *_ in newest_first[:49]]
    assert sweep.stderr == MORE
    page = world.harness("runs", "--since", "30d", "--outcome", "cancelled",
                         "--until", format_ns(now - 12 * DAY), "--json")
    # i ≤ 166 started at or before 12 days ago: now - 14 days + i × 1,036.8 s.
    few = [s for s, _h, _r, o in reversed(expected[:167]) if o == "cancelled"]
    assert len(few) == 23
    assert [r["seq"] for r in json.loads(page.stdout)] == few
    assert page.stderr == ""
    asked = world.harness("runs", "--since", "30d", "--limit", "50", "--json")
    assert len(json.loads(asked.stdout)) == 50 and asked.stderr == ""
    too_many = world.harness("runs", "--limit", "1001", "--json")
    assert too_many.returncode == 2
    assert "must be between 1 and 1000, got 1001" in too_many.stderr

    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=DEADLINE) == 0, daemons.stderr()
    verify_ok(world)
