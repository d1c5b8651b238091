"""harness.toml: the models, the loader's FILE:LINE: KEY errors, drop-ins, projects, reloads."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import stat
import subprocess
import sys
import textwrap
from datetime import UTC, datetime
from pathlib import Path

import pytest

from conftest import World
from harness.config.load import (
    ConfigError,
    Project,
    RegistryError,
    _key_lines,
    diff_configs,
    list_projects,
    load_config,
    register_project,
    registry_path,
    unregister_project,
)
from harness.config.model import DAY_NS, Config, HarnessConfig

S = 1_000_000_000


@pytest.fixture(autouse=True)
def xdg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("HARNESS_CONFIG", raising=False)
    return tmp_path


def write(path: Path, text: str) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return str(path)


def problems(path: str, **kw: object) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_config(path, projects=kw.pop("projects", []), **kw)  # type: ignore[arg-type]
    return str(info.value).splitlines()


FULL = """
# every key DESIGN.md §3 names
[server]
metrics_listen = "127.0.0.1:9464"
webhook_listen = "0.0.0.0:8080"
harness_d = "harness.d"

[ledger]
retention = "30d"
max_mb = 64
trace_url = "https://grafana.example.com/explore?traceId={trace_id}"

[budget]
daily_cost_usd = 25.0
max_concurrent = 3

[budget.prices."claude-sonnet-4"]
input_per_mtok = 3
output_per_mtok = 15.0
cache_read_per_mtok = 0.3
cache_write_per_mtok = 3.75

[webhook.deploy]
verify = "hmac-sha256"
secret = "${DEPLOY_SECRET}"
signature_header = "X-Hub-Signature-256"
delivery_header = "X-GitHub-Delivery"
max_body = 2097152
enabled = true
description = "deploys"

[channel.todo]
url = "https://switchboard.example/mcp"
headers = { Authorization = "Bearer x" }
env_file = "channel.env"
enabled = false
description = "todo feed"

[harness.nightly]
argv = ["make", "nightly"]
workdir = "~/src/app"
env_file = ["base.env", "/etc/harness/nightly.env"]
adapter = "claude-code"
kind = "oneshot"
schedule = "CRON_TZ=Europe/Berlin 30 2 * * *"
catch_up = true
timeout = "1h30m"
on_overlap = "queue"
keep_runs = 5
restart = "on-failure"
restart_delay = 30
enabled = false
max_runs_per_day = 4
max_cost_usd = 2.5
max_tokens = 2000000
daily_cost_usd = 10
model_pin = "claude-sonnet-4"
on_mismatch = "fail-run"
triggers = ["webhook.deploy", "channel.todo"]

