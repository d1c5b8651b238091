"""The run ledger's day files on disk (`harness.ledger.dayfiles`): which names are day
files and which are strays, and what the streaming readers (`iter_chunks`, `iter_blocks`,
`read_tail`) yield for complete lines, torn tails, whole tails and lines that cross the
read chunk. Real files only; the chunk-crossing cases write files past `CHUNK`."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import msgspec
import pytest

from harness.ledger.dayfiles import (
    CHUNK,
    DAY_FILE,
    UNREADABLE,
    FileTail,
    LedgerDirError,
    day_path,
    decode_json,
    highest_line,
    is_utf8,
    is_whole,
    iter_blocks,
    iter_chunks,
    list_day_files,
    read_tail,
)

DEEP = b"[" * 100_000  # nested deeper than the decoder recurses


def _write(path: Path, data: bytes) -> str:
    path.write_bytes(data)
    return str(path)


def _blocks(path: str) -> list[tuple[bytes, bool]]:
    # The views are only valid until the next step: copy each one as it comes.
    return [(bytes(view), torn) for view, torn in iter_blocks(path)]


# --- names and listing ---------------------------------------------------------------


def test_unreadable_is_the_decoder_errors_and_recursion() -> None:
    assert (msgspec.MsgspecError, RecursionError) == UNREADABLE


def test_day_file_pattern_is_anchored_at_both_ends() -> None:
    assert DAY_FILE.match("2026-06-15.jsonl").group(1) == "2026-06-15"
    assert DAY_FILE.match("2026-06-15.jsonl\n") is None
    assert DAY_FILE.match("2026-06-15.jsonl.bak") is None
    assert DAY_FILE.match("x2026-06-15.jsonl") is None


def test_day_path_joins_the_day_file_name(tmp_path: Path) -> None:
    assert day_path(str(tmp_path), "2026-06-15") == f"{tmp_path}/2026-06-15.jsonl"


def test_missing_directory_is_an_empty_listing(tmp_path: Path) -> None:
    listing = list_day_files(str(tmp_path / "nope"))
    assert (listing.days, listing.strays) == ([], [])


def test_a_file_in_place_of_the_directory_is_a_ledger_dir_error(tmp_path: Path) -> None:
    f = tmp_path / "ledger"
    f.write_text("x")
    with pytest.raises(LedgerDirError) as exc:
        list_day_files(str(f))
    assert str(exc.value) == f"ledger path {f} is not a directory"
    assert isinstance(exc.value, OSError)


def test_listing_sorts_days_and_names_strays(tmp_path: Path) -> None:
    d = tmp_path
    for name in ("2026-06-16.jsonl", "2026-06-14.jsonl", "2026-06-15.jsonl",
                 "2026-13-45.jsonl",    # not a calendar day
                 "2026-02-30.jsonl",    # nor this
                 "notes.txt", "2026-06-15.jsonl.bak", "b-stray", "a-stray",
                 "CHAIN", ".imported", "CHAIN.tmp", "2026-06-17.jsonl.tmp", "x.tmp"):
        (d / name).write_bytes(b"")
    (d / "2026-06-13.jsonl").mkdir()  # a directory is not a day file
    os.mkfifo(d / "2026-06-12.jsonl")  # nor a FIFO (opening it would block)
    listing = list_day_files(str(d))
    assert listing.days == [(day, f"{d}/{day}.jsonl")
                            for day in ("2026-06-14", "2026-06-15", "2026-06-16")]
    assert listing.strays == ["2026-02-30.jsonl", "2026-06-12.jsonl", "2026-06-13.jsonl",
                              "2026-06-15.jsonl.bak", "2026-13-45.jsonl", "a-stray",
                              "b-stray", "notes.txt"]


def test_a_symlink_to_a_regular_file_with_a_day_name_is_a_stray(tmp_path: Path) -> None:
    """Only a regular file is a day file, a symlink to one too: read as a day, a link to
    today's file put its lines in the chain twice, and a prune wrote CHAIN from them."""
    (tmp_path / "2026-06-15.jsonl").write_bytes(b'{"seq":1}\n')
    (tmp_path / "outside").write_bytes(b'{"seq":7}\n')
    (tmp_path / "2020-01-03.jsonl").symlink_to(tmp_path / "2026-06-15.jsonl")
    (tmp_path / "2026-06-16.jsonl").symlink_to("outside")
    listing = list_day_files(str(tmp_path))
    assert listing.days == [("2026-06-15", f"{tmp_path}/2026-06-15.jsonl")]
    assert listing.strays == ["2020-01-03.jsonl", "2026-06-16.jsonl", "outside"]
    # Nor does a reader handed one follow it: one put there after the listing.
    link = str(tmp_path / "2026-06-16.jsonl")
    for read in (lambda: list(iter_chunks(link, gone_ok=True)),
                 lambda: list(iter_blocks(link, gone_ok=True)),
                 lambda: read_tail(link), lambda: highest_line(link)):
        with pytest.raises(OSError) as exc:
            read()
        assert exc.value.errno == errno.ELOOP


