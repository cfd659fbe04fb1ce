"""Secrets never reach stderr or a run's files, whatever a user types or a server answers.

Each case comes from a hostile-input sweep that leaked before: a key across
the cut of a server's error text, a key echoed JSON-escaped (``\\/``), a URL's
password echoed alone, passwords and user names holding '/', '@' or a space,
credential-named ``--engine-arg`` values in the recorded command, and a
redirect that carried the ``Authorization`` header to another server.

The servers here are real HTTP servers on 127.0.0.1 answering crafted
bodies; no vLLM engine starts in this module.
"""

from __future__ import annotations

import base64
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from mismatchscope import redact as redact_module
from mismatchscope.errors import SamplerError, UsageError
from mismatchscope.redact import (
    excerpt,
    is_secret_name,
    redact,
    redact_command,
    redact_obj,
    redact_url,
    register_secret,
    split_userinfo,
)
from tests.helpers import REPO
from tests.helpers import cli_no_engine as cli

CHECKPOINT = REPO / "sample_data" / "tiny-qwen3"
needs_checkpoint = pytest.mark.skipif(not (CHECKPOINT / "config.json").is_file(), reason="needs the bundled tiny-qwen3")
KEY = "sk-sweep-SECRETKEY-0123456789"  # 29 characters


@pytest.fixture(autouse=True)
def fresh_registry(monkeypatch):
    """Each test starts with no registered secret, so none passes thanks to another's."""
    monkeypatch.setattr(redact_module, "_SECRETS", set())


# ---- redact.py on its own ------------------------------------------------------------


def test_a_secret_across_the_cut_is_redacted_before_it_is_cut():
    # 480 x + " got:" end at character 485; the 29-character key would run to 514, so a cut
    # at 500 first would keep its first 15 characters "sk-sweep-SECRET". Redacted first, the
    # line is 480 + 5 + len("<redacted>") + len(" end") = 499 characters: nothing is cut.
    body = "x" * 480 + " got:" + KEY + " end"
    assert excerpt(body, 500, [KEY]) == "x" * 480 + " got:<redacted> end"
    # cut at 490 instead: the first 490 characters of the redacted text, then " ..."
    assert excerpt(body, 490, [KEY]) == "x" * 480 + " got:<reda ..."


def test_a_partial_secret_at_the_end_of_a_cut_text_is_dropped():
    register_secret(KEY)
    # a body read only in part ends inside the key, as is or escaped: the prefix goes, " ..." says so
    assert excerpt("seen: sk-sweep-SEC", 100, cut=True) == "seen:  ..."
    assert excerpt("seen: sk-sweep%2", 100, [], cut=True) == "seen:  ..."
    slashed = "sk-live/AbCdEf0123/456789xyz"
    assert excerpt('{"got": "sk-live\\/AbC', 100, [slashed], cut=True) == '{"got": " ...'
    assert excerpt('{"got": "sk-live\\', 100, [slashed], cut=True) == '{"got": " ...'
    # a text that was not cut keeps its end even when it looks like a key's start
    assert excerpt("ask", 100, ["skater-01"]) == "ask"


def test_a_secret_is_found_in_the_encodings_a_server_echoes_it_in():
    secret = "sk-live/AbCdEf0123/456789xyz"
    echoes = {
        "raw": secret,
        "JSON with escaped slashes (PHP, Go)": "sk-live\\/AbCdEf0123\\/456789xyz",
        "JSON \\u escapes": "sk-live\\u002fAbCdEf0123\\u002F456789xyz",
        "percent-encoded": "sk-live%2FAbCdEf0123%2f456789xyz",
        "HTML entities": "sk-live&#x2F;AbCdEf0123&#47;456789xyz",
    }
    for how, echoed in echoes.items():
        assert redact(f'{{"received": "{echoed}"}}', [secret]) == '{"received": "<redacted>"}', how
    # a space may come back as + (form encoding) or %20
    assert redact("pw=hunter2+SECRETPW or hunter2%20SECRETPW", ["hunter2 SECRETPW"]) == "pw=<redacted> or <redacted>"


