"""End-to-end tests of `harness ledger verify` on the run ledger's hash chain (DESIGN.md §4).

Ledgers are written through `RunLedger` (or sealed by hand to the §4 contract, independently
of the engine), then damaged the ways §4 lists — an edited, removed, duplicated or reordered
line, a line stripped of its chain fields, a wrong CHAIN — and the real CLI must exit 2 naming
the seq and ``YYYY-MM-DD.jsonl:LINE`` of the first broken line. Torn fragments (REQ-2) are
not part of the chain: they are reported, and the ledger still verifies (exit 0). No ledger
is exit 1. Verify is read-only.
"""

from __future__ import annotations

import gc
import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conftest import World
from harness.ledger import RunLedger
from harness.ledger import verify as verify_module
from harness.timefmt import format_ns, parse_ns
from ledgertools import EDITED, ZERO_HASH, chain_hash, ref_canonical, seal, write_day_file

DAY = 86_400 * 1_000_000_000
DAY1 = "2025-11-03"
FILE1 = f"{DAY1}.jsonl"
# -- helpers -------------------------------------------------------------------------------


def decided(run_id: int, at: str, harness: str = "nightly") -> dict[str, Any]:
    return {"type": "decided", "harness": harness, "run_id": run_id, "at": at,
            "kind": "oneshot", "trigger": "schedule", "outcome": "skipped",
            "reason": "overlap", "started_at": at}


def seed(world: World, lines: list[dict[str, Any]], **opts: Any) -> RunLedger:
    """Append `lines` through the real writer, synced; the caller closes (or prunes first)."""
    led = RunLedger(str(world.ledger), **opts)
    try:
        for line in lines:
            led.append(line, sync=True)
    except BaseException:
        led.close()
        raise
    return led


def one_day(world: World, n: int = 6) -> list[bytes]:
    """`n` decided lines (seq 1…n) in one day file; returns the file's lines."""
    seed(world, [decided(i, f"{DAY1}T09:00:{i:02d}Z") for i in range(1, n + 1)]).close()
    return lines_of(world.ledger / FILE1)


def lines_of(path: Path) -> list[bytes]:
    data = path.read_bytes()
    assert data.endswith(b"\n")
    return data.split(b"\n")[:-1]


def verify(world: World, *args: str) -> subprocess.CompletedProcess[str]:
    res = world.harness("ledger", "verify", *args)
    assert "Traceback" not in res.stderr, res.stderr
    return res


def verify_json(world: World) -> tuple[int, dict[str, Any]]:
    res = verify(world, "--json")
    return res.returncode, json.loads(res.stdout)


def ok_text(lines: int, files: int, head_seq: int, head: str, anchor: str = "genesis",
            torn: str = "", behind: int = 0) -> str:
    out = (f"ok: {lines} lines in {files} file(s) verify from {anchor} to seq {head_seq} "
           f"(head {head})")
    if behind:
        out += f"; {behind} line(s) at or before CHAIN checked on their own"
    return out + (f"; {torn}" if torn else "") + "\n"


def hash_of(line: bytes) -> str:
    h = json.loads(line)["hash"]
    assert isinstance(h, str)
    return h


def assert_broken(world: World, seq: int, where: str, reason: str) -> None:
    """Exit 2; stderr names seq and file:line; --json gives seq, file, line and reason."""
    res = verify(world)
    assert res.returncode == 2, res
    assert res.stdout == ""
    assert res.stderr == f"harness: ledger chain broken at seq {seq} ({where}): {reason}\n"
    code, out = verify_json(world)
    assert code == 2
    file, line = where.rsplit(":", 1)
    assert out["ok"] is False
    assert (out["seq"], out["file"], out["line"], out["reason"]) == (seq, file, int(line), reason)


