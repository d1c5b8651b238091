"""The runs query (SPEC-0022 REQ-14, REQ-15) through `RunLedger.query`, from memory and files.

Every scenario runs twice: once answered from the in-memory index (the files are inside
its window) and once where the index cannot prove its answer complete (the files are
older than the window), so the ledger falls back to scanning the day files. The two
answers must be identical, and the test checks which path actually answered by
counting calls to the file scan.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import time
from pathlib import Path
from typing import Any

import pytest

import harness.ledger.runledger as runledger_mod
from harness.ledger.fold import Record
from harness.ledger.index import Index
from harness.ledger.query import Query, QueryError, select
from harness.ledger.reader import scan, valid_line
from harness.ledger.runledger import RunLedger
from harness.timefmt import day_start_ns, format_ns, parse_ns, utc_day
from ledgertools import (
    DAY,
    HOUR,
    MINUTE,
    T0,
    Clock,
    append_filter_runs,
    append_paged_runs,
    gc_left_by,
    wait_for_bytes,
)

# More seeds for the randomised memory-vs-files test: LEDGER_QUERY_SEEDS=60 pytest ...


class Scans:
    """Counts the ledger's fallbacks to the file scan."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[Query] = []
        real = runledger_mod.scan

        def counting(directory: str, q: Query, **kwargs: Any) -> Any:
            self.calls.append(q)
            return real(directory, q, **kwargs)

        monkeypatch.setattr(runledger_mod, "scan", counting)


@pytest.fixture
def scans(monkeypatch: pytest.MonkeyPatch) -> Scans:
    return Scans(monkeypatch)


def reopen(directory: Path, mode: str, now: int, opened: list[RunLedger]) -> RunLedger:
    """Reopen the ledger so that `mode` ("memory" or "files") answers queries at `now`."""
    if mode == "memory":
        led = RunLedger(str(directory), clock=Clock(now))
    else:
        # Every file is older than a one-nanosecond window and no harness has a tail in
        # memory: the index can prove nothing and must read the files.
        led = RunLedger(str(directory), clock=Clock(now + 3 * DAY), window_ns=1, tail=1)
    opened.append(led)
    return led


# -- REQ-15: paging ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def paged_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """2,500 decided records of three harnesses, one per minute, the last at T0."""
    d = tmp_path_factory.mktemp("paging") / "ledger"
    clock = Clock(T0)
    led = RunLedger(str(d), clock=clock)
    append_paged_runs(led, clock)
    led.close()
    return d


def pages(led: RunLedger, **kw: Any) -> tuple[list[list[dict[str, Any]]], list[int | None]]:
    out: list[list[dict[str, Any]]] = []
    oldest: list[int | None] = []
    before: int | None = None
    while True:
        recs, low = led.query(Query(limit=1000, before_seq=before, **kw))
        if not recs:
            assert low is None
            return out, oldest
        out.append(recs)
        oldest.append(low)
        assert low == recs[-1]["seq"]
        before = low


@pytest.mark.parametrize("mode", ["memory", "files"])
def test_three_pages_of_1000_have_no_duplicates_and_no_gaps(
    paged_dir: Path, mode: str, scans: Scans, opened_ledgers: list[RunLedger]
) -> None:
    led = reopen(paged_dir, mode, T0, opened_ledgers)
    got, oldest = pages(led)
    assert [len(p) for p in got] == [1000, 1000, 500]
    assert oldest == [1501, 501, 1]
    seqs = [r["seq"] for p in got for r in p]
    assert seqs == list(range(2500, 0, -1))  # newest first, each once, none missing
    assert got[0][0] == {"harness": "beta", "run_id": 834, "seq": 2500, "trigger": "schedule",
                         "outcome": "missed", "window": format_ns(T0 - HOUR)}
    assert got[2][-1] == {"harness": "beta", "run_id": 1, "seq": 1, "trigger": "schedule",
                          "outcome": "missed", "window": format_ns(T0 - 2499 * MINUTE - HOUR)}
    assert len(scans.calls) == (0 if mode == "memory" else 4)
    offline, low, _ = scan(str(paged_dir), Query(limit=1000, before_seq=1501))
    assert [r.to_json() for r in offline] == got[1] and low == 501


def test_memory_and_files_page_identically(
    paged_dir: Path, opened_ledgers: list[RunLedger]
) -> None:
    asks: list[dict[str, Any]] = [{}, {"names": ("beta",)}, {"names": ("beta", "gamma")}]
    mem = reopen(paged_dir, "memory", T0, opened_ledgers)
    from_memory = [pages(mem, **kw) for kw in asks]
    mem.close()  # one writer per ledger directory: the other mode opens it next
    files = reopen(paged_dir, "files", T0, opened_ledgers)
    assert [pages(files, **kw) for kw in asks] == from_memory
    got, _ = from_memory[1]
    assert [len(p) for p in got] == [834]
    assert [r["run_id"] for r in got[0]] == list(range(834, 0, -1))


def test_query_values_are_checked() -> None:
    with pytest.raises(QueryError, match="timed_out"):
        Query(outcomes=frozenset({"timeout"}))
    with pytest.raises(QueryError, match="schedule"):
        Query(triggers=frozenset({"cron"}))
    for bad in (0, 1001):
        with pytest.raises(QueryError, match="between 1 and 1000"):
            Query(limit=bad)
    with pytest.raises(QueryError, match="before_seq"):
        Query(before_seq=0)


def test_bounds_beyond_the_calendar_are_held_to_it_and_others_kept_exact() -> None:
    first, last = "0001-01-03T00:00:00.000000000Z", "9999-12-30T00:00:00.000000000Z"
    q = Query(since_ns=-(10**30), until_ns=10**30)
    assert (q.since_ns, q.until_ns) == (parse_ns(first), parse_ns(last))
    assert (q.since, q.until) == (first, last)
    q = Query(since_ns=parse_ns(first) - 1, until_ns=parse_ns(last) + 1)
    assert (q.since, q.until) == (first, last)
    q = Query(since_ns=parse_ns(first), until_ns=parse_ns(last))
    assert (q.since, q.until) == (first, last)
    q = Query(since_ns=T0 + 1, until_ns=T0 + 2)
    assert (q.since_ns, q.until_ns) == (T0 + 1, T0 + 2)
    assert (q.since, q.until) == (format_ns(T0 + 1), format_ns(T0 + 2))
    assert (Query().since, Query().until) == (None, None)


def test_a_query_cannot_change_after_its_bounds_are_rendered() -> None:
    q = Query(since_ns=T0, limit=5)
    with pytest.raises(dataclasses.FrozenInstanceError):
        q.since_ns = T0 - DAY  # type: ignore[misc]
    assert (q.since_ns, q.since, q.limit) == (T0, format_ns(T0), 5)
    assert hash(q) == hash(Query(since_ns=T0, limit=5))


def _decided(seq: int, harness: str = "h") -> Record:
    r = Record(harness, seq)
    r.apply({"v": 1, "seq": seq, "type": "decided", "at": format_ns(T0 + seq),
             "harness": harness, "run_id": seq, "outcome": "missed"})
    return r


def test_select_cuts_to_the_limit_newest_first_and_names_the_oldest_returned() -> None:
    recs = [_decided(s) for s in (3, 7, 1, 9, 4)]
    for limit, seqs in ((1, [9]), (2, [9, 7]), (4, [9, 7, 4, 3]), (5, [9, 7, 4, 3, 1]),
                        (1000, [9, 7, 4, 3, 1]), (None, [9, 7, 4, 3, 1])):
        hits, oldest = select(Query(limit=limit), recs)
        assert ([r.seq for r in hits], oldest) == (seqs, seqs[-1])
    hits, oldest = select(Query(limit=2, before_seq=7), recs)
    assert ([r.seq for r in hits], oldest) == ([4, 3], 3)
    assert select(Query(limit=2, before_seq=1), recs) == ([], None)


def _index_line(seq: int, harness: str, run_id: int, at: int, **extra: Any) -> dict[str, Any]:
    return {"v": 1, "seq": seq, "type": "decided", "at": format_ns(at), "harness": harness,
            "run_id": run_id, "trigger": "schedule", "outcome": "missed", **extra}