[harness.worker]
argv = ["codex", "serve"]
workdir = "work"
env_file = "worker.env"
adapter = "codex"
kind = "resident"
timeout = "0"
restart = "always"
restart_delay = "500ms"
enabled = true
operating_hours = "TZ=Europe/Berlin Mon-Fri 09:00-13:00; Sat 10:00-12:00"
hours_shutdown = "immediate"
max_runs_per_day = 100
daily_cost_usd = 5.0
stall_timeout = "15m"
"""


def test_full_config_with_every_key(tmp_path: Path) -> None:
    (tmp_path / "harness.d").mkdir()
    cfg = load_config(write(tmp_path / "harness.toml", FULL), projects=[])
    assert cfg.server.metrics_listen == "127.0.0.1:9464"
    assert cfg.server.harness_d == str(tmp_path / "harness.d")
    assert cfg.ledger.retention == 30 * DAY_NS and cfg.ledger.max_mb == 64
    assert cfg.ledger.trace_url == "https://grafana.example.com/explore?traceId={trace_id}"
    assert cfg.budget.max_concurrent == 3
    assert cfg.budget.prices["claude-sonnet-4"].input_per_mtok == 3.0
    assert cfg.webhook["deploy"].verify == "hmac-sha256"
    assert cfg.webhook["deploy"].max_body == 2 * 1024 * 1024
    assert cfg.channel["todo"].env_file == [str(tmp_path / "channel.env")]
    assert cfg.channel["todo"].headers == {"Authorization": "Bearer x"}

    n = cfg.harness["nightly"]
    assert n.workdir == str(tmp_path / "home" / "src" / "app")
    assert n.env_file == [str(tmp_path / "base.env"), "/etc/harness/nightly.env"]
    assert (n.adapter, n.kind, n.on_overlap, n.keep_runs) == ("claude-code", "oneshot", "queue", 5)
    assert n.timeout == 5400 * S and n.restart_delay == 30 * S
    assert n.catch_up is True and n.triggers == ["webhook.deploy", "channel.todo"]
    assert (n.max_runs_per_day, n.max_cost_usd, n.max_tokens, n.daily_cost_usd) == (
        4, 2.5, 2_000_000, 10.0)
    assert (n.model_pin, n.on_mismatch) == ("claude-sonnet-4", "fail-run")

    w = cfg.harness["worker"]
    assert w.workdir == str(tmp_path / "work")
    assert w.env_file == [str(tmp_path / "worker.env")]
    assert w.timeout is None  # "0": no timeout
    assert w.restart_delay == S // 2 and w.stall_timeout == 15 * 60 * S
    assert (w.kind, w.restart, w.enabled, w.hours_shutdown) == (
        "resident", "always", True, "immediate")
    assert cfg.origins["harness.worker"] == str(tmp_path / "harness.toml")
    assert cfg.files == (str(tmp_path / "harness.toml"),)


def test_defaults(tmp_path: Path) -> None:
    path = write(tmp_path / "h.toml", """
        [harness.job]
        argv = ["true"]
        schedule = "@hourly"

        [harness.hooked]
        argv = ["true"]
        triggers = ["webhook.w"]

        [harness.manual]
        argv = ["true"]
        kind = "oneshot"

        [harness.svc]
        argv = ["sleep", "infinity"]
        operating_hours = "09:00-17:00"
        model_pin = "m"

        [webhook.w]
        secret = "s"
    """)
    cfg = load_config(path, projects=[])
    job, hooked, manual, svc = (cfg.harness[n] for n in ("job", "hooked", "manual", "svc"))
    for h in (job, hooked, manual):
        assert (h.kind, h.restart, h.enabled) == ("oneshot", "no", False)
        assert h.timeout == 3600 * S and h.keep_runs == 20 and h.on_overlap == "skip"
        assert h.adapter == "command" and h.catch_up is False
    assert (svc.kind, svc.restart, svc.enabled) == ("resident", "on-failure", True)
    assert (svc.hours_shutdown, svc.on_mismatch, svc.restart_delay) == ("graceful", "hold", S)
    assert cfg.ledger.retention == 90 * DAY_NS and cfg.ledger.max_mb == 256
    assert cfg.ledger.trace_url is None
    assert cfg.server.metrics_listen is None and cfg.webhook["w"].max_body == 1 << 20


def test_bare_numbers_are_seconds_and_durations_nanoseconds() -> None:
    h = HarnessConfig.model_validate({"argv": ["x"], "schedule": "@daily", "timeout": 90})
    assert h.timeout == 90 * S
    h = HarnessConfig.model_validate({"argv": ["x"], "schedule": "@daily", "timeout": "2s"})
    assert h.timeout == 2 * S


# ---- one error per bad input, exactly ----------------------------------------------------

# What a duration past the maximum (MAX_DURATION) is refused with.
TOO_LONG = "must be at most 1000000d (about 2,700 years), got"
ZEROS_400 = '"1' + "0" * 400 + 's"'


@pytest.mark.parametrize(("body", "expected"), [
    ('bogus = 1', "harness.h.bogus: unknown key"),
    ('keep_runs = "20"', "harness.h.keep_runs: expected an integer, got string '20'"),
    ('keep_runs = 0', "harness.h.keep_runs: must be at least 1, got 0"),
    ('catch_up = "yes"', "harness.h.catch_up: expected a boolean, got string 'yes'"),
    ('workdir = 7', "harness.h.workdir: expected a string, got integer 7"),
    ('timeout = "1x"',
     "harness.h.timeout: not a duration: '1x' (use e.g. 500ms, 2s, 15m, 1h, 7d)"),
    ('timeout = true',
     'harness.h.timeout: expected a duration like "15m" or a number of seconds, '
     'got boolean True'),
    ('adapter = "vim"', "harness.h.adapter: unknown value 'vim' "
                        "(expected 'command', 'claude-code', 'codex' or 'crush')"),
    ('kind = "daemon"',
     "harness.h.kind: unknown value 'daemon' (expected 'oneshot' or 'resident')"),
    ('on_overlap = "sometimes"',
     "harness.h.on_overlap: unknown value 'sometimes' (expected 'skip', 'queue' or 'replace')"),
    ('restart = "maybe"', "harness.h.restart: unknown value 'maybe' "
                          "(expected 'no', 'always', 'on-failure' or 'unless-stopped')"),
    ('max_cost_usd = -1', "harness.h.max_cost_usd: must be more than 0, got -1"),
    ('triggers = "webhook.w"',
     "harness.h.triggers: expected an array, got string 'webhook.w'"),
    ('triggers = ["hook.w"]',
     'harness.h.triggers: \'hook.w\' is not "webhook.NAME" or "channel.NAME"'),
    ('triggers = ["webhook.nope"]',
     "harness.h.triggers: webhook.nope is not defined (no [webhook.nope] table)"),
    ('triggers = ["channel.nope"]',
     "harness.h.triggers: channel.nope is not defined (no [channel.nope] table)"),
    ('restart = "always"', "harness.h.restart: 'always' applies to residents only; "
                           'a one-shot restarts "no" or "on-failure"'),
    ('enabled = true', "harness.h.enabled: autostart applies to residents only; "
                       "a one-shot starts by its schedule, triggers or by hand"),
    ('on_mismatch = "hold"', "harness.h.on_mismatch: needs model_pin"),
    ('stall_timeout = "5m"', "harness.h.stall_timeout: applies to resident harnesses only"),
    ('operating_hours = "09:00-10:00"',
     "harness.h.operating_hours: cannot be combined with schedule"),
    # Durations no time arithmetic can carry: a config error, never an OverflowError.
    ("timeout = 1e309", "harness.h.timeout: must be finite, got inf"),  # TOML reads inf
    ("timeout = inf", "harness.h.timeout: must be finite, got inf"),
    ("timeout = -inf", "harness.h.timeout: must be finite, got -inf"),
    ("timeout = nan", "harness.h.timeout: must be finite, got nan"),
    ("timeout = 1e300", f"harness.h.timeout: {TOO_LONG} 1e+300"),
    ("timeout = 86400000001", f"harness.h.timeout: {TOO_LONG} 86400000001"),
    ('timeout = "1000001d"', f"harness.h.timeout: {TOO_LONG} '1000001d'"),
    ('timeout = "1000000d1ms"', f"harness.h.timeout: {TOO_LONG} '1000000d1ms'"),
    (f"timeout = {ZEROS_400}",
     f"harness.h.timeout: {TOO_LONG} '100000000000000000000000…' (402 characters)"),
    ("restart_delay = 1e300", f"harness.h.restart_delay: {TOO_LONG} 1e+300"),
    ("restart_delay = inf", "harness.h.restart_delay: must be finite, got inf"),
])
def test_each_bad_oneshot_key(tmp_path: Path, body: str, expected: str) -> None:
    path = write(tmp_path / "h.toml", f"""
        [harness.h]
        argv = ["true"]
        schedule = "@daily"
        {body}
    """)
    assert problems(path) == [f"{path}:4: {expected}"]


@pytest.mark.parametrize(("body", "expected"), [
    ('schedule = "61 * * * *"',
     "harness.r.schedule: bad cron expression '61 * * * *': Bad minute"),
    ('schedule = "CRON_TZ=Mars/Base 0 9 * * *"', "harness.r.schedule: unknown time zone "
     "'Mars/Base' in 'CRON_TZ=Mars/Base 0 9 * * *'"),
    ('operating_hours = "Fry 09:00-13:00"',
     "harness.r.operating_hours: unknown day 'Fry' in 'Fry 09:00-13:00' (use Mon … Sun)"),
    ('operating_hours = "22:00-22:00"',
     "harness.r.operating_hours: empty window '22:00-22:00' in '22:00-22:00' "
     "(start equals end; use 00:00-24:00 for a whole day)"),
    ('hours_shutdown = "later"',
     "harness.r.hours_shutdown: unknown value 'later' (expected 'graceful' or 'immediate')"),
    ('hours_shutdown = "graceful"', "harness.r.hours_shutdown: needs operating_hours"),
    ('on_mismatch = "explode"',
     "harness.r.on_mismatch: unknown value 'explode' (expected 'hold' or 'fail-run')"),
    ('catch_up = true',
     "harness.r.catch_up: needs a schedule, a channel trigger or operating_hours"),
    ('max_tokens = 10', "harness.r.max_tokens: a per-run cap applies to one-shot harnesses only"),
    ('timeout = "1h"', "harness.r.timeout: applies to one-shot harnesses only "
                       '(a resident runs until it exits or is stopped; "0" is allowed)'),
    ('on_overlap = "queue"', "harness.r.on_overlap: applies to one-shot harnesses only "
                             "(a resident runs until it exits or is stopped)"),
    ('restart_delay = "soon"',
     "harness.r.restart_delay: not a duration: 'soon' (use e.g. 500ms, 2s, 15m, 1h, 7d)"),
    ('env_file = ["a.env", 3]',
     "harness.r.env_file: must be a non-empty list of strings (env files), "
     "got array ['a.env', 3]"),
])
def test_each_bad_resident_key(tmp_path: Path, body: str, expected: str) -> None:
    path = write(tmp_path / "h.toml", f"""
        [harness.r]
        argv = ["sleep", "1"]
        {body}
    """)
    assert problems(path) == [f"{path}:3: {expected}"]


@pytest.mark.parametrize(("argv", "expected"), [
    ('"make nightly"', "must be a non-empty list of strings, got string 'make nightly'"),
    ("[]", "must be a non-empty list of strings, got array []"),
    ('["make", 3]', "must be a non-empty list of strings, got array ['make', 3]"),
    ('[""]', "argv[0] must not be empty"),
])
def test_argv_must_be_a_non_empty_list_of_strings(tmp_path: Path, argv: str,
                                                  expected: str) -> None:
    path = write(tmp_path / "h.toml", f"""
        [harness.h]
        argv = {argv}
    """)
    assert problems(path) == [f"{path}:2: harness.h.argv: {expected}"]


def test_missing_argv_points_at_the_table(tmp_path: Path) -> None:
    path = write(tmp_path / "h.toml", """
        # comment
        [harness.h]
        workdir = "/tmp"
    """)
    assert problems(path) == [f"{path}:2: harness.h.argv: required key is missing"]


@pytest.mark.parametrize(("body", "line", "expected"), [
    ('retention = "12h"', 2, "ledger.retention: must be at least 1d, got '12h'"),
    ("retention = 3600", 2, "ledger.retention: must be at least 1d, got 3600"),
    ("max_mb = 8", 2, "ledger.max_mb: must be at least 16, got 8"),
    ("max_mb = 16.5", 2, "ledger.max_mb: expected an integer, got float 16.5"),
    ('trace_url = "https://x.example/{harness}/{trace_id}"', 2,
     "ledger.trace_url: unsupported placeholder {harness} (only {trace_id} is replaced)"),
    ('trace_url = "https://x.example/{run_id}?t={trace}"', 2,
     "ledger.trace_url: unsupported placeholder {run_id}, {trace} (only {trace_id} is replaced)"),
    ("compress = true", 2, "ledger.compress: unknown key"),
])
def test_ledger_table(tmp_path: Path, body: str, line: int, expected: str) -> None:
    path = write(tmp_path / "h.toml", f"""
        [ledger]
        {body}
    """)
    assert problems(path) == [f"{path}:{line}: {expected}"]


def test_ledger_bounds_are_inclusive(tmp_path: Path) -> None:
    path = write(tmp_path / "h.toml", """
        [ledger]
        retention = "1d"
        max_mb = 16
    """)
    cfg = load_config(path, projects=[])
    assert (cfg.ledger.retention, cfg.ledger.max_mb) == (DAY_NS, 16)


# ---- durations beyond any use: an error under their key, never an overflow ---------------


@pytest.mark.parametrize(("body", "expected"), [
    ("stall_timeout = 1e300", f"harness.r.stall_timeout: {TOO_LONG} 1e+300"),
    ("stall_timeout = nan", "harness.r.stall_timeout: must be finite, got nan"),
    ('schedule = "@every 1000001d"',
     "harness.r.schedule: bad @every duration in '@every 1000001d': "
     f"{TOO_LONG} '1000001d'"),
    # The expression is quoted cut too, past 80 characters (QUOTE_MAX).
    ('schedule = "@every 1' + "0" * 400 + 's"',
     "harness.r.schedule: bad @every duration in '@every 1" + "0" * 72 + "…' (409 "
     f"characters): {TOO_LONG} '100000000000000000000000…' (402 characters)"),
])
def test_overflowing_resident_durations_and_periods(tmp_path: Path, body: str,
                                                    expected: str) -> None:
    path = write(tmp_path / "h.toml", '[harness.r]\nargv = ["sleep", "1"]\n' + body + "\n")
    assert problems(path) == [f"{path}:3: {expected}"]


@pytest.mark.parametrize(("body", "expected"), [
    ("retention = 1e300", f"ledger.retention: {TOO_LONG} 1e+300"),
    ("retention = inf", "ledger.retention: must be finite, got inf"),
    ('retention = "99999999999999999999999d"',
     f"ledger.retention: {TOO_LONG} '99999999999999999999999d'"),
])
def test_overflowing_retention(tmp_path: Path, body: str, expected: str) -> None:
    path = write(tmp_path / "h.toml", f"[ledger]\n{body}\n")
    assert problems(path) == [f"{path}:2: {expected}"]


def test_overflowing_durations_in_a_dropin_name_the_dropin(tmp_path: Path) -> None:
    main = write(tmp_path / "harness.toml", '[server]\nharness_d = "conf.d"\n')
    drop = write(tmp_path / "conf.d" / "a.toml", """
        [harness.a]
        argv = ["true"]
        kind = "oneshot"
        timeout = 1e300

        [harness.b]
        argv = ["true"]
        restart_delay = inf
    """)
    assert problems(main) == [
        f"{drop}:4: harness.a.timeout: {TOO_LONG} 1e+300",
        f"{drop}:8: harness.b.restart_delay: must be finite, got inf",
    ]


def test_schedule_macros_and_every_are_case_insensitive(tmp_path: Path) -> None:
    """`@Daily` loaded while `@Every 1h` was refused as an unknown macro: every `@` word
    is now read case-insensitively, as cron's day and month names are."""
    path = write(tmp_path / "h.toml", """
        [harness.a]
        argv = ["true"]
        schedule = "@Every 1h"
        [harness.b]
        argv = ["true"]
        schedule = "CRON_TZ=Europe/Berlin @EVERY 90m"
        [harness.c]
        argv = ["true"]
        schedule = "@Daily"
    """)
    cfg = load_config(path, projects=[])
    at = datetime(2026, 1, 1, 0, 10, tzinfo=UTC)
    got = {n: cfg.harness[n].parsed_schedule() for n in "abc"}
    assert {n: (s.every_ns, s.cron) for n, s in got.items() if s} == {
        "a": (3600 * 10**9, None), "b": (5400 * 10**9, None), "c": (None, "0 0 * * *")}
    assert [s.next_fire(at).astimezone(UTC) for s in got.values() if s] == [
        datetime(2026, 1, 1, 1, 0, tzinfo=UTC), datetime(2026, 1, 1, 1, 30, tzinfo=UTC),
        datetime(2026, 1, 2, tzinfo=UTC)]


