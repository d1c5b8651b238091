"""Mutation-test survivors of the config model (`harness.config.model`) and durations
(`harness.config.durations`): the problems a real harness.toml gets for values the OS
cannot carry, for empty paths, and for the bounds the other tests leave unpinned. Each
goes through `load_config` of a real file and asserts the whole FILE:LINE: KEY: problem
line."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.config.durations import format_duration_ms, parse_duration_ns
from harness.config.load import load_config
from test_config import problems, write, xdg  # noqa: F401  (xdg: autouse fixture)


def test_a_nul_in_a_command_line_or_a_path_is_a_problem_naming_key_and_value(
        tmp_path: Path) -> None:
    """TOML can spell "\\u0000"; no exec or open can carry it, so every spawn would fail."""
    path = write(tmp_path / "h.toml", r"""
        [harness.a]
        argv = ["tr\u0000ue"]

        [harness.c]
        argv = ["true"]
        workdir = "/tmp/x\u0000y"

        [harness.d]
        argv = ["true"]
        env_file = ["a.env", "b\u0000.env"]
    """)
    assert problems(path) == [
        rf"{path}:2: harness.a.argv: 'tr\x00ue' holds a NUL character, which no command "
        "line can carry",
        rf"{path}:6: harness.c.workdir: '/tmp/x\x00y' holds a NUL character, which no path "
        "can carry",
        rf"{path}:10: harness.d.env_file: '{tmp_path}/b\x00.env' holds a NUL character, "
        "which no path can carry",
    ]


def test_an_empty_env_file_is_named_as_such(tmp_path: Path) -> None:
    path = write(tmp_path / "h.toml", """
        [harness.b]
        argv = ["true"]
        env_file = ""

        [harness.e]
        argv = ["true"]
        env_file = ["a.env", ""]
    """)
    assert problems(path) == [
        f"{path}:3: harness.b.env_file: must not be empty",
        f"{path}:7: harness.e.env_file: must not hold an empty path, got "
        f"['{tmp_path}/a.env', '']",
    ]


def test_an_infinite_or_nan_cost_cap_or_price_is_a_problem(tmp_path: Path) -> None:
    """TOML spells inf and nan. A cap of inf caps nothing (the key left out says that) and
    a price of inf makes an infinite cost, which no ledger line can carry; both were
    accepted. Durations already refuse them the same way; a whole number is still a
    float's value."""
    path = write(tmp_path / "h.toml", """
        [budget]
        daily_cost_usd = inf

        [budget.prices."m"]
        input_per_mtok = inf
        output_per_mtok = nan
        cache_read_per_mtok = -inf

        [harness.h]
        argv = ["true"]
        schedule = "@daily"
        max_cost_usd = inf
        daily_cost_usd = nan
    """)
    assert problems(path) == [
        f"{path}:2: budget.daily_cost_usd: must be finite, got inf",
        f"{path}:5: budget.prices.m.input_per_mtok: must be finite, got inf",
        f"{path}:6: budget.prices.m.output_per_mtok: must be finite, got nan",
        f"{path}:7: budget.prices.m.cache_read_per_mtok: must be finite, got -inf",
        f"{path}:12: harness.h.max_cost_usd: must be finite, got inf",
        f"{path}:13: harness.h.daily_cost_usd: must be finite, got nan",
    ]
    ok = write(tmp_path / "ok.toml", """
        [budget.prices."m"]
        input_per_mtok = 0
        output_per_mtok = 15

        [harness.h]
        argv = ["true"]
        schedule = "@daily"
        max_cost_usd = 2
    """)
    cfg = load_config(ok, projects=[])
    assert cfg.harness["h"].max_cost_usd == 2.0
    price = cfg.budget.prices["m"]
    assert (price.input_per_mtok, price.output_per_mtok) == (0.0, 15.0)


def test_a_listen_port_is_1_to_65535_inclusive(tmp_path: Path) -> None:
    bad = write(tmp_path / "bad.toml", """
        [server]
        metrics_listen = "127.0.0.1:0"
        webhook_listen = "127.0.0.1:65536"
    """)
    assert problems(bad) == [
        f"{bad}:2: server.metrics_listen: '127.0.0.1:0' is not HOST:PORT",
        f"{bad}:3: server.webhook_listen: '127.0.0.1:65536' is not HOST:PORT",
    ]
    ok = write(tmp_path / "ok.toml", """
        [server]
        metrics_listen = "127.0.0.1:1"
        webhook_listen = ":65535"
    """)
    server = load_config(ok, projects=[]).server
    assert (server.metrics_listen, server.webhook_listen) == ("127.0.0.1:1", ":65535")


def test_an_expression_url_or_address_of_another_type_names_the_type(tmp_path: Path) -> None:
    """Each string-valued key says what it got rather than failing inside its parser."""
    path = write(tmp_path / "h.toml", """
        [server]
        metrics_listen = 9464

        [ledger]
        trace_url = 1

        [channel.c]
        url = 5

        [harness.h]
        argv = ["true"]
        schedule = 5

        [harness.r]
        argv = ["true"]
        operating_hours = ["09:00-10:00"]

        [harness.t]
        argv = ["true"]
        triggers = [7]
    """)
    assert problems(path) == [
        f"{path}:2: server.metrics_listen: expected a string, got integer 9464",
        f"{path}:5: ledger.trace_url: expected a string, got integer 1",
        f"{path}:8: channel.c.url: expected a string, got integer 5",
        f"{path}:12: harness.h.schedule: expected a string, got integer 5",
        f"{path}:16: harness.r.operating_hours: expected a string, got array ['09:00-10:00']",
        f"{path}:20: harness.t.triggers: expected a string, got integer 7",
    ]


def test_a_trigger_named_twice_is_a_problem(tmp_path: Path) -> None:
    path = write(tmp_path / "h.toml", """
        [webhook.w]
        secret = "s3cr3t-value-here"

        [harness.h]
        argv = ["true"]
        triggers = ["webhook.w", "webhook.w"]
    """)
    assert problems(path) == [f"{path}:6: harness.h.triggers: names the same trigger twice"]


@pytest.mark.parametrize("value", [None, ["1s"], "   "])
def test_a_value_of_no_duration_type_is_a_value_error(value: object) -> None:
    """`parse_duration_ns` promises ValueError and nothing else, whatever it is handed."""
    with pytest.raises(ValueError) as info:
        parse_duration_ns(value)  # type: ignore[arg-type]
    assert type(info.value) is ValueError
    assert str(info.value) == f"not a duration: {value!r} (use e.g. 500ms, 2s, 15m, 1h, 7d)"


@pytest.mark.parametrize(("ms", "text"), [
    (0, "0ms"), (999, "999ms"), (1000, "1s"), (1999, "1s"), (59_999, "59s"),
    (60_000, "1m00s"), (61_000, "1m01s"), (3_599_999, "59m59s"), (3_600_000, "1h00m"),
    (3_660_000, "1h01m"), (86_399_999, "23h59m"), (86_400_000, "1d0h"),
    (90_000_000, "1d1h"), (10**12, "11574d1h"),
])
def test_format_duration_ms_at_each_unit_boundary(ms: int, text: str) -> None:
    assert format_duration_ms(ms) == text
