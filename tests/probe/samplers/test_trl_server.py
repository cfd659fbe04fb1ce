"""``--sampler trl-server``: a running ``trl vllm-serve``, spoken to as TRL 1.x's own client does.

``trl vllm-serve`` (TRL 1.16.0) runs vLLM's own OpenAI server with processed
logprobs and dev mode (``/server_info``). Its real server does not start on
these CPUs (docs/probe.md says why), so the sampler is tested against:

* a real HTTP server on 127.0.0.1 answering as a dev-mode server does
  (``/server_info`` with the launch's ``logprobs_mode``), for what only a TRL
  launch has: the mode read from ``/server_info``, a server in another mode
  refused, a probe asking for raw logprobs refused;
* the shared real vLLM server (``vllm_server``: tiny-qwen3, fp32, processed
  logprobs, what ``trl vllm-serve`` runs, without dev mode), for the real
  protocol: the same completions and logprobs as the ``vllm-server`` sampler,
  the mode measured, and a probe through the command line that records and
  reports a run.
"""

from __future__ import annotations

import json

import pytest

from mismatchscope.errors import UsageError
from mismatchscope.probe.checkpoint import inspect_checkpoint
from mismatchscope.probe.samplers import make_sampler
from mismatchscope.probe.types import SamplerConfig, SamplingConfig
from tests.probe.refusals import CHECKPOINT, GOOD_CHOICE, SAMPLING, Crafted


def _trl_sampler(url: str, info=None, timeout: int = 10):
    """The crafted servers answer at once (10 s); the real one's first request on a loaded machine can take
    minutes, so the real-server test gives the default timeout's order."""
    info = info or inspect_checkpoint(CHECKPOINT)
    config = SamplerConfig(kind="trl-server", url=url, dtype="float32", engine_args={"timeout": timeout})
    return make_sampler(config, info)


class _DevMode(Crafted):
    """A dev-mode server: ``/server_info`` gives the launch's logprobs mode; request bodies are kept."""

    mode = "processed_logprobs"
    dtype = "torch.bfloat16"  # what vLLM's /server_info writes for the resolved dtype (pydantic, fallback=str)
    dev_mode = True
    bodies: list = []

    def do_GET(self):
        if self.path.startswith("/server_info") and self.dev_mode:
            info = {"vllm_config": {"model_config": {"logprobs_mode": self.mode, "dtype": self.dtype}}}
            return self._answer(200, json.dumps(info).encode())
        return super().do_GET()

    def do_POST(self):
        length = int(self.headers["Content-Length"])
        raw = self.rfile.read(length)
        self.bodies.append(json.loads(raw))
        self.rfile = __import__("io").BytesIO(raw)  # read again by the base handler
        return super().do_POST()


@pytest.fixture
def dev_server():
    import threading
    from http.server import ThreadingHTTPServer

    handler = type("Handler", (_DevMode,), {"routes": {}, "seen": [], "bodies": []})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = False
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", handler
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


def test_the_mode_is_read_from_server_info_and_recorded(dev_server):
    url, handler = dev_server
    handler.routes["completions"] = (200, json.dumps({"choices": [GOOD_CHOICE]}).encode())
    sampler = _trl_sampler(url)
    (c,) = sampler.sample([[5, 6, 7]], SAMPLING)
    assert c.token_ids == [5, 6] and c.sampler_logprobs == [-0.5, -1.0]
    d = sampler.describe()
    assert d["engine"] == "trl-server" and d["logprobs_mode"] == "processed_logprobs"
    assert d["checks"]["logprobs_mode_source"].startswith("GET /server_info")
    body = handler.bodies[-1]  # VLLMClient.generate's keys, prompt as ids, tokens back as ids
    for key in ("prompt", "n", "repetition_penalty", "temperature", "top_p", "top_k", "min_p", "max_tokens"):
        assert key in body
    assert body["prompt"] == [[5, 6, 7]] and body["return_token_ids"] and body["return_tokens_as_token_ids"]
    assert body["logprobs"] == 1 and body["top_k"] == 0