def test_a_stall_timeout_of_zero_is_none_as_a_timeout_of_zero_is(tmp_path: Path) -> None:
    """DESIGN §3: `timeout = "0"` is no timeout. `stall_timeout = "0"` loaded as a 0 ns
    stall bound, which read literally kills every resident at once: it now reads as no
    stall check, the key left out, in every spelling of zero (and a reload from one to
    the other changes nothing)."""
    path = write(tmp_path / "h.toml", """
        [harness.none]
        argv = ["true"]
        [harness.str]
        argv = ["true"]
        stall_timeout = "0"
        [harness.unit]
        argv = ["true"]
        stall_timeout = "0s"
        [harness.int]
        argv = ["true"]
        stall_timeout = 0
        [harness.float]
        argv = ["true"]
        stall_timeout = 0.0
        [harness.job]
        argv = ["true"]
        kind = "oneshot"
        timeout = "0"
    """)
    cfg = load_config(path, projects=[])
    assert {n: h.stall_timeout for n, h in cfg.harness.items() if n != "job"} == dict.fromkeys(
        ("none", "str", "unit", "int", "float"), None)
    assert [n for n in ("str", "unit", "int", "float")
            if cfg.harness[n] != cfg.harness["none"]] == []
    assert cfg.harness["job"].timeout is None


def test_the_longest_duration_is_accepted_and_exact(tmp_path: Path) -> None:
    path = write(tmp_path / "h.toml", """
        [ledger]
        retention = 86400000000
        [harness.h]
        argv = ["true"]
        schedule = "@every 1000000d"
        timeout = "999999d23h59m59.999999999s"
        [harness.r]
        argv = ["true"]
        restart_delay = 1.001
        stall_timeout = "1000000d"
    """)
    cfg = load_config(path, projects=[])
    assert cfg.ledger.retention == 1_000_000 * DAY_NS
    h, r = cfg.harness["h"], cfg.harness["r"]
    assert h.timeout == 1_000_000 * DAY_NS - 1
    sched = h.parsed_schedule()
    assert sched is not None and sched.every_ns == 1_000_000 * DAY_NS
    # The arithmetic the daemon does on it stays a date: the next window, 2,738 years on.
    assert sched.next_fire(datetime(2026, 1, 1, tzinfo=UTC)) == datetime(4707, 11, 29,
                                                                        tzinfo=UTC)
    # The digits as written: float arithmetic (1.001 * 1e9) would give 1000999999.
    assert r.restart_delay == 1_001_000_000 and r.stall_timeout == 1_000_000 * DAY_NS