def test_the_index_keeps_its_window_and_tails_and_claims_only_what_it_holds() -> None:
    """a/1-5 and b/1-25 ten days old, b/26 started exactly at the one-day window's start,
    b/27-28 inside it; a tail of two. Trimming keeps a/4-5 and b/26-28, and the index
    answers from memory only what those prove complete."""
    now = T0
    idx = Index(window_ns=DAY, tail=2)
    seq = 0
    for h, n in (("a", 5), ("b", 25)):
        for run_id in range(1, n + 1):
            seq += 1
            idx.apply(_index_line(seq, h, run_id, now - 10 * DAY + seq))
    for run_id, at in ((26, now - DAY), (27, now - HOUR), (28, now - MINUTE)):
        seq += 1
        idx.apply(_index_line(seq, "b", run_id, at))
    assert idx.trim(now) == 3 + 25
    assert sorted(idx.records) == [("a", 4), ("a", 5), ("b", 26), ("b", 27), ("b", 28)]
    assert (idx.floor, idx.harness_floor, idx.floor_at) == (
        31, {"a": 4, "b": 31}, format_ns(now - DAY))
    # The newest four of a and b include b/25, which memory let go: it cannot answer.
    assert idx.query(Query(names=("a", "b"), limit=4)) == ([], None, False)
    recs, oldest, complete = idx.query(Query(names=("a", "b"), limit=3))
    assert ([(r.harness, r.run_id) for r in recs], oldest, complete) == (
        [("b", 28), ("b", 27), ("b", 26)], 31, True)
    recs, oldest, complete = idx.query(Query(names=("a",), limit=2))
    assert ([r.run_id for r in recs], oldest, complete) == ([5, 4], 4, True)
    # Whatever started at or after the window's start is all in memory.
    recs, oldest, complete = idx.query(Query(since_ns=now - DAY, limit=50))
    assert ([(r.harness, r.run_id) for r in recs], oldest, complete) == (
        [("b", 28), ("b", 27), ("b", 26)], 31, True)
    assert idx.query(Query(since_ns=now - DAY - 1, limit=50)) == ([], None, False)
    # A harness memory never let a record of go, or never saw, is held whole; with one
    # it let some go, the floor of the latter binds.
    assert idx.query(Query(names=("c",), limit=4)) == ([], None, True)
    idx.apply(_index_line(seq + 1, "c", 1, now), live=True)
    recs, oldest, complete = idx.query(Query(names=("c",), limit=4))
    assert ([(r.harness, r.run_id) for r in recs], oldest, complete) == (
        [("c", 1)], seq + 1, True)
    assert idx.query(Query(names=("a", "c"), limit=4)) == ([], None, False)
    recs, oldest, complete = idx.query(Query(names=("a", "c"), limit=3))
    assert ([(r.harness, r.run_id) for r in recs], oldest, complete) == (
        [("c", 1), ("a", 5), ("a", 4)], 4, True)


def test_a_live_late_line_of_a_record_the_index_let_go_raises_its_floors() -> None:
    """a/2 was decided before a/1 (imported history): a tail of one keeps a/1 only. A live
    update of a/2 is folded for the caller but not kept, and the floors rise past it."""
    idx = Index(window_ns=DAY, tail=1)
    idx.apply(_index_line(1, "a", 2, T0 - 10 * DAY))
    idx.apply(_index_line(2, "a", 1, T0 - 10 * DAY + 1))
    assert idx.trim(T0) == 1
    assert sorted(idx.records) == [("a", 1)]
    assert (idx.floor, idx.harness_floor, idx.floor_at) == (2, {"a": 2}, format_ns(T0 - DAY))
    late = {"v": 1, "seq": 3, "type": "updated", "at": format_ns(T0), "harness": "a",
            "run_id": 2, "model_calls": 4}
    r = idx.apply(late, live=True)
    assert (r.seq, r.fields["model_calls"], idx.get("a", 2)) == (3, 4, None)
    assert (idx.floor, idx.harness_floor, idx.floor_at) == (4, {"a": 4}, format_ns(T0 + 1))
    assert idx.query(Query(names=("a",), limit=2)) == ([], None, False)


def test_trim_keeps_an_open_record_whatever_its_age() -> None:
    """a/1 opened ten days ago and still runs; a/2, newer, is the tail of one. Trimming
    drops nothing: an open record stays, beyond the tail and older than the window."""
    idx = Index(window_ns=DAY, tail=1)
    idx.apply({**_index_line(1, "a", 1, T0 - 10 * DAY), "type": "opened"})
    idx.apply(_index_line(2, "a", 2, T0 - 10 * DAY + 1))
    assert idx.trim(T0) == 0
    assert sorted(idx.records) == [("a", 1), ("a", 2)]
    assert [(r.run_id, r.seq) for r in idx.open_records()] == [(1, 1)]
    assert (idx.floor, idx.harness_floor, idx.floor_at) == (1, {}, "")


def test_a_floor_raised_past_the_first_seq_only_is_still_a_floor() -> None:
    """A tail of one drops a/1 (seq 1) alone: the floor is 2, and memory, missing seq 1,
    answers only what lies above it."""
    idx = Index(window_ns=DAY, tail=1)
    idx.apply(_index_line(1, "a", 1, T0 - 10 * DAY))
    idx.apply(_index_line(2, "a", 2, T0 - 10 * DAY + 1))
    assert idx.trim(T0) == 1
    assert (idx.floor, idx.harness_floor) == (2, {"a": 2})
    assert idx.query(Query(limit=5)) == ([], None, False)
    assert idx.query(Query(names=("a",), limit=5)) == ([], None, False)
    recs, oldest, complete = idx.query(Query(names=("a",), limit=1))
    assert ([r.run_id for r in recs], oldest, complete) == ([2], 2, True)


def test_a_live_late_closing_line_is_folded_but_not_kept() -> None:
    """Like a late update, a live closing line of a record the index let go (a run id it
    has seen) is folded for the caller only; a new run id, even closed at once, is kept."""
    idx = Index(window_ns=DAY, tail=1)
    idx.apply(_index_line(1, "a", 2, T0 - 10 * DAY))
    idx.apply(_index_line(2, "a", 1, T0 - 10 * DAY + 1))
    assert idx.trim(T0) == 1
    late = {"v": 1, "seq": 3, "type": "closed", "at": format_ns(T0), "harness": "a",
            "run_id": 2, "outcome": "failed"}
    r = idx.apply(late, live=True)
    assert (r.seq, r.closed, r.fields["outcome"], idx.get("a", 2)) == (3, True, "failed", None)
    assert (idx.floor, idx.harness_floor, idx.floor_at) == (4, {"a": 4}, format_ns(T0 + 1))
    # A harness never seen: its run 1, closed at once, is a new (partial) record.
    first = {"v": 1, "seq": 4, "type": "closed", "at": format_ns(T0 + 2), "harness": "b",
             "run_id": 1, "outcome": "success"}
    r = idx.apply(first, live=True)
    assert [(r.seq, r.closed) for r in [idx.get("b", 1)] if r is not None] == [(4, True)]
    assert (idx.floor, idx.harness_floor, idx.max_ids) == (4, {"a": 4}, {"a": 2, "b": 1})
    # A record's first line (decided or opened) is never late, whatever its run id.
    for seq, rid, kind in ((5, 3, "opened"), (6, 2, "decided")):
        idx.apply({**_index_line(seq, "b", rid, T0 + seq), "type": kind}, live=True)
    assert [(r.seq, r.run_id) for r in (idx.get("b", 3), idx.get("b", 2)) if r is not None] == [
        (5, 3), (6, 2)]
    assert (idx.floor, idx.harness_floor, idx.max_ids) == (4, {"a": 4}, {"a": 2, "b": 3})


