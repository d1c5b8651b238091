"""Mutation-test survivors of the config loader (`harness.config.load`), and the bad input
found while reading it: a hand-edited registry whose project name is no name, and the
lines and values a problem quotes. Exact problem text through `load_config`, or through
the real CLI and a real daemon where that is where a user meets it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import World
from daemons import DEADLINE, Daemons
from harness.config.load import ConfigError, Project, list_projects, load_config


def _list(world: World) -> dict[str, str]:
    res = world.harness("list", "--json")
    assert res.returncode == 0, res.stderr
    return {h["name"]: h["kind"] for h in json.loads(res.stdout)}


def test_a_registry_edited_to_a_project_name_that_is_a_path_stops_the_boot(
        world: World, daemons: Daemons) -> None:
    """`harness up` refuses a project name that is no NAME, but projects.json is a file
    anyone can edit: a name "../.." was taken as it is, and its harness became "../../job",
    whose run log path leaves the jobs directory. The boot now stops with exit 2 on one line
    naming the registry, the directory and the `harness down` that drops it; after that
    command the daemon boots and serves the global harness alone."""
    proj = world.root / "proj"
    proj.mkdir()
    (proj / "harness.toml").write_text('[harness.job]\nkind = "oneshot"\nargv = ["true"]\n')
    daemons.write_config('[harness.solo]\nkind = "oneshot"\nargv = ["true"]\n')
    world.state.mkdir(parents=True)
    registry = world.state / "projects.json"
    registry.write_text(json.dumps({"version": 1,
                                    "projects": [{"name": "../..", "dir": str(proj)}]}))
    booted = daemons.start(wait=False)
    assert booted.wait(timeout=DEADLINE) == 2
    assert daemons.stderr() == (
        f"{registry}: the project registered (harness up) at {proj}: '../..' is not a "
        "usable project name (letters, digits, '.', '_', '-'); unregister it with: "
        f"harness down {proj}\n")
    assert not daemons.socket.exists()

    res = world.harness("down", str(proj))
    assert res.returncode == 0, res.stderr
    daemons.start()
    assert _list(world) == {"solo": "oneshot"}


def _problems(path: Path) -> str:
    with pytest.raises(ConfigError) as exc:
        load_config(str(path), projects=[])
    return str(exc.value)


def test_a_workdir_given_as_an_array_is_quoted_as_written(tmp_path: Path) -> None:
    """A type error quotes what the user wrote: an array of relative paths for `workdir`
    (which takes one path) was resolved first, as `env_file`'s array is, and quoted as
    absolute paths the file never held. An `env_file` array still resolves."""
    cfg = tmp_path / "harness.toml"
    cfg.write_text('[harness.a]\nargv = ["true"]\nworkdir = ["w", "~/x"]\n')
    assert _problems(cfg) == (
        f"{cfg}:3: harness.a.workdir: expected a string, got array ['w', '~/x']")
    cfg.write_text('[harness.a]\nargv = ["true"]\nenv_file = ["e", "f/../g"]\n')
    assert load_config(str(cfg), projects=[]).harness["a"].env_file == [
        str(tmp_path / "e"), str(tmp_path / "g")]


def test_a_dropin_dir_that_holds_the_global_file_reads_the_others(tmp_path: Path) -> None:
    """`harness_d = "."` beside harness.toml read the global file again as a drop-in: the
    load failed with its own [server] refused and every harness "already defined in" the
    very file. The global file is not its own drop-in, by any path (here a symlinked
    directory); the other *.toml files there are."""
    real = tmp_path / "real"
    real.mkdir()
    (real / "harness.toml").write_text(
        '[server]\nharness_d = "."\n\n[harness.a]\nargv = ["true"]\n')
    (real / "b.toml").write_text('[harness.b]\nargv = ["true"]\n')
    (tmp_path / "link").symlink_to(real)
    for cfg in (real / "harness.toml", tmp_path / "link" / "harness.toml"):
        config = load_config(str(cfg), projects=[])
        assert sorted(config.harness) == ["a", "b"]
        assert config.origins == {"harness.a": str(cfg),
                                  "harness.b": str(cfg.parent / "b.toml")}


def test_a_file_starting_with_a_byte_order_mark_is_named_so(tmp_path: Path) -> None:
    """A UTF-8 byte order mark (some Windows editors write one, most editors hide it) was
    reported as tomllib's "Invalid statement" on a line that reads as valid TOML. The
    problem now says what is there and how to save the file; a drop-in is told the same."""
    cfg = tmp_path / "harness.toml"
    cfg.write_bytes(b'\xef\xbb\xbf[harness.a]\nargv = ["true"]\n')
    assert _problems(cfg) == (
        f"{cfg}:1: syntax: invalid TOML: the file starts with a byte order mark (U+FEFF); "
        "save it as UTF-8 without one")
    cfg.write_text('[server]\nharness_d = "d"\n')
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "x.toml").write_bytes(b'\xef\xbb\xbf\n[harness.a]\nargv = ["true"]\n')
    assert _problems(cfg) == (
        f"{tmp_path}/d/x.toml:1: syntax: invalid TOML: the file starts with a byte order "
        "mark (U+FEFF); save it as UTF-8 without one")


def test_a_trigger_named_twice_and_defined_nowhere_is_one_problem_line(
        tmp_path: Path) -> None:
    """A trigger repeated in `triggers` is reported as such; when it also names no table,
    the "is not defined" line was printed once per repeat, the same line twice."""
    cfg = tmp_path / "harness.toml"
    cfg.write_text('[harness.a]\nargv = ["x"]\n'
                   'triggers = ["webhook.q", "channel.c", "webhook.q"]\n')
    assert _problems(cfg) == "\n".join([
        f"{cfg}:3: harness.a.triggers: names the same trigger twice",
        f"{cfg}:3: harness.a.triggers: webhook.q is not defined (no [webhook.q] table)",
        f"{cfg}:3: harness.a.triggers: channel.c is not defined (no [channel.c] table)"])


def test_a_key_spelled_with_a_long_unicode_escape_is_placed_on_its_line(
        tmp_path: Path) -> None:
    """Problem lines come from a re-scan of the text that decoded quoted keys as JSON
    strings; JSON has no \\UXXXXXXXX escape, so such a key was not found and its problem
    was put on its table's line (or on line 1, for a table so named)."""
    cfg = tmp_path / "harness.toml"
    cfg.write_text('[harness.a]\nargv = ["x"]\n"\\U00000062og\\tus" = 1\n\n'
                   '["\\U00000068arness".b]\nargv = []\n')
    assert _problems(cfg) == "\n".join([
        f"{cfg}:3: harness.a.bog\\tus: unknown key",
        f"{cfg}:6: harness.b.argv: must be a non-empty list of strings, got array []"])


