"""One place that removes secrets from text before it is printed or recorded.

Two kinds of secret reach mismatchscope: credentials inside a URL
(``http://user:pass@host``) and the API key of a sampler server. Both must
stay out of the run manifest (its ``command``, ``config`` and
``fingerprint``), out of stderr, and out of any server text we pass on (a
server that echoes the request's ``Authorization`` header would otherwise
print the key). Every path that records or prints such text calls
:func:`redact` (or :func:`redact_url`, :func:`redact_command`,
:func:`excerpt`, which build on it); nothing else decides what a secret
looks like.

Three nets, from the most to the least exact:

* values we know (:func:`register_secret`): the API key, a URL's password
  alone, ``user:pass`` and its base64, matched in any common encoding a
  server may echo them in (percent-encoding, JSON ``\\/`` and ``\\uXXXX``
  escapes, ``+`` for a space, HTML entities), since a server rarely echoes a
  value byte for byte;
* the userinfo of any ``scheme://USERINFO@`` in text;
* a credential-named field (``api_key=...``, ``"hf_token": "..."``), a URL
  query parameter named like a credential (``?token=``, ``&sig=``) or an
  HTTP auth scheme (``Bearer ...``) followed by a value we do not know.
"""

from __future__ import annotations

import base64
import functools
import html.entities
import re
from collections.abc import Iterable, Sequence
from typing import Any
from urllib.parse import unquote

REDACTED = "<redacted>"

_URL_USERINFO = re.compile(
    r"(?i)\b([a-z][a-z0-9+.-]*://)"
    r"(?:[^\s/@]*(?:@[^\s/@]*)*"  # user:pass@, '@'s inside allowed: the userinfo runs to the last '@' before the path
    r"|(?=[^\s?#@\"'<>]*:)[^\s?#\"'<>]*)@"  # or, when a ':' comes first, a raw '/' inside too: http://alice/x:pw@host
)
"""scheme://USERINFO@ in free text. A raw '/' is allowed in the userinfo only when a ':' precedes the '@'
(``http://h/p?a=b@c`` is a path and a query); :func:`redact_url` is stricter on a URL standing alone."""
_SCHEME = re.compile(r"(?i)[a-z][a-z0-9+.-]*://")
_SCHEME_IN_ARG = re.compile(r"(?i)(?<![a-z0-9+.-])[a-z][a-z0-9+.-]*://")
_AUTH_SCHEMES = re.compile(r"(\b(?i:bearer)(?:\s+|%20)[A-Za-z0-9._~+/=\-:%]+|\bBasic(?:\s+|%20)[A-Za-z0-9+/=]{8,})")
"""an HTTP auth scheme and its credentials, as a server echoing the request's headers would print them."""

_WEAK_WORDS = "token|key|auth|pwd"
"""credential words that are also ordinary words (``key=lambda``, ``token: 17``): alone, a credential name
only in a command's option or a config key, never in free text."""
_STRONG_WORDS = "password|passwd|passphrase|secrets?|apikey|authorization|credentials?|bearer|cookie"
_PREFIX = r"(?:[A-Za-z0-9]+[_.-]|[a-z0-9]+(?=[A-Z]))"
"""the words before the last one: snake_case, kebab-case, dotted or camelCase."""
_END = r"(?![A-Za-z0-9])"
_NAME = rf"(?:{_PREFIX}*(?i:{_WEAK_WORDS}|{_STRONG_WORDS}){_END})"
"""a credential name: its LAST word is a credential word. ``hf_token``, ``client_secret``, ``x-api-key`` and
``apiKey`` are; ``max_tokens``, ``num_tokens``, ``top_k``, ``allowed_token_ids`` and ``api_key_env`` (the
name of a variable, not its value) are not."""
_NAME_IN_TEXT = rf"(?:{_PREFIX}+(?i:{_WEAK_WORDS}){_END}|{_PREFIX}*(?i:{_STRONG_WORDS}){_END})"
_FREE_VALUE = r"(?!-?[\d.]+(?:[eE][+-]?\d+)?(?![^\s\"',}&]))(?![a-z]{1,5}(?![^\s\"',}&]))"
"""a value that is a plain number or a short lowercase word (``chi2_token: max -2``: a metric's name in an
error line); a known secret is still scrubbed by value, whatever it looks like."""
_KEY_FIELDS = re.compile(
    rf"((?<![\w.-])[\"']?(?:(?={_PREFIX}+(?i:{_WEAK_WORDS}){_END}[\"']?\s*[:=])[^:=\s\"']+[\"']?\s*[:=]\s*[\"']?(?!{REDACTED}){_FREE_VALUE}"
    rf"|{_PREFIX}*(?i:{_STRONG_WORDS}){_END}[\"']?\s*[:=]\s*[\"']?(?!{REDACTED})))[^\s\"',}}&]+"
)
"""``"api_key": "..."``, ``password=...``: a named credential field and its value. After a name whose last word
is also an ordinary word (``chi2_token``), a plain number or a short word is not taken for a credential."""

