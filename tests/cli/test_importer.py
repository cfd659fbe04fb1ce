"""``mismatchscope import`` through the real console script, then the analysis
commands on its output: the path a user with NeMo-RL dumps takes."""

import json
import math

import pytest

from tests.helpers import cli
from tests.importers.layouts import import_cli, jsonl_file, nemo_sample, write_nemo_step
from tests.inputs import error_line, jsonl_dump


def test_import_nemo_rl_then_report_and_timeline(tmp_path):
    logs = tmp_path / "logs" / "exp_001"
    # step 1: one sample, 2 prompt tokens + 3 generated; q = [0.5, 0.2, 0.9], p = [0.2, 0.6, 0.9]
    s1 = nemo_sample(
        [5, 6],
        [7, 8, 9],
        [math.log(0.5), math.log(0.2), math.log(0.9)],
        [math.log(0.2), math.log(0.6), math.log(0.9)],
        adv=1.0,
        reward=1.0,
    )
    # step 2: identical logprobs on both sides
    s2 = nemo_sample(
        [5, 6], [7, 8], [math.log(0.5), math.log(0.5)], [math.log(0.5), math.log(0.5)], adv=-1.0, reward=0.0
    )
    write_nemo_step(logs, 1, [s1])
    write_nemo_step(logs, 2, [s2])
    out = tmp_path / "imported"
    r = cli("import", "nemo-rl", str(tmp_path / "logs"), "--out", str(out), "--format", "json")
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    # 5 generated tokens kept; 2 + 2 prompt tokens dropped by the loss mask
    assert res["tokens_written"] == 5 and res["tokens_dropped_by_mask"] == 4
    rep = json.loads(cli("report", str(out), "--format", "json").stdout)
    # tv = [0.3, 0.4, 0, 0, 0] -> mean 0.14
    assert rep["tokens"] == 5 and abs(rep["metrics"]["tv_token_mean"] - 0.14) < 1e-9
    tl = cli("timeline", str(out), "--format", "json")
    assert tl.returncode == 0, tl.stderr


def test_import_unknown_format_exits_2(tmp_path):
    r = cli("import", "openrlhf", str(tmp_path), "--out", str(tmp_path / "o"))
    assert r.returncode == 2 and "unknown import format" in r.stderr


@pytest.mark.parametrize(
    "columns, message",
    [
        (
            ["sampler_logprob=trainer_logprobs"],
            "--column sampler_logprob=trainer_logprobs makes sampler_logprob and trainer_logprob both read the column "
            "'trainer_logprobs' (map trainer_logprob to another column too)",
        ),
        (
            ["sampler_logprob=lp", "trainer_logprob=lp"],
            "--column trainer_logprob=lp makes sampler_logprob and trainer_logprob both read the column 'lp' "
            "(map the other one to another column too)",
        ),
    ],
)
def test_import_mappings_that_read_one_column_twice(tmp_path, columns, message):
    dump = jsonl_dump(
        tmp_path, '{"token_ids": [5], "sampler_logprobs": [-0.5], "trainer_logprobs": [-0.4], "lp": [-0.1]}'
    )
    args = [a for c in columns for a in ("--column", c)]
    assert error_line(cli("import", "jsonl", str(dump), "--out", str(tmp_path / "out"), *args)) == f"error: {message}"


def test_a_column_mapped_twice_is_refused(tmp_path):
    """import used the last mapping (b); report refuses the same options."""
    path = jsonl_file(
        tmp_path, '{"token_ids": [5, 6], "a": [-0.5, -1.0], "b": [-0.1, -0.2], "trainer_logprobs": [-0.4, -1.1]}\n'
    )
    r = import_cli("jsonl", path, tmp_path / "out", "--column", "sampler_logprob=a", "--column", "sampler_logprob=b")
    assert (
        error_line(r)
        == "error: --column 'sampler_logprob=b': sampler_logprob is already mapped to 'a' (map each column once)"
    )
    assert not (tmp_path / "out" / "tokens").exists()


def test_trust_pickle_outside_slime_is_refused(tmp_path):
    # once accepted without a word on formats that hold no pickle, as if it had changed something
    path = jsonl_file(tmp_path, '{"token_ids": [5], "sampler_logprobs": [-0.5], "trainer_logprobs": [-0.4]}\n')
    r = cli("import", "jsonl", str(path), "--out", str(tmp_path / "out"), "--trust-pickle")
    assert error_line(r) == (
        "error: --trust-pickle applies to the pickled dumps of slime, skyrl, verl, roll; jsonl files hold no pickle "
        "(drop --trust-pickle)"
    )
