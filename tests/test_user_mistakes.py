"""A user's mistake is one line and exit 2, never "please report it": each case here once crashed."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from mismatchscope.errors import CheckpointError, UsageError
from tests.helpers import REPO, SAMPLE_PAIRS, cli, pairs

GOLDEN = REPO / "tests" / "data" / "golden-probe"
TINY = REPO / "sample_data" / "tiny-qwen3"


def _one_line(r, *parts: str) -> None:
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith("error: ") and r.stderr.count("\n") == 1, r.stderr
    for p in parts:
        assert p in r.stderr, r.stderr


# -- the reward function -----------------------------------------------------------------------

REWARDS = """
def raises(*, prompt, completion, answer):
    raise KeyError("score")

def text(*, prompt, completion, answer):
    return "1.0"

def huge(*, prompt, completion, answer):
    return 10 ** 400

def positional(prompt):
    return 1.0

def fine(*, prompt, completion, answer):
    return 0.5
"""


@pytest.fixture
def rewards_module(tmp_path, monkeypatch):
    (tmp_path / "my_rewards.py").write_text(REWARDS)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "my_rewards"
    sys.modules.pop("my_rewards", None)


@pytest.mark.parametrize(
    "name, message",
    [
        ("raises", "--reward-fn my_rewards:raises on the prompt 'What is 2+2?' raised KeyError: 'score'"),
        ("text", "--reward-fn my_rewards:text on the prompt 'What is 2+2?' returned '1.0', not a number"),
        ("huge", "--reward-fn my_rewards:huge on the prompt 'What is 2+2?' returned 1000000000"),
    ],
)
def test_a_reward_function_that_fails_is_named_with_the_prompt(rewards_module, name, message):
    from mismatchscope.probe.rewards import load_reward_fn

    fn = load_reward_fn(f"{rewards_module}:{name}")
    with pytest.raises(UsageError) as e:
        fn(prompt="What is 2+2?", completion="4", answer="4")
    assert str(e.value).startswith(message)
    assert load_reward_fn(f"{rewards_module}:fine")(prompt="p", completion="c", answer=None) == 0.5


def test_a_reward_function_with_the_wrong_signature_is_refused_when_loaded(rewards_module):
    from mismatchscope.probe.rewards import load_reward_fn

    with pytest.raises(UsageError, match=r"cannot be called as fn\(prompt=..., completion=..., answer=...\)"):
        load_reward_fn(f"{rewards_module}:positional")


# -- options and inputs ------------------------------------------------------------------------


def test_a_seed_beyond_64_bits_and_a_malformed_ipv6_url_are_option_errors():
    from mismatchscope.probe.engine_checks import check_sampler
    from mismatchscope.probe.options import check_sampling
    from mismatchscope.probe.types import SamplerConfig, SamplingConfig

    with pytest.raises(UsageError, match=r"--seed must be in 0..9223372036854775807"):
        check_sampling(SamplingConfig(seed=2**64))
    with pytest.raises(UsageError, match=r"is not a valid URL \(Invalid IPv6 URL\)") as e:
        check_sampler(SamplerConfig(kind="vllm-server", url="http://[::1:8000/v1?token=s3cr3tvalue"))
    assert "s3cr3tvalue" not in str(e.value)


def test_a_non_utf8_out_is_refused_before_anything_is_written(tmp_path):
    out = os.fsdecode(os.fsencode(str(tmp_path)) + b"/run-\xff")
    r = cli(
        "probe", str(TINY), "--prompts", str(REPO / "sample_data" / "prompts.jsonl"), "--sampler", "hf", "--out", out
    )
    _one_line(r, "the path is not valid UTF-8")
    assert list(tmp_path.iterdir()) == []


def test_a_file_given_as_a_checkpoint_is_named_as_a_file():
    from mismatchscope.probe.checkpoint import inspect_checkpoint

    with pytest.raises(CheckpointError, match="config.json' is a file, not a checkpoint folder"):
        inspect_checkpoint(TINY / "config.json")


def test_a_world_size_of_zero_is_named_as_such(tmp_path):
    from mismatchscope.live import Recorder

    with pytest.raises(UsageError, match="world_size must be a positive integer .*got 0"):
        Recorder(tmp_path / "run", rank=0, world_size=0)
    assert list(tmp_path.iterdir()) == []


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


def test_a_limit_at_infinity_is_refused():
    r = cli("gate", str(SAMPLE_PAIRS), "--absolute-only", "--limit", "tv_token_mean<=inf")
    _one_line(r, "tv_token_mean: max inf is no limit")


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda m: m.update(config=[1]), "manifest.json: config is [1], not a table"),
        (
            lambda m: m["config"]["sampling"].update(temperature="hot"),
            "manifest.json: config.sampling.temperature is 'hot', not a number",
        ),
        (
            lambda m: m["config"]["checkpoint"].update(path=5),
            "manifest.json: config.checkpoint.path is 5, not a string",
        ),
    ],
)
def test_rescore_of_a_manifest_with_a_wrongly_typed_field(tmp_path, edit, message):
    run = Path(shutil.copytree(GOLDEN, tmp_path / "run"))
    manifest = json.loads((run / "manifest.json").read_text())
    edit(manifest)
    (run / "manifest.json").write_text(json.dumps(manifest))
    r = cli("rescore", str(run), "--out", str(tmp_path / "again"))
    _one_line(r, message)
    assert not (tmp_path / "again").exists()


def test_shard_metadata_with_a_wrongly_typed_section(tmp_path):
    from mismatchscope.schema import write_table

    write_table(tmp_path / "a.parquet", pairs([(0, 0, 0.5, 0.25)]), {"trainer_checkpoint": [1]})
    _one_line(cli("report", str(tmp_path / "a.parquet")), "'trainer_checkpoint' = [1], not a table")


def test_a_matrix_file_that_is_not_utf8(tmp_path):
    from mismatchscope.diagnose.variants import load_matrix

    path = tmp_path / "m.toml"
    path.write_bytes(b'[variant.a]\n"sampler.dtype" = "\xff"\n')
    with pytest.raises(UsageError, match=r"m.toml is not UTF-8 text \(byte 0xff at offset 31\)"):
        load_matrix(path)