def test_other_global_tables(tmp_path: Path) -> None:
    path = write(tmp_path / "h.toml", """
        frobnicate = 1
        [server]
        metrics_listen = "loopback"
        [budget]
        max_concurrent = 0
        [budget.prices.m]
        input_per_mtok = 1
        [webhook.w]
        verify = "md5"
        secret = ""
        [channel.c]
        url = "ftp://x"
        [harness."bad name"]
        argv = ["x"]
    """)
    assert problems(path) == [
        f"{path}:1: frobnicate: unknown key",
        f"{path}:3: server.metrics_listen: 'loopback' is not HOST:PORT",
        f"{path}:5: budget.max_concurrent: must be at least 1, got 0",
        f"{path}:6: budget.prices.m.output_per_mtok: required key is missing",
        f"{path}:9: webhook.w.verify: unknown value 'md5' (expected 'bearer' or 'hmac-sha256')",
        f"{path}:10: webhook.w.secret: must not be empty",
        f"{path}:12: channel.c.url: 'ftp://x' is not an http:// or https:// URL",
        f"{path}:13: harness.bad name: bad name 'bad name' (letters, digits, '.', '_', '-'; "
        "at most 64, starting with a letter or digit)",
    ]


def test_a_harness_name_the_ledger_would_redact_is_refused(tmp_path: Path) -> None:
    """A name that reads as a key would be written [REDACTED] into every record of the
    harness, and two such harnesses would fold into one: refused at load instead. The
    error, printed and logged, does not quote the name either (it may be a pasted key):
    its line locates it."""
    path = write(tmp_path / "h.toml", """
        [harness.sk-nightly2025build0123]
        argv = ["x"]
        [harness.nightly-2025]
        argv = ["x"]
    """)
    assert problems(path) == [
        f"{path}:1: harness.[REDACTED]: the run ledger would redact this name "
        "as a secret (it reads like a key or a token): rename the harness"]


def test_one_error_lists_every_problem_in_line_order(tmp_path: Path) -> None:
    path = write(tmp_path / "h.toml", """
        [harness.a]
        argv = ["x"]
        schedule = "@often"
        keep_runs = -1

        [ledger]
        max_mb = 1

        [harness.b]
        argv = "x"
        on_overlap = "drop"
    """)
    assert problems(path) == [
        f"{path}:3: harness.a.schedule: unknown schedule macro '@often' in '@often' "
        "(use @hourly, @daily, @weekly, @monthly, @yearly or @every DUR)",
        f"{path}:4: harness.a.keep_runs: must be at least 1, got -1",
        f"{path}:7: ledger.max_mb: must be at least 16, got 1",
        f"{path}:10: harness.b.argv: must be a non-empty list of strings, got string 'x'",
        f"{path}:11: harness.b.on_overlap: unknown value 'drop' "
        "(expected 'skip', 'queue' or 'replace')",
    ]


@pytest.mark.parametrize(("text", "line", "message"), [
    ('[harness.a]\nargv = ["x"\n\n[ledger]\n', 4, "invalid TOML: Unclosed array"),
    ("[harness.a]\nargv = \n", 2, "invalid TOML: Invalid value"),
    ('[ledger]\nmax_mb = 16\nmax_mb = 17\n', 3, "invalid TOML: Cannot overwrite a value"),
    ('a = "x', 1, "invalid TOML: Unterminated string"),
])
def test_toml_syntax_errors_name_file_and_line(tmp_path: Path, text: str, line: int,
                                               message: str) -> None:
    path = tmp_path / "h.toml"
    path.write_text(text)
    got = problems(str(path))
    assert len(got) == 1 and got[0].startswith(f"{path}:{line}: syntax: {message}")


def test_invalid_utf8(tmp_path: Path) -> None:
    path = tmp_path / "h.toml"
    path.write_bytes(b'[ledger]\ntrace_url = "\xff"\n')
    assert problems(str(path)) == [f"{path}:2: syntax: not valid UTF-8"]


def test_key_lines_survive_multiline_values_quotes_and_dotted_keys() -> None:
    text = textwrap.dedent('''
        top = """
        [harness.fake]
        argv = 1
        """
        [harness."quoted.name"]  # comment [x]
        argv = [
          "a", # comment = 3
          "b",
        ]
        env_file = 'x'
        inline = { a = 1, b = [
          2] }
        budget.prices.m.input_per_mtok = 1
        [ 'harness' . plain ]
        restart = "no"
        [[queue]]
        url = "u"
    ''').lstrip("\n")
    lines = _key_lines(text)
    assert ("harness", "fake") not in lines
    assert lines[("harness", "quoted.name")] == 5
    assert lines[("harness", "quoted.name", "argv")] == 6
    assert lines[("harness", "quoted.name", "env_file")] == 10
    assert lines[("harness", "quoted.name", "inline")] == 11
    assert lines[("harness", "quoted.name", "budget", "prices", "m", "input_per_mtok")] == 13
    assert lines[("harness", "plain", "restart")] == 15
    assert lines[("queue", "url")] == 17


# ---- files, drop-ins and projects --------------------------------------------------------

