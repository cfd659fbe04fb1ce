"""Probe errors that need no engine: options refused before the run directory
exists, and a vLLM server whose answers are malformed or echo the API key.

The server here is a real HTTP server on 127.0.0.1 started by the test,
answering crafted bodies: what a proxy, a server of another version or a
broken one could send. No vLLM engine starts in this module.
"""

from __future__ import annotations

import json
import shutil
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from mismatchscope.errors import SamplerError
from mismatchscope.probe.checkpoint import inspect_checkpoint
from mismatchscope.probe.samplers import make_sampler
from mismatchscope.probe.types import SamplerConfig, SamplingConfig
from tests.helpers import REPO
from tests.helpers import cli_no_engine as cli

CHECKPOINT = REPO / "sample_data" / "tiny-qwen3"
PROMPTS = REPO / "sample_data" / "prompts.jsonl"
KEY = "sk-test-0123456789"
SAMPLING = SamplingConfig(n=1, max_tokens=2, top_k_logprobs=1, seed=0)

pytestmark = pytest.mark.skipif(not (CHECKPOINT / "config.json").is_file(), reason="needs the bundled tiny-qwen3")


def error_line(r) -> str:
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr
    errors = [line for line in r.stderr.strip().splitlines() if line.startswith("error")]
    assert len(errors) == 1 and r.stderr.strip().splitlines()[-1] == errors[0], r.stderr
    return errors[0]


# ---- options refused before anything exists ---------------------------------------


def _probe(tmp_path: Path, *args: str, prompts: Path | None = None):
    out = tmp_path / "run"
    r = cli("probe", str(CHECKPOINT), "--out", str(out), *(["--prompts", str(prompts)] if prompts else []), *args)
    assert not out.exists(), "the run directory was created before the options were checked"
    return r


@pytest.mark.parametrize(
    "args, message",
    [
        (["--sampler", "vlm"], "--sampler 'vlm' is not a sampler (use one of vllm, vllm-server, hf)"),
        (
            ["--sampler-dtype", "float33"],
            "--sampler-dtype 'float33' is not a dtype (use one of float32, float16, bfloat16, auto)",
        ),
        (
            ["--sampler", "hf", "--sampler-dtype", "auto"],
            "--sampler-dtype 'auto' is not a dtype (use one of float32, float16, bfloat16)",
        ),
        (["--trainer-dtype", "bf17"], "--trainer-dtype 'bf17' is not a dtype (use one of float32, float16, bfloat16)"),
        (
            ["--attn-implementation", "sdpaa"],
            "--attn-implementation 'sdpaa' is not an attention implementation (use one of eager, "
            "sdpa, flash_attention_2, flash_attention_3, flash_attention_4, flex_attention (or a hub kernel, org/repo))",
        ),
        (
            ["--max-model-len", "321"],
            "--max-model-len 321 is beyond the model's context of 320 tokens (pass at most --max-model-len 320, "
            "or leave it out)",
        ),
        (["--max-model-len", "0"], "--max-model-len must be at least 1, got 0"),
        (
            ["--top-k-logprobs", "321"],
            "--top-k-logprobs 321 is more than the model's 320 tokens (pass at most --top-k-logprobs 320)",
        ),
        (["--top-k", "1000"], "--top-k 1000 is more than the model's 320 tokens (pass -1 for no top-k truncation)"),
        (["--top-k", "-5"], "--top-k must be -1 (off) or at least 0, got -5"),
        (["--logprobs-mode", "logits"], "--logprobs-mode 'logits' (use processed_logprobs or raw_logprobs)"),
        (
            ["--sampler", "vllm-server", "--url", "localhost:8000"],
            "--url 'localhost:8000' is not an http(s) URL (write --url http://HOST:PORT)",
        ),
        (
            ["--sampler", "vllm-server", "--url", "http://u:hunter22@h:80x"],
            "--url 'http://<redacted>@h:80x' has a port that is not a number",
        ),
        (["--gpu-memory-utilization", "1.5"], "--gpu-memory-utilization must be in (0, 1], got 1.5"),
        (["--top-p", "0"], "--top-p must be in (0, 1], got 0 (1 keeps the whole distribution)"),
        (
            ["--temperature", "inf"],
            "--temperature inf is not a temperature the trainer can divide its logits by (pass the finite "
            "temperature the sampler ran at (1 for plain sampling))",
        ),
        (
            ["--temperature", "1e-30"],  # vLLM samples greedily below 1e-5: once silently greedy while 0 was greedy too
            "--temperature 1e-30 is below 1e-05, where vLLM ignores the temperature and samples greedily (pass 0 "
            "for greedy sampling, or a temperature of at least 1e-05)",
        ),
        (["--trainer-device", "gpu7"], "--trainer-device 'gpu7' is not a torch device (e.g. cpu, cuda, cuda:1)"),
        (["--trainer-device", "cuda:64"], None),
        (["--device-map", "everywhere"], "--device-map 'everywhere' is not a torch device (e.g. cpu, cuda, cuda:1)"),
    ],
)
def test_options_that_would_fail_late_fail_first(tmp_path, args, message):
    if message is None:  # depends on the machine: no CUDA at all, or fewer than 65 devices
        import torch

        count = torch.cuda.device_count()
        message = (
            "--trainer-device cuda:64: no CUDA device is visible (use cpu, or check CUDA_VISIBLE_DEVICES)"
            if count == 0
            else f"--trainer-device cuda:64: only {count} CUDA device(s) are visible (use cuda:0 to cuda:{count - 1})"
        )
    assert error_line(_probe(tmp_path, *args)) == f"error: {message}"