def test_a_live_opened_line_below_the_highest_run_id_starts_a_record_unless_carried() -> None:
    """Run ids are allocated before the opened line is written: a run held under
    on_overlap = "queue" (a/4) opens after a/6 was decided. Its opened line starts a
    record, kept, the floors where they were. A prune's carried opened line of a record
    the index let go (a/5, trimmed) is still late: folded for the caller, not kept."""
    idx = Index(window_ns=DAY, tail=1)
    idx.apply(_index_line(1, "a", 5, T0 - 10 * DAY))
    idx.apply(_index_line(2, "a", 6, T0 - 10 * DAY + 1))
    assert idx.trim(T0) == 1
    floors = (2, {"a": 2}, format_ns(T0 - DAY))
    assert (idx.floor, idx.harness_floor, idx.floor_at) == floors
    queued = {**_index_line(3, "a", 4, T0), "type": "opened", "outcome": "running"}
    r = idx.apply(queued, live=True)
    assert [(x.run_id, x.seq, x.is_open) for x in idx.open_records()] == [(4, 3, True)]
    assert idx.get("a", 4) is r
    assert (idx.floor, idx.harness_floor, idx.floor_at, idx.max_ids) == (*floors, {"a": 6})
    carried = {**_index_line(4, "a", 5, T0 + 1), "type": "opened"}
    r = idx.apply(carried, live=True, carried=True)
    assert (r.seq, r.run_id, idx.get("a", 5)) == (4, 5, None)
    assert (idx.floor, idx.harness_floor, idx.floor_at) == (5, {"a": 5}, format_ns(T0 + 2))


def test_a_live_closing_line_of_a_record_the_index_holds_is_kept() -> None:
    """Only a record memory does NOT hold can be late: a live closing line of an open
    record it holds (its run id seen, so no newer than the highest) closes that record in
    memory, and the floors stay where they were."""
    idx = Index(window_ns=DAY, tail=1)
    idx.apply({**_index_line(1, "a", 1, T0 - HOUR), "type": "opened"})
    idx.apply(_index_line(2, "a", 2, T0 - MINUTE))
    closing = {"v": 1, "seq": 3, "type": "closed", "at": format_ns(T0), "harness": "a",
               "run_id": 1, "outcome": "failed"}
    r = idx.apply(closing, live=True)
    kept = idx.get("a", 1)
    assert kept is not None
    assert (kept.seq, kept.last_seq, kept.closed, kept.fields["outcome"], r.closed) == (
        1, 3, True, "failed", True)
    assert idx.open_records() == []
    assert (idx.floor, idx.harness_floor, idx.floor_at, idx.max_ids) == (1, {}, "", {"a": 2})


def test_an_index_that_never_dropped_a_record_answers_every_query() -> None:
    """Floor 1 (nothing trimmed): memory holds the whole history, so a query that asks for
    more records than there are is still complete, with or without names."""
    idx = Index(window_ns=DAY, tail=1)
    idx.apply(_index_line(1, "a", 1, T0 - 10 * DAY))
    idx.apply(_index_line(2, "b", 1, T0 - 10 * DAY + 1))
    assert idx.trim(T0) == 0
    assert (idx.floor, idx.harness_floor) == (1, {})
    recs, oldest, complete = idx.query(Query(limit=5))
    assert ([(r.harness, r.run_id) for r in recs], oldest, complete) == (
        [("b", 1), ("a", 1)], 1, True)
    recs, oldest, complete = idx.query(Query(names=("a",), limit=5))
    assert ([(r.harness, r.run_id) for r in recs], oldest, complete) == ([("a", 1)], 1, True)


def test_an_unbounded_query_after_a_trim_is_answered_from_the_window() -> None:
    """limit None (internal use) once the floor rose: a since at the window's start is
    still complete from memory, and one before it is not; neither compares a count
    against no limit."""
    idx = Index(window_ns=DAY, tail=1)
    idx.apply(_index_line(1, "a", 1, T0 - 10 * DAY))
    idx.apply(_index_line(2, "a", 2, T0 - HOUR))
    assert idx.trim(T0) == 1
    assert (idx.floor, idx.floor_at) == (2, format_ns(T0 - DAY))
    recs, oldest, complete = idx.query(Query(since_ns=T0 - DAY))
    assert ([r.run_id for r in recs], oldest, complete) == ([2], 2, True)
    assert idx.query(Query(since_ns=T0 - DAY - 1)) == ([], None, False)


def test_the_index_folds_a_mistyped_word_field_as_it_lies() -> None:
    idx = Index(window_ns=DAY)
    r = idx.apply(_index_line(1, "a", 1, T0, model=7, reason=["x"], source=None))
    assert (r.fields["model"], r.fields["reason"], "source" in r.fields) == (7, ["x"], False)
    assert idx.get("a", 1) is not None


def test_valid_line_takes_only_a_foldable_envelope() -> None:
    good = {"v": 1, "seq": 1, "type": "opened", "at": format_ns(T0), "harness": "a",
            "run_id": 1}
    assert valid_line(good) is True
    for bad in ({"seq": 0}, {"seq": -1}, {"seq": True}, {"seq": "1"}, {"run_id": 0},
                {"run_id": 1.0}, {"harness": ""}, {"harness": 7}, {"type": "torn"},
                {"at": None}):
        assert valid_line({**good, **bad}) is False, bad
    assert valid_line([good]) is False


# -- REQ-14/15: filters -----------------------------------------------------------------


def _filters_ledger(d: Path) -> None:
    clock = Clock(T0 - 5 * HOUR)
    led = RunLedger(str(d), clock=clock)
    append_filter_runs(led, clock)
    led.close()


@pytest.fixture(scope="module")
def filters_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("filters") / "ledger"
    _filters_ledger(d)
    return d


def keys(recs: list[dict[str, Any]]) -> list[str]:
    return [f"{r['harness']}/{r['run_id']}" for r in recs]


FILTERS: list[tuple[str, dict[str, Any], list[str]]] = [
    ("all", {}, ["c/1", "b/2", "b/1", "a/2", "a/1"]),
    ("one name", {"names": ("a",)}, ["a/2", "a/1"]),
    ("two names", {"names": ("a", "c")}, ["c/1", "a/2", "a/1"]),
    ("unknown name", {"names": ("zzz",)}, []),
    ("since inclusive", {"since_ns": T0 - 3 * HOUR}, ["c/1", "b/2", "b/1"]),
    ("since on started_at, not at", {"since_ns": T0 - 30 * MINUTE}, []),
    ("until on started_at, not at", {"until_ns": T0 - 4 * HOUR}, ["a/2", "a/1"]),
    ("until inclusive", {"until_ns": T0 - 3 * HOUR}, ["b/1", "a/2", "a/1"]),
    ("since = until on first at", {"since_ns": T0 - 2 * HOUR, "until_ns": T0 - 2 * HOUR},
     ["b/2"]),
    ("since one ns late", {"since_ns": T0 - 2 * HOUR + 1, "until_ns": T0 - HOUR}, ["c/1"]),
    ("outcomes", {"outcomes": frozenset({"failed", "missed"})}, ["b/2", "a/2"]),
    ("running", {"outcomes": frozenset({"running"})}, ["c/1"]),
    ("triggers", {"triggers": frozenset({"manual", "channel"})}, ["c/1", "a/2"]),
    ("combined", {"names": ("a", "b"), "since_ns": T0 - 4 * HOUR,
                  "outcomes": frozenset({"failed", "success"}),
                  "triggers": frozenset({"manual", "webhook"})}, ["b/1", "a/2"]),
    ("limit", {"limit": 2}, ["c/1", "b/2"]),
    ("before_seq", {"before_seq": 5}, ["b/1", "a/2", "a/1"]),
]


@pytest.mark.parametrize("mode", ["memory", "files"])
@pytest.mark.parametrize(("kw", "want"), [(f[1], f[2]) for f in FILTERS],
                         ids=[f[0] for f in FILTERS])