def test_a_url_password_is_scrubbed_alone_once_the_url_is_redacted():
    assert redact_url("http://alice:hunter2-SECRETPW@127.0.0.1:8000/v1") == "http://<redacted>@127.0.0.1:8000/v1"
    # a server that decodes the Basic header echoes the password without the user
    assert redact("rejected alice with hunter2-SECRETPW") == "rejected alice with <redacted>"
    # percent-encoded in the URL: found decoded and encoded
    redact_url("http://bob:pass%40SECRET2@h/v1")
    assert redact("got pass@SECRET2 (pass%40SECRET2)") == "got <redacted> (<redacted>)"
    # and the base64 a Basic header carries: base64("bob:pass@SECRET2")
    basic = base64.b64encode(b"bob:pass@SECRET2").decode()
    assert redact(f"header {basic}") == "header <redacted>"


@pytest.mark.parametrize(
    "url, userinfo, bare",
    [
        ("http://alice:hunter2/SECRETPW@127.0.0.1:8000/v1", "alice:hunter2/SECRETPW", "http://127.0.0.1:8000/v1"),
        ("http://alice/x:SECRETPW@127.0.0.1:8000/v1", "alice/x:SECRETPW", "http://127.0.0.1:8000/v1"),
        ("http://alice:hunter2 SECRETPW@127.0.0.1:8000/v1", "alice:hunter2 SECRETPW", "http://127.0.0.1:8000/v1"),
        ("http://u:p@w@h:1/v1", "u:p@w", "http://h:1/v1"),  # the userinfo runs to the LAST '@'
        ("alice:SECRETPW@h:8000", "alice:SECRETPW", "h:8000"),  # no scheme
        ("http://127.0.0.1:8000/v1", None, "http://127.0.0.1:8000/v1"),
    ],
)
def test_the_userinfo_of_a_url_runs_to_its_last_at(url, userinfo, bare):
    assert split_userinfo(url) == (userinfo, bare)
    shown = redact_url(url)
    assert "SECRETPW" not in shown
    if userinfo is not None:
        scheme = "http://" if url.startswith("http://") else ""
        assert shown == scheme + "<redacted>@" + bare[len(scheme) :]


def test_free_text_urls_with_a_slash_in_the_password():
    assert redact("at http://alice:hunter2/SECRETPW@h:1/v1 now") == "at http://<redacted>@h:1/v1 now"
    assert redact("at http://alice/x:SECRETPW@h:1/v1 now") == "at http://<redacted>@h:1/v1 now"
    # a path and a query holding an '@' are not credentials
    assert redact("see http://h/p?a=b@c") == "see http://h/p?a=b@c"


@pytest.mark.parametrize(
    "name",
    [
        "hf_token",
        "client_secret",
        "api_key",
        "x-api-key",
        "apiKey",
        "password",
        "passwd",
        "auth",
        "Authorization",
        "bearer",
        "credential",
        "access_token",
        "--hf-token",
        "token",
    ],
)
def test_credential_names(name):
    assert is_secret_name(name)


@pytest.mark.parametrize(
    "name",
    [
        "max_tokens",
        "top_k",
        "num_tokens",
        "min_tokens",
        "max_num_batched_tokens",
        "tokenizer",
        "allowed_token_ids",
        "api_key_env",
        "token_budget",
        "KeyError",
        "timeout",
        "model",
    ],
)
def test_harmless_names(name):
    assert not is_secret_name(name)


def test_the_recorded_command_hides_credentials_and_keeps_the_rest():
    argv = [
        "probe",
        "ckpt",
        "--url",
        "http://alice:hunter2 SECRETPW@127.0.0.1:8000/v1",
        "--engine-arg",
        "hf_token=hf_SECRETTOKxyz",
        "--engine-arg",
        "client_secret=cs_SECRETCS123",
        "--engine-arg",
        "max_tokens=16",
        "--engine-arg",
        "top_k=5",
        "--engine-arg",
        "num_tokens=3",
        "--engine-arg=token=zz_SECRET",
        "--hf-token",
        "hf_SECRET2",
        "--api-key-env",
        "MY_API_KEY",
        "--url=http://alice/x:SECRETPW@h:1/v1",
    ]
    assert redact_command(argv) == [
        "probe",
        "ckpt",
        "--url",
        "http://<redacted>@127.0.0.1:8000/v1",
        "--engine-arg",
        "hf_token=<redacted>",
        "--engine-arg",
        "client_secret=<redacted>",
        "--engine-arg",
        "max_tokens=16",
        "--engine-arg",
        "top_k=5",
        "--engine-arg",
        "num_tokens=3",
        "--engine-arg=token=<redacted>",
        "--hf-token",
        "<redacted>",
        "--api-key-env",
        "MY_API_KEY",
        "--url=http://<redacted>@h:1/v1",
    ]


