"""The secret scrubber: exact redactions, exact counts, no false positives, idempotence."""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import re
import string
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from harness.ledger.canonical import canonical
from harness.ledger.errors import LedgerUnavailable, LineRejected
from harness.ledger.faillog import FailureLog
from harness.ledger.runledger import RunLedger
from harness.ledger.scrub import (
    _CASELESS_FRAGMENTS,
    _PROBE,
    _TRIGGER,
    _TRIGGER_BRANCHES,
    REDACTED,
    ScrubLog,
    _names_a_credential,
    _one_pass,
    json_secret_hint,
    might_hold_secret,
    scrub_message,
    scrub_text,
    scrub_value,
)
from harness.ledger.verify import verify_run_ledger
from harness.supervisor.history import SkippedEntry
from harness.worklog import WorkLedgerError
from harness.worklog.store import WorkLedger

# Fake credentials are assembled from parts so that secret scanners run over this
# repository do not mistake the fixtures for leaked keys.
BODY = "AbCdEfGhIj0123456789"  # 20 token characters, the shortest body most rules take
OPENAI = "sk-" + BODY + "klmNOP"
OPENAI_PROJ = "sk-" + "proj-" + "Ab_Cd-Ef" + BODY
ANTHROPIC = "sk-" + "ant-" + "api03-" + BODY + "_-xyz"
GITHUB = "ghp" + "_" + BODY + "QRSTUVWXYZabcdef"
GITHUB_PAT = "github" + "_pat_" + "11ABCDEFG0_" + BODY + BODY
SLACK = "xoxb" + "-123456789012-1234567890123-" + BODY
AWS = "AKIA" + "IOSFODNN7EXAMPLE"
AWS_TEMP = "ASIA" + "Y34FZKBOKMUTVV7A"
GOOGLE = "AIza" + "Sy" + BODY + "abcdefghijklm"
OPENROUTER = "sk-" + "or-v1-" + "0a1b2c3d4e5f6789" * 4
HUGGINGFACE = "hf" + "_" + BODY + "KLMNOPQRSTUVWX"
GROQ = "gsk" + "_" + BODY * 2 + "abcdefghijkl"
XAI = "xai" + "-" + BODY * 4
PERPLEXITY = "pplx" + "-" + BODY * 2 + "abcdefgh"
REPLICATE = "r8" + "_" + BODY + "abcdefghijklmnopq"
LANGSMITH = "lsv2" + "_pt_" + "0123456789abcdef" * 2 + "_0123456789"
SENDGRID = "SG" + "." + BODY + "ab" + "." + BODY + BODY + "abc"
DIGITALOCEAN = "dop" + "_v1_" + "0123456789abcdef" * 4
STRIPE = "sk" + "_live_" + BODY
STRIPE_RESTRICTED = "rk" + "_live_" + BODY
JWT = (
    "eyJ" + "hbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9"
    + ".eyJ" + "zdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4ifQ"
    + "." + "SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
)
PEM = (
    "-----BEGIN RSA " + "PRIVATE KEY-----\n"
    "MIIEowIBAAKCAQEAx4Uh1HmnbLq0\nb3BlbnNzaC1rZXktdjEAAAAABG5v\n"
    "-----END RSA " + "PRIVATE KEY-----"
)

REDACTED_CASES = [
    # vendor keys and tokens
    pytest.param(f"key {OPENAI} end", "key [REDACTED] end", id="openai"),
    pytest.param(f"OPENAI_API_KEY={OPENAI}", "OPENAI_API_KEY=[REDACTED]", id="openai-env"),
    pytest.param(OPENAI_PROJ, REDACTED, id="openai-proj"),
    pytest.param(f"using {ANTHROPIC}.", "using [REDACTED].", id="anthropic"),
    pytest.param(f"push with {GITHUB}", "push with [REDACTED]", id="ghp"),
    pytest.param("gho_" + BODY, REDACTED, id="gho"),
    pytest.param("ghu_" + BODY, REDACTED, id="ghu"),
    pytest.param("ghs_" + BODY, REDACTED, id="ghs"),
    pytest.param("ghr_" + BODY, REDACTED, id="ghr"),
    pytest.param(f"({GITHUB_PAT})", "([REDACTED])", id="github-pat"),
    pytest.param(f"slack {SLACK} ok", "slack [REDACTED] ok", id="slack-bot"),
    pytest.param("xoxp-" + BODY, REDACTED, id="slack-user"),
    pytest.param(f"id={AWS}", "id=[REDACTED]", id="aws"),
    pytest.param(f"[{AWS_TEMP}]", "[[REDACTED]]", id="aws-temporary"),
    pytest.param(f"maps {GOOGLE}", "maps [REDACTED]", id="google"),
    pytest.param(f"charge {STRIPE}", "charge [REDACTED]", id="stripe"),
    pytest.param(STRIPE_RESTRICTED, REDACTED, id="stripe-restricted"),
    # credential assignments: the key name stays
    pytest.param("api_key=abc123", "api_key=[REDACTED]", id="api_key"),
    pytest.param("apikey: xyz789 next", "apikey: [REDACTED] next", id="apikey-colon"),
    pytest.param("X-Api-Key: v4lue", "X-Api-Key: [REDACTED]", id="api-key-header"),
    pytest.param("TOKEN=t0k3n", "TOKEN=[REDACTED]", id="token-upper"),
    pytest.param("export GITHUB_TOKEN='abc'", "export GITHUB_TOKEN='[REDACTED]'", id="env-quoted"),
    pytest.param("?access_token=abc&x=1", "?access_token=[REDACTED]&x=1", id="query"),
    # An unquoted value runs to whitespace: a ";" or "," may be part of the password.
    pytest.param("secret=s3cr3t;next", "secret=[REDACTED]", id="secret"),
    pytest.param("client_secret = s3,x", "client_secret = [REDACTED]", id="client-secret"),
    pytest.param("password=abc,def" + BODY + " ok", "password=[REDACTED] ok",
                 id="password-with-comma"),
    pytest.param("DB: password=p4ss;W0rd" + BODY, "DB: password=[REDACTED]",
                 id="password-with-semicolon"),
    # A quoted value goes whole, to its closing quote.
    pytest.param('password="correct horse battery staple" x',
                 'password="[REDACTED]" x', id="quoted-passphrase"),
    pytest.param('SECRET_KEY="dbl\\"quote\\"' + BODY + '" x', 'SECRET_KEY="[REDACTED]" x',
                 id="quoted-with-escaped-quotes"),
    pytest.param("pwd=hunter2 user=bob", "pwd=[REDACTED] user=bob", id="pwd"),
    pytest.param("PASS: hunter2", "PASS: [REDACTED]", id="pass"),
    # A private key as a credential's value: the whole block goes, not just its BEGIN.
    pytest.param('{"private_key": "' + PEM.replace("\n", "\\n") + '\\n"}',
                 '{"private_key": "[REDACTED]"}', id="pem-in-json-value"),
    pytest.param("password: " + PEM + " after", "password: [REDACTED] after",
                 id="pem-after-password"),
    pytest.param("token=" + PEM, "token=[REDACTED]", id="pem-after-token"),
    # percent-encoded and JSON-escaped forms
    pytest.param("cb?x=1%3Ftoken%3Dabc123secret", "cb?x=1%3Ftoken%3D[REDACTED]",
                 id="percent-encoded-token"),
    pytest.param("//bob:Sup3rS3cretPw@db.example.com/x",
                 "//bob:[REDACTED]@db.example.com/x", id="url-scheme-relative"),
    pytest.param("https:\\/\\/alice:S3cretPw9@example.com",
                 "https:\\/\\/alice:[REDACTED]@example.com", id="url-json-escaped"),
    pytest.param("password=hunter2 user=bob", "password=[REDACTED] user=bob", id="password"),
    pytest.param("PASSWD: hunter2", "PASSWD: [REDACTED]", id="passwd"),
    pytest.param('{"password": "hunter2", "n": 1}', '{"password": "[REDACTED]", "n": 1}',
                 id="json"),
    pytest.param('{\\"password\\": \\"hunter2\\"}', '{\\"password\\": \\"[REDACTED]\\"}',
                 id="json-in-string"),
    pytest.param("token: Bearer abc", "token: Bearer [REDACTED]", id="token-bearer"),
    # Authorization and Bearer: the scheme stays
    pytest.param("curl -H 'Authorization: Bearer abc.def' -X POST",
                 "curl -H 'Authorization: Bearer [REDACTED]' -X POST", id="authorization-bearer"),
    pytest.param("Authorization: Basic dXNlcjpwYXNzd29yZA==", "Authorization: Basic [REDACTED]",
                 id="authorization-basic"),
    pytest.param('{"authorization": "opaque-value-1"}', '{"authorization": "[REDACTED]"}',
                 id="authorization-bare"),
    pytest.param("Authorization: AWS4-HMAC-SHA256 Credential=x/y, Signature=abc",
                 "Authorization: AWS4-HMAC-SHA256 [REDACTED]", id="authorization-sigv4"),
    pytest.param("sent Bearer abcd1234efgh5678 upstream", "sent Bearer [REDACTED] upstream",
                 id="bearer"),
    pytest.param("Authorization: s3cr3t-pass123 (from vault)", "Authorization: [REDACTED]",
                 id="authorization-no-scheme"),
    pytest.param("[('authorization', 'Basic dXNlcjpwYXNzd29yZA==')]",
                 "[('authorization', 'Basic [REDACTED]')]", id="authorization-python-pair"),
    pytest.param("AUTH BEARER abc123def456ghi789", "AUTH BEARER [REDACTED]",
                 id="bearer-uppercase"),
    pytest.param("Bearer: abc123def456ghi789", "Bearer: [REDACTED]", id="bearer-colon"),
    # URL credentials: scheme and user stay
    pytest.param("postgres://alice:s3cr3t@db.example.com:5432/app",
                 "postgres://alice:[REDACTED]@db.example.com:5432/app", id="url-password"),
    pytest.param("redis://:pw@cache:6379", "redis://:[REDACTED]@cache:6379", id="url-no-user"),
    pytest.param("https://u:p@ss@host/x", "https://u:[REDACTED]@host/x", id="url-at-in-password"),
    pytest.param(f"https://x-access-token:{GITHUB}@github.com/o/r.git",
                 "https://x-access-token:[REDACTED]@github.com/o/r.git", id="url-token-password"),
    pytest.param(f"git clone https://{BODY}xyz@github.com/o/r",
                 "git clone https://[REDACTED]@github.com/o/r", id="url-token-only"),
    # PEM private keys and JWTs
    pytest.param(f"key: {PEM} after", "key: [REDACTED] after", id="pem"),
    pytest.param("-----BEGIN " + "PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC",
                 REDACTED, id="pem-cut-off"),
    pytest.param("x -----BEGIN OPENSSH " + "PRIVATE KEY", "x [REDACTED]", id="pem-cut-in-header"),
    pytest.param(f"got {JWT} ok", "got [REDACTED] ok", id="jwt"),
    pytest.param(f"id_token_{JWT}", "id_token_[REDACTED]", id="jwt-after-underscore"),
    pytest.param(f"GH_{GITHUB}", "GH_[REDACTED]", id="ghp-after-underscore"),
    pytest.param(f"key-{ANTHROPIC}", "key-[REDACTED]", id="anthropic-after-dash"),
    pytest.param("glpat-" + BODY, REDACTED, id="gitlab"),
    pytest.param("xapp-1-A0123456789-" + BODY, REDACTED, id="slack-app"),
    pytest.param("npm_" + BODY + "abcdefghijklmnop", REDACTED, id="npm"),
    pytest.param("ya29." + BODY, REDACTED, id="google-oauth"),
    pytest.param("Bearer " + JWT, "Bearer [REDACTED]", id="jwt-bearer"),
    # model and platform vendors' keys
    pytest.param(f"key {OPENROUTER} ok", "key [REDACTED] ok", id="openrouter"),
    pytest.param(f"HF {HUGGINGFACE}.", "HF [REDACTED].", id="huggingface"),
    pytest.param(GROQ, REDACTED, id="groq"),
    pytest.param(XAI, REDACTED, id="xai"),
    pytest.param(PERPLEXITY, REDACTED, id="perplexity"),
    pytest.param(REPLICATE, REDACTED, id="replicate"),
    pytest.param(LANGSMITH, REDACTED, id="langsmith"),
    pytest.param(f"mail {SENDGRID} x", "mail [REDACTED] x", id="sendgrid"),
    pytest.param(DIGITALOCEAN, REDACTED, id="digitalocean"),
    # credentials by context: a connection string, a cookie, a flag, a query, a webhook
    pytest.param("AccountName=acct;AccountKey=" + BODY + "==",
                 "AccountName=acct;AccountKey=[REDACTED]", id="azure-account-key"),
    pytest.param("Cookie: session=" + BODY + "; theme=dark", "Cookie: [REDACTED]",
                 id="cookie"),
    pytest.param("'Set-Cookie': 'sid=abc123; Path=/'", "'Set-Cookie': '[REDACTED]'",
                 id="set-cookie"),
    pytest.param(f"claude --api-key {BODY} -p", "claude --api-key [REDACTED] -p",
                 id="flag-api-key"),
    pytest.param("mysql --password hunter2 -h db", "mysql --password [REDACTED] -h db",
                 id="flag-password"),
    pytest.param("gh secret set -R o/r --secret s3 ok",
                 "gh secret set -R o/r --secret [REDACTED] ok", id="flag-secret"),
    pytest.param("curl -u admin:hunter2 https://x", "curl -u admin:[REDACTED] https://x",
                 id="curl-user"),
    pytest.param("curl --user admin:hunter2", "curl --user admin:[REDACTED]",
                 id="curl-user-long"),
    pytest.param('gh --token "s3cr3t" x', 'gh --token "[REDACTED]" x', id="flag-quoted"),
    pytest.param("app --password 's3 cr3t' x", "app --password '[REDACTED]' x",
                 id="flag-single-quoted-with-space"),
    pytest.param('curl -u "admin:hunter2" https://x', 'curl -u "admin:[REDACTED]" https://x',
                 id="curl-user-quoted"),
    pytest.param("curl -uadmin:hunter2 https://x", "curl -uadmin:[REDACTED] https://x",
                 id="curl-user-no-space"),
    pytest.param("curl -u :hunter2 https://x", "curl -u :[REDACTED] https://x",
                 id="curl-no-user"),
    pytest.param("curl -u me@example.com:hunter2 x", "curl -u me@example.com:[REDACTED] x",
                 id="curl-user-email"),
    pytest.param(f"https://maps.example.com/api?key={BODY}&q=1",
                 "https://maps.example.com/api?key=[REDACTED]&q=1", id="query-key"),
    pytest.param(f"https://b.s3.amazonaws.com/o?X-Amz-Signature={BODY}&X-Amz-Date=1",
                 "https://b.s3.amazonaws.com/o?X-Amz-Signature=[REDACTED]&X-Amz-Date=1",
                 id="query-presigned"),
    pytest.param(f"https://a.blob.core.windows.net/c?sv=2024&sig={BODY}%3D",
                 "https://a.blob.core.windows.net/c?sv=2024&sig=[REDACTED]", id="query-sas"),
    pytest.param(f"https://hooks.slack.com/services/T0001/B0001/{BODY}",
                 "https://hooks.slack.com/services/[REDACTED]", id="slack-webhook"),
    pytest.param(f"https://discord.com/api/webhooks/12345678/{BODY}",
                 "https://discord.com/api/webhooks/[REDACTED]", id="discord-webhook"),
    # "pass" alone, with each separator the credential rules take (the cheap pre-check
    # once let these through whole)
    pytest.param('{\\"user\\":\\"bob\\",\\"pass\\":\\"hunter2\\"}',
                 '{\\"user\\":\\"bob\\",\\"pass\\":\\"[REDACTED]\\"}',
                 id="pass-json-in-a-string"),
    pytest.param("('pass', 'hunter2')", "('pass', '[REDACTED]')", id="pass-pair"),
    pytest.param("pass%20=%20hunter2", "pass%20=%20[REDACTED]", id="pass-url-encoded-space"),
]

