"""The secret scrubber: every string passes through it before a ledger line is hashed.

It owns the list of secret forms the ledger recognises (vendor API keys and tokens,
``key=value`` credential assignments and ``--flag value`` credentials, Authorization,
Bearer, Basic and Cookie values and session cookies by name, passwords and tokens in URL
userinfo (also where it breaks RFC 3986, or is percent-encoded as a parameter's value)
and credential query parameters (an OAuth code only inside a URL), passwords on sshpass,
MySQL, registry login, twine upload, poetry config and redis-cli command lines, AWS CLI
credentials set by name (or an access key id's secret joined to it by a colon) and .netrc
entries, webhook URLs, PEM private keys (their tail too, where the text began inside one, and
a middle piece of their body lines, where it holds neither end),
JWTs signed or encrypted) and the rule for redacting each: the
secret itself becomes ``[REDACTED]`` while harmless context (the key name, the URL
scheme and user, the word ``Bearer`` or ``Basic``) stays, so a redacted line still says
what it was.

Invariant: a scrubbed string contains none of the recognised secret forms; scrubbing is
idempotent (``scrub_text(scrub_text(x)[0]) == (scrub_text(x)[0], 0)``); text with
no secret comes back unchanged as the very same object; and the time it takes grows
linearly with the text (no form rescans the rest of the text from each place it could
start). Hash-chain values, git SHAs,
UUIDs, timestamps, paths and model names are deliberately outside every form.

Text is scrubbed once, where the untrusted part enters: a `Scrubbed` object (a ledger
error) when it is made, a log message's arguments one by one (`scrub_message`) by the
first `ScrubLog` the record meets. A scrubbed piece quoted in a longer line is not
scrubbed again: the line's own words after it could read as a secret's value.
"""

from __future__ import annotations

import base64
import binascii
import functools
import logging
import numbers
import re
from collections.abc import Iterator
from typing import Final, TypeGuard

__all__ = ["REDACTED", "ScrubLog", "Scrubbed", "json_secret_hint", "might_hold_secret",
           "scrub_message", "scrub_text", "scrub_value"]

REDACTED: Final = "[REDACTED]"

# Almost every ledger string is short and clean, so a cheap scan for a fragment that
# every secret form must contain gates the full pattern. Each branch opens with a
# case-sensitive literal, which lets the engine skip ahead to the next plausible first
# character instead of trying every branch at every position; fragments are chosen to
# open on characters that are rare in prose ("ken" for token, "zation" for
# authorization) so that plain text skips ahead further.
#
# Each entry is a first letter and the alternatives that may follow it (one branch of
# _TRIGGER for each case of the letter): kept apart here, so that a test can take every
# alternative on its own and hold the JSON gate (`_GATE_BRANCHES`) to it.
_CASELESS_FRAGMENTS: Final[tuple[tuple[str, tuple[str, ...]], ...]] = (
    ("k", ("e[ny]",)),  # token, key: api_key, access_key, private_key, secret_key
    # secret; a URL query's "code=" (an OAuth authorization code), under the "c" of a
    # branch already tried, not a branch of its own
    ("c", ("ret", "ode=(?<=[?&]code=)")),
    ("p", ("ass[wp]",)),  # password, passwd, passphrase
    ("z", ("ation",)),  # authorization
    # bearer; basic before a word as long as a Basic credential ("basic auth" is not
    # gated), in one branch: a branch more of its own costs every clean string's scan
    ("b", ("earer", "asic:?[ \t]+[a-z0-9+/]{7}")),
    ("p", ("wd",)),  # pwd=
    # pass=, with every separator _SEP takes: a quote (escaped or not) before it,
    # spaces or %20 around it, or a comma between two quoted strings
    ("p", ("ass(?:\\\\?[\"'])?(?:[ \t\u00a0]|%20)*(?:[:=]|%3[ad])", "ass\\\\?[\"'][ \t]*,")),
    ("c", ("ookie",)),  # Cookie:, Set-Cookie:
    ("s", ("ig(?:nature)?(?:=|%3d)",)),  # a URL query's sig=, X-Amz-Signature=
)
# A command-line flag's dash, where it opens a word (not "nightly-update").
_FLAG = r"-(?<![^\s\"'(]-)"
# The case-sensitive branches of _TRIGGER, one alternative each (see _CASELESS_FRAGMENTS);
# forms that open on the same letter share one, whose alternatives then each need a
# sample in the tests as a branch does.
_TRIGGER_BRANCHES: Final[tuple[str, ...]] = (
    "-----BEGIN",
    "://",
    "//[^\\s/?#@:]+:",  # //user:pass@host, the scheme left out
    r":\\/",  # :\/\/, a URL whose slashes a JSON encoder escaped
    r":/\\/",  # :/\/, the same with only the second slash escaped
    "gl(?:pat|dt|rt|cbt|ptt|ft|imt|agent|oas|soat)-",
    "_org_",  # api_org_
    "whsec_",
    "GOCSPX-",
    # sshpass -p; Shopify's and Square's tokens; Django's and Express's session cookies.
    # A form opening on a letter a branch opens on joins that branch: every branch is
    # tried at each place the scan stops, so a branch more costs every clean string.
    "s(?:hp(?:ass|at_|ss_|ca_|pa_)|q0(?:atp|csp)-|essionid=|id=(?<=connect\\.sid=))",
    "ysql",  # mysql -pPASSWORD
    # mariadb -pPASSWORD; Databricks; npm's "_auth" (.npmrc, npm_config__auth) and
    # docker's quoted "auth" key (config.json); a URL query's "auth=" (Firebase's)
    "a(?:riadb|pi(?<=dapi)[0-9a-f]|uth(?:(?<=[_\"']auth)(?![A-Za-z0-9_])|=(?<=[?&]auth=)))",
    "xapp-",
    "h(?:f_|v[sbr]\\.)",  # Hugging Face; Vault
    "xai-",
    "p(?:lx-|ypi-AgE|oetry[ \t])",  # pplx-; PyPI; poetry config http-basic.REPO
    "r(?:8_|edis-cli)",
    "l(?:sv2_|ogin[ \t]|oad[ \t](?<=upload[ \t]))",  # LangSmith; docker login -p; twine
    # SendGrid; Twilio; the session cookies of PHP, Java, ASP and ASP.NET
    # and a private key as one base64 word ("LS0tLS1CRUdJTi" is "-----BEGIN")
    "S(?:G\\.|K[0-9a-f]{32}|ESS(?:ION)?ID(?:[A-Z]{8})?=|essionId="
    "|0tLS1CRUdJTi(?<=LS0tLS1CRUdJTi))",
    "_v1_",  # dop_v1_, doo_v1_, dor_v1_
    "hooks\\.slack",
    "/webhooks/",
    _FLAG + "(?:u|-user)",  # curl -u user:password, as a word of its own
    "n(?:pm_|vapi-)",  # npm; NVIDIA
    "ya29\\.",
    "yJ",  # eyJ, the base64 of '{"' that opens a JWT
    "k-",  # sk-
    "k_",  # sk_live_, rk_live_
    "gh[pousr]_",
    "_pat_",  # github_pat_
    "xox[abeprs]-",
    "A[KS]IA",
    # Google; Facebook; an environment variable named for an auth value (REDISCLI_AUTH=) or
    # a personal access token (GITHUB_PAT=), under its "A": a branch opening on "_", the
    # byte most frequent in ledger keys, would stop the scan all over every clean string.
    # A URL query's "AUTH=" too.
    "A(?:Iza|A(?<=EAA)|UTH=(?<=[_?&]AUTH=)|T=(?<=_PAT=))",
    # an encoded URL's "://", once or twice percent-encoded
    "%(?:25)?3[Aa]%(?:25)?2[Ff]%(?:25)?2[Ff]",
)
_TRIGGER: Final = re.compile(
    "|".join(
        [
            *_TRIGGER_BRANCHES,
            *(f"{first}(?i:{'|'.join(rest)})" for first, rest in _CASELESS_FRAGMENTS),
            *(f"{first.upper()}(?i:{'|'.join(rest)})" for first, rest in _CASELESS_FRAGMENTS),
        ]
    ),
    re.ASCII,
)

