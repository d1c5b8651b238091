"""The boot's fold of the window (load.py, fold.Merge) against the line-by-line fold it
replaced: `Index.apply` of every line `decode_line` reads, in file order. The two must
leave the same index (records in the same order, each the same fold down to the field
order and the seqs that set each field, the same `max_ids`), skip the same lines and
find the same highest seq, on ledgers as messy as damage and hand edits make them; and a
whole boot (recovery, backfill, REQ-7's closing, prune) must come out the same both ways.
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path
from typing import Any

import pytest

import harness.ledger.runledger as runledger_mod
from harness.ledger.dayfiles import iter_chunks
from harness.ledger.fold import Frozen, Merge, Record
from harness.ledger.index import Index
from harness.ledger.load import Loaded, load_files
from harness.ledger.reader import ReadStats, decode_line, head_blocks, heads
from harness.supervisor.history import reconcile
from ledgertools import DAY, HOUR, T0, Clock, OpenLedger, day

# --- the reference: the boot's window pass as it was -------------------------------------


def reference_load(index: Index, paths: list[str]) -> Loaded:
    """Every line `decode_line` reads, folded one by one with `Index.apply`."""
    out = Loaded()
    for path in paths:
        for _first, lines, _torn in iter_chunks(path, gone_ok=True):
            for raw in lines:
                obj = decode_line(raw)
                if obj is None:
                    out.skipped += 1
                    continue
                index.apply(obj)
                if obj["seq"] > out.top_seq:
                    out.top_seq, out.top_path = obj["seq"], path
    return out


def index_state(index: Index) -> tuple[Any, ...]:
    """All an index holds, in order: each record's type and every slot (a live record's
    fields and field seqs as ordered items), the floors and the highest run ids."""
    recs: list[Any] = []
    for key, r in index.records.items():
        if isinstance(r, Frozen):
            recs.append((key, "frozen", [(s, getattr(r, s)) for s in Frozen.__slots__]))
        else:
            assert isinstance(r, Record), (key, r)
            recs.append((key, "live", [
                (s, list(getattr(r, s).items()) if s in ("fields", "_field_seq")
                 else getattr(r, s)) for s in Record.__slots__]))
    return (recs, list(index.max_ids.items()), index.floor, index.floor_at,
            dict(index.harness_floor))


# --- messy day files -----------------------------------------------------------------------

_VALUES: list[Any] = ["x", "success", "failed", 5, 0, 1.5, -2, None, True, False,
                      {"input": 1, "output": 2}, [1, "a"], [], {}, "2026-11-01T00:00:00Z",
                      "caf\u00e9 \u4e2d"]
_FIELDS = ["kind", "outcome", "trigger", "model", "tokens", "model_calls", "started_at",
           "ended_at", "log", "cost_usd", "reason", "exit_code", "sessions", "zz_unknown"]


def _line_text(rng: random.Random, seq: int, key: tuple[str, int], at: str) -> bytes:
    obj: dict[str, Any] = {"v": 1, "seq": seq, "harness": key[0], "run_id": key[1], "at": at,
                           "type": rng.choice(["opened", "updated", "updated", "closed",
                                               "decided"])}
    for k in rng.sample(_FIELDS, rng.randint(0, 6)):
        obj[k] = rng.choice(_VALUES)
    if rng.random() < 0.7:
        obj.update(prev="0" * 64, hash="1" * 64)
    keys = list(obj)
    if rng.random() < 0.75:
        keys.sort()  # as the writer writes them; else as a hand edit may leave them
    else:
        rng.shuffle(keys)
    text = ("{" + ",".join(json.dumps(k, ensure_ascii=False) + ":"
                           + json.dumps(obj[k], ensure_ascii=False) for k in keys)
            + "}").encode()
    return _spoil(rng, text, seq)


def _spoil(rng: random.Random, text: bytes, seq: int) -> bytes:
    """Now and then, the damage and edits readers must take as every reader does."""
    x = rng.random()
    if x > 0.25:
        return text
    damage: list[bytes] = [
        text[: rng.randint(0, len(text) - 1)],  # cut short
        b"",  # blank
        b"[1,2]",  # JSON, no object
        text + text,  # two objects
        text.replace(b'"seq":%d' % seq, b'"seq":%d,"seq":%d' % (seq + 3, seq), 1),
        text.replace(b'"seq":%d' % seq, b'"seq":"x","seq":%d' % seq, 1),
        text[:-1] + b',"kind":null}',
        text[:-1] + b',"outcome":null}',
        text[:-1] + b',"outcome":7}',
        text[:-1] + b',"cost_usd":1e999}',
        text[:-1] + b',"tokens":{"input":1e999,"output":2}}',
        text[:-1] + b',"zz":1e999}',
        text[:-1] + b',"zz":"a\xffb"}',  # no UTF-8, where a reader may skip unread
        text[:-1] + b',"log":"\xc3"}',
        text[:-1] + b',"zz":"\\ud800"}',
        text[:-1] + b',"zz":' + b"9" * 4400 + b"}",  # an integer too long to decode
        text[:-1] + b',"zz":' + b"[" * 600 + b"]" * 600 + b"}",  # nested too deep
        text[:-1] + b',"zz":"' + b"y" * 17_000 + b'"}',  # past 16 KiB
        text[:-1] + b',"zz":"' + b"y" * 3000 + b'"}',  # long, and fine
        text.replace(b'"run_id":', b'"run_id":true,"x":', 1),
        text.replace(b'"harness":', b'"harness":"","x":', 1),
    ]
    return rng.choice(damage)


def messy_files(directory: Path, rng: random.Random, n: int) -> list[str]:
    """Three day files of `n` lines of a few runs: seqs mostly rising, sometimes back
    (a clock step, an edit) or repeated, lines after a run's closing one, and the damage
    `_spoil` makes; each file may end in a torn fragment or a line without its newline."""
    keys = [("a", i) for i in range(1, 7)] + [("b", i) for i in range(1, 4)] + [("c", 1)]
    seq = 0
    texts = []
    for _ in range(n):
        seq = max(1, seq + (1 if rng.random() > 0.1 else rng.choice([-4, -1, 0, 3])))
        at = f"2026-11-0{rng.randint(1, 3)}T{rng.randint(0, 23):02d}:00:00.000000000Z"
        texts.append(_line_text(rng, seq, rng.choice(keys), at))
    cut = sorted(rng.sample(range(n + 1), 2))
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, part in enumerate((texts[: cut[0]], texts[cut[0]: cut[1]], texts[cut[1]:])):
        data = b"".join(t + b"\n" for t in part)
        if data and rng.random() < 0.2:
            data = data[:-1]  # the last line lacks only its newline
        if rng.random() < 0.15:
            data += b'{"v":1,"se'  # a crash's fragment
        p = directory / f"2026-11-0{i + 1}.jsonl"
        p.write_bytes(data)
        paths.append(str(p))
    return paths


@pytest.mark.parametrize("seed", range(400))
def test_the_window_folds_as_line_by_line(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    paths = messy_files(tmp_path, rng, rng.randint(1, 90))
    old, new = Index(window_ns=DAY), Index(window_ns=DAY)
    want = reference_load(old, paths)
    got = load_files(new, paths)
    assert got == want
    assert index_state(new) == index_state(old)


def test_a_record_folded_from_files_goes_on_like_one_folded_line_by_line(
    tmp_path: Path
) -> None:
    """What the index does next with a record the boot folded (a late line of a frozen
    record, an update to an open one) is what it does with one folded line by line."""
    rng = random.Random(7)
    paths = messy_files(tmp_path, rng, 80)
    old, new = Index(window_ns=DAY), Index(window_ns=DAY)
    reference_load(old, paths)
    load_files(new, paths)
    for _ in range(200):
        got = decode_line(_line_text(random.Random(rng.random()), rng.randint(1, 120),
                                     rng.choice(list(old.records)), "2026-11-03T09:00:00Z"))
        if got is None:
            continue
        line = {k: v for k, v in got.items() if v is not None}
        a, b = old.apply(dict(line), live=True), new.apply(dict(line), live=True)
        assert (a.to_json(), a.seq, a.last_seq) == (b.to_json(), b.seq, b.last_seq)
    assert index_state(new) == index_state(old)


def test_a_merge_is_the_fold_of_its_lines() -> None:
    """`Merge` of in-order lines of one run (record fields alone, no null) against
    `Record.apply` of the same lines, then frozen as the index freezes a closed one."""
    rng = random.Random(3)
    for _ in range(500):
        lines = []
        seq = rng.randint(1, 9)
        for i in range(rng.randint(1, 6)):
            seq += rng.choice([0, 1, 1, 2])
            fields = {k: rng.choice([v for v in _VALUES if v is not None])
                      for k in rng.sample(_FIELDS[:-1], rng.randint(0, 5))}
            typ = rng.choice(["opened", "updated", "closed" if i else "decided"])
            lines.append((fields, seq, typ, f"2026-11-0{rng.randint(1, 3)}T0{i}:00:00Z"))
        ref = Record("h", 1)
        for fields, s, typ, at in lines:
            ref.apply({**fields, "seq": s, "type": typ, "at": at, "harness": "h",
                       "run_id": 1})
        m = Merge(dict(lines[0][0]), *lines[0][1:])
        for fields, s, typ, at in lines[1:]:
            m.add(dict(fields), s, typ, at)
        got = m.frozen("h", 1) if ref.closed else m.record("h", 1)
        want = Frozen(ref) if ref.closed else ref
        assert [(s, getattr(got, s)) for s in type(want).__slots__] == [
            (s, getattr(want, s)) for s in type(want).__slots__]
        if ref.closed:  # its fields, dated by the lines that set them
            assert (list(got.thaw().fields.items()), got.thaw()._field_seq) == (
                list(ref.fields.items()), ref._field_seq)


def test_head_blocks_pairs_each_envelope_with_its_line(tmp_path: Path) -> None:
    """The lines `head_blocks` yields beside the envelopes are theirs, one for one, and it
    keeps and counts what `heads` does."""
    rng = random.Random(11)
    for path in messy_files(tmp_path, rng, 300):
        a, b = ReadStats(), ReadStats()
        pairs = [(h, raw) for got, raws in head_blocks(path, a)
                 for h, raw in zip(got, raws, strict=True)]
        assert [h for h, _ in pairs] == [h for block in heads(path, b) for h in block]
        assert (a.lines, a.skipped, a.torn) == (b.lines, b.skipped, b.torn)
        for h, raw in pairs:
            obj = decode_line(raw)
            assert obj is not None
            assert (obj["seq"], obj["harness"], obj["run_id"]) == (h.seq, h.harness, h.run_id)


# --- a whole boot, both ways -------------------------------------------------------------


def _messy_ledger(d: Path, open_ledger: OpenLedger) -> None:
    """A ledger a daemon wrote over ten days, then damaged: runs closed, open (one for
    ever, one a crash left), decided; a clock stepped back across midnight; partial
    records (lines whose opened line is in no file); a torn tail, unparseable lines, a
    whole last line without its newline, a line moved below later ones."""
    clock = Clock(T0 - 10 * DAY)
    led = open_ledger(d, clock=clock)
    led.append({"type": "opened", "harness": "res", "run_id": 1, "kind": "resident"})
    for i in range(1, 40):
        clock.ns = T0 - 10 * DAY + i * 6 * HOUR
        name = ("a", "b", "c")[i % 3]
        led.append({"type": "opened", "harness": name, "run_id": i, "kind": "oneshot",
                    "trigger": "schedule"})
        led.append({"type": "updated", "harness": "res", "run_id": 1, "model_calls": i})
        if i % 5:
            led.append({"type": "updated", "harness": name, "run_id": i,
                        "tokens": {"input": i, "output": 2 * i}})
            led.append({"type": "closed", "harness": name, "run_id": i,
                        "outcome": "success" if i % 4 else "failed", "exit_code": 0})
        else:
            led.append({"type": "decided", "harness": "d", "run_id": i, "outcome": "missed"})
    # A clock stepped back across midnight: later seqs in the day before.
    clock.ns = T0 - DAY - HOUR
    led.append({"type": "opened", "harness": "a", "run_id": 90, "kind": "oneshot"})
    clock.ns = T0 - 2 * DAY + 23 * HOUR
    led.append({"type": "closed", "harness": "a", "run_id": 90, "outcome": "success"})
    clock.ns = T0 - 2 * HOUR
    led.append({"type": "opened", "harness": "crashed", "run_id": 1, "kind": "oneshot",
                "log": str(d.parent / "no-such.log")})
    led.close()
    files = sorted(d.glob("*.jsonl"))
    # Partial records: the opened lines of b/5 and c/6 edited away.
    for p in files:
        kept = [x for x in p.read_bytes().split(b"\n")[:-1]
                if not (b'"type":"opened"' in x and (b'"harness":"b","hash"' in x
                                                     or b'"run_id":6,' in x))]
        p.write_bytes(b"".join(x + b"\n" for x in kept))
    mid = files[len(files) // 2]
    data = mid.read_bytes().split(b"\n")[:-1]
    data.insert(2, b'{"seq":"x"}')
    data.insert(4, b"not json at all")
    data.insert(5, data[-1])  # a line copied below its own place
    mid.write_bytes(b"".join(x + b"\n" for x in data))
    files[-1].write_bytes(files[-1].read_bytes() + b'{"v":1,"seq":99')  # torn
    files[-2].write_bytes(files[-2].read_bytes()[:-1])  # whole, no newline


def _boot(d: Path, open_ledger: OpenLedger, now: int) -> tuple[Any, ...]:
    led = open_ledger(d, clock=Clock(now), max_bytes=1 << 30)
    state = (index_state(led._index), led.writer.head, led.stats().skipped,
             led.stats().torn, led.open_records())
    closed = reconcile(led, now)
    res = led.prune()
    after = (index_state(led._index), closed, res.deleted, led.stats().next_seq)
    led.close()
    files = {p.name: p.read_bytes() for p in sorted(d.glob("*"))}
    return state, after, files


@pytest.mark.parametrize("window", [3 * DAY, 7 * DAY, 30 * DAY])
def test_a_boot_comes_out_as_the_line_by_line_boot(
    tmp_path: Path, open_ledger: OpenLedger, monkeypatch: pytest.MonkeyPatch, window: int
) -> None:
    """The same damaged ledger booted twice (two copies): with the window folded by
    load.py, and by the line-by-line reference. Memory, the next seq, the chain head,
    what is skipped and torn, the runs REQ-7 closes, what the prune keeps, and every
    byte then on disk agree."""
    d = tmp_path / "ledger"
    _messy_ledger(d, open_ledger)
    ref = tmp_path / "reference"
    shutil.copytree(d, ref)
    monkeypatch.setattr(runledger_mod, "WINDOW_NS", window)
    new = _boot(d, lambda p, **kw: open_ledger(p, window_ns=window, **kw), T0)
    monkeypatch.setattr(runledger_mod, "load_files", reference_load)
    old = _boot(ref, lambda p, **kw: open_ledger(p, window_ns=window, **kw), T0)
    assert new == old
    assert new[1][1], "REQ-7 closed the runs the crash left open"


def test_a_commit_during_the_refold_keeps_a_record_whose_lines_all_went(
    tmp_path: Path, open_ledger: OpenLedger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A record whose every line a prune deleted, updated while the refold reads the files
    (its lock released), is kept from that update on, as a record partial from then on;
    one not updated goes."""
    d = tmp_path / "ledger"
    clock = Clock(T0 - 40 * DAY)
    led = open_ledger(d, clock=clock, retention_ns=30 * DAY)
    for name in ("gone", "kept"):
        led.append({"type": "opened", "harness": name, "run_id": 1, "kind": "oneshot"})
        led.append({"type": "closed", "harness": name, "run_id": 1, "outcome": "success"})
    clock.ns = T0
    real = led._lines_of

    def refolding(*a: Any, **kw: Any) -> Any:
        led.append({"type": "updated", "harness": "kept", "run_id": 1, "model_calls": 3})
        yield from real(*a, **kw)

    monkeypatch.setattr(led, "_lines_of", refolding)
    res = led.prune()
    monkeypatch.undo()
    assert (res.deleted, res.error) == ([day(T0 - 40 * DAY)], None)
    assert led.get("gone", 1) is None
    kept = led.get("kept", 1)
    assert kept is not None and kept["model_calls"] == 3 and kept["seq"] == 5
