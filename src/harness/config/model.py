"""The validated shape of harness.toml (DESIGN.md §3): pydantic v2 models, one per table.

Every model forbids unknown keys and validates strictly (TOML already has types, so
``keep_runs = "20"`` is a mistake to report, not a value to coerce). Models are frozen:
a Config is a value that a reload compares and replaces whole, never edits.

Units: every duration field holds integer **nanoseconds** (``parse_duration_ns``), under
the TOML key's own name, so ``timeout = "1h"`` reads back as ``3_600_000_000_000``;
``timeout = "0"`` reads back as ``None`` (no timeout), as ``stall_timeout = "0"`` does
(no stall check). A duration (``@every`` periods included) is at most
``durations.MAX_DURATION_NS`` (1000000d); ``inf``, ``nan`` and longer values are reported
under their key like any other bad value, never raised past the loader.

Defaults that depend on other keys are resolved here, before field validation, so a
validated HarnessConfig never has an undecided field:

* ``kind``: ``oneshot`` if the table has ``schedule`` or ``triggers``, else ``resident``.
* ``restart``: ``on-failure`` for residents (a clean exit is a decision the worker made
  and should stand; a crash is what a supervisor is for), ``no`` for one-shots.
* ``enabled`` (autostart): ``true`` for residents, ``false`` for one-shots.
* ``hours_shutdown``: ``graceful`` when ``operating_hours`` is set, else ``None``.
* ``on_mismatch``: ``hold`` when ``model_pin`` is set, else ``None``.

Cross-key rules raise ``KeyedValueError`` so the loader can name the offending key
(rather than the whole table) in its ``FILE:LINE: KEY: problem`` message.

Invariant: an instance of any model here satisfies every rule of DESIGN.md §3 and
SPEC-0022 REQ-9/REQ-12 that can be checked without looking at another table; rules that
span tables (a trigger naming a webhook) and files are the loader's.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StrictStr, model_validator

from harness.config.durations import parse_duration_ns, shown
from harness.config.schedule import (
    OperatingHours,
    Schedule,
    ScheduleError,
    parse_hours,
    parse_schedule,
)

__all__ = [
    "DAY_NS",
    "BudgetConfig",
    "ChannelConfig",
    "Config",
    "HarnessConfig",
    "KeyedValueError",
    "LedgerConfig",
    "PriceConfig",
    "ServerConfig",
    "WebhookConfig",
    "is_harness_name",
]

SECOND_NS = 1_000_000_000
DAY_NS = 86_400 * SECOND_NS
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def is_harness_name(name: str) -> bool:
    """Whether `name` is a name a config can give a harness: ``NAME`` (global) or
    ``PROJECT/NAME`` (a project's), each part a `NAME_RE` name, so never a path that
    leaves the directory it is joined to."""
    project, slash, local = name.rpartition("/")
    return (NAME_RE.fullmatch(local) is not None
            and (not slash or NAME_RE.fullmatch(project) is not None))


class KeyedValueError(ValueError):
    """Problems found by a cross-key rule, each as (key relative to the model, message)."""

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        super().__init__("; ".join(f"{k}: {m}" for k, m in problems))
        self.problems = problems


def _duration(value: Any) -> Any:
    # Booleans are ints to Python, and `timeout = true` is not a duration.
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValueError(f"expected a duration like \"15m\" or a number of seconds, got "
                         f"{toml_type(value)} {shown(value)}")
    return parse_duration_ns(value)


def _optional_duration(value: Any) -> Any:
    ns = _duration(value)
    return None if ns == 0 else ns


def toml_type(value: Any) -> str:
    return {bool: "boolean", int: "integer", float: "float", str: "string", list: "array",
            dict: "table"}.get(type(value), type(value).__name__)


def _no_nul(value: str, carrier: str) -> None:
    """Refuse a NUL in a string the OS is handed (a path, a command line, the environment):
    TOML allows "\u0000", and no system call can carry one — every spawn would fail."""
    if "\0" in value:
        raise ValueError(f"{shown(value)} holds a NUL character, which no {carrier} can carry")


def _str_list(what: str, *, allow_str: bool, carrier: str) -> Any:
    def check(value: Any) -> Any:
        if allow_str and isinstance(value, str):
            if carrier == "path" and not value:
                raise ValueError("must not be empty")
            value = [value]
        if (not isinstance(value, list) or not value
                or not all(isinstance(v, str) for v in value)):
            raise ValueError(f"must be a non-empty list of strings{what}, got "
                             f"{toml_type(value)} {shown(value)}")
        for v in value:
            if carrier == "path" and not v:
                raise ValueError(f"must not hold an empty path, got {shown(value)}")
            _no_nul(v, carrier)
        return value
    return check


def _argv(value: Any) -> Any:
    value = _str_list("", allow_str=False, carrier="command line")(value)
    if not value[0]:
        raise ValueError("argv[0] must not be empty")
    return value


def _path(value: Any) -> Any:
    """A path string (strictness is left to the field's StrictStr)."""
    if isinstance(value, str):
        _no_nul(value, "path")
    return value


def _expression(parse: Callable[[str], Any]) -> Callable[[Any], Any]:
    """A validator that accepts a string `parse` accepts, keeping the string as written."""

    def check(value: Any) -> Any:
        if not isinstance(value, str):
            raise ValueError(f"expected a string, got {toml_type(value)} {shown(value)}")
        try:
            parse(value)
        except ScheduleError as exc:
            raise ValueError(str(exc)) from exc
        return value

    return check


def _trigger(value: Any) -> Any:
    if not isinstance(value, str):
        raise ValueError(f"expected a string, got {toml_type(value)} {shown(value)}")
    kind, _, name = value.partition(".")
    if kind not in ("webhook", "channel") or not NAME_RE.fullmatch(name):
        raise ValueError(f"{shown(value)} is not \"webhook.NAME\" or \"channel.NAME\"")
    return value


def _url(value: Any) -> Any:
    if not isinstance(value, str):
        raise ValueError(f"expected a string, got {toml_type(value)} {shown(value)}")
    if not re.match(r"https?://[^/\s]+", value):
        raise ValueError(f"{shown(value)} is not an http:// or https:// URL")
    return value


def _listen(value: Any) -> Any:
    if not isinstance(value, str):
        raise ValueError(f"expected a string, got {toml_type(value)} {shown(value)}")
    _host, sep, port = value.rpartition(":")
    # str.isdigit and int() take any script's digits ("٨٠٨٠" read as 8080).
    if sep and port.isdigit() and not port.isascii():
        raise ValueError(f"{shown(value)} is not HOST:PORT (the port in ASCII digits 0-9)")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{shown(value)} is not HOST:PORT")
    return value


def _finite(value: Any) -> Any:
    """Refuse TOML's inf and nan in a cost cap or a price: a cap of inf caps nothing (leave
    the key out for that), and a price of inf makes a cost no ledger line can carry."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"must be finite, got {shown(value)}")
    return value


Duration = Annotated[int, BeforeValidator(_duration)]
OptionalDuration = Annotated[int | None, BeforeValidator(_optional_duration)]
PositiveInt = Annotated[int, Field(ge=1)]
PositiveFloat = Annotated[float, Field(gt=0), BeforeValidator(_finite)]
NonNegFloat = Annotated[float, Field(ge=0), BeforeValidator(_finite)]
EnvFiles = Annotated[list[str], BeforeValidator(_str_list(" (env files)", allow_str=True,
                                                           carrier="path"))]
# Not empty: "" names no file ("spawn failed: : No such file or directory" on every run).
PathStr = Annotated[StrictStr, Field(min_length=1), BeforeValidator(_path)]
NonEmptyStr = Annotated[StrictStr, Field(min_length=1)]
Listen = Annotated[str, BeforeValidator(_listen)]

_STRICT = ConfigDict(extra="forbid", strict=True, frozen=True)


class HarnessConfig(BaseModel):
    """``[harness.NAME]``: one supervised command, one-shot or resident."""

    model_config = _STRICT

    argv: Annotated[list[str], BeforeValidator(_argv)]
    workdir: PathStr | None = None
    env_file: EnvFiles | None = None
    adapter: Literal["command", "claude-code", "codex", "crush"] = "command"
    kind: Literal["oneshot", "resident"]
    schedule: Annotated[str, BeforeValidator(_expression(parse_schedule))] | None = None
    catch_up: bool = False
    timeout: OptionalDuration = 3600 * SECOND_NS
    on_overlap: Literal["skip", "queue", "replace"] = "skip"
    keep_runs: PositiveInt = 20
    restart: Literal["no", "always", "on-failure", "unless-stopped"]
    restart_delay: Duration = SECOND_NS
    enabled: bool
    operating_hours: Annotated[str, BeforeValidator(_expression(parse_hours))] | None = None
    hours_shutdown: Literal["graceful", "immediate"] | None = None
    max_runs_per_day: PositiveInt | None = None
    max_cost_usd: PositiveFloat | None = None
    max_tokens: PositiveInt | None = None
    daily_cost_usd: PositiveFloat | None = None
    model_pin: NonEmptyStr | None = None  # "" matches no served model: every run a mismatch
    on_mismatch: Literal["hold", "fail-run"] | None = None
    # "0" is no stall check, as `timeout = "0"` is no timeout (DESIGN §3): a 0 ns bound
    # would kill every resident at once, and systemd's WatchdogSec=0 is off too.
    stall_timeout: OptionalDuration = None
    triggers: list[Annotated[str, BeforeValidator(_trigger)]] = []

    def parsed_schedule(self) -> Schedule | None:
        """The schedule, ready for next_fire/windows_between (validated at load)."""
        return parse_schedule(self.schedule) if self.schedule is not None else None

    def parsed_hours(self) -> OperatingHours | None:
        """The operating hours, ready for is_open/next_change (validated at load)."""
        return parse_hours(self.operating_hours) if self.operating_hours is not None else None

    @model_validator(mode="before")
    @classmethod
    def _infer(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        triggered = "schedule" in data or "triggers" in data
        if "kind" not in data:
            data["kind"] = "oneshot" if triggered else "resident"
        kind = data["kind"]
        resident = kind == "resident" if kind in ("oneshot", "resident") else not triggered
        data.setdefault("restart", "on-failure" if resident else "no")
        data.setdefault("enabled", resident)
        if "operating_hours" in data:
            data.setdefault("hours_shutdown", "graceful")
        if "model_pin" in data:
            data.setdefault("on_mismatch", "hold")
        return data

    @model_validator(mode="after")
    def _cross(self) -> HarnessConfig:
        problems: list[tuple[str, str]] = []
        # Keys the file set (plus those _infer filled in, which never trip a rule below:
        # an inferred value is always the allowed one).
        fields = self.model_fields_set
        if self.kind == "resident":
            for key in ("schedule", "triggers"):
                if key in fields:
                    problems.append((key, "a resident harness cannot have it "
                                          "(kind = \"oneshot\" runs on schedule or triggers)"))
            for key in ("max_cost_usd", "max_tokens"):
                if key in fields:
                    problems.append((key, "a per-run cap applies to one-shot harnesses only"))
            if "timeout" in fields and self.timeout is not None:
                problems.append(("timeout", "applies to one-shot harnesses only (a resident "
                                            "runs until it exits or is stopped; \"0\" is "
                                            "allowed)"))
            if "on_overlap" in fields:
                problems.append(("on_overlap", "applies to one-shot harnesses only (a "
                                               "resident runs until it exits or is stopped)"))
        else:
            if self.restart in ("always", "unless-stopped"):
                problems.append(("restart", f"{self.restart!r} applies to residents only; "
                                            "a one-shot restarts \"no\" or \"on-failure\""))
            if self.enabled and "enabled" in fields:
                problems.append(("enabled", "autostart applies to residents only; a one-shot "
                                            "starts by its schedule, triggers or by hand"))
            if "stall_timeout" in fields:
                problems.append(("stall_timeout", "applies to resident harnesses only"))
        channel = any(t.startswith("channel.") for t in self.triggers)
        if "catch_up" in fields and self.schedule is None and not channel \
                and self.operating_hours is None:
            problems.append(("catch_up", "needs a schedule, a channel trigger or operating_hours"))
        if self.operating_hours is not None and self.schedule is not None:
            problems.append(("operating_hours", "cannot be combined with schedule"))
        if "hours_shutdown" in fields and self.operating_hours is None:
            problems.append(("hours_shutdown", "needs operating_hours"))
        if "on_mismatch" in fields and self.model_pin is None:
            problems.append(("on_mismatch", "needs model_pin"))
        if len(set(self.triggers)) != len(self.triggers):
            problems.append(("triggers", "names the same trigger twice"))
        if problems:
            raise KeyedValueError(problems)
        return self


_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")


def _trace_url(value: Any) -> Any:
    if not isinstance(value, str):
        raise ValueError(f"expected a string, got {toml_type(value)} {shown(value)}")
    others = [p for p in _PLACEHOLDER.findall(value) if p != "trace_id"]
    if others:
        # The placeholders are the user's text, and could be a pasted secret, or long.
        names = shown(", ".join("{" + p + "}" for p in dict.fromkeys(others)), quote=False)
        raise ValueError(f"unsupported placeholder {names} (only {{trace_id}} is replaced)")
    return value


def _retention(value: Any) -> Any:
    ns = _duration(value)
    if ns < DAY_NS:
        raise ValueError(f"must be at least 1d, got {shown(value)}")
    return ns


class LedgerConfig(BaseModel):
    """``[ledger]`` (global file only, SPEC-0022 REQ-12/REQ-19)."""

    model_config = _STRICT

    retention: Annotated[int, BeforeValidator(_retention)] = 90 * DAY_NS
    max_mb: Annotated[int, Field(ge=16)] = 256
    trace_url: Annotated[str, BeforeValidator(_trace_url)] | None = None


class PriceConfig(BaseModel):
    """``[budget.prices."MODEL"]``: USD per million tokens, overriding the price table."""

    model_config = _STRICT

    input_per_mtok: NonNegFloat
    output_per_mtok: NonNegFloat
    cache_read_per_mtok: NonNegFloat | None = None
    cache_write_per_mtok: NonNegFloat | None = None


class BudgetConfig(BaseModel):
    """``[budget]``: the daemon-wide caps."""

    model_config = _STRICT

    daily_cost_usd: PositiveFloat | None = None
    max_concurrent: PositiveInt | None = None
    prices: dict[str, PriceConfig] = {}


class ServerConfig(BaseModel):
    """``[server]``: listeners (off unless set) and the drop-in directory."""

    model_config = _STRICT

    metrics_listen: Listen | None = None
    webhook_listen: Listen | None = None
    harness_d: PathStr | None = None


class WebhookConfig(BaseModel):
    """``[webhook.NAME]``: ``POST /hooks/NAME``, verified by bearer token or HMAC-SHA256."""

    model_config = _STRICT

    verify: Literal["bearer", "hmac-sha256"] = "bearer"
    secret: StrictStr = Field(min_length=1)
    signature_header: NonEmptyStr | None = None  # "": no request carries such a header
    delivery_header: NonEmptyStr | None = None
    max_body: Annotated[int, Field(ge=1, le=25 * 1024 * 1024)] = 1024 * 1024
    enabled: bool = True
    description: StrictStr | None = None


class ChannelConfig(BaseModel):
    """``[channel.NAME]``: a listen-only MCP Streamable HTTP session that fires runs."""

    model_config = _STRICT

    url: Annotated[str, BeforeValidator(_url)]
    headers: dict[str, StrictStr] = {}
    env_file: EnvFiles | None = None
    enabled: bool = True
    description: StrictStr | None = None


class Config(BaseModel):
    """The merged configuration: global file, drop-ins and registered projects.

    ``origins`` maps each harness, webhook and channel (as ``harness.NAME``…) to the file
    that declared it; ``files`` lists every file read, in load order.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    harness: dict[str, HarnessConfig] = {}
    ledger: LedgerConfig = LedgerConfig()
    budget: BudgetConfig = BudgetConfig()
    server: ServerConfig = ServerConfig()
    webhook: dict[str, WebhookConfig] = {}
    channel: dict[str, ChannelConfig] = {}
    origins: dict[str, str] = {}
    files: tuple[str, ...] = ()