# Forms an attack pass wrote whole into a ledger (REQ-17): each is redacted with its
# context kept, and its secret (the third value) is nowhere in the day file.
PW = "S3cret" + "Pw9x"
HEX32 = "0123456789abcdef" + "fedcba9876543210"
VAULT = "hvs." + "CAESIJ" + BODY + "klmNOPqrs"
PYPI = "pypi" + "-AgEIcHlwaS5vcmcCJ" + BODY * 3
FACEBOOK = "EAA" + "CEdEose0cBA" + BODY * 3
AGE_KEY = ("AGE-SECRET" + "-KEY-1" + "QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L"
           + "QPZRY9X8GF2TVDW0S3JN54KHCE")
VENDOR_FORMS = [
    # HashiCorp Vault's service, batch and recovery tokens
    pytest.param(f"vault login {VAULT}", "vault login [REDACTED]", VAULT[4:], id="vault-service"),
    pytest.param("hvb." + "AAAAAQ" + BODY * 2, REDACTED, BODY * 2, id="vault-batch"),
    pytest.param(f"(hvr.{BODY}xyzAB)", "([REDACTED])", BODY, id="vault-recovery"),
    # Shopify, PyPI, Databricks, Square, Facebook, age, NVIDIA and Twilio
    pytest.param(f"shopify shpat_{HEX32}", "shopify [REDACTED]", HEX32, id="shopify-access"),
    pytest.param(f"shpss_{HEX32}", REDACTED, HEX32, id="shopify-secret"),
    pytest.param(f"shpca_{HEX32}", REDACTED, HEX32, id="shopify-custom"),
    pytest.param(f"shppa_{HEX32}", REDACTED, HEX32, id="shopify-private"),
    pytest.param(f"twine -p {PYPI}", "twine -p [REDACTED]", BODY, id="pypi"),
    pytest.param(f"host=x dapi{HEX32} ok", "host=x [REDACTED] ok", HEX32, id="databricks"),
    pytest.param(f"dapi{HEX32}-2", REDACTED, HEX32, id="databricks-suffixed"),
    pytest.param(f"sq0atp-{BODY}ab", REDACTED, BODY, id="square-access"),
    pytest.param(f"sq0csp-{BODY * 2}abc", REDACTED, BODY, id="square-secret"),
    pytest.param(f"fb {FACEBOOK}", "fb [REDACTED]", BODY * 3, id="facebook"),
    pytest.param(f"({FACEBOOK[:43]})", "([REDACTED])", FACEBOOK[3:43], id="facebook-shortest"),
    pytest.param(AGE_KEY, REDACTED, AGE_KEY[16:], id="age"),
    pytest.param(f"key: {AGE_KEY[:40]}", "key: [REDACTED]", AGE_KEY[16:40], id="age-cut-off"),
    pytest.param(f"nvapi-{BODY * 3}_-x", REDACTED, BODY * 3, id="nvidia"),
    pytest.param(f"twilio SK{HEX32}", "twilio [REDACTED]", HEX32, id="twilio"),
]
COMMAND_LINE_FORMS = [
    # a credential flag whose name opens with words of its own
    pytest.param(f"wget --http-password {PW} https://x/f", "wget --http-password [REDACTED] https://x/f",
                 PW, id="flag-http-password"),
    pytest.param(f"--proxy-password '{PW} 2' -q", "--proxy-password '[REDACTED]' -q", PW,
                 id="flag-proxy-password"),
    pytest.param(f"migrate --db_passwd {PW}", "migrate --db_passwd [REDACTED]", PW,
                 id="flag-db-passwd"),
    pytest.param(f"tf -vault-token {PW}", "tf -vault-token [REDACTED]", PW, id="flag-vault-token"),
    pytest.param(f"--webhook-secret {PW}", "--webhook-secret [REDACTED]", PW,
                 id="flag-webhook-secret"),
    pytest.param(f"--openai-api-key {PW}", "--openai-api-key [REDACTED]", PW,
                 id="flag-openai-api-key"),
    # a registry login's "-p", redis-cli's "-a"
    pytest.param(f"docker login -u bob -p {PW} ghcr.io",
                 "docker login -u bob -p [REDACTED] ghcr.io", PW, id="docker-login"),
    pytest.param(f"podman login -p{PW} quay.io", "podman login -p[REDACTED] quay.io", PW,
                 id="podman-login-glued"),
    pytest.param(f"redis-cli -h cache -a {PW} ping", "redis-cli -h cache -a [REDACTED] ping", PW,
                 id="redis-cli"),
    pytest.param(f"redis-cli --pass '{PW}'", "redis-cli --pass '[REDACTED]'", PW,
                 id="redis-cli-pass"),
]
ENCODED_AND_COOKIE_FORMS = [
    # "bearer" assigned with "=": any value
    pytest.param(f"GET /feed?bearer={PW}&page=2", "GET /feed?bearer=[REDACTED]&page=2", PW,
                 id="bearer-query"),
    pytest.param(f"BEARER = '{PW} two'", "BEARER = '[REDACTED]'", PW, id="bearer-assigned"),
    # a URL percent-encoded as a query parameter's value, once or twice
    pytest.param(f"302 /login?next=https%3A%2F%2Fdeploy%3A{PW}%40git.example.com%2Fr",
                 "302 /login?next=https%3A%2F%2Fdeploy%3A[REDACTED]%40git.example.com%2Fr",
                 PW, id="url-encoded"),
    pytest.param(f"u=https%253a%252f%252fbob%253a{PW}%2540x%2540host%252F",
                 "u=https%253a%252f%252fbob%253a[REDACTED]%2540host%252F", PW,
                 id="url-encoded-twice"),
    # an "@" of the password, escaped in the URL: the userinfo ends at the last "@"
    pytest.param(f"next=http%3A%2F%2Fbob%3A{PW}%2540x%40host%2Fa%40b",
                 "next=http%3A%2F%2Fbob%3A[REDACTED]%40host%2Fa%40b", PW,
                 id="url-encoded-escaped-at"),
    # a session cookie outside a Cookie header, by its server's name
    pytest.param(f"jar: sessionid={HEX32}; theme=dark", "jar: sessionid=[REDACTED]; theme=dark",
                 HEX32, id="django-session"),
    pytest.param(f"PHPSESSID={HEX32[:26]}", "PHPSESSID=[REDACTED]", HEX32[:26], id="php-session"),
    pytest.param(f"?JSESSIONID={HEX32.upper()}.node0&a=1", "?JSESSIONID=[REDACTED]&a=1",
                 HEX32.upper(), id="java-session"),
    pytest.param(f"ASPSESSIONIDQQGGQGPC={BODY}", "ASPSESSIONIDQQGGQGPC=[REDACTED]", BODY,
                 id="asp-session"),
    pytest.param(f"ASP.NET_SessionId={BODY}", "ASP.NET_SessionId=[REDACTED]", BODY,
                 id="aspnet-session"),
    pytest.param(f"connect.sid=s%3A{BODY}.x", "connect.sid=[REDACTED]", BODY,
                 id="express-session"),
]
ATTACKED_FORMS = VENDOR_FORMS + COMMAND_LINE_FORMS + ENCODED_AND_COOKIE_FORMS


def written(tmp_path: Path, *lines: dict[str, object]) -> bytes:
    """The bytes of the day files once `lines` were appended through a real RunLedger in
    tmp_path/ledger: what reaches the disk, where no secret may."""
    led = RunLedger(str(tmp_path / "ledger"))
    try:
        for line in lines:
            led.append(line)
    finally:
        led.close()
    return b"".join(p.read_bytes() for p in sorted((tmp_path / "ledger").glob("*.jsonl")))


@pytest.mark.parametrize(("text", "expected"), REDACTED_CASES)
def test_each_form_is_redacted_with_its_context_kept(text: str, expected: str) -> None:
    assert scrub_text(text) == (expected, 1)


@pytest.mark.parametrize(("text", "expected"), REDACTED_CASES)
def test_scrubbed_text_is_a_fixed_point(text: str, expected: str) -> None:
    out, _ = scrub_text(text)
    again, n = scrub_text(out)
    assert (again, n) == (out, 0)
    assert again is out


@pytest.mark.parametrize(
    ("text", "expected", "count"),
    [
        (f"a {ANTHROPIC} b {GITHUB} c", "a [REDACTED] b [REDACTED] c", 2),
        ("password=x token=y", "password=[REDACTED] token=[REDACTED]", 2),
        (f"{AWS}:{STRIPE}", "[REDACTED]:[REDACTED]", 2),
        (f"Authorization: Bearer {ANTHROPIC}", "Authorization: Bearer [REDACTED]", 1),
        (f"token={JWT}", "token=[REDACTED]", 1),
        # The AWS key ends where its 16 characters do, so the key glued behind it is a
        # second secret.
        (AWS + OPENAI, "[REDACTED][REDACTED]", 2),
        (f"{PEM}\n{PEM}", "[REDACTED]\n[REDACTED]", 2),
    ],
)
def test_counts_are_exact(text: str, expected: str, count: int) -> None:
    assert scrub_text(text) == (expected, count)


FALSE_POSITIVES = [
    "task skip sketch",
    "sk-drain",
    "harness sk-nightly-build-2025-10-01 finished",
    "a1b2c3d4e5f60718293a4b5c6d7e8f9012345678",
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "prev=sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "123e4567-e89b-12d3-a456-426614174000",
    "2025-10-01T12:34:56.789012Z",
    "2025-10-01T12:34:56+02:00",
    "/home/u/.local/state/harness/jobs/pr-review/4.log",
    "claude-sonnet-4-5-20250929",
    "gpt-5-codex",
    "git@github.com:owner/repo.git",
    "ssh://git@github.com/owner/repo.git",
    "https://alice@example.com/x",
    "https://github.com/owner/repo/pull/42",
    "http://localhost:8080/health",
    "https://cloud.langfuse.com/project/cm1abc/traces/0123456789abcdef0123456789abcdef",
    "max_tokens=4096 input_tokens: 1523 token_count=3",
    "the bearer of this note; Bearer tokens expire; bearer responsibilities",
    "Authorization: Bearer",
    "a monkey on the keyboard, a broken token, a secret sauce",
    "password reset link sent",
    "ghp_short gho_ xoxb-1 AKIASHORT sk-ant-short eyJustAWord",
    "risk-assessment-2025-10-01-0123456789abcdef",
    "",
    "ünïcödé ✓ 日本語",
    "see // note: foo@bar",
    "//host:8080/path@x",
    "bypass=1 compass: north",
    "hf_model_cache hf_hub_download xai-grok-4 pplx-online r8_cache SG.view",
    "git push -u origin main; sort -u list.txt; ssh -u 2 host",
    "--token-count 3 --password-file /run/secrets/db --api-key-env OPENAI_API_KEY",
    "?keyword=value&keys=3 signature verified; cookie jar; the Cookie Monster",
    "https://hooks.example.com/services/x https://discord.com/channels/1/2",
    "dop_v1_short do_v1_x",
    "pip install --user git+https://github.com/o/r; docker run -u 1000:1000 img",
    "python -u script.py:12 nightly-update: ok",
]


@pytest.mark.parametrize("text", FALSE_POSITIVES)
def test_ordinary_text_is_returned_as_the_same_object(text: str) -> None:
    out, n = scrub_text(text)
    assert n == 0
    assert out is text


def test_scrub_value_walks_nested_structures() -> None:
    clean_models = [{"model": "claude-sonnet-4-5-20250929", "provider": "anthropic"}]
    line = {
        "reason": "failed: password=hunter2",
        "models": clean_models,
        "sessions": ("s1", f"key {OPENAI}"),
        "errors": {f"AuthError {GITHUB}": 2, "Timeout": 1},
        f"note {AWS}": [1, 2.5, None, True, [f"Bearer {JWT}"]],
        "exit_code": 1,
    }
    out, n = scrub_value(line)
    assert n == 5
    assert out == {
        "reason": "failed: password=[REDACTED]",
        "models": clean_models,
        "sessions": ["s1", "key [REDACTED]"],
        "errors": {"AuthError [REDACTED]": 2, "Timeout": 1},
        "note [REDACTED]": [1, 2.5, None, True, ["Bearer [REDACTED]"]],
        "exit_code": 1,
    }
    assert isinstance(out, dict)
    assert out["models"] is clean_models
    assert line["reason"] == "failed: password=hunter2"  # the input is not mutated