def test_default_path_and_overrides(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert load_config(projects=[]) == Config()  # no file at the default path: empty
    write(tmp_path / "config" / "harness" / "harness.toml", '[harness.a]\nargv = ["x"]\n')
    assert set(load_config(projects=[]).harness) == {"a"}
    other = write(tmp_path / "other.toml", '[harness.b]\nargv = ["x"]\n')
    monkeypatch.setenv("HARNESS_CONFIG", other)
    assert set(load_config(projects=[]).harness) == {"b"}
    monkeypatch.setenv("HARNESS_CONFIG", str(tmp_path / "missing.toml"))
    assert problems(None) == [  # type: ignore[arg-type]
        f"{tmp_path / 'missing.toml'}: cannot read: No such file or directory"]


def test_dropins_merge_in_name_order(tmp_path: Path) -> None:
    main = write(tmp_path / "harness.toml", """
        [server]
        harness_d = "conf.d"
        [harness.main]
        argv = ["x"]
        triggers = ["webhook.late"]
    """)
    write(tmp_path / "conf.d" / "20-b.toml", """
        [webhook.late]
        secret = "s"
        [harness.b]
        argv = ["b"]
        workdir = "sub"
    """)
    write(tmp_path / "conf.d" / "10-a.toml", """
        [channel.c]
        url = "https://c.example"
        [harness.a]
        argv = ["a"]
        triggers = ["channel.c"]
    """)
    write(tmp_path / "conf.d" / "notes.txt", "not toml at all [")
    cfg = load_config(main, projects=[])
    assert list(cfg.harness) == ["main", "a", "b"]
    assert cfg.harness["b"].workdir == str(tmp_path / "conf.d" / "sub")
    assert cfg.origins["harness.a"] == str(tmp_path / "conf.d" / "10-a.toml")
    assert cfg.origins["webhook.late"] == str(tmp_path / "conf.d" / "20-b.toml")
    assert cfg.files == (main, str(tmp_path / "conf.d" / "10-a.toml"),
                         str(tmp_path / "conf.d" / "20-b.toml"))


def test_dropin_rejections(tmp_path: Path) -> None:
    main = write(tmp_path / "harness.toml", """
        [server]
        harness_d = "conf.d"
        [harness.dup]
        argv = ["x"]
    """)
    drop = write(tmp_path / "conf.d" / "a.toml", """
        [ledger]
        max_mb = 32
        [budget]
        max_concurrent = 2
        [server]
        metrics_listen = "127.0.0.1:1"
        [harness.dup]
        argv = ["y"]
        [profile.x]
        harnesses = []
    """)
    assert problems(main) == [
        f"{drop}:1: ledger: the ledger is configured globally, in the daemon's harness.toml",
        f"{drop}:3: budget: a drop-in may carry only [harness.*], [webhook.*] and [channel.*] "
        "tables",
        f"{drop}:5: server: a drop-in may carry only [harness.*], [webhook.*] and [channel.*] "
        "tables",
        f"{drop}:7: harness.dup: harness 'dup' is already defined in {main}",
        f"{drop}:9: profile: unknown key",
    ]


def test_missing_dropin_dir(tmp_path: Path) -> None:
    main = write(tmp_path / "harness.toml", '\n[server]\nharness_d = "nope"\n')
    assert problems(main) == [
        f"{main}:2: server.harness_d: {tmp_path / 'nope'} is not a directory"]


def test_project_harnesses_are_namespaced(tmp_path: Path) -> None:
    main = write(tmp_path / "harness.toml", """
        [harness.lint]
        argv = ["global"]
    """)
    write(tmp_path / "repos" / "app" / "harness.toml", """
        [harness.lint]
        argv = ["ruff", "check"]
        [harness.dev]
        argv = ["npm", "run", "dev"]
        restart = "always"
        env_file = ".env"
        [harness.build]
        argv = ["make"]
        kind = "oneshot"
        workdir = "src"
    """)
    project = register_project(str(tmp_path / "repos" / "app"))
    assert project == Project("app", str(tmp_path / "repos" / "app"))
    cfg = load_config(main)  # the registry, read from the state dir
    assert list(cfg.harness) == ["lint", "app/lint", "app/dev", "app/build"]
    app = tmp_path / "repos" / "app"
    assert cfg.harness["app/lint"].workdir == str(app)  # default: the project directory
    assert cfg.harness["app/dev"].env_file == [str(app / ".env")]
    assert cfg.harness["app/build"].workdir == str(app / "src")
    assert cfg.harness["app/build"].kind == "oneshot"
    assert cfg.origins["harness.app/dev"] == str(app / "harness.toml")


def test_project_file_rejections(tmp_path: Path) -> None:
    main = write(tmp_path / "harness.toml", '[webhook.w]\nsecret = "s"\n')
    pfile = write(tmp_path / "p" / "harness.toml", """
        [ledger]
        retention = "7d"
        [budget]
        daily_cost_usd = 1
        [webhook.x]
        secret = "s"
        [harness.job]
        argv = ["x"]
        schedule = "@hourly"
        catch_up = true
        triggers = ["webhook.w"]
        operating_hours = "09:00-17:00"
        max_runs_per_day = 3
        max_cost_usd = 1.0
        max_tokens = 5
        daily_cost_usd = 2.0
        unknown = 1
    """)
    assert problems(main, projects=[Project("p", str(tmp_path / "p"))]) == [
        f"{pfile}:1: ledger: the ledger is configured globally, in the daemon's harness.toml",
        f"{pfile}:3: budget: budgets are configured globally, not in a project file",
        f"{pfile}:5: webhook: webhooks are configured globally, not in a project file",
        f"{pfile}:9: harness.job.schedule: a project harness cannot be scheduled; "
        "schedules are configured globally",
        f"{pfile}:10: harness.job.catch_up: a project harness cannot be scheduled; "
        "schedules are configured globally",
        f"{pfile}:11: harness.job.triggers: a project harness cannot be triggered; "
        "triggers are configured globally",
        f"{pfile}:12: harness.job.operating_hours: operating hours are configured globally, "
        "not in a project file",
        f"{pfile}:13: harness.job.max_runs_per_day: budgets are configured globally, "
        "not in a project file",
        f"{pfile}:14: harness.job.max_cost_usd: budgets are configured globally, "
        "not in a project file",
        f"{pfile}:15: harness.job.max_tokens: budgets are configured globally, "
        "not in a project file",
        f"{pfile}:16: harness.job.daily_cost_usd: budgets are configured globally, "
        "not in a project file",
        f"{pfile}:17: harness.job.unknown: unknown key",
    ]


def test_a_project_registered_under_a_secret_like_name_is_blamed_not_its_harnesses(
        tmp_path: Path) -> None:
    """A registry written before `up` refused such names: every harness of the project
    reads `<token>/<name>`, which the ledger would redact; the error says to rename the
    project, not each harness, and quotes neither."""
    main = write(tmp_path / "harness.toml", "")
    token = "ghp_" + "A1b2C3d4" * 4 + "abcd"
    pdir = tmp_path / "p"
    pfile = write(pdir / "harness.toml", """
        [harness.worker]
        argv = ["x"]
    """)
    assert problems(main, projects=[Project(token, str(pdir))]) == [
        f"{pfile}:1: harness.worker: the run ledger would redact this project's name as a "
        "secret (it reads like a key or a token): register the project under another "
        "(harness up DIR --name NAME)"]


def test_registered_project_without_file(tmp_path: Path) -> None:
    """A registration whose directory or file went says which registration it is and
    how to drop it, not only "No such file or directory"."""
    main = write(tmp_path / "harness.toml", "")
    gone = tmp_path / "gone"
    bare = tmp_path / "my dir" / "bare"
    bare.mkdir(parents=True)
    assert problems(main, projects=[Project("gone", str(gone)), Project("b", str(bare))]) == [
        f"{gone / 'harness.toml'}: cannot read: No such file or directory: project 'gone' is "
        f"registered (harness up) at {gone}, which is not there any more; restore it, or "
        f"unregister it with: harness down {gone}",
        f"{bare / 'harness.toml'}: cannot read: No such file or directory: project 'b' is "
        f"registered (harness up) at {bare}, which has no harness.toml any more; restore it, "
        f"or unregister it with: harness down '{bare}'"]


def test_registry_round_trip(tmp_path: Path) -> None:
    a = tmp_path / "a"
    b = tmp_path / "b"
    write(a / "harness.toml", "")
    write(b / "harness.toml", "")
    assert list_projects() == []
    pa = register_project(str(a))
    assert register_project(str(a)) == pa  # idempotent
    pb = register_project(str(b / "."), name="bee")
    assert list_projects() == [pa, pb] == [Project("a", str(a)), Project("bee", str(b))]
    reg = Path(registry_path())
    assert reg == tmp_path / "state" / "harness" / "projects.json"
    assert stat.S_IMODE(reg.stat().st_mode) == 0o600
    assert json.loads(reg.read_text())["projects"][1] == {"name": "bee", "dir": str(b)}
    assert sorted(os.listdir(reg.parent)) == ["projects.json"]  # no temp file left behind
    assert unregister_project(str(a)) is True
    assert unregister_project(str(a)) is False
    assert list_projects() == [pb]
    assert stat.S_IMODE(reg.stat().st_mode) == 0o600


def test_registry_refusals(tmp_path: Path) -> None:
    write(tmp_path / "x" / "app" / "harness.toml", "")
    write(tmp_path / "y" / "app" / "harness.toml", "")
    (tmp_path / "empty").mkdir()
    register_project(str(tmp_path / "x" / "app"))
    with pytest.raises(RegistryError, match="project name 'app' is already taken by"):
        register_project(str(tmp_path / "y" / "app"))
    with pytest.raises(RegistryError, match="already registered as 'app'"):
        register_project(str(tmp_path / "x" / "app"), name="other")
    with pytest.raises(RegistryError, match=r"no harness\.toml in this directory"):
        register_project(str(tmp_path / "empty"))
    with pytest.raises(RegistryError, match="is not a usable project name"):
        register_project(str(tmp_path / "y" / "app"), name="a/b")


def test_corrupt_registry_is_a_load_error(tmp_path: Path) -> None:
    main = write(tmp_path / "harness.toml", "")
    reg = Path(registry_path())
    reg.parent.mkdir(parents=True)
    reg.write_text("{not json")
    got = problems(main, projects=None)
    assert len(got) == 1 and got[0].startswith(f"{reg}: cannot read the project registry")


# ---- reloads -----------------------------------------------------------------------------

def test_diff_configs(tmp_path: Path) -> None:
    old = load_config(write(tmp_path / "old.toml", """
        [harness.same]
        argv = ["x"]
        [harness.edited]
        argv = ["x"]
        schedule = "@hourly"
        [harness.gone]
        argv = ["x"]
    """), projects=[])
    new = load_config(write(tmp_path / "new.toml", """
        # moved down a line: position is not configuration
        [harness.same]
        argv = ["x"]
        restart = "on-failure"
        [harness.edited]
        argv = ["x"]
        schedule = "@daily"
        [harness.fresh]
        argv = ["y"]
    """), projects=[])
    assert diff_configs(old, new) == ({"fresh"}, {"gone"}, {"edited"}, {"same"})
    assert diff_configs(new, new) == (set(), set(), set(), {"same", "edited", "fresh"})


def test_failed_load_raises_without_side_effects(tmp_path: Path) -> None:
    path = tmp_path / "harness.toml"
    write(path, '[harness.a]\nargv = ["x"]\n')
    good = load_config(str(path), projects=None)
    snapshot = good.model_dump()
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    write(path, '[harness.a]\nargv = ["x"]\ntimeout = "forever"\n')
    with pytest.raises(ConfigError):
        load_config(str(path), projects=None)
    # The caller's last good config is untouched (and frozen), and nothing was written.
    assert good.model_dump() == snapshot and good.harness["a"].timeout == 3600 * S
    with pytest.raises(ValueError, match="frozen"):
        good.harness["a"].keep_runs = 3  # type: ignore[misc]
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before
    assert not (tmp_path / "state").exists()


def test_concurrent_registrations_are_not_lost(tmp_path: Path) -> None:
    import threading

    dirs = [tmp_path / f"p{i}" for i in range(12)]
    for d in dirs:
        write(d / "harness.toml", "")
    threads = [threading.Thread(target=register_project, args=(str(d),)) for d in dirs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(p.name for p in list_projects()) == sorted(d.name for d in dirs)


def test_unregister_without_a_registry_writes_nothing(tmp_path: Path) -> None:
    assert unregister_project(str(tmp_path)) is False
    assert not (tmp_path / "state").exists()


# ---- more cross-table and cross-file rules -----------------------------------------------

def test_a_bad_server_key_does_not_hide_the_dropins(tmp_path: Path) -> None:
    main = write(tmp_path / "harness.toml", """
        [server]
        harness_d = "d"
        webhook_listen = ":http"
        [webhook.w]
        secret = "s"
    """)
    drop = write(tmp_path / "d" / "x.toml", """
        [webhook.w]
        secret = "t"
        [harness.h]
        argv = ["x"]
        on_overlap = "never"
        triggers = ["channel.none", "webhook.w"]
    """)
    assert problems(main) == [
        f"{main}:3: server.webhook_listen: ':http' is not HOST:PORT",
        f"{drop}:1: webhook.w: webhook 'w' is already defined in {main}",
        f"{drop}:5: harness.h.on_overlap: unknown value 'never' "
        "(expected 'skip', 'queue' or 'replace')",
        f"{drop}:6: harness.h.triggers: channel.none is not defined (no [channel.none] table)",
    ]


def test_tables_of_the_wrong_type(tmp_path: Path) -> None:
    path = write(tmp_path / "h.toml", """
        harness = 5
        ledger = "big"
        [webhook]
        w = "s"
    """)
    assert problems(path) == [
        f"{path}:1: harness: expected a table of [harness.NAME] tables, got integer",
        f"{path}:2: ledger: expected a table, got string 'big'",
        f"{path}:4: webhook.w: expected a table, got string 's'",
    ]


def test_catch_up_with_a_channel_trigger_and_parsed_helpers(tmp_path: Path) -> None:
    from datetime import UTC, datetime

    path = write(tmp_path / "h.toml", """
        [channel.c]
        url = "http://127.0.0.1:9000/mcp"
        [harness.todo]
        argv = ["x"]
        triggers = ["channel.c"]
        catch_up = true
        [harness.tick]
        argv = ["x"]
        schedule = "CRON_TZ=UTC @hourly"
        [harness.office]
        argv = ["x"]
        operating_hours = "TZ=UTC Mon-Fri 09:00-17:00"
    """)
    cfg = load_config(path, projects=[])
    assert cfg.harness["todo"].catch_up is True
    sched = cfg.harness["tick"].parsed_schedule()
    assert sched is not None
    assert sched.next_fire(datetime(2026, 1, 1, 0, 30, tzinfo=UTC)) == datetime(
        2026, 1, 1, 1, tzinfo=UTC)
    hours = cfg.harness["office"].parsed_hours()
    assert hours is not None and hours.is_open(datetime(2026, 11, 30, 9, tzinfo=UTC))
    assert cfg.harness["todo"].parsed_schedule() is None
    assert cfg.harness["todo"].parsed_hours() is None


# ---- what reaches the user: secrets and hostile files, through the real CLI ----------------

TOKEN = "sk-ant-api03-" + "A" * 40  # a key pasted under the wrong key, or as a string
GH_TOKEN = "ghp_" + "A1b2C3d4" * 4 + "abcd"  # one that a harness or webhook name can hold


@pytest.mark.parametrize(("body", "line", "expected"), [
    # argv as one string: a command line, credential and all
    (f'argv = "claude --api-key {TOKEN}"', 2,
     "harness.a.argv: must be a non-empty list of strings, got string "
     "'claude --api-key [REDACTED]'"),
    (f'argv = ["x"]\nkind = "{TOKEN}"', 3,
     "harness.a.kind: unknown value '[REDACTED]' (expected 'oneshot' or 'resident')"),
    (f'argv = ["x"]\nschedule = "{TOKEN}"', 3,
     "harness.a.schedule: a cron schedule needs 5 fields, got 1 in '[REDACTED]'"),
    # A long value is cut, after the scrub: cut first, the key's prefix would show.
    (f'argv = ["x"]\nkind = "oneshot"\ntimeout = "{TOKEN} {"x" * 40}"', 4,
     "harness.a.timeout: not a duration: '[REDACTED] xxxxxxxxxxxxx…' (94 characters) "
     "(use e.g. 500ms, 2s, 15m, 1h, 7d)"),
    # A piece of the value quoted on its own is scrubbed too.
    (f'argv = ["x"]\noperating_hours = "Mon 09:00-{TOKEN}"', 3,
     "harness.a.operating_hours: bad time '[REDACTED]' in 'Mon 09:00-[REDACTED]' (use HH:MM)"),
    ('argv = {password = "hunter2"}', 2,
     "harness.a.argv: must be a non-empty list of strings, got table "
     "{'password': '[REDACTED]'}"),
    # A trigger naming no table is checked as written: its name was quoted unscrubbed.
    (f'argv = ["x"]\ntriggers = ["webhook.{GH_TOKEN}"]', 3,
     "harness.a.triggers: webhook.[REDACTED] is not defined (no [webhook.[REDACTED]] table)"),
])
def test_a_config_error_never_quotes_a_secret(world: World, body: str, line: int,
                                              expected: str) -> None:
    cfg = write(world.root / "config" / "harness" / "harness.toml", f"[harness.a]\n{body}\n")
    res = world.harness("daemon")
    assert (res.returncode, res.stdout, res.stderr) == (2, "", f"{cfg}:{line}: {expected}\n")


def test_hours_and_ports_in_non_ascii_digits_are_refused(world: World) -> None:
    """`\\d` and str.isdigit take any script's digits, and int() reads them: Arabic-Indic
    hours ('٠٩:٠٠') loaded as 09:00 and a fullwidth port as 8080. A config is written
    in ASCII digits, so each is refused, naming file, line, key and value (exit 2)."""
    cfg = write(world.root / "config" / "harness" / "harness.toml", """
        [server]
        metrics_listen = "127.0.0.1:٩٠٩٠"
        webhook_listen = "127.0.0.1:８０８０"
        [harness.a]
        argv = ["true"]
        operating_hours = "Mon-Fri ٠٩:٠٠-13:00"
        [harness.b]
        argv = ["true"]
        operating_hours = "TZ=UTC 09:00-１３:00"
    """)
    res = world.harness("daemon")
    assert (res.returncode, res.stdout, res.stderr) == (2, "", (
        f"{cfg}:2: server.metrics_listen: '127.0.0.1:٩٠٩٠' is not HOST:PORT (the port in "
        "ASCII digits 0-9)\n"
        f"{cfg}:3: server.webhook_listen: '127.0.0.1:８０８０' is not HOST:PORT (the port in "
        "ASCII digits 0-9)\n"
        f"{cfg}:6: harness.a.operating_hours: bad time '٠٩:٠٠' in 'Mon-Fri ٠٩:٠٠-13:00' "
        "(use HH:MM in ASCII digits 0-9)\n"
        f"{cfg}:9: harness.b.operating_hours: bad time '１３:00' in 'TZ=UTC 09:00-１３:00' "
        "(use HH:MM in ASCII digits 0-9)\n"))
    assert not world.ledger.exists()


MIB = 1 << 20
LETTERS = "NOT-A-NAME" * 10  # 100 characters, a name no NAME_RE takes


@pytest.mark.parametrize(("body", "expected"), [
    # A value, quoted: its first 80 characters (QUOTE_MAX), and how long it is.
    (f'argv = ["x"]\nkind = "{"a" * MIB}"', [
        f"3: harness.a.kind: unknown value '{'a' * 80}…' ({MIB} characters) (expected "
        "'oneshot' or 'resident')"]),
    # A key: each part of it cut alike, unquoted, as keys are named. 80 characters or
    # fewer are quoted whole, and a 64-character name makes no long key.
    (f'argv = ["x"]\n{"b" * MIB} = 1\nkind = "{LETTERS[:80]}"\n[harness.{"f" * 64}]\n'
     f'argv = ["x"]\noperating_hours = "{"g" * 80}"', [
        f"3: harness.a.{'b' * 80}… ({MIB} characters): unknown key",
        f"4: harness.a.kind: unknown value '{LETTERS[:80]}' (expected 'oneshot' or "
        "'resident')",
        f"7: harness.{'f' * 64}.operating_hours: bad window '{'g' * 80}' in '{'g' * 80}' "
        "(use HH:MM-HH:MM)"]),
    # A harness table named so: its key and the name the message quotes.
    (f'argv = ["x"]\n[harness.{"c" * MIB}]\nargv = ["x"]', [
        f"3: harness.{'c' * 80}… ({MIB} characters): bad name '{'c' * 80}…' ({MIB} "
        "characters) (letters, digits, '.', '_', '-'; at most 64, starting with a letter or "
        "digit)"]),
    # A list quotes its text; a trigger is also checked as written, naming its table.
    (f'argv = ["x", "{"d" * MIB}", 7]\nkind = "oneshot"\ntriggers = ["webhook.{"e" * MIB}"]', [
        f"2: harness.a.argv: must be a non-empty list of strings, got array ['x', "
        f"'{'d' * 73}… ({MIB + 12} characters)",
        f"4: harness.a.triggers: 'webhook.{'e' * 72}…' ({MIB + 8} characters) is not "
        '"webhook.NAME" or "channel.NAME"',
        f"4: harness.a.triggers: webhook.{'e' * 72}… ({MIB + 8} characters) is not defined "
        f"(no [webhook.{'e' * 80}… ({MIB} characters)] table)"]),
])
def test_a_config_error_quotes_at_most_80_characters_of_a_key_or_value(
        world: World, body: str, expected: list[str]) -> None:
    """A 1 MB string pasted into a value or a key made a 1 MB error line (two, when the
    message quoted the name its key holds), printed by the daemon, and logged by it and
    sent to `harness reload` alike. Now it is quoted cut, the file, the line and the key
    still named, and the daemon still refuses to boot with exit 2."""
    cfg = write(world.root / "config" / "harness" / "harness.toml", f"[harness.a]\n{body}\n")
    res = world.harness("daemon")
    assert (res.returncode, res.stdout, res.stderr) == (
        2, "", "".join(f"{cfg}:{line}\n" for line in expected))
    assert max(len(line) for line in res.stderr.splitlines()) < len(cfg) + 400


def test_a_table_named_like_a_secret_is_reported_without_its_name(world: World) -> None:
    cfg = write(world.root / "config" / "harness" / "harness.toml",
                f'[harness.{TOKEN}]\nargv = ["x"]\n')
    res = world.harness("logs", "x")
    assert (res.returncode, res.stdout) == (2, "")
    assert res.stderr.splitlines()[1:] == [
        f"{cfg}:1: harness.[REDACTED]: the run ledger would redact this name as a secret "
        "(it reads like a key or a token): rename the harness"]


DEEP_TOML = "[" * 3000 + "]" * 3000  # past tomllib's recursion, which has no error of its own
DEEP_JSON = "[" * 100_000


def test_a_config_nested_too_deeply_is_a_config_error(world: World) -> None:
    cfg = write(world.root / "config" / "harness" / "harness.toml",
                f'[harness.a]\nargv = ["x"]\n\n[server]\nx = {DEEP_TOML}\n')
    res = world.harness("daemon")
    assert (res.returncode, res.stdout, res.stderr) == (
        2, "", f"{cfg}:5: syntax: invalid TOML: nested too deeply\n")


def test_a_project_file_nested_too_deeply_is_refused(world: World) -> None:
    proj = world.root / "proj"
    write(proj / "harness.toml", f"# a project\n[harness.a]\nargv = {DEEP_TOML}\n")
    res = world.harness("up", str(proj))
    assert (res.returncode, res.stdout, res.stderr) == (
        2, "", f"{proj}/harness.toml:3: syntax: invalid TOML: nested too deeply\n"
               f"harness: {proj} was not registered\n")


def test_a_registry_nested_too_deeply_is_a_registry_error(world: World) -> None:
    write(world.root / "config" / "harness" / "harness.toml",
          '[harness.a]\nargv = ["true"]\nkind = "oneshot"\n')
    reg = world.state / "projects.json"
    write(reg, DEEP_JSON)
    problem = f"{reg}: cannot read the project registry: JSON nested too deeply"
    res = world.harness("logs", "a")
    assert (res.returncode, res.stdout, res.stderr) == (
        2, "", f"harness: the config does not load, so a's kind is unknown:\n{problem}\n")
    res = world.harness("down", str(world.root))
    assert (res.returncode, res.stdout, res.stderr) == (1, "", f"harness: {problem}\n")


def _not_regular(path: Path, kind: str) -> contextlib.AbstractContextManager[object]:
    """Put a FIFO or a listening-less socket at `path` (the socket closed on exit)."""
    if kind == "fifo":
        os.mkfifo(path)
        return contextlib.nullcontext()
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(path))
    return contextlib.closing(sock)


@pytest.mark.parametrize("kind", ["fifo", "socket"])
def test_a_config_that_is_no_regular_file_says_what_it_is_and_never_hangs(
        world: World, kind: str) -> None:
    """A FIFO or socket given as the config reads as state.json's does ("PATH: cannot
    read: it is a FIFO, not a regular file"), not as the bare "Not a regular file", and
    neither the CLI nor the daemon waits on it for a writer."""
    cfg = world.root / f"config.{kind}"
    env = {**world.env, "HARNESS_CONFIG": str(cfg)}
    word = {"fifo": "a FIFO", "socket": "a socket"}[kind]
    problem = f"{cfg}: cannot read: it is {word}, not a regular file"
    with _not_regular(cfg, kind):
        res = subprocess.run([sys.executable, "-m", "harness.cli", "logs", "a"], env=env,
                             capture_output=True, text=True, timeout=120)
        assert (res.returncode, res.stdout, res.stderr) == (
            2, "", f"harness: the config does not load, so a's kind is unknown:\n{problem}\n")
        res = subprocess.run([sys.executable, "-m", "harness.cli", "daemon"], env=env,
                             capture_output=True, text=True, timeout=120)
        assert (res.returncode, res.stdout, res.stderr) == (2, "", f"{problem}\n")
    assert not world.ledger.exists()


def test_a_registry_that_is_a_fifo_is_named_and_never_hangs(world: World) -> None:
    """projects.json is read by every config load: a FIFO there hung `logs`, `down` and
    the daemon's boot, waiting for a writer that never comes."""
    write(world.root / "config" / "harness" / "harness.toml",
          '[harness.a]\nargv = ["true"]\nkind = "oneshot"\n')
    world.state.mkdir(parents=True)
    reg = world.state / "projects.json"
    os.mkfifo(reg)
    problem = f"{reg}: cannot read the project registry: it is a FIFO, not a regular file"
    res = world.harness("logs", "a")
    assert (res.returncode, res.stdout, res.stderr) == (
        2, "", f"harness: the config does not load, so a's kind is unknown:\n{problem}\n")
    res = world.harness("down", str(world.root))
    assert (res.returncode, res.stdout, res.stderr) == (1, "", f"harness: {problem}\n")
    res = world.harness("daemon")
    assert (res.returncode, res.stdout, res.stderr) == (2, "", f"{problem}\n")


def test_registry_refusals_never_repeat_a_secret(tmp_path: Path) -> None:
    """Every refusal quotes the directory and names the user passed scrubbed, as a config
    error quotes a value: a token in a path or a name is never repeated."""
    tok = "ghp_" + "A1b2C3d4" * 4 + "abcd"
    base = tmp_path / tok
    write(base / "app" / "harness.toml", "")
    write(tmp_path / "y" / "app" / "harness.toml", "")
    (base / "empty").mkdir()
    register_project(str(base / "app"))
    shown = f"{tmp_path}/[REDACTED]"
    refusals = [
        (lambda: register_project(str(tmp_path / "y" / "app")),
         f"{tmp_path}/y/app: project name 'app' is already taken by {shown}/app"),
        (lambda: register_project(str(base / "app"), name="other"),
         f"{shown}/app: already registered as 'app'"),
        (lambda: register_project(str(base / "empty")),
         f"{shown}/empty: no harness.toml in this directory"),
        (lambda: register_project(str(tmp_path / "y" / "app"), name=f"{tok}/b"),
         f"{tmp_path}/y/app: '[REDACTED]/b' is not a usable project name (letters, "
         "digits, '.', '_', '-'); pass another name"),
        # Cut after the scrub, like any quoted value: an invalid name may be of any length.
        (lambda: register_project(str(tmp_path / "y" / "app"), name="x " * 40),
         f"{tmp_path}/y/app: 'x x x x x x x x x x x x …' (80 characters) is not a usable "
         "project name (letters, digits, '.', '_', '-'); pass another name"),
    ]
    for call, message in refusals:
        with pytest.raises(RegistryError) as info:
            call()
        assert str(info.value) == message


def test_a_harness_d_that_is_no_directory_is_named_scrubbed(tmp_path: Path) -> None:
    """The drop-in directory is quoted by path, with a token in it scrubbed, as every
    config error quotes a file."""
    token = "ghp_" + "A1b2C3d4" * 4 + "abcd"
    main = write(tmp_path / "harness.toml", f'[server]\nharness_d = "{token}/conf.d"\n')
    assert problems(main) == [
        f"{main}:2: server.harness_d: {tmp_path}/[REDACTED]/conf.d is not a directory"]


def test_a_default_config_behind_a_dangling_directory_link_is_an_error(
        tmp_path: Path) -> None:
    """Only nothing at all at the default path is an empty config: the harness/ directory
    kept as a dotfiles link whose target went away is a problem naming the link."""
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "harness").symlink_to(tmp_path / "dotfiles" / "harness")
    assert problems(None) == [  # type: ignore[arg-type]
        f"{tmp_path / 'config' / 'harness' / 'harness.toml'}: cannot read: No such file or "
        f"directory ({tmp_path / 'config' / 'harness'} is a symlink to "
        f"{tmp_path / 'dotfiles' / 'harness'}, which is not there)"]
    (tmp_path / "dotfiles" / "harness").mkdir(parents=True)
    assert load_config(projects=[]) == Config()  # the link resolves: no file, no config


def test_a_registered_project_whose_directory_holds_a_nul_is_a_problem(
        tmp_path: Path) -> None:
    """A hand-edited projects.json can name a directory with "\\u0000": the read raised
    ValueError past the loader instead of a problem naming the file (the NUL spelled
    out, as every control in a problem is)."""
    main = write(tmp_path / "harness.toml", "")
    assert problems(main, projects=[Project("p", f"{tmp_path}/p\0q")]) == [
        f"{tmp_path}/p\\x00q/harness.toml: the path holds a NUL character"]
