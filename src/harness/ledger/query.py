"""The run query (SPEC-0022 REQ-14, REQ-15): filters, order and paging, one definition.

The in-memory index, the file scan and the offline reader all answer the same
`Query` with `select`, so the daemon and `harness runs` cannot disagree.
Invariants: results are newest first by record seq (the first line's seq);
``before_seq`` returns records with seq < it, so passing back the returned
``oldest_seq`` pages with no duplicates and no gaps; since/until are inclusive and
compare the record's started_at (or its first line's at).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from ..timefmt import format_ns, parse_ns
from .fold import Frozen, Record
from .schema import OUTCOMES, TRIGGERS

MAX_LIMIT = 1000
# The instants a bound is held to: every stamp lies between them, with a day of room
# on each side for the readers' slack (`since - 1 day`), which must still be a date.
EARLIEST_NS = parse_ns("0001-01-03T00:00:00Z")
LATEST_NS = parse_ns("9999-12-30T00:00:00Z")


class QueryError(ValueError):
    """A query value that cannot be answered; the message lists what is valid."""


@dataclass(frozen=True)
class Query:
    names: tuple[str, ...] = ()
    since_ns: int | None = None
    until_ns: int | None = None
    outcomes: frozenset[str] = frozenset()
    triggers: frozenset[str] = frozenset()
    limit: int | None = None  # None: unbounded (internal use only)
    before_seq: int | None = None
    since: str | None = field(default=None, init=False)
    until: str | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        bad = sorted(o for o in self.outcomes if o not in OUTCOMES)
        if bad:
            raise QueryError(f"unknown outcome {bad[0]!r} (valid: {', '.join(OUTCOMES)})")
        bad = sorted(t for t in self.triggers if t not in TRIGGERS)
        if bad:
            raise QueryError(f"unknown trigger {bad[0]!r} (valid: {', '.join(TRIGGERS)})")
        if self.limit is not None and not 1 <= self.limit <= MAX_LIMIT:
            raise QueryError(f"limit must be between 1 and {MAX_LIMIT}, got {self.limit}")
        if self.before_seq is not None and self.before_seq < 1:
            raise QueryError(f"before_seq must be a positive seq, got {self.before_seq}")

        # An RFC 3339 time or a long duration can name an instant no date reaches: held
        # to the range, a bound means the same (nothing lies beyond it) and stays a date.
        for name in ("since_ns", "until_ns"):
            v = getattr(self, name)
            if v is not None and not EARLIEST_NS <= v <= LATEST_NS:
                object.__setattr__(self, name, min(max(v, EARLIEST_NS), LATEST_NS))
        # Canonical stamps compare as strings; render the bounds once.
        since = format_ns(self.since_ns) if self.since_ns is not None else None
        until = format_ns(self.until_ns) if self.until_ns is not None else None
        object.__setattr__(self, "since", since)
        object.__setattr__(self, "until", until)

    def matches(self, r: Record | Frozen) -> bool:
        if self.names and r.harness not in self.names:
            return False
        if self.before_seq is not None and r.seq >= self.before_seq:
            return False
        if self.since_ns is not None or self.until_ns is not None:
            t = r.started_key
            if self.since is not None and t < self.since:
                return False
            if self.until is not None and t > self.until:
                return False
        if self.outcomes and r.outcome not in self.outcomes:
            return False
        return not (self.triggers and r.trigger not in self.triggers)


def select(q: Query, records: Iterable[Record | Frozen]
           ) -> tuple[list[Record | Frozen], int | None]:
    """Apply `q`: the matching records newest first, cut to the limit, and the oldest seq."""
    hits = [r for r in records if q.matches(r)]
    hits.sort(key=lambda r: r.seq, reverse=True)
    if q.limit is not None:
        hits = hits[: q.limit]
    return hits, (hits[-1].seq if hits else None)
