"""The ``vllm-server`` sampler against a real vLLM OpenAI server on 127.0.0.1.

Pins: for the same checkpoint, dtype, logprobs mode and seed, the server
returns the same completions as the in-process engine, token for token, with
the same sampled and top-k logprobs (``-9999.0`` read back as -inf; on CPU
they were bitwise equal, the test allows 1e-6 in case batching differs), and so
the same agreement with the trainer; the checks before sampling refuse a
server on another model, with another tokenizer, or in another logprobs
mode; the API key never reaches ``describe()``; an unreachable URL is a
clear :class:`SamplerConnectionError`.
"""

from __future__ import annotations

import dataclasses
import io
import json
import math
import shutil
import threading

import pytest

from mismatchscope.errors import (
    CheckpointError,
    SamplerConnectionError,
    SamplerError,
    TokenizerMismatchError,
    UsageError,
)
from mismatchscope.probe.checkpoint import inspect_checkpoint
from mismatchscope.probe.samplers import make_sampler
from mismatchscope.probe.types import SamplerConfig, SamplingConfig
from tests.helpers import cli_no_engine as cli
from tests.probe._probe_utils import gap, max_diff, requests_for
from tests.probe.conftest import free_port
from tests.probe.refusals import (
    CHECKPOINT,
    GOOD_CHOICE,
    KEY,
    choice,
    error_line,
    needs_checkpoint,
    refused_probe,
    sample_from,
)

SAMPLING = SamplingConfig(n=4, max_tokens=16, temperature=0.7, top_p=0.9, top_k_logprobs=5, seed=0)


def _server_sampler(url: str, info, **engine_args):
    return make_sampler(SamplerConfig(kind="vllm-server", url=url, dtype="float32", engine_args=engine_args), info)


def _one_prompt(info) -> list[list[int]]:
    from mismatchscope.probe.tokenizer import load_tokenizer

    return [load_tokenizer(info.path).encode("12+34=")]


@pytest.fixture(scope="module")
def server_sampler(vllm_server, dense_info):
    return _server_sampler(vllm_server, dense_info)


@pytest.mark.vllm
def test_server_gives_the_offline_engines_completions_and_logprobs(
    server_sampler, vllm_sampler, dense_info, dense_trainer, dense_prompt_ids
):
    offline = vllm_sampler(dense_info, "float32", "processed_logprobs")
    greedy = dataclasses.replace(SAMPLING, temperature=0.0)  # n copies of each prompt, n=1 each
    for sampling in (SAMPLING, dataclasses.replace(SAMPLING, temperature=1.0, top_p=1.0, seed=3), greedy):
        served = server_sampler.sample(dense_prompt_ids, sampling)
        local = offline.sample(dense_prompt_ids, sampling)
        assert [(c.prompt_index, c.sample_index) for c in served] == [(c.prompt_index, c.sample_index) for c in local]
        assert [c.token_ids for c in served] == [c.token_ids for c in local]
        assert [c.finish_reason for c in served] == [c.finish_reason for c in local]
        assert [c.topk_ids for c in served] == [c.topk_ids for c in local]
        worst = 0.0
        for s, o in zip(served, local, strict=True):
            worst = max([worst, *(gap(a, b) for a, b in zip(s.sampler_logprobs, o.sampler_logprobs, strict=True))])
            for rs, ro in zip(s.topk_logprobs, o.topk_logprobs, strict=True):
                worst = max([worst, *(gap(a, b) for a, b in zip(rs, ro, strict=True))])
        assert worst < 1e-6, worst
        scored = dense_trainer.score(requests_for(served, dense_prompt_ids), sampling)
        assert max_diff(served, scored) < 1e-4
    # top-p 0.9 cut some listed ids: the server's -9999.0 came back as -inf
    cut = server_sampler.sample(dense_prompt_ids, SAMPLING)
    assert any(lp == -math.inf for c in cut for row in c.topk_logprobs for lp in row)


