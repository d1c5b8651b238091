"""What the run-ledger tests share: time constants, an injectable clock, reading day files
(`lines_of`, `all_lines`, `line_of`), a reference canonical JSON independent of the engine
(`ref_canonical`), and `harness ledger verify` that must pass (`verify_ok`)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.ledger.runledger import RunLedger
from harness.timefmt import parse_ns

if TYPE_CHECKING:
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