def test_filters(
    filters_dir: Path, mode: str, kw: dict[str, Any], want: list[str], scans: Scans,
    opened_ledgers: list[RunLedger],
) -> None:
    led = reopen(filters_dir, mode, T0, opened_ledgers)
    kw = {"limit": 50, **kw}
    recs, oldest = led.query(Query(**kw))
    assert keys(recs) == want
    assert oldest == (recs[-1]["seq"] if recs else None)
    if mode == "files":
        # Memory holds all of a name the files hold no record of (none): it answers.
        assert len(scans.calls) == (0 if kw.get("names") == ("zzz",) else 1)
    offline, low, _ = scan(str(filters_dir), Query(**kw))
    assert keys([r.to_json() for r in offline]) == want and low == oldest


@pytest.mark.parametrize(("kw", "want"), [(f[1], f[2]) for f in FILTERS if f[0] != "limit"],
                         ids=[f[0] for f in FILTERS if f[0] != "limit"])
def test_filters_page_one_record_at_a_time_from_the_files(
    filters_dir: Path, kw: dict[str, Any], want: list[str]
) -> None:
    """The file scan picks the records a query returns before it folds them: with a limit
    of one, each filter must pick the newest match, not the newest record, and paging by
    before_seq must walk the same list."""
    got: list[str] = []
    before = kw.get("before_seq")
    for _ in range(len(want) + 1):
        recs, low, _ = scan(str(filters_dir), Query(**{**kw, "limit": 1, "before_seq": before}))
        assert low == (recs[0].seq if recs else None)
        if not recs:
            break
        got.extend(keys([r.to_json() for r in recs]))
        before = low
    assert got == want


def test_filtered_records_are_whole(filters_dir: Path, opened_ledgers: list[RunLedger]) -> None:
    mem = reopen(filters_dir, "memory", T0, opened_ledgers)
    recs, _ = mem.query(Query(limit=50))
    mem.close()  # one writer per ledger directory: the other mode opens it next
    files = reopen(filters_dir, "files", T0, opened_ledgers)
    assert recs == files.query(Query(limit=50))[0]
    by = {f"{r['harness']}/{r['run_id']}": r for r in recs}
    assert by["a/2"] == {"harness": "a", "run_id": 2, "seq": 2, "trigger": "manual",
                         "started_at": format_ns(T0 - 4 * HOUR), "outcome": "failed",
                         "exit_code": 1}
    assert by["c/1"] == {"harness": "c", "run_id": 1, "seq": 7, "trigger": "channel",
                         "started_at": format_ns(T0 - HOUR), "todo_id": "t1",
                         "outcome": "running"}
    assert by["b/2"]["seq"] == 6 and "started_at" not in by["b/2"]


# -- beyond the index ---------------------------------------------------------------------


def test_a_query_beyond_the_index_returns_the_newest_records_fully_folded(
    tmp_path: Path, scans: Scans, opened_ledgers: list[RunLedger]
) -> None:
    d = tmp_path / "ledger"
    clock = Clock(0)
    led = RunLedger(str(d), clock=clock)
    want: dict[int, dict[str, Any]] = {}
    seq = 0
    for i in range(1, 11):  # one run of "w" (four lines) and one decided "x" per day
        start = T0 - (11 - i) * DAY
        clock.ns = start
        led.append({"type": "opened", "harness": "w", "run_id": i, "kind": "oneshot",
                    "trigger": "schedule", "started_at": format_ns(start)}, sync=False)
        clock.ns += MINUTE
        led.append({"type": "updated", "harness": "w", "run_id": i,
                    "tokens": {"input": i, "output": 1, "cache_read": 0, "cache_write": 0}},
                   sync=False)
        clock.ns += MINUTE
        led.append({"type": "updated", "harness": "w", "run_id": i, "model_calls": i,
                    "tokens": {"input": 10 * i, "output": 2, "cache_read": 0,
                               "cache_write": 0}}, sync=False)
        clock.ns += MINUTE
        led.append({"type": "closed", "harness": "w", "run_id": i, "outcome": "success",
                    "exit_code": 0, "ended_at": format_ns(clock.ns), "duration_ms": 180000},
                   sync=False)
        clock.ns += HOUR
        led.append({"type": "decided", "harness": "x", "run_id": i, "trigger": "schedule",
                    "outcome": "skipped", "reason": "overlap"})
        want[i] = {"harness": "w", "run_id": i, "seq": seq + 1, "kind": "oneshot",
                   "trigger": "schedule", "started_at": format_ns(start),
                   "tokens": {"input": 10 * i, "output": 2, "cache_read": 0, "cache_write": 0},
                   "model_calls": i, "outcome": "success", "exit_code": 0,
                   "ended_at": format_ns(start + 3 * MINUTE), "duration_ms": 180000}
        seq += 5
    led.close()
    assert len(list(d.glob("*.jsonl"))) == 10

    led = RunLedger(str(d), clock=Clock(T0), window_ns=DAY, tail=2)
    opened_ledgers.append(led)
    mem_before = led.stats().records_in_memory
    # Yesterday's two records (the index holds one day), and from the older files the
    # one more of each harness that its tail of two asks for.
    assert mem_before == 4
    assert [(h, i) for h in ("w", "x") for i in (8, 9) if led.get(h, i) is not None] == [
        ("w", 9), ("x", 9)]
    recs, oldest = led.query(Query(names=("w",), limit=5))
    assert recs == [want[i] for i in (10, 9, 8, 7, 6)]
    assert oldest == want[6]["seq"]
    assert len(scans.calls) == 1
    recs, _ = led.query(Query(limit=6))
    assert keys(recs) == ["x/10", "w/10", "x/9", "w/9", "x/8", "w/8"]
    assert recs[1] == want[10] and recs[3] == want[9] and recs[5] == want[8]
    # What memory holds is answered from memory: the window, and each harness's tail.
    recs, _ = led.query(Query(names=("w",), limit=2))
    assert recs == [want[10], want[9]]
    assert len(scans.calls) == 2


# -- memory and files agree, whatever the index holds ---------------------------------


def settle(led: RunLedger) -> None:
    """Wait until every queued line is committed."""
    led.flush()
    deadline = time.monotonic() + 30.0
    while led.stats().queued:
        assert time.monotonic() < deadline, "buffered lines were not flushed"
        time.sleep(0.002)


def _random_queries(rng: Any, names: list[str], now: int) -> list[Query]:
    qs = [Query(limit=1000), Query(limit=3), Query(names=(names[0],), limit=2)]
    for _ in range(12):
        kw: dict[str, Any] = {"limit": rng.choice([1, 2, 5, 20, 1000])}
        if rng.random() < 0.5:
            kw["names"] = tuple(rng.sample(names, rng.randint(1, 2)))
        if rng.random() < 0.4:
            kw["since_ns"] = now - rng.randint(0, 12) * DAY // 2
        if rng.random() < 0.2:
            kw["until_ns"] = now - rng.randint(0, 12) * DAY // 2
        if rng.random() < 0.3:
            kw["outcomes"] = frozenset(rng.sample(["success", "failed", "running", "missed"],
                                                  2))
        if rng.random() < 0.2:
            kw["triggers"] = frozenset({rng.choice(["schedule", "manual"])})
        if rng.random() < 0.3:
            kw["before_seq"] = rng.randint(1, 400)
        qs.append(Query(**kw))
    return qs


