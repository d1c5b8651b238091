"""Mutation-test survivors of the time format (`harness.timefmt`) and the file layer
(`harness.ledger.files`): the calendar check of canonical-looking stamps, offsets with
minutes and two-digit hours, exact booleans from `is_rfc3339`, `canon` of what is not a
string; and the files' modes, descriptors and temporary names the other tests leave
unpinned."""

from __future__ import annotations

import errno
import os
import stat
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from harness.ledger import files as files_mod
from harness.ledger.files import (
    FaultyFiles,
    FileLayer,
    atomic_replace,
    atomic_write,
    clear_leftovers,
    fsync_dir,
    hold_dir,
    make_private_dir,
    make_private_dirs,
)
from harness.timefmt import canon, day_start_ns, is_rfc3339, now_ns, parse_ns
from ledgertools import open_fds

S = 1_000_000_000
NOON = parse_ns("2026-06-15T12:00:00Z")

# -- harness.timefmt --------------------------------------------------------------------


@pytest.mark.parametrize("stamp", [
    "2026-02-29T00:00:00.000000000Z",  # 2026 is no leap year
    "2041-02-29T00:00:00.000000000Z",  # nor 2041 (year 204 would be)
    "2026-02-30T12:00:00.000000000Z",
    "2026-02-31T12:00:00.000000000Z",
    "2026-11-31T12:00:00.000000000Z",  # November has 30 days; January 31
])
def test_a_canonical_looking_stamp_of_a_day_the_calendar_lacks_is_no_time(
        stamp: str) -> None:
    """Thirty characters in the canonical shape, but a day 29-31 its month (or year) does
    not have: not a time, and not passed through by `canon` as if it were canonical."""
    assert is_rfc3339(stamp) is False
    assert canon(stamp) is None
    with pytest.raises(ValueError) as info:
        parse_ns(stamp)
    assert str(info.value).startswith(f"not an RFC 3339 time: {stamp!r} (")


@pytest.mark.parametrize(("stamp", "epoch_s"), [
    ("2024-02-29T23:59:59.000000001Z", 1_709_251_199),
    ("2026-12-31T00:00:00.000000000Z", 1_798_675_200),
    ("2026-06-15T12:00:00.000000000Z", 1_781_524_800),
])
def test_a_canonical_stamp_is_exactly_true_and_its_own_canonical_spelling(
        stamp: str, epoch_s: int) -> None:
    assert is_rfc3339(stamp) is True
    assert canon(stamp) == stamp
    assert parse_ns(stamp) == epoch_s * S + int(stamp[20:29])


@pytest.mark.parametrize("value", [
    None, 5, 1.5, b"2026-06-15T12:00:00.000000000Z", ["2026-06-15T12:00:00Z"]])
def test_what_is_not_a_string_is_no_time(value: object) -> None:
    assert is_rfc3339(value) is False
    assert canon(value) is None


@pytest.mark.parametrize("text", [
    "x" * 30,  # the length of a canonical stamp, and nothing else of one
    "2026-06-15T12:00:00.000000000+",
])
def test_a_string_that_is_no_time_is_exactly_false_and_has_no_canonical_spelling(
        text: str) -> None:
    assert is_rfc3339(text) is False
    assert canon(text) is None


@pytest.mark.parametrize(("text", "offset_s"), [
    ("2026-06-15T12:00:00z", 0),
    ("2026-06-15T12:00:00+05:30", 5 * 3600 + 30 * 60),
    ("2026-06-15T12:00:00+10:00", 10 * 3600),
    ("2026-06-15T12:00:00-11:45", -(11 * 3600 + 45 * 60)),
    ("2026-06-15T12:00:00+00:59", 59 * 60),
    ("2026-06-15T12:00:00+23:59", 23 * 3600 + 59 * 60),
    ("2026-06-15T12:00:00-23:00", -23 * 3600),
])
def test_an_offset_moves_the_instant_by_its_hours_and_minutes(
        text: str, offset_s: int) -> None:
    """The extremes RFC 3339 allows (hours up to 23, minutes up to 59), both digits of
    each, and the lower-case ``z``: each parses to noon UTC minus the offset."""
    assert parse_ns(text) == NOON - offset_s * S
    assert is_rfc3339(text) is True
    utc = datetime(2026, 6, 15, 12, tzinfo=UTC) - timedelta(seconds=offset_s)
    assert canon(text) == utc.strftime("%Y-%m-%dT%H:%M:%S.000000000Z")