_QUERY_CREDENTIAL = re.compile(
    r"(?i)([?&;](?:[a-z0-9]+[_.-])*(?:access_token|token|api_?key|key|secrets?|password|passwd|pwd|auth"
    r"|authorization|sig|signature|credentials?)=)(?!<redacted>)[^&#\s\"'<>]+"
)
"""a URL query parameter that carries a credential (``?token=...``, ``&access_token=``, ``&sig=`` of a signed
URL, ``X-Amz-Signature=``): in a query string even the ordinary words ``key``, ``token``, ``auth`` name one."""

_SECRETS: set[str] = set()
MIN_SECRET_LENGTH = 4
"""shorter values are too likely to occur in ordinary text to be scrubbed by value."""
_MAX_ESCAPE = 12
"""the longest form of one character in :func:`_atom` (``&#x0002f;``-like), to bound a search near the end."""


def is_secret_name(name: str) -> bool:
    """Whether an option or field called ``name`` holds a credential (``--hf-token``, ``client_secret``)."""
    return re.fullmatch(rf"-*{_NAME}", name) is not None


def register_secret(value: str | None) -> None:
    """Remember a secret's value (an API key read from the environment) so :func:`redact` scrubs it anywhere,
    also base64-encoded (standard or URL-safe, with or without padding): a server may echo a header decoded."""
    if value and len(value) >= MIN_SECRET_LENGTH and REDACTED not in value:
        _SECRETS.add(value)
        b64 = base64.b64encode(value.encode()).decode()
        for form in (b64, b64.rstrip("="), base64.urlsafe_b64encode(value.encode()).decode().rstrip("=")):
            if len(form) >= MIN_SECRET_LENGTH:
                _SECRETS.add(form)


def register_userinfo(userinfo: str) -> None:
    """A URL's ``user:password`` as secrets: the password alone (a server may echo it without the user),
    ``user:password``, each as written and percent-decoded, and the base64 a Basic header carries.
    Userinfo without a ':' is a token on its own and is registered whole."""
    if REDACTED in userinfo:  # already redacted: nothing left to learn
        return
    _user, colon, password = userinfo.partition(":")
    for value in (userinfo, unquote(userinfo), *((password, unquote(password)) if colon else ())):
        register_secret(value)  # each with its base64, the user:password one being what a Basic header carries


def split_userinfo(url: str) -> tuple[str | None, str]:
    """(userinfo or None, the URL without it) for a URL standing alone (``--url``, a config's ``url``).

    The userinfo runs from ``scheme://`` (or the start, for ``user:pass@host``) to the LAST '@' of the URL.
    RFC 3986 ends the authority at the first '/', '?' or '#', but a password typed with a raw '/' then
    leaks as a "path"; a server's URL has no reason to hold an '@' after its host, so reading to the last
    '@' can only over-redact, never under-redact. The vllm-server sampler refuses the ambiguous case.
    """
    m = _SCHEME.match(url)
    start = m.end() if m else 0
    at = url.rfind("@")
    if at < start:
        return None, url
    return url[start:at], url[:start] + url[at + 1 :]


def redact_url(url: str | None) -> str | None:
    """A URL fit for a manifest or a message: any userinfo replaced (see :func:`split_userinfo`), a
    credential-named query value too. Its userinfo is registered, so later text quoting the password
    alone, or the URL split at a space, is scrubbed as well."""
    if url is None:
        return None
    for m in _QUERY_CREDENTIAL.finditer(url):  # a server may echo the value alone
        register_secret(unquote(m.group(0)[len(m.group(1)) :]))
    userinfo, rest = split_userinfo(url)
    if userinfo is None:
        return redact(url)
    register_userinfo(userinfo)
    m = _SCHEME.match(rest)
    start = m.end() if m else 0
    return redact(rest[:start] + REDACTED + "@" + rest[start:])


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with registered and given secret values, URL credentials and auth tokens replaced."""
    out = text
    for s in _known(secrets):
        out = _secret_pattern(s).sub(REDACTED, out)
    out = _URL_USERINFO.sub(lambda m: m.group(1) + REDACTED + "@", out)
    out = _QUERY_CREDENTIAL.sub(lambda m: m.group(1) + REDACTED, out)
    out = _AUTH_SCHEMES.sub(lambda m: m.group(1).split(None, 1)[0].split("%20", 1)[0] + " " + REDACTED, out)
    return _KEY_FIELDS.sub(lambda m: m.group(1) + REDACTED, out)


def excerpt(text: str, limit: int, secrets: Iterable[str] = (), *, cut: bool = False) -> str:
    """At most ``limit`` characters of ``text`` (a server's error body) for a message, ``" ..."`` when shortened.

    Redacted before it is cut, so a secret across the cut is still recognised whole; then a trailing prefix
    of any known secret is dropped: ``cut`` says the text is already part of something longer (a body read
    only in part), where a secret may have been split before we saw it.
    """
    secrets = list(secrets)
    out = redact(text, secrets)
    if len(out) > limit:
        out, cut = out[:limit], True
    if not cut:
        return out
    known = _known(secrets)
    while True:  # one secret's dropped prefix may uncover another's
        shorter = out
        for s in known:
            shorter = _drop_prefix_at_end(shorter, s)
        if shorter == out:
            return out + " ..."
        out = shorter


def redact_command(argv: Sequence[str]) -> list[str]:
    """A command line as recorded: credential-named options' values (``--hf-token X``, ``--api-key=X``,
    ``--engine-arg client_secret=X``) replaced, each URL through :func:`redact_url`, the rest through
    :func:`redact`. Each argument is one value, so a URL with a space in its password is still one URL."""
    out: list[str] = []
    hide_next = False
    for arg in map(str, argv):
        if hide_next:
            out.append(REDACTED)
            hide_next = False
        elif is_secret_name(arg) and arg.startswith("-"):
            out.append(arg)
            hide_next = True
        else:
            out.append(_redact_arg(arg))
    return out


def _redact_arg(arg: str) -> str:
    name, eq, value = arg.partition("=")
    if eq and is_secret_name(name):
        return f"{name}={REDACTED}"
    if eq and name.startswith("-"):  # --option=value
        return f"{name}={_redact_arg(value)}"
    m = _SCHEME_IN_ARG.search(arg)
    if m:
        return redact(arg[: m.start()]) + str(redact_url(arg[m.start() :]))
    return redact(arg)


def redact_obj(value: Any) -> Any:
    """Every string inside a JSON-like value passed through :func:`redact` (manifest command and config);
    a ``url`` or ``*_url`` field through :func:`redact_url`, a credential-named field's text replaced."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {k: _redact_field(str(k), v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact_obj(v) for v in value]
    return value