@pytest.mark.timeout(60)  # the old open() waited for a FIFO's writer for ever
def test_a_fifo_put_in_a_listed_day_files_place_is_an_error_not_a_hang(
        tmp_path: Path) -> None:
    """The listing saw a regular file; a FIFO took its place before a reader opened it.
    Opening it must not wait for a writer: the reader fails on it, as on a directory."""
    fifo = tmp_path / "2026-06-15.jsonl"
    os.mkfifo(fifo, 0o600)
    for read in (lambda: list(iter_chunks(str(fifo))), lambda: list(iter_blocks(str(fifo))),
                 lambda: read_tail(str(fifo))):
        with pytest.raises(OSError, match="Not a regular file") as exc:
            read()
        assert exc.value.errno == errno.EINVAL
    fifo.unlink()
    fifo.mkdir()
    with pytest.raises(IsADirectoryError):
        list(iter_chunks(str(fifo)))


def test_a_dangling_symlink_with_a_day_name_is_a_stray(tmp_path: Path) -> None:
    (tmp_path / "2026-06-15.jsonl").symlink_to(tmp_path / "gone")
    listing = list_day_files(str(tmp_path))
    assert (listing.days, listing.strays) == ([], ["2026-06-15.jsonl"])


# --- is_whole ----------------------------------------------------------------------


@pytest.mark.parametrize(("fragment", "whole"), [
    (b'{"seq":1}', True),
    (b"[1,2]", True),
    (b"7", True),
    (b'{"seq":1', False),
    (b'{"se', False),
    (b"", False),
    (b'{"seq":1}x', False),
    (DEEP, False),
    (b'{"seq":1,"n":1e999}', True),  # whole: a number no float holds is no torn write
    (b'[' + b'9' * 5000 + b']', True),
])
def test_is_whole(fragment: bytes, whole: bool) -> None:
    assert is_whole(fragment) is whole
    assert is_whole(memoryview(fragment)) is whole


@pytest.mark.parametrize(("data", "utf8"), [
    (b"", True),
    (b'{"seq":1}', True),
    ("{\"s\":\"é ✓ 😀\"}".encode(), True),
    (b'{"s":"\xff"}', False),
    ("é".encode()[:1], False),  # cut inside a character
    (b"\xed\xa0\x80", False),  # a surrogate, which UTF-8 never encodes
])
def test_is_utf8(data: bytes, utf8: bool) -> None:
    assert is_utf8(data) is utf8


def test_decode_json_reads_a_number_past_floats_range_as_an_infinity() -> None:
    assert decode_json(b'{"seq":3,"n":1.5,"s":"\xc3\xa9"}') == {"seq": 3, "n": 1.5, "s": "é"}
    assert decode_json(memoryview(b'{"seq":3,"n":1e999,"m":-1e999}')) == {
        "seq": 3, "n": float("inf"), "m": float("-inf")}
    assert decode_json(b"[1e999]") == [float("inf")]
    for bad in (b'{"seq":3', b"garbage", DEEP):
        with pytest.raises(UNREADABLE):
            decode_json(bad)


# --- iter_chunks -------------------------------------------------------------------


def test_iter_chunks_empty_file_yields_nothing(tmp_path: Path) -> None:
    assert list(iter_chunks(_write(tmp_path / "d", b""))) == []


