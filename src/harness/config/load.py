"""Loading harness.toml: files, precedence, merging, the project registry and error reports.

What is read, in order (DESIGN.md §2-§3, SPEC-0022 REQ-19):

1. the global file (``config_path()``: ``--config``, ``HARNESS_CONFIG``, or
   ``$XDG_CONFIG_HOME/harness/harness.toml``); a *default* file that is not there (no
   entry at all, nor a dangling symlink) is an empty config; a default file that is there
   but cannot be read (a dangling symlink, a directory that cannot be searched) and a
   missing file named explicitly are errors;
2. the drop-ins: ``*.toml`` in ``[server] harness_d``, in name order; each may carry only
   ``[harness.*]``, ``[webhook.*]`` and ``[channel.*]``, and one that cannot be read (a
   dangling symlink, a directory, a FIFO) is an error;
3. the projects registered with ``harness up`` (``projects.json`` in the state dir): each
   project's ``DIR/harness.toml`` may carry only ``[harness.*]``, whose names become
   ``PROJECT/NAME``, and no schedule, triggers, operating hours or budgets — those are the
   operator's to grant, in the global file. ``[ledger]`` anywhere but the global file is
   rejected as "configured globally". A project whose file is not there (its directory
   deleted or moved without ``harness down``) fails the load like any project file that
   does not load, its problem naming the registration and the ``harness down DIR`` that
   drops it.

Relative ``workdir``, ``env_file`` and ``harness_d`` paths resolve against the directory of
the file that declares them, and ``~`` expands; a project harness without ``workdir`` runs
in its project directory. A name declared twice (in any two files) is an error.

Errors: ``load_config`` validates everything it can and raises one ``ConfigError`` whose
lines read ``FILE:LINE: KEY: problem`` (KEY dotted as in the file, e.g.
``harness.nightly.timeout``). tomllib keeps no positions, so ``_key_lines`` re-scans the
TOML text for table headers and keys; a key it cannot place (inside an inline table)
takes the line of its nearest placed parent. Rules that span keys of one table are
checked only once the table's keys are individually valid. A problem is printed, logged
by the daemon and sent to `harness reload`: every value it quotes (``durations.shown``)
and its key (``durations.shown_key``) pass the secret scrubber first, so a token pasted
in the wrong place is never repeated, and are cut past ``QUOTE_MAX`` characters, so a
1 MB string makes no 1 MB line.

Invariant: loading has no side effects. It only reads files, and it either returns a
complete, valid Config or raises; so a reload that fails leaves the caller's last good
Config in force simply by the caller keeping the object it already holds. The registry
functions are the only writers here, and they replace ``projects.json`` atomically (0600).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shlex
import stat
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from harness.config.durations import shown, shown_key, shown_path
from harness.config.model import (
    NAME_RE,
    BudgetConfig,
    ChannelConfig,
    Config,
    HarnessConfig,
    KeyedValueError,
    LedgerConfig,
    ServerConfig,
    WebhookConfig,
    toml_type,
)
from harness.controls import one_line
from harness.ledger.files import atomic_write, make_private_dir, open_regular, why_unreadable
from harness.ledger.schema import name_kept
from harness.ledger.scrub import Scrubbed
from harness.paths import config_path, state_dir

__all__ = [
    "ConfigError",
    "Problem",
    "Project",
    "RegistryError",
    "diff_configs",
    "list_projects",
    "load_config",
    "register_project",
    "registered_at",
    "registry_path",
    "unregister_project",
]

Path = tuple[str, ...]
M = TypeVar("M", bound=BaseModel)

LEDGER_GLOBAL = "the ledger is configured globally, in the daemon's harness.toml"
_PROJECT_FORBIDDEN = {
    "schedule": "a project harness cannot be scheduled; schedules are configured globally",
    "catch_up": "a project harness cannot be scheduled; schedules are configured globally",
    "triggers": "a project harness cannot be triggered; triggers are configured globally",
    "operating_hours": "operating hours are configured globally, not in a project file",
    "hours_shutdown": "operating hours are configured globally, not in a project file",
    "max_runs_per_day": "budgets are configured globally, not in a project file",
    "max_cost_usd": "budgets are configured globally, not in a project file",
    "max_tokens": "budgets are configured globally, not in a project file",
    "daily_cost_usd": "budgets are configured globally, not in a project file",
}
_PROJECT_TABLES = {
    "ledger": LEDGER_GLOBAL,
    "budget": "budgets are configured globally, not in a project file",
    "server": "[server] is configured globally, not in a project file",
    "webhook": "webhooks are configured globally, not in a project file",
    "channel": "channels are configured globally, not in a project file",
}
_DROPIN_ONLY = "a drop-in may carry only [harness.*], [webhook.*] and [channel.*] tables"
_TYPE_NAMES = {
    "string_type": "a string", "int_type": "an integer", "bool_type": "a boolean",
    "float_type": "a number", "list_type": "an array", "dict_type": "a table",
    "model_type": "a table", "int_from_float": "an integer",
}


# ---- errors ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Problem(Scrubbed):
    """One configuration problem; ``line`` is None only for a file that cannot be read.

    Scrubbed where it is made, value by value (`shown`, `shown_key`, `shown_path`): a
    log line quoting it does not scrub it again, which would take the problem's first
    word for the value of a key named like a credential ("secret: [REDACTED] not be
    empty")."""

    file: str
    line: int | None
    key: str
    message: str

    def __str__(self) -> str:
        # The file is a registered project's directory, or a path the user passed. One
        # line, its controls spelled out: a file or key name can hold a newline or an
        # escape sequence, and the problem is printed and logged by the daemon as it is.
        where = shown_path(self.file)
        if self.line is None:
            return one_line(f"{where}: {self.message}")
        return one_line(f"{where}:{self.line}: {self.key}: {self.message}")


class ConfigError(Exception):
    """Every problem a load found, one ``FILE:LINE: KEY: problem`` per line."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = tuple(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


class RegistryError(Exception):
    """``harness up``/``down`` could not register or unregister a project, or read the registry."""

    def __init__(self, path: str, reason: str) -> None:
        # `path` is the directory the user passed to `up`/`down` (or the registry's own);
        # `reason` quotes names through `shown`.
        super().__init__(f"{shown_path(path)}: {reason}")
        self.path = path
        self.reason = reason


# ---- key positions -----------------------------------------------------------------------

_BARE = re.compile(r"[A-Za-z0-9_-]+")
# A basic string's escapes, TOML's own: JSON's lack \UXXXXXXXX, and a key spelled with one
# was not found, its problem put on the line of its table, or on line 1.
_ESCAPE = re.compile(r"\\(?:u([0-9A-Fa-f]{4})|U([0-9A-Fa-f]{8})|(.))")
_ESCAPES = {"b": "\b", "t": "\t", "n": "\n", "f": "\f", "r": "\r", '"': '"', "\\": "\\"}


def _unescape(m: re.Match[str]) -> str:
    code = m[1] or m[2]
    # Only called on text tomllib has accepted: a code is a Unicode scalar value.
    return chr(int(code, 16)) if code else _ESCAPES.get(m[3], m[0])


def _parse_key(text: str, i: int) -> tuple[Path, int]:
    """A (dotted, possibly quoted) key starting at ``i``; stops before ``=`` or ``]``."""
    parts: list[str] = []
    n = len(text)
    while i < n:
        while i < n and text[i] in " \t":
            i += 1
        if i < n and text[i] == '"':
            j = i + 1
            buf = []
            while j < n and text[j] != '"' and text[j] != "\n":
                if text[j] == "\\" and j + 1 < n:
                    buf.append(text[j:j + 2])
                    j += 2
                    continue
                buf.append(text[j])
                j += 1
            parts.append(_ESCAPE.sub(_unescape, "".join(buf)))
            i = j + 1
        elif i < n and text[i] == "'":
            j = text.find("'", i + 1)
            j = n if j < 0 else j
            parts.append(text[i + 1:j])
            i = j + 1
        else:
            m = _BARE.match(text, i)
            if not m:
                break
            parts.append(m.group())
            i = m.end()
        while i < n and text[i] in " \t":
            i += 1
        if i < n and text[i] == ".":
            i += 1
            continue
        break
    return tuple(parts), i


def _skip_value(text: str, i: int, line: int) -> tuple[int, int]:
    """Skip one value (strings, nested arrays/inline tables, comments); return (i, line)."""
    n = len(text)
    depth = 0
    while i < n:
        c = text[i]
        if c == "\n":
            if depth == 0:
                return i, line
            line += 1
            i += 1
        elif c == "#":
            while i < n and text[i] != "\n":
                i += 1
        elif text.startswith('"""', i) or text.startswith("'''", i):
            q = text[i:i + 3]
            j = i + 3
            while j < n and not text.startswith(q, j):
                j += 2 if q == '"""' and text[j] == "\\" else 1
            while text.startswith(q[0], j + 3):  # up to two quotes may close the string
                j += 1
            line += text.count("\n", i, min(j + 3, n))
            i = j + 3
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if c == '"' and text[j] == "\\" else 1
            i = j + 1
        elif c in "[{":
            depth += 1
            i += 1
        elif c in "]}":
            depth -= 1
            i += 1
        else:
            i += 1
    return i, line