@pytest.mark.parametrize("tz", ["-24:00", "+24:00", "-00:60", "+99:00"])
def test_an_offset_past_23_hours_or_59_minutes_is_refused_whatever_its_sign(tz: str) -> None:
    text = f"2026-06-15T12:00:00{tz}"
    with pytest.raises(ValueError) as info:
        parse_ns(text)
    assert str(info.value) == f"not an RFC 3339 time: {text!r} (offset {tz} out of range)"
    assert is_rfc3339(text) is False


def test_day_start_ns_is_midnight_utc_of_the_day() -> None:
    assert day_start_ns("2026-06-15") == 1_781_481_600 * S
    assert day_start_ns("1970-01-01") == 0
    assert day_start_ns("0001-01-01") == -62_135_596_800 * S


def test_now_ns_is_the_wall_clock_in_nanoseconds() -> None:
    before = time.time_ns()
    now = now_ns()
    after = time.time_ns()
    assert type(now) is int
    assert before <= now <= after


# -- harness.ledger.files ---------------------------------------------------------------


def test_make_private_dirs_names_each_directory_it_made_outermost_first(
        tmp_path: Path) -> None:
    deep = tmp_path / "a" / "b" / "c"
    assert make_private_dirs(str(deep)) == [
        str(tmp_path / "a"), str(tmp_path / "a" / "b"), str(deep)]
    assert make_private_dirs(str(deep)) == []
    assert make_private_dirs(str(tmp_path / "a" / "d")) == [str(tmp_path / "a" / "d")]
    # A trailing slash names the same directory: its parent is the one before it.
    trailing = f"{tmp_path}/p/X/"
    assert make_private_dirs(trailing) == [f"{tmp_path}/p", trailing]
    assert make_private_dir(str(tmp_path / "a")) is False


def test_a_file_in_the_way_of_a_private_dir_is_named_in_the_error(tmp_path: Path) -> None:
    blocker = tmp_path / "ledger"
    blocker.write_bytes(b"")
    with pytest.raises(NotADirectoryError) as info:
        make_private_dir(str(blocker))
    assert str(info.value) == f"[Errno {errno.ENOTDIR}] not a directory: '{blocker}'"


def test_make_private_dirs_of_a_relative_name_makes_it_in_the_working_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert make_private_dirs("ledger") == ["ledger"]
    assert make_private_dirs("ledger") == []
    assert make_private_dirs("state/harness") == ["state", "state/harness"]
    assert stat.S_IMODE(os.stat(tmp_path / "ledger").st_mode) == 0o700 & ~_umask()


def _umask() -> int:
    old = os.umask(0)
    os.umask(old)
    return old


def test_hold_dir_refuses_a_held_directory_without_keeping_a_descriptor(
        tmp_path: Path) -> None:
    held = hold_dir(str(tmp_path))
    assert held is not None and held >= 0
    try:
        before = open_fds()
        assert hold_dir(str(tmp_path)) is None
        assert open_fds() == before
    finally:
        os.close(held)
    again = hold_dir(str(tmp_path))
    assert again is not None and again >= 0
    os.close(again)