# Characters of the tokens vendors issue (base64url plus the separators they use).
_TOK = r"[A-Za-z0-9_-]"
# The standard base64 alphabet (RFC 4648), which an HTTP Basic credential is written in.
_B64 = r"[A-Za-z0-9+/]"
# An unquoted key=value value runs to whitespace or a quote: a password may well hold
# ";", "," or "&", and cutting there would leave its tail in the ledger. Only an "&" that
# opens a URL query's next parameter ("&user=") ends it. A backslash is part of the value
# unless it escapes the closing quote of a JSON-in-a-string value.
_VALUE = r"""(?:[^\s"'&\\]|\\(?!["'])|&(?![A-Za-z0-9_.-]*=))+"""
# A private key block, whole or cut off by the string cap (then to the end of the text).
_PEM = (r"-----BEGIN[ A-Z0-9]*PRIVATE KEY(?s:.*?)"
        r"(?:-----END[ A-Z0-9]*PRIVATE KEY(?: BLOCK)?-----|\Z)")
# The separator: "=" or ":" (also percent-encoded), or the "=>" and ":=" of PHP, Ruby
# and Go, with spaces around it (a no-break space too); or, between two quoted strings, a
# comma (a header as a Python pair: ('authorization', 'Basic …')). "=>" and ":=" come
# first: taken as "=" or ":", their second character would pass for the value.
_SPACE = r"(?:[ \t\u00a0]|%20)"
_ASSIGN = r"(?:=>|:=|[:=]|%3[ADad])"
_SEP = (rf"""(?:(?:\\?["'])?{_SPACE}*{_ASSIGN}{_SPACE}*"""
        r"""|\\?["'][ \t]*,[ \t]*(?=\\?["']))""")
_SCHEME_WORD = r"(?:(?i:bearer|basic|token)[ \t]+)?"


# A quoted auth-param (RFC 9110 §11.4: Digest's response="…", OAuth 1.0's
# oauth_signature="…") or cookie value is part of the header, not its end: a '"' (or a
# JSON-escaped one) right after "=" runs to its closing quote when that is followed by
# what ends a parameter. The closing quote of a string around the header, after a padded
# credential ("Basic dXNl=", "x"), is followed by the next string's text instead.
_QUOTED_PARAM = (r"""=(?:"[^"\r\n\\]*"|\\"[^"\r\n\\]*\\")"""
                 r"""(?=[ \t,;)\r\n"']|$)""")


def _header_value(name: str) -> str:
    """A header's value, to the end of the header (its line or its closing quote), as the
    secret group `s_<name>`."""
    return rf"""(?P<s_{name}>(?:{_QUOTED_PARAM}|[^\r\n"'\\]|\\(?!["']))+)"""


# The scheme must start a word: without the lookbehind, a long run of letters would be
# rescanned for "://" from every position in it.
_SCHEME = r"[A-Za-z](?<![A-Za-z0-9+.-][A-Za-z])[A-Za-z0-9+.-]*:\\?/\\?/"


def _argument(name: str) -> str:
    """A command-line argument as the secret group `s_<name>`: quoted (then to its closing
    quote, spaces and all) or a bare word that is not the next flag. Not a redirect's
    "<" ("--with-token < FILE" reads the credential from FILE, whose name is no secret);
    a here-string's word ("<<< VALUE") is the value itself."""
    return (rf"""(?:<<<[ \t]*)?"""
            rf"""(?:(?P<q_{name}>["'])(?P<s_{name}__q>(?:(?!(?P=q_{name}))[^\r\n])+)"""
            rf"""(?P=q_{name})|(?P<s_{name}>(?!<(?:<<)?(?:\s|$))[^\s"'-][^\s"']*))""")


def _credential_key(name: str, key: str, sep: str = _SEP) -> tuple[str, str]:
    """A credential assignment: `key` (a pattern that opens with a literal or a class),
    a separator, and a value that is quoted (then it runs to its closing quote, so a
    passphrase with spaces goes whole), a PEM block, or a bare word."""
    # The key must end right before the separator: "max_tokens=4096" and "token_count: 3"
    # are usage figures, not credentials.
    return (
        name,
        key + sep
        + rf"""(?:(?P<q_{name}>\\?["']){_SCHEME_WORD}"""
        + rf"""(?P<s_{name}__q>(?:(?!(?P=q_{name}))(?:{_PEM}|\\.|[^\r\n\\]))+)"""
        + rf"|{_SCHEME_WORD}(?P<s_{name}>{_PEM}|{_VALUE}))",
    )


def _key(first: str, rest: str) -> str:
    return f"[{first}{first.upper()}](?i:{rest})"