def test_down_finds_a_project_whose_directory_was_replaced_by_a_symlink(
        world: World) -> None:
    """`up` stores a directory's real path. Once that directory was moved and a symlink put
    at its path (a checkout swapped for a link to a new one), `harness down PATH` resolved
    PATH to the link's target and found no registration, nor did `down TARGET`: the project
    could not be dropped but by editing projects.json. The path as given names it now."""
    old = world.root / "proj"
    old.mkdir()
    (old / "harness.toml").write_text('[harness.w]\nargv = ["true"]\n')
    assert world.harness("up", str(old)).returncode == 0
    new = world.root / "proj2"
    old.rename(new)
    old.symlink_to(new)
    res = world.harness("down", str(new))
    assert (res.returncode, res.stderr) == (1, f"harness: {new} is not a registered project\n")
    res = world.harness("down", str(old))
    assert (res.returncode, res.stdout, res.stderr) == (
        0, f"project proj unregistered ({old})\n"
           "the daemon is not running; its harnesses are gone at its next start\n", "")
    assert json.loads((world.state / "projects.json").read_text()) == {
        "version": 1, "projects": []}


def test_up_writes_the_registry_as_indented_json_ending_in_a_newline(world: World) -> None:
    """projects.json is the one file here a user reads or mends by hand (`harness down`
    names it in its refusals): two-space JSON, one key a line, a final newline."""
    proj = world.root / "proj"
    proj.mkdir()
    (proj / "harness.toml").write_text("")
    assert world.harness("up", str(proj), "--name", "p").returncode == 0
    assert (world.state / "projects.json").read_text() == (
        '{\n  "version": 1,\n  "projects": [\n    {\n      "name": "p",\n'
        f'      "dir": "{proj}"\n    }}\n  ]\n}}\n')