@pytest.mark.parametrize("seed", range(int(os.environ.get("LEDGER_QUERY_SEEDS", "4"))))
@pytest.mark.parametrize("rough", [False, True], ids=["steady", "rough"])
def test_the_index_answers_exactly_what_the_files_say(tmp_path: Path, seed: int,
                                                       rough: bool) -> None:
    """Runs over twelve days, restarts with small windows and tails (each boot loading
    every harness's newest records from the older files): every
    query answered by the ledger equals the same query answered by the files alone.
    Rough: the clock also steps back (up to two hours, across midnights too), ended and
    trimmed records get late updates, decided records are updated later, and restarts
    prune with a short retention."""
    rng = random.Random(seed)
    d = tmp_path / "ledger"
    names = ["a", "b", "c", "d"]
    clock = Clock(T0 - 12 * DAY)
    led = RunLedger(str(d), clock=clock)
    next_id = dict.fromkeys(names, 0)
    open_runs: dict[tuple[str, int], int] = {}  # key -> opened at
    ended: list[tuple[str, int]] = []
    try:
        for step in range(400):
            clock.ns += rng.randint(0, 90) * MINUTE
            if rough and rng.random() < 0.08:
                clock.ns -= rng.randint(1, 120) * MINUTE  # a clock stepped back
            if rough and ended and rng.random() < 0.1:
                key = rng.choice(ended)  # a late update of a record that already ended
                led.append({"type": "updated", "harness": key[0], "run_id": key[1],
                            "model_calls": 1000 + step})
            for key, at in list(open_runs.items()):
                if clock.ns - at > 18 * HOUR:  # keep runs shorter than a day
                    led.append({"type": "closed", "harness": key[0], "run_id": key[1],
                                "outcome": "failed", "exit_code": 1})
                    del open_runs[key]
                    ended.append(key)
            r = rng.random()
            h = rng.choice(names)
            if r < 0.35:
                next_id[h] += 1
                led.append({"type": "opened", "harness": h, "run_id": next_id[h],
                            "trigger": rng.choice(["schedule", "manual"]),
                            "started_at": format_ns(clock.ns)})
                open_runs[(h, next_id[h])] = clock.ns
            elif r < 0.5 and open_runs:
                key = rng.choice(sorted(open_runs))
                led.append({"type": "updated", "harness": key[0], "run_id": key[1],
                            "model_calls": step}, sync=False)
            elif r < 0.8 and open_runs:
                key = rng.choice(sorted(open_runs))
                led.append({"type": "closed", "harness": key[0], "run_id": key[1],
                            "outcome": rng.choice(["success", "failed"])})
                del open_runs[key]
                ended.append(key)
            else:
                next_id[h] += 1
                led.append({"type": "decided", "harness": h, "run_id": next_id[h],
                            "trigger": "schedule", "outcome": "missed"})
                ended.append((h, next_id[h]))
            if step % 50 == 49:
                led.close()
                led = RunLedger(str(d), clock=clock, window_ns=rng.choice([1, DAY, 2 * DAY]),
                                tail=rng.choice([1, 2, 5]),
                                retention_ns=rng.choice([3 * DAY, 5 * DAY]) if rough
                                else 30 * DAY)
                if rough:
                    led.prune()
                # A clock stepped back across midnight can put a run's closed line in an
                # older file than its opened line: the prune carries the closing line too,
                # so no ended run reads open, in memory or on disk.
                assert {(o["harness"], o["run_id"]) for o in led.open_records()} == set(
                    open_runs)
                on_disk, _, _ = scan(str(d), Query())
                assert {(r.harness, r.run_id) for r in on_disk
                        if r.opened and not r.closed} == set(open_runs)
            if step % 25 == 24:
                settle(led)  # a written, unsynced line is in the file but not yet in memory
                for q in _random_queries(rng, names, clock.ns):
                    files, low, _ = scan(str(d), q)
                    want = [x.to_json() for x in files]
                    assert led.query(q) == (want, low), (step, q)
    finally:
        led.close(timeout=10.0)


def test_since_excludes_a_long_run_that_started_before_it(tmp_path: Path) -> None:
    d = tmp_path / "ledger"
    clock = Clock(T0 - 3 * DAY + 11 * HOUR)  # 23:00, three days back
    led = RunLedger(str(d), clock=clock)
    led.append({"type": "opened", "harness": "long", "run_id": 1, "kind": "resident",
                "trigger": "autostart", "started_at": format_ns(clock.ns)})
    clock.ns = T0 - DAY + 2 * HOUR
    led.append({"type": "closed", "harness": "long", "run_id": 1, "outcome": "success"})
    led.close()
    q = Query(since_ns=T0 - DAY + HOUR, limit=10)  # after the start, before the close
    recs, _, _ = scan(str(d), q)
    assert [r.to_json() for r in recs] == []


def test_a_run_open_across_since_is_found_with_its_real_start(tmp_path: Path) -> None:
    """The other side of the look-back: a run that started inside the range but whose
    opened line sits in a file the range alone would skip (stamped before midnight of the
    day before) is returned whole, with its own start and its first line's seq."""
    d = tmp_path / "ledger"
    clock = Clock(T0 - 3 * DAY)
    led = RunLedger(str(d), clock=clock)
    # The opened line is stamped three days back, but carries a start inside the range:
    # a start field later than its line (e.g. imported history) still counts.
    led.append({"type": "opened", "harness": "res", "run_id": 7, "kind": "resident",
                "trigger": "restart", "started_at": format_ns(T0 - HOUR)})
    clock.ns = T0
    led.append({"type": "closed", "harness": "res", "run_id": 7, "outcome": "failed",
                "exit_code": 1})
    led.close()
    q = Query(since_ns=T0 - 2 * HOUR, limit=10)
    recs, oldest, stats = scan(str(d), q)
    assert [(r.seq, r.fields["trigger"], r.fields["outcome"], r.fields["exit_code"])
            for r in recs] == [(1, "restart", "failed", 1)]
    assert oldest == 1
    assert stats.files == 1  # the range itself needed one file; the look-back read the other


@pytest.mark.parametrize("since_at", ["midnight", "last_ns"])
def test_since_reads_exactly_one_day_of_slack_before_its_own_day(
        tmp_path: Path, since_at: str) -> None:
    """A record whose only line is stamped before the midnight that starts --since's day,
    with a start inside the range, lies in the day file before since's: the read takes in
    exactly that one extra day (24 h back from since, to the nanosecond), not older ones."""
    d = tmp_path / "ledger"
    m = day_start_ns(utc_day(T0))
    since = m if since_at == "midnight" else m + DAY - 1  # first or last ns of T0's day
    clock = Clock(m - 2 * DAY + HOUR)
    led = RunLedger(str(d), clock=clock)
    led.append({"type": "decided", "harness": "s", "run_id": 1, "outcome": "missed"})
    clock.ns = m - 10 * MINUTE  # 23:50 of the day before
    led.append({"type": "decided", "harness": "s", "run_id": 2, "outcome": "skipped",
                "trigger": "schedule", "started_at": format_ns(since + 10 * MINUTE)})
    led.close()
    recs, oldest, stats = scan(str(d), Query(since_ns=since, limit=10))
    assert [(r.run_id, r.seq, r.fields["outcome"], r.fields["started_at"]) for r in recs] == [
        (2, 2, "skipped", format_ns(since + 10 * MINUTE))]
    assert oldest == 2
    assert (stats.files, stats.lines) == (1, 1)  # the day before since's; not the one before


def test_a_start_moved_by_a_later_line_still_looks_back_for_the_opened_line(
        tmp_path: Path) -> None:
    """A run opened three days back whose later line (in range) moves its start into the
    range: the record is still partial in the files read, so the look-back joins its
    opened line (its seq, its trigger), while the filter and the record keep the newer
    start."""
    d = tmp_path / "ledger"
    clock = Clock(T0 - 3 * DAY)
    led = RunLedger(str(d), clock=clock)
    led.append({"type": "opened", "harness": "r", "run_id": 1, "trigger": "manual",
                "started_at": format_ns(T0 - 3 * DAY)})
    clock.ns = T0 - 2 * DAY  # a file between: the look-back goes on past it
    led.append({"type": "updated", "harness": "r", "run_id": 1, "model_calls": 1})
    clock.ns = T0
    led.append({"type": "updated", "harness": "r", "run_id": 1,
                "started_at": format_ns(T0 - HOUR)})
    led.close()
    recs, oldest, stats = scan(str(d), Query(since_ns=T0 - 2 * HOUR, limit=5))
    assert [(r.seq, r.last_seq, r.opened, r.fields["trigger"], r.fields["started_at"],
             r.fields["model_calls"]) for r in recs] == [
        (1, 3, True, "manual", format_ns(T0 - HOUR), 1)]
    assert (oldest, stats.files) == (1, 1)