def test_free_text_fields_and_recorded_objects():
    text = "HF_TOKEN=hf_abc x-api-key: zzz1 https://h/x?api_key=abc1&b=1 max_tokens=16 key=lambda token: 17"
    assert redact(text) == (
        "HF_TOKEN=<redacted> x-api-key: <redacted> https://h/x?api_key=<redacted>&b=1 "
        "max_tokens=16 key=lambda token: 17"
    )
    # a metric whose name ends in a credential word, in an error line: a number or a short word is no credential;
    # after a strong credential word (password, secret) every value is hidden
    assert (
        redact("chi2_token: max -2 is below -1; chi2_token: 0.0012")
        == "chi2_token: max -2 is below -1; chi2_token: 0.0012"
    )
    assert (
        redact("password=abc client_secret: x hf_token: hf_q1")
        == "password=<redacted> client_secret: <redacted> hf_token: <redacted>"
    )
    recorded = {
        "url": "http://a:hunter2 SECRETPW@h/v1",
        "sampler": {"callback_url": "https://u:p w@x"},
        "hf_token": "hf_abc",
        "max_tokens": 16,
    }
    assert redact_obj(recorded) == {
        "url": "http://<redacted>@h/v1",
        "sampler": {"callback_url": "https://<redacted>@x"},
        "hf_token": "<redacted>",
        "max_tokens": 16,
    }


# ---- the vllm-server sampler against a crafted server ----------------------------------


MODEL_CARD = {"object": "list", "data": [{"id": "tiny-qwen3", "root": str(CHECKPOINT), "max_model_len": 64}]}
MODE_ANSWER = {
    "choices": [
        {
            "index": 0,
            "logprobs": {"tokens": ["token_id:5"], "token_logprobs": [0.0], "top_logprobs": [{"token_id:5": 0.0}]},
        }
    ]
}
CHOICE = {
    "token_ids": [5, 6],
    "finish_reason": "length",
    "logprobs": {
        "tokens": ["token_id:5", "token_id:6"],
        "token_logprobs": [-0.5, -1.0],
        "top_logprobs": [{"token_id:5": -0.5}, {"token_id:6": -1.0}],
    },
}


class _Crafted(BaseHTTPRequestHandler):
    """Answers ``routes[(METHOD, path)] = (status, headers, body)`` (body may be a callable of the handler)."""

    routes: dict = {}
    seen: list = []

    def log_message(self, *args):
        pass

    def _route(self, method: str):
        self.seen.append((method, self.path, dict(self.headers)))
        if method == "POST":
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if self.path == "/v1/completions" and body.get("top_k") == 1 and body.get("max_tokens") == 4:
                return self._answer(200, {}, json.dumps(MODE_ANSWER).encode())
            if self.path == "/v1/completions" and ("POST", self.path) not in self.routes:  # one choice per sample
                count = len(body["prompt"]) * body["n"]
                choices = [{**CHOICE, "index": i} for i in range(count)]
                return self._answer(200, {}, json.dumps({"choices": choices}).encode())
        default = (200, {}, json.dumps(MODEL_CARD).encode()) if self.path == "/v1/models" else (404, {}, b"{}")
        status, headers, payload = self.routes.get((method, self.path), default)
        return self._answer(status, headers, payload(self) if callable(payload) else payload)

    def _answer(self, status: int, headers: dict, body: bytes):
        self.send_response(status)
        for k, v in {"Content-Type": "application/json", **headers}.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        self._route("GET")

    def do_POST(self):
        self._route("POST")