def snapshot(root: Path) -> dict[str, tuple[str, int, int]]:
    out: dict[str, tuple[str, int, int]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames:
            st = os.stat(os.path.join(dirpath, name))
            out[os.path.join(dirpath, name)] = ("dir", st.st_mode, st.st_mtime_ns)
        for name in filenames:
            p = os.path.join(dirpath, name)
            st = os.stat(p)
            with open(p, "rb") as f:
                out[p] = (hashlib.sha256(f.read()).hexdigest(), st.st_mode, st.st_mtime_ns)
    return out


REMOVED = "prev does not match the hash of the line before (seq {}): " \
          "a line was removed, inserted or edited"
REORDERED = "seq {} does not follow seq {} (duplicated or reordered line)"
NO_CHAIN = "line has no prev/hash chain fields"
SKIPPED = "seq {} follows seq {}: a seq is missing (each line's is one more than the last)"


# -- a good ledger ---------------------------------------------------------------------------


def test_ok_ledger_names_the_line_count(world: World) -> None:
    lines = one_day(world)
    before = snapshot(world.root)
    res = verify(world)
    assert res.returncode == 0, res.stderr
    assert res.stdout == ok_text(6, 1, 6, hash_of(lines[-1]))
    assert res.stderr == ""
    code, out = verify_json(world)
    assert code == 0
    assert out["ok"] is True
    assert out["entry_count"] == 6
    assert out["head_hash"] == hash_of(lines[-1])
    assert out["head_seq"] == 6
    assert out["torn_tail"] is False
    assert out["anchor"] == "genesis"
    assert "seq" not in out and "reason" not in out
    assert snapshot(world.root) == before  # read-only


def test_json_names_every_field(world: World) -> None:
    """--json is the whole result: counts, torn fragments, head, anchor and the files
    that are not day files; a break adds where and why."""
    lines = one_day(world, 3)
    write_day_file(world.ledger / FILE1, lines, tail=lines[-1][:40])
    (world.ledger / "notes.txt").write_text("not a day file")
    code, out = verify_json(world)
    assert code == 0
    assert out == {"ledger": str(world.ledger), "ok": True, "lines": 3, "entry_count": 3,
                   "files": 1, "torn": 1, "torn_tail": True, "torn_at": [f"{FILE1}:4"],
                   "head_seq": 3, "head_hash": hash_of(lines[2]), "anchor": "genesis",
                   "behind_anchor": 0, "strays": ["notes.txt"]}
    write_day_file(world.ledger / FILE1, [lines[0], lines[2]])
    code, out = verify_json(world)
    assert code == 2
    assert out == {"ledger": str(world.ledger), "ok": False, "lines": 1, "entry_count": 1,
                   "files": 1, "torn": 0, "torn_tail": False, "torn_at": [],
                   "head_seq": 1, "head_hash": hash_of(lines[0]), "anchor": "genesis",
                   "behind_anchor": 0, "strays": ["notes.txt"], "seq": 3, "file": FILE1, "line": 2,
                   "reason": REMOVED.format(1)}


def test_plain_verify_names_what_it_passed_over(world: World) -> None:
    """A directory or a FIFO under a day file's name is never read: the plain report
    said only "ok" (the newest day's lines gone unseen), where `runs` warned. It now
    says which names it passed over, on stderr, broken chain or not; exit codes stand."""
    lines = one_day(world, 3)
    (world.ledger / "2026-01-02.jsonl").mkdir()
    os.mkfifo(world.ledger / "2026-01-03.jsonl")
    (world.ledger / "notes.txt").write_text("not a day file")
    warned = ("harness: ignored file(s) that are not day files: 2026-01-02.jsonl, "
              "2026-01-03.jsonl, notes.txt\n")
    res = verify(world)
    assert (res.returncode, res.stdout, res.stderr) == (
        0, ok_text(3, 1, 3, hash_of(lines[2])), warned)
    write_day_file(world.ledger / FILE1, [lines[0], lines[2]])
    res = verify(world)
    assert (res.returncode, res.stdout) == (2, "")
    assert res.stderr.startswith(warned + "harness: ledger chain broken at seq 3 ")
    assert verify(world, "--json").stderr == ""  # --json lists them under "strays"


def test_engine_lines_follow_the_documented_chain(world: World) -> None:
    """What RunLedger wrote is exactly §4's chain, so a hand-written ledger can match it."""
    lines = one_day(world, 3)
    prev = ZERO_HASH
    for i, raw in enumerate(lines, start=1):
        obj = json.loads(raw)
        assert (obj["seq"], obj["prev"]) == (i, prev)
        assert raw == ref_canonical(obj)
        assert obj["hash"] == chain_hash(obj)
        prev = obj["hash"]


def test_hand_sealed_ledger_verifies(world: World) -> None:
    world.ledger.mkdir(parents=True, mode=0o700)
    prev, out = ZERO_HASH, []
    for i in range(1, 5):
        raw, prev = seal({"v": 1, **decided(i, f"{DAY1}T10:00:0{i}.000000000Z")}, i, prev)
        out.append(raw)
    write_day_file(world.ledger / FILE1, out)
    res = verify(world)
    assert (res.returncode, res.stdout) == (0, ok_text(4, 1, 4, prev))


def test_non_canonical_but_unedited_line_still_verifies(world: World) -> None:
    """Whitespace and key order are not content: the slow path re-encodes and matches."""
    lines = one_day(world)
    obj = json.loads(lines[2])
    lines[2] = json.dumps(dict(reversed(list(obj.items()))), indent=None).encode()
    assert lines[2] != ref_canonical(obj)
    write_day_file(world.ledger / FILE1, lines)
    res = verify(world)
    assert (res.returncode, res.stdout) == (0, ok_text(6, 1, 6, hash_of(lines[-1])))


# -- a line in another spelling than canonical (DESIGN.md §2/§4) ------------------------------
# The chain hash is of the canonical bytes. A line in another spelling whose hash was taken
# over its own bytes matches no conformant verifier's hash: it is a break, wherever it lies
# (the first batch a file checks line by line, a later batch, a day file's first line, a
# merge). Spelled so but hashed canonically, its content is intact: it verifies.

def _spelled(obj: dict[str, Any], spelling: str) -> bytes:
    """`obj` (no hash) in `spelling`, not canonical, holding the same JSON value; a
    `"hash"` member is to go before `"kind"`, where canonical order puts it."""
    extra = {"float 1.0e0": {"cost_usd": 1.0}, "float 0.00001": {"cost_usd": 1e-05},
             "escaped e-acute": {"reason": "d\u00e9j\u00e0 vu"}, "escaped slash": {"reason": "a/b"},
             "negative zero": {"exit_code": 0}, "nested members swapped": {
                 "tokens": {"input": 5, "output": 7}},
             "uppercase hex escape": {"reason": "a\x1fb"}}.get(spelling, {})
    canon = ref_canonical({**obj, **extra})
    edits = {
        "members swapped": (b'"run_id":%d,"seq":%d' % (obj["run_id"], obj["seq"]),
                            b'"seq":%d,"run_id":%d' % (obj["seq"], obj["run_id"])),
        "float 1.0e0": (b'"cost_usd":1.0,', b'"cost_usd":1.0e0,'),
        "float 0.00001": (b'"cost_usd":1e-05,', b'"cost_usd":0.00001,'),
        "escaped e-acute": ("é".encode(), b"\\u00e9"),
        "escaped slash": (b"a/b", b"a\\/b"),
        "space after a colon": (b'"v":1', b'"v": 1'),
        "negative zero": (b'"exit_code":0,', b'"exit_code":-0,'),
        "duplicate member": (b'"v":1}', b'"v":1,"v":1}'),
        "nested members swapped": (b'{"input":5,"output":7}', b'{"output":7,"input":5}'),
        "uppercase hex escape": (b"a\\u001fb", b"a\\u001Fb"),
    }
    old, new = edits[spelling]
    assert canon.count(old) == 1, (spelling, canon)
    out = canon.replace(old, new)
    assert json.loads(out) == {**obj, **extra}
    return out


SPELLINGS = ["members swapped", "float 1.0e0", "float 0.00001", "escaped e-acute",
             "escaped slash", "space after a colon", "negative zero", "duplicate member",
             "nested members swapped", "uppercase hex escape"]


def _chain_with_spelled(n: int, at: int, spelling: str, own_bytes: bool,
                        day_of: Callable[[int], str] = lambda seq: DAY1
                        ) -> tuple[dict[str, list[bytes]], str]:
    """`n` hand-sealed decided lines by day file, the one of seq `at` in `spelling` and
    sealed over its own bytes (`own_bytes`) or over its canonical ones: (files, head)."""
    files: dict[str, list[bytes]] = {}
    prev = ZERO_HASH
    for seq in range(1, n + 1):
        obj = {"v": 1, **decided(seq, f"{day_of(seq)}T10:{seq // 60 % 60:02d}:{seq % 60:02d}Z"),
               "seq": seq, "prev": prev}
        if seq == at:
            body = _spelled(obj, spelling)
            digest = (hashlib.sha256(body).hexdigest() if own_bytes
                      else chain_hash(json.loads(body)))
            raw = body.replace(b'"kind":', b'"hash":"%s","kind":' % digest.encode(), 1)
            assert raw != ref_canonical(json.loads(raw))
        else:
            raw, digest = seal({k: v for k, v in obj.items() if k not in ("seq", "prev")},
                               seq, prev)
        files.setdefault(f"{day_of(seq)}.jsonl", []).append(raw)
        prev = digest
    return files, prev


def _write_files(world: World, files: dict[str, list[bytes]]) -> None:
    for name, lines in files.items():
        write_day_file(world.ledger / name, lines)


@pytest.mark.parametrize("spelling", SPELLINGS)
@pytest.mark.parametrize(("n", "at"), [(6, 3), (2000, 1500)], ids=["first-batch", "later-batch"])
def test_a_line_hashed_over_its_own_non_canonical_bytes_is_a_break(
        world: World, spelling: str, n: int, at: int) -> None:
    files, _ = _chain_with_spelled(n, at, spelling, own_bytes=True)
    _write_files(world, files)
    assert_broken(world, at, f"{FILE1}:{at}", EDITED)
    _, out = verify_json(world)
    assert (out["entry_count"], out["head_seq"]) == (at - 1, at - 1)
    assert out["head_hash"] == hash_of(files[FILE1][at - 2])


@pytest.mark.parametrize("spelling", ["members swapped", "float 0.00001", "escaped e-acute"])
def test_a_day_file_opening_with_such_a_line_is_a_break(world: World, spelling: str) -> None:
    """A day file's first line is judged on its own and stitched to the file before."""
    day2 = "2025-11-04"
    files, _ = _chain_with_spelled(6, 4, spelling, own_bytes=True,
                                   day_of=lambda seq: DAY1 if seq < 4 else day2)
    _write_files(world, files)
    assert_broken(world, 4, f"{day2}.jsonl:1", EDITED)


@pytest.mark.parametrize("spelling", ["members swapped", "float 1.0e0", "space after a colon"])
def test_such_a_line_is_a_break_in_a_merge_too(world: World, spelling: str) -> None:
    """A clock jump: seq 2 and 3 in the earlier day's file, the rest in the later one's;
    the files are followed at once, in seq order."""
    later = "2025-11-04"
    files, _ = _chain_with_spelled(5, 3, spelling, own_bytes=True,
                                   day_of=lambda seq: DAY1 if seq in (2, 3) else later)
    _write_files(world, files)
    assert_broken(world, 3, f"{FILE1}:2", EDITED)


@pytest.mark.parametrize("spelling", SPELLINGS)
@pytest.mark.parametrize(("n", "at"), [(6, 3), (2000, 1500)], ids=["first-batch", "later-batch"])
def test_a_line_in_another_spelling_hashed_canonically_verifies(
        world: World, spelling: str, n: int, at: int) -> None:
    files, head = _chain_with_spelled(n, at, spelling, own_bytes=False)
    _write_files(world, files)
    res = verify(world)
    assert (res.returncode, res.stdout, res.stderr) == (0, ok_text(n, 1, n, head), "")
    code, out = verify_json(world)
    assert (code, out["ok"], out["entry_count"], out["head_hash"]) == (0, True, n, head)


def test_a_large_canonical_ledger_of_every_kind_of_value_verifies(world: World) -> None:
    """2,500 canonical lines through several batches, with what the proof of canonical
    form must take as it lies: floats (each as float.__repr__ spells it), nested objects
    and lists, escapes canonical JSON makes, non-ASCII text."""
    floats = [0.1, 1e-05, 1e16, 2.5, -0.0, 123456.789, 5e-324, 0.0]
    prev, lines = ZERO_HASH, []
    for seq in range(1, 2501):
        at = f"{DAY1}T11:{seq // 60 % 60:02d}:{seq % 60:02d}Z"
        obj: dict[str, Any] = {"v": 1, **decided(seq, at)}
        if seq % 3 == 0:
            obj.update(type="closed", outcome="failed", cost_usd=floats[seq % len(floats)],
                       exit_code=-seq, reason='quote " back\\slash \x01 tab\t é ✓ \u2028',
                       tokens={"input": seq, "output": 2 * seq, "cache_read": 0},
                       models=[{"model": "m", "provider": "p", "output_tokens": seq}],
                       errors={"Timeout": 2, "E": 1})
        elif seq % 3 == 1:
            obj["cost_usd"] = seq
        raw, prev = seal(obj, seq, prev)
        lines.append(raw)
    world.ledger.mkdir(parents=True, mode=0o700)
    write_day_file(world.ledger / FILE1, lines)
    res = verify(world)
    assert (res.returncode, res.stdout, res.stderr) == (0, ok_text(2500, 1, 2500, prev), "")


def test_a_line_padded_past_16_kib_breaks_the_chain(world: World) -> None:
    """Spaces keep the hashed value, so the line re-encodes to its hash; but past 16 KiB
    every reader skips it, and the run they fold is not the one that was hashed."""
    lines = one_day(world)
    lines[2] = b"{" + b" " * 17_000 + ref_canonical(json.loads(lines[2]))[1:]
    write_day_file(world.ledger / FILE1, lines)
    res = world.harness("runs", "--json", "--since", "3000d")
    assert [r["run_id"] for r in json.loads(res.stdout)] == [6, 5, 4, 2, 1]
    assert_broken(world, 3, f"{FILE1}:3",
                  "line is over 16 KiB or nested deeper than 512: every reader skips it "
                  "(it was edited)")


def _sealed_with(extra: Any, at: int, n: int = 4) -> tuple[list[bytes], str]:
    """`n` hand-sealed decided lines, the one of seq `at` carrying the unknown field
    `x_extra` = `extra`, its hash over its own canonical bytes: (lines, head hash)."""
    prev, out = ZERO_HASH, []
    for i in range(1, n + 1):
        obj = {"v": 1, **decided(i, f"{DAY1}T10:00:0{i}.000000000Z")}
        if i == at:
            obj["x_extra"] = extra
        raw, prev = seal(obj, i, prev)
        out.append(raw)
    return out, prev


def _padded_to(size: int, at: int) -> list[bytes]:
    """Lines whose seq `at` is exactly `size` bytes without its newline."""
    lines, _ = _sealed_with("", at)
    lines, _ = _sealed_with("a" * (size - len(lines[at - 1])), at)
    assert len(lines[at - 1]) == size
    return lines


@pytest.mark.parametrize("at", [2, 4])
def test_a_line_sealed_over_16_kib_is_a_break_though_its_hash_holds(world: World,
                                                                      at: int) -> None:
    """No writer of the chain makes a line past REQ-1's 16 KiB, and every reader skips one:
    a line sealed so, its hash right, is a break where it lies (the fast path too)."""
    world.ledger.mkdir(parents=True, mode=0o700)
    write_day_file(world.ledger / FILE1, _padded_to(16 * 1024, at))
    res = world.harness("runs", "--json", "--since", "3000d")
    assert [r["run_id"] for r in json.loads(res.stdout)] == [r for r in (4, 3, 2, 1)
                                                               if r != at]
    assert_broken(world, at, f"{FILE1}:{at}",
                  "line is over 16 KiB or nested deeper than 512: every reader skips it "
                  "(it was edited)")


def test_a_line_of_16_kib_with_its_newline_is_within_the_limit(world: World) -> None:
    world.ledger.mkdir(parents=True, mode=0o700)
    lines = _padded_to(16 * 1024 - 1, 2)
    write_day_file(world.ledger / FILE1, lines)
    res = world.harness("runs", "--json", "--since", "3000d")
    assert [r["run_id"] for r in json.loads(res.stdout)] == [4, 3, 2, 1]
    res = verify(world)
    assert (res.returncode, res.stdout) == (0, ok_text(4, 1, 4, hash_of(lines[-1])))


def test_a_line_sealed_nested_past_the_readers_depth_is_a_break(world: World) -> None:
    deep: Any = 1
    for _ in range(600):
        deep = [deep]
    lines, _ = _sealed_with(deep, 3)
    world.ledger.mkdir(parents=True, mode=0o700)
    write_day_file(world.ledger / FILE1, lines)
    assert_broken(world, 3, f"{FILE1}:3",
                  "line is over 16 KiB or nested deeper than 512: every reader skips it "
                  "(it was edited)")


def test_no_ledger(world: World) -> None:
    res = verify(world)
    assert (res.returncode, res.stdout) == (1, "")
    assert res.stderr == f"harness: no run ledger at {world.ledger}\n"
    code, out = verify_json(world)
    assert code == 1
    assert (out["ok"], out["entry_count"], out["head_hash"], out["torn_tail"], out["seq"]) == (
        False, 0, None, False, None)
    assert not world.ledger.exists()
    assert not world.state.exists()


def test_empty_ledger_dir_is_no_ledger(world: World) -> None:
    world.ledger.mkdir(parents=True)
    (world.ledger / "notes.txt").write_text("not a day file")
    res = verify(world)
    assert res.returncode == 1
    assert res.stderr == f"harness: no run ledger at {world.ledger}\n"


@pytest.mark.parametrize("content", [b"", b'{"v":1,"seq":1,"ty'], ids=["empty", "fragment"])
def test_day_files_without_a_complete_line_are_no_ledger(world: World, content: bytes) -> None:
    """An empty day file, or one holding only a fragment a crash left, is no ledger
    either (exit 1), as the empty directory is; it used to print "ok: 0 lines ... to seq
    None (head None)" and exit 0."""
    world.ledger.mkdir(parents=True)
    (world.ledger / FILE1).write_bytes(content)
    res = verify(world)
    assert (res.returncode, res.stdout, res.stderr) == (
        1, "", f"harness: no run ledger at {world.ledger} (1 day file(s), no complete line)\n")
    code, out = verify_json(world)
    assert (code, out["ok"], out["lines"], out["head_seq"], out["reason"]) == (
        1, False, 0, None, f"no run ledger at {world.ledger} (1 day file(s), no complete line)")


def test_ledger_path_that_is_a_file(world: World) -> None:
    world.state.mkdir(parents=True)
    world.ledger.write_text("x")
    res = verify(world)
    assert res.returncode != 0
    assert str(world.ledger) in res.stderr
    assert "not a directory" in res.stderr


# -- breaks ------------------------------------------------------------------------------------


def _edit(lines: list[bytes], rehash: bool) -> None:
    obj = json.loads(lines[2])
    obj["outcome"] = "success"  # was skipped
    if rehash:
        obj["hash"] = chain_hash(obj)
    lines[2] = ref_canonical(obj)


def _strip(*keys: str) -> Callable[[list[bytes]], None]:
    def mutate(lines: list[bytes]) -> None:
        obj = json.loads(lines[2])
        for k in keys:
            del obj[k]
        lines[2] = ref_canonical(obj)
    return mutate


def _swap(lines: list[bytes]) -> None:
    lines[2], lines[3] = lines[3], lines[2]


MUTATIONS: dict[str, tuple[Callable[[list[bytes]], None], int, str, str]] = {
    # name: (mutation of lines 1..6, broken seq, where, reason)
    "edited value": (lambda ls: _edit(ls, rehash=False), 3, f"{FILE1}:3", EDITED),
    "edited value, line re-hashed": (lambda ls: _edit(ls, rehash=True), 4, f"{FILE1}:4",
                                     REMOVED.format(3)),
    "removed line": (lambda ls: ls.pop(2), 4, f"{FILE1}:3", REMOVED.format(2)),
    "removed first line": (lambda ls: ls.pop(0), 2, f"{FILE1}:1", REMOVED.format(0)),
    "duplicated line": (lambda ls: ls.insert(3, ls[2]), 3, f"{FILE1}:4", REORDERED.format(3, 3)),
    "duplicate appended at the end": (lambda ls: ls.append(ls[1]), 2, f"{FILE1}:7",
                                      REORDERED.format(2, 6)),
    "two lines swapped": (_swap, 4, f"{FILE1}:3", REMOVED.format(2)),
    "prev and hash deleted": (_strip("prev", "hash"), 3, f"{FILE1}:3", NO_CHAIN),
    "hash deleted": (_strip("hash"), 3, f"{FILE1}:3", NO_CHAIN),
    "prev deleted": (_strip("prev"), 3, f"{FILE1}:3", NO_CHAIN),
    # REQ-1: seq increases by one per line. A line sealed by hand that links to the head
    # but skips a seq is no line the writer wrote.
    "sealed line that skips a seq": (
        lambda ls: ls.append(seal(decided(7, f"{DAY1}T09:00:07Z"), 8, hash_of(ls[-1]))[0]),
        8, f"{FILE1}:7", SKIPPED.format(8, 6)),
}


@pytest.mark.parametrize("name", list(MUTATIONS))
def test_mutation_breaks_the_chain(world: World, name: str) -> None:
    mutate, seq, where, reason = MUTATIONS[name]
    lines = one_day(world)
    mutate(lines)
    write_day_file(world.ledger / FILE1, lines)
    before = snapshot(world.root)
    assert_broken(world, seq, where, reason)
    assert snapshot(world.root) == before


def _first(mutate: Callable[[dict[str, Any]], None]) -> Callable[[list[bytes]], None]:
    def apply(lines: list[bytes]) -> None:
        obj = json.loads(lines[0])
        mutate(obj)
        lines[0] = ref_canonical(obj)
    return apply


FIRST_LINE: dict[str, tuple[Callable[[list[bytes]], None], int | None, str]] = {
    # name: (mutation of line 1 of 6, broken seq, reason)
    "edited": (_first(lambda o: o.update(outcome="success")), 1, EDITED),
    "hash deleted": (_first(lambda o: o.pop("hash")), 1, NO_CHAIN),
    "seq not an integer": (_first(lambda o: o.update(seq="1")), None,
                           "complete line is not a ledger line (Expected `int`, got `str` - "
                           "at `$.seq`)"),
}


@pytest.mark.parametrize("name", list(FIRST_LINE))
def test_a_break_in_the_first_line_of_a_one_file_ledger(world: World, name: str) -> None:
    """The first line of the only day file has no line before it in the file: damage
    there breaks the chain at line 1, and nothing after it verifies (it is not skipped
    as if the file held no ledger line)."""
    mutate, seq, reason = FIRST_LINE[name]
    lines = one_day(world)
    mutate(lines)
    write_day_file(world.ledger / FILE1, lines)
    if seq is not None:
        assert_broken(world, seq, f"{FILE1}:1", reason)
    code, out = verify_json(world)
    assert (code, out["ok"], out["seq"], out["file"], out["line"], out["reason"]) == (
        2, False, seq, FILE1, 1, reason)
    assert (out["entry_count"], out["head_seq"], out["head_hash"]) == (0, None, None)


def test_a_line_with_a_number_out_of_range_is_an_edit(world: World) -> None:
    """1e400 is JSON no encoder of the chain writes: a complete line carrying it was edited."""
    lines = one_day(world)
    assert lines[2].startswith(b'{"')
    lines[2] = b'{"aaa":1e400,' + lines[2][1:]
    write_day_file(world.ledger / FILE1, lines)
    assert_broken(world, 3, f"{FILE1}:3", EDITED)


@pytest.mark.parametrize("escape", ["\\ud800", "\\udc00"], ids=["high", "low"])
@pytest.mark.parametrize("where", [1, 3, 6])
def test_a_line_edited_to_hold_a_lone_surrogate_escape_is_named(
        world: World, where: int, escape: str) -> None:
    """JSON allows a string to hold "\\ud800" alone; msgspec calls such a line cut short
    ("truncated") or malformed. Verify took the edited line for a crash's fragment and
    blamed the break on the next line, or on none when it was the last."""
    lines = one_day(world)
    lines[where - 1] = lines[where - 1].replace(
        b'"harness":"nightly"', b'"harness":"a' + escape.encode() + b'b"')
    write_day_file(world.ledger / FILE1, lines)
    reason = (f"complete line is not a ledger line (a string holds the lone surrogate "
              f"escape {escape}, which no writer of the chain makes: it was edited)")
    assert_broken(world, where, f"{FILE1}:{where}", reason)
    assert verify_json(world)[1]["torn_at"] == []
    # The last line missing its newline too is a whole line, not a torn tail.
    if where == 6:
        write_day_file(world.ledger / FILE1, lines[:-1], lines[-1])
        assert_broken(world, where, f"{FILE1}:{where}", reason)
        assert verify_json(world)[1]["torn_tail"] is False


def test_a_fragment_that_ends_in_a_surrogate_escape_stays_a_fragment(world: World) -> None:
    """What the stdlib is asked only after msgspec refused a line cannot make a crash's
    fragment whole: cut after "\\ud800" (or inside it), a line is still torn."""
    lines = one_day(world)
    edited_line = lines[2].replace(b'"harness":"nightly"', b'"harness":"a\\ud800b"')
    for cut in (edited_line.index(b"\\ud800") + 6, edited_line.index(b"\\ud800") + 3):
        write_day_file(world.ledger / FILE1, lines, edited_line[:cut])
        res = verify(world)
        assert res.returncode == 0, res.stderr
        assert verify_json(world)[1]["torn_at"] == [f"{FILE1}:7"]


def test_a_line_numbered_zero_or_below_is_a_break(world: World) -> None:
    """With no CHAIN no line is one a prune left behind: a forged line numbered 0 (or
    below) breaks the chain where it lies, inside a file or as its first line."""
    lines = one_day(world, 4)
    forged, _ = seal({"v": 1, **decided(9, f"{DAY1}T09:00:09.000000000Z")}, 0, ZERO_HASH)
    write_day_file(world.ledger / FILE1, [*lines[:2], forged, *lines[2:]])
    assert_broken(world, 0, f"{FILE1}:3", REORDERED.format(0, 2))
    forged, _ = seal({"v": 1, **decided(9, f"{DAY1}T09:00:09.000000000Z")}, -3, ZERO_HASH)
    write_day_file(world.ledger / FILE1, [forged, *lines])
    assert_broken(world, -3, f"{FILE1}:1", REORDERED.format(-3, 0))


def test_a_missing_ledger_does_not_verify(tmp_path: Path) -> None:
    res = verify_module.verify_run_ledger(str(tmp_path / "ledger"))
    assert (res.ok, res.exists, res.lines, res.files, res.head_seq, res.error) == (
        False, False, 0, 0, None, None)
    # Nothing was read: no fragment, no torn tail, no head, from genesis.
    assert res.to_json() == {"ok": False, "lines": 0, "entry_count": 0, "files": 0, "torn": 0,
                             "torn_tail": False, "torn_at": [], "head_seq": None,
                             "head_hash": None, "anchor": "genesis", "behind_anchor": 0,
                             "strays": []}
    assert not (tmp_path / "ledger").exists()


@pytest.mark.parametrize("enabled", [True, False], ids=["gc on", "gc off"])
def test_verify_leaves_the_garbage_collector_as_it_found_it(world: World, enabled: bool) -> None:
    """Verify pauses the collector while it reads (in the daemon too): afterwards it is on
    or off as before, after a file checked on its own and after a merge (a clock jump)."""
    one_day(world, 2)
    merged = world.root / "merged"
    world.ledger.rename(merged)
    clock_jump(world)
    was = gc.isenabled()
    try:
        for directory in (merged, world.ledger):
            if enabled:
                gc.enable()
            else:
                gc.disable()
            assert verify_module.verify_run_ledger(str(directory), parallel=False).ok
            assert gc.isenabled() is enabled
    finally:
        if was:
            gc.enable()
        else:
            gc.disable()


# -- torn fragments ------------------------------------------------------------------------------


@pytest.mark.parametrize("fragments", [10, 12])
def test_the_one_line_report_names_ten_fragments_and_counts_the_rest(
        world: World, fragments: int) -> None:
    """A day file with thousands of garbage lines would make the report a line of
    thousands of places: it names the first ten and counts the others; --json lists all."""
    lines = one_day(world)
    garbage = [b"not a ledger line"] * fragments
    write_day_file(world.ledger / FILE1, [lines[0], *garbage, *lines[1:]])
    places = [f"{FILE1}:{n}" for n in range(2, 2 + fragments)]
    named = ", ".join(places[:10]) + (f", and {fragments - 10} more" if fragments > 10 else "")
    res = verify(world)
    assert (res.returncode, res.stdout) == (0, ok_text(
        6, 1, 6, hash_of(lines[-1]), torn=f"{fragments} torn fragment(s) skipped ({named})"))
    code, out = verify_json(world)
    assert (code, out["torn"], out["torn_at"]) == (0, fragments, places)


def test_torn_tail_is_reported_not_a_failure(world: World) -> None:
    lines = one_day(world)
    write_day_file(world.ledger / FILE1, lines, tail=lines[-1][:40])
    res = verify(world)
    assert res.returncode == 0, res.stderr
    assert res.stdout == ok_text(6, 1, 6, hash_of(lines[-1]),
                                 torn=f"1 torn fragment(s) skipped ({FILE1}:7)")
    code, out = verify_json(world)
    assert code == 0
    assert (out["ok"], out["entry_count"], out["torn_tail"]) == (True, 6, True)
    assert out["torn_at"] == [f"{FILE1}:7"]
    assert out["head_hash"] == hash_of(lines[-1])


def test_whole_last_line_without_its_newline_is_a_line(world: World) -> None:
    """A crash that cut only the newline left a whole line: it is verified, not skipped."""
    lines = one_day(world)
    (world.ledger / FILE1).write_bytes(b"\n".join(lines))
    res = verify(world)
    assert (res.returncode, res.stdout) == (0, ok_text(6, 1, 6, hash_of(lines[-1])))
    obj = json.loads(lines[-1])
    obj["reason"] = "operator"
    (world.ledger / FILE1).write_bytes(b"\n".join([*lines[:-1], ref_canonical(obj)]))
    assert_broken(world, 6, f"{FILE1}:6", EDITED)


@pytest.mark.parametrize("where", [2, 6])
def test_whole_line_that_is_no_ledger_line_breaks_the_chain(world: World, where: int) -> None:
    """A seq that is not an integer, or a prev that is not a string, is an edit: named,
    not skipped as a crash's fragment (in the middle of a file and as its last line)."""
    lines = one_day(world)
    obj = json.loads(lines[where - 1])
    obj["seq"] = str(obj["seq"])
    lines[where - 1] = ref_canonical(obj)
    write_day_file(world.ledger / FILE1, lines)
    res = verify(world)
    assert res.returncode == 2
    reason = "complete line is not a ledger line (Expected `int`, got `str` - at `$.seq`)"
    assert res.stderr == (f"harness: ledger chain broken at a line with no valid seq "
                          f"({FILE1}:{where}): {reason}\n")
    code, out = verify_json(world)
    assert (code, out["seq"], out["file"], out["line"], out["reason"]) == (
        2, None, FILE1, where, reason)
    obj["seq"], obj["prev"] = where, 7
    lines[where - 1] = ref_canonical(obj)
    write_day_file(world.ledger / FILE1, lines)
    code, out = verify_json(world)
    assert (code, out["seq"], out["line"]) == (2, where, where)
    assert out["reason"] == ("complete line is not a ledger line "
                             "(Expected `str | null`, got `int` - at `$.prev`)")


def test_fragment_inside_a_file_followed_by_later_lines(world: World) -> None:
    """A crash left half a line; the restarted writer began a new line after it (REQ-2)."""
    lines = one_day(world)
    head = hash_of(lines[-1])
    later = []
    for seq in (7, 8):
        raw, head = seal({"v": 1, **decided(seq, f"{DAY1}T09:01:0{seq}.000000000Z")}, seq, head)
        later.append(raw)
    write_day_file(world.ledger / FILE1, [*lines, lines[-1][:55], *later])
    res = verify(world)
    assert res.returncode == 0, res.stderr
    assert res.stdout == ok_text(8, 1, 8, head, torn=f"1 torn fragment(s) skipped ({FILE1}:7)")
    code, out = verify_json(world)
    assert (code, out["entry_count"], out["head_seq"], out["torn_at"]) == (
        0, 8, 8, [f"{FILE1}:7"])
    # An edit after the fragment is still found, at its own line number.
    obj = json.loads(later[1])
    obj["reason"] = "operator"
    write_day_file(world.ledger / FILE1, [*lines, lines[-1][:55], later[0], ref_canonical(obj)])
    assert_broken(world, 8, f"{FILE1}:9", EDITED)


def test_fragment_left_by_a_crash_then_reopened_writer(world: World) -> None:
    lines = one_day(world)
    with open(world.ledger / FILE1, "ab") as f:
        f.write(lines[-1][: len(lines[-1]) // 2])  # the crash: half a line, no newline
    seed(world, [decided(7, f"{DAY1}T09:01:00Z"), decided(8, f"{DAY1}T09:01:01Z")]).close()
    after = lines_of(world.ledger / FILE1)
    assert len(after) == 9 and after[:6] == lines
    res = verify(world)
    assert res.returncode == 0, res.stderr
    assert res.stdout == ok_text(8, 1, 8, hash_of(after[-1]),
                                 torn=f"1 torn fragment(s) skipped ({FILE1}:7)")
    code, out = verify_json(world)
    # The fragment is inside the file now (later lines follow it): not a torn *tail*.
    assert (code, out["entry_count"], out["torn"], out["torn_tail"]) == (0, 8, 1, False)


def test_reopened_writer_continues_the_chain(world: World) -> None:
    lines = one_day(world, 2)
    seed(world, [decided(3, f"{DAY1}T09:01:00Z")]).close()
    after = lines_of(world.ledger / FILE1)
    assert json.loads(after[-1])["prev"] == hash_of(lines[-1])
    res = verify(world)
    assert (res.returncode, res.stdout) == (0, ok_text(3, 1, 3, hash_of(after[-1])))


# -- several day files ---------------------------------------------------------------------------

DAYS = ("2025-11-01", "2025-11-02", "2025-11-03")


def three_days(world: World) -> dict[str, list[bytes]]:
    seed(world, [decided(i, f"{DAYS[(i - 1) // 2]}T12:00:0{i}Z") for i in range(1, 7)]).close()
    return {d: lines_of(world.ledger / f"{d}.jsonl") for d in DAYS}


def test_chain_across_day_files(world: World) -> None:
    files = three_days(world)
    assert [len(v) for v in files.values()] == [2, 2, 2]
    head = hash_of(files[DAYS[2]][-1])
    res = verify(world)
    assert (res.returncode, res.stdout) == (0, ok_text(6, 3, 6, head))
    assert json.loads(files[DAYS[1]][0])["prev"] == hash_of(files[DAYS[0]][-1])


def test_break_in_a_later_day_file_names_that_file(world: World) -> None:
    files = three_days(world)
    write_day_file(world.ledger / f"{DAYS[1]}.jsonl", files[DAYS[1]][1:])
    assert_broken(world, 4, f"{DAYS[1]}.jsonl:1", REMOVED.format(2))


def test_missing_middle_day_file(world: World) -> None:
    three_days(world)
    (world.ledger / f"{DAYS[1]}.jsonl").unlink()
    assert_broken(world, 5, f"{DAYS[2]}.jsonl:1", REMOVED.format(2))


def test_edit_in_the_last_day_file(world: World) -> None:
    files = three_days(world)
    obj = json.loads(files[DAYS[2]][1])
    obj["trigger"] = "manual"
    write_day_file(world.ledger / f"{DAYS[2]}.jsonl", [files[DAYS[2]][0], ref_canonical(obj)])
    assert_broken(world, 6, f"{DAYS[2]}.jsonl:2", EDITED)


def test_duplicate_across_day_files(world: World) -> None:
    files = three_days(world)
    write_day_file(world.ledger / f"{DAYS[1]}.jsonl", [files[DAYS[0]][1], *files[DAYS[1]]])
    assert_broken(world, 2, f"{DAYS[1]}.jsonl:1", REORDERED.format(2, 2))


MOVED = "seq {} comes before seq {} (line {}) in the same file: a line was moved or reordered"


def test_a_line_moved_into_an_earlier_day_file_is_named_where_it_lies(world: World) -> None:
    """Seq 6 moved from the last file into the middle one, between seq 3 and 4. Every
    link still holds in seq order, so the files are merged; that file is out of seq
    order, which no writer leaves, and the moved line is the break. (It was blamed on
    seq 5, untouched in the last file, as if seq 3 came before it.)"""
    files = three_days(world)
    write_day_file(world.ledger / f"{DAYS[1]}.jsonl",
                   [files[DAYS[1]][0], files[DAYS[2]][1], files[DAYS[1]][1]])
    write_day_file(world.ledger / f"{DAYS[2]}.jsonl", files[DAYS[2]][:1])
    assert_broken(world, 6, f"{DAYS[1]}.jsonl:2", MOVED.format(6, 4, 3))
    _, out = verify_json(world)
    assert (out["entry_count"], out["head_seq"]) == (3, 3)
    # Seq 2 moved the other way, after seq 4: it is the line that does not belong where it
    # lies (not seq 3, whose link to seq 1 it left broken).
    write_day_file(world.ledger / f"{DAYS[0]}.jsonl", files[DAYS[0]][:1])
    write_day_file(world.ledger / f"{DAYS[1]}.jsonl", [*files[DAYS[1]], files[DAYS[0]][1]])
    write_day_file(world.ledger / f"{DAYS[2]}.jsonl", files[DAYS[2]])
    assert_broken(world, 2, f"{DAYS[1]}.jsonl:3", REORDERED.format(2, 4))


def test_a_block_of_lines_moved_earlier_in_its_file_names_its_first_line(world: World) -> None:
    """Lines 4 and 5 of one file moved ahead of seq 2 (in a file that is merged with
    another, whose clock stepped back): the first moved line is the break, and what
    verified is what comes before it in seq order."""
    seed(world, [decided(i, f"{DAY1}T08:00:0{i}Z") for i in range(1, 6)]
             + [decided(6, "2025-11-02T08:00:00Z")]).close()
    lines = lines_of(world.ledger / FILE1)
    write_day_file(world.ledger / FILE1, [lines[0], lines[3], lines[4], lines[1], lines[2]])
    assert_broken(world, 4, f"{FILE1}:2", MOVED.format(4, 2, 4))


def test_an_edited_seq_in_an_earlier_day_file_is_named_as_an_edit(world: World) -> None:
    """Seq 3 edited to 30 (not re-hashed) in the middle file: its own hash breaks, and
    the break is named there, not at the untouched first line of the next file."""
    files = three_days(world)
    obj = json.loads(files[DAYS[1]][0])
    obj["seq"] = 30
    write_day_file(world.ledger / f"{DAYS[1]}.jsonl", [ref_canonical(obj), files[DAYS[1]][1]])
    assert_broken(world, 30, f"{DAYS[1]}.jsonl:1", EDITED)


NOT_A_LEDGER_LINE = ("complete line is not a ledger line "
                     "(Expected `int`, got `str` - at `$.seq`)")


def _seq_as_string(raw: bytes) -> bytes:
    obj = json.loads(raw)
    obj["seq"] = str(obj["seq"])
    return ref_canonical(obj)


def _byte_not_utf8(raw: bytes) -> bytes:
    at = raw.index(b'"reason":"') + len(b'"reason":"')
    return raw[:at] + b"\x80" + raw[at + 1:]


@pytest.mark.parametrize(("damage", "seq", "reason"), [
    (_seq_as_string, None, NOT_A_LEDGER_LINE),
    (_byte_not_utf8, 6, "line is not valid UTF-8: damaged on disk"),
], ids=["seq not an integer", "byte not utf8"])
def test_a_foreign_line_inside_a_later_day_file_breaks_the_merged_chain(
        world: World, damage: Callable[[bytes], bytes], seq: int | None, reason: str) -> None:
    """A whole line that is no ledger line, second in the last of three day files: that
    file's own check faults, so the files are followed as one merge, which must name the
    line (not skip it, not crash on it) and count what verified before it: seq 1-5."""
    files = three_days(world)
    last = world.ledger / f"{DAYS[2]}.jsonl"
    write_day_file(last, [files[DAYS[2]][0], damage(files[DAYS[2]][1])])
    code, out = verify_json(world)
    assert (code, out["ok"], out["seq"], out["file"], out["line"], out["reason"]) == (
        2, False, seq, last.name, 2, reason)
    assert (out["entry_count"], out["head_seq"], out["head_hash"]) == (
        5, 5, hash_of(files[DAYS[2]][0]))


@pytest.mark.parametrize(("damage", "seq", "reason"), [
    (_seq_as_string, None, NOT_A_LEDGER_LINE),
    (_byte_not_utf8, 5, "line is not valid UTF-8: damaged on disk"),
], ids=["seq not an integer", "byte not utf8"])
def test_a_foreign_first_line_of_a_later_day_file_keeps_its_place_in_the_merge(
        world: World, damage: Callable[[bytes], bytes], seq: int | None, reason: str) -> None:
    """The same line first in its file, so no line of that file comes before it: the merge
    must still put it after the earlier files' lines (seq 1-4 verified, head seq 4), not
    ahead of the whole chain (nothing verified, no head)."""
    files = three_days(world)
    last = world.ledger / f"{DAYS[2]}.jsonl"
    write_day_file(last, [damage(files[DAYS[2]][0]), files[DAYS[2]][1]])
    code, out = verify_json(world)
    assert (code, out["ok"], out["seq"], out["file"], out["line"], out["reason"]) == (
        2, False, seq, last.name, 1, reason)
    assert (out["entry_count"], out["head_seq"], out["head_hash"]) == (
        4, 4, hash_of(files[DAYS[1]][-1]))


def test_a_day_file_of_foreign_lines_only_breaks_after_the_files_before_it(
        world: World) -> None:
    """A middle day file whose every line is no ledger line: the break is its first line,
    after the first file's seq 1-2."""
    files = three_days(world)
    middle = world.ledger / f"{DAYS[1]}.jsonl"
    write_day_file(middle, [_seq_as_string(x) for x in files[DAYS[1]]])
    code, out = verify_json(world)
    assert (code, out["seq"], out["file"], out["line"], out["reason"]) == (
        2, None, middle.name, 1, NOT_A_LEDGER_LINE)
    assert (out["entry_count"], out["head_seq"], out["head_hash"]) == (
        2, 2, hash_of(files[DAYS[0]][-1]))


def clock_jump(world: World) -> dict[str, list[bytes]]:
    """Seq 1 and 4 on the 4th; the clock stepped back a day for seq 2 and 3, on the 3rd:
    the two files' seq ranges overlap, so verify follows the chain through both at once."""
    seed(world, [decided(1, "2025-11-04T08:00:00Z"), decided(2, f"{DAY1}T08:00:01Z"),
                 decided(3, f"{DAY1}T08:00:02Z"), decided(4, "2025-11-04T08:00:03Z")]).close()
    return {day: lines_of(world.ledger / f"{day}.jsonl") for day in (DAY1, "2025-11-04")}


def test_a_clock_step_among_years_of_day_files_opens_only_the_files_it_mixes(
        world: World) -> None:
    """400 quiet days, then the clock steps back a day for one line: the merge follows the
    chain through every file in seq order, but it opens a file only when the chain
    reaches it, so 400 files verify under a limit of 64 open files (with every file open
    at once it failed with EMFILE and exit 2)."""
    start = parse_ns(f"{DAY1}T09:00:00Z")
    lines = [decided(i + 1, format_ns(start + i * DAY)) for i in range(400)]
    lines.append(decided(401, format_ns(start + 398 * DAY + 60_000_000_000)))  # a day back
    seed(world, lines).close()
    res = subprocess.run(
        [sys.executable, "-c", "import resource, sys; "
         "resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64)); "
         "from harness.cli.main import main; sys.argv = ['harness', 'ledger', 'verify']; "
         "main()"],
        env=world.env, capture_output=True, text=True, timeout=300)
    assert res.stderr == ""
    head = hash_of(lines_of(world.ledger / f"{format_ns(start + 398 * DAY)[:10]}.jsonl")[-1])
    assert (res.returncode, res.stdout) == (0, ok_text(401, 400, 401, head))


def test_a_break_reports_what_verified_before_it(world: World) -> None:
    """The first break is the one named, and the count and head stop at the line before it."""
    files = three_days(world)
    (world.ledger / f"{DAYS[1]}.jsonl").unlink()
    code, out = verify_json(world)
    assert code == 2
    assert (out["seq"], out["file"], out["line"], out["reason"]) == (
        5, f"{DAYS[2]}.jsonl", 1, REMOVED.format(2))
    assert (out["entry_count"], out["head_seq"], out["head_hash"]) == (
        2, 2, hash_of(files[DAYS[0]][-1]))


def test_a_break_in_a_single_file_reports_what_verified_before_it(world: World) -> None:
    """One file is checked on its own, not merged: its count and head also stop at the
    line before the break."""
    lines = one_day(world)
    _edit(lines, rehash=False)
    write_day_file(world.ledger / FILE1, lines)
    code, out = verify_json(world)
    assert (code, out["seq"], out["file"], out["line"], out["reason"]) == (2, 3, FILE1, 3, EDITED)
    assert (out["entry_count"], out["head_seq"], out["head_hash"]) == (2, 2, hash_of(lines[1]))


def test_clock_jump_across_day_files_verifies_in_seq_order(world: World) -> None:
    files = clock_jump(world)
    assert [[json.loads(x)["seq"] for x in v] for v in files.values()] == [[2, 3], [1, 4]]
    head = hash_of(files["2025-11-04"][1])
    assert verify(world).stdout == ok_text(4, 2, 4, head)
    # A fragment a crash left between seq 2 and 3 is skipped and named, as in one file.
    write_day_file(world.ledger / FILE1, [files[DAY1][0], files[DAY1][1][:30], files[DAY1][1]])
    res = verify(world)
    assert (res.returncode, res.stdout) == (
        0, ok_text(4, 2, 4, head, torn=f"1 torn fragment(s) skipped ({FILE1}:2)"))


def test_clock_jump_edit_is_named_by_its_file_and_line(world: World) -> None:
    files = clock_jump(world)
    obj = json.loads(files[DAY1][1])
    obj["reason"] = "operator"
    write_day_file(world.ledger / FILE1, [files[DAY1][0], ref_canonical(obj)])
    assert_broken(world, 3, f"{FILE1}:2", EDITED)
    # A line without its chain fields breaks the chain where it lies.
    del obj["prev"], obj["hash"]
    write_day_file(world.ledger / FILE1, [files[DAY1][0], ref_canonical(obj)])
    assert_broken(world, 3, f"{FILE1}:2", NO_CHAIN)
    # seq 2 removed: seq 3 no longer links to seq 1.
    write_day_file(world.ledger / FILE1, files[DAY1][1:])
    assert_broken(world, 3, f"{FILE1}:1", REMOVED.format(1))


def test_clock_jump_break_at_the_first_seq_reports_nothing_verified(world: World) -> None:
    """Merged files (a clock jump) whose very first line, seq 1, is damaged: the break is
    at seq 1 and no line verified, so there is no head, as with one file."""
    files = clock_jump(world)
    later = "2025-11-04.jsonl"
    obj = json.loads(files["2025-11-04"][0])
    assert obj["seq"] == 1
    obj["reason"] = "operator"
    write_day_file(world.ledger / later, [ref_canonical(obj), files["2025-11-04"][1]])
    assert_broken(world, 1, f"{later}:1", EDITED)
    code, out = verify_json(world)
    assert (code, out["entry_count"], out["head_seq"], out["head_hash"]) == (2, 0, None, None)
    # A forged line numbered 0 before seq 1 breaks the chain where it lies, as in one file.
    forged, _ = seal({"v": 1, **decided(9, f"{DAY1}T07:00:00.000000000Z")}, 0, ZERO_HASH)
    write_day_file(world.ledger / FILE1, [forged, *files[DAY1]])
    write_day_file(world.ledger / later, files["2025-11-04"])
    assert_broken(world, 0, f"{FILE1}:1", REORDERED.format(0, 0))


def test_clock_stepped_back_across_a_whole_file_verifies_in_seq_order(world: World) -> None:
    """Seq 1-2 on the 4th, then the clock stepped back a day for seq 3-4: the earlier-named
    file holds the later seqs, and the chain is still followed in seq order."""
    seed(world, [decided(1, "2025-11-04T08:00:00Z"), decided(2, "2025-11-04T08:00:01Z"),
                 decided(3, f"{DAY1}T08:00:02Z"), decided(4, f"{DAY1}T08:00:03Z")]).close()
    files = {day: lines_of(world.ledger / f"{day}.jsonl") for day in (DAY1, "2025-11-04")}
    assert [[json.loads(x)["seq"] for x in v] for v in files.values()] == [[3, 4], [1, 2]]
    res = verify(world)
    assert (res.returncode, res.stderr) == (0, "")
    assert res.stdout == ok_text(4, 2, 4, hash_of(files[DAY1][1]))


def test_clock_flapping_between_two_days_verifies_in_seq_order(world: World) -> None:
    """The clock flapped between two days line by line: each file holds every other seq,
    so each file on its own has a gap (a fault) that the other file fills. A fault in
    every file is no reason to stitch the files: they are merged, and the chain holds."""
    seed(world, [decided(1, f"{DAY1}T08:00:00Z"), decided(2, "2025-11-04T08:00:01Z"),
                 decided(3, f"{DAY1}T08:00:02Z"), decided(4, "2025-11-04T08:00:03Z")]).close()
    files = {day: lines_of(world.ledger / f"{day}.jsonl") for day in (DAY1, "2025-11-04")}
    assert [[json.loads(x)["seq"] for x in v] for v in files.values()] == [[1, 3], [2, 4]]
    res = verify_module.verify_run_ledger(str(world.ledger), parallel=False)
    assert (res.ok, res.error, res.lines, res.start_seq, res.head_seq, res.head_hash) == (
        True, None, 4, 1, 4, hash_of(files["2025-11-04"][1]))


def test_torn_fragments_of_merged_files_are_listed_in_file_order(world: World) -> None:
    """After a clock jump the files are read interleaved by seq; the fragments are still
    named file by file, line by line, as for files read one after another."""
    files = clock_jump(world)
    later = "2025-11-04"
    write_day_file(world.ledger / f"{later}.jsonl",
                [files[later][0], b'{"v":1,"seq":2,"ty', files[later][1]])
    write_day_file(world.ledger / FILE1, files[DAY1], tail=b'{"v":1,"seq":5,')
    code, out = verify_json(world)
    assert (code, out["entry_count"], out["torn"], out["torn_tail"]) == (0, 4, 2, False)
    assert out["torn_at"] == [f"{FILE1}:3", f"{later}.jsonl:2"]
    res = verify(world)
    assert res.stdout == ok_text(4, 2, 4, hash_of(files[later][1]), torn=(
        f"2 torn fragment(s) skipped ({FILE1}:3, {later}.jsonl:2)"))


def test_a_break_in_merged_files_lists_only_the_fragments_before_it(world: World) -> None:
    """The merge reads every file ahead of the line it judges. Fragments it read past the
    break are not listed, as with files read one after another, which stop at the break;
    those before it are, also the one that opens the file whose line is the break, and one
    just before a foreign line that is the break."""
    files = clock_jump(world)  # seq 2, 3 in FILE1; 1, 4 in the later file
    later = "2025-11-04.jsonl"
    edited = json.loads(files[DAY1][0])
    edited["reason"] = "operator"
    write_day_file(world.ledger / FILE1, [b'{"v":1,"seq":2,"ty', ref_canonical(edited),
                                       b'{"v":1,"seq":3,', files[DAY1][1]])
    write_day_file(world.ledger / later, [files["2025-11-04"][0], b'{"v":1,"seq":4,"t',
                                       files["2025-11-04"][1]], tail=b'{"v":1,"seq":5,')
    code, out = verify_json(world)
    assert (code, out["seq"], out["file"], out["line"], out["reason"]) == (2, 2, FILE1, 2, EDITED)
    assert (out["entry_count"], out["torn"], out["torn_at"]) == (1, 1, [f"{FILE1}:1"])
    # The break a foreign line makes where it lies (after seq 3): the fragments before it
    # in both files are listed, the two after it are not.
    write_day_file(world.ledger / FILE1, [files[DAY1][0], b'{"v":1,"seq":3,', files[DAY1][1],
                                       b'{"v":1,', b'["not", "a", "ledger line"]', b'{"v'])
    write_day_file(world.ledger / later, [b'{"v":1,"seq":1', files["2025-11-04"][0],
                                       b'{"v":1,"seq":4,"t', files["2025-11-04"][1]])
    code, out = verify_json(world)
    assert (code, out["file"], out["line"], out["entry_count"]) == (2, FILE1, 5, 3)
    assert out["torn_at"] == [f"{FILE1}:2", f"{FILE1}:4", f"{later}:1"]


def test_torn_tail_in_an_older_day_file(world: World) -> None:
    files = three_days(world)
    write_day_file(world.ledger / f"{DAYS[0]}.jsonl", files[DAYS[0]], tail=b'{"v":1,"seq":3,')
    res = verify(world)
    assert res.returncode == 0, res.stderr
    assert res.stdout == ok_text(6, 3, 6, hash_of(files[DAYS[2]][-1]),
                                 torn=f"1 torn fragment(s) skipped ({DAYS[0]}.jsonl:3)")
    # Only the newest file's end is the ledger's torn tail.
    code, out = verify_json(world)
    assert (code, out["torn"], out["torn_tail"]) == (0, 1, False)
    write_day_file(world.ledger / f"{DAYS[0]}.jsonl", files[DAYS[0]])
    write_day_file(world.ledger / f"{DAYS[2]}.jsonl", files[DAYS[2]], tail=b'{"v":1,"seq":7,')
    code, out = verify_json(world)
    assert (code, out["torn_at"], out["torn_tail"]) == (0, [f"{DAYS[2]}.jsonl:3"], True)


# -- retention and CHAIN ---------------------------------------------------------------------------

NOW = parse_ns("2025-11-10T12:00:00Z")
KEPT = ("2025-11-09", "2025-11-10")


def pruned(world: World, tmp_path: Path) -> tuple[list[bytes], Path]:
    """Ten lines over five days, pruned with 2 days' retention; returns kept lines and a copy
    of the ledger as it was before the prune."""
    days = ("2025-11-01", "2025-11-02", "2025-11-03", *KEPT)
    lines = [decided(i, f"{days[(i - 1) // 2]}T08:00:{i:02d}Z") for i in range(1, 11)]
    led = seed(world, lines, clock=lambda: NOW, retention_ns=2 * DAY)
    try:
        copy = tmp_path / "before-prune"
        shutil.copytree(world.ledger, copy)
        res = led.prune()
        assert res.error is None
        assert res.deleted == ["2025-11-01", "2025-11-02", "2025-11-03"]
    finally:
        led.close()
    assert sorted(p.name for p in world.ledger.iterdir()) == [
        "2025-11-09.jsonl", "2025-11-10.jsonl", "CHAIN"]
    kept = [raw for d in KEPT for raw in lines_of(world.ledger / f"{d}.jsonl")]
    assert [json.loads(raw)["seq"] for raw in kept] == [7, 8, 9, 10]
    return kept, copy


def test_after_retention_verify_starts_from_chain(world: World, tmp_path: Path) -> None:
    kept, copy = pruned(world, tmp_path)
    chain = json.loads((world.ledger / "CHAIN").read_text())
    assert chain == {"seq": 6, "hash": hash_of(lines_of(copy / "2025-11-03.jsonl")[-1])}
    assert json.loads(kept[0])["prev"] == chain["hash"]
    res = verify(world)
    assert (res.returncode, res.stderr) == (0, "")
    assert res.stdout == ok_text(4, 2, 10, hash_of(kept[-1]), anchor="CHAIN seq 6")
    code, out = verify_json(world)
    assert (code, out["ok"], out["entry_count"], out["anchor"]) == (0, True, 4, "CHAIN seq 6")
    # The kept records still read.
    runs = world.harness("runs", "nightly", "--json")
    assert [r["run_id"] for r in json.loads(runs.stdout)] == [10, 9, 8, 7]


def test_pruned_file_a_crash_left_behind_chain_is_checked_on_its_own(world: World,
                                                                     tmp_path: Path) -> None:
    """A crash between writing CHAIN and deleting the file leaves lines at or before CHAIN:
    outside the chain from CHAIN, they are counted apart, and still may not be edited."""
    kept, copy = pruned(world, tmp_path)
    left = lines_of(copy / "2025-11-03.jsonl")
    shutil.copy(copy / "2025-11-03.jsonl", world.ledger / "2025-11-03.jsonl")
    res = verify(world)
    assert res.returncode == 0, res.stderr
    assert res.stdout == ok_text(4, 3, 10, hash_of(kept[-1]), anchor="CHAIN seq 6", behind=2)
    assert verify_json(world)[1]["behind_anchor"] == 2
    # An edit of seq 5 used to pass unseen: every line up to CHAIN's seq was skipped.
    obj = json.loads(left[0])
    obj["reason"] = "edited"
    write_day_file(world.ledger / "2025-11-03.jsonl", [ref_canonical(obj), left[1]])
    assert_broken(world, 5, "2025-11-03.jsonl:1", EDITED)
    # Re-sealed, the edit breaks the link of seq 6 to it.
    sealed, _ = seal({k: v for k, v in obj.items() if k not in ("seq", "prev", "hash")},
                     5, obj["prev"])
    write_day_file(world.ledger / "2025-11-03.jsonl", [sealed, left[1]])
    assert_broken(world, 6, "2025-11-03.jsonl:2", REMOVED.format(5))


def test_a_line_holding_chains_seq_must_hold_its_hash(world: World, tmp_path: Path) -> None:
    """CHAIN names seq 6 and its hash; a line of seq 6 left behind it with another hash
    (rewritten whole: its own hash and link agree) contradicts it."""
    _kept, copy = pruned(world, tmp_path)
    left = lines_of(copy / "2025-11-03.jsonl")
    obj = json.loads(left[1])
    sealed, _ = seal({**{k: v for k, v in obj.items() if k not in ("seq", "prev", "hash")},
                      "reason": "rewritten"}, 6, obj["prev"])
    write_day_file(world.ledger / "2025-11-03.jsonl", [left[0], sealed])
    assert_broken(world, 6, "2025-11-03.jsonl:2", verify_module.CHAIN_MISMATCH)


def test_a_chain_beyond_every_line_verifies_none_of_them_from_it(world: World) -> None:
    """A CHAIN naming a seq past every line (hand-made: a prune names a line it deleted)
    leaves the chain from it empty: what lies before it is said, each line checked on its
    own, rather than "0 lines" alone."""
    lines = one_day(world)
    (world.ledger / "CHAIN").write_text(json.dumps({"seq": 999, "hash": ZERO_HASH}) + "\n")
    res = verify(world)
    assert (res.returncode, res.stdout) == (
        0, ok_text(0, 1, 999, ZERO_HASH, anchor="CHAIN seq 999", behind=len(lines)))


def behind_chain(world: World, chain_seq: int, files: dict[str, list[int]],
                 pruned: str | None = None) -> dict[int, str]:
    """One chain of decided lines, seq 1 up, each stamped with the day of the file that
    holds it (a clock jump puts a later seq in an earlier file), and a CHAIN naming
    `chain_seq`; the lines of day `pruned` are not written (retention took them).
    Returns each seq's hash."""
    world.ledger.mkdir(parents=True, mode=0o700)
    day_of = {seq: day for day, seqs in files.items() for seq in seqs}
    prev, raws, hashes = ZERO_HASH, {}, {}
    for seq in range(1, len(day_of) + 1):
        at = f"{day_of[seq]}T08:00:0{seq}.000000000Z"
        raws[seq], prev = seal({"v": 1, **decided(seq, at)}, seq, prev)
        hashes[seq] = prev
    for day, seqs in files.items():
        if day != pruned:
            write_day_file(world.ledger / f"{day}.jsonl", [raws[seq] for seq in seqs])
    (world.ledger / "CHAIN").write_text(
        json.dumps({"hash": hashes[chain_seq], "seq": chain_seq}) + "\n")
    return hashes

def test_lines_at_or_before_chain_are_checked_on_their_own_after_a_clock_jump(
        world: World) -> None:
    """CHAIN says seq 4; a crash left the file holding seq 3-4; the clock stepped back for
    seq 6, so the kept files overlap and are followed as one merge, from CHAIN. Seq 3-4
    are counted apart, and an edit of one of them still breaks (it used to pass)."""
    hashes = behind_chain(world, 4, {"2025-11-02": [1, 2], "2025-11-03": [3, 4],
                                     "2025-11-04": [6], "2025-11-05": [5, 7]},
                          pruned="2025-11-02")
    res = verify(world)
    assert (res.returncode, res.stderr) == (0, "")
    assert res.stdout == ok_text(3, 3, 7, hashes[7], anchor="CHAIN seq 4", behind=2)
    three, four = lines_of(world.ledger / "2025-11-03.jsonl")
    obj = json.loads(three)
    obj["reason"] = "edited"
    write_day_file(world.ledger / "2025-11-03.jsonl", [ref_canonical(obj), four])
    assert_broken(world, 3, "2025-11-03.jsonl:1", EDITED)


def test_the_genesis_line_behind_chain_is_checked_on_its_own_after_a_clock_jump(
        world: World) -> None:
    """CHAIN says seq 2; a crash left the first file, seq 1-2, behind it; the clock stepped
    back for seq 4, so the files are merged. Seq 1 too lies behind CHAIN: checked on its
    own, not a break, and the chain is followed from CHAIN."""
    hashes = behind_chain(world, 2, {"2025-11-02": [1, 2], "2025-11-04": [4],
                                     "2025-11-05": [3, 5]})
    res = verify(world)
    assert (res.returncode, res.stderr) == (0, "")
    assert res.stdout == ok_text(3, 3, 5, hashes[5], anchor="CHAIN seq 2", behind=2)
    assert verify_module.verify_run_ledger(str(world.ledger)).start_seq == 3


def test_a_line_from_before_chain_inside_a_kept_file_is_a_break(world: World,
                                                                tmp_path: Path) -> None:
    """Only a file's first lines can be ones a crash left behind CHAIN (a file's seqs
    rise): an old line after a checked one was put there, and breaks the chain, whether
    the files are merged (one has a fault) or the file is checked on its own."""
    kept, copy = pruned(world, tmp_path)
    five = lines_of(copy / "2025-11-03.jsonl")[0]
    assert json.loads(five)["seq"] == 5
    write_day_file(world.ledger / "2025-11-09.jsonl", [kept[0], five, kept[1]])
    assert_broken(world, 5, "2025-11-09.jsonl:2", REORDERED.format(5, 7))
    (world.ledger / "2025-11-10.jsonl").unlink()
    assert_broken(world, 5, "2025-11-09.jsonl:2", REORDERED.format(5, 7))
    # A line numbered 0 was never pruned, wherever it lies.
    write_day_file(world.ledger / "2025-11-09.jsonl", kept[:2])
    forged, _ = seal({"v": 1, **decided(11, "2025-11-10T08:00:00.000000000Z")}, 0, ZERO_HASH)
    write_day_file(world.ledger / "2025-11-10.jsonl", [forged, *kept[2:]])
    assert_broken(world, 0, "2025-11-10.jsonl:1", REORDERED.format(0, 6))


def test_the_first_seq_checked(world: World, tmp_path: Path) -> None:
    """`start_seq` is the first line verify checked: the one after CHAIN (not a line a crash
    left behind it), also when a clock jump makes verify merge the files; seq 1 from genesis."""
    kept, copy = pruned(world, tmp_path)
    assert verify_module.verify_run_ledger(str(world.ledger)).start_seq == 7
    shutil.copy(copy / "2025-11-03.jsonl", world.ledger / "2025-11-03.jsonl")
    assert verify_module.verify_run_ledger(str(world.ledger)).start_seq == 7
    # Seq 7 and 9 in one file, 8 and 10 in the other: the files overlap and are merged.
    write_day_file(world.ledger / "2025-11-09.jsonl", [kept[0], kept[2]])
    write_day_file(world.ledger / "2025-11-10.jsonl", [kept[1], kept[3]])
    res = verify_module.verify_run_ledger(str(world.ledger))
    assert (res.ok, res.start_seq, res.lines, res.head_seq) == (True, 7, 4, 10)
    shutil.rmtree(world.ledger)
    one_day(world, 2)
    assert verify_module.verify_run_ledger(str(world.ledger)).start_seq == 1


def test_chain_file_not_matching_the_next_line(world: World, tmp_path: Path) -> None:
    pruned(world, tmp_path)
    (world.ledger / "CHAIN").write_text(json.dumps({"hash": "f" * 64, "seq": 6}) + "\n")
    assert_broken(world, 7, "2025-11-09.jsonl:1", REMOVED.format(6))


def test_chain_file_pointing_at_an_older_line(world: World, tmp_path: Path) -> None:
    _kept, copy = pruned(world, tmp_path)
    five = hash_of(lines_of(copy / "2025-11-03.jsonl")[0])
    (world.ledger / "CHAIN").write_text(json.dumps({"hash": five, "seq": 5}) + "\n")
    assert_broken(world, 7, "2025-11-09.jsonl:1", REMOVED.format(5))


def test_unreadable_chain_file(world: World, tmp_path: Path) -> None:
    pruned(world, tmp_path)
    (world.ledger / "CHAIN").write_text("{not json")
    res = verify(world)
    assert res.returncode == 2
    assert res.stdout == ""
    assert res.stderr.startswith(f"harness: {world.ledger / 'CHAIN'}: unreadable chain anchor")


def _not_a_file(chain: Path, what: str) -> str:
    """Put `what` in CHAIN's place; the OSError reading it gives."""
    copy = chain.read_bytes()
    chain.unlink()
    if what == "fifo":
        os.mkfifo(chain, 0o600)
        return f"[Errno 22] Not a regular file: '{chain}'"
    if what == "directory":
        chain.mkdir()
        return f"[Errno 21] Is a directory: '{chain}'"
    (chain.parent.parent / "CHAIN.copy").write_bytes(copy)  # a link to a good anchor
    chain.symlink_to(chain.parent.parent / "CHAIN.copy")
    return f"[Errno 40] Too many levels of symbolic links: '{chain}'"


@pytest.mark.parametrize("what", ["fifo", "directory", "symlink"])
def test_chain_that_is_not_a_regular_file_is_unreadable_and_never_blocks(
        world: World, tmp_path: Path, what: str) -> None:
    """A FIFO at CHAIN blocked verify for ever in open(), waiting for a writer. It is
    reported as a directory there is (exit 2, the same words), and so is a symlink: CHAIN
    is a regular file the prune writes, and a link would let a file elsewhere anchor the
    chain."""
    pruned(world, tmp_path)
    chain = world.ledger / "CHAIN"
    detail = _not_a_file(chain, what)
    res = verify(world)
    assert (res.returncode, res.stdout) == (2, "")
    assert res.stderr == f"harness: {chain}: unreadable chain anchor: {detail}\n"
    code, out = verify_json(world)
    assert (code, out["ok"], out["lines"]) == (2, False, 0)


@pytest.mark.parametrize("text", [
    '{"seq": "6", "hash": "%s"}' % ("a" * 64),
    '{"seq": true, "hash": "%s"}' % ("a" * 64),
    '{"seq": 6.0, "hash": "%s"}' % ("a" * 64),
    '{"seq": 6, "hash": null}',
    '{"seq": 6, "hash": "%s"}' % ("a" * 63),
    '{"seq": 6, "hash": "%s"}' % ("a" * 65),
    '{"hash": "%s"}' % ("a" * 64),
    '[6, "%s"]' % ("a" * 64),
    '{"seq": 6, "hash": "%s"}' % ("z" * 64),
    '{"seq": 6, "hash": "%s"}' % ("A" * 64),
    '{"seq": -1, "hash": "%s"}' % ("a" * 64),
], ids=["seq string", "seq bool", "seq float", "hash null", "hash 63", "hash 65",
        "no seq", "array", "hash not hex", "hash upper case", "seq negative"])
def test_chain_file_of_the_wrong_shape_is_refused(tmp_path: Path, text: str) -> None:
    (tmp_path / "CHAIN").write_text(text)
    with pytest.raises(ValueError, match="chain anchor must be"):
        verify_module.read_chain_file(str(tmp_path))


def test_chain_file_of_the_right_shape_is_read(tmp_path: Path) -> None:
    assert verify_module.read_chain_file(str(tmp_path)) is None
    (tmp_path / "CHAIN").write_text(json.dumps({"hash": "0f" * 32, "seq": 6}) + "\n")
    assert verify_module.read_chain_file(str(tmp_path)) == (6, "0f" * 32)
    # Where genesis anchors: no prune writes it, and it asks nothing of the first line.
    (tmp_path / "CHAIN").write_text(json.dumps({"hash": "0" * 64, "seq": 0}) + "\n")
    assert verify_module.read_chain_file(str(tmp_path)) == (0, "0" * 64)


def test_day_named_after_its_at_in_utc(world: World) -> None:
    """A line is written to the file of the UTC day of its `at`, whatever the offset said."""
    seed(world, [decided(1, "2025-11-03T23:30:00-02:00")]).close()
    assert [p.name for p in world.ledger.glob("*.jsonl")] == ["2025-11-04.jsonl"]
    at = json.loads(lines_of(world.ledger / "2025-11-04.jsonl")[0])["at"]
    assert at == format_ns(parse_ns("2025-11-04T01:30:00Z"))
    assert verify(world).returncode == 0


# -- a ledger big enough to be checked file by file on every core ------------------------------

BIG_DAYS = ("2025-10-01", "2025-10-02", "2025-10-03")
BIG_PER_DAY = 14_000


@pytest.fixture(scope="module")
def big_chain() -> dict[str, list[bytes]]:
    """~19 MB of hand-sealed lines over three day files (more than verify checks serially)."""
    prev, seq, out = ZERO_HASH, 0, {}
    todo = "todo-" + "x" * 250
    for day in BIG_DAYS:
        lines = []
        for i in range(BIG_PER_DAY):
            seq += 1
            obj = {"v": 1, **decided(seq, f"{day}T00:00:00.{i:09d}Z"), "todo_id": todo}
            raw, prev = seal(obj, seq, prev)
            lines.append(raw)
        out[day] = lines
    return out


def write_big(world: World, chain: dict[str, list[bytes]]) -> None:
    world.ledger.mkdir(parents=True, mode=0o700)
    for day, lines in chain.items():
        write_day_file(world.ledger / f"{day}.jsonl", lines)
    total = sum(p.stat().st_size for p in world.ledger.iterdir())
    assert total >= getattr(verify_module, "PARALLEL_BYTES", 16 << 20)


def test_big_ledger_verifies(world: World, big_chain: dict[str, list[bytes]]) -> None:
    write_big(world, big_chain)
    n = 3 * BIG_PER_DAY
    res = verify(world)
    assert (res.returncode, res.stderr) == (0, "")
    assert res.stdout == ok_text(n, 3, n, hash_of(big_chain[BIG_DAYS[2]][-1]))


def test_big_ledger_with_fragments_verifies(world: World,
                                            big_chain: dict[str, list[bytes]]) -> None:
    write_big(world, big_chain)
    second = big_chain[BIG_DAYS[1]]
    frag = second[99][:70]
    write_day_file(world.ledger / f"{BIG_DAYS[1]}.jsonl", [*second[:100], frag, *second[100:]])
    third = world.ledger / f"{BIG_DAYS[2]}.jsonl"
    write_day_file(third, big_chain[BIG_DAYS[2]], tail=frag)
    n = 3 * BIG_PER_DAY
    code, out = verify_json(world)
    assert code == 0, out
    assert (out["ok"], out["entry_count"], out["head_seq"]) == (True, n, n)
    assert out["torn_at"] == [f"{BIG_DAYS[1]}.jsonl:101", f"{BIG_DAYS[2]}.jsonl:{BIG_PER_DAY + 1}"]


@pytest.mark.parametrize("where", ["first", "middle", "last"])
def test_big_ledger_edit_is_found(world: World, big_chain: dict[str, list[bytes]],
                                  where: str) -> None:
    write_big(world, big_chain)
    day = {"first": BIG_DAYS[0], "middle": BIG_DAYS[1], "last": BIG_DAYS[2]}[where]
    lines = list(big_chain[day])
    k = 7_777
    obj = json.loads(lines[k])
    obj["outcome"] = "success"
    lines[k] = ref_canonical(obj)
    write_day_file(world.ledger / f"{day}.jsonl", lines)
    assert_broken(world, obj["seq"], f"{day}.jsonl:{k + 1}", EDITED)


def test_big_ledger_removed_file_start(world: World, big_chain: dict[str, list[bytes]]) -> None:
    write_big(world, big_chain)
    write_day_file(world.ledger / f"{BIG_DAYS[2]}.jsonl", big_chain[BIG_DAYS[2]][1:])
    seq = 2 * BIG_PER_DAY + 2
    assert_broken(world, seq, f"{BIG_DAYS[2]}.jsonl:1", REMOVED.format(2 * BIG_PER_DAY))


@pytest.mark.parametrize("field", ["reason", "prev"])
def test_a_whole_line_with_a_byte_that_is_not_utf8_is_damage_not_a_fragment(
        world: World, field: str) -> None:
    """A crash leaves a line's first bytes; a whole line with one byte that is not UTF-8
    was damaged on disk. It breaks the chain at its own seq and line, wherever the byte
    is (in `prev`, the boot would otherwise link the next line to a hash that verify
    cannot check, and blame that next line instead)."""
    lines = one_day(world)
    at = lines[3].index(f'"{field}":"'.encode()) + len(field) + 4
    lines[3] = lines[3][:at] + b"\x80" + lines[3][at + 1:]
    write_day_file(world.ledger / FILE1, lines)
    assert_broken(world, 4, f"{FILE1}:4", "line is not valid UTF-8: damaged on disk")


def test_a_fragment_cut_inside_a_character_is_still_a_fragment(world: World) -> None:
    """A torn write can end mid-character: invalid UTF-8, but no whole value."""
    lines = one_day(world)
    head = hash_of(lines[-1])
    raw, head = seal({**decided(7, f"{DAY1}T09:01:07.000000000Z"), "reason": "café"}, 7, head)
    cut = raw[: raw.index("é".encode()) + 1]  # the first byte of a two-byte character
    write_day_file(world.ledger / FILE1, [*lines, cut, raw])
    res = verify(world)
    assert res.returncode == 0, res.stderr
    assert res.stdout == ok_text(7, 1, 7, head, torn=f"1 torn fragment(s) skipped ({FILE1}:7)")


@pytest.mark.parametrize("day", ["2025-11-04", "2025-11-02"], ids=["next-day", "earlier-day"])
def test_a_day_file_that_starts_past_a_missing_seq_breaks_the_chain(world: World,
                                                                    day: str) -> None:
    """A day file whose first line links to the head of the others but skips a seq: the
    stitch of files in order, and the seq-ordered merge a clock jump calls for (the file
    of an earlier day holding the newest line), both name it."""
    lines = one_day(world)
    line, _ = seal(decided(7, f"{day}T09:00:07Z"), 8, hash_of(lines[-1]))
    write_day_file(world.ledger / f"{day}.jsonl", [line])
    assert_broken(world, 8, f"{day}.jsonl:1", SKIPPED.format(8, 6))


@pytest.mark.parametrize("parallel", [False, True], ids=["one process", "a process a file"])
def test_a_prune_during_verify_makes_it_walk_again(world: World, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch,
                                                    parallel: bool) -> None:
    """The daemon prunes while `harness ledger verify` reads: the real prune runs after
    verify listed the five day files, so three it listed are gone and CHAIN has moved.
    Verify walks again and reports the pruned chain as intact; it used to report a
    break (exit 2) naming the missing file."""
    days = ("2025-11-01", "2025-11-02", "2025-11-03", *KEPT)
    lines = [decided(i, f"{days[(i - 1) // 2]}T08:00:{i:02d}Z") for i in range(1, 11)]
    led = seed(world, lines, clock=lambda: NOW, retention_ns=2 * DAY)
    real = verify_module.list_day_files
    listings: list[int] = []

    def pruned_after_listing(directory: str) -> Any:
        got = real(directory)
        listings.append(len(got.days))
        if len(listings) == 1:
            assert led.prune().deleted == list(days[:3])
        return got

    try:
        monkeypatch.setattr(verify_module, "list_day_files", pruned_after_listing)
        res = verify_module.verify_run_ledger(str(world.ledger), parallel=parallel)
    finally:
        led.close()
    kept = [raw for d in KEPT for raw in lines_of(world.ledger / f"{d}.jsonl")]
    assert listings == [5, 2]
    assert (res.ok, res.error, res.lines, res.anchor, res.head_seq, res.head_hash) == (
        True, None, 4, "CHAIN seq 6", 10, hash_of(kept[-1]))


# -- verify during a long prune: it walks again for as long as the prune goes on ------------
#
# A single prune of a large ledger deletes hundreds of files, each after a carry and a
# synced CHAIN: it used to outlast verify's three walks, and `harness ledger verify` then
# exited 2 with a bare "[Errno 2] No such file or directory", no seq and no file:line. The
# prune is driven from verify's listing, one file per walk, so the test needs no timing.

TEN_DAYS = tuple(f"2025-11-{d:02d}" for d in range(1, 11))  # the last is NOW's day


def ten_days(world: World) -> RunLedger:
    """Two decided lines on each of ten days (seq 1-20); the caller closes."""
    lines = [decided(i, f"{TEN_DAYS[(i - 1) // 2]}T08:00:{i:02d}Z") for i in range(1, 21)]
    return seed(world, lines, clock=lambda: NOW, retention_ns=90 * DAY)


def prune_oldest(led: RunLedger, days: list[tuple[str, str]]) -> None:
    """The real prune, with the retention that dooms the oldest of `days` alone."""
    ended = parse_ns(f"{days[0][0]}T00:00:00Z") + DAY
    led.set_limits(NOW - ended - 1, 1 << 30)
    assert led.prune().deleted == [days[0][0]]


@pytest.mark.parametrize("parallel", [False, True], ids=["one process", "a process a file"])
def test_a_prune_longer_than_any_fixed_number_of_walks_keeps_verify_walking(
        world: World, monkeypatch: pytest.MonkeyPatch, parallel: bool) -> None:
    """Each walk lists the files, then the prune deletes the oldest (CHAIN moves past it)
    before the walk reads it: nine walks in a row find a file gone. Verify walks a tenth
    time and reports the pruned chain intact; it gave up after three walks."""
    led = ten_days(world)
    real = verify_module.list_day_files
    listings: list[int] = []

    def one_pruned_per_walk(directory: str) -> Any:
        got = real(directory)
        listings.append(len(got.days))
        if len(got.days) > 1:
            prune_oldest(led, got.days)
        return got

    try:
        monkeypatch.setattr(verify_module, "list_day_files", one_pruned_per_walk)
        res = verify_module.verify_run_ledger(str(world.ledger), parallel=parallel)
    finally:
        led.close()
    today = lines_of(world.ledger / f"{TEN_DAYS[-1]}.jsonl")
    assert listings == list(range(10, 0, -1))
    assert (res.ok, res.error, res.lines, res.anchor, res.head_seq, res.head_hash) == (
        True, None, 2, "CHAIN seq 18", 20, hash_of(today[-1]))


def test_a_delete_with_chain_already_past_the_file_is_the_prune_going_on(
        world: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A prune writes CHAIN, then deletes the file: when verify lists the files between
    the two, CHAIN does not move while that walk reads, yet the file that goes is the
    oldest listed. That is the prune's delete, not a break: verify walks again."""
    led = ten_days(world)
    try:
        oldest = world.ledger / f"{TEN_DAYS[0]}.jsonl"
        shutil.copy2(oldest, tmp_path / "oldest")
        prune_oldest(led, verify_module.list_day_files(str(world.ledger)).days)
    finally:
        led.close()
    shutil.copy2(tmp_path / "oldest", oldest)  # CHAIN is written, the delete still due
    real = verify_module.list_day_files

    def deleted_after_listing(directory: str) -> Any:
        got = real(directory)
        if oldest.exists():
            oldest.unlink()
        return got

    monkeypatch.setattr(verify_module, "list_day_files", deleted_after_listing)
    res = verify_module.verify_run_ledger(str(world.ledger), parallel=False)
    assert (res.ok, res.error, res.lines, res.anchor, res.behind, res.head_seq) == (
        True, None, 18, "CHAIN seq 2", 0, 20)


# Runs `harness ledger verify` in a real process whose listing of the day files is
# followed by either a real prune of the oldest file (every walk: "prune") or the deletion
# of one file by hand (the first walk only: "unlink:NAME").
_DURING_WALKS = """
import os, sys
from harness.cli.main import main
from harness.ledger import RunLedger, verify
from harness.timefmt import parse_ns
mode, directory, now = sys.argv[1], sys.argv[2], int(sys.argv[3])
day = 86_400 * 10**9
real = verify.list_day_files
led = RunLedger(directory, clock=lambda: now) if mode == "prune" else None
walks = []

def listed(d):
    got = real(d)
    walks.append(len(got.days))
    if led is not None and len(got.days) > 1:
        led.set_limits(now - parse_ns(got.days[0][0] + "T00:00:00Z") - day - 1, 1 << 30)
        assert led.prune().deleted == [got.days[0][0]]
    elif mode.startswith("unlink:") and len(walks) == 1:
        os.unlink(os.path.join(d, mode[len("unlink:"):]))
    return got

verify.list_day_files = listed
sys.argv = ["harness", "ledger", "verify", *sys.argv[4:]]
try:
    main()
finally:
    print("walks", walks, file=sys.stderr)
"""


def verify_during_walks(world: World, mode: str, *args: str
                        ) -> subprocess.CompletedProcess[str]:
    res = subprocess.run([sys.executable, "-c", _DURING_WALKS, mode, str(world.ledger),
                          str(NOW), *args],
                         env=world.env, capture_output=True, text=True, timeout=120)
    assert "Traceback" not in res.stderr, res.stderr
    return res


def test_the_cli_verifies_a_ledger_a_long_prune_shrinks_under_it(world: World) -> None:
    """`harness ledger verify` exits 0 on the pruned chain, not 2 with a bare errno."""
    ten_days(world).close()
    res = verify_during_walks(world, "prune")
    today = lines_of(world.ledger / f"{TEN_DAYS[-1]}.jsonl")
    assert (res.returncode, res.stdout) == (
        0, ok_text(2, 1, 20, hash_of(today[-1]), anchor="CHAIN seq 18"))
    assert res.stderr == f"walks {list(range(10, 0, -1))}\n"


def test_a_file_deleted_by_hand_in_the_middle_breaks_where_its_lines_were(
        world: World) -> None:
    """No prune ran and a file in the middle went while verify read: the walk again
    breaks the chain at the line after the hole, as if the file had gone before verify
    started, and never reports a bare errno."""
    ten_days(world).close()
    gone = f"{TEN_DAYS[4]}.jsonl"  # seq 9-10
    res = verify_during_walks(world, "unlink:" + gone)
    assert (res.returncode, res.stdout) == (2, "")
    assert res.stderr == (f"harness: ledger chain broken at seq 11 ({TEN_DAYS[5]}.jsonl:1): "
                          f"{REMOVED.format(8)}\nwalks [10, 9]\n")