def test_a_run_whose_opened_line_is_gone_is_read_back_to_the_oldest_file(
        tmp_path: Path) -> None:
    """A run with lines inside the range but no opened line anywhere (pruned, or never
    written): the look-back reads every older file, finds nothing and stops at the oldest;
    the record is returned partial, from its first line in range."""
    d = tmp_path / "ledger"
    clock = Clock(T0 - 4 * DAY)
    led = RunLedger(str(d), clock=clock)
    led.append({"type": "decided", "harness": "o", "run_id": 1, "outcome": "missed"})
    clock.ns = T0 - 3 * DAY
    led.append({"type": "decided", "harness": "o", "run_id": 2, "outcome": "missed"})
    clock.ns = T0 - DAY
    led.append({"type": "updated", "harness": "p", "run_id": 9, "model_calls": 4})
    clock.ns = T0
    led.append({"type": "closed", "harness": "p", "run_id": 9, "outcome": "failed",
                "exit_code": 3})
    led.close()
    recs, oldest, stats = scan(str(d), Query(since_ns=T0 - DAY - HOUR, limit=5))
    assert [(r.harness, r.run_id, r.seq, r.last_seq, r.opened, r.closed,
             r.fields["model_calls"], r.fields["exit_code"]) for r in recs] == [
        ("p", 9, 3, 4, False, True, 4, 3)]
    assert (oldest, stats.files, stats.lines) == (3, 2, 2)


def test_runs_open_across_since_filter_on_what_their_older_lines_say(tmp_path: Path) -> None:
    """Runs with their first lines three days back and a later line each in range: the
    look-back gives the first pass their older lines' start, outcome, trigger and state,
    so filters and the limit see them as they fold. z/1 started before the range."""
    d = tmp_path / "ledger"
    clock = Clock(T0 - 3 * DAY)
    led = RunLedger(str(d), clock=clock)
    led.append({"type": "opened", "harness": "y", "run_id": 1, "trigger": "manual",
                "started_at": format_ns(T0 - 90 * MINUTE)})
    led.append({"type": "decided", "harness": "x", "run_id": 1, "trigger": "schedule",
                "outcome": "missed", "started_at": format_ns(T0 - HOUR)})
    led.append({"type": "opened", "harness": "z", "run_id": 1, "trigger": "manual",
                "started_at": format_ns(T0 - 3 * DAY)})
    clock.ns = T0 - 30 * MINUTE
    led.append({"type": "updated", "harness": "y", "run_id": 1, "model_calls": 1})
    clock.ns = T0
    led.append({"type": "updated", "harness": "x", "run_id": 1, "model_calls": 2})
    led.append({"type": "closed", "harness": "z", "run_id": 1, "outcome": "success"})
    led.close()

    def ask(**kw: Any) -> list[tuple[str, int, str, str]]:
        recs, _, stats = scan(str(d), Query(since_ns=T0 - 2 * HOUR, **kw))
        assert stats.files == 1
        return [(r.harness, r.seq, r.fields["trigger"], r.to_json()["outcome"]) for r in recs]

    assert ask(limit=5) == [("x", 2, "schedule", "missed"), ("y", 1, "manual", "running")]
    assert ask(limit=1) == [("x", 2, "schedule", "missed")]
    assert ask(outcomes=frozenset({"missed"}), limit=5) == [("x", 2, "schedule", "missed")]
    assert ask(triggers=frozenset({"schedule"}), limit=5) == [("x", 2, "schedule", "missed")]
    assert ask(outcomes=frozenset({"running"}), limit=1) == [("y", 1, "manual", "running")]
    assert ask(triggers=frozenset({"manual"}), limit=1) == [("y", 1, "manual", "running")]


def test_a_since_past_every_file_reads_none(tmp_path: Path) -> None:
    d = tmp_path / "ledger"
    led = RunLedger(str(d), clock=Clock(T0))
    led.append({"type": "decided", "harness": "n", "run_id": 1, "outcome": "missed"})
    led.close()
    recs, oldest, stats = scan(str(d), Query(since_ns=T0 + 3 * DAY, limit=5))
    assert (recs, oldest, stats.files, stats.lines) == ([], None, 0, 0)


def test_a_clock_jump_folds_in_seq_order(tmp_path: Path) -> None:
    """A clock stepped back puts a later line into an earlier day's file. The scan still
    folds every record in seq order: the outcome is the newest line's, not the one in the
    newest-named file."""
    d = tmp_path / "ledger"
    clock = Clock(T0)
    led = RunLedger(str(d), clock=clock)
    led.append({"type": "opened", "harness": "j", "run_id": 1, "started_at": format_ns(T0)})
    led.append({"type": "updated", "harness": "j", "run_id": 1, "outcome": "running"})
    clock.ns = T0 - DAY  # the clock jumps back a day
    led.append({"type": "closed", "harness": "j", "run_id": 1, "outcome": "timed_out",
                "exit_code": -1})
    led.close()
    assert sorted(p.name for p in d.glob("*.jsonl")) == [
        f"{format_ns(T0 - DAY)[:10]}.jsonl", f"{format_ns(T0)[:10]}.jsonl"]
    for q in (Query(limit=5), Query(since_ns=T0 - 2 * DAY, outcomes=frozenset({"timed_out"}),
                                    limit=5)):
        recs, _, _ = scan(str(d), q)
        assert [(r.seq, r.last_seq, r.fields["outcome"], r.fields["exit_code"])
                for r in recs] == [(1, 3, "timed_out", -1)]
    # The filter sees the seq-order outcome too: the run is not "running".
    recs, _, _ = scan(str(d), Query(outcomes=frozenset({"running"}), limit=5))
    assert recs == []


def test_a_clock_jump_that_reorders_records_still_pages_newest_first(tmp_path: Path) -> None:
    """The clock steps back a day before j/2 (seq 3): it lies in an older file than j/1
    (seq 1), so j's records meet in file order, not seq order. Page by page the newest seq
    still comes first, with no record lost or repeated."""
    d = tmp_path / "ledger"
    clock = Clock(T0)
    led = RunLedger(str(d), clock=clock)
    led.append({"type": "decided", "harness": "j", "run_id": 1, "outcome": "missed"})
    led.append({"type": "decided", "harness": "k", "run_id": 1, "outcome": "missed"})
    clock.ns = T0 - DAY
    led.append({"type": "decided", "harness": "j", "run_id": 2, "outcome": "skipped"})
    led.close()
    got = []
    before = None
    for _ in range(4):
        recs, oldest, _ = scan(str(d), Query(limit=1, before_seq=before))
        got.append(([(r.harness, r.run_id, r.seq) for r in recs], oldest))
        before = oldest
    assert got == [([("j", 2, 3)], 3), ([("k", 1, 2)], 2), ([("j", 1, 1)], 1), ([], None)]
    recs, oldest, _ = scan(str(d), Query())  # no limit (internal callers)
    assert ([(r.harness, r.run_id, r.seq) for r in recs], oldest) == (
        [("j", 2, 3), ("k", 1, 2), ("j", 1, 1)], 1)


def test_the_scan_leaves_the_garbage_collector_as_it_found_it(tmp_path: Path) -> None:
    """The scan pauses the collector while it reads; the daemon calls it too, so it must
    hand the collector back on, and must not turn on one its caller turned off."""
    d = tmp_path / "ledger"
    led = RunLedger(str(d), clock=Clock(T0))
    led.append({"type": "decided", "harness": "g", "run_id": 1, "outcome": "missed"})
    led.close()

    def read() -> None:
        recs, oldest, _ = scan(str(d), Query(limit=5))
        assert ([(r.harness, r.run_id, r.seq) for r in recs], oldest) == ([("g", 1, 1)], 1)

    assert gc_left_by(read) == [True, False]


