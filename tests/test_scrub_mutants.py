"""Mutation-test survivors of the secret scrubber (`harness.ledger.scrub`): exact answers
for the credential spellings and URL shapes the other tests leave unpinned."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from harness.ledger.canonical import canonical
from harness.ledger.scrub import json_secret_hint, scrub_text, scrub_value

# -- harness.ledger.scrub ---------------------------------------------------------------


@pytest.mark.parametrize(("text", "want"), [
    # the "_" or "-" between the words is optional in every credential name
    ("AccessKey=s3cr3tvalue", "AccessKey=[REDACTED]"),
    ("accesskey: s3cr3t", "accesskey: [REDACTED]"),
    ("privatekey=s3cr3tvalue", "privatekey=[REDACTED]"),
    ("PrivateKey: abc", "PrivateKey: [REDACTED]"),
    # each MySQL client, not only "mysql" itself
    ("mysqladmin -u root -ps3cr3t status", "mysqladmin -u root -p[REDACTED] status"),
    ("mysqldump -u root -ps3cr3t db", "mysqldump -u root -p[REDACTED] db"),
    ("mariadb-dump -u root -ps3cr3t db", "mariadb-dump -u root -p[REDACTED] db"),
    ("mysqlimport -u root -ps3cr3t db f.csv", "mysqlimport -u root -p[REDACTED] db f.csv"),
    ("mysqlshow -u root -ps3cr3t", "mysqlshow -u root -p[REDACTED]"),
    ("mysqlcheck -u root -ps3cr3t db", "mysqlcheck -u root -p[REDACTED] db"),
    ("mariadb-admin -u root -ps3cr3t ping", "mariadb-admin -u root -p[REDACTED] ping"),
    # each of OpenAI's prefixed key kinds (the "-" after the kind ends a bare sk- body)
    ("key sk-" + "admin-" + "AbCdEfGhIj0123456789xyz", "key [REDACTED]"),
    ("key sk-" + "svcacct-" + "AbCdEfGhIj0123456789xyz", "key [REDACTED]"),
    ("key sk-" + "None-" + "AbCdEfGhIj0123456789xyz", "key [REDACTED]"),
    # Stripe's restricted keys and test-mode keys, not only its live secret keys
    ("stripe rk" + "_live_" + "51H8aBcDeFgHiJkLmNoPqRsTu", "stripe [REDACTED]"),
    ("stripe sk" + "_test_" + "4eC39HqLyjWDarjtT1zdp7dc", "stripe [REDACTED]"),
])
def test_each_spelling_of_a_credential_name_and_client_is_redacted(
        text: str, want: str) -> None:
    assert scrub_text(text) == (want, 1)


def test_an_unquoted_value_in_a_json_string_leaves_the_escaped_quote_after_it() -> None:
    """The backslash of '\\"' is the JSON string's, not the password's: kept, the line
    stays valid JSON-in-a-string."""
    text = '{\\"cmd\\": \\"psql --password=hunter2\\", \\"n\\": 1}'
    assert scrub_text(text) == ('{\\"cmd\\": \\"psql --password=[REDACTED]\\", \\"n\\": 1}', 1)


@pytest.mark.parametrize(("text", "want"), [
    # an "@" then a "/" then another "@": the first host may be the password's tail
    ("https://u:pw@/x@host", "https://u:[REDACTED]@host"),
    # a one-character password after a user holding "@" (RFC 3986 broken)
    ("https://bob@corp:x@host/", "https://bob@corp:[REDACTED]@host/"),
])
def test_a_url_password_that_breaks_rfc_3986_is_redacted_to_the_last_at(
        text: str, want: str) -> None:
    assert scrub_text(text) == (want, 1)


@pytest.mark.parametrize("text", [
    "use sk-" + "preprocessingpipelinecache", "sk-" + "abcdefghijklmnopqrstuvwx",
])
def test_a_bare_sk_word_with_no_digit_is_no_key(text: str) -> None:
    """OpenAI's unprefixed keys hold digits; a long all-letter word after "sk-" is a
    name."""
    assert scrub_text(text) == (text, 0)


@pytest.mark.parametrize("text", [
    "https://averylongloginnamehere@host/x",
    "https://averylongloginname_here.x@host/",
])
def test_a_long_login_name_with_no_digit_or_capital_is_no_token(text: str) -> None:
    assert scrub_text(text) == (text, 0)


@pytest.mark.parametrize(("text", "want"), [
    # a backslash is part of an unquoted value: its tail would stay
    ("password=ab\\cd ok", "password=[REDACTED] ok"),
    # each case of the percent-encoded ":" and "="
    ("password%3As3cr3t", "password%3A[REDACTED]"),
    ("password%3as3cr3t", "password%3a[REDACTED]"),
    ("password%3Ds3cr3t", "password%3D[REDACTED]"),
    ("password%3ds3cr3t", "password%3d[REDACTED]"),
    # the scheme word before a credential is context, whatever the key's name
    ("X-Auth-Token: token s3cr3tvalue", "X-Auth-Token: token [REDACTED]"),
])
def test_each_separator_and_value_character_of_an_assignment(text: str, want: str) -> None:
    assert scrub_text(text) == (want, 1)


@pytest.mark.parametrize("text", ["check 'password', then retry", "('token', 42)"])
def test_a_comma_after_a_quoted_name_is_a_separator_only_before_a_quote(text: str) -> None:
    """The pair form ('authorization', 'Basic …') takes a comma as a separator; a word
    or a number after it is the sentence's, or a count."""
    assert scrub_text(text) == (text, 0)