def test_iter_chunks_complete_lines(tmp_path: Path) -> None:
    p = _write(tmp_path / "d", b'{"seq":1}\n\n{"seq":3}\n')
    assert list(iter_chunks(p)) == [(1, [b'{"seq":1}', b"", b'{"seq":3}'], False)]


def test_iter_chunks_torn_tail_comes_once_with_its_line_number(tmp_path: Path) -> None:
    p = _write(tmp_path / "d", b'{"seq":1}\n{"seq":2}\n{"se')
    assert list(iter_chunks(p)) == [(1, [b'{"seq":1}', b'{"seq":2}'], False),
                                    (3, [], True)]


def test_iter_chunks_whole_tail_is_a_line(tmp_path: Path) -> None:
    p = _write(tmp_path / "d", b'{"seq":1}\n{"seq":2}')
    assert list(iter_chunks(p)) == [(1, [b'{"seq":1}'], False), (2, [b'{"seq":2}'], False)]


def test_iter_chunks_only_a_torn_fragment(tmp_path: Path) -> None:
    assert list(iter_chunks(_write(tmp_path / "d", b"{"))) == [(1, [], True)]


def test_iter_chunks_line_across_the_chunk_boundary(tmp_path: Path) -> None:
    a = b"a" * (CHUNK - 10)
    b = b"b" * 20
    p = _write(tmp_path / "d", a + b"\n" + b + b"\n" + b"ccccc\n" + b"{")
    assert list(iter_chunks(p)) == [(1, [a], False), (2, [b, b"ccccc"], False),
                                    (4, [], True)]


def test_iter_chunks_line_longer_than_a_chunk_comes_as_its_first_chunk(tmp_path: Path) -> None:
    """A line longer than CHUNK (a run of NUL bytes a crash left, say) is no ledger line:
    it comes as its first CHUNK bytes, so no reader holds more of it."""
    a = b"a" * (CHUNK + 5)
    p = _write(tmp_path / "d", a + b"\n" + b"12")
    assert list(iter_chunks(p)) == [(1, [a[:CHUNK]], False), (2, [b"12"], False)]
    # Longer than two chunks, with lines after it in the chunk where it ends.
    a = b"\0" * (2 * CHUNK + 5)
    p = _write(tmp_path / "d", a + b"\n[1]\n{")
    assert list(iter_chunks(p)) == [(1, [a[:CHUNK], b"[1]"], False), (3, [], True)]
    # Never ended: a torn fragment, however whole its first CHUNK bytes look.
    p = _write(tmp_path / "d", b"[1]\n" + b"7" * (CHUNK + 1))
    assert list(iter_chunks(p)) == [(1, [b"[1]"], False), (2, [], True)]


# --- iter_blocks -------------------------------------------------------------------


def test_iter_blocks_empty_file_yields_nothing(tmp_path: Path) -> None:
    assert _blocks(_write(tmp_path / "d", b"")) == []


def test_iter_blocks_complete_lines_are_one_block(tmp_path: Path) -> None:
    p = _write(tmp_path / "d", b'{"seq":1}\n{"seq":2}\n')
    assert _blocks(p) == [(b'{"seq":1}\n{"seq":2}\n', False)]


def test_iter_blocks_torn_tail(tmp_path: Path) -> None:
    p = _write(tmp_path / "d", b'{"seq":1}\n{"se')
    assert _blocks(p) == [(b'{"seq":1}\n', False), (b'{"se', True)]


def test_iter_blocks_whole_tail_gets_its_newline(tmp_path: Path) -> None:
    p = _write(tmp_path / "d", b'{"seq":1}\n{"seq":2}')
    assert _blocks(p) == [(b'{"seq":1}\n', False), (b'{"seq":2}\n', False)]


def test_iter_blocks_only_a_fragment(tmp_path: Path) -> None:
    assert _blocks(_write(tmp_path / "d", b"[1,")) == [(b"[1,", True)]
    assert _blocks(_write(tmp_path / "e", b"[1]")) == [(b"[1]\n", False)]