def test_a_record_read_newest_line_first_keeps_its_first_seq(tmp_path: Path) -> None:
    """The clock steps back a day between two runs' opened lines and their closed lines,
    so the files give each closed line first: each record is still keyed by its first seq,
    for before_seq as for the order, and a line past upto_seq changes neither."""
    d = tmp_path / "ledger"
    clock = Clock(T0)
    led = RunLedger(str(d), clock=clock)
    for name in ("j", "k"):
        led.append({"type": "opened", "harness": name, "run_id": 1, "trigger": "manual"})
    clock.ns = T0 - DAY
    for name in ("j", "k"):
        led.append({"type": "closed", "harness": name, "run_id": 1, "outcome": "success"})
    led.append({"type": "updated", "harness": "j", "run_id": 1, "outcome": "failed"})
    led.close()

    def ask(q: Query, upto: int | None = None) -> tuple[list[tuple[str, int, int, str]],
                                                      int | None]:
        recs, oldest, _ = scan(str(d), q, upto_seq=upto)
        return [(r.harness, r.seq, r.last_seq, r.to_json()["outcome"]) for r in recs], oldest

    want = [("k", 2, 4, "success"), ("j", 1, 5, "failed")]
    assert ask(Query(limit=5)) == (want, 1)
    assert ask(Query(before_seq=3, limit=5)) == (want, 1)
    assert ask(Query(before_seq=2, limit=5)) == (want[1:], 1)
    # Up to seq 4 (seq 5 not yet durable) j/1 succeeded, for the filter too.
    assert ask(Query(outcomes=frozenset({"success"}), limit=5), upto=4) == (
        [("k", 2, 4, "success"), ("j", 1, 3, "success")], 1)


def test_the_daemon_fallback_reads_only_durable_lines(tmp_path: Path) -> None:
    """`upto_seq` cuts the scan at the last committed seq: a buffered line that is in the
    file but not yet synced (so not yet visible in memory) is not visible from files."""
    d = tmp_path / "ledger"
    led = RunLedger(str(d), clock=Clock(T0))
    try:
        led.append({"type": "opened", "harness": "b", "run_id": 1})
        led.append({"type": "closed", "harness": "b", "run_id": 1, "outcome": "success"})
        led.append({"type": "decided", "harness": "b", "run_id": 2, "outcome": "skipped"},
                   sync=False)
        wait_for_bytes(d, b'"run_id":2')
        everything, _, _ = scan(str(d), Query(limit=10))
        durable, _, _ = scan(str(d), Query(limit=10), upto_seq=2)
        assert [r.run_id for r in everything] == [2, 1]
        assert [r.run_id for r in durable] == [1]
        assert [r["run_id"] for r in led.query(Query(limit=10))[0]] == [1]
    finally:
        led.close(timeout=10.0)


def test_right_after_a_boot_the_fallback_reads_only_the_lines_on_disk_at_open(
        tmp_path: Path) -> None:
    """Before the first commit of a reopened ledger, the fallback's `upto_seq` is the last
    seq on disk at open: a buffered line written since is not read from the files."""
    d = tmp_path / "ledger"
    clock = Clock(T0 - 20 * DAY)
    led = RunLedger(str(d), clock=clock)
    led.append({"type": "decided", "harness": "b", "run_id": 1, "outcome": "skipped"})
    clock.ns = T0
    led.append({"type": "decided", "harness": "b", "run_id": 2, "outcome": "skipped"})
    led.close()
    led = RunLedger(str(d), clock=Clock(T0 + HOUR))  # the first file is past the window
    try:
        led.append({"type": "decided", "harness": "b", "run_id": 3, "outcome": "skipped"},
                   sync=False)
        wait_for_bytes(d, b'"run_id":3')
        recs, oldest = led.query(Query(limit=10))
        assert ([r["run_id"] for r in recs], oldest) == ([2, 1], 1)
    finally:
        led.close(timeout=10.0)


def test_lines_after_upto_seq_are_not_read_even_to_choose(tmp_path: Path) -> None:
    """Lines past `upto_seq` neither make records nor change them, so a filter or a limit
    never picks by a line the answer does not show."""
    d = tmp_path / "ledger"
    led = RunLedger(str(d), clock=Clock(T0))
    led.append({"type": "opened", "harness": "o", "run_id": 1, "trigger": "manual"})
    led.append({"type": "decided", "harness": "d", "run_id": 1, "outcome": "missed"})
    led.append({"type": "closed", "harness": "o", "run_id": 1, "outcome": "success"})
    led.append({"type": "decided", "harness": "n", "run_id": 1, "outcome": "missed"})
    led.close()

    def ask(q: Query) -> tuple[list[tuple[str, int, str]], int | None]:
        recs, oldest, _ = scan(str(d), q, upto_seq=2)
        return [(r.harness, r.seq, r.to_json()["outcome"]) for r in recs], oldest

    assert ask(Query(limit=5)) == ([("d", 2, "missed"), ("o", 1, "running")], 1)
    assert ask(Query(limit=1)) == ([("d", 2, "missed")], 2)
    assert ask(Query(outcomes=frozenset({"running"}), limit=1)) == ([("o", 1, "running")], 1)
    assert ask(Query(outcomes=frozenset({"success"}), limit=1)) == ([], None)


def test_an_unreadable_start_filters_on_the_first_line_as_in_memory(tmp_path: Path) -> None:
    """A started_at that is not a time (a hand-edited or foreign line) neither fails the
    read nor hides the record: the files filter on the record's first `at` instead, as
    the in-memory index does (Record.started_key), limit or none."""
    d = tmp_path / "ledger"
    d.mkdir()
    at = format_ns(T0)
    (d / f"{at[:10]}.jsonl").write_bytes(b"".join(
        json.dumps(x, separators=(",", ":")).encode() + b"\n" for x in (
            {"seq": 1, "type": "decided", "at": at, "harness": "a", "run_id": 1,
             "outcome": "missed", "started_at": "yesterday"},
            {"seq": 2, "type": "decided", "at": at, "harness": "b", "run_id": 1,
             "outcome": "missed", "started_at": format_ns(T0 - HOUR)},
            # No time at all: the earliest possible start.
            {"seq": 3, "type": "decided", "at": "whenever", "harness": "c", "run_id": 1,
             "outcome": "missed"})))
    for kw, want in (({"since_ns": T0 - 2 * HOUR}, [("b", 2), ("a", 1)]),
                     ({"since_ns": T0 - 2 * HOUR, "limit": 1}, [("b", 2)]),
                     ({"since_ns": T0, "limit": 1}, [("a", 1)]),
                     ({"until_ns": T0 - 2 * HOUR, "limit": 1}, [("c", 3)])):
        q = Query(**{"limit": 5, **kw})
        recs, oldest, stats = scan(str(d), q)
        assert ([(r.harness, r.seq) for r in recs], stats.skipped) == (want, 0), kw
        led = RunLedger(str(d), clock=Clock(T0))
        try:
            assert led.query(q) == ([r.to_json() for r in recs], oldest), kw
        finally:
            led.close()


# -- the boot load and the prune, where seq order and day files disagree ----------------------


def assert_memory_is_the_files(led: RunLedger, d: Path, *queries: Query) -> None:
    for q in queries:
        files, low, _ = scan(str(d), q)
        assert led.query(q) == ([x.to_json() for x in files], low), q


def test_a_clock_stepped_back_across_the_windows_first_midnight(tmp_path: Path) -> None:
    """x/1 opens just after the midnight that starts the 7-day window; the clock steps
    back 30 s, so its closed line and a decided x/2 land in the day before. The boot must
    fold them: x/1 is closed (REQ-7 must not close it again) and x/2 is there."""
    d = tmp_path / "ledger"
    m = day_start_ns(utc_day(T0 - 7 * DAY))
    clock = Clock(m + 5 * 10**9)
    led = RunLedger(str(d), clock=clock)
    led.append({"type": "opened", "harness": "x", "run_id": 1, "trigger": "manual",
                "started_at": format_ns(clock.ns)})
    clock.ns = m - 25 * 10**9
    led.append({"type": "closed", "harness": "x", "run_id": 1, "outcome": "success",
                "exit_code": 0})
    led.append({"type": "decided", "harness": "x", "run_id": 2, "trigger": "schedule",
                "outcome": "skipped", "reason": "overlap"})
    led.close()
    led = RunLedger(str(d), clock=Clock(T0))
    try:
        assert led.open_records() == []
        rec = led.get("x", 1)
        assert rec is not None and (rec["seq"], rec["outcome"]) == (1, "success")
        assert [r["run_id"] for r in led.query(Query(names=("x",), limit=50))[0]] == [2, 1]
        assert_memory_is_the_files(led, d, Query(names=("x",), limit=50), Query(limit=1))
    finally:
        led.close()