def _key_lines(text: str) -> dict[Path, int]:
    """The 1-based line of every table header and key (first occurrence), by dotted path."""
    lines: dict[Path, int] = {}
    table: Path = ()
    i, n, line = 0, len(text), 1

    def record(path: Path) -> None:
        for k in range(1, len(path) + 1):
            lines.setdefault(path[:k], line)

    while i < n:
        c = text[i]
        if c == "\n":
            line += 1
            i += 1
        elif c in " \t\r":
            i += 1
        elif c == "#":
            while i < n and text[i] != "\n":
                i += 1
        elif c == "[":
            i += 2 if text.startswith("[[", i) else 1
            table, i = _parse_key(text, i)
            record(table)
            while i < n and text[i] != "\n":
                i += 1
        else:
            key, j = _parse_key(text, i)
            if not key:  # not TOML we understand; tomllib has already accepted it, so skip
                while i < n and text[i] != "\n":
                    i += 1
                continue
            record(table + key)
            i, line = _skip_value(text, j + 1 if j < n and text[j] == "=" else j, line)
    return lines


def _deepest_line(text: str) -> int:
    """The line where brackets and braces nest deepest: where a value nested too deeply
    for tomllib is (strings and comments are not told apart; it only points the reader)."""
    depth = deepest = 0
    line = at = 1
    for c in text:
        if c == "\n":
            line += 1
        elif c in "[{":
            depth += 1
            if depth > deepest:
                deepest, at = depth, line
        elif c in "]}":
            depth -= 1
    return at