@pytest.mark.vllm
def test_describe_reports_the_checks_and_never_the_key(vllm_server, dense_info, monkeypatch):
    monkeypatch.setenv("PROBE_TEST_KEY", "sk-not-to-be-recorded")
    sampler = make_sampler(
        SamplerConfig(kind="vllm-server", url=vllm_server + "/v1/", api_key_env="PROBE_TEST_KEY"), dense_info
    )
    sampler.sample(_one_prompt(dense_info), SAMPLING)
    info = sampler.describe()
    assert "sk-not-to-be-recorded" not in json.dumps(info)
    assert info["api_key_set"] is True and info["api_key_env"] == "PROBE_TEST_KEY"
    assert info["checks"]["logprobs_mode"] == "processed_logprobs"
    assert info["checks"]["tokenizer"].startswith("same ids")
    assert info["engine"] == "vllm-server" and info["version"] and info["url"] == vllm_server


@pytest.mark.vllm
def test_a_server_in_another_logprobs_mode_is_refused(server_sampler, dense_prompt_ids):
    with pytest.raises(UsageError, match="--logprobs-mode raw_logprobs"):
        server_sampler.sample(dense_prompt_ids, dataclasses.replace(SAMPLING, logprobs_mode="raw_logprobs"))


@pytest.mark.vllm
def test_a_server_on_another_model_is_refused(vllm_server, moe_info):
    with pytest.raises(CheckpointError, match="not the checkpoint 'tiny-qwen3-moe'"):
        _server_sampler(vllm_server, moe_info)


@pytest.mark.vllm
def test_a_server_with_another_tokenizer_is_refused(vllm_server, dense_dir, dense_prompt_ids, tmp_path):
    """Our copy of the checkpoint has two digit tokens swapped: the server's ids differ from ours."""
    copy = tmp_path / dense_dir.name
    shutil.copytree(dense_dir, copy)
    spec = json.loads((copy / "tokenizer.json").read_text())
    vocab = spec["model"]["vocab"]
    vocab["1"], vocab["2"] = vocab["2"], vocab["1"]
    (copy / "tokenizer.json").write_text(json.dumps(spec))
    sampler = _server_sampler(vllm_server, inspect_checkpoint(copy))
    with pytest.raises(TokenizerMismatchError, match=r"tokenizes prompt \d+ .* but the checkpoint's tokenizer gives"):
        sampler.sample(dense_prompt_ids, SAMPLING)


def test_an_unreachable_server_is_a_clear_error(dense_info):
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(SamplerConnectionError, match=f"cannot reach the vLLM server at {url}") as err:
        _server_sampler(url, dense_info, timeout=5)
    assert isinstance(err.value, ConnectionError) and "--url" in str(err.value)


def test_the_server_sampler_needs_a_url(dense_info):
    with pytest.raises(UsageError, match="URL"):
        make_sampler(SamplerConfig(kind="vllm-server"), dense_info)


@needs_checkpoint
def test_a_well_formed_answer_is_read(server):
    url, handler = server
    handler.routes["completions"] = (200, json.dumps({"choices": [GOOD_CHOICE]}).encode())
    (c,) = sample_from(url)
    assert c.token_ids == [5, 6] and c.sampler_logprobs == [-0.5, -1.0]