def test_a_decided_record_updated_inside_the_window_loads_whole(tmp_path: Path) -> None:
    d = tmp_path / "ledger"
    clock = Clock(T0 - 10 * DAY)
    led = RunLedger(str(d), clock=clock)
    led.append({"type": "decided", "harness": "d", "run_id": 1, "trigger": "schedule",
                "outcome": "missed"})
    clock.ns = T0 - DAY
    led.append({"type": "updated", "harness": "d", "run_id": 1, "model_calls": 3})
    led.close()
    led = RunLedger(str(d), clock=Clock(T0))
    try:
        (rec,), _ = led.query(Query(names=("d",), limit=1))
        assert (rec["seq"], rec["outcome"], rec["trigger"], rec["model_calls"]) == (
            1, "missed", "schedule", 3)
        assert_memory_is_the_files(led, d, Query(names=("d",), limit=1), Query(limit=1))
    finally:
        led.close()


def test_a_prune_after_a_clock_step_back_keeps_what_the_files_keep(tmp_path: Path) -> None:
    """x/1 lies in yesterday's file; a step back put the later x/2 in the file before,
    which the prune deletes. x/1 stays on disk, so it stays in memory."""
    d = tmp_path / "ledger"
    y = day_start_ns(utc_day(T0 - DAY))
    clock = Clock(y + 5 * 10**9)
    led = RunLedger(str(d), clock=clock)
    led.append({"type": "decided", "harness": "x", "run_id": 1, "outcome": "skipped"})
    clock.ns = y - 25 * 10**9
    led.append({"type": "decided", "harness": "x", "run_id": 2, "outcome": "skipped"})
    clock.ns = T0
    led.append({"type": "decided", "harness": "x", "run_id": 3, "outcome": "skipped"})
    led.close()
    led = RunLedger(str(d), clock=Clock(T0), retention_ns=DAY)
    try:
        assert led.prune().deleted == [utc_day(y - DAY)]
        assert [r["run_id"] for r in led.query(Query(names=("x",), limit=50))[0]] == [3, 1]
        assert_memory_is_the_files(led, d, Query(names=("x",), limit=50), Query(limit=2))
    finally:
        led.close()


def test_a_late_line_of_a_record_memory_let_go_is_answered_from_the_files(
        tmp_path: Path) -> None:
    """a/1 ended long ago and was trimmed; a late update for it must not make memory
    show a new partial record with the update's seq as the newest run."""
    d = tmp_path / "ledger"
    clock = Clock(T0 - 9 * DAY)
    led = RunLedger(str(d), clock=clock, tail=1)
    led.append({"type": "decided", "harness": "a", "run_id": 1, "outcome": "success"})
    clock.ns = T0 - HOUR
    led.append({"type": "decided", "harness": "a", "run_id": 2, "outcome": "success"})
    clock.ns = T0
    led.append({"type": "decided", "harness": "b", "run_id": 1, "outcome": "success"})
    assert led.get("a", 1) is None  # trimmed: older than the window, beyond the tail
    led.append({"type": "updated", "harness": "a", "run_id": 1, "model_calls": 5})
    try:
        recs, _ = led.query(Query(limit=7))
        assert [(r["harness"], r["run_id"], r["seq"]) for r in recs] == [
            ("b", 1, 3), ("a", 2, 2), ("a", 1, 1)]
        assert_memory_is_the_files(led, d, Query(limit=7), Query(limit=1),
                                   Query(names=("a",), limit=2))
    finally:
        led.close()


def test_a_clock_stepped_back_more_than_a_day_is_read_whole_with_since(
        tmp_path: Path) -> None:
    """j/1 opens on one day; the clock steps back two days and its closed line lands in
    a file older than --since's day of slack. The files read then miss a seq of their
    own range, so the read takes in every file: the record folds as without --since."""
    d = tmp_path / "ledger"
    clock = Clock(T0)
    led = RunLedger(str(d), clock=clock)
    led.append({"type": "opened", "harness": "j", "run_id": 1,
                "started_at": format_ns(T0)})
    clock.ns = T0 - 2 * DAY
    led.append({"type": "closed", "harness": "j", "run_id": 1, "outcome": "success",
                "model": "m"})
    clock.ns = T0 + HOUR
    led.append({"type": "decided", "harness": "j", "run_id": 2, "outcome": "missed"})
    led.close()
    (d / "notes.txt").write_text("not a day file\n")
    everything, _, every_stats = scan(str(d), Query(limit=5))
    since, _, stats = scan(str(d), Query(since_ns=T0 - HOUR, limit=5))
    assert every_stats.strays == stats.strays == ["notes.txt"]  # named after the re-read too
    assert [r.to_json(offline=True) for r in since] == [
        r.to_json(offline=True) for r in everything]
    assert [(r.run_id, r.fields["outcome"], r.fields.get("model")) for r in since] == [
        (2, "missed", None), (1, "success", "m")]
    assert stats.files == 2  # all of them, the older one included
    assert (stats.lines, stats.skipped, stats.torn) == (3, 0, 0)  # each line counted once


@pytest.mark.parametrize("filler", [b"", b'{"seq', b'{"note":"edited"}'],
                         ids=["blank line", "fragment", "unreadable line"])
def test_a_line_that_holds_no_seq_does_not_hide_one_in_an_older_file(
        tmp_path: Path, filler: bytes) -> None:
    """j/1's closed line (seq 2) lands three days back; a blank line, a fragment or an
    unreadable line in today's file makes its line count span seq 1-3 all the same.
    Only lines that hold a seq count, so the scan still reads the older file and
    shows j/1 closed, as without --since."""
    d = tmp_path / "ledger"
    clock = Clock(T0)
    led = RunLedger(str(d), clock=clock)
    led.append({"type": "opened", "harness": "j", "run_id": 1, "started_at": format_ns(T0)})
    clock.ns = T0 - 3 * DAY
    led.append({"type": "closed", "harness": "j", "run_id": 1, "outcome": "success"})
    clock.ns = T0 + HOUR
    led.append({"type": "decided", "harness": "j", "run_id": 2, "outcome": "missed"})
    led.close()
    today = d / f"{utc_day(T0)}.jsonl"
    first, last = today.read_bytes().splitlines(keepends=True)
    today.write_bytes(first + filler + b"\n" + last)
    recs, _, stats = scan(str(d), Query(since_ns=T0 - HOUR, limit=5))
    assert [(r.run_id, r.to_json()["outcome"]) for r in recs] == [(2, "missed"), (1, "success")]
    assert stats.files == 2  # the older file was read


def test_a_closing_line_stepped_back_past_the_range_read_is_still_found(
        tmp_path: Path) -> None:
    """j/1 opens on T0's day; the clock steps back three days and it closes there, in a
    file older than `--since` and its day of slack. Its closed line is the highest seq,
    so the files read hold no gap to betray it: the scan must still see that seqs lie
    beyond them, read the older files, and show the run closed."""
    d = tmp_path / "ledger"
    clock = Clock(T0 - 5 * DAY)
    led = RunLedger(str(d), clock=clock)
    led.append({"type": "decided", "harness": "j", "run_id": 9, "outcome": "missed"})
    clock.ns = T0
    led.append({"type": "opened", "harness": "j", "run_id": 1, "trigger": "manual",
                "started_at": format_ns(T0)})
    clock.ns = T0 - 3 * DAY
    led.append({"type": "closed", "harness": "j", "run_id": 1, "outcome": "success"})
    led.close()
    for q in (Query(since_ns=T0 - HOUR, limit=5),
              Query(since_ns=T0 - HOUR, outcomes=frozenset({"success"}), limit=5)):
        recs, oldest, _ = scan(str(d), q)
        assert ([(r.harness, r.run_id, r.to_json()["outcome"]) for r in recs], oldest) == (
            [("j", 1, "success")], 2)
    recs, _, _ = scan(str(d), Query(since_ns=T0 - HOUR, outcomes=frozenset({"running"})))
    assert recs == []