def test_a_regular_file_is_no_directory_to_hold_or_sync(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.write_bytes(b"x")
    before = open_fds()
    with pytest.raises(NotADirectoryError):
        hold_dir(str(plain))
    with pytest.raises(NotADirectoryError):
        fsync_dir(plain)
    with pytest.raises(FileNotFoundError):
        fsync_dir(tmp_path / "missing")
    assert open_fds() == before


def test_fsync_dir_closes_what_it_opens(tmp_path: Path) -> None:
    before = open_fds()
    for _ in range(3):
        fsync_dir(tmp_path)
    assert open_fds() == before


def test_atomic_replace_fills_a_0600_temporary_named_for_its_target_pid_and_thread(
        tmp_path: Path) -> None:
    """While `fill` runs, the only new entry beside the target is
    ``.<name>.<pid>.<thread id>.tmp``, 0600, open on the fd handed to `fill`: the name
    `clear_leftovers` removes after a kill."""
    target = tmp_path / "state.json"
    target.write_bytes(b"old")
    tmp_name = f".state.json.{os.getpid()}.{threading.get_ident()}.tmp"
    seen: list[tuple[list[str], int, str]] = []

    def fill(fd: int) -> None:
        seen.append((sorted(os.listdir(tmp_path)), stat.S_IMODE(os.fstat(fd).st_mode),
                     os.readlink(f"/proc/self/fd/{fd}")))
        os.write(fd, b"new")

    before = open_fds()
    old = os.umask(0)
    try:
        atomic_replace(target, fill)
    finally:
        os.umask(old)
    assert open_fds() == before
    assert seen == [([tmp_name, "state.json"], 0o600, str(tmp_path / tmp_name))]
    assert sorted(os.listdir(tmp_path)) == ["state.json"]
    assert target.read_bytes() == b"new"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600


def test_a_fill_that_fails_leaves_the_target_and_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "state.json"
    target.write_bytes(b"old")

    def fill(fd: int) -> None:
        os.write(fd, b"half")
        raise OSError(errno.ENOSPC, "No space left on device")

    before = open_fds()
    with pytest.raises(OSError) as info:
        atomic_replace(target, fill)
    assert info.value.errno == errno.ENOSPC
    assert open_fds() == before
    assert sorted(os.listdir(tmp_path)) == ["state.json"]
    assert target.read_bytes() == b"old"


def test_atomic_write_of_a_bare_name_writes_beside_it_in_the_working_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    atomic_write("state.json", b"{}\n")
    atomic_write("state.json", b"[]\n")
    assert os.listdir(tmp_path / "elsewhere") == ["state.json"]
    assert (tmp_path / "elsewhere" / "state.json").read_bytes() == b"[]\n"
    assert sorted(os.listdir(tmp_path)) == ["elsewhere"]


def test_clear_leftovers_removes_only_the_temporaries_of_the_named_targets(
        tmp_path: Path) -> None:
    leftovers = [".a.json.12.34.tmp", ".b.json.1.2.tmp"]
    kept = [".a.json.12.34.tmpx", "a.json.12.34.tmp", ".a.json.x.34.tmp", ".a.json.12.tmp",
            ".c.json.1.2.tmp", ".a.jsonX.1.2.tmp", "X.a.json.1.2.tmp", "a.json", ".a.json"]
    for name in leftovers + kept:
        (tmp_path / name).write_bytes(b"")
    assert clear_leftovers(str(tmp_path), r"a\.json|b\.json") == sorted(leftovers)
    assert sorted(os.listdir(tmp_path)) == sorted(kept)
    assert clear_leftovers(str(tmp_path), r"a\.json|b\.json") == []


def test_names_is_true_when_the_path_cannot_be_looked_up(tmp_path: Path) -> None:
    """`names` answers False only when the path is gone or names another file; a lookup
    that fails otherwise (here ENAMETOOLONG) cannot tell, so the handle is trusted."""
    layer = FileLayer()
    path = tmp_path / "f"
    fd, created = layer.open_append(str(path))
    try:
        assert created is True
        ident = layer.identity(fd)
        assert layer.names(str(path), ident) is True
        assert layer.names(str(tmp_path / ("n" * 5000)), ident) is True
        assert layer.names(str(tmp_path / "gone"), ident) is False
        path.rename(tmp_path / "g")
        path.write_bytes(b"")
        assert layer.names(str(path), ident) is False
    finally:
        layer.close(fd)


@pytest.fixture
def fsynced(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """What each os.fsync of the test is for (the fd's path), the real fsync still done."""
    seen: list[str] = []
    monkeypatch.setattr(os, "fsync", _noting(seen, os.fsync))
    return seen


def _noting(seen: list[str], sync: Callable[[int], None]) -> Callable[[int], None]:
    """`sync`, noting in `seen` the path of each fd it is called on."""
    def spy(fd: int) -> None:
        seen.append(os.readlink(f"/proc/self/fd/{fd}"))
        sync(fd)
    return spy


def test_atomic_replace_syncs_the_file_before_the_rename_and_the_directory_after(
        tmp_path: Path, fsynced: list[str]) -> None:
    target = tmp_path / "state.json"
    tmp_name = f".state.json.{os.getpid()}.{threading.get_ident()}.tmp"
    atomic_write(target, b"{}\n")
    assert fsynced == [str(tmp_path / tmp_name), str(tmp_path)]
    assert target.read_bytes() == b"{}\n"


def test_fsync_dir_and_the_layers_sync_dir_sync_that_directory(
        tmp_path: Path, fsynced: list[str]) -> None:
    fsync_dir(tmp_path)
    FileLayer().sync_dir(str(tmp_path / "."))
    assert fsynced == [str(tmp_path), str(tmp_path)]


def test_a_slow_write_is_whole_unless_asked_to_be_short(tmp_path: Path) -> None:
    """A fault with only a delay slows the write down and nothing else: every byte lands
    and the full count comes back; `short=True` is what makes it put half down."""
    ff = FaultyFiles()
    fd, _ = ff.open_append(str(tmp_path / "f"))
    try:
        ff.inject("write", delay=0.001, times=1)
        assert ff.write(fd, b"abcd") == 4
        ff.inject("write", short=True, times=3)
        assert ff.write(fd, b"wxyz") == 2
        assert ff.write(fd, b"mn") == 1
        assert ff.write(fd, b"!") == 1  # one byte cannot be cut short
        ff.inject("write", errno=errno.EIO, partial=True, times=1)
        with pytest.raises(OSError):
            ff.write(fd, b"pq")
    finally:
        ff.close(fd)
    assert (tmp_path / "f").read_bytes() == b"abcdwxm!p"
    assert ff.calls == {"open": 1, "write": 5, "sync": 0, "truncate": 0, "read": 0}
    with pytest.raises(ValueError) as info:
        ff.inject("stat")
    assert str(info.value) == "unknown file operation 'stat'"


def test_an_injected_error_names_its_operation(tmp_path: Path) -> None:
    ff = FaultyFiles()
    path = str(tmp_path / "f")
    fd, _ = ff.open_append(path)
    try:
        for op, call in (("open", lambda: ff.open_append(path)),
                         ("write", lambda: ff.write(fd, b"ab")),
                         ("sync", lambda: ff.sync(fd)),
                         ("truncate", lambda: ff.truncate(fd, 0)),
                         ("read", lambda: ff.read_from(path, 0))):
            ff.inject(op, errno=errno.EIO, times=1)
            with pytest.raises(OSError) as info:
                call()
            assert (info.value.errno, info.value.strerror) == (
                errno.EIO, f"Input/output error (injected on {op})")
    finally:
        ff.close(fd)
    assert ff.calls == {"open": 2, "write": 1, "sync": 1, "truncate": 1, "read": 1}


def test_the_layers_reads_of_an_open_file(tmp_path: Path) -> None:
    """`last_byte` of an empty file is no byte (no read at offset -1), of a one-byte file
    that byte; `read_from` gives the bytes from an offset to the end."""
    layer = FileLayer()
    path = tmp_path / "f"
    fd, created = layer.open_append(str(path))
    try:
        assert created is True
        assert layer.size(fd) == 0
        assert layer.last_byte(fd, 0) == b""
        assert layer.write(fd, b"{") == 1
        assert layer.last_byte(fd, 1) == b"{"
        assert layer.write(fd, b"}\n") == 2
        assert layer.last_byte(fd, 3) == b"\n"
        assert layer.read_from(str(path), 1) == b"}\n"
        layer.truncate(fd, 1)
        assert (layer.size(fd), layer.read_from(str(path), 0)) == (1, b"{")
        assert layer.linked(fd) is True
        os.link(path, tmp_path / "g")
        path.unlink()
        assert layer.linked(fd) is True
        (tmp_path / "g").unlink()
        assert layer.linked(fd) is False
    finally:
        layer.close(fd)


def test_the_layers_sync_is_the_data_sync_of_that_fd(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`sync` of the real layer, and of the faulty one when no fault is armed, reaches the
    data sync (fdatasync where there is one) for the fd it is given."""
    synced: list[str] = []
    monkeypatch.setattr(files_mod, "_SYNC", _noting(synced, files_mod._SYNC))
    for layer in (FileLayer(), FaultyFiles()):
        fd, _ = layer.open_append(str(tmp_path / "f"))
        try:
            layer.sync(fd)
        finally:
            layer.close(fd)
    assert synced == [str(tmp_path / "f")] * 2