# Vendors' keys and tokens, as one rule: a class of their first letters, then a branch
# on their second, where each checks its first letter behind it (and that it opens a
# word, where it must). Each is its first letter (or letters) and its branch, which
# opens with its second. As rules of their own they cost every place of a scanned
# string a test each; as one, a test, and one for each second letter where a first
# letter stands.
_VENDOR_KEYS: Final[tuple[tuple[str, str], ...]] = (
    # Prefixed OpenAI/Anthropic keys are unmistakable; a bare "sk-" needs a long run of
    # alphanumerics holding a digit, so that kebab-case names ("sk-drain",
    # "sk-nightly-build-2025-10-01") stay readable. No key starts mid-identifier
    # ("task-…", "mask_…").
    ("s", r"k-(?<=sk-)(?:(?:ant|proj|svcacct|admin|None|or)-" + _TOK + r"{20,}"
     r"|(?<![A-Za-z0-9_-]sk-)(?=[A-Za-z]*[0-9])[A-Za-z0-9]{20,}" + _TOK + r"*)"),
    # Stripe
    ("sr", r"k_(?<=[sr]k_)(?<![A-Za-z0-9_][sr]k_)(?:live|test)_[A-Za-z0-9]{16,}"),
    # GitHub
    ("g", r"h(?<=gh)(?<![A-Za-z0-9]gh)[pousr]_[A-Za-z0-9]{20,}"),
    ("g", r"i(?<=gi)(?<![A-Za-z0-9]gi)thub_pat_[A-Za-z0-9_]{20,}"),
    # GitLab
    ("g", r"l(?<=gl)(?:pat|dt|rt|cbt|ptt|ft|imt|agent|oas|soat)-" + _TOK + r"{20,}"),
    ("w", r"h(?<=wh)sec_[A-Za-z0-9+/]{24,}={0,2}"),  # Stripe's webhooks
    ("G", r"O(?<=GO)CSPX-" + _TOK + r"{24,}"),  # Google's OAuth clients
    # Model and platform vendors' keys: a fixed prefix and a long random body; a name
    # such as "hf_model_cache" is no key (too short, and "_" is no part of a body).
    # Hugging Face's bodies are 34 letters, often with no digit at all.
    ("h", r"f(?<=hf)(?<![A-Za-z0-9_]hf)_[A-Za-z0-9]{30,}"),
    ("a", r"p(?<=ap)(?<![A-Za-z0-9_]ap)i_org_[A-Za-z0-9]{30,}"),  # Hugging Face's orgs
    ("g", r"s(?<=gs)(?<![A-Za-z0-9_]gs)k_[A-Za-z0-9]{40,}"),  # Groq
    ("x", r"a(?<=xa)(?<![A-Za-z0-9_-]xa)i-[A-Za-z0-9]{40,}"),  # xAI
    ("p", r"p(?<=pp)(?<![A-Za-z0-9_-]pp)lx-[A-Za-z0-9]{40,}"),  # Perplexity
    ("r", r"8(?<=r8)(?<![A-Za-z0-9_]r8)_[A-Za-z0-9]{30,}"),  # Replicate
    ("l", r"s(?<=ls)(?<![A-Za-z0-9_]ls)v2_(?:pt|sk)_[A-Za-z0-9_]{20,}"),  # LangSmith
    # SendGrid
    ("S", r"G(?<=SG)(?<![A-Za-z0-9_-]SG)\." + _TOK + r"{16,}\." + _TOK + r"{16,}"),
    ("d", r"o(?<=do)(?<![A-Za-z0-9_]do)[opr]_v1_[0-9a-f]{40,}"),  # DigitalOcean
    ("x", r"o(?<=xo)(?<![A-Za-z0-9_-]xo)x[abeprs]-[A-Za-z0-9-]{15,}"),  # Slack
    ("x", r"a(?<=xa)pp-[0-9]+-[A-Za-z0-9-]{10,}"),  # Slack's apps
    ("n", r"p(?<=np)m_[A-Za-z0-9]{36}"),  # npm
    ("y", r"a(?<=ya)29\." + _TOK + r"{20,}"),  # Google's OAuth access tokens
    # AWS: an access key id, and the secret key when a colon joins it on ("ID:SECRET")
    ("A", r"[KS](?<=A[KS])(?<![A-Za-z0-9]A[KS])IA[A-Z0-9]{16}(?![A-Z0-9])"
     r"(?::[A-Za-z0-9/+]{20,}+={0,2})?"),
    ("A", r"I(?<=AI)(?<![A-Za-z0-9_-]AI)za" + _TOK + r"{35,}"),  # Google
    # HashiCorp Vault's service, batch and recovery tokens; a body of lower case alone is
    # a name ("hvs.reshape_to_grid"), not a token.
    ("h", r"v(?<=hv)(?<![A-Za-z0-9_-]hv)[sbr]\.(?=[a-z_-]*[A-Z0-9])" + _TOK + r"{24,}"),
    ("s", r"h(?<=sh)(?<![A-Za-z0-9_]sh)p(?:at|ss|ca|pa)_[0-9a-fA-F]{32}"),  # Shopify
    # PyPI's API tokens are macaroons whose base64 always opens so.
    ("p", r"y(?<=py)(?<![A-Za-z0-9_-]py)pi-AgE" + _TOK + r"{50,}"),
    # Databricks
    ("d", r"a(?<=da)(?<![A-Za-z0-9_-]da)pi[0-9a-f]{32}(?:-[0-9]+)?(?![A-Za-z0-9])"),
    ("s", r"q(?<=sq)(?<![A-Za-z0-9_-]sq)0(?:atp|csp)-" + _TOK + r"{22,}"),  # Square
    # Facebook's access tokens: "EAA" and a long alphanumeric run holding a digit and a
    # lower-case letter, so that no word ("EAASY", an acronym) and no upper-case hex
    # digest (as Get-FileHash prints one) is one.
    ("E", r"A(?<=EA)(?<![A-Za-z0-9_-]EA)A(?=[A-Za-z]*[0-9])(?=[A-Z0-9]*[a-z])"
     r"[A-Za-z0-9]{40,}"),
    # age's secret keys: Bech32, upper case, 58 characters; the prefix is unmistakable,
    # so a key cut short (by a string's cap) goes too.
    ("A", r"G(?<=AG)E-SECRET-KEY-1[02-9AC-HJ-NP-Z]+"),
    ("n", r"v(?<=nv)(?<![A-Za-z0-9_-]nv)api-" + _TOK + r"{40,}"),  # NVIDIA
    # Twilio's API key SIDs: "SK" and 32 lower-case hex digits, nothing else around.
    ("S", r"K(?<=SK)(?<![A-Za-z0-9_-]SK)[0-9a-f]{32}(?![A-Za-z0-9])"),
)


def _vendor_rule() -> str:
    """_VENDOR_KEYS as one pattern: the class of their first letters, then one branch
    for each second letter (a class "[KS]" is a letter of its own), holding its keys'
    branches in their order. Two keys whose first two letters differ never match at
    the same place, so only that order matters."""
    by_second: dict[str, list[str]] = {}
    for _, branch in _VENDOR_KEYS:
        second = branch[: branch.index("]") + 1] if branch[0] == "[" else branch[0]
        assert second[0] == "[" or second.isalnum(), branch
        by_second.setdefault(second, []).append(branch[len(second):])
    firsts = "".join(sorted({c for first, _ in _VENDOR_KEYS for c in first}))
    return f"[{firsts}](?:" + "|".join(
        second + (rests[0] if len(rests) == 1 else f"(?:{'|'.join(rests)})")
        for second, rests in by_second.items()) + ")"


_VENDOR_RULE: Final = _vendor_rule()


# Authorization schemes (RFC 9110 and the registry, and the ones vendors use): a word
# after "Authorization:" that is none of these is the credential itself.
_SCHEMES: Final = ("aws4-hmac-sha256", "basic", "bearer", "digest", "dpop", "gnap", "hoba",
                   "mutual", "negotiate", "ntlm", "privatetoken", "scram-sha-1",
                   "scram-sha-256", "token", "vapid", "apikey", "hawk", "oauth")