@dataclass
class _File:
    """One file being loaded: where its keys are, and the problems found in it."""

    path: str
    lines: dict[Path, int] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)
    project: Project | None = None  # the registered project whose file this is

    def line_of(self, path: Path) -> int:
        for k in range(len(path), 0, -1):
            if path[:k] in self.lines:
                return self.lines[path[:k]]
        return 1

    def add(self, path: Path, message: str) -> None:
        # The key is scrubbed and cut on its own (a message quotes values through
        # `shown`): a table named with a pasted token is found by its line, not by its
        # name, and a 1 MB key does not make a 1 MB line.
        key = shown_key(path) or "(top)"
        self.problems.append(Problem(self.path, self.line_of(path), key, message))

    def read(self) -> dict[str, Any] | None:
        try:
            # Followed if a symlink (dotfiles), but never blocking: a FIFO named like a
            # drop-in would hang the boot, or a reload, waiting for a writer.
            with open_regular(self.path, follow=True) as fh:
                raw = fh.read()
        except OSError as exc:
            why = _cannot_read(self.path, exc)
            if self.project is not None and isinstance(exc, FileNotFoundError):
                why += f": {_project_gone(self.project)}"
            self.problems.append(Problem(self.path, None, "", why))
            return None
        except ValueError:  # a NUL in a project's directory, from a hand-edited registry
            self.problems.append(Problem(self.path, None, "", "the path holds a NUL character"))
            return None
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            line = raw[:exc.start].count(b"\n") + 1
            self.problems.append(Problem(self.path, line, "syntax", "not valid UTF-8"))
            return None
        if text.startswith("\ufeff"):
            # Written by some Windows editors and invisible in most: tomllib's "Invalid
            # statement" at line 1 pointed at a line that reads as valid.
            self.problems.append(Problem(self.path, 1, "syntax", "invalid TOML: the file "
                                         "starts with a byte order mark (U+FEFF); save it "
                                         "as UTF-8 without one"))
            return None
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            msg = str(exc)
            m = re.search(r"\s*\(at line (\d+), column \d+\)$", msg)
            if m:
                line, msg = int(m.group(1)), msg[:m.start()]
            else:
                line, msg = text.count("\n") + 1, re.sub(r"\s*\(at end of document\)$", "", msg)
            self.problems.append(Problem(self.path, line, "syntax", f"invalid TOML: {msg}"))
            return None
        except RecursionError:  # tomllib recurses once per level of nesting
            self.problems.append(Problem(self.path, _deepest_line(text), "syntax",
                                         "invalid TOML: nested too deeply"))
            return None
        self.lines = _key_lines(text)
        return data

    def validate(self, model: type[M], data: Any, path: Path) -> M | None:
        """Validate one table, reporting each failure under ``path``; None if it failed."""
        try:
            return model.model_validate(data)
        except ValidationError as exc:
            for err in exc.errors():
                # List indexes are not TOML keys: `argv.0` is reported as `argv`, and the
                # message quotes the offending value instead.
                loc = path + tuple(str(p) for p in err["loc"] if not isinstance(p, int))
                ctx = err.get("ctx") or {}
                inner = ctx.get("error")
                if isinstance(inner, KeyedValueError):
                    for key, msg in inner.problems:
                        self.add((*loc, key), msg)
                else:
                    self.add(loc, _message(err))
            return None