def _redact_field(key: str, value: Any) -> Any:
    if isinstance(value, str) and value:
        if re.fullmatch(_NAME_IN_TEXT, key):
            return REDACTED
        if key.lower() == "url" or key.lower().endswith("_url"):
            return redact_url(value)
    return redact_obj(value)


# ---------------------------------------------------------------- known values


def _known(extra: Iterable[str]) -> list[str]:
    """Registered and given secrets, longest first (a password inside ``user:password`` goes second)."""
    given = {v for v in extra if v and len(v) >= MIN_SECRET_LENGTH and REDACTED not in v}
    return sorted({*_SECRETS, *given}, key=lambda s: (-len(s), s))


def _hex(n: int, width: int) -> str:
    return "".join(f"[{c}{c.upper()}]" if c.isalpha() else c for c in f"{n:0{width}x}")


@functools.lru_cache(maxsize=4096)
def _atom(ch: str) -> str:
    """One character of a secret in any form a server may echo it in."""
    code = ord(ch)
    forms = [
        re.escape(ch),
        "".join("%" + _hex(b, 2) for b in ch.encode()),  # as is; percent-encoded
        rf"&#0*{code};",
        rf"&#[xX]0*{_hex(code, 1)};",
    ]  # HTML entities
    if code < 0x10000:
        forms.append(r"\\u" + _hex(code, 4))  # JSON \uXXXX (Go escapes <, >, &)
    else:  # JSON escapes a character beyond the BMP as a surrogate pair
        hi, lo = 0xD800 + ((code - 0x10000) >> 10), 0xDC00 + ((code - 0x10000) & 0x3FF)
        forms.append(r"\\u" + _hex(hi, 4) + r"\\u" + _hex(lo, 4))
    if code in html.entities.codepoint2name:  # &auml;
        forms.append(f"&{html.entities.codepoint2name[code]};")
    forms += {
        "/": [r"\\/"],
        '"': [r"\\\"", "&quot;"],
        "\\": [r"\\\\"],
        " ": [r"\+"],
        "&": ["&amp;"],
        "<": ["&lt;"],
        ">": ["&gt;"],
        "'": ["&apos;"],
    }.get(ch, [])
    return "(?:" + "|".join(forms) + ")"


@functools.lru_cache(maxsize=256)
def _secret_pattern(secret: str) -> re.Pattern:
    """Case-insensitive: a server may echo a key upper- or lower-cased ("INVALID KEY SK-...")."""
    return re.compile("".join(_atom(c) for c in secret), re.IGNORECASE)


_PARTIAL_ESCAPE = r"(?:%[0-9A-Fa-f]?|\\(?:u[0-9A-Fa-f]{0,3})?|&#?[xX]?[0-9A-Fa-f]*|&[a-z]*)?"
"""the start of an escaped character, as a cut may leave it."""


def _drop_prefix_at_end(text: str, secret: str) -> str:
    """``text`` without a trailing prefix of ``secret`` (in any of its encodings), longest first."""
    start = max(0, len(text) - _MAX_ESCAPE * (len(secret) + 1))
    tail = text[start:]
    for k in range(len(secret) - 1, 0, -1):
        m = re.search("".join(_atom(c) for c in secret[:k]) + _PARTIAL_ESCAPE + r"\Z", tail)
        if m:
            return text[: start + m.start()]
    return text
