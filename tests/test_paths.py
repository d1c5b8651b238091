"""DESIGN.md §2's paths as the real CLI resolves them: the XDG defaults under $HOME when
a variable is unset, empty or relative (the XDG Base Directory spec: a relative path is
invalid and ignored), the variables when set, and the overrides above them.

Each case runs `harness` in an environment built from nothing but PATH and HOME, and
reads the path from what the command says: `ledger verify --json` names the ledger it
looked for, a command that needs the daemon names the socket it tried, and a daemon
refusing a broken config names the file it read.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BROKEN_TOML = "oops = [\n"


def run(home: Path, *args: str, cwd: Path | None = None, **env: str
        ) -> subprocess.CompletedProcess[str]:
    base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "TZ": "UTC"}
    return subprocess.run([sys.executable, "-m", "harness.cli", *args],
                          env={**base, **env}, cwd=cwd or home, capture_output=True,
                          text=True, timeout=60)


def ledger_looked_at(home: Path, cwd: Path | None = None, **env: str) -> str:
    r = run(home, "ledger", "verify", "--json", cwd=cwd, **env)
    assert r.returncode == 1, r.stderr  # no ledger anywhere in this world
    return str(json.loads(r.stdout)["ledger"])


def socket_tried(home: Path, *args: str, **env: str) -> str:
    r = run(home, *args, "jobs", **env)
    assert r.returncode == 1, r.stderr
    prefix, rest = "harness: daemon not running (", r.stderr.strip()
    assert rest.startswith(prefix) and rest.endswith("); start it with `harness daemon`"), rest
    return rest[len(prefix):rest.index(");")]


@pytest.fixture
def home(tmp_path: Path) -> Path:
    h = tmp_path / "home"
    h.mkdir()
    return h


@pytest.mark.parametrize("value", [None, "", "state", "./state", "~/state"])
def test_an_unset_empty_or_relative_state_home_means_the_default_under_home(
        home: Path, value: str | None) -> None:
    env = {} if value is None else {"XDG_STATE_HOME": value}
    (home / "state").mkdir()  # a relative value would find this, from HOME as the cwd
    assert ledger_looked_at(home, **env) == f"{home}/.local/state/harness/ledger"
    # Also what `harness runs` reads, and from another working directory the same.
    r = run(home, "runs", cwd=home / "state", **env)
    assert r.returncode == 0
    assert r.stderr == ("harness: daemon not running; read the ledger from disk "
                        f"({home}/.local/state/harness/ledger)\n")


def test_an_absolute_state_home_is_used(home: Path, tmp_path: Path) -> None:
    assert ledger_looked_at(home, XDG_STATE_HOME=str(tmp_path / "st")) == \
        f"{tmp_path}/st/harness/ledger"


def test_a_state_home_is_spelled_one_way(home: Path, tmp_path: Path) -> None:
    """Paths derived from it (a run's log path, matched by logref against its layout)
    must not differ by a "//" or "/./" in how the variable was written."""
    assert ledger_looked_at(home, XDG_STATE_HOME=f"{tmp_path}//st/./x/..") == \
        f"{tmp_path}/st/harness/ledger"


@pytest.mark.parametrize("value", [None, "", "run"])
def test_without_a_usable_runtime_dir_the_socket_is_in_the_state_dir(
        home: Path, tmp_path: Path, value: str | None) -> None:
    env = {} if value is None else {"XDG_RUNTIME_DIR": value}
    assert socket_tried(home, **env) == f"{home}/.local/state/harness/harness.sock"
    assert socket_tried(home, XDG_STATE_HOME=str(tmp_path / "st"), **env) == \
        f"{tmp_path}/st/harness/harness.sock"


def test_the_runtime_dir_holds_the_socket_and_the_overrides_beat_it(
        home: Path, tmp_path: Path) -> None:
    rt = str(tmp_path / "rt")
    assert socket_tried(home, XDG_RUNTIME_DIR=rt) == f"{rt}/harness.sock"
    assert socket_tried(home, XDG_RUNTIME_DIR=rt, HARNESS_SOCKET="/x/env.sock") == \
        "/x/env.sock"
    assert socket_tried(home, "--socket", "/x/flag.sock", XDG_RUNTIME_DIR=rt,
                        HARNESS_SOCKET="/x/env.sock") == "/x/flag.sock"


def broken_config_at(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(BROKEN_TOML)


def daemon_refuses(home: Path, *args: str, **env: str) -> str:
    """The file a daemon named when it refused a broken config (exit 2, before it serves)."""
    r = run(home, *args, "daemon", **env)
    assert r.returncode == 2, (r.returncode, r.stderr)
    first = r.stderr.splitlines()[0]
    assert first.endswith(":2: syntax: invalid TOML: Invalid value"), first
    return first.rsplit(":2:", 1)[0]


@pytest.mark.parametrize("value", [None, "", "cfg"])
def test_an_unset_empty_or_relative_config_home_means_the_default_under_home(
        home: Path, value: str | None) -> None:
    broken_config_at(home / ".config" / "harness" / "harness.toml")
    env = {} if value is None else {"XDG_CONFIG_HOME": value}
    assert daemon_refuses(home, XDG_STATE_HOME=str(home / "st"), **env) == \
        f"{home}/.config/harness/harness.toml"


def test_the_config_home_and_the_overrides_name_the_config(home: Path, tmp_path: Path) -> None:
    for name in ("xdg", "env", "flag"):
        broken_config_at(tmp_path / name / "harness" / "harness.toml")
    env = {"XDG_STATE_HOME": str(home / "st"), "XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    assert daemon_refuses(home, **env) == f"{tmp_path}/xdg/harness/harness.toml"
    env["HARNESS_CONFIG"] = str(tmp_path / "env" / "harness" / "harness.toml")
    assert daemon_refuses(home, **env) == env["HARNESS_CONFIG"]
    flag = str(tmp_path / "flag" / "harness" / "harness.toml")
    assert daemon_refuses(home, "--config", flag, **env) == flag


@pytest.mark.parametrize("flag", ["--config", "--socket"])
def test_an_empty_path_flag_is_refused_and_an_empty_variable_is_unset(
        home: Path, tmp_path: Path, flag: str) -> None:
    """`--config "$CFG"` with CFG unset ran the daemon on the default config, and
    `--socket ""` asked the default daemon, without a word. The flag is refused (exit 2,
    before anything is read or made); an empty HARNESS_CONFIG or HARNESS_SOCKET is unset,
    as an empty variable is to most tools."""
    env = {"XDG_STATE_HOME": str(home / "st"), "XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    for args in ((flag, ""), (f"{flag}=",)):
        for cmd in (("daemon",), ("jobs",), ("runs",)):
            r = run(home, *args, *cmd, **env)
            assert (r.returncode, r.stdout, r.stderr.splitlines()[-1]) == (
                2, "", f"Error: Invalid value for '{flag}': an empty path names no file; "
                       "leave the option out for the default"), cmd
    assert not (home / "st").exists()
    assert socket_tried(home, HARNESS_SOCKET="", HARNESS_CONFIG="", **env) == \
        f"{home}/st/harness/harness.sock"