@pytest.fixture
def servers():
    """A factory of crafted servers on 127.0.0.1: ``start()`` -> (url, handler class)."""
    started = []

    def start():
        handler = type("Handler", (_Crafted,), {"routes": {}, "seen": []})
        httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        httpd.daemon_threads = False  # server_close() waits for them: no stray write during a later test
        thread = threading.Thread(target=httpd.serve_forever, daemon=True)
        thread.start()
        started.append((httpd, thread))
        return f"http://127.0.0.1:{httpd.server_address[1]}", handler

    yield start
    for httpd, thread in started:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


def _sampler(url: str):
    from mismatchscope.probe.checkpoint import inspect_checkpoint
    from mismatchscope.probe.samplers import make_sampler
    from mismatchscope.probe.types import SamplerConfig

    cfg = SamplerConfig(kind="vllm-server", url=url, dtype="float32", engine_args={"timeout": 10})
    return make_sampler(cfg, inspect_checkpoint(CHECKPOINT))


def _sample(sampler):
    from mismatchscope.probe.types import SamplingConfig

    return sampler.sample([[5, 6, 7]], SamplingConfig(n=1, max_tokens=2, top_k_logprobs=1, seed=0))


HINT = " (set the key in $MISMATCHSCOPE_API_KEY)"


@needs_checkpoint
def test_a_key_echoed_across_the_500th_character(servers, monkeypatch):
    monkeypatch.setenv("MISMATCHSCOPE_API_KEY", KEY)
    url, handler = servers()
    handler.routes[("GET", "/v1/models")] = (401, {}, ("x" * 480 + " got:" + KEY + " end").encode())
    with pytest.raises(SamplerError) as err:
        _sampler(url + "/v1")
    # see test_a_secret_across_the_cut_is_redacted_before_it_is_cut: 499 characters, nothing cut
    assert str(err.value) == f"GET {url}/v1/models failed with HTTP 401: {'x' * 480} got:<redacted> end{HINT}"


@needs_checkpoint
def test_a_key_echoed_json_escaped(servers, monkeypatch):
    key = "sk-live/AbCdEf0123/456789xyz"
    monkeypatch.setenv("MISMATCHSCOPE_API_KEY", key)
    url, handler = servers()
    body = '{"error": "invalid key", "received": "' + key.replace("/", "\\/") + '"}'
    handler.routes[("GET", "/v1/models")] = (401, {}, body.encode())
    with pytest.raises(SamplerError) as err:
        _sampler(url)
    assert str(err.value) == (
        f'GET {url}/v1/models failed with HTTP 401: {{"error": "invalid key", "received": "<redacted>"}}{HINT}'
    )


@needs_checkpoint
@pytest.mark.parametrize(
    "password, echoed", [("hunter2-SECRETPW", "hunter2-SECRETPW"), ("hunter%40SECRETPW", "hunter@SECRETPW")]
)
def test_a_url_password_echoed_alone(servers, monkeypatch, password, echoed):
    monkeypatch.delenv("MISMATCHSCOPE_API_KEY", raising=False)
    url, handler = servers()

    def decode_basic(h):  # what a server that checks Basic credentials may answer
        user, _, pw = base64.b64decode(h.headers["Authorization"].split()[1]).decode().partition(":")
        return f"bad credentials for {user}, password {pw}".encode()

    handler.routes[("GET", "/v1/models")] = (401, {}, decode_basic)
    with pytest.raises(SamplerError) as err:
        _sampler(url.replace("http://", f"http://alice:{password}@"))
    assert handler.seen[-1][2]["Authorization"] == "Basic " + base64.b64encode(f"alice:{echoed}".encode()).decode()
    assert (
        str(err.value)
        == f"GET {url}/v1/models failed with HTTP 401: bad credentials for alice, password <redacted>{HINT}"
    )