def test_a_registry_reached_through_a_symlink_is_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """projects.json is followed if it is a symlink (a state dir kept among dotfiles), as
    the config files are; only what it leads to must be a regular file."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "harness.toml").write_text('[harness.w]\nargv = ["true"]\n')
    kept = tmp_path / "kept.json"
    kept.write_text(json.dumps({"version": 1, "projects": [{"name": "p", "dir": str(proj)}]}))
    (tmp_path / "state" / "harness").mkdir(parents=True)
    (tmp_path / "state" / "harness" / "projects.json").symlink_to(kept)
    cfg = tmp_path / "harness.toml"
    cfg.write_text("")
    assert list_projects() == [Project("p", str(proj))]
    assert sorted(load_config(str(cfg)).harness) == ["p/w"]


def test_config_files_reached_through_symlinks_are_read(tmp_path: Path) -> None:
    """Config files kept among dotfiles are symlinks: the global file, a drop-in and a
    project's harness.toml are each read through one (only a non-regular target, a FIFO
    or a directory, is refused)."""
    dots = tmp_path / "dotfiles"
    dots.mkdir()
    (dots / "g.toml").write_text(
        f'[server]\nharness_d = "{tmp_path / "d"}"\n\n[harness.g]\nargv = ["true"]\n')
    (dots / "drop.toml").write_text('[harness.dropped]\nargv = ["true"]\n')
    (dots / "proj.toml").write_text('[harness.w]\nargv = ["true"]\n')
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "x.toml").symlink_to(dots / "drop.toml")
    (tmp_path / "harness.toml").symlink_to(dots / "g.toml")
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "harness.toml").symlink_to(dots / "proj.toml")
    config = load_config(str(tmp_path / "harness.toml"), projects=[Project("p", str(proj))])
    assert sorted(config.harness) == ["dropped", "g", "p/w"]


def test_a_value_above_its_bound_names_the_bound(tmp_path: Path) -> None:
    """An integer over its upper bound (a webhook's `max_body`, 25 MiB) is worded as the
    lower bounds are, not in pydantic's words."""
    cfg = tmp_path / "harness.toml"
    cfg.write_text('[webhook.w]\nsecret = "s"\nmax_body = 26214401\n')
    assert _problems(cfg) == f"{cfg}:3: webhook.w.max_body: must be at most 26214400, got 26214401"


def test_an_escaped_quote_in_a_multiline_string_does_not_end_it_for_the_lines(
        tmp_path: Path) -> None:
    """Problem lines come from a re-scan of the text: in a basic string, `\\"` is an
    escaped quote, not the string's end (in a multi-line one, even followed by two more
    quotes); taken as the end, every key after it lost its line."""
    cfg = tmp_path / "harness.toml"
    cfg.write_text('[harness.a]\nargv = ["""a\\"""\nb""", "c\\"[d"]\n\nbogus = 1\n')
    assert _problems(cfg) == f"{cfg}:5: harness.a.bogus: unknown key"


def test_a_syntax_error_at_the_end_of_the_file_is_one_clean_line(tmp_path: Path) -> None:
    """tomllib ends an error at the end of the text with "(at end of document)" rather
    than a line and column: the problem takes the last line and drops those words."""
    cfg = tmp_path / "harness.toml"
    cfg.write_text('[harness.a]\nargv = ["x"]\nnote = "open')
    assert _problems(cfg) == f"{cfg}:3: syntax: invalid TOML: Unterminated string"


def test_each_wrong_type_is_named_in_toml_words(tmp_path: Path) -> None:
    """Every pydantic type error the models can raise reads "expected <a TOML type>, got
    <its TOML type> <value>": a number, a table of strings, a table of prices, an integer
    given as a float."""
    cfg = tmp_path / "harness.toml"
    cfg.write_text('[harness.a]\nargv = ["x"]\nmax_cost_usd = "1"\nkeep_runs = 2.0\n\n'
                   '[channel.c]\nurl = "http://x"\nheaders = 5\n\n'
                   '[budget.prices]\nm = 5\n')
    assert _problems(cfg) == "\n".join([
        f"{cfg}:3: harness.a.max_cost_usd: expected a number, got string '1'",
        f"{cfg}:4: harness.a.keep_runs: expected an integer, got float 2.0",
        f"{cfg}:8: channel.c.headers: expected a table, got integer 5",
        f"{cfg}:11: budget.prices.m: expected a table, got integer 5"])


def test_a_value_nested_too_deeply_among_items_is_placed_on_its_line(tmp_path: Path) -> None:
    """tomllib gives no line for a value nested past its recursion limit; the loader points
    at the line where brackets nest deepest, counting closing ones down, so items between
    the brackets (`[1, [1, ...`) do not move it to the file's first bracket, and a second
    value as deep does not move it past the first."""
    cfg = tmp_path / "harness.toml"
    cfg.write_text('[harness.a]\nargv = ["x"]\n\n[server]\nx = ' + "[1, " * 3000 + "\n")
    assert _problems(cfg) == f"{cfg}:5: syntax: invalid TOML: nested too deeply"
    # Two values as deep: the first is where tomllib stopped.
    deep = "[" * 3000 + "]" * 3000
    cfg.write_text(f'[harness.a]\nargv = ["x"]\n\n[server]\nx = {deep}\ny = {deep}\n')
    assert _problems(cfg) == f"{cfg}:5: syntax: invalid TOML: nested too deeply"


def test_a_harness_declared_twice_is_reported_once_not_for_its_triggers(
        tmp_path: Path) -> None:
    """The second declaration of a name is refused as a duplicate; its triggers are not
    checked too (its table is not the one loaded), so a trigger naming no table there adds
    no line of its own."""
    cfg = tmp_path / "harness.toml"
    cfg.write_text(f'[server]\nharness_d = "{tmp_path / "d"}"\n\n'
                   '[harness.x]\nargv = ["true"]\n')
    (tmp_path / "d").mkdir()
    drop = tmp_path / "d" / "x.toml"
    drop.write_text('[harness.x]\nargv = ["true"]\ntriggers = ["webhook.nope"]\n')
    assert _problems(cfg) == f"{drop}:1: harness.x: harness 'x' is already defined in {cfg}"


def test_a_file_ending_without_a_newline_is_placed(tmp_path: Path) -> None:
    """The last line may end in a comment, a value or a table header with no newline
    after it: the line re-scan stops at the end of the text there (it raised IndexError
    reading one character past it), and every key keeps its line."""
    cfg = tmp_path / "harness.toml"
    cfg.write_text('[harness.a]\nargv = ["x"]\nbogus = 1 # the end')
    assert _problems(cfg) == f"{cfg}:3: harness.a.bogus: unknown key"
    cfg.write_text('[harness.a]\nargv = ["x"]\nbogus = 1\n# the end')
    assert _problems(cfg) == f"{cfg}:3: harness.a.bogus: unknown key"
    cfg.write_text('[harness.a]\nargv = ["x"]\nbogus = 1\n[harness.b]')
    assert _problems(cfg) == "\n".join([f"{cfg}:3: harness.a.bogus: unknown key",
                                        f"{cfg}:4: harness.b.argv: required key is missing"])


def test_a_project_harness_declared_twice_is_named_as_its_file_spells_it(
        tmp_path: Path) -> None:
    """Two registrations under one name (a hand-edited registry) declare `p/w` twice: the
    second is refused at its own line, its key as the file spells it (`harness.w`), and
    the message names the full harness and the first file."""
    dirs = []
    for sub in ("one", "two"):
        d = tmp_path / sub
        d.mkdir()
        (d / "harness.toml").write_text(f'# {sub}\n\n[harness.w]\nargv = ["true"]\n')
        dirs.append(d)
    cfg = tmp_path / "harness.toml"
    cfg.write_text("")
    with pytest.raises(ConfigError) as exc:
        load_config(str(cfg), projects=[Project("p", str(d)) for d in dirs])
    assert str(exc.value) == (f"{dirs[1]}/harness.toml:3: harness.w: harness 'p/w' is already "
                              f"defined in {dirs[0]}/harness.toml")


@pytest.mark.parametrize(("value", "problem"), [
    ('""', "must not be empty"),
    ("5", "expected a string, got integer 5"),
    ('"a\\u0000b"', "'a\\x00b' holds a NUL character, which no path can carry"),
])
def test_a_harness_d_that_names_no_directory_is_one_problem(
        tmp_path: Path, value: str, problem: str) -> None:
    """A `harness_d` that is empty, not a string or holds a NUL is refused by [server]'s
    model alone: no drop-in pass is tried with it (which said "'' is not a directory" as
    well, or raised on an integer)."""
    cfg = tmp_path / "harness.toml"
    cfg.write_text(f"[server]\nharness_d = {value}\n")
    assert _problems(cfg) == f"{cfg}:2: server.harness_d: {problem}"