@pytest.mark.parametrize("text", ["BYPASS=1", "ByPass: on", "CompassPass=north"])
def test_pass_inside_a_word_is_no_credential_in_any_case(text: str) -> None:
    assert scrub_text(text) == (text, 0)


def test_a_long_word_before_a_scheme_is_read_once(tmp_path: Path) -> None:
    """A URL's scheme starts a word: read from every letter of a 512 KiB word with no
    userinfo after its "://", the search took quadratic time (minutes here; this takes
    a fraction of a second)."""
    script = tmp_path / "long_word.py"
    script.write_text(
        "from harness.ledger.scrub import scrub_text\n"
        "out, n = scrub_text('a' * 524280 + ':// token=s3cr3t')\n"
        "print(out[-20:], n)\n"
    )
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=240, check=True)
    assert out.stdout == ":// token=[REDACTED] 1\n"


@pytest.mark.parametrize("prefix", ["glpat", "gldt", "glrt", "glcbt", "glptt", "glft", "glimt",
                                    "glagent", "gloas", "glsoat"])
def test_each_gitlab_token_prefix_is_redacted(prefix: str) -> None:
    assert scrub_text(f"token {prefix}-" + "AbCdEfGhIj0123456789xyz") == ("token [REDACTED]", 1)


@pytest.mark.parametrize("kind", ["xoxa", "xoxb", "xoxe", "xoxp", "xoxr", "xoxs"])
def test_each_slack_token_kind_is_redacted(kind: str) -> None:
    assert scrub_text(f"slack {kind}-" + "1234567890-AbCdEfGhIj") == ("slack [REDACTED]", 1)


@pytest.mark.parametrize(("value", "at"), [
    # a key the credential probe reads as "pass", spaces spelled %20 and in any case
    ({"pass%20": "hunter2"}, b"pass%20"),
    ({"PASS%20%20": "hunter2"}, b"PASS%20"),
    ({"pWD": "hunter2"}, b"pWD"),
    # the "_" group's branches whose fragment opens after the "_"
    ({"x": "github_pat_11ABCDEFG0_" + "AbCdEfGhIj0123456789" * 2}, b"_pat_"),
    ({"x": "api_org_" + "AbCdEfGhIj0123456789" * 2}, b"_org_"),
    ({"x": "dop_v1_" + "0a1b2c3d4e" * 5}, b"_v1_"),
])
def test_the_json_gate_opens_where_each_of_these_secrets_starts(
        value: dict[str, str], at: bytes) -> None:
    """The gate in front of `scrub_value` (anchor, fetch) must find every value the
    scrubber would change: here at the fragment each opens with."""
    assert scrub_value(value)[1] == 1
    data = canonical(value)
    assert json_secret_hint(data) == data.index(at)

