"""Where harness keeps things (DESIGN.md §2): XDG config, state and runtime paths.

Invariant: every path is derived here and nowhere else; an XDG variable that is unset,
empty or relative means the XDG default under $HOME (the XDG Base Directory spec calls
a relative one invalid, to be ignored: taken as given, it would name a different place
from each working directory, and a daemon and the CLI would not meet); a daemon's runs
are told the socket it serves (`serve_socket`), whichever way that path was chosen.
"""

from __future__ import annotations

import os

# The socket a daemon in this process serves, when it took one: what its runs'
# HARNESS_SOCKET must say, and what orphans.py matches them by after a crash.
_served_socket: str | None = None


def _xdg_var(var: str) -> str | None:
    v = os.environ.get(var)
    return v if v and os.path.isabs(v) else None


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