# A rule is a name and a pattern; a group named "s_<name>" (or "s_<name>__<part>") holds
# the secret and the rest of the match is context that is kept; without one the whole match
# is the secret. A group "c_<name>" (or "c_<name>__<part>") marks context that may run over
# other text (a user name, the words before a flag), which is scrubbed on its own. Every
# pattern opens with a literal or a character class, and any lookbehind comes after it:
# the engine then dismisses a rule with one character test, which keeps the full scan
# affordable on a long string. Order matters only between rules that can start at the
# same position; otherwise the leftmost match wins, which is what makes "token=" take its
# whole value even when the value is itself a token.
_RULES: Final[tuple[tuple[str, str], ...]] = (
    # A cut-off block (ledger strings are capped) still leaks key material, so an
    # unterminated BEGIN redacts to the end of the string.
    ("pem", _PEM),
    # What the files an agent reads to debug a login hold, as one rule (a rule more
    # costs every scanned place a test):
    # * a private key block as one base64 word, as kubectl's config holds a client's key
    #   (client-key-data) and a Secret its tls.key: the word goes (no secret group) when
    #   its decoding opens with a private key's BEGIN line (`_is_private_pem`);
    # * docker's config.json, a registry's login as the base64 of user:password under a
    #   quoted "auth": it goes when it decodes so (`_is_user_pass`), as a Basic one does;
    # * a .netrc entry (curl, git, ftp and heroku read one): "machine HOST login USER
    #   password PASS", or "default login USER password PASS", on one line or several.
    #   The login is asked for too: "machine X password Y" alone reads as prose as often
    #   ("the build machine root password is"). The words between are context;
    # * npm's "_auth" (base64 of user:password) as .npmrc writes it ("_auth = …", a
    #   registry's "//host/:_auth=…") and as npm hands it to every script it runs
    #   (npm_config__auth): a name of its own, not a word's tail ("redis_auth",
    #   "self._auth = …", "self.__auth").
    (
        "files",
        # Each branch's first two characters, as two classes: a letter as frequent as
        # "a" would stop the scan at every place, and these pairs are rare.
        r"""[Lmd_"'][Sae]"""
        r"(?:(?<=LS)(?<![A-Za-z0-9+/]LS)0tLS1CRUdJTi[A-Za-z0-9+/]*+={0,2}"
        r"""|(?<=["']a)uth\\?["'][ \t]*:[ \t]*\\?["']"""
        rf"""(?P<s_files__docker>{_B64}{{4,}}+={{0,2}})(?=\\?["'])"""
        r"|(?:(?<=ma)(?<![A-Za-z0-9_.-]ma)chine[ \t\r\n]+[^\s]{1,256}"
        r"|(?<=de)(?<![A-Za-z0-9_.-]de)fault)"
        r"(?P<c_files__netrc>[ \t\r\n]+login[ \t\r\n]+[^\s]{1,256})[ \t\r\n]+password"
        r"[ \t\r\n]+(?P<s_files__netrc>[^\s]+)"
        + "|" + _credential_key("files__npm", r"(?<=_a)(?<![^\s\"':_/]_a)(?<!\.__a)uth")[1]
        + ")",
    ),
    # An Authorization value runs to the end of the header (its line or its closing
    # quote): schemes such as AWS SigV4 spread the credential over comma-separated
    # parameters. The scheme is kept only when it is short enough that it cannot be a
    # credential itself (the longest common one is "AWS4-HMAC-SHA256").
    (
        "auth",
        r"[Aa](?i:uthorization)" + _SEP + r"""(?:\\?["'])?"""
        + r"(?:(?P<auth_scheme>(?i:" + "|".join(_SCHEMES) + r"))[ \t]+)?"
        + _header_value("auth"),
    ),
    _credential_key("kv_a", _key("a", r"pi[_-]?key|ccess[_-]?key|ccount[_-]?key")),
    _credential_key("kv_p", _key("p", r"assw(?:or)?d|assphrase|rivate[_-]?key")),
    # "pwd" and "pass" alone only as a word of their own: "bypass=1" is a setting.
    _credential_key("kv_pw", r"[Pp](?<![A-Za-z][Pp])(?i:wd|ass)"),
    # Azure API Management's Ocp-Apim-Subscription-Key header, and its config names
    _credential_key("kv_s", _key("s", r"ecret(?:[_-]?key)?|ubscription[_-]?key")),
    _credential_key("kv_t", _key("t", r"oken")),
    # "bearer=VALUE" (a query parameter, a config line) assigns a credential, whatever
    # its shape. Only "=", since "bearer: x" is the "bearer" form below, and a JSON
    # '"bearer", "expires_in"' (OAuth's token_type) names a scheme, not a key; with
    # spaces around it only before a quoted value, since "self.bearer = BearerToken(…)"
    # is code naming an object.
    _credential_key(
        "kv_bearer", r"[Bb](?<![A-Za-z][Bb])(?i:earer)",
        rf"""(?:\\?["'])?(?:=|%3[Dd]|{_SPACE}+={_SPACE}*(?=\\?["']))"""),
    # An environment variable named for a key, an auth value or a personal access token
    # (ENCRYPTION_KEY=, REDISCLI_AUTH=, BASIC_AUTH=, GITHUB_PAT=, GH_PAT=): upper case and
    # a bare "=", as a shell assigns it; a constant in code ("REGISTRY_KEY = ...",
    # "'HAS_AUTH': 1") names one, it does not hold one. npm reads its "_auth" setting
    # from NPM_CONFIG__AUTH, hence a second "_".
    _credential_key("kv_env", r"[KAP](?:(?<=[A-Z0-9]_K)EY|(?<=[A-Z0-9_]_A)UTH"
                              r"|(?<=[A-Z0-9]_P)AT)", "="),
    # A cookie header's value is a session: all of it goes, to the end of the header.
    (
        "cookie",
        r"[Cc](?<![A-Za-z][Cc])(?i:ookie)" + _SEP + r"""(?:\\?["'])?"""
        + _header_value("cookie"),
    ),
    # A credential passed as a command-line flag's next word ("--api-key VALUE"), its
    # name maybe narrowed by words before it ("--http-password", "--vault-token",
    # "--webhook-secret"); not a limit or a count ("--max-token 4096"), nor a switch
    # that takes no credential ("--no-password mydb").
    (
        "flag",
        _FLAG + r"-?(?!(?i:no|max|min|num)[_-])(?:[A-Za-z0-9]++[_-])*?"
        r"(?i:api[_-]?key|access[_-]?key|passw(?:or)?d|secret|client[_-]?secret"
        r"|token|auth[_-]?token|access[_-]?token)[ \t]+" + _argument("flag"),
    ),
    # A container registry login's "-p PASSWORD" ("--password" is a flag above), and
    # twine's upload's; poetry's "config http-basic.REPO USER PASSWORD" and
    # "config pypi-token.REPO TOKEN"; and redis-cli's "-a PASSWORD" (or "--pass"): "-p"
    # and "-a" alone are ports, parents and "all" in other commands, so only in the rest
    # of that command's line. One rule for the logins: a rule more costs every scanned
    # place a test.
    (
        "registry_login",
        r"[dpnbst](?<![A-Za-z0-9_-][dpnbst])(?:(?:(?:(?<=d)ocker|(?<=p)odman|(?<=n)erdctl"
        r"|(?<=b)uildah|(?<=s)kopeo)[ \t]+login|(?<=t)wine[ \t]+upload)"
        r"(?P<c_registry_login>[ \t][^\r\n|;&]{0,256}?)"
        r"(?<=[ \t])-p(?:=|[ \t]*)" + _argument("registry_login")
        + r"|(?<=p)oetry[ \t]+config(?P<c_registry_login__poetry>[ \t][^\r\n|;&]{0,256}?)"
        r"(?<=[ \t])(?P<c_registry_login__repo>http-basic\.[^\s]+[ \t]+[^\s]+"
        r"|pypi-token\.[^\s]+)[ \t]+(?![&|;>])" + _argument("registry_login__poetry") + ")",
    ),
    (
        "redis_cli",
        r"r(?<![A-Za-z0-9_-]r)edis-cli(?P<c_redis_cli>[ \t][^\r\n|;&]{0,256}?)"
        r"(?<=[ \t])(?:-a|--pass)[ \t]+" + _argument("redis_cli"),
    ),
    # "aws configure set aws_secret_access_key VALUE": the AWS CLI's names, unmistakable,
    # take their value as the next word. Not a separator: the credentials file's
    # "name = value" is the assignment rules' (the "=" read as the value left the key).
    ("aws_set", r"a(?<![A-Za-z0-9_]a)ws_(?i:secret_access_key|session_token)[ \t]+(?![=:])"
     + _argument("aws_set")),
    # sshpass's "-p PASSWORD" (or glued), and the MySQL clients' "-pPASSWORD" (always
    # glued: "-p" alone prompts), looked for in the rest of that command's line only.
    ("sshpass", r"s(?<![A-Za-z0-9_-]s)shpass[ \t]+-p[ \t]*" + _argument("sshpass")),
    (
        "mysql",
        r"m(?<![A-Za-z0-9_-]m)(?:ysql(?:dump|admin|import|check|show)?"
        r"|ariadb(?:-dump|-admin)?)(?P<c_mysql>[ \t][^\r\n|;&]{0,256}?)(?<=[ \t])-p"
        + _argument("mysql"),
    ),
    # curl's "-u user:password" (or "--user"; quoted, or with no space, or no user). Not
    # a URL after "--user" (pip's), nor docker's numeric "-u uid:gid". Quoted, the
    # password runs to the closing quote: a passphrase holds spaces.
    (
        "curl_user",
        # The user and a quoted password are bounded: unbounded, every "-u" of a long
        # run would rescan the rest of it, and scrubbing would take quadratic time.
        _FLAG + r"(?:u|-user)[ \t]*"
        r"(?:(?P<q_curl_user>[\"'])(?P<c_curl_user__q>[^\s:\"'/]{0,256}):"
        r"(?![0-9]+(?P=q_curl_user))"
        r"(?P<s_curl_user__q>(?:(?!(?P=q_curl_user))[^\r\n]){1,256})(?P=q_curl_user)"
        r"|[\"']?(?P<c_curl_user>[^\s:\"'/]{0,256}):"
        r"(?![0-9]+(?![^\s\"']))"
        r"(?P<s_curl_user>[^\s\"'/][^\s\"']*))",
    ),
    # A URL query parameter that is a credential by name: an API key, a signature, an
    # auth token (Firebase's "?auth="); and an OAuth authorization code, short-lived but
    # enough to get a token while it lives: "code" only inside a URL (its "?" or "&"
    # right after the URL's text, not after a space) and not a short number, since
    # "code=200" is a status far more often.
    (
        "query",
        r"[?&](?:(?i:key|sig|signature|x-amz-signature|x-amz-security-token|auth)="
        r"""|(?<=[^\s"'?&=][?&])(?i:code)=(?![0-9]{1,4}(?![^&\s#"'])))"""
        r"(?P<s_query>[^&\s#\"']+)",
    ),
    # Webhook URLs whose path is the credential.
    ("slack_hook", r"hooks\.slack\.com/services/(?P<s_slack_hook>[A-Za-z0-9_/-]+)"),
    (
        "discord_hook",
        r"d(?<![A-Za-z0-9_-]d)iscord(?:app)?\.com/api/webhooks/"
        r"(?P<s_discord_hook>[0-9]+/[A-Za-z0-9_-]+)",
    ),
    # The password runs to the last "@" of the authority, so an unescaped "@" in it
    # cannot leave a tail behind. A bare userinfo is usually a login name ("git@",
    # "alice@"); only a long run holding a digit or a capital looks like a token put
    # there to authenticate. Failing both, a userinfo that breaks RFC 3986 (an unescaped
    # "/", "?" or "#" in the password, an "@" in the user) still hides a password: then
    # it runs to the last "@" before a space, unless what follows the ":" is a port and
    # a path. The strict reading also gives way to that one when another "@" follows a
    # "/", "?" or "#" in the same word ("u:p@ss/word@host"): the host it would keep may
    # be the rest of the password, and hiding a host is the safer mistake. Both looks
    # are bounded, or text full of "x://a:" would take quadratic time.
    (
        "url",
        _SCHEME + r"(?:(?P<c_url__user>[^\s/?#@:]*):(?P<s_url__password>[^\s/?#]+)"
        r"(?!@[^\s/?#]{0,256}[/?#]\S{0,256}@)"
        r"|(?P<s_url__token>(?=[a-z_.~-]*[A-Z0-9])[A-Za-z0-9_.~-]{20,})"
        r"|(?P<c_url__loose_user>[^\s/?#:]{0,256}):(?![0-9]*(?:[/?#\s]|$))"
        r"(?P<s_url__loose>\S{1,256}))(?=@)",
    ),
    # A scheme-relative URL ("//user:pass@host") carries the same userinfo; only the
    # user:password form, since "//name@" alone is as often a comment or a path.
    ("url_relative",
     r"/(?<![:/A-Za-z0-9]/)/(?P<c_url_relative>[^\s/?#@:]+):(?P<s_url_relative>[^\s/?#]+)(?=@)"),
    # A URL percent-encoded as a query parameter's value ("?next=https%3A%2F%2Fu%3Apw%40h",
    # once or twice): its "://", the user, an encoded ":" and the password. As in a URL
    # itself, the password runs to the last encoded "@" of the authority (an "@" of the
    # password, escaped or not, cannot leave a tail behind); an encoded "/", "?" or "#"
    # ends the authority. Once or twice encoded, "%2540" may be either, so it is both.
    (
        "url_encoded",
        r"%(?:25)?3[Aa]%(?:25)?2[Ff]%(?:25)?2[Ff]"
        r"(?P<c_url_encoded>(?:[A-Za-z0-9._~!$*+=-]"
        r"|%(?!(?:25)?(?:3[Aa]|40|2[Ff]|3[Ff]|23))[0-9A-Fa-f]{2}){0,256}+)%(?:25)?3[Aa]"
        r"(?P<s_url_encoded>(?:[A-Za-z0-9._~!$*+=:-]"
        r"|%(?!(?:25)?(?:2[Ff]|3[Ff]|23))[0-9A-Fa-f]{2}){1,256})(?=%(?:25)?40)",
    ),
    # A session cookie outside a Cookie header (a cookie jar, a redirect's query), by the
    # names servers give it; a cookie value holds no ";", ",", space or quote (RFC 6265).
    # Not "session_id" nor "sid": an agent's session id is an id the run ledger keeps
    # (sessions[].id), and a "sid" is as often a process's or a database's.
    (
        "session_cookie",
        r"[sPJAc](?<![A-Za-z0-9_.-][sPJAc])(?:(?<=s)essionid|(?<=P)HPSESSID|(?<=J)SESSIONID"
        r"|(?<=A)(?:SPSESSIONID[A-Z]{8}|SP\.NET_SessionId)|(?<=c)onnect\.sid)="
        r"(?P<s_session_cookie>[^\s;,\"'&\\]+)",
    ),
    # Header and payload are base64url JSON objects, so both open with "eyJ"; the
    # signature may be cut off or empty (alg "none"). The header stops at an "_eyJ" (a
    # JWT after an underscore, "id_token_eyJ…", may start there): otherwise every such
    # start in a long run would rescan the rest of it, in quadratic time.
    (
        "jwt",
        r"eyJ(?<![A-Za-z0-9-]eyJ)(?:(?!_eyJ)" + _TOK + r"){4,}+"
        r"\.(?:eyJ" + _TOK + r"{4,}(?:\." + _TOK + r"*)?"
        # an encrypted JWT (JWE, RFC 7516): an encrypted key (empty for "dir"), an IV,
        # the ciphertext and a tag, none of them JSON
        r"|" + _TOK + r"*\." + _TOK + r"{8,}\." + _TOK + r"{2,}\." + _TOK + r"{8,})",
    ),
    # Vendors' keys and tokens: a fixed prefix and a random body, the whole match the
    # secret (built in _VENDOR_KEYS).
    ("vendor", _VENDOR_RULE),
    # Outside an Authorization header "bearer" is also an English word, so the value
    # must look like a token: a digit in it, or too long to be a word.
    (
        "bearer",
        r"[Bb](?<![A-Za-z][Bb])(?i:earer):?[ \t]+(?P<s_bearer>"
        r"(?=[A-Za-z._~+/-]*[0-9])[A-Za-z0-9._~+/-]{8,}=*"
        r"|[A-Za-z._~+/-]{32,}=*)",
    ),
    # "basic" is an English word too ("basic auth", "Basic Only"), so the word after it
    # must be a credential: RFC 7617's user-id ":" password, in base64 (`_is_user_pass`
    # decodes it). The lookahead takes only a word whose decoding holds a ":" (a ":" is
    # one of three shapes within a four-character group), and at least 7 characters (5
    # bytes: "Only" decodes to ":yr"); a word that opens another form ("bearer",
    # "mysql") has no such shape. The word must end there: not go on as a token, a JWT's
    # next part or a key's name ("Basic X_API_KEY=", "Basic pass = x").
    (
        "basic",
        r"[Bb](?<![A-Za-z][Bb])(?i:asic):?[ \t]+"
        rf"(?=(?:{_B64}{{4}})*?(?:O[g-v]|{_B64}[DTjz][o-r]|{_B64}{{2}}[AEIMQUYcgkosw048]6))"
        rf"(?P<s_basic>{_B64}{{7,}}+={{0,2}}+)"
        r"(?![A-Za-z0-9+/_~:=-]|\.[A-Za-z0-9+/_~-])"
        rf"""(?!(?:\\?["'])?{_SPACE}*{_ASSIGN})""",
    ),
    # No such form for "token" alone: in a run's text it precedes counts, model names and
    # ids ("token claude-sonnet-4-5", "token 3f2a9c…"); GitHub's "token ghp_…" is a ghp_ key.
)

