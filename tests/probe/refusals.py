"""What the tests of the probe's refusals share: a crafted vLLM server on loopback, and the probe refused.

The server (the ``server`` fixture of ``tests/probe/conftest.py``) is a real HTTP server on 127.0.0.1 answering
the bodies a test crafts: what a proxy, a server of another version or a broken one could send. No vLLM engine
starts behind it.
"""

from __future__ import annotations

import json
import shutil
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from mismatchscope.probe.checkpoint import inspect_checkpoint
from mismatchscope.probe.samplers import make_sampler
from mismatchscope.probe.types import SamplerConfig, SamplingConfig
from tests.helpers import REPO
from tests.helpers import cli_no_engine as cli

CHECKPOINT = REPO / "sample_data" / "tiny-qwen3"
PROMPTS = REPO / "sample_data" / "prompts.jsonl"
ONE_PROMPT = '{"prompt": "1+1="}\n'
KEY = "sk-test-0123456789"
SAMPLING = SamplingConfig(n=1, max_tokens=2, top_k_logprobs=1, seed=0)

needs_checkpoint = pytest.mark.skipif(not (CHECKPOINT / "config.json").is_file(), reason="needs the bundled tiny-qwen3")
"""What every test of the probe's refusals needs: the bundled checkpoint they are refused against."""


def error_line(r) -> str:
    """The error line of a refused probe: exit 2, no traceback, one ``error`` line and the last one (notes and
    progress may come before it)."""
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr
    errors = [line for line in r.stderr.strip().splitlines() if line.startswith("error")]
    assert len(errors) == 1 and r.stderr.strip().splitlines()[-1] == errors[0], r.stderr
    return errors[0]


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


class Crafted(BaseHTTPRequestHandler):
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


def sample_from(url: str, **engine_args):
    """One prompt sampled through a ``vllm-server`` sampler pointed at ``url``."""
    info = inspect_checkpoint(CHECKPOINT)
    sampler = make_sampler(
        SamplerConfig(kind="vllm-server", url=url, dtype="float32", engine_args={"timeout": 10, **engine_args}), info
    )
    return sampler.sample([[5, 6, 7]], SAMPLING)


def choice(**changes):
    """An answer of one choice: GOOD_CHOICE with ``a__b=value`` set (``KeyError``: removed)."""
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


def prompts_file(tmp_path: Path, text: str = ONE_PROMPT) -> Path:
    """A prompts file holding text (one prompt by default)."""
    path = tmp_path / "prompts.jsonl"
    path.write_text(text)
    return path


def refused_probe(tmp_path: Path, *args: str, checkpoint: Path = CHECKPOINT, prompts: Path | None = None) -> str:
    """The one error line of a probe refused before its run directory exists."""
    out = tmp_path / "run"
    r = cli("probe", str(checkpoint), "--out", str(out), "--prompts", str(prompts or prompts_file(tmp_path)), *args)
    line = error_line(r)
    assert not out.exists(), "the run directory was made before the refusal"
    return line


def checkpoint_copy(tmp_path: Path, name: str = "ckpt") -> Path:
    """A copy of the bundled checkpoint to break."""
    return Path(shutil.copytree(CHECKPOINT, tmp_path / name))


def edit_json(path: Path, **changes) -> None:
    """Update the top-level keys of the JSON file at path."""
    data = json.loads(path.read_text())
    data.update(changes)
    path.write_text(json.dumps(data))


def probe_unstarted(tmp_path: Path, *args: str, prompts: Path | None = None):
    """probe with these options, which must not have made its run directory."""
    out = tmp_path / "run"
    r = cli("probe", str(CHECKPOINT), "--out", str(out), *(["--prompts", str(prompts)] if prompts else []), *args)
    assert not out.exists(), "the run directory was created before the options were checked"
    return r
