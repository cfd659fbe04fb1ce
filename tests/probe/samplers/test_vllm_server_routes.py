"""The ``vllm-server`` sampler's MoE routes, from a crafted server on loopback in vLLM's exact encoding.

vLLM's CPU build cannot return routed experts, so no real server here can.
The crafted one answers as vLLM 0.22+ started with
``--enable-return-routed-experts`` does: each choice of ``/v1/completions``
carries ``routed_experts``, ``numpy2base64`` of a ``[prompt + completion -
1, decoder layers, top_k]`` uint8 array (``np.save`` with
``allow_pickle=False``, then base64). The bundled tiny-qwen3-moe has 2
decoder layers, both MoE, top-2 of 8 experts.

Every choice completes the prompt with tokens 5, 6; row ``r`` of a prompt
of length ``P`` routes layer ``l`` to ``{(r + l) % 8, (r + l + 3) % 8}``:
never one expert twice, never all zeros.
"""

from __future__ import annotations

import base64
import io
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pyarrow.parquet as pq
import pytest

from mismatchscope.errors import SamplerError
from mismatchscope.probe.checkpoint import inspect_checkpoint
from mismatchscope.probe.samplers import make_sampler
from mismatchscope.probe.types import SamplerConfig, SamplingConfig
from tests.helpers import cli
from tests.probe.conftest import checkpoint_dir

SAMPLING = SamplingConfig(temperature=1.0, n=1, max_tokens=2, top_k_logprobs=1, logprobs_mode="processed_logprobs")


def served_routes(prompt_len: int, completion_len: int = 2) -> np.ndarray:
    r = np.arange(prompt_len + completion_len - 1)[:, None] + np.arange(2)[None, :]
    return np.stack([r % 8, (r + 3) % 8], -1).astype(np.uint8)


def numpy2base64(array: np.ndarray) -> str:
    """vLLM's ``vllm.utils.serial_utils.numpy2base64``."""
    with io.BytesIO() as buffer:
        np.save(buffer, array, allow_pickle=False)
        return base64.b64encode(buffer.getbuffer()).decode("ascii")


class _Server(BaseHTTPRequestHandler):
    routes_field: object = "served"
    """"served": each choice's routes as above; None: no field (a server started without the flag); else sent."""

    def log_message(self, *args):
        pass

    def _answer(self, payload: dict, status: int = 200):
        body = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path == "/v1/models":
            card = {"id": "tiny-qwen3-moe", "root": str(checkpoint_dir("tiny-qwen3-moe")), "max_model_len": 320}
            return self._answer({"object": "list", "data": [card]})
        return self._answer({"error": "not found"}, 404)

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path != "/v1/completions":
            return self._answer({}, 404)
        if body.get("top_k") == 1 and body.get("max_tokens") == 4:  # the logprobs-mode check: processed
            lp = {"tokens": ["token_id:5"], "token_logprobs": [0.0], "top_logprobs": [{"token_id:5": 0.0}]}
            return self._answer({"choices": [{"index": 0, "logprobs": lp}]})
        choices = []
        for i, prompt in enumerate(body["prompt"]):
            choice = {
                "index": i,
                "token_ids": [5, 6],
                "finish_reason": "length",
                "logprobs": {
                    "tokens": ["token_id:5", "token_id:6"],
                    "token_logprobs": [-0.5, -1.0],
                    "top_logprobs": [{"token_id:5": -0.5}, {"token_id:6": -1.0}],
                },
            }
            if self.routes_field == "served":
                choice["routed_experts"] = numpy2base64(served_routes(len(prompt)))
            elif self.routes_field is not None:
                choice["routed_experts"] = self.routes_field
            choices.append(choice)
        return self._answer({"choices": choices})


@pytest.fixture
def server():
    handler = type("Handler", (_Server,), {})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", handler
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


def _sampler(url: str):
    info = inspect_checkpoint(checkpoint_dir("tiny-qwen3-moe"))
    return make_sampler(SamplerConfig(kind="vllm-server", url=url, dtype="float32", engine_args={"timeout": 10}), info)


PROMPTS = [[11, 12, 13], [21, 22, 23, 24, 25]]


def test_the_servers_routes_are_the_samplers(server):
    url, _ = server
    sampler = _sampler(url)
    completions = sampler.sample(PROMPTS, SAMPLING)
    for c, prompt in zip(completions, PROMPTS, strict=True):
        # both decoder layers route, so the MoE-layer routes are the served array: 3 + 2 - 1 = 4 rows, 5 + 2 - 1 = 6
        assert c.routes.ids.tolist() == served_routes(len(prompt)).tolist()
    status = sampler.routes_status()
    assert status.recorded and not status.weights


def test_a_server_without_routes_says_why_in_one_line(server):
    url, handler = server
    handler.routes_field = None
    sampler = _sampler(url)
    assert all(c.routes is None for c in sampler.sample(PROMPTS, SAMPLING))
    status = sampler.routes_status()
    assert not status.recorded
    assert status.why.startswith("the vLLM server returned no routed_experts: start it (vLLM 0.22 or later) with ")


@pytest.mark.parametrize(
    "field, message",
    [
        (
            numpy2base64(served_routes(3, 1)),  # one row short for a 3-token prompt and 2 tokens
            "choices[0].routed_experts: 3 route rows; a 3-token prompt and 2-token completion starting at 0 "
            "need len(tokens) - 1 - start = 4",
        ),
        (numpy2base64(served_routes(3) + 8), "choices[0].routed_experts: input position 0, decoder layer 0: expert id"),
        ([[1, 2]], "choices[0].routed_experts should be a base64 .npy string, got [[1, 2]]"),
        ("not base64!", "choices[0].routed_experts: not a base64 .npy array (routed_experts is not valid base64)"),
    ],
)
def test_routes_that_do_not_fit_the_model_are_one_error(server, field, message):
    url, handler = server
    handler.routes_field = field
    with pytest.raises(SamplerError, match="POST /v1/completions: ") as e:
        _sampler(url).sample([[11, 12, 13]], SAMPLING)
    assert message in str(e.value)


@pytest.mark.slow  # a probe: the trainer scores in a child process
def test_a_probe_records_the_servers_routes_beside_the_trainers(server, tmp_path):
    url, _ = server
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"prompt": "1+1="}\n{"prompt": "12+30="}\n')
    out = tmp_path / "run"
    r = cli(
        "probe", str(checkpoint_dir("tiny-qwen3-moe")), "--prompts", str(prompts), "--out", str(out),
        "--sampler", "vllm-server", "--url", url, "--sampler-dtype", "float32", "-n", "1", "--max-tokens", "2",
        "--top-k-logprobs", "1", "--format", "json",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["routing"]["sampler"] == {"recorded": True, "weights": False, "why": None}
    assert manifest["routing"]["trainer"]["recorded"]
    prompt_ids = pq.read_table(out / "prompts.parquet")["prompt_token_ids"].to_pylist()
    routes = pq.read_table(out / "routes").sort_by([("sequence_id", "ascending"), ("input_position", "ascending")])
    for sid, prompt in enumerate(prompt_ids):
        rows = routes.filter(routes["sequence_id"].to_numpy() == sid)
        assert rows["sampler_experts"].to_pylist() == served_routes(len(prompt)).tolist()
        assert all(t is not None for t in rows["trainer_experts"].to_pylist())
    routing = json.loads(r.stdout)["report"]["routing"]
    assert routing["sides"]["sampler"]["recorded"] and routing["tokens_compared"] == 4  # 2 sequences x 2 tokens