def test_an_empty_prompt_is_refused_before_the_run(tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "1+1="}\n{"prompt": ""}\n')
    assert (
        error_line(_probe(tmp_path, prompts=prompts))
        == "error: prompt 1 is empty (remove empty lines from the prompts file)"
    )


def test_a_prompts_file_that_is_not_utf8(tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_bytes(b'{"prompt": "1+1="}\n{"prompt": "caf\xe9"}\n')
    assert error_line(_probe(tmp_path, prompts=prompts)) == (
        f"error: {prompts}:2: not UTF-8 text (byte 0xe9 at column 16) (save the prompts file as UTF-8)"
    )


def test_a_prompts_file_nested_too_deeply(tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("[" * 100_000 + "]" * 100_000 + "\n")
    assert error_line(_probe(tmp_path, prompts=prompts)) == f"error: {prompts}:1: JSON nested too deeply"


def test_an_out_that_is_a_file(tmp_path):
    out = tmp_path / "run"
    out.write_text("x")
    r = cli("probe", str(CHECKPOINT), "--out", str(out), "--sampler", "hf")
    assert error_line(r) == f"error: --out {out} exists and is not a directory (give --out a folder)"
    assert out.read_text() == "x"


def _refused(*args: str):
    r = cli("probe", *args)
    error_line(r)
    return r


def test_inputs_refused_before_the_vllm_engine_starts(tmp_path):
    """The default sampler (vLLM): each refusal comes before an engine would start, so none starts here."""
    r = _refused(str(tmp_path / "nope"), "--prompts", str(PROMPTS), "--out", str(tmp_path / "o1"))
    assert "does not exist" in r.stderr
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert "empty" in _refused(str(CHECKPOINT), "--prompts", str(empty), "--out", str(tmp_path / "o2")).stderr
    long = tmp_path / "long.jsonl"
    long.write_text(json.dumps({"prompt": "1+1=" * 200}) + "\n")
    assert (
        "--max-tokens"
        in _refused(str(CHECKPOINT), "--prompts", str(long), "--max-tokens", "8", "--out", str(tmp_path / "o3")).stderr
    )
    # a tokenizer with another vocabulary on the sampler side
    other = tmp_path / "other-tok"
    other.mkdir()
    spec = json.loads((CHECKPOINT / "tokenizer.json").read_text())
    vocab = spec["model"]["vocab"]
    first, second = list(vocab)[10], list(vocab)[11]
    vocab[first], vocab[second] = vocab[second], vocab[first]  # same tokens, two ids swapped
    (other / "tokenizer.json").write_text(json.dumps(spec))
    shutil.copy(CHECKPOINT / "tokenizer_config.json", other / "tokenizer_config.json")
    r = _refused(
        str(CHECKPOINT), "--prompts", str(PROMPTS), "--sampler-tokenizer", str(other), "--out", str(tmp_path / "o4")
    )
    assert "tokenizer" in r.stderr.lower()
    pickled = tmp_path / "pickled"
    shutil.copytree(CHECKPOINT, pickled)
    (pickled / "model.safetensors").rename(pickled / "pytorch_model.bin")
    assert "--allow-pickle" in _refused(str(pickled), "--prompts", str(PROMPTS), "--out", str(tmp_path / "o5")).stderr


def test_rescore_checks_trainer_options_before_creating_its_run(tmp_path):
    src, out = tmp_path / "src", tmp_path / "new"
    src.mkdir()
    assert error_line(cli("rescore", str(src), "--out", str(out), "--trainer-dtype", "f32x")) == (
        "error: --trainer-dtype 'f32x' is not a dtype (use one of float32, float16, bfloat16)"
    )
    assert error_line(cli("rescore", str(src), "--out", str(src))) == (
        f"error: --out {src} is the run being rescored (give the rescored run a new directory)"
    )
    assert not out.exists()


# ---- a crafted vLLM server on loopback ----------------------------------------------


MODEL_CARD = {"object": "list", "data": [{"id": "tiny-qwen3", "root": str(CHECKPOINT), "max_model_len": 64}]}
MODE_ANSWER = {
    "choices": [
        {
            "index": 0,
            "logprobs": {"tokens": ["token_id:5"], "token_logprobs": [0.0], "top_logprobs": [{"token_id:5": 0.0}]},
        }
    ]
}
GOOD_CHOICE = {
    "index": 0,
    "token_ids": [5, 6],
    "finish_reason": "length",
    "logprobs": {
        "tokens": ["token_id:5", "token_id:6"],
        "token_logprobs": [-0.5, -1.0],
        "top_logprobs": [{"token_id:5": -0.5, "token_id:9": -1.5}, {"token_id:6": -1.0}],
    },
}


class _Crafted(BaseHTTPRequestHandler):
    routes: dict = {}
    seen: list = []

    def log_message(self, *args):  # keep the test output clean
        pass

    def _answer(self, status: int, body: bytes, length: int | None = None):
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body) if length is None else length))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path == "/v1/models":
            return self._answer(*self.routes.get("models", (200, json.dumps(MODEL_CARD).encode())))
        return self._answer(404, b'{"error": "not found"}')

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.seen.append(dict(self.headers))
        if self.path == "/tokenize":
            return self._answer(404, b"{}")
        if body.get("top_k") == 1 and body.get("max_tokens") == 4:
            return self._answer(200, json.dumps(MODE_ANSWER).encode())
        status, payload, *length = self.routes["completions"]
        if callable(payload):
            payload = payload(self)
        return self._answer(status, payload, *length)