def test_the_sampler_dtype_is_the_servers_not_the_probes_flag(dev_server):
    """The probe asks for float32 (its --sampler-dtype); the server runs bfloat16: the run records bfloat16,
    and, from a server without /server_info, unknown (once the probe's flag, in certify's scope too)."""
    from mismatchscope.certify.scope import scope_of

    url, handler = dev_server
    handler.routes["completions"] = (200, json.dumps({"choices": [GOOD_CHOICE]}).encode())
    sampler = _trl_sampler(url)
    sampler.sample([[5, 6, 7]], SAMPLING)
    d = sampler.describe()
    assert (d["dtype"], d["requested_dtype"]) == ("bfloat16", "float32")
    manifest = {"sampler_info": d, "config": {"sampler": {"kind": "trl-server", "dtype": "float32"}}}
    assert scope_of(manifest, None)["sampler_dtype"] == "bfloat16"
    handler.dev_mode = False
    blind = _trl_sampler(url)
    blind.sample([[5, 6, 7]], SAMPLING)
    assert blind.describe()["dtype"] == "unknown"
    manifest["sampler_info"] = blind.describe()
    assert scope_of(manifest, None)["sampler_dtype"] == "unknown"


def test_a_server_in_another_mode_was_not_started_by_trl(dev_server):
    url, handler = dev_server
    handler.mode = "raw_logprobs"
    with pytest.raises(UsageError, match="not started by trl vllm-serve"):
        _trl_sampler(url).sample([[5, 6, 7]], SAMPLING)


def test_a_probe_asking_for_raw_logprobs_is_refused(dev_server):
    url, _ = dev_server
    raw = SamplingConfig(n=1, max_tokens=2, top_k_logprobs=1, seed=0, logprobs_mode="raw_logprobs")
    with pytest.raises(UsageError, match="trl vllm-serve returns processed_logprobs"):
        _trl_sampler(url).sample([[5, 6, 7]], raw)


@pytest.mark.vllm
def test_against_the_real_server_as_the_vllm_server_sampler(vllm_server, dense_info, dense_prompt_ids):
    """The same server, the same seed: TRL's request gives the vllm-server sampler's tokens and logprobs."""
    sampling = SamplingConfig(n=2, max_tokens=8, temperature=0.7, top_p=0.9, top_k_logprobs=3, seed=0)
    trl = _trl_sampler(vllm_server, dense_info, timeout=600)
    plain = make_sampler(SamplerConfig(kind="vllm-server", url=vllm_server, dtype="float32"), dense_info)
    got, want = trl.sample(dense_prompt_ids[:2], sampling), plain.sample(dense_prompt_ids[:2], sampling)
    assert [c.token_ids for c in got] == [c.token_ids for c in want]
    assert [c.sampler_logprobs for c in got] == [c.sampler_logprobs for c in want]
    d = trl.describe()
    assert d["logprobs_mode"] == "processed_logprobs" and d["checks"]["logprobs_mode_source"].startswith("measured")


@pytest.mark.vllm
def test_a_probe_against_the_server_records_and_reports_a_run(vllm_server, tmp_path):
    from tests.helpers import cli_no_engine

    out = tmp_path / "run"
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(
        "".join(json.dumps({"prompt": p, "answer": a}) + "\n" for p, a in (("1+1=", "2"), ("2+3=", "5")))
    )
    r = cli_no_engine(
        "probe", str(CHECKPOINT), "--sampler", "trl-server", "--url", vllm_server, "--prompts", str(prompts),
        "--out", str(out), "-n", "1", "--max-tokens", "4", "--top-k-logprobs", "1",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    manifest = json.loads((out / "manifest.json").read_text())
    sampler = json.dumps(manifest)
    assert '"trl-server"' in sampler and "processed_logprobs" in sampler
    rep = cli_no_engine("report", str(out), "--format", "json")
    assert rep.returncode == 0 and json.loads(rep.stdout)["tokens"] > 0
    text = cli_no_engine("report", str(out), env={"COLUMNS": "200"}).stdout
    assert "trl vllm-serve: processed logprobs, trainer scored the same way at T=" in text


def test_the_trl_server_sampler_needs_a_url(tmp_path):
    from tests.helpers import cli_no_engine

    r = cli_no_engine("probe", str(CHECKPOINT), "--sampler", "trl-server", "--out", str(tmp_path / "run"))
    assert r.returncode == 2 and "--sampler trl-server needs --url" in r.stderr
    assert not (tmp_path / "run").exists()
