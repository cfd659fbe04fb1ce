"""The HTTP plumbing of the server samplers: one JSON request at a time, credentials kept out of every text.

Only the stdlib is used. The API key is read from the environment variable
``api_key_env`` at each request and is never stored, logged or described;
credentials in the URL (``http://user:pass@host``) are sent as a Basic header
and never stay in the URL printed or recorded. A redirect is followed only
for a request without a body, to the same scheme, host and port. Every way a
request can fail becomes one line: a connection problem is a
:class:`SamplerConnectionError`, an HTTP error or an answer that is not JSON a
:class:`SamplerError`, with whatever the server said redacted.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from mismatchscope.errors import SamplerConnectionError, SamplerError, UsageError
from mismatchscope.redact import excerpt, redact, redact_url, register_secret, register_userinfo, split_userinfo

ERROR_BODY_BYTES = 64 * 1024
"""how much of an error answer is read: enough to redact around what is shown, not a 50 MB page."""
ERROR_DETAIL_CHARS = 500
"""how much of an error answer is shown."""


class JsonClient:
    """JSON requests to one server (``url``: as given, credentials and a trailing ``/v1`` allowed)."""

    def __init__(self, url: str, api_key_env: str, timeout: float):
        bare, self._basic_auth = _split_credentials(url)  # the URL as given, for its error message
        self.base = base_url(bare)
        self.api_key_env = api_key_env
        self.timeout = timeout
        self._opener = urllib.request.build_opener(_SameOriginRedirects)

    def call(self, method: str, path: str, body: dict | None = None, *, missing_ok: bool = False) -> Any:
        """One JSON request. Connection problems -> SamplerConnectionError; HTTP errors ->
        SamplerError (None for a 404 when ``missing_ok``)."""
        headers, secrets = self._headers()
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.base + path, data=data, headers=headers, method=method)
        try:
            with self._opener.open(req, timeout=self.timeout) as resp:
                payload = resp.read()
        except urllib.error.HTTPError as exc:
            if missing_ok and exc.code == 404:
                return None
            raise self._http_error(method, path, exc, secrets) from None
        except http.client.HTTPException as exc:
            raise SamplerError(
                f"{method} {self.base}{path}: the server's answer was cut short or garbled ({type(exc).__name__})"
            ) from None
        except TimeoutError:  # connected, then no answer in time (a connect timeout comes inside a URLError)
            raise SamplerError(
                f"{method} {self.base}{path}: the vLLM server did not answer within {self.timeout:g} s",
                hint="raise --engine-arg timeout=SECONDS (default 600), or check the server",
            ) from None
        except (urllib.error.URLError, ConnectionError, OSError) as exc:
            reason = redact(str(getattr(exc, "reason", exc)), secrets)
            raise SamplerConnectionError(
                f"cannot reach the vLLM server at {self.base}: {reason}",
                hint="start it (python -m vllm.entrypoints.openai.api_server --model DIR) or fix --url",
            ) from None
        return _json(f"{method} {self.base}{path}", payload)

    def _headers(self) -> tuple[dict[str, str], list[str]]:
        """The request's headers (the key from the environment, else the URL's credentials) and the secrets
        any text the server sends back is scrubbed of."""
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        key = os.environ.get(self.api_key_env)
        secrets = [key] if key else []
        if key:
            register_secret(key)
            if not all(" " < c < "\x7f" for c in key):  # an HTTP header carries printable ASCII only
                raise UsageError(
                    f"the API key in ${self.api_key_env} holds a space, a line break or a character "
                    "outside printable ASCII, which an HTTP header cannot carry",
                    hint="check how the variable was set: a key read from a file often keeps its newline",
                )
            headers["Authorization"] = f"Bearer {key}"
        elif self._basic_auth:
            headers["Authorization"] = f"Basic {self._basic_auth}"
        if self._basic_auth:
            secrets.append(self._basic_auth)
        return headers, secrets

    def _http_error(self, method: str, path: str, exc: urllib.error.HTTPError, secrets: list[str]) -> SamplerError:
        """An HTTP error as one line: a redirect not followed, or the status and what the server said."""
        if 300 <= exc.code < 400:
            return _not_followed(method, self.base + path, exc, secrets)
        try:
            raw = exc.read(ERROR_BODY_BYTES + 1)
        except (OSError, http.client.HTTPException):
            raw = b""
        # A server may echo the request (headers included): never pass its text on unscrubbed.
        # Redacted before it is shortened, so a key across the cut is still seen whole.
        text = raw[:ERROR_BODY_BYTES].decode(errors="replace")
        detail = " ".join(excerpt(text, ERROR_DETAIL_CHARS, secrets, cut=len(raw) > ERROR_BODY_BYTES).split())
        hint = f"set the key in ${self.api_key_env}" if exc.code in (401, 403) else None
        return SamplerError(f"{method} {self.base}{path} failed with HTTP {exc.code}: {detail}", hint=hint)


def _json(request: str, payload: bytes) -> Any:
    try:
        return json.loads(payload)
    except (ValueError, RecursionError):
        size = f"{len(payload)} bytes" if payload else "an empty body"
        raise SamplerError(f"{request} answered with something that is not JSON ({size})") from None


def _split_credentials(url: str) -> tuple[str, str | None]:
    """``http://user:pass@host`` -> (``http://host``, base64 of ``user:pass`` for a Basic header).

    The credentials never stay in the URL we print or record; they are sent as a header, and
    registered (the password alone too) so a server that echoes them is scrubbed. The userinfo
    runs to the URL's last '@' (:func:`~mismatchscope.redact.split_userinfo`); a '/', '?' or '#'
    before that '@' is refused, since a standard parser would send the request to another host
    and the password along as a path.
    """
    userinfo, bare = split_userinfo(url)
    if userinfo is None:
        return url, None
    register_userinfo(userinfo)
    if any(c in userinfo for c in "/?#"):
        raise UsageError(
            f"--url {redact_url(url)!r} is ambiguous: an '@' comes after a '/', '?' or '#'",
            hint="percent-encode '/', '?', '#' and '@' inside a user name or password as %2F, %3F, %23, %40",
        )
    creds = base64.b64encode(urllib.parse.unquote(userinfo).encode()).decode() if userinfo else None
    return bare, creds


class _SameOriginRedirects(urllib.request.HTTPRedirectHandler):
    """Follows a redirect only for a request without a body, to the same scheme, host and port.

    urllib would resend every header, ``Authorization`` included, to whatever host a server names;
    a redirected POST would come back as a GET without its body. Anything else is not followed
    and :func:`_not_followed` says so.
    """

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        if req.data is not None or _origin(newurl) != _origin(req.full_url):
            return None  # urllib then raises the 3xx as an HTTPError
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urllib.parse.urlsplit(url)
    try:
        port = parts.port or {"http": 80, "https": 443}.get(parts.scheme.lower())
    except ValueError:
        port = -1
    return parts.scheme.lower(), (parts.hostname or "").lower(), port


def _not_followed(method: str, url: str, exc: urllib.error.HTTPError, secrets: list[str]) -> SamplerError:
    location = (exc.headers or {}).get("Location") or ""
    target = excerpt(redact_url(urllib.parse.urljoin(url, location)) or "", 200, secrets) if location else "nowhere"
    return SamplerError(
        f"{method} {url} was redirected (HTTP {exc.code}) to {target}, which is not followed: "
        "the credentials go only to --url",
        hint="pass the address the server redirects to as --url",
    )


def base_url(url: str) -> str:
    """The server's root: ``/v1`` and trailing slashes dropped (requests name their own paths)."""
    base = url.rstrip("/")
    return base[: -len("/v1")] if base.endswith("/v1") else base