@pytest.fixture
def server():
    """(url, set_routes): a real HTTP server on 127.0.0.1 answering what the test crafts."""
    handler = type("Handler", (_Crafted,), {"routes": {}, "seen": []})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    # server_close() waits for the request threads: an answer the client gave up on (a timeout test) is not
    # written, nor its broken pipe reported, while a later test runs the command line in this process
    httpd.daemon_threads = False
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", handler
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


def _sample(url: str, **engine_args):
    info = inspect_checkpoint(CHECKPOINT)
    sampler = make_sampler(
        SamplerConfig(kind="vllm-server", url=url, dtype="float32", engine_args={"timeout": 10, **engine_args}), info
    )
    return sampler.sample([[5, 6, 7]], SAMPLING)


def test_a_well_formed_answer_is_read(server):
    url, handler = server
    handler.routes["completions"] = (200, json.dumps({"choices": [GOOD_CHOICE]}).encode())
    (c,) = _sample(url)
    assert c.token_ids == [5, 6] and c.sampler_logprobs == [-0.5, -1.0]


def _choice(**changes):
    choice = json.loads(json.dumps(GOOD_CHOICE))
    for path, value in changes.items():
        *parents, leaf = path.split("__")
        target = choice
        for p in parents:
            target = target[p]
        if value is KeyError:
            del target[leaf]
        else:
            target[leaf] = value
    return {"choices": [choice]}


