"""The run feed (SPEC-0022 REQ-10): committed records pushed to subscribers without blocking.

Invariants: `publish` never blocks and never raises — a subscriber whose buffer is
full misses that item, and the miss is counted for that subscriber alone; every
other subscriber still gets it. Items arrive in commit (seq) order.
"""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Committed:
    """One committed line and the record folded after it."""

    seq: int
    type: str
    record: dict[str, Any]


class Subscription:
    """A bounded buffer of committed items for one consumer."""

    def __init__(self, feed: Feed, name: str, size: int) -> None:
        self.name = name
        self._feed = feed
        self._q: queue.Queue[Committed] = queue.Queue(maxsize=size)
        self.missed = 0

    def get(self, timeout: float | None = None) -> Committed | None:
        """The next item, or None when none arrives within `timeout`."""
        try:
            return self._q.get(timeout=timeout)
        except queue.Empty:
            return None

    def drain(self) -> list[Committed]:
        out = []
        while True:
            try:
                out.append(self._q.get_nowait())
            except queue.Empty:
                return out

    def close(self) -> None:
        self._feed.retire(self)

    def _offer(self, item: Committed) -> None:
        try:
            self._q.put_nowait(item)
        except queue.Full:
            self.missed += 1


class Feed:
    """The set of subscriptions and their miss counts."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._subs: list[Subscription] = []
        self._missed: dict[str, int] = {}

    def subscribe(self, name: str, size: int = 1024) -> Subscription:
        if size < 1:  # queue.Queue would take it as no bound at all
            raise ValueError(f"a feed subscription's buffer size must be at least 1, got {size}")
        sub = Subscription(self, name, size)
        with self._lock:
            self._subs = [*self._subs, sub]
            self._missed.setdefault(name, 0)
        return sub

    def active(self) -> bool:
        """Whether anyone listens (so publishers can skip building items for nobody)."""
        return bool(self._subs)

    def publish(self, item: Committed) -> None:
        for sub in self._subs:  # copy-on-write list: no lock on the hot path
            sub._offer(item)

    def missed(self) -> dict[str, int]:
        """Misses per subscriber name, including subscribers that have gone."""
        with self._lock:
            out = dict(self._missed)
            for s in self._subs:
                out[s.name] = out.get(s.name, 0) + s.missed
            return out

    def retire(self, sub: Subscription) -> None:
        """Unsubscribe and keep its miss count in the totals."""
        with self._lock:
            self._subs = [s for s in self._subs if s is not sub]
            self._missed[sub.name] = self._missed.get(sub.name, 0) + sub.missed
            sub.missed = 0
