"""What the run-ledger tests share: time constants, an injectable clock, reading day files."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.ledger.runledger import RunLedger
from harness.timefmt import parse_ns

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