# An empty group closes each rule: being the last group closed, it names the rule in
# `lastgroup` without putting a group marker in front of the rule's first character.
# ASCII mode: Unicode case folding would let "\u212a" (KELVIN SIGN) spell "key" past the
# trigger, whose branches open with case-sensitive ASCII letters.
_SECRET_RX: Final = re.compile(
    "|".join(f"(?:{pat})(?P<r_{name}>)" for name, pat in _RULES), re.ASCII
)


def _groups(kind: str, name: str) -> tuple[str, ...]:
    return tuple(g for g in _SECRET_RX.groupindex
                 if g == f"{kind}_{name}" or g.startswith(f"{kind}_{name}__"))


_SECRET_GROUPS: Final = {f"r_{name}": _groups("s", name) for name, _ in _RULES}
_CONTEXT_GROUPS: Final = {f"r_{name}": _groups("c", name) for name, _ in _RULES}
# "Authorization: Bearer" with the token already gone is a scheme, not a credential.
_AUTH_SCHEMES: Final = frozenset({"basic", "bearer", "digest", "negotiate", "token"})
# A credential assignment's value that is only a switch ("SKIP_AUTH=1", "verify_token:
# false", "password=None)" in a repr, the punctuation that ends it in code) names a
# setting, not a secret; and under "pass" alone, a bare number of at most three digits
# is a tally ("pass: 42 fail: 0"): a password that short protects nothing, while a PIN's
# four digits and more still go, as does a quoted "42" (a string).
_ASSIGNMENT_RULES: Final = frozenset(f"r_{name}" for name, _ in _RULES
                                     if name.startswith("kv_"))