@needs_checkpoint
@pytest.mark.parametrize(
    "url",
    [
        "http://alice/x:SECRETPW@127.0.0.1:9/v1",
        "http://alice:hunter2/SECRETPW@127.0.0.1:9/v1",
        "http://alice:hunter2?SECRETPW@127.0.0.1:9/v1",
    ],
)
def test_a_url_whose_credentials_hold_a_slash_is_refused_redacted(url):
    with pytest.raises(UsageError) as err:
        _sampler(url)
    assert str(err.value) == (
        "--url 'http://<redacted>@127.0.0.1:9/v1' is ambiguous: an '@' comes after a '/', '?' or '#' "
        "(percent-encode '/', '?', '#' and '@' inside a user name or password as %2F, %3F, %23, %40)"
    )


@needs_checkpoint
def test_a_redirect_to_another_server_is_not_followed(servers, monkeypatch):
    monkeypatch.setenv("MISMATCHSCOPE_API_KEY", KEY)
    url, handler = servers()
    elsewhere, other = servers()
    handler.routes[("GET", "/v1/models")] = (302, {"Location": elsewhere + "/v1/models"}, b"")
    with pytest.raises(SamplerError) as err:
        _sampler(url)
    assert other.seen == []  # not one request, so not the key either
    assert str(err.value) == (
        f"GET {url}/v1/models was redirected (HTTP 302) to {elsewhere}/v1/models, which is not "
        "followed: the credentials go only to --url (pass the address the server redirects to as --url)"
    )


@needs_checkpoint
def test_a_redirect_on_the_same_server_is_followed_but_not_for_a_post(servers, monkeypatch):
    monkeypatch.setenv("MISMATCHSCOPE_API_KEY", KEY)
    url, handler = servers()
    handler.routes[("GET", "/v1/models")] = (302, {"Location": "/v2/models"}, b"")
    handler.routes[("GET", "/v2/models")] = (200, {}, json.dumps(MODEL_CARD).encode())
    sampler = _sampler(url)
    assert sampler.model == "tiny-qwen3"
    assert [(m, p, h.get("Authorization")) for m, p, h in handler.seen[:2]] == [
        ("GET", "/v1/models", f"Bearer {KEY}"),
        ("GET", "/v2/models", f"Bearer {KEY}"),
    ]
    # a POST redirected would lose its body (urllib resends it as a GET): refused too
    handler.routes[("POST", "/v1/completions")] = (307, {"Location": "/v2/completions"}, b"")
    with pytest.raises(SamplerError) as err:
        _sample(sampler)
    assert str(err.value).startswith(f"POST {url}/v1/completions was redirected (HTTP 307) to {url}/v2/completions, ")
    assert not any(p == "/v2/completions" for _, p, _ in handler.seen)


# ---- the probe command end to end ------------------------------------------------------


def _error_line(r) -> str:
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr
    return r.stderr.strip().splitlines()[-1]


def _everything(r, out) -> str:
    """stdout, stderr and every file of the run, Parquet footers included."""
    text = r.stdout + r.stderr
    if out.exists():
        text += "".join(p.read_bytes().decode("latin-1") for p in out.rglob("*") if p.is_file())
    return text


@needs_checkpoint
def test_a_run_with_a_space_in_the_password_and_credential_engine_args_records_none(servers, tmp_path):
    pytest.importorskip("torch")
    import pyarrow.parquet as pq

    url, handler = servers()
    secret_url = url.replace("http://", "http://alice:hunter2 SECRETPW@") + "/v1"
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "1+1=", "answer": "2"}\n')
    out = tmp_path / "run"
    r = cli(
        "probe",
        str(CHECKPOINT),
        "--out",
        str(out),
        "--sampler",
        "vllm-server",
        "--url",
        secret_url,
        "--prompts",
        str(prompts),
        "-n",
        "1",
        "--max-tokens",
        "2",
        "--top-k-logprobs",
        "1",
        "--engine-arg",
        "hf_token=hf_SECRETTOKxyz",
        "--engine-arg",
        "client_secret=cs_SECRETCS123",
        "--engine-arg",
        "timeout=30",
    )
    assert r.returncode == 0, r.stderr
    assert handler.seen[-1][2]["Authorization"] == "Basic " + base64.b64encode(b"alice:hunter2 SECRETPW").decode()
    everything = _everything(r, out)
    for secret in ("SECRETPW", "hf_SECRETTOKxyz", "cs_SECRETCS123"):
        assert secret not in everything, secret
    manifest = json.loads((out / "manifest.json").read_text())
    shown = url.replace("http://", "http://<redacted>@") + "/v1"
    assert manifest["config"]["sampler"]["url"] == manifest["fingerprint"]["sampler"]["url"] == shown
    assert manifest["command"][manifest["command"].index("--url") + 1] == shown
    assert {"hf_token=<redacted>", "client_secret=<redacted>", "timeout=30"} <= set(manifest["command"])
    assert manifest["config"]["sampler"]["engine_args"] == {
        "hf_token": "<redacted>",
        "client_secret": "<redacted>",
        "timeout": 30,
    }
    (shard,) = (out / "tokens").glob("*.parquet")
    meta = json.loads(pq.read_schema(shard).metadata[b"mismatchscope"])
    assert meta["sampler"]["url"] == shown