def test_a_value_under_a_credential_name_is_redacted_whole() -> None:
    # The structured form of "password: hunter2": the key names the secret, so the value
    # goes whatever its shape; a figure, a flag, or a value under a look-alike name stays.
    payload = {
        "password": "hunter2", "api_key": "AAAABBBBCCCCDDDDEEEE", "pin": 1234,
        "env": {"GITHUB_TOKEN": "tok_abc123secretvalue", "DB_PASSWORD": "4321"},
        "tests": {"pass": 42, "fail": 0}, "HAS_KEY": 1, "PRIMARY_KEY": "id",
        "Authorization": "Bearer abc", "X-Auth-Token": "t", "aws_secret_access_key": "x",
        "refresh_token": "r", "Cookie": "sid=1", "pwd": "p",
        "max_tokens": 4096, "token_count": 3, "bypass": "on", "password_hash": "ab12",
        "secret": None, "pass": True, "token": "", "client_secret": REDACTED,
        "tokens": {"input": 3}, "credentials": ["a", {"password": "x"}],
    }
    out, n = scrub_value(payload)
    assert out == {
        "password": REDACTED, "api_key": REDACTED, "pin": 1234,
        "env": {"GITHUB_TOKEN": REDACTED, "DB_PASSWORD": REDACTED},
        "tests": {"pass": 42, "fail": 0}, "HAS_KEY": 1, "PRIMARY_KEY": "id",
        "Authorization": REDACTED, "X-Auth-Token": REDACTED, "aws_secret_access_key": REDACTED,
        "refresh_token": REDACTED, "Cookie": REDACTED, "pwd": REDACTED,
        "max_tokens": 4096, "token_count": 3, "bypass": "on", "password_hash": "ab12",
        "secret": None, "pass": True, "token": "", "client_secret": REDACTED,
        "tokens": {"input": 3}, "credentials": ["a", {"password": REDACTED}],
    }
    assert n == 11
    assert scrub_value(out) == (out, 0)


def test_a_work_row_never_carries_a_secret_under_its_name(tmp_path: Path) -> None:
    with WorkLedger(tmp_path, "r1") as wl:
        wl.record("run.open", None, {"password": "hunter2",
                                     "env": {"GITHUB_TOKEN": "tok_abc123secretvalue"}})
    text = b"".join(p.read_bytes() for p in tmp_path.rglob("*.jsonl")).decode()
    assert "hunter2" not in text and "tok_abc123" not in text
    assert '"env":{"GITHUB_TOKEN":"[REDACTED]"}' in text and '"password":"[REDACTED]"' in text


def test_scrub_value_returns_clean_structures_untouched() -> None:
    line = {"outcome": "success", "models": [{"model": "gpt-5-codex"}], "pair": ("a", 1)}
    assert scrub_value(line) == (line, 0)
    assert scrub_value(line)[0] is line
    pair = ("a", 1)
    assert scrub_value(pair)[0] is pair


@pytest.mark.parametrize("value", [0, 1.5, None, True, b"sk-bytes", 10**30])
def test_scrub_value_leaves_non_text_alone(value: object) -> None:
    out, n = scrub_value(value)
    assert n == 0
    assert out is value


def test_scrub_value_twice_finds_nothing_new() -> None:
    line = {"a": [f"{ANTHROPIC} and {SLACK}", {"token=x": "https://u:p@h"}]}
    once, n = scrub_value(line)
    assert n == 4
    assert scrub_value(once) == (once, 0)


# Text that is likely to contain pieces of the secret forms, so the properties below
# exercise the rules and their seams rather than only clean text.
FRAGMENTS = [
    " ", "\n", "'", '"', "\\", ":", "=", "@", "/", "[REDACTED]", "[", "]",
    "sk-", "sk-ant-", "sk_live_", "ghp_", "github_pat_", "xoxb-", "AKIA", "ASIA", "AIza",
    "eyJ", ".", "-----BEGIN RSA PRIVATE KEY-----", "-----END RSA PRIVATE KEY-----",
    "Bearer ", "Basic ", "Authorization: ", "token=", "password: ", "api_key=", "secret ",
    "https://", "user:", "git@", "0123456789", "ABCDEFGHIJKLMNOP", "abcdefghijklmnop",
    BODY, ANTHROPIC, AWS, JWT, GITHUB,
    "hf_", "gsk_", "xai-", "pplx-", "r8_", "lsv2_pt_", "SG.", "dop_v1_", "Cookie: ",
    "--api-key ", "--password ", " -u ", "?key=", "&sig=", "hooks.slack.com/services/",
    "discord.com/api/webhooks/", "AccountKey=", OPENROUTER, HUGGINGFACE,
    # every separator of a credential assignment, after each key that needs one
    "pass", "pwd", "%20", "%3A", "%3d", "\\", ", ", "\t",
    "=>", ":=", "\u00a0", "&", "#", "?", "_KEY=", ":/\\/", "_eyJ", "mysql ", " -p",
    "sshpass -p ", "whsec_", "xoxe-", "glrt-", "GOCSPX-", "api_org_", "_AUTH=", "__AUTH",
    # a standalone Basic credential, its pieces, and words that read as base64
    "basic ", "BASIC\t", "dXNlcjpwYXNzd29yZA==", "dXNlcjpw", "Og", "==", "Only", "Overview",
]
secretish_text = st.lists(
    st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=8)), max_size=24
).map("".join)
any_text = st.one_of(st.text(), secretish_text)


@given(any_text)
def test_scrubbing_is_idempotent_and_total(text: str) -> None:
    out, n = scrub_text(text)
    assert n >= 0
    assert (out is text) == (n == 0)
    again, m = scrub_text(out)
    assert m == 0
    assert again == out


@given(any_text)
def test_precheck_never_hides_a_secret(text: str) -> None:
    # The cheap pre-check may only skip text in which the full rule set finds nothing.
    if not might_hold_secret(text):
        assert _one_pass(text) == (text, 0)


TOKEN_CHARS = string.ascii_letters + string.digits + "_-"


@given(
    before=any_text,
    after=any_text,
    body=st.text(alphabet=TOKEN_CHARS, min_size=30, max_size=30),
)
def test_an_inserted_key_never_survives(before: str, after: str, body: str) -> None:
    assume(body not in before and body not in after)
    out, n = scrub_text(f"{before} sk-ant-{body} {after}")
    assert n >= 1
    assert body not in out


# -- the gate in front of scrub_value, for canonical JSON bytes ---------------------------

# Names the credential rule of scrub_value hides a string under, and names it does not;
# and keys whose probe ("KEY: v4lue") the trigger reads across the key's end.
KEY_NAMES = ["pass", "password", "passwd", "pwd", "token", "api_key", "GITHUB_TOKEN",
             "secret", "Authorization", "cookie", "private_key", "sig", "//host",
             "max_tokens", "token_count", "note", "deps", "harness", "pass ", "PASS'",
             "pass%20", "Pass\u00a0", "x pass \t", "//h", "// h", "pass'\u00a0%20"]
# Pieces of every branch of the trigger that FRAGMENTS lacks, and UTF-8 neighbours.
GATE_FRAGMENTS = [*FRAGMENTS, "mariadb ", "ya29.", "npm_", "xapp-", "--user ", "signature=",
                  "SIGNATURE%3D", "hooks.slack", "glpat-", "gldt-", "gho_", "_org_", "yJ",
                  "AKIA", "AIza", "KEY", "SECRET", "PASSPHRASE", "ZATION", "BEARER", "PWD",
                  "COOKIE", "k-", "k_", "é", "\u00a0", "日本", "(", "//", ":/", "-", "'",
                  "Basic: ", "bASIC ", "BaSiC\t\t", "+/+/", "dXNlcjpwYXNz"]
gate_text = st.one_of(
    st.text(),
    st.lists(st.one_of(st.sampled_from(GATE_FRAGMENTS), st.text(max_size=8)),
             max_size=24).map("".join),
)
json_keys = st.one_of(st.sampled_from(KEY_NAMES), gate_text)
json_values = st.recursive(
    st.one_of(gate_text, st.integers(), st.booleans(), st.none()),
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(json_keys, inner, max_size=4)),
    max_leaves=12,
)
# Values around the one asked about, as a run of a ledger's payloads holds them: the
# gate is searched from where that value starts, and must find a place inside it.
BEFORE = b'{"note":"Authorization: Bearer x0x0x0x0x0x0"}\n["a"]\n'
AFTER = b'\n{"url":"https://host/x","pass":"p"}'


def hint_inside(value: object) -> bool:
    """Whether the first place the gate finds, searching a run of values from where the
    canonical JSON of `value` starts in it, is inside that value."""
    try:
        data = canonical(value)
    except ValueError:
        assume(False)  # a lone surrogate: no canonical JSON to ask about
    at = json_secret_hint(BEFORE + data + AFTER, len(BEFORE))
    return len(BEFORE) <= at < len(BEFORE) + len(data)


# Every branch of the trigger on its own, from the tables it is built from: each
# case-sensitive one, and each alternative of a caseless fragment, in each case.
TRIGGER_BRANCHES = [
    *_TRIGGER_BRANCHES,
    *(f"{case}(?i:{alt})" for first, alts in _CASELESS_FRAGMENTS
      for case in (first, first.upper()) for alt in alts),
]
# Strings that one branch of the trigger matches (and no other), some of each branch;
# the JSON gate must find each, so that none is found only by chance.
TRIGGER_SAMPLES = [
    "-----BEGIN", "a://b", "//h:", ":\\/", ":/\\/", *(f"gl{x}-" for x in (
        "pat", "dt", "rt", "cbt", "ptt", "ft", "imt", "agent", "oas", "soat")),
    "_org_", "whsec_", "GOCSPX-", "sshpass", "mysql", "mariadb", "xapp-", "hf_", "xai-",
    "pplx-", "r8_", "lsv2_", "SG.", "_v1_", "hooks.slack", "/webhooks/", "-u", "--user",
    "(-u", "npm_", "ya29.", "yJ", "k-", "k_", *(f"gh{x}_" for x in "pousr"), "_pat_",
    *(f"xox{x}-" for x in "abeprs"), "AKIA", "ASIA", "AIza",
    "key", "Ken", "KEY", "cret", "CrEt", "passw", "Passp", "zation", "ZATION", "bearer",
    "Bearer", "basic dXNlcjp", "bAsIc:  +/+/+/+", "Basic 0000000", "BASIC:\tOg+/aZ9",
    "BaSiC: Og+/aZ9", "pwd", "PWD", "pass=", "pass :", "pass' %20=", "Pass\u00a0%3a",
    "pass%3D", "PASS=", "pass' ,", 'pass" ,', "Pass' ,", "cookie", "COOKIE", "sig=", "SIG%3d",
    "signature=", "Signature%3D",
    "hvs.", "hvb.", "hvr.", "shpat_", "shpss_", "shpca_", "shppa_", "pypi-AgE", "dapi0",
    "sq0atp-", "sq0csp-", "EAA", "nvapi-", "SK" + "0123456789abcdef" * 2,
    "login ", "login\t", "redis-cli", "_AUTH=", "_auth", "'auth'", "LS0tLS1CRUdJTi",
    "%3A%2F%2F", "%253a%252F%2F", "sessionid=", "PHPSESSID=", "JSESSIONID=",
    "ASPSESSIONIDQQGGQGPC=", "SessionId=", "connect.sid=",
    "upload ", "upload\t", "poetry ", "?auth=", "&AUTH=", "_PAT=", "?code=", "&CoDe=",
]


def test_the_trigger_is_built_from_its_tables_alone() -> None:
    # So that TRIGGER_BRANCHES is every branch it has: one written into the pattern
    # some other way would escape the tests below.
    caseless = [f"{first}(?i:{'|'.join(alts)})" for first, alts in _CASELESS_FRAGMENTS]
    assert _TRIGGER.pattern == "|".join(
        [*_TRIGGER_BRANCHES, *caseless, *(b[0].upper() + b[1:] for b in caseless)])


@pytest.mark.parametrize("branch", TRIGGER_BRANCHES)
def test_each_branch_of_the_trigger_has_a_sample_the_gate_must_find(branch: str) -> None:
    # The JSON gate (scrub._GATE_BRANCHES) is written apart from the trigger, and a branch
    # of the trigger it lacked would let through a value that scrub_value rewrites. A
    # sample JSON escapes a character of does not count (the gate finds every escape,
    # whatever its branches), but for the branches that hold a backslash or a line
    # break themselves.
    rx = re.compile(branch, re.ASCII)
    found = [m for m in map(rx.search, TRIGGER_SAMPLES) if m is not None]
    assert [m for m in found
            if canonical(m.string) == b'"' + m.string.encode() + b'"'
            or "\\" in m.group() or "\n" in m.group()], (
        f"TRIGGER_SAMPLES holds no sample of {branch!r} that JSON writes as it is")


@pytest.mark.parametrize("text", TRIGGER_SAMPLES)
def test_the_json_gate_finds_each_branch_of_the_trigger(text: str) -> None:
    # One branch alone matches it: the gate's place in it is that branch's to find.
    assert len([b for b in TRIGGER_BRANCHES if re.search(b, text, re.ASCII)]) == 1
    for value in (text, f"ä {text} ä", {text: 0}, [0, {"k": [text]}]):
        assert hint_inside(value), value


@pytest.mark.parametrize("key", KEY_NAMES)
def test_the_json_gate_reads_a_key_as_the_credential_probe_does(key: str) -> None:
    # canonical JSON follows a key by '":' where the probe puts ": v4lue"
    if _TRIGGER.search(key + _PROBE) is not None:
        assert hint_inside({key: "v"})
    if _names_a_credential(key):
        assert scrub_value({key: "v"})[1] == 1


@given(gate_text)
def test_the_json_gate_finds_every_place_the_trigger_does(text: str) -> None:
    # In a string or a key; and in a key followed by the probe `_names_a_credential`
    # scrubs, which canonical JSON follows by '":' instead.
    if _TRIGGER.search(text) is not None:
        assert hint_inside(text)
        assert hint_inside({text: 1})
        assert hint_inside([1, {"a": {text: [text]}}])
    if _TRIGGER.search(text + _PROBE) is not None:
        assert hint_inside({text: "v"})


@given(json_values)
def test_the_json_gate_never_hides_what_scrub_value_finds(value: object) -> None:
    # It may only say "nothing here" of a value in which scrub_value replaces nothing.
    if scrub_value(value)[1]:
        assert hint_inside(value)


PLACES = {
    "value": lambda s: {"log": s},
    "key": lambda s: {"headers": {s: "x"}},
    "list": lambda s: {"argv": ["deploy", s, 3]},
    "deep": lambda s: [{"a": [[{"b": s}]]}],
    "alone": lambda s: s,  # as a kind or a task id is searched
    "credential name": lambda s: {"env": {"password": s}},
}


@pytest.mark.parametrize("secret", [p.values[0] for p in REDACTED_CASES + ATTACKED_FORMS],
                         ids=[p.id for p in REDACTED_CASES + ATTACKED_FORMS])
@settings(max_examples=20, deadline=None)
@given(place=st.sampled_from(sorted(PLACES)), before=gate_text, after=gate_text)
def test_the_json_gate_finds_a_secret_of_each_form_in_any_place(
        secret: str, place: str, before: str, after: str) -> None:
    value = PLACES[place](f"{before} {secret} {after}")
    assume(scrub_value(value)[1] > 0)  # the text around may, rarely, undo the form
    assert hint_inside(value)