def _dangling_link(path: str) -> str | None:
    """`path`, or the nearest directory above it that is there, when that is a symlink
    whose target is not (a dotfiles link whose target was moved); None otherwise."""
    p = path
    while True:
        try:
            st = os.lstat(p)
        except FileNotFoundError:
            parent = os.path.dirname(p)
            if not parent or parent == p:
                return None
            p = parent
            continue
        except OSError:
            return None
        return p if stat.S_ISLNK(st.st_mode) and not os.path.exists(p) else None


def _absent(path: str) -> bool:
    """Whether nothing is at `path`: the one case where the default config path is an
    empty config. Anything else that stops the read (a dangling symlink, a directory that
    cannot be searched, a file where a directory should be) is a problem to report: read
    as "no config", it made a reload stop every harness and a boot start none."""
    try:
        os.lstat(path)
    except FileNotFoundError:
        return _dangling_link(path) is None
    except OSError:
        return False
    return False


def _cannot_read(path: str, exc: OSError) -> str:
    """Why `path` could not be read, as a problem says it: in state.json's words
    ("cannot read: it is a FIFO, not a regular file"), a dangling symlink named."""
    why = f"cannot read: {why_unreadable(path, exc)}"
    link = _dangling_link(path) if isinstance(exc, FileNotFoundError) else None
    if link is not None:
        try:
            target = os.readlink(link)
        except OSError:
            target = "?"
        which = "a symlink" if link == path else f"{shown_path(link)} is a symlink"
        why += f" ({which} to {shown_path(target)}, which is not there)"
    return why


def _project_gone(project: Project) -> str:
    """What to do about a registered project whose harness.toml is not there: its
    directory was deleted or moved (the usual case: a checkout removed without `harness
    down`), or the file alone went. The load still fails, as for any project file that
    does not load; the problem says which registration it is and how to drop it."""
    where = shown_path(project.dir)
    what = ("which is not there any more" if not os.path.isdir(project.dir)
            else "which has no harness.toml any more")
    return (f"project {shown(project.name, cut=True)} is registered (harness up) at "
            f"{where}, {what}; restore it, or unregister it with: harness down "
            f"{shlex.quote(where)}")


