"""What the run-ledger tests share: time constants, an injectable clock, reading day files
(`lines_of`, `all_lines`, `line_of`), a reference canonical JSON independent of the engine
(`ref_canonical`), `harness ledger verify` that must pass (`verify_ok`), and the small
history the query-filter tests ask about (`append_filter_runs`), and small probes: the
collector's state a call leaves (`gc_left_by`), the file scans a ledger makes
(`count_scans`), waiting for a buffered line to reach a file (`wait_for_bytes`); and
for verify's tests, chains of lines sealed by hand (`sealed_lines`) written as day
files (`write_day_file`), spoiled (`edited`, `foreign`) and checked (`verify_json`)."""

from __future__ import annotations

import contextlib
import gc
import hashlib
import json
import os
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import harness.ledger.runledger as runledger_mod
from harness.ledger import verify as verify_module
from harness.ledger.files import FileLayer
from harness.ledger.query import Query
from harness.ledger.runledger import RunLedger
from harness.timefmt import format_ns, parse_ns

if TYPE_CHECKING:
    import pytest

    from conftest import World

OpenLedger = Callable[..., RunLedger]  # the `open_ledger` fixture (conftest.py)

NS = 1_000_000_000
MINUTE = 60 * NS
HOUR = 60 * MINUTE
DAY = 24 * HOUR
T0 = parse_ns("2026-06-15T12:00:00Z")


class Clock:
    """An injectable wall clock (epoch ns) that tests move by hand."""

    def __init__(self, ns: int) -> None:
        self.ns = ns

    def __call__(self) -> int:
        return self.ns


def day(ns: int) -> str:
    """The UTC day (YYYY-MM-DD) of the instant `ns`: the day file a line stamped then goes to."""
    return format_ns(ns)[:10]


def decided(harness: str, run_id: int, **kw: Any) -> dict[str, Any]:
    """A `decided` line as the daemon appends it (the writer stamps at, seq and chain)."""
    return {"type": "decided", "harness": harness, "run_id": run_id, "outcome": "skipped",
            "reason": "overlap", "trigger": "schedule", **kw}


def lines_of(path: Path) -> list[dict[str, Any]]:
    """Every complete line of a day file, parsed."""
    data = path.read_bytes()
    return [json.loads(raw) for raw in data.split(b"\n")[:-1] if raw]


def all_lines(directory: Path) -> list[dict[str, Any]]:
    """Every complete line of every day file in `directory`, in file order (files by name)."""
    out: list[dict[str, Any]] = []
    for p in sorted(directory.glob("*.jsonl")):
        out.extend(lines_of(p))
    return out


def line_of(directory: Path, typ: str, name: str, run_id: int) -> dict[str, Any] | None:
    """The first complete `typ` line of (name, run_id) in `directory`'s day files, or None."""
    return next((x for x in all_lines(directory) if x["type"] == typ
                 and x["harness"] == name and x["run_id"] == run_id), None)


def verify_ok(world: World) -> str:
    """`harness ledger verify` in `world`, which must exit 0; returns its stdout."""
    res = world.harness("ledger", "verify")
    assert res.returncode == 0, (res.stdout, res.stderr)
    return res.stdout