@pytest.mark.parametrize("value", [
    {"pass": "hunter2"},  # neither string alone is a secret: the pair is
    {"pass ": "hunter2"},  # the probe reads "pass :", across the key's end
    {"env": {"password": "hunter2", "user": "bob"}},
    ["ok", {"argv": ["deploy", f"--token={BODY}"]}],
    {"note": f"two lines\n{ANTHROPIC}"},  # escaped in JSON: the gate cannot look inside
    {ANTHROPIC: 1},
    [f"Authorization: Bearer {BODY}"],
    {"db": "mariadb -psecr3t"},
    {"u": "https://a.example/x?sig=abc"},
    {"u": "https://a.firebaseio.com/x.json?auth=abc"},
    {"argv": ["env", "GH_PAT=abc", "gh"]},
    {"argv": ["twine upload -p abc"]},
    {"argv": "poetry config http-basic.x u abc"},
    {"auths": {"ghcr.io": {"auth": "Y2ktYm90OnMzY3IzdA=="}}},  # "ci-bot:s3cr3t"
], ids=["pass-pair", "pass-space", "nested-password", "flag-in-a-list", "escaped", "key",
        "bearer", "mysql", "sig", "query-auth", "pat-env", "twine", "poetry", "docker-auth"])
def test_the_json_gate_opens_for_a_secret_in_any_place(value: object) -> None:
    assert scrub_value(value)[1] == 1
    assert hint_inside(value)


def test_the_json_gate_stays_shut_on_a_clean_goal_payload() -> None:
    # What keeps a clean chain cheap. (A gate, not a judge: "max_tokens" opens it, and
    # scrub_value then finds nothing.)
    value = {"commit": "0a" * 20, "deps": ["t1", "t2"], "harness": "worker", "run_id": 7,
             "note": "step 12 of the plan", "ratio": 0.5, "done": True, "kind": "task.started",
             "ts": "2026-01-02T03:04:05.000000006Z", "hash": hashlib.sha256(b"x").hexdigest()}
    assert scrub_value(value) == (value, 0)
    assert json_secret_hint(canonical(value)) == -1
    assert json_secret_hint(b'{"max_tokens":1}') == len(b'{"max_to')


# -- errors quote what they refuse, scrubbed ------------------------------------------------


@pytest.mark.parametrize("line", [
    {"type": "opened", "harness": "h", "run_id": 1, "attempt": ANTHROPIC},
    {"type": "opened", "harness": "h", "run_id": 1, "outcome": ANTHROPIC},
    {"type": "opened", "harness": "h", "run_id": 1, ANTHROPIC: 1},
    {"type": ANTHROPIC, "harness": "h", "run_id": 1},
    {"type": "opened", "harness": "h", "run_id": 1, "at": f"token={BODY}"},
    {"type": "opened", "harness": ANTHROPIC, "run_id": "x"},
    # A refusal named after the check (the record's harness set on the error later).
    {"type": "opened", "harness": ANTHROPIC, "run_id": 1, "bogus": 1},
    {"type": "opened", "harness": ANTHROPIC, "run_id": 1, "attempt": "x"},
    {"type": "closed", "harness": ANTHROPIC, "run_id": 1, "tokens": {"input": "x"}},
], ids=["int-field", "enum-field", "unknown-key", "type", "at", "harness",
        "unknown-key-by-secret-harness", "int-field-by-secret-harness",
        "nested-by-secret-harness"])
def test_a_refused_line_never_quotes_a_secret(tmp_path: Path, line: dict[str, object]) -> None:
    led = RunLedger(str(tmp_path / "ledger"))
    try:
        with pytest.raises(LineRejected) as info:
            led.append(line)
    finally:
        led.close()
    text = str(info.value)
    # A secret the error would quote is redacted; a harness name that reads as a secret
    # is refused before anything else, and that refusal quotes no name at all.
    assert REDACTED in text or text.startswith("harness name is over 256 bytes or reads as")
    assert BODY not in text and "api03" not in text


def test_a_refused_work_row_never_quotes_a_secret(tmp_path: Path) -> None:
    with WorkLedger(tmp_path, "r1") as wl:
        with pytest.raises(WorkLedgerError) as info:
            wl.record("run." + ANTHROPIC, None, {})
        assert ANTHROPIC not in str(info.value) and REDACTED in str(info.value)
        for task_id in (f"t {GITHUB}", f'"{GITHUB}', GITHUB):  # refused: a secret
            with pytest.raises(WorkLedgerError) as info:
                wl.record("task.started", task_id, {})
            assert "QRSTUVWXYZ" not in str(info.value), task_id


def test_a_skipped_legacy_run_is_logged_without_its_secret() -> None:
    entry = SkippedEntry(ANTHROPIC, 3, f"not an RFC 3339 time: 'password={BODY}'")
    assert str(entry) == "[REDACTED][3]: not an RFC 3339 time: 'password=[REDACTED]'"


# -- thresholds and word boundaries -----------------------------------------------------

# Each rule's shortest secret and the same shape one character short (which must stay
# readable): the length thresholds are what separates a key from an ordinary word.
A20 = "Ab1Cd2Ef3Gh4Ij5Kl6Mn"  # 20 token characters holding digits and capitals
NOT_A_SECRET_YET = [
    "sk-ant-" + A20[:19],
    "sk-" + A20[:19],
    "sk_live_" + A20[:15],
    "ghp_" + A20[:19],
    "github_pat_" + A20[:19],
    "glpat-" + A20[:19],
    "xoxb-" + A20[:14],
    "xapp-1-" + A20[:9],
    "npm_" + (A20 + A20)[:35],
    "ya29." + A20[:19],
    "AKIA" + "ABCDEFGHIJ01234",
    "AKIA" + "ABCDEFGHIJ0123456",  # 17: longer than an access key id
    "AIza" + (A20 + A20)[:34],
    "Bearer a1b2c3d",
    "Bearer " + "abcdefghij" * 3 + "a",
    "eyJabc.eyJabcd",
    "eyJabcd.eyJabc",
    "https://" + A20[:19] + "@example.com/x",
]
JUST_A_SECRET = [
    ("sk-ant-" + A20, REDACTED),
    ("sk-" + A20, REDACTED),
    ("sk_live_" + A20[:16], REDACTED),
    ("ghp_" + A20, REDACTED),
    ("github_pat_" + A20, REDACTED),
    ("glpat-" + A20, REDACTED),
    ("xoxb-" + A20[:15], REDACTED),
    ("xapp-1-" + A20[:10], REDACTED),
    ("npm_" + (A20 + A20)[:36], REDACTED),
    ("ya29." + A20, REDACTED),
    ("AKIA" + "ABCDEFGHIJ012345", REDACTED),
    ("AIza" + (A20 + A20)[:35], REDACTED),
    ("Bearer a1b2c3d4", "Bearer [REDACTED]"),
    ("Bearer " + "abcdefghij" * 3 + "ab", "Bearer [REDACTED]"),
    ("eyJabcd.eyJabcd", REDACTED),
    ("https://" + A20 + "@example.com/x", "https://[REDACTED]@example.com/x"),
]


@pytest.mark.parametrize("text", NOT_A_SECRET_YET)
def test_one_character_short_of_a_key_is_not_redacted(text: str) -> None:
    out, n = scrub_text(text)
    assert (out, n) == (text, 0)


@pytest.mark.parametrize(("text", "want"), JUST_A_SECRET)
def test_the_shortest_key_of_each_form_is_redacted(text: str, want: str) -> None:
    assert scrub_text(text) == (want, 1)


# No key starts in the middle of a word: the same body glued to a preceding letter or
# digit is an identifier, not a credential.
MID_WORD = [
    "mask-" + A20,
    "desk_live_" + A20[:16],
    "Xghp_" + A20,
    "fxoxb-" + A20[:15],
    "ZAKIA" + "ABCDEFGHIJ012345",
    "XAIza" + (A20 + A20)[:35],
    "Xbearer a1b2c3d4",
    "XeyJabcd.eyJabcd",
    "dir//bob:pw@host",
]


@pytest.mark.parametrize("text", MID_WORD)
def test_a_key_shape_inside_a_word_is_left_alone(text: str) -> None:
    assert scrub_text(text) == (text, 0)


@pytest.mark.parametrize("scheme", [
    "AWS4-HMAC-SHA256", "Basic", "Bearer", "Digest", "DPoP", "GNAP", "HOBA", "Mutual",
    "Negotiate", "NTLM", "PrivateToken", "SCRAM-SHA-1", "SCRAM-SHA-256", "Token", "vapid",
    "ApiKey", "Hawk", "OAuth",
])
def test_an_authorization_scheme_is_kept_as_context(scheme: str) -> None:
    assert scrub_text(f"Authorization: {scheme} abc123") == (
        f"Authorization: {scheme} [REDACTED]", 1)


@pytest.mark.parametrize(("text", "want"), [
    ("//bob:hunter2@db.example.com/x", "//bob:[REDACTED]@db.example.com/x"),
    ("https:\\/\\/alice:hunter2@example.com", "https:\\/\\/alice:[REDACTED]@example.com"),
])
def test_url_credentials_without_other_secret_words_are_found(text: str, want: str) -> None:
    assert scrub_text(text) == (want, 1)


@pytest.mark.parametrize("scheme", ["Basic", "bearer", "DIGEST", "Negotiate", "token"])
def test_an_authorization_scheme_alone_is_no_credential(scheme: str) -> None:
    # The credential is already gone: what is left is the scheme's name, kept as it is.
    text = f"curl -H 'Authorization: {scheme}' -X POST"
    out, n = scrub_text(text)
    assert (out, n) == (text, 0)
    assert out is text


# -- the newest forms at their edges --------------------------------------------------------
# Mutation testing of the rules for nine more vendors, cookies, flags, curl -u, queries and
# webhooks: each case below tells a real rule from one with a part of it changed.

# prefix, the characters its body may hold, the shortest body, and what may not precede it
VENDOR_KEYS: list[tuple[str, str, int, str]] = [
    ("hf_", "1aZ", 30, "Zz9_"),
    ("gsk_", "1aZ", 40, "Zz9_"),
    ("xai-", "1aZ", 40, "Zz9_-"),
    ("pplx-", "1aZ", 40, "Zz9_-"),
    ("r8_", "1aZ", 30, "Zz9_"),
    ("lsv2_pt_", "1aZ_", 20, "Zz9_"),
    ("lsv2_sk_", "1aZ_", 20, "Zz9_"),
    ("dop_v1_", "1a", 40, "Zz9_"),
    ("doo_v1_", "f0", 40, "Zz9_"),
    ("dor_v1_", "9e", 40, "Zz9_"),
]


def body(chars: str, n: int) -> str:
    return (chars * n)[:n]


VENDOR_EDGES: list[tuple[str, tuple[str, int]]] = []
for prefix, chars, n, before in VENDOR_KEYS:
    key = prefix + body(chars, n)
    VENDOR_EDGES += [(key, (REDACTED, 1)), (f"({key})", (f"({REDACTED})", 1)),
                     (key[:-1], (key[:-1], 0))]
    VENDOR_EDGES += [(c + key, (c + key, 0)) for c in before]
# SendGrid: two parts of at least 16 token characters each, any of them in either part.
SG_PART = "1aZ_-" * 3 + "b"
VENDOR_EDGES += [
    ("SG." + SG_PART + "." + SG_PART, (REDACTED, 1)),
    ("SG." + SG_PART[:-1] + "." + SG_PART, ("SG." + SG_PART[:-1] + "." + SG_PART, 0)),
    ("SG." + SG_PART + "." + SG_PART[:-1], ("SG." + SG_PART + "." + SG_PART[:-1], 0)),
] + [(c + "SG." + SG_PART + "." + SG_PART, (c + "SG." + SG_PART + "." + SG_PART, 0))
     for c in "Zz9_-"]
VENDOR_EDGES += [
    # A Hugging Face key's body is letters, with or without digits (real ones are 34
    # letters), and an organisation's key has its own prefix.
    ("hf_" + "aZ" * 15, (REDACTED, 1)),
    ("hf_" + "aZ" * 15 + "1", (REDACTED, 1)),
    ("login 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", ("login [REDACTED]", 1)),
    ("api_org_AbcdEfghIjklMnopQrstUvwxYzAbcdEfgh", (REDACTED, 1)),
    ("api_org_" + "aZ" * 14 + "a", ("api_org_" + "aZ" * 14 + "a", 0)),
    ("my_api_org_" + "aZ" * 15, ("my_api_org_" + "aZ" * 15, 0)),
    # OpenRouter's prefix, one character short and just long enough.
    ("sk-or-" + "1aZ_-" * 4, (REDACTED, 1)),
]