def _bad_registration(project: Project) -> str:
    """Why a registered project's name is refused, and the `harness down` that drops it."""
    where = shown_path(project.dir)
    return (f"the project registered (harness up) at {where}: "
            f"{project_name_problem(project.name)}; unregister it with: harness down "
            f"{shlex.quote(where)}")


def _message(err: Any) -> str:
    kind, value, ctx = err["type"], err.get("input"), err.get("ctx") or {}
    if kind == "extra_forbidden":
        return "unknown key"
    if kind == "missing":
        return "required key is missing"
    if kind == "literal_error":
        return f"unknown value {shown(value)} (expected {ctx.get('expected')})"
    if kind == "value_error":
        return str(ctx.get("error", err["msg"]))
    if kind in _TYPE_NAMES:
        return f"expected {_TYPE_NAMES[kind]}, got {toml_type(value)} {shown(value)}"
    if kind in ("greater_than_equal", "greater_than", "less_than_equal"):
        bound = {"greater_than_equal": ("at least", "ge"), "greater_than": ("more than", "gt"),
                 "less_than_equal": ("at most", "le")}[kind]
        limit = ctx.get(bound[1])
        if isinstance(limit, float) and limit.is_integer():
            limit = int(limit)  # `more than 0`, not `more than 0.0`, for a float field
        return f"must be {bound[0]} {limit}, got {shown(value)}"
    if kind == "string_too_short":
        return "must not be empty"
    if kind == "string_pattern_mismatch":
        return f"{shown(value)} does not match {ctx.get('pattern')}"
    return str(err["msg"])


# ---- reading one file --------------------------------------------------------------------

def _resolve(value: Any, base: str, *, many: bool = False) -> Any:
    """``~`` and relative paths against the declaring file's directory; non-strings as is
    (and a list as is unless the key takes a list of paths, `many`)."""
    if isinstance(value, str) and value:
        return os.path.normpath(os.path.join(base, os.path.expanduser(value)))
    if many and isinstance(value, list) and all(isinstance(v, str) for v in value):
        return [_resolve(v, base) for v in value]
    return value  # left as written, so a type error quotes what the user wrote


@dataclass
class _Parts:
    """The validated tables of one file, by name (declared names kept even when invalid)."""

    harness: dict[str, HarnessConfig | None] = field(default_factory=dict)
    webhook: dict[str, WebhookConfig | None] = field(default_factory=dict)
    channel: dict[str, ChannelConfig | None] = field(default_factory=dict)
    local_names: dict[str, str] = field(default_factory=dict)  # full harness name -> as in file
    triggers: dict[str, list[str]] = field(default_factory=dict)  # as written, valid or not
    ledger: LedgerConfig | None = None
    budget: BudgetConfig | None = None
    server: ServerConfig | None = None
    harness_d: str | None = None


def _named_tables(f: _File, data: dict[str, Any], kind: str) -> dict[str, Any]:
    tables = data.get(kind, {})
    if not isinstance(tables, dict):
        f.add((kind,), f"expected a table of [{kind}.NAME] tables, got {toml_type(tables)}")
        return {}
    out = {}
    for name, body in tables.items():
        if not NAME_RE.fullmatch(name):
            f.add((kind, name), f"bad name {shown(name)} (letters, digits, '.', '_', '-'; "
                                "at most 64, starting with a letter or digit)")
        elif not isinstance(body, dict):
            f.add((kind, name), f"expected a table, got {toml_type(body)} {shown(body)}")
        else:
            out[name] = body
    return out