def ref_canonical(obj: Any) -> bytes:
    """DESIGN.md §2's canonical JSON, spelled out with the standard library only so a test
    does not trust the engine's encoder."""
    return json.dumps(
        obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")


def append_paged_runs(led: RunLedger, clock: Clock) -> None:
    """The history the paging tests page through: 2,500 decided records of three
    harnesses, one a minute, the last at T0 and the only one synced."""
    clock.ns = T0 - 2500 * MINUTE
    run_ids: dict[str, int] = {}
    for i in range(1, 2501):
        h = ("alpha", "beta", "gamma")[i % 3]
        run_ids[h] = run_ids.get(h, 0) + 1
        clock.ns += MINUTE
        led.append({"type": "decided", "harness": h, "run_id": run_ids[h],
                    "trigger": "schedule", "outcome": "missed",
                    "window": format_ns(clock.ns - HOUR)}, sync=i == 2500)


def append_filter_runs(led: RunLedger, clock: Clock, *, missed: bool = True) -> None:
    """The history the query-filter tests ask about, on T0's day (T0 = 12:00). `missed=False`
    leaves out b/2, the one record with no started_at."""
    clock.ns = T0 - 5 * HOUR
    # a/1: decided, started 07:00.
    led.append({"type": "decided", "harness": "a", "run_id": 1, "trigger": "schedule",
                "outcome": "skipped", "reason": "overlap",
                "started_at": format_ns(T0 - 5 * HOUR)})
    # a/2: its opened line is written at 11:50 but it started at 08:00: filters use started_at.
    clock.ns = T0 - 10 * MINUTE
    led.append({"type": "opened", "harness": "a", "run_id": 2, "trigger": "manual",
                "started_at": format_ns(T0 - 4 * HOUR)})
    led.append({"type": "closed", "harness": "a", "run_id": 2, "outcome": "failed",
                "exit_code": 1})
    # b/1: started 09:00, closed success.
    led.append({"type": "opened", "harness": "b", "run_id": 1, "trigger": "webhook",
                "started_at": format_ns(T0 - 3 * HOUR)})
    led.append({"type": "closed", "harness": "b", "run_id": 1, "outcome": "success"})
    if missed:
        # b/2: decided missed, no started_at: its first line's at (10:00) is the key.
        led.append({"type": "decided", "harness": "b", "run_id": 2, "trigger": "schedule",
                    "outcome": "missed", "at": format_ns(T0 - 2 * HOUR)})
    # c/1: started 11:00, still running.
    led.append({"type": "opened", "harness": "c", "run_id": 1, "trigger": "channel",
                "started_at": format_ns(T0 - HOUR), "todo_id": "t1"})


def open_fds() -> set[str]:
    """The descriptors this process holds open now: a test compares two calls to show
    that code between them leaked none."""
    return set(os.listdir("/proc/self/fd"))


def gc_left_by(action: Callable[[], None]) -> list[bool]:
    """Whether the collector is on after `action`, run once with it on and once off; the
    caller's setting is restored."""
    was = gc.isenabled()
    after = []
    try:
        for on in (True, False):
            gc.enable() if on else gc.disable()
            action()
            after.append(gc.isenabled())
    finally:
        gc.enable() if was else gc.disable()
    return after


def count_scans(monkeypatch: pytest.MonkeyPatch) -> list[Query]:
    """The queries a RunLedger hands to the file reader from now on (the real reader
    still answers them)."""
    calls: list[Query] = []
    real_scan = runledger_mod.scan

    def counting_scan(directory: str, q: Query, **kwargs: Any) -> Any:
        calls.append(q)
        return real_scan(directory, q, **kwargs)

    monkeypatch.setattr(runledger_mod, "scan", counting_scan)
    return calls


def wait_for_bytes(directory: Path, needle: bytes, timeout: float = 30.0) -> None:
    """Wait until some day file in `directory` holds `needle` (a buffered line written)."""
    deadline = time.monotonic() + timeout
    while not any(needle in p.read_bytes() for p in directory.glob("*.jsonl")):
        assert time.monotonic() < deadline, f"{needle!r} never reached a day file"
        time.sleep(0.01)


ZERO_HASH = "0" * 64
EDITED = "hash does not match the line's content (the line was edited)"
FRAGMENT = b'{"v":1,"se'  # the first bytes of a line, as a crash leaves them


def chain_hash(obj: dict[str, Any]) -> str:
    """DESIGN.md §4: sha256 of the canonical JSON of the line without `hash`."""
    return hashlib.sha256(ref_canonical({k: v for k, v in obj.items() if k != "hash"})).hexdigest()


def seal(obj: dict[str, Any], seq: int, prev: str) -> tuple[bytes, str]:
    """A line sealed by hand to DESIGN.md §4, not by the engine: (canonical bytes, hash)."""
    line = {**obj, "seq": seq, "prev": prev}
    line["hash"] = chain_hash(line)
    return ref_canonical(line), line["hash"]


def sealed_lines(days: Mapping[str, Iterable[int]], prev: str = ZERO_HASH
                 ) -> tuple[dict[int, bytes], dict[int, str]]:
    """Decided lines of the given seqs, each stamped with its day, linked in seq order from
    `prev` and sealed by hand to DESIGN.md §4 (not by the engine): (bytes, hash) by seq."""
    day_of = {seq: day for day, seqs in days.items() for seq in seqs}
    raws: dict[int, bytes] = {}
    hashes: dict[int, str] = {}
    for seq in sorted(day_of):
        at = f"{day_of[seq]}T08:00:{seq % 60:02d}Z"
        raws[seq], prev = seal({
            "v": 1, "type": "decided", "harness": "nightly", "run_id": seq, "at": at,
            "kind": "oneshot", "trigger": "schedule", "outcome": "skipped",
            "reason": "overlap", "started_at": at}, seq, prev)
        hashes[seq] = prev
    return raws, hashes


def write_day_file(path: Path, lines: list[bytes], tail: bytes = b"") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(x + b"\n" for x in lines) + tail)


def edited(raw: bytes) -> bytes:
    """A sealed line with one value changed: its hash no longer holds."""
    out = raw.replace(b'"outcome":"skipped"', b'"outcome":"success"')
    assert out != raw
    return out


def foreign(raw: bytes) -> bytes:
    """Whole JSON, no ledger line: its seq a string."""
    seq = json.loads(raw)["seq"]
    out = raw.replace(b'"seq":%d' % seq, b'"seq":"%d"' % seq)
    assert out != raw
    return out


def verify_json(directory: Path) -> dict[str, Any]:
    """`harness ledger verify --json`'s object for a run-ledger directory, in-process."""
    return verify_module.verify_run_ledger(str(directory), parallel=False).to_json()


class DirSyncs(FileLayer):
    """The real file layer, noting each directory it syncs, in order."""

    def __init__(self) -> None:
        self.dirs: list[str] = []

    def sync_dir(self, path: str) -> None:
        self.dirs.append(path)
        super().sync_dir(path)


def seqs_by_file(state: Mapping[str, bytes]) -> dict[str, list[int]]:
    """The seqs of the lines each file of `state` (path -> bytes, as `FaultyFiles` tells
    what a power cut keeps) holds, by file name. A value whole but for its "\n" is a
    line, as to every reader; a torn fragment is none."""
    out = {}
    for path, raw in state.items():
        seqs = []
        for part in raw.split(b"\n"):
            with contextlib.suppress(ValueError):
                seqs.append(json.loads(part)["seq"])
        out[os.path.basename(path)] = seqs
    return out