_SWITCH: Final = re.compile(r"(?i:0|1|true|false|yes|no|on|off|none|null)[,;)\]}]*")
_TALLY: Final = re.compile(r"[0-9]{1,3}")


def _a_setting(m: re.Match[str], group: str) -> bool:
    """True when the secret group `group` of `m`, a match of an assignment rule, holds no
    secret: a switch, or a bare tally under "pass"."""
    return m.lastgroup in _ASSIGNMENT_RULES and (
        _SWITCH.fullmatch(m.group(group)) is not None
        or (group == "s_kv_pw" and m.group()[1] in "aA"
            and _TALLY.fullmatch(m.group(group)) is not None))


# One pass can uncover a secret whose lookbehind was blocked by a neighbour it just
# redacted ("AKIA…sk-…"); passes repeat until none changes anything. Two suffice in
# practice; the bound only guards against a rule set that would never settle.
_MAX_PASSES: Final = 8


def _redaction(m: re.Match[str]) -> tuple[str, int]:
    """The replacement for one match and how many secrets it hides.

    The secret group becomes REDACTED unless it holds no live secret (already redacted,
    or an Authorization scheme whose credential is gone). A context group is scrubbed in
    turn: it is text the match would otherwise hide from every pass, and it can hold a
    secret of its own (a key as a URL's user name, a "--password=" before "-pPASSWORD")."""
    rule = m.lastgroup
    assert rule is not None
    group = next((g for g in _SECRET_GROUPS[rule] if m.group(g) is not None), None)
    if group is None:
        if rule == "r_files" and not _is_private_pem(m.group()):
            return m.group(), 0  # a certificate's or a public key's data
        return REDACTED, 1
    secret = m.group(group)
    if group in ("s_basic", "s_files__docker") and not _is_user_pass(secret):
        # No credential after all, but a word the match would hide from every pass: it
        # may be a key of another form ("basic AKIA…").
        parts = [(m.span(group), *_one_pass(secret))]
    else:
        live = secret != REDACTED and not (
            rule == "r_auth"
            and m.group("auth_scheme") is None
            and secret.strip().lower() in _AUTH_SCHEMES
        ) and not _a_setting(m, group)
        parts = [(m.span(group), REDACTED if live else secret, int(live))]
    for g in _CONTEXT_GROUPS[rule]:
        if m.group(g):
            parts.append((m.span(g), *_one_pass(m.group(g))))
    out, pos, hits = [], m.start(), 0
    for (start, end), piece, n in sorted(parts):
        out += [m.string[pos:start], piece]
        pos, hits = end, hits + n
    out.append(m.string[pos : m.end()])
    return "".join(out), hits


