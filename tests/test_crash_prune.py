"""SIGKILL a real process that appends and prunes the run ledger, at random moments.

SPEC-0022 REQ-12 with REQ-1/REQ-6: a prune carries every open run forward before its file
goes and records the pruned chain tail in CHAIN first, so whenever the process dies — in a
carry-forward, between CHAIN and the unlink, in the directory sync, in an append — what is
left on disk still verifies, no run that was open has vanished, and an acknowledged line
is missing only where CHAIN says the chain was pruned. A fresh process then opens the
ledger and goes on.

The child runs on a simulated clock that moves half a day a round with a retention of one
day, so every other round's prune carries the resident's run forward and deletes a file,
and the test kills until at least `IN_PRUNE` kills have landed inside a prune. The kill
moments come from a seeded `random.Random`, so a failing run can be replayed.
"""

from __future__ import annotations

import json
import random
import textwrap
import threading
from pathlib import Path

import pytest

from harness.ledger import RunLedger
from harness.ledger.verify import read_chain_file, verify_run_ledger
from ledgertools import T0
from test_crash import Child, read_ledger

SEED = 20261201
KILLS = 12  # at least; more while fewer than IN_PRUNE kills fell inside a prune
IN_PRUNE = 4
MAX_KILLS = 60
DAY = 86_400 * 10**9

CHILD = textwrap.dedent(
    """
    import sys
    from harness.ledger import RunLedger

    DAY = 86_400 * 10**9
    clock = [int(sys.argv[2])]
    led = RunLedger(sys.argv[1], clock=lambda: clock[0], retention_ns=DAY)

    def say(*words):
        sys.stdout.write(" ".join(map(str, words)) + "\\n")
        sys.stdout.flush()

    def synced(typ, harness, run_id, **fields):
        line = {"type": typ, "harness": harness, "run_id": run_id, **fields}
        say("acked", led.append(line, sync=True), typ, harness, run_id)

    ids = {h: led.max_run_id(h) for h in ("job", "worker")}
    worker = None
    for r in led.open_records():  # what the daemon's boot reconcile does (REQ-7)
        if r["harness"] == "job":
            synced("closed", "job", r["run_id"], outcome="interrupted", reason="daemon_crash")
        else:
            worker = r["run_id"]
    say("ready")
    rounds = 0
    while True:
        clock[0] += DAY // 2
        say("now", clock[0])
        if worker is None:
            ids["worker"] += 1
            worker = ids["worker"]
            synced("opened", "worker", worker, kind="resident", trigger="autostart")
        ids["job"] += 1
        synced("opened", "job", ids["job"], kind="oneshot", trigger="schedule")
        led.append({"type": "updated", "harness": "job", "run_id": ids["job"],
                    "tokens": {"input": rounds, "output": 1}}, sync=False)
        synced("closed", "job", ids["job"], outcome="success", exit_code=0)
        rounds += 1
        if rounds % 40 == 0:  # a resident's run ends now and then; a new one starts
            synced("closed", "worker", worker, outcome="success", exit_code=0)
            worker = None
        say("prune")
        res = led.prune()
        say("pruned", len(res.deleted), res.error)
    """
)


def check(ledger: Path, acked: dict[int, tuple[str, str, int]], ended: set[tuple[str, int]],
          ctx: str) -> None:
    """What must hold after a kill at any moment of an append or a prune. `ended` gathers
    the runs seen closed: acknowledged, or on disk though the kill beat the ack (a later
    prune may take that line, rightly)."""
    res = verify_run_ledger(str(ledger))
    assert res.ok, f"{res.to_json()}; {ctx}"
    complete, _fragments = read_ledger(ledger)
    seqs = sorted(o["seq"] for o in complete)
    assert len(seqs) == len(set(seqs)), f"a seq twice on disk; {ctx}"
    anchor = read_chain_file(str(ledger))
    cut = anchor[0] if anchor else 0
    # The pruned lines are a prefix of the chain (the clock only moves on), and CHAIN
    # names its end, or a little past it when the kill fell between CHAIN and the unlink.
    assert seqs == list(range(seqs[0], seqs[-1] + 1)), ctx
    assert seqs[0] <= cut + 1, ctx
    kept = set(seqs)
    missing = sorted(s for s in acked if s not in kept)
    assert all(s <= cut for s in missing), f"acknowledged, not pruned, lost: {missing}; {ctx}"
    # No run whose opened line was acknowledged and whose end was not vanished from disk:
    # its opened line is in a kept file, carried forward, or its closed line reached one.
    opened = {(h, r) for typ, h, r in acked.values() if typ == "opened"}
    ended |= {(h, r) for typ, h, r in acked.values() if typ == "closed"}
    ended |= {(o["harness"], o["run_id"]) for o in complete if o["type"] == "closed"}
    on_disk = {(o["harness"], o["run_id"]) for o in complete}
    assert not (opened - ended) - on_disk, f"open runs gone: {(opened - ended) - on_disk}; {ctx}"


@pytest.mark.timeout(300)
def test_sigkill_in_a_prune_loses_no_open_run_and_the_chain_verifies(tmp_path: Path) -> None:
    rng = random.Random(SEED)
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    ledger = tmp_path / "ledger"
    acked: dict[int, tuple[str, str, int]] = {}
    ended: set[tuple[str, int]] = set()
    now, pruned, in_prune, kill = T0, 0, 0, 0
    while kill < KILLS or (in_prune < IN_PRUNE and kill < MAX_KILLS):
        kill += 1
        child = Child(script, str(ledger), str(now))
        assert child.ready.wait(60), f"child never became ready: {child.lines}"
        threading.Event().wait(rng.uniform(0.02, 0.4))
        err = child.kill()
        ctx = f"seed {SEED}, kill {kill}; child stderr: {err[-2000:]}"
        assert "Traceback" not in err and "ready" in child.lines, ctx
        for line in child.lines:
            words = line.split()
            if words[0] == "acked":
                acked[int(words[1])] = (words[2], words[3], int(words[4]))
            elif words[0] == "now":
                now = int(words[1])
            elif words[0] == "pruned":
                assert words[2] == "None", ctx  # no prune stopped on an error
                pruned += int(words[1])
        in_prune += child.lines[-1] == "prune"
        check(ledger, acked, ended, ctx)
    assert in_prune >= IN_PRUNE, (kill, in_prune)
    assert pruned >= 3, pruned
    days = sorted(p.name for p in ledger.glob("*.jsonl"))
    assert 2 <= len(days) <= 4, days
    # A fresh process opens what the last kill left and agrees with the files.
    led = RunLedger(str(ledger), clock=lambda: now, retention_ns=DAY)
    assert list(ledger.glob(".CHAIN.*")) == []  # a half-made CHAIN a kill left is gone
    try:
        complete, _ = read_ledger(ledger)
        state: dict[tuple[str, int], str] = {}
        for o in sorted(complete, key=lambda o: o["seq"]):
            if o["type"] in ("opened", "closed"):
                state[(o["harness"], o["run_id"])] = o["type"]
        still_open = {k for k, typ in state.items() if typ == "opened"}
        assert {(r["harness"], r["run_id"]) for r in led.open_records()} == still_open
        assert len([k for k in still_open if k[0] == "worker"]) <= 1, still_open
        seq = led.append({"type": "decided", "harness": "parent", "run_id": 1,
                          "outcome": "skipped", "reason": "overlap"})
    finally:
        led.close()
    res = verify_run_ledger(str(ledger))
    assert (res.ok, res.head_seq) == (True, seq), res.to_json()
    assert json.loads((ledger / "CHAIN").read_text())["seq"] < seq