@needs_checkpoint
def test_a_slash_in_the_user_name_is_refused_and_recorded_redacted(servers, tmp_path):
    pytest.importorskip("torch")
    url, handler = servers()
    secret_url = url.replace("http://", "http://alice/x:SECRETPW@") + "/v1"
    out = tmp_path / "run"
    r = cli(
        "probe",
        str(CHECKPOINT),
        "--out",
        str(out),
        "--sampler",
        "vllm-server",
        "--url",
        secret_url,
        "-n",
        "1",
        "--max-tokens",
        "2",
    )
    shown = url.replace("http://", "http://<redacted>@") + "/v1"
    assert _error_line(r).startswith(f"error: --url '{shown}' is ambiguous")
    assert "SECRETPW" not in _everything(r, out)
    assert handler.seen == []  # refused before any request


@needs_checkpoint
def test_a_slash_in_the_password_never_reaches_stderr(tmp_path):
    # urlsplit reads "hunter2" as the port: whatever the message says of it, the URL in it is redacted
    r = cli(
        "probe",
        str(CHECKPOINT),
        "--out",
        str(tmp_path / "run"),
        "--sampler",
        "vllm-server",
        "--url",
        "http://alice:hunter2/SECRETPW@127.0.0.1:9/v1",
    )
    assert _error_line(r).startswith("error: --url 'http://<redacted>@127.0.0.1:9/v1' ")
    assert "SECRETPW" not in r.stderr + r.stdout


# ---- forms found by a second sweep ---------------------------------------------------------


def test_more_forms_a_server_echoes_a_secret_in():
    register_secret(KEY)
    b64 = base64.b64encode(KEY.encode()).decode()
    # the key base64-encoded (a decoded-then-re-encoded header), upper-cased, lower-cased
    assert redact(f"token {b64} rejected") == "token <redacted> rejected"
    assert redact(f"token {b64.rstrip('=')}!") == "token <redacted>!"
    assert redact(f"INVALID KEY {KEY.upper()}") == "INVALID KEY <redacted>"
    assert redact(f"key={KEY.lower()}") == "key=<redacted>"
    # a password beyond the BMP, JSON-escaped as a surrogate pair; one with umlauts as named HTML entities
    redact_module.register_userinfo("alice:hunter\U0001f511SECRETPW")
    assert redact(json.dumps({"p": "xhunter\U0001f511SECRETPW"})) == '{"p": "x<redacted>"}'
    redact_module.register_userinfo("bob:p\u00e4ssw\u00f6rd-SECRETPW")
    assert redact("<p>wrong password p&auml;ssw&ouml;rd-SECRETPW</p>") == "<p>wrong password <redacted></p>"


def test_engine_options_recorded_with_a_url_in_any_value():
    from mismatchscope.probe.samplers.base import manifest_safe

    recorded = manifest_safe(
        {
            "callback_url": "http://bob:CBSECRETPW@h.example/x",
            "note": "see http://carol:NOTESECRETPW@h.example/",
            "max_tokens": 16,
        }
    )
    assert recorded == {
        "callback_url": "http://<redacted>@h.example/x",
        "note": "see http://<redacted>@h.example/",
        "max_tokens": 16,
    }