def _is_user_pass(word: str) -> bool:
    """True when `word` is base64 (its padding may be left off) of a user-id ":" password
    pair as RFC 7617 sends it: UTF-8 text with no control character. Prose that merely
    reads as base64 decodes to bytes that are not such text ("Overview": ":\\xf7\\xab…")."""
    try:
        text = base64.b64decode(word + "=" * (-len(word) % 4), validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        return False
    return ":" in text and text.isprintable()


def _is_private_pem(word: str) -> bool:
    """True when the base64 `word` decodes to a BEGIN line of a private key's block (its
    first 48 bytes hold the longest label); a word cut before the label holds no key."""
    head = word[:64]
    try:
        text = base64.b64decode(head[: len(head) // 4 * 4])
    except binascii.Error:
        return False
    return b"PRIVATE KEY" in text


# The END line of a private key block whose BEGIN line is not before it in the text: the
# text began inside the block (the tail of a cut output, the second of two fields it was
# split over), and what comes before the END line is key material. Searched for apart
# from _SECRET_RX: a branch anchored at the text's start would cost that pattern the
# first-character set it skips ahead with.
_PEM_END: Final = re.compile(r"-----END[ A-Z0-9]*PRIVATE KEY(?: BLOCK)?-----")
_PEM_BEGIN: Final = re.compile(r"-----BEGIN[ A-Z0-9]*PRIVATE KEY")


def _pem_tail(s: str) -> tuple[str, int]:
    """`s` with the text up to the last END line before any BEGIN line redacted."""
    if "-----END" not in s:  # nearly every text: a substring test, not two searches
        return s, 0
    begin = _PEM_BEGIN.search(s)
    last = -1
    for m in _PEM_END.finditer(s, 0, len(s) if begin is None else begin.start()):
        last = m.end()
    return (s, 0) if last < 0 else (REDACTED + s[last:], 1)


# The body of a private key block that holds neither its BEGIN nor its END line: a
# middle piece of a block cut over several fields (each capped at MAX_STR bytes, which
# holds two whole lines at least). Two or more whole lines of base64 as wide as PEM
# (64) or OpenSSH (70) write them, each ended by a line break (escaped too, as a repr
# shows one), and the cut line after them. Prose has no such lines; hex digests (one
# case) and base64 wrapped at 76 have not their shape, and `_key_runs` asks for upper
# and lower case and a digit besides. The first line opens a word (or follows an
# escaped break), so that a long run of base64 is not rescanned from each place in it.
_BREAK = r"(?:\r?\n|\\n)"
_KEY_RUN: Final = re.compile(
    rf"{_B64}(?:(?<![A-Za-z0-9+/\\]{_B64})|(?<=\\n{_B64}))"
    rf"(?:{_B64}{{63}}(?:{_BREAK}{_B64}{{64}})+|{_B64}{{69}}(?:{_BREAK}{_B64}{{70}})+)"
    rf"(?![A-Za-z0-9+/])(?:{_BREAK}{_B64}{{1,70}}={{0,2}}(?![A-Za-z0-9+/=]))?")
_LINE_SPLIT: Final = re.compile(_BREAK)
# The second whole line of every run, after its line break: searched for first, as it
# opens on the rare characters of a break.
_KEY_LINE: Final = re.compile(
    rf"{_BREAK}(?:{_B64}{{64}}|{_B64}{{70}})(?![A-Za-z0-9+/])")
_KEY_RUN_MIN: Final = 64 + 1 + 64  # the shortest text a run fits in
# The cut line before such a run: a word of base64 that ends at the run's line break.
_KEY_HEAD: Final = re.compile(
    rf"(?:(?<![A-Za-z0-9+/\\])|(?<=\\n)){_B64}{{1,70}}{_BREAK}\Z")


def _key_runs(s: str) -> Iterator[re.Match[str]]:
    """The `_KEY_RUN` matches in `s` that read as key material: each line mixes the
    cases, and a digit is among them (random base64 fails either about once in 10^10
    lines); and it is no body of a block whose BEGIN line, before it and not closed,
    says it is public (a certificate, a public key: a private block's BEGIN is redacted
    before this is asked). The last BEGIN and END are tracked as the scan goes, so that
    no run searches the text before it again."""
    # Nearly every text is shorter than two lines, or has no whole line of a key after
    # a line break: a search that skips ahead to line breaks, before the full one.
    if len(s) < _KEY_RUN_MIN or _KEY_LINE.search(s) is None:
        return
    begin = end = -1
    seen = 0
    for m in _KEY_RUN.finditer(s):
        run = m.group()
        if not any(c.isdigit() for c in run) or any(
                line.islower() or line.isupper() for line in _LINE_SPLIT.split(run)[:-1]):
            continue
        begin = max(begin, s.rfind("-----BEGIN", seen, m.start()))
        end = max(end, s.rfind("-----END", seen, m.start()))
        seen = m.start()
        if begin <= end:
            yield m


def _key_lines(s: str) -> tuple[str, int]:
    """`s` with every piece of a private key's body `_key_runs` finds redacted, with
    the cut line before it."""
    out: list[str] = []
    pos = hits = 0
    for m in _key_runs(s):
        head = _KEY_HEAD.search(s, max(pos, m.start() - 74), m.start())
        start = m.start() if head is None else head.start()
        out += [s[pos:start], REDACTED]
        pos, hits = m.end(), hits + 1
    return (s, 0) if not hits else ("".join(out) + s[pos:], hits)


def _one_pass(s: str) -> tuple[str, int]:
    s, hits = _pem_tail(s)

    def replace(m: re.Match[str]) -> str:
        nonlocal hits
        out, n = _redaction(m)
        hits += n
        return out

    s, n = _key_lines(_SECRET_RX.sub(replace, s))
    return s, hits + n


def might_hold_secret(s: str) -> bool:
    """False when `s` holds none of the fragments every secret form contains, nor lines
    of a private key's body (cheap)."""
    return _TRIGGER.search(s) is not None or (
        len(s) >= _KEY_RUN_MIN and next(_key_runs(s), None) is not None)


def scrub_text(s: str) -> tuple[str, int]:
    """Return `s` with every recognised secret replaced by REDACTED, and how many were.

    When nothing is replaced the result is `s` itself.
    """
    if _TRIGGER.search(s) is None and (
            len(s) < _KEY_RUN_MIN or next(_key_runs(s), None) is None):
        return s, 0
    total = 0
    out = s
    for _ in range(_MAX_PASSES):
        out, hits = _one_pass(out)
        if not hits:
            break
        total += hits
    return (out, total) if total else (s, 0)


class Scrubbed:
    """What was scrubbed where it was made: its ``str()`` is scrubbed text, and words of
    harness's own besides (a `LedgerError` with the record it names, an import's
    skipped entry).

    A message that quotes it (`scrub_message`, `ScrubLog`) shows it as it is. Scrubbed
    again as part of a longer line, the words after it could read as a secret's value:
    "Authorization: Bearer [REDACTED] (harness=a run_id=1 seq=5); 1 line(s) queued" lost
    the record REQ-6 logs a failure with, and every word after it.
    """

    __slots__ = ()


class _Shown:
    """An argument of a message, as the message shows it (``%s`` or ``%r``), scrubbed on
    its own."""

    __slots__ = ("value",)

    def __init__(self, value: object) -> None:
        self.value = value

    def __str__(self) -> str:
        return scrub_text(str(self.value))[0]

    def __repr__(self) -> str:
        return scrub_text(repr(self.value))[0]


def scrub_message(msg: object, args: object = ()) -> str:
    """`msg % args`, as a log record renders it, with every secret redacted once, where
    the untrusted text is.

    Without arguments the message is that text, scrubbed whole (but a `Scrubbed` one).
    With them, the message is the code's own format and each argument the untrusted
    text: each is scrubbed on its own, and one already scrubbed where it was made
    (`Scrubbed`) or a number is shown as it is. Unless the format itself holds anything
    a secret form keys on ("token=%s", "Bearer %s", "https://%s@", or text an f-string
    put into it; none of the daemon's formats does): then the whole line is scrubbed, so
    that a secret split between the format and an argument is still found.
    """
    if not args:
        return str(msg) if isinstance(msg, Scrubbed) else scrub_text(str(msg))[0]
    fmt = str(msg)
    if type(args) is not tuple or _TRIGGER.search(fmt) is not None:
        return scrub_text(fmt % args)[0]
    return fmt % tuple(a if isinstance(a, (Scrubbed, numbers.Number)) else _Shown(a)
                       for a in args)


class ScrubLog(logging.Filter):
    """A log filter that scrubs each message as `scrub_message` does: a path or an OS
    error quoted in a warning can carry a token as surely as a field. On a logger it
    covers what that logger logs; on a handler, everything it prints.

    A record is scrubbed once: the first ScrubLog it meets (the ledger's logger's, before
    the daemon's handler's) marks it, and every later one passes it as it is.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "scrubbed", False):
            return True
        record.msg, record.args = scrub_message(record.msg, record.args), None
        record.scrubbed = True
        return True


# What a key is followed by to ask the rules whether it names a credential. ": " and not
# "=": an upper-case *_KEY name is a secret only as a shell assigns it, and
# {"PRIMARY_KEY": "id"} is no shell.
_PROBE: Final = ": v4lue"


@functools.lru_cache(maxsize=4096)
def _names_a_credential(key: str) -> bool:
    """True when `key` is the name of a credential: written as an assignment
    (``key=value``), the rules would hide the value ("password", "GITHUB_TOKEN",
    "aws_secret_access_key", "Authorization"; not "max_tokens" or "token_count")."""
    return scrub_text(key + _PROBE)[0].endswith(": " + REDACTED)


# The branches `json_secret_hint` searches canonical JSON (DESIGN.md §2) for. Why one
# of them matches inside the canonical JSON of every value in which `scrub_value` would
# replace something (so that the gate is sound: it never passes such a value):
# * `scrub_value` only ever finds a secret through `scrub_text`, which finds none in a
#   string _TRIGGER does not match but lines of a key's body, which hold a line break
#   (or an escaped one: a backslash): so in a string, a key, or a key followed by the
#   probe `_names_a_credential` scrubs, one of _TRIGGER's branches matches, or a
#   character JSON escapes stands.
# * Canonical JSON writes every string and key verbatim (UTF-8) between quotes, unless
#   it holds a character JSON escapes; every escape is spelled with a backslash, and a
#   backslash is a hint. (So are the branches ":\/" and ":/\/", which hold one.)
# * Every other branch of _TRIGGER has a branch here, as bytes, that matches wherever
#   it matches. Its one look-around, a flag's "-" opening a word, reads the quote before
#   a string as the start it is; the look-behinds added here read only bytes of their
#   own match. Classes read a UTF-8 character's bytes as they read the character: each
#   byte of one is in `[^\s/?#@:]` as the character is, and the no-break space's two
#   bytes are in `[ \t\xc2\xa0]`.
# * A key is followed by '":' where the probe puts ": v4lue". Only two branches can
#   run from a key into the probe (the rest hold no ":", and none matches inside the
#   probe), and both take the quote between: "//…:" because its class takes a quote,
#   "pass…:" because its branch for a key does.
# Each branch is filed under the byte every match of it opens with, and that byte is
# looked for with bytes.find (memchr) first: a group whose byte does not occur costs one
# pass of memchr, one that does a search that skips ahead to that byte. One pattern of
# all the branches would make the engine test ~20 first bytes at every position, 3x
# slower over a ledger. Each group costs every value a bytes.find besides (on a short
# line, as much as the search), so a branch joins a group that exists where it can: by a
# lookbehind over the bytes before the one it is filed under, or under a run of bytes
# ("auth") that two branches share. A branch of _TRIGGER that opens on a byte frequent
# in JSON keys and prose (":", "a", "h", "l", "n", "r", "s", "w") is filed under a rarer
# byte of its match. The caseless fragments' branches are _CASELESS_FRAGMENTS' own, but
# "sig"; the rest are written by hand, so a branch added to _TRIGGER_BRANCHES (or an
# alternative to one of them or to a fragment) needs one here: tests take each branch of
# _TRIGGER from those tables and fail until a sample of it that JSON writes as it is,
# and that no other branch matches, is found by this gate (and they hold the gate to
# `scrub_value`).
_GATE_BRANCHES: Final[tuple[tuple[bytes, bytes], ...]] = (
    (b"\\", b""),  # every escape, and the branches ":\/", ":/\/"
    (b"-", b"----BEGIN"),
    (b"-", rb"""(?<![^\s"'(]-)(?:u|-user)"""),  # _FLAG
    (b"-", rb"cli(?<=redis-cli)"),
    (b"-", rb"(?<=sq0atp-)"),
    (b"-", rb"(?<=sq0csp-)"),
    (b"/", rb"(?<=:/)/"),  # "://"
    (b"/", rb"/[^\s/?#@:]+:"),
    (b"/", b"webhooks/"),
    (b"_", b"org_"),
    (b"_", b"v1_"),
    (b"_", b"pat_"),
    (b"_", rb"(?<=whsec_)"),
    (b"_", rb"(?<=hf_)"),
    (b"_", rb"(?<=r8_)"),
    (b"_", rb"(?<=lsv2_)"),
    (b"_", rb"(?<=npm_)"),
    (b"_", rb"auth(?![A-Za-z0-9_])"),
    # a quoted "auth" key in a string: a '"' JSON escapes (the backslash finds it), a "'"
    # it keeps; and docker's "auth" as a key of a structured value (`scrub_value` judges
    # its string). Both under the run "auth" (a byte run found by one search, where a
    # group for each would cost every value a search more)
    (b"auth", rb"""(?:(?<='auth)(?![A-Za-z0-9_])|(?<="auth)":")"""),
    # (under the "C" a caseless fragment's group searches for anyway: a group more costs
    # every value a search)
    (b"C", rb"RUdJTi(?<=LS0tLS1CRUdJTi)"),
    (b"_", rb"(?<=shp(?:at|ss|ca|pa)_)"),
    (b"g", b"l(?:pat|dt|rt|cbt|ptt|ft|imt|agent|oas|soat)-"),
    (b"g", b"h[pousr]_"),
    (b"g", rb"in[ \t](?<=login[ \t])"),
    (b"G", b"OCSPX-"),
    (b"G", rb"\.(?<=SG\.)"),
    (b"x", b"app-"),
    (b"x", b"ai-"),
    (b"x", b"ox[abeprs]-"),
    (b"x", rb"-(?<=plx-)"),
    (b"y", b"sql"),
    (b"y", rb"a29\."),
    (b"y", b"J"),
    (b"y", rb"[ \t](?<=poetry[ \t])"),
    (b"b", rb"(?<=ariadb)"),
    (b"p", rb"ass(?<=shpass)"),
    (b"p", rb"load[ \t](?<=upload[ \t])"),
    (b"k", b"-"),
    (b"k", b"_"),
    (b"k", rb"s\.slack(?<=hooks\.slack)"),
    (b"A", b"[KS]IA"),
    (b"A", b"Iza"),
    (b"A", rb"gE(?<=pypi-AgE)"),
    (b"A", rb"A(?<=EAA)"),
    (b"v", rb"[sbr]\.(?<=hv[sbr]\.)"),
    (b"v", rb"api-(?<=nvapi-)"),
    (b"p", rb"i(?<=dapi)[0-9a-f]"),
    (b"K", rb"(?<=SK)[0-9a-f]{32}"),
    # "sig=", "signature=" and their "%3d" forms, any case
    (b"=", rb"(?<=(?i:sig)=)"),
    (b"=", rb"(?<=(?i:signature)=)"),
    (b"%", rb"(?i:3d)(?<=(?i:sig%3d))"),
    (b"%", rb"(?i:3d)(?<=(?i:signature%3d))"),
    # an encoded URL's "://"
    (b"%", rb"(?:25)?3[Aa]%(?:25)?2[Ff]%(?:25)?2[Ff]"),
    # a session cookie's name and its "="
    (b"=", rb"(?<=sessionid=)"),
    (b"=", rb"(?<=SESSID=)"),
    (b"=", rb"(?<=SESSIONID=)"),
    (b"=", rb"(?<=SESSIONID[A-Z]{8}=)"),
    (b"=", rb"(?<=SessionId=)"),
    (b"=", rb"(?<=connect\.sid=)"),
    # an environment variable named for an auth value or a personal access token, and a
    # URL query's "auth=" ("=" is rarer in a ledger than "A")
    (b"=", rb"(?<=[_?&]AUTH=)"),
    (b"=", rb"(?<=_PAT=)"),
    (b"=", rb"(?<=[?&]auth=)"),
    # a key "pass" (a quote, spaces) read with the probe, in JSON: the quote that closes
    # the key stands between it and the ":"
    (b"p", rb"""(?i:ass)(?:'|[ \t\xc2\xa0]|%20)*":"""),
    (b"P", rb"""(?i:ass)(?:'|[ \t\xc2\xa0]|%20)*":"""),
    # _TRIGGER's own, but "sig" (above)
    *((first.encode(), f"(?i:{'|'.join(rest)})".encode())
      for low, rest in _CASELESS_FRAGMENTS if low != "s"
      for first in (low, low.upper())),
)


# A look-around each match of a group passes, tried before its branches: for the groups
# whose byte is frequent in ledgers ("deps", "run_id"), one test in place of several.
_GATE_GUARDS: Final = {b"p": b"(?=[AaWwil])", b"P": b"(?=[AaWw])",
                       b"_": b"(?:(?=[aopv])|(?<=[cf28mast]_))"}


def _gate_groups() -> tuple[tuple[bytes, re.Pattern[bytes]], ...]:
    groups: dict[bytes, list[bytes]] = {}
    for first, rest in _GATE_BRANCHES:
        groups.setdefault(first, []).append(rest)
    return tuple((first, re.compile(re.escape(first) + _GATE_GUARDS.get(first, b"")
                                    + b"(?:" + b"|".join(rests) + b")"))
                 for first, rests in groups.items())


_GATE: Final = _gate_groups()


def json_secret_hint(data: bytes, pos: int = 0) -> int:
    """The offset of the first place at or after `pos` in `data` where a secret may
    start, or -1; a cheap gate in front of `scrub_value` for a long run of values.

    `data` holds canonical JSON values (DESIGN.md §2) in UTF-8, apart or side by side. If
    `scrub_value` would replace anything in one of them, a place inside that value's
    bytes is found (why: the comment on _GATE_BRANCHES). It is a gate, not a judge: a
    place found may hold nothing ("max_tokens", "https://host"), and the value is then
    judged by `scrub_value` itself.
    """
    best = -1
    for first, rx in _GATE:
        at = data.find(first, pos)
        if at < 0 or 0 <= best <= at:
            continue  # no match of this group can come before the one found
        m = rx.search(data, at)
        if m is not None and (best < 0 or m.start() < best):
            best = m.start()
    return best


def scrub_value(obj: object) -> tuple[object, int]:
    """Scrub every string in a JSON-like value; return it and how many secrets were replaced.

    Dicts (string keys and values), lists and tuples are walked; other values are left
    alone. A string under a key that names a credential (``{"password": "hunter2"}``,
    the structured form of ``password: hunter2``) is a secret whatever its shape and
    becomes REDACTED whole; so does one under docker's ``"auth"`` that is the base64 of
    user:password (config.json as a value, judged as its text is). A container comes
    back as the same object when nothing in it changed, and as a new one otherwise (a
    tuple then becomes a list, its JSON form). Two keys that scrub to the same text
    collapse into one, keeping the later value.
    """
    if isinstance(obj, str):
        return scrub_text(obj)
    if isinstance(obj, dict):
        total = 0
        items: list[tuple[object, object]] = []
        for k, v in obj.items():
            nk, kn = scrub_text(k) if isinstance(k, str) else (k, 0)
            nv: object
            if isinstance(k, str) and _is_secret_scalar(v) and (
                    (_names_a_credential(k) and _SWITCH.fullmatch(v) is None)
                    or (k == "auth" and _is_user_pass(v))):
                nv, vn = REDACTED, 1
            else:
                nv, vn = scrub_value(v)
            total += kn + vn
            items.append((nk, nv))
        return (dict(items), total) if total else (obj, 0)
    if isinstance(obj, list | tuple):
        total = 0
        values: list[object] = []
        for v in obj:
            nv, n = scrub_value(v)
            total += n
            values.append(nv)
        return (values, total) if total else (obj, 0)
    return obj, 0


def _is_secret_scalar(v: object) -> TypeGuard[str]:
    """A value that may hold a secret on its own under a credential's name: a non-empty
    string not yet redacted (and, asked last, being no switch as `_SWITCH` reads an
    assignment's). Not a number: {"pass": 42} is a test count far more often than a PIN,
    and a figure blanked in a hashed ledger is lost for good."""
    return isinstance(v, str) and v != "" and v != REDACTED