def _read_file(f: _File, role: str, project: Project | None = None) -> _Parts | None:
    data = f.read()
    if data is None:
        return None
    parts = _Parts()
    base = os.path.dirname(os.path.abspath(f.path))
    allowed = {"global": {"harness", "ledger", "budget", "server", "webhook", "channel"},
               "dropin": {"harness", "webhook", "channel"},
               "project": {"harness"}}[role]
    for key in data:
        if key in allowed:
            continue
        if key == "ledger":
            f.add((key,), LEDGER_GLOBAL)
        elif role == "project" and key in _PROJECT_TABLES:
            f.add((key,), _PROJECT_TABLES[key])
        elif role == "dropin" and key in ("budget", "server"):
            f.add((key,), _DROPIN_ONLY)
        else:
            f.add((key,), "unknown key")

    for name, body in _named_tables(f, data, "harness").items():
        body = dict(body)
        if role == "project":
            for key in list(body):
                if key in _PROJECT_FORBIDDEN:
                    f.add(("harness", name, key), _PROJECT_FORBIDDEN[key])
                    del body[key]  # reported once here, not again as a cascade below
            body.setdefault("workdir", project.dir if project else base)
        for key, many in (("workdir", False), ("env_file", True)):
            if key in body:
                body[key] = _resolve(body[key], base, many=many)
        full = f"{project.name}/{name}" if project else name
        if not name_kept(full):
            whose, fix = (("this project's name", "register the project under another "
                           "(harness up DIR --name NAME)")
                          if project and not name_kept(project.name)
                          else ("this name", "rename the harness"))
            f.add(("harness", name), f"the run ledger would redact {whose} as a secret (it "
                                     f"reads like a key or a token): {fix}")
            continue
        parts.local_names[full] = name
        trig = body.get("triggers")
        if isinstance(trig, list):
            # Each once: a repeat is the model's to report ("names the same trigger
            # twice"), and checked twice here it repeated the "is not defined" line.
            parts.triggers[full] = list(dict.fromkeys(
                t for t in trig if isinstance(t, str) and "." in t))
        parts.harness[full] = f.validate(HarnessConfig, body, ("harness", name))
    for kind, model in (("webhook", WebhookConfig), ("channel", ChannelConfig)):
        if kind not in allowed:
            continue
        target: dict[str, Any] = getattr(parts, kind)
        for name, body in _named_tables(f, data, kind).items():
            if "env_file" in body:
                body = {**body, "env_file": _resolve(body["env_file"], base, many=True)}
            target[name] = f.validate(model, body, (kind, name))
    if role == "global":
        parts.ledger = f.validate(LedgerConfig, data.get("ledger", {}), ("ledger",))
        parts.budget = f.validate(BudgetConfig, data.get("budget", {}), ("budget",))
        server = data.get("server", {})
        hd = server.get("harness_d") if isinstance(server, dict) else None
        if isinstance(hd, str) and hd and "\0" not in hd:  # else refused by ServerConfig
            # Taken as written even if another [server] key is bad, so the drop-ins are
            # still read and their problems reported in the same pass.
            parts.harness_d = _resolve(hd, base)
            server = {**server, "harness_d": parts.harness_d}
        parts.server = f.validate(ServerConfig, server, ("server",))
    return parts


# ---- the project registry ----------------------------------------------------------------

@dataclass(frozen=True)
class Project:
    """A directory registered with ``harness up``; its harnesses are named ``NAME/...``."""

    name: str
    dir: str

    @property
    def config_file(self) -> str:
        return os.path.join(self.dir, "harness.toml")


def registry_path() -> str:
    return os.path.join(state_dir(), "projects.json")


def list_projects() -> list[Project]:
    """The registered projects, in registration order; none if there is no registry yet."""
    path = registry_path()
    try:
        # Never blocking: a FIFO here would hang every config load (the CLI's, the
        # daemon's boot and reloads) waiting for a writer.
        with open_regular(path, follow=True) as fh:
            raw = json.load(fh)
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise RegistryError(path, "cannot read the project registry: "
                                  f"{why_unreadable(path, exc)}") from exc
    except ValueError as exc:
        raise RegistryError(path, "cannot read the project registry: "
                                  f"{shown_path(str(exc))}") from exc
    except RecursionError:  # the decoder recurses once per level of nesting
        raise RegistryError(path, "cannot read the project registry: JSON nested too "
                                  "deeply") from None
    try:
        return [Project(str(p["name"]), str(p["dir"])) for p in raw["projects"]]
    except (KeyError, TypeError) as exc:
        raise RegistryError(path, "not a project registry (no projects list)") from exc