CONTEXT_EDGES: list[tuple[str, tuple[str, int]]] = [
    # Cookie: any case, any quote, to the end of its line or its quote; never mid-word.
    ("cookie: sid=abc", ("cookie: [REDACTED]", 1)),
    ("COOKIE: sid=abc", ("COOKIE: [REDACTED]", 1)),
    ('{"Cookie": "sid=abc; x=1"}', ('{"Cookie": "[REDACTED]"}', 1)),
    ('curl -H "Cookie: sid=abc" -X GET', ('curl -H "Cookie: [REDACTED]" -X GET', 1)),
    ("Cookie: sid=abc\r\nHost: x", ("Cookie: [REDACTED]\r\nHost: x", 1)),
    ("Cookie: sid=abc\nHost: x", ("Cookie: [REDACTED]\nHost: x", 1)),
    ("Cookie: a\\b c", ("Cookie: [REDACTED]", 1)),
    ('"Cookie: sid=abc\\" x', ('"Cookie: [REDACTED]\\" x', 1)),
    ("'Cookie: sid=abc\\' x", ("'Cookie: [REDACTED]\\' x", 1)),
    ("Cookie:", ("Cookie:", 0)),
    ("FORTUNECOOKIE: yes", ("FORTUNECOOKIE: yes", 0)),
    ("fortuneCookie: yes", ("fortuneCookie: yes", 0)),
    ("fortunecookie: yes", ("fortunecookie: yes", 0)),
]
CONTEXT_EDGES += [
    # --flag VALUE: each credential flag, either separator, one dash or two, any case.
    *[(f"cmd --{flag} v4lue x", (f"cmd --{flag} [REDACTED] x", 1)) for flag in [
        "api_key", "apikey", "access-key", "access_key", "accesskey", "passwd",
        "client-secret", "client_secret", "clientsecret", "token", "auth-token",
        "auth_token", "authtoken", "access-token", "access_token", "accesstoken", "API-KEY"]],
    ("cmd -token v4lue", ("cmd -token [REDACTED]", 1)),
    ('"-token v4lue"', ('"-token [REDACTED]"', 1)),
    ("'-token v4lue'", ("'-token [REDACTED]'", 1)),
    ("(-token v4lue x)", ("(-token [REDACTED] x)", 1)),
    ("cmd --token\tv4lue", ("cmd --token\t[REDACTED]", 1)),
    ("cmd --password x", ("cmd --password [REDACTED]", 1)),
    ('"cmd --token v4lue" x', ('"cmd --token [REDACTED]" x', 1)),
    ("'cmd --token v4lue' x", ("'cmd --token [REDACTED]' x", 1)),
    ("the refresh-token rotation", ("the refresh-token rotation", 0)),
    ("cmd --password --verbose", ("cmd --password --verbose", 0)),
    ("cmd --token \nls", ("cmd --token \nls", 0)),
    ("cmd --tokens 5 --secretive x", ("cmd --tokens 5 --secretive x", 0)),
    # curl -u user:password
    ("curl -u admin:hunter2", ("curl -u admin:[REDACTED]", 1)),
    ("curl -u\tadmin:hunter2", ("curl -u\tadmin:[REDACTED]", 1)),
    ("curl -u admin:pw:x", ("curl -u admin:[REDACTED]", 1)),
    ('"-u admin:hunter2"', ('"-u admin:[REDACTED]"', 1)),
    ("'-u admin:hunter2'", ("'-u admin:[REDACTED]'", 1)),
    ("(-u admin:hunter2 x)", ("(-u admin:[REDACTED] x)", 1)),
    ('"curl -u admin:hunter2" x', ('"curl -u admin:[REDACTED]" x', 1)),
    ("'curl -u admin:hunter2' x", ("'curl -u admin:[REDACTED]' x", 1)),
    ("foo-u admin:hunter2", ("foo-u admin:hunter2", 0)),
    ("sort -u names.txt a:b", ("sort -u names.txt a:b", 0)),
    ("rsync -u alice@host:/srv/data .", ("rsync -u alice@host:/srv/data .", 0)),
    ("cp -u logs/app:1 out", ("cp -u logs/app:1 out", 0)),
    ("curl -u admin: -X GET", ("curl -u admin: -X GET", 0)),
    # a credential query parameter: to the next "&", "#", quote or space
    ("/x?signature=abc", ("/x?signature=[REDACTED]", 1)),
    ("/c?sv=1&sig=abc", ("/c?sv=1&sig=[REDACTED]", 1)),
    ("/o?X-Amz-Signature=abc", ("/o?X-Amz-Signature=[REDACTED]", 1)),
    ("https://x/?key=abc def", ("https://x/?key=[REDACTED] def", 1)),
    ("https://x/?key=abc#top", ("https://x/?key=[REDACTED]#top", 1)),
    ('"https://x/?key=abc" x', ('"https://x/?key=[REDACTED]" x', 1)),
    ("'https://x/?key=abc' x", ("'https://x/?key=[REDACTED]' x", 1)),
    ("/o?X-Amz-Security-Token=abc#top", ("/o?X-Amz-Security-Token=[REDACTED]#top", 1)),
    ("/search?key=&q=1", ("/search?key=&q=1", 0)),
    # webhooks, with or without their scheme
    ("https://hooks.slack.com/services/T_01/B-02/xyz",
     ("https://hooks.slack.com/services/[REDACTED]", 1)),
    ("hooks.slack.com/services/T01/B02/xyz", ("hooks.slack.com/services/[REDACTED]", 1)),
    ("discord.com/api/webhooks/123/ab_c-d", ("discord.com/api/webhooks/[REDACTED]", 1)),
    ("https://discordapp.com/api/webhooks/123/abc",
     ("https://discordapp.com/api/webhooks/[REDACTED]", 1)),
    *[(f"https://{c}discord.com/api/webhooks/123/abc",
       (f"https://{c}discord.com/api/webhooks/123/abc", 0)) for c in "Zz9_-"],
    ("https://discord.com/api/webhooks//abc", ("https://discord.com/api/webhooks//abc", 0)),
    ("https://discord.com/api/webhooks/123/ x", ("https://discord.com/api/webhooks/123/ x", 0)),
    # Azure's AccountKey, any separator
    ("account_key=abc", ("account_key=[REDACTED]", 1)),
    ("Account-Key: abc", ("Account-Key: [REDACTED]", 1)),
]


@pytest.mark.parametrize(("text", "want"), VENDOR_EDGES + CONTEXT_EDGES)
def test_the_newest_forms_at_their_edges(text: str, want: tuple[str, int]) -> None:
    assert scrub_text(text) == want


# -- forms a hunt found passing through, and the shapes beside them that are no secret ---

HUNT_EDGES: list[tuple[str, tuple[str, int]]] = [
    # Assignments as PHP, Ruby and Go write them, and with no-break spaces.
    ("$db = ['password' => 'hunter2'];", ("$db = ['password' => '[REDACTED]'];", 1)),
    ('opts = {:password => "hunter2"}', ('opts = {:password => "[REDACTED]"}', 1)),
    ('password := "hunter2"', ('password := "[REDACTED]"', 1)),
    ("pass := hunter2", ("pass := [REDACTED]", 1)),
    ("password\u00a0=\u00a0hunter2", ("password\u00a0=\u00a0[REDACTED]", 1)),
    # A bare value keeps its "&" unless the "&" opens the next query parameter.
    ("DB_PASSWORD=p@ss&w0rd!x", ("DB_PASSWORD=[REDACTED]", 1)),
    ("password=a&b&c=d", ("password=[REDACTED]&c=d", 1)),
    ("?password=s3cret&user=bob", ("?password=[REDACTED]&user=bob", 1)),
    # Userinfo that breaks RFC 3986 still hides its password ...
    ("ftp://alice@corp.com:S3cretPassw0rd@ftp.example.com/x",
     ("ftp://alice@corp.com:[REDACTED]@ftp.example.com/x", 1)),
    ("redis://:p#ssw0rd!@cache:6379/0", ("redis://:[REDACTED]@cache:6379/0", 1)),
    ("postgres://bob:pa/ss@db:5432/app", ("postgres://bob:[REDACTED]@db:5432/app", 1)),
    ("mysql://root:what?ever@db/app", ("mysql://root:[REDACTED]@db/app", 1)),
    ("https:/\\/alice:hunter2@example.com", ("https:/\\/alice:[REDACTED]@example.com", 1)),
    # An "@" after a "/", "?" or "#" later in the word: the strict reading would keep
    # the rest of the password as a host and a path; the whole run to the last "@" goes
    # (a credentialed URL with an "@" in its path loses its host too: the safe mistake).
    ("https://user:p@ss/word@host/x", ("https://user:[REDACTED]@host/x", 1)),
    ("https://user:p@s?s@host", ("https://user:[REDACTED]@host", 1)),
    ("git clone https://u:abc@def#x@host/r", ("git clone https://u:[REDACTED]@host/r", 1)),
    ("https://u:pw@host/@alice", ("https://u:[REDACTED]@alice", 1)),
    ("https://u:pw@host/path x@y", ("https://u:[REDACTED]@host/path x@y", 1)),
    # ... while a port and a path with an "@" in it are left alone.
    ("https://example.com:443/users/@alice", ("https://example.com:443/users/@alice", 0)),
    ("https://host:8080/a?x=1@2", ("https://host:8080/a?x=1@2", 0)),
    ("https://host:8080#x@y", ("https://host:8080#x@y", 0)),
    ("see https://host/path:x@y", ("see https://host/path:x@y", 0)),
    # Passwords on a command line.
    ("mysql -u root -pS3cretPw db", ("mysql -u root -p[REDACTED] db", 1)),
    ("mysqldump -h db -p'S3 cret' app", ("mysqldump -h db -p'[REDACTED]' app", 1)),
    ("mariadb -pS3cret", ("mariadb -p[REDACTED]", 1)),
    ("mariadb -u x -pS3cret", ("mariadb -u x -p[REDACTED]", 1)),
    ("mariadb -u x-pS3cret", ("mariadb -u x-pS3cret", 0)),  # "-p" must open a word
    ("mysql -u root -p db", ("mysql -u root -p db", 0)),  # "-p" alone prompts
    ("mysql -u root db; ls -pfoo", ("mysql -u root db; ls -pfoo", 0)),
    ("mysqlx -u root -pS3cret", ("mysqlx -u root -pS3cret", 0)),
    ("sshpass -p 'S3cret' ssh host", ("sshpass -p '[REDACTED]' ssh host", 1)),
    ("sshpass -pS3cret ssh host", ("sshpass -p[REDACTED] ssh host", 1)),
    ("sshpass -f pwfile ssh host", ("sshpass -f pwfile ssh host", 0)),
    # Vendor prefixes.
    ("whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", (REDACTED, 1)),
    ("xoxe-1-" + "My0xLTItMjg0ODk4NzA1", (REDACTED, 1)),
    *[(f"gl{p}-" + BODY, (REDACTED, 1)) for p in ("rt", "dt", "ptt", "soat", "agent")],
    ("GOCSPX-" + BODY + "abcdefgh", (REDACTED, 1)),
    ("GOCSPX-" + BODY + "abc", ("GOCSPX-" + BODY + "abc", 0)),
    # An environment variable named for a key.
    ("ENCRYPTION_KEY=6f1ed002ab5595859014ebf0951522d9", ("ENCRYPTION_KEY=[REDACTED]", 1)),
    ("export SIGNING_KEY='a b'", ("export SIGNING_KEY='[REDACTED]'", 1)),
    ("encryption_key=abc", ("encryption_key=abc", 0)),
    ("KEY=abc", ("KEY=abc", 0)),
    ("REGISTRY_KEY = 'win'", ("REGISTRY_KEY = 'win'", 0)),
    ("{'HAVE_CURSES_HAS_KEY': 1}", ("{'HAVE_CURSES_HAS_KEY': 1}", 0)),
    ("E('EXAMPLE_KEY', 'Error message')", ("E('EXAMPLE_KEY', 'Error message')", 0)),
    # A match's context is scrubbed too: a key as a URL's or curl's user name, or words
    # between "mysql" and its "-p", would otherwise hide inside the match from every pass.
    (f"https://{ANTHROPIC}:pw@host", ("https://[REDACTED]:[REDACTED]@host", 2)),
    (f"//{ANTHROPIC}:pw@host", ("//[REDACTED]:[REDACTED]@host", 2)),
    (f"ftp://{GITHUB}@x:p/w@host", ("ftp://[REDACTED]@x:[REDACTED]@host", 2)),
    (f"curl -u {ANTHROPIC}:pw x", ("curl -u [REDACTED]:[REDACTED] x", 2)),
    (f"mysql {ANTHROPIC} -pX", ("mysql [REDACTED] -p[REDACTED]", 2)),
    ("mysql --password=x -u r -pY", ("mysql --password=[REDACTED] -u r -p[REDACTED]", 2)),
]


@pytest.mark.parametrize(("text", "want"), HUNT_EDGES)
def test_forms_a_hunt_found_and_their_neighbours(text: str, want: tuple[str, int]) -> None:
    assert scrub_text(text) == want
    assert scrub_text(want[0]) == (want[0], 0)


# -- a standalone HTTP Basic credential -----------------------------------------------------
# "basic" is an English word as well as a scheme, so outside an Authorization header the
# word after it is a credential only when it is base64 of RFC 7617's user-id ":" password.


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


USER_PASS = b64("user:password")  # dXNlcjpwYXNzd29yZA==
BASIC_REDACTED: list[tuple[str, tuple[str, int]]] = [
    (f"Basic {USER_PASS}", ("Basic [REDACTED]", 1)),
    (f"proxy said 407; retried with Basic {USER_PASS}",
     ("proxy said 407; retried with Basic [REDACTED]", 1)),
    (f"sent basic {USER_PASS} upstream", ("sent basic [REDACTED] upstream", 1)),
    (f"BASIC\t{USER_PASS}", ("BASIC\t[REDACTED]", 1)),
    (f"Basic: {USER_PASS}", ("Basic: [REDACTED]", 1)),
    # Its padding left off, at a sentence's end, in brackets, quoted, in a list.
    (f"Basic {USER_PASS.rstrip('=')}", ("Basic [REDACTED]", 1)),
    (f"retried with Basic {USER_PASS}.", ("retried with Basic [REDACTED].", 1)),
    (f"(Basic {b64('alice:s3cr3t')}), then 403", ("(Basic [REDACTED]), then 403", 1)),
    (f'["-H", "Basic {USER_PASS}", "-X", "GET"]', ('["-H", "Basic [REDACTED]", "-X", "GET"]', 1)),
    (f'{{"reason": "Basic {USER_PASS}"}}', ('{"reason": "Basic [REDACTED]"}', 1)),
    (f'{{\\"reason\\": \\"basic {USER_PASS}\\"}}', ('{\\"reason\\": \\"basic [REDACTED]\\"}', 1)),
    # An empty user (a personal access token as the password), an empty password, a
    # password in UTF-8.
    (f"Basic {b64(':pat0123456789abcdefghijklmnopqrstuvwxyz')}", ("Basic [REDACTED]", 1)),
    (f"Basic {b64('user:')}", ("Basic [REDACTED]", 1)),
    (f"Basic {b64('jörg:pässwörd')}", ("Basic [REDACTED]", 1)),
    (f"Basic {USER_PASS} and basic {b64('bob:hunter2')}",
     ("Basic [REDACTED] and basic [REDACTED]", 2)),
    # Where the schemes' list already took it: unchanged.
    (f"token: Basic {USER_PASS}", ("token: Basic [REDACTED]", 1)),
    (f"Authorization: Basic {USER_PASS}", ("Authorization: Basic [REDACTED]", 1)),
    # A word after "basic" that is no credential does not hide the secret in it or
    # after it: each goes by its own rule, whole.
    (f"Basic {JWT}", ("Basic [REDACTED]", 1)),
    ("Basic AKIA" + "ABA6CDEFGHIJKLMN", ("Basic [REDACTED]", 1)),
    ("basic bearer abcd1234efgh5678", ("basic bearer [REDACTED]", 1)),
    ("basic mysql -u r -pS3cret", ("basic mysql -u r -p[REDACTED]", 1)),
    ("basic sshpass -p S3cret ssh h", ("basic sshpass -p [REDACTED] ssh h", 1)),
    ("Basic password = hunter2", ("Basic password = [REDACTED]", 1)),
    ("Basic Ogxxpassword = hunter2", ("Basic Ogxxpassword = [REDACTED]", 1)),
    (f"Basic OPENAI_API_KEY={OPENAI}", ("Basic OPENAI_API_KEY=[REDACTED]", 1)),
]
BASIC_PROSE = [
    "basic auth", "a basic 2024 plan", "Basic setup", "Basic auth is disabled for /health",
    "the basic idea: retry 3 times", "Basic Only", "Basic One", "basic Open", "Basic Overview",
    "Basic Operator", "Basic OldPdb", "Basic Outputs", "Basic Original", "Basic Ohio",
    # base64, but not of a user and a password: no ":", control characters, bad length
    f"Basic {b64('hello world')}", "Basic " + base64.b64encode(b"\x01\x02:\x03\x04\x05").decode(),
    f"Basic {USER_PASS.rstrip('=')}x", f"Basic {USER_PASS}=",
    # part of a longer word, or of a name
    f"isBasic {USER_PASS}", f"Basic {USER_PASS}_v2", f"Basic {USER_PASS}.txt",
    f"Basic {USER_PASS}:8080",
]