@pytest.mark.parametrize(
    "answer, message",
    [
        ({"choices": "x"}, "POST /v1/completions: choices should be a list, got str 'x'"),
        ({"data": []}, "POST /v1/completions: the answer has no field 'choices'"),
        (
            {"object": "error", "message": f"bad request from Bearer {KEY}"},
            "POST /v1/completions: the answer has no field 'choices' (the server says: bad request from Bearer <redacted>)",
        ),
        ([1, 2], "POST /v1/completions: the answer should be an object, got list [1, 2]"),
        ({"choices": []}, "the server returned 0 choices for 1 prompts x n=1"),
        ({"choices": [GOOD_CHOICE, {**GOOD_CHOICE, "index": 1}]}, "the server returned 2 choices for 1 prompts x n=1"),
        (
            {"choices": [GOOD_CHOICE, GOOD_CHOICE]},
            "POST /v1/completions: choices[].index should number the choices 0..1, got [0, 0]",
        ),
        (_choice(logprobs=KeyError), "POST /v1/completions: choices[0].logprobs should be an object, got missing"),
        (_choice(index="0"), "POST /v1/completions: choices[0].index should be an integer, got str '0'"),
        (_choice(index=3), "POST /v1/completions: choices[].index should number the choices 0..0, got [3]"),
        (
            _choice(logprobs__tokens=KeyError),
            "POST /v1/completions: choices[0].logprobs.tokens should be a list, got missing",
        ),
        (
            _choice(logprobs__token_logprobs=[-0.5]),
            "POST /v1/completions: choices[0].logprobs: 2 tokens but 1 token_logprobs",
        ),
        (
            _choice(logprobs__token_logprobs=[-0.5, "x"]),
            "POST /v1/completions: choices[0].logprobs.token_logprobs[1] should be a number, got 'x'",
        ),
        (
            _choice(logprobs__top_logprobs=[{}]),
            "POST /v1/completions: choices[0].logprobs: 2 tokens but 1 top_logprobs",
        ),
        (
            _choice(logprobs__top_logprobs=[[1], None]),
            "POST /v1/completions: choices[0].logprobs.top_logprobs[0] should be an object, got list [1]",
        ),
        (
            _choice(logprobs__top_logprobs=[{"token_id:5": None, "token_id:7": "a"}, None]),
            "POST /v1/completions: choices[0].logprobs.top_logprobs[0] values[1] should be a number, got 'a'",
        ),
        (
            _choice(logprobs__tokens=["token_id:5", "token_id:x"]),
            "POST /v1/completions: choices[0].logprobs.tokens: 'token_id:x' does not end in an integer id",
        ),
        (
            _choice(logprobs__tokens=["token_id:5", 6]),
            "POST /v1/completions: choices[0].logprobs.tokens: the server returned token 6, not 'token_id:N': it ignored "
            "return_tokens_as_token_ids",
        ),
        (
            _choice(token_ids=[5, 6.5]),
            "POST /v1/completions: choices[0].token_ids[1] should be an integer, got float 6.5",
        ),
        (_choice(token_ids=[5, 7]), "POST /v1/completions: choices[0]: token_ids and logprobs.tokens disagree"),
    ],
)
def test_malformed_answers_name_the_field(server, answer, message):
    url, handler = server
    handler.routes["completions"] = (200, json.dumps(answer).encode())
    with pytest.raises(SamplerError) as err:
        _sample(url)
    assert str(err.value) == message


