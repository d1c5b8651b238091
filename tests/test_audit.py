"""The HMAC-SHA256 audit chain: appends, file modes, tamper detection, scrubbing, torn tails."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import stat
import threading
from pathlib import Path

import pytest

from harness import audit
from harness.ledger.canonical import canonical


@pytest.fixture(autouse=True)
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    return tmp_path / "state" / "harness" / "audit"


def lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(x) for x in path.read_text().splitlines() if x]


def test_append_builds_a_verifiable_chain(state: Path) -> None:
    assert audit.verify_audit() == (True, 0, None)
    for i in range(3):
        audit.append_event("work_ledger.anchor", {"run_id": f"r{i}", "n": i})
    assert audit.verify_audit() == (True, 3, None)
    rows = lines(state / "audit.jsonl")
    assert [r["seq"] for r in rows] == [1, 2, 3]
    assert rows[0]["prev"] == "0" * 64
    assert rows[1]["prev"] == rows[0]["mac"] and rows[2]["prev"] == rows[1]["mac"]
    key = (state / "key").read_bytes()
    assert len(key) == 32
    body = {k: v for k, v in rows[1].items() if k != "mac"}
    assert rows[1]["mac"] == hmac.new(key, canonical(body), hashlib.sha256).hexdigest()
    # Each line is exactly its canonical form.
    raw = (state / "audit.jsonl").read_bytes().splitlines()
    assert raw[0] == canonical(rows[0])
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    assert stat.S_IMODE((state / "key").stat().st_mode) == 0o600
    assert stat.S_IMODE((state / "audit.jsonl").stat().st_mode) == 0o600


@pytest.mark.parametrize("how", ["edit", "remove", "swap", "mac"])
def test_tampering_is_detected(state: Path, how: str) -> None:
    for i in range(4):
        audit.append_event("e", {"i": i})
    path = state / "audit.jsonl"
    raw = path.read_bytes().splitlines(keepends=True)
    if how == "edit":
        raw[1] = raw[1].replace(b'"i":1', b'"i":7')
    elif how == "remove":
        del raw[1]
    elif how == "swap":
        raw[1], raw[2] = raw[2], raw[1]
    else:
        row = json.loads(raw[2])
        row["mac"] = "f" * 64
        raw[2] = canonical(row) + b"\n"
    path.write_bytes(b"".join(raw))
    ok, count, bad = audit.verify_audit()
    assert not ok
    assert bad == (3 if how == "mac" else 2)
    assert count == bad - 1


def test_a_forged_chain_without_the_key_fails(state: Path) -> None:
    audit.append_event("e", {})
    (state / "key").chmod(0o600)
    os.replace(state / "key", state / "key.old")
    fd = os.open(state / "key", os.O_WRONLY | os.O_CREAT, 0o600)
    os.write(fd, os.urandom(32))
    os.close(fd)
    assert audit.verify_audit() == (False, 0, 1)


def test_secrets_are_never_written(state: Path) -> None:
    secret = "sk-ant-api03-" + "A" * 40
    audit.append_event("e", {"note": f"token={secret}", "auth": f"Bearer {secret}"})
    text = (state / "audit.jsonl").read_text()
    assert secret not in text and "[REDACTED]" in text
    assert audit.verify_audit() == (True, 1, None)


def test_a_torn_tail_is_not_counted_and_the_chain_continues(state: Path) -> None:
    audit.append_event("e", {"i": 1})
    path = state / "audit.jsonl"
    with open(path, "ab") as f:
        f.write(b'{"at":"2026-11-')
    assert audit.verify_audit() == (True, 1, None)
    audit.append_event("e", {"i": 2})
    assert audit.verify_audit() == (True, 2, None)
    assert [r["seq"] for r in map(json.loads, path.read_text().splitlines()[::2])] == [1, 2]


def test_a_line_that_lost_only_its_newline_stays_in_the_chain(state: Path) -> None:
    audit.append_event("e", {"i": 1})
    path = state / "audit.jsonl"
    path.write_bytes(path.read_bytes().rstrip(b"\n"))
    audit.append_event("e", {"i": 2})
    assert audit.verify_audit() == (True, 2, None)


def test_a_line_nested_too_deeply_is_as_unreadable_as_a_torn_one(state: Path) -> None:
    """msgspec raises RecursionError, not DecodeError, for JSON nested past its depth: a
    fragment like that is a torn tail to verify and to append after, and as the last
    whole line a fragment passed over, never a traceback."""
    audit.append_event("e", {"i": 1})
    path = state / "audit.jsonl"
    deep = b'{"event":"e","data":' + b"[" * 100_000  # holds the needle _holds looks for
    with open(path, "ab") as f:
        f.write(deep)
    assert audit.verify_audit() == (True, 1, None)
    two = audit.append_event_once("e", {"i": 2})
    assert two is not None
    assert audit.verify_audit() == (True, 2, None)
    with open(path, "ab") as f:
        f.write(deep + b"\n")
    three = audit.append_event("e", {"i": 3})
    assert (three["seq"], three["prev"]) == (3, two["mac"])
    assert audit.append_event_once("e", {"i": 4}) is not None
    assert audit.verify_audit() == (True, 4, None)


def test_a_loose_key_is_refused(state: Path) -> None:
    audit.append_event("e", {})
    (state / "key").chmod(0o644)
    with pytest.raises(audit.AuditError, match="0600"):
        audit.append_event("e", {})


def test_concurrent_appends_keep_one_chain(state: Path) -> None:
    def work(t: int) -> None:
        for i in range(20):
            audit.append_event("e", {"t": t, "i": i})

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert audit.verify_audit() == (True, 80, None)


def test_an_event_recorded_once_is_found_however_far_back_it_lies(state: Path) -> None:
    first = audit.append_event_once("anchor", {"run_id": "r1", "head": "h1"})
    assert first is not None and first["seq"] == 1
    # Push it more than one read block back, with lines of the same event among them.
    for i in range(400):
        audit.append_event("anchor" if i % 2 else "other", {"run_id": f"x{i}", "pad": "p" * 200})
    path = state / "audit.jsonl"
    assert path.stat().st_size > 1 << 16
    before = path.read_bytes()
    assert audit.append_event_once("anchor", {"run_id": "r1", "head": "h1"}) is None
    assert path.read_bytes() == before
    # Other data, or the same data under another event, is not the same record.
    again = audit.append_event_once("anchor", {"run_id": "r1", "head": "h2"})
    assert again is not None and again["seq"] == 402
    assert audit.append_event_once("other", {"run_id": "r1", "head": "h1"}) is not None
    assert audit.verify_audit() == (True, 403, None)


@pytest.mark.parametrize("block", [1, 2, 3, 7, 64, 4096])
def test_the_backward_walk_yields_every_line_newest_first(tmp_path: Path, block: int) -> None:
    raw = b"\n".join(
        [b"a", b"", b"bb" * 9, b"ccc", b"", b"", b"d" * 70, b"torn tail without newline"]
    )
    path = tmp_path / "f"
    for content in (raw, raw + b"\n", b"", b"\n\n", b"x"):
        path.write_bytes(content)
        fd = os.open(path, os.O_RDONLY)
        try:
            got = list(audit._lines_backward(fd, block))
        finally:
            os.close(fd)
        assert got == [p for p in reversed(content.split(b"\n")) if p]