def test_a_fragment_cut_after_a_number_no_float_holds_is_torn(tmp_path: Path) -> None:
    """The decoder stops at such a number (1e999, 5,000 digits) before the fragment's end:
    a fragment cut after one is torn all the same, not a whole line (which every reader
    would skip as unreadable and verify would call a break)."""
    for frag in (b'{"seq":1,"n":1e999', b'{"n":1e999,"seq":1,"ha', b"[" + b"9" * 5000):
        assert is_whole(frag) is False
        p = _write(tmp_path / "d", b'{"seq":0}\n' + frag)
        assert list(iter_chunks(p)) == [(1, [b'{"seq":0}'], False), (2, [], True)]
        assert _blocks(p) == [(b'{"seq":0}\n', False), (frag, True)]


def test_iter_blocks_line_across_the_buffer_boundary(tmp_path: Path) -> None:
    a = b"a" * (CHUNK - 10) + b"\n"
    b = b"b" * 20 + b"\n"
    p = _write(tmp_path / "d", a + b + b"{")
    assert _blocks(p) == [(a, False), (b, False), (b"{", True)]


def test_iter_blocks_line_longer_than_the_buffer_comes_as_its_first_chunk(tmp_path: Path
                                                                        ) -> None:
    a = b"a" * (2 * CHUNK + 7) + b"\n"
    p = _write(tmp_path / "d", a + b"xy\n" + b'{"s')
    assert _blocks(p) == [(a[:CHUNK] + b"\n", False), (b"xy\n", False), (b'{"s', True)]
    # Exactly one buffer long: whole.
    a = b"b" * CHUNK + b"\n"
    p = _write(tmp_path / "d", b"[1]\n" + a + b"[2]\n")
    assert _blocks(p) == [(b"[1]\n", False), (a, False), (b"[2]\n", False)]
    # Never ended: a fragment of its first CHUNK bytes.
    p = _write(tmp_path / "d", b"[1]\n" + b"7" * (CHUNK + 1))
    assert _blocks(p) == [(b"[1]\n", False), (b"7" * CHUNK, True)]


def test_iter_blocks_file_of_exactly_one_buffer(tmp_path: Path) -> None:
    a = b"a" * (CHUNK - 1) + b"\n"
    p = _write(tmp_path / "d", a + b"[2]")
    assert _blocks(p) == [(a, False), (b"[2]\n", False)]


# --- read_tail ---------------------------------------------------------------------


def _lines(*objs: bytes) -> bytes:
    return b"".join(o + b"\n" for o in objs)


def test_read_tail_empty_file(tmp_path: Path) -> None:
    assert read_tail(_write(tmp_path / "d", b"")) == FileTail(None, None, None, 0)


def test_read_tail_no_newline_is_all_torn(tmp_path: Path) -> None:
    p = _write(tmp_path / "d", b'{"seq":1}')
    assert read_tail(p) == FileTail(None, None, b'{"seq":1}', 9)
    assert read_tail(p, block=4) == FileTail(None, None, b'{"seq":1}', 9)
    # All of it, even when all but its last byte would read as a line.
    p = _write(tmp_path / "e", b'{"seq":1,"hash":"h"}}')
    assert read_tail(p) == FileTail(None, None, b'{"seq":1,"hash":"h"}}', 21)


@pytest.mark.parametrize("block", [1, 3, 4, 7, 16, 1 << 16])
def test_read_tail_last_line_and_torn_fragment(tmp_path: Path, block: int) -> None:
    data = _lines(b'{"seq":1,"hash":"h1"}', b'{"seq":2,"hash":"h2"}',
                  b'{"seq":3,"hash":"h3"}') + b'{"seq":4,"ha'
    p = _write(tmp_path / "d", data)
    assert read_tail(p, block=block) == FileTail(3, "h3", b'{"seq":4,"ha', len(data))


@pytest.mark.parametrize("block", [1, 5, 9, 1 << 16])
def test_read_tail_skips_unreadable_lines_back_to_a_good_one(tmp_path: Path,
                                                             block: int) -> None:
    data = _lines(b'{"seq":1,"hash":"h1"}', b'{"seq":2}', b"garbage", b"",
                  b'{"seq":"x"}', DEEP, b'{"nope":1}')
    p = _write(tmp_path / "d", data)
    assert read_tail(p, block=block) == FileTail(2, None, None, len(data))