@needs_checkpoint
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
        (choice(logprobs=KeyError), "POST /v1/completions: choices[0].logprobs should be an object, got missing"),
        (choice(index="0"), "POST /v1/completions: choices[0].index should be an integer, got str '0'"),
        (choice(index=3), "POST /v1/completions: choices[].index should number the choices 0..0, got [3]"),
        (
            choice(logprobs__tokens=KeyError),
            "POST /v1/completions: choices[0].logprobs.tokens should be a list, got missing",
        ),
        (
            choice(logprobs__token_logprobs=[-0.5]),
            "POST /v1/completions: choices[0].logprobs: 2 tokens but 1 token_logprobs",
        ),
        (
            choice(logprobs__token_logprobs=[-0.5, "x"]),
            "POST /v1/completions: choices[0].logprobs.token_logprobs[1] should be a number, got 'x'",
        ),
        (
            choice(logprobs__top_logprobs=[{}]),
            "POST /v1/completions: choices[0].logprobs: 2 tokens but 1 top_logprobs",
        ),
        (
            choice(logprobs__top_logprobs=[[1], None]),
            "POST /v1/completions: choices[0].logprobs.top_logprobs[0] should be an object, got list [1]",
        ),
        (
            choice(logprobs__top_logprobs=[{"token_id:5": None, "token_id:7": "a"}, None]),
            "POST /v1/completions: choices[0].logprobs.top_logprobs[0] values[1] should be a number, got 'a'",
        ),
        (
            choice(logprobs__tokens=["token_id:5", "token_id:x"]),
            "POST /v1/completions: choices[0].logprobs.tokens: 'token_id:x' does not end in an integer id",
        ),
        (
            choice(logprobs__tokens=["token_id:5", 6]),
            "POST /v1/completions: choices[0].logprobs.tokens: the server returned token 6, not 'token_id:N': it ignored "
            "return_tokens_as_token_ids",
        ),
        (
            choice(token_ids=[5, 6.5]),
            "POST /v1/completions: choices[0].token_ids[1] should be an integer, got float 6.5",
        ),
        (choice(token_ids=[5, 7]), "POST /v1/completions: choices[0]: token_ids and logprobs.tokens disagree"),
    ],
)
def test_malformed_answers_name_the_field(server, answer, message):
    url, handler = server
    handler.routes["completions"] = (200, json.dumps(answer).encode())
    with pytest.raises(SamplerError) as err:
        sample_from(url)
    assert str(err.value) == message


@needs_checkpoint
def test_an_answer_that_is_not_json_or_cut_short(server):
    url, handler = server
    handler.routes["completions"] = (200, b"<html>oops</html>")
    with pytest.raises(SamplerError) as err:
        sample_from(url)
    assert str(err.value) == f"POST {url}/v1/completions answered with something that is not JSON (17 bytes)"
    handler.routes["completions"] = (200, b'{"choices": [', 4096)  # Content-Length promises more than comes
    with pytest.raises(SamplerError) as err:
        sample_from(url)
    assert str(err.value) == f"POST {url}/v1/completions: the server's answer was cut short or garbled (IncompleteRead)"


@needs_checkpoint
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
        sample_from(url)
    assert str(err.value) == message


@needs_checkpoint
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


@needs_checkpoint
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


def _raw_answer(server, body: bytes):
    url, handler = server
    handler.routes["completions"] = (200, body)
    return sample_from(url)