@contextlib.contextmanager
def _registry_lock() -> Iterator[None]:
    """Serialise ``harness up``/``down``: each is a read-modify-write of the registry.

    The lock is taken on the state directory itself, so no lock file is left behind.
    """
    d = state_dir()
    make_private_dir(d)
    fd = os.open(d, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def _write_registry(projects: list[Project]) -> None:
    path = registry_path()
    body = json.dumps({"version": 1, "projects": [{"name": p.name, "dir": p.dir}
                                                  for p in projects]}, indent=2) + "\n"
    # A reader sees the old registry or the new one, never a torn file.
    atomic_write(path, body.encode("utf-8"))


def project_name_problem(name: str) -> str | None:
    """Why `name` cannot name a project, or None."""
    if not NAME_RE.fullmatch(name):
        # Cut (after the scrub) as well: a name that fails the check may be of any length.
        return (f"{shown(name, cut=True)} is not a usable project name (letters, digits, '.', "
                "'_', '-')")
    if not name_kept(name):
        # Its harnesses are named "<project>/<harness>" on every ledger line: the whole
        # name would be redacted, and every harness in it refused at load.
        return f"{shown(name)} reads like a key or a token, which the run ledger would redact"
    return None


def register_project(directory: str, name: str | None = None) -> Project:
    """Register ``directory`` (``harness up``); idempotent. The name defaults to its basename."""
    real = os.path.realpath(directory)
    if not os.path.isfile(os.path.join(real, "harness.toml")):
        raise RegistryError(real, "no harness.toml in this directory")
    name = name or os.path.basename(real)
    problem = project_name_problem(name)
    if problem:
        raise RegistryError(real, f"{problem}; pass another name")
    with _registry_lock():
        projects = list_projects()
        for p in projects:
            if p.dir == real:
                if p.name == name:
                    return p
                raise RegistryError(real, f"already registered as {shown(p.name)}")
            if p.name == name:
                raise RegistryError(real, f"project name {shown(name)} is already taken by "
                                          f"{shown_path(p.dir)}")
        project = Project(name, real)
        _write_registry([*projects, project])
        return project


def registered_at(directory: str, projects: list[Project]) -> Project | None:
    """The registration ``directory`` names: the one at its real path, as ``up`` stores
    it, or else the one at the path as given, a registered directory since replaced by a
    symlink (``harness down DIR`` found no registration by any path, and the daemon kept
    loading the project through the link)."""
    for spelling in (os.path.realpath(directory), os.path.abspath(directory)):
        found = next((p for p in projects if p.dir == spelling), None)
        if found is not None:
            return found
    return None


def unregister_project(directory: str) -> bool:
    """Forget ``directory`` (``harness down``); whether it was registered."""
    if not os.path.exists(registry_path()):
        return False  # nothing to forget; and `down` must not create the state dir
    with _registry_lock():
        projects = list_projects()
        gone = registered_at(directory, projects)
        if gone is None:
            return False
        _write_registry([p for p in projects if p is not gone])
        return True


# ---- the whole load ----------------------------------------------------------------------

def load_config(path: str | None = None, *, projects: list[Project] | None = None) -> Config:
    """Read, validate and merge every config file; raise ConfigError listing every problem.

    ``path`` overrides ``config_path()``; ``projects`` overrides the registry (tests, and
    a daemon that has just read it).
    """
    explicit = path is not None or bool(os.environ.get("HARNESS_CONFIG"))
    gpath = config_path(path)
    files: list[_File] = []
    loaded: list[tuple[_File, _Parts]] = []

    g = _File(gpath)
    files.append(g)
    gparts: _Parts | None
    if not explicit and _absent(gpath):
        gparts = _Parts(ledger=LedgerConfig(), budget=BudgetConfig(), server=ServerConfig())
    else:
        gparts = _read_file(g, "global")
    if gparts is not None:
        loaded.append((g, gparts))
        if gparts.harness_d is not None:
            if not os.path.isdir(gparts.harness_d):
                g.add(("server", "harness_d"),
                      f"{shown_path(gparts.harness_d)} is not a directory")
            else:
                try:
                    entries = sorted(os.listdir(gparts.harness_d))
                except OSError as exc:
                    g.add(("server", "harness_d"), f"cannot list "
                                                   f"{shown_path(gparts.harness_d)}: "
                                                   f"{exc.strerror or exc}")
                    entries = []
                greal = os.path.realpath(gpath)
                for entry in entries:
                    fp = os.path.join(gparts.harness_d, entry)
                    # Every *.toml is read: one that cannot be (a dangling symlink, a
                    # directory, a FIFO) is a problem, not a file to skip, since
                    # skipping it would make a reload stop the harnesses it declares.
                    # But not the global file itself (`harness_d = "."` beside it): read
                    # again as a drop-in it clashed with itself, every harness "already
                    # defined in" its own file, and its [server] refused.
                    if entry.endswith(".toml") and os.path.realpath(fp) != greal:
                        f = _File(fp)
                        files.append(f)
                        parts = _read_file(f, "dropin")
                        if parts is not None:
                            loaded.append((f, parts))

    if projects is None:
        try:
            projects = list_projects()
        except RegistryError as exc:
            files.append(_File(exc.path, problems=[Problem(exc.path, None, "", exc.reason)]))
            projects = []
    for project in projects:
        if not NAME_RE.fullmatch(project.name):
            # `harness up` refuses such a name, so the registry was edited by hand: its
            # harnesses would be named "../x" or "a/b/x", and a run log path built from
            # one leaves the jobs directory.
            reg = registry_path()
            files.append(_File(reg, problems=[Problem(reg, None, "", _bad_registration(project))]))
            continue
        f = _File(project.config_file, project=project)
        files.append(f)
        parts = _read_file(f, "project", project)
        if parts is not None:
            loaded.append((f, parts))

    merged: dict[str, dict[str, Any]] = {"harness": {}, "webhook": {}, "channel": {}}
    origins: dict[str, str] = {}
    where: dict[str, tuple[_File, Path]] = {}
    for f, parts in loaded:
        for kind in ("harness", "webhook", "channel"):
            for name, model in getattr(parts, kind).items():
                local = parts.local_names.get(name, name) if kind == "harness" else name
                key = f"{kind}.{name}"
                if key in origins:
                    f.add((kind, local),
                          f"{kind} {shown(name)} is already defined in {origins[key]}")
                    continue
                origins[key] = f.path
                where[key] = (f, (kind, local))
                merged[kind][name] = model

    # Checked on the triggers as written, so a harness with other problems still gets this
    # one reported in the same pass.
    for f, parts in loaded:
        for name, written in parts.triggers.items():
            declared = where.get(f"harness.{name}")
            if declared is None or declared[0] is not f:
                continue  # a duplicate, already reported
            hpath = ("harness", parts.local_names[name])
            for trig in written:
                kind, _, target = trig.partition(".")
                if kind not in ("webhook", "channel") or target in merged[kind]:
                    continue
                # The trigger as written, valid or not: scrubbed and cut as a value is.
                f.add((*hpath, "triggers"), f"{shown(trig, quote=False)} is not defined (no "
                                            f"[{kind}.{shown(target, quote=False)}] table)")

    problems = [p for f in files
                for p in sorted(f.problems, key=lambda p: (p.line or 0, p.key))]
    if problems:
        raise ConfigError(problems)
    assert gparts is not None and gparts.ledger and gparts.budget and gparts.server
    return Config(
        harness=merged["harness"], webhook=merged["webhook"], channel=merged["channel"],
        ledger=gparts.ledger, budget=gparts.budget, server=gparts.server,
        origins=origins, files=tuple(f.path for f, _ in loaded if os.path.exists(f.path)),
    )


def diff_configs(old: Config, new: Config) -> tuple[set[str], set[str], set[str], set[str]]:
    """Harness names ``(added, removed, changed, unchanged)`` from ``old`` to ``new``.

    A reload restarts only ``changed`` (and starts ``added``, stops ``removed``); a harness
    is changed when any of its validated keys differ, defaults included.
    """
    before, after = set(old.harness), set(new.harness)
    common = before & after
    changed = {n for n in common if old.harness[n] != new.harness[n]}
    return after - before, before - after, changed, common - changed