@pytest.mark.parametrize("block", [1, 2, 8, 1 << 16])
def test_read_tail_nothing_readable(tmp_path: Path, block: int) -> None:
    data = _lines(b"garbage", b"x") + b"torn"
    p = _write(tmp_path / "d", data)
    assert read_tail(p, block=block) == FileTail(None, None, b"torn", len(data))


def test_read_tail_never_decodes_the_cut_end_of_a_line(tmp_path: Path) -> None:
    # `1 {"seq":9}` is no line the ledger can read, but its last nine bytes are; a block
    # that starts inside it must not mistake that end for a whole line.
    data = _lines(b'{"seq":2,"hash":"h2"}', b'1 {"seq":9}')
    p = _write(tmp_path / "d", data)
    for block in (9, 10, 11, 1 << 16):
        assert read_tail(p, block=block) == FileTail(2, "h2", None, len(data)), block


def test_read_tail_first_line_only(tmp_path: Path) -> None:
    data = _lines(b'{"seq":5,"hash":"abc"}')
    p = _write(tmp_path / "d", data)
    for block in (1, 6, 22, 23, 1 << 16):
        assert read_tail(p, block=block) == FileTail(5, "abc", None, 23), block


def test_read_tail_line_longer_than_the_block(tmp_path: Path) -> None:
    data = _lines(b'{"seq":1}', b'{"seq":7,"hash":"' + b"f" * 100 + b'"}', b"xx") + b"t"
    p = _write(tmp_path / "d", data)
    assert read_tail(p, block=4) == FileTail(7, "f" * 100, b"t", len(data))


def test_a_symlink_loop_with_a_day_name_is_a_stray(tmp_path: Path) -> None:
    # Asking whether it is a regular file raises ELOOP: not a day file, and no crash.
    (tmp_path / "2026-06-15.jsonl").symlink_to("2026-06-15.jsonl")
    (tmp_path / "2026-06-16.jsonl").write_bytes(b"")
    listing = list_day_files(str(tmp_path))
    assert listing.days == [("2026-06-16", f"{tmp_path}/2026-06-16.jsonl")]
    assert listing.strays == ["2026-06-15.jsonl"]


def test_iter_blocks_newline_as_the_first_byte(tmp_path: Path) -> None:
    assert _blocks(_write(tmp_path / "d", b"\n")) == [(b"\n", False)]
    assert _blocks(_write(tmp_path / "e", b"\n{")) == [(b"\n", False), (b"{", True)]
    assert list(iter_chunks(str(tmp_path / "e"))) == [(1, [b""], False), (2, [], True)]


@pytest.mark.parametrize("block", [1, 7, 1 << 16])
def test_read_tail_names_the_highest_damaged_seq_after_the_last_good_line(
        tmp_path: Path, block: int) -> None:
    # Lines after the last readable one whose hash is damaged: their seqs were issued.
    data = _lines(b'{"seq":1,"hash":"h1"}', b'{"seq":2,"hash":"h2"}', b'{"seq":4,"hash":7}',
                  b"garbage", b'{"seq":3,"hash":[]}') + b'{"seq":9,"ha'
    p = _write(tmp_path / "d", data)
    assert read_tail(p, block=block) == FileTail(2, "h2", b'{"seq":9,"ha', len(data), 4)
    # One no higher than the good line's seq (the file was edited) names nothing.
    data = _lines(b'{"seq":5,"hash":"h5"}', b'{"seq":5,"hash":1}', b'{"seq":4,"hash":1}')
    p = _write(tmp_path / "e", data)
    assert read_tail(p, block=block) == FileTail(5, "h5", None, len(data), None)
    # No readable line at all: the damaged seq still comes back.
    data = _lines(b'{"seq":6,"hash":false}', b'{"seq":8,"hash":0}', b"x")
    p = _write(tmp_path / "f", data)
    assert read_tail(p, block=block) == FileTail(None, None, None, len(data), 8)