@pytest.mark.parametrize(("text", "want"), BASIC_REDACTED)
def test_a_standalone_basic_credential_is_redacted_and_the_word_kept(
        text: str, want: tuple[str, int]) -> None:
    assert scrub_text(text) == want
    assert scrub_text(want[0]) == (want[0], 0)


@pytest.mark.parametrize("text", BASIC_PROSE)
def test_the_word_basic_before_what_is_no_credential_stays(text: str) -> None:
    out, n = scrub_text(text)
    assert (out, n) == (text, 0)
    assert out is text


@pytest.mark.parametrize("text", [t for t, (_, n) in BASIC_REDACTED if n])
@pytest.mark.parametrize("place", sorted(PLACES))
def test_the_json_gate_finds_a_standalone_basic_credential_in_any_place(
        text: str, place: str) -> None:
    value = PLACES[place](text)
    assert scrub_value(value)[1] > 0
    assert hint_inside(value)


def test_a_basic_credential_never_reaches_the_ledger_file(tmp_path: Path) -> None:
    alice = b64("alice:" + "s3cr3t-" + "Pa55")
    led = RunLedger(str(tmp_path / "ledger"))
    try:
        led.append({"type": "decided", "harness": "h", "run_id": 1, "outcome": "skipped",
                    "reason": f"proxy said 407; retried with Basic {USER_PASS}"})
        led.append({"type": "closed", "harness": "h", "run_id": 1, "outcome": "failed",
                    "sessions": [{"id": "s1", "adapter": "claude",
                                  "trace_id": f"basic {alice}"}],
                    "errors": {f"ProxyError: Basic {alice}": 2},
                    "reason": "basic auth refused: Basic setup incomplete"})
        assert led.stats().redactions == 3
    finally:
        led.close()
    data = b"".join(p.read_bytes() for p in (tmp_path / "ledger").glob("*.jsonl"))
    for secret in (USER_PASS, alice, USER_PASS.rstrip("="), alice[:12]):
        assert secret.encode() not in data
    first, second = (json.loads(raw) for raw in data.splitlines())
    assert first["reason"] == "proxy said 407; retried with Basic [REDACTED]"
    assert second["sessions"] == [{"id": "s1", "adapter": "claude",
                                   "trace_id": "basic [REDACTED]"}]
    assert second["errors"] == {"ProxyError: Basic [REDACTED]": 2}
    assert second["reason"] == "basic auth refused: Basic setup incomplete"
    res = verify_run_ledger(str(tmp_path / "ledger"))
    assert (res.ok, res.lines) == (True, 2)


# An Authorization header's auth-params are quoted (RFC 9110 §11.4): the value once
# stopped at the first quote, so Digest's response hash and OAuth 1.0's signature reached
# the ledger behind "[REDACTED]". The closing quote of a string around the header still
# ends it, after a padded credential too.
DIGEST = ('Digest username="bob", realm="api", nonce="dcd98b7102dd2f0e", qop=auth, '
          'nc=00000001, cnonce="0a4f113b", response="6629fae49393a05397450978507c4ef1"')
OAUTH1 = ('OAuth oauth_consumer_key="xvz1evFS4wEEPTGEFPHBog", oauth_nonce="kYjzVBB8Y0", '
          'oauth_signature="tnnArxj06cWHq44gCs1OSKk%2FjLY%3D", oauth_token="370773112-Gmx"')
QUOTED_PARAM_SECRETS = ("6629fae49393a05397450978507c4ef1", "0a4f113b", "dcd98b7102dd2f0e",
                        "tnnArxj06cWHq44gCs1OSKk", "xvz1evFS4wEEPTGEFPHBog", "370773112")


@pytest.mark.parametrize(("text", "want"), [
    (f"Authorization: {DIGEST}", "Authorization: Digest [REDACTED]"),
    (f"401 after Authorization: {DIGEST}\nretrying", "401 after Authorization: Digest "
     "[REDACTED]\nretrying"),
    (f"curl -H 'Authorization: {DIGEST}' -X GET", "curl -H 'Authorization: Digest "
     "[REDACTED]' -X GET"),
    ('{"auth": "Authorization: ' + DIGEST.replace('"', '\\"') + '", "n": 1}',
     '{"auth": "Authorization: Digest [REDACTED]", "n": 1}'),
    (f"Authorization: {OAUTH1}", "Authorization: OAuth [REDACTED]"),
    ('Cookie: theme="dark blue"; sid=9f8e7d6c', "Cookie: [REDACTED]"),
    ('[("Authorization", "Basic dXNlcjpwYXNzd29yZA=="), ("Accept", "json")]',
     '[("Authorization", "Basic [REDACTED]"), ("Accept", "json")]'),
    ('["Authorization: Basic dXNlcjpwYXNzd29yZA=", "next"]',
     '["Authorization: Basic [REDACTED]", "next"]'),
])
def test_quoted_auth_params_are_part_of_the_header(text: str, want: str) -> None:
    assert scrub_text(text) == (want, 1)


def test_a_digest_header_never_reaches_the_ledger_file(tmp_path: Path) -> None:
    data = written(tmp_path, {"type": "closed", "harness": "h", "run_id": 1,
                              "outcome": "failed",
                              "reason": f"401 with Authorization: {DIGEST}",
                              "errors": {f"HTTPError: Authorization: {OAUTH1}": 1},
                              "sessions": [{"id": "s1", "adapter": "claude",
                                            "trace_id": f"Authorization: {DIGEST}"}]})
    for secret in QUOTED_PARAM_SECRETS:
        assert secret.encode() not in data
    line = json.loads(data)
    assert line["reason"] == "401 with Authorization: Digest [REDACTED]"
    assert line["errors"] == {"HTTPError: Authorization: OAuth [REDACTED]": 1}
    assert line["sessions"][0]["trace_id"] == "Authorization: Digest [REDACTED]"


# Text that begins inside a private key block (the tail of a cut output, the second of
# two fields a block was split over) once kept its key material: only a BEGIN line opened
# the form. And an encrypted JWT (JWE: header, encrypted key, IV, ciphertext, tag) has
# no "eyJ" payload, so it went whole.
KEY_LINES = ("MIIEowIBAAKCAQEAx1y2z3" + BODY + "\n" + "b3BlbnNzaC1rZXktdjEAAAAA" + BODY)
JWE = ("eyJhbGciOiJkaXIiLCJlbmMiOiJBMjU2R0NNIn0" + ".." + "Xq3bQ9fK2pTz7VbN" + "."
       + "Qm9vYmFyQmF6UXV4eFl6enkxMjM0" + "." + "Hd8s9Kq2mZp4Rt6Uv8Wx0Y")


@pytest.mark.parametrize(("text", "want", "count"), [
    (f"{KEY_LINES}\n-----END RSA PRIVATE KEY-----", "[REDACTED]", 1),
    (f"ssh-add: {KEY_LINES}\\n-----END OPENSSH PRIVATE KEY----- (exit 1)",
     "[REDACTED] (exit 1)", 1),
    (f"{KEY_LINES}\n-----END PGP PRIVATE KEY BLOCK-----\n-----BEGIN PRIVATE KEY-----\n"
     f"{KEY_LINES}", "[REDACTED]\n[REDACTED]", 2),
    (f"a {KEY_LINES} -----END PRIVATE KEY----- b {KEY_LINES} -----END EC PRIVATE KEY----- c",
     "[REDACTED] c", 1),
    (f"session {JWE} expired", "session [REDACTED] expired", 1),
    (f"id_token={JWE}", "id_token=[REDACTED]", 1),
])
def test_a_key_block_s_tail_and_an_encrypted_jwt_are_redacted(
        text: str, want: str, count: int) -> None:
    assert scrub_text(text) == (want, count)
    assert scrub_text(want) == (want, 0)


@pytest.mark.parametrize("text", [
    "-----END CERTIFICATE----- then more", "eyJhbGciOi.a.b.c.d", "version eyJ1.2.3.4",
    "see eyJhbGciOiJIUzI1NiJ9 in the docs",
])
def test_a_certificate_s_end_and_short_dotted_words_stay(text: str) -> None:
    assert scrub_text(text) == (text, 0)


def test_a_key_block_s_tail_and_a_jwe_never_reach_the_ledger_file(tmp_path: Path) -> None:
    data = written(tmp_path, {
        "type": "closed", "harness": "h", "run_id": 1, "outcome": "failed",
        "reason": f"{KEY_LINES}\n-----END RSA PRIVATE KEY-----",
        "errors": {f"-----BEGIN RSA PRIVATE KEY-----\n{KEY_LINES[:40]}": 1,
                   f"{KEY_LINES[40:]}\n-----END RSA PRIVATE KEY-----": 1},
        "sessions": [{"id": "s1", "adapter": "claude", "trace_id": JWE}]})
    for secret in ("MIIEowIBAAKCAQEAx1y2z3", "b3BlbnNzaC1rZXktdjEAAAAA", BODY,
                   "Xq3bQ9fK2pTz7VbN", "Qm9vYmFyQmF6UXV4eFl6enkxMjM0"):
        assert secret.encode() not in data
    line = json.loads(data)
    assert line["reason"] == "[REDACTED]"
    assert line["errors"] == {"[REDACTED]": 2}
    assert line["sessions"][0]["trace_id"] == "[REDACTED]"


# The AWS CLI sets a credential by name with its value as the next word: the secret key
# reached the ledger whole (only AKIA ids and "name=value" forms were known).
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/" + "bPxRfiCYEXAMPLEKEY"


@pytest.mark.parametrize(("text", "want"), [
    (f"aws configure set aws_secret_access_key {AWS_SECRET}",
     "aws configure set aws_secret_access_key [REDACTED]"),
    (f"aws configure set aws_session_token '{AWS_SECRET} x' --profile ci",
     "aws configure set aws_session_token '[REDACTED]' --profile ci"),
])
def test_an_aws_cli_credential_set_by_name_is_redacted(
        text: str, want: str, tmp_path: Path) -> None:
    assert scrub_text(text) == (want, 1)
    for clean in ("aws configure get aws_secret_access_key --profile dev",
                  "unset aws_secret_access_key"):
        assert scrub_text(clean) == (clean, 0)
    data = written(tmp_path, {"type": "closed", "harness": "h", "run_id": 1,
                              "outcome": "failed", "reason": f"setup: {text}",
                              "errors": {f"CalledProcessError: {text}": 1}})
    assert AWS_SECRET.encode() not in data
    line = json.loads(data)
    assert (line["reason"], line["errors"]) == (f"setup: {want}",
                                                {f"CalledProcessError: {want}": 1})


# Azure API Management's key header (and its config names) once reached the ledger
# whole: "Subscription-Key" is no name any other rule knew.
APIM_KEY = "0123456789abcdef" + "fedcba9876543210"


@pytest.mark.parametrize(("text", "want"), [
    (f"Ocp-Apim-Subscription-Key: {APIM_KEY}", "Ocp-Apim-Subscription-Key: [REDACTED]"),
    (f"subscription_key={APIM_KEY}", "subscription_key=[REDACTED]"),
    (f"AZURE_SUBSCRIPTION_KEY={APIM_KEY}", "AZURE_SUBSCRIPTION_KEY=[REDACTED]"),
])
def test_a_subscription_key_is_redacted(text: str, want: str, tmp_path: Path) -> None:
    assert scrub_text(text) == (want, 1)
    assert scrub_text("subscription key renewed") == ("subscription key renewed", 0)
    data = written(tmp_path, {"type": "closed", "harness": "h", "run_id": 1,
                              "outcome": "failed", "reason": f"401 with {text}",
                              "errors": {f"HTTPError: {text}": 1}})
    assert APIM_KEY.encode() not in data
    line = json.loads(data)
    assert (line["reason"], line["errors"]) == (f"401 with {want}", {f"HTTPError: {want}": 1})


# An environment variable named for an auth value (redis-cli's REDISCLI_AUTH, npm's
# NPM_CONFIG__AUTH, a proxy's) reached the ledger whole: only a name ending in "_KEY" was
# read as holding a credential. The same shape counts: upper case, a bare "=".
REDIS_PW = "hunter2" + "Xq9"
NPM_AUTH = b64("bob:" + "s3cr3t-" + "npm")


@pytest.mark.parametrize(("text", "want", "secret"), [
    (f"REDISCLI_AUTH={REDIS_PW} redis-cli ping", "REDISCLI_AUTH=[REDACTED] redis-cli ping",
     REDIS_PW),
    (f"export NPM_CONFIG__AUTH={NPM_AUTH}", "export NPM_CONFIG__AUTH=[REDACTED]", NPM_AUTH),
    (f"BASIC_AUTH=bob:{REDIS_PW} ./serve", "BASIC_AUTH=[REDACTED] ./serve", REDIS_PW),
    (f"PROXY_AUTH='bob {REDIS_PW}'", "PROXY_AUTH='[REDACTED]'", REDIS_PW),
    (f"env HTTP2_AUTH={REDIS_PW}", "env HTTP2_AUTH=[REDACTED]", REDIS_PW),
])
def test_an_env_var_named_for_an_auth_value_is_redacted(
        text: str, want: str, secret: str, tmp_path: Path) -> None:
    assert scrub_text(text) == (want, 1)
    data = written(tmp_path, {"type": "closed", "harness": "h", "run_id": 1,
                              "outcome": "failed", "reason": f"setup: {text}",
                              "errors": {f"Error: {text}": 1},
                              "sessions": [{"id": "s1", "adapter": "claude",
                                            "trace_id": text}]})
    assert secret.encode() not in data
    line = json.loads(data)
    assert (line["reason"], line["errors"]) == (f"setup: {want}", {f"Error: {want}": 1})
    assert line["sessions"][0]["trace_id"] == want
    assert verify_run_ledger(str(tmp_path / "ledger")).ok


