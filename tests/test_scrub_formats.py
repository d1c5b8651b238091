"""The credential formats users of AI coding agents leak in command lines, environment
dumps and error messages, each as an agent's run would carry it: the exact text the
scrubber makes of it, and that none of it reaches a ledger file.

Fake credentials are assembled from parts so that secret scanners run over this
repository do not mistake the fixtures for leaked keys.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from harness.ledger.runledger import RunLedger
from harness.ledger.scrub import REDACTED, scrub_text

BODY = "Qx7vLm2NpR4sT8wY1zK3"  # 20 token characters
BODY36 = BODY + "aB9cD0eF1gH2iJ3k"  # 36


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


GH = {p: p + "_" + BODY36 for p in ("ghp", "gho", "ghu", "ghs", "ghr")}
GITHUB_PAT = "github" + "_pat_" + "11AB2CD3E0" + "_" + BODY + BODY36
GITLAB = "glpat" + "-" + BODY
AWS_ID, AWS_TEMP_ID = "AKIA" + "Z3QW7RTY5UIO9PLK", "ASIA" + "M4NB6VC8XZ2LKJ0H"
AWS_SECRET = "tP9xQ2mV7nB4" + "kL8zW3rY6sD1fG5hJ0cX" + "aE2uI7oKqW"
SLACK = {p: p + "-2048" + "-4096" + "-" + BODY for p in ("xoxa", "xoxb", "xoxp", "xoxr", "xoxs")}
GOOGLE = "AIza" + "Sy" + BODY + "Ab3Cd4Ef5Gh6Ij7"
STRIPE, STRIPE_R = "sk" + "_live_" + BODY + "9Zz", "rk" + "_live_" + BODY + "8Yy"
OPENAI, OPENAI_PROJ = "sk-" + BODY + "T3BlbkFJ" + BODY, "sk-" + "proj-" + BODY + "_" + BODY36
ANTHROPIC = "sk-" + "ant-" + "api03-" + BODY36 + "-" + BODY
HUGGINGFACE = "hf" + "_" + BODY + "MnOpQrStUvWxYz"
NPM = "npm" + "_" + BODY36
PYPI = "pypi" + "-" + "AgEIcHlwaS5vcmc" + BODY36 + BODY36
PASSWORD = "Tr0ub4dor" + "-" + "and3"
BASIC = b64("ci-bot:" + PASSWORD)

# (text an agent's run carries, what the ledger keeps of it, the secrets in it)
FORMATS = [
    # GitHub, each kind of token, alone, in a remote's URL and in an environment
    *[pytest.param(f"git push https://{tok}@github.com/acme/app.git",
                   "git push https://[REDACTED]@github.com/acme/app.git", [tok], id=p)
      for p, tok in GH.items()],
    pytest.param(f"GH_TOKEN={GH['ghp']} gh pr create", "GH_TOKEN=[REDACTED] gh pr create",
                 [GH["ghp"]], id="gh-token-env"),
    pytest.param(f"remote: https://x-access-token:{GH['ghs']}@github.com/acme/app",
                 "remote: https://x-access-token:[REDACTED]@github.com/acme/app",
                 [GH["ghs"]], id="ghs-userinfo"),
    pytest.param(f"GITHUB_PAT={BODY36} GH_PAT={PASSWORD} RENOVATE_PAT={BODY} renovate",
                 "GITHUB_PAT=[REDACTED] GH_PAT=[REDACTED] RENOVATE_PAT=[REDACTED] renovate",
                 [BODY36, PASSWORD, BODY], id="pat-env"),
    pytest.param(f"Bad credentials for {GITHUB_PAT} (401)", "Bad credentials for [REDACTED] (401)",
                 [GITHUB_PAT], id="github-pat"),
    # GitLab
    pytest.param(f"curl --header 'PRIVATE-TOKEN: {GITLAB}' https://gitlab.example.com/api/v4",
                 "curl --header 'PRIVATE-TOKEN: [REDACTED]' https://gitlab.example.com/api/v4",
                 [GITLAB], id="glpat-header"),
    pytest.param(f"git clone https://oauth2:{GITLAB}@gitlab.com/g/p.git",
                 "git clone https://oauth2:[REDACTED]@gitlab.com/g/p.git", [GITLAB],
                 id="glpat-userinfo"),
    # AWS: key ids anywhere, the secret key by its names
    pytest.param(f"export AWS_ACCESS_KEY_ID={AWS_ID} AWS_SECRET_ACCESS_KEY={AWS_SECRET}",
                 "export AWS_ACCESS_KEY_ID=[REDACTED] AWS_SECRET_ACCESS_KEY=[REDACTED]",
                 [AWS_ID, AWS_SECRET], id="aws-env"),
    pytest.param(f"[ci]\naws_access_key_id = {AWS_TEMP_ID}\naws_secret_access_key = {AWS_SECRET}",
                 "[ci]\naws_access_key_id = [REDACTED]\naws_secret_access_key = [REDACTED]",
                 [AWS_TEMP_ID, AWS_SECRET], id="aws-credentials-file"),
    pytest.param(f'{{"AccessKeyId": "{AWS_TEMP_ID}", "SecretAccessKey": "{AWS_SECRET}"}}',
                 '{"AccessKeyId": "[REDACTED]", "SecretAccessKey": "[REDACTED]"}',
                 [AWS_TEMP_ID, AWS_SECRET], id="aws-sts-json"),
    pytest.param(f"creds {AWS_ID}:{AWS_SECRET} (ci)", "creds [REDACTED] (ci)",
                 [AWS_ID, AWS_SECRET], id="aws-id-colon-secret"),
    pytest.param(f"{AWS_TEMP_ID}:{AWS_SECRET[:40]}", "[REDACTED]",
                 [AWS_TEMP_ID, AWS_SECRET[:40]], id="aws-temp-id-colon-secret"),
    pytest.param(f"aws configure set aws_secret_access_key {AWS_SECRET} --profile ci",
                 "aws configure set aws_secret_access_key [REDACTED] --profile ci",
                 [AWS_SECRET], id="aws-configure-set"),
    # Slack, each kind of token
    *[pytest.param(f"slack: invalid_auth for {tok}", "slack: invalid_auth for [REDACTED]",
                   [tok], id=p) for p, tok in SLACK.items()],
    # Google, Stripe
    pytest.param(f"GET https://maps.googleapis.com/api/geocode/json?address=x&key={GOOGLE}",
                 "GET https://maps.googleapis.com/api/geocode/json?address=x&key=[REDACTED]",
                 [GOOGLE], id="google-query"),
    pytest.param(f"x-goog-api-key: {GOOGLE}", "x-goog-api-key: [REDACTED]", [GOOGLE],
                 id="google-header"),
    pytest.param(f"stripe.api_key = '{STRIPE}'", "stripe.api_key = '[REDACTED]'", [STRIPE],
                 id="stripe-live"),
    pytest.param(f"curl https://api.stripe.com/v1/charges -u {STRIPE_R}:",
                 "curl https://api.stripe.com/v1/charges -u [REDACTED]:", [STRIPE_R],
                 id="stripe-restricted-curl"),
    # OpenAI, Anthropic, Hugging Face
    pytest.param(f"Incorrect API key provided: {OPENAI}.",
                 "Incorrect API key provided: [REDACTED].", [OPENAI], id="openai"),
    pytest.param(f"OPENAI_API_KEY={OPENAI_PROJ}", "OPENAI_API_KEY=[REDACTED]", [OPENAI_PROJ],
                 id="openai-proj"),
    pytest.param(f"curl -H 'x-api-key: {ANTHROPIC}' https://api.anthropic.com/v1/messages",
                 "curl -H 'x-api-key: [REDACTED]' https://api.anthropic.com/v1/messages",
                 [ANTHROPIC], id="anthropic-header"),
    pytest.param(f"hf auth login --token {HUGGINGFACE}", "hf auth login --token [REDACTED]",
                 [HUGGINGFACE], id="huggingface-flag"),
    pytest.param(f"HF_TOKEN={HUGGINGFACE}", "HF_TOKEN=[REDACTED]", [HUGGINGFACE],
                 id="huggingface-env"),
    # npm, PyPI
    pytest.param(f"//registry.npmjs.org/:_authToken={NPM}",
                 "//registry.npmjs.org/:_authToken=[REDACTED]", [NPM], id="npmrc-token"),
    pytest.param(f"npm ERR! 403 token {NPM} lacks publish",
                 "npm ERR! 403 token [REDACTED] lacks publish", [NPM], id="npm-token"),
    pytest.param(f"twine upload -u __token__ -p {PYPI} dist/*",
                 "twine upload -u __token__ -p [REDACTED] dist/*", [PYPI], id="pypi-twine"),
    pytest.param(f"twine upload -u ci-bot -p {PASSWORD} dist/*",
                 "twine upload -u ci-bot -p [REDACTED] dist/*", [PASSWORD], id="twine-u-p"),
    pytest.param(f"twine upload --repository private -p {PASSWORD} dist/*",
                 "twine upload --repository private -p [REDACTED] dist/*", [PASSWORD],
                 id="twine-p"),
    pytest.param(f"twine upload --password {PASSWORD} dist/*",
                 "twine upload --password [REDACTED] dist/*", [PASSWORD], id="twine-password"),
    pytest.param(f"poetry config http-basic.private ci-bot {PASSWORD}",
                 "poetry config http-basic.private ci-bot [REDACTED]", [PASSWORD],
                 id="poetry-http-basic"),
    pytest.param(f"poetry config --local http-basic.private ci-bot '{PASSWORD} x'",
                 "poetry config --local http-basic.private ci-bot '[REDACTED]'", [PASSWORD],
                 id="poetry-http-basic-quoted"),
    pytest.param(f"poetry config pypi-token.private {BODY36} && poetry publish",
                 "poetry config pypi-token.private [REDACTED] && poetry publish", [BODY36],
                 id="poetry-pypi-token"),
    pytest.param(f"[pypi]\nusername = __token__\npassword = {PYPI}",
                 "[pypi]\nusername = __token__\npassword = [REDACTED]", [PYPI], id="pypirc"),
    # Docker and the other registry clients
    pytest.param(f"docker login -u ci -p {PASSWORD} registry.example.com",
                 "docker login -u ci -p [REDACTED] registry.example.com", [PASSWORD],
                 id="docker-p"),
    pytest.param(f"docker login --username ci --password {PASSWORD} ghcr.io",
                 "docker login --username ci --password [REDACTED] ghcr.io", [PASSWORD],
                 id="docker-password"),
    pytest.param(f"podman login -u ci --password={PASSWORD} quay.io",
                 "podman login -u ci --password=[REDACTED] quay.io", [PASSWORD],
                 id="podman-password-equals"),
    # curl's user, HTTP Basic, API key headers
    pytest.param(f"curl -u ci-bot:{PASSWORD} https://ci.example.com/api",
                 "curl -u ci-bot:[REDACTED] https://ci.example.com/api", [PASSWORD],
                 id="curl-u"),
    pytest.param(f"curl -H 'Authorization: Basic {BASIC}' https://x",
                 "curl -H 'Authorization: Basic [REDACTED]' https://x", [BASIC],
                 id="authorization-basic"),
    # (an Authorization value runs to the end of its header: its line, or its quote)
    pytest.param(f"HTTPError: 401 (Authorization: Bearer {OPENAI})",
                 "HTTPError: 401 (Authorization: Bearer [REDACTED]", [OPENAI],
                 id="authorization-bearer"),
    pytest.param(f"X-Api-Key: {BODY36}", "X-Api-Key: [REDACTED]", [BODY36],
                 id="x-api-key"),
    # passwords in connection strings
    pytest.param(f"psql postgres://app:{PASSWORD}@db.internal:5432/app",
                 "psql postgres://app:[REDACTED]@db.internal:5432/app", [PASSWORD],
                 id="postgres-url"),
    pytest.param(f"MONGO_URL=mongodb+srv://app:{PASSWORD}@cluster0.ab1cd.mongodb.net/app",
                 "MONGO_URL=mongodb+srv://app:[REDACTED]@cluster0.ab1cd.mongodb.net/app",
                 [PASSWORD], id="mongodb-srv"),
    pytest.param(f"redis.exceptions.AuthenticationError: redis://:{PASSWORD}@cache:6379/0",
                 "redis.exceptions.AuthenticationError: redis://:[REDACTED]@cache:6379/0",
                 [PASSWORD], id="redis-url"),
    pytest.param(f"host=db port=5432 user=app password={PASSWORD} sslmode=require",
                 "host=db port=5432 user=app password=[REDACTED] sslmode=require", [PASSWORD],
                 id="libpq-keywords"),
    pytest.param(f"jdbc:postgresql://db/app?user=app&password={PASSWORD}&ssl=true",
                 "jdbc:postgresql://db/app?user=app&password=[REDACTED]&ssl=true", [PASSWORD],
                 id="jdbc-query"),
    # credential query parameters
    pytest.param(f"GET /v1/feed?token={BODY36}&page=2", "GET /v1/feed?token=[REDACTED]&page=2",
                 [BODY36], id="query-token"),
    pytest.param(f"GET /me?fields=id&access_token={BODY36}",
                 "GET /me?fields=id&access_token=[REDACTED]", [BODY36], id="query-access-token"),
    pytest.param(f"PUT https://a.blob.core.windows.net/c/b?sv=2024-08-04&sig={BODY36}%3D&se=x",
                 "PUT https://a.blob.core.windows.net/c/b?sv=2024-08-04&sig=[REDACTED]&se=x",
                 [BODY36], id="query-sig"),
    pytest.param(f"GET https://acme.firebaseio.com/users.json?auth={BODY36}",
                 "GET https://acme.firebaseio.com/users.json?auth=[REDACTED]", [BODY36],
                 id="query-auth"),
    pytest.param(f"GET https://acme.firebaseio.com/u.json?print=pretty&auth={BODY36}&x=1",
                 "GET https://acme.firebaseio.com/u.json?print=pretty&auth=[REDACTED]&x=1",
                 [BODY36], id="query-and-auth"),
    pytest.param(f"302 Location: https://app.example.com/callback?code=4/{BODY}&state=af0i",
                 "302 Location: https://app.example.com/callback?code=[REDACTED]&state=af0i",
                 [BODY], id="query-oauth-code"),
    pytest.param(f"GET /oauth/callback?state=af0i&code={BODY} 200",
                 "GET /oauth/callback?state=af0i&code=[REDACTED] 200", [BODY],
                 id="query-and-oauth-code"),
    # .netrc, as curl, git and heroku read it
    pytest.param(f"machine api.heroku.com login me@example.com password {BODY36}",
                 "machine api.heroku.com login me@example.com password [REDACTED]", [BODY36],
                 id="netrc"),
    pytest.param(f"machine github.com\n  login ci-bot\n  password {PASSWORD}\n",
                 "machine github.com\n  login ci-bot\n  password [REDACTED]\n", [PASSWORD],
                 id="netrc-lines"),
    pytest.param(f"default login anonymous password {PASSWORD}",
                 "default login anonymous password [REDACTED]", [PASSWORD], id="netrc-default"),
]


@pytest.mark.parametrize(("text", "want", "secrets"), FORMATS)
def test_a_leaked_credential_is_redacted_to_the_exact_text(
        text: str, want: str, secrets: list[str]) -> None:
    assert scrub_text(text) == (want, want.count(REDACTED))
    assert scrub_text(want) == (want, 0)


@pytest.mark.parametrize(("text", "want", "secrets"), FORMATS)
def test_a_leaked_credential_never_reaches_the_ledger_file(
        text: str, want: str, secrets: list[str], tmp_path: Path) -> None:
    led = RunLedger(str(tmp_path / "ledger"))
    try:
        led.append({"type": "closed", "harness": "h", "run_id": 1, "outcome": "failed",
                    "reason": text, "errors": {f"Error: {text}": 1}})
    finally:
        led.close()
    data = b"".join(p.read_bytes() for p in sorted((tmp_path / "ledger").glob("*.jsonl")))
    for secret in secrets:
        assert secret.encode() not in data
    line = json.loads(data)
    assert (line["reason"], line["errors"]) == (want, {f"Error: {want}": 1})


# What the same tools print that holds no credential: it stays as it is.
@pytest.mark.parametrize("text", [
    "gh auth status: Logged in to github.com account ci-bot (keyring)",
    "docker run -p 8080:80 -u 1000:1000 nginx; docker login --password-stdin ghcr.io",
    "aws configure get aws_secret_access_key --profile ci",
    "postgres://app@db.internal:5432/app?sslmode=require",
    "redis://cache:6379/0 mongodb+srv://cluster0.ab1cd.mongodb.net/app",
    "GET /v1/feed?page=2&per_page=50 took 41ms",
    "Stripe publishable key pk_live_ is public; npm_config_cache=/home/u/.npm",
    "npm login --auth-type=legacy; pip install --user httpx",
    "the .netrc machine entry lacks a password; default login prompts",
    "the build machine root password is in the vault",
    "pat=1 PATH=/usr/bin:/bin GITHUB_PATH=/tmp/gh GITHUB_PAT=1 SPAT=x _pat=y",
    "exit code=200; status code=2001 at https://httpbin.org/status?code=200",
    "see the ?code= and &auth= parameters; auth=oauth2 code=abc123",
    "twine upload dist/*; twine check -p dist; poetry config virtualenvs.in-project true",
    "poetry config http-basic.private ci-bot && poetry install",
    "AKIA is the prefix of an access key id: AKIAxxxx:secret",
])
def test_what_those_tools_print_without_a_credential_stays(text: str) -> None:
    assert scrub_text(text) == (text, 0)
