"""One place that removes secrets from text before it is printed or recorded.

Two kinds of secret reach mismatchscope: credentials inside a URL
(``http://user:pass@host``) and the API key of a sampler server. Both must
stay out of the run manifest (its ``command``, ``config`` and
``fingerprint``), out of stderr, and out of any server text we pass on (a
server that echoes the request's ``Authorization`` header would otherwise
print the key). Every path that records or prints such text calls
:func:`redact`; nothing else decides what a secret looks like.
"""

from __future__ import annotations

import re
from typing import Any, Iterable

REDACTED = "<redacted>"

_URL_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^\s/@]*(?:@[^\s/@]*)*@")
"""scheme://USERINFO@ -- the userinfo runs to the last '@' before the path."""
_AUTH_SCHEMES = re.compile(r"(\b(?i:bearer)(?:\s+|%20)[A-Za-z0-9._~+/=\-:%]+|\bBasic(?:\s+|%20)[A-Za-z0-9+/=]{8,})")
"""an HTTP auth scheme and its credentials, as a server echoing the request's headers would print them."""
_KEY_FIELDS = re.compile(r"(?i)((?<![a-z0-9_])\"?(?:api[_-]?key|authorization|x-api-key|password|access[_-]?token)\"?\s*[:=]\s*\"?)"
                         r"(?!<redacted>)[^\s\",}']+")
"""``"api_key": "..."``, ``password=...``: a named credential field and its value."""

_SECRETS: set[str] = set()
MIN_SECRET_LENGTH = 4
"""shorter values are too likely to occur in ordinary text to be scrubbed by value."""


def register_secret(value: str | None) -> None:
    """Remember a secret's value (an API key read from the environment) so :func:`redact` scrubs it anywhere."""
    if value and len(value) >= MIN_SECRET_LENGTH:
        from urllib.parse import quote

        _SECRETS.update({value, quote(value, safe="")})  # as sent, and as a server may echo it URL-encoded


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with URL credentials, registered and given secret values, and auth tokens replaced."""
    out = _URL_USERINFO.sub(lambda m: m.group(1) + REDACTED + "@", text)
    for s in sorted({*_SECRETS, *(v for v in secrets if v and len(v) >= MIN_SECRET_LENGTH)}, key=len, reverse=True):
        out = out.replace(s, REDACTED)
    out = _AUTH_SCHEMES.sub(lambda m: m.group(1).split(None, 1)[0].split("%20", 1)[0] + " " + REDACTED, out)
    return _KEY_FIELDS.sub(lambda m: m.group(1) + REDACTED, out)


def redact_url(url: str | None) -> str | None:
    """A URL fit for a manifest: any ``user:password@`` replaced."""
    return None if url is None else _URL_USERINFO.sub(lambda m: m.group(1) + REDACTED + "@", url)


def redact_obj(value: Any) -> Any:
    """Every string inside a JSON-like value passed through :func:`redact` (manifest command and config)."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {k: redact_obj(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact_obj(v) for v in value]
    return value
