"""The control socket protocol (DESIGN.md §2): newline-delimited JSON over a Unix socket,
and which paths such a socket can have (`path_problem`: the server's and client's one
check, so both refuse a path alike, before either creates or connects anything)."""

import os

PROTO = "1.0"
SUN_PATH = 108  # sizeof(sockaddr_un.sun_path) on Linux, its terminating NUL included

# Error codes whose messages are scrubbed where they are made, value by value: config
# problems (``FILE:LINE: KEY: problem``). Scrubbed again whole, as other error messages
# are on both ends, a key named like a credential would take the problem's first word
# for its value ("webhook.w.secret: [REDACTED] not be empty").
SCRUBBED_AT_SOURCE = frozenset({"bad_config"})


def path_problem(path: str) -> str | None:
    """Why no Unix socket can be at `path` (as it will be bound or connected), or None."""
    size = len(os.fsencode(path))
    if size < SUN_PATH:
        return None
    return f"the path is {size} bytes; a Unix socket's path holds at most {SUN_PATH - 1}"