def test_highest_line_is_the_line_of_the_highest_seq(tmp_path: Path) -> None:
    # A line copied below later ones: the highest seq wins, not the last line; the first
    # of two lines with the same seq; unreadable lines and a torn tail are skipped.
    data = _lines(b'{"seq":1,"hash":"h1"}', b'{"seq":3,"hash":"h3"}', b"garbage", DEEP,
                  b'{"seq":"9"}', b'{"seq":3,"hash":"h3b"}', b'{"seq":2,"hash":"h2"}')
    assert highest_line(_write(tmp_path / "a", data + b'{"seq":9,"ha')) == (3, "h3")
    # A whole last line without its newline counts like any other.
    assert highest_line(_write(tmp_path / "b", data + b'{"seq":8,"hash":"h8"}')) == (8, "h8")
    # A damaged or missing hash: the seq was taken, the hash is None.
    assert highest_line(_write(tmp_path / "c", data + _lines(b'{"seq":7,"hash":7}'))) == (
        7, None)
    assert highest_line(_write(tmp_path / "d", _lines(b'{"seq":4}'))) == (4, None)
    assert highest_line(_write(tmp_path / "e", _lines(b'{"seq":0,"hash":"h0"}'))) == (0, "h0")


def test_highest_line_of_a_file_with_no_seq_is_none(tmp_path: Path) -> None:
    for i, data in enumerate((b"", _lines(b"garbage", b'{"hash":"h"}'), b'{"seq":1,"ha')):
        assert highest_line(_write(tmp_path / f"f{i}", data)) is None


def test_a_listed_file_gone_since_is_nothing_when_gone_ok(tmp_path: Path) -> None:
    # A prune may delete a day file between a reader's listing and its read.
    gone = str(tmp_path / "2026-06-15.jsonl")
    assert list(iter_chunks(gone, gone_ok=True)) == []
    assert list(iter_blocks(gone, gone_ok=True)) == []
    with pytest.raises(FileNotFoundError):
        list(iter_chunks(gone))
    with pytest.raises(FileNotFoundError):
        list(iter_blocks(gone))


# --- edges found by mutation testing: opening, iter_blocks, read_tail, highest_line ----


def test_a_listed_path_that_cannot_be_opened_raises_even_when_gone_ok(tmp_path: Path) -> None:
    # Only a file that is gone reads as nothing; any other failure to open it is an error.
    d = tmp_path / "2026-06-15.jsonl"
    d.mkdir()
    with pytest.raises(IsADirectoryError):
        list(iter_chunks(str(d), gone_ok=True))
    with pytest.raises(IsADirectoryError):
        list(iter_blocks(str(d), gone_ok=True))


def test_iter_blocks_yields_memoryviews_for_lines_whole_tails_and_torn_tails(
        tmp_path: Path) -> None:
    whole = [(type(v), t) for v, t in iter_blocks(_write(tmp_path / "d", b'[1]\n{"a":2}'))]
    assert whole == [(memoryview, False), (memoryview, False)]
    torn = [(type(v), t) for v, t in iter_blocks(_write(tmp_path / "e", b'[1]\n{"a":'))]
    assert torn == [(memoryview, False), (memoryview, True)]


def test_is_whole_refuses_a_value_with_invalid_utf8() -> None:
    # Invalid UTF-8 makes it no JSON value, whichever decoder tried it first.
    assert is_whole(b'{"seq":1,"s":"\xff"}') is False
    assert is_whole(memoryview(b'["\xc3"]')) is False


@pytest.mark.parametrize("block", [1, 5, 1 << 16])
def test_read_tail_a_whole_tail_without_its_newline_is_torn_not_the_last_line(
        tmp_path: Path, block: int) -> None:
    # read_tail reports the last complete line; the caller decides whether the tail is
    # whole (is_whole) and so a line missing only its newline.
    head = _lines(b'{"seq":1,"hash":"h1"}')
    p = _write(tmp_path / "d", head + b'{"seq":2,"hash":"h2"}')
    assert read_tail(p, block=block) == FileTail(1, "h1", b'{"seq":2,"hash":"h2"}', 43, None)
    # Nor is a whole tail with a damaged hash a damaged line: the tail is the caller's.
    p = _write(tmp_path / "e", head + b'{"seq":2,"hash":0}')
    assert read_tail(p, block=block) == FileTail(1, "h1", b'{"seq":2,"hash":0}', 40, None)