@pytest.mark.parametrize("text", [
    "X_AUTH = 'basic'",  # a constant in code names the value, it does not hold one
    '{"HAS_AUTH": 1, "USE_AUTH": true}',
    "{'PROXY_AUTH': 'x'}",
    "redis_auth=x npm_config_auth=y",  # lower case: no shell's environment variable
    "AUTH=x OAUTH=x _AUTH=x",  # no name before the "_"
    "REDISCLI_AUTHOR=x MY_AUTH_MODE=y X_AUTH:y",
])
def test_what_names_an_auth_value_without_assigning_it_stays(text: str) -> None:
    assert scrub_text(text) == (text, 0)
    assert scrub_text(text)[0] is text


def test_an_env_var_named_for_an_auth_value_is_found_by_the_json_gate(
        tmp_path: Path) -> None:
    # A JSON key "REDISCLI_AUTH" is no assignment (the probe is ": v4lue"), but the
    # assignment inside a string is found wherever it is, and never reaches the disk.
    assert scrub_value({"REDISCLI_AUTH": REDIS_PW}) == ({"REDISCLI_AUTH": REDIS_PW}, 0)
    for place in sorted(PLACES):
        value = PLACES[place](f"REDISCLI_AUTH={REDIS_PW}")
        assert scrub_value(value)[1] == 1
        assert hint_inside(value), place
    data = written(tmp_path, {"type": "opened", "harness": "h", "run_id": 1,
                              "reason": f"argv: env NPM_CONFIG__AUTH={NPM_AUTH} npm ci"})
    assert NPM_AUTH.encode() not in data
    assert json.loads(data)["reason"] == "argv: env NPM_CONFIG__AUTH=[REDACTED] npm ci"


# Text a writer may be handed (a work-ledger payload runs to 1 MiB) in which every few
# characters could open a form. Scrubbing must stay linear: with a form that rescans the
# rest of the text from each of those starts, half a MiB took tens of minutes.
ADVERSARIAL = ["(-u", "eyJ_", "a://x:", "a://x:y/", "a://@:", "mysql -u ", "mysql ",
               "sshpass -p ", "password=&a", "pass := ", "X_KEY=", "X_AUTH=", "//a:", "a:/\\/",
               "basic Og", "Basic Og+/", "basic dXNlcjpw ", "eyJab.c", "eyJabcd..x.",
               "Authorization: a=\"", "Cookie: =\"", "-----END PRIVATE KEY-----x",
               "hvs.", "EAA1", " EAAb",
               " --a-", " --a-b", "docker login ", "redis-cli ",
               "%3A%2F%2Fa%3A", "%3A%2F%2F",
               # lines of a key's body: whole, one short, escaped, under an open BEGIN
               "Ab1+" * 16 + "\n", "a" * 63 + "\n", "Ab1\\n",
               "-----BEGIN CERTIFICATE-----\n" + ("Ab1+" * 16 + "\n") * 2, "-u 'a:", '-u "a:',
               "machine a login b ", "default login ", "LS0tLS1CRUdJTi", "'auth': 'Og",
               '"auth":"', "twine upload -p ", "poetry config http-basic.a b ",
               "poetry config pypi-token.a ", "?code=", "a?code=", "a&auth=", "X_PAT=",
               "AKIA0123456789ABCDEF:", "AKIA0123456789ABCDEF:a"]


def test_scrubbing_adversarial_text_takes_linear_time(tmp_path: Path) -> None:
    script = tmp_path / "adversarial.py"
    script.write_text(
        "import sys\n"
        "from harness.ledger.scrub import scrub_text\n"
        "for unit in sys.argv[1:]:\n"
        "    text = (unit * (524288 // len(unit) + 1))[:524288]\n"
        "    scrub_text(text)\n"
        "print('done')\n"
    )
    # A generous bound: this takes seconds on a loaded machine, the quadratic forms
    # took minutes for each unit.
    out = subprocess.run([sys.executable, str(script), *ADVERSARIAL], capture_output=True,
                         text=True, timeout=240, check=True)
    assert out.stdout == "done\n"


def test_scrub_log_is_a_filter_class_and_the_credential_rule_is_cached() -> None:
    """A decorator meant for the credential-name rule sat on ScrubLog: the filter was a
    cached factory (isinstance against it raised TypeError) and the rule, asked for every
    key of every scrubbed text, was not cached."""
    f = ScrubLog()
    assert isinstance(f, ScrubLog) and isinstance(f, logging.Filter)
    _names_a_credential.cache_clear()
    assert [_names_a_credential(k) for k in ("password", "max_tokens", "password")] == [
        True, False, True]
    assert _names_a_credential.cache_info().hits == 1
    rec = logging.LogRecord("harness.ledger", logging.WARNING, __file__, 1,
                            "cannot write %s", ("/s/password=hunter2hunter2/x",), None)
    assert f.filter(rec) and rec.getMessage() == "cannot write /s/password=[REDACTED]"


