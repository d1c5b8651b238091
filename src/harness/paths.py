"""Where harness keeps things (DESIGN.md §2): XDG config, state and runtime paths, and the
run logs' places under the state dir (``jobs/<harness>/<run_id>.log``, ``logs/<harness>.log``).

Invariant: every path is derived here and nowhere else; an XDG variable that is unset,
empty or relative means the XDG default under $HOME (the XDG Base Directory spec calls
a relative one invalid, to be ignored: taken as given, it would name a different place
from each working directory, and a daemon and the CLI would not meet); a daemon's runs
are told the socket it serves (`serve_socket`), whichever way that path was chosen.
"""

from __future__ import annotations

import os
from typing import Any

# The socket a daemon in this process serves, when it took one: what its runs'
# HARNESS_SOCKET must say, and what orphans.py matches them by after a crash.
_served_socket: str | None = None


def _xdg_var(var: str) -> str | None:
    # Normalised: a path derived from it is spelled one way whoever derives it (a log
    # path the ledger stored cut is matched against its layout spelling, logref.py).
    v = os.environ.get(var)
    return os.path.normpath(v) if v and os.path.isabs(v) else None


def _xdg(var: str, default: str) -> str:
    return _xdg_var(var) or os.path.join(os.path.expanduser("~"), default)


def config_path(override: str | None = None) -> str:
    if override:
        return override
    env = os.environ.get("HARNESS_CONFIG")
    if env:
        return env
    return os.path.join(_xdg("XDG_CONFIG_HOME", ".config"), "harness", "harness.toml")


def state_dir() -> str:
    return os.path.join(_xdg("XDG_STATE_HOME", ".local/state"), "harness")


def ledger_dir() -> str:
    return os.path.join(state_dir(), "ledger")


def state_of_ledger(ledger: str) -> str:
    """The state dir that holds the run ledger directory `ledger` (SPEC-0022 REQ-1: the
    ledger is the state dir's ``ledger/``): where that ledger's runs keep their logs."""
    return os.path.dirname(os.path.normpath(ledger))


def jobs_dir(state: str | None = None) -> str:
    """Where one-shots keep their per-run logs: ``<state>/jobs`` (default: this process's
    state dir)."""
    return os.path.join(state if state is not None else state_dir(), "jobs")


def run_log_path(jobs: str, harness: str, run_id: int) -> str:
    """A one-shot run's log: ``<jobs>/<harness>/<run_id>.log``."""
    return os.path.join(jobs, harness, f"{run_id}.log")


def resident_log_path(harness: str, state: str | None = None) -> str:
    """The durable log every run of resident `harness` appends to:
    ``<state>/logs/<harness>.log``."""
    return os.path.join(state if state is not None else state_dir(), "logs", f"{harness}.log")


def as_text(path: str) -> str:
    """`path` as JSON can carry it (a ledger line, a control reply). A path is bytes (a
    state home named in Latin-1, say), held as lone surrogates where they are not UTF-8,
    and JSON holds UTF-8 text: each such byte is spelled ``\\xNN``, as git and ls quote
    one, rather than have the line refused or the reply fail."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return path


def texts_of(value: Any) -> Any:
    """A JSON value with each string in it (keys too) spelled as `as_text` spells a path:
    for a reply or a document that names paths, printed or sent whole."""
    if isinstance(value, str):
        return as_text(value)
    if isinstance(value, dict):
        return {texts_of(k): texts_of(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [texts_of(v) for v in value]
    return value


def serve_socket(path: str | None) -> None:
    """Make `path` the answer of every later `socket_path()` without an override, in this
    process (None: back to the environment and the XDG default)."""
    global _served_socket
    _served_socket = path


def socket_path(override: str | None = None) -> str:
    if override:
        return override
    if _served_socket:
        return _served_socket
    env = os.environ.get("HARNESS_SOCKET")
    if env:
        return env
    runtime = _xdg_var("XDG_RUNTIME_DIR")
    if runtime:
        return os.path.join(runtime, "harness.sock")
    return os.path.join(state_dir(), "harness.sock")