def test_an_answer_that_is_not_json_or_cut_short(server):
    url, handler = server
    handler.routes["completions"] = (200, b"<html>oops</html>")
    with pytest.raises(SamplerError) as err:
        _sample(url)
    assert str(err.value) == f"POST {url}/v1/completions answered with something that is not JSON (17 bytes)"
    handler.routes["completions"] = (200, b'{"choices": [', 4096)  # Content-Length promises more than comes
    with pytest.raises(SamplerError) as err:
        _sample(url)
    assert str(err.value) == f"POST {url}/v1/completions: the server's answer was cut short or garbled (IncompleteRead)"


@pytest.mark.parametrize(
    "models, message",
    [
        (b"[]", "GET /v1/models: the answer should be an object, got list []"),
        (b'{"data": [{"root": "x"}]}', "GET /v1/models: data[0].id is missing or not a string"),
        (b'{"data": "tiny-qwen3"}', "GET /v1/models: data should be a list, got str 'tiny-qwen3'"),
    ],
)
def test_a_malformed_model_list(server, models, message):
    url, handler = server
    handler.routes["models"] = (200, models)
    with pytest.raises(SamplerError) as err:
        _sample(url)
    assert str(err.value) == message


def test_a_server_that_echoes_the_key_does_not_leak_it(server, tmp_path):
    """The error body holds the request's headers; stderr must hold neither the key nor the bearer token."""
    url, handler = server

    def echo(h):
        return json.dumps({"error": "unauthorized", "headers": dict(h.headers), "seen": f"Bearer {KEY}"}).encode()

    handler.routes["completions"] = (401, echo)
    out = tmp_path / "run"
    r = cli(
        "probe",
        str(CHECKPOINT),
        "--out",
        str(out),
        "--sampler",
        "vllm-server",
        "--url",
        url,
        "-n",
        "1",
        "--max-tokens",
        "2",
        env={"MISMATCHSCOPE_API_KEY": KEY},
    )
    line = error_line(r)
    assert KEY not in r.stderr and KEY not in r.stdout
    assert handler.seen and handler.seen[-1]["Authorization"] == f"Bearer {KEY}"  # the key was sent, and echoed
    assert line.startswith(f"error: POST {url}/v1/completions failed with HTTP 401: ")
    assert line.endswith("(set the key in $MISMATCHSCOPE_API_KEY)")
    assert '"Authorization": "<redacted> <redacted>"' in line
    assert not out.exists()  # refused before a round was sampled: the run took back what it wrote, manifest included


def test_url_credentials_are_sent_as_a_header_and_never_recorded(server, tmp_path):
    url, handler = server
    handler.routes["completions"] = (200, json.dumps({"choices": [GOOD_CHOICE]}).encode())
    secret_url = url.replace("http://", "http://alice:s3cr3t-pw@")
    out, prompts = tmp_path / "run", tmp_path / "one.jsonl"
    prompts.write_text('{"prompt": "1+1="}\n')  # one prompt, one crafted choice: the run completes and is recorded
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
        "--top-k-logprobs",
        "1",
        "--format",
        "json",
        "--prompts",
        str(prompts),
    )
    assert r.returncode == 0, r.stderr
    assert handler.seen and handler.seen[-1]["Authorization"].startswith("Basic ")
    everything = r.stdout + r.stderr + "".join(p.read_text(errors="replace") for p in out.rglob("*.json"))
    everything += "".join(str(p.read_bytes()) for p in out.rglob("*.parquet"))
    assert "s3cr3t-pw" not in everything and "alice" not in everything
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["config"]["sampler"]["url"] == url.replace("http://", "http://<redacted>@")
    assert manifest["fingerprint"]["sampler"]["url"] == url.replace("http://", "http://<redacted>@")
    assert all("s3cr3t" not in a for a in manifest["command"])