def test_a_warning_is_scrubbed_once_where_its_untrusted_text_enters(
        caplog: pytest.LogCaptureFixture) -> None:
    """The ledger's warnings were scrubbed where they were made (a LedgerError), again by
    the "harness.ledger" logger's filter over the whole line, and again by the daemon's
    handler: a secret whose form runs to the end of the line took every word after the
    error with it (the record, the queue), and a secret-free error ending in a
    credential's name lost the record too. Here through the ledger's logger and a
    handler filtered as the daemon's is: each line as written, its secret redacted once."""
    logger = logging.getLogger("harness.ledger")  # with its ScrubLog, as the engine has it
    lines: list[str] = []

    class Lines(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(self.format(record))

    handler = Lines()
    handler.addFilter(ScrubLog())  # as on the daemon's handler
    logger.addHandler(handler)
    caplog.set_level(logging.WARNING, logger=logger.name)
    try:
        fl = FailureLog(logger)
        path = f"/srv/Authorization: Bearer {GITHUB}/ledger/2026-12-01.jsonl"
        fl.failed(LedgerUnavailable(f"ledger write of {path} failed: Read-only file system",
                                    harness="a", run_id=1, seq=5), path, 1, now=1.0)
        fl.failed(LedgerUnavailable("ledger sync of /srv/api token:", harness="a", run_id=1,
                                    seq=6), "/srv/api token:", 2, now=2.0)
        fl.recovered(now=3.5)
        logger.warning("ledger: cannot sync %s (%s); going on", f"/srv/token: {GITHUB}",
                       "Input/output error")
        logger.warning("ledger: %s holds seq %d, above the last line", "/srv/l/x.jsonl", 812)
    finally:
        logger.removeHandler(handler)
    assert lines == [
        "ledger write of /srv/Authorization: Bearer [REDACTED] (harness=a run_id=1 seq=5); "
        "1 line(s) queued, retrying in order",
        # No secret: as it was written.
        "ledger sync of /srv/api token: (harness=a run_id=1 seq=6); 2 line(s) queued, "
        "retrying in order",
        "ledger: writing /srv/api token: again after 2 failure(s) in 2.5s",
        "ledger: cannot sync /srv/token: [REDACTED] (Input/output error); going on",
        "ledger: /srv/l/x.jsonl holds seq 812, above the last line",
    ]
    assert [r.getMessage() for r in caplog.records] == lines


def test_scrub_message_scrubs_each_argument_unless_the_format_reads_as_a_secret() -> None:
    """The format is the code's own words, the arguments the untrusted text: each is
    scrubbed on its own, as %s or %r shows it; a number or a Scrubbed argument is shown
    as it is. A format holding anything a secret form keys on ("token=%s", "Bearer %s",
    or text an f-string put into it) has its whole line scrubbed, so a secret split
    across the two is found."""
    err = LedgerUnavailable(f"cannot write /s/Authorization: Bearer {GITHUB}", harness="a",
                            seq=2)
    assert scrub_message("run %s/%d: %s; %r", ("a", 3, err, f"/p/{OPENAI}")) == (
        "run a/3: cannot write /s/Authorization: Bearer [REDACTED] (harness=a seq=2); "
        "'/p/[REDACTED]'")
    assert scrub_message("token=%s (run %d)", ("hunter2hunter2", 3)) == (
        f"token={REDACTED} (run 3)")
    assert scrub_message("Authorization: Bearer %s", (BODY,)) == (
        f"Authorization: Bearer {REDACTED}")
    assert scrub_message(f"cannot open /s/{GITHUB}: %s", ("EIO",)) == (
        f"cannot open /s/{REDACTED}: EIO")
    assert scrub_message("%(path)s", {"path": f"/p/{OPENAI}"}) == f"/p/{REDACTED}"
    # No arguments: the message is the text, scrubbed whole; but one made scrubbed.
    assert scrub_message(f"x password: {BODY} y") == f"x password: {REDACTED} y"
    assert scrub_message(err) == str(err)
    assert scrub_message("100%% of %s", ("x",)) == "100% of x"


@pytest.mark.parametrize(("text", "want", "secret"), ATTACKED_FORMS)
def test_a_form_an_attack_found_never_reaches_the_ledger_file(
        text: str, want: str, secret: str, tmp_path: Path) -> None:
    assert scrub_text(text) == (want, 1)
    data = written(tmp_path, {"type": "closed", "harness": "h", "run_id": 1,
                              "outcome": "failed", "reason": f"setup: {text}",
                              "errors": {f"Error: {text}": 1}})
    assert secret.encode() not in data
    line = json.loads(data)
    assert (line["reason"], line["errors"]) == (f"setup: {want}", {f"Error: {want}": 1})


# What the forms above must leave alone: names that open as a token does, and words
# too short or too plain to be one;
VENDOR_NEIGHBOURS = [
    "hvs.reshape_to_grid_columns hvs.x",
    "EAASY does it; EAA1 short; " + FACEBOOK[:42],
    # an upper-case SHA-256 digest that opens so
    "EAA" + "0123456789ABCDEF" * 3 + "0123456789ABC",
    "SKU0123456789abcdef0123456789abcdef SK0123",
    "dapi docs; nvapi-docs; pypi-upload; sq0atp-x; shpat_short",
    "AGE-SECRET-KEY-1 is how it opens",
]
# ports, parents, "all", limits and switches;
COMMAND_LINE_NEIGHBOURS = [
    "mkdir -p /srv; docker run -p 8080:80 img; docker login -u bob --password-stdin ghcr.io",
    "docker login ghcr.io; ls -a; redis-cli -h cache ping",
    "--max-token 4096 --no-password mydb --password-file /run/db --token-limit 5",
    "--num_secret 2 --min-token 1",
]
# an agent's session id (the run ledger keeps sessions[].id on purpose), a process's or a
# database's "sid", OAuth's token_type, code naming a bearer, and an encoded URL with no
# password.
ENCODED_AND_COOKIE_NEIGHBOURS = [
    "session_id=5f3c2a1e-8b7d-4c6e-9f0a-1b2c3d4e5f60 resumed",
    '{"type":"system","session_id":"5f3c2a1e-8b7d-4c6e-9f0a-1b2c3d4e5f60"}',
    "sessionId: ses_01HZX3 sessionID=ses_01HZX3 sid=4242 ORACLE_SID=ORCL ps -o sid=",
    "token_type=bearer&expires_in=3600",
    '{"token_type": "bearer", "expires_in": 3600}',
    "self.bearer = BearerToken(request_validator, None)",
    "next=https%3A%2F%2Fhost.example.com%3A8443%2Fpath%3Fq%3D1",
    "next=https%3A%2F%2Fbob%40host.example.com%2F",
]
ATTACKED_FORMS_NEIGHBOURS = (VENDOR_NEIGHBOURS + COMMAND_LINE_NEIGHBOURS
                             + ENCODED_AND_COOKIE_NEIGHBOURS)


@pytest.mark.parametrize("text", ATTACKED_FORMS_NEIGHBOURS)
def test_what_the_attacked_forms_leave_alone(text: str) -> None:
    assert scrub_text(text) == (text, 0)
    assert scrub_text(text)[0] is text


# The AWS CLI's own credentials file writes "name = value": the rule for "aws configure
# set NAME VALUE" took the "=" for the value and left the secret key whole behind it.
@pytest.mark.parametrize(("text", "want"), [
    (f"aws_secret_access_key = {AWS_SECRET}", "aws_secret_access_key = [REDACTED]"),
    (f"[default]\naws_access_key_id = {AWS}\naws_secret_access_key = {AWS_SECRET}\n",
     "[default]\naws_access_key_id = [REDACTED]\naws_secret_access_key = [REDACTED]\n"),
    (f"aws_session_token =\t{AWS_SECRET}", "aws_session_token =\t[REDACTED]"),
    (f"aws_secret_access_key :{AWS_SECRET}", "aws_secret_access_key :[REDACTED]"),
])
def test_an_aws_credentials_file_line_is_redacted(
        text: str, want: str, tmp_path: Path) -> None:
    assert scrub_text(text) == (want, want.count(REDACTED))
    assert scrub_text(want) == (want, 0)
    data = written(tmp_path, {"type": "closed", "harness": "h", "run_id": 1,
                              "outcome": "failed", "reason": f"cat: {text}",
                              "errors": {f"Error: {text}": 1}})
    assert AWS_SECRET.encode() not in data
    assert json.loads(data)["reason"] == f"cat: {want}"


# npm's "_auth" setting (base64 of user:password) reached the ledger whole in every
# spelling but the upper-case environment variable: npm itself sets npm_config__auth in
# lower case for every script it runs, and .npmrc writes "_auth=" (or "//host/:_auth=").
NPM_AUTH_LOWER = b64("bob:" + "s3cr3t-" + "npmrc")


@pytest.mark.parametrize(("text", "want"), [
    (f"npm_config__auth={NPM_AUTH_LOWER}", "npm_config__auth=[REDACTED]"),
    (f"env: npm_config__auth={NPM_AUTH_LOWER} npm_config_cache=/c",
     "env: npm_config__auth=[REDACTED] npm_config_cache=/c"),
    (f"//registry.example.com/:_auth={NPM_AUTH_LOWER}",
     "//registry.example.com/:_auth=[REDACTED]"),
    (f"_auth = {NPM_AUTH_LOWER}\nalways-auth=true", "_auth = [REDACTED]\nalways-auth=true"),
    (f'{{"_auth": "{NPM_AUTH_LOWER}"}}', '{"_auth": "[REDACTED]"}'),
    (f"npm_config__authToken={NPM_AUTH_LOWER}", "npm_config__authToken=[REDACTED]"),
    (f"//registry.example.com/:_authToken={NPM_AUTH_LOWER}",
     "//registry.example.com/:_authToken=[REDACTED]"),
])
def test_npm_s_auth_setting_is_redacted_in_every_spelling(
        text: str, want: str, tmp_path: Path) -> None:
    assert scrub_text(text) == (want, 1)
    assert scrub_value({"_auth": NPM_AUTH_LOWER}) == ({"_auth": REDACTED}, 1)
    for place in sorted(PLACES):
        assert hint_inside(PLACES[place](text)), place
    data = written(tmp_path, {"type": "closed", "harness": "h", "run_id": 1,
                              "outcome": "failed", "reason": f"npm ERR! {text}",
                              "errors": {f"npm ERR! {text}": 1}})
    assert NPM_AUTH_LOWER.encode() not in data
    assert json.loads(data)["reason"] == f"npm ERR! {want}"


@pytest.mark.parametrize("text", [
    "self._auth = auth_for(request)", "self.__auth = None", "redis_auth=x",
    "npm_config_auth_type=web", "_auth_header=x", "has_auth: yes", "oauth=1",
])
def test_a_name_ending_in_auth_that_is_not_npm_s_setting_stays(text: str) -> None:
    assert scrub_text(text) == (text, 0)


# A flag that reads its credential from standard input, fed by a redirect: the "<" was
# taken for the value and the file's name kept after "[REDACTED]", as if it were the
# secret's tail. A file's name is no secret; a here-string's word ("<<< VALUE") is the
# value itself, and was kept whole.
HERE_TOKEN = "s3cr3t" + "-here-" + "string"


@pytest.mark.parametrize(("text", "want", "count"), [
    ("gh auth login --with-token < tokenfile", "gh auth login --with-token < tokenfile", 0),
    ("gh auth login --with-token\t<\t~/.config/gh.tok && gh repo list",
     "gh auth login --with-token\t<\t~/.config/gh.tok && gh repo list", 0),
    ("vault login --token <", "vault login --token <", 0),
    (f"gh auth login --with-token <<< {HERE_TOKEN}",
     "gh auth login --with-token <<< [REDACTED]", 1),
    (f"gh auth login --with-token <<<'{HERE_TOKEN} x'",
     "gh auth login --with-token <<<'[REDACTED]'", 1),
    # glued, "<x" may as well be a password that opens so: it goes
    ("tool --api-key <tokenfile", "tool --api-key [REDACTED]", 1),
])
def test_a_flag_fed_by_a_redirect_keeps_the_file_name(
        text: str, want: str, count: int, tmp_path: Path) -> None:
    assert scrub_text(text) == (want, count)
    assert scrub_text(want) == (want, 0)
    data = written(tmp_path, {"type": "closed", "harness": "h", "run_id": 1,
                              "outcome": "failed", "reason": f"setup: {text}"})
    assert HERE_TOKEN.encode() not in data
    assert json.loads(data)["reason"] == f"setup: {want}"


# A switch named for a credential ("SKIP_AUTH=1", "verify_token: false") and a tally
# under "pass" ("pass: 42 fail: 0") lost their value: a ledger showed that a run skipped
# something and no longer what. A value that is only a boolean word, or a "pass" of at
# most three digits, is no secret (such a password protects nothing); a longer number,
# a PIN's, still is, and so is anything with one more character.
@pytest.mark.parametrize("text", [
    "SKIP_AUTH=1 make test", "DISABLE_AUTH=true", "USE_KEY=0", "REDISCLI_AUTH=no",
    "verify_token: false", "require_password = yes;", 'store_password="off"',
    "Config(user='bob', password=None, token=None)", '{"api_key": null}',
    "pass: 42 fail: 0", "PASS=7", "pass: 0", "pass: 999", "secret=True,",
])
def test_a_switch_or_a_tally_under_a_credential_s_name_stays(text: str) -> None:
    assert scrub_text(text) == (text, 0)
    assert scrub_text(text)[0] is text


@pytest.mark.parametrize(("text", "want"), [
    ("pass: 4821", "pass: [REDACTED]"),  # a PIN's length
    ("pass=123456 user=bob", "pass=[REDACTED] user=bob"),
    ("password: 42", "password: [REDACTED]"),  # a count is not what "password" names
    ("pass: '42'", "pass: '[REDACTED]'"),  # quoted: a string, not a figure
    ("SKIP_AUTH=1x", "SKIP_AUTH=[REDACTED]"),
    ("token=0x1f", "token=[REDACTED]"),
    ("REDISCLI_AUTH=yes2 redis-cli", "REDISCLI_AUTH=[REDACTED] redis-cli"),
    ("password=truest", "password=[REDACTED]"),
    ("pass: 42/7", "pass: [REDACTED]"),
])
def test_a_short_secret_next_to_a_switch_s_shape_is_redacted(
        text: str, want: str) -> None:
    assert scrub_text(text) == (want, 1)


def test_a_switch_under_a_credential_s_name_stays_in_a_value_too(tmp_path: Path) -> None:
    value = {"verify_token": "false", "password": "no", "token": "hunter2x", "pass": 42}
    assert scrub_value(value) == ({**value, "token": REDACTED}, 1)
    data = written(tmp_path, {"type": "closed", "harness": "h", "run_id": 1,
                              "outcome": "failed", "reason": "SKIP_AUTH=1 pass: 42 fail: 1",
                              "errors": {"AssertionError: verify_token=false": 1}})
    line = json.loads(data)
    assert (line["reason"], line["errors"]) == ("SKIP_AUTH=1 pass: 42 fail: 1",
                                                {"AssertionError: verify_token=false": 1})


# A private key cut into pieces (each field capped at 256 bytes, or an output split
# over several fields) left its middle pieces whole: they hold neither the BEGIN nor
# the END line that opened the form. Two or more base64 lines of the widths PEM (64)
# and OpenSSH (70) write, holding upper and lower case and a digit, are key material,
# and so are the cut lines that flank them; prose, hex digests (one case) and base64
# wrapped at 76 have no such shape.
def key_body(width: int, lines: int) -> str:
    """`lines` lines of a key body `width` characters wide, as random as a key's."""
    raw = b"".join(hashlib.sha512(bytes([i])).digest() for i in range(lines))
    text = base64.b64encode(raw).decode()
    return "\n".join(text[i:i + width] for i in range(0, width * lines, width))


RSA_BODY = key_body(64, 12)
SSH_BODY = key_body(70, 6)
PEM_FULL = f"-----BEGIN RSA PRIVATE KEY-----\n{RSA_BODY}\n-----END RSA PRIVATE KEY-----"


def pieces(text: str, size: int) -> list[str]:
    return [text[i:i + size] for i in range(0, len(text), size)]


@pytest.mark.parametrize(("text", "want"), [
    # a middle piece: a cut line, whole lines, a cut line
    (PEM_FULL[300:556], REDACTED),
    (f"ssh-add: {SSH_BODY[40:300]}", f"ssh-add: {REDACTED}"),
    (f"{RSA_BODY[65:195]}\nexit 1", f"{REDACTED}\n\nexit 1"),
    # as a repr shows it, its line breaks escaped
    (f"ValueError: '{RSA_BODY[10:250]}'".replace("\n", "\\n"), f"ValueError: '{REDACTED}'"),
    (RSA_BODY[:129].replace("\n", "\r\n"), REDACTED),
])
def test_a_middle_piece_of_a_private_key_is_redacted(text: str, want: str) -> None:
    assert scrub_text(text) == (want, 1)
    assert scrub_text(want) == (want, 0)


def test_no_piece_of_a_private_key_split_over_fields_reaches_the_ledger(
        tmp_path: Path) -> None:
    cut = pieces(PEM_FULL, 256)
    assert len(cut) == 4 and "BEGIN" not in cut[1] + cut[2] and "END" not in cut[1]
    data = written(tmp_path, {"type": "closed", "harness": "h", "run_id": 1,
                              "outcome": "failed", "reason": cut[1],
                              "errors": {piece: 1 for piece in cut},
                              "sessions": [{"id": "s1", "adapter": "claude",
                                            "trace_id": cut[2]}]})
    for line in RSA_BODY.split("\n"):
        assert line[8:24].encode() not in data
    line = json.loads(data)
    assert line["reason"] == REDACTED
    assert line["errors"] == {REDACTED: 4}
    assert line["sessions"][0]["trace_id"] == REDACTED


HEX64 = hashlib.sha256(b"a").hexdigest()


@pytest.mark.parametrize("text", [
    # a certificate's body is public, and its BEGIN line says so
    f"-----BEGIN CERTIFICATE-----\n{RSA_BODY}\n-----END CERTIFICATE-----",
    f"-----BEGIN PUBLIC KEY-----\n{RSA_BODY[:300]}",
    # hex digests, one per line (hash-chain values, git SHAs)
    f"{HEX64}\n{HEX64.upper()}\n{HEX64}\n{HEX64}",
    # base64 wrapped at 76, as MIME and coreutils wrap it; one line alone
    base64.encodebytes(hashlib.sha512(b"x").digest() * 3).decode(),
    f"digest:\n{RSA_BODY[:64]}\ndone",
    # words and lines of 64 characters that are no base64
    ("a" * 64 + "\n") * 3, ("Ab1+" * 16 + "\n" + "word " * 13)[:140],
    "abcdefghijklmnopqrstuvwxyz" * 2 + "ABCDEFGHIJKL\n" + "abcdefghijklmnopqrstuvwxyz" * 2
    + "ABCDEFGHIJKL",
])
def test_base64_shaped_text_that_is_no_key_piece_stays(text: str) -> None:
    assert scrub_text(text) == (text, 0)
    assert scrub_text(text)[0] is text


# curl's "-u 'user:pass phrase'": the password ran to the first space only, and the
# rest of a quoted password (a passphrase) reached the ledger.
@pytest.mark.parametrize(("text", "want", "count"), [
    ("curl -u 'bob:correct horse' https://x", "curl -u 'bob:[REDACTED]' https://x", 1),
    ('curl --user "bob:pa ss\'w rd" -X POST x', 'curl --user "bob:[REDACTED]" -X POST x', 1),
    ("curl -u ':only pass' x", "curl -u ':[REDACTED]' x", 1),
    ('docker run -u "1000:1000" img', 'docker run -u "1000:1000" img', 0),
])
def test_a_quoted_curl_password_goes_to_its_closing_quote(
        text: str, want: str, count: int, tmp_path: Path) -> None:
    assert scrub_text(text) == (want, count)
    data = written(tmp_path, {"type": "closed", "harness": "h", "run_id": 1,
                              "outcome": "failed", "reason": text})
    assert json.loads(data)["reason"] == want
    for word in ("horse", "rd", "only pass"):
        assert word.encode() not in data


# Two files an agent reads to debug a login held a credential in a shape no form knew:
# kubectl's config holds the client's private key as one base64 word (client-key-data,
# a Secret's tls.key), and docker's config.json a registry's user:password as the base64
# of an "auth" key. A base64 word that decodes to a private key's BEGIN line goes whole;
# a certificate's stays. An "auth" value goes when it decodes as user:password does.
EC_KEY = ("-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIB" + BODY + "oAoGCCqGSM49\n"
          "-----END EC PRIVATE KEY-----\n")
KEY_DATA = b64(EC_KEY)
CERT_DATA = b64("-----BEGIN CERTIFICATE-----\nMIIBkTCB+wIJAK" + BODY + "\n"
                "-----END CERTIFICATE-----\n")
DOCKER_AUTH = b64("ci-bot:" + "s3cr3t-" + "docker")


@pytest.mark.parametrize(("text", "want"), [
    (f"    client-key-data: {KEY_DATA}\n    client-certificate-data: {CERT_DATA}",
     f"    client-key-data: {REDACTED}\n    client-certificate-data: {CERT_DATA}"),
    (f"tls.key: {KEY_DATA[:150]}", f"tls.key: {REDACTED}"),
    (f'{{"auths": {{"ghcr.io": {{"auth": "{DOCKER_AUTH}"}}}}}}',
     '{"auths": {"ghcr.io": {"auth": "[REDACTED]"}}}'),
    (f"{{'auth': '{DOCKER_AUTH}', 'email': 'x'}}", "{'auth': '[REDACTED]', 'email': 'x'}"),
    (f'"{{\\"auth\\": \\"{DOCKER_AUTH}\\"}}"', '"{\\"auth\\": \\"[REDACTED]\\"}"'),
])
def test_a_kubeconfig_key_and_a_docker_auth_are_redacted(
        text: str, want: str, tmp_path: Path) -> None:
    assert scrub_text(text) == (want, 1)
    assert scrub_text(want) == (want, 0)
    for place in sorted(PLACES):
        assert hint_inside(PLACES[place](text)), place
    data = written(tmp_path, {"type": "closed", "harness": "h", "run_id": 1,
                              "outcome": "failed", "reason": text,
                              "errors": {f"Error: {text}": 1}})
    for secret in (KEY_DATA[20:60], DOCKER_AUTH):
        assert secret.encode() not in data
    assert json.loads(data)["reason"] == want


def test_a_docker_auth_as_a_structured_value_is_redacted(tmp_path: Path) -> None:
    """scrub_value judged {"auth": B64} by the key's name alone, and "auth" names no
    credential ("auth": "oauth2" is a setting): config.json as a value kept the
    registry's user:password its text form loses."""
    config = {"auths": {"ghcr.io": {"auth": DOCKER_AUTH, "email": "ci@example.com"}}}
    assert scrub_value(config) == (
        {"auths": {"ghcr.io": {"auth": REDACTED, "email": "ci@example.com"}}}, 1)
    assert scrub_value({"auth": DOCKER_AUTH}) == ({"auth": REDACTED}, 1)
    for value in ({"auth": DOCKER_AUTH}, config, [0, config]):
        assert hint_inside(value), value


@pytest.mark.parametrize("value", [
    {"auth": "oauth2"}, {"auth": "Ym9i"}, {"auth": "bm9uZQ=="}, {"auth": "dXNlcjpw ass"},
    {"Auth": DOCKER_AUTH}, {"auth": ["x"]}, {"auth": 42}, {"auths": DOCKER_AUTH[:7]},
])
def test_an_auth_setting_as_a_structured_value_stays(value: object) -> None:
    assert scrub_value(value) == (value, 0)
    assert scrub_value(value)[0] is value


@pytest.mark.parametrize("text", [
    f"client-certificate-data: {CERT_DATA}", '{"auth": "oauth2", "auth_url": "/x"}',
    '"auth": "Ym9i"', "auth: basic", '{"auth": "bm9uZQ=="}',  # "none": no user:password
])
def test_a_certificate_s_data_and_an_auth_setting_stay(text: str) -> None:
    assert scrub_text(text) == (text, 0)