def test_a_null_hash_is_a_line_without_one_not_a_damaged_line(tmp_path: Path) -> None:
    data = _lines(b'{"seq":2,"hash":"h2"}', b'{"seq":3,"hash":null}')
    p = _write(tmp_path / "d", data)
    assert read_tail(p) == FileTail(3, None, None, len(data), None)
    assert highest_line(p) == (3, None)


def test_a_hash_of_invalid_utf8_is_damaged(tmp_path: Path) -> None:
    # The seq reads (the hash is skipped unread), the hash does not: the seq was taken.
    data = _lines(b'{"seq":2,"hash":"h2"}', b'{"seq":5,"hash":"\xff"}')
    p = _write(tmp_path / "d", data)
    assert highest_line(p) == (5, None)
    assert read_tail(p) == FileTail(2, "h2", None, len(data), 5)


def test_a_line_nested_deeper_than_the_decoder_recurses_is_skipped(tmp_path: Path) -> None:
    # An object whose seq reads before the decoder gives up: RecursionError, not a
    # decode error, and no seq, no damaged seq.
    deep = b'{"seq":9,"x":' + DEEP + b"]" * 100_000 + b"}"
    data = _lines(b'{"seq":1,"hash":"h1"}', deep, b'{"seq":2,"x":' + DEEP)
    p = _write(tmp_path / "d", data)
    assert highest_line(p) == (1, "h1")
    assert read_tail(p) == FileTail(1, "h1", None, len(data), None)


def test_is_whole_refuses_a_value_nested_too_deep_after_a_number_no_float_holds() -> None:
    # The number stops the first decoder before it recurses; the one that skips values
    # unread then recurses too deep: not whole, and no RecursionError escapes.
    frag = b'{"seq":1,"n":1e999,"x":' + DEEP + b"]" * 100_000 + b"}"
    assert is_whole(frag) is False
    assert is_whole(memoryview(frag)) is False


@pytest.mark.parametrize("block", [2, 4, 1 << 16])
def test_read_tail_reads_back_to_a_newline_past_a_carriage_return(tmp_path: Path,
                                                                 block: int) -> None:
    # Only "\n" ends a line: a "\r" in the torn fragment is part of it.
    data = _lines(b'{"seq":1,"hash":"h1"}') + b'{"seq":2,\r"hash"'
    p = _write(tmp_path / "d", data)
    assert read_tail(p, block=block) == FileTail(1, "h1", b'{"seq":2,\r"hash"', len(data))


@pytest.mark.parametrize("value", [b'{"n":1e999,"s":"\xff"}', b'{"s":"\xff","n":1e999}'])
def test_is_whole_refuses_invalid_utf8_whichever_field_comes_first(value: bytes) -> None:
    """A number no float holds stops the first decoder before the end; the one that then
    checks the rest skips strings unread, so invalid UTF-8 after the number passed as a
    whole line, while the same value with its fields swapped did not."""
    assert is_whole(value) is False


def test_iter_blocks_follows_a_file_that_grows_past_its_first_buffer(tmp_path: Path) -> None:
    """The buffer is sized to the file when it opens (a quiet day's file is small); lines
    the daemon appends meanwhile are read all the same, each block whole."""
    path = tmp_path / "2026-11-03.jsonl"
    path.write_bytes(b'{"seq":1}\n')
    blocks = iter_blocks(str(path))
    first, torn = next(blocks)
    assert (bytes(first), torn) == (b'{"seq":1}\n', False)
    more = b"".join(b'{"seq":%d,"pad":"%s"}\n' % (i, b"x" * 300) for i in range(2, 2000))
    with open(path, "ab") as f:
        f.write(more + b'{"seq":2000}')  # and a last line still without its newline
    got = [(bytes(view), torn) for view, torn in blocks]
    assert all(data.endswith(b"\n") and not torn for data, torn in got)
    assert b"".join(data for data, _ in got) == more + b'{"seq":2000}\n'