@needs_checkpoint
@pytest.mark.parametrize(
    "answer, message",
    [
        (
            choice(logprobs__top_logprobs=[{"token_id:9": -0.1}, None]),
            "POST /v1/completions: choices[0].logprobs.top_logprobs[0] does not list the sampled token 5 (tokens[0])",
        ),
        (
            choice(logprobs__token_logprobs=[None, None]),
            "POST /v1/completions: choices[0].logprobs.token_logprobs[0] should be a number, got null",
        ),
        (
            choice(logprobs__tokens=["token_id:5", "token_id:-3"], token_ids=None),
            "POST /v1/completions: choices[0].logprobs.tokens: 'token_id:-3' is not a token id of the model (0..319) "
            "(is the server serving another model or tokenizer?)",
        ),
        (
            choice(logprobs__tokens=["token_id:5", "token_id:320"], token_ids=None),  # vocab_size 320: ids 0..319
            "POST /v1/completions: choices[0].logprobs.tokens: 'token_id:320' is not a token id of the model (0..319) "
            "(is the server serving another model or tokenizer?)",
        ),
        (
            choice(logprobs__top_logprobs=[{"token_id:5": -0.5, "token_id:-1": -2.0}, None]),
            "POST /v1/completions: choices[0].logprobs.top_logprobs[0]: 'token_id:-1' is not a token id of the model (0..319) "
            "(is the server serving another model or tokenizer?)",
        ),
        (
            choice(logprobs__token_logprobs=[2.5, -1.0]),
            "POST /v1/completions: choices[0].logprobs.token_logprobs[0] is 2.5, which is not a logprob (logprobs are <= 0) "
            "(is the server in a logits --logprobs-mode?)",
        ),
        (
            choice(logprobs__top_logprobs=[{"token_id:5": -0.5, "token_id:9": 0.5}, None]),
            "POST /v1/completions: choices[0].logprobs.top_logprobs[0] values[1] is 0.5, which is not a logprob (logprobs are "
            "<= 0) (is the server in a logits --logprobs-mode?)",
        ),
    ],
)
def test_server_answers_that_cannot_be_right_name_the_field(server, answer, message):
    with pytest.raises(SamplerError) as err:
        _raw_answer(server, json.dumps(answer).encode())
    assert str(err.value) == message


@needs_checkpoint
def test_server_infinities(server):
    """JSON's Infinity is no logprob; -Infinity is -inf, as vLLM's -9999.0 is; 1e-5 is rounding, kept as sent."""
    body = json.dumps(choice(logprobs__token_logprobs=[-1.0, -1.0], logprobs__top_logprobs=None)).replace(
        "-1.0, -1.0", "%s"
    )
    with pytest.raises(SamplerError) as err:
        _raw_answer(server, (body % "Infinity, -1.0").encode())
    assert str(err.value) == (
        "POST /v1/completions: choices[0].logprobs.token_logprobs[0] is inf, which is not a logprob "
        "(logprobs are <= 0) (is the server in a logits --logprobs-mode?)"
    )
    with pytest.raises(SamplerError, match=r"token_logprobs\[1\] should be a number, got nan"):
        _raw_answer(server, (body % "-1.0, NaN").encode())
    (c,) = _raw_answer(server, (body % "-Infinity, 1e-05").encode())
    assert c.sampler_logprobs == [-math.inf, 1e-05]
    (c,) = _raw_answer(server, (body % "-9999.0, -0.25").encode())
    assert c.sampler_logprobs == [-math.inf, -0.25]


@needs_checkpoint
def test_a_bad_answer_through_the_cli_leaves_no_run(server, tmp_path):
    url, handler = server
    handler.routes["completions"] = (200, json.dumps(choice(logprobs__token_logprobs=[2.5, -1.0])).encode())
    line = refused_probe(
        tmp_path, "--sampler", "vllm-server", "--url", url, "-n", "1", "--max-tokens", "2", "--top-k-logprobs", "1"
    )
    assert line == (
        "error: POST /v1/completions: choices[0].logprobs.token_logprobs[0] is 2.5, which is not a logprob "
        "(logprobs are <= 0) (is the server in a logits --logprobs-mode?)"
    )


@needs_checkpoint
def test_a_server_that_does_not_answer_in_time(server):
    url, handler = server
    answered = threading.Event()

    def slow(h):  # answers once the client has given up (the server's close waits for this thread)
        answered.wait(30)
        h.wfile = io.BytesIO()  # into nothing: the client's socket is closed, a write would break its pipe
        return json.dumps({"choices": [GOOD_CHOICE]}).encode()

    handler.routes["completions"] = (200, slow)
    # 2 s: the requests before the completion are answered at once, also on a loaded machine
    with pytest.raises(SamplerError) as err:
        sample_from(url, timeout=2.0)
    answered.set()
    assert str(err.value) == (
        f"POST {url}/v1/completions: the vLLM server did not answer within 2 s "
        "(raise --engine-arg timeout=SECONDS (default 600), or check the server)"
    )