@needs_checkpoint
@pytest.mark.parametrize("key", ["sk-NLSECRET-0123456789\n", "sk-\u043a\u043b\u044e\u0447-NLSECRET-0123"])
def test_an_api_key_a_header_cannot_carry_is_one_line(tmp_path, key):
    # refused before any request is sent (port 9 would refuse the connection anyway)
    r = cli(
        "probe",
        str(CHECKPOINT),
        "--out",
        str(tmp_path / "run"),
        "--sampler",
        "vllm-server",
        "--url",
        "http://127.0.0.1:9/v1",
        env={"MISMATCHSCOPE_API_KEY": key},
    )
    assert _error_line(r) == (
        "error: the API key in $MISMATCHSCOPE_API_KEY holds a space, a line break or a character "
        "outside printable ASCII, which an HTTP header cannot carry (check how the variable was "
        "set: a key read from a file often keeps its newline)"
    )
    assert "NLSECRET" not in r.stderr and not (tmp_path / "run").exists()


def test_an_empty_top_logprobs_entry_is_refused_when_top_k_was_asked():
    from mismatchscope.probe.samplers.server_answers import completion_of as _completion

    choice = {"index": 0, "logprobs": {"tokens": ["token_id:5"], "token_logprobs": [-0.5], "top_logprobs": [{}]}}
    with pytest.raises(SamplerError) as e:
        _completion(0, 0, choice, k=1)
    assert str(e.value) == (
        "POST /v1/completions: choices[0].logprobs.top_logprobs[0] is empty, but 1 top logprobs were "
        "asked for (it should list the sampled token 5, tokens[0])"
    )


def test_a_failed_writer_leaves_no_lock_in_a_folder_that_was_there(tmp_path):
    from mismatchscope.rundir import lock_run

    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(RuntimeError):
        with lock_run(out):
            raise RuntimeError("a start that failed")
    assert list(out.iterdir()) == []
    (out / ".lock").write_text("")  # a lock file that was there before stays
    with pytest.raises(RuntimeError):
        with lock_run(out):
            raise RuntimeError("a start that failed")
    assert [p.name for p in out.iterdir()] == [".lock"]


def test_redact_removes_url_credentials_and_tokens():
    from mismatchscope.redact import redact, redact_url

    assert redact_url("http://user:pa%40ss@host:8000/v1") == "http://<redacted>@host:8000/v1"
    assert redact_url("http://host:8000") == "http://host:8000"
    assert redact("--url=https://u:p@w@h/x and http://h/p?a=b@c") == "--url=https://<redacted>@h/x and http://h/p?a=b@c"
    assert (
        redact('echo {"authorization": "Bearer sk-123456"}', ["sk-123456"])
        == 'echo {"authorization": "<redacted> <redacted>"}'
    )
    assert redact("Authorization: Bearer abc.def") == "Authorization: <redacted> <redacted>"
    assert redact("the api_key=hunter22 was sent") == "the api_key=<redacted> was sent"
    # ordinary text keeps its words
    assert (
        redact("token 17 at position 3; max_tokens=16; basic checks")
        == "token 17 at position 3; max_tokens=16; basic checks"
    )


@pytest.mark.parametrize(
    "url",
    [
        "http://h:8000/v1?token=SECRETVALUE",
        "http://h/v1?x=1&access_token=SECRETVALUE",
        "http://h/?key=SECRETVALUE",
        "http://h/?secret=SECRETVALUE",
        "http://h/?password=SECRETVALUE",
        "http://h/?auth=SECRETVALUE#x",
        "https://bucket/o?X-Amz-Signature=SECRETVALUE&max_tokens=3",
        "https://h/?sig=SECRETVALUE",
    ],
)
def test_credential_query_parameters_are_redacted_everywhere(url):
    from mismatchscope.redact import redact, redact_command, redact_obj, redact_url

    for shown in (
        redact_url(url),
        redact(f"cannot reach {url}: refused"),
        " ".join(redact_command(["--url", url])),
        json.dumps(redact_obj({"sampler": {"url": url}})),
    ):
        assert "SECRETVALUE" not in shown and "<redacted>" in shown, shown
    assert redact("the server said SECRETVALUE") == "the server said <redacted>"  # the value alone, once seen
